//! The public limiter traits, and the one facade every direct limiter is built from.
//!
//! - [`Limiter`]: one limit. Implemented by every direct limiter ([`TokenBucket`](crate::TokenBucket),
//!   [`ShardedBucket`](crate::ShardedBucket), the [windows](crate::window), the
//!   [leaky meter](crate::leaky::LeakyMeter)); object-safe, so `Arc<dyn Limiter>` works.
//! - [`KeyedLimit`]: one limit per key. Implemented by [`KeyedLimiter`]
//!   for every algorithm; object-safe too.
//! - [`Direct`]: one algorithm's state beside a clock. `TokenBucket`, `FixedWindow`,
//!   `SlidingWindowCounter`, `SlidingWindowLog` and `LeakyMeter` are aliases of it, so their
//!   `try_acquire*`, `peek_n*`, `remaining*`, `quota` and `clock` are written once, here.
//!
//! # Being generic over a limiter
//!
//! ```
//! use std::sync::Arc;
//! use tollgate::window::FixedWindow;
//! use tollgate::{Limiter, ManualClock, Nanos, Quota, TokenBucket};
//!
//! /// Admits a batch of `n` requests, or says how long the caller should wait.
//! fn admit(limiter: &dyn Limiter, n: u64) -> Result<u64, std::time::Duration> {
//!     match limiter.try_acquire_n(n) {
//!         Ok(admitted) => Ok(admitted.remaining()),
//!         Err(e) => Err(e.denied().map_or(std::time::Duration::MAX, |d| d.retry_after())),
//!     }
//! }
//!
//! let limiters: Vec<Arc<dyn Limiter>> = vec![
//!     Arc::new(TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new())),
//!     Arc::new(FixedWindow::with_clock(Quota::per_second(4)?, ManualClock::new())?),
//! ];
//! for limiter in &limiters {
//!     assert_eq!(admit(limiter.as_ref(), 3), Ok(1));
//!     assert!(admit(limiter.as_ref(), 3).is_err());
//!     assert_eq!(limiter.remaining_at(Nanos::new(0)), 1);
//! }
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Which constructors are fallible
//!
//! One rule for every limiter: a constructor returns `Result<_, QuotaError>` exactly when some
//! valid [`Quota`] is one its algorithm cannot enforce. The token bucket, the sharded bucket and
//! the leaky meter enforce every quota, so `new` and `with_clock` return the limiter; the windows
//! (a count that must fit their word, a capacity equal to the count) and the leaky queue (a
//! capacity it must allocate) return a `Result` naming the field. The generic
//! [`Direct::with_algorithm`] and [`KeyedLimiter::with_algorithm`](crate::keyed::KeyedLimiter::with_algorithm)
//! are fallible, since they accept any algorithm.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;

use crossbeam_utils::CachePadded;

use crate::algorithm::sealed::Held;
use crate::algorithm::Algorithm;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::keyed::{KeyedError, KeyedLimiter};
use crate::outcome::{AcquireError, Admitted, Denied};
use crate::quota::{Quota, QuotaError};

