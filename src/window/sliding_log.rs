//! The sliding window log: exact, "never more than N admissions in any window `(t - W, t]`", its
//! state a lock-free ring of the last N admission times.
//!
//! ```
//! use std::time::Duration;
//! use tollgate::window::SlidingWindowLog;
//! use tollgate::{ManualClock, Nanos, Quota};
//!
//! // 3 per second, in any second, not only in each calendar second.
//! let log = SlidingWindowLog::with_clock(Quota::per_second(3)?, ManualClock::new())?;
//! let ms = |n: u64| Nanos::new(n * 1_000_000);
//! assert!(log.try_acquire_at(ms(0)).is_ok());
//! assert!(log.try_acquire_at(ms(400)).is_ok());
//! assert!(log.try_acquire_at(ms(900)).is_ok());
//! // A fixed window would open again at 1000 ms; the log waits until the admission at 0 ms leaves.
//! let denied = log.try_acquire_at(ms(950)).unwrap_err();
//! assert_eq!(denied.retry_at(), ms(1000));
//! assert!(log.try_acquire_at(ms(1000)).is_ok());
//! assert!(log.try_acquire_at(ms(1001)).is_err()); // the admission at 400 ms is still in
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Algorithm
//!
//! A request at reading `t` is admitted when fewer than N admissions lie in the window
//! `(t - W, t]`. Keeping every admission time would cost unbounded memory; the last N suffice,
//! because the only question is whether the N-th newest has left the window. They live in a ring
//! of N 64-bit slots, so a key costs `8 × N` bytes (plus one padded cache line for the head and the
//! group word). The longest log is [`MAX_LOG`] entries (512 KiB per key); a longer one is refused
//! with [`QuotaError::Algorithm`] naming the count. There is no alignment: the window slides with every reading.
//!
//! Admissions get consecutive *positions* 0, 1, 2, …; position `p` lives in slot `p % N`. A request
//! for one admission at reading `t` against a log whose next free position is `s`:
//!
//! 1. takes the effective time `t' = max(t, ts(s - 1))`: timestamps never decrease along positions,
//!    so a clock that steps back, or a slower reading that lost a race, never records a time earlier
//!    than the entry before it (and binary search over the ring works);
//! 2. is admitted iff `s < N` (fewer than N admissions ever) or `ts(s - N) <= t' - W` (the N-th
//!    newest admission has left the window);
//! 3. if admitted, writes `t'` into position `s`; if not, writes nothing and reports
//!    `retry_at = ts(s - N) + W`, the exact instant the oldest admission in the window leaves it.
//!
//! # Guarantees
//!
//! - **Exact.** Every admission at position `p >= N` satisfies `ts(p) >= ts(p - N) + W`. Among any
//!   N + 1 admissions two positions are congruent mod N, and the chain of such steps between them
//!   spans at least W, so no window `(t - W, t]` of length W (measured on recorded times) ever holds
//!   N + 1 admissions, under any interleaving of threads.
//! - **Time only helps.** A reading earlier than one already recorded is judged at the recorded time
//!   (`t'` above): a clock that steps back never admits more than the limit. An idle period of any
//!   length, up to a reading of `u64::MAX`, empties the window and no more.
//! - **Exact `retry_after`.** A denial's [`Denied::retry_at`] is the earliest reading at which the
//!   same request would be admitted if nothing else happened in between; one nanosecond earlier it
//!   would be denied.
//! - Readings beyond [`Nanos::MAX_USABLE`] (2^62 ns, 146 years) are clamped: no arithmetic can
//!   overflow.
//!
//! # Requests for more than one
//!
//! A request for `n` admissions is all or none, like every `try_acquire_n` of the crate: admitted
//! whole, or denied having consumed nothing, however it races. It is judged once, at the head `s`:
//! the entry at position `s + n - 1 - N` must have left the window (timestamps are monotone, so it
//! is the only one to check), and all `n` positions `s..s + n` record the same effective time. It
//! then claims them as one *group*, with one compare-and-swap on the slot of `s` (see the protocol
//! below): no other request can take a position in between, so a lost race costs nothing but a
//! fresh look. A request for one takes the same single compare-and-swap as before groups existed.
//!
//! # The claim protocol
//!
//! The state is a head (the next position to claim; a hint, advanced by whoever sees it lag), a
//! group word (the size of the one request for several that may be committing or filling a group)
//! and the ring. A slot is *claimed* by the same compare-and-swap that writes its new timestamp, so
//! no thread ever judges by a slot that is claimed and not yet written. To claim position `s` for a
//! request for one:
//!
//! 1. load the head `s`, then slot `s % N`. If the slot already holds position `s` (another thread
//!    claimed it and has not advanced the head yet), help: move the head from `s` to `s + 1`, restart.
//!    If it holds a group's mark, see below;
//! 2. otherwise the slot holds position `s - N` (or, for `s < N`, the fresh word). Read what the
//!    decision needs (`ts(s - 1)`, and for the outcome's `remaining` a binary search over the ring),
//!    taking position `s - N` from the word already read, never from a second load of its slot:
//!    another thread may claim `s` in between without having moved the head yet, and a judgment
//!    that took its entry for the one it replaced would answer for no state the log was ever in;
//! 3. load the head again: if it moved, restart. Head still at `s` proves that every slot read
//!    in between held the entry of its position below `s` (a slot is only reused a lap later, by a
//!    thread that had loaded a head past `s`). An answer that writes nothing (a denial, a peek, a
//!    query) also loads slot `s % N` again: still the word of step 1 proves that no group's fill
//!    (written with the head at `s`, after the group's mark in that slot) was read;
//! 4. judge; a denial returns having written nothing;
//! 5. compare-and-swap the slot from the word read in step 1 to `(s, t')`. Timestamps in a slot
//!    strictly increase with each claim (`t' >= ts(s - N) + W > ts(s - N)`), the fresh word is
//!    never a claimed one and a mark never an entry, so a slot word never repeats: no ABA. Success
//!    proves position `s` was still free, so the view of step 2 was still the log's state at that
//!    instant: the admission takes effect there. Failure restarts; success helps the head forward.
//!
//! A request for `n >= 2` judges in steps 1-4 as a request for one does, for `n`, then:
//!
//! 5. takes the group word, `NO_GROUP → n` by compare-and-swap (if another request for several
//!    holds it, it yields and restarts at step 1);
//! 6. *commits*: compare-and-swap slot `s % N` from the word of step 1 to the group's *mark*, a word
//!    no entry can be that carries `t'`. This is the request's only decision point: success takes
//!    positions `s..s + n` at once (no thread claims past `s` while the mark is in place), failure
//!    gives the group word back and restarts, having written nothing to the ring;
//! 7. *finishes*: fills positions `s + 1..s + n` with `(p, t')`, each by compare-and-swap from the
//!    entry of `p - N`, replaces the mark by `(s, t')`, gives the group word back and moves the head
//!    to `s + n`.
//!
//! Any thread that finds a mark at the head finishes the group (it reads `n` from the group word,
//! which cannot change while the mark is in place, and `t'` from the mark) before claiming, so a
//! requester stalled after its commit blocks nobody; every write of step 7 is the one value the
//! group defines, so helpers and the requester can run it together. A denial, a peek or a query
//! that finds a mark writes nothing: it judges the log as it will be once the group is finished
//! (head `s + n`, the group's positions at `t'`), checking afterwards that the mark is still there.
//! Each group position `p` replaces the entry of `p - N`, which has left the window at `t'`: the
//! judgment of step 4 checked the newest of them, `s + n - 1 - N`.
//!
//! The protocol was designed with step 2 loading each position's slot as needed; the loom model
//! `a_reader_of_a_slot_being_claimed_sees_the_old_entry_or_the_new_never_a_mix` found that a
//! reader could then mix a racer's fresh claim of `s` (head not yet moved) with the rest of the
//! view and report a `retry_after` no state of the log had. Admissions were never affected (their
//! compare-and-swap fails on the changed word), only the answers of denials, peeks and queries.
//!
//! Requests for one, denials, peeks and queries are lock-free: a thread restarts only when another
//! has claimed a position (moving the head or changing a slot), and a claim left half-done by a
//! stalled thread (slot written, head not moved; a group committed, not filled) is finished by
//! whoever sees it. Requests for several never wait for a request for one. Two requests for
//! several can wait for each other: the group word is held by one of them from step 5 to its
//! commit (one compare-and-swap later), and by the finisher of a committed group until it gives
//! it back; a requester stalled in exactly that span delays other requests for several (not their
//! denials) until it runs again or a request for one takes position `s` from it.
//!
//! # Memory ordering
//!
//! Slot loads are `Acquire` and claims, commits, fills and finishes `AcqRel`; head loads are
//! `Acquire` and head moves `AcqRel`. A thread moves the head past `s` only after it has seen the
//! claim of `s` (its own, or one loaded with `Acquire`; for a group, every position of it), so a
//! thread that loads the head at `s` sees the claims of every position below `s`. The group word is
//! taken with `AcqRel`, given back with `Release` and read with `Acquire`, so that a helper that
//! reads it after its group was finished sees that finish when it checks the mark. None of it
//! publishes other data: do not use an admission to make other writes visible. Admissions are
//! linearizable, each at its claiming (or committing) compare-and-swap.

