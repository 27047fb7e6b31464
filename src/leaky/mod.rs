//! The leaky bucket, twice: as a meter that only measures ([`LeakyMeter`]) and as a queue that holds
//! the work (`leaky::queue`, built separately).
//!
//! The design notes picture a bucket with a hole in the bottom: requests pour in, leak out at a
//! steady rate R, and overflow is refused. Unlike the [`TokenBucket`](crate::TokenBucket), whose
//! admissions leave as fast as they arrive up to a burst of C, a leaky bucket's *output* is smooth:
//! one request every interval `1/R`, whatever burst arrived.
//!
//! # Which one
//!
//! | limiter | what leaves | what a caller gets | state |
//! | --- | --- | --- | --- |
//! | [`TokenBucket`](crate::TokenBucket) | up to C at once, then R per second | yes or no, now | one `AtomicU64` |
//! | [`LeakyMeter::try_schedule`] | exactly one per interval | a place in a virtual queue of at most C, and the delay to wait before acting | one `AtomicU64` |
//! | [`LeakyMeter::try_acquire`] | at most one per interval, no burst at all | yes only when the virtual queue is empty | one `AtomicU64` |
//! | `leaky::queue` | exactly R per second, released by one drain | the item is held and handed on; overflow is handed back | a bounded queue |
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
//! leave at once. See the [`meter`] module for the semantics in full.

pub mod meter;

pub use meter::LeakyMeter;
