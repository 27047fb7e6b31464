//! The weighted estimate the two sliding counters share: the policy of a sliding counter of `k`
//! sub-windows (`SlidingCounterPolicy`), the clock readings it decides at (`Moment`, `Reading`)
//! and its pure decisions. [`SlidingWindowCounter`] is its case `k = 1` (`sliding_counter`,
//! whose module docs give the algorithm and the one-word fast path); [`SubWindowCounter`] keeps
//! `k` sub-windows over several words (`sub_window`).

use super::{check_count, window_of, Grid};
#[cfg(doc)]
use super::{SlidingWindowCounter, SubWindowCounter};
use crate::cas::Step;
use crate::clock::Nanos;
use crate::outcome::{Admitted, Denied, Headroom, InsufficientCapacity, Next, Span};
use crate::quota::{AlgorithmLimit, Quota, QuotaError};

/// The most sub-windows a [`SubWindowCounter`] accepts (re-exported as
/// `tollgate::window::MAX_SUB_WINDOWS`). Its state is `k + 2` words (the history
/// ring and the hot word) plus the hot word's cache-line padding, and a rollover or a denial reads
/// up to `k` of them; 1024 keeps the state near 8 KB and the slowest denial to about a thousand
/// loads of words that are rarely written. More is refused with [`QuotaError::Algorithm`] naming `"sub_windows"`.
///
/// # Examples
///
/// ```
/// use tollgate::window::{SubWindowCounter, MAX_SUB_WINDOWS};
/// use tollgate::Quota;
/// // Sub-windows of 2^30 / 1024 ns: 1024 divides the period.
/// let quota = Quota::per_period(10, std::time::Duration::from_nanos(1 << 30))?;
/// assert!(SubWindowCounter::new(quota, MAX_SUB_WINDOWS).is_ok());
/// let err = SubWindowCounter::new(quota, MAX_SUB_WINDOWS + 1).unwrap_err();
/// assert_eq!(err.field(), "sub_windows");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub const MAX_SUB_WINDOWS: u64 = 1024;

// ---------------------------------------------------------------------------------------------
// Policy and pure decisions
// ---------------------------------------------------------------------------------------------

/// The constants of a sliding counter of `k` sub-windows, derived once from a [`Quota`].
/// [`SlidingWindowCounter`] is the case `k = 1`.
///
/// # Examples
///
/// ```
/// use tollgate::window::sliding_counter::SlidingCounterPolicy;
/// // Built by the limiter from its quota, never by hand: plain data, copied and shared freely.
/// fn plain<T: Copy + Send + Sync + 'static>() {}
/// plain::<SlidingCounterPolicy>();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingCounterPolicy {
    /// The (sub-)window boundaries: windows of `sub` nanoseconds.
    pub(super) grid: Grid,
    /// `N`, admissions per window.
    pub(super) limit: u64,
    /// `w = W / k`, the sub-window length in nanoseconds (at least 1).
    sub: u64,
    /// `k`, sub-windows per window (`1..=MAX_SUB_WINDOWS`).
    pub(super) k: u64,
    /// Bits of each count field in a three-field word (index | a | b).
    bits: u32,
    /// Bits of the count field in a history slot (tag | count).
    pub(super) slot_bits: u32,
    /// `N × w` when `3 × N × w` fits a `u64`, so that every product of the one-word counter's
    /// admission test on counts up to `N` does (see [`SlidingCounterPolicy::admit_one`]); `None`
    /// sends every admission to the `u128` test.
    narrow: Option<u64>,
}

/// A clock reading not yet located on the grid: what the one-word counter's decision receives, so
/// that it can locate the reading without a division when it falls in the window the word
/// remembers or in the next one (see `SlidingCounterPolicy::locate_near`).
#[derive(Debug, Clone, Copy)]
pub struct Moment {
    /// The reading clamped to [`Nanos::MAX_USABLE`], plus the grid's shift: `index × w + elapsed`.
    t: u64,
    /// The reading in nanoseconds, clamped to [`Nanos::MAX_USABLE`].
    pub(super) ns: u64,
}

