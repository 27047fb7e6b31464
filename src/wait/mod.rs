//! Waiting for capacity instead of being refused: [`LimiterExt`] for every direct limiter,
//! [`KeyedLimitExt`] for every keyed one, with the knobs in [`Wait`].
//!
//! ```
//! use std::time::Duration;
//! use tollgate::wait::LimiterExt;
//! use tollgate::{Quota, TokenBucket};
//!
//! // 20 a second: the first 20 pass at once, the 21st waits about 50 ms for its token.
//! let bucket = TokenBucket::new(Quota::per_second(20)?);
//! for _ in 0..21 {
//!     bucket.wait_n(1)?;
//! }
//! // More than the capacity can never be admitted: refused at once, not waited for.
//! assert!(bucket.wait_n(21).unwrap_err().denied().is_none());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! With the `tokio` feature, the same loops run as futures (`until_ready`, `until_n_ready`,
//! `until_key_ready`, ...) sleeping on tokio's timer; with [`TokioClock`] as the
//! limiter's clock, a test on tokio's paused time moves the limiter with the timer:
//!
//! ```
//! # #[cfg(feature = "tokio")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
//! # rt.block_on(async {
//! use std::time::Duration;
//! use tollgate::wait::LimiterExt;
//! use tollgate::{Quota, TokenBucket, TokioClock};
//!
//! let bucket = TokenBucket::with_clock(Quota::per_second(2)?, TokioClock::new());
//! let start = tokio::time::Instant::now();
//! for _ in 0..3 {
//!     bucket.until_ready().await?;
//! }
//! // Virtual time: half a second passed for the bucket, none for the test.
//! assert!(start.elapsed() >= Duration::from_millis(500));
//! # Ok(())
//! # })
//! # }
//! # #[cfg(not(feature = "tokio"))]
//! # fn main() {}
//! ```
//!
//! # How a wait works
//!
//! Every form is the same loop: ask the limiter (`try_acquire_n`, `check_key_n`); if it admits,
//! return the [`Admitted`](crate::Admitted); if it denies, sleep the denial's
//! [`retry_after`](crate::Denied::retry_after) (plus the jitter, below) and ask again. The denial's
//! `retry_after` is exact (the earliest reading at which the same request fits), so a waiter
//! normally asks twice; it asks again only when another caller took the capacity meanwhile, or
//! when the limiter's clock lags the sleep's (a [`CoarseClock`](crate::CoarseClock) up to its
//! interval).
//!
//! - **Nothing is held while asleep.** A waiter reserves nothing: the limiter's state is only
//!   written by the admission that ends the wait. Dropping a waiting future (a `select!` that took
//!   another branch, a timeout, a cancelled task) therefore loses no capacity and delays no one.
//!   The price is fairness: waiters are not queued, so under contention the one that wakes first
//!   after a refill wins, and a request for many can wait behind a stream of requests for one. For
//!   a queue with a fixed order, schedule on a [`LeakyMeter`](crate::leaky::LeakyMeter) (its
//!   `schedule_async` takes a place at once and sleeps until its departure) or use
//!   `reserve_n` on the token buckets.
//! - **What returns at once.** A request that no wait can fix: `n` above the capacity
//!   ([`InsufficientCapacity`](crate::InsufficientCapacity)); for a keyed limiter, a new key that
//!   found every place taken ([`TooManyKeys`](crate::keyed::TooManyKeys): not a rate decision,
//!   there is no `retry_after` to sleep, and the place may never come); any other refusal a
//!   backend adds. `n = 0` is a query and is answered at once.
//! - **A bound on the wait.** The `_within(max)` forms (and [`Wait::within`]) never sleep past
//!   `max` from the call: when the next `retry_after` would end after it, they return that
//!   denial at once instead of sleeping, so the caller gets the exact `retry_after` to report.
//!   A wait of zero asks once. Timers can wake late (tokio's has a 1 ms granularity, and a loaded
//!   machine schedules a thread late), so `max` bounds the sleeps asked for, not the lateness of
//!   the wake-ups.
//! - **Never a spin.** A denial whose `retry_after` is zero (a [`ShardedBucket`](crate::ShardedBucket)
//!   gather that lost a race to callers who then gave back) is slept for [`Wait::MIN_SLEEP`], so a
//!   waiter always yields the CPU between two attempts.
//! - **Jitter** ([`Wait::with_jitter`]): each sleep gets an extra delay drawn uniformly from
//!   `0 ..= jitter`, so that waiters refused together (a burst that emptied the bucket) do not
//!   all wake at the same instant and fight over the first token. The draw is not
//!   cryptographic: an xorshift generator per wait, seeded from the standard library's
//!   randomly keyed `RandomState` (no extra dependency). With a bound, the extra delay is cut so
//!   that the sleep still ends by `max`.
//!
//! # The async forms
//!
//! They sleep with `tokio::time::sleep`, so, like it, they panic when polled outside a tokio
//! runtime whose time driver is enabled (`enable_time()`, or `#[tokio::main]`). tokio's timer
//! fires on whole milliseconds: a sleep ends up to about a millisecond after the `retry_after` it
//! was asked for, never before. Tokens that come back meanwhile wait in the bucket, so the rate
//! is kept, unless the capacity holds less than a millisecond of refill (a capacity of 1 at more
//! than 1000 a second): then a lone waiter gets about one admission per millisecond. For
//! sub-millisecond pacing, use the blocking `wait_n` on a thread of its own, or schedule on a
//! [`LeakyMeter`](crate::leaky::LeakyMeter).
//!
//! # Which clock
//!
//! A waiter sleeps on real time (`std::thread::sleep`, or tokio's timer) and asks a limiter that
//! reads its own clock. With [`MonotonicClock`](crate::MonotonicClock) or
//! [`CoarseClock`](crate::CoarseClock) the two move together. Under tokio's paused time
//! (`#[tokio::test(start_paused = true)]`) only [`TokioClock`] moves with the
//! timer: a TSC clock keeps real time and a waiter would wait in earnest. A
//! [`ManualClock`](crate::ManualClock) never moves on its own, so a waiter on one waits until
//! something advances it.
//!
#![cfg_attr(feature = "tokio", doc = "[`TokioClock`]: crate::TokioClock")]
#![cfg_attr(not(feature = "tokio"), doc = "[`TokioClock`]: crate::clock")]
// (`TokioClock` exists with the `tokio` feature only; without it, the links point at the clocks.)

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

