//! Drives a [`SlidingWindowCounter`] or a [`SubWindowCounter`] and the reference model through the
//! same operations and asserts that every answer is identical, to the nanosecond; after every
//! denial it also checks that `retry_at` is exact (denied one nanosecond before, admitted at it).
//!
//! Shared by `tests/sliding_counter_model.rs` (proptest) and the fuzz crate's `sliding_counter_ops`
//! target (arbitrary): both include this file next to `counter_reference.rs`, as
//! `mod counter_driver` and `mod counter_reference` at their crate root.

use std::time::Duration;

use tollgate::window::{Alignment, SlidingWindowCounter, SubWindowCounter};
use tollgate::{AcquireError, Admitted, Denied, ManualClock, Nanos, Quota};

use crate::counter_reference::{self, RefCounter, RefOutcome, MAX_USABLE_NS};

/// A counter as built through the public API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spec {
    /// `N`.
    pub(crate) count: u64,
    /// `W`, in nanoseconds.
    pub(crate) period_ns: u64,
    /// `k`; ignored (taken as 1) for the one-word counter.
    pub(crate) k: u64,
    /// `Alignment::Offset` in nanoseconds, if aligned.
    pub(crate) offset: Option<u64>,
    /// Build a [`SlidingWindowCounter`] rather than a [`SubWindowCounter`].
    pub(crate) one_word: bool,
}

/// Requests to make, relative to `N` or raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Amount {
    Zero,
    One,
    Few(u8),
    Limit,
    AboveLimit,
    Raw(u64),
}

impl Amount {
    pub(crate) fn of(self, limit: u64) -> u64 {
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
pub(crate) enum Step {
    Nanos(u64),
    BackNanos(u64),
    /// `num / den` sub-windows forwards.
    Subs {
        num: u16,
        den: u8,
    },
    /// `num / den` sub-windows backwards.
    BackSubs {
        num: u16,
        den: u8,
    },
    /// Whole windows forwards (an idle period of any length).
    Windows(u32),
    Set(u64),
    ToMax,
}

/// One operation. `clock: true` calls the method that reads the counter's clock instead of the
/// `_at` form (the clock always holds the same reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Acquire { n: Amount, clock: bool },
    AcquireOne { clock: bool },
    Peek { n: Amount, clock: bool },
    Remaining { clock: bool },
    Time(Step),
}

enum Limiter {
    One(SlidingWindowCounter<ManualClock>),
    Sub(SubWindowCounter<ManualClock>),
}

impl Limiter {
    fn clock(&self) -> &ManualClock {
        match self {
            Limiter::One(l) => l.clock(),
            Limiter::Sub(l) => l.clock(),
        }
    }

    fn acquire_n(&self, n: u64, now: Nanos, clock: bool) -> Result<Admitted, AcquireError> {
        match (self, clock) {
            (Limiter::One(l), true) => l.try_acquire_n(n),
            (Limiter::One(l), false) => l.try_acquire_n_at(n, now),
            (Limiter::Sub(l), true) => l.try_acquire_n(n),
            (Limiter::Sub(l), false) => l.try_acquire_n_at(n, now),
        }
    }

    fn acquire_one(&self, now: Nanos, clock: bool) -> Result<Admitted, Denied> {
        match (self, clock) {
            (Limiter::One(l), true) => l.try_acquire(),
            (Limiter::One(l), false) => l.try_acquire_at(now),
            (Limiter::Sub(l), true) => l.try_acquire(),
            (Limiter::Sub(l), false) => l.try_acquire_at(now),
        }
    }

    fn peek_n(&self, n: u64, now: Nanos, clock: bool) -> Result<Admitted, AcquireError> {
        match (self, clock) {
            (Limiter::One(l), true) => l.peek_n(n),
            (Limiter::One(l), false) => l.peek_n_at(n, now),
            (Limiter::Sub(l), true) => l.peek_n(n),
            (Limiter::Sub(l), false) => l.peek_n_at(n, now),
        }
    }

    fn remaining(&self, now: Nanos, clock: bool) -> u64 {
        match (self, clock) {
            (Limiter::One(l), true) => l.remaining(),
            (Limiter::One(l), false) => l.remaining_at(now),
            (Limiter::Sub(l), true) => l.remaining(),
            (Limiter::Sub(l), false) => l.remaining_at(now),
        }
    }
}

fn duration(nanos: u128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Builds the counter `spec` describes, checking the constructor against the documented ranges;
/// `None` when the quota itself, or the counter, is refused (as expected).
fn build(spec: &Spec, start: u64) -> Option<(Limiter, RefCounter)> {
    let quota = Quota::per_period(spec.count, Duration::from_nanos(spec.period_ns)).ok()?;
    let k = if spec.one_word { 1 } else { spec.k };
    let expected = counter_reference::expected(spec.count, u128::from(spec.period_ns), k);
    let clock = ManualClock::starting_at(Nanos::new(start));
    let built = if spec.one_word {
        SlidingWindowCounter::with_clock(quota, clock).map(Limiter::One)
    } else {
        SubWindowCounter::with_clock(quota, k, clock).map(Limiter::Sub)
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
                Limiter::One(l) => Limiter::One(l.aligned(alignment)),
                Limiter::Sub(l) => Limiter::Sub(l.aligned(alignment)),
            };
            (limiter, (w - offset % w) % w)
        }
    };
    Some((limiter, RefCounter::new(spec.count, w, k, shift)))
}

