//! The Redis backend on real servers: a standalone server (`TOLLGATE_REDIS_URL`) and a cluster of
//! three primaries with a replica each (`TOLLGATE_REDIS_CLUSTER`), both started by
//! `scripts/redis.sh` (the test script's `redis` step). Without the variables every test prints
//! `SKIPPED: no Redis` and passes, unless `TOLLGATE_REQUIRE_REDIS=1` (set by the step), which
//! makes them fail.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use redis::aio::ConnectionManager;
use testkit::env::redis_manager;
use tollgate::keyed::{
    FixedWindowKeys, KeyedLimiter, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys,
    TokenBucketKeys,
};
use tollgate::leaky::LeakyMeter;
use tollgate::redis::{
    AllOfFailurePolicy, FailurePolicy, RedisAlgorithm, RedisAllOf, RedisError, RedisLimiter,
    UnavailableKind,
};
use tollgate::{Admitted, AllOf, Denied, KeyedLimit, ManualClock, Nanos, Quota, Scheduled};

// --- servers --------------------------------------------------------------------------------------

/// The variable `name`, or `None` after printing why the test is skipped (a failure when
/// `TOLLGATE_REQUIRE_REDIS=1`).
fn var(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ => {
            if std::env::var("TOLLGATE_REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!("{name} is not set, and TOLLGATE_REQUIRE_REDIS=1: start the servers with scripts/redis.sh");
            }
            eprintln!("SKIPPED: no Redis ({name} is not set; see scripts/redis.sh)");
            None
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A prefix no earlier run used, so that state left on a server by another run is never read.
fn fresh_prefix(test: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "t-{test}-{}-{nanos}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A limiter of algorithm `A` for `quota` through `conn`, under `prefix`, failing closed.
fn closed<A: RedisAlgorithm>(
    conn: impl redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
    quota: Quota,
    prefix: &str,
) -> RedisLimiter<A> {
    RedisLimiter::<A>::builder(conn, quota)
        .prefix(prefix)
        .build(FailurePolicy::Closed)
        .unwrap()
}

/// The server's clock, in Unix microseconds.
async fn server_micros(conn: &mut ConnectionManager) -> u64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    secs * 1_000_000 + micros
}

// --- the same answers as in process ----------------------------------------------------------------

/// An answer, reduced to what a caller can read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Admitted {
        remaining: u64,
        reset: Duration,
        next: Option<Duration>,
    },
    Denied {
        remaining: u64,
        retry: Duration,
        reset: Duration,
        next: Option<Duration>,
    },
    Scheduled {
        delay: Duration,
        queued: u64,
        remaining: u64,
        reset: Duration,
        next: Option<Duration>,
    },
    InsufficientCapacity,
}

fn admitted(a: Admitted) -> Seen {
    Seen::Admitted {
        remaining: a.remaining(),
        reset: a.reset_after(),
        next: a.next_after(),
    }
}

fn denied(d: Denied) -> Seen {
    Seen::Denied {
        remaining: d.remaining(),
        retry: d.retry_after(),
        reset: d.reset_after(),
        next: d.next_after(),
    }
}

fn scheduled(s: Scheduled) -> Seen {
    Seen::Scheduled {
        delay: s.delay(),
        queued: s.queued(),
        remaining: s.remaining(),
        reset: s.reset_after(),
        next: s.next_after(),
    }
}

fn from_redis<T>(r: Result<T, RedisError>, ok: fn(T) -> Seen) -> Seen {
    match r {
        Ok(v) => ok(v),
        Err(RedisError::Denied(d)) => denied(d),
        Err(RedisError::InsufficientCapacity(_)) => Seen::InsufficientCapacity,
        Err(e) => panic!("the server could not decide: {e}"),
    }
}

fn from_keyed(r: Result<Admitted, tollgate::keyed::KeyedError>) -> Seen {
    match r {
        Ok(a) => admitted(a),
        Err(tollgate::keyed::KeyedError::Denied(d)) => denied(d),
        Err(tollgate::keyed::KeyedError::InsufficientCapacity(_)) => Seen::InsufficientCapacity,
        Err(e) => panic!("{e}"),
    }
}

fn from_direct<T>(r: Result<T, tollgate::AcquireError>, ok: fn(T) -> Seen) -> Seen {
    match r {
        Ok(v) => ok(v),
        Err(tollgate::AcquireError::Denied(d)) => denied(d),
        Err(_) => Seen::InsufficientCapacity,
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    /// Forward by `quarters` quarter-intervals plus `jitter` microseconds.
    Forward {
        quarters: u64,
        jitter: u64,
    },
    /// Back by as much.
    Back {
        quarters: u64,
        jitter: u64,
    },
    /// An admission of `n` (0: a query).
    Take(u64),
    Peek(u64),
    /// The meter's scheduling of `n`.
    Schedule(u64),
    /// To `delta` microseconds (-1, 0 or +1) from the boundary the last answer names (`pick` 0: a
    /// denial's retry, a scheduling's delay, an admission's next; 1: its next; 2: its reset),
    /// then a call for `n`: `how` 0 an admission, 1 a peek, 2 (the meter) a scheduling. Where the
    /// scripts' comparisons are off by one, these are the readings that tell.
    Edge {
        pick: u8,
        delta: i64,
        n: u64,
        how: u8,
    },
}

impl Op {
    /// The call `how` names, for `n`.
    fn call(how: u8, n: u64) -> Op {
        match how {
            0 => Op::Take(n),
            1 => Op::Peek(n),
            _ => Op::Schedule(n),
        }
    }
}

/// The reading (relative, in us) `delta` us from the boundary that `seen`, answered at `at`,
/// names (see [`Op::Edge`]), rounded up to the microsecond (the first reading at or past it);
/// `None` before any answer, and for a boundary too far for the case's clock.
fn edge_of(last: Option<&(u64, Seen)>, pick: u8, delta: i64) -> Option<u64> {
    let (at, seen) = last?;
    let span = match (seen, pick) {
        (Seen::Denied { retry, .. }, 0) => *retry,
        (Seen::Scheduled { delay, .. }, 0) => *delay,
        (Seen::Admitted { next, reset, .. }, 0 | 1)
        | (Seen::Denied { next, reset, .. }, 1)
        | (Seen::Scheduled { next, reset, .. }, 1) => next.unwrap_or(*reset),
        (Seen::Admitted { reset, .. }, _)
        | (Seen::Denied { reset, .. }, _)
        | (Seen::Scheduled { reset, .. }, _) => *reset,
        (Seen::InsufficientCapacity, _) => return None,
    };
    let t = at
        .checked_add(u64::try_from(span.as_nanos().div_ceil(1000)).ok()?)?
        .checked_add_signed(delta)?;
    // Readings stay well below 2^53 us from either base (see `bases`).
    (1..=1 << 46).contains(&t).then_some(t)
}

fn ops(capacity: u64, schedule: bool) -> impl Strategy<Value = Vec<Op>> {
    let n = 0..=capacity + 1;
    let hows = if schedule { 0..=2u8 } else { 0..=1u8 };
    let op = prop_oneof![
        // A good share of the calls lands on, or one microsecond either side of, the next
        // boundary the state implies, rather than only anywhere.
        4 => (0..3u8, -1..=1i64, n.clone(), hows)
            .prop_map(|(pick, delta, n, how)| Op::Edge { pick, delta, n, how }),
        4 => (0..12u64, 0..1000u64).prop_map(|(quarters, jitter)| Op::Forward { quarters, jitter }),
        1 => (0..8u64, 0..1000u64).prop_map(|(quarters, jitter)| Op::Back { quarters, jitter }),
        4 => n.clone().prop_map(Op::Take),
        1 => n.clone().prop_map(Op::Peek),
        (if schedule { 3 } else { 0 }) => n.prop_map(Op::Schedule),
    ];
    proptest::collection::vec(op, 1..40)
}

/// Quotas for the GCRA: small ones, ones whose interval is not a whole microsecond, and the
/// largest of each counting unit (a 2^52 ns burst window; a 2^52 us one).
fn gcra_quotas() -> impl Strategy<Value = Quota> {
    prop_oneof![
        (
            1..=20u64,
            1..=30u64,
            prop::sample::select(vec![1u64, 7, 1000, 60_000])
        )
            .prop_map(|(count, capacity, millis)| Quota::per_period(
                count,
                Duration::from_millis(millis)
            )
            .unwrap()
            .with_capacity(capacity)
            .unwrap()),
        (1..=9u64).prop_map(|count| Quota::per_second(count).unwrap()),
        Just(
            Quota::per_second(1_000_000_000)
                .unwrap()
                .with_capacity(1 << 52)
                .unwrap()
        ),
        Just(Quota::per_day(1).unwrap().with_capacity(52).unwrap()),
        Just(Quota::per_day(1).unwrap().with_capacity(53).unwrap()),
        Just(Quota::per_day(1).unwrap().with_capacity(52_124).unwrap()),
    ]
}

/// Quotas for the windows: small ones, `longest`, the longest window the algorithm's script takes
/// (in us), and `largest`, the largest count it takes at a one-day window.
fn window_quotas(longest: u64, largest: u64) -> impl Strategy<Value = Quota> {
    prop_oneof![
        8 => (
            1..=20u64,
            prop::sample::select(vec![1u64, 10, 1000, 60_000, 86_400_000]),
        )
            .prop_map(|(count, millis)| {
                Quota::per_period(count, Duration::from_millis(millis)).unwrap()
            }),
        1 => Just(Quota::per_period(1, Duration::from_micros(longest)).unwrap()),
        1 => Just(Quota::per_day(largest).unwrap()),
    ]
}

/// Where the server's clock stands for a case: today, or as near 2^53 us as the case's spans
/// allow (2^53 us is where Lua's doubles stop counting microseconds exactly).
fn bases() -> impl Strategy<Value = u64> {
    let today = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    prop_oneof![Just(today), Just((1u64 << 53) - (1 << 48))]
}

/// Runs `ops` against the Redis limiter (with the client's clock at `base` + t) and the in-process
/// one (at t), requiring equal answers. `window` is the alignment the two must share, in us.
struct Case<'a> {
    rt: &'a tokio::runtime::Runtime,
    conn: ConnectionManager,
    quota: Quota,
    base: u64,
    window: u64,
}

impl Case<'_> {
    /// Runs `ops` against the Redis limiter and `local`, comparing the answers after `normal` has
    /// rewritten both.
    fn run_with<A: RedisAlgorithm>(
        &self,
        ops: &[Op],
        normal: fn(Seen) -> Seen,
        local: impl Fn(Op, Nanos) -> Option<Seen>,
    ) -> Result<(), TestCaseError> {
        let clock = ManualClock::new();
        let redis = RedisLimiter::<A>::builder(self.conn.clone(), self.quota)
            .prefix(fresh_prefix("same"))
            .timeout(Duration::from_secs(5))
            .client_clock(clock.clone())
            .build(FailurePolicy::Closed)
            .unwrap();
        let base = self.base - self.base % self.window;
        let interval_us = (self.quota.interval().as_nanos() / 1000).max(1) as u64;
        let step = |q: u64, j: u64| (interval_us.saturating_mul(q) / 4).min(1 << 40) + j;
        // Relative time, far enough from 0 that steps back stay positive.
        let mut t: u64 = 1 << 42;
        // The last answer (in process), and when it was given.
        let mut last: Option<(u64, Seen)> = None;
        for (i, &op) in ops.iter().enumerate() {
            let op = match op {
                Op::Forward { quarters, jitter } => {
                    t += step(quarters, jitter);
                    op
                }
                Op::Back { quarters, jitter } => {
                    t -= step(quarters, jitter).min(t - 1);
                    op
                }
                Op::Edge {
                    pick,
                    delta,
                    n,
                    how,
                } => {
                    t = edge_of(last.as_ref(), pick, delta).unwrap_or(t);
                    Op::call(how, n)
                }
                _ => op,
            };
            clock.set(Nanos::new((base + t) * 1000));
            let now = Nanos::new(t * 1000);
            let Some(expected) = local(op, now) else {
                continue;
            };
            let got = self.rt.block_on(async {
                match op {
                    Op::Take(n) => from_redis(redis.check_key_n("k", n).await, admitted),
                    Op::Peek(n) => from_redis(redis.peek_key_n("k", n).await, admitted),
                    Op::Schedule(_) | Op::Forward { .. } | Op::Back { .. } | Op::Edge { .. } => {
                        unreachable!()
                    }
                }
            });
            prop_assert_eq!(
                normal(got),
                normal(expected.clone()),
                "op {} ({:?}) at t = {} us",
                i,
                op,
                t
            );
            last = Some((t, expected));
        }
        Ok(())
    }
}

macro_rules! redis_or_skip {
    () => {
        match var("TOLLGATE_REDIS_URL") {
            Some(url) => url,
            None => return,
        }
    };
}

/// Runs the same sequences against `RedisLimiter<A>` and the in-process `KeyedLimiter<u64, A>`
/// for the quotas `quotas` draws, requiring equal answers once `normal` has rewritten both.
/// `aligned`: the algorithm's windows are aligned, so the server's clock starts on a boundary.
fn same_as_keyed<A: RedisAlgorithm>(
    quotas: impl Strategy<Value = Quota>,
    aligned: bool,
    normal: fn(Seen) -> Seen,
) {
    let url = redis_or_skip!();
    let rt = runtime();
    let conn = rt.block_on(redis_manager(&url));
    proptest!(testkit::strategies::unpersisted(96), |(quota in quotas, base in bases(), ops in ops(30, false))| {
        let keyed = KeyedLimiter::<u64, A, _>::with_algorithm(quota, ManualClock::new()).unwrap();
        let window = if aligned { quota.period().as_micros() as u64 } else { 1 };
        let case = Case { rt: &rt, conn: conn.clone(), quota, base, window };
        case.run_with::<A>(&ops, normal, |op, now| match op {
            Op::Take(n) => Some(from_keyed(keyed.check_key_n_at(&1, n, now))),
            Op::Peek(n) => Some(from_keyed(keyed.peek_key_n_at(&1, n, now))),
            _ => None,
        })?;
    });
}

#[test]
fn the_token_bucket_answers_as_in_process() {
    same_as_keyed::<TokenBucketKeys>(gcra_quotas(), false, |seen| seen);
}

#[test]
fn the_fixed_window_answers_as_in_process() {
    same_as_keyed::<FixedWindowKeys>(window_quotas(1 << 52, 104_249), true, |seen| seen);
}

/// `seen` with a denial's `retry_after` and any `next_after` rounded up to a whole microsecond:
/// the earliest reading Redis can name (its clock counts microseconds) when the in-process limiter
/// names a nanosecond.
fn to_micros(seen: Seen) -> Seen {
    let up = |d: Duration| Duration::from_micros(d.as_nanos().div_ceil(1000) as u64);
    match seen {
        Seen::Denied {
            remaining,
            retry,
            reset,
            next,
        } => Seen::Denied {
            remaining,
            retry: up(retry),
            reset,
            next: next.map(up),
        },
        Seen::Admitted {
            remaining,
            reset,
            next,
        } => Seen::Admitted {
            remaining,
            reset,
            next: next.map(up),
        },
        other => other,
    }
}

#[test]
fn the_sliding_counter_answers_as_in_process() {
    // 52 124 a day: the largest count whose count x window stays below 2^52. The estimate's
    // earliest admission is exact to the nanosecond in process and to the microsecond in Redis:
    // compared at microseconds.
    same_as_keyed::<SlidingWindowCounterKeys>(
        window_quotas((1 << 52) - 1, 52_124),
        true,
        to_micros,
    );
}

#[test]
fn the_sliding_log_answers_as_in_process() {
    // MAX_LOG entries: the longest log.
    same_as_keyed::<SlidingWindowLogKeys>(
        window_quotas(1 << 52, tollgate::window::MAX_LOG),
        false,
        |seen| seen,
    );
}

