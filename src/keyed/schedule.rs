//! The keyed leaky meter's scheduling: [`KeyedLimiter::schedule_key_n`], a place in each key's
//! virtual queue, through the same protocol that creates and forgets keys for every request.

use std::borrow::Borrow;
use std::hash::Hash;

use super::limiter::Request;
use super::reserve::{Circumstances, OnWord};
use super::{KeyedError, KeyedLimiter, LeakyMeterKeys};
use crate::cas;
use crate::clock::{Clock, Nanos};
use crate::gcra::Gcra;
use crate::leaky::meter::{query_schedule, schedule, schedule_within};
use crate::outcome::{AcquireError, Denied, Scheduled};

/// The meter's scheduling ([`LeakyMeter::try_schedule_n`](crate::leaky::LeakyMeter::try_schedule_n))
/// as a request on a key's word.
/// A place in the key's queue; with `within`, only one that leaves within that long of the
/// reading (else refused, writing nothing), in whole units of the policy the key's state is kept
/// under (a quota change may change the units).
pub(super) struct Schedule {
    pub(super) within: Option<Nanos>,
}

impl OnWord for Schedule {
    type Keys = LeakyMeterKeys;
    type Out = Scheduled;
    /// Whether it takes places (`n >= 1`) rather than asks (`n = 0`).
    type Fits = bool;

    fn fits(&self, policy: &Gcra, n: u64) -> Result<bool, AcquireError> {
        Ok(policy.check_n(n)?)
    }

    fn step(&self, word: u64, at: &Circumstances<'_, bool>) -> cas::Step<Scheduled, Denied> {
        let (policy, now, n) = (at.policy, at.now, at.n);
        match (at.fits, self.within) {
            // A query writes nothing.
            (false, _) => cas::Step::Keep(query_schedule(policy, word, now)),
            (true, None) => schedule(policy, word, now, n),
            (true, Some(max)) => schedule_within(policy, word, now, n, policy.whole_units(max)),
        }
    }
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, LeakyMeterKeys, C> {
    /// Takes a place in `key`'s virtual queue now: the answer says how long to wait before acting
    /// ([`Scheduled::delay`]), or when the key's queue will have room. The keyed form of
    /// [`LeakyMeter::try_schedule`](crate::leaky::LeakyMeter::try_schedule).
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::schedule_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::keyed::{KeyedLimiter, LeakyMeterKeys};
    /// use tollgate::{ManualClock, Quota};
    /// let crawler: KeyedLimiter<String, LeakyMeterKeys, _> =
    ///     KeyedLimiter::with_algorithm(Quota::per_second(2)?, ManualClock::new())?;
    /// assert_eq!(crawler.schedule_key("example.org")?.delay(), Duration::ZERO);
    /// assert_eq!(crawler.schedule_key("example.org")?.delay(), Duration::from_millis(500));
    /// assert_eq!(crawler.schedule_key("example.com")?.delay(), Duration::ZERO); // its own queue
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn schedule_key<Q>(&self, key: &Q) -> Result<Scheduled, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.schedule_key_n_at(key, 1, self.clock.now())
    }

