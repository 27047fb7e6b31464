//! The sliding window log through its public API, with explicit times: the limit, the exact
//! `retry_at`, the half-open window, clock faults, idle periods, argument extremes, every
//! construction error, and real threads.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use tollgate::window::{SlidingWindowLog, MAX_LOG};
use tollgate::{AcquireError, Clock, InsufficientCapacity, ManualClock, Nanos, Quota, QuotaError};

const SEC: u64 = 1_000_000_000;

fn log(count: u64, window_ns: u64) -> (SlidingWindowLog<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let quota = Quota::per_period(count, Duration::from_nanos(window_ns)).unwrap();
    (
        SlidingWindowLog::with_clock(quota, clock.clone()).unwrap(),
        clock,
    )
}

fn at(ns: u64) -> Nanos {
    Nanos::new(ns)
}

#[test]
fn admits_n_then_denies() {
    let (log, _) = log(5, SEC);
    for left in (0..5).rev() {
        assert_eq!(log.try_acquire_at(at(7)).unwrap().remaining(), left);
    }
    for _ in 0..3 {
        let denied = log.try_acquire_at(at(7)).unwrap_err();
        assert_eq!(denied.remaining(), 0);
        assert_eq!(denied.retry_at(), at(7 + SEC));
    }
    assert_eq!(log.remaining_at(at(7)), 0);
}

#[test]
fn retry_at_is_exact() {
    let (log, _) = log(3, 1_000);
    log.try_acquire_at(at(100)).unwrap();
    log.try_acquire_at(at(250)).unwrap();
    log.try_acquire_at(at(600)).unwrap();
    let denied = log.try_acquire_at(at(700)).unwrap_err();
    assert_eq!(denied.retry_at(), at(1_100));
    assert_eq!(denied.retry_after(), Duration::from_nanos(400));
    assert!(log.try_acquire_at(at(1_099)).is_err());
    assert!(log.try_acquire_at(at(1_100)).is_ok());
    // Next, the admission at 250 has to leave.
    let denied = log.try_acquire_at(at(1_100)).unwrap_err();
    assert_eq!(denied.retry_at(), at(1_250));
    // Two at once wait for the two oldest.
    let denied = log.try_acquire_n_at(2, at(1_100)).unwrap_err();
    assert_eq!(denied.denied().unwrap().retry_at(), at(1_600));
    assert!(log.peek_n_at(2, at(1_599)).is_err());
    assert!(log.peek_n_at(2, at(1_600)).is_ok());
}

#[test]
fn the_window_is_half_open_an_admission_exactly_w_ago_has_left() {
    let (log, _) = log(1, 500);
    log.try_acquire_at(at(1_000)).unwrap();
    assert!(log.try_acquire_at(at(1_499)).is_err());
    assert_eq!(log.remaining_at(at(1_499)), 0);
    assert_eq!(log.remaining_at(at(1_500)), 1);
    assert!(log.try_acquire_at(at(1_500)).is_ok());
}

#[test]
fn no_boundary_burst_unlike_a_fixed_window() {
    // 10 per second: 10 at 0.9 s, and nothing more until 1.9 s, although a second "started" at 1 s.
    let (log, _) = log(10, SEC);
    assert!(log.try_acquire_n_at(10, at(9 * SEC / 10)).is_ok());
    assert!(log.try_acquire_at(at(SEC)).is_err());
    assert!(log.try_acquire_at(at(19 * SEC / 10 - 1)).is_err());
    assert!(log.try_acquire_n_at(10, at(19 * SEC / 10)).is_ok());
}

#[test]
fn a_clock_stepping_backwards_never_admits_more() {
    let (log, clock) = log(2, 1_000);
    clock.set(at(10_000));
    assert!(log.try_acquire().is_ok());
    assert!(log.try_acquire().is_ok());
    // Back by an hour's worth of windows: judged at the newest admission, still full.
    clock.set(at(0));
    assert!(log.try_acquire().is_err());
    assert_eq!(log.remaining(), 0);
    let denied = log.try_acquire().unwrap_err();
    assert_eq!(denied.retry_at(), at(11_000));
    assert_eq!(denied.retry_after(), Duration::from_nanos(11_000));
    // Forward again, past the window: an admission at a reading behind the newest entry is
    // recorded at the newest entry's time, so it leaves the window no earlier than that does.
    clock.set(at(11_500));
    assert!(log.try_acquire().is_ok());
    clock.set(at(11_100));
    let ok = log.try_acquire().unwrap();
    assert_eq!(ok.remaining(), 0);
    assert_eq!(
        ok.reset_after(),
        Duration::from_nanos(11_500 + 1_000 - 11_100)
    );
    // Both recorded at 11_500: nothing more until 12_500, whatever the readings say.
    for t in [0, 11_000, 12_499] {
        assert!(log.try_acquire_at(at(t)).is_err(), "{t}");
    }
    assert!(log.try_acquire_n_at(2, at(12_500)).is_ok());
}

