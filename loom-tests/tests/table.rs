//! Loom models of the keyed limiter's table (`tollgate::keyed::table`): lookups that take no lock
//! racing the writers that hold the shard lock (an insert, an eviction, a growth that relocates
//! every entry).
//!
//! The table is reached through `tollgate::keyed::model_table::ModelTable` (one shard, `u64` keys,
//! one-word states), built only under loom. Loom cannot model crossbeam's epoch, so under loom a
//! retired table is kept until the table drops: these models check the control bytes, the
//! relocation's mark and the lookups' second look under the lock, not the freeing (which is
//! crossbeam's protocol).
//!
//! Run with
//! `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR=target/loom cargo test -p loom-tests --release --test table`.

// Without `--cfg tollgate_loom` this file compiles to an empty test binary.
#![cfg(tollgate_loom)]

mod common;

use common::check_reaches;
use loom::sync::Arc;
use loom::thread;
use tollgate::keyed::model_table::{Gone, ModelTable};

/// What a lookup answered: 0 a value, 1 gone, 2 not held.
fn kind(answer: Option<Result<u64, Gone>>) -> u8 {
    match answer {
        Some(Ok(_)) => 0,
        Some(Err(Gone)) => 1,
        None => 2,
    }
}

/// An admission (adding one to key 1's word) races a rebuild that relocates it: the admission
/// always lands, once, whether it wrote the old place before the move (and the word carried it)
/// or met the mark and looked again under the lock; both are reached.
#[test]
fn an_admission_racing_a_relocation_lands_once() {
    check_reaches(&[false, true], || {
        let table = Arc::new(ModelTable::default());
        assert!(table.insert(1, 0));
        let admit = {
            let table = table.clone();
            thread::spawn(move || table.bump(1))
        };
        let move_it = {
            let table = table.clone();
            thread::spawn(move || table.rebuild())
        };
        assert_eq!(admit.join().unwrap(), Some(Ok(1)));
        move_it.join().unwrap();
        assert_eq!(table.read(1), Some(Ok(1)));
        table.relooks() > 0
    });
}

/// A peek of key 1 races a rebuild: it reads the word, before or after the move, and never
/// answers "not held" or "gone" for a key that was only moved.
#[test]
fn a_peek_racing_a_relocation_sees_the_key() {
    check_reaches(&[false, true], || {
        let table = Arc::new(ModelTable::default());
        assert!(table.insert(1, 5));
        let peek = {
            let table = table.clone();
            thread::spawn(move || table.read(1))
        };
        table.rebuild();
        assert_eq!(peek.join().unwrap(), Some(Ok(5)));
        table.relooks() > 0
    });
}

/// A lookup races the insert of its key: it finds nothing or the whole entry, never a half-written
/// one (loom checks the entry's cell against the insert's write).
#[test]
fn a_lookup_racing_an_insert_sees_nothing_or_the_entry() {
    check_reaches(&[0, 2], || {
        let table = Arc::new(ModelTable::default());
        let insert = {
            let table = table.clone();
            thread::spawn(move || assert!(table.insert(2, 7)))
        };
        // From a spawned thread: see `check_reaches` on loads made by the main thread.
        let look = {
            let table = table.clone();
            thread::spawn(move || table.read(2))
        };
        insert.join().unwrap();
        let seen = look.join().unwrap();
        assert!(matches!(seen, None | Some(Ok(7))), "{seen:?}");
        kind(seen)
    });
}

/// An admission on key 1 races its eviction (mark gone, then remove, under the lock): either the
/// admission wrote first (the eviction's mark fails and the key is kept, with the admission), or it
/// meets the mark (gone: the caller decides again on the key as new) or finds the key removed.
/// All three are reached; the admission is never both lost and reported.
#[test]
fn an_admission_racing_an_eviction_is_kept_or_told() {
    check_reaches(&[0, 1, 2], || {
        let table = Arc::new(ModelTable::default());
        assert!(table.insert(1, 5));
        let admit = {
            let table = table.clone();
            thread::spawn(move || table.bump(1))
        };
        let removed = table.forget(5);
        let admitted = admit.join().unwrap();
        match admitted {
            Some(Ok(6)) => {
                assert_eq!(removed, 0);
                assert_eq!(table.read(1), Some(Ok(6)));
            }
            Some(Err(Gone)) | None => {
                assert_eq!(removed, 1);
                assert_eq!(table.read(1), None);
            }
            other => panic!("{other:?}"),
        }
        kind(admitted)
    });
}

/// The insert that fills the table's last spare slot grows it (relocating all 14 entries) while
/// another thread admits on key 5 and peeks key 3: both find their keys, the admission lands once,
/// and the new key is there afterwards.
#[test]
fn a_growth_racing_lookups_keeps_every_key() {
    loom::model(|| {
        let table = Arc::new(ModelTable::default());
        // 14 of 16 slots: the 7/8 limit, so the next insert grows the table.
        for k in 0..14 {
            assert!(table.insert(k, k));
        }
        let grow = {
            let table = table.clone();
            thread::spawn(move || assert!(table.insert(100, 7)))
        };
        assert_eq!(table.bump(5), Some(Ok(6)));
        assert_eq!(table.read(3), Some(Ok(3)));
        grow.join().unwrap();
        assert_eq!(table.read(5), Some(Ok(6)));
        assert_eq!(table.read(100), Some(Ok(7)));
        for k in (0..14).filter(|&k| k != 5) {
            assert_eq!(table.read(k), Some(Ok(k)));
        }
    });
}
