//! The HTTP middleware's cost, beside no layer and tower-governor 0.8.0, in one run:
//!
//! 1. **criterion groups `http_allow` and `http_deny`**: one request at a time sent through an axum
//!    `Router` with a trivial handler (`ready().call()` on one router, on a current-thread tokio
//!    runtime), each request carrying axum's `ConnectInfo<SocketAddr>` for one of 1 000 client
//!    addresses, cycled. Rows: `no_layer`, `identity_layer` (tower's `Identity` layer: what axum
//!    charges for any layer, the floor under every layer's cost), `tollgate_fields` (the
//!    `RateLimit-Policy` and `RateLimit` fields and the `RateLimitInfo` extension, the defaults),
//!    `tollgate_no_fields` (`Headers::Never`, `.request_info(false)`), `tower_governor`
//!    (`use_headers()`, its `PeerIpKeyExtractor`), and `outer_fields` and `outer_no_fields`:
//!    tollgate's two layers wrapped once around the whole router (`layer.layer(router)`) instead of
//!    through `Router::layer`, which boxes every route again (the identity layer's cost); and
//!    `outer_floor`, a hand-written layer around the router that only reads the peer address and
//!    makes one keyed check (`Floor`): the least any limiting layer does. Every
//!    row's service is boxed once (`BoxCloneService`), so that the routers and the layer around a
//!    router pay the same indirection. Every limiter is keyed by the peer's IP address with the same
//!    token-bucket quota, on its default clock (tollgate's `MonotonicClock` and governor's
//!    `DefaultClock` both read the TSC through quanta, so each decision pays one real clock read,
//!    as in production). `http_allow`: one token a second with a capacity of 10^9, so nothing is
//!    refused (a key would take 10^9 requests to empty); every client is seen once before timing,
//!    so no new key (and no automatic sweep of tollgate's, which follows new keys) happens while
//!    timing: every timed request takes the known-key path in both limiters. `http_deny`: one
//!    token an hour, capacity 1, used up by one request per client before timing, so every timed
//!    request is refused (429). `no_layer` and `identity_layer` answer 200 in both groups: the
//!    router's own cost, for reference.
//! 2. **loopback**: an axum server on 127.0.0.1 (its own 2-worker runtime, served with connect
//!    info) and 64 keep-alive HTTP/1.1 connections (raw hyper client connections, a second 2-worker
//!    runtime), each from its own address (127.0.0.2 to 127.0.0.65) sending one request after
//!    another: requests per second and each request's latency at the client (p50, p99), admitting
//!    load (the `http_allow` quota). Each configuration runs `TOLLGATE_HTTP_SECS` seconds in all
//!    (10 unless set), split into `TOLLGATE_HTTP_ROUNDS` rounds (5 unless set) that take turns
//!    with the other configurations' (each round starting one configuration further along), so
//!    that a change in the shared machine's load falls on every configuration alike; each round
//!    starts with an untimed warm-up of a fifth of its length (at most 1 s). The four servers and
//!    their connections are set up (and checked) once, before the first round.
//!
//! ```sh
//! cargo bench --features tower,axum --bench http                 # both parts, about 90 s
//! cargo bench --features tower,axum --bench http -- http_allow   # a criterion filter (the loopback part still runs)
//! TOLLGATE_HTTP_PART=criterion cargo bench --features tower,axum --bench http   # criterion only
//! TOLLGATE_HTTP_PART=loopback TOLLGATE_HTTP_SECS=5 cargo bench --features tower,axum --bench http
//! TOLLGATE_HTTP_PART=serve cargo bench --features tower,axum --bench http   # the servers alone, for wrk
//! cargo bench --features tower,axum --bench http -- --test       # smoke test: each row once, 0.3 s of loopback
//! ```
//!
//! Every row is checked before it is timed: a pass over the 1 000 clients must get the load's
//! status for every request, and the fields the row claims (tollgate's two fields or none,
//! governor's `x-ratelimit-remaining` when admitting, `retry-after` when refusing); every timed
//! request's status is counted too, and a wrong one panics. In the criterion part the requests are
//! built before each timed batch of 1 000 (building one costs the same for every row and is not the
//! layer's); the response is dropped inside the timed span.
//!
//! After criterion, the bench prints a markdown table of criterion's median time per request with
//! ratios against `no_layer` and `tower_governor` and the issue's targets (from this run's
//! `estimates.json` files; rows that did not run are left blank). Criterion runs one row after
//! another, so on a shared machine a change in load between rows moves their ratios; the bench
//! therefore also times the same requests in **interleaved rounds** (`TOLLGATE_HTTP_PAIRED_ROUNDS`,
//! 200 unless set, about 10 s): each round sends one batch of 1 000 requests through every row's
//! router in turn, and the table gives each row's median time and the medians of its ratios taken
//! within a round, which hold still when the machine's speed drifts. Then the loopback table.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use criterion::{Criterion, Throughput};
use hdrhistogram::Histogram;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use tollgate::keyed::KeyedLimiter;
use tollgate::middleware::{peer_ip, Headers, Keyed, LimitLayer, PeerIp};
use tollgate::Quota;
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

