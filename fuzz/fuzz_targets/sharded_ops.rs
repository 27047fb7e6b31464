//! Arbitrary quotas, shard counts and operation sequences on a `ShardedBucket`, each operation with
//! the caller's home shard chosen by the input, every answer compared with the exact sharded model
//! and the limit `C + R × t` checked after every operation.
//!
//! The model and the driver are the same files the proptest in `tests/sharded_model.rs` uses; only
//! the way inputs are generated differs.

#![no_main]

#[path = "../../tests/support/reference.rs"]
mod reference;

#[allow(dead_code)] // the sharded driver uses its quota specs and the comparison helpers only
#[path = "../../tests/support/bucket_driver.rs"]
mod bucket_driver;

#[path = "../../tests/support/sharded_reference.rs"]
mod sharded_reference;

#[path = "../../tests/support/sharded_driver.rs"]
mod sharded_driver;

use std::time::Duration;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;

use bucket_driver::{Amount, QuotaSpec, Rate, Step};
use sharded_driver::{run, Caller, ShardOp};

/// The most operations one input runs.
const MAX_OPS: usize = 256;

/// One fuzz input: a quota, a shard count (`None`: the default), a starting reading, operations.
#[derive(Debug)]
struct Input {
    spec: QuotaSpec,
    shards: Option<usize>,
    start: u64,
    ops: Vec<ShardOp>,
}

/// Counts weighted towards the small (fewer tokens than shards), with any `u64` possible.
fn count(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => u.int_in_range(1..=4)?,
        1 => u.int_in_range(1..=300)?,
        2 => u.int_in_range(1..=10_000)?,
        3 => u.int_in_range(1..=1_000_000_000)?,
        4 => 3,
        _ => u.arbitrary()?,
    })
}

fn period(u: &mut Unstructured<'_>) -> Result<Duration> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => Duration::from_nanos(u.int_in_range(0..=1_000_000)?),
        1 => Duration::from_nanos(u.arbitrary()?),
        _ => Duration::new(u.arbitrary()?, u.int_in_range(0..=999_999_999)?),
    })
}

fn rate(u: &mut Unstructured<'_>) -> Result<Rate> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => Rate::Second(count(u)?),
        1 => Rate::Minute(count(u)?),
        2 => Rate::Hour(count(u)?),
        3 => Rate::Day(count(u)?),
        _ => Rate::Period(count(u)?, period(u)?),
    })
}

/// The largest capacity the rate allows (1 for a rate the crate refuses).
fn max_capacity(rate: &Rate) -> u64 {
    reference::interval_ns(rate.count(), rate.period().as_nanos())
        .map_or(1, reference::max_capacity)
}

/// `x × a / 65535`.
fn fraction(x: u64, a: u16) -> u64 {
    u64::try_from(u128::from(x) * u128::from(a) / u128::from(u16::MAX)).unwrap_or(x)
}

fn quota_spec(u: &mut Unstructured<'_>) -> Result<QuotaSpec> {
    let rate = rate(u)?;
    let max = max_capacity(&rate);
    let capacity = match u.int_in_range(0..=6u8)? {
        0 => None,
        1 => Some(1),
        2 => Some(max.min(u.int_in_range(1..=300)?)),
        3 => Some(max.min(1 << 40)),
        4 => Some(max),
        5 => Some(fraction(max, u.arbitrary()?).max(1)),
        _ => Some(u.arbitrary()?),
    };
    let c = capacity.unwrap_or(rate.count());
    let initial = match u.int_in_range(0..=4u8)? {
        0 => None,
        1 => Some(0),
        2 => Some(c),
        3 => Some(fraction(c, u.arbitrary()?)),
        _ => Some(u.arbitrary()?),
    };
    Ok(QuotaSpec {
        rate,
        capacity,
        initial,
        initial_first: u.arbitrary()?,
    })
}

/// Valid shard counts mostly, the default, and any `usize` (which the builder must refuse unless it
/// is a power of two up to 256).
fn shards(u: &mut Unstructured<'_>) -> Result<Option<usize>> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => None,
        1 => Some(1 << u.int_in_range(0..=3u32)?),
        2 => Some(1 << u.int_in_range(0..=8u32)?),
        _ => Some(u.arbitrary()?),
    })
}

fn amount(u: &mut Unstructured<'_>) -> Result<Amount> {
    Ok(match u.int_in_range(0..=6u8)? {
        0 => Amount::Zero,
        1 => Amount::One,
        2 => Amount::Few(u.arbitrary()?),
        3 => Amount::Capacity,
        4 => Amount::AboveCapacity,
        5 => Amount::Fraction(u.arbitrary()?),
        _ => Amount::Raw(u.arbitrary()?),
    })
}

fn step(u: &mut Unstructured<'_>) -> Result<Step> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Step::Nanos(u.int_in_range(0..=1_000)?),
        1 => Step::Nanos(u.arbitrary()?),
        2 => Step::Intervals {
            num: u.int_in_range(0..=64)?,
            den: u.int_in_range(1..=16)?,
        },
        3 => Step::Years(u.arbitrary()?),
        4 => Step::ToMax,
        5 => Step::BackNanos(u.arbitrary()?),
        6 => Step::BackIntervals {
            num: u.int_in_range(0..=64)?,
            den: u.int_in_range(1..=16)?,
        },
        _ => Step::Set(u.arbitrary()?),
    })
}

/// A thread id: mostly among the first shards, sometimes anything (the limiter masks it).
fn home(u: &mut Unstructured<'_>) -> Result<usize> {
    Ok(if u.ratio(7u8, 8u8)? {
        u.int_in_range(0..=15)?
    } else {
        u.arbitrary()?
    })
}

fn caller(u: &mut Unstructured<'_>) -> Result<Caller> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Caller::At,
        1 => Caller::Clock,
        _ => Caller::From(home(u)?),
    })
}

fn op(u: &mut Unstructured<'_>) -> Result<ShardOp> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 | 1 => ShardOp::Acquire {
            n: amount(u)?,
            caller: caller(u)?,
        },
        2 => ShardOp::AcquireOne {
            clock: u.arbitrary()?,
        },
        3 => ShardOp::Peek {
            n: amount(u)?,
            clock: u.arbitrary()?,
        },
        4 => ShardOp::PeekThenAcquire {
            n: amount(u)?,
            home: home(u)?,
        },
        5 => ShardOp::Refund {
            n: amount(u)?,
            caller: caller(u)?,
        },
        6 => ShardOp::Remaining {
            clock: u.arbitrary()?,
        },
        _ => ShardOp::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let spec = quota_spec(u)?;
        let shards = shards(u)?;
        let start = match u.int_in_range(0..=2u8)? {
            0 => 0,
            1 => u.int_in_range(0..=1 << 50)?,
            _ => u.arbitrary()?,
        };
        let ops_len = u.int_in_range(0..=MAX_OPS)?;
        let mut ops = Vec::with_capacity(ops_len);
        for _ in 0..ops_len {
            ops.push(op(u)?);
        }
        Ok(Input {
            spec,
            shards,
            start,
            ops,
        })
    }
}

fuzz_target!(|input: Input| {
    run(&input.spec, input.shards, input.start, &input.ops);
});
