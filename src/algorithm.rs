//! The contract every rate-limiting algorithm of the crate implements, in its own file.
//!
//! An algorithm is an immutable *policy* (constants derived once from a [`Quota`]), a *state* per
//! limited thing (one `AtomicU64` for most algorithms, a ring for the sliding log) and a pure
//! *decision* on that state at a reading of the clock. The direct limiters
//! ([`Direct`](crate::Direct): [`TokenBucket`](crate::TokenBucket),
//! [`FixedWindow`](crate::window::FixedWindow), ...) hold one state beside a clock; the
//! [`KeyedLimiter`](crate::keyed::KeyedLimiter) holds a map of states. Both are written once,
//! over this contract, for every algorithm.
//!
//! The contract is sealed: [`Algorithm`] is public so that code can be generic over it and name
//! its marker types, but its methods live in a private supertrait that only the crate implements.
//!
//! # The decisions
//!
//! Each decision has one form, for both limiters: `acquire_one` (the direct limiter's hot path),
//! `acquire` (`n`, all or none: `verdict` described by `describe`, the two halves the keyed
//! lookup calls apart), `peek` and `remaining`, and `create` for a key the keyed limiter does not
//! hold. Every one that takes a held state may find it sealed (a quota change replaces a direct
//! limiter's state as it does a key's) or, for a key, marked gone by eviction: it then answers
//! `Gone`, having taken no effect, and the caller decides again where the state went. `peek` and
//! `remaining` take a `Held`, so that they also answer for a key not held, from the fresh state it
//! would get, without building it (never `Gone`). A state nothing seals or evicts (one built for
//! the answer, the keyed limiter's shared overflow state) is read through `never_gone`.
//!
//! # The markers
//!
//! | marker | algorithm | state |
//! | --- | --- | --- |
//! | [`TokenBucketAlgorithm`] | [token bucket](crate::token_bucket) (GCRA) | one word |
//! | [`LeakyMeterAlgorithm`] | [leaky bucket as a meter](crate::leaky::meter), strict admission | one word |
//! | [`FixedWindowAlgorithm`] | [fixed window](crate::window::fixed) | one word |
//! | [`SlidingWindowCounterAlgorithm`] | [two-window sliding counter](crate::window::sliding_counter) | one word |
//! | [`SlidingWindowLogAlgorithm`] | [sliding window log](crate::window::sliding_log) | a ring of N timestamps |
//!
//! ```
//! use tollgate::{Algorithm, Direct, ManualClock, Quota, TokenBucketAlgorithm};
//!
//! // Any direct limiter, whatever its algorithm.
//! fn spare<A: Algorithm>(limiter: &Direct<A, ManualClock>) -> u64 {
//!     limiter.remaining()
//! }
//! let bucket: Direct<TokenBucketAlgorithm, _> =
//!     Direct::with_algorithm(Quota::per_second(3)?, ManualClock::new())?;
//! assert_eq!(spare(&bucket), 3);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # The one-word algorithms
//!
//! An algorithm whose whole state is one `AtomicU64` implements the narrower
//! `OneWord` contract: a pure `decide(policy, word, now, n)` answering a
//! `Step` (write this word and admit, admit without a write, or refuse), and the
//! rest of the contract follows from it once, here: the decision runs in the crate's one
//! compare-and-swap loop (`cas::update`), refusing the sealed or gone mark as `Gone`, denials and
//! peeks only read, and a key the keyed limiter does not hold is decided on without being built.
//! The token bucket and the leaky meter go one step further: both store the GCRA's theoretical
//! arrival time, so they share one core (`src/gcra.rs`) and differ only in their decision.
//!
//! # Adding an algorithm
//!
//! Write its policy, its state and its decision in its own file and implement `OneWord` (or, for a
//! state of several words, the whole contract) on a new marker; make the limiter a type alias of
//! [`Direct`](crate::Direct) with the constructors its quota rules call for. The facade, the
//! [`Limiter`](crate::Limiter) trait, the keyed limiter (with lossless eviction, from `fresh_word`
//! and `is_fresh`) and tiers then come with it; its own tests, reference model, fuzz target, loom
//! model and bench rows remain to be written.

use crate::cas::{self, Gone, Step};
use crate::clock::Nanos;
use crate::outcome::{AcquireError, Admitted, Denied, InsufficientCapacity};
use crate::quota::{Quota, QuotaError};
use crate::sync::AtomicU64;

