//! [`Quota`]: how many per period, how large a burst, how full at the start.
//!
//! A quota reads as "n per period": [`Quota::per_second(100)`](Quota::per_second) admits 100 every
//! second, never "one every 100". Construction validates everything a limiter needs, so building a
//! limiter from a `Quota` cannot fail.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::Quota;
//!
//! let api = Quota::per_minute(600)?.with_capacity(50)?; // 10/s on average, bursts of 50
//! assert_eq!(api.interval(), Duration::from_millis(100));
//! assert_eq!(Quota::per_second(0).unwrap_err().to_string(), "count must be at least 1, got 0");
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Rounding
//!
//! Limiters count time in whole nanoseconds. The time one token takes to refill, the *interval*,
//! is `period / n` rounded **up** to a whole nanosecond, so the long-run rate never exceeds the
//! configured one and falls short of it by less than `1 ns / interval`:
//!
//! | configured rate | interval | long-run shortfall |
//! | --- | --- | --- |
//! | up to 10^6 per second | 1 000 ns or more | under 0.1 % (zero when `period` divides evenly) |
//! | 10^7 per second | 100 ns | 0 (exact) |
//! | 3 × 10^7 per second | 33.3 ns → 34 ns | 2.0 % |
//! | 3 × 10^8 per second | 3.33 ns → 4 ns | 16.7 % (2.5 × 10^8 per second) |
//! | 10^9 per second | 1 ns | 0 (exact) |
//!
//! [`Quota::interval`] reports the rounded interval for any quota.
//!
//! # Ranges
//!
//! | field | accepted |
//! | --- | --- |
//! | count `n` | 1 ..= `period` in nanoseconds (at most one token per nanosecond, 10^9 per second) |
//! | period | more than zero, with `period / n` at most 2^62 ns (about 146 years per token) |
//! | capacity (burst) | 1 ..= [`Quota::max_capacity`]: 2^62 at 10^9 per second, over 10^15 at 1 per second and at 1 per day |
//! | initial fill | 0 ..= capacity (default: full) |
//!
//! # Very long burst windows
//!
//! A limiter keeps time in units of 1 ns as long as the burst window `capacity × interval` fits in
//! 2^62 ns (about 146 years): every ordinary quota does. For a larger window (a capacity of 2^32 at
//! 1 per day spans 11 million years) it counts in coarser units of 2^k ns, with the smallest k that
//! fits, and never coarser than 1/1024 of the interval. The interval is then rounded up to a whole
//! unit (a long-run shortfall under 0.1 %). Tokens are counted at a reading rounded down to a whole
//! unit, and a refill that restarts at a reading starts at the reading rounded up, so an admission
//! may wait up to one unit longer, and `C + R × t` still holds exactly in nanoseconds. Retry times
//! stay exact to the nanosecond. A direct limiter lays its units so that its construction reading
//! starts one: it holds its initial fill as of that reading exactly, and a clock that steps back
//! before it sees less (never more than at construction).

use std::fmt;
use std::time::Duration;

mod text;

pub use text::QuotaParseError;

/// The longest burst window (`capacity × interval`) a limiter represents: 2^62 ns, about 146 years.
pub(crate) const MAX_WINDOW_NANOS: u64 = 1 << 62;

/// The coarsest time unit allowed for an interval: `2^shift <= interval / 1024`, so that rounding the
/// interval up to a whole unit costs under 0.1 % of the rate.
pub(crate) fn max_shift(interval_nanos: u64) -> u32 {
    let ratio = interval_nanos / 1024;
    if ratio == 0 {
        0
    } else {
        ratio.ilog2()
    }
}

