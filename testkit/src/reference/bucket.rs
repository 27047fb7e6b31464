//! An exact reference model of tollgate's token bucket, written from the documented semantics.
//!
//! The crate stores one number, a GCRA theoretical arrival time. This model does not: it keeps the
//! classic pair `(level, last)`, a level in time units (`tokens × I`) as of the reading `last`, and
//! computes everything in `i128`/`u128`, so no clamp, saturation or wrap-around of the crate's `u64`
//! arithmetic is shared with it. Its answers must equal the crate's to the nanosecond.
//!
//! It depends on nothing of the crate: it answers in [`Outcome`]s, plain numbers.
//!
//! # The semantics modelled
//!
//! - Interval in nanoseconds: `I_ns = ceil(P / n_q)` for `n_q` tokens per period `P`.
//! - Time unit: `2^k` ns, `k` the smallest with `C × ceil(I_ns / 2^k) <= 2^62`, never above
//!   `max_shift(I_ns)`. Interval in units `I = ceil(I_ns / 2^k)`, burst window `B = C × I`.
//! - A reading is clamped to `2^62` ns, then split into `t = (ns + lead) >> k` units and
//!   `sub = (ns + lead) mod 2^k`. `lead` is 0 but for a direct limiter, whose units are laid so
//!   that its construction reading starts one ([`RefPolicy::begun_at`]): a full bucket is then
//!   full as of its construction reading exactly, not as of up to one unit before it.
//! - The level at `t` is `f(t) = min(B, level + (t - last))`, for `t` before or after `last`; it
//!   may be negative (a reading earlier than one already applied).
//! - **Reserving `n`** (`1 <= n <= C`) with `max_wait`: admitted as a request for `n` is when
//!   `f(t) >= n × I` (ready at the reading); otherwise the wait is `(n × I - f(t))` units, as
//!   nanoseconds from the reading; within `max_wait` the level becomes `f(t) - n × I` (negative:
//!   debt) as of `t`, ready at the reading plus the wait; beyond it, a denial whose `retry_after` is
//!   the wait less `max_wait`. `n = 0` reserves nothing, ready at the reading.
//! - **Cancelling** a reservation at a reading after its ready instant gives back nothing;
//!   otherwise its tokens less `⌈(z_now - z_r) / I⌉` (never negative), with `z = last - level + B`
//!   the instant (in units) at which the bucket would be full again, now and just after the
//!   reservation: as many of those as fit below `B` (`min(k, ⌈(B - f(t)) / I⌉)`, each refunded).
//! - **Taking up to `n`** (`n >= 1`) takes `min(n, whole tokens)` as a request for that many, or,
//!   with no whole token, answers the denial of one token; `n = 0` is a query.
//! - Durations reported are `(units << k) - sub` nanoseconds, at least zero, exact in `u128`. (The
//!   crate reports them as `Duration`s, which stop at `Duration::MAX`; the comparison in
//!   [`Outcome::representable`] caps the model's values there, and only there.)

use std::cmp::min;

use crate::consts::{MAX_USABLE_NS, MAX_WAIT_NS};
use crate::Outcome;

/// The largest burst window, in time units.
const MAX_WINDOW: u128 = 1 << 62;

/// The coarsest time-unit exponent allowed for an interval of `interval_ns` nanoseconds:
/// `floor(log2(interval_ns / 1024))`, or 0 when that quotient is 0.
pub fn max_shift(interval_ns: u64) -> u32 {
    let ratio = interval_ns / 1024;
    let mut shift = 0;
    while ratio >> (shift + 1) != 0 {
        shift += 1;
    }
    shift
}

/// The interval `ceil(period_ns / count)` in nanoseconds, if the rate is representable: `count`
/// at least 1, `period_ns` at least `count` (at most one token per nanosecond), and the interval at
/// most 2^62 ns.
pub fn interval_ns(count: u64, period_ns: u128) -> Option<u64> {
    if count == 0 || period_ns == 0 || u128::from(count) > period_ns {
        return None;
    }
    let interval = period_ns.div_ceil(u128::from(count));
    if interval > u128::from(MAX_USABLE_NS) {
        return None;
    }
    u64::try_from(interval).ok()
}

