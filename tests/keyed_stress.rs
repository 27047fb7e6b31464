//! The keyed limiter under stress, through its public API only: thousands of short-lived threads
//! (spawned in waves, each doing a few requests), a key space much larger than a small `max_keys`
//! (growth, eviction, refusals), sweeper threads, explicit evictions and shrinks racing lookups,
//! and keys that misbehave as far as the table's documentation allows:
//!
//! - their `Hash` or `Eq` panics on chosen calls, or their `Drop` does (for copies the limiter
//!   made), each caught around the call with `catch_unwind`;
//! - their `Drop` calls back into the same limiter (the table promises "a key's `Drop` may call
//!   anything");
//! - every key writes to itself and to the key it is compared with (a `OnceLock` hash memo, an
//!   atomic count and a `Mutex`), so a lookup that touched a freed key writes freed memory (which
//!   AddressSanitizer reports: `bash scripts/test.sh asan` runs this file instrumented);
//! - threads make lookups from their thread-local destructors, before and after the limiter's
//!   own per-thread state is torn down;
//! - at the end, more threads at once than the table's epoch has reader slots (2048), so that
//!   lookups without a slot (under the shard lock) run beside lookups with one.
//!
//! What is checked, none of it timed (the time the limiter sees is a `ManualClock` the test moves;
//! the sweepers' wall-clock period only changes how often they run, never what is asserted):
//!
//! - **Every key object is dropped exactly once**: each one (the test's and every copy the limiter
//!   makes with `Clone`) has a serial number; its drop is counted per serial (a second drop of the
//!   same object is reported) and per key id, and after the limiter is dropped every id has as
//!   many drops as creations. No key is used after its drop (a canary each `Hash` and `Eq` reads).
//! - **No key is admitted beyond C + R·t**, the bound the crate documents: forgetting is lossless
//!   (`keyed` module docs, "Every key starts fresh", "Eviction" and "Clocks that step backwards
//!   across an eviction": a key created afresh after an eviction is fresh as of the latest
//!   eviction's reading, so decisions are those of a limiter that never evicts, or refusals), so
//!   per key, over any span of clock readings `[a, b]`, the tokens admitted at readings in it are
//!   at most `C + ⌊(b − a) / interval⌋`, across evictions and re-creations. Each admission's
//!   reading is known to lie between a clock reading taken before the call and one taken after it;
//!   the check only counts admissions whose whole bracket lies inside `[a, b]`, so it never
//!   accuses the limiter of a reading it did not use. (A call that panicked, a key's `Drop` having
//!   panicked in it after the decision, is not counted: the check is on the admissions callers
//!   saw.)
//! - **The key bound** (`len() <= max_keys` whenever it is sampled), and at every quiet point
//!   between waves, with no thread running: evicting with every bucket full leaves no key held
//!   and nothing unreclaimed, and every key object the limiter made has been dropped; an empty map
//!   takes exactly `max_keys` active keys and refuses the next with `TooManyKeys` without
//!   resetting any; once they are idle, a newcomer is refused at most `max(256, len / 2)` times
//!   before an automatic sweep makes room (the schedule the module docs give).
//!
//! Two single-threaded tests at the end pin down, deterministically, what the stress tests found
//! when a key's `Drop` panics inside an eviction.

// The crate's own table only: under `--cfg tollgate_loom` the store is loom's stand-in map.
#![cfg(not(tollgate_loom))]

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex, Once, OnceLock, Weak};
use std::thread;
use std::time::Duration;

use tollgate::keyed::{KeyedError, KeyedLimiter, TokenBucketKeys};
use tollgate::{Clock, ManualClock, Nanos, Quota};

type Limiter = KeyedLimiter<Key, TokenBucketKeys, ManualClock>;

/// Capacity C: 4 tokens, one back every 10 ms (R = 100 per second).
const CAPACITY: u64 = 4;
const INTERVAL: Duration = Duration::from_millis(10);
/// A bucket emptied at reading `t` is full again at `t + C × interval` at the latest.
const WINDOW: Duration = Duration::from_millis(40);

/// Relaxed everywhere: the counters are read after the threads that moved them were joined.
const RELAXED: Ordering = Ordering::Relaxed;

