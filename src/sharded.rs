//! The sharded token bucket: one limit for a hot key, spread over per-core shards.
//!
//! When every core checks the same limit, a single `AtomicU64` is one cache line the cores pass back
//! and forth. [`ShardedBucket`] splits the quota into a power-of-two number of token buckets, each on
//! its own cache line, whose capacities and rates sum to exactly the quota's (the remainders go to
//! the lowest shards). Each thread has a home shard, assigned once per thread round-robin and picked
//! by mask, and admits there without touching any other core's line.
//!
//! ```
//! use tollgate::{Quota, ShardedBucket};
//!
//! // One global limit of 10 000 per second, checked from every core.
//! let limiter = ShardedBucket::new(Quota::per_second(10_000)?);
//! assert!(limiter.try_acquire().is_ok());
//! assert_eq!(limiter.remaining(), 9_999);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Stealing
//!
//! When the home shard cannot admit, the caller first reads every shard (no writes to a shard):
//! if together they hold fewer than `n` whole tokens, the request is denied right there (and, when
//! they hold none at all, the empty hint below is published). Otherwise it gathers: it takes what it can from each shard in turn, starting at
//! home, until it has `n`. If others got there first and it cannot gather `n`, it gives back what it
//! took and is denied. So one thread alone can still burst to the full capacity C and sustain the
//! full rate R.
//!
//! A give-back restores a shard's word exactly, and only if nobody wrote the shard since the take.
//! If someone did, the tokens stay taken: by then a take at a later reading may have refilled the
//! shard past them, and subtracting them again would let a stalled caller create tokens (a thread
//! preempted mid-gather for a second would hand back a second's refill twice). The word alone
//! cannot tell a racing write at the same reading (after which giving back would be exact) from one
//! at a later reading (after which it would create tokens), so the gather never guesses. What that
//! keeps, exactly:
//!
//! - a denied request keeps at most `n - 1` tokens (it never held `n`), and only from shards that
//!   another caller wrote between its take and its give-back; an admitted request, and one denied
//!   by its first read of the shards, keep nothing;
//! - kept tokens are spent as if admitted at the gather's reading: each shard refills them at its
//!   own rate, `k` kept in a shard within `k` of its intervals;
//! - so they add up only while the shards cannot refill them: on a frozen or manual clock, or when
//!   many racing gathers fail within one shard interval, every denied request that raced can keep
//!   up to its own `n - 1`. On a frozen clock, four threads taking and refunding 10 to 40 of 64
//!   tokens over four shards kept up to 42 of them within one round of 10 000 requests a thread
//!   (`tests/sharded_threads.rs`); the loom model of one refund racing one gather reaches the
//!   `n - 1` of a single race exactly.
//!
//! A refund can fall short too. It fills whichever shard is short, starting at the caller's home,
//! not the shards its tokens came from: a take on a shard the refund has already passed, while
//! another refund fills the shard it was heading for, moves the hole it was looking for behind it.
//! [`ShardedBucket::refund`] answers how many tokens went back; the rest is kept as above,
//! refilled at the shards' rate.
//!
//! None of this ever admits beyond the limit.
//!
//! # Reserving, and taking what is there
//!
//! [`ShardedBucket::reserve_n`] takes `n` tokens now, into debt if they are not there, and says
//! when they are the caller's (a [`Reservation`]; see
//! [`reservation`](crate::reservation)). The debt is spread over the shards: each shard, from
//! home on, reserves what it will hold by the earliest instant at which the shards together hold
//! `n`, so a caller waits as for the whole limiter's rate, and every shard stays an exact bucket
//! for its part (admitted plus reserved never exceeds `C + R × t`). Details, and what a race
//! does, on [`ShardedBucket::reserve_n_from`]. [`ShardedBucket::take_up_to`] takes what each
//! shard holds, from home on, up to `n`. Both withdraw the empty hint, as an admission does.
//!
//! # The empty hint: refusals at the cost of one line
//!
//! A flood of refusals on a hot key is what sharding is for, and a refusal that surveys every
//! shard reads `S` cache lines and works out a wait and a time-to-full for each. So the limiter
//! keeps one more cache-padded line, the *hint*: "no shard holds a whole token before reading
//! `until`", with the figures a refusal reports. Every request reads it first; a request for one
//! token at a reading before `until` is refused from it without touching any shard (four loads
//! of one line that nobody writes while the flood lasts, and no home-shard lookup). Its cost on
//! the admission path is one load of that line and a predictable branch.
//!
//! - **Written rarely.** Only a refusal whose survey found no whole token in any shard publishes
//!   a hint, once per refill of the first token: requests at or after `until` take the usual path,
//!   and the first admission withdraws the hint. This is the one write a refusal can make; it
//!   never touches a shard.
//! - **Exact.** The refusal it gives is, to the nanosecond, the one the survey would give
//!   (`retry_after = until - now`, `reset_after = full - now`, `remaining = 0`, at every reading
//!   before `until`, earlier ones too), as long as no shard changed since: a refund or a give-back
//!   voids it, and so does an admission (which only empties shards further, but changes their
//!   figures). Requests for more than one token take the usual path (their `retry_after` needs the
//!   shards). `tests/sharded_model.rs` and the `sharded_ops` fuzz target compare every answer
//!   with the exact model, which knows nothing of the hint.
//! - **Never hides tokens that came back.** A publication claims the hint, reads every shard
//!   again, and publishes only if nothing changed and nobody voided the claim; a refund or a
//!   give-back writes its shard and then voids any claim or hint it sees. A pair of `SeqCst`
//!   fences makes sure one of the two sees the other, so once a refund has returned, no request
//!   that starts after it is refused by a hint that predates its tokens (the loom models in
//!   `loom-tests/tests/sharded.rs` fail without either half).
//! - **Under concurrency** a take racing a publication can leave a hint whose figures describe
//!   the shards just before that take (a take only empties shards, so the hint stays true: it
//!   never refuses a request the shards could serve); its `retry_after` is then early, never late.
//!
//! # Exactness
//!
//! - **Never more than the limit.** Each shard is an exact token bucket for its part of the quota,
//!   and the parts sum to the quota: over any interval of length `t` from a full limiter, admissions
//!   <= `C + R × t` under any interleaving (a give-back only ever undoes its own write to a word
//!   nobody else wrote since, which restores exactly the state without the take). As for the token
//!   bucket, no shard's refill starts before the construction reading, however the clock steps.
//! - **A bounded shortfall.** Compared with one [`TokenBucket`](crate::TokenBucket) with the same
//!   history, the shards may hold less, in two ways:
//!   1. *stranded fractions*: each shard carries its own fraction of a token, so the shards may hold
//!      up to `S - 1` whole tokens fewer than one bucket would (`S` shards); a request can be refused
//!      while up to `S - 1` tokens sit in fractions;
//!   2. *a full shard idles*: a shard that is full stops refilling, while one bucket below its
//!      capacity would still refill. That only lasts while no caller needs the shard's tokens: any
//!      caller whose home runs dry steals from it.
//!
//!   Under saturation (every thread wants more than it gets, however uneven the load) the second
//!   term vanishes: the saturation test drives four threads with uneven load and admits at least
//!   95 % of `C + R × t` (the share measured is in `benches/README.md`). Racing gathers can also
//!   refuse a request that would have fit, briefly: a gather that loses its race gives back and is
//!   denied, with a `retry_after` computed from the shards as it then reads them; and a give-back
//!   that finds its shard written by someone else keeps what it took (above: at most `n - 1` per
//!   denied request, adding up only while the shards cannot refill).
//!
//!   These terms are not a fixed number of tokens: a shard idling while full can fall behind one
//!   bucket by its whole refill for as long as nobody steals from it. The property tests check the
//!   exact form: against one bucket fed the same admissions, the deficit only grows by what full
//!   shards missed refilling plus interval rounding, and whole tokens differ by at most `S - 1` plus
//!   that deficit.
//! - **Rounding.** Each shard's interval is its own `period / n_i` rounded up to a whole nanosecond,
//!   so the shards' rates sum to at most R.
//!
//! # When to use it
//!
//! Use [`ShardedBucket`] for one limit checked from many cores at once (a global API quota, one
//! tenant's hot key): admissions scale with the cores instead of trading one cache line. Use
//! [`TokenBucket`](crate::TokenBucket) for everything else: it is exact to the token (no stranded
//! fractions), 8 bytes of state instead of a cache line per shard, and as fast on one core.
//!
//! # Memory ordering
//!
//! As [`TokenBucket`](crate::TokenBucket): every access to a shard is `Relaxed`, since a shard's word
//! publishes nothing but itself. Each shard is linearizable; the limiter as a whole is not (a gather
//! spans shards), which the bounds above already account for. The empty hint is a seqlock (Acquire
//! and Release between its publisher and its readers) whose publisher and whose voiding refunds
//! meet at `SeqCst` fences; each ordering is explained where it is used.
//!
//! # The home shard
//!
//! A thread's home is a ticket taken from a global counter the first time it asks, kept in a
//! thread-local: every later lookup is one compare and one thread-relative load (`%fs`-relative
//! on x86-64 Linux), the same on the main thread as on spawned ones. A refusal from the hint does
//! not look the home up at all.

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::cas::{self, Gone, Step};
use crate::change::Current;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::gcra::{Gcra, Reserved};
use crate::outcome::{AcquireError, Admitted, Denied, Headroom, InsufficientCapacity, Next, Span};
use crate::partial::Partial;
use crate::quota::Quota;
use crate::reservation::{MaxWaitError, Parts, Reservation, ReserveError, ShardPart};
use crate::sync::{fence, AtomicBool, AtomicU64, Ordering};

