//! The Redis backend against real servers on loopback: decisions per second and per-call latency
//! (p50, p99), with 1 and 64 calls in flight, on one hot key and on 10 000 keys, standalone and on
//! the cluster, beside two peers run the same way:
//!
//! - **`SET`**: one plain write per call, the floor any one-round-trip design pays;
//! - **WATCH/MULTI bucket**: a token bucket decided on the client and written with optimistic
//!   locking (`WATCH`, `GET`, `MULTI`, `SET`, `EXEC`, again on a conflict), the design Bucket4j uses;
//!   its retries per decision are reported.
//!
//! and a [`LeasedBucket`](tollgate::redis::LeasedBucket) with k = 100, whose admissions come from
//! a local stock (its round trips per admission are reported).
//!
//! ```sh
//! bash scripts/redis.sh start /tmp/tollgate-redis && source /tmp/tollgate-redis/env
//! cargo bench --features redis --bench redis            # about 40 s
//! cargo bench --features redis --bench redis -- --test  # smoke test: short rounds
//! ```
//!
//! Without `TOLLGATE_REDIS_URL` it prints how to start a server and exits. The cluster rows need
//! `TOLLGATE_REDIS_CLUSTER` as well (the WATCH peer runs on the standalone server only: it needs a
//! connection per caller, which the cluster client does not give). Round trips per decision are
//! counted by the server (`INFO commandstats`, standalone) and by the limiter (`stats()`).
//!
//! A call's latency is measured around the `await` of one call, so with 64 in flight it includes the
//! wait behind the other 63 on the same connection: the throughput column is the one to compare
//! there.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use tollgate::keyed::TokenBucketKeys;
use tollgate::redis::{FailurePolicy, RedisError, RedisLimiter};
use tollgate::Quota;

const KEYS: u64 = 10_000;

struct Row {
    name: String,
    calls: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
    note: String,
}

impl Row {
    fn print(&self) {
        let per_sec = self.calls as f64 / self.elapsed.as_secs_f64();
        println!(
            "| {} | {:.0} | {:.1} | {:.1} | {} |",
            self.name,
            per_sec,
            self.latency.value_at_quantile(0.5) as f64 / 1000.0,
            self.latency.value_at_quantile(0.99) as f64 / 1000.0,
            self.note
        );
    }
}

/// Runs `call(i)` from `in_flight` tasks for `run`, each call timed.
async fn drive<F, Fut>(in_flight: usize, run: Duration, call: F) -> (u64, Duration, Histogram<u64>)
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..in_flight {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new(3).expect("a histogram");
            let mut i = t as u64;
            let mut calls = 0;
            while start.elapsed() < run {
                let at = Instant::now();
                call(i).await;
                let _ = h.record(at.elapsed().as_nanos() as u64);
                i += in_flight as u64;
                calls += 1;
            }
            (calls, h)
        }));
    }
    let mut all = Histogram::<u64>::new(3).expect("a histogram");
    let mut calls = 0;
    for t in tasks {
        let (c, h) = t.await.expect("a bench task");
        calls += c;
        all.add(h).expect("histograms of one shape");
    }
    (calls, start.elapsed(), all)
}

fn key(i: u64, spread: bool) -> String {
    if spread {
        format!("k{}", i % KEYS)
    } else {
        "hot".to_owned()
    }
}

/// `INFO commandstats` calls of `command` on a standalone server.
async fn server_calls(conn: &mut ConnectionManager, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap_or_default();
    let head = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&head))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

