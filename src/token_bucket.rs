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

use std::fmt;

use crossbeam_utils::CachePadded;

use crate::cas::{self, Step};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::outcome::{AcquireError, Admitted, Denied, InsufficientCapacity, Span};
use crate::quota::Quota;
use crate::sync::AtomicU64;

/// The token bucket's constants, derived once from a [`Quota`]. Times are in units of `2^shift` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Policy {
    shift: u32,
    /// Units per token (the interval `1/R`, rounded up), at least 1.
    interval: u64,
    /// The burst window `capacity × interval`, at most 2^62.
    burst: u64,
    capacity: u64,
}

/// A clock reading in the policy's units: `ns = (units << shift) + sub`, after clamping to
/// [`Nanos::MAX_USABLE`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Time {
    /// The reading rounded down to a whole unit: what tokens are counted at.
    units: u64,
    /// The reading rounded up to a whole unit: where a refill may start, so that no refill is ever
    /// credited for time before the reading. Equal to `units` when units are nanoseconds.
    units_up: u64,
    sub: u64,
    ns: u64,
}

/// The packed state: the theoretical arrival time, in the policy's units since the clock's epoch.
///
/// # State table
///
/// With `now` the reading in units, `I` the interval and `B = C × I` the burst window:
///
/// | word `w` | tokens at `now` | reached by |
/// | --- | --- | --- |
/// | `w <= now` | `C` (full) | construction with a full bucket; time passing |
/// | `now < w <= now + B` | `(now + B - w) / I`, fraction carried | an admission; a refund |
/// | `w > now + B` | 0 | only a reading earlier than one already applied |
///
/// Transitions: an admission of `n` writes `max(w, now) + n × I`, and only when that is `<= now + B`;
/// a refund of `n` writes `max(w - n × I, now)`, and only when `w > now`; denials, peeks and queries
/// never write. With units coarser than 1 ns, a full bucket's admission writes
/// `now_up + n × I` instead, where `now_up` is the reading rounded up to a whole unit: the refill
/// restarts no earlier than the reading. The word never exceeds `2^62 + 2^62 + 2^62 + 1 < 2^64`:
/// readings are clamped to 2^62, admissions leave `w <= now + B + 1` with `B <= 2^62`, and one more
/// cost of at most `B` is added before the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tat(u64);

impl Tat {
    /// Capacity at `now`, in units (`tokens × I`), clamped to `[0, B]`.
    #[inline]
    fn level(self, now: u64, burst: u64) -> u64 {
        burst.saturating_sub(self.0.saturating_sub(now))
    }

    /// Units until full at `now` (0 when full).
    #[inline]
    fn until_full(self, now: u64) -> u64 {
        self.0.saturating_sub(now)
    }
}

impl Policy {
    pub(crate) fn new(quota: &Quota) -> Policy {
        let (shift, interval) = quota.time_unit();
        Policy {
            shift,
            interval,
            // Validation bounds this product by 2^62 (see `Quota::time_unit`).
            burst: quota.capacity().saturating_mul(interval),
            capacity: quota.capacity(),
        }
    }

    #[inline]
    pub(crate) fn time(&self, now: Nanos) -> Time {
        let ns = now.clamped();
        let units = ns >> self.shift;
        let sub = ns & ((1 << self.shift) - 1);
        Time {
            units,
            units_up: units + u64::from(sub != 0),
            sub,
            ns,
        }
    }

    #[inline]
    fn span(&self, units: u64, at: Time) -> Span {
        Span {
            units,
            shift: self.shift,
            sub: at.sub,
        }
    }

    /// The word of a bucket holding `tokens` (at most the capacity) at `now`.
    pub(crate) fn initial_word(&self, tokens: u64, now: Time) -> u64 {
        match self.capacity.saturating_sub(tokens) {
            0 => now.units,
            // The refill of the missing tokens starts no earlier than the reading.
            missing => now.units_up + missing * self.interval,
        }
    }

