//! [`AllOf`]: several limits admitting a request only when all of them do, all or none.
//!
//! - **Against a model**: the same operations on an `AllOf` and on separate limits of the same
//!   quotas decided by the documented rule (peek every limit; take from all only when all admit;
//!   answer the binding limit's admission, or the longest refusal). After every operation every
//!   limit of the `AllOf` holds exactly what its model twin holds: a refused request's give-backs
//!   restore every limit it took from. Direct token buckets and keyed ones.
//! - **Threads**: at one reading, whatever the interleaving, exactly the tightest limit's burst is
//!   admitted, and once every thread is done, the other limits hold exactly what the admitted
//!   requests left them (every give-back landed, none more than was taken).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use proptest::prelude::*;
use testkit::driver::all_of::{run, Op};
use tollgate::keyed::{KeyedLimiter, TokenBucketKeys};
use tollgate::{AcquireError, AllOf, KeyedLimit, Limiter, ManualClock, Nanos, Quota, TokenBucket};

type Keyed = KeyedLimiter<u8, TokenBucketKeys, ManualClock>;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..3, 0u64..8).prop_map(|(key, n)| Op::Take { key, n }),
        2 => (0u8..3, 0u64..8).prop_map(|(key, n)| Op::Peek { key, n }),
        2 => (0u64..3_000).prop_map(Op::Wait),
    ]
}

/// Two or three quotas: counts per second, minute or hour, with small bursts.
fn quotas() -> impl Strategy<Value = Vec<Quota>> {
    let one = (1u64..20, 0usize..3, 1u64..8).prop_map(|(count, unit, burst)| {
        let q = match unit {
            0 => Quota::per_second(count),
            1 => Quota::per_minute(count),
            _ => Quota::per_hour(count),
        };
        q.and_then(|q| q.with_capacity(burst))
            .expect("a valid quota")
    });
    prop::collection::vec(one, 2..=3)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn all_of_answers_as_the_rule_and_gives_back_exactly(
        quotas in quotas(),
        ops in prop::collection::vec(op(), 1..120),
    ) {
        run(&quotas, &ops);
    }
}

/// Four threads at one reading on [10 a second with a burst of 11, 10 an hour with a burst of
/// 10]: requests take from the first, and those the second refuses give back. Exactly 10 are
/// admitted (a give-back in flight can only refuse a request early, and every thread retries), and
/// afterwards the first holds exactly 1: every give-back landed, none more than was taken.
#[test]
fn threads_admit_exactly_the_tightest_burst_and_every_give_back_lands() {
    let clock = ManualClock::new();
    let first = Quota::per_second(10).unwrap().with_capacity(11).unwrap();
    let second = Quota::per_hour(10).unwrap();
    let direct = Arc::new(
        AllOf::new([
            TokenBucket::with_clock(first, clock.clone()),
            TokenBucket::with_clock(second, clock.clone()),
        ])
        .unwrap(),
    );
    let keyed: Arc<AllOf<Keyed>> = Arc::new(
        AllOf::new([
            KeyedLimiter::with_clock(first, clock.clone()),
            KeyedLimiter::with_clock(second, clock.clone()),
        ])
        .unwrap(),
    );
    let admitted = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let start = Arc::new(Barrier::new(4));
    let now = Nanos::new(0);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (direct, keyed, admitted, start) = (
                direct.clone(),
                keyed.clone(),
                admitted.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                start.wait();
                for _ in 0..300 {
                    if direct.try_acquire_at(now).is_ok() {
                        admitted[0].fetch_add(1, Ordering::Relaxed);
                    }
                    if keyed.check_key_n_at(&7, 1, now).is_ok() {
                        admitted[1].fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread panicked");
    }
    assert_eq!(admitted[0].load(Ordering::Relaxed), 10);
    assert_eq!(admitted[1].load(Ordering::Relaxed), 10);
    assert_eq!(direct.limits()[0].remaining_at(now), 1);
    assert_eq!(direct.limits()[1].remaining_at(now), 0);
    assert_eq!(keyed.limits()[0].remaining_key_at(&7, now), 1);
    assert_eq!(keyed.limits()[1].remaining_key_at(&7, now), 0);
}

#[test]
fn a_request_above_a_capacity_takes_nothing_and_names_that_limit() {
    let clock = ManualClock::new();
    let limits = AllOf::new([
        TokenBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone()),
        TokenBucket::with_clock(Quota::per_minute(5).unwrap(), clock.clone()),
    ])
    .unwrap();
    match limits.try_acquire_n(6) {
        Err(AcquireError::InsufficientCapacity(e)) => assert_eq!(e.capacity, 5),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        limits.limits()[0].remaining(),
        10,
        "the first limit's take was given back"
    );
    assert_eq!(limits.quotas().len(), 2);
}
