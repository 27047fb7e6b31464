//! The bench groups. What they share (the quotas, the `Mutex` baseline and the timed loops) is
//! `testkit::bench`, which the `latency` bench uses too.

pub(crate) mod all_of;
pub(crate) mod contended;
pub(crate) mod keyed;
pub(crate) mod leaky;
pub(crate) mod metrics;
pub(crate) mod sharded;
pub(crate) mod single;
pub(crate) mod windows;
