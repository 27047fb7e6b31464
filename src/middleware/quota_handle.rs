//! Changing a layer's quota at runtime: [`QuotaHandle`], which the application keeps, the
//! [`ChangeQuota`] capability a limiter behind [`Global`](super::Global) offers, and
//! [`SetQuotaError`].
//!
//! A change goes to the backend's limiter first (which converts its state by the crate's one rule,
//! see the crate docs, "Changing a quota"), then to the layer's policies: the `RateLimit-Policy`
//! values are rebuilt and swapped in behind the crate's quota pointer, which requests read
//! without a lock, as a direct limiter's checks read their quota.

use std::any::type_name;
use std::fmt;
use std::sync::Arc;

use super::fields::PolicyNameError;
use crate::keyed::KeyedChangeError;
use crate::quota::{Quota, QuotaError};

/// Why a quota could not be changed. Nothing changed.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::middleware::{peer_ip, Keyed, LimitLayer, SetQuotaError};
/// use tollgate::{KeyedLimit, Quota};
/// // A limiter behind a trait object cannot say whether it can change: it refuses.
/// let shared: Arc<dyn KeyedLimit<std::net::IpAddr>> = Arc::new(KeyedLimiter::new(Quota::per_second(5)?));
/// let layer = LimitLayer::new(Keyed::new(shared), peer_ip()).build()?;
/// let err = layer.quota_handle().set_quota(Quota::per_second(50)?).unwrap_err();
/// assert!(matches!(err, SetQuotaError::Unsupported { .. }));
/// assert!(err.to_string().contains("KeyedLimit"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetQuotaError {
    /// The limiter behind the layer cannot change its quota at runtime (one behind a trait
    /// object, one of one's own, several Redis limits; every limiter of this crate in process,
    /// keyed ones included, and a single Redis limiter can).
    Unsupported {
        /// The type of what refused, as Rust names it.
        limiter: &'static str,
    },
    /// `tier` is past the last of the backend's tiers (or limits).
    NoSuchTier {
        /// The tier asked for.
        tier: usize,
        /// How many there are: tiers `0` to `tiers - 1` exist.
        tiers: usize,
    },
    /// The limiter's algorithm cannot enforce the quota (see [`QuotaError::field`]).
    Quota(QuotaError),
    /// A keyed limiter's change waited for a lookup parked since its previous change, in vain
    /// ([`KeyedChangeError::ParkedReader`](crate::keyed::KeyedChangeError::ParkedReader)).
    ParkedReader {
        /// The replaced keys the parked lookup holds.
        held: usize,
    },
    /// The Redis limiter's script cannot carry the quota (see
    /// [`BuildError::field`](crate::redis::BuildError::field)).
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    Redis(crate::redis::BuildError),
    /// A policy's `RateLimit-Policy` value under the new quota is not printable ASCII, so it
    /// cannot be sent. The names are checked when the layer is built and the rest is digits, so
    /// this is not expected; it is answered rather than panicked on.
    PolicyName(PolicyNameError),
}

impl fmt::Display for SetQuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetQuotaError::Unsupported { limiter } => write!(
                f,
                "set_quota: {limiter} cannot change its quota at runtime; direct limiters \
                 (TokenBucket, the windows, LeakyMeter, any Direct), ShardedBucket and \
                 RedisLimiter can"
            ),
            SetQuotaError::NoSuchTier { tier, tiers } => write!(
                f,
                "tier must be between 0 and {} (the backend has {tiers}), got {tier}",
                tiers.saturating_sub(1)
            ),
            SetQuotaError::Quota(e) => write!(f, "set_quota: {e}"),
            SetQuotaError::ParkedReader { held } => write!(
                f,
                "set_quota: a lookup parked since the previous quota change still holds the {held} keys it replaced; no change until it leaves"
            ),
            #[cfg(feature = "redis")]
            SetQuotaError::Redis(e) => write!(f, "set_quota: {e}"),
            SetQuotaError::PolicyName(e) => write!(f, "set_quota: {e}"),
        }
    }
}

