//! Candidate stores for the keyed limiter, measured side by side in one run (issue 14, item 3): the
//! map that holds one state word per key, with everything else about the limiter taken away, so
//! that the map's lookup, insert, sweep and memory are what differ.
//!
//! `cargo bench --bench maps` runs every part (about 5 minutes on the 2-core bench machine) and ends
//! with markdown tables. Parts and sizes can be chosen with environment variables:
//!
//! ```text
//! MAPS_PARTS=throughput,insert,sweep,memory   # default: all four
//! MAPS_SIZES=1,1000,100000,1000000,string     # throughput key spaces; `string` is 100 000 String keys
//! cargo bench --bench maps -- 'maps_deny/.*/100000/'   # a criterion filter narrows the criterion parts
//! MAPS_SIZES=1000 MAPS_PARTS=throughput,insert,sweep cargo bench --bench maps -- --test   # smoke test
//! ```
//!
//! The candidates, all hashed with `ahash::RandomState` (the keyed store's hasher) so that the
//! hasher does not differ:
//!
//! | candidate | map | what a lookup writes |
//! | --- | --- | --- |
//! | `tollgate` | the keyed limiter's own table (`src/keyed/table.rs`, reached through the hidden `tollgate::keyed::__bench::BenchTable`), with the limiter's shard count; `read` | a store to the calling thread's own epoch slot on entering and one on leaving, no fence on Linux (the reclaimer issues `membarrier(2)`) |
//! | `dashmap` | `dashmap::DashMap<K, AtomicU64>`, the keyed store until issue 14, and governor's (8 shards on 2 cores), `get` | the shard's `RwLock` word: a CAS to take the read lock and a `fetch_sub` to release it, on a line every reader of that shard shares |
//! | `clashmap` | `clashmap::ClashMap<K, AtomicU64>`, a DashMap fork (hashbrown's `HashTable` per shard), `view` | the same: a shard read lock |
//! | `papaya` | `papaya::HashMap<K, AtomicU64>` (default incremental resizing), `pin().get` | a seize guard: a store and a swap on the calling thread's own reservation slot, nothing shared |
//! | `scc_index` | `scc::HashIndex<K, AtomicU64>`, `peek_with` | an sdd guard: a swap and a store on the calling thread's own epoch slot (every 256th guard also scans the global epoch) |
//! | `scc_index_box` | `scc::HashIndex<K, Box<AtomicU64>>`, `peek_with` | the same; the word is one pointer further away (see below why a limiter would need that) |
//! | `flurry` | `flurry::HashMap<K, AtomicU64>` (a port of Java's `ConcurrentHashMap`), `pin().get` | a seize guard, as papaya (flurry's own collector) |
//! | `floor` | a `std` `HashMap<K, AtomicU64>` built once and only read (throughput only: it cannot insert or sweep while shared) | nothing |
//!
//! `scc::HashIndex` moves its entries bitwise into the new array when it grows, while a reader may
//! still hold a reference into the old one (its docs: `peek` "may point to an old snapshot of the
//! value if the entry has recently been relocated"). A limiter's compare-and-swap on such a stale
//! word would be lost: an admission forgotten, so more than the limit admitted. `scc_index` measures
//! the map's lookup with the word inline (as every other candidate has it); `scc_index_box` is what a
//! limiter could use, the word in a box of its own that relocation does not move.
//!
//! The word and its decision are the keyed bench's floor (`benches/groups/keyed.rs`): a GCRA-like
//! arrival time. Accept-heavy (`maps_allow`) it starts at 0 and every check moves it on by 1 ns with
//! one compare-and-swap on the key's own word; reject-heavy (`maps_deny`) it starts at `u64::MAX` and
//! every check loads it, compares and refuses, writing nothing. The reading is taken once per sample,
//! so no clock read is timed. Every sample asserts that every check got the load's answer (a key
//! missing from a map would be refused and fail the accept-heavy assertion).
//!
//! | group | rows | what one element is |
//! | --- | --- | --- |
//! | `maps_allow`, `maps_deny` | `<candidate>/<keys>/<threads>`: 1, 1 000, 100 000 and 1 000 000 `u64` keys and `string` (100 000 `String` keys like `"10.1.134.160"`), 1 and 2 threads | one check of a known key; `thrpt` is total checks per second over all threads |
//! | `maps_insert` | `<candidate>/100000`: one thread inserts the keys `0..100 000` into an empty map, insert-if-vacant (the limiter's new-key path), growth included | one first insert |
//! | `maps_sweep` | `<candidate>/100000`: one thread sweeps a map of 100 000 keys, half of them forgettable: for each entry the predicate tries to mark the word removed with a compare-and-swap (as issue 14's eviction protocol does) and the map unlinks the marked ones | one key scanned |
//!
//! Throughput is timed as in `groups/keyed.rs` (`run_threads` from `testkit::bench`: fresh threads
//! per sample released by a barrier, wall time from the first start to the last end); each thread
//! walks the same pseudo-randomly shuffled key list from its own starting point, so that at 1 000 000
//! keys nearly every lookup misses the L1 and L2 caches. Each map is populated once per key space and
//! load and reused by every sample and both thread counts. Insert and sweep build and drop their maps
//! outside the timed spans.
//!
//! The `memory` part is not criterion's: as `benches/keyed_memory.rs` does, it re-executes this
//! binary (`--child <candidate> <keys> <u64|string>`) [`RUNS`] times per cell; the child reads its
//! `VmRSS`, inserts the keys `0..keys` into an empty map, reads it again and prints the growth per
//! key. Rows: 100 000, 900 000 and 1 000 000 `u64` keys (either side of a table doubling) and 100 000
//! `String` keys; governor's keyed limiter (`RateLimiter::keyed`, one check per key) is the
//! yardstick, as issue 14's memory target is "no more than governor's". Linux only.
//!
//! The tables at the end: throughput in millions of checks per second (criterion's median) with the
//! ratio to `dashmap` in the same run; insert in ns per new key; sweep in ns per key scanned; memory
//! in bytes per key (median of the runs).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use crossbeam_utils::CachePadded;
use testkit::bench::{
    child_runs, criterion_home, floor_decide, rss, rss_bytes, run_threads, Load, FLOOR_TOLERANCE,
};
use tollgate::{Clock, MonotonicClock};