/// A clock reading located on the grid.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    pub(super) index: u64,
    elapsed: u64,
    /// The reading in nanoseconds, clamped to [`Nanos::MAX_USABLE`].
    ns: u64,
}

/// Where a decision is taken: the reading, or the start of the remembered sub-window when the
/// reading falls before it.
#[derive(Debug, Clone, Copy)]
pub(super) struct At {
    pub(super) index: u64,
    elapsed: u64,
    /// Nanoseconds from the reading to this point (0 unless the reading was clamped).
    lead: u64,
}

/// The counts a decision at [`At`] needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct CounterView {
    pub(super) at: At,
    /// `count(j − k)`, the weighted one.
    oldest: u64,
    /// `count(j − k + 1) + … + count(j − 1)`, counted in full.
    pub(super) settled: u64,
    /// `count(j)`.
    pub(super) cur: u64,
}

impl SlidingCounterPolicy {
    /// Validates `quota` for `k` sub-windows.
    pub(crate) fn new(quota: &Quota, k: u64) -> Result<SlidingCounterPolicy, QuotaError> {
        const NAME: &str = "sliding window counter";
        let (limit, period) = window_of(quota, NAME)?;
        if k == 0 || k > MAX_SUB_WINDOWS || period % k != 0 {
            let limit = AlgorithmLimit::new(NAME, "sub_windows", k, MAX_SUB_WINDOWS, |l, f| {
                write!(
                    f,
                    "sub_windows of a {} must be between 1 and {} and divide the period ({:?}) into whole nanoseconds, got {}",
                    l.algorithm(),
                    l.bound(),
                    l.span().unwrap_or_default(),
                    l.got()
                )
            });
            return Err(QuotaError::Algorithm(limit.over(quota.period())));
        }
        let sub = period / k;
        check_count(limit, sub, 2, NAME)?;
        let grid = Grid::new(sub);
        Ok(SlidingCounterPolicy {
            grid,
            limit,
            sub,
            k,
            bits: u64::BITS - grid.max_count(2).leading_zeros(),
            slot_bits: u64::BITS - grid.max_count(1).leading_zeros(),
            narrow: narrow(limit, sub),
        })
    }

    /// The reading `now`, not yet located on the grid.
    #[inline]
    pub(crate) fn moment(&self, now: Nanos) -> Moment {
        let ns = now.clamped();
        Moment {
            // ns <= 2^62 and shift < w <= 2^62: below 2^63.
            t: ns + self.grid.shift,
            ns,
        }
    }

    /// `m` located on the grid: `(t / w, t % w)`, computed without a division when `m` falls in
    /// window `i` or `i + 1` (an admission's window is nearly always the one the word remembers
    /// or the next), by a division otherwise.
    #[inline]
    pub(crate) fn locate_near(&self, m: Moment, i: u64) -> Reading {
        let w = self.grid.length;
        // i × w <= t < (i + 1) × w  ⇔  t / w = i and t % w = t − i × w (likewise for i + 1).
        if let Some(off) = i.checked_mul(w).and_then(|start| m.t.checked_sub(start)) {
            if off < w {
                return Reading {
                    index: i,
                    elapsed: off,
                    ns: m.ns,
                };
            }
            // i × w + w <= t < 2^63, so i + 1 cannot overflow.
            if off - w < w {
                return Reading {
                    index: i + 1,
                    elapsed: off - w,
                    ns: m.ns,
                };
            }
        }
        self.read(Nanos::new(m.ns))
    }

    #[inline]
    pub(crate) fn read(&self, now: Nanos) -> Reading {
        let (index, elapsed) = self.grid.locate(now);
        Reading {
            index,
            elapsed,
            ns: now.clamped(),
        }
    }

    // --- words -----------------------------------------------------------------------------

    /// `index | a | b`, each count in `bits` bits (the caller keeps `a, b <= N`).
    #[inline]
    pub(super) fn pack(&self, index: u64, a: u64, b: u64) -> u64 {
        (index << (2 * self.bits)) | (a << self.bits) | b
    }

