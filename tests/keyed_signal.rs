//! A real signal handler making lookups on a keyed limiter, interrupting threads that are in the
//! middle of their own lookups on it while its tables and entries are retired and freed.
//!
//! What the crate promises (`keyed` module docs, "Threads, signals and `fork`";
//! `src/epoch.rs`, "Nesting, signals and thread exit"): a lookup made from a signal handler
//! that interrupted another lookup on the same thread is protected by the interrupted one (the
//! thread's epoch slot is non-zero, so the handler's pin neither enters nor leaves). Such a
//! lookup is async-signal-safe only as far as those docs say: once the thread has its thread
//! index and the limiter's block of reader slots for it exists (both made by the thread's first
//! lookup on that limiter, which may allocate), and only on the read-only paths, for a key held
//! or not; the paths that take a lock (creating a key) are not. So each thread here makes one
//! lookup before its timer is armed, and the handler makes only the lookups [`on_signal`] lists.
//!
//! The run: one limiter with `max_keys = 32` (at least eight shards, so a few keys each), reached
//! by the handler through a process-wide pointer. Two threads (the test's own and a second one)
//! each arm a timer of their own that sends SIGPROF to that thread every 50 µs, and for 2 s churn
//! the limiter: a new key each round (inserts, a full map, refusals, automatic sweeps that evict),
//! admissions, peeks and `contains_key` on a rotating set of hot keys (present while hot, evicted
//! after), and `shrink_to_fit` and `retain_recent`, which rebuild the shards' tables. An insert
//! that finds its shard's table out of free slots rebuilds it too, so tables and entries are
//! retired and freed all the time, by both threads, while the other is reading them and while a
//! handler reads them on top of an interrupted lookup.
//!
//! What is asserted here: the handler ran many times on each thread, often while that thread was
//! inside a lookup of a present key, and found keys both present and absent; the key bound held
//! throughout; and once both threads are done, evicting every key leaves none held and none
//! unreclaimed. **The real assertion is AddressSanitizer's**: `bash scripts/test.sh asan` runs
//! this file instrumented, and an interrupted lookup left unprotected by the handler's (the old
//! bug: `pin()` entered before it raised a depth counter, so a handler landing between the two
//! left the slot cleared under the interrupted lookup) goes on reading a table or an entry the
//! other thread has meanwhile freed, which ASan reports as a heap-use-after-free. The ordinary run
//! checks only that nothing crashed and the assertions above.
//!
//! The check is statistical. With the nested pin made to clear the slot when it drops (the same
//! hole as the old bug's, open for the rest of each nested handler rather than for an instant),
//! ASan reported a use-after-free (a table freed by the other thread, read by the interrupted
//! lookup) in about two 2-second runs out of three on 2 loaded cores; without that change, none
//! in any run.
//!
//! Why per-thread POSIX timers and not `setitimer`: `ITIMER_REAL`'s SIGALRM is sent to the
//! process, and Linux delivers it to the thread-group leader whenever that thread can take it:
//! here libtest's main thread, idle while the test runs (measured: 4 of 39 771 signals in 2 s
//! reached the working thread). `ITIMER_PROF` and `ITIMER_VIRTUAL` (CPU-time timers) expire only
//! on scheduler ticks, whatever the interval asked for (250 a second per CPU on a `CONFIG_HZ=250`
//! kernel: 499 signals in 2 s at a 50 µs interval). A `CLOCK_MONOTONIC` timer made with
//! `SIGEV_THREAD_ID` signals the one thread it names, on a high-resolution timer.

// Linux only (the timers name a thread, `SIGEV_THREAD_ID`), and the crate's own table only (under
// `--cfg tollgate_loom` the store is loom's stand-in map).
#![cfg(all(target_os = "linux", not(tollgate_loom)))]

