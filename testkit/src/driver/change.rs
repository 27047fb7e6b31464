//! Quota changes on a direct limiter ([`tollgate::Direct::set_quota_at`],
//! [`tollgate::ShardedBucket::set_quota_at`], [`SubWindowCounter::set_quota_at`]) and on one key of
//! a keyed limiter ([`KeyedLimiter::set_quota_at`], [`KeyedLimiter::set_tier_quota_at`]: the key
//! may be held at a change, or not yet, which a keyed limiter must treat as a fresh key's state),
//! checked against the
//! crate's one rule for every algorithm: right after a change at reading `t`, the limiter holds
//! `min(what it had left at t, the new capacity)` whole admissions, and from there on answers
//! every request exactly as a limiter of the new quota alone that held that many at `t` (its
//! *twin*, built afresh at each change). Before the first change the twin is a limiter of the
//! first quota, built beside it. Each algorithm's own driver checks that limiter against its
//! reference model, so the two together check the changed limiter against the model of the rule.
//!
//! Shared by the proptest in `tests/set_quota.rs` and the fuzz target `quota_change_ops`.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use testkit::driver::change::{run, Kind, Op};
//! use testkit::driver::limiter::Amount;
//! use tollgate::Quota;
//! let ops = [
//!     Op::Acquire { n: Amount::Raw(4), dt: 0 },
//!     Op::Change { quota: Quota::per_second(3).unwrap(), dt: 0 },
//!     Op::Acquire { n: Amount::Limit, dt: 1_000_000_000 },
//! ];
//! run(Kind::Bucket, Quota::per_second(10).unwrap(), 0, &ops);
//! ```

use tollgate::keyed::{KeyedChangeError, KeyedError, KeyedLimiter, Tiered};
use tollgate::window::SubWindowCounter;
use tollgate::{
    AcquireError, Admitted, Algorithm, Denied, Direct, Limiter, ManualClock, Nanos, Quota,
    QuotaError, ShardedBucket,
};

use crate::driver::limiter::Amount;

/// The direct limiters whose quota can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// [`tollgate::TokenBucket`].
    Bucket,
    /// [`tollgate::leaky::LeakyMeter`].
    Meter,
    /// [`tollgate::window::FixedWindow`].
    Fixed,
    /// [`tollgate::window::SlidingWindowCounter`].
    Counter,
    /// [`tollgate::window::SlidingWindowLog`].
    Log,
    /// [`tollgate::ShardedBucket`] asked for [`SHARDS`] shards.
    Sharded,
    /// [`tollgate::window::SubWindowCounter`] of [`SUB_WINDOWS`] sub-windows.
    SubWindows,
    /// One key of a [`KeyedLimiter`] running the algorithm of a direct kind (`Bucket`, `Meter`,
    /// `Fixed`, `Counter` or `Log`; the others run the bucket).
    Keyed(KeyedKind),
    /// One key of a [`KeyedLimiter`] of two tiers of token buckets, the key in the first: each
    /// change sets the first tier's quota (and the second tier's to the same, every other
    /// time, so that the tiers' conversions are checked apart).
    KeyedTiered,
}

/// The algorithm of [`Kind::Keyed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyedKind {
    /// [`tollgate::keyed::TokenBucketKeys`].
    Bucket,
    /// [`tollgate::keyed::LeakyMeterKeys`].
    Meter,
    /// [`tollgate::keyed::FixedWindowKeys`].
    Fixed,
    /// [`tollgate::keyed::SlidingWindowCounterKeys`].
    Counter,
    /// [`tollgate::keyed::SlidingWindowLogKeys`].
    Log,
}

/// The sub-window count of the sub-window counter's runs.
pub const SUB_WINDOWS: u64 = 4;

/// The shard count the sharded runs ask for (fewer when the quota cannot be split so far).
pub const SHARDS: usize = 4;

/// One operation.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// `try_acquire_n_at(n)`, `dt` nanoseconds after the last reading (backwards when negative).
    Acquire {
        /// How many, relative to the current capacity.
        n: Amount,
        /// The step of the clock.
        dt: i64,
    },
    /// `peek_n_at(n)` and `remaining_at`.
    Peek {
        /// How many, relative to the current capacity.
        n: Amount,
        /// The step of the clock.
        dt: i64,
    },
    /// `set_quota_at(quota)`.
    Change {
        /// The new quota (one the algorithm refuses must leave the limiter as it was).
        quota: Quota,
        /// The step of the clock.
        dt: i64,
    },
}

