//! Input generation shared by the fuzz targets that drive limiters with quotas and operations
//! (`token_bucket_ops`, `sharded_ops`, `leaky_ops`, and the periods of `sliding_counter_ops` and
//! `sliding_log_ops`): one way of choosing quotas, amounts and clock steps from a fuzzer's bytes.
//! Behind the `arbitrary` feature, which only the fuzz crate enables.

use std::time::Duration;

use arbitrary::{Result, Unstructured};

use crate::driver::bucket::{Amount, QuotaSpec, Rate, Step};
use crate::reference::bucket as reference;

/// Counts weighted towards the small (fewer tokens than shards), with any `u64` possible.
pub fn count(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => u.int_in_range(1..=4)?,
        1 => u.int_in_range(1..=300)?,
        2 => u.int_in_range(1..=10_000)?,
        3 => u.int_in_range(1..=1_000_000_000)?,
        4 => 3,
        _ => u.arbitrary()?,
    })
}

/// Periods: short, any number of nanoseconds, or any `Duration`.
pub fn period(u: &mut Unstructured<'_>) -> Result<Duration> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => Duration::from_nanos(u.int_in_range(0..=1_000_000)?),
        1 => Duration::from_nanos(u.arbitrary()?),
        _ => Duration::new(u.arbitrary()?, u.int_in_range(0..=999_999_999)?),
    })
}

/// Any of the constructors, with a count from [`count`].
pub fn rate(u: &mut Unstructured<'_>) -> Result<Rate> {
    Ok(match u.int_in_range(0..=4u8)? {
        0 => Rate::Second(count(u)?),
        1 => Rate::Minute(count(u)?),
        2 => Rate::Hour(count(u)?),
        3 => Rate::Day(count(u)?),
        _ => Rate::Period(count(u)?, period(u)?),
    })
}

/// The largest capacity the rate allows (1 for a rate the crate refuses).
pub fn max_capacity(rate: &Rate) -> u64 {
    reference::interval_ns(rate.count(), rate.period().as_nanos())
        .map_or(1, reference::max_capacity)
}

/// `x × a / 65535`.
pub fn fraction(x: u64, a: u16) -> u64 {
    u64::try_from(u128::from(x) * u128::from(a) / u128::from(u16::MAX)).unwrap_or(x)
}

/// A quota spec: any rate, a capacity from the edges of the accepted range (small ones up to
/// `small`), any initial fill, in either builder order.
pub fn quota_spec(u: &mut Unstructured<'_>, small: u64) -> Result<QuotaSpec> {
    let rate = rate(u)?;
    let max = max_capacity(&rate);
    let capacity = match u.int_in_range(0..=6u8)? {
        0 => None,
        1 => Some(1),
        2 => Some(max.min(u.int_in_range(1..=small)?)),
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

/// Tokens to ask for, relative to the capacity or raw.
pub fn amount(u: &mut Unstructured<'_>) -> Result<Amount> {
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

/// A clock step: small or huge, forwards or backwards, in nanoseconds or intervals.
pub fn step(u: &mut Unstructured<'_>) -> Result<Step> {
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
