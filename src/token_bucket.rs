//! The token bucket: bursts up to a capacity C, refilled lazily at R tokens per second, its whole
//! state in one `AtomicU64`.
//!
//! ```
//! use tollgate::{ManualClock, Quota, TokenBucket};
//!
//! // The design notes' example: capacity 10, 2 per second.
//! let bucket = TokenBucket::with_clock(Quota::per_second(2)?.with_capacity(10)?, ManualClock::new());
//! assert_eq!((0..20).filter(|_| bucket.try_acquire().is_ok()).count(), 10);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Algorithm
//!
//! The classic bucket keeps `(tokens, last_refill)` and refills lazily on every request:
//! `tokens = min(C, tokens + elapsed × R)`. Two fields do not fit one atomic word without
//! truncating the timestamp, and a truncated timestamp wraps. This bucket stores one number instead,
//! the *theoretical arrival time* of the generic cell rate algorithm (GCRA, ITU-T I.371):
//!
//! ```text
//! tat = the instant at which the bucket will be full again
//!     = t_empty + C/R               (t_empty: the instant it was, virtually, empty)
//! tokens(now) = min(C, (now + C/R - tat) × R)
//! ```
//!
//! Taking `n` tokens moves `tat` forward by `n/R`; a full bucket has `tat <= now`, so an idle period
//! of any length reads as full. `tat` is `t_empty` shifted by the burst window `C/R`, chosen because it
//! is never negative (a bucket that starts full at the epoch has `t_empty = -C/R`). Time is counted in
//! whole nanoseconds since the clock's epoch (584 years of range, fractional tokens carried at 1 ns),
//! or in coarser units for burst windows over 146 years (see [`Quota`](crate::quota)).
//!
//! # Guarantees
//!
//! - Over any interval of length `t`, starting from a full bucket, admissions <= `C + R × t`, exactly,
//!   under any interleaving of threads and clock readings (each admission moves `tat` forward by one
//!   interval, the clamp `tat >= now` only moves it forward, and an admission at `now` needs
//!   `tat <= now + C/R`).
//! - The interval `1/R` is rounded **up** to a whole nanosecond, so the long-run rate never exceeds R
//!   (see [`Quota`](crate::quota) for the bound on the shortfall).
//! - A reading earlier than one already applied sees the bucket as it was at that reading, which holds
//!   no more tokens than it does now: a clock stepping backwards, or two threads whose readings arrive
//!   out of order, never create tokens. A reading that jumps forward by years fills the bucket, as
//!   any idle period does, and no further.
//! - Readings beyond [`Nanos::MAX_USABLE`] (146 years) are clamped: no arithmetic can overflow.
//!
//! # Memory ordering
//!
//! The word publishes nothing but itself, so every access is `Relaxed`: an admission is a
//! compare-and-swap on the word's latest value, and the atomicity of that read-modify-write, not any
//! fence, is what keeps two threads from taking the same token. Do not use an admission to publish
//! other data between threads.

use crate::cas::{self, Step};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::gcra::{gcra_constructors, Gcra, GcraWord, Time};
use crate::limiter::Direct;
use crate::outcome::{Admitted, Denied};
use crate::quota::Quota;

/// The token bucket as an [`Algorithm`](crate::Algorithm): the marker of [`TokenBucket`] and, per
/// key, of [`KeyedLimiter`](crate::keyed::KeyedLimiter)'s default
/// ([`TokenBucketKeys`](crate::keyed::TokenBucketKeys)). The state is the GCRA's one word (see
/// `src/gcra.rs`); a key is forgettable once its bucket is full again.
///
/// # Examples
///
/// ```
/// use tollgate::{Direct, ManualClock, Quota, TokenBucket, TokenBucketAlgorithm};
/// // The alias and the generic form are one type.
/// let bucket: Direct<TokenBucketAlgorithm, _> = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert_eq!(bucket.remaining(), 2);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenBucketAlgorithm;

impl TokenBucketAlgorithm {
    /// The policy for `quota`: the token bucket enforces every valid quota, so this cannot fail.
    pub(crate) fn policy_for(quota: &Quota) -> Gcra {
        Gcra::new(quota)
    }
}

impl GcraWord for TokenBucketAlgorithm {
    const NAME: &'static str = "TokenBucket";
    const WORD: &'static str = "tat";