/// Runs `ops` on a limiter of `kind` for `quota` built at `start_ns`, asserting the rule (module
/// docs) after every operation. A quota the algorithm refuses at the start runs nothing.
///
/// # Panics
///
/// When the limiter departs from the rule: that is the check.
pub fn run(kind: Kind, quota: Quota, start_ns: u64, ops: &[Op]) {
    match kind {
        Kind::Bucket => direct::<tollgate::TokenBucketAlgorithm>(kind, quota, start_ns, ops),
        Kind::Meter => direct::<tollgate::LeakyMeterAlgorithm>(kind, quota, start_ns, ops),
        Kind::Fixed => direct::<tollgate::FixedWindowAlgorithm>(kind, quota, start_ns, ops),
        Kind::Counter => {
            direct::<tollgate::SlidingWindowCounterAlgorithm>(kind, quota, start_ns, ops)
        }
        Kind::Log => direct::<tollgate::SlidingWindowLogAlgorithm>(kind, quota, start_ns, ops),
        Kind::Sharded => drive(
            |q, available, now| Ok(sharded(q, available, now)),
            |l: &ShardedBucket<ManualClock>, q, at| {
                l.set_quota_at(q, at);
                Ok(())
            },
            quota,
            start_ns,
            ops,
        ),
        Kind::SubWindows => drive(
            sub_windows,
            SubWindowCounter::set_quota_at,
            quota,
            start_ns,
            ops,
        ),
        Kind::Keyed(KeyedKind::Bucket) => {
            keyed::<tollgate::TokenBucketAlgorithm>(quota, start_ns, ops)
        }
        Kind::Keyed(KeyedKind::Meter) => {
            keyed::<tollgate::LeakyMeterAlgorithm>(quota, start_ns, ops)
        }
        Kind::Keyed(KeyedKind::Fixed) => {
            keyed::<tollgate::FixedWindowAlgorithm>(quota, start_ns, ops)
        }
        Kind::Keyed(KeyedKind::Counter) => {
            keyed::<tollgate::SlidingWindowCounterAlgorithm>(quota, start_ns, ops)
        }
        Kind::Keyed(KeyedKind::Log) => {
            keyed::<tollgate::SlidingWindowLogAlgorithm>(quota, start_ns, ops)
        }
        Kind::KeyedTiered => {
            let changes = std::cell::Cell::new(0u64);
            drive(
                |q, available, now| {
                    let limiter = KeyedLimiter::with_tiers(
                        &[q, q],
                        |_: &u8| 0,
                        ManualClock::starting_at(Nanos::new(now)),
                    )?;
                    Ok(OneKey::holding(limiter, q, available, now))
                },
                |l: &OneKey<Tiered>, q, at| {
                    changes.set(changes.get() + 1);
                    l.0.set_tier_quota_at(0, q, at).map_err(refused)?;
                    if changes.get().is_multiple_of(2) {
                        l.0.set_tier_quota_at(1, q, at).map_err(refused)?;
                    }
                    Ok(())
                },
                quota,
                start_ns,
                ops,
            );
        }
    }
}

fn keyed<A: Algorithm>(quota: Quota, start_ns: u64, ops: &[Op]) {
    drive(
        |q, available, now| {
            let limiter =
                KeyedLimiter::with_algorithm(q, ManualClock::starting_at(Nanos::new(now)))?;
            Ok(OneKey::holding(limiter, q, available, now))
        },
        |l: &OneKey<A>, q, at| l.0.set_quota_at(q, at).map_err(refused),
        quota,
        start_ns,
        ops,
    );
}

/// The quota's refusal in a keyed limiter's change: tier indices are in range here, and no
/// lookup parks, so nothing else can refuse it.
fn refused(e: KeyedChangeError) -> QuotaError {
    match e {
        KeyedChangeError::Quota(e) => e,
        e => panic!("a keyed change refused for a reason other than its quota: {e}"),
    }
}

