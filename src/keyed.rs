//! One limit per key (a user, an IP address, an API token), with bounded memory and lossless,
//! automatic clean-up of idle keys.
//!
//! ```
//! use tollgate::keyed::KeyedLimiter;
//! use tollgate::{ManualClock, Quota};
//!
//! // Each client gets 2 requests a second, bursts of 2.
//! let limiter: KeyedLimiter<String, _, _> = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
//! assert!(limiter.check_key("alice").is_ok());
//! assert!(limiter.check_key("alice").is_ok());
//! assert!(limiter.check_key("alice").is_err()); // alice is out of tokens
//! assert!(limiter.check_key("bob").is_ok()); // bob is not
//! assert_eq!(limiter.len(), 2);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # What a key costs
//!
//! Every key shares one policy (the constants derived from the [`Quota`]); a key costs only its
//! state (one `AtomicU64` for most algorithms, see the table below), plus its own size and the
//! map's bookkeeping: a hash-table slot of `size_of::<(K, State)>()` bytes (the key beside its
//! state, padded to their alignment: 16 bytes for a `u64` key and one word, 32 for an `IpAddr`) and
//! one control byte, in tables kept at most 7/8 full and grown by doubling, plus whatever the key
//! owns on the heap (a `String`'s bytes). Measured with `u64` keys
//! (`tests/keyed_spray.rs`), 100 000 keys held add about 24 bytes each to the resident set. The map is a
//! `DashMap<K, AtomicU64, ahash::RandomState>`: a fixed, power-of-two number of shards, each a
//! read-write lock around a hash table, hashed with a per-map random key so that clients cannot
//! choose keys that collide.
//!
//! The algorithm run per key is a type parameter, one of the marker types of this module (the
//! [`Algorithm`] trait is sealed):
//!
//! | marker | per key | state per key | a key is forgotten when |
//! | --- | --- | --- | --- |
//! | [`TokenBucketKeys`] (the default) | the [token bucket](crate::token_bucket): bursts up to C, then R per second | 8 bytes | its bucket is full again (`tat <= now`) |
//! | [`LeakyMeterKeys`] | the [leaky meter](crate::leaky::meter), strict: admitted only when the key's virtual queue is empty | 8 bytes | its queue is empty again |
//! | [`FixedWindowKeys`] | the [fixed window](crate::window::fixed): N per window, windows on the clock's epoch | 8 bytes | its window is over |
//! | [`SlidingWindowCounterKeys`] | the one-word [sliding window counter](crate::window::sliding_counter) | 8 bytes | both windows it counts are over |
//! | [`SlidingWindowLogKeys`] | the exact [sliding window log](crate::window::sliding_log) | 24 bytes + 8 N on the heap | its newest admission has left the window |
//! | [`Tiered<A>`](Tiered) | any of the above, its quota picked per key from up to 256 tiers ([`KeyedLimiter::with_tiers`]) | A's state + 1 byte, padded (16 bytes for the one-word ones) | as for A |
//!
//! [`KeyedLimiter::new`] and [`KeyedLimiter::with_clock`] build the default;
//! [`KeyedLimiter::with_algorithm`] builds any of them, refusing a quota the algorithm cannot
//! enforce with the direct limiter's [`QuotaError`]. The `k`-sub-window counter is not offered per
//! key (its state is `k + 1` words and a history protocol meant for one hot limiter).
//!
//! # Every key starts fresh
//!
//! A key the limiter has never seen, and a key it has forgotten, get the same state: a full bucket,
//! an empty queue, a window with nothing in it. That is what makes forgetting lossless (below). The
//! quota's initial fill ([`Quota::with_initial`]) is therefore not used by a keyed limiter: it
//! applies to direct limiters only.
//!
//! # Eviction
//!
//! A key whose state is indistinguishable from a fresh one (a full bucket: `tat <= now`; an empty
//! virtual queue: drain time `<= now`) can be removed without changing any decision. The limiter
//! removes such keys
//!
//! - automatically, amortized over new keys: after every `max(256, len / 2)` new keys (or refused
//!   ones, see below), the thread that inserted the last one sweeps the map, one shard at a time
//!   under that shard's write lock, removing every key that is fresh at its reading: at most two key
//!   checks per new key, amortized, and no background thread;
//! - on demand, with [`KeyedLimiter::retain_recent`] (and [`KeyedLimiter::shrink_to_fit`] to give the
//!   freed memory back);
//! - on a schedule, if you want one, by a background thread: [`KeyedLimiter::spawn_sweeper`].
//!
//! An admission on a known key runs its compare-and-swap while holding the read lock of the key's
//! shard; an eviction decides, and removes, under the same shard's write lock, re-reading the word
//! there. The lock makes the two exclusive: either the admission's write happened before the
//! eviction looked (and the eviction sees a bucket that is not full, and keeps the key), or the
//! eviction happened first and the admission finds no key, and creates it afresh, full, which is the
//! state that was removed. No admission is ever lost, and none is ever granted twice.
//!
//! **Clocks that step backwards across an eviction.** A full bucket is "full as of its last
//! reading"; a reading earlier than that would see it less than full. To keep forgetting from ever
//! creating tokens, the limiter remembers the latest reading any eviction used (the *floor*), and a
//! key created afresh is fresh as of `max(reading, floor)`: identical to a never-used state at
//! readings from then on, and at earlier readings admitting no more than any state that could have
//! been forgotten. Per algorithm: a bucket full as of it (short of full before it), a queue empty as
//! of it; a fixed window whose previous window is full (nothing admitted before the floor's
//! window); a sliding counter whose two previous windows are full; a log of N entries that leave
//! the window exactly at the floor. So: decisions at readings at or after the latest eviction's
//! reading are exactly those of a limiter that never evicts; a reading earlier than that may be
//! refused where a never-evicting limiter would admit, never the reverse.
//!
//! **A reading from the future.** An eviction never judges at a reading ahead of the limiter's
//! own clock: [`KeyedLimiter::retain_recent_at`] and every automatic sweep forget as of
//! `min(reading, clock.now())`. So the floor never passes the clock's reading at the latest
//! eviction, and a wrong, far-future timestamp passed to an `_at` method can use up its own key
//! (as it would a direct limiter) but cannot lock the other keys out: without this bound, one
//! eviction at `u64::MAX` would leave every key created afterwards empty until 2^62 ns (146
//! years). The bound: a request is refused because of an eviction only when its reading lags the
//! clock's reading `f` at some eviction, as if its key had been used to the limit at `f`, so it is
//! admitted again by `f` at the latest (a bucket's n tokens are back by `f - (C - n) / R`); for
//! readings taken from the limiter's clock, the lag is the time between taking the reading and
//! using it. Readings passed to `_at` methods must therefore come from the limiter's clock (a
//! [`ManualClock`](crate::ManualClock) driven through `_at` readings must be moved along with
//! them, or evictions judge at its older reading and forget less).
//!
//! # Bounded memory
//!
//! The map never holds more than [`KeyedLimiter::with_max_keys`] keys (default 1 048 576). A new
//! key reserves its place in an atomic count under its shard's write lock, before it is inserted, and
//! gives it back only after it is removed, so the bound holds exactly under any concurrency, and two
//! threads inserting the same new key create one state and count both admissions. When every place
//! is held by a key that is still active (not full), the limiter first sweeps (if a sweep is due),
//! then gives the new key its [`Overflow`] policy: [`Overflow::Refuse`] (the default) answers
//! [`KeyedError::TooManyKeys`]; [`Overflow::Shared`] limits every such request by one shared bucket
//! with its own quota. Room is checked before the key's own state is looked at, so on a full map
//! the answer always says why (no room, never a denial of a key that holds no place), and nothing
//! is built for a newcomer that finds none (a sliding window log's ring is 8 N bytes). No active key's state is ever reset to make room. Sweeps run on their
//! schedule, not on every refusal (a map full of active keys would otherwise be scanned on every
//! request from a newcomer): a key that has become fresh since the last sweep holds its place until
//! the next one, so for up to `max(256, len / 2)` new keys a full map may refuse a newcomer that a
//! sweep would have made room for.
//!
//! # Memory ordering
//!
//! A key's state is only ever touched under its shard's lock (a read lock for decisions, the write
//! lock for inserting, judging freshness and removing); the lock's release and acquire order an
//! admission against an eviction, as described above. Within the read lock, decisions race each
//! other exactly as on the direct limiter: a one-word state publishes nothing but itself, so every
//! access to it is `Relaxed`; a sliding window log per key runs the direct log's claim protocol,
//! with its `Acquire`/`AcqRel` orderings and their reasons (see [`crate::window::sliding_log`]). An
//! admission is not a synchronization point between threads: do not use it to publish other data.

