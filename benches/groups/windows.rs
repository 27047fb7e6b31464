//! The window limiters beside `TokenBucket` and the peers that offer the same algorithm, one key,
//! 1 and 2 threads, accept-heavy (`windows_allow`) and reject-heavy (`windows_deny`).
//!
//! | bench | limiter | peer of |
//! | --- | --- | --- |
//! | `fixed` | `FixedWindow` | |
//! | `sliding_counter` | `SlidingWindowCounter` (one word) | |
//! | `sub_window_10` | `SubWindowCounter`, 10 sub-windows | |
//! | `sliding_log` | `SlidingWindowLog` | |
//! | `token_bucket` | `TokenBucket` (capacity N, N per W) | |
//! | `rg_fixed` | rate-guard-core 0.7.2 `FixedWindowCounterCore` | `fixed` |
//! | `rg_approx_sliding` | rate-guard-core `ApproximateSlidingWindowCore` (two windows, weighted) | `sliding_counter` |
//! | `rg_sliding_10` | rate-guard-core `SlidingWindowCounterCore`, 10 buckets | `sub_window_10` |
//! | `rl_log` (deny only) | rate_limiters 0.1.13 `SlidingWindowLogShared` | `sliding_log_clock` |
//!
//! Every limiter gets the same quota, [`N`] per [`W`] (16 000 per second: within every window
//! limiter's range, 10 sub-windows included), and the same readings, passed explicitly (`_at`
//! forms; rate-guard-core takes them as ticks in nanoseconds), so no clock read is timed: what is
//! measured is the decision and its atomic or lock.
//!
//! - **Accept-heavy:** each thread's readings advance by [`STEP`] = 4W/N per check, so a thread
//!   offers a quarter of the limit and two threads half of it, and every 64 checks a thread catches
//!   up with the latest reading any thread has reached (see [`next_reading`]), so two threads'
//!   readings drift apart by tens of checks, where the limit is thousands away. Every check is admitted, save a few where
//!   the readings of two threads cross (tollgate counts an older reading in the newer window;
//!   rate-guard-core refuses it as an expired tick). The admitted share must be at least 90 % for
//!   tollgate's limiters; the peers' share is not asserted. rate-guard-core answers
//!   "contention" when its `try_lock` fails: the bench retries then, as a caller that needs an
//!   answer would.
//! - **Reject-heavy:** the limiter is filled with N at a reading inside its first window of an
//!   hour, and every check uses that reading: every check is refused (asserted). rate_limiters'
//!   log reads the wall clock in whole seconds itself and cannot take readings, so it is measured
//!   beside `sliding_log_clock`, tollgate's log reading its own clock (`try_acquire()`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use rate_guard_core::cores::{
    ApproximateSlidingWindowCore, FixedWindowCounterCore, SlidingWindowCounterCore,
};
use rate_guard_core::rate_limit::RateLimitCore;
use rate_guard_core::{SimpleRateLimitError, SimpleRateLimitResult};
use rate_limiters::sliding_window_log::{SlidingWindowLogConfig, SlidingWindowLogShared};
use rate_limiters::RateLimiterShared;
use testkit::bench::{admit, admit_at};
use tollgate::window::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, SubWindowCounter};
use tollgate::{Limiter, ManualClock, MonotonicClock, Nanos, Quota, TokenBucket};

use super::contended::shared_limiter;

/// Admissions per window: large, so that threads whose readings drift apart by a few hundred
/// checks stay far from the limit (see [`next_reading`]), and within every window limiter's range
/// (10 sub-windows of 100 ms take up to 16 383).
const N: u64 = 16_000;

/// The window, in nanoseconds: one second.
const W: u64 = 1_000_000_000;

/// Sub-windows of the bucketed counters.
const SUB_WINDOWS: u64 = 10;

/// How far each thread's readings advance per check when accept-heavy: a quarter of the limit.
const STEP: u64 = 4 * W / N;

/// The reading every reject-heavy check uses: inside the first of hour-long windows.
const DENY_AT: u64 = 1_800_000_000_000;

