//! The sliding window counter over `k` sub-windows ([`SubWindowCounter`]): the estimate of
//! [`sliding_counter`](super::sliding_counter) with a finer error, its state a hot word and a
//! history ring of `k + 1` words.
//!
//! ```
//! use tollgate::{ManualClock, Nanos, Quota};
//! use tollgate::window::SubWindowCounter;
//!
//! // 10 per second, estimated over ten sub-windows of 100 ms.
//! let limiter = SubWindowCounter::with_clock(Quota::per_second(10)?, 10, ManualClock::new())?;
//! assert_eq!((0..20).filter(|_| limiter.try_acquire().is_ok()).count(), 10);
//! // 1.05 s: the first sub-window (which holds all 10) is half out of the window.
//! assert_eq!(limiter.remaining_at(Nanos::new(1_050_000_000)), 5);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # Algorithm
//!
//! The counter cuts the window `W` into `k` sub-windows of `w = W / k` and counts the last `k − 1`
//! sub-windows in full and only the oldest one weighted, at `e` nanoseconds into sub-window `j`:
//!
//! ```text
//! estimate = count(j − k) × (w − e) / w + count(j − k + 1) + … + count(j − 1) + count(j)
//! ```
//!
//! It is the [sliding counter](super::sliding_counter)'s estimate and decision (the same policy,
//! with `k` sub-windows instead of one window), so the approximation, time and range rules written
//! there hold here with "sub-window" for "window". With `k = 1` the two are the same limiter (and
//! answer identically). The error against an exact log is bounded by the oldest sub-window's
//! count: at most `N + count(j − k)` admissions in any span of length `W`, typically about `N / k`
//! more for steady traffic. The protocol that keeps `k + 2` words consistent without a lock is on
//! [`SubWindowCounter`].
//!
//! # Ranges
//!
//! `1 <= k <=` [`MAX_SUB_WINDOWS`] with `W` a whole multiple of `k` nanoseconds
//! (else [`QuotaError::Algorithm`] naming `"sub_windows"`); `N` is checked against the table on
//! [`SlidingWindowCounter`] at the sub-window length `W / k`.

use std::fmt;

use crossbeam_utils::CachePadded;

pub use super::estimate::MAX_SUB_WINDOWS;

use super::estimate::{Reading, SlidingCounterPolicy};
use super::Alignment;
#[cfg(doc)]
use super::SlidingWindowCounter;
use crate::cas::{self, Backoff, Gone};
use crate::change::Current;
use crate::clock::{Clock, MonotonicClock, Nanos};
use crate::outcome::{AcquireError, Admitted, Denied};
use crate::quota::{Quota, QuotaError};
use crate::sync::{AtomicU64, Ordering};

/// What one decision of the multi-word protocol asks for.
#[derive(Debug)]
enum Verdict {
    /// Write `new` to the hot word, first publishing `(index, count)` into the history if given.
    Admit {
        new: u64,
        publish: Option<(u64, u64)>,
        answer: Admitted,
    },
    Deny(Denied),
    /// A history slot was reused for a later sub-window: the hot word read is stale; load it again.
    Stale,
}

impl SlidingCounterPolicy {
    #[inline]
    fn pack_slot(&self, tag: u64, count: u64) -> u64 {
        (tag << self.slot_bits) | count
    }

    #[inline]
    fn unpack_slot(&self, word: u64) -> (u64, u64) {
        (
            word >> self.slot_bits,
            word & ((1u64 << self.slot_bits) - 1),
        )
    }

    /// The sub-window counter's decision on the hot word `hot = (i | settled | cur)`, reading the
    /// history through `history(h) -> count(h)` (`None` when the slot was reused).
    fn judge(
        &self,
        hot: u64,
        r: Reading,
        n: u64,
        history: impl FnMut(u64) -> Option<u64>,
    ) -> Verdict {
        let (i, settled, cur) = self.unpack(hot);
        match self.weigh((i, settled, cur), r, n, history) {
            None => Verdict::Stale,
            Some(Err(denied)) => Verdict::Deny(denied),
            Some(Ok((v, answer))) => Verdict::Admit {
                new: self.pack(v.at.index, v.settled, v.cur),
                // Only a non-empty sub-window needs publishing: a slot with an older tag reads 0.
                publish: (v.at.index > i && cur > 0).then_some((i, cur)),
                answer,
            },
        }
    }
}

