//! What a built layer shares with every service it makes: its configuration ([`LayerShared`]), the
//! policies it advertises ([`NamedPolicy`], read per request through [`Policies`]), and the public
//! settings the builder takes ([`Headers`], [`Protocol`], [`OnMissing`]) and the request
//! extension it writes ([`RateLimitInfo`]). The lowest of the layer's modules: the response
//! building, the service and the layer build on it, and it on none of them.

#[cfg(feature = "tracing")]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use http::request::Parts;
use http::{HeaderValue, StatusCode};

#[cfg(feature = "metrics")]
use super::backend::Refusal;
use super::backend::{Backend, Decision};
use super::key::KeyExtractor;
use crate::change::{Current, Read};
use crate::quota::Quota;

/// The message of a missing peer address, in the 500's body and (feature `tracing`) the warning.
pub(crate) const NO_CONNECT_INFO: &str = "the rate limit is keyed by the peer's address, but the \
    request carries none: serve the axum router with \
    `into_make_service_with_connect_info::<SocketAddr>()` (and enable tollgate's `axum` feature), \
    or insert the peer's `SocketAddr` into each request's extensions";

/// Which responses carry the `RateLimit-Policy` and `RateLimit` fields.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{Headers, LimitLayer};
/// use tollgate::{Quota, TokenBucket};
/// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(10)?))
///     .headers(Headers::OnDenial)
///     .build()?;
/// # drop(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Non-exhaustive: other choices may be added, so a `match` outside this crate needs a wildcard
/// arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Headers {
    /// Every response the layer decided (the default).
    #[default]
    Always,
    /// Refusals only; admissions are passed through untouched.
    OnDenial,
    /// None (`Retry-After` is still sent on a denial: it is the status code's own field).
    Never,
}

/// Which protocol the layer guards: how it answers a refusal.
///
/// HTTP's answer is the refusal's status (429 for a denial) with `Retry-After` and the fields;
/// gRPC's is a trailers-only response, HTTP 200 with `grpc-status` (8, `RESOURCE_EXHAUSTED`, for a
/// denial) and `grpc-retry-pushback-ms`, the fields as metadata (see the
/// [module docs](super#refusals)). Admitted requests are passed on alike under every choice.
///
/// # Examples
///
/// A plain HTTP API: a request that says `Content-Type: application/grpc` is still refused with a
/// 429, not with a gRPC answer that logs and proxies would count as a success.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use std::convert::Infallible;
/// use http::{Request, Response, StatusCode};
/// use tower::{service_fn, Layer, ServiceExt};
/// use tollgate::middleware::{LimitLayer, Protocol};
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// let bucket = TokenBucket::with_clock(Quota::per_minute(1)?, ManualClock::new());
/// let layer = LimitLayer::global(bucket).protocol(Protocol::Http).build()?;
/// let svc = layer.layer(service_fn(|_req: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::new()))
/// }));
/// let grpc = || Request::post("/").header("content-type", "application/grpc").body(String::new());
/// svc.clone().oneshot(grpc()?).await?;
/// let refused = svc.oneshot(grpc()?).await?;
/// assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
/// assert_eq!(refused.headers()["retry-after"], "60");
/// assert!(refused.headers().get("grpc-status").is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
///
/// Non-exhaustive: other choices may be added, so a `match` outside this crate needs a wildcard
/// arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Protocol {
    /// Each request's own (the default): gRPC's answer when its content type is
    /// `application/grpc` or one of its `+` forms (`application/grpc+proto`), HTTP's otherwise.
    /// For a server that carries both, as an axum router with a tonic service nested in it does.
    #[default]
    Auto,
    /// HTTP's answer to every refusal, whatever the request's content type.
    Http,
    /// gRPC's answer to every refusal, whatever the request's content type (a tonic server).
    Grpc,
}