    /// Takes a place in `key`'s virtual queue as of `now`, a reading of this limiter's clock.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::schedule_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, LeakyMeterKeys};
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, LeakyMeterKeys, _> =
    ///     KeyedLimiter::with_algorithm(Quota::per_second(10)?, ManualClock::new())?;
    /// limiter.schedule_key_at(&1, Nanos::new(0))?;
    /// assert_eq!(limiter.schedule_key_at(&1, Nanos::new(30_000_000))?.depart_at(), Nanos::new(100_000_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn schedule_key_at<Q>(&self, key: &Q, now: Nanos) -> Result<Scheduled, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.schedule_key_n_at(key, 1, now)
    }

    /// Takes `n` consecutive places in `key`'s virtual queue now, all or none: the request leaves
    /// after [`Scheduled::delay`] and holds the key's queue for `n` intervals. `n = 0` is a query
    /// that always succeeds and never creates the key. The keyed form of
    /// [`LeakyMeter::try_schedule_n`](crate::leaky::LeakyMeter::try_schedule_n), with its
    /// guarantees per key (departures of one key never closer than the interval, no wait longer
    /// than `(C - n)` intervals).
    ///
    /// Scheduled and strict requests ([`KeyedLimiter::check_key`]) share each key's queue. A key
    /// is forgotten only once its queue is empty again, after its last departure, so eviction
    /// never frees a place that was handed out. A new key that finds no room gets the overflow
    /// policy: [`KeyedError::TooManyKeys`], or a place in the shared overflow meter's queue
    /// ([`Overflow::Shared`](super::Overflow::Shared)).
    ///
    /// Not offered for [`Tiered`](super::Tiered) meters.
    ///
    /// # Errors
    ///
    /// [`KeyedError::Denied`] when the key's queue has no room for `n` now (its `retry_after` is
    /// exact); [`KeyedError::InsufficientCapacity`] when `n` exceeds the capacity;
    /// [`KeyedError::TooManyKeys`] for a new key that found no room under
    /// [`Overflow::Refuse`](super::Overflow::Refuse).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::keyed::{KeyedError, KeyedLimiter, LeakyMeterKeys};
    /// use tollgate::{ManualClock, Quota};
    ///
    /// // Per upstream host: 10 calls a second, no caller kept waiting more than 400 ms.
    /// let hosts: KeyedLimiter<String, LeakyMeterKeys, _> = KeyedLimiter::with_algorithm(
    ///     Quota::per_second(10)?.with_capacity(5)?,
    ///     ManualClock::new(),
    /// )?;
    /// assert_eq!(hosts.schedule_key_n("a.example", 3)?.delay(), Duration::ZERO);
    /// let next = hosts.schedule_key_n("a.example", 2)?;
    /// assert_eq!((next.delay(), next.queued()), (Duration::from_millis(300), 5));
    /// let full = hosts.schedule_key_n("a.example", 1).unwrap_err();
    /// assert_eq!(full.denied().unwrap().retry_after(), Duration::from_millis(100));
    /// assert!(matches!(hosts.schedule_key_n("a.example", 6), Err(KeyedError::InsufficientCapacity(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn schedule_key_n<Q>(&self, key: &Q, n: u64) -> Result<Scheduled, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.schedule_key_n_at(key, n, self.clock.now())
    }

    /// Takes `n` consecutive places in `key`'s virtual queue as of `now`, all or none.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::schedule_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::keyed::{KeyedLimiter, LeakyMeterKeys};
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, LeakyMeterKeys, _> =
    ///     KeyedLimiter::with_algorithm(Quota::per_second(10)?, ManualClock::new())?;
    /// limiter.schedule_key_n_at(&1, 10, Nanos::new(0))?;
    /// let denied = limiter.schedule_key_n_at(&1, 3, Nanos::new(0)).unwrap_err();
    /// assert_eq!(denied.denied().unwrap().retry_after(), Duration::from_millis(300));
    /// let query = limiter.schedule_key_n_at(&1, 0, Nanos::new(0))?;
    /// assert_eq!((query.delay(), query.queued()), (Duration::from_secs(1), 10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn schedule_key_n_at<Q>(&self, key: &Q, n: u64, now: Nanos) -> Result<Scheduled, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // As `check_key_n_at`: a known key is decided by a compare-and-swap on its word; a key
        // not held (or forgotten meanwhile) is created under its shard's lock.
        self.schedule_key_with(&Schedule { within: None }, key, n, now)
    }

    /// `schedule_key_n_at`, refused (writing nothing) when the place would leave more than
    /// `max` after `now`: for the HTTP middleware's `delay_up_to`.
    #[cfg(all(feature = "tower", feature = "tokio"))]
    pub(crate) fn schedule_key_n_within<Q>(
        &self,
        key: &Q,
        n: u64,
        max: std::time::Duration,
        now: Nanos,
    ) -> Result<Scheduled, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let within = Some(Nanos::from(max));
        self.schedule_key_with(&Schedule { within }, key, n, now)
    }

    fn schedule_key_with<Q>(
        &self,
        req: &Schedule,
        key: &Q,
        n: u64,
        now: Nanos,
    ) -> Result<Scheduled, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let known = self
            .store
            .with_read(key, |ctx, state| req.held(&ctx.policy, state, now, n));
        let answer = match known {
            Some(Ok(outcome)) => outcome.map_err(KeyedError::from),
            // A query never creates a key: a key not held has an empty queue (or, while a quota
            // change settles, the settled one).
            _ if n == 0 => self
                .store
                .with_ctx(key, |ctx| match ctx.settling(0) {
                    Some(state) => req.shared(&ctx.policy, &state, now, 0),
                    None => req.create(&ctx.policy, 0, self.fresh_at(now), now, 0).1,
                })
                .map_err(KeyedError::from),
            _ => self.check_new(req, key, n, now),
        };
        #[cfg(feature = "metrics")]
        self.observe_decision(&answer);
        answer
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::keyed::{Overflow, TooManyKeys};
    use crate::quota::Quota;

    const MS: u64 = 1_000_000;

    fn meter(max_keys: usize) -> KeyedLimiter<u8, LeakyMeterKeys, ManualClock> {
        let q = Quota::per_second(10).unwrap().with_capacity(3).unwrap();
        KeyedLimiter::with_algorithm(q, ManualClock::new())
            .unwrap()
            .with_max_keys(max_keys)
    }

    #[test]
    fn each_key_schedules_in_its_own_queue() {
        let m = meter(8);
        let t = Nanos::new(0);
        let delays: Vec<u128> = (0..3)
            .map(|_| m.schedule_key_at(&1, t).unwrap().delay().as_millis())
            .collect();
        assert_eq!(delays, [0, 100, 200]);
        assert!(m.schedule_key_at(&1, t).is_err());
        assert_eq!(m.schedule_key_at(&2, t).unwrap().delay(), Duration::ZERO);
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn scheduled_and_strict_requests_share_a_key_queue() {
        let m = meter(8);
        m.schedule_key_n_at(&1, 2, Nanos::new(0)).unwrap();
        // The strict admission needs the queue empty: 200 ms from now.
        let strict = m.check_key_at(&1, Nanos::new(0)).unwrap_err();
        assert_eq!(
            strict.denied().unwrap().retry_after(),
            Duration::from_millis(200)
        );
        m.check_key_at(&1, Nanos::new(200 * MS)).unwrap();
        // And a scheduling queues behind the strict one.
        let next = m.schedule_key_at(&1, Nanos::new(200 * MS)).unwrap();
        assert_eq!(next.depart_at(), Nanos::new(300 * MS));
    }

    #[test]
    fn a_query_creates_no_key_and_writes_nothing() {
        let m = meter(8);
        let before = cas::writes::on_this_thread();
        let q = m.schedule_key_n_at(&1, 0, Nanos::new(5)).unwrap();
        assert_eq!((q.delay(), q.queued()), (Duration::ZERO, 0));
        assert!(m.is_empty());
        assert!(matches!(
            m.schedule_key_n_at(&1, 4, Nanos::new(5)),
            Err(KeyedError::InsufficientCapacity(_))
        ));
        assert!(m.is_empty());
        assert_eq!(cas::writes::on_this_thread(), before);
    }

    #[test]
    fn a_key_is_forgotten_only_after_its_last_departure() {
        let m = meter(8);
        m.schedule_key_n_at(&1, 3, Nanos::new(0)).unwrap();
        // The queue drains at 300 ms: not before. (An eviction judges no later than the clock.)
        m.clock().set(Nanos::new(300 * MS));
        assert_eq!(m.retain_recent_at(Nanos::new(299 * MS)), 0);
        assert!(m.contains_key(&1));
        assert_eq!(m.retain_recent_at(Nanos::new(300 * MS)), 1);
        assert!(!m.contains_key(&1));
    }

    #[test]
    fn a_new_key_without_room_gets_the_overflow_policy() {
        let m = meter(1);
        m.schedule_key_at(&1, Nanos::new(0)).unwrap();
        assert_eq!(
            m.schedule_key_at(&2, Nanos::new(0)),
            Err(KeyedError::TooManyKeys(TooManyKeys { max_keys: 1 }))
        );
        let shared = meter(1)
            .with_overflow(Overflow::Shared(Quota::per_second(1).unwrap()))
            .unwrap();
        shared.schedule_key_at(&1, Nanos::new(0)).unwrap();
        assert_eq!(
            shared.schedule_key_at(&2, Nanos::new(0)).unwrap().delay(),
            Duration::ZERO
        );
        let second = shared.schedule_key_at(&3, Nanos::new(0)).unwrap_err();
        assert_eq!(
            second.denied().unwrap().retry_after(),
            Duration::from_secs(1)
        );
    }
}
