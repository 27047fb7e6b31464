//! Drives a [`ShardedBucket`] from one thread and the sharded model ([`crate::reference::sharded`]) through
//! the same operations, each with the caller's home shard chosen per operation, and checks every
//! answer and the documented bounds.
//!
//! Used by `tests/sharded_model.rs` (proptest) and the fuzz crate's `sharded_ops` target
//! (arbitrary), with the bucket driver's quota specs. The calls any limiter answers go through
//! [`crate::driver::limiter`] from the thread's home, the clock moves by [`Step`]s; homes chosen
//! per call, peeks then takes, and refunds are this driver's own.

use tollgate::reservation::Reservation;
use tollgate::{sharded, AcquireError, Admitted, Clock, ManualClock, Nanos, ShardedBucket};

use crate::consts::{MAX_USABLE_NS, MAX_WAIT_NS};
use crate::driver::bucket::{check_quota, observe_partial, observe_reservation, QuotaSpec, Wait};
use crate::driver::limiter::{Amount, Model, Request};
use crate::driver::step::Step;
use crate::outcome::observe;
use crate::reference::sharded::{ShardedModel, ShardedReservation};
use crate::Outcome;

/// Who gives tokens back: a home chosen by the caller (`refund_from`), or the calling thread's own
/// slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// `refund_from` with this home (any `usize`: it is masked).
    From(usize),
    /// `refund_at`: the thread's home, the reading passed in.
    At,
    /// `refund`, which reads the limiter's clock: the thread's home.
    Clock,
}

/// One operation on the limiter: a call every limiter answers (from the calling thread's home),
/// one of the sharded bucket's own (a caller's chosen home, a peek then a take, a refund), or a
/// step of the clock (in the quota's intervals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardOp {
    /// `try_acquire(_n)(_at)`, `peek_n(_at)` or `remaining(_at)` from the thread's home, through
    /// [`crate::driver::limiter::check`] against the model seen from that home.
    Call(Request),
    /// `try_acquire_n_from(home, n, t)`.
    AcquireFrom {
        /// Tokens asked for.
        n: Amount,
        /// The caller's home (any `usize`: it is masked).
        home: usize,
    },
    /// `peek_n_at(n, t)` then at once `try_acquire_n_from(home, n, t)`: they must agree.
    PeekThenAcquire {
        /// Tokens asked for.
        n: Amount,
        /// The acquiring caller's home.
        home: usize,
    },
    /// `refund_from`, `refund_at` or `refund`.
    Refund {
        /// Tokens given back.
        n: Amount,
        /// Who gives them back.
        caller: Caller,
    },
    /// `reserve_n_from`, `reserve_n_at` or `reserve_n`; a reservation granted is held until a
    /// [`ShardOp::Cancel`] (or the run's end: dropped, so kept).
    Reserve {
        /// Tokens reserved.
        n: Amount,
        /// The longest wait accepted.
        wait: Wait,
        /// Who reserves.
        caller: Caller,
    },
    /// `cancel(_at)` of the held reservation at this index (modulo their number).
    Cancel {
        /// Which reservation.
        index: u8,
        /// Read the clock instead of passing the reading.
        clock: bool,
    },
    /// `take_up_to_from`, `take_up_to_at` or `take_up_to`.
    TakeUpTo {
        /// At most this many.
        n: Amount,
        /// Who takes.
        caller: Caller,
    },
    /// Moves the clock.
    Time(Step),
}

/// The sharded model as one caller sees it: every call from `home`, `remaining` over all shards.
struct FromHome<'a> {
    model: &'a mut ShardedModel,
    home: usize,
}

impl Model for FromHome<'_> {
    fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome {
        self.model.acquire(self.home, n, now_ns)
    }
    fn peek(&self, n: u64, now_ns: u64) -> Outcome {
        self.model.peek(self.home, n, now_ns)
    }
    fn remaining(&self, now_ns: u64) -> u64 {
        self.model.tokens(now_ns)
    }
}

