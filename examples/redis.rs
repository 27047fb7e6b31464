//! Two processes, one limit: each child process checks the same key through Redis, and together
//! they admit no more than one process alone would.
//!
//! ```sh
//! bash scripts/redis.sh start /tmp/tollgate-redis && source /tmp/tollgate-redis/env
//! cargo run --release --features redis --example redis
//! bash scripts/redis.sh stop /tmp/tollgate-redis
//! ```
//!
//! Without `TOLLGATE_REDIS_URL` (or with a server that does not answer) it says how to start one.

use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use tollgate::keyed::TokenBucketKeys;
use tollgate::redis::{FailurePolicy, RedisError, RedisLimiter};
use tollgate::Quota;

/// 5 at once, then 10 a second, for the key both children share.
fn quota() -> Quota {
    Quota::per_second(10)
        .and_then(|q| q.with_capacity(5))
        .expect("a valid quota")
}

const RUN: Duration = Duration::from_secs(2);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else {
        return no_server("TOLLGATE_REDIS_URL is not set");
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match args.get(1).map(String::as_str) {
        Some("child") => runtime.block_on(child(&url, &args[2], &args[3])),
        _ => runtime.block_on(parent(&url)),
    }
}

fn no_server(why: &str) -> ExitCode {
    eprintln!("No Redis server to share the limit through ({why}). Start one, then run again:");
    eprintln!();
    eprintln!(
        "  bash scripts/redis.sh start /tmp/tollgate-redis && source /tmp/tollgate-redis/env"
    );
    eprintln!("  cargo run --release --features redis --example redis");
    eprintln!("  bash scripts/redis.sh stop /tmp/tollgate-redis");
    eprintln!();
    eprintln!("(or any Redis 7 server: TOLLGATE_REDIS_URL=redis://127.0.0.1:6379/)");
    ExitCode::FAILURE
}

async fn parent(url: &str) -> ExitCode {
    // Check the server first, so that a missing one gets the instructions, not a child's error.
    let reachable = async {
        let client = redis::Client::open(url).ok()?;
        let mut conn = client.get_multiplexed_async_connection().await.ok()?;
        redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .ok()
    };
    if tokio::time::timeout(Duration::from_secs(2), reachable)
        .await
        .ok()
        .flatten()
        .is_none()
    {
        return no_server(&format!("{url} does not answer"));
    }
    let exe = std::env::current_exe().expect("the example's own path");
    // A key of this run's own, so that a second run starts from a full bucket.
    let key = format!("example-{}", std::process::id());
    println!(
        "two processes share \"{key}\": {} at once, then {} a second, for {:?}",
        quota().capacity(),
        quota().count(),
        RUN
    );
    let children: Vec<_> = ["A", "B"]
        .iter()
        .map(|name| {
            Command::new(&exe)
                .args(["child", name, &key])
                .stdout(Stdio::piped())
                .spawn()
                .expect("a child process")
        })
        .collect();
    let mut total = 0u64;
    for child in children {
        let out = child.wait_with_output().expect("the child's output");
        let text = String::from_utf8_lossy(&out.stdout);
        print!("{text}");
        total += text
            .lines()
            .filter_map(|l| l.strip_prefix("admitted: "))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .sum::<u64>();
    }
    let bound = quota().capacity() + quota().count() * RUN.as_secs() + 1;
    println!("together: {total} admitted; one process alone may have {bound} at most (C + R x t)");
    if total <= bound {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

async fn child(url: &str, name: &str, key: &str) -> ExitCode {
    let conn = match redis::Client::open(url) {
        Ok(client) => match client.get_connection_manager().await {
            Ok(conn) => conn,
            Err(e) => return no_server(&e.to_string()),
        },
        Err(e) => return no_server(&e.to_string()),
    };
    let limiter = match RedisLimiter::<TokenBucketKeys>::builder(conn, quota())
        .prefix("tollgate-example")
        .build(FailurePolicy::Closed)
    {
        Ok(l) => l,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    let (mut admitted, mut denied) = (0u64, 0u64);
    let mut line = String::new();
    while start.elapsed() < RUN {
        match limiter.check_key(key).await {
            Ok(_) => {
                admitted += 1;
                line.push('+');
            }
            Err(RedisError::Denied(_)) => {
                denied += 1;
                if denied % 5 == 0 {
                    line.push('.');
                }
            }
            Err(e) => {
                eprintln!("process {name}: {e}");
                return ExitCode::FAILURE;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("process {name}: {line}");
    println!("admitted: {admitted}");
    println!("process {name}: {denied} denied, {:?}", limiter.stats());
    ExitCode::SUCCESS
}
