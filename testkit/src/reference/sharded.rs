//! An exact model of tollgate's `ShardedBucket`, written from its documented semantics on top of the
//! single-bucket model in [`crate::reference::bucket`]: one [`RefBucket`] per shard.
//!
//! It depends on nothing but the bucket model.
//!
//! # The semantics modelled
//!
//! - **The split.** `S` parts of the quota (a power of two): part `i` of a total `x` (the count, the
//!   capacity, the initial fill) is `x / S`, plus one for `i < x % S`, and keeps the period, so its
//!   interval is `ceil(P / n_i)`. A part is valid when `Quota::per_period(n_i, P)` (which also
//!   checks `n_i` as a default capacity), `with_capacity(c_i)` and `with_initial(f_i)` all are; if
//!   any part is not, the split is retried with `S / 2` shards, and one shard is the quota itself.
//! - **Taking `n` (`1 <= n <= C`) as a caller whose home is `h`** (masked by `S - 1`): the home
//!   shard admits if `n` fits its capacity and it holds `n` whole tokens, answering with that
//!   shard's own `remaining` and `reset_after`. Otherwise, if the shards' whole tokens add up to
//!   fewer than `n`, a denial; else the caller takes what each shard holds, from home on, until it
//!   has `n`, and is answered with the shards as they are after the admission: their whole tokens
//!   and the time until every shard is full.
//! - **A denial** reports the shards' whole tokens, the time until every shard is full, and a
//!   `retry_after`: for one token, the soonest any shard holds a whole token; for more, the smallest
//!   wait at which the shards' whole tokens add up to `n`, searched in `[0, full]` (and `full` when
//!   none is found there, as happens once readings stop at the 2^62 ns clamp).
//! - **Figures computed across shards** are whole nanoseconds that stop at `u64::MAX`.
//! - **A refund of `n`** visits the shards from home on; a shard missing `m` units takes back
//!   `k = min(ceil(m / I), left)` tokens of the refund (the last may only part fit) and is refunded
//!   `k` as one bucket would be; a full shard takes nothing.
//! - **A peek of `n`** (`peek_n_at`, by a caller whose home is `h`) is denied as a take would be;
//!   admitted, it reports the shards' whole tokens less `n` and the time until every shard is full
//!   as they would be after the caller's own take of `n` (from home on).
//! - **Reserving `n`** (`1 <= n <= C`, from home `h`, waiting at most `max_wait`): the home shard
//!   alone when it admits `n` (ready at the reading); otherwise the wait `w` until the shards'
//!   whole tokens add up to `n` (0 if they do now, else a denial's `retry_after`); beyond
//!   `max_wait`, a denial with `retry_after = w - max_wait` and the shards' figures; else from
//!   home on, each shard reserves the tokens it holds by the reading plus `w` (its
//!   [`RefBucket::reserve_by`]), until `n`; ready at the latest part's ready instant (the reading
//!   when none waits). `n = 0` reserves nothing.
//! - **Cancelling** at a reading after the reservation's ready instant gives back nothing;
//!   otherwise each part, in order, as its shard's bucket gives back a reservation.
//! - **Taking up to `n`** (`n >= 1`, from home `h`): what each shard holds, from home on, until
//!   `n`; answered with the shards' whole tokens and the time until all are full, or, with none
//!   taken, the denial of one token. `n = 0` is a query.
//! - **`next_after`** is, wherever `remaining` is the shards' whole tokens summed, the soonest any
//!   shard holds one more whole token than it does (`None` when all are full), stopping at
//!   [`NEXT_MAX_NS`]; an admission at home reports the home shard's own, as its `remaining` is.
//! - **`n = 0`** is a query answered with the shards' whole tokens and the time until all are full;
//!   **`n > C`** is `InsufficientCapacity` for the whole quota's capacity.

use crate::consts::{MAX_USABLE_NS, NEXT_MAX_NS};
use crate::reference::bucket::{self as reference, RefBucket, RefPolicy, RefReservation};
use crate::Outcome;

