//! The drain thread: [`LeakyReceiver::spawn_drain`] moves the consumer onto a thread of its own, and
//! [`DrainHandle`] stops it or waits for it.

use std::fmt;
use std::thread::JoinHandle;

use super::shared::QueueShared;
use super::{LeakyReceiver, SpawnDrainError};
use crate::clock::Clock;
use crate::sync::{lock, Arc, Ordering};

impl<T: Send + 'static, C: Clock + 'static> LeakyReceiver<T, C> {
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
    /// use tollgate::leaky;
    /// use tollgate::Quota;
    ///
    /// let (tx, rx) = leaky::queue(Quota::per_second(1000)?)?;
    /// let (done_tx, done_rx) = mpsc::channel();
    /// let drain = rx.spawn_drain(move |job: u32| done_tx.send(job).unwrap_or(()))
    ///     .map_err(|e| e.to_string())?;
    /// tx.try_send(1).map_err(|e| e.to_string())?;
    /// tx.try_send(2).map_err(|e| e.to_string())?;
    /// drop(tx); // closes: the thread ends after the last item
    /// let receiver = drain.join().ok_or("the handler panicked")?;
    /// assert!(receiver.is_empty());
    /// assert_eq!(done_rx.iter().collect::<Vec<_>>(), [1, 2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_drain<F>(self, handler: F) -> Result<DrainHandle<T, C>, SpawnDrainError<T, C>>
    where
        F: FnMut(T) + Send + 'static,
    {
        let mut handler = handler;
        let (hand_over, receive) = std::sync::mpsc::channel::<LeakyReceiver<T, C>>();
        let spawned = std::thread::Builder::new()
            .name("tollgate-leaky-drain".into())
            .spawn(move || {
                let mut receiver = receive.recv().ok()?;
                // Ends on a close with nothing left, or a stop request (no deadline is set).
                while let Ok(item) = receiver.recv_until(None, true) {
                    handler(item);
                }
                Some(receiver)
            });
        let shared = Arc::clone(&self.shared);
        match spawned {
            Ok(thread) => match hand_over.send(self) {
                Ok(()) => Ok(DrainHandle {
                    shared,
                    thread: Some(thread),
                }),
                // The thread ended before taking the queue (it cannot, short of an abort).
                Err(std::sync::mpsc::SendError(receiver)) => Err(SpawnDrainError {
                    receiver,
                    error: std::io::Error::other("the drain thread exited before starting"),
                }),
            },
            Err(error) => Err(SpawnDrainError {
                receiver: self,
                error,
            }),
        }
    }
}

/// The running drain thread of [`LeakyReceiver::spawn_drain`].
///
/// [`stop`](Self::stop) ends it at once and hands the consumer back, with whatever items are
/// left still in it (receive them, [`drain_now`](LeakyReceiver::drain_now) them or
/// [`into_leftovers`](LeakyReceiver::into_leftovers) them). [`join`](Self::join) waits for the
/// queue to be closed and fully released. Dropping the handle stops the thread and drops the
/// queue with any items left: call `stop` to keep them.
///
/// # Examples
///
/// ```
/// use tollgate::leaky;
/// use tollgate::Quota;
///
/// let (tx, rx) = leaky::queue(Quota::per_hour(1)?.with_capacity(3)?)?;
/// let drain = rx.spawn_drain(|_job: &str| {}).map_err(|e| e.to_string())?;
/// tx.try_send("now").map_err(|e| e.to_string())?;
/// tx.try_send("in an hour").map_err(|e| e.to_string())?;
/// let receiver = drain.stop().ok_or("the handler panicked")?;
/// // "now" may or may not have been handled yet; "in an hour" is certainly still there.
/// assert!(receiver.into_leftovers().contains(&"in an hour"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct DrainHandle<T, C: Clock> {
    shared: Arc<QueueShared<T, C>>,
    thread: Option<JoinHandle<Option<LeakyReceiver<T, C>>>>,
}

impl<T, C: Clock> DrainHandle<T, C> {
    /// Stops the thread (after the handler call in progress, if any) and returns the consumer;
    /// `None` if the handler panicked (the queue was then dropped, with its items).
    ///
    /// # Examples
    ///
    /// See [`DrainHandle`].
    pub fn stop(mut self) -> Option<LeakyReceiver<T, C>> {
        self.request_stop();
        self.finish()
    }

    /// Waits for the queue to be closed and every item handled, and returns the (empty)
    /// consumer; `None` if the handler panicked.
    ///
    /// # Examples
    ///
    /// See [`LeakyReceiver::spawn_drain`].
    pub fn join(mut self) -> Option<LeakyReceiver<T, C>> {
        self.finish()
    }

    /// Whether the thread has ended (the queue was closed and drained, or the handler panicked).
    ///
    /// # Examples
    ///
    /// ```
    /// let (tx, rx) = tollgate::leaky::queue::<u8>(tollgate::Quota::per_second(1)?)?;
    /// let drain = rx.spawn_drain(|_| {}).map_err(|e| e.to_string())?;
    /// assert!(!drain.is_finished());
    /// drop(tx);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    fn request_stop(&self) {
        // Relaxed: the consumer mutex below orders the flag against the consumer's check.
        self.shared.stop.store(true, Ordering::Relaxed);
        let _guard = lock(&self.shared.consumer_lock);
        self.shared.consumer_cond.notify_all();
    }

    fn finish(&mut self) -> Option<LeakyReceiver<T, C>> {
        let receiver = self.thread.take()?.join().ok().flatten();
        // Relaxed: the join above synchronizes with everything the thread did; a later `recv`
        // on the returned queue must not see a stale stop request.
        self.shared.stop.store(false, Ordering::Relaxed);
        receiver
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
