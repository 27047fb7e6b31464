//! The scripts (`src/redis/*.lua`, embedded) and, per algorithm, what a call sends: the mode, the
//! quota's arguments in the units the script counts in, and the unit its spans come back in.

use std::sync::LazyLock;

use ::redis::Script;

use super::error::BuildError;
use crate::algorithm::sealed::Contract;
use crate::clock::duration_to_nanos;
use crate::keyed::{
    FixedWindowKeys, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys,
    TokenBucketKeys,
};
use crate::quota::Quota;
use crate::Algorithm;

/// The largest span, in ticks, a script counts (2^52): burst windows and windows are kept at or
/// below it, so that a span plus a cost stays below 2^53, where Lua's doubles stop being exact.
pub(crate) const MAX_SPAN: u64 = 1 << 52;

const PRELUDE: &str = include_str!("prelude.lua");
#[cfg(test)]
const GCRA: &str = include_str!("gcra.lua");

/// The source of each script: the prelude, then the algorithm's own file(s).
macro_rules! source {
    ($($file:literal),+) => {
        LazyLock::new(|| [PRELUDE, $(include_str!($file)),+].join("\n"))
    };
}

static TOKEN_BUCKET_SOURCE: LazyLock<String> =
    source!("token_bucket.lua", "gcra.lua", "gcra_one.lua");
static LEAKY_METER_SOURCE: LazyLock<String> =
    source!("leaky_meter.lua", "gcra.lua", "gcra_one.lua");
/// Several token buckets on one key, all or none ([`RedisAllOf`](super::RedisAllOf)).
static TOKEN_BUCKET_ALL_SOURCE: LazyLock<String> =
    source!("token_bucket.lua", "gcra.lua", "gcra_all.lua");
static FIXED_WINDOW_SOURCE: LazyLock<String> = source!("fixed_window.lua");
static SLIDING_COUNTER_SOURCE: LazyLock<String> = source!("sliding_counter.lua");
static SLIDING_LOG_SOURCE: LazyLock<String> = source!("sliding_log.lua");

static TOKEN_BUCKET: LazyLock<Script> = LazyLock::new(|| Script::new(&TOKEN_BUCKET_SOURCE));
static LEAKY_METER: LazyLock<Script> = LazyLock::new(|| Script::new(&LEAKY_METER_SOURCE));
static FIXED_WINDOW: LazyLock<Script> = LazyLock::new(|| Script::new(&FIXED_WINDOW_SOURCE));
static SLIDING_COUNTER: LazyLock<Script> = LazyLock::new(|| Script::new(&SLIDING_COUNTER_SOURCE));
static SLIDING_LOG: LazyLock<Script> = LazyLock::new(|| Script::new(&SLIDING_LOG_SOURCE));
static TOKEN_BUCKET_ALL: LazyLock<Script> = LazyLock::new(|| Script::new(&TOKEN_BUCKET_ALL_SOURCE));

/// The script of several token buckets on one key, all or none.
pub(crate) fn token_bucket_all() -> &'static Script {
    &TOKEN_BUCKET_ALL
}

/// The algorithms the Redis backend runs, by their keyed markers ([`TokenBucketKeys`],
/// [`LeakyMeterKeys`], [`FixedWindowKeys`], [`SlidingWindowCounterKeys`],
/// [`SlidingWindowLogKeys`]). Sealed: implemented by the crate only, one script each.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::FixedWindowKeys;
/// use tollgate::redis::RedisAlgorithm;
/// fn script_name<A: RedisAlgorithm>() -> &'static str {
///     A::SUFFIX
/// }
/// assert_eq!(script_name::<FixedWindowKeys>(), "fw");
/// ```
pub trait RedisAlgorithm: Algorithm + sealed::ScriptSpec {
    /// The suffix of this algorithm's Redis keys (`prefix:{key}:SUFFIX`), and its script's name.
    const SUFFIX: &'static str;
}

pub(crate) mod sealed {
    use super::{BuildError, Quota, Script};

