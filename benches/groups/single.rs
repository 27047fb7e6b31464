//! One thread, one limiter: the cost of a single check, accept-heavy (`single_allow`) and
//! reject-heavy (`single_deny`).
//!
//! | bench | limiter | clock read per check |
//! | --- | --- | --- |
//! | `tollgate` | `TokenBucket` | `MonotonicClock` (TSC through quanta) |
//! | `governor` | `RateLimiter::direct` | governor's `DefaultClock` (TSC through quanta) |
//! | `mutex` | `Mutex<(f64, Instant)>` token bucket | `std::time::Instant::now()` |
//! | `tollgate_coarse` | `TokenBucket` | `CoarseClock` (one atomic load) |
//! | `governor_upkeep` | `RateLimiter::direct_with_clock` | governor's `QuantaUpkeepClock` (one atomic load) |
//! | `tollgate_at` | `TokenBucket::try_acquire_at` | none: one reading taken before the loop |
//!
//! The two coarse clocks read the same quanta recent time, each refreshed by its own upkeep thread
//! (tollgate's, quanta's for governor), so each is created just before its bench and dropped right
//! after it: one refreshing thread at a time, as in an application that uses one of them.

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use governor::clock::QuantaUpkeepClock;
use tollgate::{Clock, CoarseClock};

use testkit::bench::{admit, admit_at, timed_single, Load};

/// Registers the `single_allow` and `single_deny` groups.
pub(crate) fn bench(c: &mut Criterion) {
    for load in Load::BOTH {
        let mut group = c.benchmark_group(format!("single_{}", load.name()));
        group.throughput(Throughput::Elements(1));
        bench_load(&mut group, load);
        group.finish();
    }
}

fn bench_load(group: &mut BenchmarkGroup<'_, WallTime>, load: Load) {
    group.bench_function("tollgate", |b| {
        b.iter_custom(|iters| {
            let bucket = load.tollgate();
            timed_single(load, "tollgate", iters, &bucket, admit)
        });
    });

    group.bench_function("governor", |b| {
        b.iter_custom(|iters| {
            let limiter = load.governor();
            timed_single(load, "governor", iters, &limiter, |l| l.check().is_ok())
        });
    });

    group.bench_function("mutex", |b| {
        b.iter_custom(|iters| {
            let bucket = load.mutex();
            timed_single(load, "mutex", iters, &bucket, |l| l.try_acquire())
        });
    });

    {
        let clock = CoarseClock::new().expect("the coarse clock's upkeep thread starts");
        group.bench_function("tollgate_coarse", |b| {
            b.iter_custom(|iters| {
                let bucket = load.tollgate_with(clock.clone());
                timed_single(load, "tollgate_coarse", iters, &bucket, admit)
            });
        });
        // Dropping the last CoarseClock ends tollgate's upkeep thread: governor's runs alone below.
    }

    {
        let clock = QuantaUpkeepClock::from_interval(CoarseClock::DEFAULT_INTERVAL)
            .expect("no other upkeep thread is running");
        group.bench_function("governor_upkeep", |b| {
            b.iter_custom(|iters| {
                let limiter = load.governor_with(clock.clone());
                timed_single(load, "governor_upkeep", iters, &limiter, |l| {
                    l.check().is_ok()
                })
            });
        });
    }

    group.bench_function("tollgate_at", |b| {
        b.iter_custom(|iters| {
            let bucket = load.tollgate();
            // One reading for the whole sample, as a server that stamped the request holds one.
            // `black_box` keeps the compiler from treating it as a constant across iterations.
            let now = bucket.clock().now();
            timed_single(load, "tollgate_at", iters, &bucket, |l| {
                admit_at(l, black_box(now))
            })
        });
    });
}
