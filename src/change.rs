//! What lets a limiter's quota change while checks run: the limiter's policy and state live
//! together in one heap block behind an atomic pointer, which a change replaces.
//!
//! # The protocol
//!
//! - **A check** enters an epoch (the keyed table's, [`crate::epoch`]: on Linux a plain
//!   store to the calling thread's own slot), loads the pointer (Acquire) and decides on the
//!   block's state with the block's policy, as the keyed limiter decides on a key's state: a
//!   decision that meets the *sealed* mark ([`Gone`](crate::cas::Gone)) took effect nowhere, and
//!   the check loads the pointer again.
//! - **A change** (serialized by a mutex that checks never take) builds the new block with its
//!   new policy first, then *seals* the old state (a one-word state is swapped to the mark, so
//!   that no decision made with the old policy can take effect any more, and the swap answers the
//!   last word it held), converts what was left into the new block's state by the crate's one
//!   rule (below), publishes the new block (Release) and frees the old one once every check that
//!   may hold it has left (the epoch's grace period; the change waits for it, checks never do).
//!
//! A check that meets the seal before the new block is published has nothing to decide on: it
//! waits for the publication, which follows the seal by a few instructions (the new block was
//! allocated before it). That is the only wait a check can meet, and only while a change runs.
//!
//! # The rule
//!
//! Across a change, no interval admits more than either quota alone would have allowed from the
//! state at the change. The state is read conservatively: the new state holds, at the change's
//! reading, the whole admissions the old state had left there (fractions are dropped), capped at
//! the new capacity, and from there on refills, or opens new windows, by the new quota alone. The
//! Redis scripts convert a key's state under a new quota by the same rule (see
//! [`crate::redis`], "Changing a quota").
//!
//! # Threads without an epoch slot
//!
//! A thread with no slot (its thread-locals are being destroyed, or
//! [`MAX_THREADS`](crate::epoch::MAX_THREADS) threads hold one) checks under the change's
//! mutex instead, which a change holds until the old block is freed.
//!
//! # Safety
//!
//! The `unsafe` blocks here keep one invariant: a block is freed only (a) by the change that
//! replaced it, after the epoch's horizon has passed the epoch at which it was retired, while
//! holding the mutex (so no check that reads under the mutex holds it either), or (b) by `Drop`,
//! which has `&mut self` (no check is running). A block whose grace period cannot be observed
//! (the epoch's heavy barrier failed) is kept until `Drop`.

use crate::cas::Gone;
use crate::epoch::{Domain, Pin};
use crate::sync::{lock, yield_now, AtomicPtr, Mutex, MutexGuard, Ordering};

/// One block of `T` behind an atomic pointer that a change replaces (see the module docs).
pub(crate) struct Current<T> {
    ptr: AtomicPtr<T>,
    /// Serializes changes; checks with no epoch slot read under it.
    changes: Mutex<Vec<*mut T>>,
    /// Under loom, a domain per cell: loom's atomics cannot live in a `static`.
    #[cfg(tollgate_loom)]
    domain: Domain,
}

// SAFETY: the raw pointers are owned blocks of `T` (`Box`es), shared as `&T` by `read`: sending
// or sharing the cell sends or shares `T`s.
unsafe impl<T: Send + Sync> Send for Current<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Sync for Current<T> {}

/// The domain every [`Current`] outside loom shares: a check pins it for a few instructions and
/// runs no user code inside, so one change's grace period waits for other limiters' checks only
/// as long as those take.
#[cfg(not(tollgate_loom))]
fn domain() -> &'static Domain {
    crate::epoch::global()
}

/// A block read by a check's fast path ([`Current::pinned`]): valid while this lives.
pub(crate) struct Pinned<'a, T> {
    value: &'a T,
    _pin: Pin<'a>,
}

impl<T> std::ops::Deref for Pinned<'_, T> {
    type Target = T;

    #[inline(always)]
    fn deref(&self) -> &T {
        self.value
    }
}

/// A block read by a check: valid while this lives.
pub(crate) struct Read<'a, T> {
    value: &'a T,
    _pin: Option<Pin<'a>>,
    _lock: Option<MutexGuard<'a, Vec<*mut T>>>,
}

impl<T> std::ops::Deref for Read<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> Current<T> {
    pub(crate) fn new(value: T) -> Current<T> {
        Current {
            ptr: AtomicPtr::new(Box::into_raw(Box::new(value))),
            changes: Mutex::new(Vec::new()),
            #[cfg(tollgate_loom)]
            domain: Domain::new(),
        }
    }

    #[inline]
    fn domain(&self) -> &Domain {
        #[cfg(tollgate_loom)]
        return &self.domain;
        #[cfg(not(tollgate_loom))]
        domain()
    }

