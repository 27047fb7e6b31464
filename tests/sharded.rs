//! `ShardedBucket` through its public API, on a manual clock with explicit readings and homes: the
//! split, stealing and gathering, denials, `retry_after`, refunds, clock faults and argument
//! extremes. Real threads are in `sharded_threads.rs`.

use std::time::Duration;

use tollgate::sharded::{default_shards, MAX_SHARDS};
use tollgate::{
    AcquireError, Clock, InsufficientCapacity, ManualClock, Nanos, Quota, ShardedBucket,
    ShardsError, TokenBucket,
};

const SEC: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;

/// A limiter for `quota` asked for `shards` shards, on a manual clock reading 0.
fn manual(quota: Quota, shards: usize) -> (ShardedBucket<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = ShardedBucket::builder(quota)
        .shards(shards)
        .clock(clock.clone())
        .build()
        .expect("a power-of-two shard count");
    (limiter, clock)
}

fn t(ns: u64) -> Nanos {
    Nanos::new(ns)
}

/// One thread (home `home`) takes single tokens at `now` until refused; returns how many.
fn drain_from(limiter: &ShardedBucket<ManualClock>, home: usize, now: Nanos) -> u64 {
    let mut taken = 0;
    while limiter.try_acquire_n_from(home, 1, now).is_ok() {
        taken += 1;
        assert!(
            taken <= limiter.quota().capacity(),
            "more than C at one reading"
        );
    }
    taken
}

/// The same through the thread's own home and the `_at` form.
fn drain_at(limiter: &ShardedBucket<ManualClock>, now: Nanos) -> u64 {
    let mut taken = 0;
    while limiter.try_acquire_at(now).is_ok() {
        taken += 1;
        assert!(
            taken <= limiter.quota().capacity(),
            "more than C at one reading"
        );
    }
    taken
}

// ---------------------------------------------------------------------------------------------
// The split
// ---------------------------------------------------------------------------------------------

/// 8 per second, capacity 7, over four shards (counts 2 each, capacities 2, 2, 2, 1): a one-thread
/// drain admits exactly C at t = 0 and exactly R × 1 s over the next second, polled every ms.
#[test]
fn the_split_sums_to_exactly_c_and_r() {
    let quota = Quota::per_second(8).unwrap().with_capacity(7).unwrap();
    let (limiter, _) = manual(quota, 4);
    assert_eq!(limiter.shards(), 4);
    assert_eq!(limiter.remaining_at(t(0)), 7);
    assert_eq!(drain_at(&limiter, t(0)), 7);
    let mut admitted = 0;
    for ms in 1..=1000 {
        admitted += drain_at(&limiter, t(ms * MS));
    }
    assert_eq!(admitted, 8);
    // And so on, second after second, from any home.
    for ms in 1001..=10_000 {
        admitted += drain_from(&limiter, ms as usize, t(ms * MS));
    }
    assert_eq!(admitted, 80);
}

/// 10 per second, capacity 7, over four shards: counts 3, 3, 2, 2 and capacities 2, 2, 2, 1. The
/// drain admits exactly 7 at t = 0 and exactly 10 over the next second, give or take the rounding
/// each shard's interval documents: the 3-per-second shards refill every 333_333_334 ns, so their
/// third tokens of the second arrive 2 ns after it ends.
#[test]
fn ten_per_second_capacity_seven_over_four_shards() {
    let quota = Quota::per_second(10).unwrap().with_capacity(7).unwrap();
    let (limiter, _) = manual(quota, 4);
    assert_eq!(limiter.shards(), 4);
    assert_eq!(drain_at(&limiter, t(0)), 7);
    let mut admitted = 0;
    for ms in 1..=1000 {
        admitted += drain_at(&limiter, t(ms * MS));
    }
    assert_eq!(admitted, 8);
    assert_eq!(drain_at(&limiter, t(SEC + 1)), 0);
    admitted += drain_at(&limiter, t(SEC + 2));
    assert_eq!(admitted, 10);
    // Never more than R: one more token only after the next 100 ms of the 2-per-second shards.
    assert_eq!(drain_at(&limiter, t(SEC + 2)), 0);
}

