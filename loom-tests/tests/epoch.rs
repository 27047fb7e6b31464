//! Loom models of the keyed table's epoch (`tollgate::keyed::epoch`): a reader that enters, loads
//! a pointer and reads what it points to, against a reclaimer that unlinks it, retires it and
//! frees it once the horizon has passed its retirement.
//!
//! Under loom both barriers are `fence(SeqCst)` (loom models sequentially consistent fences); on
//! Linux the heavy one is `membarrier(2)` and the light one a compiler fence, which the kernel's
//! guarantee makes equivalent (see the module docs). The object is a loom `UnsafeCell`: freeing it
//! is a write, reading it a read, and loom fails the model if the two are not ordered.
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

/// A reader may hold the old object or see the new one; the reclaimer frees the old one only
/// when the horizon says no reader can hold it. Every combination of "the reader saw the old
/// object" and "the reclaimer freed it" is reached, and loom finds no unordered free and read.
#[test]
fn a_freed_object_is_never_read() {
    check_reaches(
        &[(false, false), (false, true), (true, false), (true, true)],
        || {
            let domain = Arc::new(ModelDomain::default());
            let current_is_old = Arc::new(AtomicBool::new(true));
            let old = Arc::new(UnsafeCell::new(7u64));
            let reader = {
                let (domain, current_is_old, old) =
                    (domain.clone(), current_is_old.clone(), old.clone());
                thread::spawn(move || {
                    let me: ModelReader = domain.register();
                    me.enter(&domain);
                    // Acquire: as the table's pointer load.
                    let saw_old = current_is_old.load(Ordering::Acquire);
                    if saw_old {
                        // SAFETY: a read, which loom checks against the free.
                        assert_eq!(old.with(|v| unsafe { *v }), 7);
                    }
                    me.leave();
                    saw_old
                })
            };
            // Unlink (Release, as the table's store of its new pointer), retire, and free if the
            // horizon allows.
            current_is_old.store(false, Ordering::Release);
            let retired = domain.retire();
            let freed = domain.horizon() > retired;
            if freed {
                // SAFETY: a write (the free), which loom checks against the reader's read.
                old.with_mut(|v| unsafe { *v = 0 });
            }
            (reader.join().unwrap(), freed)
        },
    );
}

/// A slot given back by a reader that has left is reused by the next, and the horizon reads the
/// new reader's epoch from it: a reader that entered before a retirement holds it up, one that
/// entered after does not.
#[test]
fn a_reused_slot_is_read_for_its_new_reader() {
    loom::model(|| {
        let domain = Arc::new(ModelDomain::default());
        drop(domain.register());
        let early = domain.register();
        early.enter(&domain);
        let retired = domain.retire();
        assert!(domain.horizon() <= retired, "an earlier reader holds it up");
        early.leave();
        let other = {
            let domain = domain.clone();
            thread::spawn(move || {
                let late = domain.register();
                late.enter(&domain);
                let horizon = domain.horizon();
                late.leave();
                horizon
            })
        };
        assert!(other.join().unwrap() > retired, "a later reader does not");
        assert_eq!(domain.horizon(), u64::MAX);
    });
}
