//! Quota changes on a direct limiter ([`tollgate::Direct::set_quota_at`],
//! [`tollgate::ShardedBucket::set_quota_at`], [`SubWindowCounter::set_quota_at`]), checked against the
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

use tollgate::window::SubWindowCounter;
use tollgate::{Algorithm, Direct, ManualClock, Nanos, Quota, QuotaError, ShardedBucket};

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
        Kind::Bucket => drive::<tollgate::TokenBucketAlgorithm>(kind, quota, start_ns, ops),
        Kind::Meter => drive::<tollgate::LeakyMeterAlgorithm>(kind, quota, start_ns, ops),
        Kind::Fixed => drive::<tollgate::FixedWindowAlgorithm>(kind, quota, start_ns, ops),
        Kind::Counter => {
            drive::<tollgate::SlidingWindowCounterAlgorithm>(kind, quota, start_ns, ops)
        }
        Kind::Log => drive::<tollgate::SlidingWindowLogAlgorithm>(kind, quota, start_ns, ops),
        Kind::Sharded => drive_sharded(quota, start_ns, ops),
        Kind::SubWindows => drive_sub_windows(quota, start_ns, ops),
    }
}

/// A sub-window counter for `quota`, built at `now_ns`, holding `available` there when given
/// (the rest admitted at `now_ns`).
fn sub_windows(
    quota: Quota,
    available: Option<u64>,
    now_ns: u64,
) -> Result<SubWindowCounter<ManualClock>, QuotaError> {
    let clock = ManualClock::starting_at(Nanos::new(now_ns));
    let limiter = SubWindowCounter::with_clock(quota, SUB_WINDOWS, clock)?;
    if let Some(available) = available {
        let used = quota.count().saturating_sub(available);
        if used > 0 {
            assert!(limiter.try_acquire_n_at(used, Nanos::new(now_ns)).is_ok());
        }
    }
    Ok(limiter)
}

fn drive_sub_windows(quota: Quota, start_ns: u64, ops: &[Op]) {
    let Ok(limiter) = sub_windows(quota, None, start_ns) else {
        return;
    };
    let mut model = sub_windows(quota, None, start_ns).expect("the same quota");
    let mut now = start_ns;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire { n, dt } => {
                now = now.saturating_add_signed(dt);
                let n = n.resolve(limiter.quota().capacity());
                let at = Nanos::new(now);
                assert_eq!(
                    limiter.try_acquire_n_at(n, at),
                    model.try_acquire_n_at(n, at),
                    "op {i}: acquire {n} at {now}"
                );
            }
            Op::Peek { n, dt } => {
                now = now.saturating_add_signed(dt);
                let n = n.resolve(limiter.quota().capacity());
                let at = Nanos::new(now);
                assert_eq!(limiter.peek_n_at(n, at), model.peek_n_at(n, at));
                assert_eq!(limiter.remaining_at(at), model.remaining_at(at));
            }
            Op::Change { quota: new, dt } => {
                now = now.saturating_add_signed(dt);
                let at = Nanos::new(now);
                let before = limiter.quota();
                let left = limiter.remaining_at(at);
                match (
                    limiter.set_quota_at(new, at),
                    sub_windows(new, Some(left), now),
                ) {
                    (Ok(()), Ok(built)) => {
                        assert_eq!(limiter.quota(), new);
                        assert_eq!(
                            limiter.remaining_at(at),
                            left.min(new.count()),
                            "op {i}: what a change at {now} carries over"
                        );
                        model = built;
                    }
                    (Err(refused), Err(expected)) => {
                        assert_eq!(refused, expected);
                        assert_eq!(limiter.quota(), before);
                    }
                    (changed, built) => panic!(
                        "op {i}: the change answered {changed:?}, a counter of the quota {:?}",
                        built.map(|_| ())
                    ),
                }
            }
        }
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

fn drive_sharded(quota: Quota, start_ns: u64, ops: &[Op]) {
    let limiter = sharded(quota, None, start_ns);
    let mut model = sharded(quota, None, start_ns);
    let mut now = start_ns;
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire { n, dt } => {
                now = now.saturating_add_signed(dt);
                let n = n.resolve(limiter.quota().capacity());
                let at = Nanos::new(now);
                assert_eq!(
                    limiter.try_acquire_n_at(n, at),
                    model.try_acquire_n_at(n, at),
                    "op {i}: acquire {n} at {now}"
                );
            }
            Op::Peek { n, dt } => {
                now = now.saturating_add_signed(dt);
                let n = n.resolve(limiter.quota().capacity());
                let at = Nanos::new(now);
                assert_eq!(limiter.peek_n_at(n, at), model.peek_n_at(n, at));
                assert_eq!(limiter.remaining_at(at), model.remaining_at(at));
            }
            Op::Change { quota: new, dt } => {
                now = now.saturating_add_signed(dt);
                let at = Nanos::new(now);
                let left = limiter.remaining_at(at);
                limiter.set_quota_at(new, at);
                model = sharded(new, Some(left), now);
                assert_eq!(limiter.quota(), new);
                assert_eq!(limiter.shards(), model.shards());
                assert_eq!(
                    limiter.remaining_at(at),
                    model.remaining_at(at),
                    "op {i}: what a change at {now} carries over"
                );
            }
        }
    }
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
    let gcra = matches!(kind, Kind::Bucket | Kind::Meter);
    let Some(available) = available else {
        return Direct::with_algorithm(quota, clock);
    };
    if gcra {
        let fill = available.min(quota.capacity());
        return Direct::with_algorithm(quota.with_initial(fill)?, clock);
    }
    let limiter = Direct::<A, _>::with_algorithm(quota, clock)?;
    let used = quota.count().saturating_sub(available);
    if used > 0 {
        assert!(limiter.try_acquire_n_at(used, Nanos::new(now_ns)).is_ok());
    }
    Ok(limiter)
}

fn drive<A: Algorithm>(kind: Kind, quota: Quota, start_ns: u64, ops: &[Op]) {
    let clock = ManualClock::starting_at(Nanos::new(start_ns));
    let Ok(limiter) = Direct::<A, _>::with_algorithm(quota, clock) else {
        return;
    };
    let mut model = twin::<A>(kind, quota, None, start_ns).expect("the same quota");
    let mut now = start_ns;
    let step = |now: u64, dt: i64| now.saturating_add_signed(dt);
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Acquire { n, dt } => {
                now = step(now, dt);
                let n = n.resolve(limiter.quota().capacity());
                let at = Nanos::new(now);
                assert_eq!(
                    limiter.try_acquire_n_at(n, at),
                    model.try_acquire_n_at(n, at),
                    "op {i}: acquire {n} at {now}"
                );
            }
            Op::Peek { n, dt } => {
                now = step(now, dt);
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
                now = step(now, dt);
                let at = Nanos::new(now);
                let before = limiter.quota();
                let left = limiter.remaining_at(at);
                let changed = limiter.set_quota_at(new, at);
                let built = twin::<A>(kind, new, Some(left), now);
                match (changed, built) {
                    (Ok(()), Ok(built)) => {
                        assert_eq!(limiter.quota(), new);
                        assert_eq!(
                            limiter.remaining_at(at),
                            left.min(built.quota().capacity()),
                            "op {i}: what a change at {now} carries over"
                        );
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
