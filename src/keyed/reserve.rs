//! The keyed token bucket's reservations and partial takes: [`KeyedLimiter::reserve_key_n`] and
//! [`KeyedLimiter::take_up_to_key`], the keyed forms of [`TokenBucket::reserve_n`] and
//! [`TokenBucket::take_up_to`], through the same protocol that creates and forgets keys for every
//! request.
//!
//! Each decides on the key's word exactly as the direct bucket decides on its own, so a key
//! answers as a [`TokenBucket`] of the same quota would (every key starting full). What is keyed:
//!
//! - **A new key** is created by a request that writes (a reservation or a take of at least one
//!   token), never by a query (`n = 0`), which answers as a fresh key would.
//! - **No room for a new key**: [`ReserveError::TooManyKeys`] (or [`KeyedError::TooManyKeys`])
//!   under [`Overflow::Refuse`](super::Overflow::Refuse); under
//!   [`Overflow::Shared`](super::Overflow::Shared), the request is made on the shared overflow
//!   limiter, and a reservation made there is cancelled there.
//! - **Eviction.** A key in debt is not full, so it is not forgotten before its reservations are
//!   ready. A [`Reservation::cancel_at`] at a reading before the latest eviction's (the floor; see
//!   the [module docs](super)) gives back nothing: the key may have been forgotten and created
//!   afresh since, and a fresh key must not receive tokens of a state it never held. Cancelling at
//!   the clock's own reading, as [`Reservation::cancel`] does, never meets this unless a
//!   reservation outlived its own `ready_at` (when nothing goes back anyway).
//!
//! Only the keyed token bucket ([`TokenBucketKeys`]) has them, as only [`TokenBucket`] and
//! [`ShardedBucket`](crate::ShardedBucket) do among the direct limiters; a tiered limiter does
//! not.

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use super::limiter::Request;
use super::{Algorithm, KeyedError, KeyedLimiter, TokenBucketKeys};
use crate::cas::{self, Gone};
use crate::clock::{Clock, Nanos};
use crate::gcra::{Gcra, Reserved, Time};
use crate::outcome::{AcquireError, Denied};
use crate::partial::Partial;
use crate::reservation::{MaxWaitError, Parts, Reservation, ReserveError};
use crate::sync::{AtomicU64, Ordering};

#[cfg(doc)]
use crate::TokenBucket;

/// A request decided on a key's one word by a pure step, as the direct limiter decides on its
/// own word: the token bucket's partial takes and reservations, the meter's scheduling
/// (`keyed::schedule`). Their [`Request`] is written once, below: on a held word, the step in
/// [`cas::update_live`]'s loop; on a key not held, the step on the fresh word, inserted only if
/// it writes; on the shared overflow limiter, the step in [`cas::update`]'s loop.
pub(super) trait OnWord {
    /// The algorithm of the keys it is asked of.
    type Keys: Algorithm<Policy = Gcra, State = AtomicU64>;
    /// What an admitted request answers.
    type Out;
    /// What [`OnWord::fits`] learned, for the step.
    type Fits: Copy;
    /// Checks `n` against the capacity of the policy the word is kept under (a quota change may
    /// have changed it since the caller looked), before any word is read: a refusal here
    /// answers whatever the word holds.
    fn fits(&self, policy: &Gcra, n: u64) -> Result<Self::Fits, AcquireError>;
    /// The step on `word`, as `at` describes the request.
    fn step(&self, word: u64, at: &Circumstances<'_, Self::Fits>) -> cas::Step<Self::Out, Denied>;
}

/// A request's circumstances, for [`OnWord::step`].
pub(super) struct Circumstances<'a, F> {
    /// The policy the word is kept under.
    pub(super) policy: &'a Gcra,
    /// The reading, in the policy's units.
    pub(super) now: Time,
    /// The request's size (`n >= 1`, but for the meter's queries).
    pub(super) n: u64,
    /// What [`OnWord::fits`] answered.
    pub(super) fits: F,
    /// Whether the word is the shared overflow limiter's.
    pub(super) overflow: bool,
}

/// `req`'s circumstances on `policy` at the reading `now`, once [`OnWord::fits`] has passed `n`.
fn at<'a, R: OnWord>(
    req: &R,
    policy: &'a Gcra,
    now: Nanos,
    n: u64,
    overflow: bool,
) -> Result<Circumstances<'a, R::Fits>, AcquireError> {
    let fits = req.fits(policy, n)?;
    Ok(Circumstances {
        policy,
        now: policy.time(now),
        n,
        fits,
        overflow,
    })
}