/// Key 0 of a keyed limiter, as a [`Limiter`].
pub struct OneKey<A: Algorithm>(KeyedLimiter<u8, A, ManualClock>);

impl<A: Algorithm> std::fmt::Debug for OneKey<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("OneKey").field(&self.0).finish()
    }
}

impl<A: Algorithm> OneKey<A> {
    /// `limiter`, its key 0 holding `available` of `quota` at `now_ns` when given (the rest
    /// admitted there), else not held.
    fn holding(
        limiter: KeyedLimiter<u8, A, ManualClock>,
        quota: Quota,
        available: Option<u64>,
        now_ns: u64,
    ) -> OneKey<A> {
        // Key 0 fresh as of `now_ns`, as a state converted at `now_ns` with its whole capacity
        // is (an eviction there raises the limiter's floor to it).
        if available.is_some() {
            limiter.retain_recent_at(Nanos::new(now_ns));
        }
        let key = OneKey(limiter);
        // All but `available` of the capacity (a window's is its count) taken at `now_ns`.
        let used = available.map_or(0, |a| quota.capacity().saturating_sub(a));
        if used > 0 {
            assert!(key.try_acquire_n_at(used, Nanos::new(now_ns)).is_ok());
        }
        key
    }
}

/// A keyed answer as a direct limiter's (the driver's limiters never fill their map).
fn unkeyed(answer: Result<Admitted, KeyedError>) -> Result<Admitted, AcquireError> {
    answer.map_err(|e| match e {
        KeyedError::Denied(d) => AcquireError::Denied(d),
        KeyedError::InsufficientCapacity(c) => AcquireError::InsufficientCapacity(c),
        other => panic!("a keyed limiter of one key answered {other:?}"),
    })
}

impl<A: Algorithm> Limiter for OneKey<A> {
    fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        match unkeyed(self.0.check_key_at(&0, now)) {
            Ok(admitted) => Ok(admitted),
            Err(AcquireError::Denied(d)) => Err(d),
            Err(other) => panic!("one token refused as {other:?}"),
        }
    }

    fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        unkeyed(self.0.check_key_n_at(&0, n, now))
    }

    fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        unkeyed(self.0.peek_key_n_at(&0, n, now))
    }

    fn remaining_at(&self, now: Nanos) -> u64 {
        self.0.remaining_key_at(&0, now)
    }

    fn now(&self) -> Nanos {
        use tollgate::Clock;
        self.0.clock().now()
    }

    fn quota(&self) -> Quota {
        self.0.quota()
    }
}

fn direct<A: Algorithm>(kind: Kind, quota: Quota, start_ns: u64, ops: &[Op]) {
    drive(
        |q, available, now| twin::<A>(kind, q, available, now),
        Direct::set_quota_at,
        quota,
        start_ns,
        ops,
    );
}

/// A limiter of `kind` for `quota`, built at `now_ns`, holding `available` whole admissions there
/// (at most its capacity): the GCRA's by its initial fill, the windows' by admitting the rest at
/// `now_ns`. The same for every algorithm as what a change leaves (the rule).
fn twin<A: Algorithm>(
    kind: Kind,
    quota: Quota,
    available: Option<u64>,
    now_ns: u64,
) -> Result<Direct<A, ManualClock>, QuotaError> {
    let clock = ManualClock::starting_at(Nanos::new(now_ns));
    let Some(available) = available else {
        return Direct::with_algorithm(quota, clock);
    };
    if matches!(kind, Kind::Bucket | Kind::Meter) {
        let fill = available.min(quota.capacity());
        return Direct::with_algorithm(quota.with_initial(fill)?, clock);
    }
    let limiter = Direct::<A, _>::with_algorithm(quota, clock)?;
    take_all_but(&limiter, quota, available, now_ns);
    Ok(limiter)
}

/// Admits all but `available` of `quota`'s count on `limiter` at `now_ns`.
fn take_all_but(limiter: &impl Limiter, quota: Quota, available: u64, now_ns: u64) {
    let used = quota.count().saturating_sub(available);
    if used > 0 {
        assert!(limiter.try_acquire_n_at(used, Nanos::new(now_ns)).is_ok());
    }
}

