//! The proptest strategies the token bucket's, the leaky meter's and (in part) the sharded bucket's
//! model tests share: counts,
//! periods, starting readings, request amounts, clock steps, and whether a call reads the clock.
//!
//! They generate the bucket driver's [`Amount`] and [`Step`]; the fuzz targets draw the same kinds
//! of input from bytes instead (`fuzz_input`, feature `arbitrary`).

use std::time::Duration;

use proptest::prelude::*;

use crate::consts::{MAX_USABLE_NS, YEAR_NS};
use crate::driver::bucket::{Amount, Step};

/// Counts from 1 to 10^9, weighted towards the small and the awkward (3, 7: periods that do not
/// divide evenly).
pub fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(1u64),
        2 => Just(3u64),
        1 => Just(7u64),
        3 => 1u64..=16,
        2 => 1u64..=10_000,
        2 => 1u64..=1_000_000_000,
    ]
}

/// Periods for `per_period`: from a few nanoseconds to centuries, and beyond the accepted range.
pub fn period() -> impl Strategy<Value = Duration> {
    prop_oneof![
        2 => (1u64..=10_000).prop_map(Duration::from_nanos),
        2 => (1u64..=10_000_000_000_000).prop_map(Duration::from_nanos),
        2 => (1u64..=200 * YEAR_NS / 1_000_000_000, 0u32..1_000_000_000)
            .prop_map(|(s, n)| Duration::new(s, n)),
        1 => (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// `x × a / 65535`, for `a` in `0..=65535`.
pub fn fraction(x: u64, a: u16) -> u64 {
    u64::try_from(u128::from(x) * u128::from(a) / u128::from(u16::MAX)).expect("at most x")
}

/// Clock readings to start from: the epoch, ordinary ones, the clamp at [`MAX_USABLE_NS`] and
/// beyond.
pub fn start() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        4 => 0u64..=1_000_000_000_000_000,
        1 => Just(MAX_USABLE_NS),
        1 => Just(u64::MAX),
        1 => any::<u64>(),
    ]
}

/// Request amounts: zero, one, a few, the capacity and one more, fractions of it, and any `u64`.
pub fn amount() -> impl Strategy<Value = Amount> {
    prop_oneof![
        2 => Just(Amount::Zero),
        6 => Just(Amount::One),
        4 => any::<u8>().prop_map(Amount::Few),
        2 => Just(Amount::Capacity),
        1 => Just(Amount::AboveCapacity),
        3 => any::<u16>().prop_map(Amount::Fraction),
        1 => any::<u64>().prop_map(Amount::Raw),
    ]
}

/// Clock steps: small and interval-sized moves either way, years, jumps to the end and anywhere.
pub fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..1_000).prop_map(Step::Nanos),
        5 => (0u32..64, 1u8..=16).prop_map(|(num, den)| Step::Intervals { num, den }),
        1 => any::<u64>().prop_map(Step::Nanos),
        1 => any::<u8>().prop_map(Step::Years),
        1 => Just(Step::ToMax),
        2 => (0u64..1_000).prop_map(Step::BackNanos),
        2 => (0u32..64, 1u8..=16).prop_map(|(num, den)| Step::BackIntervals { num, den }),
        1 => any::<u64>().prop_map(Step::BackNanos),
        1 => any::<u64>().prop_map(Step::Set),
    ]
}

/// Mostly the `_at` forms; one call in five reads the clock instead.
pub fn via_clock() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.2)
}
