//! What keeps a keyed limiter's memory bounded without changing a decision: the bound on the keys
//! held and the reservation that enforces it, the overflow policy for newcomers that find no room,
//! eviction (on demand and the automatic sweeps) and the floor that makes forgetting lossless. See
//! the module docs of [`keyed`](super).

use std::hash::Hash;

use crossbeam_utils::CachePadded;

use super::limiter::Request;
use super::{Algorithm, KeyedError, KeyedLimiter, TooManyKeys};
use crate::clock::{Clock, Nanos};
use crate::quota::{Quota, QuotaError};
use crate::sync::{AtomicBool, Ordering};

/// The default bound on the number of keys: 2^20.
pub(super) const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// The fewest new keys between two automatic sweeps (fewer when the bound itself is smaller).
const MIN_SWEEP_EVERY: usize = 256;

/// What a [`KeyedLimiter`] does with a new key when every place is taken by an active key.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter, Overflow};
/// use tollgate::{ManualClock, Quota};
///
/// let refusing: KeyedLimiter<u32, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
///     .with_max_keys(1);
/// refusing.check_key(&1).unwrap();
/// assert!(matches!(refusing.check_key(&2), Err(KeyedError::TooManyKeys(_))));
///
/// let sharing: KeyedLimiter<u32, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
///     .with_max_keys(1)
///     .with_overflow(Overflow::Shared(Quota::per_second(2)?))?;
/// sharing.check_key(&1).unwrap();
/// assert!(sharing.check_key(&2).is_ok()); // the shared bucket's first token
/// assert!(sharing.check_key(&3).is_ok()); // its second
/// assert!(sharing.check_key(&4).is_err()); // shared: 2 per second for all newcomers together
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// Non-exhaustive: other policies may be added, so a `match` outside this crate needs a wildcard
/// arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Overflow {
    /// Refuse the request with [`KeyedError::TooManyKeys`] (the default).
    #[default]
    Refuse,
    /// Limit every request that finds no room by one shared limiter of the same algorithm, with
    /// this quota (its own capacity; it starts full, as of the clock's reading when
    /// [`KeyedLimiter::with_overflow`] is called, like a direct limiter built then: a reading
    /// before that one finds it not yet full).
    Shared(Quota),
}

