//! The algorithms a keyed limiter runs per key: the markers by their keyed names, and [`Tiered`].
//!
//! Every [`Algorithm`] of the crate runs per key: the keyed limiter holds a map of the algorithm's
//! states and decides through the same contract the direct limiters use (see
//! [`algorithm`](crate::algorithm)). The names below are the markers under the names the keyed
//! limiter has always used (`TokenBucketKeys` is [`TokenBucketAlgorithm`](crate::TokenBucketAlgorithm),
//! and so on); [`Tiered`] wraps any of them with a quota chosen per key.

use std::fmt;
use std::marker::PhantomData;

use crate::algorithm::sealed::{Contract, Held, Relocate};
use crate::algorithm::Algorithm;
use crate::cas::Gone;
use crate::clock::Nanos;
use crate::outcome::{AcquireError, Admitted, Denied};
use crate::quota::{Quota, QuotaError};

/// The state a tiered limiter keeps: public in a private module so that it can be named by
/// [`Tiered`]'s contract without being nameable outside the crate.
pub(crate) mod sealed {
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

use sealed::{TieredPolicy, TieredState};

impl<S: Relocate> Relocate for TieredState<S> {
    /// The algorithm's state copied, in the same tier.
    fn copy(&self) -> Self {
        TieredState {
            state: self.state.copy(),
            tier: self.tier,
        }
    }

    fn seal(&self, copy: &Self) {
        self.state.seal(&copy.state);
    }

    fn take(&self) -> Self {
        TieredState {
            state: self.state.take(),
            tier: self.tier,
        }
    }
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
pub type TokenBucketKeys = crate::TokenBucketAlgorithm;

/// The [leaky bucket as a meter](crate::leaky::meter) per key, with strict admission (the meter's
/// `try_acquire`): a request is admitted only when the key's virtual queue is empty, and then takes
/// `n` intervals of it; a key is forgotten once its queue is empty again. A keyed limiter running
/// it also schedules: [`KeyedLimiter::schedule_key_n`](super::KeyedLimiter::schedule_key_n) gives
/// each request a place in its key's queue and the delay before it may go.
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
pub type LeakyMeterKeys = crate::LeakyMeterAlgorithm;

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
pub type FixedWindowKeys = crate::FixedWindowAlgorithm;

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
pub type SlidingWindowCounterKeys = crate::SlidingWindowCounterAlgorithm;

/// The exact [sliding window log](crate::window::sliding_log) per key: never more than N
/// admissions in any window of the quota's period; a key is forgotten once its newest admission
/// has left the window.
///
/// A key costs a ring of N timestamps and two words (the head and the group word of a request for
/// several), `8 × (N + 2)` bytes on the heap with the block's two counts (16 bytes), plus 24 in the map
/// (the block's pointer, its length and where the ring starts), besides the key itself: keep N small (N is at most
/// [`MAX_LOG`](crate::window::MAX_LOG)). A key created afresh after an eviction is
/// built full of entries that have just left the window (see the module docs of
/// [`keyed`](super)), N stores at creation. Requests for `n > 1` are all or none, as the log's
/// are: a denial, however it raced, consumed nothing (never over the limit).
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
pub type SlidingWindowLogKeys = crate::SlidingWindowLogAlgorithm;

/// Any algorithm `A` with its quota chosen per key from a fixed set of tiers, by a function of the
/// key called when the key is first seen: see
/// [`KeyedLimiter::with_tiers`](super::KeyedLimiter::with_tiers).
///
/// A key's tier is stored beside its state, in one byte: for the one-word algorithms a key's
/// state grows from 8 to 16 bytes (the byte, padded to the word's alignment); for the log, from
/// 32 to 40.
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
pub struct Tiered<A = TokenBucketKeys>(PhantomData<fn() -> A>);

impl<A> fmt::Debug for Tiered<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Tiered")
    }
}

impl<A: Algorithm> Tiered<A> {
    /// The policy of `tier` (the last one for an index past the end).
    #[inline]
    fn tier(policy: &TieredPolicy<A::Policy>, tier: usize) -> (&A::Policy, u8) {
        let last = policy.0.len().saturating_sub(1);
        let tier = tier.min(last);
        // At most 256 tiers (checked when built), so the index fits a byte; at least one, so
        // `tier` is in bounds.
        (&policy.0[tier], u8::try_from(tier).unwrap_or(u8::MAX))
    }

