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

use log_driver::{run, LogAmount, LogOp, LogSpec, LogStep};
use log_reference::MAX_LOG;

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

fn amount(u: &mut Unstructured<'_>) -> Result<LogAmount> {
    Ok(match u.int_in_range(0..=5u8)? {
        0 => LogAmount::Zero,
        1 => LogAmount::One,
        2 => LogAmount::Few(u.arbitrary()?),
        3 => LogAmount::Count,
        4 => LogAmount::AboveCount,
        _ => LogAmount::Raw(u.arbitrary()?),
    })
}

fn step(u: &mut Unstructured<'_>) -> Result<LogStep> {
    Ok(match u.int_in_range(0..=8u8)? {
        0 => LogStep::Nanos(u.int_in_range(0..=1_000)?),
        1 => LogStep::Nanos(u.arbitrary()?),
        2 => LogStep::Windows {
            num: u.arbitrary()?,
            den: u.int_in_range(1..=16)?,
        },
        3 => LogStep::ToMax,
        4 => LogStep::BackNanos(u.arbitrary()?),
        5 => LogStep::BackWindows {
            num: u.int_in_range(0..=64)?,
            den: u.int_in_range(1..=16)?,
        },
        6 => LogStep::Set(u.arbitrary()?),
        _ => LogStep::LastRetry {
            early: u.arbitrary()?,
        },
    })
}

fn op(u: &mut Unstructured<'_>) -> Result<LogOp> {
    // One call in four reads the log's clock instead of passing the reading.
    let clock = u.ratio(1u8, 4u8)?;
    Ok(match u.int_in_range(0..=5u8)? {
        0 => LogOp::Acquire {
            n: amount(u)?,
            clock,
        },
        1 => LogOp::AcquireOne { clock },
        2 => LogOp::Peek {
            n: amount(u)?,
            clock,
        },
        3 => LogOp::Remaining { clock },
        _ => LogOp::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let spec = spec(u)?;
        let start = match u.int_in_range(0..=2u8)? {
            0 => 0,
            1 => u.int_in_range(0..=1 << 50)?,
            _ => u.arbitrary()?,
        };
        let ops_len = u.int_in_range(0..=MAX_OPS)?;
        let mut ops = Vec::with_capacity(ops_len);
        for _ in 0..ops_len {
            ops.push(op(u)?);
        }
        Ok(Input { spec, start, ops })
    }
}

fuzz_target!(|input: Input| {
    run(&input.spec, input.start, &input.ops);
});
