//! Arbitrary window quotas, alignments and operation sequences on a `FixedWindow`, every answer
//! compared with the exact reference model to the nanosecond (the model and the driver are
//! `testkit`'s, as for `tests/fixed_window_model.rs`; only the way inputs are generated differs).

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::reference::fixed as fixed_reference;

use fixed_reference::{run, Op, Spec};
use testkit::consts::MAX_USABLE_NS;

/// The most operations one input runs.
const MAX_OPS: usize = 256;

#[derive(Debug)]
struct Input {
    spec: Spec,
    ops: Vec<Op>,
}

/// Small counts mostly (windows that fill up), any count sometimes.
fn count(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 | 1 => u.int_in_range(1..=4)?,
        2 => u.int_in_range(1..=1_000)?,
        _ => u.arbitrary()?,
    })
}

/// Window lengths from 1 ns to 2^62 ns and past it.
fn period_ns(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(1..=1_000)?,
        1 => u.int_in_range(1..=10_000_000_000)?,
        2 => u.int_in_range(1..=MAX_USABLE_NS)?,
        _ => u.arbitrary()?,
    })
}

/// Clock steps: small, around a window, backwards, and anything.
fn step(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => 0,
        1 => u.int_in_range(0..=1_000)?,
        2 => u.int_in_range(0..=100_000_000_000)?,
        3 => u.int_in_range(-100_000_000_000..=0)?,
        _ => u.arbitrary()?,
    })
}

fn amount(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 | 1 => 1,
        2 => u.int_in_range(0..=5)?,
        _ => u.arbitrary()?,
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let spec = Spec {
            count: count(u)?,
            period_ns: period_ns(u)?,
            offset: u.arbitrary()?,
            start: match u.int_in_range(0..=2u8)? {
                0 => 0,
                1 => u.int_in_range(0..=1 << 50)?,
                _ => u.arbitrary()?,
            },
        };
        let len = u.int_in_range(0..=MAX_OPS)?;
        let mut ops = Vec::with_capacity(len);
        for _ in 0..len {
            ops.push(match u.int_in_range(0..=3u8)? {
                0 | 1 => Op::Acquire {
                    n: amount(u)?,
                    step: step(u)?,
                },
                2 => Op::Peek {
                    n: amount(u)?,
                    step: step(u)?,
                },
                _ => Op::Remaining { step: step(u)? },
            });
        }
        Ok(Input { spec, ops })
    }
}

fuzz_target!(|input: Input| {
    if let Some(model) = run(input.spec, &input.ops) {
        assert!(model.counts().all(|c| c <= input.spec.count));
    }
});