/// The per-key state of a [`SubWindowCounter`]: the hot word and the history ring.
struct SubState {
    /// `j | settled | cur`: the sub-window `j` of the last admission, the sum `settled` of the
    /// counts of `j − k + 1 ..= j − 1`, and `cur = count(j)`; each count in `bits` bits. Word 0 is
    /// fresh. Padded to its own cache line: every admission writes it.
    hot: CachePadded<AtomicU64>,
    /// `k + 1` slots; slot `h mod (k + 1)` holds `tag | count`: `count(h)` when `tag == h`, and
    /// says `count(h) = 0` when `tag < h`; `tag > h` means the slot was reused (the reader's hot
    /// word is stale). Written only to raise (a later tag, or a larger count of the same tag).
    history: Box<[AtomicU64]>,
}

impl SubState {
    fn new(k: u64) -> SubState {
        SubState {
            hot: CachePadded::new(AtomicU64::new(0)),
            history: (0..=k).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, p: &SlidingCounterPolicy, h: u64) -> Option<&AtomicU64> {
        self.history
            .get(usize::try_from(h % (p.k + 1)).unwrap_or(usize::MAX))
    }

    /// `count(h)` for a sub-window `h` below the hot word's; `None` when its slot was reused.
    fn history_count(&self, p: &SlidingCounterPolicy, h: u64) -> Option<u64> {
        let slot = self.slot(p, h)?;
        // The Acquire load of the hot word before this read already makes `count(h)` visible (it
        // synchronizes with the Release compare-and-swap that moved the hot word past `h`, made
        // after publishing `count(h)` here), so this load returns it or a later value: the same
        // count, or a reused slot. Acquire here pairs with the Release publish of a reused slot:
        // its publisher had seen the hot word at the later tag, so the reload that a stale view
        // triggers is then guaranteed to see the hot word moved on too (with Relaxed, a reader
        // could reload the old hot word again and again, which loom found as a livelock).
        let (tag, count) = p.unpack_slot(slot.load(Ordering::Acquire));
        match tag.cmp(&h) {
            std::cmp::Ordering::Equal => Some(count),
            std::cmp::Ordering::Less => Some(0),
            std::cmp::Ordering::Greater => None,
        }
    }

    /// Raises slot `index mod (k + 1)` to `(index, count)`: never lowers a count, never replaces a
    /// later tag.
    fn publish(&self, p: &SlidingCounterPolicy, index: u64, count: u64) {
        let Some(slot) = self.slot(p, index) else {
            return;
        };
        let new = p.pack_slot(index, count);
        // Relaxed: only compared against; what the slot publishes is ordered by the Release below.
        let mut seen = slot.load(Ordering::Relaxed);
        loop {
            let (tag, have) = p.unpack_slot(seen);
            if tag > index || (tag == index && have >= count) {
                return;
            }
            // Release on success: pairs with the Acquire load of the slot by a reader with a stale
            // hot word, so that its reload sees the hot word at least at `index` (which this thread
            // had loaded before). Readers that need `count(index)` itself get it through the
            // Release compare-and-swap on the hot word that follows. Relaxed on failure: the value
            // seen is only compared again.
            match cas::compare_exchange_weak(slot, seen, new, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => seen = now,
            }
        }
    }

    /// Seals the state for a quota change (the hot word swapped to the gone mark, so that no
    /// admission can take effect any more) and answers the whole admissions it had room for at
    /// `r`, as its last admission left it (0 if it was sealed already).
    fn seal(&self, p: &SlidingCounterPolicy, r: Reading) -> u64 {
        match cas::seal(&self.hot) {
            cas::GONE => 0,
            // Every sub-window below the final hot word's is final in the history, and no later
            // one can be published any more: a stale view (`Stale`) cannot arise, and would only
            // make the carry-over 0.
            hot => match p.judge(hot, r, 0, |h| self.history_count(p, h)) {
                Verdict::Admit { answer, .. } => answer.remaining(),
                Verdict::Deny(denied) => denied.remaining(),
                Verdict::Stale => 0,
            },
        }
    }

    /// Sets a new state, not yet shared, to hold `available` (at most `N`) at `r`: `r`'s
    /// sub-window with all but `available` counted, and nothing before it.
    fn refill(&self, p: &SlidingCounterPolicy, r: Reading, available: u64) {
        let word = p.pack(r.index, 0, p.limit - available.min(p.limit));
        // Relaxed: not shared yet; publishing the block (Release) publishes it.
        cas::store(&self.hot, word, Ordering::Relaxed);
    }

    fn load_hot(&self) -> u64 {
        // Acquire: pairs with the Release compare-and-swap that wrote this value (or headed the
        // release sequence it belongs to), so the history published before it is visible.
        self.hot.load(Ordering::Acquire)
    }

    /// Decides `n` (`0..=N`) at `r`; admits by one compare-and-swap of the hot word when `write`.
    /// [`Gone`] when a quota change has sealed the hot word: nothing took effect.
    fn acquire(
        &self,
        p: &SlidingCounterPolicy,
        r: Reading,
        n: u64,
        write: bool,
    ) -> Result<Result<Admitted, Denied>, Gone> {
        let mut hot = self.load_hot();
        let mut backoff = Backoff::new();
        loop {
            if hot == cas::GONE {
                return Err(Gone::seen());
            }
            match p.judge(hot, r, n, |h| self.history_count(p, h)) {
                Verdict::Stale => hot = self.load_hot(),
                Verdict::Deny(denied) => return Ok(Err(denied)),
                Verdict::Admit { answer, .. } if !write || n == 0 => return Ok(Ok(answer)),
                Verdict::Admit {
                    new,
                    publish,
                    answer,
                } => {
                    // Publish the sub-window being left before leaving it: whoever sees the hot
                    // word past it must find its final count in the history.
                    if let Some((index, count)) = publish {
                        self.publish(p, index, count);
                    }
                    // Release on success: pairs with the Acquire load of the hot word in every
                    // later decision, making the publish above visible to it (a same-sub-window
                    // admission publishes nothing new, and Release costs nothing extra on a
                    // read-modify-write). Acquire on failure: the value seen is decided from
                    // next, so the history published before it must be visible too.
                    match cas::compare_exchange_weak(
                        &self.hot,
                        hot,
                        new,
                        Ordering::Release,
                        Ordering::Acquire,
                    ) {
                        Ok(_) => return Ok(Ok(answer)),
                        Err(seen) => {
                            cas::retries::record();
                            backoff.pause();
                            hot = seen;
                        }
                    }
                }
            }
        }
    }
}

/// A lock-free sliding window counter over `k` sub-windows: `N` per window `W`, counting the last
/// `k − 1` sub-windows of `W / k` in full and the oldest one weighted.
///
/// Finer than [`SlidingWindowCounter`] (its error against an exact log is bounded by one
/// sub-window's count instead of one window's; see the [module docs](self)), at the cost of
/// `k + 1` more words of state and, on a rollover or a denial, reading up to `k` of them. With
/// `k = 1` it answers exactly as [`SlidingWindowCounter`] does.
///
/// # Protocol
///
/// The state is a *hot word* `j | settled | cur` (the sub-window `j` of the last admission, the sum
/// of the counts of `j − k + 1 ..= j − 1`, and `count(j)`) and a *history ring* of `k + 1` words,
/// slot `h mod (k + 1)` holding `tag | count(h)`. Everything an admission decides on is in the hot
/// word except `count(j − k)` (and, at a rollover, the counts leaving the window), which come from
/// the history. Publish-then-advance:
///
/// 1. Load the hot word. Read the history counts the decision needs: a slot tagged `h` gives
///    `count(h)`, an older tag means `count(h) = 0` (nothing was admitted in `h`), a later tag means
///    the slot was reused and this view is stale: load the hot word again.
/// 2. Decide. A denial, a peek or a query returns here: it writes nothing.
/// 3. If the reading is in a later sub-window than `j` (a rollover) and `count(j) > 0`, *publish*
///    `(j, count(j))` into slot `j mod (k + 1)`, only raising it.
/// 4. Compare-and-swap the hot word to its new value; on failure go back to step 1 with the value
///    seen.
///
/// Every decision is linearized at its successful compare-and-swap (a denial at its load), and is
/// the decision the sequential algorithm makes on the state at that point:
///
/// - The hot word's index never decreases and its counts never decrease within one index, so a
///   compare-and-swap succeeds only if the hot word has not changed at all since the load (no ABA).
/// - Once the hot word is at `j`, the history of every `h < j` is *final*: whoever moved the hot
///   word past `h` published `count(h)` before doing so, and that compare-and-swap succeeded from a
///   word holding exactly the final `count(h)`. Other publishers of `h` only raise the slot, to a
///   count they saw, which is at most the final one (counts never decrease: there is no refund).
/// - The ring has `k + 1` slots, one more than the `k` sub-windows `j − k ..= j − 1` a decision at
///   `j` reads, so the slot being published (`j`'s) is not one of them. A slot is reused for
///   `h + k + 1` only by a thread that saw the hot word at `h + k + 1` or later, so a reader that
///   still needs `h` holds a stale hot word: it sees the later tag and reloads, and even had it not,
///   its compare-and-swap would fail.
///
/// One compare-and-swap per admission, denials read only, nothing is ever given back.
///
/// **Why not "reserve, then check"?** The alternative — add `n` to the current sub-window's own
/// counter first, then sum the others, and give back on refusal — lets admissions in different
/// sub-windows proceed without touching one shared word, but a check must then see every
/// concurrent reservation made in other words: a store-then-load (Dekker) pattern that needs
/// `SeqCst` fences, with give-backs that race rollovers and can refuse requests the exact
/// algorithm admits. One hot word serializes admissions, which the single-word counter does anyway,
/// and keeps each decision exact.
///
/// # Memory ordering
///
/// Admissions are linearizable, as above. The hot word is loaded with `Acquire` and written with a
/// `Release` compare-and-swap, which is what makes the history published before a rollover visible
/// to every later decision. History slots are published with `Release` and read with `Acquire`
/// too: a reader that finds a slot reused for a later sub-window must, on reloading the hot word,
/// see it moved on at least that far (otherwise nothing forces its reload to see anything newer,
/// and loom finds the reader spinning on a stale hot word). On x86 none of this costs an extra
/// instruction. Do not use an admission to publish other data between threads.
///
/// # Examples
///
/// ```
/// use tollgate::{ManualClock, Nanos, Quota};
/// use tollgate::window::SubWindowCounter;
///
/// // 60 per minute, in 60 one-second sub-windows.
/// let limiter = SubWindowCounter::with_clock(Quota::per_minute(60)?, 60, ManualClock::new())?;
/// assert!(limiter.try_acquire_n_at(60, Nanos::new(0)).is_ok());
/// // A minute later only the first second's count is still (fully) weighted; half a second
/// // further, half of it is.
/// assert_eq!(limiter.remaining_at(Nanos::new(60_000_000_000)), 0);
/// assert_eq!(limiter.remaining_at(Nanos::new(60_500_000_000)), 30);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub struct SubWindowCounter<C = MonotonicClock> {
    current: Current<SubBlock>,
    clock: C,
}

