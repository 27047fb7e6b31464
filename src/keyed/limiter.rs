//! [`KeyedLimiter`]: the map of per-key states and its checks (admissions, peeks, remaining
//! counts), with the protocol that creates a new key (or replaces a forgotten one) under its
//! shard's lock.

use std::borrow::Borrow;
use std::fmt;
use std::hash::Hash;
#[cfg(not(tollgate_loom))]
use std::sync::Weak;

use crossbeam_utils::CachePadded;

use super::change::{Ctx, Gen, MakePolicy};
use super::evict::{OverflowLimiter, DEFAULT_MAX_KEYS};
use super::store::{Slot, Store};
#[cfg(not(tollgate_loom))]
use super::sweeper::Bell;
use super::{Algorithm, KeyedError, TokenBucketKeys, TooManyKeys};
use crate::algorithm::never_gone;
use crate::algorithm::sealed::Held;
use crate::cas::Gone;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::limiter::KeyedLimit;
use crate::outcome::{AcquireError, Admitted};
use crate::quota::{Quota, QuotaError};
use crate::sync::Mutex;
use crate::sync::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// What an attempt to create a key under its shard's lock came to.
enum Created<T> {
    /// Decided: `true` when a key was inserted.
    Done(Result<T, KeyedError>, bool),
    /// Vacant, and no place left.
    Full,
}

/// A decision on a known key, with the tag of the state it was made on
/// ([`KeyedLimiter::decide_known`]).
type Tagged<T> = (T, Result<Admitted, AcquireError>);

/// The policy of a limiter of one quota: [`MakePolicy`] for every constructor but tiers'.
pub(super) fn one_policy<A: Algorithm>(quotas: &[Quota]) -> Result<A::Policy, QuotaError> {
    match quotas {
        [quota] => A::policy(quota),
        _ => Err(super::tiers::tiers_refused(quotas.len(), 1)),
    }
}

/// The function that picks a new key's tier.
pub(super) type Pick<K> = Box<dyn Fn(&K) -> usize + Send + Sync>;

/// What a request does to a key's state, for the protocol that creates a key
/// ([`KeyedLimiter::check_new`]): written once, whatever the request. [`Acquire`] is the
/// algorithm's admission (every `check_key*`); the keyed meter's scheduling
/// (`schedule_key*`, in `keyed::schedule`) is the other.
pub(super) trait Request<A: Algorithm> {
    /// What an admitted request answers.
    type Out;
    /// The request on a held state, or [`Gone`] if eviction marked it (then nothing took effect).
    fn held(
        &self,
        policy: &A::Policy,
        state: &A::State,
        now: Nanos,
        n: u64,
    ) -> Result<Result<Self::Out, AcquireError>, Gone>;
    /// The request on a key not held, fresh as of `fresh` in `tier`: the answer, and the state to
    /// insert if the request wrote (`None`: nothing was built).
    fn create(
        &self,
        policy: &A::Policy,
        tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<A::State>, Result<Self::Out, AcquireError>);
    /// The request on the shared overflow limiter's state.
    fn shared(
        &self,
        policy: &A::Policy,
        state: &A::State,
        now: Nanos,
        n: u64,
    ) -> Result<Self::Out, AcquireError>;
}

/// The algorithm's own admission: what `check_key*` asks of a key.
pub(super) struct Acquire;

impl<A: Algorithm> Request<A> for Acquire {
    type Out = Admitted;

    #[inline(always)]
    fn held(
        &self,
        policy: &A::Policy,
        state: &A::State,
        now: Nanos,
        n: u64,
    ) -> Result<Result<Admitted, AcquireError>, Gone> {
        A::acquire(policy, state, now, n)
    }

    fn create(
        &self,
        policy: &A::Policy,
        tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<A::State>, Result<Admitted, AcquireError>) {
        A::create(policy, tier, fresh, now, n)
    }