/// What a key does besides being a key, chosen by its id (`id % 8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `Hash` panics on every 61st call made on a key of this kind.
    PanicsInHash,
    /// `Eq` panics on every 29th call made on a key of this kind (as either side).
    PanicsInEq,
    /// A copy made by the limiter panics in `Drop` when its serial is a multiple of 7 (and the
    /// thread is not already unwinding: a second panic would abort, as for any Rust value).
    PanicsInDrop,
    /// A copy made by the limiter whose serial is a multiple of 5 makes a request on the same
    /// limiter from its `Drop` (while the test's waves run).
    ReentersInDrop,
    /// Only the memos every key keeps.
    Plain,
}

fn kind(id: u32) -> Kind {
    match id % 8 {
        0 => Kind::PanicsInHash,
        1 => Kind::PanicsInEq,
        2 => Kind::PanicsInDrop,
        3 => Kind::ReentersInDrop,
        _ => Kind::Plain,
    }
}

/// The payload of every panic the keys raise on purpose; any other panic fails the test.
#[derive(Debug)]
struct Planned(&'static str);

/// One admission: `n` tokens for key `id` at a reading in `[lo, hi]`.
#[derive(Debug, Clone, Copy)]
struct Record {
    id: u32,
    lo: u64,
    hi: u64,
    n: u64,
}

/// Most key objects one run makes (serial numbers).
const SERIALS: usize = 1 << 20;

const ALIVE: u64 = 0x0A11_CE0F_C0FF_EE00;
const DEAD: u64 = 0xDEAD_DEAD_DEAD_DEAD;

/// What the keys of one run count. Leaked, so that keys can hold `&'static` to it.
struct Registry {
    created: Box<[AtomicU64]>,
    dropped: Box<[AtomicU64]>,
    /// Drops per serial number: each must end at exactly 1.
    drops: Box<[AtomicU8]>,
    next_serial: AtomicUsize,
    /// Drops of an object already dropped, and uses (`Hash`, `Eq`) of one.
    double_drops: AtomicU64,
    used_dead: AtomicU64,
    hash_calls: AtomicU64,
    eq_calls: AtomicU64,
    /// Panics raised on purpose, by kind, and caught around calls.
    raised_hash: AtomicU64,
    raised_eq: AtomicU64,
    raised_drop: AtomicU64,
    /// Planned panics caught around calls, by where they were raised (a call that frees several
    /// keys whose `Drop` panics passes on the first).
    caught: [AtomicU64; 3],
    reentered: AtomicU64,
    /// Whether `ReentersInDrop` keys call back now (off at the quiet points, whose checks count
    /// keys).
    reenter: AtomicBool,
    limiter: OnceLock<Weak<Limiter>>,
    /// Admissions made outside the workers' own loops: from thread-local destructors and from
    /// keys' `Drop`.
    late: Mutex<Vec<Record>>,
    max_len: AtomicUsize,
}

impl Registry {
    /// A registry that lives as long as the process (and stays reachable from a static, so that
    /// LeakSanitizer does not report it at exit).
    fn leak(ids: u32) -> &'static Registry {
        static ALL: Mutex<Vec<&'static Registry>> = Mutex::new(Vec::new());
        let counters = || (0..ids).map(|_| AtomicU64::new(0)).collect();
        let reg = Box::leak(Box::new(Registry {
            created: counters(),
            dropped: counters(),
            drops: (0..SERIALS).map(|_| AtomicU8::new(0)).collect(),
            next_serial: AtomicUsize::new(0),
            double_drops: AtomicU64::new(0),
            used_dead: AtomicU64::new(0),
            hash_calls: AtomicU64::new(0),
            eq_calls: AtomicU64::new(0),
            raised_hash: AtomicU64::new(0),
            raised_eq: AtomicU64::new(0),
            raised_drop: AtomicU64::new(0),
            caught: [const { AtomicU64::new(0) }; 3],
            reentered: AtomicU64::new(0),
            reenter: AtomicBool::new(false),
            limiter: OnceLock::new(),
            late: Mutex::new(Vec::new()),
            max_len: AtomicUsize::new(0),
        }));
        ALL.lock().unwrap().push(reg);
        reg
    }

    fn born(&self, id: u32) -> usize {
        self.created[id as usize].fetch_add(1, RELAXED);
        let serial = self.next_serial.fetch_add(1, RELAXED);
        assert!(
            serial < SERIALS,
            "more key objects than the registry counts"
        );
        serial
    }

    fn late(&self, record: Record) {
        self.late
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(record);
    }

    fn sample_len(&self, limiter: &Limiter) {
        self.max_len.fetch_max(limiter.len(), RELAXED);
    }
}

