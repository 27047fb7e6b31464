//! Drives a [`SlidingWindowCounter`] or a [`SubWindowCounter`] and the reference model through the
//! same operations and asserts that every answer is identical, to the nanosecond; after every
//! denial it also checks that `retry_at` is exact (denied one nanosecond before, admitted at it).
//!
//! Used by `tests/sliding_counter_model.rs` (proptest) and the fuzz crate's `sliding_counter_ops`
//! target (arbitrary). Both counters are driven as one `Box<dyn Limiter>`, through
//! [`crate::driver::limiter`]; the clock moves by [`Step`]s measured in sub-windows.

use std::time::Duration;

use tollgate::window::{Alignment, SlidingWindowCounter, SubWindowCounter};
use tollgate::{Limiter, ManualClock, Nanos, Quota};

use crate::consts::MAX_USABLE_NS;
use crate::driver::limiter::{check_retry_exact, Request};
use crate::driver::step::Step;
use crate::reference::counter::{self as counter_reference, RefCounter};
use crate::Outcome;

/// A counter as built through the public API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// `N`.
    pub count: u64,
    /// `W`, in nanoseconds.
    pub period_ns: u64,
    /// `k`; ignored (taken as 1) for the one-word counter.
    pub k: u64,
    /// `Alignment::Offset` in nanoseconds, if aligned.
    pub offset: Option<u64>,
    /// Build a [`SlidingWindowCounter`] rather than a [`SubWindowCounter`].
    pub one_word: bool,
}

/// One operation: a call every limiter answers, or a step of the clock in sub-windows (windows for
/// the one-word counter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `try_acquire(_n)`, `peek_n` or `remaining`, through [`crate::driver::limiter::check`]; a
    /// denied acquisition's `retry_at` is then checked to be exact.
    Call(Request),
    /// Moves the clock.
    Time(Step),
}

/// Builds the counter `spec` describes, checking the constructor against the documented ranges;
/// `None` when the quota itself, or the counter, is refused (as expected).
fn build(spec: &Spec, start: u64) -> Option<(Box<dyn Limiter>, ManualClock, RefCounter)> {
    let quota = Quota::per_period(spec.count, Duration::from_nanos(spec.period_ns)).ok()?;
    let k = if spec.one_word { 1 } else { spec.k };
    let expected = counter_reference::expected(spec.count, u128::from(spec.period_ns), k);
    let clock = ManualClock::starting_at(Nanos::new(start));
    let built = if spec.one_word {
        SlidingWindowCounter::with_clock(quota, clock.clone()).map(One)
    } else {
        SubWindowCounter::with_clock(quota, k, clock.clone()).map(Sub)
    };
    let (limiter, w) = match (built, expected) {
        (Ok(limiter), Ok(w)) => (limiter, w),
        (Err(err), Err(field)) => {
            assert_eq!(err.field(), field, "{spec:?}: {err}");
            return None;
        }
        (Ok(_), Err(field)) => panic!("{spec:?}: built, expected an error in {field}"),
        (Err(err), Ok(_)) => panic!("{spec:?}: refused with {err}, expected to build"),
    };
    let (limiter, shift) = match spec.offset {
        None => (limiter, 0),
        Some(offset) => {
            let alignment = Alignment::Offset(Duration::from_nanos(offset));
            let limiter = match limiter {
                One(l) => One(l.aligned(alignment)),
                Sub(l) => Sub(l.aligned(alignment)),
            };
            (limiter, (w - offset % w) % w)
        }
    };
    let limiter: Box<dyn Limiter> = match limiter {
        One(l) => Box::new(l),
        Sub(l) => Box::new(l),
    };
    Some((limiter, clock, RefCounter::new(spec.count, w, k, shift)))
}

/// The two counters, before alignment (`aligned` is not part of the `Limiter` trait). Built once
/// per run and moved once: the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum Built {
    One(SlidingWindowCounter<ManualClock>),
    Sub(SubWindowCounter<ManualClock>),
}
use Built::{One, Sub};

/// Checks that `n` is denied one nanosecond before `retry_at` and admitted at it, on both.
fn check_retry_at(
    context: &dyn Fn() -> String,
    limiter: &dyn Limiter,
    model: &mut RefCounter,
    n: u64,
    retry_at: Nanos,
) {
    check_retry_exact(limiter, n, retry_at, context);
    let at = retry_at.as_u64();
    if at > MAX_USABLE_NS || at == 0 {
        return;
    }
    // The model agrees (its peek: no write).
    assert!(matches!(
        model.acquire(at - 1, n, false),
        Outcome::Denied { .. }
    ));
    assert!(matches!(
        model.acquire(at, n, false),
        Outcome::Admitted { .. }
    ));
}

/// Runs `ops` on the counter `spec` describes, starting at reading `start`, against the model.
pub fn run(spec: &Spec, start: u64, ops: &[Op]) {
    let Some((limiter, clock, mut model)) = build(spec, start) else {
        return;
    };
    let limit = spec.count;
    let sub_ns = model_sub(spec);
    let mut now = start;
    for (i, op) in ops.iter().enumerate() {
        let context = || format!("{spec:?}, start {start}, op {i} {op:?} at {now}");
        match *op {
            Op::Call(request) => {
                let (call, got) = request.check(limiter.as_ref(), &mut model, limit, now, &context);
                if let (true, Outcome::Denied { retry_at_ns, .. }) = (call.takes(), got) {
                    let retry_at = Nanos::new(retry_at_ns);
                    check_retry_at(&context, limiter.as_ref(), &mut model, call.n(), retry_at);
                }
            }
            Op::Time(step) => now = step.apply(&clock, now, sub_ns),
        }
    }
}

/// The sub-window length `spec` builds (1 if it is refused).
fn model_sub(spec: &Spec) -> u64 {
    let k = if spec.one_word { 1 } else { spec.k.max(1) };
    (spec.period_ns / k).max(1)
}
