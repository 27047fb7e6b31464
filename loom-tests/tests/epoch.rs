//! Loom models of the keyed table's epoch (`src/epoch.rs`): a reader that enters, loads
//! a pointer and reads what it points to, against a reclaimer that unlinks it, retires it and
//! frees it once the horizon has passed its retirement.
//!
//! The domain is reached through `tollgate::keyed::model_table::ModelDomain`: `register` gives a
//! reader (a thread index of its own), `pin` enters as it and answers a guard that leaves when
//! dropped (a pin made while the reader is already in is nested: it neither enters nor leaves),
//! `retire` and `horizon` are the reclaimer's. Under loom both barriers are `fence(SeqCst)` (loom
//! models sequentially consistent fences); on Linux the heavy one is `membarrier(2)` and the light
//! one a compiler fence, which the kernel's guarantee makes equivalent (see the module docs). The
//! object is a loom `UnsafeCell`: freeing it is a write, reading it a read, and loom fails the
//! model if the two are not ordered.
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --test epoch`.

// Without `--cfg tollgate_loom` this file compiles to an empty test binary.
#![cfg(tollgate_loom)]

mod common;

use common::check_reaches;
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use tollgate::keyed::model_table::{ModelDomain, ModelReader};

/// Every combination of "the reader saw the old object" and "the reclaimer freed it".
const ALL: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];

/// Where a reader of [`race_a_reclaimer`] makes a nested pin, if anywhere.
#[derive(Clone, Copy)]
enum Nested {
    /// No nested pin.
    None,
    /// Pinned again and left again after entering, before loading the pointer (a signal handler
    /// that interrupts the lookup as it starts).
    BeforeTheLoad,
    /// Pinned again and left again between loading the pointer and reading what it points to (a
    /// key's `Eq` that looks up the same limiter in the middle of the probe).
    BeforeTheRead,
}

/// A reader (a spawned thread) enters, maybe pins again nested and leaves that pin (`nested`),
/// loads the current pointer and, if it is the old object, reads it, then leaves. The reclaimer
/// (the main thread) unlinks the old object (Release, as the table's store of its new pointer),
/// retires it, and frees it if the horizon has passed its retirement. Answers (whether the reader
/// saw the old object, whether the reclaimer freed it); loom fails the model if a free and a read
/// of the object are not ordered.
fn race_a_reclaimer(nested: Nested) -> (bool, bool) {
    let domain = Arc::new(ModelDomain::default());
    let current_is_old = Arc::new(AtomicBool::new(true));
    let old = Arc::new(UnsafeCell::new(7u64));
    let reader = {
        let (domain, current_is_old, old) = (domain.clone(), current_is_old.clone(), old.clone());
        thread::spawn(move || {
            let me: ModelReader = domain.register();
            let outer = domain.pin(&me);
            if let Nested::BeforeTheLoad = nested {
                drop(domain.pin(&me));
            }
            // Acquire: as the table's pointer load.
            let saw_old = current_is_old.load(Ordering::Acquire);
            if let Nested::BeforeTheRead = nested {
                let inner = domain.pin(&me);
                // The nested lookup reads through its own load (it may see the new object).
                if current_is_old.load(Ordering::Acquire) {
                    // SAFETY: a read, which loom checks against the free.
                    assert_eq!(old.with(|v| unsafe { *v }), 7);
                }
                drop(inner);
            }
            if saw_old {
                // SAFETY: a read, which loom checks against the free.
                assert_eq!(old.with(|v| unsafe { *v }), 7);
            }
            drop(outer);
            saw_old
        })
    };
    current_is_old.store(false, Ordering::Release);
    let retired = domain.retire();
    let freed = domain.horizon() > retired;
    if freed {
        // SAFETY: a write (the free), which loom checks against the reader's reads.
        old.with_mut(|v| unsafe { *v = 0 });
    }
    (reader.join().unwrap(), freed)
}

/// A reader may hold the old object or see the new one; the reclaimer frees the old one only
/// when the horizon says no reader can hold it. Every combination of "the reader saw the old
/// object" and "the reclaimer freed it" is reached, and loom finds no unordered free and read.
#[test]
fn a_freed_object_is_never_read() {
    check_reaches(&ALL, || race_a_reclaimer(Nested::None));
}

/// The fixed pin order, nested: a reader that pins again while it is in (as a signal handler that
/// interrupts its lookup would), and drops that nested pin before it loads the pointer, is still
/// in when it loads and reads: the nested pin's drop leaves nothing, so the horizon still sees the
/// outer pin, and loom finds no unordered free and read. (Were the nested drop to clear the slot,
/// the reclaimer could read 0 while the reader's load, no longer behind a barrier, sees the old
/// object.)
#[test]
fn a_nested_pin_dropped_before_the_load_leaves_the_reader_in() {
    check_reaches(&ALL, || race_a_reclaimer(Nested::BeforeTheLoad));
}

/// As above with the nested pin between the reader's load of the pointer and its read of the
/// object (a key's `Eq` that looks up the same limiter during the probe): the reader still holds
/// the object it loaded after the nested pin is dropped, and loom finds no unordered free and
/// read (of the outer read or the nested one).
#[test]
fn a_nested_pin_dropped_before_the_read_leaves_the_reader_in() {
    check_reaches(&ALL, || race_a_reclaimer(Nested::BeforeTheRead));
}

/// A slot a reader has left is entered again at the epoch of the moment: the next reader of the
/// same index (a thread that took the index another gave back, here the same `ModelReader` moved
/// to a new thread) is read by the horizon at its new epoch. A reader that entered before a
/// retirement holds it up; one that entered after does not; one that has left holds nothing.
#[test]
fn a_reentered_slot_is_read_at_its_new_epoch() {
    loom::model(|| {
        let domain = Arc::new(ModelDomain::default());
        // Another reader, never in: the horizon reads its slot as 0 throughout.
        let _idle = domain.register();
        let reader = domain.register();
        let early = domain.pin(&reader);
        let retired = domain.retire();
        assert!(domain.horizon() <= retired, "an earlier reader holds it up");
        drop(early);
        let other = {
            let domain = domain.clone();
            thread::spawn(move || {
                let late = domain.pin(&reader);
                let horizon = domain.horizon();
                drop(late);
                horizon
            })
        };
        assert!(other.join().unwrap() > retired, "a later reader does not");
        assert_eq!(domain.horizon(), u64::MAX);
    });
}
