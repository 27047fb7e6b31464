//! An axum server limited per client address: by default 30 requests a minute, in bursts of at
//! most 5.
//!
//! ```sh
//! cargo run --release --features tower,axum --example axum_server              # serve on 127.0.0.1:3000
//! cargo run --release --features tower,axum --example axum_server -- --addr 0.0.0.0:8080 --quota 5/s
//! cargo run --release --features tower,axum --example axum_server -- --self-test  # drive itself, print each exchange
//! cargo run --release --features tower,axum --example axum_server -- --help
//! ```
//!
//! Served, it prints curl commands to try. With `--self-test` it serves on a free port, sends 7
//! requests as one client and 1 as another, prints each exchange, and exits non-zero unless the
//! first 5 are admitted, the next 2 refused with `Retry-After`, and the other client admitted; it
//! then checks that a busy address is reported as one line naming it.
//!
//! Exit codes: 0 on success, 1 when serving fails (a busy address, say), 2 on a bad command line.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;

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

const USAGE: &str = "\
usage: axum_server [--addr <ip:port>] [--quota <N>/<unit>]
       axum_server --self-test
       axum_server --help

An axum server limited per client address.

options:
  --addr <ip:port>    the address to listen on (default 127.0.0.1:3000)
  --quota <N>/<unit>  N requests per client address per unit: s, min, h or d (default 30/min),
                      in bursts of at most 5 (of N, when N is smaller)
  --self-test         serve on a free port, drive the server, check its answers and exit
                      (ignores --addr and --quota)
  --help              print this and exit";

/// The largest burst a client gets (the quota's count, when smaller).
const BURST: u64 = 5;

/// What the command line asks for.
enum Mode {
    Help,
    SelfTest,
    Serve { addr: SocketAddr, quota: Quota },
}

/// Reads the command line (without the program name); an error is one line naming the flag.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Mode, String> {
    let mut addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 3000));
    let mut quota = Quota::per_minute(30)
        .and_then(|q| q.with_capacity(BURST))
        .map_err(|e| e.to_string())?;
    let mut self_test = false;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => {
                (flag.to_owned(), Some(value.to_owned()))
            }
            _ => (arg.clone(), None),
        };
        let mut value = |form: &str| {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{flag} needs a value: {flag} {form}"))
        };
        match flag.as_str() {
            "--help" | "-h" if inline.is_none() => return Ok(Mode::Help),
            "--self-test" if inline.is_none() => self_test = true,
            "--addr" => {
                let v = value("<ip:port>")?;
                addr = v.parse().map_err(|_| {
                    format!("--addr: expected <ip:port>, e.g. 127.0.0.1:3000, got {v:?}")
                })?;
            }
            "--quota" => quota = parse_quota(&value("<N>/<unit>")?)?,
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    Ok(if self_test {
        Mode::SelfTest
    } else {
        Mode::Serve { addr, quota }
    })
}

/// `<N>/<unit>` (`5/s`, `100/min`, `1000/h`, `10000/d`), in bursts of at most [`BURST`].
fn parse_quota(v: &str) -> Result<Quota, String> {
    let bad = |why: &str| {
        format!("--quota: expected <N>/<unit> with N >= 1 and unit s, min, h or d (e.g. 5/s, 100/min), got {v:?}{why}")
    };
    let (count, unit) = v.split_once('/').ok_or_else(|| bad(""))?;
    let count: u64 = count.trim().parse().map_err(|_| bad(""))?;
    let quota = match unit.trim() {
        "s" => Quota::per_second(count),
        "min" => Quota::per_minute(count),
        "h" => Quota::per_hour(count),
        "d" => Quota::per_day(count),
        _ => return Err(bad("")),
    };
    quota
        .and_then(|q| q.with_capacity(count.min(BURST)))
        .map_err(|e| bad(&format!(": {e}")))
}

fn app(quota: Quota) -> Result<Router, Error> {
    let per_ip = KeyedLimiter::new(quota);
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

/// Listens on `addr` and serves `quota` per client address until stopped. A failure to listen is
/// one line naming the address.
async fn run(addr: SocketAddr, quota: Quota) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => format!(
                "cannot listen on {addr}: the address is already in use (choose another with --addr)"
            ),
            _ => format!("cannot listen on {addr}: {e}"),
        })?;
    let addr = listener.local_addr()?;
    let (count, unit) = (quota.count(), quota.period().as_secs());
    println!(
        "listening on http://{addr} ({count} requests per {unit} s per address, bursts of {})",
        quota.capacity()
    );
    println!("try:");
    println!("  curl -i http://{addr}/              # repeat: a burst's next request gets 429");
    println!(
        "  for i in $(seq 7); do curl -s -o /dev/null -w '%{{http_code}}\\n' http://{addr}/; done"
    );
    println!("  curl -i --interface 127.0.0.2 http://{addr}/   # another client, its own limit");
    println!("  curl -i http://{addr}/health        # exempt: never limited, no fields");
    serve(listener, app(quota)?).await
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
    let quota = Quota::per_minute(30)?.with_capacity(BURST)?;
    let app = app(quota)?;
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

    // The address the server above holds is busy: serving there again must fail at once, with
    // one line naming it.
    let err = match run(addr, quota).await {
        Ok(()) => return Err(format!("serving on the busy {addr} did not fail").into()),
        Err(e) => e.to_string(),
    };
    println!("> serve on the busy {addr}\n< error: {err}");
    if !err.contains(&addr.to_string()) || err.contains('\n') {
        return Err(format!("the error does not name {addr} on one line: {err:?}").into());
    }
    println!("self-test passed: a busy address is one line naming it");
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let (addr, quota) = match parse_args(std::env::args().skip(1)) {
        Ok(Mode::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(Mode::SelfTest) => {
            return match self_test().await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("self-test failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Ok(Mode::Serve { addr, quota }) => (addr, quota),
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(addr, quota).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
