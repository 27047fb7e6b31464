//! One thread, several limits on one stream (`AllOf`): the cost of a check against two token
//! buckets, accept-heavy (`all_of_allow`) and reject-heavy (`all_of_deny`).
//!
//! | bench | what | a refusal costs |
//! | --- | --- | --- |
//! | `token_bucket` | one `TokenBucket` of the load's quota (the baseline) | one read |
//! | `all_of_2` | `AllOf` of the load's bucket, then a bucket that always admits | the first refuses; the second is peeked (for the longest wait) |
//! | `all_of_2_late` | `AllOf` of a bucket that always admits, then the load's bucket | a take from the first, the refusal, the give-back |
//! | `by_hand_2` | the same two buckets checked in turn by hand, giving back on a refusal | a take, the refusal, the give-back |
//! | `governor_2` | two governor limiters checked in turn (governor has no give-back) | a take from the first, the refusal |
//!
//! Every check reads the clock once (`AllOf` judges every limit at one reading).

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput};
use tollgate::{AllOf, Limiter, TokenBucket};

use testkit::bench::{admit, timed_single, Load};

/// Registers the `all_of_allow` and `all_of_deny` groups.
pub(crate) fn bench(c: &mut Criterion) {
    for load in Load::BOTH {
        let mut group = c.benchmark_group(format!("all_of_{}", load.name()));
        group.throughput(Throughput::Elements(1));
        bench_load(&mut group, load);
        group.finish();
    }
}

fn bench_load(group: &mut BenchmarkGroup<'_, WallTime>, load: Load) {
    // A bucket that admits every check of a sample, whatever the load.
    let open = || Load::Accept.tollgate();
    group.bench_function("token_bucket", |b| {
        b.iter_custom(|iters| timed_single(load, "token_bucket", iters, &load.tollgate(), admit));
    });
    group.bench_function("all_of_2", |b| {
        b.iter_custom(|iters| {
            let limits = AllOf::new([load.tollgate(), open()]).expect("two limits");
            timed_single(load, "all_of_2", iters, &limits, admit)
        });
    });
    group.bench_function("all_of_2_late", |b| {
        b.iter_custom(|iters| {
            let limits = AllOf::new([open(), load.tollgate()]).expect("two limits");
            timed_single(load, "all_of_2_late", iters, &limits, admit)
        });
    });
    group.bench_function("by_hand_2", |b| {
        b.iter_custom(|iters| {
            let pair = (open(), load.tollgate());
            timed_single(load, "by_hand_2", iters, &pair, by_hand)
        });
    });
    group.bench_function("governor_2", |b| {
        b.iter_custom(|iters| {
            let pair = (Load::Accept.governor(), load.governor());
            timed_single(load, "governor_2", iters, &pair, |(a, b)| {
                a.check().is_ok() && b.check().is_ok()
            })
        });
    });
}

/// Two buckets checked in turn at one reading, giving back to the first on the second's refusal.
fn by_hand((first, second): &(TokenBucket, TokenBucket)) -> bool {
    let now = first.now();
    if first.try_acquire_at(now).is_err() {
        return false;
    }
    if second.try_acquire_at(now).is_err() {
        first.refund_at(1, now);
        return false;
    }
    true
}