/// A key with interior mutability written by `Hash` and `Eq`, counted on creation and drop.
struct Key {
    id: u32,
    serial: usize,
    /// Made by `Clone` (by the limiter: the test itself never clones a key).
    copy: bool,
    reg: &'static Registry,
    canary: AtomicU64,
    /// Written by the first `Hash` (or `Eq`) of this object.
    hash_memo: OnceLock<u64>,
    /// Written by every `Eq` this object takes part in, on either side.
    compared: AtomicU32,
    last_peer: Mutex<usize>,
}

impl Key {
    fn new(id: u32, reg: &'static Registry) -> Key {
        Key {
            id,
            serial: reg.born(id),
            copy: false,
            reg,
            canary: AtomicU64::new(ALIVE),
            hash_memo: OnceLock::new(),
            compared: AtomicU32::new(0),
            last_peer: Mutex::new(usize::MAX),
        }
    }

    fn check_alive(&self) {
        if self.canary.load(RELAXED) != ALIVE {
            self.reg.used_dead.fetch_add(1, RELAXED);
        }
    }

    fn memo(&self) -> u64 {
        *self
            .hash_memo
            .get_or_init(|| u64::from(self.id).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555)
    }

    fn touch(&self, peer: usize) {
        self.compared.fetch_add(1, RELAXED);
        *self
            .last_peer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = peer;
    }
}

impl Clone for Key {
    fn clone(&self) -> Key {
        self.check_alive();
        Key {
            id: self.id,
            serial: self.reg.born(self.id),
            copy: true,
            reg: self.reg,
            canary: AtomicU64::new(ALIVE),
            hash_memo: self.hash_memo.clone(),
            compared: AtomicU32::new(0),
            last_peer: Mutex::new(usize::MAX),
        }
    }
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.check_alive();
        let memo = self.memo();
        if kind(self.id) == Kind::PanicsInHash
            && self.reg.hash_calls.fetch_add(1, RELAXED) % 61 == 60
        {
            self.reg.raised_hash.fetch_add(1, RELAXED);
            panic::panic_any(Planned("Hash"));
        }
        state.write_u64(memo);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.check_alive();
        other.check_alive();
        self.touch(other.serial);
        other.touch(self.serial);
        // The memo is written from `Eq` too (by whichever call comes first).
        let same = self.memo() == other.memo() && self.id == other.id;
        if (kind(self.id) == Kind::PanicsInEq || kind(other.id) == Kind::PanicsInEq)
            && self.reg.eq_calls.fetch_add(1, RELAXED) % 29 == 28
        {
            self.reg.raised_eq.fetch_add(1, RELAXED);
            panic::panic_any(Planned("Eq"));
        }
        same
    }
}

impl Eq for Key {}

impl Drop for Key {
    fn drop(&mut self) {
        let reg = self.reg;
        if self.canary.swap(DEAD, RELAXED) != ALIVE
            || reg.drops[self.serial].fetch_add(1, RELAXED) != 0
        {
            reg.double_drops.fetch_add(1, RELAXED);
        }
        reg.dropped[self.id as usize].fetch_add(1, RELAXED);
        if !self.copy || thread::panicking() {
            return;
        }
        match kind(self.id) {
            Kind::PanicsInDrop if self.serial.is_multiple_of(7) => {
                reg.raised_drop.fetch_add(1, RELAXED);
                panic::panic_any(Planned("Drop"));
            }
            Kind::ReentersInDrop if self.serial.is_multiple_of(5) && reg.reenter.load(RELAXED) => {
                reenter(reg, self.serial);
            }
            _ => {}
        }
    }
}

