//! The leaky meter's async scheduling (feature `tokio`): take a place, then sleep until it
//! departs.

use crate::clock::Clock;
use crate::leaky::LeakyMeter;
use crate::outcome::{AcquireError, Denied, Scheduled};

#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl<C: Clock> LeakyMeter<C> {
    /// Takes a place in the virtual queue now and sleeps, on tokio's timer, until it departs
    /// (feature `tokio`): [`LeakyMeter::try_schedule`], then its [`Scheduled::delay`].
    ///
    /// A full queue is refused at once, not waited for: the capacity is the longest delay the
    /// meter hands out, and the denial says when a place frees up (wait for one with
    /// [`until_ready`](crate::wait::LimiterExt::until_ready) on a strict meter, or retry after
    /// `retry_after`).
    ///
    /// **Not cancel-safe in one respect: the place is taken when the future is first polled, and
    /// dropping the future before it completes does not give it back.** Requests scheduled after
    /// it have been told their departure times, and moving the queue's drain time back would let
    /// one of them leave closer than an interval to another (see the meter's
    /// [No refund](crate::leaky::meter#decisions)). A dropped place stays empty: the meter
    /// admits at most its rate, never more, and the queue frees up an interval later.
    ///
    /// # Errors
    ///
    /// [`Denied`], at once, when the queue has no free place now.
    ///
    /// # Panics
    ///
    /// Like `tokio::time::sleep`, when polled outside a tokio runtime with the time driver
    /// enabled (a delay of zero does not touch the timer).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::leaky::LeakyMeter;
    /// use tollgate::{Quota, TokioClock};
    ///
    /// let meter = LeakyMeter::with_clock(Quota::per_second(10)?, TokioClock::new());
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..3 {
    ///     meter.schedule_async().await?; // departures 100 ms apart
    /// }
    /// assert!(start.elapsed() >= Duration::from_millis(200));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn schedule_async(&self) -> Result<Scheduled, Denied> {
        let place = self.try_schedule()?;
        sleep_until_departure(&place).await;
        Ok(place)
    }

    /// Takes `n` consecutive places now, all or none, and sleeps on tokio's timer until they
    /// depart (feature `tokio`). `n = 0` is a query that returns at once. A dropped future does
    /// not give its places back (see [`LeakyMeter::schedule_async`]).
    ///
    /// # Errors
    ///
    /// At once: [`AcquireError::Denied`] when the queue has no room for `n` now,
    /// [`AcquireError::InsufficientCapacity`] when `n` exceeds the capacity.
    ///
    /// # Panics
    ///
    /// As [`LeakyMeter::schedule_async`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::leaky::LeakyMeter;
    /// use tollgate::{Quota, TokioClock};
    ///
    /// let meter = LeakyMeter::with_clock(Quota::per_second(10)?, TokioClock::new());
    /// meter.schedule_n_async(4).await?; // at once: the queue was empty
    /// let start = tokio::time::Instant::now();
    /// let second = meter.schedule_n_async(2).await?; // behind the 4
    /// assert_eq!(second.delay(), Duration::from_millis(400));
    /// assert!(start.elapsed() >= Duration::from_millis(400));
    /// assert!(meter.schedule_n_async(11).await.unwrap_err().denied().is_none()); // never
    /// # Ok(())
    /// # }
    /// ```
    pub async fn schedule_n_async(&self, n: u64) -> Result<Scheduled, AcquireError> {
        let place = self.try_schedule_n(n)?;
        if n > 0 {
            sleep_until_departure(&place).await;
        }
        Ok(place)
    }
}

/// Sleeps until `place` departs: its delay, counted from now, which is no earlier than the
/// meter's reading, so the sleep ends no earlier than the departure (a timer may wake later, never
/// earlier). tokio's `sleep` saturates a delay past its range.
async fn sleep_until_departure(place: &Scheduled) {
    let delay = place.delay();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
}