/// A sharded bucket of [`SHARDS`] shards for `quota`, built at `now_ns`, holding `available`
/// whole tokens there when given (spread over the shards as its initial fill).
fn sharded(quota: Quota, available: Option<u64>, now_ns: u64) -> ShardedBucket<ManualClock> {
    let quota = match available {
        Some(k) => quota
            .with_initial(k.min(quota.capacity()))
            .expect("at most the capacity"),
        None => quota,
    };
    ShardedBucket::builder(quota)
        .shards(SHARDS)
        .clock(ManualClock::starting_at(Nanos::new(now_ns)))
        .build()
        .expect("a power of two")
}

/// A sub-window counter of [`SUB_WINDOWS`] sub-windows for `quota`, built at `now_ns`, holding
/// `available` there when given (the rest admitted at `now_ns`).
fn sub_windows(
    quota: Quota,
    available: Option<u64>,
    now_ns: u64,
) -> Result<SubWindowCounter<ManualClock>, QuotaError> {
    let clock = ManualClock::starting_at(Nanos::new(now_ns));
    let limiter = SubWindowCounter::with_clock(quota, SUB_WINDOWS, clock)?;
    if let Some(available) = available {
        take_all_but(&limiter, quota, available, now_ns);
    }
    Ok(limiter)
}

/// The run, for any limiter: `build(quota, available, now)` makes a limiter (holding `available`
/// at `now` when given), `change` changes one's quota. The limiter built at the start is changed
/// in place; the model is rebuilt at every change.
///
/// A reading before the latest change's is taken at the change's reading instead: the rule is
/// about what a limiter admits from the change on, and at earlier readings the changed limiter
/// and its twin, built at the change, may differ in ways the rule leaves open (a window's
/// alignment; a keyed limiter's key not held is fresh as of the reading, its twin's, built held,
/// fresh as of the change). `tests/set_quota.rs` bounds what threads admit across changes.
fn drive<L: Limiter>(
    build: impl Fn(Quota, Option<u64>, u64) -> Result<L, QuotaError>,
    change: impl Fn(&L, Quota, Nanos) -> Result<(), QuotaError>,
    quota: Quota,
    start_ns: u64,
    ops: &[Op],
) {
    let Ok(limiter) = build(quota, None, start_ns) else {
        return;
    };
    let mut model = build(quota, None, start_ns).expect("the same quota");
    let mut now = start_ns;
    let mut changed_at = 0;
    let step = |now: u64, dt: i64, changed_at: u64| now.saturating_add_signed(dt).max(changed_at);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire { n, dt } => {
                now = step(now, dt, changed_at);
                let n = n.resolve(limiter.quota().capacity());
                let at = Nanos::new(now);
                assert_eq!(
                    limiter.try_acquire_n_at(n, at),
                    model.try_acquire_n_at(n, at),
                    "op {i}: acquire {n} at {now}"
                );
            }
            Op::Peek { n, dt } => {
                now = step(now, dt, changed_at);
                let n = n.resolve(limiter.quota().capacity());
                let at = Nanos::new(now);
                assert_eq!(
                    limiter.peek_n_at(n, at),
                    model.peek_n_at(n, at),
                    "op {i}: peek {n} at {now}"
                );
                assert_eq!(limiter.remaining_at(at), model.remaining_at(at));
            }
            Op::Change { quota: new, dt } => {
                now = step(now, dt, changed_at);
                changed_at = now;
                let at = Nanos::new(now);
                let before = limiter.quota();
                let left = limiter.remaining_at(at);
                match (change(&limiter, new, at), build(new, Some(left), now)) {
                    (Ok(()), Ok(built)) => {
                        assert_eq!(limiter.quota(), new);
                        assert_eq!(
                            limiter.remaining_at(at),
                            left.min(new.capacity()),
                            "op {i}: what a change at {now} carries over"
                        );
                        assert_eq!(limiter.remaining_at(at), built.remaining_at(at));
                        model = built;
                    }
                    (Err(refused), Err(expected)) => {
                        assert_eq!(refused, expected);
                        assert_eq!(limiter.quota(), before, "a refused change changes nothing");
                        assert_eq!(limiter.remaining_at(at), left);
                    }
                    (changed, built) => panic!(
                        "op {i}: the change answered {changed:?}, a limiter of the quota {:?}",
                        built.map(|_| ())
                    ),
                }
            }
        }
    }
}
