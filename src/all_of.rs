//! [`AllOf`]: several limits on one stream of requests ("10 a second and 1 000 an hour"),
//! admitting a request only when every limit admits it, all or none; per key as well as direct.
//!
//! ```
//! use tollgate::{AllOf, Limiter, ManualClock, Quota, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let limits = AllOf::new(vec![
//!     TokenBucket::with_clock(Quota::per_second(10)?, clock.clone()),
//!     TokenBucket::with_clock(Quota::per_hour(1_000)?.with_capacity(15)?, clock.clone()),
//! ])?;
//! // The first limit binds at once: 10 in a burst.
//! for _ in 0..10 {
//!     limits.try_acquire()?;
//! }
//! assert!(limits.try_acquire().is_err());
//! // A second later the first has refilled, but the second has 5 of its burst of 15 left.
//! clock.advance(std::time::Duration::from_secs(1));
//! assert_eq!(limits.remaining(), 5);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # How it decides, and the bound
//!
//! Limits live in separate words, and there is no compare-and-swap over several words. A request
//! takes from each limit in turn, in the order given; when one refuses, it gives back what it took
//! from those before it, at the same reading, and the request is refused. So:
//!
//! - **Never more than any one limit allows.** An admitted request took its tokens from every
//!   limit, and tokens go back to a limit only from a request that was refused, never more than
//!   that request took. Each limit keeps its own bound over the admitted requests: at most
//!   `C_i + R_i × t` over any interval of length `t` from full.
//! - **While a give-back is in flight**, the tokens a refused request took from the limits before
//!   the refusing one are held: another request may then be refused by a limit that would admit it
//!   a moment later. At most `n` tokens per request in flight are held this way in each limit, for
//!   the time between its take and its give-back (no lock, no I/O, no allocation: nanoseconds,
//!   unless the thread is descheduled in between). So the limits together admit at most what each
//!   allows, at every instant, and at least what they all allow less the tokens of the refused
//!   requests in flight.
//! - **A give-back never moves a limit before its reading** (as [`TokenBucket::refund`] does): if
//!   the limit refilled between the take and the give-back, what would rise above the capacity is
//!   not given back. That admits less, never more.
//! - **Order matters only for speed**: the limit most likely to refuse (the smallest burst) first
//!   makes refused requests take nothing.
//!
//! # Answers
//!
//! - An admission answers the **binding** limit's [`Admitted`]: the one with the fewest requests
//!   remaining (ties: the one that is full again last).
//! - A refusal for "not now" answers the **longest** [`Denied::retry_after`] of every limit that
//!   refuses at that reading (the limits after the first refusal are peeked, taking nothing), so
//!   retrying then is not refused again by another limit at once. A request for more than a
//!   limit's capacity is [`AcquireError::InsufficientCapacity`] (or
//!   [`KeyedError::InsufficientCapacity`]) for that limit; a new key with no room,
//!   [`KeyedError::TooManyKeys`].
//! - `n = 0` is a query: the binding limit's answer, writing nothing.
//! - [`Limiter::remaining_at`]: the fewest of any limit. [`Limiter::quota`]: the first limit's;
//!   [`AllOf::quotas`] lists them all.
//!
//! # Clocks
//!
//! Every limit is judged at one reading, taken from the first limit's clock (or passed to an `_at`
//! method): give every limit the same clock (the default [`MonotonicClock`](crate::MonotonicClock),
//! or clones of one [`ManualClock`](crate::ManualClock) or [`CoarseClock`](crate::CoarseClock)).
//!
//! # Which limits
//!
//! Only limits that can give tokens back ([`GiveBack`], [`KeyedGiveBack`]): the token buckets,
//! direct ([`TokenBucket`], [`ShardedBucket`]) and keyed
//! ([`KeyedLimiter`] with [`TokenBucketKeys`]). For a keyed `AllOf`, a key that finds no room in
//! one limit's map and takes from its shared overflow limiter is given back nothing there (the
//! give-back looks for the key): that limit then counts the refused request, which admits less,
//! never more.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;

