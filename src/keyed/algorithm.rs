//! The algorithms a keyed limiter runs per key: a sealed trait and its marker types.
//!
//! Each marker names an algorithm of the crate and says how a key's state is created, decided on,
//! and recognized as forgettable. The one-word algorithms (token bucket, leaky meter, fixed window,
//! sliding window counter) share one implementation over an `AtomicU64` per key through the
//! private `OneWord` trait; the sliding window log keeps a ring per key; [`Tiered`] wraps any of them
//! with a quota chosen per key.

use std::fmt;
use std::marker::PhantomData;

use super::KeyedError;
use crate::cas::{self, Step};
use crate::clock::Nanos;
use crate::outcome::{Admitted, Denied, InsufficientCapacity};
use crate::quota::{Quota, QuotaError};
use crate::sync::AtomicU64;

/// The internals of [`Algorithm`]. Public in a private module so that they can appear in the
/// public trait's bounds without being nameable, or implementable, outside the crate.
pub(crate) mod sealed {
    use super::{Admitted, Denied, InsufficientCapacity, KeyedError, Nanos, Quota, QuotaError};

    /// A key as a decision sees it: held in the map, or not (a fresh key of this tier, fresh as of
    /// this reading: `max(reading, floor)`, see the module docs of `keyed`).
    pub enum Held<'a, S> {
        /// The key's state.
        Known(&'a S),
        /// A key the map does not hold.
        Fresh {
            /// Its tier (0 unless tiered).
            tier: usize,
            /// The reading it would be fresh as of.
            at: Nanos,
        },
    }

    impl<S> std::fmt::Debug for Held<'_, S> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Held::Known(_) => f.write_str("Known"),
                Held::Fresh { tier, at } => f
                    .debug_struct("Fresh")
                    .field("tier", tier)
                    .field("at", at)
                    .finish(),
            }
        }
    }

    /// What a keyed limiter needs from an algorithm.
    pub trait Sealed {
        /// The constants derived from the quota (or quotas), shared by every key.
        type Policy: Send + Sync + std::fmt::Debug;
        /// One key's state, the value of the map.
        type State: Send + Sync;

        fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError>;
        /// The state of a key created afresh, fresh as of `at`.
        fn fresh(policy: &Self::Policy, tier: usize, at: Nanos) -> Self::State;
        /// A request for `n` (any `n`; 0 is a query) on a key the map does not hold, fresh as of
        /// `fresh`, at reading `now`: the answer, and the state to insert if the request changed
        /// it (`None`: the key stays as if never seen).
        fn create(
            policy: &Self::Policy,
            tier: usize,
            fresh: Nanos,
            now: Nanos,
            n: u64,
        ) -> (Option<Self::State>, Result<Admitted, KeyedError>);
        /// A request for `n` (0 is a query) on a held key's state.
        fn acquire(
            policy: &Self::Policy,
            state: &Self::State,
            now: Nanos,
            n: u64,
        ) -> Result<Admitted, KeyedError>;
        /// The answer a request for `n` would get, writing nothing.
        fn peek(
            policy: &Self::Policy,
            key: Held<'_, Self::State>,
            now: Nanos,
            n: u64,
        ) -> Result<Admitted, KeyedError>;
        /// Whole admissions available at `now`.
        fn remaining(policy: &Self::Policy, key: Held<'_, Self::State>, now: Nanos) -> u64;
        /// Is `state` indistinguishable, at `now` and at every later reading, from the fresh state
        /// of `now`? Called with no request in flight on the key (under its write lock).
        fn is_fresh(policy: &Self::Policy, state: &Self::State, now: Nanos) -> bool;
    }

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

    /// An algorithm whose whole state is one word: what it must provide, from which [`Sealed`]
    /// follows.
    pub trait OneWord: Send + Sync + 'static {
        type Policy: Send + Sync + std::fmt::Debug;
        /// A reading converted to the policy's units.
        type Time: Copy;

        fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError>;
        fn time(policy: &Self::Policy, now: Nanos) -> Self::Time;
        /// The word of a key created afresh, fresh as of `at`: identical to a never-used word at
        /// readings from `at` on, and admitting no more than any forgettable word (below) at
        /// earlier readings.
        fn fresh_word(policy: &Self::Policy, at: Nanos) -> u64;
        /// Is `word` indistinguishable, at `now` and at every later reading, from a fresh word?
        fn is_fresh(policy: &Self::Policy, word: u64, now: Self::Time) -> bool;
        /// `Ok(false)` for a query (`n = 0`), `Ok(true)` for a request it can ever admit.
        fn check_n(policy: &Self::Policy, n: u64) -> Result<bool, InsufficientCapacity>;
        /// Takes `n` (`1..=capacity`) from `word` at `now`: a pure decision.
        fn take(policy: &Self::Policy, word: u64, now: Self::Time, n: u64) -> Decision;
        /// What a request for nothing reports.
        fn query(policy: &Self::Policy, word: u64, now: Self::Time) -> Admitted;
        /// Whole admissions available at `now`.
        fn remaining(policy: &Self::Policy, word: u64, now: Self::Time) -> u64;
    }

    /// The token bucket's policy, wrapped so that the sealed traits can name it.
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

    /// The fixed window's policy, wrapped likewise.
    #[derive(Debug)]
    pub struct FixedWindowPolicy(pub(crate) crate::window::fixed::Policy);

    /// The sliding window counter's policy, wrapped likewise.
    #[derive(Debug)]
    pub struct CounterPolicy(pub(crate) crate::window::sliding_counter::Policy);

    /// The sliding window counter's reading, wrapped likewise.
    #[derive(Debug, Clone, Copy)]
    pub struct CounterTime(pub(crate) crate::window::sliding_counter::Reading);

    /// The sliding window log's policy, wrapped likewise.
    #[derive(Debug)]
    pub struct LogPolicy(pub(crate) crate::window::sliding_log::Policy);

    /// One key's sliding window log: the head inline (not on a padded line of its own) and the
    /// ring of the last N admission times.
    pub struct LogState(pub(crate) crate::window::sliding_log::Log<crate::sync::AtomicU64>);

    impl std::fmt::Debug for LogState {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("LogState")
        }
    }

    /// The policies of a tiered limiter, one per tier.
    #[derive(Debug)]
    pub struct TieredPolicy<P>(pub(crate) Box<[P]>);

    /// A key's state in a tiered limiter: the algorithm's state and the key's tier.
    pub struct TieredState<S> {
        pub(crate) state: S,
        pub(crate) tier: u8,
    }

    impl<S> std::fmt::Debug for TieredState<S> {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("TieredState")
                .field("tier", &self.tier)
                .finish_non_exhaustive()
        }
    }
}

