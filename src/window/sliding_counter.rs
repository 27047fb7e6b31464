//! The sliding window counter: the weighted estimate of the last window's admissions, in one word
//! ([`SlidingWindowCounter`]). Its policy also serves [`SubWindowCounter`], the same estimate over
//! `k` sub-windows, whose multi-word protocol lives in [`sub_window`](super::sub_window).
//!
//! ```
//! use tollgate::{ManualClock, Nanos, Quota};
//! use tollgate::window::SlidingWindowCounter;
//!
//! // 10 per second, estimated over the current and the previous one-second window.
//! let limiter = SlidingWindowCounter::with_clock(Quota::per_second(10)?, ManualClock::new())?;
//! assert_eq!((0..20).filter(|_| limiter.try_acquire().is_ok()).count(), 10);
//! // Half way through the next window, half of the previous window's 10 still count.
//! assert_eq!(limiter.remaining_at(Nanos::new(1_500_000_000)), 5);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Algorithm
//!
//! Time is cut into windows of the quota's period `W` (at the clock's epoch, or where an
//! [`Alignment`] puts them). A reading at `e` nanoseconds into window `j` estimates the admissions of
//! the last `W` nanoseconds as
//!
//! ```text
//! estimate = prev × (W − e) / W + cur          prev = count(j − 1), cur = count(j)
//! ```
//!
//! and admits `n` when `estimate + n <= N`, decided exactly in integers as
//! `prev × (W − e) + (cur + n) × W <= N × W` (no rounding at all).
//!
//! # The one-word counter's fast path
//!
//! [`SlidingWindowCounter`]'s admissions take a shorter road to the same answers:
//!
//! - **No division to place the reading.** The decision receives the reading unplaced and places
//!   it against the window the word remembers, `i`: a reading `t` (nanoseconds on the grid) with
//!   `i × W <= t < (i + 2) × W` lies in window `i` or `i + 1`, at `t − i × W` or `t − (i + 1) × W`,
//!   which is exactly `(⌊t / W⌋, t mod W)`. Only readings outside those two windows (a clock that
//!   stepped back, a counter idle for two windows or more) pay for the division.
//! - **The test in `u64` when it provably fits.** When both counts of the word are at most `N`
//!   (always, for the words the counter writes; the check is two comparisons), every term of the
//!   test is at most `prev × W + (cur + n) × W <= 3 × N × W`. The policy checks once, when it is
//!   built, that `3 × N × W` fits a `u64`; then the test and the room left (`N × W − used`) are
//!   computed in `u64` with the same values as in `u128`, so the answer, the word written and the
//!   reported figures are the same (the admission leaves the division `next_after` needs to the
//!   outcome, which does it only if asked). That covers every `N` for windows up to 48 minutes, and
//!   for example `N` up to 1 708 031 per hour, 71 167 per day, 10 166 per week; past it, or for a
//!   word holding a count above `N`, the decision uses `u128`.
//! - **Admissions only.** Denials, queries (`n = 0`) and readings before window `i` go through the
//!   general decision (kept out of line), which also computes `retry_after` and `reset_after`.
//!
//! The policy and both roads live in `window/estimate.rs`, shared with the sub-window counter;
//! its unit test `the_decision_answers_as_the_general_one` compares the two roads on arbitrary
//! words (counts beyond `N` included), windows, alignments and readings.
//!
//! [`SubWindowCounter`] makes the same estimate over `k` sub-windows (see
//! [`sub_window`](super::sub_window)); the policy below is written for `k` sub-windows of
//! `w = W / k`, and this counter is its case `k = 1`.
//!
//! # Approximation against the exact log
//!
//! The estimate assumes that the oldest (sub-)window's admissions were spread evenly over it. The
//! exact count of admissions in `(t − W, t]` differs from the estimate by at most that oldest
//! (sub-)window's count, in either direction:
//!
//! - **Worst case for one window**: `N` admissions at the very end of window `j − 1`, then, as soon
//!   as window `j` has run for a fraction `f` of its length, `⌊f × N⌋` more. As `f` approaches 1
//!   (the weight `1 − f` of the old window approaches 0), nearly `2N` admissions fall within one
//!   span of length `W` (just under one window from the first batch to the second): the exact
//!   sliding log would have refused all but a few of the second batch. `tests/sliding_counter.rs`
//!   measures this against an exact count.
//! - The other way, admissions early in the oldest (sub-)window are still partly counted after they
//!   have left the exact window: the estimate then refuses requests the exact log would admit, by
//!   at most the same count.
//! - **With `k` sub-windows** the excess is bounded by the oldest sub-window's count: at most
//!   `N + count(j − k)` admissions in any span of length `W`, and `count(j − k)` is at most `N`
//!   but is typically near `N / k` for steady traffic (60 one-second sub-windows: the error shrinks
//!   from a whole window's count to about a sixtieth of it).
//! - The estimate never lets more than `N` through within one aligned window of `k` whole
//!   sub-windows: each admission counts every earlier sub-window of it in full.
//! - Idle periods of any length read as empty; a request for `n > N` can never succeed and is
//!   [`AcquireError::InsufficientCapacity`].
//!
//! # Time
//!
//! Each limiter remembers the (sub-)window index of its last admission. A reading in an earlier
//! (sub-)window — a clock that stepped back, or a thread whose reading was overtaken by another's —
//! is judged at the start of the remembered (sub-)window (`e = 0`, the oldest counts with full
//! weight): the most conservative estimate that window has, so such readings never create
//! admissions. Their `retry_after` and `reset_after` are still measured from the actual reading.
//! Readings beyond [`Nanos::MAX_USABLE`] (2^62 ns) are taken as that value, so indexes never wrap.
//!
//! # Ranges
//!
//! The window length must be at most 2^62 ns, the quota's capacity and initial fill must be its
//! count, and the count must fit twice beside a (sub-)window index in a 64-bit word: shorter
//! (sub-)windows need more index bits. The largest `N` for each length is tabled on
//! [`SlidingWindowCounter`]. A quota outside these is refused with [`QuotaError::Algorithm`],
//! naming the field (`"period"`, `"capacity"`, `"initial"`, `"count"`) in this module's words.
//!
//! [`SubWindowCounter`]'s own ranges (`k`, and `N` at the sub-window length) are in
//! [`sub_window`](super::sub_window).

