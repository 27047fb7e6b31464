//! The keyed limiter's epoch reclamation when `membarrier(2)` is blocked by a seccomp filter (see
//! the module docs of `src/epoch.rs`): removed keys must still be freed once no lookup can
//! hold them, a limit must still be exact, and what the reclaimer does must match what the filter
//! lets it do.
//!
//! - **`zero_before_start`**: a filter installed before the process makes any keyed lookup
//!   answers every `membarrier(2)` with 0 without running it (`SECCOMP_RET_ERRNO` with errno 0).
//!   `MEMBARRIER_CMD_QUERY` then answers an empty set, so the process must not use membarrier
//!   (had it trusted the 0 of a registration, its "barriers" would order nothing): lookups fence
//!   instead, and the reclaimer never calls membarrier. Shown by stacking a second filter that
//!   answers EPERM and churning again: `barrier_failures()` stays 0, where a process that had
//!   registered would count every reclamation as a failure.
//! - **`eperm_after_start`**: one keyed lookup first (the process queries, registers and uses
//!   membarrier), then a filter answering EPERM. Every reclamation's membarrier now fails: each
//!   failure is counted (`barrier_failures() > 0`), and on x86 the page-protection flush stands
//!   in, so removed keys are still freed. If this kernel does not offer the private expedited
//!   command at all, the process never used membarrier, and the count must stay 0 instead (the
//!   child says so in its output).
//!
//! In both, keys churn through a limiter of 64 places at one request per hour, with a second
//! thread looking keys up throughout, then with a thread parked inside a lookup (which must keep
//! what is removed after it parked, at most about `2 × max_keys` of it); once no reader is left,
//! `unreclaimed()` must be back to 0 and every key object dropped. Every key is checked twice at
//! the same reading: the first is admitted, the second refused.
//!
//! **Why a process per case.** A seccomp filter cannot be removed, and the membarrier decision is
//! made once per process, at its first keyed lookup: a case run in the test harness's process
//! would filter the other tests and inherit their decision. So each case re-runs this test
//! binary (`current_exe()`) with only the hidden test [`seccomp_child_case`] selected and
//! `TOLLGATE_SECCOMP_CASE` naming the case; without that variable, that test does nothing. The
//! parent asserts that the child succeeded and printed the case's closing marker, so a child that
//! ran nothing cannot pass. A filter installed with `prctl` applies to the installing thread and
//! the threads it creates afterwards: every thread of a case that touches a limiter after the
//! filter is one of those.

#![cfg(all(target_os = "linux", target_arch = "x86_64", not(tollgate_loom)))]

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use testkit::child::Child;
use tollgate::keyed::{barrier_failures, KeyedError, KeyedLimiter, TokenBucketKeys};
use tollgate::{Clock, ManualClock, Quota};

/// The variable that makes [`seccomp_child_case`] run a case (its value names the case).
const CASE_VAR: &str = "TOLLGATE_SECCOMP_CASE";
/// The hidden test a child process runs.
const CHILD_TEST: &str = "seccomp_child_case";
/// The first word of the line a child prints when its case has passed.
const MARKER: &str = "tollgate-seccomp-case-passed";
/// How long a child may run before it is killed (it takes well under a second in release).
const CHILD_TIMEOUT: Duration = Duration::from_secs(300);

// ---------------------------------------------------------------------------------------------
// The parent: one test per case, each running the case in a child process.

/// A filter installed before the first keyed lookup answers membarrier's query with 0: lookups
/// fence, the reclaimer never calls membarrier, and removed keys are freed.
#[test]
fn membarrier_answered_0_from_the_start_means_fences_and_memory_is_freed() {
    run_case("zero_before_start");
}

/// A filter installed after the process registered for membarrier makes it fail with EPERM:
/// each failure is counted, and removed keys are freed all the same (the x86 fallback).
#[test]
fn membarrier_refused_after_start_is_counted_and_memory_is_still_freed() {
    run_case("eperm_after_start");
}

/// Runs `case` in a child process and checks that it passed.
fn run_case(case: &str) {
    let done = Child::start(CHILD_TEST, &[(CASE_VAR, case)]).finish(CHILD_TIMEOUT);
    done.assert_passed(&format!("case {case}"), &format!("{MARKER} {case}"));
    for line in done.stdout.lines().filter(|l| l.starts_with('[')) {
        println!("{line}");
    }
    println!("[{case}] child ran for {:.2?}", done.elapsed);
}

