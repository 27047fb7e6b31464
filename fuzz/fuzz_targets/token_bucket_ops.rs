//! Arbitrary quotas and operation sequences on a `TokenBucket`, every answer compared with the
//! exact reference model to the nanosecond; then the rate bound over a window of readings.
//!
//! The model and the driver are the same files the proptest in `tests/token_bucket_model.rs` uses;
//! only the way inputs are generated differs.

#![no_main]

#[path = "../../tests/support/reference.rs"]
mod reference;

#[path = "../../tests/support/bucket_driver.rs"]
mod bucket_driver;

use std::time::Duration;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;

use bucket_driver::{check_window, run, Amount, Op, QuotaSpec, Rate, Step};

/// The most operations one input runs.
const MAX_OPS: usize = 256;

/// One fuzz input: a quota, a starting reading, operations, and requests for the window check.
#[derive(Debug)]
struct Input {
    spec: QuotaSpec,
    start: u64,
    ops: Vec<Op>,
    /// The window check's quota: `spec` with a small capacity, so that the bound is tight.
    window_spec: QuotaSpec,
    /// `(offset from start, tokens)` for the window check.
    window: Vec<(u64, Amount)>,
}

/// Counts weighted towards the small, with any `u64` (and so 0 and values beyond 10^9/s) possible.
fn count(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => u.int_in_range(1..=4)?,
        1 => u.int_in_range(1..=10_000)?,
        2 => u.int_in_range(1..=1_000_000_000)?,
        3 => 3,
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
        2 => Some(max.min(u.int_in_range(1..=8)?)),
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

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    // One call in four reads the bucket's clock instead of passing the reading.
    let clock = u.ratio(1u8, 4u8)?;
    Ok(match u.int_in_range(0..=5u8)? {
        0 => Op::Acquire {
            n: amount(u)?,
            clock,
        },
        1 => Op::AcquireOne { clock },
        2 => Op::Peek {
            n: amount(u)?,
            clock,
        },
        3 => Op::Refund {
            n: amount(u)?,
            clock,
        },
        4 => Op::Remaining { clock },
        _ => Op::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let spec = quota_spec(u)?;
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
        let small = u.int_in_range(1..=8)?;
        let window_spec = QuotaSpec {
            capacity: Some(max_capacity(&spec.rate).min(small)),
            initial: None,
            ..spec
        };
        let interval_ns =
            reference::interval_ns(spec.rate.count(), spec.rate.period().as_nanos()).unwrap_or(1);
        let window_len = u.int_in_range(0..=MAX_OPS)?;
        let mut window = Vec::with_capacity(window_len);
        for _ in 0..window_len {
            let num: u8 = u.arbitrary()?;
            let den: u8 = u.int_in_range(1..=8)?;
            let offset = u128::from(num) * u128::from(interval_ns) / u128::from(den);
            let n = if u.ratio(3u8, 4u8)? {
                Amount::One
            } else {
                amount(u)?
            };
            window.push((u64::try_from(offset).unwrap_or(u64::MAX), n));
        }
        Ok(Input {
            spec,
            start,
            ops,
            window_spec,
            window,
        })
    }
}

fuzz_target!(|input: Input| {
    run(&input.spec, input.start, &input.ops);
    check_window(&input.window_spec, input.start, &input.window);
});