pub use crate::algorithm::SlidingWindowCounterAlgorithm;

use std::fmt;

pub use super::estimate::{Moment, Reading, SlidingCounterPolicy};
// kept for the public path
#[doc(hidden)]
pub use super::estimate::SlidingCounterPolicy as Policy;
use super::Alignment;
#[cfg(doc)]
use super::SubWindowCounter;
use crate::algorithm::sealed::OneWord;
use crate::cas::Step;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::direct::Direct;
#[cfg(doc)]
use crate::outcome::AcquireError;
use crate::outcome::{Admitted, Denied, Headroom, Next};
use crate::quota::{Quota, QuotaError};

// ---------------------------------------------------------------------------------------------
// SlidingWindowCounter
// ---------------------------------------------------------------------------------------------

impl OneWord for SlidingWindowCounterAlgorithm {
    type Policy = SlidingCounterPolicy;
    type Time = Moment;

    const NAME: &'static str = "SlidingWindowCounter";

    fn policy(quota: &Quota) -> Result<SlidingCounterPolicy, QuotaError> {
        SlidingCounterPolicy::new(quota, 1)
    }

    #[inline]
    fn time(policy: &SlidingCounterPolicy, now: Nanos) -> Moment {
        policy.moment(now)
    }

    #[inline]
    fn capacity(policy: &SlidingCounterPolicy) -> u64 {
        policy.limit
    }

    fn available_word(policy: &SlidingCounterPolicy, available: u64, m: Moment) -> u64 {
        // `m`'s window with all but `available` counted, and nothing in the one before: the
        // estimate at `m` leaves exactly `available`, and the next window weighs this one's count
        // by the part of it still covered.
        let index = policy.read(Nanos::new(m.ns)).index;
        policy.pack(index, 0, policy.limit - available.min(policy.limit))
    }

    fn carry(old: &SlidingCounterPolicy, new: &mut SlidingCounterPolicy) {
        new.grid = new.grid.realigned(old.grid);
    }

