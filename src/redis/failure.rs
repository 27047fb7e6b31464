//! What happens when Redis cannot decide: the [`FailurePolicy`], the circuit breaker that stops a
//! dead server from costing a timeout per call, and the counters behind [`Stats`].

use std::fmt;
use std::time::{Duration, Instant};

use crate::keyed::{KeyedLimiter, TokenBucketKeys};
use crate::sync::{AtomicBool, AtomicU64, Ordering};
use crate::Algorithm;

/// What a [`RedisLimiter`](super::RedisLimiter) answers when Redis cannot decide (a timeout, a
/// refused connection, a server error, a reply of the wrong shape, a foreign value at the key, or
/// an open circuit breaker). There is no default: the builder requires one, because each choice
/// fails someone.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::redis::FailurePolicy;
/// use tollgate::Quota;
/// // 100 a second across 4 replicas: while Redis is away, each replica allows its share.
/// let local: FailurePolicy = FailurePolicy::Local(KeyedLimiter::new(Quota::per_second(25)?));
/// assert!(matches!(local, FailurePolicy::Local(_)));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
// One per limiter, moved in once: boxing the local limiter would add an allocation and a
// `Box::new` to every caller for nothing.
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum FailurePolicy<A: Algorithm = TokenBucketKeys> {
    /// Refuse: the call answers [`RedisError::Unavailable`](super::RedisError::Unavailable)
    /// (an HTTP layer answers 503). Protects the backend; an outage of Redis is an outage of the
    /// service.
    Closed,
    /// Admit: the call answers `Ok` with no tokens known (`remaining() == 0`, `reset_after()`
    /// zero), counted in [`Stats::open_admissions`]. Keeps the service up; the limit is off until
    /// Redis returns.
    Open,
    /// Decide in process: this keyed limiter (usually the quota divided by the number of
    /// replicas) answers, counted in [`Stats::local_decisions`]. Its state is separate from
    /// Redis's and is not merged back when Redis returns.
    Local(KeyedLimiter<Vec<u8>, A>),
}

impl<A: Algorithm> fmt::Debug for FailurePolicy<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailurePolicy::Closed => f.write_str("Closed"),
            FailurePolicy::Open => f.write_str("Open"),
            FailurePolicy::Local(l) => f.debug_tuple("Local").field(&l.quota()).finish(),
        }
    }
}

/// Which way a failure policy answers, with the limits it decides with in process for `Local`.
pub(crate) enum Choice<'a, L> {
    Closed,
    Open,
    Local(&'a L),
}

/// A failure policy ([`FailurePolicy`], or a [`RedisAllOf`](super::RedisAllOf)'s
/// [`AllOfFailurePolicy`](super::AllOfFailurePolicy)): its choice, for the one protocol they all
/// follow (`RedisLimiter::fall_back`), and its `Debug` form, for the log.
pub(crate) trait Fallback: fmt::Debug {
    /// What it decides with in process, under `Local`.
    type Limits;

    /// Which way it answers.
    fn choice(&self) -> Choice<'_, Self::Limits>;
}

impl<A: Algorithm> Fallback for FailurePolicy<A> {
    type Limits = KeyedLimiter<Vec<u8>, A>;

    fn choice(&self) -> Choice<'_, Self::Limits> {
        match self {
            FailurePolicy::Closed => Choice::Closed,
            FailurePolicy::Open => Choice::Open,
            FailurePolicy::Local(local) => Choice::Local(local),
        }
    }
}

/// What a [`RedisLimiter`](super::RedisLimiter) has done since it was built. Counters only grow.
///
/// # Examples
///
/// ```
/// use tollgate::redis::Stats;
/// let s = Stats::default();
/// assert_eq!(s.round_trips, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Calls that asked for a decision (admissions, peeks, queries, schedulings, leases,
    /// reservations and their cancels; a call over several limits is one), however they were
    /// answered; calls refused on the client (a key too long, more than the capacity, a bad
    /// `max_wait`) are not counted.
    pub decisions: u64,
    /// Commands sent to Redis: one `EVALSHA` per decision, plus a `SCRIPT LOAD` and a second
    /// `EVALSHA` after a `NOSCRIPT`.
    pub round_trips: u64,
    /// Scripts loaded again after the server answered `NOSCRIPT` (a restart, a failover, a
    /// `SCRIPT FLUSH`).
    pub reloads: u64,
    /// Calls that got no answer within the timeout.
    pub timeouts: u64,
    /// Calls Redis could not decide, for any reason (timeouts included, breaker skips excluded).
    pub failures: u64,
    /// Calls that did not go to Redis because the circuit breaker was open.
    pub breaker_skips: u64,
    /// Times the circuit breaker opened.
    pub breaker_opened: u64,
    /// Calls admitted by [`FailurePolicy::Open`].
    pub open_admissions: u64,
    /// Calls decided by [`FailurePolicy::Local`].
    pub local_decisions: u64,
}

