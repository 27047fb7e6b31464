//! One limit per client across every process serving an axum service: the layer's Redis backend
//! keeps each client's bucket in Redis, so three processes together admit the quota, not three
//! times it. Then what the failure policy answers once Redis is gone.
//!
//! ```sh
//! bash scripts/redis.sh start /tmp/tollgate-redis && source /tmp/tollgate-redis/env
//! cargo run --features redis,tower,axum --example redis_shared                # three copies, checked
//! cargo run --features redis,tower,axum --example redis_shared -- --self-test  # the same, or SKIPPED
//! cargo run --features redis,tower,axum --example redis_shared -- --serve --port 3001 --name A
//! cargo run --features redis,tower,axum --example redis_shared -- --help
//! bash scripts/redis.sh stop /tmp/tollgate-redis
//! ```
//!
//! Without `--serve` it starts three copies of itself (`--serve`, each on a free loopback port)
//! sharing the Redis server at `TOLLGATE_REDIS_URL` (or, when that is not set, a `redis-server`
//! of its own on a free loopback port), sends 15 requests for one client round-robin across them,
//! prints each exchange and checks that exactly 5 are admitted in all: the quota, 5 a minute per
//! client, where three in-process limits would have admitted 15. Then it starts a fourth copy
//! on a private `redis-server`, kills that server, and checks that the failure policy,
//! `FailurePolicy::Closed`, shows in the responses: 503 with `Retry-After: 1`, where the same
//! requests got 200 while the server ran (with no `redis-server` to start, the fourth copy's
//! Redis is a port nothing listens on, and only the 503s are shown).
//!
//! With `--self-test`, the same; but with neither `TOLLGATE_REDIS_URL` nor a `redis-server` to
//! start it prints `SKIPPED` and exits 0, unless `TOLLGATE_REQUIRE_REDIS=1` (the test script's
//! redis step sets it), which makes that a failure (without `--self-test` it says how to start a
//! server and exits 1).
//!
//! Exit codes: 0 on success (or SKIPPED), 1 when a check or the setup fails, 2 on a bad command
//! line.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::routing::get;
use axum::{Extension, Router};
use http::{HeaderName, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use tollgate::keyed::{KeyedLimiter, TokenBucketKeys};
use tollgate::middleware::{header, LimitLayer, RateLimitInfo, Redis};
use tollgate::redis::client::aio::ConnectionManagerConfig;
use tollgate::redis::{FailurePolicy, RedisLimiter};
use tollgate::Quota;

type Error = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "\
usage: redis_shared [--self-test]
       redis_shared --serve [--port <port>] [--name <name>] [--redis <url>] [--policy <policy>]
       redis_shared --help

An axum service limited per client (the x-client-id header) to 5 requests a minute, the limit
shared through Redis by every process serving it.

Without --serve: starts three copies of itself with --serve on free loopback ports, sends 15
requests for one client across them, prints each exchange and checks that 5 are admitted in all
(the quota, not three times it); then starts a fourth copy on a redis-server of its own, kills
that server, and checks that the failure policy (closed: 503 with Retry-After) shows in the
responses. The shared server is TOLLGATE_REDIS_URL (scripts/redis.sh sets it); when that is not
set, a redis-server of its own (TOLLGATE_REDIS_SERVER, else redis-server on PATH) on a free
loopback port.

options:
  --self-test           as without it, but with no Redis server and no redis-server to start,
                        print SKIPPED and exit 0 (1 when TOLLGATE_REQUIRE_REDIS=1)
  --serve               serve one copy until stopped
  --port <port>         with --serve: the loopback port to listen on (default 0: a free one,
                        printed)
  --name <name>         with --serve: the name its responses carry (default server)
  --redis <url>         with --serve: the Redis server (default TOLLGATE_REDIS_URL, else
                        redis://127.0.0.1:6379/)
  --policy <policy>     with --serve: the answer when Redis cannot decide: closed (503, the
                        default), open (admit) or local (1 a minute per process, in process)
  --until-stdin-closes  with --serve: exit once standard input is closed (how the copies the
                        self-test starts end with it)
  --help                print this and exit";

/// The request header the limit is keyed by.
const CLIENT_HEADER: &str = "x-client-id";
/// The first part of the Redis keys (`tollgate-example-shared:{client}:tb`).
const PREFIX: &str = "tollgate-example-shared";
/// Requests per client per minute, across every process (also the burst).
const PER_MINUTE: u64 = 5;
/// The processes sharing the limit.
const COPIES: [&str; 3] = ["A", "B", "C"];
/// Requests the self-test sends for its client, round-robin across the copies.
const REQUESTS: usize = 15;

fn quota() -> Result<Quota, Error> {
    Ok(Quota::per_minute(PER_MINUTE)?)
}

// --- one copy: --serve ---------------------------------------------------------------------------

/// What a copy answers when Redis cannot decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Closed,
    Open,
    Local,
}

impl Policy {
    fn parse(v: &str) -> Result<Policy, String> {
        match v {
            "closed" => Ok(Policy::Closed),
            "open" => Ok(Policy::Open),
            "local" => Ok(Policy::Local),
            _ => Err(format!(
                "--policy: expected closed, open or local, got {v:?}"
            )),
        }
    }

    fn arg(self) -> &'static str {
        match self {
            Policy::Closed => "closed",
            Policy::Open => "open",
            Policy::Local => "local",
        }
    }

    fn failure_policy(self) -> Result<FailurePolicy, Error> {
        Ok(match self {
            // 503 (the layer's `unavailable` status) while Redis is away: the limit holds, the
            // service does not.
            Policy::Closed => FailurePolicy::Closed,
            // Admitted while Redis is away (counted in `stats().open_admissions`): the service
            // holds, the limit does not.
            Policy::Open => FailurePolicy::Open,
            // Each process decides alone while Redis is away, with its share of the quota
            // (5 over 3 processes, rounded down: 1 a minute), so together they admit no more.
            Policy::Local => FailurePolicy::Local(KeyedLimiter::new(Quota::per_minute(
                (PER_MINUTE / COPIES.len() as u64).max(1),
            )?)),
        })
    }
}

