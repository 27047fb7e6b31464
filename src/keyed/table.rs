//! The keyed limiter's own concurrent table: lookups of known keys take no lock and write nothing
//! shared (entering the table's epoch writes only the calling thread's own slot); inserts,
//! replacements, eviction and growth take the key's shard lock.
//!
//! # Layout
//!
//! A fixed number of shards (chosen by the hash's top bits), each an open-addressing table with
//! linear probing, in groups of 16 slots: 16 control bytes, then 16 pointers. A control byte is
//! [`EMPTY`], [`TOMB`] (the entry was removed) or `0x80 | tag` (a live entry; `tag` is seven bits
//! of the hash); a live slot's pointer leads to the entry, `(hash, key, state)` in an allocation
//! of its own. **An entry never moves**: growing or clearing a shard builds a new table of
//! pointers to the same entries, so a reader holding `&K` or `&V` from any table, old or new,
//! holds the one copy there is, and the rebuild runs no user code (each entry keeps the hash it
//! was inserted with). A slot once used is not reused in the same table.
//!
//! # Why readers need no lock
//!
//! - **Memory.** A reader enters the table's epoch ([`super::epoch`]) for the length of its
//!   lookup and decision: on Linux a plain store to its own slot, with no hardware barrier. A
//!   removed entry and a replaced table are *retired*, and freed only after every reader that may
//!   have seen them has left, so a reader's references stay valid whatever writers do meanwhile.
//! - **Removal.** Eviction marks the state gone (the algorithms' own compare-and-swap, see the
//!   [module docs](super)) and then the slot [`TOMB`]; a reader holding the entry sees the mark
//!   and takes the new-key path, which is exact under the shard lock.
//! - **Growth.** A reader on a replaced table sees the same entries as the new one (they are the
//!   same objects), as of the moment the table was replaced; a key inserted later is found under
//!   the lock, which the keyed limiter takes for any key a lookup does not find.
//!
//! # What user code runs where
//!
//! A key's `Hash` runs before any lock is taken; `Eq` runs in lookups (inside the epoch, or under
//! the shard lock on a write); `Drop` runs only after every lock is released: a key not inserted
//! is dropped as the call returns, a removed key when its entry is freed (by the call that
//! removed it or by a later write, a sweep, a shrink or the table's drop, whichever first finds
//! its readers gone). A panic in any of them leaves the table whole: nothing is changed before
//! the last call of user code on a write path, and every retired entry is dropped exactly once,
//! the first panic being passed on after the rest are dropped. A key whose `Eq` or `Hash` calls
//! into the same limiter may deadlock on a write (the shard lock is not reentrant), as a key
//! whose `Eq` locks a mutex its caller holds would; a key's `Drop` may call anything.
//!
//! # Bounded memory with a parked reader
//!
//! The table counts the entries it has retired and not yet freed ([`Table::unreclaimed`]); the
//! keyed limiter refuses room to new keys while that count is at its `max_keys`, so that a reader
//! parked forever inside a lookup (a key's `Eq` that blocks) holds at most `max_keys` removed
//! entries and the tables replaced while `max_keys` keys came and went, rather than every entry
//! removed after it parked.
//!
//! # Safety
//!
//! The invariants the `unsafe` blocks keep:
//!
//! 1. An entry is owned by the table from `Box::into_raw` at its insert until it is freed once:
//!    when its slot in the current table is made [`TOMB`] it is retired (exactly once: only the
//!    shard lock's holder removes, and a removed slot is never live again), and freed after the
//!    epoch's horizon passes its retirement; entries still live are freed by the table's drop.
//! 2. A slot's pointer is written once, before its control byte is published live (Release), and
//!    read only after the control byte was read live (Acquire) or by the lock's holder.
//! 3. A current table is only replaced under its shard's lock, and the replaced one is retired
//!    after the new one is published; tables own no entries.
//! 4. A reader dereferences a table or entry pointer only inside a pin of this table's domain
//!    (taken before it loaded the table pointer) or under the shard lock.

use std::borrow::Borrow;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};

use crossbeam_utils::CachePadded;

use super::epoch::Domain;
use super::store::Slot;
use crate::sync::{lock, AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Mutex, Ordering};

/// A slot never used in this table: a probe stops here.
const EMPTY: u8 = 0;
/// A removed entry: probes pass over it.
const TOMB: u8 = 1;
/// The bit every live slot's control byte has.
const LIVE: u8 = 0x80;
/// The smallest table.
const MIN_CAPACITY: usize = 16;
/// Slots per group.
const GROUP: usize = 16;

/// The control byte of a live entry with this hash.
#[inline]
fn tag(hash: u64) -> u8 {
    LIVE | (hash >> 50) as u8 & 0x7f
}

/// The most slots a table of `capacity` fills before it is rebuilt (7/8).
#[inline]
fn max_used(capacity: usize) -> usize {
    capacity - capacity / 8
}

/// The smallest capacity holding `live` entries.
fn capacity_for(live: usize) -> usize {
    let mut capacity = MIN_CAPACITY;
    while max_used(capacity) < live {
        capacity *= 2;
    }
    capacity
}

/// One key's entry: allocated once, never moved, freed once (Safety, 1).
struct Entry<K, V> {
    /// The hash the entry was inserted with (a rebuild places it without calling `Hash`).
    hash: u64,
    key: K,
    state: V,
    /// Under loom, a cell read by every reader of the entry and written when it is freed, so
    /// that loom fails a model in which the two are not ordered (a use after free).
    #[cfg(tollgate_loom)]
    alive: crate::sync::UnsafeCell<()>,
}

impl<K, V> Entry<K, V> {
    #[inline]
    fn touch(&self) {
        #[cfg(tollgate_loom)]
        self.alive.with(|_| ());
    }
}

/// Sixteen slots: their control bytes, then their entries' pointers.
struct Group<K, V> {
    ctrl: [AtomicU8; GROUP],
    ptrs: [AtomicPtr<Entry<K, V>>; GROUP],
}

/// One shard's table of slots. It owns no entry (Safety, 3).
struct Raw<K, V> {
    mask: usize,
    groups: Box<[Group<K, V>]>,
}

impl<K, V> Raw<K, V> {
    fn new(capacity: usize) -> Box<Raw<K, V>> {
        debug_assert!(capacity.is_power_of_two() && capacity >= MIN_CAPACITY);
        Box::new(Raw {
            mask: capacity - 1,
            groups: (0..capacity / GROUP)
                .map(|_| Group {
                    ctrl: std::array::from_fn(|_| AtomicU8::new(EMPTY)),
                    ptrs: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
                })
                .collect(),
        })
    }

    /// Slot `i`'s group; `i` is at most `mask` (every caller masks it).
    #[inline]
    fn group(&self, i: usize) -> &Group<K, V> {
        debug_assert!(i <= self.mask);
        // SAFETY: `i <= mask`, and the table has `(mask + 1) / GROUP` groups (built so in `new`,
        // never resized), so `i / GROUP` is in bounds. (Unchecked: the probe is the hot loop of
        // every keyed check.)
        unsafe { self.groups.get_unchecked(i / GROUP) }
    }

    #[inline]
    fn ctrl(&self, i: usize) -> &AtomicU8 {
        &self.group(i).ctrl[i % GROUP]
    }

