//! The producers' half: [`LeakySender`], and the [`Ticket`] an accepted item gets.

use std::fmt;
use std::time::{Duration, Instant};

use super::shared::{queue_handle_methods, QueueShared};
use super::{SendTimeoutError, TrySendError};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::sync::{Arc, Ordering};

/// Where an accepted item stands: its position in the queue and when it is expected to be released.
///
/// # Examples
///
/// ```
/// use tollgate::leaky;
/// use tollgate::{ManualClock, Nanos, Quota};
///
/// let (tx, _rx) = leaky::queue_with_clock(Quota::per_second(2)?, ManualClock::new())?;
/// let first = tx.try_send(1).expect("room");
/// let second = tx.try_send(2).expect("room");
/// assert_eq!((first.position(), first.release_at()), (0, Nanos::new(0)));
/// assert_eq!((second.position(), second.release_at()), (1, Nanos::new(500_000_000)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ticket {
    pub(super) position: u64,
    pub(super) release_at: Nanos,
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
    /// use tollgate::leaky;
    /// use tollgate::Quota;
    ///
    /// let (tx, _rx) = leaky::queue(Quota::per_second(5)?)?;
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
    /// use tollgate::leaky;
    /// use tollgate::{ManualClock, Nanos, Quota};
    ///
    /// let (tx, _rx) = leaky::queue_with_clock(Quota::per_second(10)?, ManualClock::new())?;
    /// tx.try_send(()).expect("room");
    /// assert_eq!(tx.try_send(()).expect("room").release_at(), Nanos::new(100_000_000));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn release_at(&self) -> Nanos {
        self.release_at
    }
}

/// A producer's half of a leaky queue (made by [`queue`](super::queue())): cheap to clone, `Send`
/// and `Sync`.
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
/// use tollgate::leaky;
/// use tollgate::Quota;
///
/// let (tx, mut rx) = leaky::queue(Quota::per_second(1_000_000)?.with_capacity(100)?)?;
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
    pub(super) shared: Arc<QueueShared<T, C>>,
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
    /// use tollgate::leaky;
    /// use tollgate::Quota;
    ///
    /// let (tx, _rx) = leaky::queue(Quota::per_second(10)?)?;
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
    /// steps back) can never make an item due earlier than the grid allows. A reading ahead of the
    /// queue's clock counts as the clock's reading: the grid is shared by every later item, and a
    /// wrong, far-future reading must not hold them all back (see
    /// [Readings ahead of the clock](crate#readings-ahead-of-the-clock)). A reading past
    /// [`Nanos::MAX_USABLE`] counts as that bound, and so does a release time that would lie
    /// beyond it (see [the end of time](super#the-end-of-time)).
    ///
    /// # Errors
    ///
    /// As for [`try_send`](Self::try_send).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::leaky;
    /// use tollgate::{ManualClock, Nanos, Quota};
    ///
    /// let clock = ManualClock::starting_at(Nanos::new(10));
    /// let (tx, _rx) = leaky::queue_with_clock(Quota::per_second(1)?.with_capacity(3)?, clock)?;
    /// assert_eq!(tx.try_send_at('a', Nanos::new(7)).expect("room").release_at(), Nanos::new(7));
    /// assert_eq!(tx.try_send_at('b', Nanos::new(8)).expect("room").release_at(), Nanos::new(1_000_000_007));
    /// // Ahead of the clock (which reads 10): as of 10, so behind 'b' on the grid.
    /// let far = tx.try_send_at('c', Nanos::new(u64::MAX)).expect("room");
    /// assert_eq!(far.release_at(), Nanos::new(2_000_000_007));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn try_send_at(&self, item: T, now: Nanos) -> Result<Ticket, TrySendError<T>> {
        // Never scheduled as of a reading ahead of the clock: the release grid is shared by every
        // later item, and a wrong, far-future reading would otherwise hold them all until then
        // (see "Readings ahead of the clock" in the crate docs). The forms that read the clock
        // themselves pass its reading straight on, reading it once.
        self.shared
            .try_send_at(item, now.min(self.shared.clock.now()))
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
    /// use tollgate::leaky;
    /// use tollgate::Quota;
    ///
    /// let (tx, mut rx) = leaky::queue(Quota::per_second(1000)?.with_capacity(1)?)?;
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

    queue_handle_methods! {
        /// Closes the queue: later sends get their item back; accepted items are still delivered.
        ///
        /// Idempotent; the same as [`LeakyReceiver::close`](super::LeakyReceiver::close).
        ///
        /// # Examples
        ///
        /// ```
        /// use tollgate::leaky;
        /// use tollgate::Quota;
        ///
        /// let (tx, mut rx) = leaky::queue(Quota::per_second(10)?)?;
        /// tx.try_send(1).expect("room");
        /// tx.close();
        /// assert!(tx.try_send(2).unwrap_err().is_closed());
        /// assert_eq!(rx.recv(), Some(1));
        /// assert_eq!(rx.recv(), None);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        close,

        /// Whether the queue is closed.
        ///
        /// # Examples
        ///
        /// ```
        /// let (tx, rx) = tollgate::leaky::queue::<()>(tollgate::Quota::per_second(1)?)?;
        /// assert!(!tx.is_closed());
        /// drop(rx); // dropping the consumer closes the queue
        /// assert!(tx.is_closed());
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        is_closed,

        /// Accepted items not yet released (including items being stored and the one the consumer
        /// may hold until its release time). A snapshot.
        ///
        /// # Examples
        ///
        /// ```
        /// let (tx, _rx) = tollgate::leaky::queue(tollgate::Quota::per_second(1)?.with_capacity(4)?)?;
        /// tx.try_send(()).expect("room");
        /// assert_eq!(tx.len(), 1);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        len,

        /// Whether [`len`](Self::len) is 0.
        ///
        /// # Examples
        ///
        /// ```
        /// let (tx, _rx) = tollgate::leaky::queue::<()>(tollgate::Quota::per_second(1)?)?;
        /// assert!(tx.is_empty());
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        is_empty,

        /// The capacity C.
        ///
        /// # Examples
        ///
        /// ```
        /// let (tx, _rx) = tollgate::leaky::queue::<()>(tollgate::Quota::per_second(8)?)?;
        /// assert_eq!(tx.capacity(), 8);
        /// # Ok::<(), tollgate::QuotaError>(())
        /// ```
        capacity,
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
