//! Drivers: each runs one of the crate's limiters and its reference model through the same
//! operations and asserts that every answer is identical, to the nanosecond.

pub mod bucket;
pub mod counter;
pub mod keyed;
pub mod keyed_pair;
pub mod limiter;
pub mod log;
pub mod meter;
pub mod queue;
pub mod sharded;
