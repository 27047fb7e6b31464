//! Lock-free, in-process rate limiting for latency-critical services.
//!
//! tollgate checks a limit on every request at the cost of a clock read and one compare-and-swap,
//! never admits more than the limit, and is model-checked with loom, fuzzed against an exact
//! reference model, and benchmarked against governor.
//!
//! # Quick start
//!
//! ```
//! use tollgate::{Quota, TokenBucket};
//!
//! // 100 requests per second, bursts of up to 20.
//! let limiter = TokenBucket::new(Quota::per_second(100)?.with_capacity(20)?);
//!
//! match limiter.try_acquire() {
//!     Ok(admitted) => println!("go ahead; {} left", admitted.remaining()),
//!     Err(denied) => println!("429, Retry-After: {}s", denied.retry_after().as_secs_f64().ceil()),
//! }
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # What is here
//!
//! | type | what it does |
//! | --- | --- |
//! | [`Quota`] | "n per period", a capacity (burst) and an initial fill, validated ([`QuotaError`]); parsed from and printed as `"20/min, burst 5"` ([`QuotaParseError`]) |
//! | [`TokenBucket`] | bursts up to C, then R per second; one `AtomicU64`, one CAS per admission, denials read only |
//! | [`ShardedBucket`] | the same limit for one hot key, spread over cache-padded per-core shards with stealing |
//! | [`window::FixedWindow`] | N per window, the count and the window index in one word; the boundary burst (up to 2N) |
//! | [`window::SlidingWindowCounter`], [`window::SubWindowCounter`] | the weighted estimate of the last window, in one word or over `k` sub-windows |
//! | [`window::SlidingWindowLog`] | exact: never more than N in any window `(t − W, t]`, a ring of the last N admission times |
//! | [`leaky::LeakyMeter`] | the leaky bucket as a meter: one departure per interval, each caller told its delay ([`Scheduled`]) in a virtual queue of at most C; one `AtomicU64` |
//! | [`leaky::queue()`]: [`leaky::LeakySender`], [`leaky::LeakyReceiver`] | the leaky bucket as a queue: producers enqueue up to C items (a refused item is handed back), one consumer receives them at exactly R per second |
//! | [`keyed::KeyedLimiter`] | one limit per key (`&str` lookups for `String` keys), a bound on the keys held, idle keys forgotten losslessly; a new key that finds no room is refused ([`keyed::KeyedError::TooManyKeys`]) or shares one overflow limit |
//! | [`Limiter`], [`KeyedLimit`] | one interface for every limiter (object-safe: `Arc<dyn Limiter>`), and for every keyed limiter |
//! | [`AllOf`] | several limits as one ("10 a second and 1 000 an hour"), direct or per key: admitted only when every limit admits, all or none |
//! | [`wait::LimiterExt`], [`wait::KeyedLimitExt`], [`wait::Wait`] | waiting instead of being refused, on every limiter: blocking `wait_n`, and with `tokio` the futures `until_ready`, `until_n_ready`, `until_key_ready`; optionally bounded (`_within`) and jittered |
//! | [`Direct`], [`Algorithm`] | the one facade the direct limiters are aliases of, and the sealed algorithm markers it (and [`keyed::KeyedLimiter`]) runs |
//! | [`Admitted`], [`Denied`], [`AcquireError`], [`InsufficientCapacity`] | outcomes with `remaining`, `reset_after`, `next_after`, exact `retry_after` |
//! | [`Reservation`], [`ReserveError`], [`Partial`] | the token buckets' `reserve_n` (tokens taken now, into debt, yours at `ready_at`; `cancel`) and `take_up_to` (as many as are there, at most `n`), direct, sharded and keyed (`reserve_key_n`, `take_up_to_key`) |
//! | [`Clock`], [`Nanos`] | time injection: every limiter method has an `_at(now)` form |
//! | [`MonotonicClock`] | the default: a calibrated TSC through one process-wide quanta clock |
//! | [`CoarseClock`] | a timestamp refreshed by a background thread: one load per reading, up to 1 ms stale |
//! | [`ManualClock`] | time you set, forwards or backwards, for tests |
//! | `TokioClock` | tokio's `Instant` (feature `tokio`): follows tokio's paused time, for tests of waiting |
//!
//! # Code generic over a limiter
//!
//! ```
//! use tollgate::{Limiter, ManualClock, Quota, TokenBucket};
//! use tollgate::window::FixedWindow;
//!
//! fn admitted_of<L: Limiter + ?Sized>(limiter: &L, requests: u64) -> u64 {
//!     (0..requests).filter(|_| limiter.try_acquire().is_ok()).count() as u64
//! }
//! let q = Quota::per_second(10)?;
//! assert_eq!(admitted_of(&TokenBucket::with_clock(q, ManualClock::new()), 50), 10);
//! let boxed: Box<dyn Limiter> = Box::new(FixedWindow::with_clock(q, ManualClock::new())?);
//! assert_eq!(admitted_of(boxed.as_ref(), 50), 10);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! Constructors return `Result<_, QuotaError>` exactly when some valid [`Quota`] is one their
//! algorithm cannot enforce (the windows, the leaky queue); the token bucket, the sharded bucket
//! and the leaky meter enforce every quota. See [`limiter`] for the rule. A quota's own refusals
//! (a zero count, a rate beyond a nanosecond clock) are [`QuotaError`]'s variants; an algorithm's
//! limits are [`QuotaError::Algorithm`], an [`AlgorithmLimit`] built and worded by the algorithm
//! itself, so that the bottom of the crate names no algorithm.
//!
//! The limits a constructor checks are module-level constants, each beside the limiter it bounds:
//! [`sharded::MAX_SHARDS`], [`window::MAX_LOG`], [`window::MAX_SUB_WINDOWS`],
//! [`leaky::MAX_QUEUE_CAPACITY`]. The error enums that will grow as backends join
//! ([`AcquireError`], [`keyed::KeyedError`], the queue's [`leaky::TrySendError`] and
//! [`leaky::SendTimeoutError`]) are `#[non_exhaustive]`: match them with a wildcard arm.
//!
//! # Design rules every limiter follows
//!
//! - **Policy + state + time.** Constants derived once from the [`Quota`]; per-limiter state in
//!   atomic words; a clock reading passed into a pure decision function.
//! - **Denials never write**, so a flood of refused requests does not fight over a cache line.
//! - **Time only helps.** A clock that steps backwards, or readings that arrive out of order, never
//!   create capacity; a reading years ahead just means "full".
//! - **Readings ahead of the clock** (the one rule; see the next section).
//! - **Integer arithmetic, rounded toward admitting less**, with every bound documented.
//! - **No panics from any argument.** Bad configuration is a [`QuotaError`] naming the field and its
//!   accepted range; an impossible request is [`InsufficientCapacity`], not a denial.
//!
//! # Readings ahead of the clock
//!
//! Every `_at` method takes a reading the caller holds, which should come from the limiter's own
//! clock ([`Limiter::now`]). A wrong one far in the future is a bug this crate cannot detect
//! without reading the clock on every call, which is what the `_at` forms exist to avoid. The rule,
//! for every limiter and the queue:
//!
//! - **A decision on one limit is judged at the reading given.** A direct limiter's state, or one
//!   key's state in a keyed limiter, is the limit the reading asked about: a reading years ahead
//!   finds it full, and what it takes is taken as of then, so later honest readings of that same
//!   limit wait until then. Only that limit: the caller who passed the reading owns it.
//! - **What acts for other limits or other callers' items is never judged ahead of the clock:**
//!   it uses `min(reading, clock.now())`. These are the keyed limiter's evictions (their reading
//!   becomes the floor every new key starts from; see
//!   [`KeyedLimiter::retain_recent_at`](keyed::KeyedLimiter::retain_recent_at)) and the leaky
//!   queue's sends (their reading anchors the release grid every later item waits on; see
//!   [`LeakySender::try_send_at`](leaky::LeakySender::try_send_at)). So one wrong reading can use
//!   up the limit it was given to, but cannot lock other keys out or hold other items back: a
//!   send at `u64::MAX` is released as of the clock's reading, as the items after it are.
//! - **Readings behind the clock are taken as they are** (a reading taken a moment ago and used
//!   now): see "Time only helps" above for why they never create capacity.
//!
//! # Changing a quota
//!
//! Every direct limiter ([`TokenBucket`], the [windows](window) and the
//! [`SubWindowCounter`](window::SubWindowCounter), the [leaky meter](leaky::LeakyMeter), any
//! [`Direct`]) and the [`ShardedBucket`] change their quota at runtime with `set_quota`
//! ([`Direct::set_quota`], [`ShardedBucket::set_quota`],
//! [`SubWindowCounter::set_quota`](window::SubWindowCounter::set_quota)), without a restart and
//! without a lock on the check path: the check reads its quota, policy and state as one block
//! through an atomic pointer, kept alive by the crate's own epoch (a plain store to the calling
//! thread's own slot on Linux). The [keyed limiter](keyed::KeyedLimiter) changes every key's
//! quota, or one tier's, with [`set_quota`](keyed::KeyedLimiter::set_quota) and
//! [`set_tier_quota`](keyed::KeyedLimiter::set_tier_quota): each table of its map carries the
//! policy its states are kept under, so a check reads the two together at no extra cost, and a
//! change converts the map shard by shard. The Redis backend's limiter changes what it sends
//! with `RedisLimiter::set_quota` (feature `redis`), and its scripts convert each key by the
//! same rule. The leaky queue cannot change its rate yet. The rule, the same for every limiter
//! and for the Redis scripts:
//!
//! - **Across a change, no interval admits more than either quota alone would have allowed from
//!   the state at the change.** The state is read conservatively: the new quota starts with the
//!   whole admissions the old state had left at the change (fractions dropped), at most its own
//!   capacity, and refills (or opens windows) by itself from there. A window limiter keeps its
//!   alignment; a [`Reservation`] made before a change gives nothing back after it. A key a
//!   keyed limiter does not hold stands for a fresh state, and is carried like one: when the
//!   capacity grows, a key first seen after the change starts from the old capacity and refills
//!   to the new one (see [`keyed::KeyedLimiter::set_quota`]).
//! - **Checks never wait for a change**, but for the few instructions between its sealing the old
//!   state and publishing the new one (for a keyed limiter, a check that meets a key being
//!   converted waits for that key's shard); the change returns once no check reads the old
//!   quota.
//!
//! ```
//! use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
//! let bucket = TokenBucket::with_clock(Quota::per_second(100)?, ManualClock::new());
//! let t = Nanos::new(0);
//! bucket.try_acquire_n_at(95, t)?; // 5 left
//! bucket.set_quota_at(Quota::per_second(1_000)?, t)?;
//! assert_eq!(bucket.remaining_at(t), 5); // a bigger quota does not refill at once
//! assert_eq!(bucket.remaining_at(Nanos::new(10_000_000)), 15); // it refills at its own rate
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Behind the HTTP middleware (feature `tower`), a layer's quota changes through a handle the
//! application keeps, `middleware::QuotaHandle` (from `LimitLayer::quota_handle`): the limiter
//! and the `RateLimit-Policy` and `RateLimit` fields change together, from the next request on.
//!
//! # Features
//!
//! | feature | what it adds |
//! | --- | --- |
//! | `tokio` | async `send_async` and `recv_async` on the [`leaky`] queue (tokio's `Notify` and timer); the [`wait`] futures (`until_ready`, `until_n_ready`, `until_key_ready`, ...); `LeakyMeter::schedule_async`; `TokioClock` |
//! | `redis` | the Redis backend, `redis` (limits shared across machines, decided by server-side Lua) |
//! | `tower` | the HTTP middleware, `middleware` (a tower layer for axum, hyper and tonic) |
//! | `axum` | `tower`, and the middleware's `peer_ip()` reads axum's `ConnectInfo<SocketAddr>` |
//! | `tonic` | `tower`, and the middleware's `peer_ip()` reads tonic's `TcpConnectInfo` |
//! | `serde` | `Serialize` and `Deserialize` for [`Quota`], as its [text form](Quota#text-form) (`"20/min, burst 5"`) |
//! | `metrics` | counters and gauges through the `metrics` facade: decisions per limiter (`metrics::Metered`, named keyed limiters) and per middleware policy, keys, evictions and overflow, Redis round trips, failures and breaker; see `metrics` |
//! | `tracing` | `tracing` events where an operator needs them (a breaker opening and closing, a failure policy taking over, overflow, sweeps, script reloads), never one per request; see `metrics` |
//!
//! The `loom` feature is internal (the crate's own model checks, in `loom-tests/`): turning it on
//! builds nothing more and changes nothing.

