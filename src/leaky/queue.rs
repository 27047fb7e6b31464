//! The leaky bucket as a queue: a bounded multi-producer, single-consumer queue of capacity C whose
//! consumer releases items at exactly R per second, and which never loses an item.
//!
//! [`LeakyQueue::new`] returns a cloneable [`LeakySender`] for the producers and the [`LeakyQueue`]
//! itself, the one consumer. A producer's [`try_send`](LeakySender::try_send) either accepts the
//! item and answers with a [`Ticket`] (its position and expected release time) or hands it back
//! ([`TrySendError::Full`], [`TrySendError::Closed`]); nothing is ever dropped on the floor. The
//! consumer's [`recv`](LeakyQueue::recv) blocks until the next item's release time.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate::leaky::{LeakyQueue, TryRecvError};
//! use tollgate::{ManualClock, Nanos, Quota};
//!
//! // 10 items a second, up to 3 waiting.
//! let clock = ManualClock::new();
//! let (tx, mut rx) = LeakyQueue::with_clock(Quota::per_second(10)?.with_capacity(3)?, clock.clone())?;
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
//! ## The end of time
//!
//! Readings are clamped to [`Nanos::MAX_USABLE`] (2^62 ns, about 146 years after the clock's
//! epoch), and release times are clamped to the same bound, so the two always compare in one
//! domain: **every accepted item can be received**, at the latest by a receive at a reading of
//! 2^62 ns or more (`try_recv_at(Nanos::new(u64::MAX))` takes every waiting item, one per call).
//! The price is at the bound itself: the grid cannot move past it, so items whose slots would lie
//! beyond it all fall due there, together. Only a reading at or near the bound puts them there:
//! a monotonic clock takes 146 years to get there, so in practice this is a timestamp from
//! elsewhere passed to [`try_send_at`](LeakySender::try_send_at). Such a reading moves the grid,
//! and the items behind it wait for it, as in any FIFO; [`drain_now`](LeakyQueue::drain_now) and
//! [`into_leftovers`](LeakyQueue::into_leftovers) hand them over at once.
//!
//! A consumer that calls [`recv`](LeakyQueue::recv) late (because its handler was slow) finds the
//! items whose release time has passed available at once, in order: the grid is kept, so it catches
//! up on its own lateness (never on idle time), by at most the items already due.
//!
//! [`LeakyQueue::try_recv_at`] takes the reading explicitly and is exact to the nanosecond; the
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
//! items after it keep their times). A rough run on the loaded 2-core development machine measured
//! a median lateness of 14 µs at 1000 per second and 4 µs at 10 000 per second, with a tail of a
//! few milliseconds under load; the benches measure it properly. The async
//! `recv_async` (feature `tokio`) has tokio's 1 ms timer granularity.
//!
//! [`ManualClock`]: crate::ManualClock
//!
//! # Capacity
//!
//! At most C items are accepted and not yet released: the count includes items a sender has
//! reserved room for but not yet stored, and the one item the consumer may hold while it waits for
//! the item's release time. C is at most [`LeakyQueue::MAX_CAPACITY`] (2^24) because the storage
//! (crossbeam's `ArrayQueue`) allocates one slot per item up front; a larger capacity is
//! [`QuotaError::QueueTooLong`]. The quota's initial fill does not apply: a queue starts empty.
//!
//! # Shutdown
//!
//! [`close`](LeakyQueue::close) (on the queue or on any sender) stops new items: every later
//! `try_send` gets [`TrySendError::Closed`] back with its item. Every item accepted before the close
//! is still delivered: by `recv` at the paced rate, until it answers `None`, or all at once by
//! [`drain_now`](LeakyQueue::drain_now) or [`into_leftovers`](LeakyQueue::into_leftovers). Dropping
//! the last sender closes the queue. Dropping the [`LeakyQueue`] closes it too, and the items still
//! in it are dropped (when the last handle goes): call `into_leftovers` to keep them.
//!
//! # Protocol
//!
//! One `AtomicU64` holds the closed flag, the accepted-item count and the wake-up flags (see the
//! state table on `Shared::state`). A send reserves room with one compare-and-swap on it, which
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

use std::convert::Infallible;
use std::fmt;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::cas::{self, Step};
use crate::clock::{duration_to_nanos, Clock, MonotonicClock, Nanos};
use crate::quota::{Quota, QuotaError};
use crate::sync::{
    lock, spin_loop, yield_now, Arc, AtomicBool, AtomicU64, Condvar, Mutex, Ordering,
};

/// How long before a release time a blocking wait stops sleeping and spins on the clock.
const SPIN_NANOS: u64 = 50_000;

// ---------------------------------------------------------------------------------------------
// The state word
// ---------------------------------------------------------------------------------------------

/// The queue's state word: closed flag, consumer-parked flag, room-waiter count, accepted count.
///
/// # State table
///
/// | bits | field | who sets it | who clears it |
/// | --- | --- | --- | --- |
/// | 0 | `CLOSED` | `close` (once; never cleared) | nobody |
/// | 1 | `PARKED` | the consumer, under its mutex, just before it waits | the consumer, after it wakes or decides not to wait |
/// | 2..32 | room waiters | a sender in `send_timeout`, under the room mutex, before it waits | the same sender, after |
/// | 32..64 | `len`: accepted, not yet released | a sender's reservation (`+1`, only while not closed and `len < C`) | the consumer's release of an item (`-1`) |
///
/// Legal states: `len <= C <= 2^24` always. After `CLOSED` is set, `len` only decreases. The queue
/// is finished (nothing more will ever be received) exactly when `CLOSED` is set and `len == 0`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct State(u64);

impl State {
    const CLOSED: u64 = 1;
    const PARKED: u64 = 1 << 1;
    const WAITER_ONE: u64 = 1 << 2;
    const WAITER_MASK: u64 = ((1 << 30) - 1) << 2;
    const LEN_SHIFT: u32 = 32;
    const LEN_ONE: u64 = 1 << State::LEN_SHIFT;

    fn closed(self) -> bool {
        self.0 & State::CLOSED != 0
    }

    fn parked(self) -> bool {
        self.0 & State::PARKED != 0
    }

    fn waiters(self) -> u64 {
        (self.0 & State::WAITER_MASK) >> 2
    }

    fn len(self) -> u64 {
        self.0 >> State::LEN_SHIFT
    }

    /// Nothing more will ever be received.
    fn finished(self) -> bool {
        self.closed() && self.len() == 0
    }
}

/// The grid's slot after one at `release`: one interval later, clamped to [`Nanos::MAX_USABLE`].
///
/// Release times live in the same clamped domain as readings. Every reading is clamped to 2^62 ns,
/// so a release time beyond it would never come: an item queued behind one sent at the end of time
/// would be held for ever. Clamped, the grid stops at 2^62 and every item there falls due at the
/// latest reading. Both the senders' estimate and the consumer's schedule step through here.
fn next_slot(release: u64, interval: u64) -> u64 {
    release
        .saturating_add(interval)
        .min(Nanos::MAX_USABLE.as_u64())
}

/// Why a reservation failed.
enum Refusal {
    Full,
    Closed,
}

