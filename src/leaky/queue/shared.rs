//! What the senders and the consumer share: the state word, the release grid's tail, the storage,
//! the wake-up protocol, and the send path itself.

use std::convert::Infallible;
use std::sync::PoisonError;
use std::time::Instant;

use crossbeam_utils::CachePadded;

use super::state::{next_slot, reserve, ReserveRefusal, State};
use super::{Ticket, TrySendError};
use crate::cas::{self, Step};
use crate::clock::{Clock, Nanos};
use crate::sync::{lock, AtomicBool, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};

/// The FIFO storage. Loom cannot see inside crossbeam's `ArrayQueue`, so under `cfg(tollgate_loom)` this is a
/// mutex around a `VecDeque` with the same interface: the loom models check the queue's own protocol
/// (the state word, parking, the schedule), taking the storage's linearizability as given.
#[cfg(not(tollgate_loom))]
pub(super) struct Slots<T>(crossbeam_queue::ArrayQueue<T>);

#[cfg(not(tollgate_loom))]
impl<T> Slots<T> {
    pub(super) fn new(capacity: usize) -> Slots<T> {
        Slots(crossbeam_queue::ArrayQueue::new(capacity))
    }

    pub(super) fn push(&self, item: T) -> Result<(), T> {
        self.0.push(item)
    }

    pub(super) fn pop(&self) -> Option<T> {
        self.0.pop()
    }
}

#[cfg(tollgate_loom)]
pub(super) struct Slots<T>(Mutex<std::collections::VecDeque<T>>);

#[cfg(tollgate_loom)]
impl<T> Slots<T> {
    pub(super) fn new(capacity: usize) -> Slots<T> {
        Slots(Mutex::new(std::collections::VecDeque::with_capacity(
            capacity,
        )))
    }

    pub(super) fn push(&self, item: T) -> Result<(), T> {
        lock(&self.0).push_back(item);
        Ok(())
    }

    pub(super) fn pop(&self) -> Option<T> {
        lock(&self.0).pop_front()
    }
}

// ---------------------------------------------------------------------------------------------
// Shared state
// ---------------------------------------------------------------------------------------------

/// What the senders and the consumer share.
pub(super) struct QueueShared<T, C> {
    /// See [`State`] for the layout and the state table.
    pub(super) state: CachePadded<AtomicU64>,
    /// The release time the next accepted item is expected to get (the grid's next free slot, as
    /// senders see it): the source of [`Ticket::release_at`]. An estimate only; the consumer keeps
    /// the authoritative schedule.
    pub(super) tail: CachePadded<AtomicU64>,
    /// The items, each with its sender-side release estimate.
    pub(super) slots: Slots<(u64, T)>,
    /// Live [`LeakySender`](super::LeakySender)s; the last one dropped closes the queue.
    pub(super) senders: AtomicU64,
    /// Set by `DrainHandle::stop` to end the drain thread; cleared when it hands the queue back.
    pub(super) stop: AtomicBool,
    pub(super) consumer_lock: Mutex<()>,
    pub(super) consumer_cond: Condvar,
    pub(super) room_lock: Mutex<()>,
    pub(super) room_cond: Condvar,
    /// The async consumer's wake-up (a permit is stored if it is not waiting yet).
    #[cfg(all(feature = "tokio", not(tollgate_loom)))]
    pub(super) consumer_notify: tokio::sync::Notify,
    /// Async senders waiting for room (each enables its `Notified` before counting itself in).
    #[cfg(all(feature = "tokio", not(tollgate_loom)))]
    pub(super) room_notify: tokio::sync::Notify,
    pub(super) capacity: u64,
    pub(super) interval: u64,
    pub(super) clock: C,
}

impl<T, C: Clock> QueueShared<T, C> {
    /// An open, empty queue of `capacity` items (`slots` of storage), one sender counted in.
    pub(super) fn new(slots: usize, capacity: u64, interval: u64, clock: C) -> QueueShared<T, C> {
        QueueShared {
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
            interval,
            clock,
        }
    }

    pub(super) fn state(&self) -> State {
        // Relaxed: a snapshot for a decision or a report; it publishes and acquires nothing.
        State(self.state.load(Ordering::Relaxed))
    }