/// The internals of [`Algorithm`]. Public in a private module so that they can appear in the
/// public trait's bounds without being nameable, or implementable, outside the crate.
pub(crate) mod sealed {
    use super::{AcquireError, Admitted, Denied, Gone, Nanos, Quota, QuotaError, Step};

    /// A state as a decision sees it: one that is held, or one that is not (a key the keyed
    /// limiter does not hold: fresh as of `at`, in tier `tier`, and not built unless a decision
    /// writes to it).
    pub enum Held<'a, S> {
        /// A state that exists.
        Known(&'a S),
        /// A state that would be created afresh.
        Fresh {
            /// Its tier (0 unless tiered).
            tier: usize,
            /// The reading it is fresh as of.
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

    /// How the keyed table's rebuild carries a state into the new table while readers may still
    /// use the old one (see `keyed/table.rs`, "Layout").
    pub trait Relocate: Sized {
        /// A copy of the state for the new table.
        fn copy(&self) -> Self;
        /// Once `copy` is in the new table: makes every later decision on `self` take effect
        /// only in `copy`, after bringing `copy` up to date with any decision made on `self`
        /// since it was taken. A one-word state is sealed gone (decisions on it answer
        /// [`Gone`](crate::cas::Gone), and the table sends them to the copy); a state on the
        /// heap is shared by both, and needs nothing. `self` stays a valid state, dropped with
        /// the old table.
        fn seal(&self, copy: &Self);
        /// A quota change's move of a state it does not convert (a tier whose quota stays): the
        /// state as it is, for the new table, with `self` sealed as [`Relocate::seal`] leaves it
        /// (a one-word state swapped to the gone mark; a state on the heap shared).
        fn take(&self) -> Self;
    }

    /// What every algorithm provides. A request for `n` may ask for any `n`: 0 is a query that
    /// always succeeds, more than the capacity is [`InsufficientCapacity`](crate::InsufficientCapacity).
    pub trait Contract: Send + Sync + 'static {
        /// The constants derived from the quota, shared by every state.
        type Policy: Send + Sync + std::fmt::Debug;
        /// One limited thing's state.
        type State: Send + Sync + Relocate;

        /// The direct limiter's name, for `Debug`.
        const NAME: &'static str;

        /// The policy for `quota`, or why this algorithm cannot enforce it (naming the field).
        fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError>;
        /// Anchors a direct limiter's policy at its construction reading `now`, before
        /// [`Contract::initial`]: the GCRA's limiters lay their time units so that `now` starts
        /// one (see `Gcra::begin_at`); the others change nothing.
        fn begin(_policy: &mut Self::Policy, _now: Nanos) {}
        /// A direct limiter's first state: the quota's initial fill as of `now`.
        fn initial(policy: &Self::Policy, quota: &Quota, now: Nanos) -> Self::State;
        /// The state of a key created afresh, fresh as of `at`: identical to a never-used state
        /// at readings from `at` on, and admitting no more than any forgettable state (below) at
        /// earlier readings.
        fn fresh(policy: &Self::Policy, tier: usize, at: Nanos) -> Self::State;
        /// Admits one on `state` at `now`, or says when it could (every capacity is at least 1):
        /// the direct limiter's hot path. If a quota change sealed the state (or eviction marked
        /// a keyed one gone), nothing took effect, and the answer is [`Gone`].
        fn acquire_one(
            policy: &Self::Policy,
            state: &Self::State,
            now: Nanos,
        ) -> Result<Result<Admitted, Denied>, Gone>;
        /// Admits `n` on `state` at `now`, all or none, or says why not: the decision, applied; or
        /// [`Gone`] as for [`Contract::acquire_one`]. Not overridden: [`Contract::verdict`]
        /// described by [`Contract::describe`], in one call (the direct limiter's, and the keyed
        /// limiter's lock path; the keyed lookup calls the two halves itself).
        #[inline]
        fn acquire(
            policy: &Self::Policy,
            state: &Self::State,
            now: Nanos,
            n: u64,
        ) -> Result<Result<Admitted, AcquireError>, Gone> {
            let verdict = Self::verdict(policy, state, now, n)?;
            Ok(Self::describe(policy, verdict, now, n))
        }
        /// What [`Contract::verdict`] decides: as little as lets [`Contract::describe`] rebuild
        /// the whole outcome (for a one-word algorithm, the word it decided on).
        type Verdict;
        /// [`Contract::acquire`] split in two, so that the part run inside the keyed table's
        /// lookup (and its epoch) returns a word or two in registers: the decision, taking effect
        /// on `state` exactly as `acquire`'s does, answering what it decided on, or [`Gone`]
        /// (nothing took effect). Followed by [`Contract::describe`] with the same `now` and `n`.
        fn verdict(
            policy: &Self::Policy,
            state: &Self::State,
            now: Nanos,
            n: u64,
        ) -> Result<Self::Verdict, Gone>;
        /// The outcome of a [`Contract::verdict`]: what `acquire` answers. Built outside the
        /// lookup, inline, so a caller that reads only `is_ok()` pays for none of it.
        fn describe(
            policy: &Self::Policy,
            verdict: Self::Verdict,
            now: Nanos,
            n: u64,
        ) -> Result<Admitted, AcquireError>;
        /// The answer [`Contract::acquire`] would give, writing nothing: on a held state, which
        /// may be sealed or gone ([`Gone`]), or on a key not held, decided on without building
        /// its state (never [`Gone`]).
        fn peek(
            policy: &Self::Policy,
            state: Held<'_, Self::State>,
            now: Nanos,
            n: u64,
        ) -> Result<Result<Admitted, AcquireError>, Gone>;
        /// Whole admissions available at `now`, or [`Gone`] as for [`Contract::peek`].
        fn remaining(
            policy: &Self::Policy,
            state: Held<'_, Self::State>,
            now: Nanos,
        ) -> Result<u64, Gone>;
        /// A request for `n` on a key that is not held, fresh as of `fresh`: the answer, and the
        /// state to insert if the request changed it (`None`: the key stays as if never seen, and
        /// nothing was built).
        fn create(
            policy: &Self::Policy,
            tier: usize,
            fresh: Nanos,
            now: Nanos,
            n: u64,
        ) -> (Option<Self::State>, Result<Admitted, AcquireError>);
        /// Eviction: if `state` is indistinguishable, at `now` and at every later reading, from
        /// the fresh state of `now`, marks it gone, so that no decision can take effect on it
        /// any more, and answers `true`; otherwise (or if a decision changed it meanwhile)
        /// changes nothing and answers `false`. Decisions may run concurrently.
        fn evict(policy: &Self::Policy, state: &Self::State, now: Nanos) -> bool;
        /// Whether eviction has marked `state` gone.
        fn is_gone(state: &Self::State) -> bool;
        /// The tier a keyed state was created in: 0 but for [`Tiered`](crate::keyed::Tiered).
        fn tier_of(_state: &Self::State) -> usize {
            0
        }
        /// Adds the state's fields to a limiter's `Debug` output.
        fn debug_state(
            policy: &Self::Policy,
            state: &Self::State,
            f: &mut std::fmt::DebugStruct<'_, '_>,
        );
        /// The most one request may ask for.
        fn capacity(policy: &Self::Policy) -> u64;
        /// Seals `state` for a quota change (see `crate::change`): afterwards no decision takes
        /// effect on it (each answers [`Gone`]). Answers the whole admissions it had left at
        /// `now`, as its last decision left it (0 if it was sealed already). Decisions may run
        /// concurrently.
        fn seal(policy: &Self::Policy, state: &Self::State, now: Nanos) -> u64;
        /// Sets `state`, made by [`Contract::initial`] for `policy` and not yet shared, to hold
        /// `available` (at most the capacity) whole admissions at `now` and fewer at earlier
        /// readings, refilling (or opening windows) by `policy` from there: a quota change's
        /// conversion (see `crate::change`, "The rule").
        fn refill(policy: &Self::Policy, state: &Self::State, available: u64, now: Nanos);
        /// Carries what a quota change keeps from the old policy into the new one, after
        /// [`Contract::begin`]: the windows' alignment; nothing for the others.
        fn carry(_old: &Self::Policy, _new: &mut Self::Policy) {}
        /// A keyed limiter's quota change (see `keyed::change`): seals `state`, kept under `old`,
        /// and answers its successor under `new` by the crate's rule (the whole admissions it
        /// had left at `now`, at most the new capacity, refilling by `new` from there). A state
        /// marked gone stays gone. `changed[t]` says whether tier `t`'s quota changed: a
        /// [`Tiered`](crate::keyed::Tiered) state of a tier that did not is moved as it is
        /// ([`Relocate::take`]); the others convert whatever it says.
        fn converted(
            old: &Self::Policy,
            new: &Self::Policy,
            state: &Self::State,
            now: Nanos,
            changed: &[bool],
        ) -> Self::State;
        /// The state of a key not held during a quota change's settling (see `keyed::change`):
        /// `available` (at most the capacity) whole admissions at `at`, fewer before, refilling
        /// by `policy` from there, in tier `tier`.
        fn settled(policy: &Self::Policy, tier: usize, available: u64, at: Nanos) -> Self::State;
    }

    /// An algorithm whose whole state is one word: what it provides, from which [`Contract`]
    /// follows.
    pub trait OneWord: Send + Sync + 'static {
        /// The constants derived from the quota.
        type Policy: Send + Sync + std::fmt::Debug;
        /// A reading converted to the policy's units.
        type Time: Copy;

        /// The direct limiter's name, for `Debug`.
        const NAME: &'static str;

        /// As [`Contract::policy`].
        fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError>;
        /// A reading in the policy's units.
        fn time(policy: &Self::Policy, now: Nanos) -> Self::Time;
        /// The most one request may ask for: a larger one is [`InsufficientCapacity`](crate::InsufficientCapacity).
        fn capacity(policy: &Self::Policy) -> u64;
        /// As [`Contract::begin`].
        fn begin(_policy: &mut Self::Policy, _now: Nanos) {}
        /// The word of a direct limiter with the quota's initial fill at `now`.
        fn initial_word(policy: &Self::Policy, quota: &Quota, now: Self::Time) -> u64;
        /// The word of a key created afresh, fresh as of `at` (see [`Contract::fresh`]).
        fn fresh_word(policy: &Self::Policy, at: Nanos) -> u64;
        /// Is `word` indistinguishable, at `now` and at every later reading, from a fresh word?
        fn is_fresh(policy: &Self::Policy, word: u64, now: Self::Time) -> bool;
        /// The decision: admits `n` (`1..=capacity`) on `word` at `now`, or says when it could.
        /// Pure: no atomics, no clock.
        fn decide(
            policy: &Self::Policy,
            word: u64,
            now: Self::Time,
            n: u64,
        ) -> Step<Admitted, Denied>;
        /// The decision's verdict alone: the word to write, or admit without a write, or refuse,
        /// and nothing built to describe it. The keyed check decides with it inside the table's
        /// lookup and describes the outcome afterwards from the word it decided on (see
        /// [`Contract::verdict`]). Must agree with [`OneWord::decide`]; this default derives
        /// it from there, and an algorithm whose outcome costs more than its test answers it
        /// directly.
        #[inline]
        fn judge(policy: &Self::Policy, word: u64, now: Self::Time, n: u64) -> Step<(), ()> {
            match Self::decide(policy, word, now, n) {
                Step::Write(new, _) => Step::Write(new, ()),
                Step::Keep(_) => Step::Keep(()),
                Step::Refuse(_) => Step::Refuse(()),
            }
        }
        /// The decision's outcome alone, without its write: what [`OneWord::decide`] answers.
        /// Must agree with it; this default derives it from there.
        #[inline]
        fn outcome(
            policy: &Self::Policy,
            word: u64,
            now: Self::Time,
            n: u64,
        ) -> Result<Admitted, Denied> {
            match Self::decide(policy, word, now, n) {
                Step::Write(_, admitted) | Step::Keep(admitted) => Ok(admitted),
                Step::Refuse(denied) => Err(denied),
            }
        }
        /// The decision with its admission's outcome and without its refusal's: what the direct
        /// limiters' compare-and-swap loop runs, describing a refusal only after it (from the
        /// word refused, with [`OneWord::outcome`]). Must agree with [`OneWord::decide`]; this
        /// default derives it from there, and an algorithm whose refusal is built out of line
        /// answers it directly.
        #[inline]
        fn admit(policy: &Self::Policy, word: u64, now: Self::Time, n: u64) -> Step<Admitted, ()> {
            match Self::decide(policy, word, now, n) {
                Step::Write(new, admitted) => Step::Write(new, admitted),
                Step::Keep(admitted) => Step::Keep(admitted),
                Step::Refuse(_) => Step::Refuse(()),
            }
        }
        /// What a request for nothing reports.
        fn query(policy: &Self::Policy, word: u64, now: Self::Time) -> Admitted;
        /// Whole admissions available at `now`.
        fn remaining(policy: &Self::Policy, word: u64, now: Self::Time) -> u64;
        /// The word with `available` (at most the capacity) whole admissions at `now` and fewer
        /// at earlier readings: see [`Contract::refill`].
        fn available_word(policy: &Self::Policy, available: u64, now: Self::Time) -> u64;
        /// As [`Contract::carry`].
        fn carry(_old: &Self::Policy, _new: &mut Self::Policy) {}
        /// Adds the word's fields to a limiter's `Debug` output: the raw word unless the
        /// algorithm decodes it.
        fn debug_word(_policy: &Self::Policy, word: u64, f: &mut std::fmt::DebugStruct<'_, '_>) {
            f.field("word", &word);
        }
    }
}

