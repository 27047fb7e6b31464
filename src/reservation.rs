//! Reserving tokens ahead: [`Reservation`], what [`TokenBucket::reserve_n`] and
//! [`ShardedBucket::reserve_n`] hand back, why they may not ([`ReserveError`]), and the bound on
//! how long a reservation may wait, [`MAX_WAIT`] ([`MaxWaitError`] beyond it).
//!
//! A reservation takes its `n` tokens at once, into debt if they are not there yet, and tells the
//! caller when they are theirs ([`Reservation::ready_at`], [`Reservation::delay`]): the caller
//! waits that long, then acts, with no second call to the limiter. Requests that come after it
//! queue behind its debt. This is `x/time/rate`'s `ReserveN`; a bucket in debt refuses everyone
//! else (their `retry_after` counts the debt) until it is paid off by the refill.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
//!
//! let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
//! let t = Nanos::new(0);
//! let first = bucket.reserve_n_at(10, Duration::from_secs(1), t)?; // the whole burst, now
//! assert_eq!(first.delay(), Duration::ZERO);
//! let second = bucket.reserve_n_at(5, Duration::from_secs(1), t)?; // into debt: 500 ms
//! assert_eq!(second.delay(), Duration::from_millis(500));
//! assert_eq!(second.ready_at(), Nanos::new(500_000_000));
//! // A wait beyond `max_wait` reserves nothing.
//! assert!(bucket.reserve_n_at(6, Duration::from_secs(1), t).is_err());
//! // Changed plans: the second reservation gives its 5 back (nothing was reserved after it).
//! assert_eq!(second.cancel_at(t), 5);
//! assert_eq!(bucket.try_acquire_at(Nanos::new(100_000_000))?.remaining(), 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Semantics
//!
//! - **Reserving `n`** at a reading `now` with `max_wait`: if the `n` tokens are there, it is an
//!   admission (`delay() == 0`, `ready_at() == now`). Otherwise, if they will be there within
//!   `max_wait` (counting every debt already reserved), they are taken now, into debt, and are the
//!   caller's at `ready_at() = now + delay()`. Otherwise nothing is reserved and the answer is
//!   [`ReserveError::Denied`], whose `retry_after` is the wait until **the same reservation** would
//!   be granted (its delay then exactly `max_wait`): the wait for the tokens, less `max_wait`.
//!   With `max_wait = 0` a reservation answers exactly as `try_acquire_n` does.
//! - `n = 0` is a query: an empty reservation, ready at once, whose cancel gives back nothing.
//!   `n` above the capacity is [`ReserveError::InsufficientCapacity`], whatever `max_wait`.
//! - `max_wait` above [`MAX_WAIT`] (2^61 ns, about 73 years) is [`ReserveError::MaxWait`]: the
//!   bucket's one word holds the debt, and this bound keeps every sum on it below 2^64. (A
//!   separate error from [`AcquireError`], which converts into the keyed
//!   and Redis errors, where a bad `max_wait` has no place.)
//! - **Never more than the limit.** A reservation's tokens count as taken from the instant they
//!   are the caller's: over any interval of length `t` from a full bucket, the tokens admitted or
//!   ready are at most `C + R × t` (plus what was given back), exactly as for admissions.
//! - **Cancelling** ([`Reservation::cancel`]) follows `x/time/rate`: it gives back the reservation's
//!   tokens less those taken after it (admissions and reservations made since, which queued
//!   behind its debt and may depend on it), never a negative number, never above the capacity;
//!   and nothing once the reservation's time has passed (a reading after `ready_at`: the tokens
//!   are the caller's, and [`TokenBucket::refund`] is the way to give back unused ones). It
//!   answers how many went back, counting a token that only partly fit below the capacity as one.
//! - **Dropping** a reservation without cancelling keeps it: the tokens stay taken, and the debt
//!   is paid by the refill as for any admission. `Reservation` is `#[must_use]` so that a
//!   reservation is not dropped by accident.
//!
//! # The sharded bucket
//!
//! [`ShardedBucket::reserve_n`] reserves across the shards, the way a gather takes: the caller's
//! home shard alone when it can admit all `n` at once; otherwise, from one read of every shard,
//! the earliest reading at which the shards together hold `n` whole tokens (the same instant a
//! denial's `retry_at` names), and from each shard in turn, from home on, the tokens it will hold
//! by then, each reserved on its own shard. Each shard stays an exact bucket for its part of the
//! quota, so admitted plus reserved never exceeds `C + R × t` over the limiter. Details on
//! [`ShardedBucket::reserve_n_from`].

use std::fmt;
use std::time::Duration;

use crate::clock::Nanos;
use crate::gcra::MAX_WAIT_NS;
use crate::outcome::{Denied, InsufficientCapacity, TooManyKeys};

#[cfg(doc)]
use crate::outcome::AcquireError;

#[cfg(doc)]
use crate::{ShardedBucket, TokenBucket};

