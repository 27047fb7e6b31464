//! [`Outcome`]: what a limiter answers to one request, in plain numbers, so that a model's answer
//! and the crate's can be compared with `==` and printed side by side.

use std::time::Duration;

use tollgate::{AcquireError, Admitted, Denied};

use crate::consts::MAX_USABLE_NS;

/// The answer to a request for `n`: the crate's `Result<Admitted, AcquireError>`, flattened.
/// Every model answers with it; [`observe`] and [`observe_one`] turn the crate's answers into it.
/// Durations are in nanoseconds, exact in `u128`.
///
/// # Examples
///
/// ```
/// use testkit::Outcome;
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
/// let first = testkit::outcome::observe_one(bucket.try_acquire());
/// assert_eq!(first, Outcome::Admitted { remaining: 0, reset_after_ns: 1_000_000_000, next_after_ns: Some(1_000_000_000) });
/// let second = testkit::outcome::observe(bucket.try_acquire_n(1));
/// assert_eq!(second, Outcome::denied(0, 1_000_000_000, 0, 1_000_000_000, Some(1_000_000_000)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted (or a query for zero).
    Admitted {
        /// Whole requests left.
        remaining: u64,
        /// Nanoseconds until the limiter is full again, if nothing else is taken.
        reset_after_ns: u128,
        /// Nanoseconds until `remaining` would be one higher, if nothing else is taken; `None` when
        /// the limiter is full.
        next_after_ns: Option<u128>,
    },
    /// Refused for now.
    Denied {
        /// Nanoseconds until the same request would be admitted.
        retry_after_ns: u128,
        /// The clamped reading plus `retry_after_ns`, saturating at `u64::MAX`.
        retry_at_ns: u64,
        /// Whole requests left at the reading.
        remaining: u64,
        /// Nanoseconds until the limiter is full again, if nothing else is taken.
        reset_after_ns: u128,
        /// Nanoseconds until `remaining` would be one higher, if nothing else is taken.
        next_after_ns: Option<u128>,
    },
    /// Refused for ever: more than the capacity was asked for.
    InsufficientCapacity {
        /// The amount asked for.
        requested: u64,
        /// The capacity.
        capacity: u64,
    },
}

impl Outcome {
    /// An admission leaving `remaining`, full again after `reset_after_ns`, one more free after
    /// `next_after_ns`.
    ///
    /// ```
    /// use testkit::Outcome;
    /// assert!(Outcome::admitted(2, 100, Some(50)).is_admitted());
    /// ```
    pub fn admitted(remaining: u64, reset_after_ns: u128, next_after_ns: Option<u128>) -> Outcome {
        Outcome::Admitted {
            remaining,
            reset_after_ns,
            next_after_ns,
        }
    }

    /// A denial with every figure given, `retry_at_ns` included (for outcomes worked out on paper;
    /// [`Outcome::denied`] computes `retry_at_ns` from the reading).
    ///
    /// ```
    /// use testkit::Outcome;
    /// assert_eq!(Outcome::denied_until(5, 12, 0, 5, Some(5)), Outcome::denied(7, 5, 0, 5, Some(5)));
    /// ```
    pub fn denied_until(
        retry_after_ns: u128,
        retry_at_ns: u64,
        remaining: u64,
        reset_after_ns: u128,
        next_after_ns: Option<u128>,
    ) -> Outcome {
        Outcome::Denied {
            retry_after_ns,
            retry_at_ns,
            remaining,
            reset_after_ns,
            next_after_ns,
        }
    }

    /// A denial at the reading `now_ns`, its `retry_at_ns` computed as the crate documents it:
    /// the reading clamped to [`MAX_USABLE_NS`], plus `retry_after_ns`, saturating at `u64::MAX`.
    ///
    /// ```
    /// use testkit::Outcome;
    /// let d = Outcome::denied(u64::MAX, 5, 0, 5, Some(5));
    /// assert!(matches!(d, Outcome::Denied { retry_at_ns, .. } if retry_at_ns == (1 << 62) + 5));
    /// ```
    pub fn denied(
        now_ns: u64,
        retry_after_ns: u128,
        remaining: u64,
        reset_after_ns: u128,
        next_after_ns: Option<u128>,
    ) -> Outcome {
        let at = u128::from(now_ns.min(MAX_USABLE_NS)) + retry_after_ns;
        Outcome::Denied {
            retry_after_ns,
            retry_at_ns: u64::try_from(at).unwrap_or(u64::MAX),
            remaining,
            reset_after_ns,
            next_after_ns,
        }
    }

