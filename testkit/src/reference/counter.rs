//! An exact reference model of tollgate's sliding window counters, written from the documented
//! semantics.
//!
//! The crate packs counts into one or a few words and rolls them forward incrementally. This model
//! does not: it keeps a `BTreeMap` from sub-window index to the number admitted in it, recomputes
//! the estimate from the map on every question, in `u128`/`i128`, and finds `retry_after` by binary
//! search over the admission predicate rather than by solving it. Its answers must equal the
//! crate's to the nanosecond.
//!
//! It depends on nothing of the crate: it answers in [`Outcome`]s, plain numbers.
//!
//! # The semantics modelled
//!
//! - `N` per window `W`, in `k` sub-windows of `w = W / k` ns; sub-window `h` covers the readings
//!   `[h × w − shift, (h + 1) × w − shift)`; readings are clamped to 2^62 ns first.
//! - The estimate at elapsed `e` of sub-window `j` is
//!   `count(j − k) × (w − e) / w + count(j − k + 1) + … + count(j)`; `n` is admitted when
//!   `estimate + n <= N`, exactly.
//! - `latest` is the sub-window of the last admission (0 at first). A reading in a sub-window
//!   before `latest` is judged at the start of `latest` (`e = 0`); an admission is counted in the
//!   sub-window it was judged in.
//! - remaining = `⌊N − estimate⌋` (0 when negative); reset = from the reading to the end of the
//!   last sub-window, counted from the latest non-empty one, in which the estimate still counts
//!   something (0 when empty); retry = from the reading to the earliest reading at which the same
//!   request would be admitted if nothing else happened.

use std::collections::BTreeMap;

use crate::consts::MAX_USABLE_NS;
use crate::Outcome;

/// The most sub-windows.
pub const MAX_SUB_WINDOWS: u64 = 1024;

/// The largest count that fits twice beside the index of windows of `w` ns in 64 bits.
pub fn max_count(w: u64) -> u64 {
    let w = u128::from(w.max(1));
    let max_index = (1u128 << 62).div_ceil(w);
    let index_bits = 128 - max_index.leading_zeros();
    let bits = (64 - index_bits) / 2;
    (1u64 << bits) - 1
}

/// What the documented ranges say a constructor answers for `count` per `period_ns` in `k`
/// sub-windows: the sub-window length, or the name of the refused field.
pub fn expected(count: u64, period_ns: u128, k: u64) -> Result<u64, &'static str> {
    if period_ns > u128::from(MAX_USABLE_NS) {
        return Err("period");
    }
    if k == 0 || k > MAX_SUB_WINDOWS || !period_ns.is_multiple_of(u128::from(k)) {
        return Err("sub_windows");
    }
    let w = u64::try_from(period_ns / u128::from(k)).map_err(|_| "period")?;
    if count > max_count(w) {
        return Err("count");
    }
    Ok(w)
}

/// The model's state.
#[derive(Debug, Clone)]
pub struct RefCounter {
    limit: u64,
    w: u64,
    k: u64,
    shift: u64,
    counts: BTreeMap<u64, u64>,
    latest: u64,
}

impl RefCounter {
    /// `limit` per `k` sub-windows of `w` ns, boundaries shifted by `shift` (`< w`).
    pub fn new(limit: u64, w: u64, k: u64, shift: u64) -> RefCounter {
        RefCounter {
            limit,
            w,
            k,
            shift,
            counts: BTreeMap::new(),
            latest: 0,
        }
    }

    fn start(&self, h: u64) -> i128 {
        i128::from(h) * i128::from(self.w) - i128::from(self.shift)
    }

    /// `(sub-window, elapsed, reading)` at which a reading is judged.
    fn point(&self, ns: u64) -> (u64, u64, u64) {
        let ns = ns.min(MAX_USABLE_NS);
        let t = u128::from(ns) + u128::from(self.shift);
        let j = u64::try_from(t / u128::from(self.w)).unwrap();
        let e = u64::try_from(t % u128::from(self.w)).unwrap();
        if j < self.latest {
            (self.latest, 0, ns)
        } else {
            (j, e, ns)
        }
    }

    fn count(&self, h: i128) -> u64 {
        if h < 0 {
            return 0;
        }
        self.counts
            .get(&u64::try_from(h).unwrap())
            .copied()
            .unwrap_or(0)
    }

