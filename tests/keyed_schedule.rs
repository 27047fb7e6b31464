//! The keyed leaky meter's scheduling (`schedule_key_n_at`) against one direct `LeakyMeter` per key
//! (itself checked against the exact reference model in `tests/leaky_meter_model.rs`): random
//! quotas, random scheduled and strict requests on a small key space, a clock moving forward, and
//! eviction as often as any other operation. Every keyed answer must equal the key's own meter's,
//! to the nanosecond: eviction forgets only keys whose queue is empty, so it never changes a
//! decision.

#![cfg(not(tollgate_loom))]

use std::time::Duration;

use proptest::prelude::*;
use tollgate::keyed::{KeyedError, KeyedLimiter, LeakyMeterKeys};
use tollgate::leaky::LeakyMeter;
use tollgate::{ManualClock, Nanos, Quota};

#[derive(Debug, Clone, Copy)]
enum Op {
    /// `schedule_key_n_at(key, n)`.
    Schedule(u8, u64),
    /// `check_key_n_at(key, n)`: the strict admission, sharing the key's queue.
    Strict(u8, u64),
    /// `retain_recent_at(now)`.
    Evict,
    /// Moves the clock forward by this many nanoseconds.
    Wait(u64),
}

/// Requests for up to one more than the capacity (and none), and waits of up to twice `span`, the
/// time a full queue takes to drain.
fn op(capacity: u64, span: u64) -> impl Strategy<Value = Op> {
    let n = 0..=capacity + 1;
    prop_oneof![
        6 => (0u8..4, n.clone()).prop_map(|(k, n)| Op::Schedule(k, n)),
        2 => (0u8..4, n).prop_map(|(k, n)| Op::Strict(k, n)),
        2 => Just(Op::Evict),
        4 => (0..=2 * span).prop_map(Op::Wait),
    ]
}

fn case() -> impl Strategy<Value = (u64, u64, u64, Vec<Op>)> {
    (
        1u64..=20,
        prop_oneof![1u64..=1_000, 1_000_000u64..=2_000_000_000],
        1u64..=10,
    )
        .prop_flat_map(|(count, period, capacity)| {
            (
                Just(count),
                Just(period),
                Just(capacity),
                prop::collection::vec(op(capacity, (period * capacity / count).max(1)), 1..150),
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn keyed_scheduling_answers_as_each_key_s_own_meter((count, period, capacity, ops) in case()) {
        let Ok(quota) = Quota::per_period(count, Duration::from_nanos(period))
            .and_then(|q| q.with_capacity(capacity.min(q.max_capacity())))
        else {
            return Ok(());
        };
        let clock = ManualClock::new();
        let keyed: KeyedLimiter<u8, LeakyMeterKeys, _> =
            KeyedLimiter::with_algorithm(quota, clock.clone()).expect("the meter takes every quota");
        let meters: Vec<LeakyMeter<ManualClock>> =
            (0..4).map(|_| LeakyMeter::with_clock(quota, clock.clone())).collect();
        let mut now = 0u64;
        for op in ops {
            let at = Nanos::new(now);
            match op {
                Op::Schedule(k, n) => prop_assert_eq!(
                    keyed.schedule_key_n_at(&k, n, at),
                    meters[usize::from(k)].try_schedule_n_at(n, at).map_err(KeyedError::from),
                    "schedule {} on key {} at {}", n, k, now
                ),
                Op::Strict(k, n) => prop_assert_eq!(
                    keyed.check_key_n_at(&k, n, at),
                    meters[usize::from(k)].try_acquire_n_at(n, at).map_err(KeyedError::from),
                    "strict {} on key {} at {}", n, k, now
                ),
                Op::Evict => {
                    keyed.retain_recent_at(at);
                }
                Op::Wait(d) => {
                    now += d;
                    clock.set(Nanos::new(now));
                }
            }
        }
    }
}

/// Worked by hand: 10 per second, 3 places; a key scheduled full, evicted only once drained, and
/// scheduled again afresh.
#[test]
fn a_drained_key_is_forgotten_and_starts_again_empty() {
    const MS: u64 = 1_000_000;
    let clock = ManualClock::new();
    let q = Quota::per_second(10).unwrap().with_capacity(3).unwrap();
    let keyed: KeyedLimiter<String, LeakyMeterKeys, _> =
        KeyedLimiter::with_algorithm(q, clock.clone()).unwrap();
    let delays: Vec<Duration> = (0..3)
        .map(|_| keyed.schedule_key_n("host", 1).unwrap().delay())
        .collect();
    assert_eq!(delays, [0, 100, 200].map(Duration::from_millis));
    clock.set(Nanos::new(299 * MS));
    assert_eq!(
        keyed.retain_recent(),
        0,
        "the last place departs at 200 ms, drains at 300"
    );
    clock.set(Nanos::new(300 * MS));
    assert_eq!(keyed.retain_recent(), 1);
    assert_eq!(
        keyed.schedule_key_n("host", 3).unwrap().delay(),
        Duration::ZERO
    );
}
