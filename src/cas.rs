//! The one compare-and-swap loop every single-word algorithm uses.
//!
//! An algorithm supplies a pure decision `old word -> Step`; this loop loads the word, asks the
//! decision, and publishes the new word with `compare_exchange_weak`, retrying with the value it
//! saw when another thread got there first. A decision that writes nothing (a denial, a query)
//! returns without a store, so denials never contend for the cache line.

use crate::sync::{fence, AtomicU64, Ordering};

/// Exponential backoff after a lost compare-and-swap (also used by the multi-word loops of the
/// sub-window counter and the sliding log): `crossbeam_utils::Backoff::spin`, which doubles a run
/// of spin-loop hints from 1 up to 64 (well under a microsecond), behind a guard for loom.
///
/// Two cores admitting on one word otherwise trade its cache line on every attempt, and most of
/// their attempts fail: pausing a little lets the winner's next attempt find the line still in its
/// cache. Measured on the 2-core bench machine, it nearly doubles the throughput of two threads
/// admitting on one bucket and costs nothing uncontended (a thread that never loses a race never
/// pauses). The crate's own hand-written loop did exactly what crossbeam's does (1, 2, 4, ... 64
/// hints, then 64 again), so it gave way to the dependency the crate already has.
pub(crate) struct Backoff(crossbeam_utils::Backoff);

impl Backoff {
    #[inline]
    pub(crate) fn new() -> Backoff {
        Backoff(crossbeam_utils::Backoff::new())
    }

    #[cold]
    pub(crate) fn pause(&mut self) {
        // Under loom a spin hint is a yield to the model checker, which would shift which
        // interleavings its preemption bound reaches; a pause changes timing, never an outcome, so
        // the models run without it.
        if cfg!(tollgate_loom) {
            return;
        }
        self.0.spin();
    }
}

/// What a decision wants done with the word it was shown.
#[derive(Debug)]
pub enum Step<T, E> {
    /// Replace the word with `.0` and, if that succeeds, answer `Ok(.1)`.
    Write(u64, T),
    /// Leave the word as it is and answer `Ok(.0)`.
    Keep(T),
    /// Leave the word as it is and answer `Err(.0)`.
    Refuse(E),
}

impl<T, E> Step<T, E> {
    /// The same step, its answer (of a write or a keep) passed through `f`.
    pub(crate) fn map<U>(self, f: impl FnOnce(T) -> U) -> Step<U, E> {
        match self {
            Step::Write(word, answer) => Step::Write(word, f(answer)),
            Step::Keep(answer) => Step::Keep(f(answer)),
            Step::Refuse(refusal) => Step::Refuse(refusal),
        }
    }
}

#[cfg(all(test, not(tollgate_loom)))]
impl<T: std::fmt::Debug, E: std::fmt::Debug> Step<T, E> {
    /// The word and answer of a `Write`; panics on any other step (tests only).
    #[track_caller]
    pub(crate) fn written(self) -> (u64, T) {
        match self {
            Step::Write(word, answer) => (word, answer),
            other => panic!("expected a write, got {other:?}"),
        }
    }