/// A sharded reservation as the model keeps it: its parts, each a reservation on one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardedReservation {
    /// Tokens reserved.
    pub tokens: u64,
    /// The reading the decision used, clamped.
    pub now_ns: u64,
    /// When all its tokens are the caller's.
    pub ready_at_ns: u64,
    /// `(shard index, its part)`, in the order reserved.
    pub parts: Vec<(usize, RefReservation)>,
}

/// One shard of the model: its part of the count and its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShard {
    /// Tokens per period of this part (`n_i`).
    pub count: u64,
    /// The part's bucket.
    pub bucket: RefBucket,
}

/// The sharded model: the shards in index order and the whole quota's capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardedModel {
    /// The shards; their number is a power of two.
    pub shards: Vec<ModelShard>,
    /// The whole quota's capacity `C`.
    pub capacity: u64,
}

/// Part `index` of `parts` of `total`: the quotient, plus one for the lowest `total % parts`.
pub fn share(total: u64, parts: u64, index: u64) -> u64 {
    total / parts + u64::from(index < total % parts)
}

/// Part `index` of `parts` of the quota `count` per `period_ns` with `capacity` and `initial`, as
/// `Quota::part` validates it: the part's count, constants and initial fill, or `None`.
fn part(
    count: u64,
    period_ns: u128,
    capacity: u64,
    initial: u64,
    parts: u64,
    index: u64,
) -> Option<(u64, RefPolicy, u64)> {
    let n = share(count, parts, index);
    // `per_period(n, P)` starts with a capacity of `n`, which must be in range too.
    let interval = reference::interval_ns(n, period_ns)?;
    if n > reference::max_capacity(interval) {
        return None;
    }
    let policy = RefPolicy::new(n, period_ns, share(capacity, parts, index))?;
    let fill = share(initial, parts, index);
    (fill <= policy.capacity).then_some((n, policy, fill))
}