/// The `u64` key spaces of the throughput part (the keyed bench's).
const SIZES: [usize; 4] = [1, 1_000, 100_000, 1_000_000];

/// The number of `String` keys in the throughput and memory parts.
const STRING_KEYS: usize = 100_000;

/// 1 is the reference; 2 is one per core on the bench machine.
const THREADS: [usize; 2] = [1, 2];

/// Keys inserted into one fresh map per `maps_insert` batch.
const INSERT_KEYS: usize = 100_000;

/// Keys in the map each `maps_sweep` iteration sweeps (half of them are removed).
const SWEEP_KEYS: usize = 100_000;

/// The memory part's `u64` key counts (those of `keyed_memory`).
const MEMORY_SIZES: [usize; 3] = [100_000, 900_000, 1_000_000];

/// Fresh processes per memory cell; the table gives their median.
const RUNS: usize = 3;

/// The seed of the shuffle (the keyed bench's): every candidate walks the same order.
const SEED: u64 = 0x7011_6a7e_5eed_0001;

/// The candidates of the throughput table, in column order (`floor` is throughput only).
const CANDIDATES: [&str; 8] = [
    "tollgate",
    "dashmap",
    "clashmap",
    "papaya",
    "scc_index",
    "scc_index_box",
    "flurry",
    "floor",
];

/// The candidates of the insert, sweep and memory parts.
const STORES: [&str; 7] = [
    "tollgate",
    "dashmap",
    "clashmap",
    "papaya",
    "scc_index",
    "scc_index_box",
    "flurry",
];

/// What every candidate's key type offers (flurry wants `Clone + Ord`).
trait Key: Hash + Eq + Ord + Clone + Send + Sync + 'static {
    /// The `i`-th key of a key space.
    fn nth(i: usize) -> Self;
}

impl Key for u64 {
    fn nth(i: usize) -> u64 {
        i as u64
    }
}

impl Key for String {
    /// An IPv4-like address, 8 to 15 bytes: the shape of a per-client key.
    fn nth(i: usize) -> String {
        format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255)
    }
}

/// The known-key path: find `key`'s word and run `f` on it.
trait Lookup<K>: Sync {
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R>;
}

/// Everything else the limiter's store does: insert-if-vacant, a sweep with a predicate, and len.
trait Store<K>: Lookup<K> + Sized {
    fn new() -> Self;
    /// Inserts `key` with a word `word` unless it is there; answers whether it inserted.
    fn insert_if_vacant(&self, key: K, word: u64) -> bool;
    /// Removes every entry whose word `evict` approves; answers how many it removed.
    fn sweep(&self, evict: impl FnMut(&AtomicU64) -> bool) -> usize;
    fn len(&self) -> usize;
}

