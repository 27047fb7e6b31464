//! The `metrics` feature's cost with no recorder installed (`metrics_overhead`): one thread, one
//! check, accept-heavy, side by side in one group so that the ratios mean something.
//!
//! | bench | limiter |
//! | --- | --- |
//! | `bucket` | `TokenBucket`, `try_acquire` through `Limiter` (as `single_allow/tollgate`) |
//! | `bucket_metered` | the same bucket wrapped in `tollgate::metrics::Metered` |
//! | `keyed` | `KeyedLimiter::<u64>` with 1 000 known keys, `check_key`, unnamed |
//! | `keyed_named` | the same limiter named with `with_name` (its handles registered, no-ops) |
//!
//! Without the `metrics` feature only `bucket` and `keyed` run (`cargo bench --bench tollgate
//! metrics_overhead` beside `cargo bench --features metrics --bench tollgate metrics_overhead`
//! gives the cost of the feature to a limiter that does not report). The handles are registered
//! with no recorder installed: each `increment` is a branch on a no-op handle. The machine-
//! independent count is `benches/instructions.rs`'s `metered_*` cases (benches/README.md).

use criterion::{Criterion, Throughput};
use tollgate::keyed::KeyedLimiter;
use tollgate::Clock;

use testkit::bench::{admit, run_single, Load};

/// The keys of the keyed benches, checked in a fixed cycle.
const KEYS: u64 = 1_000;

/// Registers the `metrics_overhead` group.
pub(crate) fn bench(c: &mut Criterion) {
    let load = Load::Accept;
    let mut group = c.benchmark_group("metrics_overhead");
    group.throughput(Throughput::Elements(1));
    group.bench_function("bucket", |b| {
        b.iter_custom(|iters| {
            let bucket = load.tollgate();
            let (elapsed, admitted) = run_single(iters, &bucket, admit);
            load.verify("bucket", admitted, iters);
            elapsed
        });
    });
    #[cfg(feature = "metrics")]
    group.bench_function("bucket_metered", |b| {
        b.iter_custom(|iters| {
            let bucket = tollgate::metrics::Metered::new("bench", load.tollgate());
            let (elapsed, admitted) = run_single(iters, &bucket, admit);
            load.verify("bucket_metered", admitted, iters);
            elapsed
        });
    });
    let keyed = |named: bool| {
        let limiter: KeyedLimiter<u64> = KeyedLimiter::new(load.tollgate_quota());
        #[cfg(feature = "metrics")]
        let limiter = if named {
            limiter.with_name("bench")
        } else {
            limiter
        };
        #[cfg(not(feature = "metrics"))]
        let _ = named;
        // One reading for the whole population: no key is full at it, so no sweep removes one
        // (see keyed.rs).
        let at = limiter.clock().now();
        for k in 0..KEYS {
            let _ = limiter.check_key_at(&k, at);
        }
        limiter
    };
    let cases: &[(&str, bool)] = if cfg!(feature = "metrics") {
        &[("keyed", false), ("keyed_named", true)]
    } else {
        &[("keyed", false)]
    };
    for &(name, named) in cases {
        let limiter = keyed(named);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let next = std::cell::Cell::new(0u64);
                let (elapsed, admitted) = run_single(iters, &limiter, |l| {
                    let k = next.get();
                    next.set(if k + 1 == KEYS { 0 } else { k + 1 });
                    l.check_key(&k).is_ok()
                });
                load.verify(name, admitted, iters);
                assert_eq!(limiter.len() as u64, KEYS, "no key was evicted");
                elapsed
            });
        });
    }
    group.finish();
}
