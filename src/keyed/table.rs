//! The keyed limiter's own concurrent table: lookups of known keys take no lock and write nothing
//! shared (entering the epoch writes only the calling thread's own slot); inserts, replacements,
//! eviction and growth take the key's shard lock.
//!
//! # Layout
//!
//! A fixed number of shards (chosen by the hash's top bits), each an open-addressing table with
//! linear probing: one control byte per slot and the entries `(K, V)` inline, in one allocation
//! of groups (16 control bytes, then their 16 entries), so a key costs `size_of::<(K, V)>() + 1`
//! bytes per slot at a load of at most 7/8, as in a `hashbrown` table. A control byte is [`EMPTY`], [`TOMB`] (the entry was removed: its key and
//! state stay in place, unread by new lookups, until the table is retired), [`MOVED`] (the entry
//! was relocated into the shard's next table) or `0x80 | tag` (a live entry; `tag` is seven bits
//! of the hash). A slot once used is never reused in the same table: an entry's key and state do
//! not change while any reader may hold them.
//!
//! # Why readers need no lock
//!
//! - **Memory.** A reader enters the epoch ([`super::epoch`]) for the length of its lookup and
//!   decision: on Linux a plain store to its own slot, with no hardware barrier. A table is freed
//!   only after every reader that may have seen it has left, so a reader's references stay valid
//!   even if its entry is removed or relocated meanwhile.
//! - **Removal.** Eviction marks the state gone (the algorithms' own compare-and-swap, see the
//!   [module docs](super)) and then the slot [`TOMB`]; a reader holding the entry sees the mark and
//!   takes the new-key path, which is exact under the shard lock.
//! - **Growth.** The shard lock's holder builds a new table and relocates each live entry: the slot
//!   becomes [`MOVED`] first, then [`Relocate::relocate`] takes the state out, leaving the removed
//!   mark behind for a one-word state (so an admission on the old copy either took effect before
//!   the move and travels with it, or fails on the mark), or sharing the log's block (all its
//!   words live there, so both copies are one log). The key moves bitwise. A reader that finds a
//!   [`MOVED`] slot, or a gone state in a slot no longer live, looks again under the shard lock,
//!   where it finds the current table whole: it never answers "absent" or "forgotten" for a key
//!   that was only moved.
//!
//! `Hash` and `Eq` must be deterministic, as for any hash map. A panic in them leaves every shard
//! usable (the lock's poison is ignored, and each step is published by one store), except a panic
//! while a growth re-hashes a key it hashed before: the shard's entries moved so far are then lost,
//! and their keys start fresh.

use std::borrow::Borrow;
use std::hash::Hash;
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use super::store::Slot;
use crate::algorithm::sealed::Relocate;
use crate::cas::Gone;
use crate::sync::{lock, AtomicPtr, AtomicU8, Mutex, Ordering, UnsafeCell};

/// A slot never used in this table: a probe stops here.
const EMPTY: u8 = 0;
/// A removed entry: probes pass over it.
const TOMB: u8 = 1;
/// An entry relocated into the shard's next table: the reader looks again under the lock.
const MOVED: u8 = 2;
/// The bit every live slot's control byte has.
const LIVE: u8 = 0x80;
/// The smallest table.
const MIN_CAPACITY: usize = 16;

/// Enters the epoch (`super::epoch`): tables retired after this are not freed until the pin
/// drops. `None` when this thread can no longer enter (its thread-locals are being destroyed): the
/// lookup then runs under the shard lock. (Loom cannot model the epoch's process-wide state;
/// under loom, retired tables are kept until the table drops, which is what a pin that never ends
/// would allow, so the table's models check everything but the freeing, and the epoch has models
/// of its own.)
#[cfg(not(tollgate_loom))]
#[inline]
fn pin() -> Option<super::epoch::global::Pin> {
    super::epoch::global::pin()
}

/// Loom's stand-in for a pin (see [`pin`]).
#[cfg(tollgate_loom)]
struct NoPin;

#[cfg(tollgate_loom)]
#[inline]
fn pin() -> Option<NoPin> {
    Some(NoPin)
}

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

/// One slot's entry: uninitialized until its control byte first leaves [`EMPTY`].
type Entry<K, V> = UnsafeCell<MaybeUninit<(K, V)>>;

/// Slots per group.
const GROUP: usize = 16;