/// A map's `retain` (given as `retain`, which calls `keep` on each word and drops the entry when it
/// answers `false`) with `evict` deciding, answering how many entries it removed.
fn counted(
    mut evict: impl FnMut(&AtomicU64) -> bool,
    retain: impl FnOnce(&mut dyn FnMut(&AtomicU64) -> bool),
) -> usize {
    let mut removed = 0;
    retain(&mut |word| {
        let gone = evict(word);
        removed += usize::from(gone);
        !gone
    });
    removed
}

/// The keyed limiter's own table (`src/keyed/table.rs`), chosen by this bench: lookups take no
/// lock (they enter the table's epoch: a store to the thread's own slot).
#[cfg(not(tollgate_loom))]
struct Tollgate<K>(tollgate::keyed::__bench::BenchTable<K>);

/// Under loom (whose build compiles every target, and whose atomics the table then uses) the
/// bench is never run; the name stands for DashMap so that it compiles.
#[cfg(tollgate_loom)]
type Tollgate<K> = Dash<K>;

#[cfg(not(tollgate_loom))]
impl<K: Key> Lookup<K> for Tollgate<K> {
    #[inline]
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R> {
        self.0.read(key, f)
    }
}

#[cfg(not(tollgate_loom))]
impl<K: Key> Store<K> for Tollgate<K> {
    fn new() -> Self {
        Tollgate(Default::default())
    }
    fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        self.0.insert_if_vacant(key, word)
    }
    fn sweep(&self, evict: impl FnMut(&AtomicU64) -> bool) -> usize {
        self.0.sweep(evict)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// DashMap: the keyed store until issue 14, and governor's.
struct Dash<K>(dashmap::DashMap<K, AtomicU64, ahash::RandomState>);

impl<K: Key> Lookup<K> for Dash<K> {
    #[inline]
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R> {
        // The `Ref` holds the shard's read lock until `f` returns, as the limiter's does.
        self.0.get(key).map(|entry| f(entry.value()))
    }
}

impl<K: Key> Store<K> for Dash<K> {
    fn new() -> Self {
        Dash(dashmap::DashMap::with_hasher(ahash::RandomState::new()))
    }
    fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        match self.0.entry(key) {
            dashmap::mapref::entry::Entry::Occupied(_) => false,
            dashmap::mapref::entry::Entry::Vacant(entry) => {
                entry.insert(AtomicU64::new(word));
                true
            }
        }
    }
    fn sweep(&self, evict: impl FnMut(&AtomicU64) -> bool) -> usize {
        counted(evict, |keep| self.0.retain(|_, word| keep(word)))
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// A DashMap fork: hashbrown's `HashTable` per shard, the same shard read lock.
struct Clash<K>(clashmap::ClashMap<K, AtomicU64, ahash::RandomState>);

impl<K: Key> Lookup<K> for Clash<K> {
    #[inline]
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R> {
        self.0.view(key, |_, word| f(word))
    }
}

impl<K: Key> Store<K> for Clash<K> {
    fn new() -> Self {
        Clash(clashmap::ClashMap::with_hasher(ahash::RandomState::new()))
    }
    fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        match self.0.entry(key) {
            clashmap::mapref::entry::Entry::Occupied(_) => false,
            clashmap::mapref::entry::Entry::Vacant(entry) => {
                entry.insert(AtomicU64::new(word));
                true
            }
        }
    }
    fn sweep(&self, evict: impl FnMut(&AtomicU64) -> bool) -> usize {
        counted(evict, |keep| self.0.retain(|_, word| keep(word)))
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// papaya: lock-free reads behind a seize guard; every entry is an allocation of its own.
struct Papaya<K>(papaya::HashMap<K, AtomicU64, ahash::RandomState>);

impl<K: Key> Lookup<K> for Papaya<K> {
    #[inline]
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R> {
        // One guard per check, as a limiter's `check_key` would take.
        self.0.pin().get(key).map(f)
    }
}

impl<K: Key> Store<K> for Papaya<K> {
    fn new() -> Self {
        Papaya(
            papaya::HashMap::builder()
                .hasher(ahash::RandomState::new())
                .build(),
        )
    }
    fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        self.0.pin().try_insert(key, AtomicU64::new(word)).is_ok()
    }
    fn sweep(&self, evict: impl FnMut(&AtomicU64) -> bool) -> usize {
        counted(evict, |keep| self.0.pin().retain(|_, word| keep(word)))
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// scc's `HashIndex`, the word inline (a stale copy after a resize: see the module docs).
struct SccIndex<K>(scc::HashIndex<K, AtomicU64, ahash::RandomState>);

impl<K: Key> Lookup<K> for SccIndex<K> {
    #[inline]
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R> {
        self.0.peek_with(key, |_, word| f(word))
    }
}

impl<K: Key> Store<K> for SccIndex<K> {
    fn new() -> Self {
        SccIndex(scc::HashIndex::with_hasher(ahash::RandomState::new()))
    }
    fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        self.0.insert_sync(key, AtomicU64::new(word)).is_ok()
    }
    fn sweep(&self, evict: impl FnMut(&AtomicU64) -> bool) -> usize {
        counted(evict, |keep| self.0.retain_sync(|_, word| keep(word)))
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// scc's `HashIndex` with the word boxed, so that relocation moves the pointer, not the word.
struct SccIndexBox<K>(scc::HashIndex<K, Box<AtomicU64>, ahash::RandomState>);

impl<K: Key> Lookup<K> for SccIndexBox<K> {
    #[inline]
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R> {
        self.0.peek_with(key, |_, word| f(word))
    }
}

impl<K: Key> Store<K> for SccIndexBox<K> {
    fn new() -> Self {
        SccIndexBox(scc::HashIndex::with_hasher(ahash::RandomState::new()))
    }
    fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        self.0
            .insert_sync(key, Box::new(AtomicU64::new(word)))
            .is_ok()
    }
    fn sweep(&self, evict: impl FnMut(&AtomicU64) -> bool) -> usize {
        counted(evict, |keep| self.0.retain_sync(|_, word| keep(word)))
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// flurry: Java's `ConcurrentHashMap` design; lock-free reads behind a seize guard, a node and a
/// boxed value per entry, a bin lock for writes.
struct Flurry<K>(flurry::HashMap<K, AtomicU64, ahash::RandomState>);

impl<K: Key> Lookup<K> for Flurry<K> {
    #[inline]
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R> {
        self.0.pin().get(key).map(f)
    }
}

impl<K: Key> Store<K> for Flurry<K> {
    fn new() -> Self {
        Flurry(flurry::HashMap::with_hasher(ahash::RandomState::new()))
    }
    fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        self.0.pin().try_insert(key, AtomicU64::new(word)).is_ok()
    }
    fn sweep(&self, evict: impl FnMut(&AtomicU64) -> bool) -> usize {
        // `retain` removes an entry only if its value (the boxed word's pointer) is unchanged.
        counted(evict, |keep| self.0.pin().retain(|_, word| keep(word)))
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The floor: a `std` map built once, then only read. No lock, no guard.
struct Floor<K>(HashMap<K, AtomicU64, ahash::RandomState>);

impl<K: Key> Lookup<K> for Floor<K> {
    #[inline]
    fn read<R>(&self, key: &K, f: impl Fn(&AtomicU64) -> R) -> Option<R> {
        self.0.get(key).map(f)
    }
}

/// The one-word decision: admits at `now` if the arrival time is within the tolerance, moving it on
/// by 1 ns with a compare-and-swap; a refusal writes nothing.
#[inline]
fn decide(word: &AtomicU64, now: u64) -> bool {
    floor_decide(word, now, FLOOR_TOLERANCE)
}

/// The keys `0..size` in a pseudo-random order (Fisher-Yates with SplitMix64, fixed seed).
///
/// The keys are cloned once more in walk order, so that a `String` key's bytes lie in the heap in
/// the order the walk reads them (next to the previous key's): a request's key is in the cache
/// when it is checked, and the map's own memory is what misses.
fn shuffled<K: Key>(size: usize) -> Vec<K> {
    let mut keys: Vec<K> = (0..size).map(K::nth).collect();
    let mut state = SEED;
    for i in (1..keys.len()).rev() {
        let j = (splitmix64(&mut state) % (i as u64 + 1)) as usize;
        keys.swap(i, j);
    }
    keys.to_vec()
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

/// A store of the keys `0..size`, every word at `word`.
fn populated<K: Key, S: Store<K>>(size: usize, word: u64) -> S {
    let store = S::new();
    for i in 0..size {
        assert!(store.insert_if_vacant(K::nth(i), word), "a new key inserts");
    }
    assert_eq!(store.len(), size, "the store holds every key");
    store
}

/// The bench ids that ran in this process, with the number of elements per iteration, so that the
/// summary reads only their estimates (a criterion filter may have skipped others).
static RAN: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

/// Notes that the bench `id` (`group/function/parameter`) ran, with `elements` per iteration.
fn ran(id: &str, elements: u64) {
    let mut ran = RAN.lock().expect("no bench panicked while holding it");
    if !ran.iter().any(|(known, _)| known == id) {
        ran.push((id.to_owned(), elements));
    }
}

/// One thread's walk over the shuffled keys: the shared map, the order, the sample's reading, and
/// its position (on a cache line of its own).
struct Walk<'a, M, K> {
    map: &'a M,
    order: &'a [K],
    now: u64,
    position: CachePadded<AtomicUsize>,
}

impl<M, K> Walk<'_, M, K> {
    /// The next key of this thread's walk. Only this thread moves the position (Relaxed: an atomic
    /// only so that the walk is `Sync` for `run_threads`).
    #[inline(always)]
    fn next(&self) -> &K {
        let position = self.position.load(Ordering::Relaxed);
        let next = position + 1;
        self.position.store(
            if next == self.order.len() { 0 } else { next },
            Ordering::Relaxed,
        );
        &self.order[position]
    }
}

/// `threads` threads checking keys of `map` along `order`, each from its own starting point.
fn measure<K: Key, M: Lookup<K>>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    load: Load,
    candidate: &str,
    space: &str,
    map: &M,
    order: &[K],
) {
    let clock = MonotonicClock::new();
    for threads in THREADS {
        group.throughput(Throughput::Elements(threads as u64));
        let id = BenchmarkId::new(candidate, format!("{space}/{threads}"));
        let full = format!("maps_{}/{candidate}/{space}/{threads}", load.name());
        group.bench_function(id, |b| {
            ran(&full, threads as u64);
            b.iter_custom(|iters| {
                let now = clock.now().as_u64();
                let walks: Vec<Walk<'_, M, K>> = (0..threads)
                    .map(|i| Walk {
                        map,
                        order,
                        now,
                        position: CachePadded::new(AtomicUsize::new(i * order.len() / threads)),
                    })
                    .collect();
                let (elapsed, admitted) = run_threads(threads, iters, &walks, |w| {
                    w.map.read(w.next(), |word| decide(word, w.now)) == Some(true)
                });
                load.verify(&full, admitted, iters * threads as u64);
                elapsed
            });
        });
    }
}

/// Every candidate on one key space: each populated, measured at 1 and 2 threads, and dropped
/// before the next is built.
fn key_space<K: Key>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    load: Load,
    size: usize,
    space: &str,
) {
    let order: Vec<K> = shuffled(size);
    let word = load.floor_word();
    measure(
        group,
        load,
        "tollgate",
        space,
        &populated::<K, Tollgate<K>>(size, word),
        &order,
    );
    measure(
        group,
        load,
        "dashmap",
        space,
        &populated::<K, Dash<K>>(size, word),
        &order,
    );
    measure(
        group,
        load,
        "clashmap",
        space,
        &populated::<K, Clash<K>>(size, word),
        &order,
    );
    measure(
        group,
        load,
        "papaya",
        space,
        &populated::<K, Papaya<K>>(size, word),
        &order,
    );
    measure(
        group,
        load,
        "scc_index",
        space,
        &populated::<K, SccIndex<K>>(size, word),
        &order,
    );
    measure(
        group,
        load,
        "scc_index_box",
        space,
        &populated::<K, SccIndexBox<K>>(size, word),
        &order,
    );
    measure(
        group,
        load,
        "flurry",
        space,
        &populated::<K, Flurry<K>>(size, word),
        &order,
    );
    let floor = Floor(
        (0..size)
            .map(|i| (K::nth(i), AtomicU64::new(word)))
            .collect(),
    );
    measure(group, load, "floor", space, &floor, &order);
}

/// The throughput spaces selected by `MAPS_SIZES` (default: the four sizes and `string`).
fn spaces() -> Vec<String> {
    match std::env::var("MAPS_SIZES") {
        Ok(list) => list.split(',').map(|s| s.trim().to_owned()).collect(),
        Err(_) => SIZES
            .iter()
            .map(usize::to_string)
            .chain(["string".to_owned()])
            .collect(),
    }
}

/// `maps_allow` and `maps_deny`.
fn throughput(c: &mut Criterion) {
    for load in Load::BOTH {
        let mut group = c.benchmark_group(format!("maps_{}", load.name()));
        shorten(&mut group);
        for space in spaces() {
            if space == "string" {
                key_space::<String>(&mut group, load, STRING_KEYS, "string");
            } else {
                let size: usize = space.parse().unwrap_or_else(|_| {
                    panic!("MAPS_SIZES: {space:?} is neither a key count nor `string`")
                });
                key_space::<u64>(&mut group, load, size, &space);
            }
        }
        group.finish();
    }
}

/// 0.3 s warm-up, 10 samples (criterion's least) in 0.7 s: 140 throughput benches stay near 2.5
/// minutes.
fn shorten(group: &mut BenchmarkGroup<'_, WallTime>) {
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_millis(700))
        .sample_size(10);
}

/// `maps_insert`: first inserts of the keys `0..INSERT_KEYS` into fresh maps, one thread.
fn insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("maps_insert");
    shorten(&mut group);
    group.measurement_time(Duration::from_millis(1500));
    group.throughput(Throughput::Elements(1));
    insert_one::<Tollgate<u64>>(&mut group, "tollgate");
    insert_one::<Dash<u64>>(&mut group, "dashmap");
    insert_one::<Clash<u64>>(&mut group, "clashmap");
    insert_one::<Papaya<u64>>(&mut group, "papaya");
    insert_one::<SccIndex<u64>>(&mut group, "scc_index");
    insert_one::<SccIndexBox<u64>>(&mut group, "scc_index_box");
    insert_one::<Flurry<u64>>(&mut group, "flurry");
    group.finish();
}

fn insert_one<S: Store<u64>>(group: &mut BenchmarkGroup<'_, WallTime>, candidate: &str) {
    let full = format!("maps_insert/{candidate}/{INSERT_KEYS}");
    group.bench_function(BenchmarkId::new(candidate, INSERT_KEYS), |b| {
        ran(&full, 1);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let keys = left.min(INSERT_KEYS as u64);
                let store = S::new();
                let start = Instant::now();
                let mut inserted = 0;
                for key in 0..keys {
                    inserted += u64::from(store.insert_if_vacant(key, 0));
                }
                total += start.elapsed();
                assert_eq!(inserted, keys, "{full}: every new key inserted");
                assert_eq!(store.len() as u64, keys, "{full}: every key held");
                drop(store);
                left -= keys;
            }
            total
        });
    });
}

