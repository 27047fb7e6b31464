//! Drives a [`SlidingWindowLog`] and the reference model ([`crate::reference::log`]) through the same
//! operations and asserts that every answer is identical, to the nanosecond.
//!
//! Used by `tests/sliding_log_model.rs` (proptest) and the fuzz crate's `sliding_log_ops` target
//! (arbitrary); each generates [`LogSpec`]s and [`LogOp`]s its own way. The calls any limiter
//! answers go through [`crate::driver::limiter`]; the clock moves by [`Step`]s measured in windows.

use std::time::Duration;

use tollgate::window::SlidingWindowLog;
use tollgate::{Clock, ManualClock, Nanos, Quota, QuotaError};

use crate::consts::MAX_USABLE_NS as MAX_USABLE;
use crate::driver::limiter::{check, Call, Request};
use crate::driver::step::Step;
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

/// One operation: a call every limiter answers, a step of the clock in windows, or the log's own
/// jump to where an admission leaves the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOp {
    /// `try_acquire(_n)`, `peek_n` or `remaining`, through [`crate::driver::limiter::check`].
    Call(Request),
    /// Moves the clock.
    Time(Step),
    /// Sets the clock to the `retry_at` of the latest denial (one nanosecond before it when
    /// `early`), or leaves it when there was none: the boundary where an admission leaves the
    /// window.
    LastRetry {
        /// One nanosecond early.
        early: bool,
    },
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
            assert_eq!(log.quota(), quota);
            Some((log, clock, RefLog::new(count, window)))
        }
        (Err(err), Err(field)) => {
            assert_eq!(err.field(), field, "error {err:?} for {spec:?}");
            if field == "count" {
                let QuotaError::Algorithm(limit) = err else {
                    panic!("{spec:?}: {err:?} is not the log's own limit");
                };
                assert_eq!(
                    (limit.algorithm(), limit.got(), limit.bound()),
                    ("sliding window log", spec.count, MAX_LOG)
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
    // The `retry_at` of the latest denial, for `LastRetry`.
    let mut last_retry = None::<u64>;
    for (i, &op) in ops.iter().enumerate() {
        let context = move || format!("op {i} {op:?} at {now} ns, {spec:?} from {start}");
        match op {
            LogOp::Call(request) => {
                let (_, got) = request.check(&log, &mut model, count, now, &context);
                if let Outcome::Denied { retry_at_ns, .. } = got {
                    last_retry = Some(retry_at_ns);
                }
            }
            LogOp::Time(step) => now = step.apply(&clock, now, window),
            LogOp::LastRetry { early } => {
                if let Some(t) = last_retry {
                    now = t.saturating_sub(u64::from(early));
                    clock.set(Nanos::new(now));
                }
            }
        }
        assert_eq!(log.clock().now(), Nanos::new(now), "clock: {}", context());
        let after = || format!("after {}", context());
        check(&log, &mut model, Call::Remaining, now, false, &after);
    }
}
