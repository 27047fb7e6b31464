//! The keyed limiter through its public API: the same answers as a direct `TokenBucket` per key,
//! borrowed lookups, the key bound and both overflow policies, the counters, and real threads
//! racing admissions against evictions and against each other's inserts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::thread;

use tollgate::keyed::{
    Algorithm, FixedWindowKeys, KeyedError, KeyedLimiter, LeakyMeterKeys, Overflow,
    SlidingWindowCounterKeys, SlidingWindowLogKeys, Tiered, TokenBucketKeys, TooManyKeys,
};
use tollgate::{
    AcquireError, Admitted, Clock, Direct, FixedWindowAlgorithm, LeakyMeterAlgorithm, ManualClock,
    Nanos, Quota, QuotaError, SlidingWindowCounterAlgorithm, SlidingWindowLogAlgorithm,
    TokenBucketAlgorithm,
};

type Limiter<K> = KeyedLimiter<K, TokenBucketKeys, ManualClock>;

const SEC: u64 = 1_000_000_000;

fn limiter<K: std::hash::Hash + Eq + Clone>(quota: Quota) -> Limiter<K> {
    KeyedLimiter::with_clock(quota, ManualClock::new())
}

/// A keyed answer as the direct bucket's type, for comparison.
fn as_direct(result: Result<Admitted, KeyedError>) -> Result<Admitted, AcquireError> {
    match result {
        Ok(admitted) => Ok(admitted),
        Err(KeyedError::Denied(d)) => Err(AcquireError::Denied(d)),
        Err(KeyedError::InsufficientCapacity(e)) => Err(AcquireError::InsufficientCapacity(e)),
        Err(e) => panic!("unexpected {e}"),
    }
}

/// The global allocator, wrapped to count the bytes each thread allocates, so that a test can see
/// what one call built without timing it (tests run in parallel, each on its own thread).
struct CountingAlloc;

thread_local! {
    /// Bytes allocated by this thread so far. A `const` cell with no destructor: reading or
    /// bumping it never allocates.
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds `GlobalAlloc`'s contract; the
// counting beside it touches only a thread-local `Cell` (no allocation, no reentry).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATED.with(|a| a.set(a.get() + layout.size() as u64));
        // SAFETY: the caller's obligations for `alloc` are passed on unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with this `layout` (every allocation goes through it).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATED.with(|a| a.set(a.get() + new_size as u64));
        // SAFETY: as for `dealloc`, and the caller's obligations for `realloc` are passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: CountingAlloc = CountingAlloc;

/// Bytes this thread has allocated so far.
fn allocated_here() -> u64 {
    ALLOCATED.with(Cell::get)
}

/// A small deterministic generator (xorshift), so the sequence is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A direct limiter of algorithm `D` for `quota`, on a manual clock reading `at`: what a keyed
/// limiter's key is compared with.
fn fresh_direct<D: Algorithm>(quota: Quota, at: Nanos) -> Direct<D, ManualClock> {
    Direct::with_algorithm(quota, ManualClock::starting_at(at))
        .expect("a quota the keyed limiter took")
}

/// Runs 20 000 random operations (12 keys, clock steps both ways) on `keyed` and on a map of
/// direct limiters of algorithm `D`, one per key, created fresh at the key's first admission, and asserts
/// identical answers throughout. Returns the direct map, for the caller's checks.
fn answers_as_direct<A: Algorithm, D: Algorithm>(
    keyed: &KeyedLimiter<u32, A, ManualClock>,
    quota: Quota,
    seed: u64,
) -> HashMap<u32, Direct<D, ManualClock>> {
    let mut direct: HashMap<u32, Direct<D, ManualClock>> = HashMap::new();
    let mut rng = Rng(seed);
    let mut now = 10 * SEC;
    for _ in 0..20_000 {
        match rng.below(10) {
            0 => now += rng.below(SEC),
            1 => now = now.saturating_sub(rng.below(SEC / 4)),
            _ => {}
        }
        let key = rng.below(12) as u32;
        let at = Nanos::new(now);
        let n = rng.below(7);
        match rng.below(4) {
            0 | 1 => {
                let got = as_direct(keyed.check_key_n_at(&key, n, at));
                let want = match direct.get(&key) {
                    Some(limiter) => limiter.try_acquire_n_at(n, at),
                    None => {
                        // A key's limiter starts fresh with its first admission.
                        let limiter = fresh_direct::<D>(quota, at);
                        let outcome = limiter.try_acquire_n_at(n, at);
                        if n > 0 && outcome.is_ok() {
                            direct.insert(key, limiter);
                        }
                        outcome
                    }
                };
                assert_eq!(got, want, "key {key} n {n} at {now}");
            }
            2 => {
                let got = as_direct(keyed.peek_key_n_at(&key, n, at));
                let want = match direct.get(&key) {
                    Some(limiter) => limiter.peek_n_at(n, at),
                    None => fresh_direct::<D>(quota, at).peek_n_at(n, at),
                };
                assert_eq!(got, want, "peek key {key} n {n} at {now}");
            }
            _ => {
                let want = direct
                    .get(&key)
                    .map_or(quota.capacity(), |l| l.remaining_at(at));
                assert_eq!(
                    keyed.remaining_key_at(&key, at),
                    want,
                    "remaining key {key} at {now}"
                );
            }
        }
    }
    assert_eq!(keyed.len(), direct.len());
    direct
}

/// Every key answers exactly as its own direct bucket created, full, at the key's first reading,
/// for the same operations at the same readings (backward steps included).
#[test]
fn each_key_answers_as_its_own_direct_bucket() {
    let quota = Quota::per_second(7).unwrap().with_capacity(5).unwrap();
    let keyed: Limiter<u32> = limiter(quota);
    answers_as_direct::<_, TokenBucketAlgorithm>(&keyed, quota, 0x9e37_79b9_7f4a_7c15);
    assert_eq!(keyed.evictions(), 0);
}

/// The same for the strict leaky meter: every key answers exactly as its own direct `LeakyMeter`'s
/// strict `try_acquire_n_at`, created (empty) at the key's first admission.
#[test]
fn each_meter_key_answers_as_its_own_direct_meter() {
    let quota = Quota::per_second(7).unwrap().with_capacity(5).unwrap();
    let keyed: KeyedLimiter<u32, LeakyMeterKeys, ManualClock> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    answers_as_direct::<_, LeakyMeterAlgorithm>(&keyed, quota, 0x2545_f491_4f6c_dd1d);
}

/// The window algorithms: every key answers exactly as its own direct window limiter, created at
/// the key's first admission (which starts from an empty window, as a keyed key created afresh
/// does at its first reading; backward steps included).
#[test]
fn each_window_key_answers_as_its_own_direct_window_limiter() {
    let quota = Quota::per_second(5).unwrap();
    let fixed: KeyedLimiter<u32, FixedWindowKeys, ManualClock> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    answers_as_direct::<_, FixedWindowAlgorithm>(&fixed, quota, 0x1234_5678_9abc_def1);
    let counter: KeyedLimiter<u32, SlidingWindowCounterKeys, ManualClock> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    answers_as_direct::<_, SlidingWindowCounterAlgorithm>(&counter, quota, 0x0f0f_1e1e_2d2d_3c3c);
    let log: KeyedLimiter<u32, SlidingWindowLogKeys, ManualClock> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    answers_as_direct::<_, SlidingWindowLogAlgorithm>(&log, quota, 0x5555_aaaa_3333_cccc);
}

/// A quota a window limiter cannot enforce is refused by the keyed limiter with the direct
/// limiter's error, naming the field.
#[test]
fn window_algorithms_refuse_the_quotas_their_direct_limiters_refuse() {
    let burst = Quota::per_second(5).unwrap().with_capacity(9).unwrap();
    let err = KeyedLimiter::<u8, FixedWindowKeys, _>::with_algorithm(burst, ManualClock::new())
        .unwrap_err();
    assert_eq!(err.field(), "capacity");
    let long = Quota::per_hour(100_000).unwrap();
    let err = KeyedLimiter::<u8, SlidingWindowLogKeys, _>::with_algorithm(long, ManualClock::new())
        .unwrap_err();
    assert!(matches!(err, QuotaError::Algorithm(l) if l.algorithm() == "sliding window log"));
    let keyed: KeyedLimiter<u8, TokenBucketKeys, _> =
        KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), ManualClock::new());
    assert_eq!(
        keyed.with_overflow(Overflow::Shared(burst)).map(|_| ()),
        Ok(())
    );
    let keyed: KeyedLimiter<u8, FixedWindowKeys, _> =
        KeyedLimiter::with_algorithm(Quota::per_second(1).unwrap(), ManualClock::new()).unwrap();
    assert_eq!(
        keyed
            .with_overflow(Overflow::Shared(burst))
            .unwrap_err()
            .field(),
        "capacity"
    );
}

