//! The fields the layer sends, checked against the outcomes of the limiter behind it, for every
//! algorithm, keyed and direct: a property test over random costs and clock steps.
//!
//! Each case runs the same requests through the layer and through a twin limiter (same
//! algorithm, same quota, a clock moved in step) called directly, and checks that every response
//! says what the twin's outcome says: the status, `r` = `remaining()`, `t` = `next_after()`
//! rounded up to whole seconds (absent exactly when it is `None`), `Retry-After` = the wait
//! rounded up, at least 1 and not before `t`, and the policy's `q` and `w`.

use std::convert::Infallible;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use proptest::prelude::*;
use tollgate::keyed::{
    FixedWindowKeys, KeyedError, KeyedLimiter, LeakyMeterKeys, SlidingWindowCounterKeys,
    SlidingWindowLogKeys, TokenBucketKeys,
};
use tollgate::middleware::{global, Backend, Decision, Global, Keyed, LimitLayer, Refusal};
use tollgate::Clock;
use tollgate::{Admitted, Algorithm, Direct, ManualClock, Quota};
use tower::{service_fn, Layer, Service};

/// Polls a future that is ready at once to completion.
fn now<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("an in-process decision waited"),
    }
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// What the response must say, from the twin's outcome.
#[derive(Debug, PartialEq, Eq)]
struct Expected {
    status: StatusCode,
    ratelimit: Option<String>,
    retry_after: Option<String>,
}

fn expect(outcome: Result<Admitted, KeyedError>) -> Expected {
    let field = |r: u64, next: Option<Duration>| match next.map(ceil_secs) {
        Some(t) => format!("\"default\";r={r};t={t}"),
        None => format!("\"default\";r={r}"),
    };
    match outcome {
        Ok(a) => Expected {
            status: StatusCode::OK,
            ratelimit: Some(field(a.remaining(), a.next_after())),
            retry_after: None,
        },
        Err(KeyedError::Denied(d)) => {
            let t = d.next_after().map(ceil_secs);
            let retry = ceil_secs(d.retry_after()).max(1).max(t.unwrap_or(0));
            Expected {
                status: StatusCode::TOO_MANY_REQUESTS,
                ratelimit: Some(field(d.remaining(), d.next_after())),
                retry_after: Some(retry.to_string()),
            }
        }
        Err(KeyedError::InsufficientCapacity(_)) => Expected {
            status: StatusCode::TOO_MANY_REQUESTS,
            ratelimit: None,
            retry_after: None,
        },
        Err(other) => panic!("unexpected {other:?}"),
    }
}

fn observed(res: &Response<()>) -> Expected {
    let one = |name: &str| {
        let mut all = res.headers().get_all(name).iter();
        let first = all.next().map(|v| v.to_str().unwrap().to_string());
        assert!(all.next().is_none());
        first
    };
    Expected {
        status: res.status(),
        ratelimit: one("ratelimit"),
        retry_after: one("retry-after"),
    }
}

/// The policy member the layer must send for `quota`.
fn policy_of(quota: &Quota) -> String {
    let period = quota.period().as_nanos();
    let w = period.div_ceil(1_000_000_000).max(1);
    let q = u128::from(quota.count()) * w * 1_000_000_000 / period;
    let mut out = format!("\"default\";q={q};w={w}");
    if quota.capacity() != quota.count() {
        out.push_str(&format!(";tollgate-burst={}", quota.capacity()));
    }
    out
}

/// One step: a request costing `cost`, after the clock moved `advance_ms`.
#[derive(Debug, Clone)]
struct Step {
    advance_ms: u64,
    cost: u64,
}

fn steps(capacity: u64) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..50, 0u64..3_000],
            prop_oneof![4 => 1u64..=capacity, 1 => Just(0u64), 1 => Just(capacity + 1)],
        )
            .prop_map(|(advance_ms, cost)| Step { advance_ms, cost }),
        1..40,
    )
}

fn quotas() -> impl Strategy<Value = Quota> {
    (
        1u64..6,
        prop_oneof![Just(1_000u64), Just(1_500), Just(60_000), 100u64..5_000],
    )
        .prop_map(|(count, period_ms)| {
            Quota::per_period(count, Duration::from_millis(period_ms)).unwrap()
        })
}

/// Runs `steps` through a keyed layer over algorithm `A` and through its twin.
fn keyed_case<A: Algorithm>(quota: Quota, steps: &[Step]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let (Ok(limiter), Ok(twin)) = (
        KeyedLimiter::<u8, A, _>::with_algorithm(quota, clock.clone()),
        KeyedLimiter::<u8, A, _>::with_algorithm(quota, clock.clone()),
    ) else {
        return Ok(()); // a quota this algorithm cannot enforce
    };
    let layer = LimitLayer::new(Keyed::new(limiter), global_key())
        .cost(cost_header)
        .build()
        .unwrap();
    run(&layer, &clock, steps, &quota, |cost| {
        twin.check_key_n(&0, cost)
    })
}