/// Client addresses the criterion part cycles over.
const CLIENTS: usize = 1_000;
/// Client connections in the loopback part.
const CONNECTIONS: usize = 64;

/// Admitting or refusing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Allow,
    Deny,
}

impl Load {
    fn group(self) -> &'static str {
        match self {
            Load::Allow => "http_allow",
            Load::Deny => "http_deny",
        }
    }

    /// The capacity of both limiters' quota: room for every request of the run (a key would take
    /// 10^9 requests to empty), or one.
    fn capacity(self) -> u32 {
        match self {
            Load::Allow => 1_000_000_000,
            Load::Deny => 1,
        }
    }

    /// Both limiters' quota: one token per [`Load::period`], [`Load::capacity`] of them.
    fn quota(self) -> Quota {
        Quota::per_period(1, self.period())
            .and_then(|q| q.with_capacity(u64::from(self.capacity())))
            .expect("a quota")
    }

    /// The time one token takes to come back: a second admitting (governor cannot hold a burst of
    /// 10^9 refilled more slowly: its burst times its period must fit in 2^64 ns), an hour refusing.
    fn period(self) -> Duration {
        match self {
            Load::Allow => Duration::from_secs(1),
            Load::Deny => Duration::from_secs(3600),
        }
    }
}

/// What wraps the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    NoLayer,
    /// tower's `Identity` layer: what axum charges for any layer at all (`Router::layer` boxes
    /// the layered route again, so each request clones one more boxed service and polls one more
    /// boxed future), the floor under every layer's cost.
    IdentityLayer,
    TollgateFields,
    TollgateNoFields,
    TowerGovernor,
    /// tollgate's layer (fields on) wrapped once around the whole router, `layer.layer(router)`,
    /// rather than through `Router::layer`: what the layer itself costs, without axum's reboxing.
    OuterFields,
    /// The same with the fields and the `RateLimitInfo` extension off.
    OuterNoFields,
    /// The floor under any limiting layer around the router: a hand-written one that reads the
    /// peer's address, makes one `KeyedLimiter::check_key` on it and passes the request on, or
    /// answers a bare 429 with `Retry-After`; no fields, no extension, no options ([`Floor`]).
    OuterFloor,
}

/// What a request is sent through: every row's service boxed once, so that the rows whose layer
/// wraps the router (`Limit<Router>`) and the plain routers pay the same one indirection.
type App = BoxCloneService<Request<Body>, Response<Body>, Infallible>;

impl Subject {
    /// The criterion groups' rows.
    const ALL: [Subject; 8] = [
        Subject::NoLayer,
        Subject::IdentityLayer,
        Subject::TollgateFields,
        Subject::TollgateNoFields,
        Subject::TowerGovernor,
        Subject::OuterFields,
        Subject::OuterNoFields,
        Subject::OuterFloor,
    ];

    /// The loopback rows (the issue's four).
    const LOOPBACK: [Subject; 4] = [
        Subject::NoLayer,
        Subject::TollgateFields,
        Subject::TollgateNoFields,
        Subject::TowerGovernor,
    ];

    fn limits(self) -> bool {
        !matches!(self, Subject::NoLayer | Subject::IdentityLayer)
    }

