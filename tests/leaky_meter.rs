//! `LeakyMeter` with explicit readings: bursts are spaced one interval apart, the queue is refused
//! with an exact `retry_after`, strict acquisition spaces without bursts, and queries, impossible
//! requests, clocks that step back, idle periods of any length and readings at `u64::MAX` behave as
//! the module docs say.

use std::time::Duration;

use tollgate::{
    leaky::LeakyMeter, AcquireError, Clock, Denied, InsufficientCapacity, ManualClock, Nanos,
    Quota, Scheduled,
};

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000 * MS;

/// 10 per second (I = 100 ms) with room for `capacity` in the queue.
fn meter(capacity: u64) -> LeakyMeter<ManualClock> {
    let quota = Quota::per_second(10)
        .unwrap()
        .with_capacity(capacity)
        .unwrap();
    LeakyMeter::with_clock(quota, ManualClock::new())
}

fn t(ns: u64) -> Nanos {
    Nanos::new(ns)
}

fn schedule(m: &LeakyMeter<ManualClock>, n: u64, at: u64) -> Result<Scheduled, AcquireError> {
    m.try_schedule_n_at(n, t(at))
}

fn denied(result: Result<Scheduled, AcquireError>) -> Denied {
    match result {
        Err(AcquireError::Denied(d)) => d,
        other => panic!("expected a denial, got {other:?}"),
    }
}

#[test]
fn a_burst_of_c_gets_delays_zero_i_2i_and_the_next_an_exact_retry() {
    let m = meter(5);
    let now = 3 * SEC + 17;
    for k in 0..5 {
        let s = m.try_schedule_at(t(now)).unwrap();
        assert_eq!(s.delay(), Duration::from_millis(100 * k));
        assert_eq!(s.depart_at(), t(now + k * 100 * MS));
        assert_eq!((s.queued(), s.remaining()), (k + 1, 4 - k));
        assert_eq!(s.reset_after(), Duration::from_millis(100 * (k + 1)));
    }
    let d = m.try_schedule_at(t(now)).unwrap_err();
    assert_eq!(d.retry_after(), Duration::from_millis(100));
    assert_eq!(d.retry_at(), t(now + 100 * MS));
    assert_eq!(d.remaining(), 0);
    assert_eq!(d.reset_after(), Duration::from_millis(500));
    // One nanosecond before the retry reading: still full. At it: scheduled behind the fifth.
    assert!(m.try_schedule_at(t(now + 100 * MS - 1)).is_err());
    let s = m.try_schedule_at(d.retry_at()).unwrap();
    assert_eq!(s.depart_at(), t(now + 500 * MS));
    assert_eq!(s.delay(), Duration::from_millis(400));
    assert_eq!(s.queued(), 5);
}

#[test]
fn callers_that_wait_out_their_delays_leave_exactly_one_interval_apart() {
    let m = meter(8);
    // Arrivals: 3 at once, 2 a little later, 3 more after a pause; the departures are a metronome.
    let arrivals = [0, 0, 0, 40 * MS, 41 * MS, 250 * MS, 250 * MS, 251 * MS];
    let departures: Vec<u64> = arrivals
        .iter()
        .map(|&a| m.try_schedule_at(t(a)).unwrap().depart_at().as_u64())
        .collect();
    let expected: Vec<u64> = (0..8).map(|k| k * 100 * MS).collect();
    assert_eq!(departures, expected);
}

#[test]
fn a_request_for_n_holds_the_queue_for_n_intervals() {
    let m = meter(10);
    let a = schedule(&m, 3, 0).unwrap();
    assert_eq!(
        (a.delay(), a.queued(), a.remaining()),
        (Duration::ZERO, 3, 7)
    );
    let b = schedule(&m, 7, 0).unwrap();
    assert_eq!(b.delay(), Duration::from_millis(300));
    assert_eq!(b.queued(), 10);
    let d = denied(schedule(&m, 4, 0));
    assert_eq!(d.retry_after(), Duration::from_millis(400));
    assert!(schedule(&m, 4, 400 * MS - 1).is_err());
    assert_eq!(
        schedule(&m, 4, 400 * MS).unwrap().depart_at(),
        t(SEC),
        "behind all ten"
    );
}

#[test]
fn strict_acquisition_admits_one_per_interval_and_no_burst() {
    let m = meter(10);
    assert_eq!(m.try_acquire_at(t(0)).unwrap().remaining(), 9);
    // Nine places are free, yet the queue is not empty: refused until the first has left.
    let d = m.try_acquire_at(t(30 * MS)).unwrap_err();
    assert_eq!(d.retry_after(), Duration::from_millis(70));
    assert_eq!(d.retry_at(), t(100 * MS));
    assert_eq!(d.remaining(), 9);
    assert!(m.try_acquire_at(t(100 * MS - 1)).is_err());
    assert!(m.try_acquire_at(t(100 * MS)).is_ok());
    // Over a second of trying every millisecond, exactly one admission per 100 ms.
    let admitted = (101..1_100)
        .filter(|ms| m.try_acquire_at(t(ms * MS)).is_ok())
        .count();
    assert_eq!(admitted, 9);
}

