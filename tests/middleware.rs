//! The HTTP middleware over real sockets: an axum server on loopback with connect info, driven
//! by hyper's client from chosen loopback addresses (127.0.0.2 and 127.0.0.3 as two clients),
//! on a `ManualClock` so that every field's value is exact.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::routing::{get, post};
use axum::{Extension, Router};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::keyed::KeyedLimiter;
use tollgate::middleware::{
    peer_ip, Headers, InfoDecision, LimitLayer, OnMissing, Protocol, RateLimitInfo, Rejection,
};
use tollgate::{ManualClock, Quota, TokenBucket};

/// Serves `app` on 127.0.0.1, port chosen by the OS, recording each connection's peer address.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve");
    });
    addr
}

/// The same without connect info: the setup error the layer must name.
async fn serve_without_connect_info(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service())
            .await
            .expect("serve");
    });
    addr
}

type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client whose connections come from `127.0.0.<host>`.
fn client_from(host: u8) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, host))));
    Client::builder(TokioExecutor::new()).build(connector)
}

/// A response's status, headers and body text.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

impl Reply {
    fn one(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.get_all(name).iter();
        let first = values.next()?;
        assert!(values.next().is_none(), "one {name} line expected");
        Some(first.to_str().expect("ASCII field"))
    }

    fn all(&self, name: &str) -> Vec<String> {
        self.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().expect("ASCII field").to_string())
            .collect()
    }
}

async fn send(client: &HttpClient, req: Request<Full<Bytes>>) -> Reply {
    let res: Response<_> = client.request(req).await.expect("request");
    let status = res.status();
    let headers = res.headers().clone();
    let body = res.into_body().collect().await.expect("body").to_bytes();
    Reply {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).expect("UTF-8 body"),
    }
}

async fn get_from(client: &HttpClient, addr: SocketAddr, path: &str) -> Reply {
    let req = Request::get(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .expect("request");
    send(client, req).await
}

fn hello() -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/health", get(|| async { "ok" }))
}

/// Parses a field as an RFC 9651 List and returns each member's string and parameters.
fn members(value: &str) -> Vec<(String, Vec<(String, String)>)> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not an sf-list: {e}"));
    list.into_iter()
        .map(|entry| match entry {
            sfv::ListEntry::Item(item) => {
                let name = match item.bare_item {
                    sfv::BareItem::String(s) => s.as_str().to_string(),
                    other => panic!("policy name not a string: {other:?}"),
                };
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            sfv::BareItem::Integer(i) => i64::from(*i).to_string(),
                            sfv::BareItem::String(s) => s.as_str().to_string(),
                            other => format!("{other:?}"),
                        };
                        (k.as_str().to_string(), v)
                    })
                    .collect();
                (name, params)
            }
            other => panic!("inner list in a RateLimit field: {other:?}"),
        })
        .collect()
}