mod algorithm;
mod store;

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
#[cfg(not(tollgate_loom))]
use std::sync::{Arc, Weak};
#[cfg(not(tollgate_loom))]
use std::thread;
#[cfg(not(tollgate_loom))]
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::outcome::{AcquireError, Admitted, Denied, InsufficientCapacity};
use crate::quota::{Quota, QuotaError};
#[cfg(not(tollgate_loom))]
use crate::sync::{lock, Condvar, Mutex};
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use store::{Slot, Store};

/// The default bound on the number of keys: 2^20.
const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// The most tiers a tiered limiter accepts: a key stores its tier in one byte.
const MAX_TIERS: usize = 256;

/// The fewest new keys between two automatic sweeps (fewer when the bound itself is smaller).
const MIN_SWEEP_EVERY: usize = 256;

use algorithm::sealed::{Held, TieredPolicy, TokenBucketPolicy};
pub use algorithm::{
    Algorithm, FixedWindowKeys, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys,
    Tiered, TokenBucketKeys,
};

/// What a [`KeyedLimiter`] does with a new key when every place is taken by an active key.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter, Overflow};
/// use tollgate::{ManualClock, Quota};
///
/// let refusing: KeyedLimiter<u32, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
///     .with_max_keys(1);
/// refusing.check_key(&1).unwrap();
/// assert!(matches!(refusing.check_key(&2), Err(KeyedError::TooManyKeys(_))));
///
/// let sharing: KeyedLimiter<u32, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
///     .with_max_keys(1)
///     .with_overflow(Overflow::Shared(Quota::per_second(2)?))?;
/// sharing.check_key(&1).unwrap();
/// assert!(sharing.check_key(&2).is_ok()); // the shared bucket's first token
/// assert!(sharing.check_key(&3).is_ok()); // its second
/// assert!(sharing.check_key(&4).is_err()); // shared: 2 per second for all newcomers together
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Refuse the request with [`KeyedError::TooManyKeys`] (the default).
    #[default]
    Refuse,
    /// Limit every request that finds no room by one shared limiter of the same algorithm, with
    /// this quota (its own capacity; it starts full).
    Shared(Quota),
}

/// A new key found every place taken by an active key, under [`Overflow::Refuse`]: not a rate
/// decision about the key, so there is no `retry_after`; places free up as active keys go idle.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter, TooManyKeys};
/// use tollgate::{ManualClock, Quota};
/// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
///     .with_max_keys(0);
/// assert_eq!(limiter.check_key(&7), Err(KeyedError::TooManyKeys(TooManyKeys { max_keys: 0 })));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyKeys {
    /// The limiter's bound on the number of keys.
    pub max_keys: usize,
}

impl fmt::Display for TooManyKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no room for a new key: all {} places are held by active keys",
            self.max_keys
        )
    }
}

impl std::error::Error for TooManyKeys {}

/// Why a [`KeyedLimiter`] did not admit a request.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter};
/// use tollgate::{ManualClock, Quota};
/// let limiter: KeyedLimiter<String, _, _> = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
/// match limiter.check_key_n("k", 3) {
///     Err(KeyedError::InsufficientCapacity(e)) => assert_eq!(e.capacity, 2),
///     other => panic!("{other:?}"),
/// }
/// limiter.check_key_n("k", 2).unwrap();
/// let err = limiter.check_key("k").unwrap_err();
/// assert_eq!(err.denied().map(|d| d.retry_after().as_millis()), Some(500));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// Non-exhaustive: kinds of refusal will be added (a shared backend's failures), so a `match`
/// outside this crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedError {
    /// Not now; see [`Denied::retry_after`].
    Denied(Denied),
    /// Never: more than the capacity was asked for.
    InsufficientCapacity(InsufficientCapacity),
    /// A new key found no room (see [`Overflow::Refuse`]).
    TooManyKeys(TooManyKeys),
}

impl KeyedError {
    /// The denial, if this is one.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert!(limiter.check_key_n(&1, 2).unwrap_err().denied().is_none()); // never, not "later"
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn denied(&self) -> Option<&Denied> {
        match self {
            KeyedError::Denied(d) => Some(d),
            KeyedError::InsufficientCapacity(_) | KeyedError::TooManyKeys(_) => None,
        }
    }
}