    #[cfg(not(tollgate_loom))]
    #[inline(always)]
    fn pin(&self) -> Option<Pin<'_>> {
        crate::epoch::pin_global()
    }

    #[cfg(tollgate_loom)]
    #[inline]
    fn pin(&self) -> Option<Pin<'_>> {
        self.domain().pin_as(crate::epoch::loom_index())
    }

    /// The current block, pinned, for one check's fast path: `None` when the thread has no
    /// epoch slot (then [`Current::read`]). No closure and no lock guard: a check written over it
    /// (the direct limiters' `on_block!`) stays one straight function that the compiler inlines
    /// into its caller, which then builds only what it reads of the outcome (callgrind,
    /// `benches/instructions.sh`; the figures are in `benches/README.md`).
    #[inline(always)]
    pub(crate) fn pinned(&self) -> Option<Pinned<'_, T>> {
        let pin = self.pin()?;
        // Acquire: as in `read`.
        let ptr = self.ptr.load(Ordering::Acquire);
        Some(Pinned {
            // SAFETY: as in `read`: pinned, so the block outlives the guard.
            value: unsafe { &*ptr },
            _pin: pin,
        })
    }

    /// Runs `decide` on the current block until it answers without meeting a seal: a decision
    /// that met one took effect nowhere, and the change that sealed it is about to publish the
    /// next block. (The direct limiters write this loop out in `on_block!`, without the closure,
    /// for their check's sake: see `Current::pinned`.)
    #[inline]
    pub(crate) fn decide<R>(&self, mut decide: impl FnMut(&T) -> Result<R, Gone>) -> R {
        let mut attempt = 0u32;
        loop {
            match self.pinned() {
                Some(b) => {
                    if let Ok(answer) = decide(&b) {
                        break answer;
                    }
                }
                None => {
                    if let Ok(answer) = decide(&self.read_locked()) {
                        break answer;
                    }
                }
            }
            changing(&mut attempt);
        }
    }

    /// The current block, for one check.
    #[inline]
    pub(crate) fn read(&self) -> Read<'_, T> {
        match self.pin() {
            Some(pin) => {
                // Acquire: pairs with the Release of `change`'s swap, so the new block's policy
                // and state are seen as built.
                let ptr = self.ptr.load(Ordering::Acquire);
                Read {
                    // SAFETY: the block is freed only after every reader pinned when (or before)
                    // it was unlinked has left (module docs, Safety); this one is pinned.
                    value: unsafe { &*ptr },
                    _pin: Some(pin),
                    _lock: None,
                }
            }
            None => self.read_locked(),
        }
    }

    /// [`Current::read`] under the change mutex, for a thread with no epoch slot.
    #[cold]
    #[inline(never)]
    pub(crate) fn read_locked(&self) -> Read<'_, T> {
        let guard = lock(&self.changes);
        // Acquire: as in `read` (the lock orders it too).
        let ptr = self.ptr.load(Ordering::Acquire);
        Read {
            // SAFETY: blocks are freed under this lock, which this reader holds.
            value: unsafe { &*ptr },
            _pin: None,
            _lock: Some(guard),
        }
    }

    /// Replaces the block: `make` gets the current one (under the change mutex, so no other
    /// change runs) and answers its successor, having made sure that no decision can take effect
    /// on the current one any more (sealed it). Returns once the old block is freed (or, when
    /// the epoch cannot tell, kept for `Drop`).
    pub(crate) fn change(&self, make: impl FnOnce(&T) -> Box<T>) {
        let mut kept = lock(&self.changes);
        // Relaxed: only changes write the pointer, and they hold the mutex.
        let old = self.ptr.load(Ordering::Relaxed);
        // SAFETY: only a change frees the current block, and this one holds the mutex.
        let new = Box::into_raw(make(unsafe { &*old }));
        // Release: publishes the new block's contents to checks (their Acquire load).
        self.ptr.store(new, Ordering::Release);
        let retired = self.domain().retire();
        let mut waits = 0u32;
        loop {
            match self.domain().horizon() {
                Some(horizon) if horizon > retired => {
                    // SAFETY: unlinked, and no pinned reader entered at or before `retired`
                    // remains; readers under the mutex are excluded by holding it.
                    drop(unsafe { Box::from_raw(old) });
                    return;
                }
                // A check pinned before the swap is still running (a few instructions, unless
                // its thread was preempted): yield, then sleep a little longer each time, up to a
                // millisecond, so that a change waiting on a descheduled thread does not spin.
                Some(_) => {
                    waits = waits.saturating_add(1);
                    if cfg!(tollgate_loom) || waits < 16 {
                        yield_now();
                    } else {
                        std::thread::sleep(std::time::Duration::from_micros(u64::from(
                            waits.min(1_000),
                        )));
                    }
                }
                None => {
                    kept.push(old);
                    return;
                }
            }
        }
    }

    /// The current block through `&mut`: no check can be running.
    pub(crate) fn get_mut(&mut self) -> &mut T {
        // Relaxed: `&mut self`, no other thread is left.
        let ptr = self.ptr.load(Ordering::Relaxed);
        // SAFETY: `&mut self`: no reader, and the block is live until replaced or dropped.
        unsafe { &mut *ptr }
    }
}

/// Waits a little for a change that sealed the block a check decided on to publish the next
/// one: spins, then yields. Out of line: only a check that raced a change gets here.
#[cold]
#[inline(never)]
pub(crate) fn changing(attempt: &mut u32) {
    *attempt += 1;
    if *attempt < 8 {
        for _ in 0..(1u32 << *attempt) {
            crate::sync::spin_loop();
        }
    } else {
        yield_now();
    }
}

impl<T> Drop for Current<T> {
    fn drop(&mut self) {
        let kept = std::mem::take(&mut *lock(&self.changes));
        for old in kept {
            // SAFETY: `&mut self`: no reader; each kept block was unlinked and is owned here.
            drop(unsafe { Box::from_raw(old) });
        }
        // Relaxed: `&mut self`, no other thread is left.
        let ptr = self.ptr.load(Ordering::Relaxed);
        // SAFETY: as above, the current block.
        drop(unsafe { Box::from_raw(ptr) });
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Current<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Formatted into a string of our own while the block is read, then written out after:
        // the formatter's writer is the caller's code, and a writer that blocks (or changes this
        // limiter's quota) must not do so inside the epoch, where it would hold up a change.
        let snapshot = format!("{:?}", self.read().value);
        f.write_str(&snapshot)
    }
}
