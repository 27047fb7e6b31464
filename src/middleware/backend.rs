//! What the layer asks for a decision: [`Backend`], and the adapters that make one of every
//! limiter: [`Keyed`] (one limit per key, any [`KeyedLimit`]), [`Global`] (one limit for all, any
//! [`Limiter`]), [`KeyedAllOf`] and [`GlobalAllOf`] (several limits) and, with the `redis`
//! feature, `Redis` (one limit in Redis) and `RedisAll` (several limits in Redis).

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::quota_handle::{ChangeQuota, SetQuotaError};
use crate::all_of::{AllOf, GiveBack, KeyedGiveBack};
use crate::keyed::{KeyedError, TooManyKeys};
use crate::limiter::{KeyedLimit, Limiter};
use crate::outcome::{AcquireError, Admitted, Denied, InsufficientCapacity};
use crate::quota::Quota;

/// Why a request was not admitted, as a backend reports it.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{Backend, Decision, Global, Refusal};
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let backend = Global::new(TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new()));
/// let Decision::Ready(first) = backend.decide(&(), 1) else { unreachable!() };
/// assert!(first.is_ok());
/// let Decision::Ready(second) = backend.decide(&(), 1) else { unreachable!() };
/// assert!(matches!(second, Err(Refusal::Denied(_))));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Refusal {
    /// Not now: the limit was reached.
    Denied(Denied),
    /// Never: the request costs more than the capacity.
    InsufficientCapacity(InsufficientCapacity),
    /// A new key found no room in a bounded keyed limiter: no rate decision was made.
    TooManyKeys(TooManyKeys),
    /// The backend could not decide (a Redis server out of reach, with its failure policy
    /// `Closed`).
    Unavailable(Arc<dyn Error + Send + Sync>),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Denied(d) => d.fmt(f),
            Refusal::InsufficientCapacity(e) => e.fmt(f),
            Refusal::TooManyKeys(e) => e.fmt(f),
            Refusal::Unavailable(e) => write!(f, "the limiter could not decide: {e}"),
        }
    }
}

impl From<KeyedError> for Refusal {
    fn from(e: KeyedError) -> Refusal {
        match e {
            KeyedError::Denied(d) => Refusal::Denied(d),
            KeyedError::InsufficientCapacity(e) => Refusal::InsufficientCapacity(e),
            KeyedError::TooManyKeys(e) => Refusal::TooManyKeys(e),
        }
    }
}

impl From<AcquireError> for Refusal {
    fn from(e: AcquireError) -> Refusal {
        match e {
            AcquireError::Denied(d) => Refusal::Denied(d),
            AcquireError::InsufficientCapacity(e) => Refusal::InsufficientCapacity(e),
        }
    }
}

/// A backend's answer: at once (every in-process limiter), or a future (a decision made over
/// the network).
///
/// # Examples
///
/// See [`Refusal`].
///
/// Non-exhaustive: `Delayed` exists only with the `tokio` feature, so turning the feature on must
/// not break a `match`; one outside this crate needs a wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum Decision<F> {
    /// Decided now.
    Ready(Result<Admitted, Refusal>),
    /// To be decided by the future.
    Pending(F),
    /// Admitted once [`Scheduled::delay`](crate::Scheduled::delay) has passed: a place in a
    /// leaky meter's queue (see [`Backend::decide_within`]). The layer waits it out before
    /// calling the inner service.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    Delayed(crate::outcome::Scheduled),
}