use std::sync::atomic::{compiler_fence, AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use tollgate::keyed::{KeyedLimiter, TokenBucketKeys};
use tollgate::{Clock, ManualClock, Nanos, Quota};

type Limiter = KeyedLimiter<u64, TokenBucketKeys, ManualClock>;

/// Small, so that churn keeps the map full, sweeping and evicting.
const MAX_KEYS: usize = 32;
/// The signal: one neither libtest nor std uses.
const SIGNAL: libc::c_int = libc::SIGPROF;
/// Each thread's timer period.
const INTERVAL: Duration = Duration::from_micros(50);
/// How long the test's thread churns (wall time: the same in release and under ASan, and so is
/// the number of signals a thread can get, about `RUN_FOR / INTERVAL` = 40 000).
const RUN_FOR: Duration = Duration::from_secs(2);
/// The fewest signals each thread's handler must have run for, and the fewest that must have
/// landed inside a lookup of a present key: 1/40 of the 40 000 the timer sends a thread in
/// `RUN_FOR`, and 1/100 of it. Measured on 2 cores shared with other work, in release and under
/// ASan (the test prints its figures with `-- --nocapture`): 12 000 to 38 000 handled per thread,
/// 8 000 to 27 000 of them inside such a lookup. Room for a more loaded machine, where the
/// expirations of a thread that is not running merge into one signal (a timer's signal is queued
/// once).
const MIN_HANDLED: u64 = 1_000;
const MIN_INSIDE: u64 = 400;
/// How far the test's thread moves the clock per round, and the quota's interval: a key used once
/// is full again (fresh, evictable) a round later.
const STEP: Duration = Duration::from_micros(10);
/// Hot keys at a time, and rounds of the test's thread between rotations of the hot set.
const HOT_KEYS: u64 = 6;
const HOT_ROUNDS: u64 = 2_048;
/// Where each thread's new keys start (below: the hot keys), and a key never inserted.
const NEW_KEYS: [u64; 2] = [1 << 40, 1 << 50];
const NEVER: u64 = u64::MAX;

/// The limiter the handler reads: set before the handler is installed, taken back (and dropped)
/// only after both timers are deleted and the default action is restored, so a handler never
/// runs once it is taken back.
static LIMITER: AtomicPtr<Limiter> = AtomicPtr::new(std::ptr::null_mut());
/// The reading the handler's lookups use: the latest the test's thread moved the clock to (the
/// handler reads no clock of its own).
static NOW: AtomicU64 = AtomicU64::new(0);
/// The first hot key now.
static HOT: AtomicU64 = AtomicU64::new(0);

/// What the handler knows of a thread: index 0 is the test's thread, 1 the second one.
struct Role {
    /// The thread's id (`gettid`) while its timer may signal it (after its first lookup); 0
    /// otherwise.
    tid: AtomicI32,
    /// Set while the thread is inside a lookup of a hot key (for the statistics only: the flag
    /// covers the calls, a little more than their pins).
    in_lookup: AtomicBool,
    /// The newest key the thread created (or tried to).
    newest: AtomicU64,
    /// Signals handled on this thread.
    handled: AtomicU64,
    /// Of those, how many landed while it was inside a lookup of a hot key.
    inside: AtomicU64,
}

impl Role {
    const fn new() -> Role {
        Role {
            tid: AtomicI32::new(0),
            in_lookup: AtomicBool::new(false),
            newest: AtomicU64::new(NEVER),
            handled: AtomicU64::new(0),
            inside: AtomicU64::new(0),
        }
    }

    /// Runs `f` with `in_lookup` set. The compiler fences keep the flag's stores on their side of
    /// the lookup as a handler on this same thread sees them (a statistic, but an honest one).
    fn looking<R>(&self, f: impl FnOnce() -> R) -> R {
        self.in_lookup.store(true, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        let r = f();
        compiler_fence(Ordering::SeqCst);
        self.in_lookup.store(false, Ordering::Relaxed);
        r
    }
}

static ROLES: [Role; 2] = [Role::new(), Role::new()];
/// Signals that reached a thread with no role (none should: each timer names its thread).
static STRAY: AtomicU64 = AtomicU64::new(0);
/// Keys the handler found held, and found absent.
static FOUND: AtomicU64 = AtomicU64::new(0);
static MISSING: AtomicU64 = AtomicU64::new(0);

/// The signal handler. Everything it calls is async-signal-safe:
///
/// - `gettid` (a system call that cannot fail and leaves `errno` alone), relaxed atomic loads and
///   `fetch_add`s, and a load of [`LIMITER`];
/// - three lookups per key, all read-only, each of which runs `Table::with_read` and arithmetic:
///   `contains_key`, `remaining_key_at` and `peek_key_n_at` with a reading passed in (no clock
///   read). `with_read` hashes the key (ahash, on the stack), pins the table's epoch (a load of
///   the thread's index from a thread-local without a destructor, a load of its block of slots,
///   a `OnceLock` read saying whether the process uses `membarrier`, and then either a nested
///   pin, which writes nothing, or one store to the thread's own slot and one when leaving),
///   loads the shard's table and probes it. It takes the shard lock only when the thread has no
///   index, allocates only when the thread's block of slots is missing, and may wait only while
///   the `OnceLock` is being set: all settled by the thread's first lookup, before its timer was
///   armed.
///   For a key not held, `remaining_key_at` and `peek_key_n_at` answer from atomics (the floor,
///   the count of keys and of unreclaimed ones) and the quota's arithmetic; a key is cloned only
///   to pick a tier, and this limiter has none. The error values are `Copy`, none allocates.
///   None of them creates a key, so no lock is taken and nothing is inserted or freed.
///
/// It never panics (which would abort: it is `extern "C"`): no `unwrap`, no indexing that can
/// miss, wrapping arithmetic only.
extern "C" fn on_signal(_signal: libc::c_int) {
    // SAFETY: `gettid` takes no argument and cannot fail.
    let tid = unsafe { libc::gettid() };
    let Some(role) = ROLES.iter().find(|r| r.tid.load(Ordering::Relaxed) == tid) else {
        STRAY.fetch_add(1, Ordering::Relaxed);
        return;
    };
    role.handled.fetch_add(1, Ordering::Relaxed);
    if role.in_lookup.load(Ordering::Relaxed) {
        role.inside.fetch_add(1, Ordering::Relaxed);
    }
    // Acquire: pairs with the Release store that published the limiter.
    let ptr = LIMITER.load(Ordering::Acquire);
    // SAFETY: non-null, it points to the limiter the test boxed before installing this handler
    // and frees only after the handler is uninstalled and both timers deleted (`LIMITER`).
    let Some(limiter) = (unsafe { ptr.as_ref() }) else {
        return;
    };
    let now = Nanos::new(NOW.load(Ordering::Relaxed));
    let hot = HOT.load(Ordering::Relaxed);
    let keys = [
        hot,
        hot.wrapping_add(HOT_KEYS - 1),
        ROLES[0].newest.load(Ordering::Relaxed),
        ROLES[1].newest.load(Ordering::Relaxed),
        NEVER,
    ];
    let (mut found, mut missing) = (0, 0);
    for key in keys {
        if limiter.contains_key(&key) {
            found += 1;
        } else {
            missing += 1;
        }
        std::hint::black_box(limiter.remaining_key_at(&key, now));
        std::hint::black_box(limiter.peek_key_n_at(&key, 1, now).is_ok());
    }
    FOUND.fetch_add(found, Ordering::Relaxed);
    MISSING.fetch_add(missing, Ordering::Relaxed);
}

/// The error of the last failed libc call, for an assertion's message.
fn os_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// The handler, installed for the life of the value; dropping it restores the action that was
/// there before (the default one: the test asserts that it was).
struct Installed {
    old: libc::sigaction,
}

impl Installed {
    fn new() -> Installed {
        // SAFETY: an all-zero `sigaction` is valid (no handler, no flags, an empty mask).
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        // SA_RESTART: a system call the churn makes (a futex wait on a shard lock, membarrier,
        // mprotect) is restarted rather than failing with EINTR. Not SA_NODEFER: the signal is
        // blocked while its handler runs, so the handler never interrupts itself.
        action.sa_flags = libc::SA_RESTART;
        // SAFETY: as above, zeroed, filled in below.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `sa_mask` is a valid `sigset_t` we own.
        assert_eq!(unsafe { libc::sigemptyset(&mut action.sa_mask) }, 0);
        // SAFETY: both pointers are to valid `sigaction`s; the handler is an `extern "C" fn`
        // taking the signal number, as `sa_sigaction` without `SA_SIGINFO` expects.
        let done = unsafe { libc::sigaction(SIGNAL, &action, &mut old) };
        assert_eq!(done, 0, "sigaction: {}", os_error());
        let installed = Installed { old };
        assert_eq!(
            installed.old.sa_sigaction,
            libc::SIG_DFL,
            "SIGPROF already has a handler in this process"
        );
        installed
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        // SAFETY: restores the action saved in `new`.
        let done = unsafe { libc::sigaction(SIGNAL, &self.old, std::ptr::null_mut()) };
        assert_eq!(done, 0, "sigaction: {}", os_error());
    }
}

/// A timer that sends [`SIGNAL`] to the thread that made it every [`INTERVAL`], until dropped
/// (by the same thread: the timer id is a raw pointer, so the value is not `Send`).
struct Timer(libc::timer_t);

impl Timer {
    fn arm() -> Timer {
        // SAFETY: an all-zero `sigevent` is valid; the fields that matter are set below.
        let mut event: libc::sigevent = unsafe { std::mem::zeroed() };
        event.sigev_notify = libc::SIGEV_THREAD_ID;
        event.sigev_signo = SIGNAL;
        // SAFETY: `gettid` takes no argument and cannot fail.
        event.sigev_notify_thread_id = unsafe { libc::gettid() };
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid pointers to a `sigevent` naming this thread and to the id to fill in.
        let made = unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut id) };
        assert_eq!(made, 0, "timer_create: {}", os_error());
        let timer = Timer(id);
        let period = libc::timespec {
            tv_sec: 0,
            tv_nsec: INTERVAL.as_nanos() as libc::c_long,
        };
        let spec = libc::itimerspec {
            it_interval: period,
            it_value: period,
        };
        // SAFETY: `id` is the timer just made; `spec` is valid; no old value is asked for.
        let set = unsafe { libc::timer_settime(timer.0, 0, &spec, std::ptr::null_mut()) };
        assert_eq!(set, 0, "timer_settime: {}", os_error());
        timer
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // Deleting stops the timer for good (the kernel cancels it and waits for a running
        // expiry); a signal it sent before is delivered as this call returns, to this thread,
        // while the handler is still installed.
        // SAFETY: the timer this value made, deleted once.
        let deleted = unsafe { libc::timer_delete(self.0) };
        assert_eq!(deleted, 0, "timer_delete: {}", os_error());
    }
}