/// The reservation decision: one more accepted item, if the queue is open and has room. Pure.
fn reserve(word: u64, capacity: u64) -> Step<u64, Refusal> {
    let s = State(word);
    if s.closed() {
        Step::Refuse(Refusal::Closed)
    } else if s.len() >= capacity {
        Step::Refuse(Refusal::Full)
    } else {
        // Cannot carry out of the word: len < capacity <= 2^24.
        Step::Write(word + State::LEN_ONE, s.len())
    }
}

// ---------------------------------------------------------------------------------------------
// Storage: crossbeam's ArrayQueue, or a loom-modelled VecDeque
// ---------------------------------------------------------------------------------------------

/// The FIFO storage. Loom cannot see inside crossbeam's `ArrayQueue`, so under `cfg(tollgate_loom)` this is a
/// mutex around a `VecDeque` with the same interface: the loom models check the queue's own protocol
/// (the state word, parking, the schedule), taking the storage's linearizability as given.
#[cfg(not(tollgate_loom))]
struct Slots<T>(crossbeam_queue::ArrayQueue<T>);

#[cfg(not(tollgate_loom))]
impl<T> Slots<T> {
    fn new(capacity: usize) -> Slots<T> {
        Slots(crossbeam_queue::ArrayQueue::new(capacity))
    }

    fn push(&self, item: T) -> Result<(), T> {
        self.0.push(item)
    }

    fn pop(&self) -> Option<T> {
        self.0.pop()
    }
}

#[cfg(tollgate_loom)]
struct Slots<T>(Mutex<std::collections::VecDeque<T>>);

#[cfg(tollgate_loom)]
impl<T> Slots<T> {
    fn new(capacity: usize) -> Slots<T> {
        Slots(Mutex::new(std::collections::VecDeque::with_capacity(
            capacity,
        )))
    }

    fn push(&self, item: T) -> Result<(), T> {
        lock(&self.0).push_back(item);
        Ok(())
    }

    fn pop(&self) -> Option<T> {
        lock(&self.0).pop_front()
    }
}

// ---------------------------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------------------------

/// What the senders and the consumer share.
struct Shared<T, C> {
    /// See [`State`] for the layout and the state table.
    state: CachePadded<AtomicU64>,
    /// The release time the next accepted item is expected to get (the grid's next free slot, as
    /// senders see it): the source of [`Ticket::release_at`]. An estimate only; the consumer keeps
    /// the authoritative schedule.
    tail: CachePadded<AtomicU64>,
    /// The items, each with its sender-side release estimate.
    slots: Slots<(u64, T)>,
    /// Live [`LeakySender`]s; the last one dropped closes the queue.
    senders: AtomicU64,
    /// Set by [`DrainHandle::stop`] to end the drain thread; cleared when it hands the queue back.
    stop: AtomicBool,
    consumer_lock: Mutex<()>,
    consumer_cond: Condvar,
    room_lock: Mutex<()>,
    room_cond: Condvar,
    /// The async consumer's wake-up (a permit is stored if it is not waiting yet).
    #[cfg(all(feature = "tokio", not(tollgate_loom)))]
    consumer_notify: tokio::sync::Notify,
    /// Async senders waiting for room (each enables its `Notified` before counting itself in).
    #[cfg(all(feature = "tokio", not(tollgate_loom)))]
    room_notify: tokio::sync::Notify,
    capacity: u64,
    interval: u64,
    clock: C,
}

impl<T, C: Clock> Shared<T, C> {
    fn state(&self) -> State {
        // Relaxed: a snapshot for a decision or a report; it publishes and acquires nothing.
        State(self.state.load(Ordering::Relaxed))
    }

    fn close(&self) {
        // Relaxed: the flag publishes no memory. Reservations compare-and-swap this same word, so
        // each is ordered before or after the close in its modification order, which is all the
        // "accepted or handed back" rule needs.
        let prev = State(self.state.fetch_or(State::CLOSED, Ordering::Relaxed));
        if prev.closed() {
            return;
        }
        if prev.parked() {
            self.wake_consumer();
        }
        // Waiting senders must learn about the close; a close happens once, so always notify.
        self.wake_room();
    }

    /// Wakes the parked consumer, blocking or async. Called only after seeing `PARKED`.
    fn wake_consumer(&self) {
        {
            let _guard = lock(&self.consumer_lock);
            self.consumer_cond.notify_all();
        }
        #[cfg(all(feature = "tokio", not(tollgate_loom)))]
        self.consumer_notify.notify_one();
    }

    /// Wakes every sender waiting for room, blocking or async.
    fn wake_room(&self) {
        {
            let _guard = lock(&self.room_lock);
            // All: a waiter whose timeout fired may not take the slot; the rest retry and at most
            // one wins it, the others wait again.
            self.room_cond.notify_all();
        }
        #[cfg(all(feature = "tokio", not(tollgate_loom)))]
        self.room_notify.notify_waiters();
    }

    fn try_send_at(&self, item: T, now: Nanos) -> Result<Ticket, TrySendError<T>> {
        let now = now.clamped();
        let position = match cas::update(&self.state, |word| reserve(word, self.capacity)) {
            Ok(position) => position,
            Err(Refusal::Full) => return Err(TrySendError::Full(item)),
            Err(Refusal::Closed) => return Err(TrySendError::Closed(item)),
        };
        let interval = self.interval;
        // The grid's next free slot, or the arrival if that slot has passed (re-anchoring).
        let release = match cas::update(&self.tail, |tail| {
            let release = tail.max(now);
            Step::<u64, Infallible>::Write(next_slot(release, interval), release)
        }) {
            Ok(release) => release,
            Err(never) => match never {},
        };
        if let Err((_, item)) = self.slots.push((release, item)) {
            // Unreachable: the reservation guarantees a free slot (the consumer frees a slot before
            // it gives back the reservation). Undo it and refuse rather than lose the item.
            // Relaxed: as for the reservation.
            self.release_reservation(Ordering::Relaxed);
            return Err(TrySendError::Full(item));
        }
        // Release: publishes the push to a consumer whose parking read-modify-write comes later in
        // this word's modification order (its `Acquire` fetch_or reads from this one's release
        // sequence); if the consumer's came first, this one sees `PARKED` and wakes it.
        let after = State(self.state.fetch_or(0, Ordering::Release));
        if after.parked() {
            self.wake_consumer();
        }
        Ok(Ticket {
            position,
            release_at: Nanos::new(release),
        })
    }

    /// Gives back one unit of `len` (an item released, or a reservation undone) and wakes senders
    /// waiting for room.
    fn release_reservation(&self, order: Ordering) {
        let prev = State(self.state.fetch_sub(State::LEN_ONE, order));
        if prev.waiters() > 0 {
            self.wake_room();
        }
    }

