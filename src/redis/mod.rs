//! The Redis backend (feature `redis`): the same limits across machines, each decision made
//! atomically on the Redis server by a Lua script.
//!
//! A per-client limit must hold across every replica of a service. [`RedisLimiter`] keeps each
//! key's state in Redis and sends every decision as one `EVALSHA`: the script reads the state,
//! decides exactly as the in-process algorithm does, and writes only on an admission, in one
//! atomic step on the server. There is no client-side compare-and-swap to retry (a hot key costs
//! one round trip per decision however many replicas contend for it), no Redis module to install,
//! and no floating point.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! # rt.block_on(async {
//! use tollgate::redis::{FailurePolicy, RedisError, RedisLimiter};
//! use tollgate::keyed::TokenBucketKeys;
//! use tollgate::Quota;
//! // Needs a server: see `scripts/redis.sh`, which the test script uses.
//! let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
//! let conn = redis::Client::open(url)?.get_connection_manager().await?;
//! let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(3)?)
//!     .prefix("docs-module")
//!     .build(FailurePolicy::Closed)?;
//! let key = format!("client-{}", std::process::id());
//! for _ in 0..3 {
//!     limiter.check_key(&key).await?;
//! }
//! match limiter.check_key(&key).await {
//!     Err(RedisError::Denied(d)) => assert!(d.retry_after().as_secs() <= 20),
//!     other => panic!("the fourth in a minute: {other:?}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })
//! # }
//! ```
//!
//! # Algorithms and scripts
//!
//! `A` in [`RedisLimiter<A>`] is the keyed marker of the algorithm, as for
//! [`KeyedLimiter`](crate::keyed::KeyedLimiter); each has one script (`src/redis/*.lua`, embedded
//! in the crate, after a shared prelude):
//!
//! | marker | script | structure | TTL (rounded up to the millisecond) |
//! | --- | --- | --- | --- |
//! | [`TokenBucketKeys`](crate::keyed::TokenBucketKeys) | `token_bucket.lua` + `gcra.lua` + `gcra_one.lua` | one string | until the bucket is full again (its debt paid, after a reservation) |
//! | [`LeakyMeterKeys`](crate::keyed::LeakyMeterKeys) | `leaky_meter.lua` + `gcra.lua` + `gcra_one.lua` | one string | until the virtual queue is empty |
//! | several token buckets ([`RedisAllOf`]) | `token_bucket.lua` + `gcra.lua` + `gcra_all.lua` | one string per limit | each until its bucket is full again |
//! | [`FixedWindowKeys`](crate::keyed::FixedWindowKeys) | `fixed_window.lua` | one hash | until the window ends |
//! | [`SlidingWindowCounterKeys`](crate::keyed::SlidingWindowCounterKeys) | `sliding_counter.lua` | one hash | until both counted windows have ended |
//! | [`SlidingWindowLogKeys`](crate::keyed::SlidingWindowLogKeys) | `sliding_log.lua` | one sorted set, scored in microseconds | until the newest admission leaves the window |
//!
//! The log's members are unique (the admission's time and a sequence number among admissions of
//! the same microsecond, so equal timestamps never collide), its entries that left the window are
//! pruned on admission, and a denial is never recorded. The sliding counter's exact comparison
//! needs `count × window` (in microseconds) below 2^52: a larger quota is refused naming `count`
//! (a window of a day allows 52 124). The fixed window counts up to 2^52 per window.
//!
//! Every script takes the quota as arguments on every call (as `CL.THROTTLE` does), so a tier
//! change needs no migration; reads the time with `TIME` on the server (Redis 5 and later
//! replicate scripts as their effects, so a write after `TIME` is allowed); writes only on an
//! admission (denials, peeks and queries only read); and sets a TTL at which the state reads as
//! fresh, never earlier: a key that expired early would hand out a second burst.
//!
//! A call runs the script by its SHA-1 (`EVALSHA`). Redis keeps loaded scripts in memory only, and
//! replicas do not share them: after a restart, a failover or a `SCRIPT FLUSH` the server answers
//! `NOSCRIPT`, and the call loads the script (`SCRIPT LOAD`, which the cluster client sends to
//! every node) and runs it once more: one reload, counted in [`Stats::reloads`].
//!
//! # Keys
//!
//! A key's state is at `prefix:{key}:algorithm` (`tollgate:{client-7}:tb`). The braces are a Redis
//! Cluster hash tag, so all of one key's structures share a slot, and the algorithm suffix keeps the
//! algorithms from reading each other's state. The limits of a [`RedisAllOf`] are at
//! `prefix:{key}:tb:0`, `prefix:{key}:tb:1`, ..., one per quota in the order given: one hash tag,
//! so one slot, which lets one script touch them all on Redis Cluster; and names no
//! [`RedisLimiter`] writes (its bucket is `:tb`), so the two never read each other's state. Keys are bytes, up to [`MAX_KEY_LEN`] (1 KiB; longer
//! is [`RedisError::KeyTooLong`]); `{`, `}` and `%` in a key are escaped as `%7B`, `%7D`, `%25`, and
//! the empty key is written `%`, so the tag never ends early and is never empty. The prefix
//! (default `tollgate`, at most 256 bytes) may not contain braces.
//!
//! # Time and exactness
//!
//! Decisions are timed by the server's clock, so clients' clocks may disagree freely. Lua counts
//! in doubles, exact for integers below 2^53, so every number a script handles stays below it:
//!
//! - the reading is Unix time in microseconds (1.8 × 10^15 today; exact until the year 2255);
//! - the token bucket's and the meter's state is the admission's reading in microseconds plus the
//!   span to the theoretical arrival time, in nanoseconds: the interval is the same nanosecond
//!   value as [`Quota::interval`](crate::Quota::interval), and a script answers exactly what the
//!   in-process limiter answers at the same microsecond. A quota whose burst window (capacity ×
//!   interval) exceeds 2^52 ns (52 days) is counted in microseconds instead, the interval rounded
//!   up (never faster than the quota); one beyond 2^52 µs (142 years) is refused when the limiter
//!   is built, naming `capacity`;
//! - a reservation ([`RedisLimiter::reserve_key_n`]) may leave the bucket in debt, its gap past
//!   the burst window; the script grants one only while the gap it writes stays within 2^52 ticks,
//!   the bound every other sum relies on (with nanosecond ticks, the burst window plus the debt
//!   within 52 days). Beyond it the reservation is denied with the wait until it fits: it admits
//!   less, never more;
//! - windows are whole microseconds (a `period` with a nanosecond remainder is refused, naming
//!   `period`), aligned to the Unix epoch. The sliding counter's earliest admission is exact to the
//!   microsecond (in process, to the nanosecond: the two agree once rounded up to a microsecond);
//! - no time is ever turned into a string with `tostring`, and replies are integers.
//!
//! [`Denied::retry_at`](crate::Denied::retry_at) of a decision made in Redis is on the server's
//! clock: Unix time in nanoseconds. [`Denied::retry_after`](crate::Denied::retry_after) is a span
//! and needs no shared clock.
//!
//! A server clock that steps back is handled as in process: a reading earlier than a state's
//! never creates tokens (the state is read as of its own time). Readings more than 2^53 ns (104
//! days) before a token bucket's state are denied with a `retry_after` clamped to that span (the
//! windows clamp theirs at 2^53 µs), but the key's TTL still covers the whole span, and tokens a
//! lease gives back at such a reading move the state's own time back, exactly. A stored number of
//! 2^53 or more, and a window that would start there, are a foreign value. Once
//! a state has expired (it read as fresh at its TTL), Redis has forgotten it: a clock that then
//! steps back by `skew` sees a fresh key where the state would have been short by `R × skew`
//! tokens, the same bound as a failover's (below).
//!
//! # Changing a quota
//!
//! State written under another quota is read conservatively: while that state still counts (a
//! bucket not yet full, a window not yet over), the key has no more remaining than either quota
//! leaves, and a request must fit both. The admission that first writes under the new quota
//! converts the state so that this stays true afterwards: the token bucket and the meter keep at
//! most the old quota's whole tokens; the windows count the old admissions, and the places the old
//! limit did not have, in the new quota's current window (the log records the latter as admissions
//! at that time). From then on the new quota alone rules. A denial, a peek or a query converts
//! nothing. Each state stores the quota it was written under to make this possible.
//!
//! This is the crate's one rule for quota changes (the crate docs, "Changing a quota"), so a
//! limiter's quota changes at runtime with [`RedisLimiter::set_quota`]: every later call sends
//! the new quota, with no lock on the call path, and each key converts on its next admission.
//!
//! # When Redis cannot decide
//!
//! Every call is bounded by a timeout (default 50 ms, the reload of a script included), which
//! covers a hung server as well as a slow one. What then happens is the [`FailurePolicy`] the
//! builder requires: `Closed` (the call answers [`RedisError::Unavailable`]), `Open` (admitted,
//! counted), or `Local` (an in-process [`KeyedLimiter`](crate::keyed::KeyedLimiter), usually the
//! quota divided by the replicas, decides; counted). After `failures` calls in a row that Redis
//! could not decide (default 5), a circuit breaker sends calls straight to the policy, and lets one
//! probe through per cool-down (default 1 s), so an outage costs one timeout per cool-down, not
//! one per request; the same limiter recovers when the server answers again. [`Stats`] counts
//! decisions, round trips, reloads, timeouts, failures, breaker skips and openings, open
//! admissions and local decisions.
//!
//! # Several limits
//!
//! A [`RedisAllOf`] holds several token-bucket quotas per key ("10 a second and 1 000 an hour")
//! and decides a request in one `EVALSHA` over the keys of every limit: the script judges each at
//! one reading, writing nothing, and writes them all only when every one admits. It answers as the
//! in-process [`AllOf`](crate::AllOf) does (the binding limit's admission, the longest refusal),
//! with one difference in its favour: a refused request never holds tokens, even for an instant.
//! Its failure policy is an [`AllOfFailurePolicy`], whose `Local` is an in-process `AllOf`.
//!
//! # Reservations
//!
//! [`RedisLimiter::reserve_key_n`] (token bucket) takes `n` tokens now, into debt when they are
//! not there yet and the wait is at most `max_wait`, and answers a [`RedisReservation`] saying
//! when they are the caller's; [`RedisReservation::cancel`] gives them back less those taken after
//! it, as the in-process [`Reservation`](crate::Reservation) does, and gives back nothing where it
//! cannot tell (the state expired or was rewritten under another quota).
//!
//! # Leases: admissions without a round trip
//!
//! A decision in Redis costs a round trip (tens of microseconds on loopback, more across a
//! network). Where that is too much, a [`LeasedBucket`] takes up to `k` tokens from the key's
//! shared token bucket in one call ([`RedisLimiter::lease_key`]) and spends them locally, one
//! compare-and-swap each ([`LeaseStock`](crate::lease::LeaseStock)); below a low-water mark one task
//! fetches the next lease. It never admits a token it has not leased, and a leased token lives at
//! most `L` (the lease's lifetime), so all processes together admit at most `C + R × (t + L)` over
//! any interval `t`. Unspent tokens go back to the shared bucket when a new lease replaces them and
//! when the bucket is closed or dropped. The cost: up to `k` tokens held idle per process.
//!
//! # Failover
//!
//! Redis replicates asynchronously: a failover can lose the last writes before it, and the new
//! primary's clock can differ from the old one's. A key can then regain up to one burst (the
//! admissions the lost writes recorded) plus `R × skew` (the refill a clock ahead by `skew`
//! credits). The scripts are not replicated either: the first call after a failover reloads
//! the script, once.