/// A request on the limiter from inside a key's `Drop` (wherever the limiter frees it).
fn reenter(reg: &'static Registry, serial: usize) {
    let Some(limiter) = reg.limiter.get().and_then(Weak::upgrade) else {
        return;
    };
    reg.reentered.fetch_add(1, RELAXED);
    let ids = reg.created.len() as u32;
    // A `Plain` id (4..8 mod 8).
    let id = (serial as u32)
        .wrapping_mul(8)
        .wrapping_add(4 + serial as u32 % 4)
        % ids;
    let key = Key::new(id, reg);
    let lo = limiter.clock().now().as_u64();
    let got = catch_planned(reg, || limiter.check_key(&key));
    let hi = limiter.clock().now().as_u64();
    if let Some(result) = got {
        if admitted(result) {
            reg.late(Record { id, lo, hi, n: 1 });
        }
    }
}

/// Runs `f`, catching a planned panic (`None`); any other panic goes on.
fn catch_planned<R>(reg: &Registry, f: impl FnOnce() -> R) -> Option<R> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(payload) => {
            let Some(Planned(site)) = payload.downcast_ref::<Planned>() else {
                panic::resume_unwind(payload);
            };
            let i = ["Hash", "Eq", "Drop"]
                .iter()
                .position(|s| s == site)
                .unwrap();
            reg.caught[i].fetch_add(1, RELAXED);
            None
        }
    }
}

/// Whether a request was admitted; every refusal must be one a request of at most the capacity
/// can get.
fn admitted(result: Result<tollgate::Admitted, KeyedError>) -> bool {
    match result {
        Ok(_) => true,
        Err(KeyedError::Denied(_) | KeyedError::TooManyKeys(_)) => false,
        Err(e) => panic!("unexpected answer: {e:?}"),
    }
}

/// Keeps the planned panics (thousands) out of the output; every other panic is printed as usual.
fn quiet_planned_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<Planned>().is_none() {
                default(info);
            }
        }));
    });
}

/// xorshift64: the workers' choices, from a seed per thread.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A thread's lookup from its thread-local destructor.
struct ExitProbe {
    limiter: Arc<Limiter>,
    reg: &'static Registry,
    ids: [u32; 2],
}

impl Drop for ExitProbe {
    fn drop(&mut self) {
        for id in self.ids {
            let key = Key::new(id, self.reg);
            let lo = self.limiter.clock().now().as_u64();
            let got = catch_planned(self.reg, || self.limiter.check_key(&key));
            let hi = self.limiter.clock().now().as_u64();
            if got.is_some_and(admitted) {
                self.reg.late(Record { id, lo, hi, n: 1 });
            }
            self.reg.sample_len(&self.limiter);
        }
    }
}

thread_local! {
    static AT_EXIT: RefCell<Option<ExitProbe>> = const { RefCell::new(None) };
}

struct Config {
    /// Key ids `0..ids` (a multiple of 8).
    ids: u32,
    /// Ids `0..hot` take 40 % of the requests.
    hot: u32,
    max_keys: usize,
    waves: usize,
    threads: usize,
    /// Operations per thread.
    ops: usize,
    /// A quiet point's checks after every this many waves.
    check_every: usize,
}