    fn shared(
        &self,
        policy: &A::Policy,
        state: &A::State,
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, AcquireError> {
        never_gone(A::acquire(policy, state, now, n))
    }
}

/// A rate limiter with one state per key, bounded memory and lossless eviction of idle keys.
///
/// `K` is the key type, `Hash + Eq + Clone` (a table that grows clones its keys rather than moving
/// them: see the module docs, "Sound for every key type"): lookups take any borrowed form of it
/// (`&str` for `String` keys). `A` is the
/// algorithm run per key ([`TokenBucketKeys`], the default); `C` the clock. See the
/// [module docs](super) for eviction, the memory bound and the protocol that makes them lossless.
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
    /// The keys' states; each table of it carries the generation (policy and quotas) its states
    /// are kept under (`keyed::change`).
    pub(super) store: Store<K, A::State, Ctx<A>>,
    /// The latest generation: the quota of each tier (one, unless tiered). Locked by a change
    /// for its whole length, so that changes are serialized; checks never take it.
    pub(super) latest: Mutex<Ctx<A>>,
    /// The policy of a list of tiers' quotas, for a change.
    pub(super) make_policy: MakePolicy<A>,
    /// The last generation number given (`keyed::change`).
    pub(super) generations: std::sync::atomic::AtomicU64,
    /// How many tiers (1 unless tiered): fixed at construction, so that a check needs no lock
    /// to bound a tier index.
    pub(super) tier_count: usize,
    /// The latest generation's quotas, for `quota` and `tiers`: locked for a copy, never for the
    /// length of a change.
    pub(super) quotas: Mutex<Box<[Quota]>>,
    /// The tier of a new key, for a tiered limiter.
    pub(super) pick: Option<Pick<K>>,
    pub(super) clock: C,
    pub(super) max_keys: usize,
    pub(super) overflow: Option<OverflowLimiter<A>>,
    /// Keys inserted plus places reserved for keys being inserted, minus keys removed: never below
    /// the map's length, never above `max_keys`. Moved by read-modify-writes only.
    pub(super) keys: CachePadded<AtomicUsize>,
    /// The latest reading any eviction used, in nanoseconds: a key created afresh is fresh as of
    /// `max(reading, floor)`. Only grows.
    pub(super) floor: AtomicU64,
    /// New keys (and refused new keys) since the last sweep started.
    pub(super) since_sweep: AtomicUsize,
    /// Held by the thread running an automatic sweep, so that only one runs at a time.
    pub(super) sweeping: AtomicBool,
    pub(super) evictions: AtomicU64,
    pub(super) overflowed: AtomicU64,
    /// The name and metric handles given by `with_name` (`keyed::observe`); `None` unnamed.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    pub(super) observed: Option<Box<super::observe::Observed>>,
    /// The bells of the sweeper threads started on this limiter, rung when it is dropped so that
    /// they end at once rather than at their next tick (or never, for `Duration::MAX`).
    #[cfg(not(tollgate_loom))]
    pub(super) sweepers: Mutex<Vec<Weak<Bell>>>,
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K, TokenBucketKeys, MonotonicClock> {
    /// A keyed token bucket for `quota` per key, on the default clock, with the default bound
    /// (2^20 keys) and overflow policy ([`Overflow::Refuse`](super::Overflow::Refuse)).
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

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, TokenBucketKeys, C> {
    /// A keyed token bucket for `quota` per key, reading time from `clock`. Every key starts full (the
    /// quota's initial fill is not used; see the [module docs](super)).
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
        let policy = TokenBucketKeys::policy_for(&quota);
        KeyedLimiter::build(
            policy,
            Box::new([quota]),
            one_policy::<TokenBucketKeys>,
            None,
            clock,
        )
    }
}

impl<K: Hash + Eq + Clone, A: Algorithm, C: Clock> KeyedLimiter<K, A, C> {
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
        Ok(KeyedLimiter::build(
            policy,
            Box::new([quota]),
            one_policy::<A>,
            None,
            clock,
        ))
    }

    /// The limiter for `policy`: what every public constructor builds.
    pub(super) fn build(
        policy: A::Policy,
        quotas: Box<[Quota]>,
        make_policy: MakePolicy<A>,
        pick: Option<Pick<K>>,
        clock: C,
    ) -> Self {
        let tier_count = quotas.len();
        let gen = Gen::first(policy, quotas.clone());
        KeyedLimiter {
            store: Store::new(std::sync::Arc::clone(&gen)),
            latest: Mutex::new(gen),
            make_policy,
            generations: std::sync::atomic::AtomicU64::new(0),
            tier_count,
            quotas: Mutex::new(quotas),
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
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            observed: None,
            #[cfg(not(tollgate_loom))]
            sweepers: Mutex::new(Vec::new()),
        }
    }

