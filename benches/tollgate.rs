//! Criterion benches for tollgate: its token bucket beside governor and a `Mutex` token bucket, in
//! the same run and the same group, so that the ratios between them mean something.
//!
//! Run everything with `cargo bench --bench tollgate`; `benches/README.md` explains each group, how
//! to read the numbers, and how `benches/summarize.py` turns criterion's output into the table.
//!
//! | group | what it measures |
//! | --- | --- |
//! | `single_allow`, `single_deny` | one thread, one limiter: the cost of one check, accept-heavy and reject-heavy |
//! | `all_of_allow`, `all_of_deny` | one thread, two limits on one stream (`AllOf`) beside one `TokenBucket`, the same two buckets by hand, and two governor limiters |
//! | `contended_allow`, `contended_deny` | one limiter shared by 1, 2 and 4 threads: total checks per second |
//! | `spread_allow` | 2 and 4 threads, each with a limiter of its own: scaling without a shared cache line |
//! | `sharded_allow`, `sharded_deny` | one key, 1, 2, 4 and 8 threads: `ShardedBucket` beside `TokenBucket` and governor |
//! | `leaky_queue_send` | 1, 2 and 4 producers sending into one leaky queue (`leaky::queue`) while the consumer receives: items through the queue per second |
//! | `leaky_allow`, `leaky_deny` | one key, 1 and 2 threads: `LeakyMeter` (strict and scheduling) beside `TokenBucket` and the leaky-bucket crate |
//! | `windows_allow`, `windows_deny` | one key, 1 and 2 threads: the window limiters beside `TokenBucket` and the peers that offer each algorithm |
//! | `keyed_allow`, `keyed_deny` | 1 to 1 000 000 known keys, 1 and 2 threads: `KeyedLimiter` beside governor's keyed limiter and a lock-free `HashMap` floor |
//! | `keyed_insert` | the first check of keys never seen before: `KeyedLimiter` and governor |
//! | `metrics_overhead` | one thread: `TokenBucket` beside it wrapped in `metrics::Metered`, a keyed limiter beside it named, no recorder installed (the wrapped and named rows only with `--features metrics`) |
//!
//! Per-call latency percentiles do not fit criterion's model: they are the separate `latency` bench
//! (`benches/latency.rs`).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};

mod groups;

/// Short runs: the whole suite finishes in a few minutes on the 2-core bench machine.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_millis(2500))
        .sample_size(20)
        .configure_from_args()
}

criterion_group! {
    name = benches;
    config = config();
    targets = groups::single::bench, groups::all_of::bench, groups::contended::bench, groups::sharded::bench, groups::windows::bench, groups::leaky::bench, groups::leaky::bench_queue, groups::keyed::bench, groups::metrics::bench
}
criterion_main!(benches);
