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
//! - The bucket holds its initial tokens (all of them, unless [`Quota::with_initial`] says
//!   otherwise) as of its construction reading, exactly, with coarse units too (its units are laid
//!   so that this reading starts one), and a reading before it sees fewer, so the bound above holds
//!   from the construction reading even when the clock then steps back.
//! - Readings beyond [`Nanos::MAX_USABLE`] (146 years) are clamped: no arithmetic can overflow.
//!
//! # Reserving, and taking what is there
//!
//! Besides all-or-nothing admissions, the bucket answers two requests its peers have:
//!
//! - [`TokenBucket::reserve_n`]`(n, max_wait)` takes `n` tokens now, into debt if they are not
//!   there yet, and answers a [`Reservation`] that says when they are the caller's
//!   ([`Reservation::delay`], [`Reservation::ready_at`]); a wait beyond `max_wait` reserves
//!   nothing. [`Reservation::cancel`] gives back what no later request depends on. This is
//!   `x/time/rate`'s `ReserveN`: wait, then act, with no second call. The debt lives in the same
//!   word (`tat` runs ahead of `now + C/R` by the debt), so the bucket refuses everyone else until
//!   it is paid, and over any interval the tokens admitted or ready still number at most
//!   `C + R × t`. `max_wait` is at most [`MAX_WAIT`](crate::reservation::MAX_WAIT) (about 73
//!   years): beyond it the sums on the word could pass 2^64. See [`reservation`](crate::reservation).
//! - [`TokenBucket::take_up_to`]`(n)` takes as many whole tokens as are there, at most `n`, in one
//!   compare-and-swap (Envoy's `allow_partial`, Bucket4j's `tryConsumeAsMuchAsPossible`), answering
//!   a [`Partial`]; with none there, a [`Denied`] for one token.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{ManualClock, Quota, TokenBucket};
//!
//! let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
//! assert_eq!(bucket.take_up_to(3)?.taken(), 3);
//! assert_eq!(bucket.take_up_to(3)?.taken(), 1); // the last one
//! // Nothing left: reserve two, yours in half a second.
//! let two = bucket.reserve_n(2, Duration::from_secs(1))?;
//! assert_eq!(two.delay(), Duration::from_millis(500));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Memory ordering
//!
//! The word publishes nothing but itself, so every access is `Relaxed`: an admission is a
//! compare-and-swap on the word's latest value, and the atomicity of that read-modify-write, not any
//! fence, is what keeps two threads from taking the same token. Do not use an admission to publish
//! other data between threads.

pub use crate::algorithm::TokenBucketAlgorithm;

use std::time::Duration;

