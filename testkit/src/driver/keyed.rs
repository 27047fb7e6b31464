//! Drives two keyed limiters, one evicting whenever told to and one never evicting, and a reference
//! map of reference buckets for each, through the same operations on a small key space, and asserts:
//!
//! - each limiter answers exactly as its reference map (to the nanosecond), with the documented
//!   semantics of a keyed limiter: a key not in the map is a full bucket as of
//!   `max(reading, floor)`, where the floor is the latest reading any eviction used; eviction
//!   removes exactly the keys that are full at its reading;
//! - eviction never changes a decision: the evicting limiter answers exactly as the never-evicting
//!   one at every reading at or after its floor; at an earlier reading (a clock stepping back across
//!   an eviction) it may only be more restrictive, and from the first such difference on the two
//!   are no longer compared with each other (their states differ), only with their references.
//!
//! Used by `tests/keyed_model.rs` (proptest) and the fuzz crate's `keyed_ops` target.
//!
//! Runs are capped at [`MAX_OPS`] operations, fewer than the 256 new keys after which a keyed
//! limiter sweeps on its own, so every eviction in a run is one the driver asked for.

use std::collections::HashMap;
use std::time::Duration;

use tollgate::keyed::{Algorithm, KeyedError, KeyedLimiter};
use tollgate::{AcquireError, Admitted, Clock, ManualClock, Nanos, Quota};

use crate::consts::MAX_USABLE_NS;
use crate::driver::limiter::{Amount, Call};
use crate::driver::step::Step;
use crate::outcome;
use crate::reference::bucket::{RefBucket, RefPolicy};
use crate::Outcome;

/// The most operations one run applies (below the automatic sweep's 256 new keys).
pub const MAX_OPS: usize = 200;

/// One operation on the keyed limiters: a call every limiter answers, in its keyed `_at` form, an
/// eviction, or a step of the clock (in the quota's intervals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyedOp {
    /// [`call_key`]: `check_key(_n)_at`, `peek_key_n_at` or `remaining_key_at` on `key`, the
    /// amount relative to the capacity (which may exceed it, or be 0).
    Call {
        /// The key.
        key: u8,
        /// What is asked.
        call: Call<Amount>,
    },
    /// `retain_recent_at(now)` on the evicting limiter only.
    Evict,
    /// Moves the reading.
    Time(Step),
}

/// The keyed limiter's answer to `call` on `key` at the reading `now`, in the `_at` forms, as
/// [`crate::driver::limiter::call`] answers for a direct limiter: an [`Outcome`], or for
/// [`Call::Remaining`] an admission of that many with no reset. `TooManyKeys` cannot happen in
/// these runs (a handful of keys against the default bound), and is a failure.
///
/// ```
/// use testkit::driver::keyed::call_key;
/// use testkit::driver::limiter::Call;
/// use testkit::Outcome;
/// use tollgate::{keyed::KeyedLimiter, ManualClock, Quota};
/// let limiter = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert!(call_key(&limiter, 7, Call::Acquire(2), 0).is_admitted());
/// assert!(!call_key(&limiter, 7, Call::AcquireOne, 0).is_admitted());
/// assert_eq!(call_key(&limiter, 8, Call::Remaining, 0), Outcome::Admitted { remaining: 2, reset_after_ns: 0, next_after_ns: None });
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub fn call_key<A: Algorithm, C: Clock>(
    limiter: &KeyedLimiter<u8, A, C>,
    key: u8,
    call: Call,
    now: u64,
) -> Outcome {
    let at = Nanos::new(now);
    observe(match call {
        Call::Acquire(n) => limiter.check_key_n_at(&key, n, at),
        Call::AcquireOne => limiter.check_key_at(&key, at),
        Call::Peek(n) => limiter.peek_key_n_at(&key, n, at),
        Call::Remaining => {
            return Outcome::Admitted {
                remaining: limiter.remaining_key_at(&key, at),
                reset_after_ns: 0,
                next_after_ns: None,
            }
        }
    })
}

/// Whether `evicting`'s answer to `call` is no looser than `keeping`'s: it admits only what the
/// other admits, and reports no more remaining. What eviction allows at a reading before its
/// floor.
pub fn no_looser(call: Call, evicting: &Outcome, keeping: &Outcome) -> bool {
    match (call, evicting, keeping) {
        (
            Call::Remaining,
            Outcome::Admitted { remaining: a, .. },
            Outcome::Admitted { remaining: b, .. },
        ) => a <= b,
        _ => !evicting.is_admitted() || keeping.is_admitted(),
    }
}

/// The reference of a keyed limiter: a map of reference buckets and the eviction floor.
#[derive(Debug)]
struct RefKeyed {
    policy: RefPolicy,
    keys: HashMap<u8, RefBucket>,
    floor: u64,
}

impl RefKeyed {
    fn new(policy: RefPolicy) -> RefKeyed {
        RefKeyed {
            policy,
            keys: HashMap::new(),
            floor: 0,
        }
    }

    /// The bucket of a key not in the map: full as of `max(reading, floor)`.
    fn fresh(&self, now: u64) -> RefBucket {
        let at = now.min(MAX_USABLE_NS).max(self.floor);
        RefBucket::new(self.policy, self.policy.capacity, at).expect("a full bucket is valid")
    }

    fn acquire(&mut self, key: u8, n: u64, now: u64) -> Outcome {
        if let Some(bucket) = self.keys.get_mut(&key) {
            return bucket.acquire(n, now);
        }
        let mut bucket = self.fresh(now);
        let outcome = bucket.acquire(n, now);
        // Only an admission of at least one token creates the key.
        if n > 0 && matches!(outcome, Outcome::Admitted { .. }) {
            self.keys.insert(key, bucket);
        }
        outcome
    }