#[test]
fn the_leaky_meter_answers_as_in_process() {
    let url = redis_or_skip!();
    let rt = runtime();
    let conn = rt.block_on(redis_manager(&url));
    proptest!(testkit::strategies::unpersisted(96), |(quota in gcra_quotas(), base in bases(), ops in ops(30, true))| {
        // A direct meter (it schedules; the keyed one does not), built at reading 0 so that it is
        // full at every reading of the case, as a key Redis has never seen is.
        let meter = LeakyMeter::with_clock(quota, ManualClock::new());
        let clock = ManualClock::new();
        let redis = RedisLimiter::<LeakyMeterKeys>::builder(conn.clone(), quota)
            .prefix(fresh_prefix("meter"))
            .timeout(Duration::from_secs(5))
            .client_clock(clock.clone())
            .build(FailurePolicy::Closed)
            .unwrap();
        let interval_us = (quota.interval().as_nanos() / 1000).max(1) as u64;
        let step = |q: u64, j: u64| (interval_us.saturating_mul(q) / 4).min(1 << 40) + j;
        let mut t: u64 = 1 << 42;
        let mut last: Option<(u64, Seen)> = None;
        for (i, &op) in ops.iter().enumerate() {
            let op = match op {
                Op::Forward { quarters, jitter } => { t += step(quarters, jitter); continue }
                Op::Back { quarters, jitter } => { t -= step(quarters, jitter).min(t - 1); continue }
                Op::Edge { pick, delta, n, how } => {
                    t = edge_of(last.as_ref(), pick, delta).unwrap_or(t);
                    Op::call(how, n)
                }
                _ => op,
            };
            clock.set(Nanos::new((base + t) * 1000));
            let now = Nanos::new(t * 1000);
            let (expected, got) = match op {
                Op::Take(n) => (
                    from_direct(meter.try_acquire_n_at(n, now), admitted),
                    rt.block_on(async { from_redis(redis.check_key_n("k", n).await, admitted) }),
                ),
                Op::Peek(n) => (
                    from_direct(meter.peek_n_at(n, now), admitted),
                    rt.block_on(async { from_redis(redis.peek_key_n("k", n).await, admitted) }),
                ),
                Op::Schedule(n) => (
                    from_direct(meter.try_schedule_n_at(n, now), scheduled),
                    rt.block_on(async { from_redis(redis.schedule_key_n("k", n).await, scheduled) }),
                ),
                Op::Forward { .. } | Op::Back { .. } | Op::Edge { .. } => unreachable!(),
            };
            prop_assert_eq!(got, expected.clone(), "op {} ({:?}) at t = {} us", i, op, t);
            last = Some((t, expected));
        }
    });
}

// --- the edges, exactly -----------------------------------------------------------------------------

/// Today, in Unix microseconds, rounded down to a multiple of `unit`.
fn today_us(unit: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64;
    now - now % unit
}

/// A limiter of algorithm `A` for `quota` reading the client clock `clock` (the scripts take
/// its microseconds as the reading), under a fresh prefix, failing closed.
fn on_clock<A: RedisAlgorithm>(
    conn: &ConnectionManager,
    quota: Quota,
    clock: &ManualClock,
) -> RedisLimiter<A> {
    RedisLimiter::<A>::builder(conn.clone(), quota)
        .prefix(fresh_prefix("exact"))
        .timeout(Duration::from_secs(5))
        .client_clock(clock.clone())
        .build(FailurePolicy::Closed)
        .unwrap()
}

/// The remaining of an admission, or a panic naming what came back instead.
fn admitted_leaving<T: std::fmt::Debug>(
    r: Result<T, RedisError>,
    remaining: fn(&T) -> u64,
    what: &str,
) -> u64 {
    match r {
        Ok(a) => remaining(&a),
        other => panic!("{what}: expected an admission, got {other:?}"),
    }
}

/// The denial in `r`, or a panic naming what came back instead.
fn denial<T: std::fmt::Debug>(r: Result<T, RedisError>, what: &str) -> Denied {
    match r {
        Err(RedisError::Denied(d)) => d,
        other => panic!("{what}: expected a denial, got {other:?}"),
    }
}

/// `r` denied, to be retried exactly `retry` later.
fn assert_denied_for<T: std::fmt::Debug>(r: Result<T, RedisError>, retry: Duration, what: &str) {
    let d = denial(r, what);
    assert_eq!(d.retry_after(), retry, "{what}: retry_after");
}

/// The first whole microsecond at or after `ns` nanoseconds.
fn micros_up(ns: u128) -> u64 {
    ns.div_ceil(1000) as u64
}

/// The token bucket's next token, for quotas of every counting unit: a bucket emptied at `t0`
/// refuses one tick before the next token is there (with a wait of exactly that tick) and admits
/// at that instant, and the same for the token after it. The first quota's interval is a whole
/// microsecond plus one nanosecond, so that one tick (1 ns) before the token is a reading the
/// scripts can be given; the second counts microseconds (a burst window past 2^52 ns); the third
/// is a plain one, refilling on a whole microsecond.
#[test]
fn the_token_bucket_admits_the_next_token_exactly_when_it_is_there() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let conn = redis_manager(&url).await;
        for quota in [
            Quota::per_period(1, Duration::from_nanos(100_000_001))
                .unwrap()
                .with_capacity(3)
                .unwrap(),
            Quota::per_day(1).unwrap().with_capacity(53).unwrap(),
            Quota::per_second(10).unwrap().with_capacity(2).unwrap(),
        ] {
            let clock = ManualClock::new();
            let bucket = on_clock::<TokenBucketKeys>(&conn, quota, &clock);
            let at = |us: u64| clock.set(Nanos::new(us * 1000));
            let what = |s: &str| format!("{quota:?}: {s}");
            let capacity = quota.capacity();
            let interval = quota.interval().as_nanos();
            let t0 = today_us(1) + 17;
            at(t0);
            let left = admitted_leaving(
                bucket.check_key_n("k", capacity).await,
                Admitted::remaining,
                &what("emptied"),
            );
            assert_eq!(left, 0);
            for k in 1..=2u128 {
                // The k-th token is there at t0 + k x interval (in ns): the first reading at or
                // after it admits, the one before waits for the rest.
                let due = u128::from(t0) * 1000 + k * interval;
                let edge = micros_up(due);
                let short = Duration::from_nanos((due - u128::from(edge - 1) * 1000) as u64);
                at(edge - 1);
                assert_denied_for(
                    bucket.peek_key_n("k", 1).await,
                    short,
                    &what("peek one tick early"),
                );
                assert_denied_for(bucket.check_key("k").await, short, &what("one tick early"));
                at(edge);
                let left = admitted_leaving(
                    bucket.peek_key_n("k", 1).await,
                    Admitted::remaining,
                    &what("peek on time"),
                );
                assert_eq!(left, 0, "{}", what("peek on time"));
                let left = admitted_leaving(
                    bucket.check_key("k").await,
                    Admitted::remaining,
                    &what("on time"),
                );
                assert_eq!(left, 0, "{}", what("on time"));
                // And not twice.
                denial(bucket.check_key("k").await, &what("twice on time"));
            }
        }
    });
}

/// The leaky meter's strict admission (only on an empty queue) and its scheduling (a place in the
/// queue), one tick (1 ns) before and exactly when the queue empties (frees a place).
#[test]
fn the_leaky_meter_admits_exactly_when_its_queue_empties() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let conn = redis_manager(&url).await;
        let quota = Quota::per_period(1, Duration::from_nanos(100_000_001))
            .unwrap()
            .with_capacity(3)
            .unwrap();
        let interval = quota.interval().as_nanos();
        let clock = ManualClock::new();
        let meter = on_clock::<LeakyMeterKeys>(&conn, quota, &clock);
        let at = |us: u64| clock.set(Nanos::new(us * 1000));
        let t0 = today_us(1) + 17;
        let due = u128::from(t0) * 1000 + interval;
        let edge = micros_up(due);
        let short = Duration::from_nanos((due - u128::from(edge - 1) * 1000) as u64);
        assert_eq!(short, Duration::from_nanos(1));

        // Strict: one admitted at t0 empties the queue at t0 + interval.
        at(t0);
        meter.check_key("strict").await.unwrap();
        at(edge - 1);
        assert_denied_for(
            meter.peek_key_n("strict", 1).await,
            short,
            "strict peek one tick early",
        );
        assert_denied_for(
            meter.check_key("strict").await,
            short,
            "strict one tick early",
        );
        at(edge);
        meter.peek_key_n("strict", 1).await.unwrap();
        meter.check_key("strict").await.unwrap();
        denial(meter.check_key("strict").await, "strict twice on time");

        // Scheduling: three places taken at t0, the first frees at t0 + interval.
        at(t0);
        let s = meter.schedule_key_n("queue", 3).await.unwrap();
        assert_eq!(s.remaining(), 0);
        at(edge - 1);
        assert_denied_for(
            meter.schedule_key_n("queue", 1).await,
            short,
            "a place one tick early",
        );
        at(edge);
        let s = meter.schedule_key_n("queue", 1).await.unwrap();
        assert_eq!(s.remaining(), 0);
        denial(
            meter.schedule_key_n("queue", 1).await,
            "a place twice on time",
        );
    });
}

/// The fixed window's start and end: a window filled in its last microsecond refuses in it
/// (until its end, exactly 1 us away) and admits in the next from its first microsecond, whose
/// window is refused again in its last microsecond and admits at the following start.
#[test]
fn the_fixed_window_turns_over_exactly_on_its_boundary() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let conn = redis_manager(&url).await;
        let micros = Duration::from_micros;
        for (count, window) in [(2u64, 1_000_000u64), (1, 7), (3, 86_400_000_000)] {
            let quota = Quota::per_period(count, micros(window)).unwrap();
            let clock = ManualClock::new();
            let fixed = on_clock::<FixedWindowKeys>(&conn, quota, &clock);
            let at = |us: u64| clock.set(Nanos::new(us * 1000));
            let what = |s: &str| format!("{count} per {window} us: {s}");
            let start = today_us(window) + window;
            // The last microsecond of the window before `start`.
            at(start - 1);
            let left = admitted_leaving(
                fixed.check_key_n("k", count).await,
                Admitted::remaining,
                &what("filled at the end"),
            );
            assert_eq!(left, 0);
            let d = denial(fixed.check_key("k").await, &what("full at its end"));
            assert_eq!(
                (d.retry_after(), d.reset_after()),
                (micros(1), micros(1)),
                "{}",
                what("full at its end")
            );
            at(start);
            let left = admitted_leaving(
                fixed.check_key("k").await,
                Admitted::remaining,
                &what("the next window's start"),
            );
            assert_eq!(left, count - 1, "{}", what("the next window's start"));
            if count > 1 {
                fixed.check_key_n("k", count - 1).await.unwrap();
            }
            at(start + window - 1);
            let d = denial(
                fixed.check_key("k").await,
                &what("full at the next window's end"),
            );
            assert_eq!(
                d.retry_after(),
                micros(1),
                "{}",
                what("full at the next window's end")
            );
            at(start + window);
            let left = admitted_leaving(
                fixed.check_key("k").await,
                Admitted::remaining,
                &what("the window after"),
            );
            assert_eq!(left, count - 1, "{}", what("the window after"));
        }
    });
}

/// The sliding counter's estimate at its edges: two admissions at the very end of window j - 1
/// weigh 2 x (W - e) / W at e microseconds into window j, so that with a limit of 2 one more
/// fits from e = W / 2 exactly (and not 1 us before); and one admission at the start of window
/// j counts until the end of window j + 1, exactly.
#[test]
fn the_sliding_counter_admits_exactly_as_its_estimate_falls_to_the_limit() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let conn = redis_manager(&url).await;
        let micros = Duration::from_micros;
        for window in [1_000_000u64, 10, 86_400_000_000] {
            let clock = ManualClock::new();
            let at = |us: u64| clock.set(Nanos::new(us * 1000));
            let what = |s: &str| format!("a window of {window} us: {s}");
            let start = today_us(window) + window;

            let two = on_clock::<SlidingWindowCounterKeys>(
                &conn,
                Quota::per_period(2, micros(window)).unwrap(),
                &clock,
            );
            at(start - 1);
            two.check_key_n("k", 2).await.unwrap();
            at(start - 1);
            denial(two.check_key("k").await, &what("full at the end"));
            at(start + window / 2 - 1);
            assert_denied_for(
                two.check_key("k").await,
                micros(1),
                &what("half a window less 1 us"),
            );
            at(start + window / 2);
            let left = admitted_leaving(
                two.check_key("k").await,
                Admitted::remaining,
                &what("half a window"),
            );
            assert_eq!(left, 0, "{}", what("half a window"));
            denial(two.check_key("k").await, &what("half a window, again"));

            let one = on_clock::<SlidingWindowCounterKeys>(
                &conn,
                Quota::per_period(1, micros(window)).unwrap(),
                &clock,
            );
            at(start);
            one.check_key("k").await.unwrap();
            at(start + 2 * window - 1);
            let d = denial(
                one.check_key("k").await,
                &what("the last us of the window after"),
            );
            assert_eq!(
                (d.retry_after(), d.reset_after()),
                (micros(1), micros(1)),
                "{}",
                what("the last us of the window after")
            );
            at(start + 2 * window);
            let left = admitted_leaving(
                one.check_key("k").await,
                Admitted::remaining,
                &what("two windows on"),
            );
            assert_eq!(left, 0, "{}", what("two windows on"));
        }
    });
}

/// The sliding log's window (t - W, t]: an entry counts until exactly W after it, and leaves the
/// window then, not 1 us before (an admission 1 us before must not prune it), nor after.
#[test]
fn the_sliding_log_counts_an_entry_until_it_leaves_the_window_exactly() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let conn = redis_manager(&url).await;
        let micros = Duration::from_micros;
        for window in [1_000_000u64, 2, 86_400_000_000] {
            let clock = ManualClock::new();
            let at = |us: u64| clock.set(Nanos::new(us * 1000));
            let what = |s: &str| format!("a window of {window} us: {s}");
            let log = on_clock::<SlidingWindowLogKeys>(
                &conn,
                Quota::per_period(2, micros(window)).unwrap(),
                &clock,
            );
            let t0 = today_us(1) + 17;
            at(t0);
            log.check_key("k").await.unwrap();
            // 1 us before the first entry leaves: it still counts, and this admission (which
            // prunes what has left) must keep it.
            at(t0 + window - 1);
            let left = admitted_leaving(
                log.check_key("k").await,
                Admitted::remaining,
                &what("the second, 1 us before the first leaves"),
            );
            assert_eq!(left, 0, "{}", what("the second"));
            let d = denial(
                log.check_key("k").await,
                &what("full, 1 us before the first leaves"),
            );
            assert_eq!(
                d.retry_after(),
                micros(1),
                "{}",
                what("full, 1 us before the first leaves")
            );
            assert_eq!(
                d.next_after(),
                Some(micros(1)),
                "{}",
                what("full, 1 us before the first leaves")
            );
            assert_eq!(
                log.peek_key_n("k", 0).await.unwrap().remaining(),
                0,
                "{}",
                what("nothing left")
            );
            // Exactly W after it, the first entry has left.
            at(t0 + window);
            let left = admitted_leaving(
                log.check_key("k").await,
                Admitted::remaining,
                &what("as the first leaves"),
            );
            assert_eq!(left, 0, "{}", what("as the first leaves"));
            // Now the entries at t0 + W - 1 and t0 + W: the older leaves at t0 + 2W - 1.
            at(t0 + 2 * window - 2);
            assert_denied_for(
                log.check_key("k").await,
                micros(1),
                &what("1 us before the second leaves"),
            );
            at(t0 + 2 * window - 1);
            log.check_key("k").await.unwrap();
        }
    });
}

// --- throwaway servers ---------------------------------------------------------------------------------

/// A Redis server of this test's own (`TOLLGATE_REDIS_SERVER`), on a free loopback port, killed
/// on drop: for tests that read server-wide counters, or stop, kill and restart the server.
struct Throwaway {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
}

impl Throwaway {
    fn start() -> Option<Throwaway> {
        let server = var("TOLLGATE_REDIS_SERVER")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir =
            std::env::temp_dir().join(format!("tollgate-redis-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Some(Throwaway::spawn(&server, port, dir))
    }

    fn spawn(server: &str, port: u16, dir: std::path::PathBuf) -> Throwaway {
        let child = std::process::Command::new(server)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t = Throwaway { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not start on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        t
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn signal(&self, signal: &str) {
        let ok = std::process::Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal}");
    }

    /// Kills the server and starts another on the same port (state lost, as after a crash).
    fn restart(mut self) -> Throwaway {
        let server = std::env::var("TOLLGATE_REDIS_SERVER").unwrap();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (port, dir) = (self.port, std::mem::take(&mut self.dir));
        std::mem::forget(self);
        Throwaway::spawn(&server, port, dir)
    }
}

impl Drop for Throwaway {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.child.id().to_string()])
            .stderr(std::process::Stdio::null())
            .status();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `INFO commandstats` calls of `command` (e.g. `evalsha`, `script|load`).
async fn calls(conn: &mut ConnectionManager, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let head = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&head))
        .map(|rest| rest.split(',').next().unwrap().parse().unwrap())
        .unwrap_or(0)
}

// --- atomicity, round trips, TTL ----------------------------------------------------------------------

