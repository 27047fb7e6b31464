//! The token bucket through its public API: clock faults and argument extremes.

use std::time::Duration;

use tollgate::{AcquireError, Clock, ManualClock, Nanos, Quota, TokenBucket};

const SEC: u64 = 1_000_000_000;

fn bucket(quota: Quota) -> (TokenBucket<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    (TokenBucket::with_clock(quota, clock.clone()), clock)
}

#[test]
fn burst_then_steady_rate() {
    // The design notes' example: capacity 10, 2 per second.
    let (b, clock) = bucket(Quota::per_second(2).unwrap().with_capacity(10).unwrap());
    for _ in 0..10 {
        b.try_acquire().unwrap();
    }
    assert!(b.try_acquire().is_err());
    let mut admitted = 0;
    for _ in 0..40 {
        clock.advance(Duration::from_millis(250));
        while b.try_acquire().is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 20); // 10 s at 2 per second
}

#[test]
fn a_clock_stepping_backwards_creates_no_tokens() {
    let (b, clock) = bucket(Quota::per_second(10).unwrap());
    clock.set(Nanos::new(100 * SEC));
    while b.try_acquire().is_ok() {}
    // Step back by a minute, then forward again by less than one interval.
    clock.set(Nanos::new(40 * SEC));
    assert!(b.try_acquire().is_err());
    assert_eq!(b.remaining(), 0);
    assert!(b.peek_n(1).is_err());
    clock.set(Nanos::new(100 * SEC + SEC / 10 - 1));
    assert!(b.try_acquire().is_err());
    clock.set(Nanos::new(100 * SEC + SEC / 10));
    assert!(b.try_acquire().is_ok());
    assert!(b.try_acquire().is_err());
}

#[test]
fn a_clock_behind_the_construction_reading_sees_an_emptier_bucket() {
    let clock = ManualClock::starting_at(Nanos::new(50 * SEC));
    let b = TokenBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone());
    clock.set(Nanos::new(50 * SEC - SEC / 2));
    assert_eq!(b.remaining(), 5);
    let mut admitted = 0;
    while b.try_acquire().is_ok() {
        admitted += 1;
    }
    assert_eq!(admitted, 5);
    // Back at the construction reading the bucket holds what is left of the 10, not 10 again.
    clock.set(Nanos::new(50 * SEC));
    assert_eq!(b.remaining(), 5);
}

#[test]
fn a_clock_jumping_forward_by_years_just_fills_the_bucket() {
    let (b, clock) = bucket(Quota::per_second(3).unwrap().with_capacity(5).unwrap());
    while b.try_acquire().is_ok() {}
    clock.advance(Duration::from_secs(10 * 365 * 86_400));
    assert_eq!(b.remaining(), 5);
    for _ in 0..5 {
        b.try_acquire().unwrap();
    }
    assert!(b.try_acquire().is_err());
}

#[test]
fn readings_past_146_years_stand_still() {
    let (b, _clock) = bucket(Quota::per_second(1).unwrap());
    let far = Nanos::new(u64::MAX);
    assert!(b.try_acquire_at(far).is_ok());
    let d = b.try_acquire_at(far).unwrap_err();
    assert_eq!(d.retry_after(), Duration::from_secs(1));
    // Time is clamped at MAX_USABLE, so no reading beyond it refills.
    assert!(b.try_acquire_at(Nanos::new(u64::MAX - 1)).is_err());
    assert!(b
        .try_acquire_at(Nanos::MAX_USABLE.saturating_add(Duration::from_secs(5)))
        .is_err());
}

#[test]
fn u64_extremes_in_every_argument_never_panic() {
    let quotas = [
        Quota::per_second(1).unwrap(),
        Quota::per_second(1_000_000_000)
            .unwrap()
            .with_capacity(1 << 62)
            .unwrap(),
        Quota::per_day(1)
            .unwrap()
            .with_capacity(1 << 40)
            .unwrap()
            .with_initial(0)
            .unwrap(),
        Quota::per_period(3, Duration::from_nanos(1 << 62)).unwrap(),
    ];
    let times = [0, 1, SEC, 1 << 62, (1 << 62) + 1, u64::MAX - 1, u64::MAX];
    let ns = [0, 1, 2, 1 << 32, 1 << 62, u64::MAX - 1, u64::MAX];
    for q in quotas {
        for &start in &times {
            let clock = ManualClock::starting_at(Nanos::new(start));
            let b = TokenBucket::with_clock(q, clock);
            for &t in &times {
                let now = Nanos::new(t);
                for &n in &ns {
                    let _ = b
                        .peek_n_at(n, now)
                        .map(|a| (a.remaining(), a.reset_after()));
                    match b.try_acquire_n_at(n, now) {
                        Ok(a) => {
                            let _ = (a.remaining(), a.reset_after(), a.to_string());
                        }
                        Err(AcquireError::Denied(d)) => {
                            let _ = (
                                d.retry_after(),
                                d.retry_at(),
                                d.remaining(),
                                d.reset_after(),
                                d.to_string(),
                            );
                            assert!(d.retry_at() >= now.min(Nanos::MAX_USABLE));
                        }
                        Err(AcquireError::InsufficientCapacity(e)) => {
                            assert!(n > q.capacity(), "{e}")
                        }
                        Err(other) => panic!("a token bucket has no other refusal: {other}"),
                    }
                    b.refund_at(n, now);
                    assert!(b.remaining_at(now) <= q.capacity());
                }
                let _ = b.try_acquire_at(now);
            }
        }
    }
}

#[test]
fn retry_at_is_the_earliest_admitting_instant() {
    let (b, _clock) = bucket(
        Quota::per_period(3, Duration::from_secs(1))
            .unwrap()
            .with_capacity(2)
            .unwrap(),
    );
    let t0 = Nanos::new(7 * SEC + 17);
    b.try_acquire_n_at(2, t0).unwrap();
    for n in [1, 2] {
        let d = b.try_acquire_n_at(n, t0).unwrap_err();
        let d = d.denied().unwrap();
        let retry = d.retry_at();
        assert_eq!(retry.as_u64() - t0.as_u64(), n * 333_333_334);
        assert!(b.peek_n_at(n, Nanos::new(retry.as_u64() - 1)).is_err());
        assert!(b.peek_n_at(n, retry).is_ok());
    }
}

#[test]
fn buckets_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<TokenBucket>();
    check::<TokenBucket<ManualClock>>();
    check::<TokenBucket<tollgate::CoarseClock>>();
}

#[test]
fn monotonic_clock_readings_never_go_backwards_on_one_thread() {
    let clock = tollgate::MonotonicClock::new();
    let mut last = clock.now();
    for _ in 0..10_000 {
        let now = clock.now();
        assert!(now >= last);
        last = now;
    }
}