#[test]
fn strict_and_scheduled_requests_share_one_queue() {
    let m = meter(4);
    m.try_schedule_at(t(0)).unwrap();
    m.try_schedule_at(t(0)).unwrap();
    // A strict request never cuts in front: it waits for both to leave.
    let d = m.try_acquire_n_at(1, t(0)).unwrap_err();
    assert_eq!(
        d.denied().unwrap().retry_after(),
        Duration::from_millis(200)
    );
    // After a strict admission of 2 at 200 ms, the next scheduled request leaves at 400 ms.
    assert_eq!(m.try_acquire_n_at(2, t(200 * MS)).unwrap().remaining(), 2);
    assert_eq!(
        m.try_schedule_at(t(200 * MS)).unwrap().depart_at(),
        t(400 * MS)
    );
}

#[test]
fn zero_is_a_query_that_writes_nothing() {
    let m = meter(3);
    let q = schedule(&m, 0, 0).unwrap();
    assert_eq!(
        (q.delay(), q.queued(), q.remaining()),
        (Duration::ZERO, 0, 3)
    );
    m.try_schedule_n_at(3, t(0)).unwrap();
    for _ in 0..3 {
        let q = schedule(&m, 0, 50 * MS).unwrap();
        assert_eq!(q.delay(), Duration::from_millis(250));
        assert_eq!(q.depart_at(), t(300 * MS));
        assert_eq!((q.queued(), q.remaining()), (3, 0));
        assert_eq!(q.reset_after(), Duration::from_millis(250));
        let a = m.try_acquire_n_at(0, t(50 * MS)).unwrap();
        assert_eq!(a.remaining(), 0);
    }
    assert_eq!(m.remaining_at(t(50 * MS)), 0);
    assert_eq!(m.remaining_at(t(100 * MS)), 1);
}

#[test]
fn more_than_the_capacity_is_never_possible_and_says_so() {
    let m = meter(3);
    let never = InsufficientCapacity {
        requested: 4,
        capacity: 3,
    };
    assert_eq!(
        schedule(&m, 4, 0).unwrap_err(),
        AcquireError::InsufficientCapacity(never)
    );
    assert_eq!(
        m.try_acquire_n_at(4, t(0)).unwrap_err(),
        AcquireError::InsufficientCapacity(never)
    );
    assert!(m.peek_n_at(u64::MAX, t(0)).unwrap_err().denied().is_none());
    assert!(m
        .peek_schedule_n_at(u64::MAX, t(0))
        .unwrap_err()
        .denied()
        .is_none());
    assert_eq!(m.remaining_at(t(0)), 3, "and took nothing");
}

#[test]
fn a_clock_stepping_back_never_frees_places_nor_schedules_earlier() {
    let m = meter(4);
    let now = 10 * SEC;
    m.try_schedule_n_at(2, t(now)).unwrap();
    let drain = now + 200 * MS;
    // Earlier readings see a longer queue, never a shorter one.
    let later = m.remaining_at(t(now));
    for back in [1, 50 * MS, SEC, now] {
        assert!(m.remaining_at(t(now - back)) <= later);
    }
    assert_eq!(m.remaining_at(t(now - 100 * MS)), 1);
    assert_eq!(m.remaining_at(t(now - SEC)), 0);
    // A scheduling read earlier still departs at the drain time, and its delay counts from its reading.
    let s = m.try_schedule_at(t(now - 100 * MS)).unwrap();
    assert_eq!(s.depart_at(), t(drain));
    assert_eq!(s.delay(), Duration::from_millis(300));
    // A reading a second back finds the queue (by then 3 long) over-full: refused, not freed.
    let d = m.try_schedule_at(t(now - SEC)).unwrap_err();
    assert_eq!(d.retry_at(), t(now));
    assert!(m.try_acquire_at(t(now - SEC)).is_err());
    assert!(m.try_acquire_at(t(0)).is_err());
    // Going forward again, nothing was lost: the queue drains at drain + I.
    assert_eq!(
        m.try_acquire_at(t(drain + 100 * MS)).unwrap().remaining(),
        3
    );
}

#[test]
fn a_reading_before_the_meter_was_built_sees_no_free_places_gained() {
    let quota = Quota::per_second(10).unwrap().with_capacity(4).unwrap();
    let m = LeakyMeter::with_clock(quota, ManualClock::starting_at(t(SEC)));
    assert_eq!(m.remaining_at(t(SEC)), 4);
    assert_eq!(m.remaining_at(t(SEC - 100 * MS)), 3);
    assert_eq!(
        m.try_schedule_at(t(SEC - 100 * MS)).unwrap().depart_at(),
        t(SEC)
    );
}