/// A direct limiter's refusal as a keyed one, so that code that consults both (a global cap in
/// front of per-client limits) answers with one error type and `?`.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter};
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// // 5 a second per client, 3 a second for all clients together.
/// let per_client: KeyedLimiter<u32, _, _> =
///     KeyedLimiter::with_clock(Quota::per_second(5)?, ManualClock::new());
/// let global = TokenBucket::with_clock(Quota::per_second(3)?, ManualClock::new());
/// let admit = |client: u32, n: u64| -> Result<(), KeyedError> {
///     global.peek_n(n)?; // refuse early, taking nothing, when the global cap is out
///     per_client.check_key_n(&client, n)?;
///     global.try_acquire_n(n)?; // an AcquireError, converted
///     Ok(())
/// };
/// assert!(admit(1, 2).is_ok());
/// assert!(matches!(admit(2, 2), Err(KeyedError::Denied(_)))); // only 1 left globally
/// assert!(matches!(admit(3, 4), Err(KeyedError::InsufficientCapacity(_)))); // never, globally
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
impl From<AcquireError> for KeyedError {
    fn from(e: AcquireError) -> KeyedError {
        match e {
            AcquireError::Denied(d) => KeyedError::Denied(d),
            AcquireError::InsufficientCapacity(e) => KeyedError::InsufficientCapacity(e),
        }
    }
}

impl From<Denied> for KeyedError {
    fn from(d: Denied) -> KeyedError {
        KeyedError::Denied(d)
    }
}

impl From<InsufficientCapacity> for KeyedError {
    fn from(e: InsufficientCapacity) -> KeyedError {
        KeyedError::InsufficientCapacity(e)
    }
}

impl From<TooManyKeys> for KeyedError {
    fn from(e: TooManyKeys) -> KeyedError {
        KeyedError::TooManyKeys(e)
    }
}

impl fmt::Display for KeyedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedError::Denied(d) => d.fmt(f),
            KeyedError::InsufficientCapacity(e) => e.fmt(f),
            KeyedError::TooManyKeys(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for KeyedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KeyedError::Denied(d) => Some(d),
            KeyedError::InsufficientCapacity(e) => Some(e),
            KeyedError::TooManyKeys(e) => Some(e),
        }
    }
}

/// The shared limiter of [`Overflow::Shared`].
struct Shared<A: Algorithm> {
    policy: A::Policy,
    quota: Quota,
    state: CachePadded<A::State>,
}

/// What an attempt to create a key under its write lock came to.
enum Created {
    /// Decided: `true` when a key was inserted.
    Done(Result<Admitted, KeyedError>, bool),
    /// Vacant, and no place left.
    Full,
}

/// The function that picks a new key's tier.
type Pick<K> = Box<dyn Fn(&K) -> usize + Send + Sync>;

/// A rate limiter with one state per key, bounded memory and lossless eviction of idle keys.
///
/// `K` is the key type: lookups take any borrowed form of it (`&str` for `String` keys). `A` is the
/// algorithm run per key ([`TokenBucketKeys`], the default); `C` the clock. See the
/// [module docs](self) for eviction, the memory bound and the protocol that makes them lossless.
///
/// # Memory ordering
///
/// Per key, admissions are linearizable exactly as a direct limiter's are: each takes effect at one
/// instant in a single total order, and no two callers receive the same token, however the key's
/// admissions race its eviction and re-creation. No ordering is promised between different keys.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::Quota;
///
/// // 10 requests a second per client IP, at most 100 000 clients tracked.
/// let limiter: KeyedLimiter<std::net::IpAddr> = KeyedLimiter::new(Quota::per_second(10)?)
///     .with_max_keys(100_000);
/// let ip = std::net::IpAddr::from([192, 0, 2, 1]);
/// assert_eq!(limiter.check_key(&ip)?.remaining(), 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedLimiter<K, A: Algorithm = TokenBucketKeys, C = MonotonicClock> {
    store: Store<K, A::State>,
    policy: A::Policy,
    /// The quota of each tier (one, unless tiered).
    quotas: Box<[Quota]>,
    /// The tier of a new key, for a tiered limiter.
    pick: Option<Pick<K>>,
    clock: C,
    max_keys: usize,
    overflow: Option<Shared<A>>,
    /// Keys inserted plus places reserved for keys being inserted, minus keys removed: never below
    /// the map's length, never above `max_keys`. Moved by read-modify-writes only.
    keys: CachePadded<AtomicUsize>,
    /// The latest reading any eviction used, in nanoseconds: a key created afresh is fresh as of
    /// `max(reading, floor)`. Only grows.
    floor: AtomicU64,
    /// New keys (and refused new keys) since the last sweep started.
    since_sweep: AtomicUsize,
    /// Held by the thread running an automatic sweep, so that only one runs at a time.
    sweeping: AtomicBool,
    evictions: AtomicU64,
    overflowed: AtomicU64,
    /// The bells of the sweeper threads started on this limiter, rung when it is dropped so that
    /// they end at once rather than at their next tick (or never, for `Duration::MAX`).
    #[cfg(not(tollgate_loom))]
    sweepers: Mutex<Vec<Weak<Bell>>>,
}

impl<K: Hash + Eq> KeyedLimiter<K, TokenBucketKeys, MonotonicClock> {
    /// A keyed token bucket for `quota` per key, on the default clock, with the default bound
    /// (2^20 keys) and overflow policy ([`Overflow::Refuse`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter: tollgate::keyed::KeyedLimiter<String> =
    ///     tollgate::keyed::KeyedLimiter::new(tollgate::Quota::per_minute(60)?);
    /// assert_eq!(limiter.remaining_key("anyone"), 60);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(quota: Quota) -> Self {
        KeyedLimiter::with_clock(quota, MonotonicClock::new())
    }
}

impl<K: Hash + Eq, C: Clock> KeyedLimiter<K, TokenBucketKeys, C> {
    /// A keyed token bucket for `quota` per key, reading time from `clock`. Every key starts full (the
    /// quota's initial fill is not used; see the [module docs](self)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, TokenBucketKeys};
    /// use tollgate::{ManualClock, Quota};
    /// let limiter = KeyedLimiter::<u64, TokenBucketKeys, _>::with_clock(Quota::per_second(3)?, ManualClock::new());
    /// assert_eq!(limiter.check_key(&42)?.remaining(), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_clock(quota: Quota, clock: C) -> Self {
        // The token bucket accepts every quota.
        let policy = TokenBucketPolicy(crate::token_bucket::Policy::new(&quota));
        KeyedLimiter::build(policy, Box::new([quota]), None, clock)
    }
}

