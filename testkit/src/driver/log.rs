//! Drives a [`SlidingWindowLog`] and the reference model ([`crate::reference::log`]) through the same
//! operations and asserts that every answer is identical, to the nanosecond.
//!
//! Used by `tests/sliding_log_model.rs` (proptest) and the fuzz crate's `sliding_log_ops` target
//! (arbitrary); each generates [`LogSpec`]s and [`LogOp`]s its own way. The calls any limiter
//! answers go through [`crate::driver::limiter`].

use std::time::Duration;

use tollgate::window::SlidingWindowLog;
use tollgate::{Clock, Denied, ManualClock, Nanos, Quota, QuotaError};

use crate::consts::MAX_USABLE_NS as MAX_USABLE;
use crate::driver::limiter::{check, Call};
use crate::reference::log::{RefLog, MAX_LOG};
use crate::Outcome;

/// A quota as a window limiter gets it: `per_period(count, period)`, then optionally
/// `with_capacity` and `with_initial` (both must leave it at `count` for a window limiter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogSpec {
    /// N.
    pub count: u64,
    /// W.
    pub period: Duration,
    /// The argument of `with_capacity`, if it is called.
    pub capacity: Option<u64>,
    /// The argument of `with_initial`, if it is called (after `with_capacity`).
    pub initial: Option<u64>,
}

impl LogSpec {
    /// Builds the quota through the crate's API.
    pub fn build(&self) -> Result<Quota, QuotaError> {
        let mut quota = Quota::per_period(self.count, self.period)?;
        if let Some(c) = self.capacity {
            quota = quota.with_capacity(c)?;
        }
        if let Some(i) = self.initial {
            quota = quota.with_initial(i)?;
        }
        Ok(quota)
    }

    /// What the documented rules say a log does with a quota that built: `(N, W)`, or the field of
    /// the first rule broken (capacity, initial fill, period, then count).
    pub fn expected(&self) -> Result<(u64, u64), &'static str> {
        let capacity = self.capacity.unwrap_or(self.count);
        if capacity != self.count {
            return Err("capacity");
        }
        if self.initial.unwrap_or(capacity) != self.count {
            return Err("initial");
        }
        let window = match u64::try_from(self.period.as_nanos()) {
            Ok(w) if w <= MAX_USABLE => w,
            _ => return Err("period"),
        };
        if self.count > MAX_LOG {
            return Err("count");
        }
        Ok((self.count, window))
    }
}

/// A number of admissions, chosen relative to N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogAmount {
    /// 0: a query.
    Zero,
    /// 1.
    One,
    /// `min(N, x)`.
    Few(u8),
    /// N.
    Count,
    /// N + 1: never possible.
    AboveCount,
    /// Exactly this many.
    Raw(u64),
}

impl LogAmount {
    /// The number for a log of `count`.
    pub fn resolve(self, count: u64) -> u64 {
        match self {
            LogAmount::Zero => 0,
            LogAmount::One => 1,
            LogAmount::Few(x) => count.min(u64::from(x)),
            LogAmount::Count => count,
            LogAmount::AboveCount => count + 1,
            LogAmount::Raw(n) => n,
        }
    }
}

/// A change of the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStep {
    /// Forward by this many nanoseconds (saturating).
    Nanos(u64),
    /// Forward by `num / den` windows (den 0 counts as 1), saturating: up to millions of windows.
    Windows {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u8,
    },
    /// To `u64::MAX`.
    ToMax,
    /// Back by this many nanoseconds (to at least 0).
    BackNanos(u64),
    /// Back by `num / den` windows.
    BackWindows {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u8,
    },
    /// To exactly this reading.
    Set(u64),
    /// To the `retry_at` of the latest denial (one nanosecond before it when `early`), or nowhere
    /// when there was none: the boundary where an admission leaves the window.
    LastRetry {
        /// One nanosecond early.
        early: bool,
    },
}

