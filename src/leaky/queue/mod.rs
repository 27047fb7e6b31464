//! The leaky bucket as a queue: a bounded multi-producer, single-consumer queue of capacity C whose
//! consumer releases items at exactly R per second, and which never loses an item.
//!
//! [`queue`] (or [`queue_with_clock`]) returns a cloneable [`LeakySender`] for the producers and
//! the [`LeakyReceiver`], the one consumer, in the shape of `std::sync::mpsc`. A producer's
//! [`try_send`](LeakySender::try_send) either accepts the item and answers with a [`Ticket`] (its
//! position and expected release time) or hands it back ([`TrySendError::Full`],
//! [`TrySendError::Closed`]); nothing is ever dropped on the floor. The consumer's
//! [`recv`](LeakyReceiver::recv) blocks until the next item's release time.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate::leaky::{self, TryRecvError};
//! use tollgate::{ManualClock, Nanos, Quota};
//!
//! // 10 items a second, up to 3 waiting.
//! let clock = ManualClock::new();
//! let (tx, mut rx) = leaky::queue_with_clock(Quota::per_second(10)?.with_capacity(3)?, clock.clone())?;
//! for job in ["a", "b", "c"] {
//!     tx.try_send(job).expect("room for three");
//! }
//! assert_eq!(tx.try_send("d").unwrap_err().into_inner(), "d"); // full: handed back
//!
//! assert_eq!(rx.try_recv(), Ok("a")); // the first goes at once
//! assert_eq!(rx.try_recv(), Err(TryRecvError::NotYet { release_at: Nanos::new(100_000_000) }));
//! clock.advance(Duration::from_millis(100));
//! assert_eq!(rx.try_recv(), Ok("b"));
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Pacing
//!
//! The interval is I = period / count of the [`Quota`], rounded up to a whole nanosecond, so the
//! queue never releases faster than configured. Each accepted item gets a release time
//!
//! ```text
//! release(first item ever) = arrival(first)
//! release(k)               = min(max(release(k − 1) + I, arrival(k)), 2^62 ns)
//! ```
//!
//! where `arrival` is the sender's clock reading. While items wait, releases are exactly I apart on
//! a fixed grid (deadline pacing: a consumer that wakes late does not push later releases back, so
//! the long-run rate does not drift). When the queue has run empty and the grid's next slot has
//! passed, the next item re-anchors the grid at its own arrival: idleness is never "saved up" into a
//! catch-up burst. Any span of length `t` ending before 2^62 ns contains at most `1 + t / I`
//! release times.
//!
//! A consumer that calls [`recv`](LeakyReceiver::recv) late (because its handler was slow) finds the
//! items whose release time has passed available at once, in order: the grid is kept, so it catches
//! up on its own lateness (never on idle time), by at most the items already due.
//!
//! [`LeakyReceiver::try_recv_at`] takes the reading explicitly and is exact to the nanosecond; the
//! blocking forms read the clock, and assume it advances with real time (a [`ManualClock`] that
//! nobody advances makes `recv` wait forever; use the `_at` forms with one).
//!
//! ## Precision
//!
//! A blocking wait sleeps on a condition variable until 50 µs before the release time, then spins
//! on the clock (with a spin-loop hint) for the rest. The OS timer's slack (about 50 µs by default
//! on Linux) is thereby absorbed, and releases land within a few clock reads of their time, at the
//! cost of keeping the consumer thread busy for up to 50 µs per item: at 20 000 items per second or
//! more, the consumer effectively never sleeps. A release is never early; how late it is depends on
//! the scheduler (a thread preempted past its release time is late by the time slice, and the
//! items after it keep their times). The `pacing` bench measures how late releases land
//! (`benches/README.md`). The async `recv_async` (feature `tokio`) has tokio's 1 ms timer
//! granularity.
//!
//! ## The end of time
//!
//! Readings are clamped to [`Nanos::MAX_USABLE`](crate::Nanos::MAX_USABLE) (2^62 ns, about 146
//! years after the clock's epoch), and release times are clamped to the same bound, so the two
//! always compare in one domain: **every accepted item can be received**, at the latest by a
//! receive at a reading of 2^62 ns or more (each `try_recv_at(Nanos::new(u64::MAX))` takes the
//! next waiting item). The price is at the bound itself: the grid cannot move past it, so items
//! whose slots would lie beyond it all fall due there, together. Only a reading at or near the
//! bound puts them there: a monotonic clock takes 146 years to get there, and a send never
//! schedules ahead of the queue's own clock (a reading ahead of it counts as the clock's; see
//! [Readings ahead of the clock](crate#readings-ahead-of-the-clock)), so only a clock that itself
//! reads the end of time does. Before that rule, a timestamp from elsewhere passed to
//! [`try_send_at`](LeakySender::try_send_at) moved the grid there, and every item behind it waited
//! about 146 years.
//!
//! [`ManualClock`]: crate::ManualClock
//!
//! # Capacity
//!
//! At most C items are accepted and not yet released: the count includes items a sender has
//! reserved room for but not yet stored, and the one item the consumer may hold while it waits for
//! the item's release time. C is at most [`MAX_QUEUE_CAPACITY`] (2^24) because the storage
//! (crossbeam's `ArrayQueue`) allocates one slot per item up front; a larger capacity is
//! refused ([`QuotaError::Algorithm`], naming the capacity). The quota's initial fill does not
//! apply: a queue starts empty.
//!
//! # Shutdown
//!
//! [`close`](LeakyReceiver::close) (on the queue or on any sender) stops new items: every later
//! `try_send` gets [`TrySendError::Closed`] back with its item. Every item accepted before the close
//! is still delivered: by `recv` at the paced rate, until it answers `None`, or all at once by
//! [`drain_now`](LeakyReceiver::drain_now) or [`into_leftovers`](LeakyReceiver::into_leftovers).
//! Dropping the last sender closes the queue. Dropping the [`LeakyReceiver`] closes it too, and the
//! items still in it are dropped (when the last handle goes): call `into_leftovers` to keep them.
//!
//! # Protocol
//!
//! One `AtomicU64` holds the closed flag, the accepted-item count and the wake-up flags (see the
//! state table on `State`, in `state.rs`). A send reserves room with one compare-and-swap on it, which
//! fails if the queue is closed or full; so a close and a send are ordered by that word's
//! modification order: a send whose reservation comes first has its item counted, and the consumer
//! does not report the queue finished (closed and empty) until the count is back to zero, that is,
//! until it has received that item. There is no window where an item is accepted and then lost.
//!
//! The consumer sleeps only after setting a "parked" bit with a read-modify-write on the same word;
//! a sender, after storing its item, does a read-modify-write on it too, and wakes the consumer if
//! it sees the bit. Both are read-modify-writes of one word, so one of them comes second and sees the
//! other: either the consumer sees the item, or the sender sees the bit. Senders waiting for room in
//! [`send_timeout`](LeakySender::send_timeout) use a waiter count in the same word the same way
//! against the consumer's release of an item. The loom models in `loom-tests/tests/leaky_queue.rs`
//! check these races (with the storage swapped for a mutex-protected `VecDeque`, which loom can
//! model, in place of crossbeam's `ArrayQueue`, which it cannot). The async forms (feature `tokio`)
//! use the same two handshakes, with a `tokio::sync::Notify` in place of each condition variable.
//!
//! Per-producer order holds: a producer's items are stored in the order of its calls, and the storage
//! is a FIFO queue, so they are released in that order. Items of different producers interleave in
//! the order their stores completed.
//!
//! # Memory ordering
//!
//! Everything a producer did before a successful `try_send` happens-before the consumer receives
//! that item (the storage's push and pop synchronize). Besides the storage, only the state word
//! carries synchronization: the sender's wake-up read-modify-write is `Release` and the consumer's
//! park is `Acquire`, so an item stored before the sender's read-modify-write is visible to the
//! consumer's check after its own. The close flag, the count and the waiter count publish no other
//! memory, so their reads and writes are `Relaxed`: read-modify-writes of one word always see the
//! latest value, which is all the counting needs. No `SeqCst` is needed: there is no store-load
//! pattern across two different words.
//!
//! # Cost
//!
//! A successful send is three compare-and-swap or read-modify-write operations on shared words (the
//! reservation, the ticket's schedule estimate, the wake-up check) plus the `ArrayQueue` push; a
//! refused send is one load and one failed decision, with no write. A release is one pop and one
//! read-modify-write.

