//! The leaky bucket as a meter: a virtual queue that holds no items, only the instant it will be
//! empty, in one `AtomicU64`.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{leaky::LeakyMeter, ManualClock, Quota};
//!
//! // 10 per second, at most 3 waiting: a burst of 5 gets delays 0, 100 ms, 200 ms, then refusals.
//! let meter = LeakyMeter::with_clock(Quota::per_second(10)?.with_capacity(3)?, ManualClock::new());
//! let delays: Vec<_> = (0..5).map(|_| meter.try_schedule().map(|s| s.delay())).collect();
//! assert_eq!(delays[..3], [Ok(Duration::ZERO), Ok(Duration::from_millis(100)), Ok(Duration::from_millis(200))]);
//! assert_eq!(delays[3].unwrap_err().retry_after(), Duration::from_millis(100));
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Algorithm
//!
//! Picture a queue in front of a server that lets one request leave every interval `I = 1/R`.
//! The queue's whole state is its *drain time* `D`: the instant it will be empty, which is also the
//! first free departure slot. A request for `n` places read at `now`
//!
//! - leaves at `start = max(D, now)`, after a delay of `start - now`;
//! - occupies the server for `n` intervals, so the queue drains at `D' = start + n × I`;
//! - is refused if the queue would then hold more than the capacity `C`: if the backlog
//!   `D' - now` exceeds `C × I`.
//!
//! Callers that sleep for their delays leave exactly `I` apart (`n × I` after a request for `n`),
//! however bursty their arrival. The backlog `D - now`, counted in whole requests rounded up, is the
//! queue's length, the one leaving now included; capacity left is `C` minus that. This is the
//! leaky bucket "as a meter" of the generic cell rate algorithm (GCRA, ITU-T I.371): `D` is the
//! theoretical arrival time the [`TokenBucket`](crate::TokenBucket) stores, and a scheduled request
//! is admitted exactly when the token bucket with the same quota would admit it. The meter adds
//! *when* it may go.
//!
//! # Decisions
//!
//! - **Quota.** R is the quota's count per period; the interval is [`Quota::interval`](crate::Quota::interval), the period
//!   divided by the count and rounded **up** to a whole nanosecond, so departures are never closer
//!   than configured. C is [`Quota::capacity`](crate::Quota::capacity): the most requests the virtual queue holds,
//!   including the one leaving now. A capacity of 1 allows no waiting at all.
//! - **Initial fill** ([`Quota::with_initial`](crate::Quota::with_initial)) is the number of *free places* at construction, as
//!   it is the number of tokens of a token bucket (the same number, read from the other side). By
//!   default the queue starts empty; `with_initial(k)` starts it as if `C - k` requests had just
//!   been scheduled, so that a restarted process cannot open with a full burst of zero delays.
//! - **Scheduling** ([`LeakyMeter::try_schedule_n`]) answers [`Scheduled`] with the delay, the
//!   departure instant and the queue behind it, or [`Denied`] with an exact `retry_after`: the
//!   earliest reading at which the same request fits (`D + n × I - C × I`). A request for more than
//!   `C` is [`InsufficientCapacity`](crate::InsufficientCapacity); a request for 0 is a query that writes nothing and reports the
//!   delay a request made now would get. With the `tokio` feature, `LeakyMeter::schedule_async`
//!   takes the place and sleeps its delay on tokio's timer (a dropped future keeps its place: see
//!   No refund, below). Per key, [`KeyedLimiter::schedule_key_n`](crate::keyed::KeyedLimiter::schedule_key_n)
//!   schedules the same way in each key's queue.
//! - **Strict acquisition** ([`LeakyMeter::try_acquire_n`]) admits only a request whose delay would
//!   be zero, when the queue is empty at `now`, and then drains at `now + n × I`: strict spacing, no
//!   burst, one request per interval at most. A denial's `retry_after` is `D - now`, the instant the
//!   queue is empty. Its `remaining` is the free places, which may be many: a strict request needs an
//!   empty queue, not a free place. Scheduled and strict requests share the one queue, so a strict
//!   request never cuts in front of a scheduled one.
//! - **Peeks.** [`LeakyMeter::peek_n`] answers what [`LeakyMeter::try_acquire_n`] would, as it does
//!   for every limiter in the crate; [`LeakyMeter::peek_schedule_n`] what
//!   [`LeakyMeter::try_schedule_n`] would. Neither writes.
//! - **No refund.** A place cannot be given back: requests scheduled after it have been told their
//!   departure times, and moving the drain time back would let a later request leave closer than one
//!   interval to one of them.
//!
//! # Guarantees
//!
//! - Departures never come closer than the interval: every scheduled or strict admission occupies
//!   `[start, start + n × I)` with `start` at or after the drain time it saw, and moves the drain
//!   time to the end of that span, under any interleaving of threads and clock readings.
//! - No admitted request waits longer than `(C - n) × I` (plus under one time unit where units are
//!   coarser than 1 ns), and the queue never holds more than `C` at the reading of any admission.
//! - A reading earlier than one already applied (a clock stepping back, two threads whose readings
//!   arrive out of order) sees the queue as it would be at that reading: no shorter, so it never frees
//!   places, and never schedules a departure before the drain time. An idle period of any length
//!   empties the queue, and no further.
//! - No departure is ever scheduled before the meter's construction reading, even when the clock
//!   then steps back (with coarse units too: its units are laid so that this reading starts one).
//! - Readings beyond [`Nanos::MAX_USABLE`] (146 years) are clamped: no arithmetic can overflow.
//!
//! # Ranges and time units
//!
//! The meter accepts every [`Quota`](crate::Quota), with the token bucket's bounds: the drain time is at most
//! `C × I` ahead of a reading, and the quota's validation keeps that window within 2^62 time units.
//! Units are nanoseconds unless `C × I` exceeds 2^62 ns (146 years of queue), where they become
//! `2^k` ns with `2^k <= I / 1024` (see [`Quota`](crate::quota#very-long-burst-windows)). With
//! coarse units, the interval is rounded up to a whole unit; the backlog is measured from the
//! reading rounded down (the queue looks fuller, never emptier), and a request on an empty queue
//! departs at the reading rounded up, so its delay may be a fraction of one unit (under 0.1 % of
//! the interval) rather than zero, and the queue behind it may read one request longer than it
//! holds until that unit has passed. Delays, departure instants and `retry_after` stay exact to the
//! nanosecond; durations past `Duration::MAX` saturate.
//!
//! # Memory ordering
//!
//! The word publishes nothing but itself, so every access is `Relaxed`: a scheduling is a
//! compare-and-swap on the word's latest value, and the atomicity of that read-modify-write, not any
//! fence, is what keeps two threads from getting the same departure slot. Do not use a scheduling to
//! publish other data between threads.

