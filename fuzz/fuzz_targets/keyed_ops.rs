//! Arbitrary quotas and operation sequences on a small key space of a `KeyedLimiter`, with evictions
//! as arbitrary as the rest and clock steps both ways. For the token bucket, every answer compared
//! with a map of exact reference buckets, and the evicting limiter with one that never evicts; for
//! every other algorithm (leaky meter, fixed window, sliding counter, sliding log, a tiered window),
//! the evicting limiter with one that never evicts.
//!
//! The model and the drivers are `testkit`'s, as for the proptests in `tests/keyed_model.rs`; only
//! the way inputs are generated differs.

#![no_main]

use std::time::Duration;
use testkit::driver::keyed as keyed_driver;
use testkit::driver::keyed_pair;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use tollgate::keyed::{
    FixedWindowKeys, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys, Tiered,
};
use tollgate::Quota;

use keyed_driver::{quota, run, KeyedOp, MAX_OPS};
use keyed_pair::run_pair;
use shared_input::{amount, call, list, start, step, wait};
use testkit::fuzz_input as shared_input;

/// One fuzz input: an algorithm, a quota, a starting reading and the operations.
#[derive(Debug)]
struct Input {
    /// 0: the token bucket against its reference; 1..=5: the other algorithms, pairwise.
    algorithm: u8,
    count: u64,
    period_ns: u64,
    capacity: u64,
    start: u64,
    ops: Vec<KeyedOp>,
}

/// The calls every limiter answers on one of eight keys (reused, evicted and created again), the
/// token bucket's reservations, cancels and partial takes (skipped for the other algorithms),
/// evictions, clock steps in intervals.
fn op(u: &mut Unstructured<'_>) -> Result<KeyedOp> {
    let key = u.int_in_range(0..=7u8)?;
    Ok(match u.int_in_range(0..=12u8)? {
        0..=5 => KeyedOp::Call {
            key,
            call: call(u)?,
        },
        6 => KeyedOp::Reserve {
            key,
            n: amount(u)?,
            wait: wait(u)?,
        },
        7 => KeyedOp::Cancel {
            index: u.arbitrary()?,
        },
        8 => KeyedOp::TakeUpTo { key, n: amount(u)? },
        9 => KeyedOp::Evict,
        _ => KeyedOp::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let algorithm = u.int_in_range(0..=5u8)?;
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
        let start = start(u)?;
        let ops = list(u, MAX_OPS, op)?;
        Ok(Input {
            algorithm,
            count,
            period_ns,
            capacity,
            start,
            ops,
        })
    }
}

fuzz_target!(|input: Input| {
    if input.algorithm == 0 {
        if let Some((quota, policy)) = quota(input.count, input.period_ns, input.capacity) {
            run(quota, policy, input.start, &input.ops);
        }
        return;
    }
    // The window algorithms take the quota as "count per period" (capacity = count); the ones
    // that refuse it say so with an error, which `run_pair` checks.
    let Ok(quota) = Quota::per_period(input.count, Duration::from_nanos(input.period_ns)) else {
        return;
    };
    let (start, ops) = (input.start, &input.ops[..]);
    match input.algorithm {
        1 => run_pair::<LeakyMeterKeys>(quota, start, ops),
        2 => run_pair::<FixedWindowKeys>(quota, start, ops),
        3 => run_pair::<SlidingWindowCounterKeys>(quota, start, ops),
        4 => run_pair::<SlidingWindowLogKeys>(quota, start, ops),
        _ => run_pair::<Tiered<SlidingWindowCounterKeys>>(quota, start, ops),
    };
});