/// The largest capacity at an interval of `interval_ns`: `2^62 / ceil(interval_ns / 2^max_shift)`.
pub fn max_capacity(interval_ns: u64) -> u64 {
    let unit_interval = u128::from(interval_ns).div_ceil(1u128 << max_shift(interval_ns));
    u64::try_from(MAX_WINDOW / unit_interval).expect("2^62 / x fits a u64")
}

/// The model's constants for one quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefPolicy {
    /// The capacity `C`, in tokens.
    pub capacity: u64,
    /// The interval `ceil(P / n_q)`, in nanoseconds.
    pub interval_ns: u64,
    /// The time-unit exponent `k`: one unit is `2^k` ns.
    pub shift: u32,
    /// The interval `I`, in units.
    pub interval: i128,
    /// The burst window `B = C × I`, in units.
    pub burst: i128,
    /// Added to a reading before it is split into units: 0, or for a direct limiter what aligns
    /// its construction reading on a unit (see [`RefPolicy::begun_at`]).
    pub lead: u64,
}

impl RefPolicy {
    /// The constants for `count` tokens per `period_ns` with a capacity of `capacity`, or `None`
    /// where the documented ranges refuse them (a bad rate, or a capacity outside
    /// `1 ..= max_capacity`).
    pub fn new(count: u64, period_ns: u128, capacity: u64) -> Option<RefPolicy> {
        let interval_ns = interval_ns(count, period_ns)?;
        if capacity == 0 || capacity > max_capacity(interval_ns) {
            return None;
        }
        let max = max_shift(interval_ns);
        let mut shift = 0;
        let unit_interval = loop {
            let unit_interval = u128::from(interval_ns).div_ceil(1u128 << shift);
            if u128::from(capacity) * unit_interval <= MAX_WINDOW {
                break unit_interval;
            }
            // The capacity check above guarantees that `max` fits.
            assert!(
                shift < max,
                "no time unit up to 2^{max} fits the burst window"
            );
            shift += 1;
        };
        let interval = i128::try_from(unit_interval).expect("an interval of at most 2^62");
        Some(RefPolicy {
            capacity,
            interval_ns,
            shift,
            interval,
            burst: i128::from(capacity) * interval,
            lead: 0,
        })
    }

    /// The policy of a direct limiter built at `now_ns`: its units are laid so that its
    /// construction reading (clamped) starts one, `lead = -now mod 2^k` being added to every
    /// reading. A keyed limiter's keys share the plain grid.
    pub fn begun_at(self, now_ns: u64) -> RefPolicy {
        let mask = (1u64 << self.shift) - 1;
        RefPolicy {
            lead: min(now_ns, MAX_USABLE_NS).wrapping_neg() & mask,
            ..self
        }
    }

    /// An instant in nanoseconds (any `u128`) in whole units on this policy's grid, rounded down.
    pub fn units_at(&self, ns: u128) -> i128 {
        i128::try_from((ns + u128::from(self.lead)) >> self.shift).expect("below 2^127")
    }

    /// A reading as the model uses it.
    pub fn reading(&self, now_ns: u64) -> Reading {
        let ns = min(now_ns, MAX_USABLE_NS);
        let at = u128::from(ns) + u128::from(self.lead);
        Reading {
            ns,
            t: i128::try_from(at >> self.shift).expect("below 2^63"),
            sub: at & ((1u128 << self.shift) - 1),
        }
    }

    /// `(units << k) - sub` nanoseconds, saturating at zero. `units` is never negative here; a
    /// negative one is a bug in the model and panics.
    fn span_ns(&self, units: i128, at: Reading) -> u128 {
        let units = u128::try_from(units).expect("a span of a negative number of units");
        (units << self.shift).saturating_sub(at.sub)
    }

    /// Whole tokens in a level of `level` units.
    fn tokens(&self, level: i128) -> u64 {
        u64::try_from(level.max(0) / self.interval).expect("a level of at most B")
    }
}

/// A clock reading in the model's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The reading in nanoseconds, clamped to [`MAX_USABLE_NS`].
    pub ns: u64,
    /// The reading in whole units.
    pub t: i128,
    /// The nanoseconds below one unit.
    pub sub: u128,
}

