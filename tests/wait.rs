//! Waiting for capacity (`tollgate::wait`, the meter's `schedule_async`, `TokioClock`): on tokio's
//! paused time, where a `TokioClock` moves the limiter with the timer, every limiter kind waits
//! out its denial and is admitted; `_within` returns the denial instead of sleeping past its
//! bound; impossible requests and `TooManyKeys` return at once; a dropped waiter takes nothing;
//! jitter stays within its bound. And one real wait of 50 ms with the blocking `wait_n`.
//!
//! Times asserted here are tokio's virtual time, which only moves when every task sleeps: they do
//! not depend on the machine's speed. The one real wait asserts only a lower bound.

#![cfg(not(tollgate_loom))]

use std::time::Duration;

use tokio::time::Instant;
use tollgate::keyed::{KeyedError, KeyedLimiter, LeakyMeterKeys, TooManyKeys};
use tollgate::leaky::LeakyMeter;
use tollgate::wait::{KeyedLimitExt, LimiterExt, Wait};
use tollgate::window::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, SubWindowCounter};
use tollgate::{
    AcquireError, InsufficientCapacity, Limiter, Quota, ShardedBucket, TokenBucket, TokioClock,
};

const MS: Duration = Duration::from_millis(1);
/// tokio's timer fires on whole milliseconds, so a virtual sleep can end up to 1 ms after its
/// deadline.
const TICK: Duration = Duration::from_millis(1);

fn q(per_second: u64) -> Quota {
    Quota::per_second(per_second).expect("a valid quota")
}

/// Every direct limiter kind, 4 per second, on `clock`.
fn every_limiter(clock: TokioClock) -> Vec<(&'static str, Box<dyn Limiter>)> {
    vec![
        (
            "TokenBucket",
            Box::new(TokenBucket::with_clock(q(4), clock)),
        ),
        (
            "ShardedBucket",
            Box::new(
                ShardedBucket::builder(q(4))
                    .shards(2)
                    .clock(clock)
                    .build()
                    .expect("valid"),
            ),
        ),
        (
            "FixedWindow",
            Box::new(FixedWindow::with_clock(q(4), clock).expect("valid")),
        ),
        (
            "SlidingWindowCounter",
            Box::new(SlidingWindowCounter::with_clock(q(4), clock).expect("valid")),
        ),
        (
            "SubWindowCounter",
            Box::new(SubWindowCounter::with_clock(q(4), 4, clock).expect("valid")),
        ),
        (
            "SlidingWindowLog",
            Box::new(SlidingWindowLog::with_clock(q(4), clock).expect("valid")),
        ),
        ("LeakyMeter", Box::new(LeakyMeter::with_clock(q(4), clock))),
    ]
}

/// Takes every token `limiter` has now, and returns the wait its next denial reports.
fn exhaust(limiter: &dyn Limiter) -> Duration {
    while limiter.try_acquire().is_ok() {}
    limiter.try_acquire().expect_err("exhausted").retry_after()
}