/// Window keys are forgotten exactly when their windows are over, and a key created again after
/// that admits as a fresh one; a reading before the eviction's window admits nothing.
#[test]
fn window_keys_are_forgotten_when_their_windows_are_over() {
    let quota = Quota::per_second(2).unwrap();
    let fixed: KeyedLimiter<u8, FixedWindowKeys, _> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    fixed.check_key_n_at(&1, 2, Nanos::new(SEC / 2)).unwrap();
    // (An eviction judges at the clock's reading at the latest: the clock is where the test is.)
    fixed.clock().set(Nanos::new(SEC));
    assert_eq!(fixed.retain_recent_at(Nanos::new(SEC - 1)), 0);
    assert_eq!(fixed.retain_recent_at(Nanos::new(SEC)), 1);
    assert!(fixed.check_key_n_at(&1, 2, Nanos::new(SEC)).is_ok());
    // Back in the window before the eviction's: nothing, where the forgotten key had nothing left
    // either.
    assert!(fixed.check_key_at(&2, Nanos::new(SEC / 2)).is_err());

    let counter: KeyedLimiter<u8, SlidingWindowCounterKeys, _> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    counter.check_key_at(&1, Nanos::new(SEC / 2)).unwrap();
    counter.clock().set(Nanos::new(2 * SEC));
    // The previous window still counts throughout the next one.
    assert_eq!(counter.retain_recent_at(Nanos::new(2 * SEC - 1)), 0);
    assert_eq!(counter.retain_recent_at(Nanos::new(2 * SEC)), 1);

    let log: KeyedLimiter<u8, SlidingWindowLogKeys, _> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    log.check_key_at(&1, Nanos::new(SEC / 2)).unwrap();
    log.check_key_at(&1, Nanos::new(SEC)).unwrap();
    log.clock().set(Nanos::new(2 * SEC));
    assert_eq!(log.retain_recent_at(Nanos::new(2 * SEC - 1)), 0);
    assert_eq!(log.retain_recent_at(Nanos::new(2 * SEC)), 1);
    assert_eq!(log.remaining_key_at(&1, Nanos::new(2 * SEC)), 2);
    assert_eq!(log.remaining_key_at(&1, Nanos::new(2 * SEC - 1)), 0);
}

