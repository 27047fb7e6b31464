//! [`LimitLayer`] and its builder: what is configured once, and shared by every clone and
//! connection. The top of the layer's modules, as in tower: the layer builds the service
//! ([`Limit`]), and the service never names the layer; what both read lives below them, in
//! `shared` (the configuration) and `response` (the fields and the refusals).

use std::fmt;
#[cfg(feature = "tracing")]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use http::request::Parts;
use http::{HeaderValue, StatusCode};

use super::backend::{Backend, Global, Keyed};
use super::fields::{self, PolicyNameError};
use super::key::{self, KeyExtractor};
use super::quota_handle::{QuotaHandle, Retune, SetQuotaError};
use super::response::EmptyBody;
use super::service::Limit;
#[cfg(feature = "metrics")]
use super::shared::PolicyMeters;
use super::shared::{
    Cost, Exempt, Headers, LayerShared, NamedPolicy, OnMissing, PartitionKey, Protocol, Statuses,
};
use crate::change::Current;
use crate::quota::Quota;

/// A tower [`Layer`](tower_layer::Layer) that limits the requests of the service it wraps.
///
/// Built by [`LimitLayer::keyed`] (one limit per key), [`LimitLayer::global`] (one limit for all)
/// or [`LimitLayer::new`] (any [`Backend`], e.g. Redis), then configured and
/// [built](LimitLayerBuilder::build). Cloning the layer or a service it made clones an `Arc`:
/// every clone and every connection shares one limiter. See the [module docs](super) for what
/// is sent.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::middleware::{peer_ip, LimitLayer};
/// use tollgate::Quota;
/// let per_ip = KeyedLimiter::new(Quota::per_minute(30)?.with_capacity(5)?);
/// let layer = LimitLayer::keyed(per_ip, peer_ip()).build()?;
/// assert_eq!(layer.would_deny(), 0);
/// // With axum: Router::new().route(..).layer(layer)
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LimitLayer<B, X: KeyExtractor, D = EmptyBody> {
    pub(crate) shared: Arc<LayerShared<B, X, D>>,
}

impl<B, X: KeyExtractor, D> Clone for LimitLayer<B, X, D> {
    fn clone(&self) -> Self {
        LimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<B, X: KeyExtractor, D> fmt::Debug for LimitLayer<B, X, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitLayer")
            .field("policies", &self.shared.policies)
            .field("headers", &self.shared.headers)
            .field("protocol", &self.shared.protocol)
            .field("dry_run", &self.shared.dry_run)
            .finish_non_exhaustive()
    }
}

impl<L: 'static, X: KeyExtractor> LimitLayer<Keyed<L>, X>
where
    Keyed<L>: Backend<X::Key>,
{
    /// A layer giving each key its own limit, from a keyed limiter (any algorithm) and a key
    /// extractor.
    ///
    /// # Examples
    ///
    /// See [`LimitLayer`].
    pub fn keyed(limiter: L, extractor: X) -> LimitLayerBuilder<Keyed<L>, X> {
        LimitLayer::new(Keyed::new(limiter), extractor)
    }
}

impl<L: 'static> LimitLayer<Global<L>, key::GlobalKey>
where
    Global<L>: Backend<()>,
{
    /// A layer with one limit for every request, from a direct limiter.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::LimitLayer;
    /// use tollgate::{Quota, TokenBucket};
    /// // At most 1 000 requests a second reach the backend, whoever sends them.
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(1000)?)).build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn global(limiter: L) -> LimitLayerBuilder<Global<L>, key::GlobalKey> {
        LimitLayer::new(Global::new(limiter), key::global())
    }
}

impl<B: Backend<X::Key>, X: KeyExtractor> LimitLayer<B, X> {
    /// A layer over any [`Backend`] (such as [`Redis`](super::Redis)), keyed by `extractor`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::middleware::{peer_ip, Keyed, LimitLayer};
    /// use tollgate::Quota;
    /// let layer = LimitLayer::new(Keyed::new(KeyedLimiter::new(Quota::per_second(5)?)), peer_ip()).build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[allow(clippy::new_ret_no_self)]
    pub fn new(backend: B, extractor: X) -> LimitLayerBuilder<B, X> {
        LimitLayerBuilder {
            backend,
            extractor,
            on_denied: EmptyBody,
            options: Options {
                name: "default".into(),
                tier_names: None,
                partition_key: None,
                #[cfg(feature = "tokio")]
                max_delay: None,
                headers: Headers::Always,
                protocol: Protocol::Auto,
                on_missing: OnMissing::Reject(StatusCode::BAD_REQUEST),
                cost: Cost::One,
                content_bytes: false,
                exempt: None,
                dry_run: false,
                dry_run_headers: false,
                info: true,
                statuses: Statuses {
                    denied: StatusCode::TOO_MANY_REQUESTS,
                    too_many_keys: StatusCode::SERVICE_UNAVAILABLE,
                    too_large: StatusCode::TOO_MANY_REQUESTS,
                    unavailable: StatusCode::SERVICE_UNAVAILABLE,
                    unavailable_retry: None,
                    missing_key: StatusCode::BAD_REQUEST,
                },
            },
        }
    }
}

