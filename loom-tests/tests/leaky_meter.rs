//! Loom models of [`tollgate::leaky::LeakyMeter`]'s single-word compare-and-swap protocol.
//!
//! Each model races two or three threads through a few schedulings or strict admissions on one
//! meter and asserts what must hold in every interleaving loom explores: no two callers get the
//! same departure slot, the queue never holds more than its capacity, a refusal's `retry_after` is
//! the exact wait for the place the winner took, and a strict request never cuts in front of a
//! scheduled one. Each returns a summary of how the race went, and `check_reaches` asserts that loom
//! ran every outcome the race allows (see `common/mod.rs`).
//!
//! Readings are explicit `Nanos` passed to the `_at` methods, so "no time passes" is exact.
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --test leaky_meter`.

// Without `--cfg tollgate_loom` this file compiles to an empty test binary.
#![cfg(tollgate_loom)]

mod common;

use std::time::Duration;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::leaky::LeakyMeter;
use tollgate::{Denied, ManualClock, Nanos, Quota, Scheduled};

/// The reading every model uses: no time passes.
const T0: Nanos = Nanos::ZERO;

/// With [`two_per_second`], the interval between departures.
const I: Duration = Duration::from_millis(500);

/// Two per second, capacity 2: one departure every [`I`], at most two in the queue.
fn two_per_second() -> Quota {
    Quota::per_second(2).expect("2 per second is a valid quota")
}

/// A meter for `quota` built at [`T0`] inside the running model, shareable between loom threads.
fn meter(quota: Quota) -> Arc<LeakyMeter<ManualClock>> {
    Arc::new(LeakyMeter::with_clock(quota, ManualClock::starting_at(T0)))
}

/// Checks the loser of a race for the last place: refused for exactly one interval, with no place
/// free and the queue draining two intervals from now.
fn assert_lost_the_last_place(denied: &Denied) {
    assert_eq!(
        denied.retry_after(),
        I,
        "the wait for the winner's place to free"
    );
    assert_eq!(denied.retry_at(), Nanos::new(500_000_000));
    assert_eq!(denied.remaining(), 0);
    assert_eq!(denied.reset_after(), 2 * I);
}

#[test]
fn two_schedulers_racing_for_the_last_place_exactly_one_gets_it() {
    check_reaches(&["main thread won", "spawned thread won"], || {
        let meter = meter(two_per_second());
        // One place of two already taken, leaving at once.
        assert_eq!(
            meter.try_schedule_at(T0).expect("an empty queue").delay(),
            Duration::ZERO
        );

        let other = {
            let meter = Arc::clone(&meter);
            thread::spawn(move || meter.try_schedule_at(T0))
        };
        let mine = meter.try_schedule_at(T0);
        let theirs = other.join().expect("racer panicked");

        let (won, lost, summary): (&Scheduled, &Denied, _) = match (&mine, &theirs) {
            (Ok(s), Err(d)) => (s, d, "main thread won"),
            (Err(d), Ok(s)) => (s, d, "spawned thread won"),
            _ => panic!("one place, two takers: mine {mine:?}, theirs {theirs:?}"),
        };
        assert_eq!(
            won.delay(),
            I,
            "the winner leaves one interval after the first"
        );
        assert_eq!((won.queued(), won.remaining()), (2, 0));
        assert_lost_the_last_place(lost);
        assert_eq!(meter.remaining_at(T0), 0);
        summary
    });
}

#[test]
fn three_schedulers_racing_for_two_places_get_distinct_slots() {
    // Summary: which of the three threads lost (0 is the main thread).
    check_reaches(&[0, 1, 2], || {
        let meter = meter(two_per_second());

        let others: Vec<_> = (0..2)
            .map(|_| {
                let meter = Arc::clone(&meter);
                thread::spawn(move || meter.try_schedule_at(T0))
            })
            .collect();
        let mut outcomes = vec![meter.try_schedule_at(T0)];
        outcomes.extend(
            others
                .into_iter()
                .map(|h| h.join().expect("racer panicked")),
        );

        // Two winners sharing a slot would both report the same delay.
        let mut delays: Vec<Duration> = outcomes
            .iter()
            .filter_map(|o| o.as_ref().ok().map(Scheduled::delay))
            .collect();
        delays.sort_unstable();
        assert_eq!(
            delays,
            [Duration::ZERO, I],
            "two places, three takers: {outcomes:?}"
        );
        let lost = outcomes
            .iter()
            .position(Result::is_err)
            .expect("one thread lost");
        assert_lost_the_last_place(outcomes[lost].as_ref().unwrap_err());
        lost
    });
}

#[test]
fn a_scheduler_racing_a_strict_acquire_never_shares_a_slot() {
    check_reaches(&["strict first", "scheduled first"], || {
        let meter = meter(two_per_second());

        let strict = {
            let meter = Arc::clone(&meter);
            thread::spawn(move || meter.try_acquire_at(T0))
        };
        let scheduled = meter
            .try_schedule_at(T0)
            .expect("two places: a scheduling always fits here");
        let strict = strict.join().expect("strict thread panicked");

        assert_eq!(meter.remaining_at(T0), if strict.is_ok() { 0 } else { 1 });
        match strict {
            // The strict request left at once, so the scheduled one waits an interval.
            Ok(admitted) => {
                assert_eq!(scheduled.delay(), I);
                assert!(admitted.remaining() == 1);
                "strict first"
            }
            // The scheduled one took the slot at T0: strict waits until the queue is empty.
            Err(denied) => {
                assert_eq!(scheduled.delay(), Duration::ZERO);
                assert_eq!(denied.retry_after(), I);
                assert_eq!(
                    denied.remaining(),
                    1,
                    "a place is free, but the queue is not empty"
                );
                "scheduled first"
            }
        }
    });
}

#[test]
fn readings_arriving_out_of_order_never_overlap_departures() {
    // Summary: whether the later reading's scheduling went first.
    check_reaches(&[false, true], || {
        // Room for three: the earlier reading, applied second, sees the later one's queue as
        // 100 ms longer (1.2 requests' worth, counted as 2) and must still fit.
        let meter = meter(
            two_per_second()
                .with_capacity(3)
                .expect("3 is a valid capacity"),
        );
        let late = Nanos::new(100_000_000);

        let other = {
            let meter = Arc::clone(&meter);
            thread::spawn(move || meter.try_schedule_at(late).expect("room for three"))
        };
        let early = meter.try_schedule_at(T0).expect("room for three");
        let later = other.join().expect("racer panicked");

        let (a, b) = (early.depart_at().as_u64(), later.depart_at().as_u64());
        let gap = a.abs_diff(b);
        assert!(
            gap >= 500_000_000,
            "departures {a} and {b} closer than one interval"
        );
        // Neither departs before its own reading.
        assert!(a >= T0.as_u64() && b >= late.as_u64());
        later.delay().is_zero()
    });
}