/// Eviction never changes a window key's decision on a clock that only moves forward: for each
/// window algorithm, a limiter that sweeps before every request answers exactly as one that never
/// sweeps.
#[test]
fn window_eviction_never_changes_a_decision() {
    let quota = Quota::per_second(4).unwrap();
    for evicted in [
        evicting_answers_as_keeping::<FixedWindowKeys>(quota, 11, SEC / 5, 6),
        evicting_answers_as_keeping::<SlidingWindowCounterKeys>(quota, 12, SEC / 5, 6),
        evicting_answers_as_keeping::<SlidingWindowLogKeys>(quota, 13, SEC / 5, 6),
        evicting_answers_as_keeping::<Tiered<SlidingWindowLogKeys>>(quota, 14, SEC / 5, 6),
    ] {
        assert!(evicted > 500, "{evicted}");
    }
}

/// Tiers: the function picks a key's quota when the key is first seen, the key keeps it while it
/// is held (even if the function would now answer otherwise), and is picked again once forgotten.
#[test]
fn a_key_keeps_its_tier_while_held_and_is_picked_again_after_eviction() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let premium = Arc::new(AtomicUsize::new(0));
    let picked = Arc::clone(&premium);
    let tiers = [
        Quota::per_second(2).unwrap(),
        Quota::per_second(10).unwrap(),
    ];
    let keyed: KeyedLimiter<String, Tiered<TokenBucketKeys>, ManualClock> =
        KeyedLimiter::with_tiers(
            &tiers,
            move |_: &String| picked.load(Ordering::Relaxed),
            ManualClock::new(),
        )
        .unwrap();
    assert_eq!(keyed.tiers(), &tiers);
    let t0 = Nanos::new(0);
    assert_eq!(keyed.check_key_at("u", t0).unwrap().remaining(), 1);
    premium.store(1, Ordering::Relaxed);
    // Still tier 0 while held; a new key gets tier 1.
    assert_eq!(keyed.check_key_at("u", t0).unwrap().remaining(), 0);
    assert!(keyed.check_key_at("u", t0).is_err());
    assert_eq!(keyed.remaining_key_at("v", t0), 10);
    assert!(matches!(
        keyed.check_key_n_at("u", 3, t0),
        Err(KeyedError::InsufficientCapacity(e)) if e.capacity == 2
    ));
    assert_eq!(keyed.check_key_n_at("v", 3, t0).unwrap().remaining(), 7);
    // Once full again, "u" is forgotten and comes back in tier 1.
    keyed.clock().set(Nanos::new(SEC));
    assert_eq!(keyed.retain_recent_at(Nanos::new(SEC)), 2);
    assert_eq!(
        keyed
            .check_key_at("u", Nanos::new(SEC))
            .unwrap()
            .remaining(),
        9
    );
    // An index past the end is the last tier.
    premium.store(7, Ordering::Relaxed);
    assert_eq!(keyed.remaining_key_at("w", Nanos::new(SEC)), 10);
    // Tier bounds.
    let too_many = vec![Quota::per_second(1).unwrap(); 257];
    let err = KeyedLimiter::<u8, Tiered, _>::with_tiers(&too_many, |_| 0, ManualClock::new())
        .unwrap_err();
    let QuotaError::Algorithm(limit) = err else {
        panic!("{err:?} is not the keyed limiter's own limit");
    };
    assert_eq!(
        (limit.algorithm(), limit.field(), limit.got(), limit.bound()),
        ("keyed limiter", "tiers", 257, 256)
    );
    assert_eq!(
        err.to_string(),
        "tiers of a keyed limiter must number between 1 and 256 (one byte per key), got 257"
    );
    assert!(
        KeyedLimiter::<u8, Tiered, _>::with_tiers(&too_many[..256], |_| 0, ManualClock::new())
            .is_ok()
    );
}

/// Each tier answers exactly as a direct limiter of its own quota.
#[test]
fn each_tier_answers_as_its_own_direct_limiter() {
    let tiers = [
        Quota::per_second(3).unwrap(),
        Quota::per_second(7).unwrap(),
        Quota::per_second(20).unwrap(),
    ];
    for (tier, quota) in tiers.iter().enumerate() {
        let keyed: KeyedLimiter<u32, Tiered<FixedWindowKeys>, ManualClock> =
            KeyedLimiter::with_tiers(&tiers, move |_: &u32| tier, ManualClock::new()).unwrap();
        answers_as_direct::<_, FixedWindowAlgorithm>(&keyed, *quota, 77 + tier as u64);
    }
}

/// The optional sweeper thread forgets idle keys on its own, and stops when told to. (Not under
/// loom, which has no sweeper thread.)
#[cfg(not(tollgate_loom))]
#[test]
fn the_sweeper_thread_forgets_idle_keys_and_stops() {
    let clock = ManualClock::new();
    let keyed: Arc<Limiter<u64>> = Arc::new(KeyedLimiter::with_clock(
        Quota::per_second(1).unwrap(),
        clock.clone(),
    ));
    for k in 0..100 {
        keyed.check_key(&k).unwrap();
    }
    let sweeper = keyed
        .spawn_sweeper(std::time::Duration::from_millis(5))
        .unwrap();
    assert_eq!(keyed.len(), 100, "nothing is idle yet");
    clock.advance(std::time::Duration::from_secs(1));
    // Eventually (the sweeper runs every 5 ms; this allows a minute on a loaded machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !keyed.is_empty() && std::time::Instant::now() < deadline {
        thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(keyed.is_empty());
    assert_eq!(keyed.evictions(), 100);
    sweeper.stop();
    // Stopped: a key idle from now on stays.
    keyed.check_key(&1).unwrap();
    clock.advance(std::time::Duration::from_secs(1));
    thread::sleep(std::time::Duration::from_millis(30));
    assert_eq!(keyed.len(), 1);
}