/// A quota with fewer tokens (or tokens per period) than shards uses fewer shards, every one with
/// at least one token and one per period; the limiter still holds and bursts exactly C.
#[test]
fn small_quotas_use_fewer_shards() {
    let beyond_2_62 = Duration::from_nanos((1 << 62) + 2);
    let cases = [
        (Quota::per_second(3).unwrap(), 16, 2),
        (Quota::per_second(1).unwrap(), 256, 1),
        (Quota::per_second(4).unwrap(), 8, 4),
        (Quota::per_second(255).unwrap(), 256, 128),
        (Quota::per_second(256).unwrap(), 256, 256),
        (
            Quota::per_second(100).unwrap().with_capacity(3).unwrap(),
            8,
            2,
        ),
        (
            Quota::per_second(100).unwrap().with_capacity(1).unwrap(),
            4,
            1,
        ),
        (
            Quota::per_second(3).unwrap().with_capacity(100).unwrap(),
            8,
            2,
        ),
        (
            Quota::per_second(1000).unwrap().with_capacity(4).unwrap(),
            4,
            4,
        ),
        (Quota::per_day(1).unwrap(), 2, 1),
        // One token per 2^61 ns is valid; half of it per part (2^62 + 2 ns each) is too slow.
        (Quota::per_period(2, beyond_2_62).unwrap(), 2, 1),
    ];
    for (quota, asked, used) in cases {
        let (limiter, _) = manual(quota, asked);
        assert_eq!(limiter.shards(), used, "{quota:?} over {asked}");
        let c = quota.capacity();
        assert_eq!(limiter.remaining_at(t(0)), c, "{quota:?}");
        assert_eq!(drain_from(&limiter, asked - 1, t(0)), c, "{quota:?}");
    }
}

#[test]
fn the_builder_refuses_shard_counts_that_are_not_powers_of_two_up_to_256() {
    let quota = Quota::per_second(1000).unwrap();
    for n in [0, 3, 5, 6, 100, 255, 257, 384, 512, 1 << 20, usize::MAX] {
        let err = ShardedBucket::builder(quota).shards(n).build().unwrap_err();
        assert_eq!(err, ShardsError { requested: n });
        assert_eq!(
            err.to_string(),
            format!("shards must be a power of two between 1 and 256, got {n}")
        );
        let boxed: Box<dyn std::error::Error> = Box::new(err);
        assert!(boxed.source().is_none());
    }
    for n in (0..=8).map(|k| 1usize << k) {
        let limiter = ShardedBucket::builder(quota).shards(n).build().unwrap();
        assert_eq!(limiter.shards(), n);
        assert_eq!(limiter.remaining(), 1000);
    }
    assert_eq!(MAX_SHARDS, 256);
    // The default: the available parallelism, rounded up to a power of two.
    let parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(default_shards(), parallelism.next_power_of_two().min(256));
    assert_eq!(ShardedBucket::new(quota).shards(), default_shards());
    assert_eq!(
        ShardedBucket::builder(quota).build().unwrap().shards(),
        default_shards()
    );
    let with_clock = ShardedBucket::with_clock(quota, ManualClock::new());
    assert_eq!(with_clock.shards(), default_shards());
    assert_eq!(with_clock.quota(), quota);
    let debug = format!("{with_clock:?}");
    assert!(
        debug.starts_with("ShardedBucket") && debug.contains("shards"),
        "{debug}"
    );
}

// ---------------------------------------------------------------------------------------------
// Requests: n > C, n = 0, bursts, stealing, gathering
// ---------------------------------------------------------------------------------------------

/// More than the whole quota's capacity is `InsufficientCapacity`, never a denial, from every form,
/// however full the limiter; up to C is possible even though every shard is smaller.
#[test]
fn more_than_the_capacity_is_insufficient_capacity() {
    let quota = Quota::per_second(10).unwrap();
    let (limiter, clock) = manual(quota, 4);
    let expected = |requested| {
        AcquireError::InsufficientCapacity(InsufficientCapacity {
            requested,
            capacity: 10,
        })
    };
    for n in [11, 12, 1 << 40, u64::MAX] {
        for home in [0, 3, usize::MAX] {
            assert_eq!(
                limiter.try_acquire_n_from(home, n, t(0)).unwrap_err(),
                expected(n)
            );
        }
        assert_eq!(limiter.try_acquire_n_at(n, t(0)).unwrap_err(), expected(n));
        assert_eq!(limiter.try_acquire_n(n).unwrap_err(), expected(n));
        assert_eq!(limiter.peek_n_at(n, t(0)).unwrap_err(), expected(n));
        assert_eq!(limiter.peek_n(n).unwrap_err(), expected(n));
        assert!(limiter.try_acquire_n(n).unwrap_err().denied().is_none());
    }
    assert_eq!(limiter.remaining(), 10);
    assert_eq!(
        expected(11).to_string(),
        "request for 11 tokens can never succeed: capacity is 10"
    );
    // Exactly C is a gather across all four shards (3, 3, 2, 2): admitted from full.
    assert_eq!(limiter.try_acquire_n(10).unwrap().remaining(), 0);
    clock.advance(Duration::from_secs(60));
    assert!(limiter.try_acquire_n_from(2, 10, clock.now()).is_ok());
}

