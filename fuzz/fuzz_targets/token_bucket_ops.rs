//! Arbitrary quotas and operation sequences on a `TokenBucket`, every answer compared with the
//! exact reference model to the nanosecond; then the rate bound over a window of readings.
//!
//! The model and the driver are `testkit`'s, as for the proptest in `tests/token_bucket_model.rs`;
//! only the way inputs are generated differs.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::driver::bucket as bucket_driver;
use testkit::fuzz_input as shared_input;
use testkit::reference::bucket as reference;

use bucket_driver::{check_window, run, Amount, Op, QuotaSpec};
use shared_input::{amount, max_capacity, quota_spec, step};

/// The most operations one input runs.
const MAX_OPS: usize = 256;

/// One fuzz input: a quota, a starting reading, operations, and requests for the window check.
#[derive(Debug)]
struct Input {
    spec: QuotaSpec,
    start: u64,
    ops: Vec<Op>,
    /// The window check's quota: `spec` with a small capacity, so that the bound is tight.
    window_spec: QuotaSpec,
    /// `(offset from start, tokens)` for the window check.
    window: Vec<(u64, Amount)>,
}

fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    // One call in four reads the bucket's clock instead of passing the reading.
    let clock = u.ratio(1u8, 4u8)?;
    Ok(match u.int_in_range(0..=5u8)? {
        0 => Op::Acquire {
            n: amount(u)?,
            clock,
        },
        1 => Op::AcquireOne { clock },
        2 => Op::Peek {
            n: amount(u)?,
            clock,
        },
        3 => Op::Refund {
            n: amount(u)?,
            clock,
        },
        4 => Op::Remaining { clock },
        _ => Op::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let spec = quota_spec(u, 8)?;
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
        let small = u.int_in_range(1..=8)?;
        let window_spec = QuotaSpec {
            capacity: Some(max_capacity(&spec.rate).min(small)),
            initial: None,
            ..spec
        };
        let interval_ns =
            reference::interval_ns(spec.rate.count(), spec.rate.period().as_nanos()).unwrap_or(1);
        let window_len = u.int_in_range(0..=MAX_OPS)?;
        let mut window = Vec::with_capacity(window_len);
        for _ in 0..window_len {
            let num: u8 = u.arbitrary()?;
            let den: u8 = u.int_in_range(1..=8)?;
            let offset = u128::from(num) * u128::from(interval_ns) / u128::from(den);
            let n = if u.ratio(3u8, 4u8)? {
                Amount::One
            } else {
                amount(u)?
            };
            window.push((u64::try_from(offset).unwrap_or(u64::MAX), n));
        }
        Ok(Input {
            spec,
            start,
            ops,
            window_spec,
            window,
        })
    }
}

fuzz_target!(|input: Input| {
    run(&input.spec, input.start, &input.ops);
    check_window(&input.window_spec, input.start, &input.window);
});