    #[inline]
    fn ptr(&self, i: usize) -> &AtomicPtr<Entry<K, V>> {
        &self.group(i).ptrs[i % GROUP]
    }

    fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// The entry of slot `i`, whose control byte was read live.
    ///
    /// # Safety
    ///
    /// Slot `i`'s control byte was read live with Acquire (or by the lock's holder), and the
    /// caller holds a pin taken before it loaded this table, or the shard lock.
    #[inline]
    unsafe fn entry(&self, i: usize) -> &Entry<K, V> {
        // Relaxed: the pointer was written before the control byte's Release publication, which
        // the caller's Acquire load of the control byte (or its lock) has seen (Safety, 2).
        let ptr = self.ptr(i).load(Ordering::Relaxed);
        // SAFETY: a published entry, not freed while the caller's pin or lock lasts (Safety, 1
        // and 4).
        let entry = unsafe { &*ptr };
        entry.touch();
        entry
    }

    /// Probes for `key` from its home slot: its live slot, or `None`. Terminates: a table is
    /// rebuilt before its last empty slot is used.
    ///
    /// # Safety
    ///
    /// As [`Raw::entry`]: the caller holds a pin taken before it loaded this table, or the lock.
    #[inline]
    unsafe fn find<Q>(&self, hash: u64, key: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let tag = tag(hash);
        let mut i = hash as usize & self.mask;
        loop {
            // Acquire: an entry published live is read as its writer wrote it.
            match self.ctrl(i).load(Ordering::Acquire) {
                EMPTY => return None,
                // SAFETY: a live control byte, read with Acquire; the caller's contract.
                c if c == tag && unsafe { self.entry(i) }.key.borrow() == key => return Some(i),
                _ => i = (i + 1) & self.mask,
            }
        }
    }

    /// Publishes `entry` in the first empty slot of its probe sequence. Only the shard lock's
    /// holder (or a builder not yet sharing the table) calls it, with a slot to spare.
    fn put(&self, hash: u64, entry: *mut Entry<K, V>) {
        let mut i = hash as usize & self.mask;
        // Relaxed: only the writer stores control bytes, and it reads its own stores.
        while self.ctrl(i).load(Ordering::Relaxed) != EMPTY {
            i = (i + 1) & self.mask;
        }
        // Relaxed: published by the control byte's Release store below (Safety, 2).
        self.ptr(i).store(entry, Ordering::Relaxed);
        // Release: a reader that sees the slot live sees the pointer and the entry it leads to.
        self.ctrl(i).store(tag(hash), Ordering::Release);
    }

    /// The entries of the live slots, for the lock's holder or the table's drop.
    fn live(&self) -> impl Iterator<Item = (usize, *mut Entry<K, V>)> + '_ {
        (0..self.capacity())
            // Relaxed: the lock's holder reads its own (or its predecessors') stores.
            .filter(move |&i| self.ctrl(i).load(Ordering::Relaxed) & LIVE != 0)
            .map(move |i| (i, self.ptr(i).load(Ordering::Relaxed)))
    }
}

/// What a write unlinked: freed once no reader that may have seen it is left.
struct Garbage<K, V> {
    entries: Vec<*mut Entry<K, V>>,
    tables: Vec<*mut Raw<K, V>>,
}

impl<K, V> Garbage<K, V> {
    fn new() -> Garbage<K, V> {
        Garbage {
            entries: Vec::new(),
            tables: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.tables.is_empty()
    }

    fn append(&mut self, other: &mut Garbage<K, V>) {
        self.entries.append(&mut other.entries);
        self.tables.append(&mut other.tables);
    }

    /// Frees everything, dropping each entry exactly once even if a key's `Drop` panics, then
    /// passes the first panic on.
    ///
    /// # Safety
    ///
    /// No reader or writer can reach any of it any more, and each pointer is here once.
    unsafe fn free(self) {
        for table in self.tables {
            // SAFETY: the caller's contract; tables own no entries and run no user code.
            drop(unsafe { Box::from_raw(table) });
        }
        let mut first_panic = None;
        for entry in self.entries {
            // SAFETY: the caller's contract (Safety, 1).
            let entry = unsafe { Box::from_raw(entry) };
            #[cfg(tollgate_loom)]
            entry.alive.with_mut(|_| ());
            let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(entry)));
            if let Err(panic) = dropped {
                first_panic.get_or_insert(panic);
            }
        }
        if let Some(panic) = first_panic {
            std::panic::resume_unwind(panic);
        }
    }
}

/// Retired garbage and the epoch it was retired at.
struct Batch<K, V> {
    epoch: u64,
    garbage: Garbage<K, V>,
}

/// How often (in calls of [`Table::free_retired`]) the horizon is looked at when the last look
/// freed something; it doubles after each look that freed nothing, up to [`RECLAIM_MOST`], so a
/// parked reader costs a system call every few thousand writes, not every few.
const RECLAIM_EVERY: u32 = 8;
const RECLAIM_MOST: u32 = 4096;

/// What is retired and not yet freed, oldest first (epochs are taken under this lock, so they
/// rise along the queue).
struct Reclaim<K, V> {
    pending: VecDeque<Batch<K, V>>,
    /// Calls of [`Table::free_retired`] since the last look at the horizon.
    calls: u32,
    /// Calls between looks.
    every: u32,
}

/// The shard lock's data.
struct Writer {
    /// Slots not [`EMPTY`] in the current table.
    used: usize,
    /// Live slots in the current table.
    live: usize,
}

struct Shard<K, V> {
    /// The current table: replaced (Release) only by the lock's holder.
    raw: AtomicPtr<Raw<K, V>>,
    writer: Mutex<Writer>,
}

impl<K, V> Shard<K, V> {
    /// The current table, for the lock's holder (`_held` is the proof: its guard's data).
    #[inline]
    fn current(&self, _held: &Writer) -> &Raw<K, V> {
        // Relaxed: the lock's holder reads the table the holders before it installed.
        // SAFETY: the lock is held, so the current table is not retired, let alone freed,
        // before the borrow of `_held` ends (Safety, 3).
        unsafe { &*self.raw.load(Ordering::Relaxed) }
    }
}

/// The table: see the module docs.
pub(crate) struct Table<K, V> {
    shards: Box<[CachePadded<Shard<K, V>>]>,
    /// `64 - log2(shards)`: the shard is the hash's top bits.
    shift: u32,
    hasher: ahash::RandomState,
    /// This table's readers (one domain per table: a reader of another table holds none of
    /// this one's memory).
    domain: Domain,
    /// Retired, not yet freed (locked after a shard's lock is released, never while one is held).
    reclaim: Mutex<Reclaim<K, V>>,
    /// Whether `reclaim` holds anything: writers look at it before locking it.
    reclaiming: AtomicBool,
    /// Entries retired and not yet freed.
    unreclaimed: CachePadded<AtomicUsize>,
}

// SAFETY: the table owns its keys and states (sent with it) and shares them between threads only
// as `&K` and `&V` (hence `Sync` for both); its raw pointers are owned entries and tables.
unsafe impl<K: Send + Sync, V: Send + Sync> Send for Table<K, V> {}
// SAFETY: as above; every write to shared memory is an atomic or happens under the shard lock
// before a Release publication.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for Table<K, V> {}