impl std::error::Error for SetQuotaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SetQuotaError::Quota(e) => Some(e),
            #[cfg(feature = "redis")]
            SetQuotaError::Redis(e) => Some(e),
            SetQuotaError::PolicyName(e) => Some(e),
            _ => None,
        }
    }
}

impl From<QuotaError> for SetQuotaError {
    fn from(e: QuotaError) -> SetQuotaError {
        SetQuotaError::Quota(e)
    }
}

/// A keyed limiter's refusal, as the layer's handle reports it: the same three cases.
impl From<KeyedChangeError> for SetQuotaError {
    fn from(e: KeyedChangeError) -> SetQuotaError {
        match e {
            KeyedChangeError::Quota(e) => SetQuotaError::Quota(e),
            KeyedChangeError::NoSuchTier { tier, tiers } => {
                SetQuotaError::NoSuchTier { tier, tiers }
            }
            KeyedChangeError::ParkedReader { held } => SetQuotaError::ParkedReader { held },
        }
    }
}

/// A limiter whose quota a [`QuotaHandle`] may change: what [`Global`](super::Global) asks of
/// its limiter. The default answers [`SetQuotaError::Unsupported`]: a limiter that cannot change
/// its quota implements it with an empty body, and one that learns to later overrides it without
/// changing anyone's code.
///
/// Implemented by every [`Direct`](crate::Direct) limiter, the
/// [`ShardedBucket`](crate::ShardedBucket) and the sub-window counter (changing their quota), by
/// the [`KeyedLimiter`](crate::keyed::KeyedLimiter) (`index` picks the tier), by [`AllOf`](crate::AllOf)
/// (`index` picks the limit) and a metered limiter (feature `metrics`) as their limiters do, and
/// through `&L`, `Box<L>` and `Arc<L>`.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::ChangeQuota;
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
/// ChangeQuota::change_quota(&bucket, 0, Quota::per_second(50)?)?;
/// assert_eq!(Limiter::quota(&bucket), Quota::per_second(50)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A limiter of one's own that cannot change:
///
/// ```
/// use tollgate::middleware::ChangeQuota;
/// struct Fixed;
/// impl ChangeQuota for Fixed {}
/// assert!(Fixed.change_quota(0, tollgate::Quota::per_second(1)?).is_err());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait ChangeQuota {
    /// Replaces the quota of limit `index` (`0` for a limiter with one limit; a tier of a tiered
    /// limiter), as the limiter's own `set_quota` does.
    ///
    /// # Errors
    ///
    /// [`SetQuotaError::Unsupported`] (the default), [`SetQuotaError::NoSuchTier`] for an index
    /// past the limiter's limits, [`SetQuotaError::Quota`] when the algorithm cannot enforce
    /// `quota`; nothing changes then.
    ///
    /// # Examples
    ///
    /// See [`ChangeQuota`].
    fn change_quota(&self, index: usize, quota: Quota) -> Result<(), SetQuotaError> {
        let _ = (index, quota);
        Err(SetQuotaError::Unsupported {
            limiter: type_name::<Self>(),
        })
    }
}

impl<A: crate::algorithm::Algorithm, C: crate::clock::Clock> ChangeQuota
    for crate::limiter::Direct<A, C>
{
    fn change_quota(&self, index: usize, quota: Quota) -> Result<(), SetQuotaError> {
        only_limit(index)?;
        Ok(self.set_quota(quota)?)
    }
}

/// Limit 0, the only one, or [`SetQuotaError::NoSuchTier`].
fn only_limit(index: usize) -> Result<(), SetQuotaError> {
    if index == 0 {
        Ok(())
    } else {
        Err(SetQuotaError::NoSuchTier {
            tier: index,
            tiers: 1,
        })
    }
}

impl<C: crate::clock::Clock> ChangeQuota for crate::sharded::ShardedBucket<C> {
    fn change_quota(&self, index: usize, quota: Quota) -> Result<(), SetQuotaError> {
        only_limit(index)?;
        // Any valid quota fits the sharded bucket: its `set_quota` cannot fail.
        self.set_quota(quota);
        Ok(())
    }
}

