//! The keyed limiter's own concurrent table: lookups of known keys take no lock and write nothing
//! shared (entering the table's epoch writes only the calling thread's own slot); inserts,
//! replacements, eviction and growth take the key's shard lock.
//!
//! # Layout
//!
//! A fixed number of shards (chosen by the hash's top bits), each an open-addressing table with
//! linear probing in one allocation: its entries, each a key and its state stored in the slot
//! itself (no allocation per key, and one cache miss fewer per lookup than an entry behind a
//! pointer), then one control byte per slot, all together (as `std`'s `HashMap` keeps them).
//! The control bytes are a seventeenth of a table of `u64` keys and states and stay in the
//! cache, so a lookup of a known key misses on its entry's line alone; with the control bytes
//! beside each 16 entries (the layout until the fourteenth session) it missed on two lines,
//! which cost the check 11-22 % at two threads in a model of the two layouts (benches/README.md,
//! fourteenth session). A control byte is [`EMPTY`], [`TOMB`] (the entry was
//! removed) or `0x80 | tag` (a live entry; `tag` is seven bits of the hash). A slot once used is
//! not reused in the same table.
//!
//! **An entry never moves while a reader may hold it.** Growing or clearing a shard builds a new
//! table in two phases, under the shard lock:
//!
//! 1. *Keys.* Each live key is cloned and hashed into the new table, which no reader sees yet.
//!    This is the rebuild's only user code (`Clone` and `Hash`); if it panics, the new table is
//!    dropped (its clones with it, after the lock is released) and nothing else has changed.
//! 2. *States.* Each live state is [copied](Relocate) into the new table, which is then made
//!    reachable as the shard's `next`, and each original is sealed: a one-word state is swapped
//!    to the gone mark by a compare-and-swap (one that fails because a decision wrote meanwhile
//!    updates the copy and tries again), so that no decision can take effect in the old table
//!    any more; a state that lives on the heap (the sliding log's ring) is shared by both copies
//!    and needs no seal. Then the new table is published.
//!
//! A reader still on the old table keeps using the old copies, which live until every such
//! reader has left and are dropped then: its key is the old key (a write through `&K`, to a
//! `Mutex` or a memo in the key, lands on an object still alive and owned), and a decision it
//! makes on a sealed state takes effect nowhere and answers [`Gone`]. [`Table::with_read`] then
//! goes on in the new table, published or still `next`, where the copy was written before the
//! seal: without a lock, so that no lookup ever waits for a rebuild (a lookup from a signal
//! handler that interrupted the rebuild on its own thread included).
//!
//! # Why readers need no lock
//!
//! - **Memory.** A reader enters the table's epoch ([`crate::epoch`]) for the length of its
//!   lookup and decision: on Linux a plain store to its own slot, with no hardware barrier. A
//!   removed entry and a replaced table are *retired*, and dropped or freed only after every
//!   reader that may have seen them has left, so a reader's references stay valid whatever
//!   writers do meanwhile.
//! - **Removal.** Eviction marks the state gone (the algorithms' own compare-and-swap, see the
//!   [module docs](super)) and then the slot [`TOMB`]; a reader holding the entry sees the mark
//!   and takes the new-key path, which is exact under the shard lock.
//! - **Growth.** A reader on a replaced table sees each key that was live when the table was
//!   replaced, and either decides on its state before it was sealed (the copy carries the
//!   decision) or meets the seal and decides on the copy; a key inserted later is found under the
//!   lock, which the keyed limiter takes for any key a lookup does not find.
//!
//! # What user code runs where
//!
//! A key's `Hash` runs before any lock is taken, and, with `Clone`, under the shard lock when
//! a write rebuilds the shard (before the write decides anything); `Eq` runs in lookups (inside
//! the epoch, or under the shard lock on a write); `Drop` runs only after every lock is released:
//! a key not inserted is dropped as the call returns, a removed key (and a replaced table's copy
//! of a key) when the epoch lets it go (by the call that removed it or by a later write, a sweep,
//! a shrink or the table's drop, whichever first finds its readers gone). A panic in any of them
//! leaves the table whole: nothing is changed before the last call of user code on a write path,
//! and every key is dropped exactly once, the first panic being passed on after the rest are
//! dropped. A key whose `Eq`, `Hash` or `Clone` calls into the same limiter may deadlock on a
//! write (the shard lock is not reentrant), as a key whose `Eq` locks a mutex its caller holds
//! would; a key's `Drop` may call anything. A key whose hash changes while it is held (through
//! interior mutability) is a logic error, as for `std`'s `HashMap`: the table stays sound, but
//! the key may be found where it was and not where it now hashes, and a request for it may open
//! a second state.
//!
//! # Bounded memory with a parked reader
//!
//! The table counts the entries it has retired and not yet dropped ([`Table::unreclaimed`]); the
//! keyed limiter refuses room to new keys while that count is at its `max_keys`, so that a reader
//! parked forever inside a lookup (a key's `Eq` that blocks) holds at most `max_keys` removed
//! entries and the tables replaced while `max_keys` keys came and went (with their copies of
//! the keys then live), rather than every entry removed after it parked.
//!
//! # Safety
//!
//! The invariants the `unsafe` blocks keep:
//!
//! 1. A slot's entry is written once, by the shard lock's holder, before its control byte is
//!    published live (Release), and never written again (states change through their own
//!    atomics); it is read only after the control byte was read live (Acquire) or by the lock's
//!    holder. A rebuild writes the new table's keys and states before sharing it as `next`
//!    (Release); a reader reads them in a table it reached through the shard (Acquire). The
//!    memory of a slot that is not live is read by no reader (a probe stops at, or passes, its
//!    control byte): the rebuild that builds a table keeps its scratch indices there (`Origins`)
//!    and reads them back under the lock it holds throughout. The prefetch hint's address is
//!    never dereferenced.
//! 2. Each entry is dropped exactly once, and only after no reader can reach it: a removed entry
//!    (its slot made [`TOMB`], once, under the lock) in place when the epoch's horizon passes its
//!    retirement; the live entries of a replaced table (the old copies: the keys were cloned and
//!    the states relocated into the new table) when the horizon passes the table's retirement;
//!    the entries live in the current tables by the table's drop. A table being built that is
//!    abandoned holds keys without states, and only its keys are dropped.
//! 3. A current table is only replaced under its shard's lock, and the replaced one is retired
//!    after the new one is published. A table's memory has owners ([`Raw::release`]): the table
//!    itself, and each of its removed entries until that entry is dropped in place; it is freed
//!    with the last, so a removed entry never outlives the memory it sits in, whichever
//!    collection (possibly freed by another thread at the same time) reaches it first.
//! 4. A reader dereferences a table or entry only inside a pin of this table's domain (taken
//!    before it loaded the table pointer) or under the shard lock.
//! 5. A table's allocation is made by [`Raw::new`] with [`Raw::layout`] of its capacity (a power
//!    of two, never changed) and freed once, by `Raw`'s drop, with the same layout: `capacity`
//!    entries from its start, then `capacity` control bytes, all initialized by `new`. Every
//!    slot index used is masked by `capacity - 1`, so every entry and control byte reached lies
//!    inside it.

use std::borrow::Borrow;
use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hash, Hasher};
use std::mem::MaybeUninit;

use crossbeam_utils::CachePadded;

use super::store::Slot;
use crate::algorithm::sealed::Relocate;
use crate::cas::Gone;
use crate::epoch::Domain;
use crate::sync::{fence, lock, AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Mutex, Ordering};

/// A slot never used in this table: a probe stops here.
const EMPTY: u8 = 0;
/// A removed entry: probes pass over it.
const TOMB: u8 = 1;
/// The bit every live slot's control byte has.
const LIVE: u8 = 0x80;
/// The smallest table.
const MIN_CAPACITY: usize = 16;

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

impl Relocate for crate::sync::AtomicU64 {
    fn copy(&self) -> Self {
        // Relaxed: `seal` brings the copy up to date with the word it replaces.
        crate::sync::AtomicU64::new(self.load(Ordering::Relaxed))
    }

    fn take(&self) -> Self {
        crate::sync::AtomicU64::new(crate::cas::seal(self))
    }

    fn seal(&self, copy: &Self) {
        // Relaxed: only this thread has written the copy so far.
        let mut word = copy.load(Ordering::Relaxed);
        loop {
            // AcqRel on success: a reader that loads the mark (Acquire) sees the copy as written
            // before it, so a decision that meets the mark and goes on in the copy (`look_again`)
            // decides on the last word this state held. Acquire on failure: the word a decision
            // wrote meanwhile, copied before trying again.
            match self.compare_exchange(word, crate::cas::GONE, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(seen) => {
                    word = seen;
                    // Relaxed: published by the successful compare-and-swap.
                    copy.store(seen, Ordering::Relaxed);
                }
            }
        }
    }
}

/// One key and its state, in a slot of a table (Safety, 1 and 2).
struct Entry<K, V> {
    key: K,
    state: V,
    /// Under loom, a cell read by every reader of the entry and written when it is dropped, so
    /// that loom fails a model in which the two are not ordered (a use after free).
    #[cfg(tollgate_loom)]
    alive: crate::sync::UnsafeCell<()>,
}

/// A slot's entry, possibly uninitialized.
type Cell<K, V> = UnsafeCell<MaybeUninit<Entry<K, V>>>;

impl<K, V, P> Drop for Raw<K, V, P> {
    /// Drops the control bytes and frees the allocation; the entries were dropped, or moved
    /// out, before (Safety, 2).
    fn drop(&mut self) {
        let capacity = self.capacity();
        let ctrl = Self::ctrl_start(self.base.as_ptr(), capacity);
        // SAFETY: the control bytes were initialized by `new` and are dropped once, here (a
        // no-op but under loom); then the allocation `new` made with this layout is freed.
        unsafe {
            std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(ctrl, capacity));
            std::alloc::dealloc(self.base.as_ptr().cast(), Self::layout(capacity));
        }
    }
}

/// One shard's table of slots, in one allocation: `capacity` entries, then `capacity` control
/// bytes (as `std`'s `HashMap` lays its table out). The control bytes of a whole table sit
/// together, 1/17 of its bytes for a `u64` key and state: they stay in the cache while the
/// entries do not, so a lookup misses on the entry's line alone. Its entries are dropped
/// explicitly (Safety, 2): dropping a `Raw` drops its control bytes and frees its memory, and
/// drops no key or state.
struct Raw<K, V, P> {
    mask: usize,
    /// The allocation's start: the first entry (Safety, 5).
    base: std::ptr::NonNull<Cell<K, V>>,
    /// Owners of the table's memory: the table itself (current, then retired), and each removed
    /// entry of it not yet dropped. Whoever gives up the last frees it ([`Raw::release`]), so a
    /// removed entry is dropped in place even when the table it sits in was retired later and
    /// collected first (two threads may free two collections at once).
    owners: AtomicUsize,
    /// What every state in this table is read with (the keyed limiter's policy): written before
    /// the table is shared and never changed, so a reader reads a state and its context from
    /// the one table it reached. A quota change builds tables with a new context
    /// ([`Table::convert`]); a rebuild keeps the old one's.
    ctx: P,
}