/// The most shards a [`ShardedBucket`] may have.
///
/// # Examples
///
/// ```
/// use tollgate::{sharded::MAX_SHARDS, Quota, ShardedBucket};
/// let q = Quota::per_second(1_000)?;
/// assert!(ShardedBucket::builder(q).shards(MAX_SHARDS).build().is_ok());
/// assert!(ShardedBucket::builder(q).shards(MAX_SHARDS * 2).build().is_err());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub const MAX_SHARDS: usize = 256;

/// A small number fixed for the life of the calling thread, handed out round-robin (0, 1, 2, …) in
/// the order threads first ask: the calling thread's home-shard index, before masking by the shard
/// count.
///
/// Under loom every thread gets 0: models choose shards explicitly.
#[cfg(not(tollgate_loom))]
#[inline]
fn thread_slot() -> usize {
    // Outside loom these are std's atomics, whose `new` is const, as a static needs.
    use crate::sync::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::thread_local! {
        // Relaxed: a unique ticket is all that is needed; no memory is published with it.
        static SLOT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    SLOT.with(|slot| *slot)
}

/// Under loom every thread gets 0: models choose shards explicitly.
#[cfg(tollgate_loom)]
#[inline]
fn thread_slot() -> usize {
    0
}

/// One shard: its part of the quota and its word (a token-bucket word; see
/// [`token_bucket`](crate::token_bucket)). The policy is read-only, so it shares the word's line.
struct BucketShard {
    word: AtomicU64,
    policy: Gcra,
}

/// The shard count asked of a [`ShardedBuilder`] is not a power of two in `1..=256`.
///
/// # Examples
///
/// ```
/// use tollgate::{Quota, ShardedBucket};
/// let err = ShardedBucket::builder(Quota::per_second(100)?).shards(3).build().unwrap_err();
/// assert_eq!(err.to_string(), "shards must be a power of two between 1 and 256, got 3");
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardsError {
    /// The shard count asked for.
    pub requested: usize,
}

impl fmt::Display for ShardsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "shards must be a power of two between 1 and {MAX_SHARDS}, got {}",
            self.requested
        )
    }
}

impl std::error::Error for ShardsError {}

/// The shard count used when none is set: the available parallelism rounded up to a power of two,
/// at most [`MAX_SHARDS`].
///
/// # Examples
///
/// ```
/// let n = tollgate::sharded::default_shards();
/// assert!(n.is_power_of_two() && n <= tollgate::sharded::MAX_SHARDS);
/// ```
pub fn default_shards() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .next_power_of_two()
        .min(MAX_SHARDS)
}

/// Options for a [`ShardedBucket`]: the shard count and the clock.
///
/// # Examples
///
/// ```
/// use tollgate::{ManualClock, Quota, ShardedBucket};
/// let limiter = ShardedBucket::builder(Quota::per_second(1_000)?)
///     .shards(8)
///     .clock(ManualClock::new())
///     .build()?;
/// assert_eq!(limiter.shards(), 8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct ShardedBuilder<C> {
    quota: Quota,
    shards: Option<usize>,
    clock: C,
}

impl<C: Clock> ShardedBuilder<C> {
    /// Use `shards` shards (a power of two, at most [`MAX_SHARDS`]). A quota whose count or capacity
    /// is smaller than that uses fewer: every shard needs at least one token and one per period.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Quota, ShardedBucket};
    /// let small = ShardedBucket::builder(Quota::per_second(3)?).shards(16).build()?;
    /// assert_eq!(small.shards(), 2); // 3 tokens: at most 2 shards of at least one token
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shards(self, shards: usize) -> ShardedBuilder<C> {
        ShardedBuilder {
            shards: Some(shards),
            ..self
        }
    }

    /// Read time from `clock`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::builder(Quota::per_second(4)?).clock(ManualClock::new()).build()?;
    /// # drop(limiter);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clock<D: Clock>(self, clock: D) -> ShardedBuilder<D> {
        ShardedBuilder {
            quota: self.quota,
            shards: self.shards,
            clock,
        }
    }

    /// Builds the limiter, filled as the quota says as of the clock's reading now.
    ///
    /// # Errors
    ///
    /// [`ShardsError`] for a shard count that is not a power of two in `1..=256`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Quota, ShardedBucket};
    /// assert!(ShardedBucket::builder(Quota::per_second(100)?).shards(0).build().is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn build(self) -> Result<ShardedBucket<C>, ShardsError> {
        let wanted = match self.shards {
            None => default_shards(),
            Some(n) if n.is_power_of_two() && n <= MAX_SHARDS => n,
            Some(requested) => return Err(ShardsError { requested }),
        };
        Ok(ShardedBucket::assemble(self.quota, wanted, self.clock))
    }
}

/// One rate limit spread over cache-padded per-core shards, for a key every core checks.
///
/// The same quota and outcome API as [`TokenBucket`](crate::TokenBucket). See the
/// [module docs](self) for stealing, exactness and when to use it.
///
/// An [`Admitted`] from the home shard reports that shard's `remaining` and `reset_after` (a lower
/// bound on the limiter's, read without touching other cores' lines); one from a gather or a peek,
/// and every [`Denied`], reports the whole limiter's. Every figure of a peek or a denial comes from
/// one read of the shards (for a refusal answered by the [empty hint](self#the-empty-hint-refusals-at-the-cost-of-one-line),
/// the read that published it), so a denial's `retry_after` is zero exactly when its `remaining`
/// covers the request (a gather that lost a race to others who then gave back).
/// [`ShardedBucket::remaining`] sums every shard.
///
/// # Memory ordering
///
/// Each shard is linearizable and publishes nothing but itself; do not use an admission to publish
/// other data between threads.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use tollgate::{Quota, ShardedBucket};
///
/// let limiter = Arc::new(ShardedBucket::new(Quota::per_second(1_000)?.with_capacity(100)?));
/// let handles: Vec<_> = (0..4)
///     .map(|_| {
///         let limiter = Arc::clone(&limiter);
///         std::thread::spawn(move || (0..50).filter(|_| limiter.try_acquire().is_ok()).count())
///     })
///     .collect();
/// let admitted: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
/// assert!(admitted >= 100 && admitted <= 200); // the burst, plus what refilled meanwhile
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct ShardedBucket<C = MonotonicClock> {
    current: Current<Shards>,
    /// The shard count asked for: a quota change splits the new quota into as many (fewer when a
    /// part would be invalid, as construction does).
    wanted: usize,
    clock: C,
}

/// What a quota change replaces (see `crate::change`): the shards, their hint and the quota.
pub(crate) struct Shards {
    shards: Box<[CachePadded<BucketShard>]>,
    hint: CachePadded<Hint>,
    mask: usize,
    quota: Quota,
    /// Set by a quota change before it seals the shards' words: a request that took nothing
    /// here once it is set decides again on the next block (what it read may include sealed
    /// shards, which read as empty).
    sealed: AtomicBool,
    /// How many changes came before: a reservation gives nothing back to another block.
    generation: u64,
}