    #[inline]
    pub(super) fn unpack(&self, word: u64) -> (u64, u64, u64) {
        let mask = (1u64 << self.bits) - 1;
        (
            word >> (2 * self.bits),
            (word >> self.bits) & mask,
            word & mask,
        )
    }

    // --- estimate --------------------------------------------------------------------------

    /// The point at which a reading is judged, given the remembered sub-window `stored`.
    #[inline]
    fn at(&self, r: Reading, stored: u64) -> At {
        if r.index < stored {
            // (stored − index) × w − elapsed <= stored × w <= 2^62 + w: no overflow.
            let lead = (stored - r.index)
                .saturating_mul(self.sub)
                .saturating_sub(r.elapsed);
            At {
                index: stored,
                elapsed: 0,
                lead,
            }
        } else {
            At {
                index: r.index,
                elapsed: r.elapsed,
                lead: 0,
            }
        }
    }

    /// `oldest × (w − e) + full × w <= N × w`: would the estimate at `e` stay within `N`?
    #[inline]
    fn within(&self, oldest: u64, full: u64, e: u64) -> bool {
        let w = u128::from(self.sub);
        u128::from(oldest) * (w - u128::from(e)) + u128::from(full) * w
            <= u128::from(self.limit) * w
    }

    /// `N − estimate` as `(level, unit)`, whose quotient `⌊level / unit⌋` is the whole admissions
    /// left (0 when the estimate reaches `N`). The outcome divides only when asked for
    /// `remaining()`: in units of `1 / w` of an admission while `N × w` fits a `u64` (the common
    /// case), else already divided (`unit` 1).
    #[inline]
    fn level(&self, oldest: u64, full: u64, e: u64) -> (u64, u64) {
        if oldest == 0 {
            return (self.limit.saturating_sub(full), 1);
        }
        let w = u128::from(self.sub);
        let used = u128::from(oldest) * (w - u128::from(e)) + u128::from(full) * w;
        let room = (u128::from(self.limit) * w).saturating_sub(used);
        match u64::try_from(room) {
            // `sub` is at least 1.
            Ok(room) => (room, self.sub),
            Err(_) => (u64::try_from(room / w).unwrap_or(0), 1),
        }
    }

    /// The earliest elapsed time `>= from` in a sub-window with these counts at which `n` more
    /// are admitted, if any.
    fn earliest(&self, oldest: u64, full: u64, n: u64, from: u64) -> Option<u64> {
        let room = self.limit.checked_sub(full)?.checked_sub(n)?;
        if oldest == 0 {
            return Some(from);
        }
        // oldest × (w − e) <= room × w  ⇔  w − e <= ⌊room × w / oldest⌋ (w − e is whole).
        let w = u128::from(self.sub);
        let slack = u128::from(room) * w / u128::from(oldest);
        let e = u64::try_from(w.saturating_sub(slack))
            .unwrap_or(u64::MAX)
            .max(from);
        (e < self.sub).then_some(e)
    }

    /// `count(h)` for `h <= j`, from the remembered sub-window `i`, its count `cur` and the
    /// history below it; `None` when the history was reused (stale view).
    #[inline]
    fn count(
        &self,
        h: Option<u64>,
        i: u64,
        cur: u64,
        history: &mut impl FnMut(u64) -> Option<u64>,
    ) -> Option<u64> {
        match h {
            // Sub-windows before the epoch's first one held nothing.
            None => Some(0),
            Some(h) if h == i => Some(cur),
            // Nothing is admitted in a sub-window the state has not reached.
            Some(h) if h > i => Some(0),
            Some(h) => history(h),
        }
    }

    /// The counts a decision at `r` sees, from the stored word's fields `(i, settled, cur)`.
    fn view(
        &self,
        (i, settled, cur): (u64, u64, u64),
        r: Reading,
        history: &mut impl FnMut(u64) -> Option<u64>,
    ) -> Option<CounterView> {
        let at = self.at(r, i);
        let k = self.k;
        let d = at.index - i;
        let (oldest, settled, now_cur) = if d == 0 {
            let oldest = self.count(i.checked_sub(k), i, cur, history)?;
            (oldest, settled, cur)
        } else if d < k {
            // Rolling forward by d: the sub-windows i − k + 1 ..= i − k + d leave the settled sum,
            // i joins it, and i − k + d becomes the oldest.
            let mut removed = 0u64;
            let mut oldest = 0;
            for h in 1..=d {
                oldest = self.count((i + h).checked_sub(k), i, cur, history)?;
                removed = removed.saturating_add(oldest);
            }
            (oldest, (settled + cur).saturating_sub(removed), 0)
        } else if d == k {
            (cur, 0, 0)
        } else {
            (0, 0, 0)
        };
        Some(CounterView {
            at,
            oldest,
            settled,
            cur: now_cur,
        })
    }