use sealed::{Decision, Held, OneWord, Sealed};

/// An algorithm a [`KeyedLimiter`](super::KeyedLimiter) can run per key. Sealed: implemented by
/// the marker types of this module only.
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

impl<T: OneWord> Sealed for T {
    type Policy = T::Policy;
    type State = AtomicU64;

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        T::policy(quota)
    }

    fn fresh(policy: &Self::Policy, _tier: usize, at: Nanos) -> AtomicU64 {
        AtomicU64::new(T::fresh_word(policy, at))
    }

    fn create(
        policy: &Self::Policy,
        _tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<AtomicU64>, Result<Admitted, KeyedError>) {
        let t = T::time(policy, now);
        let word = T::fresh_word(policy, fresh);
        match T::check_n(policy, n) {
            Err(e) => (None, Err(e.into())),
            Ok(false) => (None, Ok(T::query(policy, word, t))),
            Ok(true) => match T::take(policy, word, t, n) {
                Decision::Write(new, admitted) => (Some(AtomicU64::new(new)), Ok(admitted)),
                Decision::Keep(admitted) => (None, Ok(admitted)),
                Decision::Refuse(denied) => (None, Err(denied.into())),
            },
        }
    }

    #[inline]
    fn acquire(
        policy: &Self::Policy,
        state: &AtomicU64,
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, KeyedError> {
        let t = T::time(policy, now);
        if !T::check_n(policy, n)? {
            return Ok(T::query(policy, cas::read(state), t));
        }
        cas::update(state, |w| match T::take(policy, w, t, n) {
            Decision::Write(new, admitted) => Step::Write(new, admitted),
            Decision::Keep(admitted) => Step::Keep(admitted),
            Decision::Refuse(denied) => Step::Refuse(denied),
        })
        .map_err(KeyedError::Denied)
    }

    fn peek(
        policy: &Self::Policy,
        key: Held<'_, AtomicU64>,
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, KeyedError> {
        let t = T::time(policy, now);
        let word = one_word::<T>(policy, key);
        if !T::check_n(policy, n)? {
            return Ok(T::query(policy, word, t));
        }
        match T::take(policy, word, t, n) {
            Decision::Write(_, admitted) | Decision::Keep(admitted) => Ok(admitted),
            Decision::Refuse(denied) => Err(denied.into()),
        }
    }

    fn remaining(policy: &Self::Policy, key: Held<'_, AtomicU64>, now: Nanos) -> u64 {
        T::remaining(policy, one_word::<T>(policy, key), T::time(policy, now))
    }

    fn is_fresh(policy: &Self::Policy, state: &AtomicU64, now: Nanos) -> bool {
        T::is_fresh(policy, cas::read(state), T::time(policy, now))
    }
}

/// The word a decision on `key` starts from.
#[inline]
fn one_word<T: OneWord>(policy: &T::Policy, key: Held<'_, AtomicU64>) -> u64 {
    match key {
        Held::Known(word) => cas::read(word),
        Held::Fresh { at, .. } => T::fresh_word(policy, at),
    }
}

/// The four decisions of a [`OneWord`] algorithm, each the same call on the wrapped direct policy:
/// `$take` is the policy's method that takes `n`, `|$t| $time` converts the reading.
macro_rules! word_decisions {
    ($take:ident, |$t:ident| $time:expr) => {
        #[inline]
        fn check_n(policy: &Self::Policy, n: u64) -> Result<bool, InsufficientCapacity> {
            policy.0.check_n(n)
        }

        #[inline]
        fn take(policy: &Self::Policy, word: u64, $t: Self::Time, n: u64) -> Decision {
            decision(policy.0.$take(word, $time, n))
        }

        fn query(policy: &Self::Policy, word: u64, $t: Self::Time) -> Admitted {
            policy.0.query(word, $time)
        }

        fn remaining(policy: &Self::Policy, word: u64, $t: Self::Time) -> u64 {
            policy.0.remaining(word, $time)
        }
    };
}

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

impl OneWord for TokenBucketKeys {
    type Policy = sealed::TokenBucketPolicy;
    type Time = sealed::TokenBucketTime;

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        Ok(sealed::TokenBucketPolicy(crate::token_bucket::Policy::new(
            quota,
        )))
    }

    #[inline]
    fn time(policy: &Self::Policy, now: Nanos) -> Self::Time {
        sealed::TokenBucketTime(policy.0.time(now))
    }

    #[inline]
    fn fresh_word(policy: &Self::Policy, at: Nanos) -> u64 {
        // Full as of `at` (tat = at): a reading before `at` sees it short of full, as it would see
        // any bucket that was full at `at`.
        policy
            .0
            .initial_word(policy.0.capacity(), policy.0.time(at))
    }

    #[inline]
    fn is_fresh(policy: &Self::Policy, word: u64, now: Self::Time) -> bool {
        // Full at `now` (tat <= now, the fresh word): as full as a fresh bucket, now and at every
        // later reading.
        word <= policy.0.initial_word(policy.0.capacity(), now.0)
    }

    word_decisions!(take, |now| now.0);
}

