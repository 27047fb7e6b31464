//! Loom models of [`tollgate::window::FixedWindow`]'s single-word protocol: the window index and
//! the count change together in one compare-and-swap, so two racers never both take the last slot,
//! and a racer that opens a new window never loses or doubles a count taken in the old one.
//!
//! Readings are explicit `Nanos` passed to the `_at` methods. `check_reaches` (see
//! `common/mod.rs`) asserts that every outcome the race allows was run.
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release`.

#![cfg(tollgate_loom)]

mod common;

use std::time::Duration;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::window::FixedWindow;
use tollgate::{ManualClock, Nanos, Quota};

/// Windows of one second.
const WINDOW: u64 = 1_000_000_000;

/// A reading in window 0.
const OLD: Nanos = Nanos::new(WINDOW - 1);

/// A reading in window 1.
const NEW: Nanos = Nanos::new(WINDOW);

/// `count` per second, built inside the running model.
fn limiter(count: u64) -> Arc<FixedWindow<ManualClock>> {
    let quota = Quota::per_period(count, Duration::from_nanos(WINDOW)).expect("a valid quota");
    Arc::new(FixedWindow::with_clock(quota, ManualClock::new()).expect("a valid window quota"))
}

#[test]
fn two_threads_racing_for_the_last_slot_exactly_one_wins() {
    check_reaches(&[(false, true), (true, false)], || {
        let limiter = limiter(2);
        limiter.try_acquire_at(OLD).expect("the first of two");

        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_at(OLD).is_ok())
        };
        let mine = limiter.try_acquire_at(OLD).is_ok();
        let theirs = other.join().expect("racer panicked");

        assert!(
            mine ^ theirs,
            "exactly one takes the last slot: {mine} {theirs}"
        );
        assert_eq!(limiter.remaining_at(OLD), 0);
        (mine, theirs)
    });
}

/// One thread admits in window 0 while another opens window 1. Whatever the order, window 0
/// counts what it admitted and window 1 starts from zero plus its own admission: nothing is lost
/// (the old-window racer, landing second, is counted in window 1, where its old reading is taken
/// as a reading in the newer window) and nothing is counted twice.
#[test]
fn a_racer_at_the_rollover_against_one_in_the_old_window() {
    // Summary: (old-window racer admitted, slots left in window 1).
    check_reaches(&[(true, 0), (true, 1)], || {
        let limiter = limiter(2);
        limiter
            .try_acquire_at(OLD)
            .expect("the first slot of window 0");

        let old = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_at(OLD))
        };
        let new = limiter.try_acquire_at(NEW);
        let old = old.join().expect("old-window racer panicked");

        // Window 0 had a slot left, and window 1 two: both fit whatever the order.
        let old_ok = old.expect("window 0 had a slot, or window 1 took it");
        new.expect("window 1 is fresh");
        // The old racer landed first: counted in window 0, window 1 holds one admission. It
        // landed second: counted in window 1 with the new one. Either way window 1's count is
        // its own admissions, never zero after the rollover, never three.
        let left = limiter.remaining_at(NEW);
        let window_0_end_from_old = old_ok.reset_after();
        if left == 1 {
            // Counted in window 0, which ends 1 ns after its reading.
            assert_eq!(window_0_end_from_old, Duration::from_nanos(1));
        } else {
            assert_eq!(left, 0, "window 1 counts both");
            // Counted in window 1, which ends a window after the old reading's window.
            assert_eq!(window_0_end_from_old, Duration::from_nanos(WINDOW + 1));
        }
        (true, left)
    });
}

/// Three racers for two slots of a fresh window, one of them with `n = 2`: an `n`-slot request is
/// all or nothing, and the window never counts more than two.
#[test]
fn an_n_slot_request_racing_single_slots_is_all_or_nothing() {
    // Summary: (the pair admitted, singles admitted).
    check_reaches(&[(false, 2), (true, 0)], || {
        let limiter = limiter(2);
        let pair = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_at(2, OLD).is_ok())
        };
        let single = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_at(OLD).is_ok())
        };
        let mine = limiter.try_acquire_at(OLD).is_ok();
        let pair = pair.join().expect("pair racer panicked");
        let single = single.join().expect("single racer panicked");
        let singles = usize::from(mine) + usize::from(single);

        let taken = if pair { 2 } else { 0 } + singles;
        assert!(taken <= 2, "two slots, {taken} taken");
        assert_eq!(limiter.remaining_at(OLD), 2 - taken as u64);
        (pair, singles)
    });
}
