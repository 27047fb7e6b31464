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
//! state, one `AtomicU64`, plus its own size and the map's bookkeeping: a hash-table slot of
//! `size_of::<K>() + 8` bytes and one control byte, in tables kept at most 7/8 full and grown by
//! doubling, plus whatever the key owns on the heap (a `String`'s bytes). Measured with `u64` keys
//! (`tests/keyed_spray.rs`), 100 000 keys held add about 24 bytes each to the resident set. The map is a
//! `DashMap<K, AtomicU64, ahash::RandomState>`: a fixed, power-of-two number of shards, each a
//! read-write lock around a hash table, hashed with a per-map random key so that clients cannot
//! choose keys that collide.
//!
//! The algorithm run per key is a type parameter, one of the marker types of this module (the
//! [`Algorithm`] trait is sealed):
//!
//! | marker | per key | a key is forgotten when |
//! | --- | --- | --- |
//! | [`TokenBucketKeys`] (the default) | the [token bucket](crate::token_bucket): bursts up to C, then R per second | its bucket is full again (`tat <= now`) |
//! | [`LeakyMeterKeys`] | the [leaky meter](crate::leaky::meter), strict: admitted only when the key's virtual queue is empty | its queue is empty again |
//!
//! [`KeyedLimiter::new`] and [`KeyedLimiter::with_clock`] build the default;
//! [`KeyedLimiter::with_algorithm`] builds any of them.
//!
//! # Every key starts fresh
//!
//! A key the limiter has never seen, and a key it has forgotten, get the same state: a full bucket,
//! an empty queue. That is what makes forgetting lossless (below). The quota's initial fill
//! ([`Quota::with_initial`]) is therefore not used by a keyed limiter: it applies to direct
//! limiters only.
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
//!   freed memory back).
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
//! key created afresh is fresh as of `max(reading, floor)` (likewise for a queue: empty as of it). So: decisions at readings at or after
//! the latest eviction's reading are exactly those of a limiter that never evicts; a reading earlier
//! than that may be refused where a never-evicting limiter would admit, never the reverse.
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
//! with its own quota. No active key's state is ever reset to make room. Sweeps run on their
//! schedule, not on every refusal (a map full of active keys would otherwise be scanned on every
//! request from a newcomer): a key that has become fresh since the last sweep holds its place until
//! the next one, so for up to `max(256, len / 2)` new keys a full map may refuse a newcomer that a
//! sweep would have made room for.
//!
//! # Memory ordering
//!
//! Each key's word publishes nothing but itself, and is only ever touched under its shard's lock (a
//! read lock for compare-and-swaps, the write lock for inserting and removing), so every access to it
//! is `Relaxed`; the lock's release and acquire order an admission against an eviction, as described
//! above. An admission is not a synchronization point between threads: do not use it to publish
//! other data.

mod store;

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;

use crossbeam_utils::CachePadded;

use crate::cas::{self, Step};
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::outcome::{Admitted, Denied, InsufficientCapacity};
use crate::quota::Quota;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use store::{Slot, Store};

/// The default bound on the number of keys: 2^20.
const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// The fewest new keys between two automatic sweeps (fewer when the bound itself is smaller).
const MIN_SWEEP_EVERY: usize = 256;

/// The internals of [`Algorithm`]: what a keyed limiter needs from an algorithm whose state is one
/// word per key. Public in a private module so that it can appear in the public trait's bounds
/// without being nameable, or implementable, outside the crate.
mod sealed {
    use crate::clock::Nanos;
    use crate::outcome::{Admitted, Denied, InsufficientCapacity};
    use crate::quota::Quota;

    /// The answer of a decision on one word.
    #[derive(Debug)]
    pub enum Decision {
        /// Replace the word with `.0` and answer the admission.
        Write(u64, Admitted),
        /// Admitted without a write.
        Keep(Admitted),
        /// Not now.
        Refuse(Denied),
    }

    pub trait Sealed {
        /// The constants derived from the quota, shared by every key.
        type Policy: Send + Sync + std::fmt::Debug;
        /// A reading converted to the policy's units.
        type Time: Copy;

