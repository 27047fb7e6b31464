//! The fixed window: up to N admissions per window of length W, the count reset at each window's
//! start, the whole state in one `AtomicU64`.
//!
//! ```
//! use tollgate::{ManualClock, Nanos, Quota};
//! use tollgate::window::FixedWindow;
//!
//! // 3 per second, windows starting at every whole second of the clock.
//! let limiter = FixedWindow::with_clock(Quota::per_second(3)?, ManualClock::new())?;
//! let admitted = (0..5).filter(|_| limiter.try_acquire_at(Nanos::new(500_000_000)).is_ok()).count();
//! assert_eq!(admitted, 3);
//! // A new window, a new count.
//! assert!(limiter.try_acquire_at(Nanos::new(1_000_000_000)).is_ok());
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Algorithm
//!
//! The design notes' simplest limiter: divide time into windows of length W, count admissions in
//! the current one, refuse once the count would pass N, and start again from zero in the next
//! window. Windows are numbered from the clock's epoch (or from an [`Alignment`]), and the word
//! holds the number of the window its count belongs to beside the count, so a new window resets the
//! count in the same compare-and-swap that admits the first request of the window, and a limiter
//! left idle for any length of time reads as a fresh window. No timer, no background reset.
//!
//! # The boundary burst
//!
//! A fixed window limits each window, not each span of length W: a client can take N admissions in
//! the last instant of one window and N more in the first instant of the next, 2N within a span
//! just over one nanosecond long. The design notes call this the fixed window's critical flaw, and
//! it is inherent to the algorithm. Where it matters, use
//! [`SlidingWindowCounter`](crate::window::SlidingWindowCounter) (approximate, one word),
//! [`SlidingWindowLog`](crate::window::SlidingWindowLog) (exact, 8 bytes per admission in a window)
//! or [`TokenBucket`](crate::TokenBucket) (exact C + R t, one word).
//!
//! # Guarantees
//!
//! - At most N admissions carry each window index, under any interleaving of threads and readings.
//! - **Time only moves forward.** A reading in a window older than the one the word holds (a clock
//!   stepping back, or a slower thread's older reading) is taken as a reading in the word's window:
//!   it can never reset the count. Readings past [`Nanos::MAX_USABLE`] (2^62 ns) are clamped.
//! - Windows never wrap: the window index has enough bits for every reading up to 2^62 ns, and the
//!   count gets the bits left over, which sets the largest N for a window length (below).
//!
//! # Ranges
//!
//! The window length W is the quota's period, from 1 ns to 2^62 ns; N is the quota's count, at most
//! one per nanosecond of the window (the quota's own limit). Every such N fits: the window index
//! takes the bit length of `2^62 / W` (rounded up) and leaves the count room for at least W.
//!
//! # Memory ordering
//!
//! The word publishes nothing but itself, so every access is `Relaxed`, as in the token bucket: the
//! atomicity of the compare-and-swap, not a fence, keeps two threads from taking the same slot.

pub use crate::algorithm::FixedWindowAlgorithm;

use super::{check_count, window_of, Alignment, Grid};
use crate::algorithm::sealed::OneWord;
use crate::cas::Step;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::direct::Direct;
use crate::outcome::{Admitted, Denied, Headroom, Next, Span};
use crate::quota::{Quota, QuotaError};

/// The fixed window's constants, derived once from a [`Quota`].
///
/// # Examples
///
/// ```
/// use tollgate::window::fixed::FixedWindowPolicy;
/// // Built by the limiter from its quota, never by hand: plain data, copied and shared freely.
/// fn plain<T: Copy + Send + Sync + 'static>() {}
/// plain::<FixedWindowPolicy>();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowPolicy {
    grid: Grid,
    /// N: admissions per window.
    limit: u64,
    /// Bits of the word below the window index, holding the count.
    count_bits: u32,
}

// kept for the public path
#[doc(hidden)]
pub type Policy = FixedWindowPolicy;

/// The packed state: the window index and the count of admissions in it.
///
/// # State table
///
/// With `b = count_bits` (fixed by the window length, at least 1) and `j` the index of the window
/// holding the reading:
///
/// | bits | field |
/// | --- | --- |
/// | `63..b` | `i`: the index of the window the count belongs to |
/// | `b-1..0` | `k`: admissions in window `i`, `0..=N` |
///
/// | word `(i, k)` | admissions so far in the reading's window | reached by |
/// | --- | --- | --- |
/// | `i == j` | `k` | an admission in window `j` |
/// | `i < j` | 0 (a new window) | time passing; construction (`(0, 0)`) |
/// | `i > j` | `k`, as if the reading were in window `i` | only a reading older than one applied |
///
/// Transitions: an admission of `n` writes `(max(i, j), k' + n)`, where `k'` is the count the table
/// gives, and only when `k' + n <= N`; denials, peeks and queries never write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Word(u64);

