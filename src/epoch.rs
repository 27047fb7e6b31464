//! The keyed table's epoch: what keeps a removed entry or a replaced table alive while lookups that
//! may have seen it are still running, without a hardware barrier on the lookup's side where the
//! platform allows. Each table has a [`Domain`] of its own, so a reader of one limiter never holds
//! another limiter's memory.
//!
//! # The protocol
//!
//! - **A reader** (one lookup) has a slot of its own in the domain: the slot of its thread's
//!   index ([`thread_index`]). Entering, it stores the domain's current epoch `e` (read with
//!   Acquire) in its slot, then issues a *light* barrier, then loads the table's pointer; leaving,
//!   it stores 0 (Release).
//! - **A reclaimer** that has unlinked something calls [`Domain::retire`], which moves the epoch
//!   from `r` to `r + 1` (AcqRel) and answers `r`: a reader that enters later reads `r + 1` or
//!   more, and through that Acquire load sees the unlinking. It may be freed once
//!   [`Domain::horizon`] answers more than `r`: the horizon issues a *heavy* barrier, then reads
//!   every slot (Acquire) and answers the smallest epoch a reader is in (or `u64::MAX`).
//! - **Why it is enough.** The light and heavy barriers together order the reader's store to its
//!   slot against its load of the pointer, and the reclaimer's unlinking against its load of the
//!   slot: either the horizon sees the reader in (at `r` or before, and waits), or the reader's
//!   load of the pointer sees the thing unlinked. A reader seen leaving (0) has finished with
//!   what it read, published by its Release store. This is the store-buffering pattern, forbidden
//!   when both sides fence.
//! - **The barriers.** On Linux, when `membarrier(2)` says (`MEMBARRIER_CMD_QUERY`) it offers the
//!   private expedited command and registering for it succeeds, the heavy barrier is that command,
//!   which makes every running thread of the process execute a full barrier, and the light barrier
//!   is only a compiler fence: a lookup then pays a plain store to its own slot, no
//!   read-modify-write and no fence. Elsewhere, or when the query or the registration fails (a
//!   seccomp filter that answers 0 to everything answers an empty query), both are
//!   `fence(SeqCst)`. The choice is made once per process, before any reader relies on it. Should
//!   the command fail later (a filter installed after start-up), readers still do not fence, so
//!   the heavy barrier falls back, on x86, to what `FlushProcessWriteBuffers` does on Linux:
//!   changing the protection of a page the process has touched, which the kernel completes only
//!   after interrupting every CPU that has run one of its threads lately. Each such failure is
//!   counted ([`membarrier_failures`]); where there is no fallback (other architectures) or it
//!   fails too, nothing is freed (the keyed limiter's retired budget then bounds the memory
//!   held, and new keys get the overflow policy at it). One case cannot be told apart: a filter
//!   installed after registration that answers 0 without running the call looks like a barrier
//!   made, and readers then have only a compiler fence against the reclaimer. Nothing in the
//!   process can see it (the kernel's answer is the only evidence there is), so a program that
//!   filters `membarrier(2)` must filter it before its first keyed lookup, or refuse it with an
//!   error (which is counted and fallen back from). `tests/keyed_seccomp.rs` checks the two
//!   cases that can be handled. Under loom both barriers are `fence(SeqCst)`, which loom
//!   models (`loom-tests/tests/epoch.rs`).
//!
//! # Nesting, signals and thread exit
//!
//! The slot itself says whether its thread is reading: a pin finds its own slot non-zero when it
//! is nested inside another pin of the same domain (a key's `Eq` that looks up the same limiter,
//! or a signal handler that interrupted a lookup), and then neither enters nor leaves: the outer
//! pin protects both. There is no separate depth counter to raise before entering, so no instant
//! at which a handler that interrupts the pin could find the slot claimed but not yet published
//! (entering is one store; in fence mode a nested pin fences too, so its loads cannot pass the
//! outer's store). A lookup is async-signal-safe as far as this module goes once its thread has
//! an index and the domain's block of slots for it exists (both are made by the thread's first
//! lookup on that limiter, which may allocate); the keyed limiter's paths that take a lock (a new
//! key, a lookup with no index) are not.
//!
//! Thread indices are process-wide, lock-free to take and give back, and given back when the
//! thread exits (a pin made from a thread-local destructor after that gets no index, and the
//! lookup runs under the shard lock instead). At most [`MAX_THREADS`] threads hold one at once;
//! lookups of threads beyond that also run under the lock.
//!
//! # fork
//!
//! A child made by `fork` has one thread, but inherits every slot of its parent, and a slot some
//! other parent thread held pinned at the fork would stay pinned forever. A `pthread_atfork` child
//! handler (registered with the first thread index) marks every index taken at the fork, but the
//! forking thread's own, as dead: the horizon ignores dead slots, and dead indices are never given
//! out again in that process. Locks are another matter: as with any `std` mutex, a shard's lock
//! held by another thread at the fork stays held in the child, so a child of a multi-threaded
//! process that uses a limiter shared with the parent must not have forked during another
//! thread's write to it (POSIX allows only async-signal-safe calls there).
//!
//! # Safety
//!
//! The invariants the `unsafe` blocks here keep:
//!
//! - A block of slots is allocated once, published by a compare-and-swap (AcqRel) and freed only
//!   when the domain drops (`&mut`), so a reference to a slot lives as long as the domain.
//! - A slot is written only by the thread holding its index (entering and leaving) and, in
//!   `fork`'s child, by no one: the handler only marks indices dead.