impl<K, V, P> Raw<K, V, P> {
    /// The allocation of a table of `capacity` slots: the entries, then the control bytes from
    /// [`Raw::ctrl_at`].
    fn layout(capacity: usize) -> std::alloc::Layout {
        let entries = std::alloc::Layout::array::<Cell<K, V>>(capacity);
        let ctrl = std::alloc::Layout::array::<AtomicU8>(capacity);
        match entries.and_then(|e| e.extend(ctrl?)) {
            Ok((layout, ctrl_at)) => {
                debug_assert_eq!(ctrl_at, Self::ctrl_at(capacity));
                layout
            }
            // As `Vec` does when its buffer would not fit the address space.
            Err(_) => panic!("capacity overflow: a keyed table of {capacity} slots"),
        }
    }

    /// An empty table, built in place on the heap (no entry is ever built on the stack).
    fn new(capacity: usize, ctx: P) -> Box<Raw<K, V, P>> {
        debug_assert!(capacity.is_power_of_two() && capacity >= MIN_CAPACITY);
        let layout = Self::layout(capacity);
        // SAFETY: `layout` is not zero-sized: it holds `capacity` (at least 16) control bytes.
        let base = unsafe { std::alloc::alloc(layout) };
        let Some(base) = std::ptr::NonNull::new(base) else {
            std::alloc::handle_alloc_error(layout)
        };
        // SAFETY: the control bytes lie inside the allocation (`layout`), each written once
        // here; the entries may stay uninitialized (`MaybeUninit`).
        unsafe {
            let ctrl = Self::ctrl_start(base.as_ptr().cast(), capacity);
            for i in 0..capacity {
                ctrl.add(i).write(AtomicU8::new(EMPTY));
            }
        }
        Box::new(Raw {
            mask: capacity - 1,
            base: base.cast(),
            owners: AtomicUsize::new(1),
            ctx,
        })
    }

    /// Where the control bytes start: past `capacity` entries (Safety, 5), as [`Raw::layout`]
    /// places them (rounded up to a control byte's alignment, which is 1 but under loom).
    #[inline(always)]
    fn ctrl_at(capacity: usize) -> usize {
        (capacity * std::mem::size_of::<Cell<K, V>>())
            .next_multiple_of(std::mem::align_of::<AtomicU8>())
    }

    /// The first control byte of the table of `capacity` slots that starts at `base`: address
    /// arithmetic only (also for [`Table::prefetch`]'s hint, which may be a table behind).
    #[inline(always)]
    fn ctrl_start(base: *mut Cell<K, V>, capacity: usize) -> *mut AtomicU8 {
        base.cast::<u8>()
            .wrapping_add(Self::ctrl_at(capacity))
            .cast()
    }

    /// Slot `i`'s control byte; `i` is at most `mask` (every caller masks it).
    #[inline]
    fn ctrl(&self, i: usize) -> &AtomicU8 {
        debug_assert!(i <= self.mask);
        // SAFETY: `i <= mask`, so the byte lies inside the allocation, initialized by `new`
        // (Safety, 5). (Unchecked: the probe is the hot loop of every keyed check.)
        unsafe { &*Self::ctrl_start(self.base.as_ptr(), self.capacity()).add(i) }
    }

    /// Slot `i`'s entry, possibly uninitialized; `i` is at most `mask`.
    #[inline]
    fn slot(&self, i: usize) -> *mut Entry<K, V> {
        debug_assert!(i <= self.mask);
        // SAFETY: `i <= mask`: inside the allocation's entries (Safety, 5).
        unsafe { (*self.base.as_ptr().add(i)).get().cast() }
    }

    fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Slot `i`'s key (and, under loom, a read of the slot's cell).
    ///
    /// # Safety
    ///
    /// Slot `i`'s key was written: its control byte was read live with Acquire (or by the
    /// lock's holder, or by the table's builder), and the caller holds a pin taken before it
    /// loaded this table, or the shard lock. (A reference to the key alone: while a rebuild's
    /// first phase fills a new table, a slot's key is there before its state.)
    #[inline]
    unsafe fn key(&self, i: usize) -> &K {
        let entry = self.slot(i);
        #[cfg(tollgate_loom)]
        // SAFETY: written with the key (`put`, or the rebuild's first phase).
        unsafe { &*std::ptr::addr_of!((*entry).alive) }.with(|_| ());
        // SAFETY: written before the control byte's publication, which the caller's Acquire
        // load (or its lock) has seen, never written again, and not dropped while the caller's
        // pin or lock lasts (Safety, 1, 2 and 4).
        unsafe { &*std::ptr::addr_of!((*entry).key) }
    }

    /// Slot `i`'s state.
    ///
    /// # Safety
    ///
    /// As [`Raw::key`], and the state was written: the table was reached through the shard (as
    /// current or as `next`), or the caller holds the lock.
    #[inline]
    unsafe fn state(&self, i: usize) -> &V {
        // SAFETY: the caller's contract (Safety, 1, 2 and 4).
        unsafe { &*std::ptr::addr_of!((*self.slot(i)).state) }
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
                c if c == tag && unsafe { self.key(i) }.borrow() == key => return Some(i),
                _ => i = (i + 1) & self.mask,
            }
        }
    }

    /// The first empty slot of `hash`'s probe sequence.
    fn vacancy(&self, hash: u64) -> usize {
        let mut i = hash as usize & self.mask;
        // Relaxed: only the writer stores control bytes, and it reads its own stores.
        while self.ctrl(i).load(Ordering::Relaxed) != EMPTY {
            i = (i + 1) & self.mask;
        }
        i
    }

    /// Indices an empty slot's memory holds (`Origins`).
    const PER_EMPTY: usize = std::mem::size_of::<Entry<K, V>>() / std::mem::size_of::<usize>();

    /// Slot `i`'s state field, as a place for an index (`Origins`).
    fn stash(&self, i: usize) -> *mut usize {
        // SAFETY: in bounds of the slot (`slot`); no reference is made.
        unsafe { std::ptr::addr_of_mut!((*self.slot(i)).state) }.cast()
    }

    /// The empty slots' memory, as consecutive places for indices, in slot order (`Origins`).
    fn empties(&self) -> impl Iterator<Item = *mut usize> + '_ {
        (0..self.capacity())
            // Relaxed: the lock's holder reads its own stores.
            .filter(move |&i| self.ctrl(i).load(Ordering::Relaxed) == EMPTY)
            .flat_map(move |i| {
                let base = self.slot(i).cast::<usize>();
                // SAFETY: `PER_EMPTY` indices fit in one entry's memory.
                (0..Self::PER_EMPTY).map(move |k| unsafe { base.add(k) })
            })
    }

    /// Publishes an entry of `key` and `state` in the first empty slot of its probe sequence.
    /// Only the shard lock's holder calls it, with a slot to spare.
    fn put(&self, hash: u64, key: K, state: V) {
        let i = self.vacancy(hash);
        // SAFETY: an empty slot: no reader reads it before the Release store below (Safety, 1).
        unsafe {
            self.slot(i).write(Entry {
                key,
                state,
                #[cfg(tollgate_loom)]
                alive: crate::sync::UnsafeCell::new(()),
            });
        }
        // Release: a reader that sees the slot live sees the entry.
        self.ctrl(i).store(tag(hash), Ordering::Release);
    }

    /// The live slots, for the lock's holder, a builder or the table's drop.
    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        // Relaxed: the lock's holder reads its own (or its predecessors') stores.
        (0..self.capacity()).filter(move |&i| self.ctrl(i).load(Ordering::Relaxed) & LIVE != 0)
    }

    /// Counts a removed entry as an owner of the table's memory, until it is dropped. By the lock's
    /// holder, on the current table.
    fn own(&self) {
        // Relaxed: as `Arc::clone`; the table is alive (current, under the lock).
        self.owners.fetch_add(1, Ordering::Relaxed);
    }

    /// Gives up one ownership of `table`'s memory (its own, or a removed entry's, once dropped),
    /// freeing it with the last.
    ///
    /// # Safety
    ///
    /// `table` came from `Box::into_raw`, and the caller holds one ownership, given up here once.
    unsafe fn release(table: *mut Raw<K, V, P>) {
        // Release, then Acquire on the last: as `Arc`'s drop, so that every use of the table by
        // the other owners happens before it is freed.
        // SAFETY: the caller's ownership keeps it allocated until this decrement.
        if unsafe { &*table }.owners.fetch_sub(1, Ordering::Release) == 1 {
            fence(Ordering::Acquire);
            // SAFETY: the last owner; from `Box::into_raw`.
            drop(unsafe { Box::from_raw(table) });
        }
    }

    /// Drops the entry of slot `i` in place, or its key alone.
    ///
    /// # Safety
    ///
    /// The slot holds an entry (its state too, if `state`), which no reader or writer can reach
    /// any more and which is dropped only here, once (Safety, 2).
    unsafe fn drop_entry(&self, i: usize, state: bool) {
        let entry = self.slot(i);
        #[cfg(tollgate_loom)]
        // SAFETY: the caller's contract.
        unsafe { &*entry }.alive.with_mut(|_| ());
        // SAFETY: the caller's contract.
        unsafe {
            if state {
                std::ptr::drop_in_place(entry);
            } else {
                std::ptr::drop_in_place(std::ptr::addr_of_mut!((*entry).key));
                #[cfg(tollgate_loom)]
                std::ptr::drop_in_place(std::ptr::addr_of_mut!((*entry).alive));
            }
        }
    }
}

/// Where a rebuild keeps, between its two phases, the old slot of each key it placed, so that it
/// allocates nothing but the new table (a temporary the size of a shard's keys, freed at once,
/// moves glibc's allocator to keep freed memory resident: measured, 1 to 2 bytes a key).
///
/// During the first phase each placed slot's state field holds its original's index (when a
/// state has room for a `usize`). After it, those indices are laid out, in the order of the new
/// table's live slots, over the memory of its empty slots, which no reader ever reads: a growth
/// or a clearing leaves more than half the slots empty, room enough. A rebuild that leaves too
/// few (`shrink_to_fit` at a tight fit), or states too small to hold an index, keeps the pairs
/// on the heap instead.
enum Origins {
    /// In the new table's empty slots, the `k`-th index for its `k`-th live slot.
    Empties,
    /// `(old, new)` slot pairs.
    Heap(Vec<(usize, usize)>),
}

impl Origins {
    /// Whether a state field of `V` has room for an index (size and alignment).
    const fn stashes<V>() -> bool {
        std::mem::size_of::<V>() >= std::mem::size_of::<usize>()
            && std::mem::align_of::<V>() >= std::mem::align_of::<usize>()
    }