    pub(super) fn close(&self) {
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
    pub(super) fn wake_consumer(&self) {
        {
            let _guard = lock(&self.consumer_lock);
            self.consumer_cond.notify_all();
        }
        #[cfg(all(feature = "tokio", not(tollgate_loom)))]
        self.consumer_notify.notify_one();
    }

    /// Wakes every sender waiting for room, blocking or async.
    pub(super) fn wake_room(&self) {
        {
            let _guard = lock(&self.room_lock);
            // All: a waiter whose timeout fired may not take the slot; the rest retry and at most
            // one wins it, the others wait again.
            self.room_cond.notify_all();
        }
        #[cfg(all(feature = "tokio", not(tollgate_loom)))]
        self.room_notify.notify_waiters();
    }

    /// Offers `item` arriving at `now`, a reading no later than the clock's (the senders' forms
    /// see to it: see [`LeakySender::try_send_at`](super::LeakySender::try_send_at)).
    pub(super) fn try_send_at(&self, item: T, now: Nanos) -> Result<Ticket, TrySendError<T>> {
        let now = now.clamped();
        let position = match cas::update(&self.state, |word| reserve(word, self.capacity)) {
            Ok(position) => position,
            Err(ReserveRefusal::Full) => return Err(TrySendError::Full(item)),
            Err(ReserveRefusal::Closed) => return Err(TrySendError::Closed(item)),
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
    pub(super) fn release_reservation(&self, order: Ordering) {
        let prev = State(self.state.fetch_sub(State::LEN_ONE, order));
        if prev.waiters() > 0 {
            self.wake_room();
        }
    }

    /// Blocks a sender until there may be room, the queue closes, or `deadline` passes.
    pub(super) fn wait_for_room(&self, deadline: Option<Instant>) {
        let guard = lock(&self.room_lock);
        // Relaxed: counting itself in is a read-modify-write of the word the consumer's release
        // decrements, so one of them sees the other: either this sees the room, or the consumer sees
        // the waiter and notifies (after this thread waits, since it takes the room lock first).
        let prev = State(self.state.fetch_add(State::WAITER_ONE, Ordering::Relaxed));
        if !prev.closed() && prev.len() >= self.capacity {
            wait_until(&self.room_cond, guard, deadline);
        }
        // Relaxed: counting itself out publishes nothing; a consumer that still sees it only
        // notifies in vain.
        self.state.fetch_sub(State::WAITER_ONE, Ordering::Relaxed);
    }
}

/// Waits on `cond`, releasing `guard`, until notified or until `deadline` passes (without one, until
/// notified); returns at once if the deadline has passed.
///
/// The one condition-variable wait of the queue: a sender waiting for room, the consumer waiting
/// for an item, and the consumer sleeping towards a release time all come through here. It may
/// return early (a spurious wake-up, or a notification meant for another reason): every caller
/// re-checks its condition in a loop. A poisoned lock is recovered, as in [`lock`].
pub(super) fn wait_until(cond: &Condvar, guard: MutexGuard<'_, ()>, deadline: Option<Instant>) {
    match deadline {
        None => drop(cond.wait(guard).unwrap_or_else(PoisonError::into_inner)),
        Some(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                drop(
                    cond.wait_timeout(guard, left)
                        .unwrap_or_else(PoisonError::into_inner),
                );
            }
        }
    }
}

/// The methods both handles answer from the state they share, `close`, `is_closed`, `len`,
/// `is_empty` and `capacity`, written once for [`LeakySender`](super::LeakySender) and
/// [`LeakyReceiver`](super::LeakyReceiver) (each a field `shared`): an invocation inside the
/// handle's `impl` gives each method its own docs, in that order.
macro_rules! queue_handle_methods {
    (
        $(#[$close:meta])* close,
        $(#[$is_closed:meta])* is_closed,
        $(#[$len:meta])* len,
        $(#[$is_empty:meta])* is_empty,
        $(#[$capacity:meta])* capacity $(,)?
    ) => {
        $(#[$close])*
        pub fn close(&self) {
            self.shared.close();
        }

        $(#[$is_closed])*
        pub fn is_closed(&self) -> bool {
            self.shared.state().closed()
        }

        $(#[$len])*
        pub fn len(&self) -> u64 {
            self.shared.state().len()
        }

        $(#[$is_empty])*
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        $(#[$capacity])*
        pub fn capacity(&self) -> u64 {
            self.shared.capacity
        }
    };
}

pub(super) use queue_handle_methods;
