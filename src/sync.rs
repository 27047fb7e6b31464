//! The only place in the crate that names `std::sync::atomic` or `loom`.
//!
//! Under `cfg(loom)` every atomic, `Arc`, `spin_loop` and `yield_now` comes from loom, so that the
//! models in `loom-tests/` explore every interleaving of the real code; otherwise they come from
//! `std`. No other file imports an atomic type directly. `spin_loop` and `yield_now` join this list
//! with the first algorithm that spins or yields (none does yet: every loop here is a CAS retry that
//! makes progress whenever it fails).

#[cfg(all(loom, not(feature = "loom")))]
compile_error!(
    "`--cfg loom` needs the `loom` feature: build with `--features loom` (see loom-tests/)"
);

#[cfg(all(loom, feature = "loom"))]
pub(crate) use loom::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

#[cfg(not(loom))]
pub(crate) use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};
