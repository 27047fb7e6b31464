//! Loom models of [`tollgate::keyed::KeyedLimiter`]'s protocol: admissions compare-and-swap a key's
//! state with no lock held; eviction marks a forgettable state gone with one compare-and-swap,
//! then removes it in a separate step; a decision that meets the mark decides again on the key as
//! new, creating it afresh or replacing the marked state; a new key reserves its place in the key
//! count and is inserted under the write lock.
//!
//! Under `cfg(tollgate_loom)` the limiter's map is a loom `RwLock` around a `HashMap` of `Arc`s
//! (one shard) whose lookups hold no lock while the state is used, and whose eviction marks and
//! removes in separate steps: the weakest map the protocol allows. These models check the
//! limiter's own protocol, taking the concurrent map's correctness as given.
//! Readings are explicit, so "no time passes" is exact. The eviction models race an admission at
//! the eviction's own reading, and (`*_early_admission_racing_a_later_eviction_*`) one at an
//! earlier reading, which only the order "raise the floor, then remove" keeps from re-creating a
//! forgotten key fresh as of that early reading: each of those five fails if the order is swapped.
//!
//! The keyed token bucket's reservations go through the same protocol: a reservation racing an
//! eviction is never lost, and a cancel at a lagging reading racing its key's eviction and
//! re-creation gives nothing to the key created afresh (it reads the floor after finding the
//! key's state, and the floor rises before any state is marked gone).
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
    Algorithm, FixedWindowKeys, KeyedError, KeyedLimiter, LeakyMeterKeys, SlidingWindowCounterKeys,
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

