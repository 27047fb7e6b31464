//! An exact reference model of the fixed window, and a driver that runs a [`FixedWindow`] and the
//! model through the same operations and asserts identical answers.
//!
//! Used by `tests/fixed_window_model.rs` (proptest) and the fuzz crate's `fixed_window_ops`
//! target (arbitrary). The calls any limiter answers go through [`crate::driver::limiter`]; the
//! clock moves by [`Step`]s measured in windows.
//!
//! The model is written from the definition, not from the crate: a map from window number to count,
//! windows numbered by floor division in `i128` from the alignment offset, and "time only moves
//! forward" as the largest window number seen so far.

use std::collections::HashMap;
use std::time::Duration;

use tollgate::window::{Alignment, FixedWindow};
use tollgate::{ManualClock, Nanos, Quota, QuotaError};

use crate::consts::MAX_USABLE_NS;
use crate::driver::limiter::{check_retry_exact, Model, Request};
use crate::driver::step::Step;
use crate::Outcome;

/// The model: `limit` per window of `length` ns, windows starting at `offset + k × length`.
#[derive(Debug, Clone)]
pub struct RefFixed {
    limit: u64,
    length: i128,
    offset: i128,
    counts: HashMap<i128, u64>,
    /// The newest window any admission was counted in.
    newest: Option<i128>,
}

impl RefFixed {
    /// A model with no admissions yet: `limit` per window of `length` ns, aligned at `offset`.
    pub fn new(limit: u64, length: u64, offset: u64) -> RefFixed {
        RefFixed {
            limit,
            length: i128::from(length),
            offset: i128::from(offset),
            counts: HashMap::new(),
            newest: None,
        }
    }

    /// The window a decision at `now` is made in, and `now` clamped.
    fn window(&self, now: u64) -> (i128, i128) {
        let now = i128::from(now.min(MAX_USABLE_NS));
        let own = (now - self.offset).div_euclid(self.length);
        (self.newest.map_or(own, |newest| own.max(newest)), now)
    }

    fn end_of(&self, window: i128) -> i128 {
        self.offset + (window + 1) * self.length
    }

    /// Takes `n` at `now`, or just answers when `take` is false.
    pub fn acquire(&mut self, n: u64, now: u64, take: bool) -> Outcome {
        if n > self.limit {
            return Outcome::InsufficientCapacity {
                requested: n,
                capacity: self.limit,
            };
        }
        let (window, now) = self.window(now);
        let count = self.counts.get(&window).copied().unwrap_or(0);
        let to_end = u128::try_from(self.end_of(window) - now).expect("the window ends after now");
        if n == 0 {
            let reset_after = if count == 0 { 0 } else { to_end };
            // Nothing comes back before the window's end, and then all of it.
            return Outcome::Admitted {
                remaining: self.limit - count,
                reset_after_ns: reset_after,
                next_after_ns: (count > 0).then_some(to_end),
            };
        }
        if count + n <= self.limit {
            if take {
                self.counts.insert(window, count + n);
                self.newest = Some(window);
            }
            Outcome::Admitted {
                remaining: self.limit - count - n,
                reset_after_ns: to_end,
                next_after_ns: Some(to_end),
            }
        } else {
            let now = u64::try_from(now).expect("a clamped reading");
            Outcome::denied(now, to_end, self.limit - count, to_end, Some(to_end))
        }
    }

    /// Admissions in each window, for the boundary-burst and limit checks.
    pub fn counts(&self) -> impl Iterator<Item = u64> + '_ {
        self.counts.values().copied()
    }
}

impl Model for RefFixed {
    fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome {
        RefFixed::acquire(self, n, now_ns, true)
    }
    fn peek(&self, n: u64, now_ns: u64) -> Outcome {
        // Answering without taking changes nothing, but the model's method takes `&mut self`.
        RefFixed::acquire(&mut self.clone(), n, now_ns, false)
    }
    fn remaining(&self, now_ns: u64) -> u64 {
        match self.peek(0, now_ns) {
            Outcome::Admitted { remaining, .. } => remaining,
            other => panic!("a query answered {other:?}"),
        }
    }
}