mod ext;
#[cfg(feature = "tokio")]
mod meter;

pub use ext::{KeyedLimitExt, LimiterExt};

use crate::keyed::KeyedError;
use crate::outcome::{AcquireError, Denied};

/// How to wait: for ever or at most a time, and with how much jitter.
///
/// The shortcuts of [`LimiterExt`] and [`KeyedLimitExt`] cover the common cases (`wait_n`,
/// `wait_n_within`, `until_ready`, `until_ready_within`); the `_with` forms take a `Wait`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::wait::{LimiterExt, Wait};
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// let wait = Wait::within(Duration::from_millis(10)).with_jitter(Duration::from_millis(2));
/// assert_eq!(wait.max_wait(), Some(Duration::from_millis(10)));
/// assert_eq!(wait.jitter(), Duration::from_millis(2));
///
/// // The manual clock stands still, so the bucket's second token is a second away: past the
/// // bound, so the denial comes back at once, with its exact retry_after.
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
/// bucket.wait_n_with(1, wait)?;
/// let denied = bucket.wait_n_with(1, wait).unwrap_err();
/// assert_eq!(denied.denied().unwrap().retry_after(), Duration::from_secs(1));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wait {
    max: Option<Duration>,
    jitter: Duration,
}

impl Wait {
    /// The shortest sleep between two attempts: a denial with a `retry_after` below it (zero, after
    /// a lost race) is slept this long, so that a waiter never spins. 1 µs (tokio's timer rounds
    /// every sleep up to its next millisecond anyway).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::wait::Wait::MIN_SLEEP.as_micros(), 1);
    /// ```
    pub const MIN_SLEEP: Duration = Duration::from_micros(1);

    /// Wait for as long as it takes, without jitter (the default).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::wait::Wait;
    /// assert_eq!(Wait::forever(), Wait::default());
    /// assert_eq!(Wait::forever().max_wait(), None);
    /// ```
    pub const fn forever() -> Wait {
        Wait {
            max: None,
            jitter: Duration::ZERO,
        }
    }