/// The longest `max_wait` a reservation accepts: 2^61 ns, about 73 years.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::reservation::{ReserveError, MAX_WAIT};
/// use tollgate::{Quota, TokenBucket};
/// let bucket = TokenBucket::new(Quota::per_second(1)?);
/// assert!(bucket.reserve_n(1, MAX_WAIT).is_ok());
/// let err = bucket.reserve_n(1, MAX_WAIT + Duration::from_nanos(1)).unwrap_err();
/// assert!(matches!(err, ReserveError::MaxWait(_)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub const MAX_WAIT: Duration = Duration::from_nanos(MAX_WAIT_NS);

/// A reservation's `max_wait` is above [`MAX_WAIT`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::reservation::ReserveError;
/// use tollgate::{Quota, TokenBucket};
/// let bucket = TokenBucket::new(Quota::per_second(1)?);
/// let Err(ReserveError::MaxWait(e)) = bucket.reserve_n(1, Duration::MAX) else { panic!() };
/// assert_eq!(e.requested, Duration::MAX);
/// assert!(e.to_string().starts_with("max_wait must be between 0 and 2305843009213693952 ns"));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxWaitError {
    /// The `max_wait` asked for.
    pub requested: Duration,
}

impl MaxWaitError {
    /// `max_wait` in nanoseconds, if it is in the accepted range.
    pub(crate) fn check(max_wait: Duration) -> Result<u64, MaxWaitError> {
        if max_wait > MAX_WAIT {
            Err(MaxWaitError {
                requested: max_wait,
            })
        } else {
            // At most 2^61 ns, so it fits.
            Ok(u64::try_from(max_wait.as_nanos()).unwrap_or(MAX_WAIT_NS))
        }
    }
}

impl fmt::Display for MaxWaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "max_wait must be between 0 and {MAX_WAIT_NS} ns (about 73 years), got {:?}",
            self.requested
        )
    }
}

impl std::error::Error for MaxWaitError {}

/// Why a reservation was not granted.
///
/// `#[non_exhaustive]`, as [`AcquireError`] is: match it with a wildcard arm.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::reservation::ReserveError;
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// bucket.try_acquire_n(2)?;
/// match bucket.reserve_n(2, Duration::from_millis(600)) {
///     Err(ReserveError::Denied(d)) => assert_eq!(d.retry_after(), Duration::from_millis(400)),
///     other => panic!("{other:?}"),
/// }
/// assert!(matches!(bucket.reserve_n(3, Duration::ZERO), Err(ReserveError::InsufficientCapacity(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReserveError {
    /// Not within `max_wait`; [`Denied::retry_after`] is the wait until the same reservation
    /// would be granted (its delay then exactly `max_wait`).
    Denied(Denied),
    /// Never: more than the capacity was asked for.
    InsufficientCapacity(InsufficientCapacity),
    /// `max_wait` is above [`MAX_WAIT`].
    MaxWait(MaxWaitError),
    /// A keyed reservation's new key found no room (see
    /// [`Overflow::Refuse`](crate::keyed::Overflow::Refuse)); never from a direct bucket.
    TooManyKeys(TooManyKeys),
}

impl ReserveError {
    /// The denial, if this is one.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(1)?);
    /// assert!(bucket.reserve_n(2, Duration::ZERO).unwrap_err().denied().is_none()); // never
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn denied(&self) -> Option<&Denied> {
        match self {
            ReserveError::Denied(d) => Some(d),
            ReserveError::InsufficientCapacity(_)
            | ReserveError::MaxWait(_)
            | ReserveError::TooManyKeys(_) => None,
        }
    }
}

impl From<Denied> for ReserveError {
    fn from(d: Denied) -> ReserveError {
        ReserveError::Denied(d)
    }
}

impl From<InsufficientCapacity> for ReserveError {
    fn from(e: InsufficientCapacity) -> ReserveError {
        ReserveError::InsufficientCapacity(e)
    }
}

impl From<TooManyKeys> for ReserveError {
    fn from(e: TooManyKeys) -> ReserveError {
        ReserveError::TooManyKeys(e)
    }
}

impl From<MaxWaitError> for ReserveError {
    fn from(e: MaxWaitError) -> ReserveError {
        ReserveError::MaxWait(e)
    }
}

impl fmt::Display for ReserveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReserveError::Denied(d) => d.fmt(f),
            ReserveError::InsufficientCapacity(e) => e.fmt(f),
            ReserveError::MaxWait(e) => e.fmt(f),
            ReserveError::TooManyKeys(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ReserveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReserveError::Denied(d) => Some(d),
            ReserveError::InsufficientCapacity(e) => Some(e),
            ReserveError::MaxWait(e) => Some(e),
            ReserveError::TooManyKeys(e) => Some(e),
        }
    }
}