/// The other algorithms' states race eviction the same way: key 1 is used up at [`T0`] (both of
/// its admissions in window 0, or in the log's last second, or two intervals of the meter's
/// queue), so at [`T2`] it is forgettable (the sliding counter counts window 0 until window 2
/// starts); one thread admits on it at `T2` while another evicts at `T2`. Whichever runs first,
/// the key has exactly one admission left at `T2` afterwards, and exactly the limit is admitted
/// at `T2` in all (for the strict meter, which admits only on an empty queue, nothing more).
/// For the log the state is a ring of two slots and a head, claimed lock-free; eviction marks the
/// slot the next claim would replace.
fn eviction_racing_an_admission<A: Algorithm>(strict: bool) {
    check_reaches(&[(0, true), (1, true)], move || {
        let limiter: Arc<KeyedLimiter<u8, A, ManualClock>> = Arc::new(
            KeyedLimiter::with_algorithm(Quota::per_second(2).expect("a valid quota"), clock())
                .expect("a valid quota for every algorithm"),
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
        if !strict {
            assert!(limiter.check_key_at(&1, T2).is_ok());
        }
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
fn leaky_meter_eviction_racing_an_admission_never_loses_it() {
    eviction_racing_an_admission::<LeakyMeterKeys>(true);
}

#[test]
fn fixed_window_eviction_racing_an_admission_never_loses_it() {
    eviction_racing_an_admission::<FixedWindowKeys>(false);
}

#[test]
fn sliding_counter_eviction_racing_an_admission_never_loses_it() {
    eviction_racing_an_admission::<SlidingWindowCounterKeys>(false);
}

#[test]
fn sliding_log_eviction_racing_an_admission_never_loses_it() {
    eviction_racing_an_admission::<SlidingWindowLogKeys>(false);
}

/// Half a second after [`T0`].
const T_HALF: Nanos = Nanos::new(500_000_000);

/// An eviction racing an admission whose reading is *earlier* than the eviction's: key 1 is used
/// up at [`T0`] (2 of 2) and forgettable at [`T2`]; one thread evicts at `T2` while another asks
/// for 2 at [`T_HALF`], which the key, never forgotten, cannot give (it has at most one left).
/// Whichever runs first, the request is denied: if the eviction removes the key first, the
/// admission creates it afresh as of the floor (`T2`), which at `T_HALF` has nothing. An eviction
/// that raised the floor only after removing the key would let the admission, in the gap, create
/// it fresh as of its own early reading, full, and admit 2: four admissions where three at most
/// fit (the token bucket; the others likewise).
///
/// The summary is whether the denial is the one the never-forgotten key gives (the admission ran
/// first) or not (it found the key gone and judged the state fresh as of the floor).
fn early_admission_racing_a_later_eviction<A: Algorithm>(reached: &[bool]) {
    check_reaches(reached, || {
        let make = || -> KeyedLimiter<u8, A, ManualClock> {
            KeyedLimiter::with_algorithm(Quota::per_second(2).expect("a valid quota"), clock())
                .expect("a valid quota for every algorithm")
        };
        // The answer a never-forgotten key gives (no thread, no eviction).
        let kept = make();
        kept.check_key_n_at(&1, 2, T0).expect("a fresh key admits");
        let kept = kept.check_key_n_at(&1, 2, T_HALF);
        assert!(matches!(kept, Err(KeyedError::Denied(_))), "{kept:?}");

        let limiter = Arc::new(make());
        limiter
            .check_key_n_at(&1, 2, T0)
            .expect("a fresh key admits");
        let evictor = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.retain_recent_at(T2))
        };
        let early = limiter.check_key_n_at(&1, 2, T_HALF);
        let removed = evictor.join().expect("evictor panicked");

        assert!(
            matches!(early, Err(KeyedError::Denied(_))),
            "over-admitted at an early reading racing a later eviction: {early:?}"
        );
        assert_eq!(
            removed, 1,
            "the key was forgettable at T2 and a denial writes nothing"
        );
        assert!(limiter.is_empty(), "a denial created a key");
        early == kept
    });
}

#[test]
fn token_bucket_early_admission_racing_a_later_eviction_never_over_admits() {
    early_admission_racing_a_later_eviction::<TokenBucketKeys>(&[false, true]);
}

#[test]
fn leaky_meter_early_admission_racing_a_later_eviction_never_over_admits() {
    early_admission_racing_a_later_eviction::<LeakyMeterKeys>(&[false, true]);
}

#[test]
fn fixed_window_early_admission_racing_a_later_eviction_never_over_admits() {
    early_admission_racing_a_later_eviction::<FixedWindowKeys>(&[false, true]);
}

#[test]
fn sliding_counter_early_admission_racing_a_later_eviction_never_over_admits() {
    // The counter's state fresh as of the floor counts at `T_HALF` exactly what the forgotten key
    // counted there (a full window before the floor's), so both orders give the same denial.
    early_admission_racing_a_later_eviction::<SlidingWindowCounterKeys>(&[true]);
}

#[test]
fn sliding_log_early_admission_racing_a_later_eviction_never_over_admits() {
    early_admission_racing_a_later_eviction::<SlidingWindowLogKeys>(&[false, true]);
}

/// Two first requests of key 1 after it became forgettable, racing the eviction of its old entry:
/// key 1 is used up at [`T0`] (2 of 2) and forgettable at `at`; two threads each ask for one at
/// `at` while a third evicts at `at`. Every order admits both (the key, kept or forgotten, is
/// full at `at`) and nothing more: one state afterwards, one place, nothing left at `at`. The
/// orders include an admission that finds the old state marked gone and not yet removed (it
/// replaces it with a fresh one, which keeps the place, and the eviction removes nothing), and
/// the second admission meeting the first one's fresh state, or the old one's mark.
///
/// The summary is how many entries the eviction removed: 0 when an admission got there first
/// (before the mark, or by replacing the marked state), 1 when it removed the old entry.
fn two_first_requests_racing_an_eviction<A: Algorithm>(at: Nanos) {
    check_reaches(&[0usize, 1], move || {
        let limiter: Arc<KeyedLimiter<u8, A, ManualClock>> = Arc::new(
            KeyedLimiter::with_algorithm(Quota::per_second(2).expect("a valid quota"), clock())
                .expect("a valid quota for every algorithm"),
        );
        limiter
            .check_key_n_at(&1, 2, T0)
            .expect("a fresh key admits");

        let evictor = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.retain_recent_at(at))
        };
        let other = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.check_key_at(&1, at).is_ok())
        };
        let mine = limiter.check_key_at(&1, at).is_ok();
        let theirs = other.join().expect("admitter panicked");
        let removed = evictor.join().expect("evictor panicked");

        assert!(
            mine && theirs,
            "a forgettable key refused one of two requests"
        );
        assert_eq!(limiter.len(), 1, "two states, or two places, for one key");
        assert_eq!(limiter.overflowed(), 0, "the key was refused room");
        assert_eq!(limiter.remaining_key_at(&1, at), 0, "an admission was lost");
        assert!(
            matches!(limiter.check_key_at(&1, at), Err(KeyedError::Denied(_))),
            "more than the limit admitted"
        );
        removed
    });
}

#[test]
fn token_bucket_two_first_requests_racing_an_eviction_share_one_fresh_state() {
    two_first_requests_racing_an_eviction::<TokenBucketKeys>(T1);
}

#[test]
fn sliding_log_two_first_requests_racing_an_eviction_share_one_fresh_state() {
    two_first_requests_racing_an_eviction::<SlidingWindowLogKeys>(T1);
}