    /// Blocks a sender until there may be room, the queue closes, or `deadline` passes.
    fn wait_for_room(&self, deadline: Option<Instant>) {
        let guard = lock(&self.room_lock);
        // Relaxed: counting itself in is a read-modify-write of the word the consumer's release
        // decrements, so one of them sees the other: either this sees the room, or the consumer sees
        // the waiter and notifies (after this thread waits, since it takes the room lock first).
        let prev = State(self.state.fetch_add(State::WAITER_ONE, Ordering::Relaxed));
        if !prev.closed() && prev.len() >= self.capacity {
            match deadline {
                None => drop(
                    self.room_cond
                        .wait(guard)
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                ),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if !left.is_zero() {
                        drop(
                            self.room_cond
                                .wait_timeout(guard, left)
                                .unwrap_or_else(std::sync::PoisonError::into_inner),
                        );
                    }
                }
            }
        }
        // Relaxed: counting itself out publishes nothing; a consumer that still sees it only
        // notifies in vain.
        self.state.fetch_sub(State::WAITER_ONE, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------------
// Public outcome types
// ---------------------------------------------------------------------------------------------

/// Where an accepted item stands: its position in the queue and when it is expected to be released.
///
/// # Examples
///
/// ```
/// use tollgate::leaky::LeakyQueue;
/// use tollgate::{ManualClock, Nanos, Quota};
///
/// let (tx, _rx) = LeakyQueue::with_clock(Quota::per_second(2)?, ManualClock::new())?;
/// let first = tx.try_send(1).expect("room");
/// let second = tx.try_send(2).expect("room");
/// assert_eq!((first.position(), first.release_at()), (0, Nanos::new(0)));
/// assert_eq!((second.position(), second.release_at()), (1, Nanos::new(500_000_000)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    position: u64,
    release_at: Nanos,
}

impl Ticket {
    /// How many accepted items were ahead of this one when it was accepted (0: it is next).
    ///
    /// Includes the item the consumer may be holding until its release time. Exact when sends do
    /// not race; with concurrent sends, the count at the moment of this send's reservation.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, _rx) = LeakyQueue::new(Quota::per_second(5)?)?;
    /// assert_eq!(tx.try_send('x').expect("room").position(), 0);
    /// assert_eq!(tx.try_send('y').expect("room").position(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn position(&self) -> u64 {
        self.position
    }

    /// When the item is expected to be released, on the queue's clock, if nothing else changes.
    ///
    /// Exact when sends do not race (a single producer, or a manual clock in tests). Concurrent
    /// sends may store their items in a different order than they computed their estimates, so an
    /// item can be released up to a few intervals later than its ticket says; never earlier.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::{ManualClock, Nanos, Quota};
    ///
    /// let (tx, _rx) = LeakyQueue::with_clock(Quota::per_second(10)?, ManualClock::new())?;
    /// tx.try_send(()).expect("room");
    /// assert_eq!(tx.try_send(()).expect("room").release_at(), Nanos::new(100_000_000));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn release_at(&self) -> Nanos {
        self.release_at
    }
}

/// A refused [`LeakySender::try_send`]: the item, handed back.
///
/// # Examples
///
/// ```
/// use tollgate::leaky::{LeakyQueue, TrySendError};
/// use tollgate::Quota;
///
/// let (tx, rx) = LeakyQueue::new(Quota::per_second(1)?)?;
/// tx.try_send("kept").expect("room for one");
/// assert_eq!(tx.try_send("second"), Err(TrySendError::Full("second")));
/// rx.close();
/// let err = tx.try_send("late").unwrap_err();
/// assert!(err.is_closed());
/// assert_eq!(err.into_inner(), "late");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
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

/// A refused [`LeakySender::send_timeout`]: the item, handed back.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::leaky::{LeakyQueue, SendTimeoutError};
/// use tollgate::Quota;
///
/// let (tx, _rx) = LeakyQueue::new(Quota::per_second(1)?)?;
/// tx.try_send(1).expect("room for one");
/// let err = tx.send_timeout(2, Duration::from_millis(1)).unwrap_err();
/// assert_eq!(err, SendTimeoutError::Timeout(2));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
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

/// Why [`LeakyQueue::try_recv`] returned no item.
///
/// # Examples
///
/// ```
/// use tollgate::leaky::{LeakyQueue, TryRecvError};
/// use tollgate::{ManualClock, Nanos, Quota};
///
/// let (tx, mut rx) = LeakyQueue::<u8, _>::with_clock(Quota::per_second(1)?, ManualClock::new())?;
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
/// drop(tx); // the last sender closes the queue
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Closed));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// Why [`LeakyQueue::recv_timeout`] returned no item.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::leaky::{LeakyQueue, RecvTimeoutError};
/// use tollgate::Quota;
///
/// let (_tx, mut rx) = LeakyQueue::<u8>::new(Quota::per_second(1)?)?;
/// assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Err(RecvTimeoutError::Timeout));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

// ---------------------------------------------------------------------------------------------
// The sender
// ---------------------------------------------------------------------------------------------

/// A producer's handle on a [`LeakyQueue`]: cheap to clone, `Send` and `Sync`.
///
/// Dropping the last clone closes the queue (the consumer still receives everything accepted).
///
/// # Memory ordering
///
/// Everything a producer wrote before a successful send is visible to the consumer once it receives
/// that item. A refused send publishes nothing. Whether a send that races a [`close`](Self::close)
/// is accepted or refused is decided by one atomic word; either way the item ends up in exactly one
/// place: received, or handed back.
///
/// # Examples
///
/// ```
/// use std::thread;
/// use tollgate::leaky::LeakyQueue;
/// use tollgate::Quota;
///
/// let (tx, mut rx) = LeakyQueue::new(Quota::per_second(1_000_000)?.with_capacity(100)?)?;
/// let producers: Vec<_> = (0..4)
///     .map(|p| {
///         let tx = tx.clone();
///         thread::spawn(move || tx.try_send(p).is_ok())
///     })
///     .collect();
/// drop(tx);
/// let accepted = producers.into_iter().filter_map(|h| h.join().ok()).filter(|ok| *ok).count();
/// let mut received = 0;
/// while rx.recv().is_some() {
///     received += 1;
/// }
/// assert_eq!(received, accepted);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct LeakySender<T, C: Clock = MonotonicClock> {
    shared: Arc<Shared<T, C>>,
}

