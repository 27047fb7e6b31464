//! The generic cell rate algorithm (GCRA, ITU-T I.371): the one core the
//! [token bucket](crate::token_bucket) and the [leaky meter](crate::leaky::meter) share.
//!
//! Both store one number, the *theoretical arrival time* `tat`: for the bucket, the instant it will
//! be full again; for the meter, the instant its virtual queue will be empty (its drain time). It
//! is the same number read from two sides, so the constants, the time units, the conformance test
//! and the answers about what is left are written here once; each algorithm's file keeps only what
//! is its own (the bucket's outcome and refunds, the meter's scheduling and strict spacing).
//!
//! ```text
//! tat                   the instant the bucket is full again (the queue is empty)
//! level(now)            = B - (tat - now), clamped to [0, B]   (B = C × I, the burst window)
//! a request for n conforms at now  iff  max(tat, now) + n × I - now <= B
//! and then tat becomes  max(tat, now_up) + n × I
//! ```
//!
//! Time is counted in units of `2^shift` ns since the clock's epoch: nanoseconds unless the burst
//! window exceeds 2^62 ns (see [`Quota`](crate::quota#very-long-burst-windows)). A direct
//! limiter's units are laid so that its construction reading starts one ([`Gcra::begin_at`]). The
//! state table of the word is on [`Tat`].

use crate::algorithm::sealed::OneWord;
use crate::cas::Step;
use crate::clock::Nanos;
use crate::outcome::{Admitted, Denied, Headroom, InsufficientCapacity, Next, Span};
use crate::quota::{Quota, QuotaError};