    /// The refusal of a `Refuse`; panics on any other step (tests only).
    #[track_caller]
    pub(crate) fn refused(self) -> E {
        match self {
            Step::Refuse(refusal) => refusal,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// Runs `decide` against `word` until its answer is applied to the value it was computed from.
///
/// `decide` may run several times (once per lost race); it must be a pure function of its argument.
#[inline]
pub(crate) fn update<T, E>(
    word: &AtomicU64,
    mut decide: impl FnMut(u64) -> Step<T, E>,
) -> Result<T, E> {
    // Relaxed everywhere: the word is the whole state and publishes no other memory, and every
    // read-modify-write of one atomic sees the latest value in its modification order, which is all
    // the CAS needs to never lose or double an update.
    let current = word.load(Ordering::Relaxed);
    match decide(current) {
        Step::Write(new, answer) => {
            writes::record();
            // Relaxed on both arms, as above: success publishes only `new` itself, failure hands
            // back the value to decide again from.
            match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => Ok(answer),
                Err(seen) => retry(word, seen, decide),
            }
        }
        Step::Keep(answer) => Ok(answer),
        Step::Refuse(err) => Err(err),
    }
}

/// [`update`] after its first compare-and-swap lost to `seen`: the loop, kept out of line so that
/// the first attempt (the only one an uncontended call or a denial makes) holds no loop state.
#[cold]
#[inline(never)]
fn retry<T, E>(
    word: &AtomicU64,
    mut current: u64,
    mut decide: impl FnMut(u64) -> Step<T, E>,
) -> Result<T, E> {
    retries::record();
    let mut backoff = Backoff::new();
    backoff.pause();
    loop {
        match decide(current) {
            Step::Write(new, answer) => {
                writes::record();
                // Relaxed on both arms, as in `update`.
                match word.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => return Ok(answer),
                    Err(seen) => {
                        retries::record();
                        backoff.pause();
                        // Decide again from the value that beat us; it may be stale again by the
                        // time we retry, which the next compare-and-swap will tell.
                        current = seen;
                    }
                }
            }
            Step::Keep(answer) => return Ok(answer),
            Step::Refuse(err) => return Err(err),
        }
    }
}

/// The word of a keyed limiter's state that eviction has forgotten: see [`Gone`]. No algorithm
/// ever writes it otherwise: the GCRA's words stay below `3 × 2^62 + 1`, the windows' indices
/// leave their top bits clear for every reading up to 2^62 ns, and in the sliding log's slots it
/// is neither an entry nor a group's mark (each algorithm's tests check its own bound).
pub(crate) const GONE: u64 = u64::MAX;

/// A keyed limiter's state that eviction has marked [`GONE`]: its key has been forgotten, and the
/// state will be unlinked from the map, if it has not been already. A decision that meets the mark
/// has taken effect nowhere; the caller decides again on the key as the map holds it now (a fresh
/// state, fresh as of the eviction's reading or later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

impl Gone {
    /// The mark was just seen, by a load of any ordering.
    #[cold]
    pub(crate) fn seen() -> Gone {
        // Acquire: pairs with the Release of the compare-and-swap that wrote the mark (`mark_gone`),
        // so that what the eviction did before marking (raising the limiter's floor) is visible
        // to the decision this caller makes next on the key's fresh state. (Today's map, and the
        // loom models' stand-in, also order it through their locks; a map whose lookups release
        // nothing would not.)
        fence(Ordering::Acquire);
        Gone
    }
}

/// [`update`] on a keyed limiter's state, which eviction may have marked [`GONE`]: a decision is
/// never made on the mark, and meeting it answers [`Gone`].
///
/// Always inlined: left to the compiler it was called out of line from the keyed check, and its
/// nested `Result` was then built in memory and copied back; inlined, a keyed check executes
/// fewer instructions, data reads and data writes (counted with callgrind by
/// `benches/instructions.sh`; the counts before and after are in `benches/README.md`, issue 23).
#[inline(always)]
pub(crate) fn update_live<T, E>(
    word: &AtomicU64,
    mut decide: impl FnMut(u64) -> Step<T, E>,
) -> Result<Result<T, E>, Gone> {
    let outcome = update(word, |current| {
        if current == GONE {
            return Step::Refuse(None);
        }
        match decide(current) {
            Step::Write(new, answer) => Step::Write(new, answer),
            Step::Keep(answer) => Step::Keep(answer),
            Step::Refuse(err) => Step::Refuse(Some(err)),
        }
    });
    match outcome {
        Ok(answer) => Ok(Ok(answer)),
        Err(Some(err)) => Ok(Err(err)),
        Err(None) => Err(Gone::seen()),
    }
}

/// Marks `word` [`GONE`] if it still holds `seen`, the word an eviction judged forgettable: once
/// this succeeds no decision can take effect on the state (each would have to replace the mark).
/// Answers whether it did.
pub(crate) fn mark_gone(word: &AtomicU64, seen: u64) -> bool {
    writes::record();
    // Release: publishes what the eviction did before marking (raising the floor) to whoever sees
    // the mark (`Gone::seen`). Failure is Relaxed: a decision changed the word, which is then no
    // longer the one judged, and the key is kept.
    seen != GONE
        && word
            .compare_exchange(seen, GONE, Ordering::Release, Ordering::Relaxed)
            .is_ok()
}

/// Seals `word` for a quota change: swaps in [`GONE`] whatever it holds, so that no decision can
/// take effect on it any more, and answers the last word it held (which no decision can change
/// now).
pub(crate) fn seal(word: &AtomicU64) -> u64 {
    writes::record();
    // Release: as `mark_gone`'s, for whoever sees the mark (`Gone::seen`); the swap reads the
    // latest word in its modification order, so no decision's write is lost.
    word.swap(GONE, Ordering::Release)
}

/// Puts `previous` back in `word` if, and only if, `word` still holds `written`: undoes one's own
/// write when nobody has touched the word since. Answers whether it did.
#[inline]
pub(crate) fn undo(word: &AtomicU64, written: u64, previous: u64) -> bool {
    writes::record();
    // Relaxed: as in `update`; a single compare-and-swap against the latest value.
    word.compare_exchange(written, previous, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

/// Defines `$name`, [`AtomicU64`]'s compare-and-swap of that name on a limiter's state, counted as
/// an attempted write in test builds. The orderings are the caller's, and so are their comments.
macro_rules! counted_compare_exchange {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[inline]
        pub(crate) fn $name(
            word: &AtomicU64,
            current: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u64, u64> {
            writes::record();
            word.$name(current, new, success, failure)
        }
    };
}

counted_compare_exchange! {
    /// A compare-and-swap on a limiter's state outside [`update`] (the multi-word protocols of the
    /// sub-window counter and the sliding log), counted as an attempted write in test builds. Every
    /// write to a limiter's state goes through this module, so that the tests can prove that
    /// denials and peeks write nothing.
    compare_exchange
}

counted_compare_exchange! {
    /// As [`compare_exchange`], allowed to fail spuriously (for retry loops).
    compare_exchange_weak
}

/// A store to a limiter's state, counted as a write in test builds (see [`compare_exchange`]).
#[inline]
pub(crate) fn store(word: &AtomicU64, value: u64, order: Ordering) {
    writes::record();
    word.store(value, order);
}

/// [`read`] of a state that may be marked [`GONE`] (evicted, or sealed by a quota change).
#[inline]
pub(crate) fn read_live(word: &AtomicU64) -> Result<u64, Gone> {
    match read(word) {
        GONE => Err(Gone::seen()),
        word => Ok(word),
    }
}

/// Reads a word for a decision that will not write (peeks and queries).
#[inline]
pub(crate) fn read(word: &AtomicU64) -> u64 {
    // Relaxed: see `update`; a read publishes nothing and needs nothing published to it.
    word.load(Ordering::Relaxed)
}

/// Defines a module holding a per-thread count, kept only in the crate's own unit tests (it
/// compiles to nothing elsewhere): `record()` adds one on this thread, `on_this_thread()` answers
/// the count so far.
macro_rules! per_thread_count {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        pub(crate) mod $name {
            #[cfg(all(test, not(tollgate_loom)))]
            std::thread_local! {
                static COUNT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
            }

            /// Adds one on this thread.
            #[inline(always)]
            pub(crate) fn record() {
                #[cfg(all(test, not(tollgate_loom)))]
                COUNT.with(|c| c.set(c.get() + 1));
            }

            /// The count on this thread so far.
            #[cfg(all(test, not(tollgate_loom)))]
            pub(crate) fn on_this_thread() -> u64 {
                COUNT.with(std::cell::Cell::get)
            }
        }
    };
}

per_thread_count!(
    /// Lost CAS races, so that stress tests can prove contention happened.
    retries
);

per_thread_count!(
    /// Attempted writes to limiter state (every compare-and-swap, successful or not: a same-value
    /// compare-and-swap still takes the cache line exclusive), so that the tests can prove denials
    /// and peeks write nothing. Every write site of a limiter's state records before it writes.
    writes
);

/// The stress tests' search for contention: runs `attempt(per_thread)`, with `per_thread` from
/// 20 000 doubling up to 8 times, until an attempt answers that its threads lost a race (a lost
/// race is what proves the threads overlapped). Each attempt checks its own results. Panics when no
/// attempt ever lost a race: the stress test then proved nothing.
#[cfg(all(test, not(tollgate_loom)))]
#[track_caller]
pub(crate) fn until_contended(mut attempt: impl FnMut(u64) -> u64) {
    let mut per_thread = 20_000;
    for _ in 0..8 {
        if attempt(per_thread) > 0 {
            return;
        }
        per_thread *= 2;
    }
    panic!("no lost compare-and-swap race observed: the stress test proved nothing");
}

/// Runs `work(t)` for `t` in `0..threads`, each on its own thread, all released together by a
/// barrier; answers each thread's result beside the CAS races it lost, in thread order. A panic
/// on any thread fails the caller (the scope re-raises it once every thread has ended).
#[cfg(all(test, not(tollgate_loom)))]
pub(crate) fn race<T: Send>(threads: usize, work: impl Fn(usize) -> T + Sync) -> Vec<(T, u64)> {
    let barrier = std::sync::Barrier::new(threads);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                scope.spawn(move || {
                    barrier.wait();
                    let result = work(t);
                    (result, retries::on_this_thread())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}
