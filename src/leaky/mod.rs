//! The leaky bucket, twice: as a meter that only measures ([`LeakyMeter`]) and as a queue that holds
//! the work ([`queue()`], which returns the producers' [`LeakySender`] and the consumer's
//! [`LeakyReceiver`]).
//!
//! The design notes picture a bucket with a hole in the bottom: requests pour in, leak out at a
//! steady rate R, and overflow is refused. Unlike the [`TokenBucket`](crate::TokenBucket), whose
//! admissions leave as fast as they arrive up to a burst of C, a leaky bucket's *output* is smooth:
//! one request every interval `1/R`, whatever burst arrived.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{leaky::LeakyMeter, ManualClock, Quota, TokenBucket};
//!
//! let quota = Quota::per_second(4)?; // capacity 4
//! let bucket = TokenBucket::with_clock(quota, ManualClock::new());
//! let meter = LeakyMeter::with_clock(quota, ManualClock::new());
//! // A burst of 4: the bucket lets all of them go now, the meter spaces them 250 ms apart.
//! assert!((0..4).all(|_| bucket.try_acquire().is_ok()));
//! let delays: Vec<Duration> = (0..4).map(|_| meter.try_schedule().unwrap().delay()).collect();
//! assert_eq!(delays, [0, 250, 500, 750].map(Duration::from_millis));
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Which one
//!
//! | limiter | what leaves | what a caller gets | state |
//! | --- | --- | --- | --- |
//! | [`TokenBucket`](crate::TokenBucket) | up to C at once, then R per second | yes or no, now | one `AtomicU64` |
//! | [`LeakyMeter::try_schedule`] | exactly one per interval | a place in a virtual queue of at most C, and the delay to wait before acting | one `AtomicU64` |
//! | [`LeakyMeter::try_acquire`] | at most one per interval, no burst at all | yes only when the virtual queue is empty | one `AtomicU64` |
//! | [`queue()`]: [`LeakySender`] + [`LeakyReceiver`] | exactly R per second, released to one consumer (or a [`DrainHandle`] thread) | a [`Ticket`] (position, release time) for an item held and handed on; overflow is handed back | a bounded queue of C slots, allocated up front |
//!
//! The meter holds no items: a scheduled caller does its own waiting (a `sleep`, a timer), which
//! costs the meter nothing, and a caller that would wait too long is refused with an exact
//! `retry_after`. Use it to pace calls to a backend that needs a steady rate (a disk, a database
//! with a fixed I/O budget, a third-party API that counts per second) from many threads, without a
//! queue or a drain thread. Use the token bucket where bursts are welcome, and the queue where the
//! work itself must be handed over and released in order.
//!
//! # The meter and the token bucket
//!
//! Both keep the same number, read from opposite sides: the token bucket's theoretical arrival time
//! is the meter's *drain time*, the instant its virtual queue will be empty. A scheduled request is
//! admitted exactly when the token bucket with the same quota would admit it; the meter adds the
//! delay after which it leaves, and its strict [`LeakyMeter::try_acquire`] admits only what would
//! leave at once. See the [`meter`] module for the semantics in full, and [`queue`](mod@queue) for the
//! queue's protocol, pacing and shutdown rules.

pub mod meter;
pub mod queue;

pub use meter::LeakyMeter;
#[cfg(all(feature = "tokio", not(tollgate_loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use queue::SendError;
pub use queue::{
    queue, queue_with_clock, LeakyReceiver, LeakySender, RecvTimeoutError, SendTimeoutError,
    Ticket, TryRecvError, TrySendError, MAX_QUEUE_CAPACITY,
};
#[cfg(not(tollgate_loom))]
pub use queue::{DrainHandle, SpawnDrainError};
