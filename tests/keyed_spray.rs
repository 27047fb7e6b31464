//! A key spray: millions of distinct keys, each seen once, against a bound of a hundred thousand,
//! while a few hot, legitimate keys are checked throughout. The key count never passes the bound,
//! the process's resident memory stays under a ceiling, the hot keys get exactly the answers of
//! their own direct buckets from start to end, and the cost of a key is measured and printed.
//!
//! The full spray (10 million keys against 100 000) runs in release builds only:
//! `cargo test --release --test keyed_spray`. Debug builds run a tenth of it (1 million against
//! 10 000), which exercises the same paths in a few seconds.

use std::collections::HashMap;

use tollgate::keyed::{KeyedError, KeyedLimiter, TokenBucketKeys};
use tollgate::{ManualClock, Nanos, Quota, TokenBucket};

type Limiter = KeyedLimiter<u64, TokenBucketKeys, ManualClock>;

/// The process's resident set size in bytes, from `/proc/self/status` (`None` off Linux).
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(debug_assertions)]
const SCALE: u64 = 10;
#[cfg(not(debug_assertions))]
const SCALE: u64 = 1;

/// Distinct keys sprayed.
const SPRAY: u64 = 10_000_000 / SCALE;
/// The bound.
const MAX_KEYS: usize = 100_000 / SCALE as usize;
/// Hot keys, and how often (in sprayed keys) each is checked.
const HOT: u64 = 4;
const HOT_EVERY: u64 = 50;
/// Simulated time per sprayed key.
const STEP_NS: u64 = 2_000 * SCALE;

/// One test, so that nothing else in the process moves the resident set while it is measured.
#[test]
fn key_spray_keeps_the_bound_the_memory_and_the_hot_keys_exact_limits() {
    let quota = Quota::per_second(10).unwrap();

    // Phase 1: what a key costs. MAX_KEYS keys held at once (a frozen clock: nothing is full again),
    // measured by the resident set before and after.
    let before = rss_bytes();
    let limiter: Limiter =
        KeyedLimiter::with_clock(quota, ManualClock::new()).with_max_keys(MAX_KEYS);
    for k in 0..MAX_KEYS as u64 {
        limiter.check_key_at(&k, Nanos::new(0)).unwrap();
    }
    assert_eq!(limiter.len(), MAX_KEYS);
    let held = rss_bytes();
    if let (Some(before), Some(held)) = (before, held) {
        println!(
            "{MAX_KEYS} u64 keys held: {} bytes of resident memory per key",
            held.saturating_sub(before) / MAX_KEYS as u64
        );
    }
    // All full a second later: one sweep removes every key, and the memory can be given back.
    limiter.clock().set(Nanos::new(1_000_000_000));
    assert_eq!(
        limiter.retain_recent_at(Nanos::new(1_000_000_000)),
        MAX_KEYS
    );
    limiter.shrink_to_fit();
    assert!(limiter.is_empty());
    drop(limiter);

    // Phase 2: the spray. The clock moves 2 µs per sprayed key at full scale (20 µs at a tenth), so a
    // sprayed key (one token of ten taken, refilled in 100 ms) is full again, and evictable, half a
    // bound's worth of keys later.
    let start_rss = rss_bytes();
    let clock = ManualClock::new();
    let limiter: Limiter = KeyedLimiter::with_clock(quota, clock).with_max_keys(MAX_KEYS);
    let mut hot: HashMap<u64, TokenBucket<ManualClock>> = HashMap::new();
    let (mut hot_checks, mut hot_admitted, mut refused) = (0u64, 0u64, 0u64);
    let mut peak_rss = start_rss.unwrap_or(0);
    for i in 0..SPRAY {
        let at = Nanos::new(i * STEP_NS);
        // The clock moves with the readings (an eviction never judges ahead of it).
        limiter.clock().set(at);
        // Sprayed keys start past the hot ones.
        match limiter.check_key_at(&(1_000 + i), at) {
            Ok(_) => {}
            Err(KeyedError::TooManyKeys(_)) => refused += 1,
            Err(e) => panic!("sprayed key {i}: {e}"),
        }
        assert!(limiter.len() <= MAX_KEYS, "{} keys at {i}", limiter.len());
        if i % HOT_EVERY == 0 {
            let key = (i / HOT_EVERY) % HOT;
            let got = limiter.check_key_at(&key, at);
            let bucket = hot
                .entry(key)
                .or_insert_with(|| TokenBucket::with_clock(quota, ManualClock::starting_at(at)));
            let want = bucket.try_acquire_at(at);
            match (&got, &want) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "hot key {key} at {i}"),
                (Err(KeyedError::Denied(a)), Err(b)) => assert_eq!(a, b, "hot key {key} at {i}"),
                _ => panic!("hot key {key} at {i}: {got:?}, its own bucket {want:?}"),
            }
            hot_checks += 1;
            hot_admitted += u64::from(got.is_ok());
        }
        if i % 1_000_000 == 0 {
            peak_rss = peak_rss.max(rss_bytes().unwrap_or(0));
        }
    }
    peak_rss = peak_rss.max(rss_bytes().unwrap_or(0));
    println!(
        "sprayed {SPRAY} keys against {MAX_KEYS}: {} evictions, {refused} refused, peak RSS {} MiB \
         (from {} MiB); hot keys: {hot_admitted} of {hot_checks} admitted",
        limiter.evictions(),
        peak_rss >> 20,
        start_rss.unwrap_or(0) >> 20
    );
    assert_eq!(limiter.overflowed(), refused);
    assert!(limiter.evictions() >= SPRAY - MAX_KEYS as u64 - refused);
    // The hot keys were admitted at their rate, 10 per second each, over the simulated run.
    let seconds = SPRAY * STEP_NS / 1_000_000_000;
    assert!(
        hot_admitted >= HOT * 10 * seconds.max(1) / 2,
        "{hot_admitted}"
    );
    // A generous ceiling on the whole process: the bound holds memory to a few MiB of keys.
    if let Some(start) = start_rss {
        let grown = peak_rss.saturating_sub(start);
        assert!(
            grown < 256 << 20,
            "resident memory grew by {} MiB",
            grown >> 20
        );
    }
}
