//! The public limiter traits, and the one facade every direct limiter is built from.
//!
//! - [`Limiter`]: one limit. Implemented by every direct limiter ([`TokenBucket`](crate::TokenBucket),
//!   [`ShardedBucket`](crate::ShardedBucket), the [windows](crate::window), the
//!   [leaky meter](crate::leaky::LeakyMeter)); object-safe, so `Arc<dyn Limiter>` works.
//! - [`KeyedLimit`]: one limit per key. Implemented by [`KeyedLimiter`]
//!   for every algorithm; object-safe too.
//! - [`Direct`]: one algorithm's state beside a clock. `TokenBucket`, `FixedWindow`,
//!   `SlidingWindowCounter`, `SlidingWindowLog` and `LeakyMeter` are aliases of it, so their
//!   `try_acquire*`, `peek_n*`, `remaining*`, `quota` and `clock` are written once (in
//!   `src/direct.rs`, re-exported here).
//!
//! To wait for capacity rather than be refused, bring [`wait::LimiterExt`](crate::wait::LimiterExt)
//! or [`wait::KeyedLimitExt`](crate::wait::KeyedLimitExt) into scope: they add `wait_n` and the
//! `until_*` futures to every limiter, keeping these traits object-safe.
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

pub use crate::direct::Direct;

use crate::clock::Nanos;
#[cfg(doc)]
use crate::keyed::KeyedLimiter;
use crate::outcome::{AcquireError, Admitted, Denied, KeyedError};
use crate::quota::Quota;

/// One limit, whatever enforces it: what middleware and user code can be generic over.
///
/// Object-safe: `&dyn Limiter` and `Arc<dyn Limiter>` work, and `&L`, `Box<L>` and `Arc<L>` are
/// limiters whenever `L` is (so `Arc<TokenBucket>` shared between tasks passes where an
/// `L: Limiter` is asked for). The `_at` methods take a reading of
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

    /// The quota enforced now (limiters whose quota can change answer the latest).
    fn quota(&self) -> Quota;

    /// Admits one request now, or says when it could be.
    #[inline]
    fn try_acquire(&self) -> Result<Admitted, Denied> {
        self.try_acquire_at(self.now())
    }

    /// Admits `n` requests now, all or none.
    ///
    /// # Errors
    ///
    /// As [`Limiter::try_acquire_n_at`].
    #[inline]
    fn try_acquire_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.try_acquire_n_at(n, self.now())
    }

    /// The answer [`Limiter::try_acquire_n`] would give now, admitting nothing.
    ///
    /// # Errors
    ///
    /// As [`Limiter::try_acquire_n_at`].
    #[inline]
    fn peek_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.peek_n_at(n, self.now())
    }

    /// Whole requests that would be admitted now.
    #[inline]
    fn remaining(&self) -> u64 {
        self.remaining_at(self.now())
    }
}