// Denied everywhere but in the keyed limiter's table (`keyed::table`) and the epoch it and the
// direct limiters' quota pointers share (`epoch`), whose lock-free lookups read entries published
// by atomics and whose reclaimer calls membarrier(2), the quota pointer itself (`change`), and
// the default clock's `rdtsc` (`clock::tsc`); every block there says why it is sound.
#![deny(unsafe_code)]
// docs.rs (and `bash scripts/test.sh docsrs`) builds with `--cfg docsrs` on nightly: every
// feature-gated item then carries an "Available on crate feature ..." badge, from the
// `doc(cfg(...))` beside its `cfg`. The loom switch is the crate's own and never shown.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![cfg_attr(docsrs, doc(auto_cfg(hide(tollgate_loom, fuzzing))))]

pub mod algorithm;
pub mod all_of;
mod cas;
#[allow(unsafe_code)]
mod change;
pub mod clock;
mod direct;
#[allow(unsafe_code)]
mod epoch;
mod gcra;
pub mod keyed;
pub mod leaky;
#[cfg(any(feature = "redis", tollgate_loom))]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod lease;
pub mod limiter;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod middleware;
pub mod outcome;
mod partial;
pub mod quota;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
pub mod reservation;
pub mod sharded;
mod sync;
pub mod token_bucket;
pub mod wait;
pub mod window;

pub use algorithm::{
    Algorithm, FixedWindowAlgorithm, LeakyMeterAlgorithm, SlidingWindowCounterAlgorithm,
    SlidingWindowLogAlgorithm, TokenBucketAlgorithm,
};
pub use all_of::{AllOf, AllOfError, GiveBack, KeyedGiveBack};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use clock::TokioClock;
pub use clock::{Clock, CoarseClock, CoarseClockError, ManualClock, MonotonicClock, Nanos};
pub use direct::Direct;
pub use limiter::{KeyedLimit, Limiter};
pub use outcome::{AcquireError, Admitted, Denied, InsufficientCapacity, Scheduled};
pub use partial::Partial;
pub use quota::{AlgorithmLimit, Quota, QuotaError, QuotaParseError};
pub use reservation::{Reservation, ReserveError};
pub use sharded::{ShardedBucket, ShardedBuilder, ShardsError};
#[cfg(not(tollgate_loom))]
#[doc(hidden)]
pub use token_bucket::__bench_change;
pub use token_bucket::TokenBucket;

#[cfg(all(test, not(tollgate_loom)))]
mod tests;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
