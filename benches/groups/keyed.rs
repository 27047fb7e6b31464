//! Keyed limiters: a check on one of 1, 1 000, 100 000 or 1 000 000 known `u64` keys, 1 and 2
//! threads, accept-heavy (`keyed_allow`) and reject-heavy (`keyed_deny`); and the first check of a
//! key never seen before (`keyed_insert`).
//!
//! | bench | limiter | clock read per check |
//! | --- | --- | --- |
//! | `tollgate` | `KeyedLimiter::<u64>::new(quota)` (its own table: lookups take no lock; hashed with ahash), `check_key` | `MonotonicClock` |
//! | `tollgate_at` | the same limiter, `check_key_at` with one reading taken before the sample | none |
//! | `tollgate_coarse` (100 000 keys only) | `KeyedLimiter::with_clock(quota, CoarseClock::new()?)`, `check_key` | one load of quanta's upkeep-thread time |
//! | `governor` | `RateLimiter::keyed(quota)` (governor's default store: a `DashMap` with std's SipHash `RandomState`), `check_key` | governor's `DefaultClock` (quanta) |
//! | `floor` | a read-only `std` `HashMap<u64, AtomicU64, ahash::RandomState>`: a lookup and a GCRA-like compare-and-swap, at one reading taken before the sample | none |
//! | `floor_clock` | the same map and check, at a `MonotonicClock` reading taken per check, after the lookup (as `tollgate` does) | `MonotonicClock` |
//!
//! The floor is what a lookup and one compare-and-swap cost in a map no one writes: the same
//! hasher as tollgate's map, no epoch pin, no eviction protocol. Its word is an arrival time: accept-heavy
//! it starts at 0 and every check moves it on by 1 ns (a CAS); reject-heavy it starts past any
//! reading and every check loads, compares and refuses, writing nothing, as tollgate's and
//! governor's denials do. `floor` beside `tollgate_at` and `floor_clock` beside `tollgate` compare
//! like with like: the difference is the map's own work (tollgate's epoch pin and probe) and the
//! limiter's.
//!
//! **The key space is populated before timing**, one check per key, and stays populated: every
//! sample checks afterwards that tollgate's map still holds every key and evicted none (and
//! governor's holds every key), so each timed check takes the known-key path. Tollgate's limiter
//! forgets a key whose bucket is full again; accept-heavy (10^9 per second) a bucket is full
//! again 1 ns after a check, so a population by `check_key` would be swept away by the limiter's
//! own sweeps (they run after every `max(256, len / 2)` new keys). The population therefore uses
//! `check_key_at` with one reading for every key: at that reading no key is full, and no sweep
//! removes one. During timing no key is new, so no sweep runs. Reject-heavy (one token an hour,
//! capacity 1), the population's check takes each key's only token, and every timed check is
//! refused.
//!
//! **Requests cycle over the keys in a pseudo-random order computed before timing** (a
//! Fisher-Yates shuffle of the keys, from a fixed seed): each thread walks the whole shuffled list
//! from its own starting point (thread `i` of `n` at `i / n` of the way), so consecutive checks
//! land on unrelated slots of the map, and with 1 000 000 keys (a table of about 36 MB) nearly
//! every lookup misses the core's L1 and L2 caches. The walk (a load from the list and a cursor on
//! the thread's own cache line) is the same for every limiter.
//!
//! Timing is `run_threads` from `testkit::bench`, as in `contended_*`: fresh threads every sample,
//! released together by a barrier, wall time from the first thread's start to the last one's end,
//! `Throughput::Elements(threads)` so criterion's `thrpt` is total checks per second. Each limiter
//! is populated once per key-space size and load, and reused by every sample and both thread
//! counts (populating 1 000 000 keys for every sample would take longer than the sample).
//!
//! Bench ids are `keyed_<load>/<bench>/<keys>/<threads>`; `keyed_insert/<bench>/<batch>`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use crossbeam_utils::CachePadded;
use tollgate::keyed::{KeyedLimiter, TokenBucketKeys};
use tollgate::{Clock, CoarseClock, MonotonicClock, Nanos};

use testkit::bench::{floor_decide, run_threads, Load, FLOOR_TOLERANCE};

/// The key-space sizes.
const SIZES: [usize; 4] = [1, 1_000, 100_000, 1_000_000];

/// 1 is the reference; 2 is one per core on the bench machine.
const THREADS: [usize; 2] = [1, 2];

