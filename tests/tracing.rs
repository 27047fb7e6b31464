//! The `tracing` feature: the events an operator needs fire (a keyed limiter's overflow and
//! sweeps, a Redis breaker opening and closing, a failure policy taking over and Redis's return, a
//! `NOSCRIPT` reload, a layer's set-up error), each at its documented level, and a plain decision
//! emits none. Read through a subscriber of the test's own, installed for the thread with
//! `tracing::subscriber::with_default`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use tollgate::keyed::{KeyedLimiter, TokenBucketKeys};
use tollgate::{ManualClock, Quota};

/// One event: its level, target, message and other fields (`name=value`).
#[derive(Debug, Clone)]
struct Seen {
    level: Level,
    target: String,
    message: String,
    fields: Vec<(String, String)>,
}

impl Seen {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Records every event, at every level.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Seen>>>);

struct Fields<'a>(&'a mut Seen);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let value = format!("{value:?}");
        if field.name() == "message" {
            self.0.message = value;
        } else {
            self.0.fields.push((field.name().to_owned(), value));
        }
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.message = value.to_owned();
        } else {
            self.0
                .fields
                .push((field.name().to_owned(), value.to_owned()));
        }
    }
}

impl Subscriber for Events {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        // Relaxed: a unique id is all that is needed.
        Id::from_u64(NEXT.fetch_add(1, Ordering::Relaxed))
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut seen = Seen {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message: String::new(),
            fields: Vec::new(),
        };
        event.record(&mut Fields(&mut seen));
        self.0.lock().unwrap().push(seen);
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

impl Events {
    /// Runs `f` with this subscriber installed for the thread; answers what it emitted.
    fn during<T>(&self, f: impl FnOnce() -> T) -> T {
        tracing::subscriber::with_default(self.clone(), f)
    }

    fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    /// The events whose message contains `text`.
    fn with(&self, text: &str) -> Vec<Seen> {
        self.all()
            .into_iter()
            .filter(|e| e.message.contains(text))
            .collect()
    }
}

fn keyed(max_keys: usize) -> KeyedLimiter<u32, TokenBucketKeys, ManualClock> {
    KeyedLimiter::with_clock(Quota::per_second(2).unwrap(), ManualClock::new())
        .with_max_keys(max_keys)
}

#[test]
fn a_plain_decision_emits_no_event_at_any_level() {
    let events = Events::default();
    events.during(|| {
        let limiter = keyed(10).with_name("quiet");
        for _ in 0..5 {
            let _ = limiter.check_key(&1);
        }
        let _ = limiter.check_key_n(&1, 100);
        let _ = limiter.peek_key_n(&2, 1);
        let bucket = tollgate::TokenBucket::new(Quota::per_second(2).unwrap());
        for _ in 0..5 {
            let _ = bucket.try_acquire();
        }
    });
    assert!(events.all().is_empty(), "{:?}", events.all());
}

#[test]
fn overflow_warns_on_the_first_newcomer_and_then_once_per_doubling() {
    let events = Events::default();
    events.during(|| {
        let limiter = keyed(1).with_name("tight");
        limiter.check_key(&0).unwrap();
        for k in 1..=9 {
            assert!(limiter.check_key(&k).is_err());
        }
        assert_eq!(limiter.overflowed(), 9);
    });
    let warned = events.with("overflow policy");
    let nth: Vec<&str> = warned
        .iter()
        .map(|e| e.field("overflowed").unwrap())
        .collect();
    assert_eq!(nth, ["1", "2", "4", "8"]);
    for e in &warned {
        assert_eq!(e.level, Level::WARN);
        assert_eq!(e.field("limiter"), Some("tight"));
        assert_eq!(e.field("policy"), Some("refuse"));
        assert_eq!(e.field("max_keys"), Some("1"));
        assert!(e.target.starts_with("tollgate::keyed"), "{}", e.target);
    }
}

#[test]
fn a_sweep_reports_what_it_removed_at_debug() {
    let events = Events::default();
    let clock = ManualClock::new();
    events.during(|| {
        let limiter = KeyedLimiter::<u32, TokenBucketKeys, _>::with_clock(
            Quota::per_second(1).unwrap(),
            clock.clone(),
        );
        for k in 0..3 {
            limiter.check_key(&k).unwrap();
        }
        clock.advance(std::time::Duration::from_secs(1));
        assert_eq!(limiter.retain_recent(), 3);
    });
    let swept = events.with("swept");
    assert_eq!(swept.len(), 1, "{:?}", events.all());
    let e = &swept[0];
    assert_eq!(e.level, Level::DEBUG);
    assert_eq!(e.field("removed"), Some("3"));
    assert_eq!(e.field("keys"), Some("0"));
    assert_eq!(e.field("limiter"), Some("")); // unnamed
    assert!(e.field("micros").is_some());
}

#[cfg(feature = "tower")]
#[test]
fn a_missing_peer_address_warns_once_per_layer() {
    use http::{Request, Response, StatusCode};
    use std::convert::Infallible;
    use tollgate::middleware::{peer_ip, LimitLayer};
    use tower::{service_fn, Layer, ServiceExt};

    let events = Events::default();
    events.during(|| {
        let layer = LimitLayer::keyed(KeyedLimiter::new(Quota::per_second(5).unwrap()), peer_ip())
            .policy_name("per-ip")
            .build()
            .unwrap();
        let svc = layer.layer(service_fn(|_req: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for _ in 0..3 {
            let res = rt
                .block_on(svc.clone().oneshot(Request::new(String::new())))
                .unwrap();
            assert_eq!(res.status(), StatusCode::INTERNAL_SERVER_ERROR);
        }
    });
    let warned = events.with("peer's address");
    assert_eq!(warned.len(), 1, "{:?}", events.all());
    assert_eq!(warned[0].level, Level::WARN);
}

#[cfg(feature = "redis")]
mod redis_backend {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use redis::aio::{ConnectionLike, ConnectionManager};
    use redis::{Cmd, Pipeline, RedisFuture, Value};
    use testkit::env::redis_manager;
    use tollgate::redis::{FailurePolicy, RedisLimiter};

    /// A connection that fails every command while `down` is set, else passes it to the server.
    #[derive(Clone)]
    struct Switch {
        inner: ConnectionManager,
        down: Arc<AtomicBool>,
    }

    fn refused() -> redis::RedisError {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "switched off").into()
    }

    impl ConnectionLike for Switch {
        fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
            // Relaxed: the test sets it between calls, from the same thread.
            if self.down.load(Ordering::Relaxed) {
                Box::pin(async { Err(refused()) })
            } else {
                self.inner.req_packed_command(cmd)
            }
        }
        fn req_packed_commands<'a>(
            &'a mut self,
            cmd: &'a Pipeline,
            offset: usize,
            count: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            // Relaxed: as above.
            if self.down.load(Ordering::Relaxed) {
                Box::pin(async { Err(refused()) })
            } else {
                self.inner.req_packed_commands(cmd, offset, count)
            }
        }
        fn get_db(&self) -> i64 {
            self.inner.get_db()
        }
    }

