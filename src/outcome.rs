//! What a limiter answers: [`Admitted`], [`Denied`], [`InsufficientCapacity`] and [`AcquireError`],
//! and, for a request scheduled on a [`LeakyMeter`](crate::leaky::LeakyMeter), [`Scheduled`].
//!
//! Every outcome carries enough for an HTTP response: tokens remaining, the time until the limiter
//! is full again (`reset_after`, for `RateLimit` headers) and, on a denial, `retry_after`, the exact
//! wait after which the same request would be admitted if nothing else happened in between.
//!
//! The figures are computed when asked for, not when the decision is made, so a caller that only
//! needs yes or no pays for no division.
//!
//! A keyed limiter answers with the same outcomes, and refuses with [`KeyedError`] (whose no-room
//! case is [`TooManyKeys`]).
//!
//! # When one more is free: `next_after`
//!
//! [`Admitted::next_after`], [`Denied::next_after`] and [`Scheduled::next_after`] answer the
//! time, from the reading the decision used, until `remaining()` would be one higher if nothing
//! else were taken, and `None` exactly when nothing is taken (`remaining()` is already the most
//! the limiter can show). It is what the IETF `RateLimit` field's `t` parameter reports (rounded
//! up to whole seconds), and it is exact, per algorithm:
//!
//! | algorithm | `next_after` |
//! | --- | --- |
//! | [token bucket](crate::token_bucket) (GCRA) | the next whole token: the level's distance to the next whole interval |
//! | [leaky meter](crate::leaky::meter) | the next request drained from the virtual queue (a whole interval after the last drained) |
//! | [sharded bucket](crate::sharded) | as `remaining()`: the home shard's next token for an admission at home; otherwise (`remaining()` is then the shards' whole tokens, summed) the soonest any shard gains one more whole token |
//! | [fixed window](crate::window::fixed) | the window's end, when all of it comes back; `None` for a window nothing was taken in |
//! | [sliding counter](crate::window::sliding_counter) and [sub-window counter](crate::window::SubWindowCounter) | the soonest the estimate has dropped by enough for one more whole request: the oldest (sub-)window's weight falls continuously, so this can be before it leaves; where it is not, when the next counted (sub-)window starts leaving enough |
//! | [sliding log](crate::window::sliding_log) | when the oldest entry in the window leaves it |
//!
//! For a denied request for one, `next_after` is `retry_after`; for more, it is the earlier wait
//! for the first of them. The keyed limiters answer with the same outcomes for every algorithm
//! and tier, and the Redis backend's scripts work it out as these do (to the microsecond where
//! they count microseconds; under a quota other than the one a key's state was written with,
//! until both quotas have one more). Answers that know no such time say `None`: the Redis
//! backend's fail-open admissions and its leased bucket's local stock (whose denial reports the
//! time until a lease is known to find a token, as its `retry_after` does).
//!
//! With time units coarser than a nanosecond (burst windows over 2^62 ns, see
//! [`Quota`](crate::quota#very-long-burst-windows)), the token bucket and the leaky meter count
//! in whole units, as their `remaining` does, and a full bucket's refill restarts at the reading
//! rounded up to a unit: `next_after` says so, exactly. A wait longer than `3 × 2^62 − 3` ns
//! (438 years; only a sharded bucket's coarse shards have one) is reported as that.
//!
//! # Requests for zero tokens
//!
//! A request for `n = 0` tokens is always admitted, consumes nothing and writes nothing: it is a
//! query that reports `remaining`, `reset_after` and `next_after`, like a peek that cannot fail.
//!
//! # Examples
//!
//! ```
//! use tollgate::{ManualClock, Quota, TokenBucket};
//!
//! let bucket = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
//! bucket.try_acquire_n(5)?;
//! let now = bucket.try_acquire_n(0)?; // a query: never fails, takes nothing
//! assert_eq!(now.remaining(), 0);
//! assert_eq!(now.reset_after().as_secs(), 1);
//! assert_eq!(now.next_after(), Some(std::time::Duration::from_millis(200))); // one token
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::time::Duration;

use crate::clock::Nanos;

/// A span of time in a limiter's units, converted to nanoseconds only when read:
/// `(units << shift) - sub` nanoseconds, at least zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) units: u64,
    pub(crate) shift: u32,
    /// The nanoseconds of the reading below one unit (the bits the unit conversion dropped).
    pub(crate) sub: u64,
}