    /// A tiered key as its tier's policy and the inner algorithm's view of it.
    #[inline]
    fn key<'a>(
        policy: &'a TieredPolicy<A::Policy>,
        key: Held<'a, TieredState<A::State>>,
    ) -> (&'a A::Policy, Held<'a, A::State>) {
        match key {
            Held::Known(state) => (
                Self::tier(policy, usize::from(state.tier)).0,
                Held::Known(&state.state),
            ),
            Held::Fresh { tier, at } => (Self::tier(policy, tier).0, Held::Fresh { tier: 0, at }),
        }
    }
}

impl<A: Algorithm> Tiered<A> {
    /// A held tiered state as its tier's policy and the inner algorithm's state.
    #[inline]
    fn held<'a>(
        policy: &'a TieredPolicy<A::Policy>,
        state: &'a TieredState<A::State>,
    ) -> (&'a A::Policy, &'a A::State) {
        (Self::tier(policy, usize::from(state.tier)).0, &state.state)
    }
}

impl<A: Algorithm> Contract for Tiered<A> {
    type Policy = TieredPolicy<A::Policy>;
    type State = TieredState<A::State>;

    const NAME: &'static str = "Tiered";

    fn policy(quota: &Quota) -> Result<Self::Policy, QuotaError> {
        Ok(TieredPolicy(Box::new([A::policy(quota)?])))
    }

    fn begin(policy: &mut Self::Policy, now: Nanos) {
        for tier in policy.0.iter_mut() {
            A::begin(tier, now);
        }
    }

    fn initial(policy: &Self::Policy, quota: &Quota, now: Nanos) -> Self::State {
        TieredState {
            state: A::initial(Self::tier(policy, 0).0, quota, now),
            tier: 0,
        }
    }

    fn fresh(policy: &Self::Policy, tier: usize, at: Nanos) -> Self::State {
        let (p, tier) = Self::tier(policy, tier);
        TieredState {
            state: A::fresh(p, 0, at),
            tier,
        }
    }

    #[inline]
    fn acquire_one(
        policy: &Self::Policy,
        state: &Self::State,
        now: Nanos,
    ) -> Result<Result<Admitted, Denied>, Gone> {
        let (p, state) = Self::held(policy, state);
        A::acquire_one(p, state, now)
    }

    /// The inner algorithm's verdict and the tier whose policy describes it.
    type Verdict = (u8, A::Verdict);

    #[inline]
    fn verdict(
        policy: &Self::Policy,
        state: &Self::State,
        now: Nanos,
        n: u64,
    ) -> Result<(u8, A::Verdict), Gone> {
        let (p, inner) = Self::held(policy, state);
        Ok((state.tier, A::verdict(p, inner, now, n)?))
    }

    #[inline]
    fn describe(
        policy: &Self::Policy,
        (tier, verdict): (u8, A::Verdict),
        now: Nanos,
        n: u64,
    ) -> Result<Admitted, AcquireError> {
        A::describe(Self::tier(policy, usize::from(tier)).0, verdict, now, n)
    }

    fn peek(
        policy: &Self::Policy,
        key: Held<'_, Self::State>,
        now: Nanos,
        n: u64,
    ) -> Result<Result<Admitted, AcquireError>, Gone> {
        let (p, inner) = Self::key(policy, key);
        A::peek(p, inner, now, n)
    }

    fn remaining(
        policy: &Self::Policy,
        key: Held<'_, Self::State>,
        now: Nanos,
    ) -> Result<u64, Gone> {
        let (p, inner) = Self::key(policy, key);
        A::remaining(p, inner, now)
    }

    fn create(
        policy: &Self::Policy,
        tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<Self::State>, Result<Admitted, AcquireError>) {
        let (p, tier) = Self::tier(policy, tier);
        let (state, outcome) = A::create(p, 0, fresh, now, n);
        (state.map(|state| TieredState { state, tier }), outcome)
    }

    fn evict(policy: &Self::Policy, state: &Self::State, now: Nanos) -> bool {
        let (p, state) = Self::held(policy, state);
        A::evict(p, state, now)
    }

    fn is_gone(state: &Self::State) -> bool {
        A::is_gone(&state.state)
    }