impl<K: Hash + Eq, V> Table<K, V> {
    /// A table with four shards per core, and at least 8: DashMap's count (shards spread the
    /// locks of new keys and bound how much one growth copies; lookups never wait for either).
    #[cfg_attr(tollgate_loom, allow(dead_code))] // under loom the store is the stand-in map
    pub(crate) fn new() -> Table<K, V> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Table::with_shards(cores.saturating_mul(4).max(8))
    }

    /// A table with `shards` shards (rounded up to a power of two).
    pub(crate) fn with_shards(shards: usize) -> Table<K, V> {
        let shards = shards.clamp(1, 1 << 16).next_power_of_two();
        Table {
            shards: (0..shards)
                .map(|_| {
                    CachePadded::new(Shard {
                        raw: AtomicPtr::new(Box::into_raw(Raw::new(MIN_CAPACITY))),
                        writer: Mutex::new(Writer { used: 0, live: 0 }),
                    })
                })
                .collect(),
            shift: 64 - shards.trailing_zeros(),
            // Loom replays a model many times and needs the same slots each time.
            #[cfg(not(tollgate_loom))]
            hasher: ahash::RandomState::new(),
            #[cfg(tollgate_loom)]
            hasher: ahash::RandomState::with_seeds(1, 2, 3, 4),
            domain: Domain::new(),
            reclaim: Mutex::new(Reclaim {
                pending: VecDeque::new(),
                calls: 0,
                every: RECLAIM_EVERY,
            }),
            reclaiming: AtomicBool::new(false),
            unreclaimed: CachePadded::new(AtomicUsize::new(0)),
        }
    }

    /// The hash of a key or of any borrowed form of it, through the one generic path
    /// (`Hash::hash` into the hasher, then `finish`), so that a key and its borrowed form hash
    /// alike on every toolchain: ahash's `hash_one` takes type-specialized shortcuts on a
    /// nightly compiler, under which `hash_one(&7u64)` and `hash_one(&UserId(7))` differ.
    #[inline]
    #[allow(clippy::manual_hash_one)] // on purpose: see above
    fn hash<Q: Hash + ?Sized>(&self, key: &Q) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        key.hash(&mut hasher);
        hasher.finish()
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, V> {
        // `checked_shr`: one shard (shift 64) is shard 0.
        &self.shards[hash.checked_shr(self.shift).unwrap_or(0) as usize]
    }

    /// Runs `f` on `key`'s state, or answers `None` if the key is not held. Without a lock: the
    /// lookup and `f` run inside the epoch (under the shard lock if this thread cannot enter it).
    /// `f` may find the state marked gone (evicted): what the caller makes of that is its own.
    #[inline]
    pub(crate) fn with_read<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        let Some(_pin) = self.pin() else {
            return self.with_locked(shard, hash, key, f);
        };
        // Acquire: the table as its builder initialized it. The pin, taken before this load,
        // keeps it alive (Safety, 4).
        // SAFETY: a current table is freed only after its retirement and every pin before it.
        let raw = unsafe { &*shard.raw.load(Ordering::Acquire) };
        // SAFETY: under the pin, on the table loaded after it.
        let i = unsafe { raw.find(hash, key) }?;
        // SAFETY: found live, under the pin.
        Some(f(&unsafe { raw.entry(i) }.state))
    }

    /// Enters this table's epoch.
    #[cfg(not(tollgate_loom))]
    #[inline]
    fn pin(&self) -> Option<super::epoch::Pin<'_>> {
        self.domain.pin()
    }

    /// Enters this table's epoch as loom's thread (indices counted per model run).
    #[cfg(tollgate_loom)]
    fn pin(&self) -> Option<super::epoch::Pin<'_>> {
        use std::cell::Cell;
        loom::thread_local! {
            static INDEX: Cell<usize> = Cell::new(usize::MAX);
        }
        // Loom's lazy static is made anew for each execution, so a loom thread gets the same
        // index in every execution of a model (a process-wide counter would give it another,
        // and loom, replaying recorded loads by position, would explore impossible executions).
        loom::lazy_static! {
            static ref NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        }
        let index = INDEX.with(|index| {
            if index.get() == usize::MAX {
                // A fresh index per loom thread, counted per execution (see `NEXT`).
                let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                index.set(next % super::epoch::MAX_THREADS);
            }
            index.get()
        });
        self.domain.pin_as(index)
    }

    /// The lookup under the shard lock, for a thread that cannot enter the epoch.
    #[cold]
    fn with_locked<Q, R>(
        &self,
        shard: &Shard<K, V>,
        hash: u64,
        key: &Q,
        f: impl FnOnce(&V) -> R,
    ) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let writer = lock(&shard.writer);
        let raw = shard.current(&writer);
        // SAFETY: under the lock.
        let i = unsafe { raw.find(hash, key) }?;
        // SAFETY: found live, under the lock.
        Some(f(&unsafe { raw.entry(i) }.state))
    }

    /// Runs `f` under `key`'s shard lock on the key's entry, if any; if `f` answers a state, it is
    /// inserted for a vacant key, or replaces the occupied one's (the old entry is removed and the
    /// new one inserted, still under the lock). `key` is dropped after the lock is released if it
    /// was not inserted.
    pub(crate) fn with_entry<R>(
        &self,
        key: K,
        f: impl FnOnce(Slot<'_, K, V>) -> (Option<V>, R),
    ) -> R {
        // User code (`Hash`), before anything is held.
        let hash = self.hash(&key);
        let shard = self.shard(hash);
        let mut garbage = Garbage::new();
        let (answer, unused) = {
            let mut writer = lock(&shard.writer);
            let raw = shard.current(&writer);
            // User code (`Eq`, then `f`), before anything is changed.
            // SAFETY: under the lock.
            let (state, answer, removed) = match unsafe { raw.find(hash, &key) } {
                Some(i) => {
                    // SAFETY: found live, under the lock.
                    let entry = unsafe { raw.entry(i) };
                    let (state, answer) = f(Slot::Occupied(&entry.key, &entry.state));
                    (state, answer, Some(i))
                }
                None => {
                    let (state, answer) = f(Slot::Vacant(&key));
                    (state, answer, None)
                }
            };
            match state {
                Some(state) => {
                    if let Some(i) = removed {
                        // Relaxed: the lock's holder reads what it will retire.
                        garbage.entries.push(raw.ptr(i).load(Ordering::Relaxed));
                        // Release: a reader that sees the slot removed and looks again under the
                        // lock finds the replacement.
                        raw.ctrl(i).store(TOMB, Ordering::Release);
                        writer.live -= 1;
                    }
                    self.insert(shard, &mut writer, hash, key, state, &mut garbage);
                    (answer, None)
                }
                None => (answer, Some(key)),
            }
        };
        // No lock held from here: what is freed, and the key not inserted, run their `Drop`;
        // each runs even if the other panics (a second panic while unwinding would abort), and
        // the first panic is passed on.
        let freed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.retire(garbage)));
        let dropped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(unused)));
        if let Err(panic) = freed.and(dropped) {
            std::panic::resume_unwind(panic);
        }
        answer
    }

    /// Inserts a key known to be absent, rebuilding the table first if it has no slot to spare.
    /// Runs no user code.
    fn insert(
        &self,
        shard: &Shard<K, V>,
        writer: &mut Writer,
        hash: u64,
        key: K,
        state: V,
        garbage: &mut Garbage<K, V>,
    ) {
        let entry = Box::into_raw(Box::new(Entry {
            hash,
            key,
            state,
            #[cfg(tollgate_loom)]
            alive: crate::sync::UnsafeCell::new(()),
        }));
        let capacity = shard.current(writer).capacity();
        if writer.used + 1 > max_used(capacity) {
            // Half full of live entries or more: grow; otherwise clear the removed ones.
            let live = writer.live + 1;
            let capacity = if live <= max_used(capacity) / 2 {
                capacity
            } else {
                capacity_for(live.max(max_used(capacity) + 1))
            };
            self.rebuild(shard, writer, capacity, garbage);
        }
        shard.current(writer).put(hash, entry);
        writer.used += 1;
        writer.live += 1;
    }

    /// Replaces the shard's table by one of `capacity` pointing to its live entries, and hands
    /// the old one to `garbage`. Under the shard lock; runs no user code (each entry keeps its
    /// hash), so it cannot be left half done.
    fn rebuild(
        &self,
        shard: &Shard<K, V>,
        writer: &mut Writer,
        capacity: usize,
        garbage: &mut Garbage<K, V>,
    ) {
        debug_assert!(max_used(capacity) >= writer.live);
        let new = Raw::new(capacity);
        let old_ptr = shard.raw.load(Ordering::Relaxed);
        let old = shard.current(writer);
        for (_, entry) in old.live() {
            // SAFETY: a live entry, under the lock.
            new.put(unsafe { &*entry }.hash, entry);
        }
        // Release: a reader that loads the new table sees its slots.
        shard.raw.store(Box::into_raw(new), Ordering::Release);
        writer.used = writer.live;
        garbage.tables.push(old_ptr);
    }

    /// Hands what a write unlinked to the reclaimer, and frees what no reader can still hold.
    /// Called with no lock held.
    fn retire(&self, garbage: Garbage<K, V>) {
        if garbage.is_empty() {
            self.free_retired();
            return;
        }
        let freed = {
            let mut reclaim = lock(&self.reclaim);
            self.hand_over(&mut reclaim, garbage);
            // At once: with no lookup in flight (one thread inserting, say), a replaced table is
            // freed as a growing `HashMap` frees it, and the allocator can reuse its memory.
            self.collect(&mut reclaim)
        };
        // SAFETY: past the horizon: no reader holds any of it (`collect`).
        unsafe { freed.free() };
    }

    /// Queues what a write unlinked, at the epoch it moves to: freed by a later `collect`.
    fn hand_over(&self, reclaim: &mut Reclaim<K, V>, garbage: Garbage<K, V>) {
        if garbage.is_empty() {
            return;
        }
        // Relaxed: a count read as a bound, moved only under this lock.
        self.unreclaimed
            .fetch_add(garbage.entries.len(), Ordering::Relaxed);
        // After the unlinking (the caller's stores, under the shard lock it released): readers
        // that enter at the epoch this moves to see it unlinked.
        let epoch = self.domain.retire();
        reclaim.pending.push_back(Batch { epoch, garbage });
        // Relaxed: a hint, as in `collect`.
        self.reclaiming.store(true, Ordering::Relaxed);
    }

    /// Takes out of `reclaim` what no reader can still hold (the batches retired before the
    /// horizon; none if the readers cannot be seen), to be freed once the lock is released.
    fn collect(&self, reclaim: &mut Reclaim<K, V>) -> Garbage<K, V> {
        reclaim.calls = 0;
        let mut freed = Garbage::new();
        if let Some(horizon) = self.domain.horizon() {
            while reclaim.pending.front().is_some_and(|b| b.epoch < horizon) {
                if let Some(mut batch) = reclaim.pending.pop_front() {
                    freed.append(&mut batch.garbage);
                }
            }
        }
        reclaim.every = if freed.is_empty() {
            (reclaim.every * 2).min(RECLAIM_MOST)
        } else {
            RECLAIM_EVERY
        };
        // Relaxed: as in `retire`.
        self.unreclaimed
            .fetch_sub(freed.entries.len(), Ordering::Relaxed);
        // Relaxed: a hint; the reclaimer's own lock orders the list.
        self.reclaiming
            .store(!reclaim.pending.is_empty(), Ordering::Relaxed);
        freed
    }

    /// Frees the retired garbage whose readers are gone, if there is any and a look is due.
    fn free_retired(&self) {
        // Relaxed: a hint (garbage retired meanwhile is freed at a later call, or with the table).
        if !self.reclaiming.load(Ordering::Relaxed) {
            return;
        }
        let freed = {
            let mut reclaim = lock(&self.reclaim);
            reclaim.calls += 1;
            if reclaim.calls < reclaim.every {
                return;
            }
            self.collect(&mut reclaim)
        };
        // SAFETY: past the horizon (`collect`).
        unsafe { freed.free() };
    }

    /// Frees the retired garbage whose readers are gone, now.
    pub(crate) fn reclaim_now(&self) {
        // Relaxed: as in `free_retired`.
        if self.reclaiming.load(Ordering::Relaxed) {
            let freed = self.collect(&mut lock(&self.reclaim));
            // SAFETY: past the horizon (`collect`).
            unsafe { freed.free() };
        }
    }

    /// Entries removed and not yet freed (a reader may still hold them).
    #[inline]
    pub(crate) fn unreclaimed(&self) -> usize {
        // Relaxed: a snapshot of a count.
        self.unreclaimed.load(Ordering::Relaxed)
    }

    /// Removes every entry whose state `evict` marks gone (marking and removing under the
    /// shard lock, one shard at a time), and answers how many it removed. Frees nothing and runs
    /// no key's `Drop`, so a sweep is never cut short and its count is always returned: the
    /// caller settles its own books, then calls [`Table::reclaim_now`] (where a panicking `Drop`
    /// surfaces).
    pub(crate) fn retain(&self, mut evict: impl FnMut(&V) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut garbage = Garbage::new();
            {
                let mut writer = lock(&shard.writer);
                let raw = shard.current(&writer);
                for (i, entry) in raw.live() {
                    // SAFETY: a live entry, under the lock.
                    if evict(&unsafe { &*entry }.state) {
                        // Release: after the mark `evict` wrote, as in `with_entry`.
                        raw.ctrl(i).store(TOMB, Ordering::Release);
                        garbage.entries.push(entry);
                        writer.live -= 1;
                        removed += 1;
                    }
                }
            }
            self.hand_over(&mut lock(&self.reclaim), garbage);
        }
        removed
    }

    /// Rebuilds every shard whose table is larger than its live entries need, or holds removed
    /// ones, at the smallest capacity that holds them, and frees what no reader holds.
    #[cfg_attr(tollgate_loom, allow(dead_code))]
    pub(crate) fn shrink_to_fit(&self) {
        for shard in self.shards.iter() {
            let mut garbage = Garbage::new();
            {
                let mut writer = lock(&shard.writer);
                let capacity = shard.current(&writer).capacity();
                let fit = capacity_for(writer.live + 1);
                if fit < capacity || writer.used > writer.live {
                    self.rebuild(shard, &mut writer, fit, &mut garbage);
                }
            }
            // Queued, not freed, until every shard is done: a key's `Drop` panicking in the
            // freeing cannot cut the shrink short.
            self.hand_over(&mut lock(&self.reclaim), garbage);
        }
        self.reclaim_now();
    }

    /// Rebuilds every shard at its current capacity.
    #[cfg(any(test, tollgate_loom, fuzzing))]
    pub(crate) fn rebuild_all(&self) {
        for shard in self.shards.iter() {
            let mut garbage = Garbage::new();
            {
                let mut writer = lock(&shard.writer);
                let capacity = shard.current(&writer).capacity();
                self.rebuild(shard, &mut writer, capacity, &mut garbage);
            }
            // As in `shrink_to_fit`: every shard first, then the freeing.
            self.hand_over(&mut lock(&self.reclaim), garbage);
        }
        self.reclaim_now();
    }

    /// Batches retired and not yet freed (after trying to free them).
    #[cfg(any(test, tollgate_loom, fuzzing))]
    pub(crate) fn retired(&self) -> usize {
        self.reclaim_now();
        lock(&self.reclaim).pending.len()
    }

    /// Live entries (exact when no writer runs).
    #[cfg_attr(tollgate_loom, allow(dead_code))]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| lock(&s.writer).live).sum()
    }

    /// Slots allocated in the current tables (for tests of growth and shrinking).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.current(&lock(&s.writer)).capacity())
            .sum()
    }
}