async fn tollgate_row<C>(
    name: &str,
    conn: C,
    admin: Option<ConnectionManager>,
    in_flight: usize,
    spread: bool,
    run: Duration,
) -> Row
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    // Effectively unlimited: every call is a full decision that admits and writes.
    let quota = Quota::per_second(1_000_000_000).expect("a quota");
    let limiter = Arc::new(
        RedisLimiter::<TokenBucketKeys>::builder(conn, quota)
            .prefix(format!("bench-{}", std::process::id()))
            .timeout(Duration::from_secs(2))
            .build(FailurePolicy::Closed)
            .expect("a limiter"),
    );
    // Load the script outside the timed run.
    let _ = limiter.check_key("warm").await;
    let before = limiter.stats();
    let mut admin = admin;
    let server_before = match admin.as_mut() {
        Some(a) => Some(server_calls(a, "evalsha").await),
        None => None,
    };
    let l = limiter.clone();
    let (calls, elapsed, latency) = drive(in_flight, run, move |i| {
        let l = l.clone();
        async move {
            match l.check_key(key(i, spread)).await {
                Ok(_) | Err(RedisError::Denied(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await;
    let after = limiter.stats();
    let decisions = after.decisions - before.decisions;
    let mut note = format!(
        "{:.2} round trips per decision (client)",
        (after.round_trips - before.round_trips) as f64 / decisions as f64
    );
    if let (Some(a), Some(b)) = (admin.as_mut(), server_before) {
        let server = server_calls(a, "evalsha").await - b;
        note += &format!(
            ", {:.2} EVALSHA per decision (server)",
            server as f64 / decisions as f64
        );
    }
    Row {
        name: format!(
            "tollgate, {name}, {} key{}, {in_flight} in flight",
            if spread { "10 000" } else { "1 hot" },
            if spread { "s" } else { "" }
        ),
        calls,
        elapsed,
        latency,
        note,
    }
}

async fn set_row<C>(name: &str, conn: C, in_flight: usize, spread: bool, run: Duration) -> Row
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let prefix = format!("bench-set-{}", std::process::id());
    let (calls, elapsed, latency) = drive(in_flight, run, move |i| {
        let mut c = conn.clone();
        let k = format!("{prefix}:{{{}}}", key(i, spread));
        async move {
            let _: () = redis::cmd("SET")
                .arg(k)
                .arg(i)
                .query_async(&mut c)
                .await
                .expect("SET");
        }
    })
    .await;
    Row {
        name: format!(
            "`SET` (floor), {name}, {} key{}, {in_flight} in flight",
            if spread { "10 000" } else { "1 hot" },
            if spread { "s" } else { "" }
        ),
        calls,
        elapsed,
        latency,
        note: "1 round trip".into(),
    }
}

/// One decision of a client-side token bucket with optimistic locking: WATCH, GET, decide, MULTI,
/// SET, EXEC; again when EXEC finds the key changed. Answers the retries it needed.
async fn cas_take(conn: &mut MultiplexedConnection, key: &str) -> u64 {
    let mut retries = 0;
    loop {
        let _: () = redis::cmd("WATCH")
            .arg(key)
            .query_async(conn)
            .await
            .expect("WATCH");
        let state: Option<String> = redis::cmd("GET")
            .arg(key)
            .query_async(conn)
            .await
            .expect("GET");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        // tokens and the time they were counted at; refill at 10^9 a second (never empty).
        let tokens = state
            .and_then(|s| s.split_once(':').and_then(|(t, _)| t.parse::<u64>().ok()))
            .unwrap_or(1_000);
        let tokens = tokens.saturating_sub(1).max(999);
        let result: Option<()> = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(key)
            .arg(format!("{tokens}:{now}"))
            .ignore()
            .query_async(conn)
            .await
            .expect("MULTI/EXEC");
        if result.is_some() {
            return retries;
        }
        retries += 1;
    }
}

async fn cas_row(url: &str, in_flight: usize, spread: bool, run: Duration) -> Row {
    let client = redis::Client::open(url).expect("a client");
    // WATCH holds per connection: each caller needs its own.
    let mut conns = Vec::new();
    for _ in 0..in_flight {
        conns.push(
            client
                .get_multiplexed_async_connection()
                .await
                .expect("a connection"),
        );
    }
    let prefix = format!("bench-cas-{}", std::process::id());
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (t, mut conn) in conns.into_iter().enumerate() {
        let prefix = prefix.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new(3).expect("a histogram");
            let (mut calls, mut retries) = (0u64, 0u64);
            let mut i = t as u64;
            while start.elapsed() < run {
                let at = Instant::now();
                retries += cas_take(&mut conn, &format!("{prefix}:{}", key(i, spread))).await;
                let _ = h.record(at.elapsed().as_nanos() as u64);
                calls += 1;
                i += in_flight as u64;
            }
            (calls, retries, h)
        }));
    }
    let mut latency = Histogram::<u64>::new(3).expect("a histogram");
    let (mut calls, mut retries) = (0, 0);
    for t in tasks {
        let (c, r, h) = t.await.expect("a bench task");
        calls += c;
        retries += r;
        latency.add(h).expect("histograms of one shape");
    }
    Row {
        name: format!(
            "WATCH/MULTI bucket, standalone, {} key{}, {in_flight} in flight",
            if spread { "10 000" } else { "1 hot" },
            if spread { "s" } else { "" }
        ),
        calls,
        elapsed: start.elapsed(),
        latency,
        note: format!(
            "{:.2} retries per decision, 5 + 5 x retries commands",
            retries as f64 / calls.max(1) as f64
        ),
    }
}

/// A [`LeasedBucket`](tollgate::redis::LeasedBucket) (k = 100) on one hot key: admissions from the
/// local stock, a lease per ~100 of them.
async fn leased_row(conn: ConnectionManager, in_flight: usize, run: Duration) -> Row {
    let quota = Quota::per_second(1_000_000_000)
        .and_then(|q| q.with_capacity(1_000_000))
        .expect("a quota");
    let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, quota)
        .prefix(format!("bench-leased-{}", std::process::id()))
        .timeout(Duration::from_secs(2))
        .build(FailurePolicy::Closed)
        .expect("a limiter");
    let bucket = Arc::new(
        tollgate::redis::LeasedBucket::builder(Arc::new(limiter), "hot")
            .batch(100)
            .build()
            .expect("a leased bucket"),
    );
    let _ = bucket.acquire().await;
    let before = bucket.stats();
    // Admissions only: a call that finds the stock empty yields (the lease task runs) and is
    // neither counted nor timed, so the rate is admissions per second and the latency is an
    // admission's.
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..in_flight {
        let b = bucket.clone();
        tasks.push(tokio::spawn(async move {
            let mut h = Histogram::<u64>::new(3).expect("a histogram");
            let mut admitted = 0u64;
            while start.elapsed() < run {
                let at = Instant::now();
                if b.try_acquire().is_ok() {
                    let _ = h.record(at.elapsed().as_nanos() as u64);
                    admitted += 1;
                } else {
                    tokio::task::yield_now().await;
                }
            }
            (admitted, h)
        }));
    }
    let mut latency = Histogram::<u64>::new(3).expect("a histogram");
    let mut calls = 0;
    for t in tasks {
        let (c, h) = t.await.expect("a bench task");
        calls += c;
        latency.add(h).expect("histograms of one shape");
    }
    let elapsed = start.elapsed();
    let after = bucket.stats();
    let admitted = after.admitted - before.admitted;
    Row {
        name: format!("LeasedBucket k = 100, standalone, 1 hot key, {in_flight} in flight"),
        calls,
        elapsed,
        latency,
        note: format!(
            "admissions/s and an admission's latency; {:.4} round trips per admission",
            (after.leases - before.leases) as f64 / admitted.max(1) as f64,
        ),
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--test");
    let run = if quick {
        Duration::from_millis(200)
    } else {
        Duration::from_secs(2)
    };
    let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else {
        println!("SKIPPED: no Redis. Start servers with:");
        println!(
            "  bash scripts/redis.sh start /tmp/tollgate-redis && source /tmp/tollgate-redis/env"
        );
        return;
    };
    let cluster: Option<Vec<String>> = std::env::var("TOLLGATE_REDIS_CLUSTER")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let client = redis::Client::open(url.as_str()).expect("a client");
        let conn = client.get_connection_manager().await.expect("a connection");
        let cluster_conn = match &cluster {
            Some(nodes) => Some(
                redis::cluster::ClusterClient::new(nodes.clone())
                    .expect("a cluster client")
                    .get_async_connection()
                    .await
                    .expect("a cluster connection"),
            ),
            None => None,
        };
        println!("| what | decisions/s | p50 µs | p99 µs | notes |");
        println!("| --- | ---: | ---: | ---: | --- |");
        for in_flight in [1, 64] {
            for spread in [false, true] {
                set_row("standalone", conn.clone(), in_flight, spread, run)
                    .await
                    .print();
                tollgate_row(
                    "standalone",
                    conn.clone(),
                    Some(conn.clone()),
                    in_flight,
                    spread,
                    run,
                )
                .await
                .print();
                cas_row(&url, in_flight, spread, run).await.print();
                if let Some(c) = &cluster_conn {
                    set_row("cluster", c.clone(), in_flight, spread, run)
                        .await
                        .print();
                    tollgate_row("cluster", c.clone(), None, in_flight, spread, run)
                        .await
                        .print();
                }
            }
            leased_row(conn.clone(), in_flight, run).await.print();
        }
    });
}
