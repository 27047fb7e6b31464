//! Arbitrary quotas and operation sequences on a `TokenBucket` (reservations, cancels and takes of
//! up to `n` among them), every answer compared with the exact reference model to the nanosecond,
//! and `C + R × t` checked at every instant tokens become the caller's; then the rate bound over a window of readings.
//!
//! The model and the driver are `testkit`'s, as for the proptest in `tests/token_bucket_model.rs`;
//! only the way inputs are generated differs.

#![no_main]

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use testkit::driver::bucket as bucket_driver;
use testkit::driver::limiter::Amount;
use testkit::fuzz_input as shared_input;

use bucket_driver::{check_window, run, Op, QuotaSpec};
use shared_input::{amount, list, quota_spec, request, spread, start, step, via_clock, wait};

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

/// The calls every limiter answers (four in ten), refunds, reservations and their cancels, takes
/// of up to `n`, clock steps.
fn op(u: &mut Unstructured<'_>) -> Result<Op> {
    Ok(match u.int_in_range(0..=9u8)? {
        0..=3 => Op::Call(request(u)?),
        4 => Op::Refund {
            clock: via_clock(u)?,
            n: amount(u)?,
        },
        5 => Op::Reserve {
            clock: via_clock(u)?,
            n: amount(u)?,
            wait: wait(u)?,
        },
        6 => Op::Cancel {
            clock: via_clock(u)?,
            index: u.arbitrary()?,
        },
        7 => Op::TakeUpTo {
            clock: via_clock(u)?,
            n: amount(u)?,
        },
        _ => Op::Time(step(u)?),
    })
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let spec = quota_spec(u, 8)?;
        let start = start(u)?;
        let ops = list(u, MAX_OPS, op)?;
        let small = u.int_in_range(1..=8)?;
        let window_spec = QuotaSpec {
            capacity: Some(spec.rate.max_capacity().min(small)),
            initial: None,
            ..spec
        };
        let interval_ns = spec.rate.interval_ns().unwrap_or(1);
        let window = list(u, MAX_OPS, |u| spread(u, interval_ns))?;
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