/// What a [`Backend`]'s future answers: the decision alone, or the decision with the index (in
/// [`Backend::tiers`]) of the limit it is from.
///
/// Implemented for two types, and only for them (the trait is sealed):
///
/// - `Result<Admitted, Refusal>`: the decision alone, what a backend of one limit answers
///   (`Redis`, and every backend whose futures were written before the index could travel
///   with them). The layer names the policy that [`Backend::decide_indexed`] or
///   [`Backend::tier_of_key`] chose when the request arrived.
/// - `(Option<usize>, Result<Admitted, Refusal>)`: the decision and, when known, the index of the
///   limit it is from, for a backend of several limits that learns which one binds or refuses
///   only when the decision comes back (`RedisAll`, feature `redis`). A `Some` index names the
///   policy in `RateLimit`; `None` keeps the one chosen when the request arrived.
///
/// An in-process backend answers [`Decision::Ready`] with its index beside it, from
/// [`Backend::decide_indexed`], and builds no future at all.
///
/// # Examples
///
/// A backend that decides through a future and names the second of its two limits:
///
/// ```
/// use std::future::{ready, Ready};
/// use tollgate::middleware::{Answer, Backend, Decision, Refusal};
/// use tollgate::{Admitted, Limiter, ManualClock, Quota, TokenBucket};
///
/// struct Later { quotas: [Quota; 2], bucket: TokenBucket<ManualClock> }
/// impl Backend<()> for Later {
///     type Future = Ready<(Option<usize>, Result<Admitted, Refusal>)>;
///     fn decide(&self, _key: &(), cost: u64) -> Decision<Self::Future> {
///         let answer = self.bucket.try_acquire_n(cost).map_err(Refusal::from);
///         Decision::Pending(ready((Some(1), answer)))
///     }
///     fn quota(&self) -> Quota {
///         self.quotas[0]
///     }
///     fn tiers(&self) -> Vec<Quota> {
///         self.quotas.to_vec()
///     }
///     fn all_apply(&self) -> bool {
///         true
///     }
/// }
/// let quotas = [Quota::per_second(10)?, Quota::per_minute(1)?];
/// let backend = Later { quotas, bucket: TokenBucket::with_clock(quotas[1], ManualClock::new()) };
/// let Decision::Pending(fut) = backend.decide(&(), 1) else { unreachable!() };
/// let (index, answer) = fut.into_inner().into_indexed();
/// assert_eq!(index, Some(1));
/// assert_eq!(answer.map(|a| a.remaining()).ok(), Some(0));
/// // The decision alone carries no index.
/// let down = std::sync::Arc::new(std::io::Error::other("down"));
/// let alone: Result<Admitted, Refusal> = Err(Refusal::Unavailable(down));
/// assert_eq!(alone.into_indexed().0, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait Answer: sealed::Sealed + Send + 'static {
    /// The index of the limit the decision is from (`None` when the answer names none) and the
    /// decision.
    ///
    /// # Examples
    ///
    /// See [`Answer`].
    fn into_indexed(self) -> (Option<usize>, Result<Admitted, Refusal>);
}

impl Answer for Result<Admitted, Refusal> {
    #[inline]
    fn into_indexed(self) -> (Option<usize>, Result<Admitted, Refusal>) {
        (None, self)
    }
}

impl Answer for (Option<usize>, Result<Admitted, Refusal>) {
    #[inline]
    fn into_indexed(self) -> (Option<usize>, Result<Admitted, Refusal>) {
        self
    }
}

/// Keeps [`Answer`] to the two forms the layer knows.
mod sealed {
    use super::Refusal;
    use crate::outcome::Admitted;

    pub trait Sealed {}
    impl Sealed for Result<Admitted, Refusal> {}
    impl Sealed for (Option<usize>, Result<Admitted, Refusal>) {}
}

