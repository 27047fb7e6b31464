//! How the layer answers: the fields it adds to a response ([`Fields`], from a [`Grant`] or a
//! [`Refusal`]), and the response to a refused request ([`Rejection`], built by an
//! [`OnDenied`], or gRPC's trailers-only answer).

use http::header::{HeaderName, CONTENT_TYPE, RETRY_AFTER};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::backend::Refusal;
use super::fields::{self, FieldBuf};
use super::key::KeyExtractor;
use super::shared::{Headers, LayerShared, NamedPolicy, NO_CONNECT_INFO};
use crate::outcome::Admitted;
use crate::quota::Quota;

/// What an admission's fields say: the units left and the wait until one more is free. From an
/// [`Admitted`], or from a place in a leaky meter's queue.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub(crate) remaining: u64,
    next: Option<std::time::Duration>,
}

impl From<Admitted> for Grant {
    #[inline]
    fn from(a: Admitted) -> Grant {
        Grant {
            remaining: a.remaining(),
            next: a.next_after(),
        }
    }
}

#[cfg(feature = "tokio")]
impl From<&crate::outcome::Scheduled> for Grant {
    fn from(s: &crate::outcome::Scheduled) -> Grant {
        Grant {
            remaining: s.remaining(),
            next: s.next_after(),
        }
    }
}

/// The `RateLimit-Policy` field's name (draft-ietf-httpapi-ratelimit-headers-10).
pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` field's name.
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
const GRPC_PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// Why the layer refused a request: what an [`on_denied`](super::LimitLayerBuilder::on_denied)
/// response builder is given.
///
/// # Examples
///
/// ```
/// use http::{Response, StatusCode};
/// use tollgate::middleware::{LimitLayer, Rejection, RejectionKind};
/// use tollgate::{Quota, TokenBucket};
/// let layer = LimitLayer::global(TokenBucket::new(Quota::per_second(10)?))
///     .on_denied(|r: &Rejection| {
///         let body = match r.kind() {
///             RejectionKind::Denied => format!("slow down: retry in {} s", r.retry_after_secs().unwrap_or(1)),
///             _ => String::new(),
///         };
///         let mut res = Response::new(body);
///         *res.status_mut() = r.status();
///         res
///     })
///     .build()?;
/// # drop(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Rejection {
    pub(crate) kind: RejectionKind,
    pub(crate) status: StatusCode,
    pub(crate) retry_after_secs: Option<u64>,
    pub(crate) refusal: Option<Refusal>,
    pub(crate) quota: Quota,
}

impl Rejection {
    /// Why.
    ///
    /// # Examples
    ///
    /// See [`Rejection`].
    pub fn kind(&self) -> RejectionKind {
        self.kind
    }

    /// The status the layer answers with (configured per kind).
    ///
    /// # Examples
    ///
    /// See [`Rejection`].
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The `Retry-After` sent, in whole seconds, when one is.
    ///
    /// # Examples
    ///
    /// See [`Rejection`].
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after_secs
    }

    /// The backend's refusal, when the backend made the decision.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::{Rejection, Refusal};
    /// fn remaining(r: &Rejection) -> Option<u64> {
    ///     match r.refusal()? {
    ///         Refusal::Denied(d) => Some(d.remaining()),
    ///         _ => None,
    ///     }
    /// }
    /// # let _ = remaining;
    /// ```
    pub fn refusal(&self) -> Option<&Refusal> {
        self.refusal.as_ref()
    }

    /// The quota enforced.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::middleware::Rejection;
    /// fn per(r: &Rejection) -> u64 {
    ///     r.quota().count()
    /// }
    /// # let _ = per;
    /// ```
    pub fn quota(&self) -> &Quota {
        &self.quota
    }
}

/// The kinds of [`Rejection`].
///
/// # Examples
///
/// See [`Rejection`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectionKind {
    /// The limit was reached: 429 with `Retry-After`.
    Denied,
    /// The request costs more than the capacity and never fits: 413 when the cost is the body's
    /// length, else 429 without `Retry-After` (a retry would not succeed).
    InsufficientCapacity,
    /// A bounded keyed limiter had no room for a new key: 503 without `Retry-After` (no rate
    /// decision was made).
    TooManyKeys,
    /// The backend could not decide (Redis out of reach): 503, with the configured
    /// `Retry-After`.
    Unavailable,
    /// The key extractor found no key and [`OnMissing::Reject`](super::OnMissing::Reject) applies.
    MissingKey,
    /// A peer-address key found no peer address: the server was not set up to record it.
    /// 500; see [`KeyError::NoConnectInfo`](super::KeyError::NoConnectInfo).
    NoConnectInfo,
}