pub use crate::algorithm::LeakyMeterAlgorithm;

use crate::cas::{self, Step};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::direct::Direct;
use crate::gcra::{gcra_constructors, Gcra, GcraWord, Tat, Time};
use crate::outcome::{AcquireError, Admitted, Denied, Headroom, Next, Scheduled};

impl GcraWord for LeakyMeterAlgorithm {
    const NAME: &'static str = "LeakyMeter";
    const WORD: &'static str = "drain";

    #[inline]
    fn decide(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, Denied> {
        strict(gcra, word, now, n)
    }

    #[inline]
    fn judge(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<(), ()> {
        // `strict`'s test and write, without its outcome.
        if Tat(word).is_full_at(now) {
            Step::Write(now.units_up + n * gcra.interval(), ())
        } else {
            Step::Refuse(())
        }
    }

    #[inline]
    fn admit(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, ()> {
        // `strict` without its refusal's outcome.
        if Tat(word).is_full_at(now) {
            let (new, admitted) = strict_admitted(gcra, now, n);
            Step::Write(new, admitted)
        } else {
            Step::Refuse(())
        }
    }
}

/// The meter's strict admission: `n` requests (`1 <= n <= capacity`) leave at once, only if the
/// queue in `word` is empty at `now`; otherwise it says when it will be.
#[inline]
fn strict(g: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, Denied> {
    let drain = Tat(word);
    if drain.is_full_at(now) {
        let (new, admitted) = strict_admitted(g, now, n);
        Step::Write(new, admitted)
    } else {
        Step::Refuse(g.denied(word, now, drain.until_full(now.units)))
    }
}

/// The strict admission of `n` on an empty queue at `now`: the word it writes and its outcome.
#[inline]
fn strict_admitted(g: &Gcra, now: Time, n: u64) -> (u64, Admitted) {
    // n <= capacity, so cost <= window.
    let cost = n * g.interval();
    let new = now.units_up + cost;
    // The first of the `n` leaves one interval after the reading rounded up.
    let admitted = Admitted::new(Headroom::new(
        g.burst() - cost,
        g.interval(),
        g.span(new - now.units, now),
        Next::token(now.units_up - now.units),
    ));
    (new, admitted)
}

/// Schedules `n` requests (`1 <= n <= capacity`) behind the queue in `word`, or says when they
/// would fit: the GCRA's conformance test, answered with a departure slot.
#[inline]
pub(crate) fn schedule(g: &Gcra, word: u64, now: Time, n: u64) -> Step<Scheduled, Denied> {
    // No delay exceeds `u64::MAX` units: the bound never refuses.
    schedule_within(g, word, now, n, u64::MAX)
}

/// [`schedule`], refused (writing nothing) when the request would leave more than `max` units
/// after the reading: its denial says when it would leave within `max`. For callers that wait out
/// the delay but only so long (the HTTP middleware's `delay_up_to`). One conformance test
/// answers every case.
#[inline]
pub(crate) fn schedule_within(
    g: &Gcra,
    word: u64,
    now: Time,
    n: u64,
    max: u64,
) -> Step<Scheduled, Denied> {
    match g.conform(word, now, n) {
        Ok(c) if c.start - now.units > max => {
            Step::Refuse(g.denied(word, now, c.start - now.units - max))
        }
        Ok(c) => Step::Write(
            c.new,
            Scheduled::new(
                now.ns,
                g.span(c.start - now.units, now),
                c.gap,
                Headroom::new(
                    g.burst() - c.gap,
                    g.interval(),
                    g.span(c.new - now.units, now),
                    Next::token(c.new - c.gap - now.units),
                ),
            ),
        ),
        Err(wait) => Step::Refuse(g.denied(word, now, wait)),
    }
}

/// The answer to a scheduling of nothing: the delay a request made at `now` would get, and the
/// queue as it is.
pub(crate) fn query_schedule(g: &Gcra, word: u64, now: Time) -> Scheduled {
    // The queue's free places, as `Gcra::query` reports them.
    Scheduled::new(
        now.ns,
        g.span(word.max(now.units_up) - now.units, now),
        Tat(word).until_full(now.units),
        g.headroom(word, now.units, now.sub),
    )
}

/// A lock-free leaky bucket as a meter: a virtual queue of at most the quota's capacity, leaking one
/// request per interval, that tells each caller how long to wait.
///
/// One `AtomicU64` holds the whole state, updated by one compare-and-swap per admission; a denial only
/// reads. Generic over its [`Clock`]: [`MonotonicClock`] by default,
/// [`CoarseClock`](crate::CoarseClock) for the cheapest reads, [`ManualClock`](crate::ManualClock)
/// for tests. See the [module docs](self) for the semantics, the decisions taken, and the guarantees.
///
/// Its `try_schedule*` methods take a place in the queue; the `try_acquire*`, `peek_n*` and
/// `remaining*` methods it shares with every direct limiter ([`Direct`]) admit strictly: only when
/// the queue is empty, one request per interval at most.
///
/// # Memory ordering
///
/// Admissions are linearizable: every scheduling and strict admission takes effect at one instant in
/// a single total order, and no two callers ever receive overlapping departure slots. An admission is
/// not a synchronization point between threads: do not rely on it to make other writes visible.
///
/// # Examples
///
/// ```
/// use tollgate::{leaky::LeakyMeter, Quota};
///
/// // At most 100 calls a second to the backend, and no caller kept waiting more than 50 ms.
/// let meter = LeakyMeter::new(Quota::per_second(100)?.with_capacity(5)?);
/// match meter.try_schedule() {
///     Ok(place) => std::thread::sleep(place.delay()), // then call the backend
///     Err(denied) => println!("busy, retry in {:?}", denied.retry_after()),
/// }
/// // Strict admission: one request now, the next one an interval later.
/// let strict = LeakyMeter::new(Quota::per_second(1)?);
/// assert!(strict.try_acquire().is_ok());
/// assert!(strict.try_acquire().is_err());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type LeakyMeter<C = MonotonicClock> = Direct<LeakyMeterAlgorithm, C>;

gcra_constructors!(
    LeakyMeter,
    /// A meter for `quota` on the default clock, with the quota's initial fill free (all of the
    /// capacity by default: an empty queue).
    ///
    /// # Examples
    ///
    /// ```
    /// let meter = tollgate::leaky::LeakyMeter::new(tollgate::Quota::per_second(50)?);
    /// assert_eq!(meter.remaining(), 50);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    new,
    /// A meter for `quota` reading time from `clock`, with [`Quota::initial`](crate::Quota::initial) places free as of
    /// `clock.now()`: the queue starts holding the rest of the capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{leaky::LeakyMeter, ManualClock, Quota};
    /// // Starts as if 3 of 5 places were taken: the first request waits for them to leave.
    /// let meter = LeakyMeter::with_clock(Quota::per_second(5)?.with_initial(2)?, ManualClock::new());
    /// assert_eq!(meter.remaining(), 2);
    /// assert_eq!(meter.try_schedule()?.delay(), Duration::from_millis(600));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    with_clock
);

impl<C: Clock> LeakyMeter<C> {
    /// Takes a place in the virtual queue now: the answer says how long to wait before acting, or
    /// when the queue will have room.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{leaky::LeakyMeter, Quota};
    /// let meter = LeakyMeter::new(Quota::per_second(1_000)?);
    /// let place = meter.try_schedule().expect("an empty queue has room");
    /// assert!(place.delay().is_zero()); // the first in an empty queue leaves at once
    /// std::thread::sleep(place.delay());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_schedule(&self) -> Result<Scheduled, Denied> {
        self.try_schedule_at(self.clock.now())
    }

    /// Takes a place in the virtual queue as of `now`, a reading of this meter's clock the caller
    /// already holds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{leaky::LeakyMeter, ManualClock, Nanos, Quota};
    /// let meter = LeakyMeter::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// assert_eq!(meter.try_schedule_at(Nanos::new(0))?.delay(), Duration::ZERO);
    /// assert_eq!(meter.try_schedule_at(Nanos::new(0))?.delay(), Duration::from_millis(500));
    /// let full = meter.try_schedule_at(Nanos::new(0)).unwrap_err();
    /// assert_eq!(full.retry_at(), Nanos::new(500_000_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_schedule_at(&self, now: Nanos) -> Result<Scheduled, Denied> {
        // The capacity is at least 1, so one place is always a valid request.
        self.decide(|b| {
            let now = b.policy.time(now);
            cas::update_live(&b.state, |w| schedule(&b.policy, w, now, 1))
        })
    }

    /// Takes `n` consecutive places now, all or none; the request leaves after the delay and holds
    /// the queue for `n` intervals. `n = 0` is a query that always succeeds.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Denied`] when the queue has no room for `n` now;
    /// [`AcquireError::InsufficientCapacity`] when `n` exceeds the capacity and can never succeed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{leaky::LeakyMeter, ManualClock, Quota};
    /// let meter = LeakyMeter::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// meter.try_schedule_n(4)?;
    /// assert_eq!(meter.try_schedule_n(6)?.delay(), Duration::from_millis(400));
    /// assert!(meter.try_schedule_n(1).is_err()); // 10 places, all taken
    /// assert!(meter.try_schedule_n(11).unwrap_err().denied().is_none()); // never
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_schedule_n(&self, n: u64) -> Result<Scheduled, AcquireError> {
        self.try_schedule_n_at(n, self.clock.now())
    }

    /// Takes `n` consecutive places as of `now`, all or none. `n = 0` is a query that always
    /// succeeds.
    ///
    /// # Errors
    ///
    /// As [`LeakyMeter::try_schedule_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{leaky::LeakyMeter, ManualClock, Nanos, Quota};
    /// let meter = LeakyMeter::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// meter.try_schedule_n_at(10, Nanos::new(0))?;
    /// let denied = meter.try_schedule_n_at(3, Nanos::new(0)).unwrap_err();
    /// assert_eq!(denied.denied().unwrap().retry_after(), Duration::from_millis(300));
    /// let query = meter.try_schedule_n_at(0, Nanos::new(0))?;
    /// assert_eq!((query.delay(), query.queued()), (Duration::from_secs(1), 10));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_schedule_n_at(&self, n: u64, now: Nanos) -> Result<Scheduled, AcquireError> {
        self.decide(|b| {
            let now = b.policy.time(now);
            Ok(match b.policy.check_n(n) {
                Err(e) => Err(e.into()),
                Ok(true) => cas::update_live(&b.state, |w| schedule(&b.policy, w, now, n))?
                    .map_err(AcquireError::Denied),
                Ok(false) => Ok(query_schedule(&b.policy, cas::read_live(&b.state)?, now)),
            })
        })
    }

    /// `try_schedule_n_at`, refused (writing nothing) when the place would leave more than
    /// `max` after `now`: for the HTTP middleware's `delay_up_to`.
    #[cfg(all(feature = "tower", feature = "tokio"))]
    pub(crate) fn try_schedule_n_within(
        &self,
        n: u64,
        max: std::time::Duration,
        now: Nanos,
    ) -> Result<Scheduled, AcquireError> {
        self.decide(|b| {
            let max = b.policy.whole_units(Nanos::from(max));
            let now = b.policy.time(now);
            Ok(match b.policy.check_n(n) {
                Err(e) => Err(e.into()),
                Ok(true) => {
                    cas::update_live(&b.state, |w| schedule_within(&b.policy, w, now, n, max))?
                        .map_err(AcquireError::Denied)
                }
                Ok(false) => Ok(query_schedule(&b.policy, cas::read_live(&b.state)?, now)),
            })
        })
    }

    /// Would `n` places be scheduled now, and with what delay? Takes nothing and writes nothing.
    ///
    /// # Errors
    ///
    /// As [`LeakyMeter::try_schedule_n`]: the refusal it would get.
    ///
    /// # Examples
    ///
    /// ```
    /// let meter = tollgate::leaky::LeakyMeter::new(tollgate::Quota::per_second(3)?);
    /// assert!(meter.peek_schedule_n(3).is_ok());
    /// assert!(meter.peek_schedule_n(3).is_ok()); // still: peeking takes nothing
    /// assert!(meter.peek_schedule_n(4).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn peek_schedule_n(&self, n: u64) -> Result<Scheduled, AcquireError> {
        self.peek_schedule_n_at(n, self.clock.now())
    }

