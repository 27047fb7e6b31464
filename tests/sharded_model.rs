//! `ShardedBucket` driven by one thread against exact models.
//!
//! - Against the sharded model (`tests/support/sharded_reference.rs`: one single-bucket reference
//!   model per shard, split and stolen from as the module docs say): random quotas, shard counts,
//!   homes and operations, clocks that jump by years and step backwards; every answer must be
//!   identical, and tokens admitted never exceed `C + R × t` (exact, `R = count / period`, `t` from
//!   the construction reading to the latest, plus what was refunded).
//! - Against the single-bucket reference model fed the same history (every admission of the
//!   sharded limiter, the clock moving forwards only): the documented shortfall, made exact. With
//!   `S` shards, `L` the one bucket's level and `l_i` the shards' (in tokens, fractions included),
//!   and `D = L - Σ l_i`:
//!   1. `D >= 0` (the shards never hold more than the one bucket: everything the sharded limiter
//!      admits, the one bucket admits too), and admissions leave `D` unchanged;
//!   2. a clock step of `Δ` raises `D` by at most the refill the shards forgo while full (the
//!      idling term: `Σ max(0, l_i + Δ / I_i - c_i)`) plus the rounding of their intervals
//!      (`Σ (n_i / P - 1 / I_i) × Δ`);
//!   3. in whole tokens, `floor(L) - remaining <= (S - 1) + ceil(D)`: the stranded fractions
//!      (`S - 1` at most) and that deficit are the whole of the shortfall.
//!
//!   So a request the one bucket admits is refused only when the shards' whole tokens are below
//!   its by at most `S - 1` plus what idling and rounding have cost; with neither (an even split
//!   and no shard ever full during a step), by at most `S - 1`.

use std::time::Duration;
use testkit::driver::bucket as bucket_driver;
use testkit::driver::sharded as sharded_driver;
use testkit::reference::bucket as reference;
use testkit::reference::sharded as sharded_reference;
use testkit::Outcome;

use proptest::prelude::*;
use tollgate::{ManualClock, Nanos, Quota, ShardedBucket, TokenBucket};

use bucket_driver::{QuotaSpec, Rate};
use reference::{RefBucket, RefPolicy};
use sharded_driver::{run, Caller, ShardOp};
use sharded_reference::ShardedModel;
use testkit::driver::limiter::{Amount, Call, Request};
use testkit::driver::step::Step;
use testkit::strategies::{amount, fraction, rate, request, start, step, via_clock, wait};

const SEC: u64 = 1_000_000_000;

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Mostly valid quotas: capacities from 1 (fewer than the shards) to the largest the rate allows
/// (huge ones need time units above 1 ns), initial fills from empty to full.
fn quota_spec() -> impl Strategy<Value = QuotaSpec> {
    (
        rate(),
        0u8..=6,
        any::<u16>(),
        0u8..=3,
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(rate, cap, cap_frac, init, init_frac, initial_first)| {
            let max = rate.max_capacity();
            let capacity = match cap {
                0 | 1 => None,
                2 => Some(1),
                3 => Some(max.min(u64::from(cap_frac % 64) + 1)),
                4 => Some(max.min(1 << 40)),
                5 => Some(max),
                _ => Some(fraction(max, cap_frac).max(1)),
            };
            let c = capacity.unwrap_or(rate.count());
            let initial = match init {
                0 | 1 => None,
                2 => Some(0),
                _ => Some(fraction(c, init_frac)),
            };
            QuotaSpec {
                rate,
                capacity,
                initial,
                initial_first,
            }
        })
}

/// Shard counts: the default, valid powers of two, and a few the builder must refuse.
fn shards() -> impl Strategy<Value = Option<usize>> {
    prop_oneof![
        2 => Just(None),
        2 => Just(Some(1usize)),
        4 => Just(Some(2usize)),
        4 => Just(Some(4usize)),
        2 => Just(Some(8usize)),
        1 => Just(Some(16usize)),
        1 => Just(Some(256usize)),
        1 => prop::sample::select(vec![0usize, 3, 6, 512, usize::MAX]).prop_map(Some),
    ]
}

/// Homes: mostly the first few shards, sometimes anything (it is masked).
fn home() -> impl Strategy<Value = usize> {
    prop_oneof![6 => 0usize..8, 1 => any::<usize>()]
}

fn caller() -> impl Strategy<Value = Caller> {
    prop_oneof![
        6 => home().prop_map(Caller::From),
        1 => Just(Caller::At),
        1 => Just(Caller::Clock),
    ]
}