/// The one key-space size at which `tollgate_coarse` is measured: the size of issue 6's targets
/// (all four sizes would add 12 more benches and about 25 s).
const COARSE_SIZE: usize = 100_000;

/// tollgate's bound on keys, set explicitly (it is also the default): 2^20 = 1 048 576, room for
/// the largest key space and the largest insert batch.
const MAX_KEYS: usize = 1 << 20;

/// The seed of the shuffle: fixed, so every run and every limiter walks the same order.
const SEED: u64 = 0x7011_6a7e_5eed_0001;

/// Registers the `keyed_allow`, `keyed_deny` and `keyed_insert` groups.
///
/// 84 benches in the first two, so each is shortened (0.5 s warm-up, 10 samples in 1.2 s) to keep
/// the three groups near 3 minutes.
pub(crate) fn bench(c: &mut Criterion) {
    for load in Load::BOTH {
        let mut group = c.benchmark_group(format!("keyed_{}", load.name()));
        shorten(&mut group);
        for size in SIZES {
            let order = shuffled(size);
            known_keys(&mut group, load, size, &order);
        }
        group.finish();
    }
    insert(c);
}

/// 0.5 s warm-up, 10 samples (criterion's least) in 1.2 s.
fn shorten(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_millis(1200))
        .sample_size(10);
}

/// The keys `0..size` in a pseudo-random order (Fisher-Yates with SplitMix64, fixed seed).
fn shuffled(size: usize) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..size as u64).collect();
    let mut state = SEED;
    for i in (1..keys.len()).rev() {
        let j = (splitmix64(&mut state) % (i as u64 + 1)) as usize;
        keys.swap(i, j);
    }
    keys
}

/// One step of SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number
/// generators", 2014).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The five benches on `size` known keys, at 1 and 2 threads. Each limiter is populated, measured
/// and dropped before the next is built, so at most one large map exists at a time.
fn known_keys(group: &mut BenchmarkGroup<'_, WallTime>, load: Load, size: usize, order: &[u64]) {
    {
        let limiter = populated_tollgate(
            KeyedLimiter::new(load.tollgate_quota()),
            MonotonicClock::new().now(),
            size,
        );
        let evictions = limiter.evictions();
        let intact = |admitted: u64, checks: u64, label: &str| {
            load.verify(label, admitted, checks);
            assert_eq!(limiter.len(), size, "{label}: every key is still held");
            assert_eq!(
                limiter.evictions(),
                evictions,
                "{label}: no key was evicted during timing"
            );
        };
        for threads in THREADS {
            group.throughput(Throughput::Elements(threads as u64));
            measure(
                group,
                "tollgate",
                size,
                threads,
                &limiter,
                order,
                |l, key, _| l.check_key(&key).is_ok(),
                |a, c| intact(a, c, "keyed tollgate"),
            );
            measure(
                group,
                "tollgate_at",
                size,
                threads,
                &limiter,
                order,
                |l, key, at| l.check_key_at(&key, at).is_ok(),
                |a, c| intact(a, c, "keyed tollgate_at"),
            );
        }
    }
    if size == COARSE_SIZE {
        // The upkeep thread belongs to one clock at a time: created here, dropped with the limiter.
        let clock = CoarseClock::new().expect("the coarse clock's upkeep thread starts");
        let at = clock.now();
        let limiter = populated_tollgate(
            KeyedLimiter::with_clock(load.tollgate_quota(), clock),
            at,
            size,
        );
        let evictions = limiter.evictions();
        for threads in THREADS {
            group.throughput(Throughput::Elements(threads as u64));
            measure(
                group,
                "tollgate_coarse",
                size,
                threads,
                &limiter,
                order,
                |l, key, _| l.check_key(&key).is_ok(),
                |admitted, checks| {
                    load.verify("keyed tollgate_coarse", admitted, checks);
                    assert_eq!(limiter.len(), size, "keyed tollgate_coarse: every key held");
                    assert_eq!(
                        limiter.evictions(),
                        evictions,
                        "keyed tollgate_coarse: no eviction"
                    );
                },
            );
        }
    }
    {
        let limiter = populated_governor(load, size);
        for threads in THREADS {
            group.throughput(Throughput::Elements(threads as u64));
            measure(
                group,
                "governor",
                size,
                threads,
                &limiter,
                order,
                |l, key, _| l.check_key(&key).is_ok(),
                |admitted, checks| {
                    load.verify("keyed governor", admitted, checks);
                    assert_eq!(
                        limiter.len(),
                        size,
                        "keyed governor: every key is still held"
                    );
                },
            );
        }
    }
    {
        let floor = Floor::populated(load, size);
        for threads in THREADS {
            group.throughput(Throughput::Elements(threads as u64));
            measure(
                group,
                "floor",
                size,
                threads,
                &floor,
                order,
                |f, key, at| f.check(key, || at.as_u64()),
                |admitted, checks| load.verify("keyed floor", admitted, checks),
            );
            let clock = MonotonicClock::new();
            measure(
                group,
                "floor_clock",
                size,
                threads,
                &floor,
                order,
                |f, key, _| f.check(key, || clock.now().as_u64()),
                |admitted, checks| load.verify("keyed floor_clock", admitted, checks),
            );
        }
    }
}

