//! What every bench group shares: the two loads, the limiters built for them, the `Mutex`
//! baseline, and the timed loops. The criterion groups (`benches/groups/`) and the `latency` bench
//! use it for the same loads. Behind the `bench` feature (it needs governor), which only tollgate's
//! dev-dependency on the kit enables.
//!
//! Every sample builds fresh limiters, so each starts in the same state (full for accept-heavy,
//! drained for reject-heavy), and every timed loop counts its admissions and checks afterwards that
//! the load really was what the bench claims: an accept-heavy run in which a single check was
//! refused, or a reject-heavy run in which one was admitted, panics instead of reporting a number.

use std::num::NonZeroU32;
use std::sync::{Barrier, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};

/// A governor direct limiter on clock `C`, as `RateLimiter::direct_with_clock` builds it.
pub type Governor<C> = governor::RateLimiter<
    NotKeyed,
    InMemoryState,
    C,
    NoOpMiddleware<<C as GovernorClock>::Instant>,
>;

/// The accept-heavy rate: 10^9 per second, one token per nanosecond, the fastest both crates allow.
const ACCEPT_PER_SECOND: u32 = 1_000_000_000;

/// The accept-heavy capacity: governor's largest burst, 2^32 - 1 tokens, a 4.3 s burst window.
///
/// A check costs the bucket 1 ns of refill and takes a thread far longer than 1 ns, so the bucket
/// stays near full at any thread count; even a check that ignored time entirely (the `_at` benches,
/// which hold one reading) could take 2^32 - 1 in a row, more than a sample ever runs.
const ACCEPT_CAPACITY: u32 = u32::MAX;

/// The reject-heavy period: one token an hour, capacity 1, starting (or drained to) empty, so no
/// check in a run of a few minutes is admitted.
const DENY_PERIOD: Duration = Duration::from_secs(3600);

/// Which answer the checks of a bench get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    /// Every check admitted: each one writes the limiter's state.
    Accept,
    /// Every check refused: tollgate and governor only read; the `Mutex` baseline still locks.
    Deny,
}

impl Load {
    /// Both loads, accept-heavy first.
    pub const BOTH: [Load; 2] = [Load::Accept, Load::Deny];

    /// The first word of every key of a floor under this load ([`floor_decide`]): 0 accept-heavy
    /// (any reading admits), `u64::MAX` reject-heavy (past any reading plus the tolerance, so
    /// every check is refused without a write).
    ///
    /// ```
    /// use std::sync::atomic::AtomicU64;
    /// use testkit::bench::{floor_decide, Load, FLOOR_TOLERANCE};
    /// let admits = AtomicU64::new(Load::Accept.floor_word());
    /// let refuses = AtomicU64::new(Load::Deny.floor_word());
    /// assert!(floor_decide(&admits, 5, FLOOR_TOLERANCE));
    /// assert!(!floor_decide(&refuses, 5, FLOOR_TOLERANCE));
    /// ```
    pub fn floor_word(self) -> u64 {
        match self {
            Load::Accept => 0,
            Load::Deny => u64::MAX,
        }
    }