impl Span {
    /// A span of whole nanoseconds, saturating at `u64::MAX`.
    pub(crate) fn from_nanos(nanos: u128) -> Span {
        Span {
            units: u64::try_from(nanos).unwrap_or(u64::MAX),
            shift: 0,
            sub: 0,
        }
    }

    pub(crate) fn nanos(self) -> u128 {
        (u128::from(self.units) << self.shift).saturating_sub(u128::from(self.sub))
    }

    fn duration(self) -> Duration {
        nanos_to_duration(self.nanos())
    }
}

/// Nanoseconds as a `Duration`, saturating at `Duration::MAX` (spans of very slow, very large
/// buckets can exceed its 584 billion years).
fn nanos_to_duration(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        // The remainder is below 10^9, so it fits a u32.
        Ok(secs) => Duration::new(secs, u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0)),
        Err(_) => Duration::MAX,
    }
}

/// When [`remaining`](Admitted::remaining) next grows, as an outcome holds it: in the frame of the
/// outcome's `reset` span (its time unit, and the nanoseconds of the reading below one unit), so
/// that it shares their rounding, and in one word, so that an outcome grows by eight bytes only.
/// Most decisions store a constant ([`Next::FULL`], [`Next::TOKEN`]) or a figure they computed
/// anyway; the one-word sliding counter stores two counts ([`Next::counter`]) and the division it
/// needs is done only when [`next_after`](Admitted::next_after) is asked for.
///
/// | word | meaning |
/// | --- | --- |
/// | `0` ([`Next::FULL`]) | nothing is taken: `next_after` is `None` |
/// | `1..=EXPLICIT_MAX` | that many units of the frame |
/// | [`Next::TOKEN`], and one more ([`Next::token`]) | the next whole unit of `level`: `unit − level mod unit` units (the GCRA's level grows one unit per unit of time), or one unit later |
/// | `COUNTER` and above | the two-window counter's counts `oldest` and `full` (31 bits each), see [`Next::counter`] |
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next(u64);

impl Next {
    /// Nothing is taken.
    pub(crate) const FULL: Next = Next(0);
    /// The level grows one unit per unit of time, from the outcome's level (the token bucket, the
    /// leaky meter): the next whole `unit` is `unit − level mod unit` units away.
    pub(crate) const TOKEN: Next = Next(Next::COUNTER - 2);
    const TOKEN_0: u64 = Next::COUNTER - 2;
    const TOKEN_1: u64 = Next::COUNTER - 1;
    /// The first word of the counter encoding.
    const COUNTER: u64 = 3 << 62;
    /// The largest span held as a number of units (`3 × 2^62 − 3`); longer ones saturate there.
    const EXPLICIT_MAX: u64 = Next::COUNTER - 3;
    /// Each of the counter's two counts.
    const COUNT_BITS: u32 = 31;

    /// [`Next::TOKEN`], `late` (0 or 1) units later: a GCRA admission whose refill restarts at the
    /// reading rounded up to a whole unit, while its level is counted from the reading rounded
    /// down (only with time units coarser than a nanosecond).
    #[inline]
    pub(crate) fn token(late: u64) -> Next {
        Next(Next::TOKEN.0 + late.min(1))
    }

    /// `units` of the outcome's frame (0 means nothing is taken), saturating at `3 × 2^62 − 3`.
    #[inline]
    pub(crate) fn units(units: u64) -> Next {
        Next(units.min(Next::EXPLICIT_MAX))
    }