/// A limit the layer can enforce for keys of type `K`: what [`LimitLayer`](super::LimitLayer)
/// is generic over.
///
/// Implemented by [`Keyed`] (any [`KeyedLimit<K>`]), [`Global`] (any [`Limiter`], one limit for
/// every request), [`Meter`], [`KeyedAllOf`] and [`GlobalAllOf`] (several limits), and `Redis`
/// and `RedisAll` (feature `redis`). Implement it to put another limiter behind the layer: answer
/// [`Decision::Ready`] when the decision is made at once, so the layer takes no detour through a
/// future; a future may answer the index of the limit it is from with the decision ([`Answer`]).
///
/// # Examples
///
/// A backend that admits every request but counts them (for a test double, say):
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use tollgate::middleware::{Backend, Decision};
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
///
/// struct Counting { seen: AtomicU64, quota: Quota, bucket: TokenBucket<ManualClock> }
/// impl Backend<String> for Counting {
///     type Future = std::future::Ready<Result<tollgate::Admitted, tollgate::middleware::Refusal>>;
///     fn decide(&self, _key: &String, _cost: u64) -> Decision<Self::Future> {
///         // Relaxed: a statistic; nothing is published through it.
///         self.seen.fetch_add(1, Ordering::Relaxed);
///         Decision::Ready(Ok(self.bucket.try_acquire_n(0).expect("a query always succeeds")))
///     }
///     fn quota(&self) -> Quota {
///         self.quota
///     }
/// }
/// let quota = Quota::per_second(1)?;
/// let b = Counting { seen: AtomicU64::new(0), quota, bucket: TokenBucket::with_clock(quota, ManualClock::new()) };
/// assert!(matches!(b.decide(&"k".to_string(), 1), Decision::Ready(Ok(_))));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Backend<K>: Send + Sync + 'static {
    /// The future of a decision made elsewhere; in-process backends name
    /// `std::future::Ready<..>` and never build one. It answers the decision alone, or with the
    /// index of the limit it is from (see [`Answer`]).
    type Future: Future<Output: Answer> + Send + 'static;

    /// Admits `cost` units for `key`, all or none (`cost = 0` is a query), or says why not.
    fn decide(&self, key: &K, cost: u64) -> Decision<Self::Future>;

    /// The quota enforced, for the `RateLimit-Policy` field (the first tier's, when tiered).
    fn quota(&self) -> Quota;

    /// Admits `cost` units for `key`, possibly after a wait of at most `max_delay`
    /// ([`Decision::Delayed`]), or says why not; what the layer asks under
    /// [`delay_up_to`](super::LimitLayerBuilder::delay_up_to). A backend that cannot queue
    /// decides as [`Backend::decide`] does (the default): the request is refused rather than
    /// delayed. [`Meter`] queues.
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn decide_within(
        &self,
        key: &K,
        cost: u64,
        max_delay: std::time::Duration,
    ) -> Decision<Self::Future> {
        let _ = max_delay;
        self.decide(key, cost)
    }

    /// The quota of each tier, for a backend whose quota is chosen per key: one policy each.
    fn tiers(&self) -> Vec<Quota> {
        vec![self.quota()]
    }

    /// The index in [`Backend::tiers`] of the tier that limits `key` (asked only when there is
    /// more than one, and [`Backend::decide_indexed`] answered no index).
    fn tier_of_key(&self, _key: &K) -> usize {
        0
    }

    /// Whether every quota in [`Backend::tiers`] applies to every request at once (several
    /// limits, as [`KeyedAllOf`] and [`GlobalAllOf`] are), rather than one per key. The layer then
    /// lists them all in `RateLimit-Policy` and names in `RateLimit` the one
    /// [`Backend::decide_indexed`] answers with. Default: `false`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{Backend, Global};
    /// use tollgate::{Quota, TokenBucket};
    /// let backend = Global::new(TokenBucket::new(Quota::per_second(1)?));
    /// assert!(!Backend::<()>::all_apply(&backend));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn all_apply(&self) -> bool {
        false
    }

    /// [`Backend::decide`], with the index in [`Backend::tiers`] of the quota the answer is from
    /// when the backend knows it now: for [`KeyedAllOf`] and [`GlobalAllOf`], the binding limit of
    /// an admission, or the limit whose refusal is reported. `None` (the default) leaves the
    /// choice to [`Backend::tier_of_key`]. Asked instead of `decide` when [`Backend::all_apply`], and
    /// when there are several tiers (and no [`delay_up_to`](super::LimitLayerBuilder::delay_up_to)):
    /// [`Keyed`] answers its key's tier from the lookup that decides, so the layer does not ask
    /// [`Backend::tier_of_key`] (a second lookup) after the decision.
    ///
    /// A backend that learns the index only with a [`Decision::Pending`] future's answer (over
    /// the network: `RedisAll`, feature `redis`) answers `None` here and gives the index with the
    /// future's output, `(Option<usize>, Result<Admitted, Refusal>)` (see [`Answer`]); an index
    /// from the future wins over one given here.
    ///
    /// # Examples
    ///
    /// See [`KeyedAllOf`].
    fn decide_indexed(&self, key: &K, cost: u64) -> (Option<usize>, Decision<Self::Future>) {
        (None, self.decide(key, cost))
    }

    /// Replaces the quota of tier `tier` (an index in [`Backend::tiers`]) at runtime: what a
    /// [`QuotaHandle`](super::QuotaHandle) asks, before it changes the layer's fields. The default
    /// refuses with [`SetQuotaError::Unsupported`], naming the backend's type; [`Global`],
    /// [`Meter`], [`GlobalAllOf`] and `Redis` change their limiter's quota, and [`Keyed`] and
    /// [`KeyedAllOf`] ask theirs ([`ChangeQuota`]: a keyed limiter changes the tier asked for).
    /// `RedisAll` refuses: `RedisAllOf` has no `set_quota`.
    ///
    /// # Errors
    ///
    /// [`SetQuotaError`]: unsupported, no such tier, or a quota the algorithm cannot enforce.
    /// Nothing may change on an error.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{Backend, Global, SetQuotaError};
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::middleware::Keyed;
    /// use tollgate::{Limiter, Quota, TokenBucket};
    /// let backend = Global::new(TokenBucket::new(Quota::per_second(1)?));
    /// Backend::<()>::set_quota(&backend, 0, Quota::per_second(9)?)?;
    /// assert_eq!(backend.limiter().quota(), Quota::per_second(9)?);
    ///
    /// let keyed = Keyed::new(KeyedLimiter::<u8>::new(Quota::per_second(1)?));
    /// Backend::<u8>::set_quota(&keyed, 0, Quota::per_second(9)?)?;
    /// assert_eq!(keyed.limiter().quota(), Quota::per_second(9)?);
    /// let err = Backend::<u8>::set_quota(&keyed, 1, Quota::per_second(9)?).unwrap_err();
    /// assert_eq!(err, SetQuotaError::NoSuchTier { tier: 1, tiers: 1 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn set_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        let _ = (tier, quota);
        Err(SetQuotaError::Unsupported {
            limiter: std::any::type_name::<Self>(),
        })
    }
}