/// The last place in a full map racing an eviction: with room for one key, key 1 is used at
/// [`T0`] and forgettable at [`T1`]; one thread evicts at `T1` while another sends key 2's first
/// request at `T1`. Key 1 is removed exactly once, by the eviction or by the newcomer's own sweep
/// (which removes it whether it judges it or finds it already marked gone by the other thread),
/// and its place is given back exactly once; the bound holds throughout. Key 2 gets the place
/// unless it looked while the racing eviction had removed key 1 and not yet given the place back
/// (places are given back when a sweep ends): then it is refused as `TooManyKeys`, and the map is
/// left empty.
///
/// The summary is whether key 2 got the place, and how many entries the racing eviction removed.
#[test]
fn the_last_place_racing_an_eviction_goes_to_the_newcomer_or_is_still_held() {
    check_reaches(&[(false, 1usize), (true, 0), (true, 1)], || {
        let limiter = Arc::new(limiter().with_max_keys(1));
        limiter.check_key_at(&1, T0).expect("a fresh key admits");

        let evictor = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.retain_recent_at(T1))
        };
        let newcomer = limiter.check_key_at(&2, T1);
        let removed = evictor.join().expect("evictor panicked");

        assert!(!limiter.contains_key(&1));
        assert_eq!(limiter.evictions(), 1, "key 1 removed once");
        let placed = match newcomer {
            Ok(_) => true,
            Err(KeyedError::TooManyKeys(_)) => false,
            other => panic!("the newcomer got {other:?}"),
        };
        assert_eq!(limiter.contains_key(&2), placed);
        assert_eq!(
            limiter.len(),
            usize::from(placed),
            "a place lost or counted twice"
        );
        (placed, removed)
    });
}

/// A reservation racing an eviction, as an admission does
/// ([`eviction_racing_an_admission_never_loses_it`]): key 1 is full at [`T1`]; one thread
/// reserves 2 there (an admission: no wait) while another evicts at `T1`. Whichever runs first,
/// the key has nothing left at `T1` afterwards: a reservation the eviction removed after its write
/// would let two more through.
#[test]
fn a_reservation_racing_an_eviction_is_never_lost() {
    check_reaches(&[0, 1], || {
        let limiter = Arc::new(limiter());
        limiter.check_key_at(&1, T0).expect("a fresh key admits");

        let evictor = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || limiter.retain_recent_at(T1))
        };
        let reserved = limiter
            .reserve_key_n_at(&1, 2, std::time::Duration::ZERO, T1)
            .map(|r| (r.tokens(), r.ready_at()));
        let removed = evictor.join().expect("evictor panicked");

        assert_eq!(reserved, Ok((2, T1)), "a full key refused a reservation");
        assert_eq!(
            limiter.remaining_key_at(&1, T1),
            0,
            "the reservation was lost"
        );
        assert!(matches!(
            limiter.check_key_at(&1, T1),
            Err(KeyedError::Denied(_))
        ));
        removed
    });
}

/// A cancel at a lagging reading racing the eviction and re-creation of its key: key 1 reserves
/// its 2 tokens at [`T0`] (ready at once) and is full again at [`T1`]; one thread cancels at `T0`
/// (the reservation's own time, so not yet passed) while another evicts at `T1` and takes 1 from
/// the key created afresh. If the cancel runs first, it gives the 2 back to the old state, which
/// the eviction then forgets; if it runs after the eviction, it gives back nothing (its reading is
/// below the floor), whether it finds the old state marked gone or the new one. Either way the new
/// key has 1 left at `T1`: a cancel that gave back to the new key (1 token: the one taken after
/// the reservation's word) would fill it. Fails without the floor check in
/// `Reservation::cancel_at`.
#[test]
fn a_cancel_racing_an_eviction_gives_nothing_to_the_key_created_afresh() {
    check_reaches(&[0u64, 2], || {
        let limiter = Arc::new(limiter());
        let reservation = limiter
            .reserve_key_n_at(&1, 2, std::time::Duration::ZERO, T0)
            .expect("a fresh key reserves");
        let evictor = {
            let limiter = Arc::clone(&limiter);
            thread::spawn(move || {
                limiter.retain_recent_at(T1);
                limiter.check_key_at(&1, T1)
            })
        };
        let back = reservation.cancel_at(T0);
        let taken = evictor.join().expect("evictor panicked");
        assert!(taken.is_ok(), "the key at T1 is full: {taken:?}");
        assert_eq!(
            limiter.remaining_key_at(&1, T1),
            1,
            "the cancel gave tokens to the key created afresh"
        );
        back
    });
}
