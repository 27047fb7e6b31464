//! What the limiters report through the `metrics` facade crate (feature
//! `metrics`): the crate every Rust metrics exporter plugs into (Prometheus, OpenTelemetry,
//! StatsD, ...). tollgate only registers and moves counters and gauges; the application installs
//! a recorder (an exporter) and chooses where they go.
//!
//! ```
//! use tollgate::metrics::Metered;
//! use tollgate::{Limiter, Quota, TokenBucket};
//! # use std::sync::{atomic::{AtomicU64, Ordering}, Arc};
//! # use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
//! # /// Counts the increments of `tollgate_decisions_total{limiter="api",outcome="admitted"}`.
//! # #[derive(Default)]
//! # struct Exporter(Arc<AtomicU64>);
//! # impl Recorder for Exporter {
//! #     fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
//! #     fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
//! #     fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
//! #     fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
//! #         let admitted = key.labels().any(|l| l.key() == "outcome" && l.value() == "admitted");
//! #         if key.name() == "tollgate_decisions_total" && admitted {
//! #             Counter::from_arc(Arc::clone(&self.0))
//! #         } else {
//! #             Counter::noop()
//! #         }
//! #     }
//! #     fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge { Gauge::noop() }
//! #     fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram { Histogram::noop() }
//! # }
//! let quota = Quota::per_second(100)?;
//! // An application installs its exporter's recorder (`metrics::set_global_recorder`) first;
//! // here one is installed for this closure only.
//! let exporter = Exporter::default();
//! let api = metrics::with_local_recorder(&exporter, || {
//!     tollgate::metrics::describe(); // help text and units, once
//!     // A direct limiter reports once wrapped with a name: its `limiter` label.
//!     Metered::new("api", TokenBucket::new(quota))
//! });
//! assert!(api.try_acquire().is_ok()); // tollgate_decisions_total{limiter="api",outcome="admitted"}
//! assert!(api.try_acquire_n(2).is_ok());
//! assert_eq!(exporter.0.load(Ordering::Relaxed), 2);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Which limiters report
//!
//! - A direct limiter ([`TokenBucket`](crate::TokenBucket), the windows, any [`Limiter`]) reports
//!   when wrapped in [`Metered`], whose name is its `limiter` label. An unwrapped limiter costs
//!   nothing more than without the feature.
//! - A [`KeyedLimiter`](crate::keyed::KeyedLimiter) reports once named with
//!   [`with_name`](crate::keyed::KeyedLimiter::with_name): its decisions, the keys it holds, its
//!   evictions and its overflow. An unnamed one reports nothing (one untaken branch per check).
//! - A [`RedisLimiter`](crate::redis::RedisLimiter) (feature `redis`) always reports, labelled
//!   with the name given to its builder ([`RedisLimiterBuilder::name`](crate::redis::RedisLimiterBuilder::name)),
//!   else its key prefix (`"tollgate"` by default); so does a
//!   [`RedisAllOf`](crate::redis::RedisAllOf), one decision per call however many limits; a
//!   [`LeasedBucket`](crate::redis::LeasedBucket) reports its leases under its Redis limiter's
//!   label. Their
//!   [`Stats`](crate::redis::Stats) and [`LeaseStats`](crate::redis::LeaseStats) count as before.
//! - A [`LimitLayer`](crate::middleware::LimitLayer) (feature `tower`) always reports its
//!   decisions, labelled with the policy's name
//!   ([`policy_name`](crate::middleware::LimitLayerBuilder::policy_name), `"default"`, or the tier's
//!   name).
//!
//! # The metrics
//!
//! Names follow the Prometheus conventions, which the facade's exporters expect: lower case,
//! words joined by `_`, the crate's prefix `tollgate_`, and `_total` at the end of every counter
//! (exporters that add `_total` to counters leave a name that has it alone). Every label value is
//! fixed when the handle is registered: no label is ever built from a request (a key, an address),
//! so the number of series is the number of limiters and policies, not of clients.
//!
//! | name | type | labels | what it counts |
//! | --- | --- | --- | --- |
//! | `tollgate_decisions_total` | counter | `limiter`, `outcome` | calls that asked to take capacity (`try_acquire*`; a keyed `check_key*`, `schedule_key*`, `take_up_to_key*` or `reserve_key_n*`; a Redis `check_key*`, `schedule_key*` or `take_up_to_key`), by answer: `outcome="admitted"`, `"denied"` (not now), `"insufficient"` (more than the capacity: never); a Redis call its failure policy answered with an error is `"unavailable"`. One per call, whatever `n` (a query with `n = 0` is admitted). Peeks and `remaining` are not counted |
//! | `tollgate_keyed_keys` | gauge | `limiter` | keys the keyed limiter holds (places reserved included), as [`len`](crate::keyed::KeyedLimiter::len) |
//! | `tollgate_keyed_evictions_total` | counter | `limiter` | keys forgotten, by sweeps and `retain_recent`, as [`evictions`](crate::keyed::KeyedLimiter::evictions) |
//! | `tollgate_keyed_overflow_total` | counter | `limiter` | new keys that found no room and got the overflow policy (refused or shared), as [`overflowed`](crate::keyed::KeyedLimiter::overflowed) |
//! | `tollgate_keyed_too_many_keys_total` | counter | `limiter` | requests refused with [`KeyedError::TooManyKeys`](crate::keyed::KeyedError::TooManyKeys) (under [`Overflow::Refuse`](crate::keyed::Overflow::Refuse)); not in `tollgate_decisions_total` |
//! | `tollgate_redis_calls_total` | counter | `limiter` | calls that asked Redis for a decision, however answered ([`Stats::decisions`](crate::redis::Stats::decisions)) |
//! | `tollgate_redis_round_trips_total` | counter | `limiter` | commands sent to Redis ([`Stats::round_trips`](crate::redis::Stats::round_trips)) |
//! | `tollgate_redis_script_reloads_total` | counter | `limiter` | scripts loaded again after `NOSCRIPT` ([`Stats::reloads`](crate::redis::Stats::reloads)) |
//! | `tollgate_redis_timeouts_total` | counter | `limiter` | calls with no answer within the timeout ([`Stats::timeouts`](crate::redis::Stats::timeouts)) |
//! | `tollgate_redis_failures_total` | counter | `limiter` | calls Redis could not decide, timeouts included ([`Stats::failures`](crate::redis::Stats::failures)) |
//! | `tollgate_redis_breaker_skips_total` | counter | `limiter` | calls not sent because the breaker was open ([`Stats::breaker_skips`](crate::redis::Stats::breaker_skips)) |
//! | `tollgate_redis_breaker_opens_total` | counter | `limiter` | times the breaker opened ([`Stats::breaker_opened`](crate::redis::Stats::breaker_opened)) |
//! | `tollgate_redis_open_admissions_total` | counter | `limiter` | calls admitted by [`FailurePolicy::Open`](crate::redis::FailurePolicy::Open) ([`Stats::open_admissions`](crate::redis::Stats::open_admissions)) |
//! | `tollgate_redis_local_decisions_total` | counter | `limiter` | calls decided by [`FailurePolicy::Local`](crate::redis::FailurePolicy::Local) ([`Stats::local_decisions`](crate::redis::Stats::local_decisions)) |
//! | `tollgate_redis_lease_calls_total` | counter | `limiter` | lease calls a [`LeasedBucket`](crate::redis::LeasedBucket) sent, give-backs included ([`LeaseStats::leases`](crate::redis::LeaseStats::leases)) |
//! | `tollgate_redis_lease_granted_tokens_total` | counter | `limiter` | tokens the leases granted ([`LeaseStats::leased`](crate::redis::LeaseStats::leased)) |
//! | `tollgate_redis_lease_returned_tokens_total` | counter | `limiter` | tokens given back to Redis unspent ([`LeaseStats::returned`](crate::redis::LeaseStats::returned)) |
//! | `tollgate_middleware_decisions_total` | counter | `policy`, `outcome` | requests the layer decided, by the policy of the key's tier (behind several limits at once, [`KeyedAllOf`](crate::middleware::KeyedAllOf) or [`GlobalAllOf`](crate::middleware::GlobalAllOf), the policy the decision was from: the binding one, or the refusing one reported): `outcome="admitted"`, `"denied"` (refused for the limit: denied, too many keys, too large), `"unavailable"` (the backend could not decide: Redis), `"would_deny"` (refused, and let through by a [dry run](crate::middleware::LimitLayerBuilder::dry_run), as [`would_deny`](crate::middleware::LimitLayer::would_deny)). Exempt requests, requests without a key and requests refused before any decision are not counted |
//!
//! `tollgate_decisions_total` for a keyed limiter counts the shared overflow limiter's answers
//! under the keyed limiter's label; its `tollgate_keyed_too_many_keys_total` the refusals.
//! Counters count from the moment the handle is registered: the keyed gauge starts at the
//! limiter's count of keys when it is named.
//!
//! # When the handles are registered
//!
//! No metric key or label is built per request: each limiter registers its handles
//! ([`metrics::Counter`], [`metrics::Gauge`]) once, with the recorder installed at that moment,
//! and keeps them. So **install the recorder (the exporter) before building the limiters**.
//! A handle registered with no recorder installed is a no-op handle (`increment` is one untaken
//! branch), and stays one after a recorder is installed. To connect a limiter built earlier,
//! register again: [`Metered::new`] on [`Metered::into_inner`], or
//! [`KeyedLimiter::with_name`](crate::keyed::KeyedLimiter::with_name) again. A Redis limiter
//! and a layer register when built.
//!
//! # Cost
//!
//! Off (the default), the feature builds nothing: no field, no branch, no dependency. On, a
//! limiter that does not report (not wrapped, not named) pays nothing, or for a keyed limiter one
//! branch on a field it already reads. One that reports pays one counter increment per
//! decision: with no recorder installed, a branch on a no-op handle; with one, whatever the
//! recorder's counter costs (an atomic add for the usual exporters). `benches/README.md` has
//! the instruction counts.
//!
//! # Tracing
//!
//! With the `tracing` feature, the crate emits events for what an operator needs to see, never
//! one per request: at `warn`, a Redis breaker opening, a failure policy taking over after Redis
//! stopped answering, a keyed limiter's overflow (on the 1st, 2nd, 4th, 8th, ... newcomer refused
//! or sent to the overflow limiter: logarithmic, however long a flood lasts), and a layer's
//! set-up error (a peer-address key without connect info, once per layer); at `info`, the breaker
//! closing, Redis answering again after a failure policy had taken over, and a script reloaded
//! after `NOSCRIPT`; at `debug`, each sweep of a keyed limiter (keys removed, keys left, its
//! time). Every event's target is the module that emits it (`tollgate::redis::limiter`, ...), and
//! its fields name the limiter. No event is emitted per request at any level.

