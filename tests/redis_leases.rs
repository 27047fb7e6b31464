//! [`LeasedBucket`] in several processes sharing one key of a real Redis server: how many round
//! trips an admission costs, under saturation and below the limit, and that the documented bound
//! `C + R × (t + L)` holds all the while.
//!
//! The load is the one issue 24 measured from outside: quota 1 000 a second with capacity 100,
//! three processes on one key for 3 s each.
//!
//! - **Saturated**: every process spends as fast as it can (a refusal yields to the runtime and
//!   tries again), leases living 250 ms. Before the fix (a lease that found less than a batch let
//!   the next one start at once, one that found nothing retried after one token's interval, and a
//!   landing lease replaced the unspent stock), this took 1.83 round trips per admission.
//! - **At 75 % of the limit**: each process tries 250 times a second, at the defaults (batch 100,
//!   low-water 50, lifetime 1 s). Before: 0.117 round trips per admission.
//!
//! The target for both: at most 0.05 round trips per admission (every lease call counted, the
//! closing give-back included). Each figure is printed, for `benches/README.md`.
//!
//! **Why processes.** Each process has its own stock, lease task and lease timing: that, not
//! threads sharing one bucket, is what spreads the shared bucket's tokens across clients. The
//! test re-runs this binary ([`testkit::child`]) with only [`lease_load_child`] selected and
//! `TOLLGATE_LEASE_LOAD` naming the load; without that variable, that test does nothing.
//!
//! Needs `TOLLGATE_REDIS_URL` (as `tests/redis.rs`; `TOLLGATE_REQUIRE_REDIS=1` makes a missing
//! server a failure instead of a skip).

#![cfg(not(tollgate_loom))]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use testkit::child::Child;
use tollgate::keyed::TokenBucketKeys;
use tollgate::redis::{FailurePolicy, LeasedBucket, RedisError, RedisLimiter};
use tollgate::Quota;

/// The variable that makes [`lease_load_child`] run (its value: `saturated` or `paced`).
const LOAD_VAR: &str = "TOLLGATE_LEASE_LOAD";
/// The key prefix the processes share.
const PREFIX_VAR: &str = "TOLLGATE_LEASE_PREFIX";
/// When the processes start spending, in Unix milliseconds (so that they start together).
const START_VAR: &str = "TOLLGATE_LEASE_START_MS";
/// The hidden test a child process runs.
const CHILD_TEST: &str = "lease_load_child";
/// The first word of the line a child prints with its figures.
const MARKER: &str = "tollgate-lease-load";

const PROCESSES: usize = 3;
const RATE: u64 = 1_000;
const CAPACITY: u64 = 100;
const RUN: Duration = Duration::from_secs(3);
/// The saturated load's lease lifetime.
const SATURATED_LIFETIME: Duration = Duration::from_millis(250);
/// The target, in round trips per admission.
const TARGET: f64 = 0.05;

fn url() -> Option<String> {
    testkit::env::redis_url()
}

fn unix_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    u64::try_from(since.as_millis()).unwrap()
}

/// One process's figures.
#[derive(Debug, Default, Clone, Copy)]
struct Figures {
    tries: u64,
    admitted: u64,
    refused: u64,
    /// Lease calls, the closing give-back included.
    calls: u64,
    leased: u64,
    returned: u64,
    /// When it stopped spending, in Unix milliseconds.
    end_ms: u64,
}

impl Figures {
    fn line(&self, load: &str) -> String {
        format!(
            "{MARKER} {load} tries={} admitted={} refused={} calls={} leased={} returned={} end_ms={}",
            self.tries,
            self.admitted,
            self.refused,
            self.calls,
            self.leased,
            self.returned,
            self.end_ms
        )
    }

    fn parse(line: &str) -> Figures {
        let mut f = Figures::default();
        for field in line.split_whitespace().skip(2) {
            let (name, value) = field.split_once('=').expect("name=value");
            let value: u64 = value.parse().expect("a count");
            match name {
                "tries" => f.tries = value,
                "admitted" => f.admitted = value,
                "refused" => f.refused = value,
                "calls" => f.calls = value,
                "leased" => f.leased = value,
                "returned" => f.returned = value,
                "end_ms" => f.end_ms = value,
                other => panic!("unknown field {other}"),
            }
        }
        f
    }
}

/// One load at a time: two at once would share the machine and the server.
static ONE_LOAD: Mutex<()> = Mutex::new(());