        fn policy(quota: &Quota) -> Self::Policy;
        fn time(policy: &Self::Policy, now: Nanos) -> Self::Time;
        /// The word of a key never seen (or forgotten), as of `now`.
        fn fresh_word(policy: &Self::Policy, now: Self::Time) -> u64;
        /// Is `word` indistinguishable, at `now` and at every later reading, from a fresh word?
        fn is_fresh(policy: &Self::Policy, word: u64, now: Self::Time) -> bool;
        /// `Ok(false)` for a query (`n = 0`), `Ok(true)` for a request it can ever admit.
        fn check_n(policy: &Self::Policy, n: u64) -> Result<bool, InsufficientCapacity>;
        /// Takes `n` (`1 <= n <= capacity`) from `word` at `now`: a pure decision.
        fn take(policy: &Self::Policy, word: u64, now: Self::Time, n: u64) -> Decision;
        /// What a request for nothing reports.
        fn query(policy: &Self::Policy, word: u64, now: Self::Time) -> Admitted;
        /// Whole units (tokens) available at `now`.
        fn remaining(policy: &Self::Policy, word: u64, now: Self::Time) -> u64;
    }

    /// The token bucket's policy, wrapped so that the sealed trait can name it.
    #[derive(Debug)]
    pub struct TokenBucketPolicy(pub(crate) crate::token_bucket::Policy);

    /// The token bucket's reading, wrapped likewise.
    #[derive(Debug, Clone, Copy)]
    pub struct TokenBucketTime(pub(crate) crate::token_bucket::Time);

    /// The leaky meter's policy, wrapped likewise.
    #[derive(Debug)]
    pub struct LeakyMeterPolicy(pub(crate) crate::leaky::meter::Policy);

    /// The leaky meter's reading, wrapped likewise.
    #[derive(Debug, Clone, Copy)]
    pub struct LeakyMeterTime(pub(crate) crate::leaky::meter::Time);
}

use sealed::{Decision, Sealed};

/// An algorithm a [`KeyedLimiter`] can run per key: one whose whole state is one word. Sealed:
/// implemented by the marker types of this module only.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{Algorithm, KeyedLimiter, TokenBucketKeys};
/// fn per_user<A: Algorithm>(limiter: &KeyedLimiter<u64, A>) -> usize {
///     limiter.len()
/// }
/// let limiter: KeyedLimiter<u64, TokenBucketKeys> = KeyedLimiter::new(tollgate::Quota::per_second(5)?);
/// assert_eq!(per_user(&limiter), 0);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Algorithm: Sealed + Send + Sync + 'static {}

/// The [token bucket](crate::token_bucket) per key: bursts up to the quota's capacity, then its
/// steady rate; a key is forgotten once its bucket is full again.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedLimiter, TokenBucketKeys};
/// use tollgate::{ManualClock, Quota};
/// let limiter: KeyedLimiter<&str, TokenBucketKeys, _> =
///     KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
/// assert!(limiter.check_key(&"k").is_ok());
/// assert!(limiter.check_key(&"k").is_err());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenBucketKeys;

impl Algorithm for TokenBucketKeys {}

impl Sealed for TokenBucketKeys {
    type Policy = sealed::TokenBucketPolicy;
    type Time = sealed::TokenBucketTime;

    fn policy(quota: &Quota) -> Self::Policy {
        sealed::TokenBucketPolicy(crate::token_bucket::Policy::new(quota))
    }

    #[inline]
    fn time(policy: &Self::Policy, now: Nanos) -> Self::Time {
        sealed::TokenBucketTime(policy.0.time(now))
    }

    #[inline]
    fn fresh_word(policy: &Self::Policy, now: Self::Time) -> u64 {
        policy.0.initial_word(policy.0.capacity(), now.0)
    }

    #[inline]
    fn is_fresh(policy: &Self::Policy, word: u64, now: Self::Time) -> bool {
        // Full at `now` (tat <= now, the fresh word): as full as a fresh bucket, now and at every
        // later reading.
        word <= Self::fresh_word(policy, now)
    }

    #[inline]
    fn check_n(policy: &Self::Policy, n: u64) -> Result<bool, InsufficientCapacity> {
        policy.0.check_n(n)
    }