    /// Takes `n` tokens (`1 <= n <= capacity`) from the bucket in `word`, or says when it could.
    #[inline]
    pub(crate) fn take(&self, word: u64, now: Time, n: u64) -> Step<Admitted, Denied> {
        let tat = Tat(word);
        // n <= capacity, so cost <= burst <= 2^62.
        let cost = n * self.interval;
        // Admit when the tokens counted at the reading (rounded down) cover the cost.
        let gap = tat.0.max(now.units) + cost - now.units;
        if gap <= self.burst {
            // A full bucket's refill restarts at the reading rounded up, never before it: with
            // coarse units, rounding down here would credit up to one unit of refill too early.
            let new = tat.0.max(now.units_up) + cost;
            Step::Write(
                new,
                Admitted::new(self.burst - gap, self.interval, self.span(gap, now)),
            )
        } else {
            Step::Refuse(self.denied(tat, now, gap - self.burst))
        }
    }

    #[cold]
    fn denied(&self, tat: Tat, now: Time, wait: u64) -> Denied {
        Denied::new(
            now.ns,
            self.span(wait, now),
            tat.level(now.units, self.burst),
            self.interval,
            self.span(tat.until_full(now.units), now),
        )
    }

    /// The answer to a request for nothing: what the bucket holds at `now`.
    pub(crate) fn query(&self, word: u64, now: Time) -> Admitted {
        let tat = Tat(word);
        Admitted::new(
            tat.level(now.units, self.burst),
            self.interval,
            self.span(tat.until_full(now.units), now),
        )
    }

    /// Checks `n` against the capacity, answering `n = 0` as a query.
    #[inline]
    pub(crate) fn check_n(&self, n: u64) -> Result<bool, InsufficientCapacity> {
        if n > self.capacity {
            Err(InsufficientCapacity {
                requested: n,
                capacity: self.capacity,
            })
        } else {
            Ok(n != 0)
        }
    }

    /// Gives back up to `n` tokens, never above the capacity.
    pub(crate) fn refund(&self, word: u64, now: Time, n: u64) -> Step<(), ()> {
        let tat = Tat(word);
        if n == 0 || tat.0 <= now.units {
            return Step::Keep(());
        }
        let back = n.min(self.capacity) * self.interval;
        Step::Write(tat.0.saturating_sub(back).max(now.units), ())
    }

    /// Whole tokens at `now`.
    pub(crate) fn remaining(&self, word: u64, now: Time) -> u64 {
        let level = Tat(word).level(now.units, self.burst);
        // An empty bucket (the case on every denial) needs no division.
        if level < self.interval {
            0
        } else {
            level / self.interval
        }
    }

    /// The capacity, in tokens.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Takes as many whole tokens as are there, up to `n` (`1 <= n`), and answers how many it took.
    /// Takes nothing, and writes nothing, from a bucket without a whole token.
    pub(crate) fn take_up_to(&self, word: u64, now: Time, n: u64) -> Step<u64, ()> {
        let k = self.remaining(word, now).min(n);
        if k == 0 {
            return Step::Keep(0);
        }
        match self.take(word, now, k) {
            Step::Write(new, _) => Step::Write(new, k),
            // `k` whole tokens are there, so `take` admits; answer "none" rather than trust that.
            Step::Keep(_) | Step::Refuse(_) => Step::Keep(0),
        }
    }

    /// Gives back up to `n` tokens, as many as fit below the capacity (the last one may only part
    /// fit), and answers how many it took back.
    pub(crate) fn refund_up_to(&self, word: u64, now: Time, n: u64) -> Step<u64, ()> {
        let missing = Tat(word).until_full(now.units);
        if n == 0 || missing == 0 {
            return Step::Keep(0);
        }
        let k = missing.div_ceil(self.interval).min(n);
        match self.refund(word, now, k) {
            Step::Write(new, ()) => Step::Write(new, k),
            Step::Keep(()) | Step::Refuse(()) => Step::Keep(0),
        }
    }