impl<K: Hash + Eq, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// A keyed limiter running algorithm `A` (named by the type annotation) for `quota` per key,
    /// reading time from `clock`. Every key starts fresh (a full bucket, an empty queue, an empty
    /// window; the quota's initial fill is not used).
    ///
    /// # Errors
    ///
    /// The errors of the direct limiter's constructor for a quota `A` cannot enforce: for the
    /// window algorithms, a capacity or initial fill other than the count, a period over 2^62 ns, a
    /// count beyond the window's budget, a log longer than
    /// [`MAX_LOG`](crate::window::sliding_log::MAX_LOG). The token bucket and the leaky meter accept
    /// every quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{FixedWindowKeys, KeyedLimiter, LeakyMeterKeys, TokenBucketKeys};
    /// use tollgate::{ManualClock, Quota};
    /// let q = Quota::per_second(5)?;
    /// let buckets: KeyedLimiter<u8, TokenBucketKeys, _> = KeyedLimiter::with_algorithm(q, ManualClock::new())?;
    /// let meters: KeyedLimiter<u8, LeakyMeterKeys, _> = KeyedLimiter::with_algorithm(q, ManualClock::new())?;
    /// assert_eq!(buckets.check_key_n(&1, 5)?.remaining(), 0); // a burst of 5
    /// assert!(meters.check_key_n(&1, 5).is_ok()); // 5 at once from an empty queue, then nothing
    /// assert!(meters.check_key(&1).is_err());
    /// // A window has no burst size of its own.
    /// let err = KeyedLimiter::<u8, FixedWindowKeys, _>::with_algorithm(q.with_capacity(6)?, ManualClock::new());
    /// assert_eq!(err.unwrap_err().field(), "capacity");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_algorithm(quota: Quota, clock: C) -> Result<Self, QuotaError> {
        let policy = A::policy(&quota)?;
        Ok(KeyedLimiter::build(policy, Box::new([quota]), None, clock))
    }

    /// The limiter for `policy`: what every public constructor builds.
    fn build(policy: A::Policy, quotas: Box<[Quota]>, pick: Option<Pick<K>>, clock: C) -> Self {
        KeyedLimiter {
            store: Store::new(),
            policy,
            quotas,
            pick,
            clock,
            max_keys: DEFAULT_MAX_KEYS,
            overflow: None,
            keys: CachePadded::new(AtomicUsize::new(0)),
            floor: AtomicU64::new(0),
            since_sweep: AtomicUsize::new(0),
            sweeping: AtomicBool::new(false),
            evictions: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
            #[cfg(not(tollgate_loom))]
            sweepers: Mutex::new(Vec::new()),
        }
    }

    /// Bounds the number of keys held at once (any value is accepted; 0 sends every key to the
    /// overflow policy).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<u32> = KeyedLimiter::new(tollgate::Quota::per_second(1)?).with_max_keys(10);
    /// assert_eq!(limiter.max_keys(), 10);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[must_use]
    pub fn with_max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Chooses what a new key gets when every place is held by an active key.
    ///
    /// # Errors
    ///
    /// For [`Overflow::Shared`], the errors of [`KeyedLimiter::with_algorithm`] for its quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Overflow};
    /// use tollgate::Quota;
    /// let limiter: KeyedLimiter<u32> = KeyedLimiter::new(Quota::per_second(10)?)
    ///     .with_max_keys(1000)
    ///     .with_overflow(Overflow::Shared(Quota::per_second(100)?))?;
    /// assert_eq!(limiter.overflow(), Overflow::Shared(Quota::per_second(100)?));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_overflow(mut self, overflow: Overflow) -> Result<Self, QuotaError> {
        self.overflow = match overflow {
            Overflow::Refuse => None,
            Overflow::Shared(quota) => {
                let policy = A::policy(&quota)?;
                let state = A::fresh(&policy, 0, self.clock.now());
                Some(Shared {
                    policy,
                    quota,
                    state: CachePadded::new(state),
                })
            }
        };
        Ok(self)
    }

    /// Takes one token for `key` now.
    ///
    /// # Errors
    ///
    /// [`KeyedError::Denied`] when the key (or, for a new key that found no room, the shared
    /// overflow limiter) has no token now; [`KeyedError::TooManyKeys`] for a new key that found no
    /// room under [`Overflow::Refuse`], whatever the key's own state would have answered.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<String> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// assert!(limiter.check_key("a").is_ok());
    /// assert!(limiter.check_key("a").is_err());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn check_key<Q>(&self, key: &Q) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_key_n_with(key, 1, || self.clock.now())
    }

    /// Takes one token for `key` as of `now`, a reading of this limiter's clock.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::check_key`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert!(limiter.check_key_at(&1, Nanos::new(0)).is_ok());
    /// assert!(limiter.check_key_at(&1, Nanos::new(999_999_999)).is_err());
    /// assert!(limiter.check_key_at(&1, Nanos::new(1_000_000_000)).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn check_key_at<Q>(&self, key: &Q, now: Nanos) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_key_n_at(key, 1, now)
    }

    /// Takes `n` tokens for `key` now, all or none. `n = 0` is a query that always succeeds and
    /// never creates the key.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::check_key`], and [`KeyedError::InsufficientCapacity`] when `n` exceeds
    /// the capacity (of the shared overflow limiter, for a request sent to it).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<String> = KeyedLimiter::new(tollgate::Quota::per_second(10)?);
    /// assert_eq!(limiter.check_key_n("a", 4)?.remaining(), 6);
    /// assert!(limiter.check_key_n("a", 7).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn check_key_n<Q>(&self, key: &Q, n: u64) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_key_n_with(key, n, || self.clock.now())
    }

    /// Takes `n` tokens for `key` as of `now`, all or none.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<String, _, _> = KeyedLimiter::with_clock(Quota::per_second(10)?, ManualClock::new());
    /// assert!(limiter.check_key_n_at("a", 10, Nanos::new(0)).is_ok());
    /// let err = limiter.check_key_n_at("a", 5, Nanos::new(0)).unwrap_err();
    /// assert_eq!(err.denied().unwrap().retry_after().as_millis(), 500);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn check_key_n_at<Q>(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.check_key_n_with(key, n, || now)
    }

    /// A request for `n` on `key` at the reading `now()` gives. The reading is taken once the
    /// key's state has been found (under the shard's read lock, which changes nothing: any reading
    /// is as good as any other taken during the call): with the clock, the lookup's memory accesses
    /// are then issued before the clock read rather than waiting behind it, which on a map larger
    /// than the caches is most of a check's cost.
    #[inline]
    fn check_key_n_with<Q>(
        &self,
        key: &Q,
        n: u64,
        now: impl Fn() -> Nanos,
    ) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // A known key: the decision (a compare-and-swap) runs while the shard's read lock is held,
        // so no eviction of this key can run until it is done (see the module docs).
        let known = self
            .store
            .with_read(key, |state| A::acquire(&self.policy, state, now(), n));
        match known {
            Some(outcome) => outcome,
            // A query never creates a key.
            None if n == 0 => self.peek_key_n_at(key, 0, now()),
            None => self.check_new(key, n, now()),
        }
    }

    /// The slow path: `key` was not there a moment ago. Creates it under its shard's write lock (or
    /// admits on it, if another thread created it meanwhile), sweeping first if the map is full and
    /// a sweep is due; failing that, the overflow policy.
    #[cold]
    fn check_new<Q>(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        for attempt in 0..2 {
            let created = self.store.with_entry(key.to_owned(), |slot| match slot {
                // Another thread created it between our lookup and our write lock.
                Slot::Occupied(state) => (
                    None,
                    Created::Done(A::acquire(&self.policy, state, now, n), false),
                ),
                // Room first: on a full map every newcomer gets the overflow policy, whatever its
                // own state would answer (a reading below the floor would be denied: the answer
                // must say there is no room, not "later"), and no state is built for it (a log
                // is 8 N bytes).
                Slot::Vacant(_) if !self.has_room() => (None, Created::Full),
                Slot::Vacant(key) => {
                    let tier = self.tier_of(key);
                    match A::create(&self.policy, tier, self.fresh_at(now), now, n) {
                        // The place is reserved under the write lock, so a second thread creating
                        // the same key waits for the lock and then finds it occupied: one
                        // reservation, one state, both admissions counted. (Another key may have
                        // taken the last place since the check above: then the state just built
                        // is dropped, and the request gets the overflow policy.)
                        (Some(state), outcome) => {
                            if self.reserve() {
                                (Some(state), Created::Done(outcome, true))
                            } else {
                                (None, Created::Full)
                            }
                        }
                        // A request that writes nothing leaves the key as if never seen: no need
                        // to hold a place for it.
                        (None, outcome) => (None, Created::Done(outcome, false)),
                    }
                }
            });
            match created {
                Created::Done(outcome, inserted) => {
                    if inserted {
                        self.note_new_key(now);
                    }
                    return outcome;
                }
                // No room: if a sweep is due, run it (holding no lock) and try once more.
                Created::Full => {
                    if attempt > 0 || !self.note_new_key(now) {
                        break;
                    }
                }
            }
        }
        self.overflow_take(n, now)
    }

    /// A request from a new key that found no room.
    #[cold]
    fn overflow_take(&self, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
        // Relaxed: a statistic; it orders nothing.
        self.overflowed.fetch_add(1, Ordering::Relaxed);
        match &self.overflow {
            None => Err(KeyedError::TooManyKeys(TooManyKeys {
                max_keys: self.max_keys,
            })),
            Some(shared) => A::acquire(&shared.policy, &shared.state, now, n),
        }
    }

    /// Would `n` tokens for `key` be admitted now? Consumes nothing, writes nothing, creates no key.
    ///
    /// For a key not in the map, the answer is the one a request would get now, without a sweep:
    /// a fresh key's if there is room, else the overflow policy's.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<String> = KeyedLimiter::new(tollgate::Quota::per_second(3)?);
    /// assert!(limiter.peek_key_n("a", 3).is_ok());
    /// assert!(limiter.peek_key_n("a", 3).is_ok()); // peeking takes nothing
    /// assert!(limiter.peek_key_n("a", 4).is_err());
    /// assert!(limiter.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn peek_key_n<Q>(&self, key: &Q, n: u64) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.peek_key_n_at(key, n, self.clock.now())
    }

    /// Would `n` tokens for `key` be admitted as of `now`? Consumes nothing and writes nothing.
    ///
    /// # Errors
    ///
    /// As [`KeyedLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// limiter.check_key_at(&1, Nanos::new(0)).unwrap();
    /// assert!(limiter.peek_key_n_at(&1, 1, Nanos::new(999_999_999)).is_err());
    /// assert!(limiter.peek_key_n_at(&1, 1, Nanos::new(1_000_000_000)).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn peek_key_n_at<Q>(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if let Some(outcome) = self.store.with_read(key, |state| {
            A::peek(&self.policy, Held::Known(state), now, n)
        }) {
            return outcome;
        }
        // A query, or room for the key (Relaxed: a snapshot of the count, as any answer about a key
        // not yet created is): a fresh key's answer.
        if n == 0 || self.has_room() {
            return A::peek(&self.policy, self.fresh_key(key, now), now, n);
        }
        match &self.overflow {
            None => Err(KeyedError::TooManyKeys(TooManyKeys {
                max_keys: self.max_keys,
            })),
            Some(shared) => A::peek(&shared.policy, Held::Known(&shared.state), now, n),
        }
    }

    /// `key`, not in the map, as a decision sees it: fresh as of `max(now, floor)`, in the tier it
    /// would get.
    fn fresh_key<Q>(&self, key: &Q, now: Nanos) -> Held<'static, A::State>
    where
        K: Borrow<Q>,
        Q: ToOwned<Owned = K> + ?Sized,
    {
        let tier = match &self.pick {
            None => 0,
            Some(_) => self.tier_of(&key.to_owned()),
        };
        Held::Fresh {
            tier,
            at: self.fresh_at(now),
        }
    }

    /// Whole tokens `key` has now (the capacity for a key not in the map).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<String> = KeyedLimiter::new(tollgate::Quota::per_second(8)?);
    /// limiter.check_key_n("a", 3).unwrap();
    /// assert_eq!(limiter.remaining_key("a"), 5);
    /// assert_eq!(limiter.remaining_key("b"), 8);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn remaining_key<Q>(&self, key: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.remaining_key_at(key, self.clock.now())
    }

    /// Whole tokens `key` has as of `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
    /// limiter.check_key_n_at(&1, 2, Nanos::new(0)).unwrap();
    /// assert_eq!(limiter.remaining_key_at(&1, Nanos::new(500_000_000)), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn remaining_key_at<Q>(&self, key: &Q, now: Nanos) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        self.store
            .with_read(key, |state| {
                A::remaining(&self.policy, Held::Known(state), now)
            })
            .unwrap_or_else(|| A::remaining(&self.policy, self.fresh_key(key, now), now))
    }

    /// Removes every key whose state is indistinguishable from a fresh one now (a full bucket, an empty queue), and
    /// answers how many it removed. Lossless: see the [module docs](self).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{Clock, ManualClock, Quota};
    /// let clock = ManualClock::new();
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock.clone());
    /// limiter.check_key(&1).unwrap();
    /// assert_eq!(limiter.retain_recent(), 0); // key 1 is not full yet
    /// clock.advance(std::time::Duration::from_secs(1));
    /// assert_eq!(limiter.retain_recent(), 1);
    /// assert!(limiter.is_empty());
    /// assert!(limiter.check_key(&1).is_ok());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn retain_recent(&self) -> usize {
        self.retain_recent_at(self.clock.now())
    }

    /// Removes every key whose state is indistinguishable from a fresh one as of `now`, or as of
    /// the clock's reading if `now` is ahead of it: an eviction never judges ahead of the clock, so
    /// a wrong, far-future reading cannot lock other keys out (see the [module docs](self)).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{Clock, ManualClock, Nanos, Quota};
    /// let clock = ManualClock::starting_at(Nanos::new(1_000_000_000)); // reads 1 s
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock.clone());
    /// limiter.check_key_at(&1, Nanos::new(0)).unwrap();
    /// assert_eq!(limiter.retain_recent_at(Nanos::new(999_999_999)), 0);
    /// assert_eq!(limiter.retain_recent_at(Nanos::new(1_000_000_000)), 1);
    /// assert_eq!(limiter.evictions(), 1);
    ///
    /// // Key 2 is used at 1 s; a reading years ahead judges at the clock's 1 s and keeps it.
    /// limiter.check_key_at(&2, clock.now()).unwrap();
    /// assert_eq!(limiter.retain_recent_at(Nanos::new(u64::MAX)), 0);
    /// assert!(limiter.check_key_at(&3, clock.now()).is_ok()); // a new key is not locked out
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn retain_recent_at(&self, now: Nanos) -> usize {
        // Never forget as of a reading ahead of the clock: a wrong, far-future reading would
        // otherwise raise the floor past every real reading, and every key created afresh would
        // be refused until then (see "A reading from the future" in the module docs).
        let now = now.min(self.clock.now());
        // The floor rises before any key is removed. Relaxed is enough: a thread that re-creates a
        // removed key does so under the shard's write lock, acquired after the sweep released it,
        // so this store happens before that thread's load of the floor.
        self.floor.fetch_max(now.clamped(), Ordering::Relaxed);
        // `is_fresh` is decided under the shard's write lock: no admission on the key is in flight.
        let removed = self
            .store
            .retain(|state| A::is_fresh(&self.policy, state, now));
        self.release(removed);
        // Relaxed: a statistic.
        self.evictions.fetch_add(
            u64::try_from(removed).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        removed
    }

    /// Gives the memory of removed keys back, as far as the map's shards allow.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let clock = ManualClock::starting_at(Nanos::new(1_000_000_000)); // reads 1 s
    /// let limiter: KeyedLimiter<u32, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock);
    /// for k in 0..1000 {
    ///     limiter.check_key_at(&k, Nanos::new(0)).unwrap();
    /// }
    /// limiter.retain_recent_at(Nanos::new(1_000_000_000));
    /// limiter.shrink_to_fit();
    /// assert!(limiter.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn shrink_to_fit(&self) {
        self.store.shrink_to_fit();
    }

    /// Keys held now (including, for an instant, places reserved by keys being inserted).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// limiter.check_key(&1).unwrap();
    /// limiter.check_key(&1).unwrap_err();
    /// assert_eq!(limiter.len(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn len(&self) -> usize {
        // Relaxed: a snapshot of a count that other threads move.
        self.keys.load(Ordering::Relaxed)
    }

    /// Whether no key is held.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// assert!(limiter.is_empty());
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `key` is held (it has been seen and not forgotten).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<String> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// limiter.check_key("a").unwrap();
    /// assert!(limiter.contains_key("a"));
    /// assert!(!limiter.contains_key("b"));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn contains_key<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.store.contains_key(key)
    }

    /// The bound on the number of keys.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// assert_eq!(limiter.max_keys(), 1 << 20);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn max_keys(&self) -> usize {
        self.max_keys
    }

    /// The overflow policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Overflow};
    /// let limiter: KeyedLimiter<u8> = KeyedLimiter::new(tollgate::Quota::per_second(1)?);
    /// assert_eq!(limiter.overflow(), Overflow::Refuse);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn overflow(&self) -> Overflow {
        match &self.overflow {
            None => Overflow::Refuse,
            Some(shared) => Overflow::Shared(shared.quota),
        }
    }

    /// Keys removed by eviction so far (automatic and on demand).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let clock = ManualClock::starting_at(Nanos::new(2_000_000_000)); // reads 2 s
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, clock);
    /// limiter.check_key_at(&1, Nanos::new(0)).unwrap();
    /// limiter.retain_recent_at(Nanos::new(2_000_000_000));
    /// assert_eq!(limiter.evictions(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn evictions(&self) -> u64 {
        // Relaxed: a statistic.
        self.evictions.load(Ordering::Relaxed)
    }

    /// Requests from new keys that found no room and got the overflow policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
    ///     .with_max_keys(1);
    /// limiter.check_key(&1).unwrap();
    /// limiter.check_key(&2).unwrap_err();
    /// assert_eq!(limiter.overflowed(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn overflowed(&self) -> u64 {
        // Relaxed: a statistic.
        self.overflowed.load(Ordering::Relaxed)
    }

    /// The quota each key gets (a tiered limiter's first tier).
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(3)?;
    /// let limiter: tollgate::keyed::KeyedLimiter<u8> = tollgate::keyed::KeyedLimiter::new(q);
    /// assert_eq!(limiter.quota(), &q);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> &Quota {
        // Every constructor gives at least one quota.
        &self.quotas[0]
    }

    /// The quota of each tier: one, unless built by [`KeyedLimiter::with_tiers`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered};
    /// use tollgate::{ManualClock, Quota};
    /// let tiers = [Quota::per_second(1)?, Quota::per_second(10)?];
    /// let limiter: KeyedLimiter<u32, Tiered, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |user: &u32| usize::from(*user >= 1000), ManualClock::new())?;
    /// assert_eq!(limiter.tiers(), &tiers);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn tiers(&self) -> &[Quota] {
        &self.quotas
    }

    /// The clock this limiter reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{Clock, ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> =
    ///     KeyedLimiter::with_clock(Quota::per_second(3)?, ManualClock::starting_at(Nanos::new(4)));
    /// assert_eq!(limiter.clock().now(), Nanos::new(4));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The reading a key created afresh at `now` is fresh as of: `max(now, floor)`.
    #[inline]
    fn fresh_at(&self, now: Nanos) -> Nanos {
        // Relaxed: see `retain_recent_at`; callers creating a key hold its shard's write lock.
        let floor = self.floor.load(Ordering::Relaxed);
        Nanos::new(now.clamped().max(floor))
    }

    /// The tier of a new key: 0 unless tiered.
    fn tier_of(&self, key: &K) -> usize {
        self.pick.as_ref().map_or(0, |pick| pick(key))
    }

    /// Whether a place is left for a new key now (a snapshot: [`Self::reserve`] decides).
    #[inline]
    fn has_room(&self) -> bool {
        // Relaxed: a snapshot of the count, as in `peek_key_n_at`; the reservation that follows
        // is the read-modify-write that keeps the bound.
        self.keys.load(Ordering::Relaxed) < self.max_keys
    }

    /// Reserves a place for a new key, if one is left.
    fn reserve(&self) -> bool {
        // Relaxed: the count is one atomic moved only by read-modify-writes, whose total order is
        // all the bound needs; the map entries themselves are ordered by the shard locks.
        self.keys
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |k| {
                (k < self.max_keys).then_some(k + 1)
            })
            .is_ok()
    }

    /// Gives back `n` places (of removed keys, or of reservations not used).
    fn release(&self, n: usize) {
        if n > 0 {
            // Relaxed: as in `reserve`.
            self.keys.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// Counts a new key (or a refused one) towards the next sweep, and runs the sweep if it is due
    /// and no other thread is running one. Answers whether this call swept any key away.
    fn note_new_key(&self, now: Nanos) -> bool {
        // Relaxed: a heuristic trigger; an imprecise count only moves a sweep a little.
        let since = self.since_sweep.fetch_add(1, Ordering::Relaxed) + 1;
        let every = MIN_SWEEP_EVERY
            .min(self.max_keys)
            .max(self.len() / 2)
            .max(1);
        if since < every {
            return false;
        }
        // Acquire/Release pair the flag between successive sweepers; it guards only against
        // duplicated work (sweeps are safe to run concurrently), not any data.
        if self
            .sweeping
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // Relaxed: as above.
        self.since_sweep.store(0, Ordering::Relaxed);
        let removed = self.retain_recent_at(now);
        // Release: pairs with the Acquire of the next sweeper's compare-and-swap.
        self.sweeping.store(false, Ordering::Release);
        removed > 0
    }
}

#[cfg(not(tollgate_loom))]
impl<K, A, C> KeyedLimiter<K, A, C>
where
    K: Hash + Eq + Send + Sync + 'static,
    A: Algorithm,
    C: Clock + Send + Sync + 'static,
{
    /// Starts a background thread that runs [`KeyedLimiter::retain_recent`] every `every`, for
    /// users who want idle keys' memory given back on a schedule rather than only as new keys
    /// arrive (the automatic sweeps need no thread: see the [module docs](self)). The thread holds
    /// only a weak reference: it ends when the [`Sweeper`] is stopped or dropped, or as soon as the
    /// last `Arc` to the limiter is dropped (the limiter's drop wakes it, whatever `every` is; a
    /// sweep in progress finishes first). An `every` of zero is taken as one millisecond;
    /// `Duration::MAX` sweeps never, and the thread only waits to end.
    ///
    /// # Errors
    ///
    /// The operating system's error if it cannot start a thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::Quota;
    ///
    /// let limiter: Arc<KeyedLimiter<u64>> = Arc::new(KeyedLimiter::new(Quota::per_second(100)?));
    /// let sweeper = limiter.spawn_sweeper(Duration::from_secs(10))?;
    /// assert!(limiter.check_key(&7).is_ok());
    /// sweeper.stop(); // ends the thread and waits for it
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) -> std::io::Result<Sweeper> {
        let every = every.max(Duration::from_millis(1));
        let limiter = Arc::downgrade(self);
        let bell = Arc::new(Bell::default());
        let rung = Arc::clone(&bell);
        let thread = thread::Builder::new()
            .name("tollgate-sweeper".into())
            .spawn(move || {
                // The bell means stop (the handle, or the limiter's drop); a timeout means sweep.
                while !rung.wait(every) {
                    match limiter.upgrade() {
                        Some(limiter) => {
                            limiter.retain_recent();
                        }
                        None => return,
                    }
                }
            })?;
        // Registered after the thread started: a limiter dropped before this line cannot be, as
        // `self` is borrowed. Bells of sweepers already gone are dropped from the list here.
        let mut sweepers = lock(&self.sweepers);
        sweepers.retain(|bell| bell.strong_count() > 0);
        sweepers.push(Arc::downgrade(&bell));
        drop(sweepers);
        Ok(Sweeper {
            bell,
            thread: Some(thread),
        })
    }
}