/// The word of a key a sweep may forget, and the mark a sweep leaves on a word it removes.
const FORGETTABLE: u64 = 0;
const REMOVED: u64 = u64::MAX - 1;

/// `maps_sweep`: one sweep of a map of `SWEEP_KEYS` keys, half forgettable, one thread.
fn sweep(c: &mut Criterion) {
    let mut group = c.benchmark_group("maps_sweep");
    shorten(&mut group);
    group.measurement_time(Duration::from_millis(1500));
    group.throughput(Throughput::Elements(SWEEP_KEYS as u64));
    sweep_one::<Tollgate<u64>>(&mut group, "tollgate");
    sweep_one::<Dash<u64>>(&mut group, "dashmap");
    sweep_one::<Clash<u64>>(&mut group, "clashmap");
    sweep_one::<Papaya<u64>>(&mut group, "papaya");
    sweep_one::<SccIndex<u64>>(&mut group, "scc_index");
    sweep_one::<SccIndexBox<u64>>(&mut group, "scc_index_box");
    sweep_one::<Flurry<u64>>(&mut group, "flurry");
    group.finish();
}

fn sweep_one<S: Store<u64>>(group: &mut BenchmarkGroup<'_, WallTime>, candidate: &str) {
    let full = format!("maps_sweep/{candidate}/{SWEEP_KEYS}");
    group.bench_function(BenchmarkId::new(candidate, SWEEP_KEYS), |b| {
        ran(&full, SWEEP_KEYS as u64);
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                // Even keys are forgettable, odd ones active (a word no sweep may mark).
                let store = S::new();
                for key in 0..SWEEP_KEYS as u64 {
                    let word = if key % 2 == 0 { FORGETTABLE } else { u64::MAX };
                    assert!(store.insert_if_vacant(key, word));
                }
                let start = Instant::now();
                let removed = store.sweep(|word| {
                    // The eviction protocol's mark: only a forgettable word is marked removed.
                    // Relaxed: nothing else is published by the word (single-threaded here).
                    word.compare_exchange(
                        FORGETTABLE,
                        REMOVED,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
                });
                total += start.elapsed();
                assert_eq!(removed, SWEEP_KEYS / 2, "{full}: half the keys removed");
                assert_eq!(store.len(), SWEEP_KEYS / 2, "{full}: half the keys kept");
                drop(store);
            }
            total
        });
    });
}

