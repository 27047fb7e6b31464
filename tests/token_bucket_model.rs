//! The token bucket against an exact reference model (`tests/support/reference.rs`): random quotas
//! and random operation sequences, with clocks that jump forwards by years and step backwards, must
//! get answers identical to the nanosecond; plus the rate bound, the exactness of `retry_at`, and
//! hand-computed cases that pin the model itself to numbers worked out on paper.

use std::time::Duration;
use testkit::driver::bucket as bucket_driver;
use testkit::reference::bucket as reference;
use testkit::strategies as bucket_strategies;
use testkit::Outcome;

use proptest::prelude::*;

use bucket_strategies::{amount, fraction, rate, request, spread, start, step, via_clock, wait};
use tollgate::leaky::LeakyMeter;
use tollgate::{
    AcquireError, InsufficientCapacity, ManualClock, Nanos, Quota, ShardedBucket, TokenBucket,
};

use bucket_driver::{check_quota, check_window, run, Op, QuotaSpec, Rate};
use reference::{RefBucket, RefPolicy};
use testkit::consts::{MAX_USABLE_NS, YEAR_NS};
use testkit::driver::limiter::{check_retry_exact, Amount, Call, Request};
use testkit::driver::step::Step;

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// How `with_capacity` is called, relative to the largest capacity the rate allows.
#[derive(Debug, Clone, Copy)]
enum CapacityChoice {
    Default,
    One,
    Few(u64),
    /// `min(2^40, max)`: a slow rate with a huge capacity needs a time unit above 1 ns.
    Huge,
    Max,
    Fraction(u16),
    /// Anything, valid or not.
    Raw(u64),
}

/// How `with_initial` is called, relative to the capacity.
#[derive(Debug, Clone, Copy)]
enum InitialChoice {
    Default,
    Empty,
    Full,
    Fraction(u16),
    Raw(u64),
}

fn capacity_choice() -> impl Strategy<Value = CapacityChoice> {
    prop_oneof![
        3 => Just(CapacityChoice::Default),
        3 => Just(CapacityChoice::One),
        3 => (1u64..=8).prop_map(CapacityChoice::Few),
        3 => Just(CapacityChoice::Huge),
        1 => Just(CapacityChoice::Max),
        2 => any::<u16>().prop_map(CapacityChoice::Fraction),
        1 => any::<u64>().prop_map(CapacityChoice::Raw),
    ]
}

fn initial_choice() -> impl Strategy<Value = InitialChoice> {
    prop_oneof![
        4 => Just(InitialChoice::Default),
        2 => Just(InitialChoice::Empty),
        1 => Just(InitialChoice::Full),
        2 => any::<u16>().prop_map(InitialChoice::Fraction),
        1 => any::<u64>().prop_map(InitialChoice::Raw),
    ]
}

/// Mostly valid quotas (capacities and fills resolved against the documented ranges), some not.
fn quota_spec_with(
    capacity: impl Strategy<Value = CapacityChoice>,
) -> impl Strategy<Value = QuotaSpec> {
    (rate(), capacity, initial_choice(), any::<bool>()).prop_map(
        |(rate, cap, init, initial_first)| {
            let max = rate.max_capacity();
            let capacity = match cap {
                CapacityChoice::Default => None,
                CapacityChoice::One => Some(1),
                CapacityChoice::Few(x) => Some(x.min(max)),
                CapacityChoice::Huge => Some(max.min(1 << 40)),
                CapacityChoice::Max => Some(max),
                CapacityChoice::Fraction(a) => Some(fraction(max, a).max(1)),
                CapacityChoice::Raw(x) => Some(x),
            };
            let c = capacity.unwrap_or(rate.count());
            let initial = match init {
                InitialChoice::Default => None,
                InitialChoice::Empty => Some(0),
                InitialChoice::Full => Some(c),
                InitialChoice::Fraction(a) => Some(fraction(c, a)),
                InitialChoice::Raw(x) => Some(x),
            };
            QuotaSpec {
                rate,
                capacity,
                initial,
                initial_first,
            }
        },
    )
}