    /// The second phase's first pass: writes into each live slot of `table` (which holds `live`
    /// keys, and is not yet shared) the copy of its original's state in `old`, keeping the
    /// original's index where the seal pass reads it (`each`). `heap` holds the pairs if they were
    /// never stashed.
    fn copy_states<K, V: Relocate, P>(
        table: &Raw<K, V, P>,
        old: &Raw<K, V, P>,
        live: usize,
        mut heap: Vec<(usize, usize)>,
        make: &mut dyn FnMut(&V) -> V,
    ) -> Origins {
        let mut copy = |i: usize, j: usize| {
            // SAFETY: `i` is a live slot of `old`, under the shard lock.
            let state = make(unsafe { old.state(i) });
            // SAFETY: slot `j` of `table` holds a key and, in place of its state, nothing yet or
            // the index just read.
            unsafe { std::ptr::addr_of_mut!((*table.slot(j)).state).write(state) };
        };
        if Origins::stashes::<V>() {
            let room = (table.capacity() - live).saturating_mul(Raw::<K, V, P>::PER_EMPTY);
            if room >= live {
                for (j, place) in table.live().zip(table.empties()) {
                    // SAFETY: `j` is live, its state field holds the stashed index (`stashes`:
                    // room and alignment for it); `place` is in an empty slot's memory, aligned
                    // (an entry's alignment is at least its state's), and not in `j`'s.
                    let i = unsafe { table.stash(j).read() };
                    // SAFETY: as above: `place` is the next index's place, in an empty slot.
                    unsafe { place.write(i) };
                    copy(i, j);
                }
                return Origins::Empties;
            }
            heap.extend(table.live().map(|j| {
                // SAFETY: as above.
                (unsafe { table.stash(j).read() }, j)
            }));
        }
        for &(i, j) in &heap {
            copy(i, j);
        }
        Origins::Heap(heap)
    }

    /// Runs `f(old, new)` for each key placed in `table`.
    fn each<K, V, P>(&self, table: &Raw<K, V, P>, mut f: impl FnMut(usize, usize)) {
        match self {
            Origins::Empties => {
                for (j, place) in table.live().zip(table.empties()) {
                    // SAFETY: written by `copy_states`; no slot has been used or emptied since (the
                    // rebuild holds the shard lock, and the table's empty slots are read by no
                    // one else: a reader stops at their control bytes).
                    f(unsafe { place.read() }, j);
                }
            }
            Origins::Heap(pairs) => pairs.iter().for_each(|&(i, j)| f(i, j)),
        }
    }
}

/// Runs every drop, each even if one before it panics (a second panic while unwinding would
/// abort), remembering the first panic.
struct Drops(Option<Box<dyn std::any::Any + Send>>);

impl Drops {
    fn run(&mut self, drop: impl FnOnce()) {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(drop)) {
            self.0.get_or_insert(panic);
        }
    }

    /// Passes the first panic on, if there was one.
    fn finish(self) {
        if let Some(panic) = self.0 {
            std::panic::resume_unwind(panic);
        }
    }
}

/// How long a quota change waits for the readers that hold the previous change's copies
/// ([`Table::convert`]) before it takes one of them for parked.
const PARKED_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// A quota change's conversion of one state: `(old context, new context, state)` to the state
/// that replaces it ([`Table::convert`]).
type Convert<'a, V, P> = dyn FnMut(&P, &P, &V) -> V + 'a;

/// What a write unlinked: dropped and freed once no reader that may have seen it is left.
struct Garbage<K, V, P> {
    /// Removed entries: a table and a slot, dropped in place.
    entries: Vec<(*mut Raw<K, V, P>, usize)>,
    /// Replaced tables: their live entries (the old copies) are dropped, then the tables freed.
    tables: Vec<*mut Raw<K, V, P>>,
    /// The live entries of the tables a quota change replaced (`Table::convert`), counted as
    /// removed ones are (a growth's old copies are not: growth is bounded by the keys that come
    /// and go, a change is not).
    copies: usize,
}

impl<K, V, P> Garbage<K, V, P> {
    fn new() -> Garbage<K, V, P> {
        Garbage {
            entries: Vec::new(),
            tables: Vec::new(),
            copies: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.tables.is_empty()
    }

    fn append(&mut self, other: &mut Garbage<K, V, P>) {
        self.entries.append(&mut other.entries);
        self.tables.append(&mut other.tables);
        self.copies += std::mem::take(&mut other.copies);
    }

    /// Drops every removed entry, then each table's live entries, releasing the tables (each is
    /// freed with its last owner): each entry exactly once even if a `Drop` panics; then passes
    /// the first panic on.
    ///
    /// # Safety
    ///
    /// No reader or writer can reach any of it any more, and each item is here once, holding
    /// one ownership of its table (Safety, 2 and 3).
    unsafe fn free(self) {
        let mut drops = Drops(None);
        for (table, i) in self.entries {
            // SAFETY: the caller's contract; removed, so not live in its table, whose own
            // freeing passes over it; the entry's ownership keeps the table allocated.
            drops.run(|| unsafe { (*table).drop_entry(i, true) });
            // SAFETY: the entry's ownership, given up once.
            unsafe { Raw::release(table) };
        }
        for table in self.tables {
            // SAFETY: the caller's contract: the table's own ownership.
            for i in unsafe { &*table }.live() {
                // SAFETY: as above: the old copies, each a whole entry.
                drops.run(|| unsafe { (*table).drop_entry(i, true) });
            }
            // SAFETY: the table's own ownership, given up once.
            unsafe { Raw::release(table) };
        }
        drops.finish();
    }
}

/// A rebuild cut short by a key's `Clone` or `Hash` panicking: the new table, with the clones
/// made so far, and the panic. Nothing else was changed.
struct Unfinished<K, V, P> {
    table: Box<Raw<K, V, P>>,
    /// The clone being hashed when `Hash` panicked, not yet placed.
    clone: Option<K>,
    panic: Box<dyn std::any::Any + Send>,
}

impl<K, V, P> Unfinished<K, V, P> {
    /// Drops the clones (call with no lock held: they run `Drop`), then runs `then` (the caller's
    /// own drops), then passes the rebuild's panic on (a panic of any of these drops is not).
    fn resume(self, then: impl FnOnce()) -> ! {
        let mut drops = Drops(None);
        for i in self.table.live() {
            // SAFETY: the table was never shared; its live slots hold keys and no states.
            drops.run(|| unsafe { self.table.drop_entry(i, false) });
        }
        drops.run(|| drop(self.clone));
        drops.run(then);
        std::panic::resume_unwind(self.panic)
    }
}

/// Retired garbage and the epoch it was retired at.
struct Batch<K, V, P> {
    epoch: u64,
    garbage: Garbage<K, V, P>,
}

/// How often (in calls of [`Table::free_retired`]) the horizon is looked at when the last look
/// freed something; it doubles after each look that freed nothing, up to [`RECLAIM_MOST`], so a
/// parked reader costs a system call every few thousand writes, not every few.
const RECLAIM_EVERY: u32 = 8;
const RECLAIM_MOST: u32 = 4096;

/// What is retired and not yet freed, oldest first (epochs are taken under this lock, so they
/// rise along the queue).
struct Reclaim<K, V, P> {
    pending: VecDeque<Batch<K, V, P>>,
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

struct Shard<K, V, P> {
    /// The current table: replaced (Release) only by the lock's holder.
    raw: AtomicPtr<Raw<K, V, P>>,
    /// The current table's allocation and mask, for [`Table::prefetch`] only: an address to hint
    /// the processor with, never dereferenced (they may be a table behind, or mismatched).
    hint: AtomicPtr<Cell<K, V>>,
    hint_mask: AtomicUsize,
    /// While a rebuild relocates the states, the table being built (its keys all in place);
    /// null otherwise. Set (Release) before the first state is sealed, cleared (Release) after
    /// `raw` is replaced. A reader that met a sealed state finds the copy here.
    next: AtomicPtr<Raw<K, V, P>>,
    writer: Mutex<Writer>,
}

impl<K, V, P> Shard<K, V, P> {
    /// The current table, for the lock's holder (`_held` is the proof: its guard's data).
    #[inline]
    fn current(&self, _held: &Writer) -> &Raw<K, V, P> {
        // Relaxed: the lock's holder reads the table the holders before it installed.
        // SAFETY: the lock is held, so the current table is not retired, let alone freed,
        // before the borrow of `_held` ends (Safety, 3).
        unsafe { &*self.raw.load(Ordering::Relaxed) }
    }
}

/// The table: see the module docs.
pub(crate) struct Table<K, V, P> {
    shards: Box<[CachePadded<Shard<K, V, P>>]>,
    /// `64 - log2(shards)`: the shard is the hash's top bits.
    shift: u32,
    hasher: ahash::RandomState,
    /// This table's readers (one domain per table: a reader of another table holds none of
    /// this one's memory).
    domain: Domain,
    /// Retired, not yet freed. Locked while a shard's lock is held (never the other way round),
    /// so that what a shard retires is queued in the order it was retired.
    reclaim: Mutex<Reclaim<K, V, P>>,
    /// Whether `reclaim` holds anything: writers look at it before locking it.
    reclaiming: AtomicBool,
    /// Entries retired and not yet dropped.
    unreclaimed: CachePadded<AtomicUsize>,
    /// Of those, the old copies of the tables quota changes replaced.
    copies: AtomicUsize,
}

// SAFETY: the table owns its keys and states (sent with it) and shares them between threads only
// as `&K` and `&V` (hence `Sync` for both); its raw pointers are owned tables.
unsafe impl<K: Send + Sync, V: Send + Sync, P: Send + Sync> Send for Table<K, V, P> {}
// SAFETY: as above; every write to shared memory is an atomic or happens under the shard lock
// before a Release publication.
unsafe impl<K: Send + Sync, V: Send + Sync, P: Send + Sync> Sync for Table<K, V, P> {}

impl<K: Hash + Eq + Clone, V: Relocate, P: Clone> Table<K, V, P> {
    /// A table with four shards per core, and at least 8: DashMap's count (shards spread the
    /// locks of new keys and bound how much one growth copies; lookups never wait for either).
    #[cfg_attr(tollgate_loom, allow(dead_code))] // under loom the store is the stand-in map
    pub(crate) fn new(ctx: P) -> Table<K, V, P> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Table::with_shards(cores.saturating_mul(4).max(8), ctx)
    }