use sealed::{Contract, Held, OneWord};

/// A rate-limiting algorithm of the crate: what [`Direct`](crate::Direct) and
/// [`KeyedLimiter`](crate::keyed::KeyedLimiter) are generic over. Sealed: implemented by the
/// marker types listed in the [module docs](self) only (and by
/// [`Tiered`](crate::keyed::Tiered) for keyed limiters).
///
/// # Examples
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::{Algorithm, Quota};
/// fn keys<A: Algorithm>(limiter: &KeyedLimiter<u64, A>) -> usize {
///     limiter.len()
/// }
/// let limiter: KeyedLimiter<u64> = KeyedLimiter::new(Quota::per_second(5)?);
/// assert_eq!(keys(&limiter), 0);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Algorithm: Contract {}

impl<T: Contract> Algorithm for T {}

/// The token bucket as an [`Algorithm`]: the marker of
/// [`TokenBucket`](crate::TokenBucket) and, per key, of
/// [`KeyedLimiter`](crate::keyed::KeyedLimiter)'s default
/// ([`TokenBucketKeys`](crate::keyed::TokenBucketKeys)). The state is the GCRA's one word (see
/// `src/gcra.rs`); a key is forgettable once its bucket is full again.
///
/// # Examples
///
/// ```
/// use tollgate::{Direct, ManualClock, Quota, TokenBucket, TokenBucketAlgorithm};
/// // The alias and the generic form are one type.
/// let bucket: Direct<TokenBucketAlgorithm, _> = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert_eq!(bucket.remaining(), 2);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenBucketAlgorithm;