fn quota_spec() -> impl Strategy<Value = QuotaSpec> {
    quota_spec_with(capacity_choice())
}

/// The calls every limiter answers, refunds, reservations and their cancels, takes of up to `n`,
/// and clock steps in intervals.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        13 => request().prop_map(Op::Call),
        2 => (amount(), via_clock()).prop_map(|(n, clock)| Op::Refund { n, clock }),
        4 => (amount(), wait(), via_clock()).prop_map(|(n, wait, clock)| Op::Reserve { n, wait, clock }),
        2 => (any::<u8>(), via_clock()).prop_map(|(index, clock)| Op::Cancel { index, clock }),
        3 => (amount(), via_clock()).prop_map(|(n, clock)| Op::TakeUpTo { n, clock }),
        6 => step().prop_map(Op::Time),
    ]
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(testkit::strategies::unpersisted(2048))]

    /// Every answer of every operation equals the model's, to the nanosecond.
    #[test]
    fn bucket_matches_reference_model(
        spec in quota_spec(),
        start in start(),
        ops in prop::collection::vec(op(), 0..=64),
    ) {
        run(&spec, start, &ops);
    }
}

proptest! {
    // As above.
    #![proptest_config(testkit::strategies::unpersisted(512))]

    /// Quota validation agrees with the documented ranges, field for field.
    #[test]
    fn quota_validation_matches_documented_ranges(spec in quota_spec()) {
        check_quota(&spec);
    }

    /// From the starting fill (at most C), requests read anywhere in `[t0, t1]`, in any order, with
    /// no refunds, are admitted at most `C + floor((t1 - t0) / I)` tokens (units), and every answer
    /// matches the model.
    #[test]
    fn admissions_never_exceed_capacity_plus_rate_times_window(
        spec in quota_spec_with(prop_oneof![
            Just(CapacityChoice::One),
            (1u64..=8).prop_map(CapacityChoice::Few),
            Just(CapacityChoice::Default),
        ]),
        start in start(),
        requests in prop::collection::vec(spread(), 0..=128),
    ) {
        let interval_ns = spec.rate.interval_ns().unwrap_or(1);
        let requests: Vec<(u64, Amount)> = requests
            .into_iter()
            .map(|(offset, n)| (offset.next(0, interval_ns), n))
            .collect();
        check_window(&spec, start, &requests);
    }

    /// A denial's `retry_at` is the earliest reading at which the same request is admitted: a peek
    /// there succeeds, a peek one nanosecond earlier does not.
    #[test]
    fn retry_at_is_the_earliest_admitting_reading(
        spec in quota_spec(),
        start in 0u64..=(1 << 61),
        taken in amount(),
        wanted in amount(),
        back in prop_oneof![Just(0u64), 0u64..=1_000_000_000_000],
    ) {
        let Some((quota, policy, _)) = check_quota(&spec) else {
            return Ok(());
        };
        let bucket = TokenBucket::with_clock(quota, ManualClock::new());
        let _ = bucket.try_acquire_n_at(taken.resolve(policy.capacity), Nanos::new(start));
        let now = start.saturating_sub(back);
        let n = wanted.resolve(policy.capacity);
        if let Err(AcquireError::Denied(denied)) = bucket.try_acquire_n_at(n, Nanos::new(now)) {
            let at = denied.retry_at();
            let sum = u128::from(now) + denied.retry_after().as_nanos();
            prop_assert_eq!(at.as_u64(), u64::try_from(sum).unwrap_or(u64::MAX));
            check_retry_exact(&bucket, n, at, &|| format!("{n} at {now}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-computed cases: these pin the model (and the crate) to numbers worked out on paper.
// ---------------------------------------------------------------------------------------------

fn policy(count: u64, period: Duration, capacity: u64) -> RefPolicy {
    RefPolicy::new(count, period.as_nanos(), capacity).expect("a valid quota")
}

/// Three per second: the interval 1 s / 3 rounds up to 333_333_334 ns, so three tokens take
/// 1_000_000_002 ns to refill.
#[test]
fn three_per_second() {
    let p = policy(3, Duration::from_secs(1), 3);
    assert_eq!(
        (p.interval_ns, p.shift, p.interval, p.burst),
        (333_333_334, 0, 333_333_334, 1_000_000_002)
    );

    let mut model = RefBucket::new(p, 3, 0).unwrap();
    let bucket = TokenBucket::with_clock(Quota::per_second(3).unwrap(), ManualClock::new());
    let expect = [
        // Each time the next token is one interval away.
        Outcome::admitted(2, 333_333_334, Some(333_333_334)),
        Outcome::admitted(1, 666_666_668, Some(333_333_334)),
        Outcome::admitted(0, 1_000_000_002, Some(333_333_334)),
        Outcome::denied_until(
            333_333_334,
            333_333_334,
            0,
            1_000_000_002,
            Some(333_333_334),
        ),
    ];
    for want in expect {
        assert_eq!(model.acquire(1, 0), want);
        assert_eq!(
            testkit::outcome::observe_one(bucket.try_acquire_at(Nanos::new(0))),
            want
        );
    }
    // 100 ns later everything is 100 ns shorter.
    let want = Outcome::denied_until(333_333_234, 333_333_334, 0, 999_999_902, Some(333_333_234));
    assert_eq!(model.peek(1, 100), want);
    assert_eq!(
        testkit::outcome::observe(bucket.peek_n_at(1, Nanos::new(100))),
        want
    );
    // One nanosecond early, then exactly on time.
    assert!(matches!(
        model.acquire(1, 333_333_333),
        Outcome::Denied {
            retry_after_ns: 1,
            ..
        }
    ));
    assert!(bucket.try_acquire_at(Nanos::new(333_333_333)).is_err());
    let want = Outcome::admitted(0, 1_000_000_002, Some(333_333_334));
    assert_eq!(model.acquire(1, 333_333_334), want);
    assert_eq!(
        testkit::outcome::observe_one(bucket.try_acquire_at(Nanos::new(333_333_334))),
        want
    );
}

/// One per day with a capacity of 2^40: the burst window (about 3 × 10^9 years) needs a time unit
/// of 2^25 ns, and the interval becomes ceil(86_400 s / 2^25 ns) = 2_574_921 units
/// = 86_400_011_599_872 ns.
#[test]
fn one_per_day_with_huge_capacity_uses_coarse_units() {
    const UNIT_INTERVAL_NS: u64 = 86_400_011_599_872;
    let p = policy(1, Duration::from_secs(86_400), 1 << 40);
    assert_eq!((p.shift, p.interval), (25, 2_574_921));
    assert_eq!(reference::max_shift(86_400_000_000_000), 36);
    assert_eq!(
        reference::max_capacity(86_400_000_000_000),
        3_665_887_137_064_696
    );
    let quota = Quota::per_day(1)
        .unwrap()
        .with_capacity(1 << 40)
        .unwrap()
        .with_initial(0)
        .unwrap();
    assert_eq!(quota.max_capacity(), 3_665_887_137_064_696);

    let mut model = RefBucket::new(p, 0, 0).unwrap();
    let bucket = TokenBucket::with_clock(quota, ManualClock::new());
    let full_ns: u128 = (1u128 << 40) * u128::from(UNIT_INTERVAL_NS);
    // At 1000 ns (inside the first unit) the wait is measured from the reading, not the unit.
    let want = Outcome::denied_until(
        u128::from(UNIT_INTERVAL_NS) - 1_000,
        UNIT_INTERVAL_NS,
        0,
        full_ns - 1_000,
        Some(u128::from(UNIT_INTERVAL_NS) - 1_000),
    );
    assert_eq!(model.acquire(1, 1_000), want);
    assert_eq!(
        testkit::outcome::observe_one(bucket.try_acquire_at(Nanos::new(1_000))),
        want
    );
    // The last nanosecond of the unit before: still one nanosecond to wait.
    let want = Outcome::denied_until(
        1,
        UNIT_INTERVAL_NS,
        0,
        full_ns - u128::from(UNIT_INTERVAL_NS) + 1,
        Some(1),
    );
    assert_eq!(model.acquire(1, UNIT_INTERVAL_NS - 1), want);
    assert_eq!(
        testkit::outcome::observe_one(bucket.try_acquire_at(Nanos::new(UNIT_INTERVAL_NS - 1))),
        want
    );
    let want = Outcome::admitted(0, full_ns, Some(u128::from(UNIT_INTERVAL_NS)));
    assert_eq!(model.acquire(1, UNIT_INTERVAL_NS), want);
    assert_eq!(
        testkit::outcome::observe_one(bucket.try_acquire_at(Nanos::new(UNIT_INTERVAL_NS))),
        want
    );
}

/// A clock stepping backwards sees the bucket as it was then: fewer tokens, never more.
#[test]
fn backwards_reading_sees_less() {
    const S: u64 = 1_000_000_000;
    let p = policy(1, Duration::from_secs(1), 1);
    let mut model = RefBucket::new(p, 1, 10 * S).unwrap();
    let bucket = TokenBucket::with_clock(
        Quota::per_second(1).unwrap(),
        ManualClock::starting_at(Nanos::new(10 * S)),
    );
    assert_eq!(
        model.acquire(1, 10 * S),
        Outcome::admitted(0, u128::from(S), Some(u128::from(S)))
    );
    assert!(bucket.try_acquire_at(Nanos::new(10 * S)).is_ok());
    // Five seconds earlier the bucket was 5 s in debt: six seconds to the next token.
    let six = 6 * u128::from(S);
    let want = Outcome::denied_until(six, 11 * S, 0, six, Some(six));
    assert_eq!(model.acquire(1, 5 * S), want);
    assert_eq!(
        testkit::outcome::observe_one(bucket.try_acquire_at(Nanos::new(5 * S))),
        want
    );
    // A refund at that earlier reading pays back one token of the debt only.
    model.refund(1, 5 * S);
    bucket.refund_at(1, Nanos::new(5 * S));
    let five = 5 * u128::from(S);
    let want = Outcome::denied_until(five, 10 * S, 0, five, Some(five));
    assert_eq!(model.peek(1, 5 * S), want);
    assert_eq!(
        testkit::outcome::observe(bucket.peek_n_at(1, Nanos::new(5 * S))),
        want
    );
    assert_eq!(model.remaining(10 * S), 1);
    assert_eq!(bucket.remaining_at(Nanos::new(10 * S)), 1);
}

/// Readings past 2^62 ns are clamped: time stands still there, and `retry_at` is measured from the
/// clamped reading.
#[test]
fn readings_beyond_max_usable_are_clamped() {
    let p = policy(10, Duration::from_secs(1), 10);
    let mut model = RefBucket::new(p, 0, u64::MAX).unwrap();
    let bucket = TokenBucket::with_clock(
        Quota::per_second(10).unwrap().with_initial(0).unwrap(),
        ManualClock::starting_at(Nanos::new(u64::MAX)),
    );
    let want = Outcome::denied_until(
        100_000_000,
        MAX_USABLE_NS + 100_000_000,
        0,
        1_000_000_000,
        Some(100_000_000),
    );
    assert_eq!(model.acquire(1, u64::MAX), want);
    assert_eq!(testkit::outcome::observe_one(bucket.try_acquire()), want);
    assert_eq!(bucket.remaining_at(Nanos::new(u64::MAX)), 0);
    assert_eq!(model.remaining(u64::MAX), 0);
}

/// An idle period of any length fills the bucket and no further; refunds cap at the capacity and do
/// nothing to a full bucket; `n > C` is never a denial.
#[test]
fn idle_refund_and_capacity_edges() {
    let p = policy(5, Duration::from_secs(1), 5);
    let mut model = RefBucket::new(p, 5, 0).unwrap();
    let bucket = TokenBucket::with_clock(Quota::per_second(5).unwrap(), ManualClock::new());
    let at = Nanos::new(0);
    let emptied = Outcome::admitted(0, 1_000_000_000, Some(200_000_000));
    assert_eq!(model.acquire(5, 0), emptied);
    assert_eq!(
        testkit::outcome::observe(bucket.try_acquire_n_at(5, at)),
        emptied
    );
    model.refund(u64::MAX, 0);
    bucket.refund_at(u64::MAX, at);
    assert_eq!((model.remaining(0), bucket.remaining_at(at)), (5, 5));
    // Full: a refund changes nothing, and a query reports no time to full.
    model.refund(3, 0);
    bucket.refund_at(3, at);
    assert_eq!(model.acquire(0, 0), Outcome::admitted(5, 0, None));
    assert_eq!(
        testkit::outcome::observe(bucket.try_acquire_n_at(0, at)),
        Outcome::admitted(5, 0, None)
    );
    let never = InsufficientCapacity {
        requested: 6,
        capacity: 5,
    };
    assert_eq!(
        bucket.try_acquire_n_at(6, at),
        Err(AcquireError::InsufficientCapacity(never))
    );
    assert_eq!(
        model.acquire(6, 0),
        Outcome::InsufficientCapacity {
            requested: 6,
            capacity: 5
        }
    );
    // Empty it, then wait 500 years.
    assert!(bucket.try_acquire_n_at(5, at).is_ok());
    assert!(matches!(
        model.acquire(5, 0),
        Outcome::Admitted { remaining: 0, .. }
    ));
    let later = 500 * YEAR_NS;
    assert_eq!(
        (
            model.remaining(later),
            bucket.remaining_at(Nanos::new(later))
        ),
        (5, 5)
    );
}

/// A span longer than `Duration::MAX` (about 584 billion years) is reported as `Duration::MAX`.
///
/// One per day with a capacity of 2^48 needs a time unit of 2^33 ns and an interval of 10_059
/// units, so an empty bucket is full again after `2^48 × 10_059 × 2^33` ns
/// = 24_321_169_639_007_109_736.738848768 s, more than a `Duration` holds. The only faithful answer
/// is the largest `Duration`, not `u64::MAX` seconds plus the sub-second part of the true span.
#[test]
fn spans_beyond_duration_max_saturate_to_duration_max() {
    let p = policy(1, Duration::from_secs(86_400), 1 << 48);
    assert_eq!((p.shift, p.interval), (33, 10_059));
    let mut model = RefBucket::new(p, 0, 0).unwrap();
    let full_ns: u128 = 10_059 << 81;
    assert_eq!(full_ns, 24_321_169_639_007_109_736_738_848_768);
    // The next token is one interval away, well within a `Duration`.
    let next = Some(10_059u128 << 33);
    assert_eq!(model.acquire(0, 0), Outcome::admitted(0, full_ns, next));

    let quota = Quota::per_day(1)
        .unwrap()
        .with_capacity(1 << 48)
        .unwrap()
        .with_initial(0)
        .unwrap();
    let bucket = TokenBucket::with_clock(quota, ManualClock::new());
    let query = bucket.try_acquire_n_at(0, Nanos::ZERO).unwrap();
    assert_eq!(query.reset_after(), Duration::MAX);
    let denied = bucket.try_acquire_n_at(1 << 48, Nanos::ZERO).unwrap_err();
    let denied = denied.denied().unwrap();
    assert_eq!(denied.retry_after(), Duration::MAX);
    assert_eq!(denied.reset_after(), Duration::MAX);
    assert_eq!(denied.retry_at(), Nanos::new(u64::MAX));
    assert_eq!(query.next_after(), Some(Duration::from_nanos(10_059 << 33)));
    assert_eq!(
        denied.next_after(),
        Some(Duration::from_nanos(10_059 << 33))
    );
}

/// With a time unit coarser than 1 ns, a full bucket's refill restarts at the reading rounded up
/// to a whole unit, while its figures are counted from the reading rounded down: the next token
/// after taking from a full bucket is one interval and one unit from the unit of the reading.
#[test]
fn next_after_counts_the_refill_from_the_reading_rounded_up() {
    // One per day, capacity 2^40: units of 2^25 ns, an interval of 2_574_921 units.
    const T0: u64 = (1 << 25) - 1;
    let quota = Quota::per_day(1).unwrap().with_capacity(1 << 40).unwrap();
    let p = policy(1, Duration::from_secs(86_400), 1 << 40);
    let mut model = RefBucket::new(p, 1 << 40, T0).unwrap();
    // Built at 0, so its units fall on multiples of 2^25 ns (a bucket's units start at its
    // construction reading) and T0 is not a whole unit; full at T0, as the model is.
    let bucket = TokenBucket::with_clock(quota, ManualClock::new());
    let next = ((2_574_921u128 + 1) << 25) - u128::from(T0);
    let got = testkit::outcome::observe_one(bucket.try_acquire_at(Nanos::new(T0)));
    assert!(
        matches!(got, Outcome::Admitted { next_after_ns: Some(n), .. } if n == next),
        "{got:?}"
    );
    assert_eq!(model.acquire(1, T0), got);
    // Exactly then, and not a nanosecond before, the bucket holds all its tokens again.
    let then = T0 + u64::try_from(next).unwrap();
    assert_eq!(bucket.remaining_at(Nanos::new(then - 1)), (1 << 40) - 1);
    assert_eq!(bucket.remaining_at(Nanos::new(then)), 1 << 40);
}

/// The rate bound in nanoseconds, where the time unit is coarser than 1 ns (a regression test).
///
/// With one per day, a capacity of 2^40 and so a unit of 2^25 ns and an interval of 2_574_921 units
/// (86_400_011_599_872 ns), a bucket full at the last nanosecond of unit 0 once restarted its refill
/// at the start of unit 0: it admitted `C + 1` tokens within 86_399_978_045_441 ns, less than the
/// one day that one more token needs. A full bucket's refill now restarts at the reading rounded up.
#[test]
fn rate_bound_holds_in_nanoseconds_with_coarse_units() {
    const T0: u64 = (1 << 25) - 1;
    const T1: u64 = 86_400_011_599_872;
    let quota = Quota::per_day(1).unwrap().with_capacity(1 << 40).unwrap();
    let bucket = TokenBucket::with_clock(quota, ManualClock::starting_at(Nanos::new(T0)));
    let mut admitted: u64 = 0;
    if bucket.try_acquire_n_at(1 << 40, Nanos::new(T0)).is_ok() {
        admitted += 1 << 40;
    }
    if bucket.try_acquire_at(Nanos::new(T1)).is_ok() {
        admitted += 1;
    }
    // C + floor(R × t) with R = 1 / 86_400 s and t = T1 - T0 < 86_400 s.
    const _: () = assert!(T1 - T0 < 86_400_000_000_000);
    assert!(admitted <= 1 << 40, "{admitted} admitted in {} ns", T1 - T0);
}

/// A direct limiter's time units start at its construction reading. With coarse units (here
/// 2 ns: one token per 2^61 ns, capacity 4, so the burst window exceeds 2^62 ns) a full bucket
/// built at an odd reading used to count itself full from that reading rounded down, so a clock
/// stepping back one nanosecond could take the whole burst there and start the refill before the
/// bucket existed: the fifth token came 1 ns before `C + R × t` (counted from construction)
/// allows it, the case CI's sharded proptest found. Now the earlier reading sees the bucket not
/// yet full, and the fifth token comes exactly at the bound. The model, begun at the same reading,
/// agrees.
#[test]
fn time_units_start_at_the_construction_reading() {
    const BUILT: u64 = 5;
    const I_NS: u64 = 1 << 61;
    let quota = Quota::per_period(1, Duration::from_nanos(I_NS))
        .unwrap()
        .with_capacity(4)
        .unwrap();
    let p = policy(1, Duration::from_nanos(I_NS), 4);
    assert_eq!(p.shift, 1, "coarse units, or the case tests nothing");
    let mut model = RefBucket::new(p.begun_at(BUILT), 4, BUILT).unwrap();
    let bucket = TokenBucket::with_clock(quota, ManualClock::starting_at(Nanos::new(BUILT)));
    let sharded = ShardedBucket::builder(quota)
        .shards(1)
        .clock(ManualClock::starting_at(Nanos::new(BUILT)))
        .build()
        .unwrap();
    let meter = LeakyMeter::with_clock(quota, ManualClock::starting_at(Nanos::new(BUILT)));
    let (early, built) = (Nanos::new(BUILT - 1), Nanos::new(BUILT));
    // One nanosecond before construction the bucket is not yet full: the burst waits for it.
    let want = model.acquire(4, BUILT - 1);
    assert!(
        matches!(
            want,
            Outcome::Denied {
                retry_at_ns: BUILT,
                ..
            }
        ),
        "{want:?}"
    );
    assert_eq!(
        testkit::outcome::observe(bucket.try_acquire_n_at(4, early)),
        want
    );
    let retry_at = |r: Result<_, AcquireError>| r.unwrap_err().denied().map(|d| d.retry_at());
    assert_eq!(retry_at(sharded.try_acquire_n_at(4, early)), Some(built));
    assert_eq!(retry_at(meter.try_acquire_n_at(4, early)), Some(built));
    assert!(model.acquire(4, BUILT).is_admitted());
    assert!(bucket.try_acquire_n_at(4, built).is_ok());
    assert!(sharded.try_acquire_n_at(4, built).is_ok());
    assert!(meter.try_acquire_n_at(4, built).is_ok());
    // C + R × t reaches 5 at BUILT + I_NS, and the fifth token comes then, read from before.
    let ready = Nanos::new(BUILT + I_NS);
    let want = model.acquire(1, BUILT - 1);
    let denial = bucket.try_acquire_at(early).unwrap_err();
    assert_eq!(testkit::outcome::observe_one(Err(denial)), want);
    assert_eq!(denial.retry_at(), ready);
    assert_eq!(sharded.try_acquire_at(early).unwrap_err().retry_at(), ready);
    // The meter's `try_acquire` admits only a request that leaves at once: when its queue of
    // four, which began at BUILT, is empty.
    assert_eq!(
        meter.try_acquire_at(early).unwrap_err().retry_at(),
        Nanos::new(BUILT + 4 * I_NS)
    );
    assert!(bucket.try_acquire_at(Nanos::new(BUILT + I_NS - 1)).is_err());
    assert!(bucket.try_acquire_at(ready).is_ok());
}

/// A few quotas straight through the shared driver, so a failure here names a simple case.
#[test]
fn driver_smoke() {
    let spec = QuotaSpec {
        rate: Rate::Period(7, Duration::from_millis(10)),
        capacity: Some(3),
        initial: Some(1),
        initial_first: true,
    };
    let ops = [
        Op::Call(Request::at(Call::Acquire(Amount::Limit))),
        Op::Call(Request::via_clock(Call::AcquireOne)),
        Op::Time(Step::Units { num: 3, den: 2 }),
        Op::Call(Request::at(Call::Peek(Amount::Few(2)))),
        Op::Time(Step::BackNanos(100)),
        Op::Refund {
            n: Amount::Raw(u64::MAX),
            clock: true,
        },
        Op::Time(Step::ToMax),
        Op::Call(Request::via_clock(Call::Remaining)),
    ];
    run(&spec, 12_345, &ops);
}
