//! The `metrics` feature: every metric in `tollgate::metrics`'s table moves exactly as documented,
//! read through a recorder of the test's own installed with `metrics::with_local_recorder` while
//! the limiters register their handles. The Redis metrics that need a server run only when
//! `TOLLGATE_REDIS_URL` is set (`scripts/redis.sh`); those of a dead or hung server run always.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use metrics::{Counter, Gauge, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use tollgate::keyed::{KeyedError, KeyedLimiter, Overflow};
use tollgate::metrics::Metered;
use tollgate::{Limiter, ManualClock, Nanos, Quota, TokenBucket};

const SEC: u64 = 1_000_000_000;

/// A metric's name and its labels, sorted.
type Series = (String, Vec<(String, String)>);

/// The test's recorder: every counter and gauge registered, by series (a gauge's value as the bits
/// of an `f64`), and the descriptions.
#[derive(Default)]
struct Capture {
    counters: Mutex<HashMap<Series, Arc<Cell>>>,
    gauges: Mutex<HashMap<Series, Arc<Cell>>>,
    described: Mutex<Vec<(String, Option<Unit>)>>,
}

/// One series' value. Relaxed throughout: the tests read after the writes they wait for (the
/// same thread, or a joined one).
#[derive(Default)]
struct Cell(AtomicU64);

impl metrics::CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

impl metrics::GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.update(|v| v + value);
    }
    fn decrement(&self, value: f64) {
        self.update(|v| v - value);
    }
    fn set(&self, value: f64) {
        self.update(|_| value);
    }
}

impl Cell {
    fn update(&self, f: impl Fn(f64) -> f64) {
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some(f(f64::from_bits(bits)).to_bits())
            });
    }
}

fn series(key: &Key) -> Series {
    let mut labels: Vec<(String, String)> = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (key.name().to_owned(), labels)
}

fn wanted(name: &str, labels: &[(&str, &str)]) -> Series {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

impl Recorder for Capture {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.described
            .lock()
            .unwrap()
            .push((key.as_str().to_owned(), unit));
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.described
            .lock()
            .unwrap()
            .push((key.as_str().to_owned(), unit));
    }
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let cell = self
            .counters
            .lock()
            .unwrap()
            .entry(series(key))
            .or_default()
            .clone();
        Counter::from_arc(cell)
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let cell = self
            .gauges
            .lock()
            .unwrap()
            .entry(series(key))
            .or_default()
            .clone();
        Gauge::from_arc(cell)
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

impl Capture {
    /// The counter's value; panics if it was never registered.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let series = wanted(name, labels);
        let counters = self.counters.lock().unwrap();
        let cell = counters
            .get(&series)
            .unwrap_or_else(|| panic!("{series:?} was not registered: {:?}", counters.keys()));
        cell.0.load(Ordering::Relaxed)
    }

    /// The gauge's value; panics if it was never registered.
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let series = wanted(name, labels);
        let gauges = self.gauges.lock().unwrap();
        let cell = gauges
            .get(&series)
            .unwrap_or_else(|| panic!("{series:?} was not registered"));
        f64::from_bits(cell.0.load(Ordering::Relaxed))
    }

    /// `tollgate_decisions_total{limiter, outcome}`.
    fn decisions(&self, limiter: &str, outcome: &str) -> u64 {
        self.counter(
            "tollgate_decisions_total",
            &[("limiter", limiter), ("outcome", outcome)],
        )
    }

    /// `name{limiter}`.
    fn of(&self, name: &str, limiter: &str) -> u64 {
        self.counter(name, &[("limiter", limiter)])
    }

    /// Every series registered.
    fn registered(&self) -> usize {
        self.counters.lock().unwrap().len() + self.gauges.lock().unwrap().len()
    }
}