// One file each: the state word and its pure decisions (`state`), what both halves share and the
// send path (`shared`), the error types (`error`), the producers' half (`sender`), the consumer's
// half (`receiver`), the async forms (`async`) and the drain thread (`drain`). This file holds the
// docs, the re-exports and the constructor.
mod error;
mod receiver;
mod sender;
mod shared;
mod state;

#[cfg(all(feature = "tokio", not(tollgate_loom)))]
mod r#async;
#[cfg(not(tollgate_loom))]
mod drain;

#[cfg(not(tollgate_loom))]
pub use drain::DrainHandle;
#[cfg(all(feature = "tokio", not(tollgate_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use error::SendError;
#[cfg(not(tollgate_loom))]
pub use error::SpawnDrainError;
pub use error::{RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError};
pub use receiver::LeakyReceiver;
pub use sender::{LeakySender, Ticket};

use crate::clock::{duration_to_nanos, Clock, MonotonicClock};
use crate::quota::{AlgorithmLimit, Quota, QuotaError};
use crate::sync::Arc;
use shared::QueueShared;

/// The largest capacity a leaky queue accepts: 2^24 items (its storage allocates one slot per
/// item up front). A larger [`Quota::capacity`] is refused with [`QuotaError::Algorithm`] naming the capacity.
///
/// # Examples
///
/// ```
/// use tollgate::{leaky, Quota, QuotaError};
///
/// assert_eq!(leaky::MAX_QUEUE_CAPACITY, 1 << 24);
/// let too_long = Quota::per_second(1)?.with_capacity(leaky::MAX_QUEUE_CAPACITY + 1)?;
/// assert!(matches!(leaky::queue::<u8>(too_long), Err(QuotaError::Algorithm(l)) if l.field() == "capacity"));
/// # Ok::<(), QuotaError>(())
/// ```
pub const MAX_QUEUE_CAPACITY: u64 = 1 << 24;