// ---------------------------------------------------------------------------------------------
// The child: the cases themselves.

/// Runs the case named by `TOLLGATE_SECCOMP_CASE`, in a process of its own (see the module docs);
/// without the variable (an ordinary test run), does nothing.
#[test]
fn seccomp_child_case() {
    let Ok(case) = std::env::var(CASE_VAR) else {
        return;
    };
    match case.as_str() {
        "zero_before_start" => zero_before_start(),
        "eperm_after_start" => eperm_after_start(),
        other => panic!("{CASE_VAR}={other}: no such case"),
    }
    println!("{MARKER} {case}");
}

fn zero_before_start() {
    let case = "zero_before_start";
    println!(
        "[{case}] membarrier QUERY before any filter: {}",
        describe(&query())
    );
    // Before any keyed lookup: the process decides at its first one.
    install_membarrier_filter(0);
    assert_eq!(
        query().expect("the filter answers membarrier with 0"),
        0,
        "the filter should answer membarrier's query with an empty set"
    );
    let first = exercise(case);
    assert_eq!(
        barrier_failures(),
        0,
        "membarrier answered 0 to everything: the process must not have used it"
    );
    // Proof that the process fences rather than trusting membarrier's 0: with a second filter
    // answering EPERM (the newer of two filters that both answer an errno decides it), a process
    // that had registered would count a failure at every reclamation.
    install_membarrier_filter(libc::EPERM);
    let refused = query().expect_err("the stacked filter answers membarrier with EPERM");
    assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "{refused}");
    let second = exercise(case);
    assert_eq!(
        barrier_failures(),
        0,
        "the reclaimer called membarrier: the process had registered for it although its query \
         answered an empty set"
    );
    println!(
        "[{case}] fence mode: barrier_failures() stayed 0 with membarrier answering 0, then EPERM"
    );
    println!("[{case}] with membarrier answering 0: {first}");
    println!("[{case}] with membarrier answering EPERM: {second}");
}

fn eperm_after_start() {
    let case = "eperm_after_start";
    // Asked before the first keyed lookup and before any filter: what the process will find.
    let offered = query();
    let both = (1 << 3) | (1 << 4); // PRIVATE_EXPEDITED | REGISTER_PRIVATE_EXPEDITED
    let uses_membarrier = matches!(offered, Ok(set) if set > 0 && set & both == both);
    println!(
        "[{case}] membarrier QUERY before any filter: {}",
        describe(&offered)
    );
    // The first keyed lookup: the process queries membarrier and registers for it.
    let first: KeyedLimiter<u64, TokenBucketKeys, ManualClock> =
        KeyedLimiter::with_clock(Quota::per_hour(1).unwrap(), ManualClock::new());
    assert!(first.check_key(&1).is_ok());
    assert!(first.check_key(&1).is_err());
    assert_eq!(barrier_failures(), 0, "membarrier failed before any filter");
    install_membarrier_filter(libc::EPERM);
    let refused = query().expect_err("the filter answers membarrier with EPERM");
    assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "{refused}");
    let stats = exercise(case);
    let failures = barrier_failures();
    if uses_membarrier {
        assert!(
            failures > 0,
            "the kernel offers membarrier's private expedited command, so the process registered \
             for it at its first lookup; the filter then refused every barrier, yet no failure \
             was counted (did registration fail, leaving the process in fence mode?)"
        );
        assert!(
            stats.final_failures > 0,
            "the last reclamation (no reader left) counted no failed membarrier, though the \
             filter refuses every one"
        );
        println!(
            "[{case}] {failures} failed membarriers counted; removed keys freed through the \
             page-protection fallback"
        );
    } else {
        assert_eq!(
            failures, 0,
            "this kernel does not offer membarrier's private expedited command, so the process \
             never used it and has no failure to count"
        );
        println!(
            "[{case}] this kernel does not offer membarrier's private expedited command \
             (query: {}): the process fences and never calls membarrier, so barrier_failures() \
             stays 0 (checked instead of > 0)",
            describe(&offered)
        );
    }
    println!("[{case}] {stats}");
}