/// A request for nothing is a query: always admitted, reports every shard's whole tokens and the
/// time until all are full, and changes nothing.
#[test]
fn zero_tokens_is_a_query() {
    let quota = Quota::per_second(8).unwrap();
    let (limiter, _) = manual(quota, 4);
    let q = limiter.try_acquire_n_from(1, 0, t(0)).unwrap();
    assert_eq!((q.remaining(), q.reset_after()), (8, Duration::ZERO));
    limiter.try_acquire_n_from(1, 2, t(0)).unwrap(); // empties shard 1: full again in 1 s
    limiter.try_acquire_n_from(2, 1, t(0)).unwrap(); // half of shard 2: full again in 0.5 s
    for _ in 0..3 {
        let q = limiter.try_acquire_n_at(0, t(0)).unwrap();
        assert_eq!(q.remaining(), 5);
        assert_eq!(q.reset_after(), Duration::from_secs(1));
        let p = limiter.peek_n_at(0, t(0)).unwrap();
        assert_eq!(
            (p.remaining(), p.reset_after()),
            (5, Duration::from_secs(1))
        );
    }
    assert_eq!(limiter.remaining_at(t(0)), 5);
    limiter.try_acquire_n_from(0, 5, t(0)).unwrap();
    // An empty limiter answers a query too.
    let q = limiter.try_acquire_n_from(7, 0, t(0)).unwrap();
    assert_eq!(
        (q.remaining(), q.reset_after()),
        (0, Duration::from_secs(1))
    );
    assert_eq!(limiter.remaining_at(t(0)), 0);
}

/// A peek answers as `TokenBucket::peek_n_at` does: `remaining` and `reset_after` both as they would
/// be after the `n` tokens (regression: `reset_after` was the time until full before them). With
/// one shard the two limiters are the same bucket, so every peek on a shared trace matches exactly;
/// with four equal shards, each refilling at a quarter of the rate, a peek reports when the shards
/// the tokens would come from are full again, never sooner than the one bucket would be.
#[test]
fn peek_reports_remaining_and_reset_after_the_n_tokens_as_a_token_bucket_does() {
    let quota = Quota::per_second(10)
        .unwrap()
        .with_capacity(7)
        .unwrap()
        .with_initial(5)
        .unwrap();
    let (sharded, _) = manual(quota, 1);
    assert_eq!(sharded.shards(), 1);
    let bucket = TokenBucket::with_clock(quota, ManualClock::new());
    let mut peeks = 0;
    for (step, at) in [0, 40, 130, 130, 450, 1_000, 1_020, 1_700, 5_000]
        .into_iter()
        .enumerate()
    {
        let now = t(at * MS);
        for n in 0..=7 {
            let (s, b) = (sharded.peek_n_at(n, now), bucket.peek_n_at(n, now));
            let figures = |r: &Result<tollgate::Admitted, AcquireError>| match r {
                Ok(a) => (true, a.remaining(), a.reset_after(), Duration::ZERO),
                Err(AcquireError::Denied(d)) => {
                    (false, d.remaining(), d.reset_after(), d.retry_after())
                }
                Err(e) => panic!("{n} tokens fit the capacity of 7: {e}"),
            };
            assert_eq!(figures(&s), figures(&b), "peek {n} at {at} ms");
            peeks += 1;
        }
        // The same admissions on both.
        let n = [3, 1, 2, 4, 1, 7, 2, 5, 6][step];
        assert_eq!(
            sharded.try_acquire_n_at(n, now).is_ok(),
            bucket.try_acquire_n_at(n, now).is_ok(),
            "take {n} at {at} ms"
        );
    }
    assert_eq!(peeks, 72);

    // 8 per second over four shards of 2 (each refills a token every 500 ms), all full.
    let (sharded, _) = manual(Quota::per_second(8).unwrap(), 4);
    let bucket = TokenBucket::with_clock(Quota::per_second(8).unwrap(), ManualClock::new());
    for (n, reset_ms) in [(1, 500), (2, 1_000), (3, 1_000), (8, 1_000)] {
        let peeked = sharded.peek_n_at(n, t(0)).unwrap();
        assert_eq!(peeked.remaining(), 8 - n, "peek {n}");
        // One token leaves one shard a token short; two empty one shard; three empty one and take
        // one from the next; eight empty all four.
        assert_eq!(
            peeked.reset_after(),
            Duration::from_millis(reset_ms),
            "peek {n}"
        );
        let one_bucket = bucket.peek_n_at(n, t(0)).unwrap();
        assert_eq!(one_bucket.remaining(), peeked.remaining());
        assert!(one_bucket.reset_after() <= peeked.reset_after(), "peek {n}");
    }
    // The peek matches what the same caller's acquisition then reports (a gather reports the
    // whole limiter after the admission).
    let peeked = sharded.peek_n_at(3, t(0)).unwrap();
    let taken = sharded.try_acquire_n_at(3, t(0)).unwrap();
    assert_eq!(
        (peeked.remaining(), peeked.reset_after()),
        (taken.remaining(), taken.reset_after())
    );
}