    fn initial_word(_: &SlidingCounterPolicy, _: &Quota, _: Moment) -> u64 {
        // Window 0, both counts 0 (validation makes the quota's initial fill its count).
        0
    }

    /// The one-word counter's word of a key a keyed limiter creates afresh, "fresh as of
    /// `fresh`": from `fresh`'s window `j` on it reads as empty (both windows counted are later
    /// than its own), exactly like a word that has never admitted anything; before `j` it reads
    /// as window `j − 2` full and window `j − 1` weighted by a full `j − 2`, so it admits nothing
    /// in `j − 2` or earlier and no more than any expired word in `j − 1`. A key forgotten at any
    /// reading up to `fresh` held an expired word (its window two or more before the forgetting
    /// reading's, see `is_fresh`), which admits no more than this at every reading, so
    /// forgetting never admits more than keeping would have. Below window 2 no word can have
    /// expired: the zero word.
    fn fresh_word(policy: &SlidingCounterPolicy, fresh: Nanos) -> u64 {
        match policy.read(fresh).index.checked_sub(2) {
            Some(before) => policy.pack(before, policy.limit, policy.limit),
            None => 0,
        }
    }

    /// Whether the one-word counter's `word` no longer counts at `r` or later: both its windows
    /// have left, so it reads exactly as the fresh word of `r` does.
    fn is_fresh(policy: &SlidingCounterPolicy, word: u64, m: Moment) -> bool {
        let i = policy.unpack(word).0;
        i.saturating_add(2) <= policy.locate_near(m, i).index
    }

    /// The one-word counter's decision (`k = 1`): `n` (`0..=N`) at `m` on `word`. An admission
    /// the `u64` test decides is answered inline ([`SlidingCounterPolicy::admit_one`]); everything
    /// else (denials, queries, readings before the word's window, the widest policies) by the
    /// general [`SlidingCounterPolicy::weigh`], to the same answer.
    #[inline]
    fn decide(
        policy: &SlidingCounterPolicy,
        word: u64,
        m: Moment,
        n: u64,
    ) -> Step<Admitted, Denied> {
        let fields = policy.unpack(word);
        if let Some((new, answer)) = policy.admit_one(fields, policy.locate_near(m, fields.0), n) {
            return Step::Write(new, answer);
        }
        policy.weigh_one(word, m, n)
    }

    /// What a request for nothing reports at `r` for the one-word counter.
    fn query(policy: &SlidingCounterPolicy, word: u64, m: Moment) -> Admitted {
        match Self::decide(policy, word, m, 0) {
            Step::Keep(a) | Step::Write(_, a) => a,
            // A request for nothing is always answered with an admission (`weigh` admits
            // `n = 0`); were it ever refused, nothing is left.
            Step::Refuse(_) => Admitted::new(Headroom::whole(0, 0, Next::FULL)),
        }
    }

    /// `⌊N − estimate⌋` at `r` for the one-word counter.
    fn remaining(policy: &SlidingCounterPolicy, word: u64, m: Moment) -> u64 {
        Self::query(policy, word, m).remaining()
    }

    fn debug_word(policy: &SlidingCounterPolicy, word: u64, f: &mut fmt::DebugStruct<'_, '_>) {
        let (window, previous, current) = policy.unpack(word);
        f.field("window", &window)
            .field("previous", &previous)
            .field("current", &current);
    }
}

