//! Drives a [`SlidingWindowCounter`] or a [`SubWindowCounter`] and the reference model through the
//! same operations and asserts that every answer is identical, to the nanosecond; after every
//! denial it also checks that `retry_at` is exact (denied one nanosecond before, admitted at it).
//!
//! Used by `tests/sliding_counter_model.rs` (proptest) and the fuzz crate's `sliding_counter_ops`
//! target (arbitrary). Both counters are driven as one `Box<dyn Limiter>`, through
//! [`crate::driver::limiter`].

use std::time::Duration;

use tollgate::window::{Alignment, SlidingWindowCounter, SubWindowCounter};
use tollgate::{Limiter, ManualClock, Nanos, Quota};

use crate::consts::MAX_USABLE_NS;
use crate::driver::limiter::{check, Call};
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

/// Requests to make, relative to `N` or raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// Nothing: a query.
    Zero,
    /// One.
    One,
    /// `n % 8`.
    Few(u8),
    /// `N`.
    Limit,
    /// `N + 1` (saturating): never admitted.
    AboveLimit,
    /// Exactly this.
    Raw(u64),
}

impl Amount {
    /// The amount for a limit of `limit`.
    pub fn of(self, limit: u64) -> u64 {
        match self {
            Amount::Zero => 0,
            Amount::One => 1,
            Amount::Few(n) => u64::from(n % 8),
            Amount::Limit => limit,
            Amount::AboveLimit => limit.saturating_add(1),
            Amount::Raw(n) => n,
        }
    }
}

/// A clock step: forwards or backwards, by nanoseconds or fractions of a sub-window, or a jump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Forwards by this many nanoseconds (saturating).
    Nanos(u64),
    /// Backwards by this many nanoseconds (to at least 0).
    BackNanos(u64),
    /// `num / den` sub-windows forwards.
    Subs {
        /// Numerator.
        num: u16,
        /// Denominator (0 counts as 1).
        den: u8,
    },
    /// `num / den` sub-windows backwards.
    BackSubs {
        /// Numerator.
        num: u16,
        /// Denominator (0 counts as 1).
        den: u8,
    },
    /// Whole windows forwards (an idle period of any length).
    Windows(u32),
    /// To exactly this reading.
    Set(u64),
    /// To `u64::MAX`.
    ToMax,
}

/// One operation. `clock: true` calls the method that reads the counter's clock instead of the
/// `_at` form (the clock always holds the same reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `try_acquire_n(_at)`.
    Acquire {
        /// How many.
        n: Amount,
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

/// The two counters, before alignment (`aligned` is not part of the `Limiter` trait).
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
    let at = retry_at.as_u64();
    if at > MAX_USABLE_NS || at == 0 {
        return;
    }
    let before = limiter.peek_n_at(n, Nanos::new(at - 1));
    assert!(
        before.is_err(),
        "admitted before retry_at {at}: {}",
        context()
    );
    assert!(matches!(
        model.acquire(at - 1, n, false),
        Outcome::Denied { .. }
    ));
    let on = limiter.peek_n_at(n, retry_at);
    assert!(on.is_ok(), "denied at retry_at {at}: {on:?}: {}", context());
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
    for (step, op) in ops.iter().enumerate() {
        let context = || format!("{spec:?}, start {start}, op {step} {op:?} at {now}");
        let (call, read) = match *op {
            Op::Acquire { n, clock } => (Call::Acquire(n.of(limit)), clock),
            Op::AcquireOne { clock } => (Call::AcquireOne, clock),
            Op::Peek { n, clock } => (Call::Peek(n.of(limit)), clock),
            Op::Remaining { clock } => (Call::Remaining, clock),
            Op::Time(_) => (Call::Remaining, false),
        };
        match *op {
            Op::Acquire { .. } | Op::AcquireOne { .. } => {
                let n = match call {
                    Call::Acquire(n) => n,
                    _ => 1,
                };
                let got = check(limiter.as_ref(), &mut model, call, now, read, &context);
                if let Outcome::Denied { retry_at_ns, .. } = got {
                    let retry_at = Nanos::new(retry_at_ns);
                    check_retry_at(&context, limiter.as_ref(), &mut model, n, retry_at);
                }
            }
            Op::Peek { .. } | Op::Remaining { .. } => {
                check(limiter.as_ref(), &mut model, call, now, read, &context);
            }
            Op::Time(step) => {
                now = match step {
                    Step::Nanos(d) => now.saturating_add(d),
                    Step::BackNanos(d) => now.saturating_sub(d),
                    Step::Subs { num, den } => now.saturating_add(fraction(sub_ns, num, den)),
                    Step::BackSubs { num, den } => now.saturating_sub(fraction(sub_ns, num, den)),
                    Step::Windows(m) => {
                        now.saturating_add(spec.period_ns.saturating_mul(u64::from(m)))
                    }
                    Step::Set(t) => t,
                    Step::ToMax => u64::MAX,
                };
                clock.set(Nanos::new(now));
            }
        }
    }
}

/// The sub-window length `spec` builds (1 if it is refused).
fn model_sub(spec: &Spec) -> u64 {
    let k = if spec.one_word { 1 } else { spec.k.max(1) };
    (spec.period_ns / k).max(1)
}

fn fraction(x: u64, num: u16, den: u8) -> u64 {
    let f = u128::from(x) * u128::from(num) / u128::from(den.max(1));
    u64::try_from(f).unwrap_or(u64::MAX)
}