    /// Would `n` places be scheduled as of `now`? Takes nothing and writes nothing.
    ///
    /// # Errors
    ///
    /// As [`LeakyMeter::try_schedule_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{leaky::LeakyMeter, ManualClock, Nanos, Quota};
    /// let meter = LeakyMeter::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// meter.try_schedule_at(Nanos::new(0))?;
    /// let would = meter.peek_schedule_n_at(1, Nanos::new(100_000_000))?;
    /// assert_eq!(would.delay(), Duration::from_millis(400));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek_schedule_n_at(&self, n: u64, now: Nanos) -> Result<Scheduled, AcquireError> {
        self.decide(|b| {
            let now = b.policy.time(now);
            let word = cas::read_live(&b.state)?;
            Ok(match b.policy.check_n(n) {
                Err(e) => Err(e.into()),
                Ok(false) => Ok(query_schedule(&b.policy, word, now)),
                Ok(true) => match schedule(&b.policy, word, now, n) {
                    Step::Write(_, scheduled) | Step::Keep(scheduled) => Ok(scheduled),
                    Step::Refuse(denied) => Err(AcquireError::Denied(denied)),
                },
            })
        })
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::gcra::tests::{at, ten_per_second, widest};
    use crate::quota::Quota;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn an_empty_queue_schedules_at_once_and_drains_one_interval_later() {
        let p = ten_per_second();
        let (new, s) = schedule(&p, 0, at(&p, 5 * SEC), 1).written();
        assert_eq!(new, 5 * SEC + SEC / 10);
        assert!(s.delay().is_zero());
        assert_eq!(s.depart_at(), Nanos::new(5 * SEC));
        assert_eq!((s.queued(), s.remaining()), (1, 9));
        assert_eq!(s.reset_after().as_nanos(), u128::from(SEC / 10));
    }

