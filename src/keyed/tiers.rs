//! Tiers: a keyed limiter whose quota is picked per key, from up to 256 tiers
//! ([`KeyedLimiter::with_tiers`]).

use std::borrow::Borrow;
use std::hash::Hash;

use super::algorithm::sealed::TieredPolicy;
use super::{Algorithm, KeyedError, KeyedLimiter, Tiered};
use crate::clock::Clock;
use crate::outcome::Admitted;
use crate::quota::{AlgorithmLimit, Quota, QuotaError};

/// The most tiers a tiered limiter accepts: a key stores its tier in one byte.
const MAX_TIERS: usize = 256;

/// `tiers` tiers refused where at most `max` (and at least one) are accepted.
pub(super) fn tiers_refused(tiers: usize, max: usize) -> QuotaError {
    // usize is at most 64 bits on every target Rust supports.
    let (tiers, max) = (tiers as u64, max as u64);
    QuotaError::Algorithm(AlgorithmLimit::new(
        "keyed limiter",
        "tiers",
        tiers,
        max,
        |l, f| {
            write!(
                f,
                "tiers of a {} must number between 1 and {} (one byte per key), got {}",
                l.algorithm(),
                l.bound(),
                l.got()
            )
        },
    ))
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// The quota of each tier: one, unless built by [`KeyedLimiter::with_tiers`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered};
    /// use tollgate::{ManualClock, Quota};
    /// let tiers = [Quota::per_second(1)?, Quota::per_second(10)?];
    /// let limiter: KeyedLimiter<u32, Tiered, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |user: &u32| usize::from(*user >= 1000), ManualClock::new())?;
    /// assert_eq!(limiter.tiers(), tiers);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn tiers(&self) -> Vec<Quota> {
        crate::sync::lock(&self.quotas).to_vec()
    }

    /// The tier `key` is limited by: the one it was given when first seen while it is held, else
    /// the one it would be given now. 0 unless tiered; an index into [`KeyedLimiter::tiers`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered};
    /// use tollgate::{ManualClock, Quota};
    /// let tiers = [Quota::per_second(1)?, Quota::per_second(10)?];
    /// let limiter: KeyedLimiter<u32, Tiered, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |user: &u32| usize::from(*user >= 1000), ManualClock::new())?;
    /// assert_eq!(limiter.tier_of_key(&7), 0);
    /// assert_eq!(limiter.tier_of_key(&1234), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn tier_of_key<Q>(&self, key: &Q) -> usize
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if self.pick.is_none() {
            return 0;
        }
        let last = self.tier_count.saturating_sub(1);
        // A state's tier survives eviction's mark and a rebuild's seal: read it as it is.
        match self.store.with_read(key, |_, state| Ok(A::tier_of(state))) {
            Some(Ok(tier)) => tier.min(last),
            // Not held (the lookup never answers `Gone` here): the tier it would be given.
            Some(Err(crate::cas::Gone)) | None => self.tier_of(&key.to_owned()).min(last),
        }
    }

    /// The tier of a new key: 0 unless tiered.
    pub(super) fn tier_of(&self, key: &K) -> usize {
        self.pick.as_ref().map_or(0, |pick| pick(key))
    }
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, Tiered<A>, C> {
    /// A keyed limiter running algorithm `A` with a quota chosen per key: `pick` is called with
    /// a new key (one the limiter does not hold) and answers the index of its tier in `tiers`; the
    /// key keeps that tier while it is held. An index past the end is taken as the last tier.
    ///
    /// A key that is forgotten (its state fresh again, see the [module docs](super)) is picked
    /// again when it returns, so a tier change (an upgraded customer) takes effect once the key has
    /// been idle long enough to be forgotten, never in the middle of its limit. A key costs one
    /// byte more, padded to its state's alignment: 16 bytes instead of 8 for the one-word
    /// algorithms. `pick` runs under the key's shard lock: keep it short, and do not call
    /// the limiter from it.
    ///
    /// # Errors
    ///
    /// [`QuotaError::Algorithm`] naming `"tiers"` for no tiers or more than 256; the errors of
    /// [`KeyedLimiter::with_algorithm`] for any tier's quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered, TokenBucketKeys};
    /// use tollgate::{ManualClock, Quota, QuotaError};
    ///
    /// #[derive(Clone, Hash, PartialEq, Eq)]
    /// struct ApiKey { id: u64, paid: bool }
    ///
    /// let tiers = [Quota::per_minute(60)?, Quota::per_minute(6000)?];
    /// let limiter: KeyedLimiter<ApiKey, Tiered<TokenBucketKeys>, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |k: &ApiKey| usize::from(k.paid), ManualClock::new())?;
    /// assert_eq!(limiter.check_key(&ApiKey { id: 1, paid: false })?.remaining(), 59);
    /// assert_eq!(limiter.check_key(&ApiKey { id: 2, paid: true })?.remaining(), 5999);
    ///
    /// let none: Result<KeyedLimiter<u8, Tiered, ManualClock>, _> =
    ///     KeyedLimiter::with_tiers(&[], |_: &u8| 0, ManualClock::new());
    /// let QuotaError::Algorithm(limit) = none.unwrap_err() else { unreachable!() };
    /// assert_eq!((limit.field(), limit.got(), limit.bound()), ("tiers", 0, 256));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_tiers(
        tiers: &[Quota],
        pick: impl Fn(&K) -> usize + Send + Sync + 'static,
        clock: C,
    ) -> Result<Self, QuotaError> {
        if tiers.is_empty() || tiers.len() > MAX_TIERS {
            return Err(tiers_refused(tiers.len(), MAX_TIERS));
        }
        Ok(KeyedLimiter::build(
            tiered_policy::<A>(tiers)?,
            tiers.into(),
            tiered_policy::<A>,
            Some(Box::new(pick)),
            clock,
        ))
    }
}

