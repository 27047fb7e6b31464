//! The proptest strategies the model tests share: the operations every driver has in common (the
//! calls every limiter answers, [`request`] and [`call`], with [`amount`]s; clock [`step`]s), the
//! requests of the rate checks ([`spread`]), and the counts, periods, rates and starting readings
//! of the bucket-like tests (the token bucket's, the leaky meter's, the sharded bucket's). Each
//! test generates only its own operations itself.
//!
//! The fuzz targets draw the same kinds of input from bytes instead (`fuzz_input`, feature
//! `arbitrary`).

use std::time::Duration;

use proptest::prelude::*;

use crate::consts::{MAX_USABLE_NS, YEAR_NS};
use crate::driver::bucket::{Rate, Wait};
use crate::driver::limiter::{Amount, Call, Request};
use crate::driver::step::Step;

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

/// Rates through every constructor, with [`count`]s and [`period`]s.
pub fn rate() -> impl Strategy<Value = Rate> {
    prop_oneof![
        4 => count().prop_map(Rate::Second),
        1 => count().prop_map(Rate::Minute),
        1 => count().prop_map(Rate::Hour),
        3 => count().prop_map(Rate::Day),
        3 => (count(), period()).prop_map(|(n, p)| Rate::Period(n, p)),
    ]
}

/// Request amounts: zero, one, a few, the limit and one more, fractions of it, and any `u64`.
pub fn amount() -> impl Strategy<Value = Amount> {
    prop_oneof![
        2 => Just(Amount::Zero),
        6 => Just(Amount::One),
        4 => any::<u8>().prop_map(Amount::Few),
        2 => Just(Amount::Limit),
        1 => Just(Amount::AboveLimit),
        3 => any::<u16>().prop_map(Amount::Fraction),
        1 => any::<u64>().prop_map(Amount::Raw),
    ]
}

/// The calls every limiter answers, mostly acquisitions, with an [`amount`].
pub fn call() -> impl Strategy<Value = Call<Amount>> {
    prop_oneof![
        6 => amount().prop_map(Call::Acquire),
        4 => Just(Call::AcquireOne),
        2 => amount().prop_map(Call::Peek),
        1 => Just(Call::Remaining),
    ]
}

/// A [`call`], in the `_at` form or ([`via_clock`]) the one reading the limiter's clock.
pub fn request() -> impl Strategy<Value = Request> {
    (call(), via_clock()).prop_map(|(call, clock)| Request { call, clock })
}

/// Clock steps: small and unit-sized moves either way, exactly one unit, up to millions of whole
/// units, years, jumps to the end and anywhere.
pub fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..1_000).prop_map(Step::Nanos),
        5 => (0u32..64, 1u8..=16).prop_map(|(num, den)| Step::Units { num, den }),
        1 => Just(Step::Units { num: 1, den: 1 }),
        1 => (0u32..=2_000_000).prop_map(|num| Step::Units { num, den: 1 }),
        1 => any::<u64>().prop_map(Step::Nanos),
        1 => any::<u8>().prop_map(Step::Years),
        1 => Just(Step::ToMax),
        2 => (0u64..1_000).prop_map(Step::BackNanos),
        2 => (0u32..64, 1u8..=16).prop_map(|(num, den)| Step::BackUnits { num, den }),
        1 => any::<u64>().prop_map(Step::BackNanos),
        1 => any::<u64>().prop_map(Step::Set),
    ]
}

/// A reservation's `max_wait`: none, a few intervals, any number of them, the edges of the
/// accepted range, and anything.
pub fn wait() -> impl Strategy<Value = Wait> {
    prop_oneof![
        2 => Just(Wait::Zero),
        6 => (0u32..64, 1u8..=8).prop_map(|(num, den)| Wait::Units { num, den }),
        1 => any::<u32>().prop_map(|num| Wait::Units { num, den: 1 }),
        1 => Just(Wait::Max),
        1 => Just(Wait::AboveMax),
        1 => any::<u64>().prop_map(Wait::Raw),
    ]
}

/// Mostly the `_at` forms; one call in five reads the clock instead.
pub fn via_clock() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.2)
}

/// A request of the rate checks (`check_window`, `check_departures`) before its quota is drawn:
/// read `num / den` units after the start (the step's [`Step::next`] from 0 in the quota's
/// interval gives the offset), for one token four times in five, an [`amount`] otherwise.
pub fn spread() -> impl Strategy<Value = (Step, Amount)> {
    (
        0u32..128,
        1u8..=8,
        prop_oneof![4 => Just(Amount::One), 1 => amount()],
    )
        .prop_map(|(num, den, n)| (Step::Units { num, den }, n))
}

/// A proptest configuration of `cases` cases that writes no regression file: a failure prints its
/// minimal case, which belongs in a unit test beside the property (a saved seed stops meaning the
/// same case as soon as a strategy changes).
///
/// ```
/// let config = testkit::strategies::unpersisted(64);
/// assert_eq!(config.cases, 64);
/// assert!(config.failure_persistence.is_none());
/// ```
pub fn unpersisted(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}
