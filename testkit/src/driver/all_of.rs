//! Drives an [`AllOf`] of token buckets, direct and keyed, against separate limits of the same
//! quotas decided by the documented rule (peek every limit; take from all only when all admit;
//! answer the binding limit's admission, or the longest refusal), and asserts after every
//! operation that every limit of the `AllOf` holds exactly what its twin holds: a refused
//! request's give-backs restore every limit it took from.
//!
//! The twins are the crate's own limiters, each checked against its exact reference model by its
//! own driver; what this driver checks is the composition: all or none, the answer chosen, and
//! the give-backs. Used by `tests/all_of.rs` (proptest) and the fuzz crate's `all_of_ops` target.
//!
//! ```
//! use testkit::driver::all_of::{run, Op};
//! use tollgate::Quota;
//! let quotas = [Quota::per_second(2)?, Quota::per_minute(3)?];
//! run(&quotas, &[Op::Take { key: 0, n: 2 }, Op::Take { key: 0, n: 2 }, Op::Wait(1_000)]);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```

use std::time::Duration;

use tollgate::keyed::{KeyedError, KeyedLimiter, TokenBucketKeys};
use tollgate::{
    AcquireError, Admitted, AllOf, Clock, KeyedLimit, Limiter, ManualClock, Nanos, Quota,
    TokenBucket,
};

/// One operation on both `AllOf`s (the keyed one on `key`) and their twins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `try_acquire_n_at` / `check_key_n_at`.
    Take {
        /// The key (keyed only).
        key: u8,
        /// Requests asked for.
        n: u64,
    },
    /// `peek_n_at` / `peek_key_n_at`.
    Peek {
        /// The key (keyed only).
        key: u8,
        /// Requests asked about.
        n: u64,
    },
    /// Moves the clock forward by this many milliseconds.
    Wait(u64),
}

type Bucket = TokenBucket<ManualClock>;
type Keyed = KeyedLimiter<u8, TokenBucketKeys, ManualClock>;

/// The refusal to report of several: one that is not "not now" first, else the longest wait.
fn worst<E: Clone>(refusals: &[E], not_now: impl Fn(&E) -> Option<Duration>) -> E {
    if let Some(never) = refusals.iter().find(|e| not_now(e).is_none()) {
        return never.clone();
    }
    // The first of the longest waits.
    let longest = refusals
        .iter()
        .map(|e| not_now(e).expect("a wait"))
        .max()
        .expect("a refusal");
    refusals
        .iter()
        .find(|e| not_now(e) == Some(longest))
        .expect("the longest")
        .clone()
}

/// The binding admission: fewest remaining, then full again last; the first of equals.
fn binding(admitted: &[Admitted]) -> Admitted {
    let mut best = admitted[0];
    for a in &admitted[1..] {
        if (a.remaining(), std::cmp::Reverse(a.reset_after()))
            < (best.remaining(), std::cmp::Reverse(best.reset_after()))
        {
            best = *a;
        }
    }
    best
}

/// The model's answer over `count` limits: peek all (`peek(i)`), then, when every one admits and
/// `take` is set (and `n > 0`), take from all (`take_one(i)`, which must admit: it was peeked).
fn model<E: std::fmt::Debug + Clone>(
    count: usize,
    n: u64,
    take: bool,
    peek: impl Fn(usize) -> Result<Admitted, E>,
    take_one: impl Fn(usize) -> Result<Admitted, E>,
    not_now: impl Fn(&E) -> Option<Duration>,
) -> Result<Admitted, E> {
    let peeks: Vec<_> = (0..count).map(&peek).collect();
    let refusals: Vec<E> = peeks.iter().filter_map(|p| p.clone().err()).collect();
    if !refusals.is_empty() {
        return Err(worst(&refusals, not_now));
    }
    if !take || n == 0 {
        return Ok(binding(
            &peeks.into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        ));
    }
    let taken: Vec<Admitted> = (0..count).map(|i| take_one(i).expect("peeked")).collect();
    Ok(binding(&taken))
}