/// A naive limiter, as the design notes warn: GET, decide on the client, SET. Answers whether it
/// admitted.
async fn naive_take(conn: &mut ConnectionManager, key: &str, capacity: u64) -> bool {
    let taken: Option<u64> = redis::cmd("GET").arg(key).query_async(conn).await.unwrap();
    let taken = taken.unwrap_or(0);
    if taken >= capacity {
        return false;
    }
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(taken + 1)
        .query_async(conn)
        .await
        .unwrap();
    true
}

#[test]
fn sixteen_tasks_on_four_connections_never_exceed_the_limit_and_a_naive_client_does() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let mut conns = Vec::new();
        for _ in 0..4 {
            conns.push(redis_manager(&url).await);
        }
        // 40 at once, then one a minute: at most 40 + 1 in the test's few seconds.
        let quota = Quota::per_minute(1).unwrap().with_capacity(40).unwrap();
        let prefix = fresh_prefix("atomic");
        let limiters: Vec<Arc<RedisLimiter>> = conns
            .iter()
            .map(|c| {
                Arc::new(
                    RedisLimiter::<TokenBucketKeys>::builder(c.clone(), quota)
                        .prefix(&prefix)
                        .timeout(Duration::from_secs(5))
                        .build(FailurePolicy::Closed)
                        .unwrap(),
                )
            })
            .collect();
        let mut probe = conns[0].clone();
        let start = server_micros(&mut probe).await;
        let mut tasks = Vec::new();
        for i in 0..16 {
            let limiter = limiters[i % 4].clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..20 {
                    match limiter.check_key("hot").await {
                        Ok(_) => admitted += 1,
                        Err(RedisError::Denied(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                admitted
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        let elapsed_us = server_micros(&mut probe).await - start;
        let bound = 40 + elapsed_us / 60_000_000 + 1;
        assert!(
            admitted >= 40,
            "a full bucket of 40 admitted only {admitted}"
        );
        assert!(
            admitted <= bound,
            "admitted {admitted} > C + R x t = {bound}"
        );
        let calls: u64 = limiters.iter().map(|l| l.stats().round_trips).sum();
        assert_eq!(calls, 16 * 20, "one round trip per decision");

        // The same load through GET-decide-SET admits more than its 40.
        let key = format!("{prefix}:naive");
        let mut tasks = Vec::new();
        for i in 0..16 {
            let mut conn = conns[i % 4].clone();
            let key = key.clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                for _ in 0..20 {
                    admitted += u64::from(naive_take(&mut conn, &key, 40).await);
                }
                admitted
            }));
        }
        let mut naive = 0;
        for t in tasks {
            naive += t.await.unwrap();
        }
        assert!(naive > 41, "the naive client admitted only {naive}");
    });
}

#[test]
fn one_evalsha_per_decision_and_one_reload_after_a_script_flush() {
    let Some(server) = Throwaway::start() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let mut admin = redis_manager(&server.url()).await;
        let limiter =
            RedisLimiter::<FixedWindowKeys>::builder(admin.clone(), Quota::per_second(5).unwrap())
                .build(FailurePolicy::Closed)
                .unwrap();
        // The first call loads the script: NOSCRIPT, SCRIPT LOAD, EVALSHA.
        limiter.check_key("warm").await.unwrap();
        assert_eq!(limiter.stats().reloads, 1);
        let before = calls(&mut admin, "evalsha").await;
        for i in 0..50 {
            let _ = limiter.check_key(format!("k{}", i % 7)).await;
            let _ = limiter.peek_key_n("k0", 2).await;
        }
        assert_eq!(calls(&mut admin, "evalsha").await - before, 100);
        assert_eq!(limiter.stats().round_trips, 3 + 100);

        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
        let loads = calls(&mut admin, "script|load").await;
        for _ in 0..5 {
            let _ = limiter.check_key("after-flush").await;
        }
        assert_eq!(calls(&mut admin, "script|load").await - loads, 1);
        assert_eq!(limiter.stats().reloads, 2);
        assert_eq!(limiter.stats().decisions, 1 + 100 + 5);
    });
}

#[test]
fn a_key_expires_no_earlier_than_it_reads_as_fresh() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let mut admin = redis_manager(&url).await;
        let prefix = fresh_prefix("ttl");
        // Two tokens, 10 a second: empty after two, full again 200 ms later.
        let bucket = closed::<TokenBucketKeys>(
            admin.clone(),
            Quota::per_second(10).unwrap().with_capacity(2).unwrap(),
            &prefix,
        );
        let window = closed::<FixedWindowKeys>(
            admin.clone(),
            Quota::per_period(3, Duration::from_millis(300)).unwrap(),
            &prefix,
        );
        let counter = closed::<SlidingWindowCounterKeys>(
            admin.clone(),
            Quota::per_period(3, Duration::from_millis(100)).unwrap(),
            &prefix,
        );
        let log = closed::<SlidingWindowLogKeys>(
            admin.clone(),
            Quota::per_period(3, Duration::from_millis(150)).unwrap(),
            &prefix,
        );
        let asked = Instant::now();
        bucket.check_key("t").await.unwrap();
        let last = bucket.check_key("t").await.unwrap();
        let taken = window.check_key_n("t", 3).await.unwrap();
        let counted = counter.check_key_n("t", 2).await.unwrap();
        let logged = log.check_key_n("t", 3).await.unwrap();
        for (limiter_key, fresh_in) in [
            (bucket.key_name("t").unwrap(), last.reset_after()),
            (window.key_name("t").unwrap(), taken.reset_after()),
            (counter.key_name("t").unwrap(), counted.reset_after()),
            (log.key_name("t").unwrap(), logged.reset_after()),
        ] {
            let pttl: i64 = redis::cmd("PTTL")
                .arg(&limiter_key)
                .query_async(&mut admin)
                .await
                .unwrap();
            let since = asked.elapsed();
            assert!(
                pttl > 0,
                "no TTL on {}",
                String::from_utf8_lossy(&limiter_key)
            );
            // The TTL left, plus what passed since the answer, covers the time until fresh.
            let covered = Duration::from_millis(pttl as u64) + since + Duration::from_millis(1);
            assert!(
                covered >= fresh_in,
                "PTTL {pttl} ms + {since:?} < {fresh_in:?}"
            );
        }
        // Once expired, a decision is a fresh key's.
        tokio::time::sleep(Duration::from_millis(350)).await;
        for name in [
            bucket.key_name("t").unwrap(),
            window.key_name("t").unwrap(),
            counter.key_name("t").unwrap(),
            log.key_name("t").unwrap(),
        ] {
            let exists: u64 = redis::cmd("EXISTS")
                .arg(&name)
                .query_async(&mut admin)
                .await
                .unwrap();
            assert_eq!(exists, 0);
        }
        assert_eq!(bucket.check_key("t").await.unwrap().remaining(), 1);
        assert_eq!(bucket.check_key("fresh").await.unwrap().remaining(), 1);
        assert_eq!(window.check_key("t").await.unwrap().remaining(), 2);
        assert_eq!(counter.check_key("t").await.unwrap().remaining(), 2);
        assert_eq!(log.check_key("t").await.unwrap().remaining(), 2);
    });
}

/// `PEXPIRETIME` of `name`: the Unix millisecond its TTL ends.
async fn expire_time(admin: &mut ConnectionManager, name: &[u8]) -> i64 {
    redis::cmd("PEXPIRETIME")
        .arg(name)
        .query_async(admin)
        .await
        .unwrap()
}

/// The key `name` lives through every microsecond before `fresh_us`, the first at which its
/// state reads as a fresh key's: Redis drops a key once its clock, in milliseconds, is past the
/// key's expiry E, so the key is there until (E + 1) x 1000 us, and no sooner may it go.
/// Exact: an expiry 1 ms earlier fails here whenever the state is not fresh on a millisecond.
async fn assert_lives_until(
    admin: &mut ConnectionManager,
    name: &[u8],
    fresh_us: u128,
    what: &str,
) {
    let e = expire_time(admin, name).await;
    assert!(e > 0, "{what}: no TTL ({e})");
    let gone_us = (e as u128 + 1) * 1000;
    assert!(
        gone_us >= fresh_us,
        "{what}: the key goes at {gone_us} us (PEXPIRETIME {e}), {} us before its state reads as fresh at {fresh_us} us",
        fresh_us - gone_us
    );
}

/// A window (in us, 2 to 3 s long) such that, at the server's clock now, the `ahead`-th window
/// after the current one starts 1 us past a millisecond, with at least 1 s of the current window
/// left: where a TTL that ends when that window starts, rounded up to the millisecond, is
/// exact to the millisecond (a TTL 1 ms shorter ends before it for any reading not on a
/// millisecond).
async fn window_ending_past_a_millisecond(admin: &mut ConnectionManager, ahead: u64) -> u64 {
    let now = server_micros(admin).await;
    (2_000_000..3_000_000u64)
        .find(|&w| {
            let next = (now / w + 1) * w;
            next - now >= 1_000_000 && (next + (ahead - 1) * w) % 1000 == 1
        })
        .expect("a window between 2 and 3 s ending 1 us past a millisecond")
}

/// Every script's TTL, compared exactly with the state it wrote, read back from the server: the
/// key lives until the state reads as fresh (tat for the bucket and the meter, the window's end
/// for the fixed window, the next window's end for the counter, the newest entry leaving the
/// log's window), decoded as the script stores it. Several keys each, on the server's clock, so
/// that readings off the millisecond come up.
#[test]
fn every_ttl_lasts_exactly_until_the_state_reads_as_fresh() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let mut admin = redis_manager(&url).await;
        let prefix = fresh_prefix("ttl-exact");
        // Whole milliseconds of refill and window: the state is fresh on the reading's
        // microsecond within a millisecond.
        let bucket = closed::<TokenBucketKeys>(
            admin.clone(),
            Quota::per_second(10).unwrap().with_capacity(3).unwrap(),
            &prefix,
        );
        let meter = closed::<LeakyMeterKeys>(
            admin.clone(),
            Quota::per_second(10).unwrap().with_capacity(3).unwrap(),
            &prefix,
        );
        let log = closed::<SlidingWindowLogKeys>(
            admin.clone(),
            Quota::per_period(3, Duration::from_millis(1500)).unwrap(),
            &prefix,
        );
        let w = window_ending_past_a_millisecond(&mut admin, 1).await;
        let fixed = closed::<FixedWindowKeys>(
            admin.clone(),
            Quota::per_period(3, Duration::from_micros(w)).unwrap(),
            &prefix,
        );
        let w = window_ending_past_a_millisecond(&mut admin, 2).await;
        let counter = closed::<SlidingWindowCounterKeys>(
            admin.clone(),
            Quota::per_period(3, Duration::from_micros(w)).unwrap(),
            &prefix,
        );

        for i in 0..8 {
            let k = format!("k{i}");
            // The GCRA: "base gap interval capacity tick", tat = base us + gap ticks of tick ns.
            for (name, what) in [
                {
                    bucket.check_key_n(&k, 1 + i % 3).await.unwrap();
                    (bucket.key_name(&k).unwrap(), "bucket")
                },
                {
                    meter.schedule_key_n(&k, 1 + i % 3).await.unwrap();
                    (meter.key_name(&k).unwrap(), "meter")
                },
            ] {
                let raw: String = redis::cmd("GET")
                    .arg(&name)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                let f: Vec<u128> = raw.split(' ').map(|x| x.parse().unwrap()).collect();
                let (base, gap, tick) = (f[0], f[1], f[4]);
                let fresh = (base * 1000 + gap * tick).div_ceil(1000);
                assert_lives_until(&mut admin, &name, fresh, &format!("{what} {raw}")).await;
            }
            // The fixed window: fresh once window i ends.
            fixed.check_key(&k).await.unwrap();
            let name = fixed.key_name(&k).unwrap();
            let (index, window): (u64, u64) = redis::cmd("HMGET")
                .arg(&name)
                .arg("i")
                .arg("w")
                .query_async(&mut admin)
                .await
                .unwrap();
            let (index, window) = (u128::from(index), u128::from(window));
            assert_lives_until(
                &mut admin,
                &name,
                (index + 1) * window,
                &format!("fixed window {index} of {window} us"),
            )
            .await;
            // The counter: fresh once window i + 1 ends (window i counts as the previous one
            // through it).
            counter.check_key(&k).await.unwrap();
            let name = counter.key_name(&k).unwrap();
            let (index, window): (u64, u64) = redis::cmd("HMGET")
                .arg(&name)
                .arg("i")
                .arg("w")
                .query_async(&mut admin)
                .await
                .unwrap();
            let (index, window) = (u128::from(index), u128::from(window));
            assert_lives_until(
                &mut admin,
                &name,
                (index + 2) * window,
                &format!("counter window {index} of {window} us"),
            )
            .await;
            // The log: fresh once its newest entry leaves the window (t - W, t], at its time + W.
            log.check_key_n(&k, 1 + i % 3).await.unwrap();
            let name = log.key_name(&k).unwrap();
            let newest: Vec<(String, f64)> = redis::cmd("ZRANGE")
                .arg(&name)
                .arg(-1)
                .arg(-1)
                .arg("WITHSCORES")
                .query_async(&mut admin)
                .await
                .unwrap();
            let lowest: Vec<String> = redis::cmd("ZRANGE")
                .arg(&name)
                .arg(0)
                .arg(0)
                .query_async(&mut admin)
                .await
                .unwrap();
            let window: u128 = lowest[0].split(':').nth(1).unwrap().parse().unwrap();
            assert_lives_until(
                &mut admin,
                &name,
                newest[0].1 as u128 + window,
                &format!("log entry {:?} of {window} us", newest[0]),
            )
            .await;
        }
    });
}

// --- bad input ---------------------------------------------------------------------------------------

#[test]
fn bad_input_gets_a_clear_error() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let mut admin = redis_manager(&url).await;
        let prefix = fresh_prefix("bad");
        let limiter =
            closed::<TokenBucketKeys>(admin.clone(), Quota::per_second(5).unwrap(), &prefix);
        // A key over 1 KiB, and more than the capacity: refused on the client.
        let long = vec![b'x'; 1025];
        match limiter.check_key(&long).await {
            Err(RedisError::KeyTooLong(e)) => assert_eq!(e.len, 1025),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            limiter.check_key_n("k", 6).await,
            Err(RedisError::InsufficientCapacity(_))
        ));
        assert_eq!(limiter.stats().round_trips, 0);
        // Keys of every byte, the empty key and braces are fine.
        for key in [&b""[..], b"{", b"}", b"a{b}c", b"%", &[0u8, 255, 10, 13]] {
            limiter.check_key(key).await.unwrap();
        }
        // A foreign value, and a structure of another type, at the key.
        let name = limiter.key_name("foreign").unwrap();
        let _: () = redis::cmd("SET")
            .arg(&name)
            .arg("not a bucket")
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_foreign(limiter.check_key("foreign").await, "a string at the key");
        let name = limiter.key_name("typed").unwrap();
        let _: () = redis::cmd("HSET")
            .arg(&name)
            .arg("f")
            .arg("v")
            .query_async(&mut admin)
            .await
            .unwrap();
        match limiter.check_key("typed").await {
            Err(RedisError::Unavailable(u)) => {
                assert_eq!(u.kind(), UnavailableKind::Server);
                assert!(u.detail().contains("WRONGTYPE"), "{u}");
            }
            other => panic!("{other:?}"),
        }
        // A foreign value is the key's problem: it does not open the breaker for the others.
        for _ in 0..10 {
            let _ = limiter.check_key("foreign").await;
        }
        limiter.check_key("fine").await.unwrap();
        // Quotas the scripts cannot count exactly, and bad settings, name their field.
        let too_long = Quota::per_day(1).unwrap().with_capacity(60_000).unwrap();
        let err = RedisLimiter::<TokenBucketKeys>::builder(admin.clone(), too_long)
            .build(FailurePolicy::Closed)
            .unwrap_err();
        assert_eq!(err.field(), "capacity");
        assert!(err.to_string().contains("2^52"), "{err}");
        let odd = Quota::per_period(2, Duration::from_nanos(1_000_500)).unwrap();
        let err = RedisLimiter::<FixedWindowKeys>::builder(admin.clone(), odd)
            .build(FailurePolicy::Closed)
            .unwrap_err();
        assert_eq!(err.field(), "period");
        let err =
            RedisLimiter::<TokenBucketKeys>::builder(admin.clone(), Quota::per_second(1).unwrap())
                .timeout(Duration::ZERO)
                .build(FailurePolicy::Closed)
                .unwrap_err();
        assert_eq!(err.field(), "timeout");
        let err =
            RedisLimiter::<TokenBucketKeys>::builder(admin.clone(), Quota::per_second(1).unwrap())
                .breaker(0, Duration::from_secs(1))
                .build(FailurePolicy::Closed)
                .unwrap_err();
        assert_eq!(err.field(), "failures");
        // A URL that is not one is the client library's error, before any limiter exists.
        assert!(redis::Client::open("not a url").is_err());
    });
}

