//! A keyed limiter's quota, changed at runtime ([`KeyedLimiter::set_quota`],
//! [`KeyedLimiter::set_tier_quota`]).
//!
//! # How
//!
//! Every table of the keyed map carries the *generation* its states are kept under: the policy,
//! the quotas, and what keys not held start from ([`Gen`]). A lookup reads a state and decides
//! with the generation of the table it found the state in, so a state and the policy it is read
//! with always belong together, without a second pointer to load and without a lock.
//!
//! A change builds the new generation, then converts the map one shard at a time under the
//! shard's lock (`Table::convert`): each state is *sealed* (the mark no decision writes over)
//! and its successor, converted by the crate's rule, is placed in a new table carrying the new
//! generation, which is published once every state of the shard is in it. A decision that took
//! effect before the seal is carried over; one that meets the seal took effect nowhere and
//! decides again on the successor (waiting, if it met the seal before the shard's new table was
//! published, for the shard's lock: the only wait a check can meet, and only while a change
//! runs). A new key is created under its shard's lock, in whichever generation that shard holds.
//!
//! # Keys not held
//!
//! A key not held stands for a fresh one (a full bucket, an empty window), which the rule
//! carries like any other state: when the new capacity is above the old one, a key not held at
//! the change has the old capacity's admissions at the change and refills by the new quota from
//! there, exactly as a held key that was full would. So the new generation records, per tier, the
//! change's reading and that carry ([`Settle`]), and a key created while it applies starts from
//! it. Until it is over (the settled state is as full as a fresh one), eviction forgets nothing:
//! a key forgotten then would return fresher than the rule allows. It is over after the time the
//! new quota takes to refill from the old capacity to the new one (for a window algorithm, two
//! windows at most).
//!
//! # Reservations
//!
//! A [`Reservation`](crate::Reservation) made before a change gives nothing back after it: a
//! state converted since holds no record of it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use std::fmt;

use super::{Algorithm, KeyedLimiter};
use crate::algorithm::never_gone;
use crate::algorithm::sealed::Held;
use crate::clock::{Clock, Nanos};
use crate::quota::{Quota, QuotaError};
use std::hash::Hash;

/// Why a keyed limiter's quota was not changed ([`KeyedLimiter::set_quota`],
/// [`KeyedLimiter::set_tier_quota`]). Nothing changed in any case.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedChangeError, KeyedLimiter};
/// use tollgate::Quota;
/// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(Quota::per_second(10)?);
/// let err = limiter.set_tier_quota(1, Quota::per_second(5)?).unwrap_err();
/// assert_eq!(err, KeyedChangeError::NoSuchTier { tier: 1, tiers: 1 });
/// assert_eq!(err.to_string(), "tier must be an index below the number of tiers (1), got 1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedChangeError {
    /// The limiter's algorithm cannot enforce the quota (see [`QuotaError::field`]).
    Quota(QuotaError),
    /// A tier index past the limiter's last tier: a limiter of one quota has tier 0 only.
    NoSuchTier {
        /// The index given.
        tier: usize,
        /// The number of tiers: indices run from 0 below it.
        tiers: usize,
    },
    /// A lookup has been parked since the previous change (a key's `Eq` that blocks, say) and,
    /// after a second's wait, still holds the keys that change replaced: each change keeps one
    /// copy of the map until such readers leave, so one parked reader may hold one copy, never
    /// one per change. Try again once the reader has left.
    ParkedReader {
        /// The replaced keys it holds.
        held: usize,
    },
}

impl From<QuotaError> for KeyedChangeError {
    fn from(e: QuotaError) -> KeyedChangeError {
        KeyedChangeError::Quota(e)
    }
}

impl fmt::Display for KeyedChangeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedChangeError::Quota(e) => e.fmt(f),
            KeyedChangeError::NoSuchTier { tier, tiers } => write!(
                f,
                "tier must be an index below the number of tiers ({tiers}), got {tier}"
            ),
            KeyedChangeError::ParkedReader { held } => write!(
                f,
                "reader: a lookup parked since the previous quota change still holds the {held} keys it replaced; no change until it leaves"
            ),
        }
    }
}

