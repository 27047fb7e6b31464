//! Per-call latency of one admission on one hot key: p50, p90, p99 and p99.9 for `ShardedBucket`,
//! `TokenBucket` and governor, on 1 and 2 threads, accept-heavy (every call admitted, verified);
//! and of one admission on one of [`KEYS`] known keys (pseudo-random per call) for the keyed
//! limiters of tollgate and governor.
//!
//! Criterion reports a mean time per iteration; a tail percentile needs every call timed on its own,
//! so this is a separate `harness = false` bench that prints a markdown table:
//!
//! ```sh
//! cargo bench --bench latency                      # about 10 s on the 2-core bench machine
//! cargo bench --bench latency -- --test            # smoke test: one short round
//! ```
//!
//! # The timer
//!
//! Each call is bracketed by two stamps, each `lfence; rdtsc; lfence` (`quanta::Clock::raw`, which is
//! a bare `rdtsc` on x86_64 with an invariant TSC, between two `_mm_lfence`). The fences keep the
//! out-of-order core from reading the counter before the call's compare-and-swap has completed or
//! from starting the call before the first reading: without them, `rdtsc` may execute early and a
//! slow call looks fast. The difference in ticks goes into an `hdrhistogram` (3 significant
//! digits); ticks become nanoseconds through quanta's calibration (`Clock::delta_as_nanos`) only
//! when the table is printed. Elsewhere (no TSC) `raw` is quanta's monotonic clock, in nanoseconds.
//!
//! The timer's own cost is measured, not guessed: the `timer only` row times an empty call with the
//! same two stamps. Its value is part of every other row and is **not subtracted**, because the
//! stamps overlap the call's own work in the pipeline by an amount that cannot be known, so
//! subtracting the empty-call figure could take off more than the timer really added.
//!
//! # The run
//!
//! [`ROUNDS`] rounds; each round runs every limiter at every thread count, in the same order, on a
//! fresh limiter (full) and fresh threads released together by a barrier, each thread making
//! [`CALLS`] timed calls into a histogram of its own, after an untimed warm-up. A row's percentiles
//! are over all its calls in all rounds; a column gives the spread of each round's own p99, to show
//! how much the machine's noise moved it.
//!
//! The control: on Linux each thread also reads its own on-CPU time (`/proc/thread-self/schedstat`)
//! around its timed calls. A 2-thread row in which a thread ran for much less than its wall time did
//! not get two cores side by side (another process took one), so its threads collided less than they
//! would on a quiet machine; the last column shows the worst share, and the output warns below 90 %.
//!
//! Recording into the histogram happens between calls, so two threads on one key collide a little
//! less often than in the tight loops of the criterion groups: this is latency under a load of one
//! call every ~100 ns per thread, not a throughput.

use std::hint::black_box;
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

// The same loads as the criterion groups.
use testkit::bench::{admit, Load};

/// Rounds of every (limiter, thread count) pair.
const ROUNDS: usize = 5;

/// Timed calls per thread per round.
const CALLS: u64 = 2_000_000;

/// Untimed calls per thread before each round's timed ones.
const WARM_UP: u64 = 100_000;

/// The keyed rows' key space: the keys `0..KEYS`, all known before timing.
const KEYS: u64 = 100_000;

/// The thread counts: 1 is the uncontended reference, 2 is one thread per core on the bench machine.
const THREADS: [usize; 2] = [1, 2];

/// The stamps around each call, in ticks of quanta's raw clock.
struct Stopwatch {
    clock: quanta::Clock,
}

impl Stopwatch {
    /// One fenced reading: nothing before it is still executing, nothing after it has started.
    #[inline(always)]
    fn stamp(&self) -> u64 {
        fence();
        let ticks = self.clock.raw();
        fence();
        ticks
    }