/// One limit, whatever enforces it: what middleware and user code can be generic over.
///
/// Object-safe: `&dyn Limiter` and `Arc<dyn Limiter>` work. The `_at` methods take a reading of
/// the limiter's own clock (see [`Limiter::now`]); the others read the clock themselves.
///
/// # Examples
///
/// ```
/// use tollgate::{Limiter, ManualClock, Quota, ShardedBucket, TokenBucket};
///
/// fn drain<L: Limiter + ?Sized>(limiter: &L) -> u64 {
///     let mut admitted = 0;
///     while limiter.try_acquire().is_ok() {
///         admitted += 1;
///     }
///     admitted
/// }
/// let q = Quota::per_second(5)?;
/// assert_eq!(drain(&TokenBucket::with_clock(q, ManualClock::new())), 5);
/// let sharded = ShardedBucket::builder(q).shards(1).clock(ManualClock::new()).build()?;
/// assert_eq!(drain(&sharded), 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Limiter: Send + Sync {
    /// Admits one request as of `now`, or says when it could be.
    fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied>;

    /// Admits `n` requests as of `now`, all or none; `n = 0` is a query that always succeeds.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Denied`] when `n` cannot be admitted now;
    /// [`AcquireError::InsufficientCapacity`] when `n` exceeds the capacity and never can be.
    fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError>;

    /// The answer [`Limiter::try_acquire_n_at`] would give, admitting and writing nothing.
    ///
    /// # Errors
    ///
    /// As [`Limiter::try_acquire_n_at`].
    fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError>;

    /// Whole requests that would be admitted as of `now`.
    fn remaining_at(&self, now: Nanos) -> u64;

    /// A reading of the limiter's clock, for the `_at` methods.
    fn now(&self) -> Nanos;

    /// The quota enforced.
    fn quota(&self) -> &Quota;

    /// Admits one request now, or says when it could be.
    fn try_acquire(&self) -> Result<Admitted, Denied> {
        self.try_acquire_at(self.now())
    }

    /// Admits `n` requests now, all or none.
    ///
    /// # Errors
    ///
    /// As [`Limiter::try_acquire_n_at`].
    fn try_acquire_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.try_acquire_n_at(n, self.now())
    }

    /// The answer [`Limiter::try_acquire_n`] would give now, admitting nothing.
    ///
    /// # Errors
    ///
    /// As [`Limiter::try_acquire_n_at`].
    fn peek_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.peek_n_at(n, self.now())
    }

    /// Whole requests that would be admitted now.
    fn remaining(&self) -> u64 {
        self.remaining_at(self.now())
    }
}

/// One limit per key, whatever enforces it: the keyed counterpart of [`Limiter`].
///
/// `Q` is the key as callers pass it: a [`KeyedLimiter`] with keys of
/// type `K` implements `KeyedLimit<Q>` for every `Q` that `K` borrows as (so a `String`-keyed
/// limiter is a `KeyedLimit<str>`). Object-safe for a fixed `Q`.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter};
/// use tollgate::{KeyedLimit, ManualClock, Quota};
///
/// fn gate(limits: &dyn KeyedLimit<str>, client: &str) -> bool {
///     limits.check_key(client).is_ok()
/// }
/// let limiter: KeyedLimiter<String, _, _> =
///     KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
/// assert!(gate(&limiter, "ann"));
/// assert!(!gate(&limiter, "ann"));
/// assert!(gate(&limiter, "bob"));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait KeyedLimit<Q: ?Sized>: Send + Sync {
    /// Admits `n` requests for `key` as of `now`, all or none; `n = 0` is a query.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::check_key_n_at`](crate::keyed::KeyedLimiter::check_key_n_at).
    fn check_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError>;

    /// The answer [`KeyedLimit::check_key_n_at`] would give, admitting and writing nothing.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimit::check_key_n_at`].
    fn peek_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError>;

    /// Whole requests `key` would be admitted as of `now`.
    fn remaining_key_at(&self, key: &Q, now: Nanos) -> u64;

    /// A reading of the limiter's clock, for the `_at` methods.
    fn now(&self) -> Nanos;

    /// The quota enforced (the first tier's, for a tiered limiter).
    fn quota(&self) -> &Quota;

    /// Admits one request for `key` now.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimit::check_key_n_at`].
    fn check_key(&self, key: &Q) -> Result<Admitted, KeyedError> {
        self.check_key_n_at(key, 1, self.now())
    }

    /// Admits `n` requests for `key` now, all or none.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimit::check_key_n_at`].
    fn check_key_n(&self, key: &Q, n: u64) -> Result<Admitted, KeyedError> {
        self.check_key_n_at(key, n, self.now())
    }

    /// The answer [`KeyedLimit::check_key_n`] would give now.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimit::check_key_n_at`].
    fn peek_key_n(&self, key: &Q, n: u64) -> Result<Admitted, KeyedError> {
        self.peek_key_n_at(key, n, self.now())
    }

    /// Whole requests `key` would be admitted now.
    fn remaining_key(&self, key: &Q) -> u64 {
        self.remaining_key_at(key, self.now())
    }
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
/// (the log claims one ring slot per admission); denials, peeks and queries only read.
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
    pub(crate) state: CachePadded<A::State>,
    pub(crate) policy: A::Policy,
    pub(crate) quota: Quota,
    pub(crate) clock: C,
}