    fn tier_of(state: &Self::State) -> usize {
        usize::from(state.tier)
    }

    fn debug_state(policy: &Self::Policy, state: &Self::State, f: &mut fmt::DebugStruct<'_, '_>) {
        let (p, tier) = Self::tier(policy, usize::from(state.tier));
        f.field("tier", &tier);
        A::debug_state(p, &state.state, f);
    }

    /// The largest tier's: a direct tiered limiter (one tier) has one.
    fn capacity(policy: &Self::Policy) -> u64 {
        policy.0.iter().map(A::capacity).max().unwrap_or(0)
    }

    fn seal(policy: &Self::Policy, state: &Self::State, now: Nanos) -> u64 {
        let (p, state) = Self::held(policy, state);
        A::seal(p, state, now)
    }

    fn refill(policy: &Self::Policy, state: &Self::State, available: u64, now: Nanos) {
        let (p, inner) = Self::held(policy, state);
        A::refill(p, inner, available.min(A::capacity(p)), now);
    }

    fn converted(
        old: &Self::Policy,
        new: &Self::Policy,
        state: &Self::State,
        now: Nanos,
        changed: &[bool],
    ) -> Self::State {
        let tier = usize::from(state.tier);
        let inner = if changed.get(tier).copied().unwrap_or(true) {
            let (old, _) = Self::tier(old, tier);
            let (new, _) = Self::tier(new, tier);
            A::converted(old, new, &state.state, now, &[true])
        } else {
            state.state.take()
        };
        TieredState {
            state: inner,
            tier: state.tier,
        }
    }

    fn settled(policy: &Self::Policy, tier: usize, available: u64, at: Nanos) -> Self::State {
        let (p, tier) = Self::tier(policy, tier);
        TieredState {
            state: A::settled(p, 0, available, at),
            tier,
        }
    }