/// A sweeper thread ends soon after the last `Arc` of its limiter is dropped, whatever its
/// interval: the limiter's drop wakes it (an interval of an hour, or `Duration::MAX`, would
/// otherwise keep it waiting until its next tick, or forever). Waits up to 10 s: no timing claim.
#[cfg(not(tollgate_loom))]
#[test]
fn a_sweeper_ends_soon_after_its_limiter_is_dropped() {
    use std::time::{Duration, Instant};
    let keyed: Arc<Limiter<u64>> = Arc::new(limiter(Quota::per_second(1).unwrap()));
    let forever = keyed.spawn_sweeper(Duration::MAX).unwrap();
    let hourly = keyed.spawn_sweeper(Duration::from_secs(3600)).unwrap();
    keyed.check_key(&1).unwrap();
    assert!(!forever.is_finished() && !hourly.is_finished());
    drop(keyed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(forever.is_finished() && hourly.is_finished()) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    assert!(
        forever.is_finished(),
        "the Duration::MAX sweeper outlived its limiter"
    );
    assert!(
        hourly.is_finished(),
        "the hourly sweeper outlived its limiter"
    );
    // Stopping a sweeper leaves the others of the same limiter running.
    let keyed: Arc<Limiter<u64>> = Arc::new(limiter(Quota::per_second(1).unwrap()));
    let (first, second) = (
        keyed.spawn_sweeper(Duration::MAX).unwrap(),
        keyed.spawn_sweeper(Duration::MAX).unwrap(),
    );
    first.stop();
    thread::sleep(Duration::from_millis(20));
    assert!(!second.is_finished());
    drop(keyed);
    second.stop();
}

/// Eviction never changes a meter key's decision on a clock that only moves forward: an evicting
/// limiter (a sweep before every request) and one that never evicts answer alike throughout.
#[test]
fn meter_eviction_never_changes_a_decision() {
    let quota = Quota::per_second(10).unwrap().with_capacity(3).unwrap();
    let evicted =
        evicting_answers_as_keeping::<LeakyMeterKeys>(quota, 0xdead_beef_cafe_f00d, SEC / 20, 8);
    assert!(evicted > 1000, "{evicted}");
}

/// Runs 20 000 requests (clock steps forward of up to `max_step` ns, `keys` keys) on a limiter of
/// algorithm `A` that sweeps before every request and on one that never sweeps, asserting identical
/// answers and remaining counts throughout. Answers how many keys the first evicted.
fn evicting_answers_as_keeping<A: tollgate::keyed::Algorithm>(
    quota: Quota,
    seed: u64,
    max_step: u64,
    keys: u64,
) -> usize {
    let evicting: KeyedLimiter<u32, A, ManualClock> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    let keeping: KeyedLimiter<u32, A, ManualClock> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).unwrap();
    let mut rng = Rng(seed);
    let mut now = 0;
    let mut evicted = 0;
    for _ in 0..20_000 {
        now += rng.below(max_step);
        let at = Nanos::new(now);
        // The clock moves with the readings (an eviction never judges ahead of it).
        evicting.clock().set(at);
        evicted += evicting.retain_recent_at(at);
        let key = rng.below(keys) as u32;
        let n = rng.below(4);
        assert_eq!(
            evicting.check_key_n_at(&key, n, at),
            keeping.check_key_n_at(&key, n, at),
            "key {key} n {n} at {now}"
        );
        assert_eq!(
            evicting.remaining_key_at(&key, at),
            keeping.remaining_key_at(&key, at)
        );
    }
    assert_eq!(keeping.evictions(), 0);
    evicted
}

#[test]
fn string_keys_are_looked_up_by_str() {
    let keyed: Limiter<String> = limiter(Quota::per_second(2).unwrap());
    assert!(keyed.check_key("alice").is_ok());
    let owned = String::from("alice");
    assert!(keyed.check_key(owned.as_str()).is_ok());
    assert!(keyed.check_key("alice").is_err());
    assert!(keyed.contains_key("alice"));
    assert!(!keyed.contains_key("bob"));
    assert_eq!(keyed.remaining_key("bob"), 2);
    assert_eq!(keyed.len(), 1);
}

#[test]
fn queries_peeks_and_impossible_requests_create_no_key() {
    let keyed: Limiter<u8> = limiter(Quota::per_second(3).unwrap());
    assert_eq!(keyed.check_key_n(&1, 0).unwrap().remaining(), 3);
    assert!(keyed.peek_key_n(&1, 3).is_ok());
    assert!(matches!(
        keyed.check_key_n(&1, 4),
        Err(KeyedError::InsufficientCapacity(_))
    ));
    assert_eq!(keyed.remaining_key(&1), 3);
    assert!(keyed.is_empty());
}

#[test]
fn refuse_overflow_is_distinct_and_counted_and_never_resets_an_active_key() {
    let keyed: Limiter<u32> = limiter(Quota::per_second(2).unwrap()).with_max_keys(3);
    let now = Nanos::new(0);
    for k in 0..3 {
        keyed.check_key_at(&k, now).unwrap();
    }
    for k in 3..10 {
        assert_eq!(
            keyed.check_key_at(&k, now),
            Err(KeyedError::TooManyKeys(TooManyKeys { max_keys: 3 }))
        );
        assert!(matches!(
            keyed.peek_key_n_at(&k, 1, now),
            Err(KeyedError::TooManyKeys(_))
        ));
    }
    assert_eq!(keyed.overflowed(), 7);
    assert_eq!(keyed.len(), 3);
    // The active keys kept their state: one token each.
    for k in 0..3 {
        assert_eq!(keyed.remaining_key_at(&k, now), 1);
    }
    // Once they are full again, a sweep makes room and the newcomer is admitted.
    let later = Nanos::new(SEC);
    keyed.clock().set(later);
    assert_eq!(keyed.retain_recent_at(later), 3);
    assert!(keyed.check_key_at(&42, later).is_ok());
    assert_eq!(keyed.len(), 1);
}

