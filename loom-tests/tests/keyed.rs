//! Loom models of [`tollgate::keyed::KeyedLimiter`]'s protocol: admissions compare-and-swap a key's
//! word under its shard's read lock; eviction decides and removes under the write lock; a new key
//! reserves its place in the key count and is inserted under the write lock.
//!
//! Under `cfg(tollgate_loom)` the limiter's map is a loom `RwLock` around a `HashMap` (one shard), so these
//! models check the limiter's own protocol, taking the concurrent map's correctness as given.
//! Readings are explicit, so "no time passes" is exact.
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --test keyed`.

// Without `--cfg tollgate_loom` this file compiles to an empty test binary.
#![cfg(tollgate_loom)]

mod common;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::keyed::{
    Algorithm, FixedWindowKeys, KeyedError, KeyedLimiter, SlidingWindowCounterKeys,
    SlidingWindowLogKeys, TokenBucketKeys,
};
use tollgate::{ManualClock, Nanos, Quota};

type Limiter = KeyedLimiter<u8, TokenBucketKeys, ManualClock>;

/// The reading keys are first used at.
const T0: Nanos = Nanos::ZERO;

/// One second later: a bucket of two per second used at [`T0`] is full again.
const T1: Nanos = Nanos::new(1_000_000_000);

/// The limiters' clock: it reads [`T2`], the latest reading any model uses, since an eviction
/// never judges at a reading ahead of the clock.
fn clock() -> ManualClock {
    ManualClock::starting_at(T2)
}

/// Two per second, capacity 2.
fn limiter() -> Limiter {
    KeyedLimiter::with_clock(Quota::per_second(2).expect("a valid quota"), clock())
}

/// Key 1 is full at [`T1`] (admitted once at [`T0`]); one thread admits on it at `T1` while another
/// evicts at `T1`. Either the eviction runs first (and removes a full key, which the admission
/// creates again, full) or the admission does (and the eviction keeps the key, no longer full): in
/// both, the key has exactly one token left afterwards, and exactly the capacity is admitted at `T1`
/// in all. An eviction that removed the key after the admission's write would let a third token
/// through.
#[test]
fn eviction_racing_an_admission_never_loses_it() {
    check_reaches(&[(0, true), (1, true)], || {
        let limiter = Arc::new(limiter());
        limiter.check_key_at(&1, T0).expect("a fresh key admits");

        let evictor = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.retain_recent_at(T1))
        };
        let admitted = limiter.check_key_at(&1, T1).is_ok();
        let removed = evictor.join().expect("evictor panicked");

        assert!(admitted, "a full key refused an admission");
        assert_eq!(
            limiter.remaining_key_at(&1, T1),
            1,
            "the admission was lost"
        );
        assert!(limiter.check_key_at(&1, T1).is_ok());
        assert!(
            matches!(limiter.check_key_at(&1, T1), Err(KeyedError::Denied(_))),
            "more than the capacity admitted at T1"
        );
        assert_eq!(limiter.len(), 1);
        assert_eq!(limiter.evictions(), removed as u64);
        (removed, admitted)
    });
}

/// Two threads send the first request of the same key at once: one creates it, the other finds it
/// (under the write lock, or on the read path) and admits on the same state. One key, one
/// reservation, both admissions counted.
#[test]
fn two_threads_inserting_the_same_new_key_share_one_state() {
    check_reaches(&[(0, 1)], || {
        let limiter = Arc::new(limiter().with_max_keys(1));

        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.check_key_at(&7, T0).map(|a| a.remaining()))
        };
        let mine = limiter.check_key_at(&7, T0).map(|a| a.remaining());
        let theirs = other.join().expect("racer panicked");

        let (mine, theirs) = (
            mine.expect("room for the key"),
            theirs.expect("room for the key"),
        );
        assert_eq!(limiter.len(), 1, "two states, or two places, for one key");
        assert_eq!(limiter.remaining_key_at(&7, T0), 0, "an admission was lost");
        assert_eq!(limiter.overflowed(), 0);
        (mine.min(theirs), mine.max(theirs))
    });
}

/// Two threads create different new keys with room for one: exactly one gets the place, the other
/// is refused as [`KeyedError::TooManyKeys`]; the count never passes the bound.
#[test]
fn two_new_keys_racing_for_the_last_place_exactly_one_gets_it() {
    check_reaches(&[1u8, 2u8], || {
        let limiter = Arc::new(limiter().with_max_keys(1));

        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.check_key_at(&2, T0))
        };
        let mine = limiter.check_key_at(&1, T0);
        let theirs = other.join().expect("racer panicked");

        let winner = match (mine, theirs) {
            (Ok(_), Err(KeyedError::TooManyKeys(_))) => 1,
            (Err(KeyedError::TooManyKeys(_)), Ok(_)) => 2,
            other => panic!("exactly one new key must get the place: {other:?}"),
        };
        assert_eq!(limiter.len(), 1);
        assert!(limiter.contains_key(&winner));
        assert_eq!(limiter.overflowed(), 1);
        winner
    });
}

/// The window algorithms' states race eviction the same way: key 1 is used up at [`T0`] (both of
/// its admissions in window 0, or in the log's last second), so at [`T2`] it is forgettable (the
/// sliding counter counts window 0 until window 2 starts); one thread admits on it at `T2` while
/// another evicts at `T2`. Whichever runs first, the key has exactly one admission left at `T2`
/// afterwards, and exactly the limit is admitted at `T2` in all.
/// For the log the state is a ring of two slots and a head, claimed lock-free under the read lock.
fn window_eviction_racing_an_admission<A: Algorithm>() {
    check_reaches(&[(0, true), (1, true)], || {
        let limiter: Arc<KeyedLimiter<u8, A, ManualClock>> = Arc::new(
            KeyedLimiter::with_algorithm(Quota::per_second(2).expect("a valid quota"), clock())
                .expect("a valid window quota"),
        );
        limiter
            .check_key_n_at(&1, 2, T0)
            .expect("a fresh key admits");

        let evictor = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.retain_recent_at(T2))
        };
        let admitted = limiter.check_key_at(&1, T2).is_ok();
        let removed = evictor.join().expect("evictor panicked");

        assert!(admitted, "a forgettable key refused an admission");
        assert_eq!(
            limiter.remaining_key_at(&1, T2),
            1,
            "the admission was lost"
        );
        assert!(limiter.check_key_at(&1, T2).is_ok());
        assert!(
            matches!(limiter.check_key_at(&1, T2), Err(KeyedError::Denied(_))),
            "more than the limit admitted at T2"
        );
        assert_eq!(limiter.len(), 1);
        (removed, admitted)
    });
}

/// Two seconds after [`T0`]: past both windows a sliding counter counts.
const T2: Nanos = Nanos::new(2_000_000_000);

#[test]
fn fixed_window_eviction_racing_an_admission_never_loses_it() {
    window_eviction_racing_an_admission::<FixedWindowKeys>();
}

#[test]
fn sliding_counter_eviction_racing_an_admission_never_loses_it() {
    window_eviction_racing_an_admission::<SlidingWindowCounterKeys>();
}

#[test]
fn sliding_log_eviction_racing_an_admission_never_loses_it() {
    window_eviction_racing_an_admission::<SlidingWindowLogKeys>();
}
