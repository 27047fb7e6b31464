//! Drives a [`TokenBucket`] and the reference model through the same operations and asserts that
//! every answer is identical, to the nanosecond.
//!
//! Used by `tests/token_bucket_model.rs` (proptest) and the fuzz crate's `token_bucket_ops` target
//! (arbitrary); each generates [`QuotaSpec`]s and [`Op`]s its own way. The quota specs, amounts and
//! clock steps here serve the meter and sharded drivers too; the calls any limiter answers go
//! through [`crate::driver::limiter`], and refunds are this driver's own.

use std::time::Duration;

use tollgate::{Clock, ManualClock, Nanos, Quota, QuotaError, TokenBucket};

use crate::consts::YEAR_NS;
use crate::driver::limiter::{check, Call};
use crate::outcome::observe;
use crate::reference::bucket::{self as reference, RefBucket, RefPolicy};
use crate::Outcome;

/// A rate as one of `Quota`'s constructors takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// `Quota::per_second(count)`.
    Second(u64),
    /// `Quota::per_minute(count)`.
    Minute(u64),
    /// `Quota::per_hour(count)`.
    Hour(u64),
    /// `Quota::per_day(count)`.
    Day(u64),
    /// `Quota::per_period(count, period)`.
    Period(u64, Duration),
}

impl Rate {
    /// Tokens per period.
    pub fn count(&self) -> u64 {
        match *self {
            Rate::Second(n) | Rate::Minute(n) | Rate::Hour(n) | Rate::Day(n) => n,
            Rate::Period(n, _) => n,
        }
    }

    /// The period, as the constructor's documentation gives it.
    pub fn period(&self) -> Duration {
        match *self {
            Rate::Second(_) => Duration::from_secs(1),
            Rate::Minute(_) => Duration::from_secs(60),
            Rate::Hour(_) => Duration::from_secs(3_600),
            Rate::Day(_) => Duration::from_secs(86_400),
            Rate::Period(_, period) => period,
        }
    }

    /// Calls the constructor.
    pub fn build(&self) -> Result<Quota, QuotaError> {
        match *self {
            Rate::Second(n) => Quota::per_second(n),
            Rate::Minute(n) => Quota::per_minute(n),
            Rate::Hour(n) => Quota::per_hour(n),
            Rate::Day(n) => Quota::per_day(n),
            Rate::Period(n, period) => Quota::per_period(n, period),
        }
    }
}

/// A quota as built through the public API: a rate, then optionally `with_capacity` and
/// `with_initial`, in either order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSpec {
    /// The constructor and its arguments.
    pub rate: Rate,
    /// The argument of `with_capacity`, if it is called.
    pub capacity: Option<u64>,
    /// The argument of `with_initial`, if it is called.
    pub initial: Option<u64>,
    /// Whether `with_initial` is called before `with_capacity` (when both are).
    pub initial_first: bool,
}

impl QuotaSpec {
    /// Builds the quota through the crate's API.
    pub fn build(&self) -> Result<Quota, QuotaError> {
        let mut quota = self.rate.build()?;
        if self.initial_first {
            if let Some(tokens) = self.initial {
                quota = quota.with_initial(tokens)?;
            }
        }
        if let Some(capacity) = self.capacity {
            quota = quota.with_capacity(capacity)?;
        }
        if !self.initial_first {
            if let Some(tokens) = self.initial {
                quota = quota.with_initial(tokens)?;
            }
        }
        Ok(quota)
    }

    /// What the documented ranges say `build` returns: the model's constants and the initial fill,
    /// or the field of the first error, following the order of the calls.
    pub fn expected(&self) -> Result<(RefPolicy, u64), &'static str> {
        let count = self.rate.count();
        let period_ns = self.rate.period().as_nanos();
        if count == 0 {
            return Err("count");
        }
        if period_ns == 0 {
            return Err("period");
        }
        let Some(interval_ns) = reference::interval_ns(count, period_ns) else {
            return Err("rate");
        };
        let max = reference::max_capacity(interval_ns);
        // The constructor's capacity is the count.
        if count > max {
            return Err("capacity");
        }
        let mut capacity = count;
        let mut initial = None;
        let set_initial = |capacity: u64, initial: &mut Option<u64>| {
            if let Some(tokens) = self.initial {
                if tokens > capacity {
                    return Err("initial");
                }
                *initial = Some(tokens);
            }
            Ok(())
        };
        if self.initial_first {
            set_initial(capacity, &mut initial)?;
        }
        if let Some(c) = self.capacity {
            if c == 0 || c > max {
                return Err("capacity");
            }
            if initial.is_some_and(|tokens| tokens > c) {
                return Err("initial");
            }
            capacity = c;
        }
        if !self.initial_first {
            set_initial(capacity, &mut initial)?;
        }
        let policy = RefPolicy::new(count, period_ns, capacity).expect("a capacity in range");
        Ok((policy, initial.unwrap_or(capacity)))
    }
}