    /// What the client needs to run one algorithm's script.
    pub trait ScriptSpec {
        /// The script.
        fn script() -> &'static Script;
        /// The script's full source (the prelude and the algorithm's files).
        fn source() -> &'static str;
        /// The mode of an admission and of a peek.
        const TAKE: &'static str;
        /// The mode of a peek.
        const PEEK: &'static str;
        /// The quota as the script's arguments, and the nanoseconds per tick of its spans.
        fn plan(quota: &Quota) -> Result<Plan, BuildError>;
    }

    /// The quota's arguments (ARGV[3..], before the reading), and the unit of the reply's spans.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Plan {
        pub(crate) args: Vec<u64>,
        /// Nanoseconds per tick of the reply's spans.
        pub(crate) tick: u64,
    }
}

use sealed::Plan;

/// The token bucket's plan (for the several limits of a [`RedisAllOf`](super::RedisAllOf)).
pub(crate) fn token_bucket_plan(quota: &Quota) -> Result<Plan, BuildError> {
    gcra_plan(quota)
}

/// The GCRA's arguments: `interval, capacity, tick`, in nanoseconds when the burst window fits
/// [`MAX_SPAN`] ns (52 days), otherwise in microseconds (the interval rounded up, never faster
/// than the quota), when it fits [`MAX_SPAN`] us (142 years).
fn gcra_plan(quota: &Quota) -> Result<Plan, BuildError> {
    let interval = duration_to_nanos(quota.interval());
    let capacity = quota.capacity();
    let fits = |i: u64| capacity.checked_mul(i).is_some_and(|b| b <= MAX_SPAN);
    if fits(interval) {
        return Ok(Plan {
            args: vec![interval, capacity, 1],
            tick: 1,
        });
    }
    let micros = interval.div_ceil(1000);
    if fits(micros) {
        return Ok(Plan {
            args: vec![micros, capacity, 1000],
            tick: 1000,
        });
    }
    Err(BuildError::new(
        "capacity",
        format!(
            "a burst window (capacity {capacity} x interval {interval} ns) of at most 2^52 us \
             (about 142 years); the Redis scripts count in integers below 2^53"
        ),
    ))
}

impl sealed::ScriptSpec for TokenBucketKeys {
    fn script() -> &'static Script {
        &TOKEN_BUCKET
    }
    fn source() -> &'static str {
        &TOKEN_BUCKET_SOURCE
    }
    const TAKE: &'static str = "take";
    const PEEK: &'static str = "peek";
    fn plan(quota: &Quota) -> Result<Plan, BuildError> {
        gcra_plan(quota)
    }
}

impl RedisAlgorithm for TokenBucketKeys {
    const SUFFIX: &'static str = "tb";
}

impl sealed::ScriptSpec for LeakyMeterKeys {
    fn script() -> &'static Script {
        &LEAKY_METER
    }
    fn source() -> &'static str {
        &LEAKY_METER_SOURCE
    }
    const TAKE: &'static str = "strict";
    const PEEK: &'static str = "speek";
    fn plan(quota: &Quota) -> Result<Plan, BuildError> {
        gcra_plan(quota)
    }
}

impl RedisAlgorithm for LeakyMeterKeys {
    const SUFFIX: &'static str = "lm";
}

impl sealed::ScriptSpec for FixedWindowKeys {
    fn script() -> &'static Script {
        &FIXED_WINDOW
    }
    fn source() -> &'static str {
        &FIXED_WINDOW_SOURCE
    }
    const TAKE: &'static str = "take";
    const PEEK: &'static str = "peek";
    /// `limit, window`: the window in whole microseconds (Redis's `TIME` has no finer
    /// resolution), at most 2^52 us, and a limit of at most 2^52, so that a count plus a request
    /// stays below 2^53.
    fn plan(quota: &Quota) -> Result<Plan, BuildError> {
        // The same rules as in process first (capacity and initial fill equal to the count, ...).
        <FixedWindowKeys as Contract>::policy(quota)?;
        let window = window_micros(quota)?;
        if quota.count() > MAX_SPAN {
            return Err(BuildError::new(
                "count",
                format!(
                    "1..=2^52 (a count plus a request must stay below 2^53), got {}",
                    quota.count()
                ),
            ));
        }
        Ok(Plan {
            args: vec![quota.count(), window],
            tick: 1000,
        })
    }
}

