//! `FixedWindow` with explicit times: the count per window, the design notes' boundary burst,
//! alignment, clocks that step backwards, idle periods of any length, every configuration error.

use std::time::Duration;

use tollgate::window::{Alignment, FixedWindow};
use tollgate::{AcquireError, InsufficientCapacity, ManualClock, Nanos, Quota, QuotaError};

const SECOND: u64 = 1_000_000_000;

fn limiter(count: u64, period: Duration) -> FixedWindow<ManualClock> {
    FixedWindow::with_clock(
        Quota::per_period(count, period).unwrap(),
        ManualClock::new(),
    )
    .unwrap()
}

fn at(ns: u64) -> Nanos {
    Nanos::new(ns)
}

#[test]
fn each_window_admits_its_count() {
    let l = limiter(60, Duration::from_secs(60));
    for window in 0..3u64 {
        let start = window * 60 * SECOND;
        let admitted = (0..100)
            .filter(|i| l.try_acquire_at(at(start + i * SECOND / 2)).is_ok())
            .count();
        assert_eq!(admitted, 60, "window {window}");
    }
}

/// The design notes' flaw, shown: 60 per minute, 60 in the last second of one window and 60 in
/// the first second of the next, 120 within two seconds.
#[test]
fn the_boundary_burst_admits_2n_within_a_span_just_over_the_boundary() {
    let l = limiter(60, Duration::from_secs(60));
    let boundary = 60 * SECOND;
    let before = (0..60)
        .filter(|_| l.try_acquire_at(at(boundary - 1)).is_ok())
        .count();
    let after = (0..60)
        .filter(|_| l.try_acquire_at(at(boundary)).is_ok())
        .count();
    // 120 admissions within 2 ns: twice the limit, in a span far shorter than the window.
    assert_eq!(before + after, 120);
    assert!(l.try_acquire_at(at(boundary)).is_err());
}

#[test]
fn a_denial_waits_for_the_next_window_exactly() {
    let l = limiter(2, Duration::from_secs(1));
    l.try_acquire_n_at(2, at(300_000_000)).unwrap();
    let denied = l.try_acquire_at(at(400_000_000)).unwrap_err();
    assert_eq!(denied.retry_after(), Duration::from_millis(600));
    assert_eq!(denied.retry_at(), at(SECOND));
    assert_eq!(denied.remaining(), 0);
    assert_eq!(denied.reset_after(), Duration::from_millis(600));
    assert!(l.peek_n_at(1, at(SECOND - 1)).is_err());
    assert!(l.try_acquire_at(denied.retry_at()).is_ok());
}

#[test]
fn admitted_reports_what_is_left_and_when_the_window_ends() {
    let l = limiter(5, Duration::from_secs(1));
    let ok = l.try_acquire_n_at(3, at(250_000_000)).unwrap();
    assert_eq!(ok.remaining(), 2);
    assert_eq!(ok.reset_after(), Duration::from_millis(750));
    // A query of a fresh window: full, nothing to reset.
    let fresh = l.try_acquire_n_at(0, at(SECOND)).unwrap();
    assert_eq!(
        (fresh.remaining(), fresh.reset_after()),
        (5, Duration::ZERO)
    );
}

#[test]
fn a_clock_stepping_back_never_resets_the_count() {
    let l = limiter(3, Duration::from_secs(1));
    l.try_acquire_n_at(3, at(5 * SECOND + 10)).unwrap();
    // Readings in older windows count in the newest one, which is full.
    for back in [1, SECOND, 5 * SECOND + 10] {
        let t = 5 * SECOND + 10 - back;
        let denied = l.try_acquire_at(at(t)).unwrap_err();
        assert_eq!(denied.retry_at(), at(6 * SECOND), "reading {t}");
        assert_eq!(l.remaining_at(at(t)), 0);
    }
    assert!(l.try_acquire_at(at(6 * SECOND)).is_ok());
}

#[test]
fn idle_periods_of_any_length_read_as_a_fresh_window() {
    let l = limiter(2, Duration::from_millis(10));
    for t in [0, 10_000_000, 10_000_000 * (1 << 20), 1 << 61, 1 << 62] {
        assert_eq!(l.remaining_at(at(t)), 2, "reading {t}");
        assert!(l.try_acquire_n_at(2, at(t)).is_ok(), "reading {t}");
    }
    // Readings past 2^62 are clamped: they share the last window, already full.
    assert_eq!(l.remaining_at(at(u64::MAX)), 0);
    assert!(l.try_acquire_at(at(u64::MAX)).is_err());
}