/// `limiter` (empty) bounded to [`MAX_KEYS`] and holding the keys `0..size`, each checked once at
/// `at`, one reading of its clock (see the module docs for why one reading).
fn populated_tollgate<C: Clock>(
    limiter: KeyedLimiter<u64, TokenBucketKeys, C>,
    at: Nanos,
    size: usize,
) -> KeyedLimiter<u64, TokenBucketKeys, C> {
    let limiter = limiter.with_max_keys(MAX_KEYS);
    for key in 0..size as u64 {
        assert!(
            limiter.check_key_at(&key, at).is_ok(),
            "a new key's first check is admitted"
        );
    }
    assert_eq!(limiter.len(), size, "tollgate holds every key populated");
    assert_eq!(
        limiter.evictions(),
        0,
        "tollgate evicted none while populating"
    );
    limiter
}

/// governor's keyed limiter (default store, hasher and clock) holding the keys `0..size`, each
/// checked once.
fn populated_governor(load: Load, size: usize) -> governor::DefaultKeyedRateLimiter<u64> {
    let limiter = governor::RateLimiter::keyed(load.governor_quota());
    for key in 0..size as u64 {
        assert!(
            limiter.check_key(&key).is_ok(),
            "a new key's first check is admitted"
        );
    }
    assert_eq!(limiter.len(), size, "governor holds every key populated");
    limiter
}

/// The floor: a read-only map from key to a GCRA-like word (the theoretical arrival time, in
/// nanoseconds), and a check that is a lookup plus one compare-and-swap (accept-heavy) or one load
/// and a comparison (reject-heavy). No lock.
#[derive(Debug)]
struct Floor {
    map: HashMap<u64, AtomicU64, ahash::RandomState>,
}

impl Floor {
    /// Every key's word starts at [`Load::floor_word`].
    fn populated(load: Load, size: usize) -> Floor {
        let start = load.floor_word();
        let mut map = HashMap::with_hasher(ahash::RandomState::new());
        map.extend((0..size as u64).map(|key| (key, AtomicU64::new(start))));
        Floor { map }
    }

    /// Admits `key` at reading `now` if its arrival time is within the tolerance of `now`, moving the
    /// arrival time on by 1 ns (as tollgate's and governor's accept-heavy quota does).
    #[inline]
    fn check(&self, key: u64, now: impl FnOnce() -> u64) -> bool {
        let Some(word) = self.map.get(&key) else {
            return false;
        };
        // The reading is taken once the key's word is found, so that the lookup's cache misses are
        // not held up behind the clock read. (`KeyedLimiter::check_key` goes further: it asks for
        // the key's lines before the clock and probes after it, so the two overlap; the
        // `instructions` bench's `Floor` does the same.)
        let now = now();
        floor_decide(word, now, FLOOR_TOLERANCE)
    }
}

/// One thread's walk over the shuffled keys: the shared limiter, the order, this thread's reading
/// for the `_at` benches, and its position (on a cache line of its own).
struct Walk<'a, L> {
    limiter: &'a L,
    order: &'a [u64],
    at: Nanos,
    position: CachePadded<AtomicUsize>,
}

impl<L> Walk<'_, L> {
    /// The next key of this thread's walk. Only this thread moves the position (Relaxed: a plain
    /// load and store; an atomic only so that the walk is `Sync` for `run_threads`).
    #[inline(always)]
    fn next(&self) -> u64 {
        let position = self.position.load(Ordering::Relaxed);
        let key = self.order[position];
        let next = position + 1;
        self.position.store(
            if next == self.order.len() { 0 } else { next },
            Ordering::Relaxed,
        );
        key
    }
}