// --- failure policies, the breaker, recovery --------------------------------------------------------

const TIMEOUT: Duration = Duration::from_millis(50);
const COOL_DOWN: Duration = Duration::from_millis(300);

/// Runs an outage under `policy`: the server hung (`kill -STOP`), then recovered (`-CONT`), then
/// killed (refused connections) and restarted on its port. `fallback` checks an answer given
/// without Redis. No durations are asserted (they belong to the benches): a call that gave up at
/// the timeout is counted as a timeout, one the breaker answered as a skip. The policy answers every call
/// Redis does not decide (counted in its own counter: open admissions, local decisions), and
/// admits as it should (all for `Open`, none for `Closed`, the local limit for `Local`); the
/// breaker opens after 3 failures and closes on a successful probe; the same limiter recovers
/// each time.
fn outage(policy: FailurePolicy, fallback: fn(&Result<Admitted, RedisError>, UnavailableKind)) {
    let Some(server) = Throwaway::start() else {
        return;
    };
    // Answers given without Redis: (open admissions, local decisions) per call, and the calls
    // admitted of the 6 while hung and the 5 while killed.
    let (per_call, admits) = match &policy {
        FailurePolicy::Closed => ((0, 0), (0, 0)),
        FailurePolicy::Open => ((1, 0), (6, 5)),
        // The local limit: 2 an hour, spent while hung.
        FailurePolicy::Local(_) => ((0, 1), (2, 0)),
        other => panic!("a policy outage does not know: {other:?}"),
    };
    let rt = runtime();
    let server = rt.block_on(async move {
        let conn = redis_manager(&server.url()).await;
        let limiter =
            RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(1000).unwrap())
                .timeout(TIMEOUT)
                .breaker(3, COOL_DOWN)
                .build(policy)
                .unwrap();
        limiter.check_key("k").await.unwrap();

        // Hung: three timeouts, then the breaker answers at once.
        server.signal("-STOP");
        let mut admitted = 0;
        for i in 0..6 {
            let r = limiter.check_key("k").await;
            admitted += usize::from(r.is_ok());
            let kind = if i < 3 {
                UnavailableKind::Timeout
            } else {
                UnavailableKind::BreakerOpen
            };
            fallback(&r, kind);
        }
        let s = limiter.stats();
        assert_eq!(
            (s.timeouts, s.failures, s.breaker_opened, s.breaker_skips),
            (3, 3, 1, 3)
        );
        assert_eq!(
            (s.open_admissions, s.local_decisions),
            (per_call.0 * 6, per_call.1 * 6),
            "{s:?}"
        );
        assert_eq!(admitted, admits.0, "admitted while hung: {s:?}");
        assert_eq!(s.decisions, 1 + 6, "{s:?}");

        // Back: after the cool-down one probe closes the breaker, and Redis decides again.
        server.signal("-CONT");
        tokio::time::sleep(COOL_DOWN + Duration::from_millis(20)).await;
        recovered(&limiter).await;

        // Killed: refused connections fail fast, the breaker opens again.
        let mut server = server;
        server.kill_now();
        let before = limiter.stats();
        let mut admitted = 0;
        for i in 0..5 {
            let r = limiter.check_key("k").await;
            admitted += usize::from(r.is_ok());
            // Refused, or still reconnecting when the timeout struck.
            let kind = match &r {
                Err(RedisError::Unavailable(u))
                    if i < 3 && u.kind() == UnavailableKind::Timeout =>
                {
                    UnavailableKind::Timeout
                }
                _ if i < 3 => UnavailableKind::Connection,
                _ => UnavailableKind::BreakerOpen,
            };
            fallback(&r, kind);
        }
        let s = limiter.stats();
        assert_eq!(s.breaker_opened, 2, "{s:?}");
        assert_eq!(
            (
                s.open_admissions - before.open_admissions,
                s.local_decisions - before.local_decisions
            ),
            (per_call.0 * 5, per_call.1 * 5),
            "{s:?}"
        );
        assert_eq!(admitted, admits.1, "admitted while killed: {s:?}");
        // Restarted on its port (empty, and without the script): recovery, and one reload.
        let server = server.restart();
        let reloads = limiter.stats().reloads;
        tokio::time::sleep(COOL_DOWN + Duration::from_millis(20)).await;
        recovered(&limiter).await;
        assert_eq!(limiter.stats().reloads, reloads + 1);
        server
    });
    drop(server);
}

/// Calls until Redis decides (the probe after a cool-down), for at most 5 s.
async fn recovered(limiter: &RedisLimiter) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let before = limiter.stats();
        let r = limiter.check_key("k").await;
        let s = limiter.stats();
        if s.failures == before.failures && s.breaker_skips == before.breaker_skips {
            // Redis answered: a decision, not a fallback.
            assert!(matches!(r, Ok(_) | Err(RedisError::Denied(_))), "{r:?}");
            assert_eq!(
                (s.open_admissions, s.local_decisions),
                (before.open_admissions, before.local_decisions),
                "Redis decided, yet the policy counted a decision: {s:?}"
            );
            return;
        }
        assert!(Instant::now() < deadline, "no recovery within 5 s: {s:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

impl Throwaway {
    fn kill_now(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn unavailable_of(kind: UnavailableKind) -> impl Fn(&Result<Admitted, RedisError>) {
    move |r| match r {
        Err(RedisError::Unavailable(u)) => assert_eq!(u.kind(), kind, "{u}"),
        other => panic!("expected {kind:?}, got {other:?}"),
    }
}

#[test]
fn closed_answers_unavailable_while_redis_is_away() {
    outage(FailurePolicy::Closed, |r, kind| unavailable_of(kind)(r));
}

#[test]
fn open_admits_while_redis_is_away() {
    outage(FailurePolicy::Open, |r, _| {
        let a = r.as_ref().expect("an open admission");
        assert_eq!(a.remaining(), 0);
    });
}

#[test]
fn local_decides_while_redis_is_away() {
    // A local limit far below Redis's: 2 in an hour, so that its denials show.
    // The local limiter decided every call Redis did not (counted), admitting its 2 and refusing
    // the rest, the breaker opened (twice) and closed again, as `outage` checks.
    let local = KeyedLimiter::new(Quota::per_hour(2).unwrap());
    outage(FailurePolicy::Local(local), |r, _| match r {
        Ok(_) | Err(RedisError::Denied(_)) => {}
        other => panic!("a local decision, got {other:?}"),
    });
}

#[test]
fn refused_connections_fail_fast_and_count() {
    let Some(server) = Throwaway::start() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async move {
        let conn = redis_manager(&server.url()).await;
        let local = KeyedLimiter::new(Quota::per_hour(2).unwrap());
        let limiter =
            RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(1000).unwrap())
                .timeout(TIMEOUT)
                .breaker(3, COOL_DOWN)
                .build(FailurePolicy::Local(local))
                .unwrap();
        limiter.check_key("k").await.unwrap();
        let mut server = server;
        server.kill_now();
        let mut denied = 0;
        for _ in 0..5 {
            match limiter.check_key("k").await {
                Ok(_) => {}
                Err(RedisError::Denied(_)) => denied += 1,
                other => panic!("{other:?}"),
            }
        }
        // The local hourly limit of 2 decided all five.
        assert_eq!(denied, 3);
        let s = limiter.stats();
        assert_eq!(s.local_decisions, 5);
        assert_eq!(s.breaker_opened, 1);
        // Bounded, as behaviour rather than a duration: each call to the dead server ended as a
        // failure (a refusal, or the timeout while the connection manager reconnects: either
        // way the call's own bound), three of them opened the breaker, which answered the other
        // two without trying.
        assert_eq!((s.failures, s.breaker_skips), (3, 2), "{s:?}");
    });
}

// --- cluster ----------------------------------------------------------------------------------------

/// The cluster's node URLs, and a guard that keeps the cluster tests from overlapping (a failover
/// stalls the other tests' calls to its shard while the replica takes over).
fn cluster_nodes() -> Option<(Vec<String>, std::sync::MutexGuard<'static, ()>)> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let nodes = var("TOLLGATE_REDIS_CLUSTER")?
        .split(',')
        .map(str::to_owned)
        .collect();
    Some((
        nodes,
        ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    ))
}

async fn cluster(nodes: &[String]) -> redis::cluster_async::ClusterConnection {
    redis::cluster::ClusterClient::new(nodes.to_vec())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

/// `CLUSTER KEYSLOT` of `name`, asked of any node.
async fn keyslot(node: &mut ConnectionManager, name: &[u8]) -> u64 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(name)
        .query_async(node)
        .await
        .unwrap()
}

#[test]
fn a_keys_structures_share_one_slot() {
    let Some((nodes, _one_at_a_time)) = cluster_nodes() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let mut node = redis_manager(&nodes[0]).await;
        let conn = cluster(&nodes).await;
        let q = Quota::per_second(5).unwrap();
        let tb = closed::<TokenBucketKeys>(conn.clone(), q, "tollgate");
        let lm = closed::<LeakyMeterKeys>(conn.clone(), q, "tollgate");
        let fw = closed::<FixedWindowKeys>(conn.clone(), q, "tollgate");
        let sc = closed::<SlidingWindowCounterKeys>(conn.clone(), q, "tollgate");
        let sl = closed::<SlidingWindowLogKeys>(conn.clone(), q, "tollgate");
        let mut slots = std::collections::BTreeSet::new();
        for key in [
            &b""[..],
            b"{",
            b"}",
            b"{}",
            b"a{b}c",
            b"%",
            b"%7B",
            b"user-1",
            b"user-2",
            &[0, 255],
        ] {
            let slot = keyslot(&mut node, &tb.key_name(key).unwrap()).await;
            assert_eq!(
                keyslot(&mut node, &lm.key_name(key).unwrap()).await,
                slot,
                "{key:?}"
            );
            for name in [
                fw.key_name(key).unwrap(),
                sc.key_name(key).unwrap(),
                sl.key_name(key).unwrap(),
            ] {
                assert_eq!(keyslot(&mut node, &name).await, slot, "{key:?}");
            }
            slots.insert(slot);
            // And every structure works through the cluster client.
            tb.check_key(key).await.unwrap();
            lm.check_key(key).await.unwrap();
            fw.check_key(key).await.unwrap();
            sc.check_key(key).await.unwrap();
            sl.check_key(key).await.unwrap();
        }
        assert!(slots.len() > 5, "keys should spread over slots: {slots:?}");
    });
}