/// A number of tokens, chosen relative to the capacity `C`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// 0: a query.
    Zero,
    /// 1.
    One,
    /// A few: `min(C, x)`.
    Few(u8),
    /// `C`.
    Capacity,
    /// `C + 1`: never possible.
    AboveCapacity,
    /// `max(1, C × x / 65535)`.
    Fraction(u16),
    /// Exactly this many.
    Raw(u64),
}

impl Amount {
    /// The number of tokens for a capacity of `capacity`.
    pub fn resolve(self, capacity: u64) -> u64 {
        match self {
            Amount::Zero => 0,
            Amount::One => 1,
            Amount::Few(x) => capacity.min(u64::from(x)),
            Amount::Capacity => capacity,
            Amount::AboveCapacity => capacity.saturating_add(1),
            Amount::Fraction(x) => {
                let part = u128::from(capacity) * u128::from(x) / u128::from(u16::MAX);
                u64::try_from(part).unwrap_or(u64::MAX).max(1)
            }
            Amount::Raw(n) => n,
        }
    }
}

/// A change of the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Forward by this many nanoseconds (saturating).
    Nanos(u64),
    /// Forward by `num / den` intervals (den of 0 counts as 1).
    Intervals {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u8,
    },
    /// Forward by this many years (saturating).
    Years(u8),
    /// To `u64::MAX`.
    ToMax,
    /// Back by this many nanoseconds (to at least 0).
    BackNanos(u64),
    /// Back by `num / den` intervals.
    BackIntervals {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u8,
    },
    /// To exactly this reading, forwards or backwards.
    Set(u64),
}

impl Step {
    /// Applies the step to `clock`, whose reading is `now`, for a quota whose interval is
    /// `interval_ns`; returns the new reading.
    ///
    /// ```
    /// use testkit::driver::bucket::Step;
    /// use tollgate::{Clock, ManualClock, Nanos};
    /// let clock = ManualClock::new();
    /// assert_eq!(Step::Intervals { num: 3, den: 2 }.apply(&clock, 0, 10), 15);
    /// assert_eq!(Step::BackNanos(20).apply(&clock, 15, 10), 0);
    /// assert_eq!(clock.now(), Nanos::new(0));
    /// ```
    pub fn apply(self, clock: &ManualClock, now: u64, interval_ns: u64) -> u64 {
        let forward = |ns: u64| {
            clock.advance(Duration::from_nanos(ns));
            now.saturating_add(ns)
        };
        let set = |t: u64| {
            clock.set(Nanos::new(t));
            t
        };
        match self {
            Step::Nanos(ns) => forward(ns),
            Step::Intervals { num, den } => forward(Step::intervals(num, den, interval_ns)),
            Step::Years(y) => forward(u64::from(y).saturating_mul(YEAR_NS)),
            Step::ToMax => forward(u64::MAX),
            Step::BackNanos(ns) => set(now.saturating_sub(ns)),
            Step::BackIntervals { num, den } => {
                set(now.saturating_sub(Step::intervals(num, den, interval_ns)))
            }
            Step::Set(t) => set(t),
        }
    }