/// The leaky bucket as a meter, with strict admission, as an [`Algorithm`]: the
/// marker of [`LeakyMeter`](crate::leaky::LeakyMeter) and, per key, of
/// [`LeakyMeterKeys`](crate::keyed::LeakyMeterKeys). The state is the GCRA's one word, the
/// queue's drain time; a key is forgettable once its queue is empty again.
///
/// # Examples
///
/// ```
/// use tollgate::leaky::LeakyMeter;
/// use tollgate::{Direct, LeakyMeterAlgorithm, ManualClock, Quota};
/// let meter: Direct<LeakyMeterAlgorithm, _> = LeakyMeter::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert_eq!(meter.remaining(), 2);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LeakyMeterAlgorithm;

/// The fixed window as an [`Algorithm`]: the marker of
/// [`FixedWindow`](crate::window::FixedWindow) and, per key, of
/// [`FixedWindowKeys`](crate::keyed::FixedWindowKeys). The state is one word (window index
/// and count); a key is forgettable once its window is over.
///
/// # Examples
///
/// ```
/// use tollgate::window::FixedWindow;
/// use tollgate::{Direct, FixedWindowAlgorithm, ManualClock, Quota};
/// let window: Direct<FixedWindowAlgorithm, _> = FixedWindow::with_clock(Quota::per_second(2)?, ManualClock::new())?;
/// assert_eq!(window.remaining(), 2);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FixedWindowAlgorithm;