/// The primaries' slot ranges and addresses, and each one's replica: `CLUSTER SLOTS`.
async fn shards(node: &mut ConnectionManager) -> Vec<(u64, u64, u16, Option<u16>)> {
    let slots: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(node)
        .await
        .unwrap();
    let port = |v: &redis::Value| match v {
        redis::Value::Array(parts) => match &parts[1] {
            redis::Value::Int(p) => *p as u16,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    slots
        .iter()
        .map(|s| match s {
            redis::Value::Array(parts) => {
                let int = |v: &redis::Value| match v {
                    redis::Value::Int(i) => *i as u64,
                    other => panic!("{other:?}"),
                };
                (
                    int(&parts[0]),
                    int(&parts[1]),
                    port(&parts[2]),
                    parts.get(3).map(port),
                )
            }
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn keys_on_every_primary_keep_their_own_limits() {
    let Some((nodes, _one_at_a_time)) = cluster_nodes() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let mut node = redis_manager(&nodes[0]).await;
        let conn = cluster(&nodes).await;
        let prefix = fresh_prefix("primaries");
        let limiter = closed::<TokenBucketKeys>(conn, Quota::per_hour(3).unwrap(), &prefix);
        let shards = shards(&mut node).await;
        let primaries: std::collections::BTreeSet<u16> = shards.iter().map(|s| s.2).collect();
        assert_eq!(primaries.len(), 3);
        // One key on each primary.
        let mut keys = std::collections::BTreeMap::new();
        for i in 0..200 {
            let key = format!("key-{i}");
            let slot = keyslot(&mut node, &limiter.key_name(&key).unwrap()).await;
            let owner = shards
                .iter()
                .find(|s| s.0 <= slot && slot <= s.1)
                .unwrap()
                .2;
            keys.entry(owner).or_insert(key);
        }
        assert_eq!(keys.len(), 3, "{keys:?}");
        for key in keys.values() {
            for left in (0..3).rev() {
                assert_eq!(limiter.check_key(key).await.unwrap().remaining(), left);
            }
            assert!(matches!(
                limiter.check_key(key).await,
                Err(RedisError::Denied(_))
            ));
        }
        // Each key's denial left the others alone: all three are empty, none over-drawn.
        for key in keys.values() {
            assert_eq!(limiter.peek_key_n(key, 0).await.unwrap().remaining(), 0);
        }
        assert_eq!(
            limiter
                .peek_key_n("untouched", 0)
                .await
                .unwrap()
                .remaining(),
            3
        );
    });
}

#[test]
fn a_failover_under_traffic_keeps_state_and_the_limit() {
    let Some((nodes, _one_at_a_time)) = cluster_nodes() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let mut node = redis_manager(&nodes[0]).await;
        let conn = cluster(&nodes).await;
        let prefix = fresh_prefix("failover");
        // 20 at once, then 10 a second.
        let limiter = Arc::new(
            RedisLimiter::<TokenBucketKeys>::builder(
                conn,
                Quota::per_second(10).unwrap().with_capacity(20).unwrap(),
            )
            .prefix(&prefix)
            .timeout(Duration::from_secs(2))
            .build(FailurePolicy::Closed)
            .unwrap(),
        );
        let name = limiter.key_name("hot").unwrap();
        let slot = keyslot(&mut node, &name).await;
        let (_, _, primary, replica) = shards(&mut node)
            .await
            .into_iter()
            .find(|s| s.0 <= slot && slot <= s.1)
            .unwrap();
        let replica = replica.expect("every primary has a replica");
        let mut replica_conn = redis_manager(&format!("redis://127.0.0.1:{replica}/")).await;
        let mut time_conn = redis_manager(&format!("redis://127.0.0.1:{primary}/")).await;
        let start = server_micros(&mut time_conn).await;

        let traffic = {
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let (mut admitted, mut unavailable) = (0u64, 0u64);
                let until = Instant::now() + Duration::from_millis(2500);
                while Instant::now() < until {
                    match limiter.check_key("hot").await {
                        Ok(_) => admitted += 1,
                        Err(RedisError::Denied(_)) => {}
                        Err(RedisError::Unavailable(_)) => unavailable += 1,
                        Err(e) => panic!("{e}"),
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (admitted, unavailable)
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        // The traffic so far loaded the script (once, on every node).
        let reloads = limiter.stats().reloads;
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query_async(&mut replica_conn)
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut replica_conn)
                .await
                .unwrap();
            if info.contains("role:master") {
                break;
            }
            assert!(Instant::now() < deadline, "no failover within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (admitted, unavailable) = traffic.await.unwrap();
        let elapsed_us = server_micros(&mut replica_conn).await - start;
        let bound = 20 + elapsed_us * 10 / 1_000_000 + 1;
        assert!(
            admitted <= bound,
            "admitted {admitted} > C + R x t = {bound}"
        );
        assert!(admitted >= 20, "{admitted}");
        // The state survived: the promoted replica holds the key.
        let exists: u64 = redis::cmd("EXISTS")
            .arg(&name)
            .query_async(&mut replica_conn)
            .await
            .unwrap();
        assert_eq!(exists, 1);
        // The cluster client loads scripts on every node, replicas included, so a promoted replica
        // usually has it already: at most one reload for the failover.
        let s = limiter.stats();
        assert!(s.reloads <= reloads + 1, "{s:?}");
        eprintln!(
            "failover: admitted {admitted} (bound {bound}), {unavailable} unavailable, {s:?}"
        );
    });
}

// --- leases ----------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum LeaseOp {
    Forward {
        quarters: u64,
        jitter: u64,
    },
    Back {
        quarters: u64,
        jitter: u64,
    },
    /// A lease of up to `n`, giving back `back` first.
    Lease {
        n: u64,
        back: u64,
    },
    /// A per-call admission of `n` on the same key.
    Take(u64),
    /// `take_up_to_key(n)`: as many as are there, at most `n`.
    TakeUpTo(u64),
}

#[test]
fn a_lease_and_a_partial_take_answer_as_the_in_process_bucket() {
    let url = redis_or_skip!();
    let rt = runtime();
    let conn = rt.block_on(redis_manager(&url));
    let op = prop_oneof![
        3 => (0..12u64, 0..1000u64).prop_map(|(quarters, jitter)| LeaseOp::Forward { quarters, jitter }),
        1 => (0..8u64, 0..1000u64).prop_map(|(quarters, jitter)| LeaseOp::Back { quarters, jitter }),
        4 => (0..=12u64, 0..=4u64).prop_map(|(n, back)| LeaseOp::Lease { n, back }),
        2 => (1..=3u64).prop_map(LeaseOp::Take),
        2 => prop_oneof![0..=14u64, Just(u64::MAX)].prop_map(LeaseOp::TakeUpTo),
    ];
    proptest!(testkit::strategies::unpersisted(96), |(quota in gcra_quotas(), base in bases(), ops in proptest::collection::vec(op, 1..40))| {
        let capacity = quota.capacity();
        // Built at reading 0, so that it is full at every reading of the case, as a key Redis
        // has never seen is.
        let bucket = tollgate::TokenBucket::with_clock(quota, ManualClock::new());
        let clock = ManualClock::new();
        let redis = RedisLimiter::<TokenBucketKeys>::builder(conn.clone(), quota)
            .prefix(fresh_prefix("lease"))
            .timeout(Duration::from_secs(5))
            .client_clock(clock.clone())
            .build(FailurePolicy::Closed)
            .unwrap();
        let interval_us = (quota.interval().as_nanos() / 1000).max(1) as u64;
        let step = |q: u64, j: u64| (interval_us.saturating_mul(q) / 4).min(1 << 40) + j;
        let mut t: u64 = 1 << 42;
        for (i, &op) in ops.iter().enumerate() {
            let now = Nanos::new(t * 1000);
            clock.set(Nanos::new((base + t) * 1000));
            match op {
                LeaseOp::Forward { quarters, jitter } => t += step(quarters, jitter),
                LeaseOp::Back { quarters, jitter } => t -= step(quarters, jitter).min(t - 1),
                LeaseOp::Lease { n, back } => {
                    let (n, back) = (n.min(capacity), back.min(capacity));
                    bucket.refund_at(back, now);
                    let k = bucket.remaining_at(now).min(n);
                    let expected_wait = if k > 0 {
                        bucket.try_acquire_n_at(k, now).unwrap();
                        Duration::ZERO
                    } else if n > 0 {
                        bucket.peek_n_at(1, now).unwrap_err().denied().unwrap().retry_after()
                    } else {
                        Duration::ZERO
                    };
                    let got = rt.block_on(redis.lease_key("k", n, back)).unwrap();
                    prop_assert_eq!((got.granted(), got.retry_after()), (k, expected_wait), "op {} ({:?}) at t = {}", i, op, t);
                }
                LeaseOp::Take(n) => {
                    let expected = from_direct(bucket.try_acquire_n_at(n, now), admitted);
                    let got = rt.block_on(async { from_redis(redis.check_key_n("k", n).await, admitted) });
                    prop_assert_eq!(got, expected, "op {} ({:?}) at t = {}", i, op, t);
                }
                LeaseOp::TakeUpTo(n) => {
                    let expected = bucket
                        .take_up_to_at(n, now)
                        .map(|p| (p.taken(), p.remaining()))
                        .map_err(|d| d.retry_after());
                    let got = rt.block_on(redis.take_up_to_key("k", n)).map(|p| (p.taken(), p.remaining())).map_err(|e| match e {
                        RedisError::Denied(d) => d.retry_after(),
                        other => panic!("{other}"),
                    });
                    prop_assert_eq!(got, expected, "op {} ({:?}) at t = {}", i, op, t);
                }
            }
        }
    });
}

#[test]
fn leased_buckets_never_exceed_c_plus_r_times_t_plus_l() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        // 50 at once, then 100 a second; leases of 20 that live 200 ms.
        let quota = Quota::per_second(100).unwrap().with_capacity(50).unwrap();
        let lifetime = Duration::from_millis(200);
        let prefix = fresh_prefix("leased");
        let mut probe = redis_manager(&url).await;
        let mut buckets = Vec::new();
        for _ in 0..2 {
            let limiter =
                RedisLimiter::<TokenBucketKeys>::builder(redis_manager(&url).await, quota)
                    .prefix(&prefix)
                    .timeout(Duration::from_secs(2))
                    .build(FailurePolicy::Closed)
                    .unwrap();
            buckets.push(Arc::new(
                tollgate::redis::LeasedBucket::builder(Arc::new(limiter), "shared")
                    .batch(20)
                    .lifetime(lifetime)
                    .build()
                    .unwrap(),
            ));
        }
        let start = server_micros(&mut probe).await;
        let mut tasks = Vec::new();
        for i in 0..8 {
            let bucket = buckets[i % 2].clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                let until = Instant::now() + Duration::from_millis(1500);
                while Instant::now() < until {
                    match bucket.acquire().await {
                        Ok(_) => admitted += 1,
                        Err(RedisError::Denied(_)) => {
                            tokio::time::sleep(Duration::from_millis(1)).await
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
                admitted
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        let elapsed_us = server_micros(&mut probe).await - start;
        let bound = 50 + (elapsed_us + lifetime.as_micros() as u64) * 100 / 1_000_000 + 1;
        let leased: u64 = buckets.iter().map(|b| b.stats().leased).sum();
        let counted: u64 = buckets.iter().map(|b| b.stats().admitted).sum();
        assert_eq!(counted, admitted);
        assert!(admitted <= leased, "admitted {admitted} > leased {leased}");
        assert!(
            admitted <= bound,
            "admitted {admitted} > C + R x (t + L) = {bound}"
        );
        // Most of what the shared bucket allowed was used: the leases are not starving it.
        assert!(
            admitted >= 50 + elapsed_us * 100 / 1_000_000 / 2,
            "only {admitted} admitted"
        );
        // Closing gives back exactly what was leased and not spent (or had expired unspent).
        let mut returned = 0;
        for b in buckets {
            let b = Arc::into_inner(b).unwrap();
            let before = b.stats();
            returned += b.close().await.unwrap() + before.returned;
        }
        assert!(
            returned <= leased - admitted,
            "returned {returned} of {} unspent",
            leased - admitted
        );
    });
}

#[test]
fn a_lease_serves_a_hundred_admissions_per_round_trip() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let limiter = RedisLimiter::<TokenBucketKeys>::builder(
            redis_manager(&url).await,
            Quota::per_second(1_000_000_000)
                .unwrap()
                .with_capacity(1_000_000)
                .unwrap(),
        )
        .prefix(fresh_prefix("ratio"))
        .build(FailurePolicy::Closed)
        .unwrap();
        let bucket = tollgate::redis::LeasedBucket::builder(Arc::new(limiter), "fast")
            .batch(100)
            .build()
            .unwrap();
        let mut admitted = 0u64;
        while admitted < 20_000 {
            match bucket.acquire().await {
                Ok(_) => admitted += 1,
                // The stock ran out before the next lease landed: ask again.
                Err(RedisError::Denied(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        let s = bucket.stats();
        assert!(s.admitted >= 20_000);
        let per_admission = s.leases as f64 / s.admitted as f64;
        assert!(
            per_admission <= 0.02,
            "{per_admission} round trips per admission: {s:?}"
        );
        assert!(s.admitted <= s.leased);
        // What goes back: the stock (at most one batch, 100) and the leftover the last landing
        // replaced, which the next lease call would have returned (at most the low-water mark,
        // 50 by default: the lease began at or below it). The leftover is there when the lease
        // lands before the stock runs out, as it can on a loaded machine (a fresh-clone run of the
        // test script gave back more than 100 here).
        let back = bucket.close().await.unwrap();
        assert!(back <= 100 + 50, "{back} given back: {s:?}");
    });
}

/// A leased token offered after its lease's lifetime is refused: the documented bound
/// C + R x (t + L) counts every leased token as spent within L of its lease. The shared bucket
/// holds exactly one batch (and refills once an hour), so the lease after it finds nothing
/// and the expired tokens are the only ones the local stock could offer.
#[test]
fn a_leased_token_is_refused_once_its_lease_has_expired() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let quota = Quota::per_hour(1).unwrap().with_capacity(3).unwrap();
        let limiter = Arc::new(
            RedisLimiter::<TokenBucketKeys>::builder(redis_manager(&url).await, quota)
                .prefix(fresh_prefix("expired-lease"))
                .timeout(Duration::from_secs(5))
                .build(FailurePolicy::Closed)
                .unwrap(),
        );
        let lifetime = Duration::from_millis(20);
        let bucket = tollgate::redis::LeasedBucket::builder(limiter.clone(), "k")
            .batch(3)
            .low_water(0)
            .lifetime(lifetime)
            .build()
            .unwrap();
        // The first call starts the lease of all three tokens and waits for it to land; whether
        // it lands within its lifetime or not, its tokens are in the stock until they expire.
        let _ = bucket.acquire().await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while bucket.stats().leased < 3 {
            assert!(
                Instant::now() < deadline,
                "no lease landed: {:?}",
                bucket.stats()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let landed = bucket.stats();
        // (A lease that landed expired on a slow machine may have been followed by one that found
        // nothing: either way, three tokens were leased.)
        assert_eq!(landed.leased, 3, "{landed:?}");
        assert!(landed.admitted <= 1, "{landed:?}");
        // The shared bucket is empty: all three were leased.
        assert_eq!(limiter.peek_key_n("k", 0).await.unwrap().remaining(), 0);
        // Past the lease's lifetime, by the stock's own clock.
        while bucket.available() > 0 {
            assert!(Instant::now() < deadline, "the lease never expired");
            tokio::time::sleep(lifetime / 4).await;
        }
        // The unspent tokens are there, expired: none of them may be spent.
        for i in 0..3 {
            match bucket.try_acquire() {
                Err(RedisError::Denied(_)) => {}
                other => panic!("try {i}: a token of an expired lease: {other:?}"),
            }
        }
        match bucket.acquire().await {
            Err(RedisError::Denied(d)) => assert!(d.retry_after() > Duration::ZERO, "{d:?}"),
            other => panic!("a token after the lease expired: {other:?}"),
        }
        let after = bucket.stats();
        assert_eq!(after.admitted, landed.admitted, "{after:?}");
        assert_eq!(after.leased, 3, "{after:?}");
        // Expired tokens are dropped, not given back.
        assert_eq!(bucket.close().await.unwrap(), 0);
    });
}

// --- quota changes -----------------------------------------------------------------------------------

/// Four of five taken under one quota, then the same key read under a tenfold one: never more
/// remaining than the first quota leaves (1), until its state has drained.
async fn after_an_upgrade<A: RedisAlgorithm>(url: &str, small: Quota, large: Quota) {
    let prefix = fresh_prefix("upgrade");
    let build = |q: Quota, conn: ConnectionManager| {
        RedisLimiter::<A>::builder(conn, q)
            .prefix(&prefix)
            .build(FailurePolicy::Closed)
            .unwrap()
    };
    let before = build(small, redis_manager(url).await);
    let after = build(large, redis_manager(url).await);
    before.check_key_n("k", 4).await.unwrap();
    assert_eq!(before.peek_key_n("k", 0).await.unwrap().remaining(), 1);
    // Alone, the larger quota would leave 46 (or more).
    assert_eq!(
        after.peek_key_n("k", 0).await.unwrap().remaining(),
        1,
        "{}",
        A::SUFFIX
    );
    after.check_key("k").await.unwrap();
    assert!(
        matches!(after.check_key("k").await, Err(RedisError::Denied(_))),
        "{}: a second admission under the larger quota",
        A::SUFFIX
    );
    // A key written only under the larger quota has all of it.
    assert_eq!(after.peek_key_n("other", 0).await.unwrap().remaining(), 50);
}

/// `set_quota` on one limiter: the key keeps what it had left (never more than the new quota
/// allows), every later call sends the new quota, and a quota the script cannot carry is refused
/// with nothing changed.
async fn set_quota_on<A: RedisAlgorithm>(url: &str, small: Quota, large: Quota) {
    let limiter = closed::<A>(redis_manager(url).await, large, &fresh_prefix("set-quota"));
    limiter.check_key_n("k", 45).await.unwrap(); // 5 of 50 left
    limiter.set_quota(small).unwrap();
    assert_eq!(limiter.quota(), small);
    assert!(
        limiter.peek_key_n("k", 0).await.unwrap().remaining() <= 5,
        "{}: more than either quota leaves",
        A::SUFFIX
    );
    // A key first seen after the change has the new quota, and no more.
    limiter.check_key_n("fresh", 5).await.unwrap();
    assert!(
        matches!(limiter.check_key("fresh").await, Err(RedisError::Denied(_))),
        "{}: a sixth admission under 5 a minute",
        A::SUFFIX
    );
    // Back up: what was left carries over, not a refill.
    limiter.set_quota(large).unwrap();
    assert!(limiter.peek_key_n("fresh", 0).await.unwrap().remaining() <= 5);
}

#[test]
fn state_written_under_another_quota_is_read_conservatively() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let small = Quota::per_minute(5).unwrap();
        let large = Quota::per_minute(50).unwrap();
        after_an_upgrade::<TokenBucketKeys>(&url, small, large).await;
        after_an_upgrade::<FixedWindowKeys>(&url, small, large).await;
        after_an_upgrade::<SlidingWindowCounterKeys>(&url, small, large).await;
        after_an_upgrade::<SlidingWindowLogKeys>(&url, small, large).await;
        // The same through one limiter's `set_quota`.
        set_quota_on::<TokenBucketKeys>(&url, small, large).await;
        set_quota_on::<FixedWindowKeys>(&url, small, large).await;
        set_quota_on::<SlidingWindowCounterKeys>(&url, small, large).await;
        set_quota_on::<SlidingWindowLogKeys>(&url, small, large).await;
        // The log's ring must fit the script: a count beyond it is refused, nothing changed.
        let log = closed::<SlidingWindowLogKeys>(
            redis_manager(&url).await,
            small,
            &fresh_prefix("set-quota-log"),
        );
        assert!(log
            .set_quota(Quota::per_minute(100_000_000).unwrap())
            .is_err());
        assert_eq!(log.quota(), small);
        // The meter's strict admission needs an empty queue under any quota.
        let prefix = fresh_prefix("meter-upgrade");
        let meter = |q| {
            let url = url.clone();
            let prefix = prefix.clone();
            async move {
                RedisLimiter::<LeakyMeterKeys>::builder(redis_manager(&url).await, q)
                    .prefix(&prefix)
                    .build(FailurePolicy::Closed)
                    .unwrap()
            }
        };
        let (before, after) = (meter(small).await, meter(large).await);
        before.schedule_key_n("k", 4).await.unwrap();
        assert!(matches!(
            after.check_key("k").await,
            Err(RedisError::Denied(_))
        ));
        // One place was left under the small quota: the larger one schedules one, then none.
        assert_eq!(after.schedule_key_n("k", 1).await.unwrap().remaining(), 0);
        assert!(matches!(
            after.schedule_key_n("k", 1).await,
            Err(RedisError::Denied(_))
        ));
    });
}

// --- the edge of the exact range ----------------------------------------------------------------------

/// `ForeignValue`, or a panic naming what came back instead.
fn assert_foreign<T: std::fmt::Debug>(r: Result<T, RedisError>, what: &str) {
    match r {
        Err(RedisError::Unavailable(u)) => {
            assert_eq!(u.kind(), UnavailableKind::ForeignValue, "{what}: {u}")
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// The defects the `redis_scripts` fuzz target found near 2^53, each on a real server.
#[test]
fn states_at_the_edge_of_the_exact_range() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let mut admin = redis_manager(&url).await;
        let prefix = fresh_prefix("edge");
        let clock = ManualClock::new();
        let at_us = |us: u64| clock.set(Nanos::new(us * 1000));
        let late: u64 = (1 << 53) - 2;

        // Tokens a lease gives back at a reading more than 2^52 ns before tat (here 2^53 - 2 us
        // before it, beyond what a span from the reading can hold) move the state back exactly,
        // and the key stays the bucket's: at the late reading again, the token given back is
        // there, and no more. The script used to write the clamped span as the new gap, which
        // the next call refused as a foreign value.
        let quota = Quota::per_second(1).unwrap();
        let bucket = RedisLimiter::<TokenBucketKeys>::builder(admin.clone(), quota)
            .prefix(&prefix)
            .client_clock(clock.clone())
            .build(FailurePolicy::Closed)
            .unwrap();
        let twin = tollgate::TokenBucket::with_clock(quota, ManualClock::new());
        let (late_ns, early_ns) = (Nanos::new(late * 1000), Nanos::new(1000));
        at_us(late);
        bucket.check_key("tb").await.unwrap();
        twin.try_acquire_at(late_ns).unwrap();
        at_us(1);
        let lease = bucket.lease_key("tb", 1, 1).await.unwrap();
        twin.refund_at(1, early_ns);
        let expected = twin.peek_n_at(1, early_ns).unwrap_err();
        assert_eq!(lease.granted(), 0);
        assert_eq!(
            lease.retry_after(),
            Duration::from_nanos(1 << 53),
            "the wait, clamped at 2^53 ns (in process: {:?})",
            expected.denied().unwrap().retry_after()
        );
        at_us(late);
        assert_eq!(
            from_redis(bucket.check_key("tb").await, admitted),
            from_direct(twin.try_acquire_n_at(1, late_ns), admitted)
        );
        assert!(matches!(
            bucket.check_key("tb").await,
            Err(RedisError::Denied(_))
        ));

        // The log at a reading far before its newest entry: the wait is clamped at 2^53 us
        // (it used to be summed past 2^53, and rounded).
        let window = Quota::per_period(1, Duration::from_micros(1 << 52)).unwrap();
        let log = RedisLimiter::<SlidingWindowLogKeys>::builder(admin.clone(), window)
            .prefix(&prefix)
            .client_clock(clock.clone())
            .build(FailurePolicy::Closed)
            .unwrap();
        at_us(late);
        log.check_key("sl").await.unwrap();
        at_us(0);
        match log.check_key("sl").await {
            Err(RedisError::Denied(d)) => {
                assert_eq!(d.retry_after(), Duration::from_micros(1 << 53));
                assert_eq!(d.reset_after(), Duration::from_micros(1 << 53));
            }
            other => panic!("{other:?}"),
        }

        // A log whose newest entry is no time below 2^53 us is foreign.
        let log = closed::<SlidingWindowLogKeys>(admin.clone(), window, &prefix);
        for (k, score) in [
            ("inf", "+inf"),
            ("past", "1e19"),
            ("edge", "9007199254740992"),
        ] {
            let _: () = redis::cmd("ZADD")
                .arg(log.key_name(k).unwrap())
                .arg("-inf")
                .arg(format!("quota:{}:1", 1u64 << 52))
                .arg(score)
                .arg("1:1")
                .query_async(&mut admin)
                .await
                .unwrap();
            assert_foreign(log.check_key(k).await, score);
        }
        // And so is one written under a quota no log has: a window past 2^52 us, a limit of 0.
        for (k, member) in [
            ("wide", format!("quota:{}:1", (1u64 << 52) + 1)),
            ("none", format!("quota:{}:0", 1u64 << 52)),
            ("vast", "quota:18446744073709551615:5".to_string()),
        ] {
            let _: () = redis::cmd("ZADD")
                .arg(log.key_name(k).unwrap())
                .arg("-inf")
                .arg(&member)
                .arg("1")
                .arg("1:1")
                .query_async(&mut admin)
                .await
                .unwrap();
            assert_foreign(log.check_key(k).await, &member);
        }

        // Windows whose index is past 2^53, or that would start there, are foreign.
        let quota = Quota::per_second(5).unwrap();
        let fixed = closed::<FixedWindowKeys>(admin.clone(), quota, &prefix);
        let counter = closed::<SlidingWindowCounterKeys>(admin.clone(), quota, &prefix);
        // 2^53 / 10^6 windows of a second start below 2^53 us; the next does not.
        let last = (1u64 << 53) / 1_000_000;
        for (k, index) in [
            ("huge", "99999999999999999999".to_string()),
            ("late", (last + 1).to_string()),
        ] {
            for name in [fixed.key_name(k).unwrap(), counter.key_name(k).unwrap()] {
                let _: () = redis::cmd("HSET")
                    .arg(name)
                    .arg(&[("i", index.as_str()), ("p", "0"), ("c", "1")])
                    .arg(&[("w", "1000000"), ("n", "5")])
                    .query_async(&mut admin)
                    .await
                    .unwrap();
            }
            assert_foreign(fixed.check_key(k).await, &index);
            assert_foreign(counter.check_key(k).await, &index);
        }
        // The last window that starts below 2^53 us is the script's own.
        for name in [
            fixed.key_name("last").unwrap(),
            counter.key_name("last").unwrap(),
        ] {
            let _: () = redis::cmd("HSET")
                .arg(name)
                .arg(&[
                    ("i", last.to_string()),
                    ("p", "0".into()),
                    ("c", "1".into()),
                ])
                .arg(&[("w", "1000000"), ("n", "5")])
                .query_async(&mut admin)
                .await
                .unwrap();
        }
        assert_eq!(fixed.check_key("last").await.unwrap().remaining(), 3);
        assert!(counter.check_key("last").await.is_ok());
    });
}

// --- behind the HTTP middleware -------------------------------------------------------------------

/// The tower layer over a Redis limiter: the decision comes back through a future, and the
/// responses are those of an in-process limiter's.
#[cfg(feature = "tower")]
#[test]
fn the_http_layer_enforces_a_redis_limit() {
    use std::convert::Infallible;
    use std::net::SocketAddr;

    use http::{Request, Response, StatusCode};
    use tollgate::middleware::{peer_ip, LimitLayer, Redis};
    use tower::{service_fn, Layer, ServiceExt};

    let Some(url) = var("TOLLGATE_REDIS_URL") else {
        return;
    };
    runtime().block_on(async {
        let conn = redis_manager(&url).await;
        let limiter =
            closed::<TokenBucketKeys>(conn, Quota::per_minute(2).unwrap(), &fresh_prefix("layer"));
        let layer = LimitLayer::new(Redis::new(Arc::new(limiter)), peer_ip())
            .build()
            .unwrap();
        let svc = layer.layer(service_fn(|_req: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        }));
        let from = |host: u8| {
            let mut req = Request::new(String::new());
            req.extensions_mut()
                .insert(SocketAddr::from(([127, 0, 0, host], 40000)));
            req
        };
        for _ in 0..2 {
            let res = svc.clone().oneshot(from(2)).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            assert_eq!(res.headers()["ratelimit-policy"], r#""default";q=2;w=60"#);
        }
        let denied = svc.clone().oneshot(from(2)).await.unwrap();
        assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = denied.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=30).contains(&retry), "{retry}");
        // Another client has its own limit on the server.
        let other = svc.clone().oneshot(from(3)).await.unwrap();
        assert_eq!(other.status(), StatusCode::OK);
    });
}

