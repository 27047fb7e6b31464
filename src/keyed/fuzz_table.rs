//! The loom models' and the fuzz target's window into the keyed limiter's table: one-word
//! states, with `u64` keys for the loom models of the table's protocol
//! (`loom-tests/tests/table.rs`, as [`ModelTable`](super::model_table::ModelTable)), and with
//! keys of the fuzz target's own (`fuzz/fuzz_targets/table_ops.rs`: keys whose `Hash`, `Eq` or
//! `Drop` panic on chosen calls). Not an API: built only under `cfg(tollgate_loom)` or
//! `cfg(fuzzing)`.

use std::borrow::Borrow;
use std::hash::Hash;

use super::store::Slot;
use super::table::Table;
use crate::cas::{self, Gone, Step, GONE};
use crate::sync::AtomicU64;

/// A table of any keys and one-word states. Every method runs the table's own code path for the
/// operation it names, so a key's `Hash`, `Eq` and `Drop` run exactly where the table runs them.
pub struct FuzzTable<K>(Table<K, AtomicU64, ()>);

/// One shard.
impl<K: Hash + Eq + Clone> Default for FuzzTable<K> {
    fn default() -> FuzzTable<K> {
        FuzzTable::with_shards(1)
    }
}

impl<K> std::fmt::Debug for FuzzTable<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FuzzTable")
    }
}

impl<K: Hash + Eq + Clone> FuzzTable<K> {
    /// A table of `shards` shards (rounded up to a power of two).
    pub fn with_shards(shards: usize) -> FuzzTable<K> {
        FuzzTable(Table::with_shards(shards, ()))
    }

    /// Inserts `key` with `word` unless it is held (then `key` is dropped, after the shard lock
    /// is released); answers whether it inserted.
    pub fn insert(&self, key: K, word: u64) -> bool {
        self.0.with_entry(key, |(), slot| match slot {
            Slot::Occupied(..) => (None, false),
            Slot::Vacant(_) => (Some(AtomicU64::new(word)), true),
        })
    }

    /// Inserts `key` with `word`, or replaces the held entry by one of `key` and `word` (the old
    /// entry, with its key, is retired and freed); answers the word replaced, if any.
    pub fn put(&self, key: K, word: u64) -> Option<u64> {
        self.0.with_entry(key, |(), slot| match slot {
            Slot::Occupied(_, state) => (Some(AtomicU64::new(word)), Some(cas::read(state))),
            Slot::Vacant(_) => (Some(AtomicU64::new(word)), None),
        })
    }

    /// Adds one to `key`'s word, as an admission would: the new word, `Err(Gone)` if the word is
    /// marked gone, `None` if the key is not held.
    pub fn bump<Q>(&self, key: &Q) -> Option<Result<u64, Gone>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.with_read(key, |(), word| {
            cas::update_live(word, |w| Step::<u64, ()>::Write(w + 1, w + 1)).map(|r| r.unwrap_or(0))
        })
    }

    /// `key`'s word, as a peek would read it.
    pub fn read<Q>(&self, key: &Q) -> Option<Result<u64, Gone>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.with_read(key, |(), word| match cas::read(word) {
            GONE => Err(Gone::seen()),
            w => Ok(w),
        })
    }

    /// Marks gone and removes every entry whose word is `word`, as eviction does, shard by shard;
    /// answers how many it removed. Frees nothing, so runs no key's `Drop`: the removed entries
    /// wait for [`FuzzTable::reclaim`].
    pub fn sweep(&self, word: u64) -> usize {
        self.0.retain(|(), state| cas::mark_gone(state, word))
    }

    /// Frees what is retired and no reader holds, as the keyed limiter does after a sweep: every
    /// key freed is dropped once, and the first panic of their `Drop`s is passed on.
    pub fn reclaim(&self) {
        self.0.reclaim_now();
    }

    /// [`FuzzTable::sweep`], then [`FuzzTable::reclaim`], as eviction does with the reclaimer
    /// on time; answers how many it removed.
    pub fn forget(&self, word: u64) -> usize {
        let removed = self.sweep(word);
        self.reclaim();
        removed
    }

    /// Under the key's lock: if its state is marked gone, replaces the entry with one of `key`
    /// and a fresh `word` (as a request that meets the mark does); answers the word the key holds
    /// afterwards. `key` is dropped after the lock if it was not inserted.
    pub fn replace_gone(&self, key: K, word: u64) -> Option<u64> {
        self.0.with_entry(key, |(), slot| match slot {
            Slot::Occupied(_, state) => match cas::read(state) {
                GONE => (Some(AtomicU64::new(word)), Some(word)),
                w => (None, Some(w)),
            },
            Slot::Vacant(_) => (None, None),
        })
    }

    /// Rebuilds every shard's table at its size (the keys cloned, the words relocated).
    pub fn rebuild(&self) {
        self.0.rebuild_all();
    }

    /// Shrinks every shard to what it holds (clearing removed entries).
    pub fn shrink(&self) {
        self.0.shrink_to_fit();
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
}
