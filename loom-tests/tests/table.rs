//! Loom models of the keyed limiter's table (`tollgate::keyed::table`): lookups that take no lock
//! racing the writers that hold the shard lock (an insert, an eviction, a rebuild, a growth), and
//! the freeing of what those writers unlinked.
//!
//! The table is reached through `tollgate::keyed::model_table::ModelTable` (one shard, `u64` keys,
//! one-word states), built only under loom. It is the table itself, freeing included: entries sit
//! in the table's slots, and a rebuild or a growth clones each key into a new table and relocates
//! each state (the old word is sealed with the gone mark and its value copied), so that a lookup
//! still on the old table either decides before the seal (the copy carries it) or meets the seal
//! and looks again under the shard lock. What a writer unlinks (a removed entry, a replaced table
//! with its old copies) is retired to the table's epoch domain and dropped once the domain's
//! horizon has passed its retirement, by the writer at once if no reader holds it, or by a later
//! write, `retired()`, or the table's drop.
//! Under loom a lookup enters the epoch as its loom thread (a loom thread-local index), both
//! barriers are `fence(SeqCst)` (the epoch's own models are in `epoch.rs`), and each entry has a
//! loom `UnsafeCell` that every lookup reads when it reaches the entry and that freeing the entry
//! writes: a free not ordered after a lookup's read of the entry fails the model as a race (a use
//! after free). The old copies in a replaced table have the same cells, so a lookup reading one
//! after the table was dropped fails the model too; the table's control bytes have none.
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

/// The word eviction marks a state with (`tollgate::cas::GONE`): a key inserted with it is held,
/// marked gone, as between an eviction's mark and its removal.
const GONE: u64 = u64::MAX;

/// What a lookup answered: 0 a value, 1 gone, 2 not held.
fn kind(answer: Option<Result<u64, Gone>>) -> u8 {
    match answer {
        Some(Ok(_)) => 0,
        Some(Err(Gone)) => 1,
        None => 2,
    }
}

/// After the threads of a model have joined, no reader is left: everything retired is freed.
fn all_freed(table: &ModelTable) {
    assert_eq!(table.retired(), 0, "retired garbage outlived its readers");
    assert_eq!(table.unreclaimed(), 0);
}

/// `lookup` (a spawned thread) races `rebuild` (another), which rebuilds key 1's table (the key
/// cloned, the word relocated) and then frees what no reader holds: answers the lookup's answer,
/// and whether the replaced table was still held for a reader after the rebuild.
fn race_a_rebuild<T: Send + 'static>(
    word: u64,
    lookup: impl FnOnce(&ModelTable) -> T + Send + 'static,
) -> (Arc<ModelTable>, T, bool) {
    let table = Arc::new(ModelTable::default());
    assert!(table.insert(1, word));
    let look = {
        let table = table.clone();
        thread::spawn(move || lookup(&table))
    };
    let rebuild = {
        let table = table.clone();
        thread::spawn(move || {
            table.rebuild();
            table.retired() > 0
        })
    };
    let seen = look.join().unwrap();
    let kept = rebuild.join().unwrap();
    all_freed(&table);
    (table, seen, kept)
}

/// An admission (adding one to key 1's word) races a rebuild of its table: it lands exactly once
/// whichever table it went through (before the seal, in the old word that the copy carries; after
/// it, in the new word, looked up again under the lock), and the replaced table is freed at once
/// or kept while the admission is in (both are reached); loom finds no drop of the old copy
/// unordered with the admission's read of it.
#[test]
fn an_admission_racing_a_rebuild_lands_once() {
    check_reaches(&[false, true], || {
        let (table, admitted, kept) = race_a_rebuild(0, |table| table.bump(&1));
        assert_eq!(admitted, Some(Ok(1)));
        assert_eq!(table.read(&1), Some(Ok(1)));
        assert_eq!(table.len(), 1);
        kept
    });
}

/// A peek of key 1 races a rebuild of its table: it reads the word through the old table or the
/// new one (a sealed word sends it to the lock), and never answers "not held" or "gone" for a key
/// that was only rebuilt around; the replaced table is freed at once or kept while the peek is in
/// (both are reached).
#[test]
fn a_peek_racing_a_rebuild_sees_the_key() {
    check_reaches(&[false, true], || {
        let (_, seen, kept) = race_a_rebuild(5, |table| table.read(&1));
        assert_eq!(seen, Some(Ok(5)));
        kept
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
            thread::spawn(move || table.read(&2))
        };
        insert.join().unwrap();
        let seen = look.join().unwrap();
        assert!(matches!(seen, None | Some(Ok(7))), "{seen:?}");
        assert_eq!(table.read(&2), Some(Ok(7)));
        kind(seen)
    });
}

/// An admission on key 1 races its eviction (mark gone, then remove, under the lock, then retire
/// and free what no reader holds): either the admission wrote first (the eviction's mark fails
/// and the key is kept, with the admission), or it meets the mark (gone: the table finds no
/// rebuild under way, and the caller decides again on the key as new) or finds the key removed.
/// All three are reached; the admission is never both lost and reported, and once both threads
/// are done the removed entry has been freed.
#[test]
fn an_admission_racing_an_eviction_is_kept_or_told() {
    check_reaches(&[0, 1, 2], || {
        let table = Arc::new(ModelTable::default());
        assert!(table.insert(1, 5));
        let admit = {
            let table = table.clone();
            thread::spawn(move || table.bump(&1))
        };
        let removed = table.forget(5);
        let admitted = admit.join().unwrap();
        match admitted {
            Some(Ok(6)) => {
                assert_eq!(removed, 0);
                assert_eq!(table.read(&1), Some(Ok(6)));
            }
            Some(Err(Gone)) | None => {
                assert_eq!(removed, 1);
                assert_eq!(table.read(&1), None);
            }
            other => panic!("{other:?}"),
        }
        all_freed(&table);
        kind(admitted)
    });
}