    /// `estimate × w` at sub-window `m`, elapsed `e`, with the counts as they are.
    fn used(&self, m: u64, e: u64) -> u128 {
        let m = i128::from(m);
        let k = i128::from(self.k);
        let w = u128::from(self.w);
        let mut total = u128::from(self.count(m - k)) * (w - u128::from(e));
        for h in (m - k + 1)..=m {
            total += u128::from(self.count(h)) * w;
        }
        total
    }

    fn admits(&self, m: u64, e: u64, n: u64) -> bool {
        let w = u128::from(self.w);
        self.used(m, e) + u128::from(n) * w <= u128::from(self.limit) * w
    }

    fn remaining(&self, m: u64, e: u64) -> u64 {
        let w = u128::from(self.w);
        let cap = u128::from(self.limit) * w;
        let used = self.used(m, e);
        if used >= cap {
            0
        } else {
            u64::try_from((cap - used) / w).unwrap()
        }
    }

    fn reset(&self, m: u64, ns: u64) -> u128 {
        let k = i128::from(self.k);
        let m = i128::from(m);
        for h in (m - k..=m).rev() {
            if self.count(h) > 0 {
                // h counts up to the end of sub-window h + k.
                let end = self.start(u64::try_from(h + k + 1).unwrap());
                return u128::try_from(end - i128::from(ns)).unwrap();
            }
        }
        0
    }

    fn retry(&self, m0: u64, e0: u64, ns: u64, n: u64) -> u128 {
        self.first(m0, e0, ns, |m, e| self.admits(m, e, n))
    }

    /// Nanoseconds from the reading until `remaining` exceeds `left`, if nothing else is admitted:
    /// `None` when it is already `N` (nothing counts).
    fn next(&self, m0: u64, e0: u64, ns: u64, left: u64) -> Option<u128> {
        (left < self.limit).then(|| self.first(m0, e0, ns, |m, e| self.remaining(m, e) > left))
    }

    /// Nanoseconds from the reading `ns` to the earliest point at or after `(m0, e0)` at which
    /// `holds(m, e)`, a predicate that, once true, stays true as time passes (and is true once
    /// the window is empty), found by binary search within each sub-window.
    fn first(&self, m0: u64, e0: u64, ns: u64, holds: impl Fn(u64, u64) -> bool) -> u128 {
        for m in m0..=m0 + self.k + 1 {
            let lo = if m == m0 { e0 } else { 0 };
            // The estimate only falls within a sub-window: try its last nanosecond first.
            if !holds(m, self.w - 1) {
                continue;
            }
            let (mut lo, mut hi) = (lo, self.w - 1);
            if !holds(m, hi) || lo > hi {
                continue;
            }
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if holds(m, mid) {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            let at = self.start(m) + i128::from(lo);
            return u128::try_from(at - i128::from(ns)).unwrap();
        }
        unreachable!("the predicate holds once the window is empty")
    }

    /// Asks for `n` at reading `ns`; records an admission only when `write`.
    pub fn acquire(&mut self, ns: u64, n: u64, write: bool) -> Outcome {
        if n > self.limit {
            return Outcome::InsufficientCapacity {
                requested: n,
                capacity: self.limit,
            };
        }
        let (m, e, ns) = self.point(ns);
        if n == 0 {
            let left = self.remaining(m, e);
            return Outcome::Admitted {
                remaining: left,
                reset_after_ns: self.reset(m, ns),
                next_after_ns: self.next(m, e, ns, left),
            };
        }
        if self.admits(m, e, n) {
            if write {
                *self.counts.entry(m).or_insert(0) += n;
                self.latest = m;
                let keep = m.saturating_sub(self.k);
                self.counts.retain(|&h, _| h >= keep);
            }
            // What the counter looks like with this admission counted.
            let mut after = self.clone();
            *after.counts.entry(m).or_insert(0) += if write { 0 } else { n };
            let left = after.remaining(m, e);
            Outcome::Admitted {
                remaining: left,
                reset_after_ns: after.reset(m, ns),
                next_after_ns: after.next(m, e, ns, left),
            }
        } else {
            let left = self.remaining(m, e);
            Outcome::denied(
                ns,
                self.retry(m, e, ns, n),
                left,
                self.reset(m, ns),
                self.next(m, e, ns, left),
            )
        }
    }

    /// `⌊N − estimate⌋` at `ns`.
    pub fn remaining_at(&self, ns: u64) -> u64 {
        let (m, e, _) = self.point(ns);
        self.remaining(m, e)
    }
}