use crossbeam_utils::CachePadded;

use crate::sync::{fence, AtomicPtr, AtomicU64, Ordering};

/// Slots per block: a domain allocates its slots a block at a time, as thread indices reach them.
const BLOCK: usize = 16;
/// Blocks per domain (two under loom, whose models have a few readers and track every atomic).
const BLOCKS: usize = if cfg!(tollgate_loom) { 2 } else { 128 };
/// The most threads reading through the epoch at once (more read under the shard lock).
pub(crate) const MAX_THREADS: usize = BLOCK * BLOCKS;

/// A block of reader slots: the epoch each reader entered at, or 0.
struct ReaderBlock {
    slots: [CachePadded<AtomicU64>; BLOCK],
}

/// A set of readers and their epoch: one per table.
pub(crate) struct Domain {
    /// Starts at 1: 0 in a slot means "not reading".
    epoch: CachePadded<AtomicU64>,
    /// Whether this process uses `membarrier(2)`: [`fast`], read once here (it never changes
    /// once decided) so that a pin reads a plain field rather than asking a `OnceLock`.
    fast: bool,
    /// Inline, of a constant length: a pin's index, checked against [`MAX_THREADS`], needs no
    /// second bounds check.
    blocks: [AtomicPtr<ReaderBlock>; BLOCKS],
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain").finish_non_exhaustive()
    }
}

/// A reader inside a domain until dropped. Not `Send`: it leaves on the thread it entered.
#[derive(Debug)]
pub(crate) struct Pin<'a> {
    /// The slot to clear when leaving; `None` for a nested pin, which leaves nothing.
    slot: Option<&'a AtomicU64>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for Pin<'_> {
    #[inline]
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            // Release: the reclaimer that reads 0 here (Acquire) frees after this reader's reads.
            slot.store(0, Ordering::Release);
        }
    }
}

impl Default for Domain {
    fn default() -> Domain {
        Domain::new()
    }
}

impl Domain {
    pub(crate) fn new() -> Domain {
        Domain {
            epoch: CachePadded::new(AtomicU64::new(1)),
            fast: fast(),
            blocks: std::array::from_fn(|_| AtomicPtr::new(std::ptr::null_mut())),
        }
    }

    /// The slot of thread index `index`, making its block if it is the first (`None` past
    /// [`MAX_THREADS`]).
    #[inline]
    fn slot(&self, index: usize) -> Option<&AtomicU64> {
        let block = self.blocks.get(index / BLOCK)?;
        // Acquire: pairs with the AcqRel of the compare-and-swap that published the block, so
        // its slots are seen initialized.
        let mut ptr = block.load(Ordering::Acquire);
        if ptr.is_null() {
            ptr = self.make_block(block);
        }
        // SAFETY: a published block lives until the domain drops (module docs, Safety).
        Some(&unsafe { &*ptr }.slots[index % BLOCK])
    }