impl<T, C: Clock> LeakySender<T, C> {
    /// Offers `item`, reading the queue's clock for its arrival time.
    ///
    /// # Errors
    ///
    /// [`TrySendError::Full`] with the item when C items are waiting; [`TrySendError::Closed`] with
    /// the item once the queue is closed. The item is never dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, _rx) = LeakyQueue::new(Quota::per_second(10)?)?;
    /// let ticket = tx.try_send("job").expect("room");
    /// assert_eq!(ticket.position(), 0);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_send(&self, item: T) -> Result<Ticket, TrySendError<T>> {
        let now = self.shared.clock.now();
        self.shared.try_send_at(item, now)
    }

    /// [`try_send`](Self::try_send) with an arrival time you already hold.
    ///
    /// The reading matters only when the queue is idle: an item arriving at an empty queue whose
    /// next slot has passed is released at its arrival time. Readings out of order (or a clock that
    /// steps back) can never make an item due earlier than the grid allows. A reading past
    /// [`Nanos::MAX_USABLE`] counts as that bound, and so does a release time that would lie
    /// beyond it (see [the end of time](self#the-end-of-time)).
    ///
    /// # Errors
    ///
    /// As for [`try_send`](Self::try_send).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::{ManualClock, Nanos, Quota};
    ///
    /// let (tx, _rx) = LeakyQueue::with_clock(Quota::per_second(1)?.with_capacity(2)?, ManualClock::new())?;
    /// assert_eq!(tx.try_send_at('a', Nanos::new(7)).expect("room").release_at(), Nanos::new(7));
    /// assert_eq!(tx.try_send_at('b', Nanos::new(8)).expect("room").release_at(), Nanos::new(1_000_000_007));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_send_at(&self, item: T, now: Nanos) -> Result<Ticket, TrySendError<T>> {
        self.shared.try_send_at(item, now)
    }

    /// Offers `item`, waiting up to `timeout` for room.
    ///
    /// The wait sleeps on a condition variable that the consumer signals when it releases an item
    /// (only when a sender is waiting) and that [`close`](Self::close) signals. A timeout too large
    /// for an `Instant` waits without limit.
    ///
    /// # Errors
    ///
    /// [`SendTimeoutError::Timeout`] with the item if no room came free in time;
    /// [`SendTimeoutError::Closed`] with the item if the queue is or becomes closed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = LeakyQueue::new(Quota::per_second(1000)?.with_capacity(1)?)?;
    /// tx.try_send(1).expect("room");
    /// let producer = std::thread::spawn(move || tx.send_timeout(2, Duration::from_secs(10)).is_ok());
    /// assert_eq!(rx.recv(), Some(1));
    /// assert_eq!(rx.recv(), Some(2));
    /// assert!(producer.join().unwrap_or(false));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn send_timeout(&self, item: T, timeout: Duration) -> Result<Ticket, SendTimeoutError<T>> {
        let deadline = Instant::now().checked_add(timeout);
        let mut item = item;
        loop {
            match self.try_send(item) {
                Ok(ticket) => return Ok(ticket),
                Err(TrySendError::Closed(back)) => return Err(SendTimeoutError::Closed(back)),
                Err(TrySendError::Full(back)) => item = back,
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(SendTimeoutError::Timeout(item));
            }
            self.shared.wait_for_room(deadline);
        }
    }

    /// Closes the queue: later sends get their item back; accepted items are still delivered.
    ///
    /// Idempotent; the same as [`LeakyQueue::close`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = LeakyQueue::new(Quota::per_second(10)?)?;
    /// tx.try_send(1).expect("room");
    /// tx.close();
    /// assert!(tx.try_send(2).unwrap_err().is_closed());
    /// assert_eq!(rx.recv(), Some(1));
    /// assert_eq!(rx.recv(), None);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn close(&self) {
        self.shared.close();
    }

    /// Whether the queue is closed.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = tollgate::leaky::LeakyQueue::<()>::new(tollgate::Quota::per_second(1)?)?;
    /// assert!(!tx.is_closed());
    /// drop(rx); // dropping the consumer closes the queue
    /// assert!(tx.is_closed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.shared.state().closed()
    }

    /// Accepted items not yet released (including items being stored and the one the consumer may
    /// hold until its release time). A snapshot.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = tollgate::leaky::LeakyQueue::new(tollgate::Quota::per_second(1)?.with_capacity(4)?)?;
    /// tx.try_send(()).expect("room");
    /// assert_eq!(tx.len(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn len(&self) -> u64 {
        self.shared.state().len()
    }

    /// Whether [`len`](Self::len) is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = tollgate::leaky::LeakyQueue::<()>::new(tollgate::Quota::per_second(1)?)?;
    /// assert!(tx.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity C.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, _rx) = tollgate::leaky::LeakyQueue::<()>::new(tollgate::Quota::per_second(8)?)?;
    /// assert_eq!(tx.capacity(), 8);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.shared.capacity
    }
}

impl<T, C: Clock> Clone for LeakySender<T, C> {
    fn clone(&self) -> Self {
        // Relaxed: a count of handles; it publishes no memory (the close it may lead to is ordered
        // by the state word).
        self.shared.senders.fetch_add(1, Ordering::Relaxed);
        LeakySender {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T, C: Clock> Drop for LeakySender<T, C> {
    fn drop(&mut self) {
        // Relaxed: as in `clone`; the read-modify-write sees every other clone's increment, so
        // exactly one drop sees the count reach zero.
        if self.shared.senders.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.shared.close();
        }
    }
}

impl<T, C: Clock> fmt::Debug for LeakySender<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("LeakySender")
            .field("len", &state.len())
            .field("capacity", &self.shared.capacity)
            .field("closed", &state.closed())
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// The consumer
// ---------------------------------------------------------------------------------------------

/// What ended a blocking receive without an item.
enum Stopped {
    Timeout,
    Closed,
    Stop,
}

/// The consumer of a leaky queue: receives items at exactly R per second, in order.
///
/// Not `Clone`: there is one consumer, and it owns the schedule. See the [module docs](self) for
/// pacing, capacity, shutdown and the protocol.
///
/// # Memory ordering
///
/// A received item comes with everything its producer wrote before sending it. Once a receive
/// reports the queue closed ([`recv`](Self::recv) answering `None`, [`TryRecvError::Closed`]),
/// every item accepted before the close has been received: no send can still be on its way in.
///
/// # Examples
///
/// ```
/// use tollgate::leaky::LeakyQueue;
/// use tollgate::Quota;
///
/// let (tx, mut rx) = LeakyQueue::new(Quota::per_second(1000)?)?;
/// for i in 0..3 {
///     tx.try_send(i).expect("room");
/// }
/// drop(tx);
/// let mut got = Vec::new();
/// while let Some(i) = rx.recv() {
///     got.push(i); // about 1 ms apart
/// }
/// assert_eq!(got, [0, 1, 2]);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct LeakyQueue<T, C: Clock = MonotonicClock> {
    shared: Arc<Shared<T, C>>,
    /// An item taken from storage whose release time has not come (still counted in `len`).
    hand: Option<(u64, T)>,
    /// The grid's next slot: the earliest release time of the next item.
    next: u64,
}

impl<T> LeakyQueue<T, MonotonicClock> {
    /// A queue releasing `quota.count()` items per `quota.period()`, holding up to
    /// `quota.capacity()`, on the default clock. Returns the first sender and the consumer.
    ///
    /// # Errors
    ///
    /// [`QuotaError::QueueTooLong`] for a capacity above [`LeakyQueue::MAX_CAPACITY`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, rx) = LeakyQueue::<String>::new(Quota::per_second(50)?.with_capacity(200)?)?;
    /// assert_eq!(rx.capacity(), 200);
    /// assert!(LeakyQueue::<u8>::new(Quota::per_second(1)?.with_capacity(1 << 30)?).is_err());
    /// # drop(tx);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Result<(LeakySender<T>, LeakyQueue<T>), QuotaError> {
        LeakyQueue::with_clock(quota, MonotonicClock::new())
    }
}