#[test]
fn idle_periods_of_any_length_empty_the_window_and_no_more() {
    let w = 1_000;
    let (log, _) = log(3, w);
    for start in [0, w, 2 * w, 1_000_000 * w + 2 * w, u64::MAX] {
        assert_eq!(log.remaining_at(at(start)), 3, "{start}");
        assert!(log.try_acquire_n_at(3, at(start)).is_ok(), "{start}");
        assert!(log.try_acquire_at(at(start)).is_err(), "{start}");
    }
    // A reading of u64::MAX is clamped to 2^62: the log stays full there, and says until when.
    let denied = log.try_acquire_at(at(u64::MAX)).unwrap_err();
    assert_eq!(denied.retry_at(), at((1 << 62) + w));
    assert_eq!(log.remaining_at(at(u64::MAX)), 0);
}

#[test]
fn requests_for_zero_all_and_more_than_n() {
    let (log, _) = log(4, 100);
    // n = 0 is a query: always admitted, writes nothing.
    let q = log.try_acquire_n_at(0, at(0)).unwrap();
    assert_eq!((q.remaining(), q.reset_after()), (4, Duration::ZERO));
    assert_eq!(log.remaining_at(at(0)), 4);
    // n = N at once.
    let ok = log.try_acquire_n_at(4, at(10)).unwrap();
    assert_eq!(
        (ok.remaining(), ok.reset_after()),
        (0, Duration::from_nanos(100))
    );
    let q = log.try_acquire_n_at(0, at(30)).unwrap();
    assert_eq!(
        (q.remaining(), q.reset_after()),
        (0, Duration::from_nanos(80))
    );
    assert!(log.peek_n_at(0, at(30)).is_ok());
    // n > N: never, whatever the state, and not a denial.
    for n in [5, 1_000, u64::MAX] {
        let want = AcquireError::InsufficientCapacity(InsufficientCapacity {
            requested: n,
            capacity: 4,
        });
        assert_eq!(log.try_acquire_n_at(n, at(10_000)).unwrap_err(), want);
        assert_eq!(log.peek_n_at(n, at(10_000)).unwrap_err(), want);
    }
    assert_eq!(log.remaining_at(at(10_000)), 4);
}

#[test]
fn remaining_and_reset_after_follow_the_entries() {
    let (log, _) = log(3, 100);
    let ok = log.try_acquire_at(at(0)).unwrap();
    assert_eq!(
        (ok.remaining(), ok.reset_after()),
        (2, Duration::from_nanos(100))
    );
    let ok = log.try_acquire_at(at(40)).unwrap();
    assert_eq!(
        (ok.remaining(), ok.reset_after()),
        (1, Duration::from_nanos(100))
    );
    assert_eq!(log.remaining_at(at(99)), 1);
    assert_eq!(log.remaining_at(at(100)), 2);
    assert_eq!(log.remaining_at(at(140)), 3);
    // Reset is the time until the newest entry leaves; a denial reports it too.
    log.try_acquire_n_at(1, at(50)).unwrap();
    let denied = log.try_acquire_at(at(60)).unwrap_err();
    assert_eq!(denied.reset_after(), Duration::from_nanos(90));
    assert_eq!(denied.remaining(), 0);
    let q = log.try_acquire_n(0).unwrap(); // the clock still reads 0: judged at 50
    assert_eq!(
        (q.remaining(), q.reset_after()),
        (0, Duration::from_nanos(150))
    );
    let q = log.peek_n_at(1, at(100)).unwrap();
    assert_eq!(
        (q.remaining(), q.reset_after()),
        (0, Duration::from_nanos(100))
    );
}

#[test]
fn the_clock_reading_forms_use_the_clock() {
    let (log, clock) = log(2, 1_000);
    clock.set(at(500));
    assert!(log.try_acquire().is_ok());
    assert!(log.try_acquire_n(1).is_ok());
    assert!(log.peek_n(1).is_err());
    assert_eq!(log.remaining(), 0);
    clock.advance(Duration::from_nanos(1_000));
    assert_eq!(log.remaining(), 2);
    assert_eq!(log.clock().now(), at(1_500));
    assert_eq!(log.quota().count(), 2);
    assert!(format!("{log:?}").starts_with("SlidingWindowLog"));
}