/// Limit `tier` of `limits`, or [`SetQuotaError::NoSuchTier`].
fn limit_of<L>(limits: &[L], tier: usize) -> Result<&L, SetQuotaError> {
    limits.get(tier).ok_or(SetQuotaError::NoSuchTier {
        tier,
        tiers: limits.len(),
    })
}

/// Several limits per key, each applying to every request ([`AllOf`] of keyed token buckets): a
/// request is admitted only when every limit admits it. `RateLimit-Policy` lists every limit's
/// policy (the draft allows a list), `RateLimit` names the one that binds (the fewest remaining)
/// or, on a refusal, the one whose wait is reported (the longest, which `Retry-After` gives).
/// Several limits cannot queue: under `delay_up_to` a request they refuse is refused, not
/// delayed.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::middleware::{Backend, Decision, KeyedAllOf};
/// use tollgate::{AllOf, ManualClock, Quota};
/// let clock = ManualClock::new();
/// let backend = KeyedAllOf::new(AllOf::new([
///     KeyedLimiter::<u8, _, _>::with_clock(Quota::per_second(10)?, clock.clone()),
///     KeyedLimiter::with_clock(Quota::per_hour(1_000)?.with_capacity(2)?, clock.clone()),
/// ])?);
/// assert!(backend.all_apply());
/// assert_eq!(backend.tiers().len(), 2);
/// let (binding, decision) = backend.decide_indexed(&1, 1);
/// assert_eq!(binding, Some(1)); // 1 left of the hourly burst of 2: that limit binds
/// assert!(matches!(decision, Decision::Ready(Ok(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct KeyedAllOf<L> {
    all: AllOf<L>,
}

impl<L> KeyedAllOf<L> {
    /// `all`, as a backend.
    ///
    /// # Examples
    ///
    /// See [`KeyedAllOf`].
    pub fn new(all: AllOf<L>) -> KeyedAllOf<L> {
        KeyedAllOf { all }
    }

    /// The limits.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::middleware::KeyedAllOf;
    /// use tollgate::{AllOf, Quota};
    /// let backend = KeyedAllOf::new(AllOf::new([KeyedLimiter::<u8>::new(Quota::per_second(1)?)])?);
    /// assert_eq!(backend.limits().limits().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limits(&self) -> &AllOf<L> {
        &self.all
    }
}

impl<K, L> Backend<K> for KeyedAllOf<L>
where
    K: 'static,
    L: KeyedGiveBack<K> + ChangeQuota + 'static,
{
    type Future = Immediate;

    fn decide(&self, key: &K, cost: u64) -> Decision<Immediate> {
        Decision::Ready(self.all.check_key_n(key, cost).map_err(Refusal::from))
    }

    fn decide_indexed(&self, key: &K, cost: u64) -> (Option<usize>, Decision<Immediate>) {
        let now = KeyedLimit::<K>::now(&self.all);
        let (at, answer) = self.all.check_key_n_at_indexed(key, cost, now);
        (Some(at), Decision::Ready(answer.map_err(Refusal::from)))
    }

    fn quota(&self) -> Quota {
        KeyedLimit::<K>::quota(&self.all)
    }

    fn tiers(&self) -> Vec<Quota> {
        self.all
            .limits()
            .iter()
            .map(|l| KeyedLimit::<K>::quota(l))
            .collect()
    }

    fn set_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        limit_of(self.all.limits(), tier)?.change_quota(0, quota)
    }

    fn all_apply(&self) -> bool {
        true
    }
}

/// Several limits shared by every request ([`AllOf`] of direct token buckets; the key is not
/// looked at), with the fields of [`KeyedAllOf`].
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{Backend, Decision, GlobalAllOf};
/// use tollgate::{AllOf, ManualClock, Quota, TokenBucket};
/// let clock = ManualClock::new();
/// let backend = GlobalAllOf::new(AllOf::new([
///     TokenBucket::with_clock(Quota::per_second(1)?, clock.clone()),
///     TokenBucket::with_clock(Quota::per_minute(10)?, clock.clone()),
/// ])?);
/// let (_, first) = backend.decide_indexed(&(), 1);
/// assert!(matches!(first, Decision::Ready(Ok(_))));
/// let (refusing, second) = backend.decide_indexed(&(), 1);
/// assert_eq!(refusing, Some(0)); // the per-second limit refuses (and waits longest)
/// assert!(matches!(second, Decision::Ready(Err(_))));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct GlobalAllOf<L> {
    all: AllOf<L>,
}