/// The calls every limiter answers from the thread's home, takes from a chosen home, peeks then
/// takes, reservations, takes of up to `n`, refunds and cancels (or neither), and clock steps in
/// intervals.
fn op(refunds: bool) -> impl Strategy<Value = ShardOp> {
    let refund_weight = if refunds { 2 } else { 0 };
    prop_oneof![
        6 => request().prop_map(ShardOp::Call),
        6 => (amount(), home()).prop_map(|(n, home)| ShardOp::AcquireFrom { n, home }),
        2 => (amount(), home()).prop_map(|(n, home)| ShardOp::PeekThenAcquire { n, home }),
        refund_weight => (amount(), caller()).prop_map(|(n, caller)| ShardOp::Refund { n, caller }),
        3 => (amount(), wait(), caller())
            .prop_map(|(n, wait, caller)| ShardOp::Reserve { n, wait, caller }),
        refund_weight => (any::<u8>(), via_clock())
            .prop_map(|(index, clock)| ShardOp::Cancel { index, clock }),
        2 => (amount(), caller()).prop_map(|(n, caller)| ShardOp::TakeUpTo { n, caller }),
        6 => step().prop_map(ShardOp::Time),
    ]
}

proptest! {
    #![proptest_config(testkit::strategies::unpersisted(2048))]

    /// Every answer equals the sharded model's, and the limit `C + R × t` (plus refunds) holds.
    #[test]
    fn sharded_matches_the_sharded_model(
        spec in quota_spec(),
        shards in shards(),
        start in start(),
        ops in prop::collection::vec(op(true), 0..=64),
    ) {
        run(&spec, shards, start, &ops);
    }

    /// Without refunds and with small capacities, so that the bound is tight: tokens admitted never
    /// exceed `C + R × t` from the first reading to the latest, however the clock moves.
    #[test]
    fn admissions_never_exceed_capacity_plus_rate_times_span(
        rate in rate(),
        capacity in 1u64..=8,
        shards in prop_oneof![Just(Some(2usize)), Just(Some(4usize)), Just(Some(8usize))],
        start in start(),
        ops in prop::collection::vec(op(false), 0..=96),
    ) {
        let max = rate.max_capacity();
        let spec = QuotaSpec {
            rate,
            capacity: Some(capacity.min(max)),
            initial: None,
            initial_first: false,
        };
        run(&spec, shards, start, &ops);
    }
}

// ---------------------------------------------------------------------------------------------
// The documented shortfall against one bucket with the same history
// ---------------------------------------------------------------------------------------------

/// An operation of the shortfall check: only admissions and forward steps (the comparison with one
/// bucket is about the history of admissions as time passes).
#[derive(Debug, Clone, Copy)]
enum Move {
    /// `try_acquire_n_from(home, n)` with `n` resolved against the capacity (`1..=C`).
    Take { n: u64, home: usize },
    /// Forward by `num / 16` of the whole quota's interval.
    Wait { num: u32 },
}

fn moves() -> impl Strategy<Value = Vec<Move>> {
    prop::collection::vec(
        prop_oneof![
            3 => (1u64..=64, 0usize..8).prop_map(|(n, home)| Move::Take { n, home }),
            1 => (1u64..=2, 0usize..8).prop_map(|(n, home)| Move::Take { n: n * 64, home }),
            3 => (0u32..=48).prop_map(|num| Move::Wait { num }),
            1 => (0u32..=2048).prop_map(|num| Move::Wait { num }),
        ],
        0..=96,
    )
}

fn gcd(a: i128, b: i128) -> i128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: i128, b: i128) -> i128 {
    (a / gcd(a, b))
        .checked_mul(b)
        .expect("a small common denominator")
}

/// Exact quantities of the shortfall check, in tokens scaled by `M`, the least common multiple of
/// the period and every interval (all in nanoseconds; every bucket here counts in nanoseconds).
struct Scale {
    m: i128,
    period: i128,
}

impl Scale {
    /// `L - Σ l_i`, scaled by `M`.
    fn deficit(&self, ideal: &RefBucket, model: &ShardedModel, now: u64) -> i128 {
        let whole = ideal.level_units(now) * (self.m / ideal.policy().interval);
        let shards: i128 = model
            .shards
            .iter()
            .map(|s| s.bucket.level_units(now) * (self.m / s.bucket.policy().interval))
            .sum();
        whole - shards
    }

