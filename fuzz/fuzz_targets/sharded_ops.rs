//! Arbitrary quotas, shard counts and operation sequences on a `ShardedBucket`, each operation with
//! the caller's home shard chosen by the input (reservations, cancels and takes of up to `n` among
//! them), every answer compared with the exact sharded model and the limit `C + R × t` checked
//! after every operation, at every instant tokens become the caller's.
//!
//! The model and the driver are `testkit`'s, as for the proptest in `tests/sharded_model.rs`; only
//! the way inputs are generated differs.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::driver::bucket as bucket_driver;
use testkit::driver::sharded as sharded_driver;
use testkit::fuzz_input as shared_input;

use bucket_driver::QuotaSpec;
use sharded_driver::{run, Caller, ShardOp};
use shared_input::{amount, list, quota_spec, request, start, step, via_clock, wait};

/// The most operations one input runs.
const MAX_OPS: usize = 256;

/// One fuzz input: a quota, a shard count (`None`: the default), a starting reading, operations.
#[derive(Debug)]
struct Input {
    spec: QuotaSpec,
    shards: Option<usize>,
    start: u64,
    ops: Vec<ShardOp>,
}

/// Valid shard counts mostly, the default, and any `usize` (which the builder must refuse unless it
/// is a power of two up to 256).
fn shards(u: &mut Unstructured<'_>) -> Result<Option<usize>> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => None,
        1 => Some(1 << u.int_in_range(0..=3u32)?),
        2 => Some(1 << u.int_in_range(0..=8u32)?),
        _ => Some(u.arbitrary()?),
    })
}

/// A thread id: mostly among the first shards, sometimes anything (the limiter masks it).
fn home(u: &mut Unstructured<'_>) -> Result<usize> {
    Ok(if u.ratio(7u8, 8u8)? {
        u.int_in_range(0..=15)?
    } else {
        u.arbitrary()?
    })
}

/// Who gives tokens back: mostly a chosen home, sometimes the thread's own.
fn caller(u: &mut Unstructured<'_>) -> Result<Caller> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Caller::At,
        1 => Caller::Clock,
        _ => Caller::From(home(u)?),
    })
}

/// The calls every limiter answers from the thread's home (seven in twenty), takes from a chosen
/// home, peeks then takes, refunds, reservations and their cancels, takes of up to `n`, clock
/// steps.
fn op(u: &mut Unstructured<'_>) -> Result<ShardOp> {
    Ok(match u.int_in_range(0..=19u8)? {
        0..=6 => ShardOp::Call(request(u)?),
        7..=9 => ShardOp::AcquireFrom {
            n: amount(u)?,
            home: home(u)?,
        },
        10 | 11 => ShardOp::PeekThenAcquire {
            n: amount(u)?,
            home: home(u)?,
        },
        12 | 13 => ShardOp::Refund {
            n: amount(u)?,
            caller: caller(u)?,
        },
        14 => ShardOp::Reserve {
            n: amount(u)?,
            wait: wait(u)?,
            caller: caller(u)?,
        },
        15 => ShardOp::Cancel {
            index: u.arbitrary()?,
            clock: via_clock(u)?,
        },
        16 => ShardOp::TakeUpTo {
            n: amount(u)?,
            caller: caller(u)?,
        },
        _ => ShardOp::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Input {
            spec: quota_spec(u, 300)?,
            shards: shards(u)?,
            start: start(u)?,
            ops: list(u, MAX_OPS, op)?,
        })
    }
}

fuzz_target!(|input: Input| {
    run(&input.spec, input.shards, input.start, &input.ops);
});
