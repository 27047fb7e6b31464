//! The optional sweeper thread ([`KeyedLimiter::spawn_sweeper`]): what it runs, its handle, and
//! the bell that its handle and the limiter's drop ring to end it at once. Not built under loom.

use std::hash::Hash;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::{Algorithm, KeyedLimiter};
use crate::clock::Clock;
use crate::sync::{lock, Condvar, Mutex};

impl<K, A, C> KeyedLimiter<K, A, C>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    A: Algorithm,
    C: Clock + Send + Sync + 'static,
{
    /// Starts a background thread that runs [`KeyedLimiter::retain_recent`] every `every`, for
    /// users who want idle keys' memory given back on a schedule rather than only as new keys
    /// arrive (the automatic sweeps need no thread: see the [module docs](super)). The thread holds
    /// only a weak reference: it ends when the [`Sweeper`] is stopped or dropped, or as soon as the
    /// last `Arc` to the limiter is dropped (the limiter's drop wakes it, whatever `every` is; a
    /// sweep in progress finishes first). An `every` of zero is taken as one millisecond;
    /// `Duration::MAX` sweeps never, and the thread only waits to end.
    ///
    /// # Errors
    ///
    /// The operating system's error if it cannot start a thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::Quota;
    ///
    /// let limiter: Arc<KeyedLimiter<u64>> = Arc::new(KeyedLimiter::new(Quota::per_second(100)?));
    /// let sweeper = limiter.spawn_sweeper(Duration::from_secs(10))?;
    /// assert!(limiter.check_key(&7).is_ok());
    /// sweeper.stop(); // ends the thread and waits for it
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) -> std::io::Result<Sweeper> {
        let every = every.max(Duration::from_millis(1));
        let limiter = Arc::downgrade(self);
        let bell = Arc::new(Bell::default());
        let rung = Arc::clone(&bell);
        let thread = thread::Builder::new()
            .name("tollgate-sweeper".into())
            .spawn(move || {
                // The bell means stop (the handle, or the limiter's drop); a timeout means sweep.
                while !rung.wait(every) {
                    match limiter.upgrade() {
                        Some(limiter) => {
                            // A key's `Drop` may panic as the sweep frees it: the sweep's own
                            // work is done by then (the table frees after removing), so the
                            // thread goes on to its next tick rather than ending silently.
                            let swept =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                    limiter.retain_recent()
                                }));
                            drop(swept);
                        }
                        None => return,
                    }
                }
            })?;
        // Registered after the thread started: a limiter dropped before this line cannot be, as
        // `self` is borrowed. Bells of sweepers already gone are dropped from the list here.
        let mut sweepers = lock(&self.sweepers);
        sweepers.retain(|bell| bell.strong_count() > 0);
        sweepers.push(Arc::downgrade(&bell));
        drop(sweepers);
        Ok(Sweeper {
            bell,
            thread: Some(thread),
        })
    }
}

/// The handle of a sweeper thread started by [`KeyedLimiter::spawn_sweeper`]: stopping or
/// dropping it ends the thread.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// let limiter: Arc<tollgate::keyed::KeyedLimiter<u8>> =
///     Arc::new(tollgate::keyed::KeyedLimiter::new(tollgate::Quota::per_second(1)?));
/// let sweeper = limiter.spawn_sweeper(Duration::from_millis(100))?;
/// drop(sweeper); // stops it too, and waits for it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Sweeper {
    bell: Arc<Bell>,
    thread: Option<thread::JoinHandle<()>>,
}

/// What a sweeper thread waits on between sweeps: rung by its [`Sweeper`] handle to stop it, or by
/// its limiter's drop. A flag under a mutex, so that a ring before the thread waits is not lost.
#[derive(Debug, Default)]
pub(super) struct Bell {
    rung: Mutex<bool>,
    wake: Condvar,
}

impl Bell {
    fn ring(&self) {
        *lock(&self.rung) = true;
        self.wake.notify_all();
    }

    /// Waits for the bell for up to `every` (any length: `Duration::MAX` waits for the bell
    /// only); answers whether it rang.
    fn wait(&self, every: Duration) -> bool {
        let rung = lock(&self.rung);
        let (rung, _) = self
            .wake
            .wait_timeout_while(rung, every, |rung| !*rung)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *rung
    }
}

/// Wakes the limiter's sweeper threads, which then find it gone and end.
impl<K, A: Algorithm, C> Drop for KeyedLimiter<K, A, C> {
    fn drop(&mut self) {
        let sweepers = self
            .sweepers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for bell in sweepers.drain(..).filter_map(|bell| bell.upgrade()) {
            bell.ring();
        }
    }
}

impl Sweeper {
    /// Ends the sweeper thread and waits for it (for at most one sweep in progress).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// let limiter: Arc<tollgate::keyed::KeyedLimiter<u8>> =
    ///     Arc::new(tollgate::keyed::KeyedLimiter::new(tollgate::Quota::per_second(1)?));
    /// limiter.spawn_sweeper(Duration::from_secs(1))?.stop();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop(mut self) {
        self.end();
    }

    /// Whether the sweeper thread has ended: after [`Sweeper::stop`], or soon after the last
    /// `Arc` of its limiter was dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    /// let limiter: Arc<tollgate::keyed::KeyedLimiter<u8>> =
    ///     Arc::new(tollgate::keyed::KeyedLimiter::new(tollgate::Quota::per_second(1)?));
    /// let sweeper = limiter.spawn_sweeper(Duration::MAX)?;
    /// assert!(!sweeper.is_finished());
    /// drop(limiter); // wakes the thread, which ends
    /// let deadline = Instant::now() + Duration::from_secs(10);
    /// while !sweeper.is_finished() && Instant::now() < deadline {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert!(sweeper.is_finished());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        self.thread
            .as_ref()
            .is_none_or(thread::JoinHandle::is_finished)
    }

    fn end(&mut self) {
        // Wakes the thread at once, wherever it is in its wait.
        self.bell.ring();
        if let Some(thread) = self.thread.take() {
            // The thread catches a panic from a key's `Drop` in its sweeps (see above); should it
            // end some other way, there is nothing left to stop.
            let _ = thread.join();
        }
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.end();
    }
}