/// A step of a direct limiter's decision as a keyed decision.
#[inline]
fn decision(step: Step<Admitted, Denied>) -> Decision {
    match step {
        Step::Write(new, admitted) => Decision::Write(new, admitted),
        Step::Keep(admitted) => Decision::Keep(admitted),
        Step::Refuse(denied) => Decision::Refuse(denied),
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
///     KeyedLimiter::with_algorithm(Quota::per_second(10)?, ManualClock::new())?;
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

impl OneWord for LeakyMeterKeys {
    type Policy = sealed::LeakyMeterPolicy;
    type Time = sealed::LeakyMeterTime;

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        Ok(sealed::LeakyMeterPolicy(crate::leaky::meter::Policy::new(
            quota,
        )))
    }

    #[inline]
    fn time(policy: &Self::Policy, now: Nanos) -> Self::Time {
        sealed::LeakyMeterTime(policy.0.time(now))
    }

    #[inline]
    fn fresh_word(policy: &Self::Policy, at: Nanos) -> u64 {
        // An empty queue as of `at`: every place free.
        policy.0.initial_word(u64::MAX, policy.0.time(at))
    }

    #[inline]
    fn is_fresh(policy: &Self::Policy, word: u64, now: Self::Time) -> bool {
        // Empty at `now` (drain time <= now, the fresh word): as empty as a fresh queue, now and at
        // every later reading.
        word <= policy.0.initial_word(u64::MAX, now.0)
    }

    word_decisions!(acquire, |now| now.0);
}

/// The [fixed window](crate::window::fixed) per key: up to N admissions in each window of the
/// quota's period, windows on the clock's epoch (with the fixed window's boundary burst); a key is
/// forgotten once its window is over.
///
/// The quota is validated as for [`FixedWindow`](crate::window::FixedWindow): capacity and initial
/// fill equal to the count, and the count within the window's budget.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{FixedWindowKeys, KeyedLimiter};
/// use tollgate::{ManualClock, Nanos, Quota};
/// let limiter: KeyedLimiter<u8, FixedWindowKeys, _> =
///     KeyedLimiter::with_algorithm(Quota::per_second(2)?, ManualClock::new())?;
/// assert!(limiter.check_key_n_at(&1, 2, Nanos::new(900_000_000)).is_ok());
/// assert!(limiter.check_key_at(&1, Nanos::new(999_999_999)).is_err());
/// assert!(limiter.check_key_at(&1, Nanos::new(1_000_000_000)).is_ok()); // a new window
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FixedWindowKeys;

impl Algorithm for FixedWindowKeys {}

impl OneWord for FixedWindowKeys {
    type Policy = sealed::FixedWindowPolicy;
    type Time = Nanos;

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        crate::window::fixed::Policy::new(quota).map(sealed::FixedWindowPolicy)
    }

    #[inline]
    fn time(_: &Self::Policy, now: Nanos) -> Nanos {
        now
    }

    fn fresh_word(policy: &Self::Policy, at: Nanos) -> u64 {
        policy.0.fresh_word(at)
    }

    fn is_fresh(policy: &Self::Policy, word: u64, now: Nanos) -> bool {
        policy.0.is_expired(word, now)
    }

    word_decisions!(take, |now| now);
}