    /// `ticks` as nanoseconds, through quanta's calibration.
    fn nanos(&self, ticks: u64) -> u64 {
        self.clock.delta_as_nanos(0, ticks)
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fence() {
    // SAFETY: `lfence` needs SSE2, which is part of the x86_64 baseline: every x86_64 CPU has it.
    unsafe { std::arch::x86_64::_mm_lfence() };
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn fence() {
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// What a row times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    /// Two stamps around nothing: the timer's own cost.
    Timer,
    /// `ShardedBucket::try_acquire`, default shard count.
    Sharded,
    /// `TokenBucket::try_acquire`.
    TokenBucket,
    /// governor's `RateLimiter::check`.
    Governor,
    /// `KeyedLimiter::<u64>::check_key` on one of [`KEYS`] known keys.
    Keyed,
    /// governor's keyed `RateLimiter::check_key` on one of [`KEYS`] known keys.
    GovernorKeyed,
}

impl Subject {
    const ALL: [Subject; 6] = [
        Subject::Timer,
        Subject::Sharded,
        Subject::TokenBucket,
        Subject::Governor,
        Subject::Keyed,
        Subject::GovernorKeyed,
    ];

    fn name(self) -> &'static str {
        match self {
            Subject::Timer => "timer only",
            Subject::Sharded => "ShardedBucket",
            Subject::TokenBucket => "TokenBucket",
            Subject::Governor => "governor",
            Subject::Keyed => "KeyedLimiter (100 000 keys)",
            Subject::GovernorKeyed => "governor keyed (100 000 keys)",
        }
    }

    /// One round: a fresh limiter, `threads` threads of `calls` timed calls each. Returns the
    /// histogram and the smallest on-CPU share of any thread (`None` where it cannot be read).
    fn round(self, sw: &Stopwatch, threads: usize, calls: u64) -> (Histogram<u64>, Option<f64>) {
        let load = Load::Accept;
        let (histogram, admitted, on_cpu) = match self {
            Subject::Timer => timed_threads(sw, threads, calls, &(), |_| black_box(true)),
            Subject::Sharded => {
                let limiter = load.sharded();
                timed_threads(sw, threads, calls, &limiter, admit)
            }
            Subject::TokenBucket => {
                let bucket = load.tollgate();
                timed_threads(sw, threads, calls, &bucket, admit)
            }
            Subject::Governor => {
                let limiter = load.governor();
                timed_threads(sw, threads, calls, &limiter, |l| l.check().is_ok())
            }
            Subject::Keyed => {
                let limiter = tollgate::keyed::KeyedLimiter::<u64>::new(load.tollgate_quota())
                    .with_max_keys(1 << 20);
                // One reading for every key: none is full again at it, so no sweep removes one
                // (accept-heavy buckets are full again 1 ns after a check; see `groups/keyed.rs`).
                let at = tollgate::Clock::now(&tollgate::MonotonicClock::new());
                for key in 0..KEYS {
                    assert!(limiter.check_key_at(&key, at).is_ok());
                }
                let timed = timed_threads(sw, threads, calls, &limiter, |l| {
                    l.check_key(&next_key()).is_ok()
                });
                assert_eq!(limiter.len() as u64, KEYS, "every key stayed known");
                assert_eq!(limiter.evictions(), 0, "no key was evicted");
                timed
            }
            Subject::GovernorKeyed => {
                let limiter = governor::RateLimiter::keyed(load.governor_quota());
                for key in 0..KEYS {
                    assert!(limiter.check_key(&key).is_ok());
                }
                timed_threads(sw, threads, calls, &limiter, |l| {
                    l.check_key(&next_key()).is_ok()
                })
            }
        };
        load.verify(self.name(), admitted, calls * threads as u64);
        (histogram, on_cpu)
    }
}

/// The next key of this thread's pseudo-random walk over `0..KEYS` (xorshift64, seeded per
/// thread): consecutive calls land on unrelated slots, as in the `keyed_*` groups.
fn next_key() -> u64 {
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new({
            use std::hash::BuildHasher;
            std::collections::hash_map::RandomState::new().hash_one(thread::current().id()) | 1
        });
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        x % KEYS
    })
}