    fn name(self) -> &'static str {
        match self {
            Subject::NoLayer => "no_layer",
            Subject::IdentityLayer => "identity_layer",
            Subject::TollgateFields => "tollgate_fields",
            Subject::TollgateNoFields => "tollgate_no_fields",
            Subject::TowerGovernor => "tower_governor",
            Subject::OuterFields => "outer_fields",
            Subject::OuterNoFields => "outer_no_fields",
            Subject::OuterFloor => "outer_floor",
        }
    }

    /// The status every request gets under `load` once the limiter is set up.
    fn expected(self, load: Load) -> StatusCode {
        match (self, load) {
            (s, Load::Deny) if s.limits() => StatusCode::TOO_MANY_REQUESTS,
            _ => StatusCode::OK,
        }
    }

    /// Panics unless `headers` carry the fields this subject sends under `load`, and no others.
    fn check_fields(self, load: Load, headers: &HeaderMap) {
        let has = |name: &str| headers.contains_key(name);
        let ok = match self {
            Subject::NoLayer | Subject::IdentityLayer => {
                !has("ratelimit") && !has("x-ratelimit-remaining")
            }
            Subject::TollgateFields | Subject::OuterFields => {
                has("ratelimit") && has("ratelimit-policy")
            }
            Subject::TollgateNoFields | Subject::OuterNoFields | Subject::OuterFloor => {
                !has("ratelimit") && !has("ratelimit-policy")
            }
            Subject::TowerGovernor => has("x-ratelimit-remaining"),
        };
        let retry = has("retry-after") == (load == Load::Deny && self.limits());
        assert!(
            ok && retry,
            "{} under {:?}: unexpected fields {headers:?}",
            self.name(),
            load
        );
    }

    /// The router with this subject's layer, its limiter's quota set for `load`, finalized with
    /// `with_state(())` as `axum::serve` finalizes it: until then axum keeps each handler boxed and
    /// applies the route's layers to it anew on every request (a clone of each layer and a boxed
    /// service per request), which a served router never does.
    fn router(self, load: Load) -> Router {
        let app = Router::new().route("/", get(|| async { "hello" }));
        let app = match self {
            Subject::NoLayer
            | Subject::OuterFields
            | Subject::OuterNoFields
            | Subject::OuterFloor => app,
            Subject::IdentityLayer => app.layer(tower::layer::util::Identity::new()),
            Subject::TollgateFields => app.layer(tollgate_layer(load, true)),
            Subject::TollgateNoFields => app.layer(tollgate_layer(load, false)),
            Subject::TowerGovernor => {
                let config = GovernorConfigBuilder::default()
                    .period(load.period())
                    .burst_size(load.capacity())
                    .use_headers()
                    .finish()
                    .expect("a governor configuration");
                app.layer(GovernorLayer::<_, _, Body>::new(config))
            }
        };
        app.with_state(())
    }

    /// The service a request goes through: the router, or for the outer rows tollgate's layer
    /// around it; boxed (see [`App`]).
    fn service(self, load: Load) -> App {
        let router = self.router(load);
        match self {
            Subject::OuterFields => BoxCloneService::new(tollgate_layer(load, true).layer(router)),
            Subject::OuterNoFields => {
                BoxCloneService::new(tollgate_layer(load, false).layer(router))
            }
            Subject::OuterFloor => BoxCloneService::new(Floor {
                inner: router,
                limiter: std::sync::Arc::new(KeyedLimiter::new(load.quota())),
            }),
            _ => BoxCloneService::new(router),
        }
    }
}

/// tollgate's layer for `load`, keyed by the peer's IP address, with the fields and the
/// `RateLimitInfo` extension on (the defaults) or both off.
fn tollgate_layer(load: Load, fields: bool) -> LimitLayer<Keyed<KeyedLimiter<IpAddr>>, PeerIp> {
    let builder = LimitLayer::keyed(KeyedLimiter::new(load.quota()), peer_ip());
    let builder = if fields {
        builder
    } else {
        builder.headers(Headers::Never).request_info(false)
    };
    builder.build().expect("a layer")
}

/// The least a limiting layer around the router does ([`Subject::OuterFloor`]): the peer's
/// address from `ConnectInfo`, one keyed check, the request passed on or a bare refusal.
#[derive(Clone)]
struct Floor<S> {
    inner: S,
    limiter: std::sync::Arc<KeyedLimiter<IpAddr>>,
}

impl<S> Service<Request<Body>> for Floor<S>
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = FloorFuture<S::Future, S::Error>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        let verdict = peer.map(|ip| self.limiter.check_key(&ip));
        match verdict {
            Some(Ok(_)) => FloorFuture::Pass {
                fut: self.inner.call(req),
            },
            refused => {
                let wait = match refused {
                    Some(Err(tollgate::keyed::KeyedError::Denied(d))) => d.retry_after(),
                    _ => Duration::ZERO,
                };
                let res = Response::builder()
                    .status(StatusCode::TOO_MANY_REQUESTS)
                    .header("retry-after", wait.as_secs().max(1))
                    .body(Body::empty())
                    .expect("a response");
                FloorFuture::Refused { res: Some(Ok(res)) }
            }
        }
    }
}

