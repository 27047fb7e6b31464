//! Drives a [`TokenBucket`] and the reference model through the same operations and asserts that
//! every answer is identical, to the nanosecond.
//!
//! Used by `tests/token_bucket_model.rs` (proptest) and the fuzz crate's `token_bucket_ops` target
//! (arbitrary); each generates [`QuotaSpec`]s and [`Op`]s its own way. The quota specs here serve
//! the meter and sharded drivers too; the calls any limiter answers go through
//! [`crate::driver::limiter`], the clock moves by [`Step`]s, and refunds are this driver's own.

use std::time::Duration;

use tollgate::reservation::{Reservation, ReserveError};
use tollgate::{Clock, Denied, ManualClock, Nanos, Partial, Quota, QuotaError, TokenBucket};

use crate::consts::{MAX_USABLE_NS, MAX_WAIT_NS};
use crate::driver::limiter::{check, Amount, Call, Request};
use crate::driver::step::Step;
use crate::outcome::{observe, observe_one};
use crate::reference::bucket::{self as reference, RefBucket, RefPolicy, RefReservation};
use crate::Outcome;

/// A rate as one of `Quota`'s constructors takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// `Quota::per_second(count)`.
    Second(u64),
    /// `Quota::per_minute(count)`.
    Minute(u64),
    /// `Quota::per_hour(count)`.
    Hour(u64),
    /// `Quota::per_day(count)`.
    Day(u64),
    /// `Quota::per_period(count, period)`.
    Period(u64, Duration),
}

impl Rate {
    /// Tokens per period.
    pub fn count(&self) -> u64 {
        match *self {
            Rate::Second(n) | Rate::Minute(n) | Rate::Hour(n) | Rate::Day(n) => n,
            Rate::Period(n, _) => n,
        }
    }

    /// The period, as the constructor's documentation gives it.
    pub fn period(&self) -> Duration {
        match *self {
            Rate::Second(_) => Duration::from_secs(1),
            Rate::Minute(_) => Duration::from_secs(60),
            Rate::Hour(_) => Duration::from_secs(3_600),
            Rate::Day(_) => Duration::from_secs(86_400),
            Rate::Period(_, period) => period,
        }
    }

    /// The quota's interval in nanoseconds, `period / count` rounded up, as the model computes it
    /// (`None` for a rate the crate refuses).
    ///
    /// ```
    /// use testkit::driver::bucket::Rate;
    /// assert_eq!(Rate::Second(3).interval_ns(), Some(333_333_334));
    /// assert_eq!(Rate::Second(0).interval_ns(), None);
    /// ```
    pub fn interval_ns(&self) -> Option<u64> {
        reference::interval_ns(self.count(), self.period().as_nanos())
    }

    /// The largest capacity the rate allows (1 for a rate the crate refuses).
    ///
    /// ```
    /// use testkit::driver::bucket::Rate;
    /// assert_eq!(Rate::Second(0).max_capacity(), 1);
    /// assert!(Rate::Second(3).max_capacity() > 3);
    /// ```
    pub fn max_capacity(&self) -> u64 {
        self.interval_ns().map_or(1, reference::max_capacity)
    }

    /// Calls the constructor.
    pub fn build(&self) -> Result<Quota, QuotaError> {
        match *self {
            Rate::Second(n) => Quota::per_second(n),
            Rate::Minute(n) => Quota::per_minute(n),
            Rate::Hour(n) => Quota::per_hour(n),
            Rate::Day(n) => Quota::per_day(n),
            Rate::Period(n, period) => Quota::per_period(n, period),
        }
    }
}

/// A quota as built through the public API: a rate, then optionally `with_capacity` and
/// `with_initial`, in either order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSpec {
    /// The constructor and its arguments.
    pub rate: Rate,
    /// The argument of `with_capacity`, if it is called.
    pub capacity: Option<u64>,
    /// The argument of `with_initial`, if it is called.
    pub initial: Option<u64>,
    /// Whether `with_initial` is called before `with_capacity` (when both are).
    pub initial_first: bool,
}

impl QuotaSpec {
    /// Builds the quota through the crate's API.
    pub fn build(&self) -> Result<Quota, QuotaError> {
        let mut quota = self.rate.build()?;
        if self.initial_first {
            if let Some(tokens) = self.initial {
                quota = quota.with_initial(tokens)?;
            }
        }
        if let Some(capacity) = self.capacity {
            quota = quota.with_capacity(capacity)?;
        }
        if !self.initial_first {
            if let Some(tokens) = self.initial {
                quota = quota.with_initial(tokens)?;
            }
        }
        Ok(quota)
    }