    /// Nanoseconds from the reading until the estimate reaches 0 if nothing else is admitted:
    /// until the latest sub-window with a count leaves the window.
    fn reset_nanos(
        &self,
        v: &CounterView,
        count: &mut impl FnMut(Option<u64>) -> Option<u64>,
    ) -> Option<u128> {
        let j = v.at.index;
        let k = self.k;
        // The latest h = j − k + t with a count, as t.
        let latest = if v.cur > 0 {
            Some(k)
        } else if v.settled > 0 {
            let mut found = None;
            for t in (1..k).rev() {
                if count((j + t).checked_sub(k))? > 0 {
                    found = Some(t);
                    break;
                }
            }
            found
        } else if v.oldest > 0 {
            Some(0)
        } else {
            None
        };
        Some(latest.map_or(0, |t| {
            // Sub-window j − k + t stops counting at the start of j + t + 1.
            u128::from(v.at.lead) + u128::from(t + 1) * u128::from(self.sub)
                - u128::from(v.at.elapsed)
        }))
    }

    /// Nanoseconds from the reading until `n` (`1..=N`) would be admitted if nothing else is.
    fn wait_nanos(
        &self,
        v: &CounterView,
        n: u64,
        count: &mut impl FnMut(Option<u64>) -> Option<u64>,
    ) -> Option<u128> {
        let j = v.at.index;
        let w = u128::from(self.sub);
        let e0 = u128::from(v.at.elapsed);
        let (mut oldest, mut full, mut from) = (v.oldest, v.settled + v.cur, v.at.elapsed);
        // Sub-window j + t: the oldest is count(j − k + t), the rest of the window is counted in
        // full; after k + 1 sub-windows everything has left and n <= N is admitted.
        for t in 0..=self.k + 1 {
            if let Some(e) = self.earliest(oldest, full, n, from) {
                return Some(u128::from(v.at.lead) + u128::from(t) * w + u128::from(e) - e0);
            }
            let next = if t < self.k {
                count((j + t + 1).checked_sub(self.k))?
            } else {
                0
            };
            oldest = next;
            full = full.saturating_sub(next);
            from = 0;
        }
        Some(u128::from(v.at.lead) + u128::from(self.k + 2) * w - e0)
    }

    /// When the whole admissions left, `⌊level / unit⌋` at the view `v`, grow by one: the wait
    /// until a request for one more would be admitted (`None`: the history was stale).
    fn next(
        &self,
        v: &CounterView,
        (level, unit): (u64, u64),
        count: &mut impl FnMut(Option<u64>) -> Option<u64>,
    ) -> Option<Next> {
        // `unit` is at least 1 by construction.
        let left = level.checked_div(unit).unwrap_or(0);
        if left >= self.limit {
            // Nothing counts any more.
            return Some(Next::FULL);
        }
        // The view's own sub-window holds `v.cur` (after an admission, with it).
        let (j, cur) = (v.at.index, v.cur);
        let mut count = |h: Option<u64>| if h == Some(j) { Some(cur) } else { count(h) };
        // More admitted than left now: the wait is at least 1 ns.
        Some(Next::nanos(
            self.wait_nanos(v, left + 1, &mut count)?.max(1),
        ))
    }