/// What to do with a request whose key extractor found no key (a missing header, say).
///
/// # Examples
///
/// ```
/// use http::{HeaderName, StatusCode};
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::middleware::{header, LimitLayer, OnMissing};
/// use tollgate::Quota;
/// let limiter = KeyedLimiter::new(Quota::per_minute(60)?);
/// let layer = LimitLayer::keyed(limiter, header(HeaderName::from_static("x-api-key")))
///     .on_missing(OnMissing::Reject(StatusCode::UNAUTHORIZED))
///     .build()?;
/// # drop(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Non-exhaustive: other choices may be added, so a `match` outside this crate needs a wildcard
/// arm.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum OnMissing<K> {
    /// Answer with this status (400 by default), no fields, inner service not called.
    Reject(StatusCode),
    /// Count the request under this key: every keyless request shares one limit.
    Key(K),
    /// Pass the request through, unlimited and without fields.
    Allow,
}

/// Whether a request is exempt.
pub(crate) type Exempt = Box<dyn Fn(&Parts) -> bool + Send + Sync>;

/// A key's partition key bytes, for `pk`.
pub(crate) type PartitionKey<K> = Box<dyn Fn(&K) -> Vec<u8> + Send + Sync>;

/// What a request costs.
pub(crate) enum Cost {
    /// One unit per request.
    One,
    /// The closure's answer.
    With(Box<dyn Fn(&Parts) -> u64 + Send + Sync>),
    /// The body's `Content-Length`, or this when there is none (or it is not a number).
    ContentLength(u64),
}

impl Cost {
    pub(crate) fn of(&self, head: &Parts) -> u64 {
        match self {
            Cost::One => 1,
            Cost::With(f) => f(head),
            Cost::ContentLength(missing) => head
                .headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(*missing),
        }
    }
}

/// Statuses, per kind of refusal.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Statuses {
    pub(crate) denied: StatusCode,
    pub(crate) too_many_keys: StatusCode,
    pub(crate) too_large: StatusCode,
    pub(crate) unavailable: StatusCode,
    pub(crate) unavailable_retry: Option<Duration>,
    pub(crate) missing_key: StatusCode,
}

/// What the request's [`RateLimitInfo`] says was decided.
///
/// # Examples
///
/// See [`RateLimitInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum InfoDecision {
    /// Admitted.
    Admitted,
    /// Refused, and passed through because the layer is a [dry run](super::LimitLayerBuilder::dry_run).
    WouldDeny,
    /// Not counted: exempt, or without a key under [`OnMissing::Allow`].
    Exempt,
}

/// What the layer decided, in the request's extensions for handlers and logs (`Extension<RateLimitInfo>`
/// in axum).
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{InfoDecision, RateLimitInfo};
/// fn log_line(info: &RateLimitInfo) -> String {
///     match info.decision() {
///         InfoDecision::Admitted => format!("ok, {} left of {}", info.remaining(), info.quota().count()),
///         InfoDecision::WouldDeny => "over the limit (dry run)".into(),
///         _ => "not limited".into(),
///     }
/// }
/// # let _ = log_line;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitInfo {
    pub(crate) decision: InfoDecision,
    pub(crate) remaining: u64,
    pub(crate) quota: Quota,
}

impl RateLimitInfo {
    /// The decision.
    ///
    /// # Examples
    ///
    /// See [`RateLimitInfo`].
    pub fn decision(&self) -> InfoDecision {
        self.decision
    }

    /// The units left for this request's key after it (0 when not counted).
    ///
    /// # Examples
    ///
    /// See [`RateLimitInfo`].
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The quota enforced.
    ///
    /// # Examples
    ///
    /// See [`RateLimitInfo`].
    pub fn quota(&self) -> &Quota {
        &self.quota
    }
}

/// One policy (a tier's, or the only one): its quota, name and `RateLimit-Policy` value.
#[derive(Debug, Clone)]
pub(crate) struct NamedPolicy {
    pub(crate) quota: Quota,
    /// The name, as an sf-string.
    pub(crate) name: String,
    /// The `RateLimit-Policy` value, built once.
    pub(crate) value: HeaderValue,
    /// Its `tollgate_middleware_decisions_total` handles, registered when the layer is built.
    #[cfg(feature = "metrics")]
    pub(crate) meters: PolicyMeters,
}