/// One worker thread of one wave: a few requests and other calls. Thread 0 of each wave moves the
/// clock 1 ms before each of its operations, so readings race evictions.
fn worker(
    limiter: &Arc<Limiter>,
    reg: &'static Registry,
    cfg: &Config,
    seed: u64,
    ticker: bool,
) -> Vec<Record> {
    let mut rng = Rng::new(seed);
    let mut records = Vec::new();
    let probe = |rng: &mut Rng| ExitProbe {
        limiter: Arc::clone(limiter),
        reg,
        ids: [
            rng.below(u64::from(cfg.hot)) as u32,
            rng.below(u64::from(cfg.ids)) as u32,
        ],
    };
    // Half the threads register their thread-local before their first lookup, so that its
    // destructor runs after the limiter's per-thread state is gone (destructors run in reverse
    // order of registration), half after it.
    let probe_first = seed.is_multiple_of(2);
    if probe_first {
        let p = probe(&mut rng);
        AT_EXIT.with(|slot| *slot.borrow_mut() = Some(p));
    }
    let clock = limiter.clock();
    for _ in 0..cfg.ops {
        if ticker {
            clock.advance(Duration::from_millis(1));
        }
        let id = if rng.below(10) < 4 {
            rng.below(u64::from(cfg.hot)) as u32
        } else {
            rng.below(u64::from(cfg.ids)) as u32
        };
        let key = Key::new(id, reg);
        let op = rng.below(100);
        let lo = clock.now().as_u64();
        let (result, n) = match op {
            0..=39 => (catch_planned(reg, || limiter.check_key(&key)), 1),
            40..=59 => (
                catch_planned(reg, || limiter.check_key_at(&key, Nanos::new(lo))),
                1,
            ),
            60..=69 => (catch_planned(reg, || limiter.check_key_n(&key, 2)), 2),
            70..=79 => {
                catch_planned(reg, || {
                    let _ = limiter.peek_key_n(&key, 1);
                    let _ = limiter.remaining_key(&key);
                    let _ = limiter.contains_key(&key);
                });
                (None, 0)
            }
            80..=83 => {
                catch_planned(reg, || limiter.retain_recent());
                (None, 0)
            }
            84 => {
                // A reading from the future: judged at the clock's reading instead.
                catch_planned(reg, || limiter.retain_recent_at(Nanos::new(u64::MAX)));
                (None, 0)
            }
            85..=86 => {
                catch_planned(reg, || limiter.shrink_to_fit());
                (None, 0)
            }
            _ => (catch_planned(reg, || limiter.check_key(&key)), 1),
        };
        let hi = clock.now().as_u64();
        if result.is_some_and(admitted) {
            records.push(Record { id, lo, hi, n });
        }
        reg.sample_len(limiter);
        drop(key);
    }
    if !probe_first {
        let p = probe(&mut rng);
        AT_EXIT.with(|slot| *slot.borrow_mut() = Some(p));
    }
    records
}

/// Runs a call that may raise planned panics (from keys' `Drop`) until one returns normally: each
/// call frees everything it removed before passing the first such panic on.
fn until_quiet<R>(reg: &Registry, what: &str, mut f: impl FnMut() -> R) -> R {
    for _ in 0..1000 {
        if let Some(r) = catch_planned(reg, &mut f) {
            return r;
        }
    }
    panic!("{what} panicked 1000 times in a row");
}

/// The checks made with no other thread running: see the module docs.
fn quiet_point(limiter: &Limiter, reg: &'static Registry, cfg: &Config, records: &mut Vec<Record>) {
    reg.reenter.store(false, RELAXED);
    let clock = limiter.clock();
    // Every bucket is full once the clock has passed every reading used by a whole window.
    clock.advance(WINDOW + Duration::from_nanos(1));
    until_quiet(reg, "retain_recent", || limiter.retain_recent());
    until_quiet(reg, "shrink_to_fit", || limiter.shrink_to_fit());
    assert_eq!(
        limiter.len(),
        0,
        "every bucket is full, yet keys are still counted after an eviction"
    );
    assert_eq!(
        limiter.unreclaimed(),
        0,
        "removed keys not freed with no lookup running"
    );
    let live: u64 = (0..cfg.ids as usize)
        .map(|id| reg.created[id].load(RELAXED) - reg.dropped[id].load(RELAXED))
        .sum();
    assert_eq!(live, 0, "key objects alive with an empty map and no caller");

    // An empty map takes exactly `max_keys` keys, all of them active (emptied at `now`), and
    // refuses the next newcomer for room without resetting any of them.
    let now = clock.now();
    let overflowed = limiter.overflowed();
    let mut held = Vec::new();
    let mut newcomers = (0..cfg.ids).filter(|&id| kind(id) == Kind::Plain);
    for id in newcomers.by_ref() {
        let key = Key::new(id, reg);
        match limiter.check_key_n_at(&key, CAPACITY, now) {
            Ok(_) => {
                records.push(Record {
                    id,
                    lo: now.as_u64(),
                    hi: now.as_u64(),
                    n: CAPACITY,
                });
                held.push(key);
            }
            Err(KeyedError::TooManyKeys(_)) => break,
            Err(e) => panic!("a new key on a map with room: {e:?}"),
        }
    }
    assert_eq!(held.len(), cfg.max_keys, "keys an empty map took");
    assert_eq!(limiter.len(), cfg.max_keys);
    assert_eq!(limiter.overflowed(), overflowed + 1);
    for key in &held {
        assert_eq!(
            limiter.remaining_key_at(key, now),
            0,
            "key {} reset",
            key.id
        );
    }
    drop(held);

    // Once they are idle, a newcomer is refused at most max(256, len / 2) times before a sweep.
    clock.advance(WINDOW + Duration::from_nanos(1));
    let now = clock.now();
    let most = 256.max(cfg.max_keys / 2);
    let mut refused = 0;
    for id in newcomers {
        let key = Key::new(id, reg);
        if admitted(limiter.check_key_at(&key, now)) {
            records.push(Record {
                id,
                lo: now.as_u64(),
                hi: now.as_u64(),
                n: 1,
            });
            break;
        }
        refused += 1;
        assert!(
            refused <= most,
            "a newcomer on a map of idle keys refused {refused} times without a sweep"
        );
    }
    assert!(refused <= most, "ran out of new ids: make `ids` larger");
    assert!(limiter.evictions() >= cfg.max_keys as u64);
    // The newcomer admitted is full again a window later.
    clock.advance(WINDOW + Duration::from_nanos(1));
    until_quiet(reg, "retain_recent", || limiter.retain_recent());
    assert_eq!(limiter.len(), 0);
    reg.reenter.store(true, RELAXED);
}

