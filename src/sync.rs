//! The only place in the crate that names `std::sync::atomic` or `loom`.
//!
//! Under `cfg(tollgate_loom)` every atomic, `Arc`, `spin_loop` and `yield_now` comes from loom, so that the
//! models in `loom-tests/` explore every interleaving of the real code; otherwise they come from
//! `std`. No other file imports an atomic type directly. `Mutex`, `Condvar` and `yield_now` joined
//! the list with the leaky queue, whose consumer and waiting senders sleep on condition variables;
//! [`lock`] is the one place that recovers a poisoned lock. `AtomicUsize` and (under loom only)
//! `RwLock` came with the keyed limiter, whose loom stand-in for its concurrent map is a read-write
//! lock around a `HashMap`. `AtomicU8` and `AtomicPtr` came with the keyed limiter's own table
//! (its control bytes, its tables and entries); loom's `UnsafeCell` marks, under loom only, each
//! entry's accesses against its freeing.

#[cfg(all(tollgate_loom, not(feature = "loom")))]
compile_error!(
    "`--cfg tollgate_loom` needs the `loom` feature: build with `--features loom` (see loom-tests/)"
);

#[cfg(all(tollgate_loom, feature = "loom"))]
pub(crate) use loom::{
    hint::spin_loop,
    sync::{
        atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering},
        Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard,
    },
    thread::yield_now,
};

#[cfg(all(tollgate_loom, feature = "loom"))]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(tollgate_loom))]
pub(crate) use std::{
    hint::spin_loop,
    sync::{
        atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering},
        Arc, Condvar, Mutex, MutexGuard,
    },
    thread::yield_now,
};

/// Locks `mutex`, recovering the guard from a poisoned lock: every mutex in the crate guards `()`
/// or data that a panicking holder cannot leave half-updated, so poison carries no information and
/// must not turn into a panic in the caller.
#[inline]
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Read-locks `rwlock`, recovering from poison as [`lock`] does (only the loom stand-in for the
/// keyed limiter's map uses an `RwLock`, and its holders never leave the map half-updated).
#[cfg(tollgate_loom)]
#[inline]
pub(crate) fn read<T>(rwlock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rwlock
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write-locks `rwlock`, recovering from poison as [`lock`] does.
#[cfg(tollgate_loom)]
#[inline]
pub(crate) fn write<T>(rwlock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rwlock
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
