//! Window limiters: fixed window, sliding window counter (over one window or `k` sub-windows),
//! sliding window log.
//!
//! Each takes a [`Quota`] as "`count` per window of `period`" (the quota's capacity must be its
//! count and its initial fill full: a window has no separate burst size, and starts empty), and
//! answers with the same outcomes as [`TokenBucket`](crate::TokenBucket): [`Admitted`](crate::Admitted)
//! with `remaining` and `reset_after`, [`Denied`](crate::Denied) with an exact `retry_after`.
//!
//! Window boundaries fall at the clock's epoch and every whole window after it, unless an
//! [`Alignment`] says otherwise.
//!
//! # Which one
//!
//! | limiter | accuracy against "at most N in any span of length W" | state per key | a check |
//! | --- | --- | --- | --- |
//! | [`FixedWindow`] | N per aligned window; up to 2N across a boundary (the design notes' flaw) | one `AtomicU64` | one CAS; denials read only |
//! | [`SlidingWindowCounter`] | weighted estimate of two windows; off by at most the previous window's count (nearly 2N in the worst case) | one `AtomicU64` | one CAS; denials read only |
//! | [`SubWindowCounter`] | the same estimate over `k <=` [`MAX_SUB_WINDOWS`] sub-windows; off by at most the oldest sub-window's count (about N/k for steady traffic) | `k + 2` words | one CAS; a rollover or a denial reads up to `k` words |
//! | [`SlidingWindowLog`] | exact: never more than N in any window `(t − W, t]` | `8 × N` bytes (N <= [`MAX_LOG`]) | two CASes and a binary search over the ring |
//! | [`TokenBucket`](crate::TokenBucket) | exact `C + R × t` over any span; no windows at all | one `AtomicU64` | one CAS; denials read only |
//!
//! The fixed window is the cheapest and the easiest to explain in a `429` ("60 per minute, resets
//! at the top of the minute": align it with [`Alignment::WallClock`]); it admits up to twice its
//! limit around a boundary. The sliding counters smooth that out at the cost of an approximation
//! (the counters' docs bound it, and the tour measures it on a bursty trace). The log is exact at
//! 8 bytes per admission in a window, for small N. Where no window semantics are required, the
//! token bucket is exact, one word, and allows a configured burst. Measured costs are in the README
//! and `benches/README.md`.
//!
//! # Limits
//!
//! The window limiters' size limits are module-level constants, re-exported here:
//! [`MAX_LOG`] (the longest [`SlidingWindowLog`]) and [`MAX_SUB_WINDOWS`] (the most sub-windows of a
//! [`SubWindowCounter`]). A quota beyond either is refused with a [`QuotaError`] naming the field
//! and the limit.

mod estimate;
pub mod fixed;
pub mod sliding_counter;
pub mod sliding_log;
pub mod sub_window;

pub use fixed::FixedWindow;
pub use sliding_counter::SlidingWindowCounter;
pub use sliding_log::{SlidingWindowLog, MAX_LOG};
pub use sub_window::{SubWindowCounter, MAX_SUB_WINDOWS};

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::algorithm::Algorithm;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::direct::Direct;
use crate::quota::{AlgorithmLimit, Quota, QuotaError, MAX_WINDOW_NANOS};

/// The window algorithms: [`FixedWindowAlgorithm`](crate::FixedWindowAlgorithm),
/// [`SlidingWindowCounterAlgorithm`](crate::SlidingWindowCounterAlgorithm) and
/// [`SlidingWindowLogAlgorithm`](crate::SlidingWindowLogAlgorithm), whose limiters share their
/// constructors. Sealed, as [`Algorithm`] is.
///
/// # Examples
///
/// ```
/// use tollgate::window::{FixedWindow, SlidingWindowLog, WindowAlgorithm};
/// use tollgate::{Direct, ManualClock, Quota};
/// // Generic code builds with `with_algorithm`: the aliases' `with_clock` is one name for several
/// // constructors, which a generic `A` cannot choose between.
/// fn per_minute<A: WindowAlgorithm>(n: u64) -> Result<Direct<A, ManualClock>, tollgate::QuotaError> {
///     Direct::with_algorithm(Quota::per_minute(n)?, ManualClock::new())
/// }
/// let fixed: FixedWindow<_> = per_minute(10)?;
/// let log: SlidingWindowLog<_> = per_minute(10)?;
/// assert_eq!(fixed.remaining(), log.remaining());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait WindowAlgorithm: Algorithm {}