    /// The suffix of the group name: `allow` or `deny`.
    pub fn name(self) -> &'static str {
        match self {
            Load::Accept => "allow",
            Load::Deny => "deny",
        }
    }

    /// Panics unless `admitted` of `checks` is what this load promises.
    pub fn verify(self, bench: &str, admitted: u64, checks: u64) {
        match self {
            Load::Accept => assert_eq!(
                admitted,
                checks,
                "{bench}: accept-heavy, yet {} of {checks} checks were refused",
                checks - admitted
            ),
            Load::Deny => assert_eq!(
                admitted, 0,
                "{bench}: reject-heavy, yet {admitted} of {checks} checks were admitted"
            ),
        }
    }

    /// The tollgate quota of this load.
    pub fn tollgate_quota(self) -> tollgate::Quota {
        let quota = match self {
            Load::Accept => tollgate::Quota::per_second(u64::from(ACCEPT_PER_SECOND))
                .and_then(|q| q.with_capacity(u64::from(ACCEPT_CAPACITY))),
            Load::Deny => {
                tollgate::Quota::per_period(1, DENY_PERIOD).and_then(|q| q.with_initial(0))
            }
        };
        quota.expect("the bench quotas are valid")
    }

    /// The governor quota of this load, with the same rate and capacity as the tollgate one.
    pub fn governor_quota(self) -> governor::Quota {
        match self {
            Load::Accept => governor::Quota::per_second(nonzero(ACCEPT_PER_SECOND))
                .allow_burst(nonzero(ACCEPT_CAPACITY)),
            Load::Deny => governor::Quota::with_period(DENY_PERIOD).expect("a non-zero period"),
        }
    }

    /// The quota of a [`tollgate::ShardedBucket`] under this load.
    ///
    /// Accept-heavy: the tollgate quota itself (each of `S` shards gets `1/S` of the rate and the
    /// capacity, still far more than a thread can take). Reject-heavy: the tollgate quota has one
    /// token, and a quota with fewer tokens than shards uses fewer shards, so that would be a
    /// one-shard limiter; instead `S` tokens per `S` hours (the same rate), capacity `S`, starting
    /// empty, so every one of the `S` shards exists and is empty: one token per `S` hours each.
    fn sharded_quota(self) -> tollgate::Quota {
        match self {
            Load::Accept => self.tollgate_quota(),
            Load::Deny => {
                let shards = tollgate::sharded::default_shards();
                let period = DENY_PERIOD * u32::try_from(shards).expect("at most 256 shards");
                tollgate::Quota::per_period(shards as u64, period)
                    .and_then(|q| q.with_initial(0))
                    .expect("the bench quotas are valid")
            }
        }
    }

    /// A [`tollgate::ShardedBucket`] on the default clock with the default shard count (the
    /// available parallelism rounded up to a power of two), full or empty as this load needs.
    ///
    /// Panics if the quota did not get every one of those shards.
    pub fn sharded(self) -> tollgate::ShardedBucket {
        let limiter = tollgate::ShardedBucket::new(self.sharded_quota());
        assert_eq!(
            limiter.shards(),
            tollgate::sharded::default_shards(),
            "the bench quota splits over every default shard"
        );
        limiter
    }

    /// A tollgate bucket on the default clock, full or empty as this load needs.
    pub fn tollgate(self) -> tollgate::TokenBucket {
        tollgate::TokenBucket::new(self.tollgate_quota())
    }

    /// A tollgate bucket on `clock`, full or empty as this load needs.
    pub fn tollgate_with<C: tollgate::Clock>(self, clock: C) -> tollgate::TokenBucket<C> {
        tollgate::TokenBucket::with_clock(self.tollgate_quota(), clock)
    }

    /// A governor limiter on its default clock, full or drained as this load needs.
    pub fn governor(self) -> governor::DefaultDirectRateLimiter {
        self.governor_with(governor::clock::DefaultClock::default())
    }

    /// A governor limiter on `clock`, full or drained as this load needs.
    pub fn governor_with<C: GovernorClock>(self, clock: C) -> Governor<C> {
        let limiter = governor::RateLimiter::direct_with_clock(self.governor_quota(), clock);
        if self == Load::Deny {
            // governor starts full; its one token goes now.
            assert!(
                limiter.check().is_ok(),
                "a fresh governor limiter admits once"
            );
            assert!(
                limiter.check().is_err(),
                "a drained governor limiter refuses"
            );
        }
        limiter
    }

    /// The `Mutex` baseline, full or empty as this load needs.
    pub fn mutex(self) -> MutexBucket {
        match self {
            Load::Accept => MutexBucket::new(
                f64::from(ACCEPT_PER_SECOND),
                f64::from(ACCEPT_CAPACITY),
                f64::from(ACCEPT_CAPACITY),
            ),
            Load::Deny => MutexBucket::new(1.0 / DENY_PERIOD.as_secs_f64(), 1.0, 0.0),
        }
    }
}

fn nonzero(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("the bench quotas are non-zero")
}

/// The baseline: the textbook token bucket behind a `Mutex`, with `f64` tokens refilled lazily from
/// `std::time::Instant`.
///
/// It reads the clock before taking the lock, to keep the critical section short, and so tolerates
/// readings that arrive out of order (they refill nothing). Every check, admitted or refused, takes
/// the lock and writes.
#[derive(Debug)]
pub struct MutexBucket {
    /// Tokens, and the instant they were last brought up to date.
    state: Mutex<(f64, Instant)>,
    per_second: f64,
    capacity: f64,
}