/// The quota's refusal is displayed as it is, so it is not also a source.
impl std::error::Error for KeyedChangeError {}

/// Builds a limiter's policy from its tiers' quotas: one quota, or a tiered limiter's list.
pub(super) type MakePolicy<A> =
    fn(&[Quota]) -> Result<<A as crate::algorithm::sealed::Contract>::Policy, QuotaError>;

/// What keys not held start from after a change: per tier, the whole admissions a fresh key had
/// left at the change's reading `at`, capped at the new capacity.
#[derive(Debug)]
pub(super) struct Settle {
    at: Nanos,
    carry: Box<[u64]>,
}

/// A generation: what every state of a table is kept under (see the module docs). Every check
/// reads its policy; aligned to a cache-line pair so that no other allocation's writes share its
/// lines (measured: two threads admitting on one key ran 0.92-1.02 of the `Floor` unaligned,
/// 0.63-0.80 aligned, the tree before tables carried a policy 0.60-0.98; benches/README.md,
/// eighteenth session). The `Arc`'s counts, written when a table is rebuilt, lie before it.
#[repr(align(128))]
pub(super) struct Gen<A: Algorithm> {
    pub(super) policy: A::Policy,
    pub(super) quotas: Box<[Quota]>,
    /// 0 for the limiter's first quota, one more at each change.
    pub(super) generation: u64,
    settle: Option<Settle>,
    /// Set once the settling is seen to be over (a hint that spares later sweeps the look).
    settled: AtomicBool,
}

/// A table's context: its generation, shared by every table built under it.
pub(super) type Ctx<A> = Arc<Gen<A>>;

