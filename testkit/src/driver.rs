//! Drivers: each runs one of the crate's limiters and its reference model through the same
//! operations and asserts that every answer is identical, to the nanosecond.
//!
//! Their operations share one vocabulary: [`limiter::Request`] for the calls every limiter
//! answers (with [`limiter::Amount`], relative to the limit) and [`step::Step`] for the clock;
//! each driver's own `Op` adds only what is its own.

pub mod all_of;
pub mod bucket;
pub mod change;
pub mod counter;
pub mod keyed;
pub mod keyed_pair;
pub mod limiter;
pub mod log;
pub mod meter;
pub mod queue;
pub mod sharded;
pub mod step;