impl<K, V> Drop for Table<K, V> {
    fn drop(&mut self) {
        let mut all = Garbage::new();
        for shard in self.shards.iter() {
            // Relaxed: `&mut self`, no other thread is left.
            let raw = shard.raw.load(Ordering::Relaxed);
            // SAFETY: the current table, live until here.
            all.entries
                .extend(unsafe { &*raw }.live().map(|(_, entry)| entry));
            all.tables.push(raw);
        }
        for mut batch in lock(&self.reclaim).pending.drain(..) {
            all.append(&mut batch.garbage);
        }
        // SAFETY: `&mut self`: no reader or writer is left, and each entry is either live in its
        // shard's current table or retired, never both (Safety, 1).
        unsafe { all.free() };
    }
}

/// The table with one-word states, for `benches/maps.rs`, which measures it beside other
/// concurrent maps. Not an API: hidden, and free to change.
#[cfg(not(tollgate_loom))]
pub struct BenchTable<K>(Table<K, crate::sync::AtomicU64>);

#[cfg(not(tollgate_loom))]
impl<K> std::fmt::Debug for BenchTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BenchTable")
    }
}

#[cfg(not(tollgate_loom))]
impl<K: Hash + Eq> Default for BenchTable<K> {
    /// The keyed limiter's shard count.
    fn default() -> BenchTable<K> {
        BenchTable(Table::new())
    }
}