    #[cold]
    fn make_block(&self, block: &AtomicPtr<ReaderBlock>) -> *mut ReaderBlock {
        let new = Box::into_raw(Box::new(ReaderBlock {
            slots: std::array::from_fn(|_| CachePadded::new(AtomicU64::new(0))),
        }));
        // AcqRel: Release publishes the zeroed slots; Acquire sees another thread's block.
        match block.compare_exchange(
            std::ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => new,
            Err(theirs) => {
                // SAFETY: ours was never published; owned since `Box::into_raw`.
                drop(unsafe { Box::from_raw(new) });
                theirs
            }
        }
    }

    /// Enters as the reader of thread index `index`: `None` if the index has no slot (the caller
    /// then reads under its lock).
    #[inline]
    pub(crate) fn pin_as(&self, index: usize) -> Option<Pin<'_>> {
        Some(self.enter(self.slot(index)?))
    }

    /// Enters through `slot`, this domain's slot of the calling thread's index.
    #[inline(always)]
    fn enter<'a>(&'a self, slot: &'a AtomicU64) -> Pin<'a> {
        // Relaxed: only this thread writes its slot (a signal handler on this thread included),
        // so it reads its own latest store.
        if slot.load(Ordering::Relaxed) != 0 {
            // Nested: the outer pin protects this reader too. In fence mode the fence keeps this
            // reader's loads after the outer's store, which a handler may have interrupted
            // between its store and its fence.
            light_barrier(self.fast);
            return Pin {
                slot: None,
                _not_send: std::marker::PhantomData,
            };
        }
        // Acquire: pairs with `retire`'s AcqRel, so that a reader that reads the new epoch also
        // sees what was unlinked before it.
        let epoch = self.epoch.load(Ordering::Acquire);
        // Relaxed, then the light barrier: together with the heavy barrier of `horizon`, this
        // store is ordered before the reader's loads of table pointers (see the module docs).
        slot.store(epoch, Ordering::Relaxed);
        light_barrier(self.fast);
        Pin {
            slot: Some(slot),
            _not_send: std::marker::PhantomData,
        }
    }

    /// Enters as the calling thread's reader: `None` when the thread has no index (its
    /// thread-locals are being destroyed, or [`MAX_THREADS`] threads hold one).
    #[cfg(not(tollgate_loom))]
    #[inline]
    pub(crate) fn pin(&self) -> Option<Pin<'_>> {
        self.pin_as(thread_index::current()?)
    }

    /// To call after unlinking something readers may still hold: moves the epoch on and answers
    /// the epoch it was at, `r`. What was unlinked may be freed once [`Domain::horizon`] answers
    /// more than `r`.
    pub(crate) fn retire(&self) -> u64 {
        // AcqRel: the Release half publishes the unlinking to readers that read the new epoch.
        self.epoch.fetch_add(1, Ordering::AcqRel)
    }

    /// The smallest epoch a reader is in now (`u64::MAX` when none is): what was retired at an
    /// epoch below it is no longer held by any reader. `None` when the readers cannot be seen
    /// (the heavy barrier failed): nothing may be freed.
    pub(crate) fn horizon(&self) -> Option<u64> {
        if !heavy_barrier() {
            return None;
        }
        let mut min = u64::MAX;
        for (b, block) in self.blocks.iter().enumerate() {
            // Acquire: as in `slot`.
            let ptr = block.load(Ordering::Acquire);
            if ptr.is_null() {
                continue;
            }
            // SAFETY: a published block lives until the domain drops.
            let block = unsafe { &*ptr };
            for (i, slot) in block.slots.iter().enumerate() {
                // Acquire: pairs with the Release of `Pin::drop` (a reader seen leaving has
                // finished reading).
                let at = slot.load(Ordering::Acquire);
                if at != 0 && !dead(b * BLOCK + i) {
                    min = min.min(at);
                }
            }
        }
        Some(min)
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        for block in self.blocks.iter_mut() {
            // `&mut self`, no reader is left: a plain read (under loom not an explored load, so a
            // model that panics can still unwind through this drop).
            #[cfg(not(tollgate_loom))]
            let ptr = *block.get_mut();
            #[cfg(tollgate_loom)]
            let ptr = block.with_mut(|ptr| *ptr);
            if !ptr.is_null() {
                // SAFETY: published once, freed once, here, with no reader left.
                drop(unsafe { Box::from_raw(ptr) });
            }
        }
    }
}