    /// Nanoseconds (an outcome whose frame is whole nanoseconds), 0 meaning nothing is taken.
    #[inline]
    pub(crate) fn nanos(nanos: u128) -> Next {
        Next::units(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The one-word sliding counter's admission on a reading in the word's window: `oldest`, the
    /// weighted window's count (its weight falls by `oldest` units of `1 / w` per nanosecond),
    /// and `full`, the current window's count (after the admission), both below 2^31. The
    /// outcome's `unit` is the window `w`, its `level` the room `N × w − used` and its `reset`
    /// `2w − e` ns (`e` the reading's offset in its window); see [`Next::span`]. `None` when a
    /// count does not fit (never, for the counter's words).
    #[inline]
    pub(crate) fn counter(oldest: u64, full: u64) -> Option<Next> {
        let fits = (oldest | full) >> Next::COUNT_BITS == 0;
        fits.then_some(Next(Next::COUNTER | (oldest << Next::COUNT_BITS) | full))
    }

    /// The span from the reading until `level` (in `unit`s) gains one whole `unit`, in the frame
    /// of `reset`; `None` when nothing is taken.
    fn span(self, level: u64, unit: u64, reset: Span) -> Option<Span> {
        let units = match self.0 {
            0 => return None,
            w @ (Next::TOKEN_0..=Next::TOKEN_1) => {
                // `unit` is at least 1 by construction; `checked_rem` keeps a broken invariant
                // panic-free.
                unit - level.checked_rem(unit).unwrap_or(0) + (w - Next::TOKEN_0)
            }
            w if w >= Next::COUNTER => {
                return Some(Span::from_nanos(self.counter_nanos(level, unit, reset)?))
            }
            w => w,
        };
        Some(Span { units, ..reset })
    }

    /// The two-window counter's next whole request, in nanoseconds (its frame): within the
    /// current window the room grows by `oldest` per nanosecond up to `(N − full) × w` at the
    /// window's end; after it, by `full` per nanosecond (the current window becomes the weighted
    /// one). `None` when nothing is taken.
    fn counter_nanos(self, level: u64, w: u64, reset: Span) -> Option<u128> {
        let mask = (1u64 << Next::COUNT_BITS) - 1;
        let payload = self.0 & !Next::COUNTER;
        let (oldest, full) = (
            u128::from(payload >> Next::COUNT_BITS),
            u128::from(payload & mask),
        );
        let (level, w) = (u128::from(level), u128::from(w.max(1)));
        // reset = 2w − e: the nanoseconds left in the current window are w − e.
        let left = u128::from(reset.units).saturating_sub(w);
        // The room must reach the next multiple of w.
        let need = (level / w + 1) * w - level;
        if need <= oldest * left {
            // oldest > 0 here (need >= 1).
            return Some(need.div_ceil(oldest));
        }
        if full == 0 {
            return None;
        }
        // At the window's end the room is a multiple of w, (N − full) × w, and still below the next
        // whole request: one more w, at `full` per nanosecond.
        Some(left + w.div_ceil(full))
    }
}

/// What a limiter holds after a decision and when it fills again: the four figures every outcome
/// ([`Admitted`], [`Denied`], [`Scheduled`]) carries and its `remaining`, `reset_after` and
/// `next_after` read, held once. Built where the decision is described; the figures are worked
/// out only when asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Headroom {
    /// Capacity left, in `unit`s of the limiter's time (or whole requests when `unit` is 1).
    level: u64,
    unit: u64,
    /// From the reading until the limiter is full again (the virtual queue empty).
    reset: Span,
    /// When `remaining` next grows, in `reset`'s frame.
    next: Next,
}

impl Headroom {
    /// `level` in `unit`s (at least 1), full again after `reset`, one more after `next`.
    #[inline]
    pub(crate) fn new(level: u64, unit: u64, reset: Span, next: Next) -> Headroom {
        Headroom {
            level,
            unit,
            reset,
            next,
        }
    }

    /// `level` whole requests, full again after `reset` whole nanoseconds, one more after `next`.
    #[inline]
    pub(crate) fn whole(level: u64, reset: u128, next: Next) -> Headroom {
        Headroom::new(level, 1, Span::from_nanos(reset), next)
    }

    /// Whole tokens (free places) left.
    #[inline]
    fn remaining(self) -> u64 {
        // `unit` is at least 1 by construction; `checked_div` keeps even a broken invariant panic-free.
        self.level.checked_div(self.unit).unwrap_or(0)
    }

    /// The time until the limiter is full again.
    #[inline]
    fn reset_after(self) -> Duration {
        self.reset.duration()
    }

    /// The time until `remaining` is one higher; `None` when nothing is taken.
    #[inline]
    fn next_after(self) -> Option<Duration> {
        self.next
            .span(self.level, self.unit, self.reset)
            .map(Span::duration)
    }

    /// The units of `wait`, a span measured from the same reading as `reset` and so in its frame
    /// (time unit, and the reading's nanoseconds below one unit): what an outcome keeps of a wait
    /// beside its headroom (eight bytes, not a whole `Span`).
    #[inline]
    fn units_of(self, wait: Span) -> u64 {
        debug_assert_eq!((wait.shift, wait.sub), (self.reset.shift, self.reset.sub));
        wait.units
    }

    /// `units` of the frame of `reset`, as a span from the reading.
    #[inline]
    fn span(self, units: u64) -> Span {
        Span {
            units,
            ..self.reset
        }
    }