/// A Redis server out of reach, with the limiter failing closed: 503 with the configured
/// `Retry-After`, and the inner service is not called.
#[cfg(feature = "tower")]
#[test]
fn the_http_layer_answers_503_when_redis_cannot_decide() {
    use std::convert::Infallible;
    use std::net::SocketAddr;
    use std::sync::atomic::AtomicBool;

    use http::{Request, Response, StatusCode};
    use tollgate::middleware::{peer_ip, LimitLayer, Redis};
    use tower::{service_fn, Layer, ServiceExt};

    runtime().block_on(async {
        // Nothing listens on port 1.
        let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
        let conn = client
            .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
            .unwrap();
        let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(2).unwrap())
            .timeout(Duration::from_millis(200))
            .build(FailurePolicy::Closed)
            .unwrap();
        let layer = LimitLayer::new(Redis::new(Arc::new(limiter)), peer_ip())
            .unavailable(
                StatusCode::SERVICE_UNAVAILABLE,
                Some(Duration::from_millis(2500)),
            )
            .build()
            .unwrap();
        let called = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&called);
        let svc = layer.layer(service_fn(move |_req: Request<String>| {
            seen.store(true, Ordering::Relaxed);
            async { Ok::<_, Infallible>(Response::new(String::new())) }
        }));
        let mut req = Request::new(String::new());
        req.extensions_mut()
            .insert(SocketAddr::from(([127, 0, 0, 2], 40000)));
        let res = svc.oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()["retry-after"], "3");
        assert!(res.headers().get("ratelimit").is_none());
        assert!(!called.load(Ordering::Relaxed));
    });
}

/// What a response of the layer says: the status and the fields the decision sets.
#[cfg(feature = "tower")]
#[derive(Debug, PartialEq, Eq)]
struct Said {
    status: http::StatusCode,
    ratelimit: Option<String>,
    retry_after: Option<String>,
}

/// What the layer must say for the decision `answer` of limit `name`: the fields of an in-process
/// limiter's (`t` and `Retry-After` rounded up, `Retry-After` at least 1 and not before `t`).
#[cfg(feature = "tower")]
fn said_of(name: &str, answer: Result<Admitted, RedisError>) -> Said {
    let ceil = |d: Duration| d.as_secs() + u64::from(d.subsec_nanos() > 0);
    let field = |r: u64, next: Option<Duration>| match next.map(ceil) {
        Some(t) => format!("\"{name}\";r={r};t={t}"),
        None => format!("\"{name}\";r={r}"),
    };
    match answer {
        Ok(a) => Said {
            status: http::StatusCode::OK,
            ratelimit: Some(field(a.remaining(), a.next_after())),
            retry_after: None,
        },
        Err(RedisError::Denied(d)) => {
            let t = d.next_after().map(ceil).unwrap_or(0);
            let retry = ceil(d.retry_after()).max(1).max(t);
            Said {
                status: http::StatusCode::TOO_MANY_REQUESTS,
                ratelimit: Some(field(d.remaining(), d.next_after())),
                retry_after: Some(retry.to_string()),
            }
        }
        Err(RedisError::InsufficientCapacity(_)) => Said {
            status: http::StatusCode::TOO_MANY_REQUESTS,
            ratelimit: None,
            retry_after: None,
        },
        Err(other) => panic!("unexpected {other:?}"),
    }
}

/// What `res` says (each field at most once).
#[cfg(feature = "tower")]
fn said<B>(res: &http::Response<B>) -> Said {
    let one = |name: &str| {
        let mut all = res.headers().get_all(name).iter();
        let first = all.next().map(|v| v.to_str().unwrap().to_string());
        assert!(all.next().is_none(), "{name} twice");
        first
    };
    Said {
        status: res.status(),
        ratelimit: one("ratelimit"),
        retry_after: one("retry-after"),
    }
}

