//! A tonic gRPC service limited per client address: 60 calls a minute, in bursts of at most 3. A
//! refused call ends with `RESOURCE_EXHAUSTED` (grpc-status 8) and a pushback: how long to wait.
//!
//! ```sh
//! cargo run --features tower,tonic --example grpc               # serve, call, print each call
//! cargo run --features tower,tonic --example grpc -- --self-test  # the same, checked
//! cargo run --features tower,tonic --example grpc -- --help
//! ```
//!
//! It serves `demo.Greeter/SayHello` on a free loopback port behind [`LimitLayer`] (with
//! [`Protocol::Grpc`]: every refusal in gRPC's way) and calls it with tonic's client: 4 calls
//! from 127.0.0.2, 1 from 127.0.0.3, then, after waiting the pushback the refusal named, 1 more
//! from 127.0.0.2. It prints each call's status and the limit's metadata. With `--self-test` it
//! exits non-zero unless the first 3 calls are admitted; the 4th is refused with
//! `RESOURCE_EXHAUSTED`, `grpc-retry-pushback-ms` of at most 1000 and `retry-after: 1`; the
//! other client is admitted; and the retry after the pushback is admitted.
//!
//! The service is written by hand, without protoc or generated code: a tower `Service` over HTTP
//! requests that hands `/demo.Greeter/SayHello` to tonic's unary handler with a small codec
//! (the messages are UTF-8 text, not protobuf). A generated service goes behind the layer the
//! same way: `Server::builder().layer(layer).add_service(GreeterServer::new(..))`.
//!
//! Exit codes: 0 on success, 1 when a call or a check fails, 2 on a bad command line.

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::process::ExitCode;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BufMut};
use http::uri::PathAndQuery;
use tollgate::keyed::KeyedLimiter;
use tollgate::middleware::{peer_ip, LimitLayer, Protocol, RateLimitInfo};
use tollgate::Quota;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Code, Status};

type Error = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "\
usage: grpc [--self-test]
       grpc --help

Serves a gRPC service on a free loopback port, limited per client address to 60 calls a minute
in bursts of at most 3, calls it with tonic's client and prints each call: admitted calls, and a
refused one with its status (RESOURCE_EXHAUSTED, grpc-status 8) and pushback.

options:
  --self-test  also check each call's answer; exit non-zero on any difference
  --help       print this and exit";

/// The service's name, as clients address it (`/<NAME>/<method>`).
const SERVICE: &str = "demo.Greeter";
/// The one method's path.
const SAY_HELLO: &str = "/demo.Greeter/SayHello";

/// 60 a minute (one call a second), at most 3 at once.
fn quota() -> Result<Quota, Error> {
    Ok(Quota::per_minute(60)?.with_capacity(3)?)
}

// --- the service, without generated code ---------------------------------------------------------

/// The messages' codec: a message is its UTF-8 text (protobuf needs generated code, or protoc).
#[derive(Debug, Clone, Copy, Default)]
struct TextCodec;

impl Codec for TextCodec {
    type Encode = String;
    type Decode = String;
    type Encoder = TextCodec;
    type Decoder = TextCodec;
    fn encoder(&mut self) -> TextCodec {
        TextCodec
    }
    fn decoder(&mut self) -> TextCodec {
        TextCodec
    }
}

impl Encoder for TextCodec {
    type Item = String;
    type Error = Status;
    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for TextCodec {
    type Item = String;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|_| Status::invalid_argument("the message is not UTF-8"))
    }
}

/// `SayHello`: answers `hello, <name>`, with the burst the layer says the caller has left.
struct SayHello;

impl tonic::server::UnaryService<String> for SayHello {
    type Response = String;
    type Future = std::future::Ready<Result<tonic::Response<String>, Status>>;
    fn call(&mut self, request: tonic::Request<String>) -> Self::Future {
        // The layer hands every request it admits a RateLimitInfo extension.
        let left = request
            .extensions()
            .get::<RateLimitInfo>()
            .map_or(0, RateLimitInfo::remaining);
        let name = request.into_inner();
        std::future::ready(Ok(tonic::Response::new(format!(
            "hello, {name} ({left} of your burst left)"
        ))))
    }
}

/// The service as tonic's router takes it: a tower service over HTTP requests, with a name.
#[derive(Debug, Clone, Copy)]
struct Greeter;

impl tonic::server::NamedService for Greeter {
    const NAME: &'static str = SERVICE;
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl tower::Service<http::Request<tonic::body::Body>> for Greeter {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            if req.uri().path() == SAY_HELLO {
                Ok(tonic::server::Grpc::new(TextCodec)
                    .unary(SayHello, req)
                    .await)
            } else {
                Ok(Status::unimplemented(format!("no method {}", req.uri().path())).into_http())
            }
        })
    }
}

// --- serving and calling -------------------------------------------------------------------------

/// Serves [`Greeter`] behind the limit on a free loopback port; returns the port's address.
async fn serve() -> Result<SocketAddr, Error> {
    let per_ip = KeyedLimiter::new(quota()?);
    // peer_ip() reads tonic's TcpConnectInfo (the crate's `tonic` feature). Protocol::Grpc: every
    // refusal is a gRPC status, whatever the request's content type (the default, Auto, decides
    // by the content type, for a server that also answers plain HTTP).
    let layer = LimitLayer::keyed(per_ip, peer_ip())
        .policy_name("per-ip")
        .protocol(Protocol::Grpc)
        .build()?;
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let served = Server::builder()
            .layer(layer)
            .add_service(Greeter)
            .serve_with_incoming(TcpIncoming::from(listener))
            .await;
        if let Err(e) = served {
            eprintln!("error: serving on {addr}: {e}");
        }
    });
    Ok(addr)
}

