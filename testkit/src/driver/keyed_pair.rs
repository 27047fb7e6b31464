//! Drives two keyed limiters running the same algorithm `A` (any of them: the windows, the log, the
//! tiered forms), one evicting whenever told to and one never evicting, through the same
//! operations on a small key space, and asserts that eviction never changes a decision:
//!
//! - at every reading at or after the floor (the latest reading any eviction used), the two answer
//!   exactly alike: checks, peeks and remaining counts;
//! - at an earlier reading (a clock stepping back across an eviction) the evicting one may only be
//!   more restrictive: it admits only what the other admits, and reports no more remaining. A check
//!   there that admits on either side may leave the two states different (a key created afresh
//!   records the floor, not the reading), so from the first such check on the two are no longer
//!   compared.
//!
//! The token bucket has a finer check against exact reference models ([`crate::driver::keyed`]); this
//! one needs no model, so it covers every algorithm. Used by `tests/keyed_model.rs` and the fuzz
//! crate's `keyed_ops` target.

use tollgate::keyed::{Algorithm, KeyedLimiter};
use tollgate::{ManualClock, Nanos, Quota};

use crate::consts::MAX_USABLE_NS;
use crate::driver::keyed::{call_key, no_looser, KeyedOp, MAX_OPS};

/// Runs `ops` (at most [`MAX_OPS`]) from the reading `start` on two limiters of algorithm `A` for
/// `quota`, asserting the rules in the file's docs. Answers how many keys the evicting one evicted,
/// or `None` when `A` refuses the quota (for which `with_algorithm` must name a field).
pub fn run_pair<A: Algorithm>(quota: Quota, start: u64, ops: &[KeyedOp]) -> Option<u64> {
    let evicting: KeyedLimiter<u8, A, ManualClock> =
        match KeyedLimiter::with_algorithm(quota, ManualClock::new()) {
            Ok(limiter) => limiter,
            Err(e) => {
                assert!(!e.field().is_empty());
                return None;
            }
        };
    let keeping: KeyedLimiter<u8, A, ManualClock> =
        KeyedLimiter::with_algorithm(quota, ManualClock::new()).expect("accepted just above");
    let mut now = start;
    let mut floor = 0u64;
    let mut compared = true;
    let mut evicted = 0u64;
    // The evicting limiter's clock reads the latest reading so far (see `keyed_driver::run`).
    let mut latest = start;
    let capacity = quota.capacity();
    let unit_ns =
        u64::try_from(quota.interval().as_nanos()).expect("a valid quota's interval fits");
    for (i, op) in ops.iter().take(MAX_OPS).enumerate() {
        let at = Nanos::new(now);
        latest = latest.max(now);
        evicting.clock().set(Nanos::new(latest));
        let before_floor = now.min(MAX_USABLE_NS) < floor;
        let ctx = format!("op {i} {op:?} at {now} (floor {floor})");
        match *op {
            KeyedOp::Call { key, call } => {
                let call = call.resolve(capacity);
                let a = call_key(&evicting, key, call, now);
                let b = call_key(&keeping, key, call, now);
                if compared {
                    if before_floor {
                        assert!(no_looser(call, &a, &b), "{a:?} vs {b:?}: {ctx}");
                        // A take that admits on either side may leave the states different.
                        if call.takes() && (a.is_admitted() || b.is_admitted()) {
                            compared = false;
                        }
                    } else {
                        assert_eq!(a, b, "{ctx}");
                    }
                }
            }
            KeyedOp::Evict => {
                let held = evicting.len();
                let removed = evicting.retain_recent_at(at);
                assert_eq!(evicting.len(), held - removed, "{ctx}");
                floor = floor.max(now.min(MAX_USABLE_NS));
                evicted += removed as u64;
            }
            // Only the token bucket reserves and takes partly (`keyed::run` drives those).
            KeyedOp::Reserve { .. } | KeyedOp::Cancel { .. } | KeyedOp::TakeUpTo { .. } => {}
            KeyedOp::Time(step) => now = step.next(now, unit_ns),
        }
        assert!(evicting.len() <= keeping.len() || !compared, "{ctx}");
    }
    assert_eq!(evicting.evictions(), evicted);
    assert_eq!(keeping.evictions(), 0);
    Some(evicted)
}
