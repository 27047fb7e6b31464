//! The keyed limiter's map from keys to per-key states (`V`: one `AtomicU64` for the one-word
//! algorithms, a log for the sliding window log), behind the few operations the limiter's protocol
//! needs, each run under the lock that protocol relies on.
//!
//! Outside loom it is a `DashMap<K, V, ahash::RandomState>`: a fixed number of shards, each a
//! `RwLock` around a hash table. Loom cannot see inside DashMap's locks, so under `cfg(tollgate_loom)` the
//! store is one [`RwLock`](crate::sync::RwLock) around a `std` `HashMap` with the same interface and
//! the same locking discipline (one shard): the loom models check the limiter's own protocol, taking
//! the map's correctness as given.

use std::borrow::Borrow;
use std::hash::Hash;

/// What [`Store::with_entry`] found, or did, under the key's write lock.
pub(crate) enum Slot<'a, K, V> {
    /// The key was there; its state.
    Occupied(&'a V),
    /// The key was not there; the key.
    Vacant(&'a K),
}

#[cfg(not(tollgate_loom))]
pub(crate) struct Store<K, V> {
    map: dashmap::DashMap<K, V, ahash::RandomState>,
}

#[cfg(not(tollgate_loom))]
impl<K: Hash + Eq, V> Store<K, V> {
    pub(crate) fn new() -> Store<K, V> {
        Store {
            map: dashmap::DashMap::with_hasher(ahash::RandomState::new()),
        }
    }

    /// Runs `f` on `key`'s state while holding its shard's read lock, or answers `None`.
    #[inline]
    pub(crate) fn with_read<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // The `Ref` holds the shard's read lock until it drops, after `f` returns.
        self.map.get(key).map(|entry| f(entry.value()))
    }

    /// Runs `f` while holding `key`'s shard write lock, on the key's state if it is there; if `f`
    /// answers a state for a vacant key, that state is inserted (still under the lock).
    pub(crate) fn with_entry<R>(
        &self,
        key: K,
        f: impl FnOnce(Slot<'_, K, V>) -> (Option<V>, R),
    ) -> R {
        match self.map.entry(key) {
            dashmap::mapref::entry::Entry::Occupied(entry) => f(Slot::Occupied(entry.get())).1,
            dashmap::mapref::entry::Entry::Vacant(entry) => {
                let (word, answer) = f(Slot::Vacant(entry.key()));
                if let Some(word) = word {
                    entry.insert(word);
                }
                answer
            }
        }
    }

    /// Removes every entry whose state `evict` approves, deciding each under its shard's write
    /// lock (one shard at a time), and answers how many it removed.
    pub(crate) fn retain(&self, mut evict: impl FnMut(&V) -> bool) -> usize {
        let mut removed = 0;
        self.map.retain(|_, state| {
            if evict(state) {
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

#[cfg(tollgate_loom)]
pub(crate) struct Store<K, V> {
    map: crate::sync::RwLock<std::collections::HashMap<K, V>>,
}

#[cfg(tollgate_loom)]
impl<K: Hash + Eq, V> Store<K, V> {
    pub(crate) fn new() -> Store<K, V> {
        Store {
            map: crate::sync::RwLock::new(std::collections::HashMap::new()),
        }
    }

    #[inline]
    pub(crate) fn with_read<Q, R>(&self, key: &Q, f: impl FnOnce(&V) -> R) -> Option<R>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        crate::sync::read(&self.map).get(key).map(f)
    }

    pub(crate) fn with_entry<R>(
        &self,
        key: K,
        f: impl FnOnce(Slot<'_, K, V>) -> (Option<V>, R),
    ) -> R {
        let mut map = crate::sync::write(&self.map);
        if let Some(word) = map.get(&key) {
            return f(Slot::Occupied(word)).1;
        }
        let (word, answer) = f(Slot::Vacant(&key));
        if let Some(word) = word {
            map.insert(key, word);
        }
        answer
    }

    pub(crate) fn retain(&self, mut evict: impl FnMut(&V) -> bool) -> usize {
        let mut map = crate::sync::write(&self.map);
        let before = map.len();
        map.retain(|_, state| !evict(state));
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