/// The one-word [sliding window counter](crate::window::sliding_counter) per key: the previous
/// window's count weighted by its overlap with the sliding window, plus the current one's; a key is
/// forgotten once both windows it counts have passed.
///
/// The quota is validated as for
/// [`SlidingWindowCounter`](crate::window::SlidingWindowCounter). (The `k`-sub-window
/// [`SubWindowCounter`](crate::window::SubWindowCounter) keeps a ring of `k + 1` words and a hot
/// word per limiter; it is not offered per key: use this counter, or the exact
/// [`SlidingWindowLogKeys`] for small limits.)
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedLimiter, SlidingWindowCounterKeys};
/// use tollgate::{ManualClock, Nanos, Quota};
/// let limiter: KeyedLimiter<u8, SlidingWindowCounterKeys, _> =
///     KeyedLimiter::with_algorithm(Quota::per_second(4)?, ManualClock::new())?;
/// limiter.check_key_n_at(&1, 4, Nanos::new(500_000_000))?;
/// // 250 ms into the next window, 3/4 of the previous window's 4 still count: one left.
/// assert_eq!(limiter.remaining_key_at(&1, Nanos::new(1_250_000_000)), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlidingWindowCounterKeys;

impl Algorithm for SlidingWindowCounterKeys {}

impl OneWord for SlidingWindowCounterKeys {
    type Policy = sealed::CounterPolicy;
    type Time = sealed::CounterTime;

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        crate::window::sliding_counter::Policy::new(quota, 1).map(sealed::CounterPolicy)
    }

    #[inline]
    fn time(policy: &Self::Policy, now: Nanos) -> Self::Time {
        sealed::CounterTime(policy.0.read(now))
    }

    fn fresh_word(policy: &Self::Policy, at: Nanos) -> u64 {
        policy.0.fresh_word(at)
    }

    fn is_fresh(policy: &Self::Policy, word: u64, now: Self::Time) -> bool {
        policy.0.is_expired(word, now.0)
    }

    word_decisions!(take, |now| now.0);
}