/// A leaky queue releasing `quota.count()` items per `quota.period()` and holding up to
/// `quota.capacity()`, on the default clock: the first [`LeakySender`] (clone it for more
/// producers) and the one [`LeakyReceiver`], in the shape of `std::sync::mpsc::sync_channel`.
///
/// Fallible, by the crate's rule for constructors: one that can be given a [`Quota`] it cannot
/// honour returns [`QuotaError`], naming the field and the accepted range.
///
/// # Errors
///
/// [`QuotaError::Algorithm`] naming the capacity for one above [`MAX_QUEUE_CAPACITY`].
///
/// # Examples
///
/// ```
/// use tollgate::leaky;
/// use tollgate::Quota;
///
/// let (tx, rx) = leaky::queue::<String>(Quota::per_second(50)?.with_capacity(200)?)?;
/// assert_eq!(rx.capacity(), 200);
/// assert!(leaky::queue::<u8>(Quota::per_second(1)?.with_capacity(1 << 30)?).is_err());
/// # drop(tx);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub fn queue<T>(quota: Quota) -> Result<(LeakySender<T>, LeakyReceiver<T>), QuotaError> {
    queue_with_clock(quota, MonotonicClock::new())
}

/// [`queue`] on a clock of your choice.
///
/// # Errors
///
/// [`QuotaError::Algorithm`] naming the capacity for one above [`MAX_QUEUE_CAPACITY`].
///
/// # Examples
///
/// ```
/// use tollgate::leaky;
/// use tollgate::{ManualClock, Quota};
///
/// let (tx, mut rx) = leaky::queue_with_clock(Quota::per_second(4)?, ManualClock::new())?;
/// tx.try_send("now").expect("room");
/// assert_eq!(rx.try_recv(), Ok("now"));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
// The channel-style pair reads better at the call site than an alias would.
#[allow(clippy::type_complexity)]
pub fn queue_with_clock<T, C: Clock>(
    quota: Quota,
    clock: C,
) -> Result<(LeakySender<T, C>, LeakyReceiver<T, C>), QuotaError> {
    let capacity = quota.capacity();
    let slots = match usize::try_from(capacity) {
        Ok(n) if capacity <= MAX_QUEUE_CAPACITY => n,
        _ => {
            let limit = AlgorithmLimit::new(
                "leaky queue",
                "capacity",
                capacity,
                MAX_QUEUE_CAPACITY,
                |l, f| {
                    write!(
                        f,
                        "capacity of a {} must be between 1 and {} (one slot per item, allocated up front), got {}",
                        l.algorithm(),
                        l.bound(),
                        l.got()
                    )
                },
            );
            return Err(QuotaError::Algorithm(limit));
        }
    };
    let interval = duration_to_nanos(quota.interval());
    let shared = Arc::new(QueueShared::new(slots, capacity, interval, clock));
    let sender = LeakySender {
        shared: Arc::clone(&shared),
    };
    let receiver = LeakyReceiver {
        shared,
        hand: None,
        next: 0,
    };
    Ok((sender, receiver))
}
