//! Quota changes at runtime (`set_quota`) on every direct limiter: against the crate's one rule
//! with proptest (`testkit::driver::change`, which the fuzz target `quota_change_ops` runs too),
//! and with threads admitting while another thread changes the quota.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use testkit::driver::change::{run, KeyedKind, Kind, Op};
use testkit::driver::limiter::Amount;
use tollgate::keyed::KeyedLimiter;
use tollgate::window::{FixedWindow, SlidingWindowLog, SubWindowCounter};
use tollgate::{Limiter, ManualClock, Quota, ShardedBucket, TokenBucket};

fn quota() -> impl Strategy<Value = Option<Quota>> {
    (
        1u64..=50,
        prop_oneof![
            Just(Duration::from_secs(1)),
            Just(Duration::from_secs(60)),
            (1u64..=5_000_000_000).prop_map(Duration::from_nanos),
        ],
        0u64..=20,
    )
        .prop_map(|(count, period, burst)| {
            let quota = Quota::per_period(count, period).ok()?;
            match burst {
                0 => Some(quota),
                b => quota.with_capacity(b).ok(),
            }
        })
}

fn amount() -> impl Strategy<Value = Amount> {
    prop_oneof![
        Just(Amount::Zero),
        Just(Amount::One),
        any::<u8>().prop_map(Amount::Few),
        Just(Amount::Limit),
        Just(Amount::AboveLimit),
        any::<u16>().prop_map(Amount::Fraction),
    ]
}

fn dt() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        0i64..=2_000_000_000,
        -1_000_000i64..=0,
        0i64..=120_000_000_000,
    ]
}