// ---------------------------------------------------------------------------------------------
// The filter.

/// Installs a seccomp filter on the calling thread (and the threads it creates from now on) that
/// answers `membarrier(2)` with `errno` (0: a return value of 0) without running it, and allows
/// every other call. Panics if it cannot.
fn install_membarrier_filter(errno: i32) {
    /// `BPF_LD | BPF_W | BPF_ABS`: loads the 32-bit word at offset `k` of `seccomp_data`.
    const LOAD_WORD: u16 = 0x20;
    /// `BPF_JMP | BPF_JEQ | BPF_K`: jumps `jt` ahead if the accumulator is `k`, else `jf` ahead.
    const JUMP_IF_EQUAL: u16 = 0x15;
    /// `BPF_RET | BPF_K`: answers `k`.
    const RETURN: u16 = 0x06;
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

    let errno = u32::try_from(errno)
        .ok()
        .filter(|&e| e <= 0xffff)
        .expect("an errno in SECCOMP_RET_DATA");
    let offset = |at: usize| u32::try_from(at).expect("an offset in seccomp_data");
    let arch = offset(std::mem::offset_of!(libc::seccomp_data, arch));
    let nr = offset(std::mem::offset_of!(libc::seccomp_data, nr));
    assert_eq!((nr, arch), (0, 4), "seccomp_data's layout");
    let membarrier = u32::try_from(libc::SYS_membarrier).expect("membarrier's number");
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let mut program = [
        op(LOAD_WORD, 0, 0, arch),
        // Another architecture's calls (none here) are allowed: skip to the last instruction.
        op(JUMP_IF_EQUAL, 0, 3, AUDIT_ARCH_X86_64),
        op(LOAD_WORD, 0, 0, nr),
        op(JUMP_IF_EQUAL, 0, 1, membarrier),
        op(RETURN, 0, 0, SECCOMP_RET_ERRNO | errno),
        op(RETURN, 0, 0, SECCOMP_RET_ALLOW),
    ];
    let fprog = libc::sock_fprog {
        len: u16::try_from(program.len()).expect("a short program"),
        filter: program.as_mut_ptr(),
    };
    let zero: libc::c_ulong = 0;
    // SAFETY: PR_SET_NO_NEW_PRIVS takes integer arguments only and touches no memory of ours.
    let set = unsafe {
        libc::prctl(
            libc::PR_SET_NO_NEW_PRIVS,
            1 as libc::c_ulong,
            zero,
            zero,
            zero,
        )
    };
    assert_eq!(
        set,
        0,
        "prctl(PR_SET_NO_NEW_PRIVS): {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `fprog` points to `program`, both alive for the call; the kernel copies the program.
    let set = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::c_ulong::from(libc::SECCOMP_MODE_FILTER),
            &fprog as *const libc::sock_fprog,
        )
    };
    assert_eq!(
        set,
        0,
        "prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER): {}",
        std::io::Error::last_os_error()
    );
}

/// `membarrier(MEMBARRIER_CMD_QUERY, 0, 0)`: the commands offered, or the error.
fn query() -> std::io::Result<i64> {
    let (query, flags, cpu): (libc::c_long, libc::c_long, libc::c_long) = (0, 0, 0);
    // SAFETY: membarrier's query reads and writes no memory of ours.
    let answer = unsafe { libc::syscall(libc::SYS_membarrier, query, flags, cpu) };
    if answer < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(answer)
    }
}

fn describe(query: &std::io::Result<i64>) -> String {
    match query {
        Ok(set) => format!("{set:#x}"),
        Err(e) => format!("error ({e})"),
    }
}

// ---------------------------------------------------------------------------------------------
// The workload.

/// Live key objects of one limiter.
type Live = Arc<AtomicIsize>;

type Limiter = KeyedLimiter<Key, TokenBucketKeys, ManualClock>;

/// The limiter's bound on keys (and so on removed keys waiting for a parked reader).
const MAX_KEYS: usize = 64;
/// Keys churned through per phase.
const CHURN: u64 = 40 * MAX_KEYS as u64;
const HOUR: Duration = Duration::from_secs(3600);

/// Where a lookup parks: inside a key comparison, for the first comparison after it is armed.
struct Gate {
    armed: AtomicBool,
    entered: Barrier,
    release: Barrier,
}