/// The parts selected by `MAPS_PARTS` (default: all).
fn part(name: &str) -> bool {
    match std::env::var("MAPS_PARTS") {
        Ok(list) => list.split(',').any(|p| p.trim() == name),
        Err(_) => true,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        let keys: usize = args[i + 2].parse().expect("a key count");
        child(&args[i + 1], keys, &args[i + 3]);
        return;
    }
    // No plots: their drawing took longer than the 1 s each bench is sampled (the tables below
    // are the output); `--plotting-backend plotters` on the command line turns them back on.
    let mut c = Criterion::default().without_plots().configure_from_args();
    if part("throughput") {
        throughput(&mut c);
    }
    if part("insert") {
        insert(&mut c);
    }
    if part("sweep") {
        sweep(&mut c);
    }
    c.final_summary();
    // `--test` (every bench once, as a smoke test) and `--list` measure nothing: no tables, and
    // criterion's estimates on disk would be an earlier run's.
    if args.iter().any(|a| a == "--test" || a == "--list") {
        return;
    }
    summary();
    if part("memory") {
        memory();
    }
}

/// The median time per iteration, in ns, of the bench `id`, from criterion's `estimates.json`
/// (criterion's folder for `group/function/parameter` has the `/` of the parameter as `_`).
fn median_ns(id: &str) -> Option<f64> {
    let mut parts = id.splitn(3, '/');
    let (group, function, parameter) = (parts.next()?, parts.next()?, parts.next()?);
    let path = criterion_home()?
        .join(group)
        .join(function)
        .join(parameter.replace('/', "_"))
        .join("new")
        .join("estimates.json");
    let json = std::fs::read_to_string(path).ok()?;
    let median = &json[json.find("\"median\"")?..];
    let estimate = &median[median.find("\"point_estimate\":")? + "\"point_estimate\":".len()..];
    let end = estimate.find([',', '}'])?;
    estimate[..end].trim().parse().ok()
}

