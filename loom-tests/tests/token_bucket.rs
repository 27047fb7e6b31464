//! Loom models of [`tollgate::TokenBucket`]'s single-word compare-and-swap protocol, and of
//! [`tollgate::ManualClock`].
//!
//! Each model races two or three threads through a few operations on one bucket and asserts an
//! invariant that must hold in every interleaving loom explores: no token is handed out twice, a
//! refund neither loses nor invents tokens, an `n`-token request is all or nothing, a peek never
//! writes, and readings that arrive out of order (or a clock that steps backwards) never create
//! capacity. Assertions are about counts only, never timings.
//!
//! Most models also return a small summary of how the race went (who won, what a peek saw), and
//! `check_reaches` asserts that loom produced every summary the race allows. That guards against a
//! vacuous model: loom's partial-order reduction can skip interleavings (see the note on
//! `check_reaches`, in `common/mod.rs`), and a model whose interesting case is never run proves
//! nothing.
//!
//! Readings are explicit `Nanos` passed to the `_at` methods, so "no time passes" is exact and a
//! refill is exactly one token. The bucket (and its `ManualClock`, whose word is also a loom atomic
//! under `cfg(tollgate_loom)`) is created inside each `loom::model` closure.
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release`.

// Without `--cfg tollgate_loom` this file compiles to an empty test binary (the doc above stays, for
// `missing_docs`).
#![cfg(tollgate_loom)]

mod common;

use std::time::Duration;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::{AcquireError, Admitted, Clock, ManualClock, Nanos, Quota, TokenBucket};

/// The reading every model that needs "no time passes" uses.
const T0: Nanos = Nanos::ZERO;

/// With [`two_per_second`], the time one token takes to refill.
const INTERVAL_NS: u64 = 500_000_000;

/// Two tokens per second, so a capacity of 2 and one token refilled every [`INTERVAL_NS`].
fn two_per_second() -> Quota {
    Quota::per_second(2).expect("2 per second is a valid quota")
}

/// A bucket for `quota` on a manual clock reading `start`, built inside the running model and
/// shareable between loom threads.
fn bucket_at(quota: Quota, start: Nanos) -> Arc<TokenBucket<ManualClock>> {
    Arc::new(TokenBucket::with_clock(
        quota,
        ManualClock::starting_at(start),
    ))
}

/// A bucket for `quota` built at [`T0`].
fn bucket(quota: Quota) -> Arc<TokenBucket<ManualClock>> {
    bucket_at(quota, T0)
}

/// Whole tokens left after an admission; `None` for a refusal.
fn remaining_after<E>(outcome: &Result<Admitted, E>) -> Option<u64> {
    outcome.as_ref().ok().map(Admitted::remaining)
}

#[test]
fn two_threads_racing_for_the_last_token_exactly_one_wins() {
    check_reaches(&["main thread won", "spawned thread won"], || {
        let bucket = bucket(two_per_second().with_initial(1).expect("1 <= capacity 2"));

        let other = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.try_acquire_at(T0))
        };
        let mine = bucket.try_acquire_at(T0);
        let theirs = other.join().expect("racer panicked");

        let winners = usize::from(mine.is_ok()) + usize::from(theirs.is_ok());
        assert_eq!(
            winners, 1,
            "one token, two takers: mine {mine:?}, theirs {theirs:?}"
        );
        for outcome in [&mine, &theirs] {
            match outcome {
                Ok(admitted) => {
                    assert_eq!(admitted.remaining(), 0, "the winner took the last token");
                }
                Err(denied) => assert_eq!(denied.remaining(), 0, "the loser saw an empty bucket"),
            }
        }
        assert_eq!(bucket.remaining_at(T0), 0);
        if mine.is_ok() {
            "main thread won"
        } else {
            "spawned thread won"
        }
    });
}

#[test]
fn three_threads_racing_for_two_tokens_exactly_two_win_with_distinct_tokens() {
    // Summary: which of the three threads lost (0 is the main thread).
    check_reaches(&[0, 1, 2], || {
        let bucket = bucket(two_per_second());

        let others: Vec<_> = (0..2)
            .map(|_| {
                let bucket = Arc::clone(&bucket);
                thread::spawn(move || bucket.try_acquire_at(T0))
            })
            .collect();
        let mut outcomes = vec![bucket.try_acquire_at(T0)];
        outcomes.extend(
            others
                .into_iter()
                .map(|h| h.join().expect("racer panicked")),
        );

        // Each winner reports what it left behind; two winners sharing a token would both report 1.
        let mut left: Vec<u64> = outcomes.iter().filter_map(remaining_after).collect();
        left.sort_unstable();
        assert_eq!(left, [0, 1], "two tokens, three takers: {outcomes:?}");
        assert_eq!(bucket.remaining_at(T0), 0);
        outcomes
            .iter()
            .position(Result::is_err)
            .expect("one thread lost")
    });
}

#[test]
fn acquire_racing_refund_conserves_tokens() {
    const CAPACITY: u64 = 2;
    // Summary: (taken by the greedy thread, refunded by it, taken by the single thread). The single
    // request lands before the greedy one, between its acquisition and refund, or after the refund.
    check_reaches(&[(0, 0, 1), (2, 1, 0), (2, 1, 1)], || {
        let bucket = bucket(two_per_second());

        // Takes the whole bucket, then gives one back.
        let greedy = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                let (admitted, refunded) = match bucket.try_acquire_n_at(2, T0) {
                    Ok(_) => {
                        bucket.refund_at(1, T0);
                        (2, 1)
                    }
                    Err(AcquireError::Denied(_)) => (0, 0),
                    Err(e) => panic!("2 tokens fit a capacity of 2, got {e}"),
                };
                assert!(bucket.remaining_at(T0) <= CAPACITY);
                (admitted, refunded)
            })
        };
        let single = u64::from(bucket.try_acquire_at(T0).is_ok());
        assert!(bucket.remaining_at(T0) <= CAPACITY);
        let (admitted, refunded) = greedy.join().expect("greedy thread panicked");

        let remaining = bucket.remaining_at(T0);
        assert!(
            remaining <= CAPACITY,
            "{remaining} tokens in a bucket of {CAPACITY}"
        );
        assert_eq!(
            admitted + single - refunded + remaining,
            CAPACITY,
            "admitted {admitted} + {single}, refunded {refunded}, remaining {remaining}"
        );
        (admitted, refunded, single)
    });
}

#[test]
fn concurrent_refunds_never_fill_above_capacity() {
    loom::model(|| {
        // One token in a bucket of two; both threads (wrongly) give back two tokens each.
        let bucket = bucket(two_per_second().with_initial(1).expect("1 <= capacity 2"));

        let other = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                bucket.refund_at(2, T0);
                bucket.remaining_at(T0)
            })
        };
        bucket.refund_at(2, T0);
        let left_by_mine = bucket.remaining_at(T0);
        let left_by_theirs = other.join().expect("refunding thread panicked");

        assert_eq!(left_by_mine, 2, "a refund fills up to the capacity");
        assert_eq!(left_by_theirs, 2, "a refund fills up to the capacity");
        assert_eq!(bucket.remaining_at(T0), 2);
    });
}

#[test]
fn n_token_request_is_all_or_nothing_under_race() {
    check_reaches(&["pair won", "single won"], || {
        let bucket = bucket(two_per_second());

        let pair = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.try_acquire_n_at(2, T0))
        };
        let single = bucket.try_acquire_at(T0);
        let pair = pair.join().expect("pair thread panicked");

        match (&pair, &single) {
            (Ok(_), Err(denied)) => {
                assert_eq!(denied.remaining(), 0);
                assert_eq!(bucket.remaining_at(T0), 0);
                "pair won"
            }
            (Err(AcquireError::Denied(denied)), Ok(_)) => {
                // Denied with one token in sight, and that token was not taken by the denial.
                assert_eq!(denied.remaining(), 1);
                assert_eq!(bucket.remaining_at(T0), 1);
                "single won"
            }
            _ => panic!(
                "exactly one of 2 + 1 tokens fits a bucket of 2: pair {pair:?}, single {single:?}"
            ),
        }
    });
}

#[test]
fn peek_never_writes_and_agrees_with_a_quiet_acquire() {
    // Summary: (did the peek of two succeed, tokens the peek of one would leave). The acquisition
    // lands before both peeks, between them, or after both.
    check_reaches(&[(false, 0), (true, 0), (true, 1)], || {
        let bucket = bucket(two_per_second());

        let peeker = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                let both = bucket.peek_n_at(2, T0);
                let one = bucket.peek_n_at(1, T0);
                // A peek of one always fits: two tokens, and at most one taken by the other thread.
                let one_left = remaining_after(&one).expect("one token is always there to peek");
                assert!(one_left <= 1);
                if both.is_err() {
                    // This thread already saw the acquisition; a later read cannot unsee it.
                    assert_eq!(
                        one_left, 0,
                        "peeks went back in time: {both:?} then {one:?}"
                    );
                } else {
                    assert_eq!(remaining_after(&both), Some(0));
                }
                (both.is_ok(), one_left)
            })
        };
        let taken = bucket
            .try_acquire_at(T0)
            .expect("peeks take nothing, so a token is there");
        assert_eq!(taken.remaining(), 1);
        let summary = peeker.join().expect("peeking thread panicked");

        // Whatever the peeks saw, they left the count as the acquisition made it.
        assert_eq!(bucket.remaining_at(T0), 1);
        // Once quiet, a peek predicts the acquisition exactly, and then the next one.
        let prediction = bucket.peek_n_at(1, T0).expect("one token is left");
        let acquired = bucket.try_acquire_n_at(1, T0).expect("the peek said so");
        assert_eq!(prediction, acquired);
        assert!(bucket.peek_n_at(1, T0).is_err());
        assert!(bucket.try_acquire_at(T0).is_err());
        summary
    });
}

/// Races two requests at `early` against two at `later` on a full bucket of capacity 2 built at
/// `start`, where `later - start` refills exactly one token, and checks that the two readings
/// together never admit more than the capacity plus that one token, and that the early reading
/// never gets more than the bucket held at that reading.
///
/// Summaries are `(admitted at early, admitted at later)`; `expected` lists every one the race allows.
fn race_early_and_late_readings(start: Nanos, early: Nanos, expected: &[(u64, u64)]) {
    const CAPACITY: u64 = 2;
    const REFILLED: u64 = 1;
    let later = Nanos::new(start.as_u64() + REFILLED * INTERVAL_NS);
    assert!(early < later);
    // A reading `k` intervals before construction sees the bucket `k` tokens short of full.
    let early_at_most = CAPACITY
        - start
            .as_u64()
            .saturating_sub(early.as_u64())
            .div_ceil(INTERVAL_NS);

    check_reaches(expected, move || {
        let bucket = bucket_at(two_per_second(), start);

        let early_thread = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                let first = bucket.try_acquire_at(early);
                let second = bucket.try_acquire_at(early);
                u64::from(first.is_ok()) + u64::from(second.is_ok())
            })
        };
        let first_late = bucket.try_acquire_at(later);
        let second_late = bucket.try_acquire_at(later);
        let early_admitted = early_thread.join().expect("early thread panicked");
        assert!(
            early_admitted <= early_at_most,
            "the early reading took {early_admitted}, more than the {early_at_most} there at {early:?}"
        );

        // Whatever the early reading took, the later one still has at least the token that refilled.
        assert!(
            first_late.is_ok(),
            "the later reading lost its refill: {first_late:?}"
        );
        let late_admitted = 1 + u64::from(second_late.is_ok());
        let admitted = early_admitted + late_admitted;
        let remaining = bucket.remaining_at(later);
        assert!(
            admitted + remaining <= CAPACITY + REFILLED,
            "admitted {early_admitted} early + {late_admitted} late, {remaining} left at the later reading"
        );
        (early_admitted, late_admitted)
    });
}

#[test]
fn earlier_reading_racing_later_reading_creates_no_tokens() {
    // Built at t = 0, racing t = 0 against t = one interval. The early thread gets both tokens if
    // it goes first, one if the later reading lands between its requests, none if after both.
    race_early_and_late_readings(T0, T0, &[(0, 2), (1, 2), (2, 1)]);
}

#[test]
fn reading_from_before_construction_racing_later_reading_creates_no_tokens() {
    // The clock stepped back: built at one interval, racing t = 0 (one token short of full as of
    // then) against t = two intervals. Three admissions at most, only one of them early.
    race_early_and_late_readings(Nanos::new(INTERVAL_NS), T0, &[(0, 2), (1, 2)]);
}

#[test]
fn clock_set_backwards_mid_race_creates_no_tokens() {
    // Summary: admissions, which depend on how many requests read the clock before the rewind.
    check_reaches(&[0, 1, 2], || {
        // Full at t = 1 s; the clock is then stepped back to 0 while another thread acquires.
        let start = Nanos::new(1_000_000_000);
        let bucket = bucket_at(two_per_second(), start);

        let rewinder = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || bucket.clock().set(T0))
        };
        let admitted: u64 = (0..3)
            .map(|_| u64::from(bucket.try_acquire().is_ok()))
            .sum();
        rewinder.join().expect("rewinding thread panicked");

        assert!(
            admitted <= 2,
            "no time moved forward, yet {admitted} of 2 tokens were admitted"
        );
        assert_eq!(
            bucket.remaining_at(start),
            2 - admitted,
            "tokens lost or created"
        );
        assert_eq!(bucket.clock().now(), T0);
        admitted
    });
}

#[test]
fn manual_clock_advance_racing_advance_loses_no_step() {
    // Summary: the reader's first reading. Steps of 1 and 2 ns make every partial sum distinct, so
    // reaching both 1 and 2 shows that both orders of the advances ran, and a lost step shows as a
    // wrong total. The reader is a spawned thread, not the main one: see `check_reaches`.
    check_reaches(&[0, 1, 2, 3], || {
        let clock = ManualClock::new();

        let advancer = {
            let clock = clock.clone();
            thread::spawn(move || clock.advance(Duration::from_nanos(2)))
        };
        let reader = {
            let clock = clock.clone();
            thread::spawn(move || (clock.now().as_u64(), clock.now().as_u64()))
        };
        clock.advance(Duration::from_nanos(1));
        advancer.join().expect("advancing thread panicked");
        let (first, second) = reader.join().expect("reading thread panicked");

        assert!(
            second <= 3,
            "a reading of {second} ns beyond the 3 ns advanced"
        );
        assert!(
            first <= second,
            "a reading went backwards: {first} then {second}"
        );
        assert_eq!(clock.now(), Nanos::new(3));
        first
    });
}

/// A reservation into debt and its cancel racing an acquisition and a second reservation, at a
/// frozen clock (two tokens, one refilled every 500 ms). In every interleaving: every promise
/// keeps `C + R × t` (tokens ready by any instant `T` number at most `2 + (T - T0) / I` plus what
/// the cancel gave back), the cancel gives back its two less the tokens taken after it (so never
/// the one a reservation queued behind its debt depends on), and the word accounts for every
/// token: the debt left is what was taken less what came back.
///
/// The summaries are `(tokens the cancel gave back, whether the acquisition was admitted)`. All
/// four arise: `(2, false)` is the acquisition refused between the reservation and its cancel,
/// the second reservation after the cancel. Until the bucket's state moved behind the quota
/// pointer (`set_quota`) loom did not run that one: the refusal was a plain load made before the
/// cancel's load-then-write, the pattern its partial-order reduction skips (see `check_reaches`);
/// the epoch's stores around each decision now order them.
#[test]
fn reservation_and_cancel_racing_an_acquisition_and_a_reservation_keep_the_limit() {
    const WAIT: Duration = Duration::from_secs(2);
    check_reaches(&[(1, false), (1, true), (2, false), (2, true)], || {
        let bucket = bucket(two_per_second());

        let other = {
            let bucket = Arc::clone(&bucket);
            thread::spawn(move || {
                let r = bucket
                    .reserve_n_at(2, WAIT, T0)
                    .expect("two tokens are there within 1 s in every order");
                let ready = r.ready_at().as_u64();
                (ready, r.cancel_at(T0))
            })
        };
        let acquired = bucket.try_acquire_at(T0).is_ok();
        let mine = bucket
            .reserve_n_at(1, WAIT, T0)
            .expect("one token is there within 1 s in every order");
        let my_ready = mine.ready_at().as_u64();
        let (their_ready, back) = other.join().expect("reserver panicked");

        let mut handed = vec![(their_ready, 2u64), (my_ready, 1)];
        if acquired {
            handed.push((T0.as_u64(), 1));
        }
        handed.sort_unstable();
        let mut total = 0;
        for &(ready, n) in &handed {
            total += n;
            let bound = 2 + (ready - T0.as_u64()) / INTERVAL_NS + back;
            assert!(total <= bound, "{total} ready by {ready}: above {bound}");
        }
        assert!(back <= 2);
        // The debt left on the word: every token taken, less those given back.
        let debt = 3 + u64::from(acquired) - back;
        let now = bucket.try_acquire_n_at(0, T0).expect("a query");
        assert_eq!(now.reset_after(), Duration::from_nanos(debt * INTERVAL_NS));
        assert_eq!(now.remaining(), 2u64.saturating_sub(debt));
        (back, acquired)
    });
}
