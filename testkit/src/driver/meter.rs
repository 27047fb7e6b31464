//! Drives a [`LeakyMeter`] and the reference model ([`crate::reference::meter`]) through the same
//! operations and asserts that every answer is identical, to the nanosecond.
//!
//! Used by `tests/leaky_meter_model.rs` (proptest) and the fuzz crate's `leaky_ops` target
//! (arbitrary), with the bucket driver's quota specs. The strict calls go through
//! [`crate::driver::limiter`], the clock moves by [`Step`]s; scheduling is this driver's own.

use std::time::Duration;

use tollgate::{leaky::LeakyMeter, AcquireError, Clock, ManualClock, Nanos, Scheduled};

use crate::consts::MAX_USABLE_NS;
use crate::driver::bucket::{check_quota, QuotaSpec};
use crate::driver::limiter::{check, Amount, Call, Request};
use crate::driver::step::Step;
use crate::outcome::observe;
use crate::reference::meter::{RefMeter, RefSchedule};

/// One operation on the meter: a (strict) call every limiter answers, a scheduling call, or a
/// step of the clock (in the quota's intervals). `clock: true` uses the method that reads the
/// meter's clock, `false` the `_at` form with the same reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MeterOp {
    /// Strict `try_acquire(_n)`, `peek_n` or `remaining`, through
    /// [`crate::driver::limiter::check`].
    Call(Request),
    /// `try_schedule_n(_at)`.
    Schedule {
        /// Places asked for.
        n: Amount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `try_schedule(_at)`: one place.
    ScheduleOne {
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `peek_schedule_n(_at)`.
    PeekSchedule {
        /// Places asked about.
        n: Amount,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// Moves the clock.
    Time(Step),
}

/// The crate's answer to `try_schedule_n` and `peek_schedule_n`, in the model's terms.
pub fn observe_schedule(result: Result<Scheduled, AcquireError>) -> RefSchedule {
    match result {
        Ok(s) => RefSchedule::Scheduled {
            delay_ns: s.delay().as_nanos(),
            depart_at_ns: s.depart_at().as_u64(),
            queued: s.queued(),
            remaining: s.remaining(),
            reset_after_ns: s.reset_after().as_nanos(),
            next_after_ns: s.next_after().map(|d| d.as_nanos()),
        },
        // Refused as every limiter refuses (`observe` panics on a kind the model does not know).
        Err(e) => RefSchedule::Refused(observe(Err(e))),
    }
}

/// The model's answer as the crate can report it: durations stop at `Duration::MAX`.
pub fn representable_schedule(outcome: RefSchedule) -> RefSchedule {
    let max = Duration::MAX.as_nanos();
    match outcome {
        RefSchedule::Scheduled {
            delay_ns,
            depart_at_ns,
            queued,
            remaining,
            reset_after_ns,
            next_after_ns,
        } => RefSchedule::Scheduled {
            delay_ns: delay_ns.min(max),
            depart_at_ns,
            queued,
            remaining,
            reset_after_ns: reset_after_ns.min(max),
            next_after_ns: next_after_ns.map(|n| n.min(max)),
        },
        RefSchedule::Refused(refusal) => RefSchedule::Refused(refusal.representable()),
    }
}

/// Runs `ops` on a meter for `spec` whose clock starts at `start`, comparing every answer, and the
/// free places after every operation, with the model.
pub fn run(spec: &QuotaSpec, start: u64, ops: &[MeterOp]) {
    let Some((quota, policy, initial)) = check_quota(spec) else {
        return;
    };
    let clock = ManualClock::starting_at(Nanos::new(start));
    let meter = LeakyMeter::with_clock(quota, clock.clone());
    let mut model =
        RefMeter::new(policy.begun_at(start), initial, start).expect("an initial fill in range");
    let capacity = policy.capacity;
    let mut now = start;
    let at_start = || format!("at the start, {spec:?} from {start}");
    check(&meter, &mut model, Call::Remaining, now, false, &at_start);
    for (i, &op) in ops.iter().enumerate() {
        let at = Nanos::new(now);
        // The reading and the state before the operation, for the messages.
        let state = format!("{meter:?}");
        let context = move || format!("op {i} {op:?} at {now} ns, {spec:?} from {start}, {state}");
        match op {
            MeterOp::Schedule { n, clock: read } => {
                let n = n.resolve(capacity);
                let got = if read {
                    meter.try_schedule_n(n)
                } else {
                    meter.try_schedule_n_at(n, at)
                };
                check_schedule(got, model.schedule(n, now), &context);
            }
            MeterOp::ScheduleOne { clock: read } => {
                let got = if read {
                    meter.try_schedule()
                } else {
                    meter.try_schedule_at(at)
                };
                let got = got.map_err(AcquireError::Denied);
                check_schedule(got, model.schedule(1, now), &context);
            }
            MeterOp::PeekSchedule { n, clock: read } => {
                let n = n.resolve(capacity);
                let got = if read {
                    meter.peek_schedule_n(n)
                } else {
                    meter.peek_schedule_n_at(n, at)
                };
                check_schedule(got, model.peek_schedule(n, now), &context);
            }
            MeterOp::Call(request) => {
                request.check(&meter, &mut model, capacity, now, &context);
            }
            MeterOp::Time(step) => {
                now = step.apply(&clock, now, policy.interval_ns);
                assert_eq!(meter.clock().now(), Nanos::new(now), "clock: {}", context());
            }
        }
        let after = || format!("after {}", context());
        check(&meter, &mut model, Call::Remaining, now, false, &after);
    }
}

/// Asserts that the meter's answer to a scheduling call is the model's, as the crate can report it.
fn check_schedule(
    got: Result<Scheduled, AcquireError>,
    want: RefSchedule,
    context: &dyn Fn() -> String,
) {
    let want = representable_schedule(want);
    assert_eq!(observe_schedule(got), want, "{}", context());
}

/// Checks the promise callers rely on, independently of the model: requests read at
/// `start + offset` for each `(offset, amount, strict)`, in any order, scheduled
/// (`strict == false`) or strictly acquired, are given departure spans `[depart, depart + n × I)`
/// (`I` in nanoseconds, rounded up to whole units) that never overlap, never start before their
/// reading, and never end more than `C × I` after it (rounded up to a whole unit), so the virtual
/// queue never holds more than `C`.
pub fn check_departures(spec: &QuotaSpec, start: u64, requests: &[(u64, Amount, bool)]) {
    let Some((quota, policy, _)) = check_quota(spec) else {
        return;
    };
    let meter = LeakyMeter::with_clock(quota, ManualClock::starting_at(Nanos::new(start)));
    let interval_ns = u128::try_from(policy.interval << policy.shift).expect("positive");
    let unit = 1u128 << policy.shift;
    let window = u128::from(policy.capacity) * interval_ns;
    // (departure, places) of every admission.
    let mut spans: Vec<(u128, u64)> = Vec::new();
    for &(offset, amount, strict) in requests {
        let reading = start.saturating_add(offset).min(MAX_USABLE_NS);
        let at = Nanos::new(start.saturating_add(offset));
        let n = amount.resolve(policy.capacity);
        let depart = if strict {
            match meter.try_acquire_n_at(n, at) {
                // Leaves at once, no later than the reading rounded up to a whole unit.
                // (on the meter's grid, whose units start at its construction reading).
                Ok(_) if n > 0 => {
                    let lead = u128::from(policy.begun_at(start).lead);
                    (u128::from(reading) + lead).div_ceil(unit) * unit - lead
                }
                _ => continue,
            }
        } else {
            match meter.try_schedule_n_at(n, at) {
                // A delay past `Duration::MAX` (a queue of 584 billion years) is reported
                // saturated: nothing after it can be placed exactly.
                Ok(s) if s.delay() == Duration::MAX => return,
                Ok(s) if n > 0 => {
                    assert!(s.queued() <= policy.capacity, "{s:?}, {spec:?}");
                    // Not `depart_at`, which saturates at u64::MAX for a queue centuries long.
                    u128::from(reading) + s.delay().as_nanos()
                }
                _ => continue,
            }
        };
        let end = depart + u128::from(n) * interval_ns;
        assert!(depart >= u128::from(reading), "departs before its reading");
        assert!(
            end <= u128::from(reading) + window + unit,
            "a backlog over C: {end} after {reading}, {spec:?}"
        );
        spans.push((depart, n));
    }
    spans.sort_unstable();
    for pair in spans.windows(2) {
        let ((d0, n0), (d1, _)) = (pair[0], pair[1]);
        assert!(
            d1 >= d0 + u128::from(n0) * interval_ns,
            "departures {d0} (x{n0}) and {d1} overlap: {spec:?} from {start}"
        );
    }
}