pin_project_lite::pin_project! {
    /// [`Floor`]'s future: the router's, or the refusal.
    #[project = FloorProj]
    enum FloorFuture<F, E> {
        Pass { #[pin] fut: F },
        Refused { res: Option<Result<Response<Body>, E>> },
    }
}

impl<F, E> std::future::Future for FloorFuture<F, E>
where
    F: std::future::Future<Output = Result<Response<Body>, E>>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        match self.project() {
            FloorProj::Pass { fut } => fut.poll(cx),
            FloorProj::Refused { res } => {
                std::task::Poll::Ready(res.take().expect("polled after completion"))
            }
        }
    }
}

/// The address of client `i`: 10.0.x.y, a port of its own.
fn client(i: usize) -> SocketAddr {
    let [_, _, hi, lo] = (i as u32).to_be_bytes();
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, hi, lo)), 40_000)
}

fn request(from: SocketAddr) -> Request<Body> {
    Request::get("/")
        .extension(ConnectInfo(from))
        .body(Body::empty())
        .expect("a request")
}

async fn send(app: &mut App, req: Request<Body>) -> Response<Body> {
    let res: Result<Response<Body>, Infallible> = ServiceExt::<Request<Body>>::ready(app)
        .await
        .expect("the router is always ready")
        .call(req)
        .await;
    match res {
        Ok(res) => res,
        Err(never) => match never {},
    }
}

/// A router set up for `load` and checked: for `Load::Deny`, every client's one token taken; then a
/// pass over every client must get the expected status and fields.
fn prepared(rt: &tokio::runtime::Runtime, subject: Subject, load: Load) -> App {
    let mut app = subject.service(load);
    rt.block_on(async {
        if load == Load::Deny {
            for i in 0..CLIENTS {
                let res = send(&mut app, request(client(i))).await;
                assert_eq!(
                    res.status(),
                    StatusCode::OK,
                    "{}: first request",
                    subject.name()
                );
            }
        }
        let expected = subject.expected(load);
        let mut right = 0;
        for i in 0..CLIENTS {
            let res = send(&mut app, request(client(i))).await;
            subject.check_fields(load, res.headers());
            right += usize::from(res.status() == expected);
        }
        assert_eq!(
            right,
            CLIENTS,
            "{} under {load:?}: {} of {CLIENTS} requests got {expected}",
            subject.name(),
            right
        );
    });
    app
}

fn bench_group(c: &mut Criterion, load: Load) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let mut group = c.benchmark_group(load.group());
    group.throughput(Throughput::Elements(1));
    for subject in Subject::ALL {
        let mut app = prepared(&rt, subject, load);
        let expected = subject.expected(load);
        let mut next = 0usize;
        group.bench_function(subject.name(), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut timed = Duration::ZERO;
                    let mut left = iters;
                    let mut wrong = 0u64;
                    while left > 0 {
                        let batch = left.min(CLIENTS as u64) as usize;
                        let reqs: Vec<_> = (0..batch)
                            .map(|k| request(client((next + k) % CLIENTS)))
                            .collect();
                        next = (next + batch) % CLIENTS;
                        let start = Instant::now();
                        for req in reqs {
                            let res = send(&mut app, req).await;
                            wrong += u64::from(res.status() != expected);
                        }
                        timed += start.elapsed();
                        left -= batch as u64;
                    }
                    assert_eq!(
                        wrong,
                        0,
                        "{}: {wrong} timed requests did not get {expected}",
                        subject.name()
                    );
                    timed
                })
            })
        });
    }
    group.finish();
}

/// As `benches/tollgate.rs`: short runs, overridable from the command line.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_millis(2500))
        .sample_size(20)
        .configure_from_args()
}