use crate::clock::{Clock, Nanos};
use crate::keyed::{KeyedError, KeyedLimiter, TokenBucketKeys};
use crate::limiter::{KeyedLimit, Limiter};
use crate::outcome::{AcquireError, Admitted, Denied};
use crate::quota::Quota;
use crate::sharded::ShardedBucket;
use crate::token_bucket::TokenBucket;

/// Several limits, each of which must admit a request: see the [module docs](self).
///
/// `L` is one limit's type: a [`TokenBucket`], a [`ShardedBucket`], a keyed token bucket, or a
/// `Box<dyn GiveBack>` (or `Box<dyn KeyedGiveBack<Q>>`) to mix them.
///
/// # Examples
///
/// Per client, 10 a second and 1 000 an hour:
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::{AllOf, KeyedLimit, ManualClock, Quota};
///
/// let clock = ManualClock::new();
/// let per_client: AllOf<KeyedLimiter<String, _, _>> = AllOf::new(vec![
///     KeyedLimiter::with_clock(Quota::per_second(10)?, clock.clone()),
///     KeyedLimiter::with_clock(Quota::per_hour(1_000)?.with_capacity(12)?, clock.clone()),
/// ])?;
/// assert_eq!(per_client.check_key_n("ann", 10)?.remaining(), 0);
/// clock.advance(std::time::Duration::from_secs(1));
/// // "ann" has 10 again a second, but only 2 of the hourly burst (one more every 3.6 s).
/// let denied = per_client.check_key_n("ann", 3).unwrap_err();
/// assert_eq!(denied.denied().unwrap().retry_after(), std::time::Duration::from_millis(2_600));
/// assert!(per_client.check_key_n("bob", 10).is_ok()); // another key, its own limits
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AllOf<L> {
    limits: Box<[L]>,
}

/// Why an [`AllOf`] could not be built.
///
/// # Examples
///
/// ```
/// use tollgate::{AllOf, AllOfError, TokenBucket};
/// let err = AllOf::<TokenBucket>::new(Vec::new()).unwrap_err();
/// assert_eq!(err, AllOfError::NoLimits);
/// assert_eq!(err.to_string(), "limits: at least 1 limit is needed, got 0");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllOfError {
    /// No limit was given.
    NoLimits,
}

impl fmt::Display for AllOfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllOfError::NoLimits => f.write_str("limits: at least 1 limit is needed, got 0"),
        }
    }
}

impl std::error::Error for AllOfError {}

mod sealed {
    /// Only the crate's limiters give back (the give-back's rules are theirs).
    pub trait Sealed {}
}

/// A direct limiter that can give back tokens it admitted: what [`AllOf`] is made of. Sealed;
/// implemented by [`TokenBucket`] and [`ShardedBucket`] (and through `&`, `Box` and `Arc`).
///
/// # Examples
///
/// ```
/// use tollgate::{GiveBack, Limiter, ManualClock, Nanos, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// bucket.try_acquire_n_at(2, Nanos::new(0))?;
/// bucket.give_back_at(1, Nanos::new(0));
/// assert_eq!(bucket.remaining_at(Nanos::new(0)), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait GiveBack: Limiter + sealed::Sealed {
    /// Gives back `n` tokens as of `now`, never filling above the capacity (as
    /// [`TokenBucket::refund_at`]).
    fn give_back_at(&self, n: u64, now: Nanos);
}

/// A keyed limiter that can give back tokens it admitted for a key: what a keyed [`AllOf`] is
/// made of. Sealed; implemented by the keyed token bucket (and through `&`, `Box` and `Arc`).
///
/// # Examples
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::{KeyedGiveBack, KeyedLimit, ManualClock, Nanos, Quota};
/// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
/// limiter.check_key_n_at(&1, 2, Nanos::new(0))?;
/// limiter.give_back_key_at(&1, 1, Nanos::new(0));
/// assert_eq!(limiter.remaining_key_at(&1, Nanos::new(0)), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyedGiveBack<Q: ?Sized>: KeyedLimit<Q> + sealed::Sealed {
    /// Gives back `n` tokens of `key` as of `now` (see
    /// [`KeyedLimiter::refund_key_at`]).
    fn give_back_key_at(&self, key: &Q, n: u64, now: Nanos);
}