impl Reading {
    /// The reading rounded up to a whole unit.
    pub fn t_up(&self) -> i128 {
        self.t + i128::from(self.sub != 0)
    }
}

/// The model bucket: `(level, last)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefBucket {
    policy: RefPolicy,
    /// The level in units as of `last`; may be negative, never above `B`.
    level: i128,
    /// The reading, in units, the level was last set at.
    last: i128,
}

impl RefBucket {
    /// A bucket holding `initial` tokens as of the reading `now_ns`, or `None` for
    /// `initial > capacity`.
    pub fn new(policy: RefPolicy, initial: u64, now_ns: u64) -> Option<RefBucket> {
        if initial > policy.capacity {
            return None;
        }
        let at = policy.reading(now_ns);
        // A bucket that is not full starts refilling at the first whole unit at or after the
        // reading, never before it (only matters for units coarser than 1 ns).
        let last = if initial < policy.capacity {
            at.t_up()
        } else {
            at.t
        };
        Some(RefBucket {
            policy,
            level: i128::from(initial) * policy.interval,
            last,
        })
    }

    /// The level function `f(t) = min(B, level + (t - last))`.
    fn level_at(&self, t: i128) -> i128 {
        min(self.policy.burst, self.level + (t - self.last))
    }

    /// The answer to a request for `n` tokens at `now_ns`, and the state to move to on admission.
    fn decide(&self, n: u64, now_ns: u64) -> (Outcome, Option<(i128, i128)>) {
        let p = &self.policy;
        let at = p.reading(now_ns);
        if n > p.capacity {
            let outcome = Outcome::InsufficientCapacity {
                requested: n,
                capacity: p.capacity,
            };
            return (outcome, None);
        }
        let lvl = self.level_at(at.t);
        if n == 0 {
            let remaining = p.tokens(lvl);
            let outcome = Outcome::Admitted {
                remaining,
                reset_after_ns: p.span_ns(p.burst - lvl, at),
                next_after_ns: self.next_after(remaining, at),
            };
            return (outcome, None);
        }
        let cost = i128::from(n) * p.interval;
        if lvl >= cost {
            let left = lvl - cost;
            // Taking from a full bucket starts its refill at the first whole unit at or after the
            // reading, so no refill is credited for time before the reading.
            let last = if lvl == p.burst { at.t_up() } else { at.t };
            let after = RefBucket {
                level: left,
                last,
                ..*self
            };
            let remaining = p.tokens(left);
            let outcome = Outcome::Admitted {
                remaining,
                reset_after_ns: p.span_ns(p.burst - left, at),
                next_after_ns: after.next_after(remaining, at),
            };
            (outcome, Some((left, last)))
        } else {
            let retry_after_ns = p.span_ns(cost - lvl, at);
            let retry_at = u128::from(at.ns) + retry_after_ns;
            let remaining = p.tokens(lvl);
            let outcome = Outcome::Denied {
                retry_after_ns,
                retry_at_ns: u64::try_from(retry_at).unwrap_or(u64::MAX),
                remaining,
                reset_after_ns: p.span_ns(p.burst - lvl, at),
                next_after_ns: self.next_after(remaining, at),
            };
            (outcome, None)
        }
    }

    /// Nanoseconds from the reading `at` until this bucket, left alone, holds `remaining + 1` whole
    /// tokens: the first whole unit `t >= at.t` with `f(t) >= (remaining + 1) × I`. `None` when
    /// `remaining` is the capacity (the bucket is full: nothing is taken).
    fn next_after(&self, remaining: u64, at: Reading) -> Option<u128> {
        let p = &self.policy;
        if remaining >= p.capacity {
            return None;
        }
        let want = i128::from(remaining + 1) * p.interval;
        // f(t) = level + (t - last) below B reaches `want` (<= B) at t = last + want - level.
        let t = (self.last + want - self.level).max(at.t);
        Some(p.span_ns(t - at.t, at))
    }