    /// Whether this is [`Outcome::Admitted`].
    ///
    /// ```
    /// let out = testkit::Outcome::InsufficientCapacity { requested: 2, capacity: 1 };
    /// assert!(!out.is_admitted());
    /// ```
    pub fn is_admitted(&self) -> bool {
        matches!(self, Outcome::Admitted { .. })
    }

    /// The outcome as the crate can report it: a `Duration` holds at most `u64::MAX` seconds and
    /// 999_999_999 ns, so a longer span (a burst window past 584 billion years) is that maximum.
    ///
    /// ```
    /// use testkit::Outcome;
    /// let long = Outcome::admitted(0, u128::MAX, Some(u128::MAX));
    /// let max = std::time::Duration::MAX.as_nanos();
    /// assert_eq!(long.representable(), Outcome::admitted(0, max, Some(max)));
    /// ```
    pub fn representable(self) -> Outcome {
        let max = Duration::MAX.as_nanos();
        match self {
            Outcome::Admitted {
                remaining,
                reset_after_ns,
                next_after_ns,
            } => Outcome::Admitted {
                remaining,
                reset_after_ns: reset_after_ns.min(max),
                next_after_ns: next_after_ns.map(|n| n.min(max)),
            },
            Outcome::Denied {
                retry_after_ns,
                retry_at_ns,
                remaining,
                reset_after_ns,
                next_after_ns,
            } => Outcome::Denied {
                retry_after_ns: retry_after_ns.min(max),
                retry_at_ns,
                remaining,
                reset_after_ns: reset_after_ns.min(max),
                next_after_ns: next_after_ns.map(|n| n.min(max)),
            },
            Outcome::InsufficientCapacity { .. } => self,
        }
    }
}

/// The crate's answer to `try_acquire_n`, `peek_n` and friends, as an [`Outcome`].
///
/// # Panics
///
/// On a refusal other than a denial or insufficient capacity: an in-process limiter refuses only
/// in those two ways, so a new kind is a bug in the kit.
///
/// ```
/// use testkit::{outcome::observe, Outcome};
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
/// let want = Outcome::InsufficientCapacity { requested: 2, capacity: 1 };
/// assert_eq!(observe(bucket.try_acquire_n(2)), want);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub fn observe(result: Result<Admitted, AcquireError>) -> Outcome {
    match result {
        Ok(admitted) => observe_one(Ok(admitted)),
        Err(AcquireError::Denied(denied)) => observe_one(Err(denied)),
        Err(AcquireError::InsufficientCapacity(e)) => Outcome::InsufficientCapacity {
            requested: e.requested,
            capacity: e.capacity,
        },
        Err(other) => panic!("a refusal the model does not know: {other}"),
    }
}

/// The crate's answer to `try_acquire`, as an [`Outcome`].
///
/// ```
/// use testkit::{outcome::observe_one, Outcome};
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// let want = Outcome::admitted(1, 500_000_000, Some(500_000_000));
/// assert_eq!(observe_one(bucket.try_acquire()), want);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub fn observe_one(result: Result<Admitted, Denied>) -> Outcome {
    match result {
        Ok(admitted) => Outcome::Admitted {
            remaining: admitted.remaining(),
            reset_after_ns: admitted.reset_after().as_nanos(),
            next_after_ns: admitted.next_after().map(|d| d.as_nanos()),
        },
        Err(denied) => Outcome::Denied {
            retry_after_ns: denied.retry_after().as_nanos(),
            retry_at_ns: denied.retry_at().as_u64(),
            remaining: denied.remaining(),
            reset_after_ns: denied.reset_after().as_nanos(),
            next_after_ns: denied.next_after().map(|d| d.as_nanos()),
        },
    }
}