/// The policies of `tiers`' quotas, one per tier.
fn tiered_policy<A: Algorithm>(tiers: &[Quota]) -> Result<TieredPolicy<A::Policy>, QuotaError> {
    Ok(TieredPolicy(
        tiers
            .iter()
            .map(A::policy)
            .collect::<Result<Box<[_]>, QuotaError>>()?,
    ))
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// [`KeyedLimiter::check_key_n`], with the tier that limits `key` (an index into
    /// [`KeyedLimiter::tiers`], as [`KeyedLimiter::tier_of_key`] answers) learned from the same
    /// lookup: the tier of the state the decision was made on. For a caller that describes the
    /// decision by its tier (the HTTP layer's fields), so that it does not hash and probe the
    /// table a second time. A key not held yet takes the path of a new key, and its tier is
    /// asked after it (that path already takes its shard's lock). 0 unless tiered.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered};
    /// use tollgate::{ManualClock, Quota};
    /// let tiers = [Quota::per_second(1)?, Quota::per_second(10)?];
    /// let limiter: KeyedLimiter<u32, Tiered, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |user: &u32| usize::from(*user >= 1000), ManualClock::new())?;
    /// let (tier, answer) = limiter.check_key_n_and_tier(&1234, 1);
    /// assert_eq!((tier, answer?.remaining()), (1, 9));
    /// let (tier, answer) = limiter.check_key_n_and_tier(&7, 1);
    /// assert_eq!((tier, answer?.remaining()), (0, 0));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_key_n_and_tier<Q>(&self, key: &Q, n: u64) -> (usize, Result<Admitted, KeyedError>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // The known key's path of `check_key_n`, its decision tagged with the tier of the state
        // it decided on (the state whose policy describes it: a growth or a quota change may
        // send the decision to a successor, which keeps its tier).
        match self.decide_known(key, n, || self.clock.now(), A::tier_of) {
            (_, Some((tier, answer))) => {
                let answer = answer.map_err(KeyedError::from);
                #[cfg(feature = "metrics")]
                self.observe_decision(&answer);
                (tier.min(self.tier_count.saturating_sub(1)), answer)
            }
            // Decided out of line, as `check_key_n` decides it, then the tier asked.
            (now, None) => {
                let answer = self.check_unknown(key, n, now);
                (self.tier_of_key(key), answer)
            }
        }
    }
}