use ::metrics::{describe_counter, describe_gauge, Counter, Unit};

use crate::clock::Nanos;
use crate::limiter::Limiter;
use crate::outcome::{AcquireError, Admitted, Denied};
use crate::quota::Quota;

/// The metric names as constants, each with its doc line and an example naming it.
macro_rules! names {
    ($($doc:literal $name:ident = $value:literal;)*) => {
        $(
            #[doc = concat!("`", $value, "`: ", $doc)]
            ///
            /// # Examples
            ///
            /// ```
            #[doc = concat!("assert_eq!(tollgate::metrics::", stringify!($name), ", \"", $value, "\");")]
            /// ```
            pub const $name: &str = $value;
        )*
    };
}

names! {
    "calls that asked to take capacity, by limiter and outcome."
    DECISIONS = "tollgate_decisions_total";
    "keys a named keyed limiter holds."
    KEYED_KEYS = "tollgate_keyed_keys";
    "keys a named keyed limiter forgot."
    KEYED_EVICTIONS = "tollgate_keyed_evictions_total";
    "new keys that found no room."
    KEYED_OVERFLOW = "tollgate_keyed_overflow_total";
    "requests refused with `TooManyKeys`."
    KEYED_TOO_MANY_KEYS = "tollgate_keyed_too_many_keys_total";
    "calls that asked Redis for a decision."
    REDIS_CALLS = "tollgate_redis_calls_total";
    "commands sent to Redis."
    REDIS_ROUND_TRIPS = "tollgate_redis_round_trips_total";
    "scripts loaded again after `NOSCRIPT`."
    REDIS_SCRIPT_RELOADS = "tollgate_redis_script_reloads_total";
    "calls with no answer within the timeout."
    REDIS_TIMEOUTS = "tollgate_redis_timeouts_total";
    "calls Redis could not decide."
    REDIS_FAILURES = "tollgate_redis_failures_total";
    "calls not sent, the breaker open."
    REDIS_BREAKER_SKIPS = "tollgate_redis_breaker_skips_total";
    "times the breaker opened."
    REDIS_BREAKER_OPENS = "tollgate_redis_breaker_opens_total";
    "calls admitted by `FailurePolicy::Open`."
    REDIS_OPEN_ADMISSIONS = "tollgate_redis_open_admissions_total";
    "calls decided by `FailurePolicy::Local`."
    REDIS_LOCAL_DECISIONS = "tollgate_redis_local_decisions_total";
    "lease calls of the leased buckets."
    REDIS_LEASE_CALLS = "tollgate_redis_lease_calls_total";
    "tokens the leases granted."
    REDIS_LEASE_GRANTED = "tollgate_redis_lease_granted_tokens_total";
    "tokens given back unspent."
    REDIS_LEASE_RETURNED = "tollgate_redis_lease_returned_tokens_total";
    "requests a layer decided, by policy and outcome."
    MIDDLEWARE_DECISIONS = "tollgate_middleware_decisions_total";
}