/// Per key, over every span `[a, b]` of readings: the tokens of the admissions whose reading
/// bracket lies inside it are at most `C + ⌊(b − a) / interval⌋`. Answers how many spans longer
/// than a window reached the bound exactly (that the check was tight, not vacuous).
fn check_bound(records: &[Record]) -> usize {
    let interval = INTERVAL.as_nanos() as u64;
    let window = WINDOW.as_nanos() as u64;
    let mut by_key: HashMap<u32, Vec<Record>> = HashMap::new();
    for r in records {
        by_key.entry(r.id).or_default().push(*r);
    }
    let mut tight = 0;
    for (id, mut recs) in by_key {
        // From the latest start down: `ends` holds (hi, n) of every admission with `lo >= a`,
        // sorted by `hi`, so its prefixes are the admissions inside `[a, b]` for each `b`.
        recs.sort_by_key(|r| std::cmp::Reverse(r.lo));
        let mut ends: Vec<(u64, u64)> = Vec::with_capacity(recs.len());
        for r in &recs {
            let at = ends.partition_point(|&(hi, _)| hi <= r.hi);
            ends.insert(at, (r.hi, r.n));
            let a = r.lo;
            let mut tokens = 0;
            for &(b, n) in &ends {
                tokens += n;
                let bound = CAPACITY + (b - a) / interval;
                assert!(
                    tokens <= bound,
                    "key {id}: {tokens} tokens admitted at readings within [{a}, {b}] ns, \
                     more than C + R·t = {CAPACITY} + {} ns / {interval} ns = {bound}",
                    b - a
                );
                if tokens == bound && b - a > window {
                    tight += 1;
                }
            }
        }
    }
    tight
}