impl<T, C: Clock> LeakyQueue<T, C> {
    /// The largest capacity accepted: 2^24 items (one slot each is allocated up front).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::leaky::LeakyQueue::<(), tollgate::MonotonicClock>::MAX_CAPACITY, 1 << 24);
    /// ```
    pub const MAX_CAPACITY: u64 = 1 << 24;

    /// [`LeakyQueue::new`] on a clock of your choice.
    ///
    /// # Errors
    ///
    /// [`QuotaError::QueueTooLong`] for a capacity above [`LeakyQueue::MAX_CAPACITY`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::{ManualClock, Quota};
    ///
    /// let (tx, mut rx) = LeakyQueue::with_clock(Quota::per_second(4)?, ManualClock::new())?;
    /// tx.try_send("now").expect("room");
    /// assert_eq!(rx.try_recv(), Ok("now"));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    // The channel-style pair reads better at the call site than an alias would.
    #[allow(clippy::type_complexity)]
    pub fn with_clock(
        quota: Quota,
        clock: C,
    ) -> Result<(LeakySender<T, C>, LeakyQueue<T, C>), QuotaError> {
        let capacity = quota.capacity();
        let slots = match usize::try_from(capacity) {
            Ok(n) if capacity <= Self::MAX_CAPACITY => n,
            _ => {
                return Err(QuotaError::QueueTooLong {
                    capacity,
                    max: Self::MAX_CAPACITY,
                })
            }
        };
        let shared = Arc::new(Shared {
            state: CachePadded::new(AtomicU64::new(0)),
            tail: CachePadded::new(AtomicU64::new(0)),
            slots: Slots::new(slots),
            senders: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            consumer_lock: Mutex::new(()),
            consumer_cond: Condvar::new(),
            room_lock: Mutex::new(()),
            room_cond: Condvar::new(),
            #[cfg(all(feature = "tokio", not(tollgate_loom)))]
            consumer_notify: tokio::sync::Notify::new(),
            #[cfg(all(feature = "tokio", not(tollgate_loom)))]
            room_notify: tokio::sync::Notify::new(),
            capacity,
            interval: duration_to_nanos(quota.interval()),
            clock,
        });
        let sender = LeakySender {
            shared: Arc::clone(&shared),
        };
        let queue = LeakyQueue {
            shared,
            hand: None,
            next: 0,
        };
        Ok((sender, queue))
    }