    #[inline]
    fn take(policy: &Self::Policy, word: u64, now: Self::Time, n: u64) -> Decision {
        match policy.0.take(word, now.0, n) {
            Step::Write(new, admitted) => Decision::Write(new, admitted),
            Step::Keep(admitted) => Decision::Keep(admitted),
            Step::Refuse(denied) => Decision::Refuse(denied),
        }
    }

    fn query(policy: &Self::Policy, word: u64, now: Self::Time) -> Admitted {
        policy.0.query(word, now.0)
    }

    fn remaining(policy: &Self::Policy, word: u64, now: Self::Time) -> u64 {
        policy.0.remaining(word, now.0)
    }
}

/// The [leaky bucket as a meter](crate::leaky::meter) per key, with strict admission (the meter's
/// `try_acquire`): a request is admitted only when the key's virtual queue is empty, and then takes
/// `n` intervals of it; a key is forgotten once its queue is empty again.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedLimiter, LeakyMeterKeys};
/// use tollgate::{ManualClock, Nanos, Quota};
/// let limiter: KeyedLimiter<u8, LeakyMeterKeys, _> =
///     KeyedLimiter::with_algorithm(Quota::per_second(10)?, ManualClock::new());
/// assert!(limiter.check_key_at(&1, Nanos::new(0)).is_ok());
/// // One request per 100 ms per key, however bursty the callers.
/// assert!(limiter.check_key_at(&1, Nanos::new(50_000_000)).is_err());
/// assert!(limiter.check_key_at(&1, Nanos::new(100_000_000)).is_ok());
/// assert!(limiter.check_key_at(&2, Nanos::new(50_000_000)).is_ok());
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeakyMeterKeys;

impl Algorithm for LeakyMeterKeys {}

impl Sealed for LeakyMeterKeys {
    type Policy = sealed::LeakyMeterPolicy;
    type Time = sealed::LeakyMeterTime;

    fn policy(quota: &Quota) -> Self::Policy {
        sealed::LeakyMeterPolicy(crate::leaky::meter::Policy::new(quota))
    }

    #[inline]
    fn time(policy: &Self::Policy, now: Nanos) -> Self::Time {
        sealed::LeakyMeterTime(policy.0.time(now))
    }

    #[inline]
    fn fresh_word(policy: &Self::Policy, now: Self::Time) -> u64 {
        // An empty queue: every place free.
        policy.0.initial_word(u64::MAX, now.0)
    }

    #[inline]
    fn is_fresh(policy: &Self::Policy, word: u64, now: Self::Time) -> bool {
        // Empty at `now` (drain time <= now, the fresh word): as empty as a fresh queue, now and at
        // every later reading.
        word <= Self::fresh_word(policy, now)
    }

    #[inline]
    fn check_n(policy: &Self::Policy, n: u64) -> Result<bool, InsufficientCapacity> {
        policy.0.check_n(n)
    }

    #[inline]
    fn take(policy: &Self::Policy, word: u64, now: Self::Time, n: u64) -> Decision {
        match policy.0.acquire(word, now.0, n) {
            Step::Write(new, admitted) => Decision::Write(new, admitted),
            Step::Keep(admitted) => Decision::Keep(admitted),
            Step::Refuse(denied) => Decision::Refuse(denied),
        }
    }

    fn query(policy: &Self::Policy, word: u64, now: Self::Time) -> Admitted {
        policy.0.query(word, now.0)
    }

    fn remaining(policy: &Self::Policy, word: u64, now: Self::Time) -> u64 {
        policy.0.remaining(word, now.0)
    }
}

/// A decision as a step of the CAS loop.
#[inline]
fn step(decision: Decision) -> Step<Admitted, Denied> {
    match decision {
        Decision::Write(new, admitted) => Step::Write(new, admitted),
        Decision::Keep(admitted) => Step::Keep(admitted),
        Decision::Refuse(denied) => Step::Refuse(denied),
    }
}

/// A decision that is not applied (a peek).
#[inline]
fn answer(decision: Decision) -> Result<Admitted, KeyedError> {
    match decision {
        Decision::Write(_, admitted) | Decision::Keep(admitted) => Ok(admitted),
        Decision::Refuse(denied) => Err(KeyedError::Denied(denied)),
    }
}

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
///     .with_overflow(Overflow::Shared(Quota::per_second(2)?));
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    word: CachePadded<AtomicU64>,
}