impl<C: crate::clock::Clock> ChangeQuota for crate::window::sub_window::SubWindowCounter<C> {
    fn change_quota(&self, index: usize, quota: Quota) -> Result<(), SetQuotaError> {
        only_limit(index)?;
        Ok(self.set_quota(quota)?)
    }
}

/// Limit `index` is a tier ([`KeyedLimiter::set_tier_quota`](crate::keyed::KeyedLimiter::set_tier_quota);
/// 0 for a limiter that is not tiered).
impl<K, A, C> ChangeQuota for crate::keyed::KeyedLimiter<K, A, C>
where
    K: std::hash::Hash + Eq + Clone,
    A: crate::keyed::Algorithm,
    C: crate::clock::Clock,
{
    fn change_quota(&self, index: usize, quota: Quota) -> Result<(), SetQuotaError> {
        Ok(self.set_tier_quota(index, quota)?)
    }
}

/// A limiter behind a trait object cannot be asked whether it can change: it refuses, so that
/// `Global<Arc<dyn Limiter>>` (and `Keyed` over a `dyn KeyedLimit`) still make a layer.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::middleware::{ChangeQuota, Global};
/// use tollgate::{Limiter, Quota, TokenBucket};
/// let shared: Arc<dyn Limiter> = Arc::new(TokenBucket::new(Quota::per_second(5)?));
/// assert!(shared.change_quota(0, Quota::per_second(1)?).is_err());
/// let _backend = Global::new(shared);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
impl ChangeQuota for dyn crate::limiter::Limiter {}

/// As for `dyn Limiter`: refuses.
impl<Q: ?Sized> ChangeQuota for dyn crate::limiter::KeyedLimit<Q> {}

/// Several limits: `index` picks the limit (in the order given to [`AllOf::new`]), whose own
/// quota (its limit 0) changes.
///
/// [`AllOf::new`]: crate::AllOf::new
impl<L: ChangeQuota> ChangeQuota for crate::all_of::AllOf<L> {
    fn change_quota(&self, index: usize, quota: Quota) -> Result<(), SetQuotaError> {
        let limits = self.limits();
        let limit = limits.get(index).ok_or(SetQuotaError::NoSuchTier {
            tier: index,
            tiers: limits.len(),
        })?;
        limit.change_quota(0, quota)
    }
}

/// A metered limiter changes as the limiter it meters does.
#[cfg(feature = "metrics")]
impl<L: crate::limiter::Limiter + ChangeQuota> ChangeQuota for crate::metrics::Metered<L> {
    fn change_quota(&self, index: usize, quota: Quota) -> Result<(), SetQuotaError> {
        self.get_ref().change_quota(index, quota)
    }
}

/// [`ChangeQuota`] through a pointer, as [`Limiter`](crate::Limiter) is.
macro_rules! change_quota_through_pointer {
    ($($pointer:ty),*) => {$(
        impl<L: ChangeQuota + ?Sized> ChangeQuota for $pointer {
            fn change_quota(&self, index: usize, quota: Quota) -> Result<(), SetQuotaError> {
                (**self).change_quota(index, quota)
            }
        }
    )*};
}

change_quota_through_pointer!(&L, Box<L>, Arc<L>);

/// What a [`QuotaHandle`] reaches: a built layer's shared state (see `shared::LayerShared`).
pub(crate) trait Retune: Send + Sync {
    /// Changes the quota of `tier`: the backend's, then the advertised policies.
    fn set_tier_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError>;

    /// The quotas advertised now, one per tier.
    fn quotas(&self) -> Vec<Quota>;
}

