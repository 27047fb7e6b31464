//! Loom models of [`tollgate::window::SlidingWindowCounter`]'s single-word compare-and-swap and of
//! [`tollgate::window::SubWindowCounter`]'s publish-then-advance protocol (a hot word plus a
//! history ring).
//!
//! Each model races two or three threads through one or two operations at explicit readings and
//! asserts what must hold in every interleaving: the last slot of a window goes to exactly one
//! thread, a rollover racing an admission in the old window neither loses nor doubles a count,
//! and the history a rollover publishes is the final count of the sub-window it leaves. Each also
//! returns a summary of how the race went, and `check_reaches` asserts that every order the race
//! allows was explored.
//!
//! Windows are 1000 ns long (so counts of up to 31 fit); the counters are built inside each
//! `loom::model` closure.
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --test sliding_counter`.

#![cfg(tollgate_loom)]

mod common;

use std::time::Duration;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::window::{SlidingWindowCounter, SubWindowCounter};
use tollgate::{ManualClock, Nanos, Quota};

/// `n` per window of 1000 ns.
fn quota(n: u64) -> Quota {
    Quota::per_period(n, Duration::from_nanos(1000)).expect("n <= 1000 per 1000 ns is valid")
}

fn one(n: u64) -> Arc<SlidingWindowCounter<ManualClock>> {
    Arc::new(SlidingWindowCounter::with_clock(quota(n), ManualClock::new()).expect("fits"))
}

fn sub(n: u64, k: u64) -> Arc<SubWindowCounter<ManualClock>> {
    Arc::new(SubWindowCounter::with_clock(quota(n), k, ManualClock::new()).expect("fits"))
}

fn at(ns: u64) -> Nanos {
    Nanos::new(ns)
}

#[test]
fn one_word_two_threads_racing_for_the_last_slot_exactly_one_wins() {
    check_reaches(&["main thread won", "spawned thread won"], || {
        let c = one(2);
        c.try_acquire_at(at(100)).expect("a fresh window admits");

        let other = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.try_acquire_at(at(200)))
        };
        let mine = c.try_acquire_at(at(300));
        let theirs = other.join().expect("racer panicked");

        assert_eq!(
            usize::from(mine.is_ok()) + usize::from(theirs.is_ok()),
            1,
            "one slot, two takers: {mine:?}, {theirs:?}"
        );
        assert_eq!(c.remaining_at(at(300)), 0);
        assert!(format!("{c:?}").contains("window: 0, previous: 0, current: 2"));
        if mine.is_ok() {
            "main thread won"
        } else {
            "spawned thread won"
        }
    });
}

#[test]
fn sub_windows_two_threads_racing_for_the_last_slot_exactly_one_wins() {
    check_reaches(&["main thread won", "spawned thread won"], || {
        // 2 per window in 2 sub-windows of 500 ns; one in the first, the last slot in the second.
        let c = sub(2, 2);
        c.try_acquire_at(at(100)).expect("a fresh window admits");

        let other = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.try_acquire_at(at(600)))
        };
        let mine = c.try_acquire_at(at(700));
        let theirs = other.join().expect("racer panicked");

        assert_eq!(
            usize::from(mine.is_ok()) + usize::from(theirs.is_ok()),
            1,
            "one slot, two takers: {mine:?}, {theirs:?}"
        );
        assert_eq!(c.remaining_at(at(700)), 0);
        if mine.is_ok() {
            "main thread won"
        } else {
            "spawned thread won"
        }
    });
}

#[test]
fn one_word_rollover_racing_the_old_window_neither_loses_nor_doubles() {
    // Summary: whether the request in the old window was admitted.
    check_reaches(&[false, true], || {
        // 4 per window; 3 admitted in window 0.
        let c = one(4);
        c.try_acquire_n_at(3, at(0)).expect("a fresh window admits");

        // The old-window request: admitted only if it lands before the rollover (3 + 1 <= 4); after
        // it, its reading is judged at the start of window 1 (3 + 1 + 1 > 4).
        let old = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.try_acquire_at(at(10)))
        };
        // The rollover, half way into window 1: 4 × 1/2 + 1 <= 4 and 3 × 1/2 + 1 <= 4 both admit.
        let rollover = c.try_acquire_at(at(1500));
        let old = old.join().expect("racer panicked");

        assert!(
            rollover.is_ok(),
            "the rollover admits either way: {rollover:?}"
        );
        let previous = 3 + u64::from(old.is_ok());
        let state = format!("{c:?}");
        assert!(
            state.contains(&format!("window: 1, previous: {previous}, current: 1")),
            "old admitted: {}, state {state}",
            old.is_ok()
        );
        // And the estimate agrees: at 1750, previous × 1/4 + 1.
        let expected = (4000 - previous * 250 - 1000) / 1000;
        assert_eq!(c.remaining_at(at(1750)), expected);
        old.is_ok()
    });
}

#[test]
fn sub_window_rollover_racing_an_old_admission_and_a_reader_publishes_the_final_count() {
    // Summary: (the rollover won, the reader saw room).
    check_reaches(
        &[(false, false), (false, true), (true, false), (true, true)],
        || {
            // 3 per window in 2 sub-windows of 500 ns: one admitted in sub-window 0, one in 1
            // (that rollover published count(0) = 1).
            let c = sub(3, 2);
            c.try_acquire_at(at(0)).expect("admits");
            c.try_acquire_at(at(600)).expect("admits");

            // An admission in sub-window 1: 0 + 1 + 1 + 1 <= 3.
            let old = {
                let c = Arc::clone(&c);
                thread::spawn(move || c.try_acquire_at(at(700)))
            };
            // A reader at the start of sub-window 2: room for one only before either write.
            let reader = {
                let c = Arc::clone(&c);
                thread::spawn(move || c.peek_n_at(1, at(1000)).is_ok())
            };
            // The rollover into sub-window 2: count(0) at full weight + count(1) + 1 <= 3 only if
            // count(1) is still 1; it publishes count(1) before advancing.
            let rollover = c.try_acquire_at(at(1000));
            let old = old.join().expect("racer panicked");
            let saw_room = reader.join().expect("reader panicked");

            assert_eq!(
                usize::from(rollover.is_ok()) + usize::from(old.is_ok()),
                1,
                "room for one more: rollover {rollover:?}, old {old:?}"
            );
            // At 1500 (sub-window 3) the estimate is count(1) at full weight + count(2):
            // if the rollover won, count(1) comes from the history it published (1) and count(2)
            // is 1; if the old admission won, the hot word still holds count(1) = 2. Either way 2:
            // the published history is the final count, neither lost nor doubled.
            assert_eq!(c.remaining_at(at(1500)), 1, "{c:?}");
            assert_eq!(
                c.remaining_at(at(2000)),
                3 - u64::from(rollover.is_ok()),
                "{c:?}"
            );
            (rollover.is_ok(), saw_room)
        },
    );
}

#[test]
fn sub_window_reader_overtaken_by_two_rollovers_reloads() {
    // Summary: what the reader saw remaining.
    check_reaches(&[0, 1], || {
        // 4 per window in one sub-window (k = 1: a ring of 2 slots). 4 in window 0, then 1 at
        // 1250 (4 × 3/4 + 1 <= 4): the hot word is at 1 and slot 0 holds count(0) = 4.
        let c = sub(4, 1);
        c.try_acquire_n_at(4, at(0)).expect("admits");
        c.try_acquire_at(at(1250)).expect("admits");

        let reader = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.remaining_at(at(1250)))
        };
        // Two rollovers: the second publishes count(2) into slot 0, which the reader may still
        // be about to read as count(0).
        let first = c.try_acquire_n_at(2, at(2000));
        let second = c.try_acquire_n_at(2, at(3000));
        let seen = reader.join().expect("reader panicked");

        assert!(first.is_ok() && second.is_ok(), "{first:?} {second:?}");
        // Before the rollovers: 4 × 3/4 + 1 = 4 → 0. After the first (judged at the start of
        // window 2): 1 + 2 → 1. After the second: 2 + 2 → 0.
        assert!(seen <= 1, "the reader saw {seen}");
        assert_eq!(c.remaining_at(at(3000)), 0);
        assert_eq!(c.remaining_at(at(4000)), 2);
        seen
    });
}

#[test]
fn sub_window_reader_after_a_rollover_sees_the_published_count() {
    // Summary: what the reader saw remaining.
    check_reaches(&[1, 2], || {
        // 4 per window in one sub-window: 2 admitted in window 0.
        let c = sub(4, 1);
        c.try_acquire_n_at(2, at(0)).expect("admits");

        let reader = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.remaining_at(at(1250)))
        };
        // The rollover publishes count(0) = 2, then advances the hot word to window 1.
        c.try_acquire_at(at(1250)).expect("2 × 3/4 + 1 <= 4");
        let seen = reader.join().expect("reader panicked");

        // Before the rollover: 2 × 3/4 → 2 left. After it: 2 × 3/4 + 1 → 1 left, with count(0)
        // read from the history. A reader that found the hot word advanced but not the history
        // (count(0) read as 0) would see 3.
        assert!(seen == 1 || seen == 2, "the reader saw {seen}");
        assert_eq!(c.remaining_at(at(1250)), 1);
        seen
    });
}

#[test]
fn sub_window_two_rollovers_racing_both_count_once() {
    // Summary: what each racer was told remained (main, spawned).
    check_reaches(&[(0, 1), (1, 0)], || {
        // 4 per window in 2 sub-windows of 500 ns; 2 admitted in sub-window 0.
        let c = sub(4, 2);
        c.try_acquire_n_at(2, at(0)).expect("admits");

        // Both readings are in sub-window 1: both try to publish count(0) and advance; one
        // advances, the other's raise is a no-op and it retries within sub-window 1.
        let other = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.try_acquire_at(at(700)))
        };
        let mine = c.try_acquire_at(at(600));
        let theirs = other.join().expect("racer panicked");

        let (Ok(mine), Ok(theirs)) = (&mine, &theirs) else {
            panic!("2 + 1 + 1 <= 4 admits both: {mine:?}, {theirs:?}");
        };
        // Sub-window 2, start: count(0) at full weight (from the history) + count(1) = 4.
        assert_eq!(c.remaining_at(at(1000)), 0, "{c:?}");
        // Half way: 2 × 1/2 + 2 = 3.
        assert_eq!(c.remaining_at(at(1250)), 1, "{c:?}");
        assert!(
            format!("{c:?}").contains("sub_window: 1, settled: 2, current: 2"),
            "{c:?}"
        );
        (mine.remaining(), theirs.remaining())
    });
}