/// On a full map a newcomer gets the overflow policy whatever its own state would answer: a reading
/// below the eviction floor, which a map with room denies (as if the key had been used up at the
/// floor), is refused for room ([`KeyedError::TooManyKeys`]), not as a denial of the key's rate.
/// Every algorithm, tiered too.
fn a_full_map_refuses_a_newcomer_for_room_even_below_the_floor<A: Algorithm>(
    make: impl Fn() -> KeyedLimiter<u32, A, ManualClock>,
) {
    let (early, floor) = (Nanos::new(5 * SEC), Nanos::new(10 * SEC));
    // Key 0 is active at the floor, so the eviction that raises the floor keeps it.
    let setup = |keyed: &KeyedLimiter<u32, A, ManualClock>| {
        keyed.check_key_at(&0, floor).unwrap();
        assert_eq!(keyed.retain_recent_at(floor), 0);
    };
    let roomy = make().with_max_keys(2);
    setup(&roomy);
    assert!(
        matches!(roomy.check_key_at(&1, early), Err(KeyedError::Denied(_))),
        "with room, a newcomer below the floor is denied: the case this test is about"
    );
    let full = make().with_max_keys(1);
    setup(&full);
    let no_room = Err(KeyedError::TooManyKeys(TooManyKeys { max_keys: 1 }));
    assert_eq!(full.check_key_at(&1, early), no_room);
    assert_eq!(full.check_key_n_at(&1, 1, early), no_room);
    assert_eq!(full.peek_key_n_at(&1, 1, early), no_room);
    assert_eq!(full.overflowed(), 2);
    assert_eq!(full.len(), 1);
}

#[test]
fn a_full_map_refuses_a_newcomer_for_room_even_below_the_floor_for_every_algorithm() {
    let q = Quota::per_second(2).unwrap();
    let clock = || ManualClock::starting_at(Nanos::new(10 * SEC));
    a_full_map_refuses_a_newcomer_for_room_even_below_the_floor(|| {
        KeyedLimiter::<u32, TokenBucketKeys, _>::with_clock(q, clock())
    });
    a_full_map_refuses_a_newcomer_for_room_even_below_the_floor(|| {
        KeyedLimiter::<u32, LeakyMeterKeys, _>::with_algorithm(q, clock()).unwrap()
    });
    a_full_map_refuses_a_newcomer_for_room_even_below_the_floor(|| {
        KeyedLimiter::<u32, FixedWindowKeys, _>::with_algorithm(q, clock()).unwrap()
    });
    a_full_map_refuses_a_newcomer_for_room_even_below_the_floor(|| {
        KeyedLimiter::<u32, SlidingWindowCounterKeys, _>::with_algorithm(q, clock()).unwrap()
    });
    a_full_map_refuses_a_newcomer_for_room_even_below_the_floor(|| {
        KeyedLimiter::<u32, SlidingWindowLogKeys, _>::with_algorithm(q, clock()).unwrap()
    });
    let tiers = [q, Quota::per_second(4).unwrap()];
    a_full_map_refuses_a_newcomer_for_room_even_below_the_floor(|| {
        KeyedLimiter::<u32, Tiered<TokenBucketKeys>, _>::with_tiers(
            &tiers,
            |k| *k as usize,
            clock(),
        )
        .unwrap()
    });
    a_full_map_refuses_a_newcomer_for_room_even_below_the_floor(|| {
        KeyedLimiter::<u32, Tiered<SlidingWindowLogKeys>, _>::with_tiers(&tiers, |_| 1, clock())
            .unwrap()
    });
    // Under `Overflow::Shared` the same newcomer is judged by the shared limiter (full since the
    // clock read 0 s, when it was built: admitted).
    let manual = ManualClock::new();
    let shared = KeyedLimiter::<u32, TokenBucketKeys, _>::with_clock(q, manual.clone())
        .with_max_keys(1)
        .with_overflow(Overflow::Shared(q))
        .unwrap();
    manual.set(Nanos::new(10 * SEC));
    shared.check_key_at(&0, Nanos::new(10 * SEC)).unwrap();
    shared.retain_recent_at(Nanos::new(10 * SEC));
    assert!(shared.check_key_at(&1, Nanos::new(5 * SEC)).is_ok());
    assert_eq!(shared.overflowed(), 1);
}

/// The shared overflow limiter is one limiter, built when `with_overflow` is called: like a direct
/// one, its time units start at that reading. With coarse units (a burst window over 2^62 ns, here
/// units of 2 ns) a clock that steps back into the unit of that reading finds it not yet full,
/// rather than full since up to one unit before it existed.
#[test]
fn the_shared_overflow_limiter_starts_at_its_construction_reading() {
    const BUILT: u64 = 5;
    let q = Quota::per_period(1, std::time::Duration::from_nanos(1 << 61))
        .and_then(|q| q.with_capacity(4))
        .unwrap();
    let keyed = KeyedLimiter::<u32, TokenBucketKeys, _>::with_clock(
        q,
        ManualClock::starting_at(Nanos::new(BUILT)),
    )
    .with_max_keys(1)
    .with_overflow(Overflow::Shared(q))
    .unwrap();
    // Key 0 takes the map's one place; key 1 is judged by the shared limiter.
    keyed.check_key_at(&0, Nanos::new(BUILT)).unwrap();
    let early = keyed
        .check_key_n_at(&1, 4, Nanos::new(BUILT - 1))
        .unwrap_err();
    assert_eq!(
        early.denied().map(|d| d.retry_at()),
        Some(Nanos::new(BUILT)),
        "{early:?}"
    );
    keyed.check_key_n_at(&1, 4, Nanos::new(BUILT)).unwrap();
    assert!(keyed.check_key_at(&1, Nanos::new(BUILT)).is_err());
}