    /// Decides `n` (`0..=N`; 0 is a query, always answered) at `r` on the stored fields
    /// `(i, settled, cur)`. `Ok` admits, with the view after the admission (its `cur` includes
    /// `n`); `None`: the history was stale.
    pub(super) fn weigh(
        &self,
        stored: (u64, u64, u64),
        r: Reading,
        n: u64,
        mut history: impl FnMut(u64) -> Option<u64>,
    ) -> Option<Result<(CounterView, Admitted), Denied>> {
        let (i, _, cur) = stored;
        let v = self.view(stored, r, &mut history)?;
        let mut count = |h: Option<u64>| self.count(h, i, cur, &mut history);
        let e = v.at.elapsed;
        let full = v.settled + v.cur;
        if n == 0 || (n <= self.limit && self.within(v.oldest, full + n, e)) {
            let reset = if n > 0 {
                // The current sub-window now has a count: the estimate is 0 again once it leaves.
                u128::from(v.at.lead) + u128::from(self.k + 1) * u128::from(self.sub)
                    - u128::from(e)
            } else {
                self.reset_nanos(&v, &mut count)?
            };
            let (level, unit) = self.level(v.oldest, full + n, e);
            let after = CounterView {
                cur: v.cur + n,
                ..v
            };
            let next = self.next(&after, (level, unit), &mut count)?;
            let answer = Admitted::new(Headroom::new(level, unit, Span::from_nanos(reset), next));
            return Some(Ok((after, answer)));
        }
        let retry = self.wait_nanos(&v, n, &mut count)?;
        let reset = self.reset_nanos(&v, &mut count)?;
        let (level, unit) = self.level(v.oldest, full, e);
        let next = self.next(&v, (level, unit), &mut count)?;
        Some(Err(Denied::new(
            r.ns,
            Span::from_nanos(retry),
            Headroom::new(level, unit, Span::from_nanos(reset), next),
        )))
    }

    /// Checks `n` against `N`, answering `n = 0` as a query.
    #[inline]
    pub(crate) fn check_n(&self, n: u64) -> Result<bool, InsufficientCapacity> {
        InsufficientCapacity::check(n, self.limit)
    }

    // --- the one-word counter ----------------------------------------------------------------

    /// The one-word counter's (`k = 1`) admission of `n` at `r` on the word's fields
    /// `(i, prev, cur)`, in `u64` arithmetic: the new word and the answer, exactly as
    /// [`SlidingCounterPolicy::weigh`] gives them, or `None` whenever this path does not apply (a
    /// reading before window `i`, a request for nothing or more than `N`, a count above `N` in the
    /// word, a policy whose products may not fit a `u64`) or the request is not admitted.
    /// [`SlidingCounterPolicy::weigh`] then decides.
    #[inline]
    pub(super) fn admit_one(
        &self,
        (i, prev, cur): (u64, u64, u64),
        r: Reading,
        n: u64,
    ) -> Option<(u64, Admitted)> {
        let limit_w = self.narrow?;
        if n == 0 || n > self.limit || prev > self.limit || cur > self.limit {
            return None;
        }
        // The view of `weigh` with k = 1 (its settled sum is always 0): window i − 1's count is
        // `prev` (none before window 0), and rolling forward by one makes `cur` the oldest.
        let (oldest, cur) = match r.index.checked_sub(i)? {
            0 if i == 0 => (0, cur),
            0 => (prev, cur),
            1 => (cur, 0),
            _ => (0, 0),
        };
        let (w, e) = (self.sub, r.elapsed);
        // oldest, cur, n <= N and e < w: at most 3 × N × w, which `narrow` checked fits a u64.
        let full = cur + n;
        let used = oldest * (w - e) + full * w;
        if used > limit_w {
            return None;
        }
        // The room left, `N × w − used`, in units of 1 / w (which fits a u64 here): the figures
        // `weigh` reports, in the units `Next::counter` reads them in.
        let (level, unit) = (limit_w - used, w);
        // As `weigh`'s reset for an admission with k = 1 and no lead: 2w − e <= 2^63.
        let reset = Span::from_nanos(u128::from(2 * w - e));
        // The wait for one more is worked out from the two counts only if asked for.
        let next = Next::counter(oldest, full)?;
        Some((
            self.pack(r.index, oldest, full),
            Admitted::new(Headroom::new(level, unit, reset, next)),
        ))
    }