    /// A table with `shards` shards (rounded up to a power of two).
    pub(crate) fn with_shards(shards: usize, ctx: P) -> Table<K, V, P> {
        let shards = shards.clamp(1, 1 << 16).next_power_of_two();
        Table {
            shards: (0..shards)
                .map(|_| {
                    let raw = Raw::new(MIN_CAPACITY, ctx.clone());
                    let hint = raw.base.as_ptr();
                    CachePadded::new(Shard {
                        raw: AtomicPtr::new(Box::into_raw(raw)),
                        hint: AtomicPtr::new(hint),
                        hint_mask: AtomicUsize::new(MIN_CAPACITY - 1),
                        next: AtomicPtr::new(std::ptr::null_mut()),
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
            copies: AtomicUsize::new(0),
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
    fn shard(&self, hash: u64) -> &Shard<K, V, P> {
        // `checked_shr`: one shard (shift 64) is shard 0.
        &self.shards[hash.checked_shr(self.shift).unwrap_or(0) as usize]
    }

    /// Runs `f` on `key`'s state, or answers `None` if the key is not held. Without a lock: the
    /// lookup and `f` run inside the epoch (under the shard lock if this thread cannot enter it).
    ///
    /// `f` answers [`Gone`] when the state it met is marked gone: then it took effect nowhere.
    /// If the mark is a rebuild's seal (see the module docs), `f` runs again on the key's copy in
    /// the table that replaces it (before or after that is published; still without a lock, so a
    /// lookup that interrupted a rebuild on its own thread, from a signal handler, completes). An
    /// answer of `Gone` from `with_read` means the key was evicted (it may be in the instant
    /// between eviction's mark and its removal): what the caller makes of that is its own.
    #[inline]
    pub(crate) fn with_read<Q, R>(
        &self,
        key: &Q,
        f: impl Fn(&P, &V) -> Result<R, Gone>,
    ) -> Option<Result<R, Gone>>
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
        let raw = shard.raw.load(Ordering::Acquire);
        // SAFETY: a current table is freed only after its retirement and every pin before it.
        let table = unsafe { &*raw };
        // SAFETY: under the pin, on the table loaded after it.
        let i = unsafe { table.find(hash, key) }?;
        // SAFETY: found live, in a published table, under the pin.
        match f(&table.ctx, unsafe { table.state(i) }) {
            Err(Gone) => self
                .look_again(shard, raw, hash, key, f)
                .map(|(_, answer)| answer),
            done => Some(done),
        }
    }

    /// Runs `f` on the context of the table `key`'s shard holds now: the one a key created now
    /// would be decided in. Inside the epoch (or under the shard lock); `f` must run no user
    /// code.
    #[cfg_attr(tollgate_loom, allow(dead_code))] // under loom the limiter's store is the stand-in
    pub(crate) fn with_ctx<Q, R>(&self, key: &Q, f: impl FnOnce(&P) -> R) -> R
    where
        Q: Hash + ?Sized,
    {
        let shard = self.shard(self.hash(key));
        let Some(_pin) = self.pin() else {
            let writer = lock(&shard.writer);
            return f(&shard.current(&writer).ctx);
        };
        // Acquire, under the pin: as in `with_read`.
        // SAFETY: a current table is freed only after its retirement and every pin before it.
        f(&unsafe { &*shard.raw.load(Ordering::Acquire) }.ctx)
    }

    /// The hot path of a check: `before()` (outside the epoch: it may be user code, a clock),
    /// called after asking the processor to fetch the key's control bytes and home slot (their
    /// cache misses then overlap `before`'s work instead of following it), then `decide` on
    /// `key`'s state, its table's context and `before()`'s answer, as [`Table::with_read`] runs
    /// `f` (a seal sends it on to the key's copy, without a lock), and `describe` on what it
    /// decided, with the context of the table it decided in, still inside the epoch. `decide`
    /// answers little (a word: it crosses out of the successor search); `describe` builds the
    /// rest inline, so a caller that reads part of it pays for that part. `None` when the key
    /// is not held, or marked gone, or this thread cannot enter the epoch: the caller then
    /// takes the exact path under the key's shard lock.
    #[inline(always)]
    #[cfg_attr(tollgate_loom, allow(dead_code))] // under loom the limiter's store is the stand-in
    pub(crate) fn with_read_after<Q, T: Copy, D, R>(
        &self,
        key: &Q,
        before: impl FnOnce() -> T,
        decide: impl Fn(&P, &V, T) -> Result<D, Gone>,
        describe: impl FnOnce(&P, D, T) -> R,
    ) -> (T, Option<R>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(key);
        let shard = self.shard(hash);
        Self::prefetch(shard, hash);
        let t = before();
        let Some(_pin) = self.pin() else {
            return (t, None);
        };
        // Acquire: the table as its builder initialized it. The pin, taken before this load,
        // keeps it alive (Safety, 4).
        let raw = shard.raw.load(Ordering::Acquire);
        // SAFETY: a current table is freed only after its retirement and every pin before it.
        let table = unsafe { &*raw };
        // SAFETY: under the pin, on the table loaded after it.
        let Some(i) = (unsafe { table.find(hash, key) }) else {
            return (t, None);
        };
        // SAFETY: found live, in a published table, under the pin.
        match decide(&table.ctx, unsafe { table.state(i) }, t) {
            Ok(decided) => (t, Some(describe(&table.ctx, decided, t))),
            Err(Gone) => {
                match self.look_again(shard, raw, hash, key, |ctx, state| decide(ctx, state, t)) {
                    // SAFETY: the context of a table reached under this pin, which still lasts.
                    Some((ctx, Ok(decided))) => (t, Some(describe(unsafe { &*ctx }, decided, t))),
                    _ => (t, None),
                }
            }
        }
    }

    /// Hints the processor to fetch the lines of `hash`'s home slot in `shard`'s current table.
    #[inline(always)]
    #[cfg_attr(tollgate_loom, allow(dead_code))]
    fn prefetch(shard: &Shard<K, V, P>, hash: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            // Relaxed: a hint; a stale or mismatched pair only prefetches another address.
            let base = shard.hint.load(Ordering::Relaxed);
            let mask = shard.hint_mask.load(Ordering::Relaxed);
            let i = hash as usize & mask;
            // Address arithmetic only (wrapping: nothing here is dereferenced), as `Raw::ctrl`
            // and `Raw::slot` compute it.
            let entry = base.wrapping_add(i);
            let ctrl = Raw::<K, V, P>::ctrl_start(base, mask.wrapping_add(1)).wrapping_add(i);
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch is a hint that reads no memory in the language's sense and
            // cannot fault, whatever the address; SSE is part of x86-64.
            #[allow(unused_unsafe)]
            unsafe {
                _mm_prefetch::<_MM_HINT_T0>(ctrl.cast());
                _mm_prefetch::<_MM_HINT_T0>(entry.cast());
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (shard, hash);
    }

    /// After `f` met a mark on the key's state in `raw`: runs `f` on the key in the table that
    /// replaced `raw` or is replacing it, until it meets no seal; answers `Gone` if the mark was
    /// not a seal. With `f`'s answer, the context of the table it ran in (null with `Gone`):
    /// valid while the caller's pin lasts. Each turn moves to a newer table, so it ends (within the rebuilds that run
    /// meanwhile) without waiting for any. Under the caller's pin.
    ///
    /// The shard, the hash and the key come as separate arguments, in registers: the call sits in
    /// the check's loop ([`Table::with_read_after`]), and a struct carrying them, passed by
    /// address, kept them in memory there (3 instructions a check more, counted by
    /// `benches/instructions.sh`).
    #[cold]
    #[inline(never)]
    fn look_again<Q, R>(
        &self,
        shard: &Shard<K, V, P>,
        mut raw: *mut Raw<K, V, P>,
        hash: u64,
        key: &Q,
        f: impl Fn(&P, &V) -> Result<R, Gone>,
    ) -> Option<(*const P, Result<R, Gone>)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        // The table `raw` was built from, while `raw` was reached as `next`, not yet published:
        // finding it still current means `raw` is still being built (and no newer table exists).
        let mut built_from = std::ptr::null_mut();
        loop {
            // Acquire, both, and `next` first: a `next` loaded after the seal was seen and before
            // `raw` was found still current is the table being built from `raw` (the rebuild sets
            // it before sealing and clears it only after replacing `raw`), and its copy of the
            // key's state was written before the seal.
            let next = shard.next.load(Ordering::Acquire);
            let current = shard.raw.load(Ordering::Acquire);
            let (successor, reached_as_next) = if current != raw && current != built_from {
                // Tables only advance: one that is neither `raw` nor older than it is newer.
                (current, false)
            } else if current == raw && !next.is_null() && next != raw {
                (next, true)
            } else {
                // `raw` is the newest table, or is still being built from the current one, or is
                // current with its own rebuild's `next` not yet cleared: the mark in it is not a
                // seal (a seal is copied out before the table it is in stops being the newest).
                return Some((std::ptr::null(), Err(Gone::seen())));
            };
            // SAFETY: under the caller's pin, taken before the first table was loaded; every
            // table reached from the shard since is retired no earlier than it is replaced, and
            // freed only after the pin ends (Safety, 4). No address is reused while pinned.
            let table = unsafe { &*successor };
            // SAFETY: under the pin; the successor's keys and states are all in place (a table
            // being built is set as `next` only once they are).
            let i = unsafe { table.find(hash, key) }?;
            // SAFETY: as above.
            match f(&table.ctx, unsafe { table.state(i) }) {
                Err(Gone) => {
                    built_from = if reached_as_next {
                        raw
                    } else {
                        std::ptr::null_mut()
                    };
                    raw = successor;
                }
                done => return Some((&table.ctx, done)),
            }
        }
    }

    /// Enters this table's epoch.
    #[cfg(not(tollgate_loom))]
    #[inline]
    fn pin(&self) -> Option<crate::epoch::Pin<'_>> {
        self.domain.pin()
    }

    /// Enters this table's epoch as loom's thread (see `epoch::loom_index`).
    #[cfg(tollgate_loom)]
    fn pin(&self) -> Option<crate::epoch::Pin<'_>> {
        self.domain.pin_as(crate::epoch::loom_index())
    }

    /// The lookup under the shard lock, for a thread that cannot enter the epoch.
    #[cold]
    #[inline(never)]
    fn with_locked<Q, R>(
        &self,
        shard: &Shard<K, V, P>,
        hash: u64,
        key: &Q,
        f: impl Fn(&P, &V) -> Result<R, Gone>,
    ) -> Option<Result<R, Gone>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let writer = lock(&shard.writer);
        let raw = shard.current(&writer);
        // SAFETY: under the lock.
        let i = unsafe { raw.find(hash, key) }?;
        // SAFETY: found live, under the lock.
        Some(f(&raw.ctx, unsafe { raw.state(i) }))
    }

    /// Runs `f` under `key`'s shard lock on the key's entry, if any; if `f` answers a state, it is
    /// inserted for a vacant key, or replaces the occupied one's (the old entry is removed and the
    /// new one inserted, still under the lock). `key` is dropped after the lock is released if it
    /// was not inserted. If the shard has no slot to spare, it is rebuilt first, before `f`
    /// runs: a key's `Clone` or `Hash` panicking there leaves everything as it was.
    pub(crate) fn with_entry<R>(
        &self,
        key: K,
        f: impl FnOnce(&P, Slot<'_, K, V>) -> (Option<V>, R),
    ) -> R {
        // User code (`Hash`), before anything is held.
        let hash = self.hash(&key);
        let shard = self.shard(hash);
        let written = {
            let mut writer = lock(&shard.writer);
            // User code (`Clone`, `Hash`) in a rebuild, then `Eq` and `f`, before anything the
            // write decides is changed.
            match self.make_room(shard, &mut writer) {
                Err(unfinished) => Err((unfinished, key)),
                Ok(()) => {
                    let raw = shard.current(&writer);
                    let mut garbage = Garbage::new();
                    // SAFETY: under the lock.
                    let (state, answer, removed) = match unsafe { raw.find(hash, &key) } {
                        Some(i) => {
                            // SAFETY: found live, under the lock.
                            let (held, state) = unsafe { (raw.key(i), raw.state(i)) };
                            let (state, answer) = f(&raw.ctx, Slot::Occupied(held, state));
                            (state, answer, Some(i))
                        }
                        None => {
                            let (state, answer) = f(&raw.ctx, Slot::Vacant(&key));
                            (state, answer, None)
                        }
                    };
                    let unused = match state {
                        Some(state) => {
                            if let Some(i) = removed {
                                raw.own();
                                garbage.entries.push((shard.raw.load(Ordering::Relaxed), i));
                                // Release: a reader that sees the slot removed and looks again
                                // under the lock finds the replacement.
                                raw.ctrl(i).store(TOMB, Ordering::Release);
                                writer.live -= 1;
                            }
                            // `make_room` left a slot to spare.
                            raw.put(hash, key, state);
                            writer.used += 1;
                            writer.live += 1;
                            None
                        }
                        None => Some(key),
                    };
                    self.hand_over(garbage);
                    Ok((answer, unused))
                }
            }
        };
        // No lock held from here: what is freed, and the key not inserted, run their `Drop`;
        // each runs even if the other panics, and the first panic is passed on.
        let (answer, unused) = match written {
            Ok(written) => written,
            Err((unfinished, key)) => unfinished.resume(|| drop(key)),
        };
        let mut drops = Drops(None);
        drops.run(|| self.free_retired());
        drops.run(|| drop(unused));
        drops.finish();
        answer
    }

    /// Rebuilds the shard if its table has no slot to spare: at the same capacity if at most half
    /// of it is live (clearing the removed entries), else at the next that holds them.
    fn make_room(
        &self,
        shard: &Shard<K, V, P>,
        writer: &mut Writer,
    ) -> Result<(), Unfinished<K, V, P>> {
        let capacity = shard.current(writer).capacity();
        if writer.used < max_used(capacity) {
            return Ok(());
        }
        let live = writer.live + 1;
        let capacity = if live <= max_used(capacity) / 2 {
            capacity
        } else {
            capacity_for(live.max(max_used(capacity) + 1))
        };
        self.rebuild(shard, writer, capacity)
    }

    /// Replaces the shard's table by one of `capacity` holding its live entries (see the module
    /// docs: clones of the keys, then the states relocated), and hands the old one to the
    /// reclaimer. Under the shard lock. If a key's `Clone` or `Hash` panics, nothing is changed,
    /// and the new table is handed back with the panic, to be dropped once the lock is released.
    fn rebuild(
        &self,
        shard: &Shard<K, V, P>,
        writer: &mut Writer,
        capacity: usize,
    ) -> Result<(), Unfinished<K, V, P>> {
        self.remake(shard, writer, capacity, None)
    }

    /// [`Table::rebuild`], or with `convert`, a quota change's: the new table gets the new
    /// context, and each state is replaced by what `convert(old context, new context, state)`
    /// answers (sealing the original), in a table shared only once every state is in place (see
    /// [`Table::convert`]).
    fn remake(
        &self,
        shard: &Shard<K, V, P>,
        writer: &mut Writer,
        capacity: usize,
        convert: Option<(&P, &mut Convert<'_, V, P>)>,
    ) -> Result<(), Unfinished<K, V, P>> {
        debug_assert!(max_used(capacity) >= writer.live);
        let old_ptr = shard.raw.load(Ordering::Relaxed);
        let old = shard.current(writer);
        let ctx = match &convert {
            Some((ctx, _)) => (*ctx).clone(),
            None => old.ctx.clone(),
        };
        let new: Box<Raw<K, V, P>> = Raw::new(capacity, ctx);
        // Phase 1, the keys: user code, on a table no one else sees. Each placed slot's state
        // field holds, for now, the index of its original (`Origins`).
        let mut heap = Vec::new();
        // A clone being hashed: if `Hash` panics, it is dropped with the others, after the lock.
        let mut hashing = None;
        let cloned = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            for i in old.live() {
                // SAFETY: a live entry, under the lock.
                let hash = self.hash(hashing.insert(unsafe { old.key(i) }.clone()));
                let Some(key) = hashing.take() else { continue };
                let j = new.vacancy(hash);
                let slot = new.slot(j);
                // SAFETY: an empty slot of a table not yet shared: its key, and in place of its
                // state the original's index (the second phase writes the state before sharing
                // the table).
                unsafe {
                    std::ptr::addr_of_mut!((*slot).key).write(key);
                    #[cfg(tollgate_loom)]
                    std::ptr::addr_of_mut!((*slot).alive).write(crate::sync::UnsafeCell::new(()));
                    if Origins::stashes::<V>() {
                        new.stash(j).write(i);
                    }
                }
                if !Origins::stashes::<V>() {
                    heap.push((i, j));
                }
                // Relaxed: the table is shared by the Release store of `next` below.
                new.ctrl(j).store(tag(hash), Ordering::Relaxed);
            }
        }));
        if let Err(panic) = cloned {
            return Err(Unfinished {
                table: new,
                clone: hashing,
                panic,
            });
        }
        // Phase 2, the states: no user code, so it cannot be cut short. First a copy of each,
        // while the table is still private; then the table is shared as `next`, and each
        // original sealed, bringing its copy up to date. A reader that meets a seal (or any
        // mark) goes on in the new table, where every key and state is in place.
        // What a quota change replaces counts against the room for new keys until it is freed.
        let copies = if convert.is_some() { writer.live } else { 0 };
        let new = match convert {
            Some((_, convert)) => {
                // A quota change: each original is sealed by `convert` as its converted state is
                // built, and the table is published only when all are in place. A reader that
                // meets a seal before then finds no successor (`look_again`: no `next`, `raw`
                // still current) and takes the new-key path, whose lock this thread holds until
                // the table is published: it then decides on the converted state, with the new
                // context.
                let new_ctx = &new.ctx;
                Origins::copy_states(&new, old, writer.live, heap, &mut |state| {
                    convert(&old.ctx, new_ctx, state)
                });
                Box::into_raw(new)
            }
            None => {
                let origins =
                    Origins::copy_states(&new, old, writer.live, heap, &mut |state| state.copy());
                let new = Box::into_raw(new);
                // Release: a reader that loads it sees the keys and states written above.
                shard.next.store(new, Ordering::Release);
                // SAFETY: `new` is the table just built, freed only after it is retired as a
                // current table, which it becomes below.
                let built = unsafe { &*new };
                origins.each(built, |i, j| {
                    // SAFETY: a live entry, under the lock; slot `j`'s state was written above.
                    unsafe { old.state(i).seal(built.state(j)) };
                });
                new
            }
        };
        // SAFETY: as above: just built, retired only once replaced.
        let built = unsafe { &*new };
        // Release: a reader that loads the new table sees its slots.
        shard.raw.store(new, Ordering::Release);
        // Relaxed: a hint (`prefetch`).
        shard.hint.store(built.base.as_ptr(), Ordering::Relaxed);
        shard.hint_mask.store(built.mask, Ordering::Relaxed);
        // Release: after the table is replaced, so that a reader that sees `next` cleared (or
        // set by a later rebuild) sees `raw` replaced too (`look_again`). (A quota change never
        // set it: already null.)
        shard.next.store(std::ptr::null_mut(), Ordering::Release);
        writer.used = writer.live;
        let mut garbage = Garbage::new();
        garbage.tables.push(old_ptr);
        garbage.copies = copies;
        self.hand_over(garbage);
        Ok(())
    }

    /// Queues what a write unlinked, at the epoch it moves to: freed by a later `collect`.
    /// Called with the unlinking shard's lock held (so a shard's garbage queues in the order it
    /// was unlinked).
    fn hand_over(&self, garbage: Garbage<K, V, P>) {
        // An insert that unlinked nothing takes no second lock.
        if garbage.is_empty() {
            return;
        }
        let mut reclaim = lock(&self.reclaim);
        // Relaxed: counts read as bounds, moved only under this lock.
        self.unreclaimed
            .fetch_add(garbage.entries.len() + garbage.copies, Ordering::Relaxed);
        self.copies.fetch_add(garbage.copies, Ordering::Relaxed);
        // After the unlinking (the caller's stores, under the shard lock it holds): readers that
        // enter at the epoch this moves to see it unlinked.
        let epoch = self.domain.retire();
        reclaim.pending.push_back(Batch { epoch, garbage });
        // Relaxed: a hint, as in `collect`.
        self.reclaiming.store(true, Ordering::Relaxed);
        // At the next write's look: with no lookup in flight (one thread inserting, say), a
        // replaced table is freed as a growing `HashMap` frees it, and the allocator can reuse
        // its memory.
        reclaim.calls = reclaim.every;
    }

    /// Takes out of `reclaim` what no reader can still hold (the batches retired before the
    /// horizon; none if the readers cannot be seen), to be freed once the lock is released.
    fn collect(&self, reclaim: &mut Reclaim<K, V, P>) -> Garbage<K, V, P> {
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
        // Relaxed: as in `hand_over`.
        self.unreclaimed
            .fetch_sub(freed.entries.len() + freed.copies, Ordering::Relaxed);
        self.copies.fetch_sub(freed.copies, Ordering::Relaxed);
        // Relaxed: a hint; the reclaimer's own lock orders the list.
        self.reclaiming
            .store(!reclaim.pending.is_empty(), Ordering::Relaxed);
        freed
    }

    /// Frees the retired garbage whose readers are gone, if there is any and a look is due.
    /// Called with no lock held.
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
        // SAFETY: past the horizon (`collect`); each item holds one ownership (Safety, 3).
        unsafe { freed.free() };
    }