/// The handle of a sweeper thread started by [`KeyedLimiter::spawn_sweeper`]: stopping or
/// dropping it ends the thread.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// let limiter: Arc<tollgate::keyed::KeyedLimiter<u8>> =
///     Arc::new(tollgate::keyed::KeyedLimiter::new(tollgate::Quota::per_second(1)?));
/// let sweeper = limiter.spawn_sweeper(Duration::from_millis(100))?;
/// drop(sweeper); // stops it too, and waits for it
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[cfg(not(tollgate_loom))]
#[derive(Debug)]
pub struct Sweeper {
    bell: Arc<Bell>,
    thread: Option<thread::JoinHandle<()>>,
}

/// What a sweeper thread waits on between sweeps: rung by its [`Sweeper`] handle to stop it, or by
/// its limiter's drop. A flag under a mutex, so that a ring before the thread waits is not lost.
#[cfg(not(tollgate_loom))]
#[derive(Debug, Default)]
struct Bell {
    rung: Mutex<bool>,
    wake: Condvar,
}

#[cfg(not(tollgate_loom))]
impl Bell {
    fn ring(&self) {
        *lock(&self.rung) = true;
        self.wake.notify_all();
    }

    /// Waits for the bell for up to `every` (any length: `Duration::MAX` waits for the bell
    /// only); answers whether it rang.
    fn wait(&self, every: Duration) -> bool {
        let rung = lock(&self.rung);
        let (rung, _) = self
            .wake
            .wait_timeout_while(rung, every, |rung| !*rung)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *rung
    }
}