/// The calling thread's home shard, modulo [`sharded::MAX_SHARDS`], found through the public API.
///
/// A 256-shard limiter with three tokens per shard: the thread takes one token from its home, then
/// asks each shard in turn, as its home, for two. A full shard admits them from home and reports
/// what that shard has left (one); the thread's home, holding two, reports none.
pub fn thread_home() -> usize {
    std::thread_local! {
        static HOME: usize = discover_home();
    }
    HOME.with(|home| *home)
}

fn discover_home() -> usize {
    let shards = sharded::MAX_SHARDS;
    let quota = tollgate::Quota::per_second(3 * shards as u64).expect("a valid quota");
    let probe = ShardedBucket::builder(quota)
        .shards(shards)
        .clock(ManualClock::new())
        .build()
        .expect("a power-of-two shard count");
    assert_eq!(probe.shards(), shards);
    let t = Nanos::ZERO;
    assert!(probe.try_acquire_at(t).is_ok());
    (0..shards)
        .find(|&home| {
            let taken = probe
                .try_acquire_n_from(home, 2, t)
                .expect("enough tokens for the probe");
            taken.remaining() == 0
        })
        .expect("the thread's home shard is one token short")
}

/// Runs `ops` on a limiter for `spec` asked for `shards` shards (`None`: the default count) whose
/// manual clock starts at `start`, from the calling thread, and checks:
///
/// - the builder refuses exactly the shard counts that are not a power of two in `1..=256`, with
///   the documented message;
/// - the shard count and every answer (admitted or denied, `remaining`, `reset_after`,
///   `retry_after`, `retry_at`, `InsufficientCapacity`) equal the sharded model's, and so does
///   `remaining` after every operation;
/// - `remaining` never exceeds `C`;
/// - one caller alone is denied `1 <= n <= C` tokens exactly when the shards' whole tokens add up
///   to fewer than `n` (no gather fails without a race), and a denial changes nothing;
/// - a peek agrees with an acquisition at once after it (same reading): both admit or neither, two
///   denials are identical, and an admission leaves no more than the peek said;
/// - **the limit**: tokens admitted never exceed `C + floor(R × t)` plus the tokens refunded, with
///   `R = count / period` exactly and `t` from the construction reading to the latest reading
///   (clamped to 2^62 ns; readings behind the construction's only see fewer tokens), checked after
///   every operation.
pub fn run(spec: &QuotaSpec, shards: Option<usize>, start: u64, ops: &[ShardOp]) {
    let Some((quota, policy, initial)) = check_quota(spec) else {
        return;
    };
    let clock = ManualClock::starting_at(Nanos::new(start));
    let builder = ShardedBucket::builder(quota).clock(clock.clone());
    let (builder, wanted) = match shards {
        None => (builder, sharded::default_shards()),
        Some(n) => (builder.shards(n), n),
    };
    let limiter = match builder.build() {
        Ok(limiter) => {
            assert!(wanted.is_power_of_two() && wanted <= sharded::MAX_SHARDS);
            limiter
        }
        Err(err) => {
            assert!(!wanted.is_power_of_two() || wanted > sharded::MAX_SHARDS);
            assert_eq!(err.requested, wanted);
            assert_eq!(
                err.to_string(),
                format!("shards must be a power of two between 1 and 256, got {wanted}")
            );
            return;
        }
    };
    let period_ns = spec.rate.period().as_nanos();
    let mut model = ShardedModel::new(quota.count(), period_ns, policy, initial, wanted, start);
    assert_eq!(limiter.shards(), model.shards(), "shard count for {spec:?}");
    assert_eq!(limiter.quota(), quota);
    let capacity = policy.capacity;
    let slot = thread_home();
    let mut now = start;
    // The limit's window: from the construction reading (the first) to the latest one, clamped.
    let first = start.min(MAX_USABLE_NS);
    let mut latest = first;
    let (mut admitted, mut refunded) = (0u128, 0u128);
    assert_eq!(limiter.remaining_at(Nanos::new(now)), model.tokens(now));
    // `(ready, tokens)`: every admission at its reading, every reservation at its ready instant.
    let mut handed: Vec<(u64, u64)> = Vec::new();
    let mut held: Vec<(
        Reservation<'_, ShardedBucket<ManualClock>>,
        ShardedReservation,
    )> = Vec::new();
    for (i, &op) in ops.iter().enumerate() {
        let at = Nanos::new(now);
        let before = limiter.remaining_at(at);
        let reading = now;
        let context = move || {
            format!("op {i} {op:?} at {reading} ns, {spec:?}, shards {shards:?} from {start}")
        };
        let mut took = 0u64;
        // Whether a reservation or a cancel changed the shards (they take or give back without
        // an admission).
        let mut changed = false;
        // One caller alone is denied `1 <= n <= C` exactly when fewer than `n` whole tokens are
        // there; answers how many were taken.
        let one_caller = |n: u64, got: &Outcome| {
            if !(1..=capacity).contains(&n) {
                return 0;
            }
            assert_eq!(got.is_admitted(), before >= n, "one caller: {}", context());
            if got.is_admitted() {
                n
            } else {
                0
            }
        };
        match op {
            ShardOp::Call(request) => {
                let mut seen = FromHome {
                    model: &mut model,
                    home: slot,
                };
                let (call, got) = request.check(&limiter, &mut seen, capacity, now, &context);
                if call.takes() {
                    took = one_caller(call.n(), &got);
                }
            }
            ShardOp::AcquireFrom { n, home } => {
                let n = n.resolve(capacity);
                let got = observe(limiter.try_acquire_n_from(home, n, at));
                let want = model.acquire(home, n, now).representable();
                assert_eq!(got, want, "acquire {n} from {home}: {}", context());
                took = one_caller(n, &got);
            }
            ShardOp::PeekThenAcquire { n, home } => {
                let n = n.resolve(capacity);
                let peeked = limiter.peek_n_at(n, at);
                let taken = limiter.try_acquire_n_from(home, n, at);
                assert_eq!(
                    observe(peeked),
                    model.peek(slot, n, now).representable(),
                    "peek {n}: {}",
                    context()
                );
                assert_eq!(
                    observe(taken),
                    model.acquire(home, n, now).representable(),
                    "acquire {n} after the peek: {}",
                    context()
                );
                check_peek_agrees(&peeked, &taken, &context);
                if n > 0 && taken.is_ok() {
                    took = n;
                }
            }
            ShardOp::Refund { n, caller } => {
                let n = n.resolve(capacity);
                let home = match caller {
                    Caller::From(home) => {
                        limiter.refund_from(home, n, at);
                        home
                    }
                    Caller::At => {
                        limiter.refund_at(n, at);
                        slot
                    }
                    Caller::Clock => {
                        limiter.refund(n);
                        slot
                    }
                };
                model.refund(home, n, now);
                refunded += u128::from(n);
            }
            ShardOp::Reserve { n, wait, caller } => {
                let n = n.resolve(capacity);
                let max_wait = wait.resolve(policy.interval_ns);
                let (got, home) = match caller {
                    Caller::From(home) => (limiter.reserve_n_from(home, n, max_wait, at), home),
                    Caller::At => (limiter.reserve_n_at(n, max_wait, at), slot),
                    Caller::Clock => (limiter.reserve_n(n, max_wait), slot),
                };
                match observe_reservation(&got) {
                    None => assert!(max_wait.as_nanos() > u128::from(MAX_WAIT_NS)),
                    Some(answer) => {
                        let max_wait = u64::try_from(max_wait.as_nanos()).expect("in range");
                        assert!(max_wait <= MAX_WAIT_NS, "{}", context());
                        let want = model.reserve(home, n, max_wait, now);
                        let expected = match &want {
                            Ok(r) => Ok((
                                r.tokens,
                                u128::from(r.ready_at_ns - r.now_ns),
                                r.ready_at_ns,
                            )),
                            Err(outcome) => Err(outcome.representable()),
                        };
                        assert_eq!(answer, expected, "reserve {n} from {home}: {}", context());
                        if let (Ok(r), Ok(m)) = (got, want) {
                            if m.tokens > 0 {
                                handed.push((m.ready_at_ns, m.tokens));
                                changed = true;
                            }
                            held.push((r, m));
                        }
                    }
                }
            }
            ShardOp::Cancel { index, clock: read } => {
                if !held.is_empty() {
                    let (r, m) = held.remove(usize::from(index) % held.len());
                    let back = if read { r.cancel() } else { r.cancel_at(at) };
                    assert_eq!(back, model.cancel(&m, now), "cancel: {}", context());
                    assert!(back <= m.tokens, "{}", context());
                    refunded += u128::from(back);
                    changed = true;
                }
            }
            ShardOp::TakeUpTo { n, caller } => {
                let n = n.resolve(capacity);
                let (got, home) = match caller {
                    Caller::From(home) => (limiter.take_up_to_from(home, n, at), home),
                    Caller::At => (limiter.take_up_to_at(n, at), slot),
                    Caller::Clock => (limiter.take_up_to(n), slot),
                };
                let got = observe_partial(got);
                let (k, want) = model.take_up_to(home, n, now);
                assert_eq!(
                    got,
                    (k, want.representable()),
                    "take up to {n}: {}",
                    context()
                );
                if n > 0 {
                    assert_eq!(k, n.min(before), "one caller: {}", context());
                }
                took = k;
            }
            ShardOp::Time(step) => {
                now = step.apply(&clock, now, policy.interval_ns);
                assert_eq!(
                    limiter.clock().now(),
                    Nanos::new(now),
                    "clock: {}",
                    context()
                );
            }
        }
        let after = limiter.remaining_at(Nanos::new(now));
        assert_eq!(after, model.tokens(now), "remaining after {}", context());
        assert!(after <= capacity, "{after} tokens above C: {}", context());
        if took == 0 && !changed && !matches!(op, ShardOp::Refund { .. } | ShardOp::Time(_)) {
            assert_eq!(
                after,
                before,
                "nothing taken, nothing changed: {}",
                context()
            );
        }
        admitted += u128::from(took);
        if took > 0 {
            handed.push((reading.min(MAX_USABLE_NS), took));
        }
        latest = latest.max(now.min(MAX_USABLE_NS));
        let span = u128::from(latest - first);
        let bound = u128::from(capacity) + u128::from(quota.count()) * span / period_ns + refunded;
        assert!(
            admitted <= bound,
            "{admitted} tokens admitted over {span} ns, above C + R*t (+ {refunded} refunded) = \
             {bound}: {}",
            context()
        );
        // Counting reservations at their ready instants, at every such instant.
        handed.sort_unstable();
        let mut total = 0u128;
        for &(ready, n) in &handed {
            total += u128::from(n);
            let span = u128::from(ready.max(first) - first);
            let bound =
                u128::from(capacity) + u128::from(quota.count()) * span / period_ns + refunded;
            assert!(
                total <= bound,
                "{total} tokens ready by {ready} ns, above C + R*t (+ {refunded} given back) = \
                 {bound}: {}",
                context()
            );
        }
    }
}

/// A peek and an acquisition of the same `n` at the same reading, nothing in between: both admit
/// or neither, two denials are identical, and what the acquisition leaves is at most what the peek
/// said would be left.
pub fn check_peek_agrees(
    peeked: &Result<Admitted, AcquireError>,
    taken: &Result<Admitted, AcquireError>,
    context: &dyn Fn() -> String,
) {
    match (peeked, taken) {
        (Ok(p), Ok(t)) => assert!(
            t.remaining() <= p.remaining(),
            "acquired leaving {} after a peek said {}: {}",
            t.remaining(),
            p.remaining(),
            context()
        ),
        (Err(p), Err(t)) => assert_eq!(p, t, "peek and acquire refused differently: {}", context()),
        (p, t) => panic!("peek said {p:?}, acquire said {t:?}: {}", context()),
    }
}