/// One benchmark: `threads` threads checking `limiter`, each walking `order` from its own starting
/// point; `verify(admitted, checks)` judges every sample.
#[allow(clippy::too_many_arguments)]
fn measure<L: Sync>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    bench: &str,
    size: usize,
    threads: usize,
    limiter: &L,
    order: &[u64],
    check: impl Fn(&L, u64, Nanos) -> bool + Sync,
    verify: impl Fn(u64, u64),
) {
    let clock = MonotonicClock::new();
    group.bench_function(BenchmarkId::new(bench, format!("{size}/{threads}")), |b| {
        b.iter_custom(|iters| {
            let at = clock.now();
            let walks: Vec<Walk<'_, L>> = (0..threads)
                .map(|i| Walk {
                    limiter,
                    order,
                    at,
                    position: CachePadded::new(AtomicUsize::new(i * order.len() / threads)),
                })
                .collect();
            let (elapsed, admitted) =
                run_threads(threads, iters, &walks, |w| check(w.limiter, w.next(), w.at));
            verify(admitted, iters * threads as u64);
            elapsed
        });
    });
}

/// The batch sizes of `keyed_insert`: new keys into one fresh limiter before the next.
const BATCHES: [usize; 2] = [1 << 10, 1 << 20];

/// `keyed_insert`: the first check of keys never seen before, one thread.
///
/// Every iteration checks a new key (the next of a counter) in a limiter that started empty, one
/// per batch of [`BATCHES`] keys; building and dropping the limiters is not timed. The quota is the
/// reject-heavy one (one token an hour, capacity 1), whose first check on a key is admitted and
/// leaves the key active for an hour: every key is kept, so the map really grows to the batch size
/// (with its table doublings), and tollgate's sweeps (after every `max(256, len / 2)` new keys)
/// scan the map and find nothing to remove, a cost that is part of its insert. Every check must be
/// admitted, and tollgate must hold every key of the batch with no eviction.
fn insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("keyed_insert");
    shorten(&mut group);
    group.throughput(Throughput::Elements(1));
    let load = Load::Deny;
    for batch in BATCHES {
        group.bench_function(BenchmarkId::new("tollgate", batch), |b| {
            b.iter_custom(|iters| {
                batches(iters, batch, |keys| {
                    let limiter: KeyedLimiter<u64> =
                        KeyedLimiter::new(load.tollgate_quota()).with_max_keys(MAX_KEYS);
                    let (elapsed, admitted) =
                        first_checks(keys, |key| limiter.check_key(&key).is_ok());
                    assert_eq!(admitted, keys, "insert tollgate: every new key admitted");
                    assert_eq!(
                        limiter.len() as u64,
                        keys,
                        "insert tollgate: every key held"
                    );
                    assert_eq!(limiter.evictions(), 0, "insert tollgate: no key evicted");
                    (elapsed, limiter)
                })
            });
        });
        group.bench_function(BenchmarkId::new("governor", batch), |b| {
            b.iter_custom(|iters| {
                batches(iters, batch, |keys| {
                    let limiter: governor::DefaultKeyedRateLimiter<u64> =
                        governor::RateLimiter::keyed(load.governor_quota());
                    let (elapsed, admitted) =
                        first_checks(keys, |key| limiter.check_key(&key).is_ok());
                    assert_eq!(admitted, keys, "insert governor: every new key admitted");
                    assert_eq!(
                        limiter.len() as u64,
                        keys,
                        "insert governor: every key held"
                    );
                    (elapsed, limiter)
                })
            });
        });
    }
    group.finish();
}

/// Splits `iters` checks into batches of at most `batch`, runs `one(keys)` for each (which builds a
/// fresh limiter, times `keys` first checks and hands the limiter back), and sums the timed spans;
/// each limiter is dropped outside them.
fn batches<L>(iters: u64, batch: usize, one: impl Fn(u64) -> (Duration, L)) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let keys = left.min(batch as u64);
        let (elapsed, limiter) = one(keys);
        drop(limiter);
        total += elapsed;
        left -= keys;
    }
    total
}

/// Checks the keys `0..keys` once each, timed; returns the time and the number admitted.
#[inline(never)]
fn first_checks(keys: u64, check: impl Fn(u64) -> bool) -> (Duration, u64) {
    let start = Instant::now();
    let mut admitted = 0;
    for key in 0..keys {
        admitted += u64::from(check(key));
    }
    (start.elapsed(), admitted)
}