/// A validated rate limit: `count` tokens per `period`, a capacity (the largest burst) and an
/// initial fill.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// // 100 requests a second, bursts of up to 20, starting full.
/// let quota = Quota::per_second(100)?.with_capacity(20)?;
/// assert_eq!(quota.count(), 100);
/// assert_eq!(quota.capacity(), 20);
/// assert_eq!(quota.interval(), Duration::from_millis(10));
///
/// // 5 per 90 seconds, starting empty.
/// let slow = Quota::per_period(5, Duration::from_secs(90))?.with_initial(0)?;
/// assert_eq!(slow.initial(), 0);
///
/// // Bad input names the field and the accepted range.
/// let err = Quota::per_second(0).unwrap_err();
/// assert_eq!(err.field(), "count");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// # Text form
///
/// A quota parses from a short string ([`FromStr`](std::str::FromStr): `"100/s".parse()`) and
/// prints to one ([`Display`](fmt::Display)), so limits can live in configuration files, command
/// lines and environment variables:
///
/// ```text
/// quota  = count "/" period [ "," clause ]...
/// period = [ number ] unit                  "s", "90s", "2 min", "250ms"; no number is 1
/// clause = "burst" number | "initial" number   each at most once, in either order
/// count, number = decimal digits, "_" allowed after the first (1_000_000), at most u64::MAX
/// unit   = ns | us | µs | ms | s | m | min | h | d, or spelled out (see below)
/// ```
///
/// - **Units** are lower case: `ns`, `us` (also `µs` with the micro sign or the Greek mu), `ms`,
///   `s`, `min` (also `m`, as nginx writes `30r/m`), `h`, `d` (a day, 86 400 s), and the
///   spellings `nsec`, `usec`, `msec`, `sec`, `secs`, `hr`, `hrs`, `nanosecond(s)`,
///   `microsecond(s)`, `millisecond(s)`, `second(s)`, `minute(s)`, `mins`, `hour(s)`, `day(s)`.
///   `M` or `MS` are refused rather than guessed at (month? megasecond?). There are no weeks,
///   months or years: write `7d` or `30d`.
/// - **Whole numbers only**, in every part: `1.5s` is refused with a hint to use a smaller unit
///   (`1500ms`). The period may be any `Duration` down to `1ns` and up to `u64::MAX` seconds.
/// - **Whitespace** is allowed around every part and between a period's number and its unit
///   (`"100 / 2 min , burst 5"`); a clause's keyword and its number need some between them.
/// - **`burst`** sets the capacity ([`Quota::with_capacity`]; the default is the count),
///   **`initial`** the initial fill ([`Quota::with_initial`]; the default is full). The burst is
///   applied first, whatever the order in the text.
/// - **Printing** writes the count, `/`, the period in the largest of `d`, `h`, `min`, `s`, `ms`,
///   `us`, `ns` that divides it (the number left out when it is 1), then `, burst <capacity>` only
///   when the capacity differs from the count and `, initial <n>` only when an initial fill was
///   set. Parsing what is printed gives back an equal quota, for every quota: `Quota`'s equality
///   tells an initial fill set to the capacity from one left at its default, and so does the text.
///
/// A string that is not a quota is a [`QuotaParseError`] naming the part that is wrong
/// ([`QuotaParseError::part`]: `"count"`, `"period"`, `"period unit"`, `"burst"`, ...) and the
/// accepted form; a value in the form but out of range carries the [`QuotaError`] the
/// constructors return for it ([`QuotaParseError::quota_error`]).
///
/// ```
/// use std::time::Duration;
/// use tollgate::Quota;
///
/// assert_eq!("100/s".parse::<Quota>()?, Quota::per_second(100)?);
/// assert_eq!("20/min, burst 5".parse::<Quota>()?, Quota::per_minute(20)?.with_capacity(5)?);
/// assert_eq!("1_000 / hour".parse::<Quota>()?, Quota::per_hour(1_000)?);
/// let odd = Quota::per_period(1, Duration::from_micros(1_500))?.with_initial(0)?;
/// assert_eq!(odd.to_string(), "1/1500us, initial 0");
/// assert_eq!(odd.to_string().parse::<Quota>()?, odd);
///
/// let err = "10/fortnight".parse::<Quota>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "invalid quota \"10/fortnight\": unknown period unit \"fortnight\"; expected \
///      <count>/[<n>]<unit>[, burst <n>][, initial <n>] with units ns, us, ms, s, min, h, d"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// With the `serde` feature a quota serializes as this string and deserializes from one (and only
/// from one: a map of fields would be a second spelling of the same thing, and would need a
/// self-describing format to tell the two apart), so a configuration file holds `"20/min, burst
/// 5"`, and a bad string fails deserialization with the [`QuotaParseError`]'s message:
///
/// ```
/// # #[cfg(feature = "serde")]
/// # {
/// use std::collections::BTreeMap;
/// use tollgate::Quota;
///
/// let limits: BTreeMap<String, Quota> =
///     serde_json::from_str(r#"{"login": "5/min", "api": "100/s, burst 20"}"#).unwrap();
/// assert_eq!(limits["api"], Quota::per_second(100).unwrap().with_capacity(20).unwrap());
/// assert_eq!(serde_json::to_string(&limits["login"]).unwrap(), r#""5/min""#);
///
/// let err = serde_json::from_str::<Quota>(r#""5/min, burts 2""#).unwrap_err();
/// assert!(err.to_string().contains(r#"unknown clause "burts 2""#));
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    count: u64,
    period: Duration,
    interval_nanos: u64,
    capacity: u64,
    /// `None` until set: the bucket starts full whatever the capacity.
    initial: Option<u64>,
}

