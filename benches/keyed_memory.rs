//! Bytes per key of the keyed limiters, as the growth of a fresh process's memory.
//!
//! `cargo bench --bench keyed_memory` (Linux only: it reads `/proc/self/status`). For each limiter,
//! key count and measure it re-executes itself (`--child <limiter> <keys> <measure>`) [`RUNS`]
//! times; the child builds an empty limiter, reads the measure, checks the keys `0..keys` once
//! each, reads it again, and prints the growth divided by the key count. A fresh process per
//! measurement means no earlier map's freed memory is reused. The parent prints a markdown table
//! of the medians and the range of the runs for each measure:
//!
//! - **anonymous** (`RssAnon`, the target's measure): the heap and anonymous mappings, which is
//!   where a map keeps its keys;
//! - **resident** (`VmRSS`, the figure of earlier sessions): the same plus the file-backed pages of
//!   the executable and its libraries that the run touched for the first time. Those do not grow
//!   with the keys: `/proc/self/smaps` of tollgate's children at 100 000 keys showed libc's mapping
//!   64 KiB larger after the keys than before in some processes (libc code faulted in the first
//!   time the limiter called it; 0.66 bytes a key at 100 000 keys), and not in others.
//!
//! | limiter | built as |
//! | --- | --- |
//! | `tollgate` | `KeyedLimiter::<u64>::new(quota).with_max_keys(1 << 20)`: its own sharded table (`u64` key and `AtomicU64` state in each slot) with ahash |
//! | `governor` | `RateLimiter::keyed(quota)`: governor's default `DashMap<u64, InMemoryState>` with std's `RandomState` |
//! | `hashmap` | for reference: a `std` `HashMap<u64, AtomicU64, ahash::RandomState>`, one table, no shards |
//!
//! The quota is one token an hour, capacity 1, for both limiters: each key's one check is admitted
//! and leaves the key active for an hour, so tollgate's sweeps evict nothing (checked: its length
//! is the key count and its eviction count 0 at the end). `with_max_keys(1 << 20)` is tollgate's
//! default bound (1 048 576), set explicitly so that 1 000 000 keys are known to fit.
//!
//! What the figure includes: the tables as they stand after growing by doubling, the maps'
//! shard bookkeeping, and any memory the allocator kept after a table grew (glibc returns a freed
//! large table to the system only when it was mapped on its own; a smaller one may stay in the
//! heap, resident). Page granularity (4 KiB) is negligible at 100 000 keys and more.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use testkit::bench::{anon, anon_bytes, child_runs, rss, rss_bytes};
use tollgate::keyed::KeyedLimiter;
use tollgate::Quota;

/// The key counts: 100 000, and 900 000 and 1 000 000, which fall on either side of a table
/// doubling (so one shows a table nearly full, the other one just grown).
const SIZES: [usize; 3] = [100_000, 900_000, 1_000_000];

/// The limiters, in table order.
const LIMITERS: [&str; 3] = ["tollgate", "governor", "hashmap"];

/// Fresh processes per (limiter, key count); the table gives their median and range.
const RUNS: usize = 15;

/// tollgate's bound on keys: its default, 2^20, set explicitly.
const MAX_KEYS: usize = 1 << 20;

/// One token an hour, capacity 1: every key's one check is admitted and the key stays active.
const PERIOD: Duration = Duration::from_secs(3600);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let limiter = &args[i + 1];
        let keys: usize = args[i + 2].parse().expect("a key count");
        let measure = match args[i + 3].as_str() {
            "anon" => anon,
            "rss" => rss,
            other => panic!("unknown measure {other}"),
        };
        child(limiter, keys, measure);
        return;
    }
    if rss_bytes().is_none() || anon_bytes().is_none() {
        println!("keyed_memory: no VmRSS or RssAnon in /proc/self/status on this system; nothing measured");
        return;
    }
    parent();
}

/// Runs every (limiter, key count) in fresh processes and prints the tables: the anonymous
/// memory's first (the target's measure), then the resident set's.
fn parent() {
    let exe = std::env::current_exe().expect("the bench's own path");
    for (measure, title) in [
        ("anon", "Anonymous memory (`RssAnon`) growth per key"),
        (
            "rss",
            "Resident-set (`VmRSS`) growth per key, file-backed pages included",
        ),
    ] {
        println!("{title}, `u64` keys, in bytes: median of {RUNS} fresh processes (range).");
        println!();
        println!("| keys | tollgate | governor | hashmap (reference) | tollgate ÷ governor |");
        println!("| ---: | ---: | ---: | ---: | ---: |");
        for keys in SIZES {
            let medians: Vec<(f64, f64, f64)> = LIMITERS
                .iter()
                .map(|limiter| {
                    let runs = child_runs(
                        &exe,
                        &["--child", limiter, &keys.to_string(), measure],
                        RUNS,
                        &format!("{limiter} at {keys} keys ({measure})"),
                    );
                    (runs[RUNS / 2], runs[0], runs[RUNS - 1])
                })
                .collect();
            let cell =
                |(median, low, high): (f64, f64, f64)| format!("{median:.1} ({low:.1}–{high:.1})");
            println!(
                "| {keys} | {} | {} | {} | {:.2} |",
                cell(medians[0]),
                cell(medians[1]),
                cell(medians[2]),
                medians[0].0 / medians[1].0
            );
        }
        println!();
    }
}

/// Builds `limiter` empty, adds `keys` keys, and prints the growth of `measure` per key.
fn child(limiter: &str, keys: usize, measure: fn() -> i64) {
    let growth = match limiter {
        "tollgate" => {
            let quota = Quota::per_period(1, PERIOD).expect("a valid quota");
            let map: KeyedLimiter<u64> = KeyedLimiter::new(quota).with_max_keys(MAX_KEYS);
            let before = measure();
            for key in 0..keys as u64 {
                assert!(map.check_key(&key).is_ok(), "a new key is admitted");
            }
            let after = measure();
            assert_eq!(map.len(), keys, "tollgate holds every key");
            assert_eq!(map.evictions(), 0, "tollgate evicted none");
            after - before
        }
        "governor" => {
            let quota = governor::Quota::with_period(PERIOD).expect("a non-zero period");
            let map: governor::DefaultKeyedRateLimiter<u64> = governor::RateLimiter::keyed(quota);
            let before = measure();
            for key in 0..keys as u64 {
                assert!(map.check_key(&key).is_ok(), "a new key is admitted");
            }
            let after = measure();
            assert_eq!(map.len(), keys, "governor holds every key");
            after - before
        }
        "hashmap" => {
            let mut map = HashMap::with_hasher(ahash::RandomState::new());
            let before = measure();
            for key in 0..keys as u64 {
                map.insert(key, AtomicU64::new(0));
            }
            let after = measure();
            assert_eq!(map.len(), keys);
            after - before
        }
        other => panic!("unknown limiter {other}"),
    };
    println!("{}", growth as f64 / keys as f64);
}