/// Whether thread index `index` belonged to a thread that does not exist in this process (a
/// parent's thread, in the child of a `fork`).
#[cfg(not(tollgate_loom))]
fn dead(index: usize) -> bool {
    thread_index::dead(index)
}

#[cfg(tollgate_loom)]
fn dead(_index: usize) -> bool {
    false
}

/// The reader's side: a compiler fence where the heavy barrier is `membarrier(2)`, a full fence
/// otherwise.
#[inline]
fn light_barrier(fast: bool) {
    if fast {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// How many times the heavy barrier's `membarrier(2)` failed after the process registered for it
/// (see the module docs: each such barrier fell back to a page-protection flush). 0 where
/// `membarrier(2)` is not used.
#[cfg(not(tollgate_loom))]
pub(crate) fn membarrier_failures() -> u64 {
    #[cfg(target_os = "linux")]
    {
        // Relaxed: a statistic.
        membarrier::FAILURES.load(Ordering::Relaxed)
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// The reclaimer's side: `membarrier(2)` where the process registered for it, a full fence
/// otherwise. Answers whether the barrier was made.
fn heavy_barrier() -> bool {
    if !fast() {
        fence(Ordering::SeqCst);
        return true;
    }
    membarrier::expedited() || membarrier::fallback()
}

/// Whether this process uses `membarrier(2)` (decided once, by querying and registering).
#[cfg(all(target_os = "linux", not(tollgate_loom)))]
#[inline]
fn fast() -> bool {
    static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAST.get_or_init(membarrier::usable)
}

#[cfg(not(all(target_os = "linux", not(tollgate_loom))))]
#[inline]
fn fast() -> bool {
    false
}

#[cfg(all(target_os = "linux", not(tollgate_loom)))]
mod membarrier {
    use crate::sync::{AtomicU64, Ordering};

    /// `MEMBARRIER_CMD_QUERY`.
    const QUERY: libc::c_long = 0;
    /// `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (Linux 4.14).
    const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    /// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED` (Linux 4.14).
    const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// Heavy barriers whose `membarrier(2)` failed after registration.
    pub(super) static FAILURES: AtomicU64 = AtomicU64::new(0);

    /// Set by tests to make the next expedited barriers fail, as a filter installed later would.
    #[cfg(test)]
    pub(super) static FAIL_FOR_TEST: AtomicU64 = AtomicU64::new(0);

    fn call(command: libc::c_long) -> libc::c_long {
        let none: libc::c_long = 0;
        // SAFETY: `membarrier(cmd, flags = 0, cpu_id = 0)` reads no user memory; an unknown or
        // refused command returns -1 with errno set.
        unsafe { libc::syscall(libc::SYS_membarrier, command, none, none) }
    }

    /// Whether the kernel offers the private expedited command (asked first: a filter that
    /// answers 0 without running the call answers an empty set here) and registering succeeded.
    pub(super) fn usable() -> bool {
        let offered = call(QUERY);
        let both = PRIVATE_EXPEDITED | REGISTER_PRIVATE_EXPEDITED;
        offered > 0 && offered & both == both && call(REGISTER_PRIVATE_EXPEDITED) == 0
    }

    /// A full barrier on every running thread of the process.
    pub(super) fn expedited() -> bool {
        #[cfg(test)]
        {
            if FAIL_FOR_TEST
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                return false;
            }
        }
        call(PRIVATE_EXPEDITED) == 0 || {
            // A child after `fork` is not registered (registration is per process): once more.
            call(REGISTER_PRIVATE_EXPEDITED) == 0 && call(PRIVATE_EXPEDITED) == 0
        }
    }

    /// The barrier when `membarrier(2)` failed after registration: counted, then made by
    /// changing the protection of a page this process has written, which the kernel completes
    /// only after every CPU running one of the process's threads has taken an interrupt (a
    /// serializing event) to flush its view of the page. Answers whether it was made.
    pub(super) fn fallback() -> bool {
        // Relaxed: a statistic.
        FAILURES.fetch_add(1, Ordering::Relaxed);
        flush_process_write_buffers()
    }

    /// Elsewhere than x86 a page's TLB entries can be invalidated by a broadcast instruction
    /// (arm64's `TLBI ... IS`) that interrupts no CPU, so the protection change is no barrier
    /// there: nothing may be freed (the table's budget then bounds what is held).
    #[cfg(not(any(target_arch = "x86_64", target_arch = "x86")))]
    fn flush_process_write_buffers() -> bool {
        false
    }

    /// On x86 Linux the kernel sends a TLB-shootdown interrupt to every CPU that has run the
    /// process's address space lately, and an interrupt is a serializing event there: the
    /// technique CoreCLR's `FlushProcessWriteBuffers` uses.
    #[cfg(any(target_arch = "x86_64", target_arch = "x86"))]
    fn flush_process_write_buffers() -> bool {
        use std::sync::Mutex;
        struct Page(*mut libc::c_void);
        // SAFETY: the page's address is only handed to the kernel, under the lock.
        unsafe impl Send for Page {}
        static PAGE: Mutex<Option<Page>> = Mutex::new(None);
        let mut page = crate::sync::lock(&PAGE);
        // SAFETY: `sysconf` reads nothing of ours.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let Ok(size) = usize::try_from(size) else {
            return false;
        };
        if page.is_none() {
            // SAFETY: an anonymous private mapping of one page; checked for failure.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return false;
            }
            *page = Some(Page(p));
        }
        let Some(Page(p)) = *page else {
            return false;
        };
        // SAFETY: `p` is our own page, mapped above and never unmapped: made writable, touched
        // (so it is resident and in the TLBs of the CPUs that ran us), then made read-only,
        // which shoots down every CPU's mapping of it.
        unsafe {
            libc::mprotect(p, size, libc::PROT_READ | libc::PROT_WRITE) == 0 && {
                std::ptr::write_volatile(p.cast::<u8>(), 1);
                libc::mprotect(p, size, libc::PROT_READ) == 0
            }
        }
    }
}

#[cfg(not(all(target_os = "linux", not(tollgate_loom))))]
mod membarrier {
    pub(super) fn expedited() -> bool {
        false
    }

    pub(super) fn fallback() -> bool {
        false
    }
}

/// The domain the direct limiters' quota pointers share (`crate::change`): one for the process,
/// never dropped, so a thread's slot in it can be kept in a thread-local and a pin costs one
/// thread-local read besides the enter.
#[cfg(not(tollgate_loom))]
pub(crate) fn global() -> &'static Domain {
    static GLOBAL: std::sync::OnceLock<Domain> = std::sync::OnceLock::new();
    GLOBAL.get_or_init(Domain::new)
}

