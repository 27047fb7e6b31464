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

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;

use crossbeam_utils::CachePadded;

use crate::algorithm::Algorithm;
use crate::cas::Gone;
use crate::change::Current;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::keyed::{KeyedError, KeyedLimiter};
use crate::outcome::{AcquireError, Admitted, Denied};
use crate::quota::{Quota, QuotaError};

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
        on_block!(self, b => A::acquire_one_live(&b.policy, &b.state, now))
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
        on_block!(self, b => A::acquire_keyed(&b.policy, &b.state, now, n))
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
        self.decide(|b| A::peek_keyed(&b.policy, &b.state, now, n))
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
        self.decide(|b| A::remaining_keyed(&b.policy, &b.state, now))
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

            fn quota(&self) -> Quota {
                $($ty)::+::quota(self)
            }
        }
    };
}

limiter_from_inherent_methods!(crate::sharded::ShardedBucket);
limiter_from_inherent_methods!(crate::window::sub_window::SubWindowCounter);

impl<K, Q, A, C> KeyedLimit<Q> for KeyedLimiter<K, A, C>
where
    K: Hash + Eq + Clone + Borrow<Q> + Send + Sync,
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

    fn quota(&self) -> Quota {
        KeyedLimiter::quota(self)
    }

    fn tiers(&self) -> Vec<Quota> {
        KeyedLimiter::tiers(self)
    }

    fn tier_of_key(&self, key: &Q) -> usize {
        KeyedLimiter::tier_of_key(self, key)
    }

    #[inline]
    fn check_key_n_and_tier(&self, key: &Q, n: u64) -> (usize, Result<Admitted, KeyedError>) {
        KeyedLimiter::check_key_n_and_tier(self, key, n)
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cas::writes;
    use crate::clock::ManualClock;
    use crate::keyed::{
        FixedWindowKeys, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys,
        TokenBucketKeys,
    };
    use crate::leaky::LeakyMeter;
    use crate::window::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, SubWindowCounter};
    use crate::{ShardedBucket, TokenBucket};

    /// Every request a caller can make of an exhausted limiter that must be refused or answered
    /// without a write: denials of every size, impossible requests, queries and peeks.
    fn refuse_everything(limiter: &dyn Limiter, capacity: u64) {
        assert!(limiter.try_acquire().is_err());
        for n in 1..=capacity {
            assert!(limiter.try_acquire_n(n).is_err(), "n = {n}");
            assert!(limiter.peek_n(n).is_err(), "n = {n}");
        }
        assert!(limiter.try_acquire_n(capacity + 1).is_err());
        assert!(limiter.peek_n(capacity + 1).is_err());
        assert!(limiter.try_acquire_n(0).is_ok());
        assert!(limiter.peek_n(0).is_ok());
        // Not always 0: the strict meter refuses while places are free.
        let _ = limiter.remaining();
    }

    /// Exhausts `limiter` on `clock`, shows that no denial or peek writes, then that an admission
    /// does (so that the count can see a write at all).
    fn denials_and_peeks_write_nothing(name: &str, limiter: &dyn Limiter, clock: &ManualClock) {
        let capacity = limiter.quota().capacity();
        // Peeks on a limiter that would admit write nothing either.
        let before = writes::on_this_thread();
        assert!(limiter.peek_n(capacity).is_ok(), "{name}");
        assert_eq!(limiter.remaining(), capacity, "{name}");
        assert_eq!(writes::on_this_thread(), before, "{name}: a peek wrote");
        while limiter.try_acquire().is_ok() {}
        let before = writes::on_this_thread();
        refuse_everything(limiter, capacity);
        assert_eq!(
            writes::on_this_thread(),
            before,
            "{name}: a denial, a query or a peek wrote"
        );
        clock.advance(Duration::from_secs(3600));
        assert!(limiter.try_acquire().is_ok(), "{name}");
        assert!(
            writes::on_this_thread() > before,
            "{name}: an admission went uncounted"
        );
    }

    #[test]
    fn no_direct_limiter_writes_on_a_denial_or_a_peek() {
        let q = Quota::per_second(4).unwrap();
        let clock = ManualClock::new();
        let limiters: Vec<(&str, Box<dyn Limiter>)> = vec![
            (
                "TokenBucket",
                Box::new(TokenBucket::with_clock(q, clock.clone())),
            ),
            (
                "LeakyMeter",
                Box::new(LeakyMeter::with_clock(q, clock.clone())),
            ),
            (
                "FixedWindow",
                Box::new(FixedWindow::with_clock(q, clock.clone()).unwrap()),
            ),
            (
                "SlidingWindowCounter",
                Box::new(SlidingWindowCounter::with_clock(q, clock.clone()).unwrap()),
            ),
            (
                "SubWindowCounter",
                Box::new(SubWindowCounter::with_clock(q, 4, clock.clone()).unwrap()),
            ),
            (
                "SlidingWindowLog",
                Box::new(SlidingWindowLog::with_clock(q, clock.clone()).unwrap()),
            ),
            (
                "ShardedBucket, 1 shard",
                Box::new(
                    ShardedBucket::builder(q)
                        .shards(1)
                        .clock(clock.clone())
                        .build()
                        .unwrap(),
                ),
            ),
        ];
        for (name, limiter) in &limiters {
            denials_and_peeks_write_nothing(name, limiter.as_ref(), &clock);
        }
    }

    #[test]
    fn the_meter_writes_nothing_on_a_refused_or_peeked_scheduling() {
        let clock = ManualClock::new();
        let meter = LeakyMeter::with_clock(Quota::per_second(4).unwrap(), clock);
        meter.try_schedule_n(4).unwrap();
        let before = writes::on_this_thread();
        // Full: every scheduling is refused (5 can never be), a request for nothing answers.
        for n in 1..=5 {
            assert!(meter.try_schedule_n(n).is_err(), "n = {n}");
            assert!(meter.peek_schedule_n(n).is_err(), "n = {n}");
        }
        assert!(meter.try_schedule_n(0).is_ok());
        assert!(meter.peek_schedule_n(0).is_ok());
        assert!(meter.try_schedule().is_err());
        assert_eq!(writes::on_this_thread(), before);
    }

    /// Denials on a held key, and peeks and queries on held and unknown keys, for every per-key
    /// algorithm.
    fn keyed_denials_write_nothing<A: Algorithm>(name: &str) {
        let clock = ManualClock::new();
        let limiter: KeyedLimiter<u8, A, _> =
            KeyedLimiter::with_algorithm(Quota::per_second(3).unwrap(), clock.clone()).unwrap();
        while limiter.check_key(&1).is_ok() {}
        let before = writes::on_this_thread();
        for n in 0..=4 {
            let _ = limiter.check_key_n(&1, n);
            let _ = limiter.peek_key_n(&1, n);
            let _ = limiter.peek_key_n(&2, n);
        }
        assert!(limiter.check_key_n(&2, 0).is_ok());
        let _ = (limiter.remaining_key(&1), limiter.remaining_key(&2));
        assert_eq!(writes::on_this_thread(), before, "{name}");
        assert!(!limiter.contains_key(&2), "{name}: a query created a key");
        clock.advance(Duration::from_secs(3600));
        assert!(limiter.check_key(&1).is_ok());
        assert!(writes::on_this_thread() > before, "{name}");
    }

    #[test]
    fn no_keyed_algorithm_writes_on_a_denial_or_a_peek() {
        keyed_denials_write_nothing::<TokenBucketKeys>("token bucket");
        keyed_denials_write_nothing::<LeakyMeterKeys>("leaky meter");
        keyed_denials_write_nothing::<FixedWindowKeys>("fixed window");
        keyed_denials_write_nothing::<SlidingWindowCounterKeys>("sliding counter");
        keyed_denials_write_nothing::<SlidingWindowLogKeys>("sliding log");
    }

    /// Admits once through whatever limiter it is given.
    fn admit_once<L: Limiter>(limiter: L) -> bool {
        limiter.try_acquire().is_ok()
    }

    #[test]
    fn pointers_to_limiters_are_limiters() {
        let q = Quota::per_second(2).unwrap();
        let bucket = std::sync::Arc::new(TokenBucket::with_clock(q, ManualClock::new()));
        assert!(admit_once(&*bucket));
        assert!(admit_once(std::sync::Arc::clone(&bucket)));
        assert!(!admit_once(&bucket));
        let boxed: Box<dyn Limiter> = Box::new(TokenBucket::with_clock(q, ManualClock::new()));
        assert!(admit_once(&boxed));
        assert_eq!(boxed.remaining(), 1);
        assert!(admit_once(boxed));

        let keyed: std::sync::Arc<KeyedLimiter<String, TokenBucketKeys, _>> = std::sync::Arc::new(
            KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), ManualClock::new()),
        );
        fn gate<L: KeyedLimit<str>>(limits: &L, key: &str) -> bool {
            limits.check_key(key).is_ok()
        }
        assert!(gate(&keyed, "a"));
        assert!(!gate(&std::sync::Arc::clone(&keyed), "a"));
        assert_eq!(KeyedLimit::<str>::remaining_key(&keyed, "b"), 1);
    }
}

