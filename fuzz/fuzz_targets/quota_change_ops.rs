//! Arbitrary quotas and operation sequences, with quota changes mixed in, on every direct
//! limiter and on one key of a keyed limiter (tiered too): after each change the limiter must
//! hold what the rule says (what was left, at most the new capacity) and answer every later
//! request as a limiter of the new quota alone holding that much. The driver is `testkit`'s, as for the proptest in `tests/set_quota.rs`; only the
//! way inputs are generated differs.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::driver::change::{run, KeyedKind, Kind, Op};
use testkit::fuzz_input::{amount, quota_with_burst};
use tollgate::Quota;

#[derive(Debug)]
struct Input {
    kind: Kind,
    first: Quota,
    start: u64,
    ops: Vec<Op>,
}

/// A quota any constructor accepts (counts from 1 up to 100 000, weighted towards the small
/// ones a window or a log holds), or `None` for a combination the constructors refuse.
fn quota(u: &mut Unstructured<'_>) -> Result<Option<Quota>> {
    let count = match u.int_in_range(0..=2u8)? {
        0 => u.int_in_range(1..=8u64)?,
        1 => u.int_in_range(1..=1_000u64)?,
        _ => u.int_in_range(1..=100_000u64)?,
    };
    quota_with_burst(u, count)
}

fn dt(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => 0,
        1 => u.int_in_range(0..=2_000_000_000i64)?,
        2 => -u.int_in_range(0..=1_000_000i64)?,
        _ => u.int_in_range(0..=200_000_000_000i64)?,
    })
}

fn op(u: &mut Unstructured<'_>) -> Result<Option<Op>> {
    Ok(match u.int_in_range(0..=5u8)? {
        0..=2 => Some(Op::Acquire {
            n: amount(u)?,
            dt: dt(u)?,
        }),
        3 => Some(Op::Peek {
            n: amount(u)?,
            dt: dt(u)?,
        }),
        _ => quota(u)?.map(|quota| Op::Change {
            quota,
            dt: dt(u).unwrap_or(0),
        }),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Input> {
        let kind = match u.int_in_range(0..=12u8)? {
            0 => Kind::Bucket,
            1 => Kind::Meter,
            2 => Kind::Fixed,
            3 => Kind::Counter,
            4 => Kind::Log,
            5 => Kind::Sharded,
            6 => Kind::SubWindows,
            7 => Kind::Keyed(KeyedKind::Bucket),
            8 => Kind::Keyed(KeyedKind::Meter),
            9 => Kind::Keyed(KeyedKind::Fixed),
            10 => Kind::Keyed(KeyedKind::Counter),
            11 => Kind::Keyed(KeyedKind::Log),
            _ => Kind::KeyedTiered,
        };
        let first = quota(u)?.unwrap_or(Quota::per_second(3).expect("valid"));
        let start = match u.int_in_range(0..=1u8)? {
            0 => 0,
            _ => u.int_in_range(0..=1_000_000_000_000_000u64)?,
        };
        let mut ops = Vec::new();
        for _ in 0..u.int_in_range(0..=48u8)? {
            if let Some(op) = op(u)? {
                ops.push(op);
            }
        }
        Ok(Input {
            kind,
            first,
            start,
            ops,
        })
    }
}

fuzz_target!(|input: Input| {
    run(input.kind, input.first, input.start, &input.ops);
});