impl<C: Clock> sealed::Sealed for TokenBucket<C> {}
impl<C: Clock> GiveBack for TokenBucket<C> {
    fn give_back_at(&self, n: u64, now: Nanos) {
        self.refund_at(n, now);
    }
}

impl<C: Clock> sealed::Sealed for ShardedBucket<C> {}
impl<C: Clock> GiveBack for ShardedBucket<C> {
    fn give_back_at(&self, n: u64, now: Nanos) {
        self.refund_at(n, now);
    }
}

impl<K, C> sealed::Sealed for KeyedLimiter<K, TokenBucketKeys, C> {}
impl<K, Q, C> KeyedGiveBack<Q> for KeyedLimiter<K, TokenBucketKeys, C>
where
    K: Hash + Eq + Clone + Send + Sync + Borrow<Q>,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
    KeyedLimiter<K, TokenBucketKeys, C>: KeyedLimit<Q>,
{
    fn give_back_key_at(&self, key: &Q, n: u64, now: Nanos) {
        self.refund_key_at(key, n, now);
    }
}

/// Forwards through a pointer, as [`Limiter`] does.
macro_rules! forward_give_back {
    ($($ptr:ty),*) => {$(
        impl<L: sealed::Sealed + ?Sized> sealed::Sealed for $ptr {}
        impl<L: GiveBack + ?Sized> GiveBack for $ptr {
            fn give_back_at(&self, n: u64, now: Nanos) {
                (**self).give_back_at(n, now)
            }
        }
        impl<Q: ?Sized, L: KeyedGiveBack<Q> + ?Sized> KeyedGiveBack<Q> for $ptr {
            fn give_back_key_at(&self, key: &Q, n: u64, now: Nanos) {
                (**self).give_back_key_at(key, n, now)
            }
        }
    )*};
}

forward_give_back!(&L, Box<L>, std::sync::Arc<L>);

impl<L> AllOf<L> {
    /// The limits, tried in this order (the one most likely to refuse first is fastest).
    ///
    /// # Errors
    ///
    /// [`AllOfError::NoLimits`] for an empty list.
    ///
    /// # Examples
    ///
    /// See [`AllOf`].
    pub fn new(limits: impl IntoIterator<Item = L>) -> Result<AllOf<L>, AllOfError> {
        let limits: Box<[L]> = limits.into_iter().collect();
        if limits.is_empty() {
            return Err(AllOfError::NoLimits);
        }
        Ok(AllOf { limits })
    }

    /// The limits, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{AllOf, Quota, TokenBucket};
    /// let limits = AllOf::new([TokenBucket::new(Quota::per_second(1)?)])?;
    /// assert_eq!(limits.limits().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limits(&self) -> &[L] {
        &self.limits
    }

    /// The fewest requests any limit has `remaining` (direct or for a key): what the limits
    /// together have left.
    fn fewest(&self, remaining: impl Fn(&L) -> u64) -> u64 {
        self.limits.iter().map(remaining).min().unwrap_or(0)
    }
}

impl<L: Limiter> AllOf<L> {
    /// Every limit's quota, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{AllOf, Quota, TokenBucket};
    /// let (a, b) = (Quota::per_second(10)?, Quota::per_hour(1_000)?);
    /// let limits = AllOf::new([TokenBucket::new(a), TokenBucket::new(b)])?;
    /// assert_eq!(limits.quotas(), vec![a, b]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quotas(&self) -> Vec<Quota> {
        self.limits.iter().map(|l| l.quota()).collect()
    }
}

/// Whether admission `a` binds more than `b`: fewer remaining, or as few and full again later.
pub(crate) fn binds(a: &Admitted, b: &Admitted) -> bool {
    (a.remaining(), std::cmp::Reverse(a.reset_after()))
        < (b.remaining(), std::cmp::Reverse(b.reset_after()))
}

