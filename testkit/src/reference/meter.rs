//! An exact reference model of tollgate's `LeakyMeter`, written from the documented semantics.
//!
//! The crate stores one number, the drain time, and compares a backlog with `C × I`. This model
//! keeps the list of every admitted request's departure span `[start, start + n × I)` in `i128`
//! time units, derives the drain time from the list each time it is asked, counts the queue in
//! whole requests (`ceil(backlog / I)`, the wording of the docs), and finds `retry_after` by
//! searching for the earliest reading at which the same request fits, rather than by a formula. It
//! shares no clamp, saturation or wrap-around of the crate's `u64` arithmetic. Its answers must equal
//! the crate's to the nanosecond.
//!
//! It depends on nothing but the bucket model (for the documented time units of a quota:
//! [`RefPolicy`] and [`Reading`]).
//!
//! # The semantics modelled (the meter's module docs)
//!
//! - Time units, the interval `I` and the reading's split into `t` (rounded down) and `sub` are the
//!   token bucket's ([`RefPolicy`]); the window `C × I` is its burst window.
//! - The drain time `D` is the end of the last departure span, and never earlier than the reading
//!   at which the meter was built (a reading before that sees a backlog, never a freer queue).
//! - The queue at reading `t` holds `ceil(max(0, D - t) / I)` requests.
//! - A scheduling of `n` (1 ..= C) at `t` starts at `max(D, t_up)` and fits when the queue it leaves,
//!   `ceil((max(D, t) + n × I - t) / I)`, is at most `C`.
//! - A strict admission of `n` fits when `D <= t`, and occupies `[t_up, t_up + n × I)`.
//! - `n = 0` is a query; `n > C` is refused for ever.

use crate::reference::bucket::{Reading, RefPolicy};
use crate::Outcome;

/// What the model answers to a scheduling: the crate's `Result<Scheduled, AcquireError>`, flattened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefSchedule {
    /// Scheduled (or a query for zero places).
    Scheduled {
        /// Nanoseconds from the (clamped) reading to the departure.
        delay_ns: u128,
        /// The departure instant, saturating at `u64::MAX`.
        depart_at_ns: u64,
        /// Requests queued once this one joined.
        queued: u64,
        /// Free places left.
        remaining: u64,
        /// Nanoseconds until the queue is empty.
        reset_after_ns: u128,
        /// Nanoseconds until one more place is free (`None`: the queue is empty).
        next_after_ns: Option<u128>,
    },
    /// Refused, as every limiter refuses: [`Outcome::Denied`] for now (its `remaining` the free
    /// places at the reading, its reset the time until the queue is empty), or
    /// [`Outcome::InsufficientCapacity`] for ever.
    Refused(Outcome),
}

/// One admitted request: it leaves at `start` and holds the queue for `n` intervals (units).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Departure {
    /// The departure instant, in units.
    pub start: i128,
    /// Places taken.
    pub n: u64,
}

/// The model meter: the departure list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefMeter {
    policy: RefPolicy,
    /// The reading the meter was built at, in units.
    built: i128,
    /// Every admitted request, in the order admitted (the construction's virtual backlog first).
    departures: Vec<Departure>,
}

impl RefMeter {
    /// A meter with `free` places free as of `now_ns` (the rest taken by requests leaving from the
    /// reading rounded up), or `None` for `free > capacity`.
    pub fn new(policy: RefPolicy, free: u64, now_ns: u64) -> Option<RefMeter> {
        if free > policy.capacity {
            return None;
        }
        let at = policy.reading(now_ns);
        let mut departures = Vec::new();
        let taken = policy.capacity - free;
        if taken > 0 {
            departures.push(Departure {
                start: at.t_up(),
                n: taken,
            });
        }
        Some(RefMeter {
            policy,
            built: at.t,
            departures,
        })
    }

    /// The admitted departures so far.
    pub fn departures(&self) -> &[Departure] {
        &self.departures
    }