impl Word {
    fn new(index: u64, count: u64, count_bits: u32) -> Word {
        Word((index << count_bits) | count)
    }

    fn index(self, count_bits: u32) -> u64 {
        self.0 >> count_bits
    }

    fn count(self, count_bits: u32) -> u64 {
        self.0 & ((1 << count_bits) - 1)
    }
}

/// Where a reading falls, seen from a word: the window that counts and what it holds.
#[derive(Debug, Clone, Copy)]
struct FixedView {
    /// The window the decision is made in: the reading's, or the word's when the reading is older.
    index: u64,
    /// Admissions already in that window.
    count: u64,
    /// The reading (clamped), from which waits are measured.
    now: u64,
}

impl FixedWindowPolicy {
    pub(crate) fn new(quota: &Quota) -> Result<FixedWindowPolicy, QuotaError> {
        let (limit, length) = window_of(quota, "fixed window")?;
        check_count(limit, length, 1, "fixed window")?;
        let grid = Grid::new(length);
        Ok(FixedWindowPolicy {
            grid,
            limit,
            count_bits: u64::BITS - grid.max_count(1).leading_zeros(),
        })
    }

    fn aligned(self, alignment: Alignment, now: Nanos) -> FixedWindowPolicy {
        FixedWindowPolicy {
            grid: self.grid.aligned(alignment, now),
            ..self
        }
    }

    #[inline]
    fn view(&self, word: u64, now: Nanos) -> FixedView {
        let word = Word(word);
        let (j, _) = self.grid.locate(now);
        let i = word.index(self.count_bits);
        let count = if j > i {
            0
        } else {
            word.count(self.count_bits)
        };
        FixedView {
            index: j.max(i),
            count,
            now: now.clamped(),
        }
    }

    /// Nanoseconds from the reading to the end of the view's window.
    fn until_window_end(&self, view: FixedView) -> u128 {
        u128::from(
            self.grid
                .start(view.index.saturating_add(1))
                .saturating_sub(view.now),
        )
    }

    /// The denial of a request that does not fit in the view's window: it fits at the next window's
    /// start, since `n <= N`.
    #[cold]
    fn denied(&self, view: FixedView) -> Denied {
        let end = self.until_window_end(view);
        let wait = Span::from_nanos(end);
        // Everything comes back at the window's end, and nothing before it.
        Denied::new(
            view.now,
            wait,
            Headroom::whole(self.limit - view.count, end, Next::nanos(end)),
        )
    }
}

impl OneWord for FixedWindowAlgorithm {
    type Policy = FixedWindowPolicy;
    type Time = Nanos;

    const NAME: &'static str = "FixedWindow";

    fn policy(quota: &Quota) -> Result<FixedWindowPolicy, QuotaError> {
        FixedWindowPolicy::new(quota)
    }

    #[inline]
    fn time(_: &FixedWindowPolicy, now: Nanos) -> Nanos {
        now
    }

    #[inline]
    fn capacity(policy: &FixedWindowPolicy) -> u64 {
        policy.limit
    }

    fn available_word(policy: &FixedWindowPolicy, available: u64, now: Nanos) -> u64 {
        // `now`'s window with all but `available` counted; the next window opens in full.
        let index = policy.grid.locate(now).0;
        Word::new(
            index,
            policy.limit - available.min(policy.limit),
            policy.count_bits,
        )
        .0
    }

    fn carry(old: &FixedWindowPolicy, new: &mut FixedWindowPolicy) {
        new.grid = new.grid.realigned(old.grid);
    }

    fn initial_word(_: &FixedWindowPolicy, _: &Quota, _: Nanos) -> u64 {
        // Window 0, nothing counted: a window limiter starts with its whole count (validation
        // makes the quota's initial fill equal to it).
        0
    }

    /// The word of a key a keyed limiter creates afresh, "fresh as of `fresh`": at readings in
    /// `fresh`'s window or later it reads as a new window (count 0), exactly like a word that has
    /// never admitted anything; at earlier readings it reads as the full window just before, so it
    /// admits nothing there. A key forgotten at any reading up to `fresh` held a word that admits no
    /// more than this at every reading (it was expired, its window before the forgetting reading's),
    /// so forgetting it and creating this never admits more than keeping it would have.
    /// In window 0 there is no earlier window, and no expired word to dominate: the zero word.
    fn fresh_word(policy: &FixedWindowPolicy, fresh: Nanos) -> u64 {
        match policy.grid.locate(fresh).0.checked_sub(1) {
            Some(before) => Word::new(before, policy.limit, policy.count_bits).0,
            None => 0,
        }
    }