/// What a quota change replaces (see `crate::change`): the counter's quota, policy and state.
struct SubBlock {
    state: SubState,
    policy: SlidingCounterPolicy,
    quota: Quota,
}

impl<C> SubWindowCounter<C> {
    /// Runs `decide` on the current block until it answers without meeting a seal (see
    /// `Direct::decide`).
    #[inline]
    fn on_block<R>(&self, decide: impl FnMut(&SubBlock) -> Result<R, Gone>) -> R {
        self.current.decide(decide)
    }
}

impl SubWindowCounter<MonotonicClock> {
    /// A counter for `quota` ("`N` per period `W`") in `sub_windows` sub-windows, on the default
    /// clock, starting empty.
    ///
    /// # Errors
    ///
    /// [`QuotaError::Algorithm`] naming `"sub_windows"` unless `1 <= sub_windows <=`
    /// [`MAX_SUB_WINDOWS`] divides the period into whole nanoseconds, or naming `"count"` for a
    /// count beyond the table on [`SlidingWindowCounter`] at the sub-window length; otherwise as
    /// [`SlidingWindowCounter::new`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Quota, window::SubWindowCounter};
    /// let limiter = SubWindowCounter::new(Quota::per_minute(600)?, 6)?;
    /// assert_eq!(limiter.remaining(), 600);
    /// let err = SubWindowCounter::new(Quota::per_minute(600)?, 7).unwrap_err();
    /// assert_eq!(err.field(), "sub_windows");
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn new(
        quota: Quota,
        sub_windows: u64,
    ) -> Result<SubWindowCounter<MonotonicClock>, QuotaError> {
        SubWindowCounter::with_clock(quota, sub_windows, MonotonicClock::new())
    }
}