#[test]
fn describe_names_every_metric_of_the_table_with_a_unit() {
    let rec = Capture::default();
    metrics::with_local_recorder(&rec, tollgate::metrics::describe);
    let described = rec.described.lock().unwrap();
    let names: Vec<&str> = described.iter().map(|(n, _)| n.as_str()).collect();
    for name in [
        tollgate::metrics::DECISIONS,
        tollgate::metrics::KEYED_KEYS,
        tollgate::metrics::KEYED_EVICTIONS,
        tollgate::metrics::KEYED_OVERFLOW,
        tollgate::metrics::KEYED_TOO_MANY_KEYS,
        tollgate::metrics::REDIS_CALLS,
        tollgate::metrics::REDIS_ROUND_TRIPS,
        tollgate::metrics::REDIS_SCRIPT_RELOADS,
        tollgate::metrics::REDIS_TIMEOUTS,
        tollgate::metrics::REDIS_FAILURES,
        tollgate::metrics::REDIS_BREAKER_SKIPS,
        tollgate::metrics::REDIS_BREAKER_OPENS,
        tollgate::metrics::REDIS_OPEN_ADMISSIONS,
        tollgate::metrics::REDIS_LOCAL_DECISIONS,
        tollgate::metrics::REDIS_LEASE_CALLS,
        tollgate::metrics::REDIS_LEASE_GRANTED,
        tollgate::metrics::REDIS_LEASE_RETURNED,
        tollgate::metrics::MIDDLEWARE_DECISIONS,
    ] {
        assert!(names.contains(&name), "{name} not described");
        // Prometheus's conventions: lower case and `_`, counters ending in `_total`.
        assert!(name.starts_with("tollgate_"));
        assert!(name.chars().all(|c| c.is_ascii_lowercase() || c == '_'));
        assert_eq!(name.ends_with("_total"), name != "tollgate_keyed_keys");
    }
    assert_eq!(names.len(), 18);
    assert!(described.iter().all(|(_, unit)| *unit == Some(Unit::Count)));
}

#[test]
fn a_metered_limiter_counts_each_decision_by_outcome() {
    let rec = Capture::default();
    let clock = ManualClock::new();
    let limiter = metrics::with_local_recorder(&rec, || {
        Metered::new(
            "api",
            TokenBucket::with_clock(Quota::per_second(3).unwrap(), clock.clone()),
        )
    });
    assert!(limiter.try_acquire().is_ok());
    assert!(limiter.try_acquire_n(2).is_ok());
    assert!(limiter.try_acquire().is_err());
    assert!(limiter.try_acquire_n(1).is_err());
    assert!(limiter.try_acquire_n(4).is_err()); // over the capacity
    assert!(limiter.try_acquire_n(0).is_ok()); // a query: admitted
                                               // Peeks, `remaining` and the wrapped limiter's own methods are not counted.
    assert!(limiter.peek_n(1).is_err());
    assert_eq!(limiter.remaining(), 0);
    clock.advance(std::time::Duration::from_secs(1));
    assert!(limiter.get_ref().try_acquire().is_ok());
    assert_eq!(rec.decisions("api", "admitted"), 3);
    assert_eq!(rec.decisions("api", "denied"), 2);
    assert_eq!(rec.decisions("api", "insufficient"), 1);
    assert_eq!(rec.registered(), 3);
}

#[test]
fn handles_registered_before_the_recorder_stay_silent_until_registered_again() {
    let early = Metered::new(
        "early",
        TokenBucket::with_clock(Quota::per_second(3).unwrap(), ManualClock::new()),
    );
    let rec = Capture::default();
    metrics::with_local_recorder(&rec, || {
        assert!(early.try_acquire().is_ok());
    });
    assert_eq!(rec.registered(), 0);
    let again = metrics::with_local_recorder(&rec, || Metered::new("early", early.into_inner()));
    assert!(again.try_acquire().is_ok());
    assert_eq!(rec.decisions("early", "admitted"), 1);
}

fn keyed(max_keys: usize) -> KeyedLimiter<u32, tollgate::keyed::TokenBucketKeys, ManualClock> {
    KeyedLimiter::with_clock(Quota::per_second(2).unwrap(), ManualClock::new())
        .with_max_keys(max_keys)
}