impl<R: OnWord> Request<R::Keys> for R {
    type Out = R::Out;

    fn held(
        &self,
        policy: &Gcra,
        state: &AtomicU64,
        now: Nanos,
        n: u64,
    ) -> Result<Result<R::Out, AcquireError>, Gone> {
        let at = match at(self, policy, now, n, false) {
            Ok(at) => at,
            Err(e) => return Ok(Err(e)),
        };
        Ok(cas::update_live(state, |word| self.step(word, &at))?.map_err(AcquireError::Denied))
    }

    fn create(
        &self,
        policy: &Gcra,
        _tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<AtomicU64>, Result<R::Out, AcquireError>) {
        let at = match at(self, policy, now, n, false) {
            Ok(at) => at,
            Err(e) => return (None, Err(e)),
        };
        // Decided on the fresh word (a full bucket, an empty queue) without building the state:
        // only a write inserts the key.
        match self.step(policy.fresh_word(fresh), &at) {
            cas::Step::Write(new, answer) => (Some(AtomicU64::new(new)), Ok(answer)),
            cas::Step::Keep(answer) => (None, Ok(answer)),
            cas::Step::Refuse(denied) => (None, Err(AcquireError::Denied(denied))),
        }
    }

    fn shared(
        &self,
        policy: &Gcra,
        state: &AtomicU64,
        now: Nanos,
        n: u64,
    ) -> Result<R::Out, AcquireError> {
        // The shared limiter's capacity may be smaller than the keys' own.
        let at = at(self, policy, now, n, true)?;
        cas::update(state, |word| self.step(word, &at)).map_err(AcquireError::Denied)
    }
}

/// [`TokenBucket::take_up_to`] as a request on a key's word.
struct TakeUpTo;

impl OnWord for TakeUpTo {
    type Keys = TokenBucketKeys;
    type Out = Partial;
    type Fits = ();

    fn fits(&self, _policy: &Gcra, _n: u64) -> Result<(), AcquireError> {
        // Any `n` (`n >= 1` here: a query is answered before any request is made).
        Ok(())
    }

    fn step(&self, word: u64, at: &Circumstances<'_, ()>) -> cas::Step<Partial, Denied> {
        let taken = at.policy.take_partial(word, at.now, at.n);
        taken.map(|(k, admitted)| Partial::new(k, admitted))
    }
}

/// [`TokenBucket::reserve_n`] as a request on a key's word: waiting at most `max_wait_ns`.
struct Reserve {
    max_wait_ns: u64,
}

/// A reservation's write, and whether it was made on the shared overflow limiter.
#[derive(Clone, Copy)]
struct Taken {
    reserved: Reserved,
    overflow: bool,
}

impl OnWord for Reserve {
    type Keys = TokenBucketKeys;
    type Out = Taken;
    type Fits = ();

    fn fits(&self, policy: &Gcra, n: u64) -> Result<(), AcquireError> {
        // `n >= 1` here.
        policy.check_n(n)?;
        Ok(())
    }

    fn step(&self, word: u64, at: &Circumstances<'_, ()>) -> cas::Step<Taken, Denied> {
        let reserved = at.policy.reserve(word, at.now, at.n, self.max_wait_ns);
        reserved.map(|reserved| Taken {
            reserved,
            overflow: at.overflow,
        })
    }
}