    /// The instant `units` of the frame of `reset` after the reading `now` (in nanoseconds),
    /// saturating at `u64::MAX` nanoseconds.
    fn instant(self, now: u64, units: u64) -> Nanos {
        let at = u128::from(now).saturating_add(self.span(units).nanos());
        Nanos::new(u64::try_from(at).unwrap_or(u64::MAX))
    }
}

/// The readers of an outcome's [`Headroom`], `remaining`, `reset_after` and `next_after`, written
/// once for [`Admitted`], [`Scheduled`] and [`Denied`] (each a field `headroom`): an invocation
/// inside the outcome's `impl` gives each reader its own docs, in that order.
macro_rules! headroom_readers {
    (
        $(#[$remaining:meta])* remaining,
        $(#[$reset_after:meta])* reset_after,
        $(#[$next_after:meta])* next_after $(,)?
    ) => {
        $(#[$remaining])*
        pub fn remaining(&self) -> u64 {
            self.headroom.remaining()
        }

        $(#[$reset_after])*
        pub fn reset_after(&self) -> Duration {
            self.headroom.reset_after()
        }

        $(#[$next_after])*
        pub fn next_after(&self) -> Option<Duration> {
            self.headroom.next_after()
        }
    };
}

/// A request was admitted.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
/// let ok = bucket.try_acquire_n(3)?;
/// assert_eq!(ok.remaining(), 7);
/// assert_eq!(ok.reset_after(), Duration::from_millis(300)); // 3 tokens at 100 ms each
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// `repr(C)`, and `Denied` opens with the same `Headroom`: where a limiter's code builds either
// outcome and the caller reads only which one it got, the compiler merges the two builds' stores
// into one, and, the fields lying at the same offsets in either variant of the `Result`, it can
// then drop them (callgrind, `benches/instructions.sh`: the direct bucket's refusal went from 104
// instructions and 12 writes a check to 70 and 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Admitted {
    /// What is left after the admission.
    headroom: Headroom,
}

impl Admitted {
    #[inline]
    pub(crate) fn new(headroom: Headroom) -> Admitted {
        Admitted { headroom }
    }

    headroom_readers! {
        /// Whole tokens left after this admission.
        ///
        /// # Examples
        ///
        /// ```
        /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(5)?);
        /// assert_eq!(bucket.try_acquire()?.remaining(), 4);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        remaining,

        /// The time until the limiter is full again if nothing else is taken.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{ManualClock, Quota, TokenBucket};
        /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
        /// assert_eq!(bucket.try_acquire()?.reset_after(), Duration::from_millis(500));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        reset_after,

        /// The time, from the reading the decision used, until [`remaining`](Admitted::remaining)
        /// would be one higher if nothing else were taken: the wait for one more unit (the next
        /// token, an entry leaving the log, the end of the fixed window, ...; the
        /// [module docs](crate::outcome#when-one-more-is-free-next_after) say it per algorithm).
        /// `None` exactly when nothing is taken: the limiter is full, and `remaining` is already
        /// the most it can show. What the IETF `RateLimit` field's `t` parameter reports, rounded
        /// up to whole seconds.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
        /// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
        /// assert_eq!(bucket.try_acquire_n_at(0, Nanos::new(0))?.next_after(), None); // full
        /// let ok = bucket.try_acquire_n_at(3, Nanos::new(0))?;
        /// assert_eq!(ok.remaining(), 7);
        /// assert_eq!(ok.next_after(), Some(Duration::from_millis(100))); // the next token
        /// assert_eq!(ok.reset_after(), Duration::from_millis(300)); // all three
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        next_after,
    }
}

impl fmt::Display for Admitted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "admitted: {} remaining, full again in {:?}",
            self.remaining(),
            self.reset_after()
        )
    }
}

/// A request was given a place in a [`LeakyMeter`](crate::leaky::LeakyMeter)'s virtual queue: it
/// leaves after [`Scheduled::delay`], at [`Scheduled::depart_at`].
///
/// Callers that wait out their delays before acting leave exactly one interval apart (`n` intervals
/// after a request for `n`), whatever the burst in which they arrived.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{leaky::LeakyMeter, ManualClock, Nanos, Quota};
///
/// let meter = LeakyMeter::with_clock(Quota::per_second(10)?, ManualClock::new());
/// let first = meter.try_schedule()?;
/// let second = meter.try_schedule()?;
/// assert_eq!(first.delay(), Duration::ZERO);
/// assert_eq!(second.delay(), Duration::from_millis(100));
/// assert_eq!(second.depart_at(), Nanos::new(100_000_000));
/// assert_eq!(second.queued(), 2); // both are in the virtual queue
/// assert_eq!(second.remaining(), 8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheduled {
    /// The reading the decision used, in nanoseconds (clamped).
    now: u64,
    /// From the reading to the request's departure, in units of the frame of the headroom's `reset`
    /// (both are measured from the same reading, so they share it: eight bytes, not a whole `Span`).
    delay: u64,
    /// The virtual queue's backlog after the request, in `unit`s of the limiter's time.
    backlog: u64,
    /// The free places after the request; its `reset` runs until the virtual queue is empty.
    headroom: Headroom,
}

impl Scheduled {
    /// `delay` and the headroom's `reset` must share their frame (time unit and reading), as spans
    /// measured from one reading do.
    #[inline]
    pub(crate) fn new(now: u64, delay: Span, backlog: u64, headroom: Headroom) -> Scheduled {
        Scheduled {
            now,
            delay: headroom.units_of(delay),
            backlog,
            headroom,
        }
    }

