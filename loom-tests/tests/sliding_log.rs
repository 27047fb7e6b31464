//! Loom models of [`tollgate::window::SlidingWindowLog`]'s claim protocol: two threads racing for the
//! last slot of a window, a claim racing a reader of the same slot, a claimer stalled between its
//! slot compare-and-swap and its head move while another thread helps the head on and claims the
//! next position, a reader stalled while the slots it reads are reused a lap later, and three
//! threads racing for two slots; and of its requests for several, all or none: a pair racing a
//! single for a log of two, two pairs racing for a log of three (the loser writes nothing), a pair
//! and a single that both fit (the single finishes the pair's group if it finds it half-filled),
//! and readers of a pair being filled (each sees all of the pair or none of it, never its first
//! position without the rest, nor its fills mixed with the entries they replace).
//!
//! Each model was checked against a broken protocol, and fails on it: judging the slot being
//! claimed by a second load instead of the word the claim compares against (the reader model),
//! all orderings `Relaxed` (the reader model), no helping (every model livelocks), and no second
//! head load (the stalled-reader model). The group models were checked the same way: requests for
//! several claimed one position at a time, the protocol before groups (all five group models
//! fail), denials and peeks not checking the slot of the head again (the mixing-reader
//! model), and a claimer that waits for a group's requester instead of finishing the group (the
//! three pair-racing models livelock).
//!
//! The log is a head (a hint of the next position) and a ring of N timestamp words; a claim is one
//! compare-and-swap on one slot, validated by loading the head before and after reading the slots;
//! a request for several takes the group word, commits its group with one compare-and-swap on its
//! first slot (a mark), and fills the rest, which any thread that finds the mark can do for it.
//! The models assert what must hold in every interleaving loom explores: exactly one of two racers
//! for the last slot is admitted, a reader sees a slot's old entry or its new one and answers
//! exactly as the log before or after the claim would (never a mix of the two), and a stalled
//! claimer never blocks the others. Readings are explicit `Nanos`, so times are exact.
//!
//! Each model returns a summary of how its race went, and `check_reaches` (in `common/`) asserts
//! that loom reached every summary the race allows. Where one thread's plain reads must be able to
//! see another's write, the reader is the spawned thread and the writer the main one (see the note
//! on `check_reaches`).
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --test sliding_log`.

// Without `--cfg tollgate_loom` this file compiles to an empty test binary (the doc above stays, for
// `missing_docs`).
#![cfg(tollgate_loom)]

mod common;

use std::time::Duration;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::window::SlidingWindowLog;
use tollgate::{AcquireError, ManualClock, Nanos, Quota};

/// The window length every model uses, in nanoseconds.
const W: u64 = 10;

/// A log of `count` admissions per window of [`W`] ns, on a manual clock, built inside the running
/// model and shareable between loom threads.
fn log(count: u64) -> Arc<SlidingWindowLog<ManualClock>> {
    let quota = Quota::per_period(count, Duration::from_nanos(W)).expect("a valid window quota");
    Arc::new(SlidingWindowLog::with_clock(quota, ManualClock::new()).expect("a short log"))
}

fn at(ns: u64) -> Nanos {
    Nanos::new(ns)
}

/// The head position, read through the log's `Debug` output.
fn head(log: &SlidingWindowLog<ManualClock>) -> u64 {
    let text = format!("{log:?}");
    let rest = text.split("head: ").nth(1).expect("Debug shows the head");
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|digits| digits.parse().ok())
        .expect("the head is a number")
}

#[test]
fn two_threads_racing_for_the_last_slot_exactly_one_wins() {
    check_reaches(&["main thread won", "spawned thread won"], || {
        // Two per window; one admission at 0 leaves one. The racers read 1 and 2.
        let log = log(2);
        log.try_acquire_at(at(0)).expect("an empty log admits");

        let other = {
            let log = Arc::clone(&log);
            thread::spawn(move || log.try_acquire_at(at(2)))
        };
        let mine = log.try_acquire_at(at(1));
        let theirs = other.join().expect("racer panicked");

        assert_eq!(
            usize::from(mine.is_ok()) + usize::from(theirs.is_ok()),
            1,
            "one slot, two takers: mine {mine:?}, theirs {theirs:?}"
        );
        let (winner_at, loser) = match (&mine, &theirs) {
            (Ok(ok), Err(denied)) => {
                assert_eq!(ok.remaining(), 0);
                (1, denied)
            }
            (Err(denied), Ok(ok)) => {
                assert_eq!(ok.remaining(), 0);
                (2, denied)
            }
            _ => unreachable!("checked above"),
        };
        // The loser waits for the admission at 0 to leave, exactly.
        assert_eq!(loser.retry_at(), at(W));
        assert_eq!(loser.remaining(), 0);
        // The log holds the winner: at W the entry at 0 has left and the winner's has not; it
        // leaves at its own reading plus W.
        assert_eq!(log.remaining_at(at(W)), 1);
        assert_eq!(log.remaining_at(at(winner_at + W - 1)), 1);
        assert_eq!(log.remaining_at(at(winner_at + W)), 2);
        assert_eq!(head(&log), 2);
        if mine.is_ok() {
            "main thread won"
        } else {
            "spawned thread won"
        }
    });
}

#[test]
fn a_reader_of_a_slot_being_claimed_sees_the_old_entry_or_the_new_never_a_mix() {
    // The log holds positions 0 (at 0) and 1 (at 5) of two; the main thread claims position 2 at
    // reading 10, reusing slot 0 (position 0 left at exactly 10). The reader asks about one more
    // at 10, and what is left.
    //
    // Before the claim: the entry at 0 has left, so one is admitted, leaving 0, reset after 10.
    // After it: the entries at 5 and 10 fill the window; denied until 5 leaves (retry at 15).
    // A reader that took the new word of slot 0 for the entry it replaced (the head lags the claim
    // until the claimer moves it) would answer "retry at 20".
    check_reaches(&[("old", 1), ("new", 0), ("old", 0)], || {
        let log = log(2);
        log.try_acquire_at(at(0)).expect("an empty log admits");
        log.try_acquire_at(at(5)).expect("one slot left");

        let reader = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let peek = log.peek_n_at(1, at(10));
                let left = log.remaining_at(at(10));
                (peek, left)
            })
        };
        let claim = log
            .try_acquire_at(at(10))
            .expect("position 0 has left at 10");
        assert_eq!(claim.remaining(), 0);
        let (peek, left) = reader.join().expect("reader panicked");

        let saw = match peek {
            Ok(admitted) => {
                assert_eq!(
                    admitted.remaining(),
                    0,
                    "one of two in the window, one more asked"
                );
                assert_eq!(admitted.reset_after(), Duration::from_nanos(W));
                "old"
            }
            Err(AcquireError::Denied(denied)) => {
                assert_eq!(denied.retry_at(), at(15), "5 leaves at 15: {denied:?}");
                assert_eq!(denied.remaining(), 0);
                assert_eq!(denied.reset_after(), Duration::from_nanos(W));
                "new"
            }
            Err(e) => panic!("1 fits a log of 2: {e}"),
        };
        // Reads are in order: once the peek saw the claim, a later read sees it too.
        assert!(left <= 1);
        if saw == "new" {
            assert_eq!(left, 0, "the remaining read after the peek saw the claim");
        }
        assert_eq!(log.remaining_at(at(10)), 0);
        assert_eq!(head(&log), 3);
        (saw, left)
    });
}

#[test]
fn a_claimer_stalled_before_moving_the_head_is_helped_and_the_next_position_claimed() {
    // Two per window, empty. The main thread admits at reading 1; the spawned one looks at what is
    // left, then admits at reading 2. If the main thread stalls after claiming position 0 and before
    // moving the head, the spawned one must move the head for it (or spin for ever) and take
    // position 1. Summary: (the spawned thread's position, what it saw left before admitting).
    check_reaches(&[(0, 2), (1, 2), (1, 1)], || {
        let log = log(2);

        let helper = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let seen = log.remaining_at(at(2));
                let ok = log.try_acquire_at(at(2)).expect("two slots, two takers");
                // Admitted first, it leaves one; second, none.
                let position = 1 - ok.remaining();
                assert!(head(&log) > position, "the head is past its own claim");
                (position, seen, ok)
            })
        };
        let mine = log.try_acquire_at(at(1)).expect("two slots, two takers");
        let (position, seen, theirs) = helper.join().expect("helper panicked");

        assert_eq!(head(&log), 2);
        assert_eq!(
            mine.remaining(),
            position,
            "exactly one of the two went first"
        );
        // Second after the reading of 2, the main thread's entry records 2, not its reading 1:
        // times never decrease along the log.
        let mine_at = if position == 0 { 2 } else { 1 };
        assert_eq!(mine.reset_after(), Duration::from_nanos(mine_at + W - 1));
        assert_eq!(theirs.reset_after(), Duration::from_nanos(W));
        assert_eq!(log.remaining_at(at(2)), 0);
        // At W + 1 the entry at 1 (if the main thread went first) has left; entries at 2 have not.
        assert_eq!(log.remaining_at(at(W + 1)), position);
        assert_eq!(log.remaining_at(at(W + 2)), 2);
        (position, seen)
    });
}

#[test]
fn a_pair_racing_a_single_on_a_log_of_two_is_admitted_whole_or_denied_having_written_nothing() {
    // Two per window, empty, everything at reading 0. A request for two commits its group with one
    // compare-and-swap on its first position, so a single request racing it either goes first
    // (and the pair, finding one position free, is denied) or finds the pair's group and is
    // denied. Never a split: the pair never keeps one position while being denied.
    check_reaches(&["pair won", "single first"], || {
        let log = log(2);

        let single = {
            let log = Arc::clone(&log);
            thread::spawn(move || log.try_acquire_at(at(0)))
        };
        let pair = log.try_acquire_n_at(2, at(0));
        let single = single.join().expect("single thread panicked");

        // Never more than two in the window; everything leaves at W.
        assert_eq!(log.remaining_at(at(W)), 2);
        match (&pair, &single) {
            (Ok(ok), Err(denied)) => {
                assert_eq!(ok.remaining(), 0);
                assert_eq!(denied.retry_at(), at(W));
                assert_eq!((head(&log), log.remaining_at(at(0))), (2, 0));
                "pair won"
            }
            (Err(AcquireError::Denied(denied)), Ok(ok)) => {
                assert_eq!(ok.remaining(), 1);
                // Denied having written nothing: the log holds the single alone.
                assert_eq!(denied.retry_at(), at(W));
                assert_eq!(denied.remaining(), 1);
                assert_eq!((head(&log), log.remaining_at(at(0))), (1, 1));
                "single first"
            }
            other => panic!("two slots, requests for 2 and 1: {other:?}"),
        }
    });
}

#[test]
fn two_pairs_racing_on_a_log_of_three_one_is_admitted_whole_the_other_writes_nothing() {
    // Three per window, empty; two requests for two, at readings 1 (spawned) and 2 (main). Only
    // one fits. The loser, denied, leaves the log exactly as the winner alone left it: head 2, the
    // winner's two entries at its effective time, one admission left until they leave.
    check_reaches(&["main thread won", "spawned thread won"], || {
        let log = log(3);

        let other = {
            let log = Arc::clone(&log);
            thread::spawn(move || log.try_acquire_n_at(2, at(1)))
        };
        let mine = log.try_acquire_n_at(2, at(2));
        let theirs = other.join().expect("racer panicked");

        let (winner_at, loser) = match (&mine, &theirs) {
            (Ok(ok), Err(AcquireError::Denied(denied))) => {
                assert_eq!(ok.remaining(), 1);
                (2, denied)
            }
            (Err(AcquireError::Denied(denied)), Ok(ok)) => {
                assert_eq!(ok.remaining(), 1);
                (1, denied)
            }
            other => panic!("three slots, two requests for 2: {other:?}"),
        };
        // Denied until the winner's entries leave (the loser's own reading, if earlier, is judged
        // at the winner's time).
        assert_eq!(loser.retry_at(), at(winner_at + W));
        assert_eq!(loser.remaining(), 1);
        // Never more than three in the window, and exactly the winner's two in the log.
        assert_eq!(head(&log), 2);
        assert_eq!(log.remaining_at(at(winner_at)), 1);
        assert_eq!(log.remaining_at(at(winner_at + W - 1)), 1);
        assert_eq!(log.remaining_at(at(winner_at + W)), 3);
        if mine.is_ok() {
            "main thread won"
        } else {
            "spawned thread won"
        }
    });
}

#[test]
fn a_pair_and_a_single_that_both_fit_are_both_admitted_whichever_goes_first() {
    // Three per window, empty, everything at reading 0: a pair and a single both fit. A single
    // that finds the pair's group committed and not yet filled finishes it (or it would wait on
    // the pair), then claims the position after it. Summary: what the single saw left.
    check_reaches(&[0, 2], || {
        let log = log(3);

        let single = {
            let log = Arc::clone(&log);
            thread::spawn(move || log.try_acquire_at(at(0)).expect("three slots, 1 + 2 asked"))
        };
        let pair = log
            .try_acquire_n_at(2, at(0))
            .expect("three slots, 1 + 2 asked");
        let single = single.join().expect("single thread panicked");

        // The second to go reports none left; the first what the second had not taken yet.
        match single.remaining() {
            2 => assert_eq!(pair.remaining(), 0),
            0 => assert_eq!(pair.remaining(), 1),
            other => panic!("the single cannot leave {other}"),
        }
        assert_eq!(head(&log), 3);
        assert_eq!(log.remaining_at(at(W - 1)), 0);
        assert_eq!(log.remaining_at(at(W)), 3);
        single.remaining()
    });
}

#[test]
fn a_reader_of_a_pair_being_filled_sees_none_of_it_or_all_of_it() {
    // Three per window, empty. The main thread admits two at reading 0; the reader asks about one
    // more, and what is left. Before the pair: 3 left, so one is admitted leaving 2; after it: 1
    // left, one admitted leaving 0. A reader that counted the pair's first position without its
    // second (its group committed, its fill not yet seen) would report 1: no state of the log.
    check_reaches(&[(0, 1), (2, 1), (2, 3)], || {
        let log = log(3);

        let reader = {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let peek = log.peek_n_at(1, at(0)).expect("one fits");
                let left = log.remaining_at(at(0));
                (peek.remaining(), left)
            })
        };
        let pair = log
            .try_acquire_n_at(2, at(0))
            .expect("an empty log admits two");
        assert_eq!(pair.remaining(), 1);
        let (peeked, left) = reader.join().expect("reader panicked");

        assert!(
            peeked == 2 || peeked == 0,
            "no state of the log leaves {peeked}"
        );
        assert!(
            left == 3 || left == 1,
            "no state of the log has {left} left"
        );
        // Reads are in order: once the peek saw the pair, a later read sees it too.
        if peeked == 0 {
            assert_eq!(left, 1);
        }
        assert_eq!(head(&log), 2);
        (peeked, left)
    });
}

#[test]
fn a_reader_of_slots_a_pair_is_filling_never_mixes_old_entries_with_the_pair() {
    // Two per window, holding positions 0 (at 0) and 1 (at 5). The main thread admits two at
    // reading 15 (both have left by then): positions 2 and 3, reusing slots 0 and 1. The reader
    // peeks at 15. Before the pair: one admitted leaving 1 (position 1 leaves at exactly 15).
    // After it (or judging the pair's committed group as finished): denied until 25. A reader
    // that read slot 0 before the commit and slot 1 after the fill of position 3 would take the
    // pair's 15 for position 1's 5 and report "admitted leaving 0": no state of the log.
    check_reaches(&["before", "after"], || {
        let log = log(2);
        log.try_acquire_at(at(0)).expect("an empty log admits");
        log.try_acquire_at(at(5)).expect("one slot left");

        let reader = {
            let log = Arc::clone(&log);
            thread::spawn(move || log.peek_n_at(1, at(15)))
        };
        let pair = log
            .try_acquire_n_at(2, at(15))
            .expect("both entries have left at 15");
        assert_eq!(pair.remaining(), 0);
        let peek = reader.join().expect("reader panicked");

        assert_eq!(head(&log), 4);
        match peek {
            Ok(ok) => {
                assert_eq!(ok.remaining(), 1, "no state of the log admits with {ok:?}");
                "before"
            }
            Err(AcquireError::Denied(d)) => {
                assert_eq!(d.retry_at(), at(15 + W), "{d:?}");
                assert_eq!(d.remaining(), 0);
                "after"
            }
            Err(e) => panic!("1 fits a log of 2: {e}"),
        }
    });
}

#[test]
fn a_reader_stalled_while_the_slots_it_reads_are_reused_answers_from_one_state() {
    // Two per window, holding 0 (at 0) and 1 (at 1). The main thread admits at 12 (position 2,
    // reusing slot 0) and at 13 (position 3, reusing slot 1); the reader peeks at 12. A reader that
    // read slot 0 before both claims and slot 1 after them would mix position 0 with position 3;
    // the second head load must send it back. Summary: how many of the two claims its answer shows.
    //
    // Before: 0 and 1 have left at 12, admitted leaving 1, reset 10. After the first claim: 1 has
    // left, 12 is in: admitted leaving 0, reset 10. After both: 12 and 13 are in, judged at 13;
    // denied until 12 leaves at 22, reset 13 + 10 - 12 = 11. The mix would say admitted leaving 0,
    // reset 11: no state of the log.
    check_reaches(&[0, 1, 2], || {
        let log = log(2);
        log.try_acquire_at(at(0)).expect("an empty log admits");
        log.try_acquire_at(at(1)).expect("one slot left");

        let reader = {
            let log = Arc::clone(&log);
            thread::spawn(move || log.peek_n_at(1, at(12)))
        };
        log.try_acquire_at(at(12)).expect("0 has left at 12");
        log.try_acquire_at(at(13)).expect("1 has left at 13");
        let peek = reader.join().expect("reader panicked");

        match peek {
            Ok(ok) => match (ok.remaining(), ok.reset_after()) {
                (1, reset) if reset == Duration::from_nanos(W) => 0,
                (0, reset) if reset == Duration::from_nanos(W) => 1,
                other => panic!("no state of the log admits with {other:?}"),
            },
            Err(AcquireError::Denied(d)) => {
                assert_eq!(d.retry_at(), at(22), "{d:?}");
                assert_eq!(
                    (d.remaining(), d.reset_after()),
                    (0, Duration::from_nanos(11))
                );
                2
            }
            Err(e) => panic!("1 fits a log of 2: {e}"),
        }
    });
}

#[test]
fn three_threads_racing_for_two_slots_exactly_two_win_with_distinct_positions() {
    // Summary: which of the three threads lost (0 is the main thread).
    check_reaches(&[0, 1, 2], || {
        let log = log(2);

        let others: Vec<_> = (0..2)
            .map(|_| {
                let log = Arc::clone(&log);
                thread::spawn(move || log.try_acquire_at(at(0)))
            })
            .collect();
        let mut outcomes = vec![log.try_acquire_at(at(0))];
        outcomes.extend(
            others
                .into_iter()
                .map(|h| h.join().expect("racer panicked")),
        );

        // Each winner reports what it left; two winners on one position would both report 1.
        let mut left: Vec<u64> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok().map(|a| a.remaining()))
            .collect();
        left.sort_unstable();
        assert_eq!(left, [0, 1], "two slots, three takers: {outcomes:?}");
        assert_eq!(head(&log), 2);
        assert_eq!(log.remaining_at(at(0)), 0);
        outcomes
            .iter()
            .position(Result::is_err)
            .expect("one thread lost")
    });
}