/// criterion's median time per iteration (one request) in ns for `group/bench`, if it was written
/// by this run (at or after `since`).
fn median_ns(dir: &std::path::Path, group: &str, bench: &str, since: SystemTime) -> Option<f64> {
    let path = dir
        .join(group)
        .join(bench)
        .join("new")
        .join("estimates.json");
    let written = std::fs::metadata(&path).ok()?.modified().ok()?;
    if written < since {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let median = &text[text.find("\"median\"")?..];
    let rest = &median[median.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = rest.find([',', '}'])?;
    rest[..end].trim().parse().ok()
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => String::new(),
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**missed**"
    }
}

fn print_criterion_table(since: SystemTime) {
    let Some(dir) = testkit::bench::criterion_home() else {
        return;
    };
    let ran = [Load::Allow, Load::Deny].iter().any(|load| {
        Subject::ALL
            .iter()
            .any(|s| median_ns(&dir, load.group(), s.name(), since).is_some())
    });
    if !ran {
        // A filter matched no row (or criterion wrote nothing): no table.
        return;
    }
    let mut found = Vec::new();
    println!();
    println!(
        "Criterion's median time per request, from `{}`.",
        dir.display()
    );
    println!(
        "÷ columns divide the row's time by `no_layer`'s or `tower_governor`'s in the same group: \
         below 1 is faster. `ns over identity_layer` is the row's time less `identity_layer`'s: the \
         layer's own cost, above what axum charges for any layer."
    );
    println!();
    println!(
        "| group | bench | ns per request | thousand requests/s | ÷ no_layer | ÷ tower_governor | ns over identity_layer |"
    );
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for load in [Load::Allow, Load::Deny] {
        let group = load.group();
        let get = |s: Subject| median_ns(&dir, group, s.name(), since);
        let base = get(Subject::NoLayer);
        let gov = get(Subject::TowerGovernor);
        let identity = get(Subject::IdentityLayer);
        for subject in Subject::ALL {
            let ns = get(subject);
            found.push((load, subject, ns));
            let (time, rate) = match ns {
                Some(ns) => (format!("{ns:.0}"), format!("{:.0}", 1e6 / ns)),
                None => (String::new(), String::new()),
            };
            let over = match (ns, identity) {
                (Some(ns), Some(id)) if subject.limits() => format!("{:.0}", ns - id),
                _ => String::new(),
            };
            println!(
                "| `{group}` | {} | {time} | {rate} | {} | {} | {over} |",
                subject.name(),
                ratio(ns, base),
                ratio(ns, gov)
            );
        }
    }
    let get = |load: Load, subject: Subject| {
        found
            .iter()
            .find(|(l, s, _)| *l == load && *s == subject)
            .and_then(|(_, _, ns)| *ns)
    };
    let base = get(Load::Allow, Subject::NoLayer);
    let gov_allow = get(Load::Allow, Subject::TowerGovernor);
    let gov_deny = get(Load::Deny, Subject::TowerGovernor);
    println!();
    println!("| target | row | value | verdict |");
    println!("| --- | --- | ---: | --- |");
    for subject in [Subject::TollgateFields, Subject::TollgateNoFields] {
        let name = subject.name();
        if let (Some(t), Some(b)) = (get(Load::Allow, subject), base) {
            println!(
                "| admitting: time ≤ 1.15 × no_layer | {name} | {:.2} × | {} |",
                t / b,
                verdict(t / b <= 1.15)
            );
        }
        if let (Some(t), Some(g)) = (get(Load::Allow, subject), gov_allow) {
            println!(
                "| admitting: throughput ≥ 1.2 × tower_governor | {name} | {:.2} × | {} |",
                g / t,
                verdict(g / t >= 1.2)
            );
        }
        if let (Some(t), Some(g)) = (get(Load::Deny, subject), gov_deny) {
            println!(
                "| denying: throughput ≥ 2 × tower_governor | {name} | {:.2} × | {} |",
                g / t,
                verdict(g / t >= 2.0)
            );
        }
    }
}

// --- interleaved rounds ----------------------------------------------------------------------

/// The median of `v` (sorted in place); NaN when empty.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The same requests as the criterion groups, timed in interleaved rounds: each round sends one
/// batch of 1 000 requests (one per client) through every row's router in turn, starting one row
/// further along each round, so that a change in the shared machine's speed falls on every row
/// alike. Prints each row's median time per request and the medians of its per-round ratios.
fn interleaved(rounds: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    println!();
    println!(
        "Interleaved rounds: {rounds} rounds of one batch of {CLIENTS} requests per row; median ns \
         per request, and the median of the per-round ratios (each taken within one round)."
    );
    println!();
    println!("| group | bench | median ns per request | ÷ no_layer | ÷ identity_layer | tower_governor ÷ this (throughput ×) |");
    println!("| --- | --- | ---: | ---: | ---: | ---: |");
    let mut targets = Vec::new();
    for load in [Load::Allow, Load::Deny] {
        let mut apps: Vec<App> = Subject::ALL
            .iter()
            .map(|&s| prepared(&rt, s, load))
            .collect();
        let n = apps.len();
        let mut per_round = vec![vec![0.0f64; n]; rounds];
        for (r, times) in per_round.iter_mut().enumerate() {
            for k in 0..n {
                let i = (r + k) % n;
                let subject = Subject::ALL[i];
                let expected = subject.expected(load);
                let app = &mut apps[i];
                let reqs: Vec<_> = (0..CLIENTS).map(|c| request(client(c))).collect();
                let ns = rt.block_on(async {
                    let start = Instant::now();
                    let mut wrong = 0u64;
                    for req in reqs {
                        let res = send(app, req).await;
                        wrong += u64::from(res.status() != expected);
                    }
                    let elapsed = start.elapsed();
                    assert_eq!(
                        wrong,
                        0,
                        "{}: {wrong} requests did not get {expected}",
                        subject.name()
                    );
                    elapsed.as_nanos() as f64 / CLIENTS as f64
                });
                times[i] = ns;
            }
        }
        let idx = |s: Subject| Subject::ALL.iter().position(|&x| x == s).expect("a row");
        let ratio_median = |a: usize, b: usize| {
            let mut v: Vec<f64> = per_round.iter().map(|t| t[a] / t[b]).collect();
            median(&mut v)
        };
        let (base, identity, gov, floor) = (
            idx(Subject::NoLayer),
            idx(Subject::IdentityLayer),
            idx(Subject::TowerGovernor),
            idx(Subject::OuterFloor),
        );
        if load == Load::Allow {
            targets.push(format!(
                "- the floor under any limiting layer around the router (outer_floor: the peer's \
                 address, one keyed check, nothing else): {:.2} × no_layer",
                ratio_median(floor, base)
            ));
        }
        for (i, subject) in Subject::ALL.iter().enumerate() {
            let mut own: Vec<f64> = per_round.iter().map(|t| t[i]).collect();
            let over_id = if subject.limits() {
                format!("{:.2}", ratio_median(i, identity))
            } else {
                String::new()
            };
            println!(
                "| `{}` | {} | {:.0} | {:.2} | {over_id} | {:.2} |",
                load.group(),
                subject.name(),
                median(&mut own),
                ratio_median(i, base),
                ratio_median(gov, i),
            );
            if matches!(
                subject,
                Subject::TollgateFields
                    | Subject::TollgateNoFields
                    | Subject::OuterFields
                    | Subject::OuterNoFields
            ) {
                let name = subject.name();
                match load {
                    Load::Allow => {
                        let t = ratio_median(i, base);
                        targets.push(format!(
                            "- admitting, time ≤ 1.15 × no_layer, {name}: {t:.2} × ({}; {:.2} × identity_layer, {:.2} × outer_floor)",
                            verdict(t <= 1.15),
                            ratio_median(i, identity),
                            ratio_median(i, floor)
                        ));
                        let g = ratio_median(gov, i);
                        targets.push(format!(
                            "- admitting, throughput ≥ 1.2 × tower_governor, {name}: {g:.2} × ({})",
                            verdict(g >= 1.2)
                        ));
                    }
                    Load::Deny => {
                        let g = ratio_median(gov, i);
                        targets.push(format!(
                            "- denying, throughput ≥ 2 × tower_governor, {name}: {g:.2} × ({})",
                            verdict(g >= 2.0)
                        ));
                    }
                }
            }
        }
    }
    println!();
    for t in targets {
        println!("{t}");
    }
}

// --- loopback ----------------------------------------------------------------------------------

/// One loopback configuration: its server, its connections and its figures so far.
struct Loopback {
    subject: Subject,
    server: tokio::task::JoinHandle<()>,
    senders: Vec<Sender>,
    requests: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
    round_p99: Vec<f64>,
}

impl Loopback {
    fn per_sec(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }

    fn micros(&self, q: f64) -> f64 {
        self.latency.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Serves `app` with connect info on 127.0.0.1 (a port the OS picks), on `rt`.
fn serve(rt: &tokio::runtime::Runtime, app: Router) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("an address");
        let task = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .expect("serve");
        });
        (addr, task)
    })
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// A keep-alive HTTP/1.1 connection to `server` from `127.0.0.<2 + i>`.
async fn connect(server: SocketAddr, i: usize) -> Sender {
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    let from = Ipv4Addr::new(127, 0, 0, 2 + i as u8);
    socket
        .bind(SocketAddr::new(IpAddr::V4(from), 0))
        .expect("bind a client address");
    let stream = socket.connect(server).await.expect("connect");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("a handshake");
    tokio::spawn(async move {
        // The connection ends when the sender is dropped; an error then is not the bench's.
        let _ = conn.await;
    });
    sender
}