    /// Wait at most `max` from the call: a denial whose `retry_after` would end the wait later is
    /// returned at once instead. `Duration::ZERO` asks once.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::wait::Wait;
    /// assert_eq!(Wait::within(Duration::from_secs(1)).max_wait(), Some(Duration::from_secs(1)));
    /// ```
    pub const fn within(max: Duration) -> Wait {
        Wait {
            max: Some(max),
            jitter: Duration::ZERO,
        }
    }

    /// Adds to each sleep an extra delay drawn uniformly from `0 ..= up_to` (see the
    /// [module docs](self#how-a-wait-works)). `Duration::ZERO` turns jitter off.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::wait::Wait;
    /// let wait = Wait::forever().with_jitter(Duration::from_millis(5));
    /// assert_eq!(wait.jitter(), Duration::from_millis(5));
    /// ```
    pub const fn with_jitter(self, up_to: Duration) -> Wait {
        Wait {
            max: self.max,
            jitter: up_to,
        }
    }

    /// The bound on the wait, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::wait::Wait;
    /// assert_eq!(Wait::within(Duration::ZERO).max_wait(), Some(Duration::ZERO));
    /// ```
    pub const fn max_wait(&self) -> Option<Duration> {
        self.max
    }

    /// The most extra delay a sleep gets.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::wait::Wait;
    /// assert!(Wait::forever().jitter().is_zero());
    /// ```
    pub const fn jitter(&self) -> Duration {
        self.jitter
    }

    /// The sleep before the next attempt after a denial that said `retry_after`, with `left` of
    /// the bound remaining (`None`: no bound), or `None` to give up and return the denial.
    fn pause(
        &self,
        retry_after: Duration,
        left: Option<Duration>,
        rng: &mut Rng,
    ) -> Option<Duration> {
        if let Some(left) = left {
            // Past the bound, or the capacity comes back only after it: give up now rather than
            // sleep for nothing. `left` is zero once the bound has passed, which ends the loop
            // even for a denial saying "retry now".
            if left.is_zero() || retry_after > left {
                return None;
            }
        }
        let sleep = retry_after
            .max(Wait::MIN_SLEEP)
            .saturating_add(rng.up_to(self.jitter));
        Some(match left {
            Some(left) => sleep.min(left),
            None => sleep,
        })
    }
}

/// A refusal a wait may sleep on: its `retry_after` when waiting can help, `None` when it cannot.
pub(crate) trait Retry {
    fn retry_after(&self) -> Option<Duration>;
}

impl Retry for Denied {
    fn retry_after(&self) -> Option<Duration> {
        Some(Denied::retry_after(self))
    }
}

impl Retry for AcquireError {
    fn retry_after(&self) -> Option<Duration> {
        self.denied().map(Denied::retry_after)
    }
}

impl Retry for KeyedError {
    fn retry_after(&self) -> Option<Duration> {
        self.denied().map(Denied::retry_after)
    }
}