impl<L: GiveBack> GlobalAllOf<L> {
    /// `all`, as a backend.
    ///
    /// # Examples
    ///
    /// See [`GlobalAllOf`].
    pub fn new(all: AllOf<L>) -> GlobalAllOf<L> {
        GlobalAllOf { all }
    }

    /// The limits.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::GlobalAllOf;
    /// use tollgate::{AllOf, Quota, TokenBucket};
    /// let backend = GlobalAllOf::new(AllOf::new([TokenBucket::new(Quota::per_second(1)?)])?);
    /// assert_eq!(backend.limits().quotas().len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limits(&self) -> &AllOf<L> {
        &self.all
    }
}

impl<K, L> Backend<K> for GlobalAllOf<L>
where
    L: GiveBack + ChangeQuota + 'static,
{
    type Future = Immediate;

    fn decide(&self, _key: &K, cost: u64) -> Decision<Immediate> {
        Decision::Ready(self.all.try_acquire_n(cost).map_err(Refusal::from))
    }

    fn decide_indexed(&self, _key: &K, cost: u64) -> (Option<usize>, Decision<Immediate>) {
        let (at, answer) = self.all.try_acquire_n_at_indexed(cost, self.all.now());
        (Some(at), Decision::Ready(answer.map_err(Refusal::from)))
    }

    fn quota(&self) -> Quota {
        self.all.quota()
    }

    fn tiers(&self) -> Vec<Quota> {
        self.all.quotas()
    }

    fn set_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        limit_of(self.all.limits(), tier)?.change_quota(0, quota)
    }

    fn all_apply(&self) -> bool {
        true
    }
}

/// The answer of an in-process backend's (never built) future.
type Immediate = std::future::Ready<Result<Admitted, Refusal>>;

/// One limit per key: any [`KeyedLimit`] (a [`KeyedLimiter`](crate::keyed::KeyedLimiter) of any
/// algorithm) behind the layer.
///
/// The limiter also implements [`ChangeQuota`], as [`Global`]'s does: a
/// [`QuotaHandle`](super::QuotaHandle) changes the keyed limiter's tiers through it
/// ([`KeyedLimiter::set_tier_quota`](crate::keyed::KeyedLimiter::set_tier_quota)).
///
/// # Examples
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::middleware::{Backend, Decision, Keyed};
/// use tollgate::{ManualClock, Quota};
/// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
/// let backend = Keyed::new(limiter);
/// assert!(matches!(backend.decide(&1, 1), Decision::Ready(Ok(_))));
/// assert!(matches!(backend.decide(&1, 1), Decision::Ready(Err(_))));
/// assert!(matches!(backend.decide(&2, 1), Decision::Ready(Ok(_))));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct Keyed<L>(L);

impl<L> Keyed<L> {
    /// `limiter`, as a backend.
    ///
    /// # Examples
    ///
    /// See [`Keyed`].
    pub fn new(limiter: L) -> Keyed<L> {
        Keyed(limiter)
    }

    /// The limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::middleware::Keyed;
    /// use tollgate::Quota;
    /// let backend = Keyed::new(KeyedLimiter::<u8>::new(Quota::per_second(1)?));
    /// assert_eq!(backend.limiter().quota().count(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn limiter(&self) -> &L {
        &self.0
    }
}

impl<K, L> Backend<K> for Keyed<L>
where
    K: 'static,
    L: KeyedLimit<K> + ChangeQuota + 'static,
{
    type Future = Immediate;

    #[inline]
    fn decide(&self, key: &K, cost: u64) -> Decision<Immediate> {
        Decision::Ready(self.0.check_key_n(key, cost).map_err(Refusal::from))
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }

    fn tiers(&self) -> Vec<Quota> {
        self.0.tiers().to_vec()
    }

    fn tier_of_key(&self, key: &K) -> usize {
        self.0.tier_of_key(key)
    }

    /// The decision and the key's tier, from one lookup when the limiter can
    /// ([`KeyedLimit::check_key_n_and_tier`]): what the layer asks when there are tiers.
    #[inline]
    fn decide_indexed(&self, key: &K, cost: u64) -> (Option<usize>, Decision<Immediate>) {
        let (tier, answer) = self.0.check_key_n_and_tier(key, cost);
        (Some(tier), Decision::Ready(answer.map_err(Refusal::from)))
    }

    fn set_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        self.0.change_quota(tier, quota)
    }
}