/// Runs `load` in [`PROCESSES`] processes at once and sums their figures.
fn run_load(load: &str) -> (Figures, Vec<Figures>, u64) {
    let _alone = ONE_LOAD.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = format!(
        "t-leases-{load}-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    // Time for every process to start, connect and build its bucket first.
    let start_ms = unix_ms() + 2_000;
    let start = start_ms.to_string();
    let children: Vec<Child> = (0..PROCESSES)
        .map(|_| {
            Child::start(
                CHILD_TEST,
                &[
                    (LOAD_VAR, load),
                    (PREFIX_VAR, prefix.as_str()),
                    (START_VAR, start.as_str()),
                ],
            )
        })
        .collect();
    let mut each = Vec::new();
    for child in children {
        let done = child.finish(Duration::from_secs(120));
        done.assert_passed(load, &format!("{MARKER}-passed {load}"));
        let line = done
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{MARKER} {load} ")))
            .unwrap_or_else(|| panic!("no figures\n{}", done.shown()));
        each.push(Figures::parse(line));
    }
    let mut sum = Figures::default();
    for f in &each {
        sum.tries += f.tries;
        sum.admitted += f.admitted;
        sum.refused += f.refused;
        sum.calls += f.calls;
        sum.leased += f.leased;
        sum.returned += f.returned;
        sum.end_ms = sum.end_ms.max(f.end_ms);
    }
    (sum, each, start_ms)
}

/// The bound over the whole run: from the common start to the last process's end, plus the
/// lease lifetime (tokens leased before the start were none: the key is fresh).
fn check_bound(load: &str, sum: &Figures, start_ms: u64, lifetime: Duration) {
    let t = Duration::from_millis(sum.end_ms.saturating_sub(start_ms));
    let bound = CAPACITY as f64 + RATE as f64 * (t + lifetime).as_secs_f64();
    assert!(
        (sum.admitted as f64) <= bound,
        "{load}: {} admitted in {t:?}, above C + R(t + L) = {bound}",
        sum.admitted
    );
    assert!(sum.admitted <= sum.leased, "{load}: {sum:?}");
}

fn report(load: &str, sum: &Figures, each: &[Figures]) -> f64 {
    let per = sum.calls as f64 / sum.admitted.max(1) as f64;
    println!(
        "[{load}] {PROCESSES} processes: {} tries, {} admitted ({:?} each), {} refused, {} lease calls, \
         {} leased, {} returned: {per:.4} round trips per admission (target {TARGET})",
        sum.tries,
        sum.admitted,
        each.iter().map(|f| f.admitted).collect::<Vec<_>>(),
        sum.refused,
        sum.calls,
        sum.leased,
        sum.returned
    );
    per
}

/// Three processes spending as fast as they can on one key of 1 000/s, capacity 100, leases of
/// 250 ms: at most 0.05 round trips per admission, the bound holding, and the shared limit used
/// (a lease policy that made processes wait too long would admit far less than `R × t`).
#[test]
fn saturated_leases_cost_at_most_0_05_round_trips_per_admission() {
    let Some(_) = url() else { return };
    let (sum, each, start_ms) = run_load("saturated");
    let per = report("saturated", &sum, &each);
    check_bound("saturated", &sum, start_ms, SATURATED_LIFETIME);
    assert!(per <= TARGET, "saturated: {per} round trips per admission");
    let allowed = RATE as f64 * RUN.as_secs_f64();
    assert!(
        sum.admitted as f64 >= 0.7 * allowed,
        "saturated: only {} admitted of the {allowed} the limit allows in {RUN:?}",
        sum.admitted
    );
}

/// Three processes each trying 250 times a second (75 % of the limit in all) at the defaults:
/// at most 0.05 round trips per admission, the bound holding, and nearly every try admitted.
///
/// The refusals come at the start: the key's bucket holds one batch (capacity 100), the first
/// lease takes it, and the processes whose first leases found little wait for a batch to refill
/// (75-100 ms, about 20-25 tries each). Past that, demand below the limit is met.
#[test]
fn leases_at_75_percent_of_the_limit_cost_at_most_0_05_round_trips_per_admission() {
    let Some(_) = url() else { return };
    let (sum, each, start_ms) = run_load("paced");
    let per = report("paced", &sum, &each);
    check_bound("paced", &sum, start_ms, tollgate::redis::DEFAULT_LIFETIME);
    assert!(per <= TARGET, "paced: {per} round trips per admission");
    assert!(
        sum.refused * 20 <= sum.tries,
        "paced: {} of {} tries refused (more than 5 %) below the limit",
        sum.refused,
        sum.tries
    );
}

// ---------------------------------------------------------------------------------------------
// The child: one process of a load.

/// Runs the load named by `TOLLGATE_LEASE_LOAD` in this process (see the module docs); without
/// the variable (an ordinary test run), does nothing.
#[test]
fn lease_load_child() {
    let Ok(load) = std::env::var(LOAD_VAR) else {
        return;
    };
    let url = std::env::var("TOLLGATE_REDIS_URL").expect("TOLLGATE_REDIS_URL");
    let prefix = std::env::var(PREFIX_VAR).expect("the key prefix");
    let start_ms: u64 = std::env::var(START_VAR)
        .expect("the start")
        .parse()
        .expect("the start in Unix ms");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let figures = rt.block_on(async {
        let conn = testkit::env::redis_manager(&url).await;
        let quota = Quota::per_second(RATE)
            .unwrap()
            .with_capacity(CAPACITY)
            .unwrap();
        let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, quota)
            .prefix(prefix)
            .build(FailurePolicy::Closed)
            .unwrap();
        let mut builder = LeasedBucket::builder(Arc::new(limiter), "shared");
        if load == "saturated" {
            builder = builder.lifetime(SATURATED_LIFETIME);
        }
        let bucket = builder.build().unwrap();
        let wait = start_ms.saturating_sub(unix_ms());
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let started = Instant::now();
        let mut f = Figures::default();
        // The paced load's schedule: one try every 4 ms (250 a second).
        let every = Duration::from_millis(4);
        let mut next = tokio::time::Instant::now();
        while started.elapsed() < RUN {
            if load == "paced" {
                next += every;
                tokio::time::sleep_until(next).await;
            }
            f.tries += 1;
            match bucket.try_acquire() {
                Ok(_) => f.admitted += 1,
                Err(RedisError::Denied(_)) => {
                    f.refused += 1;
                    if load == "saturated" {
                        tokio::task::yield_now().await;
                    }
                }
                Err(e) => panic!("{e}"),
            }
        }
        f.end_ms = unix_ms();
        let stats = bucket.stats();
        assert_eq!(stats.admitted, f.admitted);
        let back = bucket.close().await.unwrap();
        f.calls = stats.leases + u64::from(back > 0);
        f.leased = stats.leased;
        f.returned = stats.returned + back;
        f
    });
    // A line of its own: libtest has printed the test's name without a newline.
    println!();
    println!("{}", figures.line(&load));
    println!("{MARKER}-passed {load}");
}