/// The two-window sliding counter as an [`Algorithm`]: the marker of
/// [`SlidingWindowCounter`](crate::window::SlidingWindowCounter) and, per key, of
/// [`SlidingWindowCounterKeys`](crate::keyed::SlidingWindowCounterKeys). The state is one word
/// (`index | prev | cur`); a key is forgettable once both windows it counts have passed.
///
/// # Examples
///
/// ```
/// use tollgate::window::SlidingWindowCounter;
/// use tollgate::{Direct, ManualClock, Quota, SlidingWindowCounterAlgorithm};
/// let counter: Direct<SlidingWindowCounterAlgorithm, _> =
///     SlidingWindowCounter::with_clock(Quota::per_second(2)?, ManualClock::new())?;
/// assert_eq!(counter.remaining(), 2);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlidingWindowCounterAlgorithm;

/// The sliding window log as an [`Algorithm`]: the marker of
/// [`SlidingWindowLog`](crate::window::SlidingWindowLog) and, per key, of
/// [`SlidingWindowLogKeys`](crate::keyed::SlidingWindowLogKeys).
/// The state is the ring of the last N admission times; a key is forgettable once its newest
/// admission has left the window.
///
/// # Examples
///
/// ```
/// use tollgate::window::SlidingWindowLog;
/// use tollgate::{Direct, ManualClock, Quota, SlidingWindowLogAlgorithm};
/// let log: Direct<SlidingWindowLogAlgorithm, _> =
///     SlidingWindowLog::with_clock(Quota::per_second(2)?, ManualClock::new())?;
/// assert_eq!(log.remaining(), 2);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlidingWindowLogAlgorithm;

