//! The keyed table's epoch: what keeps a replaced table alive while lookups that may have seen it
//! are still running, without a hardware barrier on the lookup's side where the platform allows.
//!
//! # The protocol
//!
//! - **A reader** (one lookup) has a slot of its own. Entering, it stores the domain's current
//!   epoch `e` (read with Acquire) in its slot, then issues a *light* barrier, then loads the
//!   table's pointer; leaving, it stores 0 (Release).
//! - **A reclaimer** that has unlinked a table calls [`Domain::retire`], which moves the epoch from
//!   `r` to `r + 1` (AcqRel) and answers `r`: a reader that enters later reads `r + 1` or more, and
//!   through that Acquire load sees the unlinking. The table may be freed once
//!   [`Domain::horizon`] answers more than `r`: the horizon issues a *heavy* barrier, then reads
//!   every slot (Acquire) and answers the smallest epoch a reader is in (or `u64::MAX`).
//! - **Why it is enough.** The light and heavy barriers together order the reader's store to its
//!   slot against its load of the pointer, and the reclaimer's unlinking against its load of the
//!   slot: either the horizon sees the reader in (at `r` or before, and waits), or the reader's
//!   load of the pointer sees the table unlinked. A reader seen leaving (0) has finished with
//!   what it read, published by its Release store. This is the store-buffering pattern, forbidden
//!   when both sides fence.
//! - **The barriers.** On Linux, when the kernel grants `membarrier(2)`'s private expedited
//!   command, the heavy barrier is that system call, which makes every running thread of the
//!   process execute a full barrier, and the light barrier is only a compiler fence: a lookup then
//!   pays a plain store to its own slot, no read-modify-write and no fence. Elsewhere, or when the
//!   kernel refuses, both are `fence(SeqCst)` (what crossbeam's epoch, the table's first, pays on
//!   every pin). The
//!   choice is made once per process, before any reader relies on it. Under loom both are
//!   `fence(SeqCst)`, which loom models (`loom-tests/tests/epoch.rs`).
//!
//! Slots are reused: a thread's slot is given back when the thread exits. Readers nest (a key's
//! `Eq` could look up another limiter): only the outermost enters and leaves.

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::sync::{fence, lock, AtomicBool, AtomicU64, Mutex, Ordering};

/// One reader's slot: the epoch it entered at, or 0 when it is not reading.
#[derive(Debug)]
pub(crate) struct Slot {
    at: AtomicU64,
    /// Whether a thread holds this slot.
    taken: AtomicBool,
}

impl Slot {
    /// Enters: publishes the epoch this reader may see tables of.
    #[inline]
    pub(crate) fn enter(&self, domain: &Domain) {
        // Acquire: pairs with `retire`'s AcqRel, so that a reader that reads the new epoch also
        // sees the table unlinked before it.
        let epoch = domain.epoch.load(Ordering::Acquire);
        // Relaxed, then the light barrier: together with the heavy barrier of `horizon`, this
        // store is ordered before the reader's loads of table pointers (see the module docs).
        self.at.store(epoch, Ordering::Relaxed);
        light_barrier();
    }

    /// Leaves: everything read since `enter` is done with.
    #[inline]
    pub(crate) fn leave(&self) {
        // Release: the reclaimer that reads 0 here (Acquire) frees after this reader's reads.
        self.at.store(0, Ordering::Release);
    }
}

/// A set of readers and their epoch.
#[derive(Debug)]
pub(crate) struct Domain {
    /// Starts at 1: 0 in a slot means "not reading".
    epoch: AtomicU64,
    slots: Mutex<Vec<Arc<CachePadded<Slot>>>>,
}

/// A slot held by one reader; given back when dropped.
#[derive(Debug)]
pub(crate) struct Registration {
    slot: Arc<CachePadded<Slot>>,
}

impl Registration {
    pub(crate) fn slot(&self) -> &Slot {
        &self.slot
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Release, both: a later holder of the slot, and the horizon, see this reader done.
        self.slot.at.store(0, Ordering::Release);
        self.slot.taken.store(false, Ordering::Release);
    }
}