impl Shards {
    /// Splits `quota` into at most `wanted` (a power of two) shards: fewer when a part would be
    /// invalid (a count or capacity below 1, a rate too slow); one shard is the quota itself.
    /// Each shard's units are laid from `now`, as the token bucket's (see `Gcra::begin_at`).
    fn assemble(quota: Quota, wanted: usize, now: Nanos, generation: u64) -> Shards {
        let mut count = wanted.max(1);
        let parts = loop {
            let parts: Result<Vec<Quota>, _> = (0..count as u64)
                .map(|i| quota.part(count as u64, i))
                .collect();
            match parts {
                Ok(parts) => break parts,
                Err(_) if count > 1 => count /= 2,
                Err(_) => break vec![quota],
            }
        };
        let shards: Box<[CachePadded<BucketShard>]> = parts
            .iter()
            .map(|part| {
                let mut policy = Gcra::new(part);
                policy.begin_at(now);
                let word = policy.initial_word(part.initial(), policy.time(now));
                CachePadded::new(BucketShard {
                    word: AtomicU64::new(word),
                    policy,
                })
            })
            .collect();
        Shards {
            mask: shards.len() - 1,
            shards,
            hint: CachePadded::new(Hint::new()),
            quota,
            sealed: AtomicBool::new(false),
            generation,
        }
    }

    /// Whether a quota change has sealed these shards.
    #[inline]
    fn is_sealed(&self) -> bool {
        // Acquire: pairs with the change's Release store, made before its seals: a request that
        // met a sealed word and then reads `false` here cannot happen.
        self.sealed.load(Ordering::Acquire)
    }

    /// `answer`, or [`Gone`] when it took nothing and these shards are sealed (ask the next
    /// block).
    #[inline]
    fn unless_sealed<T>(&self, answer: T, took_nothing: bool) -> Result<T, Gone> {
        if took_nothing && self.is_sealed() {
            Err(Gone::seen())
        } else {
            Ok(answer)
        }
    }
}

impl ShardedBucket<MonotonicClock> {
    /// A limiter for `quota` on the default clock with [`default_shards`] shards.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter = tollgate::ShardedBucket::new(tollgate::Quota::per_second(100)?);
    /// assert_eq!(limiter.remaining(), 100);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> ShardedBucket<MonotonicClock> {
        ShardedBucket::assemble(quota, default_shards(), MonotonicClock::new())
    }

    /// A builder for the shard count and the clock.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter = tollgate::ShardedBucket::builder(tollgate::Quota::per_second(100)?).shards(4).build()?;
    /// assert_eq!(limiter.shards(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn builder(quota: Quota) -> ShardedBuilder<MonotonicClock> {
        ShardedBuilder {
            quota,
            shards: None,
            clock: MonotonicClock::new(),
        }
    }
}

impl<C: Clock> ShardedBucket<C> {
    crate::direct::clock_reading_forms!(
        "tollgate::ShardedBucket::new(tollgate::Quota::per_second(2)?)"
    );