    fn url() -> Option<String> {
        testkit::env::redis_url()
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn an_outage_logs_the_breaker_and_the_failure_policy_once_each_way() {
        let Some(url) = url() else { return };
        let rt = runtime();
        let events = Events::default();
        events.during(|| {
            rt.block_on(async {
                let mut admin = redis_manager(&url).await;
                let down = Arc::new(AtomicBool::new(false));
                let conn = Switch {
                    inner: admin.clone(),
                    down: Arc::clone(&down),
                };
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos();
                let limiter =
                    RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(100).unwrap())
                        .prefix(format!("t-tracing-{}-{nanos}", std::process::id()))
                        .name("edge")
                        .breaker(2, Duration::from_millis(30))
                        .build(FailurePolicy::Open)
                        .unwrap();
                // The script is flushed: the first call reloads it.
                let _: () = redis::cmd("SCRIPT")
                    .arg("FLUSH")
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                assert!(limiter.check_key("k").await.is_ok());
                assert!(limiter.check_key("k").await.is_ok());
                // Down: two failures open the breaker; every call is admitted by the policy.
                down.store(true, Ordering::Relaxed);
                for _ in 0..6 {
                    assert!(limiter.check_key("k").await.is_ok());
                }
                // Back: after the cool-down one probe closes the breaker.
                down.store(false, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(40)).await;
                for _ in 0..3 {
                    assert!(limiter.check_key("k").await.is_ok());
                }
                let s = limiter.stats();
                assert_eq!((s.breaker_opened, s.open_admissions), (1, 6), "{s:?}");
                assert!(s.reloads >= 1, "{s:?}");
            })
        });
        let one = |text: &str, level: Level| {
            let found = events.with(text);
            assert_eq!(found.len(), 1, "{text}: {:?}", events.all());
            assert_eq!(found[0].level, level, "{text}");
            assert_eq!(found[0].field("limiter"), Some("edge"), "{text}");
            assert!(
                found[0].target.starts_with("tollgate::redis"),
                "{}",
                found[0].target
            );
            found[0].clone()
        };
        assert!(!events.with("NOSCRIPT").is_empty());
        assert!(events
            .with("NOSCRIPT")
            .iter()
            .all(|e| e.level == Level::INFO));
        let opened = one("breaker opened", Level::WARN);
        assert!(opened.field("error").unwrap().contains("switched off"));
        one("breaker closed", Level::INFO);
        let policy = one("failure policy answers", Level::WARN);
        assert_eq!(policy.field("policy"), Some("Open"));
        one("deciding again", Level::INFO);
        // Nothing else: no event per request.
        let ours = events
            .all()
            .into_iter()
            .filter(|e| e.target.starts_with("tollgate"))
            .count();
        assert_eq!(
            ours,
            4 + events.with("NOSCRIPT").len(),
            "{:?}",
            events.all()
        );
    }

    #[test]
    fn a_partial_take_answered_locally_logs_the_failure_policy_once() {
        let Some(url) = url() else { return };
        let rt = runtime();
        let events = Events::default();
        events.during(|| {
            rt.block_on(async {
                let conn = Switch {
                    inner: redis_manager(&url).await,
                    down: Arc::new(AtomicBool::new(true)),
                };
                let local = KeyedLimiter::new(Quota::per_hour(3).unwrap());
                let limiter =
                    RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(100).unwrap())
                        .prefix(format!("t-tracing-partial-{}", std::process::id()))
                        .name("partial")
                        .build(FailurePolicy::Local(local))
                        .unwrap();
                // The local limit decides: 2 of its 3, then the last 1 of the 2 asked for.
                assert_eq!(limiter.take_up_to_key("k", 2).await.unwrap().taken(), 2);
                assert_eq!(limiter.take_up_to_key("k", 2).await.unwrap().taken(), 1);
                assert_eq!(limiter.stats().local_decisions, 2);
            })
        });
        let policy = events.with("failure policy answers");
        assert_eq!(policy.len(), 1, "{:?}", events.all());
        assert_eq!(policy[0].field("limiter"), Some("partial"));
    }
}