/// One far-future reading cannot lock every key out. An eviction judges at `min(reading, clock)`,
/// so `retain_recent_at(u64::MAX)` with the clock at 3 s forgets what is idle at 3 s and raises the
/// floor to 3 s, not to 2^62; the same for the automatic sweep that a new key checked at `u64::MAX`
/// runs. Afterwards known and new keys are admitted at the clock's reading, and a reading that lags
/// the floor is refused at most until the floor. Every algorithm, tiered too.
fn a_far_future_reading_locks_no_other_key_out<A: Algorithm>(
    make: impl Fn(ManualClock) -> KeyedLimiter<u32, A, ManualClock>,
) {
    let s = |n: u64| Nanos::new(n * SEC);
    let far = Nanos::new(u64::MAX);
    // On demand.
    let keyed = make(ManualClock::starting_at(s(3)));
    keyed.check_key_at(&1, s(1)).unwrap();
    assert_eq!(keyed.retain_recent_at(far), 1, "key 1 is idle at 3 s");
    for key in [1, 2] {
        assert!(keyed.check_key_at(&key, s(3)).is_ok(), "key {key}");
    }
    // A reading half a second behind the floor is refused at most until the floor.
    match keyed.check_key_n_at(&3, 2, Nanos::new(5 * SEC / 2)) {
        Ok(_) => {}
        Err(KeyedError::Denied(d)) => assert!(d.retry_at() <= s(3), "{d:?}"),
        Err(e) => panic!("{e}"),
    }
    // Automatically: the 256th new key, checked at `u64::MAX`, runs a sweep.
    let keyed = make(ManualClock::starting_at(s(3)));
    for key in 0..255 {
        keyed.check_key_at(&key, s(1)).unwrap();
    }
    let _ = keyed.check_key_at(&255, far);
    assert_eq!(
        keyed.evictions(),
        255,
        "the sweep forgot what is idle at 3 s"
    );
    for key in [0, 1000] {
        assert!(keyed.check_key_at(&key, s(3)).is_ok(), "key {key}");
    }
}

#[test]
fn a_far_future_reading_locks_no_other_key_out_for_every_algorithm() {
    let q = Quota::per_second(2).unwrap();
    a_far_future_reading_locks_no_other_key_out(|c| {
        KeyedLimiter::<u32, TokenBucketKeys, _>::with_clock(q, c)
    });
    a_far_future_reading_locks_no_other_key_out(|c| {
        KeyedLimiter::<u32, LeakyMeterKeys, _>::with_algorithm(q, c).unwrap()
    });
    a_far_future_reading_locks_no_other_key_out(|c| {
        KeyedLimiter::<u32, FixedWindowKeys, _>::with_algorithm(q, c).unwrap()
    });
    a_far_future_reading_locks_no_other_key_out(|c| {
        KeyedLimiter::<u32, SlidingWindowCounterKeys, _>::with_algorithm(q, c).unwrap()
    });
    a_far_future_reading_locks_no_other_key_out(|c| {
        KeyedLimiter::<u32, SlidingWindowLogKeys, _>::with_algorithm(q, c).unwrap()
    });
    let tiers = [q, Quota::per_second(4).unwrap()];
    a_far_future_reading_locks_no_other_key_out(|c| {
        KeyedLimiter::<u32, Tiered<FixedWindowKeys>, _>::with_tiers(&tiers, |k| *k as usize % 2, c)
            .unwrap()
    });
}

/// A newcomer refused on a full map builds nothing: with the sliding window log a key's state is a
/// ring of N timestamps (32 KiB here), which must not be allocated (and dropped again) under the
/// shard's write lock for a request that finds no room. Counted in bytes this thread allocates.
#[test]
fn a_newcomer_refused_on_a_full_map_builds_no_state() {
    const N: u64 = 4096;
    const NEWCOMERS: u64 = 100;
    let keyed: KeyedLimiter<u64, SlidingWindowLogKeys, ManualClock> =
        KeyedLimiter::with_algorithm(Quota::per_second(N).unwrap(), ManualClock::new())
            .unwrap()
            .with_max_keys(1);
    keyed.check_key_at(&0, Nanos::new(0)).unwrap();
    let before = allocated_here();
    for k in 1..=NEWCOMERS {
        assert!(matches!(
            keyed.check_key_at(&k, Nanos::new(0)),
            Err(KeyedError::TooManyKeys(_))
        ));
    }
    let built = allocated_here() - before;
    assert!(
        built < 8 * N,
        "{NEWCOMERS} refused newcomers allocated {built} bytes (one log is {} bytes)",
        8 * N
    );
    assert_eq!(keyed.overflowed(), NEWCOMERS);
}

#[test]
fn a_full_map_sweeps_before_refusing_when_a_sweep_is_due() {
    // A bound of 4: a sweep is due after every 4 new (or refused) keys.
    let keyed: Limiter<u32> = limiter(Quota::per_second(1).unwrap()).with_max_keys(4);
    for k in 0..4 {
        keyed.check_key_at(&k, Nanos::new(0)).unwrap();
    }
    // The fourth new key swept (at 0 s, finding nothing full); the next three are refused.
    for k in 10..13 {
        assert!(matches!(
            keyed.check_key_at(&k, Nanos::new(0)),
            Err(KeyedError::TooManyKeys(_))
        ));
    }
    // All four keys are full again at 1 s: the next newcomer is due a sweep, which makes room.
    keyed.clock().set(Nanos::new(SEC));
    assert!(keyed.check_key_at(&100, Nanos::new(SEC)).is_ok());
    assert_eq!(keyed.evictions(), 4);
    assert_eq!(keyed.overflowed(), 3);
    assert_eq!(keyed.len(), 1);
}

