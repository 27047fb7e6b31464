//! The bench groups and what they share: the quotas, the `Mutex` baseline and the timed loops.

pub(crate) mod common;
pub(crate) mod contended;
pub(crate) mod keyed;
pub(crate) mod leaky;
pub(crate) mod sharded;
pub(crate) mod single;
pub(crate) mod windows;