#[cfg(not(tollgate_loom))]
impl<K: Hash + Eq> BenchTable<K> {
    /// Runs `f` on `key`'s word without a lock (see [`Table::with_read`]).
    #[inline]
    pub fn read<Q, R>(&self, key: &Q, f: impl FnOnce(&crate::sync::AtomicU64) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.with_read(key, f)
    }

    /// Inserts `key` with `word` unless it is held; answers whether it inserted.
    pub fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        self.0.with_entry(key, |slot| match slot {
            Slot::Occupied(..) => (None, false),
            Slot::Vacant(_) => (Some(crate::sync::AtomicU64::new(word)), true),
        })
    }

    /// Removes every entry whose word `evict` approves (under each shard's lock); answers how
    /// many.
    pub fn sweep(&self, evict: impl FnMut(&crate::sync::AtomicU64) -> bool) -> usize {
        let removed = self.0.retain(evict);
        self.0.reclaim_now();
        removed
    }

    /// Live entries (exact when no writer runs).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A table of `u64` keys and one-word states, for the loom models (`loom-tests/tests/table.rs`)
/// of the table's protocol. (The fuzz target `fuzz/fuzz_targets/table_ops.rs` uses the same
/// window over keys of its own, `super::fuzz_table::FuzzTable`.)
#[cfg(any(tollgate_loom, fuzzing))]
pub struct ModelTable(Table<u64, crate::sync::AtomicU64>);

#[cfg(any(tollgate_loom, fuzzing))]
impl std::fmt::Debug for ModelTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ModelTable")
    }
}

/// One shard.
#[cfg(any(tollgate_loom, fuzzing))]
impl Default for ModelTable {
    fn default() -> ModelTable {
        ModelTable(Table::with_shards(1))
    }
}

#[cfg(any(tollgate_loom, fuzzing))]
impl ModelTable {
    /// A table of `shards` shards (rounded up to a power of two).
    pub fn with_shards(shards: usize) -> ModelTable {
        ModelTable(Table::with_shards(shards))
    }

    /// Inserts `key` with `word` unless it is held; answers whether it inserted.
    pub fn insert(&self, key: u64, word: u64) -> bool {
        self.0.with_entry(key, |slot| match slot {
            Slot::Occupied(..) => (None, false),
            Slot::Vacant(_) => (Some(crate::sync::AtomicU64::new(word)), true),
        })
    }

    /// Adds one to `key`'s word, as an admission would: the new word, `Err(Gone)` if the word is
    /// marked gone, `None` if the key is not held.
    pub fn bump(&self, key: u64) -> Option<Result<u64, crate::cas::Gone>> {
        self.0.with_read(&key, |word| {
            crate::cas::update_live(word, |w| crate::cas::Step::<u64, ()>::Write(w + 1, w + 1))
                .map(|r| r.unwrap_or(0))
        })
    }

    /// `key`'s word, as a peek would read it.
    pub fn read(&self, key: u64) -> Option<Result<u64, crate::cas::Gone>> {
        self.0.with_read(&key, |word| match crate::cas::read(word) {
            crate::cas::GONE => Err(crate::cas::Gone::seen()),
            w => Ok(w),
        })
    }

    /// Rebuilds every shard's table at its size (the same entries, a new table of pointers).
    pub fn rebuild(&self) {
        self.0.rebuild_all();
    }

    /// Batches retired and not yet freed, after freeing what no reader holds.
    pub fn retired(&self) -> usize {
        self.0.retired()
    }