use crate::cas::{self, Step};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::direct::Direct;
use crate::gcra::{gcra_constructors, Gcra, GcraWord, Time};
use crate::outcome::{Admitted, Denied};
use crate::partial::Partial;
use crate::quota::Quota;
use crate::reservation::{MaxWaitError, Parts, Reservation, ReserveError};

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

    #[inline]
    fn judge(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<(), ()> {
        gcra.judge(word, now, n)
    }

    #[inline]
    fn outcome(gcra: &Gcra, word: u64, now: Time, n: u64) -> Result<Admitted, Denied> {
        gcra.outcome(word, now, n)
    }

    #[inline]
    fn admit(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, ()> {
        gcra.admit(word, now, n)
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
        self.decide(|b| {
            let now = b.policy.time(now);
            Ok(cas::update_live(&b.state, |w| b.policy.refund(w, now, n))?.ok())
        });
    }

    /// Reserves `n` tokens now, into debt if they are not there, if they are the caller's within
    /// `max_wait`; the [`Reservation`] says when ([`Reservation::delay`]). See the
    /// [`reservation`](crate::reservation) module for the semantics.
    ///
    /// # Errors
    ///
    /// [`ReserveError::Denied`] when the tokens would be the caller's only after `max_wait` (its
    /// `retry_after`: when this reservation would fit); [`ReserveError::InsufficientCapacity`] for
    /// `n` above the capacity; [`ReserveError::MaxWait`] for `max_wait` above
    /// [`MAX_WAIT`](crate::reservation::MAX_WAIT).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// bucket.try_acquire_n(10)?;
    /// let r = bucket.reserve_n(3, Duration::from_secs(1))?;
    /// assert_eq!(r.delay(), Duration::from_millis(300));
    /// // The debt comes first: the next token is there after 400 ms, not 100.
    /// assert_eq!(bucket.try_acquire().unwrap_err().retry_after(), Duration::from_millis(400));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve_n(
        &self,
        n: u64,
        max_wait: Duration,
    ) -> Result<Reservation<'_, TokenBucket<C>>, ReserveError> {
        self.reserve_n_at(n, max_wait, self.clock.now())
    }

    /// [`TokenBucket::reserve_n`] as of `now`.
    ///
    /// # Errors
    ///
    /// As [`TokenBucket::reserve_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?.with_initial(0)?, ManualClock::new());
    /// let r = bucket.reserve_n_at(2, Duration::from_secs(2), Nanos::new(0))?;
    /// assert_eq!(r.ready_at(), Nanos::new(1_000_000_000));
    /// assert_eq!(bucket.reserve_n_at(0, Duration::ZERO, Nanos::new(0))?.tokens(), 0); // a query
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve_n_at(
        &self,
        n: u64,
        max_wait: Duration,
        now: Nanos,
    ) -> Result<Reservation<'_, TokenBucket<C>>, ReserveError> {
        let max_wait = MaxWaitError::check(max_wait)?;
        self.decide(|b| {
            let t = b.policy.time(now);
            let reservation = |tokens, ready, tat| Reservation {
                key: (),
                limiter: self,
                tokens,
                now: t.ns,
                ready,
                parts: Parts::Word {
                    tat,
                    generation: b.generation,
                },
            };
            Ok(match b.policy.check_n(n) {
                Err(e) => Err(e.into()),
                Ok(false) => Ok(reservation(0, t.ns, 0)),
                Ok(true) => {
                    match cas::update_live(&b.state, |w| b.policy.reserve(w, t, n, max_wait))? {
                        Ok(reserved) => Ok(reservation(n, reserved.ready_ns, reserved.tat)),
                        Err(denied) => Err(denied.into()),
                    }
                }
            })
        })
    }

    /// Takes as many whole tokens as are there, at most `n` (any `n`: at most the capacity is
    /// ever there), in one compare-and-swap. `n = 0` is a query.
    ///
    /// # Errors
    ///
    /// [`Denied`] for one token when no whole token is there (nothing is taken).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
    /// assert_eq!(bucket.take_up_to(u64::MAX)?.taken(), 5);
    /// assert!(bucket.take_up_to(1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_up_to(&self, n: u64) -> Result<Partial, Denied> {
        self.take_up_to_at(n, self.clock.now())
    }

    /// [`TokenBucket::take_up_to`] as of `now`.
    ///
    /// # Errors
    ///
    /// As [`TokenBucket::take_up_to`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(4)?.with_initial(0)?, ManualClock::new());
    /// assert_eq!(bucket.take_up_to_at(3, Nanos::new(500_000_000))?.taken(), 2);
    /// assert_eq!(bucket.take_up_to_at(0, Nanos::new(500_000_000))?.taken(), 0); // a query
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_up_to_at(&self, n: u64, now: Nanos) -> Result<Partial, Denied> {
        self.decide(|b| {
            let t = b.policy.time(now);
            if n == 0 {
                return Ok(Ok(Partial::new(
                    0,
                    b.policy.query(cas::read_live(&b.state)?, t),
                )));
            }
            Ok(
                cas::update_live(&b.state, |w| b.policy.take_partial(w, t, n))?
                    .map(|(taken, admitted)| Partial::new(taken, admitted)),
            )
        })
    }
}

