//! The leaky meter beside `TokenBucket` and the leaky-bucket crate, one key, 1 and 2 threads,
//! accept-heavy (`leaky_allow`) and reject-heavy (`leaky_deny`), every limiter reading its own
//! clock.
//!
//! | bench | limiter and call |
//! | --- | --- |
//! | `meter_strict` | `LeakyMeter::try_acquire()`: admitted only when the virtual queue is empty |
//! | `meter_schedule` | `LeakyMeter::try_schedule()`: a place in the virtual queue and its delay |
//! | `token_bucket` | `TokenBucket::try_acquire()` |
//! | `leaky_bucket` | leaky-bucket 1.1.2's `RateLimiter::try_acquire(1)` (a `parking_lot` mutex behind a fast path of atomics; its own clock, tokio's `Instant`, outside a runtime) |
//!
//! Accept-heavy: 10^9 per second, one place or token per nanosecond, with a capacity of 10^9: a
//! check takes a thread longer than 1 ns, so the strict meter finds its queue empty at every
//! check, the scheduling meter never fills it, and the buckets stay full (asserted: every check
//! admitted, except the strict meter's at 2 threads, see [`measure`]). leaky-bucket gets 10^6 tokens every millisecond, as many per second. Reject-heavy:
//! one per hour with room for one, used up before the run: every check is refused (asserted).

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use leaky_bucket::RateLimiter;
use tollgate::leaky::LeakyMeter;
use tollgate::{Quota, TokenBucket};

use super::contended::shared_limiter;
use testkit::bench::{admit, run_threads, Load};

/// Registers the `leaky_allow` and `leaky_deny` groups.
pub(crate) fn bench(c: &mut Criterion) {
    for load in Load::BOTH {
        let mut group = c.benchmark_group(format!("leaky_{}", load.name()));
        group
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(15);
        for threads in [1, 2] {
            group.throughput(Throughput::Elements(threads as u64));
            one_key(&mut group, load, threads);
        }
        group.finish();
    }
}

/// The quota of both loads: 10^9 per second with a capacity of 10^9, or one per hour with room for
/// one (then used up by `drained`).
fn quota(load: Load) -> Quota {
    match load {
        Load::Accept => Quota::per_second(1_000_000_000)
            .and_then(|q| q.with_capacity(1_000_000_000))
            .expect("a valid quota"),
        Load::Deny => Quota::per_hour(1).expect("a valid quota"),
    }
}

/// Uses up a reject-heavy limiter's one place before the run.
fn drained<L>(load: Load, limiter: L, take: impl FnOnce(&L) -> bool) -> L {
    if load == Load::Deny {
        assert!(take(&limiter), "the limiter has its one place");
    }
    limiter
}

fn one_key(group: &mut BenchmarkGroup<'_, WallTime>, load: Load, threads: usize) {
    measure(
        group,
        load,
        threads,
        "meter_strict",
        || drained(load, LeakyMeter::new(quota(load)), admit),
        admit,
    );

    measure(
        group,
        load,
        threads,
        "meter_schedule",
        || drained(load, LeakyMeter::new(quota(load)), admit),
        |l| l.try_schedule().is_ok(),
    );

    measure(
        group,
        load,
        threads,
        "token_bucket",
        || drained(load, TokenBucket::new(quota(load)), admit),
        admit,
    );

    measure(
        group,
        load,
        threads,
        "leaky_bucket",
        || {
            let limiter = match load {
                Load::Accept => RateLimiter::builder()
                    .max(1_000_000_000)
                    .initial(1_000_000_000)
                    .refill(1_000_000)
                    .interval(Duration::from_millis(1))
                    .build(),
                Load::Deny => RateLimiter::builder()
                    .max(1)
                    .initial(1)
                    .refill(1)
                    .interval(Duration::from_secs(3_600))
                    .build(),
            };
            drained(load, limiter, |l| l.try_acquire(1))
        },
        |l| l.try_acquire(1),
    );
}

/// One benchmark: `threads` threads checking one limiter that `make` builds fresh every sample.
///
/// The strict meter at 2 threads accept-heavy is the one case not asserted: two threads whose
/// readings fall within the same nanosecond, or arrive out of order, find the queue one place
/// long, and strict spacing refuses the second (as it should).
fn measure<L: Sync>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    load: Load,
    threads: usize,
    name: &str,
    make: impl Fn() -> L,
    check: impl Fn(&L) -> bool + Sync,
) {
    let verified = !(load == Load::Accept && threads > 1 && name == "meter_strict");
    let id = BenchmarkId::new(name, threads);
    shared_limiter(group, id, threads, make, check, |admitted, checks| {
        if verified {
            load.verify(name, admitted, checks);
        }
    });
}

/// Registers `leaky_queue_send`: 1, 2 and 4 producers sending into one leaky queue while its
/// consumer receives on a thread of its own: end-to-end items per second through the queue.
///
/// The quota is 10^9 per second, so every item is due as soon as it is sent, and the consumer
/// (`try_recv` in a loop) takes items as fast as it can; the capacity is 4 096. Producers use
/// `send_timeout`, which waits for room when the consumer falls behind, so every item is accepted
/// (asserted) and criterion's `thrpt` is items through the queue per second. The consumer is a
/// thread too: 1 producer and the consumer fill the bench machine's 2 cores, and more producers
/// oversubscribe them.
pub(crate) fn bench_queue(c: &mut Criterion) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use tollgate::leaky;

    let mut group = c.benchmark_group("leaky_queue_send");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(15);
    for producers in [1usize, 2, 4] {
        group.throughput(Throughput::Elements(producers as u64));
        group.bench_function(BenchmarkId::new("send_timeout", producers), |b| {
            b.iter_custom(|iters| {
                let quota = Quota::per_second(1_000_000_000)
                    .and_then(|q| q.with_capacity(4_096))
                    .expect("a valid quota");
                let (tx, mut rx) = leaky::queue::<u64>(quota).expect("a valid queue");
                let done = AtomicBool::new(false);
                std::thread::scope(|s| {
                    s.spawn(|| {
                        // Relaxed: the flag carries no data; the scope's join orders the rest.
                        // Items still queued when it is set are dropped with the queue.
                        while !done.load(Ordering::Relaxed) {
                            if rx.try_recv().is_err() {
                                std::hint::spin_loop();
                            }
                        }
                    });
                    let (elapsed, accepted) =
                        run_threads(producers, iters, std::slice::from_ref(&tx), |tx| {
                            tx.send_timeout(1, Duration::from_secs(10)).is_ok()
                        });
                    done.store(true, Ordering::Relaxed);
                    assert_eq!(accepted, iters * producers as u64, "every item accepted");
                    elapsed
                })
            });
        });
    }
    group.finish();
}