/// One of [`Stats`]' counters and, with the `metrics` feature, its metric's handle, registered
/// once with the limiter.
#[derive(Debug)]
pub(crate) struct Count {
    n: AtomicU64,
    #[cfg(feature = "metrics")]
    handle: ::metrics::Counter,
}

/// The counters, each moved by one relaxed increment: they publish nothing but themselves.
#[derive(Debug)]
pub(crate) struct Counters {
    pub(crate) decisions: Count,
    pub(crate) round_trips: Count,
    pub(crate) reloads: Count,
    pub(crate) timeouts: Count,
    pub(crate) failures: Count,
    pub(crate) breaker_skips: Count,
    pub(crate) breaker_opened: Count,
    pub(crate) open_admissions: Count,
    pub(crate) local_decisions: Count,
}

/// One more: Relaxed, as a counter orders nothing else.
pub(crate) fn bump(c: &Count) {
    c.n.fetch_add(1, Ordering::Relaxed);
    #[cfg(feature = "metrics")]
    c.handle.increment(1);
}

impl Counters {
    /// Every counter at zero; with the `metrics` feature, each metric's handle registered under
    /// `label` (the limiter's name, else its prefix).
    pub(crate) fn new(_label: &str) -> Counters {
        // The metric's handle is built only with the feature: without it the field, and this
        // expression, are not there.
        macro_rules! count {
            ($metric:ident) => {
                Count {
                    n: AtomicU64::new(0),
                    #[cfg(feature = "metrics")]
                    handle: crate::metrics::counter(crate::metrics::$metric, "limiter", _label),
                }
            };
        }
        Counters {
            decisions: count!(REDIS_CALLS),
            round_trips: count!(REDIS_ROUND_TRIPS),
            reloads: count!(REDIS_SCRIPT_RELOADS),
            timeouts: count!(REDIS_TIMEOUTS),
            failures: count!(REDIS_FAILURES),
            breaker_skips: count!(REDIS_BREAKER_SKIPS),
            breaker_opened: count!(REDIS_BREAKER_OPENS),
            open_admissions: count!(REDIS_OPEN_ADMISSIONS),
            local_decisions: count!(REDIS_LOCAL_DECISIONS),
        }
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let read = |c: &Count| c.n.load(Ordering::Relaxed);
        Stats {
            decisions: read(&self.decisions),
            round_trips: read(&self.round_trips),
            reloads: read(&self.reloads),
            timeouts: read(&self.timeouts),
            failures: read(&self.failures),
            breaker_skips: read(&self.breaker_skips),
            breaker_opened: read(&self.breaker_opened),
            open_admissions: read(&self.open_admissions),
            local_decisions: read(&self.local_decisions),
        }
    }
}

/// The `tollgate_decisions_total` handles of a Redis limiter: the direct limiters' outcomes and
/// `unavailable`, registered once with the limiter.
#[cfg(feature = "metrics")]
#[derive(Debug)]
pub(crate) struct Outcomes {
    decisions: crate::metrics::Decisions,
    unavailable: ::metrics::Counter,
}

#[cfg(feature = "metrics")]
impl Outcomes {
    pub(crate) fn new(label: &str) -> Outcomes {
        Outcomes {
            decisions: crate::metrics::Decisions::register(label),
            unavailable: ::metrics::counter!(
                crate::metrics::DECISIONS,
                "limiter" => label.to_owned(),
                "outcome" => "unavailable"
            ),
        }
    }