impl<T: OneWord> Contract for T {
    type Policy = T::Policy;
    type State = AtomicU64;

    const NAME: &'static str = T::NAME;

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        T::policy(quota)
    }

    fn begin(policy: &mut Self::Policy, now: Nanos) {
        T::begin(policy, now);
    }

    fn initial(policy: &Self::Policy, quota: &Quota, now: Nanos) -> AtomicU64 {
        AtomicU64::new(T::initial_word(policy, quota, T::time(policy, now)))
    }

    fn fresh(policy: &Self::Policy, _tier: usize, at: Nanos) -> AtomicU64 {
        AtomicU64::new(T::fresh_word(policy, at))
    }

    #[inline(always)]
    fn acquire_one(
        policy: &Self::Policy,
        state: &AtomicU64,
        now: Nanos,
    ) -> Result<Result<Admitted, Denied>, Gone> {
        // The loop builds an admission's outcome (inline: dropped by a caller that reads only
        // `is_ok()`) and carries a refusal out as the word refused, whose outcome is described
        // after the loop, inline as well. Built in the loop, a refusal's outcome would be a call
        // the compiler cannot drop. The mark is refused as itself (no decision ever writes it),
        // one layer of answer fewer than `update_live`'s.
        // The reading is converted inside the closure, which then captures two words (the policy
        // and the reading) and reaches the out-of-line retry in registers; converted outside, the
        // four-word `Time` was stored on the stack before every first attempt.
        let decided = cas::update(state, move |word| {
            if word == cas::GONE {
                return Step::Refuse(cas::GONE);
            }
            match T::admit(policy, word, T::time(policy, now), 1) {
                Step::Write(new, admitted) => Step::Write(new, admitted),
                Step::Keep(admitted) => Step::Keep(admitted),
                Step::Refuse(()) => Step::Refuse(word),
            }
        });
        match decided {
            Ok(admitted) => Ok(Ok(admitted)),
            Err(cas::GONE) => Err(Gone::seen()),
            // A decision is a pure function of its word: deciding again on the word refused
            // describes the refusal.
            Err(word) => Ok(T::outcome(policy, word, T::time(policy, now), 1)),
        }
    }

    /// The word the decision was made on: the one it replaced, or the one it refused or kept.
    /// A decision is a pure function of the word, so deciding on that word again, without
    /// writing (`peek_word`), describes it exactly.
    type Verdict = u64;

    #[inline(always)]
    fn verdict(policy: &Self::Policy, state: &AtomicU64, now: Nanos, n: u64) -> Result<u64, Gone> {
        let now = T::time(policy, now);
        match InsufficientCapacity::check(n, T::capacity(policy)) {
            // Refused by its size: `describe` says so without reading the word.
            Err(_) => Ok(0),
            Ok(true) => {
                let decided =
                    cas::update_live(state, move |word| judged_on::<T>(policy, word, now, n))?;
                Ok(decided.unwrap_or_else(|word| word))
            }
            Ok(false) => live_word(state),
        }
    }

    #[inline(always)]
    fn describe(
        policy: &Self::Policy,
        word: u64,
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, AcquireError> {
        peek_word::<T>(policy, word, now, n)
    }

    #[inline]
    fn peek(
        policy: &Self::Policy,
        state: Held<'_, AtomicU64>,
        now: Nanos,
        n: u64,
    ) -> Result<Result<Admitted, AcquireError>, Gone> {
        Ok(peek_word::<T>(
            policy,
            one_word::<T>(policy, state)?,
            now,
            n,
        ))
    }

    fn remaining(
        policy: &Self::Policy,
        state: Held<'_, AtomicU64>,
        now: Nanos,
    ) -> Result<u64, Gone> {
        Ok(T::remaining(
            policy,
            one_word::<T>(policy, state)?,
            T::time(policy, now),
        ))
    }

    fn evict(policy: &Self::Policy, state: &AtomicU64, now: Nanos) -> bool {
        // The mark replaces exactly the word judged: a decision that wrote in between makes it
        // fail, and the key is kept (it is no longer fresh, or is judged again at the next sweep).
        let word = cas::read(state);
        word != cas::GONE
            && T::is_fresh(policy, word, T::time(policy, now))
            && cas::mark_gone(state, word)
    }

    fn is_gone(state: &AtomicU64) -> bool {
        cas::read(state) == cas::GONE
    }

    fn create(
        policy: &Self::Policy,
        _tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<AtomicU64>, Result<Admitted, AcquireError>) {
        // Decided on the fresh word without building the state: only a write inserts the key.
        let word = T::fresh_word(policy, fresh);
        let now = T::time(policy, now);
        match InsufficientCapacity::check(n, T::capacity(policy)) {
            Err(e) => (None, Err(e.into())),
            Ok(false) => (None, Ok(T::query(policy, word, now))),
            Ok(true) => match T::decide(policy, word, now, n) {
                Step::Write(new, admitted) => (Some(AtomicU64::new(new)), Ok(admitted)),
                Step::Keep(admitted) => (None, Ok(admitted)),
                Step::Refuse(denied) => (None, Err(AcquireError::Denied(denied))),
            },
        }
    }

    fn debug_state(
        policy: &Self::Policy,
        state: &AtomicU64,
        f: &mut std::fmt::DebugStruct<'_, '_>,
    ) {
        T::debug_word(policy, cas::read(state), f);
    }

    #[inline]
    fn capacity(policy: &Self::Policy) -> u64 {
        T::capacity(policy)
    }

    fn seal(policy: &Self::Policy, state: &AtomicU64, now: Nanos) -> u64 {
        match cas::seal(state) {
            cas::GONE => 0,
            word => T::remaining(policy, word, T::time(policy, now)),
        }
    }

    fn refill(policy: &Self::Policy, state: &AtomicU64, available: u64, now: Nanos) {
        let word = T::available_word(policy, available, T::time(policy, now));
        // Relaxed: the state is not shared yet; publishing the block that holds it (Release)
        // publishes this store.
        cas::store(state, word, crate::sync::Ordering::Relaxed);
    }

    fn carry(old: &Self::Policy, new: &mut Self::Policy) {
        T::carry(old, new);
    }

    fn converted(
        old: &Self::Policy,
        new: &Self::Policy,
        state: &AtomicU64,
        now: Nanos,
        _changed: &[bool],
    ) -> AtomicU64 {
        match cas::seal(state) {
            cas::GONE => AtomicU64::new(cas::GONE),
            word => Self::settled(new, 0, T::remaining(old, word, T::time(old, now)), now),
        }
    }

    fn settled(policy: &Self::Policy, _tier: usize, available: u64, at: Nanos) -> AtomicU64 {
        // A whole capacity is a fresh state as of `at`: what a key not held then stands for.
        AtomicU64::new(if available >= T::capacity(policy) {
            T::fresh_word(policy, at)
        } else {
            T::available_word(policy, available, T::time(policy, at))
        })
    }
}