    /// The one-word counter's decision of `n` (`0..=N`) at `m` on `word` through the general
    /// [`SlidingCounterPolicy::weigh`] (kept out of line, taking only scalars: the admissions
    /// [`SlidingCounterPolicy::admit_one`] answers never need it).
    #[inline(never)]
    pub(super) fn weigh_one(&self, word: u64, m: Moment, n: u64) -> Step<Admitted, Denied> {
        let (i, prev, cur) = self.unpack(word);
        let r = self.locate_near(m, i);
        // The word holds the previous window's count itself; older windows count 0.
        let history = |h: u64| Some(if h + 1 == i { prev } else { 0 });
        match self.weigh((i, 0, cur), r, n, history) {
            // With k = 1 the view's oldest count is the new previous window's.
            Some(Ok((v, answer))) if n > 0 => {
                Step::Write(self.pack(v.at.index, v.oldest, v.cur), answer)
            }
            Some(Ok((_, answer))) => Step::Keep(answer),
            Some(Err(denied)) => Step::Refuse(denied),
            // The history closure above never reports a stale view; refuse rather than admit
            // uncounted if it ever did.
            None => Step::Refuse(Denied::new(
                r.ns,
                Span::from_nanos(0),
                Headroom::whole(0, 0, Next::FULL),
            )),
        }
    }
}

/// `N × w` when `3 × N × w` fits a `u64`: then `oldest × (w − e) + (cur + n) × w` with
/// `oldest, cur, n <= N` is at most `3 × N × w` and is computed exactly in `u64`, as `N × w` is.
fn narrow(limit: u64, w: u64) -> Option<u64> {
    limit.checked_mul(3)?.checked_mul(w)?;
    limit.checked_mul(w)
}

#[cfg(all(test, not(tollgate_loom)))]
pub(crate) mod tests {
    use super::*;
    use crate::algorithm::sealed::OneWord;
    use crate::algorithm::SlidingWindowCounterAlgorithm;

    const SEC: u64 = 1_000_000_000;

    /// The policy of `n` per second over `k` sub-windows (also for the sub-window counter's tests).
    pub(crate) fn policy(n: u64, k: u64) -> SlidingCounterPolicy {
        SlidingCounterPolicy::new(&Quota::per_second(n).unwrap(), k).unwrap()
    }

    #[test]
    fn words_round_trip_at_the_widest_fields() {
        let p = policy(32_767, 1);
        assert_eq!(p.bits, 15);
        let max_index = (1u64 << 62) / SEC + 1;
        let word = p.pack(max_index, 32_767, 32_767);
        assert_eq!(p.unpack(word), (max_index, 32_767, 32_767));
        assert_eq!(p.unpack(0), (0, 0, 0));
    }

    #[test]
    fn earliest_solves_the_inequality_rounding_up() {
        let p = policy(10, 1);
        // oldest 10, nothing else, one more: 10 (W − e) <= 9 W ⇔ e >= W / 10.
        assert_eq!(p.earliest(10, 0, 1, 0), Some(SEC / 10));
        assert_eq!(p.earliest(10, 0, 1, SEC / 2), Some(SEC / 2));
        // 3 (W − e) <= 1 × W ⇔ e >= W − ⌊W / 3⌋, rounded up to the nanosecond.
        assert_eq!(p.earliest(3, 8, 1, 0), Some(SEC - SEC / 3));
        assert!(p.within(3, 9, SEC - SEC / 3));
        assert!(!p.within(3, 9, SEC - SEC / 3 - 1));
        // No room in this window at all.
        assert_eq!(p.earliest(0, 10, 1, 0), None);
        assert_eq!(p.earliest(10, 10, 0, 0), None);
        assert_eq!(p.earliest(0, 9, 1, 7), Some(7));
    }

    /// A `Step` as a value the tests can compare.
    /// An admission's figures: remaining, reset, next.
    type Admission = (u64, std::time::Duration, Option<std::time::Duration>);
    /// A denial's figures: retry, retry at, remaining, reset, next.
    type Denial = (
        std::time::Duration,
        Nanos,
        u64,
        std::time::Duration,
        Option<std::time::Duration>,
    );