/// One request and its whole response: the status and headers.
async fn get_one(sender: &mut Sender) -> (StatusCode, HeaderMap) {
    sender.ready().await.expect("the connection is open");
    let req = Request::get("/")
        .header(http::header::HOST, "127.0.0.1")
        .body(Empty::new())
        .expect("a request");
    let res = sender.send_request(req).await.expect("a response");
    let (head, body) = res.into_parts();
    body.collect().await.expect("the body");
    (head.status, head.headers)
}

/// A server for `subject` (admitting quota) and its connections, checked: one request on each
/// connection gets 200 and the subject's fields.
fn set_up(
    server_rt: &tokio::runtime::Runtime,
    client_rt: &tokio::runtime::Runtime,
    subject: Subject,
) -> Loopback {
    let (addr, server) = serve(server_rt, subject.router(Load::Allow));
    let senders = client_rt.block_on(async move {
        let mut senders = Vec::new();
        for i in 0..CONNECTIONS {
            let mut sender = connect(addr, i).await;
            let (status, headers) = get_one(&mut sender).await;
            assert_eq!(status, StatusCode::OK, "{}: loopback check", subject.name());
            subject.check_fields(Load::Allow, &headers);
            senders.push(sender);
        }
        senders
    });
    Loopback {
        subject,
        server,
        senders,
        requests: 0,
        elapsed: Duration::ZERO,
        latency: Histogram::<u64>::new(3).expect("a histogram"),
        round_p99: Vec::new(),
    }
}