impl WindowAlgorithm for crate::FixedWindowAlgorithm {}
impl WindowAlgorithm for crate::SlidingWindowCounterAlgorithm {}
impl WindowAlgorithm for crate::SlidingWindowLogAlgorithm {}

/// The window limiters' constructors: every window limiter is built the same way, and fails the
/// same way on a quota a window cannot enforce.
impl<A: WindowAlgorithm> Direct<A, MonotonicClock> {
    /// A window limiter for `quota` (`count` per window of `period`) on the default clock, windows
    /// aligned to the clock's epoch, starting empty.
    ///
    /// # Errors
    ///
    /// [`QuotaError::Algorithm`], in this window limiter's words
    /// ([`AlgorithmLimit`](crate::AlgorithmLimit)), for a quota with a capacity or initial fill
    /// other than its count (field `"capacity"` or `"initial"`), a period over 2^62 ns
    /// (`"period"`), a count that does not fit the window's word (`"count"`: the counters'
    /// tables give the largest count for each window length), or a log longer than [`MAX_LOG`]
    /// (`"count"`).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::window::{FixedWindow, SlidingWindowCounter, SlidingWindowLog};
    /// use tollgate::{Quota, QuotaError};
    /// assert_eq!(FixedWindow::new(Quota::per_second(10)?)?.remaining(), 10);
    /// assert_eq!(SlidingWindowCounter::new(Quota::per_minute(600)?)?.remaining(), 600);
    /// assert_eq!(SlidingWindowLog::new(Quota::per_second(5)?)?.remaining(), 5);
    /// // A window has no burst size of its own.
    /// let err = FixedWindow::new(Quota::per_second(10)?.with_capacity(20)?).unwrap_err();
    /// assert_eq!(err.field(), "capacity");
    /// let too_many = SlidingWindowCounter::new(Quota::per_second(1 << 20)?).unwrap_err();
    /// assert_eq!(too_many.field(), "count");
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Result<Direct<A, MonotonicClock>, QuotaError> {
        Direct::with_algorithm(quota, MonotonicClock::new())
    }
}

impl<A: WindowAlgorithm, C: Clock> Direct<A, C> {
    /// A window limiter for `quota` reading time from `clock`, starting empty.
    ///
    /// # Errors
    ///
    /// As [`Direct::new`](Direct#method.new).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::window::{FixedWindow, SlidingWindowLog};
    /// use tollgate::{ManualClock, Quota};
    /// let limiter = FixedWindow::with_clock(Quota::per_period(5, Duration::from_millis(100))?, ManualClock::new())?;
    /// assert_eq!(limiter.try_acquire_n(5)?.remaining(), 0);
    /// let err = SlidingWindowLog::with_clock(Quota::per_second(2)?.with_capacity(3)?, ManualClock::new());
    /// assert_eq!(err.unwrap_err().field(), "capacity");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Result<Direct<A, C>, QuotaError> {
        Direct::with_algorithm(quota, clock)
    }
}

/// Where window boundaries fall on the limiter's clock.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::window::Alignment;
/// // Windows of a minute that start at 15 s past each minute of the limiter's clock.
/// let alignment = Alignment::Offset(Duration::from_secs(15));
/// assert_ne!(alignment, Alignment::default());
/// assert_eq!(Alignment::default(), Alignment::Epoch);
/// ```
///
/// Non-exhaustive: other alignments may be added, so a `match` outside this crate needs a
/// wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Alignment {
    /// Windows start at the clock's epoch (reading 0) and at every whole window after it. The
    /// default: [`MonotonicClock`]'s epoch is when the process first read it.
    #[default]
    Epoch,
    /// Windows start at whole multiples of the window length in UNIX time, so a one-minute window
    /// starts at every full minute of the wall clock (what users see in an `X-RateLimit-Reset`
    /// header). The offset between the limiter's clock and the wall clock is read once, when the
    /// limiter is aligned: a later step of the wall clock (NTP, a manual change) does not move the
    /// boundaries, which follow the limiter's monotonic clock from then on.
    WallClock,
    /// Windows start at this reading of the limiter's clock and every whole window before and after
    /// it (the offset is taken modulo the window length).
    Offset(Duration),
}

/// Window boundaries on a clock's nanoseconds: window `i` covers the readings
/// `[i × length − shift, (i + 1) × length − shift)`, with `0 <= shift < length`.
///
/// Readings are clamped at [`Nanos::MAX_USABLE`] (2^62 ns), and `length <= 2^62`, so
/// `reading + shift < 2^63` and nothing overflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grid {
    length: u64,
    shift: u64,
    /// A reading at which a window starts (what `aligned` was asked for, resolved to a reading):
    /// kept so that windows of another length, after a quota change, start there too.
    origin: i128,
}

