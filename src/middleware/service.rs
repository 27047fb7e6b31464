//! [`Limit`], the service a [`LimitLayer`](super::LimitLayer) wraps around another, and its
//! response future.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use http::request::Parts;
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::backend::{Answer, Backend, Decision, Refusal};
use super::key::{KeyError, KeyExtractor};
use super::response::{early_refusal, is_grpc, EmptyBody, Fields, Grant, OnDenied, RejectionKind};
use super::shared::{InfoDecision, LayerShared, OnMissing, Protocol};

/// A request admitted after a wait: the wait, then its grant.
type Waiting = Pin<Box<dyn Future<Output = Result<Grant, Refusal>> + Send>>;

/// The service made by a [`LimitLayer`](super::LimitLayer): decides each request in `call` and
/// passes the admitted ones to the inner service, whose errors pass through unchanged (the
/// layer adds none, so axum needs no `HandleErrorLayer`). `poll_ready` only forwards to the
/// inner service.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// use std::convert::Infallible;
/// use http::{Request, Response, StatusCode};
/// use tower::{service_fn, Layer, ServiceExt};
/// use tollgate::middleware::LimitLayer;
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// let layer = LimitLayer::global(TokenBucket::with_clock(Quota::per_minute(1)?, ManualClock::new())).build()?;
/// let svc = layer.layer(service_fn(|_req: Request<String>| async {
///     Ok::<_, Infallible>(Response::new(String::from("hello")))
/// }));
/// let first = svc.clone().oneshot(Request::new(String::new())).await?;
/// assert_eq!(first.status(), StatusCode::OK);
/// assert_eq!(first.headers()["ratelimit"], r#""default";r=0;t=60"#);
/// let second = svc.oneshot(Request::new(String::new())).await?;
/// assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
/// assert_eq!(second.headers()["retry-after"], "60");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
pub struct Limit<S, B, X: KeyExtractor, D = EmptyBody> {
    pub(crate) inner: S,
    pub(crate) shared: Arc<LayerShared<B, X, D>>,
}

impl<S: Clone, B, X: KeyExtractor, D> Clone for Limit<S, B, X, D> {
    fn clone(&self) -> Self {
        Limit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S: fmt::Debug, B, X: KeyExtractor, D> fmt::Debug for Limit<S, B, X, D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("inner", &self.inner)
            .field("policies", &self.shared.policies)
            .finish_non_exhaustive()
    }
}

/// What to do once a decision is in: call the inner service, or answer now.
enum Action<SF, ResBody> {
    Call(SF, Fields),
    Respond(Response<ResBody>),
}

/// The rest of a request whose decision is awaited: run once the backend answers, with the index
/// of the limit the answer is from when the answer names one (it then picks the policy).
type Resume<SF, ResBody> =
    Box<dyn FnOnce(Option<usize>, Result<Grant, Refusal>) -> Action<SF, ResBody> + Send>;

pin_project! {
    /// The future of a [`Limit`]'s response.
    pub struct ResponseFuture<SF, BF, ResBody> {
        #[pin]
        phase: Phase<SF, BF, ResBody>,
    }
}

