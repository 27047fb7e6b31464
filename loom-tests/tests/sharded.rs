//! Loom models of [`tollgate::ShardedBucket`]'s stealing: a home-shard take racing a steal of the
//! same shard, two stealers racing for the last token across shards, a gather that fails and gives
//! back racing a take, a refund spreading over the shards racing a steal, a failed gather at an
//! early reading racing a gather at a later one, a hopeless request (denied from reads alone)
//! racing a take, a refund racing a gather at a frozen clock (where a give-back keeps at most
//! `n - 1` tokens), and a refund and a give-back racing the hint that every shard is empty (no
//! hint published before tokens come back may hide them from a later request: both models fail
//! if the refund or the give-back does not void the hint, or if the publisher does not read the
//! shards again after its claim).
//!
//! Each shard is one token-bucket word updated by compare-and-swap (modelled in `token_bucket.rs`);
//! what is new here is the protocol across words. A gather reads every shard, then takes from one
//! shard after another, and gives everything back if it cannot collect `n`; nothing makes those
//! steps atomic together. The models assert what must hold anyway, in every interleaving loom
//! explores: no token is handed out twice, a request for `n` is all or nothing, a failed gather
//! never invents a token, and loses none unless another caller wrote a shard it took from before
//! it could give back (then it keeps at most `n - 1`), and no reading ever shows more than the
//! capacity; and a request the shards cannot cover writes nothing.
//!
//! As in `token_bucket.rs`, each model returns a small summary of how its race went and
//! `check_reaches` (in `common/`) asserts that loom reached every summary the race allows, so a
//! model whose interesting interleaving is never run fails instead of passing vacuously. Where one
//! thread's plain reads must be able to see another's write, the reader is the spawned thread and
//! the writer the main one: the other way round, loom never schedules the write before the reads
//! (see the note on `check_reaches`).
//!
//! Under loom every thread's home slot is 0, so the models choose homes explicitly with the `_from`
//! methods, pass explicit `Nanos` readings (no time passes unless a model says so), and build a
//! limiter with an explicit shard count on a `ManualClock` inside each `loom::model` closure. Which
//! shard holds what is set up before the race by home takes, which touch only the home shard.
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
use tollgate::{AcquireError, Admitted, ManualClock, Nanos, Quota, ShardedBucket};

/// The reading every model uses for "no time passes".
const T0: Nanos = Nanos::ZERO;

/// A limiter for `per_second` tokens a second (and as many of capacity, initially `initial`), split
/// over `shards` shards, on a manual clock reading [`T0`], shareable between loom threads.
fn limiter(per_second: u64, initial: u64, shards: usize) -> Arc<ShardedBucket<ManualClock>> {
    let quota = Quota::per_second(per_second)
        .and_then(|q| q.with_initial(initial))
        .expect("a valid quota");
    let limiter = ShardedBucket::builder(quota)
        .shards(shards)
        .clock(ManualClock::new())
        .build()
        .expect("a power-of-two shard count");
    assert_eq!(limiter.shards(), shards, "every shard gets a token");
    Arc::new(limiter)
}

/// Four tokens a second over two shards: each shard holds up to two and refills one every 500 ms.
fn two_shards_of_two() -> Arc<ShardedBucket<ManualClock>> {
    limiter(4, 4, 2)
}

/// Tokens admitted by `outcome`: `n` or none. A request that exceeds the capacity is a bug in the
/// model.
fn admitted(outcome: &Result<Admitted, AcquireError>, n: u64) -> u64 {
    match outcome {
        Ok(_) => n,
        Err(AcquireError::Denied(_)) => 0,
        Err(e) => panic!("{n} tokens fit the capacity, got {e}"),
    }
}

/// Whole tokens left after an admission, as the call reported them; `None` for a denial.
fn reported(outcome: &Result<Admitted, AcquireError>) -> Option<u64> {
    outcome.as_ref().ok().map(Admitted::remaining)
}

/// Whether shard 0 of a [`two_shards_of_two`] limiter holds both its tokens at [`T0`], found by
/// taking them: a take of two from home 0 that the home shard admits reports that shard's
/// remaining (0), while one that has to gather reports the whole limiter's. Only for after a race;
/// it consumes what it finds.
fn shard_0_full(limiter: &ShardedBucket<ManualClock>) -> bool {
    let total = limiter.remaining_at(T0);
    assert!(
        (3..=4).contains(&total),
        "the probe needs 3 or 4 tokens, found {total}"
    );
    match limiter.try_acquire_n_from(0, 2, T0) {
        // A full home shard: its own remaining. A gather: what the whole limiter had, less two.
        Ok(taken) if taken.remaining() == 0 => true,
        Ok(taken) => {
            assert_eq!(taken.remaining(), total - 2, "a gather reports the total");
            false
        }
        Err(e) => panic!("{total} tokens cover two, got {e}"),
    }
}