    /// What an admission reports: the one-word path and `weigh` may hold the same figures
    /// differently (the one-word path leaves the division `next_after` needs to the caller).
    fn seen(a: Admitted) -> Admission {
        (a.remaining(), a.reset_after(), a.next_after())
    }

    fn outcome(step: Step<Admitted, Denied>) -> (Option<u64>, Result<Admission, Denial>) {
        let denial = |d: Denied| {
            (
                d.retry_after(),
                d.retry_at(),
                d.remaining(),
                d.reset_after(),
                d.next_after(),
            )
        };
        match step {
            Step::Write(word, a) => (Some(word), Ok(seen(a))),
            Step::Keep(a) => (None, Ok(seen(a))),
            Step::Refuse(d) => (None, Err(denial(d))),
        }
    }

    /// The one-word counter's decision as it was before its `u64` path: the reading located by a
    /// division, every request through `weigh`.
    fn general(
        p: &SlidingCounterPolicy,
        word: u64,
        now: u64,
        n: u64,
    ) -> (Option<u64>, Result<Admission, Denial>) {
        let (i, prev, cur) = p.unpack(word);
        let history = |h: u64| Some(if h + 1 == i { prev } else { 0 });
        outcome(
            match p.weigh((i, 0, cur), p.read(Nanos::new(now)), n, history) {
                Some(Ok((v, answer))) if n > 0 => {
                    Step::Write(p.pack(v.at.index, v.oldest, v.cur), answer)
                }
                Some(Ok((_, answer))) => Step::Keep(answer),
                Some(Err(denied)) => Step::Refuse(denied),
                None => unreachable!("the one-word history is never stale"),
            },
        )
    }

    fn decide(
        p: &SlidingCounterPolicy,
        word: u64,
        now: u64,
        n: u64,
    ) -> (Option<u64>, Result<Admission, Denial>) {
        outcome(SlidingWindowCounterAlgorithm::decide(
            p,
            word,
            p.moment(Nanos::new(now)),
            n,
        ))
    }

    #[test]
    fn the_u64_path_takes_ordinary_admissions_and_only_narrow_policies() {
        let p = policy(10, 1);
        assert_eq!(p.narrow, Some(10 * SEC));
        // Window 1 with 4 admitted in window 0, half way through: 4 × W/2 + 3 W <= 10 W.
        let word = p.pack(0, 0, 4);
        let r = p.locate_near(p.moment(Nanos::new(SEC + SEC / 2)), 0);
        assert_eq!((r.index, r.elapsed), (1, SEC / 2));
        let (new, a) = p
            .admit_one(p.unpack(word), r, 3)
            .expect("the u64 path admits");
        assert_eq!(p.unpack(new), (1, 4, 3));
        assert_eq!(a.remaining(), 5);
        assert_eq!(a.reset_after().as_nanos(), u128::from(SEC + SEC / 2));
        // The 4 of window 0 weigh 4 × (W − e) / W: one more whole request is free once a quarter
        // of a second has taken one of them off.
        assert_eq!(a.next_after(), Some(std::time::Duration::from_millis(250)));
        assert_eq!(
            (Some(new), Ok(seen(a))),
            general(&p, word, SEC + SEC / 2, 3),
            "the general decision agrees"
        );
        // Refused, queries, and readings before the word's window go to `weigh`.
        assert!(p.admit_one(p.unpack(word), r, 9).is_none());
        assert!(p.admit_one(p.unpack(word), r, 0).is_none());
        let back = p.locate_near(p.moment(Nanos::new(SEC / 2)), 1);
        assert!(p.admit_one(p.unpack(p.pack(1, 0, 0)), back, 1).is_none());
        // A word holding a count above N (the counter never writes one) needs the u128 test.
        assert!(p.admit_one(p.unpack(p.pack(1, 11, 0)), r, 1).is_none());
        assert!(p.admit_one(p.unpack(p.pack(1, 0, 11)), r, 1).is_none());
        // The largest N for which 3 × N × W fits a u64, per hour (as the module docs say), and
        // the widest windows with the largest counts, need the u128 test.
        let hour = |n| {
            SlidingCounterPolicy::new(
                &Quota::per_period(n, std::time::Duration::from_secs(3_600)).unwrap(),
                1,
            )
            .unwrap()
        };
        assert!(hour(1_708_031).narrow.is_some());
        assert_eq!(hour(1_708_032).narrow, None);
        let wide = SlidingCounterPolicy::new(
            &Quota::per_period(1 << 30, std::time::Duration::from_nanos(1 << 62)).unwrap(),
            1,
        )
        .unwrap();
        assert_eq!(wide.narrow, None);
    }

