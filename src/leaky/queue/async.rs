//! The async forms (feature `tokio`): [`LeakySender::send_async`] and
//! [`LeakyReceiver::recv_async`], the same two handshakes on the state word with a
//! `tokio::sync::Notify` in place of each condition variable.

use std::time::Duration;

use super::state::State;
use super::{LeakyReceiver, LeakySender, SendError, Ticket, TryRecvError, TrySendError};
use crate::clock::Clock;
use crate::sync::{Arc, AtomicU64, Ordering};

/// Counts an async sender out of the room waiters however its wait ends, cancellation included.
struct Waiting<'a>(&'a AtomicU64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        // Relaxed: as in `QueueShared::wait_for_room`.
        self.0.fetch_sub(State::WAITER_ONE, Ordering::Relaxed);
    }
}

/// Clears the consumer's parked flag however its async wait ends.
struct Parked<'a>(&'a AtomicU64);

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        // Relaxed: as in `LeakyReceiver::park`.
        self.0.fetch_and(!State::PARKED, Ordering::Relaxed);
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
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
    /// use tollgate::leaky;
    /// use tollgate::Quota;
    ///
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
    /// # rt.block_on(async {
    /// let (tx, mut rx) = leaky::queue(Quota::per_second(1000)?.with_capacity(1)?)?;
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
            // Relaxed: as in `QueueShared::wait_for_room`: one of this read-modify-write and the
            // consumer's release sees the other.
            let prev = State(shared.state.fetch_add(State::WAITER_ONE, Ordering::Relaxed));
            let _waiting = Waiting(&shared.state);
            if !prev.closed() && prev.len() >= shared.capacity {
                notified.await;
            }
        }
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<T, C: Clock> LeakyReceiver<T, C> {
    /// [`recv`](LeakyReceiver::recv), asynchronously (feature `tokio`): waits for an item with a
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
    /// [`recv`](LeakyReceiver::recv) on a thread of its own for sub-millisecond spacing.
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

    /// [`park`](LeakyReceiver::park) for the async consumer: the same handshake on the state word,
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