#[test]
fn home_take_racing_a_steal_of_the_same_shard() {
    const HELD: u64 = 2;
    // Summary: (admitted by the home thread, by the stealer, what the stealer reported left). The
    // steal lands before both home takes, between them, or after both; a steal whose read of the
    // shards came before the first home take reports the token that take then got.
    check_reaches(&[(1, 1, Some(0)), (1, 1, Some(1)), (2, 0, None)], || {
        let limiter = two_shards_of_two();
        // Drain shard 1 (a home take touches no other shard): both tokens left are in shard 0.
        let drained = limiter
            .try_acquire_n_from(1, 2, T0)
            .expect("shard 1 holds two");
        assert_eq!(drained.remaining(), 0, "admitted by the home shard alone");
        assert_eq!(limiter.remaining_at(T0), HELD);

        // Home 1 is empty: its one token can only come from shard 0.
        let stealer = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_from(1, 1, T0))
        };
        // Two takes at home 0, racing the steal of the same shard.
        let first = limiter.try_acquire_n_from(0, 1, T0);
        let second = limiter.try_acquire_n_from(0, 1, T0);
        let stolen = stealer.join().expect("stealer panicked");

        let home = admitted(&first, 1) + admitted(&second, 1);
        let steal = admitted(&stolen, 1);
        assert_eq!(
            home + steal,
            HELD,
            "three requests for the two tokens of shard 0: {first:?}, {second:?}, stolen {stolen:?}"
        );
        // Admitted at home, each take reports what it left in shard 0; no token reported twice.
        match (reported(&first), reported(&second)) {
            (Some(1), Some(0) | None) | (Some(0), None) => {}
            other => panic!("home takes reported {other:?} left: {first:?}, {second:?}"),
        }
        if let Some(left) = reported(&stolen) {
            assert!(left < HELD, "the steal reported {left} left of {HELD}");
        }
        for outcome in [&first, &second, &stolen] {
            if let Err(AcquireError::Denied(denied)) = outcome {
                assert_eq!(denied.remaining(), 0, "denied with tokens in sight");
            }
        }
        assert_eq!(limiter.remaining_at(T0), 0, "tokens created or lost");
        // Each shard refills one token per 500 ms, whatever the race did to their words.
        assert_eq!(limiter.remaining_at(Nanos::new(500_000_000)), 2);
        (home, steal, reported(&stolen))
    });
}

#[test]
fn two_stealers_racing_for_the_last_token_across_shards() {
    check_reaches(&["home 1 won", "home 2 won"], || {
        // Four shards of one token each; the only token left is in shard 0.
        let limiter = limiter(4, 1, 4);
        assert_eq!(limiter.remaining_at(T0), 1);

        // Both homes are empty; each stealer scans from its own home: shards 1, 2, 3, 0 and
        // 2, 3, 0 (then 1).
        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_from(2, 1, T0))
        };
        let mine = limiter.try_acquire_n_from(1, 1, T0);
        let theirs = other.join().expect("stealer panicked");

        assert_eq!(
            admitted(&mine, 1) + admitted(&theirs, 1),
            1,
            "one token, two stealers: home 1 {mine:?}, home 2 {theirs:?}"
        );
        for outcome in [&mine, &theirs] {
            match outcome {
                Ok(taken) => assert_eq!(taken.remaining(), 0, "the winner took the last token"),
                Err(AcquireError::Denied(denied)) => {
                    assert_eq!(denied.remaining(), 0, "the loser saw an empty limiter");
                    // Every shard is empty since T0 and refills its one token in a second.
                    assert_eq!(denied.retry_after(), Duration::from_secs(1));
                }
                Err(e) => panic!("one token fits the capacity, got {e}"),
            }
        }
        assert_eq!(limiter.remaining_at(T0), 0, "tokens created or lost");
        assert_eq!(limiter.remaining_at(Nanos::new(1_000_000_000)), 4);
        if mine.is_ok() {
            "home 1 won"
        } else {
            "home 2 won"
        }
    });
}