/// The exact [sliding window log](crate::window::sliding_log) per key: never more than N
/// admissions in any window of the quota's period; a key is forgotten once its newest admission
/// has left the window.
///
/// A key costs a ring of N timestamps, `8 × N` bytes on the heap plus 24 in the map (the head and
/// the ring's pointer), besides the key itself: keep N small (N is at most
/// [`MAX_LOG`](crate::window::sliding_log::MAX_LOG)). A key created afresh after an eviction is
/// built full of entries that have just left the window (see the module docs of
/// [`keyed`](super)), N stores at creation. Requests for `n > 1` follow the log's rule: a lost race
/// mid-way keeps the positions already claimed (never over the limit).
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedLimiter, SlidingWindowLogKeys};
/// use tollgate::{ManualClock, Nanos, Quota};
/// let ms = |n: u64| Nanos::new(n * 1_000_000);
/// let limiter: KeyedLimiter<u8, SlidingWindowLogKeys, _> =
///     KeyedLimiter::with_algorithm(Quota::per_second(2)?, ManualClock::new())?;
/// assert!(limiter.check_key_at(&1, ms(0)).is_ok());
/// assert!(limiter.check_key_at(&1, ms(600)).is_ok());
/// assert!(limiter.check_key_at(&1, ms(1000)).is_ok()); // the admission at 0 ms has left
/// // A fixed window would admit at 1100 ms (one in its window); the admissions at 600 and 1000 ms
/// // are both still in the last second.
/// let denied = limiter.check_key_at(&1, ms(1100)).unwrap_err();
/// assert_eq!(denied.denied().unwrap().retry_at(), ms(1600));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlidingWindowLogKeys;

impl Algorithm for SlidingWindowLogKeys {}

impl Sealed for SlidingWindowLogKeys {
    type Policy = sealed::LogPolicy;
    type State = sealed::LogState;

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        crate::window::sliding_log::Policy::new(quota).map(sealed::LogPolicy)
    }

    fn fresh(policy: &Self::Policy, _tier: usize, at: Nanos) -> Self::State {
        sealed::LogState(crate::window::sliding_log::Log::fresh(&policy.0, at))
    }

    fn create(
        policy: &Self::Policy,
        tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<Self::State>, Result<Admitted, KeyedError>) {
        // Judge on the fresh log without building it: a request that writes nothing (a query, a
        // denial, one too large) leaves the key unheld and allocates nothing.
        match Self::peek(policy, Held::Fresh { tier, at: fresh }, now, n) {
            Ok(_) if n > 0 => {
                let state = Self::fresh(policy, tier, fresh);
                // Nobody else can see this log yet: the judgment just made holds.
                let outcome = Self::acquire(policy, &state, now, n);
                (Some(state), outcome)
            }
            other => (None, other),
        }
    }

    fn acquire(
        policy: &Self::Policy,
        state: &Self::State,
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, KeyedError> {
        let now = now.clamped();
        if policy.0.check_n(n)? {
            Ok(state.0.acquire(&policy.0, now, n)?)
        } else {
            Ok(state.0.peek(&policy.0, now, 0)?)
        }
    }

    fn peek(
        policy: &Self::Policy,
        key: Held<'_, Self::State>,
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, KeyedError> {
        policy.0.check_n(n)?;
        let now = now.clamped();
        Ok(match key {
            Held::Known(state) => state.0.peek(&policy.0, now, n),
            Held::Fresh { at, .. } => policy.0.judge_fresh(at, now, n),
        }?)
    }

    fn remaining(policy: &Self::Policy, key: Held<'_, Self::State>, now: Nanos) -> u64 {
        Self::peek(policy, key, now, 0).map_or(0, |a| a.remaining())
    }

    fn is_fresh(policy: &Self::Policy, state: &Self::State, now: Nanos) -> bool {
        state.0.is_expired(&policy.0, now)
    }
}

/// Any algorithm `A` with its quota chosen per key from a fixed set of tiers, by a function of the
/// key called when the key is first seen: see
/// [`KeyedLimiter::with_tiers`](super::KeyedLimiter::with_tiers).
///
/// A key's tier is stored beside its state, in one byte: for the one-word algorithms a key's
/// state grows from 8 to 16 bytes (the byte, padded to the word's alignment); for the log, from
/// 24 to 32.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedLimiter, Tiered, TokenBucketKeys};
/// use tollgate::{ManualClock, Quota};
/// let tiers = [Quota::per_second(1)?, Quota::per_second(100)?];
/// let limiter: KeyedLimiter<String, Tiered<TokenBucketKeys>, _> = KeyedLimiter::with_tiers(
///     &tiers,
///     |user: &String| usize::from(user.starts_with("pro-")),
///     ManualClock::new(),
/// )?;
/// assert_eq!(limiter.remaining_key("free-ann"), 1);
/// assert_eq!(limiter.remaining_key("pro-bob"), 100);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct Tiered<A = super::TokenBucketKeys>(PhantomData<fn() -> A>);

impl<A> fmt::Debug for Tiered<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tiered")
    }
}

