//! Many threads on one limiter (`contended_allow`, `contended_deny`), and, for comparison, threads
//! that each own a limiter (`spread_allow`).
//!
//! Each sample spawns the threads, releases them together with a barrier, and lets each do `iters`
//! checks; the time reported is the wall time from the first thread's start to the last one's end.
//! The throughput is set to the thread count per iteration, so criterion's `elem/s` is the total
//! number of checks per second across all threads, the figure a server cares about.
//!
//! On one key, an admission is a compare-and-swap on a shared cache line (tollgate, governor) or a
//! lock (the `Mutex` baseline), so admissions serialize; a denial in tollgate and governor only
//! reads, so denials should scale with cores. With spread keys nothing is shared but the clock.

use std::slice;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use crossbeam_utils::CachePadded;
use tollgate::CoarseClock;

use testkit::bench::{admit, run_threads, Load};

/// The thread counts on one key: 1 (the uncontended reference), 2 (one per core), 4 (oversubscribed).
const THREADS: [usize; 3] = [1, 2, 4];

/// The thread counts for spread keys: 1 is the reference their scaling is read against.
const SPREAD_THREADS: [usize; 3] = [1, 2, 4];

/// Registers the `contended_allow`, `contended_deny` and `spread_allow` groups.
pub(crate) fn bench(c: &mut Criterion) {
    for load in Load::BOTH {
        let mut group = c.benchmark_group(format!("contended_{}", load.name()));
        for threads in THREADS {
            group.throughput(Throughput::Elements(threads as u64));
            one_key(&mut group, load, threads);
        }
        group.finish();
    }

    let mut group = c.benchmark_group("spread_allow");
    for threads in SPREAD_THREADS {
        group.throughput(Throughput::Elements(threads as u64));
        spread(&mut group, threads);
    }
    group.finish();
}

/// `threads` threads checking one limiter of each kind.
fn one_key(group: &mut BenchmarkGroup<'_, WallTime>, load: Load, threads: usize) {
    let name = |bench| BenchmarkId::new(bench, threads);
    one_limiter(
        group,
        name("tollgate"),
        "contended tollgate",
        load,
        threads,
        || load.tollgate(),
        admit,
    );
    one_limiter(
        group,
        name("governor"),
        "contended governor",
        load,
        threads,
        || load.governor(),
        |l| l.check().is_ok(),
    );
    one_limiter(
        group,
        name("mutex"),
        "contended mutex",
        load,
        threads,
        || load.mutex(),
        |l| l.try_acquire(),
    );
    let clock = CoarseClock::new().expect("the coarse clock's upkeep thread starts");
    one_limiter(
        group,
        name("tollgate_coarse"),
        "contended tollgate_coarse",
        load,
        threads,
        || load.tollgate_with(clock.clone()),
        admit,
    );
}

/// One benchmark: `threads` threads sharing one limiter that `make` builds fresh for every sample,
/// each doing `iters` checks; `label` names the run when its admissions do not match the load.
pub(crate) fn one_limiter<L: Sync>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    label: &str,
    load: Load,
    threads: usize,
    make: impl Fn() -> L,
    check: impl Fn(&L) -> bool + Sync,
) {
    shared_limiter(group, id, threads, make, check, |admitted, checks| {
        load.verify(label, admitted, checks)
    });
}

/// One benchmark: `threads` threads sharing one limiter that `make` builds fresh for every sample,
/// each doing `iters` checks; `verify(admitted, checks)` judges every sample's admissions.
pub(crate) fn shared_limiter<L: Sync>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    id: BenchmarkId,
    threads: usize,
    make: impl Fn() -> L,
    check: impl Fn(&L) -> bool + Sync,
    verify: impl Fn(u64, u64),
) {
    let checks = iters_to_checks(threads);
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let limiter = make();
            let (elapsed, admitted) =
                run_threads(threads, iters, slice::from_ref(&limiter), &check);
            verify(admitted, checks(iters));
            elapsed
        });
    });
}

/// `threads` threads, each admitting on a limiter of its own (padded to its own cache line).
fn spread(group: &mut BenchmarkGroup<'_, WallTime>, threads: usize) {
    let load = Load::Accept;
    let checks = iters_to_checks(threads);

    group.bench_function(BenchmarkId::new("tollgate", threads), |b| {
        b.iter_custom(|iters| {
            let buckets: Vec<_> = (0..threads)
                .map(|_| CachePadded::new(load.tollgate()))
                .collect();
            let (elapsed, admitted) = run_threads(threads, iters, &buckets, |l| admit(&**l));
            load.verify("spread tollgate", admitted, checks(iters));
            elapsed
        });
    });

    group.bench_function(BenchmarkId::new("governor", threads), |b| {
        b.iter_custom(|iters| {
            let limiters: Vec<_> = (0..threads)
                .map(|_| CachePadded::new(load.governor()))
                .collect();
            let (elapsed, admitted) = run_threads(threads, iters, &limiters, |l| l.check().is_ok());
            load.verify("spread governor", admitted, checks(iters));
            elapsed
        });
    });
}

/// The total number of checks in a sample of `iters` iterations on `threads` threads.
fn iters_to_checks(threads: usize) -> impl Fn(u64) -> u64 {
    let threads = threads as u64;
    move |iters| iters * threads
}