/// One thread alone, with every request from the same home, bursts to the full C and then sustains
/// the full rate R: it steals from the three shards that are not its home.
#[test]
fn one_thread_alone_bursts_to_c_and_sustains_r_by_stealing() {
    // 1000 per second, capacity 100, four shards of 250 per second (every 4 ms) and 25 tokens.
    let quota = Quota::per_second(1000).unwrap().with_capacity(100).unwrap();
    for home in [0, 1, 2, 3, 4, usize::MAX] {
        let (limiter, _) = manual(quota, 4);
        assert_eq!(drain_from(&limiter, home, t(0)), 100);
        let mut admitted = 0;
        for ms in 1..=10_000 {
            admitted += drain_from(&limiter, home, t(ms * MS));
        }
        assert_eq!(admitted, 10_000, "home {home}");
    }
    // The same through the thread's own home, and the burst in one request.
    let (limiter, _) = manual(quota, 4);
    assert_eq!(limiter.try_acquire_n_at(100, t(0)).unwrap().remaining(), 0);
    let mut admitted = 0;
    for ms in 1..=2_000 {
        admitted += drain_at(&limiter, t(ms * MS));
    }
    assert_eq!(admitted, 2_000);
}

/// A request for more than any shard holds gathers from several, from home on, wrapping around.
#[test]
fn a_request_gathers_across_shards_from_home_on() {
    // 8 per second over four shards of 2 (2 per second each).
    let quota = Quota::per_second(8).unwrap();
    let (limiter, _) = manual(quota, 4);
    // From home 1: shards 1, 2 and 3 give 2 each, shard 0 one of its two.
    let got = limiter.try_acquire_n_from(1, 7, t(0)).unwrap();
    assert_eq!(got.remaining(), 1);
    assert_eq!(got.reset_after(), Duration::from_secs(1));
    assert_eq!(limiter.remaining_at(t(0)), 1);
    // The token left is shard 0's: a home take there reports that shard's 0 left; from shard 2 it
    // is refused (nothing anywhere after it).
    assert_eq!(
        limiter.try_acquire_n_from(0, 1, t(0)).unwrap().remaining(),
        0
    );
    assert!(limiter.try_acquire_n_from(2, 1, t(0)).is_err());

    // From home 3 the order is 3, 0, 1, 2: taking 5 leaves one token, in shard 1.
    let (limiter, _) = manual(quota, 4);
    assert_eq!(
        limiter.try_acquire_n_from(3, 5, t(0)).unwrap().remaining(),
        3
    );
    assert_eq!(
        limiter.try_acquire_n_from(1, 1, t(0)).unwrap().remaining(),
        0
    );
    assert_eq!(
        limiter.try_acquire_n_from(2, 2, t(0)).unwrap().remaining(),
        0
    );
    assert_eq!(limiter.remaining_at(t(0)), 0);
}

/// A request that the shards together cannot cover is refused and takes nothing, even from the
/// shards that could give part of it. (A gather that starts, loses a race and gives back needs a
/// second thread: see `sharded_threads.rs`.)
#[test]
fn a_request_the_shards_cannot_cover_takes_nothing() {
    let quota = Quota::per_second(8).unwrap();
    let (limiter, _) = manual(quota, 4);
    limiter.try_acquire_n_from(0, 2, t(0)).unwrap();
    limiter.try_acquire_n_from(1, 1, t(0)).unwrap();
    assert_eq!(limiter.remaining_at(t(0)), 5);
    for n in 6..=8 {
        for home in 0..4 {
            let denied = limiter.try_acquire_n_from(home, n, t(0)).unwrap_err();
            assert_eq!(denied.denied().unwrap().remaining(), 5);
            assert_eq!(limiter.remaining_at(t(0)), 5);
        }
    }
    // Everything is still where it was: shard 0 empty, shard 1 half, shards 2 and 3 full.
    assert_eq!(
        limiter.try_acquire_n_from(2, 2, t(0)).unwrap().remaining(),
        0
    );
    assert_eq!(
        limiter.try_acquire_n_from(3, 2, t(0)).unwrap().remaining(),
        0
    );
    assert_eq!(
        limiter.try_acquire_n_from(1, 1, t(0)).unwrap().remaining(),
        0
    );
    assert_eq!(limiter.remaining_at(t(0)), 0);
}

