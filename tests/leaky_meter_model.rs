//! `LeakyMeter` against an exact reference model (`tests/support/meter_reference.rs`, a list of
//! departure spans): random quotas and random operation sequences, scheduled and strict, with clocks
//! that jump forwards by years and step backwards, must get answers identical to the nanosecond
//! (delays, departure instants, queue lengths, `retry_after`); plus the spacing promise checked
//! without the model, the exactness of `retry_at`, and hand-computed cases that pin the model itself.

use proptest::prelude::*;
use testkit::driver::bucket as bucket_driver;
use testkit::driver::meter as meter_driver;
use testkit::reference::bucket as reference;
use testkit::reference::meter as meter_reference;
use testkit::strategies as bucket_strategies;
use testkit::Outcome;

use bucket_strategies::{amount, fraction, rate, request, spread, start, step, via_clock};
use tollgate::{leaky::LeakyMeter, AcquireError, ManualClock, Nanos, Quota};

use bucket_driver::{check_quota, QuotaSpec};
use meter_driver::{check_departures, observe_schedule, run, MeterOp};
use meter_reference::{RefMeter, RefSchedule};
use reference::RefPolicy;
use testkit::driver::limiter::{check_retry_exact, Amount};

// ---------------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------------

/// Mostly valid quotas: small capacities (where refusals happen often), huge ones (coarse time
/// units), the maximum, and any; initial fills empty, full, partial or anything.
fn quota_spec() -> impl Strategy<Value = QuotaSpec> {
    (
        rate(),
        0u8..7,
        any::<u64>(),
        0u8..5,
        any::<u64>(),
        any::<bool>(),
    )
        .prop_map(|(rate, cap, x, init, y, initial_first)| {
            let max = rate.max_capacity();
            let capacity = match cap {
                0 => None,
                1 => Some(1),
                2 => Some((1 + x % 8).min(max)),
                3 => Some(max.min(1 << 40)),
                4 => Some(max),
                5 => Some(fraction(max, x as u16).max(1)),
                _ => Some(x),
            };
            let c = capacity.unwrap_or(rate.count());
            let initial = match init {
                0 => None,
                1 => Some(0),
                2 => Some(c),
                3 => Some(fraction(c, y as u16)),
                _ => Some(y),
            };
            QuotaSpec {
                rate,
                capacity,
                initial,
                initial_first,
            }
        })
}