    /// Nanoseconds from `now` until `n` tokens (`n <= capacity`) are there, 0 if they are now.
    pub(crate) fn wait_nanos(&self, word: u64, now: Time, n: u64) -> u128 {
        let cost = n * self.interval;
        let gap = word.max(now.units) + cost - now.units;
        let wait = gap.saturating_sub(self.burst);
        self.span(wait, now).nanos()
    }

    /// Nanoseconds from `now` until the bucket is full.
    pub(crate) fn full_in_nanos(&self, word: u64, now: Time) -> u128 {
        self.span(Tat(word).until_full(now.units), now).nanos()
    }
}

/// A lock-free token bucket: bursts up to the quota's capacity, then the quota's steady rate.
///
/// One `AtomicU64` holds the whole state, updated by one compare-and-swap per admission; a denial only
/// reads. Generic over its [`Clock`]: [`MonotonicClock`] by default, [`CoarseClock`](crate::CoarseClock)
/// for the cheapest reads, [`ManualClock`](crate::ManualClock) for tests. See the
/// [module docs](self) for the algorithm and its guarantees.
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
pub struct TokenBucket<C = MonotonicClock> {
    /// The theoretical arrival time; see [`Tat`] for its state table. Padded to its own cache line,
    /// so threads admitting here do not slow down neighbouring data, nor it them.
    word: CachePadded<AtomicU64>,
    policy: Policy,
    quota: Quota,
    clock: C,
}

impl TokenBucket<MonotonicClock> {
    /// A bucket for `quota` on the default clock, filled as the quota says (full by default).
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_minute(60)?);
    /// assert_eq!(bucket.remaining(), 60);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> TokenBucket<MonotonicClock> {
        TokenBucket::with_clock(quota, MonotonicClock::new())
    }
}

impl<C: Clock> TokenBucket<C> {
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
    pub fn with_clock(quota: Quota, clock: C) -> TokenBucket<C> {
        let policy = Policy::new(&quota);
        let now = policy.time(clock.now());
        TokenBucket {
            word: CachePadded::new(AtomicU64::new(policy.initial_word(quota.initial(), now))),
            policy,
            quota,
            clock,
        }
    }