pub use crate::algorithm::SlidingWindowLogAlgorithm;

use std::fmt;

use super::window_of;
use crate::algorithm::never_gone;
use crate::algorithm::sealed::{Contract, Held, Relocate};
use crate::cas::{self, retries, Backoff, Gone};
use crate::clock::{MonotonicClock, Nanos};
use crate::direct::Direct;
use crate::outcome::{AcquireError, Admitted, Denied, Headroom, InsufficientCapacity, Next, Span};
use crate::quota::{AlgorithmLimit, Quota, QuotaError};
use crate::sync::{yield_now, AtomicU64, Ordering};

/// The longest log: 65 536 entries of 8 bytes, 512 KiB per key (re-exported as
/// `tollgate::window::MAX_LOG`). A quota whose count exceeds it is
/// refused with [`QuotaError::Algorithm`] naming the count: a limit that large is better served by a
/// [`TokenBucket`](crate::TokenBucket) or a sliding window counter, whose state is one word.
///
/// # Examples
///
/// ```
/// use tollgate::window::{SlidingWindowLog, MAX_LOG};
/// use tollgate::{Quota, QuotaError};
/// assert!(SlidingWindowLog::new(Quota::per_hour(MAX_LOG)?).is_ok());
/// let err = SlidingWindowLog::new(Quota::per_hour(MAX_LOG + 1)?).unwrap_err();
/// assert!(matches!(err, QuotaError::Algorithm(l) if l.got() == MAX_LOG + 1 && l.bound() == MAX_LOG));
/// assert_eq!(err.field(), "count");
/// # Ok::<(), QuotaError>(())
/// ```
pub const MAX_LOG: u64 = 65_536;

/// The log's constants, derived once from a [`Quota`]: shared by every key of a keyed limiter.
///
/// # Examples
///
/// ```
/// use tollgate::window::sliding_log::SlidingLogPolicy;
/// // Built by the limiter from its quota, never by hand: plain data, copied and shared freely.
/// fn plain<T: Copy + Send + Sync + 'static>() {}
/// plain::<SlidingLogPolicy>();
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLogPolicy {
    /// N, the admissions allowed in any window: `1..=MAX_LOG`.
    count: u64,
    /// W, the window length in nanoseconds: `1..=2^62`.
    window: u64,
}

// kept for the public path
#[doc(hidden)]
pub type Policy = SlidingLogPolicy;

/// What an admission will write and report, decided from a view of the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogGrant {
    /// The effective time `t'` the new entries record.
    at: u64,
    /// Admissions left in the window at `t'` after this one.
    level: u64,
    /// Nanoseconds from the reading until the newest entry leaves the window.
    reset: u64,
    /// Nanoseconds from the reading until the oldest entry in the window leaves it (0 for none).
    next: u64,
}

impl LogGrant {
    fn admitted(self) -> Admitted {
        // The level is in whole admissions.
        Admitted::new(Headroom::whole(
            self.level,
            u128::from(self.reset),
            Next::nanos(u128::from(self.next)),
        ))
    }
}

impl SlidingLogPolicy {
    /// The policy for `quota`, or why a log cannot enforce it.
    pub(crate) fn new(quota: &Quota) -> Result<SlidingLogPolicy, QuotaError> {
        const NAME: &str = "sliding window log";
        let (count, window) = window_of(quota, NAME)?;
        if count > MAX_LOG {
            let limit = AlgorithmLimit::new(NAME, "count", count, MAX_LOG, |l, f| {
                write!(
                    f,
                    "count of a {} must be between 1 and {} (8 bytes per entry), got {}",
                    l.algorithm(),
                    l.bound(),
                    l.got()
                )
            });
            return Err(QuotaError::Algorithm(limit));
        }
        Ok(SlidingLogPolicy {
            // A quota's count and period are at least 1; `max` keeps the modulo by N panic-free
            // even if that ever changed.
            count: count.max(1),
            window: window.max(1),
        })
    }

    /// Checks `n` against N, answering `n = 0` as a query.
    #[inline]
    pub(crate) fn check_n(&self, n: u64) -> Result<bool, InsufficientCapacity> {
        InsufficientCapacity::check(n, self.count)
    }

    /// The first position in `lo..hi` whose entry is still in the window at `at` (`hi` if none):
    /// timestamps never decrease along positions, so the entries in the window are a suffix.
    fn first_in_window(&self, lo: u64, hi: u64, at: u64, ts: &impl Fn(u64) -> u64) -> u64 {
        let (mut a, mut b) = (lo, hi);
        while a < b {
            let mid = a + (b - a) / 2;
            // ts < 2^63 (the word's low bits) and W <= 2^62: the sum fits.
            if ts(mid) + self.window > at {
                b = mid;
            } else {
                a = mid + 1;
            }
        }
        a
    }

    /// Judges a request for `n` admissions (`0..=N`) at position `s`, the reading `now` (clamped)
    /// and the floor `floor` on the effective time, given `ts(p)`, the timestamp of position `p`
    /// for `p` in `s - N..s` (and `p >= 0`).
    ///
    /// With `tally` false an admission's level is left at 0 and the binary search for it skipped
    /// (the later positions of a request for several, whose outcome reports the first judgment).
    ///
    /// Pure: it reads the log only through `ts`. On inconsistent input (a torn view the caller will
    /// discard) it still returns without panicking.
    #[inline]
    pub(crate) fn judge(
        &self,
        s: u64,
        now: u64,
        floor: u64,
        n: u64,
        tally: bool,
        ts: impl Fn(u64) -> u64,
    ) -> Result<LogGrant, Denied> {
        let last = if s > 0 { Some(ts(s - 1)) } else { None };
        let at = now.max(floor).max(last.unwrap_or(0));
        // Nanoseconds from the reading until the entry at `t` leaves the window (0 for none): the
        // newest for `reset`, the oldest in the window for `next`.
        let leaves =
            |entry: Option<u64>| entry.map_or(0, |t| (t + self.window).saturating_sub(now));
        // Admissions left in the window at `at`, before this request, and the oldest entry in it.
        let left = || {
            let first = self.first_in_window(s.saturating_sub(self.count), s, at, &ts);
            let oldest = (first < s).then(|| ts(first));
            (self.count.saturating_sub(s - first), oldest)
        };
        if n == 0 {
            let (level, oldest) = left();
            return Ok(LogGrant {
                at,
                level,
                reset: leaves(last),
                next: leaves(oldest),
            });
        }
        // The request's last admission goes to position `p`; its entry `p - N` must have left.
        let p = s.saturating_add(n - 1);
        if p >= self.count {
            let oldest = ts(p - self.count);
            let retry_at = oldest + self.window;
            if retry_at > at {
                // Entry `p - N` and every later one are still in the window, so the first entry in
                // it lies in `s - N..=p - N`: a search over at most `n - 1` entries (none for a
                // single request, the common denial), not the whole ring.
                let first =
                    self.first_in_window(s.saturating_sub(self.count), p - self.count, at, &ts);
                return Err(Denied::new(
                    now,
                    Span::from_nanos(u128::from(retry_at.saturating_sub(now))),
                    Headroom::whole(
                        self.count.saturating_sub(s - first),
                        u128::from(leaves(last)),
                        // `first <= p - N < s`: the oldest entry in the window.
                        Next::nanos(u128::from(leaves(Some(ts(first))))),
                    ),
                ));
            }
        }
        let (level, oldest) = if tally { left() } else { (n, None) };
        Ok(LogGrant {
            at,
            level: level.saturating_sub(n),
            reset: leaves(Some(at)),
            // The oldest entry in the window once the request's own (at `at`) are in it.
            next: leaves(Some(oldest.unwrap_or(at))),
        })
    }
}