impl<C: Clock> Reservation<'_, TokenBucket<C>> {
    /// Gives the reservation's tokens back now, less those taken after it; answers how many went
    /// back (see [`Reservation::cancel_at`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// let r = bucket.reserve_n(3, Duration::ZERO)?;
    /// assert_eq!(r.cancel(), 3);
    /// assert_eq!(bucket.remaining(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(self) -> u64 {
        let now = self.limiter.clock.now();
        self.cancel_at(now)
    }

    /// Gives the reservation's tokens back as of `now`: its `n` less the tokens taken after it
    /// (`x/time/rate`'s rule: later admissions and reservations queued behind its debt), never
    /// negative and never above the capacity; nothing at a reading after [`Reservation::ready_at`]
    /// (the tokens are the caller's by then: use [`TokenBucket::refund`]). Answers how many went
    /// back, a token that only partly fit below the capacity counted as one.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?.with_initial(0)?, ManualClock::new());
    /// let t = Nanos::new(0);
    /// let first = bucket.reserve_n_at(4, Duration::from_secs(1), t)?; // ready at 400 ms
    /// let second = bucket.reserve_n_at(1, Duration::from_secs(1), t)?; // queued behind it
    /// assert_eq!(first.cancel_at(t), 3); // the token reserved after it stays taken
    /// assert_eq!(second.ready_at(), Nanos::new(500_000_000)); // its promise still holds
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel_at(self, now: Nanos) -> u64 {
        let Parts::Word { tat, generation } = self.parts else {
            return 0;
        };
        if self.passed(now) {
            return 0;
        }
        self.limiter.decide(|b| {
            if b.generation != generation {
                // The quota changed since: the word is another policy's, and what the old one
                // had left was carried over already.
                return Ok(0);
            }
            let t = b.policy.time(now);
            Ok(
                cas::update_live(&b.state, |w| b.policy.cancel(w, t, self.tokens, tat))?
                    .unwrap_or(0),
            )
        })
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::reservation::MaxWaitError;

    #[test]
    fn n_zero_is_a_query_that_writes_nothing() {
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(Quota::per_second(4).unwrap(), clock);
        let before = cas::read(&bucket.block().state);
        assert_eq!(bucket.try_acquire_n(0).unwrap().remaining(), 4);
        assert_eq!(cas::read(&bucket.block().state), before);
        bucket.try_acquire_n(4).unwrap();
        // Even an empty bucket answers a zero request.
        assert_eq!(bucket.try_acquire_n(0).unwrap().remaining(), 0);
    }

    const SEC: u64 = 1_000_000_000;

    fn bucket(quota: Quota) -> TokenBucket<ManualClock> {
        TokenBucket::with_clock(quota, ManualClock::new())
    }

    #[test]
    fn a_reservation_with_no_wait_answers_as_an_admission_does() {
        let quota = Quota::per_second(10).unwrap().with_capacity(4).unwrap();
        let (a, b) = (bucket(quota), bucket(quota));
        // The same history on both; every answer of one equals the other's.
        for (i, n) in [1u64, 3, 4, 2, 0, 5, 1, 1, 4].into_iter().enumerate() {
            let at = Nanos::new(i as u64 * SEC / 20);
            let admitted = a.try_acquire_n_at(n, at);
            let reserved = b.reserve_n_at(n, Duration::ZERO, at);
            match (admitted, reserved) {
                (Ok(_), Ok(r)) => {
                    assert_eq!(r.delay(), Duration::ZERO);
                    assert_eq!(r.ready_at(), at);
                    assert_eq!(r.tokens(), n);
                }
                (Err(crate::AcquireError::Denied(d)), Err(ReserveError::Denied(e))) => {
                    assert_eq!(d, e)
                }
                (
                    Err(crate::AcquireError::InsufficientCapacity(d)),
                    Err(ReserveError::InsufficientCapacity(e)),
                ) => assert_eq!(d, e),
                (x, y) => panic!("{n} at {at:?}: {x:?} against {y:?}"),
            }
            assert_eq!(cas::read(&a.block().state), cas::read(&b.block().state));
        }
    }

    #[test]
    fn a_denied_reservation_says_when_the_same_reservation_would_fit_and_writes_nothing() {
        let b = bucket(Quota::per_second(10).unwrap());
        let t = Nanos::new(0);
        b.try_acquire_n_at(10, t).unwrap();
        let before = cas::read(&b.block().state);
        let writes = cas::writes::on_this_thread();
        let Err(ReserveError::Denied(d)) = b.reserve_n_at(5, Duration::from_millis(200), t) else {
            panic!("a wait of 500 ms is beyond 200 ms")
        };
        assert_eq!(cas::writes::on_this_thread(), writes);
        assert_eq!(cas::read(&b.block().state), before);
        assert_eq!(d.retry_after(), Duration::from_millis(300));
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after(), Duration::from_secs(1));
        // Exactly then, the same reservation fits, with a delay of exactly max_wait.
        let early = Nanos::new(d.retry_at().as_u64() - 1);
        assert!(b
            .reserve_n_at(5, Duration::from_millis(200), early)
            .is_err());
        let r = b
            .reserve_n_at(5, Duration::from_millis(200), d.retry_at())
            .unwrap();
        assert_eq!(r.delay(), Duration::from_millis(200));
        assert_eq!(r.ready_at(), Nanos::new(SEC / 2));
    }

    #[test]
    fn max_wait_has_a_range_and_its_extremes_never_overflow() {
        use crate::reservation::MAX_WAIT;
        let b = bucket(Quota::per_second(1).unwrap());
        for bad in [MAX_WAIT + Duration::from_nanos(1), Duration::MAX] {
            let err = b.reserve_n(1, bad).unwrap_err();
            assert_eq!(
                err,
                ReserveError::MaxWait(MaxWaitError { requested: bad }),
                "{bad:?}"
            );
            assert!(err.to_string().starts_with(
                "max_wait must be between 0 and 2305843009213693952 ns (about 73 years), got"
            ));
        }
        // The widest policy (one token per nanosecond, a burst window of 2^62 ns), the latest
        // reading, the longest wait: reserve until refused, then every other operation.
        let quota = Quota::per_second(1_000_000_000)
            .unwrap()
            .with_capacity(1 << 62)
            .unwrap();
        for start in [0, u64::MAX] {
            let b = TokenBucket::with_clock(quota, ManualClock::starting_at(Nanos::new(start)));
            // The burst at once, then 2^61 more into debt; then nothing more fits.
            let burst = b.reserve_n(1 << 62, MAX_WAIT).unwrap();
            assert_eq!(burst.delay(), Duration::ZERO);
            let mut reserved = vec![b.reserve_n(1 << 61, MAX_WAIT).unwrap()];
            assert_eq!(reserved[0].delay(), MAX_WAIT);
            let word = cas::read(&b.block().state);
            assert!(word < 3 << 62, "{word}");
            assert!(b.try_acquire_n(1 << 62).is_err());
            assert!(b.take_up_to(u64::MAX).is_err());
            assert_eq!(b.remaining(), 0);
            assert!(b.reserve_n(1 << 62, Duration::ZERO).is_err());
            let d = b.reserve_n(1, MAX_WAIT).unwrap_err();
            assert_eq!(d.denied().unwrap().retry_after(), Duration::from_nanos(1));
            b.refund(u64::MAX); // a capacity's worth: the debt goes, half the burst comes back
            assert_eq!(b.remaining(), 1 << 61);
            let last = reserved.pop().unwrap();
            assert_eq!(last.cancel(), 1 << 61);
            assert_eq!(burst.cancel(), 0); // its time has passed (a refund is the way)
        }
    }

    #[test]
    fn cancel_gives_back_what_no_later_request_depends_on() {
        let b = bucket(Quota::per_second(10).unwrap());
        let t = Nanos::new(0);
        let wait = Duration::from_secs(5);
        // Taken at once, cancelled at the same reading: all of it back.
        let r = b.reserve_n_at(6, wait, t).unwrap();
        assert_eq!(r.cancel_at(t), 6);
        assert_eq!(b.remaining_at(t), 10);
        // Into debt, then a later admission and a later reservation: they keep theirs.
        let whole = b.reserve_n_at(10, wait, t).unwrap();
        let debt = b.reserve_n_at(5, wait, t).unwrap();
        let later = b.reserve_n_at(2, wait, t).unwrap();
        assert_eq!(later.ready_at(), Nanos::new(700_000_000));
        assert_eq!(debt.cancel_at(t), 3);
        // Four tokens of debt are left: `later`'s two and the two of `debt`'s it queued behind.
        assert!(b.peek_n_at(1, Nanos::new(499_999_999)).is_err());
        assert!(b.peek_n_at(1, Nanos::new(500_000_000)).is_ok());
        // A reservation whose time has passed gives back nothing; one reading before, it would.
        assert_eq!(later.cancel_at(Nanos::new(700_000_001)), 0);
        // Nothing comes back above the capacity, and the count says so.
        let r = b.reserve_n_at(1, wait, t).unwrap();
        b.refund_at(u64::MAX, t); // a capacity's worth: the 5 tokens of debt, and 5 more
        b.refund_at(u64::MAX, t); // full
        assert_eq!(r.cancel_at(t), 0);
        assert_eq!(whole.cancel_at(t), 0);
        assert_eq!(b.remaining_at(t), 10);
        // A query reserves nothing and gives back nothing.
        let q = b.reserve_n_at(0, wait, t).unwrap();
        assert_eq!((q.tokens(), q.delay()), (0, Duration::ZERO));
        assert_eq!(q.cancel_at(t), 0);
    }

    #[test]
    fn take_up_to_takes_what_is_there_in_one_write_and_denials_write_nothing() {
        let b = bucket(Quota::per_second(10).unwrap().with_initial(3).unwrap());
        let t = Nanos::new(50_000_000); // 3.5 tokens
        let writes = cas::writes::on_this_thread();
        let p = b.take_up_to_at(u64::MAX, t).unwrap();
        assert_eq!(cas::writes::on_this_thread(), writes + 1);
        assert_eq!((p.taken(), p.remaining()), (3, 0));
        assert_eq!(p.admitted(), b.try_acquire_n_at(0, t).unwrap());
        let d = b.take_up_to_at(2, t).unwrap_err();
        assert_eq!(cas::writes::on_this_thread(), writes + 1);
        assert_eq!(d.retry_after(), Duration::from_millis(50));
        assert_eq!(d, b.try_acquire_at(t).unwrap_err());
        assert_eq!(b.take_up_to_at(0, t).unwrap().taken(), 0);
        assert_eq!(b.take_up_to_at(5, d.retry_at()).unwrap().taken(), 1);
    }

    /// Reservations, cancels and acquisitions racing on real threads at a frozen clock: the word
    /// accounts for every token (its debt beyond the reading is exactly what was taken less what
    /// came back), and no cancel gives back more than its reservation took.
    #[test]
    fn stress_reservations_cancels_and_admissions_conserve_tokens() {
        use std::sync::Arc;

        let bucket = Arc::new(bucket(Quota::per_second(50).unwrap()));
        let t = Nanos::new(0);
        let handles: Vec<_> = (0..4u64)
            .map(|i| {
                let bucket = Arc::clone(&bucket);
                std::thread::spawn(move || {
                    let (mut taken, mut given) = (0u64, 0u64);
                    for round in 0..20_000u64 {
                        let n = 1 + (round + i) % 4;
                        match (round + i) % 3 {
                            0 => {
                                if bucket.try_acquire_n_at(n, t).is_ok() {
                                    taken += n;
                                }
                            }
                            1 => {
                                if bucket
                                    .take_up_to_at(n, t)
                                    .map(|p| taken += p.taken())
                                    .is_err()
                                {
                                    // Nothing there: the others' reservations hold the debt.
                                }
                            }
                            _ => {
                                if let Ok(r) = bucket.reserve_n_at(n, Duration::from_secs(1), t) {
                                    taken += n;
                                    if round % 2 == 0 {
                                        let back = r.cancel_at(t);
                                        assert!(back <= n);
                                        given += back;
                                    }
                                }
                            }
                        }
                    }
                    (taken, given)
                })
            })
            .collect();
        let (mut taken, mut given) = (0, 0);
        for h in handles {
            let (a, b) = h.join().unwrap();
            taken += a;
            given += b;
        }
        let now = bucket.try_acquire_n_at(0, t).unwrap();
        let interval = SEC / 50;
        // Full at the start: what is missing, debt included, is what was taken less given back.
        let missing = u128::from(taken - given) * u128::from(interval);
        assert_eq!(now.reset_after().as_nanos(), missing);
        // At most the burst and a second of debt were ever out at once.
        assert!(taken - given <= 50 + 50);
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

/// `benches/instructions.rs`'s window onto the quota pointer's cost: one token bucket's block,
/// decided on directly (the design before quotas could change), through the crate's epoch (what
/// `Direct` does) or through any other pointer the bench holds it behind (`arc-swap`'s, measured
/// beside). Not an API: hidden, and free to change.
#[cfg(not(tollgate_loom))]
#[doc(hidden)]
pub mod __bench_change {
    use crossbeam_utils::CachePadded;

    use crate::algorithm::sealed::Contract;
    use crate::change::Current;
    use crate::clock::Nanos;
    use crate::quota::Quota;
    use crate::TokenBucketAlgorithm;

    /// A token bucket's block: its policy and state, decided on in place.
    pub struct BenchBlock(crate::direct::Block<TokenBucketAlgorithm>);

    impl std::fmt::Debug for BenchBlock {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            self.0.fmt(f)
        }
    }

    impl BenchBlock {
        /// A full bucket for `quota` as of `now`.
        pub fn new(quota: Quota, now: Nanos) -> BenchBlock {
            // Every valid quota fits the bucket (`Gcra::new` is infallible).
            let mut policy = crate::gcra::Gcra::new(&quota);
            TokenBucketAlgorithm::begin(&mut policy, now);
            let state = TokenBucketAlgorithm::initial(&policy, &quota, now);
            BenchBlock(crate::direct::Block {
                state: CachePadded::new(state),
                policy,
                quota,
                generation: 0,
            })
        }

        /// One admission at `now` on this block, as `Direct::try_acquire_at` decides it.
        #[inline]
        pub fn try_acquire_at(&self, now: Nanos) -> bool {
            matches!(
                TokenBucketAlgorithm::acquire_one(&self.0.policy, &self.0.state, now),
                Ok(Ok(_))
            )
        }
    }

    /// A block behind the crate's quota pointer, read as `Direct` reads it.
    #[derive(Debug)]
    pub struct EpochBlock(Current<BenchBlock>);

    impl EpochBlock {
        /// `block` behind the pointer.
        pub fn new(block: BenchBlock) -> EpochBlock {
            EpochBlock(Current::new(block))
        }

        /// One admission at `now`, pinned.
        #[inline]
        pub fn try_acquire_at(&self, now: Nanos) -> bool {
            match self.0.pinned() {
                Some(block) => block.try_acquire_at(now),
                None => self.0.read_locked().try_acquire_at(now),
            }
        }
    }
}
