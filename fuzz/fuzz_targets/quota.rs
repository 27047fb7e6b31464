//! Arbitrary arguments to every `Quota` constructor and builder, the builders called in any order:
//! never a panic; every accepted quota satisfies the documented invariants and drives a bucket
//! without panicking at any reading; every refusal names its field and the accepted range, and
//! happens exactly when the documented ranges say it should.

#![no_main]

// This target uses only the validation half of the bucket model (interval and capacity ranges).
use std::time::Duration;
use testkit::consts::MAX_USABLE_NS;
use testkit::reference::bucket as reference;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tollgate::{AcquireError, ManualClock, Nanos, Quota, QuotaError, TokenBucket};

/// A constructor and its arguments; a period is built from raw seconds and nanoseconds.
#[derive(Debug, Arbitrary)]
enum Ctor {
    Second(u64),
    Minute(u64),
    Hour(u64),
    Day(u64),
    Period(u64, u64, u32),
}

impl Ctor {
    fn count(&self) -> u64 {
        match *self {
            Ctor::Second(n) | Ctor::Minute(n) | Ctor::Hour(n) | Ctor::Day(n) => n,
            Ctor::Period(n, _, _) => n,
        }
    }

    fn period(&self) -> Duration {
        match *self {
            Ctor::Second(_) => Duration::from_secs(1),
            Ctor::Minute(_) => Duration::from_secs(60),
            Ctor::Hour(_) => Duration::from_secs(3_600),
            Ctor::Day(_) => Duration::from_secs(86_400),
            Ctor::Period(_, secs, nanos) => Duration::new(secs, nanos % 1_000_000_000),
        }
    }

    fn build(&self) -> Result<Quota, QuotaError> {
        match *self {
            Ctor::Second(n) => Quota::per_second(n),
            Ctor::Minute(n) => Quota::per_minute(n),
            Ctor::Hour(n) => Quota::per_hour(n),
            Ctor::Day(n) => Quota::per_day(n),
            Ctor::Period(n, _, _) => Quota::per_period(n, self.period()),
        }
    }
}

/// A builder call.
#[derive(Debug, Clone, Copy, Arbitrary)]
enum Call {
    /// `with_capacity(x)`.
    Capacity(u64),
    /// `with_capacity(max_capacity() - x)` (saturating): capacities near the limit.
    CapacityBelowMax(u16),
    /// `with_initial(x)`.
    Initial(u64),
    /// `with_initial(capacity() - x)` (saturating).
    InitialBelowCapacity(u16),
}

#[derive(Debug, Arbitrary)]
struct Input {
    ctor: Ctor,
    calls: Vec<Call>,
    /// Where the bucket's clock starts.
    start: u64,
    /// A reading for one extra request.
    reading: u64,
}

/// The documented invariants of an accepted quota, `initial` being what `with_initial` last set.
fn check_accepted(quota: &Quota, ctor: &Ctor, initial: Option<u64>) {
    let count = ctor.count();
    let period_ns = ctor.period().as_nanos();
    let interval_ns = quota.interval().as_nanos();
    assert_eq!(quota.count(), count);
    // The period is reported as given, however long.
    assert_eq!(quota.period().as_nanos(), period_ns);
    // period / count rounded up: at least the exact quotient, less than one nanosecond more.
    assert!(interval_ns * u128::from(count) >= period_ns, "{quota:?}");
    assert!(
        (interval_ns - 1) * u128::from(count) < period_ns,
        "{quota:?}"
    );
    assert!(interval_ns <= u128::from(MAX_USABLE_NS), "{quota:?}");
    let interval = u64::try_from(interval_ns).unwrap();
    assert_eq!(reference::interval_ns(count, period_ns), Some(interval));
    assert_eq!(
        quota.max_capacity(),
        reference::max_capacity(interval),
        "{quota:?}"
    );
    assert!(
        1 <= quota.capacity() && quota.capacity() <= quota.max_capacity(),
        "{quota:?}"
    );
    assert!(reference::RefPolicy::new(count, period_ns, quota.capacity()).is_some());
    assert_eq!(
        quota.initial(),
        initial.unwrap_or(quota.capacity()),
        "{quota:?}"
    );
    assert!(quota.initial() <= quota.capacity(), "{quota:?}");
}