impl SlidingLogPolicy {
    /// The judgment of `n` (`0..=N`) admissions at reading `now` (clamped) on the log
    /// [`Log::fresh`] would build for `fresh`, without building it: what a keyed limiter answers
    /// for a key it does not hold.
    pub(crate) fn judge_fresh(&self, fresh: Nanos, now: u64, n: u64) -> Result<Admitted, Denied> {
        match fresh.clamped().checked_sub(self.window) {
            Some(at) => self.judge(self.count, now, 0, n, true, |_| at),
            None => self.judge(0, now, 0, n, true, |_| 0),
        }
        .map(LogGrant::admitted)
    }
}

/// One slot of the ring: the entry of the position it last held, or, while a request for several
/// fills its positions, the mark of the first of them.
///
/// # State table
///
/// An *entry* has bit 63 the lap parity `(p / N) & 1` of its position `p` and bits 0..63 its
/// timestamp in nanoseconds (readings are clamped to 2^62, so bit 62 is set only in the timestamp
/// 2^62 itself, with bits 0..62 clear). A *mark* has bit 62 set and bits 0..62 not all clear, which
/// no entry has; it carries the timestamp `t` of a group: bit 63 is `t & 1`, bits 0..62 are
/// `(t >> 1) + 1`.
///
/// | word | meaning | written by |
/// | --- | --- | --- |
/// | parity 1, ts 0 ([`SlotWord::FRESH`]) | no entry yet: "position `i - N`" of slot `i`, lap -1, never judged | construction |
/// | parity `(p / N) & 1`, ts `t` | position `p` was admitted at effective time `t` | the claim of `p` (one compare-and-swap from the entry of `p - N`), or the fill or finish of a group holding `p` |
/// | mark of `t`, in slot `s % N` | a request for `n` (`2..=N`) admitted at `t` holds positions `s..s + n` (`n` in [`Log::group`]); its other positions are being filled | the group's commit: one compare-and-swap from the entry of `s - N` |
/// | `u64::MAX` ([`cas::GONE`]), in slot `s % N` | a keyed limiter's eviction forgot the log: no position `s` or later can be claimed, and every view reaching the slot answers [`Gone`] | [`Log::evict`], with the head at `s` and every entry out of the window: one compare-and-swap from the entry of `s - N` (or the fresh word) |
///
/// Slot `s % N` goes entry of `s - N` → mark of `t` → entry of `s` at `t` for a group, and entry of
/// `s - N` → entry of `s` for a single claim. Each new entry or mark of a slot has a timestamp
/// `t >= ts(p - N) + W > ts(p - N)`: a slot's timestamps strictly increase, entries alternate
/// parity, a claimed entry of parity 1 has `ts >= W >= 1` (never the fresh word), and a mark is
/// never an entry, so no word ever returns to a slot (no ABA). The gone word is neither an entry
/// (its bit 62 is set with bits 0..62 not clear) nor a mark (a mark's bits 0..62 are at most
/// `2^61 + 1`), and it is final: the head never passes its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlotWord(u64);

impl SlotWord {
    const PARITY: u64 = 1 << 63;
    /// Bit 62: set in a mark (and in the entry of timestamp 2^62, whose lower bits are clear).
    const MARK: u64 = 1 << 62;
    /// Bits 0..62.
    const LOW: u64 = SlotWord::MARK - 1;
    /// The word of a slot that has never been claimed.
    const FRESH: SlotWord = SlotWord(SlotWord::PARITY);

    /// The entry of position `p` of a log of `count` slots, admitted at `ts` (`< 2^63`).
    #[inline]
    fn new(p: u64, count: u64, ts: u64) -> SlotWord {
        SlotWord(SlotWord::parity(p, count) | (ts & !SlotWord::PARITY))
    }

    /// The mark of a group admitted at `t` (`<= 2^62`).
    #[inline]
    fn mark(t: u64) -> SlotWord {
        // (t >> 1) + 1 <= 2^61 + 1: within bits 0..62, and never 0.
        SlotWord(((t & 1) << 63) | SlotWord::MARK | ((t >> 1) + 1))
    }

    #[inline]
    fn is_mark(self) -> bool {
        self.0 & SlotWord::MARK != 0 && self.0 & SlotWord::LOW != 0
    }

    /// The timestamp of a mark.
    #[inline]
    fn marked_ts(self) -> u64 {
        ((self.0 & SlotWord::LOW).saturating_sub(1) << 1) | (self.0 >> 63)
    }

    #[inline]
    fn parity(p: u64, count: u64) -> u64 {
        ((p / count) & 1) << 63
    }

    /// Whether this is the entry of a position of `p`'s lap parity.
    #[inline]
    fn has_parity_of(self, p: u64, count: u64) -> bool {
        self.0 & SlotWord::PARITY == SlotWord::parity(p, count)
    }

    #[inline]
    fn ts(self) -> u64 {
        self.0 & !SlotWord::PARITY
    }
}

/// [`Log::group`] when no request for several holds it.
const NO_GROUP: u64 = 0;

/// The log's state: the head, the group word and the ring of the last N admission times, all in
/// one heap block of its own (the keyed limiter's table never moves a state, so nothing shares it).
/// A direct log puts 112 bytes between the group word and the ring (the head is loaded twice by
/// every request, the slots written by other threads); a keyed limiter's per-key logs do not (one
/// padded line per key would cost 128 bytes a key for contention that spreads over keys).
///
/// The words, in order:
///
/// - the **head**: the next position to claim, a hint: at most one claim (one position, or one
///   group's) behind the last, moved forward by the claimer or by any thread that sees it lag. It
///   never passes a group's first position while the group's mark is in place;
/// - the **group** word: the size `n` of the request for several that may commit, or has committed
///   and not finished, a group; `NO_GROUP` otherwise. Taken (from `NO_GROUP`, by
///   compare-and-swap) by a request for several between its judgment and its commit, and given
///   back by whoever finishes its group, or by the request itself when its commit fails. Single
///   requests never touch it;
/// - from `first` on, N **slots**; position `p` lives in slot `p % N`. See `SlotWord` for the state
///   table.
pub struct Log {
    /// Shared only when a keyed table is rebuilt, until the readers of the old table have left:
    /// the old table's copy of the log and the new one's are the same log (see [`Relocate`]).
    words: std::sync::Arc<[AtomicU64]>,
    /// The index of slot 0 in `words`.
    first: usize,
}

/// The head's index in a log's words.
const HEAD: usize = 0;
/// The group word's index.
const GROUP: usize = 1;
/// Slot 0's index in a keyed log.
const KEYED_FIRST: usize = 2;
/// Slot 0's index in a direct log: 128 bytes after the head, as a cache-line pair.
const DIRECT_FIRST: usize = 16;

impl Relocate for Log {
    /// The same log: both copies reach the one ring, so a decision through either takes effect
    /// in it.
    fn copy(&self) -> Log {
        Log {
            words: std::sync::Arc::clone(&self.words),
            first: self.first,
        }
    }