/// A keyed refusal as a reservation's.
fn reserve_error(e: KeyedError) -> ReserveError {
    match e {
        KeyedError::Denied(d) => ReserveError::Denied(d),
        KeyedError::InsufficientCapacity(e) => ReserveError::InsufficientCapacity(e),
        KeyedError::TooManyKeys(e) => ReserveError::TooManyKeys(e),
    }
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, TokenBucketKeys, C> {
    /// Takes as many whole tokens as `key` has now, at most `n` (any `n`), in one decision. The
    /// keyed form of [`TokenBucket::take_up_to`]; `n = 0` is a query that creates no key.
    ///
    /// # Errors
    ///
    /// [`KeyedError::Denied`] for one token when the key has no whole token (nothing is taken);
    /// [`KeyedError::TooManyKeys`] for a new key that found no room under
    /// [`Overflow::Refuse`](super::Overflow::Refuse).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// assert_eq!(limiter.take_up_to_key("a", 3)?.taken(), 3);
    /// assert_eq!(limiter.take_up_to_key("a", u64::MAX)?.taken(), 2); // what was left
    /// assert!(limiter.take_up_to_key("a", 1).is_err());
    /// assert_eq!(limiter.take_up_to_key("b", 9)?.taken(), 5); // its own bucket
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_up_to_key<Q>(&self, key: &Q, n: u64) -> Result<Partial, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.take_up_to_key_at(key, n, self.clock.now())
    }

    /// [`KeyedLimiter::take_up_to_key`] as of `now`, a reading of this limiter's clock.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::take_up_to_key`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// limiter.take_up_to_key_at(&1, 4, Nanos::new(0))?;
    /// assert_eq!(limiter.take_up_to_key_at(&1, 3, Nanos::new(500_000_000))?.taken(), 2);
    /// let query = limiter.take_up_to_key_at(&2, 0, Nanos::new(0))?;
    /// assert_eq!((query.taken(), query.remaining()), (0, 4));
    /// assert!(!limiter.contains_key(&2)); // a query creates no key
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_up_to_key_at<Q>(&self, key: &Q, n: u64, now: Nanos) -> Result<Partial, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let answer = if n == 0 {
            // A query: what the key (or a fresh key, or the overflow limiter) has, as a peek of 0
            // answers it.
            self.peek_key_n_at(key, 0, now)
                .map(|admitted| Partial::new(0, admitted))
        } else {
            self.request_key(&TakeUpTo, key, n, now)
        };
        // One decision per call, as `check_key_n` counts (see `crate::metrics`).
        #[cfg(feature = "metrics")]
        self.observe_decision(&answer);
        answer
    }

    /// Reserves `n` tokens of `key` now, waiting at most `max_wait`: taken now, into debt if they
    /// are not there yet, and the caller's at [`Reservation::ready_at`]. The keyed form of
    /// [`TokenBucket::reserve_n`], with the same semantics (see the
    /// [`reservation`](crate::reservation) module); `n = 0` is a query that creates no key.
    ///
    /// A key in debt is not full, so it is not forgotten before its reservations are ready. A
    /// cancel ([`Reservation::cancel_at`]) at a reading before the latest eviction's gives back
    /// nothing: the key may have been forgotten and created afresh since, and a fresh key must not
    /// receive tokens of a state it never held. Cancelling at the clock's own reading, as
    /// [`Reservation::cancel`] does, never meets this unless the reservation outlived its own
    /// `ready_at` (when nothing goes back anyway). Under
    /// [`Overflow::Shared`](super::Overflow::Shared), a new key that finds no room reserves on the
    /// shared overflow limiter, and its reservation is cancelled there.
    ///
    /// # Errors
    ///
    /// [`ReserveError::Denied`] when the tokens would not be there within `max_wait` (nothing is
    /// reserved); [`ReserveError::InsufficientCapacity`] for `n` above the capacity (of the
    /// shared overflow limiter, for a request sent to it); [`ReserveError::MaxWait`] for
    /// `max_wait` above [`MAX_WAIT`](crate::reservation::MAX_WAIT);
    /// [`ReserveError::TooManyKeys`] for a new key that found no room under
    /// [`Overflow::Refuse`](super::Overflow::Refuse).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// limiter.check_key_n("crawler", 10)?;
    /// let r = limiter.reserve_key_n("crawler", 3, Duration::from_secs(1))?;
    /// assert_eq!(r.delay(), Duration::from_millis(300));
    /// // The debt comes first: the key's next token is there after 400 ms.
    /// let denied = limiter.check_key("crawler").unwrap_err();
    /// assert_eq!(denied.denied().unwrap().retry_after(), Duration::from_millis(400));
    /// // Changed plans: nothing was taken after it, so all 3 go back.
    /// assert_eq!(r.cancel(), 3);
    /// assert_eq!(limiter.check_key("crawler").unwrap_err().denied().unwrap().retry_after(),
    ///            Duration::from_millis(100));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve_key_n<Q>(
        &self,
        key: &Q,
        n: u64,
        max_wait: Duration,
    ) -> Result<Reservation<'_, Self, K>, ReserveError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.reserve_key_n_at(key, n, max_wait, self.clock.now())
    }

    /// [`KeyedLimiter::reserve_key_n`] as of `now`, a reading of this limiter's clock.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::reserve_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// let t = Nanos::new(0);
    /// assert_eq!(limiter.reserve_key_n_at(&1, 2, Duration::ZERO, t)?.delay(), Duration::ZERO);
    /// let r = limiter.reserve_key_n_at(&1, 2, Duration::from_secs(1), t)?;
    /// assert_eq!(r.ready_at(), Nanos::new(1_000_000_000));
    /// assert!(limiter.reserve_key_n_at(&1, 1, Duration::from_millis(400), t).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve_key_n_at<Q>(
        &self,
        key: &Q,
        n: u64,
        max_wait: Duration,
        now: Nanos,
    ) -> Result<Reservation<'_, Self, K>, ReserveError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // One decision per call, as `check_key_n` counts (see `crate::metrics`): a bad `max_wait`
        // decided nothing, and `TooManyKeys` is counted where it is made.
        let max_wait_ns = MaxWaitError::check(max_wait)?;
        let reading = now.clamped();
        let reservation = |tokens, ready, parts| Reservation {
            limiter: self,
            key: key.to_owned(),
            tokens,
            now: reading,
            ready,
            parts,
        };
        // The generation the reservation is made in, or an earlier one: a cancel gives back only
        // in the same one (a quota change since converted the key's state, which holds no
        // record of the reservation; see `keyed::change`).
        let generation = self.store.with_ctx(key, |ctx| ctx.generation);
        if n == 0 {
            // A query: an empty reservation, ready at once, whatever the key holds.
            #[cfg(feature = "metrics")]
            self.observe_decision::<()>(&Ok(()));
            return Ok(reservation(
                0,
                reading,
                Parts::Word {
                    tat: 0,
                    generation: 0,
                },
            ));
        }
        let taken = self.request_key(&Reserve { max_wait_ns }, key, n, now);
        #[cfg(feature = "metrics")]
        self.observe_decision(&taken);
        let taken = taken.map_err(reserve_error)?;
        let tat = taken.reserved.tat;
        let parts = if taken.overflow {
            Parts::Overflow { tat }
        } else {
            Parts::Word { tat, generation }
        };
        Ok(reservation(n, taken.reserved.ready_ns, parts))
    }
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, TokenBucketKeys, C> {
    /// Gives back `n` tokens of `key` now, never filling above the capacity; answers how many went
    /// back (a token that only partly fit counted as one). The keyed form of
    /// [`TokenBucket::refund`]: refund only what an admission of this key took.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// limiter.check_key_n("a", 3)?;
    /// assert_eq!(limiter.refund_key("a", 2), 2);
    /// assert_eq!(limiter.remaining_key("a"), 4);
    /// assert_eq!(limiter.refund_key("a", 100), 1); // capped at the capacity
    /// assert_eq!(limiter.refund_key("b", 1), 0); // a key not held has nothing to get back
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund_key<Q>(&self, key: &Q, n: u64) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.refund_key_at(key, n, self.clock.now())
    }

    /// Gives back `n` tokens of `key` as of `now`, never filling above the capacity and never
    /// moving the key's state before `now`; answers how many went back. Nothing for a key not
    /// held (it is full: forgotten keys are), or at a reading before the latest eviction's (the
    /// key may have been forgotten and created afresh since; see
    /// [`KeyedLimiter::reserve_key_n`]). Tokens a new key took from the shared overflow limiter
    /// are not given back there.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// limiter.check_key_n_at(&1, 5, Nanos::new(0))?;
    /// assert_eq!(limiter.refund_key_at(&1, 1, Nanos::new(0)), 1);
    /// assert_eq!(limiter.remaining_key_at(&1, Nanos::new(0)), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund_key_at<Q>(&self, key: &Q, n: u64, now: Nanos) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.on_held_key(key, now, None, |policy, state, t| {
            cas::update_live(state, |w| policy.refund_up_to(w, t, n))
        })
    }

    /// `give` on `key`'s word at `now`, when the key is held (in `generation`, if given) and
    /// `now` is not before the floor; 0 otherwise. The floor is read after the key's state was
    /// found: an eviction raises the floor before it marks a state gone, and a state created
    /// afresh after that is found only through the table's Acquire loads, so a floor raised by
    /// the eviction that forgot this key is seen here (Relaxed, as in `fresh_at`).
    fn on_held_key<Q>(
        &self,
        key: &Q,
        now: Nanos,
        generation: Option<u64>,
        give: impl Fn(&Gcra, &AtomicU64, Time) -> Result<Result<u64, ()>, Gone>,
    ) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.store
            .with_read(key, |ctx, state| {
                if now.clamped() < self.floor.load(Ordering::Relaxed)
                    || generation.is_some_and(|g| g != ctx.generation)
                {
                    return Ok(0);
                }
                Ok(give(&ctx.policy, state, ctx.policy.time(now))?.unwrap_or(0))
            })
            .and_then(Result::ok)
            .unwrap_or(0)
    }
}

