//! Tests across limiters: what every direct limiter, every keyed algorithm or every pointer to a
//! limiter must do alike. Test-only, at the top of the layers, since they name every limiter.

use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::cas::writes;
use crate::clock::ManualClock;
use crate::keyed::KeyedLimiter;
use crate::keyed::{
    FixedWindowKeys, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys,
    TokenBucketKeys,
};
use crate::leaky::LeakyMeter;
use crate::limiter::{KeyedLimit, Limiter};
use crate::quota::Quota;
use crate::window::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, SubWindowCounter};
use crate::{ShardedBucket, TokenBucket};

/// Every request a caller can make of an exhausted limiter that must be refused or answered
/// without a write: denials of every size, impossible requests, queries and peeks.
fn refuse_everything(limiter: &dyn Limiter, capacity: u64) {
    assert!(limiter.try_acquire().is_err());
    for n in 1..=capacity {
        assert!(limiter.try_acquire_n(n).is_err(), "n = {n}");
        assert!(limiter.peek_n(n).is_err(), "n = {n}");
    }
    assert!(limiter.try_acquire_n(capacity + 1).is_err());
    assert!(limiter.peek_n(capacity + 1).is_err());
    assert!(limiter.try_acquire_n(0).is_ok());
    assert!(limiter.peek_n(0).is_ok());
    // Not always 0: the strict meter refuses while places are free.
    let _ = limiter.remaining();
}

/// Exhausts `limiter` on `clock`, shows that no denial or peek writes, then that an admission
/// does (so that the count can see a write at all).
fn denials_and_peeks_write_nothing(name: &str, limiter: &dyn Limiter, clock: &ManualClock) {
    let capacity = limiter.quota().capacity();
    // Peeks on a limiter that would admit write nothing either.
    let before = writes::on_this_thread();
    assert!(limiter.peek_n(capacity).is_ok(), "{name}");
    assert_eq!(limiter.remaining(), capacity, "{name}");
    assert_eq!(writes::on_this_thread(), before, "{name}: a peek wrote");
    while limiter.try_acquire().is_ok() {}
    let before = writes::on_this_thread();
    refuse_everything(limiter, capacity);
    assert_eq!(
        writes::on_this_thread(),
        before,
        "{name}: a denial, a query or a peek wrote"
    );
    clock.advance(Duration::from_secs(3600));
    assert!(limiter.try_acquire().is_ok(), "{name}");
    assert!(
        writes::on_this_thread() > before,
        "{name}: an admission went uncounted"
    );
}

#[test]
fn no_direct_limiter_writes_on_a_denial_or_a_peek() {
    let q = Quota::per_second(4).unwrap();
    let clock = ManualClock::new();
    let limiters: Vec<(&str, Box<dyn Limiter>)> = vec![
        (
            "TokenBucket",
            Box::new(TokenBucket::with_clock(q, clock.clone())),
        ),
        (
            "LeakyMeter",
            Box::new(LeakyMeter::with_clock(q, clock.clone())),
        ),
        (
            "FixedWindow",
            Box::new(FixedWindow::with_clock(q, clock.clone()).unwrap()),
        ),
        (
            "SlidingWindowCounter",
            Box::new(SlidingWindowCounter::with_clock(q, clock.clone()).unwrap()),
        ),
        (
            "SubWindowCounter",
            Box::new(SubWindowCounter::with_clock(q, 4, clock.clone()).unwrap()),
        ),
        (
            "SlidingWindowLog",
            Box::new(SlidingWindowLog::with_clock(q, clock.clone()).unwrap()),
        ),
        (
            "ShardedBucket, 1 shard",
            Box::new(
                ShardedBucket::builder(q)
                    .shards(1)
                    .clock(clock.clone())
                    .build()
                    .unwrap(),
            ),
        ),
    ];
    for (name, limiter) in &limiters {
        denials_and_peeks_write_nothing(name, limiter.as_ref(), &clock);
    }
}

#[test]
fn the_meter_writes_nothing_on_a_refused_or_peeked_scheduling() {
    let clock = ManualClock::new();
    let meter = LeakyMeter::with_clock(Quota::per_second(4).unwrap(), clock);
    meter.try_schedule_n(4).unwrap();
    let before = writes::on_this_thread();
    // Full: every scheduling is refused (5 can never be), a request for nothing answers.
    for n in 1..=5 {
        assert!(meter.try_schedule_n(n).is_err(), "n = {n}");
        assert!(meter.peek_schedule_n(n).is_err(), "n = {n}");
    }
    assert!(meter.try_schedule_n(0).is_ok());
    assert!(meter.peek_schedule_n(0).is_ok());
    assert!(meter.try_schedule().is_err());
    assert_eq!(writes::on_this_thread(), before);
}

/// Denials on a held key, and peeks and queries on held and unknown keys, for every per-key
/// algorithm.
fn keyed_denials_write_nothing<A: Algorithm>(name: &str) {
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<u8, A, _> =
        KeyedLimiter::with_algorithm(Quota::per_second(3).unwrap(), clock.clone()).unwrap();
    while limiter.check_key(&1).is_ok() {}
    let before = writes::on_this_thread();
    for n in 0..=4 {
        let _ = limiter.check_key_n(&1, n);
        let _ = limiter.peek_key_n(&1, n);
        let _ = limiter.peek_key_n(&2, n);
    }
    assert!(limiter.check_key_n(&2, 0).is_ok());
    let _ = (limiter.remaining_key(&1), limiter.remaining_key(&2));
    assert_eq!(writes::on_this_thread(), before, "{name}");
    assert!(!limiter.contains_key(&2), "{name}: a query created a key");
    clock.advance(Duration::from_secs(3600));
    assert!(limiter.check_key(&1).is_ok());
    assert!(writes::on_this_thread() > before, "{name}");
}

#[test]
fn no_keyed_algorithm_writes_on_a_denial_or_a_peek() {
    keyed_denials_write_nothing::<TokenBucketKeys>("token bucket");
    keyed_denials_write_nothing::<LeakyMeterKeys>("leaky meter");
    keyed_denials_write_nothing::<FixedWindowKeys>("fixed window");
    keyed_denials_write_nothing::<SlidingWindowCounterKeys>("sliding counter");
    keyed_denials_write_nothing::<SlidingWindowLogKeys>("sliding log");
}

/// Admits once through whatever limiter it is given.
fn admit_once<L: Limiter>(limiter: L) -> bool {
    limiter.try_acquire().is_ok()
}

#[test]
fn pointers_to_limiters_are_limiters() {
    let q = Quota::per_second(2).unwrap();
    let bucket = std::sync::Arc::new(TokenBucket::with_clock(q, ManualClock::new()));
    assert!(admit_once(&*bucket));
    assert!(admit_once(std::sync::Arc::clone(&bucket)));
    assert!(!admit_once(&bucket));
    let boxed: Box<dyn Limiter> = Box::new(TokenBucket::with_clock(q, ManualClock::new()));
    assert!(admit_once(&boxed));
    assert_eq!(boxed.remaining(), 1);
    assert!(admit_once(boxed));

    let keyed: std::sync::Arc<KeyedLimiter<String, TokenBucketKeys, _>> = std::sync::Arc::new(
        KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), ManualClock::new()),
    );
    fn gate<L: KeyedLimit<str>>(limits: &L, key: &str) -> bool {
        limits.check_key(key).is_ok()
    }
    assert!(gate(&keyed, "a"));
    assert!(!gate(&std::sync::Arc::clone(&keyed), "a"));
    assert_eq!(KeyedLimit::<str>::remaining_key(&keyed, "b"), 1);
}