    /// What the documented ranges say `build` returns: the model's constants and the initial fill,
    /// or the field of the first error, following the order of the calls.
    pub fn expected(&self) -> Result<(RefPolicy, u64), &'static str> {
        let count = self.rate.count();
        let period_ns = self.rate.period().as_nanos();
        if count == 0 {
            return Err("count");
        }
        if period_ns == 0 {
            return Err("period");
        }
        let Some(interval_ns) = reference::interval_ns(count, period_ns) else {
            return Err("rate");
        };
        let max = reference::max_capacity(interval_ns);
        // The constructor's capacity is the count.
        if count > max {
            return Err("capacity");
        }
        let mut capacity = count;
        let mut initial = None;
        let set_initial = |capacity: u64, initial: &mut Option<u64>| {
            if let Some(tokens) = self.initial {
                if tokens > capacity {
                    return Err("initial");
                }
                *initial = Some(tokens);
            }
            Ok(())
        };
        if self.initial_first {
            set_initial(capacity, &mut initial)?;
        }
        if let Some(c) = self.capacity {
            if c == 0 || c > max {
                return Err("capacity");
            }
            if initial.is_some_and(|tokens| tokens > c) {
                return Err("initial");
            }
            capacity = c;
        }
        if !self.initial_first {
            set_initial(capacity, &mut initial)?;
        }
        let policy = RefPolicy::new(count, period_ns, capacity).expect("a capacity in range");
        Ok((policy, initial.unwrap_or(capacity)))
    }
}