    /// Whether `word`'s window is over at `now`: from `now` on it reads as a new window, exactly
    /// as the fresh word of `now` does.
    fn is_fresh(policy: &FixedWindowPolicy, word: u64, now: Nanos) -> bool {
        Word(word).index(policy.count_bits) < policy.grid.locate(now).0
    }

    /// Takes `n` (`1 <= n <= N`) at `now`.
    #[inline]
    fn decide(policy: &FixedWindowPolicy, word: u64, now: Nanos, n: u64) -> Step<Admitted, Denied> {
        let view = policy.view(word, now);
        // count <= N and n <= N < 2^63: no overflow.
        let after = view.count + n;
        if after <= policy.limit {
            let end = policy.until_window_end(view);
            Step::Write(
                Word::new(view.index, after, policy.count_bits).0,
                // All of the window's count comes back at its end, and nothing before it.
                Admitted::new(Headroom::whole(policy.limit - after, end, Next::nanos(end))),
            )
        } else {
            Step::Refuse(policy.denied(view))
        }
    }

    /// The answer to a request for nothing.
    fn query(policy: &FixedWindowPolicy, word: u64, now: Nanos) -> Admitted {
        let view = policy.view(word, now);
        let reset = if view.count == 0 {
            0
        } else {
            policy.until_window_end(view)
        };
        // An untouched window (reset 0) is full: nothing comes back.
        Admitted::new(Headroom::whole(
            policy.limit - view.count,
            reset,
            Next::nanos(reset),
        ))
    }

    /// Admissions left in the window of `now`, seen from `word`.
    fn remaining(policy: &FixedWindowPolicy, word: u64, now: Nanos) -> u64 {
        policy.limit - policy.view(word, now).count
    }

    fn debug_word(policy: &FixedWindowPolicy, word: u64, f: &mut std::fmt::DebugStruct<'_, '_>) {
        let word = Word(word);
        f.field("window", &word.index(policy.count_bits))
            .field("count", &word.count(policy.count_bits));
    }
}

/// A lock-free fixed window limiter: up to N admissions per window, with the design notes' boundary
/// burst (see the [module docs](self)).
///
/// The methods every direct limiter shares (`try_acquire*`, `peek_n*`, `remaining*`, `quota`,
/// `clock`) are [`Direct`]'s.
///
/// # Memory ordering
///
/// Admissions are linearizable: every admission takes effect at one instant in a single total
/// order, and no window ever counts more than N. An admission is not a synchronization point
/// between threads: do not rely on it to make other writes visible.
///
/// # Examples
///
/// ```
/// use tollgate::Quota;
/// use tollgate::window::FixedWindow;
///
/// // 100 requests per minute, windows on the wall clock's minutes.
/// let limiter = FixedWindow::new(Quota::per_minute(100)?)?
///     .aligned(tollgate::window::Alignment::WallClock);
/// match limiter.try_acquire() {
///     Ok(ok) => println!("{} left until the window ends in {:?}", ok.remaining(), ok.reset_after()),
///     Err(denied) => println!("429, Retry-After: {:?}", denied.retry_after()),
/// }
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type FixedWindow<C = MonotonicClock> = Direct<FixedWindowAlgorithm, C>;

impl<C: Clock> FixedWindow<C> {
    /// The same limiter with its window boundaries moved to `alignment` (by default windows start
    /// at the clock's epoch). Meant for a limiter just built: a count already taken stays with the
    /// window index it was taken in.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// use tollgate::window::{Alignment, FixedWindow};
    /// let limiter = FixedWindow::with_clock(Quota::per_second(1)?, ManualClock::new())?
    ///     .aligned(Alignment::Offset(Duration::from_millis(250)));
    /// assert!(limiter.try_acquire_at(Nanos::new(300_000_000)).is_ok());
    /// // This window ends at 1.25 s.
    /// let denied = limiter.try_acquire_at(Nanos::new(1_000_000_000)).unwrap_err();
    /// assert_eq!(denied.retry_after(), Duration::from_millis(250));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn aligned(self, alignment: Alignment) -> FixedWindow<C> {
        let now = self.clock.now();
        let mut window = self;
        let block = window.current.get_mut();
        block.policy = block.policy.aligned(alignment, now);
        window
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::cas;
    use crate::clock::ManualClock;

    fn policy(count: u64, period_ns: u64) -> FixedWindowPolicy {
        let quota = Quota::per_period(count, std::time::Duration::from_nanos(period_ns)).unwrap();
        FixedWindowPolicy::new(&quota).unwrap()
    }