/// How a test builds the limiter.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// `N`, admissions per window.
    pub count: u64,
    /// The window's length, in nanoseconds.
    pub period_ns: u64,
    /// `Alignment::Offset` in nanoseconds; 0 is the epoch.
    pub offset: u64,
    /// The clock's reading when the limiter is built and aligned.
    pub start: u64,
}

/// One operation: a call every limiter answers, or a step of the clock (in windows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `try_acquire(_n)`, `peek_n` or `remaining`, through [`crate::driver::limiter::check`]; a
    /// denied acquisition's `retry_at` is then checked to be exact.
    Call(Request),
    /// Moves the clock.
    Time(Step),
}

/// Builds the limiter the spec describes, or the error the crate gives.
pub fn build(spec: Spec) -> Result<FixedWindow<ManualClock>, QuotaError> {
    let quota = Quota::per_period(spec.count, Duration::from_nanos(spec.period_ns))?;
    let clock = ManualClock::starting_at(Nanos::new(spec.start));
    Ok(FixedWindow::with_clock(quota, clock)?
        .aligned(Alignment::Offset(Duration::from_nanos(spec.offset))))
}

/// Whether a window limiter should accept the spec, given that its quota is valid: the window's
/// length and the count's room beside the window index.
pub fn expected_valid(spec: Spec) -> bool {
    if spec.period_ns > MAX_USABLE_NS {
        // The window index needs a window of at most 2^62 ns.
        return false;
    }
    let length = u128::from(spec.period_ns);
    let max_index = u128::from(MAX_USABLE_NS).div_ceil(length);
    let index_bits = 128 - max_index.leading_zeros();
    let max_count = (1u128 << (64 - index_bits)) - 1;
    u128::from(spec.count) <= max_count
}

/// Runs `ops` on a limiter built from `spec` and on the model; panics at the first difference.
/// Returns the model, for checks over the whole run.
pub fn run(spec: Spec, ops: &[Op]) -> Option<RefFixed> {
    if Quota::per_period(spec.count, Duration::from_nanos(spec.period_ns)).is_err() {
        // The quota's own rules are tested (and fuzzed) on their own.
        return None;
    }
    let limiter = match build(spec) {
        Ok(limiter) => {
            assert!(expected_valid(spec), "{spec:?} should be refused");
            limiter
        }
        Err(err) => {
            assert!(!expected_valid(spec), "{spec:?} refused: {err}");
            return None;
        }
    };
    let length = spec.period_ns;
    let mut model = RefFixed::new(spec.count, length, spec.offset % length);
    let clock = limiter.clock().clone();
    let mut now = spec.start;
    for (i, op) in ops.iter().enumerate() {
        let context = || format!("op {i} {op:?} at {now} on {spec:?}");
        let request = match *op {
            Op::Call(request) => request,
            Op::Time(step) => {
                now = step.apply(&clock, now, length);
                continue;
            }
        };
        let (call, got) = request.check(&limiter, &mut model, spec.count, now, &context);
        if let (true, Outcome::Denied { retry_after_ns, .. }) = (call.takes(), got) {
            // Exact: the same request one nanosecond before the retry instant is refused, at it
            // admitted (checked on a copy of the model, without touching the limiter).
            let n = call.n();
            let at = now.min(MAX_USABLE_NS) as u128 + retry_after_ns;
            if let Ok(at) = u64::try_from(at) {
                if at <= MAX_USABLE_NS {
                    let mut copy = model.clone();
                    assert!(
                        matches!(copy.acquire(n, at, true), Outcome::Admitted { .. }),
                        "admitted at retry_at"
                    );
                    check_retry_exact(&limiter, n, Nanos::new(at), &context);
                }
            }
        }
    }
    Some(model)
}