#[test]
fn failed_gather_gives_back_racing_a_take() {
    const CAPACITY: u64 = 4;
    // Summary: (admitted by the gather of all four, by the single take, what the taker then read).
    // The take lands before the gather reads the shards (which then denies without writing), after
    // the gather (and loses), or in the middle: the gather has taken shard 0's two, finds only one
    // in shard 1, takes it and gives all three back. The taker's read (shard 0, then shard 1) can
    // fall anywhere in that: it sees 3 tokens, or 3 - 2 while the gather holds shard 0's two,
    // 3 - 1 while it holds shard 1's last, 0 while it holds both. Reaching 0, 1 and 2 shows the
    // partial gather and its give-back were run.
    let expected = [(0, 1, 0), (0, 1, 1), (0, 1, 2), (0, 1, 3), (4, 0, 0)];
    check_reaches(&expected, || {
        let limiter = two_shards_of_two();

        let taker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let taken = limiter.try_acquire_n_from(1, 1, T0);
                let seen = limiter.remaining_at(T0);
                assert!(seen <= CAPACITY, "{seen} tokens of {CAPACITY}");
                (taken, seen)
            })
        };
        // More than a shard holds: straight to the gather, from shard 0 then shard 1.
        let gathered = limiter.try_acquire_n_from(0, CAPACITY, T0);
        let (taken, seen) = taker.join().expect("taker panicked");

        let gather = admitted(&gathered, CAPACITY);
        let take = admitted(&taken, 1);
        let remaining = limiter.remaining_at(T0);
        assert!(remaining <= CAPACITY, "{remaining} tokens of {CAPACITY}");
        assert_eq!(
            gather + take + remaining,
            CAPACITY,
            "gather {gathered:?}, take {taken:?}, {remaining} left: tokens created or lost"
        );
        // Nothing adds tokens but give-backs, and they only restore what the race leaves.
        assert!(
            seen <= remaining,
            "the taker read {seen}, more than the {remaining} left"
        );
        match (&gathered, &taken) {
            (Ok(all), Err(AcquireError::Denied(denied))) => {
                assert_eq!(all.remaining(), 0);
                assert_eq!(denied.remaining(), 0);
            }
            (Err(AcquireError::Denied(denied)), Ok(one)) => {
                // Denied after the give-back, with the three tokens there in sight, and the one
                // taken from shard 1 back in 500 ms.
                assert_eq!(denied.remaining(), 3, "{denied:?}");
                assert_eq!(denied.retry_after(), Duration::from_millis(500));
                assert_eq!(one.remaining(), 1, "the take left one in its home shard");
                // Shard 0 got both its tokens back (so shard 1 holds the third): nothing was given
                // back to the wrong shard, where it would not fit.
                assert!(shard_0_full(&limiter), "the give-back missed shard 0");
            }
            _ => {
                panic!(
                    "exactly one of four and one fits in four: gather {gathered:?}, take {taken:?}"
                )
            }
        }
        (gather, take, seen)
    });
}

#[test]
fn refund_spreading_over_shards_racing_a_steal() {
    // Summary: (what the taker reported left, does shard 0 end with both its tokens). The take at
    // home 0 finds the refund there (and takes at home), or steals from shard 1: either before the
    // refund looks at shard 1 (which then takes one token back) or after (all of it goes to shard
    // 0). A steal reports the shards as it reads them after its take: 1, or 3 once the refund is in.
    check_reaches(&[(1, false), (1, true), (3, false), (3, true)], || {
        let limiter = two_shards_of_two();
        // Empty shard 0: shard 1 is full, shard 0 has room for two.
        limiter
            .try_acquire_n_from(0, 2, T0)
            .expect("shard 0 holds two");
        assert_eq!(limiter.remaining_at(T0), 2);

        let taker = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_from(0, 1, T0))
        };
        // Gives back two from home 1: shard 1 takes what fits, the rest goes on to shard 0.
        limiter.refund_from(1, 2, T0);
        let taken = taker.join().expect("taker panicked");

        let left = reported(&taken).expect("shard 1 always holds a token to steal");
        let remaining = limiter.remaining_at(T0);
        assert_eq!(
            remaining, 3,
            "2 held + 2 given back - 1 taken, {taken:?}: tokens created or lost"
        );
        (left, shard_0_full(&limiter))
    });
}