    #[inline]
    fn decide(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, Denied> {
        gcra.decide(word, now, n)
    }
}

/// A lock-free token bucket: bursts up to the quota's capacity, then the quota's steady rate.
///
/// One `AtomicU64` holds the whole state, updated by one compare-and-swap per admission; a denial only
/// reads. Generic over its [`Clock`]: [`MonotonicClock`] by default, [`CoarseClock`](crate::CoarseClock)
/// for the cheapest reads, [`ManualClock`](crate::ManualClock) for tests. See the
/// [module docs](self) for the algorithm and its guarantees, and [`Direct`] for the methods every
/// direct limiter shares (`try_acquire*`, `peek_n*`, `remaining*`, `quota`, `clock`).
///
/// # Memory ordering
///
/// Admissions are linearizable: every admission and refund takes effect at one instant in a single
/// total order, and no two callers ever receive the same token. An admission is not a
/// synchronization point between threads: do not rely on it to make other writes visible.
///
/// # Examples
///
/// ```
/// use tollgate::{Quota, TokenBucket};
///
/// // 100 requests a second with bursts of up to 10.
/// let bucket = TokenBucket::new(Quota::per_second(100)?.with_capacity(10)?);
/// for _ in 0..10 {
///     assert!(bucket.try_acquire().is_ok());
/// }
/// let denied = bucket.try_acquire().unwrap_err();
/// assert!(denied.retry_after() <= std::time::Duration::from_millis(10));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type TokenBucket<C = MonotonicClock> = Direct<TokenBucketAlgorithm, C>;

gcra_constructors!(
    TokenBucket,
    /// A bucket for `quota` on the default clock, filled as the quota says (full by default).
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_minute(60)?);
    /// assert_eq!(bucket.remaining(), 60);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    new,
    /// A bucket for `quota` reading time from `clock`, filled as the quota says as of `clock.now()`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(5)?.with_initial(2)?, ManualClock::new());
    /// assert_eq!(bucket.remaining(), 2);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    with_clock
);

impl<C: Clock> TokenBucket<C> {
    /// Gives back `n` tokens taken earlier and not used, never filling above the capacity.
    ///
    /// Refund only what an admission took: refunding tokens never taken raises the rate above the
    /// quota (still never above the capacity at any instant).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// bucket.try_acquire_n(3)?;
    /// bucket.refund(2);
    /// assert_eq!(bucket.remaining(), 4);
    /// bucket.refund(100); // capped at the capacity
    /// assert_eq!(bucket.remaining(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, n: u64) {
        self.refund_at(n, self.clock.now());
    }

    /// Gives back `n` tokens as of `now`, never filling above the capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// bucket.try_acquire_n_at(5, Nanos::new(0))?;
    /// bucket.refund_at(1, Nanos::new(0));
    /// assert_eq!(bucket.remaining_at(Nanos::new(0)), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund_at(&self, n: u64, now: Nanos) {
        let now = self.policy.time(now);
        let _ = cas::update(&self.state, |w| self.policy.refund(w, now, n));
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    #[test]
    fn n_zero_is_a_query_that_writes_nothing() {
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(Quota::per_second(4).unwrap(), clock);
        let before = cas::read(&bucket.state);
        assert_eq!(bucket.try_acquire_n(0).unwrap().remaining(), 4);
        assert_eq!(cas::read(&bucket.state), before);
        bucket.try_acquire_n(4).unwrap();
        // Even an empty bucket answers a zero request.
        assert_eq!(bucket.try_acquire_n(0).unwrap().remaining(), 0);
    }

    /// Real threads on one bucket: admissions never exceed `C + R × t` measured on the bucket's own
    /// clock, and compare-and-swap retries really happened (the work per thread grows until they do).
    #[test]
    fn stress_real_threads_conserve_tokens_and_do_contend() {
        let threads = 4;
        cas::until_contended(|per_thread| {
            let clock = MonotonicClock::new();
            let quota = Quota::per_second(2_000_000)
                .unwrap()
                .with_capacity(1_000)
                .unwrap();
            let start = clock.now();
            let bucket = TokenBucket::with_clock(quota, clock);
            let (mut admitted, mut retries) = (0, 0);
            for (a, r) in cas::race(threads, |_| {
                (0..per_thread)
                    .filter(|_| bucket.try_acquire().is_ok())
                    .count() as u64
            }) {
                admitted += a;
                retries += r;
            }
            let elapsed = clock.now().as_u64() - start.as_u64();
            let interval = quota.interval().as_nanos() as u64;
            let bound = quota.capacity() + elapsed / interval;
            assert!(admitted <= bound, "admitted {admitted} > C + R*t = {bound}");
            assert!(admitted > 0);
            retries
        });
    }

    /// Refunds racing admissions on real threads: with the clock frozen, what is admitted minus what
    /// is refunded never exceeds what the bucket held.
    #[test]
    fn stress_refunds_racing_admissions_conserve_tokens() {
        use std::sync::Arc;

        let clock = ManualClock::new();
        let bucket = Arc::new(TokenBucket::with_clock(
            Quota::per_second(50).unwrap(),
            clock,
        ));
        let handles: Vec<_> = (0..4)
            .map(|i| {
                let bucket = Arc::clone(&bucket);
                std::thread::spawn(move || {
                    let (mut taken, mut given) = (0u64, 0u64);
                    for round in 0..20_000u64 {
                        let n = 1 + (round + i) % 3;
                        if bucket.try_acquire_n(n).is_ok() {
                            taken += n;
                            if round % 2 == 0 {
                                bucket.refund(n);
                                given += n;
                            }
                        }
                    }
                    (taken, given)
                })
            })
            .collect();
        let (mut taken, mut given) = (0, 0);
        for h in handles {
            let (t, g) = h.join().unwrap();
            taken += t;
            given += g;
        }
        assert_eq!(taken - given + bucket.remaining(), 50);
    }
}