    /// A limiter for `quota` reading `clock`, with [`default_shards`] shards.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// assert_eq!(limiter.remaining(), 10);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> ShardedBucket<C> {
        ShardedBucket::assemble(quota, default_shards(), clock)
    }

    /// A bucket for `quota` in at most `wanted` shards (see `Shards::assemble`).
    fn assemble(quota: Quota, wanted: usize, clock: C) -> ShardedBucket<C> {
        let now = clock.now();
        ShardedBucket {
            current: Current::new(Shards::assemble(quota, wanted, now, 0)),
            wanted,
            clock,
        }
    }

    /// Runs `decide` on the current shards until it answers without meeting a seal (see
    /// `Direct::decide`).
    #[inline]
    fn on_shards<R>(&self, decide: impl FnMut(&Shards) -> Result<R, Gone>) -> R {
        self.current.decide(decide)
    }

    /// Changes the quota this limiter enforces, from now on, without a pause for the requests
    /// running meanwhile: the crate's one rule (the crate docs, "Changing a quota"), over all
    /// the shards. The whole tokens the shards held at the change (fractions dropped, at most
    /// the new capacity) are spread over the new shards as a new bucket's initial fill is, and
    /// the new quota refills them from there. The new quota is split into as many shards as
    /// were asked for at construction (fewer when a part would be invalid). A request that took
    /// nothing from shards sealed by the change asks again on the new ones; one that took part
    /// of its tokens before the seal keeps what it took (nothing is ever handed out twice). A
    /// [`Reservation`] made before the change gives nothing back after it.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::builder(Quota::per_second(8)?).shards(4).clock(ManualClock::new()).build()?;
    /// let t = Nanos::new(0);
    /// limiter.try_acquire_n_at(5, t)?; // 3 left
    /// limiter.set_quota_at(Quota::per_second(100)?, t);
    /// assert_eq!(limiter.remaining_at(t), 3); // carried over, not refilled
    /// assert_eq!(limiter.remaining_at(Nanos::new(1_000_000_000)), 100);
    /// assert_eq!(limiter.quota(), Quota::per_second(100)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) {
        self.set_quota_at(quota, self.clock.now());
    }

    /// [`ShardedBucket::set_quota`] as of `now`, a reading of this limiter's clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// limiter.set_quota_at(Quota::per_second(2)?, Nanos::new(0));
    /// assert_eq!(limiter.remaining_at(Nanos::new(0)), 2); // at most the new capacity
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn set_quota_at(&self, quota: Quota, now: Nanos) {
        self.current.change(|old| {
            // Built before the seal (every shard empty for now), so that requests meeting the
            // seal wait for no allocation.
            let empty = quota.with_initial(0).unwrap_or(quota);
            let mut new = Box::new(Shards::assemble(
                empty,
                self.wanted,
                now,
                old.generation.wrapping_add(1),
            ));
            new.quota = quota;
            // Release: a request that meets a sealed word and then reads the flag sees it set.
            old.sealed.store(true, Ordering::Release);
            let left: u64 = old
                .shards
                .iter()
                .map(|shard| match cas::seal(&shard.word) {
                    cas::GONE => 0,
                    word => shard.policy.remaining(word, shard.policy.time(now)),
                })
                .sum();
            let fill = quota
                .with_initial(left.min(quota.capacity()))
                .unwrap_or(quota);
            let count = new.shards.len() as u64;
            for (i, shard) in new.shards.iter().enumerate() {
                // The same split as construction's, so a change to the same quota with the same
                // tokens leaves the shards as a new bucket holding them would.
                let part = fill.part(count, i as u64).map_or(0, |p| p.initial());
                let word = shard.policy.initial_word(part, shard.policy.time(now));
                // Relaxed: not shared yet; publishing the block (Release) publishes it.
                cas::store(&shard.word, word, Ordering::Relaxed);
            }
            new
        });
    }

    /// Takes one token as of `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// assert!(limiter.try_acquire_at(Nanos::new(0)).is_ok());
    /// assert!(limiter.try_acquire_at(Nanos::new(0)).is_ok()); // stolen from the other shard
    /// assert!(limiter.try_acquire_at(Nanos::new(0)).is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        // The capacity is at least 1, so one token is always a valid request. The home slot is
        // only looked up when the hint does not answer.
        self.on_shards(|b| {
            let answer = b.take(thread_slot, 1, now);
            let refused = answer.is_err();
            b.unless_sealed(answer, refused)
        })
    }

    /// Takes `n` tokens as of `now`, all or none.
    ///
    /// # Errors
    ///
    /// As [`ShardedBucket::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// assert!(limiter.try_acquire_n_at(4, Nanos::new(0)).is_ok());
    /// let denied = limiter.try_acquire_n_at(2, Nanos::new(0)).unwrap_err();
    /// assert_eq!(denied.denied().unwrap().retry_after().as_millis(), 500);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.try_acquire_n_from(thread_slot(), n, now)
    }

    /// Takes `n` tokens as of `now` as a caller whose home shard is `home` (taken modulo the shard
    /// count): for callers that manage their own affinity (one shard per worker of a thread-per-core
    /// runtime), and for tests that choose the interleaving.
    ///
    /// # Errors
    ///
    /// As [`ShardedBucket::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::builder(Quota::per_second(4)?).shards(2).clock(ManualClock::new()).build()?;
    /// let t = Nanos::new(0);
    /// assert_eq!(limiter.try_acquire_n_from(0, 2, t)?.remaining(), 0); // shard 0 held 2
    /// assert!(limiter.try_acquire_n_from(0, 1, t).is_ok()); // stolen from shard 1
    /// assert_eq!(limiter.remaining_at(t), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn try_acquire_n_from(
        &self,
        home: usize,
        n: u64,
        now: Nanos,
    ) -> Result<Admitted, AcquireError> {
        self.on_shards(|b| {
            let answer = match InsufficientCapacity::check(n, b.quota.capacity()) {
                Err(e) => return Ok(Err(e.into())),
                Ok(false) => return b.unless_sealed(Ok(b.query(now)), true),
                Ok(true) => b.take(|| home, n, now).map_err(AcquireError::Denied),
            };
            let refused = answer.is_err();
            b.unless_sealed(answer, refused)
        })
    }

    /// Would `n` tokens be admitted as of `now`? Reads every shard once, writes nothing.
    ///
    /// An admission reports the whole limiter as it would be after the `n` tokens, as
    /// [`TokenBucket::peek_n_at`](crate::TokenBucket::peek_n_at) does: `remaining()` is the shards'
    /// whole tokens less `n`, and `reset_after()` the time until every shard is full again once
    /// the `n` are taken the way this caller's [`try_acquire_n_at`](Self::try_acquire_n_at) would
    /// take them (from its home shard on). A denial reports the shards as they are.
    ///
    /// # Errors
    ///
    /// As [`ShardedBucket::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let quota = Quota::per_second(2)?.with_initial(0)?;
    /// let limiter = ShardedBucket::builder(quota).shards(2).clock(ManualClock::new()).build()?;
    /// // Two shards of 1 per second: at 0.5 s each holds half a token, and halves do not add up.
    /// assert!(limiter.peek_n_at(1, Nanos::new(500_000_000)).is_err());
    /// // At 1 s both are full; one token taken leaves its shard a second from full again.
    /// let peeked = limiter.peek_n_at(1, Nanos::new(1_000_000_000))?;
    /// assert_eq!(peeked.remaining(), 1);
    /// assert_eq!(peeked.reset_after(), Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.on_shards(|b| b.unless_sealed(b.peek_n(n, now), true))
    }

    /// Gives back `n` tokens taken earlier and not used, starting at the calling thread's home shard
    /// and never filling any shard above its capacity; answers how many went back (counted per shard
    /// as the whole tokens it was short, so a shard read at an earlier reading than one already
    /// applied to it, and so shorter than its capacity allows, may count more than it took).
    ///
    /// Fewer than `n` go back only when every shard was full where the refund looked: a refund of
    /// tokens never taken, or, under contention, a take on a shard the refund had already passed
    /// while another refund filled the shard it was heading for (a refund fills whichever shard is
    /// short). What it cannot place is a shortfall that the refill makes up, never an admission
    /// beyond the quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(8)?, ManualClock::new());
    /// limiter.try_acquire_n(5)?;
    /// assert_eq!(limiter.refund(5), 5);
    /// assert_eq!(limiter.remaining(), 8);
    /// assert_eq!(limiter.refund(u64::MAX), 0); // already full: nothing changes
    /// assert_eq!(limiter.remaining(), 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund(&self, n: u64) -> u64 {
        self.refund_from(thread_slot(), n, self.clock.now())
    }

    /// Gives back `n` tokens as of `now`, starting at the calling thread's home shard; answers how
    /// many went back (see [`ShardedBucket::refund`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(8)?, ManualClock::new());
    /// limiter.try_acquire_n_at(8, Nanos::new(0))?;
    /// limiter.refund_at(3, Nanos::new(0));
    /// assert_eq!(limiter.remaining_at(Nanos::new(0)), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund_at(&self, n: u64, now: Nanos) -> u64 {
        self.refund_from(thread_slot(), n, now)
    }

    /// Gives back `n` tokens as of `now`, starting at shard `home` (modulo the shard count); answers
    /// how many went back (see [`ShardedBucket::refund`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::builder(Quota::per_second(4)?).shards(2).clock(ManualClock::new()).build()?;
    /// let t = Nanos::new(0);
    /// limiter.try_acquire_n_from(1, 4, t)?;
    /// limiter.refund_from(1, 3, t); // 2 fit in shard 1, the third goes to shard 0
    /// assert_eq!(limiter.remaining_at(t), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn refund_from(&self, home: usize, n: u64, now: Nanos) -> u64 {
        let mut left = n;
        self.on_shards(|b| {
            left -= b.refund(home, left, now).min(left);
            // What met sealed shards goes to the next block, as a refund after the change would.
            b.unless_sealed((), left > 0)
        });
        n - left
    }

    /// Reserves `n` tokens now, into debt if they are not there, if they are the caller's within
    /// `max_wait`, starting at the calling thread's home shard (see
    /// [`ShardedBucket::reserve_n_from`]).
    ///
    /// # Errors
    ///
    /// As [`TokenBucket::reserve_n`](crate::TokenBucket::reserve_n).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::builder(Quota::per_second(4)?).shards(2).clock(ManualClock::new()).build()?;
    /// limiter.try_acquire_n(4)?;
    /// // Two shards of 2 per second: one token from each is there after 500 ms.
    /// let r = limiter.reserve_n(2, Duration::from_secs(1))?;
    /// assert_eq!(r.delay(), Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve_n(
        &self,
        n: u64,
        max_wait: Duration,
    ) -> Result<Reservation<'_, ShardedBucket<C>>, ReserveError> {
        self.reserve_n_from(thread_slot(), n, max_wait, self.clock.now())
    }

    /// [`ShardedBucket::reserve_n`] as of `now`.
    ///
    /// # Errors
    ///
    /// As [`TokenBucket::reserve_n`](crate::TokenBucket::reserve_n).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(8)?.with_initial(0)?, ManualClock::new());
    /// let r = limiter.reserve_n_at(8, Duration::from_secs(1), Nanos::new(0))?;
    /// assert_eq!(r.ready_at(), Nanos::new(1_000_000_000));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve_n_at(
        &self,
        n: u64,
        max_wait: Duration,
        now: Nanos,
    ) -> Result<Reservation<'_, ShardedBucket<C>>, ReserveError> {
        self.reserve_n_from(thread_slot(), n, max_wait, now)
    }

    /// Reserves `n` tokens as of `now` as a caller whose home shard is `home` (modulo the shard
    /// count), if they are the caller's within `max_wait`.
    ///
    /// How a reservation maps onto the shards, so that admitted plus reserved never exceeds the
    /// quota (each shard stays an exact bucket for its part):
    ///
    /// 1. The home shard alone, when it can admit all `n` at once: `delay() == 0`.
    /// 2. Otherwise, from one read of every shard, the earliest reading `T` at which the shards,
    ///    left alone, hold `n` whole tokens together (`T = now` when they already do; else the
    ///    `retry_at` a denial of `n` would report). `T - now` beyond `max_wait` is
    ///    [`ReserveError::Denied`], its `retry_after` that wait less `max_wait`.
    /// 3. Then, from home on, each shard reserves the tokens it will hold by `T` (until `n` are
    ///    reserved): a shard into debt only as far as its own refill pays by `T`. The
    ///    reservation is ready when its last part is (`T`, or the reading when all were there).
    ///    Spreading the debt is what keeps one caller's wait that of the whole limiter's rate:
    ///    on one shard, `n` tokens would wait `S` times longer.
    /// 4. Under contention another caller may take first: then the shards are visited again with
    ///    the deadline `now + max_wait`, and if `n` still cannot be reserved, what was reserved is
    ///    given back (exactly, where nobody wrote the shard since, as a failed gather does) and the
    ///    answer is a denial (whose `retry_after` may then be zero).
    ///
    /// Cancelling applies the token bucket's rule to each shard's part: its tokens less those
    /// taken on that shard after it.
    ///
    /// # Errors
    ///
    /// As [`TokenBucket::reserve_n`](crate::TokenBucket::reserve_n).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::builder(Quota::per_second(4)?).shards(2).clock(ManualClock::new()).build()?;
    /// let t = Nanos::new(0);
    /// // Shard 0 holds 2: reserved there, at once.
    /// assert_eq!(limiter.reserve_n_from(0, 2, Duration::ZERO, t)?.delay(), Duration::ZERO);
    /// // 3 more: shard 1's two now, and one more of either's after 500 ms.
    /// let r = limiter.reserve_n_from(0, 3, Duration::from_secs(1), t)?;
    /// assert_eq!(r.delay(), Duration::from_millis(500));
    /// assert_eq!(r.cancel_at(t), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve_n_from(
        &self,
        home: usize,
        n: u64,
        max_wait: Duration,
        now: Nanos,
    ) -> Result<Reservation<'_, ShardedBucket<C>>, ReserveError> {
        let max_wait = MaxWaitError::check(max_wait)?;
        let base = now.clamped();
        self.on_shards(|b| {
            let answer = b.reserve(home, n, max_wait, now);
            let refused = answer.is_err();
            b.unless_sealed(answer, refused).map(|answer| {
                answer.map(|(tokens, ready, parts)| Reservation {
                    key: (),
                    limiter: self,
                    tokens,
                    now: base,
                    ready,
                    parts: Parts::Shards {
                        parts,
                        generation: b.generation,
                    },
                })
            })
        })
    }

    /// Takes as many whole tokens as the shards hold, at most `n`, from the calling thread's home
    /// shard on (see [`ShardedBucket::take_up_to_from`]).
    ///
    /// # Errors
    ///
    /// [`Denied`] for one token when no shard holds a whole token.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(6)?, ManualClock::new());
    /// assert_eq!(limiter.take_up_to(10)?.taken(), 6);
    /// assert!(limiter.take_up_to(1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_up_to(&self, n: u64) -> Result<Partial, Denied> {
        self.take_up_to_from(thread_slot(), n, self.clock.now())
    }

    /// [`ShardedBucket::take_up_to`] as of `now`.
    ///
    /// # Errors
    ///
    /// As [`ShardedBucket::take_up_to`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(6)?, ManualClock::new());
    /// assert_eq!(limiter.take_up_to_at(4, Nanos::new(0))?.remaining(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_up_to_at(&self, n: u64, now: Nanos) -> Result<Partial, Denied> {
        self.take_up_to_from(thread_slot(), n, now)
    }

    /// Takes as many whole tokens as the shards hold, at most `n`, as of `now`, as a caller whose
    /// home shard is `home` (modulo the shard count): what each shard holds, from home on, one
    /// compare-and-swap per shard visited. `n = 0` is a query. One caller alone takes
    /// `min(n, remaining_at(now))`; under contention, what the others left. The [`Partial`]
    /// reports the whole limiter after the take, as a gather does.
    ///
    /// # Errors
    ///
    /// [`Denied`] for one token when no shard holds a whole token (nothing is taken).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::builder(Quota::per_second(4)?).shards(2).clock(ManualClock::new()).build()?;
    /// let t = Nanos::new(0);
    /// limiter.try_acquire_n_from(0, 2, t)?;
    /// assert_eq!(limiter.take_up_to_from(0, 3, t)?.taken(), 2); // shard 1's
    /// let denied = limiter.take_up_to_from(0, 3, t).unwrap_err();
    /// assert_eq!(denied.retry_after().as_millis(), 500);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn take_up_to_from(&self, home: usize, n: u64, now: Nanos) -> Result<Partial, Denied> {
        self.on_shards(|b| {
            let answer = b.take_up_to(home, n, now);
            let nothing = answer.as_ref().map_or(true, |p| p.taken() == 0);
            b.unless_sealed(answer, nothing)
        })
    }

    /// Whole tokens in all shards as of `now` (each shard's whole tokens, summed: fractions of a
    /// token stranded in different shards do not add up).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(4)?.with_initial(0)?, ManualClock::new());
    /// assert_eq!(limiter.remaining_at(Nanos::new(1_000_000_000)), 4);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn remaining_at(&self, now: Nanos) -> u64 {
        self.on_shards(|b| {
            let tokens = b
                .shards
                .iter()
                .map(|s| match read_word(&s.word) {
                    cas::GONE => 0,
                    word => s.policy.remaining(word, s.policy.time(now)),
                })
                .sum();
            b.unless_sealed(tokens, true)
        })
    }

    /// The number of shards in use.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter = tollgate::ShardedBucket::builder(tollgate::Quota::per_second(100)?).shards(2).build()?;
    /// assert_eq!(limiter.shards(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn shards(&self) -> usize {
        self.current.read().shards.len()
    }

    /// The quota this limiter enforces (over all its shards; the latest
    /// [set](ShardedBucket::set_quota)).
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(3)?;
    /// assert_eq!(tollgate::ShardedBucket::new(q).quota(), q);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.current.read().quota
    }

    /// The clock this limiter reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(3)?, ManualClock::starting_at(Nanos::new(4)));
    /// assert_eq!(limiter.clock().now(), Nanos::new(4));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