impl ShardedModel {
    /// The model of a limiter for `count` per `period_ns` (the whole quota's constants `whole`, and
    /// its initial fill `initial`) asked for `wanted` shards (a power of two), built at `start_ns`.
    pub fn new(
        count: u64,
        period_ns: u128,
        whole: RefPolicy,
        initial: u64,
        wanted: usize,
        start_ns: u64,
    ) -> ShardedModel {
        let mut parts = wanted.max(1) as u64;
        let split = loop {
            let split: Option<Vec<_>> = (0..parts)
                .map(|i| part(count, period_ns, whole.capacity, initial, parts, i))
                .collect();
            match split {
                Some(split) => break split,
                None if parts > 1 => parts /= 2,
                None => break vec![(count, whole, initial)],
            }
        };
        let shards = split
            .into_iter()
            .map(|(count, policy, fill)| ModelShard {
                count,
                bucket: RefBucket::new(policy.begun_at(start_ns), fill, start_ns)
                    .expect("a fill within the part"),
            })
            .collect();
        ShardedModel {
            shards,
            capacity: whole.capacity,
        }
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The shard index for a caller whose home is `home`.
    fn index(&self, home: usize) -> usize {
        home & (self.shards.len() - 1)
    }

    /// The shards' whole tokens at `now_ns`, summed.
    pub fn tokens(&self, now_ns: u64) -> u64 {
        self.shards.iter().map(|s| s.bucket.remaining(now_ns)).sum()
    }

    /// Nanoseconds until every shard is full, as of `now_ns`, stopping at `u64::MAX`.
    fn full_ns(&self, now_ns: u64) -> u128 {
        let full = self
            .shards
            .iter()
            .map(|s| match s.bucket.peek(0, now_ns) {
                Outcome::Admitted { reset_after_ns, .. } => reset_after_ns,
                other => unreachable!("a query is always admitted, got {other:?}"),
            })
            .max()
            .unwrap_or(0);
        full.min(u128::from(u64::MAX))
    }

    /// Nanoseconds until the shards' whole tokens, summed, grow by one, as of `now_ns`: the soonest
    /// any shard gains one (stopping at [`NEXT_MAX_NS`]); `None` when every shard is full.
    fn next_ns(&self, now_ns: u64) -> Option<u128> {
        self.shards
            .iter()
            .filter_map(|s| s.bucket.next_token_ns(now_ns))
            .min()
            .map(|ns| ns.min(NEXT_MAX_NS))
    }

    /// The answer to a request for nothing.
    fn query(&self, now_ns: u64) -> Outcome {
        Outcome::Admitted {
            remaining: self.tokens(now_ns),
            reset_after_ns: self.full_ns(now_ns),
            next_after_ns: self.next_ns(now_ns),
        }
    }

    /// The refusal of `n` (`1 <= n <= C`) tokens at `now_ns`.
    fn denied(&self, n: u64, now_ns: u64) -> Outcome {
        let base = now_ns.min(MAX_USABLE_NS);
        let full = self.full_ns(now_ns);
        let wait = if n == 1 {
            self.shards
                .iter()
                .map(|s| match s.bucket.peek(1, now_ns) {
                    Outcome::Admitted { .. } => 0,
                    Outcome::Denied { retry_after_ns, .. } => retry_after_ns,
                    other => unreachable!("every shard holds at least one token, got {other:?}"),
                })
                .min()
                .unwrap_or(0)
                .min(u128::from(u64::MAX))
        } else {
            let (mut lo, mut hi) = (0u64, u64::try_from(full).expect("capped"));
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.tokens(base.saturating_add(mid)) >= n {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            u128::from(lo)
        };
        Outcome::Denied {
            retry_after_ns: wait,
            retry_at_ns: u64::try_from(u128::from(base) + wait).unwrap_or(u64::MAX),
            remaining: self.tokens(now_ns),
            reset_after_ns: full,
            next_after_ns: self.next_ns(now_ns),
        }
    }

    /// `InsufficientCapacity` for `n > C`, the query for `n = 0`, `None` otherwise.
    fn check(&self, n: u64, now_ns: u64) -> Option<Outcome> {
        if n > self.capacity {
            Some(Outcome::InsufficientCapacity {
                requested: n,
                capacity: self.capacity,
            })
        } else if n == 0 {
            Some(self.query(now_ns))
        } else {
            None
        }
    }

    /// `try_acquire_n_from(home, n, now)`.
    pub fn acquire(&mut self, home: usize, n: u64, now_ns: u64) -> Outcome {
        if let Some(outcome) = self.check(n, now_ns) {
            return outcome;
        }
        let home = self.index(home);
        let shard = &mut self.shards[home].bucket;
        if n <= shard.policy().capacity {
            let outcome = shard.acquire(n, now_ns);
            if matches!(outcome, Outcome::Admitted { .. }) {
                return outcome;
            }
        }
        let total = self.tokens(now_ns);
        if total < n {
            return self.denied(n, now_ns);
        }
        let mut got = 0;
        for step in 0..self.shards.len() {
            let index = self.index(home + step);
            let shard = &mut self.shards[index].bucket;
            let k = shard.remaining(now_ns).min(n - got);
            if k > 0 {
                let taken = shard.acquire(k, now_ns);
                assert!(
                    matches!(taken, Outcome::Admitted { .. }),
                    "a shard holding {k} whole tokens refused them: {taken:?}"
                );
                got += k;
            }
            if got == n {
                break;
            }
        }
        assert_eq!(got, n, "one caller alone gathers what the shards hold");
        self.query(now_ns)
    }

    /// `peek_n_at(n, now)` by a caller whose home is `home`.
    pub fn peek(&self, home: usize, n: u64, now_ns: u64) -> Outcome {
        if let Some(outcome) = self.check(n, now_ns) {
            return outcome;
        }
        let total = self.tokens(now_ns);
        if total >= n {
            // The shards as they would be after the caller's acquisition: the same figures that
            // acquisition reports when it gathers.
            let mut after = self.clone();
            let _ = after.acquire(home, n, now_ns);
            Outcome::Admitted {
                remaining: total - n,
                reset_after_ns: after.full_ns(now_ns),
                next_after_ns: after.next_ns(now_ns),
            }
        } else {
            self.denied(n, now_ns)
        }
    }

    /// `reserve_n_from(home, n, max_wait, now)` for a `max_wait` within the accepted range.
    pub fn reserve(
        &mut self,
        home: usize,
        n: u64,
        max_wait_ns: u64,
        now_ns: u64,
    ) -> Result<ShardedReservation, Outcome> {
        let base = now_ns.min(MAX_USABLE_NS);
        let mut reservation = ShardedReservation {
            tokens: 0,
            now_ns: base,
            ready_at_ns: base,
            parts: Vec::new(),
        };
        if n > self.capacity {
            return Err(self.check(n, now_ns).expect("above the capacity"));
        }
        if n == 0 {
            return Ok(reservation);
        }
        reservation.tokens = n;
        let home = self.index(home);
        let shard = &mut self.shards[home].bucket;
        if n <= shard.policy().capacity && shard.peek(n, now_ns).is_admitted() {
            let part = shard.reserve(n, 0, now_ns).expect("admitted");
            reservation.parts.push((home, part));
            return Ok(reservation);
        }
        let wait = if self.tokens(now_ns) >= n {
            0
        } else {
            match self.denied(n, now_ns) {
                Outcome::Denied { retry_after_ns, .. } => retry_after_ns,
                other => unreachable!("a denial, got {other:?}"),
            }
        };
        if wait > u128::from(max_wait_ns) {
            let retry_after_ns = wait - u128::from(max_wait_ns);
            return Err(Outcome::Denied {
                retry_after_ns,
                retry_at_ns: u64::try_from(u128::from(base) + retry_after_ns).unwrap_or(u64::MAX),
                remaining: self.tokens(now_ns),
                reset_after_ns: self.full_ns(now_ns),
                next_after_ns: self.next_ns(now_ns),
            });
        }
        let deadline = u128::from(base) + wait;
        let mut got = 0;
        for step in 0..self.shards.len() {
            if got == n {
                break;
            }
            let index = self.index(home + step);
            if let Some(part) = self.shards[index]
                .bucket
                .reserve_by(n - got, deadline, now_ns)
            {
                got += part.tokens;
                reservation.ready_at_ns = reservation.ready_at_ns.max(part.ready_at_ns);
                reservation.parts.push((index, part));
            }
        }
        assert_eq!(
            got, n,
            "one caller alone reserves what the shards hold by then"
        );
        Ok(reservation)
    }

    /// `Reservation::cancel_at(now)` of a sharded reservation: answers how many went back.
    pub fn cancel(&mut self, r: &ShardedReservation, now_ns: u64) -> u64 {
        if r.tokens == 0 || now_ns.min(MAX_USABLE_NS) > r.ready_at_ns {
            return 0;
        }
        r.parts
            .iter()
            .map(|(index, part)| self.shards[*index].bucket.give_back(part, now_ns))
            .sum()
    }

    /// `take_up_to_from(home, n, now)`: the tokens taken and the answer.
    pub fn take_up_to(&mut self, home: usize, n: u64, now_ns: u64) -> (u64, Outcome) {
        if n == 0 {
            return (0, self.query(now_ns));
        }
        let home = self.index(home);
        let mut got = 0;
        for step in 0..self.shards.len() {
            if got == n {
                break;
            }
            let index = self.index(home + step);
            let (k, _) = self.shards[index].bucket.take_up_to(n - got, now_ns);
            got += k;
        }
        if got == 0 {
            return (0, self.denied(1, now_ns));
        }
        (got, self.query(now_ns))
    }

    /// `refund_from(home, n, now)`.
    pub fn refund(&mut self, home: usize, n: u64, now_ns: u64) {
        let mut left = n;
        for step in 0..self.shards.len() {
            if left == 0 {
                return;
            }
            let index = self.index(home.wrapping_add(step));
            let bucket = &mut self.shards[index].bucket;
            let policy = *bucket.policy();
            let missing = policy.burst - bucket.level_units(now_ns);
            if missing <= 0 {
                continue;
            }
            let whole = (missing + policy.interval - 1) / policy.interval;
            let k = u64::try_from(whole).unwrap_or(u64::MAX).min(left);
            bucket.refund(k, now_ns);
            left -= k;
        }
    }
}
