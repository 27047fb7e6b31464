//! The fixed window against an exact reference model (`tests/support/fixed_reference.rs`): random
//! quotas, alignments and operation sequences, with clocks that step backwards and jump forwards by
//! centuries, must get identical answers to the nanosecond; every denial's `retry_at` is checked to
//! be the first instant that admits.

use proptest::prelude::*;
use testkit::reference::fixed as fixed_reference;

use fixed_reference::{run, Op, Spec};
use testkit::consts::MAX_USABLE_NS;
use testkit::driver::limiter::{Call, Request};
use testkit::driver::step::Step;
use testkit::strategies::{request, step};

/// Counts weighted to the small (where windows fill up) with some up to the word's budget.
fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..=4,
        3 => 1u64..=100,
        1 => 1u64..=1 << 40,
    ]
}

/// Window lengths from 1 ns to centuries.
fn period_ns() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 1u64..=1_000,
        3 => 1u64..=10_000_000_000,
        1 => 1u64..=MAX_USABLE_NS,
        1 => Just(MAX_USABLE_NS),
    ]
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        count(),
        period_ns(),
        any::<u64>(),
        prop_oneof![Just(0u64), any::<u64>(), 0u64..1_000_000],
    )
        .prop_map(|(count, period_ns, offset, start)| Spec {
            count: count.min(period_ns.max(1)),
            period_ns,
            offset,
            start,
        })
}

/// The calls every limiter answers, and clock steps in windows.
fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        9 => request().prop_map(Op::Call),
        6 => step().prop_map(Op::Time),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn matches_the_reference_model(spec in spec(), ops in prop::collection::vec(op(), 1..64)) {
        if let Some(model) = run(spec, &ops) {
            // No window ever counted more than the limit.
            prop_assert!(model.counts().all(|c| c <= spec.count));
        }
    }
}

/// The case `fixed_window_model.proptest-regressions` holds, in the operations of today: one
/// admission per nanosecond, taken at 0, then asked for again at a reading stepped back below 0
/// (clamped to 0), which is denied until 1 exactly.
#[test]
fn a_step_back_below_zero_is_denied_until_the_next_window() {
    let spec = Spec {
        count: 1,
        period_ns: 1,
        offset: 0,
        start: 0,
    };
    let take = Op::Call(Request::via_clock(Call::AcquireOne));
    let ops = [take, Op::Time(Step::BackNanos(2)), take];
    let model = run(spec, &ops).expect("a valid spec");
    assert_eq!(model.counts().sum::<u64>(), 1, "the second take is refused");
}