/// Several Redis limits behind the layer (`RedisAll`), mirroring the in-process `KeyedAllOf`'s
/// test (tests/middleware_fields.rs): `RateLimit-Policy` lists every limit, `RateLimit` names
/// the one the decision was from (the binding one of an admission, the refusing one with the
/// longest wait of a denial), and `Retry-After` is that longest wait. The index is known only
/// when Redis answers, so it comes through the backend's future. Checked step by step against a
/// twin `RedisAllOf`'s own indexed answers, both on one client clock.
#[cfg(feature = "tower")]
#[test]
fn the_http_layer_names_the_binding_and_the_refusing_limit_of_several_in_redis() {
    use std::convert::Infallible;

    use http::{Request, Response};
    use tollgate::middleware::{global, LimitLayer, RedisAll};
    use tower::{service_fn, Layer, ServiceExt};

    let url = redis_or_skip!();
    runtime().block_on(async {
        let conn = redis_manager(&url).await;
        let clock = ManualClock::new();
        let quotas = [
            Quota::per_second(2).unwrap(),
            Quota::per_minute(30).unwrap().with_capacity(5).unwrap(),
        ];
        let names = ["burst", "minute"];
        let listed = r#""burst";q=2;w=1, "minute";q=30;w=60;tollgate-burst=5"#;
        let limits = Arc::new(several(
            conn.clone(),
            &quotas,
            &fresh_prefix("layer-all"),
            Some(&clock),
        ));
        let twin = several(conn, &quotas, &fresh_prefix("layer-twin"), Some(&clock));
        let layer = LimitLayer::new(RedisAll::new(Arc::clone(&limits)), global())
            .tier_names(names)
            .cost(|head| {
                head.headers
                    .get("x-cost")
                    .map_or(1, |v| v.to_str().unwrap().parse().unwrap())
            })
            .build()
            .unwrap();
        let svc = layer.layer(service_fn(|_req: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
        let mut t_us = today_us(1);
        // Requests costing 1 every 100 ms, then a pause, then more: both limits get to bind and
        // to refuse (the second once its burst is spent, waiting longer than the first). Last, a
        // request for 3, more than the first limit ever holds.
        let steps = [
            0, 100, 100, 100, 100, 100, 100, 100, 2_000, 100, 100, 100, 100, 100, 100, 100, 100,
        ];
        let mut named = std::collections::BTreeSet::new();
        let mut decided = 0;
        for (i, (&advance_ms, cost)) in steps
            .iter()
            .zip(std::iter::repeat_n(1, steps.len() - 1).chain([3u64]))
            .enumerate()
        {
            t_us += advance_ms * 1000;
            clock.set(Nanos::new(t_us * 1000));
            let (at, answer) = twin.check_key_n_indexed("global", cost).await;
            let at = at.unwrap_or_else(|| panic!("step {i}: no limit named: {answer:?}"));
            if cost <= 2 {
                named.insert((names[at], answer.is_ok()));
                decided += 1;
            }
            let req = Request::builder()
                .header("x-cost", cost.to_string())
                .body(String::new())
                .unwrap();
            let res = svc.clone().oneshot(req).await.unwrap();
            assert_eq!(said(&res), said_of(names[at], answer), "step {i}");
            assert_eq!(res.headers()["ratelimit-policy"], listed, "step {i}");
        }
        // Each limit bound an admission and refused a request at some step (the request too
        // large for the first limit aside).
        assert_eq!(named.len(), 4, "{named:?}");
        // One round trip per decision (two more for a reload); the request too large took none.
        let stats = limits.stats();
        assert_eq!(stats.decisions, decided, "{stats:?}");
        assert_eq!(stats.round_trips - 2 * stats.reloads, decided, "{stats:?}");
    });
}

/// Several Redis limits behind the layer when Redis cannot decide (nothing listens on port 1):
/// `Closed` is 503 with the configured `Retry-After`, the policies and no `RateLimit`, and the
/// inner service is not called; `Open` admits, and `Local` decides in process, each named under
/// the first policy (no limit of the server's decided); a request larger than a limit is refused
/// before any round trip, whatever the policy; and the quotas cannot be changed through the
/// layer. Needs no server.
#[cfg(feature = "tower")]
#[test]
fn the_http_layer_over_several_redis_limits_follows_the_failure_policy() {
    use std::convert::Infallible;
    use std::sync::atomic::AtomicU64;

    use http::{Request, Response, StatusCode};
    use tollgate::middleware::{global, LimitLayer, RedisAll, SetQuotaError};
    use tower::{service_fn, Layer, ServiceExt};

    let quotas = [
        Quota::per_second(10).unwrap(),
        Quota::per_minute(3).unwrap(),
    ];
    let listed = r#""burst";q=10;w=1, "minute";q=3;w=60"#;
    runtime().block_on(async {
        let layer = |failure| {
            let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
            let conn = client
                .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
                .unwrap();
            let limits = RedisAllOf::builder(conn, quotas)
                .timeout(Duration::from_millis(200))
                .build(failure)
                .unwrap();
            LimitLayer::new(RedisAll::new(Arc::new(limits)), global())
                .tier_names(["burst", "minute"])
                .unavailable(
                    StatusCode::SERVICE_UNAVAILABLE,
                    Some(Duration::from_millis(2500)),
                )
                .cost(|head| {
                    head.headers
                        .get("x-cost")
                        .map_or(1, |v| v.to_str().unwrap().parse().unwrap())
                })
                .build()
                .unwrap()
        };
        let called = Arc::new(AtomicU64::new(0));
        let svc = |layer: &LimitLayer<RedisAll, _>| {
            let seen = Arc::clone(&called);
            layer.layer(service_fn(move |_req: Request<String>| {
                seen.fetch_add(1, Ordering::Relaxed);
                async { Ok::<_, Infallible>(Response::new(String::new())) }
            }))
        };
        let req = |cost: u64| {
            Request::builder()
                .header("x-cost", cost.to_string())
                .body(String::new())
                .unwrap()
        };

        // Closed: 503, the configured wait, the policies, no `RateLimit`; not passed on.
        let closed = layer(AllOfFailurePolicy::Closed);
        let res = svc(&closed).oneshot(req(1)).await.unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(res.headers()["retry-after"], "3");
        assert_eq!(res.headers()["ratelimit-policy"], listed);
        assert!(res.headers().get("ratelimit").is_none());
        assert_eq!(called.load(Ordering::Relaxed), 0);
        // The quotas cannot change: `RedisAllOf` has no `set_quota`.
        let handle = closed.quota_handle();
        for tier in 0..2 {
            let err = handle
                .set_tier_quota(tier, Quota::per_second(20).unwrap())
                .unwrap_err();
            assert!(matches!(err, SetQuotaError::Unsupported { .. }), "{err}");
            assert!(err.to_string().contains("RedisAll"), "{err}");
        }
        assert_eq!(handle.quotas(), quotas);

        // Open: admitted with nothing known, under the first policy; passed on.
        let open = layer(AllOfFailurePolicy::Open);
        for _ in 0..4 {
            let res = svc(&open).oneshot(req(1)).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            assert_eq!(res.headers()["ratelimit-policy"], listed);
            let ratelimit = res.headers()["ratelimit"].to_str().unwrap();
            assert!(ratelimit.starts_with(r#""burst";r=0"#), "{ratelimit}");
        }
        assert_eq!(called.load(Ordering::Relaxed), 4);
        // More than the second limit ever holds: refused on the client, with no wait to give.
        let res = svc(&open).oneshot(req(4)).await.unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(res.headers().get("retry-after").is_none());
        assert!(res.headers().get("ratelimit").is_none());
        assert_eq!(res.headers()["ratelimit-policy"], listed);
        assert_eq!(called.load(Ordering::Relaxed), 4);

        // Local: the in-process limits decide, all or none: 2 a minute binds, then refuses.
        let local = layer(AllOfFailurePolicy::Local(
            AllOf::new([
                KeyedLimiter::new(Quota::per_second(5).unwrap()),
                KeyedLimiter::new(Quota::per_minute(2).unwrap()),
            ])
            .unwrap(),
        ));
        for left in [1, 0] {
            let res = svc(&local).oneshot(req(1)).await.unwrap();
            assert_eq!(res.status(), StatusCode::OK);
            let ratelimit = res.headers()["ratelimit"].to_str().unwrap();
            assert!(
                ratelimit.starts_with(&format!("\"burst\";r={left};t=")),
                "{ratelimit}"
            );
        }
        let res = svc(&local).oneshot(req(1)).await.unwrap();
        assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = res.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=30).contains(&retry), "{retry}");
        assert_eq!(res.headers()["ratelimit-policy"], listed);
        assert_eq!(called.load(Ordering::Relaxed), 6);
    });
}

/// `take_up_to_key` when Redis cannot decide (nothing listens on port 1): `Closed` answers the
/// error, `Open` as many as a full bucket holds (at most `n`), `Local` the local limiter's own
/// partial take. Needs no server.
#[test]
fn a_partial_take_without_redis_follows_the_failure_policy() {
    runtime().block_on(async {
        let limiter = |failure| {
            let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
            let conn = client
                .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
                .unwrap();
            RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(4).unwrap())
                .timeout(Duration::from_millis(200))
                .build(failure)
                .unwrap()
        };
        let closed = limiter(FailurePolicy::Closed);
        assert!(matches!(
            closed.take_up_to_key("k", 2).await,
            Err(RedisError::Unavailable(_))
        ));
        let open = limiter(FailurePolicy::Open);
        assert_eq!(open.take_up_to_key("k", 9).await.unwrap().taken(), 4);
        assert_eq!(open.take_up_to_key("k", 2).await.unwrap().taken(), 2);
        let local = limiter(FailurePolicy::Local(KeyedLimiter::new(
            Quota::per_hour(3).unwrap(),
        )));
        assert_eq!(local.take_up_to_key("k", 9).await.unwrap().taken(), 3);
        assert!(matches!(
            local.take_up_to_key("k", 1).await,
            Err(RedisError::Denied(_))
        ));
        assert_eq!(local.stats().local_decisions, 2);
        assert_eq!(open.stats().open_admissions, 2);
    });
}

// --- several limits, all or none -------------------------------------------------------------------

/// Several limits under a fresh prefix through `conn`, reading the client clock `clock` when
/// given, failing closed.
fn several(
    conn: impl redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
    quotas: &[Quota],
    prefix: &str,
    clock: Option<&ManualClock>,
) -> RedisAllOf {
    let b = RedisAllOf::builder(conn, quotas.iter().copied())
        .prefix(prefix)
        .timeout(Duration::from_secs(5));
    let b = match clock {
        Some(c) => b.client_clock(c.clone()),
        None => b,
    };
    b.build(AllOfFailurePolicy::Closed).unwrap()
}

/// An operation on several limits: a request (`n`, taken or peeked) after a step of the clock
/// forwards (in microseconds).
#[derive(Debug, Clone, Copy)]
struct Step {
    forward_us: u64,
    n: u64,
    peek: bool,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let forward = prop_oneof![
        Just(0u64),
        0u64..1_000,
        0u64..400_000,
        Just(1_000_000),
        0u64..30_000_000
    ];
    proptest::collection::vec(
        (forward, 0u64..=6, proptest::bool::weighted(0.2)).prop_map(|(forward_us, n, peek)| Step {
            forward_us,
            n,
            peek,
        }),
        1..40,
    )
}

/// Quotas counted in nanoseconds (so the in-process limiter reads the same state), with bursts of
/// 1 to 5 so that limits refuse often.
fn small_quotas() -> impl Strategy<Value = Vec<Quota>> {
    let one = (
        prop_oneof![
            Just(Duration::from_millis(100)),
            Just(Duration::from_millis(1_300)),
            Just(Duration::from_secs(7)),
            Just(Duration::from_nanos(333_333_337)),
        ],
        1u64..=5,
    )
        .prop_map(|(interval, capacity)| {
            Quota::per_period(1, interval)
                .unwrap()
                .with_capacity(capacity)
                .unwrap()
        });
    proptest::collection::vec(one, 1..=3)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    /// Several limits in Redis answer exactly as the in-process `AllOf` of keyed token buckets at
    /// the same readings: the binding limit's admission, the longest refusal, the first
    /// insufficient capacity, queries; and what one call took or refused is what the in-process
    /// limits then hold. (Readings only move forwards: the in-process `AllOf` gives a refused
    /// request's tokens back at its reading, which a clock stepping back then reads as less, a
    /// difference the module docs allow and one the script, writing nothing, does not have.)
    #[test]
    fn several_limits_answer_as_the_in_process_all_of(quotas in small_quotas(), steps in steps()) {
        let Some(url) = var("TOLLGATE_REDIS_URL") else { return Ok(()) };
        let rt = runtime();
        let conn = rt.block_on(redis_manager(&url));
        let clock = ManualClock::new();
        let redis = several(conn, &quotas, &fresh_prefix("all-same"), Some(&clock));
        let local: AllOf<KeyedLimiter<u64, TokenBucketKeys, ManualClock>> = AllOf::new(
            quotas.iter().map(|q| KeyedLimiter::with_clock(*q, ManualClock::new())),
        ).unwrap();
        let base = today_us(1);
        let mut t: u64 = 1 << 30;
        for (i, s) in steps.iter().enumerate() {
            t += s.forward_us;
            clock.set(Nanos::new((base + t) * 1000));
            let now = Nanos::new(t * 1000);
            let expected = if s.peek {
                from_keyed(local.peek_key_n_at(&7, s.n, now))
            } else {
                from_keyed(local.check_key_n_at(&7, s.n, now))
            };
            let got = rt.block_on(async {
                if s.peek {
                    from_redis(redis.peek_key_n("k", s.n).await, admitted)
                } else {
                    from_redis(redis.check_key_n("k", s.n).await, admitted)
                }
            });
            prop_assert_eq!(got, expected, "step {} ({:?}) at t = {} us, quotas {:?}", i, s, t, quotas);
        }
        // One round trip per decision, and two more for the reload when this server had not
        // seen the script yet.
        let stats = redis.stats();
        prop_assert_eq!(stats.round_trips, stats.decisions + 2 * stats.reloads);
    }
}

#[test]
fn several_limits_bind_refuse_and_write_only_when_all_admit() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let mut conn = redis_manager(&url).await;
        let clock = ManualClock::new();
        let prefix = fresh_prefix("all-or-none");
        // 10 a second (burst 10) and 4 an hour (burst 4).
        let quotas = [Quota::per_second(10).unwrap(), Quota::per_hour(4).unwrap()];
        let limits = several(conn.clone(), &quotas, &prefix, Some(&clock));
        let t0 = today_us(1);
        clock.set(Nanos::new(t0 * 1000));
        let names = limits.key_names("k").unwrap();
        assert_eq!(names[0], format!("{prefix}:{{k}}:tb:0").into_bytes());
        assert_eq!(names[1], format!("{prefix}:{{k}}:tb:1").into_bytes());
        // The hourly limit binds: 3 taken leave 1 there, and it is full again in 45 minutes.
        let (at, a) = limits.check_key_n_indexed("k", 3).await;
        let a = a.unwrap();
        assert_eq!((at, a.remaining()), (Some(1), 1));
        assert_eq!(a.reset_after(), Duration::from_secs(45 * 60));
        let get = |name: Vec<u8>| {
            let mut conn = conn.clone();
            async move {
                let v: Option<String> = redis::cmd("GET")
                    .arg(name)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                v
            }
        };
        let before = (get(names[0].clone()).await, get(names[1].clone()).await);
        // 2 more fit the first limit but not the second: refused by the second, for the wait
        // until its second token (15 minutes), and neither key is written.
        let (at, d) = limits.check_key_n_indexed("k", 2).await;
        assert_eq!(at, Some(1));
        assert_denied_for(d, Duration::from_secs(15 * 60), "the hourly limit refuses");
        assert_eq!(
            (get(names[0].clone()).await, get(names[1].clone()).await),
            before
        );
        // 5 is more than the hourly limit ever holds: refused at once, naming it.
        let (at, e) = limits.check_key_n_indexed("k", 5).await;
        assert_eq!(at, Some(1));
        assert!(
            matches!(e, Err(RedisError::InsufficientCapacity(_))),
            "{e:?}"
        );
        // 11 is more than either holds: the first limit is named.
        let (at, _) = limits.check_key_n_indexed("k", 11).await;
        assert_eq!(at, Some(0));
        // The last token, then both refuse: the longest wait (the hourly limit's 15 minutes)
        // is reported, not the first limit's.
        limits.check_key("k").await.unwrap();
        clock.set(Nanos::new((t0 + 10) * 1000));
        let (at, d) = limits.check_key_n_indexed("k", 1).await;
        assert_eq!(at, Some(1));
        let d = denial(d, "both refuse");
        assert!(d.retry_after() > Duration::from_secs(14 * 60), "{d:?}");
        // A query writes nothing and answers the binding limit.
        let q = limits.peek_key_n("k", 0).await.unwrap();
        assert_eq!(q.remaining(), 0);
        // The first limit alone (the same key name, the same quota) holds exactly the 4 taken.
        let first = several(conn.clone(), &quotas[..1], &prefix, Some(&clock));
        assert_eq!(first.peek_key_n("k", 0).await.unwrap().remaining(), 6);
        let _: () = redis::cmd("DEL")
            .arg(&names[0])
            .arg(&names[1])
            .query_async(&mut conn)
            .await
            .unwrap();
    });
}

#[test]
fn several_limits_cost_one_evalsha_per_decision() {
    let Some(server) = Throwaway::start() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let mut admin = redis_manager(&server.url()).await;
        let limits = RedisAllOf::builder(
            admin.clone(),
            [
                Quota::per_second(5).unwrap(),
                Quota::per_minute(50).unwrap(),
                Quota::per_hour(500).unwrap(),
            ],
        )
        .build(AllOfFailurePolicy::Closed)
        .unwrap();
        // The first call loads the script: NOSCRIPT, SCRIPT LOAD, EVALSHA.
        limits.check_key("warm").await.unwrap();
        assert_eq!(limits.stats().reloads, 1);
        let before = calls(&mut admin, "evalsha").await;
        let set_before = calls(&mut admin, "set").await;
        for i in 0..50 {
            let _ = limits.check_key_n(format!("k{}", i % 5), 2).await;
            let _ = limits.peek_key_n("k0", 1).await;
        }
        assert_eq!(calls(&mut admin, "evalsha").await - before, 100);
        assert_eq!(limits.stats().round_trips, 3 + 100);
        assert_eq!(limits.stats().decisions, 1 + 100);
        // Each admission writes its three keys from inside the script; refusals and peeks write
        // nothing: 5 keys x 2 admissions (a burst of 5 at 2 a call) x 3 limits.
        let sets = calls(&mut admin, "set").await - set_before;
        assert!(sets % 3 == 0 && sets >= 5 * 2 * 3, "{sets} SETs");
    });
}

/// 16 tasks on 4 connections ask two limits (a burst of 40 and one of 30, neither refilling in
/// the test's time) for 1 to 3 at a time: exactly as many as the smaller limit holds are
/// admitted, and the larger one lost nothing to the requests the smaller refused (a request
/// taken from one limit and refused by the other would show as fewer than 10 left there).
#[test]
fn sixteen_tasks_take_from_every_limit_or_from_none() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let mut conns = Vec::new();
        for _ in 0..4 {
            conns.push(redis_manager(&url).await);
        }
        let quotas = [
            Quota::per_hour(1).unwrap().with_capacity(40).unwrap(),
            Quota::per_day(1).unwrap().with_capacity(30).unwrap(),
        ];
        let prefix = fresh_prefix("all-tasks");
        let limits: Vec<Arc<RedisAllOf>> = conns
            .iter()
            .map(|c| Arc::new(several(c.clone(), &quotas, &prefix, None)))
            .collect();
        let mut tasks = Vec::new();
        for i in 0..16 {
            let limits = limits[i % 4].clone();
            tasks.push(tokio::spawn(async move {
                let mut admitted = 0u64;
                for j in 0..12u64 {
                    let n = 1 + (i as u64 + j) % 3;
                    match limits.check_key_n("hot", n).await {
                        Ok(_) => admitted += n,
                        Err(RedisError::Denied(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                admitted
            }));
        }
        let mut admitted = 0;
        for t in tasks {
            admitted += t.await.unwrap();
        }
        // 16 x 12 requests of 2 on average ask for far more than 30: the smaller limit is
        // emptied; a request of 2 or 3 may be refused with 1 or 2 left, so up to 2 may stay.
        assert!((28..=30).contains(&admitted), "admitted {admitted}");
        let first = several(conns[0].clone(), &quotas[..1], &prefix, None);
        let second = RedisAllOf::builder(conns[0].clone(), quotas)
            .prefix(&prefix)
            .build(AllOfFailurePolicy::Closed)
            .unwrap();
        assert_eq!(
            first.peek_key_n("hot", 0).await.unwrap().remaining(),
            40 - admitted
        );
        assert_eq!(
            second.peek_key_n("hot", 0).await.unwrap().remaining(),
            30 - admitted
        );
        // One round trip per decision (and two more for a reload, if this server had not seen
        // the script yet).
        let calls: u64 = limits
            .iter()
            .map(|l| l.stats().round_trips - 2 * l.stats().reloads)
            .sum();
        assert_eq!(calls, 16 * 12, "one round trip per decision");
    });
}

#[test]
fn several_limits_fail_as_their_policy_says() {
    let rt = runtime();
    rt.block_on(async {
        let quotas = [
            Quota::per_second(10).unwrap(),
            Quota::per_minute(3).unwrap(),
        ];
        let limits = |failure| {
            let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
            let conn = client
                .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
                .unwrap();
            RedisAllOf::builder(conn, quotas)
                .timeout(Duration::from_millis(200))
                .build(failure)
                .unwrap()
        };
        let closed = limits(AllOfFailurePolicy::Closed);
        assert!(matches!(
            closed.check_key("k").await,
            Err(RedisError::Unavailable(_))
        ));
        assert_eq!(closed.stats().failures, 1);
        let open = limits(AllOfFailurePolicy::Open);
        for _ in 0..5 {
            assert_eq!(open.check_key("k").await.unwrap().remaining(), 0);
        }
        assert_eq!(open.stats().open_admissions, 5);
        // More than a limit's capacity is refused on the client, whatever the policy.
        assert!(matches!(
            open.check_key_n("k", 4).await,
            Err(RedisError::InsufficientCapacity(_))
        ));
        // Local: an in-process AllOf, all or none: 2 a minute binds.
        let local = limits(AllOfFailurePolicy::Local(
            AllOf::new([
                KeyedLimiter::new(Quota::per_second(5).unwrap()),
                KeyedLimiter::new(Quota::per_minute(2).unwrap()),
            ])
            .unwrap(),
        ));
        assert_eq!(local.check_key("k").await.unwrap().remaining(), 1);
        assert!(matches!(
            local.check_key_n("k", 2).await,
            Err(RedisError::Denied(_))
        ));
        assert_eq!(local.check_key("k").await.unwrap().remaining(), 0);
        assert!(matches!(
            local.check_key("k").await,
            Err(RedisError::Denied(_))
        ));
        assert_eq!(local.stats().local_decisions, 4);
    });
}

#[test]
fn bad_settings_for_several_limits_name_their_field() {
    let rt = runtime();
    rt.block_on(async {
        let conn = redis::Client::open("redis://127.0.0.1:1/")
            .unwrap()
            .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
            .unwrap();
        let build = |quotas: Vec<Quota>, prefix: &str| {
            RedisAllOf::builder(conn.clone(), quotas)
                .prefix(prefix)
                .build(AllOfFailurePolicy::Closed)
                .map(|_| ())
                .unwrap_err()
        };
        assert_eq!(build(vec![], "p").field(), "quotas");
        let many = vec![Quota::per_second(1).unwrap(); tollgate::redis::MAX_LIMITS + 1];
        assert_eq!(build(many, "p").field(), "quotas");
        let ok = Quota::per_second(1).unwrap();
        assert_eq!(build(vec![ok], "a{b").field(), "prefix");
        let huge = Quota::per_day(1).unwrap().with_capacity(60_000).unwrap();
        assert_eq!(build(vec![ok, huge], "p").field(), "capacity");
        let limits = RedisAllOf::builder(conn.clone(), [ok])
            .build(AllOfFailurePolicy::Closed)
            .unwrap();
        let long = vec![b'x'; tollgate::redis::MAX_KEY_LEN + 1];
        assert!(matches!(
            limits.check_key(&long).await,
            Err(RedisError::KeyTooLong(_))
        ));
        assert_eq!(limits.stats().round_trips, 0);
    });
}

#[test]
fn several_limits_work_on_the_cluster() {
    let Some((nodes, _one_at_a_time)) = cluster_nodes() else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let mut node = redis_manager(&nodes[0]).await;
        let conn = cluster(&nodes).await;
        let quotas = [
            Quota::per_second(5).unwrap(),
            Quota::per_minute(20).unwrap().with_capacity(3).unwrap(),
            Quota::per_hour(100).unwrap(),
        ];
        let limits = several(conn, &quotas, &fresh_prefix("all-cluster"), None);
        for key in [&b""[..], b"{", b"a{b}c", b"user-1", b"user-2", &[0, 255]] {
            let names = limits.key_names(key).unwrap();
            let slot = keyslot(&mut node, &names[0]).await;
            for name in &names[1..] {
                assert_eq!(keyslot(&mut node, name).await, slot, "{key:?}");
            }
            assert_eq!(limits.check_key_n(key, 3).await.unwrap().remaining(), 0);
            assert!(matches!(
                limits.check_key(key).await,
                Err(RedisError::Denied(_))
            ));
        }
    });
}

