//! HTTP middleware for tower servers (axum, hyper, tonic): [`LimitLayer`] (feature `tower`).
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tollgate::keyed::KeyedLimiter;
//! use tollgate::middleware::{peer_ip, LimitLayer};
//! use tollgate::Quota;
//!
//! // Each client address: 30 requests a minute, in bursts of at most 5.
//! let per_ip = KeyedLimiter::new(Quota::per_minute(30)?.with_capacity(5)?);
//! let layer = LimitLayer::keyed(per_ip, peer_ip()).build()?;
//! // axum:  Router::new().route("/", get(handler)).layer(layer)
//! //        served with .into_make_service_with_connect_info::<SocketAddr>()
//! // tonic: Server::builder().layer(layer).add_service(..)
//! # drop(layer);
//! # Ok(())
//! # }
//! ```
//!
//! # The shape of the layer
//!
//! - **Shared.** Cloning a [`LimitLayer`] or a [`Limit`] service clones an `Arc`: every clone,
//!   every connection and every worker thread shares one limiter.
//! - **Decided in `call`.** `poll_ready` only forwards to the inner service; the decision is made
//!   when the request arrives, so a refused request never holds the inner service's readiness.
//! - **No errors of its own.** The inner service's errors pass through unchanged and a refusal is
//!   a response, so axum needs no `HandleErrorLayer`.
//! - **Any limiter.** The layer is generic over a [`Backend`]: [`Keyed`] wraps any
//!   [`KeyedLimit`](crate::KeyedLimit) (a [`KeyedLimiter`](crate::keyed::KeyedLimiter) of any
//!   algorithm), [`Global`] any direct [`Limiter`](crate::Limiter) (one limit for every request),
//!   [`Meter`] a leaky meter (direct or keyed, which can also delay instead of refusing),
//!   [`KeyedAllOf`] and [`GlobalAllOf`] several limits at once ([`AllOf`](crate::AllOf): "10 a
//!   second and 1 000 an hour"), [`Redis`] (features `tower` and `redis`) a limit shared
//!   across machines, and [`RedisAll`] (the same features) several limits shared across machines
//!   ([`RedisAllOf`](crate::redis::RedisAllOf)). An in-process backend decides at once, with no
//!   future and no allocation; the Redis ones through a future, whose answer carries the index
//!   of the limit it is from when there are several ([`Answer`]).
//!
//! # Keys
//!
//! A [`KeyExtractor`] reads a request's head: [`peer_ip`] (the connection's address, IPv6
//! grouped by `/64`), [`header`], [`global`], and the others of the [`key`] module, which also
//! explains how to key on a client behind trusted proxies without trusting what the client
//! wrote. A request without a key gets [`OnMissing`] (400 unless set). A peer-address key on a
//! server that does not record peer addresses is a setup error: 500, whose body (for axum's
//! `Body` and `String` bodies) names `into_make_service_with_connect_info::<SocketAddr>()`, and a
//! line on standard error, once per layer.
//!
//! # The fields
//!
//! Responses carry the fields of draft-ietf-httpapi-ratelimit-headers-10 (27 September 2025),
//! each an RFC 9651 List with one member per layer (the layer appends, never replaces, so
//! stacked layers each add theirs):
//!
//! | field | example | meaning |
//! | --- | --- | --- |
//! | `RateLimit-Policy` | `"default";q=100;w=60` | the quota: `q` units per `w` seconds; `qu="content-bytes"` when the cost is the body's length; `tollgate-burst=C` when the capacity `C` is not `q` |
//! | `RateLimit` | `"default";r=0;t=30` | `r` units remaining; `t` seconds (rounded up) until one more unit is free, left out when nothing is taken |
//! | `Retry-After` | `30` | on a denial only: the seconds until the same request would be admitted, rounded up, at least 1, and never before `t` |
//!
//! The policy's name is `"default"` unless [set](LimitLayerBuilder::policy_name) (printable ASCII,
//! checked when the layer is built). A quota whose period is not whole seconds is sent as the
//! next whole `w`, with `q = floor(count * w / period)`: never more than the limiter allows.
//! [`Headers`] chooses which responses carry the fields (all the layer decided, unless set). A
//! [tiered](crate::keyed::KeyedLimiter::with_tiers) keyed limiter's tiers are policies of their
//! own ([`tier_names`](LimitLayerBuilder::tier_names)): a response carries its key's tier's.
//! Several limits at once ([`KeyedAllOf`], [`GlobalAllOf`], [`RedisAll`]) are policies too, named
//! the same way:
//! every response lists them all in `RateLimit-Policy` (the draft allows a list), and its
//! `RateLimit` names the one that binds (the fewest remaining) or, on a refusal, the one whose
//! wait `Retry-After` gives (the longest of the refusing limits').
//! `pk` is sent only with [`partition_key`](LimitLayerBuilder::partition_key).
//!
//! # Refusals
//!
//! | why | status | `Retry-After` | fields |
//! | --- | --- | --- | --- |
//! | the limit is reached | 429 Too Many Requests | yes | both |
//! | the cost exceeds the capacity (it never fits) | 413 Content Too Large for byte costs, else 429 | no (a retry would fail too) | the policy |
//! | a bounded keyed limiter has no room for a new key | 503 Service Unavailable | no (no rate decision was made) | the policy |
//! | the backend could not decide (Redis) | 503 | as configured | the policy |
//! | no key, under [`OnMissing::Reject`] | as configured (400) | no | none |
//!
//! Every status is configurable on the [builder](LimitLayerBuilder). The body is empty (the
//! response body type's `Default`, tower-http's convention) unless
//! [`on_denied`](LimitLayerBuilder::on_denied) builds the response, for example as the draft's
//! `quota-exceeded` problem details; the fields are added to whatever it returns.
//!
//! A gRPC request (content type `application/grpc...`) is refused in gRPC's way instead: a
//! trailers-only response, HTTP 200 with `grpc-status: 8` (`RESOURCE_EXHAUSTED`; 14,
//! `UNAVAILABLE`, when no rate decision was made), a `grpc-message`, and
//! `grpc-retry-pushback-ms` (gRFC A6, honoured by clients' retry policies; `-1`, "do not retry",
//! when the request can never fit), plus the fields as metadata. The same layer goes on tonic's
//! `Server::builder().layer(..)`. [`Protocol`] fixes the answer instead
//! ([`protocol`](LimitLayerBuilder::protocol)): `Http` answers every refusal in HTTP's way, so a
//! plain HTTP route never answers a stray `application/grpc` request with an HTTP 200, and `Grpc`
//! every refusal in gRPC's way, whatever the content type.
//!
//! # Costs, exemptions, dry runs, and what handlers see
//!
//! - [`cost`](LimitLayerBuilder::cost) charges a request any number of units from its head (0
//!   is a query: admitted, nothing taken, fields sent);
//!   [`cost_content_length`](LimitLayerBuilder::cost_content_length) charges its body's length.
//! - [`exempt`](LimitLayerBuilder::exempt) lets requests through uncounted and without fields
//!   (health checks).
//! - [`dry_run`](LimitLayerBuilder::dry_run) never refuses: the limiter decides as usual, and
//!   what it would have refused is let through and counted ([`LimitLayer::would_deny`]).
//! - Every request the layer passes on carries a [`RateLimitInfo`] extension (the decision, the
//!   units left, the quota), unless [turned off](LimitLayerBuilder::request_info).
//! - Limits per route: put the layer on the route (axum's `route_layer`), or key on
//!   [`from_fn`] with the route's `MatchedPath` extension in the key.
//!
//! # Changing the quota at runtime
//!
//! [`LimitLayer::quota_handle`] gives a [`QuotaHandle`] for the application to keep (beside its
//! configuration reloader, say): [`set_quota`](QuotaHandle::set_quota) changes the backend's
//! limiter (by the crate's rule, "Changing a quota" in the crate docs) and then the fields, which
//! advertise the new quota from the next request on. Requests read the policies without a lock,
//! through the same epoch-protected pointer as a direct limiter's checks; each response carries
//! one whole policy. [`set_tier_quota`](QuotaHandle::set_tier_quota) changes one tier or one of
//! several limits. A backend that cannot change (a limiter behind a trait object)
//! answers [`SetQuotaError::Unsupported`]; [`Global`] and [`Keyed`] ask their limiter's
//! [`ChangeQuota`] (a keyed limiter changes the tier asked for). Behind
//! [`Redis`], the handle changes this process's limiter: change every process. Behind
//! [`RedisAll`] it answers [`SetQuotaError::Unsupported`]: several Redis limits cannot change
//! their quotas yet.
//!
//! ```
//! use tollgate::middleware::LimitLayer;
//! use tollgate::{Quota, TokenBucket};
//! let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(100)?)).build()?;
//! let handle = layer.quota_handle();
//! // Later, when the configuration says so:
//! handle.set_quota(Quota::per_second(250)?)?;
//! assert_eq!(handle.quotas(), [Quota::per_second(250)?]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Waiting instead of refusing
//!
//! Over a leaky meter ([`Meter`], direct or keyed), `LimitLayerBuilder::delay_up_to`
//! (feature `tokio`) holds a request until its place in the meter's queue comes up, if that is
//! within the bound, and refuses it (taking no place) if not: the service behind sees requests
//! evenly spaced instead of bursts, and clients a short wait instead of a 429.
//!
//! # Cost
//!
//! The layer's own work on an admitted request is the key's extraction, one limiter check (for a
//! [tiered](crate::keyed::KeyedLimiter::with_tiers) keyed limiter, the same lookup also answers
//! the key's tier: [`KeyedLimit::check_key_n_and_tier`](crate::KeyedLimit::check_key_n_and_tier)),
//! reading the policies (a pin of the crate's epoch and one load), and, with the fields on,
//! writing the `RateLimit` value on the stack and copying it into a per-thread buffer it is cut
//! from (no allocation: a buffer is reused once the responses cut from it are gone, a new one
//! taken, about every 80 responses, only while they are not), and one allocation for the boxed
//! `RateLimitInfo` extension. The `RateLimit-Policy` value is built when the layer is (and again on each change of its
//! quota), and interned for the life of the process, so that every response copies a pointer rather than
//! moving a reference count that all cores' requests would share (at most 1 024 distinct values
//! are interned, a few dozen bytes each; a layer built past that keeps its own, counted value).
//! With the extension off, the layer allocates nothing, fields on or off
//! (`tests/middleware_alloc.rs` counts both).
//! `benches/http.rs` measures the layer beside no layer and tower-governor.