/// Describes every metric of the table in the [module docs](self) to the installed recorder: its
/// help text and unit (what a Prometheus exporter prints as `# HELP`). Call it once, after
/// installing the recorder; the metrics are reported whether or not it is called.
///
/// # Examples
///
/// ```
/// // With no recorder installed (as here) it does nothing.
/// tollgate::metrics::describe();
/// ```
pub fn describe() {
    let counters: [(&'static str, Unit, &'static str); 17] = [
        (DECISIONS, Unit::Count, "Calls that asked a limiter for capacity, by outcome (admitted, denied, insufficient, unavailable)."),
        (KEYED_EVICTIONS, Unit::Count, "Keys a keyed limiter forgot (idle keys removed by sweeps and retain_recent)."),
        (KEYED_OVERFLOW, Unit::Count, "New keys that found a keyed limiter full and got its overflow policy."),
        (KEYED_TOO_MANY_KEYS, Unit::Count, "Requests a keyed limiter refused with TooManyKeys."),
        (REDIS_CALLS, Unit::Count, "Calls that asked Redis for a decision, however answered."),
        (REDIS_ROUND_TRIPS, Unit::Count, "Commands sent to Redis."),
        (REDIS_SCRIPT_RELOADS, Unit::Count, "Scripts loaded again after Redis answered NOSCRIPT."),
        (REDIS_TIMEOUTS, Unit::Count, "Redis calls that got no answer within the timeout."),
        (REDIS_FAILURES, Unit::Count, "Redis calls that could not be decided (timeouts included)."),
        (REDIS_BREAKER_SKIPS, Unit::Count, "Calls not sent to Redis because the circuit breaker was open."),
        (REDIS_BREAKER_OPENS, Unit::Count, "Times the Redis circuit breaker opened."),
        (REDIS_OPEN_ADMISSIONS, Unit::Count, "Calls admitted by the Open failure policy while Redis could not decide."),
        (REDIS_LOCAL_DECISIONS, Unit::Count, "Calls decided by the Local failure policy while Redis could not decide."),
        (REDIS_LEASE_CALLS, Unit::Count, "Lease calls sent by leased buckets (give-backs included)."),
        (REDIS_LEASE_GRANTED, Unit::Count, "Tokens granted to leased buckets by their leases."),
        (REDIS_LEASE_RETURNED, Unit::Count, "Tokens leased buckets gave back to Redis unspent."),
        (MIDDLEWARE_DECISIONS, Unit::Count, "Requests the rate-limit layer decided, by policy and outcome (admitted, denied, unavailable, would_deny)."),
    ];
    for (name, unit, help) in counters {
        describe_counter!(name, unit, help);
    }
    describe_gauge!(
        KEYED_KEYS,
        Unit::Count,
        "Keys a keyed limiter holds (places reserved included)."
    );
}

