//! Arbitrary window quotas, alignments and operation sequences on a `FixedWindow`, every answer
//! compared with the exact reference model to the nanosecond (the model and the driver are
//! `testkit`'s, as for `tests/fixed_window_model.rs`; only the way inputs are generated differs).

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::fuzz_input as shared_input;
use testkit::reference::fixed as fixed_reference;

use fixed_reference::{run, Op, Spec};
use shared_input::{list, request, start, step};
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

/// The calls every limiter answers (two in three), clock steps in windows.
fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 | 1 => Op::Call(request(u)?),
        _ => Op::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let spec = Spec {
            count: count(u)?,
            period_ns: period_ns(u)?,
            offset: u.arbitrary()?,
            start: start(u)?,
        };
        Ok(Input {
            spec,
            ops: list(u, MAX_OPS, op)?,
        })
    }
}

fuzz_target!(|input: Input| {
    if let Some(model) = run(input.spec, &input.ops) {
        assert!(model.counts().all(|c| c <= input.spec.count));
    }
});