/// One round of `row`: every connection sends requests back to back for `warm_up`, then for `run`
/// timing each one; every status must be 200.
fn round(
    client_rt: &tokio::runtime::Runtime,
    row: &mut Loopback,
    warm_up: Duration,
    run: Duration,
) {
    let senders = std::mem::take(&mut row.senders);
    let (senders, requests, elapsed, latency) = client_rt.block_on(async move {
        let start = Instant::now();
        let (measure_from, end) = (start + warm_up, start + warm_up + run);
        let tasks: Vec<_> = senders
            .into_iter()
            .map(|mut sender| {
                tokio::spawn(async move {
                    let mut h = Histogram::<u64>::new(3).expect("a histogram");
                    let (mut requests, mut wrong) = (0u64, 0u64);
                    loop {
                        let at = Instant::now();
                        if at >= end {
                            break;
                        }
                        let (status, _) = get_one(&mut sender).await;
                        wrong += u64::from(status != StatusCode::OK);
                        if at >= measure_from {
                            let _ = h.record(at.elapsed().as_nanos() as u64);
                            requests += 1;
                        }
                    }
                    (sender, requests, wrong, h)
                })
            })
            .collect();
        let mut latency = Histogram::<u64>::new(3).expect("a histogram");
        let (mut senders, mut requests, mut wrong) = (Vec::new(), 0, 0);
        for task in tasks {
            let (sender, r, w, h) = task.await.expect("a client task");
            senders.push(sender);
            requests += r;
            wrong += w;
            latency.add(h).expect("histograms of one shape");
        }
        assert_eq!(wrong, 0, "{wrong} loopback requests were not admitted");
        let elapsed = Instant::now().saturating_duration_since(measure_from);
        (senders, requests, elapsed, latency)
    });
    row.senders = senders;
    row.requests += requests;
    row.elapsed += elapsed;
    row.round_p99
        .push(latency.value_at_quantile(0.99) as f64 / 1000.0);
    row.latency.add(latency).expect("histograms of one shape");
}