#[test]
fn an_idle_period_of_any_length_empties_the_queue_and_no_further() {
    for idle in [
        SEC,
        3_600 * SEC,
        1 << 61,
        (1 << 62) - 1,
        1 << 62,
        u64::MAX - 1,
    ] {
        let m = meter(5);
        m.try_schedule_n_at(5, t(0)).unwrap();
        let at = t(idle);
        assert_eq!(m.remaining_at(at), 5, "idle {idle}");
        for k in 0..5 {
            let s = m.try_schedule_at(at).unwrap();
            assert_eq!(s.delay(), Duration::from_millis(100 * k), "idle {idle}");
        }
        assert!(m.try_schedule_at(at).is_err());
    }
}

#[test]
fn readings_at_u64_max_are_clamped_and_nothing_overflows() {
    let max = t(u64::MAX);
    for quota in [
        Quota::per_second(1_000_000_000)
            .unwrap()
            .with_capacity(1 << 62)
            .unwrap(),
        Quota::per_day(1).unwrap().with_capacity(1 << 40).unwrap(),
        Quota::per_period(1, Duration::from_nanos(1 << 62)).unwrap(),
    ] {
        let m = LeakyMeter::with_clock(quota, ManualClock::starting_at(max));
        let c = quota.capacity();
        let s = m.try_schedule_n_at(c, max).unwrap();
        assert_eq!(s.queued(), c);
        assert_eq!(s.remaining(), 0);
        let d = denied(m.try_schedule_n_at(c, max));
        // The retry reading is past the clamp; it saturates rather than wraps.
        assert!(d.retry_at() >= Nanos::MAX_USABLE);
        assert!(m.try_acquire_n_at(c, max).is_err());
        assert!(m.try_schedule_n_at(0, max).is_ok());
        assert_eq!(m.remaining_at(max), 0);
        assert_eq!(m.remaining_at(t(0)), 0);
        let _ = format!("{s} {d} {m:?}");
    }
}

#[test]
fn a_partial_initial_fill_starts_with_a_backlog() {
    let quota = Quota::per_second(10)
        .unwrap()
        .with_capacity(5)
        .unwrap()
        .with_initial(2)
        .unwrap();
    let m = LeakyMeter::with_clock(quota, ManualClock::starting_at(t(SEC)));
    assert_eq!(m.remaining(), 2);
    assert_eq!(
        m.try_acquire().unwrap_err().retry_after(),
        Duration::from_millis(300)
    );
    let s = m.try_schedule().unwrap();
    assert_eq!((s.delay(), s.queued()), (Duration::from_millis(300), 4));
    // Empty at the start: with_initial(0) is a queue of C.
    let full = LeakyMeter::with_clock(quota.with_initial(0).unwrap(), ManualClock::new());
    assert_eq!(
        full.try_schedule().unwrap_err().retry_after(),
        Duration::from_millis(100)
    );
}

#[test]
fn a_capacity_of_one_is_strict_spacing_for_scheduling_too() {
    let m = meter(1);
    assert!(m.try_schedule_at(t(0)).unwrap().delay().is_zero());
    let d = m.try_schedule_at(t(10 * MS)).unwrap_err();
    assert_eq!(d.retry_at(), t(100 * MS));
    assert!(m.try_schedule_at(t(100 * MS)).unwrap().delay().is_zero());
}

#[test]
fn the_clock_reading_forms_match_the_explicit_ones() {
    let m = meter(3);
    m.clock().set(t(5 * SEC));
    assert_eq!(m.try_schedule().unwrap().depart_at(), t(5 * SEC));
    assert_eq!(
        m.try_schedule_n(1).unwrap().depart_at(),
        t(5 * SEC + 100 * MS)
    );
    assert_eq!(
        m.peek_schedule_n(1).unwrap().delay(),
        Duration::from_millis(200)
    );
    assert!(m.try_acquire().is_err());
    assert!(m.peek_n(1).is_err());
    assert_eq!(m.remaining(), 1);
    m.clock().advance(Duration::from_millis(200));
    assert!(m.try_acquire_n(1).is_ok());
    assert_eq!(m.clock().now(), t(5 * SEC + 200 * MS));
    assert_eq!(m.quota().capacity(), 3);
}

#[test]
fn outcomes_display_and_compare() {
    let m = meter(2);
    let s = m.try_schedule_at(t(0)).unwrap();
    assert_eq!(
        s.to_string(),
        "scheduled: leaves in 0ns, 1 queued, 1 places free"
    );
    assert_eq!(s, s.clone());
    let s = m.try_schedule_at(t(0)).unwrap();
    assert_eq!(
        s.to_string(),
        "scheduled: leaves in 100ms, 2 queued, 0 places free"
    );
    let d = m.try_schedule_at(t(0)).unwrap_err();
    assert!(d.to_string().starts_with("rate limited: retry after 100ms"));
    assert!(format!("{m:?}").starts_with("LeakyMeter { quota: "));
}