#[test]
fn a_named_keyed_limiter_counts_decisions_keys_evictions_and_refusals() {
    let rec = Capture::default();
    let limiter = metrics::with_local_recorder(&rec, || keyed(2).with_name("users"));
    let at = |s: u64| Nanos::new(s * SEC);
    assert!(limiter.check_key_at(&1, at(0)).is_ok());
    assert!(limiter.check_key_n_at(&1, 1, at(0)).is_ok());
    assert!(limiter.check_key_at(&1, at(0)).is_err());
    assert!(limiter.check_key_n_at(&2, 3, at(0)).is_err()); // over the capacity: no key created
    assert!(limiter.check_key_at(&2, at(0)).is_ok());
    assert_eq!(
        rec.gauge("tollgate_keyed_keys", &[("limiter", "users")]),
        2.0
    );
    // Full of active keys: a newcomer is refused, counted as overflow and as too many keys.
    assert!(matches!(
        limiter.check_key_at(&3, at(0)),
        Err(KeyedError::TooManyKeys(_))
    ));
    // Peeks are not counted, not even a newcomer's refusal.
    assert!(limiter.peek_key_n_at(&4, 1, at(0)).is_err());
    assert_eq!(rec.decisions("users", "admitted"), 3);
    assert_eq!(rec.decisions("users", "denied"), 1);
    assert_eq!(rec.decisions("users", "insufficient"), 1);
    assert_eq!(rec.of("tollgate_keyed_overflow_total", "users"), 1);
    assert_eq!(rec.of("tollgate_keyed_too_many_keys_total", "users"), 1);
    assert_eq!(limiter.overflowed(), 1);
    // One second on, both keys are full again: forgotten.
    limiter.clock().set(at(1));
    assert_eq!(limiter.retain_recent_at(at(1)), 2);
    assert_eq!(rec.of("tollgate_keyed_evictions_total", "users"), 2);
    assert_eq!(limiter.evictions(), 2);
    assert_eq!(
        rec.gauge("tollgate_keyed_keys", &[("limiter", "users")]),
        0.0
    );
    assert!(limiter.check_key_at(&3, at(1)).is_ok());
    assert_eq!(
        rec.gauge("tollgate_keyed_keys", &[("limiter", "users")]),
        1.0
    );
}

/// Partial takes and reservations ask for capacity as `check_key_n` does: one decision each,
/// whatever `n` (a query is admitted); a bad `max_wait` decides nothing.
#[test]
fn keyed_partial_takes_and_reservations_are_counted_as_decisions() {
    use std::time::Duration;
    let rec = Capture::default();
    let limiter = metrics::with_local_recorder(&rec, || keyed(8).with_name("parts"));
    let at = Nanos::new(0);
    assert_eq!(limiter.take_up_to_key_at(&1, 5, at).unwrap().taken(), 2);
    assert!(limiter.take_up_to_key_at(&1, 1, at).is_err());
    assert!(limiter.take_up_to_key_at(&1, 0, at).is_ok()); // a query
    let wait = Duration::from_secs(1);
    assert!(limiter.reserve_key_n_at(&2, 2, wait, at).is_ok());
    assert!(limiter.reserve_key_n_at(&2, 2, wait, at).is_ok()); // into debt, ready in 1 s
    assert!(limiter.reserve_key_n_at(&2, 1, wait, at).is_err()); // beyond the wait
    assert!(limiter.reserve_key_n_at(&2, 3, wait, at).is_err()); // over the capacity
    assert!(limiter.reserve_key_n_at(&2, 1, Duration::MAX, at).is_err()); // a bad max_wait
    assert_eq!(rec.decisions("parts", "admitted"), 4);
    assert_eq!(rec.decisions("parts", "denied"), 2);
    assert_eq!(rec.decisions("parts", "insufficient"), 1);
}

#[test]
fn a_keyed_limiter_named_late_starts_its_gauge_at_the_keys_it_holds() {
    let limiter = keyed(10);
    for k in 0..4 {
        limiter.check_key(&k).unwrap();
    }
    let rec = Capture::default();
    let limiter = metrics::with_local_recorder(&rec, || limiter.with_name("late"));
    assert_eq!(
        rec.gauge("tollgate_keyed_keys", &[("limiter", "late")]),
        4.0
    );
    limiter.check_key(&9).unwrap();
    assert_eq!(
        rec.gauge("tollgate_keyed_keys", &[("limiter", "late")]),
        5.0
    );
}

