//! The one facade every direct limiter is built from: [`Direct`], one [`Algorithm`]'s state
//! beside a [`Clock`], behind the quota pointer a change replaces (`crate::change`). Its methods
//! are written once, here, for `TokenBucket`, `FixedWindow`, `SlidingWindowCounter`,
//! `SlidingWindowLog` and `LeakyMeter`, which are aliases of it; so is its [`Limiter`] impl.
//!
//! The macros here write the same things for the limiters with a protocol of their own
//! ([`ShardedBucket`](crate::ShardedBucket), [`SubWindowCounter`](crate::window::SubWindowCounter)),
//! each invoked where that limiter lives: `clock_reading_forms!` (the methods that read the
//! clock) and `limiter_from_inherent_methods!` (the [`Limiter`] impl).
//!
//! Public as `tollgate::Direct` and `tollgate::limiter::Direct`.

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::algorithm::sealed::Held;
use crate::algorithm::Algorithm;
use crate::cas::Gone;
use crate::change::Current;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::limiter::Limiter;
use crate::outcome::{AcquireError, Admitted, Denied};
use crate::quota::{Quota, QuotaError};

/// The clock-reading forms of a limiter's `_at` methods (`try_acquire`, `try_acquire_n`, `peek_n`,
/// `remaining`), each reading the limiter's `clock` field once: written once, here, for [`Direct`],
/// [`ShardedBucket`](crate::ShardedBucket) and [`SubWindowCounter`](crate::window::SubWindowCounter).
/// `$new` is an expression building a limiter of 2 per second, for the examples.
macro_rules! clock_reading_forms {
    ($new:literal) => {
        /// Admits one request now, or says how long until one would be.
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let limiter = ", $new, ";")]
        /// assert!(limiter.try_acquire().is_ok());
        /// assert_eq!(limiter.remaining(), 1);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        #[inline]
        pub fn try_acquire(&self) -> Result<$crate::Admitted, $crate::Denied> {
            self.try_acquire_at($crate::Clock::now(&self.clock))
        }

        /// Admits `n` requests now, all or none. `n = 0` is a query that always succeeds.
        ///
        /// # Errors
        ///
        /// [`AcquireError::Denied`](crate::AcquireError::Denied) when `n` cannot be admitted now;
        /// [`AcquireError::InsufficientCapacity`](crate::AcquireError::InsufficientCapacity) when
        /// `n` exceeds the capacity and never can be.
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let limiter = ", $new, ";")]
        /// assert_eq!(limiter.try_acquire_n(2)?.remaining(), 0);
        /// assert!(limiter.try_acquire_n(1).unwrap_err().denied().is_some()); // not now
        /// assert!(limiter.try_acquire_n(3).unwrap_err().denied().is_none()); // never
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        #[inline]
        pub fn try_acquire_n(&self, n: u64) -> Result<$crate::Admitted, $crate::AcquireError> {
            self.try_acquire_n_at(n, $crate::Clock::now(&self.clock))
        }

        /// Would `n` requests be admitted now? Admits nothing and writes nothing.
        ///
        /// # Errors
        ///
        /// As `try_acquire_n`: the answer it would give.
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let limiter = ", $new, ";")]
        /// assert!(limiter.peek_n(2).is_ok());
        /// assert!(limiter.peek_n(2).is_ok()); // still: peeking takes nothing
        /// assert!(limiter.peek_n(3).is_err());
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn peek_n(&self, n: u64) -> Result<$crate::Admitted, $crate::AcquireError> {
            self.peek_n_at(n, $crate::Clock::now(&self.clock))
        }

        /// Whole requests that would be admitted now.
        ///
        /// # Examples
        ///
        /// ```
        #[doc = concat!("let limiter = ", $new, ";")]
        /// assert_eq!(limiter.remaining(), 2);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn remaining(&self) -> u64 {
            self.remaining_at($crate::Clock::now(&self.clock))
        }
    };
}

pub(crate) use clock_reading_forms;