/// Wakes the limiter's sweeper threads, which then find it gone and end.
#[cfg(not(tollgate_loom))]
impl<K, A: Algorithm, C> Drop for KeyedLimiter<K, A, C> {
    fn drop(&mut self) {
        let sweepers = self
            .sweepers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for bell in sweepers.drain(..).filter_map(|bell| bell.upgrade()) {
            bell.ring();
        }
    }
}

#[cfg(not(tollgate_loom))]
impl Sweeper {
    /// Ends the sweeper thread and waits for it (for at most one sweep in progress).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// let limiter: Arc<tollgate::keyed::KeyedLimiter<u8>> =
    ///     Arc::new(tollgate::keyed::KeyedLimiter::new(tollgate::Quota::per_second(1)?));
    /// limiter.spawn_sweeper(Duration::from_secs(1))?.stop();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop(mut self) {
        self.end();
    }

    /// Whether the sweeper thread has ended: after [`Sweeper::stop`], or soon after the last
    /// `Arc` of its limiter was dropped.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    /// let limiter: Arc<tollgate::keyed::KeyedLimiter<u8>> =
    ///     Arc::new(tollgate::keyed::KeyedLimiter::new(tollgate::Quota::per_second(1)?));
    /// let sweeper = limiter.spawn_sweeper(Duration::MAX)?;
    /// assert!(!sweeper.is_finished());
    /// drop(limiter); // wakes the thread, which ends
    /// let deadline = Instant::now() + Duration::from_secs(10);
    /// while !sweeper.is_finished() && Instant::now() < deadline {
    ///     std::thread::sleep(Duration::from_millis(1));
    /// }
    /// assert!(sweeper.is_finished());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        self.thread
            .as_ref()
            .map_or(true, thread::JoinHandle::is_finished)
    }

    fn end(&mut self) {
        // Wakes the thread at once, wherever it is in its wait.
        self.bell.ring();
        if let Some(thread) = self.thread.take() {
            // A sweep cannot panic (no panic is reachable from the limiter's API); if the thread
            // did, there is nothing left to stop.
            let _ = thread.join();
        }
    }
}