    /// Takes one token now, or says how long until one is there.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(1)?);
    /// assert!(bucket.try_acquire().is_ok());
    /// assert!(bucket.try_acquire().is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire(&self) -> Result<Admitted, Denied> {
        self.try_acquire_at(self.clock.now())
    }

    /// Takes one token as of `now`, a reading of this bucket's clock the caller already holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert!(bucket.try_acquire_at(Nanos::new(0)).is_ok());
    /// assert!(bucket.try_acquire_at(Nanos::new(999_999_999)).is_err());
    /// assert!(bucket.try_acquire_at(Nanos::new(1_000_000_000)).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        let now = self.policy.time(now);
        // The capacity is at least 1, so one token is always a valid request.
        cas::update(&self.word, |w| self.policy.take(w, now, 1))
    }

    /// Takes `n` tokens now, all or none. `n = 0` is a query that always succeeds.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Denied`] when fewer than `n` tokens are there now;
    /// [`AcquireError::InsufficientCapacity`] when `n` exceeds the capacity and can never succeed.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(10)?);
    /// assert_eq!(bucket.try_acquire_n(4)?.remaining(), 6);
    /// assert!(bucket.try_acquire_n(7).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.try_acquire_n_at(n, self.clock.now())
    }

    /// Takes `n` tokens as of `now`, all or none. `n = 0` is a query that always succeeds.
    ///
    /// # Errors
    ///
    /// As [`TokenBucket::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// assert!(bucket.try_acquire_n_at(10, Nanos::new(0)).is_ok());
    /// let denied = bucket.try_acquire_n_at(5, Nanos::new(0)).unwrap_err();
    /// assert_eq!(denied.denied().unwrap().retry_after().as_millis(), 500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        let now = self.policy.time(now);
        if self.policy.check_n(n)? {
            cas::update(&self.word, |w| self.policy.take(w, now, n)).map_err(AcquireError::Denied)
        } else {
            Ok(self.policy.query(cas::read(&self.word), now))
        }
    }

    /// Would `n` tokens be admitted now? Consumes nothing and writes nothing.
    ///
    /// # Errors
    ///
    /// As [`TokenBucket::try_acquire_n`]: the denial it would get.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(3)?);
    /// assert!(bucket.peek_n(3).is_ok());
    /// assert!(bucket.peek_n(3).is_ok()); // still: peeking takes nothing
    /// assert!(bucket.peek_n(4).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn peek_n(&self, n: u64) -> Result<Admitted, AcquireError> {
        self.peek_n_at(n, self.clock.now())
    }

    /// Would `n` tokens be admitted as of `now`? Consumes nothing and writes nothing.
    ///
    /// # Errors
    ///
    /// As [`TokenBucket::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?.with_initial(0)?, ManualClock::new());
    /// assert!(bucket.peek_n_at(1, Nanos::new(999_999_999)).is_err());
    /// assert!(bucket.peek_n_at(1, Nanos::new(1_000_000_000)).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        let now = self.policy.time(now);
        let word = cas::read(&self.word);
        if !self.policy.check_n(n)? {
            return Ok(self.policy.query(word, now));
        }
        match self.policy.take(word, now, n) {
            Step::Write(_, admitted) | Step::Keep(admitted) => Ok(admitted),
            Step::Refuse(denied) => Err(AcquireError::Denied(denied)),
        }
    }

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
        let _ = cas::update(&self.word, |w| self.policy.refund(w, now, n));
    }

    /// Whole tokens in the bucket now.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(8)?);
    /// assert_eq!(bucket.remaining(), 8);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn remaining(&self) -> u64 {
        self.remaining_at(self.clock.now())
    }

    /// Whole tokens in the bucket as of `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?.with_initial(0)?, ManualClock::new());
    /// assert_eq!(bucket.remaining_at(Nanos::new(500_000_000)), 1);
    /// assert_eq!(bucket.remaining_at(Nanos::new(u64::MAX)), 2); // a jump of centuries: just full
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn remaining_at(&self, now: Nanos) -> u64 {
        self.policy
            .remaining(cas::read(&self.word), self.policy.time(now))
    }

    /// The quota this bucket enforces.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(3)?;
    /// assert_eq!(tollgate::TokenBucket::new(q).quota(), &q);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> &Quota {
        &self.quota
    }

    /// The clock this bucket reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(3)?, ManualClock::starting_at(Nanos::new(4)));
    /// assert_eq!(bucket.clock().now(), Nanos::new(4));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl<C> fmt::Debug for TokenBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenBucket")
            .field("quota", &self.quota)
            .field("tat", &cas::read(&self.word))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const SEC: u64 = 1_000_000_000;

    fn policy(quota: Quota) -> Policy {
        Policy::new(&quota)
    }

    fn at(p: &Policy, ns: u64) -> Time {
        p.time(Nanos::new(ns))
    }

    /// 10 per second, capacity 10: interval 100 ms, burst window 1 s.
    fn ten_per_second() -> Policy {
        policy(Quota::per_second(10).unwrap())
    }

    #[test]
    fn full_bucket_admits_and_moves_tat_by_one_interval() {
        let p = ten_per_second();
        match p.take(0, at(&p, 5 * SEC), 1) {
            Step::Write(new, ok) => {
                assert_eq!(new, 5 * SEC + SEC / 10);
                assert_eq!(ok.remaining(), 9);
                assert_eq!(ok.reset_after().as_nanos(), u128::from(SEC / 10));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn empty_bucket_denies_with_exact_retry_and_writes_nothing() {
        let p = ten_per_second();
        // tat = now + burst: empty.
        let now = 3 * SEC;
        match p.take(now + SEC, at(&p, now), 1) {
            Step::Refuse(d) => {
                assert_eq!(d.retry_after().as_nanos(), u128::from(SEC / 10));
                assert_eq!(d.retry_at(), Nanos::new(now + SEC / 10));
                assert_eq!(d.remaining(), 0);
                assert_eq!(d.reset_after().as_nanos(), u128::from(SEC));
            }
            other => panic!("{other:?}"),
        }
        // n tokens wait n intervals, minus the fraction already refilled.
        match p.take(now + SEC - 30, at(&p, now), 3) {
            Step::Refuse(d) => {
                assert_eq!(d.retry_after().as_nanos(), u128::from(3 * SEC / 10 - 30))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fractional_tokens_are_carried() {
        let p = ten_per_second();
        let now = 10 * SEC;
        // 0.5 token in the bucket: denied now, admitted 50 ms later, then empty again.
        let word = now + SEC - SEC / 20;
        assert!(matches!(p.take(word, at(&p, now), 1), Step::Refuse(_)));
        match p.take(word, at(&p, now + SEC / 20), 1) {
            Step::Write(new, ok) => {
                assert_eq!(ok.remaining(), 0);
                assert_eq!(new, now + SEC / 20 + SEC);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_idle_bucket_of_any_age_reads_full_and_no_fuller() {
        let p = ten_per_second();
        for now in [SEC, 1 << 40, 1 << 62, u64::MAX] {
            assert_eq!(p.remaining(0, at(&p, now)), 10);
            match p.take(0, at(&p, now), 10) {
                Step::Write(_, ok) => assert_eq!(ok.remaining(), 0),
                other => panic!("{other:?}"),
            }
            assert!(matches!(p.take(0, at(&p, now), 11), Step::Refuse(_)));
        }
    }

    #[test]
    fn an_earlier_reading_sees_fewer_tokens_never_more() {
        let p = ten_per_second();
        // Full at t = 5 s after an admission at 5 s left 9 tokens.
        let word = 5 * SEC + SEC / 10;
        let later = p.remaining(word, at(&p, 5 * SEC));
        for earlier in [0, SEC, 4 * SEC, 5 * SEC - 1] {
            assert!(p.remaining(word, at(&p, earlier)) <= later);
        }
        assert_eq!(p.remaining(word, at(&p, 4 * SEC)), 0);
        // An admission with an earlier reading is judged at that reading and only moves tat forward.
        match p.take(word, at(&p, 5 * SEC - SEC / 2), 1) {
            Step::Write(new, ok) => {
                assert!(new > word);
                assert_eq!(ok.remaining(), 3);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refund_gives_back_and_never_overfills() {
        let p = ten_per_second();
        let now = 2 * SEC;
        let word = now + SEC; // empty
        match p.refund(word, at(&p, now), 3) {
            Step::Write(new, ()) => assert_eq!(p.remaining(new, at(&p, now)), 3),
            other => panic!("{other:?}"),
        }
        match p.refund(word, at(&p, now), u64::MAX) {
            Step::Write(new, ()) => {
                assert_eq!(new, now);
                assert_eq!(p.remaining(new, at(&p, now)), 10);
            }
            other => panic!("{other:?}"),
        }
        // A full bucket, or a refund of nothing, writes nothing.
        assert!(matches!(p.refund(now, at(&p, now), 5), Step::Keep(())));
        assert!(matches!(p.refund(word, at(&p, now), 0), Step::Keep(())));
    }

    #[test]
    fn check_n_separates_queries_requests_and_impossible_requests() {
        let p = ten_per_second();
        assert_eq!(p.check_n(0), Ok(false));
        assert_eq!(p.check_n(10), Ok(true));
        assert_eq!(
            p.check_n(11),
            Err(InsufficientCapacity {
                requested: 11,
                capacity: 10
            })
        );
        assert!(p.check_n(u64::MAX).is_err());
    }

    #[test]
    fn coarse_units_for_huge_burst_windows_keep_retry_times_exact() {
        // 1 per day with a capacity of 2^32: an 11-million-year burst window.
        let q = Quota::per_day(1)
            .unwrap()
            .with_capacity(1 << 32)
            .unwrap()
            .with_initial(0)
            .unwrap();
        let p = policy(q);
        assert!(p.shift > 0);
        let start = at(&p, 12_345);
        let word = p.initial_word(0, start);
        let day = 86_400 * SEC;
        match p.take(word, at(&p, 12_345 + 1000), 1) {
            Step::Refuse(d) => {
                let retry = d.retry_at().as_u64();
                // Never earlier than one day after the start; within one unit of it.
                assert!(retry >= 12_345 + day, "{retry}");
                assert!(retry - (12_345 + day) < (1 << p.shift) + (day >> 10));
                assert!(matches!(
                    p.take(word, at(&p, retry - 1), 1),
                    Step::Refuse(_)
                ));
                assert!(matches!(p.take(word, at(&p, retry), 1), Step::Write(..)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_word_cannot_overflow_at_the_extremes() {
        let q = Quota::per_second(1_000_000_000)
            .unwrap()
            .with_capacity(1 << 62)
            .unwrap();
        let p = policy(q);
        let now = at(&p, u64::MAX);
        // Worst case: a word already a full burst window ahead of the latest reading.
        let word = now.units + p.burst;
        assert!(matches!(p.take(word, now, 1 << 62), Step::Refuse(_)));
        match p.take(0, now, 1 << 62) {
            Step::Write(new, _) => assert_eq!(new, (1 << 62) + (1 << 62)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn n_zero_is_a_query_that_writes_nothing() {
        let clock = ManualClock::new();
        let bucket = TokenBucket::with_clock(Quota::per_second(4).unwrap(), clock);
        let before = cas::read(&bucket.word);
        assert_eq!(bucket.try_acquire_n(0).unwrap().remaining(), 4);
        assert_eq!(cas::read(&bucket.word), before);
        bucket.try_acquire_n(4).unwrap();
        // Even an empty bucket answers a zero request.
        assert_eq!(bucket.try_acquire_n(0).unwrap().remaining(), 0);
    }

    #[test]
    fn denials_and_peeks_never_write() {
        let bucket = TokenBucket::with_clock(Quota::per_second(2).unwrap(), ManualClock::new());
        bucket.try_acquire_n(2).unwrap();
        let before = cas::read(&bucket.word);
        for _ in 0..100 {
            assert!(bucket.try_acquire().is_err());
            assert!(bucket.peek_n(1).is_err());
            assert!(bucket.try_acquire_n(2).is_err());
            assert!(bucket.try_acquire_n(3).is_err());
        }
        assert_eq!(cas::read(&bucket.word), before);
    }

    /// Real threads on one bucket: admissions never exceed `C + R × t` measured on the bucket's own
    /// clock, and compare-and-swap retries really happened (the work per thread grows until they do).
    #[test]
    fn stress_real_threads_conserve_tokens_and_do_contend() {
        use std::sync::Arc;
        use std::sync::Barrier;

        let threads = 4;
        let mut per_thread = 20_000u64;
        for _attempt in 0..8 {
            let clock = MonotonicClock::new();
            let quota = Quota::per_second(2_000_000)
                .unwrap()
                .with_capacity(1_000)
                .unwrap();
            let start = clock.now();
            let bucket = Arc::new(TokenBucket::with_clock(quota, clock));
            let barrier = Arc::new(Barrier::new(threads));
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    let bucket = Arc::clone(&bucket);
                    let barrier = Arc::clone(&barrier);
                    std::thread::spawn(move || {
                        barrier.wait();
                        let mut admitted = 0u64;
                        for _ in 0..per_thread {
                            if bucket.try_acquire().is_ok() {
                                admitted += 1;
                            }
                        }
                        (admitted, cas::retries::on_this_thread())
                    })
                })
                .collect();
            let (mut admitted, mut retries) = (0, 0);
            for h in handles {
                let (a, r) = h.join().unwrap();
                admitted += a;
                retries += r;
            }
            let elapsed = clock.now().as_u64() - start.as_u64();
            let interval = quota.interval().as_nanos() as u64;
            let bound = quota.capacity() + elapsed / interval;
            assert!(admitted <= bound, "admitted {admitted} > C + R*t = {bound}");
            assert!(admitted > 0);
            if retries > 0 {
                return;
            }
            per_thread *= 2;
        }
        panic!("no compare-and-swap retry observed: the stress test proved nothing");
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