/// Makes the calling thread's first lookup on `limiter` (which takes its thread index and makes
/// the limiter's block of slots for it, and may allocate: not from a handler), then lets the
/// handler act on it and arms its timer. The role is given up when the returned guard drops,
/// after the timer is deleted.
fn enlist(role: &'static Role, limiter: &Limiter) -> Enlisted {
    assert!(!limiter.contains_key(&NEVER));
    // SAFETY: `gettid` takes no argument and cannot fail.
    role.tid.store(unsafe { libc::gettid() }, Ordering::Relaxed);
    Enlisted {
        timer: Some(Timer::arm()),
        role,
    }
}

struct Enlisted {
    timer: Option<Timer>,
    role: &'static Role,
}

impl Drop for Enlisted {
    fn drop(&mut self) {
        drop(self.timer.take());
        self.role.tid.store(0, Ordering::Relaxed);
    }
}

/// Sets the flag when dropped: the second thread stops even if the test's thread panics (the
/// scope would otherwise wait for it forever).
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What a churning thread did.
#[derive(Debug, Default)]
struct Churned {
    rounds: u64,
    admitted: u64,
    refused: u64,
    most_keys: usize,
}

/// One round of churn on `limiter` at `now` by the thread of `role`: a new key, then lookups of
/// the hot keys (admissions, which write the key's state, `contains_key` and peeks).
fn churn_round(
    role: &Role,
    limiter: &Limiter,
    fresh: u64,
    hot: u64,
    now: Nanos,
    out: &mut Churned,
) {
    role.newest.store(fresh, Ordering::Relaxed);
    match limiter.check_key_at(&fresh, now) {
        Ok(_) => out.admitted += 1,
        Err(_) => out.refused += 1,
    }
    for key in hot..hot + HOT_KEYS {
        role.looking(|| {
            let _ = std::hint::black_box(limiter.check_key_at(&key, now));
            std::hint::black_box(limiter.contains_key(&key));
            let _ = std::hint::black_box(limiter.peek_key_n_at(&key, 2, now));
        });
    }
    out.most_keys = out.most_keys.max(limiter.len());
    out.rounds += 1;
}