/// One limit shared by every request: any direct [`Limiter`] behind the layer (the key, whatever
/// it is, is not looked at).
///
/// The limiter also implements [`ChangeQuota`], through which a
/// [`QuotaHandle`](super::QuotaHandle) changes its quota: every direct limiter of this crate
/// does (and changes); one of one's own that cannot change needs only
/// `impl ChangeQuota for MyLimiter {}`.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{Backend, Decision, Global};
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let backend = Global::new(TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new()));
/// assert!(matches!(backend.decide(&"a", 1), Decision::Ready(Ok(_))));
/// assert!(matches!(backend.decide(&"b", 1), Decision::Ready(Ok(_))));
/// assert!(matches!(backend.decide(&"c", 1), Decision::Ready(Err(_)))); // one limit for all
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct Global<L>(L);

impl<L> Global<L> {
    /// `limiter`, as a backend.
    ///
    /// # Examples
    ///
    /// See [`Global`].
    pub fn new(limiter: L) -> Global<L> {
        Global(limiter)
    }

    /// The limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::Global;
    /// use tollgate::{Limiter, Quota, TokenBucket};
    /// let backend = Global::new(TokenBucket::new(Quota::per_second(3)?));
    /// assert_eq!(backend.limiter().remaining(), 3);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn limiter(&self) -> &L {
        &self.0
    }
}

impl<K, L> Backend<K> for Global<L>
where
    L: Limiter + ChangeQuota + 'static,
{
    type Future = Immediate;

    #[inline]
    fn decide(&self, _key: &K, cost: u64) -> Decision<Immediate> {
        Decision::Ready(self.0.try_acquire_n(cost).map_err(Refusal::from))
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }

    fn set_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        self.0.change_quota(tier, quota)
    }
}

/// A leaky meter behind the layer, direct ([`LeakyMeter`](crate::leaky::LeakyMeter), one queue
/// for all) or keyed (a [`KeyedLimiter`](crate::keyed::KeyedLimiter) of
/// [`LeakyMeterKeys`](crate::keyed::LeakyMeterKeys), one queue per key). Without
/// `delay_up_to` it is the strict meter (admitted only when the queue is empty: requests at
/// least one interval apart); with the builder's `delay_up_to` (feature `tokio`), a request that
/// would leave the queue within the bound waits its turn and is then passed on, and one that
/// would not is refused, taking no place.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedLimiter, LeakyMeterKeys};
/// use tollgate::middleware::{peer_ip, LimitLayer, Meter};
/// use tollgate::{MonotonicClock, Quota};
/// // Each client: one request every 100 ms, up to 10 queued.
/// let quota = Quota::per_second(10)?;
/// let meter: KeyedLimiter<std::net::IpAddr, LeakyMeterKeys, _> =
///     KeyedLimiter::with_algorithm(quota, MonotonicClock::new())?;
/// let layer = LimitLayer::new(Meter::new(meter), peer_ip()).build()?;
/// # drop(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Meter<L>(L);

impl<L> Meter<L> {
    /// `meter`, as a backend.
    ///
    /// # Examples
    ///
    /// See [`Meter`].
    pub fn new(meter: L) -> Meter<L> {
        Meter(meter)
    }
}

impl<K, C> Backend<K> for Meter<crate::leaky::LeakyMeter<C>>
where
    K: 'static,
    C: crate::clock::Clock + 'static,
{
    type Future = Immediate;

    fn decide(&self, _key: &K, cost: u64) -> Decision<Immediate> {
        Decision::Ready(self.0.try_acquire_n(cost).map_err(Refusal::from))
    }

    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn decide_within(&self, _key: &K, cost: u64, max: std::time::Duration) -> Decision<Immediate> {
        match self
            .0
            .try_schedule_n_within(cost, max, Limiter::now(&self.0))
        {
            Ok(scheduled) => Decision::Delayed(scheduled),
            Err(e) => Decision::Ready(Err(e.into())),
        }
    }

    fn quota(&self) -> Quota {
        Limiter::quota(&self.0)
    }

    fn set_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        self.0.change_quota(tier, quota)
    }
}

impl<K, C> Backend<K> for Meter<crate::keyed::KeyedLimiter<K, crate::keyed::LeakyMeterKeys, C>>
where
    K: std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    C: crate::clock::Clock + 'static,
{
    type Future = Immediate;

    fn decide(&self, key: &K, cost: u64) -> Decision<Immediate> {
        Decision::Ready(self.0.check_key_n(key, cost).map_err(Refusal::from))
    }

    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn decide_within(&self, key: &K, cost: u64, max: std::time::Duration) -> Decision<Immediate> {
        let now = crate::clock::Clock::now(self.0.clock());
        match self.0.schedule_key_n_within(key, cost, max, now) {
            Ok(scheduled) => Decision::Delayed(scheduled),
            Err(e) => Decision::Ready(Err(e.into())),
        }
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }

    fn set_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        self.0.change_quota(tier, quota)
    }
}