// ---------------------------------------------------------------------------------------------
// Denials
// ---------------------------------------------------------------------------------------------

/// A small deterministic generator for the state-space loops below.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below.max(1)
    }
}

/// Quotas with awkward splits: uneven counts and capacities, intervals that round, coarse time
/// units, and more shards than some quotas can use.
fn awkward_quotas() -> Vec<(Quota, usize)> {
    vec![
        (Quota::per_second(10).unwrap().with_capacity(7).unwrap(), 4),
        (Quota::per_second(3).unwrap(), 2),
        (
            Quota::per_second(1000).unwrap().with_capacity(64).unwrap(),
            8,
        ),
        (Quota::per_period(3, Duration::from_nanos(10)).unwrap(), 2),
        (Quota::per_period(7, Duration::from_nanos(1001)).unwrap(), 4),
        (Quota::per_minute(5).unwrap().with_capacity(9).unwrap(), 4),
        // Burst windows of thousands of years: time units of 2^k ns in every shard.
        (
            Quota::per_day(8).unwrap().with_capacity(1 << 40).unwrap(),
            4,
        ),
        (
            Quota::per_day(1).unwrap().with_capacity(1 << 32).unwrap(),
            2,
        ),
    ]
}

/// Puts `limiter` in a pseudo-random state: admissions of random sizes from random homes at
/// readings moving forwards by up to two intervals. Returns the latest reading.
fn scramble(limiter: &ShardedBucket<ManualClock>, rng: &mut Lcg, start: u64) -> u64 {
    let quota = limiter.quota();
    let interval = quota.interval().as_nanos() as u64;
    let mut now = start;
    for _ in 0..rng.next(24) {
        now += rng.next(2 * interval.min(1 << 50));
        let n = 1 + rng.next(quota.capacity().min(64));
        let _ = limiter.try_acquire_n_from(rng.next(8) as usize, n, t(now));
    }
    now
}

/// Denials and peeks write nothing: a limiter refused thousands of requests answers everything
/// afterwards exactly as its twin that was never asked.
#[test]
fn denials_and_peeks_write_nothing() {
    for (seed, (quota, shards)) in awkward_quotas().into_iter().enumerate() {
        let (asked, _) = manual(quota, shards);
        let (twin, _) = manual(quota, shards);
        let start = 5 * SEC;
        let mut rng = Lcg(seed as u64);
        let now = scramble(&asked, &mut rng, start);
        let now = scramble(&twin, &mut Lcg(seed as u64), start).max(now);
        let c = quota.capacity();
        for round in 0..2_000u64 {
            let home = (round % 9) as usize;
            let n = 1 + round % c.min(70);
            let before = asked.remaining_at(t(now));
            match asked.try_acquire_n_from(home, n, t(now)) {
                Ok(_) => {
                    // Keep the twin's history the same.
                    twin.try_acquire_n_from(home, n, t(now)).unwrap();
                }
                Err(e) => {
                    assert_eq!(asked.remaining_at(t(now)), before);
                    assert_eq!(asked.peek_n_at(n, t(now)).unwrap_err(), e);
                    assert_eq!(asked.try_acquire_n_at(n, t(now)).unwrap_err(), e);
                }
            }
            let _ = asked.peek_n_at(n, t(now));
            let _ = asked.peek_n_at(c, t(now.saturating_sub(SEC)));
        }
        let interval = quota.interval().as_nanos() as u64;
        for k in [0, 1, 2, 3, 5, 8, 13] {
            let at = t(now + k * interval.min(1 << 50) / 3);
            assert_eq!(asked.remaining_at(at), twin.remaining_at(at), "{quota:?}");
            assert_eq!(asked.peek_n_at(c, at), twin.peek_n_at(c, at), "{quota:?}");
            assert_eq!(
                asked.try_acquire_n_from(k as usize, 1, at),
                twin.try_acquire_n_from(k as usize, 1, at),
                "{quota:?}"
            );
        }
    }
}