impl Grid {
    /// Windows of `length` nanoseconds (`1..=2^62`) aligned to the epoch.
    pub(crate) fn new(length: u64) -> Grid {
        Grid {
            length: length.clamp(1, MAX_WINDOW_NANOS),
            shift: 0,
            origin: 0,
        }
    }

    /// These windows' length with `other`'s alignment: windows start at the reading `other`'s
    /// were aligned to (for a quota change, which keeps the limiter's alignment).
    pub(crate) fn realigned(self, other: Grid) -> Grid {
        self.starting_at(other.origin)
    }

    /// Windows of this length, one of which starts at the reading `start`.
    fn starting_at(self, start: i128) -> Grid {
        let length = i128::from(self.length);
        // index = (reading + shift) / length steps up at every reading ≡ start (mod length).
        let shift = (-start).rem_euclid(length);
        Grid {
            length: self.length,
            // 0 <= shift < length <= 2^62.
            shift: u64::try_from(shift).unwrap_or(0),
            origin: start,
        }
    }

    /// The same windows moved to `alignment`; `now` is the limiter's clock reading, needed to
    /// relate it to the wall clock.
    pub(crate) fn aligned(self, alignment: Alignment, now: Nanos) -> Grid {
        // The reading at which a window must start.
        let start: i128 = match alignment {
            Alignment::Epoch => 0,
            Alignment::Offset(offset) => i128::try_from(offset.as_nanos()).unwrap_or(i128::MAX),
            Alignment::WallClock => {
                // A wall clock before 1970 is taken as 1970: the windows still have the right
                // length, only their phase is arbitrary.
                let unix = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX));
                // UNIX time 0 (mod length) falls at this reading.
                i128::from(now.as_u64()) - unix
            }
        };
        self.starting_at(start)
    }

    /// The index of the window holding `now`, and the nanoseconds of that window already elapsed
    /// at `now` (`0..length`).
    #[inline]
    pub(crate) fn locate(self, now: Nanos) -> (u64, u64) {
        let t = now.clamped() + self.shift;
        (t / self.length, t % self.length)
    }

    /// The reading at which window `index` starts, saturating at 0 (the first window may start
    /// before the clock's epoch) and at `u64::MAX`.
    pub(crate) fn start(self, index: u64) -> u64 {
        let start = u128::from(index) * u128::from(self.length);
        u64::try_from(start.saturating_sub(u128::from(self.shift))).unwrap_or(u64::MAX)
    }

    /// The largest count that fits `fields` times beside a window index of these windows in one
    /// 64-bit word, whatever the alignment.
    pub(crate) fn max_count(self, fields: u32) -> u64 {
        index_and_count_budget(self.length, fields)
    }
}

/// The largest count that fits `fields` times beside the index of windows of `length` ns in one
/// 64-bit word. The index must reach `(2^62 + shift) / length` for every shift `< length`.
fn index_and_count_budget(length: u64, fields: u32) -> u64 {
    let length = length.clamp(1, MAX_WINDOW_NANOS);
    let max_index = MAX_WINDOW_NANOS.div_ceil(length);
    let index_bits = u64::BITS - max_index.leading_zeros();
    let bits = (u64::BITS - index_bits) / fields.max(1);
    // index_bits >= 1, so bits <= 63.
    (1u64 << bits) - 1
}

/// The count per window and the window length in nanoseconds of a quota the window limiter
/// `algorithm` (its name in [`AlgorithmLimit::algorithm`]) can use.
///
/// # Errors
///
/// [`QuotaError::Algorithm`] naming the capacity when it is not the count, the initial fill when
/// it is not full, and the period when it is over 2^62 ns.
pub(crate) fn window_of(quota: &Quota, algorithm: &'static str) -> Result<(u64, u64), QuotaError> {
    let count = quota.count();
    if quota.capacity() != count {
        return Err(QuotaError::Algorithm(AlgorithmLimit::new(
            algorithm,
            "capacity",
            quota.capacity(),
            count,
            |l, f| {
                write!(
                    f,
                    "capacity of a {} must equal its count per window ({}): a window has no burst size of its own, got {}",
                    l.algorithm(),
                    l.bound(),
                    l.got()
                )
            },
        )));
    }
    if quota.initial() != count {
        return Err(QuotaError::Algorithm(AlgorithmLimit::new(
            algorithm,
            "initial",
            quota.initial(),
            count,
            |l, f| {
                write!(
                    f,
                    "initial fill of a {} must be its count per window ({}): windows start empty, got {}",
                    l.algorithm(),
                    l.bound(),
                    l.got()
                )
            },
        )));
    }
    match u64::try_from(quota.period().as_nanos()) {
        Ok(period) if period <= MAX_WINDOW_NANOS => Ok((count, period)),
        too_long => Err(QuotaError::Algorithm(
            AlgorithmLimit::new(
                algorithm,
                "period",
                too_long.unwrap_or(u64::MAX),
                MAX_WINDOW_NANOS,
                |l, f| {
                    write!(
                        f,
                        "period of a {} must be at most 2^62 ns (about 146 years), got {:?}",
                        l.algorithm(),
                        l.span().unwrap_or_default()
                    )
                },
            )
            .over(quota.period()),
        )),
    }
}

