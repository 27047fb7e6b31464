//! The keyed limiter's map from keys to state words, behind the few operations the limiter's
//! protocol needs, each run under the lock that protocol relies on.
//!
//! Outside loom it is a `DashMap<K, AtomicU64, ahash::RandomState>`: a fixed number of shards, each a
//! `RwLock` around a hash table. Loom cannot see inside DashMap's locks, so under `cfg(loom)` the
//! store is one [`RwLock`](crate::sync::RwLock) around a `std` `HashMap` with the same interface and
//! the same locking discipline (one shard): the loom models check the limiter's own protocol, taking
//! the map's correctness as given.

use std::borrow::Borrow;
use std::hash::Hash;

use crate::sync::AtomicU64;

/// What [`Store::with_entry`] found, or did, under the key's write lock.
pub(crate) enum Slot<'a> {
    /// The key was there; its word.
    Occupied(&'a AtomicU64),
    /// The key was not there.
    Vacant,
}

#[cfg(not(loom))]
pub(crate) struct Store<K> {
    map: dashmap::DashMap<K, AtomicU64, ahash::RandomState>,
}

#[cfg(not(loom))]
impl<K: Hash + Eq> Store<K> {
    pub(crate) fn new() -> Store<K> {
        Store {
            map: dashmap::DashMap::with_hasher(ahash::RandomState::new()),
        }
    }

    /// Runs `f` on `key`'s word while holding its shard's read lock, or answers `None`.
    #[inline]
    pub(crate) fn with_read<Q, R>(&self, key: &Q, f: impl FnOnce(&AtomicU64) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The `Ref` holds the shard's read lock until it drops, after `f` returns.
        self.map.get(key).map(|entry| f(entry.value()))
    }

    /// Runs `f` while holding `key`'s shard write lock, on the key's word if it is there; if `f`
    /// answers a word for a vacant key, that word is inserted (still under the lock).
    pub(crate) fn with_entry<R>(&self, key: K, f: impl FnOnce(Slot<'_>) -> (Option<u64>, R)) -> R {
        match self.map.entry(key) {
            dashmap::mapref::entry::Entry::Occupied(entry) => f(Slot::Occupied(entry.get())).1,
            dashmap::mapref::entry::Entry::Vacant(entry) => {
                let (word, answer) = f(Slot::Vacant);
                if let Some(word) = word {
                    entry.insert(AtomicU64::new(word));
                }
                answer
            }
        }
    }

    /// Removes every entry whose word `evict` approves, deciding each under its shard's write lock
    /// (one shard at a time), and answers how many it removed.
    pub(crate) fn retain(&self, mut evict: impl FnMut(u64) -> bool) -> usize {
        let mut removed = 0;
        self.map.retain(|_, word| {
            if evict(crate::cas::read(word)) {
                removed += 1;
                false
            } else {
                true
            }
        });
        removed
    }

    pub(crate) fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.contains_key(key)
    }

    pub(crate) fn shrink_to_fit(&self) {
        self.map.shrink_to_fit();
    }
}

#[cfg(loom)]
pub(crate) struct Store<K> {
    map: crate::sync::RwLock<std::collections::HashMap<K, AtomicU64>>,
}

#[cfg(loom)]
impl<K: Hash + Eq> Store<K> {
    pub(crate) fn new() -> Store<K> {
        Store {
            map: crate::sync::RwLock::new(std::collections::HashMap::new()),
        }
    }

    #[inline]
    pub(crate) fn with_read<Q, R>(&self, key: &Q, f: impl FnOnce(&AtomicU64) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        crate::sync::read(&self.map).get(key).map(f)
    }

    pub(crate) fn with_entry<R>(&self, key: K, f: impl FnOnce(Slot<'_>) -> (Option<u64>, R)) -> R {
        let mut map = crate::sync::write(&self.map);
        if let Some(word) = map.get(&key) {
            return f(Slot::Occupied(word)).1;
        }
        let (word, answer) = f(Slot::Vacant);
        if let Some(word) = word {
            map.insert(key, AtomicU64::new(word));
        }
        answer
    }

    pub(crate) fn retain(&self, mut evict: impl FnMut(u64) -> bool) -> usize {
        let mut map = crate::sync::write(&self.map);
        let before = map.len();
        map.retain(|_, word| !evict(crate::cas::read(word)));
        before - map.len()
    }

    pub(crate) fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        crate::sync::read(&self.map).contains_key(key)
    }

    pub(crate) fn shrink_to_fit(&self) {
        crate::sync::write(&self.map).shrink_to_fit();
    }
}
