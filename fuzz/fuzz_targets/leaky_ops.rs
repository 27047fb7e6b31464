//! Arbitrary quotas and operation sequences on the leaky bucket, every answer compared with the
//! exact reference model to the nanosecond.
//!
//! The input is a list of [`Sequence`]s, each for one kind of leaky limiter: the meter
//! (`LeakyMeter` against `testkit::reference::meter`, through the same driver as the proptest
//! in `tests/leaky_meter_model.rs`, then the departure spacing check), or the queue (`LeakyReceiver` on
//! a manual clock with three producers, through `testkit::driver::queue` as in
//! `tests/leaky_queue_model.rs`: every ticket and release exact, a final receive loop at the end of
//! time getting every item still waiting, the delivered sequence equal to the accepted one).

#![no_main]

use std::time::Duration;
use testkit::driver::bucket as bucket_driver;
use testkit::driver::limiter::Amount;
use testkit::driver::meter as meter_driver;
use testkit::driver::queue as queue_driver;
use testkit::driver::step::Step;
use testkit::fuzz_input as shared_input;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;

use bucket_driver::QuotaSpec;
use meter_driver::{check_departures, run, MeterOp};
use queue_driver::{QueueOp, QueueSpec};
use shared_input::{amount, list, quota_spec, request, spread, start, step, via_clock};

/// The most operations one sequence runs.
const MAX_OPS: usize = 256;

/// The most sequences one input runs.
const MAX_SEQUENCES: usize = 4;

/// One run of one leaky limiter.
#[derive(Debug)]
enum Sequence {
    /// A `LeakyMeter`: operations against the model, then requests for the spacing check.
    Meter {
        spec: QuotaSpec,
        start: u64,
        ops: Vec<MeterOp>,
        /// The spacing check's quota: `spec` with a small capacity, so that refusals are common.
        spacing_spec: QuotaSpec,
        /// `(offset from start, places, strict)` for the spacing check.
        spacing: Vec<(u64, Amount, bool)>,
    },
    /// A `LeakyReceiver` with three producers on a manual clock starting at `start`.
    Queue {
        spec: QueueSpec,
        start: u64,
        ops: Vec<QueueOp>,
    },
}

/// Clock steps (mostly a few microseconds forwards, where releases are paced), sends from three
/// producers, receives, closes from either side, drains, dropped senders and leftovers.
fn queue_op(u: &mut Unstructured<'_>) -> Result<QueueOp> {
    Ok(match u.int_in_range(0..=25u8)? {
        0..=3 => QueueOp::Time(Step::Nanos(u.int_in_range(0..=3_000)?)),
        4 | 5 => QueueOp::Time(step(u)?),
        6..=13 => QueueOp::Send {
            producer: u.arbitrary()?,
            clock: u.arbitrary()?,
        },
        14..=21 => QueueOp::Recv {
            clock: u.arbitrary()?,
        },
        22 => QueueOp::Close {
            producer: u.arbitrary()?,
        },
        23 => QueueOp::DrainNow,
        24 => QueueOp::DropSender(u.arbitrary()?),
        _ => QueueOp::Leftovers,
    })
}

fn queue_sequence(u: &mut Unstructured<'_>) -> Result<Sequence> {
    let count = match u.int_in_range(0..=5u8)? {
        0..=3 => u.int_in_range(1..=10)?,
        4 => u.int_in_range(1..=1_000_000)?,
        _ => u.arbitrary()?,
    };
    let period = Duration::from_nanos(match u.int_in_range(0..=6u8)? {
        0..=3 => u.int_in_range(1..=10_000)?,
        4 | 5 => u.int_in_range(1..=10_000_000_000)?,
        _ => u.arbitrary()?,
    });
    let capacity = match u.int_in_range(0..=9u8)? {
        0 | 1 => None,
        2..=7 => Some(u.int_in_range(1..=6)?),
        8 => Some(queue_driver::MAX_CAPACITY + 1),
        _ => Some(u.arbitrary()?),
    };
    let start = match u.int_in_range(0..=2u8)? {
        0 => 0,
        1 => u.int_in_range(0..=1_000_000)?,
        _ => u64::MAX,
    };
    let ops = list(u, MAX_OPS, queue_op)?;
    Ok(Sequence::Queue {
        spec: QueueSpec {
            count,
            period,
            capacity,
        },
        start,
        ops,
    })
}

/// The strict calls every limiter answers (four in eight), scheduling calls, clock steps.
fn meter_op(u: &mut Unstructured<'_>) -> Result<MeterOp> {
    Ok(match u.int_in_range(0..=7u8)? {
        0..=3 => MeterOp::Call(request(u)?),
        4 => MeterOp::Schedule {
            clock: via_clock(u)?,
            n: amount(u)?,
        },
        5 => MeterOp::ScheduleOne {
            clock: via_clock(u)?,
        },
        6 => MeterOp::PeekSchedule {
            clock: via_clock(u)?,
            n: amount(u)?,
        },
        _ => MeterOp::Time(step(u)?),
    })
}

fn meter_sequence(u: &mut Unstructured<'_>) -> Result<Sequence> {
    let spec = quota_spec(u, 8)?;
    let start = start(u)?;
    let ops = list(u, MAX_OPS, meter_op)?;
    let small = u.int_in_range(1..=8)?;
    let spacing_spec = QuotaSpec {
        capacity: Some(spec.rate.max_capacity().min(small)),
        ..spec
    };
    let interval_ns = spec.rate.interval_ns().unwrap_or(1);
    let spacing = list(u, MAX_OPS, |u| {
        let (offset, n) = spread(u, interval_ns)?;
        Ok((offset, n, u.ratio(1u8, 4u8)?))
    })?;
    Ok(Sequence::Meter {
        spec,
        start,
        ops,
        spacing_spec,
        spacing,
    })
}

/// One fuzz input: a few sequences, each of any kind.
#[derive(Debug)]
struct Input {
    sequences: Vec<Sequence>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let len = u.int_in_range(1..=MAX_SEQUENCES)?;
        let mut sequences = Vec::with_capacity(len);
        for _ in 0..len {
            sequences.push(if u.arbitrary()? {
                meter_sequence(u)?
            } else {
                queue_sequence(u)?
            });
        }
        Ok(Input { sequences })
    }
}

fuzz_target!(|input: Input| {
    for sequence in &input.sequences {
        match sequence {
            Sequence::Meter {
                spec,
                start,
                ops,
                spacing_spec,
                spacing,
            } => {
                run(spec, *start, ops);
                check_departures(spacing_spec, *start, spacing);
            }
            Sequence::Queue { spec, start, ops } => queue_driver::run(spec, *start, ops),
        }
    }
});