/// [`model`] over direct buckets.
pub(crate) fn model_direct(
    limits: &[Bucket],
    n: u64,
    now: Nanos,
    take: bool,
) -> Result<Admitted, AcquireError> {
    model(
        limits.len(),
        n,
        take,
        |i| limits[i].peek_n_at(n, now),
        |i| limits[i].try_acquire_n_at(n, now),
        |e| e.denied().map(|d| d.retry_after()),
    )
}

/// [`model`] over keyed buckets, on `key`.
pub(crate) fn model_keyed(
    limits: &[Keyed],
    key: u8,
    n: u64,
    now: Nanos,
    take: bool,
) -> Result<Admitted, KeyedError> {
    model(
        limits.len(),
        n,
        take,
        |i| limits[i].peek_key_n_at(&key, n, now),
        |i| limits[i].check_key_n_at(&key, n, now),
        |e| e.denied().map(|d| d.retry_after()),
    )
}

/// Runs `ops` on an `AllOf` of token buckets of `quotas` (and a keyed one), asserting everything
/// listed in the module docs. Keys are taken modulo 8.
///
/// # Panics
///
/// On the first difference, naming the operation.
pub fn run(quotas: &[Quota], ops: &[Op]) {
    let clock = ManualClock::new();
    let make = || -> Vec<Bucket> {
        quotas
            .iter()
            .map(|q| TokenBucket::with_clock(*q, clock.clone()))
            .collect()
    };
    let make_keyed = || -> Vec<Keyed> {
        quotas
            .iter()
            .map(|q| KeyedLimiter::with_clock(*q, clock.clone()))
            .collect()
    };
    let Ok(direct) = AllOf::new(make()) else {
        assert!(quotas.is_empty());
        return;
    };
    let direct_model = make();
    let keyed = AllOf::new(make_keyed()).expect("as many limits");
    let keyed_model = make_keyed();
    for (i, op) in ops.iter().enumerate() {
        let now = clock.now();
        match *op {
            Op::Take { key, n } => {
                let key = key % 8;
                assert_eq!(
                    direct.try_acquire_n_at(n, now),
                    model_direct(&direct_model, n, now, true),
                    "op {i} {op:?}"
                );
                assert_eq!(
                    keyed.check_key_n_at(&key, n, now),
                    model_keyed(&keyed_model, key, n, now, true),
                    "op {i} {op:?}"
                );
            }
            Op::Peek { key, n } => {
                let key = key % 8;
                assert_eq!(
                    direct.peek_n_at(n, now),
                    model_direct(&direct_model, n, now, false),
                    "op {i} {op:?}"
                );
                assert_eq!(
                    keyed.peek_key_n_at(&key, n, now),
                    model_keyed(&keyed_model, key, n, now, false),
                    "op {i} {op:?}"
                );
            }
            Op::Wait(ms) => clock.advance(Duration::from_millis(ms)),
        }
        // Every limit holds what its twin holds.
        let now = clock.now();
        for (a, b) in direct.limits().iter().zip(&direct_model) {
            assert_eq!(a.remaining_at(now), b.remaining_at(now), "op {i} {op:?}");
            assert_eq!(a.peek_n_at(1, now), b.peek_n_at(1, now), "op {i} {op:?}");
        }
        for (a, b) in keyed.limits().iter().zip(&keyed_model) {
            for key in 0..8u8 {
                assert_eq!(
                    a.peek_key_n_at(&key, 1, now),
                    b.peek_key_n_at(&key, 1, now),
                    "op {i} {op:?} key {key}"
                );
            }
        }
        let fewest = direct_model.iter().map(|l| l.remaining_at(now)).min();
        assert_eq!(Some(direct.remaining_at(now)), fewest, "op {i} {op:?}");
    }
}