impl<A: Algorithm> Algorithm for Tiered<A> {}

impl<A: Algorithm> Tiered<A> {
    /// The policy of `tier` (the last one for an index past the end).
    #[inline]
    fn tier(policy: &sealed::TieredPolicy<A::Policy>, tier: usize) -> (&A::Policy, u8) {
        let last = policy.0.len().saturating_sub(1);
        let tier = tier.min(last);
        // At most 256 tiers (checked when built), so the index fits a byte; at least one, so
        // `tier` is in bounds.
        (&policy.0[tier], u8::try_from(tier).unwrap_or(u8::MAX))
    }
}

impl<A: Algorithm> Sealed for Tiered<A> {
    type Policy = sealed::TieredPolicy<A::Policy>;
    type State = sealed::TieredState<A::State>;

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        Ok(sealed::TieredPolicy(Box::new([A::policy(quota)?])))
    }

    fn fresh(policy: &Self::Policy, tier: usize, at: Nanos) -> Self::State {
        let (p, tier) = Self::tier(policy, tier);
        sealed::TieredState {
            state: A::fresh(p, 0, at),
            tier,
        }
    }

    fn create(
        policy: &Self::Policy,
        tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<Self::State>, Result<Admitted, KeyedError>) {
        let (p, tier) = Self::tier(policy, tier);
        let (state, outcome) = A::create(p, 0, fresh, now, n);
        (
            state.map(|state| sealed::TieredState { state, tier }),
            outcome,
        )
    }

    #[inline]
    fn acquire(
        policy: &Self::Policy,
        state: &Self::State,
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, KeyedError> {
        let (p, _) = Self::tier(policy, usize::from(state.tier));
        A::acquire(p, &state.state, now, n)
    }

    fn peek(
        policy: &Self::Policy,
        key: Held<'_, Self::State>,
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, KeyedError> {
        let (p, inner) = tiered_key::<A>(policy, key);
        A::peek(p, inner, now, n)
    }

    fn remaining(policy: &Self::Policy, key: Held<'_, Self::State>, now: Nanos) -> u64 {
        let (p, inner) = tiered_key::<A>(policy, key);
        A::remaining(p, inner, now)
    }

    fn is_fresh(policy: &Self::Policy, state: &Self::State, now: Nanos) -> bool {
        let (p, _) = Tiered::<A>::tier(policy, usize::from(state.tier));
        A::is_fresh(p, &state.state, now)
    }
}

/// A tiered key as its tier's policy and the inner algorithm's view of it.
#[inline]
fn tiered_key<'a, A: Algorithm>(
    policy: &'a sealed::TieredPolicy<A::Policy>,
    key: Held<'a, sealed::TieredState<A::State>>,
) -> (&'a A::Policy, Held<'a, A::State>) {
    match key {
        Held::Known(state) => (
            Tiered::<A>::tier(policy, usize::from(state.tier)).0,
            Held::Known(&state.state),
        ),
        Held::Fresh { tier, at } => (
            Tiered::<A>::tier(policy, tier).0,
            Held::Fresh { tier: 0, at },
        ),
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn ns(n: u64) -> Nanos {
        Nanos::new(n)
    }

    /// The one-word decision of `T` at `now`, written or not.
    fn take<T: OneWord>(p: &T::Policy, word: u64, now: u64, n: u64) -> Option<u64> {
        match T::take(p, word, T::time(p, ns(now)), n) {
            Decision::Write(w, _) => Some(w),
            Decision::Keep(_) => Some(word),
            Decision::Refuse(_) => None,
        }
    }

    fn fresh<T: OneWord>(p: &T::Policy, word: u64, now: u64) -> bool {
        T::is_fresh(p, word, T::time(p, ns(now)))
    }

    fn left<T: OneWord>(p: &T::Policy, word: u64, now: u64) -> u64 {
        T::remaining(p, word, T::time(p, ns(now)))
    }

    #[test]
    fn a_bucket_word_is_fresh_exactly_when_the_bucket_is_full() {
        let p = <TokenBucketKeys as OneWord>::policy(&Quota::per_second(10).unwrap()).unwrap();
        let word = TokenBucketKeys::fresh_word(&p, ns(5 * SEC));
        assert_eq!(left::<TokenBucketKeys>(&p, word, 5 * SEC), 10);
        assert!(fresh::<TokenBucketKeys>(&p, word, 5 * SEC));
        let taken = take::<TokenBucketKeys>(&p, word, 5 * SEC, 1).unwrap();
        // One token out: not fresh until it has refilled (100 ms), fresh from then on.
        assert!(!fresh::<TokenBucketKeys>(&p, taken, 5 * SEC + SEC / 10 - 1));
        assert!(fresh::<TokenBucketKeys>(&p, taken, 5 * SEC + SEC / 10));
        assert!(fresh::<TokenBucketKeys>(&p, taken, u64::MAX));
        for later in [5 * SEC + SEC / 10, 6 * SEC, 1 << 62] {
            assert_eq!(left::<TokenBucketKeys>(&p, taken, later), 10);
        }
    }

    #[test]
    fn a_meter_word_is_fresh_exactly_when_its_queue_is_empty() {
        let p = <LeakyMeterKeys as OneWord>::policy(&Quota::per_second(10).unwrap()).unwrap();
        let word = LeakyMeterKeys::fresh_word(&p, ns(5 * SEC));
        assert!(fresh::<LeakyMeterKeys>(&p, word, 5 * SEC));
        assert_eq!(left::<LeakyMeterKeys>(&p, word, 5 * SEC), 10);
        let taken = take::<LeakyMeterKeys>(&p, word, 5 * SEC, 3).unwrap();
        // Three intervals queued: not fresh until they have drained (300 ms).
        assert!(!fresh::<LeakyMeterKeys>(
            &p,
            taken,
            5 * SEC + 3 * SEC / 10 - 1
        ));
        assert!(fresh::<LeakyMeterKeys>(&p, taken, 5 * SEC + 3 * SEC / 10));
        assert!(fresh::<LeakyMeterKeys>(&p, taken, u64::MAX));
    }

    #[test]
    fn a_window_word_is_fresh_once_its_window_is_over_and_fresh_words_refuse_the_past() {
        let p = <FixedWindowKeys as OneWord>::policy(&Quota::per_second(3).unwrap()).unwrap();
        // Fresh as of 5.5 s: a new window from 5 s on, the full window 4 before it.
        let word = FixedWindowKeys::fresh_word(&p, ns(5 * SEC + SEC / 2));
        assert_eq!(left::<FixedWindowKeys>(&p, word, 5 * SEC), 3);
        assert_eq!(left::<FixedWindowKeys>(&p, word, 5 * SEC - 1), 0);
        assert!(take::<FixedWindowKeys>(&p, word, 4 * SEC, 1).is_none());
        let taken = take::<FixedWindowKeys>(&p, word, 5 * SEC + SEC / 2, 2).unwrap();
        assert!(!fresh::<FixedWindowKeys>(&p, taken, 6 * SEC - 1));
        assert!(fresh::<FixedWindowKeys>(&p, taken, 6 * SEC));
        assert!(fresh::<FixedWindowKeys>(&p, taken, u64::MAX));
        // Window 0 has no window before it: the zero word, which a direct limiter starts from.
        assert_eq!(FixedWindowKeys::fresh_word(&p, ns(SEC / 2)), 0);
    }

    #[test]
    fn a_counter_word_is_fresh_once_both_its_windows_are_over() {
        let p =
            <SlidingWindowCounterKeys as OneWord>::policy(&Quota::per_second(4).unwrap()).unwrap();
        let word = SlidingWindowCounterKeys::fresh_word(&p, ns(7 * SEC));
        // Empty from window 7 on; nothing at all in window 5 or before, in window 6 only what the
        // weighted full window 5 leaves (none at its start, all of it at its end).
        assert_eq!(left::<SlidingWindowCounterKeys>(&p, word, 7 * SEC), 4);
        assert_eq!(
            left::<SlidingWindowCounterKeys>(&p, word, 5 * SEC + SEC / 2),
            0
        );
        assert_eq!(left::<SlidingWindowCounterKeys>(&p, word, 6 * SEC), 0);
        assert_eq!(
            left::<SlidingWindowCounterKeys>(&p, word, 6 * SEC + 3 * SEC / 4),
            3
        );
        let taken = take::<SlidingWindowCounterKeys>(&p, word, 7 * SEC, 1).unwrap();
        assert!(!fresh::<SlidingWindowCounterKeys>(&p, taken, 9 * SEC - 1));
        assert!(fresh::<SlidingWindowCounterKeys>(&p, taken, 9 * SEC));
        assert_eq!(SlidingWindowCounterKeys::fresh_word(&p, ns(SEC + 1)), 0);
    }

    #[test]
    fn a_fresh_log_judges_as_an_empty_one_from_its_reading_and_refuses_before() {
        let p = <SlidingWindowLogKeys as Sealed>::policy(&Quota::per_second(2).unwrap()).unwrap();
        let log = SlidingWindowLogKeys::fresh(&p, 0, ns(5 * SEC));
        assert!(SlidingWindowLogKeys::is_fresh(&p, &log, ns(5 * SEC)));
        assert_eq!(
            SlidingWindowLogKeys::remaining(&p, Held::Known(&log), ns(5 * SEC)),
            2
        );
        assert_eq!(
            SlidingWindowLogKeys::remaining(&p, Held::Known(&log), ns(5 * SEC - 1)),
            0
        );
        // The judgment without building the log agrees.
        for at in [4 * SEC, 5 * SEC - 1, 5 * SEC, 9 * SEC] {
            assert_eq!(
                SlidingWindowLogKeys::peek(&p, Held::Known(&log), ns(at), 1).is_ok(),
                SlidingWindowLogKeys::peek(
                    &p,
                    Held::Fresh {
                        tier: 0,
                        at: ns(5 * SEC)
                    },
                    ns(at),
                    1
                )
                .is_ok(),
                "at {at}"
            );
        }
        SlidingWindowLogKeys::acquire(&p, &log, ns(5 * SEC), 1).unwrap();
        assert!(!SlidingWindowLogKeys::is_fresh(&p, &log, ns(6 * SEC - 1)));
        assert!(SlidingWindowLogKeys::is_fresh(&p, &log, ns(6 * SEC)));
        // Before one window has passed no log can have expired: an empty one.
        let early = SlidingWindowLogKeys::fresh(&p, 0, ns(SEC / 2));
        assert_eq!(
            SlidingWindowLogKeys::remaining(&p, Held::Known(&early), ns(0)),
            2
        );
    }

    #[test]
    fn tiers_clamp_an_index_past_the_end_to_the_last_tier() {
        let p = sealed::TieredPolicy(Box::new([
            <TokenBucketKeys as OneWord>::policy(&Quota::per_second(1).unwrap()).unwrap(),
            <TokenBucketKeys as OneWord>::policy(&Quota::per_second(5).unwrap()).unwrap(),
        ]));
        let state = Tiered::<TokenBucketKeys>::fresh(&p, 99, ns(0));
        assert_eq!(state.tier, 1);
        assert_eq!(
            Tiered::<TokenBucketKeys>::remaining(&p, Held::Known(&state), ns(0)),
            5
        );
        assert_eq!(
            Tiered::<TokenBucketKeys>::remaining(&p, Held::Fresh { tier: 0, at: ns(0) }, ns(0)),
            1
        );
    }
}