/// Enters [`global`] as the calling thread's reader: `None` when the thread has no index (its
/// thread-locals are being destroyed, or [`MAX_THREADS`] threads hold one).
#[cfg(not(tollgate_loom))]
#[inline(always)]
pub(crate) fn pin_global() -> Option<Pin<'static>> {
    let (domain, slot) = match thread_index::GLOBAL_SLOT.try_with(std::cell::Cell::get) {
        Ok(Some(cached)) => cached,
        _ => global_slot()?,
    };
    Some(domain.enter(slot))
}

/// The calling thread's slot in [`global`], cached in the thread-local that the thread's index
/// clears when it is given back (so a slot is never used by two threads).
#[cfg(not(tollgate_loom))]
#[cold]
#[inline(never)]
fn global_slot() -> Option<(&'static Domain, &'static AtomicU64)> {
    let index = thread_index::current()?;
    let domain = global();
    let slot = domain.slot(index)?;
    thread_index::GLOBAL_SLOT
        .try_with(|cached| cached.set(Some((domain, slot))))
        .ok()?;
    Some((domain, slot))
}

/// Process-wide thread indices: small integers, one per thread that reads a table, given back
/// when the thread exits, so that a domain's slots stay as few as the threads reading at once.
#[cfg(not(tollgate_loom))]
pub(crate) mod thread_index {
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Once;

    use super::MAX_THREADS;

    const WORDS: usize = MAX_THREADS / 64;