/// A histogram of tick counts from 1 to 2^40 (minutes of TSC ticks), 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 1 << 40, 3).expect("valid histogram bounds")
}

/// Nanoseconds the calling thread has spent on a CPU: the first field of Linux's
/// `/proc/thread-self/schedstat`; `None` where there is no such file.
fn on_cpu_nanos() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

/// `threads` threads, released together, each warming up and then timing `calls` calls of `check`
/// on `limiter`. Returns the merged histogram of the timed calls, the number of them admitted, and
/// the smallest share of its timed span that any thread spent on a CPU.
fn timed_threads<L: Sync>(
    sw: &Stopwatch,
    threads: usize,
    calls: u64,
    limiter: &L,
    check: impl Fn(&L) -> bool + Sync,
) -> (Histogram<u64>, u64, Option<f64>) {
    let barrier = Barrier::new(threads);
    let results: Vec<(Histogram<u64>, u64, Option<f64>)> = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (barrier, check) = (&barrier, &check);
                s.spawn(move || {
                    let mut h = histogram();
                    barrier.wait();
                    for _ in 0..WARM_UP {
                        black_box(check(limiter));
                    }
                    let (cpu_before, wall) = (on_cpu_nanos(), Instant::now());
                    let admitted = timed_calls(sw, calls, limiter, check, &mut h);
                    // The kernel brings a running thread's figure up to date at scheduler ticks
                    // only, so it is off by up to a tick (1-4 ms): no share for shorter spans.
                    let span = wall.elapsed();
                    let on_cpu = on_cpu_nanos()
                        .zip(cpu_before)
                        .filter(|_| span >= MIN_SPAN_FOR_SHARE)
                        .map(|(after, before)| {
                            after.saturating_sub(before) as f64 / span.as_nanos() as f64
                        });
                    (h, admitted, on_cpu)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a bench thread panicked"))
            .collect()
    });
    let mut merged = histogram();
    let mut admitted = 0;
    let mut on_cpu: Option<f64> = None;
    for (h, a, share) in results {
        merged.add(&h).expect("same bounds");
        admitted += a;
        on_cpu = min_share(on_cpu, share);
    }
    (merged, admitted, on_cpu)
}

/// The smaller of two on-CPU shares, either of which may be unknown.
fn min_share(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The timed loop: a stamp, the call, a stamp, then the record (outside the timed span).
#[inline(never)]
fn timed_calls<L>(
    sw: &Stopwatch,
    calls: u64,
    limiter: &L,
    check: &impl Fn(&L) -> bool,
    histogram: &mut Histogram<u64>,
) -> u64 {
    let mut admitted = 0;
    for _ in 0..calls {
        let start = sw.stamp();
        let ok = check(limiter);
        let end = sw.stamp();
        admitted += u64::from(ok);
        histogram.saturating_record(end.saturating_sub(start));
    }
    admitted
}

/// Everything measured for one (subject, thread count) row.
struct Row {
    subject: Subject,
    threads: usize,
    all: Histogram<u64>,
    round_p99: Vec<u64>,
    /// The smallest on-CPU share of any thread in any round.
    on_cpu: Option<f64>,
}

/// The shortest timed span whose on-CPU share is reported: a tick of error is at most a few percent.
const MIN_SPAN_FOR_SHARE: Duration = Duration::from_millis(100);

/// Below this on-CPU share, a thread spent a noticeable part of its timed span waiting for a core.
const ON_CPU_WARNING: f64 = 0.9;

fn main() {
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) or with `--test`, run one
    // short round as a smoke test, as criterion does. Other arguments (criterion filters) are ignored.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = !args.iter().any(|a| a == "--bench") || args.iter().any(|a| a == "--test");
    let (rounds, calls) = if smoke { (1, 10_000) } else { (ROUNDS, CALLS) };

    let sw = Stopwatch {
        clock: quanta::Clock::new(),
    };
    let mut rows: Vec<Row> = THREADS
        .iter()
        .flat_map(|&threads| {
            Subject::ALL.iter().map(move |&subject| Row {
                subject,
                threads,
                all: histogram(),
                round_p99: Vec::new(),
                on_cpu: None,
            })
        })
        .collect();

    for _ in 0..rounds {
        for row in &mut rows {
            let (h, on_cpu) = row.subject.round(&sw, row.threads, calls);
            row.round_p99.push(sw.nanos(h.value_at_quantile(0.99)));
            row.all.add(&h).expect("same bounds");
            row.on_cpu = min_share(row.on_cpu, on_cpu);
        }
    }

    print_table(&sw, &rows, rounds, calls, smoke);
}