fn windows(num: u32, den: u8, window: u64) -> u64 {
    let ns = u128::from(num) * u128::from(window) / u128::from(den.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// One operation. `clock: true` uses the method that reads the log's clock, `false` the `_at` form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOp {
    /// `try_acquire_n(_at)`.
    Acquire {
        /// How many.
        n: LogAmount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `try_acquire(_at)`.
    AcquireOne {
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `peek_n(_at)`.
    Peek {
        /// How many.
        n: LogAmount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `remaining(_at)`.
    Remaining {
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// Moves the clock.
    Time(LogStep),
}

/// Builds the log both ways and checks they agree. Returns the log, its clock and the model when
/// the quota is one a log accepts; `None` when both refuse it (or the quota itself does not build:
/// `Quota`'s own validation is tested elsewhere).
pub fn check_spec(
    spec: &LogSpec,
    start: u64,
) -> Option<(SlidingWindowLog<ManualClock>, ManualClock, RefLog)> {
    let quota = spec.build().ok()?;
    let clock = ManualClock::starting_at(Nanos::new(start));
    match (
        SlidingWindowLog::with_clock(quota, clock.clone()),
        spec.expected(),
    ) {
        (Ok(log), Ok((count, window))) => {
            assert_eq!(log.quota(), &quota);
            Some((log, clock, RefLog::new(count, window)))
        }
        (Err(err), Err(field)) => {
            assert_eq!(err.field(), field, "error {err:?} for {spec:?}");
            if field == "count" {
                assert_eq!(
                    err,
                    QuotaError::LogTooLong {
                        count: spec.count,
                        max: MAX_LOG
                    }
                );
            }
            None
        }
        (built, expected) => panic!(
            "{spec:?}: the crate built {:?}, the documented rules say {expected:?}",
            built.map(|_| "a log")
        ),
    }
}

/// Runs `ops` on a log for `spec` whose clock starts at `start`, comparing every answer, and what
/// is left after every operation, with the model.
pub fn run(spec: &LogSpec, start: u64, ops: &[LogOp]) {
    let Some((log, clock, mut model)) = check_spec(spec, start) else {
        return;
    };
    let count = model.count;
    let window = model.window;
    let mut now = start;
    let last_retry = std::cell::Cell::new(None::<u64>);
    let note = |outcome: Outcome| {
        if let Outcome::Denied { retry_at_ns, .. } = outcome {
            last_retry.set(Some(retry_at_ns));
        }
        outcome
    };
    for (i, &op) in ops.iter().enumerate() {
        let context = move || format!("op {i} {op:?} at {now} ns, {spec:?} from {start}");
        match op {
            LogOp::Acquire { n, clock: read } => {
                let call = Call::Acquire(n.resolve(count));
                note(check(&log, &mut model, call, now, read, &context));
            }
            LogOp::AcquireOne { clock: read } => {
                note(check(
                    &log,
                    &mut model,
                    Call::AcquireOne,
                    now,
                    read,
                    &context,
                ));
            }
            LogOp::Peek { n, clock: read } => {
                let call = Call::Peek(n.resolve(count));
                note(check(&log, &mut model, call, now, read, &context));
            }
            LogOp::Remaining { clock: read } => {
                check(&log, &mut model, Call::Remaining, now, read, &context);
            }
            LogOp::Time(step) => {
                let before = now;
                let forward = |ns: u64| {
                    clock.advance(Duration::from_nanos(ns));
                    before.saturating_add(ns)
                };
                let set = |t: u64| {
                    clock.set(Nanos::new(t));
                    t
                };
                now = match step {
                    LogStep::Nanos(ns) => forward(ns),
                    LogStep::Windows { num, den } => forward(windows(num, den, window)),
                    LogStep::ToMax => forward(u64::MAX),
                    LogStep::BackNanos(ns) => set(now.saturating_sub(ns)),
                    LogStep::BackWindows { num, den } => {
                        set(now.saturating_sub(windows(num, den, window)))
                    }
                    LogStep::Set(t) => set(t),
                    LogStep::LastRetry { early } => match last_retry.get() {
                        Some(t) => set(t.saturating_sub(u64::from(early))),
                        None => now,
                    },
                };
                assert_eq!(log.clock().now(), Nanos::new(now), "clock: {}", context());
            }
        }
        assert_eq!(
            log.remaining_at(Nanos::new(now)),
            model.remaining(now),
            "remaining after {}",
            context()
        );
    }
}

/// Checks a denial's `retry_at` is exact: at that reading the same request is admitted (a peek),
/// one nanosecond before it is not, unless it lies beyond the readings the crate uses.
pub fn check_retry_exact(log: &SlidingWindowLog<ManualClock>, n: u64, denied: &Denied) {
    let at = denied.retry_at();
    if at.as_u64() <= MAX_USABLE {
        assert!(log.peek_n_at(n, at).is_ok(), "{n} not admitted at {at:?}");
        assert!(
            log.peek_n_at(n, Nanos::new(at.as_u64() - 1)).is_err(),
            "{n} admitted before {at:?}"
        );
    }
}
