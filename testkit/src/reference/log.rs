//! An exact reference model of the sliding window log, written from the specification alone: every
//! admission time ever recorded, in a plain `Vec`, and the rule "admit `n` at effective time `t'`
//! iff the recorded times in `(t' - W, t']` number at most `N - n`".
//!
//! Used by `tests/sliding_log_model.rs` (proptest) and the fuzz crate's `sliding_log_ops` target,
//! through [`crate::driver::log`].
//!
//! Arithmetic is in `u128`, so nothing here can overflow whatever the crate does.

use crate::consts::MAX_USABLE_NS as MAX_USABLE;
use crate::Outcome;

/// The longest log the crate accepts (`window::sliding_log::MAX_LOG`).
pub const MAX_LOG: u64 = 65_536;

/// The model: N, W, and every admission time in the order recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefLog {
    /// N, admissions allowed in any window.
    pub count: u64,
    /// W, the window length in nanoseconds.
    pub window: u64,
    /// Every recorded time, oldest first (never decreasing, since each is at least the last).
    pub times: Vec<u64>,
}

impl RefLog {
    /// An empty log of N per W ns.
    pub fn new(count: u64, window: u64) -> RefLog {
        RefLog {
            count,
            window,
            times: Vec::new(),
        }
    }

    /// The reading as the crate uses it: clamped.
    fn reading(now: u64) -> u64 {
        now.min(MAX_USABLE)
    }

    /// The effective time of a request at `reading`: never before the newest recorded time.
    fn effective(&self, reading: u64) -> u64 {
        self.times.last().map_or(reading, |&last| last.max(reading))
    }

    /// The recorded times in the window `(t - W, t]`, oldest first.
    fn in_window(&self, t: u64) -> Vec<u64> {
        self.times
            .iter()
            .copied()
            .filter(|&x| x <= t && u128::from(x) + u128::from(self.window) > u128::from(t))
            .collect()
    }

    /// Nanoseconds from `reading` until the newest recorded time leaves the window (0 if none).
    fn reset_after(&self, reading: u64) -> u128 {
        self.times.last().map_or(0, |&last| {
            (u128::from(last) + u128::from(self.window)).saturating_sub(u128::from(reading))
        })
    }

    fn judge(&mut self, n: u64, now: u64, write: bool) -> Outcome {
        if n > self.count {
            return Outcome::InsufficientCapacity {
                requested: n,
                capacity: self.count,
            };
        }
        let reading = RefLog::reading(now);
        let t = self.effective(reading);
        let held = self.in_window(t);
        let k = held.len() as u64;
        // Nanoseconds from the reading until the oldest time in the window leaves it: only then is
        // one more admission free.
        let leaves =
            |oldest: u64| u128::from(oldest) + u128::from(self.window) - u128::from(reading);
        if n == 0 {
            return Outcome::Admitted {
                remaining: self.count - k,
                reset_after_ns: self.reset_after(reading),
                next_after_ns: held.first().map(|&oldest| leaves(oldest)),
            };
        }
        if k + n <= self.count {
            if write {
                self.times.extend(std::iter::repeat_n(t, n as usize));
            }
            return Outcome::Admitted {
                remaining: self.count - k - n,
                reset_after_ns: u128::from(t) + u128::from(self.window) - u128::from(reading),
                // The request's own times, at `t`, are the oldest if none was held.
                next_after_ns: Some(leaves(held.first().copied().unwrap_or(t))),
            };
        }
        // The `d` oldest in the window must leave first; the last of them leaves at its time + W.
        let d = (k + n - self.count) as usize;
        let retry_at = u128::from(held[d - 1]) + u128::from(self.window);
        let retry_after = retry_at - u128::from(reading);
        Outcome::Denied {
            retry_after_ns: retry_after,
            retry_at_ns: u64::try_from(retry_at).expect("below 2^63"),
            remaining: self.count - k,
            reset_after_ns: self.reset_after(reading),
            next_after_ns: Some(leaves(held[0])),
        }
    }

    /// A request for `n` at reading `now`: recorded if admitted.
    pub fn acquire(&mut self, n: u64, now: u64) -> Outcome {
        let outcome = self.judge(n, now, true);
        self.forget_left(now);
        outcome
    }

    /// The answer `acquire` would give, recording nothing.
    pub fn peek(&self, n: u64, now: u64) -> Outcome {
        self.clone().judge(n, now, false)
    }

    /// Admissions left in the window at reading `now`.
    pub fn remaining(&self, now: u64) -> u64 {
        let t = self.effective(RefLog::reading(now));
        self.count - self.in_window(t).len() as u64
    }

    /// Drops times that can never be in a window again: effective times never decrease, so a time
    /// that has left the window at the newest recorded time has left it for good. Keeps the newest,
    /// which sets the effective time. Only an economy: the answers do not change.
    fn forget_left(&mut self, _now: u64) {
        let Some(&last) = self.times.last() else {
            return;
        };
        let keep_from = self
            .times
            .iter()
            .position(|&x| u128::from(x) + u128::from(self.window) > u128::from(last))
            .unwrap_or(self.times.len() - 1);
        self.times.drain(..keep_from);
    }
}