fn print_table(sw: &Stopwatch, rows: &[Row], rounds: usize, calls: u64, smoke: bool) {
    let q = |row: &Row, quantile: f64| sw.nanos(row.all.value_at_quantile(quantile));
    if smoke {
        println!("**Smoke test** (one short round): not a measurement.\n");
    }
    println!(
        "Accept-heavy; one key ({} shards, default) or one of 100 000 known keys (keyed rows); \
         {rounds} rounds × {calls} timed calls per thread; \
         nanoseconds per call, timer included (see `timer only`).\n",
        tollgate::sharded::default_shards()
    );
    println!(
        "| limiter | threads | calls | p50 | p90 | p99 | p99.9 | max | p99 per round (min–max) \
         | on-CPU share (worst thread) |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for row in rows {
        let lo = row.round_p99.iter().min().copied().unwrap_or(0);
        let hi = row.round_p99.iter().max().copied().unwrap_or(0);
        let on_cpu = row
            .on_cpu
            .map_or_else(|| "n/a".to_owned(), |s| format!("{:.0} %", s * 100.0));
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {lo}–{hi} | {on_cpu} |",
            row.subject.name(),
            row.threads,
            row.all.len(),
            q(row, 0.5),
            q(row, 0.9),
            q(row, 0.99),
            q(row, 0.999),
            sw.nanos(row.all.max()),
        );
    }

    let starved = rows
        .iter()
        .filter(|r| r.threads == 2)
        .filter_map(|r| r.on_cpu)
        .fold(f64::INFINITY, f64::min);
    if starved < ON_CPU_WARNING {
        println!(
            "\n**In a 2-thread round a thread was on a CPU for only {:.0} % of its timed span: the two \
             threads did not run side by side throughout (another process took a core), so the \
             2-thread rows understate contention. Rerun on a quiet machine.**",
            starved * 100.0
        );
    }
    if smoke {
        return;
    }
    let p99 = |subject: Subject| {
        rows.iter()
            .find(|r| r.subject == subject && r.threads == 2)
            .map(|r| q(r, 0.99) as f64)
    };
    if let (Some(sharded), Some(token), Some(governor), Some(keyed), Some(governor_keyed)) = (
        p99(Subject::Sharded),
        p99(Subject::TokenBucket),
        p99(Subject::Governor),
        p99(Subject::Keyed),
        p99(Subject::GovernorKeyed),
    ) {
        let ratio = sharded / governor;
        let keyed_ratio = keyed / governor_keyed;
        let verdict = |met: bool| if met { "met" } else { "**missed**" };
        println!();
        println!("| target (2 threads) | measured | wanted | |");
        println!("| --- | ---: | ---: | --- |");
        println!(
            "| p99: ShardedBucket ÷ governor | {ratio:.3}× | ≤ 0.5× | {} |",
            verdict(ratio <= 0.5)
        );
        println!(
            "| p99: TokenBucket ÷ governor (for reference) | {:.3}× | | |",
            token / governor
        );
        println!(
            "| p99: KeyedLimiter ÷ governor keyed, 100 000 keys | {keyed_ratio:.3}× | ≤ 0.7× | {} |",
            verdict(keyed_ratio <= 0.7)
        );
    }
}