/// A denial's `retry_at` is exact: at that reading the same request (same home) is admitted if
/// nothing else happened, and one nanosecond earlier it is not; `retry_after` is the wait from the
/// reading, and never beyond `reset_after`.
#[test]
fn retry_at_is_the_earliest_reading_that_admits_the_same_request() {
    let mut checked = 0;
    for (seed, (quota, shards)) in awkward_quotas().into_iter().enumerate() {
        let c = quota.capacity();
        for round in 0..40u64 {
            let (limiter, _) = manual(quota, shards);
            let mut rng = Lcg(seed as u64 * 1000 + round);
            let now = scramble(&limiter, &mut rng, 3 * SEC);
            // Sometimes ask with a reading behind the latest one.
            let now = now - rng.next(2) * rng.next(quota.interval().as_nanos() as u64).min(now);
            let home = rng.next(8) as usize;
            let n = match round % 4 {
                0 => 1,
                1 => c,
                _ => 1 + rng.next(c.min(64)),
            };
            let Err(AcquireError::Denied(denied)) = limiter.try_acquire_n_from(home, n, t(now))
            else {
                continue;
            };
            let at = denied.retry_at();
            assert_eq!(
                u128::from(at.as_u64()),
                u128::from(now) + denied.retry_after().as_nanos()
            );
            assert!(denied.retry_after() > Duration::ZERO);
            assert!(denied.retry_after() <= denied.reset_after());
            assert!(denied.remaining() < n);
            let early = t(at.as_u64() - 1);
            assert!(limiter.peek_n_at(n, early).is_err(), "{quota:?}, n {n}");
            assert!(limiter.try_acquire_n_from(home, n, early).is_err());
            assert!(limiter.peek_n_at(n, at).is_ok(), "{quota:?}, n {n}");
            assert!(limiter.try_acquire_n_from(home, n, at).is_ok());
            checked += 1;
        }
    }
    assert!(checked > 100, "only {checked} denials checked");
}

// ---------------------------------------------------------------------------------------------
// Refunds and the clock
// ---------------------------------------------------------------------------------------------

/// Refunds never fill above the capacity: not the limiter's, not any shard's; they spread from the
/// home shard on, and a shard that is part full takes a whole token of the refund for its fraction.
#[test]
fn refunds_never_fill_above_the_capacity() {
    let quota = Quota::per_second(8).unwrap();
    let (limiter, clock) = manual(quota, 4);
    limiter.refund_from(0, u64::MAX, t(0));
    limiter.refund(u64::MAX);
    limiter.refund_at(u64::MAX, t(0));
    assert_eq!(limiter.remaining_at(t(0)), 8);

    // Shard 1 empty, then refunds of 3 from home 1: 2 fit there, the third goes to shard 2 (full:
    // nothing), 3 (full), 0 (full), and is lost.
    limiter.try_acquire_n_from(1, 2, t(0)).unwrap();
    limiter.refund_from(1, 3, t(0));
    assert_eq!(limiter.remaining_at(t(0)), 8);
    // Everything taken; 3 back from home 3: shard 3 takes 2, shard 0 one.
    limiter.try_acquire_n_from(0, 8, t(0)).unwrap();
    limiter.refund_from(3, 3, t(0));
    assert_eq!(limiter.remaining_at(t(0)), 3);
    assert_eq!(
        limiter.try_acquire_n_from(3, 2, t(0)).unwrap().remaining(),
        0
    );
    assert_eq!(
        limiter.try_acquire_n_from(0, 1, t(0)).unwrap().remaining(),
        0
    );
    limiter.refund_from(usize::MAX, u64::MAX, t(0));
    assert_eq!(limiter.remaining_at(t(0)), 8);
    assert_eq!(limiter.remaining_at(t(u64::MAX)), 8);

    // Half a token in each of two shards (1 per second each): a refund of 1 fills shard 0, which
    // takes it whole for its missing half, and nothing spills over.
    let (halves, _) = manual(Quota::per_second(2).unwrap(), 2);
    halves.try_acquire_n_from(0, 2, t(0)).unwrap();
    let half = t(SEC / 2);
    assert_eq!(halves.remaining_at(half), 0);
    halves.refund_from(0, 1, half);
    assert_eq!(halves.remaining_at(half), 1);
    assert_eq!(halves.remaining_at(t(SEC)), 1 + 1);
    assert_eq!(
        halves.try_acquire_n_from(0, 1, half).unwrap().remaining(),
        0
    );

    // Refunds through the clock forms on a full limiter change nothing either.
    clock.set(t(10 * SEC));
    limiter.refund(3);
    assert_eq!(limiter.remaining(), 8);
}

