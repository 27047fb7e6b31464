//! The queue's error types: a refused send hands its item back, a receive says why it has none.
//!
//! The send errors are `#[non_exhaustive]`: a send may gain ways to be refused (every one of them
//! still carrying the item, which `into_inner` hands back), so a `match` on them outside this crate
//! needs a wildcard arm. The receive errors name every answer a receive can give on an in-process
//! queue (nothing yet, not yet, closed and drained; timed out) and stay exhaustive, as
//! `std::sync::mpsc`'s do, so that a consumer loop can match them in full.

use std::fmt;

#[cfg(not(tollgate_loom))]
use super::LeakyReceiver;
#[cfg(not(tollgate_loom))]
use crate::clock::Clock;
use crate::clock::Nanos;

/// A refused [`LeakySender::try_send`](super::LeakySender::try_send): the item, handed back.
///
/// # Examples
///
/// ```
/// use tollgate::leaky::{self, TrySendError};
/// use tollgate::Quota;
///
/// let (tx, rx) = leaky::queue(Quota::per_second(1)?)?;
/// tx.try_send("kept").expect("room for one");
/// assert_eq!(tx.try_send("second"), Err(TrySendError::Full("second")));
/// rx.close();
/// let err = tx.try_send("late").unwrap_err();
/// assert!(err.is_closed());
/// assert_eq!(err.into_inner(), "late");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TrySendError<T> {
    /// The queue holds its capacity of accepted, unreleased items.
    Full(T),
    /// The queue is closed; no item will be accepted again.
    Closed(T),
}

impl<T> TrySendError<T> {
    /// The item that was refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::TrySendError;
    /// assert_eq!(TrySendError::Full(7).into_inner(), 7);
    /// ```
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(item) | TrySendError::Closed(item) => item,
        }
    }

    /// Whether the queue was full (retrying later may succeed).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(tollgate::leaky::TrySendError::Full(()).is_full());
    /// ```
    pub fn is_full(&self) -> bool {
        matches!(self, TrySendError::Full(_))
    }

    /// Whether the queue was closed (retrying never succeeds).
    ///
    /// # Examples
    ///
    /// ```
    /// assert!(tollgate::leaky::TrySendError::Closed(()).is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        matches!(self, TrySendError::Closed(_))
    }
}

/// Shows the variant, not the item (which need not be `Debug`).
impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => {
                f.write_str("the leaky queue is full; the item was handed back")
            }
            TrySendError::Closed(_) => {
                f.write_str("the leaky queue is closed; the item was handed back")
            }
        }
    }
}

impl<T> std::error::Error for TrySendError<T> {}

/// A refused [`LeakySender::send_timeout`](super::LeakySender::send_timeout): the item, handed back.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::leaky::{self, SendTimeoutError};
/// use tollgate::Quota;
///
/// let (tx, _rx) = leaky::queue(Quota::per_second(1)?)?;
/// tx.try_send(1).expect("room for one");
/// let err = tx.send_timeout(2, Duration::from_millis(1)).unwrap_err();
/// assert_eq!(err, SendTimeoutError::Timeout(2));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SendTimeoutError<T> {
    /// No room came free before the timeout.
    Timeout(T),
    /// The queue is closed, or closed while the sender waited.
    Closed(T),
}

impl<T> SendTimeoutError<T> {
    /// The item that was refused.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::SendTimeoutError;
    /// assert_eq!(SendTimeoutError::Closed("job").into_inner(), "job");
    /// ```
    pub fn into_inner(self) -> T {
        match self {
            SendTimeoutError::Timeout(item) | SendTimeoutError::Closed(item) => item,
        }
    }
}

/// Shows the variant, not the item (which need not be `Debug`).
impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            SendTimeoutError::Closed(_) => f.write_str("Closed(..)"),
        }
    }
}

impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str(
                "no room came free in the leaky queue before the timeout; the item was handed back",
            ),
            SendTimeoutError::Closed(_) => {
                f.write_str("the leaky queue is closed; the item was handed back")
            }
        }
    }
}

impl<T> std::error::Error for SendTimeoutError<T> {}