    /// An admission taken as a departure at once, at `now`: what a limiter that can only admit
    /// (the Redis meter's local fallback) answers for a scheduling.
    #[cfg(feature = "redis")]
    pub(crate) fn at_once(now: u64, a: Admitted) -> Scheduled {
        Scheduled {
            now,
            // No units in any frame: no delay.
            delay: 0,
            backlog: a.headroom.reset.units,
            headroom: a.headroom,
        }
    }

    /// How long to wait, from the reading the decision used, before acting on this request: zero
    /// when the virtual queue was empty.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{leaky::LeakyMeter, ManualClock, Quota};
    /// let meter = LeakyMeter::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// let delays: Vec<Duration> = (0..4).map(|_| meter.try_schedule().map(|s| s.delay())).collect::<Result<_, _>>()?;
    /// assert_eq!(delays, [0, 250, 500, 750].map(Duration::from_millis));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn delay(&self) -> Duration {
        self.headroom.span(self.delay).duration()
    }

    /// The instant on the limiter's clock at which this request leaves (the reading the decision
    /// used plus [`Scheduled::delay`], saturating at `u64::MAX` nanoseconds).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{leaky::LeakyMeter, ManualClock, Nanos, Quota};
    /// let meter = LeakyMeter::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// meter.try_schedule_at(Nanos::new(7))?;
    /// assert_eq!(meter.try_schedule_at(Nanos::new(9))?.depart_at(), Nanos::new(500_000_007));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn depart_at(&self) -> Nanos {
        self.headroom.instant(self.now, self.delay)
    }

    /// Requests in the virtual queue once this one joined it, this one (all `n` of it) included,
    /// counting one still leaving as a whole one.
    ///
    /// At most the capacity for every scheduled request; a query (`n = 0`) at a reading earlier than
    /// one already applied can report more (see the [meter's docs](crate::leaky::meter)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{leaky::LeakyMeter, ManualClock, Quota};
    /// let meter = LeakyMeter::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// assert_eq!(meter.try_schedule_n(3)?.queued(), 3);
    /// assert_eq!(meter.try_schedule()?.queued(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn queued(&self) -> u64 {
        // `unit` is at least 1 by construction; `checked_div` keeps even a broken invariant panic-free.
        let unit = self.headroom.unit;
        match self.backlog.checked_div(unit) {
            Some(whole) => whole + u64::from(!self.backlog.is_multiple_of(unit)),
            None => 0,
        }
    }

    headroom_readers! {
        /// Free places left in the virtual queue after this request: the capacity minus
        /// [`Scheduled::queued`].
        ///
        /// # Examples
        ///
        /// ```
        /// use tollgate::{leaky::LeakyMeter, ManualClock, Quota};
        /// let meter = LeakyMeter::with_clock(Quota::per_second(10)?.with_capacity(5)?, ManualClock::new());
        /// assert_eq!(meter.try_schedule_n(2)?.remaining(), 3);
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        remaining,

        /// The time until the virtual queue is empty again if nothing else is scheduled: this
        /// request's delay plus its own `n` intervals.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{leaky::LeakyMeter, ManualClock, Quota};
        /// let meter = LeakyMeter::with_clock(Quota::per_second(10)?, ManualClock::new());
        /// meter.try_schedule()?;
        /// assert_eq!(meter.try_schedule_n(2)?.reset_after(), Duration::from_millis(300));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        reset_after,

        /// The time, from the reading the decision used, until [`remaining`](Scheduled::remaining)
        /// would be one higher if nothing else were scheduled: until the queue's next request has
        /// drained. `None` exactly when the queue is empty.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{leaky::LeakyMeter, ManualClock, Quota};
        /// let meter = LeakyMeter::with_clock(Quota::per_second(10)?, ManualClock::new());
        /// assert_eq!(meter.try_schedule_n(0)?.next_after(), None); // empty queue
        /// let s = meter.try_schedule_n(3)?;
        /// assert_eq!(s.next_after(), Some(Duration::from_millis(100)));
        /// assert_eq!(s.reset_after(), Duration::from_millis(300));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        next_after,
    }
}