impl<A: Algorithm> std::fmt::Debug for Gen<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gen")
            .field("quotas", &self.quotas)
            .field("generation", &self.generation)
            .field("settle", &self.settle)
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm> Gen<A> {
    /// The first generation.
    pub(super) fn first(policy: A::Policy, quotas: Box<[Quota]>) -> Ctx<A> {
        Arc::new(Gen {
            policy,
            quotas,
            generation: 0,
            settle: None,
            settled: AtomicBool::new(true),
        })
    }

    /// The state a key not held starts from in `tier`, while this generation settles (see the
    /// module docs): `None` once settled, or if nothing needs settling.
    #[inline]
    pub(super) fn settling(&self, tier: usize) -> Option<A::State> {
        // Relaxed: a hint; a settling seen unfinished after it ended only builds a state that is
        // as full as a fresh one by then.
        if self.settled.load(Ordering::Relaxed) {
            return None;
        }
        let settle = self.settle.as_ref()?;
        let carry = *settle.carry.get(tier).or(settle.carry.last())?;
        Some(A::settled(&self.policy, tier, carry, settle.at))
    }

    /// Whether keys not held still settle at `now`, so that eviction must wait (see the module
    /// docs). Looks at each tier's settled state; once all are fresh, remembers it.
    pub(super) fn settling_at(&self, now: Nanos) -> bool {
        // Relaxed: as in `settling`.
        if self.settled.load(Ordering::Relaxed) {
            return false;
        }
        for tier in 0..self.quotas.len() {
            if let Some(state) = self.settling(tier) {
                // A probe of our own: eviction's judgment marks it, and it is dropped.
                if !A::evict(&self.policy, &state, now) {
                    return true;
                }
            }
        }
        // Relaxed: as in `settling`.
        self.settled.store(true, Ordering::Relaxed);
        false
    }

    /// The whole admissions a key not held has at `now` in `tier` under this generation.
    fn absent_left(&self, tier: usize, now: Nanos) -> u64 {
        match self.settling(tier) {
            Some(state) => never_gone(A::remaining(&self.policy, Held::Known(&state), now)),
            None => never_gone(A::remaining(
                &self.policy,
                Held::Fresh { tier, at: now },
                now,
            )),
        }
    }

    /// The generation after this one, numbered `generation`, for `quotas` and `policy`, at
    /// reading `at`.
    fn next(&self, generation: u64, policy: A::Policy, quotas: Box<[Quota]>, at: Nanos) -> Gen<A> {
        let mut settle = false;
        let carry: Box<[u64]> = (0..quotas.len())
            .map(|tier| {
                let full = never_gone(A::remaining(&policy, Held::Fresh { tier, at }, at));
                let left = self.absent_left(tier, at).min(full);
                settle |= left < full;
                left
            })
            .collect();
        Gen {
            policy,
            quotas,
            generation,
            settle: settle.then_some(Settle { at, carry }),
            settled: AtomicBool::new(!settle),
        }
    }
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// Replaces the quota of every key (a tiered limiter's first tier) from now on, by the
    /// crate's rule (see [Changing a quota](crate#changing-a-quota)): each key keeps the whole
    /// admissions it had left, at most the new capacity, and refills by the new quota from
    /// there; a key not held counts as a fresh one (so, when the capacity grows, keys first seen
    /// after the change start with the old capacity's admissions and refill to the new one). The
    /// shared overflow limiter ([`Overflow::Shared`](super::Overflow::Shared)) keeps its own
    /// quota.
    ///
    /// Checks run on meanwhile, without a lock; one that meets a key being converted waits for
    /// its shard (one shard's keys at most). Changes are serialized. Until keys not held are as
    /// full as fresh ones again, eviction forgets nothing (see the [module docs](super)).
    ///
    /// # Errors
    ///
    /// [`KeyedChangeError::Quota`], with the errors of [`KeyedLimiter::with_algorithm`], for a
    /// quota this algorithm cannot enforce; [`KeyedChangeError::ParkedReader`] when a lookup parked since the previous change
    /// (a key's `Eq` that blocks) still holds the keys that change replaced after a second's
    /// wait (each change keeps one copy of the map until such a reader leaves, and no second
    /// one is made). Nothing changes then.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let clock = ManualClock::new();
    /// let limiter: KeyedLimiter<&str, _, _> = KeyedLimiter::with_clock(Quota::per_second(10)?, clock.clone());
    /// limiter.check_key_n(&"a", 6)?; // 4 left
    /// limiter.set_quota(Quota::per_second(2)?)?; // at most 2 now
    /// assert_eq!(limiter.remaining_key(&"a"), 2);
    /// assert_eq!(limiter.remaining_key(&"b"), 2); // a fresh key: the new capacity
    /// clock.advance(std::time::Duration::from_secs(1));
    /// assert_eq!(limiter.quota(), Quota::per_second(2)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), KeyedChangeError> {
        self.set_quota_at(quota, self.clock.now())
    }

    /// [`KeyedLimiter::set_quota`] as of `now`, a reading of this limiter's clock.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::set_quota`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// let t = Nanos::new(0);
    /// limiter.set_quota_at(Quota::per_second(10)?, t)?;
    /// // A key first seen now starts with the old capacity, and refills at the new rate.
    /// assert_eq!(limiter.remaining_key_at(&1, t), 2);
    /// assert_eq!(limiter.remaining_key_at(&1, Nanos::new(800_000_000)), 10);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota_at(&self, quota: Quota, now: Nanos) -> Result<(), KeyedChangeError> {
        self.change_tier(0, quota, now)
    }

    /// Replaces the quota of tier `tier` of a tiered limiter ([`KeyedLimiter::with_tiers`]) from
    /// now on, as [`KeyedLimiter::set_quota`] does: keys of that tier are converted by the
    /// crate's rule; keys of the other tiers keep their state exactly.
    ///
    /// # Errors
    ///
    /// [`KeyedChangeError::NoSuchTier`] for a tier past the last; otherwise as
    /// [`KeyedLimiter::set_quota`]. Nothing changes then.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedChangeError, KeyedLimiter, Tiered};
    /// use tollgate::{ManualClock, Quota};
    /// let tiers = [Quota::per_second(1)?, Quota::per_second(10)?];
    /// let limiter: KeyedLimiter<u32, Tiered, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |user: &u32| usize::from(*user >= 1000), ManualClock::new())?;
    /// limiter.set_tier_quota(1, Quota::per_second(100)?)?;
    /// assert_eq!(limiter.tiers(), [Quota::per_second(1)?, Quota::per_second(100)?]);
    /// let err = limiter.set_tier_quota(2, Quota::per_second(1)?).unwrap_err();
    /// assert_eq!(err, KeyedChangeError::NoSuchTier { tier: 2, tiers: 2 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_tier_quota(&self, tier: usize, quota: Quota) -> Result<(), KeyedChangeError> {
        self.set_tier_quota_at(tier, quota, self.clock.now())
    }

    /// [`KeyedLimiter::set_tier_quota`] as of `now`, a reading of this limiter's clock.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::set_tier_quota`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered};
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let tiers = [Quota::per_second(4)?, Quota::per_second(8)?];
    /// let limiter: KeyedLimiter<u32, Tiered, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |user: &u32| usize::from(*user >= 1000), ManualClock::new())?;
    /// let t = Nanos::new(0);
    /// limiter.check_key_n_at(&1, 3, t)?; // tier 0: 1 left
    /// limiter.set_tier_quota_at(1, Quota::per_second(2)?, t)?;
    /// assert_eq!(limiter.remaining_key_at(&1, t), 1); // tier 0 untouched
    /// assert_eq!(limiter.remaining_key_at(&1000, t), 2); // tier 1: the new capacity
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_tier_quota_at(
        &self,
        tier: usize,
        quota: Quota,
        now: Nanos,
    ) -> Result<(), KeyedChangeError> {
        self.change_tier(tier, quota, now)
    }

    /// The change itself: tier `tier` gets `quota` (converted even if it is the same quota, as a
    /// direct limiter's is; the other tiers' keys are moved as they are), then the new
    /// generation, and the map converted to it (see the module docs).
    fn change_tier(&self, tier: usize, quota: Quota, now: Nanos) -> Result<(), KeyedChangeError> {
        let mut latest = crate::sync::lock(&self.latest);
        let mut quotas = latest.quotas.clone();
        let tiers = quotas.len();
        *quotas
            .get_mut(tier)
            .ok_or(KeyedChangeError::NoSuchTier { tier, tiers })? = quota;
        let policy = (self.make_policy)(&quotas)?;
        let changed: Box<[bool]> = (0..tiers).map(|t| t == tier).collect();
        // Never before the floor: a key created afresh is fresh as of it (see the module docs).
        let at = Nanos::new(
            now.clamped()
                .max(self.floor.load(crate::sync::Ordering::Relaxed)),
        );
        // A number no generation had, even one a change cut short by a panic left in some
        // shards: a reservation is given back only in its own generation.
        // Relaxed: changes are serialized by `latest`'s lock.
        let generation = self.generations.fetch_add(1, Ordering::Relaxed) + 1;
        let gen: Ctx<A> = Arc::new(latest.next(generation, policy, quotas, at));
        self.store
            .convert(&gen, |old, new, state| {
                A::converted(&old.policy, &new.policy, state, at, &changed)
            })
            .map_err(|held| KeyedChangeError::ParkedReader { held })?;
        crate::sync::lock(&self.quotas).clone_from(&gen.quotas);
        *latest = gen;
        #[cfg(feature = "tracing")]
        tracing::info!(
            target: "tollgate::keyed",
            generation = latest.generation,
            quotas = ?latest.quotas,
            "quota changed"
        );
        Ok(())
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::KeyedChangeError;
    use crate::clock::{ManualClock, Nanos};
    use crate::keyed::{FixedWindowKeys, KeyedLimiter, Tiered, TokenBucketKeys};
    use crate::quota::Quota;

    const SECOND: u64 = 1_000_000_000;

    /// A change that raises the capacity: keys not held start from the old capacity and refill
    /// to the new one; meanwhile nothing is forgotten (a forgotten key would come back full),
    /// and afterwards eviction forgets full keys again.
    #[test]
    fn keys_not_held_settle_and_eviction_waits_for_them() {
        let clock = ManualClock::new();
        let limiter: KeyedLimiter<u8, TokenBucketKeys, _> =
            KeyedLimiter::with_clock(Quota::per_second(2).unwrap(), clock.clone());
        limiter.check_key_at(&1, Nanos::new(0)).unwrap();
        // 10 a second, bursts of 10: a key not held has 2 at the change, all 10 800 ms later.
        limiter
            .set_quota_at(Quota::per_second(10).unwrap(), Nanos::new(0))
            .unwrap();
        assert_eq!(limiter.remaining_key_at(&2, Nanos::new(0)), 2);
        assert_eq!(limiter.remaining_key_at(&2, Nanos::new(SECOND / 2)), 7);
        assert_eq!(limiter.remaining_key_at(&1, Nanos::new(SECOND / 2)), 6);
        // Key 1 is full again at 900 ms, but keys not held settle until 800 ms only: before
        // then, nothing is forgotten.
        clock.set(Nanos::new(SECOND));
        limiter.check_key_at(&3, Nanos::new(SECOND / 10)).unwrap();
        assert_eq!(limiter.retain_recent_at(Nanos::new(SECOND / 2)), 0);
        assert_eq!(limiter.len(), 2);
        assert_eq!(limiter.retain_recent_at(Nanos::new(SECOND)), 2);
        assert!(limiter.is_empty());
        // Settled: a key first seen now is a fresh one of the new quota.
        assert_eq!(limiter.remaining_key_at(&4, Nanos::new(SECOND)), 10);
    }

    /// A lower capacity needs no settling: keys not held are full of the new quota at once, and
    /// eviction goes on.
    #[test]
    fn a_lower_capacity_settles_at_once() {
        let limiter: KeyedLimiter<u8, TokenBucketKeys, _> =
            KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
        limiter.check_key_at(&1, Nanos::new(0)).unwrap();
        limiter
            .set_quota_at(Quota::per_second(2).unwrap(), Nanos::new(0))
            .unwrap();
        assert_eq!(limiter.remaining_key_at(&1, Nanos::new(0)), 2);
        assert_eq!(limiter.remaining_key_at(&2, Nanos::new(0)), 2);
        assert_eq!(limiter.retain_recent_at(Nanos::new(0)), 1);
    }

    /// A window limiter keeps windows on the clock's epoch; a key not held across a change to a
    /// larger count has the old count in the window of the change, the new one from the next.
    #[test]
    fn a_window_key_not_held_has_the_old_count_until_the_next_window() {
        let limiter: KeyedLimiter<u8, FixedWindowKeys, _> =
            KeyedLimiter::with_algorithm(Quota::per_second(2).unwrap(), ManualClock::new())
                .unwrap();
        let t = Nanos::new(SECOND / 2);
        limiter
            .set_quota_at(Quota::per_second(5).unwrap(), t)
            .unwrap();
        assert!(limiter.check_key_n_at(&9, 2, t).is_ok());
        assert!(limiter.check_key_at(&9, t).is_err());
        assert!(limiter.check_key_n_at(&9, 5, Nanos::new(SECOND)).is_ok());
    }

    /// A tier change leaves the other tiers' keys exactly as they were (fractions included),
    /// and a tier past the last is refused with nothing changed.
    #[test]
    fn a_tier_change_converts_its_tier_only() {
        let tiers = [Quota::per_second(4).unwrap(), Quota::per_second(4).unwrap()];
        let limiter: KeyedLimiter<u8, Tiered, _> =
            KeyedLimiter::with_tiers(&tiers, |k: &u8| usize::from(*k >= 10), ManualClock::new())
                .unwrap();
        let t = Nanos::new(0);
        limiter.check_key_n_at(&1, 4, t).unwrap();
        limiter.check_key_n_at(&10, 4, t).unwrap();
        // 100 ms later each has 0.4 of a token.
        let later = Nanos::new(SECOND / 10);
        limiter
            .set_tier_quota_at(1, Quota::per_second(4).unwrap(), later)
            .unwrap();
        // Tier 0 kept its fraction: its token is back at 250 ms; tier 1's was dropped, at 350.
        let at = Nanos::new(SECOND / 4);
        assert_eq!(limiter.remaining_key_at(&1, at), 1);
        assert_eq!(limiter.remaining_key_at(&10, at), 0);
        assert_eq!(
            limiter.remaining_key_at(&10, Nanos::new(SECOND * 35 / 100)),
            1
        );
        assert_eq!(
            limiter.set_tier_quota_at(2, Quota::per_second(1).unwrap(), later),
            Err(KeyedChangeError::NoSuchTier { tier: 2, tiers: 2 })
        );
        assert_eq!(limiter.tiers(), tiers);
    }

    /// A key whose `Clone` panics while a change copies its shard: the panic reaches the caller,
    /// the quota reported is still the old one, every key is still decided (each with its own
    /// table's policy), and a second change finishes the job.
    #[test]
    fn a_panicking_clone_stops_a_change_and_a_second_one_finishes_it() {
        use std::cell::Cell;
        thread_local! {
            static PANIC_ON_CLONE: Cell<bool> = const { Cell::new(false) };
        }
        #[derive(PartialEq, Eq, Hash, Debug)]
        struct Touchy(u32);
        impl Clone for Touchy {
            fn clone(&self) -> Touchy {
                if PANIC_ON_CLONE.with(Cell::get) && self.0 == 7 {
                    panic!("a key's Clone panicked");
                }
                Touchy(self.0)
            }
        }
        let limiter: KeyedLimiter<Touchy, TokenBucketKeys, _> =
            KeyedLimiter::with_clock(Quota::per_second(4).unwrap(), ManualClock::new());
        let t = Nanos::new(0);
        for k in 0..64 {
            limiter.check_key_n_at(&Touchy(k), 3, t).unwrap();
        }
        PANIC_ON_CLONE.with(|p| p.set(true));
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            limiter.set_quota_at(Quota::per_second(8).unwrap(), t)
        }));
        PANIC_ON_CLONE.with(|p| p.set(false));
        assert!(panicked.is_err());
        assert_eq!(limiter.quota(), Quota::per_second(4).unwrap());
        for k in 0..64 {
            assert_eq!(limiter.remaining_key_at(&Touchy(k), t), 1, "key {k}");
        }
        limiter
            .set_quota_at(Quota::per_second(2).unwrap(), t)
            .unwrap();
        assert_eq!(limiter.quota(), Quota::per_second(2).unwrap());
        for k in 0..64 {
            assert_eq!(limiter.remaining_key_at(&Touchy(k), t), 1, "key {k}");
            assert!(limiter.check_key_at(&Touchy(k), t).is_ok());
            assert!(limiter.check_key_at(&Touchy(k), t).is_err());
        }
        assert_eq!(limiter.remaining_key_at(&Touchy(99), t), 2);
    }

    /// A reservation made before a change gives nothing back after it.
    #[test]
    fn a_reservation_made_before_a_change_gives_nothing_back() {
        let limiter: KeyedLimiter<u8, TokenBucketKeys, _> =
            KeyedLimiter::with_clock(Quota::per_second(4).unwrap(), ManualClock::new());
        let t = Nanos::new(0);
        let before = limiter
            .reserve_key_n_at(&1, 2, std::time::Duration::ZERO, t)
            .unwrap();
        let kept = limiter
            .reserve_key_n_at(&2, 2, std::time::Duration::ZERO, t)
            .unwrap();
        assert_eq!(kept.cancel_at(t), 2);
        limiter
            .set_quota_at(Quota::per_second(4).unwrap(), t)
            .unwrap();
        assert_eq!(before.cancel_at(t), 0);
        assert_eq!(limiter.remaining_key_at(&1, t), 2);
    }
}