    /// What the limiter should answer to `call` on `key` at `now`, as [`call_key`] reports it.
    fn expect(&mut self, key: u8, call: Call, now: u64) -> Outcome {
        // A key not in the map answers as a full bucket would, and stays out of it.
        let bucket = |this: &RefKeyed| match this.keys.get(&key) {
            Some(&bucket) => bucket,
            None => this.fresh(now),
        };
        match call {
            Call::Acquire(n) => self.acquire(key, n, now).representable(),
            Call::AcquireOne => self.acquire(key, 1, now).representable(),
            Call::Peek(n) => bucket(self).peek(n, now).representable(),
            Call::Remaining => Outcome::Admitted {
                remaining: bucket(self).remaining(now),
                reset_after_ns: 0,
                next_after_ns: None,
            },
        }
    }

    /// Raises the floor, then removes every key full at `now`; answers how many.
    fn evict(&mut self, now: u64) -> usize {
        self.floor = self.floor.max(now.min(MAX_USABLE_NS));
        let before = self.keys.len();
        let burst = self.policy.burst;
        self.keys
            .retain(|_, bucket| bucket.level_units(now) < burst);
        before - self.keys.len()
    }
}

/// A keyed limiter's answer in the model's terms (see [`call_key`]): a direct limiter's, since the
/// driver never fills the map.
fn observe(result: Result<Admitted, KeyedError>) -> Outcome {
    outcome::observe(result.map_err(|e| match e {
        KeyedError::Denied(denied) => AcquireError::Denied(denied),
        KeyedError::InsufficientCapacity(e) => AcquireError::InsufficientCapacity(e),
        e => panic!("{e}: the driver never fills the map"),
    }))
}

/// Builds the quota for `count` per `period_ns` with `capacity`, and the model's constants; `None`
/// when the crate refuses the quota (the model must then refuse it too).
pub fn quota(count: u64, period_ns: u64, capacity: u64) -> Option<(Quota, RefPolicy)> {
    let built = Quota::per_period(count, Duration::from_nanos(period_ns))
        .and_then(|q| q.with_capacity(capacity));
    // `per_period` starts with a capacity of `count`, which must be valid too, before
    // `with_capacity` replaces it.
    let model = RefPolicy::new(count, u128::from(period_ns), count)
        .and_then(|_| RefPolicy::new(count, u128::from(period_ns), capacity));
    match (built, model) {
        (Ok(quota), Some(policy)) => Some((quota, policy)),
        (Err(_), None) => None,
        (built, model) => panic!(
            "{count} per {period_ns} ns, capacity {capacity}: the crate built {built:?}, the model {model:?}"
        ),
    }
}

/// Runs `ops` (at most [`MAX_OPS`] of them) from the reading `start`, asserting everything listed
/// in the file's docs. Answers how many keys the evicting limiter evicted.
pub fn run(quota: Quota, policy: RefPolicy, start: u64, ops: &[KeyedOp]) -> u64 {
    type Limiter = KeyedLimiter<u8, tollgate::keyed::TokenBucketKeys, ManualClock>;
    let evicting: Limiter = KeyedLimiter::with_clock(quota, ManualClock::new());
    let keeping: Limiter = KeyedLimiter::with_clock(quota, ManualClock::new());
    let mut ref_evicting = RefKeyed::new(policy);
    let mut ref_keeping = RefKeyed::new(policy);
    let mut now = start;
    let mut diverged = false;
    let mut evicted = 0u64;
    // The evicting limiter's clock reads the latest reading so far: a step back is a reading that
    // lags the clock, as a timestamp taken a while ago does (an eviction never judges ahead of
    // the clock, so with the clock here it judges at its own reading, as the model does).
    let mut latest = start;
    let capacity = policy.capacity;

    for (i, op) in ops.iter().take(MAX_OPS).enumerate() {
        let at = Nanos::new(now);
        latest = latest.max(now);
        evicting.clock().set(Nanos::new(latest));
        let ctx = format!(
            "op {i} {op:?} at {now} (floor before it {})",
            ref_evicting.floor
        );
        match *op {
            KeyedOp::Call { key, call } => {
                let call = call.resolve(capacity);
                let a = call_key(&evicting, key, call, now);
                let b = call_key(&keeping, key, call, now);
                let want = ref_evicting.expect(key, call, now);
                assert_eq!(a, want, "evicting: {}", ctx);
                let want = ref_keeping.expect(key, call, now);
                assert_eq!(b, want, "keeping: {}", ctx);
                if !diverged && a != b {
                    // Only a reading before the floor may differ, and only towards refusing.
                    let before_floor = now.min(MAX_USABLE_NS) < ref_evicting.floor;
                    assert!(before_floor, "{a:?} vs {b:?}: {}", ctx);
                    assert!(no_looser(call, &a, &b), "{a:?} vs {b:?}: {}", ctx);
                    diverged = true;
                }
            }
            KeyedOp::Evict => {
                let removed = evicting.retain_recent_at(at);
                assert_eq!(removed, ref_evicting.evict(now), "evicted: {}", ctx);
                evicted += removed as u64;
            }
            KeyedOp::Time(step) => now = step.next(now, policy.interval_ns),
        }
        assert_eq!(evicting.len(), ref_evicting.keys.len(), "len: {}", ctx);
        assert_eq!(keeping.len(), ref_keeping.keys.len(), "len: {}", ctx);
        for key in 0..8u8 {
            assert_eq!(
                evicting.contains_key(&key),
                ref_evicting.keys.contains_key(&key),
                "key {key}: {}",
                ctx
            );
        }
    }
    assert_eq!(evicting.evictions(), evicted);
    assert_eq!(keeping.evictions(), 0);
    evicted
}
