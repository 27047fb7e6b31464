//! Arbitrary quotas (one to four limits) and operation sequences on an `AllOf` of token buckets,
//! direct and keyed: every answer equals the documented rule's over separate limits of the same
//! quotas, and after every operation each limit holds exactly what its twin holds (a refused
//! request's give-backs restore every limit it took from). The driver is `testkit`'s, as for the
//! proptest in `tests/all_of.rs`; only the way inputs are generated differs.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::driver::all_of::{run, Op};
use testkit::fuzz_input::quota_with_burst;
use tollgate::Quota;

#[derive(Debug)]
struct Input {
    quotas: Vec<Quota>,
    ops: Vec<Op>,
}

/// A quota any constructor accepts: counts from 1, periods from 1 ns to about a day, bursts from
/// 1 to 64 (or the count); a refused combination is skipped.
fn quota(u: &mut Unstructured<'_>) -> Result<Option<Quota>> {
    let count = u.int_in_range(1..=1_000_000u64)?;
    quota_with_burst(u, count)
}

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    let key = u.int_in_range(0..=7u8)?;
    let n = match u.int_in_range(0..=9u8)? {
        0 => 0,
        1 => u.arbitrary()?,
        _ => u.int_in_range(1..=8u64)?,
    };
    Ok(match u.int_in_range(0..=9u8)? {
        0..=5 => Op::Take { key, n },
        6..=7 => Op::Peek { key, n },
        _ => Op::Wait(u.int_in_range(0..=100_000u64)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut quotas = Vec::new();
        for _ in 0..u.int_in_range(1..=4u8)? {
            if let Some(q) = quota(u)? {
                quotas.push(q);
            }
        }
        let mut ops = Vec::new();
        for _ in 0..u.int_in_range(1..=200u16)? {
            ops.push(op(u)?);
        }
        Ok(Input { quotas, ops })
    }
}

fuzz_target!(|input: Input| {
    run(&input.quotas, &input.ops);
});