/// The markdown tables of the criterion parts that ran.
fn summary() {
    let ran = RAN
        .lock()
        .expect("no bench panicked while holding it")
        .clone();
    if ran.is_empty() {
        return;
    }
    // Elements per second, by id.
    let rate = |id: &str| -> Option<f64> {
        let (_, elements) = ran.iter().find(|(known, _)| known == id)?;
        Some(*elements as f64 / median_ns(id)? * 1e9)
    };
    let throughput_rows: BTreeMap<(String, usize, String, usize), ()> = ran
        .iter()
        .filter_map(|(id, _)| {
            let parts: Vec<&str> = id.split('/').collect();
            let load = parts[0].strip_prefix("maps_")?;
            (load == "allow" || load == "deny").then(|| {
                let order = if parts[2] == "string" {
                    usize::MAX
                } else {
                    parts[2].parse().unwrap_or(0)
                };
                (
                    (
                        load.to_owned(),
                        order,
                        parts[2].to_owned(),
                        parts[3].parse().unwrap_or(0),
                    ),
                    (),
                )
            })
        })
        .collect();
    if !throughput_rows.is_empty() {
        println!();
        println!("Known-key checks, millions per second (all threads), criterion's median; in brackets the ratio to `dashmap`.");
        println!();
        println!("| load | keys | threads | {} |", CANDIDATES.join(" | "));
        println!(
            "| --- | ---: | ---: |{}",
            " ---: |".repeat(CANDIDATES.len())
        );
        for (load, _, space, threads) in throughput_rows.keys() {
            let id = |candidate: &str| format!("maps_{load}/{candidate}/{space}/{threads}");
            let base = rate(&id("dashmap"));
            let cells: Vec<String> = CANDIDATES
                .iter()
                .map(|candidate| match (rate(&id(candidate)), base) {
                    (Some(r), Some(b)) => format!("{:.1} ({:.2}x)", r / 1e6, r / b),
                    (Some(r), None) => format!("{:.1}", r / 1e6),
                    (None, _) => "–".to_owned(),
                })
                .collect();
            let keys = if space == "string" {
                format!("{STRING_KEYS} String")
            } else {
                space.clone()
            };
            println!("| {load} | {keys} | {threads} | {} |", cells.join(" | "));
        }
    }
    for (group, keys, what) in [
        ("insert", INSERT_KEYS, "First inserts (insert-if-vacant) of"),
        (
            "sweep",
            SWEEP_KEYS,
            "One sweep (mark with a CAS, unlink half) of a map of",
        ),
    ] {
        let cells: Vec<String> = STORES
            .iter()
            .map(|s| match rate(&format!("maps_{group}/{s}/{keys}")) {
                Some(r) => format!("{:.1}", 1e9 / r),
                None => "–".to_owned(),
            })
            .collect();
        if cells.iter().all(|c| c == "–") {
            continue;
        }
        println!();
        println!("{what} {keys} `u64` keys, one thread: ns per key, criterion's median.");
        println!();
        println!("| {} |", STORES.join(" | "));
        println!("|{}", " ---: |".repeat(STORES.len()));
        println!("| {} |", cells.join(" | "));
    }
}

