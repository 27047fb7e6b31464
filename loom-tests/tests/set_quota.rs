//! Loom models of a quota change racing admissions (`Direct::set_quota_at`, `src/change.rs`; the
//! keyed limiter's at the end): the change seals the old state, carries over what was left (at
//! most the new capacity) and publishes the new block, while admissions on the old block either
//! land before the seal (and are carried over as taken) or meet it and decide again on the new
//! block. No admission is lost
//! or doubled, and the old block is freed only once no admission reads it (loom reports a block
//! freed under a reader, or leaked).
//!
//! The clock stands still, so nothing refills: every model's bound is exact.
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release`.

#![cfg(tollgate_loom)]

mod common;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::window::SlidingWindowLog;
use tollgate::{ManualClock, Nanos, Quota, TokenBucket};

const T0: Nanos = Nanos::ZERO;

/// A bucket of 2 loses one token of capacity while a thread takes two, one at a time: the thread
/// gets both (both before the change, or one before and the one carried over) or one (the change
/// first, carrying over min(2, 1)); never more than the bucket held, and never more than the new
/// capacity left after.
#[test]
fn a_change_racing_admissions_loses_and_doubles_nothing() {
    check_reaches(&[(1, 0), (2, 0)], || {
        let bucket = Arc::new(TokenBucket::with_clock(
            Quota::per_hour(2).expect("valid"),
            ManualClock::new(),
        ));
        let taker = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                (0..2).filter(|_| bucket.try_acquire_at(T0).is_ok()).count() as u64
            })
        };
        bucket
            .set_quota_at(Quota::per_hour(1).expect("valid"), T0)
            .expect("a bucket enforces every quota");
        let taken = taker.join().expect("taker panicked");
        let left = bucket.remaining_at(T0);
        assert!(taken + left <= 2, "{taken} taken, {left} left of 2");
        assert!(left <= 1, "{left} left above the new capacity");
        assert_eq!(bucket.quota(), Quota::per_hour(1).expect("valid"));
        (taken, left)
    });
}

/// The sliding log's seal races a request for two (a group claim, the log's multi-slot
/// protocol): the group lands whole before the seal (one admission left, carried over) or after
/// it on the new log (none left), never half.
#[test]
fn a_change_racing_a_group_claim_on_the_log() {
    check_reaches(&[(2, 0), (2, 1)], || {
        let log = Arc::new(
            SlidingWindowLog::with_clock(Quota::per_hour(3).expect("valid"), ManualClock::new())
                .expect("a short log"),
        );
        let taker = {
            let log = Arc::clone(&log);
            thread::spawn(move || log.try_acquire_n_at(2, T0).map_or(0, |_| 2u64))
        };
        log.set_quota_at(Quota::per_hour(2).expect("valid"), T0)
            .expect("a log of 2 fits");
        let taken = taker.join().expect("taker panicked");
        let left = log.remaining_at(T0);
        assert!(taken + left <= 3, "{taken} taken, {left} left of 3");
        assert!(left <= 2);
        (taken, left)
    });
}

/// Two changes in a row while a thread admits: the second change seals the block the first
/// published, and a reader still on the first block's predecessor decides again on the latest.
#[test]
fn two_changes_racing_an_admission() {
    check_reaches(&[1u64], || {
        let bucket = Arc::new(TokenBucket::with_clock(
            Quota::per_hour(1).expect("valid"),
            ManualClock::new(),
        ));
        let taker = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || u64::from(bucket.try_acquire_at(T0).is_ok()))
        };
        bucket
            .set_quota_at(Quota::per_hour(3).expect("valid"), T0)
            .expect("valid");
        bucket
            .set_quota_at(Quota::per_hour(2).expect("valid"), T0)
            .expect("valid");
        let taken = taker.join().expect("taker panicked");
        let left = bucket.remaining_at(T0);
        // One token was held, and changes never add: the taker gets it, or nobody does and it
        // stays.
        assert_eq!(taken + left, 1);
        taken + left
    });
}

/// A sharded bucket's change seals its shards one after another while a request for two gathers
/// a token from each of its two shards: the gather lands whole before the seals (nothing left),
/// or after them on the new shards (which hold the two carried over), or is cut by a seal
/// between its two takes: then its first token stays taken (a sealed shard takes nothing back),
/// the change carries over the one left, and the request, asking again on the new shards, is
/// refused. Never more than the two held.
#[test]
fn a_sharded_change_racing_a_gather() {
    check_reaches(&[(0, 1), (2, 0)], || {
        let limiter = Arc::new(
            tollgate::ShardedBucket::builder(Quota::per_hour(2).expect("valid"))
                .shards(2)
                .clock(ManualClock::new())
                .build()
                .expect("two shards"),
        );
        let taker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_from(0, 2, T0).map_or(0, |_| 2u64))
        };
        limiter.set_quota_at(Quota::per_hour(2).expect("valid"), T0);
        let taken = taker.join().expect("taker panicked");
        let left = limiter.remaining_at(T0);
        assert!(taken + left <= 2, "{taken} taken, {left} left of 2");
        (taken, left)
    });
}

/// The sub-window counter's seal (its hot word) racing two admissions, as the bucket's model:
/// both before the change, one on each side (the one left carried over), or both after it
/// (min(2, 1) carried over, so one is refused).
#[test]
fn a_sub_window_change_racing_admissions() {
    check_reaches(&[(1, 0), (2, 0)], || {
        let limiter = Arc::new(
            tollgate::window::SubWindowCounter::with_clock(
                Quota::per_hour(2).expect("valid"),
                2,
                ManualClock::new(),
            )
            .expect("two sub-windows"),
        );
        let taker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                (0..2)
                    .filter(|_| limiter.try_acquire_at(T0).is_ok())
                    .count() as u64
            })
        };
        limiter
            .set_quota_at(Quota::per_hour(1).expect("valid"), T0)
            .expect("two sub-windows divide an hour");
        let taken = taker.join().expect("taker panicked");
        let left = limiter.remaining_at(T0);
        assert!(taken + left <= 2, "{taken} taken, {left} left of 2");
        assert!(left <= 1);
        (taken, left)
    });
}

/// A keyed limiter's change racing admissions on one key (`KeyedLimiter::set_quota_at`,
/// `src/keyed/change.rs`; under loom the map is the stand-in whose readers hold no lock while
/// they decide): the key's state is sealed and converted under the map's write lock, and an
/// admission either lands before the seal (and is carried over as taken) or meets it, takes
/// effect nowhere, and decides again on the converted state. The key is created by the first
/// admission, before or after the change (then from a fresh state of the old quota, converted).
#[test]
fn a_keyed_change_racing_admissions_on_a_key() {
    check_reaches(&[(1, 0), (2, 0)], || {
        let limiter: Arc<tollgate::keyed::KeyedLimiter<u8, tollgate::keyed::TokenBucketKeys, _>> =
            Arc::new(tollgate::keyed::KeyedLimiter::with_clock(
                Quota::per_hour(2).expect("valid"),
                ManualClock::new(),
            ));
        let taker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                (0..2)
                    .filter(|_| limiter.check_key_at(&0, T0).is_ok())
                    .count() as u64
            })
        };
        limiter
            .set_quota_at(Quota::per_hour(1).expect("valid"), T0)
            .expect("a bucket enforces every quota");
        let taken = taker.join().expect("taker panicked");
        let left = limiter.remaining_key_at(&0, T0);
        assert!(taken + left <= 2, "{taken} taken, {left} left of 2");
        assert!(left <= 1, "{left} left above the new capacity");
        (taken, left)
    });
}

/// A keyed change that raises the capacity while a key is first seen: whether the key is
/// created before the change (and converted: what it had left, 1) or after it (a key not held
/// stands for a fresh state of the old quota: it starts from the old capacity, 1, and refills to
/// the new one), the two requests get one token, never the new capacity's two.
#[test]
fn a_keyed_change_raising_the_capacity_racing_a_new_key() {
    check_reaches(&[(1, 0)], || {
        let limiter: Arc<tollgate::keyed::KeyedLimiter<u8, tollgate::keyed::TokenBucketKeys, _>> =
            Arc::new(tollgate::keyed::KeyedLimiter::with_clock(
                Quota::per_hour(1).expect("valid"),
                ManualClock::new(),
            ));
        let taker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                (0..2)
                    .filter(|_| limiter.check_key_at(&7, T0).is_ok())
                    .count() as u64
            })
        };
        limiter
            .set_quota_at(Quota::per_hour(2).expect("valid"), T0)
            .expect("a bucket enforces every quota");
        let taken = taker.join().expect("taker panicked");
        let left = limiter.remaining_key_at(&7, T0);
        assert!(taken + left <= 1, "{taken} taken, {left} left of 1");
        (taken, left)
    });
}