    /// The bound on how much a forward step of `delta` ns raises the deficit: the refill full
    /// shards forgo, and the rounding of the shards' intervals; scaled by `M`.
    fn step_allowance(&self, model: &ShardedModel, now: u64, delta: u64) -> (i128, i128) {
        let delta = i128::from(delta);
        let mut idle = 0;
        let mut rounding = 0;
        for s in &model.shards {
            let p = s.bucket.policy();
            let per_unit = self.m / p.interval;
            let over = (s.bucket.level_units(now) + delta - p.burst).max(0);
            idle += over * per_unit;
            // n_i / P - 1 / I_i, scaled by M: never negative, since I_i >= P / n_i.
            let rate_gap = i128::from(s.count) * (self.m / self.period) - per_unit;
            assert!(rate_gap >= 0);
            rounding += delta * rate_gap;
        }
        (idle, rounding)
    }
}

proptest! {
    #![proptest_config(testkit::strategies::unpersisted(1024))]

    /// The documented shortfall, exactly (see the file's docs): quotas of `count` per
    /// `count × k` ns, so that the one bucket's interval `k` is exact and its rate is `R`.
    #[test]
    fn shortfall_is_stranded_fractions_plus_idling_and_rounding(
        count in 1u64..=64,
        k in prop_oneof![1u64..=16, 1u64..=100_000],
        capacity in 1u64..=64,
        fill in any::<u16>(),
        shards in prop::sample::select(vec![1usize, 2, 4, 8]),
        moves in moves(),
    ) {
        let period_ns = count * k;
        let initial = fraction(capacity, fill);
        let quota = Quota::per_period(count, Duration::from_nanos(period_ns))
            .and_then(|q| q.with_capacity(capacity))
            .and_then(|q| q.with_initial(initial))
            .expect("a valid quota");
        let clock = ManualClock::new();
        let limiter = ShardedBucket::builder(quota)
            .shards(shards)
            .clock(clock.clone())
            .build()
            .expect("a valid shard count");
        let whole = RefPolicy::new(count, u128::from(period_ns), capacity).expect("valid");
        let mut model = ShardedModel::new(count, u128::from(period_ns), whole, initial, shards, 0);
        let mut ideal = RefBucket::new(whole, initial, 0).expect("a fill within the capacity");
        prop_assert_eq!(limiter.shards(), model.shards());
        prop_assert_eq!(whole.interval_ns, k);
        let s = model.shards() as u64;
        let mut m = i128::from(period_ns);
        for shard in &model.shards {
            prop_assert_eq!(shard.bucket.policy().shift, 0);
            m = lcm(m, shard.bucket.policy().interval);
        }
        let scale = Scale { m, period: i128::from(period_ns) };
        let mut now = 0u64;
        let mut deficit = scale.deficit(&ideal, &model, now);
        prop_assert_eq!(deficit, 0, "the split is exact at the start");
        for (i, &mv) in moves.iter().enumerate() {
            match mv {
                Move::Take { n, home } => {
                    let n = n.min(capacity);
                    let got = testkit::outcome::observe(
                        limiter.try_acquire_n_from(home, n, Nanos::new(now)),
                    );
                    prop_assert_eq!(got, model.acquire(home, n, now).representable());
                    if matches!(got, Outcome::Admitted { .. }) {
                        // The same history: the one bucket takes what the shards gave.
                        let one = ideal.acquire(n, now);
                        prop_assert!(
                            matches!(one, Outcome::Admitted { .. }),
                            "move {}: the shards admitted {} that one bucket refuses: {:?}",
                            i, n, one
                        );
                        let after = scale.deficit(&ideal, &model, now);
                        prop_assert_eq!(after, deficit, "an admission moved the deficit");
                    }
                }
                Move::Wait { num } => {
                    let delta = u64::from(num) * k / 16;
                    let (idle, rounding) = scale.step_allowance(&model, now, delta);
                    clock.advance(Duration::from_nanos(delta));
                    now += delta;
                    let after = scale.deficit(&ideal, &model, now);
                    prop_assert!(
                        after <= deficit + idle + rounding,
                        "move {}: the deficit grew from {} to {} (x 1/{}), above idling {} + \
                         rounding {}",
                        i, deficit, after, scale.m, idle, rounding
                    );
                    deficit = after;
                }
            }
            prop_assert!(deficit >= 0, "move {}: the shards hold more than one bucket", i);
            let remaining = limiter.remaining_at(Nanos::new(now));
            prop_assert_eq!(remaining, model.tokens(now));
            let one = ideal.remaining(now);
            prop_assert!(remaining <= one);
            let deficit_tokens = u64::try_from((deficit + scale.m - 1) / scale.m).expect("small");
            prop_assert!(
                one - remaining < s + deficit_tokens,
                "move {}: one bucket holds {}, the shards {}: more than S - 1 = {} plus the \
                 deficit {}",
                i, one, remaining, s - 1, deficit_tokens
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-computed cases
// ---------------------------------------------------------------------------------------------

/// A limiter for `quota` with `shards` shards on a manual clock at 0, and its sharded model.
fn both(quota: Quota, shards: usize) -> (ShardedBucket<ManualClock>, ShardedModel) {
    let limiter = ShardedBucket::builder(quota)
        .shards(shards)
        .clock(ManualClock::new())
        .build()
        .expect("a valid shard count");
    let whole = RefPolicy::new(quota.count(), quota.period().as_nanos(), quota.capacity())
        .expect("a valid quota");
    let model = ShardedModel::new(
        quota.count(),
        quota.period().as_nanos(),
        whole,
        quota.initial(),
        shards,
        0,
    );
    assert_eq!(limiter.shards(), model.shards());
    (limiter, model)
}

/// Ten per second with a capacity of 7 over four shards: counts 3, 3, 2, 2 and capacities 2, 2, 2,
/// 1 (remainders to the lowest shards), checked on the model and, through home takes that report
/// the home shard's own `remaining`, on the limiter.
#[test]
fn the_split_puts_remainders_on_the_lowest_shards() {
    let quota = Quota::per_second(10).unwrap().with_capacity(7).unwrap();
    let (limiter, model) = both(quota, 4);
    let counts: Vec<u64> = model.shards.iter().map(|s| s.count).collect();
    let capacities: Vec<u64> = model
        .shards
        .iter()
        .map(|s| s.bucket.policy().capacity)
        .collect();
    assert_eq!(counts, [3, 3, 2, 2]);
    assert_eq!(capacities, [2, 2, 2, 1]);
    let t = Nanos::ZERO;
    for (home, capacity) in capacities.iter().enumerate() {
        // Taking a shard's whole capacity from home reports that shard's 0 left; one more than its
        // capacity has to gather and reports the whole limiter's.
        let taken = limiter.try_acquire_n_from(home, *capacity, t).unwrap();
        assert_eq!(taken.remaining(), 0, "shard {home}");
    }
    assert_eq!(limiter.remaining_at(t), 0);
    // The 3-per-second shards refill every 333_333_334 ns.
    let third = Nanos::new(333_333_334);
    assert_eq!(limiter.remaining_at(Nanos::new(333_333_333)), 0);
    assert_eq!(limiter.remaining_at(third), 2);
}

/// The idling term can exceed `S - 1` on its own: two shards of 5 (10 per second); 5 taken from
/// shard 0 at t = 0; half a second later one bucket with that history is full (10) while the
/// shards hold 2.5 + 5, of which 7 whole: a request for 8 is refused that one bucket would admit.
/// The idle shard is then stolen from, and refilling resumes.
#[test]
fn a_full_shard_idling_costs_more_than_stranded_fractions() {
    let quota = Quota::per_second(10).unwrap();
    let (limiter, _) = both(quota, 2);
    let one = TokenBucket::with_clock(quota, ManualClock::new());
    let t0 = Nanos::ZERO;
    assert_eq!(limiter.try_acquire_n_from(0, 5, t0).unwrap().remaining(), 0);
    one.try_acquire_n_at(5, t0).unwrap();
    let half = Nanos::new(SEC / 2);
    assert_eq!(one.remaining_at(half), 10);
    assert_eq!(limiter.remaining_at(half), 7);
    assert!(one.peek_n_at(8, half).is_ok());
    let denied = limiter.try_acquire_n_from(0, 8, half).unwrap_err();
    let denied = denied.denied().unwrap();
    assert_eq!(denied.remaining(), 7);
    // Shard 0 holds 2.5 and gains one token every 200 ms: the eighth whole token is its third, at
    // 600 ms.
    assert_eq!(denied.retry_after(), Duration::from_millis(100));
    // Seven are there: taking them empties shard 1 (stolen from), which refills again. At 1 s
    // shard 0 holds its half token plus 2.5, shard 1 2.5.
    limiter.try_acquire_n_from(0, 7, half).unwrap();
    assert_eq!(limiter.remaining_at(Nanos::new(SEC)), 3 + 2);
}

/// A reading earlier than one already applied can show the shards holding more than one bucket
/// with the same history: a shard nobody touched reads full at any reading, while one bucket
/// charges every admission to the single refill. Two shards of 1 (2 per second): one token taken
/// at 10 s; at 9.5 s one bucket holds 0 and the shards 1. The limit `C + R × t` still holds: over
/// the span [9.5 s, 10 s] at most 2 + 1 tokens, and here 2 are admitted.
#[test]
fn an_earlier_reading_can_show_more_than_one_bucket_with_the_same_history() {
    let quota = Quota::per_second(2).unwrap();
    let (limiter, _) = both(quota, 2);
    let one = TokenBucket::with_clock(quota, ManualClock::new());
    let (later, earlier) = (Nanos::new(10 * SEC), Nanos::new(10 * SEC - SEC / 2));
    limiter.try_acquire_n_from(0, 1, later).unwrap();
    one.try_acquire_at(later).unwrap();
    assert_eq!(one.remaining_at(earlier), 0);
    assert!(one.try_acquire_at(earlier).is_err());
    assert_eq!(limiter.remaining_at(earlier), 1);
    assert!(limiter.try_acquire_n_from(0, 1, earlier).is_ok());
}

/// Each shard rounds its own interval, which can be faster than one bucket's rounded interval,
/// though never faster than `R`: 3 per second over two shards is 2 per second (500 ms) plus 1 per
/// second (1 s), while one bucket refills every 333_333_334 ns. Starting empty, at 1 s the shards
/// hold 3 and one bucket 2; `C + R × t = 0 + 3 × 1` is met exactly.
#[test]
fn split_intervals_can_outpace_one_buckets_rounded_interval_but_not_the_rate() {
    let quota = Quota::per_second(3).unwrap().with_initial(0).unwrap();
    let (limiter, _) = both(quota, 2);
    let one = TokenBucket::with_clock(quota, ManualClock::new());
    let t = Nanos::new(SEC);
    assert_eq!(one.remaining_at(t), 2);
    assert_eq!(limiter.remaining_at(t), 3);
    assert!(limiter.try_acquire_n_from(0, 3, t).is_ok());
}

/// The probe that finds the thread's home agrees with the `_at` forms: once the probed home shard is
/// emptied, a take through `try_acquire_at` has to gather (and reports the whole limiter's
/// remaining), while a take from any full shard is answered from that shard.
#[test]
fn the_thread_home_probe_agrees_with_the_at_forms() {
    let home = sharded_driver::thread_home();
    let quota = Quota::per_second(768).unwrap();
    let limiter = ShardedBucket::builder(quota)
        .shards(256)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let t = Nanos::ZERO;
    assert_eq!(
        limiter.try_acquire_n_from(home, 3, t).unwrap().remaining(),
        0
    );
    assert_eq!(limiter.try_acquire_at(t).unwrap().remaining(), 768 - 3 - 1);
    assert_eq!(
        limiter
            .try_acquire_n_from(home + 1, 1, t)
            .unwrap()
            .remaining(),
        1
    );
}

/// A few operation sequences pinned by hand through the driver: default and refused shard counts,
/// homes beyond the shard count, and the clock at its extremes.
#[test]
fn driver_smoke() {
    let spec = QuotaSpec {
        rate: Rate::Second(10),
        capacity: Some(7),
        initial: None,
        initial_first: false,
    };
    let ops = [
        ShardOp::AcquireFrom {
            n: Amount::Limit,
            home: usize::MAX,
        },
        ShardOp::Call(Request::at(Call::AcquireOne)),
        ShardOp::Time(Step::Units { num: 5, den: 2 }),
        ShardOp::PeekThenAcquire {
            n: Amount::Few(2),
            home: 3,
        },
        ShardOp::Refund {
            n: Amount::Raw(u64::MAX),
            caller: Caller::Clock,
        },
        ShardOp::Time(Step::ToMax),
        ShardOp::Call(Request::at(Call::Acquire(Amount::AboveLimit))),
        ShardOp::Time(Step::BackNanos(u64::MAX)),
        ShardOp::Call(Request::via_clock(Call::Remaining)),
    ];
    for shards in [
        None,
        Some(1),
        Some(2),
        Some(4),
        Some(256),
        Some(0),
        Some(3),
        Some(512),
    ] {
        sharded_driver::run(&spec, shards, 0, &ops);
        sharded_driver::run(&spec, shards, u64::MAX, &ops);
    }
}

/// A reservation spreads its debt over the shards: four shards of 2 per second, all empty; four
/// tokens are one from each shard after 500 ms, not four from one shard after 2 s. Everyone else
/// queues behind the debt, and a cancel gives every part back.
#[test]
fn a_reservation_spreads_its_debt_over_the_shards() {
    let (limiter, mut model) = both(Quota::per_second(8).unwrap(), 4);
    let t = Nanos::ZERO;
    limiter.try_acquire_n_from(0, 8, t).unwrap();
    assert!(model.acquire(0, 8, 0).is_admitted());
    let r = limiter
        .reserve_n_from(1, 4, Duration::from_secs(1), t)
        .unwrap();
    let m = model.reserve(1, 4, SEC, 0).unwrap();
    assert_eq!(r.delay(), Duration::from_millis(500));
    assert_eq!(r.ready_at().as_u64(), m.ready_at_ns);
    assert_eq!(m.parts.len(), 4);
    let next = limiter.try_acquire_at(t).unwrap_err();
    assert_eq!(next.retry_after(), Duration::from_secs(1));
    // Four more are one from each shard after 1 s: beyond 500 ms, refused, retry_after the excess.
    let Err(refused) = limiter.reserve_n_from(1, 4, Duration::from_millis(500), t) else {
        panic!("a wait of 1 s is beyond 500 ms")
    };
    assert_eq!(
        refused.denied().unwrap().retry_after(),
        Duration::from_millis(500)
    );
    assert_eq!(r.cancel_at(t), 4);
    assert_eq!(model.cancel(&m, 0), 4);
    assert_eq!(limiter.remaining_at(Nanos::new(SEC / 2)), 4);
    // With no wait allowed, a reservation answers as an acquisition does.
    for n in [1, 3, 5, 8] {
        let mut copy = model.clone();
        let reserved = model.reserve(2, n, 0, SEC / 2).is_ok();
        assert_eq!(reserved, copy.acquire(2, n, SEC / 2).is_admitted(), "{n}");
    }
}

/// Taking up to `n` from the shards: what each holds from home on, one caller alone getting
/// `min(n, remaining)`; none there is the denial of one token.
#[test]
fn take_up_to_gathers_what_the_shards_hold() {
    let (limiter, mut model) = both(Quota::per_second(8).unwrap(), 4);
    let t = Nanos::ZERO;
    let p = limiter.take_up_to_from(3, 5, t).unwrap();
    assert_eq!((p.taken(), p.remaining()), (5, 3));
    assert_eq!(model.take_up_to(3, 5, 0).0, 5);
    assert_eq!(limiter.take_up_to_from(0, 100, t).unwrap().taken(), 3);
    let d = limiter.take_up_to_from(0, 100, t).unwrap_err();
    assert_eq!(d.retry_after(), Duration::from_millis(500));
    assert_eq!(d, limiter.try_acquire_at(t).unwrap_err());
}

/// The case CI's proptest found (2026-12-02): on a very slow quota (one token in about 94 years,
/// capacity 7: coarse time units of 8 ns; the bucket falls back to one shard), the clock steps
/// back 4 ns right after construction and the first tokens are taken there. The full bucket counted
/// its tokens from its construction reading rounded down to a whole unit, so that earlier reading
/// started the refill 4 ns before the bucket existed, and a reservation made after everything was
/// taken was ready 4 ns before C + R*t (counted from construction) allows its token. Fixed by
/// taking any reading before the construction reading as the construction reading.
#[test]
fn regression_slow_two_shard_reservation_after_a_take() {
    use bucket_driver::Wait;
    let spec = QuotaSpec {
        rate: Rate::Period(852_279_127, Duration::from_secs(2_521_415_431_007_359_732)),
        capacity: Some(7),
        initial: None,
        initial_first: false,
    };
    let ops = [
        ShardOp::Time(Step::BackNanos(4)),
        ShardOp::PeekThenAcquire {
            n: Amount::One,
            home: 0,
        },
        ShardOp::Call(Request {
            call: Call::Acquire(Amount::One),
            clock: false,
        }),
        ShardOp::Time(Step::Nanos(1_479_219_278_713_697_593)),
        ShardOp::TakeUpTo {
            n: Amount::Few(5),
            caller: Caller::From(0),
        },
        ShardOp::Reserve {
            n: Amount::One,
            wait: Wait::Units { num: 4, den: 6 },
            caller: Caller::From(0),
        },
    ];
    run(&spec, Some(2), 578_367_516_052_284, &ops);
}