    fn carry(old: &Self::Policy, new: &mut Self::Policy) {
        for (old, new) in old.0.iter().zip(new.0.iter_mut()) {
            A::carry(old, new);
        }
    }
}
#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::algorithm::sealed::OneWord;
    use crate::cas::Step;

    const SEC: u64 = 1_000_000_000;

    fn ns(n: u64) -> Nanos {
        Nanos::new(n)
    }

    /// The one-word decision of `T` at `now`, written or not.
    fn take<T: OneWord>(p: &T::Policy, word: u64, now: u64, n: u64) -> Option<u64> {
        match T::decide(p, word, T::time(p, ns(now)), n) {
            Step::Write(w, _) => Some(w),
            Step::Keep(_) => Some(word),
            Step::Refuse(_) => None,
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
        let word = <TokenBucketKeys as OneWord>::fresh_word(&p, ns(5 * SEC));
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
        let word = <LeakyMeterKeys as OneWord>::fresh_word(&p, ns(5 * SEC));
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
        let word = <FixedWindowKeys as OneWord>::fresh_word(&p, ns(5 * SEC + SEC / 2));
        assert_eq!(left::<FixedWindowKeys>(&p, word, 5 * SEC), 3);
        assert_eq!(left::<FixedWindowKeys>(&p, word, 5 * SEC - 1), 0);
        assert!(take::<FixedWindowKeys>(&p, word, 4 * SEC, 1).is_none());
        let taken = take::<FixedWindowKeys>(&p, word, 5 * SEC + SEC / 2, 2).unwrap();
        assert!(!fresh::<FixedWindowKeys>(&p, taken, 6 * SEC - 1));
        assert!(fresh::<FixedWindowKeys>(&p, taken, 6 * SEC));
        assert!(fresh::<FixedWindowKeys>(&p, taken, u64::MAX));
        // Window 0 has no window before it: the zero word, which a direct limiter starts from.
        assert_eq!(<FixedWindowKeys as OneWord>::fresh_word(&p, ns(SEC / 2)), 0);
    }

    #[test]
    fn a_counter_word_is_fresh_once_both_its_windows_are_over() {
        let p =
            <SlidingWindowCounterKeys as OneWord>::policy(&Quota::per_second(4).unwrap()).unwrap();
        let word = <SlidingWindowCounterKeys as OneWord>::fresh_word(&p, ns(7 * SEC));
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
        assert_eq!(
            <SlidingWindowCounterKeys as OneWord>::fresh_word(&p, ns(SEC + 1)),
            0
        );
    }

    #[test]
    fn a_fresh_log_judges_as_an_empty_one_from_its_reading_and_refuses_before() {
        let p = <SlidingWindowLogKeys as Contract>::policy(&Quota::per_second(2).unwrap()).unwrap();
        let log = <SlidingWindowLogKeys as Contract>::fresh(&p, 0, ns(5 * SEC));
        // A fresh log is forgettable at its reading (checked on a twin: eviction marks it).
        let twin = <SlidingWindowLogKeys as Contract>::fresh(&p, 0, ns(5 * SEC));
        assert!(<SlidingWindowLogKeys as Contract>::evict(
            &p,
            &twin,
            ns(5 * SEC)
        ));
        assert_eq!(
            <SlidingWindowLogKeys as Contract>::remaining(&p, Held::Known(&log), ns(5 * SEC)),
            Ok(2)
        );
        assert_eq!(
            <SlidingWindowLogKeys as Contract>::remaining(&p, Held::Known(&log), ns(5 * SEC - 1)),
            Ok(0)
        );
        // The judgment without building the log agrees.
        for at in [4 * SEC, 5 * SEC - 1, 5 * SEC, 9 * SEC] {
            assert_eq!(
                <SlidingWindowLogKeys as Contract>::peek(&p, Held::Known(&log), ns(at), 1)
                    .map(|r| r.is_ok()),
                <SlidingWindowLogKeys as Contract>::peek(
                    &p,
                    Held::Fresh {
                        tier: 0,
                        at: ns(5 * SEC)
                    },
                    ns(at),
                    1
                )
                .map(|r| r.is_ok()),
                "at {at}"
            );
        }
        <SlidingWindowLogKeys as Contract>::acquire(&p, &log, ns(5 * SEC), 1)
            .unwrap()
            .unwrap();
        assert!(!<SlidingWindowLogKeys as Contract>::evict(
            &p,
            &log,
            ns(6 * SEC - 1)
        ));
        assert!(!<SlidingWindowLogKeys as Contract>::is_gone(&log));
        assert!(<SlidingWindowLogKeys as Contract>::evict(
            &p,
            &log,
            ns(6 * SEC)
        ));
        assert_gone::<SlidingWindowLogKeys>(&p, &log);
        // Before one window has passed no log can have expired: an empty one.
        let early = <SlidingWindowLogKeys as Contract>::fresh(&p, 0, ns(SEC / 2));
        assert_eq!(
            <SlidingWindowLogKeys as Contract>::remaining(&p, Held::Known(&early), ns(0)),
            Ok(2)
        );
    }

    /// A state eviction has marked: gone for good, to every keyed decision, and marked once.
    fn assert_gone<A: Algorithm>(p: &A::Policy, state: &A::State) {
        assert!(A::is_gone(state));
        for n in [0, 1] {
            for at in [0, 7 * SEC, u64::MAX] {
                assert_eq!(A::acquire(p, state, ns(at), n).err(), Some(Gone));
                assert_eq!(A::peek(p, Held::Known(state), ns(at), n).err(), Some(Gone));
                assert_eq!(
                    A::remaining(p, Held::Known(state), ns(at)).err(),
                    Some(Gone)
                );
                assert!(!A::evict(p, state, ns(at)));
            }
        }
    }

    #[test]
    fn eviction_marks_a_forgettable_word_gone_and_leaves_any_other_alone() {
        fn check<T: OneWord>(quota: Quota, used_until: u64) {
            let p = T::policy(&quota).unwrap();
            let word = take::<T>(&p, T::fresh_word(&p, ns(5 * SEC)), 5 * SEC, 1).unwrap();
            let state = crate::sync::AtomicU64::new(word);
            // Not forgettable: nothing changes, and decisions go on.
            assert!(!<T as Contract>::evict(&p, &state, ns(used_until - 1)));
            assert_eq!(crate::cas::read(&state), word);
            assert!(<T as Contract>::peek(&p, Held::Known(&state), ns(5 * SEC), 0).is_ok());
            assert!(<T as Contract>::evict(&p, &state, ns(used_until)));
            assert_eq!(crate::cas::read(&state), crate::cas::GONE);
            assert_gone::<T>(&p, &state);
        }
        check::<TokenBucketKeys>(Quota::per_second(10).unwrap(), 5 * SEC + SEC / 10);
        check::<LeakyMeterKeys>(Quota::per_second(10).unwrap(), 5 * SEC + SEC / 10);
        check::<FixedWindowKeys>(Quota::per_second(3).unwrap(), 6 * SEC);
        check::<SlidingWindowCounterKeys>(Quota::per_second(4).unwrap(), 7 * SEC);
    }

    #[test]
    fn no_algorithm_ever_writes_the_gone_word() {
        // The largest words each algorithm can reach: readings up to u64::MAX (clamped to
        // 2^62), the longest bursts and windows and the largest counts, requests of every size
        // the capacity allows, and readings stepping back from the largest.
        fn check<T: OneWord>(quota: Quota) {
            let p = T::policy(&quota).unwrap();
            let cap = T::capacity(&p);
            for fresh in [0, SEC, 1 << 62, u64::MAX] {
                let mut word = T::fresh_word(&p, ns(fresh));
                assert_ne!(word, crate::cas::GONE);
                for now in [fresh, u64::MAX, 1 << 62, (1 << 62) - 1, 0] {
                    for n in [1, cap / 2 + 1, cap] {
                        if let Some(w) = take::<T>(&p, word, now, n) {
                            assert_ne!(w, crate::cas::GONE, "{quota:?} at {now} for {n}");
                            word = w;
                        }
                    }
                }
            }
        }
        let tiny = std::time::Duration::from_nanos(1);
        let longest = std::time::Duration::from_nanos(1 << 62);
        for quota in [
            Quota::per_second(1).unwrap(),
            Quota::per_period(1, tiny).unwrap(),
            Quota::per_period(1, longest).unwrap(),
            Quota::per_period(1, longest)
                .unwrap()
                .with_capacity(1 << 20)
                .unwrap(),
            Quota::per_period(1 << 61, longest).unwrap(),
        ] {
            let quota = quota.with_capacity(quota.max_capacity()).unwrap();
            check::<TokenBucketKeys>(quota);
            check::<LeakyMeterKeys>(quota);
            check::<TokenBucketKeys>(quota);
            check::<LeakyMeterKeys>(quota);
        }
        for quota in [
            Quota::per_second(1).unwrap(),
            Quota::per_period(1, tiny).unwrap(),
            Quota::per_period(1, longest).unwrap(),
            Quota::per_period(1 << 40, longest).unwrap(),
        ] {
            if <FixedWindowKeys as OneWord>::policy(&quota).is_ok() {
                check::<FixedWindowKeys>(quota);
            }
            if <SlidingWindowCounterKeys as OneWord>::policy(&quota).is_ok() {
                check::<SlidingWindowCounterKeys>(quota);
            }
        }
    }

    #[test]
    fn tiers_clamp_an_index_past_the_end_to_the_last_tier() {
        let p = TieredPolicy(Box::new([
            <TokenBucketKeys as OneWord>::policy(&Quota::per_second(1).unwrap()).unwrap(),
            <TokenBucketKeys as OneWord>::policy(&Quota::per_second(5).unwrap()).unwrap(),
        ]));
        let state = <Tiered<TokenBucketKeys> as Contract>::fresh(&p, 99, ns(0));
        assert_eq!(state.tier, 1);
        assert_eq!(
            <Tiered<TokenBucketKeys> as Contract>::remaining(&p, Held::Known(&state), ns(0)),
            Ok(5)
        );
        assert_eq!(
            <Tiered<TokenBucketKeys> as Contract>::remaining(
                &p,
                Held::Fresh { tier: 0, at: ns(0) },
                ns(0)
            ),
            Ok(1)
        );
    }

    #[test]
    fn a_key_state_is_the_size_the_docs_say() {
        use std::mem::size_of;
        type Word = <TokenBucketKeys as Contract>::State;
        type Log = <SlidingWindowLogKeys as Contract>::State;
        assert_eq!(size_of::<Word>(), 8);
        assert_eq!(size_of::<Log>(), 24);
        assert_eq!(
            size_of::<<Tiered<TokenBucketKeys> as Contract>::State>(),
            16
        );
        assert_eq!(
            size_of::<<Tiered<SlidingWindowLogKeys> as Contract>::State>(),
            32
        );
    }
}
