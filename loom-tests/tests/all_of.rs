//! Loom models of [`tollgate::AllOf`]: a request takes from each limit in turn and, refused by a
//! later one, gives back to those before it. Two threads race on two token buckets at one
//! reading: exactly what the tightest limit allows is admitted, a give-back in flight can only
//! make another request be refused (never admitted beyond a limit), and once both are done the
//! other limit holds exactly what the admitted requests left it.
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --test all_of`.

#![cfg(tollgate_loom)]

mod common;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::{AllOf, Limiter, ManualClock, Nanos, Quota, TokenBucket};

const T0: Nanos = Nanos::ZERO;

/// One a second, with a burst of `capacity`.
fn bucket(capacity: u64) -> TokenBucket<ManualClock> {
    let quota = Quota::per_second(1)
        .and_then(|q| q.with_capacity(capacity))
        .expect("a valid quota");
    TokenBucket::with_clock(quota, ManualClock::new())
}

/// Limits [burst 2, burst 1]: two threads each ask for one. Exactly one is admitted (the second
/// limit binds); the loser took from the first limit too, and gave it back. Afterwards the first
/// holds exactly 1. Summary: which thread won.
#[test]
fn two_requests_on_two_limits_admit_exactly_the_tighter_one() {
    check_reaches(&[(false, true), (true, false)], || {
        let limits = Arc::new(AllOf::new([bucket(2), bucket(1)]).expect("two limits"));
        let other = {
            let limits = Arc::clone(&limits);
            thread::spawn(move || limits.try_acquire_at(T0).is_ok())
        };
        let mine = limits.try_acquire_at(T0).is_ok();
        let theirs = other.join().expect("racer panicked");
        assert!(
            mine ^ theirs,
            "admitted {} of a limit of 1",
            u8::from(mine) + u8::from(theirs)
        );
        assert_eq!(
            limits.limits()[0].remaining_at(T0),
            1,
            "a give-back was lost or doubled"
        );
        assert_eq!(limits.limits()[1].remaining_at(T0), 0);
        (mine, theirs)
    });
}

/// Limits [burst 1, burst 1 already used]: one thread's request takes the first limit's token and
/// is refused by the second, giving the token back; the other thread's request, meanwhile, may be
/// refused by the first limit (the token is held in flight) or by the second. Both are refused in
/// every interleaving, and afterwards the first limit holds its token again. Summary: both
/// answers (which limit refused is not visible in them: both wait 1 s).
#[test]
fn a_give_back_in_flight_only_refuses_never_admits() {
    check_reaches(&[(false, false)], || {
        let limits = Arc::new(AllOf::new([bucket(1), bucket(1)]).expect("two limits"));
        limits.limits()[1]
            .try_acquire_at(T0)
            .expect("the second limit's one token");
        let other = {
            let limits = Arc::clone(&limits);
            thread::spawn(move || limits.try_acquire_at(T0).is_ok())
        };
        let mine = limits.try_acquire_at(T0).is_ok();
        let theirs = other.join().expect("racer panicked");
        assert_eq!(
            limits.limits()[0].remaining_at(T0),
            1,
            "a give-back was lost"
        );
        (mine, theirs)
    });
}