    /// Frees the retired garbage whose readers are gone, now. Called with no lock held.
    pub(crate) fn reclaim_now(&self) {
        // Relaxed: as in `free_retired`.
        if self.reclaiming.load(Ordering::Relaxed) {
            let freed = self.collect(&mut lock(&self.reclaim));
            // SAFETY: past the horizon (`collect`); each item holds one ownership (Safety, 3).
            unsafe { freed.free() };
        }
    }

    /// Entries removed and not yet dropped (a reader may still hold them).
    #[inline]
    pub(crate) fn unreclaimed(&self) -> usize {
        // Relaxed: a snapshot of a count.
        self.unreclaimed.load(Ordering::Relaxed)
    }

    /// Removes every entry whose state `evict` marks gone (marking and removing under the
    /// shard lock, one shard at a time), and answers how many it removed. Drops nothing and runs
    /// no key's `Drop`, so a sweep is never cut short and its count is always returned: the
    /// caller settles its own books, then calls [`Table::reclaim_now`] (where a panicking `Drop`
    /// surfaces).
    pub(crate) fn retain(&self, mut evict: impl FnMut(&P, &V) -> bool) -> usize {
        let mut removed = 0;
        for shard in self.shards.iter() {
            let mut writer = lock(&shard.writer);
            let raw_ptr = shard.raw.load(Ordering::Relaxed);
            let raw = shard.current(&writer);
            let mut garbage = Garbage::new();
            for i in raw.live() {
                // SAFETY: a live entry, under the lock.
                if evict(&raw.ctx, unsafe { raw.state(i) }) {
                    // Release: after the mark `evict` wrote, as in `with_entry`.
                    raw.ctrl(i).store(TOMB, Ordering::Release);
                    raw.own();
                    garbage.entries.push((raw_ptr, i));
                    writer.live -= 1;
                    removed += 1;
                }
            }
            self.hand_over(garbage);
        }
        removed
    }