/// `$body` (a `Result<_, Gone>`) on a direct limiter's current block, named `$b`, until it answers
/// without meeting a seal (see `Direct::decide`). A macro rather than a closure on the fast path:
/// the check stays one straight function for the compiler to inline (see
/// `crate::change::Current::pinned`); the body is repeated in the cold retry.
macro_rules! on_block {
    ($limiter:expr, $b:ident => $body:expr) => {{
        let limiter = $limiter;
        let mut attempt = 0u32;
        loop {
            // Every answer leaves the loop from here, in registers: a merge with the answer of
            // an out-of-line call would make the compiler build the whole outcome in memory.
            match limiter.current.pinned() {
                Some($b) => {
                    if let Ok(answer) = $body {
                        break answer;
                    }
                }
                None => {
                    let $b = limiter.current.read_locked();
                    if let Ok(answer) = $body {
                        break answer;
                    }
                }
            }
            // A seal met: the change publishes the next block in a few instructions.
            $crate::change::changing(&mut attempt);
        }
    }};
}

/// One limit: an [`Algorithm`]'s state beside a [`Clock`], lock-free.
///
/// The direct limiters are aliases of this type: [`TokenBucket`](crate::TokenBucket),
/// [`LeakyMeter`](crate::leaky::LeakyMeter), [`FixedWindow`](crate::window::FixedWindow),
/// [`SlidingWindowCounter`](crate::window::SlidingWindowCounter) and
/// [`SlidingWindowLog`](crate::window::SlidingWindowLog). Each alias has its own constructors
/// (and the bucket its refunds, the meter its scheduling); the methods below are common to all.
///
/// The state sits on a cache line of its own, so threads admitting here do not slow down
/// neighbouring data, nor it them. One compare-and-swap per admission for the one-word algorithms
/// (the log claims a ring slot per admission, and a request for several all of its slots with one
/// compare-and-swap); denials, peeks and queries only read.
///
/// # Memory ordering
///
/// Admissions are linearizable: each takes effect at one instant in a single total order, and no
/// two callers ever receive the same capacity. An admission is not a synchronization point
/// between threads: do not rely on it to make other writes visible.
///
/// # Examples
///
/// ```
/// use tollgate::{Direct, ManualClock, Quota, SlidingWindowLogAlgorithm};
/// let log: Direct<SlidingWindowLogAlgorithm, _> =
///     Direct::with_algorithm(Quota::per_second(2)?, ManualClock::new())?;
/// assert!(log.try_acquire_n(2).is_ok());
/// assert!(log.try_acquire().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Direct<A: Algorithm, C = MonotonicClock> {
    pub(crate) current: Current<Block<A>>,
    pub(crate) clock: C,
}

/// What a quota change replaces: a direct limiter's quota, its policy and its state, together
/// (see `crate::change`).
pub(crate) struct Block<A: Algorithm> {
    pub(crate) state: CachePadded<A::State>,
    pub(crate) policy: A::Policy,
    pub(crate) quota: Quota,
    /// How many changes came before this block: a reservation made on one block gives nothing
    /// back to another.
    pub(crate) generation: u64,
}

impl<A: Algorithm> fmt::Debug for Block<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct(A::NAME);
        out.field("quota", &self.quota);
        A::debug_state(&self.policy, &self.state, &mut out);
        out.finish_non_exhaustive()
    }
}

impl<A: Algorithm, C> Direct<A, C> {
    /// Runs `decide` on the current block until it answers without meeting a seal: a decision
    /// that meets one took effect nowhere, and the quota change that sealed it is about to
    /// publish the next block (see `crate::change`).
    #[inline]
    pub(crate) fn decide<R>(&self, decide: impl FnMut(&Block<A>) -> Result<R, Gone>) -> R {
        self.current.decide(decide)
    }

    /// The current block (tests look at its state and policy).
    #[cfg(all(test, not(tollgate_loom)))]
    pub(crate) fn block(&self) -> crate::change::Read<'_, Block<A>> {
        self.current.read()
    }
}

impl<A: Algorithm, C: Clock> Direct<A, C> {
    clock_reading_forms!("tollgate::TokenBucket::new(tollgate::Quota::per_second(2)?)");

