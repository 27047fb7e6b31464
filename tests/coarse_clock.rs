//! `CoarseClock` staleness: it can delay admissions, and never admits more than the limit as
//! measured on its own readings. One test per file: the upkeep thread is process-wide, and this file
//! needs its own interval.

use std::time::Duration;

use tollgate::{Clock, CoarseClock, MonotonicClock, Quota, TokenBucket};

#[test]
fn staleness_delays_admissions_but_never_over_admits() {
    let interval = Duration::from_millis(50);
    let coarse = CoarseClock::with_interval(interval).unwrap();
    assert_eq!(coarse.interval(), interval);
    let precise = MonotonicClock::new();

    // A stale reading is an earlier reading: it never runs ahead of the precise clock it copies
    // (give or take the nanosecond the two scalings of one TSC reading may round apart).
    for _ in 0..1000 {
        let c = coarse.now();
        assert!(c.as_u64() <= precise.now().as_u64() + 2);
    }

    // 1000 per second, no bursts: one token a millisecond.
    let quota = Quota::per_second(1000).unwrap().with_capacity(1).unwrap();

    // Delay: after draining the bucket, a precise clock would admit again after 1 ms; the coarse
    // clock keeps reading the old instant until the next upkeep tick (50 ms apart), so requests in
    // between are refused. A tick can fall inside that first millisecond, so try a few times.
    let mut delayed = 0;
    for _ in 0..5 {
        let bucket = TokenBucket::with_clock(quota, coarse.clone());
        let drained_at = precise.now();
        while bucket.try_acquire().is_ok() {}
        while precise.now().as_u64() - drained_at.as_u64() < 2_000_000 {
            std::hint::spin_loop();
        }
        if bucket.try_acquire().is_err() {
            delayed += 1;
        }
    }
    assert!(delayed > 0, "the coarse clock never delayed an admission");

    // Never over-admit: hammer the bucket for ~300 ms; admissions are bounded by the capacity plus
    // the refill over the span of the coarse clock's own readings.
    let start = coarse.now();
    let bucket = TokenBucket::with_clock(quota, coarse.clone());
    let until = precise.now().as_u64() + 300_000_000;
    let mut admitted = 0u64;
    while precise.now().as_u64() < until {
        if bucket.try_acquire().is_ok() {
            admitted += 1;
        }
    }
    let end = coarse.now();
    let refill = (end.as_u64() - start.as_u64()) / 1_000_000;
    assert!(
        admitted <= 1 + refill,
        "admitted {admitted} > C + R*t = {}",
        1 + refill
    );
    // ...and the clock did move: the upkeep thread is alive.
    assert!(end > start);
}