#[derive(Debug)]
struct ServeOptions {
    port: u16,
    name: String,
    redis: String,
    policy: Policy,
    until_stdin_closes: bool,
}

/// Serves one copy on `127.0.0.1:<port>` until stopped. Prints one line once it listens: the
/// address first (`<name> listening on http://<addr> ...`), which the self-test reads.
async fn serve(opts: ServeOptions) -> Result<(), Error> {
    if opts.until_stdin_closes {
        // The self-test holds this copy's standard input: when it ends (or dies), so does this.
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            std::process::exit(0);
        });
    }
    // Lazy: the connection is made on the first decision, so a copy starts (and its failure
    // policy answers) even while Redis is away.
    let conn = tollgate::redis::client::Client::open(opts.redis.as_str())?
        .get_connection_manager_lazy(ConnectionManagerConfig::new())?;
    let failure = opts.policy.failure_policy()?;
    let failure_text = format!("{failure:?}");
    let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, quota()?)
        .prefix(PREFIX)
        // 250 ms, not the default 50 ms: the self-test runs beside builds on small machines,
        // where a call that timed out would answer with the failure policy.
        .timeout(Duration::from_millis(250))
        .build(failure)?;
    let limiter = Arc::new(limiter);

    // Connect and load the script before the first request, with a peek (which takes nothing).
    let _ = limiter.peek_key_n("warm-up", 1).await;
    let redis_state = if limiter.stats().failures == 0 {
        "answers"
    } else {
        "does not answer yet"
    };

    let layer = LimitLayer::new(
        Redis::new(Arc::clone(&limiter)),
        header(HeaderName::from_static(CLIENT_HEADER)),
    )
    .policy_name("per-client")
    // While Redis cannot decide (FailurePolicy::Closed): 503, and ask clients to come back in a
    // second.
    .unavailable(
        StatusCode::SERVICE_UNAVAILABLE,
        Some(Duration::from_secs(1)),
    )
    .build()?;
    let name = opts.name.clone();
    let app = Router::new()
        .route(
            "/",
            get(
                move |Extension(info): Extension<RateLimitInfo>| async move {
                    format!("served by {name}: {} left for you\n", info.remaining())
                },
            ),
        )
        .layer(layer);

    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, opts.port))
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e}", opts.port))?;
    let addr = listener.local_addr()?;
    println!(
        "{} listening on http://{addr} (pid {}; Redis {} {redis_state}; failure policy {failure_text})",
        opts.name,
        std::process::id(),
        opts.redis,
    );
    if !opts.until_stdin_closes {
        // Started by hand: a request to try (several copies on one Redis share its limit).
        println!("try: curl -i -H '{CLIENT_HEADER}: alice' http://{addr}/");
    }
    axum::serve(listener, app).await?;
    Ok(())
}