#[test]
fn n_zero_is_a_query_and_n_above_the_count_can_never_succeed() {
    let l = limiter(4, Duration::from_secs(1));
    assert_eq!(l.try_acquire_n_at(0, at(0)).unwrap().remaining(), 4);
    assert_eq!(l.remaining_at(at(0)), 4);
    assert_eq!(
        l.try_acquire_n_at(5, at(0)).unwrap_err(),
        AcquireError::InsufficientCapacity(InsufficientCapacity {
            requested: 5,
            capacity: 4
        })
    );
    assert!(l.try_acquire_n_at(u64::MAX, at(0)).is_err());
    assert!(l.peek_n_at(u64::MAX, at(u64::MAX)).is_err());
    assert_eq!(l.remaining_at(at(0)), 4);
}

#[test]
fn an_offset_moves_the_boundaries() {
    let quota = Quota::per_second(1).unwrap();
    let l = FixedWindow::with_clock(quota, ManualClock::new())
        .unwrap()
        .aligned(Alignment::Offset(Duration::from_millis(1_300)));
    // Windows start at 0.3 s, 1.3 s, ...
    assert!(l.try_acquire_at(at(299_999_999)).is_ok());
    assert!(l.try_acquire_at(at(300_000_000)).is_ok());
    let denied = l.try_acquire_at(at(1_000_000_000)).unwrap_err();
    assert_eq!(denied.retry_at(), at(1_300_000_000));
}

#[test]
fn wall_clock_windows_end_on_whole_wall_clock_multiples() {
    let l = FixedWindow::new(Quota::per_period(1, Duration::from_millis(100)).unwrap())
        .unwrap()
        .aligned(Alignment::WallClock);
    let ok = l.try_acquire().unwrap();
    let unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    // The window ends at the next whole 100 ms of UNIX time, give or take the two readings' gap.
    let end = (unix + ok.reset_after()).as_nanos() % 100_000_000;
    assert!(
        !(5_000_000..=95_000_000).contains(&end),
        "window ends {end} ns past a 100 ms mark"
    );
}

#[test]
fn every_configuration_error_names_its_field_and_range() {
    let capacity = Quota::per_second(10).unwrap().with_capacity(20).unwrap();
    let err = FixedWindow::new(capacity).unwrap_err();
    let QuotaError::Algorithm(limit) = err else {
        panic!("{err:?} is not the window's own limit");
    };
    assert_eq!(
        (limit.algorithm(), limit.got(), limit.bound(), limit.span()),
        ("fixed window", 20, 10, None)
    );
    assert_eq!(err.field(), "capacity");
    assert_eq!(
        err.to_string(),
        "capacity of a fixed window must equal its count per window (10): \
         a window has no burst size of its own, got 20"
    );

    let initial = Quota::per_second(10).unwrap().with_initial(3).unwrap();
    let err = FixedWindow::new(initial).unwrap_err();
    assert_eq!(err.field(), "initial");
    assert!(err.to_string().contains("windows start empty"), "{err}");
    // A full initial fill is the default, and accepted.
    assert!(FixedWindow::new(Quota::per_second(10).unwrap().with_initial(10).unwrap()).is_ok());

    let long = Quota::per_period(1_000_000, Duration::from_secs(200 * 365 * 86_400)).unwrap();
    let err = FixedWindow::new(long).unwrap_err();
    assert_eq!(err.field(), "period");
    assert!(err.to_string().contains("at most 2^62 ns"), "{err}");

    // The count always fits beside the window index: the word leaves it room for at least W in a
    // window of W ns, the quota's own limit of one per nanosecond.
    for ns in [1, 3, 1_000, 1_500, 999_999_999, 1 << 40, 1 << 62] {
        let densest = Quota::per_period(ns, Duration::from_nanos(ns)).unwrap();
        assert!(FixedWindow::new(densest).is_ok(), "{ns} per {ns} ns");
    }
}
