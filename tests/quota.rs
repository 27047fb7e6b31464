//! Every `QuotaError`, the accepted ranges at their edges, and the rounding bound.

use std::time::Duration;

use tollgate::{Quota, QuotaError};

#[test]
fn zero_count_names_count() {
    for err in [
        Quota::per_second(0).unwrap_err(),
        Quota::per_minute(0).unwrap_err(),
        Quota::per_hour(0).unwrap_err(),
        Quota::per_day(0).unwrap_err(),
        Quota::per_period(0, Duration::from_secs(1)).unwrap_err(),
    ] {
        assert_eq!(err, QuotaError::ZeroCount);
        assert_eq!(err.field(), "count");
        assert_eq!(err.to_string(), "count must be at least 1, got 0");
    }
}

#[test]
fn zero_period_names_period() {
    let err = Quota::per_period(5, Duration::ZERO).unwrap_err();
    assert_eq!(err, QuotaError::ZeroPeriod);
    assert_eq!(err.field(), "period");
    assert!(err
        .to_string()
        .starts_with("period must be longer than zero"));
}

#[test]
fn rate_too_fast_above_one_per_nanosecond() {
    assert!(Quota::per_second(1_000_000_000).is_ok());
    let err = Quota::per_second(1_000_000_001).unwrap_err();
    assert_eq!(
        err,
        QuotaError::RateTooFast {
            count: 1_000_000_001,
            period: Duration::from_secs(1)
        }
    );
    assert_eq!(err.field(), "rate");
    assert!(
        err.to_string().contains("at most 1 per nanosecond"),
        "{err}"
    );
    assert!(Quota::per_period(2, Duration::from_nanos(1)).is_err());
    assert!(Quota::per_second(u64::MAX).is_err());
}

#[test]
fn rate_too_slow_beyond_2_pow_62_ns_per_token() {
    assert!(Quota::per_period(1, Duration::from_nanos(1 << 62)).is_ok());
    let err = Quota::per_period(1, Duration::from_nanos((1 << 62) + 1)).unwrap_err();
    assert_eq!(err.field(), "rate");
    assert!(matches!(err, QuotaError::RateTooSlow { count: 1, .. }));
    assert!(err.to_string().contains("at least 1 per 2^62 ns"), "{err}");
    let err = Quota::per_period(1, Duration::MAX).unwrap_err();
    assert!(matches!(err, QuotaError::RateTooSlow { .. }));
}

#[test]
fn zero_capacity_names_capacity() {
    let err = Quota::per_second(10).unwrap().with_capacity(0).unwrap_err();
    assert_eq!(err, QuotaError::ZeroCapacity);
    assert_eq!(err.field(), "capacity");
    assert_eq!(err.to_string(), "capacity must be at least 1, got 0");
}

#[test]
fn capacity_too_large_reports_the_maximum() {
    let q = Quota::per_second(1_000_000_000).unwrap();
    assert_eq!(q.max_capacity(), 1 << 62);
    assert!(q.with_capacity(1 << 62).is_ok());
    let err = q.with_capacity((1 << 62) + 1).unwrap_err();
    assert_eq!(err.field(), "capacity");
    assert_eq!(
        err,
        QuotaError::CapacityTooLarge {
            capacity: (1 << 62) + 1,
            max: 1 << 62,
            interval: Duration::from_nanos(1)
        }
    );
    assert!(
        err.to_string()
            .contains(&format!("between 1 and {}", 1u64 << 62)),
        "{err}"
    );
    assert!(q.with_capacity(u64::MAX).is_err());
}