impl RedisAlgorithm for FixedWindowKeys {
    const SUFFIX: &'static str = "fw";
}

impl sealed::ScriptSpec for SlidingWindowCounterKeys {
    fn script() -> &'static Script {
        &SLIDING_COUNTER
    }
    fn source() -> &'static str {
        &SLIDING_COUNTER_SOURCE
    }
    const TAKE: &'static str = "take";
    const PEEK: &'static str = "peek";
    /// `limit, window`: the window in whole microseconds, and `limit x window` below 2^52, so
    /// that the script's exact comparison `prev x (W - e) + (cur + n) x W <= N x W` (whose left
    /// side reaches twice that) stays within Lua's exact integers.
    fn plan(quota: &Quota) -> Result<Plan, BuildError> {
        <SlidingWindowCounterKeys as Contract>::policy(quota)?;
        let window = window_micros(quota)?;
        let count = quota.count();
        if window >= MAX_SPAN {
            return Err(BuildError::new(
                "period",
                format!(
                    "1 us..2^52 us for the sliding counter (count x window below 2^52), got \
                     {window} us"
                ),
            ));
        }
        if count.checked_mul(window).is_none_or(|p| p >= MAX_SPAN) {
            return Err(BuildError::new(
                "count",
                format!(
                    "1..={} for a window of {window} us (count x window below 2^52, which the \
                     script's exact comparison needs), got {count}",
                    (MAX_SPAN - 1) / window
                ),
            ));
        }
        Ok(Plan {
            args: vec![count, window],
            tick: 1000,
        })
    }
}

impl RedisAlgorithm for SlidingWindowCounterKeys {
    const SUFFIX: &'static str = "sc";
}

impl sealed::ScriptSpec for SlidingWindowLogKeys {
    fn script() -> &'static Script {
        &SLIDING_LOG
    }
    fn source() -> &'static str {
        &SLIDING_LOG_SOURCE
    }
    const TAKE: &'static str = "take";
    const PEEK: &'static str = "peek";
    /// `limit, window`: the window in whole microseconds (the log's own limits apply: at most
    /// [`MAX_LOG`](crate::window::MAX_LOG) entries).
    fn plan(quota: &Quota) -> Result<Plan, BuildError> {
        <SlidingWindowLogKeys as Contract>::policy(quota)?;
        Ok(Plan {
            args: vec![quota.count(), window_micros(quota)?],
            tick: 1000,
        })
    }
}

impl RedisAlgorithm for SlidingWindowLogKeys {
    const SUFFIX: &'static str = "sl";
}

/// The quota's period in whole microseconds, at most [`MAX_SPAN`].
fn window_micros(quota: &Quota) -> Result<u64, BuildError> {
    let period = quota.period();
    let nanos = duration_to_nanos(period);
    if !nanos.is_multiple_of(1000) || nanos / 1000 > MAX_SPAN {
        return Err(BuildError::new(
            "period",
            format!(
                "a whole number of microseconds from 1 us to 2^52 us (Redis's TIME counts \
                 microseconds), got {period:?}"
            ),
        ));
    }
    Ok(nanos / 1000)
}

/// The full source of `A`'s script, as it is loaded into Redis (for tools that run the scripts
/// elsewhere, such as the fuzz target that runs them under Lua 5.1 against the reference models).
#[doc(hidden)]
pub fn script_source<A: RedisAlgorithm>() -> &'static str {
    A::source()
}

/// The full source of the script that decides several token buckets on one key at once
/// ([`RedisAllOf`](super::RedisAllOf)), as it is loaded into Redis (for the fuzz target).
#[doc(hidden)]
pub fn all_of_script_source() -> &'static str {
    &TOKEN_BUCKET_ALL_SOURCE
}