#[test]
fn lookups_from_a_signal_handler_that_interrupted_lookups_stay_protected() {
    let clock = ManualClock::starting_at(Nanos::new(1_000_000_000));
    // One token per STEP, bursts of 2: a key the test's thread does not touch for a round or two
    // is full again, and the next sweep evicts it.
    let quota = Quota::per_period(1, STEP)
        .and_then(|q| q.with_capacity(2))
        .unwrap();
    let limiter: Box<Limiter> =
        Box::new(KeyedLimiter::with_clock(quota, clock.clone()).with_max_keys(MAX_KEYS));
    NOW.store(clock.now().as_u64(), Ordering::Relaxed);
    // Release: the handler's Acquire load sees the limiter built.
    LIMITER.store(Box::into_raw(limiter), Ordering::Release);
    // SAFETY: just stored, freed only at the end of this test (below), after the handler is gone.
    let limiter: &Limiter = unsafe { &*LIMITER.load(Ordering::Relaxed) };
    let installed = Installed::new();

    let stop = AtomicBool::new(false);
    let (main, second, elapsed) = thread::scope(|s| {
        let stopping = StopOnDrop(&stop);
        let me = enlist(&ROLES[0], limiter);
        let second = s.spawn(|| {
            let role = &ROLES[1];
            let enlisted = enlist(role, limiter);
            let mut out = Churned::default();
            let mut fresh = NEW_KEYS[1];
            while !stop.load(Ordering::Relaxed) {
                let now = limiter.clock().now();
                churn_round(
                    role,
                    limiter,
                    fresh,
                    HOT.load(Ordering::Relaxed),
                    now,
                    &mut out,
                );
                fresh += 1;
                if out.rounds % 64 == 0 {
                    limiter.shrink_to_fit();
                }
                if out.rounds % 128 == 96 {
                    limiter.retain_recent();
                }
            }
            drop(enlisted);
            out
        });

        let role = &ROLES[0];
        let mut out = Churned::default();
        let mut fresh = NEW_KEYS[0];
        let start = Instant::now();
        while start.elapsed() < RUN_FOR {
            clock.advance(STEP);
            let now = clock.now();
            NOW.store(now.as_u64(), Ordering::Relaxed);
            let hot = out.rounds / HOT_ROUNDS * 1_000;
            HOT.store(hot, Ordering::Relaxed);
            churn_round(role, limiter, fresh, hot, now, &mut out);
            fresh += 1;
            if out.rounds % 256 == 0 {
                limiter.shrink_to_fit();
            }
            if out.rounds % 1_024 == 512 {
                limiter.retain_recent();
            }
        }
        let elapsed = start.elapsed();
        drop(stopping);
        drop(me);
        (out, second.join().unwrap(), elapsed)
    });
    // Both timers are deleted: the default action again, then the limiter back.
    drop(installed);
    let taken = LIMITER.swap(std::ptr::null_mut(), Ordering::Relaxed);
    // SAFETY: made by `Box::into_raw` above; no thread and no handler can reach it any more.
    let limiter = unsafe { Box::from_raw(taken) };

    let handled = ROLES.each_ref().map(|r| r.handled.load(Ordering::Relaxed));
    let inside = ROLES.each_ref().map(|r| r.inside.load(Ordering::Relaxed));
    let (found, missing) = (
        FOUND.load(Ordering::Relaxed),
        MISSING.load(Ordering::Relaxed),
    );
    println!(
        "in {elapsed:?}: test's thread {main:?}, second thread {second:?}; \
         signals handled {handled:?}, of which inside a hot lookup {inside:?}, stray {}; \
         handler found {found} keys held and {missing} absent; \
         evictions {}, overflowed {}, unreclaimed after the run {}",
        STRAY.load(Ordering::Relaxed),
        limiter.evictions(),
        limiter.overflowed(),
        limiter.unreclaimed(),
    );

    for (thread, (&handled, &inside)) in handled.iter().zip(&inside).enumerate() {
        assert!(
            handled >= MIN_HANDLED,
            "thread {thread}: the handler ran {handled} times"
        );
        assert!(
            inside >= MIN_INSIDE,
            "thread {thread}: {inside} signals landed inside a lookup"
        );
    }
    assert_eq!(
        STRAY.load(Ordering::Relaxed),
        0,
        "a signal reached another thread"
    );
    assert!(found > 0 && missing > 0, "found {found}, missing {missing}");
    // The churn did churn: keys were evicted, and new keys met a full map.
    assert!(limiter.evictions() > 0 && limiter.overflowed() > 0);
    assert!(main.most_keys <= MAX_KEYS && second.most_keys <= MAX_KEYS);
    assert!(limiter.len() <= MAX_KEYS);

    // No lookup is running now: once every bucket is full again, evicting removes every key and
    // frees every entry and table retired, at once.
    clock.advance(Duration::from_secs(1));
    limiter.retain_recent();
    limiter.shrink_to_fit();
    assert_eq!(limiter.len(), 0);
    assert_eq!(limiter.unreclaimed(), 0);
    // Dropped here: the rest (the tables, the slot blocks) is freed, which LeakSanitizer checks
    // at exit under ASan.
    drop(limiter);
}