impl MutexBucket {
    fn new(per_second: f64, capacity: f64, initial: f64) -> MutexBucket {
        MutexBucket {
            state: Mutex::new((initial, Instant::now())),
            per_second,
            capacity,
        }
    }

    /// Takes one token if there is one.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (tokens, last) = &mut *state;
        if let Some(elapsed) = now.checked_duration_since(*last) {
            *tokens = (*tokens + elapsed.as_secs_f64() * self.per_second).min(self.capacity);
            *last = now;
        }
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One check of any tollgate limiter, through the crate's public [`tollgate::Limiter`] trait: the
/// check every tollgate row times (statically dispatched, as a caller generic over the trait
/// would be).
#[inline(always)]
pub fn admit<L: tollgate::Limiter>(limiter: &L) -> bool {
    limiter.try_acquire().is_ok()
}

/// One check of any tollgate limiter at a reading the caller holds, through [`tollgate::Limiter`].
#[inline(always)]
pub fn admit_at<L: tollgate::Limiter>(limiter: &L, now: tollgate::Nanos) -> bool {
    limiter.try_acquire_at(now).is_ok()
}

/// Runs `check` `iters` times on this thread; returns the time taken and the number admitted.
#[inline(never)]
pub fn run_single<L>(iters: u64, limiter: &L, check: impl Fn(&L) -> bool) -> (Duration, u64) {
    let start = Instant::now();
    let admitted = checks(iters, limiter, &check);
    (start.elapsed(), admitted)
}

/// [`run_single`], then [`Load::verify`] on its admissions: the sample's time, for a criterion
/// `iter_custom` closure. `bench` names the bench in the message of a load that did not hold.
pub fn timed_single<L>(
    load: Load,
    bench: &str,
    iters: u64,
    limiter: &L,
    check: impl Fn(&L) -> bool,
) -> Duration {
    let (elapsed, admitted) = run_single(iters, limiter, check);
    load.verify(bench, admitted, iters);
    elapsed
}

/// Runs `check` `iters` times on each of `threads` fresh threads, all released together by a
/// barrier; thread `i` checks `limiters[i % limiters.len()]` (pass one limiter for one hot key, one
/// per thread for spread keys). Returns the wall time from the first thread's start to the last
/// one's end, and the number admitted across all threads.
///
/// Thread start-up and join are outside the measured span. With more threads than cores, the span
/// includes the time slices the threads wait for, as a server's would.
pub fn run_threads<L: Sync>(
    threads: usize,
    iters: u64,
    limiters: &[L],
    check: impl Fn(&L) -> bool + Sync,
) -> (Duration, u64) {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant, u64)> = thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let limiter = &limiters[i % limiters.len()];
                let (barrier, check) = (&barrier, &check);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let admitted = checks(iters, limiter, check);
                    (start, Instant::now(), admitted)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a bench thread panicked"))
            .collect()
    });
    let first = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("at least one thread");
    let last = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("at least one thread");
    (last - first, spans.iter().map(|s| s.2).sum())
}

/// The loop every bench times: `iters` checks, counting admissions so that no check can be
/// optimized away and the load can be verified afterwards.
#[inline(always)]
fn checks<L>(iters: u64, limiter: &L, check: &impl Fn(&L) -> bool) -> u64 {
    let mut admitted = 0;
    for _ in 0..iters {
        admitted += u64::from(check(limiter));
    }
    admitted
}

/// Runs `exe` with `args` `runs` times, each a fresh process that prints one number (a memory
/// bench's child: bytes per key), and answers the numbers sorted; `what` names the cell in a
/// failure.
///
/// ```no_run
/// let runs = testkit::bench::child_runs(&std::env::current_exe()?, &["--child", "dashmap"], 3, "dashmap");
/// let median = runs[runs.len() / 2];
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn child_runs(exe: &std::path::Path, args: &[&str], runs: usize, what: &str) -> Vec<f64> {
    let mut out: Vec<f64> = (0..runs)
        .map(|_| {
            let child = std::process::Command::new(exe)
                .args(args)
                .output()
                .expect("the child process runs");
            assert!(
                child.status.success(),
                "{what} failed: {}",
                String::from_utf8_lossy(&child.stderr)
            );
            String::from_utf8_lossy(&child.stdout)
                .trim()
                .parse()
                .expect("the child prints one number")
        })
        .collect();
    out.sort_by(f64::total_cmp);
    out
}