fn check_admitted(context: &dyn Fn() -> String, got: &Admitted, remaining: u64, reset: u128) {
    assert_eq!(got.remaining(), remaining, "remaining: {}", context());
    assert_eq!(
        got.reset_after(),
        duration(reset),
        "reset_after: {}",
        context()
    );
}

fn check_denied(
    context: &dyn Fn() -> String,
    got: &Denied,
    remaining: u64,
    retry: u128,
    reset: u128,
) {
    assert_eq!(got.remaining(), remaining, "remaining: {}", context());
    assert_eq!(
        got.retry_after(),
        duration(retry),
        "retry_after: {}",
        context()
    );
    assert_eq!(
        got.reset_after(),
        duration(reset),
        "reset_after: {}",
        context()
    );
}

/// Checks that `n` is denied one nanosecond before `retry_at` and admitted at it, on both.
fn check_retry_at(
    context: &dyn Fn() -> String,
    limiter: &Limiter,
    model: &mut RefCounter,
    n: u64,
    retry_at: Nanos,
) {
    let at = retry_at.as_u64();
    if at > MAX_USABLE_NS || at == 0 {
        return;
    }
    let before = limiter.peek_n(n, Nanos::new(at - 1), false);
    assert!(
        before.is_err(),
        "admitted before retry_at {at}: {}",
        context()
    );
    assert!(matches!(
        model.acquire(at - 1, n, false),
        RefOutcome::Denied { .. }
    ));
    let on = limiter.peek_n(n, retry_at, false);
    assert!(on.is_ok(), "denied at retry_at {at}: {on:?}: {}", context());
    assert!(matches!(
        model.acquire(at, n, false),
        RefOutcome::Admitted { .. }
    ));
}

fn compare(
    context: &dyn Fn() -> String,
    got: Result<Admitted, AcquireError>,
    want: RefOutcome,
    (n, limit): (u64, u64),
) -> Option<Nanos> {
    match (got, want) {
        (Ok(a), RefOutcome::Admitted { remaining, reset }) => {
            check_admitted(context, &a, remaining, reset);
            None
        }
        (
            Err(AcquireError::Denied(d)),
            RefOutcome::Denied {
                remaining,
                retry,
                reset,
            },
        ) => {
            check_denied(context, &d, remaining, retry, reset);
            Some(d.retry_at())
        }
        (Err(AcquireError::InsufficientCapacity(e)), RefOutcome::Insufficient) => {
            assert_eq!((e.requested, e.capacity), (n, limit), "{}", context());
            None
        }
        (got, want) => panic!("got {got:?}, model says {want:?}: {}", context()),
    }
}

/// Runs `ops` on the counter `spec` describes, starting at reading `start`, against the model.
pub(crate) fn run(spec: &Spec, start: u64, ops: &[Op]) {
    let Some((limiter, mut model)) = build(spec, start) else {
        return;
    };
    let limit = spec.count;
    let sub_ns = model_sub(spec);
    let mut now = start;
    for (step, op) in ops.iter().enumerate() {
        let context = || format!("{spec:?}, start {start}, op {step} {op:?} at {now}");
        let at = Nanos::new(now);
        match *op {
            Op::Acquire { n, clock } => {
                let n = n.of(limit);
                let got = limiter.acquire_n(n, at, clock);
                let want = model.acquire(now, n, true);
                if let Some(retry_at) = compare(&context, got, want, (n, limit)) {
                    check_retry_at(&context, &limiter, &mut model, n, retry_at);
                }
            }
            Op::AcquireOne { clock } => {
                let got = limiter.acquire_one(at, clock).map_err(AcquireError::Denied);
                let want = model.acquire(now, 1, true);
                if let Some(retry_at) = compare(&context, got, want, (1, limit)) {
                    check_retry_at(&context, &limiter, &mut model, 1, retry_at);
                }
            }
            Op::Peek { n, clock } => {
                let n = n.of(limit);
                let got = limiter.peek_n(n, at, clock);
                let want = model.acquire(now, n, false);
                compare(&context, got, want, (n, limit));
            }
            Op::Remaining { clock } => {
                assert_eq!(
                    limiter.remaining(at, clock),
                    model.remaining_at(now),
                    "remaining: {}",
                    context()
                );
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
                limiter.clock().set(Nanos::new(now));
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