    /// Entries removed and not yet freed (a reader may still hold them), as the keyed limiter
    /// counts them against its room for new keys; frees nothing.
    pub fn unreclaimed(&self) -> usize {
        self.0.unreclaimed()
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// Shrinks every shard to what it holds (clearing removed entries).
    pub fn shrink(&self) {
        self.0.shrink_to_fit();
    }

    /// Marks gone and removes every entry whose word is `word`, as eviction does; answers how
    /// many it removed.
    pub fn forget(&self, word: u64) -> usize {
        let removed = self.0.retain(|state| crate::cas::mark_gone(state, word));
        self.0.reclaim_now();
        removed
    }

    /// Under the key's lock: if its state is marked gone, replaces it with a fresh `word` (as a
    /// request that meets the mark does); answers the word the key holds afterwards.
    pub fn replace_gone(&self, key: u64, word: u64) -> Option<u64> {
        self.0.with_entry(key, |slot| match slot {
            Slot::Occupied(_, state) => match crate::cas::read(state) {
                crate::cas::GONE => (Some(crate::sync::AtomicU64::new(word)), Some(word)),
                w => (None, Some(w)),
            },
            Slot::Vacant(_) => (None, None),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cas::{Gone, GONE};
    use crate::sync::{AtomicBool, AtomicU64, Ordering};
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicIsize;
    use std::sync::{Arc, Barrier};

    /// A key that counts its live copies, so that the tests see every key dropped exactly once.
    struct Key(u16, Arc<AtomicIsize>);

    impl Key {
        fn new(k: u16, live: &Arc<AtomicIsize>) -> Key {
            live.fetch_add(1, Ordering::Relaxed);
            Key(k, live.clone())
        }
    }

    impl Drop for Key {
        fn drop(&mut self) {
            self.1.fetch_sub(1, Ordering::Relaxed);
        }
    }

    impl PartialEq for Key {
        fn eq(&self, other: &Key) -> bool {
            self.0 == other.0
        }
    }
    impl Eq for Key {}
    impl Hash for Key {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            self.0.hash(h)
        }
    }
    impl Borrow<u16> for Key {
        fn borrow(&self) -> &u16 {
            &self.0
        }
    }

    /// Adds one to a live word, as an admission would; refuses a gone one.
    fn bump(word: &AtomicU64) -> Result<u64, Gone> {
        let mut w = word.load(Ordering::Relaxed);
        loop {
            if w == GONE {
                return Err(Gone);
            }
            match word.compare_exchange_weak(w, w + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Ok(w + 1),
                Err(seen) => w = seen,
            }
        }
    }

    fn read(word: &AtomicU64) -> Result<u64, Gone> {
        match word.load(Ordering::Relaxed) {
            GONE => Err(Gone),
            w => Ok(w),
        }
    }

    fn put<K: Hash + Eq>(table: &Table<K, AtomicU64>, key: K, v: u64) {
        table.with_entry(key, |_| (Some(AtomicU64::new(v)), ()));
    }

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert the key with this value, or replace its state with it.
        Put(u16, u64),
        /// Add one to the key's value, if held.
        Bump(u16),
        /// Remove every key whose value is `v % m == 0`.
        Retain(u64),
        Shrink,
        Rebuild,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u16..300, 0u64..1000).prop_map(|(k, v)| Op::Put(k, v)),
            4 => (0u16..300).prop_map(Op::Bump),
            1 => (2u64..5).prop_map(Op::Retain),
            1 => Just(Op::Shrink),
            1 => Just(Op::Rebuild),
        ]
    }

