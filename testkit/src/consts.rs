//! The constants every model and driver shares, defined once.

use tollgate::Nanos;

/// The latest reading any limiter distinguishes, in nanoseconds (2^62, about 146 years): later
/// readings count as this one. The crate's [`Nanos::MAX_USABLE`].
///
/// ```
/// assert_eq!(testkit::consts::MAX_USABLE_NS, 1 << 62);
/// ```
pub const MAX_USABLE_NS: u64 = Nanos::MAX_USABLE.as_u64();

/// Nanoseconds in a second.
///
/// ```
/// assert_eq!(testkit::consts::NANOS_PER_SEC, 1_000_000_000);
/// ```
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Nanoseconds in a year of 365.25 days.
///
/// ```
/// assert_eq!(testkit::consts::YEAR_NS / testkit::consts::NANOS_PER_SEC, 31_557_600);
/// ```
pub const YEAR_NS: u64 = 31_557_600 * NANOS_PER_SEC;

/// The longest `next_after` a limiter reports in nanoseconds: `3 × 2^62 − 3` ns (about 438
/// years); longer waits (only a sharded bucket's coarse-unit shards have them) are reported as it.
///
/// ```
/// assert_eq!(testkit::consts::NEXT_MAX_NS, (3 << 62) - 3);
/// ```
pub const NEXT_MAX_NS: u128 = (3 << 62) - 3;

/// The longest `max_wait` a reservation accepts, in nanoseconds (2^61, about 73 years), as the
/// crate documents it (`tollgate::reservation::MAX_WAIT`).
///
/// ```
/// assert_eq!(testkit::consts::MAX_WAIT_NS, 1 << 61);
/// ```
pub const MAX_WAIT_NS: u64 = 1 << 61;
