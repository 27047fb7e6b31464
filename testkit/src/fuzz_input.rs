//! Input generation shared by the fuzz targets: one way of choosing, from a fuzzer's bytes, the
//! operations every driver has in common (the calls every limiter answers, [`request`] and
//! [`call`], with [`amount`]s; clock [`step`]s), starting readings, [`list`]s of operations, the
//! requests of the rate checks ([`spread`]), and the quotas of the bucket-like targets
//! (`token_bucket_ops`, `sharded_ops`, `leaky_ops`; the counts and periods of
//! `sliding_counter_ops` and `sliding_log_ops`). Each target draws only its own operations itself.
//! Behind the `arbitrary` feature, which only the fuzz crate enables.

use std::time::Duration;

use arbitrary::{Result, Unstructured};

use crate::driver::bucket::{QuotaSpec, Rate, Wait};
use crate::driver::limiter::{Amount, Call, Request};
use crate::driver::step::Step;

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

/// A request of the rate checks (`check_window`, `check_departures`): its offset from the start,
/// any `u8` of eighths (or halves, thirds...) of the interval `interval_ns`, and one token three
/// times in four, an [`amount`] otherwise.
pub fn spread(u: &mut Unstructured<'_>, interval_ns: u64) -> Result<(u64, Amount)> {
    let num: u8 = u.arbitrary()?;
    let den: u8 = u.int_in_range(1..=8)?;
    let offset = Step::Units {
        num: num.into(),
        den,
    }
    .next(0, interval_ns);
    let n = if u.ratio(3u8, 4u8)? {
        Amount::One
    } else {
        amount(u)?
    };
    Ok((offset, n))
}

/// `x × a / 65535`.
pub fn fraction(x: u64, a: u16) -> u64 {
    u64::try_from(u128::from(x) * u128::from(a) / u128::from(u16::MAX)).unwrap_or(x)
}

/// A quota spec: any rate, a capacity from the edges of the accepted range (small ones up to
/// `small`), any initial fill, in either builder order.
pub fn quota_spec(u: &mut Unstructured<'_>, small: u64) -> Result<QuotaSpec> {
    let rate = rate(u)?;
    let max = rate.max_capacity();
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

/// Starting readings: the epoch, ordinary ones, and anywhere up to `u64::MAX`.
pub fn start(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=2u8)? {
        0 => 0,
        1 => u.int_in_range(0..=1 << 50)?,
        _ => u.arbitrary()?,
    })
}

/// Up to `max` items (operations, requests), each drawn by `item`.
pub fn list<'a, T>(
    u: &mut Unstructured<'a>,
    max: usize,
    mut item: impl FnMut(&mut Unstructured<'a>) -> Result<T>,
) -> Result<Vec<T>> {
    let len = u.int_in_range(0..=max)?;
    let mut items = Vec::with_capacity(len);
    for _ in 0..len {
        items.push(item(u)?);
    }
    Ok(items)
}

/// A quota of `count` per a common period (a second, a minute, an hour) or any up to a day,
/// with the burst left alone or set from 1 to 64: `None` for a combination the constructors
/// refuse (the targets skip it). Shared by `all_of_ops` and `quota_change_ops`.
pub fn quota_with_burst(u: &mut Unstructured<'_>, count: u64) -> Result<Option<tollgate::Quota>> {
    let period = match u.int_in_range(0..=3u8)? {
        0 => Duration::from_secs(1),
        1 => Duration::from_secs(60),
        2 => Duration::from_secs(3_600),
        _ => Duration::from_nanos(u.int_in_range(1..=86_400_000_000_000u64)?),
    };
    let burst = u.int_in_range(0..=64u64)?;
    let quota = tollgate::Quota::per_period(count, period);
    Ok(match burst {
        0 => quota.ok(),
        b => quota.and_then(|q| q.with_capacity(b)).ok(),
    })
}

/// Amounts relative to the limit, or raw.
pub fn amount(u: &mut Unstructured<'_>) -> Result<Amount> {
    Ok(match u.int_in_range(0..=6u8)? {
        0 => Amount::Zero,
        1 => Amount::One,
        2 => Amount::Few(u.arbitrary()?),
        3 => Amount::Limit,
        4 => Amount::AboveLimit,
        5 => Amount::Fraction(u.arbitrary()?),
        _ => Amount::Raw(u.arbitrary()?),
    })
}

/// One of the calls every limiter answers, each as likely, with an [`amount`].
pub fn call(u: &mut Unstructured<'_>) -> Result<Call<Amount>> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => Call::Acquire(amount(u)?),
        1 => Call::AcquireOne,
        2 => Call::Peek(amount(u)?),
        _ => Call::Remaining,
    })
}

/// A reservation's `max_wait`: none, a few intervals, any number of them, the edges of the
/// accepted range, and anything.
pub fn wait(u: &mut Unstructured<'_>) -> Result<Wait> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => Wait::Zero,
        1 => Wait::Units {
            num: u.int_in_range(0..=64)?,
            den: u.int_in_range(1..=8)?,
        },
        2 => Wait::Units {
            num: u.arbitrary()?,
            den: 1,
        },
        3 => Wait::Max,
        4 => Wait::AboveMax,
        _ => Wait::Raw(u.arbitrary()?),
    })
}

/// Whether a call reads the limiter's clock instead of passing the reading: one in four.
pub fn via_clock(u: &mut Unstructured<'_>) -> Result<bool> {
    u.ratio(1u8, 4u8)
}

/// A [`call`], in the `_at` form or ([`via_clock`]) the one reading the limiter's clock.
pub fn request(u: &mut Unstructured<'_>) -> Result<Request> {
    let clock = via_clock(u)?;
    Ok(Request {
        call: call(u)?,
        clock,
    })
}

/// A clock step: small or huge, forwards or backwards, in nanoseconds or in the driver's units (a
/// few, or any number of whole ones).
pub fn step(u: &mut Unstructured<'_>) -> Result<Step> {
    Ok(match u.int_in_range(0..=8u8)? {
        0 => Step::Nanos(u.int_in_range(0..=1_000)?),
        1 => Step::Nanos(u.arbitrary()?),
        2 => Step::Units {
            num: u.int_in_range(0..=64)?,
            den: u.int_in_range(1..=16)?,
        },
        3 => Step::Years(u.arbitrary()?),
        4 => Step::ToMax,
        5 => Step::BackNanos(u.arbitrary()?),
        6 => Step::BackUnits {
            num: u.int_in_range(0..=64)?,
            den: u.int_in_range(1..=16)?,
        },
        7 => Step::Units {
            num: u.arbitrary()?,
            den: 1,
        },
        _ => Step::Set(u.arbitrary()?),
    })
}
