//! Arbitrary window quotas and operation sequences on a `SlidingWindowLog`, every answer compared
//! with the exact reference model (a plain `Vec` of admission times) to the nanosecond.
//!
//! The model and the driver are `testkit`'s, as for the proptest in `tests/sliding_log_model.rs`;
//! only the way inputs are generated differs. Periods come from `testkit::fuzz_input`, as for the
//! bucket targets; counts are mostly small, so that windows fill.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::driver::log as log_driver;
use testkit::fuzz_input as shared_input;
use testkit::reference::log as log_reference;

use log_driver::{run, LogOp, LogSpec};
use log_reference::MAX_LOG;
use shared_input::{list, request, start, step};

/// The most operations one input runs.
const MAX_OPS: usize = 256;

#[derive(Debug)]
struct Input {
    spec: LogSpec,
    start: u64,
    ops: Vec<LogOp>,
}

/// N: mostly a handful, rarely the edges of the accepted range or anything (the longest log costs
/// 65 536 claims per request for all of it, which slows every input that draws it).
fn count(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=31u8)? {
        0..=19 => u.int_in_range(1..=4)?,
        20..=27 => u.int_in_range(1..=64)?,
        28 => MAX_LOG,
        29 => MAX_LOG + 1,
        _ => u.arbitrary()?,
    })
}

fn spec(u: &mut Unstructured<'_>) -> Result<LogSpec> {
    let count = count(u)?;
    let period = shared_input::period(u)?;
    let capacity = match u.int_in_range(0..=5u8)? {
        0 => Some(count),
        1 => Some(u.arbitrary()?),
        _ => None,
    };
    let initial = match u.int_in_range(0..=5u8)? {
        0 => Some(count),
        1 => Some(u.arbitrary()?),
        _ => None,
    };
    Ok(LogSpec {
        count,
        period,
        capacity,
        initial,
    })
}

/// The calls every limiter answers (two in three), clock steps in windows, and jumps to (or just
/// before) the latest denial's `retry_at`.
fn op(u: &mut Unstructured<'_>) -> Result<LogOp> {
    Ok(match u.int_in_range(0..=11u8)? {
        0..=7 => LogOp::Call(request(u)?),
        8..=10 => LogOp::Time(step(u)?),
        _ => LogOp::LastRetry {
            early: u.arbitrary()?,
        },
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