    /// Rebuilds every shard whose table is larger than its live entries need, or holds removed
    /// ones, at the smallest capacity that holds them, and frees what no reader holds. A key's
    /// `Clone` or `Hash` panicking stops it there, its shard unchanged, and the panic is passed
    /// on.
    #[cfg_attr(tollgate_loom, allow(dead_code))]
    pub(crate) fn shrink_to_fit(&self) {
        self.rebuild_each(|capacity, writer| {
            let fit = capacity_for(writer.live + 1);
            (fit < capacity || writer.used > writer.live).then_some(fit)
        });
    }

    /// A quota change: rebuilds every shard, one at a time under its lock, into a table with
    /// context `ctx` whose states are `convert(old context, ctx, state)` (which must seal the
    /// original: see [`Table::remake`]), then frees what no reader holds. A reader of a key in a
    /// shard being converted that meets a seal waits for the shard's lock (the only wait a
    /// lookup can meet, and only while a change runs); a reader that met none decided before
    /// the seal, which `convert` then carries over. A key's `Clone` or `Hash` panicking stops
    /// the change at its shard, that shard and the ones after it unchanged, and the panic is
    /// passed on.
    ///
    /// The replaced tables are freed once no reader holds them, and counted in
    /// [`Table::unreclaimed`] until then. While the copies an earlier change replaced are still
    /// held a second after this change began (by a reader parked inside a lookup since before
    /// that change), nothing is changed, and the answer is `Err` with their number: one parked
    /// reader holds at most one copy of the map.
    #[cfg_attr(tollgate_loom, allow(dead_code))] // under loom the limiter's store is the stand-in
    pub(crate) fn convert(
        &self,
        ctx: &P,
        mut convert: impl FnMut(&P, &P, &V) -> V,
    ) -> Result<(), usize> {
        // Readers in the middle of a lookup hold the previous change's copies for a few
        // instructions (longer if descheduled): wait for them, a second at most, before taking
        // a reader for parked.
        let mut pause = std::time::Duration::from_micros(10);
        let mut waited = std::time::Duration::ZERO;
        loop {
            self.reclaim_now();
            // Relaxed: moved under the reclaimer's lock, which `reclaim_now` took; changes are
            // serialized by the caller, so no other conversion adds to it meanwhile.
            let held = self.copies.load(Ordering::Relaxed);
            if held == 0 {
                break;
            }
            if waited >= PARKED_AFTER {
                return Err(held);
            }
            std::thread::sleep(pause);
            waited += pause;
            pause = (pause * 2).min(std::time::Duration::from_millis(20));
        }
        for shard in self.shards.iter() {
            let rebuilt = {
                let mut writer = lock(&shard.writer);
                let capacity = capacity_for(writer.live + 1);
                self.remake(shard, &mut writer, capacity, Some((ctx, &mut convert)))
            };
            if let Err(unfinished) = rebuilt {
                unfinished.resume(|| ());
            }
        }
        self.reclaim_now();
        Ok(())
    }

    /// Rebuilds every shard at its current capacity.
    #[cfg(any(test, tollgate_loom, fuzzing))]
    pub(crate) fn rebuild_all(&self) {
        self.rebuild_each(|capacity, _| Some(capacity));
    }

    /// Rebuilds each shard at the capacity `at` answers for it (none: left alone), then frees
    /// what no reader holds.
    fn rebuild_each(&self, at: impl Fn(usize, &Writer) -> Option<usize>) {
        for shard in self.shards.iter() {
            let rebuilt = {
                let mut writer = lock(&shard.writer);
                match at(shard.current(&writer).capacity(), &writer) {
                    Some(capacity) => self.rebuild(shard, &mut writer, capacity),
                    None => Ok(()),
                }
            };
            if let Err(unfinished) = rebuilt {
                unfinished.resume(|| ());
            }
        }
        // Queued, not freed, until every shard is done: a key's `Drop` panicking in the freeing
        // cannot cut the rebuilds short.
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

impl<K, V, P> Drop for Table<K, V, P> {
    fn drop(&mut self) {
        let mut retired = Garbage::new();
        for mut batch in lock(&self.reclaim).pending.drain(..) {
            retired.append(&mut batch.garbage);
        }
        let mut drops = Drops(None);
        // SAFETY: `&mut self`: no reader or writer is left; each item was retired once, and the
        // tables its entries sit in are retired with them or current (freed below) (Safety, 2).
        drops.run(|| unsafe { retired.free() });
        for shard in self.shards.iter() {
            // Relaxed: `&mut self`, no other thread is left.
            let raw = shard.raw.load(Ordering::Relaxed);
            // SAFETY: the current table, live until here, owning its live entries whole.
            for i in unsafe { &*raw }.live() {
                // SAFETY: as above; dropped once, here.
                drops.run(|| unsafe { (*raw).drop_entry(i, true) });
            }
            // SAFETY: the table's own ownership (its removed entries were freed above).
            unsafe { Raw::release(raw) };
        }
        drops.finish();
    }
}

/// The table with one-word states, for `benches/maps.rs`, which measures it beside other
/// concurrent maps. Not an API: hidden, and free to change.
#[cfg(not(tollgate_loom))]
pub struct BenchTable<K>(Table<K, crate::sync::AtomicU64, ()>);

#[cfg(not(tollgate_loom))]
impl<K> std::fmt::Debug for BenchTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BenchTable")
    }
}

#[cfg(not(tollgate_loom))]
impl<K: Hash + Eq + Clone> Default for BenchTable<K> {
    /// The keyed limiter's shard count.
    fn default() -> BenchTable<K> {
        BenchTable(Table::new(()))
    }
}

#[cfg(not(tollgate_loom))]
impl<K: Hash + Eq + Clone> BenchTable<K> {
    /// Runs `f` on `key`'s word without a lock (see [`Table::with_read`]; `f` never answers
    /// `Gone`, so it runs once).
    #[inline]
    pub fn read<Q, R>(&self, key: &Q, f: impl Fn(&crate::sync::AtomicU64) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0
            .with_read(key, |(), word| Ok(f(word)))
            .and_then(Result::ok)
    }

    /// Inserts `key` with `word` unless it is held; answers whether it inserted.
    pub fn insert_if_vacant(&self, key: K, word: u64) -> bool {
        self.0.with_entry(key, |(), slot| match slot {
            Slot::Occupied(..) => (None, false),
            Slot::Vacant(_) => (Some(crate::sync::AtomicU64::new(word)), true),
        })
    }