/// Checks between two syncs of a thread's readings with the others'.
const SYNC_EVERY: u64 = 64;

thread_local! {
    /// This thread's accept-heavy reading and its check count. The bench threads are fresh for
    /// every sample.
    static READING: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The latest accept-heavy reading any thread has published. Threads that drifted apart would
/// otherwise pile the laggard's checks into the leader's window (a reading older than a limiter's
/// window counts in that window), refusing checks that the load means to admit.
static PUBLISHED: AtomicU64 = AtomicU64::new(0);

/// The next accept-heavy reading of this thread: [`STEP`] after its last, and every
/// [`SYNC_EVERY`] checks (its first included) no earlier than the latest any thread published. The
/// sync is one `fetch_max` on a shared word per 64 checks, the same for every limiter measured;
/// drift between threads stays near 64 steps, where the limit is N / 4 = 4 000 steps away.
#[inline(always)]
fn next_reading() -> u64 {
    READING.with(|r| {
        let (last, checks) = r.get();
        let mut now = last + STEP;
        if checks % SYNC_EVERY == 0 {
            // Relaxed: only the value matters; no other data travels with it.
            now = now.max(PUBLISHED.fetch_max(now, Ordering::Relaxed));
        }
        r.set((now, checks + 1));
        now
    })
}

/// Which answer the checks get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    Accept,
    Deny,
}

impl Load {
    fn name(self) -> &'static str {
        match self {
            Load::Accept => "allow",
            Load::Deny => "deny",
        }
    }

    /// The window: a second accept-heavy, an hour reject-heavy (nothing refills during a run).
    fn window(self) -> Duration {
        match self {
            Load::Accept => Duration::from_nanos(W),
            Load::Deny => Duration::from_secs(3_600),
        }
    }

    fn window_ns(self) -> u64 {
        u64::try_from(self.window().as_nanos()).expect("an hour fits")
    }

    fn quota(self) -> Quota {
        Quota::per_period(N, self.window()).expect("the bench quota is valid")
    }

    /// The reading for the next check.
    #[inline(always)]
    fn reading(self) -> u64 {
        match self {
            Load::Accept => next_reading(),
            Load::Deny => DENY_AT,
        }
    }

    /// Panics unless the admitted share is what this load promises (`strict`: tollgate's
    /// limiters; the peers are only checked when reject-heavy).
    fn verify(self, bench: &str, admitted: u64, checks: u64, strict: bool) {
        match self {
            Load::Accept if strict => assert!(
                admitted * 10 >= checks * 9,
                "{bench}: accept-heavy, yet only {admitted} of {checks} checks were admitted"
            ),
            Load::Accept => {}
            Load::Deny => assert_eq!(
                admitted, 0,
                "{bench}: reject-heavy, yet {admitted} of {checks} were admitted"
            ),
        }
    }
}

/// rate-guard-core's answer as a caller who needs one sees it: retried while its lock is taken.
#[inline(always)]
fn rg(mut decide: impl FnMut() -> SimpleRateLimitResult) -> bool {
    loop {
        match decide() {
            Err(SimpleRateLimitError::ContentionFailure) => std::hint::spin_loop(),
            outcome => return outcome.is_ok(),
        }
    }
}

/// Registers the `windows_allow` and `windows_deny` groups.
pub(crate) fn bench(c: &mut Criterion) {
    for load in [Load::Accept, Load::Deny] {
        let mut group = c.benchmark_group(format!("windows_{}", load.name()));
        group
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(2))
            .sample_size(15);
        for threads in [1, 2] {
            group.throughput(Throughput::Elements(threads as u64));
            one_key(&mut group, load, threads);
        }
        group.finish();
    }
}

/// `make`, followed when reject-heavy by `fill` (which must succeed).
fn filled<L>(load: Load, make: impl Fn() -> L, fill: impl Fn(&L) -> bool) -> impl Fn() -> L {
    move || {
        let limiter = make();
        if load == Load::Deny {
            assert!(fill(&limiter), "the bench limiter takes its fill");
        }
        limiter
    }
}