/// A lock-free sliding window counter: `N` per window `W`, estimated from the current and the
/// previous window's counts, the whole state in one `AtomicU64`.
///
/// Admits `n` at `e` nanoseconds into window `j` when
/// `count(j − 1) × (W − e) / W + count(j) + n <= N`, exactly (see the [module docs](self) for the
/// approximation this makes against an exact log, and the largest `N` for each `W`).
///
/// # State table
///
/// The word is `index | prev | cur`, the counts in the low `2c` bits (`c` bits each, where `c` is
/// the largest width leaving enough index bits for every reading up to 2^62 ns), the index of the
/// window of the last admission above them. With `j` the window of a reading:
///
/// | reading | counts seen (prev, cur) | an admission of `n` writes |
/// | --- | --- | --- |
/// | `j < index` (clock stepped back) | (prev, cur), judged at `e = 0` | `index \| prev \| cur + n` |
/// | `j == index` | (prev, cur) | `index \| prev \| cur + n` |
/// | `j == index + 1` | (cur, 0) | `j \| cur \| n` |
/// | `j >= index + 2` | (0, 0) | `j \| 0 \| n` |
///
/// Word 0 is window 0 with both counts 0: a fresh limiter. The index never decreases and, within
/// one index, the counts never decrease; denials, peeks and queries never write.
///
/// # Ranges
///
/// `N` must fit twice beside the window index, which needs more bits for shorter windows; `W` is at
/// most 2^62 ns. The largest `N` for some window lengths (for a [`SubWindowCounter`], look up the
/// sub-window length `W / k`):
///
/// | (sub-)window | largest `N` |
/// | --- | --- |
/// | 1 µs | 31 |
/// | 1 ms | 1 023 |
/// | 10 ms | 4 095 |
/// | 100 ms | 16 383 |
/// | 1 s | 32 767 |
/// | 10 s | 131 071 |
/// | 1 min | 262 143 |
/// | 1 h | 2 097 151 |
/// | 1 day | 16 777 215 |
/// | 2^62 ns | 2^31 − 1 |
///
/// The methods every direct limiter shares (`try_acquire*`, `peek_n*`, `remaining*`, `quota`,
/// `clock`) are [`Direct`]'s.
///
/// # Memory ordering
///
/// Admissions are linearizable: each is one compare-and-swap on the word's latest value, so no two
/// callers take the same slot of a window and no count is lost or doubled at a rollover. The word
/// publishes nothing but itself, so every access is `Relaxed`; do not use an admission to publish
/// other data between threads.
///
/// # Examples
///
/// ```
/// use tollgate::{ManualClock, Nanos, Quota};
/// use tollgate::window::SlidingWindowCounter;
///
/// let limiter = SlidingWindowCounter::with_clock(Quota::per_second(4)?, ManualClock::new())?;
/// assert!(limiter.try_acquire_n_at(4, Nanos::new(900_000_000)).is_ok());
/// // 250 ms into the next window, 3/4 of the previous window's 4 still count: one left.
/// assert_eq!(limiter.remaining_at(Nanos::new(1_250_000_000)), 1);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type SlidingWindowCounter<C = MonotonicClock> = Direct<SlidingWindowCounterAlgorithm, C>;

impl<C: Clock> SlidingWindowCounter<C> {
    /// The same counter with its window boundaries moved to `alignment` (read against
    /// `clock.now()`). Meant for a freshly built counter: counts already recorded keep their window
    /// indexes under the new boundaries.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota, window::{Alignment, SlidingWindowCounter}};
    /// let limiter = SlidingWindowCounter::with_clock(Quota::per_second(2)?, ManualClock::new())?
    ///     .aligned(Alignment::Offset(Duration::from_millis(300)));
    /// limiter.try_acquire_n_at(2, Nanos::new(200_000_000))?;
    /// // The window that held 200 ms ends at 300 ms; at 1.3 s the previous window is over too.
    /// assert_eq!(limiter.remaining_at(Nanos::new(1_300_000_000)), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn aligned(mut self, alignment: Alignment) -> SlidingWindowCounter<C> {
        let now = self.clock.now();
        let block = self.current.get_mut();
        block.policy.grid = block.policy.grid.aligned(alignment, now);
        self
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::cas;
    use crate::clock::ManualClock;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn denials_peeks_and_queries_never_write() {
        let one =
            SlidingWindowCounter::with_clock(Quota::per_second(2).unwrap(), ManualClock::new())
                .unwrap();
        one.try_acquire_n_at(2, Nanos::new(0)).unwrap();
        let before = cas::read(&one.block().state);
        let _ = one.try_acquire_at(Nanos::new(1));
        let _ = one.peek_n_at(1, Nanos::new(3 * SEC));
        let _ = one.try_acquire_n_at(0, Nanos::new(3 * SEC));
        assert_eq!(cas::read(&one.block().state), before);
    }
}
