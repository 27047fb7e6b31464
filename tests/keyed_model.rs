//! The keyed limiter against a reference map of exact reference buckets (`tests/support/reference.rs`
//! through `tests/support/keyed_driver.rs`): random quotas, random operation sequences on a small key
//! space, clocks stepping forwards and backwards, and eviction as aggressive as every other
//! operation. Every answer must equal the model's to the nanosecond, and the evicting limiter must
//! answer exactly as one that never evicts (see the driver for the one documented exception, a
//! reading earlier than an eviction's, where it may only be more restrictive).

use std::time::Duration;
use testkit::driver::keyed as keyed_driver;
use testkit::driver::keyed_pair;

use proptest::prelude::*;
use tollgate::keyed::{
    FixedWindowKeys, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys, Tiered,
};
use tollgate::Quota;

use keyed_driver::{quota, run, KeyedOp, MAX_OPS};
use keyed_pair::run_pair;
use testkit::driver::limiter::{Amount, Call};
use testkit::driver::step::Step;
use testkit::strategies::{amount, call, step, wait};

/// Keys 0..6: few enough that keys are reused, evicted and created again.
fn key() -> impl Strategy<Value = u8> {
    0u8..6
}

/// The calls every limiter answers on a key, the token bucket's reservations, cancels and partial
/// takes, evictions, and clock steps in intervals.
fn op() -> impl Strategy<Value = KeyedOp> {
    prop_oneof![
        9 => (key(), call()).prop_map(|(key, call)| KeyedOp::Call { key, call }),
        2 => (key(), amount(), wait()).prop_map(|(key, n, wait)| KeyedOp::Reserve { key, n, wait }),
        1 => any::<u8>().prop_map(|index| KeyedOp::Cancel { index }),
        2 => (key(), amount()).prop_map(|(key, n)| KeyedOp::TakeUpTo { key, n }),
        3 => Just(KeyedOp::Evict),
        4 => step().prop_map(KeyedOp::Time),
    ]
}