/// A tollgate limiter's row: `make` builds it fresh every sample (filled with N at the reject-heavy
/// reading when reject-heavy), and every check is `try_acquire_at` through the `Limiter` trait, on
/// the concrete type (no dynamic dispatch is timed).
fn tollgate_row<L: Limiter + Sync>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    load: Load,
    threads: usize,
    name: &str,
    make: impl Fn() -> L,
) {
    let make = filled(load, make, |l| {
        l.try_acquire_n_at(N, Nanos::new(DENY_AT)).is_ok()
    });
    measure(group, load, threads, name, true, make, |l| {
        admit_at(l, Nanos::new(load.reading()))
    });
}

/// A rate-guard-core limiter's row, built and checked as [`tollgate_row`] does (its answer is not
/// asserted when accept-heavy: see the module docs).
fn rg_row<L: RateLimitCore>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    load: Load,
    threads: usize,
    name: &str,
    make: impl Fn() -> L,
) {
    let make = filled(load, make, |l| l.try_acquire_at(DENY_AT, N).is_ok());
    measure(group, load, threads, name, false, make, |l| {
        rg(|| l.try_acquire_at(load.reading(), 1))
    });
}

fn one_key(group: &mut BenchmarkGroup<'_, WallTime>, load: Load, threads: usize) {
    let quota = load.quota();
    tollgate_row(group, load, threads, "fixed", || {
        FixedWindow::with_clock(quota, ManualClock::new()).expect("a valid window quota")
    });
    tollgate_row(group, load, threads, "sliding_counter", || {
        SlidingWindowCounter::with_clock(quota, ManualClock::new()).expect("a valid window quota")
    });
    tollgate_row(group, load, threads, "sub_window_10", || {
        SubWindowCounter::with_clock(quota, SUB_WINDOWS, ManualClock::new())
            .expect("a valid window quota")
    });
    tollgate_row(group, load, threads, "sliding_log", || {
        SlidingWindowLog::with_clock(quota, ManualClock::new()).expect("a valid log quota")
    });
    tollgate_row(group, load, threads, "token_bucket", || {
        TokenBucket::with_clock(quota, ManualClock::new())
    });

    let window = load.window_ns();
    rg_row(group, load, threads, "rg_fixed", || {
        FixedWindowCounterCore::new(N, window)
    });
    rg_row(group, load, threads, "rg_approx_sliding", || {
        ApproximateSlidingWindowCore::new(N, window)
    });
    rg_row(group, load, threads, "rg_sliding_10", || {
        SlidingWindowCounterCore::new(N, window / SUB_WINDOWS, SUB_WINDOWS)
    });

    if load == Load::Deny {
        measure(
            group,
            load,
            threads,
            "sliding_log_clock",
            true,
            || {
                let l = SlidingWindowLog::with_clock(quota, MonotonicClock::new())
                    .expect("a valid log quota");
                assert!(
                    l.try_acquire_n(N).is_ok(),
                    "the bench limiter takes its fill"
                );
                l
            },
            admit,
        );

        measure(
            group,
            load,
            threads,
            "rl_log",
            false,
            || {
                let l = SlidingWindowLogShared::new(SlidingWindowLogConfig {
                    capacity: u32::try_from(N).expect("N fits"),
                    window_secs: 3_600,
                });
                assert!(l.try_acquire(u32::try_from(N).expect("N fits")));
                l
            },
            |l| l.try_acquire(1),
        );
    }
}

/// One benchmark: `threads` threads checking one limiter that `make` builds fresh every sample.
fn measure<L: Sync>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    load: Load,
    threads: usize,
    name: &str,
    strict: bool,
    make: impl Fn() -> L,
    check: impl Fn(&L) -> bool + Sync,
) {
    let id = BenchmarkId::new(name, threads);
    shared_limiter(group, id, threads, make, check, |admitted, checks| {
        load.verify(name, admitted, checks, strict)
    });
}