impl fmt::Display for Scheduled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scheduled: leaves in {:?}, {} queued, {} places free",
            self.delay(),
            self.queued(),
            self.remaining()
        )
    }
}

/// A request was refused for now; it can succeed later.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
/// bucket.try_acquire_at(Nanos::new(0))?;
/// let denied = bucket.try_acquire_at(Nanos::new(250_000_000)).unwrap_err();
/// assert_eq!(denied.retry_after(), Duration::from_millis(750));
/// assert_eq!(denied.retry_at(), Nanos::new(1_000_000_000));
/// assert_eq!(denied.remaining(), 0);
/// assert!(bucket.try_acquire_at(denied.retry_at()).is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// `repr(C)`, its first field that of `Admitted`: see there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Denied {
    /// What is left at the reading (less than was asked for).
    headroom: Headroom,
    now: u64,
    /// The wait, in units of the frame of the headroom's `reset` (both are measured from the same
    /// reading, so they share it: eight bytes, not a whole `Span`).
    retry: u64,
}

impl Denied {
    /// `retry` and the headroom's `reset` must share their frame (time unit and reading), as spans
    /// measured from one reading do.
    #[inline]
    pub(crate) fn new(now: u64, retry: Span, headroom: Headroom) -> Denied {
        Denied {
            headroom,
            now,
            retry: headroom.units_of(retry),
        }
    }

    /// The wait after which the same request would be admitted, if nothing else took tokens first:
    /// the exact earliest instant, not an estimate.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_minute(1)?, ManualClock::new());
    /// bucket.try_acquire()?;
    /// assert_eq!(bucket.try_acquire().unwrap_err().retry_after().as_secs(), 60);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_after(&self) -> Duration {
        self.headroom.span(self.retry).duration()
    }

    /// The instant on the limiter's clock at which the same request would be admitted
    /// (the reading the decision used plus [`Denied::retry_after`], saturating).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// bucket.try_acquire_at(Nanos::new(10))?;
    /// assert_eq!(bucket.try_acquire_at(Nanos::new(10)).unwrap_err().retry_at(), Nanos::new(1_000_000_010));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn retry_at(&self) -> crate::Nanos {
        self.headroom.instant(self.now, self.retry)
    }

    headroom_readers! {
        /// Whole tokens available at the time of the decision (fewer than were asked for).
        ///
        /// # Examples
        ///
        /// ```
        /// use tollgate::{ManualClock, Quota, TokenBucket};
        /// let bucket = TokenBucket::with_clock(Quota::per_second(5)?, ManualClock::new());
        /// assert_eq!(bucket.try_acquire_n(5).is_ok(), true);
        /// let err = bucket.try_acquire_n(2).unwrap_err();
        /// assert_eq!(err.denied().map(|d| d.remaining()), Some(0));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        remaining,

        /// The time until the limiter is full again if nothing else is taken.
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{ManualClock, Quota, TokenBucket};
        /// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
        /// bucket.try_acquire_n(2)?;
        /// assert_eq!(bucket.try_acquire().unwrap_err().reset_after(), Duration::from_secs(1));
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        reset_after,

        /// The time, from the reading the decision used, until [`remaining`](Denied::remaining)
        /// would be one higher if nothing else were taken (see [`Admitted::next_after`]); at most
        /// [`retry_after`](Denied::retry_after), and equal to it for a request for one. Never
        /// `None` on a denial of a limiter the crate decides in-process (something is taken, or
        /// the request would have been admitted).
        ///
        /// # Examples
        ///
        /// ```
        /// use std::time::Duration;
        /// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
        /// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
        /// bucket.try_acquire_n_at(4, Nanos::new(0))?;
        /// let err = bucket.try_acquire_n_at(2, Nanos::new(0)).unwrap_err();
        /// let denied = err.denied().unwrap();
        /// assert_eq!(denied.next_after(), Some(Duration::from_millis(250))); // one token
        /// assert_eq!(denied.retry_after(), Duration::from_millis(500)); // the two asked for
        /// # Ok::<(), Box<dyn std::error::Error>>(())
        /// ```
        next_after,
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rate limited: retry after {:?} ({} remaining, full again in {:?})",
            self.retry_after(),
            self.remaining(),
            self.reset_after()
        )
    }
}