/// Sixteen slots: their control bytes, then their entries. A table is one allocation of groups,
/// so that each control byte sits near its entry (a probe's two reads are on neighbouring cache
/// lines) and a growing table frees one block, not two.
struct Group<K, V> {
    ctrl: [AtomicU8; GROUP],
    entries: [Entry<K, V>; GROUP],
}

/// One shard's table. Its control bytes are atomics; its entries are written once, by the shard
/// lock's holder, before their control byte publishes them (Release), and read only after it
/// (Acquire).
struct Raw<K, V> {
    mask: usize,
    groups: Box<[Group<K, V>]>,
}

/// Where a probe for a key ended.
enum Found {
    /// The key's live slot.
    Live(usize),
    /// An empty slot: the key is not in this table.
    Absent,
    /// A relocated slot: this table is being replaced.
    Moved,
}

impl<K, V> Raw<K, V> {
    fn new(capacity: usize) -> Box<Raw<K, V>> {
        debug_assert!(capacity.is_power_of_two() && capacity >= MIN_CAPACITY);
        Box::new(Raw {
            mask: capacity - 1,
            groups: (0..capacity / GROUP)
                .map(|_| Group {
                    ctrl: std::array::from_fn(|_| AtomicU8::new(EMPTY)),
                    entries: std::array::from_fn(|_| UnsafeCell::new(MaybeUninit::uninit())),
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
        // every keyed check, and the check was a tenth of its instructions.)
        unsafe { self.groups.get_unchecked(i / GROUP) }
    }

    /// Slot `i`'s control byte.
    #[inline]
    fn ctrl(&self, i: usize) -> &AtomicU8 {
        &self.group(i).ctrl[i % GROUP]
    }

    /// Slot `i`'s entry cell.
    #[inline]
    fn cell(&self, i: usize) -> &Entry<K, V> {
        &self.group(i).entries[i % GROUP]
    }

    fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// The entry in slot `i`.
    ///
    /// # Safety
    ///
    /// Slot `i`'s control byte was read not [`EMPTY`] (with Acquire, or by the writer), and the
    /// caller holds a pin or the shard lock, so the table is not freed meanwhile.
    #[inline]
    unsafe fn entry(&self, i: usize) -> &(K, V) {
        // SAFETY: written before its control byte was published, never written again while the
        // table lives (the caller's contract).
        self.cell(i)
            .with(|entry| unsafe { (*entry).assume_init_ref() })
    }

    /// Probes for `key` from its home slot. Terminates: a table is rebuilt before its last
    /// empty slot is used.
    #[inline]
    fn find<Q>(&self, hash: u64, key: &Q) -> Found
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let tag = tag(hash);
        let mut i = hash as usize & self.mask;
        loop {
            // Acquire: an entry published live is read as its writer wrote it.
            match self.ctrl(i).load(Ordering::Acquire) {
                EMPTY => return Found::Absent,
                MOVED => return Found::Moved,
                // SAFETY: a live control byte, read with Acquire; the caller holds a pin or lock.
                c if c == tag && unsafe { self.entry(i) }.0.borrow() == key => {
                    return Found::Live(i)
                }
                _ => i = (i + 1) & self.mask,
            }
        }
    }

    /// Writes a new entry into the first empty slot of its probe sequence and publishes it.
    /// Only the shard lock's holder (or a builder not yet sharing the table) calls it, with a
    /// slot to spare.
    fn put(&self, hash: u64, key: K, value: V) {
        let mut i = hash as usize & self.mask;
        // Relaxed: only the writer stores control bytes, and it reads its own stores.
        while self.ctrl(i).load(Ordering::Relaxed) != EMPTY {
            i = (i + 1) & self.mask;
        }
        // SAFETY: an empty slot is read by no one (probes stop at it and never read its entry).
        self.cell(i)
            .with_mut(|entry| unsafe { (*entry).write((key, value)) });
        // Release: a reader that sees the slot live sees the entry written above.
        self.ctrl(i).store(tag(hash), Ordering::Release);
    }
}

impl<K, V> Drop for Raw<K, V> {
    fn drop(&mut self) {
        if !std::mem::needs_drop::<(K, V)>() {
            return;
        }
        let slots = self
            .groups
            .iter()
            .flat_map(|g| g.ctrl.iter().zip(g.entries.iter()));
        for (c, slot) in slots {
            // Relaxed: `&mut self`, no other thread is left.
            let c = c.load(Ordering::Relaxed);
            // Live and removed entries are owned here; a moved one's key belongs to the next
            // table, and its state (the old place) is dropped here.
            if c == TOMB || c & LIVE != 0 {
                // SAFETY: initialized (not EMPTY), and dropped once, here, with no reader left.
                slot.with_mut(|entry| unsafe { (*entry).assume_init_drop() });
            } else if c == MOVED {
                // SAFETY: as above, for the state only (the key was moved out bitwise).
                slot.with_mut(|entry| unsafe {
                    std::ptr::drop_in_place(&mut (*entry).assume_init_mut().1)
                });
            }
        }
    }
}

/// A replaced table's pointer (owned: freed once no reader that may have seen it is left), and
/// the epoch it was retired at.
struct RawPtr<K, V>(
    *mut Raw<K, V>,
    #[cfg_attr(tollgate_loom, allow(dead_code))] u64,
);

/// The tables replaced and not yet freed.
struct Reclaim<K, V> {
    pending: Vec<RawPtr<K, V>>,
    /// Calls of [`Table::free_retired`] since the last look at the horizon: it is looked at every
    /// [`RECLAIM_EVERY`] calls (a heavy barrier is a system call), and at every sweep and shrink.
    calls: u32,
}

/// How often an insert looks whether replaced tables can be freed.
const RECLAIM_EVERY: u32 = 8;

impl<K, V> Reclaim<K, V> {
    /// Frees the replaced tables no reader can still hold. (Under loom, none: they are freed with
    /// the table.)
    fn advance(&mut self) {
        #[cfg(not(tollgate_loom))]
        {
            if self.pending.is_empty() {
                return;
            }
            let horizon = super::epoch::global::DOMAIN.horizon();
            self.pending.retain(|raw| {
                if raw.1 >= horizon {
                    return true;
                }
                // SAFETY: retired (no longer any shard's current table) at epoch `raw.1`, and
                // every reader now in entered later, so it read the table unlinked: no reader
                // holds it; owned since `Box::into_raw`.
                drop(unsafe { Box::from_raw(raw.0) });
                false
            });
        }
    }
}

impl<K, V> Drop for Reclaim<K, V> {
    fn drop(&mut self) {
        for raw in self.pending.drain(..) {
            // SAFETY: dropped with the table (`&mut`): no reader is left; owned once.
            drop(unsafe { Box::from_raw(raw.0) });
        }
    }
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
        // before the borrow of `_held` ends.
        unsafe { &*self.raw.load(Ordering::Relaxed) }
    }
}

/// The table: see the module docs.
pub(crate) struct Table<K, V> {
    shards: Box<[CachePadded<Shard<K, V>>]>,
    /// `64 - log2(shards)`: the shard is the hash's top bits.
    shift: u32,
    hasher: ahash::RandomState,
    /// Replaced tables not yet freed (locked after a shard's lock, never before).
    reclaim: Mutex<Reclaim<K, V>>,
    /// Whether `reclaim` holds any table: writers look at it before locking it.
    reclaiming: crate::sync::AtomicBool,
    /// Lookups that looked again under the lock (tests see the races they provoke happen).
    #[cfg(any(test, tollgate_loom, fuzzing))]
    relooks: crate::sync::AtomicU64,
}

// SAFETY: the table owns its keys and states (sent with it) and shares them between threads only
// as `&K` and `&V` (hence `Sync` for both); its raw pointers are owned tables.
unsafe impl<K: Send + Sync, V: Send + Sync> Send for Table<K, V> {}
// SAFETY: as above; every write to shared memory is an atomic or happens under the shard lock
// before a Release publication.
unsafe impl<K: Send + Sync, V: Send + Sync> Sync for Table<K, V> {}

impl<K: Hash + Eq, V: Relocate> Table<K, V> {
    /// A table with four shards per core, and at least 8: DashMap's count, so that tables of a
    /// given number of keys round up to the same sizes (shards spread the locks of new keys and
    /// bound how many entries one growth relocates; lookups never wait for either).
    #[cfg_attr(tollgate_loom, allow(dead_code))] // under loom the store is the stand-in map
    pub(crate) fn new() -> Table<K, V> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Table::with_shards(cores.saturating_mul(4).max(8))
    }

    /// A table with `shards` shards (rounded up to a power of two).
    pub(crate) fn with_shards(shards: usize) -> Table<K, V> {
        let shards = shards.max(1).next_power_of_two();
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
            reclaim: Mutex::new(Reclaim {
                pending: Vec::new(),
                calls: 0,
            }),
            reclaiming: crate::sync::AtomicBool::new(false),
            #[cfg(any(test, tollgate_loom, fuzzing))]
            relooks: crate::sync::AtomicU64::new(0),
        }
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, V> {
        // `checked_shr`: one shard (shift 64) is shard 0.
        &self.shards[hash.checked_shr(self.shift).unwrap_or(0) as usize]
    }

    /// Runs `f` on `key`'s state, or answers `None` if the key is not held. Without a lock: `f`
    /// runs inside the epoch. If `f` finds the state gone and the slot is no longer live (the
    /// entry was relocated or replaced meanwhile), or the probe meets a relocation, the lookup
    /// and `f` run again under the shard lock, on the current table.
    #[inline]
    pub(crate) fn with_read<Q, R>(
        &self,
        key: &Q,
        f: impl Fn(&V) -> Result<R, Gone>,
    ) -> Option<Result<R, Gone>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash);
        if let Some(_pin) = pin() {
            // Acquire: the table as its builder initialized it. The pin keeps it alive.
            // SAFETY: a current table is freed only after a retirement and every pin before it.
            let raw = unsafe { &*shard.raw.load(Ordering::Acquire) };
            match raw.find(hash, key) {
                Found::Absent => return None,
                Found::Moved => {}
                Found::Live(i) => {
                    // SAFETY: found live, under the pin.
                    let (_, state) = unsafe { raw.entry(i) };
                    match f(state) {
                        // Acquire (after the fence of `Gone::seen`): a relocation or replacement
                        // changed the control byte before it marked the state.
                        Err(Gone) if raw.ctrl(i).load(Ordering::Acquire) != tag(hash) => {}
                        answer => return Some(answer),
                    }
                }
            }
        }
        self.with_locked(shard, hash, key, f)
    }

    /// The lookup again, under the shard lock: the current table holds no relocated slot, and no
    /// state marked gone that is still live (eviction marks and removes under the lock).
    #[cold]
    fn with_locked<Q, R>(
        &self,
        shard: &Shard<K, V>,
        hash: u64,
        key: &Q,
        f: impl Fn(&V) -> Result<R, Gone>,
    ) -> Option<Result<R, Gone>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let writer = lock(&shard.writer);
        // Relaxed: a count the tests read after joining.
        #[cfg(any(test, tollgate_loom, fuzzing))]
        self.relooks.fetch_add(1, Ordering::Relaxed);
        let raw = shard.current(&writer);
        match raw.find(hash, key) {
            // SAFETY: found live, under the lock.
            Found::Live(i) => Some(f(&unsafe { raw.entry(i) }.1)),
            _ => None,
        }
    }

    /// Runs `f` under `key`'s shard lock on the key's entry, if any; if `f` answers a state, it is
    /// inserted for a vacant key, or replaces the occupied one's (the old entry is removed and the
    /// new one inserted, still under the lock).
    pub(crate) fn with_entry<R>(
        &self,
        key: K,
        f: impl FnOnce(Slot<'_, K, V>) -> (Option<V>, R),
    ) -> R {
        let hash = self.hasher.hash_one(&key);
        let shard = self.shard(hash);
        let mut writer = lock(&shard.writer);
        let raw = shard.current(&writer);
        let (state, answer) = match raw.find(hash, &key) {
            Found::Live(i) => {
                // SAFETY: found live, under the lock.
                let (held, state) = unsafe { raw.entry(i) };
                let (replacement, answer) = f(Slot::Occupied(held, state));
                if replacement.is_some() {
                    // Release: a reader that sees the slot removed and looks again under the
                    // lock finds the replacement.
                    raw.ctrl(i).store(TOMB, Ordering::Release);
                    writer.live -= 1;
                }
                (replacement, answer)
            }
            _ => f(Slot::Vacant(&key)),
        };
        if let Some(state) = state {
            self.insert(shard, &mut writer, hash, key, state);
        }
        answer
    }

    /// Inserts a key known to be absent, rebuilding the table first if it has no slot to spare.
    fn insert(&self, shard: &Shard<K, V>, writer: &mut Writer, hash: u64, key: K, state: V) {
        self.free_retired();
        let capacity = shard.current(writer).capacity();
        if writer.used + 1 > max_used(capacity) {
            // Half full of live entries or more: grow; otherwise clear the removed ones.
            let live = writer.live + 1;
            let capacity = if live <= max_used(capacity) / 2 {
                capacity
            } else {
                capacity_for(live.max(max_used(capacity) + 1))
            };
            self.rebuild(shard, writer, capacity);
        }
        shard.current(writer).put(hash, key, state);
        writer.used += 1;
        writer.live += 1;
    }

    /// Replaces the shard's table by one of `capacity` holding its live entries, and retires
    /// the old one. Under the shard lock.
    fn rebuild(&self, shard: &Shard<K, V>, writer: &mut Writer, capacity: usize) {
        debug_assert!(max_used(capacity) >= writer.live);
        let new = Raw::new(capacity);
        let old_ptr = shard.raw.load(Ordering::Relaxed);
        // SAFETY: the lock is held.
        let old = unsafe { &*old_ptr };
        for i in 0..old.capacity() {
            if old.ctrl(i).load(Ordering::Relaxed) & LIVE == 0 {
                continue;
            }
            // Before the state is taken out: `relocate`'s mark (Release) orders this store before
            // it, so a reader that sees the mark sees the slot moved and looks again.
            old.ctrl(i).store(MOVED, Ordering::Relaxed);
            // SAFETY: a live slot, under the lock. The key is moved out once: the old table's
            // drop skips a moved slot's key, and no reader compares it (a probe stops at MOVED).
            let (key, state) = unsafe {
                let entry = old.entry(i);
                (std::ptr::read(&entry.0), entry.1.relocate())
            };
            new.put(self.hasher.hash_one(&key), key, state);
        }
        // Release: a reader that loads the new table sees its entries.
        shard.raw.store(Box::into_raw(new), Ordering::Release);
        writer.used = writer.live;
        self.retire(old_ptr);
    }

    /// Hands `raw` to the reclaimer: it is freed once every pin that may still read it has ended.
    fn retire(&self, raw: *mut Raw<K, V>) {
        // After the unlinking (the caller stored the new table): readers that enter at the epoch
        // this moves to see it unlinked.
        #[cfg(not(tollgate_loom))]
        let epoch = super::epoch::global::DOMAIN.retire();
        #[cfg(tollgate_loom)]
        let epoch = 0;
        let mut reclaim = lock(&self.reclaim);
        reclaim.pending.push(RawPtr(raw, epoch));
        // At once: with no lookup in flight (one thread inserting, say), the old table is freed
        // as a growing `HashMap` frees it, and the allocator can reuse its memory for the next.
        self.settle(&mut reclaim);
    }

    /// Frees what no reader can still hold, and says whether anything is left to free.
    fn settle(&self, reclaim: &mut Reclaim<K, V>) {
        reclaim.advance();
        // Relaxed: a hint; the reclaimer's own lock orders the list.
        self.reclaiming
            .store(!reclaim.pending.is_empty(), Ordering::Relaxed);
    }

    /// Frees the replaced tables whose grace period is over, if there are any.
    fn free_retired(&self) {
        // Relaxed: a hint (a table retired meanwhile is freed at a later call, or with the table).
        if !self.reclaiming.load(Ordering::Relaxed) {
            return;
        }
        let mut reclaim = lock(&self.reclaim);
        reclaim.calls = reclaim.calls.wrapping_add(1);
        if reclaim.calls.is_multiple_of(RECLAIM_EVERY) {
            self.settle(&mut reclaim);
        }
    }

    /// Frees the replaced tables no reader can still hold, now.
    fn reclaim_now(&self) {
        // Relaxed: as in `free_retired`.
        if self.reclaiming.load(Ordering::Relaxed) {
            self.settle(&mut lock(&self.reclaim));
        }
    }

    /// Removes every entry whose state `evict` marks gone (marking and removing under the
    /// shard lock, one shard at a time), and answers how many it removed.
    pub(crate) fn retain(&self, mut evict: impl FnMut(&V) -> bool) -> usize {
        self.reclaim_now();
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut writer = lock(&shard.writer);
            let raw = shard.current(&writer);
            for i in 0..raw.capacity() {
                if raw.ctrl(i).load(Ordering::Relaxed) & LIVE == 0 {
                    continue;
                }
                // SAFETY: a live slot, under the lock.
                if evict(&unsafe { raw.entry(i) }.1) {
                    // Release: after the mark `evict` wrote, as in `with_entry`.
                    raw.ctrl(i).store(TOMB, Ordering::Release);
                    writer.live -= 1;
                    removed += 1;
                }
            }
        }
        removed
    }

    /// Rebuilds every shard whose table is larger than its live entries need, or holds removed
    /// ones, at the smallest capacity that holds them.
    #[cfg_attr(tollgate_loom, allow(dead_code))]
    pub(crate) fn shrink_to_fit(&self) {
        self.reclaim_now();
        for shard in self.shards.iter() {
            let mut writer = lock(&shard.writer);
            let capacity = shard.current(&writer).capacity();
            let fit = capacity_for(writer.live + 1);
            if fit < capacity || writer.used > writer.live {
                self.rebuild(shard, &mut writer, fit);
            }
        }
    }

    /// Rebuilds every shard at its current capacity, relocating every entry.
    #[cfg(any(test, tollgate_loom, fuzzing))]
    pub(crate) fn rebuild_all(&self) {
        for shard in self.shards.iter() {
            let mut writer = lock(&shard.writer);
            let capacity = shard.current(&writer).capacity();
            self.rebuild(shard, &mut writer, capacity);
        }
    }

    /// Replaced tables not yet freed (after trying to free them).
    #[cfg(test)]
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
        for shard in self.shards.iter() {
            // Relaxed: `&mut self`, no other thread is left.
            // SAFETY: no reader or writer is left; each table is owned once.
            drop(unsafe { Box::from_raw(shard.raw.load(Ordering::Relaxed)) });
        }
        // The replaced tables go with `reclaim` (its drop): no reader is left to hold them.
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
    /// Runs `f` on `key`'s word without a lock (see [`Table::with_read`]; `f` may run twice).
    #[inline]
    pub fn read<Q, R>(&self, key: &Q, f: impl Fn(&crate::sync::AtomicU64) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0
            .with_read(key, |word| Ok(f(word)))
            .map(|answer| answer.unwrap_or_else(|Gone| unreachable!("`f` answers no Gone")))
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
        self.0.retain(evict)
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
/// and the fuzz target (`fuzz/fuzz_targets/table_ops.rs`) of the table's protocol.
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
    pub fn bump(&self, key: u64) -> Option<Result<u64, Gone>> {
        self.0.with_read(&key, |word| {
            crate::cas::update_live(word, |w| crate::cas::Step::<u64, ()>::Write(w + 1, w + 1))
                .map(|r| r.unwrap_or(0))
        })
    }

    /// `key`'s word, as a peek would read it.
    pub fn read(&self, key: u64) -> Option<Result<u64, Gone>> {
        self.0.with_read(&key, |word| match crate::cas::read(word) {
            crate::cas::GONE => Err(Gone::seen()),
            w => Ok(w),
        })
    }

    /// How many lookups looked again under the lock.
    pub fn relooks(&self) -> u64 {
        // Relaxed: read after the threads are joined.
        self.0.relooks.load(Ordering::Relaxed)
    }

    /// Relocates every entry into a new table of the same size.
    pub fn rebuild(&self) {
        self.0.rebuild_all();
    }

    /// Keys held.
    #[cfg(fuzzing)]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no key is held.
    #[cfg(fuzzing)]
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// Shrinks every shard to what its keys need (clearing removed entries).
    #[cfg(fuzzing)]
    pub fn shrink(&self) {
        self.0.shrink_to_fit();
    }

    /// Marks gone and removes every entry whose word is `word`, as eviction does; answers how
    /// many it removed.
    pub fn forget(&self, word: u64) -> usize {
        self.0.retain(|state| crate::cas::mark_gone(state, word))
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
    use crate::cas::GONE;
    use crate::sync::{AtomicBool, AtomicU64, Ordering};
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicIsize;
    use std::sync::Arc;

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

    #[derive(Debug, Clone)]
    enum Op {
        /// Insert the key with this value, or replace its state with it.
        Put(u16, u64),
        /// Add one to the key's value, if held.
        Bump(u16),
        /// Remove every key whose value is `v % m == 0`.
        Retain(u64),
        Shrink,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u16..300, 0u64..1000).prop_map(|(k, v)| Op::Put(k, v)),
            4 => (0u16..300).prop_map(Op::Bump),
            1 => (2u64..5).prop_map(Op::Retain),
            1 => Just(Op::Shrink),
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
                        let before = model.len();
                        model.retain(|_, v| *v % m != 0);
                        prop_assert_eq!(removed, before - model.len());
                    }
                    Op::Shrink => table.shrink_to_fit(),
                }
                prop_assert_eq!(table.len(), model.len());
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
            table.with_entry(k, |_| (Some(AtomicU64::new(k)), ()));
        }
        assert_eq!(table.capacity(), 16);
        table.with_entry(14, |_| (Some(AtomicU64::new(14)), ()));
        assert_eq!(table.capacity(), 32);
        for k in 15..10_000u64 {
            table.with_entry(k, |_| (Some(AtomicU64::new(k)), ()));
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

    /// A replaced table is not freed while a reader that entered before it was replaced is still
    /// in, and is freed once that reader has left.
    #[test]
    fn a_replaced_table_waits_for_the_readers_that_may_hold_it() {
        let table: Table<u64, AtomicU64> = Table::with_shards(1);
        table.with_entry(1, |_| (Some(AtomicU64::new(5)), ()));
        let (entered, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                // Holds a pin across the rebuild, as a lookup in progress would. The word it
                // holds is then gone (relocated), so it looks again under the lock: a second
                // call, which does not wait.
                let first = AtomicBool::new(true);
                let seen = table.with_read(&1, |word| {
                    if first.swap(false, Ordering::Relaxed) {
                        entered.wait();
                        release.wait();
                    }
                    read(word)
                });
                assert_eq!(seen, Some(Ok(5)));
            });
            entered.wait();
            table.rebuild_all();
            let under_the_reader = table.retired();
            // A reader entering now sees the new table and does not hold the old one up.
            let later = table.with_read(&1, read);
            let after_it = table.retired();
            // Released before asserting, so that a failure fails rather than hangs.
            release.wait();
            assert_eq!(under_the_reader, 1, "freed under a reader");
            assert_eq!(later, Some(Ok(5)));
            assert_eq!(after_it, 1);
        });
        assert_eq!(table.retired(), 0);
    }

    /// A table full of removed entries is rebuilt at the same size, not grown: a key space
    /// sprayed through a bounded map keeps the map's size.
    #[test]
    fn removed_entries_are_cleared_without_growing() {
        let table: Table<u64, AtomicU64> = Table::with_shards(1);
        for round in 0..100u64 {
            for k in 0..8 {
                let key = round * 8 + k;
                table.with_entry(key, |_| (Some(AtomicU64::new(key)), ()));
            }
            table.retain(|_| true);
        }
        assert_eq!(table.len(), 0);
        assert_eq!(table.capacity(), 16);
    }

    /// Threads add one to keys while others insert new keys and rebuild the tables: every
    /// addition is kept, however it raced a relocation (an addition to the old place either moved
    /// with the word or met the mark and was made again, under the lock, in the new table).
    #[test]
    fn no_write_is_lost_to_a_relocation() {
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
        // The workers run at least OPS additions each, and on until some lookup has met a
        // relocation (how soon depends on the scheduler: on a loaded machine the rebuilder may
        // not overlap the workers for a while), or a minute has passed.
        let enough = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let (table, enough) = (table.clone(), enough.clone());
                std::thread::spawn(move || {
                    let mut made = 0u64;
                    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ t;
                    while made < OPS || !enough.load(Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let k = x % KEYS;
                        match table.with_read(&k, bump) {
                            Some(Ok(_)) => {}
                            Some(Err(Gone)) => panic!("a relocated state read as gone"),
                            None => table.with_entry(k, |slot| match slot {
                                Slot::Occupied(_, state) => {
                                    bump(state).expect("live under the lock");
                                    (None, ())
                                }
                                Slot::Vacant(_) => (Some(AtomicU64::new(1)), ()),
                            }),
                        }
                        made += 1;
                    }
                    made
                })
            })
            .collect();
        let started = std::time::Instant::now();
        while table.relooks.load(Ordering::Relaxed) == 0
            && started.elapsed() < std::time::Duration::from_secs(60)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        enough.store(true, Ordering::Relaxed);
        let made: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        stop.store(true, Ordering::Relaxed);
        let rebuilds = rebuilder.join().unwrap();
        assert!(rebuilds > 0);
        // Some lookups met a relocation and looked again under the lock.
        assert!(table.relooks.load(Ordering::Relaxed) > 0);
        let kept: u64 = (0..KEYS)
            .filter_map(|k| table.with_read(&k, read))
            .map(|r| r.unwrap())
            .sum();
        assert_eq!(kept, made);
        // No reader is left: every replaced table is freed.
        assert_eq!(table.retired(), 0);
    }
}