#[test]
fn failed_gather_at_an_early_reading_racing_a_gather_at_a_later_one_creates_no_tokens() {
    const CAPACITY: u64 = 4;
    /// One shard interval later: each shard has refilled one token since [`T0`].
    const LATER: Nanos = Nanos::new(500_000_000);
    /// From full at [`T0`], the most that can be admitted by [`LATER`] plus what is left then:
    /// `C + R × t` = 4 + 4 × 0.5.
    const BOUND: u64 = CAPACITY + 2;
    // Summary: (admitted at T0, admitted at LATER, left at LATER). Whichever gather runs first wins
    // (4 + 3 exceed the bound). When the late one takes shard 1 between the early one's take of
    // shard 0 and of shard 1, the early gather fails and gives shard 0's tokens back only if the
    // late gather has not written shard 0 since: then 1 is left at LATER; if it has, the early
    // gather keeps them (0 left), since giving them back as of T0 to a word moved on to LATER would
    // hand back refill that already happened.
    check_reaches(&[(0, 3, 0), (0, 3, 1), (4, 0, 2)], || {
        let limiter = two_shards_of_two();

        // Three from home 1, as of LATER: more than a shard holds, so a gather, from shard 1 on.
        let late = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_from(1, 3, LATER))
        };
        // All four from home 0, as of T0.
        let early = limiter.try_acquire_n_from(0, CAPACITY, T0);
        let late = late.join().expect("late gatherer panicked");

        let at_t0 = admitted(&early, CAPACITY);
        let at_later = admitted(&late, 3);
        let left = limiter.remaining_at(LATER);
        assert!(left <= CAPACITY, "{left} tokens of {CAPACITY}");
        assert!(
            at_t0 + at_later + left <= BOUND,
            "admitted {at_t0} at T0 and {at_later} later, {left} left: more than C + R × t = {BOUND}"
        );
        match (&early, &late) {
            (Ok(_), Err(AcquireError::Denied(denied))) => {
                // One token in each shard at LATER; both full, so 4 >= 3, one interval on.
                assert_eq!(denied.remaining(), 2, "{denied:?}");
                assert_eq!(denied.retry_after(), Duration::from_millis(500));
            }
            (Err(AcquireError::Denied(denied)), Ok(_)) => {
                // Shard 1 gave its two as of LATER, so it is empty until LATER + 1 s: all four
                // are there 1.5 s after T0, however shard 0 stood. As of T0 shard 1 is empty, and
                // shard 0 holds its two, or fewer if the late gather took from it first.
                assert!(denied.remaining() <= 2, "{denied:?}");
                assert_eq!(denied.retry_after(), Duration::from_millis(1_500));
            }
            _ => panic!("exactly one gather fits: early {early:?}, late {late:?}"),
        }
        (at_t0, at_later, left)
    });
}

#[test]
fn hopeless_request_writes_nothing_so_a_racing_take_always_wins() {
    // Summary: what the hopeless request saw left when denied: the token, or nothing once taken.
    check_reaches(&[0, 1], || {
        // One token in the limiter, in shard 0.
        let limiter = limiter(4, 1, 2);
        assert_eq!(limiter.remaining_at(T0), 1);

        // Two, from empty home 1: more than the whole limiter holds, so denied by reading the
        // shards alone. Had it gathered and given back, the take could find the token gone. (The
        // request that only reads runs on a spawned thread: see `check_reaches`.)
        let hopeless = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_from(1, 2, T0))
        };
        let taken = limiter.try_acquire_n_from(0, 1, T0);
        let hopeless = hopeless.join().expect("hopeless requester panicked");

        let denied = match &hopeless {
            Err(AcquireError::Denied(denied)) => denied,
            other => panic!("two of one token: {other:?}"),
        };
        let taken = taken.expect("the hopeless request took nothing, so the token is there");
        assert_eq!(taken.remaining(), 0, "the home shard gave its one token");
        assert_eq!(limiter.remaining_at(T0), 0, "tokens created or lost");
        denied.remaining()
    });
}