/// One policy's `tollgate_middleware_decisions_total` handles, one per outcome.
#[cfg(feature = "metrics")]
#[derive(Debug, Clone)]
pub(crate) struct PolicyMeters {
    admitted: ::metrics::Counter,
    denied: ::metrics::Counter,
    unavailable: ::metrics::Counter,
    would_deny: ::metrics::Counter,
}

#[cfg(feature = "metrics")]
impl PolicyMeters {
    /// Registers the handles of the policy named `name` with the recorder installed now.
    pub(crate) fn register(name: &str) -> PolicyMeters {
        let outcome = |outcome: &'static str| {
            ::metrics::counter!(
                crate::metrics::MIDDLEWARE_DECISIONS,
                "policy" => name.to_owned(),
                "outcome" => outcome
            )
        };
        PolicyMeters {
            admitted: outcome("admitted"),
            denied: outcome("denied"),
            unavailable: outcome("unavailable"),
            would_deny: outcome("would_deny"),
        }
    }

    /// One request admitted.
    pub(crate) fn admitted(&self) {
        self.admitted.increment(1);
    }

    /// One request refused and let through by a dry run.
    pub(crate) fn would_deny(&self) {
        self.would_deny.increment(1);
    }

    /// One request refused for `refusal`.
    pub(crate) fn refused(&self, refusal: &Refusal) {
        match refusal {
            Refusal::Unavailable(_) => self.unavailable.increment(1),
            _ => self.denied.increment(1),
        }
    }
}

/// The layer's configuration, shared by every clone of the layer and of its services.
pub(crate) struct LayerShared<B, X: KeyExtractor, D> {
    pub(crate) backend: B,
    pub(crate) extractor: X,
    pub(crate) on_denied: D,
    /// One per tier of the backend (at least one, and always as many), read by each request
    /// without a lock and replaced whole by a [`QuotaHandle`](super::QuotaHandle) (see
    /// [`LayerShared::policies`]).
    pub(crate) policies: Current<Box<[NamedPolicy]>>,
    /// How many policies there are: a change never alters it.
    pub(crate) tiers: usize,
    /// Serializes changes through the [`QuotaHandle`](super::QuotaHandle)s, so that the backend's quotas and the
    /// policies swapped in are changed in the same order. Requests never take it.
    pub(crate) retune: Mutex<()>,
    /// The cost is the body's length: the policies say `qu="content-bytes"`.
    pub(crate) content_bytes: bool,
    /// Every policy applies to every request ([`Backend::all_apply`]): decisions come from
    /// [`Backend::decide_indexed`], whose index picks the policy.
    pub(crate) all_apply: bool,
    pub(crate) partition_key: Option<PartitionKey<X::Key>>,
    #[cfg(feature = "tokio")]
    pub(crate) max_delay: Option<Duration>,
    pub(crate) headers: Headers,
    pub(crate) protocol: Protocol,
    pub(crate) on_missing: OnMissing<X::Key>,
    pub(crate) cost: Cost,
    pub(crate) exempt: Option<Exempt>,
    pub(crate) dry_run: bool,
    pub(crate) dry_run_headers: bool,
    pub(crate) info: bool,
    pub(crate) statuses: Statuses,
    pub(crate) would_deny: AtomicU64,
    /// The set-up error's event was emitted (once per layer).
    #[cfg(feature = "tracing")]
    pub(crate) setup_logged: AtomicBool,
}

impl<B: Backend<X::Key>, X: KeyExtractor, D> LayerShared<B, X, D> {
    /// The `pk` bytes of `key`, when configured.
    #[inline]
    pub(crate) fn partition_key(&self, key: &X::Key) -> Option<Vec<u8>> {
        self.partition_key.as_ref().map(|pk| pk(key))
    }