/// The jitter's random numbers: xorshift64* (Vigna), seeded per wait. Not cryptographic; only
/// spread matters here.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    /// A generator seeded from a new `RandomState`: randomly keyed per thread, and keyed
    /// differently for each new one on the same thread, so two waits draw different sequences.
    fn seeded() -> Rng {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u8(0);
        // The state must not be zero (xorshift's one fixed point).
        Rng(hasher.finish() | 1)
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A duration drawn from `0 ..= max`, uniform up to a bias below `max / 2^64` (the modulo's).
    /// Draws nothing for a zero `max`.
    fn up_to(&mut self, max: Duration) -> Duration {
        if max.is_zero() {
            return Duration::ZERO;
        }
        let max_ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        let extra = match max_ns.checked_add(1) {
            Some(span) => self.next() % span,
            None => self.next(),
        };
        Duration::from_nanos(extra)
    }
}

/// The blocking loop: `attempt` until it admits, sleeping each denial's `retry_after` on the
/// thread, as `wait` says.
pub(crate) fn block<T, E: Retry>(
    wait: Wait,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let start = std::time::Instant::now();
    // A bound too far away to represent is no bound.
    let deadline = wait.max.and_then(|max| start.checked_add(max));
    let mut rng = Rng::seeded();
    loop {
        let left = || deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
        match next_sleep(wait, attempt(), left, &mut rng) {
            Ok(sleep) => std::thread::sleep(sleep),
            Err(answer) => return answer,
        }
    }
}

/// One turn of a waiting loop: the answer to return (an admission, or a refusal that waiting
/// cannot cure or that would outlast the bound), or the sleep before the next attempt. `left`
/// reads the time left before the bound, if any.
fn next_sleep<T, E: Retry>(
    wait: Wait,
    attempt: Result<T, E>,
    left: impl FnOnce() -> Option<Duration>,
    rng: &mut Rng,
) -> Result<Duration, Result<T, E>> {
    let refused = match attempt {
        Ok(admitted) => return Err(Ok(admitted)),
        Err(refused) => refused,
    };
    let Some(retry_after) = refused.retry_after() else {
        return Err(Err(refused));
    };
    wait.pause(retry_after, left(), rng).ok_or(Err(refused))
}

/// The async loop: as [`block`], sleeping on tokio's timer (whose paused time a
/// [`TokioClock`] follows).
#[cfg(feature = "tokio")]
pub(crate) async fn until<T, E: Retry>(
    wait: Wait,
    mut attempt: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    use tokio::time::Instant;
    let start = Instant::now();
    let deadline = wait.max.and_then(|max| start.checked_add(max));
    let mut rng = Rng::seeded();
    loop {
        let left = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        match next_sleep(wait, attempt(), left, &mut rng) {
            // tokio's `sleep` saturates a deadline past its range; it never panics.
            Ok(sleep) => tokio::time::sleep(sleep).await,
            Err(answer) => return answer,
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_sleep_is_the_retry_after_plus_at_most_the_jitter() {
        let wait = Wait::forever().with_jitter(10 * MS);
        let mut rng = Rng::seeded();
        let sleeps: Vec<Duration> = (0..200)
            .map(|_| wait.pause(50 * MS, None, &mut rng).unwrap())
            .collect();
        assert!(
            sleeps.iter().all(|s| (50 * MS..=60 * MS).contains(s)),
            "{sleeps:?}"
        );
        // Spread, not one value: 200 draws over 10 ms all equal would be a broken generator.
        assert!(sleeps.iter().any(|s| *s != sleeps[0]));
    }

    #[test]
    fn without_jitter_the_sleep_is_exactly_the_retry_after() {
        let mut rng = Rng::seeded();
        assert_eq!(Wait::forever().pause(7 * MS, None, &mut rng), Some(7 * MS));
    }

    #[test]
    fn a_zero_retry_after_still_sleeps() {
        let mut rng = Rng::seeded();
        assert_eq!(
            Wait::forever().pause(Duration::ZERO, None, &mut rng),
            Some(Wait::MIN_SLEEP)
        );
        assert_eq!(
            Wait::within(MS).pause(Duration::ZERO, Some(MS), &mut rng),
            Some(Wait::MIN_SLEEP)
        );
    }

    #[test]
    fn a_bound_gives_up_rather_than_sleep_past_it() {
        let wait = Wait::within(100 * MS).with_jitter(50 * MS);
        let mut rng = Rng::seeded();
        // The capacity comes back after the bound: give up.
        assert_eq!(wait.pause(101 * MS, Some(100 * MS), &mut rng), None);
        // The bound has passed: give up even on "retry now".
        assert_eq!(
            wait.pause(Duration::ZERO, Some(Duration::ZERO), &mut rng),
            None
        );
        // Within it: the jitter is cut at the bound.
        for _ in 0..100 {
            let sleep = wait.pause(90 * MS, Some(100 * MS), &mut rng).unwrap();
            assert!((90 * MS..=100 * MS).contains(&sleep), "{sleep:?}");
        }
        assert_eq!(
            wait.pause(100 * MS, Some(100 * MS), &mut rng),
            Some(100 * MS)
        );
    }

    #[test]
    fn extreme_durations_saturate_rather_than_panic() {
        let wait = Wait::forever().with_jitter(Duration::MAX);
        let mut rng = Rng::seeded();
        assert!(wait.pause(Duration::MAX, None, &mut rng).is_some());
        assert!(rng.up_to(Duration::MAX) <= Duration::MAX);
        assert!(rng.up_to(Duration::from_nanos(u64::MAX)) <= Duration::from_nanos(u64::MAX));
    }

    #[test]
    fn two_waits_draw_different_jitter() {
        let (mut a, mut b) = (Rng::seeded(), Rng::seeded());
        let a: Vec<u64> = (0..4).map(|_| a.next()).collect();
        let b: Vec<u64> = (0..4).map(|_| b.next()).collect();
        assert_ne!(a, b);
    }
}
