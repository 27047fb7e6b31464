//! One hot key checked by 1, 2, 4 and 8 threads: `ShardedBucket` beside `TokenBucket` and governor,
//! accept-heavy (`sharded_allow`) and reject-heavy (`sharded_deny`).
//!
//! | bench | limiter |
//! | --- | --- |
//! | `sharded` | `ShardedBucket::new(quota)`: the default shard count, `try_acquire()` |
//! | `tollgate` | `TokenBucket::new(quota)`, `try_acquire()`: one word |
//! | `governor` | `RateLimiter::direct(quota)`, `check()`: one word |
//!
//! Timed exactly as the `contended_*` groups: fresh limiters and fresh threads every sample, released
//! together by a barrier, wall time from the first thread's start to the last one's end, and
//! `Throughput::Elements(threads)` so criterion's `thrpt` is total checks per second. Every sample
//! checks that accept-heavy admitted every check and reject-heavy refused every one.
//!
//! Each thread's home shard is its round-robin thread slot masked by the shard count, and a sample's
//! threads take their slots one after another, so with `S` shards and `S` or fewer threads every
//! thread has a shard of its own; with more threads, `threads / S` share each shard.

use std::slice;
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};

use super::common::{run_threads, Load};

/// 1 is the reference; 2 is one per core on the bench machine; 4 and 8 oversubscribe it.
const THREADS: [usize; 4] = [1, 2, 4, 8];

/// Registers the `sharded_allow` and `sharded_deny` groups.
///
/// 24 benches, so each is shortened (0.5 s warm-up, 15 samples in 2 s) to keep the whole suite
/// within a few minutes.
pub(crate) fn bench(c: &mut Criterion) {
    for load in Load::BOTH {
        let mut group = c.benchmark_group(format!("sharded_{}", load.name()));
        group
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(15);
        for threads in THREADS {
            group.throughput(Throughput::Elements(threads as u64));
            one_key(&mut group, load, threads);
        }
        group.finish();
    }
}

/// `threads` threads checking one limiter of each kind.
fn one_key(group: &mut BenchmarkGroup<'_, WallTime>, load: Load, threads: usize) {
    let checks = |iters: u64| iters * threads as u64;

    group.bench_function(BenchmarkId::new("sharded", threads), |b| {
        b.iter_custom(|iters| {
            let limiter = load.sharded();
            let (elapsed, admitted) = run_threads(threads, iters, slice::from_ref(&limiter), |l| {
                l.try_acquire().is_ok()
            });
            load.verify("sharded ShardedBucket", admitted, checks(iters));
            elapsed
        });
    });

    group.bench_function(BenchmarkId::new("tollgate", threads), |b| {
        b.iter_custom(|iters| {
            let bucket = load.tollgate();
            let (elapsed, admitted) = run_threads(threads, iters, slice::from_ref(&bucket), |l| {
                l.try_acquire().is_ok()
            });
            load.verify("sharded TokenBucket", admitted, checks(iters));
            elapsed
        });
    });

    group.bench_function(BenchmarkId::new("governor", threads), |b| {
        b.iter_custom(|iters| {
            let limiter = load.governor();
            let (elapsed, admitted) = run_threads(threads, iters, slice::from_ref(&limiter), |l| {
                l.check().is_ok()
            });
            load.verify("sharded governor", admitted, checks(iters));
            elapsed
        });
    });
}