#[cfg(feature = "redis")]
pub use self::redis::{KeyBytes, Redis, RedisAll};

#[cfg(feature = "redis")]
mod redis {
    use std::future::Future;
    use std::net::IpAddr;
    use std::pin::Pin;
    use std::sync::Arc;

    use super::{Backend, Decision, Refusal, SetQuotaError};
    use crate::outcome::Admitted;
    use crate::quota::Quota;
    use crate::redis::{RedisAlgorithm, RedisAllOf, RedisError, RedisLimiter};

    /// A key as the bytes of its Redis key name: implemented for the keys the extractors give.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::KeyBytes;
    /// let mut out = Vec::new();
    /// std::net::IpAddr::from([10, 0, 0, 1]).write_key(&mut out);
    /// assert_eq!(out, b"10.0.0.1");
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub trait KeyBytes {
        /// Appends the key's bytes to `out`.
        fn write_key(&self, out: &mut Vec<u8>);
    }

    impl KeyBytes for IpAddr {
        fn write_key(&self, out: &mut Vec<u8>) {
            use std::io::Write;
            // Writing to a Vec does not fail.
            let _ = write!(out, "{self}");
        }
    }

    impl KeyBytes for () {
        fn write_key(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(b"global");
        }
    }

    impl KeyBytes for http::HeaderValue {
        fn write_key(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(self.as_bytes());
        }
    }

    impl KeyBytes for String {
        fn write_key(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(self.as_bytes());
        }
    }

    impl KeyBytes for Vec<u8> {
        fn write_key(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(self);
        }
    }

    impl KeyBytes for u64 {
        fn write_key(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(self.to_string().as_bytes());
        }
    }

    /// The layer's reading of a Redis backend's error: a limit's answers are theirs, and any other
    /// error (Redis unreachable under `Closed`, a key too long, a local fallback that could not
    /// decide) is [`Refusal::Unavailable`], as no decision could be made.
    fn refusal(e: RedisError) -> Refusal {
        match e {
            RedisError::Denied(d) => Refusal::Denied(d),
            RedisError::InsufficientCapacity(e) => Refusal::InsufficientCapacity(e),
            other => Refusal::Unavailable(Arc::new(other)),
        }
    }

    /// A [`RedisLimiter`] behind the layer: one limit per key across every process that shares
    /// the Redis server. The decision is a round trip, so this backend's answers are futures.
    ///
    /// A failure the limiter's [`FailurePolicy`](crate::redis::FailurePolicy) does not absorb is
    /// [`Refusal::Unavailable`] (503 by default); a key over the limiter's key length limit is
    /// treated the same way, as no decision could be made.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use std::sync::Arc;
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::middleware::{peer_ip, LimitLayer, Redis};
    /// use tollgate::redis::{FailurePolicy, RedisLimiter};
    /// use tollgate::Quota;
    /// // The connection is made lazily, on the first decision.
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
    /// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(30)?)
    ///     .build(FailurePolicy::Closed)?;
    /// let layer = LimitLayer::new(Redis::new(Arc::new(limiter)), peer_ip()).build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    #[derive(Debug)]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub struct Redis<A: RedisAlgorithm>(Arc<RedisLimiter<A>>);

    impl<A: RedisAlgorithm> Redis<A> {
        /// `limiter`, as a backend.
        ///
        /// # Examples
        ///
        /// See [`Redis`].
        pub fn new(limiter: Arc<RedisLimiter<A>>) -> Redis<A> {
            Redis(limiter)
        }
    }