    /// A limiter running algorithm `A` for `quota`, reading time from `clock`, filled as the quota
    /// says as of `clock.now()`. The aliases' own `new` and `with_clock` are shorter; this one is
    /// for code generic over the algorithm.
    ///
    /// # Errors
    ///
    /// [`QuotaError`], naming the field, when `A` cannot enforce `quota` (see each algorithm's
    /// ranges).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Direct, FixedWindowAlgorithm, ManualClock, Quota};
    /// let window: Direct<FixedWindowAlgorithm, _> =
    ///     Direct::with_algorithm(Quota::per_minute(3)?, ManualClock::new())?;
    /// assert_eq!(window.remaining(), 3);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_algorithm(quota: Quota, clock: C) -> Result<Direct<A, C>, QuotaError> {
        let policy = A::policy(&quota)?;
        Ok(Direct::from_policy(policy, quota, clock))
    }

    /// A limiter from a policy already validated for `quota`.
    pub(crate) fn from_policy(mut policy: A::Policy, quota: Quota, clock: C) -> Direct<A, C> {
        let now = clock.now();
        A::begin(&mut policy, now);
        let state = A::initial(&policy, &quota, now);
        Direct {
            current: Current::new(Block {
                state: CachePadded::new(state),
                policy,
                quota,
                generation: 0,
            }),
            clock,
        }
    }

    /// Changes the quota this limiter enforces, from now on, without a pause for the checks
    /// running meanwhile. What the old quota had left carries over, read conservatively: the
    /// whole admissions left at the change (fractions dropped), at most the new capacity, and
    /// from there the new quota alone refills (the crate's one rule, in the crate docs, "Changing
    /// a quota"). A window limiter keeps its alignment.
    ///
    /// Checks never wait for a change, but for the few instructions between its sealing the old
    /// state and publishing the new one; the change itself returns once no check still reads
    /// the old quota. Changes of one limiter run one at a time. A [`Reservation`](crate::Reservation)
    /// made before the change gives nothing back if cancelled after it.
    ///
    /// # Errors
    ///
    /// [`QuotaError`], naming the field, when this limiter's algorithm cannot enforce `quota`;
    /// nothing changes then.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// assert!(bucket.try_acquire_n_at(4, Nanos::new(0)).is_ok()); // 6 left
    /// bucket.set_quota(Quota::per_second(3)?)?;
    /// assert_eq!(bucket.quota(), Quota::per_second(3)?);
    /// assert_eq!(bucket.remaining_at(Nanos::new(0)), 3); // at most the new burst
    /// assert_eq!(bucket.remaining_at(Nanos::new(1_000_000_000)), 3);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), QuotaError> {
        self.set_quota_at(quota, self.clock.now())
    }

    /// [`Direct::set_quota`] as of `now`, a reading of this limiter's clock the caller already
    /// holds: the old state's admissions are counted at `now`, and the new quota refills from
    /// there. A reading behind the last one a decision used counts what was left then (less,
    /// never more: time only refills), and later decisions at readings behind `now` find no more
    /// than the change left (the crate docs, "Time only helps").
    ///
    /// # Errors
    ///
    /// As [`Direct::set_quota`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::window::FixedWindow;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let window = FixedWindow::with_clock(Quota::per_minute(10)?, ManualClock::new())?;
    /// assert!(window.try_acquire_n_at(8, Nanos::new(0)).is_ok()); // 2 left this minute
    /// window.set_quota_at(Quota::per_minute(100)?, Nanos::new(0))?;
    /// assert_eq!(window.remaining_at(Nanos::new(0)), 2); // no more than the old state had left
    /// assert_eq!(window.remaining_at(Nanos::new(60_000_000_000)), 100); // the next window
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn set_quota_at(&self, quota: Quota, now: Nanos) -> Result<(), QuotaError> {
        let mut policy = A::policy(&quota)?;
        A::begin(&mut policy, now);
        self.current.change(|old| {
            A::carry(&old.policy, &mut policy);
            // Built before the seal, so that checks meeting the seal wait for no allocation.
            let new = Box::new(Block {
                state: CachePadded::new(A::initial(&policy, &quota, now)),
                policy,
                quota,
                generation: old.generation.wrapping_add(1),
            });
            let left = A::seal(&old.policy, &old.state, now);
            A::refill(
                &new.policy,
                &new.state,
                left.min(A::capacity(&new.policy)),
                now,
            );
            new
        });
        Ok(())
    }

    /// Admits one request as of `now`, a reading of this limiter's clock the caller already
    /// holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert!(bucket.try_acquire_at(Nanos::new(0)).is_ok());
    /// assert!(bucket.try_acquire_at(Nanos::new(999_999_999)).is_err());
    /// assert!(bucket.try_acquire_at(Nanos::new(1_000_000_000)).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline(always)]
    pub fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        on_block!(self, b => A::acquire_one(&b.policy, &b.state, now))
    }

    /// Admits `n` requests as of `now`, all or none. `n = 0` is a query that always succeeds.
    ///
    /// # Errors
    ///
    /// As [`Direct::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// assert!(bucket.try_acquire_n_at(10, Nanos::new(0)).is_ok());
    /// let denied = bucket.try_acquire_n_at(5, Nanos::new(0)).unwrap_err();
    /// assert_eq!(denied.denied().unwrap().retry_after().as_millis(), 500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        on_block!(self, b => A::acquire(&b.policy, &b.state, now, n))
    }

    /// Would `n` requests be admitted as of `now`? Admits nothing and writes nothing.
    ///
    /// # Errors
    ///
    /// As [`Direct::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?.with_initial(0)?, ManualClock::new());
    /// assert!(bucket.peek_n_at(1, Nanos::new(999_999_999)).is_err());
    /// assert!(bucket.peek_n_at(1, Nanos::new(1_000_000_000)).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.decide(|b| A::peek(&b.policy, Held::Known(&b.state), now, n))
    }

    /// Whole requests that would be admitted as of `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?.with_initial(0)?, ManualClock::new());
    /// assert_eq!(bucket.remaining_at(Nanos::new(500_000_000)), 1);
    /// assert_eq!(bucket.remaining_at(Nanos::new(u64::MAX)), 2); // a jump of centuries: just full
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn remaining_at(&self, now: Nanos) -> u64 {
        self.decide(|b| A::remaining(&b.policy, Held::Known(&b.state), now))
    }

    /// The quota this limiter enforces (the latest [set](Direct::set_quota)).
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(3)?;
    /// assert_eq!(tollgate::TokenBucket::new(q).quota(), q);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.current.read().quota
    }

    /// The clock this limiter reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(3)?, ManualClock::starting_at(Nanos::new(4)));
    /// assert_eq!(bucket.clock().now(), Nanos::new(4));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<A: Algorithm, C: Clock> Limiter for Direct<A, C> {
    #[inline]
    fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        Direct::try_acquire_at(self, now)
    }

    #[inline]
    fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        Direct::try_acquire_n_at(self, n, now)
    }

    fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        Direct::peek_n_at(self, n, now)
    }

    fn remaining_at(&self, now: Nanos) -> u64 {
        Direct::remaining_at(self, now)
    }

    #[inline]
    fn now(&self) -> Nanos {
        self.clock.now()
    }

    fn quota(&self) -> Quota {
        Direct::quota(self)
    }
}