#[test]
fn initial_above_capacity_names_initial_in_either_order() {
    let q = Quota::per_second(10).unwrap();
    let err = q.with_initial(11).unwrap_err();
    assert_eq!(
        err,
        QuotaError::InitialAboveCapacity {
            initial: 11,
            capacity: 10
        }
    );
    assert_eq!(err.field(), "initial");
    // Setting the fill first, then shrinking the capacity below it, is refused too.
    let err = q.with_initial(8).unwrap().with_capacity(5).unwrap_err();
    assert_eq!(
        err,
        QuotaError::InitialAboveCapacity {
            initial: 8,
            capacity: 5
        }
    );
    assert_eq!(q.with_initial(u64::MAX).unwrap_err().field(), "initial");
}

#[test]
fn defaults_capacity_is_count_and_start_is_full() {
    let q = Quota::per_minute(30).unwrap();
    assert_eq!(q.capacity(), 30);
    assert_eq!(q.initial(), 30);
    // A default (full) fill follows later capacity changes.
    let q = q.with_capacity(100).unwrap();
    assert_eq!(q.initial(), 100);
    // An explicit fill stays put.
    let q = Quota::per_minute(30)
        .unwrap()
        .with_initial(3)
        .unwrap()
        .with_capacity(100)
        .unwrap();
    assert_eq!(q.initial(), 3);
}

#[test]
fn accepted_range_one_per_day_to_a_billion_per_second_with_capacities_past_2_pow_32() {
    let rates = [
        Quota::per_day(1).unwrap(),
        Quota::per_hour(1).unwrap(),
        Quota::per_minute(1).unwrap(),
        Quota::per_second(1).unwrap(),
        Quota::per_second(1_000_000).unwrap(),
        Quota::per_second(1_000_000_000).unwrap(),
    ];
    for q in rates {
        for capacity in [1, 2, 1 << 20, 1 << 32, (1 << 32) + 1, 1 << 40] {
            let with = q.with_capacity(capacity);
            assert!(with.is_ok(), "{q:?} capacity {capacity}: {with:?}");
        }
    }
}

#[test]
fn per_constructors_read_n_per_period() {
    assert_eq!(
        Quota::per_second(100).unwrap().interval(),
        Duration::from_millis(10)
    );
    assert_eq!(
        Quota::per_minute(120).unwrap().interval(),
        Duration::from_millis(500)
    );
    assert_eq!(
        Quota::per_hour(7200).unwrap().interval(),
        Duration::from_millis(500)
    );
    assert_eq!(
        Quota::per_day(86_400).unwrap().interval(),
        Duration::from_secs(1)
    );
    let q = Quota::per_period(7, Duration::from_secs(7)).unwrap();
    assert_eq!(q.interval(), Duration::from_secs(1));
    assert_eq!(q.count(), 7);
    assert_eq!(q.period(), Duration::from_secs(7));
}

/// The long-run rate never exceeds the configured one, and falls below it by less than 0.1 % for
/// every rate up to 10^6 per second.
#[test]
fn rounding_never_speeds_up_and_costs_under_a_tenth_of_a_percent_up_to_a_million_per_second() {
    let mut checked = 0;
    let mut rate: u64 = 1;
    while rate <= 1_000_000 {
        for period_s in [1u64, 3, 7, 60, 3600] {
            let count = rate * period_s;
            let q = Quota::per_period(count, Duration::from_secs(period_s)).unwrap();
            let interval = q.interval().as_nanos();
            let period = u128::from(period_s) * 1_000_000_000;
            // never faster: interval * count >= period
            assert!(interval * u128::from(count) >= period, "{q:?}");
            // shortfall = 1 - period / (interval * count) < 0.001
            assert!(period * 1000 > interval * u128::from(count) * 999, "{q:?}");
            checked += 1;
        }
        rate = rate * 3 + 1;
    }
    // the worst case just above an exact interval of 1000 ns
    let q = Quota::per_second(999_999).unwrap();
    assert_eq!(q.interval(), Duration::from_nanos(1001));
    assert!(checked > 20);
}

#[test]
fn quota_errors_are_std_errors() {
    let err: Box<dyn std::error::Error> = Box::new(QuotaError::ZeroCount);
    assert!(!err.to_string().is_empty());
}