    /// Takes one token for `key` now.
    ///
    /// # Errors
    ///
    /// [`KeyedError::Denied`] when the key (or, for a new key that found no room, the shared
    /// overflow limiter) has no token now; [`KeyedError::TooManyKeys`] for a new key that found no
    /// room under [`Overflow::Refuse`](super::Overflow::Refuse), whatever the key's own state would have answered.
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

    /// A request for `n` on `key` at the reading `now()` gives: always inlined, so that the
    /// outcome is built in the caller, which drops what it does not read (a caller reading only
    /// `is_ok()` pays for the decision and none of the description); the lookup and the
    /// decision are [`KeyedLimiter::decide_known`], the unknown key's path is out of line.
    #[inline(always)]
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
        match self.decide_known(key, n, now, |_| ()) {
            (_, Some(((), answer))) => {
                let answer = answer.map_err(KeyedError::from);
                #[cfg(feature = "metrics")]
                self.observe_decision(&answer);
                answer
            }
            // Counted in `check_unknown`, out of line.
            (now, None) => self.check_unknown(key, n, now),
        }
    }

    /// The decision on a known key: the reading, and the answer with `tag` of the state decided
    /// on (`None`: the key is not in the table, or eviction marked its state gone, or this
    /// thread has no epoch slot; nothing took effect).
    /// The reading is taken before the lookup enters the table's epoch: a clock is user code,
    /// and a reader parked inside the epoch would hold the table's removed entries (see the
    /// module docs, "Bounded memory").
    #[inline]
    pub(super) fn decide_known<Q, T>(
        &self,
        key: &Q,
        n: u64,
        now: impl Fn() -> Nanos,
        tag: impl Fn(&A::State) -> T,
    ) -> (Nanos, Option<Tagged<T>>)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        // A known key: the decision is the algorithm's own compare-and-swap on the key's state.
        // If eviction marked the state gone (its key forgotten), the decision took effect nowhere,
        // and the key is decided as new (see the module docs).
        // Decide small, describe once: the decision answers the verdict (for a one-word
        // algorithm, the word decided on), and the outcome is described from it once, with the
        // policy of the table the state was found in (a quota change replaces tables with their
        // policies: see `keyed::change`), inline, so a caller that reads only `is_ok()` drops
        // the description.
        // The reading is taken after the table is asked to fetch the key's lines (their misses
        // overlap the clock's work) and before the lookup enters the epoch.
        // Decided with the policy of the table the state is in (a growth or a quota change
        // seals a state and the lookup decides on its successor, whose table may carry another
        // policy), and described with the same one, still inside the lookup.
        self.store.with_read_after(
            key,
            now,
            // Inlined into the lookup: the decision's arithmetic is the check's hot path. The tag
            // is of the state decided on (a growth or a quota change may send the decision to a
            // successor, which keeps what a tag reads: the tier).
            #[inline(always)]
            move |ctx, state, now| {
                let verdict = A::verdict(&ctx.policy, state, now, n)?;
                Ok((tag(state), verdict))
            },
            #[inline(always)]
            move |ctx, (tagged, verdict), now| (tagged, A::describe(&ctx.policy, verdict, now, n)),
        )
    }

    /// A key not in the table (or whose state eviction marked gone) at `now`: a query answers
    /// without creating it; a request creates it ([`KeyedLimiter::check_new`]).
    #[cold]
    #[inline(never)]
    pub(super) fn check_unknown<Q>(
        &self,
        key: &Q,
        n: u64,
        now: Nanos,
    ) -> Result<Admitted, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let answer = if n == 0 {
            self.peek_key_n_at(key, 0, now)
        } else {
            self.check_new(&Acquire, key, n, now)
        };
        #[cfg(feature = "metrics")]
        self.observe_decision(&answer);
        answer
    }

    /// `req` for `n >= 1` on `key`: decided on its state without a lock when the key is held,
    /// else created (or sent to the overflow policy) by [`KeyedLimiter::check_new`].
    pub(super) fn request_key<R: Request<A>, Q>(
        &self,
        req: &R,
        key: &Q,
        n: u64,
        now: Nanos,
    ) -> Result<R::Out, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let known = self
            .store
            .with_read(key, |ctx, state| req.held(&ctx.policy, state, now, n));
        match known {
            Some(Ok(outcome)) => outcome.map_err(KeyedError::from),
            _ => self.check_new(req, key, n, now),
        }
    }

    /// The slow path: `key` was not there a moment ago (or its state was gone). Creates it under
    /// its shard's lock (or admits on it, if another thread created it meanwhile; or replaces
    /// a state eviction has marked gone and not yet removed), sweeping first if the map is full
    /// and a sweep is due; failing that, the overflow policy.
    #[cold]
    pub(super) fn check_new<R: Request<A>, Q>(
        &self,
        req: &R,
        key: &Q,
        n: u64,
        now: Nanos,
    ) -> Result<R::Out, KeyedError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        for attempt in 0..2 {
            let created = self
                .store
                .with_entry(key.to_owned(), |ctx, slot| match slot {
                    Slot::Occupied(key, state) => match req.held(&ctx.policy, state, now, n) {
                        // Another thread created it between our lookup and our lock.
                        Ok(outcome) => (
                            None,
                            Created::Done(outcome.map_err(KeyedError::from), false),
                        ),
                        // Forgotten, and not yet removed: created afresh in its place, which it keeps
                        // (the eviction then finds another state there and removes nothing, so the
                        // place passes to the new state without being given back or reserved). Only
                        // a request that writes replaces it; one that does not leaves the gone state
                        // for the eviction to remove.
                        Err(Gone) => {
                            let tier = self.tier_of(key);
                            let (state, outcome) = self.create_in(ctx, req, tier, now, n);
                            let replaced = state.is_some();
                            (
                                state,
                                Created::Done(outcome.map_err(KeyedError::from), replaced),
                            )
                        }
                    },
                    // Room first: on a full map every newcomer gets the overflow policy, whatever its
                    // own state would answer (a reading below the floor would be denied: the answer
                    // must say there is no room, not "later"), and no state is built for it (a log
                    // is 8 N bytes).
                    Slot::Vacant(_) if !self.has_room() => (None, Created::Full),
                    Slot::Vacant(key) => {
                        let tier = self.tier_of(key);
                        match self.create_in(ctx, req, tier, now, n) {
                            // The place is reserved under the shard lock, so a second thread creating
                            // the same key waits for the lock and then finds it occupied: one
                            // reservation, one state, both admissions counted. (Another key may have
                            // taken the last place since the check above: then the state just built
                            // is dropped, and the request gets the overflow policy.)
                            (Some(state), outcome) => {
                                if self.reserve() {
                                    (
                                        Some(state),
                                        Created::Done(outcome.map_err(KeyedError::from), true),
                                    )
                                } else {
                                    (None, Created::Full)
                                }
                            }
                            // A request that writes nothing leaves the key as if never seen: no need
                            // to hold a place for it.
                            (None, outcome) => (
                                None,
                                Created::Done(outcome.map_err(KeyedError::from), false),
                            ),
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
                // No room: if a sweep is due, run it (holding no lock), or if removed keys wait
                // to be freed, free what no reader holds, and try once more.
                Created::Full => {
                    if attempt > 0 {
                        break;
                    }
                    let swept = self.note_new_key(now);
                    if !swept && !self.reclaimed_room() {
                        break;
                    }
                }
            }
        }
        self.overflow_take(req, n, now)
    }

    /// `req` on a key not held, created in the generation `ctx` of its shard's table: fresh as of
    /// `max(now, floor)`, or, while a quota change settles, from the settled state (see
    /// `keyed::change`). The state to insert if the request wrote, and the answer.
    fn create_in<R: Request<A>>(
        &self,
        ctx: &Gen<A>,
        req: &R,
        tier: usize,
        now: Nanos,
        n: u64,
    ) -> (Option<A::State>, Result<R::Out, AcquireError>) {
        match ctx.settling(tier) {
            None => req.create(&ctx.policy, tier, self.fresh_at(now), now, n),
            // Not yet shared, so never marked gone; a refusal writes nothing, and the key stays
            // as it was (not held), answering the same again.
            Some(state) => match req.held(&ctx.policy, &state, now, n) {
                Ok(Ok(out)) => (Some(state), Ok(out)),
                Ok(Err(refused)) => (None, Err(refused)),
                // Never: the state is this thread's own.
                Err(Gone) => req.create(&ctx.policy, tier, self.fresh_at(now), now, n),
            },
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
        let known = self.store.with_read(key, |ctx, state| {
            A::peek(&ctx.policy, Held::Known(state), now, n)
        });
        let gone = match known {
            Some(Ok(outcome)) => return outcome.map_err(KeyedError::from),
            Some(Err(Gone)) => true,
            None => false,
        };
        // A query, room for the key (Relaxed: a snapshot of the count, as any answer about a key
        // not yet created is), or a key forgotten and not yet removed (a request would take its
        // place): a fresh key's answer.
        if n == 0 || gone || self.has_room() {
            return self
                .on_absent_key(key, now, |policy, state| {
                    never_gone(A::peek(policy, state, now, n))
                })
                .map_err(KeyedError::from);
        }
        match &self.overflow {
            None => Err(KeyedError::TooManyKeys(TooManyKeys {
                max_keys: self.max_keys,
            })),
            Some(shared) => never_gone(A::peek(&shared.policy, Held::Known(&shared.state), now, n))
                .map_err(KeyedError::from),
        }
    }

    /// `f` on `key`, not in the map, as a decision sees it, with the policy of its shard's
    /// table: fresh as of `max(now, floor)` in the tier it would get, or, while a quota change
    /// settles, the settled state (see `keyed::change`).
    fn on_absent_key<Q, R>(
        &self,
        key: &Q,
        now: Nanos,
        f: impl FnOnce(&A::Policy, Held<'_, A::State>) -> R,
    ) -> R
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        // User code (`Clone`, the tier picker), before the table's epoch is entered.
        let tier = match &self.pick {
            None => 0,
            Some(_) => self.tier_of(&key.to_owned()),
        };
        let at = self.fresh_at(now);
        self.store.with_ctx(key, |ctx| match ctx.settling(tier) {
            Some(state) => f(&ctx.policy, Held::Known(&state)),
            None => f(&ctx.policy, Held::Fresh { tier, at }),
        })
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
        match self.store.with_read(key, |ctx, state| {
            A::remaining(&ctx.policy, Held::Known(state), now)
        }) {
            Some(Ok(remaining)) => remaining,
            // Not held, or forgotten and not yet removed: a fresh key's.
            Some(Err(Gone)) | None => self.on_absent_key(key, now, |policy, state| {
                never_gone(A::remaining(policy, state, now))
            }),
        }
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
        // A state eviction has marked gone is forgotten, even before it is removed.
        matches!(
            self.store.with_read(key, |_, state| if A::is_gone(state) {
                Err(Gone::seen())
            } else {
                Ok(())
            }),
            Some(Ok(()))
        )
    }

    /// The quota each key gets (a tiered limiter's first tier): the latest one set.
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(3)?;
    /// let limiter: tollgate::keyed::KeyedLimiter<u8> = tollgate::keyed::KeyedLimiter::new(q);
    /// assert_eq!(limiter.quota(), q);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        // Every constructor gives at least one quota.
        crate::sync::lock(&self.quotas)[0]
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
}

impl<K, A: Algorithm, C> fmt::Debug for KeyedLimiter<K, A, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("quotas", &*crate::sync::lock(&self.quotas))
            // Relaxed: a snapshot for display.
            .field("keys", &self.keys.load(Ordering::Relaxed))
            .field("max_keys", &self.max_keys)
            .field("overflow", &self.overflow.as_ref().map(|s| s.quota))
            .finish_non_exhaustive()
    }
}