    proptest! {
        /// Every operation answers as a `HashMap` would, through growth, removal, replacement and
        /// rebuilds, and every key is dropped exactly once.
        #[test]
        fn the_table_is_a_map(shards in 1usize..4, ops in prop::collection::vec(op(), 1..400)) {
            let live = Arc::new(AtomicIsize::new(0));
            let table: Table<Key, AtomicU64> = Table::with_shards(shards);
            let mut model: HashMap<u16, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Put(k, v) => {
                        let was = table.with_entry(Key::new(k, &live), |slot| match slot {
                            Slot::Occupied(held, state) => {
                                assert_eq!(held.0, k);
                                (Some(AtomicU64::new(v)), Some(state.load(Ordering::Relaxed)))
                            }
                            Slot::Vacant(key) => {
                                assert_eq!(key.0, k);
                                (Some(AtomicU64::new(v)), None)
                            }
                        });
                        prop_assert_eq!(was, model.insert(k, v));
                    }
                    Op::Bump(k) => {
                        let got = table.with_read(&k, bump).map(|r| r.unwrap());
                        let want = model.get_mut(&k).map(|v| {
                            *v += 1;
                            *v
                        });
                        prop_assert_eq!(got, want);
                    }
                    Op::Retain(m) => {
                        let removed = table.retain(|v| v.load(Ordering::Relaxed) % m == 0);
                        table.reclaim_now();
                        let before = model.len();
                        model.retain(|_, v| *v % m != 0);
                        prop_assert_eq!(removed, before - model.len());
                    }
                    Op::Shrink => table.shrink_to_fit(),
                    Op::Rebuild => table.rebuild_all(),
                }
                prop_assert_eq!(table.len(), model.len());
                // No lookup is in flight: everything removed or replaced is freed at once.
                prop_assert_eq!(table.retired(), 0);
                prop_assert_eq!(table.unreclaimed(), 0);
                prop_assert_eq!(live.load(Ordering::Relaxed), model.len() as isize);
            }
            for k in 0..300u16 {
                let got = table.with_read(&k, read).map(|r| r.unwrap());
                prop_assert_eq!(got, model.get(&k).copied());
            }
            drop(table);
            prop_assert_eq!(live.load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn growth_is_by_doubling_and_shrinking_gives_the_room_back() {
        let table: Table<u64, AtomicU64> = Table::with_shards(1);
        for k in 0..14u64 {
            put(&table, k, k);
        }
        assert_eq!(table.capacity(), 16);
        put(&table, 14, 14);
        assert_eq!(table.capacity(), 32);
        for k in 15..10_000u64 {
            put(&table, k, k);
        }
        assert_eq!(table.capacity(), 16_384);
        assert_eq!(table.retain(|v| v.load(Ordering::Relaxed) >= 10), 9_990);
        table.shrink_to_fit();
        assert_eq!(table.capacity(), 16);
        for k in 0..10u64 {
            assert_eq!(table.with_read(&k, read), Some(Ok(k)));
        }
        assert_eq!(table.with_read(&10, read), None);
    }

    /// A removed entry and a replaced table are not freed while a reader that entered before
    /// they were unlinked is still in, and are freed once that reader has left; a reader entering
    /// later does not hold them up.
    #[test]
    fn retired_memory_waits_for_the_readers_that_may_hold_it() {
        let table: Table<u64, AtomicU64> = Table::with_shards(1);
        put(&table, 1, 5);
        put(&table, 2, 6);
        let (entered, release) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                let seen = table.with_read(&1, |word| {
                    entered.wait();
                    release.wait();
                    read(word)
                });
                // The entry the reader held was removed under it: it reads the mark.
                assert_eq!(seen, Some(Err(Gone)));
            });
            entered.wait();
            assert_eq!(table.retain(|w| crate::cas::mark_gone(w, 5)), 1);
            table.rebuild_all();
            let (batches, entries) = (table.retired(), table.unreclaimed());
            let later = table.with_read(&2, read);
            let after_it = table.retired();
            // Released before asserting, so that a failure fails rather than hangs.
            release.wait();
            assert_eq!((batches, entries), (2, 1), "freed under a reader");
            assert_eq!(later, Some(Ok(6)));
            assert_eq!(after_it, 2);
        });
        assert_eq!(table.retired(), 0);
        assert_eq!(table.unreclaimed(), 0);
    }

    /// A table full of removed entries is rebuilt at the same size, not grown: a key space
    /// sprayed through a bounded map keeps the map's size.
    #[test]
    fn removed_entries_are_cleared_without_growing() {
        let table: Table<u64, AtomicU64> = Table::with_shards(1);
        for round in 0..100u64 {
            for k in 0..8 {
                put(&table, round * 8 + k, 0);
            }
            table.retain(|_| true);
        }
        assert_eq!(table.len(), 0);
        assert_eq!(table.capacity(), 16);
    }

    /// Threads add one to keys while others insert new keys and rebuild the tables: every
    /// addition is kept (an entry never moves: an addition through an old table is an addition
    /// to the one state there is).
    #[test]
    fn no_write_is_lost_to_a_rebuild() {
        const KEYS: u64 = 3_000;
        const OPS: u64 = if cfg!(debug_assertions) {
            30_000
        } else {
            300_000
        };
        let table: Arc<Table<u64, AtomicU64>> = Arc::new(Table::with_shards(2));
        let stop = Arc::new(AtomicBool::new(false));
        let rebuilder = {
            let (table, stop) = (table.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rebuilds = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    table.rebuild_all();
                    rebuilds += 1;
                    std::thread::yield_now();
                }
                rebuilds
            })
        };
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let table = table.clone();
                std::thread::spawn(move || {
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                    for _ in 0..OPS {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = x % KEYS;
                        match table.with_read(&k, bump) {
                            Some(Ok(_)) => {}
                            Some(Err(Gone)) => panic!("nothing is evicted here"),
                            None => table.with_entry(k, |slot| match slot {
                                Slot::Occupied(_, state) => {
                                    bump(state).expect("live under the lock");
                                    (None, ())
                                }
                                Slot::Vacant(_) => (Some(AtomicU64::new(1)), ()),
                            }),
                        }
                    }
                    OPS
                })
            })
            .collect();
        let made: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        assert!(rebuilder.join().unwrap() > 0);
        let kept: u64 = (0..KEYS)
            .filter_map(|k| table.with_read(&k, read))
            .map(|r| r.unwrap())
            .sum();
        assert_eq!(kept, made);
        // No reader is left: everything replaced is freed.
        assert_eq!(table.retired(), 0);
    }

    /// A key whose `Drop` may panic, whose `Hash` and `Eq` may panic on a chosen call, and which
    /// records every drop (by id), so that a test sees each key dropped exactly once.
    struct Touchy {
        id: u64,
        log: Arc<Log>,
    }

    #[derive(Default)]
    struct Log {
        /// Ids dropped, in order.
        dropped: std::sync::Mutex<Vec<u64>>,
        /// A drop of this id panics.
        panic_on_drop: AtomicU64,
        /// Hash calls left before one panics (`u64::MAX`: never).
        hashes_until_panic: AtomicU64,
        /// Eq calls left before one panics (`u64::MAX`: never).
        eqs_until_panic: AtomicU64,
        hashes: AtomicU64,
    }

    impl Log {
        fn new() -> Arc<Log> {
            let log = Log::default();
            log.panic_on_drop.store(u64::MAX, Ordering::Relaxed);
            log.hashes_until_panic.store(u64::MAX, Ordering::Relaxed);
            log.eqs_until_panic.store(u64::MAX, Ordering::Relaxed);
            Arc::new(log)
        }

        fn key(self: &Arc<Log>, id: u64) -> Touchy {
            Touchy {
                id,
                log: self.clone(),
            }
        }

        fn dropped(&self) -> Vec<u64> {
            let mut ids = self.dropped.lock().unwrap().clone();
            ids.sort_unstable();
            ids
        }
    }

    fn countdown(left: &AtomicU64) -> bool {
        // Fires once, when the count reaches 0, then never again.
        left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| match n {
            u64::MAX => None,
            0 => Some(u64::MAX),
            n => Some(n - 1),
        }) == Ok(0)
    }

    impl Drop for Touchy {
        fn drop(&mut self) {
            self.log.dropped.lock().unwrap().push(self.id);
            if self.log.panic_on_drop.load(Ordering::Relaxed) == self.id {
                panic!("drop of key {}", self.id);
            }
        }
    }

    impl PartialEq for Touchy {
        fn eq(&self, other: &Touchy) -> bool {
            if countdown(&self.log.eqs_until_panic) {
                panic!("eq");
            }
            self.id == other.id
        }
    }
    impl Eq for Touchy {}
    impl Hash for Touchy {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            self.log.hashes.fetch_add(1, Ordering::Relaxed);
            if countdown(&self.log.hashes_until_panic) {
                panic!("hash");
            }
            self.id.hash(h)
        }
    }

    fn quietly<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
    }

    /// Finding (a): a key whose `Drop` panics while its entry is freed. Every other key is still
    /// dropped, each exactly once, the panic reaches the caller, and later reclamation and the
    /// table's drop free nothing twice (before the fix: a double free).
    #[test]
    fn a_panicking_drop_while_freeing_drops_every_key_once() {
        let log = Log::new();
        let table: Table<Touchy, AtomicU64> = Table::with_shards(1);
        for id in 0..40 {
            put(&table, log.key(id), id);
        }
        log.panic_on_drop.store(7, Ordering::Relaxed);
        // Evict ids 0 to 19 (7 among them): the sweep itself runs no `Drop` and completes; the
        // freeing that follows drops them all and passes key 7's panic on.
        assert_eq!(table.retain(|w| w.load(Ordering::Relaxed) < 20), 20);
        let freed = quietly(|| table.reclaim_now());
        assert!(freed.is_err(), "the drop's panic reaches the caller");
        let mut want: Vec<u64> = (0..20).collect();
        assert_eq!(log.dropped(), want);
        assert_eq!(table.len(), 20);
        assert_eq!(table.unreclaimed(), 0);
        table.shrink_to_fit();
        assert_eq!(table.retired(), 0);
        assert_eq!(log.dropped(), want);
        drop(table);
        want.extend(20..40);
        assert_eq!(log.dropped(), want);
    }

    /// Finding (b): `Hash` panicking. A rebuild calls no `Hash` (entries keep theirs), so no
    /// growth can be left half done; a panic while hashing a new key changes nothing.
    #[test]
    fn a_panicking_hash_leaves_the_table_whole() {
        let log = Log::new();
        let table: Table<Touchy, AtomicU64> = Table::with_shards(1);
        for id in 0..14 {
            put(&table, log.key(id), id);
        }
        let hashed = log.hashes.load(Ordering::Relaxed);
        table.rebuild_all();
        table.shrink_to_fit();
        assert_eq!(
            log.hashes.load(Ordering::Relaxed),
            hashed,
            "a rebuild hashed"
        );
        // The insert that grows the table panics in its `Hash`: nothing is changed.
        log.hashes_until_panic.store(0, Ordering::Relaxed);
        assert!(quietly(|| put(&table, log.key(14), 14)).is_err());
        assert_eq!(table.len(), 14);
        assert_eq!(table.capacity(), 16);
        // The next one grows it, and every key is found exactly once, with its own state.
        put(&table, log.key(14), 14);
        assert_eq!(table.capacity(), 32);
        for id in 0..15 {
            assert_eq!(table.with_read(&log.key(id), read), Some(Ok(id)));
        }
        // A growth with `Eq` panicking in the probe of the new key: nothing changed either.
        log.eqs_until_panic.store(0, Ordering::Relaxed);
        let before = table.len();
        let _ = quietly(|| put(&table, log.key(3), 99));
        assert_eq!(table.len(), before);
        log.eqs_until_panic.store(u64::MAX, Ordering::Relaxed);
        assert_eq!(table.len(), 15);
        for id in 0..15 {
            assert_eq!(table.with_read(&log.key(id), read), Some(Ok(id)));
        }
    }

    /// A key whose `Eq` writes through `&self`: every comparison counts itself in the key.
    struct Counting {
        id: u64,
        compared: AtomicU64,
        memo: std::sync::Mutex<Option<String>>,
    }

    impl PartialEq for Counting {
        fn eq(&self, other: &Counting) -> bool {
            self.compared.fetch_add(1, Ordering::Relaxed);
            other.compared.fetch_add(1, Ordering::Relaxed);
            // A memo allocated on first use, as a `OnceLock` cache would be.
            self.memo
                .lock()
                .unwrap()
                .get_or_insert_with(|| self.id.to_string());
            self.id == other.id
        }
    }
    impl Eq for Counting {}
    impl Hash for Counting {
        fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
            self.id.hash(h)
        }
    }

    fn counting(id: u64) -> Counting {
        Counting {
            id,
            compared: AtomicU64::new(0),
            memo: std::sync::Mutex::new(None),
        }
    }

    /// Finding (c): lookups compare (and so write into) held keys while a thread rebuilds the
    /// table over and over. An entry never moves, so no write lands on a copy nobody owns: the
    /// comparisons counted in the held keys are exactly the ones made with them (before the fix:
    /// writes lost to the bitwise copy, a double free of the memo).
    #[test]
    fn writes_through_a_held_key_are_never_lost_to_a_rebuild() {
        const KEYS: u64 = 64;
        let lookups = if cfg!(debug_assertions) {
            20_000
        } else {
            200_000
        };
        let table: Table<Counting, AtomicU64> = Table::with_shards(1);
        for id in 0..KEYS {
            put(&table, counting(id), id);
        }
        // Comparisons counted in the held keys: read under the lock, comparing nothing.
        let held = || {
            let mut held = 0;
            for shard in table.shards.iter() {
                let writer = lock(&shard.writer);
                for (_, entry) in shard.current(&writer).live() {
                    // SAFETY: a live entry, under the lock.
                    held += unsafe { &*entry }.key.compared.load(Ordering::Relaxed);
                }
            }
            held
        };
        let before = held();
        let stop = AtomicBool::new(false);
        let probes = std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    table.rebuild_all();
                }
            });
            let probe = s.spawn(|| {
                let mut own = 0u64;
                for i in 0..lookups {
                    let key = counting(i % KEYS);
                    assert!(table.with_read(&key, |_| ()).is_some());
                    own += key.compared.load(Ordering::Relaxed);
                }
                own
            });
            let own = probe.join().unwrap();
            stop.store(true, Ordering::Relaxed);
            own
        });
        // Each comparison counted once in the probe key and once in the held key.
        assert_eq!(held() - before, probes);
    }

    /// Finding (d): a reader parked inside one table's lookup holds none of another table's
    /// memory (one domain per table).
    #[test]
    fn a_reader_parked_in_one_table_does_not_hold_another() {
        let parked: Table<u64, AtomicU64> = Table::with_shards(1);
        put(&parked, 1, 1);
        let churned: Table<u64, AtomicU64> = Table::with_shards(1);
        let (entered, release) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                parked.with_read(&1, |_| {
                    entered.wait();
                    release.wait();
                })
            });
            entered.wait();
            for round in 0..100u64 {
                for k in 0..20 {
                    put(&churned, round * 20 + k, 0);
                }
                churned.retain(|_| true);
            }
            let held = (churned.retired(), churned.unreclaimed());
            release.wait();
            assert_eq!(held, (0, 0));
        });
    }

    /// Finding (h): a pin nested inside another of the same table (a key's `Eq` looking up its
    /// own table, or a signal handler interrupting a lookup) does not end the outer one.
    #[test]
    fn a_nested_lookup_leaves_the_outer_one_protected() {
        let table: Table<u64, AtomicU64> = Table::with_shards(1);
        put(&table, 1, 1);
        put(&table, 2, 2);
        let (entered, release) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                table.with_read(&1, |outer| {
                    assert_eq!(table.with_read(&2, read), Some(Ok(2)));
                    entered.wait();
                    release.wait();
                    read(outer)
                })
            });
            entered.wait();
            assert_eq!(table.retain(|w| crate::cas::mark_gone(w, 1)), 1);
            let held = table.unreclaimed();
            release.wait();
            assert_eq!(held, 1, "the nested lookup's end let the outer's entry go");
        });
        assert_eq!(table.retired(), 0);
    }

    /// Finding (j): a key and its borrowed form hash alike (one generic path), so a lookup by
    /// the borrowed form finds the key. (With ahash's `hash_one`, a nightly compiler's
    /// specialization made `u64` and a newtype around it hash differently.)
    #[test]
    fn a_key_and_its_borrowed_form_hash_alike() {
        #[derive(PartialEq, Eq, Hash)]
        struct UserId(u64);
        impl Borrow<u64> for UserId {
            fn borrow(&self) -> &u64 {
                &self.0
            }
        }
        let table: Table<UserId, AtomicU64> = Table::with_shards(4);
        for id in 0..1_000 {
            put(&table, UserId(id), id);
        }
        for id in 0..1_000u64 {
            assert_eq!(table.with_read(&id, read), Some(Ok(id)));
        }
        let strings: Table<String, AtomicU64> = Table::with_shards(4);
        put(&strings, "alice".to_string(), 1);
        assert_eq!(strings.with_read("alice", read), Some(Ok(1)));
    }

    /// Finding (k): a large key is never built on the stack by the table (entries are boxed
    /// from the key the caller passed, and tables hold pointers), and a key's `Drop` runs with no
    /// lock held, so a key whose drop uses the same table does not deadlock.
    #[test]
    fn a_key_dropped_by_the_table_may_use_it() {
        struct Reentrant(u64);
        static TABLE: std::sync::OnceLock<&'static Table<Reentrant, AtomicU64>> =
            std::sync::OnceLock::new();
        impl PartialEq for Reentrant {
            fn eq(&self, other: &Self) -> bool {
                self.0 == other.0
            }
        }
        impl Eq for Reentrant {}
        impl Hash for Reentrant {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                self.0.hash(h)
            }
        }
        impl Borrow<u64> for Reentrant {
            fn borrow(&self) -> &u64 {
                &self.0
            }
        }
        impl Drop for Reentrant {
            fn drop(&mut self) {
                if let Some(table) = TABLE.get() {
                    // A lookup and a write, from inside a drop the table runs.
                    let _ = table.with_read(&0u64, |_| ());
                    if self.0 < 1_000 {
                        put(table, Reentrant(self.0 + 1_000), 1_000);
                    }
                }
            }
        }
        // Reachable from a static for the rest of the process (leak checkers see it held).
        let table = TABLE.get_or_init(|| Box::leak(Box::new(Table::with_shards(1))));
        for id in 0..20 {
            put(table, Reentrant(id), id);
        }
        // The duplicate key is dropped after the lock; removed keys when they are freed.
        table.with_entry(Reentrant(3), |_| (None, ()));
        assert!(table.with_read(&1_003, |_| ()).is_some());
        assert_eq!(table.retain(|w| w.load(Ordering::Relaxed) < 5), 5);
        table.reclaim_now();
        for id in 1_000..1_005 {
            assert!(table.with_read(&id, |_| ()).is_some(), "{id}");
        }
        // Big keys: 1 MiB each, boxed straight from the caller's value.
        let big: Table<Box<[u8; 1 << 20]>, AtomicU64> = Table::with_shards(1);
        for i in 0..20u8 {
            let mut key = vec![0u8; 1 << 20].into_boxed_slice();
            key[0] = i;
            let key: Box<[u8; 1 << 20]> = key.try_into().unwrap();
            put(&big, key, u64::from(i));
        }
        assert_eq!(big.len(), 20);
    }
}
