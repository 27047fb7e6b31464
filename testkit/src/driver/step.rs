//! The one clock-step type every driver moves its reading with.
//!
//! The drivers' steps used to differ only in names and in the length their relative steps were
//! measured in: the bucket's (and the meter's, the sharded bucket's) "intervals", the sliding
//! counter's "sub-windows" and the log's "windows". That length is the same thing for each, the
//! span over which the limiter's state changes by one step, so it is one variant here,
//! [`Step::Units`], measured in the unit the driver passes ([`Step::next`], [`Step::apply`]):
//!
//! | driver | unit |
//! | --- | --- |
//! | `bucket`, `meter`, `sharded`, `keyed`, `keyed_pair` | the quota's interval |
//! | `queue` | the queue's interval (the release spacing) |
//! | `counter` | the sub-window (the window for the one-word counter) |
//! | `log`, `reference::fixed` | the window |
//!
//! The counter's jumps by whole windows (any `u32` of them) became jumps by any number of whole
//! units: an idle period of any length that keeps the phase of the sub-windows, which is what its
//! state is kept in. What is really one driver's own stays in its `Op`: the log's jump to the
//! latest denial's `retry_at`.

use std::time::Duration;

use tollgate::{ManualClock, Nanos};

use crate::consts::YEAR_NS;

/// A change of the clock: forwards or backwards, by nanoseconds or by units of the driver's length
/// (see the module docs), by years, or a jump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Forward by this many nanoseconds (saturating).
    Nanos(u64),
    /// Forward by `num / den` units (den of 0 counts as 1), saturating: up to billions of them.
    Units {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u8,
    },
    /// Forward by this many years (saturating).
    Years(u8),
    /// To `u64::MAX`.
    ToMax,
    /// Back by this many nanoseconds (to at least 0).
    BackNanos(u64),
    /// Back by `num / den` units.
    BackUnits {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u8,
    },
    /// To exactly this reading, forwards or backwards.
    Set(u64),
}

/// How a step moves a clock: forwards by a span (a clock's `advance`), or to a reading (`set`).
enum Move {
    Forward(u64),
    To(u64),
}

impl Step {
    fn movement(self, now: u64, unit_ns: u64) -> Move {
        match self {
            Step::Nanos(ns) => Move::Forward(ns),
            Step::Units { num, den } => Move::Forward(units(num, den, unit_ns)),
            Step::Years(y) => Move::Forward(u64::from(y).saturating_mul(YEAR_NS)),
            Step::ToMax => Move::Forward(u64::MAX),
            Step::BackNanos(ns) => Move::To(now.saturating_sub(ns)),
            Step::BackUnits { num, den } => Move::To(now.saturating_sub(units(num, den, unit_ns))),
            Step::Set(t) => Move::To(t),
        }
    }

    /// The reading after the step from `now`, for a driver whose unit is `unit_ns`; for drivers
    /// that keep the reading apart from any clock.
    ///
    /// ```
    /// use testkit::driver::step::Step;
    /// assert_eq!(Step::Units { num: 3, den: 2 }.next(5, 10), 20);
    /// assert_eq!(Step::BackNanos(20).next(15, 10), 0);
    /// assert_eq!(Step::Years(1).next(u64::MAX - 1, 10), u64::MAX);
    /// ```
    pub fn next(self, now: u64, unit_ns: u64) -> u64 {
        match self.movement(now, unit_ns) {
            Move::Forward(ns) => now.saturating_add(ns),
            Move::To(t) => t,
        }
    }

    /// Applies the step to `clock`, whose reading is `now`, for a driver whose unit is `unit_ns`:
    /// forward steps through `advance`, the others through `set`. Returns the new reading, which
    /// [`Step::next`] also gives.
    ///
    /// ```
    /// use testkit::driver::step::Step;
    /// use tollgate::{Clock, ManualClock, Nanos};
    /// let clock = ManualClock::new();
    /// assert_eq!(Step::Units { num: 3, den: 2 }.apply(&clock, 0, 10), 15);
    /// assert_eq!(Step::BackNanos(20).apply(&clock, 15, 10), 0);
    /// assert_eq!(clock.now(), Nanos::new(0));
    /// ```
    pub fn apply(self, clock: &ManualClock, now: u64, unit_ns: u64) -> u64 {
        match self.movement(now, unit_ns) {
            Move::Forward(ns) => {
                clock.advance(Duration::from_nanos(ns));
                now.saturating_add(ns)
            }
            Move::To(t) => {
                clock.set(Nanos::new(t));
                t
            }
        }
    }
}

/// `num / den` units of `unit_ns`, in nanoseconds, saturating.
fn units(num: u32, den: u8, unit_ns: u64) -> u64 {
    let ns = u128::from(num) * u128::from(unit_ns) / u128::from(den.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}