pin_project! {
    #[project = PhaseProj]
    enum Phase<SF, BF, ResBody> {
        Call { #[pin] fut: SF, fields: Option<Fields> },
        Deciding { #[pin] fut: BF, resume: Option<Resume<SF, ResBody>> },
        Waiting { fut: Waiting, resume: Option<Resume<SF, ResBody>> },
        Done { response: Option<Response<ResBody>> },
    }
}

impl<SF, BF, ResBody> fmt::Debug for ResponseFuture<SF, BF, ResBody> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<SF, BF, ResBody> ResponseFuture<SF, BF, ResBody> {
    /// The phase after an awaited verdict: the rest of the request run on it.
    fn resume(
        resume: Option<Resume<SF, ResBody>>,
        index: Option<usize>,
        verdict: Result<Grant, Refusal>,
    ) -> Phase<SF, BF, ResBody> {
        match resume.map(|resume| resume(index, verdict)) {
            Some(Action::Call(fut, fields)) => Phase::Call {
                fut,
                fields: Some(fields),
            },
            Some(Action::Respond(res)) => Phase::Done {
                response: Some(res),
            },
            None => Phase::Done { response: None },
        }
    }

    fn step(step: Action<SF, ResBody>) -> Self {
        let phase = match step {
            Action::Call(fut, fields) => Phase::Call {
                fut,
                fields: Some(fields),
            },
            Action::Respond(res) => Phase::Done {
                response: Some(res),
            },
        };
        ResponseFuture { phase }
    }
}

impl<SF, BF, ResBody, E> Future for ResponseFuture<SF, BF, ResBody>
where
    SF: Future<Output = Result<Response<ResBody>, E>>,
    BF: Future<Output: Answer>,
    ResBody: Default,
{
    type Output = Result<Response<ResBody>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.phase.as_mut().project() {
                PhaseProj::Call { fut, fields } => {
                    let mut res = ready!(fut.poll(cx))?;
                    if let Some(fields) = fields.take() {
                        fields.apply(res.headers_mut());
                    }
                    return Poll::Ready(Ok(res));
                }
                PhaseProj::Deciding { fut, resume } => {
                    let (index, verdict) = ready!(fut.poll(cx)).into_indexed();
                    let resume = resume.take();
                    this.phase
                        .set(Self::resume(resume, index, verdict.map(Grant::from)));
                }
                PhaseProj::Waiting { fut, resume } => {
                    let verdict = ready!(fut.as_mut().poll(cx));
                    let resume = resume.take();
                    this.phase.set(Self::resume(resume, None, verdict));
                }
                PhaseProj::Done { response } => {
                    // Polled again after completing: a contract violation by the caller,
                    // answered with a 500 rather than a panic.
                    let res = response.take().unwrap_or_else(|| {
                        let mut res = Response::new(ResBody::default());
                        *res.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                        res
                    });
                    return Poll::Ready(Ok(res));
                }
            }
        }
    }
}

/// A request whose decision is being made, with what its response needs to know.
struct Decided<ReqBody> {
    head: Parts,
    body: ReqBody,
    /// The policy its response names: the tier that limits its key, or the limit the decision is
    /// from when the backend says (at once, or with its future's answer).
    tier: usize,
    /// Its key's `pk` bytes, when configured.
    pk: Option<Vec<u8>>,
    grpc: bool,
}

/// Decides a request whose verdict is in: the inner service's future with the fields to add,
/// or the refusal's response.
fn conclude<S, B, X, D, ReqBody, ResBody>(
    shared: &LayerShared<B, X, D>,
    inner: &mut S,
    req: Decided<ReqBody>,
    verdict: Result<Grant, Refusal>,
) -> Action<S::Future, ResBody>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    X: KeyExtractor,
    D: OnDenied<ResBody>,
    ResBody: Default + 'static,
{
    let Decided {
        mut head,
        body,
        tier,
        pk,
        grpc,
    } = req;
    // One read of the policies describes the whole response (the old or the new set, when a
    // `QuotaHandle` changes them meanwhile). It pins the crate's epoch, so it is dropped before
    // the inner service or the refusal's responder runs: user code that changes the quota (or
    // takes long) must not find a change waiting on its own request.
    let policies = shared.policies();
    let policy = policies.get(tier);
    match verdict {
        Ok(grant) => {
            #[cfg(feature = "metrics")]
            policy.meters.admitted();
            let fields = shared.admitted_fields(policy, &grant, pk.as_deref());
            let remaining = grant.remaining;
            shared.info(&mut head, policy, InfoDecision::Admitted, remaining);
            drop(policies);
            Action::Call(inner.call(Request::from_parts(head, body)), fields)
        }
        Err(refusal) if shared.dry_run => {
            shared.count_would_deny();
            #[cfg(feature = "metrics")]
            policy.meters.would_deny();
            let fields = shared.refusal_fields(policy, &refusal, false, pk.as_deref());
            let remaining = match &refusal {
                Refusal::Denied(d) => d.remaining(),
                _ => 0,
            };
            shared.info(&mut head, policy, InfoDecision::WouldDeny, remaining);
            drop(policies);
            Action::Call(inner.call(Request::from_parts(head, body)), fields)
        }
        Err(refusal) => {
            #[cfg(feature = "metrics")]
            policy.meters.refused(&refusal);
            let fields = shared.refusal_fields(policy, &refusal, true, pk.as_deref());
            let rejection = shared.rejection(policy, refusal);
            drop(policies);
            Action::Respond(shared.refuse(&rejection, fields, grpc))
        }
    }
}

