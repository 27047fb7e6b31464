//! What the loom model files share: `check_reaches`, which asserts that a model's race was run.
//!
//! Included with `mod common;` by each `#![cfg(tollgate_loom)]` test file, so it is only built under loom.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::sync::Mutex;

/// Runs `model` under loom and asserts that the summaries it returned, over every interleaving
/// explored, are exactly `expected`.
///
/// The assertions inside `model` say that nothing bad happens in any interleaving; this says that
/// each case they cover was actually run. loom 0.7's partial-order reduction can miss interleavings:
/// when a thread loads a word and then writes it (a `fetch_update`, or the load-then-CAS of
/// tollgate's update loop), that write is never scheduled ahead of another thread's plain load
/// made before the first thread's load (compare tokio-rs/loom issues 166 and 392). A model that
/// reads the clock on the main thread while spawned threads advance it passes having only ever
/// read 0; the clock model in `token_bucket.rs` therefore reads from a spawned thread, and checks it
/// saw every partial sum. The summaries are recorded in a `std` mutex: loom runs every model thread
/// on one OS thread, and nothing holds the lock across a loom operation.
pub(crate) fn check_reaches<T>(expected: &[T], model: impl Fn() -> T + Send + Sync + 'static)
where
    T: Ord + Debug + Send + 'static,
{
    let reached = std::sync::Arc::new(Mutex::new(BTreeSet::new()));
    let sink = std::sync::Arc::clone(&reached);
    loom::model(move || {
        let summary = model();
        sink.lock()
            .expect("a model panicked while recording")
            .insert(summary);
    });
    let reached = reached.lock().expect("a model panicked while recording");
    let expected: BTreeSet<&T> = expected.iter().collect();
    assert_eq!(
        reached.iter().collect::<BTreeSet<_>>(),
        expected,
        "the interleavings loom ran reached these summaries (left), the race allows these (right); \
         a preemption bound below LOOM_MAX_PREEMPTIONS=2 is too low to reach them all"
    );
}