/// Changes a built layer's quota at runtime: made by
/// [`LimitLayer::quota_handle`](super::LimitLayer::quota_handle), kept by the application (in its
/// state, next to its configuration reloader), cloned freely. Every clone of the layer and of its
/// services sees a change.
///
/// A change goes to the backend's limiter (which keeps what its state had left, by the crate's
/// rule: see the crate docs, "Changing a quota"), then to the layer's `RateLimit-Policy` and
/// `RateLimit` fields, which say the new quota from the next request on. Requests read the
/// policies without a lock; each response carries one whole policy, the old or the new. A request
/// decided while the change runs may be decided under one quota and described under the other.
/// Changes through any handle of one layer run one at a time; each returns once no request reads
/// the old policies.
///
/// Each distinct policy value is interned like the layer's first (at most 1 024 per process; past
/// that a value is the layer's own, counted), so a layer whose quota moves among a few settings
/// costs nothing more per request.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use std::convert::Infallible;
/// use http::{Request, Response};
/// use tower::{service_fn, Layer, ServiceExt};
/// use tollgate::middleware::LimitLayer;
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// let layer = LimitLayer::global(TokenBucket::with_clock(Quota::per_minute(60)?, ManualClock::new())).build()?;
/// let handle = layer.quota_handle(); // kept by the application
/// let svc = layer.layer(service_fn(|_req: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::new()))
/// }));
/// let res = svc.clone().oneshot(Request::new(String::new())).await?;
/// assert_eq!(res.headers()["ratelimit-policy"], r#""default";q=60;w=60"#);
///
/// handle.set_quota(Quota::per_minute(600)?)?;
/// let res = svc.oneshot(Request::new(String::new())).await?;
/// assert_eq!(res.headers()["ratelimit-policy"], r#""default";q=600;w=60"#);
/// assert_eq!(handle.quotas(), [Quota::per_minute(600)?]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
#[derive(Clone)]
pub struct QuotaHandle {
    pub(crate) layer: Arc<dyn Retune>,
}

impl QuotaHandle {
    /// Replaces the quota of the layer's only tier (or limit): [`set_tier_quota`] with tier 0.
    /// Blocks only until no request reads the old policy (a few instructions, unless a thread
    /// is descheduled mid-request).
    ///
    /// [`set_tier_quota`]: QuotaHandle::set_tier_quota
    ///
    /// # Errors
    ///
    /// As [`QuotaHandle::set_tier_quota`].
    ///
    /// # Examples
    ///
    /// See [`QuotaHandle`].
    pub fn set_quota(&self, quota: Quota) -> Result<(), SetQuotaError> {
        self.layer.set_tier_quota(0, quota)
    }

    /// Replaces the quota of tier `tier`: a tier of a tiered keyed limiter, or one limit of
    /// several ([`GlobalAllOf`](super::GlobalAllOf)), in the order of
    /// [`Backend::tiers`](super::Backend::tiers). The tier keeps its policy name.
    ///
    /// # Errors
    ///
    /// [`SetQuotaError::NoSuchTier`] for a tier past the last;
    /// [`SetQuotaError::Unsupported`] when the backend cannot change its quota (one behind a
    /// trait object, or several Redis limits); [`SetQuotaError::Quota`] (or, for Redis, `SetQuotaError::Redis`) when its
    /// algorithm cannot enforce `quota`. Nothing changes then, neither the limiter nor the
    /// fields.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{global, GlobalAllOf, LimitLayer, SetQuotaError};
    /// use tollgate::{AllOf, ManualClock, Quota, TokenBucket};
    /// let clock = ManualClock::new();
    /// let limits = AllOf::new([
    ///     TokenBucket::with_clock(Quota::per_second(10)?, clock.clone()),
    ///     TokenBucket::with_clock(Quota::per_hour(1_000)?, clock.clone()),
    /// ])?;
    /// let layer = LimitLayer::new(GlobalAllOf::new(limits), global()).build()?;
    /// let handle = layer.quota_handle();
    /// handle.set_tier_quota(1, Quota::per_hour(5_000)?)?; // the hourly limit
    /// assert_eq!(handle.quotas(), [Quota::per_second(10)?, Quota::per_hour(5_000)?]);
    /// let err = handle.set_tier_quota(2, Quota::per_hour(1)?).unwrap_err();
    /// assert_eq!(err, SetQuotaError::NoSuchTier { tier: 2, tiers: 2 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_tier_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        self.layer.set_tier_quota(tier, quota)
    }

    /// The quotas the layer advertises now, one per tier (or limit).
    ///
    /// # Examples
    ///
    /// See [`QuotaHandle`].
    pub fn quotas(&self) -> Vec<Quota> {
        self.layer.quotas()
    }
}

impl fmt::Debug for QuotaHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaHandle")
            .field("quotas", &self.quotas())
            .finish()
    }
}