    /// The next item, if its release time has come by the queue's clock.
    ///
    /// # Errors
    ///
    /// As for [`try_recv_at`](Self::try_recv_at).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::{LeakyQueue, TryRecvError};
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = LeakyQueue::new(Quota::per_second(1)?)?;
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    /// tx.try_send(5).expect("room");
    /// assert_eq!(rx.try_recv(), Ok(5));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let now = self.shared.clock.now();
        self.try_recv_at(now)
    }

    /// The next item, if its release time is at or before `now`. Exact to the nanosecond.
    ///
    /// A reading earlier than one used before releases nothing early: release times come from the
    /// schedule, never from `now`.
    ///
    /// # Errors
    ///
    /// [`TryRecvError::NotYet`] with the next item's release time; [`TryRecvError::Empty`] when
    /// nothing is waiting; [`TryRecvError::Closed`] when the queue is closed and every accepted item
    /// has been received.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::{LeakyQueue, TryRecvError};
    /// use tollgate::{ManualClock, Nanos, Quota};
    ///
    /// let (tx, mut rx) = LeakyQueue::with_clock(Quota::per_second(1000)?, ManualClock::new())?;
    /// tx.try_send_at('a', Nanos::new(0)).expect("room");
    /// tx.try_send_at('b', Nanos::new(0)).expect("room");
    /// assert_eq!(rx.try_recv_at(Nanos::new(0)), Ok('a'));
    /// assert_eq!(rx.try_recv_at(Nanos::new(999_999)), Err(TryRecvError::NotYet { release_at: Nanos::new(1_000_000) }));
    /// assert_eq!(rx.try_recv_at(Nanos::new(1_000_000)), Ok('b'));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_recv_at(&mut self, now: Nanos) -> Result<T, TryRecvError> {
        let now = now.clamped();
        if self.hand.is_none() {
            self.hand = self.shared.slots.pop();
        }
        match self.hand.take() {
            Some((estimate, item)) => {
                // The sender's estimate already carries its arrival (`max(tail, arrival)`); the
                // consumer's grid keeps the spacing whatever order the stores completed in.
                let release = estimate.max(self.next);
                if release > now {
                    self.hand = Some((estimate, item));
                    return Err(TryRecvError::NotYet {
                        release_at: Nanos::new(release),
                    });
                }
                self.next = next_slot(release, self.shared.interval);
                // Relaxed: giving back the slot publishes nothing (the storage already freed it).
                self.shared.release_reservation(Ordering::Relaxed);
                Ok(item)
            }
            None if self.shared.state().finished() => Err(TryRecvError::Closed),
            None => Err(TryRecvError::Empty),
        }
    }

    /// The next item, waiting for it to arrive and for its release time; `None` once the queue is
    /// closed and every accepted item has been received.
    ///
    /// See [Precision](self#precision) for how the wait ends.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = LeakyQueue::new(Quota::per_second(100)?)?;
    /// std::thread::spawn(move || {
    ///     tx.try_send("from another thread").expect("room");
    /// });
    /// assert_eq!(rx.recv(), Some("from another thread"));
    /// assert_eq!(rx.recv(), None); // the sender was dropped, which closed the queue
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn recv(&mut self) -> Option<T> {
        self.recv_until(None, false).ok()
    }

    /// [`recv`](Self::recv), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// [`RecvTimeoutError::Timeout`] if no item was released in time; [`RecvTimeoutError::Closed`]
    /// when the queue is closed and every accepted item has been received.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::leaky::{LeakyQueue, RecvTimeoutError};
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = LeakyQueue::new(Quota::per_minute(1)?.with_capacity(2)?)?;
    /// tx.try_send(1).expect("room");
    /// tx.try_send(2).expect("room");
    /// assert_eq!(rx.recv_timeout(Duration::from_millis(10)), Ok(1));
    /// // The second is due a minute later.
    /// assert_eq!(rx.recv_timeout(Duration::from_millis(10)), Err(RecvTimeoutError::Timeout));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let deadline = Instant::now().checked_add(timeout);
        match self.recv_until(deadline, false) {
            Ok(item) => Ok(item),
            Err(Stopped::Closed) => Err(RecvTimeoutError::Closed),
            Err(Stopped::Timeout | Stopped::Stop) => Err(RecvTimeoutError::Timeout),
        }
    }

    /// The blocking receive loop: until an item, the deadline, the close, or (for the drain thread)
    /// a stop request.
    fn recv_until(&mut self, deadline: Option<Instant>, watch_stop: bool) -> Result<T, Stopped> {
        loop {
            // Relaxed: the stop flag publishes nothing; the consumer mutex orders it against waits.
            if watch_stop && self.shared.stop.load(Ordering::Relaxed) {
                return Err(Stopped::Stop);
            }
            let now = self.shared.clock.now();
            let wait = match self.try_recv_at(now) {
                Ok(item) => return Ok(item),
                Err(TryRecvError::Closed) => return Err(Stopped::Closed),
                Err(TryRecvError::NotYet { release_at }) => Some(release_at),
                Err(TryRecvError::Empty) => None,
            };
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Stopped::Timeout);
            }
            match wait {
                Some(release_at) => self.pause_until(release_at.as_u64(), deadline),
                None => self.park(deadline),
            }
        }
    }

    /// Waits for an item to arrive (or the close, a stop, the deadline), or returns at once if one
    /// is already there. May return early; the caller loops.
    fn park(&mut self, deadline: Option<Instant>) {
        let shared = Arc::clone(&self.shared);
        let guard = lock(&shared.consumer_lock);
        // Acquire: pairs with the sender's `Release` read-modify-write after its push; whichever of
        // the two comes second in the word's modification order sees the other (see `try_send_at`).
        let state = State(shared.state.fetch_or(State::PARKED, Ordering::Acquire));
        if self.hand.is_none() {
            self.hand = shared.slots.pop();
        }
        // Relaxed: the flag is set before the consumer mutex is taken by `DrainHandle::stop`, and
        // checked under it here, so the mutex orders the two.
        let ready = self.hand.is_some() || state.finished() || shared.stop.load(Ordering::Relaxed);
        if !ready {
            match deadline {
                None => drop(
                    shared
                        .consumer_cond
                        .wait(guard)
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                ),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if !left.is_zero() {
                        drop(
                            shared
                                .consumer_cond
                                .wait_timeout(guard, left)
                                .unwrap_or_else(std::sync::PoisonError::into_inner),
                        );
                    }
                }
            }
        }
        // Relaxed: clearing the flag publishes nothing; a sender that still sees it notifies in vain.
        shared.state.fetch_and(!State::PARKED, Ordering::Relaxed);
    }

    /// Waits until the clock reads `release` (or the deadline, or a stop): sleeps until
    /// [`SPIN_NANOS`] before it, then spins. May return early; the caller loops.
    fn pause_until(&self, release: u64, deadline: Option<Instant>) {
        let shared = &*self.shared;
        let now = shared.clock.now().clamped();
        let Some(wait) = release.checked_sub(now).filter(|w| *w > 0) else {
            return;
        };
        if wait > SPIN_NANOS {
            let mut sleep = Duration::from_nanos(wait - SPIN_NANOS);
            if let Some(deadline) = deadline {
                sleep = sleep.min(deadline.saturating_duration_since(Instant::now()));
            }
            let guard = lock(&shared.consumer_lock);
            // Relaxed: ordered by the consumer mutex, as in `park`.
            if !sleep.is_zero() && !shared.stop.load(Ordering::Relaxed) {
                drop(
                    shared
                        .consumer_cond
                        .wait_timeout(guard, sleep)
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
            }
            return;
        }
        loop {
            // Relaxed: a flag polled in a loop; nothing is read on its account.
            if shared.clock.now().clamped() >= release
                || shared.stop.load(Ordering::Relaxed)
                || deadline.is_some_and(|d| Instant::now() >= d)
            {
                return;
            }
            spin_loop();
        }
    }

    /// Closes the queue and returns every item not yet received, at once, in release order.
    ///
    /// For shutdown: the items skip their release times. Waits (briefly, yielding) for sends that
    /// had reserved room before the close to store their items, so nothing accepted is missed.
    /// Afterwards the queue is finished: [`recv`](Self::recv) answers `None`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = LeakyQueue::new(Quota::per_hour(1)?.with_capacity(3)?)?;
    /// for i in 0..3 {
    ///     tx.try_send(i).expect("room");
    /// }
    /// assert_eq!(rx.drain_now(), [0, 1, 2]);
    /// assert!(tx.try_send(9).unwrap_err().is_closed());
    /// assert_eq!(rx.recv(), None);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn drain_now(&mut self) -> Vec<T> {
        self.shared.close();
        let mut out = Vec::new();
        loop {
            let next = match self.hand.take() {
                Some(held) => Some(held),
                None => self.shared.slots.pop(),
            };
            match next {
                Some((_, item)) => {
                    out.push(item);
                    // Relaxed: as in `try_recv_at`.
                    self.shared.release_reservation(Ordering::Relaxed);
                }
                // Closed and nothing counted: every accepted item is in `out`.
                None if self.shared.state().len() == 0 => return out,
                // A sender reserved room before the close and has not stored its item yet.
                None => yield_now(),
            }
        }
    }

    /// Consumes the queue and returns every item not yet received (see [`drain_now`](Self::drain_now)),
    /// instead of dropping them with the queue.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, rx) = LeakyQueue::new(Quota::per_day(1)?.with_capacity(2)?)?;
    /// tx.try_send("a").expect("room");
    /// tx.try_send("b").expect("room");
    /// assert_eq!(rx.into_leftovers(), ["a", "b"]);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn into_leftovers(mut self) -> Vec<T> {
        self.drain_now()
    }

    /// Closes the queue: later sends get their item back; accepted items are still delivered.
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = tollgate::leaky::LeakyQueue::new(tollgate::Quota::per_second(1)?)?;
    /// rx.close();
    /// assert!(rx.is_closed());
    /// assert!(tx.try_send(()).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn close(&self) {
        self.shared.close();
    }

    /// Whether the queue is closed (items accepted before may still be waiting).
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = tollgate::leaky::LeakyQueue::<()>::new(tollgate::Quota::per_second(1)?)?;
    /// drop(tx);
    /// assert!(rx.is_closed());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_closed(&self) -> bool {
        self.shared.state().closed()
    }

    /// Accepted items not yet received (a snapshot; see [`LeakySender::len`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = tollgate::leaky::LeakyQueue::new(tollgate::Quota::per_second(1)?)?;
    /// tx.try_send(()).expect("room");
    /// assert_eq!(rx.len(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn len(&self) -> u64 {
        self.shared.state().len()
    }

    /// Whether [`len`](Self::len) is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_tx, rx) = tollgate::leaky::LeakyQueue::<()>::new(tollgate::Quota::per_second(1)?)?;
    /// assert!(rx.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity C.
    ///
    /// # Examples
    ///
    /// ```
    /// let (_tx, rx) = tollgate::leaky::LeakyQueue::<()>::new(tollgate::Quota::per_second(3)?)?;
    /// assert_eq!(rx.capacity(), 3);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.shared.capacity
    }

    /// The spacing between releases: the quota's interval, rounded up to a whole nanosecond.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let (_tx, rx) = tollgate::leaky::LeakyQueue::<()>::new(tollgate::Quota::per_second(4)?)?;
    /// assert_eq!(rx.interval(), Duration::from_millis(250));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.shared.interval)
    }
}