/// A refusal names one of the documented fields, and its message names the field and the range.
fn check_refused(err: &QuotaError) {
    let field = err.field();
    assert!(
        ["count", "period", "rate", "capacity", "initial"].contains(&field),
        "{err:?} names {field}"
    );
    let text = err.to_string();
    assert!(
        text.contains(field),
        "{err:?}: {text:?} does not name {field}"
    );
    assert!(text.contains("must be"), "{err:?}: {text:?} gives no range");
}

/// Drives a bucket for `quota` at the edges of time and of the request sizes: nothing may panic.
fn exercise(quota: Quota, start: u64, reading: u64) {
    let bucket = TokenBucket::with_clock(quota, ManualClock::starting_at(Nanos::new(start)));
    let capacity = quota.capacity();
    for (n, at) in [
        (1, u64::MAX),
        (capacity, reading),
        (capacity, 0),
        (0, reading),
        (u64::MAX, reading),
        (1, start),
    ] {
        let _ = bucket.peek_n_at(n, Nanos::new(at));
        match bucket.try_acquire_n_at(n, Nanos::new(at)) {
            Ok(admitted) => {
                assert!(admitted.remaining() <= capacity);
                let _ = admitted.reset_after();
            }
            Err(AcquireError::Denied(denied)) => {
                assert!(denied.remaining() < n);
                let _ = (
                    denied.retry_after(),
                    denied.retry_at(),
                    denied.reset_after(),
                );
            }
            Err(AcquireError::InsufficientCapacity(e)) => {
                assert!(n > capacity);
                assert_eq!((e.requested, e.capacity), (n, capacity));
            }
            Err(other) => panic!("a token bucket has no other refusal: {other}"),
        }
        bucket.refund_at(u64::MAX, Nanos::new(at));
        assert!(bucket.remaining_at(Nanos::new(at)) <= capacity);
    }
}

/// `quota.with_capacity(c)`, refused exactly when the documented ranges say.
fn with_capacity(quota: &Quota, c: u64, initial: Option<u64>) -> Result<Quota, QuotaError> {
    let should_fail =
        c == 0 || c > quota.max_capacity() || initial.is_some_and(|tokens| tokens > c);
    let result = quota.with_capacity(c);
    assert_eq!(
        result.is_err(),
        should_fail,
        "{quota:?}.with_capacity({c}): {result:?}"
    );
    if let Ok(q) = result {
        assert_eq!(q.capacity(), c);
    }
    result
}

/// `quota.with_initial(t)`, refused exactly when `t` exceeds the capacity; records an accepted fill.
fn with_initial(quota: &Quota, t: u64, initial: &mut Option<u64>) -> Result<Quota, QuotaError> {
    let result = quota.with_initial(t);
    assert_eq!(
        result.is_err(),
        t > quota.capacity(),
        "{quota:?}.with_initial({t}): {result:?}"
    );
    if let Ok(q) = result {
        assert_eq!((q.initial(), q.capacity()), (t, quota.capacity()));
        *initial = Some(t);
    }
    result
}

fuzz_target!(|input: Input| {
    let mut quota = match input.ctor.build() {
        Ok(quota) => quota,
        Err(err) => {
            check_refused(&err);
            return;
        }
    };
    let mut initial = None;
    check_accepted(&quota, &input.ctor, initial);
    exercise(quota, input.start, input.reading);
    for &call in input.calls.iter().take(8) {
        let result = match call {
            Call::Capacity(c) => with_capacity(&quota, c, initial),
            Call::CapacityBelowMax(x) => with_capacity(
                &quota,
                quota.max_capacity().saturating_sub(u64::from(x)),
                initial,
            ),
            Call::Initial(t) => with_initial(&quota, t, &mut initial),
            Call::InitialBelowCapacity(x) => with_initial(
                &quota,
                quota.capacity().saturating_sub(u64::from(x)),
                &mut initial,
            ),
        };
        match result {
            Ok(q) => {
                assert_eq!(q.interval(), quota.interval());
                quota = q;
                check_accepted(&quota, &input.ctor, initial);
                exercise(quota, input.start, input.reading);
            }
            Err(err) => check_refused(&err),
        }
    }
});