/// `benches/instructions.rs`'s window onto the quota pointer's cost: one token bucket's block,
/// decided on directly (the design before quotas could change), through the crate's epoch (what
/// `Direct` does) or through any other pointer the bench holds it behind (`arc-swap`'s, measured
/// beside). Not an API: hidden, and free to change.
#[cfg(not(tollgate_loom))]
#[doc(hidden)]
pub mod __bench_change {
    use crossbeam_utils::CachePadded;

    use crate::algorithm::sealed::Contract;
    use crate::change::Current;
    use crate::clock::Nanos;
    use crate::quota::Quota;
    use crate::TokenBucketAlgorithm;

    /// A token bucket's block: its policy and state, decided on in place.
    pub struct BenchBlock(super::Block<TokenBucketAlgorithm>);

    impl std::fmt::Debug for BenchBlock {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }

    impl BenchBlock {
        /// A full bucket for `quota` as of `now`.
        pub fn new(quota: Quota, now: Nanos) -> BenchBlock {
            // Every valid quota fits the bucket (`Gcra::new` is infallible).
            let mut policy = crate::gcra::Gcra::new(&quota);
            TokenBucketAlgorithm::begin(&mut policy, now);
            let state = TokenBucketAlgorithm::initial(&policy, &quota, now);
            BenchBlock(super::Block {
                state: CachePadded::new(state),
                policy,
                quota,
                generation: 0,
            })
        }

        /// One admission at `now` on this block, as `Direct::try_acquire_at` decides it.
        #[inline]
        pub fn try_acquire_at(&self, now: Nanos) -> bool {
            matches!(
                TokenBucketAlgorithm::acquire_one_live(&self.0.policy, &self.0.state, now),
                Ok(Ok(_))
            )
        }
    }

    /// A block behind the crate's quota pointer, read as `Direct` reads it.
    #[derive(Debug)]
    pub struct EpochBlock(Current<BenchBlock>);

    impl EpochBlock {
        /// `block` behind the pointer.
        pub fn new(block: BenchBlock) -> EpochBlock {
            EpochBlock(Current::new(block))
        }

        /// One admission at `now`, pinned.
        #[inline]
        pub fn try_acquire_at(&self, now: Nanos) -> bool {
            match self.0.pinned() {
                Some(block) => block.try_acquire_at(now),
                None => self.0.read_locked().try_acquire_at(now),
            }
        }
    }
}