impl<B, X: KeyExtractor, D> LimitLayer<B, X, D> {
    /// Requests a [dry run](LimitLayerBuilder::dry_run) let through that would have been
    /// refused, since the layer was built.
    ///
    /// # Examples
    ///
    /// See [`LimitLayerBuilder::dry_run`].
    pub fn would_deny(&self) -> u64 {
        // Relaxed: a statistic, read on its own.
        self.shared.would_deny.load(Ordering::Relaxed)
    }

    /// The backend.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::LimitLayer;
    /// use tollgate::{Limiter, Quota, TokenBucket};
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(4)?)).build()?;
    /// assert_eq!(layer.backend().limiter().remaining(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn backend(&self) -> &B {
        &self.shared.backend
    }
}

impl<B: Backend<X::Key>, X: KeyExtractor, D: Send + Sync + 'static> LimitLayer<B, X, D> {
    /// A handle that changes this layer's quota at runtime, for the application to keep: see
    /// [`QuotaHandle`]. Every handle of a layer changes the same limiter and fields.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::LimitLayer;
    /// use tollgate::{Limiter, Quota, TokenBucket};
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(10)?)).build()?;
    /// let handle = layer.quota_handle();
    /// handle.set_quota(Quota::per_second(100)?)?;
    /// assert_eq!(layer.backend().limiter().quota(), Quota::per_second(100)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn quota_handle(&self) -> QuotaHandle {
        QuotaHandle {
            layer: Arc::clone(&self.shared) as Arc<dyn Retune>,
        }
    }
}

impl<B, X, D> Retune for LayerShared<B, X, D>
where
    B: Backend<X::Key>,
    X: KeyExtractor,
    D: Send + Sync + 'static,
{
    fn set_tier_quota(&self, tier: usize, quota: Quota) -> Result<(), SetQuotaError> {
        if tier >= self.tiers {
            return Err(SetQuotaError::NoSuchTier {
                tier,
                tiers: self.tiers,
            });
        }
        // A poisoned lock only means another change panicked (in a user's backend): the
        // policies in place are still whole.
        let _one_at_a_time = self.retune.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next: Vec<NamedPolicy> = self.policies.read().to_vec();
        next[tier].quota = quota;
        // Built before the backend changes, so that a value that cannot be sent changes nothing.
        // `build` checked the names and the rest is digits, so this is not expected to fail;
        // if it did, the answer would be an error rather than a panic.
        let quotas: Vec<Quota> = next.iter().map(|p| p.quota).collect();
        let names: Vec<&str> = next.iter().map(|p| p.name.as_str()).collect();
        let values =
            policy_values(&names, &quotas, self.content_bytes, self.all_apply).map_err(|at| {
                let name = match at {
                    Some(i) => names[i].to_owned(),
                    None => names.join(", "),
                };
                SetQuotaError::PolicyName(PolicyNameError::new(&name))
            })?;
        self.backend.set_quota(tier, quota)?;
        for (policy, value) in next.iter_mut().zip(values) {
            policy.value = value;
        }
        let next = Box::new(next.into_boxed_slice());
        self.policies.change(move |_| next);
        Ok(())
    }

    fn quotas(&self) -> Vec<Quota> {
        self.policies.read().iter().map(|p| p.quota).collect()
    }
}