    fn admit(policy: &FixedWindowPolicy, word: u64, now: u64, n: u64) -> Option<u64> {
        match FixedWindowAlgorithm::decide(policy, word, Nanos::new(now), n) {
            Step::Write(new, _) => Some(new),
            Step::Keep(_) | Step::Refuse(_) => None,
        }
    }

    #[test]
    fn a_window_takes_its_count_then_refuses() {
        let p = policy(3, 100);
        let mut w = 0;
        for _ in 0..3 {
            w = admit(&p, w, 10, 1).expect("fits");
        }
        assert_eq!(admit(&p, w, 99, 1), None);
        assert!(admit(&p, w, 100, 3).is_some(), "a new window");
    }

    #[test]
    fn an_older_reading_counts_in_the_newer_window() {
        let p = policy(2, 100);
        let w = admit(&p, 0, 250, 2).expect("fits");
        // Window 1's reading after window 2 was counted: still window 2, full.
        assert_eq!(admit(&p, w, 150, 1), None);
        let denied = FixedWindowAlgorithm::decide(&p, w, Nanos::new(150), 1).refused();
        // Window 2 ends at 300.
        assert_eq!(denied.retry_at(), Nanos::new(300));
    }

    /// The count field holds at least W, so the quota's limit of W per W ns always fits.
    #[test]
    fn the_documented_ranges() {
        let max = |ns: u64| Grid::new(ns).max_count(1);
        assert_eq!(max(1_000), 2_047);
        assert_eq!(max(1_000_000), 2_097_151);
        assert_eq!(max(1_000_000_000), 2_147_483_647);
        assert_eq!(max(60_000_000_000), 137_438_953_471);
        assert_eq!(max(3_600_000_000_000), 8_796_093_022_207);
        for bit in 0..=62 {
            for ns in [
                (1u64 << bit) - 1,
                1 << bit,
                (1 << bit) + 1,
                (1 << bit) / 3 * 2,
            ] {
                let ns = ns.clamp(1, 1 << 62);
                assert!(max(ns) >= ns, "{ns}");
            }
        }
    }

    #[test]
    fn the_word_packs_index_above_count() {
        let p = policy(1, 1);
        // 1 ns windows: one bit of count.
        assert_eq!(p.count_bits, 1);
        let w = admit(&p, 0, 5, 1).expect("fits");
        assert_eq!(Word(w).index(1), 5);
        assert_eq!(Word(w).count(1), 1);
        let last = admit(&p, w, u64::MAX, 1).expect("fits");
        assert_eq!(Word(last).index(1), 1 << 62);
    }

    /// Real threads on one limiter whose windows roll over during the run: no window ever counts
    /// more than N (every admission's window is read back from the clock reading it used), and
    /// compare-and-swap retries really happened (the work grows until they do). The windows roll
    /// over by count, not by speed: one thread moves a shared manual clock one window on every 100
    /// of its attempts, so every window sees at least 100 attempts for its 50 places however slow
    /// or loaded the machine is.
    #[test]
    fn stress_real_threads_never_overfill_a_window_and_do_contend() {
        use std::collections::HashMap;

        const LIMIT: u64 = 50;
        // 20 µs windows, rolled over by thread 0 (see above).
        let quota = Quota::per_period(LIMIT, std::time::Duration::from_micros(20)).unwrap();
        let threads = 4;
        cas::until_contended(|per_thread| {
            let clock = ManualClock::new();
            let limiter = FixedWindow::with_clock(quota, clock.clone()).unwrap();
            let results = cas::race(threads, |thread| {
                let mut windows = HashMap::<u64, u64>::new();
                for i in 0..per_thread {
                    if thread == 0 && i % 100 == 99 {
                        clock.advance(std::time::Duration::from_micros(20));
                    }
                    let now = limiter.clock().now();
                    if let Ok(ok) = limiter.try_acquire_at(now) {
                        // The window it was counted in ends `reset_after` from the reading (a
                        // reading older than the word's window counts there).
                        let end = now.saturating_add(ok.reset_after());
                        let (index, _) = limiter
                            .block()
                            .policy
                            .grid
                            .locate(Nanos::new(end.as_u64() - 1));
                        *windows.entry(index).or_default() += 1;
                    }
                }
                windows
            });
            let mut windows = HashMap::<u64, u64>::new();
            let mut retries = 0;
            for (w, r) in results {
                for (index, count) in w {
                    *windows.entry(index).or_default() += count;
                }
                retries += r;
            }
            for (index, count) in &windows {
                assert!(*count <= LIMIT, "window {index} admitted {count}");
            }
            assert!(windows.len() > 1, "the windows rolled over");
            assert!(
                windows.values().any(|&c| c == LIMIT),
                "some window filled up"
            );
            retries
        });
    }
}