#[test]
fn shared_overflow_limits_all_newcomers_together() {
    let keyed: Limiter<u32> = limiter(Quota::per_second(5).unwrap())
        .with_max_keys(1)
        .with_overflow(Overflow::Shared(Quota::per_second(3).unwrap()))
        .unwrap();
    let now = Nanos::new(0);
    keyed.check_key_at(&0, now).unwrap();
    let admitted = (1..20)
        .filter(|k| keyed.check_key_at(k, now).is_ok())
        .count();
    assert_eq!(admitted, 3);
    assert_eq!(keyed.overflowed(), 19);
    assert_eq!(keyed.len(), 1);
    // The shared limiter's own capacity bounds a request sent to it.
    assert!(matches!(
        keyed.check_key_n_at(&7, 4, now),
        Err(KeyedError::InsufficientCapacity(e)) if e.capacity == 3
    ));
    // The key that holds a place keeps its own limit.
    assert_eq!(keyed.check_key_n_at(&0, 4, now).unwrap().remaining(), 0);
}

/// Rounds of real threads: at the start of each round every key is forgettable again (a full
/// bucket, an expired window or log), admitters hammer the keys while an evictor sweeps at the same
/// reading. An eviction that lost an admission would let a key be created afresh and admit more
/// than the limit in the round; an admission lost the other way would admit fewer. Exactly the
/// limit per key per round, for every algorithm.
#[test]
fn stress_admissions_racing_evictions_admit_exactly_the_capacity() {
    let bucket = Quota::per_second(1).unwrap().with_capacity(4).unwrap();
    let window = Quota::per_second(4).unwrap();
    race_admissions_and_evictions(limiter::<u64>(bucket));
    race_admissions_and_evictions(
        KeyedLimiter::<u64, FixedWindowKeys, _>::with_algorithm(window, ManualClock::new())
            .unwrap(),
    );
    race_admissions_and_evictions(
        KeyedLimiter::<u64, SlidingWindowCounterKeys, _>::with_algorithm(
            window,
            ManualClock::new(),
        )
        .unwrap(),
    );
    race_admissions_and_evictions(
        KeyedLimiter::<u64, SlidingWindowLogKeys, _>::with_algorithm(window, ManualClock::new())
            .unwrap(),
    );
}

/// The rounds of the test above on `keyed`, whose keys admit 4 each from a fresh state and are
/// forgettable again 4 s after they were last used.
fn race_admissions_and_evictions<A: tollgate::keyed::Algorithm>(
    keyed: KeyedLimiter<u64, A, ManualClock>,
) {
    const KEYS: u64 = 32;
    const CAPACITY: u64 = 4;
    const ROUNDS: u64 = 40;
    const ADMITTERS: usize = 3;
    let keyed = Arc::new(keyed);
    let barrier = Arc::new(Barrier::new(ADMITTERS + 1));
    let admitters: Vec<_> = (0..ADMITTERS)
        .map(|i| {
            let keyed = Arc::clone(&keyed);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                let mut per_round = Vec::new();
                for round in 0..ROUNDS {
                    let at = Nanos::new(round * CAPACITY * SEC);
                    barrier.wait();
                    let mut admitted = vec![0u64; KEYS as usize];
                    for j in 0..(KEYS * CAPACITY * 2) {
                        let key = (j * 7 + i as u64) % KEYS;
                        if keyed.check_key_at(&key, at).is_ok() {
                            admitted[key as usize] += 1;
                        }
                    }
                    per_round.push(admitted);
                    barrier.wait();
                }
                per_round
            })
        })
        .collect();
    let mut evicted = 0;
    for round in 0..ROUNDS {
        let at = Nanos::new(round * CAPACITY * SEC);
        // The clock moves with the rounds (an eviction never judges ahead of it).
        keyed.clock().set(at);
        // Every other round one sweep runs before the admitters start, so that the run evicts
        // however the scheduler orders the threads (on a loaded machine the racing sweeps below
        // may find every key already touched in every round); the other rounds race from the
        // start.
        if round % 2 == 1 {
            evicted += keyed.retain_recent_at(at);
        }
        barrier.wait();
        // Sweep while the admitters run: keys still forgettable at `at` (not yet touched this
        // round) go.
        for _ in 0..50 {
            evicted += keyed.retain_recent_at(at);
        }
        barrier.wait();
    }
    let results: Vec<Vec<Vec<u64>>> = admitters.into_iter().map(|h| h.join().unwrap()).collect();
    for round in 0..ROUNDS as usize {
        for key in 0..KEYS as usize {
            let total: u64 = results.iter().map(|r| r[round][key]).sum();
            assert_eq!(total, CAPACITY, "round {round} key {key}");
        }
    }
    assert_eq!(keyed.len(), KEYS as usize);
    assert!(evicted > 0, "no eviction ever ran: the test proved nothing");
    // The admitters' new keys also trigger automatic sweeps, counted there too.
    assert!(keyed.evictions() >= evicted as u64);
}