impl<K, Q, A, C> KeyedLimit<Q> for KeyedLimiter<K, A, C>
where
    K: Hash + Eq + Clone + Borrow<Q> + Send + Sync,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    A: Algorithm,
    C: Clock,
{
    #[inline]
    fn check_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
        KeyedLimiter::check_key_n_at(self, key, n, now)
    }

    fn peek_key_n_at(&self, key: &Q, n: u64, now: Nanos) -> Result<Admitted, KeyedError> {
        KeyedLimiter::peek_key_n_at(self, key, n, now)
    }

    fn remaining_key_at(&self, key: &Q, now: Nanos) -> u64 {
        KeyedLimiter::remaining_key_at(self, key, now)
    }

    #[inline]
    fn now(&self) -> Nanos {
        self.clock().now()
    }

    fn quota(&self) -> Quota {
        KeyedLimiter::quota(self)
    }

    fn tiers(&self) -> Vec<Quota> {
        KeyedLimiter::tiers(self)
    }

    fn tier_of_key(&self, key: &Q) -> usize {
        KeyedLimiter::tier_of_key(self, key)
    }

    // The tier from the lookup that decides, not from a second one (see
    // `KeyedLimiter::check_key_n_and_tier`).
    #[inline]
    fn check_key_n_and_tier(&self, key: &Q, n: u64) -> (usize, Result<Admitted, KeyedError>) {
        KeyedLimiter::check_key_n_and_tier(self, key, n)
    }

    // The clock-reading forms are the inherent ones, not the trait's defaults: `check_key` and
    // `check_key_n` read the clock after the lookup has fetched the key's lines (see
    // `KeyedLimiter::decide_known`), which the defaults, reading it first, would lose.

    #[inline]
    fn check_key(&self, key: &Q) -> Result<Admitted, KeyedError> {
        KeyedLimiter::check_key(self, key)
    }

    #[inline]
    fn check_key_n(&self, key: &Q, n: u64) -> Result<Admitted, KeyedError> {
        KeyedLimiter::check_key_n(self, key, n)
    }

    fn peek_key_n(&self, key: &Q, n: u64) -> Result<Admitted, KeyedError> {
        KeyedLimiter::peek_key_n(self, key, n)
    }

    fn remaining_key(&self, key: &Q) -> u64 {
        KeyedLimiter::remaining_key(self, key)
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use std::hash::Hasher;
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;

    thread_local! {
        /// The clock of the limiters below, advanced by a second each time their key is hashed.
        static CLOCK: ManualClock = ManualClock::new();
    }

    /// A key whose hashing (the lookup's first step) moves the clock a second on.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Ticking;

    impl Hash for Ticking {
        fn hash<H: Hasher>(&self, state: &mut H) {
            CLOCK.with(|clock| clock.advance(Duration::from_secs(1)));
            state.write_u8(0);
        }
    }

    /// A limiter of 1 a second whose one key has just used its token, as of the clock's reading
    /// now (the hashing of the set-up has moved the clock on; it is set back).
    fn spent() -> KeyedLimiter<Ticking, TokenBucketKeys, ManualClock> {
        let clock = CLOCK.with(ManualClock::clone);
        let limiter = KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), clock.clone());
        let now = clock.now();
        limiter.check_key_n_at(&Ticking, 1, now).unwrap();
        clock.set(now);
        limiter
    }

    #[test]
    fn the_trait_reads_the_clock_after_the_lookup_as_the_inherent_methods_do() {
        // Read before the lookup, the clock says the token is still spent; read after it (the
        // hashing moved it a second on), the token is back.
        let inherent = spent();
        assert!(inherent.check_key(&Ticking).is_ok());
        let inherent = spent();
        assert!(inherent.check_key_n(&Ticking, 1).is_ok());
        let limiter = spent();
        let through: &dyn KeyedLimit<Ticking> = &limiter;
        assert!(through.check_key(&Ticking).is_ok());
        let limiter = spent();
        let through: &dyn KeyedLimit<Ticking> = &limiter;
        assert!(through.check_key_n(&Ticking, 1).is_ok());
        // The `_at` form, given the reading from before the lookup, is refused: the order is
        // what the answers above show.
        let limiter = spent();
        let before = KeyedLimit::now(&limiter);
        assert!(KeyedLimit::check_key_n_at(&limiter, &Ticking, 1, before).is_err());
    }
}