/// The memory part: bytes per key of every store and governor's keyed limiter, each in fresh
/// processes.
fn memory() {
    if rss_bytes().is_none() {
        println!("maps memory: no /proc/self/status VmRSS on this system; nothing measured");
        return;
    }
    let exe = std::env::current_exe().expect("the bench's own path");
    let columns: Vec<&str> = STORES.iter().copied().chain(["governor"]).collect();
    println!();
    println!("Resident-set growth per key, in bytes: median of {RUNS} fresh processes; in brackets the ratio to governor's keyed limiter.");
    println!();
    println!("| keys | {} |", columns.join(" | "));
    println!("| ---: |{}", " ---: |".repeat(columns.len()));
    let rows = MEMORY_SIZES
        .iter()
        .map(|&keys| (keys, "u64"))
        .chain([(STRING_KEYS, "string")]);
    for (keys, kind) in rows {
        let medians: Vec<f64> = columns
            .iter()
            .map(|candidate| {
                let keys = keys.to_string();
                let runs = child_runs(
                    &exe,
                    &["--child", candidate, &keys, kind],
                    RUNS,
                    &format!("{candidate} at {keys} {kind} keys"),
                );
                runs[RUNS / 2]
            })
            .collect();
        let governor = medians[medians.len() - 1];
        let cells: Vec<String> = medians
            .iter()
            .map(|m| format!("{m:.1} ({:.2}x)", m / governor))
            .collect();
        let label = if kind == "string" {
            format!("{keys} String")
        } else {
            keys.to_string()
        };
        println!("| {label} | {} |", cells.join(" | "));
    }
}