/// Threads inserting the same new keys against a small bound: exactly the bound's worth of keys is
/// created, each admits exactly its capacity in total, and no key outside the map admitted anything.
#[test]
fn stress_concurrent_inserts_of_the_same_keys_keep_the_bound_exact() {
    const MAX: usize = 50;
    const CAPACITY: u64 = 3;
    let quota = Quota::per_second(1)
        .unwrap()
        .with_capacity(CAPACITY)
        .unwrap();
    let keyed: Arc<Limiter<u64>> = Arc::new(limiter(quota).with_max_keys(MAX));
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = (0..4u64)
        .map(|i| {
            let keyed = Arc::clone(&keyed);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                let mut admitted = vec![0u64; 200];
                for j in 0..2000u64 {
                    let key = (j * 13 + i * 7) % 200;
                    match keyed.check_key_at(&key, Nanos::new(0)) {
                        Ok(_) => admitted[key as usize] += 1,
                        Err(KeyedError::Denied(_) | KeyedError::TooManyKeys(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                    assert!(keyed.len() <= MAX);
                }
                admitted
            })
        })
        .collect();
    let per_thread: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let mut held = 0;
    for key in 0..200u64 {
        let total: u64 = per_thread.iter().map(|a| a[key as usize]).sum();
        if keyed.contains_key(&key) {
            held += 1;
            assert_eq!(total, CAPACITY, "key {key}");
        } else {
            assert_eq!(total, 0, "key {key} admitted without a place");
        }
    }
    assert_eq!(held, MAX);
    assert_eq!(keyed.len(), MAX);
}

/// Threads spraying distinct keys while the clock advances, so that automatic sweeps race inserts
/// from every thread: the key count never passes the bound, every refusal is counted, and the
/// evictions and the keys held add up to the keys created.
///
/// A refusal is one of two kinds, both documented: no room ([`KeyedError::TooManyKeys`], on a full
/// map), or a denial of a new key whose reading lags another thread's eviction (it is fresh as of
/// that eviction's reading, the floor, as if used up there: see the module docs of `keyed`). Such a
/// denial can come only from a reading taken before the floor, so its `retry_at` is never later
/// than the clock's present reading: a retry now is not refused for it. (Rare: the reading must lag
/// by most of a second of simulated time, 99 000 other requests; it happens under load.)
#[test]
fn stress_concurrent_spray_with_automatic_sweeps_never_passes_the_bound() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;
    const MAX: usize = 1_000;
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 50_000;
    // 100 per second, capacity 100: a sprayed key (one token taken) is full again 10 ms later.
    let quota = Quota::per_second(100).unwrap();
    let keyed: Arc<Limiter<u64>> = Arc::new(limiter(quota).with_max_keys(MAX));
    let created = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let lagging = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let keyed = Arc::clone(&keyed);
            let (created, refused, lagging) = (
                Arc::clone(&created),
                Arc::clone(&refused),
                Arc::clone(&lagging),
            );
            thread::spawn(move || {
                for i in 0..PER_THREAD {
                    // 10 µs of simulated time per request, on the limiter's own clock, shared by
                    // all threads; `check_key` reads it.
                    keyed.clock().advance(Duration::from_micros(10));
                    match keyed.check_key(&(t * PER_THREAD + i)) {
                        Ok(_) => created.fetch_add(1, Ordering::Relaxed),
                        Err(KeyedError::TooManyKeys(_)) => refused.fetch_add(1, Ordering::Relaxed),
                        Err(KeyedError::Denied(denied)) => {
                            let now = keyed.clock().now();
                            assert!(
                                denied.retry_at() <= now,
                                "a new key denied past the clock's reading {now:?}: {denied:?}"
                            );
                            lagging.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => panic!("{e}"),
                    };
                    assert!(keyed.len() <= MAX, "{} keys", keyed.len());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (created, refused, lagging) = (
        created.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        lagging.load(Ordering::Relaxed),
    );
    assert_eq!(created + refused + lagging, THREADS * PER_THREAD);
    assert_eq!(keyed.overflowed(), refused);
    assert_eq!(keyed.evictions() + keyed.len() as u64, created);
    assert!(keyed.evictions() > 0);
}

/// Threads reserving, taking partly and admitting on one key at one reading: everything handed
/// out (admitted, taken, or reserved into debt within `max_wait`) is at most the burst plus what
/// refills within `max_wait` (`C + R × max_wait`), and the limit is used: once no thread gets
/// anything more, the key's debt is within one reservation of that bound. The same totals at once
/// for a second key reached only through `reserve_key_n`, created by whichever thread came first.
#[test]
fn threads_reserving_and_taking_on_one_key_never_pass_c_plus_r_times_the_wait() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;
    // 100 a second, capacity 100; reservations of 2 wait at most 500 ms: 150 at most in all.
    let limiter: Arc<Limiter<u8>> = Arc::new(limiter(Quota::per_second(100).unwrap()));
    let wait = Duration::from_millis(500);
    let at = Nanos::new(SEC);
    let handed = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let start = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let (limiter, handed, start) = (limiter.clone(), handed.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                for i in 0..200u64 {
                    let got = match (t + i) % 3 {
                        0 => limiter
                            .take_up_to_key_at(&1, 3, at)
                            .map_or(0, |p| p.taken()),
                        1 => limiter.check_key_at(&1, at).map_or(0, |_| 1),
                        _ => limiter
                            .reserve_key_n_at(&1, 2, wait, at)
                            .map_or(0, |r| r.tokens()),
                    };
                    handed[0].fetch_add(got, Ordering::Relaxed);
                    let got = limiter
                        .reserve_key_n_at(&2, 2, wait, at)
                        .map_or(0, |r| r.tokens());
                    handed[1].fetch_add(got, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a thread panicked");
    }
    for (key, total) in handed.iter().enumerate() {
        let total = total.load(Ordering::Relaxed);
        assert!(total <= 150, "key {key}: {total} handed out, bound 150");
        assert!(total >= 149, "key {key}: only {total} handed out of 150");
    }
    assert_eq!(limiter.len(), 2);
}