impl<C: Clock> SubWindowCounter<C> {
    crate::direct::clock_reading_forms!(
        "tollgate::window::SubWindowCounter::new(tollgate::Quota::per_second(2)?, 2)?"
    );

    /// A counter for `quota` in `sub_windows` sub-windows reading time from `clock`.
    ///
    /// # Errors
    ///
    /// As [`SubWindowCounter::new`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Quota, window::SubWindowCounter};
    /// let limiter = SubWindowCounter::with_clock(Quota::per_second(10)?, 4, ManualClock::new())?;
    /// assert_eq!(limiter.sub_windows(), 4);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn with_clock(
        quota: Quota,
        sub_windows: u64,
        clock: C,
    ) -> Result<SubWindowCounter<C>, QuotaError> {
        let policy = SlidingCounterPolicy::new(&quota, sub_windows)?;
        Ok(SubWindowCounter {
            current: Current::new(SubBlock {
                state: SubState::new(policy.k),
                policy,
                quota,
            }),
            clock,
        })
    }

    /// Changes the quota this counter enforces, from now on, keeping its number of sub-windows
    /// and its alignment, with no lock on the check path: the crate's one rule (the crate docs,
    /// "Changing a quota"). The new quota starts with the whole admissions the estimate had room
    /// for at the change (at most the new count), counted in the change's sub-window, and opens
    /// sub-windows by itself from there.
    ///
    /// # Errors
    ///
    /// As [`SubWindowCounter::new`] for the new quota with this counter's number of sub-windows;
    /// nothing changes then.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, window::SubWindowCounter};
    /// let limiter = SubWindowCounter::with_clock(Quota::per_second(10)?, 2, ManualClock::new())?;
    /// let t = Nanos::new(0);
    /// limiter.try_acquire_n_at(7, t)?; // room for 3
    /// limiter.set_quota_at(Quota::per_second(100)?, t)?;
    /// assert_eq!(limiter.remaining_at(t), 3);
    /// assert_eq!(limiter.quota(), Quota::per_second(100)?);
    /// // A period the two sub-windows do not divide into whole nanoseconds: refused.
    /// let odd = Quota::per_period(5, std::time::Duration::from_nanos(1_000_000_001))?;
    /// assert!(limiter.set_quota_at(odd, t).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), QuotaError> {
        self.set_quota_at(quota, self.clock.now())
    }

    /// [`SubWindowCounter::set_quota`] as of `now`, a reading of this counter's clock.
    ///
    /// # Errors
    ///
    /// As [`SubWindowCounter::set_quota`].
    ///
    /// # Examples
    ///
    /// See [`SubWindowCounter::set_quota`].
    pub fn set_quota_at(&self, quota: Quota, now: Nanos) -> Result<(), QuotaError> {
        let k = self.current.read().policy.k;
        let mut policy = SlidingCounterPolicy::new(&quota, k)?;
        self.current.change(|old| {
            policy.grid = policy.grid.realigned(old.policy.grid);
            // Built before the seal, so that checks meeting the seal wait for no allocation.
            let new = Box::new(SubBlock {
                state: SubState::new(policy.k),
                policy,
                quota,
            });
            let left = old.state.seal(&old.policy, old.policy.read(now));
            new.state.refill(&new.policy, new.policy.read(now), left);
            new
        });
        Ok(())
    }

    /// The same counter with its sub-window boundaries moved to `alignment` (read against
    /// `clock.now()`; [`Alignment::WallClock`] aligns sub-windows to whole multiples of their
    /// length in UNIX time). Meant for a freshly built counter.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Nanos, Quota, window::{Alignment, SubWindowCounter}};
    /// let limiter = SubWindowCounter::with_clock(Quota::per_second(2)?, 2, ManualClock::new())?
    ///     .aligned(Alignment::Offset(Duration::from_millis(100)));
    /// limiter.try_acquire_n_at(2, Nanos::new(50_000_000))?;
    /// // Sub-windows start at 100 ms, 600 ms, 1.1 s, ...: at 1.1 s the one that held 50 ms is out.
    /// assert_eq!(limiter.remaining_at(Nanos::new(1_100_000_000)), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn aligned(mut self, alignment: Alignment) -> SubWindowCounter<C> {
        let now = self.clock.now();
        let block = self.current.get_mut();
        block.policy.grid = block.policy.grid.aligned(alignment, now);
        self
    }

    /// Admits one request as of `now`, a reading of this counter's clock.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, window::SubWindowCounter};
    /// let limiter = SubWindowCounter::with_clock(Quota::per_second(1)?, 4, ManualClock::new())?;
    /// assert!(limiter.try_acquire_at(Nanos::new(0)).is_ok());
    /// let denied = limiter.try_acquire_at(Nanos::new(0)).unwrap_err();
    /// // The first 250 ms sub-window has fully left the window at 1.25 s.
    /// assert_eq!(denied.retry_at(), Nanos::new(1_250_000_000));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    #[inline]
    pub fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        self.on_block(|b| b.state.acquire(&b.policy, b.policy.read(now), 1, true))
    }

    /// Admits `n` requests as of `now`, all or none. `n = 0` is a query.
    ///
    /// # Errors
    ///
    /// As [`SubWindowCounter::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, window::SubWindowCounter};
    /// let limiter = SubWindowCounter::with_clock(Quota::per_second(10)?, 2, ManualClock::new())?;
    /// assert!(limiter.try_acquire_n_at(10, Nanos::new(0)).is_ok());
    /// let denied = limiter.try_acquire_n_at(5, Nanos::new(0)).unwrap_err();
    /// assert_eq!(denied.denied().unwrap().retry_after().as_millis(), 1250);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.on_block(|b| {
            let write = match b.policy.check_n(n) {
                Ok(write) => write,
                Err(e) => return Ok(Err(e.into())),
            };
            Ok(b.state
                .acquire(&b.policy, b.policy.read(now), n, write)?
                .map_err(AcquireError::Denied))
        })
    }

    /// Would `n` requests be admitted as of `now`? Writes nothing.
    ///
    /// # Errors
    ///
    /// As [`SubWindowCounter::try_acquire_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, window::SubWindowCounter};
    /// let limiter = SubWindowCounter::with_clock(Quota::per_second(2)?, 2, ManualClock::new())?;
    /// limiter.try_acquire_n_at(2, Nanos::new(0))?;
    /// assert!(limiter.peek_n_at(1, Nanos::new(1_249_999_999)).is_err());
    /// assert!(limiter.peek_n_at(1, Nanos::new(1_250_000_000)).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.on_block(|b| {
            if let Err(e) = b.policy.check_n(n) {
                return Ok(Err(e.into()));
            }
            Ok(b.state
                .acquire(&b.policy, b.policy.read(now), n, false)?
                .map_err(AcquireError::Denied))
        })
    }

    /// Whole requests the estimate has room for as of `now`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{ManualClock, Nanos, Quota, window::SubWindowCounter};
    /// let limiter = SubWindowCounter::with_clock(Quota::per_second(4)?, 2, ManualClock::new())?;
    /// limiter.try_acquire_n_at(4, Nanos::new(0))?;
    /// assert_eq!(limiter.remaining_at(Nanos::new(1_250_000_000)), 2);
    /// assert_eq!(limiter.remaining_at(Nanos::new(u64::MAX)), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remaining_at(&self, now: Nanos) -> u64 {
        self.on_block(|b| {
            Ok(
                match b.state.acquire(&b.policy, b.policy.read(now), 0, false)? {
                    Ok(a) => a.remaining(),
                    Err(d) => d.remaining(),
                },
            )
        })
    }

    /// The number of sub-windows `k`.
    ///
    /// # Examples
    ///
    /// ```
    /// let limiter = tollgate::window::SubWindowCounter::new(tollgate::Quota::per_minute(60)?, 60)?;
    /// assert_eq!(limiter.sub_windows(), 60);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn sub_windows(&self) -> u64 {
        self.current.read().policy.k
    }

    /// The quota this counter enforces (the latest [set](SubWindowCounter::set_quota)).
    ///
    /// # Examples
    ///
    /// ```
    /// let q = tollgate::Quota::per_second(3)?;
    /// assert_eq!(tollgate::window::SubWindowCounter::new(q, 4)?.quota(), q);
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn quota(&self) -> Quota {
        self.current.read().quota
    }

    /// The clock this counter reads.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Nanos, Quota, window::SubWindowCounter};
    /// let clock = ManualClock::starting_at(Nanos::new(4));
    /// let limiter = SubWindowCounter::with_clock(Quota::per_second(3)?, 4, clock)?;
    /// assert_eq!(limiter.clock().now(), Nanos::new(4));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