#[cfg(not(tollgate_loom))]
impl Drop for Sweeper {
    fn drop(&mut self) {
        self.end();
    }
}

impl<K: Hash + Eq, A: Algorithm, C: Clock> KeyedLimiter<K, Tiered<A>, C> {
    /// A keyed limiter running algorithm `A` with a quota chosen per key: `pick` is called with
    /// a new key (one the limiter does not hold) and answers the index of its tier in `tiers`; the
    /// key keeps that tier while it is held. An index past the end is taken as the last tier.
    ///
    /// A key that is forgotten (its state fresh again, see the [module docs](self)) is picked
    /// again when it returns, so a tier change (an upgraded customer) takes effect once the key has
    /// been idle long enough to be forgotten, never in the middle of its limit. A key costs one
    /// byte more, padded to its state's alignment: 16 bytes instead of 8 for the one-word
    /// algorithms. `pick` runs under the key's shard write lock: keep it short, and do not call
    /// the limiter from it.
    ///
    /// # Errors
    ///
    /// [`QuotaError::Tiers`] for no tiers or more than 256; the errors of
    /// [`KeyedLimiter::with_algorithm`] for any tier's quota.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Tiered, TokenBucketKeys};
    /// use tollgate::{ManualClock, Quota, QuotaError};
    ///
    /// #[derive(Clone, Hash, PartialEq, Eq)]
    /// struct ApiKey { id: u64, paid: bool }
    ///
    /// let tiers = [Quota::per_minute(60)?, Quota::per_minute(6000)?];
    /// let limiter: KeyedLimiter<ApiKey, Tiered<TokenBucketKeys>, _> =
    ///     KeyedLimiter::with_tiers(&tiers, |k: &ApiKey| usize::from(k.paid), ManualClock::new())?;
    /// assert_eq!(limiter.check_key(&ApiKey { id: 1, paid: false })?.remaining(), 59);
    /// assert_eq!(limiter.check_key(&ApiKey { id: 2, paid: true })?.remaining(), 5999);
    ///
    /// let none: Result<KeyedLimiter<u8, Tiered, ManualClock>, _> =
    ///     KeyedLimiter::with_tiers(&[], |_: &u8| 0, ManualClock::new());
    /// assert_eq!(none.unwrap_err(), QuotaError::Tiers { tiers: 0, max: 256 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_tiers(
        tiers: &[Quota],
        pick: impl Fn(&K) -> usize + Send + Sync + 'static,
        clock: C,
    ) -> Result<Self, QuotaError> {
        if tiers.is_empty() || tiers.len() > MAX_TIERS {
            return Err(QuotaError::Tiers {
                tiers: tiers.len(),
                max: MAX_TIERS,
            });
        }
        let policy = TieredPolicy(
            tiers
                .iter()
                .map(A::policy)
                .collect::<Result<Box<[_]>, QuotaError>>()?,
        );
        Ok(KeyedLimiter::build(
            policy,
            tiers.into(),
            Some(Box::new(pick)),
            clock,
        ))
    }
}