/// Rates from 1 per nanosecond-ish to 1 per day, with small capacities (so keys empty, refill and
/// become evictable within a run) and the largest allowed one now and then.
fn quota_args() -> impl Strategy<Value = (u64, u64, u64)> {
    (
        1u64..=20,
        prop_oneof![
            1 => 1u64..=1_000,
            3 => 1_000_000u64..=2_000_000_000,
            1 => Just(86_400_000_000_000u64),
        ],
        prop_oneof![4 => 1u64..=10, 1 => Just(u64::MAX)],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn eviction_never_changes_a_decision_and_answers_match_the_model(
        (count, period, capacity) in quota_args(),
        start in prop_oneof![Just(0u64), 0u64..=10_000_000_000, Just(u64::MAX - 5)],
        ops in prop::collection::vec(op(), 1..MAX_OPS),
    ) {
        // An out-of-range capacity is clamped to the largest the rate allows.
        let capacity = match quota(count, period, 1) {
            Some((q, _)) => capacity.min(q.max_capacity()),
            None => return Ok(()),
        };
        if let Some((quota, policy)) = quota(count, period, capacity) {
            run(quota, policy, start, &ops);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every other algorithm (no reference model: the evicting limiter against the never-evicting
    /// one, see `support/keyed_pair.rs`), on window quotas (capacity = count).
    #[test]
    fn eviction_never_changes_a_decision_for_every_algorithm(
        count in 1u64..=12,
        period in prop_oneof![
            1 => 1u64..=1_000,
            3 => 1_000_000u64..=2_000_000_000,
            1 => Just(86_400_000_000_000u64),
        ],
        start in prop_oneof![Just(0u64), 0u64..=10_000_000_000, Just(u64::MAX - 5)],
        ops in prop::collection::vec(op(), 1..MAX_OPS),
    ) {
        let Ok(quota) = Quota::per_period(count, Duration::from_nanos(period)) else {
            return Ok(());
        };
        run_pair::<FixedWindowKeys>(quota, start, &ops);
        run_pair::<SlidingWindowCounterKeys>(quota, start, &ops);
        run_pair::<SlidingWindowLogKeys>(quota, start, &ops);
        run_pair::<LeakyMeterKeys>(quota, start, &ops);
        run_pair::<Tiered<FixedWindowKeys>>(quota, start, &ops);
    }
}

fn check(key: u8, call: Call<Amount>) -> KeyedOp {
    KeyedOp::Call { key, call }
}

/// A case worked out by hand: 1 per second, capacity 2; eviction of a full key, then a reading
/// before the eviction's, which the evicting limiter answers more restrictively.
#[test]
fn hand_checked_eviction_and_a_step_back() {
    const S: u64 = 1_000_000_000;
    let (quota, policy) = quota(1, S, 2).expect("a valid quota");
    let ops = [
        check(1, Call::Acquire(Amount::Limit)),
        KeyedOp::Time(Step::Nanos(2 * S)),
        KeyedOp::Evict, // key 1 is full again at 2 s: removed, floor 2 s
        check(1, Call::Remaining),
        KeyedOp::Time(Step::BackNanos(S)), // 1 s: before the floor
        check(1, Call::Remaining),
        check(1, Call::Acquire(Amount::Raw(2))),
    ];
    assert_eq!(run(quota, policy, 0, &ops), 1);
}

/// Aggressive eviction on a monotonic clock: never a difference at all.
#[test]
fn forward_only_clock_with_eviction_after_every_operation() {
    const MS: u64 = 1_000_000;
    let (quota, policy) = quota(5, 1_000 * MS, 3).expect("a valid quota");
    let mut ops = Vec::new();
    for i in 0..60u64 {
        let n = if i % 2 == 0 {
            Call::AcquireOne
        } else {
            Call::Acquire(Amount::Raw(2))
        };
        ops.push(check((i % 4) as u8, n));
        ops.push(KeyedOp::Evict);
        ops.push(KeyedOp::Time(Step::Nanos(37 * MS * (i % 5))));
    }
    assert!(run(quota, policy, 0, &ops) > 0);
}

/// The case `keyed_model.proptest-regressions` holds, in the operations of today: one per
/// nanosecond, capacity 1; an eviction at 1 ns, then a take for key 0 at 0 ns, before the
/// eviction's floor, where a key created afresh is full as of the floor.
#[test]
fn a_take_before_the_floor_on_an_evicted_key() {
    let (quota, policy) = quota(1, 1, 1).expect("a valid quota");
    let ops = [
        KeyedOp::Time(Step::Nanos(1)),
        KeyedOp::Evict,
        KeyedOp::Time(Step::BackNanos(1)),
        check(0, Call::AcquireOne),
    ];
    assert_eq!(run(quota, policy, 0, &ops), 0);
}

/// A keyed limiter's answer as an in-process `Outcome` (`TooManyKeys` cannot happen here: the
/// limiters below have no bound).
fn keyed_outcome(r: Result<tollgate::Admitted, tollgate::keyed::KeyedError>) -> testkit::Outcome {
    use tollgate::keyed::KeyedError;
    testkit::outcome::observe(match r {
        Ok(a) => Ok(a),
        Err(KeyedError::Denied(d)) => Err(tollgate::AcquireError::Denied(d)),
        Err(KeyedError::InsufficientCapacity(e)) => {
            Err(tollgate::AcquireError::InsufficientCapacity(e))
        }
        Err(e) => panic!("{e}"),
    })
}

/// One key of `KeyedLimiter<u8, A>` and of a tiered one (the quota as its second tier) answers
/// every request exactly as the direct limiter of `A` does, `next_after` included: the keyed
/// limiters return the algorithms' own outcomes. Readings only move forward from 0, where the
/// direct limiter was built full, as a key the map does not hold is.
fn keyed_as_direct<A: tollgate::Algorithm>(quota: Quota, ops: &[(u64, u64, bool)]) {
    use tollgate::keyed::KeyedLimiter;
    use tollgate::{Direct, ManualClock, Nanos};
    let Ok(direct) = Direct::<A, _>::with_algorithm(quota, ManualClock::new()) else {
        return;
    };
    let keyed = KeyedLimiter::<u8, A, _>::with_algorithm(quota, ManualClock::new()).unwrap();
    let other = Quota::per_second(1).unwrap();
    let tiered =
        KeyedLimiter::<u8, Tiered<A>, _>::with_tiers(&[other, quota], |_| 1, ManualClock::new())
            .unwrap();
    let mut now = 0u64;
    for &(step, n, take) in ops {
        now = now.saturating_add(step);
        let at = Nanos::new(now);
        let (want, got, tier) = if take {
            (
                testkit::outcome::observe(direct.try_acquire_n_at(n, at)),
                keyed_outcome(keyed.check_key_n_at(&7, n, at)),
                keyed_outcome(tiered.check_key_n_at(&7, n, at)),
            )
        } else {
            (
                testkit::outcome::observe(direct.peek_n_at(n, at)),
                keyed_outcome(keyed.peek_key_n_at(&7, n, at)),
                keyed_outcome(tiered.peek_key_n_at(&7, n, at)),
            )
        };
        assert_eq!(got, want, "keyed, {n} at {now}");
        assert_eq!(tier, want, "tiered, {n} at {now}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_keyed_algorithm_answers_as_its_direct_limiter(
        count in 1u64..=12,
        period in prop_oneof![
            1 => 1u64..=1_000,
            3 => 1_000_000u64..=2_000_000_000,
        ],
        ops in prop::collection::vec(
            (prop_oneof![Just(0u64), 0u64..=2_000_000_000], 0u64..=13, any::<bool>()),
            1..64,
        ),
    ) {
        let Ok(quota) = Quota::per_period(count, Duration::from_nanos(period)) else {
            return Ok(());
        };
        keyed_as_direct::<tollgate::TokenBucketAlgorithm>(quota, &ops);
        keyed_as_direct::<tollgate::LeakyMeterAlgorithm>(quota, &ops);
        keyed_as_direct::<tollgate::FixedWindowAlgorithm>(quota, &ops);
        keyed_as_direct::<tollgate::SlidingWindowCounterAlgorithm>(quota, &ops);
        keyed_as_direct::<tollgate::SlidingWindowLogAlgorithm>(quota, &ops);
    }
}