impl<S, B, X, D> Limit<S, B, X, D>
where
    X: KeyExtractor,
{
    /// The rest of `req`, to run once its verdict is in: the readied service goes with it, and
    /// this one keeps a fresh clone (tower's rule for services called from a later future). An
    /// index that comes with the verdict replaces the policy chosen when `req` arrived.
    fn resume_later<ReqBody, ResBody>(
        &mut self,
        req: Decided<ReqBody>,
    ) -> Resume<S::Future, ResBody>
    where
        S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        B: Send + Sync + 'static,
        D: OnDenied<ResBody>,
        ReqBody: Send + 'static,
        ResBody: Default + 'static,
    {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        Box::new(move |index, verdict| {
            let mut req = req;
            if let Some(index) = index {
                req.tier = index;
            }
            conclude(&shared, &mut inner, req, verdict)
        })
    }
}

impl<S, B, X, D, ReqBody, ResBody> Service<Request<ReqBody>> for Limit<S, B, X, D>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: Backend<X::Key>,
    X: KeyExtractor,
    D: OnDenied<ResBody>,
    ReqBody: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, B::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let (mut head, body) = req.into_parts();
        let shared = &*self.shared;
        let grpc = match shared.protocol {
            Protocol::Auto => is_grpc(&head),
            Protocol::Http => false,
            Protocol::Grpc => true,
        };
        if shared.exempt.as_ref().is_some_and(|exempt| exempt(&head)) {
            shared.info_exempt(&mut head);
            let fut = self.inner.call(Request::from_parts(head, body));
            return ResponseFuture::step(Action::Call(fut, Fields::default()));
        }
        let owned;
        let key = match shared.extractor.extract(&head) {
            Ok(key) => {
                owned = key;
                &owned
            }
            Err(KeyError::Missing) => match &shared.on_missing {
                OnMissing::Key(key) => key,
                OnMissing::Allow => {
                    shared.info_exempt(&mut head);
                    let fut = self.inner.call(Request::from_parts(head, body));
                    return ResponseFuture::step(Action::Call(fut, Fields::default()));
                }
                OnMissing::Reject(status) => {
                    let res = early_refusal(shared, RejectionKind::MissingKey, *status, grpc);
                    return ResponseFuture::step(Action::Respond(res));
                }
            },
            Err(_) => {
                #[cfg(feature = "tracing")]
                shared.log_setup_error_once();
                let status = StatusCode::INTERNAL_SERVER_ERROR;
                let res = early_refusal(shared, RejectionKind::NoConnectInfo, status, grpc);
                return ResponseFuture::step(Action::Respond(res));
            }
        };
        let cost = shared.cost.of(&head);
        let (indexed, verdict) = shared.decide(key, cost);
        let req = Decided {
            tier: indexed.unwrap_or_else(|| shared.tier_of(key)),
            pk: shared.partition_key(key),
            head,
            body,
            grpc,
        };
        match verdict {
            Decision::Ready(verdict) => {
                let verdict = verdict.map(Grant::from);
                ResponseFuture::step(conclude(shared, &mut self.inner, req, verdict))
            }
            #[cfg(feature = "tokio")]
            Decision::Delayed(scheduled) => {
                let grant = Grant::from(&scheduled);
                let delay = scheduled.delay();
                let resume = self.resume_later(req);
                let fut: Waiting = Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    Ok(grant)
                });
                ResponseFuture {
                    phase: Phase::Waiting {
                        fut,
                        resume: Some(resume),
                    },
                }
            }
            Decision::Pending(fut) => {
                let resume = self.resume_later(req);
                ResponseFuture {
                    phase: Phase::Deciding {
                        fut,
                        resume: Some(resume),
                    },
                }
            }
        }
    }
}