impl Shards {
    /// [`ShardedBucket::peek_n_at`] on these shards.
    fn peek_n(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        InsufficientCapacity::check(n, self.quota.capacity())?;
        // One read of the shards answers the whole peek, so its figures describe one state.
        let mut snapshot = self.snapshot();
        let words = snapshot.words_mut();
        let survey = self.survey(now, |i| words[i]);
        if survey.tokens < n {
            return Err(AcquireError::Denied(self.denied(words, n, now, &survey)));
        }
        // Both figures as they would be after the `n` tokens, taken from the copy as this caller's
        // acquisition would take them: from home on.
        // (`remaining` is counted before the take, less `n`: a full shard's refill restarts at the
        // reading rounded up to its time unit, which can cost a coarse-unit shard a fraction that
        // the request did not take.)
        self.take_from_copy(words, thread_slot() & self.mask, n, now);
        let after = self.survey(now, |i| words[i]);
        Ok(Admitted::new(Headroom::whole(
            survey.tokens - n,
            after.full_in,
            after.next(),
        )))
    }

    /// [`ShardedBucket::refund_from`] on these shards: how many went back.
    fn refund(&self, home: usize, n: u64, now: Nanos) -> u64 {
        let mut left = n;
        for step in 0..self.shards.len() {
            if left == 0 {
                break;
            }
            let shard = &self.shards[(home.wrapping_add(step)) & self.mask];
            let t = shard.policy.time(now);
            let given = live(cas::update_live(&shard.word, |w| {
                shard.policy.refund_up_to(w, t, left)
            }))
            .unwrap_or(0);
            left -= given.min(left);
        }
        if left < n {
            self.hint.added_tokens();
        }
        n - left
    }

    /// [`ShardedBucket::reserve_n_from`] on these shards, `max_wait` checked (nanoseconds): the
    /// tokens, when they are ready and the parts.
    fn reserve(
        &self,
        home: usize,
        n: u64,
        max_wait: u64,
        now: Nanos,
    ) -> Result<(u64, u64, Vec<ShardPart>), ReserveError> {
        let base = now.clamped();
        let reservation = |tokens, ready, parts| (tokens, ready, parts);
        if !InsufficientCapacity::check(n, self.quota.capacity())? {
            return Ok(reservation(0, base, Vec::new()));
        }
        let home = home & self.mask;
        // 1. The home shard alone.
        let shard = &self.shards[home];
        if n <= shard.policy.capacity() {
            let t = shard.policy.time(now);
            let at_home = cas::update_live(&shard.word, |w| match shard.policy.decide(w, t, n) {
                Step::Write(new, _) => Step::Write(new, new),
                Step::Keep(_) | Step::Refuse(_) => Step::Refuse(()),
            });
            if let Ok(Ok(tat)) = at_home {
                self.withdraw_hint();
                let part = ShardPart {
                    shard: home,
                    tokens: n,
                    tat,
                };
                return Ok(reservation(n, base, vec![part]));
            }
        }
        // 2. When the shards, left alone, hold `n`.
        let wait = {
            let snapshot = self.snapshot();
            let words = snapshot.words();
            let survey = self.survey(now, |i| words[i]);
            let wait = if survey.tokens >= n {
                0
            } else {
                self.denied(words, n, now, &survey).retry_after().as_nanos()
            };
            if wait > u128::from(max_wait) {
                return Err(ReserveError::Denied(Denied::new(
                    base,
                    Span::from_nanos(wait - u128::from(max_wait)),
                    survey.headroom(),
                )));
            }
            wait
        };
        // 3. What each shard holds by then, from home on; 4. by `now + max_wait` after a race.
        let mut claims = vec![Claim::default(); self.shards.len()];
        let (mut got, mut ready) = (0, base);
        for deadline in [
            u128::from(base) + wait,
            u128::from(base) + u128::from(max_wait),
        ] {
            for step in 0..self.shards.len() {
                if got == n {
                    break;
                }
                let index = (home + step) & self.mask;
                let shard = &self.shards[index];
                let t = shard.policy.time(now);
                let claimed = cas::update_live(&shard.word, |w| {
                    match shard.policy.reserve_by(w, t, n - got, deadline) {
                        Step::Write(new, (k, reserved)) => {
                            Step::<Option<(u64, Reserved, u64)>, ()>::Write(
                                new,
                                Some((k, reserved, w)),
                            )
                        }
                        Step::Keep(_) | Step::Refuse(()) => Step::Keep(None),
                    }
                });
                if let Ok(Ok(Some((k, reserved, before)))) = claimed {
                    claims[index].record(k, before, reserved.tat);
                    got += k;
                    ready = ready.max(reserved.ready_ns);
                }
            }
            if got == n {
                break;
            }
        }
        if got == n {
            self.withdraw_hint();
            let parts = claims
                .iter()
                .enumerate()
                .filter(|(_, c)| c.tokens > 0)
                .map(|(shard, c)| ShardPart {
                    shard,
                    tokens: c.tokens,
                    tat: c.after,
                })
                .collect();
            return Ok(reservation(n, ready, parts));
        }
        // Others got there first: give back what was reserved, exactly, where nobody wrote since.
        self.give_back(&claims);
        let snapshot = self.snapshot();
        let words = snapshot.words();
        let survey = self.survey(now, |i| words[i]);
        let denied = self.denied(words, n, now, &survey);
        let retry = denied
            .retry_after()
            .as_nanos()
            .saturating_sub(u128::from(max_wait));
        Err(ReserveError::Denied(Denied::new(
            base,
            Span::from_nanos(retry),
            survey.headroom(),
        )))
    }

