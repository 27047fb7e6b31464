//! The only place in the crate that names `std::sync::atomic` or `loom`.
//!
//! Under `cfg(loom)` every atomic, `Arc`, `spin_loop` and `yield_now` comes from loom, so that the
//! models in `loom-tests/` explore every interleaving of the real code; otherwise they come from
//! `std`. No other file imports an atomic type directly. `yield_now` joins this list with the first
//! algorithm that yields (none does yet).

#[cfg(all(loom, not(feature = "loom")))]
compile_error!(
    "`--cfg loom` needs the `loom` feature: build with `--features loom` (see loom-tests/)"
);

#[cfg(all(loom, feature = "loom"))]
pub(crate) use loom::{
    hint::spin_loop,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

#[cfg(not(loom))]
pub(crate) use std::{
    hint::spin_loop,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};
