//! The consumer's half: [`LeakyReceiver`], which owns the schedule and releases items on it.

use std::fmt;
use std::time::{Duration, Instant};

use super::shared::{queue_handle_methods, wait_until, QueueShared};
use super::state::{next_slot, State};
use super::{RecvTimeoutError, TryRecvError};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::sync::{lock, spin_loop, yield_now, Arc, Ordering};

/// How long before a release time a blocking wait stops sleeping and spins on the clock.
const SPIN_NANOS: u64 = 50_000;

/// What ended a blocking receive without an item.
pub(super) enum Stopped {
    Timeout,
    Closed,
    Stop,
}

/// The consumer of a leaky queue: receives items at exactly R per second, in order.
///
/// Not `Clone`: there is one consumer, and it owns the schedule. See the [module docs](super) for
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
/// use tollgate::leaky;
/// use tollgate::Quota;
///
/// let (tx, mut rx) = leaky::queue(Quota::per_second(1000)?)?;
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
pub struct LeakyReceiver<T, C: Clock = MonotonicClock> {
    pub(super) shared: Arc<QueueShared<T, C>>,
    /// An item taken from storage whose release time has not come (still counted in `len`).
    pub(super) hand: Option<(u64, T)>,
    /// The grid's next slot: the earliest release time of the next item.
    pub(super) next: u64,
}

impl<T, C: Clock> LeakyReceiver<T, C> {
    /// The next item, if its release time has come by the queue's clock.
    ///
    /// # Errors
    ///
    /// As for [`try_recv_at`](Self::try_recv_at).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky::{self, TryRecvError};
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = leaky::queue(Quota::per_second(1)?)?;
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
    /// use tollgate::leaky::{self, TryRecvError};
    /// use tollgate::{ManualClock, Nanos, Quota};
    ///
    /// let (tx, mut rx) = leaky::queue_with_clock(Quota::per_second(1000)?, ManualClock::new())?;
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
    /// See [Precision](super#precision) for how the wait ends.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky;
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = leaky::queue(Quota::per_second(100)?)?;
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
    /// use tollgate::leaky::{self, RecvTimeoutError};
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = leaky::queue(Quota::per_minute(1)?.with_capacity(2)?)?;
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
    pub(super) fn recv_until(
        &mut self,
        deadline: Option<Instant>,
        watch_stop: bool,
    ) -> Result<T, Stopped> {
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
            wait_until(&shared.consumer_cond, guard, deadline);
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
            // Sleep until the spin starts, or the caller's deadline if that comes first.
            let spin_from = Instant::now().checked_add(Duration::from_nanos(wait - SPIN_NANOS));
            let until = match (spin_from, deadline) {
                (Some(spin_from), Some(deadline)) => Some(spin_from.min(deadline)),
                (spin_from, deadline) => spin_from.or(deadline),
            };
            let guard = lock(&shared.consumer_lock);
            // Relaxed: ordered by the consumer mutex, as in `park`.
            if !shared.stop.load(Ordering::Relaxed) {
                wait_until(&shared.consumer_cond, guard, until);
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
    /// use tollgate::leaky;
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = leaky::queue(Quota::per_hour(1)?.with_capacity(3)?)?;
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
    /// use tollgate::leaky;
    /// use tollgate::Quota;
    ///
    /// let (tx, rx) = leaky::queue(Quota::per_day(1)?.with_capacity(2)?)?;
    /// tx.try_send("a").expect("room");
    /// tx.try_send("b").expect("room");
    /// assert_eq!(rx.into_leftovers(), ["a", "b"]);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn into_leftovers(mut self) -> Vec<T> {
        self.drain_now()
    }

    queue_handle_methods! {
        /// Closes the queue: later sends get their item back; accepted items are still delivered.
        ///
        /// # Examples
        ///
        /// ```
        /// let (tx, rx) = tollgate::leaky::queue(tollgate::Quota::per_second(1)?)?;
        /// rx.close();
        /// assert!(rx.is_closed());
        /// assert!(tx.try_send(()).is_err());
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        close,

        /// Whether the queue is closed (items accepted before may still be waiting).
        ///
        /// # Examples
        ///
        /// ```
        /// let (tx, rx) = tollgate::leaky::queue::<()>(tollgate::Quota::per_second(1)?)?;
        /// drop(tx);
        /// assert!(rx.is_closed());
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        is_closed,

        /// Accepted items not yet received (a snapshot; see
        /// [`LeakySender::len`](super::LeakySender::len)).
        ///
        /// # Examples
        ///
        /// ```
        /// let (tx, rx) = tollgate::leaky::queue(tollgate::Quota::per_second(1)?)?;
        /// tx.try_send(()).expect("room");
        /// assert_eq!(rx.len(), 1);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        len,

        /// Whether [`len`](Self::len) is 0.
        ///
        /// # Examples
        ///
        /// ```
        /// let (_tx, rx) = tollgate::leaky::queue::<()>(tollgate::Quota::per_second(1)?)?;
        /// assert!(rx.is_empty());
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        is_empty,

        /// The capacity C.
        ///
        /// # Examples
        ///
        /// ```
        /// let (_tx, rx) = tollgate::leaky::queue::<()>(tollgate::Quota::per_second(3)?)?;
        /// assert_eq!(rx.capacity(), 3);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        capacity,
    }

    /// The spacing between releases: the quota's interval, rounded up to a whole nanosecond.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let (_tx, rx) = tollgate::leaky::queue::<()>(tollgate::Quota::per_second(4)?)?;
    /// assert_eq!(rx.interval(), Duration::from_millis(250));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.shared.interval)
    }
}

impl<T, C: Clock> Drop for LeakyReceiver<T, C> {
    /// Closes the queue; items still in it are dropped with the last handle.
    fn drop(&mut self) {
        self.shared.close();
    }
}

impl<T, C: Clock> fmt::Debug for LeakyReceiver<T, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("LeakyReceiver")
            .field("len", &state.len())
            .field("capacity", &self.shared.capacity)
            .field("interval", &Duration::from_nanos(self.shared.interval))
            .field("closed", &state.closed())
            .field("next_slot", &Nanos::new(self.next))
            .finish_non_exhaustive()
    }
}