/// How a refusal's response is built; a closure `Fn(&Rejection) -> Response<B>` is one.
///
/// The default, [`EmptyBody`], answers the rejection's status with `B::default()` (tower-http's
/// convention). The layer adds its fields (`Retry-After`, `RateLimit-Policy`, `RateLimit`) to
/// whatever is returned.
///
/// # Examples
///
/// See [`Rejection`].
pub trait OnDenied<B>: Send + Sync + 'static {
    /// The response to `rejection`.
    fn respond(&self, rejection: &Rejection) -> Response<B>;
}

impl<B, F> OnDenied<B> for F
where
    F: Fn(&Rejection) -> Response<B> + Send + Sync + 'static,
{
    fn respond(&self, rejection: &Rejection) -> Response<B> {
        self(rejection)
    }
}

/// The default refusal: the status, and an empty (`Default`) body.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{EmptyBody, OnDenied};
/// fn takes<D: OnDenied<String>>(_: D) {}
/// takes(EmptyBody);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptyBody;

impl<B: Default> OnDenied<B> for EmptyBody {
    fn respond(&self, rejection: &Rejection) -> Response<B> {
        let mut res = Response::new(B::default());
        *res.status_mut() = rejection.status;
        res
    }
}

/// The fields the layer adds to a response, appended after the inner service's own.
#[derive(Debug, Default)]
pub(crate) struct Fields {
    retry_after: Option<HeaderValue>,
    policy: Option<HeaderValue>,
    ratelimit: Option<HeaderValue>,
}

impl Fields {
    pub(crate) fn apply(self, headers: &mut HeaderMap) {
        if let Some(v) = self.retry_after {
            headers.append(RETRY_AFTER, v);
        }
        if let Some(v) = self.policy {
            headers.append(RATELIMIT_POLICY, v);
        }
        if let Some(v) = self.ratelimit {
            headers.append(RATELIMIT, v);
        }
    }
}

/// `ceil(d)` in whole seconds, for `t`.
fn t_secs(next: Option<std::time::Duration>) -> Option<u64> {
    next.map(fields::ceil_secs)
}

impl<B, X: KeyExtractor, D> LayerShared<B, X, D> {
    /// Whether the fields go on a response the limiter admitted (`refused` false) or refused.
    fn sends_fields(&self, refused: bool) -> bool {
        if self.dry_run && !self.dry_run_headers {
            return false;
        }
        match self.headers {
            Headers::Always => true,
            Headers::OnDenial => refused,
            Headers::Never => false,
        }
    }

    /// The `RateLimit` member of `policy` for `remaining` units left and `t` seconds to the
    /// next.
    fn ratelimit(
        policy: &NamedPolicy,
        remaining: u64,
        t: Option<u64>,
        pk: Option<&[u8]>,
    ) -> Option<HeaderValue> {
        let mut buf = FieldBuf::new();
        fields::write_ratelimit(&mut buf, &policy.name, remaining, t, pk);
        buf.header_value()
    }

    pub(crate) fn admitted_fields(
        &self,
        policy: &NamedPolicy,
        grant: &Grant,
        pk: Option<&[u8]>,
    ) -> Fields {
        if !self.sends_fields(false) {
            return Fields::default();
        }
        Fields {
            retry_after: None,
            policy: Some(policy.value.clone()),
            ratelimit: Self::ratelimit(policy, grant.remaining, t_secs(grant.next), pk),
        }
    }

    /// The fields of a refusal the layer enforces (with `Retry-After`), or a dry run lets through
    /// (without it).
    pub(crate) fn refusal_fields(
        &self,
        policy: &NamedPolicy,
        refusal: &Refusal,
        enforced: bool,
        pk: Option<&[u8]>,
    ) -> Fields {
        let mut out = Fields::default();
        if enforced {
            out.retry_after = self.retry_after(refusal).map(HeaderValue::from);
        }
        if self.sends_fields(true) {
            out.policy = Some(policy.value.clone());
            if let Refusal::Denied(d) = refusal {
                out.ratelimit = Self::ratelimit(policy, d.remaining(), t_secs(d.next_after()), pk);
            }
        }
        out
    }

    /// `Retry-After` in whole seconds: a denial's wait (at least 1, not before `t`), the
    /// configured one when the backend is unavailable, none otherwise.
    fn retry_after(&self, refusal: &Refusal) -> Option<u64> {
        match refusal {
            Refusal::Denied(d) => Some(fields::retry_after_secs(
                d.retry_after(),
                t_secs(d.next_after()),
            )),
            Refusal::Unavailable(_) => self
                .statuses
                .unavailable_retry
                .map(|r| fields::retry_after_secs(r, None)),
            _ => None,
        }
    }