impl<K: Hash + Eq + Clone, C: Clock> Reservation<'_, KeyedLimiter<K, TokenBucketKeys, C>, K> {
    /// Gives the reservation's tokens back now, less those taken from its key after it; answers
    /// how many went back (see [`Reservation::cancel_at`]).
    ///
    /// # Examples
    ///
    /// See [`KeyedLimiter::reserve_key_n`].
    pub fn cancel(self) -> u64 {
        let now = self.limiter.clock.now();
        self.cancel_at(now)
    }

    /// Gives the reservation's tokens back to its key as of `now`, by the rule of
    /// [`Reservation<TokenBucket>::cancel_at`](Reservation::cancel_at): its `n` less the tokens
    /// taken from the key after it, never negative and never above the capacity; nothing at a
    /// reading after [`Reservation::ready_at`]. Also nothing when the key is no longer held, or at
    /// a reading before the latest eviction's (the key may have been forgotten and created
    /// afresh; see [`KeyedLimiter::reserve_key_n`]). A reservation made on the shared overflow limiter
    /// gives back to it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(10)?.with_capacity(4)?, ManualClock::new());
    /// let t = Nanos::new(0);
    /// limiter.check_key_n_at(&7, 4, t)?;
    /// let first = limiter.reserve_key_n_at(&7, 4, Duration::from_secs(1), t)?; // ready at 400 ms
    /// let second = limiter.reserve_key_n_at(&7, 1, Duration::from_secs(1), t)?; // behind it
    /// assert_eq!(first.cancel_at(t), 3); // the token reserved after it stays taken
    /// assert_eq!(second.ready_at(), Nanos::new(500_000_000)); // its promise still holds
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel_at(self, now: Nanos) -> u64 {
        if self.passed(now) {
            return 0;
        }
        let limiter = self.limiter;
        match self.parts {
            Parts::Overflow { tat } => match &limiter.overflow {
                Some(shared) => cas::update(&shared.state, |w| {
                    shared
                        .policy
                        .cancel(w, shared.policy.time(now), self.tokens, tat)
                })
                .unwrap_or(0),
                None => 0,
            },
            Parts::Word { tat, generation } => {
                limiter.on_held_key(&self.key, now, Some(generation), |policy, state, t| {
                    cas::update_live(state, |w| policy.cancel(w, t, self.tokens, tat))
                })
            }
            Parts::Shards { .. } => 0,
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::keyed::{Overflow, TooManyKeys};
    use crate::quota::Quota;
    use crate::TokenBucket;

    const MS: u64 = 1_000_000;

    fn keyed(max_keys: usize) -> KeyedLimiter<u8, TokenBucketKeys, ManualClock> {
        let q = Quota::per_second(10).unwrap().with_capacity(4).unwrap();
        KeyedLimiter::with_clock(q, ManualClock::new()).with_max_keys(max_keys)
    }

    fn direct() -> TokenBucket<ManualClock> {
        let q = Quota::per_second(10).unwrap().with_capacity(4).unwrap();
        TokenBucket::with_clock(q, ManualClock::new())
    }

    #[test]
    fn a_key_reserves_and_takes_as_a_direct_bucket_does() {
        let (k, d) = (keyed(8), direct());
        for (i, n) in [1u64, 3, 4, 2, 0, 5, 1, 1, 4, 7].into_iter().enumerate() {
            let at = Nanos::new(i as u64 * 70 * MS);
            let wait = Duration::from_millis(250);
            match (
                k.reserve_key_n_at(&1, n, wait, at),
                d.reserve_n_at(n, wait, at),
            ) {
                (Ok(a), Ok(b)) => {
                    assert_eq!((a.tokens(), a.ready_at()), (b.tokens(), b.ready_at()));
                    if i % 3 == 0 {
                        assert_eq!(a.cancel_at(at), b.cancel_at(at), "cancel {i}");
                    }
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "request {i}"),
                (a, b) => panic!("request {i}: {a:?} against {b:?}"),
            }
            let at = Nanos::new(at.as_u64() + 30 * MS);
            let (a, b) = (k.take_up_to_key_at(&1, n, at), d.take_up_to_at(n, at));
            assert_eq!(a.map_err(|e| *e.denied().unwrap()), b, "take {i}");
        }
    }

    #[test]
    fn queries_create_no_key_and_write_nothing() {
        let k = keyed(8);
        let before = cas::writes::on_this_thread();
        let r = k
            .reserve_key_n_at(&1, 0, Duration::ZERO, Nanos::new(5))
            .unwrap();
        assert_eq!((r.tokens(), r.delay()), (0, Duration::ZERO));
        assert_eq!(r.cancel_at(Nanos::new(5)), 0);
        assert_eq!(
            k.take_up_to_key_at(&1, 0, Nanos::new(5)).unwrap().taken(),
            0
        );
        assert!(k.is_empty());
        assert!(matches!(
            k.reserve_key_n_at(&1, 5, Duration::ZERO, Nanos::new(5)),
            Err(ReserveError::InsufficientCapacity(_))
        ));
        assert!(matches!(
            k.reserve_key_n_at(&1, 1, Duration::MAX, Nanos::new(5)),
            Err(ReserveError::MaxWait(_))
        ));
        assert!(k.is_empty());
        assert_eq!(cas::writes::on_this_thread(), before);
    }

    #[test]
    fn a_new_key_without_room_gets_the_overflow_policy() {
        let k = keyed(1);
        k.take_up_to_key_at(&1, 1, Nanos::new(0)).unwrap();
        let full = TooManyKeys { max_keys: 1 };
        assert_eq!(
            k.take_up_to_key_at(&2, 1, Nanos::new(0)),
            Err(KeyedError::TooManyKeys(full))
        );
        assert_eq!(
            k.reserve_key_n_at(&2, 1, Duration::ZERO, Nanos::new(0))
                .unwrap_err(),
            ReserveError::TooManyKeys(full)
        );
        // Shared: the overflow limiter (2 a second, capacity 2) takes and reserves, and a
        // reservation made there is cancelled there.
        let shared = keyed(1)
            .with_overflow(Overflow::Shared(Quota::per_second(2).unwrap()))
            .unwrap();
        shared.check_key_at(&1, Nanos::new(0)).unwrap();
        assert_eq!(
            shared
                .take_up_to_key_at(&2, 9, Nanos::new(0))
                .unwrap()
                .taken(),
            2
        );
        let r = shared
            .reserve_key_n_at(&3, 1, Duration::from_secs(1), Nanos::new(0))
            .unwrap();
        assert_eq!(r.delay(), Duration::from_millis(500));
        assert_eq!(r.cancel_at(Nanos::new(0)), 1);
        let denied = shared.check_key_at(&4, Nanos::new(0)).unwrap_err();
        assert_eq!(
            denied.denied().unwrap().retry_after(),
            Duration::from_millis(500)
        );
        assert_eq!(shared.len(), 1);
    }

    #[test]
    fn a_key_in_debt_is_not_forgotten_before_its_reservation_is_ready() {
        let k = keyed(8);
        let t = Nanos::new(0);
        k.check_key_n_at(&1, 4, t).unwrap();
        let r = k
            .reserve_key_n_at(&1, 2, Duration::from_secs(1), t)
            .unwrap();
        assert_eq!(r.ready_at(), Nanos::new(200 * MS));
        // Full again at 600 ms (the 4 taken, then the 2 reserved): not before.
        k.clock().set(Nanos::new(600 * MS));
        assert_eq!(k.retain_recent_at(Nanos::new(599 * MS)), 0);
        assert_eq!(r.cancel_at(Nanos::new(100 * MS)), 0, "below the floor");
        assert_eq!(k.retain_recent_at(Nanos::new(600 * MS)), 1);
    }

    #[test]
    fn a_cancel_after_the_key_was_forgotten_gives_nothing_to_a_fresh_key() {
        let k = keyed(8);
        let t = Nanos::new(0);
        let r = k.reserve_key_n_at(&1, 4, Duration::ZERO, t).unwrap();
        // Forgotten at 400 ms (full again), then created afresh.
        k.clock().set(Nanos::new(400 * MS));
        assert_eq!(k.retain_recent_at(Nanos::new(400 * MS)), 1);
        k.check_key_at(&1, Nanos::new(400 * MS)).unwrap();
        // A cancel at a reading before its ready time, lagging the eviction: nothing goes back.
        assert_eq!(r.cancel_at(t), 0);
        assert_eq!(k.remaining_key_at(&1, Nanos::new(400 * MS)), 3);
    }
}