#[tokio::test(start_paused = true)]
async fn every_direct_limiter_waits_out_its_denial_and_is_admitted() {
    for (name, limiter) in every_limiter(TokioClock::new()) {
        let retry_after = exhaust(limiter.as_ref());
        assert!(retry_after > Duration::ZERO, "{name}");
        let start = Instant::now();
        limiter.until_ready().await.expect(name);
        let waited = start.elapsed();
        assert!(
            waited >= retry_after,
            "{name}: {waited:?} < {retry_after:?}"
        );
        // A sliding counter's estimate of a full previous window drops by one only a quarter of
        // the way into the next; no limiter needs more than two periods.
        assert!(waited <= Duration::from_secs(2), "{name}: {waited:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_for_several_waits_until_all_fit_at_once() {
    for (name, limiter) in every_limiter(TokioClock::new()) {
        exhaust(limiter.as_ref());
        let admitted = limiter.until_n_ready(3).await.expect(name);
        assert!(admitted.remaining() <= 1, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_token_bucket_waits_exactly_its_retry_after() {
    let bucket = TokenBucket::with_clock(q(10), TokioClock::new());
    bucket.try_acquire_n(10).expect("full");
    let start = Instant::now();
    for k in 1..=5u32 {
        bucket.until_ready().await.expect("admitted");
        let waited = start.elapsed();
        assert!(waited >= 100 * MS * k, "{k}: {waited:?}");
        assert!(waited <= 100 * MS * k + TICK, "{k}: {waited:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn within_returns_the_denial_rather_than_sleep_past_its_bound() {
    let bucket = TokenBucket::with_clock(q(1), TokioClock::new());
    bucket.try_acquire().expect("full");
    let start = Instant::now();
    let err = bucket
        .until_ready_within(500 * MS)
        .await
        .expect_err("a second away");
    assert_eq!(
        err.denied().expect("a denial").retry_after(),
        Duration::from_secs(1)
    );
    assert_eq!(start.elapsed(), Duration::ZERO, "gave up without sleeping");
    // The same bound over a wait that fits: admitted, within the bound.
    let admitted = bucket.until_n_ready_within(1, Duration::from_secs(1)).await;
    assert!(admitted.is_ok());
    let waited = start.elapsed();
    assert!(waited >= Duration::from_secs(1) && waited <= Duration::from_secs(1) + TICK);
    // A bound of zero asks once.
    let err = bucket.until_ready_within(Duration::ZERO).await;
    assert!(err.expect_err("empty").denied().is_some());
    assert_eq!(start.elapsed(), waited);
}

#[tokio::test(start_paused = true)]
async fn within_gives_up_when_a_second_denial_would_end_past_its_bound() {
    // The bucket's clock stands still (as if another caller had taken each token the moment it
    // came back): after the first sleep of 1 s, the second denial says another second, past the
    // bound of 1.5 s. The waiter returns it then, having slept only within its bound.
    let bucket = TokenBucket::with_clock(q(1), tollgate::ManualClock::new());
    bucket.try_acquire().expect("full");
    let start = Instant::now();
    let err = bucket
        .until_ready_within(1500 * MS)
        .await
        .expect_err("the clock never moved");
    assert_eq!(
        err.denied().expect("a denial").retry_after(),
        Duration::from_secs(1)
    );
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited <= 1500 * MS,
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_impossible_request_returns_at_once() {
    let start = Instant::now();
    for (name, limiter) in every_limiter(TokioClock::new()) {
        exhaust(limiter.as_ref());
        let err = limiter.until_n_ready(5).await.expect_err(name);
        assert_eq!(
            err,
            AcquireError::InsufficientCapacity(InsufficientCapacity {
                requested: 5,
                capacity: 4
            }),
            "{name}"
        );
        assert!(limiter.wait_n(5).is_err(), "{name}");
        assert!(limiter.wait_n_within(5, Duration::MAX).is_err(), "{name}");
        // A query is answered at once too, full or not.
        assert!(limiter.until_n_ready(0).await.is_ok(), "{name}");
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_waiter_takes_nothing() {
    for (name, limiter) in every_limiter(TokioClock::new()) {
        exhaust(limiter.as_ref());
        let start = Instant::now();
        // Waits for 4; dropped by the timeout halfway through the wait.
        let full_in = limiter.peek_n(4).expect_err("exhausted");
        let half = full_in.denied().expect("a denial").retry_after() / 2;
        let dropped = tokio::time::timeout(half, limiter.until_n_ready(4)).await;
        assert!(dropped.is_err(), "{name}: the waiter was still waiting");
        assert_eq!(start.elapsed(), half, "{name}");
        // Nothing was taken: two periods after the exhaustion (the sliding counters still weigh
        // the first one at the end of the second), the whole capacity is there.
        tokio::time::sleep_until(start + Duration::from_secs(2)).await;
        assert_eq!(limiter.remaining(), 4, "{name}");
        assert!(limiter.try_acquire_n(4).is_ok(), "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn jitter_stays_within_its_bound() {
    let bucket = TokenBucket::with_clock(q(10), TokioClock::new());
    let wait = Wait::forever().with_jitter(40 * MS);
    bucket.try_acquire_n(10).expect("full");
    for _ in 0..20 {
        let retry_after = bucket.try_acquire().expect_err("empty").retry_after();
        let start = Instant::now();
        bucket.until_n_ready_with(1, wait).await.expect("admitted");
        let waited = start.elapsed();
        assert!(waited >= retry_after, "{waited:?} < {retry_after:?}");
        assert!(waited <= retry_after + 40 * MS + TICK, "{waited:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn jitter_is_cut_at_the_bound() {
    let bucket = TokenBucket::with_clock(q(10), TokioClock::new());
    let wait = Wait::within(120 * MS).with_jitter(Duration::from_secs(10));
    for _ in 0..10 {
        bucket.try_acquire_n(10).expect("full again");
        let start = Instant::now();
        // The token is 100 ms away: the sleep with its jitter ends by 120 ms.
        bucket.until_n_ready_with(1, wait).await.expect("admitted");
        assert!(start.elapsed() <= 120 * MS + TICK, "{:?}", start.elapsed());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_keyed_limiter_waits_per_key() {
    let limiter: KeyedLimiter<String, _, _> = KeyedLimiter::with_clock(q(2), TokioClock::new());
    limiter.until_key_n_ready("ann", 2).await.expect("fresh");
    let start = Instant::now();
    limiter
        .until_key_ready("bob")
        .await
        .expect("another key is not held up");
    assert_eq!(start.elapsed(), Duration::ZERO);
    limiter.until_key_ready("ann").await.expect("admitted");
    let waited = start.elapsed();
    assert!(
        waited >= 500 * MS && waited <= 500 * MS + TICK,
        "{waited:?}"
    );
    // Within a bound too short: the denial, at once.
    let err = limiter
        .until_key_ready_within("ann", 100 * MS)
        .await
        .expect_err("500 ms away");
    assert_eq!(err.denied().expect("a denial").retry_after(), 500 * MS);
    assert_eq!(start.elapsed(), waited);
    // And one too many, never.
    assert!(matches!(
        limiter
            .until_key_n_ready_within("ann", 3, Duration::MAX)
            .await,
        Err(KeyedError::InsufficientCapacity(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_keyed_meter_waits_for_its_empty_queue() {
    let limiter: KeyedLimiter<u8, LeakyMeterKeys, _> =
        KeyedLimiter::with_algorithm(q(10), TokioClock::new()).expect("valid");
    let start = Instant::now();
    for k in 0..3u32 {
        limiter.until_key_ready(&1).await.expect("admitted");
        assert!(start.elapsed() >= 100 * MS * k);
    }
}

#[tokio::test(start_paused = true)]
async fn too_many_keys_returns_at_once() {
    let limiter: KeyedLimiter<u8, _, _> =
        KeyedLimiter::with_clock(q(1), TokioClock::new()).with_max_keys(1);
    limiter.until_key_ready(&1).await.expect("room for one");
    let start = Instant::now();
    let err = limiter.until_key_ready(&2).await.expect_err("no room");
    assert_eq!(err, KeyedError::TooManyKeys(TooManyKeys { max_keys: 1 }));
    assert_eq!(limiter.wait_key_n(&2, 1), Err(err));
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_keyed_waiter_takes_nothing() {
    let limiter: KeyedLimiter<String, _, _> = KeyedLimiter::with_clock(q(2), TokioClock::new());
    limiter.check_key_n("ann", 2).expect("fresh");
    let start = Instant::now();
    let dropped = tokio::time::timeout(700 * MS, limiter.until_key_n_ready("ann", 2)).await;
    assert!(dropped.is_err());
    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    assert_eq!(limiter.remaining_key("ann"), 2);
}

#[tokio::test(start_paused = true)]
async fn schedule_async_sleeps_each_delay_in_turn() {
    let meter = LeakyMeter::with_clock(q(10).with_capacity(3).expect("valid"), TokioClock::new());
    // Together: three places, departing 100 ms apart.
    let start = Instant::now();
    let (a, b, c) = tokio::join!(
        meter.schedule_async(),
        meter.schedule_async(),
        meter.schedule_n_async(1)
    );
    let mut delays = [a, b].map(|s| s.expect("a place").delay()).to_vec();
    delays.push(c.expect("a place").delay());
    delays.sort();
    assert_eq!(delays, [Duration::ZERO, 100 * MS, 200 * MS]);
    let waited = start.elapsed();
    assert!(
        waited >= 200 * MS && waited <= 200 * MS + TICK,
        "{waited:?}"
    );
    // One after another: each is scheduled when the one before departed.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    let mut delays = Vec::new();
    for _ in 0..3 {
        delays.push(meter.schedule_async().await.expect("a place").delay());
    }
    assert_eq!(delays, [Duration::ZERO, 100 * MS, 100 * MS]);
    assert!(start.elapsed() >= 200 * MS);
}

#[tokio::test(start_paused = true)]
async fn schedule_async_refuses_a_full_queue_at_once() {
    let meter = LeakyMeter::with_clock(q(10).with_capacity(2).expect("valid"), TokioClock::new());
    meter.try_schedule_n(2).expect("room");
    let start = Instant::now();
    let denied = meter.schedule_async().await.expect_err("full");
    assert_eq!(denied.retry_after(), 100 * MS);
    assert!(matches!(
        meter.schedule_n_async(3).await,
        Err(AcquireError::InsufficientCapacity(_))
    ));
    assert!(meter.schedule_n_async(0).await.is_ok(), "a query");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_schedule_keeps_its_place() {
    let meter = LeakyMeter::with_clock(q(10).with_capacity(5).expect("valid"), TokioClock::new());
    meter.try_schedule_n(2).expect("room");
    // The third place departs in 200 ms; the future is dropped after 50.
    let dropped = tokio::time::timeout(50 * MS, meter.schedule_async()).await;
    assert!(dropped.is_err());
    // The place was not given back (documented): the next one departs behind it.
    let next = meter.try_schedule().expect("room");
    assert_eq!(next.delay(), 250 * MS);
}

#[tokio::test(start_paused = true)]
async fn the_tokio_clock_follows_paused_time() {
    use tollgate::{Clock, Nanos};
    let clock = TokioClock::new();
    let copy = clock;
    assert_eq!(clock.now(), Nanos::ZERO);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(copy.now(), Nanos::from(Duration::from_secs(3)));
    tokio::time::advance(Duration::from_millis(5)).await;
    assert_eq!(clock.now(), Nanos::from(Duration::from_millis(3005)));
    assert!(format!("{clock:?}").contains("TokioClock"));
}

#[test]
fn wait_n_on_a_real_wait_of_50_ms() {
    // 20 per second, no burst: the second token is 50 ms after the first.
    let bucket = TokenBucket::new(q(20).with_capacity(1).expect("valid"));
    let start = std::time::Instant::now();
    bucket.wait_n(1).expect("the first token");
    let admitted = bucket.wait_n(1).expect("the second, after its wait");
    assert_eq!(admitted.remaining(), 0);
    // A lower bound only. The bucket reads the TSC clock and the test `Instant`
    // (CLOCK_MONOTONIC): the two agree to well within 2 % over 50 ms.
    let waited = start.elapsed();
    assert!(waited >= 49 * MS, "{waited:?}");
}

#[test]
fn wait_n_within_a_bound_too_short_returns_the_denial_at_once() {
    let bucket = TokenBucket::new(Quota::per_minute(1).expect("valid"));
    bucket
        .wait_n_within(1, Duration::ZERO)
        .expect("the first token");
    let err = bucket.wait_n_within(1, 10 * MS).expect_err("a minute away");
    assert!(err.denied().expect("a denial").retry_after() > Duration::from_secs(50));
}

#[tokio::test(start_paused = true)]
async fn spawned_waiters_share_one_limiter_and_none_is_lost() {
    // The futures are `Send`: tasks can own them. 30 waiters on a bucket of 10 a second (full):
    // the first 10 pass at once, the other 20 need two seconds of refill, and all 30 get in.
    let bucket = std::sync::Arc::new(TokenBucket::with_clock(q(10), TokioClock::new()));
    let keyed = std::sync::Arc::new(KeyedLimiter::<u8, _, _>::with_clock(
        q(10),
        TokioClock::new(),
    ));
    let start = Instant::now();
    let tasks: Vec<_> = (0..30)
        .map(|_| {
            let (bucket, keyed) = (bucket.clone(), keyed.clone());
            tokio::spawn(async move {
                bucket.until_ready().await.expect("admitted");
                keyed.until_key_ready(&1).await.expect("admitted");
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("the task ran");
    }
    assert!(
        start.elapsed() >= Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(bucket.remaining(), 0);
}