fn op() -> impl Strategy<Value = Option<Op>> {
    prop_oneof![
        3 => (amount(), dt()).prop_map(|(n, dt)| Some(Op::Acquire { n, dt })),
        1 => (amount(), dt()).prop_map(|(n, dt)| Some(Op::Peek { n, dt })),
        1 => (quota(), dt()).prop_map(|(q, dt)| q.map(|quota| Op::Change { quota, dt })),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_change_follows_the_rule(
        kind in prop_oneof![
            Just(Kind::Bucket), Just(Kind::Meter), Just(Kind::Fixed), Just(Kind::Counter), Just(Kind::Log),
            Just(Kind::Sharded), Just(Kind::SubWindows),
            Just(Kind::Keyed(KeyedKind::Bucket)), Just(Kind::Keyed(KeyedKind::Meter)),
            Just(Kind::Keyed(KeyedKind::Fixed)), Just(Kind::Keyed(KeyedKind::Counter)),
            Just(Kind::Keyed(KeyedKind::Log)), Just(Kind::KeyedTiered)
        ],
        first in quota(),
        start in prop_oneof![Just(0u64), 0u64..=1_000_000_000_000],
        ops in prop::collection::vec(op(), 0..40),
    ) {
        let Some(first) = first else { return Ok(()) };
        let ops: Vec<Op> = ops.into_iter().flatten().collect();
        run(kind, first, start, &ops);
    }
}

/// With the clock standing still nothing refills, so however often the quota changes while
/// threads admit, all of them together never get more than the first quota held: each change
/// carries over at most what was left.
fn frozen_clock_bound<L: Limiter>(limiter: &L, change: impl Fn(u64) + Sync, first: u64) {
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                for _ in 0..20_000 {
                    if limiter.try_acquire().is_ok() {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        s.spawn(|| {
            for i in 0..2_000 {
                change(i);
            }
        });
    });
    let admitted = admitted.into_inner();
    assert!(
        admitted <= first,
        "{admitted} admitted, the first quota held {first}"
    );
    assert!(admitted + limiter.remaining() <= first);
}

#[test]
fn threads_admitting_across_changes_never_exceed_what_was_held() {
    let q = |n| Quota::per_hour(n).unwrap();
    let bucket = TokenBucket::with_clock(q(5_000), ManualClock::new());
    frozen_clock_bound(
        &bucket,
        |i| bucket.set_quota(q(1_000 + (i % 7) * 1_000)).unwrap(),
        5_000,
    );
    let window = FixedWindow::with_clock(q(5_000), ManualClock::new()).unwrap();
    frozen_clock_bound(
        &window,
        |i| window.set_quota(q(1_000 + (i % 7) * 1_000)).unwrap(),
        5_000,
    );
    let sharded = ShardedBucket::builder(q(5_000))
        .shards(2)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    frozen_clock_bound(
        &sharded,
        |i| sharded.set_quota(q(1_000 + (i % 7) * 1_000)),
        5_000,
    );
    let sub = SubWindowCounter::with_clock(q(5_000), 4, ManualClock::new()).unwrap();
    frozen_clock_bound(
        &sub,
        |i| sub.set_quota(q(1_000 + (i % 7) * 1_000)).unwrap(),
        5_000,
    );
    let log = SlidingWindowLog::with_clock(q(3_000), ManualClock::new()).unwrap();
    frozen_clock_bound(
        &log,
        |i| log.set_quota(q(500 + (i % 5) * 700)).unwrap(),
        3_000,
    );
}

/// The keyed limiter's form of the bound above: per key, held from the start or first seen
/// between two changes (then it starts from what a fresh key held at the change), threads never
/// get more than the first quota held, however often the quota changes meanwhile.
fn keyed_frozen_clock_bound<A: tollgate::Algorithm>(
    first: Quota,
    change: impl Fn(u64) -> Quota + Sync,
) {
    let limiter: KeyedLimiter<u8, A, _> =
        KeyedLimiter::with_algorithm(first, ManualClock::new()).unwrap();
    let admitted: Vec<AtomicU64> = (0..8).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (limiter, admitted) = (&limiter, &admitted);
            s.spawn(move || {
                for i in 0..20_000u64 {
                    // Keys 4 to 7 are first seen as the run goes on, after some changes.
                    let key = (i * 7 + t) % (4 + (i / 5_000).min(4));
                    if limiter.check_key(&(key as u8)).is_ok() {
                        admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        s.spawn(|| {
            for i in 0..1_000 {
                limiter.set_quota(change(i)).unwrap();
            }
        });
    });
    for (key, admitted) in admitted.iter().enumerate() {
        let admitted = admitted.load(Ordering::Relaxed);
        assert!(
            admitted <= first.capacity(),
            "key {key}: {admitted} admitted, the first quota held {}",
            first.capacity()
        );
        assert!(admitted + limiter.remaining_key(&(key as u8)) <= first.capacity());
    }
}

#[test]
fn threads_admitting_on_keys_across_changes_never_exceed_what_was_held() {
    let q = |n| Quota::per_hour(n).unwrap();
    keyed_frozen_clock_bound::<tollgate::keyed::TokenBucketKeys>(q(3_000), |i| {
        q(500 + (i % 7) * 1_000)
    });
    keyed_frozen_clock_bound::<tollgate::keyed::FixedWindowKeys>(q(3_000), |i| {
        q(500 + (i % 7) * 1_000)
    });
    keyed_frozen_clock_bound::<tollgate::keyed::SlidingWindowLogKeys>(q(2_000), |i| {
        q(300 + (i % 5) * 700)
    });
}

/// Changes racing growth (thousands of keys first seen while the quota changes), sweeps and
/// admissions on a keyed bucket: with the clock standing still, no key ever gets more than the
/// first quota held (a key first seen after a change starts from what a fresh key held then, at
/// most the first capacity), and nothing is lost or freed twice (the sanitizer step runs this
/// file).
#[test]
fn keyed_changes_racing_growth_and_sweeps_keep_every_keys_bound() {
    const KEYS: u64 = 3_000;
    let first = Quota::per_hour(4).unwrap();
    let limiter: KeyedLimiter<u64, tollgate::keyed::TokenBucketKeys, _> =
        KeyedLimiter::with_clock(first, ManualClock::new());
    let admitted: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (limiter, admitted) = (&limiter, &admitted);
            s.spawn(move || {
                for i in 0..100_000u64 {
                    let key = (i * 13 + t * 7) % KEYS;
                    if limiter.check_key(&key).is_ok() {
                        admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        s.spawn(|| {
            for i in 0..300u64 {
                limiter
                    .set_quota(Quota::per_hour(1 + i % 6).unwrap())
                    .unwrap();
                limiter.retain_recent();
            }
        });
    });
    for (key, admitted) in admitted.iter().enumerate() {
        let admitted = admitted.load(Ordering::Relaxed);
        assert!(admitted <= 4, "key {key}: {admitted} admitted of 4");
        assert!(admitted + limiter.remaining_key(&(key as u64)) <= 4);
    }
}

#[test]
fn a_refused_quota_changes_nothing() {
    let window =
        FixedWindow::with_clock(Quota::per_second(4).unwrap(), ManualClock::new()).unwrap();
    let burst = Quota::per_second(4).unwrap().with_capacity(9).unwrap();
    assert!(window.set_quota(burst).is_err()); // a window's capacity is its count
    assert_eq!(window.quota(), Quota::per_second(4).unwrap());
    assert_eq!(window.remaining(), 4);
}