/// Checks that `count` fits `fields` times beside the index of windows of `length` ns, in the
/// window limiter `algorithm`.
///
/// # Errors
///
/// [`QuotaError::Algorithm`] naming the count and the largest count that fits.
pub(crate) fn check_count(
    count: u64,
    length: u64,
    fields: u32,
    algorithm: &'static str,
) -> Result<(), QuotaError> {
    let max = index_and_count_budget(length, fields);
    if count > max {
        let limit = AlgorithmLimit::new(algorithm, "count", count, max, |l, f| {
            write!(
                f,
                "count of a {} must be between 1 and {} for a window of {:?}: the count shares a 64-bit word with the window's index, got {}",
                l.algorithm(),
                l.bound(),
                l.span().unwrap_or_default(),
                l.got()
            )
        });
        return Err(QuotaError::Algorithm(
            limit.over(Duration::from_nanos(length)),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_windows_start_at_multiples_of_the_length() {
        let grid = Grid::new(10);
        assert_eq!(grid.locate(Nanos::new(0)), (0, 0));
        assert_eq!(grid.locate(Nanos::new(9)), (0, 9));
        assert_eq!(grid.locate(Nanos::new(10)), (1, 0));
        assert_eq!(grid.start(3), 30);
    }

    #[test]
    fn an_offset_moves_every_boundary() {
        let grid = Grid::new(10).aligned(Alignment::Offset(Duration::from_nanos(23)), Nanos::ZERO);
        // Boundaries at 3, 13, 23, ...
        assert_eq!(grid.locate(Nanos::new(2)).1, 9);
        assert_eq!(grid.locate(Nanos::new(3)).1, 0);
        let (index, _) = grid.locate(Nanos::new(13));
        assert_eq!(grid.start(index), 13);
        // The window holding reading 0 starts before the epoch.
        let (first, elapsed) = grid.locate(Nanos::new(0));
        assert_eq!((grid.start(first), elapsed), (0, 7));
    }

    #[test]
    fn wall_clock_windows_start_at_whole_unix_multiples() {
        let second = 1_000_000_000;
        let now = Nanos::new(123_456_789);
        let grid = Grid::new(second).aligned(Alignment::WallClock, now);
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        // The elapsed part of the window is the wall clock's sub-second part, give or take the
        // time between the two readings.
        let (_, elapsed) = grid.locate(now);
        let wall = u64::from(unix.subsec_nanos());
        let gap = (wall + second - elapsed) % second;
        assert!(
            gap < second / 10 || gap > second - second / 10,
            "{elapsed} vs {wall}"
        );
    }

    #[test]
    fn the_last_reading_has_an_index_that_fits() {
        for length in [1, 2, 3, 1000, 1 << 40, MAX_WINDOW_NANOS] {
            let grid = Grid::new(length).aligned(
                Alignment::Offset(Duration::from_nanos(length / 2 + 1)),
                Nanos::ZERO,
            );
            let (index, _) = grid.locate(Nanos::new(u64::MAX));
            let index_bits = u64::BITS - index.leading_zeros();
            let count_bits = u64::BITS - grid.max_count(1).leading_zeros();
            assert!(index_bits + count_bits <= 64, "length {length}");
        }
    }

    #[test]
    fn budgets_by_window_length() {
        // 1 ns windows need 63 index bits: one bit of count.
        assert_eq!(Grid::new(1).max_count(1), 1);
        assert_eq!(Grid::new(1).max_count(2), 0);
        // 1 s windows: 2^62 / 10^9 < 2^33, so 31 bits per field for one, 15 for two.
        assert_eq!(Grid::new(1_000_000_000).max_count(1), (1 << 31) - 1);
        assert_eq!(Grid::new(1_000_000_000).max_count(2), (1 << 15) - 1);
    }
}