/// Builds `candidate` empty, adds `keys` keys of `kind`, and prints the resident-set growth per key.
fn child(candidate: &str, keys: usize, kind: &str) {
    let growth = match kind {
        "u64" => grow::<u64>(candidate, keys),
        "string" => grow::<String>(candidate, keys),
        other => panic!("unknown key kind {other}"),
    };
    println!("{}", growth as f64 / keys as f64);
}

/// The resident-set growth of `candidate` holding `keys` keys.
fn grow<K: Key>(candidate: &str, keys: usize) -> i64 {
    match candidate {
        "tollgate" => grow_store::<K, Tollgate<K>>(keys),
        "dashmap" => grow_store::<K, Dash<K>>(keys),
        "clashmap" => grow_store::<K, Clash<K>>(keys),
        "papaya" => grow_store::<K, Papaya<K>>(keys),
        "scc_index" => grow_store::<K, SccIndex<K>>(keys),
        "scc_index_box" => grow_store::<K, SccIndexBox<K>>(keys),
        "flurry" => grow_store::<K, Flurry<K>>(keys),
        "governor" => {
            // One token an hour: each key's one check is admitted and the key stays.
            let quota =
                governor::Quota::with_period(Duration::from_secs(3600)).expect("a non-zero period");
            let limiter: governor::DefaultKeyedRateLimiter<K> = governor::RateLimiter::keyed(quota);
            let before = rss();
            for i in 0..keys {
                assert!(
                    limiter.check_key(&K::nth(i)).is_ok(),
                    "a new key is admitted"
                );
            }
            let after = rss();
            assert_eq!(limiter.len(), keys, "governor holds every key");
            after - before
        }
        other => panic!("unknown candidate {other}"),
    }
}

fn grow_store<K: Key, S: Store<K>>(keys: usize) -> i64 {
    let store = S::new();
    let before = rss();
    for i in 0..keys {
        assert!(store.insert_if_vacant(K::nth(i), 0), "a new key inserts");
    }
    let after = rss();
    assert_eq!(store.len(), keys, "the store holds every key");
    after - before
}