    pub(crate) fn rejection(&self, policy: &NamedPolicy, refusal: Refusal) -> Rejection {
        let (kind, status) = match &refusal {
            Refusal::Denied(_) => (RejectionKind::Denied, self.statuses.denied),
            Refusal::InsufficientCapacity(_) => {
                (RejectionKind::InsufficientCapacity, self.statuses.too_large)
            }
            Refusal::TooManyKeys(_) => (RejectionKind::TooManyKeys, self.statuses.too_many_keys),
            Refusal::Unavailable(_) => (RejectionKind::Unavailable, self.statuses.unavailable),
        };
        Rejection {
            kind,
            status,
            retry_after_secs: self.retry_after(&refusal),
            refusal: Some(refusal),
            quota: policy.quota,
        }
    }

    /// The response to a refused request: gRPC's trailers-only answer for a gRPC one (as the
    /// layer's [`Protocol`](super::Protocol) says), else
    /// the configured responder's; the fields appended either way.
    pub(crate) fn refuse<ResBody: Default + 'static>(
        &self,
        rejection: &Rejection,
        fields: Fields,
        grpc: bool,
    ) -> Response<ResBody>
    where
        D: OnDenied<ResBody>,
    {
        let mut res = if grpc {
            grpc_refusal(rejection)
        } else if rejection.kind == RejectionKind::NoConnectInfo {
            let mut res = Response::new(setup_error_body::<ResBody>());
            *res.status_mut() = rejection.status;
            res
        } else {
            self.on_denied.respond(rejection)
        };
        fields.apply(res.headers_mut());
        res
    }
}

/// A gRPC request: its content type is `application/grpc` or one of its `+` forms.
pub(crate) fn is_grpc(head: &Parts) -> bool {
    head.headers
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"))
}

/// gRPC's answer to a refusal: a trailers-only response (HTTP 200, the status in the headers and
/// an empty body), `RESOURCE_EXHAUSTED` for a limit, with `grpc-retry-pushback-ms` (gRFC A6:
/// clients whose retry policy allows it wait that long; a negative value tells them not to
/// retry, sent when the request can never fit).
fn grpc_refusal<ResBody: Default>(rejection: &Rejection) -> Response<ResBody> {
    let (code, message): (u16, &'static str) = match rejection.kind {
        RejectionKind::Denied => (8, "rate limit exceeded"),
        RejectionKind::InsufficientCapacity => (8, "request exceeds the rate limit's capacity"),
        RejectionKind::TooManyKeys => (14, "rate limiter has no room for a new client"),
        RejectionKind::Unavailable => (14, "rate limiter unavailable"),
        RejectionKind::MissingKey => (3, "request carries no rate-limit key"),
        RejectionKind::NoConnectInfo => (13, "rate limiter misconfigured: no peer address"),
    };
    let mut res = Response::new(ResBody::default());
    let h = res.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert(GRPC_STATUS, HeaderValue::from(code));
    // The messages are plain ASCII without '%', so they need no percent-encoding.
    h.insert(GRPC_MESSAGE, HeaderValue::from_static(message));
    match (rejection.kind, rejection.retry_after_secs) {
        (RejectionKind::InsufficientCapacity, _) => {
            h.insert(GRPC_PUSHBACK, HeaderValue::from_static("-1"));
        }
        (_, Some(secs)) => {
            h.insert(GRPC_PUSHBACK, HeaderValue::from(secs.saturating_mul(1000)));
        }
        _ => {}
    }
    res
}

/// The 500's body for a missing peer address: the fix, in words, when the body type can carry
/// text (axum's `Body` with the `axum` feature, or `String`); empty otherwise (the message is
/// also logged once, on standard error).
fn setup_error_body<ResBody: Default + 'static>() -> ResBody {
    let text: Box<dyn std::any::Any> = Box::new(String::from(NO_CONNECT_INFO));
    if let Ok(body) = text.downcast::<ResBody>() {
        return *body;
    }
    #[cfg(feature = "axum")]
    {
        let body: Box<dyn std::any::Any> = Box::new(axum::body::Body::from(NO_CONNECT_INFO));
        if let Ok(body) = body.downcast::<ResBody>() {
            return *body;
        }
    }
    ResBody::default()
}

/// A refusal made before any decision (no key, no peer address): no fields.
pub(crate) fn early_refusal<B, X: KeyExtractor, D, ResBody>(
    shared: &LayerShared<B, X, D>,
    kind: RejectionKind,
    status: StatusCode,
    grpc: bool,
) -> Response<ResBody>
where
    D: OnDenied<ResBody>,
    ResBody: Default + 'static,
{
    let rejection = Rejection {
        kind,
        status,
        retry_after_secs: None,
        refusal: None,
        quota: shared.policies().get(0).quota,
    };
    shared.refuse(&rejection, Fields::default(), grpc)
}
