//! Reservations on a Redis token bucket: [`RedisLimiter::reserve_key_n`] takes `n` tokens of a
//! key now, into debt when they are not there yet, and answers a [`RedisReservation`] that says
//! when they are the caller's; [`RedisReservation::cancel`] gives them back.

use std::fmt;
use std::time::Duration;

use super::error::{RedisError, Unavailable};
#[cfg(doc)]
use super::failure::FailurePolicy;
use super::limiter::local_full;
use super::limiter::RedisLimiter;
use super::script::MAX_SPAN;
use crate::clock::MonotonicClock;
use crate::keyed::{KeyedLimiter, TokenBucketKeys};
use crate::reservation::{reservation_readers, MaxWaitError, Reservation, ReserveError};

/// The local limiter of [`FailurePolicy::Local`] for the token bucket.
type Local = KeyedLimiter<Vec<u8>, TokenBucketKeys, MonotonicClock>;

/// Tokens of a key reserved in Redis by [`RedisLimiter::reserve_key_n`], maybe into debt: they
/// are the caller's at [`ready_at`](RedisReservation::ready_at), after
/// [`delay`](RedisReservation::delay). Dropping it keeps the tokens taken (as for an in-process
/// [`Reservation`]); [`cancel`](RedisReservation::cancel) gives them back.
///
/// # Examples
///
/// See [`RedisLimiter::reserve_key_n`].
#[must_use = "dropping a RedisReservation keeps its tokens: wait for ready_at(), or cancel() it"]
pub struct RedisReservation<'a> {
    limiter: &'a RedisLimiter<TokenBucketKeys>,
    tokens: u64,
    /// The decision's reading, in nanoseconds on the deciding clock.
    now: u64,
    /// When the tokens are the caller's, on the same clock.
    ready: u64,
    origin: Origin<'a>,
}

/// Who granted a reservation, and what its cancel needs.
enum Origin<'a> {
    /// The key's script: the Redis key, the reading (Unix microseconds), the gap the reservation
    /// wrote and its wait (ticks).
    Redis {
        name: Vec<u8>,
        now_us: u64,
        gap: u64,
        wait: u64,
    },
    /// [`FailurePolicy::Open`]: nothing was taken anywhere.
    Open,
    /// [`FailurePolicy::Local`]: the local limiter's own reservation.
    Local(Reservation<'a, Local, Vec<u8>>),
}

