//! Unit tests of the sliding window counters with explicit times: the weighting at rollovers, exact
//! `retry_at`, clocks that step back, idle periods, extreme readings, every `QuotaError`,
//! alignment, the approximation's worst case against an exact count, and `k = 1` sub-windows
//! answering as the one-word counter.

use std::time::Duration;

use tollgate::window::{Alignment, SlidingWindowCounter, SubWindowCounter};
use tollgate::{
    AcquireError, Admitted, InsufficientCapacity, Limiter, ManualClock, Nanos, Quota, QuotaError,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

fn at(ns: u64) -> Nanos {
    Nanos::new(ns)
}

fn one(quota: Quota) -> SlidingWindowCounter<ManualClock> {
    SlidingWindowCounter::with_clock(quota, ManualClock::new()).unwrap()
}

fn sub(quota: Quota, k: u64) -> SubWindowCounter<ManualClock> {
    SubWindowCounter::with_clock(quota, k, ManualClock::new()).unwrap()
}

fn per_second(n: u64) -> Quota {
    Quota::per_second(n).unwrap()
}

/// A one-word counter and 1-, 2- and 5-sub-window counters for `quota`.
fn all(quota: Quota) -> Vec<Box<dyn Limiter>> {
    vec![
        Box::new(one(quota)),
        Box::new(sub(quota, 1)),
        Box::new(sub(quota, 2)),
        Box::new(sub(quota, 5)),
    ]
}

fn retry_at(outcome: Result<Admitted, AcquireError>) -> u64 {
    outcome
        .expect_err("expected a denial")
        .denied()
        .expect("a denial, not an impossible request")
        .retry_at()
        .as_u64()
}

#[test]
fn a_fresh_counter_admits_n_then_denies() {
    for c in all(per_second(10)) {
        for i in 0..10 {
            assert_eq!(
                c.try_acquire_n_at(1, at(5 * MS)).unwrap().remaining(),
                9 - i
            );
        }
        assert!(c.try_acquire_n_at(1, at(5 * MS)).is_err());
        assert_eq!(c.remaining_at(at(5 * MS)), 0);
    }
}

#[test]
fn the_previous_window_is_weighted_by_what_is_left_of_it() {
    let c = one(per_second(10));
    c.try_acquire_n_at(10, at(0)).unwrap();
    // 10 × (1 − e/W) of the previous window still counts.
    assert_eq!(c.remaining_at(at(SEC)), 0);
    assert_eq!(c.remaining_at(at(SEC + SEC / 2)), 5);
    assert_eq!(c.remaining_at(at(SEC + 9 * SEC / 10)), 9);
    assert_eq!(c.remaining_at(at(SEC + 9 * SEC / 10 - 1)), 8);
    assert_eq!(c.remaining_at(at(2 * SEC)), 10);
    // Admitting in the new window: 5 fit at 1.5 s, not 6.
    assert!(c.try_acquire_n_at(6, at(SEC + SEC / 2)).is_err());
    assert_eq!(
        c.try_acquire_n_at(5, at(SEC + SEC / 2))
            .unwrap()
            .remaining(),
        0
    );
    // The next window sees these 5 as its previous window, and no longer the first 10.
    assert_eq!(c.remaining_at(at(2 * SEC + SEC / 5)), 6);
}

#[test]
fn sub_windows_count_all_but_the_oldest_in_full() {
    // 8 per second in 4 sub-windows of 250 ms.
    let c = sub(per_second(8), 4);
    c.try_acquire_n_at(2, at(0)).unwrap(); // sub-window 0
    c.try_acquire_n_at(3, at(300 * MS)).unwrap(); // sub-window 1
    c.try_acquire_n_at(1, at(800 * MS)).unwrap(); // sub-window 3
    assert_eq!(c.remaining_at(at(999 * MS)), 2);
    // At 1.0 s (sub-window 4) sub-window 0 is the oldest, still fully weighted; at 1.125 s half.
    assert_eq!(c.remaining_at(at(SEC)), 2);
    assert_eq!(c.remaining_at(at(SEC + 125 * MS)), 3);
    // At 1.25 s sub-window 0 is out and sub-window 1 (3) is the oldest.
    assert_eq!(c.remaining_at(at(SEC + 250 * MS)), 4);
    assert_eq!(c.remaining_at(at(SEC + 375 * MS)), 5); // 3 × 1/2 = 1.5 of it: ⌊8 − 2.5⌋
    assert_eq!(c.remaining_at(at(SEC + 750 * MS)), 7); // only sub-window 3 (1), as the oldest at full weight
    assert_eq!(c.remaining_at(at(2 * SEC)), 8);
}

/// (N per second, k, admissions as (n, reading), request, reading).
type Case = (u64, u64, &'static [(u64, u64)], u64, u64);

#[test]
fn retry_at_is_exact() {
    // (quota, k, admissions, request, reading)
    let cases: &[Case] = &[
        (10, 1, &[(10, 0)], 1, 0),
        (10, 1, &[(10, 0)], 5, 0),
        (10, 1, &[(10, 0)], 10, 0),
        (10, 1, &[(4, 0), (6, SEC + 1)], 3, SEC + 2),
        (7, 1, &[(7, SEC - 1)], 2, SEC),
        (7, 1, &[(3, 0), (4, SEC)], 4, SEC + 3),
        (10, 4, &[(10, 0)], 1, 0),
        (10, 4, &[(3, 0), (3, 300 * MS), (4, 600 * MS)], 4, 700 * MS),
        (9, 5, &[(2, 0), (3, 250 * MS), (4, 900 * MS)], 7, 950 * MS),
        (3, 2, &[(1, 0), (2, 700 * MS)], 3, 900 * MS),
    ];
    for &(n_q, k, admissions, n, now) in cases {
        for one_word in [true, false] {
            if one_word && k != 1 {
                continue;
            }
            let build = || -> Box<dyn Limiter> {
                if one_word {
                    Box::new(one(per_second(n_q)))
                } else {
                    Box::new(sub(per_second(n_q), k))
                }
            };
            let c = build();
            for &(m, t) in admissions {
                c.try_acquire_n_at(m, at(t)).unwrap();
            }
            let retry = retry_at(c.try_acquire_n_at(n, at(now)));
            assert!(retry > now);
            assert!(c.peek_n_at(n, at(retry - 1)).is_err(), "{n_q}/{k}: {retry}");
            assert!(
                c.try_acquire_n_at(n, at(retry)).is_ok(),
                "{n_q}/{k}: {retry}"
            );
        }
    }
}

#[test]
fn retry_after_when_the_previous_window_must_drain_first() {
    let c = one(per_second(10));
    c.try_acquire_n_at(10, at(0)).unwrap();
    // 10 of the previous window at weight (W − e)/W leave room for 4 at e = 0.4 s.
    let d = c.try_acquire_n_at(4, at(SEC / 2 - 1)).unwrap_err();
    let d = d.denied().unwrap();
    assert_eq!(d.retry_at(), at(SEC + 400 * MS));
    assert_eq!(
        d.retry_after(),
        Duration::from_nanos(SEC + 400 * MS - (SEC / 2 - 1))
    );
    assert_eq!(d.remaining(), 0);
    assert_eq!(
        d.reset_after(),
        Duration::from_nanos(2 * SEC - (SEC / 2 - 1))
    );
}

#[test]
fn a_clock_stepping_back_never_admits_more() {
    for c in all(per_second(4)) {
        // Two admissions late in window 3, then the reading steps back to window 1 and 2.9 s.
        c.try_acquire_n_at(2, at(3 * SEC + 900 * MS)).unwrap();
        let forward = c.remaining_at(at(3 * SEC + 900 * MS));
        for back in [0, SEC, 2 * SEC + 900 * MS, 3 * SEC] {
            assert!(c.remaining_at(at(back)) <= forward);
        }
        // Judged at the start of window 3: the admissions count in full there.
        assert_eq!(c.remaining_at(at(SEC)), 2);
        c.try_acquire_n_at(2, at(SEC)).unwrap();
        assert!(c.try_acquire_n_at(1, at(SEC)).is_err());
        assert!(c.try_acquire_n_at(1, at(3 * SEC + 999 * MS)).is_err());
    }
    // The clamped estimate uses the previous window at full weight.
    let c = one(per_second(10));
    c.try_acquire_n_at(6, at(500 * MS)).unwrap();
    c.try_acquire_n_at(2, at(SEC + 900 * MS)).unwrap();
    // At 1.9 s: 6 × 0.1 + 2 = 2.6 → 7 left; from a reading in window 0: 6 + 2 → 2 left.
    assert_eq!(c.remaining_at(at(SEC + 900 * MS)), 7);
    assert_eq!(c.remaining_at(at(900 * MS)), 2);
    let d = c.try_acquire_n_at(3, at(900 * MS)).unwrap_err();
    let d = d.denied().unwrap();
    // Judged from the start of window 1, measured from the actual reading: 3 more fit once
    // 6 × (W − e) <= (10 − 2 − 3) × W, at e = W − ⌊5W/6⌋.
    assert_eq!(d.retry_at(), at(SEC + SEC - 5 * SEC / 6));
    assert_eq!(d.reset_after(), Duration::from_nanos(3 * SEC - 900 * MS));
}

#[test]
fn idle_periods_of_any_length_read_as_empty() {
    for c in all(per_second(5)) {
        c.try_acquire_n_at(5, at(0)).unwrap();
        assert_eq!(c.remaining_at(at(SEC)), 0); // one window later: the previous, at full weight
        assert_eq!(c.remaining_at(at(2 * SEC)), 5); // two windows: empty
        for idle in [3 * SEC, 1 << 40, 1 << 62, u64::MAX - 1] {
            assert_eq!(c.remaining_at(at(idle)), 5);
        }
        // A window boundary years later.
        let later = (1 << 50) / SEC * SEC;
        assert_eq!(c.try_acquire_n_at(5, at(later)).unwrap().remaining(), 0);
        assert_eq!(c.remaining_at(at(later + SEC)), 0);
        assert_eq!(c.remaining_at(at(later + 2 * SEC)), 5);
    }
}

#[test]
fn zero_is_a_query_and_more_than_n_is_impossible() {
    for c in all(per_second(4)) {
        c.try_acquire_n_at(4, at(0)).unwrap();
        let q = c.try_acquire_n_at(0, at(0)).unwrap();
        assert_eq!(q.remaining(), 0);
        // Empty again when the first sub-window leaves: W plus one sub-window.
        assert!(q.reset_after() > Duration::from_secs(1));
        assert!(q.reset_after() <= Duration::from_secs(2));
        assert_eq!(c.peek_n_at(0, at(0)).unwrap().remaining(), 0);
        for n in [5, u64::MAX] {
            assert_eq!(
                c.try_acquire_n_at(n, at(0)).unwrap_err(),
                AcquireError::InsufficientCapacity(InsufficientCapacity {
                    requested: n,
                    capacity: 4
                })
            );
            assert!(c.peek_n_at(n, at(0)).unwrap_err().denied().is_none());
        }
        // A query writes nothing: a fresh window later still reads empty.
        assert_eq!(
            c.try_acquire_n_at(0, at(2 * SEC)).unwrap().reset_after(),
            Duration::ZERO
        );
        assert_eq!(c.remaining_at(at(2 * SEC)), 4);
    }
}

#[test]
fn reset_after_is_when_the_estimate_reaches_zero() {
    let c = sub(per_second(8), 4);
    assert_eq!(
        c.try_acquire_n_at(0, at(0)).unwrap().reset_after(),
        Duration::ZERO
    );
    let a = c.try_acquire_n_at(1, at(100 * MS)).unwrap();
    // Sub-window 0 leaves the window at the end of sub-window 4: 1.25 s.
    assert_eq!(a.reset_after(), Duration::from_millis(1150));
    // From a later sub-window with nothing in it, the same instant.
    let q = c.try_acquire_n_at(0, at(600 * MS)).unwrap();
    assert_eq!(q.reset_after(), Duration::from_millis(650));
    let q = c.try_acquire_n_at(0, at(1100 * MS)).unwrap();
    assert_eq!(q.reset_after(), Duration::from_millis(150));
}

#[test]
fn every_quota_error_names_its_field() {
    let q = per_second(10);
    let cases: Vec<(Result<(), QuotaError>, &str)> = vec![
        (
            SlidingWindowCounter::new(q.with_capacity(5).unwrap()).map(drop),
            "capacity",
        ),
        (
            SlidingWindowCounter::new(q.with_initial(5).unwrap()).map(drop),
            "initial",
        ),
        (
            SlidingWindowCounter::new(
                Quota::per_period(2, Duration::from_nanos((1 << 62) + 2)).unwrap(),
            )
            .map(drop),
            "period",
        ),
        (
            SlidingWindowCounter::new(per_second(32_768)).map(drop),
            "count",
        ),
        (SubWindowCounter::new(q, 0).map(drop), "sub_windows"),
        (SubWindowCounter::new(q, 1025).map(drop), "sub_windows"),
        (SubWindowCounter::new(q, 3).map(drop), "sub_windows"),
        // 32 767 fits at 1 s (and 500 ms), not at 250 ms sub-windows.
        (
            SubWindowCounter::new(per_second(32_767), 4).map(drop),
            "count",
        ),
        (
            SubWindowCounter::new(q.with_capacity(20).unwrap(), 2).map(drop),
            "capacity",
        ),
    ];
    for (result, field) in cases {
        assert_eq!(result.unwrap_err().field(), field);
    }
    assert!(SlidingWindowCounter::new(per_second(32_767)).is_ok());
    assert!(SlidingWindowCounter::new(Quota::per_minute(262_143).unwrap()).is_ok());
    let too_many = SlidingWindowCounter::new(Quota::per_minute(262_144).unwrap()).unwrap_err();
    assert_eq!(
        own_limit(too_many),
        ("count", 262_144, 262_143, Some(Duration::from_secs(60)))
    );
    assert_eq!(
        too_many.to_string(),
        "count of a sliding window counter must be between 1 and 262143 for a window of 60s: \
         the count shares a 64-bit word with the window's index, got 262144"
    );
    // 1024 sub-windows of 2^20 ns.
    let binary = Quota::per_period(10, Duration::from_nanos(1 << 30)).unwrap();
    assert_eq!(
        SubWindowCounter::new(binary, 1024).unwrap().sub_windows(),
        1024
    );
    assert_eq!(
        SubWindowCounter::new(binary, 1025).unwrap_err().field(),
        "sub_windows"
    );
    let too_fine = SubWindowCounter::new(q, 1025).unwrap_err();
    assert_eq!(
        own_limit(too_fine),
        ("sub_windows", 1025, 1024, Some(Duration::from_secs(1)))
    );
    assert_eq!(
        too_fine.to_string(),
        "sub_windows of a sliding window counter must be between 1 and 1024 and divide the \
         period (1s) into whole nanoseconds, got 1025"
    );
}

/// The sliding window counter's own limit behind `err`: its field, the value refused, the
/// bound, and the window it depends on.
fn own_limit(err: QuotaError) -> (&'static str, u64, u64, Option<Duration>) {
    let QuotaError::Algorithm(limit) = err else {
        panic!("{err:?} is not the counter's own limit");
    };
    assert_eq!(limit.algorithm(), "sliding window counter");
    (limit.field(), limit.got(), limit.bound(), limit.span())
}

#[test]
fn an_offset_moves_the_window_boundaries() {
    let offset = Alignment::Offset(Duration::from_millis(300));
    let c = one(per_second(2)).aligned(offset);
    c.try_acquire_n_at(2, at(200 * MS)).unwrap();
    // The window holding 200 ms is [−700 ms, 300 ms): at 300 ms it is the previous window.
    assert_eq!(c.remaining_at(at(299 * MS)), 0);
    assert_eq!(c.remaining_at(at(300 * MS)), 0);
    assert_eq!(c.remaining_at(at(800 * MS)), 1);
    assert_eq!(c.remaining_at(at(1300 * MS)), 2);
    let d = c.try_acquire_at(at(250 * MS)).unwrap_err();
    assert_eq!(d.retry_at(), at(800 * MS));
    // Sub-windows align the same way.
    let s = sub(per_second(2), 2).aligned(offset);
    s.try_acquire_n_at(2, at(200 * MS)).unwrap();
    // Sub-windows [−200, 300), [300, 800), [800, 1300): out of the window at 1.3 s.
    assert_eq!(s.remaining_at(at(800 * MS)), 0);
    assert_eq!(s.remaining_at(at(1299 * MS)), 1); // 2 × 1/500 of the oldest
    assert_eq!(s.remaining_at(at(1300 * MS)), 2);
    // A wall-clock alignment builds and admits.
    let w = SlidingWindowCounter::new(per_second(2))
        .unwrap()
        .aligned(Alignment::WallClock);
    assert!(w.try_acquire().is_ok());
}

#[test]
fn readings_at_the_end_of_time_are_clamped() {
    for c in all(per_second(3)) {
        assert_eq!(c.try_acquire_n_at(3, at(u64::MAX)).unwrap().remaining(), 0);
        // Time stands still at 2^62 ns: still full, at any later reading.
        assert!(c.try_acquire_n_at(1, at(u64::MAX)).is_err());
        assert!(c.try_acquire_n_at(1, at(1 << 62)).is_err());
        let d = c.try_acquire_n_at(1, at(u64::MAX)).unwrap_err();
        let d = d.denied().unwrap();
        assert!(d.retry_after() > Duration::ZERO);
        assert_eq!(c.remaining_at(at(u64::MAX)), 0);
    }
    // The largest window, the largest count.
    let big = Quota::per_period(1 << 31, Duration::from_nanos(1 << 62)).unwrap();
    assert_eq!(SlidingWindowCounter::new(big).unwrap_err().field(), "count");
    let c = SlidingWindowCounter::with_clock(
        Quota::per_period((1 << 31) - 1, Duration::from_nanos(1 << 62)).unwrap(),
        ManualClock::new(),
    )
    .unwrap();
    assert!(c.try_acquire_n_at((1 << 31) - 1, at(u64::MAX)).is_ok());
    assert_eq!(c.remaining_at(at(0)), 0);
}

/// The approximation's worst case, against an exact count of the admissions in every span of
/// length `W`: N admissions at the very end of one window, then as many as the estimate allows
/// just before the next one ends.
#[test]
fn the_worst_case_admits_nearly_2n_within_one_window_length() {
    let n = 100;
    let w = 1_000 * MS / 1_000; // 1 ms windows
    let quota = Quota::per_period(n, Duration::from_nanos(w)).unwrap();
    let counters: [(u64, Box<dyn Limiter>); 3] = [
        (1, Box::new(one(quota))),
        (1, Box::new(sub(quota, 1))),
        (10, Box::new(sub(quota, 10))),
    ];
    for (k, c) in counters {
        let sub_w = w / k;
        let mut log = Vec::new();
        // N at the last nanosecond of sub-window k − 1 (the window's last sub-window).
        let first = k * sub_w - 1;
        c.try_acquire_n_at(n, at(first)).unwrap();
        log.extend(std::iter::repeat_n(first, n as usize));
        // Then, one by one, as late in the next window as possible, until refused.
        let late = first + w - 1;
        while c.try_acquire_n_at(1, at(late)).is_ok() {
            log.push(late);
        }
        // Exact: the most admissions in any (t − W, t].
        let exact = log
            .iter()
            .map(|&t| log.iter().filter(|&&u| u + w > t && u <= t).count())
            .max()
            .unwrap() as u64;
        // The second batch: ⌊N − N × 2 / w_sub⌋ (the oldest's weight is 2 ns of w_sub).
        let second = n - (n * 2).div_ceil(sub_w);
        assert_eq!(exact, n + second, "k = {k}");
        assert!(exact > n && exact < 2 * n);
        // The bound: N plus the oldest sub-window's count.
        assert!(exact <= n + n);
    }
}

#[test]
fn one_sub_window_answers_as_the_one_word_counter() {
    let a = one(per_second(7));
    let b = sub(per_second(7), 1);
    let mut t = 0u64;
    for i in 0..400u64 {
        // A walk with forward steps, backward steps and the odd idle gap.
        t = match i % 7 {
            0 => t + 137 * MS,
            1 => t.saturating_sub(290 * MS),
            2 => t + 3,
            3 => t + 999 * MS,
            4 if i % 35 == 4 => t + 5 * SEC,
            _ => t + 61 * MS,
        };
        let n = i % 5;
        // Compared as callers see them (the two may hold the same figures in different units).
        let seen = testkit::outcome::observe;
        assert_eq!(
            seen(a.try_acquire_n_at(n, at(t))),
            seen(b.try_acquire_n_at(n, at(t))),
            "op {i} at {t}"
        );
        assert_eq!(seen(a.peek_n_at(2, at(t))), seen(b.peek_n_at(2, at(t))));
        assert_eq!(a.remaining_at(at(t)), b.remaining_at(at(t)));
    }
}

#[test]
fn clock_reading_methods_read_the_clock() {
    let c = one(per_second(2));
    c.clock().set(at(5 * SEC));
    assert!(c.try_acquire().is_ok());
    assert!(c.try_acquire_n(1).is_ok());
    assert!(c.peek_n(1).is_err());
    assert_eq!(c.remaining(), 0);
    c.clock().advance(Duration::from_secs(2));
    assert_eq!(c.remaining(), 2);
    let s = sub(per_second(2), 2);
    s.clock().set(at(5 * SEC));
    assert!(s.try_acquire().is_ok());
    assert!(s.try_acquire_n(1).is_ok());
    assert!(s.peek_n(1).is_err());
    assert_eq!(s.remaining(), 0);
    assert!(format!("{s:?}").contains("current: 2"));
    assert!(format!("{c:?}").contains("current: 2"));
}

/// The table of the largest `N` by window length in `SlidingWindowCounter`'s docs.
#[test]
fn the_documented_range_table_is_what_the_constructors_accept() {
    let table: [(u64, u64); 10] = [
        (1_000, 31),
        (MS, 1_023),
        (10 * MS, 4_095),
        (100 * MS, 16_383),
        (SEC, 32_767),
        (10 * SEC, 131_071),
        (60 * SEC, 262_143),
        (3_600 * SEC, 2_097_151),
        (86_400 * SEC, 16_777_215),
        (1 << 62, (1 << 31) - 1),
    ];
    for (length, max) in table {
        let period = Duration::from_nanos(length);
        let fits = Quota::per_period(max, period).unwrap();
        let over = Quota::per_period(max + 1, period).unwrap();
        assert!(SlidingWindowCounter::new(fits).is_ok(), "{length}");
        assert_eq!(
            own_limit(SlidingWindowCounter::new(over).unwrap_err()),
            ("count", max + 1, max, Some(period))
        );
        // The same limit for a sub-window of that length (windows of 4 × 2^62 ns are too long).
        let k = 4;
        if length > (1 << 60) {
            continue;
        }
        let fits = Quota::per_period(max, period * 4).unwrap();
        assert!(SubWindowCounter::new(fits, k).is_ok(), "{length}");
        let over = Quota::per_period(max + 1, period * 4).unwrap();
        assert_eq!(SubWindowCounter::new(over, k).unwrap_err().field(), "count");
    }
}