fn params(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[tokio::test]
async fn every_field_is_exact_and_parses_as_a_structured_list() {
    let clock = ManualClock::new();
    // 2 a minute per client: one token every 30 s.
    let limiter = KeyedLimiter::with_clock(Quota::per_minute(2).unwrap(), clock.clone());
    let layer = LimitLayer::keyed(limiter, peer_ip()).build().unwrap();
    let addr = serve(hello().layer(layer)).await;
    let client = client_from(2);

    let first = get_from(&client, addr, "/").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "hello");
    assert_eq!(first.one("ratelimit-policy"), Some(r#""default";q=2;w=60"#));
    assert_eq!(first.one("ratelimit"), Some(r#""default";r=1;t=30"#));
    assert_eq!(first.one("retry-after"), None);

    let second = get_from(&client, addr, "/").await;
    assert_eq!(second.one("ratelimit"), Some(r#""default";r=0;t=30"#));

    let third = get_from(&client, addr, "/").await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.body, "");
    assert_eq!(third.one("retry-after"), Some("30"));
    assert_eq!(third.one("ratelimit-policy"), Some(r#""default";q=2;w=60"#));
    assert_eq!(third.one("ratelimit"), Some(r#""default";r=0;t=30"#));
    assert_eq!(
        members(third.one("ratelimit-policy").unwrap()),
        vec![("default".into(), params(&[("q", "2"), ("w", "60")]))]
    );
    assert_eq!(
        members(third.one("ratelimit").unwrap()),
        vec![("default".into(), params(&[("r", "0"), ("t", "30")]))]
    );

    // 10 s later the wait is 20 s, rounded up from whatever is left.
    clock.advance(Duration::from_millis(10_001));
    let fourth = get_from(&client, addr, "/").await;
    assert_eq!(fourth.one("retry-after"), Some("20"));
    assert_eq!(fourth.one("ratelimit"), Some(r#""default";r=0;t=20"#));

    // Full again, then one taken.
    clock.advance(Duration::from_secs(60));
    let again = get_from(&client, addr, "/").await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.one("ratelimit"), Some(r#""default";r=1;t=30"#));
}

#[tokio::test]
async fn a_query_of_a_full_limit_leaves_t_out() {
    let bucket = TokenBucket::with_clock(Quota::per_minute(2).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket).cost(|_| 0).build().unwrap();
    let addr = serve(hello().layer(layer)).await;
    let reply = get_from(&client_from(2), addr, "/").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.one("ratelimit"), Some(r#""default";r=2"#));
}

#[tokio::test]
async fn distinct_peers_get_distinct_limits() {
    let clock = ManualClock::new();
    let limiter = KeyedLimiter::with_clock(Quota::per_minute(1).unwrap(), clock);
    let layer = LimitLayer::keyed(limiter, peer_ip()).build().unwrap();
    let addr = serve(hello().layer(layer)).await;
    let (two, three) = (client_from(2), client_from(3));
    assert_eq!(get_from(&two, addr, "/").await.status, StatusCode::OK);
    assert_eq!(
        get_from(&two, addr, "/").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(get_from(&three, addr, "/").await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_connections_share_one_limit() {
    const CAPACITY: u64 = 10;
    let bucket = TokenBucket::with_clock(Quota::per_hour(CAPACITY).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket).build().unwrap();
    let addr = serve(hello().layer(layer)).await;
    let mut tasks = Vec::new();
    for c in 0..8u8 {
        tasks.push(tokio::spawn(async move {
            // A client of its own: its own connection.
            let client = client_from(2 + c % 2);
            let mut statuses = Vec::new();
            for _ in 0..5 {
                statuses.push(get_from(&client, addr, "/").await.status);
            }
            statuses
        }));
    }
    let mut ok = 0;
    let mut refused = 0;
    for t in tasks {
        for s in t.await.expect("task") {
            match s {
                StatusCode::OK => ok += 1,
                StatusCode::TOO_MANY_REQUESTS => refused += 1,
                other => panic!("unexpected {other}"),
            }
        }
    }
    assert_eq!(ok, CAPACITY);
    assert_eq!(refused, 40 - CAPACITY);
}

#[tokio::test]
async fn a_dry_run_lets_everything_through_and_counts_what_it_would_refuse() {
    let bucket = TokenBucket::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket).dry_run().build().unwrap();
    let addr = serve(hello().layer(layer.clone())).await;
    let client = client_from(2);
    for _ in 0..3 {
        let reply = get_from(&client, addr, "/").await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.one("ratelimit"), None, "no fields unless asked");
        assert_eq!(reply.one("retry-after"), None);
    }
    assert_eq!(layer.would_deny(), 2);

    let bucket = TokenBucket::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket)
        .dry_run()
        .dry_run_headers(true)
        .build()
        .unwrap();
    let addr = serve(hello().layer(layer)).await;
    get_from(&client, addr, "/").await;
    let over = get_from(&client, addr, "/").await;
    assert_eq!(over.status, StatusCode::OK);
    assert_eq!(over.one("ratelimit"), Some(r#""default";r=0;t=60"#));
    assert_eq!(over.one("retry-after"), None, "nothing was refused");
}

#[tokio::test]
async fn exempt_requests_are_not_counted_and_get_no_fields() {
    let bucket = TokenBucket::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket)
        .exempt(|head| head.uri.path() == "/health")
        .build()
        .unwrap();
    let addr = serve(hello().layer(layer)).await;
    let client = client_from(2);
    for _ in 0..3 {
        let health = get_from(&client, addr, "/health").await;
        assert_eq!(health.status, StatusCode::OK);
        assert_eq!(health.one("ratelimit"), None);
        assert_eq!(health.one("ratelimit-policy"), None);
    }
    assert_eq!(get_from(&client, addr, "/").await.status, StatusCode::OK);
}

async fn post_bytes(client: &HttpClient, addr: SocketAddr, len: usize) -> Reply {
    let req = Request::post(format!("http://{addr}/upload"))
        .body(Full::new(Bytes::from(vec![b'x'; len])))
        .expect("request");
    send(client, req).await
}

#[tokio::test]
async fn byte_costs_take_the_content_length_and_refuse_oversized_bodies_with_413() {
    let quota = Quota::per_minute(1000).unwrap();
    let limiter = KeyedLimiter::with_clock(quota, ManualClock::new());
    let layer = LimitLayer::keyed(limiter, peer_ip())
        .cost_content_length(100)
        .build()
        .unwrap();
    let app = Router::new().route(
        "/upload",
        post(|body: Bytes| async move { body.len().to_string() }),
    );
    let addr = serve(app.layer(layer)).await;
    let client = client_from(2);

    let first = post_bytes(&client, addr, 600).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.one("ratelimit-policy"),
        Some(r#""default";q=1000;qu="content-bytes";w=60"#)
    );
    assert_eq!(first.one("ratelimit"), Some(r#""default";r=400;t=1"#));
    let second = post_bytes(&client, addr, 600).await;
    assert_eq!(second.status, StatusCode::TOO_MANY_REQUESTS);
    let huge = post_bytes(&client, addr, 2000).await;
    assert_eq!(huge.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(huge.one("retry-after"), None, "a retry would never succeed");
    assert_eq!(post_bytes(&client, addr, 400).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_full_keyed_limiter_answers_503_without_retry_after() {
    let limiter = KeyedLimiter::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new())
        .with_max_keys(1);
    let layer = LimitLayer::keyed(limiter, peer_ip()).build().unwrap();
    let addr = serve(hello().layer(layer)).await;
    assert_eq!(
        get_from(&client_from(2), addr, "/").await.status,
        StatusCode::OK
    );
    let refused = get_from(&client_from(3), addr, "/").await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.one("retry-after"), None);
    assert_eq!(refused.one("ratelimit"), None, "no rate decision was made");
}

#[tokio::test]
async fn a_missing_peer_address_is_a_500_that_names_the_fix() {
    let limiter = KeyedLimiter::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
    let layer = LimitLayer::keyed(limiter, peer_ip()).build().unwrap();
    let addr = serve_without_connect_info(hello().layer(layer)).await;
    let reply = get_from(&client_from(2), addr, "/").await;
    assert_eq!(reply.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        reply
            .body
            .contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn stacked_layers_append_one_member_each() {
    let clock = ManualClock::new();
    let per_ip = KeyedLimiter::with_clock(Quota::per_minute(5).unwrap(), clock.clone());
    let all = TokenBucket::with_clock(Quota::per_second(100).unwrap(), clock);
    let app = hello()
        .layer(
            LimitLayer::keyed(per_ip, peer_ip())
                .policy_name("per-ip")
                .build()
                .unwrap(),
        )
        .layer(LimitLayer::global(all).policy_name("all").build().unwrap());
    let addr = serve(app).await;
    let reply = get_from(&client_from(2), addr, "/").await;
    assert_eq!(reply.status, StatusCode::OK);
    let mut policies = reply.all("ratelimit-policy");
    policies.sort();
    assert_eq!(policies, [r#""all";q=100;w=1"#, r#""per-ip";q=5;w=60"#]);
    let joined = reply.all("ratelimit").join(", ");
    let names: Vec<String> = members(&joined).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names.len(), 2);
    assert!(names.contains(&"per-ip".to_string()) && names.contains(&"all".to_string()));
}

#[tokio::test]
async fn a_custom_denial_gets_the_fields_too() {
    let bucket = TokenBucket::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket)
        .on_denied(|r: &Rejection| {
            let mut res = Response::new(Body::from(format!(
                r#"{{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":{}}}"#,
                r.status().as_u16()
            )));
            *res.status_mut() = r.status();
            res.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/problem+json"),
            );
            res
        })
        .build()
        .unwrap();
    let addr = serve(hello().layer(layer)).await;
    let client = client_from(2);
    get_from(&client, addr, "/").await;
    let denied = get_from(&client, addr, "/").await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.one("content-type"), Some("application/problem+json"));
    assert!(denied.body.contains("quota-exceeded"));
    assert_eq!(denied.one("retry-after"), Some("60"));
    assert_eq!(denied.one("ratelimit"), Some(r#""default";r=0;t=60"#));
}

#[tokio::test]
async fn fields_can_be_limited_to_denials_or_turned_off() {
    for (headers, on_ok, on_denial) in [
        (Headers::OnDenial, false, true),
        (Headers::Never, false, false),
    ] {
        let bucket = TokenBucket::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
        let layer = LimitLayer::global(bucket).headers(headers).build().unwrap();
        let addr = serve(hello().layer(layer)).await;
        let client = client_from(2);
        let ok = get_from(&client, addr, "/").await;
        assert_eq!(ok.one("ratelimit").is_some(), on_ok, "{headers:?}");
        let denied = get_from(&client, addr, "/").await;
        assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(denied.one("ratelimit").is_some(), on_denial, "{headers:?}");
        assert_eq!(denied.one("retry-after"), Some("60"), "{headers:?}");
    }
}

#[tokio::test]
async fn handlers_see_the_decision() {
    let bucket = TokenBucket::with_clock(Quota::per_minute(3).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket).build().unwrap();
    let app = Router::new().route(
        "/",
        get(|Extension(info): Extension<RateLimitInfo>| async move {
            assert_eq!(info.decision(), InfoDecision::Admitted);
            format!("{} of {}", info.remaining(), info.quota().count())
        }),
    );
    let addr = serve(app.layer(layer)).await;
    assert_eq!(get_from(&client_from(2), addr, "/").await.body, "2 of 3");
}

#[tokio::test]
async fn a_keyless_request_gets_the_configured_answer() {
    let name = http::HeaderName::from_static("x-api-key");
    let make = |on_missing| {
        let limiter = KeyedLimiter::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
        LimitLayer::keyed(limiter, tollgate::middleware::header(name.clone()))
            .on_missing(on_missing)
            .build()
            .unwrap()
    };
    let client = client_from(2);

    let addr = serve(hello().layer(make(OnMissing::Reject(StatusCode::UNAUTHORIZED)))).await;
    let reply = get_from(&client, addr, "/").await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.one("ratelimit"), None);

    let addr = serve(hello().layer(make(OnMissing::Allow))).await;
    for _ in 0..3 {
        assert_eq!(get_from(&client, addr, "/").await.status, StatusCode::OK);
    }

    let shared = http::HeaderValue::from_static("anonymous");
    let addr = serve(hello().layer(make(OnMissing::Key(shared)))).await;
    assert_eq!(get_from(&client, addr, "/").await.status, StatusCode::OK);
    assert_eq!(
        get_from(&client, addr, "/").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// gRPC: a hand-written service over a bytes codec (no protoc), behind the layer on tonic's
/// server.
mod grpc {
    use std::convert::Infallible;
    use std::future::{ready, Ready};
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use bytes::{Buf, BufMut};
    use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
    use tonic::Status;

    #[derive(Debug, Clone, Copy, Default)]
    pub(crate) struct BytesCodec;

    impl Codec for BytesCodec {
        type Encode = Vec<u8>;
        type Decode = Vec<u8>;
        type Encoder = BytesCodec;
        type Decoder = BytesCodec;
        fn encoder(&mut self) -> BytesCodec {
            BytesCodec
        }
        fn decoder(&mut self) -> BytesCodec {
            BytesCodec
        }
    }

    impl Encoder for BytesCodec {
        type Item = Vec<u8>;
        type Error = Status;
        fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
            dst.put_slice(&item);
            Ok(())
        }
    }

    impl Decoder for BytesCodec {
        type Item = Vec<u8>;
        type Error = Status;
        fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
            let mut out = vec![0; src.remaining()];
            src.copy_to_slice(&mut out);
            Ok(Some(out))
        }
    }

    /// Echoes its request.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Echo;

    impl tonic::server::NamedService for Echo {
        const NAME: &'static str = "test.Echo";
    }

    struct Say;

    impl tonic::server::UnaryService<Vec<u8>> for Say {
        type Response = Vec<u8>;
        type Future = Ready<Result<tonic::Response<Vec<u8>>, Status>>;
        fn call(&mut self, request: tonic::Request<Vec<u8>>) -> Self::Future {
            ready(Ok(tonic::Response::new(request.into_inner())))
        }
    }

    type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

    impl tower::Service<http::Request<tonic::body::Body>> for Echo {
        type Response = http::Response<tonic::body::Body>;
        type Error = Infallible;
        type Future = BoxFuture<Result<Self::Response, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(BytesCodec);
                Ok(grpc.unary(Say, req).await)
            })
        }
    }
}

#[tokio::test]
async fn a_grpc_denial_is_resource_exhausted_with_a_pushback() {
    let bucket = TokenBucket::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket).build().unwrap();
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .layer(layer)
            .add_service(grpc::Echo)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .expect("serve");
    });
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = tonic::client::Grpc::new(channel);
    let path = http::uri::PathAndQuery::from_static("/test.Echo/Say");

    client.ready().await.expect("ready");
    let first = client
        .unary(
            tonic::Request::new(b"hi".to_vec()),
            path.clone(),
            grpc::BytesCodec,
        )
        .await
        .expect("the first call is admitted");
    assert_eq!(first.get_ref(), b"hi");
    assert_eq!(
        first
            .metadata()
            .get("ratelimit")
            .map(|v| v.to_str().unwrap()),
        Some(r#""default";r=0;t=60"#)
    );

    client.ready().await.expect("ready");
    let status = client
        .unary(tonic::Request::new(b"hi".to_vec()), path, grpc::BytesCodec)
        .await
        .expect_err("the second call is refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert_eq!(status.message(), "rate limit exceeded");
    let meta = status.metadata();
    assert_eq!(
        meta.get("grpc-retry-pushback-ms")
            .map(|v| v.to_str().unwrap()),
        Some("60000")
    );
    assert_eq!(
        meta.get("retry-after").map(|v| v.to_str().unwrap()),
        Some("60")
    );
    assert_eq!(
        meta.get("ratelimit").map(|v| v.to_str().unwrap()),
        Some(r#""default";r=0;t=60"#)
    );
}

/// The second of two requests with `content_type` (none when `None`) to an axum server whose
/// layer (1 a minute) guards `protocol`: the refusal.
async fn refusal_under(protocol: Protocol, content_type: Option<&str>) -> Reply {
    let bucket = TokenBucket::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
    let layer = LimitLayer::global(bucket)
        .protocol(protocol)
        .build()
        .unwrap();
    let addr = serve(hello().layer(layer)).await;
    let client = client_from(2);
    let request = || {
        let mut req = Request::get(format!("http://{addr}/"));
        if let Some(content_type) = content_type {
            req = req.header(http::header::CONTENT_TYPE, content_type);
        }
        req.body(Full::new(Bytes::new())).expect("request")
    };
    assert_eq!(send(&client, request()).await.status, StatusCode::OK);
    send(&client, request()).await
}

/// HTTP's answer to a denial: 429 with `Retry-After` and the fields, nothing of gRPC's.
fn assert_http_denial(reply: &Reply, case: &str) {
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS, "{case}");
    assert_eq!(reply.one("retry-after"), Some("60"), "{case}");
    assert_eq!(
        reply.one("ratelimit-policy"),
        Some(r#""default";q=1;w=60"#),
        "{case}"
    );
    assert_eq!(
        reply.one("ratelimit"),
        Some(r#""default";r=0;t=60"#),
        "{case}"
    );
    assert_eq!(reply.one("grpc-status"), None, "{case}");
    assert_eq!(reply.one("grpc-retry-pushback-ms"), None, "{case}");
}

/// gRPC's answer to a denial: trailers-only, HTTP 200 with `RESOURCE_EXHAUSTED` and the pushback,
/// the fields as metadata.
fn assert_grpc_denial(reply: &Reply, case: &str) {
    assert_eq!(reply.status, StatusCode::OK, "{case}");
    assert_eq!(
        reply.one("content-type"),
        Some("application/grpc"),
        "{case}"
    );
    assert_eq!(reply.one("grpc-status"), Some("8"), "{case}");
    assert_eq!(
        reply.one("grpc-message"),
        Some("rate limit exceeded"),
        "{case}"
    );
    assert_eq!(reply.one("grpc-retry-pushback-ms"), Some("60000"), "{case}");
    assert_eq!(reply.one("retry-after"), Some("60"), "{case}");
    assert_eq!(
        reply.one("ratelimit"),
        Some(r#""default";r=0;t=60"#),
        "{case}"
    );
    assert_eq!(reply.body, "", "{case}");
}

#[tokio::test]
async fn protocol_auto_answers_each_request_in_its_own_protocol() {
    assert_eq!(Protocol::default(), Protocol::Auto);
    assert_http_denial(&refusal_under(Protocol::Auto, None).await, "no type");
    assert_http_denial(
        &refusal_under(Protocol::Auto, Some("application/json")).await,
        "json",
    );
    for grpc in ["application/grpc", "application/grpc+proto"] {
        assert_grpc_denial(&refusal_under(Protocol::Auto, Some(grpc)).await, grpc);
    }
}

#[tokio::test]
async fn protocol_http_answers_every_refusal_with_429() {
    for content_type in [
        None,
        Some("application/grpc"),
        Some("application/grpc+proto"),
    ] {
        let reply = refusal_under(Protocol::Http, content_type).await;
        assert_http_denial(&reply, &format!("{content_type:?}"));
    }
}

#[tokio::test]
async fn protocol_grpc_answers_every_refusal_as_grpc() {
    for content_type in [None, Some("application/json"), Some("application/grpc")] {
        let reply = refusal_under(Protocol::Grpc, content_type).await;
        assert_grpc_denial(&reply, &format!("{content_type:?}"));
    }
}

/// A backend that answers through a future, as Redis does: here an in-process bucket behind a
/// task hop, so the layer's waiting path runs without a server.
struct Later(std::sync::Arc<TokenBucket<ManualClock>>);

impl tollgate::middleware::Backend<()> for Later {
    type Future = std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<tollgate::Admitted, tollgate::middleware::Refusal>,
                > + Send,
        >,
    >;

    fn decide(&self, _key: &(), cost: u64) -> tollgate::middleware::Decision<Self::Future> {
        let bucket = std::sync::Arc::clone(&self.0);
        tollgate::middleware::Decision::Pending(Box::pin(async move {
            tokio::task::yield_now().await;
            tollgate::Limiter::try_acquire_n(&*bucket, cost).map_err(Into::into)
        }))
    }

    fn quota(&self) -> Quota {
        tollgate::Limiter::quota(&*self.0)
    }
}

#[tokio::test]
async fn a_decision_made_later_is_enforced_the_same_way() {
    let bucket = TokenBucket::with_clock(Quota::per_minute(2).unwrap(), ManualClock::new());
    let layer = LimitLayer::new(
        Later(std::sync::Arc::new(bucket)),
        tollgate::middleware::global(),
    )
    .build()
    .unwrap();
    let addr = serve(hello().layer(layer)).await;
    let client = client_from(2);
    let first = get_from(&client, addr, "/").await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.body, "hello");
    assert_eq!(first.one("ratelimit"), Some(r#""default";r=1;t=30"#));
    assert_eq!(get_from(&client, addr, "/").await.status, StatusCode::OK);
    let third = get_from(&client, addr, "/").await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.one("retry-after"), Some("30"));
}

async fn get_with_key(client: &HttpClient, addr: SocketAddr, key: &str) -> Reply {
    let req = Request::get(format!("http://{addr}/"))
        .header("x-api-key", key)
        .body(Full::new(Bytes::new()))
        .expect("request");
    send(client, req).await
}

#[tokio::test]
async fn each_tier_is_a_policy_of_its_own() {
    use tollgate::keyed::Tiered;
    let tiers = [
        Quota::per_minute(1).unwrap(),
        Quota::per_minute(100).unwrap(),
    ];
    let limiter: KeyedLimiter<http::HeaderValue, Tiered, _> = KeyedLimiter::with_tiers(
        &tiers,
        |key: &http::HeaderValue| usize::from(key.as_bytes().starts_with(b"pro-")),
        ManualClock::new(),
    )
    .unwrap();
    let name = http::HeaderName::from_static("x-api-key");
    let layer = LimitLayer::keyed(limiter, tollgate::middleware::header(name))
        .tier_names(["free", "pro"])
        .build()
        .unwrap();
    let addr = serve(hello().layer(layer)).await;
    let client = client_from(2);

    let free = get_with_key(&client, addr, "free-ann").await;
    assert_eq!(free.one("ratelimit-policy"), Some(r#""free";q=1;w=60"#));
    assert_eq!(free.one("ratelimit"), Some(r#""free";r=0;t=60"#));
    let pro = get_with_key(&client, addr, "pro-bob").await;
    assert_eq!(pro.one("ratelimit-policy"), Some(r#""pro";q=100;w=60"#));
    assert_eq!(
        members(pro.one("ratelimit").unwrap()),
        vec![("pro".into(), params(&[("r", "99"), ("t", "1")]))]
    );
    let refused = get_with_key(&client, addr, "free-ann").await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.one("ratelimit-policy"), Some(r#""free";q=1;w=60"#));
}

#[test]
fn tier_names_must_name_each_tier_once() {
    use tollgate::keyed::Tiered;
    use tollgate::middleware::LayerError;
    let tiers = [
        Quota::per_minute(1).unwrap(),
        Quota::per_minute(100).unwrap(),
    ];
    let limiter: KeyedLimiter<IpAddr, Tiered, _> =
        KeyedLimiter::with_tiers(&tiers, |_: &IpAddr| 0, ManualClock::new()).unwrap();
    let err = LimitLayer::keyed(limiter, peer_ip())
        .tier_names(["only-one"])
        .build()
        .unwrap_err();
    assert_eq!(err, LayerError::TierNames { names: 1, tiers: 2 });
    assert!(err.to_string().contains("tier_names"));
}

#[tokio::test]
async fn a_partition_key_is_sent_only_when_configured() {
    let limiter = KeyedLimiter::with_clock(Quota::per_minute(5).unwrap(), ManualClock::new());
    let layer = LimitLayer::keyed(limiter, peer_ip())
        .partition_key(|ip: &IpAddr| match ip {
            IpAddr::V4(v4) => vec![v4.octets()[3]],
            IpAddr::V6(_) => vec![0],
        })
        .build()
        .unwrap();
    let addr = serve(hello().layer(layer)).await;
    let reply = get_from(&client_from(3), addr, "/").await;
    let value = reply.one("ratelimit").unwrap();
    assert_eq!(value, r#""default";r=4;t=12;pk=:Aw==:"#);
    let list: sfv::List = sfv::Parser::new(value).parse().unwrap();
    let sfv::ListEntry::Item(item) = &list[0] else {
        panic!("not an item")
    };
    let pk = item
        .params
        .iter()
        .find(|(k, _)| k.as_str() == "pk")
        .unwrap()
        .1;
    assert_eq!(pk, &sfv::BareItem::ByteSequence(vec![3]));
    assert_eq!(reply.one("ratelimit-policy"), Some(r#""default";q=5;w=60"#));
}

#[tokio::test(start_paused = true)]
async fn delay_up_to_waits_out_a_place_in_the_meter_or_refuses_without_taking_one() {
    use std::convert::Infallible;
    use tokio::time::Instant;
    use tollgate::leaky::LeakyMeter;
    use tollgate::middleware::{global, Meter};
    use tollgate::TokioClock;
    use tower::{service_fn, Layer, ServiceExt};

    // One request every 100 ms; a request waits at most 250 ms.
    let meter = LeakyMeter::with_clock(Quota::per_second(10).unwrap(), TokioClock::new());
    let layer = LimitLayer::new(Meter::new(meter), global())
        .delay_up_to(Duration::from_millis(250))
        .build()
        .unwrap();
    let svc = layer.layer(service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let svc = svc.clone();
        tasks.push(tokio::spawn(async move {
            let res = svc.oneshot(Request::new(String::new())).await.unwrap();
            (
                res.status(),
                start.elapsed(),
                res.headers().get("retry-after").cloned(),
            )
        }));
        // Each request's place is taken in call, in the order they arrive.
        tokio::task::yield_now().await;
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    let passed: Vec<Duration> = answers
        .iter()
        .filter(|(s, _, _)| *s == StatusCode::OK)
        .map(|(_, at, _)| *at)
        .collect();
    assert_eq!(
        passed,
        [0, 100, 200].map(Duration::from_millis),
        "three fit within 250 ms and leave one interval apart"
    );
    for (status, at, retry) in answers.iter().filter(|(s, _, _)| *s != StatusCode::OK) {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(*at, Duration::ZERO, "refused at once, without waiting");
        assert_eq!(retry.as_ref().unwrap(), "1");
    }
    assert_eq!(answers.len(), 5);
    // The refused two took no place: at 300 ms the queue is empty again, and a request passes
    // without waiting.
    tokio::time::sleep_until(start + Duration::from_millis(300)).await;
    let t = Instant::now();
    let res = svc.oneshot(Request::new(String::new())).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(t.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn delay_up_to_queues_each_key_of_a_keyed_meter_on_its_own() {
    use std::convert::Infallible;
    use tokio::time::Instant;
    use tollgate::keyed::LeakyMeterKeys;
    use tollgate::middleware::Meter;
    use tollgate::TokioClock;
    use tower::{service_fn, Layer, ServiceExt};

    let meter: KeyedLimiter<http::HeaderValue, LeakyMeterKeys, _> =
        KeyedLimiter::with_algorithm(Quota::per_second(10).unwrap(), TokioClock::new()).unwrap();
    let name = http::HeaderName::from_static("x-api-key");
    let layer = LimitLayer::new(Meter::new(meter), tollgate::middleware::header(name))
        .delay_up_to(Duration::from_millis(150))
        .build()
        .unwrap();
    let svc = layer.layer(service_fn(|_req: Request<String>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    }));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for key in ["a", "a", "a", "b"] {
        let svc = svc.clone();
        let req = Request::builder()
            .header("x-api-key", key)
            .body(String::new())
            .unwrap();
        tasks.push(tokio::spawn(async move {
            let res = svc.oneshot(req).await.unwrap();
            (key, res.status(), start.elapsed())
        }));
        tokio::task::yield_now().await;
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(t.await.unwrap());
    }
    got.sort_by_key(|(key, status, at)| (*key, status.as_u16(), *at));
    assert_eq!(
        got,
        [
            ("a", StatusCode::OK, Duration::ZERO),
            ("a", StatusCode::OK, Duration::from_millis(100)),
            ("a", StatusCode::TOO_MANY_REQUESTS, Duration::ZERO),
            ("b", StatusCode::OK, Duration::ZERO),
        ]
    );
}

async fn get_forwarded(client: &HttpClient, addr: SocketAddr, xff: &str) -> Reply {
    let req = Request::get(format!("http://{addr}/"))
        .header("x-forwarded-for", xff)
        .body(Full::new(Bytes::new()))
        .expect("request");
    send(client, req).await
}

#[tokio::test]
async fn forwarded_addresses_are_read_only_from_a_trusted_proxy_and_from_the_right() {
    use tollgate::middleware::{forwarded, ForwardedHeader};
    let limiter = KeyedLimiter::with_clock(Quota::per_minute(1).unwrap(), ManualClock::new());
    let key = forwarded(["127.0.0.1/32"], ForwardedHeader::XForwardedFor).unwrap();
    let layer = LimitLayer::keyed(limiter, key).build().unwrap();
    let addr = serve(hello().layer(layer)).await;

    // An untrusted client writing its own header is keyed on its address: a new spoofed
    // address per request changes nothing.
    let client = client_from(2);
    assert_eq!(
        get_forwarded(&client, addr, "10.0.0.1").await.status,
        StatusCode::OK
    );
    assert_eq!(
        get_forwarded(&client, addr, "10.0.0.2").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    // Behind the trusted proxy (127.0.0.1), the client is the rightmost untrusted entry; what
    // the client put to its left does not change the key.
    let proxy = client_from(1);
    assert_eq!(
        get_forwarded(&proxy, addr, "6.6.6.6, 203.0.113.7")
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        get_forwarded(&proxy, addr, "7.7.7.7, 203.0.113.7")
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        get_forwarded(&proxy, addr, "203.0.113.8").await.status,
        StatusCode::OK,
        "another client behind the proxy has its own limit"
    );
}

/// A backend that answers no tiers at all (the trait allows it): the layer uses its one quota.
struct NoTiers(TokenBucket<ManualClock>);

impl tollgate::middleware::Backend<()> for NoTiers {
    type Future = std::future::Ready<Result<tollgate::Admitted, tollgate::middleware::Refusal>>;

    fn decide(&self, _key: &(), cost: u64) -> tollgate::middleware::Decision<Self::Future> {
        let verdict = tollgate::Limiter::try_acquire_n(&self.0, cost).map_err(Into::into);
        tollgate::middleware::Decision::Ready(verdict)
    }

    fn quota(&self) -> Quota {
        tollgate::Limiter::quota(&self.0)
    }

    fn tiers(&self) -> Vec<Quota> {
        Vec::new()
    }

    fn tier_of_key(&self, _key: &()) -> usize {
        7
    }
}

#[tokio::test]
async fn a_backend_without_tiers_is_sent_as_its_one_quota() {
    let bucket = TokenBucket::with_clock(Quota::per_minute(3).unwrap(), ManualClock::new());
    let layer = LimitLayer::new(NoTiers(bucket), tollgate::middleware::global())
        .build()
        .unwrap();
    let addr = serve(hello().layer(layer)).await;
    let reply = get_from(&client_from(2), addr, "/").await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.one("ratelimit-policy"), Some(r#""default";q=3;w=60"#));
}

/// The layer's quota changed at runtime through a [`QuotaHandle`], called in-process (every
/// decision here is made at once, so each future is ready when first polled).
mod quota_handle {
    use std::convert::Infallible;
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use http::{HeaderValue, Request, Response, StatusCode};
    use tollgate::keyed::KeyedLimiter;
    use tollgate::middleware::{
        global, peer_ip, Global, GlobalAllOf, LimitLayer, Meter, RateLimitInfo, SetQuotaError,
    };
    use tollgate::window::SlidingWindowLog;
    use tollgate::{AllOf, ManualClock, Quota, QuotaError, ShardedBucket, TokenBucket};
    use tower::{service_fn, Layer, Service};

    fn now<F: Future>(fut: F) -> F::Output {
        let mut fut = pin!(fut);
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(out) => out,
            Poll::Pending => panic!("an in-process decision waited"),
        }
    }

    /// A handler that answers with the quota its request's `RateLimitInfo` names, as
    /// `x-quota: count/period-in-ns`.
    fn echo_quota() -> impl Service<
        Request<()>,
        Response = Response<()>,
        Error = Infallible,
        Future = impl Future<Output = Result<Response<()>, Infallible>> + Send,
    > + Clone
           + Send
           + 'static {
        service_fn(|req: Request<()>| async move {
            let mut res = Response::new(());
            if let Some(info) = req.extensions().get::<RateLimitInfo>() {
                let q = info.quota();
                let v = format!("{}/{}", q.count(), q.period().as_nanos());
                res.headers_mut()
                    .insert("x-quota", HeaderValue::from_str(&v).expect("ASCII"));
            }
            Ok(res)
        })
    }

    fn field<'a>(res: &'a Response<()>, name: &str) -> Option<&'a str> {
        res.headers().get(name).map(|v| v.to_str().expect("ASCII"))
    }

    fn peer_request() -> Request<()> {
        let mut req = Request::new(());
        req.extensions_mut()
            .insert(std::net::SocketAddr::from(([127, 0, 0, 2], 40000)));
        req
    }

    #[test]
    fn a_change_through_the_handle_moves_decisions_and_fields_from_the_next_request() {
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(Quota::per_minute(2).unwrap(), clock.clone());
        let layer = LimitLayer::global(bucket).build().unwrap();
        let handle = layer.quota_handle();
        let mut svc = layer.layer(echo_quota());

        let first = now(svc.call(Request::new(()))).unwrap();
        assert_eq!(first.status(), StatusCode::OK);
        assert_eq!(
            field(&first, "ratelimit-policy"),
            Some(r#""default";q=2;w=60"#)
        );
        assert_eq!(field(&first, "ratelimit"), Some(r#""default";r=1;t=30"#));
        assert_eq!(field(&first, "x-quota"), Some("2/60000000000"));

        // Ten a second from now on: the one token left is kept, and refills come every 100 ms.
        handle.set_quota(Quota::per_minute(600).unwrap()).unwrap();
        assert_eq!(handle.quotas(), [Quota::per_minute(600).unwrap()]);
        assert_eq!(
            layer.backend().limiter().quota(),
            Quota::per_minute(600).unwrap()
        );

        let second = now(svc.call(Request::new(()))).unwrap();
        assert_eq!(second.status(), StatusCode::OK);
        assert_eq!(
            field(&second, "ratelimit-policy"),
            Some(r#""default";q=600;w=60"#)
        );
        assert_eq!(field(&second, "ratelimit"), Some(r#""default";r=0;t=1"#));
        assert_eq!(field(&second, "x-quota"), Some("600/60000000000"));

        let third = now(svc.call(Request::new(()))).unwrap();
        assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(field(&third, "retry-after"), Some("1"));
        assert_eq!(
            field(&third, "ratelimit-policy"),
            Some(r#""default";q=600;w=60"#)
        );

        // Under the old quota the next token was 30 s away; under the new one, 100 ms.
        clock.advance(Duration::from_millis(100));
        let fourth = now(svc.call(Request::new(()))).unwrap();
        assert_eq!(fourth.status(), StatusCode::OK);
    }

    #[test]
    fn a_leaky_meter_and_several_limits_change_through_the_handle_too() {
        let clock = ManualClock::new();
        let meter = tollgate::leaky::LeakyMeter::with_clock(Quota::per_second(1).unwrap(), clock);
        let layer = LimitLayer::new(Meter::new(meter), global())
            .build()
            .unwrap();
        layer
            .quota_handle()
            .set_quota(Quota::per_second(4).unwrap())
            .unwrap();
        let res = now(layer.layer(echo_quota()).call(Request::new(()))).unwrap();
        assert_eq!(
            field(&res, "ratelimit-policy"),
            Some(r#""default";q=4;w=1"#)
        );

        let clock = ManualClock::new();
        let limits = AllOf::new([
            TokenBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone()),
            TokenBucket::with_clock(Quota::per_hour(1_000).unwrap(), clock),
        ])
        .unwrap();
        let layer = LimitLayer::new(GlobalAllOf::new(limits), global())
            .build()
            .unwrap();
        let handle = layer.quota_handle();
        handle
            .set_tier_quota(1, Quota::per_hour(7_200).unwrap())
            .unwrap();
        assert_eq!(
            layer.backend().limits().quotas(),
            [
                Quota::per_second(10).unwrap(),
                Quota::per_hour(7_200).unwrap()
            ]
        );
        let res = now(layer.layer(echo_quota()).call(Request::new(()))).unwrap();
        assert_eq!(
            field(&res, "ratelimit-policy"),
            Some(r#""default-0";q=10;w=1, "default-1";q=7200;w=3600"#)
        );
        assert_eq!(
            handle.set_tier_quota(2, Quota::per_hour(1).unwrap()),
            Err(SetQuotaError::NoSuchTier { tier: 2, tiers: 2 })
        );
    }

    #[test]
    fn a_shared_a_metered_and_an_all_of_limiter_change_as_their_limiters_do() {
        let bucket = Arc::new(TokenBucket::with_clock(
            Quota::per_second(2).unwrap(),
            ManualClock::new(),
        ));
        let layer = LimitLayer::global(Arc::clone(&bucket)).build().unwrap();
        layer
            .quota_handle()
            .set_quota(Quota::per_second(3).unwrap())
            .unwrap();
        assert_eq!(bucket.quota(), Quota::per_second(3).unwrap());

        let metered = tollgate::metrics::Metered::new(
            "api",
            TokenBucket::with_clock(Quota::per_second(2).unwrap(), ManualClock::new()),
        );
        let layer = LimitLayer::global(metered).build().unwrap();
        layer
            .quota_handle()
            .set_quota(Quota::per_second(5).unwrap())
            .unwrap();
        assert_eq!(
            layer.backend().limiter().get_ref().quota(),
            Quota::per_second(5).unwrap()
        );

        // One limit for the layer (the first's policy), its limit 0 changed.
        let clock = ManualClock::new();
        let all = AllOf::new([
            TokenBucket::with_clock(Quota::per_second(10).unwrap(), clock.clone()),
            TokenBucket::with_clock(Quota::per_hour(1_000).unwrap(), clock),
        ])
        .unwrap();
        let layer = LimitLayer::global(all).build().unwrap();
        layer
            .quota_handle()
            .set_quota(Quota::per_second(20).unwrap())
            .unwrap();
        assert_eq!(
            layer.backend().limiter().quotas(),
            [
                Quota::per_second(20).unwrap(),
                Quota::per_hour(1_000).unwrap()
            ]
        );
        let res = now(layer.layer(echo_quota()).call(Request::new(()))).unwrap();
        assert_eq!(
            field(&res, "ratelimit-policy"),
            Some(r#""default";q=20;w=1"#)
        );
    }

    #[test]
    fn a_backend_that_cannot_change_answers_unsupported_and_keeps_its_fields() {
        // A keyed limiter behind a trait object cannot be asked: it refuses.
        let limiter: std::sync::Arc<dyn tollgate::KeyedLimit<std::net::IpAddr>> =
            std::sync::Arc::new(KeyedLimiter::with_clock(
                Quota::per_minute(5).unwrap(),
                ManualClock::new(),
            ));
        let layer = LimitLayer::new(tollgate::middleware::Keyed::new(limiter), peer_ip())
            .build()
            .unwrap();
        let err = layer
            .quota_handle()
            .set_quota(Quota::per_minute(50).unwrap())
            .unwrap_err();
        let SetQuotaError::Unsupported { limiter } = err else {
            panic!("{err:?}")
        };
        assert!(limiter.contains("KeyedLimit"), "{limiter}");
        assert!(err.to_string().contains("cannot change its quota"), "{err}");
        let res = now(layer.layer(echo_quota()).call(peer_request())).unwrap();
        assert_eq!(
            field(&res, "ratelimit-policy"),
            Some(r#""default";q=5;w=60"#)
        );
    }

    #[test]
    fn a_keyed_limiter_and_a_keyed_meter_change_through_the_handle() {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::with_clock(Quota::per_minute(5).unwrap(), clock.clone());
        let layer = LimitLayer::keyed(limiter, peer_ip()).build().unwrap();
        let svc = layer.layer(echo_quota());
        for _ in 0..4 {
            assert_eq!(now(svc.clone().call(peer_request())).unwrap().status(), 200);
        }
        // 1 left; the new quota carries it over, and the fields follow.
        layer
            .quota_handle()
            .set_quota(Quota::per_minute(50).unwrap())
            .unwrap();
        let res = now(svc.clone().call(peer_request())).unwrap();
        assert_eq!(res.status(), 200);
        assert_eq!(
            field(&res, "ratelimit-policy"),
            Some(r#""default";q=50;w=60"#)
        );
        assert_eq!(now(svc.clone().call(peer_request())).unwrap().status(), 429);
        assert_eq!(
            layer.backend().limiter().quota(),
            Quota::per_minute(50).unwrap()
        );
        let err = layer
            .quota_handle()
            .set_tier_quota(1, Quota::per_minute(50).unwrap())
            .unwrap_err();
        assert_eq!(err, SetQuotaError::NoSuchTier { tier: 1, tiers: 1 });

        // A keyed meter changes too; a quota its algorithm refuses changes nothing.
        let meter: KeyedLimiter<std::net::IpAddr, tollgate::keyed::LeakyMeterKeys, _> =
            KeyedLimiter::with_algorithm(Quota::per_second(5).unwrap(), ManualClock::new())
                .unwrap();
        let layer = LimitLayer::new(Meter::new(meter), peer_ip())
            .build()
            .unwrap();
        layer
            .quota_handle()
            .set_quota(Quota::per_second(50).unwrap())
            .unwrap();
        assert_eq!(
            layer.quota_handle().quotas(),
            [Quota::per_second(50).unwrap()]
        );
        let window: KeyedLimiter<std::net::IpAddr, tollgate::keyed::FixedWindowKeys, _> =
            KeyedLimiter::with_algorithm(Quota::per_second(5).unwrap(), ManualClock::new())
                .unwrap();
        let layer = LimitLayer::keyed(window, peer_ip()).build().unwrap();
        let burst = Quota::per_second(5).unwrap().with_capacity(9).unwrap();
        let err = layer.quota_handle().set_quota(burst).unwrap_err();
        assert!(matches!(err, SetQuotaError::Quota(_)), "{err:?}");
        assert_eq!(
            layer.quota_handle().quotas(),
            [Quota::per_second(5).unwrap()]
        );
    }

    #[test]
    fn a_sharded_bucket_and_a_sub_window_counter_change_through_the_handle() {
        let sharded = ShardedBucket::builder(Quota::per_second(5).unwrap())
            .shards(1)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let layer = LimitLayer::global(sharded).build().unwrap();
        layer
            .quota_handle()
            .set_quota(Quota::per_second(50).unwrap())
            .unwrap();
        assert_eq!(
            layer.backend().limiter().quota(),
            Quota::per_second(50).unwrap()
        );
        let res = now(layer.layer(echo_quota()).call(Request::new(()))).unwrap();
        assert_eq!(
            field(&res, "ratelimit-policy"),
            Some(r#""default";q=50;w=1"#)
        );

        let counter = tollgate::window::SubWindowCounter::with_clock(
            Quota::per_minute(60).unwrap(),
            6,
            ManualClock::new(),
        )
        .unwrap();
        let layer = LimitLayer::global(counter).build().unwrap();
        layer
            .quota_handle()
            .set_quota(Quota::per_minute(120).unwrap())
            .unwrap();
        let res = now(layer.layer(echo_quota()).call(Request::new(()))).unwrap();
        assert_eq!(
            field(&res, "ratelimit-policy"),
            Some(r#""default";q=120;w=60"#)
        );
    }

    /// Behind Redis the handle changes this process's limiter and the fields, and a quota the
    /// script cannot carry changes nothing. The connection is lazy, so no server is needed.
    #[cfg(feature = "redis")]
    #[tokio::test]
    async fn the_redis_backend_changes_its_limiter_or_answers_why_not() {
        use tollgate::keyed::FixedWindowKeys;
        use tollgate::middleware::Redis;
        use tollgate::redis::{FailurePolicy, RedisLimiter};
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let conn = client
            .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
            .unwrap();
        let limiter =
            RedisLimiter::<FixedWindowKeys>::builder(conn, Quota::per_minute(30).unwrap())
                .build(FailurePolicy::Closed)
                .unwrap();
        let layer = LimitLayer::new(Redis::new(Arc::new(limiter)), peer_ip())
            .build()
            .unwrap();
        let handle = layer.quota_handle();
        handle.set_quota(Quota::per_minute(60).unwrap()).unwrap();
        assert_eq!(handle.quotas(), [Quota::per_minute(60).unwrap()]);
        // Redis's clock counts microseconds: a period of 1.5 µs cannot be carried.
        let odd = Quota::per_period(3, Duration::from_nanos(1_500)).unwrap();
        let err = handle.set_quota(odd).unwrap_err();
        assert!(
            matches!(&err, SetQuotaError::Redis(e) if e.field() == "period"),
            "{err:?}"
        );
        assert_eq!(handle.quotas(), [Quota::per_minute(60).unwrap()]);
    }

    /// A keyed limiter's refusals keep their case through the handle, the parked reader's too
    /// (which a test cannot provoke through a layer without parking a lookup:
    /// `tests/keyed_reclaim.rs` provokes it on the limiter).
    #[test]
    fn a_keyed_refusal_keeps_its_case_through_the_handle() {
        use tollgate::keyed::KeyedChangeError;
        let quota = QuotaError::ZeroCount;
        let cases = [
            (KeyedChangeError::Quota(quota), SetQuotaError::Quota(quota)),
            (
                KeyedChangeError::NoSuchTier { tier: 3, tiers: 2 },
                SetQuotaError::NoSuchTier { tier: 3, tiers: 2 },
            ),
            (
                KeyedChangeError::ParkedReader { held: 7 },
                SetQuotaError::ParkedReader { held: 7 },
            ),
        ];
        for (keyed, layer) in cases {
            assert_eq!(SetQuotaError::from(keyed), layer);
        }
        assert_eq!(
            SetQuotaError::ParkedReader { held: 7 }.to_string(),
            "set_quota: a lookup parked since the previous quota change still holds the 7 keys it \
             replaced; no change until it leaves"
        );
    }

    #[test]
    fn a_quota_the_algorithm_refuses_changes_nothing() {
        let clock = ManualClock::new();
        let log = SlidingWindowLog::with_clock(Quota::per_second(10).unwrap(), clock).unwrap();
        let layer = LimitLayer::new(Global::new(log), global()).build().unwrap();
        let handle = layer.quota_handle();
        let too_long = Quota::per_second(1_000_000).unwrap();
        let err = handle.set_quota(too_long).unwrap_err();
        assert!(
            matches!(
                err,
                SetQuotaError::Quota(QuotaError::Algorithm(l)) if l.got() == 1_000_000
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("count"), "{err}");
        assert_eq!(handle.quotas(), [Quota::per_second(10).unwrap()]);
        assert_eq!(
            layer.backend().limiter().quota(),
            Quota::per_second(10).unwrap()
        );
        let res = now(layer.layer(echo_quota()).call(Request::new(()))).unwrap();
        assert_eq!(
            field(&res, "ratelimit-policy"),
            Some(r#""default";q=10;w=1"#)
        );
        assert_eq!(field(&res, "ratelimit"), Some(r#""default";r=9;t=1"#));
    }

    /// Requests on four threads race a fifth that flips the quota between two settings: every
    /// response's `RateLimit-Policy` is one of the two whole values, and the quota its handler
    /// saw (the `RateLimitInfo` extension) is the one that value advertises, as one read of the
    /// policies gives. Both settings must be seen, so the race did happen.
    #[test]
    fn requests_racing_changes_see_one_whole_policy_each() {
        let a = Quota::per_second(1_000_000).unwrap();
        let b = Quota::per_minute(90_000_000).unwrap();
        let layer = LimitLayer::global(TokenBucket::with_clock(a, ManualClock::new()))
            .build()
            .unwrap();
        let handle = layer.quota_handle();
        let stop = Arc::new(AtomicBool::new(false));
        let changes = Arc::new(AtomicU64::new(0));
        let changer = {
            let (stop, changes) = (Arc::clone(&stop), Arc::clone(&changes));
            std::thread::spawn(move || {
                // Relaxed: a flag polled on its own; the join below orders the rest.
                while !stop.load(Ordering::Relaxed) {
                    for q in [b, a] {
                        handle.set_quota(q).unwrap();
                        changes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        let expected = |res: &Response<()>| -> &'static str {
            match (field(res, "ratelimit-policy"), field(res, "x-quota")) {
                (Some(r#""default";q=1000000;w=1"#), Some("1000000/1000000000")) => "a",
                (Some(r#""default";q=90000000;w=60"#), Some("90000000/60000000000")) => "b",
                other => panic!("a response mixing policies: {other:?}"),
            }
        };
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let mut svc = layer.layer(echo_quota());
                std::thread::spawn(move || {
                    let (mut seen_a, mut seen_b) = (0u64, 0u64);
                    for _ in 0..5_000 {
                        let res = now(svc.call(Request::new(()))).unwrap();
                        assert_eq!(res.status(), StatusCode::OK);
                        match expected(&res) {
                            "a" => seen_a += 1,
                            _ => seen_b += 1,
                        }
                    }
                    (seen_a, seen_b)
                })
            })
            .collect();
        let (mut seen_a, mut seen_b) = (0, 0);
        for w in workers {
            let (x, y) = w.join().unwrap();
            seen_a += x;
            seen_b += y;
        }
        stop.store(true, Ordering::Relaxed);
        changer.join().unwrap();
        eprintln!(
            "{seen_a} responses under a, {seen_b} under b, {} changes",
            changes.load(Ordering::Relaxed)
        );
        assert_eq!(seen_a + seen_b, 20_000);
        assert!(
            seen_a > 0 && seen_b > 0,
            "the changes never raced a request"
        );
    }
}