    /// The interval, in units.
    fn interval(&self) -> i128 {
        self.policy.interval
    }

    /// The drain time: the end of the last departure span, never before the construction.
    fn drain(&self) -> i128 {
        self.departures
            .iter()
            .map(|d| d.start + i128::from(d.n) * self.interval())
            .fold(self.built, i128::max)
    }

    /// Requests in the queue at `t` units, if the queue drains at `drain`.
    fn queue_len(&self, drain: i128, t: i128) -> i128 {
        let backlog = (drain - t).max(0);
        (backlog + self.interval() - 1) / self.interval()
    }

    /// Nanoseconds from the reading `at` to the unit `units` (at least zero).
    fn ns_from(&self, units: i128, at: Reading) -> u128 {
        let ns = u128::try_from(units).expect("a non-negative instant") << self.policy.shift;
        ns.saturating_sub(u128::from(at.ns) + u128::from(self.policy.lead))
    }

    /// Free places at `t`: `C` minus the queue, at least 0.
    fn free_at(&self, drain: i128, t: i128) -> u64 {
        let free = i128::from(self.policy.capacity) - self.queue_len(drain, t);
        u64::try_from(free.max(0)).expect("at most C")
    }

    /// Nanoseconds from the reading `at` until a queue draining at `drain` has more than `free`
    /// places free: the first whole unit `t >= at.t` with `C - ceil((drain - t) / I) > free`,
    /// searched for. `None` when `free` is the capacity (the queue is empty).
    fn next_after(&self, drain: i128, free: u64, at: Reading) -> Option<u128> {
        if free >= self.policy.capacity {
            return None;
        }
        // No place is free beyond the capacity, and all are once drained.
        let (mut lo, mut hi) = (at.t, drain.max(at.t));
        if self.free_at(drain, lo) > free {
            return Some(0);
        }
        // Invariant: not more at lo, more at hi.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.free_at(drain, mid) > free {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Some(self.ns_from(hi, at))
    }

    /// Whether a scheduling of `n` read at `t` units fits a queue draining at `drain`.
    fn fits(&self, drain: i128, t: i128, n: u64) -> bool {
        let after = drain.max(t) + i128::from(n) * self.interval();
        self.queue_len(after, t) <= i128::from(self.policy.capacity)
    }

    /// The earliest whole unit after `t` at which [`RefMeter::fits`] holds, by binary search (it
    /// holds once the queue has drained, since `n <= C`).
    fn earliest_fit(&self, drain: i128, t: i128, n: u64) -> i128 {
        let (mut lo, mut hi) = (t, drain.max(t + 1));
        assert!(self.fits(drain, hi, n), "no fit once drained");
        // Invariant: no fit at lo, a fit at hi.
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.fits(drain, mid, n) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }

    /// The denial at `at` of a request that first fits at `retry_at_units`.
    fn denied(&self, drain: i128, at: Reading, retry_at_units: i128) -> Outcome {
        let retry_after_ns = self.ns_from(retry_at_units, at);
        let retry_at = u128::from(at.ns) + retry_after_ns;
        let free = self.free_at(drain, at.t);
        Outcome::denied_until(
            retry_after_ns,
            u64::try_from(retry_at).unwrap_or(u64::MAX),
            free,
            self.ns_from(drain.max(at.t), at),
            self.next_after(drain, free, at),
        )
    }