/// [`OneWord::judge`] answering the word it judged, whichever way: the step `cas::update` applies.
#[inline(always)]
fn judged_on<T: OneWord>(policy: &T::Policy, word: u64, now: T::Time, n: u64) -> Step<u64, u64> {
    match T::judge(policy, word, now, n) {
        Step::Write(new, ()) => Step::Write(new, word),
        Step::Keep(()) => Step::Keep(word),
        Step::Refuse(()) => Step::Refuse(word),
    }
}

/// The answer `decide` gives for `n` on `word` at `now`, writing nothing.
#[inline]
fn peek_word<T: OneWord>(
    policy: &T::Policy,
    word: u64,
    now: Nanos,
    n: u64,
) -> Result<Admitted, AcquireError> {
    let now = T::time(policy, now);
    if !InsufficientCapacity::check(n, T::capacity(policy))? {
        return Ok(T::query(policy, word, now));
    }
    T::outcome(policy, word, now, n).map_err(AcquireError::Denied)
}

/// The word of a state, unless a quota change sealed it or eviction marked it gone.
#[inline]
fn live_word(state: &AtomicU64) -> Result<u64, Gone> {
    cas::read_live(state)
}

/// The word a decision on `state` starts from: a held state's, unless it is sealed or gone, or
/// the fresh word of a key not held.
#[inline]
fn one_word<T: OneWord>(policy: &T::Policy, state: Held<'_, AtomicU64>) -> Result<u64, Gone> {
    match state {
        Held::Known(word) => live_word(word),
        Held::Fresh { at, .. } => Ok(T::fresh_word(policy, at)),
    }
}