    /// Bit `i` set: index `i` is held by a thread.
    static TAKEN: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];
    /// Bit `i` set: index `i` was held at a `fork` by a thread this process does not have.
    static DEAD: [AtomicU64; WORDS] = [const { AtomicU64::new(0) }; WORDS];

    /// `INDEX` before the thread has an index.
    const NONE: usize = usize::MAX;
    /// `INDEX` once the thread has given its index back (its thread-locals are being destroyed).
    const EXITED: usize = usize::MAX - 1;

    thread_local! {
        /// This thread's index (no destructor, so it is readable until the thread ends).
        static INDEX: Cell<usize> = const { Cell::new(NONE) };
        /// Gives the index back when the thread exits.
        static HOLDER: Holder = const { Holder };
        /// The thread's slot in the global domain (`super::pin_global`), while it holds its
        /// index: cleared before the index is given back.
        pub(crate) static GLOBAL_SLOT: Cell<Option<(&'static super::Domain, &'static AtomicU64)>> =
            const { Cell::new(None) };
    }

    struct Holder;

    impl Drop for Holder {
        fn drop(&mut self) {
            // The cached slot first: a pin made after this (from another thread-local's
            // destructor) finds no slot and no index, and reads under the lock.
            let _ = GLOBAL_SLOT.try_with(|cached| cached.set(None));
            let _ = INDEX.try_with(|index| {
                let i = index.replace(EXITED);
                if i < MAX_THREADS {
                    give_back(i);
                }
            });
        }
    }

    /// The calling thread's index, taking one on its first call.
    #[inline]
    pub(crate) fn current() -> Option<usize> {
        let i = INDEX.try_with(Cell::get).ok()?;
        if i < MAX_THREADS {
            return Some(i);
        }
        if i == EXITED {
            return None;
        }
        take()
    }

    #[cold]
    fn take() -> Option<usize> {
        static AT_FORK: Once = Once::new();
        AT_FORK.call_once(register_at_fork);
        // The holder must exist to give the index back: if this thread can no longer make
        // thread-locals, it gets no index.
        HOLDER.try_with(|_| ()).ok()?;
        for (w, word) in TAKEN.iter().enumerate() {
            // Relaxed: the index is the bit, and nothing else is published through it (a slot
            // is written only by its index's holder, and read by horizons through the slot's own
            // orderings).
            let mut bits = word.load(Ordering::Relaxed);
            while bits != u64::MAX {
                let bit = (!bits).trailing_zeros();
                match word.compare_exchange_weak(
                    bits,
                    bits | 1 << bit,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let i = w * 64 + bit as usize;
                        INDEX.with(|index| index.set(i));
                        return Some(i);
                    }
                    Err(seen) => bits = seen,
                }
            }
        }
        None
    }

    fn give_back(i: usize) {
        // Release: the thread's last store to its slots (a leave, with Release) is done before
        // another thread can take the index. A dead index is never given back (its slots may
        // hold a stale epoch in this process).
        if !dead(i) {
            TAKEN[i / 64].fetch_and(!(1 << (i % 64)), Ordering::Release);
        }
    }

    /// Whether `i` was held at a `fork` by a thread this process does not have.
    #[inline]
    pub(crate) fn dead(i: usize) -> bool {
        // Relaxed: written only in `fork`'s child, before any other thread exists there.
        DEAD[i / 64].load(Ordering::Relaxed) & 1 << (i % 64) != 0
    }

    #[cfg(unix)]
    fn register_at_fork() {
        extern "C" fn child() {
            // Async-signal-safe: atomics and a thread-local without a destructor only. Every index
            // taken at the fork but this thread's belongs to a thread the child does not have.
            let me = INDEX.try_with(Cell::get).unwrap_or(NONE);
            for (w, (taken, dead)) in TAKEN.iter().zip(DEAD.iter()).enumerate() {
                let mut bits = taken.load(Ordering::Relaxed);
                if me / 64 == w {
                    bits &= !(1 << (me % 64));
                }
                dead.fetch_or(bits, Ordering::Relaxed);
            }
        }
        // SAFETY: registers a handler that only touches atomics and a const thread-local. A
        // failure (ENOMEM) leaves the child without it: documented as what `fork` then does.
        unsafe {
            libc::pthread_atfork(None, None, Some(child));
        }
    }

    #[cfg(not(unix))]
    fn register_at_fork() {}
}