    impl<A, K> Backend<K> for Redis<A>
    where
        A: RedisAlgorithm + Send + Sync + 'static,
        K: KeyBytes,
    {
        type Future = Pin<Box<dyn Future<Output = Result<Admitted, Refusal>> + Send>>;

        fn decide(&self, key: &K, cost: u64) -> Decision<Self::Future> {
            let mut name = Vec::new();
            key.write_key(&mut name);
            let limiter = Arc::clone(&self.0);
            Decision::Pending(Box::pin(async move {
                limiter.check_key_n(name, cost).await.map_err(refusal)
            }))
        }

        fn quota(&self) -> Quota {
            self.0.quota()
        }

        /// Changes this process's limiter (see [`RedisLimiter::set_quota`]): the other processes
        /// sharing the Redis keys keep theirs until they change too.
        fn set_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
            if tier != 0 {
                return Err(SetQuotaError::NoSuchTier { tier, tiers: 1 });
            }
            self.0.set_quota(quota).map_err(SetQuotaError::Redis)
        }
    }

    /// A [`RedisAllOf`] behind the layer: several limits per key ("10 a second and 1 000 an hour
    /// per client") shared by every process that uses the Redis server, decided all or none in one
    /// round trip. The fields are [`KeyedAllOf`](super::KeyedAllOf)'s: `RateLimit-Policy` lists
    /// every limit's policy, and `RateLimit` names the limit the decision is from (the binding one
    /// of an admission, the refusing one with the longest wait of a denial, whose wait
    /// `Retry-After` gives). Which limit that is is known only when Redis answers, so this
    /// backend's futures answer it beside the decision (see [`Answer`](super::Answer)).
    ///
    /// Failures are [`Redis`]'s: what the limits' [`AllOfFailurePolicy`] does not absorb (and a
    /// key over the key length limit) is [`Refusal::Unavailable`] (503 by default). An answer of
    /// the failure policy (`Open`, or `Local`'s in-process limits) names no limit of the
    /// server's: its `RateLimit` is under the first policy.
    ///
    /// The quotas cannot change at runtime: [`RedisAllOf`] has no `set_quota`, so a
    /// [`QuotaHandle`](crate::middleware::QuotaHandle) answers [`SetQuotaError::Unsupported`].
    /// Several limits cannot queue either: under `delay_up_to` a request they refuse is refused.
    ///
    /// [`AllOfFailurePolicy`]: crate::redis::AllOfFailurePolicy
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use std::sync::Arc;
    /// use tollgate::middleware::{peer_ip, Backend, LimitLayer, RedisAll};
    /// use tollgate::redis::{AllOfFailurePolicy, RedisAllOf};
    /// use tollgate::Quota;
    /// // The connection is made lazily, on the first decision.
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
    /// let limits = RedisAllOf::builder(conn, [Quota::per_second(10)?, Quota::per_hour(1_000)?])
    ///     .build(AllOfFailurePolicy::Closed)?;
    /// let backend = RedisAll::new(Arc::new(limits));
    /// assert!(Backend::<std::net::IpAddr>::all_apply(&backend));
    /// assert_eq!(Backend::<std::net::IpAddr>::tiers(&backend).len(), 2);
    /// let layer = LimitLayer::new(backend, peer_ip())
    ///     .tier_names(["second", "hour"])
    ///     .build()?;
    /// // Every response: `RateLimit-Policy: "second";q=10;w=1, "hour";q=1000;w=3600`.
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    #[derive(Debug)]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub struct RedisAll(Arc<RedisAllOf>);

    impl RedisAll {
        /// `limits`, as a backend.
        ///
        /// # Examples
        ///
        /// See [`RedisAll`].
        pub fn new(limits: Arc<RedisAllOf>) -> RedisAll {
            RedisAll(limits)
        }

        /// The limits (for their [`stats`](RedisAllOf::stats), say).
        ///
        /// # Examples
        ///
        /// ```
        /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
        /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        /// # rt.block_on(async {
        /// use std::sync::Arc;
        /// use tollgate::middleware::RedisAll;
        /// use tollgate::redis::{AllOfFailurePolicy, RedisAllOf};
        /// use tollgate::Quota;
        /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
        /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
        /// let quotas = [Quota::per_second(10)?, Quota::per_hour(1_000)?];
        /// let limits = RedisAllOf::builder(conn, quotas).build(AllOfFailurePolicy::Open)?;
        /// let backend = RedisAll::new(Arc::new(limits));
        /// assert_eq!(backend.limits().quotas(), quotas);
        /// assert_eq!(backend.limits().stats().decisions, 0);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// # })
        /// # }
        /// ```
        pub fn limits(&self) -> &RedisAllOf {
            &self.0
        }
    }

    impl<K> Backend<K> for RedisAll
    where
        K: KeyBytes,
    {
        type Future =
            Pin<Box<dyn Future<Output = (Option<usize>, Result<Admitted, Refusal>)> + Send>>;

        fn decide(&self, key: &K, cost: u64) -> Decision<Self::Future> {
            let mut name = Vec::new();
            key.write_key(&mut name);
            let limits = Arc::clone(&self.0);
            Decision::Pending(Box::pin(async move {
                let (index, answer) = limits.check_key_n_indexed(name, cost).await;
                (index, answer.map_err(refusal))
            }))
        }

        /// [`Backend::decide`]: the index is known only once Redis answers, so it comes with the
        /// future's answer, and none is given now.
        fn decide_indexed(&self, key: &K, cost: u64) -> (Option<usize>, Decision<Self::Future>) {
            (None, self.decide(key, cost))
        }

        fn quota(&self) -> Quota {
            // The builder refuses to build without a quota.
            self.0.quotas()[0]
        }

        fn tiers(&self) -> Vec<Quota> {
            self.0.quotas().to_vec()
        }

        fn all_apply(&self) -> bool {
            true
        }
    }
}