    /// [`ShardedBucket::take_up_to_from`] on these shards.
    fn take_up_to(&self, home: usize, n: u64, now: Nanos) -> Result<Partial, Denied> {
        if n == 0 {
            return Ok(Partial::new(0, self.query(now)));
        }
        let mut got = 0;
        for step in 0..self.shards.len() {
            if got == n {
                break;
            }
            let shard = &self.shards[(home.wrapping_add(step)) & self.mask];
            let t = shard.policy.time(now);
            got += live(cas::update_live(&shard.word, |w| {
                shard.policy.take_up_to(w, t, n - got)
            }))
            .unwrap_or(0);
        }
        let snapshot = self.snapshot();
        let words = snapshot.words();
        let survey = self.survey(now, |i| words[i]);
        if got == 0 {
            return Err(self.denied(words, 1, now, &survey));
        }
        self.withdraw_hint();
        Ok(Partial::new(got, Admitted::new(survey.headroom())))
    }

    /// Gives back, exactly, what a failed reservation claimed on each shard nobody else wrote
    /// since (the rest stays taken, as a failed gather's does), then voids the hint if any went
    /// back.
    #[cold]
    fn give_back(&self, claims: &[Claim]) {
        let mut gave_back = false;
        for (shard, claim) in self.shards.iter().zip(claims) {
            if claim.tokens > 0 && claim.exact {
                gave_back |= cas::undo(&shard.word, claim.after, claim.before);
            }
        }
        if gave_back {
            self.hint.added_tokens();
        }
    }

    /// Voids a published hint after this caller took tokens outside [`take`](Self::take) (a
    /// reservation, a take of up to `n`): it only emptied shards, so the hint stayed true, but its
    /// figures no longer describe them (as after an admission).
    fn withdraw_hint(&self) {
        // Relaxed: only a guess at whether there is anything to withdraw; the caller's own later
        // requests read `seq` after this thread's `fetch_or`, and a hint published concurrently
        // by another thread is as true as before (a take only empties shards).
        if self.hint.seq.load(Ordering::Relaxed) & FLAGS == VALID {
            self.hint.withdraw();
        }
    }

    /// Takes `n` tokens (`1 <= n <= capacity`): refused straight from the hint when it says every
    /// shard is empty (one token), else from the home shard if it can admit all `n`, else by
    /// gathering.
    #[inline]
    fn take(&self, home: impl FnOnce() -> usize, n: u64, now: Nanos) -> Result<Admitted, Denied> {
        // Acquire: pairs with the Release of `Hint::publish`, so that a published hint's payload
        // is visible to the reads in `Hint::read`.
        let seq = self.hint.seq.load(Ordering::Acquire);
        if seq & FLAGS == VALID {
            // The flood of refusals: answered here, inline, without the home shard.
            if n == 1 {
                if let Some((until, full)) = self.hint.read(seq) {
                    let base = now.clamped();
                    if base < until {
                        return Err(hinted_denial(base, until, full));
                    }
                }
            }
            return self.take_hinted(home(), n, now);
        }
        self.take_from(home(), n, now)
    }

    /// [`take`](Self::take) while a hint is published that does not answer the request: take as
    /// usual, and withdraw the hint after an admission (the shards it describes have changed).
    #[cold]
    fn take_hinted(&self, home: usize, n: u64, now: Nanos) -> Result<Admitted, Denied> {
        let outcome = self.take_from(home, n, now);
        if outcome.is_ok() {
            self.hint.withdraw();
        }
        outcome
    }

    /// Takes `n` tokens (`1 <= n <= capacity`): from the home shard if it can admit all `n`, else
    /// by gathering.
    #[inline]
    fn take_from(&self, home: usize, n: u64, now: Nanos) -> Result<Admitted, Denied> {
        let home = home & self.mask;
        let shard = &self.shards[home];
        if n <= shard.policy.capacity() {
            let t = shard.policy.time(now);
            if let Ok(Ok(admitted)) =
                cas::update_live(&shard.word, |w| shard.policy.decide(w, t, n))
            {
                return Ok(admitted);
            }
        }
        self.gather(home, n, now)
    }

    /// The slow path: deny without writing if the shards together cannot cover `n`; otherwise take
    /// what each shard has, from home on, and give it all back if it does not add up to `n`.
    #[cold]
    fn gather(&self, home: usize, n: u64, now: Nanos) -> Result<Admitted, Denied> {
        {
            // One read of every shard: the survey and, when it finds every shard empty, the hint
            // (which checks the shards against these words before it is published).
            let snapshot = self.snapshot();
            let words = snapshot.words();
            let survey = self.survey(now, |i| words[i]);
            if survey.tokens < n {
                if survey.tokens == 0 {
                    self.hint
                        .publish(&self.shards, words, now.clamped(), &survey);
                }
                return Err(self.denied(words, n, now, &survey));
            }
        }
        // What was taken from each shard (tokens, word before, word after), for the give-back; on
        // the stack for up to 16 shards.
        let mut small = [Gathered::default(); 16];
        let mut large = Vec::new();
        let taken: &mut [Gathered] = if self.shards.len() <= small.len() {
            &mut small[..self.shards.len()]
        } else {
            large.resize(self.shards.len(), Gathered::default());
            &mut large
        };
        let mut got = 0;
        for step in 0..self.shards.len() {
            let index = (home + step) & self.mask;
            let shard = &self.shards[index];
            let t = shard.policy.time(now);
            let took = live(cas::update_live(&shard.word, |w| {
                match shard.policy.take_up_to(w, t, n - got) {
                    Step::Write(new, k) => Step::<Gathered, ()>::Write(
                        new,
                        Gathered {
                            tokens: k,
                            before: w,
                            after: new,
                        },
                    ),
                    Step::Keep(_) | Step::Refuse(()) => Step::Keep(Gathered::default()),
                }
            }))
            .unwrap_or_default();
            taken[index] = took;
            got += took.tokens;
            if got == n {
                // Report the shards as they are after the admission.
                let snapshot = self.snapshot();
                let words = snapshot.words();
                let after = self.survey(now, |i| words[i]);
                return Ok(Admitted::new(after.headroom()));
            }
        }
        // Others got there first: give back what was taken, exactly, wherever nobody touched the
        // shard since. Where someone did, the tokens stay taken: a later take at a later reading
        // may already have refilled past them, and subtracting them again could create tokens.
        let mut gave_back = false;
        for (shard, took) in self.shards.iter().zip(taken.iter()) {
            if took.tokens > 0 {
                gave_back |= cas::undo(&shard.word, took.after, took.before);
            }
        }
        if gave_back {
            self.hint.added_tokens();
        }
        let snapshot = self.snapshot();
        let words = snapshot.words();
        let survey = self.survey(now, |i| words[i]);
        Err(self.denied(words, n, now, &survey))
    }

    /// Takes `n` tokens (at most what `words` hold in all) from the copy `words` of the shards, from
    /// shard `home` on, as a gather by one caller alone would (a home shard holding `n` gives them
    /// all, as a take at home does).
    fn take_from_copy(&self, words: &mut [u64], home: usize, n: u64, now: Nanos) {
        let mut got = 0;
        for step in 0..self.shards.len() {
            if got == n {
                return;
            }
            let index = (home + step) & self.mask;
            let policy = &self.shards[index].policy;
            if words[index] == cas::GONE {
                // Sealed by a quota change: empty (the caller asks the next block).
                continue;
            }
            if let Step::Write(new, k) = policy.take_up_to(words[index], policy.time(now), n - got)
            {
                words[index] = new;
                got += k;
            }
        }
    }