    /// Removes every entry whose word `evict` approves (under each shard's lock); answers how
    /// many.
    pub fn sweep(&self, evict: impl FnMut(&crate::sync::AtomicU64) -> bool) -> usize {
        let mut evict = evict;
        let removed = self.0.retain(|(), word| evict(word));
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

#[cfg(test)]
mod tests {
    /// The table's operations without a context, for these tests.
    impl<K: Hash + Eq + Clone, V: Relocate> Table<K, V, ()> {
        fn read0<Q, R>(&self, key: &Q, f: impl Fn(&V) -> Result<R, Gone>) -> Option<Result<R, Gone>>
        where
            K: Borrow<Q>,
            Q: Hash + Eq + ?Sized,
        {
            self.with_read(key, |(), v| f(v))
        }

        fn entry0<R>(&self, key: K, f: impl FnOnce(Slot<'_, K, V>) -> (Option<V>, R)) -> R {
            self.with_entry(key, |(), slot| f(slot))
        }

        fn retain0(&self, mut evict: impl FnMut(&V) -> bool) -> usize {
            self.retain(|(), v| evict(v))
        }
    }
    use super::*;
    use crate::cas::{Gone, GONE};
    use crate::sync::{AtomicBool, AtomicU64, Ordering};
    use proptest::prelude::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicIsize;
    use std::sync::{Arc, Barrier};

    /// `PartialEq`, `Eq` and `Hash` for a test key by its field `$id` alone (what else it holds
    /// counts or logs), and with `Borrow<$borrowed>`, lookups by that field.
    macro_rules! same_by {
        ($key:ty, $id:tt) => {
            impl PartialEq for $key {
                fn eq(&self, other: &Self) -> bool {
                    self.$id == other.$id
                }
            }
            impl Eq for $key {}
            impl Hash for $key {
                fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                    self.$id.hash(h)
                }
            }
        };
        ($key:ty, $id:tt, Borrow<$borrowed:ty>) => {
            same_by!($key, $id);
            impl Borrow<$borrowed> for $key {
                fn borrow(&self) -> &$borrowed {
                    &self.$id
                }
            }
        };
    }

    /// A key that counts its live copies, so that the tests see every key dropped exactly once.
    struct Key(u16, Arc<AtomicIsize>);

    impl Key {
        fn new(k: u16, live: &Arc<AtomicIsize>) -> Key {
            live.fetch_add(1, Ordering::Relaxed);
            Key(k, live.clone())
        }
    }

    /// A copy counts as live until dropped: after every reclamation, one live copy per key held.
    impl Clone for Key {
        fn clone(&self) -> Key {
            Key::new(self.0, &self.1)
        }
    }

    impl Drop for Key {
        fn drop(&mut self) {
            self.1.fetch_sub(1, Ordering::Relaxed);
        }
    }

    same_by!(Key, 0, Borrow<u16>);

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

    fn put<K: Hash + Eq + Clone>(table: &Table<K, AtomicU64, ()>, key: K, v: u64) {
        table.entry0(key, |_| (Some(AtomicU64::new(v)), ()));
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
            let table: Table<Key, AtomicU64, ()> = Table::with_shards(shards, ());
            let mut model: HashMap<u16, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Put(k, v) => {
                        let was = table.entry0(Key::new(k, &live), |slot| match slot {
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
                        let got = table.read0(&k, bump).map(|r| r.unwrap());
                        let want = model.get_mut(&k).map(|v| {
                            *v += 1;
                            *v
                        });
                        prop_assert_eq!(got, want);
                    }
                    Op::Retain(m) => {
                        let removed = table.retain0(|v| v.load(Ordering::Relaxed) % m == 0);
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
                let got = table.read0(&k, read).map(|r| r.unwrap());
                prop_assert_eq!(got, model.get(&k).copied());
            }
            drop(table);
            prop_assert_eq!(live.load(Ordering::Relaxed), 0);
        }
    }

    #[test]
    fn growth_is_by_doubling_and_shrinking_gives_the_room_back() {
        let table: Table<u64, AtomicU64, ()> = Table::with_shards(1, ());
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
        assert_eq!(table.retain0(|v| v.load(Ordering::Relaxed) >= 10), 9_990);
        table.shrink_to_fit();
        assert_eq!(table.capacity(), 16);
        for k in 0..10u64 {
            assert_eq!(table.read0(&k, read), Some(Ok(k)));
        }
        assert_eq!(table.read0(&10, read), None);
    }

    /// A removed entry and a replaced table are not freed while a reader that entered before
    /// they were unlinked is still in, and are freed once that reader has left; a reader entering
    /// later does not hold them up.
    #[test]
    fn retired_memory_waits_for_the_readers_that_may_hold_it() {
        let table: Table<u64, AtomicU64, ()> = Table::with_shards(1, ());
        put(&table, 1, 5);
        put(&table, 2, 6);
        let (entered, release) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                let first = AtomicBool::new(true);
                let seen = table.read0(&1, |word| {
                    if first.swap(false, Ordering::Relaxed) {
                        entered.wait();
                        release.wait();
                    }
                    read(word)
                });
                // The entry the reader held was removed under it: it read the mark, and the look
                // again under the lock found the key gone.
                assert_eq!(seen, None);
            });
            entered.wait();
            assert_eq!(table.retain0(|w| crate::cas::mark_gone(w, 5)), 1);
            table.rebuild_all();
            let (batches, entries) = (table.retired(), table.unreclaimed());
            let later = table.read0(&2, read);
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

    /// A state too small to hold a slot index: rebuilds keep the old slots on the heap
    /// (`Origins::Heap`); sealing is not exercised here (no reader runs).
    impl Relocate for std::sync::atomic::AtomicU16 {
        fn copy(&self) -> Self {
            std::sync::atomic::AtomicU16::new(self.load(Ordering::Relaxed))
        }
        fn seal(&self, copy: &Self) {
            copy.store(self.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        fn take(&self) -> Self {
            self.copy()
        }
    }

    /// Every rebuild finds each state again, whichever way it keeps the old slots between its
    /// phases: in the new table's empty slots (a growth), on the heap (a rebuild at a tight fit,
    /// or states too small to hold an index).
    #[test]
    fn rebuilds_carry_every_state_to_its_key() {
        use std::sync::atomic::AtomicU16;
        let words: Table<u64, AtomicU64, ()> = Table::with_shards(1, ());
        let shorts: Table<u64, AtomicU16, ()> = Table::with_shards(1, ());
        for k in 0..1_000u64 {
            put(&words, k, k * 3);
            shorts.entry0(k, |_| (Some(AtomicU16::new(k as u16 * 3)), ()));
            if k % 97 == 0 {
                // At a tight fit: 7/8 of the slots live, too few empty ones to hold the indices.
                words.rebuild_all();
                shorts.rebuild_all();
            }
        }
        words.shrink_to_fit();
        shorts.shrink_to_fit();
        for k in 0..1_000u64 {
            assert_eq!(words.read0(&k, read), Some(Ok(k * 3)));
            let short = shorts.read0(&k, |s| Ok(s.load(Ordering::Relaxed)));
            assert_eq!(short, Some(Ok(k as u16 * 3)));
        }
    }

    /// A table full of removed entries is rebuilt at the same size, not grown: a key space
    /// sprayed through a bounded map keeps the map's size.
    #[test]
    fn removed_entries_are_cleared_without_growing() {
        let table: Table<u64, AtomicU64, ()> = Table::with_shards(1, ());
        for round in 0..100u64 {
            for k in 0..8 {
                put(&table, round * 8 + k, 0);
            }
            table.retain0(|_| true);
        }
        assert_eq!(table.len(), 0);
        assert_eq!(table.capacity(), 16);
    }

    /// Threads add one to keys while others insert new keys and rebuild the tables: every
    /// addition is kept (one made in an old table before the seal is in the copy; one that meets
    /// the seal is made again on the copy).
    #[test]
    fn no_write_is_lost_to_a_rebuild() {
        const KEYS: u64 = 3_000;
        const OPS: u64 = if cfg!(debug_assertions) {
            30_000
        } else {
            300_000
        };
        let table: Arc<Table<u64, AtomicU64, ()>> = Arc::new(Table::with_shards(2, ()));
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
                        match table.read0(&k, bump) {
                            Some(Ok(_)) => {}
                            Some(Err(Gone)) => panic!("nothing is evicted here"),
                            None => table.entry0(k, |slot| match slot {
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
            .filter_map(|k| table.read0(&k, read))
            .map(|r| r.unwrap())
            .sum();
        assert_eq!(kept, made);
        // No reader is left: everything replaced is freed.
        assert_eq!(table.retired(), 0);
    }

    /// A key whose `Drop` may panic, whose `Hash`, `Eq` and `Clone` may panic on a chosen call,
    /// and which records every copy made and dropped (by id), so that a test sees each copy
    /// dropped exactly once.
    struct Touchy {
        id: u64,
        log: Arc<Log>,
    }

    #[derive(Default)]
    struct Log {
        /// Ids of the copies made (each key and each clone), in order.
        made: std::sync::Mutex<Vec<u64>>,
        /// Ids dropped, in order.
        dropped: std::sync::Mutex<Vec<u64>>,
        /// Clone calls left before one panics (`u64::MAX`: never).
        clones_until_panic: AtomicU64,
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
            log.clones_until_panic.store(u64::MAX, Ordering::Relaxed);
            Arc::new(log)
        }

        fn key(self: &Arc<Log>, id: u64) -> Touchy {
            self.made.lock().unwrap().push(id);
            Touchy {
                id,
                log: self.clone(),
            }
        }

        /// The ids of the copies alive (made, not dropped), sorted; panics if a copy was
        /// dropped that was not alive (a double drop).
        fn live(&self) -> Vec<u64> {
            let mut live: HashMap<u64, usize> = HashMap::new();
            for &id in self.made.lock().unwrap().iter() {
                *live.entry(id).or_default() += 1;
            }
            for &id in self.dropped.lock().unwrap().iter() {
                let n = live.get_mut(&id).expect("dropped, never made");
                *n = n.checked_sub(1).expect("dropped twice");
            }
            let mut ids: Vec<u64> = live
                .into_iter()
                .flat_map(|(id, n)| std::iter::repeat_n(id, n))
                .collect();
            ids.sort_unstable();
            ids
        }
    }

    impl Clone for Touchy {
        fn clone(&self) -> Touchy {
            if countdown(&self.log.clones_until_panic) {
                panic!("clone");
            }
            self.log.key(self.id)
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

    /// Nothing waits to be freed, the keys of `ids` are the only ones alive, and dropping the
    /// table drops them.
    fn drops_the_last(
        table: Table<Touchy, AtomicU64, ()>,
        log: &Arc<Log>,
        ids: std::ops::Range<u64>,
    ) {
        assert_eq!(table.retired(), 0);
        assert_eq!(log.live(), ids.collect::<Vec<_>>());
        drop(table);
        assert_eq!(log.live(), Vec::<u64>::new());
    }

    /// Every key of `ids` is held once, with its id as its word.
    fn holds(table: &Table<Touchy, AtomicU64, ()>, log: &Arc<Log>, ids: std::ops::Range<u64>) {
        for id in ids {
            assert_eq!(table.read0(&log.key(id), read), Some(Ok(id)));
        }
    }

    fn quietly<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
    }

    /// Finding (a): a key whose `Drop` panics while its entry is freed. Every other key is still
    /// dropped, each copy exactly once, the panic reaches the caller, and later reclamation and
    /// the table's drop drop nothing twice (before the fix: a double free).
    #[test]
    fn a_panicking_drop_while_freeing_drops_every_key_once() {
        let log = Log::new();
        let table: Table<Touchy, AtomicU64, ()> = Table::with_shards(1, ());
        for id in 0..40 {
            put(&table, log.key(id), id);
        }
        // The growths' old copies are gone already: nothing reads the table.
        assert_eq!(log.live(), (0..40).collect::<Vec<_>>());
        log.panic_on_drop.store(7, Ordering::Relaxed);
        // Evict ids 0 to 19 (7 among them): the sweep itself runs no `Drop` and completes; the
        // freeing that follows drops them all and passes key 7's panic on.
        assert_eq!(table.retain0(|w| w.load(Ordering::Relaxed) < 20), 20);
        let freed = quietly(|| table.reclaim_now());
        assert!(freed.is_err(), "the drop's panic reaches the caller");
        assert_eq!(log.live(), (20..40).collect::<Vec<_>>());
        assert_eq!(table.len(), 20);
        assert_eq!(table.unreclaimed(), 0);
        table.shrink_to_fit();
        drops_the_last(table, &log, 20..40);
    }

    /// Finding (b): `Hash` or `Clone` panicking in a rebuild (which clones and hashes every live
    /// key into the new table before it changes anything). The table is left as it was: every
    /// key found once, with its own state (before the fix: keys left unreachable behind `MOVED`
    /// slots, a second state opened for each); the clones made are dropped; the next insert
    /// grows it.
    #[test]
    fn a_panicking_hash_or_clone_in_a_rebuild_leaves_the_table_whole() {
        for clone in [false, true] {
            let log = Log::new();
            let table: Table<Touchy, AtomicU64, ()> = Table::with_shards(1, ());
            for id in 0..14 {
                put(&table, log.key(id), id);
            }
            assert_eq!(table.capacity(), 16);
            // Key 14 needs a growth: the sixth `Hash` (the new key's, then five clones') or the
            // sixth `Clone` panics, halfway through the new table.
            if clone {
                log.clones_until_panic.store(5, Ordering::Relaxed);
            } else {
                log.hashes_until_panic.store(5, Ordering::Relaxed);
            }
            assert!(quietly(|| put(&table, log.key(14), 14)).is_err());
            assert_eq!(table.len(), 14);
            assert_eq!(table.capacity(), 16);
            assert_eq!(log.live(), (0..14).collect::<Vec<_>>(), "clone {clone}");
            holds(&table, &log, 0..14);
            // The next one grows it, and every key is found exactly once, with its own state.
            put(&table, log.key(14), 14);
            assert_eq!(table.capacity(), 32);
            holds(&table, &log, 0..15);
            // An insert with `Eq` panicking in the probe of the new key: nothing changed either.
            log.eqs_until_panic.store(0, Ordering::Relaxed);
            let _ = quietly(|| put(&table, log.key(3), 99));
            log.eqs_until_panic.store(u64::MAX, Ordering::Relaxed);
            assert_eq!(table.len(), 15);
            holds(&table, &log, 0..15);
            drops_the_last(table, &log, 0..15);
        }
    }

    /// A key's clone made by a rebuild whose `Hash` then panics is dropped after the shard lock
    /// is released, like every other drop the table runs: its `Drop` may use the table (before
    /// the fix, found by the fuzz target: dropped as the panic unwound, under the lock).
    #[test]
    fn a_clone_whose_hash_panics_is_dropped_after_the_lock() {
        static TABLE: std::sync::OnceLock<&'static Table<Probe, AtomicU64, ()>> =
            std::sync::OnceLock::new();
        // `std`'s atomics: statics need `const` constructors, which loom's lack.
        use std::sync::atomic::{AtomicBool as StdBool, AtomicU64 as StdU64};
        static PANIC_NEXT_HASH: StdBool = StdBool::new(false);
        static DROPS: StdU64 = StdU64::new(0);
        static UNDER_A_LOCK: StdU64 = StdU64::new(0);
        #[derive(Clone, PartialEq, Eq)]
        struct Probe(u64);
        impl Hash for Probe {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                if PANIC_NEXT_HASH.swap(false, Ordering::Relaxed) {
                    panic!("hash");
                }
                self.0.hash(h)
            }
        }
        impl Drop for Probe {
            fn drop(&mut self) {
                let Some(table) = TABLE.get() else { return };
                DROPS.fetch_add(1, Ordering::Relaxed);
                // Every shard's lock, from another thread: a lock this thread holds keeps it
                // waiting (it gets the lock once the table lets go, and ends).
                let (done, wait) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    let _ = done.send(table.len());
                });
                if wait
                    .recv_timeout(std::time::Duration::from_secs(2))
                    .is_err()
                {
                    UNDER_A_LOCK.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        let table = TABLE.get_or_init(|| Box::leak(Box::new(Table::with_shards(1, ()))));
        for id in 0..10 {
            put(table, Probe(id), id);
        }
        let drops = DROPS.load(Ordering::Relaxed);
        // The rebuild's first `Hash` is that of the first clone.
        PANIC_NEXT_HASH.store(true, Ordering::Relaxed);
        assert!(quietly(|| table.rebuild_all()).is_err());
        assert_eq!(
            DROPS.load(Ordering::Relaxed) - drops,
            1,
            "the clone, dropped once"
        );
        assert_eq!(
            UNDER_A_LOCK.load(Ordering::Relaxed),
            0,
            "dropped under a lock"
        );
        assert_eq!(table.len(), 10);
    }

    /// A key whose `Eq` writes through `&self`: every comparison counts itself in a counter its
    /// copies share, and allocates a memo in the copy compared.
    struct Counting {
        id: u64,
        compared: Arc<AtomicU64>,
        memo: std::sync::Mutex<Option<String>>,
    }

    impl Clone for Counting {
        fn clone(&self) -> Counting {
            Counting {
                id: self.id,
                compared: self.compared.clone(),
                memo: std::sync::Mutex::new(None),
            }
        }
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
            other
                .memo
                .lock()
                .unwrap()
                .get_or_insert_with(|| other.id.to_string());
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
            compared: Arc::new(AtomicU64::new(0)),
            memo: std::sync::Mutex::new(None),
        }
    }

    /// Finding (c): lookups compare (and so write into) held keys while a thread rebuilds the
    /// table over and over. A key a reader holds is never moved (a rebuild clones it, and the old
    /// copy lives until its readers have left), so every write lands on a live object, and every
    /// copy's memo is freed once (before the fix: writes to a bitwise copy nobody owned, a
    /// double free of the memo under AddressSanitizer).
    #[test]
    fn writes_through_a_held_key_are_never_lost_to_a_rebuild() {
        const KEYS: u64 = 64;
        let lookups = if cfg!(debug_assertions) {
            20_000
        } else {
            200_000
        };
        let table: Table<Counting, AtomicU64, ()> = Table::with_shards(1, ());
        let held: Vec<Arc<AtomicU64>> = (0..KEYS)
            .map(|id| {
                let key = counting(id);
                let compared = key.compared.clone();
                put(&table, key, id);
                compared
            })
            .collect();
        let counted = || held.iter().map(|c| c.load(Ordering::Relaxed)).sum::<u64>();
        let before = counted();
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
                    assert!(table.read0(&key, |_| Ok(())).is_some());
                    own += key.compared.load(Ordering::Relaxed);
                }
                own
            });
            let own = probe.join().unwrap();
            stop.store(true, Ordering::Relaxed);
            own
        });
        // Each comparison counted once in the probe key and once in a held key's copies.
        assert_eq!(counted() - before, probes);
        assert_eq!(table.retired(), 0);
    }

    /// A key whose drop waits at a gate (the original only: clones have none), then checks that
    /// its own bytes are still there.
    struct Gated {
        id: u64,
        canary: u64,
        gate: Option<Arc<(Barrier, Barrier)>>,
    }

    const CANARY: u64 = 0x5afe_c0de_5afe_c0de;

    impl Clone for Gated {
        fn clone(&self) -> Gated {
            Gated {
                id: self.id,
                canary: CANARY,
                gate: None,
            }
        }
    }
    same_by!(Gated, id);
    impl Drop for Gated {
        fn drop(&mut self) {
            if let Some(gate) = self.gate.take() {
                gate.0.wait();
                gate.1.wait();
            }
            assert_eq!(
                std::hint::black_box(self.canary),
                CANARY,
                "a key dropped in freed memory"
            );
        }
    }

    /// A removed entry is dropped in place, in the table it was removed from; that table, retired
    /// later, may be collected and freed by another thread while the entry's drop is still
    /// running. The table's memory outlives the drop (before the fix, found by the stress test:
    /// the key's drop ran in freed memory; AddressSanitizer reports it as a use after free).
    #[test]
    fn a_removed_entry_is_dropped_before_its_table_is_freed() {
        let gate = Arc::new((Barrier::new(2), Barrier::new(2)));
        let table: Table<Gated, AtomicU64, ()> = Table::with_shards(1, ());
        let gated = Gated {
            id: 1,
            canary: CANARY,
            gate: Some(gate.clone()),
        };
        put(&table, gated, 1);
        put(
            &table,
            Gated {
                id: 2,
                canary: CANARY,
                gate: None,
            },
            2,
        );
        // Key 1 removed (its entry queued in one batch), nothing freed yet.
        assert_eq!(table.retain0(|w| w.load(Ordering::Relaxed) == 1), 1);
        std::thread::scope(|s| {
            // Collects the entry's batch and drops the key, which waits at the gate.
            let dropper = s.spawn(|| table.reclaim_now());
            gate.0.wait();
            // Meanwhile the table the entry sits in is replaced, and its batch collected and
            // freed by this thread.
            table.rebuild_all();
            gate.1.wait();
            dropper.join().unwrap();
        });
        assert_eq!(table.retired(), 0);
        assert_eq!(table.len(), 1);
    }

    /// Finding (d): a reader parked inside one table's lookup holds none of another table's
    /// memory (one domain per table).
    #[test]
    fn a_reader_parked_in_one_table_does_not_hold_another() {
        let parked: Table<u64, AtomicU64, ()> = Table::with_shards(1, ());
        put(&parked, 1, 1);
        let churned: Table<u64, AtomicU64, ()> = Table::with_shards(1, ());
        let (entered, release) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                parked.read0(&1, |_| {
                    entered.wait();
                    release.wait();
                    Ok(())
                })
            });
            entered.wait();
            for round in 0..100u64 {
                for k in 0..20 {
                    put(&churned, round * 20 + k, 0);
                }
                churned.retain0(|_| true);
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
        let table: Table<u64, AtomicU64, ()> = Table::with_shards(1, ());
        put(&table, 1, 1);
        put(&table, 2, 2);
        let (entered, release) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                let first = AtomicBool::new(true);
                table.read0(&1, |outer| {
                    if first.swap(false, Ordering::Relaxed) {
                        assert_eq!(table.read0(&2, read), Some(Ok(2)));
                        entered.wait();
                        release.wait();
                    }
                    read(outer)
                })
            });
            entered.wait();
            assert_eq!(table.retain0(|w| crate::cas::mark_gone(w, 1)), 1);
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
        #[derive(Clone, PartialEq, Eq, Hash)]
        struct UserId(u64);
        impl Borrow<u64> for UserId {
            fn borrow(&self) -> &u64 {
                &self.0
            }
        }
        let table: Table<UserId, AtomicU64, ()> = Table::with_shards(4, ());
        for id in 0..1_000 {
            put(&table, UserId(id), id);
        }
        for id in 0..1_000u64 {
            assert_eq!(table.read0(&id, read), Some(Ok(id)));
        }
        let strings: Table<String, AtomicU64, ()> = Table::with_shards(4, ());
        put(&strings, "alice".to_string(), 1);
        assert_eq!(strings.read0("alice", read), Some(Ok(1)));
    }

    /// Finding (k): a table of large keys is never built on the stack (16 inline entries of
    /// 128 KiB keys are 2 MiB, a test thread's whole stack), and a key's `Drop` runs
    /// with no lock held, so a key whose drop uses the same table does not deadlock (here the old
    /// copies a growth leaves behind insert keys too, as they are dropped).
    #[test]
    fn a_key_dropped_by_the_table_may_use_it() {
        #[derive(Clone)]
        struct Reentrant(u64);
        static TABLE: std::sync::OnceLock<&'static Table<Reentrant, AtomicU64, ()>> =
            std::sync::OnceLock::new();
        same_by!(Reentrant, 0, Borrow<u64>);
        impl Drop for Reentrant {
            fn drop(&mut self) {
                if let Some(table) = TABLE.get() {
                    // A lookup and a write, from inside a drop the table runs.
                    let _ = table.read0(&0u64, |_| Ok(()));
                    if self.0 < 1_000 {
                        put(table, Reentrant(self.0 + 1_000), 1_000);
                    }
                }
            }
        }
        // Reachable from a static for the rest of the process (leak checkers see it held).
        let table = TABLE.get_or_init(|| Box::leak(Box::new(Table::with_shards(1, ()))));
        for id in 0..20 {
            put(table, Reentrant(id), id);
        }
        // The duplicate key is dropped after the lock; removed keys when they are freed.
        table.entry0(Reentrant(3), |_| (None, ()));
        assert!(table.read0(&1_003, |_| Ok(())).is_some());
        assert_eq!(table.retain0(|w| w.load(Ordering::Relaxed) < 5), 5);
        table.reclaim_now();
        for id in 1_000..1_005 {
            assert!(table.read0(&id, |_| Ok(())).is_some(), "{id}");
        }
        // Big keys, stored in the slots: a table of 16 KiB keys grows and finds them.
        const BIG: usize = 16 << 10;
        let big: Table<[u8; BIG], AtomicU64, ()> = Table::with_shards(1, ());
        for i in 0..20u8 {
            let mut key = [0u8; BIG];
            key[0] = i;
            put(&big, key, u64::from(i));
        }
        let mut key = [0u8; BIG];
        key[0] = 19;
        assert_eq!((big.len(), big.read0(&key, read)), (20, Some(Ok(19))));
        // A table of 64 KiB keys made on a thread with 512 KiB of stack, where 16 entries
        // (1 MiB) built on the stack would overflow it.
        let made = std::thread::Builder::new()
            .stack_size(512 << 10)
            .spawn(|| Raw::<[u8; 64 << 10], AtomicU64, ()>::new(64, ()).capacity())
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(made, 64);
    }
}