/// A regression model: a gather stalled between its take and its give-back while the shards
/// refill must not hand back refill that already happened. Before give-backs became an exact undo
/// of an untouched word, a gather of 4 at reading 0 that failed after the main thread drained the
/// refilled shards at 1 s gave its tokens back as of 0, and 6 tokens were admitted at the single
/// reading 1 s from a limiter of capacity 4.
#[test]
fn stalled_failing_gather_never_hands_back_refilled_tokens() {
    loom::model(|| {
        let limiter = two_shards_of_two();
        let early = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_from(0, 4, T0).is_ok())
        };
        // One second on, every shard is full again whatever the early gather took.
        let t1 = Nanos::new(1_000_000_000);
        let mut at_t1 = 0;
        for home in [1, 0] {
            if limiter.try_acquire_n_from(home, 2, t1).is_ok() {
                at_t1 += 2;
            }
        }
        let early_ok = early.join().expect("early gatherer panicked");
        let left = limiter.remaining_at(t1);
        if left > 0 && limiter.try_acquire_n_from(0, left, t1).is_ok() {
            at_t1 += left;
        }
        assert!(
            at_t1 <= 4,
            "{at_t1} admitted at the one reading 1 s from a limiter of capacity 4 (early: {early_ok})"
        );
    });
}

/// A refund racing a gather at a frozen clock: the case where a give-back keeps tokens, bounded.
/// Shard 1 has lent one token to the main thread, which takes another from it (home 1) and then
/// refunds both from home 0, while a spawned gather asks for 3 from home 0 (both of shard 0's, then
/// shard 1's). When the main thread's take empties shard 1 after the gather's survey, the gather
/// falls short and gives back; if the refund has meanwhile landed in shard 0, which the gather
/// emptied, the give-back finds shard 0 written since and keeps its two tokens: `n - 1`, the
/// documented bound, and never more. In every interleaving: no token is created (admitted plus
/// left never exceed the 4 the limiter holds once everything is refunded), an admitted gather
/// loses nothing, and a denied one keeps at most `n - 1 = 2`.
#[test]
fn refund_racing_a_gather_at_a_frozen_clock_keeps_at_most_n_minus_1() {
    const CAPACITY: u64 = 4;
    const N: u64 = 3;
    // Summary: (gather admitted, tokens kept). The gather wins (nothing kept), loses without
    // keeping anything (its give-back found its shards untouched, or it was denied from its
    // survey), or loses and keeps shard 0's two.
    check_reaches(&[(false, 0), (false, 2), (true, 0)], || {
        let limiter = two_shards_of_two();
        // Lend one token of shard 1 out: three left, two in shard 0 and one in shard 1.
        limiter
            .try_acquire_n_from(1, 1, T0)
            .expect("shard 1 holds two");
        let gather = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.try_acquire_n_from(0, N, T0))
        };
        // Take one more from home 1, then give back all this thread holds, from home 0.
        let taken = admitted(&limiter.try_acquire_n_from(1, 1, T0), 1);
        limiter.refund_from(0, 1 + taken, T0);
        let gathered = gather.join().expect("gatherer panicked");

        let by_gather = admitted(&gathered, N);
        let left = limiter.remaining_at(T0);
        assert!(
            by_gather + left <= CAPACITY,
            "gather {gathered:?}, {left} left: more than the {CAPACITY} tokens the limiter holds"
        );
        let kept = CAPACITY - by_gather - left;
        if gathered.is_ok() {
            assert_eq!(
                kept, 0,
                "an admitted gather gives nothing back, so keeps nothing"
            );
        } else {
            assert!(
                kept < N,
                "a denied gather of {N} kept {kept}: more than n - 1"
            );
        }
        (gathered.is_ok(), kept)
    });
}

/// One token a second over two shards of capacity 1, both empty: a request can only be admitted
/// with a token a refund or a give-back puts back.
fn two_empty_shards_of_one() -> Arc<ShardedBucket<ManualClock>> {
    limiter(2, 0, 2)
}

#[test]
fn refund_racing_the_empty_hint_never_hides_the_refunded_token() {
    // Summary: what the two requests from the empty home 1 got. The first finds both shards empty
    // (and publishes the hint that they are) unless the refund is already in; the second is
    // refused by that hint, or scans again, or steals the refunded token.
    check_reaches(&[(1, 0), (0, 1), (0, 0)], || {
        let limiter = two_empty_shards_of_one();
        let denier = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let first = limiter.try_acquire_n_from(1, 1, T0);
                let second = limiter.try_acquire_n_from(1, 1, T0);
                (first, second)
            })
        };
        // The one token of the race: given back to shard 0, which was empty.
        assert_eq!(limiter.refund_from(0, 1, T0), 1);
        let (first, second) = denier.join().expect("denier panicked");

        // A later request from the same empty home: the refunded token is there unless a racing
        // request took it, and no hint published before the refund may hide it.
        let later = limiter.try_acquire_n_from(1, 1, T0);
        let got = (admitted(&first, 1), admitted(&second, 1));
        assert_eq!(
            got.0 + got.1 + admitted(&later, 1),
            1,
            "the refunded token is taken exactly once: {first:?}, {second:?}, later {later:?}"
        );
        for outcome in [&first, &second, &later] {
            if let Err(AcquireError::Denied(denied)) = outcome {
                assert_eq!(denied.remaining(), 0, "denied with tokens in sight");
                // Both shards are a second from their token at most.
                assert!(denied.retry_after() <= Duration::from_secs(1), "{denied:?}");
            }
        }
        assert_eq!(limiter.remaining_at(T0), 0, "tokens created or lost");
        got
    });
}

