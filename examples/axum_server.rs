//! An axum server limited per client address: 30 requests a minute, in bursts of at most 5.
//!
//! ```sh
//! cargo run --release --features tower,axum --example axum_server              # serve on 127.0.0.1:3000
//! cargo run --release --features tower,axum --example axum_server -- --self-test  # drive itself, print each exchange
//! ```
//!
//! Served, it prints curl commands to try. With `--self-test` it serves on a free port, sends 7
//! requests as one client and 1 as another, prints each exchange, and exits non-zero unless the
//! first 5 are admitted, the next 2 refused with `Retry-After`, and the other client admitted.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::body::Bytes;
use axum::routing::get;
use axum::{Extension, Router};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tollgate::keyed::KeyedLimiter;
use tollgate::middleware::{peer_ip, LimitLayer, RateLimitInfo};
use tollgate::Quota;

type Error = Box<dyn std::error::Error + Send + Sync>;

fn app() -> Result<Router, Error> {
    let per_ip = KeyedLimiter::new(Quota::per_minute(30)?.with_capacity(5)?);
    let layer = LimitLayer::keyed(per_ip, peer_ip())
        .policy_name("per-ip")
        .exempt(|head| head.uri.path() == "/health")
        .build()?;
    Ok(Router::new()
        .route(
            "/",
            get(|Extension(info): Extension<RateLimitInfo>| async move {
                format!("hello: {} of your burst left\n", info.remaining())
            }),
        )
        .route("/health", get(|| async { "ok\n" }))
        .layer(layer))
}

async fn serve(listener: tokio::net::TcpListener, app: Router) -> Result<(), Error> {
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}

/// Sends `GET /` from `127.0.0.<host>` and prints the exchange; returns the status.
async fn exchange(addr: SocketAddr, host: u8) -> Result<u16, Error> {
    let mut connector = HttpConnector::new();
    connector.set_local_address(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, host))));
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let req = http::Request::get(format!("http://{addr}/")).body(Full::new(Bytes::new()))?;
    let res = client.request(req).await?;
    println!("> GET / from 127.0.0.{host}");
    println!("< {}", res.status());
    for name in ["retry-after", "ratelimit-policy", "ratelimit"] {
        for value in res.headers().get_all(name) {
            println!("< {name}: {}", value.to_str()?);
        }
    }
    let status = res.status().as_u16();
    let body = res.into_body().collect().await?.to_bytes();
    print!("{}", String::from_utf8_lossy(&body));
    println!();
    Ok(status)
}

async fn self_test() -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    let app = app()?;
    tokio::spawn(async move { serve(listener, app).await });
    let mut statuses = Vec::new();
    for _ in 0..7 {
        statuses.push(exchange(addr, 2).await?);
    }
    statuses.push(exchange(addr, 3).await?);
    let expected = [200, 200, 200, 200, 200, 429, 429, 200];
    if statuses != expected {
        return Err(format!("statuses {statuses:?}, expected {expected:?}").into());
    }
    println!("self-test passed: 5 admitted, 2 refused, the other client admitted");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    if std::env::args().any(|a| a == "--self-test") {
        return self_test().await;
    }
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 3000)).await?;
    println!("listening on http://127.0.0.1:3000 (30 requests a minute per address, bursts of 5)");
    println!("try:");
    println!("  curl -i http://127.0.0.1:3000/              # repeat: the 6th in a burst gets 429");
    println!("  for i in $(seq 7); do curl -s -o /dev/null -w '%{{http_code}}\\n' http://127.0.0.1:3000/; done");
    println!(
        "  curl -i --interface 127.0.0.2 http://127.0.0.1:3000/   # another client, its own limit"
    );
    println!("  curl -i http://127.0.0.1:3000/health        # exempt: never limited, no fields");
    serve(listener, app()?).await
}