    #[test]
    fn a_busy_queue_schedules_behind_its_drain_time() {
        let p = ten_per_second();
        let now = 3 * SEC;
        // 4.5 requests' worth of backlog: the new one leaves 450 ms from now and counts as the 6th.
        let word = now + 450_000_000;
        let (new, s) = schedule(&p, word, at(&p, now), 2).written();
        assert_eq!(new, word + 2 * SEC / 10);
        assert_eq!(s.delay().as_nanos(), 450_000_000);
        assert_eq!((s.queued(), s.remaining()), (7, 3));
    }

    #[test]
    fn a_full_queue_refuses_with_the_exact_wait_and_writes_nothing() {
        let p = ten_per_second();
        let now = 3 * SEC;
        let full = now + SEC;
        let d = schedule(&p, full, at(&p, now), 3).refused();
        assert_eq!(d.retry_after().as_nanos(), u128::from(3 * SEC / 10));
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after().as_nanos(), u128::from(SEC));
        retry_is_exact(&p, full, now + 3 * SEC / 10, 3);
    }

    /// Scheduling `n` on `word` fits at the reading `retry` and not one nanosecond earlier.
    #[track_caller]
    fn retry_is_exact(p: &Gcra, word: u64, retry: u64, n: u64) {
        assert!(matches!(
            schedule(p, word, at(p, retry - 1), n),
            Step::Refuse(_)
        ));
        assert!(matches!(
            schedule(p, word, at(p, retry), n),
            Step::Write(..)
        ));
    }

    #[test]
    fn strict_acquisition_needs_an_empty_queue() {
        let p = ten_per_second();
        let now = 7 * SEC;
        let (new, ok) = strict(&p, now, at(&p, now), 2).written();
        assert_eq!(new, now + 2 * SEC / 10);
        assert_eq!(ok.remaining(), 8);
        // One nanosecond of backlog is enough to refuse, and the wait is exactly it.
        let d = strict(&p, now + 1, at(&p, now), 1).refused();
        assert_eq!(d.retry_after().as_nanos(), 1);
        assert_eq!(d.remaining(), 9);
    }

    #[test]
    fn an_earlier_reading_never_departs_before_the_drain_time() {
        // (That it never frees places either is the shared core's `remaining`, tested in `gcra`.)
        let p = ten_per_second();
        let word = 5 * SEC + SEC / 10;
        for earlier in [0, SEC, 4 * SEC, 5 * SEC - 1] {
            if let Step::Write(new, s) = schedule(&p, word, at(&p, earlier), 1) {
                assert_eq!(s.depart_at(), Nanos::new(word));
                assert_eq!(new, word + SEC / 10);
            }
            assert!(matches!(
                strict(&p, word, at(&p, earlier), 1),
                Step::Refuse(_)
            ));
        }
    }

    #[test]
    fn the_word_cannot_overflow_at_the_extremes() {
        let p = widest();
        let now = at(&p, u64::MAX);
        let word = now.units + p.burst + 1;
        assert!(matches!(schedule(&p, word, now, 1 << 62), Step::Refuse(_)));
        assert!(matches!(strict(&p, word, now, 1 << 62), Step::Refuse(_)));
        let (new, s) = schedule(&p, 0, now, 1 << 62).written();
        assert_eq!(new, (1 << 62) + (1 << 62));
        assert_eq!(s.queued(), 1 << 62);
        let _ = query_schedule(&p, u64::MAX, now);
        let _ = p.query(u64::MAX, now);
        assert_eq!(p.remaining(u64::MAX, now), 0);
    }

    #[test]
    fn coarse_units_depart_no_earlier_than_the_reading_and_retry_exactly() {
        // 1 per day with a capacity of 2^32: an 11-million-year queue needs units above 1 ns.
        let q = Quota::per_day(1).unwrap().with_capacity(1 << 32).unwrap();
        let p = Gcra::new(&q);
        assert!(p.shift > 0);
        let reading = (1 << 40) + 12_345;
        let (new, s) = schedule(&p, 0, at(&p, reading), 1).written();
        let depart = s.depart_at().as_u64();
        assert!(depart >= reading && depart - reading < 1 << p.shift);
        assert_eq!(s.delay().as_nanos(), u128::from(depart - reading));
        assert_eq!(new << p.shift, depart + (p.interval << p.shift));
        // A full queue: retry_at fits and one nanosecond earlier does not.
        let full = at(&p, reading).units + p.burst;
        let d = schedule(&p, full, at(&p, reading), 5).refused();
        retry_is_exact(&p, full, d.retry_at().as_u64(), 5);
    }

    /// Real threads on one meter, scheduling and strictly acquiring with their own readings of a
    /// shared monotonic clock: no two admissions' departure spans overlap (so departures are at
    /// least one interval apart), no admission sees more than C queued, and compare-and-swap
    /// retries really happened (the work per thread grows until they do).
    #[test]
    fn stress_real_threads_never_share_a_slot_and_do_contend() {
        let threads = 4;
        let capacity = 64;
        cas::until_contended(|per_thread| {
            let clock = MonotonicClock::new();
            // A fast rate keeps the queue moving, so both refusals and admissions happen.
            let quota = Quota::per_second(4_000_000)
                .unwrap()
                .with_capacity(capacity)
                .unwrap();
            let interval = quota.interval().as_nanos() as u64;
            let meter = LeakyMeter::with_clock(quota, clock);
            let results = cas::race(threads, |t| {
                // (departure, places) of every admission.
                let mut spans = Vec::new();
                for i in 0..per_thread {
                    let now = meter.clock().now();
                    let n = 1 + (i + t as u64) % 3;
                    if (i + t as u64).is_multiple_of(5) {
                        if let Ok(ok) = meter.try_acquire_n_at(n, now) {
                            assert!(ok.remaining() <= capacity - n);
                            spans.push((now.as_u64(), n));
                        }
                    } else if let Ok(s) = meter.try_schedule_n_at(n, now) {
                        assert!(s.queued() <= capacity, "{s:?}");
                        let wait = s.depart_at().as_u64() - now.as_u64();
                        assert!(wait <= (capacity - n) * interval, "{s:?}");
                        spans.push((s.depart_at().as_u64(), n));
                    }
                }
                spans
            });
            let mut spans = Vec::new();
            let mut retries = 0;
            for (s, r) in results {
                spans.extend(s);
                retries += r;
            }
            spans.sort_unstable();
            assert!(spans.len() > 1);
            for pair in spans.windows(2) {
                let ((d0, n0), (d1, _)) = (pair[0], pair[1]);
                assert!(
                    d1 >= d0 + n0 * interval,
                    "departures {d0} (x{n0}) and {d1} closer than {interval} ns per place"
                );
            }
            retries
        });
    }
}