    /// The answer to a request for nothing: what all the shards hold at `now`.
    fn query(&self, now: Nanos) -> Admitted {
        // One read of each shard, straight into the survey: no later step needs the words.
        let survey = self.survey(now, |i| read_word(&self.shards[i].word));
        Admitted::new(survey.headroom())
    }

    /// One read of every shard's word.
    fn snapshot(&self) -> Snapshot {
        let mut snapshot = Snapshot {
            small: [0; 16],
            large: Vec::new(),
            len: self.shards.len(),
        };
        let words = snapshot.words_mut();
        for (word, shard) in words.iter_mut().zip(self.shards.iter()) {
            *word = read_word(&shard.word);
        }
        snapshot
    }

    /// What the shards' words (`words(i)` for shard `i`, each read once) hold at `now`: whole
    /// tokens in all, the wait for the first whole token in any, and the wait until all are full.
    fn survey(&self, now: Nanos, words: impl Fn(usize) -> u64) -> Survey {
        let mut survey = Survey {
            tokens: 0,
            first_token_in: u128::MAX,
            next_in: u128::MAX,
            full_in: 0,
        };
        for (i, shard) in self.shards.iter().enumerate() {
            let word = words(i);
            if word == cas::GONE {
                // Sealed by a quota change: empty (the caller asks the next block).
                continue;
            }
            let t = shard.policy.time(now);
            let tokens = shard.policy.remaining(word, t);
            survey.tokens += tokens;
            survey.first_token_in = survey
                .first_token_in
                .min(shard.policy.wait_nanos(word, t, 1));
            if tokens < shard.policy.capacity() {
                // The sum of whole tokens grows when any shard's does.
                survey.next_in = survey
                    .next_in
                    .min(shard.policy.wait_nanos(word, t, tokens + 1));
            }
            survey.full_in = survey.full_in.max(shard.policy.full_in_nanos(word, t));
        }
        survey
    }

    /// A denial of `n` tokens at `now`, computed from the shards' `words` alone and `survey`, their
    /// survey at `now` (for `n <= 1` the survey alone: `words` may be empty): the earliest instant at which the shards, left alone, hold `n` whole tokens.
    /// Every figure describes the one state in `words`, so `retry_after` is zero exactly when
    /// `remaining >= n` (which only a gather that lost a race can report).
    #[cold]
    fn denied(&self, words: &[u64], n: u64, now: Nanos, survey: &Survey) -> Denied {
        let base = now.clamped();
        let wait = if n <= 1 {
            survey.first_token_in
        } else {
            // The smallest wait at which the shards' whole tokens add up to n: every shard is full
            // after `full_in`, and the sum only grows with time, so a binary search finds it.
            let tokens_at = |at: u64| -> u64 {
                self.shards
                    .iter()
                    .zip(words)
                    .filter(|(_, &w)| w != cas::GONE)
                    .map(|(s, &w)| s.policy.remaining(w, s.policy.time(Nanos::new(at))))
                    .sum()
            };
            let (mut lo, mut hi) = (0u64, u64::try_from(survey.full_in).unwrap_or(u64::MAX));
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if tokens_at(base.saturating_add(mid)) >= n {
                    hi = mid;
                } else {
                    lo = mid + 1;
                }
            }
            u128::from(lo)
        };
        Denied::new(base, Span::from_nanos(wait), survey.headroom())
    }
}

impl<C: Clock> Reservation<'_, ShardedBucket<C>> {
    /// Gives the reservation's tokens back now, each shard's part less the tokens taken on that
    /// shard after it; answers how many went back (see [`Reservation::cancel_at`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::with_clock(Quota::per_second(8)?, ManualClock::new());
    /// let r = limiter.reserve_n(8, Duration::ZERO)?;
    /// assert_eq!(r.cancel(), 8);
    /// assert_eq!(limiter.remaining(), 8);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel(self) -> u64 {
        let now = self.limiter.clock.now();
        self.cancel_at(now)
    }

    /// Gives the reservation's tokens back as of `now`: on each shard it reserved on, that part
    /// less the tokens taken there after it (the token bucket's rule, per shard), never above the
    /// shard's capacity; nothing at a reading after [`Reservation::ready_at`]. Answers how many
    /// went back.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota, ShardedBucket};
    /// let limiter = ShardedBucket::builder(Quota::per_second(4)?).shards(2).clock(ManualClock::new()).build()?;
    /// let t = Nanos::new(0);
    /// let r = limiter.reserve_n_from(0, 4, Duration::ZERO, t)?;
    /// limiter.refund_from(0, 1, t);
    /// assert_eq!(r.cancel_at(t), 3); // shard 0 had room for one token less
    /// assert_eq!(limiter.remaining_at(t), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn cancel_at(self, now: Nanos) -> u64 {
        let Parts::Shards { parts, generation } = &self.parts else {
            return 0;
        };
        if self.passed(now) {
            return 0;
        }
        let limiter = self.limiter.current.read();
        if limiter.generation != *generation {
            // The quota changed since: what the old shards had left was carried over already.
            return 0;
        }
        let mut back = 0;
        for part in parts {
            let shard = &limiter.shards[part.shard];
            let t = shard.policy.time(now);
            // A shard sealed meanwhile takes nothing back.
            back += live(cas::update_live(&shard.word, |w| {
                shard.policy.cancel(w, t, part.tokens, part.tat)
            }))
            .unwrap_or(0);
        }
        if back > 0 {
            limiter.hint.added_tokens();
        }
        back
    }
}

/// Every shard's word as one read found them, on the stack for up to 16 shards.
struct Snapshot {
    small: [u64; 16],
    large: Vec<u64>,
    len: usize,
}

impl Snapshot {
    fn words(&self) -> &[u64] {
        if self.len <= self.small.len() {
            &self.small[..self.len]
        } else {
            &self.large
        }
    }

    fn words_mut(&mut self) -> &mut [u64] {
        if self.len <= self.small.len() {
            &mut self.small[..self.len]
        } else {
            if self.large.len() != self.len {
                self.large.resize(self.len, 0);
            }
            &mut self.large
        }
    }
}

/// What a gather took from one shard: the tokens, and the word before and after its write.
#[derive(Debug, Clone, Copy, Default)]
struct Gathered {
    tokens: u64,
    before: u64,
    after: u64,
}

/// What a reservation claimed on one shard: the tokens, and the word before its first write and
/// after its last; `exact` while nobody else wrote the shard between its writes (so that undoing
/// them restores exactly the state without them).
#[derive(Debug, Clone, Copy, Default)]
struct Claim {
    tokens: u64,
    before: u64,
    after: u64,
    exact: bool,
}

impl Claim {
    /// A write of `k` tokens that replaced `before` with `after`.
    fn record(&mut self, k: u64, before: u64, after: u64) {
        if self.tokens == 0 {
            self.before = before;
            self.exact = true;
        } else if before != self.after {
            self.exact = false;
        }
        self.tokens += k;
        self.after = after;
    }
}

/// What one read of every shard found.
struct Survey {
    tokens: u64,
    first_token_in: u128,
    /// The wait until any shard holds one more whole token (`u128::MAX`: every shard is full).
    next_in: u128,
    full_in: u128,
}

impl Survey {
    /// When the shards' whole tokens, summed, grow by one.
    fn next(&self) -> Next {
        match self.next_in {
            u128::MAX => Next::FULL,
            wait => Next::nanos(wait.max(1)),
        }
    }

    /// What the shards hold, summed, and when they are full.
    fn headroom(&self) -> Headroom {
        Headroom::whole(self.tokens, self.full_in, self.next())
    }
}

/// The refusal of one token at the clamped reading `base`, from a hint whose `until` is after it:
/// what the full scan that published the hint answers at `base` (see [`Hint`]).
#[inline]
fn hinted_denial(base: u64, until: u64, full: u64) -> Denied {
    // No shard holds a whole token: the first one anywhere is the one the retry waits for.
    Denied::new(
        base,
        Span::from_nanos(u128::from(until - base)),
        Headroom::whole(
            0,
            u128::from(full - base),
            Next::nanos(u128::from(until - base)),
        ),
    )
}

/// `Hint::seq`: a publication is being written (its payload may be torn).
const WRITING: u64 = 1;
/// `Hint::seq`: the payload is published.
const VALID: u64 = 2;
/// `Hint::seq`: tokens were added, or taken, since the payload was read from the shards: the
/// publication is void (and one still being written will not be published).
const DIRTY: u64 = 4;
/// The three flags of `Hint::seq`.
const FLAGS: u64 = WRITING | VALID | DIRTY;
/// What each claim adds to `Hint::seq` (above the flags), so that no two publications share a
/// sequence word.
const STEP: u64 = 8;