    /// Nanoseconds from `now_ns` until the bucket, left alone, holds one more whole token than it
    /// does at `now_ns`; `None` when it is full (for the sharded model).
    pub fn next_token_ns(&self, now_ns: u64) -> Option<u128> {
        let at = self.policy.reading(now_ns);
        self.next_after(self.policy.tokens(self.level_at(at.t)), at)
    }

    /// Takes `n` tokens at `now_ns` if they are there (`n = 0` is a query).
    pub fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome {
        let (outcome, next) = self.decide(n, now_ns);
        if let Some((level, last)) = next {
            self.level = level;
            self.last = last;
        }
        outcome
    }

    /// What [`RefBucket::acquire`] would answer, without taking anything.
    pub fn peek(&self, n: u64, now_ns: u64) -> Outcome {
        self.decide(n, now_ns).0
    }

    /// Gives back `min(n, C)` tokens at `now_ns`, never above the capacity; nothing happens for
    /// `n = 0` or a bucket already full at `now_ns`.
    pub fn refund(&mut self, n: u64, now_ns: u64) {
        let p = self.policy;
        let t = p.reading(now_ns).t;
        let lvl = self.level_at(t);
        if n == 0 || lvl == p.burst {
            return;
        }
        let back = i128::from(min(n, p.capacity)) * p.interval;
        self.level = min(p.burst, lvl + back);
        self.last = t;
    }

    /// Whole tokens at `now_ns`.
    pub fn remaining(&self, now_ns: u64) -> u64 {
        let p = &self.policy;
        p.tokens(self.level_at(p.reading(now_ns).t))
    }
}

/// A reservation as the model keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefReservation {
    /// Tokens reserved.
    pub tokens: u64,
    /// The reading the decision used, clamped.
    pub now_ns: u64,
    /// When the tokens are the caller's.
    pub ready_at_ns: u64,
    /// The instant, in units, at which the bucket would be full again just after the reservation.
    pub full_at: i128,
}

impl RefReservation {
    /// Nanoseconds from the reading to the ready instant.
    pub fn delay_ns(&self) -> u64 {
        self.ready_at_ns - self.now_ns
    }
}

impl RefBucket {
    /// The instant, in units, at which the bucket is full again if nothing else happens (the
    /// level line reaches `B`).
    fn full_at(&self) -> i128 {
        self.last - self.level + self.policy.burst
    }

    /// `reserve_n_at(n, max_wait, now)` for a `max_wait` within the accepted range: the
    /// reservation, or the refusal (a denial, or insufficient capacity).
    pub fn reserve(
        &mut self,
        n: u64,
        max_wait_ns: u64,
        now_ns: u64,
    ) -> Result<RefReservation, Outcome> {
        let p = self.policy;
        let at = p.reading(now_ns);
        let reserved = |tokens, ready_at_ns, full_at| RefReservation {
            tokens,
            now_ns: at.ns,
            ready_at_ns,
            full_at,
        };
        if n > p.capacity {
            return Err(self.decide(n, now_ns).0);
        }
        if n == 0 {
            return Ok(reserved(0, at.ns, 0));
        }
        let lvl = self.level_at(at.t);
        let cost = i128::from(n) * p.interval;
        if lvl >= cost {
            let outcome = self.acquire(n, now_ns);
            assert!(outcome.is_admitted(), "{n} tokens are there: {outcome:?}");
            return Ok(reserved(n, at.ns, self.full_at()));
        }
        let wait_ns = p.span_ns(cost - lvl, at);
        if wait_ns > u128::from(max_wait_ns) {
            // `wait - max_wait`, in whole units of the bucket's time from the reading (exact
            // with nanosecond units; rounded up to the unit with coarser ones).
            let target = wait_ns - u128::from(max_wait_ns);
            let units = (target + at.sub).div_ceil(1u128 << p.shift);
            let retry_after_ns = p.span_ns(i128::try_from(units).expect("below the wait"), at);
            return Err(Outcome::Denied {
                retry_after_ns,
                retry_at_ns: u64::try_from(u128::from(at.ns) + retry_after_ns).unwrap_or(u64::MAX),
                remaining: p.tokens(lvl),
                reset_after_ns: p.span_ns(p.burst - lvl, at),
                next_after_ns: self.next_after(p.tokens(lvl), at),
            });
        }
        self.level = lvl - cost;
        self.last = at.t;
        let ready = u64::try_from(u128::from(at.ns) + wait_ns).expect("2^62 + 2^61 fits");
        Ok(reserved(n, ready, self.full_at()))
    }

