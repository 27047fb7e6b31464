//! Arbitrary quotas and operation sequences on a small key space of a `KeyedLimiter`, with evictions
//! as arbitrary as the rest and clock steps both ways: every answer compared with a map of exact
//! reference buckets, and the evicting limiter with one that never evicts.
//!
//! The model and the driver are the files the proptest in `tests/keyed_model.rs` uses; only the way
//! inputs are generated differs.

#![no_main]

#[path = "../../tests/support/reference.rs"]
#[allow(dead_code)] // a keyed limiter has no refund: the model's is unused here
mod reference;

#[path = "../../tests/support/keyed_driver.rs"]
mod keyed_driver;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;

use keyed_driver::{quota, run, KeyedOp, MAX_OPS};

/// One fuzz input: a quota, a starting reading and the operations.
#[derive(Debug)]
struct Input {
    count: u64,
    period_ns: u64,
    capacity: u64,
    start: u64,
    ops: Vec<KeyedOp>,
}

/// Token counts: mostly small, sometimes any.
fn n(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 | 1 => 1,
        2 => u.int_in_range(0..=10)?,
        _ => u.arbitrary()?,
    })
}

/// Clock steps: up to a few seconds, or any distance.
fn step(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => u.int_in_range(0..=1_000_000_000)?,
        1 => u.int_in_range(0..=20_000_000_000)?,
        _ => u.arbitrary()?,
    })
}

fn op(u: &mut Unstructured<'_>) -> Result<KeyedOp> {
    // Eight keys: reused, evicted and created again.
    let key = u.int_in_range(0..=7u8)?;
    Ok(match u.int_in_range(0..=9u8)? {
        0..=3 => KeyedOp::Check { key, n: n(u)? },
        4 => KeyedOp::Peek { key, n: n(u)? },
        5 => KeyedOp::Remaining { key },
        6 => KeyedOp::Evict,
        7 | 8 => KeyedOp::Forward(step(u)?),
        _ => KeyedOp::Back(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let count = match u.int_in_range(0..=2u8)? {
            0 => u.int_in_range(1..=20)?,
            1 => u.int_in_range(1..=1_000_000)?,
            _ => u.arbitrary()?,
        };
        let period_ns = match u.int_in_range(0..=2u8)? {
            0 => u.int_in_range(1..=2_000_000_000)?,
            1 => u.int_in_range(0..=1_000_000)?,
            _ => u.arbitrary()?,
        };
        let capacity = match u.int_in_range(0..=2u8)? {
            0 | 1 => u.int_in_range(1..=8)?,
            _ => u.arbitrary()?,
        };
        let start = match u.int_in_range(0..=2u8)? {
            0 => 0,
            1 => u.int_in_range(0..=1 << 50)?,
            _ => u.arbitrary()?,
        };
        let len = u.int_in_range(0..=MAX_OPS)?;
        let mut ops = Vec::with_capacity(len);
        for _ in 0..len {
            ops.push(op(u)?);
        }
        Ok(Input {
            count,
            period_ns,
            capacity,
            start,
            ops,
        })
    }
}

fuzz_target!(|input: Input| {
    if let Some((quota, policy)) = quota(input.count, input.period_ns, input.capacity) {
        run(quota, policy, input.start, &input.ops);
    }
});