/// A rarely written note that every shard is empty until a reading: written by a full scan that
/// found no whole token in any shard, read first by every request, withdrawn by anything that
/// changes the shards (a refund, a give-back, an admission).
///
/// # State table
///
/// `seq` holds a counter (bits 3..) and three flags; `until` and `full` the payload: the earliest
/// reading (clamped nanoseconds) at which any shard holds a whole token, and the reading at which
/// every shard is full, both as the publishing scan read the shards.
///
/// | `seq & FLAGS` | meaning | left by |
/// | --- | --- | --- |
/// | `0` | no hint | construction |
/// | `WRITING` | a scan is writing the payload and checking the shards again | [`Hint::publish`]'s claim |
/// | `WRITING \| DIRTY` | the same, voided before it could be published | [`Hint::added_tokens`], [`Hint::withdraw`] |
/// | `VALID` | published: every shard is empty at every reading before `until` | [`Hint::publish`] |
/// | `DIRTY`, `VALID \| DIRTY` | no hint (abandoned or withdrawn) | [`Hint::publish`], [`Hint::added_tokens`], [`Hint::withdraw`] |
///
/// Only a claim (a compare-and-swap from a word without `WRITING`) starts a publication, so
/// publications never overlap; every change of `seq` is a read-modify-write.
///
/// # Why a published hint is right
///
/// For a shard whose word is `w` (a GCRA word in units of `2^shift` ns), one token is refused at a
/// reading `ns` exactly when `ns < A = (w + I - B) << shift`, and then its wait is `A - ns` and its
/// time until full `(w << shift) - ns`. So while no shard's word changes, the scan's answer at any
/// reading before `until = min A` is `until - ns`, `full - ns` with `full = max (w << shift)`:
/// exactly the scan's figures, at any such reading, earlier ones included.
///
/// Words change in two directions. A take only empties a shard further, so every shard stays empty
/// before `until`; a hint published before a racing take stays true, only its figures describe
/// the shards just before that take (an admission withdraws the hint, so in one thread's sequence
/// of calls the figures are exact). A refund or a give-back adds tokens, and must never leave a
/// hint that hides them: it writes its shard, then (after a `SeqCst` fence) reads `seq` and voids
/// any publication it sees. The publisher claims `seq`, then (after a `SeqCst` fence) reads every
/// shard again and publishes only if every word is as its scan read it and nobody voided the
/// claim. Between the two fences, either the refund sees the claim (and voids it, or the hint
/// published from it), or the publisher's second read sees the refund's write (and gives up).
struct Hint {
    seq: AtomicU64,
    until: AtomicU64,
    full: AtomicU64,
}

impl Hint {
    fn new() -> Hint {
        Hint {
            seq: AtomicU64::new(0),
            until: AtomicU64::new(0),
            full: AtomicU64::new(0),
        }
    }

    /// The payload `(until, full)` of the publication whose sequence word, read with `Acquire`,
    /// was `seq` (`VALID` alone), or `None` if it changed meanwhile.
    #[inline]
    fn read(&self, seq: u64) -> Option<(u64, u64)> {
        // Relaxed: the Acquire load of `seq` that found the publication already made its payload
        // visible; the check of `seq` below rejects a payload from a later claim.
        let until = self.until.load(Ordering::Relaxed);
        let full = self.full.load(Ordering::Relaxed);
        // Acquire: pairs with the fence after a claim, so that if either load above read a later
        // claim's payload, the read of `seq` below sees that claim (a seqlock's reader).
        fence(Ordering::Acquire);
        // Relaxed: ordered after the payload loads by the fence above.
        (self.seq.load(Ordering::Relaxed) == seq).then_some((until, full))
    }

    /// Voids the hint after an admission changed the shards (only its figures went stale: a take
    /// never fills a shard, so every shard is still empty before `until`).
    #[cold]
    fn withdraw(&self) {
        // Relaxed: a single read-modify-write; it publishes nothing, and the hint it voids was
        // still true (see `Hint`).
        self.seq.fetch_or(DIRTY, Ordering::Relaxed);
    }

    /// Voids any publication, finished or under way, after a refund or a give-back wrote tokens
    /// into a shard (called after those writes).
    #[cold]
    fn added_tokens(&self) {
        // SeqCst: pairs with the fence in `publish`; between the two, either the load below sees
        // the publisher's claim or the publisher's second read of the shards sees our writes.
        fence(Ordering::SeqCst);
        // Relaxed: ordered after our shard writes by the fence above.
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & (WRITING | VALID) != 0 && seq & DIRTY == 0 {
            // Relaxed: a read-modify-write on `seq` is ordered with the publisher's claim and
            // publication by `seq`'s modification order alone: before the publication, it makes
            // it fail; after, it voids it. A later request reads this or a later value.
            self.seq.fetch_or(DIRTY, Ordering::Relaxed);
        }
    }

    /// Publishes that every shard is empty until the reading `base + survey.first_token_in`, from
    /// a scan at the clamped reading `base` that found `words` and no whole token in any shard;
    /// gives up (no hint) if another publication is under way, one already covers `base`, the
    /// readings do not fit 64 bits, or a shard changed since `words` were read.
    #[cold]
    fn publish(
        &self,
        shards: &[CachePadded<BucketShard>],
        words: &[u64],
        base: u64,
        survey: &Survey,
    ) {
        let (Ok(until), Ok(full)) = (
            u64::try_from(u128::from(base) + survey.first_token_in),
            u64::try_from(u128::from(base) + survey.full_in),
        ) else {
            return;
        };
        // Relaxed: only a guess at whether to claim; the claim below is checked by its CAS.
        let seq = self.seq.load(Ordering::Relaxed);
        if seq & WRITING != 0
            || (seq & FLAGS == VALID && self.read(seq).is_some_and(|(u, _)| base < u))
        {
            return;
        }
        let claimed = ((seq & !FLAGS).wrapping_add(STEP)) | WRITING;
        // Relaxed: the fence below orders the claim before the payload and the second read.
        if self
            .seq
            .compare_exchange(seq, claimed, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        // SeqCst: as a release fence, pairs with the Acquire fence in `read` (a reader that sees
        // this payload sees the claim); as a SeqCst fence, pairs with the one in `added_tokens`.
        fence(Ordering::SeqCst);
        // Relaxed: published by the Release below, and guarded against torn reads by the claim.
        self.until.store(until, Ordering::Relaxed);
        self.full.store(full, Ordering::Relaxed);
        let unchanged = shards
            .iter()
            .zip(words)
            .all(|(shard, &word)| cas::read(&shard.word) == word);
        if unchanged {
            // Release: pairs with the Acquire load of `seq` in `take`, publishing the payload.
            // Relaxed on failure: a voided claim publishes nothing.
            if self
                .seq
                .compare_exchange(
                    claimed,
                    (claimed & !WRITING) | VALID,
                    Ordering::Release,
                    Ordering::Relaxed,
                )
                .is_ok()
            {
                return;
            }
        }
        // Relaxed: ends a claim that publishes nothing (the word stays without `VALID`).
        self.seq.fetch_and(!WRITING, Ordering::Relaxed);
    }
}

crate::direct::limiter_from_inherent_methods!(ShardedBucket);

impl<C> fmt::Debug for ShardedBucket<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Read, then formatted outside the epoch (see `Current`'s `Debug`).
        let (quota, shards) = {
            let block = self.current.read();
            (block.quota, block.shards.len())
        };
        f.debug_struct("ShardedBucket")
            .field("quota", &quota)
            .field("shards", &shards)
            .finish_non_exhaustive()
    }
}

/// A shard's word for a read that decides nothing: as `cas::read`, and when it is the seal a
/// quota change left, with the Acquire fence of `Gone::seen`, so that the caller's later look at
/// `Shards::sealed` sees the flag the change set before sealing (a request that read a sealed
/// word asks the next block rather than answering from a half-sealed one).
#[inline]
fn read_word(word: &AtomicU64) -> u64 {
    match cas::read(word) {
        cas::GONE => {
            let _ = Gone::seen();
            cas::GONE
        }
        word => word,
    }
}

/// The answer of a decision on a shard's word, or `None` when it met a seal (or refused).
#[inline]
fn live<T, E>(decided: Result<Result<T, E>, Gone>) -> Option<T> {
    decided.ok().and_then(Result::ok)
}