/// The calling loom thread's index, for a pin under loom (indices counted per model run).
#[cfg(tollgate_loom)]
pub(crate) fn loom_index() -> usize {
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
    INDEX.with(|index| {
        if index.get() == usize::MAX {
            // A fresh index per loom thread, counted per execution (see `NEXT`).
            let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            index.set(next % MAX_THREADS);
        }
        index.get()
    })
}

/// A domain and its readers, for the loom models of the epoch (`loom-tests/tests/epoch.rs`).
#[cfg(tollgate_loom)]
#[derive(Debug, Default)]
pub struct ModelDomain {
    domain: Domain,
    readers: std::sync::atomic::AtomicUsize,
}

/// A reader of a [`ModelDomain`]: a thread index of its own.
#[cfg(tollgate_loom)]
#[derive(Debug)]
pub struct ModelReader(usize);

/// A [`ModelReader`] inside its domain until dropped.
#[cfg(tollgate_loom)]
#[derive(Debug)]
pub struct ModelPin<'a>(#[allow(dead_code)] Pin<'a>);

#[cfg(tollgate_loom)]
impl ModelDomain {
    /// A new reader.
    pub fn register(&self) -> ModelReader {
        ModelReader(
            self.readers
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Enters as `reader` (nested if it is already in).
    pub fn pin(&self, reader: &ModelReader) -> ModelPin<'_> {
        ModelPin(self.domain.pin_as(reader.0).expect("few readers"))
    }

    /// See [`Domain::retire`].
    pub fn retire(&self) -> u64 {
        self.domain.retire()
    }

    /// See [`Domain::horizon`] (never `None` under loom: its barrier is a fence).
    pub fn horizon(&self) -> u64 {
        self.domain.horizon().unwrap_or(0)
    }
}

#[cfg(all(test, target_os = "linux", not(tollgate_loom)))]
mod tests {
    use super::*;

    /// Finding (i): when `membarrier(2)` fails after the process registered for it, the heavy
    /// barrier falls back to the page-protection flush (so what no reader holds is still freed),
    /// and the failure is counted rather than silent.
    #[test]
    fn a_failing_membarrier_is_counted_and_falls_back() {
        if !fast() {
            // This kernel (or a filter) refused membarrier at start-up: readers fence, and the
            // heavy barrier is a fence that cannot fail.
            assert!(heavy_barrier());
            return;
        }
        let domain = Domain::new();
        let before = membarrier_failures();
        membarrier::FAIL_FOR_TEST.store(1, Ordering::Relaxed);
        assert_eq!(
            domain.horizon(),
            Some(u64::MAX),
            "no reader: everything may go"
        );
        assert!(membarrier_failures() > before);
        // The next barrier uses membarrier again.
        assert_eq!(domain.horizon(), Some(u64::MAX));
    }

    /// The query comes first: the process uses membarrier only if the kernel lists both
    /// commands, and then its barrier works.
    #[test]
    fn membarrier_is_used_only_when_the_query_offers_it() {
        if fast() {
            assert!(membarrier::expedited());
        }
    }

    /// Finding (h): entering is one store to the slot, and a nested pin leaves the slot as the
    /// outer one set it.
    #[test]
    fn a_nested_pin_neither_enters_nor_leaves() {
        let domain = Domain::new();
        let index = thread_index::current().unwrap();
        let outer = domain.pin_as(index).unwrap();
        let at = domain.slot(index).unwrap().load(Ordering::Relaxed);
        assert_ne!(at, 0);
        domain.retire();
        drop(domain.pin_as(index).unwrap());
        assert_eq!(domain.slot(index).unwrap().load(Ordering::Relaxed), at);
        assert_eq!(domain.horizon(), Some(at));
        drop(outer);
        assert_eq!(domain.horizon(), Some(u64::MAX));
    }

    /// Thread indices are given back when threads exit, so thousands of short-lived threads
    /// reuse a few slots.
    #[test]
    fn short_lived_threads_reuse_their_indices() {
        let mut most = 0;
        for _ in 0..2_000 {
            let i = std::thread::spawn(|| thread_index::current().unwrap())
                .join()
                .unwrap();
            most = most.max(i);
        }
        // Other tests' threads hold some indices meanwhile; far fewer than 2 000.
        assert!(most < 256, "index {most}");
    }
}