impl std::error::Error for Denied {}

/// A request for more tokens than the limiter's capacity: it can never be admitted, so it is not a
/// [`Denied`] (whose `retry_after` would be a lie).
///
/// # Examples
///
/// ```
/// use tollgate::{AcquireError, InsufficientCapacity, Quota, TokenBucket};
/// let bucket = TokenBucket::new(Quota::per_second(10)?);
/// let err = bucket.try_acquire_n(11).unwrap_err();
/// assert_eq!(err, AcquireError::InsufficientCapacity(InsufficientCapacity { requested: 11, capacity: 10 }));
/// assert_eq!(err.to_string(), "request for 11 tokens can never succeed: capacity is 10");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InsufficientCapacity {
    /// Tokens asked for.
    pub requested: u64,
    /// The limiter's capacity.
    pub capacity: u64,
}

impl InsufficientCapacity {
    /// Checks a request for `n` against `capacity`: `Ok(false)` for a query (`n = 0`, which always
    /// succeeds), `Ok(true)` for a request to decide, and the error for one no state can admit.
    #[inline]
    pub(crate) fn check(n: u64, capacity: u64) -> Result<bool, InsufficientCapacity> {
        if n > capacity {
            Err(InsufficientCapacity {
                requested: n,
                capacity,
            })
        } else {
            Ok(n != 0)
        }
    }
}

impl fmt::Display for InsufficientCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "request for {} tokens can never succeed: capacity is {}",
            self.requested, self.capacity
        )
    }
}

impl std::error::Error for InsufficientCapacity {}

/// Why a request for `n` tokens was not admitted.
///
/// `#[non_exhaustive]`: a backend that decides over the network (the planned Redis limiter) adds
/// failure kinds of its own, so a `match` needs a wildcard arm.
///
/// # Examples
///
/// ```
/// use tollgate::{AcquireError, ManualClock, Quota, TokenBucket};
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
/// match bucket.try_acquire_n(3) {
///     Ok(ok) => assert_eq!(ok.remaining(), 1),
///     Err(AcquireError::Denied(d)) => println!("wait {:?}", d.retry_after()),
///     Err(AcquireError::InsufficientCapacity(e)) => println!("never: {e}"),
///     Err(other) => println!("{other}"),
/// }
/// assert!(matches!(bucket.try_acquire_n(3), Err(AcquireError::Denied(_))));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireError {
    /// Not now; see [`Denied::retry_after`].
    Denied(Denied),
    /// Never: more than the capacity was asked for.
    InsufficientCapacity(InsufficientCapacity),
}

impl AcquireError {
    /// The denial, if this is one.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(1)?);
    /// assert!(bucket.try_acquire_n(2).unwrap_err().denied().is_none()); // never, not "later"
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn denied(&self) -> Option<&Denied> {
        match self {
            AcquireError::Denied(d) => Some(d),
            AcquireError::InsufficientCapacity(_) => None,
        }
    }
}

impl From<Denied> for AcquireError {
    fn from(d: Denied) -> AcquireError {
        AcquireError::Denied(d)
    }
}

impl From<InsufficientCapacity> for AcquireError {
    fn from(e: InsufficientCapacity) -> AcquireError {
        AcquireError::InsufficientCapacity(e)
    }
}

impl fmt::Display for AcquireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcquireError::Denied(d) => d.fmt(f),
            AcquireError::InsufficientCapacity(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for AcquireError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AcquireError::Denied(d) => Some(d),
            AcquireError::InsufficientCapacity(e) => Some(e),
        }
    }
}