/// Why [`LeakyReceiver::try_recv`] returned no item.
///
/// # Examples
///
/// ```
/// use tollgate::leaky::{self, TryRecvError};
/// use tollgate::{ManualClock, Nanos, Quota};
///
/// let (tx, mut rx) = leaky::queue_with_clock::<u8, _>(Quota::per_second(1)?, ManualClock::new())?;
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
/// drop(tx); // the last sender closes the queue
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// Non-exhaustive, as the crate's other errors: a `match` outside this crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TryRecvError {
    /// Nothing is waiting now (an accepted item may still be on its way in).
    Empty,
    /// The next item is due at `release_at` (on the queue's clock).
    NotYet {
        /// The next item's release time.
        release_at: Nanos,
    },
    /// The queue is closed and every accepted item has been received: nothing more will come.
    Closed,
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("the leaky queue is empty"),
            TryRecvError::NotYet { release_at } => {
                write!(f, "the next item is released at {release_at}")
            }
            TryRecvError::Closed => f.write_str("the leaky queue is closed and drained"),
        }
    }
}

impl std::error::Error for TryRecvError {}

/// Why [`LeakyReceiver::recv_timeout`] returned no item.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::leaky::{self, RecvTimeoutError};
/// use tollgate::Quota;
///
/// let (_tx, mut rx) = leaky::queue::<u8>(Quota::per_second(1)?)?;
/// assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Err(RecvTimeoutError::Timeout));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// Non-exhaustive, as the crate's other errors: a `match` outside this crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RecvTimeoutError {
    /// No item was released before the timeout.
    Timeout,
    /// The queue is closed and every accepted item has been received.
    Closed,
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvTimeoutError::Timeout => f.write_str("no item was released before the timeout"),
            RecvTimeoutError::Closed => f.write_str("the leaky queue is closed and drained"),
        }
    }
}

impl std::error::Error for RecvTimeoutError {}

/// [`LeakySender::send_async`](super::LeakySender::send_async) found the queue closed: the item, handed back.
///
/// # Examples
///
/// ```
/// use tollgate::leaky::SendError;
/// assert_eq!(SendError("job").into_inner(), "job");
/// ```
#[cfg(all(feature = "tokio", not(tollgate_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SendError<T>(pub T);

#[cfg(all(feature = "tokio", not(tollgate_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<T> SendError<T> {
    /// The item that was refused.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::leaky::SendError(3).into_inner(), 3);
    /// ```
    pub fn into_inner(self) -> T {
        self.0
    }
}

/// Shows the variant, not the item (which need not be `Debug`).
#[cfg(all(feature = "tokio", not(tollgate_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError(..)")
    }
}

#[cfg(all(feature = "tokio", not(tollgate_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the leaky queue is closed; the item was handed back")
    }
}

#[cfg(all(feature = "tokio", not(tollgate_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<T> std::error::Error for SendError<T> {}

/// [`LeakyReceiver::spawn_drain`] could not start its thread; the receiver is handed back.
///
/// # Examples
///
/// ```
/// # use tollgate::leaky::{LeakyReceiver, SpawnDrainError};
/// fn start(rx: LeakyReceiver<u8>) -> Option<LeakyReceiver<u8>> {
///     match rx.spawn_drain(|_| {}) {
///         Ok(_drain) => None,
///         Err(SpawnDrainError { receiver, .. }) => Some(receiver), // nothing lost
///     }
/// }
/// ```
#[cfg(not(tollgate_loom))]
pub struct SpawnDrainError<T, C: Clock> {
    /// The consumer, with every item still in it.
    pub receiver: LeakyReceiver<T, C>,
    /// Why the thread could not be started.
    pub error: std::io::Error,
}

#[cfg(not(tollgate_loom))]
impl<T, C: Clock> fmt::Debug for SpawnDrainError<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SpawnDrainError")
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

#[cfg(not(tollgate_loom))]
impl<T, C: Clock> fmt::Display for SpawnDrainError<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not start the leaky queue's drain thread: {}",
            self.error
        )
    }
}

#[cfg(not(tollgate_loom))]
impl<T, C: Clock> std::error::Error for SpawnDrainError<T, C> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