impl Quota {
    /// `count` per second.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroCount`] for `count == 0`; [`QuotaError::RateTooFast`] above 10^9 per second.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(100)?;
    /// assert_eq!(q.interval(), std::time::Duration::from_millis(10));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_second(count: u64) -> Result<Quota, QuotaError> {
        Quota::per_period(count, Duration::from_secs(1))
    }

    /// `count` per minute.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroCount`] for `count == 0`; [`QuotaError::RateTooFast`] above 10^9 per second.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_minute(60)?;
    /// assert_eq!(q.interval(), std::time::Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_minute(count: u64) -> Result<Quota, QuotaError> {
        Quota::per_period(count, Duration::from_secs(60))
    }

    /// `count` per hour.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroCount`] for `count == 0`; [`QuotaError::RateTooFast`] above 10^9 per second.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_hour(3600)?;
    /// assert_eq!(q.interval(), std::time::Duration::from_secs(1));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_hour(count: u64) -> Result<Quota, QuotaError> {
        Quota::per_period(count, Duration::from_secs(3600))
    }

    /// `count` per day.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroCount`] for `count == 0`; [`QuotaError::RateTooFast`] above 10^9 per second.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_day(1)?;
    /// assert_eq!(q.interval(), std::time::Duration::from_secs(86_400));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_day(count: u64) -> Result<Quota, QuotaError> {
        Quota::per_period(count, Duration::from_secs(86_400))
    }

    /// `count` per `period`, for any period. Capacity defaults to `count`, the initial fill to full.
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroCount`], [`QuotaError::ZeroPeriod`], [`QuotaError::RateTooFast`] (more than
    /// one per nanosecond), [`QuotaError::RateTooSlow`] (an interval over 2^62 ns), and
    /// [`QuotaError::CapacityTooLarge`] when the default capacity `count` exceeds
    /// [`Quota::max_capacity`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let q = tollgate::Quota::per_period(3, Duration::from_secs(1))?;
    /// // 1 s / 3 rounds up to a whole nanosecond: never faster than configured.
    /// assert_eq!(q.interval(), Duration::from_nanos(333_333_334));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn per_period(count: u64, period: Duration) -> Result<Quota, QuotaError> {
        if count == 0 {
            return Err(QuotaError::ZeroCount);
        }
        if period.is_zero() {
            return Err(QuotaError::ZeroPeriod);
        }
        let period_ns = period.as_nanos();
        if u128::from(count) > period_ns {
            return Err(QuotaError::RateTooFast { count, period });
        }
        let interval = period_ns.div_ceil(u128::from(count));
        let interval_nanos = match u64::try_from(interval) {
            Ok(i) if i <= MAX_WINDOW_NANOS => i,
            _ => return Err(QuotaError::RateTooSlow { count, period }),
        };
        Quota {
            count,
            period,
            interval_nanos,
            capacity: 1,
            initial: None,
        }
        .with_capacity(count)
    }

    /// The same quota with a capacity (the largest burst) of `capacity` tokens.
    ///
    /// An initial fill set earlier stays; one left at its default stays "full".
    ///
    /// # Errors
    ///
    /// [`QuotaError::ZeroCapacity`]; [`QuotaError::CapacityTooLarge`] above
    /// [`Quota::max_capacity`]; [`QuotaError::InitialAboveCapacity`] when an initial
    /// fill set earlier exceeds the new capacity.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(10)?.with_capacity(1)?; // no bursts: strict spacing
    /// assert_eq!(q.capacity(), 1);
    /// assert!(tollgate::Quota::per_second(10)?.with_capacity(0).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_capacity(self, capacity: u64) -> Result<Quota, QuotaError> {
        if capacity == 0 {
            return Err(QuotaError::ZeroCapacity);
        }
        let max = self.max_capacity();
        if capacity > max {
            return Err(QuotaError::CapacityTooLarge {
                capacity,
                max,
                interval: Duration::from_nanos(self.interval_nanos),
            });
        }
        if let Some(initial) = self.initial {
            if initial > capacity {
                return Err(QuotaError::InitialAboveCapacity { initial, capacity });
            }
        }
        Ok(Quota { capacity, ..self })
    }

    /// The same quota starting with `tokens` tokens instead of full.
    ///
    /// # Errors
    ///
    /// [`QuotaError::InitialAboveCapacity`] when `tokens > capacity`.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(10)?.with_initial(0)?; // starts empty
    /// assert_eq!(q.initial(), 0);
    /// assert!(tollgate::Quota::per_second(10)?.with_initial(11).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_initial(self, tokens: u64) -> Result<Quota, QuotaError> {
        if tokens > self.capacity {
            return Err(QuotaError::InitialAboveCapacity {
                initial: tokens,
                capacity: self.capacity,
            });
        }
        Ok(Quota {
            initial: Some(tokens),
            ..self
        })
    }

    /// Tokens per period (the `n` of "n per period").
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_minute(30)?.count(), 30);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The period, as given.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(tollgate::Quota::per_minute(30)?.period(), Duration::from_secs(60));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The largest burst, in tokens.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(5)?.capacity(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Tokens at the start (the capacity unless set with [`Quota::with_initial`]).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(5)?.initial(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn initial(&self) -> u64 {
        self.initial.unwrap_or(self.capacity)
    }

    /// The time one token takes to refill: `period / count`, rounded up to a whole nanosecond.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(tollgate::Quota::per_second(300_000_000)?.interval(), Duration::from_nanos(4));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.interval_nanos)
    }

    /// The largest capacity this quota's rate allows: `2^62 / interval` with the interval counted in
    /// the coarsest time unit allowed (see the [module docs](self#very-long-burst-windows)).
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Quota::per_second(1_000_000_000)?.max_capacity(), 1 << 62);
    /// assert!(tollgate::Quota::per_day(1)?.max_capacity() > 1 << 32);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_capacity(&self) -> u64 {
        let unit_interval = self
            .interval_nanos
            .div_ceil(1 << max_shift(self.interval_nanos));
        MAX_WINDOW_NANOS / unit_interval
    }

    /// Part `index` of `parts` equal parts of this quota: the count, capacity and initial fill each
    /// divided by `parts`, the remainders going to the lowest indices, so the parts sum to exactly
    /// this quota. Each part keeps the period, so the parts' rates sum to this quota's rate.
    ///
    /// # Errors
    ///
    /// Whatever validating a part returns (a part with a count or capacity of 0, or a rate too slow).
    pub(crate) fn part(&self, parts: u64, index: u64) -> Result<Quota, QuotaError> {
        let share = |total: u64| total / parts + u64::from(index < total % parts);
        Quota::per_period(share(self.count), self.period)?
            .with_capacity(share(self.capacity))?
            .with_initial(share(self.initial()))
    }

    /// The time unit (`2^shift` ns) and the interval in those units for this quota's capacity: the
    /// smallest shift whose burst window `capacity × interval` fits in 2^62 units.
    ///
    /// Validation guarantees a shift no larger than [`max_shift`] fits.
    pub(crate) fn time_unit(&self) -> (u32, u64) {
        let mut shift = 0;
        loop {
            let unit_interval = self.interval_nanos.div_ceil(1 << shift);
            if shift >= max_shift(self.interval_nanos)
                || u128::from(self.capacity) * u128::from(unit_interval)
                    <= u128::from(MAX_WINDOW_NANOS)
            {
                return (shift, unit_interval);
            }
            shift += 1;
        }
    }
}

/// Why a [`Quota`] was refused. Each variant names the field and the accepted range.
///
/// # Examples
///
/// ```
/// use tollgate::{Quota, QuotaError};
///
/// let err = Quota::per_second(5)?.with_initial(6).unwrap_err();
/// assert_eq!(err, QuotaError::InitialAboveCapacity { initial: 6, capacity: 5 });
/// assert_eq!(err.field(), "initial");
/// assert_eq!(err.to_string(), "initial fill must be between 0 and the capacity (5), got 6");
/// # Ok::<(), QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// `count` was 0; it must be at least 1.
    ZeroCount,
    /// `period` was zero; it must be longer.
    ZeroPeriod,
    /// More than one token per nanosecond (10^9 per second), which nanosecond time cannot represent.
    RateTooFast {
        /// The count asked for.
        count: u64,
        /// The period asked for.
        period: Duration,
    },
    /// One token takes longer than 2^62 ns (about 146 years) to refill.
    RateTooSlow {
        /// The count asked for.
        count: u64,
        /// The period asked for.
        period: Duration,
    },
    /// `capacity` was 0; it must be at least 1.
    ZeroCapacity,
    /// The capacity exceeds [`Quota::max_capacity`] for this rate.
    CapacityTooLarge {
        /// The capacity asked for (or the count, when the capacity was left at its default).
        capacity: u64,
        /// The largest capacity at this rate.
        max: u64,
        /// The quota's interval (period / count, rounded up).
        interval: Duration,
    },
    /// The initial fill exceeds the capacity.
    InitialAboveCapacity {
        /// The initial fill asked for.
        initial: u64,
        /// The capacity.
        capacity: u64,
    },
    /// A quota this algorithm cannot enforce: a limit the algorithm sets beyond the quota's own,
    /// described in the algorithm's words (a window's count that does not fit its word, a log
    /// or queue too long, too many tiers; see [`AlgorithmLimit`]).
    Algorithm(AlgorithmLimit),
}