/// The shared limiter of [`Overflow::Shared`].
pub(super) struct OverflowLimiter<A: Algorithm> {
    pub(super) policy: A::Policy,
    pub(super) quota: Quota,
    pub(super) state: CachePadded<A::State>,
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// Bounds the number of keys held at once (any value is accepted; 0 sends every key to the
    /// overflow policy).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<u32> = KeyedLimiter::new(tollgate::Quota::per_second(1)?).with_max_keys(10);
    /// assert_eq!(limiter.max_keys(), 10);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[must_use]
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Chooses what a new key gets when every place is held by an active key.
    ///
    /// # Errors
    ///
    /// For [`Overflow::Shared`], the errors of [`KeyedLimiter::with_algorithm`] for its quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Overflow};
    /// use tollgate::Quota;
    /// let limiter: KeyedLimiter<u32> = KeyedLimiter::new(Quota::per_second(10)?)
    ///     .with_max_keys(1000)
    ///     .with_overflow(Overflow::Shared(Quota::per_second(100)?))?;
    /// assert_eq!(limiter.overflow(), Overflow::Shared(Quota::per_second(100)?));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_overflow(mut self, overflow: Overflow) -> Result<Self, QuotaError> {
        self.overflow = match overflow {
            Overflow::Refuse => None,
            Overflow::Shared(quota) => {
                let mut policy = A::policy(&quota)?;
                let now = self.clock.now();
                // One limiter built now, like a direct one: its units start at `now`.
                A::begin(&mut policy, now);
                let state = A::fresh(&policy, 0, now);
                Some(OverflowLimiter {
                    policy,
                    quota,
                    state: CachePadded::new(state),
                })
            }
        };
        Ok(self)
    }

    /// Removes every key whose state is indistinguishable from a fresh one now (a full bucket, an empty queue), and
    /// answers how many it removed. Lossless: see the [module docs](super).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{Clock, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock.clone());
    /// limiter.check_key(&1).unwrap();
    /// assert_eq!(limiter.retain_recent(), 0); // key 1 is not full yet
    /// clock.advance(std::time::Duration::from_secs(1));
    /// assert_eq!(limiter.retain_recent(), 1);
    /// assert!(limiter.is_empty());
    /// assert!(limiter.check_key(&1).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn retain_recent(&self) -> usize {
        self.retain_recent_at(self.clock.now())
    }

    /// Removes every key whose state is indistinguishable from a fresh one as of `now`, or as of
    /// the clock's reading if `now` is ahead of it: an eviction never judges ahead of the clock, so
    /// a wrong, far-future reading cannot lock other keys out (see the [module docs](super)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{Clock, ManualClock, Nanos, Quota};
    /// let clock = ManualClock::starting_at(Nanos::new(1_000_000_000)); // reads 1 s
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock.clone());
    /// limiter.check_key_at(&1, Nanos::new(0)).unwrap();
    /// assert_eq!(limiter.retain_recent_at(Nanos::new(999_999_999)), 0);
    /// assert_eq!(limiter.retain_recent_at(Nanos::new(1_000_000_000)), 1);
    /// assert_eq!(limiter.evictions(), 1);
    ///
    /// // Key 2 is used at 1 s; a reading years ahead judges at the clock's 1 s and keeps it.
    /// limiter.check_key_at(&2, clock.now()).unwrap();
    /// assert_eq!(limiter.retain_recent_at(Nanos::new(u64::MAX)), 0);
    /// assert!(limiter.check_key_at(&3, clock.now()).is_ok()); // a new key is not locked out
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn retain_recent_at(&self, now: Nanos) -> usize {
        // Never forget as of a reading ahead of the clock: a wrong, far-future reading would
        // otherwise raise the floor past every real reading, and every key created afresh would
        // be refused until then (see "A reading from the future" in the module docs).
        let now = now.min(self.clock.now());
        // Timed for the sweep's event only.
        #[cfg(feature = "tracing")]
        let started = std::time::Instant::now();
        // The floor rises before any key is marked gone. Relaxed is enough: a thread that
        // re-creates a forgotten key first sees its mark (written with Release after this store,
        // seen through an Acquire fence) or finds it removed (under the shard's lock, taken after
        // the sweep released it; or, looking without the lock, through the Acquire load of the
        // removed slot's control byte or of the table rebuilt after it), either of which makes
        // this store visible to its load of the floor.
        self.floor.fetch_max(now.clamped(), Ordering::Relaxed);
        // Each key is marked gone by one compare-and-swap from the state judged fresh, racing any
        // decision on it (see the module docs), then removed if it still holds that state. A
        // state another eviction marked and has not removed yet is removed too (only one remover
        // succeeds, and only it gives the place back).
        // While a quota change settles, keys not held start from less than a fresh state (see
        // `keyed::change`): forgetting one then would bring it back fresher than that, so none
        // is forgotten (looked at once per generation met).
        let mut settling: Option<(*const super::change::Gen<A>, bool)> = None;
        let removed = self.store.retain(|ctx, state| {
            let gen: &super::change::Gen<A> = ctx;
            let wait = match settling {
                Some((seen, wait)) if std::ptr::eq(seen, gen) => wait,
                _ => {
                    let wait = gen.settling_at(now);
                    settling = Some((gen, wait));
                    wait
                }
            };
            (!wait && A::evict(&gen.policy, state, now)) || A::is_gone(state)
        });
        self.release(removed);
        // Relaxed: a statistic.
        self.evictions.fetch_add(
            u64::try_from(removed).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        #[cfg(feature = "tracing")]
        self.observe_sweep(removed, Some(started.elapsed()));
        #[cfg(all(feature = "metrics", not(feature = "tracing")))]
        self.observe_sweep(removed, None);
        // Last: the removed keys are dropped here (if no lookup still holds them), after the
        // books are settled, so a key whose `Drop` panics leaves the count of keys right.
        self.store.reclaim_now();
        removed
    }

    /// Gives the memory of removed keys back, as far as the map's shards allow.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let clock = ManualClock::starting_at(Nanos::new(1_000_000_000)); // reads 1 s
    /// let limiter: KeyedLimiter<u32, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock);
    /// for k in 0..1000 {
    ///     limiter.check_key_at(&k, Nanos::new(0)).unwrap();
    /// }
    /// limiter.retain_recent_at(Nanos::new(1_000_000_000));
    /// limiter.shrink_to_fit();
    /// assert!(limiter.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn shrink_to_fit(&self) {
        self.store.shrink_to_fit();
    }

    /// The bound on the number of keys.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// assert_eq!(limiter.max_keys(), 1 << 20);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The overflow policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Overflow};
    /// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// assert_eq!(limiter.overflow(), Overflow::Refuse);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn overflow(&self) -> Overflow {
        match &self.overflow {
            None => Overflow::Refuse,
            Some(shared) => Overflow::Shared(shared.quota),
        }
    }

    /// Keys removed by eviction so far (automatic and on demand).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let clock = ManualClock::starting_at(Nanos::new(2_000_000_000)); // reads 2 s
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock);
    /// limiter.check_key_at(&1, Nanos::new(0)).unwrap();
    /// limiter.retain_recent_at(Nanos::new(2_000_000_000));
    /// assert_eq!(limiter.evictions(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn evictions(&self) -> u64 {
        // Relaxed: a statistic.
        self.evictions.load(Ordering::Relaxed)
    }

    /// Requests from new keys that found no room and got the overflow policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
    ///     .with_max_keys(1);
    /// limiter.check_key(&1).unwrap();
    /// limiter.check_key(&2).unwrap_err();
    /// assert_eq!(limiter.overflowed(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn overflowed(&self) -> u64 {
        // Relaxed: a statistic.
        self.overflowed.load(Ordering::Relaxed)
    }

    /// Removed keys whose memory is not yet freed: a lookup that began before a key was removed
    /// may still read it, so it is freed once every such lookup has ended (at the next write,
    /// sweep or [`shrink_to_fit`](Self::shrink_to_fit) that finds them ended). Normally a handful;
    /// while it is at [`max_keys`](Self::max_keys) (a thread parked inside a lookup, in a key's
    /// `Eq`), new keys get the overflow policy, so the memory held stays bounded. The keys a quota
    /// change replaced (its old copy of the map: see the module docs, "Changing the quota") count
    /// here too until they are freed.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let clock = ManualClock::starting_at(Nanos::new(2_000_000_000)); // reads 2 s
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock);
    /// limiter.check_key_at(&1, Nanos::new(0)).unwrap();
    /// limiter.retain_recent_at(Nanos::new(2_000_000_000));
    /// assert_eq!(limiter.unreclaimed(), 0); // no lookup was running: freed at once
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn unreclaimed(&self) -> usize {
        self.store.unreclaimed()
    }

    /// The reading a key created afresh at `now` is fresh as of: `max(now, floor)`.
    #[inline]
    pub(super) fn fresh_at(&self, now: Nanos) -> Nanos {
        // Relaxed: see `retain_recent_at`; callers creating a key hold its shard's lock, and
        // callers that found the key's state gone have passed the Acquire fence of `Gone::seen`.
        let floor = self.floor.load(Ordering::Relaxed);
        Nanos::new(now.clamped().max(floor))
    }

    /// Whether a place is left for a new key now (a snapshot: [`Self::reserve`] decides): fewer
    /// than `max_keys` keys held, and fewer than `max_keys` removed keys waiting for a reader to
    /// leave before they are freed (see "Bounded memory" in the module docs).
    #[inline]
    pub(super) fn has_room(&self) -> bool {
        // Relaxed: a snapshot of the count, as in `peek_key_n_at`; the reservation that follows
        // is the read-modify-write that keeps the bound.
        self.keys.load(Ordering::Relaxed) < self.max_keys
            && self.store.unreclaimed() < self.max_keys
    }

    /// Frees the removed keys no reader holds, if they are what keeps new keys out; answers
    /// whether that made room.
    #[cold]
    pub(super) fn reclaimed_room(&self) -> bool {
        if self.store.unreclaimed() < self.max_keys {
            return false;
        }
        self.store.reclaim_now();
        self.has_room()
    }

    /// Reserves a place for a new key, if one is left.
    pub(super) fn reserve(&self) -> bool {
        // Relaxed: the count is one atomic moved only by read-modify-writes, whose total order is
        // all the bound needs; the map entries themselves are ordered by the shard locks.
        let reserved = self
            .keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                (k < self.max_keys).then_some(k + 1)
            })
            .is_ok();
        #[cfg(feature = "metrics")]
        if reserved {
            self.observe_added();
        }
        reserved
    }

    /// Gives back `n` places (of removed keys, or of reservations not used).
    pub(super) fn release(&self, n: usize) {
        if n > 0 {
            // Relaxed: as in `reserve`.
            self.keys.fetch_sub(n, Ordering::Relaxed);
            #[cfg(feature = "metrics")]
            self.observe_released(n);
        }
    }

    /// Counts a new key (or a refused one) towards the next sweep, and runs the sweep if it is due
    /// and no other thread is running one. Answers whether this call swept any key away.
    pub(super) fn note_new_key(&self, now: Nanos) -> bool {
        // Relaxed: a heuristic trigger; an imprecise count only moves a sweep a little.
        let since = self.since_sweep.fetch_add(1, Ordering::Relaxed) + 1;
        let every = MIN_SWEEP_EVERY
            .min(self.max_keys)
            .max(self.len() / 2)
            .max(1);
        if since < every {
            return false;
        }
        // Acquire/Release pair the flag between successive sweepers; it guards only against
        // duplicated work (sweeps are safe to run concurrently), not any data.
        if self
            .sweeping
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        /// Lowers the flag however the sweep ends: a key's `Drop` may panic in it (the panic
        /// reaches this request's caller), and the sweeps after it must still run.
        struct Lower<'a>(&'a AtomicBool);
        impl Drop for Lower<'_> {
            fn drop(&mut self) {
                // Release: pairs with the Acquire of the next sweeper's compare-and-swap.
                self.0.store(false, Ordering::Release);
            }
        }
        let _lower = Lower(&self.sweeping);
        // Relaxed: as above.
        self.since_sweep.store(0, Ordering::Relaxed);
        self.retain_recent_at(now) > 0
    }

    /// A request from a new key that found no room.
    #[cold]
    pub(super) fn overflow_take<R: Request<A>>(
        &self,
        req: &R,
        n: u64,
        now: Nanos,
    ) -> Result<R::Out, KeyedError> {
        // Relaxed: a statistic; it orders nothing.
        let _nth = self
            .overflowed
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        self.observe_overflow(_nth, self.overflow.is_none());
        match &self.overflow {
            None => Err(KeyedError::TooManyKeys(TooManyKeys {
                max_keys: self.max_keys,
            })),
            Some(shared) => req
                .shared(&shared.policy, &shared.state, now, n)
                .map_err(KeyedError::from),
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::keyed::TokenBucketKeys;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn keys_created_after_an_eviction_are_full_as_of_the_floor() {
        let limiter: KeyedLimiter<u8, TokenBucketKeys, ManualClock> = KeyedLimiter::with_clock(
            Quota::per_second(10).unwrap(),
            ManualClock::starting_at(Nanos::new(2 * SEC)),
        );
        limiter.retain_recent_at(Nanos::new(2 * SEC));
        // A reading 300 ms before the floor sees a new key 3 tokens short of full.
        assert_eq!(
            limiter.remaining_key_at(&1, Nanos::new(2 * SEC - 3 * SEC / 10)),
            7
        );
        assert_eq!(limiter.remaining_key_at(&1, Nanos::new(2 * SEC)), 10);
        // And the floor never moves back.
        limiter.retain_recent_at(Nanos::new(SEC));
        assert_eq!(limiter.remaining_key_at(&1, Nanos::new(SEC)), 0);
    }

    #[test]
    fn reservations_stop_at_the_bound_and_release_gives_them_back() {
        let limiter: KeyedLimiter<u8, TokenBucketKeys, ManualClock> =
            KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), ManualClock::new())
                .with_max_keys(2);
        assert!(limiter.reserve());
        assert!(limiter.reserve());
        assert!(!limiter.reserve());
        assert_eq!(limiter.len(), 2);
        limiter.release(1);
        assert!(limiter.reserve());
        limiter.release(2);
        assert!(limiter.is_empty());
    }
}
