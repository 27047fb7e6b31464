//! The leaky bucket, as a queue: work goes in at any pace and comes out at exactly R per second.
//!
//! | type | what it does |
//! | --- | --- |
//! | [`LeakyQueue`] | the single consumer of a bounded queue of capacity C, released at R items per second (deadline pacing) |
//! | [`LeakySender`] | a cloneable producer handle: `try_send` answers with a [`Ticket`] or hands the item back |
//! | [`DrainHandle`] | a thread that runs a handler on every released item, stopped on demand |
//!
//! See [`queue`] for the protocol, the pacing and the shutdown rules.

pub mod queue;

#[cfg(all(feature = "tokio", not(loom)))]
pub use queue::SendError;
#[cfg(not(loom))]
pub use queue::{DrainHandle, SpawnDrainError};
pub use queue::{
    LeakyQueue, LeakySender, RecvTimeoutError, SendTimeoutError, Ticket, TryRecvError, TrySendError,
};
