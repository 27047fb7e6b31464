//! `CoarseClock`'s upkeep thread across the life of its clocks: creating a clock never fails while
//! another thread drops the last one or a foreign (quanta) upkeep thread runs, and dropping the
//! last one does not wait out the interval.
//!
//! The upkeep thread is process-wide, so these tests have this file (this process) to themselves,
//! and take turns through [`SERIAL`]: each needs to be the only owner of clocks while it runs.

use std::sync::{Barrier, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tollgate::{Clock, CoarseClock, MonotonicClock};

/// Held by each test for its whole run: the tests of one file run on parallel threads, and each
/// test here needs to own every `CoarseClock` in the process.
static SERIAL: Mutex<()> = Mutex::new(());

/// Waits (up to a generous minute, which only a broken upkeep thread would use up) until `clock`
/// reads later than `since`; answers whether it did.
fn moves_past(clock: &CoarseClock, since: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if clock.now().as_u64() > since {
            return true;
        }
        thread::sleep(Duration::from_millis(1));
    }
    false
}

#[test]
fn creating_never_fails_while_another_thread_drops_the_last_clock() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    const THREADS: usize = 2;
    const ROUNDS: usize = 2_000;
    let start = Barrier::new(THREADS);
    let failures: Vec<(usize, String)> = thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    start.wait();
                    let mut failures = Vec::new();
                    for round in 0..ROUNDS {
                        // Each thread holds at most one clock, so the count of live clocks keeps
                        // falling to zero while the other thread is creating one. Holding each
                        // clock a moment lets its upkeep thread start and wait for its next tick,
                        // so a drop that stops it has to wake it (or wait it out); pausing between
                        // rounds leaves the other thread alone with its clock, so that its drop is
                        // often the last.
                        match CoarseClock::new() {
                            Ok(clock) => {
                                thread::sleep(Duration::from_micros(100));
                                drop(clock);
                            }
                            Err(e) => failures.push((round, e.to_string())),
                        }
                        thread::sleep(Duration::from_micros(100));
                    }
                    failures
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("a worker panicked"))
            .collect()
    });
    assert!(
        failures.is_empty(),
        "{} of {} creations failed; the first: {:?}",
        failures.len(),
        THREADS * ROUNDS,
        failures.first()
    );

    // The churn left the upkeep machinery working: a new clock is refreshed.
    let clock = CoarseClock::new().expect("a clock after the churn");
    let since = MonotonicClock::new().now().as_u64();
    assert!(
        moves_past(&clock, since),
        "the upkeep thread never refreshed the clock after the churn"
    );
}

#[test]
fn dropping_the_last_clock_does_not_wait_out_the_interval() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    // An upkeep thread that sleeps its whole interval before it looks for a stop request holds up
    // the drop of the last clock until that sleep ends: with the longest interval, nearly a second
    // for a drop just after the thread's first refresh, so nearly ROUNDS seconds for ROUNDS rounds.
    // A thread woken at the drop needs only to be scheduled. Half the slow bound leaves a loaded
    // machine a quarter of a second a round to schedule it; only a drop that waits out the interval
    // can exceed it.
    const ROUNDS: u32 = 10;
    let interval = CoarseClock::MAX_INTERVAL;
    let mut dropping = Duration::ZERO;
    for round in 0..ROUNDS {
        let clock = CoarseClock::with_interval(interval).expect("the upkeep thread starts");
        assert_eq!(
            clock.interval(),
            interval,
            "round {round}: this test owns the only clocks in its process"
        );
        // Drop only once the upkeep thread has refreshed the reading (and so has gone on to wait
        // for its next tick): a drop that comes before the thread first runs is quick either way.
        let created = clock.now().as_u64();
        assert!(
            moves_past(&clock, created),
            "round {round}: the upkeep thread never refreshed the clock"
        );
        let before = Instant::now();
        drop(clock);
        dropping += before.elapsed();
    }
    // Nearly: less the moment between the thread's refresh and the drop, a millisecond or so.
    let slow_bound = interval * ROUNDS;
    assert!(
        dropping < slow_bound / 2,
        "{ROUNDS} drops of the last clock took {dropping:?}, as long as waiting out the \
         {interval:?} interval each time would (nearly {slow_bound:?})"
    );

    // Dropping stopped the thread of that interval: the next clock starts its own, with its own
    // interval, and it is refreshed.
    let short = Duration::from_millis(1);
    let clock = CoarseClock::with_interval(short).expect("the upkeep thread restarts");
    assert_eq!(clock.interval(), short);
    let since = MonotonicClock::new().now().as_u64();
    assert!(
        moves_past(&clock, since),
        "the restarted upkeep thread never refreshed the clock"
    );
}

#[test]
fn a_foreign_quanta_upkeep_thread_does_not_stop_a_clock_from_starting() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    // quanta's own upkeep thread (as governor's `QuantaUpkeepClock` starts one) writes the same
    // recent time.
    let interval = Duration::from_millis(1);
    let foreign = quanta::Upkeep::new_with_clock(interval, quanta::Clock::new())
        .start()
        .expect("no quanta upkeep thread runs yet in this process");

    let clock =
        CoarseClock::with_interval(interval).expect("a clock beside a foreign upkeep thread");
    assert_eq!(clock.interval(), interval);
    // The foreign thread was not stopped or disturbed: a second one still cannot start.
    assert!(quanta::Upkeep::new(interval).start().is_err());

    // Once the foreign thread is gone, tollgate's own thread keeps the clock refreshed.
    drop(foreign);
    let since = MonotonicClock::new().now().as_u64();
    assert!(
        moves_past(&clock, since),
        "tollgate's upkeep thread never refreshed the clock"
    );
}