#[test]
fn the_shared_overflow_limiter_answers_under_the_keyed_label() {
    let rec = Capture::default();
    let limiter = metrics::with_local_recorder(&rec, || {
        keyed(1)
            .with_overflow(Overflow::Shared(Quota::per_second(1).unwrap()))
            .unwrap()
            .with_name("shared")
    });
    assert!(limiter.check_key(&1).is_ok());
    assert!(limiter.check_key(&2).is_ok()); // the overflow limiter's one token
    assert!(limiter.check_key(&3).is_err()); // its denial
    assert_eq!(rec.of("tollgate_keyed_overflow_total", "shared"), 2);
    assert_eq!(rec.of("tollgate_keyed_too_many_keys_total", "shared"), 0);
    assert_eq!(rec.decisions("shared", "admitted"), 2);
    assert_eq!(rec.decisions("shared", "denied"), 1);
}

#[test]
fn an_automatic_sweep_counts_its_evictions() {
    let rec = Capture::default();
    let clock = ManualClock::new();
    let limiter = metrics::with_local_recorder(&rec, || {
        KeyedLimiter::<u32, tollgate::keyed::TokenBucketKeys, _>::with_clock(
            Quota::per_second(1).unwrap(),
            clock.clone(),
        )
        .with_name("swept")
    });
    // 256 new keys trigger a sweep; a second on, every earlier key is full again.
    for k in 0..255 {
        limiter.check_key(&k).unwrap();
    }
    clock.advance(std::time::Duration::from_secs(1));
    limiter.check_key(&1000).unwrap();
    assert_eq!(limiter.evictions(), 255);
    assert_eq!(rec.of("tollgate_keyed_evictions_total", "swept"), 255);
    assert_eq!(
        rec.gauge("tollgate_keyed_keys", &[("limiter", "swept")]),
        1.0
    );
}

#[test]
fn an_unnamed_keyed_limiter_registers_nothing() {
    let rec = Capture::default();
    let limiter = metrics::with_local_recorder(&rec, || keyed(1));
    limiter.check_key(&1).unwrap();
    let _ = limiter.check_key(&2);
    limiter.retain_recent();
    assert_eq!(rec.registered(), 0);
}

#[cfg(feature = "tokio")]
#[test]
fn keyed_scheduling_is_counted_as_a_decision() {
    use tollgate::keyed::LeakyMeterKeys;
    let rec = Capture::default();
    let meter = metrics::with_local_recorder(&rec, || {
        KeyedLimiter::<u8, LeakyMeterKeys, _>::with_algorithm(
            Quota::per_second(1).unwrap(),
            ManualClock::new(),
        )
        .unwrap()
        .with_name("meter")
    });
    assert!(meter.schedule_key(&1).is_ok());
    assert!(meter.schedule_key_n(&1, 5).is_err()); // over the queue's capacity
    assert_eq!(rec.decisions("meter", "admitted"), 1);
    assert_eq!(rec.decisions("meter", "insufficient"), 1);
}

#[cfg(feature = "tower")]
mod middleware {
    use super::*;
    use http::{Request, Response, StatusCode};
    use std::convert::Infallible;
    use tollgate::middleware::LimitLayer;
    use tower::{service_fn, Layer, ServiceExt};

    /// Sends `$n` requests through `$layer` around a service answering 200: their statuses.
    macro_rules! send {
        ($layer:expr, $n:expr) => {{
            let svc = $layer.layer(service_fn(|_req: Request<String>| async {
                Ok::<_, Infallible>(Response::new(String::new()))
            }));
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            (0..$n)
                .map(|_| {
                    rt.block_on(svc.clone().oneshot(Request::new(String::new())))
                        .unwrap()
                        .status()
                })
                .collect::<Vec<StatusCode>>()
        }};
    }

    fn bucket(n: u64) -> TokenBucket<ManualClock> {
        TokenBucket::with_clock(Quota::per_minute(n).unwrap(), ManualClock::new())
    }