/// An algorithm on the GCRA's word: the token bucket or the leaky meter. They differ only in their
/// decision (the bucket's conformance test, the meter's strict spacing) and their names; the rest
/// of the one-word contract is the GCRA's, written once below.
pub trait GcraWord: Send + Sync + 'static {
    /// The direct limiter's name, for `Debug`.
    const NAME: &'static str;
    /// What the word is called in `Debug` output.
    const WORD: &'static str;

    /// The decision: admits `n` (`1..=capacity`) on `word` at `now`, or says when it could.
    fn decide(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, Denied>;

    /// The decision's verdict alone (the word to write, or a refusal): `decide` without building
    /// its outcome. Must agree with `decide`.
    fn judge(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<(), ()>;

    /// The decision with its admission's outcome and without its refusal's. Must agree with
    /// `decide`.
    #[inline]
    fn admit(gcra: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, ()> {
        match Self::decide(gcra, word, now, n) {
            Step::Write(new, admitted) => Step::Write(new, admitted),
            Step::Keep(admitted) => Step::Keep(admitted),
            Step::Refuse(_) => Step::Refuse(()),
        }
    }

    /// The decision's outcome alone (without its write). Must agree with `decide`.
    #[inline]
    fn outcome(gcra: &Gcra, word: u64, now: Time, n: u64) -> Result<Admitted, Denied> {
        match Self::decide(gcra, word, now, n) {
            Step::Write(_, admitted) | Step::Keep(admitted) => Ok(admitted),
            Step::Refuse(denied) => Err(denied),
        }
    }
}

/// The two constructors of a GCRA limiter (the token bucket and the leaky meter), written once:
/// `new` on the default clock and `with_clock`, each infallible (every valid [`Quota`] can be
/// enforced) and each with the docs its type passes in.
macro_rules! gcra_constructors {
    ($limiter:ident, $(#[$new:meta])* new, $(#[$with_clock:meta])* with_clock) => {
        impl $limiter<$crate::clock::MonotonicClock> {
            $(#[$new])*
            pub fn new(quota: $crate::quota::Quota) -> $limiter<$crate::clock::MonotonicClock> {
                $limiter::with_clock(quota, $crate::clock::MonotonicClock::new())
            }
        }

        impl<C: $crate::clock::Clock> $limiter<C> {
            $(#[$with_clock])*
            pub fn with_clock(quota: $crate::quota::Quota, clock: C) -> $limiter<C> {
                $crate::direct::Direct::from_policy($crate::gcra::Gcra::new(&quota), quota, clock)
            }
        }
    };
}
pub(crate) use gcra_constructors;

impl<T: GcraWord> OneWord for T {
    type Policy = Gcra;
    type Time = Time;

    const NAME: &'static str = T::NAME;

    fn policy(quota: &Quota) -> Result<Gcra, QuotaError> {
        // Every valid quota fits the word (see `Quota::time_unit`).
        Ok(Gcra::new(quota))
    }

    #[inline]
    fn time(policy: &Gcra, now: Nanos) -> Time {
        policy.time(now)
    }

    #[inline]
    fn capacity(policy: &Gcra) -> u64 {
        policy.capacity
    }

    fn begin(policy: &mut Gcra, now: Nanos) {
        policy.begin_at(now);
    }

    fn initial_word(policy: &Gcra, quota: &Quota, now: Time) -> u64 {
        // The bucket's tokens, the meter's free places: the same number.
        policy.initial_word(quota.initial(), now)
    }

    fn available_word(policy: &Gcra, available: u64, now: Time) -> u64 {
        // The refill of the missing tokens starts at the reading (rounded up to a unit): the
        // fraction of a token the old state had is not carried over.
        policy.initial_word(available, now)
    }

    #[inline]
    fn fresh_word(policy: &Gcra, at: Nanos) -> u64 {
        policy.fresh_word(at)
    }

    #[inline]
    fn is_fresh(policy: &Gcra, word: u64, now: Time) -> bool {
        // Full (the queue empty) at `now`: as a fresh word, now and at every later reading.
        policy.is_fresh(word, now)
    }

    #[inline]
    fn decide(policy: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, Denied> {
        T::decide(policy, word, now, n)
    }

    #[inline]
    fn judge(policy: &Gcra, word: u64, now: Time, n: u64) -> Step<(), ()> {
        T::judge(policy, word, now, n)
    }

    #[inline]
    fn outcome(policy: &Gcra, word: u64, now: Time, n: u64) -> Result<Admitted, Denied> {
        T::outcome(policy, word, now, n)
    }

    #[inline]
    fn admit(policy: &Gcra, word: u64, now: Time, n: u64) -> Step<Admitted, ()> {
        T::admit(policy, word, now, n)
    }

    fn query(policy: &Gcra, word: u64, now: Time) -> Admitted {
        policy.query(word, now)
    }

    fn remaining(policy: &Gcra, word: u64, now: Time) -> u64 {
        policy.remaining(word, now)
    }

    fn debug_word(_: &Gcra, word: u64, f: &mut std::fmt::DebugStruct<'_, '_>) {
        f.field(T::WORD, &word);
    }
}

/// The GCRA's constants, derived once from a [`Quota`]. Times are in units of `2^shift` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    /// Time units are `2^shift` ns.
    pub(crate) shift: u32,
    /// `2^shift − 1`: the nanoseconds of a reading below one unit are `ns & mask`.
    mask: u64,
    /// Units per token (the interval `1/R`, rounded up), at least 1.
    pub(crate) interval: u64,
    /// The burst window `capacity × interval` (the meter's longest backlog), at most 2^62.
    pub(crate) burst: u64,
    capacity: u64,
    /// Added to every reading before it is cut into units, so that a direct limiter's
    /// construction reading falls on a unit boundary (see [`Gcra::begin_at`]); below one unit,
    /// and 0 with nanosecond units and for a keyed limiter's shared policy.
    lead: u64,
}

/// A clock reading in the policy's units: `ns + lead = (units << shift) + sub`, after clamping to
/// [`Nanos::MAX_USABLE`] (`lead` aligns a direct limiter's construction reading on a unit: see
/// [`Gcra::begin_at`]).
#[derive(Debug, Clone, Copy)]
pub struct Time {
    /// The reading rounded down to a whole unit: what tokens (the backlog) are counted at.
    pub(crate) units: u64,
    /// The reading rounded up to a whole unit: where a refill (a departure) may start, so that no
    /// refill is ever credited for time before the reading. Equal to `units` when units are
    /// nanoseconds.
    pub(crate) units_up: u64,
    /// The nanoseconds of the reading past `units` (0 with nanosecond units).
    pub(crate) sub: u64,
    /// The clamped reading in nanoseconds.
    pub(crate) ns: u64,
}

/// The packed state: the theoretical arrival time, in the policy's units since the clock's epoch.
///
/// # State table
///
/// With `now` the reading in units, `I` the interval and `B = C × I` the burst window:
///
/// | word `w` | bucket at `now` (meter: queue) | reached by |
/// | --- | --- | --- |
/// | `w <= now` | `C` tokens, full (queue empty) | construction with a full bucket; time passing |
/// | `now < w <= now + B` | `(now + B - w) / I` tokens, fraction carried (`ceil((w - now) / I)` queued) | an admission; a refund (bucket only) |
/// | `w > now + B` | 0, in debt by `w - now - B` (over-full queue) | a reservation (bucket only); a reading earlier than one already applied |
///
/// Transitions: a conforming request for `n` writes `max(w, now_up) + n × I`, and only when
/// `max(w, now) + n × I - now <= B`; a reservation (bucket only) writes the same, and only when
/// the wait `max(w, now) + n × I - now - B` is at most its `max_wait` (at most 2^61 ns); the
/// meter's strict admission writes `now_up + n × I`, and only when `w <= now`; a refund of `n` (a
/// cancelled reservation's too) writes `max(w - n × I, now)`, and only when `w > now`. Denials,
/// peeks and queries never write. `now_up` is the reading rounded up to a whole unit, so a refill
/// never starts before the reading. The word never exceeds `2^62 + 2^62 + 2^61 + 1 + 2^62 < 2^64`:
/// readings are clamped to 2^62, writes leave `w <= now + B + D + 1` with `B <= 2^62` and the
/// debt `D` at most a reservation's wait (at most 2^61 units; 0 without reservations), and one
/// more cost of at most `B` is added before a check. Stored words stay below `3 × 2^62`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tat(pub(crate) u64);

impl Tat {
    /// Capacity at `now`, in units (`tokens × I`), clamped to `[0, B]`.
    #[inline]
    fn level(self, now: u64, burst: u64) -> u64 {
        burst.saturating_sub(self.0.saturating_sub(now))
    }

    /// Units until full (the queue empty) at `now`; 0 when it is.
    #[inline]
    pub(crate) fn until_full(self, now: u64) -> u64 {
        self.0.saturating_sub(now)
    }

    /// Whether the bucket is full (the queue empty) at `now`: exact to the nanosecond, as the word
    /// is a whole unit.
    #[inline]
    pub(crate) fn is_full_at(self, now: Time) -> bool {
        self.0 <= now.units
    }
}

/// The most a reservation may wait, in nanoseconds: 2^61 (about 73 years). A reservation's debt
/// is at most its wait, so a word stays below `now + B + 2^61 + 1 <= 2.5 × 2^62 + 1`, and one more
/// cost of at most `B <= 2^62` added before a check stays below 2^64 (see [`Tat`]).
pub(crate) const MAX_WAIT_NS: u64 = 1 << 61;

/// A reservation written: the word after it, and when its tokens are the caller's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reserved {
    /// The word the reservation wrote.
    pub(crate) tat: u64,
    /// The reading (clamped nanoseconds) at which its tokens are there: the reading itself when
    /// they were there at once.
    pub(crate) ready_ns: u64,
}

/// A conforming request: what it writes and where it stands.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Conforming {
    /// The new word.
    pub(crate) new: u64,
    /// Where its span starts (the meter's departure slot): `max(w, now_up)`.
    pub(crate) start: u64,
    /// `max(w, now) + n × I - now`: the backlog it leaves, at most the burst window.
    pub(crate) gap: u64,
}

impl Gcra {
    pub(crate) fn new(quota: &Quota) -> Gcra {
        let (shift, interval) = quota.time_unit();
        Gcra {
            shift,
            // `time_unit` keeps the shift below 64.
            mask: (1u64 << shift) - 1,
            interval,
            // Validation bounds this product by 2^62 (see `Quota::time_unit`).
            burst: quota.capacity().saturating_mul(interval),
            capacity: quota.capacity(),
            lead: 0,
        }
    }

    /// Aligns this policy's time units on `now`, a direct limiter's construction reading: units
    /// are counted from that reading's offset within a unit, so the reading is a whole unit and
    /// the full word built at it says "full since the construction reading", not since up to one
    /// unit before it. (Else a clock stepping back into that unit would start a refill before the
    /// limiter existed, letting a token through up to one unit early against `C + R × t` counted
    /// from construction.) Changes nothing with nanosecond units.
    pub(crate) fn begin_at(&mut self, now: Nanos) {
        self.lead = now.clamped().wrapping_neg() & self.mask;
    }

    /// The whole units in `d`, rounded down: a duration, not a reading (no lead). For the
    /// middleware's `delay_up_to`.
    #[cfg_attr(not(all(feature = "tower", feature = "tokio")), allow(dead_code))]
    #[inline]
    pub(crate) fn whole_units(&self, d: Nanos) -> u64 {
        d.clamped() >> self.shift
    }

    /// Units per token.
    #[inline]
    pub(crate) fn interval(&self) -> u64 {
        self.interval
    }

    /// The burst window `C × I`, in units.
    #[inline]
    pub(crate) fn burst(&self) -> u64 {
        self.burst
    }

    /// The capacity, in tokens.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    #[inline]
    pub(crate) fn time(&self, now: Nanos) -> Time {
        let ns = now.clamped();
        // On the policy's grid (see `begin_at`): ns <= 2^62 and lead, mask < 2^shift <= 2^62, so
        // nothing here can overflow.
        let at = ns + self.lead;
        Time {
            units: at >> self.shift,
            units_up: (at + self.mask) >> self.shift,
            sub: at & self.mask,
            ns,
        }
    }

    /// A reading in nanoseconds (it may lie beyond 2^62) in whole units on the policy's grid,
    /// rounded down.
    #[inline]
    fn units_at(&self, ns: u128) -> u128 {
        (ns + u128::from(self.lead)) >> self.shift
    }

    /// `units` from the reading `at` (rounded down), as nanoseconds from the exact reading.
    #[inline]
    pub(crate) fn span(&self, units: u64, at: Time) -> Span {
        Span {
            units,
            shift: self.shift,
            // The nanoseconds of the reading below one unit.
            sub: at.sub,
        }
    }

    /// The word holding `tokens` (at most the capacity; the meter: free places) at `now`.
    pub(crate) fn initial_word(&self, tokens: u64, now: Time) -> u64 {
        match self.capacity.saturating_sub(tokens) {
            0 => now.units,
            // The refill of the missing tokens starts no earlier than the reading.
            missing => now.units_up + missing * self.interval,
        }
    }

    /// The word of a key created afresh as of `at`: full (empty queue) as of `at`, so a reading
    /// before `at` sees it short of full, as it would see any word that was full at `at`.
    #[inline]
    pub(crate) fn fresh_word(&self, at: Nanos) -> u64 {
        self.initial_word(self.capacity, self.time(at))
    }

    /// Whether `word` is as full as a fresh word at `now` and at every later reading.
    #[inline]
    pub(crate) fn is_fresh(&self, word: u64, now: Time) -> bool {
        word <= self.initial_word(self.capacity, now)
    }

    /// Checks `n` against the capacity, answering `n = 0` as a query.
    #[inline]
    pub(crate) fn check_n(&self, n: u64) -> Result<bool, InsufficientCapacity> {
        InsufficientCapacity::check(n, self.capacity)
    }

    /// The conformance test for `n` (`1 <= n <= capacity`) on `word` at `now`: what a conforming
    /// request writes, or the units it must wait.
    #[inline]
    pub(crate) fn conform(&self, word: u64, now: Time, n: u64) -> Result<Conforming, u64> {
        // n <= capacity, so cost <= burst <= 2^62.
        let cost = n * self.interval;
        // Conform when the tokens counted at the reading (rounded down) cover the cost.
        let gap = word.max(now.units) + cost - now.units;
        if gap <= self.burst {
            // A full bucket's refill restarts at the reading rounded up, never before it: with
            // coarse units, rounding down here would credit up to one unit of refill too early.
            let start = word.max(now.units_up);
            Ok(Conforming {
                new: start + cost,
                start,
                gap,
            })
        } else {
            Err(gap - self.burst)
        }
    }

    /// The token bucket's verdict alone: the word [`Gcra::decide`] writes, or a refusal.
    #[inline]
    pub(crate) fn judge(&self, word: u64, now: Time, n: u64) -> Step<(), ()> {
        match self.conform(word, now, n) {
            Ok(c) => Step::Write(c.new, ()),
            Err(_) => Step::Refuse(()),
        }
    }

    /// The token bucket's decision: takes `n` tokens (`1 <= n <= capacity`) from `word`, or says
    /// when it could.
    #[inline]
    pub(crate) fn decide(&self, word: u64, now: Time, n: u64) -> Step<Admitted, Denied> {
        match self.conform(word, now, n) {
            Ok(c) => Step::Write(c.new, self.admitted(c, now)),
            Err(wait) => Step::Refuse(self.denied(word, now, wait)),
        }
    }

    /// [`Gcra::decide`] without its refusal's outcome.
    #[inline]
    pub(crate) fn admit(&self, word: u64, now: Time, n: u64) -> Step<Admitted, ()> {
        match self.conform(word, now, n) {
            Ok(c) => Step::Write(c.new, self.admitted(c, now)),
            Err(_) => Step::Refuse(()),
        }
    }

    /// [`Gcra::decide`]'s outcome alone, without its write.
    #[inline]
    pub(crate) fn outcome(&self, word: u64, now: Time, n: u64) -> Result<Admitted, Denied> {
        match self.conform(word, now, n) {
            Ok(c) => Ok(self.admitted(c, now)),
            Err(wait) => Err(self.denied_at(word, now.ns, now.units, now.sub, wait)),
        }
    }

    /// The outcome of the conforming request `c` at `now`.
    #[inline]
    fn admitted(&self, c: Conforming, now: Time) -> Admitted {
        // The level is counted from the reading rounded down, the refill from `c.start`: a
        // refill restarted at the reading rounded up brings the next token one unit later.
        Admitted::new(Headroom::new(
            self.burst - c.gap,
            self.interval,
            self.span(c.gap, now),
            Next::token(c.new - c.gap - now.units),
        ))
    }

    /// A denial at `now` that must wait `wait` units.
    #[inline]
    pub(crate) fn denied(&self, word: u64, now: Time, wait: u64) -> Denied {
        self.denied_cold(word, now.ns, now.units, now.sub, wait)
    }

    /// A denial at `now` whose `retry_after` is `retry` (in the reading's frame, as every span of
    /// `span(_, now)` is), with the bucket's figures at `now`.
    #[inline]
    pub(crate) fn denied_for(&self, word: u64, now: Time, retry: Span) -> Denied {
        self.denied_cold(word, now.ns, now.units, now.sub, retry.units)
    }

    /// [`Gcra::denied_at`] out of line, the reading passed as the three figures it reads, each in
    /// a register (a [`Time`] is passed through memory): where the decision and its outcome are
    /// made together (the compare-and-swap loops), a refusal's outcome is built here, and not on
    /// the admitting path.
    #[cold]
    #[inline(never)]
    fn denied_cold(&self, word: u64, ns: u64, units: u64, sub: u64, wait: u64) -> Denied {
        self.denied_at(word, ns, units, sub, wait)
    }

    /// A denial at the reading `(ns, units, sub)` that must wait `wait` units. Inline where the
    /// outcome is described after the decision ([`Gcra::outcome`]): a caller that reads only
    /// `is_ok()` then pays for none of it.
    #[inline]
    fn denied_at(&self, word: u64, ns: u64, units: u64, sub: u64, wait: u64) -> Denied {
        let retry = Span {
            units: wait,
            shift: self.shift,
            sub,
        };
        Denied::new(ns, retry, self.headroom(word, units, sub))
    }

    /// What the bucket holds (the queue's free places) in `word` at the reading `(units, sub)`
    /// (the reading rounded down to a unit, and the nanoseconds below it).
    #[inline]
    pub(crate) fn headroom(&self, word: u64, units: u64, sub: u64) -> Headroom {
        let tat = Tat(word);
        let reset = Span {
            units: tat.until_full(units),
            shift: self.shift,
            sub,
        };
        Headroom::new(
            tat.level(units, self.burst),
            self.interval,
            reset,
            self.next(tat.until_full(units)),
        )
    }

    /// When the whole tokens (free places) grow, `until_full` units from full at the reading: the
    /// level's next whole interval, or, for a level below zero (a reading earlier than one
    /// applied, which the outcome's level shows as 0), one interval above zero.
    #[inline]
    pub(crate) fn next(&self, until_full: u64) -> Next {
        match until_full.checked_sub(self.burst) {
            _ if until_full == 0 => Next::FULL,
            Some(below) if below > 0 => Next::units(self.interval.saturating_add(below)),
            _ => Next::TOKEN,
        }
    }

    /// The answer to a request for nothing: what the bucket holds (the queue's free places) at
    /// `now`.
    pub(crate) fn query(&self, word: u64, now: Time) -> Admitted {
        Admitted::new(self.headroom(word, now.units, now.sub))
    }

    /// Whole tokens (free places) at `now`.
    pub(crate) fn remaining(&self, word: u64, now: Time) -> u64 {
        let level = Tat(word).level(now.units, self.burst);
        // An empty bucket (the case on every denial) needs no division.
        if level < self.interval {
            0
        } else {
            level / self.interval
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

    /// Takes as many whole tokens as are there, up to `n` (`1 <= n`), and answers how many it took.
    /// Takes nothing, and writes nothing, from a bucket without a whole token.
    pub(crate) fn take_up_to(&self, word: u64, now: Time, n: u64) -> Step<u64, ()> {
        let k = self.remaining(word, now).min(n);
        if k == 0 {
            return Step::Keep(0);
        }
        match self.decide(word, now, k) {
            Step::Write(new, _) => Step::Write(new, k),
            // `k` whole tokens are there, so the decision admits; answer "none" rather than
            // trust that.
            Step::Keep(_) | Step::Refuse(_) => Step::Keep(0),
        }
    }

    /// Takes `min(n, whole tokens at now)` tokens (`1 <= n`, any size) in one decision, answering
    /// how many and the admission; from a bucket without a whole token, the denial of one token
    /// (when one will be there), writing nothing.
    #[inline]
    pub(crate) fn take_partial(
        &self,
        word: u64,
        now: Time,
        n: u64,
    ) -> Step<(u64, Admitted), Denied> {
        // `remaining` whole tokens are exactly what the conformance test admits (`k × I <= level`),
        // so `k` conforms; with none there, the request for one is refused with its exact wait.
        let k = self.remaining(word, now).min(n).max(1);
        match self.decide(word, now, k) {
            Step::Write(new, admitted) => Step::Write(new, (k, admitted)),
            Step::Keep(admitted) => Step::Keep((k, admitted)),
            Step::Refuse(denied) => Step::Refuse(denied),
        }
    }

    /// The reservation of `n` tokens (`1 <= n <= capacity`) at `now`, waiting at most
    /// `max_wait_ns` (at most [`MAX_WAIT_NS`]): taken now, into debt if they are not there, and
    /// yours at `ready_ns`; or, when they would be later than that, the denial whose `retry_after`
    /// is the wait until the same reservation would fit (`wait - max_wait`).
    #[inline]
    pub(crate) fn reserve(
        &self,
        word: u64,
        now: Time,
        n: u64,
        max_wait_ns: u64,
    ) -> Step<Reserved, Denied> {
        match self.conform(word, now, n) {
            // The tokens are there: an admission, yours at the reading.
            Ok(c) => Step::Write(
                c.new,
                Reserved {
                    tat: c.new,
                    ready_ns: now.ns,
                },
            ),
            Err(wait) => {
                let wait_ns = self.span(wait, now).nanos();
                if wait_ns > u128::from(max_wait_ns) {
                    // `wait_ns - max_wait_ns`, in the denial's frame (its figures share the
                    // reading's units): exact with nanosecond units; with coarser ones (slow
                    // quotas), rounded up to the unit, so never earlier than the reservation
                    // fits. `target + sub <= wait << shift`, so the units fit a u64.
                    let target = wait_ns - u128::from(max_wait_ns);
                    let sub = u128::from(now.sub);
                    let units = (target + sub).div_ceil(1u128 << self.shift);
                    let retry = self.span(u64::try_from(units).unwrap_or(wait), now);
                    return Step::Refuse(self.denied_for(word, now, retry));
                }
                // A bucket full at `now` conforms, so here `word > now.units`, hence
                // `word >= now.units_up`: the reserved tokens refill after the word, as an
                // admission's would (`max(word, now_up) + cost`). The debt is `wait <= max_wait`,
                // so the word stays below `now + B + MAX_WAIT + 1` (see [`Tat`]).
                let new = word + n * self.interval;
                // `now.ns <= 2^62` and `wait_ns <= max_wait_ns <= 2^61`: no overflow.
                let ready_ns = now.ns + u64::try_from(wait_ns).unwrap_or(u64::MAX);
                Step::Write(new, Reserved { tat: new, ready_ns })
            }
        }
    }

    /// The largest `k <= n` tokens a reservation at `now` would have by the reading `deadline_ns`
    /// (at least the reading; it may lie beyond 2^62), and that reservation, or `Keep(0)` for none:
    /// `k = min(n, ⌊(⌊deadline / 2^shift⌋ + B - max(word, now)) / I⌋)`, which never exceeds the
    /// capacity, and is the shard's whole tokens at `deadline` were it left alone.
    pub(crate) fn reserve_by(
        &self,
        word: u64,
        now: Time,
        n: u64,
        deadline_ns: u128,
    ) -> Step<(u64, Reserved), ()> {
        let deadline = self.units_at(deadline_ns);
        let from = u128::from(word.max(now.units));
        let level = (deadline + u128::from(self.burst)).saturating_sub(from);
        let fits = u64::try_from(level / u128::from(self.interval)).unwrap_or(u64::MAX);
        let k = fits.min(self.capacity).min(n);
        if k == 0 {
            return Step::Keep((
                0,
                Reserved {
                    tat: word,
                    ready_ns: now.ns,
                },
            ));
        }
        // `k` tokens are ready by the deadline, itself at most the caller's `now + max_wait`.
        match self.reserve(word, now, k, MAX_WAIT_NS) {
            Step::Write(new, reserved) => Step::Write(new, (k, reserved)),
            Step::Keep(_) | Step::Refuse(_) => Step::Keep((
                0,
                Reserved {
                    tat: word,
                    ready_ns: now.ns,
                },
            )),
        }
    }

    /// What a reservation of `tokens` whose word after its write was `tat` gives back at `now`:
    /// its tokens less those taken after it (`⌈(word - tat) / I⌉`, never negative), as many as fit
    /// below the capacity (the last may only part fit); answers how many.
    pub(crate) fn cancel(&self, word: u64, now: Time, tokens: u64, tat: u64) -> Step<u64, ()> {
        let after = word.saturating_sub(tat).div_ceil(self.interval);
        self.refund_up_to(word, now, tokens.saturating_sub(after))
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
        // The conformance test's own answer: no wait when it conforms.
        let wait = self.conform(word, now, n).err().unwrap_or(0);
        self.span(wait, now).nanos()
    }

    /// Nanoseconds from `now` until the bucket is full.
    pub(crate) fn full_in_nanos(&self, word: u64, now: Time) -> u128 {
        self.span(Tat(word).until_full(now.units), now).nanos()
    }
}

#[cfg(all(test, not(tollgate_loom)))]
pub(crate) mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn policy(quota: Quota) -> Gcra {
        Gcra::new(&quota)
    }

    /// `ns` in `p`'s units (also for the leaky meter's tests).
    pub(crate) fn at(p: &Gcra, ns: u64) -> Time {
        p.time(Nanos::new(ns))
    }

    /// 10 per second, capacity 10: interval 100 ms, burst window 1 s (also for the leaky meter's
    /// tests).
    pub(crate) fn ten_per_second() -> Gcra {
        policy(Quota::per_second(10).unwrap())
    }

    #[test]
    fn full_bucket_admits_and_moves_tat_by_one_interval() {
        let p = ten_per_second();
        let (new, ok) = p.decide(0, at(&p, 5 * SEC), 1).written();
        assert_eq!(new, 5 * SEC + SEC / 10);
        assert_eq!(ok.remaining(), 9);
        assert_eq!(ok.reset_after().as_nanos(), u128::from(SEC / 10));
    }

    #[test]
    fn empty_bucket_denies_with_exact_retry_and_writes_nothing() {
        let p = ten_per_second();
        // tat = now + burst: empty.
        let now = 3 * SEC;
        let d = p.decide(now + SEC, at(&p, now), 1).refused();
        assert_eq!(d.retry_after().as_nanos(), u128::from(SEC / 10));
        assert_eq!(d.retry_at(), Nanos::new(now + SEC / 10));
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after().as_nanos(), u128::from(SEC));
        // n tokens wait n intervals, minus the fraction already refilled.
        let d = p.decide(now + SEC - 30, at(&p, now), 3).refused();
        assert_eq!(d.retry_after().as_nanos(), u128::from(3 * SEC / 10 - 30));
    }

    #[test]
    fn fractional_tokens_are_carried() {
        let p = ten_per_second();
        let now = 10 * SEC;
        // 0.5 token in the bucket: denied now, admitted 50 ms later, then empty again.
        let word = now + SEC - SEC / 20;
        assert!(matches!(p.decide(word, at(&p, now), 1), Step::Refuse(_)));
        let (new, ok) = p.decide(word, at(&p, now + SEC / 20), 1).written();
        assert_eq!(ok.remaining(), 0);
        assert_eq!(new, now + SEC / 20 + SEC);
    }

    #[test]
    fn an_idle_bucket_of_any_age_reads_full_and_no_fuller() {
        let p = ten_per_second();
        for now in [SEC, 1 << 40, 1 << 62, u64::MAX] {
            assert_eq!(p.remaining(0, at(&p, now)), 10);
            let (_, ok) = p.decide(0, at(&p, now), 10).written();
            assert_eq!(ok.remaining(), 0);
            assert!(matches!(p.decide(0, at(&p, now), 11), Step::Refuse(_)));
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
        let (new, ok) = p.decide(word, at(&p, 5 * SEC - SEC / 2), 1).written();
        assert!(new > word);
        assert_eq!(ok.remaining(), 3);
    }

    #[test]
    fn refund_gives_back_and_never_overfills() {
        let p = ten_per_second();
        let now = 2 * SEC;
        let word = now + SEC; // empty
        let (new, ()) = p.refund(word, at(&p, now), 3).written();
        assert_eq!(p.remaining(new, at(&p, now)), 3);
        let (new, ()) = p.refund(word, at(&p, now), u64::MAX).written();
        assert_eq!(new, now);
        assert_eq!(p.remaining(new, at(&p, now)), 10);
        // A full bucket, or a refund of nothing, writes nothing.
        assert!(matches!(p.refund(now, at(&p, now), 5), Step::Keep(())));
        assert!(matches!(p.refund(word, at(&p, now), 0), Step::Keep(())));
    }

    #[test]
    fn a_refused_reservation_reports_a_wait_beyond_2_64_ns_to_the_unit() {
        // 1 per minute with a capacity of 2^40, empty: 2^40 tokens are 2^40 minutes away.
        let q = Quota::per_minute(1)
            .unwrap()
            .with_capacity(1 << 40)
            .unwrap()
            .with_initial(0)
            .unwrap();
        let p = policy(q);
        let now = at(&p, 12_345);
        let word = p.initial_word(0, now);
        let wait = p.wait_nanos(word, now, 1 << 40);
        assert!(wait > u128::from(u64::MAX));
        let d = p.reserve(word, now, 1 << 40, SEC).refused();
        // Coarse units (this quota's are 2^shift ns): rounded up to the unit, never earlier.
        let exact = wait - u128::from(SEC);
        let got = d.retry_after().as_nanos();
        assert!(p.shift > 0);
        assert!(
            got >= exact && got < exact + (1u128 << p.shift),
            "{got} for {exact}"
        );
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
        let d = p.decide(word, at(&p, 12_345 + 1000), 1).refused();
        let retry = d.retry_at().as_u64();
        // Never earlier than one day after the start; within one unit of it.
        assert!(retry >= 12_345 + day, "{retry}");
        assert!(retry - (12_345 + day) < (1 << p.shift) + (day >> 10));
        assert!(matches!(
            p.decide(word, at(&p, retry - 1), 1),
            Step::Refuse(_)
        ));
        assert!(matches!(p.decide(word, at(&p, retry), 1), Step::Write(..)));
    }

    /// The widest policy: 1 per nanosecond with a burst of 2^62, whose burst window is 2^62 ns (also
    /// for the leaky meter's tests).
    pub(crate) fn widest() -> Gcra {
        policy(
            Quota::per_second(1_000_000_000)
                .unwrap()
                .with_capacity(1 << 62)
                .unwrap(),
        )
    }

    #[test]
    fn the_word_cannot_overflow_at_the_extremes() {
        let p = widest();
        let now = at(&p, u64::MAX);
        // Worst case: a word already a full burst window ahead of the latest reading.
        let word = now.units + p.burst;
        assert!(matches!(p.decide(word, now, 1 << 62), Step::Refuse(_)));
        let (new, _) = p.decide(0, now, 1 << 62).written();
        assert_eq!(new, (1 << 62) + (1 << 62));
    }
}