/// How an algorithm words one of its limits: writes the sentence for `limit`, in the form
/// "`field` of a `algorithm` must be …, got `got`".
pub(crate) type Wording = fn(&AlgorithmLimit, &mut fmt::Formatter<'_>) -> fmt::Result;

/// A limit one algorithm sets on the quotas it accepts, beyond [`Quota`]'s own, and the value
/// that broke it ([`QuotaError::Algorithm`]).
///
/// The limit and its wording belong to the algorithm: each one builds its refusals in its own
/// module (the window limiters in `window/`, the leaky queue in `leaky/queue/`, the keyed
/// limiter's tiers in `keyed/`), and this type only carries them, so that the bottom of the
/// crate names no algorithm. What a program can act on is here as data: the
/// [`algorithm`](AlgorithmLimit::algorithm), the [`field`](AlgorithmLimit::field), the value
/// it [`got`](AlgorithmLimit::got), the [`bound`](AlgorithmLimit::bound) it broke and, for a
/// limit that depends on time, the [`span`](AlgorithmLimit::span); its
/// [`Display`](fmt::Display) is the algorithm's sentence.
///
/// Two limits are equal when all of that is; the wording follows from it.
///
/// # Examples
///
/// ```
/// use tollgate::window::{SlidingWindowLog, MAX_LOG};
/// use tollgate::{Quota, QuotaError};
///
/// let err = SlidingWindowLog::new(Quota::per_second(MAX_LOG + 1)?).unwrap_err();
/// let QuotaError::Algorithm(limit) = err else { unreachable!() };
/// assert_eq!((limit.algorithm(), limit.field()), ("sliding window log", "count"));
/// assert_eq!((limit.got(), limit.bound()), (MAX_LOG + 1, MAX_LOG));
/// assert_eq!(err.field(), "count");
/// assert!(err.to_string().starts_with("count of a sliding window log must be between 1 and"));
/// # Ok::<(), QuotaError>(())
/// ```
#[derive(Clone, Copy)]
pub struct AlgorithmLimit {
    algorithm: &'static str,
    field: &'static str,
    got: u64,
    bound: u64,
    span: Option<Duration>,
    wording: Wording,
}

impl AlgorithmLimit {
    /// `algorithm` refusing `got` for `field`, against `bound`, in `wording`.
    pub(crate) const fn new(
        algorithm: &'static str,
        field: &'static str,
        got: u64,
        bound: u64,
        wording: Wording,
    ) -> AlgorithmLimit {
        AlgorithmLimit {
            algorithm,
            field,
            got,
            bound,
            span: None,
            wording,
        }
    }

    /// The same limit, depending on the time `span`.
    pub(crate) const fn over(mut self, span: Duration) -> AlgorithmLimit {
        self.span = Some(span);
        self
    }

    /// The algorithm that refused, as its docs name it: `"fixed window"`,
    /// `"sliding window counter"`, `"sliding window log"`, `"leaky queue"` or
    /// `"keyed limiter"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{leaky, Quota, QuotaError};
    /// let too_long = Quota::per_second(1)?.with_capacity(leaky::MAX_QUEUE_CAPACITY + 1)?;
    /// let err = leaky::queue::<u8>(too_long).unwrap_err();
    /// assert!(matches!(err, QuotaError::Algorithm(l) if l.algorithm() == "leaky queue"));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn algorithm(&self) -> &'static str {
        self.algorithm
    }

    /// The field refused, as [`QuotaError::field`] names it: `"count"`, `"period"`,
    /// `"capacity"`, `"initial"`, `"sub_windows"` or `"tiers"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::window::FixedWindow;
    /// use tollgate::{Quota, QuotaError};
    /// let err = FixedWindow::new(Quota::per_second(10)?.with_capacity(20)?).unwrap_err();
    /// assert!(matches!(err, QuotaError::Algorithm(l) if l.field() == "capacity"));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn field(&self) -> &'static str {
        self.field
    }

    /// The value refused, in the field's unit (nanoseconds, saturated at `u64::MAX`, for a
    /// period).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::window::FixedWindow;
    /// use tollgate::{Quota, QuotaError};
    /// let err = FixedWindow::new(Quota::per_second(10)?.with_capacity(20)?).unwrap_err();
    /// assert!(matches!(err, QuotaError::Algorithm(l) if l.got() == 20));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn got(&self) -> u64 {
        self.got
    }

    /// The bound the value broke, in the same unit: the largest value accepted, or, for a
    /// window's capacity and initial fill, the one value accepted (the count per window).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::window::FixedWindow;
    /// use tollgate::{Quota, QuotaError};
    /// let err = FixedWindow::new(Quota::per_second(10)?.with_capacity(20)?).unwrap_err();
    /// assert!(matches!(err, QuotaError::Algorithm(l) if l.bound() == 10));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn bound(&self) -> u64 {
        self.bound
    }

    /// The time the bound depends on, where it does: the window (or sub-window) whose word must
    /// hold the count, the period to divide into sub-windows, the period refused as too long.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::window::SubWindowCounter;
    /// use tollgate::{Quota, QuotaError};
    /// let err = SubWindowCounter::new(Quota::per_second(10)?, 7).unwrap_err();
    /// assert!(matches!(err, QuotaError::Algorithm(l) if l.span() == Some(Duration::from_secs(1))));
    /// # Ok::<(), QuotaError>(())
    /// ```
    pub fn span(&self) -> Option<Duration> {
        self.span
    }
}

