//! The sliding window log against an exact reference model (`tests/support/log_reference.rs`, a
//! plain `Vec` of admission times): random quotas and operation sequences, with clocks that jump
//! forward by any number of windows, to `u64::MAX`, and step backwards, must get answers identical to
//! the nanosecond; plus the exactness of `retry_at`, and hand-computed cases that pin the model.

use std::time::Duration;
use testkit::driver::log as log_driver;
use testkit::reference::log as log_reference;
use testkit::Outcome;

use proptest::prelude::*;
use tollgate::window::SlidingWindowLog;
use tollgate::{AcquireError, ManualClock, Nanos, Quota};

use log_driver::{run, LogOp, LogSpec};
use log_reference::{RefLog, MAX_LOG};
use testkit::consts::MAX_USABLE_NS as MAX_USABLE;
use testkit::driver::limiter::check_retry_exact;
use testkit::strategies::{request, start, step};

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// N: mostly small, so that windows fill; sometimes the edges of the accepted range.
fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        6 => 1u64..=4,
        4 => 1u64..=16,
        2 => 1u64..=300,
        1 => Just(MAX_LOG),
        1 => Just(MAX_LOG + 1),
        1 => any::<u64>(),
    ]
}

/// W: a few nanoseconds to centuries, and beyond the accepted 2^62 ns.
fn period() -> impl Strategy<Value = Duration> {
    prop_oneof![
        4 => (1u64..=1_000).prop_map(Duration::from_nanos),
        3 => (1u64..=10_000_000_000_000).prop_map(Duration::from_nanos),
        1 => (MAX_USABLE - 10..=MAX_USABLE + 10).prop_map(Duration::from_nanos),
        1 => any::<u64>().prop_map(Duration::from_nanos),
    ]
}

fn spec() -> impl Strategy<Value = LogSpec> {
    (count(), period(), 0u8..8, 0u8..8, any::<u64>()).prop_map(|(count, period, c, i, raw)| {
        let capacity = match c {
            0 => Some(count),
            1 => Some(raw),
            2 => Some(count.saturating_sub(1).max(1)),
            _ => None,
        };
        let initial = match i {
            0 => Some(count),
            1 => Some(0),
            2 => Some(raw),
            _ => None,
        };
        LogSpec {
            count,
            period,
            capacity,
            initial,
        }
    })
}

/// The calls every limiter answers, clock steps in windows, and jumps to (or just before) the
/// latest denial's `retry_at`, where an admission leaves the window.
fn op() -> impl Strategy<Value = LogOp> {
    prop_oneof![
        14 => request().prop_map(LogOp::Call),
        5 => step().prop_map(LogOp::Time),
        1 => any::<bool>().prop_map(|early| LogOp::LastRetry { early }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(testkit::strategies::unpersisted(2048))]

    /// Every answer of every operation equals the model's, to the nanosecond.
    #[test]
    fn log_matches_reference_model(
        spec in spec(),
        start in start(),
        ops in prop::collection::vec(op(), 0..=128),
    ) {
        run(&spec, start, &ops);
    }

    /// A denial's `retry_at` is the earliest reading at which the same request is admitted.
    #[test]
    fn retry_at_is_the_earliest_admitting_reading(
        // The window is at least `count` ns: a faster rate is refused (`RateTooFast`).
        (count, window) in (1u64..=8).prop_flat_map(|count| (Just(count), count..=1_000_000)),
        start in 0u64..=(1 << 61),
        offsets in prop::collection::vec(0u64..=2_000_000, 1..=16),
        wanted in 1u64..=8,
        back in prop_oneof![Just(0u64), 0u64..=3_000_000],
    ) {
        let quota = Quota::per_period(count, Duration::from_nanos(window)).unwrap();
        let log = SlidingWindowLog::with_clock(quota, ManualClock::new()).unwrap();
        let mut latest = start;
        for offset in offsets {
            latest = latest.max(start + offset);
            let _ = log.try_acquire_at(Nanos::new(start + offset));
        }
        let n = wanted.min(count);
        let now = latest.saturating_sub(back);
        if let Err(AcquireError::Denied(denied)) = log.try_acquire_n_at(n, Nanos::new(now)) {
            let sum = u128::from(now) + denied.retry_after().as_nanos();
            prop_assert_eq!(u128::from(denied.retry_at().as_u64()), sum);
            check_retry_exact(&log, n, denied.retry_at(), &|| format!("{n} at {now}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-computed cases: these pin the model (and the crate) to numbers worked out on paper.
// ---------------------------------------------------------------------------------------------

/// Three per 100 ns, admissions at 0, 30 and 60: the model and the crate agree with the paper.
#[test]
fn three_per_hundred_nanoseconds() {
    let mut model = RefLog::new(3, 100);
    let quota = Quota::per_period(3, Duration::from_nanos(100)).unwrap();
    let log = SlidingWindowLog::with_clock(quota, ManualClock::new()).unwrap();
    let steps: [(u64, u64, Outcome); 7] = [
        // One more is free when the oldest in the window leaves: 0 at 100.
        (1, 0, Outcome::admitted(2, 100, Some(100))),
        (1, 30, Outcome::admitted(1, 100, Some(70))),
        (1, 60, Outcome::admitted(0, 100, Some(40))),
        // Full: 0 leaves at 100.
        (1, 70, Outcome::denied_until(30, 100, 0, 90, Some(30))),
        // Two need 30 gone too, which is also when one more is free.
        (2, 100, Outcome::denied_until(30, 130, 1, 60, Some(30))),
        (1, 100, Outcome::admitted(0, 100, Some(30))),
        // A backward reading is judged at 100: 30 leaves at 130, 130 - 20 = 110 to wait.
        (1, 20, Outcome::denied_until(110, 130, 0, 180, Some(110))),
    ];
    for (n, at, want) in steps {
        assert_eq!(model.acquire(n, at), want, "model: {n} at {at}");
    }
    let mut replay = steps.iter();
    for &(n, at, want) in replay.by_ref() {
        let got = testkit::outcome::observe(log.try_acquire_n_at(n, Nanos::new(at)));
        assert_eq!(got, want, "crate: {n} at {at}");
    }
    assert_eq!(model.remaining(20), 0);
    assert_eq!(model.remaining(u64::MAX), 3);
    assert_eq!(log.remaining_at(Nanos::new(u64::MAX)), 3);
}

/// An idle period of a million windows, then a reading of `u64::MAX`: both just empty the window.
#[test]
fn idle_periods_of_any_length() {
    let mut model = RefLog::new(2, 1_000);
    let quota = Quota::per_period(2, Duration::from_nanos(1_000)).unwrap();
    let log = SlidingWindowLog::with_clock(quota, ManualClock::new()).unwrap();
    for at in [0, 0, 1_000_000_000, 1_000_000_000, u64::MAX, u64::MAX] {
        let want = model.acquire(1, at);
        assert!(matches!(want, Outcome::Admitted { .. }), "{at}");
        assert_eq!(
            testkit::outcome::observe_one(log.try_acquire_at(Nanos::new(at))),
            want
        );
    }
    // Readings are clamped at 2^62: the log is full there for good, and says when it would not be.
    let want = Outcome::denied_until(1_000, MAX_USABLE + 1_000, 0, 1_000, Some(1_000));
    assert_eq!(model.acquire(1, u64::MAX), want);
    assert_eq!(
        testkit::outcome::observe_one(log.try_acquire_at(Nanos::new(u64::MAX))),
        want
    );
}
