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

use tollgate::keyed::{Algorithm, KeyedError, KeyedLimiter};
use tollgate::{ManualClock, Nanos, Quota};

use crate::consts::MAX_USABLE_NS;
use crate::driver::keyed::{KeyedOp, MAX_OPS};

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
    for (i, op) in ops.iter().take(MAX_OPS).enumerate() {
        let at = Nanos::new(now);
        latest = latest.max(now);
        evicting.clock().set(Nanos::new(latest));
        let before_floor = now.min(MAX_USABLE_NS) < floor;
        let ctx = format!("op {i} {op:?} at {now} (floor {floor})");
        match *op {
            KeyedOp::Check { key, n } => {
                let a = evicting.check_key_n_at(&key, n, at);
                let b = keeping.check_key_n_at(&key, n, at);
                if compared {
                    if before_floor {
                        assert!(a.is_err() || b.is_ok(), "{a:?} vs {b:?}: {ctx}");
                        if a.is_ok() || b.is_ok() {
                            compared = false;
                        }
                    } else {
                        assert_eq!(a, b, "{ctx}");
                    }
                }
                check_error(&a, &ctx);
            }
            KeyedOp::Peek { key, n } => {
                let a = evicting.peek_key_n_at(&key, n, at);
                let b = keeping.peek_key_n_at(&key, n, at);
                if compared {
                    if before_floor {
                        assert!(a.is_err() || b.is_ok(), "{a:?} vs {b:?}: {ctx}");
                    } else {
                        assert_eq!(a, b, "{ctx}");
                    }
                }
                check_error(&a, &ctx);
            }
            KeyedOp::Remaining { key } => {
                let a = evicting.remaining_key_at(&key, at);
                let b = keeping.remaining_key_at(&key, at);
                if compared {
                    if before_floor {
                        assert!(a <= b, "eviction made room: {a} vs {b}: {ctx}");
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
            KeyedOp::Forward(d) => now = now.saturating_add(d),
            KeyedOp::Back(d) => now = now.saturating_sub(d),
        }
        assert!(evicting.len() <= keeping.len() || !compared, "{ctx}");
    }
    assert_eq!(evicting.evictions(), evicted);
    assert_eq!(keeping.evictions(), 0);
    Some(evicted)
}

/// A refusal is a denial or a request beyond the capacity: the map never fills in these runs.
fn check_error<T: std::fmt::Debug>(outcome: &Result<T, KeyedError>, ctx: &str) {
    if let Err(e) = outcome {
        assert!(
            matches!(
                e,
                KeyedError::Denied(_) | KeyedError::InsufficientCapacity(_)
            ),
            "{e:?}: {ctx}"
        );
    }
}