fn run(cfg: Config) {
    quiet_planned_panics();
    assert_eq!(cfg.ids % 8, 0);
    let reg = Registry::leak(cfg.ids);
    let quota = Quota::per_period(CAPACITY, WINDOW).unwrap();
    assert_eq!(quota.interval(), INTERVAL);
    assert_eq!(quota.capacity(), CAPACITY);
    let limiter: Arc<Limiter> = Arc::new(
        KeyedLimiter::with_clock(quota, ManualClock::starting_at(Nanos::new(1_000_000_000)))
            .with_max_keys(cfg.max_keys),
    );
    reg.limiter.set(Arc::downgrade(&limiter)).unwrap();
    reg.reenter.store(true, RELAXED);
    let cfg = Arc::new(cfg);
    let mut records = Vec::new();
    for wave in 0..cfg.waves {
        // A sweeper per wave (its period is wall-clock time: it sweeps as often as it gets to).
        // One that meets a key's planned `Drop` panic ends there; the next wave starts another.
        let sweeper = limiter.spawn_sweeper(Duration::from_millis(1)).unwrap();
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (limiter, cfg) = (Arc::clone(&limiter), Arc::clone(&cfg));
                let seed = (wave * cfg.threads + t) as u64;
                thread::spawn(move || worker(&limiter, reg, &cfg, seed, t == 0))
            })
            .collect();
        for h in handles {
            match h.join() {
                Ok(mut r) => records.append(&mut r),
                Err(payload) => panic::resume_unwind(payload),
            }
        }
        sweeper.stop();
        limiter.clock().advance(Duration::from_millis(3));
        if (wave + 1).is_multiple_of(cfg.check_every) {
            quiet_point(&limiter, reg, &cfg, &mut records);
        }
    }

    // More threads at once than the table's epoch has reader slots (2048): the lookups of those
    // without one run under their shard's lock, beside those with one.
    let crowd = 2_100;
    let barrier = Arc::new(Barrier::new(crowd));
    let handles: Vec<_> = (0..crowd)
        .map(|t| {
            let (limiter, barrier, cfg) =
                (Arc::clone(&limiter), Arc::clone(&barrier), Arc::clone(&cfg));
            thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    let clock = limiter.clock();
                    let request = |round: usize| {
                        let id = ((t * 7 + round) as u32) % cfg.ids;
                        let key = Key::new(id, reg);
                        let lo = clock.now().as_u64();
                        let got = catch_planned(reg, || limiter.check_key(&key));
                        let hi = clock.now().as_u64();
                        got.is_some_and(admitted)
                            .then_some(Record { id, lo, hi, n: 1 })
                    };
                    // Every thread reaches the barrier, whatever the first request did, so that a
                    // failure fails the test rather than hangs it.
                    let first = panic::catch_unwind(AssertUnwindSafe(|| request(0)));
                    barrier.wait();
                    let first = first.unwrap_or_else(|payload| panic::resume_unwind(payload));
                    first.into_iter().chain(request(1)).collect::<Vec<_>>()
                })
                .unwrap()
        })
        .collect();
    for h in handles {
        match h.join() {
            Ok(mut r) => records.append(&mut r),
            Err(payload) => panic::resume_unwind(payload),
        }
    }
    reg.sample_len(&limiter);

    // The end: the limiter is dropped with keys still in it (and perhaps removed ones not yet
    // freed); its drop may pass on a planned panic, after dropping everything.
    let limiter = Arc::try_unwrap(limiter).unwrap_or_else(|_| panic!("a thread still holds it"));
    let (evictions, overflowed) = (limiter.evictions(), limiter.overflowed());
    catch_planned(reg, move || drop(limiter));

    records.append(&mut reg.late.lock().unwrap());
    let serials = reg.next_serial.load(RELAXED);
    let caught = |i: usize| reg.caught[i].load(RELAXED);
    eprintln!(
        "max_keys {}: {} key objects, {} admissions, {} evictions, {} overflowed, max len {}; \
         planned panics raised (caught around calls): {} ({}) in Hash, {} ({}) in Eq, \
         {} ({}) in Drop; {} requests from a key's Drop",
        cfg.max_keys,
        serials,
        records.len(),
        evictions,
        overflowed,
        reg.max_len.load(RELAXED),
        reg.raised_hash.load(RELAXED),
        caught(0),
        reg.raised_eq.load(RELAXED),
        caught(1),
        reg.raised_drop.load(RELAXED),
        caught(2),
        reg.reentered.load(RELAXED),
    );

    assert_eq!(
        reg.double_drops.load(RELAXED),
        0,
        "key objects dropped twice"
    );
    assert_eq!(reg.used_dead.load(RELAXED), 0, "keys used after their drop");
    for id in 0..cfg.ids as usize {
        assert_eq!(
            reg.created[id].load(RELAXED),
            reg.dropped[id].load(RELAXED),
            "key id {id}: objects created and dropped"
        );
    }
    let undropped = reg.drops[..serials]
        .iter()
        .filter(|d| d.load(RELAXED) != 1)
        .count();
    assert_eq!(undropped, 0, "key objects not dropped exactly once");
    assert!(
        reg.max_len.load(RELAXED) <= cfg.max_keys,
        "{} keys held, over the bound {}",
        reg.max_len.load(RELAXED),
        cfg.max_keys
    );
    // Every 61st `Hash` of a `PanicsInHash` key panics, and each run hashes such keys far more
    // often than that: the planned panics did happen.
    assert!(reg.raised_hash.load(RELAXED) > 0);
    let tight = check_bound(&records);
    eprintln!(
        "max_keys {}: C + R·t reached exactly over {tight} spans longer than a window",
        cfg.max_keys
    );
}