    fn decisions(rec: &Capture, policy: &str, outcome: &str) -> u64 {
        rec.counter(
            "tollgate_middleware_decisions_total",
            &[("policy", policy), ("outcome", outcome)],
        )
    }

    #[test]
    fn the_layer_counts_admissions_and_denials_per_policy() {
        let rec = Capture::default();
        let layer = metrics::with_local_recorder(&rec, || {
            LimitLayer::global(bucket(2))
                .policy_name("api")
                .build()
                .unwrap()
        });
        let statuses = send!(layer, 3);
        assert_eq!(statuses[2], StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(decisions(&rec, "api", "admitted"), 2);
        assert_eq!(decisions(&rec, "api", "denied"), 1);
        assert_eq!(decisions(&rec, "api", "would_deny"), 0);
        assert_eq!(decisions(&rec, "api", "unavailable"), 0);
    }

    #[test]
    fn a_dry_run_counts_what_it_would_have_refused() {
        let rec = Capture::default();
        let layer = metrics::with_local_recorder(&rec, || {
            LimitLayer::global(bucket(1))
                .policy_name("trial")
                .dry_run()
                .build()
                .unwrap()
        });
        let statuses = send!(layer, 3);
        assert!(statuses.iter().all(|s| *s == StatusCode::OK));
        assert_eq!(decisions(&rec, "trial", "admitted"), 1);
        assert_eq!(decisions(&rec, "trial", "would_deny"), 2);
        assert_eq!(decisions(&rec, "trial", "denied"), 0);
        assert_eq!(layer.would_deny(), 2);
    }
}

#[cfg(feature = "redis")]
mod redis_backend {
    use super::*;
    use std::time::Duration;
    use tollgate::keyed::TokenBucketKeys;
    use tollgate::redis::{FailurePolicy, LeasedBucket, RedisLimiter, Stats};

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A connection to an address nothing listens on: every call fails (refused, or timed out
    /// while the manager retries).
    fn dead() -> redis::aio::ConnectionManager {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .unwrap()
            .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
            .unwrap()
    }

    /// Every `tollgate_redis_*` counter of `label` against the limiter's own statistics.
    fn same_as_stats(rec: &Capture, label: &str, s: Stats) {
        let of = |name| rec.of(name, label);
        assert_eq!(of("tollgate_redis_calls_total"), s.decisions, "{s:?}");
        assert_eq!(
            of("tollgate_redis_round_trips_total"),
            s.round_trips,
            "{s:?}"
        );
        assert_eq!(
            of("tollgate_redis_script_reloads_total"),
            s.reloads,
            "{s:?}"
        );
        assert_eq!(of("tollgate_redis_timeouts_total"), s.timeouts, "{s:?}");
        assert_eq!(of("tollgate_redis_failures_total"), s.failures, "{s:?}");
        assert_eq!(
            of("tollgate_redis_breaker_skips_total"),
            s.breaker_skips,
            "{s:?}"
        );
        assert_eq!(
            of("tollgate_redis_breaker_opens_total"),
            s.breaker_opened,
            "{s:?}"
        );
        assert_eq!(
            of("tollgate_redis_open_admissions_total"),
            s.open_admissions,
            "{s:?}"
        );
        assert_eq!(
            of("tollgate_redis_local_decisions_total"),
            s.local_decisions,
            "{s:?}"
        );
    }

    #[test]
    fn a_dead_server_moves_failures_the_breaker_and_the_open_policy() {
        let rt = runtime();
        let rec = Capture::default();
        rt.block_on(async {
            let limiter = metrics::with_local_recorder(&rec, || {
                RedisLimiter::<TokenBucketKeys>::builder(dead(), Quota::per_second(5).unwrap())
                    .name("dead")
                    .timeout(Duration::from_millis(30))
                    .breaker(2, Duration::from_secs(60))
                    .build(FailurePolicy::Open)
                    .unwrap()
            });
            for _ in 0..5 {
                assert!(limiter.check_key("k").await.is_ok());
            }
            let _ = limiter.peek_key_n("k", 1).await;
            let s = limiter.stats();
            assert_eq!(
                (
                    s.decisions,
                    s.failures,
                    s.breaker_opened,
                    s.breaker_skips,
                    s.open_admissions
                ),
                (6, 2, 1, 4, 6)
            );
            same_as_stats(&rec, "dead", s);
            // The peek is a call and an open admission, not a decision.
            assert_eq!(rec.decisions("dead", "admitted"), 5);
        });
    }

    #[test]
    fn the_local_policy_and_the_closed_one_are_counted_by_outcome() {
        let rt = runtime();
        let rec = Capture::default();
        rt.block_on(async {
            let (local, closed) = metrics::with_local_recorder(&rec, || {
                let local = FailurePolicy::Local(KeyedLimiter::new(Quota::per_minute(1).unwrap()));
                let build = |prefix: &str, policy| {
                    RedisLimiter::<TokenBucketKeys>::builder(dead(), Quota::per_second(5).unwrap())
                        .prefix(prefix)
                        .timeout(Duration::from_millis(30))
                        .build(policy)
                        .unwrap()
                };
                (
                    build("local", local),
                    build("closed", FailurePolicy::Closed),
                )
            });
            assert!(local.check_key("k").await.is_ok());
            assert!(local.check_key("k").await.is_err());
            assert!(local.check_key_n("k", 6).await.is_err()); // over the capacity: no call
            assert!(closed.check_key("k").await.is_err());
            // Unnamed: labelled with the prefix.
            same_as_stats(&rec, "local", local.stats());
            same_as_stats(&rec, "closed", closed.stats());
            assert_eq!(local.stats().local_decisions, 2);
            assert_eq!(rec.decisions("local", "admitted"), 1);
            assert_eq!(rec.decisions("local", "denied"), 1);
            assert_eq!(rec.decisions("local", "insufficient"), 1);
            assert_eq!(rec.decisions("closed", "unavailable"), 1);
        });
    }

    /// Several limits and a reservation count one decision per call, as one limit does, and move
    /// the Redis counters of their label.
    #[test]
    fn several_limits_and_reservations_count_one_decision_per_call() {
        use tollgate::redis::{AllOfFailurePolicy, RedisAllOf};
        let rt = runtime();
        let rec = Capture::default();
        rt.block_on(async {
            let (all, single) = metrics::with_local_recorder(&rec, || {
                let local = AllOfFailurePolicy::Local(
                    tollgate::AllOf::new([
                        KeyedLimiter::new(Quota::per_second(5).unwrap()),
                        KeyedLimiter::new(Quota::per_minute(2).unwrap()),
                    ])
                    .unwrap(),
                );
                let all = RedisAllOf::builder(
                    dead(),
                    [Quota::per_second(5).unwrap(), Quota::per_minute(3).unwrap()],
                )
                .name("all")
                .timeout(Duration::from_millis(30))
                .build(local)
                .unwrap();
                let single =
                    RedisLimiter::<TokenBucketKeys>::builder(dead(), Quota::per_second(5).unwrap())
                        .name("reserving")
                        .timeout(Duration::from_millis(30))
                        .build(FailurePolicy::Local(KeyedLimiter::new(
                            Quota::per_second(2).unwrap(),
                        )))
                        .unwrap();
                (all, single)
            });
            assert!(all.check_key_n("k", 2).await.is_ok());
            assert!(all.check_key("k").await.is_err()); // the local 2 a minute binds
            assert!(all.check_key_n("k", 4).await.is_err()); // over a capacity: no call
            let _ = all.peek_key_n("k", 1).await; // a peek is no decision
            same_as_stats(&rec, "all", all.stats());
            assert_eq!(all.stats().decisions, 3);
            assert_eq!(rec.decisions("all", "admitted"), 1);
            assert_eq!(rec.decisions("all", "denied"), 1);
            assert_eq!(rec.decisions("all", "insufficient"), 1);
            let r = single
                .reserve_key_n("k", 2, Duration::from_secs(1))
                .await
                .unwrap();
            assert!(single.reserve_key_n("k", 2, Duration::ZERO).await.is_err());
            assert!(single.reserve_key_n("k", 1, Duration::MAX).await.is_err()); // a bad max_wait decides nothing
            same_as_stats(&rec, "reserving", single.stats());
            assert_eq!(rec.decisions("reserving", "admitted"), 1);
            assert_eq!(rec.decisions("reserving", "denied"), 1);
            drop(r);
        });
    }

    #[test]
    fn a_hung_server_moves_the_timeouts() {
        let rt = runtime();
        let rec = Capture::default();
        rt.block_on(async {
            // Accepts connections and never answers.
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let held = tokio::spawn(async move {
                let mut held = Vec::new();
                while let Ok((socket, _)) = listener.accept().await {
                    held.push(socket);
                }
            });
            let conn = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())
                .unwrap();
            let limiter = metrics::with_local_recorder(&rec, || {
                RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(5).unwrap())
                    .name("hung")
                    .timeout(Duration::from_millis(20))
                    .build(FailurePolicy::Closed)
                    .unwrap()
            });
            for _ in 0..3 {
                assert!(limiter.check_key("k").await.is_err());
            }
            let s = limiter.stats();
            assert_eq!((s.timeouts, s.failures), (3, 3), "{s:?}");
            same_as_stats(&rec, "hung", s);
            held.abort();
        });
    }