impl<A: Algorithm, C> fmt::Debug for Direct<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.current.fmt(f)
    }
}

/// [`Limiter`] for a limiter with a protocol of its own, whose inherent methods already have the
/// trait's shape: the trait's methods call them.
macro_rules! limiter_from_inherent_methods {
    ($($ty:ident)::+) => {
        // In an anonymous const, so that the names below are in scope wherever it is invoked.
        const _: () = {
            use $crate::clock::{Clock, Nanos};
            use $crate::limiter::Limiter;
            use $crate::outcome::{AcquireError, Admitted, Denied};
            use $crate::quota::Quota;

            impl<C: Clock> Limiter for $($ty)::+<C> {
                #[inline]
                fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
                    $($ty)::+::try_acquire_at(self, now)
                }

                #[inline]
                fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
                    $($ty)::+::try_acquire_n_at(self, n, now)
                }

                fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
                    $($ty)::+::peek_n_at(self, n, now)
                }

                fn remaining_at(&self, now: Nanos) -> u64 {
                    $($ty)::+::remaining_at(self, now)
                }

                #[inline]
                fn now(&self) -> Nanos {
                    self.clock().now()
                }

                fn quota(&self) -> Quota {
                    $($ty)::+::quota(self)
                }
            }
        };
    };
}

pub(crate) use limiter_from_inherent_methods;