/// One limit per key, whatever enforces it: the keyed counterpart of [`Limiter`].
///
/// `Q` is the key as callers pass it: a [`KeyedLimiter`] with keys of
/// type `K` implements `KeyedLimit<Q>` for every `Q` that `K` borrows as (so a `String`-keyed
/// limiter is a `KeyedLimit<str>`). Object-safe for a fixed `Q`; `&L`, `Box<L>` and `Arc<L>` are
/// keyed limits whenever `L` is.
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

    /// The quota enforced (the first tier's, for a tiered limiter): the latest one set.
    fn quota(&self) -> Quota;

    /// The quota of each tier: the one quota, unless the limiter is
    /// [tiered](crate::keyed::KeyedLimiter::with_tiers).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{KeyedLimit, Quota};
    /// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(Quota::per_second(3)?);
    /// let limits: &dyn KeyedLimit<u8> = &limiter;
    /// assert_eq!(limits.tiers(), [Quota::per_second(3)?]);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn tiers(&self) -> Vec<Quota> {
        vec![self.quota()]
    }

    /// The index in [`KeyedLimit::tiers`] of the tier that limits `key`: 0 unless tiered.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered};
    /// use tollgate::{KeyedLimit, ManualClock, Quota};
    /// let tiers = [Quota::per_second(1)?, Quota::per_second(10)?];
    /// let limiter: KeyedLimiter<u32, Tiered, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |user: &u32| usize::from(*user >= 1000), ManualClock::new())?;
    /// let limits: &dyn KeyedLimit<u32> = &limiter;
    /// assert_eq!(limits.tier_of_key(&1234), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn tier_of_key(&self, _key: &Q) -> usize {
        0
    }

    /// [`KeyedLimit::check_key_n`] and the index in [`KeyedLimit::tiers`] of the tier that limits
    /// `key`, as [`KeyedLimit::tier_of_key`] answers it after the decision (what the HTTP layer
    /// asks of a tiered limiter, to name the tier's policy in its fields). The default asks the
    /// two in turn; [`KeyedLimiter`] learns the tier from the lookup that decides
    /// ([`KeyedLimiter::check_key_n_and_tier`]).
    ///
    /// # Errors
    ///
    /// As [`KeyedLimit::check_key_n_at`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered};
    /// use tollgate::{KeyedLimit, ManualClock, Quota};
    /// let tiers = [Quota::per_second(1)?, Quota::per_second(10)?];
    /// let limiter: KeyedLimiter<u32, Tiered, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |user: &u32| usize::from(*user >= 1000), ManualClock::new())?;
    /// let limits: &dyn KeyedLimit<u32> = &limiter;
    /// let (tier, answer) = limits.check_key_n_and_tier(&1234, 1);
    /// assert_eq!((tier, answer?.remaining()), (1, 9));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn check_key_n_and_tier(&self, key: &Q, n: u64) -> (usize, Result<Admitted, KeyedError>) {
        let answer = self.check_key_n(key, n);
        (self.tier_of_key(key), answer)
    }

    /// Admits one request for `key` now.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimit::check_key_n_at`].
    #[inline]
    fn check_key(&self, key: &Q) -> Result<Admitted, KeyedError> {
        self.check_key_n_at(key, 1, self.now())
    }

    /// Admits `n` requests for `key` now, all or none.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimit::check_key_n_at`].
    #[inline]
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

/// [`Limiter`] through a pointer: `&L`, `Box<L>` and `Arc<L>` (for any `L: Limiter`, `dyn Limiter`
/// included) are limiters too, so middleware generic over `L: Limiter` takes a shared limiter as
/// it is.
macro_rules! limiter_through_pointer {
    ($($pointer:ty),*) => {$(
        impl<L: Limiter + ?Sized> Limiter for $pointer {
            #[inline]
            fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
                (**self).try_acquire_at(now)
            }

            #[inline]
            fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
                (**self).try_acquire_n_at(n, now)
            }

            fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
                (**self).peek_n_at(n, now)
            }

            fn remaining_at(&self, now: Nanos) -> u64 {
                (**self).remaining_at(now)
            }

            #[inline]
            fn now(&self) -> Nanos {
                (**self).now()
            }

            fn quota(&self) -> Quota {
                (**self).quota()
            }
        }
    )*};
}

limiter_through_pointer!(&L, Box<L>, std::sync::Arc<L>);

/// [`KeyedLimit`] through a pointer, as [`Limiter`] is.
macro_rules! keyed_limit_through_pointer {
    ($($pointer:ty),*) => {$(
        impl<Q: ?Sized, L: KeyedLimit<Q> + ?Sized> KeyedLimit<Q> for $pointer {
            #[inline]
            fn check_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
                (**self).check_key_n_at(key, n, now)
            }

            fn peek_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
                (**self).peek_key_n_at(key, n, now)
            }

            fn remaining_key_at(&self, key: &Q, now: Nanos) -> u64 {
                (**self).remaining_key_at(key, now)
            }

            #[inline]
            fn now(&self) -> Nanos {
                (**self).now()
            }

            fn quota(&self) -> Quota {
                (**self).quota()
            }

            fn tiers(&self) -> Vec<Quota> {
                (**self).tiers()
            }

            fn tier_of_key(&self, key: &Q) -> usize {
                (**self).tier_of_key(key)
            }
        }
    )*};
}

keyed_limit_through_pointer!(&L, Box<L>, std::sync::Arc<L>);