    /// `Reservation::cancel_at(now)`: answers how many tokens went back.
    pub fn cancel(&mut self, r: &RefReservation, now_ns: u64) -> u64 {
        let at = self.policy.reading(now_ns);
        if r.tokens == 0 || at.ns > r.ready_at_ns {
            return 0;
        }
        self.give_back(r, now_ns)
    }

    /// What a cancel gives back once it is known that the reservation's time has not passed (for
    /// a sharded reservation, judged on the whole reservation): its tokens less those taken after
    /// it, as many as fit.
    pub fn give_back(&mut self, r: &RefReservation, now_ns: u64) -> u64 {
        let after = (self.full_at() - r.full_at).max(0);
        let depends = after.div_euclid(self.policy.interval)
            + i128::from(after.rem_euclid(self.policy.interval) != 0);
        let k = i128::from(r.tokens) - depends;
        if k <= 0 {
            return 0;
        }
        self.refund_up_to(u64::try_from(k).expect("at most the tokens"), now_ns)
    }

    /// Gives back up to `n` tokens, as many as fit below `B` at `now_ns` (the last may only part
    /// fit: `min(n, ⌈(B - f(t)) / I⌉)`); answers how many.
    pub fn refund_up_to(&mut self, n: u64, now_ns: u64) -> u64 {
        let p = self.policy;
        let missing = p.burst - self.level_units(now_ns);
        if n == 0 || missing <= 0 {
            return 0;
        }
        let whole = (missing + p.interval - 1) / p.interval;
        let k = u64::try_from(whole).unwrap_or(u64::MAX).min(n);
        self.refund(k, now_ns);
        k
    }

    /// The reservation of the tokens this bucket will hold by the reading `deadline_ns` (at least
    /// the reading; any `u128`), at most `n`: `min(n, ⌊f(⌊deadline / 2^k⌋) / I⌋)` tokens, or `None`
    /// when that is none. As for a shard of a sharded reservation.
    pub fn reserve_by(&mut self, n: u64, deadline_ns: u128, now_ns: u64) -> Option<RefReservation> {
        let p = self.policy;
        let deadline = p.units_at(deadline_ns);
        let k = (self.level_at(deadline) / p.interval).max(0);
        let k = u64::try_from(k).expect("at most C").min(n);
        if k == 0 {
            return None;
        }
        let r = self.reserve(k, MAX_WAIT_NS, now_ns);
        Some(r.expect("tokens there by the deadline are reserved"))
    }

    /// `take_up_to_at(n, now)`: the tokens taken and the answer (for `n = 0` a query; with no
    /// whole token, the denial of one).
    pub fn take_up_to(&mut self, n: u64, now_ns: u64) -> (u64, Outcome) {
        if n == 0 {
            return (0, self.peek(0, now_ns));
        }
        let k = self.remaining(now_ns).min(n);
        if k == 0 {
            let outcome = self.acquire(1, now_ns);
            assert!(!outcome.is_admitted(), "no whole token, yet admitted");
            return (0, outcome);
        }
        let outcome = self.acquire(k, now_ns);
        assert!(outcome.is_admitted(), "{k} whole tokens, yet {outcome:?}");
        (k, outcome)
    }
}

/// Read-only views of a model bucket's state, for the sharded model ([`crate::reference::sharded`]), which
/// builds one `ShardedBucket` shard from each [`RefBucket`].
impl RefBucket {
    /// The model's constants.
    pub fn policy(&self) -> &RefPolicy {
        &self.policy
    }

    /// The level `f(t)` at the reading `now_ns`, in units (`tokens × I`): at most `B`, negative
    /// for a reading earlier than one already applied.
    pub fn level_units(&self, now_ns: u64) -> i128 {
        self.level_at(self.policy.reading(now_ns).t)
    }
}