mod all_of;
mod error;
mod failure;
mod keys;
mod leased;
mod limiter;
mod reply;
mod reserve;
mod script;

pub use all_of::{AllOfFailurePolicy, RedisAllOf, RedisAllOfBuilder, MAX_LIMITS};
pub use error::{BuildError, RedisError, Unavailable, UnavailableKind};
pub use failure::{FailurePolicy, Stats};
pub use keys::{KeyTooLong, MAX_KEY_LEN, MAX_PREFIX_LEN};
pub use leased::{LeaseStats, LeasedBucket, LeasedBucketBuilder, DEFAULT_LIFETIME};
pub use limiter::{
    Lease, RedisLimiter, RedisLimiterBuilder, DEFAULT_BREAKER_THRESHOLD, DEFAULT_COOL_DOWN,
    DEFAULT_TIMEOUT, MAX_WAIT,
};
pub use reserve::RedisReservation;
pub use script::RedisAlgorithm;
#[doc(hidden)]
pub use script::{all_of_script_source, script_source};

/// The `redis` client crate this backend is built on (1.x, from 1.2.4, with its `tokio-comp`,
/// `connection-manager`, `cluster-async` and `script` features on), re-exported so that the
/// connections handed to [`RedisLimiter::builder`] and [`LeasedBucket::builder`] come from the
/// same release the backend was compiled against.
///
/// A connection is accepted if it implements this release's `redis::aio::ConnectionLike` (a
/// `ConnectionManager`, a `MultiplexedConnection`, a `cluster_async::ClusterConnection`). An
/// application that also depends on `redis` directly gets the same crate, and may use its own
/// `redis::...` paths, as long as its requirement allows the 1.x release cargo picks for both
/// (`redis = "1.2.4"` or any later 1.x); with a `redis` of another major version, its connections
/// are of another crate and are refused at compile time. Using this re-export avoids the question.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use tollgate::keyed::TokenBucketKeys;
/// use tollgate::redis::client::{aio::ConnectionManagerConfig, Client};
/// use tollgate::redis::{FailurePolicy, RedisLimiter};
/// use tollgate::Quota;
/// // A lazy connection manager connects on the first call, so building needs no server.
/// let conn = Client::open("redis://127.0.0.1:6379/")?
///     .get_connection_manager_lazy(ConnectionManagerConfig::new())?;
/// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(10)?)
///     .prefix("api")
///     .build(FailurePolicy::Closed)?;
/// assert_eq!(limiter.key_name("client-7")?, b"api:{client-7}:tb");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
pub use ::redis as client;

/// The reply decoder, exposed for the `redis_reply` fuzz target; not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    use crate::outcome::{Admitted, Denied, Scheduled};

    use super::Unavailable;

    /// Decodes `value` as an admission's reply with spans of `tick` ns.
    pub fn decode_outcome(
        value: &::redis::Value,
        tick: u64,
    ) -> Result<Result<Admitted, Denied>, Unavailable> {
        super::reply::decode(value).map(|r| r.outcome(tick))
    }

    /// Decodes `value` as a scheduling's reply with spans of `tick` ns.
    pub fn decode_scheduled(
        value: &::redis::Value,
        tick: u64,
    ) -> Result<Result<Scheduled, Denied>, Unavailable> {
        super::reply::decode(value).map(|r| r.scheduled(tick))
    }
}