fn loopback(smoke: bool) {
    let env_f64 = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
    };
    let (total, rounds) = if smoke {
        (Duration::from_millis(300), 1)
    } else {
        let secs = env_f64("TOLLGATE_HTTP_SECS").unwrap_or(10.0);
        let rounds = env_f64("TOLLGATE_HTTP_ROUNDS")
            .map_or(5, |r| r as u32)
            .max(1);
        (Duration::from_secs_f64(secs), rounds)
    };
    let run = total / rounds;
    let warm_up = (run / 5).min(Duration::from_secs(1));
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let (server_rt, client_rt) = (runtime(), runtime());
    let mut rows: Vec<Loopback> = Subject::LOOPBACK
        .iter()
        .map(|&s| set_up(&server_rt, &client_rt, s))
        .collect();
    // Interleaved: each round runs every configuration, starting one further along each time, so
    // that a change in the machine's load falls on all of them alike.
    for r in 0..rounds as usize {
        for k in 0..rows.len() {
            let i = (r + k) % rows.len();
            round(&client_rt, &mut rows[i], warm_up, run);
        }
    }
    let get = |s: Subject| rows.iter().find(|r| r.subject == s);
    let (base, gov) = (get(Subject::NoLayer), get(Subject::TowerGovernor));
    println!();
    if smoke {
        println!("**Smoke test** (0.3 s per row): not a measurement.\n");
    }
    println!(
        "Loopback: {CONNECTIONS} keep-alive connections, admitting; {rounds} interleaved rounds of \
         {:.1} s per configuration (after {:.1} s of warm-up each), {:.1} s per configuration in all.",
        run.as_secs_f64(),
        warm_up.as_secs_f64(),
        (run * rounds).as_secs_f64(),
    );
    println!();
    println!("| configuration | requests/s | p50 µs | p99 µs | rounds' p99 µs | req/s ÷ no layer | p99 ÷ no layer | req/s ÷ tower_governor |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in &rows {
        let f = |other: Option<&Loopback>, g: fn(&Loopback) -> f64| {
            other.map_or(String::new(), |o| format!("{:.2}", g(row) / g(o)))
        };
        let lo = row.round_p99.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = row.round_p99.iter().copied().fold(0.0, f64::max);
        println!(
            "| {} | {:.0} | {:.1} | {:.1} | {lo:.0} to {hi:.0} | {} | {} | {} |",
            row.subject.name(),
            row.per_sec(),
            row.micros(0.5),
            row.micros(0.99),
            f(base, Loopback::per_sec),
            f(base, |r| r.micros(0.99)),
            f(gov, Loopback::per_sec),
        );
    }
    if let Some(base) = base {
        println!();
        for s in [Subject::TollgateFields, Subject::TollgateNoFields] {
            if let Some(r) = get(s) {
                let p99 = r.micros(0.99) / base.micros(0.99);
                println!(
                    "- target p99 ≤ 1.10 × no layer, {}: {p99:.2} × ({})",
                    s.name(),
                    verdict(p99 <= 1.10)
                );
            }
        }
    }
    for row in rows {
        drop(row.senders);
        row.server.abort();
    }
    // The runtimes end here; the server's connection tasks end with them.
    drop(client_rt);
    drop(server_rt);
}

/// `TOLLGATE_HTTP_PART=serve`: the loopback part's servers alone, for a load generator outside
/// the process (`wrk`): each configuration's router on 127.0.0.1, all on one 2-worker runtime as
/// in the loopback part, for `TOLLGATE_HTTP_SECS` seconds (600 unless set). Prints one line per
/// server, `<configuration> http://<address>/`.
fn serve_only() {
    let secs = std::env::var("TOLLGATE_HTTP_SECS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(600.0);
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let servers: Vec<_> = Subject::LOOPBACK
        .iter()
        .map(|&s| {
            let (addr, task) = serve(&server_rt, s.router(Load::Allow));
            println!("{} http://{addr}/", s.name());
            task
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    for task in servers {
        task.abort();
    }
}

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) or with `--test`, both
    // parts run as a smoke test, as criterion does.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test");
    let part = std::env::var("TOLLGATE_HTTP_PART").unwrap_or_default();
    if part == "serve" {
        serve_only();
        return;
    }
    if part != "loopback" {
        let since = SystemTime::now();
        let mut c = config();
        bench_group(&mut c, Load::Allow);
        bench_group(&mut c, Load::Deny);
        c.final_summary();
        if !smoke {
            print_criterion_table(since);
        }
        let rounds = std::env::var("TOLLGATE_HTTP_PAIRED_ROUNDS")
            .ok()
            .and_then(|r| r.parse::<usize>().ok())
            .unwrap_or(200)
            .max(1);
        interleaved(if smoke { 2 } else { rounds });
    }
    if part != "criterion" {
        loopback(smoke);
    }
}
