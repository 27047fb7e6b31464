//! The sliding window counters against an exact reference model
//! (`tests/support/counter_reference.rs`): random quotas, sub-window counts and alignments, and
//! random operation sequences with clocks that step backwards and jump far, must get answers
//! identical to the nanosecond (admit or deny, remaining, retry_after, reset_after), and every
//! denial's `retry_at` must be exact.

use proptest::prelude::*;
use testkit::consts::MAX_USABLE_NS;
use testkit::driver::counter as counter_driver;
use testkit::reference::counter as counter_reference;
use testkit::Outcome;

use counter_driver::{run, Op, Spec};
use testkit::strategies::{request, start, step};

/// Counts from 1 up to beyond the largest accepted, weighted towards the small.
fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1u64..=4,
        3 => 1u64..=16,
        2 => 1u64..=1_000,
        1 => 1u64..=300_000,
        1 => any::<u64>(),
    ]
}

/// Sub-window lengths: a few nanoseconds (where counts barely fit), round numbers, anything.
fn sub_length() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1u64..=100,
        2 => 1u64..=1_000_000,
        2 => Just(1_000_000_000u64),
        1 => Just(60_000_000_000u64),
        1 => 1u64..=MAX_USABLE_NS / 8,
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        count(),
        sub_length(),
        prop_oneof![8 => 1u64..=8, 1 => Just(0u64), 1 => Just(1025u64)],
        any::<bool>(),
        prop::option::weighted(0.2, any::<u64>()),
        prop_oneof![1 => Just(0u64), 1 => 0u64..=3],
    )
        .prop_map(|(count, sub, k, one_word, offset, skew)| Spec {
            count,
            // Usually a whole number of sub-windows; sometimes a period `k` does not divide.
            period_ns: sub.saturating_mul(k.max(1)).saturating_add(skew),
            k,
            offset,
            one_word,
        })
}

/// The calls every limiter answers, and clock steps in sub-windows.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        13 => request().prop_map(Op::Call),
        6 => step().prop_map(Op::Time),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Both counters, k in 1..=8, answer exactly as the model does.
    #[test]
    fn counters_match_the_reference_model(
        spec in spec(),
        start in start(),
        ops in prop::collection::vec(op(), 64),
    ) {
        run(&spec, start, &ops);
    }

    /// The same op sequence on a one-word counter and a one-sub-window counter: both match the
    /// model, so they match each other.
    #[test]
    fn one_sub_window_is_the_one_word_counter(
        spec in spec(),
        start in start(),
        ops in prop::collection::vec(op(), 64),
    ) {
        let one = Spec { k: 1, one_word: true, ..spec };
        let sub = Spec { k: 1, one_word: false, ..spec };
        run(&one, start, &ops);
        run(&sub, start, &ops);
    }
}

/// Small hand-checked sequences that pin the model itself to numbers worked out on paper.
#[test]
fn the_model_agrees_with_paper() {
    use counter_reference::RefCounter;
    // 4 per 1000 ns in one window.
    let mut m = RefCounter::new(4, 1000, 1, 0);
    assert_eq!(
        m.acquire(900, 4, true),
        Outcome::Admitted {
            remaining: 0,
            reset_after_ns: 1100,
            // One is free once a quarter of the 4 has been weighed off: 4 × (1000 − e) <= 3 × 1000
            // at e = 250 of the next window.
            next_after_ns: Some(350),
        }
    );
    // At 1250: 4 × 750 / 1000 = 3 still count; one left.
    assert_eq!(m.remaining_at(1250), 1);
    // 2 more need 4 × (1000 − e) <= 2 × 1000: e >= 500, i.e. at 1500.
    assert_eq!(
        m.acquire(1250, 2, true),
        Outcome::Denied {
            retry_after_ns: 250,
            retry_at_ns: 1500,
            remaining: 1,
            reset_after_ns: 750,
            // A second whole one is free exactly when the two asked for are.
            next_after_ns: Some(250),
        }
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The documented approximation bounds, on sequential traffic with forward readings, against
    /// an exact log: any `k` consecutive sub-windows hold at most `N`, and any span `(t − W, t]`
    /// at most `N` plus the count of the oldest sub-window it overlaps.
    #[test]
    fn admissions_stay_within_the_documented_bounds(
        n_q in 1u64..=20,
        k in 1u64..=6,
        w in 1_000u64..=5_000,
        ops in prop::collection::vec((0u64..=30, 1u64..=5), 1..200),
    ) {
        use tollgate::window::SubWindowCounter;
        use tollgate::{ManualClock, Nanos, Quota};
        let period = w * k;
        // Up to 31 fits sub-windows of 1000 ns and more.
        let quota = Quota::per_period(n_q, std::time::Duration::from_nanos(period)).unwrap();
        let c = SubWindowCounter::with_clock(quota, k, ManualClock::new()).unwrap();
        let mut now = 0u64;
        let mut log: Vec<(u64, u64)> = Vec::new();
        for (tenths, n) in ops {
            // Steps of 0 to 3 sub-windows, in tenths.
            now += w * tenths / 10;
            let n = n.min(n_q);
            if c.try_acquire_n_at(n, Nanos::new(now)).is_ok() {
                log.push((now, n));
            }
        }
        let count = |h: u64| -> u64 {
            log.iter().filter(|&&(t, _)| t / w == h).map(|&(_, n)| n).sum()
        };
        for &(t, _) in &log {
            let j = t / w;
            let window: u64 = (j.saturating_sub(k - 1)..=j).map(count).sum();
            prop_assert!(window <= n_q, "{window} in sub-windows ..={j}");
            let span: u64 = log
                .iter()
                .filter(|&&(u, _)| u + period > t && u <= t)
                .map(|&(_, n)| n)
                .sum();
            let oldest = j.checked_sub(k).map_or(0, count);
            prop_assert!(span <= n_q + oldest, "{span} in ({}, {t}]", t.saturating_sub(period));
        }
    }
}