crate::direct::limiter_from_inherent_methods!(SubWindowCounter);

impl<C> fmt::Debug for SubWindowCounter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Read, then formatted outside the epoch (see `Current`'s `Debug`).
        let (quota, k, (index, settled, current), history) = {
            let block = self.current.read();
            let p = &block.policy;
            // The ring as (tag, count) pairs, in slot order.
            let history: Vec<(u64, u64)> = block
                .state
                .history
                .iter()
                // Relaxed: a diagnostic snapshot; the hot word's Acquire orders what matters.
                .map(|slot| p.unpack_slot(slot.load(Ordering::Relaxed)))
                .collect();
            (block.quota, p.k, p.unpack(block.state.load_hot()), history)
        };
        f.debug_struct("SubWindowCounter")
            .field("quota", &quota)
            .field("sub_windows", &k)
            .field("sub_window", &index)
            .field("settled", &settled)
            .field("current", &current)
            .field("history", &history)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::window::estimate::tests::policy;
    use crate::window::SlidingWindowCounter;

    const SEC: u64 = 1_000_000_000;

    #[test]
    fn history_slots_round_trip_at_the_widest_fields() {
        let p = policy(32_767, 1);
        let max_index = (1u64 << 62) / SEC + 1;
        let slot = p.pack_slot(max_index, 32_767);
        assert_eq!(p.unpack_slot(slot), (max_index, 32_767));
        assert_eq!(p.unpack_slot(0), (0, 0));
    }

    #[test]
    fn a_reused_history_slot_is_a_stale_view() {
        let p = policy(8, 4);
        let r = p.read(Nanos::new(SEC));
        // Hot word at sub-window 4 with 1 admitted: the decision needs count(0), whose slot
        // now carries a later tag.
        let hot = p.pack(4, 0, 1);
        assert!(matches!(p.judge(hot, r, 1, |_| None), Verdict::Stale));
        // With the history intact it admits, publishing nothing (no rollover).
        match p.judge(hot, r, 1, |_| Some(0)) {
            Verdict::Admit { new, publish, .. } => {
                assert_eq!(p.unpack(new), (4, 0, 2));
                assert_eq!(publish, None);
            }
            other => panic!("{other:?}"),
        }
        // A rollover publishes the sub-window it leaves.
        let r = p.read(Nanos::new(SEC + SEC / 4));
        match p.judge(hot, r, 2, |_| Some(0)) {
            Verdict::Admit { new, publish, .. } => {
                assert_eq!(p.unpack(new), (5, 1, 2));
                assert_eq!(publish, Some((4, 1)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn publish_only_raises() {
        let p = policy(8, 2);
        let s = SubState::new(2);
        s.publish(&p, 4, 3);
        assert_eq!(s.history_count(&p, 4), Some(3));
        s.publish(&p, 4, 2);
        assert_eq!(s.history_count(&p, 4), Some(3));
        s.publish(&p, 1, 5); // slot 1 = slot of 4: an older tag never replaces a later one
        assert_eq!(s.history_count(&p, 4), Some(3));
        assert_eq!(s.history_count(&p, 1), None);
        assert_eq!(s.history_count(&p, 7), Some(0));
        s.publish(&p, 7, 1);
        assert_eq!(s.history_count(&p, 4), None);
    }

    #[test]
    fn denials_peeks_and_queries_never_write() {
        let c = SubWindowCounter::with_clock(Quota::per_second(2).unwrap(), 4, ManualClock::new())
            .unwrap();
        c.try_acquire_n_at(2, Nanos::new(0)).unwrap();
        let snapshot = format!("{c:?}");
        for t in [0, SEC / 3, SEC, 2 * SEC, 0] {
            let _ = c.try_acquire_at(Nanos::new(t / 10));
            let _ = c.peek_n_at(1, Nanos::new(t));
            let _ = c.try_acquire_n_at(0, Nanos::new(t));
            let _ = c.remaining_at(Nanos::new(t));
        }
        assert_eq!(format!("{c:?}"), snapshot);
    }

    /// Runs `threads` threads of `per_thread` single requests on `acquire`, each thread's readings
    /// walking forward from 0 by `step` ns (so that rollovers race admissions in older windows);
    /// answers the admissions and the compare-and-swap retries.
    fn race(
        threads: usize,
        per_thread: u64,
        step: u64,
        acquire: impl Fn(Nanos) -> bool + Sync,
    ) -> (u64, u64) {
        let results = cas::race(threads, |t| {
            // Threads are offset a little, so readings also arrive out of order.
            let offset = t as u64 * step / 3;
            (0..per_thread)
                .filter(|i| acquire(Nanos::new(i * step + offset)))
                .count() as u64
        });
        results
            .into_iter()
            .fold((0, 0), |(a, r), (a2, r2)| (a + a2, r + r2))
    }

    /// Real threads, frozen time: exactly N admitted (none lost, none doubled), with contention
    /// proven by observed retries; then moving readings: never more than N per window touched.
    #[test]
    fn stress_real_threads_conserve_counts_and_do_contend() {
        for k in [1, 4] {
            // Retries happen only among admissions (denials write nothing), so each attempt
            // doubles the count admitted as well as the requests: on a loaded machine whose threads
            // rarely overlap, more writes are what give them the chance to collide.
            let mut n = 16_000;
            let mut per_thread = 8_000;
            let mut contended = false;
            for _attempt in 0..6 {
                // An hour's window holds every count tried (up to 512 000).
                let quota = Quota::per_hour(n).unwrap();
                let (admitted, retries) = if k == 1 {
                    let c = SlidingWindowCounter::with_clock(quota, ManualClock::new()).unwrap();
                    race(4, per_thread, 0, |t| c.try_acquire_at(t).is_ok())
                } else {
                    let c = SubWindowCounter::with_clock(quota, k, ManualClock::new()).unwrap();
                    race(4, per_thread, 0, |t| c.try_acquire_at(t).is_ok())
                };
                assert_eq!(admitted, n, "k = {k}");
                if retries > 0 {
                    contended = true;
                    break;
                }
                per_thread *= 2;
                n *= 2;
            }
            assert!(
                contended,
                "no retry observed for k = {k}: the stress test proved nothing"
            );

            // Moving readings: 4 threads × 20 000 requests over 0 .. 20 000 × 50 µs = 1 s per
            // 20 000, so about 1 window; the estimate never lets more than N into one window.
            let step = 50_000;
            let per_thread = 20_000;
            let c = SubWindowCounter::with_clock(
                Quota::per_second(500).unwrap(),
                k,
                ManualClock::new(),
            )
            .unwrap();
            let (admitted, _) = race(4, per_thread, step, |t| c.try_acquire_at(t).is_ok());
            let windows = (per_thread * step + step).div_ceil(SEC) + 1;
            assert!(admitted <= 500 * windows, "{admitted} > 500 × {windows}");
            assert!(admitted >= 500);
        }
    }
}