/// The answer on a state no quota change seals and no eviction marks: one built for this answer
/// (a key not held, fresh or settling), or the keyed limiter's shared overflow state.
#[inline]
pub(crate) fn never_gone<T>(answer: Result<T, Gone>) -> T {
    match answer {
        Ok(answer) => answer,
        Err(Gone) => unreachable!("a state nothing seals or evicts answered `Gone`"),
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    /// `judge`, `admit` and `outcome` must agree with `decide` on every state a limiter can reach,
    /// at any reading and size: the keyed check decides with `judge` and describes with `outcome`
    /// (through `peek_word`), the direct limiters decide with `admit` and describe a refusal with
    /// `outcome`. The states are reached by decisions from a fresh word.
    fn agree<T: OneWord>(quota: &Quota, steps: &[(u64, u64)]) -> Result<(), TestCaseError> {
        let Ok(policy) = T::policy(quota) else {
            return Ok(());
        };
        let mut word = T::fresh_word(&policy, Nanos::new(steps.first().map_or(0, |s| s.0)));
        for &(now, n) in steps {
            let now = T::time(&policy, Nanos::new(now));
            let n = n % T::capacity(&policy) + 1;
            let judged = T::judge(&policy, word, now, n);
            let described = T::outcome(&policy, word, now, n);
            let admits = T::admit(&policy, word, now, n);
            match T::decide(&policy, word, now, n) {
                Step::Write(new, admitted) => {
                    prop_assert!(matches!(judged, Step::Write(w, ()) if w == new));
                    prop_assert!(matches!(admits, Step::Write(w, a) if w == new && a == admitted));
                    prop_assert_eq!(described, Ok(admitted));
                    word = new;
                }
                Step::Keep(admitted) => {
                    prop_assert!(matches!(judged, Step::Keep(())));
                    prop_assert!(matches!(admits, Step::Keep(a) if a == admitted));
                    prop_assert_eq!(described, Ok(admitted));
                }
                Step::Refuse(denied) => {
                    prop_assert!(matches!(judged, Step::Refuse(())));
                    prop_assert!(matches!(admits, Step::Refuse(())));
                    prop_assert_eq!(described, Err(denied));
                }
            }
        }
        Ok(())
    }

    proptest! {
        // No regression file in the source tree: a failure prints its case.
        #![proptest_config(ProptestConfig {
            cases: 1024,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn judge_admit_and_outcome_agree_with_decide(
            count in 1u64..=1_000,
            period in prop_oneof![1u64..=10_000, 1u64..=(1 << 62), Just(1u64 << 62)],
            start in prop_oneof![0u64..=10_000, 0u64..=(1 << 62)],
            // Readings mostly close together (forward and, now and then, backward), and sizes.
            steps in prop::collection::vec((-2_000i64..=20_000, any::<u64>()), 1..=40),
        ) {
            let Ok(quota) = Quota::per_period(count, Duration::from_nanos(period)) else {
                return Ok(());
            };
            let mut now = start;
            let steps: Vec<(u64, u64)> = steps
                .into_iter()
                .map(|(step, n)| {
                    now = now.saturating_add_signed(step);
                    (now, n)
                })
                .collect();
            agree::<TokenBucketAlgorithm>(&quota, &steps)?;
            agree::<LeakyMeterAlgorithm>(&quota, &steps)?;
            agree::<FixedWindowAlgorithm>(&quota, &steps)?;
            agree::<SlidingWindowCounterAlgorithm>(&quota, &steps)?;
        }
    }
}