/// The `RateLimit-Policy` value of each policy, named by its sf-string `names[i]` with quota
/// `quotas[i]`: each its own member, or, when `all_apply`, every one the list of all members.
/// `Err(Some(i))` when policy `i`'s value cannot be sent, `Err(None)` when the list cannot.
fn policy_values(
    names: &[&str],
    quotas: &[Quota],
    content_bytes: bool,
    all_apply: bool,
) -> Result<Vec<HeaderValue>, Option<usize>> {
    let members: Vec<String> = names
        .iter()
        .zip(quotas)
        .map(|(name, quota)| fields::policy_member(name, quota, content_bytes))
        .collect();
    if all_apply {
        let value = fields::policy_value(&members.join(", ")).ok_or(None)?;
        return Ok(vec![value; members.len()]);
    }
    members
        .iter()
        .enumerate()
        .map(|(i, member)| fields::policy_value(member).ok_or(Some(i)))
        .collect()
}

impl<S, B, X: KeyExtractor, D> tower_layer::Layer<S> for LimitLayer<B, X, D> {
    type Service = Limit<S, B, X, D>;

    fn layer(&self, inner: S) -> Limit<S, B, X, D> {
        Limit {
            inner,
            shared: Arc::clone(&self.shared),
        }
    }
}

/// An error in a layer's configuration.
///
/// # Examples
///
/// See [`PolicyNameError`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayerError {
    /// The policy name cannot be sent.
    PolicyName(PolicyNameError),
    /// [`tier_names`](LimitLayerBuilder::tier_names) did not name each tier once.
    TierNames {
        /// Names given.
        names: usize,
        /// Tiers of the backend.
        tiers: usize,
    },
}

impl fmt::Display for LayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerError::PolicyName(e) => e.fmt(f),
            LayerError::TierNames { names, tiers } => write!(
                f,
                "tier_names: {names} names given for {tiers} tiers; give exactly one per tier"
            ),
        }
    }
}

impl std::error::Error for LayerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LayerError::PolicyName(e) => Some(e),
            LayerError::TierNames { .. } => None,
        }
    }
}

/// Configures a [`LimitLayer`]; [`build`](LimitLayerBuilder::build) checks it.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::middleware::{peer_ip, Headers, LimitLayer};
/// use tollgate::Quota;
/// let layer = LimitLayer::keyed(KeyedLimiter::new(Quota::per_minute(100)?), peer_ip())
///     .policy_name("per-ip")
///     .headers(Headers::Always)
///     .exempt(|head| head.uri.path() == "/health")
///     .too_many_keys_status(StatusCode::SERVICE_UNAVAILABLE)
///     .build()?;
/// # drop(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct LimitLayerBuilder<B, X: KeyExtractor, D = EmptyBody> {
    backend: B,
    extractor: X,
    on_denied: D,
    options: Options<X::Key>,
}

/// A builder's settings but the backend, the extractor and the refusal's responder (which
/// [`LimitLayerBuilder::on_denied`] replaces, changing the builder's type).
struct Options<K> {
    name: String,
    tier_names: Option<Vec<String>>,
    partition_key: Option<PartitionKey<K>>,
    #[cfg(feature = "tokio")]
    max_delay: Option<Duration>,
    headers: Headers,
    protocol: Protocol,
    on_missing: OnMissing<K>,
    cost: Cost,
    content_bytes: bool,
    exempt: Option<Exempt>,
    dry_run: bool,
    dry_run_headers: bool,
    info: bool,
    statuses: Statuses,
}

impl<B, X: KeyExtractor, D> fmt::Debug for LimitLayerBuilder<B, X, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitLayerBuilder")
            .field("name", &self.options.name)
            .field("headers", &self.options.headers)
            .field("dry_run", &self.options.dry_run)
            .finish_non_exhaustive()
    }
}

