//! The waiting methods: [`LimiterExt`] on every [`Limiter`], [`KeyedLimitExt`] on every
//! [`KeyedLimit`].

use std::time::Duration;

use super::{block, Wait};
use crate::keyed::KeyedError;
use crate::limiter::{KeyedLimit, Limiter};
use crate::outcome::{AcquireError, Admitted};

/// Waiting for capacity on any [`Limiter`]: blocking (`wait_n*`) and, with the `tokio` feature,
/// async (`until_*`). See the [module docs](super) for how a wait works.
///
/// Implemented for every `L: Limiter + ?Sized` (`dyn Limiter`, `&L`, `Arc<L>` included); bring
/// the trait into scope to use it.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use tollgate::wait::LimiterExt;
/// use tollgate::window::FixedWindow;
/// use tollgate::{Limiter, Quota};
///
/// let limiter: Arc<dyn Limiter> = Arc::new(FixedWindow::new(Quota::per_second(100)?)?);
/// let admitted = limiter.wait_n_within(10, Duration::from_secs(1))?;
/// assert!(admitted.remaining() <= 90);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait LimiterExt: Limiter {
    /// Blocks the thread until `n` requests are admitted, all or none, sleeping each denial's
    /// `retry_after`. It parks the calling thread: on an async runtime's worker, await
    /// `until_n_ready` instead.
    ///
    /// # Errors
    ///
    /// [`AcquireError::InsufficientCapacity`], at once, when `n` exceeds the capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::wait::LimiterExt;
    /// use tollgate::{Quota, TokenBucket};
    /// let bucket = TokenBucket::new(Quota::per_second(50)?.with_capacity(2)?);
    /// bucket.wait_n(2)?;
    /// bucket.wait_n(1)?; // about 20 ms later
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn wait_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.wait_n_with(n, Wait::forever())
    }

    /// As [`LimiterExt::wait_n`], sleeping no further than `max` from the call.
    ///
    /// # Errors
    ///
    /// As [`LimiterExt::wait_n`], and [`AcquireError::Denied`], at once, with its exact
    /// `retry_after`, when the request could only be admitted after `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::wait::LimiterExt;
    /// use tollgate::{Quota, TokenBucket};
    /// let bucket = TokenBucket::new(Quota::per_minute(1)?);
    /// bucket.wait_n_within(1, Duration::from_millis(10))?;
    /// // The next token is a minute away: refused now rather than after 10 ms.
    /// let err = bucket.wait_n_within(1, Duration::from_millis(10)).unwrap_err();
    /// assert!(err.denied().unwrap().retry_after() > Duration::from_secs(59));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn wait_n_within(&self, n: u64, max: Duration) -> Result<Admitted, AcquireError> {
        self.wait_n_with(n, Wait::within(max))
    }

    /// As [`LimiterExt::wait_n`], waiting as `wait` says (a bound, jitter).
    ///
    /// # Errors
    ///
    /// As [`LimiterExt::wait_n_within`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::wait::{LimiterExt, Wait};
    /// use tollgate::{Quota, ShardedBucket};
    /// let sharded = ShardedBucket::new(Quota::per_second(1_000)?);
    /// let wait = Wait::within(Duration::from_secs(1)).with_jitter(Duration::from_micros(100));
    /// sharded.wait_n_with(5, wait)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn wait_n_with(&self, n: u64, wait: Wait) -> Result<Admitted, AcquireError> {
        block(wait, || self.try_acquire_n(n))
    }

    /// Waits, on tokio's timer, until one request is admitted (feature `tokio`).
    ///
    /// Cancel-safe: the future holds nothing while it sleeps, so dropping it loses no capacity.
    ///
    /// # Errors
    ///
    /// None today for one request (every capacity is at least 1); the result is a `Result` so
    /// that all the waiting methods answer alike, and for refusals a backend may add.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tollgate::wait::LimiterExt;
    /// use tollgate::{Quota, TokenBucket, TokioClock};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, TokioClock::new());
    /// for _ in 0..15 {
    ///     bucket.until_ready().await?; // the last 5 wait 100 ms each, in paused time
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_ready(
        &self,
    ) -> impl std::future::Future<Output = Result<Admitted, AcquireError>> + Send + '_ {
        self.until_n_ready_with(1, Wait::forever())
    }

    /// Waits, on tokio's timer, until `n` requests are admitted, all or none (feature `tokio`).
    /// Cancel-safe.
    ///
    /// # Errors
    ///
    /// [`AcquireError::InsufficientCapacity`], at once, when `n` exceeds the capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tollgate::wait::LimiterExt;
    /// use tollgate::window::SlidingWindowLog;
    /// use tollgate::{Quota, TokioClock};
    /// let log = SlidingWindowLog::with_clock(Quota::per_second(4)?, TokioClock::new())?;
    /// log.until_n_ready(4).await?;
    /// log.until_n_ready(2).await?; // a second after the first 4
    /// assert!(log.until_n_ready(5).await.unwrap_err().denied().is_none()); // never
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_n_ready(
        &self,
        n: u64,
    ) -> impl std::future::Future<Output = Result<Admitted, AcquireError>> + Send + '_ {
        self.until_n_ready_with(n, Wait::forever())
    }

    /// As [`LimiterExt::until_ready`], sleeping no further than `max` from the call (feature
    /// `tokio`).
    ///
    /// # Errors
    ///
    /// [`AcquireError::Denied`], at once, when the request could only be admitted after `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::wait::LimiterExt;
    /// use tollgate::{Quota, TokenBucket, TokioClock};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, TokioClock::new());
    /// bucket.until_ready_within(Duration::ZERO).await?;
    /// let err = bucket.until_ready_within(Duration::from_millis(500)).await.unwrap_err();
    /// assert_eq!(err.denied().unwrap().retry_after(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_ready_within(
        &self,
        max: Duration,
    ) -> impl std::future::Future<Output = Result<Admitted, AcquireError>> + Send + '_ {
        self.until_n_ready_with(1, Wait::within(max))
    }

    /// As [`LimiterExt::until_n_ready`], sleeping no further than `max` from the call (feature
    /// `tokio`).
    ///
    /// # Errors
    ///
    /// As [`LimiterExt::until_n_ready`], and [`AcquireError::Denied`], at once, when the request
    /// could only be admitted after `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::wait::LimiterExt;
    /// use tollgate::window::FixedWindow;
    /// use tollgate::{Quota, TokioClock};
    /// let window = FixedWindow::with_clock(Quota::per_second(3)?, TokioClock::new())?;
    /// window.until_n_ready_within(3, Duration::from_secs(1)).await?;
    /// window.until_n_ready_within(3, Duration::from_secs(1)).await?; // the next window
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_n_ready_within(
        &self,
        n: u64,
        max: Duration,
    ) -> impl std::future::Future<Output = Result<Admitted, AcquireError>> + Send + '_ {
        self.until_n_ready_with(n, Wait::within(max))
    }

    /// As [`LimiterExt::until_n_ready`], waiting as `wait` says (feature `tokio`).
    ///
    /// # Errors
    ///
    /// As [`LimiterExt::until_n_ready_within`].
    ///
    /// # Panics
    ///
    /// Like `tokio::time::sleep` (as every `until_*` future does), when polled outside a tokio
    /// runtime with the time driver enabled.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::wait::{LimiterExt, Wait};
    /// use tollgate::{Quota, TokenBucket, TokioClock};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(100)?, TokioClock::new());
    /// let spread = Wait::forever().with_jitter(Duration::from_millis(5));
    /// for _ in 0..110 {
    ///     bucket.until_n_ready_with(1, spread).await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_n_ready_with(
        &self,
        n: u64,
        wait: Wait,
    ) -> impl std::future::Future<Output = Result<Admitted, AcquireError>> + Send + '_ {
        super::until(wait, move || self.try_acquire_n(n))
    }
}