    /// `num / den` intervals of `interval_ns`, in nanoseconds, saturating.
    fn intervals(num: u32, den: u8, interval_ns: u64) -> u64 {
        let ns = u128::from(num) * u128::from(interval_ns) / u128::from(den.max(1));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

/// One operation on the bucket. `clock: true` uses the method that reads the bucket's clock,
/// `false` the `_at` form with the same reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `try_acquire_n(_at)`.
    Acquire {
        /// Tokens asked for.
        n: Amount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `try_acquire(_at)`: one token.
    AcquireOne {
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `peek_n(_at)`.
    Peek {
        /// Tokens asked about.
        n: Amount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `refund(_at)`.
    Refund {
        /// Tokens given back.
        n: Amount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `remaining(_at)`.
    Remaining {
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// Moves the clock.
    Time(Step),
}

/// Builds the quota both ways and checks they agree. Returns the quota and the model's constants
/// and initial fill when it is valid, `None` when both refuse it.
pub fn check_quota(spec: &QuotaSpec) -> Option<(Quota, RefPolicy, u64)> {
    let built = spec.build();
    match (built, spec.expected()) {
        (Ok(quota), Ok((policy, initial))) => {
            assert_eq!(quota.count(), spec.rate.count(), "count of {spec:?}");
            // The period is reported as given, however long.
            assert_eq!(quota.period(), spec.rate.period(), "period of {spec:?}");
            assert_eq!(
                quota.interval(),
                Duration::from_nanos(policy.interval_ns),
                "interval of {spec:?}"
            );
            assert_eq!(quota.capacity(), policy.capacity, "capacity of {spec:?}");
            assert_eq!(quota.initial(), initial, "initial fill of {spec:?}");
            assert_eq!(
                quota.max_capacity(),
                reference::max_capacity(policy.interval_ns),
                "max_capacity of {spec:?}"
            );
            Some((quota, policy, initial))
        }
        (Err(err), Err(field)) => {
            assert_eq!(err.field(), field, "error {err:?} for {spec:?}");
            None
        }
        (built, expected) => {
            panic!("{spec:?}: the crate built {built:?}, the documented ranges say {expected:?}")
        }
    }
}

/// Runs `ops` on a bucket for `spec` whose clock starts at `start`, comparing every answer, and the
/// tokens remaining after every operation, with the model.
pub fn run(spec: &QuotaSpec, start: u64, ops: &[Op]) {
    let Some((quota, policy, initial)) = check_quota(spec) else {
        return;
    };
    let clock = ManualClock::starting_at(Nanos::new(start));
    let bucket = TokenBucket::with_clock(quota, clock.clone());
    let mut model = RefBucket::new(policy, initial, start).expect("an initial fill in range");
    let capacity = policy.capacity;
    let mut now = start;
    assert_eq!(
        bucket.remaining_at(Nanos::new(now)),
        model.remaining(now),
        "remaining at the start, {spec:?} from {start}"
    );
    for (i, &op) in ops.iter().enumerate() {
        let at = Nanos::new(now);
        // Copies of the state before the operation, for the messages.
        let context =
            move || format!("op {i} {op:?} at {now} ns, {spec:?} from {start}, model {model:?}");
        match op {
            Op::Acquire { n, clock: read } => {
                let call = Call::Acquire(n.resolve(capacity));
                check(&bucket, &mut model, call, now, read, &context);
            }
            Op::AcquireOne { clock: read } => {
                check(&bucket, &mut model, Call::AcquireOne, now, read, &context);
            }
            Op::Peek { n, clock: read } => {
                let call = Call::Peek(n.resolve(capacity));
                check(&bucket, &mut model, call, now, read, &context);
            }
            Op::Remaining { clock: read } => {
                check(&bucket, &mut model, Call::Remaining, now, read, &context);
            }
            Op::Refund { n, clock: read } => {
                let n = n.resolve(capacity);
                if read {
                    bucket.refund(n);
                } else {
                    bucket.refund_at(n, at);
                }
                model.refund(n, now);
            }
            Op::Time(step) => {
                now = step.apply(&clock, now, policy.interval_ns);
                assert_eq!(
                    bucket.clock().now(),
                    Nanos::new(now),
                    "clock: {}",
                    context()
                );
            }
        }
        assert_eq!(
            bucket.remaining_at(Nanos::new(now)),
            model.remaining(now),
            "remaining after {}",
            context()
        );
    }
}

/// Checks the rate bound: starting at `start` with the quota's initial fill (at most `C`), the
/// tokens admitted to requests read at `start + offset` for each `(offset, amount)`, in any order and
/// with no refunds, number at most `C + floor((t1 - t0) / I)`, with `t0` the start and `t1` the
/// latest reading in nanoseconds (clamped to `MAX_USABLE`) and `I` the interval in nanoseconds
/// (rounded up to whole units).
///
/// Every answer is also compared with the model. Requests above the capacity are errors and admit
/// nothing; requests for 0 tokens admit nothing.
pub fn check_window(spec: &QuotaSpec, start: u64, requests: &[(u64, Amount)]) {
    let Some((quota, policy, initial)) = check_quota(spec) else {
        return;
    };
    let bucket = TokenBucket::with_clock(quota, ManualClock::starting_at(Nanos::new(start)));
    let mut model = RefBucket::new(policy, initial, start).expect("an initial fill in range");
    let mut admitted: u128 = 0;
    let mut latest = start;
    for &(offset, amount) in requests {
        let at = start.saturating_add(offset);
        latest = latest.max(at);
        let n = amount.resolve(policy.capacity);
        let outcome = observe(bucket.try_acquire_n_at(n, Nanos::new(at)));
        assert_eq!(
            outcome,
            model.acquire(n, at).representable(),
            "acquire {n} at {at}, {spec:?}"
        );
        if matches!(outcome, Outcome::Admitted { .. }) {
            admitted += u128::from(n);
        }
    }
    // In nanoseconds, as the crate promises it: one token per interval rounded up to whole units.
    let t0 = i128::from(policy.reading(start).ns);
    let t1 = i128::from(policy.reading(latest).ns);
    let interval_ns = policy.interval << policy.shift;
    let bound = i128::from(policy.capacity) + (t1 - t0) / interval_ns;
    assert!(
        i128::try_from(admitted).expect("small") <= bound,
        "{admitted} tokens admitted in [{start}, {latest}], bound {bound}: {spec:?}, {requests:?}"
    );
}