#[test]
fn every_construction_error_names_its_field() {
    let clock = ManualClock::new;
    let too_long = Duration::from_nanos((1 << 62) + 2);
    let cases = [
        (
            Quota::per_second(5).unwrap().with_capacity(6).unwrap(),
            "capacity",
            6,
            5,
            None,
            "capacity of a sliding window log must equal its count per window (5): a window has no burst size of its own, got 6",
        ),
        (
            Quota::per_second(5).unwrap().with_initial(4).unwrap(),
            "initial",
            4,
            5,
            None,
            "initial fill of a sliding window log must be its count per window (5): windows start empty, got 4",
        ),
        (
            Quota::per_period(2, too_long).unwrap(),
            "period",
            (1 << 62) + 2,
            1 << 62,
            Some(too_long),
            "period of a sliding window log must be at most 2^62 ns (about 146 years), got 4611686018.427387906s",
        ),
        (
            Quota::per_hour(MAX_LOG + 1).unwrap(),
            "count",
            MAX_LOG + 1,
            MAX_LOG,
            None,
            "count of a sliding window log must be between 1 and 65536 (8 bytes per entry), got 65537",
        ),
    ];
    for (quota, field, got, bound, span, message) in cases {
        let err = SlidingWindowLog::with_clock(quota, clock()).unwrap_err();
        let QuotaError::Algorithm(limit) = err else {
            panic!("{err:?} is not the log's own limit");
        };
        assert_eq!(
            (
                limit.algorithm(),
                limit.field(),
                limit.got(),
                limit.bound(),
                limit.span()
            ),
            ("sliding window log", field, got, bound, span)
        );
        assert_eq!(err.field(), field);
        assert_eq!(err.to_string(), message);
    }
    // The same errors from the default-clock constructor.
    assert!(SlidingWindowLog::new(Quota::per_hour(MAX_LOG + 1).unwrap()).is_err());
}

#[test]
fn the_longest_log_is_accepted_and_works_one_more_is_refused() {
    assert_eq!(MAX_LOG, 65_536);
    let quota = Quota::per_hour(MAX_LOG).unwrap();
    let log = SlidingWindowLog::with_clock(quota, ManualClock::new()).unwrap();
    assert!(log.try_acquire_n_at(MAX_LOG, at(0)).is_ok());
    let denied = log.try_acquire_at(at(1)).unwrap_err();
    assert_eq!(denied.retry_at(), at(3_600 * SEC));
    assert!(log.try_acquire_at(at(3_600 * SEC)).is_ok());
    assert!(SlidingWindowLog::with_clock(
        Quota::per_hour(MAX_LOG + 1).unwrap(),
        ManualClock::new()
    )
    .is_err());
}

#[test]
fn a_window_of_one_nanosecond_and_one_of_146_years() {
    let (tiny, _) = log(1, 1);
    for t in 0..100 {
        assert!(tiny.try_acquire_at(at(t)).is_ok());
        assert!(tiny.try_acquire_at(at(t)).is_err());
    }
    let (long, _) = log(2, 1 << 62);
    assert!(long.try_acquire_n_at(2, at(0)).is_ok());
    assert!(long.try_acquire_at(at(u64::MAX - 1)).is_ok()); // clamped to 2^62 = 0 + W: has left
    assert!(long.try_acquire_at(at(u64::MAX)).is_ok());
    let (late, _) = log(2, 1 << 62);
    assert!(late.try_acquire_n_at(2, at(u64::MAX)).is_ok());
    let denied = late.try_acquire_at(at(u64::MAX)).unwrap_err();
    assert_eq!(denied.retry_at(), at(1 << 63));
}

/// Real threads, no time passing: exactly N are admitted in all, then exactly N more once the
/// window has moved on. (The crate's unit tests rebuild the whole log of a contended run and prove
/// the claims raced; see `stress_real_threads_never_exceed_the_limit_and_do_contend`.)
#[test]
fn threads_sharing_a_frozen_clock_get_exactly_n() {
    let (log, clock) = log(50, SEC);
    let log = Arc::new(log);
    for round in 0..2 {
        let barrier = Arc::new(Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let log = Arc::clone(&log);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    let mut admitted = 0;
                    for k in 0..1_000u64 {
                        if (k + i) % 5 == 0 {
                            let _ = log.peek_n(3);
                        } else if log.try_acquire().is_ok() {
                            admitted += 1;
                        }
                    }
                    admitted
                })
            })
            .collect();
        let admitted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
        assert_eq!(admitted, 50, "round {round}");
        assert_eq!(log.remaining(), 0);
        clock.advance(Duration::from_nanos(SEC));
    }
}

/// The head position (positions consumed so far), read through the log's `Debug` output.
fn head(log: &SlidingWindowLog<ManualClock>) -> u64 {
    let text = format!("{log:?}");
    let rest = text.split("head: ").nth(1).expect("Debug shows the head");
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|digits| digits.parse().ok())
        .expect("the head is a number")
}

/// Real threads, requests for one, two and three racing on a log of three whose window keeps
/// moving (one thread moves the clock on): every position the log consumed was reported as an
/// admission. A request for several that is denied, however the race went, consumed nothing.
#[test]
fn racing_requests_for_several_consume_exactly_what_they_admit() {
    let (log, clock) = log(3, 1_000);
    let log = Arc::new(log);
    let threads = 4u64;
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let log = Arc::clone(&log);
            let clock = clock.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let mut admitted = 0;
                for k in 0..100_000u64 {
                    if i == 0 {
                        clock.advance(Duration::from_nanos(11));
                    }
                    let n = 1 + (k + i) % 3;
                    if log.try_acquire_n_at(n, clock.now()).is_ok() {
                        admitted += n;
                    }
                }
                admitted
            })
        })
        .collect();
    let admitted: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(admitted > 3, "the run admitted almost nothing");
    assert_eq!(
        head(&log),
        admitted,
        "positions consumed vs admissions reported"
    );
}