    /// Nothing to seal: the copy is the same log.
    fn seal(&self, _copy: &Log) {}

    /// The same log, as [`Relocate::copy`].
    fn take(&self) -> Log {
        self.copy()
    }
}

impl fmt::Debug for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Log")
            .field("head", &self.head())
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

/// A validated view of the log: the head, the word in its slot, and the judgment.
struct LogView {
    s: u64,
    word: SlotWord,
    verdict: Result<LogGrant, Denied>,
}

/// A group seen committed: the request for `n` that claimed positions `s..s + n` at time `t`, and
/// the mark in slot `s % N` that says so.
#[derive(Debug, Clone, Copy)]
struct Group {
    s: u64,
    n: u64,
    t: u64,
    mark: SlotWord,
}

impl Log {
    /// A log for `policy` with slot 0 at `first`, slot `p` holding `word(p)`.
    fn build(policy: &SlidingLogPolicy, first: usize, head: u64, word: impl Fn(u64) -> u64) -> Log {
        let words = (0..first)
            .map(|i| match i {
                HEAD => head,
                GROUP => NO_GROUP,
                _ => 0,
            })
            .chain((0..policy.count).map(word))
            .map(AtomicU64::new)
            .collect();
        Log { words, first }
    }

    /// An empty log for `policy`: N fresh slots, laid out for a keyed limiter.
    pub(crate) fn new(policy: &SlidingLogPolicy) -> Log {
        Log::build(policy, KEYED_FIRST, 0, |_| SlotWord::FRESH.0)
    }

    /// An empty log for a direct limiter: the head and group word apart from the ring.
    pub(crate) fn direct(policy: &SlidingLogPolicy) -> Log {
        Log::build(policy, DIRECT_FIRST, 0, |_| SlotWord::FRESH.0)
    }

    /// The log of a key a keyed limiter creates afresh, "fresh as of `fresh`": N entries (lap 0,
    /// head at N) all at `fresh − W`. At readings from `fresh` on they have all left the window, so
    /// it judges exactly as an empty log does (admissions record the reading; the level counts
    /// nothing); at earlier readings the effective time stays below `fresh` and the oldest entry is
    /// still in the window, so it admits nothing there. A key forgotten at any reading up to
    /// `fresh` held a log whose newest entry was at or before that reading minus W (see
    /// [`Log::evict`]), which admits no more than this one at every reading, so forgetting
    /// never admits more than keeping would have. Before `W` no log can have expired, and an empty
    /// log is what a never-seen key has.
    pub(crate) fn fresh(policy: &SlidingLogPolicy, fresh: Nanos) -> Log {
        let Some(at) = fresh.clamped().checked_sub(policy.window) else {
            return Log::new(policy);
        };
        Log::build(policy, KEYED_FIRST, policy.count, |p| {
            SlotWord::new(p, policy.count, at).0
        })
    }

    /// Eviction: if every entry has left the window at `now` (and so at every later reading),
    /// the log judges exactly as [`Log::fresh`] of `now`; then marks it [`GONE`](cas::GONE) in
    /// slot `s % N` (`s` the head), where the next claim would have to write, and answers `true`.
    /// Claims may run concurrently: a claim seen half-done (slot written, head not yet moved, or
    /// a group's mark in place) answers `false`, and so does a claim that takes position `s`
    /// before the mark (the mark's compare-and-swap from the word judged then fails). Once the
    /// mark is in place no claim can take effect (each must replace the word in that slot), and
    /// every view that reaches the slot answers [`Gone`].
    pub(crate) fn evict(&self, policy: &SlidingLogPolicy, now: Nanos) -> bool {
        let count = self.len();
        let s = self.head();
        let word = self.load(s);
        if word.0 == cas::GONE || word.is_mark() || word.has_parity_of(s, count) {
            return false;
        }
        let expired =
            s == 0 || self.load(s - 1).ts().saturating_add(policy.window) <= now.clamped();
        // Head still at `s`: the entry read above was that of position `s - 1` (as in `view`).
        expired && self.head() == s && cas::mark_gone(self.slot(s), word.0)
    }

    /// Whether eviction has marked the log gone (the mark stays in the head's slot for good).
    pub(crate) fn is_gone(&self) -> bool {
        self.load(self.head()).0 == cas::GONE
    }

    /// N, the number of slots (at least 1).
    #[inline]
    fn len(&self) -> u64 {
        // usize -> u64 never truncates on the platforms Rust supports; `max` keeps the modulo safe.
        ((self.words.len() - self.first) as u64).max(1)
    }

    #[inline]
    fn slot(&self, p: u64) -> &AtomicU64 {
        // The index is below the slice's length, so it is in bounds.
        &self.words[self.first + (p % self.len()) as usize]
    }

    #[inline]
    fn load(&self, p: u64) -> SlotWord {
        // Acquire: pairs with the AcqRel claim, commit, fill or finish that wrote this word, so
        // that a helper that sees a claim and then moves the head publishes that claim with its
        // own Release, and a reader that sees a group's fill sees its mark too.
        SlotWord(self.slot(p).load(Ordering::Acquire))
    }

    #[inline]
    pub(crate) fn head(&self) -> u64 {
        // Acquire: pairs with the AcqRel head move that wrote this value, and through the chain of
        // head read-modify-writes with every earlier one; each was made by a thread that had seen the
        // claim of the position it passed, so every claim below the value read is visible here.
        self.words[HEAD].load(Ordering::Acquire)
    }

