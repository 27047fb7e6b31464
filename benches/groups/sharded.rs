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

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};

use super::contended::one_limiter;
use testkit::bench::{admit, Load};

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
    let name = |bench| BenchmarkId::new(bench, threads);
    one_limiter(
        group,
        name("sharded"),
        "sharded ShardedBucket",
        load,
        threads,
        || load.sharded(),
        admit,
    );
    one_limiter(
        group,
        name("tollgate"),
        "sharded TokenBucket",
        load,
        threads,
        || load.tollgate(),
        admit,
    );
    one_limiter(
        group,
        name("governor"),
        "sharded governor",
        load,
        threads,
        || load.governor(),
        |l| l.check().is_ok(),
    );
}