/// A clock that steps backwards never creates tokens: an earlier reading sees no more whole tokens
/// than a later one, admits no more than it sees, and a reading behind the construction reading
/// sees an emptier limiter.
#[test]
fn a_clock_stepping_backwards_creates_no_tokens() {
    let quota = Quota::per_second(10).unwrap();
    let (limiter, clock) = manual(quota, 4);
    clock.set(t(100 * SEC));
    while limiter.try_acquire().is_ok() {}
    assert_eq!(limiter.remaining(), 0);
    clock.set(t(40 * SEC));
    assert!(limiter.try_acquire().is_err());
    assert!(limiter.peek_n(1).is_err());
    assert_eq!(limiter.remaining(), 0);
    // Forward again: the first whole tokens come one shard interval after 100 s, from the two
    // 3-per-second shards (1/3 s, rounded up), one each.
    clock.set(t(100 * SEC + 333_333_333));
    assert!(limiter.try_acquire().is_err());
    clock.set(t(100 * SEC + 333_333_334));
    assert!(limiter.try_acquire().is_ok());
    assert!(limiter.try_acquire().is_ok());
    assert!(limiter.try_acquire().is_err());

    // Behind the construction reading: fewer tokens, never more.
    let clock = ManualClock::starting_at(t(50 * SEC));
    let limiter = ShardedBucket::builder(quota)
        .shards(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    // Two shards of 5 per second: half a second back each holds 2.5 tokens, 2 of them whole.
    assert_eq!(limiter.remaining_at(t(50 * SEC - SEC / 2)), 4);
    assert_eq!(limiter.remaining_at(t(0)), 0);
    clock.set(t(50 * SEC - SEC / 2));
    let mut admitted = 0;
    while limiter.try_acquire().is_ok() {
        admitted += 1;
    }
    assert_eq!(admitted, 4);
    // Back at the construction reading: what is left of the 10, not 10 again.
    assert_eq!(admitted + limiter.remaining_at(t(50 * SEC)), 10);

    // In general: whole tokens never decrease as the reading advances, and one caller at an earlier
    // reading takes no more than it saw there.
    for (seed, (quota, shards)) in awkward_quotas().into_iter().enumerate() {
        let interval = quota.interval().as_nanos() as u64;
        let step = interval.min(1 << 50) / 3 + 1;
        for round in 0..10 {
            let (limiter, _) = manual(quota, shards);
            let mut rng = Lcg(seed as u64 * 77 + round);
            let now = scramble(&limiter, &mut rng, 10 * step);
            let mut previous = 0;
            for k in (0..=10).rev() {
                let at = now - k * step;
                let seen = limiter.remaining_at(t(at));
                assert!(seen >= previous, "{quota:?}");
                previous = seen;
            }
            let earlier = t(now - rng.next(10 * step));
            let seen = limiter.remaining_at(earlier);
            assert!(seen <= limiter.remaining_at(t(now)));
            let home = round as usize;
            if seen > 0 {
                assert!(limiter.try_acquire_n_from(home, seen, earlier).is_ok());
            }
            assert!(limiter.try_acquire_n_from(home, 1, earlier).is_err());
        }
    }
}

/// Every argument at its extremes, in every method: no panic, and never more than the capacity.
#[test]
fn extreme_arguments_never_panic() {
    let quotas = [
        Quota::per_second(1_000_000_000)
            .unwrap()
            .with_capacity(1 << 62)
            .unwrap(),
        Quota::per_day(1)
            .unwrap()
            .with_capacity(Quota::per_day(1).unwrap().max_capacity())
            .unwrap(),
        Quota::per_period(1, Duration::from_nanos(1 << 62)).unwrap(),
        Quota::per_period(1 << 40, Duration::from_secs(u64::MAX)).unwrap(),
        Quota::per_second(1).unwrap().with_initial(0).unwrap(),
        Quota::per_second(1_000_000_000)
            .unwrap()
            .with_initial(0)
            .unwrap(),
    ];
    let readings = [
        0,
        1,
        (1 << 62) - 1,
        1 << 62,
        (1 << 62) + 1,
        u64::MAX - 1,
        u64::MAX,
    ];
    let homes = [0, 1, 255, 256, usize::MAX / 2, usize::MAX];
    for quota in quotas {
        let c = quota.capacity();
        let amounts = [
            0,
            1,
            2,
            c / 2,
            c - 1,
            c,
            c.saturating_add(1),
            1 << 62,
            u64::MAX,
        ];
        for shards in [1, 2, 256] {
            for start in [0, (1 << 62) - 1, u64::MAX] {
                let clock = ManualClock::starting_at(t(start));
                let limiter = ShardedBucket::builder(quota)
                    .shards(shards)
                    .clock(clock.clone())
                    .build()
                    .unwrap();
                for &now in &readings {
                    clock.set(t(now));
                    for &home in &homes {
                        for &n in &amounts {
                            for result in [
                                limiter.try_acquire_n_from(home, n, t(now)),
                                limiter.peek_n_at(n, t(now)),
                                limiter.try_acquire_n_at(n, t(now)),
                                limiter.try_acquire_n(n),
                                limiter.peek_n(n),
                            ] {
                                match result {
                                    Ok(a) => {
                                        assert!(a.remaining() <= c);
                                        let _ = (a.reset_after(), a.to_string());
                                    }
                                    Err(e) => {
                                        if let Some(d) = e.denied() {
                                            assert!(d.remaining() <= c);
                                            let _ = (d.retry_after(), d.retry_at());
                                            let _ = d.reset_after();
                                        }
                                        let _ = e.to_string();
                                    }
                                }
                            }
                            limiter.refund_from(home, n, t(now));
                            assert!(limiter.remaining_at(t(now)) <= c);
                        }
                        let _ = limiter.try_acquire_at(t(now));
                        let _ = limiter.try_acquire();
                        limiter.refund_at(u64::MAX, t(now));
                        limiter.refund(u64::MAX);
                        assert!(limiter.remaining() <= c);
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The empty hint: refusals of one token answered without reading the shards
// ---------------------------------------------------------------------------------------------

/// Takes every whole token at `now` in one request; the shards keep only fractions.
fn empty_at(limiter: &ShardedBucket<ManualClock>, now: u64) {
    let left = limiter.remaining_at(t(now));
    if left > 0 {
        limiter
            .try_acquire_n_from(0, left, t(now))
            .expect("the shards hold what they report");
    }
    assert_eq!(limiter.remaining_at(t(now)), 0);
}

/// The first refusal of one token on empty shards publishes the hint, and the later ones are
/// answered from it: at every reading before the first token, earlier readings and the clamp
/// included, each must be the full scan's refusal (a peek reads every shard) to the nanosecond,
/// and at the hint's end the same request is admitted.
#[test]
fn a_refusal_from_the_empty_hint_is_the_full_scans_to_the_nanosecond() {
    for (quota, shards) in awkward_quotas() {
        let (limiter, _) = manual(quota, shards);
        let now = scramble(&limiter, &mut Lcg(7), 5 * SEC);
        empty_at(&limiter, now);
        let first = limiter.try_acquire_n_from(1, 1, t(now)).unwrap_err();
        assert_eq!(limiter.peek_n_at(1, t(now)).unwrap_err(), first);
        let until = first.denied().expect("a denial").retry_at().as_u64();
        let mut readings = vec![now, now - 1, now / 2, 0, until - 1, now + (until - now) / 2];
        if until > Nanos::MAX_USABLE.as_u64() {
            readings.push(u64::MAX);
        }
        for at in readings {
            for home in 0..3 {
                let hinted = limiter.try_acquire_n_from(home, 1, t(at)).unwrap_err();
                assert_eq!(
                    limiter.peek_n_at(1, t(at)).unwrap_err(),
                    hinted,
                    "{quota:?} at {at}"
                );
            }
        }
        if until <= Nanos::MAX_USABLE.as_u64() {
            assert!(
                limiter.try_acquire_n_from(1, 1, t(until)).is_ok(),
                "{quota:?}"
            );
        }
    }
}

/// A refund puts a token back while the hint says every shard is empty: the hint must go, and a
/// request from a home the refund did not reach steals the token.
#[test]
fn a_refund_voids_the_empty_hint() {
    let (limiter, _) = manual(Quota::per_minute(4).unwrap(), 2);
    empty_at(&limiter, SEC);
    assert!(limiter.try_acquire_n_from(1, 1, t(SEC)).is_err());
    assert!(limiter.try_acquire_n_from(1, 1, t(SEC)).is_err());
    assert_eq!(limiter.refund_from(0, 1, t(SEC)), 1);
    let stolen = limiter.try_acquire_n_from(1, 1, t(SEC));
    assert!(stolen.is_ok(), "the refunded token in shard 0: {stolen:?}");
    assert!(limiter.try_acquire_n_from(1, 1, t(SEC)).is_err());
}

/// An admission after the hint's end changes the shards it describes: a refusal at an earlier
/// reading (a clock stepping back) must report the shards as they are now, not as the hint saw
/// them.
#[test]
fn an_admission_voids_the_empty_hints_figures() {
    for (quota, shards) in awkward_quotas() {
        let (limiter, _) = manual(quota, shards);
        let now = 5 * SEC;
        empty_at(&limiter, now);
        let first = limiter.try_acquire_n_from(0, 1, t(now)).unwrap_err();
        let until = first.denied().expect("a denial").retry_at().as_u64();
        if until > Nanos::MAX_USABLE.as_u64() {
            continue;
        }
        assert!(
            limiter.try_acquire_n_from(0, 1, t(until)).is_ok(),
            "{quota:?}"
        );
        let after = limiter.try_acquire_n_from(0, 1, t(now)).unwrap_err();
        assert_eq!(
            limiter.peek_n_at(1, t(now)).unwrap_err(),
            after,
            "{quota:?}"
        );
        assert!(
            after.denied().expect("a denial").retry_at().as_u64() >= until,
            "{quota:?}: the token taken at {until} is not there again before it"
        );
    }
}