impl<T, C: Clock> Drop for LeakyQueue<T, C> {
    /// Closes the queue; items still in it are dropped with the last handle.
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl<T, C: Clock> fmt::Debug for LeakyQueue<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("LeakyQueue")
            .field("len", &state.len())
            .field("capacity", &self.shared.capacity)
            .field("interval", &Duration::from_nanos(self.shared.interval))
            .field("closed", &state.closed())
            .field("next_slot", &Nanos::new(self.next))
            .finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// Async (feature `tokio`)
// ---------------------------------------------------------------------------------------------

#[cfg(all(feature = "tokio", not(tollgate_loom)))]
pub use async_forms::SendError;

#[cfg(all(feature = "tokio", not(tollgate_loom)))]
mod async_forms {
    use std::fmt;
    use std::time::Duration;

    use super::{LeakyQueue, LeakySender, State, Ticket, TryRecvError, TrySendError};
    use crate::clock::Clock;
    use crate::sync::{Arc, AtomicU64, Ordering};

    /// [`LeakySender::send_async`] found the queue closed: the item, handed back.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::SendError;
    /// assert_eq!(SendError("job").into_inner(), "job");
    /// ```
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub struct SendError<T>(pub T);

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
    impl<T> fmt::Debug for SendError<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("SendError(..)")
        }
    }

    impl<T> fmt::Display for SendError<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the leaky queue is closed; the item was handed back")
        }
    }

    impl<T> std::error::Error for SendError<T> {}

    /// Counts an async sender out of the room waiters however its wait ends, cancellation included.
    struct Waiting<'a>(&'a AtomicU64);

    impl Drop for Waiting<'_> {
        fn drop(&mut self) {
            // Relaxed: as in `Shared::wait_for_room`.
            self.0.fetch_sub(State::WAITER_ONE, Ordering::Relaxed);
        }
    }

    /// Clears the consumer's parked flag however its async wait ends.
    struct Parked<'a>(&'a AtomicU64);

    impl Drop for Parked<'_> {
        fn drop(&mut self) {
            // Relaxed: as in `LeakyQueue::park`.
            self.0.fetch_and(!State::PARKED, Ordering::Relaxed);
        }
    }

    impl<T, C: Clock> LeakySender<T, C> {
        /// Offers `item`, waiting asynchronously for room (feature `tokio`).
        ///
        /// Dropping the future before it completes drops the item with it, as with tokio's own
        /// channels; wrap a [`try_send`](Self::try_send) retry loop yourself if a cancelled send must
        /// hand its item back.
        ///
        /// # Errors
        ///
        /// [`SendError`] with the item if the queue is or becomes closed.
        ///
        /// # Examples
        ///
        /// ```
        /// use tollgate::leaky::LeakyQueue;
        /// use tollgate::Quota;
        ///
        /// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
        /// # rt.block_on(async {
        /// let (tx, mut rx) = LeakyQueue::new(Quota::per_second(1000)?.with_capacity(1)?)?;
        /// let producer = tokio::spawn(async move {
        ///     for i in 0..3 {
        ///         tx.send_async(i).await.map_err(|e| e.to_string())?;
        ///     }
        ///     Ok::<(), String>(())
        /// });
        /// let mut got = Vec::new();
        /// while let Some(i) = rx.recv_async().await {
        ///     got.push(i);
        /// }
        /// assert_eq!(got, [0, 1, 2]);
        /// producer.await??;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// # })?;
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub async fn send_async(&self, item: T) -> Result<Ticket, SendError<T>> {
            let shared = &*self.shared;
            let mut item = item;
            loop {
                match self.try_send(item) {
                    Ok(ticket) => return Ok(ticket),
                    Err(TrySendError::Closed(back)) => return Err(SendError(back)),
                    Err(TrySendError::Full(back)) => item = back,
                }
                // Enabled before counting in: a release or close that sees this waiter and calls
                // `notify_waiters` after this point wakes this future even before it is polled.
                let mut notified = std::pin::pin!(shared.room_notify.notified());
                notified.as_mut().enable();
                // Relaxed: as in `Shared::wait_for_room`: one of this read-modify-write and the
                // consumer's release sees the other.
                let prev = State(shared.state.fetch_add(State::WAITER_ONE, Ordering::Relaxed));
                let _waiting = Waiting(&shared.state);
                if !prev.closed() && prev.len() >= shared.capacity {
                    notified.await;
                }
            }
        }
    }

    impl<T, C: Clock> LeakyQueue<T, C> {
        /// [`recv`](LeakyQueue::recv), asynchronously (feature `tokio`): waits for an item with a
        /// `tokio::sync::Notify` and for its release time with `tokio::time::sleep`.
        ///
        /// Cancel-safe: dropping the future never loses an item (an item is taken from the queue
        /// only when it is returned).
        ///
        /// # Precision
        ///
        /// tokio's timer has a granularity of 1 ms, so releases land up to about a millisecond late;
        /// the schedule is kept (deadline pacing), so at rates above 1000 per second the items due in
        /// each millisecond come out together, and the long-run rate stays exact. Use the blocking
        /// [`recv`](LeakyQueue::recv) on a thread of its own for sub-millisecond spacing.
        ///
        /// # Panics
        ///
        /// Like `tokio::time::sleep`, when polled outside a tokio runtime with the time driver
        /// enabled.
        ///
        /// # Examples
        ///
        /// See [`LeakySender::send_async`].
        pub async fn recv_async(&mut self) -> Option<T> {
            loop {
                let now = self.shared.clock.now();
                match self.try_recv_at(now) {
                    Ok(item) => return Some(item),
                    Err(TryRecvError::Closed) => return None,
                    Err(TryRecvError::NotYet { release_at }) => {
                        let wait = release_at.as_u64().saturating_sub(now.clamped());
                        tokio::time::sleep(Duration::from_nanos(wait)).await;
                    }
                    Err(TryRecvError::Empty) => self.park_async().await,
                }
            }
        }

        /// [`park`](LeakyQueue::park) for the async consumer: the same handshake on the state word,
        /// with a `Notify` permit in place of the condition variable.
        async fn park_async(&mut self) {
            let shared = Arc::clone(&self.shared);
            // Acquire: as in `park`, pairs with the sender's `Release` read-modify-write.
            let prev = State(shared.state.fetch_or(State::PARKED, Ordering::Acquire));
            let _parked = Parked(&shared.state);
            if self.hand.is_none() {
                self.hand = shared.slots.pop();
            }
            if self.hand.is_none() && !prev.finished() {
                // A sender that saw `PARKED` calls `notify_one`, which leaves a permit if this has
                // not started waiting yet, so the wake-up cannot be lost.
                shared.consumer_notify.notified().await;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The drain thread
// ---------------------------------------------------------------------------------------------

#[cfg(not(tollgate_loom))]
pub use drain::{DrainHandle, SpawnDrainError};

#[cfg(not(tollgate_loom))]
mod drain {
    use std::fmt;
    use std::thread::JoinHandle;

    use super::{LeakyQueue, Shared};
    use crate::clock::Clock;
    use crate::sync::{lock, Arc, Ordering};

    impl<T: Send + 'static, C: Clock + 'static> LeakyQueue<T, C> {
        /// Moves the consumer onto a new thread that calls `handler` on every item at its release
        /// time, until the queue is closed and drained or [`DrainHandle::stop`] is called.
        ///
        /// # Errors
        ///
        /// [`SpawnDrainError`], holding the queue (nothing is lost), if the thread cannot be started.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::sync::mpsc;
        /// use tollgate::leaky::LeakyQueue;
        /// use tollgate::Quota;
        ///
        /// let (tx, rx) = LeakyQueue::new(Quota::per_second(1000)?)?;
        /// let (done_tx, done_rx) = mpsc::channel();
        /// let drain = rx.spawn_drain(move |job: u32| done_tx.send(job).unwrap_or(()))
        ///     .map_err(|e| e.to_string())?;
        /// tx.try_send(1).map_err(|e| e.to_string())?;
        /// tx.try_send(2).map_err(|e| e.to_string())?;
        /// drop(tx); // closes: the thread ends after the last item
        /// let queue = drain.join().ok_or("the handler panicked")?;
        /// assert!(queue.is_empty());
        /// assert_eq!(done_rx.iter().collect::<Vec<_>>(), [1, 2]);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn spawn_drain<F>(self, handler: F) -> Result<DrainHandle<T, C>, SpawnDrainError<T, C>>
        where
            F: FnMut(T) + Send + 'static,
        {
            let mut handler = handler;
            let (hand_over, receive) = std::sync::mpsc::channel::<LeakyQueue<T, C>>();
            let spawned = std::thread::Builder::new()
                .name("tollgate-leaky-drain".into())
                .spawn(move || {
                    let mut queue = receive.recv().ok()?;
                    // Ends on a close with nothing left, or a stop request (no deadline is set).
                    while let Ok(item) = queue.recv_until(None, true) {
                        handler(item);
                    }
                    Some(queue)
                });
            let shared = Arc::clone(&self.shared);
            match spawned {
                Ok(thread) => match hand_over.send(self) {
                    Ok(()) => Ok(DrainHandle {
                        shared,
                        thread: Some(thread),
                    }),
                    // The thread ended before taking the queue (it cannot, short of an abort).
                    Err(std::sync::mpsc::SendError(queue)) => Err(SpawnDrainError {
                        queue,
                        error: std::io::Error::other("the drain thread exited before starting"),
                    }),
                },
                Err(error) => Err(SpawnDrainError { queue: self, error }),
            }
        }
    }

    /// The running drain thread of [`LeakyQueue::spawn_drain`].
    ///
    /// [`stop`](Self::stop) ends it at once and hands the consumer back, with whatever items are
    /// left still in it (receive them, [`drain_now`](LeakyQueue::drain_now) them or
    /// [`into_leftovers`](LeakyQueue::into_leftovers) them). [`join`](Self::join) waits for the
    /// queue to be closed and fully released. Dropping the handle stops the thread and drops the
    /// queue with any items left: call `stop` to keep them.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::LeakyQueue;
    /// use tollgate::Quota;
    ///
    /// let (tx, rx) = LeakyQueue::new(Quota::per_hour(1)?.with_capacity(3)?)?;
    /// let drain = rx.spawn_drain(|_job: &str| {}).map_err(|e| e.to_string())?;
    /// tx.try_send("now").map_err(|e| e.to_string())?;
    /// tx.try_send("in an hour").map_err(|e| e.to_string())?;
    /// let queue = drain.stop().ok_or("the handler panicked")?;
    /// // "now" may or may not have been handled yet; "in an hour" is certainly still there.
    /// assert!(queue.into_leftovers().contains(&"in an hour"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub struct DrainHandle<T, C: Clock> {
        shared: Arc<Shared<T, C>>,
        thread: Option<JoinHandle<Option<LeakyQueue<T, C>>>>,
    }

    impl<T, C: Clock> DrainHandle<T, C> {
        /// Stops the thread (after the handler call in progress, if any) and returns the consumer;
        /// `None` if the handler panicked (the queue was then dropped, with its items).
        ///
        /// # Examples
        ///
        /// See [`DrainHandle`].
        pub fn stop(mut self) -> Option<LeakyQueue<T, C>> {
            self.request_stop();
            self.finish()
        }

        /// Waits for the queue to be closed and every item handled, and returns the (empty)
        /// consumer; `None` if the handler panicked.
        ///
        /// # Examples
        ///
        /// See [`LeakyQueue::spawn_drain`].
        pub fn join(mut self) -> Option<LeakyQueue<T, C>> {
            self.finish()
        }

        /// Whether the thread has ended (the queue was closed and drained, or the handler panicked).
        ///
        /// # Examples
        ///
        /// ```
        /// let (tx, rx) = tollgate::leaky::LeakyQueue::<u8>::new(tollgate::Quota::per_second(1)?)?;
        /// let drain = rx.spawn_drain(|_| {}).map_err(|e| e.to_string())?;
        /// assert!(!drain.is_finished());
        /// drop(tx);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        pub fn is_finished(&self) -> bool {
            self.thread.as_ref().map_or(true, JoinHandle::is_finished)
        }

        fn request_stop(&self) {
            // Relaxed: the consumer mutex below orders the flag against the consumer's check.
            self.shared.stop.store(true, Ordering::Relaxed);
            let _guard = lock(&self.shared.consumer_lock);
            self.shared.consumer_cond.notify_all();
        }

        fn finish(&mut self) -> Option<LeakyQueue<T, C>> {
            let queue = self.thread.take()?.join().ok().flatten();
            // Relaxed: the join above synchronizes with everything the thread did; a later `recv`
            // on the returned queue must not see a stale stop request.
            self.shared.stop.store(false, Ordering::Relaxed);
            queue
        }
    }

    impl<T, C: Clock> Drop for DrainHandle<T, C> {
        fn drop(&mut self) {
            if self.thread.is_some() {
                self.request_stop();
                drop(self.finish());
            }
        }
    }

    impl<T, C: Clock> fmt::Debug for DrainHandle<T, C> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("DrainHandle")
                .field("finished", &self.is_finished())
                .finish_non_exhaustive()
        }
    }

    /// [`LeakyQueue::spawn_drain`] could not start its thread; the queue is handed back.
    ///
    /// # Examples
    ///
    /// ```
    /// # use tollgate::leaky::{LeakyQueue, SpawnDrainError};
    /// fn start(rx: LeakyQueue<u8>) -> Option<LeakyQueue<u8>> {
    ///     match rx.spawn_drain(|_| {}) {
    ///         Ok(_drain) => None,
    ///         Err(SpawnDrainError { queue, .. }) => Some(queue), // nothing lost
    ///     }
    /// }
    /// ```
    pub struct SpawnDrainError<T, C: Clock> {
        /// The consumer, with every item still in it.
        pub queue: LeakyQueue<T, C>,
        /// Why the thread could not be started.
        pub error: std::io::Error,
    }

    impl<T, C: Clock> fmt::Debug for SpawnDrainError<T, C> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("SpawnDrainError")
                .field("error", &self.error)
                .finish_non_exhaustive()
        }
    }

    impl<T, C: Clock> fmt::Display for SpawnDrainError<T, C> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "could not start the leaky queue's drain thread: {}",
                self.error
            )
        }
    }

    impl<T, C: Clock> std::error::Error for SpawnDrainError<T, C> {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.error)
        }
    }
}