/// All but the wording, which follows from the rest.
impl PartialEq for AlgorithmLimit {
    fn eq(&self, other: &AlgorithmLimit) -> bool {
        (self.algorithm, self.field, self.got, self.bound, self.span)
            == (
                other.algorithm,
                other.field,
                other.got,
                other.bound,
                other.span,
            )
    }
}

impl Eq for AlgorithmLimit {}

impl fmt::Debug for AlgorithmLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlgorithmLimit")
            .field("algorithm", &self.algorithm)
            .field("field", &self.field)
            .field("got", &self.got)
            .field("bound", &self.bound)
            .field("span", &self.span)
            .finish()
    }
}

impl fmt::Display for AlgorithmLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.wording)(self, f)
    }
}

impl QuotaError {
    /// The name of the field that was refused: `"count"`, `"period"`, `"rate"`, `"capacity"`,
    /// `"initial"`, or, for an algorithm's own limits ([`AlgorithmLimit::field`]),
    /// `"sub_windows"` or `"tiers"`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let err = tollgate::Quota::per_period(1, Duration::ZERO).unwrap_err();
    /// assert_eq!(err.field(), "period");
    /// ```
    pub fn field(&self) -> &'static str {
        match self {
            QuotaError::ZeroCount => "count",
            QuotaError::ZeroPeriod => "period",
            QuotaError::RateTooFast { .. } | QuotaError::RateTooSlow { .. } => "rate",
            QuotaError::ZeroCapacity | QuotaError::CapacityTooLarge { .. } => "capacity",
            QuotaError::InitialAboveCapacity { .. } => "initial",
            QuotaError::Algorithm(limit) => limit.field(),
        }
    }
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::ZeroCount => f.write_str("count must be at least 1, got 0"),
            QuotaError::ZeroPeriod => f.write_str("period must be longer than zero, got 0s"),
            QuotaError::RateTooFast { count, period } => write!(
                f,
                "rate must be at most 1 per nanosecond (10^9 per second), got {count} per {period:?}"
            ),
            QuotaError::RateTooSlow { count, period } => write!(
                f,
                "rate must be at least 1 per 2^62 ns (about 146 years), got {count} per {period:?}"
            ),
            QuotaError::ZeroCapacity => f.write_str("capacity must be at least 1, got 0"),
            QuotaError::CapacityTooLarge {
                capacity,
                max,
                interval,
            } => write!(
                f,
                "capacity must be between 1 and {max} at an interval of {interval:?}, got {capacity}"
            ),
            QuotaError::InitialAboveCapacity { initial, capacity } => write!(
                f,
                "initial fill must be between 0 and the capacity ({capacity}), got {initial}"
            ),
            QuotaError::Algorithm(limit) => limit.fmt(f),
        }
    }
}

impl std::error::Error for QuotaError {}