// --- the self-test's processes -------------------------------------------------------------------

/// A copy of this example serving with `--serve`, stopped (killed) on drop.
struct Replica {
    name: String,
    addr: SocketAddr,
    child: Child,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a copy named `name` on a free loopback port, with `redis` and `policy`; returns once it
/// listens, having printed its first line.
fn start_copy(name: &str, redis: &str, policy: Policy) -> Result<Replica, Error> {
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe)
        .args(["--serve", "--port", "0", "--name", name, "--redis", redis])
        .args(["--policy", policy.arg(), "--until-stdin-closes"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("the copy's standard output")?;
    // The first line is the address; later lines (none are expected) are passed on, marked. A
    // thread, so that a copy that never prints cannot hang the self-test past the timeout.
    let (tx, rx) = std::sync::mpsc::channel();
    let tag = name.to_owned();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next());
        for line in lines.map_while(Result::ok) {
            println!("[{tag}] {line}");
        }
    });
    let mut copy = Replica {
        name: name.to_owned(),
        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        child,
    };
    let line = match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(Some(Ok(line))) => line,
        Ok(_) => {
            let status = copy.child.wait()?;
            return Err(format!("copy {name} exited before listening ({status})").into());
        }
        Err(_) => return Err(format!("copy {name} did not listen within 30 s").into()),
    };
    println!("{line}");
    copy.addr = line
        .split_once("http://")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("copy {name}: no address in {line:?}"))?;
    Ok(copy)
}

/// A `redis-server` of this run's own on a free loopback port, killed on drop.
struct OwnRedis {
    child: Child,
    port: u16,
}