    fn decide_schedule(&self, n: u64, now_ns: u64) -> (RefSchedule, Option<Departure>) {
        let p = &self.policy;
        let at = p.reading(now_ns);
        if n > p.capacity {
            let outcome = Outcome::InsufficientCapacity {
                requested: n,
                capacity: p.capacity,
            };
            return (RefSchedule::Refused(outcome), None);
        }
        let drain = self.drain();
        let start = drain.max(at.t_up());
        let scheduled = |queued: i128, drain_after: i128, free: u64| {
            let delay_ns = self.ns_from(start, at);
            let depart = u128::from(at.ns) + delay_ns;
            RefSchedule::Scheduled {
                delay_ns,
                depart_at_ns: u64::try_from(depart).unwrap_or(u64::MAX),
                queued: u64::try_from(queued).expect("a queue of at most 2^64"),
                remaining: free,
                reset_after_ns: self.ns_from(drain_after.max(at.t), at),
                next_after_ns: self.next_after(drain_after, free, at),
            }
        };
        if n == 0 {
            let free = self.free_at(drain, at.t);
            return (scheduled(self.queue_len(drain, at.t), drain, free), None);
        }
        if self.fits(drain, at.t, n) {
            let departure = Departure { start, n };
            // The queue is counted from the reading rounded down, whatever unit the request starts.
            let queued = self.queue_len(drain.max(at.t) + i128::from(n) * self.interval(), at.t);
            let drain_after = start + i128::from(n) * self.interval();
            let free = u64::try_from(i128::from(p.capacity) - queued).expect("fits");
            let outcome = scheduled(queued, drain_after, free);
            (outcome, Some(departure))
        } else {
            let retry = self.earliest_fit(drain, at.t, n);
            (RefSchedule::Refused(self.denied(drain, at, retry)), None)
        }
    }

    fn decide_acquire(&self, n: u64, now_ns: u64) -> (Outcome, Option<Departure>) {
        let p = &self.policy;
        let at = p.reading(now_ns);
        if n > p.capacity {
            let outcome = Outcome::InsufficientCapacity {
                requested: n,
                capacity: p.capacity,
            };
            return (outcome, None);
        }
        let drain = self.drain();
        if n == 0 {
            let free = self.free_at(drain, at.t);
            let outcome = Outcome::Admitted {
                remaining: free,
                reset_after_ns: self.ns_from(drain.max(at.t), at),
                next_after_ns: self.next_after(drain, free, at),
            };
            return (outcome, None);
        }
        if drain <= at.t {
            let departure = Departure {
                start: at.t_up(),
                n,
            };
            let drain_after = at.t_up() + i128::from(n) * self.interval();
            let outcome = Outcome::Admitted {
                // n places taken from an empty queue.
                remaining: p.capacity - n,
                reset_after_ns: self.ns_from(drain_after, at),
                next_after_ns: self.next_after(drain_after, p.capacity - n, at),
            };
            (outcome, Some(departure))
        } else {
            // The same request fits exactly when the queue is empty: at the drain time.
            (self.denied(drain, at, drain), None)
        }
    }

    fn admit(&mut self, departure: Option<Departure>) {
        if let Some(d) = departure {
            assert!(d.start >= self.drain(), "a departure before the drain time");
            self.departures.push(d);
        }
    }

    /// Schedules `n` places at `now_ns` if they fit (`n = 0` is a query).
    pub fn schedule(&mut self, n: u64, now_ns: u64) -> RefSchedule {
        let (outcome, departure) = self.decide_schedule(n, now_ns);
        self.admit(departure);
        outcome
    }

    /// What [`RefMeter::schedule`] would answer, admitting nothing.
    pub fn peek_schedule(&self, n: u64, now_ns: u64) -> RefSchedule {
        self.decide_schedule(n, now_ns).0
    }

    /// Admits `n` to leave at once at `now_ns` if the queue is empty (`n = 0` is a query).
    pub fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome {
        let (outcome, departure) = self.decide_acquire(n, now_ns);
        self.admit(departure);
        outcome
    }

    /// What [`RefMeter::acquire`] would answer, admitting nothing.
    pub fn peek(&self, n: u64, now_ns: u64) -> Outcome {
        self.decide_acquire(n, now_ns).0
    }

    /// Free places at `now_ns`.
    pub fn remaining(&self, now_ns: u64) -> u64 {
        self.free_at(self.drain(), self.policy.reading(now_ns).t)
    }
}