impl<B: Backend<X::Key>, X: KeyExtractor, D> LimitLayerBuilder<B, X, D> {
    /// The policy's name in the fields (`"default"` unless set): 1 to 64 bytes of printable
    /// ASCII; [`build`](Self::build) refuses anything else. Sent on every response, so keep it
    /// short; it must not carry anything private.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{LayerError, LimitLayer};
    /// use tollgate::{Quota, TokenBucket};
    /// let bucket = TokenBucket::new(Quota::per_second(1)?);
    /// let err = LimitLayer::global(bucket).policy_name("naïve").build().unwrap_err();
    /// assert!(matches!(err, LayerError::PolicyName(_)));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn policy_name(mut self, name: impl Into<String>) -> Self {
        self.options.name = name.into();
        self
    }

    /// The policy names of a [tiered](crate::keyed::KeyedLimiter::with_tiers) limiter's tiers,
    /// in order: each tier is a policy of its own, and a response carries the policy of its
    /// key's tier. Unless set, tier `i` is named after the policy name, `"default-0"`,
    /// `"default-1"`, .... [`build`](Self::build) checks each name and that there is one per
    /// tier.
    ///
    /// # Examples
    ///
    /// ```
    /// use http::HeaderName;
    /// use tollgate::keyed::{KeyedLimiter, Tiered};
    /// use tollgate::middleware::{header, LimitLayer};
    /// use tollgate::{MonotonicClock, Quota};
    /// let tiers = [Quota::per_minute(60)?, Quota::per_minute(6000)?];
    /// let limiter: KeyedLimiter<http::HeaderValue, Tiered, _> = KeyedLimiter::with_tiers(
    ///     &tiers,
    ///     |key: &http::HeaderValue| usize::from(key.as_bytes().starts_with(b"pro-")),
    ///     MonotonicClock::new(),
    /// )?;
    /// let layer = LimitLayer::keyed(limiter, header(HeaderName::from_static("x-api-key")))
    ///     .tier_names(["free", "pro"])
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tier_names(mut self, names: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.options.tier_names = Some(names.into_iter().map(Into::into).collect());
        self
    }

    /// Adds the draft's `pk` parameter to each `RateLimit` member: the bytes `partition_key`
    /// makes of the request's key, sent as a byte sequence (`pk=:<base64>:`), so a client that
    /// shares a policy with others can tell which partition it was counted in. None unless set.
    /// The draft warns that the key is visible to whoever sees the response: send an opaque
    /// token (a keyed hash, say), never an address or a credential. Costs one allocation per
    /// request for the bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::hash::{BuildHasher, Hash, Hasher};
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::middleware::{peer_ip, LimitLayer};
    /// use tollgate::Quota;
    /// let secret = std::collections::hash_map::RandomState::new();
    /// let layer = LimitLayer::keyed(KeyedLimiter::new(Quota::per_minute(60)?), peer_ip())
    ///     .partition_key(move |ip| {
    ///         let mut h = secret.build_hasher();
    ///         ip.hash(&mut h);
    ///         h.finish().to_be_bytes().to_vec()
    ///     })
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn partition_key(
        mut self,
        partition_key: impl Fn(&X::Key) -> Vec<u8> + Send + Sync + 'static,
    ) -> Self {
        self.options.partition_key = Some(Box::new(partition_key));
        self
    }

    /// Waits instead of refusing, up to `max` (feature `tokio`): over a [`Meter`](super::Meter)
    /// (a leaky meter, direct or keyed), a request that would leave the meter's queue within
    /// `max` takes its place, waits its turn (a tokio timer) and is then passed on; one that would
    /// wait longer is refused as a denial (429), taking no place, its `Retry-After` saying when
    /// it would fit within `max`. Requests passed on this way leave one interval apart, so the
    /// service behind sees a smooth rate rather than bursts. Backends that do not queue ignore
    /// it. A client that gives up while waiting does not give its place back: the meter has
    /// scheduled it. The fields of a delayed request describe the queue when it took its place.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::leaky::LeakyMeter;
    /// use tollgate::middleware::{global, LimitLayer, Meter};
    /// use tollgate::Quota;
    /// // At most 50 requests a second reach the database, evenly; a request waits at most 200 ms.
    /// let meter = LeakyMeter::new(Quota::per_second(50)?);
    /// let layer = LimitLayer::new(Meter::new(meter), global())
    ///     .delay_up_to(Duration::from_millis(200))
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn delay_up_to(mut self, max: Duration) -> Self {
        self.options.max_delay = Some(max);
        self
    }

    /// Which responses carry the fields ([`Headers::Always`] unless set).
    ///
    /// # Examples
    ///
    /// See [`Headers`].
    pub fn headers(mut self, headers: Headers) -> Self {
        self.options.headers = headers;
        self
    }

    /// Which protocol the layer guards, so how it answers a refusal ([`Protocol::Auto`], each
    /// request's own, unless set).
    ///
    /// # Examples
    ///
    /// See [`Protocol`].
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.options.protocol = protocol;
        self
    }

    /// What a request without a key gets ([`OnMissing::Reject`] with 400 unless set).
    ///
    /// # Examples
    ///
    /// See [`OnMissing`].
    pub fn on_missing(mut self, on_missing: OnMissing<X::Key>) -> Self {
        if let OnMissing::Reject(status) = on_missing {
            self.options.statuses.missing_key = status;
        }
        self.options.on_missing = on_missing;
        self
    }

    /// The units a request costs, from its head (1 unless set). A cost of 0 admits the request
    /// as a query: it takes nothing and its fields show the key's state.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::middleware::{peer_ip, LimitLayer};
    /// use tollgate::Quota;
    /// // Writes cost 5, reads 1.
    /// let layer = LimitLayer::keyed(KeyedLimiter::new(Quota::per_minute(600)?), peer_ip())
    ///     .cost(|head| if head.method == http::Method::GET { 1 } else { 5 })
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.options.cost = Cost::With(Box::new(cost));
        self.options.content_bytes = false;
        self
    }

    /// Costs each request its body's `Content-Length` in bytes (`missing` when it has none, as a
    /// chunked upload does); the policy says `qu="content-bytes"`, and a body over the capacity
    /// is refused with 413 Content Too Large.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::middleware::{peer_ip, LimitLayer};
    /// use tollgate::Quota;
    /// // 10 MB a minute per client, bodies of at most 1 MB; 64 KiB for a body of unknown length.
    /// let quota = Quota::per_minute(10_000_000)?.with_capacity(1_000_000)?;
    /// let layer = LimitLayer::keyed(KeyedLimiter::new(quota), peer_ip())
    ///     .cost_content_length(64 * 1024)
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cost_content_length(mut self, missing: u64) -> Self {
        self.options.cost = Cost::ContentLength(missing);
        self.options.content_bytes = true;
        self.options.statuses.too_large = StatusCode::PAYLOAD_TOO_LARGE;
        self
    }

    /// Requests for which `exempt` answers `true` pass uncounted and get no fields (health
    /// checks, say).
    ///
    /// # Examples
    ///
    /// See [`LimitLayerBuilder`].
    pub fn exempt(mut self, exempt: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.options.exempt = Some(Box::new(exempt));
        self
    }

    /// A dry run: the limiter decides as usual, but a refused request is passed through and
    /// counted ([`LimitLayer::would_deny`]) instead. No fields are sent unless
    /// [`dry_run_headers`](Self::dry_run_headers) asks for them. For trying a limit on live
    /// traffic before enforcing it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::LimitLayer;
    /// use tollgate::{Quota, TokenBucket};
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(100)?)).dry_run().build()?;
    /// // ... serve for a while, then:
    /// let refused_if_enforced = layer.would_deny();
    /// # assert_eq!(refused_if_enforced, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dry_run(mut self) -> Self {
        self.options.dry_run = true;
        self
    }

    /// In a dry run, send the fields anyway (as [`headers`](Self::headers) says), so clients
    /// can be watched adapting before the limit is enforced.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::LimitLayer;
    /// use tollgate::{Quota, TokenBucket};
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(100)?))
    ///     .dry_run()
    ///     .dry_run_headers(true)
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn dry_run_headers(mut self, send: bool) -> Self {
        self.options.dry_run_headers = send;
        self
    }

    /// Whether requests get a [`RateLimitInfo`](super::RateLimitInfo) extension (on unless set). It costs one
    /// allocation per request (extensions are boxed); turn it off when no handler reads it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{Headers, LimitLayer};
    /// use tollgate::{Quota, TokenBucket};
    /// // No fields and no extension: the layer allocates nothing per admitted request.
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(100)?))
    ///     .headers(Headers::Never)
    ///     .request_info(false)
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn request_info(mut self, on: bool) -> Self {
        self.options.info = on;
        self
    }

    /// The status of a denial (429 Too Many Requests unless set).
    ///
    /// # Examples
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate::middleware::LimitLayer;
    /// use tollgate::{Quota, TokenBucket};
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(100)?))
    ///     .denied_status(StatusCode::SERVICE_UNAVAILABLE)
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn denied_status(mut self, status: StatusCode) -> Self {
        self.options.statuses.denied = status;
        self
    }

    /// The status when a bounded keyed limiter has no room for a new key (503 unless set).
    ///
    /// # Examples
    ///
    /// See [`LimitLayerBuilder`].
    pub fn too_many_keys_status(mut self, status: StatusCode) -> Self {
        self.options.statuses.too_many_keys = status;
        self
    }

    /// The status of a request that costs more than the capacity (429 unless set; 413 with
    /// [`cost_content_length`](Self::cost_content_length)).
    ///
    /// # Examples
    ///
    /// ```
    /// use http::StatusCode;
    /// use tollgate::middleware::LimitLayer;
    /// use tollgate::{Quota, TokenBucket};
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(100)?))
    ///     .insufficient_capacity_status(StatusCode::BAD_REQUEST)
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn insufficient_capacity_status(mut self, status: StatusCode) -> Self {
        self.options.statuses.too_large = status;
        self
    }

    /// The status when the backend cannot decide (503 unless set), and the `Retry-After` sent
    /// with it (none unless set; rounded up to whole seconds, at least 1).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use tollgate::middleware::LimitLayer;
    /// use tollgate::{Quota, TokenBucket};
    /// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(100)?))
    ///     .unavailable(StatusCode::SERVICE_UNAVAILABLE, Some(Duration::from_secs(5)))
    ///     .build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unavailable(mut self, status: StatusCode, retry_after: Option<Duration>) -> Self {
        self.options.statuses.unavailable = status;
        self.options.statuses.unavailable_retry = retry_after;
        self
    }

    /// How a refusal's response is built (an empty body with the status unless set). The layer
    /// adds its fields to the response returned. Refusals answered in gRPC's way (see
    /// [`protocol`](Self::protocol)) do not use it.
    ///
    /// # Examples
    ///
    /// See [`Rejection`](super::Rejection).
    pub fn on_denied<E>(self, on_denied: E) -> LimitLayerBuilder<B, X, E> {
        LimitLayerBuilder {
            backend: self.backend,
            extractor: self.extractor,
            on_denied,
            options: self.options,
        }
    }

    /// The layer.
    ///
    /// # Errors
    ///
    /// [`LayerError::PolicyName`] for a policy name that is not 1 to 64 bytes of printable
    /// ASCII.
    ///
    /// # Examples
    ///
    /// See [`LimitLayer`].
    pub fn build(self) -> Result<LimitLayer<B, X, D>, LayerError> {
        // A backend answering no tiers (a user's `Backend` may) has its one quota.
        let mut tiers = self.backend.tiers();
        if tiers.is_empty() {
            tiers.push(self.backend.quota());
        }
        let names = match self.options.tier_names {
            Some(names) if names.len() != tiers.len() => {
                return Err(LayerError::TierNames {
                    names: names.len(),
                    tiers: tiers.len(),
                })
            }
            Some(names) => names,
            None if tiers.len() == 1 => vec![self.options.name.clone()],
            None => (0..tiers.len())
                .map(|i| format!("{}-{i}", self.options.name))
                .collect(),
        };
        let sf_names = names
            .iter()
            .map(|name| fields::sf_string(name))
            .collect::<Result<Vec<String>, _>>()
            .map_err(LayerError::PolicyName)?;
        // Several limits at once: every response lists them all (the draft's `RateLimit-Policy`
        // is a list), and its `RateLimit` names the one the decision was from.
        let all_apply = self.backend.all_apply() && tiers.len() > 1;
        let sf_refs: Vec<&str> = sf_names.iter().map(String::as_str).collect();
        let content_bytes = self.options.content_bytes;
        let values = policy_values(&sf_refs, &tiers, content_bytes, all_apply).map_err(|at| {
            let name = match at {
                Some(i) => names[i].clone(),
                None => names.join(", "),
            };
            LayerError::PolicyName(PolicyNameError::new(&name))
        })?;
        let policies: Vec<NamedPolicy> = tiers
            .iter()
            .zip(sf_names)
            .zip(values)
            .zip(&names)
            .map(|(((quota, sf), value), _name)| NamedPolicy {
                quota: *quota,
                name: sf,
                value,
                #[cfg(feature = "metrics")]
                meters: PolicyMeters::register(_name),
            })
            .collect();
        Ok(LimitLayer {
            shared: Arc::new(LayerShared {
                backend: self.backend,
                extractor: self.extractor,
                on_denied: self.on_denied,
                tiers: policies.len(),
                policies: Current::new(policies.into_boxed_slice()),
                retune: Mutex::new(()),
                content_bytes,
                all_apply,
                partition_key: self.options.partition_key,
                #[cfg(feature = "tokio")]
                max_delay: self.options.max_delay,
                headers: self.options.headers,
                protocol: self.options.protocol,
                on_missing: self.options.on_missing,
                cost: self.options.cost,
                exempt: self.options.exempt,
                dry_run: self.options.dry_run,
                dry_run_headers: self.options.dry_run_headers,
                info: self.options.info,
                statuses: self.options.statuses,
                would_deny: AtomicU64::new(0),
                #[cfg(feature = "tracing")]
                setup_logged: AtomicBool::new(false),
            }),
        })
    }
}