    /// Moves the head from `s` to `s + 1` if nobody has; the caller has seen position `s` claimed.
    #[inline]
    fn advance(&self, s: u64) {
        // AcqRel: the Release half publishes the claim of `s` this thread has seen to every thread
        // that later loads the head past `s` (see `head`); the Acquire half continues the chain
        // from the move that wrote `s`. Failure is Relaxed: someone else moved it, and the value
        // seen is not used. Positions never wrap in practice (2^64 admissions).
        let _ = cas::compare_exchange(
            &self.words[HEAD],
            s,
            s.wrapping_add(1),
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// Moves the head from anywhere in `from..to` to `to`; the caller has seen every position
    /// below `to` claimed (a group's, all filled and finished).
    fn advance_over(&self, from: u64, to: u64) {
        let mut h = from;
        while h < to {
            // AcqRel, as in `advance`: the Release half publishes the claims this thread has seen
            // (the whole group) to whoever loads the head past them. Failure is Relaxed: the value
            // seen only says where to try from (a thread that saw part of the group moved it).
            match cas::compare_exchange(
                &self.words[HEAD],
                h,
                to,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(seen) if seen > h && seen < to => h = seen,
                Err(_) => return,
            }
        }
    }

    /// The group whose mark `mark` was just loaded from slot `s % N` after a head load of `s`,
    /// or `None` if that view is already out of date (look again).
    fn group_at(&self, s: u64, mark: SlotWord) -> Option<Group> {
        // Acquire: the mark was committed after its request took the group word, so this load
        // returns that request's `n` or a later value; a later value (NO_GROUP, or the next
        // request's size) was written, with Release, after the group was finished, and this
        // Acquire then makes the finish visible to the check of the slot below, which fails.
        let n = self.words[GROUP].load(Ordering::Acquire);
        // Head still at `s`: the mark is position `s`'s, not a later lap's seen through a stale
        // head (the head reached that later position before its mark was committed). Mark still
        // in place: the group is not finished, so `n` is its size.
        if self.head() != s || self.load(s) != mark {
            return None;
        }
        Some(Group {
            s,
            // The group word of a committed group holds its `n` in `2..=N`; `clamp` keeps a
            // misread from reaching past the ring's lap (it cannot happen, see above).
            n: n.clamp(1, self.len()),
            t: mark.marked_ts(),
            mark,
        })
    }

    /// Finishes a committed group: fills its positions `s + 1..s + n` with entries at its time,
    /// then replaces its mark by the entry of `s` and gives the group word back. Any thread may
    /// run it, any number of times, concurrently: every write is a compare-and-swap to the one
    /// value the group defines, from the one value it replaces.
    fn finish(&self, g: Group) {
        let count = self.len();
        for p in g.s + 1..g.s + g.n {
            let entry = SlotWord::new(p, count, g.t);
            loop {
                let word = self.load(p);
                if word == entry {
                    break;
                }
                // Mark still in place: the group is not finished, so the head has not passed `s`
                // and slot `p % N` holds the entry of `p - N` or, once filled, that of `p` (the
                // load above, if it had seen anything later, would make this load see the finish).
                if self.load(g.s) != g.mark {
                    return;
                }
                // AcqRel: the Release half publishes the entry to every Acquire slot load (judges
                // that see it see the mark too, having loaded it after); the Acquire half pairs
                // with the claim of `p - N`. Failure is Relaxed: the slot is loaded again.
                if cas::compare_exchange(
                    self.slot(p),
                    word.0,
                    entry.0,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_ok()
                {
                    claims::record(p, g.t);
                    break;
                }
            }
        }
        // Every position after `s` is filled: replace the mark. AcqRel: Release publishes the
        // fills seen (and made) above to whoever loads the entry and moves the head past it;
        // Acquire pairs with the mark's commit. Failure is Relaxed: another thread finished it.
        if cas::compare_exchange(
            self.slot(g.s),
            g.mark.0,
            SlotWord::new(g.s, count, g.t).0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        )
        .is_ok()
        {
            claims::record(g.s, g.t);
            // Release: pairs with the Acquire of the next request for several that takes the word,
            // and with the Acquire load in `group_at` (a helper that reads this value sees the
            // finish above). Only the thread whose finish succeeded gives the word back.
            cas::store(&self.words[GROUP], NO_GROUP, Ordering::Release);
        }
        self.advance_over(g.s, g.s + g.n);
    }

    /// Reads a consistent view of the log at its head and judges a request for `n` admissions at
    /// reading `now`. With `claim` the caller means to claim position `s` (and a group in progress
    /// is finished first); without, the view is judged as the log will be once that group is
    /// finished, writing nothing. Writes nothing but head moves and a group's fills. `backoff`
    /// paces the retries: the caller's, so that a claim that keeps losing keeps backing off
    /// further instead of starting over at every view.
    fn view(
        &self,
        policy: &SlidingLogPolicy,
        now: u64,
        n: u64,
        tally: bool,
        claim: bool,
        backoff: &mut Backoff,
    ) -> Result<LogView, Gone> {
        let count = self.len();
        loop {
            let s = self.head();
            let word = self.load(s);
            if word.0 == cas::GONE {
                // Evicted (a keyed limiter's log only): nothing can be claimed here any more.
                return Err(Gone::seen());
            }
            if word.is_mark() {
                // A request for several holds positions `s..s + n` and is filling them.
                let Some(g) = self.group_at(s, word) else {
                    continue;
                };
                if claim {
                    // Position `s + n` is the next free one once the group is finished: finish
                    // it (the claim would wait for it otherwise), then look again.
                    self.finish(g);
                    continue;
                }
                // Judged on the log as it is once the group is finished: head `s + n`, the
                // group's positions at `t`, and positions `s + n - N..s` untouched by its fills.
                let verdict = policy.judge(g.s + g.n, now, 0, n, tally, |p| {
                    if p >= g.s {
                        g.t
                    } else {
                        self.load(p).ts()
                    }
                });
                // Mark still in place: every slot read above held the entry of its position.
                if self.load(s) == word {
                    return Ok(LogView { s, word, verdict });
                }
                backoff.pause();
                continue;
            }
            if word.has_parity_of(s, count) {
                // Position `s` is claimed (the slot holds at least position `s - N`, since the head
                // read shows that claim, and parity rules that one out): the head lags. Help, after
                // a pause that usually lets the claimer move the head itself.
                backoff.pause();
                self.advance(s);
                continue;
            }
            // Position `s - N` is judged by the word just read, never by a second load of its
            // slot: a racer may claim `s` in between without moving the head yet, and a judgment
            // mixing that newer entry with head `s` would count it as the entry it replaced.
            let reused = s.checked_sub(count);
            let verdict = policy.judge(s, now, 0, n, tally, |p| {
                if Some(p) == reused {
                    word.ts()
                } else {
                    self.load(p).ts()
                }
            });
            // Validation: a head still at `s` proves every slot read above held the entry of its
            // position below `s` (or, for slot `s % N`, position `s - N`): a later entry can only
            // be claimed by a thread that loaded a head past `s`, and seeing its claim would make
            // this load see that head too. A group's fills are written with the head at `s`,
            // after its mark: an answer that is not followed by a compare-and-swap from `word`
            // (a denial, a peek) checks that slot `s % N` still holds `word`, which it would not
            // if any fill had been seen.
            if self.head() == s && ((claim && verdict.is_ok()) || self.load(s) == word) {
                return Ok(LogView { s, word, verdict });
            }
            backoff.pause();
        }
    }

    /// Claims position `s` alone at reading `now`: a request for one.
    fn claim_one(
        &self,
        policy: &SlidingLogPolicy,
        now: u64,
    ) -> Result<Result<(u64, LogGrant), Denied>, Gone> {
        let count = self.len();
        let mut backoff = Backoff::new();
        loop {
            // No tally here: the level is counted after the claim succeeds (see `acquire`), so a
            // lost race wastes no binary search and the window between the view and the
            // compare-and-swap stays short.
            let LogView { s, word, verdict } =
                self.view(policy, now, 1, false, true, &mut backoff)?;
            let grant = match verdict {
                Ok(grant) => grant,
                Err(denied) => return Ok(Err(denied)),
            };
            let new = SlotWord::new(s, count, grant.at);
            // AcqRel: the Release half publishes the entry (and, with it, everything this thread saw
            // when it loaded the head at `s`) to the Acquire slot loads of judges and helpers; the
            // Acquire half pairs with the claim of `s - N` being replaced. Failure is Relaxed: the
            // value seen is discarded, and the retry starts over from an Acquire load of the head.
            match cas::compare_exchange(
                self.slot(s),
                word.0,
                new.0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    claims::record(s, grant.at);
                    self.advance(s);
                    return Ok(Ok((s, grant)));
                }
                Err(_) => {
                    retries::record();
                    // A lost race: let the winner finish (and move the head) before looking again,
                    // rather than pulling the head's and the slot's cache lines back at once.
                    backoff.pause();
                }
            }
        }
    }

    /// Claims positions `s..s + n` together at reading `now`: a request for `n` (`2..=N`), all or
    /// none. Answers the last position claimed.
    fn claim_group(
        &self,
        policy: &SlidingLogPolicy,
        now: u64,
        n: u64,
    ) -> Result<Result<(u64, LogGrant), Denied>, Gone> {
        let mut backoff = Backoff::new();
        loop {
            let LogView { s, word, verdict } =
                self.view(policy, now, n, false, true, &mut backoff)?;
            let grant = match verdict {
                Ok(grant) => grant,
                Err(denied) => return Ok(Err(denied)),
            };
            // Take the group word, so that the mark committed below can only mean this `n`.
            // AcqRel: Acquire pairs with the Release that gave it back (by the last group's
            // finisher, or a request whose commit failed); Release orders this `n` before the
            // commit, for helpers that load the mark. Failure is Relaxed: nothing is read.
            if cas::compare_exchange(
                &self.words[GROUP],
                NO_GROUP,
                n,
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_err()
            {
                // Another request for several is between its judgment and its commit (a
                // committed group is finished by the next view). Let it run.
                retries::record();
                backoff.pause();
                yield_now();
                continue;
            }
            let mark = SlotWord::mark(grant.at);
            // The commit: one compare-and-swap claims position `s` for the whole group. AcqRel,
            // as a single claim's; failure is Relaxed (the retry starts from a fresh view).
            match cas::compare_exchange(
                self.slot(s),
                word.0,
                mark.0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    self.finish(Group {
                        s,
                        n,
                        t: grant.at,
                        mark,
                    });
                    return Ok(Ok((s + n - 1, grant)));
                }
                Err(_) => {
                    // Position `s` went to another request: nothing of this one is in the log.
                    // Release: as the finisher's give-back.
                    cas::store(&self.words[GROUP], NO_GROUP, Ordering::Release);
                    retries::record();
                    backoff.pause();
                }
            }
        }
    }

    /// Admits `n` (`1..=N`) at reading `now`, all or none, or says when it could be; [`Gone`]
    /// if eviction has marked the log (then nothing took effect).
    pub(crate) fn acquire(
        &self,
        policy: &SlidingLogPolicy,
        now: u64,
        n: u64,
    ) -> Result<Result<Admitted, Denied>, Gone> {
        let claimed = if n > 1 {
            self.claim_group(policy, now, n)?
        } else {
            self.claim_one(policy, now)?
        };
        let (last, first) = match claimed {
            Ok(claimed) => claimed,
            Err(denied) => return Ok(Err(denied)),
        };
        // Admissions left at the effective time: the last N positions up to the last claimed, less
        // those still in the window. Counted from the ring as it is now: a racer's later claims
        // can only make entries look newer, so the count errs low, never high.
        let from = (last + 1).saturating_sub(policy.count);
        let ts = |p| self.load(p).ts();
        let first_in = policy.first_in_window(from, last + 1, first.at, &ts);
        let level = policy.count.saturating_sub(last + 1 - first_in);
        // The oldest entry in the window: `first_in <= last`, as the request's own are in it.
        let next = (ts(first_in) + policy.window).saturating_sub(now);
        Ok(Ok(LogGrant {
            level,
            next,
            ..first
        }
        .admitted()))
    }

    /// The judgment of `n` (`0..=N`) admissions at reading `now`, writing nothing; [`Gone`] if
    /// eviction has marked the log.
    pub(crate) fn peek(
        &self,
        policy: &SlidingLogPolicy,
        now: u64,
        n: u64,
    ) -> Result<Result<Admitted, Denied>, Gone> {
        Ok(self
            .view(policy, now, n, true, false, &mut Backoff::new())?
            .verdict
            .map(LogGrant::admitted))
    }

    /// Seals the log for a quota change: marks [`GONE`](cas::GONE) the slot of its head, where
    /// the next claim would have to write (a group in progress is finished first), so that no
    /// claim can succeed any more; answers the admissions it had left at `now` then (0 if it
    /// was sealed already). Claims may run concurrently.
    pub(crate) fn seal(&self, policy: &SlidingLogPolicy, now: u64) -> u64 {
        let mut backoff = Backoff::new();
        loop {
            // A view for a claim of nothing: it finishes a group in progress and helps the head
            // along, so that slot `s % N` holds the entry of position `s - N`.
            let Ok(LogView { s, word, verdict }) =
                self.view(policy, now, 0, true, true, &mut backoff)
            else {
                return 0;
            };
            // Release: as `cas::mark_gone`'s. Failure is Relaxed: a claim took position `s`, and
            // the log is looked at again. Success leaves positions below `s` as the view read
            // them (only claims of `s` or later write their slots), so its verdict is final.
            if cas::compare_exchange(
                self.slot(s),
                word.0,
                cas::GONE,
                Ordering::Release,
                Ordering::Relaxed,
            )
            .is_ok()
            {
                // A request for nothing is always admitted; were it refused, nothing is left.
                return verdict.map_or(0, |grant| grant.level);
            }
            backoff.pause();
        }
    }

    /// Fills a direct limiter's empty log, not yet shared, with `N - available` entries at `now`
    /// (positions `0..N - available`), so that `available` admissions are left there and the
    /// rest return a window later.
    pub(crate) fn refill(&self, policy: &SlidingLogPolicy, available: u64, now: u64) {
        let count = self.len();
        let used = policy.count.min(count) - available.min(policy.count).min(count);
        for p in 0..used {
            // Relaxed: the log is not shared yet; publishing it (Release) publishes these.
            cas::store(
                self.slot(p),
                SlotWord::new(p, count, now).0,
                Ordering::Relaxed,
            );
        }
        cas::store(&self.words[HEAD], used, Ordering::Relaxed);
    }

    /// The timestamps of the entries in the ring, oldest first: the last `min(N, head)` admissions.
    /// For tests; racing claims may make it inconsistent.
    #[cfg(all(test, not(tollgate_loom)))]
    fn entries(&self) -> Vec<u64> {
        let s = self.head();
        (s.saturating_sub(self.len())..s)
            .map(|p| self.load(p).ts())
            .collect()
    }
}

impl Contract for SlidingWindowLogAlgorithm {
    type Policy = SlidingLogPolicy;
    type State = Log;

    const NAME: &'static str = "SlidingWindowLog";

    fn policy(quota: &Quota) -> Result<SlidingLogPolicy, QuotaError> {
        SlidingLogPolicy::new(quota)
    }

    fn initial(policy: &SlidingLogPolicy, _: &Quota, _: Nanos) -> Log {
        // Empty: a window limiter starts with its whole count (validation makes the quota's
        // initial fill equal to it).
        Log::direct(policy)
    }

    fn fresh(policy: &SlidingLogPolicy, _tier: usize, at: Nanos) -> Log {
        Log::fresh(policy, at)
    }

    #[inline]
    fn acquire_one(
        policy: &SlidingLogPolicy,
        log: &Log,
        now: Nanos,
    ) -> Result<Result<Admitted, Denied>, Gone> {
        log.acquire(policy, now.clamped(), 1)
    }

    /// The whole outcome: the log's decision runs over several words and builds its outcome
    /// as it goes.
    type Verdict = Result<Admitted, AcquireError>;

    fn verdict(
        policy: &SlidingLogPolicy,
        log: &Log,
        now: Nanos,
        n: u64,
    ) -> Result<Result<Admitted, AcquireError>, Gone> {
        let outcome = match policy.check_n(n) {
            Err(e) => return Ok(Err(e.into())),
            Ok(true) => log.acquire(policy, now.clamped(), n)?,
            Ok(false) => log.peek(policy, now.clamped(), 0)?,
        };
        Ok(outcome.map_err(AcquireError::Denied))
    }

    #[inline]
    fn describe(
        _: &SlidingLogPolicy,
        outcome: Result<Admitted, AcquireError>,
        _: Nanos,
        _: u64,
    ) -> Result<Admitted, AcquireError> {
        outcome
    }

    fn peek(
        policy: &SlidingLogPolicy,
        log: Held<'_, Log>,
        now: Nanos,
        n: u64,
    ) -> Result<Result<Admitted, AcquireError>, Gone> {
        if let Err(e) = policy.check_n(n) {
            return Ok(Err(e.into()));
        }
        let outcome = match log {
            Held::Known(log) => log.peek(policy, now.clamped(), n)?,
            // Judged on the fresh log without building it.
            Held::Fresh { at, .. } => policy.judge_fresh(at, now.clamped(), n),
        };
        Ok(outcome.map_err(AcquireError::Denied))
    }

    fn remaining(policy: &SlidingLogPolicy, log: Held<'_, Log>, now: Nanos) -> Result<u64, Gone> {
        // A request for nothing is always admitted (`judge` admits `n = 0`); were it ever refused,
        // nothing is left.
        Ok(Self::peek(policy, log, now, 0)?.map_or(0, |a| a.remaining()))
    }

    fn evict(policy: &SlidingLogPolicy, log: &Log, now: Nanos) -> bool {
        log.evict(policy, now)
    }

    fn is_gone(log: &Log) -> bool {
        log.is_gone()
    }

    fn create(
        policy: &SlidingLogPolicy,
        tier: usize,
        fresh: Nanos,
        now: Nanos,
        n: u64,
    ) -> (Option<Log>, Result<Admitted, AcquireError>) {
        // Judge on the fresh log without building it: a request that writes nothing (a query, a
        // denial, one too large) leaves the key unheld and allocates nothing.
        match never_gone(Self::peek(policy, Held::Fresh { tier, at: fresh }, now, n)) {
            Ok(_) if n > 0 => {
                let log = Log::fresh(policy, fresh);
                // Nobody else can see this log yet: the judgment just made holds.
                let outcome = never_gone(Self::acquire(policy, &log, now, n));
                (Some(log), outcome)
            }
            other => (None, other),
        }
    }

    fn debug_state(_: &SlidingLogPolicy, log: &Log, f: &mut fmt::DebugStruct<'_, '_>) {
        f.field("head", &log.head());
    }

    fn capacity(policy: &SlidingLogPolicy) -> u64 {
        policy.count
    }

    fn seal(policy: &SlidingLogPolicy, log: &Log, now: Nanos) -> u64 {
        log.seal(policy, now.clamped())
    }

    fn refill(policy: &SlidingLogPolicy, log: &Log, available: u64, now: Nanos) {
        log.refill(policy, available, now.clamped());
    }

    fn converted(
        old: &SlidingLogPolicy,
        new: &SlidingLogPolicy,
        log: &Log,
        now: Nanos,
        _changed: &[bool],
    ) -> Log {
        // A log marked gone (evicted, not yet removed) stands for a fresh one: its successor is
        // fresh as of the change.
        if Self::is_gone(log) {
            return Self::settled(new, 0, new.count, now);
        }
        let left = log.seal(old, now.clamped());
        Self::settled(new, 0, left, now)
    }

    fn settled(policy: &SlidingLogPolicy, _tier: usize, available: u64, at: Nanos) -> Log {
        // A whole count is a fresh log as of `at`: what a key not held then stands for.
        if available >= policy.count {
            return Log::fresh(policy, at);
        }
        let log = Log::new(policy);
        log.refill(policy, available, at.clamped());
        log
    }
}

/// An exact sliding window log: never more than N admissions in any window of length W.
///
/// Its state is a ring of the last N admission times (`8 × N` bytes, at most [`MAX_LOG`] entries),
/// claimed lock-free: an admission is one compare-and-swap on one slot, a denial only reads. A
/// request for several is all or none: it commits with one compare-and-swap for all its positions,
/// or is denied having consumed nothing.
/// Generic over its [`Clock`](crate::Clock): [`MonotonicClock`] by default, [`ManualClock`](crate::ManualClock)
/// for tests. See the [module docs](self) for the protocol and its guarantees.
///
/// The methods every direct limiter shares (`try_acquire*`, `peek_n*`, `remaining*`, `quota`,
/// `clock`) are [`Direct`]'s.
///
/// # Memory ordering
///
/// Admissions are linearizable: each takes effect at one instant (its claiming compare-and-swap) in
/// a single total order, and the limit holds over the times they record. An admission is not a
/// synchronization point for other data: do not rely on it to make other writes visible.
///
/// # Examples
///
/// ```
/// use tollgate::window::SlidingWindowLog;
/// use tollgate::Quota;
///
/// // At most 10 requests in any minute.
/// let log = SlidingWindowLog::new(Quota::per_minute(10)?)?;
/// for _ in 0..10 {
///     assert!(log.try_acquire().is_ok());
/// }
/// let denied = log.try_acquire().unwrap_err();
/// assert!(denied.retry_after().as_secs() <= 60);
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub type SlidingWindowLog<C = MonotonicClock> = Direct<SlidingWindowLogAlgorithm, C>;

/// A per-thread record of the positions this thread claimed and the times it wrote, kept only in
/// the crate's own unit tests so that stress tests can rebuild the whole log; it compiles to nothing
/// elsewhere.
mod claims {
    #[cfg(all(test, not(tollgate_loom)))]
    std::thread_local! {
        static CLAIMS: std::cell::RefCell<Vec<(u64, u64)>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// Notes that this thread claimed position `p` at time `at`.
    #[inline(always)]
    pub(super) fn record(p: u64, at: u64) {
        #[cfg(all(test, not(tollgate_loom)))]
        CLAIMS.with(|c| c.borrow_mut().push((p, at)));
        let _ = (p, at);
    }

    /// The claims this thread made so far, and forgets them.
    #[cfg(all(test, not(tollgate_loom)))]
    pub(super) fn take() -> Vec<(u64, u64)> {
        CLAIMS.with(|c| std::mem::take(&mut *c.borrow_mut()))
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    const SEC: u64 = 1_000_000_000;
    /// The latest time an entry records: readings are clamped at 2^62.
    const TS_MAX: u64 = 1 << 62;

    fn policy(count: u64, window_ns: u64) -> SlidingLogPolicy {
        let quota = Quota::per_period(count, std::time::Duration::from_nanos(window_ns)).unwrap();
        SlidingLogPolicy::new(&quota).unwrap()
    }

    /// Judges against a plain vector of timestamps (positions 0.. in order).
    fn judge(p: &SlidingLogPolicy, log: &[u64], now: u64, n: u64) -> Result<LogGrant, Denied> {
        let s = log.len() as u64;
        p.judge(s, now, 0, n, true, |i| log[i as usize])
    }

    #[test]
    fn entries_pack_parity_and_time_and_the_fresh_word_is_never_a_claim() {
        let e = SlotWord::new(5, 3, 1234);
        assert_eq!(e.ts(), 1234);
        assert!(e.has_parity_of(5, 3) && e.has_parity_of(11, 3) && !e.has_parity_of(8, 3));
        assert!(SlotWord::new(0, 3, 0) != SlotWord::FRESH);
        // Fresh is lap -1: the parity of positions 3..6 of a log of 3, whose entries have ts >= W >= 1.
        assert!(SlotWord::FRESH.has_parity_of(3, 3) && !SlotWord::FRESH.has_parity_of(0, 3));
        assert_eq!(SlotWord::new(3, 3, 1 << 62).ts(), 1 << 62);
    }

    #[test]
    fn marks_carry_every_time_and_are_never_entries() {
        for t in [0, 1, 2, 3, TS_MAX - 1, TS_MAX, (1 << 61) + 1] {
            let mark = SlotWord::mark(t);
            assert!(mark.is_mark(), "{t}");
            assert_eq!(mark.marked_ts(), t);
            for p in [0, 1, 2, 3] {
                assert!(!SlotWord::new(p, 2, t).is_mark(), "{p} {t}");
            }
        }
        assert!(!SlotWord::FRESH.is_mark());
        assert_ne!(SlotWord::mark(4), SlotWord::mark(5));
    }

    #[test]
    fn judge_admits_n_then_denies_with_exact_retry() {
        let p = policy(3, SEC);
        let grant = judge(&p, &[], 10, 1).unwrap();
        assert_eq!((grant.at, grant.level, grant.reset), (10, 2, SEC));
        let log = [10, 20, 30];
        let d = judge(&p, &log, 40, 1).unwrap_err();
        assert_eq!(d.retry_at().as_u64(), 10 + SEC);
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.reset_after().as_nanos(), u128::from(30 + SEC - 40));
        // At exactly ts + W the oldest has left: the window is (t - W, t].
        let g = judge(&p, &log, 10 + SEC, 1).unwrap();
        assert_eq!(g.level, 0);
        assert!(judge(&p, &log, 10 + SEC - 1, 1).is_err());
        // Two need the second oldest gone.
        let d = judge(&p, &log, 10 + SEC, 2).unwrap_err();
        assert_eq!(d.retry_at().as_u64(), 20 + SEC);
        assert_eq!(d.remaining(), 1);
    }

    #[test]
    fn judge_clamps_time_to_the_newest_entry_and_the_floor() {
        let p = policy(2, 100);
        // A reading before the newest entry is judged at the newest entry.
        let g = judge(&p, &[50], 0, 1).unwrap();
        assert_eq!((g.at, g.level, g.reset), (50, 0, 150));
        let d = judge(&p, &[50, 60], 0, 1).unwrap_err();
        assert_eq!(d.retry_at().as_u64(), 150);
        assert_eq!(d.retry_after().as_nanos(), 150);
        let g = p.judge(0, 5, 70, 1, true, |_| unreachable!()).unwrap();
        assert_eq!(g.at, 70);
    }

    #[test]
    fn judge_of_nothing_reports_level_and_reset() {
        let p = policy(4, 100);
        let g = judge(&p, &[], 7, 0).unwrap();
        assert_eq!((g.level, g.reset), (4, 0));
        let g = judge(&p, &[0, 10, 60], 105, 0).unwrap();
        // 0 left at 100; 10 and 60 are in (5, 105].
        assert_eq!((g.at, g.level, g.reset), (105, 2, 55));
        let g = judge(&p, &[0, 10, 60], u64::MAX >> 2, 0).unwrap();
        assert_eq!((g.level, g.reset), (4, 0));
    }

    #[test]
    fn judge_never_panics_on_a_torn_view() {
        let p = policy(3, 1 << 62);
        for ts in [0, 1, u64::MAX >> 1, 1 << 62] {
            for s in [0, 1, 3, 4, u64::MAX] {
                for n in 0..=3 {
                    let _ = p.judge(s, 1 << 62, 1 << 62, n, n % 2 == 0, |i| ts ^ (i & 7));
                }
            }
        }
    }

    #[test]
    fn memory_is_eight_bytes_per_entry() {
        for count in [1, 7, MAX_LOG] {
            let log =
                SlidingWindowLog::with_clock(Quota::per_hour(count).unwrap(), ManualClock::new())
                    .unwrap();
            assert_eq!(log.block().state.len(), count);
            // The head, the group word and the padding, then the ring.
            assert_eq!(
                std::mem::size_of_val(&*log.block().state.words),
                8 * (DIRECT_FIRST + count as usize)
            );
            let keyed = Log::fresh(&log.block().policy, Nanos::new(u64::MAX));
            assert_eq!(keyed.len(), count);
            assert_eq!(
                std::mem::size_of_val(&*keyed.words),
                8 * (KEYED_FIRST + count as usize)
            );
            assert_eq!(std::mem::size_of::<Log>(), 24);
        }
    }

    #[test]
    fn the_ring_keeps_the_last_n_times_and_the_head_follows() {
        let log = SlidingWindowLog::with_clock(
            Quota::per_period(3, std::time::Duration::from_nanos(100)).unwrap(),
            ManualClock::new(),
        )
        .unwrap();
        for t in [0, 10, 20, 100, 115] {
            assert!(log.try_acquire_at(Nanos::new(t)).is_ok(), "{t}");
        }
        assert_eq!(log.block().state.entries(), vec![20, 100, 115]);
        assert_eq!(log.block().state.head(), 5);
        // A backwards reading records the newest time, not the reading.
        assert!(log.try_acquire_at(Nanos::new(5)).is_err());
        assert!(log.try_acquire_at(Nanos::new(120)).is_ok());
        assert!(log.try_acquire_n_at(2, Nanos::new(0)).is_err());
        assert!(log.try_acquire_at(Nanos::new(0)).is_err());
        assert_eq!(log.block().state.entries(), vec![100, 115, 120]);
        assert!(log.try_acquire_n_at(2, Nanos::new(216)).is_ok());
        assert_eq!(log.block().state.entries(), vec![120, 216, 216]);
    }

    #[test]
    fn denials_peeks_and_queries_never_write() {
        let log = SlidingWindowLog::with_clock(Quota::per_second(2).unwrap(), ManualClock::new())
            .unwrap();
        log.try_acquire_n(2).unwrap();
        let before = (log.block().state.head(), log.block().state.entries());
        for _ in 0..10 {
            assert!(log.try_acquire().is_err());
            assert!(log.peek_n(1).is_err());
            assert!(log.try_acquire_n(2).is_err());
            assert!(log.try_acquire_n(3).is_err());
            assert_eq!(log.try_acquire_n(0).unwrap().remaining(), 0);
            assert_eq!(log.remaining(), 0);
        }
        assert_eq!(
            (log.block().state.head(), log.block().state.entries()),
            before
        );
    }

    /// Checks a whole log rebuilt from every thread's claims: each position claimed exactly once,
    /// timestamps non-decreasing along positions, and no window `(t - W, t]` with more than N.
    fn check_full_log(mut claims: Vec<(u64, u64)>, count: u64, window: u64) {
        claims.sort_unstable();
        for (i, &(p, _)) in claims.iter().enumerate() {
            assert_eq!(p, i as u64, "every position claimed exactly once");
        }
        let ts: Vec<u64> = claims.iter().map(|&(_, t)| t).collect();
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "times never decrease");
        // Windows ending at each admission: the N-th admission after any one is at least W later.
        let n = count as usize;
        for i in n..ts.len() {
            assert!(
                ts[i] >= ts[i - n] + window,
                "{} admissions within {} ns at positions {}..={i}",
                n + 1,
                ts[i] - ts[i - n],
                i - n
            );
        }
    }

    /// Real threads whose readings arrive out of order (each lags the shared clock by its own,
    /// varying amount, and one thread moves the clock on): the rebuilt log still never decreases
    /// along positions and never holds more than N in any window.
    #[test]
    fn stress_out_of_order_readings_never_exceed_the_limit() {
        use std::sync::Arc;

        let (count, window) = (3u64, 1_000u64);
        let quota = Quota::per_period(count, std::time::Duration::from_nanos(window)).unwrap();
        let clock = ManualClock::new();
        let log = Arc::new(SlidingWindowLog::with_clock(quota, clock.clone()).unwrap());
        let handles: Vec<_> = (0..4u64)
            .map(|i| {
                let log = Arc::clone(&log);
                let clock = clock.clone();
                std::thread::spawn(move || {
                    for k in 0..50_000u64 {
                        if i == 0 {
                            clock.advance(std::time::Duration::from_nanos(7));
                        }
                        let lag = (k * (i + 3)) % 2_500;
                        let now = Nanos::new(clock.now().as_u64().saturating_sub(lag));
                        if k % 5 == 0 {
                            let _ = log.try_acquire_n_at(1 + k % 3, now);
                        } else {
                            let _ = log.try_acquire_at(now);
                        }
                    }
                    claims::take()
                })
            })
            .collect();
        let all: Vec<(u64, u64)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        assert!(all.len() as u64 > count, "the run admitted almost nothing");
        assert_eq!(all.len() as u64, log.block().state.head());
        check_full_log(all, count, window);
    }

    /// Real threads on one log: the rebuilt log never holds more than N in any window, and claims
    /// really raced (the work per thread grows until a lost claim is observed).
    #[test]
    fn stress_real_threads_never_exceed_the_limit_and_do_contend() {
        let (count, window) = (4u64, 20_000u64);
        let threads = 4;
        cas::until_contended(|per_thread| {
            let quota = Quota::per_period(count, std::time::Duration::from_nanos(window)).unwrap();
            let log = SlidingWindowLog::with_clock(quota, MonotonicClock::new()).unwrap();
            let results = cas::race(threads, |i| {
                let mut admitted = 0u64;
                for k in 0..per_thread {
                    // Mostly single requests; some pairs, and some peeks racing them.
                    admitted += match (k + i as u64) % 8 {
                        0 => log.try_acquire_n(2).map(|_| 2).unwrap_or(0),
                        1 => {
                            let _ = log.peek_n(1);
                            0
                        }
                        _ => u64::from(log.try_acquire().is_ok()),
                    };
                }
                (admitted, claims::take())
            });
            let (mut admitted, mut lost, mut all) = (0, 0, Vec::new());
            for ((a, c), r) in results {
                admitted += a;
                lost += r;
                all.extend(c);
            }
            // Every position claimed was reported as an admission: a denied pair claimed nothing.
            assert_eq!(
                all.len() as u64,
                admitted,
                "positions claimed vs admissions reported"
            );
            assert_eq!(all.len() as u64, log.block().state.head());
            check_full_log(all, count, window);
            lost
        });
    }
}