#[cfg(test)]
mod tests {
    use super::sealed::ScriptSpec;
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_bucket_counts_nanoseconds_up_to_a_52_day_burst_window() {
        let q = Quota::per_second(3).unwrap();
        assert_eq!(
            gcra_plan(&q).unwrap(),
            Plan {
                args: vec![333_333_334, 3, 1],
                tick: 1
            }
        );
        // One a day, 52 of them: 52 days fit in 2^52 ns (52.1 days); 53 do not.
        let day = Quota::per_day(1).unwrap();
        assert_eq!(gcra_plan(&day.with_capacity(52).unwrap()).unwrap().tick, 1);
        let coarse = gcra_plan(&day.with_capacity(53).unwrap()).unwrap();
        assert_eq!(coarse.args, vec![86_400_000_000, 53, 1000]);
        assert_eq!(coarse.tick, 1000);
    }

    #[test]
    fn microsecond_intervals_round_up() {
        let q = Quota::per_period(1, Duration::from_nanos(86_400_000_000_001))
            .unwrap()
            .with_capacity(60)
            .unwrap();
        assert_eq!(gcra_plan(&q).unwrap().args, vec![86_400_000_001, 60, 1000]);
    }

    #[test]
    fn burst_windows_beyond_2_pow_52_microseconds_are_refused_naming_the_capacity() {
        let q = Quota::per_day(1).unwrap().with_capacity(60_000).unwrap();
        let err = gcra_plan(&q).unwrap_err();
        assert_eq!(err.field(), "capacity");
    }

    #[test]
    fn a_fixed_window_counts_at_most_2_pow_52() {
        let window = Duration::from_micros(1 << 52);
        let fits = Quota::per_period(1 << 52, window).unwrap();
        assert!(FixedWindowKeys::plan(&fits).is_ok());
        let over = Quota::per_period((1 << 52) + 1, window).unwrap();
        assert_eq!(FixedWindowKeys::plan(&over).unwrap_err().field(), "count");
    }

    #[test]
    fn the_sliding_counter_keeps_count_times_window_below_2_pow_52() {
        let day = 86_400_000_000u64;
        let fits = Quota::per_day(52_124).unwrap();
        assert_eq!(
            SlidingWindowCounterKeys::plan(&fits).unwrap().args,
            vec![52_124, day]
        );
        let over = Quota::per_day(52_125).unwrap();
        let err = SlidingWindowCounterKeys::plan(&over).unwrap_err();
        assert_eq!(err.field(), "count");
        assert!(err.to_string().contains("1..=52124"), "{err}");
        assert_eq!(
            SlidingWindowLogKeys::plan(&Quota::per_minute(5).unwrap())
                .unwrap()
                .args,
            vec![5, 60_000_000]
        );
    }

    #[test]
    fn windows_are_whole_microseconds() {
        let q = Quota::per_second(10).unwrap();
        assert_eq!(FixedWindowKeys::plan(&q).unwrap().args, vec![10, 1_000_000]);
        let odd = Quota::per_period(1, Duration::from_nanos(1500)).unwrap();
        assert_eq!(FixedWindowKeys::plan(&odd).unwrap_err().field(), "period");
        let burst = Quota::per_second(10).unwrap().with_capacity(20).unwrap();
        assert_eq!(
            FixedWindowKeys::plan(&burst).unwrap_err().field(),
            "capacity"
        );
    }

    #[test]
    fn every_script_is_the_prelude_then_its_files() {
        assert!(script_source::<TokenBucketKeys>().starts_with(PRELUDE));
        assert!(script_source::<TokenBucketKeys>().contains(GCRA));
        assert!(script_source::<FixedWindowKeys>().contains("HMGET"));
        assert!(all_of_script_source().starts_with(PRELUDE));
        assert!(all_of_script_source().contains(GCRA));
        assert!(all_of_script_source().ends_with(include_str!("gcra_all.lua")));
        assert!(script_source::<TokenBucketKeys>().ends_with(include_str!("gcra_one.lua")));
        assert_ne!(
            TokenBucketKeys::script().get_hash(),
            LeakyMeterKeys::script().get_hash()
        );
    }
}