#[test]
fn give_back_racing_the_empty_hint_never_hides_the_given_back_token() {
    // Summary: (tokens the gather of two got, the first and the second request from home 1). The
    // gather wins both tokens; or the home take wins shard 1 and the gather gives shard 0's token
    // back, which the second request steals, or misses (it read shard 0 while the gather held it,
    // and may have published the hint that every shard is empty).
    check_reaches(&[(2, 0, 0), (0, 1, 1), (0, 1, 0)], || {
        // Two shards of one token each, both full.
        let limiter = limiter(2, 2, 2);
        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let first = limiter.try_acquire_n_from(1, 1, T0);
                let second = limiter.try_acquire_n_from(1, 1, T0);
                (first, second)
            })
        };
        // Two tokens from home 0: more than a shard holds, so it gathers, and gives back if the
        // home take at 1 wins shard 1 first.
        let gathered = limiter.try_acquire_n_from(0, 2, T0);
        let (first, second) = other.join().expect("other thread panicked");

        let got = (
            admitted(&gathered, 2),
            admitted(&first, 1),
            admitted(&second, 1),
        );
        let left = limiter.remaining_at(T0);
        assert_eq!(
            got.0 + got.1 + got.2 + left,
            2,
            "tokens created or lost: {gathered:?}, {first:?}, {second:?}"
        );
        // What is left must be takeable from the empty home 1: no hint published while the
        // gather held shard 0's token may outlive its give-back.
        let later = limiter.try_acquire_n_from(1, 1, T0);
        assert_eq!(
            admitted(&later, 1),
            left.min(1),
            "{left} left, later {later:?}"
        );
        got
    });
}

/// A reservation across two shards (one token each, one refilled per shard every second) and its
/// cancel, racing a take from the other home and a second reservation, at a frozen clock. In
/// every interleaving, every promise keeps `C + R × t` (tokens ready by any instant `T` number at
/// most `2 + 2 (T - T0) / 1 s` plus what the cancel gave back), the cancel gives back at most its
/// two, and the shards hold no more at `T0` than was never taken or came back.
#[test]
fn reservation_and_cancel_across_shards_racing_a_take_and_a_reservation_keep_the_limit() {
    const WAIT: Duration = Duration::from_secs(4);
    const SEC: u64 = 1_000_000_000;
    check_reaches(&[(1, false), (1, true), (2, false), (2, true)], || {
        let limiter = limiter(2, 2, 2);

        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                let r = limiter
                    .reserve_n_from(0, 2, WAIT, T0)
                    .expect("two tokens are there within 2 s in every order");
                let ready = r.ready_at().as_u64();
                (ready, r.cancel_at(T0))
            })
        };
        let acquired = limiter.try_acquire_n_from(1, 1, T0).is_ok();
        let mine = limiter.reserve_n_from(1, 1, WAIT, T0);
        let (their_ready, back) = other.join().expect("reserver panicked");

        let mut handed = vec![(their_ready, 2u64)];
        if let Ok(r) = &mine {
            handed.push((r.ready_at().as_u64(), 1));
        }
        if acquired {
            handed.push((T0.as_u64(), 1));
        }
        handed.sort_unstable();
        let mut total = 0;
        for &(ready, n) in &handed {
            total += n;
            let bound = 2 + 2 * (ready - T0.as_u64()) / SEC + back;
            assert!(total <= bound, "{total} ready by {ready}: above {bound}");
        }
        assert!(back <= 2);
        let ready_now: u64 = handed
            .iter()
            .filter(|&&(ready, _)| ready == T0.as_u64())
            .map(|&(_, n)| n)
            .sum();
        assert!(limiter.remaining_at(T0) + ready_now <= 2 + back);
        (back, acquired)
    });
}