impl<A: Algorithm, C: Clock> Direct<A, C> {
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
    pub(crate) fn from_policy(policy: A::Policy, quota: Quota, clock: C) -> Direct<A, C> {
        let state = A::initial(&policy, &quota, clock.now());
        Direct {
            state: CachePadded::new(state),
            policy,
            quota,
            clock,
        }
    }

    /// Admits one request now, or says how long until one would be.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(1)?);
    /// assert!(bucket.try_acquire().is_ok());
    /// assert!(bucket.try_acquire().is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self) -> Result<Admitted, Denied> {
        self.try_acquire_at(self.clock.now())
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
    #[inline]
    pub fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        A::acquire_one(&self.policy, &self.state, now)
    }

    /// Admits `n` requests now, all or none. `n = 0` is a query that always succeeds.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Denied`] when `n` cannot be admitted now;
    /// [`AcquireError::InsufficientCapacity`] when `n` exceeds the capacity and never can be.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(10)?);
    /// assert_eq!(bucket.try_acquire_n(4)?.remaining(), 6);
    /// assert!(bucket.try_acquire_n(7).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.try_acquire_n_at(n, self.clock.now())
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
        A::acquire(&self.policy, &self.state, now, n)
    }

    /// Would `n` requests be admitted now? Admits nothing and writes nothing.
    ///
    /// # Errors
    ///
    /// As [`Direct::try_acquire_n`]: the answer it would give.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(3)?);
    /// assert!(bucket.peek_n(3).is_ok());
    /// assert!(bucket.peek_n(3).is_ok()); // still: peeking takes nothing
    /// assert!(bucket.peek_n(4).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn peek_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.peek_n_at(n, self.clock.now())
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
        A::peek(&self.policy, Held::Known(&self.state), now, n)
    }

    /// Whole requests that would be admitted now.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(8)?);
    /// assert_eq!(bucket.remaining(), 8);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn remaining(&self) -> u64 {
        self.remaining_at(self.clock.now())
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
        A::remaining(&self.policy, Held::Known(&self.state), now)
    }

    /// The quota this limiter enforces.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(3)?;
    /// assert_eq!(tollgate::TokenBucket::new(q).quota(), &q);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> &Quota {
        &self.quota
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

    fn quota(&self) -> &Quota {
        &self.quota
    }
}

impl<A: Algorithm, C> fmt::Debug for Direct<A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct(A::NAME);
        out.field("quota", &self.quota);
        A::debug_state(&self.policy, &self.state, &mut out);
        out.finish_non_exhaustive()
    }
}

/// [`Limiter`] for a limiter with a protocol of its own, whose inherent methods already have the
/// trait's shape: the trait's methods call them.
macro_rules! limiter_from_inherent_methods {
    ($($ty:ident)::+) => {
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

            fn quota(&self) -> &Quota {
                $($ty)::+::quota(self)
            }
        }
    };
}

limiter_from_inherent_methods!(crate::sharded::ShardedBucket);
limiter_from_inherent_methods!(crate::window::sub_window::SubWindowCounter);

impl<K, Q, A, C> KeyedLimit<Q> for KeyedLimiter<K, A, C>
where
    K: Hash + Eq + Borrow<Q> + Send + Sync,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    A: Algorithm,
    C: Clock,
{
    #[inline]
    fn check_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
        KeyedLimiter::check_key_n_at(self, key, n, now)
    }

    fn peek_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
        KeyedLimiter::peek_key_n_at(self, key, n, now)
    }

    fn remaining_key_at(&self, key: &Q, now: Nanos) -> u64 {
        KeyedLimiter::remaining_key_at(self, key, now)
    }

    #[inline]
    fn now(&self) -> Nanos {
        self.clock().now()
    }

    fn quota(&self) -> &Quota {
        KeyedLimiter::quota(self)
    }
}
