//! The keyed limiter's map from keys to per-key states (`V`: one `AtomicU64` for the one-word
//! algorithms, a log for the sliding window log), behind the few operations the limiter's protocol
//! needs.
//!
//! The protocol (see the [module docs](super)) asks of the map only what a concurrent map gives:
//! a lookup that hands out a reference to a key's state which stays valid while it is used, even
//! if the entry is removed meanwhile; inserting or replacing one key's entry atomically with
//! respect to other writers of that key; and removing an entry only if it still holds the state
//! that eviction marked gone. Decisions never rely on the map's locks to exclude eviction: the
//! state's own mark does that.
//!
//! Outside loom it is the crate's own table ([`table`](super::table)): lookups of known keys take
//! no lock (the table's epoch keeps what they read alive), and inserts, replacements, eviction and
//! growth take the key's shard lock. Loom cannot see inside the epoch, so under
//! `cfg(tollgate_loom)` the store is a [`RwLock`](crate::sync::RwLock) around a `std`
//! `HashMap` of [`Arc`](crate::sync::Arc)s, with no lock held while a state is used, and eviction
//! marking and removing in separate steps: the weakest map the protocol allows (a lock-free map
//! whose readers hold no lock, and whose removal is not atomic with the mark), so that the loom
//! models check the protocol against every interleaving such a map admits.

#[cfg(tollgate_loom)]
use std::borrow::Borrow;
#[cfg(tollgate_loom)]
use std::hash::Hash;

/// What `Store::with_entry` found, under the key's lock.
pub(crate) enum Slot<'a, K, V> {
    /// The key was there; the key and its state.
    Occupied(&'a K, &'a V),
    /// The key was not there; the key.
    Vacant(&'a K),
}

#[cfg(not(tollgate_loom))]
pub(crate) use super::table::Table as Store;

#[cfg(tollgate_loom)]
pub(crate) struct Store<K, V, P> {
    /// The keys' states, and the context they are all kept under (as each of the table's tables
    /// carries one): one lock for both, so a reader takes a state and its context together.
    map: crate::sync::RwLock<(P, std::collections::HashMap<K, crate::sync::Arc<V>>)>,
}

#[cfg(tollgate_loom)]
impl<K: Hash + Eq, V, P: Clone> Store<K, V, P> {
    pub(crate) fn new(ctx: P) -> Store<K, V, P> {
        Store {
            map: crate::sync::RwLock::new((ctx, std::collections::HashMap::new())),
        }
    }

    /// `f` on the context a key created now would get.
    pub(crate) fn with_ctx<Q: ?Sized, R>(&self, _key: &Q, f: impl FnOnce(&P) -> R) -> R {
        let ctx = crate::sync::read(&self.map).0.clone();
        f(&ctx)
    }

    /// A quota change, as the table's: under the write lock, each state replaced by
    /// `convert(old context, ctx, state)` (which seals it: a reader still holding it meets the
    /// seal, answers `Gone`, and takes the new-key path, which finds the successor).
    pub(crate) fn convert(
        &self,
        ctx: &P,
        mut convert: impl FnMut(&P, &P, &V) -> V,
    ) -> Result<(), usize> {
        let mut map = crate::sync::write(&self.map);
        let (old, states) = &mut *map;
        for state in states.values_mut() {
            *state = crate::sync::Arc::new(convert(old, ctx, state));
        }
        *old = ctx.clone();
        Ok(())
    }

    /// Runs `f` on `key`'s state with no lock held (the `Arc` keeps it alive if it is removed
    /// meanwhile), or answers `None`. This map never moves or seals a state, so a `Gone` from
    /// `f` always means evicted, and is answered as the table answers it after its second look.
    #[inline]
    pub(crate) fn with_read<Q, R>(
        &self,
        key: &Q,
        f: impl Fn(&P, &V) -> Result<R, crate::cas::Gone>,
    ) -> Option<Result<R, crate::cas::Gone>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let held = {
            let map = crate::sync::read(&self.map);
            map.1.get(key).map(|state| (map.0.clone(), state.clone()))
        };
        held.map(|(ctx, state)| f(&ctx, &state))
    }

    /// `before()`, then `decide` and `describe` on the key's state with its answer: `None` if
    /// it decided nothing (not held, or marked), as the table's hot path answers.
    #[inline]
    pub(crate) fn with_read_after<Q, T: Copy, D, R>(
        &self,
        key: &Q,
        before: impl FnOnce() -> T,
        decide: impl Fn(&P, &V, T) -> Result<D, crate::cas::Gone>,
        describe: impl FnOnce(&P, D, T) -> R,
    ) -> (T, Option<R>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let t = before();
        let held = {
            let map = crate::sync::read(&self.map);
            map.1.get(key).map(|state| (map.0.clone(), state.clone()))
        };
        let answer = held.and_then(|(ctx, state)| {
            let decided = decide(&ctx, &state, t).ok()?;
            Some(describe(&ctx, decided, t))
        });
        (t, answer)
    }

    pub(crate) fn with_entry<R>(
        &self,
        key: K,
        f: impl FnOnce(&P, Slot<'_, K, V>) -> (Option<V>, R),
    ) -> R {
        let mut map = crate::sync::write(&self.map);
        let (ctx, states) = &mut *map;
        let (state, answer) = match states.get_key_value(&key) {
            Some((held, state)) => f(ctx, Slot::Occupied(held, state)),
            None => f(ctx, Slot::Vacant(&key)),
        };
        if let Some(state) = state {
            states.insert(key, crate::sync::Arc::new(state));
        }
        answer
    }

    /// Marks, then removes, in separate steps: a snapshot of the states under the read lock,
    /// `evict` on each with no lock held, then each marked one removed under the write lock only
    /// if it is still the key's state (a request may have replaced it with a fresh one since).
    pub(crate) fn retain(&self, mut evict: impl FnMut(&P, &V) -> bool) -> usize {
        let (ctx, states): (P, Vec<crate::sync::Arc<V>>) = {
            let map = crate::sync::read(&self.map);
            (map.0.clone(), map.1.values().cloned().collect())
        };
        let mut removed = 0;
        for state in states {
            if evict(&ctx, &state) {
                let mut map = crate::sync::write(&self.map);
                let before = map.1.len();
                map.1
                    .retain(|_, held| !crate::sync::Arc::ptr_eq(held, &state));
                removed += before - map.1.len();
            }
        }
        removed
    }

    pub(crate) fn shrink_to_fit(&self) {
        crate::sync::write(&self.map).1.shrink_to_fit();
    }

    /// Removed states still held by a reader: this map's are freed by their `Arc`s, so none
    /// is counted.
    pub(crate) fn unreclaimed(&self) -> usize {
        0
    }

    /// Nothing to free: see [`Store::unreclaimed`].
    pub(crate) fn reclaim_now(&self) {}
}