/// The readers of a reservation, `tokens`, `delay` and `ready_at`, and what its `Debug` shows
/// (`fmt_as`), written once for [`Reservation`] and the Redis backend's `RedisReservation` (each
/// with fields `tokens`, `now`, the decision's reading, and `ready`, when the tokens are the
/// caller's, both in nanoseconds on the deciding clock): an invocation inside the type's `impl`
/// gives each reader its own docs, in that order.
macro_rules! reservation_readers {
    (
        $(#[$tokens:meta])* tokens,
        $(#[$delay:meta])* delay,
        $(#[$ready_at:meta])* ready_at $(,)?
    ) => {
        $(#[$tokens])*
        pub fn tokens(&self) -> u64 {
            self.tokens
        }

        $(#[$delay])*
        pub fn delay(&self) -> ::std::time::Duration {
            ::std::time::Duration::from_nanos(self.ready.saturating_sub(self.now))
        }

        $(#[$ready_at])*
        pub fn ready_at(&self) -> $crate::clock::Nanos {
            $crate::clock::Nanos::new(self.ready)
        }

        /// The reservation's `Debug`, as `name`: its tokens and when they are the caller's, not
        /// what its cancel needs.
        fn fmt_as(&self, name: &str, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
            f.debug_struct(name)
                .field("tokens", &self.tokens)
                .field("ready_at", &self.ready_at())
                .field("delay", &self.delay())
                .finish_non_exhaustive()
        }
    };
}

#[cfg(feature = "redis")]
pub(crate) use reservation_readers;

/// Tokens taken from a bucket, maybe into debt: they are the caller's at
/// [`ready_at`](Reservation::ready_at), after [`delay`](Reservation::delay). `L` is the limiter
/// that granted it ([`TokenBucket`], [`ShardedBucket`], or a keyed token bucket,
/// [`KeyedLimiter`](crate::keyed::KeyedLimiter), whose reservations also hold their key `K`),
/// which [`cancel`](Reservation::cancel) gives the tokens back to.
///
/// Dropping a reservation keeps its tokens (see the [module docs](self)).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?.with_initial(0)?, ManualClock::new());
/// let r = bucket.reserve_n(1, Duration::from_secs(1))?;
/// assert_eq!((r.tokens(), r.delay()), (1, Duration::from_millis(500)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "dropping a Reservation keeps its tokens: wait for ready_at(), or cancel() it"]
pub struct Reservation<'a, L, K = ()> {
    pub(crate) limiter: &'a L,
    /// The key, for a keyed limiter's reservation (its cancel finds the key's state again).
    pub(crate) key: K,
    pub(crate) tokens: u64,
    /// The reading the decision used (clamped nanoseconds).
    pub(crate) now: u64,
    /// When the tokens are the caller's (nanoseconds on the limiter's clock).
    pub(crate) ready: u64,
    pub(crate) parts: Parts,
}

/// Where a reservation's tokens were taken, for its cancel.
#[derive(Debug, Clone)]
pub(crate) enum Parts {
    /// From a token bucket, whose word after the reservation was `tat`.
    Word {
        /// The word the reservation wrote.
        tat: u64,
        /// The bucket's block it was written in (see `Direct::set_quota`).
        generation: u64,
    },
    /// From these shards of a sharded bucket.
    Shards {
        /// Each shard's part.
        parts: Vec<ShardPart>,
        /// The bucket's block they were taken from (see `ShardedBucket::set_quota`).
        generation: u64,
    },
    /// From a keyed limiter's shared overflow limiter (the reservation's new key found no room),
    /// whose word after the reservation was `tat`.
    Overflow {
        /// The word the reservation wrote.
        tat: u64,
    },
}

/// The tokens a reservation took from one shard, and the shard's word after its last write there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShardPart {
    pub(crate) shard: usize,
    pub(crate) tokens: u64,
    pub(crate) tat: u64,
}

impl<L, K> Reservation<'_, L, K> {
    reservation_readers! {
        /// The tokens reserved (0 for a query).
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(5)?);
        /// assert_eq!(bucket.reserve_n(3, Duration::ZERO)?.tokens(), 3);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        tokens,

        /// How long after the reading the decision used the tokens are the caller's: zero when they
        /// were there at once.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{ManualClock, Quota, TokenBucket};
        /// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
        /// assert_eq!(bucket.reserve_n(4, Duration::ZERO)?.delay(), Duration::ZERO);
        /// assert_eq!(bucket.reserve_n(2, Duration::from_secs(1))?.delay(), Duration::from_millis(500));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        delay,

        /// The instant on the limiter's clock at which the tokens are the caller's: the reading the
        /// decision used (clamped to [`Nanos::MAX_USABLE`]) plus [`Reservation::delay`].
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
        /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?.with_initial(0)?, ManualClock::new());
        /// let r = bucket.reserve_n_at(1, Duration::from_secs(5), Nanos::new(250_000_000))?;
        /// assert_eq!(r.ready_at(), Nanos::new(1_000_000_000));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        ready_at,
    }

    /// Whether the reservation's time has passed at the reading `now`: its tokens are the
    /// caller's, and a cancel would give back nothing.
    pub(crate) fn passed(&self, now: Nanos) -> bool {
        self.tokens == 0 || now.clamped() > self.ready
    }
}

impl<L, K> fmt::Debug for Reservation<'_, L, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_as("Reservation", f)
    }
}