/// A channel to `addr` from the loopback address `127.0.0.<host>`: each host is a client of its
/// own to a limit keyed by address.
async fn connect(addr: SocketAddr, host: u8) -> Result<Channel, Error> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .local_address(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, host))))
        .timeout(Duration::from_secs(5))
        .connect()
        .await?)
}

/// What one call got.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Ok,
    /// The status code, `grpc-retry-pushback-ms` and `retry-after`, when sent.
    Refused(Code, Option<i64>, Option<u64>),
}

/// Calls `SayHello` on `channel` as `127.0.0.<host>` and prints the call; returns what it got.
async fn call(channel: &Channel, host: u8, name: &str) -> Result<Answer, Error> {
    let mut client = tonic::client::Grpc::new(channel.clone());
    client.ready().await?;
    println!("> {SAY_HELLO} {name:?} from 127.0.0.{host}");
    let answer = client
        .unary(
            tonic::Request::new(name.to_owned()),
            PathAndQuery::from_static(SAY_HELLO),
            TextCodec,
        )
        .await;
    let text = |v: &tonic::metadata::MetadataValue<tonic::metadata::Ascii>| {
        v.to_str().unwrap_or("<not text>").to_owned()
    };
    match answer {
        Ok(response) => {
            println!("< OK");
            for name in ["ratelimit-policy", "ratelimit"] {
                if let Some(v) = response.metadata().get(name) {
                    println!("< {name}: {}", text(v));
                }
            }
            println!("< {:?}", response.get_ref());
            println!();
            Ok(Answer::Ok)
        }
        Err(status) => {
            // A refusal is "trailers-only": HTTP 200 whose headers carry grpc-status (8,
            // RESOURCE_EXHAUSTED), grpc-message and the pushback; tonic turns them into a Status
            // with the headers as its metadata.
            println!(
                "< {:?} (grpc-status {}): {}",
                status.code(),
                i32::from(status.code()),
                status.message()
            );
            let meta = status.metadata();
            for name in [
                "grpc-retry-pushback-ms",
                "retry-after",
                "ratelimit-policy",
                "ratelimit",
            ] {
                if let Some(v) = meta.get(name) {
                    println!("< {name}: {}", text(v));
                }
            }
            println!();
            let pushback = meta
                .get("grpc-retry-pushback-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok());
            let retry_after = meta
                .get("retry-after")
                .and_then(|v| v.to_str().ok()?.parse().ok());
            Ok(Answer::Refused(status.code(), pushback, retry_after))
        }
    }
}

/// Serves, calls and prints; with `check`, returns an error unless every answer is the expected
/// one.
async fn run(check: bool) -> Result<(), Error> {
    let addr = serve().await?;
    let q = quota()?;
    println!(
        "serving {SERVICE} on http://{addr}: {} calls per {} s per client address, bursts of {}\n",
        q.count(),
        q.period().as_secs(),
        q.capacity()
    );
    let (alice, bob) = (connect(addr, 2).await?, connect(addr, 3).await?);
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.push(call(&alice, 2, "alice").await?);
    }
    answers.push(call(&bob, 3, "bob").await?);

    let mut failures = Vec::new();
    let refusal = &answers[3];
    if check {
        if answers[..3] != [Answer::Ok, Answer::Ok, Answer::Ok] {
            failures.push(format!("calls 1-3: {:?}, expected 3 Ok", &answers[..3]));
        }
        // The 4th call comes less than a second after the burst: its token is due within a
        // second, so the pushback is at most 1000 ms (whole seconds: 1000), and Retry-After 1.
        match refusal {
            Answer::Refused(Code::ResourceExhausted, Some(1..=1000), Some(1)) => {}
            other => failures.push(format!(
                "call 4: {other:?}, expected Refused(ResourceExhausted, Some(1..=1000), Some(1))"
            )),
        }
        if answers[4] != Answer::Ok {
            failures.push(format!(
                "127.0.0.3's call: {:?}, expected Ok (a limit of its own)",
                answers[4]
            ));
        }
    }

    // A client that honours the pushback (gRFC A6; tonic's client has no retry policy of its own)
    // waits that long and is admitted.
    let wait = match refusal {
        Answer::Refused(_, Some(ms), _) if (1..=60_000).contains(ms) => *ms as u64,
        _ => 1000,
    };
    println!("(waiting the pushback: {wait} ms)\n");
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let retry = call(&alice, 2, "alice").await?;
    if check && retry != Answer::Ok {
        failures.push(format!(
            "the retry after the pushback: {retry:?}, expected Ok"
        ));
    }

    if !failures.is_empty() {
        return Err(failures.join("; ").into());
    }
    if check {
        println!(
            "self-test passed: 3 admitted, the 4th refused with RESOURCE_EXHAUSTED and a \
             pushback, the other client admitted, the retry after the pushback admitted"
        );
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut self_test = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "--self-test" => self_test = true,
            _ => {
                eprintln!("error: unknown argument {arg:?}\n\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(run(self_test)),
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if self_test => {
            eprintln!("self-test failed: {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