/// This process's resident set, in bytes (`VmRSS` from `/proc/self/status`, reported in kB), or
/// `None` where there is no such file (not Linux): what the memory benches' children measure
/// before and after building their maps.
///
/// ```
/// if let Some(bytes) = testkit::bench::rss_bytes() {
///     assert!(bytes > 0);
/// }
/// ```
pub fn rss_bytes() -> Option<u64> {
    status_kb("VmRSS:").map(|kb| kb * 1024)
}

/// This process's anonymous resident memory, in bytes (`RssAnon` from `/proc/self/status`: the
/// heap and anonymous mappings, without the file-backed pages of the executable and its
/// libraries), or `None` where there is no such line (not Linux, or a kernel before 4.5). What a
/// map holds for its keys is anonymous; a library's code pages, faulted in the first time a
/// function of it runs, are file-backed, shared with every process that maps the library, and do
/// not grow with the keys.
///
/// ```
/// if let Some(bytes) = testkit::bench::anon_bytes() {
///     assert!(bytes > 0);
/// }
/// ```
pub fn anon_bytes() -> Option<u64> {
    status_kb("RssAnon:").map(|kb| kb * 1024)
}

/// A `/proc/self/status` field given in kB.
fn status_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// [`anon_bytes`] where it must exist (a memory bench's child, after its parent checked).
///
/// ```no_run
/// let before = testkit::bench::anon();
/// let keys: Vec<u64> = (0..1_000_000).collect();
/// let per_key = (testkit::bench::anon() - before) as f64 / keys.len() as f64;
/// println!("{per_key:.1} bytes per key");
/// ```
pub fn anon() -> i64 {
    anon_bytes().expect("RssAnon in /proc/self/status") as i64
}

/// [`rss_bytes`] where it must exist (a memory bench's child, after its parent checked).
///
/// ```no_run
/// let before = testkit::bench::rss();
/// let keys: Vec<u64> = (0..1_000_000).collect();
/// let per_key = (testkit::bench::rss() - before) as f64 / keys.len() as f64;
/// println!("{per_key:.1} bytes per key");
/// ```
pub fn rss() -> i64 {
    rss_bytes().expect("VmRSS in /proc/self/status") as i64
}

/// How far ahead of the reading a floor's arrival time may run and still be admitted
/// ([`floor_decide`]): 2^32 ns (4.3 s), so at one admission per nanosecond of arrival time an
/// accept-heavy key is never refused during a run.
///
/// ```
/// assert_eq!(testkit::bench::FLOOR_TOLERANCE, 1 << 32);
/// ```
pub const FLOOR_TOLERANCE: u64 = 1 << 32;

/// The keyed benches' floor decision on one arrival-time word: admits at reading `now` (moving the
/// word on by 1 ns, with one compare-and-swap on the key's own word) while the word is within
/// `tolerance` of `now`, and refuses (writing nothing) once it is past.
///
/// ```
/// use std::sync::atomic::AtomicU64;
/// let word = AtomicU64::new(0);
/// assert!(testkit::bench::floor_decide(&word, 5, testkit::bench::FLOOR_TOLERANCE));
/// assert!(!testkit::bench::floor_decide(&AtomicU64::new(u64::MAX), 5, 1 << 32));
/// ```
#[inline]
pub fn floor_decide(word: &std::sync::atomic::AtomicU64, now: u64, tolerance: u64) -> bool {
    use std::sync::atomic::Ordering;
    // Relaxed: the word publishes nothing but itself.
    let mut tat = word.load(Ordering::Relaxed);
    loop {
        if tat > now.saturating_add(tolerance) {
            return false;
        }
        // Relaxed on both sides, for the same reason.
        match word.compare_exchange_weak(
            tat,
            tat.max(now) + 1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return true,
            Err(actual) => tat = actual,
        }
    }
}

/// Where criterion writes its estimates, found as criterion finds it: `$CRITERION_HOME`,
/// `$CARGO_TARGET_DIR/criterion`, else the `criterion` folder of the target directory the running
/// bench binary was built in (`<target>/release/deps/<bench>-<hash>`). For the benches that print
/// their own tables from this run's `estimates.json` files.
pub fn criterion_home() -> Option<std::path::PathBuf> {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return Some(home.into());
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return Some(std::path::PathBuf::from(target).join("criterion"));
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.join("criterion"))
}
