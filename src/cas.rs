//! The one compare-and-swap loop every single-word algorithm uses.
//!
//! An algorithm supplies a pure decision `old word -> Step`; this loop loads the word, asks the
//! decision, and publishes the new word with `compare_exchange_weak`, retrying with the value it
//! saw when another thread got there first. A decision that writes nothing (a denial, a query)
//! returns without a store, so denials never contend for the cache line.

use crate::sync::{spin_loop, AtomicU64, Ordering};

/// The longest pause after a lost race, in spin-loop hints.
const MAX_SPINS: u32 = 64;

/// Exponential backoff after a lost compare-and-swap (also used by the multi-word loop of
/// [`SubWindowCounter`](crate::window::SubWindowCounter)).
///
/// Two cores admitting on one word otherwise trade its cache line on every attempt, and most of
/// their attempts fail: pausing a little (doubling up to [`MAX_SPINS`] hints, well under a
/// microsecond) lets the winner's next attempt find the line still in its cache. Measured on the
/// 2-core bench machine, it nearly doubles the throughput of two threads admitting on one bucket and
/// costs nothing uncontended (a thread that never loses a race never pauses).
pub(crate) struct Backoff {
    spins: u32,
}

impl Backoff {
    #[inline]
    pub(crate) fn new() -> Backoff {
        Backoff { spins: 1 }
    }

    #[cold]
    pub(crate) fn pause(&mut self) {
        // Under loom a spin hint is a yield to the model checker, which would shift which
        // interleavings its preemption bound reaches; a pause changes timing, never an outcome, so
        // the models run without it.
        if cfg!(tollgate_loom) {
            return;
        }
        for _ in 0..self.spins {
            spin_loop();
        }
        if self.spins < MAX_SPINS {
            self.spins *= 2;
        }
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
    let mut current = word.load(Ordering::Relaxed);
    let mut backoff = Backoff::new();
    loop {
        match decide(current) {
            Step::Write(new, answer) => {
                // Relaxed on both arms, as above: success publishes only `new` itself, failure hands
                // back the value to decide again from.
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

/// Puts `previous` back in `word` if, and only if, `word` still holds `written`: undoes one's own
/// write when nobody has touched the word since. Answers whether it did.
#[inline]
pub(crate) fn undo(word: &AtomicU64, written: u64, previous: u64) -> bool {
    // Relaxed: as in `update`; a single compare-and-swap against the latest value.
    word.compare_exchange(written, previous, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

/// Reads a word for a decision that will not write (peeks and queries).
#[inline]
pub(crate) fn read(word: &AtomicU64) -> u64 {
    // Relaxed: see `update`; a read publishes nothing and needs nothing published to it.
    word.load(Ordering::Relaxed)
}

/// A per-thread count of lost CAS races, kept only in the crate's own unit tests so that stress
/// tests can prove contention happened; it compiles to nothing elsewhere.
pub(crate) mod retries {
    #[cfg(all(test, not(tollgate_loom)))]
    std::thread_local! {
        static RETRIES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Notes one lost race on this thread.
    #[inline(always)]
    pub(crate) fn record() {
        #[cfg(all(test, not(tollgate_loom)))]
        RETRIES.with(|r| r.set(r.get() + 1));
    }

    /// Lost races on this thread so far.
    #[cfg(all(test, not(tollgate_loom)))]
    pub(crate) fn on_this_thread() -> u64 {
        RETRIES.with(std::cell::Cell::get)
    }
}