/// The `tollgate_decisions_total` handles of one limiter, one per outcome, registered once.
#[derive(Debug, Clone)]
pub(crate) struct Decisions {
    admitted: Counter,
    denied: Counter,
    insufficient: Counter,
}

impl Decisions {
    /// Registers the handles for `limiter` with the recorder installed now.
    pub(crate) fn register(limiter: &str) -> Decisions {
        let outcome = |outcome: &'static str| ::metrics::counter!(DECISIONS, "limiter" => limiter.to_owned(), "outcome" => outcome);
        Decisions {
            admitted: outcome("admitted"),
            denied: outcome("denied"),
            insufficient: outcome("insufficient"),
        }
    }

    /// One admission.
    #[inline]
    pub(crate) fn admitted(&self) {
        self.admitted.increment(1);
    }

    /// One denial (not now).
    #[inline]
    pub(crate) fn denied(&self) {
        self.denied.increment(1);
    }

    /// One request over the capacity (never).
    #[inline]
    pub(crate) fn insufficient(&self) {
        self.insufficient.increment(1);
    }

    /// Counts an answer of `try_acquire_n`'s shape.
    #[inline]
    pub(crate) fn record<T>(&self, answer: &Result<T, AcquireError>) {
        match answer {
            Ok(_) => self.admitted(),
            Err(AcquireError::Denied(_)) => self.denied(),
            Err(_) => self.insufficient(),
        }
    }
}