/// One operation on the bucket: a call every limiter answers, a refund, a reservation and its
/// cancel, a take of up to `n`, or a step of the clock (in the quota's intervals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `try_acquire(_n)`, `peek_n` or `remaining`, through [`crate::driver::limiter::check`].
    Call(Request),
    /// `refund(_at)`.
    Refund {
        /// Tokens given back.
        n: Amount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `reserve_n(_at)`; a reservation granted is held until a [`Op::Cancel`] (or the run's end:
    /// dropped, so kept).
    Reserve {
        /// Tokens reserved.
        n: Amount,
        /// The longest wait accepted.
        wait: Wait,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `cancel(_at)` of the held reservation at this index (modulo their number; nothing when none
    /// is held).
    Cancel {
        /// Which reservation.
        index: u8,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `take_up_to(_at)`.
    TakeUpTo {
        /// At most this many.
        n: Amount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// Moves the clock.
    Time(Step),
}

/// A reservation's `max_wait`, relative to the quota's interval, or at the edges of its accepted
/// range.
///
/// ```
/// use std::time::Duration;
/// use testkit::driver::bucket::Wait;
/// assert_eq!(Wait::Units { num: 3, den: 2 }.resolve(10), Duration::from_nanos(15));
/// assert_eq!(Wait::AboveMax.resolve(10), Duration::from_nanos((1 << 61) + 1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// No wait: a reservation answers as an admission.
    Zero,
    /// `num / den` intervals (den of 0 counts as 1).
    Units {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u8,
    },
    /// Exactly this many nanoseconds (beyond the range for most values).
    Raw(u64),
    /// The longest accepted, `MAX_WAIT`.
    Max,
    /// One nanosecond beyond it.
    AboveMax,
}

impl Wait {
    /// The wait for a quota whose interval is `interval_ns`.
    pub fn resolve(self, interval_ns: u64) -> Duration {
        Duration::from_nanos(match self {
            Wait::Zero => 0,
            Wait::Units { num, den } => Step::Units { num, den }.next(0, interval_ns),
            Wait::Raw(ns) => ns,
            Wait::Max => MAX_WAIT_NS,
            Wait::AboveMax => MAX_WAIT_NS + 1,
        })
    }
}

/// A reservation's answer in plain numbers: `(tokens, delay, ready_at)` or the refusal.
pub type Reserved = Result<(u64, u128, u64), Outcome>;

/// The crate's reservation as [`Reserved`]; `None` for [`ReserveError::MaxWait`].
///
/// # Panics
///
/// On a refusal the kit does not know.
pub fn observe_reservation<L, K>(
    result: &Result<Reservation<'_, L, K>, ReserveError>,
) -> Option<Reserved> {
    Some(match result {
        Ok(r) => Ok((r.tokens(), r.delay().as_nanos(), r.ready_at().as_u64())),
        Err(ReserveError::Denied(d)) => Err(observe_one(Err(*d))),
        Err(ReserveError::InsufficientCapacity(e)) => Err(Outcome::InsufficientCapacity {
            requested: e.requested,
            capacity: e.capacity,
        }),
        Err(ReserveError::MaxWait(_)) => return None,
        Err(other) => panic!("a refusal the model does not know: {other}"),
    })
}

/// The model's reservation as [`Reserved`].
pub fn expected_reservation(r: &Result<RefReservation, Outcome>) -> Reserved {
    match r {
        Ok(r) => Ok((r.tokens, u128::from(r.delay_ns()), r.ready_at_ns)),
        Err(outcome) => Err(outcome.representable()),
    }
}

/// The crate's answer to `take_up_to`, as the tokens taken and an [`Outcome`].
pub fn observe_partial(result: Result<Partial, Denied>) -> (u64, Outcome) {
    match result {
        Ok(p) => (p.taken(), observe_one(Ok(p.admitted()))),
        Err(d) => (0, observe_one(Err(d))),
    }
}

/// What was handed out, for the limit: tokens with the instant (in the model's units) from which
/// they are the caller's, and what was given back; `C + R × t` is checked at every such instant.
#[derive(Debug, Default)]
pub struct Ledger {
    /// `(ready, tokens)`: an admission at its reading, a reservation at its ready instant.
    pub handed: Vec<(i128, u64)>,
    /// Tokens refunded (as asked) or given back by cancels.
    pub given_back: u128,
}

impl Ledger {
    /// Checks that the tokens ready by any instant `T` number at most
    /// `C + ⌊(T - t0) / I⌋ + given back` (units; `T` at least `t0`, the construction's reading).
    pub fn check(&mut self, policy: &RefPolicy, t0: i128, context: &dyn Fn() -> String) {
        self.handed.sort_unstable();
        let mut total = 0u128;
        for &(ready, n) in &self.handed {
            total += u128::from(n);
            let span = (ready.max(t0) - t0) / policy.interval;
            let bound = u128::from(policy.capacity)
                + u128::try_from(span).expect("not negative")
                + self.given_back;
            assert!(
                total <= bound,
                "{total} tokens ready by unit {ready}, above C + R*t (+ given back) = {bound}: {}",
                context()
            );
        }
    }
}

/// Builds the quota both ways and checks they agree. Returns the quota and the model's constants
/// and initial fill when it is valid, `None` when both refuse it.
pub fn check_quota(spec: &QuotaSpec) -> Option<(Quota, RefPolicy, u64)> {
    let built = spec.build();
    match (built, spec.expected()) {
        (Ok(quota), Ok((policy, initial))) => {
            assert_eq!(quota.count(), spec.rate.count(), "count of {spec:?}");
            // The period is reported as given, however long.
            assert_eq!(quota.period(), spec.rate.period(), "period of {spec:?}");
            assert_eq!(
                quota.interval(),
                Duration::from_nanos(policy.interval_ns),
                "interval of {spec:?}"
            );
            assert_eq!(quota.capacity(), policy.capacity, "capacity of {spec:?}");
            assert_eq!(quota.initial(), initial, "initial fill of {spec:?}");
            assert_eq!(
                quota.max_capacity(),
                reference::max_capacity(policy.interval_ns),
                "max_capacity of {spec:?}"
            );
            Some((quota, policy, initial))
        }
        (Err(err), Err(field)) => {
            assert_eq!(err.field(), field, "error {err:?} for {spec:?}");
            None
        }
        (built, expected) => {
            panic!("{spec:?}: the crate built {built:?}, the documented ranges say {expected:?}")
        }
    }
}

/// Runs `ops` on a bucket for `spec` whose clock starts at `start`, comparing every answer, and the
/// tokens remaining after every operation, with the model.
pub fn run(spec: &QuotaSpec, start: u64, ops: &[Op]) {
    let Some((quota, policy, initial)) = check_quota(spec) else {
        return;
    };
    // The bucket's own grid: its construction reading starts a unit.
    let policy = policy.begun_at(start);
    let clock = ManualClock::starting_at(Nanos::new(start));
    let bucket = TokenBucket::with_clock(quota, clock.clone());
    let mut model = RefBucket::new(policy, initial, start).expect("an initial fill in range");
    let capacity = policy.capacity;
    let mut now = start;
    let at_start = || format!("at the start, {spec:?} from {start}");
    check(&bucket, &mut model, Call::Remaining, now, false, &at_start);
    let t0 = policy.reading(start).t;
    let mut ledger = Ledger::default();
    let mut held: Vec<(Reservation<'_, TokenBucket<ManualClock>>, RefReservation)> = Vec::new();
    for (i, &op) in ops.iter().enumerate() {
        let at = Nanos::new(now);
        let units = policy.reading(now).t;
        // Copies of the state before the operation, for the messages.
        let context =
            move || format!("op {i} {op:?} at {now} ns, {spec:?} from {start}, model {model:?}");
        match op {
            Op::Call(request) => {
                let (call, got) = request.check(&bucket, &mut model, capacity, now, &context);
                if call.takes() && got.is_admitted() && call.n() > 0 {
                    ledger.handed.push((units, call.n()));
                }
            }
            Op::Refund { n, clock: read } => {
                let n = n.resolve(capacity);
                if read {
                    bucket.refund(n);
                } else {
                    bucket.refund_at(n, at);
                }
                model.refund(n, now);
                ledger.given_back += u128::from(n);
            }
            Op::Reserve {
                n,
                wait,
                clock: read,
            } => {
                let n = n.resolve(capacity);
                let max_wait = wait.resolve(policy.interval_ns);
                let got = if read {
                    bucket.reserve_n(n, max_wait)
                } else {
                    bucket.reserve_n_at(n, max_wait, at)
                };
                let Some(answer) = observe_reservation(&got) else {
                    assert!(
                        max_wait.as_nanos() > u128::from(MAX_WAIT_NS),
                        "{}",
                        context()
                    );
                    continue;
                };
                let max_wait = u64::try_from(max_wait.as_nanos()).expect("in range");
                assert!(max_wait <= MAX_WAIT_NS, "{}", context());
                let want = model.reserve(n, max_wait, now);
                assert_eq!(
                    answer,
                    expected_reservation(&want),
                    "reserve: {}",
                    context()
                );
                if let (Ok(r), Ok(m)) = (got, want) {
                    if m.tokens > 0 {
                        ledger
                            .handed
                            .push((policy.units_at(u128::from(m.ready_at_ns)), m.tokens));
                        assert!(m.ready_at_ns <= MAX_USABLE_NS + MAX_WAIT_NS);
                    }
                    held.push((r, m));
                }
            }
            Op::Cancel { index, clock: read } => {
                if !held.is_empty() {
                    let (r, m) = held.remove(usize::from(index) % held.len());
                    let back = if read { r.cancel() } else { r.cancel_at(at) };
                    assert_eq!(back, model.cancel(&m, now), "cancel: {}", context());
                    assert!(back <= m.tokens, "{}", context());
                    ledger.given_back += u128::from(back);
                }
            }
            Op::TakeUpTo { n, clock: read } => {
                let n = n.resolve(capacity);
                let got = observe_partial(if read {
                    bucket.take_up_to(n)
                } else {
                    bucket.take_up_to_at(n, at)
                });
                let (k, want) = model.take_up_to(n, now);
                assert_eq!(got, (k, want.representable()), "take up to: {}", context());
                assert!(k <= n && k <= capacity, "{}", context());
                if k > 0 {
                    ledger.handed.push((units, k));
                }
            }
            Op::Time(step) => {
                now = step.apply(&clock, now, policy.interval_ns);
                assert_eq!(
                    bucket.clock().now(),
                    Nanos::new(now),
                    "clock: {}",
                    context()
                );
            }
        }
        let after = || format!("after {}", context());
        check(&bucket, &mut model, Call::Remaining, now, false, &after);
        ledger.check(&policy, t0, &after);
    }
}

/// Checks the rate bound: starting at `start` with the quota's initial fill (at most `C`), the
/// tokens admitted to requests read at `start + offset` for each `(offset, amount)`, in any order and
/// with no refunds, number at most `C + floor((t1 - t0) / I)`, with `t0` the start and `t1` the
/// latest reading in nanoseconds (clamped to `MAX_USABLE`) and `I` the interval in nanoseconds
/// (rounded up to whole units).
///
/// Every answer is also compared with the model. Requests above the capacity are errors and admit
/// nothing; requests for 0 tokens admit nothing.
pub fn check_window(spec: &QuotaSpec, start: u64, requests: &[(u64, Amount)]) {
    let Some((quota, policy, initial)) = check_quota(spec) else {
        return;
    };
    let bucket = TokenBucket::with_clock(quota, ManualClock::starting_at(Nanos::new(start)));
    let mut model =
        RefBucket::new(policy.begun_at(start), initial, start).expect("an initial fill in range");
    let mut admitted: u128 = 0;
    let mut latest = start;
    for &(offset, amount) in requests {
        let at = start.saturating_add(offset);
        latest = latest.max(at);
        let n = amount.resolve(policy.capacity);
        let outcome = observe(bucket.try_acquire_n_at(n, Nanos::new(at)));
        assert_eq!(
            outcome,
            model.acquire(n, at).representable(),
            "acquire {n} at {at}, {spec:?}"
        );
        if matches!(outcome, Outcome::Admitted { .. }) {
            admitted += u128::from(n);
        }
    }
    // In nanoseconds, as the crate promises it: one token per interval rounded up to whole units.
    let t0 = i128::from(policy.reading(start).ns);
    let t1 = i128::from(policy.reading(latest).ns);
    let interval_ns = policy.interval << policy.shift;
    let bound = i128::from(policy.capacity) + (t1 - t0) / interval_ns;
    assert!(
        i128::try_from(admitted).expect("small") <= bound,
        "{admitted} tokens admitted in [{start}, {latest}], bound {bound}: {spec:?}, {requests:?}"
    );
}