/// Scheduling calls, the strict calls every limiter answers, and clock steps in intervals.
fn op() -> impl Strategy<Value = MeterOp> {
    prop_oneof![
        6 => (amount(), via_clock()).prop_map(|(n, clock)| MeterOp::Schedule { n, clock }),
        4 => via_clock().prop_map(|clock| MeterOp::ScheduleOne { clock }),
        2 => (amount(), via_clock()).prop_map(|(n, clock)| MeterOp::PeekSchedule { n, clock }),
        9 => request().prop_map(MeterOp::Call),
        7 => step().prop_map(MeterOp::Time),
    ]
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(testkit::strategies::unpersisted(1024))]

    /// Every answer of every operation equals the model's, to the nanosecond.
    #[test]
    fn meter_matches_reference_model(
        spec in quota_spec(),
        start in start(),
        ops in prop::collection::vec(op(), 64),
    ) {
        run(&spec, start, &ops);
    }

    /// Requests read anywhere in a few intervals, in any order, scheduled or strict, get departure
    /// spans that never overlap and never put more than C in the queue.
    #[test]
    fn departures_never_overlap_nor_overfill(
        spec in quota_spec(),
        start in start(),
        requests in prop::collection::vec((spread(), prop::bool::weighted(0.3)), 0..=128),
    ) {
        let interval_ns = spec.rate.interval_ns().unwrap_or(1);
        let requests: Vec<(u64, Amount, bool)> = requests
            .into_iter()
            .map(|((offset, n), strict)| (offset.next(0, interval_ns), n, strict))
            .collect();
        check_departures(&spec, start, &requests);
    }

    /// A refusal's `retry_at` is the earliest reading at which the same request fits: a peek there
    /// succeeds, a peek one nanosecond earlier does not, for scheduled and strict requests alike.
    #[test]
    fn retry_at_is_the_earliest_fitting_reading(
        spec in quota_spec(),
        start in 0u64..=(1 << 61),
        taken in amount(),
        wanted in amount(),
        back in prop_oneof![Just(0u64), 0u64..=1_000_000_000_000],
    ) {
        let Some((quota, policy, _)) = check_quota(&spec) else {
            return Ok(());
        };
        let meter = LeakyMeter::with_clock(quota, ManualClock::new());
        let _ = meter.try_schedule_n_at(taken.resolve(policy.capacity), Nanos::new(start));
        let now = start.saturating_sub(back);
        let n = wanted.resolve(policy.capacity);
        if let Err(AcquireError::Denied(denied)) = meter.peek_schedule_n_at(n, Nanos::new(now)) {
            let at = denied.retry_at();
            if at < Nanos::MAX_USABLE {
                prop_assert!(meter.peek_schedule_n_at(n, at).is_ok(), "not scheduled at {:?}", at);
                prop_assert!(meter.peek_schedule_n_at(n, Nanos::new(at.as_u64() - 1)).is_err());
            }
        }
        if let Err(AcquireError::Denied(denied)) = meter.peek_n_at(n, Nanos::new(now)) {
            check_retry_exact(&meter, n, denied.retry_at(), &|| format!("strict {n} at {now}"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-computed cases: these pin the model (and the crate) to numbers worked out on paper.
// ---------------------------------------------------------------------------------------------

fn scheduled(
    delay_ns: u128,
    depart_at_ns: u64,
    queued: u64,
    remaining: u64,
    reset_after_ns: u128,
    next_after_ns: Option<u128>,
) -> RefSchedule {
    RefSchedule::Scheduled {
        delay_ns,
        depart_at_ns,
        queued,
        remaining,
        reset_after_ns,
        next_after_ns,
    }
}

/// Three per second, capacity 3: the interval 1 s / 3 rounds up to 333_333_334 ns.
#[test]
fn three_per_second_burst_is_spaced_and_the_fourth_refused() {
    const I: u64 = 333_333_334;
    let p = RefPolicy::new(3, 1_000_000_000, 3).unwrap();
    let mut model = RefMeter::new(p, 3, 0).unwrap();
    let meter = LeakyMeter::with_clock(Quota::per_second(3).unwrap(), ManualClock::new());
    let expect = [
        // One place comes free each time the first in the queue has drained, an interval on.
        scheduled(0, 0, 1, 2, u128::from(I), Some(u128::from(I))),
        scheduled(
            u128::from(I),
            I,
            2,
            1,
            u128::from(2 * I),
            Some(u128::from(I)),
        ),
        scheduled(
            u128::from(2 * I),
            2 * I,
            3,
            0,
            u128::from(3 * I),
            Some(u128::from(I)),
        ),
        RefSchedule::Refused(Outcome::denied_until(
            u128::from(I),
            I,
            0,
            u128::from(3 * I),
            Some(u128::from(I)),
        )),
    ];
    for want in expect {
        assert_eq!(model.schedule(1, 0), want);
        assert_eq!(
            observe_schedule(meter.try_schedule_n_at(1, Nanos::new(0))),
            want
        );
    }
    // Half an interval later: the first is leaving, still counted; a strict request waits it all.
    let half = I / 2;
    let want = Outcome::Denied {
        retry_after_ns: u128::from(3 * I - half),
        retry_at_ns: 3 * I,
        remaining: 0,
        reset_after_ns: u128::from(3 * I - half),
        next_after_ns: Some(u128::from(I - half)),
    };
    assert_eq!(model.peek(1, half), want);
    assert_eq!(
        testkit::outcome::observe(meter.peek_n_at(1, Nanos::new(half))),
        want
    );
    // At the retry reading the fourth is scheduled behind the third.
    let want = scheduled(
        u128::from(2 * I),
        3 * I,
        3,
        0,
        u128::from(3 * I),
        Some(u128::from(I)),
    );
    assert_eq!(model.schedule(1, I), want);
    assert_eq!(
        observe_schedule(meter.try_schedule_at(Nanos::new(I)).map_err(Into::into)),
        want
    );
}

/// One per day with a capacity of 2^40 needs time units of 2^25 ns (interval 2_574_921 units): a
/// request read inside a unit departs at the next whole unit, and its delay says so exactly.
#[test]
fn coarse_units_round_the_departure_up_and_report_it_exactly() {
    const UNIT: u64 = 1 << 25;
    const I: u64 = 2_574_921 * UNIT;
    let p = RefPolicy::new(1, 86_400_000_000_000, 1 << 40).unwrap();
    assert_eq!((p.shift, p.interval), (25, 2_574_921));
    let quota = Quota::per_day(1).unwrap().with_capacity(1 << 40).unwrap();
    let mut model = RefMeter::new(p, 1 << 40, 0).unwrap();
    let meter = LeakyMeter::with_clock(quota, ManualClock::new());
    let want = scheduled(
        u128::from(UNIT - 1_000),
        UNIT,
        1,
        (1 << 40) - 1,
        u128::from(UNIT + I - 1_000),
        // The place comes back when the request has left, a whole interval after its departure.
        Some(u128::from(UNIT + I - 1_000)),
    );
    assert_eq!(model.schedule(1, 1_000), want);
    assert_eq!(
        observe_schedule(meter.try_schedule_n_at(1, Nanos::new(1_000))),
        want
    );
    // The next leaves exactly one (rounded) interval later. Counted from the reading rounded down
    // to its unit, the queue also holds the unit the first departure was rounded up by, so two
    // requests read as three (the documented conservative rounding of coarse units).
    let want = scheduled(
        u128::from(UNIT + I - 2_000),
        UNIT + I,
        3,
        (1 << 40) - 3,
        u128::from(UNIT + 2 * I - 2_000),
        // The rounding unit counted as a third request is gone at the end of the reading's unit.
        Some(u128::from(UNIT - 2_000)),
    );
    assert_eq!(model.schedule(1, 2_000), want);
    assert_eq!(
        observe_schedule(meter.try_schedule_n_at(1, Nanos::new(2_000))),
        want
    );
}