    /// Only with a server (`TOLLGATE_REDIS_URL`, from `scripts/redis.sh`).
    fn url() -> Option<String> {
        testkit::env::redis_url()
    }

    fn fresh(test: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        format!("t-metrics-{test}-{}-{nanos}", std::process::id())
    }

    #[test]
    fn a_server_moves_round_trips_reloads_and_decisions() {
        let Some(url) = url() else { return };
        let rt = runtime();
        let rec = Capture::default();
        rt.block_on(async {
            let mut admin = testkit::env::redis_manager(&url).await;
            let limiter = metrics::with_local_recorder(&rec, || {
                RedisLimiter::<TokenBucketKeys>::builder(
                    admin.clone(),
                    Quota::per_minute(2).unwrap(),
                )
                .prefix(fresh("decisions"))
                .name("shared")
                .build(FailurePolicy::Closed)
                .unwrap()
            });
            assert!(limiter.check_key("k").await.is_ok());
            assert!(limiter.check_key("k").await.is_ok());
            assert!(limiter.check_key("k").await.is_err());
            assert!(limiter.peek_key_n("k", 1).await.is_err()); // a call, not a decision
            let _: () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut admin)
                .await
                .unwrap();
            assert!(limiter.check_key("k2").await.is_ok());
            let s = limiter.stats();
            assert!(
                s.reloads >= 1 && s.round_trips >= 5 + 2 * s.reloads,
                "{s:?}"
            );
            same_as_stats(&rec, "shared", s);
            assert_eq!(rec.decisions("shared", "admitted"), 3);
            assert_eq!(rec.decisions("shared", "denied"), 1);
        });
    }

    #[test]
    fn a_leased_bucket_counts_its_leases_grants_and_give_backs() {
        let Some(url) = url() else { return };
        let rt = runtime();
        let rec = Capture::default();
        rt.block_on(async {
            let conn = testkit::env::redis_manager(&url).await;
            let bucket = metrics::with_local_recorder(&rec, || {
                let limiter =
                    RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(100).unwrap())
                        .prefix(fresh("lease"))
                        .name("leased")
                        .build(FailurePolicy::Closed)
                        .unwrap();
                LeasedBucket::builder(Arc::new(limiter), "k")
                    .batch(10)
                    .build()
                    .unwrap()
            });
            for _ in 0..3 {
                assert!(bucket.acquire().await.is_ok());
            }
            let stats = bucket.stats();
            let back = bucket.close().await.unwrap();
            assert!(back > 0);
            let of = |name| rec.of(name, "leased");
            assert_eq!(of("tollgate_redis_lease_calls_total"), stats.leases + 1);
            assert_eq!(
                of("tollgate_redis_lease_granted_tokens_total"),
                stats.leased
            );
            assert_eq!(
                of("tollgate_redis_lease_returned_tokens_total"),
                stats.returned + back
            );
            assert!(stats.leased >= 3);
        });
    }
}