// --- reservations --------------------------------------------------------------------------------

/// An operation on a reservation sequence.
#[derive(Debug, Clone, Copy)]
enum ResOp {
    /// The clock steps forwards.
    Forward(u64),
    /// Reserve `n`, waiting at most `max_wait_ms`.
    Reserve(u64, u64),
    /// Take `n`.
    Take(u64),
    /// Cancel the reservation made `back` reservations ago (if it is still held).
    Cancel(usize),
}

fn res_ops() -> impl Strategy<Value = Vec<ResOp>> {
    proptest::collection::vec(
        prop_oneof![
            2 => prop_oneof![Just(0u64), 0u64..500_000, 0u64..10_000_000].prop_map(ResOp::Forward),
            4 => (0u64..=6, prop_oneof![Just(0u64), 0u64..3_000, Just(60_000)])
                .prop_map(|(n, w)| ResOp::Reserve(n, w)),
            2 => (0u64..=3).prop_map(ResOp::Take),
            2 => (0usize..3).prop_map(ResOp::Cancel),
        ],
        1..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    /// A reservation in Redis answers as the in-process keyed one at the same readings: the
    /// tokens, the delay, the instant they are ready, the denial beyond `max_wait` (its
    /// `retry_after` the wait until the same reservation fits), admissions behind the debt, and
    /// what a cancel gives back.
    #[test]
    fn a_reservation_answers_as_the_in_process_one(
        quotas in small_quotas(),
        ops in res_ops(),
    ) {
        let Some(url) = var("TOLLGATE_REDIS_URL") else { return Ok(()) };
        let rt = runtime();
        let conn = rt.block_on(redis_manager(&url));
        let quota = quotas[0];
        let clock = ManualClock::new();
        let redis = on_clock::<TokenBucketKeys>(&conn, quota, &clock);
        let local: KeyedLimiter<u64, TokenBucketKeys, ManualClock> =
            KeyedLimiter::with_clock(quota, ManualClock::new());
        let base = today_us(1);
        let mut t: u64 = 1 << 30;
        let mut held = Vec::new();
        for (i, &op) in ops.iter().enumerate() {
            clock.set(Nanos::new((base + t) * 1000));
            let now = Nanos::new(t * 1000);
            match op {
                ResOp::Forward(us) => t += us,
                ResOp::Reserve(n, ms) => {
                    let wait = Duration::from_millis(ms);
                    let expected = local.reserve_key_n_at(&7, n, wait, now);
                    let got = rt.block_on(redis.reserve_key_n("k", n, wait));
                    match (got, expected) {
                        (Ok(g), Ok(e)) => {
                            prop_assert_eq!(
                                (g.tokens(), g.delay(), g.ready_at().as_u64() - base * 1000),
                                (e.tokens(), e.delay(), e.ready_at().as_u64()),
                                "op {} ({:?})", i, op
                            );
                            held.push((g, e));
                        }
                        (Err(RedisError::Denied(g)), Err(tollgate::ReserveError::Denied(e))) => {
                            prop_assert_eq!(denied(g), denied(e), "op {} ({:?})", i, op);
                        }
                        (Err(RedisError::InsufficientCapacity(_)), Err(tollgate::ReserveError::InsufficientCapacity(_))) => {}
                        (g, e) => prop_assert!(false, "op {} ({:?}): {:?} against {:?}", i, op, g, e),
                    }
                }
                ResOp::Take(n) => {
                    let expected = from_keyed(local.check_key_n_at(&7, n, now));
                    let got = from_redis(rt.block_on(redis.check_key_n("k", n)), admitted);
                    prop_assert_eq!(got, expected, "op {} ({:?})", i, op);
                }
                ResOp::Cancel(back) => {
                    if back < held.len() {
                        let (g, e) = held.remove(held.len() - 1 - back);
                        let expected = e.cancel_at(now);
                        let got = rt.block_on(g.cancel()).unwrap();
                        prop_assert_eq!(got, expected, "op {} ({:?})", i, op);
                    }
                }
            }
        }
        clock.set(Nanos::new((base + t) * 1000));
        let q = from_redis(rt.block_on(redis.peek_key_n("k", 0)), admitted);
        prop_assert_eq!(q, from_keyed(local.peek_key_n_at(&7, 0, Nanos::new(t * 1000))));
    }
}

#[test]
fn a_cancel_never_gives_back_more_than_was_taken() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let conn = redis_manager(&url).await;
        let clock = ManualClock::new();
        let quota = Quota::per_second(10).unwrap().with_capacity(4).unwrap();
        let limiter = on_clock::<TokenBucketKeys>(&conn, quota, &clock);
        let t0 = today_us(1);
        let at = |us: u64| clock.set(Nanos::new((t0 + us) * 1000));
        at(0);
        let sec = Duration::from_secs(1);
        // Bad input first, with no round trip.
        assert!(matches!(
            limiter.reserve_key_n("k", 5, sec).await,
            Err(RedisError::InsufficientCapacity(_))
        ));
        assert!(matches!(
            limiter.reserve_key_n("k", 1, Duration::MAX).await,
            Err(RedisError::MaxWait(_))
        ));
        assert_eq!(limiter.stats().round_trips, 0);
        // A query reserves nothing, and its cancel gives nothing back.
        let q = limiter.reserve_key_n("k", 0, sec).await.unwrap();
        assert_eq!((q.tokens(), q.delay()), (0, Duration::ZERO));
        assert_eq!(q.cancel().await.unwrap(), 0);
        // The burst at once, then 3 into debt (ready after 300 ms), then 1 behind them (400 ms).
        let now = limiter.reserve_key_n("k", 4, Duration::ZERO).await.unwrap();
        assert_eq!(now.delay(), Duration::ZERO);
        let first = limiter.reserve_key_n("k", 3, sec).await.unwrap();
        assert_eq!(first.delay(), Duration::from_millis(300));
        assert_eq!(first.ready_at(), Nanos::new((t0 * 1000) + 300_000_000));
        let second = limiter.reserve_key_n("k", 1, sec).await.unwrap();
        assert_eq!(second.delay(), Duration::from_millis(400));
        // Beyond the longest wait: the wait until the same reservation fits.
        assert_denied_for(
            limiter
                .reserve_key_n("k", 4, Duration::from_millis(500))
                .await,
            Duration::from_millis(300),
            "beyond max_wait",
        );
        // The first gives back its 3 less the 1 reserved after it.
        assert_eq!(first.cancel().await.unwrap(), 2);
        // The 2 given back are there again: the bucket's debt now ends at 200 ms, not 400 ms.
        at(199_999);
        denial(limiter.check_key("k").await, "before the debt is paid");
        // Its time has passed: nothing goes back.
        at(400_001);
        assert_eq!(second.cancel().await.unwrap(), 0);
        // Under another quota, the state is not the reservation's: nothing goes back.
        let later = limiter.reserve_key_n("k", 4, sec).await.unwrap();
        assert!(later.delay() > Duration::ZERO);
        let other =
            RedisLimiter::<TokenBucketKeys>::builder(conn.clone(), Quota::per_second(20).unwrap())
                .prefix(
                    String::from_utf8(limiter.key_name("").unwrap())
                        .unwrap()
                        .split(':')
                        .next()
                        .unwrap(),
                )
                .client_clock(clock.clone())
                .build(FailurePolicy::Closed)
                .unwrap();
        assert_eq!(other.key_name("k").unwrap(), limiter.key_name("k").unwrap());
        other.check_key_n("k", 0).await.unwrap();
        // (a query writes nothing: the state is still the first quota's)
        let again = limiter.reserve_key_n("k", 1, sec).await.unwrap();
        // An admission under the other quota converts the state to it.
        at(2_000_000);
        other.check_key("k").await.unwrap();
        assert_eq!(again.cancel().await.unwrap(), 0);
        assert_eq!(later.cancel().await.unwrap(), 0);
    });
}

/// 8 tasks on 2 connections reserve 1 or 2 at a time, waiting up to a second, against 20 a second
/// with a burst of 5: counted by the instants the tokens are ready (on the server's clock), no
/// span from the start holds more than `C + R x t`, and the debt is never more than a second.
#[test]
fn reservations_from_many_tasks_never_exceed_the_limit() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let conns = [redis_manager(&url).await, redis_manager(&url).await];
        let quota = Quota::per_second(20).unwrap().with_capacity(5).unwrap();
        let prefix = fresh_prefix("reserve-tasks");
        let limiters: Vec<Arc<RedisLimiter>> = conns
            .iter()
            .map(|c| Arc::new(closed::<TokenBucketKeys>(c.clone(), quota, &prefix)))
            .collect();
        let mut probe = conns[0].clone();
        let start_ns = server_micros(&mut probe).await * 1000;
        let mut tasks = Vec::new();
        for i in 0..8 {
            let limiter = limiters[i % 2].clone();
            tasks.push(tokio::spawn(async move {
                let mut ready = Vec::new();
                for j in 0..10u64 {
                    let n = 1 + (i as u64 + j) % 2;
                    match limiter
                        .reserve_key_n("hot", n, Duration::from_secs(1))
                        .await
                    {
                        Ok(r) => {
                            assert!(r.delay() <= Duration::from_secs(1), "{r:?}");
                            ready.push((r.ready_at().as_u64(), r.tokens()));
                        }
                        Err(RedisError::Denied(d)) => assert!(d.retry_after() > Duration::ZERO),
                        Err(e) => panic!("{e}"),
                    }
                }
                ready
            }));
        }
        let mut ready = Vec::new();
        for t in tasks {
            ready.extend(t.await.unwrap());
        }
        ready.sort_unstable();
        let total: u64 = ready.iter().map(|r| r.1).sum();
        assert!(total >= 5 + 20, "only {total} reserved");
        let mut sum = 0;
        for (at, tokens) in &ready {
            sum += tokens;
            // Tokens ready by `at`: at most C + R x (at - start), with R = 1 per 50 ms.
            let bound = 5 + (at.saturating_sub(start_ns)) / 50_000_000;
            assert!(
                sum <= bound,
                "{sum} ready by {} ns > {bound}",
                at - start_ns
            );
        }
    });
}

#[test]
fn reservations_fail_as_their_policy_says() {
    let rt = runtime();
    rt.block_on(async {
        let limiter = |failure| {
            let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
            let conn = client
                .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
                .unwrap();
            RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(4).unwrap())
                .timeout(Duration::from_millis(200))
                .build(failure)
                .unwrap()
        };
        let sec = Duration::from_secs(1);
        let closed = limiter(FailurePolicy::Closed);
        assert!(matches!(
            closed.reserve_key_n("k", 2, sec).await,
            Err(RedisError::Unavailable(_))
        ));
        let open = limiter(FailurePolicy::Open);
        let r = open.reserve_key_n("k", 4, sec).await.unwrap();
        assert_eq!((r.tokens(), r.delay()), (4, Duration::ZERO));
        assert_eq!(r.cancel().await.unwrap(), 0);
        assert_eq!(open.stats().open_admissions, 1);
        let local = limiter(FailurePolicy::Local(KeyedLimiter::new(
            Quota::per_second(2).unwrap(),
        )));
        let now = local.reserve_key_n("k", 2, sec).await.unwrap();
        assert_eq!(now.delay(), Duration::ZERO);
        let later = local.reserve_key_n("k", 1, sec).await.unwrap();
        // Into the local debt (the 200 ms timeout before it has refilled some of it).
        assert!(
            later.delay() > Duration::ZERO && later.delay() <= Duration::from_millis(500),
            "{later:?}"
        );
        assert!(matches!(
            local.reserve_key_n("k", 2, sec).await,
            Err(RedisError::Denied(_))
        ));
        assert_eq!(later.cancel().await.unwrap(), 1);
        assert_eq!(local.stats().local_decisions, 3);
        drop(now);
    });
}

/// A reservation's debt is stored in the same number as the bucket's tokens, which the scripts
/// keep within 2^52 ticks: one an hour with a burst of 1 249 leaves room for one hour of debt
/// (2^52 ns is 1 250.99... hours), so the first reservation into debt is granted and the second,
/// which in process would be, is denied with the wait until it fits.
#[test]
fn a_debt_is_granted_only_within_2_pow_52_ticks() {
    let url = redis_or_skip!();
    let rt = runtime();
    rt.block_on(async {
        let mut conn = redis_manager(&url).await;
        let clock = ManualClock::new();
        let quota = Quota::per_hour(1).unwrap().with_capacity(1249).unwrap();
        let limiter = on_clock::<TokenBucketKeys>(&conn, quota, &clock);
        clock.set(Nanos::new(today_us(1) * 1000));
        let hour = Duration::from_secs(3600);
        limiter.check_key_n("k", 1249).await.unwrap();
        let first = limiter.reserve_key_n("k", 1, 3 * hour).await.unwrap();
        assert_eq!(first.delay(), hour);
        // The gap it wrote: 1 250 hours, within 2^52 ns.
        let state: String = redis::cmd("GET")
            .arg(limiter.key_name("k").unwrap())
            .query_async(&mut conn)
            .await
            .unwrap();
        let gap: u64 = state.split(' ').nth(1).unwrap().parse().unwrap();
        assert_eq!(gap, 1250 * 3_600_000_000_000);
        assert!(gap <= 1 << 52);
        // A second would leave 1 251 hours: denied until 1 251 h - 2^52 ns have passed.
        let in_process: KeyedLimiter<u8, TokenBucketKeys, ManualClock> =
            KeyedLimiter::with_clock(quota, ManualClock::new());
        in_process.check_key_n(&0, 1249).unwrap();
        let _kept = in_process.reserve_key_n(&0, 1, 3 * hour).unwrap();
        assert!(in_process.reserve_key_n(&0, 1, 3 * hour).is_ok());
        assert_denied_for(
            limiter.reserve_key_n("k", 1, 3 * hour).await,
            Duration::from_nanos(1251 * 3_600_000_000_000 - (1 << 52)),
            "past 2^52 ticks",
        );
        assert_eq!(first.cancel().await.unwrap(), 1);
    });
}