impl<K, A: Algorithm, C> fmt::Debug for KeyedLimiter<K, A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quotas", &self.quotas)
            // Relaxed: a snapshot for display.
            .field("keys", &self.keys.load(Ordering::Relaxed))
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow.as_ref().map(|s| s.quota))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn keys_created_after_an_eviction_are_full_as_of_the_floor() {
        let limiter: KeyedLimiter<u8, TokenBucketKeys, ManualClock> = KeyedLimiter::with_clock(
            Quota::per_second(10).unwrap(),
            ManualClock::starting_at(Nanos::new(2 * SEC)),
        );
        limiter.retain_recent_at(Nanos::new(2 * SEC));
        // A reading 300 ms before the floor sees a new key 3 tokens short of full.
        assert_eq!(
            limiter.remaining_key_at(&1, Nanos::new(2 * SEC - 3 * SEC / 10)),
            7
        );
        assert_eq!(limiter.remaining_key_at(&1, Nanos::new(2 * SEC)), 10);
        // And the floor never moves back.
        limiter.retain_recent_at(Nanos::new(SEC));
        assert_eq!(limiter.remaining_key_at(&1, Nanos::new(SEC)), 0);
    }

    #[test]
    fn reservations_stop_at_the_bound_and_release_gives_them_back() {
        let limiter: KeyedLimiter<u8, TokenBucketKeys, ManualClock> =
            KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), ManualClock::new())
                .with_max_keys(2);
        assert!(limiter.reserve());
        assert!(limiter.reserve());
        assert!(!limiter.reserve());
        assert_eq!(limiter.len(), 2);
        limiter.release(1);
        assert!(limiter.reserve());
        limiter.release(2);
        assert!(limiter.is_empty());
    }
}