/// A new key found every place taken by an active key, under [`Overflow::Refuse`](crate::keyed::Overflow::Refuse): not a rate
/// decision about the key, so there is no `retry_after`; places free up as active keys go idle.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter, TooManyKeys};
/// use tollgate::{ManualClock, Quota};
/// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
///     .with_max_keys(0);
/// assert_eq!(limiter.check_key(&7), Err(KeyedError::TooManyKeys(TooManyKeys { max_keys: 0 })));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyKeys {
    /// The limiter's bound on the number of keys.
    pub max_keys: usize,
}

impl fmt::Display for TooManyKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no room for a new key: all {} places are held by active keys",
            self.max_keys
        )
    }
}

impl std::error::Error for TooManyKeys {}

/// Why a [`KeyedLimiter`](crate::keyed::KeyedLimiter) did not admit a request.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter};
/// use tollgate::{ManualClock, Quota};
/// let limiter: KeyedLimiter<String, _, _> = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
/// match limiter.check_key_n("k", 3) {
///     Err(KeyedError::InsufficientCapacity(e)) => assert_eq!(e.capacity, 2),
///     other => panic!("{other:?}"),
/// }
/// limiter.check_key_n("k", 2).unwrap();
/// let err = limiter.check_key("k").unwrap_err();
/// assert_eq!(err.denied().map(|d| d.retry_after().as_millis()), Some(500));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// Non-exhaustive: kinds of refusal will be added (a shared backend's failures), so a `match`
/// outside this crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedError {
    /// Not now; see [`Denied::retry_after`].
    Denied(Denied),
    /// Never: more than the capacity was asked for.
    InsufficientCapacity(InsufficientCapacity),
    /// A new key found no room (see [`Overflow::Refuse`](crate::keyed::Overflow::Refuse)).
    TooManyKeys(TooManyKeys),
}

impl KeyedError {
    /// The denial, if this is one.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert!(limiter.check_key_n(&1, 2).unwrap_err().denied().is_none()); // never, not "later"
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn denied(&self) -> Option<&Denied> {
        match self {
            KeyedError::Denied(d) => Some(d),
            KeyedError::InsufficientCapacity(_) | KeyedError::TooManyKeys(_) => None,
        }
    }
}

/// A direct limiter's refusal as a keyed one, so that code that consults both (a global cap in
/// front of per-client limits) answers with one error type and `?`.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter};
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// // 5 a second per client, 3 a second for all clients together.
/// let per_client: KeyedLimiter<u32, _, _> =
///     KeyedLimiter::with_clock(Quota::per_second(5)?, ManualClock::new());
/// let global = TokenBucket::with_clock(Quota::per_second(3)?, ManualClock::new());
/// let admit = |client: u32, n: u64| -> Result<(), KeyedError> {
///     global.peek_n(n)?; // refuse early, taking nothing, when the global cap is out
///     per_client.check_key_n(&client, n)?;
///     global.try_acquire_n(n)?; // an AcquireError, converted
///     Ok(())
/// };
/// assert!(admit(1, 2).is_ok());
/// assert!(matches!(admit(2, 2), Err(KeyedError::Denied(_)))); // only 1 left globally
/// assert!(matches!(admit(3, 4), Err(KeyedError::InsufficientCapacity(_)))); // never, globally
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
impl From<AcquireError> for KeyedError {
    fn from(e: AcquireError) -> KeyedError {
        match e {
            AcquireError::Denied(d) => KeyedError::Denied(d),
            AcquireError::InsufficientCapacity(e) => KeyedError::InsufficientCapacity(e),
        }
    }
}

impl From<Denied> for KeyedError {
    fn from(d: Denied) -> KeyedError {
        KeyedError::Denied(d)
    }
}

impl From<InsufficientCapacity> for KeyedError {
    fn from(e: InsufficientCapacity) -> KeyedError {
        KeyedError::InsufficientCapacity(e)
    }
}

impl From<TooManyKeys> for KeyedError {
    fn from(e: TooManyKeys) -> KeyedError {
        KeyedError::TooManyKeys(e)
    }
}

impl fmt::Display for KeyedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedError::Denied(d) => d.fmt(f),
            KeyedError::InsufficientCapacity(e) => e.fmt(f),
            KeyedError::TooManyKeys(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for KeyedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KeyedError::Denied(d) => Some(d),
            KeyedError::InsufficientCapacity(e) => Some(e),
            KeyedError::TooManyKeys(e) => Some(e),
        }
    }
}