    /// Counts a call's answer.
    pub(crate) fn record<T>(&self, answer: &Result<T, super::RedisError>) {
        use super::RedisError;
        match answer {
            Ok(_) => self.decisions.admitted(),
            Err(RedisError::Denied(_)) => self.decisions.denied(),
            Err(RedisError::InsufficientCapacity(_)) => self.decisions.insufficient(),
            Err(RedisError::Unavailable(_)) => self.unavailable.increment(1),
            // A key too long: refused on the client, never asked.
            Err(_) => {}
        }
    }
}

/// Where a call goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// To Redis, the breaker closed.
    Redis,
    /// To Redis as the one probe of an open breaker's cool-down.
    Probe,
    /// Not to Redis: the breaker is open.
    Skip,
}

/// The circuit breaker: after `threshold` failures in a row it opens, and calls skip Redis until
/// `cool_down` has passed; then one call (the probe) goes to Redis, and its answer closes the
/// breaker or starts another cool-down.
///
/// Every access is `Relaxed`: the breaker publishes no other data, and a stale read only sends
/// one call more to Redis, or one fewer, around an opening or a closing.
#[derive(Debug)]
pub(crate) struct Breaker {
    threshold: u32,
    cool_down: Duration,
    epoch: Instant,
    /// Failures in a row since the last success.
    failures: AtomicU64,
    /// Nanoseconds since `epoch` until which calls skip Redis; 0 while closed.
    open_until: AtomicU64,
    /// Held by the call probing an open breaker.
    probing: AtomicBool,
}

impl Breaker {
    pub(crate) fn new(threshold: u32, cool_down: Duration) -> Breaker {
        Breaker {
            threshold,
            cool_down,
            epoch: Instant::now(),
            failures: AtomicU64::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    /// The cool-down, for the breaker's event.
    #[cfg(feature = "tracing")]
    pub(crate) fn cool_down(&self) -> Duration {
        self.cool_down
    }

    fn now(&self) -> u64 {
        // At least 1, so that 0 can mean "closed"; saturating past 584 years.
        u64::try_from(self.epoch.elapsed().as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    pub(crate) fn route(&self) -> Route {
        let until = self.open_until.load(Ordering::Relaxed);
        if until == 0 {
            return Route::Redis;
        }
        if self.now() < until {
            return Route::Skip;
        }
        match self
            .probing
            .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => Route::Probe,
            Err(_) => Route::Skip,
        }
    }

    /// Redis answered.
    pub(crate) fn success(&self, route: Route) {
        self.failures.store(0, Ordering::Relaxed);
        if route == Route::Probe {
            self.open_until.store(0, Ordering::Relaxed);
            self.probing.store(false, Ordering::Relaxed);
        }
    }

    /// Redis did not answer; answers whether the breaker opened now.
    pub(crate) fn failure(&self, route: Route) -> bool {
        let reopen = self
            .now()
            .saturating_add(u64::try_from(self.cool_down.as_nanos()).unwrap_or(u64::MAX));
        match route {
            Route::Probe => {
                self.open_until.store(reopen, Ordering::Relaxed);
                self.probing.store(false, Ordering::Relaxed);
                false
            }
            Route::Redis => {
                let failures = self
                    .failures
                    .fetch_add(1, Ordering::Relaxed)
                    .saturating_add(1);
                failures >= u64::from(self.threshold)
                    && self
                        .open_until
                        .compare_exchange(0, reopen, Ordering::Relaxed, Ordering::Relaxed)
                        .is_ok()
            }
            Route::Skip => false,
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_probes_once_and_closes_on_success() {
        let b = Breaker::new(3, Duration::from_millis(30));
        for _ in 0..2 {
            assert_eq!(b.route(), Route::Redis);
            assert!(!b.failure(Route::Redis));
        }
        assert!(b.failure(Route::Redis));
        assert_eq!(b.route(), Route::Skip);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(b.route(), Route::Probe);
        // One probe at a time.
        assert_eq!(b.route(), Route::Skip);
        b.success(Route::Probe);
        assert_eq!(b.route(), Route::Redis);
    }

    #[test]
    fn a_failed_probe_starts_another_cool_down_and_a_success_resets_the_count() {
        let b = Breaker::new(2, Duration::from_millis(20));
        assert!(!b.failure(Route::Redis));
        b.success(Route::Redis);
        assert!(!b.failure(Route::Redis));
        assert!(b.failure(Route::Redis));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(b.route(), Route::Probe);
        assert!(!b.failure(Route::Probe));
        assert_eq!(b.route(), Route::Skip);
    }
}