impl Domain {
    #[cfg(not(tollgate_loom))]
    pub(crate) const fn new() -> Domain {
        Domain {
            epoch: AtomicU64::new(1),
            slots: Mutex::new(Vec::new()),
        }
    }

    #[cfg(tollgate_loom)]
    pub(crate) fn new() -> Domain {
        Domain {
            epoch: AtomicU64::new(1),
            slots: Mutex::new(Vec::new()),
        }
    }

    /// A slot for a new reader: a free one, or a new one.
    pub(crate) fn register(&self) -> Registration {
        let mut slots = lock(&self.slots);
        for slot in slots.iter() {
            // Acquire: pairs with the Release of the registration that gave it back.
            if slot
                .taken
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return Registration { slot: slot.clone() };
            }
        }
        let slot = Arc::new(CachePadded::new(Slot {
            at: AtomicU64::new(0),
            taken: AtomicBool::new(true),
        }));
        slots.push(slot.clone());
        Registration { slot }
    }

    /// To call after unlinking something readers may still hold: moves the epoch on and answers
    /// the epoch it was at, `r`. What was unlinked may be freed once [`Domain::horizon`] answers
    /// more than `r`.
    pub(crate) fn retire(&self) -> u64 {
        // AcqRel: the Release half publishes the unlinking to readers that read the new epoch.
        self.epoch.fetch_add(1, Ordering::AcqRel)
    }

    /// The smallest epoch a reader is in now (`u64::MAX` when none is): what was retired at an
    /// epoch below it is no longer held by any reader.
    pub(crate) fn horizon(&self) -> u64 {
        if !heavy_barrier() {
            // The readers cannot be seen: nothing may be freed (see `heavy_barrier`).
            return 0;
        }
        let slots = lock(&self.slots);
        slots
            .iter()
            // Acquire: pairs with `leave`'s Release (a reader seen leaving has finished reading).
            .map(|slot| slot.at.load(Ordering::Acquire))
            .filter(|&at| at != 0)
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// The reader's side: a compiler fence where the heavy barrier is `membarrier(2)`, a full fence
/// otherwise.
#[inline]
fn light_barrier() {
    if fast() {
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The reclaimer's side: `membarrier(2)` where the kernel granted it, a full fence otherwise.
/// Answers whether the barrier was made: with `fast`, readers do not fence, so if the system call
/// fails (a child process after `fork`, whose registration may not carry over, registers again;
/// if that fails too) no fence here can stand in for theirs, and nothing may be freed.
fn heavy_barrier() -> bool {
    if !fast() {
        fence(Ordering::SeqCst);
        return true;
    }
    membarrier::expedited() || (membarrier::register() && membarrier::expedited())
}

/// Whether this process uses `membarrier(2)` (decided once, by registering for it).
#[cfg(all(target_os = "linux", not(tollgate_loom)))]
#[inline]
fn fast() -> bool {
    static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAST.get_or_init(membarrier::register)
}

#[cfg(not(all(target_os = "linux", not(tollgate_loom))))]
#[inline]
fn fast() -> bool {
    false
}

#[cfg(all(target_os = "linux", not(tollgate_loom)))]
mod membarrier {
    /// `MEMBARRIER_CMD_PRIVATE_EXPEDITED` (Linux 4.14).
    const PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    /// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED` (Linux 4.14).
    const REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn call(command: libc::c_long) -> bool {
        let none: libc::c_long = 0;
        // SAFETY: `membarrier(cmd, flags = 0, cpu_id = 0)` reads no user memory; an unknown or
        // refused command returns -1 with errno set, which is all that is looked at.
        unsafe { libc::syscall(libc::SYS_membarrier, command, none, none) == 0 }
    }

    /// Registers the process for the private expedited command; whether the kernel granted it.
    pub(super) fn register() -> bool {
        call(REGISTER_PRIVATE_EXPEDITED)
    }

    /// A full barrier on every running thread of the process.
    pub(super) fn expedited() -> bool {
        call(PRIVATE_EXPEDITED)
    }
}

#[cfg(not(all(target_os = "linux", not(tollgate_loom))))]
mod membarrier {
    pub(super) fn register() -> bool {
        false
    }

    pub(super) fn expedited() -> bool {
        false
    }
}

/// The process's domain and each thread's slot in it, for the keyed tables.
#[cfg(not(tollgate_loom))]
pub(crate) mod global {
    use std::cell::{Cell, RefCell};

    use super::{Domain, Registration, Slot};

    pub(crate) static DOMAIN: Domain = Domain::new();

    thread_local! {
        /// This thread's slot (valid while `REGISTRATION` holds it) and how deeply it is reading.
        static LOCAL: Local = const {
            Local {
                slot: Cell::new(None),
                depth: Cell::new(0),
            }
        };
        /// Holds the slot; gives it back when the thread exits.
        static REGISTRATION: RefCell<Option<Held>> = const { RefCell::new(None) };
    }

    struct Local {
        slot: Cell<Option<*const Slot>>,
        depth: Cell<u32>,
    }

    /// A reader inside the domain until dropped. Not `Send`: it leaves on the thread it entered.
    #[derive(Debug)]
    pub(crate) struct Pin {
        slot: *const Slot,
    }

    /// Enters the domain, or `None` if this thread can no longer hold a slot (its thread-locals
    /// are being destroyed): the caller then looks under its lock instead.
    #[inline]
    pub(crate) fn pin() -> Option<Pin> {
        LOCAL
            .try_with(|local| {
                let slot = match local.slot.get() {
                    Some(slot) => slot,
                    None => register(local)?,
                };
                let depth = local.depth.get();
                if depth == 0 {
                    // SAFETY: slots live as long as the domain (a static), and this one is held by
                    // `REGISTRATION`, which clears `LOCAL` when it gives the slot back.
                    unsafe { &*slot }.enter(&DOMAIN);
                }
                local.depth.set(depth + 1);
                Some(Pin { slot })
            })
            .ok()
            .flatten()
    }

    #[cold]
    fn register(local: &Local) -> Option<*const Slot> {
        REGISTRATION
            .try_with(|held| {
                let mut held = held.borrow_mut();
                let registration = held.get_or_insert_with(|| Held(DOMAIN.register()));
                let slot: *const Slot = registration.0.slot();
                local.slot.set(Some(slot));
                slot
            })
            .ok()
    }

    impl Drop for Pin {
        #[inline]
        fn drop(&mut self) {
            // `LOCAL` has no destructor, so it is there as long as the thread runs.
            let _ = LOCAL.try_with(|local| {
                let depth = local.depth.get() - 1;
                local.depth.set(depth);
                if depth == 0 {
                    // SAFETY: as in `pin`: the slot lives as long as the domain.
                    unsafe { &*self.slot }.leave();
                }
            });
        }
    }

    /// The thread's registration: gives the slot back when the thread exits, first telling
    /// `LOCAL` it is gone (a pin after that, from another thread-local's destructor, registers
    /// again or, too late for that, looks under the lock).
    struct Held(Registration);

    impl Drop for Held {
        fn drop(&mut self) {
            let _ = LOCAL.try_with(|local| local.slot.set(None));
        }
    }
}

/// A domain with one reader's handle, for the loom models of the epoch
/// (`loom-tests/tests/epoch.rs`).
#[cfg(tollgate_loom)]
#[derive(Debug)]
pub struct ModelDomain(Domain);

/// A reader of a [`ModelDomain`].
#[cfg(tollgate_loom)]
#[derive(Debug)]
pub struct ModelReader(Registration);

#[cfg(tollgate_loom)]
impl Default for ModelDomain {
    fn default() -> ModelDomain {
        ModelDomain(Domain::new())
    }
}

#[cfg(tollgate_loom)]
impl ModelDomain {
    /// A slot for a new reader.
    pub fn register(&self) -> ModelReader {
        ModelReader(self.0.register())
    }

    /// See [`Domain::retire`].
    pub fn retire(&self) -> u64 {
        self.0.retire()
    }

    /// See [`Domain::horizon`].
    pub fn horizon(&self) -> u64 {
        self.0.horizon()
    }
}

#[cfg(tollgate_loom)]
impl ModelReader {
    /// Enters `domain`.
    pub fn enter(&self, domain: &ModelDomain) {
        self.0.slot().enter(&domain.0);
    }

    /// Leaves.
    pub fn leave(&self) {
        self.0.slot().leave();
    }
}