impl OwnRedis {
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts `server` on a free loopback port; returns once it accepts connections.
    fn start(server: &Path) -> Result<OwnRedis, Error> {
        for _ in 0..5 {
            // A port free a moment ago; another program may take it first, so retry.
            let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port();
            let child = Command::new(server)
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .arg("--dir")
                .arg(std::env::temp_dir())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start {}: {e}", server.display()))?;
            let mut own = OwnRedis { child, port };
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if own.child.try_wait()?.is_some() {
                    break; // exited: the port was taken; try another
                }
                if std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_ok() {
                    return Ok(own);
                }
                if Instant::now() > deadline {
                    return Err(
                        format!("redis-server on port {port} did not answer in 10 s").into(),
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Err("redis-server did not start on a free port in 5 tries".into())
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment variable `name`, unless it is unset or empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `TOLLGATE_REDIS_SERVER` (scripts/redis.sh sets it), else `redis-server` on `PATH`.
fn redis_server_binary() -> Option<PathBuf> {
    if let Some(path) = env("TOLLGATE_REDIS_SERVER") {
        return Some(PathBuf::from(path));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
}

/// True when the server at `url` answers `PING` within 2 s.
async fn answers(url: &str) -> bool {
    let ping = async {
        let client = tollgate::redis::client::Client::open(url).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        tollgate::redis::client::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), ping).await,
        Ok(Some(_))
    )
}

// --- requests ------------------------------------------------------------------------------------

type Http = HttpClient<HttpConnector, Full<Bytes>>;

/// One exchange: the status and `Retry-After`.
#[derive(Debug)]
struct Reply {
    status: u16,
    retry_after: Option<String>,
}

/// Sends `GET /` for `client` to `copy` and prints the exchange.
async fn exchange(http: &Http, copy: &Replica, client: &str) -> Result<Reply, Error> {
    let req = http::Request::get(format!("http://{}/", copy.addr))
        .header(CLIENT_HEADER, client)
        .body(Full::new(Bytes::new()))?;
    let res = tokio::time::timeout(Duration::from_secs(10), http.request(req))
        .await
        .map_err(|_| format!("copy {} did not answer within 10 s", copy.name))??;
    println!("> GET / to {} ({CLIENT_HEADER}: {client})", copy.name);
    println!("< {}", res.status());
    for name in ["retry-after", "ratelimit-policy", "ratelimit"] {
        for value in res.headers().get_all(name) {
            println!("< {name}: {}", value.to_str()?);
        }
    }
    let status = res.status().as_u16();
    let retry_after = res
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = res.into_body().collect().await?.to_bytes();
    print!("{}", String::from_utf8_lossy(&body));
    println!();
    Ok(Reply {
        status,
        retry_after,
    })
}

/// How the run ended, when nothing failed.
enum Outcome {
    Passed,
    /// No Redis server to share the limit through, and none to start: why.
    Skipped(String),
}

async fn run() -> Result<Outcome, Error> {
    let server = redis_server_binary();
    // The shared server: the test script's, else one of this run's own.
    let (shared, _own) = match env("TOLLGATE_REDIS_URL") {
        Some(url) => {
            if !answers(&url).await {
                return Err(format!("TOLLGATE_REDIS_URL={url} does not answer PING").into());
            }
            (url, None)
        }
        None => match &server {
            Some(server) => {
                let own = OwnRedis::start(server)?;
                println!(
                    "TOLLGATE_REDIS_URL is not set: started {} on {} for this run",
                    server.display(),
                    own.url()
                );
                (own.url(), Some(own))
            }
            None => {
                return Ok(Outcome::Skipped(
                    "TOLLGATE_REDIS_URL is not set and there is no redis-server to start \
                     (TOLLGATE_REDIS_SERVER, or on PATH)"
                        .into(),
                ))
            }
        },
    };
    let http: Http = HttpClient::builder(TokioExecutor::new()).build_http();
    let mut failures = Vec::new();

    // 1. Three processes, one limit per client.
    println!(
        "\n== three processes, one limit: {PER_MINUTE} a minute per client, through Redis at {shared} ==\n"
    );
    let copies = COPIES
        .iter()
        .map(|name| start_copy(name, &shared, Policy::Closed))
        .collect::<Result<Vec<_>, _>>()?;
    println!();
    // A client of this run's own, so that a second run (or another test on the same server)
    // starts from a full bucket.
    let since_epoch = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis();
    let client = format!("client-{}-{since_epoch}", std::process::id());
    let mut admitted = [0u64; COPIES.len()];
    let mut refused = Vec::new();
    for i in 0..REQUESTS {
        let copy = i % copies.len();
        let reply = exchange(&http, &copies[copy], &client).await?;
        match reply.status {
            200 => admitted[copy] += 1,
            _ => refused.push(reply),
        }
    }
    let total: u64 = admitted.iter().sum();
    let per_copy: Vec<String> = COPIES
        .iter()
        .zip(admitted)
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    println!(
        "together: {total} of {REQUESTS} admitted ({}), {} refused; the quota is {PER_MINUTE}, \
         where three in-process limits would have admitted {}",
        per_copy.join(", "),
        refused.len(),
        COPIES.len() as u64 * PER_MINUTE
    );
    if total != PER_MINUTE {
        failures.push(format!(
            "{total} admitted across the copies, expected {PER_MINUTE} (the quota)"
        ));
    }
    if let Some(bad) = refused
        .iter()
        .find(|r| r.status != 429 || r.retry_after.is_none())
    {
        failures.push(format!(
            "a refusal was {bad:?}, expected 429 with Retry-After"
        ));
    }
    if admitted.contains(&0) {
        failures.push(format!(
            "a copy admitted nothing ({}): the requests did not reach all three",
            per_copy.join(", ")
        ));
    }
    // Another client is not held back by the first one's limit.
    println!();
    let other = exchange(&http, &copies[2], &format!("{client}-other")).await?;
    if other.status != 200 {
        failures.push(format!("another client got {}, expected 200", other.status));
    }
    drop(copies);

    // 2. The failure policy, on a server of its own that this run kills (never the shared one).
    println!("\n== the failure policy (Closed) with Redis gone ==\n");
    let own = match &server {
        Some(server) => Some(OwnRedis::start(server)?),
        None => None,
    };
    let url = match &own {
        Some(own) => own.url(),
        // No redis-server to start and stop: a port nothing listens on.
        None => {
            let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
                .local_addr()?
                .port();
            format!("redis://127.0.0.1:{port}/")
        }
    };
    let copy = start_copy("D", &url, Policy::Closed)?;
    println!();
    let mut statuses = Vec::new();
    let mut expected = Vec::new();
    if let Some(own) = own {
        for _ in 0..2 {
            statuses.push(exchange(&http, &copy, &client).await?);
            expected.push(200);
        }
        let pid = own.child.id();
        drop(own);
        println!("(killed redis-server {url}, pid {pid})\n");
    } else {
        println!("(no redis-server to start: D's Redis, {url}, is a port nothing listens on)\n");
    }
    for _ in 0..2 {
        statuses.push(exchange(&http, &copy, &client).await?);
        expected.push(503);
    }
    let got: Vec<u16> = statuses.iter().map(|r| r.status).collect();
    println!(
        "statuses {got:?}: with Redis gone, FailurePolicy::Closed answers 503 with Retry-After"
    );
    if got != expected {
        failures.push(format!(
            "with a Redis server killed, statuses {got:?}, expected {expected:?}"
        ));
    }
    if let Some(bad) = statuses
        .iter()
        .find(|r| r.status == 503 && r.retry_after.as_deref() != Some("1"))
    {
        failures.push(format!("a 503 was {bad:?}, expected Retry-After: 1"));
    }

    if failures.is_empty() {
        println!(
            "\nself-test passed: {PER_MINUTE} of {REQUESTS} admitted across three processes \
             (the quota, not three times it); with Redis gone, 503 with Retry-After"
        );
        Ok(Outcome::Passed)
    } else {
        Err(failures.join("; ").into())
    }
}

// --- the command line ----------------------------------------------------------------------------

enum Mode {
    Help,
    Run { self_test: bool },
    Serve(ServeOptions),
}

/// Reads the command line (without the program name); an error is one line naming the flag.
fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Mode, String> {
    let mut opts = ServeOptions {
        port: 0,
        name: "server".to_owned(),
        redis: env("TOLLGATE_REDIS_URL").unwrap_or_else(|| "redis://127.0.0.1:6379/".to_owned()),
        policy: Policy::Closed,
        until_stdin_closes: false,
    };
    let (mut self_test, mut serve) = (false, false);
    let mut serve_only = None;
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
            "--serve" if inline.is_none() => serve = true,
            "--until-stdin-closes" if inline.is_none() => {
                opts.until_stdin_closes = true;
                serve_only = Some(flag.clone());
            }
            "--port" => {
                let v = value("<port>")?;
                opts.port = v
                    .parse()
                    .map_err(|_| format!("--port: expected a port (0-65535), got {v:?}"))?;
                serve_only = Some(flag.clone());
            }
            "--name" => {
                opts.name = value("<name>")?;
                serve_only = Some(flag.clone());
            }
            "--redis" => {
                opts.redis = value("<url>")?;
                serve_only = Some(flag.clone());
            }
            "--policy" => {
                opts.policy = Policy::parse(&value("closed|open|local")?)?;
                serve_only = Some(flag.clone());
            }
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    match (serve, self_test, serve_only) {
        (true, true, _) => Err("--serve and --self-test exclude each other".into()),
        (true, false, _) => Ok(Mode::Serve(opts)),
        (false, _, Some(flag)) => Err(format!("{flag} goes with --serve")),
        (false, self_test, None) => Ok(Mode::Run { self_test }),
    }
}

/// Runs `fut` to its end on a current-thread runtime.
fn block_on<T>(fut: impl std::future::Future<Output = Result<T, Error>>) -> Result<T, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(fut)
}

fn main() -> ExitCode {
    match parse_args(std::env::args().skip(1)) {
        Ok(Mode::Help) => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Ok(Mode::Serve(opts)) => match block_on(serve(opts)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Ok(Mode::Run { self_test }) => match block_on(run()) {
            Ok(Outcome::Passed) => ExitCode::SUCCESS,
            // The test script's redis step sets TOLLGATE_REQUIRE_REDIS=1, as for the Redis
            // tests: there a skip is a failure.
            Ok(Outcome::Skipped(why))
                if self_test && env("TOLLGATE_REQUIRE_REDIS").as_deref() == Some("1") =>
            {
                eprintln!("self-test failed: {why}, and TOLLGATE_REQUIRE_REDIS=1");
                ExitCode::FAILURE
            }
            Ok(Outcome::Skipped(why)) if self_test => {
                println!("SKIPPED: {why}");
                ExitCode::SUCCESS
            }
            Ok(Outcome::Skipped(why)) => {
                eprintln!("No Redis server to share the limit through ({why}). Start one:");
                eprintln!();
                eprintln!(
                    "  bash scripts/redis.sh start /tmp/tollgate-redis && source /tmp/tollgate-redis/env"
                );
                eprintln!("  cargo run --features redis,tower,axum --example redis_shared");
                eprintln!("  bash scripts/redis.sh stop /tmp/tollgate-redis");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!(
                    "{}: {e}",
                    if self_test {
                        "self-test failed"
                    } else {
                        "error"
                    }
                );
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