// The layout, lowest first (tower's: the layer builds the service, never the reverse):
// `fields` writes the values, `backend` decides, `shared` is what a built layer shares with its
// services, `response` builds the fields and the refusals from it, `service` is `Limit` and its
// future, `layer` the builder and `LimitLayer`, which makes the service.
mod backend;
mod fields;
pub mod key;
mod layer;
mod quota_handle;
mod response;
mod service;
mod shared;

pub use backend::{
    Answer, Backend, Decision, Global, GlobalAllOf, Keyed, KeyedAllOf, Meter, Refusal,
};
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use backend::{KeyBytes, Redis, RedisAll};
pub use fields::{PolicyNameError, MAX_POLICY_NAME};
pub use key::{
    extension, forwarded, from_fn, global, header, peer_addr, peer_ip, CidrError, ExtensionKey,
    FnKey, Forwarded, ForwardedHeader, GlobalKey, HeaderKey, KeyConfigError, KeyError,
    KeyExtractor, PeerIp, DEFAULT_IPV6_PREFIX, MAX_HEADER_KEY_LEN,
};
pub use layer::{LayerError, LimitLayer, LimitLayerBuilder};
pub use quota_handle::{ChangeQuota, QuotaHandle, SetQuotaError};
pub use response::{EmptyBody, OnDenied, Rejection, RejectionKind};
pub use service::{Limit, ResponseFuture};
pub use shared::{Headers, InfoDecision, OnMissing, Protocol, RateLimitInfo};