/// A counter registered for one label pair, `name{label="value"}`.
pub(crate) fn counter(name: &'static str, label: &'static str, value: &str) -> Counter {
    ::metrics::counter!(name, label => value.to_owned())
}

/// A gauge registered for one label pair, `name{label="value"}`.
pub(crate) fn gauge(name: &'static str, label: &'static str, value: &str) -> ::metrics::Gauge {
    ::metrics::gauge!(name, label => value.to_owned())
}

/// A [`Limiter`] that reports its decisions, under its name, as `tollgate_decisions_total`
/// (see the [module docs](self)); otherwise it is the limiter it wraps.
///
/// Each call of [`try_acquire_at`](Limiter::try_acquire_at) or
/// [`try_acquire_n_at`](Limiter::try_acquire_n_at) (and the clock-reading forms, through the
/// [`Limiter`] trait) adds one to the outcome it answered; peeks and `remaining` are not counted.
/// The handles are registered by [`Metered::new`], with the recorder installed then.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tollgate::metrics::Metered;
/// use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
///
/// let search = Arc::new(Metered::new("search", TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new())));
/// assert!(search.try_acquire().is_ok());
/// assert!(search.try_acquire_n(2).is_err()); // denied: counted as outcome="denied"
/// assert_eq!(search.name(), "search");
/// assert_eq!(search.get_ref().remaining(), 1); // the wrapped limiter, as it is
/// // Shared as any limiter is.
/// let shared: Arc<dyn Limiter> = search;
/// assert!(shared.try_acquire().is_ok());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug)]
pub struct Metered<L> {
    limiter: L,
    name: String,
    decisions: Decisions,
}

impl<L: Limiter> Metered<L> {
    /// Wraps `limiter`, reporting as `limiter="<name>"`: registers its handles with the recorder
    /// installed now.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::metrics::Metered;
    /// use tollgate::{Limiter, Quota, TokenBucket};
    /// let login = Metered::new("login", TokenBucket::new(Quota::per_minute(5)?));
    /// assert_eq!(login.remaining(), 5);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(name: impl Into<String>, limiter: L) -> Metered<L> {
        let name = name.into();
        Metered {
            decisions: Decisions::register(&name),
            limiter,
            name,
        }
    }
}

impl<L> Metered<L> {
    /// The name: the `limiter` label.
    ///
    /// # Examples
    ///
    /// See [`Metered`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limiter wrapped (its own methods, uncounted).
    ///
    /// # Examples
    ///
    /// See [`Metered`].
    pub fn get_ref(&self) -> &L {
        &self.limiter
    }

    /// The limiter wrapped, unwrapped; to register again (a recorder installed since), wrap it
    /// anew.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::metrics::Metered;
    /// use tollgate::{Quota, TokenBucket};
    /// let early = Metered::new("api", TokenBucket::new(Quota::per_second(10)?));
    /// // ... the recorder installed here ...
    /// let api = Metered::new("api", early.into_inner());
    /// # drop(api);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn into_inner(self) -> L {
        self.limiter
    }
}

impl<L: Limiter> Limiter for Metered<L> {
    #[inline]
    fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        let answer = self.limiter.try_acquire_at(now);
        match answer {
            Ok(_) => self.decisions.admitted(),
            Err(_) => self.decisions.denied(),
        }
        answer
    }

    #[inline]
    fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        let answer = self.limiter.try_acquire_n_at(n, now);
        self.decisions.record(&answer);
        answer
    }

    #[inline]
    fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.limiter.peek_n_at(n, now)
    }

    #[inline]
    fn remaining_at(&self, now: Nanos) -> u64 {
        self.limiter.remaining_at(now)
    }

    #[inline]
    fn now(&self) -> Nanos {
        self.limiter.now()
    }

    #[inline]
    fn quota(&self) -> Quota {
        self.limiter.quota()
    }
}