/// Runs `steps` through a direct layer over algorithm `A` and through its twin.
fn direct_case<A: Algorithm>(quota: Quota, steps: &[Step]) -> Result<(), TestCaseError> {
    let clock = ManualClock::new();
    let (Ok(limiter), Ok(twin)) = (
        Direct::<A, _>::with_algorithm(quota, clock.clone()),
        Direct::<A, _>::with_algorithm(quota, clock.clone()),
    ) else {
        return Ok(());
    };
    let layer = LimitLayer::new(Global::new(limiter), global())
        .cost(cost_header)
        .build()
        .unwrap();
    run(&layer, &clock, steps, &quota, |cost| {
        twin.try_acquire_n(cost).map_err(KeyedError::from)
    })
}

/// A key extractor giving every request key 0, for the keyed limiters.
fn global_key() -> tollgate::middleware::key::FnKey<fn(&http::request::Parts) -> Option<u8>> {
    tollgate::middleware::key::from_fn(|_| Some(0))
}

/// The trivial handler behind the layer.
type Handler = fn(Request<()>) -> std::future::Ready<Result<Response<()>, Infallible>>;

fn cost_header(head: &http::request::Parts) -> u64 {
    head.headers["x-cost"].to_str().unwrap().parse().unwrap()
}

fn run<L>(
    layer: &L,
    clock: &ManualClock,
    steps: &[Step],
    quota: &Quota,
    twin: impl Fn(u64) -> Result<Admitted, KeyedError>,
) -> Result<(), TestCaseError>
where
    L: Layer<tower::util::ServiceFn<Handler>>,
    L::Service: Service<Request<()>, Response = Response<()>, Error = Infallible>,
{
    let handler: Handler = |_| std::future::ready(Ok(Response::new(())));
    let mut svc = layer.layer(service_fn(handler));
    let policy = policy_of(quota);
    for step in steps {
        clock.advance(Duration::from_millis(step.advance_ms));
        let req = Request::builder()
            .header("x-cost", step.cost)
            .body(())
            .unwrap();
        let res = now(svc.call(req)).unwrap();
        let want = expect(twin(step.cost));
        prop_assert_eq!(observed(&res), want, "{:?}", step);
        prop_assert_eq!(
            res.headers()
                .get("ratelimit-policy")
                .map(|v| v.to_str().unwrap().to_string()),
            Some(policy.clone())
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn token_bucket_fields(quota in quotas(), steps in steps(6)) {
        keyed_case::<TokenBucketKeys>(quota, &steps)?;
        direct_case::<TokenBucketKeys>(quota, &steps)?;
    }

    #[test]
    fn fixed_window_fields(quota in quotas(), steps in steps(6)) {
        keyed_case::<FixedWindowKeys>(quota, &steps)?;
        direct_case::<FixedWindowKeys>(quota, &steps)?;
    }

    #[test]
    fn sliding_counter_fields(quota in quotas(), steps in steps(6)) {
        keyed_case::<SlidingWindowCounterKeys>(quota, &steps)?;
        direct_case::<SlidingWindowCounterKeys>(quota, &steps)?;
    }

    #[test]
    fn sliding_log_fields(quota in quotas(), steps in steps(6)) {
        keyed_case::<SlidingWindowLogKeys>(quota, &steps)?;
        direct_case::<SlidingWindowLogKeys>(quota, &steps)?;
    }

    #[test]
    fn leaky_meter_fields(quota in quotas(), steps in steps(6)) {
        keyed_case::<LeakyMeterKeys>(quota, &steps)?;
        direct_case::<LeakyMeterKeys>(quota, &steps)?;
    }

    #[test]
    fn bursts_are_advertised(count in 1u64..10, burst in 1u64..20) {
        let quota = Quota::per_minute(count).unwrap().with_capacity(burst).unwrap();
        let steps = [Step { advance_ms: 0, cost: 1 }];
        keyed_case::<TokenBucketKeys>(quota, &steps)?;
    }
}

/// A backend of several limits whose decisions come back through a future, the index of the
/// limit beside the answer (as `RedisAll`'s do, over the network): `B`'s indexed decision,
/// deferred. Its `decide_indexed` answers a stale guess (limit 0) that the future's index must
/// override.
struct Deferred<B>(B);

impl<K, B: Backend<K>> Backend<K> for Deferred<B> {
    type Future = std::future::Ready<(Option<usize>, Result<Admitted, Refusal>)>;

    fn decide(&self, key: &K, cost: u64) -> Decision<Self::Future> {
        match self.0.decide_indexed(key, cost) {
            (index, Decision::Ready(answer)) => {
                Decision::Pending(std::future::ready((index, answer)))
            }
            _ => panic!("an in-process backend answers at once"),
        }
    }

    fn decide_indexed(&self, key: &K, cost: u64) -> (Option<usize>, Decision<Self::Future>) {
        (Some(0), self.decide(key, cost))
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }

    fn tiers(&self) -> Vec<Quota> {
        self.0.tiers()
    }

    fn all_apply(&self) -> bool {
        self.0.all_apply()
    }
}

/// Several limits behind the layer ([`KeyedAllOf`], [`GlobalAllOf`], and the first deferred to a
/// future that answers the index with the decision): `RateLimit-Policy` lists every policy,
/// `RateLimit` names the one the decision was from (the binding one of an admission, the refusing
/// one with the longest wait of a denial), and `Retry-After` is that longest wait. Checked against
/// the `AllOf`'s own indexed answers on a twin, step by step.
#[test]
fn several_limits_list_every_policy_and_name_the_binding_one() {
    use tollgate::middleware::{GlobalAllOf, KeyedAllOf};
    use tollgate::{AllOf, TokenBucket};
    let quotas = [
        Quota::per_second(2).unwrap(),
        Quota::per_minute(30).unwrap().with_capacity(5).unwrap(),
    ];
    let names = ["burst", "minute"];
    let listed = format!(
        "{}, {}",
        policy_of(&quotas[0]).replace("\"default\"", "\"burst\""),
        policy_of(&quotas[1]).replace("\"default\"", "\"minute\"")
    );
    let clock = ManualClock::new();
    let keyed = |_: ()| -> AllOf<KeyedLimiter<u8, TokenBucketKeys, ManualClock>> {
        AllOf::new(quotas.map(|q| KeyedLimiter::with_clock(q, clock.clone()))).unwrap()
    };
    let direct = |_: ()| -> AllOf<TokenBucket<ManualClock>> {
        AllOf::new(quotas.map(|q| TokenBucket::with_clock(q, clock.clone()))).unwrap()
    };
    let keyed_layer = LimitLayer::new(KeyedAllOf::new(keyed(())), global_key())
        .tier_names(names)
        .build()
        .unwrap();
    let direct_layer = LimitLayer::new(GlobalAllOf::new(direct(())), global())
        .tier_names(names)
        .build()
        .unwrap();
    let deferred_layer = LimitLayer::new(Deferred(KeyedAllOf::new(keyed(()))), global_key())
        .tier_names(names)
        .build()
        .unwrap();
    let keyed_twin = keyed(());
    let direct_twin = direct(());
    let handler: Handler = |_| std::future::ready(Ok(Response::new(())));
    let mut keyed_svc = keyed_layer.layer(service_fn(handler));
    let mut direct_svc = direct_layer.layer(service_fn(handler));
    let mut deferred_svc = deferred_layer.layer(service_fn(handler));
    // Requests costing 1 every 100 ms, then a pause: both limits get to bind and to refuse.
    let steps = [
        0, 100, 100, 100, 100, 100, 100, 100, 2_000, 100, 100, 100, 100, 100, 100,
    ];
    let mut named = std::collections::BTreeSet::new();
    for (i, &advance) in steps.iter().enumerate() {
        clock.advance(Duration::from_millis(advance));
        let at = clock.now();
        let (at_keyed, want_keyed) = keyed_twin.check_key_n_at_indexed(&0, 1, at);
        let (at_direct, want_direct) = direct_twin.try_acquire_n_at_indexed(1, at);
        assert_eq!(at_keyed, at_direct, "step {i}");
        assert_eq!(
            want_keyed.map_err(|e| *e.denied().unwrap()),
            want_direct.map_err(|e| *e.denied().unwrap()),
            "step {i}"
        );
        named.insert((names[at_keyed], want_keyed.is_ok()));
        let responses = [
            now(keyed_svc.call(Request::builder().body(()).unwrap())).unwrap(),
            now(direct_svc.call(Request::builder().body(()).unwrap())).unwrap(),
            now(deferred_svc.call(Request::builder().body(()).unwrap())).unwrap(),
        ];
        let mut want = expect(want_keyed);
        want.ratelimit = want
            .ratelimit
            .map(|r| r.replacen("\"default\"", &format!("\"{}\"", names[at_keyed]), 1));
        for res in &responses {
            assert_eq!(observed(res), want, "step {i}");
            assert_eq!(
                res.headers()["ratelimit-policy"].to_str().unwrap(),
                listed,
                "step {i}"
            );
        }
    }
    // Each limit bound an admission and refused a request at some step.
    assert_eq!(named.len(), 4, "{named:?}");
}

/// A tiered layer names each response's tier from the lookup that decides: a held key keeps the
/// tier it was created in (its state's), whatever the pick would answer now, on every path (new
/// key, held key admitted, held key refused), and a user's `KeyedLimit` without the one-lookup
/// method (the trait's default, decision then `tier_of_key`) names the same.
#[test]
fn a_tiered_layer_names_the_tier_of_the_state_that_decided() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tollgate::keyed::Tiered;
    use tollgate::KeyedLimit;

    let tiers = [Quota::per_minute(2).unwrap(), Quota::per_minute(3).unwrap()];
    let pro = Arc::new(AtomicBool::new(true));
    let picks = Arc::clone(&pro);
    // Relaxed: a flag read by the pick on this one thread; nothing else is published through it.
    let pick = move |_: &u8| usize::from(picks.load(Ordering::Relaxed));
    let limiter: KeyedLimiter<u8, Tiered, _> =
        KeyedLimiter::with_tiers(&tiers, pick, ManualClock::new()).unwrap();
    let key: fn(&http::request::Parts) -> Option<u8> = |head| {
        let v = head.headers.get("x-key")?;
        v.to_str().ok()?.parse().ok()
    };
    let handler =
        || service_fn(|_req: Request<()>| async { Ok::<_, Infallible>(Response::new(())) });
    let request = |k: u8| {
        Request::get("/")
            .header("x-key", k.to_string())
            .body(())
            .unwrap()
    };
    let fields = |res: &Response<()>| {
        let get = |name: &str| {
            res.headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        (res.status(), get("ratelimit-policy"), get("ratelimit"))
    };

    let layer = LimitLayer::keyed(limiter, tollgate::middleware::from_fn(key))
        .tier_names(["free", "pro"])
        .build()
        .unwrap();
    let mut svc = layer.layer(handler());
    let ok = StatusCode::OK;
    let denied = StatusCode::TOO_MANY_REQUESTS;
    let pro_policy = Some(r#""pro";q=3;w=60"#.to_owned());
    let free_policy = Some(r#""free";q=2;w=60"#.to_owned());
    // Key 1 is created in tier 1 ("pro"); then new keys are picked for tier 0.
    let first = now(svc.call(request(1))).unwrap();
    assert_eq!(
        fields(&first),
        (ok, pro_policy.clone(), Some(r#""pro";r=2;t=20"#.into()))
    );
    // Relaxed: see the pick.
    pro.store(false, Ordering::Relaxed);
    for (r, status) in [(1, ok), (0, ok), (0, denied)] {
        let held = now(svc.call(request(1))).unwrap();
        let (got_status, policy, ratelimit) = fields(&held);
        assert_eq!((got_status, policy), (status, pro_policy.clone()));
        assert!(ratelimit.unwrap().starts_with(&format!(r#""pro";r={r};"#)));
    }
    let other = now(svc.call(request(2))).unwrap();
    assert_eq!(
        fields(&other),
        (ok, free_policy, Some(r#""free";r=1;t=30"#.into()))
    );

    // The trait's default, through a limiter that hides the inherent method.
    struct Plain(KeyedLimiter<u8, Tiered, ManualClock>);
    impl KeyedLimit<u8> for Plain {
        fn check_key_n_at(
            &self,
            key: &u8,
            n: u64,
            now: tollgate::Nanos,
        ) -> Result<Admitted, KeyedError> {
            self.0.check_key_n_at(key, n, now)
        }
        fn peek_key_n_at(
            &self,
            key: &u8,
            n: u64,
            now: tollgate::Nanos,
        ) -> Result<Admitted, KeyedError> {
            self.0.peek_key_n_at(key, n, now)
        }
        fn remaining_key_at(&self, key: &u8, now: tollgate::Nanos) -> u64 {
            self.0.remaining_key_at(key, now)
        }
        fn now(&self) -> tollgate::Nanos {
            self.0.clock().now()
        }
        fn quota(&self) -> Quota {
            self.0.quota()
        }
        fn tiers(&self) -> Vec<Quota> {
            self.0.tiers()
        }
        fn tier_of_key(&self, key: &u8) -> usize {
            self.0.tier_of_key(key)
        }
    }
    impl tollgate::middleware::ChangeQuota for Plain {}
    let pick = |k: &u8| usize::from(*k == 1);
    let plain = Plain(KeyedLimiter::with_tiers(&tiers, pick, ManualClock::new()).unwrap());
    assert_eq!(plain.check_key_n_and_tier(&1, 1).0, 1);
    let layer = LimitLayer::keyed(plain, tollgate::middleware::from_fn(key))
        .tier_names(["free", "pro"])
        .build()
        .unwrap();
    let mut svc = layer.layer(handler());
    let held = now(svc.call(request(1))).unwrap();
    assert_eq!(
        fields(&held),
        (ok, pro_policy, Some(r#""pro";r=1;t=20"#.into()))
    );
}