/// A small bound against a key space eight times larger: eviction, refusals and automatic sweeps
/// all the time.
#[test]
fn stress_small_bound() {
    run(Config {
        ids: 1024,
        hot: 16,
        max_keys: 128,
        waves: 64,
        threads: 48,
        ops: 16,
        check_every: 8,
    });
}

/// A larger bound, so that the shards grow through several doublings (and shrink back at the
/// quiet points and in `shrink_to_fit` calls racing lookups).
#[test]
fn stress_growth() {
    run(Config {
        ids: 32_768,
        hot: 16,
        max_keys: 8_192,
        waves: 40,
        threads: 48,
        ops: 24,
        check_every: 8,
    });
}

/// A key whose copies (the ones the limiter makes and keeps) panic in `Drop` when `arm` says so;
/// the test's own keys never do.
#[derive(Debug)]
struct Bomb {
    id: u32,
    arm: bool,
    copy: bool,
}

impl Bomb {
    fn new(id: u32, arm: bool) -> Bomb {
        Bomb {
            id,
            arm,
            copy: false,
        }
    }
}

impl Clone for Bomb {
    fn clone(&self) -> Bomb {
        Bomb {
            copy: true,
            ..*self
        }
    }
}

impl PartialEq for Bomb {
    fn eq(&self, other: &Bomb) -> bool {
        self.id == other.id
    }
}

impl Eq for Bomb {}

impl Hash for Bomb {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl Drop for Bomb {
    fn drop(&mut self) {
        if self.copy && self.arm && !thread::panicking() {
            panic::panic_any(Planned("Drop"));
        }
    }
}

fn bomb_limiter(max_keys: usize) -> KeyedLimiter<Bomb, TokenBucketKeys, ManualClock> {
    quiet_planned_panics();
    let quota = Quota::per_period(CAPACITY, WINDOW).unwrap();
    KeyedLimiter::with_clock(quota, ManualClock::new()).with_max_keys(max_keys)
}

/// Whether `f` raised a planned panic (and nothing else).
fn planned_panic(f: impl FnOnce()) -> bool {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => false,
        Err(payload) if payload.is::<Planned>() => true,
        Err(payload) => panic::resume_unwind(payload),
    }
}

/// The same defect as the stress tests find, without threads: an eviction that frees a key whose
/// `Drop` panics passes the panic on (as the table documents), and every key it removed, that one
/// included, must still give its place back: `len()` counts keys held, and a count that kept the
/// places of removed keys would refuse newcomers for room that is there.
#[test]
fn a_key_whose_drop_panics_during_an_eviction_gives_its_place_back() {
    let limiter = bomb_limiter(4);
    for id in 0..4 {
        limiter.check_key(&Bomb::new(id, id == 0)).unwrap();
    }
    assert!(matches!(
        limiter.check_key(&Bomb::new(9, false)),
        Err(KeyedError::TooManyKeys(_))
    ));
    limiter.clock().advance(WINDOW);
    assert!(planned_panic(|| {
        limiter.retain_recent();
    }));
    // Whatever that call did not reach (the shards after the panic) goes now.
    limiter.retain_recent();
    assert_eq!(limiter.len(), 0, "places kept by keys no longer held");
    for id in 10..14 {
        assert!(limiter.check_key(&Bomb::new(id, false)).is_ok(), "key {id}");
    }
}

/// An automatic sweep that meets a key's panicking `Drop` passes the panic on to the request that
/// ran it; automatic sweeps must go on running on their schedule afterwards (here, with
/// `max_keys` 1, one on every newcomer that finds the map full), so idle keys keep making room.
#[test]
fn automatic_sweeps_go_on_after_one_met_a_panicking_drop() {
    let limiter = bomb_limiter(1);
    limiter.check_key(&Bomb::new(0, true)).unwrap();
    limiter.clock().advance(WINDOW);
    // Key 0 is idle: the newcomer's sweep removes it, and its `Drop` panics.
    assert!(planned_panic(|| {
        let _ = limiter.check_key(&Bomb::new(1, false));
    }));
    for id in 2..6 {
        // Every held key is idle by now: at most one refusal before a sweep makes room.
        let admitted = (0..2).any(|_| limiter.check_key(&Bomb::new(id, false)).is_ok());
        assert!(admitted, "newcomer {id} refused on a map of idle keys");
        limiter.clock().advance(WINDOW);
    }
}
