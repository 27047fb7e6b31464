//! Arbitrary quotas, sub-window counts, alignments and operation sequences on a
//! `SlidingWindowCounter` or a `SubWindowCounter`, every answer compared with the exact counter
//! model to the nanosecond, and every denial's `retry_at` checked to be exact.
//!
//! The model and the driver are `testkit`'s, as for the proptest in
//! `tests/sliding_counter_model.rs`; only the way inputs are generated differs. Counts and periods
//! come from the generators the bucket targets share, the operations every driver has in common
//! from `testkit::fuzz_input`.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::consts::MAX_USABLE_NS;
use testkit::driver::counter as counter_driver;
use testkit::fuzz_input as shared_input;

use counter_driver::{run, Op, Spec};
use shared_input::{list, request, start, step};

/// The most operations one input runs.
const MAX_OPS: usize = 256;

/// One fuzz input: a counter, a starting reading, operations.
#[derive(Debug)]
struct Input {
    spec: Spec,
    start: u64,
    ops: Vec<Op>,
}

fn spec(u: &mut Unstructured<'_>) -> Result<Spec> {
    let count = shared_input::count(u)?;
    let k = match u.int_in_range(0..=3u8)? {
        0 => 1,
        1 => u.int_in_range(1..=8)?,
        2 => u.int_in_range(0..=1100)?,
        _ => u.arbitrary()?,
    };
    let period_ns = match u.int_in_range(0..=2u8)? {
        // A whole number of sub-windows, short or long.
        0 => u.int_in_range(1..=1_000_000u64)?.saturating_mul(k.max(1)),
        1 => u
            .int_in_range(1..=MAX_USABLE_NS / 1024)?
            .saturating_mul(k.max(1)),
        // Anything the generators of the other targets produce.
        _ => u64::try_from(shared_input::period(u)?.as_nanos()).unwrap_or(u64::MAX),
    };
    let offset = if u.ratio(1u8, 5u8)? {
        Some(u.arbitrary()?)
    } else {
        None
    };
    Ok(Spec {
        count,
        period_ns,
        k,
        offset,
        one_word: u.arbitrary()?,
    })
}

/// The calls every limiter answers (four in five), clock steps in sub-windows.
fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match u.int_in_range(0..=4u8)? {
        0..=3 => Op::Call(request(u)?),
        _ => Op::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(Input {
            spec: spec(u)?,
            start: start(u)?,
            ops: list(u, MAX_OPS, op)?,
        })
    }
}

fuzz_target!(|input: Input| {
    run(&input.spec, input.start, &input.ops);
});