    /// The tier limiting `key`, when the decision named none: asked of the backend only when it
    /// has more than one.
    #[inline]
    pub(crate) fn tier_of(&self, key: &X::Key) -> usize {
        if self.tiers > 1 {
            self.backend.tier_of_key(key)
        } else {
            0
        }
    }

    /// The backend's decision on `cost` units for `key`, with the index of the policy it names
    /// when the backend gives one. Several limits at once ask [`Backend::decide_indexed`] (they
    /// cannot queue: `delay_up_to` does not apply); tiers ask it too, so that a keyed limiter
    /// answers the key's tier from the lookup that decides (one lookup, not a second after the
    /// decision); a layer that waits asks [`Backend::decide_within`], and one limit of one tier
    /// [`Backend::decide`].
    #[inline]
    pub(crate) fn decide(&self, key: &X::Key, cost: u64) -> (Option<usize>, Decision<B::Future>) {
        if self.all_apply {
            return self.backend.decide_indexed(key, cost);
        }
        #[cfg(feature = "tokio")]
        if let Some(max) = self.max_delay {
            return (None, self.backend.decide_within(key, cost, max));
        }
        if self.tiers > 1 {
            self.backend.decide_indexed(key, cost)
        } else {
            (None, self.backend.decide(key, cost))
        }
    }
}

/// The layer's policies as one request reads them: one whole set, the old or the new when a
/// [`QuotaHandle`](super::QuotaHandle) changes them meanwhile. Holds the crate's epoch (a pin, or on a thread with no
/// epoch slot the change mutex): drop it before calling anything outside the layer (the inner
/// service, an [`OnDenied`](super::OnDenied)), and never hold it across an `.await`, or a change would wait for
/// it.
pub(crate) struct Policies<'a>(Read<'a, Box<[NamedPolicy]>>);

impl Policies<'_> {
    /// The policy of `tier` (the last one for an index past the end).
    #[inline]
    pub(crate) fn get(&self, tier: usize) -> &NamedPolicy {
        let last = self.0.len().saturating_sub(1);
        &self.0[tier.min(last)]
    }
}

impl<B, X: KeyExtractor, D> LayerShared<B, X, D> {
    /// The policies, for one request (see [`Policies`]): a pin and an Acquire load, no lock.
    #[inline]
    pub(crate) fn policies(&self) -> Policies<'_> {
        Policies(self.policies.read())
    }

    /// Counts a refusal a dry run let through.
    pub(crate) fn count_would_deny(&self) {
        // Relaxed: a statistic; no other memory is published through it.
        self.would_deny.fetch_add(1, Ordering::Relaxed);
    }

    /// Reports a set-up error (a peer-address key without connect info) once per layer, as a
    /// `tracing` warning. Without the `tracing` feature nothing is printed: the 500's body says
    /// the same, and an [`OnDenied`](super::OnDenied) sees [`RejectionKind::NoConnectInfo`](super::RejectionKind::NoConnectInfo).
    #[cfg(feature = "tracing")]
    pub(crate) fn log_setup_error_once(&self) {
        // Relaxed: only which caller logs is decided here; nothing is published through it.
        if !self.setup_logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                policy = %self.policies().get(0).name,
                "tollgate: {}",
                NO_CONNECT_INFO
            );
        }
    }

    pub(crate) fn info(
        &self,
        head: &mut Parts,
        policy: &NamedPolicy,
        decision: InfoDecision,
        remaining: u64,
    ) {
        if self.info {
            head.extensions.insert(RateLimitInfo {
                decision,
                remaining,
                quota: policy.quota,
            });
        }
    }

    /// [`LayerShared::info`] for a request passed on uncounted: the first policy's quota, read only
    /// when the extension is on.
    pub(crate) fn info_exempt(&self, head: &mut Parts) {
        if self.info {
            self.info(head, self.policies().get(0), InfoDecision::Exempt, 0);
        }
    }
}