/// Freeing with a reader pinned: a peek of key 1 (a spawned thread) races its eviction and the
/// freeing that follows (another thread: `forget`, then `retired()`, which frees what the horizon
/// allows). The peek answers the word (read before the mark, or not yet seeing it), the mark, or
/// "not held"; whichever it answered, the entry is either freed by the evicting thread (the peek
/// was done, or had not yet reached it) or kept because the peek was in: all six are reached, and
/// loom finds no free of the entry unordered with the peek's read of it.
#[test]
fn an_entry_is_freed_only_after_the_reader_that_holds_it() {
    let all: Vec<(u8, bool)> = (0..3).flat_map(|k| [(k, false), (k, true)]).collect();
    check_reaches(&all, || {
        let table = Arc::new(ModelTable::default());
        assert!(table.insert(1, 5));
        let peek = {
            let table = table.clone();
            thread::spawn(move || table.read(&1))
        };
        let evict = {
            let table = table.clone();
            thread::spawn(move || {
                let removed = table.forget(5);
                let kept = table.retired();
                // One entry, retired in one batch: kept whole or freed whole.
                assert_eq!(table.unreclaimed(), kept);
                (removed, kept > 0)
            })
        };
        let seen = peek.join().unwrap();
        let (removed, kept) = evict.join().unwrap();
        // A peek writes nothing, so the eviction's mark always holds.
        assert_eq!(removed, 1);
        assert!(
            matches!(seen, Some(Ok(5)) | Some(Err(Gone)) | None),
            "{seen:?}"
        );
        assert_eq!(table.read(&1), None);
        assert!(table.is_empty());
        all_freed(&table);
        (kind(seen), kept)
    });
}

/// 14 keys in a 16-slot shard: the 7/8 limit, so that the next new key grows the table.
fn nearly_full(word: impl Fn(u64) -> u64) -> Arc<ModelTable> {
    let table = Arc::new(ModelTable::default());
    for k in 0..14 {
        assert!(table.insert(k, word(k)));
    }
    table
}

/// The insert that would fill the shard's last spare slot grows it (a new table of 32 slots with
/// the 14 keys cloned and their words relocated, then the new key), and then frees what the
/// horizon allows, while an
/// admission on key 5 (a spawned thread) goes through the old table or the new one: the admission
/// lands once, every key is there afterwards, and the old table is freed by the growing thread or
/// kept because the admission was in (both are reached).
#[test]
fn a_growth_racing_an_admission_keeps_every_key() {
    check_reaches(&[false, true], || {
        let table = nearly_full(|k| k);
        let admit = {
            let table = table.clone();
            thread::spawn(move || table.bump(&5))
        };
        let grow = {
            let table = table.clone();
            thread::spawn(move || {
                assert!(table.insert(100, 7));
                table.retired() > 0
            })
        };
        assert_eq!(admit.join().unwrap(), Some(Ok(6)));
        let kept = grow.join().unwrap();
        assert_eq!(table.read(&5), Some(Ok(6)));
        assert_eq!(table.read(&100), Some(Ok(7)));
        assert_eq!(table.len(), 15);
        all_freed(&table);
        kept
    });
}

/// A growth that also removes an entry: key 1 is held marked gone, and a request that meets the
/// mark replaces it (`replace_gone`), under the lock: the write grows the table first (key 1's
/// marked word relocated with the rest), then makes the new table's slot of key 1 a tomb and
/// inserts the new entry, so the old table and the old entry are retired one after the other.
/// A peek of key 1 (a spawned thread) races it: it reads the mark (through the old table, before
/// the growth, or in its copy in the new one), the new word, or "not held" (the new table after
/// the tomb, before the new entry is published);
/// whichever, what was retired is freed by the replacing thread or kept because the peek was in
/// (all six are reached), and loom finds no drop of an entry unordered with the peek's read of
/// it.
#[test]
fn a_growth_that_replaces_an_entry_frees_it_after_its_reader() {
    let all: Vec<(u8, bool)> = (0..3).flat_map(|k| [(k, false), (k, true)]).collect();
    check_reaches(&all, || {
        let table = nearly_full(|k| if k == 1 { GONE } else { k });
        let peek = {
            let table = table.clone();
            thread::spawn(move || table.read(&1))
        };
        let replace = {
            let table = table.clone();
            thread::spawn(move || {
                assert_eq!(table.replace_gone(1, 9), Some(9));
                table.retired() > 0
            })
        };
        let seen = peek.join().unwrap();
        let kept = replace.join().unwrap();
        assert!(
            matches!(seen, Some(Ok(9)) | Some(Err(Gone)) | None),
            "{seen:?}"
        );
        assert_eq!(table.read(&1), Some(Ok(9)));
        assert_eq!(table.len(), 14);
        all_freed(&table);
        (kind(seen), kept)
    });
}