/// A key that counts its live copies; a probe with a gate parks its thread in `Eq`.
struct Key {
    id: u64,
    live: Live,
    gate: Option<Arc<Gate>>,
}

impl Key {
    fn new(id: u64, live: &Live) -> Key {
        live.fetch_add(1, Ordering::Relaxed);
        Key {
            id,
            live: Arc::clone(live),
            gate: None,
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Clone for Key {
    /// A copy without the gate: the map's copy of a key never parks anyone.
    fn clone(&self) -> Key {
        Key::new(self.id, &self.live)
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        if let Some(gate) = self.gate.as_ref().or(other.gate.as_ref()) {
            if gate.armed.swap(false, Ordering::Relaxed) {
                gate.entered.wait();
                gate.release.wait();
            }
        }
        self.id == other.id
    }
}

impl Eq for Key {}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.id.hash(h);
    }
}

/// Sets a flag when dropped, however the scope it guards ends.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Releases a parked reader when dropped, however the scope it guards ends.
struct ReleaseOnDrop<'a>(&'a Barrier);

impl Drop for ReleaseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.wait();
    }
}

/// What one churn saw.
#[derive(Default)]
struct Churn {
    admitted: u64,
    /// New keys refused for want of room.
    refused: u64,
    /// The most removed keys waiting to be freed at once.
    most_unreclaimed: usize,
}

/// What [`exercise`] saw.
struct Stats {
    with_reader: Churn,
    reads: u64,
    parked: Churn,
    held_back: usize,
    /// `barrier_failures()` counted by the last reclamation (no reader left).
    final_failures: u64,
    elapsed: Duration,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "with a reader: {} keys admitted, {} refused, at most {} unreclaimed, {} reads; \
             with a parked reader: {} admitted, {} refused, {} removed keys held back; \
             last reclamation counted {} failed membarriers; {:.2?}",
            self.with_reader.admitted,
            self.with_reader.refused,
            self.with_reader.most_unreclaimed,
            self.reads,
            self.parked.admitted,
            self.parked.refused,
            self.held_back,
            self.final_failures,
            self.elapsed,
        )
    }
}

/// `CHURN` new keys, one an hour: each is checked twice at the same reading (admitted, then
/// refused: one per hour, bursts of 1) unless it finds no room. Every key is forgettable an hour
/// later, and the automatic sweeps (every 64 new keys, at this bound) remove them. `publish` is
/// told each key checked.
fn churn(
    limiter: &Limiter,
    clock: &ManualClock,
    live: &Live,
    first_id: u64,
    mut publish: impl FnMut(u64),
) -> Churn {
    let mut seen = Churn::default();
    for id in first_id..first_id + CHURN {
        let key = Key::new(id, live);
        let now = clock.now();
        match limiter.check_key_at(&key, now) {
            Ok(_) => {
                seen.admitted += 1;
                match limiter.check_key_at(&key, now) {
                    Err(KeyedError::Denied(_)) => {}
                    other => panic!(
                        "key {id}: a second request at the same reading got {other:?}; the quota \
                         is 1 per hour with bursts of 1"
                    ),
                }
            }
            Err(KeyedError::TooManyKeys(_)) => seen.refused += 1,
            Err(other) => panic!("key {id}: {other:?}"),
        }
        drop(key);
        publish(id);
        let unreclaimed = limiter.unreclaimed();
        seen.most_unreclaimed = seen.most_unreclaimed.max(unreclaimed);
        assert!(limiter.len() <= MAX_KEYS, "{} keys held", limiter.len());
        assert!(
            unreclaimed <= 2 * MAX_KEYS,
            "{unreclaimed} removed keys wait to be freed, with a bound of {MAX_KEYS} keys"
        );
        clock.advance(HOUR);
    }
    seen
}

/// With no reader left: forgets every key, and checks that every removed key was freed (the
/// count of unreclaimed entries and the key objects alive both say so). Answers the barrier
/// failures counted meanwhile.
fn settle(limiter: &Limiter, clock: &ManualClock, live: &Live, case: &str, phase: &str) -> u64 {
    let before = barrier_failures();
    clock.advance(HOUR);
    limiter.retain_recent();
    let failures = barrier_failures() - before;
    assert_eq!(
        limiter.len(),
        0,
        "[{case}] {phase}: keys left after forgetting all"
    );
    assert_eq!(
        limiter.unreclaimed(),
        0,
        "[{case}] {phase}: removed keys not freed with no reader left"
    );
    assert_eq!(
        live.load(Ordering::Relaxed),
        0,
        "[{case}] {phase}: key objects alive with no key held"
    );
    failures
}