/// A refusal whose "not now" can be compared: [`AcquireError`] and [`KeyedError`].
trait ComparableRefusal {
    fn not_now(&self) -> Option<&Denied>;
}

impl ComparableRefusal for Denied {
    fn not_now(&self) -> Option<&Denied> {
        Some(self)
    }
}

impl ComparableRefusal for AcquireError {
    fn not_now(&self) -> Option<&Denied> {
        self.denied()
    }
}

impl ComparableRefusal for KeyedError {
    fn not_now(&self) -> Option<&Denied> {
        self.denied()
    }
}

/// An answer and the index of the limit it is from: the binding limit's admission, or the
/// refusal reported.
type Indexed<E> = (usize, Result<Admitted, E>);

/// The decision over `count` limits (see the module docs) for at least one token: `take(i)`
/// takes from limit `i`, `give(i)` gives back to it, `refusal(i)` is its refusal at the same
/// reading, taking nothing (or `None`).
fn decide<E: ComparableRefusal>(
    count: usize,
    take: impl Fn(usize) -> Result<Admitted, E>,
    give: impl Fn(usize),
    refusal: impl Fn(usize) -> Option<E>,
) -> Indexed<E> {
    let mut binding: Option<(usize, Admitted)> = None;
    for i in 0..count {
        match take(i) {
            Ok(admitted) => {
                if binding.as_ref().is_none_or(|(_, b)| binds(&admitted, b)) {
                    binding = Some((i, admitted));
                }
            }
            Err(refused) => {
                for j in 0..i {
                    give(j);
                }
                let others = (i + 1..count).filter_map(|j| Some((j, refusal(j)?)));
                let (at, refused) = longest((i, refused), others);
                return (at, Err(refused));
            }
        }
    }
    admitted(binding)
}

/// The query's answer: the binding limit's, or the longest refusal. It is [`decide`] with a peek
/// for the take: a peek takes nothing, so nothing is given back, and the limits after a refusal
/// are peeked as `decide` peeks them.
fn answer<E: ComparableRefusal>(
    count: usize,
    peek: impl Fn(usize) -> Result<Admitted, E>,
) -> Indexed<E> {
    decide(count, &peek, |_| {}, |j| peek(j).err())
}

/// Every limit admitted: the binding one. An `AllOf` always has a limit ([`AllOf::new`] refuses
/// none), so there is one.
fn admitted<E>(binding: Option<(usize, Admitted)>) -> Indexed<E> {
    match binding {
        Some((i, admitted)) => (i, Ok(admitted)),
        None => unreachable!("an AllOf without limits"),
    }
}

/// Of `first` and the other refusals (each with its limit's index), the one to report: one that
/// is not "not now" (never, or no room) at once; otherwise the longest wait (the first of equals).
fn longest<E: ComparableRefusal>(
    first: (usize, E),
    others: impl Iterator<Item = (usize, E)>,
) -> (usize, E) {
    let mut worst = first;
    if worst.1.not_now().is_none() {
        return worst;
    }
    for other in others {
        match (other.1.not_now(), worst.1.not_now()) {
            (None, _) => return other,
            (Some(o), Some(w)) if o.retry_after() > w.retry_after() => worst = other,
            _ => {}
        }
    }
    worst
}

impl<L: GiveBack> AllOf<L> {
    /// [`Limiter::try_acquire_n_at`] with the index (in [`AllOf::limits`]) of the limit the answer
    /// is from: for an admission, the binding limit (fewest remaining); for a refusal, the limit
    /// whose refusal is reported. The HTTP middleware's fields name that limit's policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{AllOf, ManualClock, Nanos, Quota, TokenBucket};
    /// let clock = ManualClock::new();
    /// let limits = AllOf::new([
    ///     TokenBucket::with_clock(Quota::per_second(10)?, clock.clone()),
    ///     TokenBucket::with_clock(Quota::per_minute(100)?.with_capacity(3)?, clock.clone()),
    /// ])?;
    /// let (binding, admitted) = limits.try_acquire_n_at_indexed(1, Nanos::new(0));
    /// assert_eq!((binding, admitted?.remaining()), (1, 2)); // the burst of 3 binds
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire_n_at_indexed(
        &self,
        n: u64,
        now: Nanos,
    ) -> (usize, Result<Admitted, AcquireError>) {
        let l = &self.limits;
        if n == 0 {
            return answer(l.len(), |i| l[i].peek_n_at(0, now));
        }
        decide(
            l.len(),
            |i| l[i].try_acquire_n_at(n, now),
            |i| l[i].give_back_at(n, now),
            |i| l[i].peek_n_at(n, now).err(),
        )
    }
}