impl RedisReservation<'_> {
    reservation_readers! {
        /// The tokens reserved (0 for a query).
        ///
        /// # Examples
        ///
        /// See [`RedisLimiter::reserve_key_n`].
        tokens,

        /// How long after the decision's reading the tokens are the caller's: zero when they were
        /// there at once.
        ///
        /// # Examples
        ///
        /// See [`RedisLimiter::reserve_key_n`].
        delay,

        /// The instant the tokens are the caller's: on the Redis server's clock (Unix time in
        /// nanoseconds) for a reservation made in Redis, as
        /// [`Denied::retry_at`](crate::Denied::retry_at) is; on the local limiter's clock for one
        /// made by [`FailurePolicy::Local`]; 0 for an admission by [`FailurePolicy::Open`], which
        /// knows no clock.
        ///
        /// # Examples
        ///
        /// See [`RedisLimiter::reserve_key_n`].
        ready_at,
    }

    /// Gives the reservation's tokens back, less those taken from its key after it, in one call;
    /// answers how many went back. As [`Reservation::cancel_at`] does, on the server's clock:
    /// never more than the reservation took, never above the capacity, and nothing once its time
    /// has passed (a reading after [`ready_at`](RedisReservation::ready_at)). Also nothing when
    /// the key's state has expired (the bucket is full), or is now under another quota (a
    /// limiter with another quota wrote it since: its tokens are not this reservation's). A
    /// reservation made by [`FailurePolicy::Local`] is cancelled there; one admitted by
    /// [`FailurePolicy::Open`] gives back nothing.
    ///
    /// # Errors
    ///
    /// [`RedisError::Unavailable`] when Redis could not answer (whatever the failure policy:
    /// nothing was given back).
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter::reserve_key_n`].
    pub async fn cancel(self) -> Result<u64, RedisError> {
        match self.origin {
            Origin::Open => Ok(0),
            Origin::Local(r) => Ok(r.cancel()),
            Origin::Redis {
                name,
                now_us,
                gap,
                wait,
            } => {
                let config = self.limiter.config();
                let reply = self
                    .limiter
                    .decide(&config, &name, "cancel", self.tokens, &[now_us, gap, wait])
                    .await?;
                // `backlog`: the tokens the script gave back, never more than were asked for.
                Ok(reply.backlog.min(self.tokens))
            }
        }
    }
}

impl fmt::Debug for RedisReservation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_as("RedisReservation", f)
    }
}

impl RedisLimiter<TokenBucketKeys> {
    /// Reserves `n` tokens of `key` now, waiting at most `max_wait`: taken now, into debt when
    /// they are not there yet, and the caller's at [`RedisReservation::ready_at`], in one call.
    /// The Redis form of [`KeyedLimiter::reserve_key_n`], with the same semantics (see the
    /// [`reservation`](crate::reservation) module): requests after it queue behind its debt;
    /// when the tokens would not be there within `max_wait`, nothing is reserved and the denial's
    /// `retry_after` is the wait until the same reservation would be granted. `n = 0` is a query
    /// (an empty reservation, writing nothing).
    ///
    /// The state holds its debt in the same number as its tokens, which the script keeps below
    /// 2^52 ticks (see the [module docs](super#time-and-exactness)): a reservation is granted only
    /// while the burst window plus the debt it leaves fit in 2^52 ticks (52 days for a quota
    /// counted in nanoseconds, 142 years in microseconds); beyond that it is denied, with the
    /// wait until it would fit. `max_wait` is counted in the quota's ticks, rounded down.
    ///
    /// When Redis cannot decide: `Closed` answers the error; `Open` admits with no delay
    /// (nothing is taken, and a cancel gives back nothing); `Local` reserves on the local
    /// limiter ([`KeyedLimiter::reserve_key_n`]), whose reservation's cancel gives back there.
    ///
    /// # Errors
    ///
    /// [`RedisError::Denied`] when the tokens would not be there within `max_wait` (nothing is
    /// reserved); [`RedisError::InsufficientCapacity`] for `n` over the capacity,
    /// [`RedisError::MaxWait`] for `max_wait` over
    /// [`reservation::MAX_WAIT`](crate::reservation::MAX_WAIT) and
    /// [`RedisError::KeyTooLong`], all without a round trip; [`RedisError::Unavailable`] as for
    /// [`RedisLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use std::time::Duration;
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::redis::{FailurePolicy, RedisError, RedisLimiter};
    /// use tollgate::Quota;
    /// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
    /// let conn = redis::Client::open(url)?.get_connection_manager().await?;
    /// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(60)?.with_capacity(2)?)
    ///     .prefix("docs-reserve")
    ///     .build(FailurePolicy::Closed)?;
    /// let key = format!("crawler-{}", std::process::id());
    /// let now = limiter.reserve_key_n(&key, 2, Duration::ZERO).await?; // there at once
    /// assert_eq!(now.delay(), Duration::ZERO);
    /// let later = limiter.reserve_key_n(&key, 2, Duration::from_secs(5)).await?; // into debt
    /// // Its 2 tokens are there 2 s after the first reservation's reading.
    /// assert!(later.delay() > Duration::from_secs(1) && later.delay() <= Duration::from_secs(2));
    /// // Beyond the longest wait: nothing is reserved.
    /// assert!(matches!(
    ///     limiter.reserve_key_n(&key, 2, Duration::from_secs(1)).await,
    ///     Err(RedisError::Denied(_))
    /// ));
    /// // Changed plans: nothing was taken after it, so both tokens go back.
    /// assert_eq!(later.cancel().await?, 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub async fn reserve_key_n(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        max_wait: Duration,
    ) -> Result<RedisReservation<'_>, RedisError> {
        let answer = self.reserve(key.as_ref(), n, max_wait).await;
        // One decision per call, as `check_key_n` counts (see `crate::metrics`); a bad
        // `max_wait` or key decided nothing.
        #[cfg(feature = "metrics")]
        self.record(&answer);
        answer
    }

    /// [`RedisLimiter::reserve_key_n`], uncounted.
    async fn reserve(
        &self,
        key: &[u8],
        n: u64,
        max_wait: Duration,
    ) -> Result<RedisReservation<'_>, RedisError> {
        let max_wait_ns = MaxWaitError::check(max_wait).map_err(RedisError::MaxWait)?;
        let config = self.config();
        let name = self.precheck(&config, key, n)?;
        let tick = config.plan.tick;
        // The longest wait in ticks, rounded down (never longer than asked), and at most 2^52
        // (the script's bound on a gap, past which no wait is granted anyway).
        let max_ticks = (max_wait_ns / tick).min(MAX_SPAN);
        let reply = match self
            .decide(&config, &name, "reserve", n, &[max_ticks])
            .await
        {
            Ok(reply) => reply,
            Err(unavailable) => return self.reserve_fallback(key, n, max_wait, unavailable),
        };
        if let Err(denied) = reply.outcome(tick) {
            return Err(RedisError::Denied(denied));
        }
        // A query (`n = 0`) answers the state; it reserves nothing and waits for nothing.
        let wait = if n == 0 { 0 } else { reply.wait };
        let now = reply.now_us * 1000;
        // `wait` is at most 2^52 ticks of at most 1000 ns: no overflow past 2^63.
        let ready = now.saturating_add(wait.saturating_mul(tick));
        Ok(RedisReservation {
            limiter: self,
            tokens: n,
            now,
            ready,
            origin: Origin::Redis {
                name,
                now_us: reply.now_us,
                gap: reply.reset,
                wait,
            },
        })
    }
    /// The failure policy's reservation.
    fn reserve_fallback(
        &self,
        key: &[u8],
        n: u64,
        max_wait: Duration,
        unavailable: Unavailable,
    ) -> Result<RedisReservation<'_>, RedisError> {
        let open = || RedisReservation {
            limiter: self,
            tokens: n,
            now: 0,
            ready: 0,
            origin: Origin::Open,
        };
        self.fall_back(self.failure(), unavailable, open, |local, unavailable| {
            match local.reserve_key_n(key, n, max_wait) {
                Ok(r) => Ok(RedisReservation {
                    limiter: self,
                    tokens: r.tokens(),
                    now: r.now,
                    ready: r.ready,
                    origin: Origin::Local(r),
                }),
                Err(ReserveError::Denied(d)) => Err(RedisError::Denied(d)),
                Err(ReserveError::InsufficientCapacity(e)) => {
                    Err(RedisError::InsufficientCapacity(e))
                }
                Err(ReserveError::MaxWait(e)) => Err(RedisError::MaxWait(e)),
                // The local limiter holds no room for this key: nothing decided it.
                Err(e) => Err(local_full(&e, unavailable)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn a_reservation_may_be_held_across_tasks() {
        send_sync::<RedisReservation<'static>>();
    }
}