/// Churns keys through a new limiter with a reader looking keys up throughout, then with a reader
/// parked inside a lookup, checking after each that, once no reader is left, everything removed is
/// freed.
fn exercise(case: &str) -> Stats {
    let started = Instant::now();
    let live = Live::default();
    let clock = ManualClock::new();
    let limiter: Limiter = KeyedLimiter::with_clock(Quota::per_hour(1).unwrap(), clock.clone())
        .with_max_keys(MAX_KEYS);

    // A reader that looks up the newest keys (and so holds entries about to be removed) for as
    // long as the churn runs. It only reads: it takes no token a check expects. The churn waits
    // for it to have read again every 64 keys, so the two overlap throughout, however the
    // threads are scheduled.
    let latest = AtomicU64::new(0);
    let reads = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let with_reader = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            while !stop.load(Ordering::Acquire) {
                let newest = latest.load(Ordering::Relaxed);
                for id in newest.saturating_sub(3)..=newest {
                    let probe = Key::new(id, &live);
                    let _ = limiter.peek_key_n(&probe, 1);
                    assert!(limiter.remaining_key(&probe) <= 1, "more than a burst of 1");
                    reads.fetch_add(2, Ordering::Relaxed);
                }
            }
        });
        let seen = {
            let _stop = SetOnDrop(&stop);
            let mut last = 0;
            churn(&limiter, &clock, &live, 0, |id| {
                latest.store(id, Ordering::Relaxed);
                if id % 64 == 0 {
                    while reads.load(Ordering::Relaxed) == last && !reader.is_finished() {
                        std::thread::yield_now();
                    }
                    last = reads.load(Ordering::Relaxed);
                }
            })
        };
        reader.join().expect("the reader");
        seen
    });
    let reads = reads.into_inner();
    settle(
        &limiter,
        &clock,
        &live,
        case,
        "after the churn with a reader",
    );

    // A reader parked inside a lookup: what is removed after it parked is kept (at most about
    // 2 × MAX_KEYS of it; new keys are refused meanwhile), and freed once it leaves.
    let gate = Arc::new(Gate {
        armed: AtomicBool::new(true),
        entered: Barrier::new(2),
        release: Barrier::new(2),
    });
    let parked_id = CHURN;
    let held = Key::new(parked_id, &live);
    assert!(limiter.check_key(&held).is_ok());
    let (parked, held_back, admitted) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut probe = Key::new(parked_id, &live);
            probe.gate = Some(Arc::clone(&gate));
            limiter.peek_key_n(&probe, 1).is_ok()
        });
        gate.entered.wait();
        // The reader is inside its lookup, released when this guard drops (also on a panic, so
        // that a failure fails rather than hangs).
        let release = ReleaseOnDrop(&gate.release);
        let seen = churn(&limiter, &clock, &live, parked_id + 1, |_| {});
        let held_back = limiter.unreclaimed();
        drop(release);
        (seen, held_back, reader.join().expect("the parked reader"))
    });
    // Its reading was taken before it parked, just after its key used its token.
    assert!(
        !admitted,
        "[{case}] the parked lookup was admitted at its old reading"
    );
    assert!(
        (MAX_KEYS..=2 * MAX_KEYS).contains(&held_back),
        "[{case}] {held_back} removed keys held back by the parked reader (expected from \
         {MAX_KEYS} to {})",
        2 * MAX_KEYS
    );
    assert!(
        parked.refused > 0,
        "[{case}] new keys were never refused while the parked reader held removed keys"
    );
    drop(held);
    let final_failures = settle(
        &limiter,
        &clock,
        &live,
        case,
        "after the parked reader left",
    );
    drop(limiter);
    assert_eq!(live.load(Ordering::Relaxed), 0);
    Stats {
        with_reader,
        reads,
        parked,
        held_back,
        final_failures,
        elapsed: started.elapsed(),
    }
}