impl<L> AllOf<L> {
    /// [`KeyedLimit::check_key_n_at`] with the index (in [`AllOf::limits`]) of the limit the
    /// answer is from, as [`AllOf::try_acquire_n_at_indexed`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{AllOf, ManualClock, Nanos, Quota};
    /// let clock = ManualClock::new();
    /// let limits: AllOf<KeyedLimiter<u8, _, _>> = AllOf::new([
    ///     KeyedLimiter::with_clock(Quota::per_second(1)?, clock.clone()),
    ///     KeyedLimiter::with_clock(Quota::per_hour(100)?, clock.clone()),
    /// ])?;
    /// let t = Nanos::new(0);
    /// assert_eq!(limits.check_key_n_at_indexed(&7, 1, t).0, 0); // 0 left of 1 binds
    /// let (refusing, refused) = limits.check_key_n_at_indexed(&7, 1, t);
    /// assert_eq!(refusing, 0);
    /// assert!(refused.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_key_n_at_indexed<Q: ?Sized>(
        &self,
        key: &Q,
        n: u64,
        now: Nanos,
    ) -> (usize, Result<Admitted, KeyedError>)
    where
        L: KeyedGiveBack<Q>,
    {
        let l = &self.limits;
        if n == 0 {
            return answer(l.len(), |i| l[i].peek_key_n_at(key, 0, now));
        }
        decide(
            l.len(),
            |i| l[i].check_key_n_at(key, n, now),
            |i| l[i].give_back_key_at(key, n, now),
            |i| l[i].peek_key_n_at(key, n, now).err(),
        )
    }
}

impl<L: GiveBack> Limiter for AllOf<L> {
    fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        let l = &self.limits;
        decide(
            l.len(),
            |i| l[i].try_acquire_at(now),
            |i| l[i].give_back_at(1, now),
            // One request is never more than a capacity (every quota's is at least 1): the only
            // refusal is "not now".
            |i| {
                l[i].peek_n_at(1, now)
                    .err()
                    .and_then(|e| e.denied().copied())
            },
        )
        .1
    }

    fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.try_acquire_n_at_indexed(n, now).1
    }

    fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        answer(self.limits.len(), |i| self.limits[i].peek_n_at(n, now)).1
    }

    fn remaining_at(&self, now: Nanos) -> u64 {
        self.fewest(|l| l.remaining_at(now))
    }

    fn now(&self) -> Nanos {
        self.limits[0].now()
    }

    fn quota(&self) -> Quota {
        self.limits[0].quota()
    }
}

impl<Q: ?Sized, L: KeyedGiveBack<Q>> KeyedLimit<Q> for AllOf<L> {
    fn check_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
        self.check_key_n_at_indexed(key, n, now).1
    }

    fn peek_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
        answer(self.limits.len(), |i| {
            self.limits[i].peek_key_n_at(key, n, now)
        })
        .1
    }

    fn remaining_key_at(&self, key: &Q, now: Nanos) -> u64 {
        self.fewest(|l| l.remaining_key_at(key, now))
    }

    fn now(&self) -> Nanos {
        self.limits[0].now()
    }

    fn quota(&self) -> Quota {
        self.limits[0].quota()
    }
}

impl<L: fmt::Debug> fmt::Debug for AllOf<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AllOf")
            .field("limits", &self.limits)
            .finish()
    }
}
