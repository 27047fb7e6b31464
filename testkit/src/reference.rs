//! Exact reference models, one per algorithm, each written from the documented semantics and
//! sharing no arithmetic with the crate: plain `i128`/`u128` numbers, maps and lists where the crate
//! packs words.

pub mod bucket;
pub mod counter;
pub mod fixed;
pub mod log;
pub mod meter;
pub mod sharded;