/// What an attempt to create a key under its write lock came to.
enum Created {
    /// Decided: `true` when a key was inserted.
    Done(Result<Admitted, KeyedError>, bool),
    /// Vacant, and no place left.
    Full,
}

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
    store: Store<K>,
    policy: A::Policy,
    quota: Quota,
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
        KeyedLimiter::build(quota, clock)
    }
}

impl<K: Hash + Eq, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
    /// A keyed limiter running algorithm `A` (named by the type annotation) for `quota` per key,
    /// reading time from `clock`. Every key starts fresh (a full bucket, an empty queue; the quota's
    /// initial fill is not used).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, LeakyMeterKeys, TokenBucketKeys};
    /// use tollgate::{ManualClock, Quota};
    /// let q = Quota::per_second(5)?;
    /// let buckets: KeyedLimiter<u8, TokenBucketKeys, _> = KeyedLimiter::with_algorithm(q, ManualClock::new());
    /// let meters: KeyedLimiter<u8, LeakyMeterKeys, _> = KeyedLimiter::with_algorithm(q, ManualClock::new());
    /// assert_eq!(buckets.check_key_n(&1, 5)?.remaining(), 0); // a burst of 5
    /// assert!(meters.check_key_n(&1, 5).is_ok()); // 5 at once from an empty queue, then nothing
    /// assert!(meters.check_key(&1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_algorithm(quota: Quota, clock: C) -> Self {
        KeyedLimiter::build(quota, clock)
    }

    /// The limiter for `quota` per key under algorithm `A`: what every public constructor builds.
    fn build(quota: Quota, clock: C) -> Self {
        KeyedLimiter {
            store: Store::new(),
            policy: A::policy(&quota),
            quota,
            clock,
            max_keys: DEFAULT_MAX_KEYS,
            overflow: None,
            keys: CachePadded::new(AtomicUsize::new(0)),
            floor: AtomicU64::new(0),
            since_sweep: AtomicUsize::new(0),
            sweeping: AtomicBool::new(false),
            evictions: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
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
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::{KeyedLimiter, Overflow};
    /// use tollgate::Quota;
    /// let limiter: KeyedLimiter<u32> = KeyedLimiter::new(Quota::per_second(10)?)
    ///     .with_max_keys(1000)
    ///     .with_overflow(Overflow::Shared(Quota::per_second(100)?));
    /// assert_eq!(limiter.overflow(), Overflow::Shared(Quota::per_second(100)?));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[must_use]
    pub fn with_overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = match overflow {
            Overflow::Refuse => None,
            Overflow::Shared(quota) => {
                let policy = A::policy(&quota);
                let word = A::fresh_word(&policy, A::time(&policy, self.clock.now()));
                Some(Shared {
                    policy,
                    quota,
                    word: CachePadded::new(AtomicU64::new(word)),
                })
            }
        };
        self
    }

    /// Takes one token for `key` now.
    ///
    /// # Errors
    ///
    /// [`KeyedError::Denied`] when the key (or, for a new key that found no room, the shared
    /// overflow limiter) has no token now; [`KeyedError::TooManyKeys`] for a new key that found no
    /// room under [`Overflow::Refuse`].
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
        self.check_key_n_at(key, 1, self.clock.now())
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
        self.check_key_n_at(key, n, self.clock.now())
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
        if !A::check_n(&self.policy, n)? {
            return Ok(self.query(key, now));
        }
        let t = A::time(&self.policy, now);
        // A known key: the compare-and-swap runs while the shard's read lock is held, so no eviction
        // of this key can run until it is done (see the module docs).
        let known = self.store.with_read(key, |word| {
            cas::update(word, |w| step(A::take(&self.policy, w, t, n)))
        });
        match known {
            Some(outcome) => outcome.map_err(KeyedError::Denied),
            None => self.check_new(key, n, now),
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
        let t = A::time(&self.policy, now);
        for attempt in 0..2 {
            let created = self.store.with_entry(key.to_owned(), |slot| match slot {
                // Another thread created it between our lookup and our write lock.
                Slot::Occupied(word) => {
                    let outcome = cas::update(word, |w| step(A::take(&self.policy, w, t, n)));
                    (
                        None,
                        Created::Done(outcome.map_err(KeyedError::Denied), false),
                    )
                }
                Slot::Vacant => {
                    // The place is reserved under the write lock, so a second thread creating the
                    // same key waits for the lock and then finds it occupied: one reservation, one
                    // state, both admissions counted.
                    if !self.reserve() {
                        return (None, Created::Full);
                    }
                    match A::take(&self.policy, self.fresh_word(now), t, n) {
                        Decision::Write(word, admitted) => {
                            (Some(word), Created::Done(Ok(admitted), true))
                        }
                        // A request that writes nothing leaves the key as if never seen: no need
                        // to hold a place for it.
                        Decision::Keep(admitted) => {
                            self.release(1);
                            (None, Created::Done(Ok(admitted), false))
                        }
                        Decision::Refuse(denied) => {
                            self.release(1);
                            (None, Created::Done(Err(KeyedError::Denied(denied)), false))
                        }
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
            Some(shared) => {
                let t = A::time(&shared.policy, now);
                if !A::check_n(&shared.policy, n)? {
                    return Ok(A::query(&shared.policy, cas::read(&shared.word), t));
                }
                cas::update(&shared.word, |w| step(A::take(&shared.policy, w, t, n)))
                    .map_err(KeyedError::Denied)
            }
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
        Q: Hash + Eq + ?Sized,
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
        Q: Hash + Eq + ?Sized,
    {
        if !A::check_n(&self.policy, n)? {
            return Ok(self.query(key, now));
        }
        let t = A::time(&self.policy, now);
        if let Some(outcome) = self.store.with_read(key, |word| {
            answer(A::take(&self.policy, cas::read(word), t, n))
        }) {
            return outcome;
        }
        // Relaxed: a snapshot of the count, as any answer about a key not yet created is.
        if self.keys.load(Ordering::Relaxed) < self.max_keys {
            return answer(A::take(&self.policy, self.fresh_word(now), t, n));
        }
        match &self.overflow {
            None => Err(KeyedError::TooManyKeys(TooManyKeys {
                max_keys: self.max_keys,
            })),
            Some(shared) => {
                let t = A::time(&shared.policy, now);
                if !A::check_n(&shared.policy, n)? {
                    return Ok(A::query(&shared.policy, cas::read(&shared.word), t));
                }
                answer(A::take(&shared.policy, cas::read(&shared.word), t, n))
            }
        }
    }

    /// What a query (`n = 0`) on `key` reports: the key's state, or a fresh key's.
    fn query<Q>(&self, key: &Q, now: Nanos) -> Admitted
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let t = A::time(&self.policy, now);
        self.store
            .with_read(key, |word| A::query(&self.policy, cas::read(word), t))
            .unwrap_or_else(|| A::query(&self.policy, self.fresh_word(now), t))
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
        Q: Hash + Eq + ?Sized,
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
        Q: Hash + Eq + ?Sized,
    {
        let t = A::time(&self.policy, now);
        self.store
            .with_read(key, |word| A::remaining(&self.policy, cas::read(word), t))
            .unwrap_or_else(|| A::remaining(&self.policy, self.fresh_word(now), t))
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

    /// Removes every key whose state is indistinguishable from a fresh one as of `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Nanos, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// limiter.check_key_at(&1, Nanos::new(0)).unwrap();
    /// assert_eq!(limiter.retain_recent_at(Nanos::new(999_999_999)), 0);
    /// assert_eq!(limiter.retain_recent_at(Nanos::new(1_000_000_000)), 1);
    /// assert_eq!(limiter.evictions(), 1);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn retain_recent_at(&self, now: Nanos) -> usize {
        // The floor rises before any key is removed. Relaxed is enough: a thread that re-creates a
        // removed key does so under the shard's write lock, acquired after the sweep released it,
        // so this store happens before that thread's load of the floor.
        self.floor.fetch_max(now.clamped(), Ordering::Relaxed);
        let t = A::time(&self.policy, now);
        // `is_fresh` is decided under the shard's write lock: no admission on the key is in flight.
        let removed = self.store.retain(|word| A::is_fresh(&self.policy, word, t));
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
    /// let limiter: KeyedLimiter<u32, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
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
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
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

    /// The quota each key gets.
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
        &self.quota
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

    /// The word of a key created afresh at `now`: fresh as of `max(now, floor)`.
    #[inline]
    fn fresh_word(&self, now: Nanos) -> u64 {
        // Relaxed: see `retain_recent_at`; callers creating a key hold its shard's write lock.
        let floor = self.floor.load(Ordering::Relaxed);
        let at = Nanos::new(now.clamped().max(floor));
        A::fresh_word(&self.policy, A::time(&self.policy, at))
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

impl<K, A: Algorithm, C> fmt::Debug for KeyedLimiter<K, A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quota", &self.quota)
            // Relaxed: a snapshot for display.
            .field("keys", &self.keys.load(Ordering::Relaxed))
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow.as_ref().map(|s| s.quota))
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const SEC: u64 = 1_000_000_000;

    fn policy() -> <TokenBucketKeys as Sealed>::Policy {
        TokenBucketKeys::policy(&Quota::per_second(10).unwrap())
    }

    fn at(p: &<TokenBucketKeys as Sealed>::Policy, ns: u64) -> sealed::TokenBucketTime {
        TokenBucketKeys::time(p, Nanos::new(ns))
    }

    #[test]
    fn a_word_is_fresh_exactly_when_the_bucket_is_full() {
        let p = policy();
        let fresh = TokenBucketKeys::fresh_word(&p, at(&p, 5 * SEC));
        assert_eq!(TokenBucketKeys::remaining(&p, fresh, at(&p, 5 * SEC)), 10);
        assert!(TokenBucketKeys::is_fresh(&p, fresh, at(&p, 5 * SEC)));
        let Decision::Write(taken, _) = TokenBucketKeys::take(&p, fresh, at(&p, 5 * SEC), 1) else {
            panic!("a full bucket admits");
        };
        // One token out: not fresh until it has refilled (100 ms), fresh from then on.
        assert!(!TokenBucketKeys::is_fresh(
            &p,
            taken,
            at(&p, 5 * SEC + SEC / 10 - 1)
        ));
        assert!(TokenBucketKeys::is_fresh(
            &p,
            taken,
            at(&p, 5 * SEC + SEC / 10)
        ));
        assert!(TokenBucketKeys::is_fresh(&p, taken, at(&p, u64::MAX)));
        // Fresh means "as full as a fresh word" at that reading, and later ones.
        for later in [5 * SEC + SEC / 10, 6 * SEC, 1 << 62] {
            assert_eq!(TokenBucketKeys::remaining(&p, taken, at(&p, later)), 10);
        }
    }

    #[test]
    fn a_meter_word_is_fresh_exactly_when_its_queue_is_empty() {
        let p = LeakyMeterKeys::policy(&Quota::per_second(10).unwrap());
        let at = |ns| LeakyMeterKeys::time(&p, Nanos::new(ns));
        let fresh = LeakyMeterKeys::fresh_word(&p, at(5 * SEC));
        assert!(LeakyMeterKeys::is_fresh(&p, fresh, at(5 * SEC)));
        assert_eq!(LeakyMeterKeys::remaining(&p, fresh, at(5 * SEC)), 10);
        let Decision::Write(taken, _) = LeakyMeterKeys::take(&p, fresh, at(5 * SEC), 3) else {
            panic!("an empty queue admits");
        };
        // Three intervals queued: not fresh until they have drained (300 ms), fresh from then on.
        assert!(!LeakyMeterKeys::is_fresh(
            &p,
            taken,
            at(5 * SEC + 3 * SEC / 10 - 1)
        ));
        assert!(LeakyMeterKeys::is_fresh(
            &p,
            taken,
            at(5 * SEC + 3 * SEC / 10)
        ));
        assert!(LeakyMeterKeys::is_fresh(&p, taken, at(u64::MAX)));
    }

    #[test]
    fn keys_created_after_an_eviction_are_full_as_of_the_floor() {
        let limiter: KeyedLimiter<u8, TokenBucketKeys, ManualClock> =
            KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), ManualClock::new());
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