    #[test]
    fn locate_near_is_the_division() {
        let p = policy(10, 1);
        for i in [0, 1, 5, u64::MAX >> 20, u64::MAX] {
            for now in [
                0,
                1,
                SEC - 1,
                SEC,
                5 * SEC + 7,
                6 * SEC,
                7 * SEC - 1,
                7 * SEC,
                u64::MAX,
            ] {
                let (a, b) = (
                    p.locate_near(p.moment(Nanos::new(now)), i),
                    p.read(Nanos::new(now)),
                );
                assert_eq!(
                    (a.index, a.elapsed, a.ns),
                    (b.index, b.elapsed, b.ns),
                    "{i} {now}"
                );
            }
        }
    }

    /// A one-word policy of `n` per `w` ns, `n` capped at the largest accepted, its windows moved
    /// by `offset` ns (windows of less than 4 ns hold no count).
    fn any_policy(n: u64, w: u64, offset: u64) -> SlidingCounterPolicy {
        let w = w.clamp(4, 1 << 62);
        let max = Grid::new(w).max_count(2);
        let quota = Quota::per_period(n.clamp(1, max), std::time::Duration::from_nanos(w)).unwrap();
        let mut p = SlidingCounterPolicy::new(&quota, 1).unwrap();
        p.grid = p.grid.aligned(
            super::super::Alignment::Offset(std::time::Duration::from_nanos(offset)),
            Nanos::ZERO,
        );
        p
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// Every word (counts beyond `N` included), every reading near or far from the word's
        /// window, every request: the decision with its `u64` path answers exactly as `weigh`.
        #[test]
        fn the_decision_answers_as_the_general_one(
            n in proptest::prop_oneof![1u64..=20, 1u64..=40_000, proptest::prelude::any::<u64>()],
            w in proptest::prop_oneof![
                4u64..=10,
                proptest::sample::select(vec![1_000, 1_000_000, SEC, 3_600 * SEC, 1 << 62]),
                proptest::prelude::any::<u64>(),
            ],
            offset in proptest::prop_oneof![proptest::strategy::Just(0u64), proptest::prelude::any::<u64>()],
            index in proptest::prop_oneof![0u64..=4, proptest::prelude::any::<u64>()],
            fields in (proptest::prelude::any::<u64>(), proptest::prelude::any::<u64>()),
            small in proptest::prelude::any::<bool>(),
            at in (-3i64..=4, proptest::prelude::any::<u64>()),
            far in proptest::prelude::any::<Option<u64>>(),
            ask in proptest::prelude::any::<u64>(),
        ) {
            let p = any_policy(n, w, offset);
            let mask = (1u64 << p.bits) - 1;
            let (a, b) = if small {
                (fields.0 % (p.limit + 2), fields.1 % (p.limit + 2))
            } else {
                (fields.0 & mask, fields.1 & mask)
            };
            let index = index % ((u64::MAX >> (2 * p.bits)) + 1);
            let word = p.pack(index, a.min(mask), b.min(mask));
            // A reading in window index + at.0 of the grid (when there is one), or anywhere.
            let now = far.unwrap_or_else(|| {
                let t = i128::from(index) * i128::from(p.sub) + i128::from(at.0) * i128::from(p.sub)
                    + i128::from(at.1 % p.sub)
                    - i128::from(p.grid.shift);
                u64::try_from(t.max(0)).unwrap_or(u64::MAX)
            });
            let ask = ask % (p.limit + 1);
            proptest::prop_assert_eq!(decide(&p, word, now, ask), general(&p, word, now, ask));
        }
    }
}