impl<L: Limiter + ?Sized> LimiterExt for L {}

/// Waiting for capacity on any [`KeyedLimit`], per key: blocking (`wait_key_n*`) and, with the
/// `tokio` feature, async (`until_key_*`). See the [module docs](super) for how a wait works.
///
/// A [`KeyedError::TooManyKeys`] returns at once, as
/// [`KeyedError::InsufficientCapacity`] does: a new key that found no room got no rate decision
/// and no `retry_after`, and a place may not free up for a long time. Retry it on a schedule of
/// your own if that suits the caller. Implemented for every `L: KeyedLimit<Q> + ?Sized`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::wait::KeyedLimitExt;
/// use tollgate::Quota;
///
/// let per_user: KeyedLimiter<String> = KeyedLimiter::new(Quota::per_second(100)?);
/// per_user.wait_key_n_within("ann", 10, Duration::from_secs(1))?;
/// assert_eq!(per_user.remaining_key("bob"), 100);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait KeyedLimitExt<Q: ?Sized>: KeyedLimit<Q> {
    /// Blocks the thread until `n` requests for `key` are admitted, all or none, sleeping each
    /// denial's `retry_after`. It parks the calling thread: on an async runtime's worker, await
    /// `until_key_n_ready` instead.
    ///
    /// # Errors
    ///
    /// At once: [`KeyedError::InsufficientCapacity`] when `n` exceeds the capacity,
    /// [`KeyedError::TooManyKeys`] when a new key finds no room.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::wait::KeyedLimitExt;
    /// use tollgate::Quota;
    /// let limiter: KeyedLimiter<u32> = KeyedLimiter::new(Quota::per_second(50)?.with_capacity(1)?);
    /// limiter.wait_key_n(&7, 1)?;
    /// limiter.wait_key_n(&7, 1)?; // about 20 ms later
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn wait_key_n(&self, key: &Q, n: u64) -> Result<Admitted, KeyedError> {
        self.wait_key_n_with(key, n, Wait::forever())
    }

    /// As [`KeyedLimitExt::wait_key_n`], sleeping no further than `max` from the call.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimitExt::wait_key_n`], and [`KeyedError::Denied`], at once, with its exact
    /// `retry_after`, when the request could only be admitted after `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::wait::KeyedLimitExt;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<String, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// limiter.wait_key_n_within("ann", 1, Duration::ZERO)?;
    /// let err = limiter.wait_key_n_within("ann", 1, Duration::from_millis(1)).unwrap_err();
    /// assert_eq!(err.denied().unwrap().retry_after(), Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn wait_key_n_within(&self, key: &Q, n: u64, max: Duration) -> Result<Admitted, KeyedError> {
        self.wait_key_n_with(key, n, Wait::within(max))
    }

    /// As [`KeyedLimitExt::wait_key_n`], waiting as `wait` says.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimitExt::wait_key_n_within`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::keyed::{KeyedError, KeyedLimiter};
    /// use tollgate::wait::{KeyedLimitExt, Wait};
    /// use tollgate::Quota;
    /// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(Quota::per_second(1)?).with_max_keys(1);
    /// let wait = Wait::forever().with_jitter(Duration::from_millis(1));
    /// limiter.wait_key_n_with(&1, 1, wait)?;
    /// // No room for a second key: no wait would make one, so the answer comes at once.
    /// assert!(matches!(limiter.wait_key_n_with(&2, 1, wait), Err(KeyedError::TooManyKeys(_))));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn wait_key_n_with(&self, key: &Q, n: u64, wait: Wait) -> Result<Admitted, KeyedError> {
        block(wait, || self.check_key_n(key, n))
    }

    /// Waits, on tokio's timer, until one request for `key` is admitted (feature `tokio`).
    /// Cancel-safe: the future holds nothing while it sleeps.
    ///
    /// # Errors
    ///
    /// [`KeyedError::TooManyKeys`], at once, when a new key finds no room.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::wait::KeyedLimitExt;
    /// use tollgate::{Quota, TokioClock};
    /// let limiter: KeyedLimiter<String, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(2)?, TokioClock::new());
    /// for _ in 0..3 {
    ///     limiter.until_key_ready("ann").await?; // the third waits half a second
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_key_ready<'a>(
        &'a self,
        key: &'a Q,
    ) -> impl std::future::Future<Output = Result<Admitted, KeyedError>> + Send + 'a
    where
        Q: Sync,
    {
        self.until_key_n_ready_with(key, 1, Wait::forever())
    }

    /// Waits, on tokio's timer, until `n` requests for `key` are admitted, all or none (feature
    /// `tokio`). Cancel-safe.
    ///
    /// # Errors
    ///
    /// At once: [`KeyedError::InsufficientCapacity`] when `n` exceeds the capacity,
    /// [`KeyedError::TooManyKeys`] when a new key finds no room.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::wait::KeyedLimitExt;
    /// use tollgate::{Quota, TokioClock};
    /// let limiter: KeyedLimiter<u64, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(10)?, TokioClock::new());
    /// limiter.until_key_n_ready(&1, 10).await?;
    /// limiter.until_key_n_ready(&1, 5).await?; // 500 ms later
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_key_n_ready<'a>(
        &'a self,
        key: &'a Q,
        n: u64,
    ) -> impl std::future::Future<Output = Result<Admitted, KeyedError>> + Send + 'a
    where
        Q: Sync,
    {
        self.until_key_n_ready_with(key, n, Wait::forever())
    }

    /// As [`KeyedLimitExt::until_key_ready`], sleeping no further than `max` from the call
    /// (feature `tokio`).
    ///
    /// # Errors
    ///
    /// As [`KeyedLimitExt::until_key_ready`], and [`KeyedError::Denied`], at once, when the
    /// request could only be admitted after `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::wait::KeyedLimitExt;
    /// use tollgate::{Quota, TokioClock};
    /// let limiter: KeyedLimiter<String, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_minute(1)?, TokioClock::new());
    /// limiter.until_key_ready_within("ann", Duration::from_secs(1)).await?;
    /// assert!(limiter.until_key_ready_within("ann", Duration::from_secs(1)).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_key_ready_within<'a>(
        &'a self,
        key: &'a Q,
        max: Duration,
    ) -> impl std::future::Future<Output = Result<Admitted, KeyedError>> + Send + 'a
    where
        Q: Sync,
    {
        self.until_key_n_ready_with(key, 1, Wait::within(max))
    }

    /// As [`KeyedLimitExt::until_key_n_ready`], sleeping no further than `max` from the call
    /// (feature `tokio`).
    ///
    /// # Errors
    ///
    /// As [`KeyedLimitExt::until_key_n_ready`], and [`KeyedError::Denied`], at once, when the
    /// request could only be admitted after `max`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::wait::KeyedLimitExt;
    /// use tollgate::{Quota, TokioClock};
    /// let limiter: KeyedLimiter<u8, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(4)?, TokioClock::new());
    /// limiter.until_key_n_ready_within(&1, 4, Duration::ZERO).await?;
    /// limiter.until_key_n_ready_within(&1, 2, Duration::from_millis(500)).await?;
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_key_n_ready_within<'a>(
        &'a self,
        key: &'a Q,
        n: u64,
        max: Duration,
    ) -> impl std::future::Future<Output = Result<Admitted, KeyedError>> + Send + 'a
    where
        Q: Sync,
    {
        self.until_key_n_ready_with(key, n, Wait::within(max))
    }

    /// As [`KeyedLimitExt::until_key_n_ready`], waiting as `wait` says (feature `tokio`).
    ///
    /// # Errors
    ///
    /// As [`KeyedLimitExt::until_key_n_ready_within`].
    ///
    /// # Panics
    ///
    /// Like `tokio::time::sleep` (as every `until_key_*` future does), when polled outside a
    /// tokio runtime with the time driver enabled.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::wait::{KeyedLimitExt, Wait};
    /// use tollgate::{Quota, TokioClock};
    /// let limiter: KeyedLimiter<u8, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(2)?, TokioClock::new());
    /// let wait = Wait::within(Duration::from_secs(2)).with_jitter(Duration::from_millis(10));
    /// for _ in 0..4 {
    ///     limiter.until_key_n_ready_with(&9, 1, wait).await?;
    /// }
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "tokio")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    fn until_key_n_ready_with<'a>(
        &'a self,
        key: &'a Q,
        n: u64,
        wait: Wait,
    ) -> impl std::future::Future<Output = Result<Admitted, KeyedError>> + Send + 'a
    where
        Q: Sync,
    {
        super::until(wait, move || self.check_key_n(key, n))
    }
}

impl<Q: ?Sized, L: KeyedLimit<Q> + ?Sized> KeyedLimitExt<Q> for L {}
