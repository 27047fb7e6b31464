//! What the keyed limiter's memory does when keys are removed, counted in live key objects (never
//! wall time): a removed key's own heap is freed when it is removed (when no lookup is running);
//! a thread parked inside a lookup holds at most `max_keys` removed keys, and new keys get the
//! overflow policy meanwhile, rather than memory growing without bound; and in the child of a
//! `fork`, the parent's other threads (which the child does not have) hold nothing.

// The crate's own table only: under `--cfg tollgate_loom` the store is loom's stand-in map.
#![cfg(not(tollgate_loom))]

use std::cell::Cell;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use tollgate::keyed::{KeyedError, KeyedLimiter};
use tollgate::{ManualClock, Quota};

/// Live key objects, per test (each test has its own counter).
type Live = Arc<AtomicIsize>;

thread_local! {
    /// Set on the thread that is to park inside a lookup.
    static PARK_HERE: Cell<bool> = const { Cell::new(false) };
}

/// A key that owns heap bytes, counts its live copies, and can park its thread inside `Eq`.
struct Counted {
    name: String,
    live: Live,
    /// Where a comparison made by a thread with `PARK_HERE` set waits (entered, then released).
    park: Option<Arc<(Barrier, Barrier)>>,
}

impl Counted {
    fn new(name: String, live: &Live) -> Counted {
        live.fetch_add(1, Ordering::Relaxed);
        Counted {
            name,
            live: live.clone(),
            park: None,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Clone for Counted {
    fn clone(&self) -> Counted {
        let mut key = Counted::new(self.name.clone(), &self.live);
        key.park = self.park.clone();
        key
    }
}

impl PartialEq for Counted {
    fn eq(&self, other: &Counted) -> bool {
        if PARK_HERE.with(|p| p.replace(false)) {
            if let Some(park) = self.park.as_ref().or(other.park.as_ref()) {
                park.0.wait();
                park.1.wait();
            }
        }
        self.name == other.name
    }
}

impl Eq for Counted {}

impl Hash for Counted {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.name.hash(h)
    }
}

fn second() -> Duration {
    Duration::from_secs(1)
}

/// The bound on keys in the churn tests.
const MAX_KEYS: usize = 512;

/// `n` new keys, each used once, the clock moving on a second every 16 keys: at most 32 keys are
/// active at once, and sweeps (every 256 new keys) keep the map under 300 keys, so without a
/// parked reader no key is ever refused for want of room. Answers the refusals and the most key
/// objects alive at once.
fn churn(
    limiter: &KeyedLimiter<Counted, tollgate::keyed::TokenBucketKeys, ManualClock>,
    clock: &ManualClock,
    live: &Live,
    label: &str,
    n: usize,
) -> (usize, isize) {
    let (mut refused, mut most) = (0, 0);
    for k in 0..n {
        let key = Counted::new(format!("{label}-{k}"), live);
        match limiter.check_key(&key) {
            Ok(_) => {}
            Err(KeyedError::TooManyKeys(_)) => refused += 1,
            Err(other) => panic!("{other:?}"),
        }
        drop(key);
        if k % 16 == 15 {
            clock.advance(second());
        }
        most = most.max(live.load(Ordering::Relaxed));
    }
    (refused, most)
}

/// A place to park a thread inside a lookup (entered, then released), and a key of `limiter`'s
/// (used once, so held) whose comparisons park a thread that has `PARK_HERE` set.
fn parking_key(
    limiter: &KeyedLimiter<Counted, tollgate::keyed::TokenBucketKeys, ManualClock>,
    live: &Live,
) -> (Arc<(Barrier, Barrier)>, Counted) {
    let park = Arc::new((Barrier::new(2), Barrier::new(2)));
    let mut key = Counted::new("parked".to_string(), live);
    key.park = Some(park.clone());
    assert!(limiter.check_key(&key).is_ok());
    (park, key)
}

/// (e) With no lookup running, every removed key is freed by the eviction that removes it: the
/// live key objects are exactly the keys held, after each round of churn.
#[test]
fn a_removed_key_is_freed_when_it_is_removed() {
    let live = Live::default();
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<Counted, _, _> =
        KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), clock.clone()).with_max_keys(1_000);
    for round in 0..50 {
        for k in 0..400 {
            let key = Counted::new(format!("client-{round}-{k}"), &live);
            assert!(limiter.check_key(&key).is_ok());
        }
        clock.advance(second());
        limiter.retain_recent();
        assert_eq!(limiter.len(), 0);
        assert_eq!(limiter.unreclaimed(), 0);
        assert_eq!(live.load(Ordering::Relaxed), 0, "round {round}");
    }
    // Automatic sweeps (every max(256, len / 2) new keys) free what they remove too: the live
    // objects never exceed the keys held.
    for k in 0..20_000 {
        let key = Counted::new(format!("spray-{k}"), &live);
        let _ = limiter.check_key(&key);
        drop(key);
        if k % 100 == 0 {
            clock.advance(second());
        }
        let objects = live.load(Ordering::Relaxed);
        assert!(
            objects as usize <= limiter.len(),
            "{objects} key objects alive with {} keys held",
            limiter.len()
        );
    }
    drop(limiter);
    assert_eq!(live.load(Ordering::Relaxed), 0);
}

/// (d) A thread parked inside a lookup (in a key's `Eq`) while the limiter churns through keys:
/// the removed keys it may still read are kept, but at most `max_keys` of them; past that, new keys
/// get the overflow policy (here: refused) instead of memory growing. Once the reader leaves,
/// everything removed is freed and new keys are admitted again.
#[test]
fn a_parked_reader_holds_at_most_max_keys_removed_keys() {
    let live = Live::default();
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<Counted, _, _> =
        KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), clock.clone())
            .with_max_keys(MAX_KEYS);
    let (park, parked_key) = parking_key(&limiter, &live);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            PARK_HERE.with(|p| p.set(true));
            limiter.peek_key_n(&parked_key, 1).is_ok()
        });
        park.0.wait();
        // The reader is inside the lookup. Churn: new keys, evicted a second later.
        let (refused, most) = churn(&limiter, &clock, &live, "churn", 20 * MAX_KEYS);
        let held_back = limiter.unreclaimed();
        // Released before asserting, so that a failure fails rather than hangs.
        park.1.wait();
        // Its reading was taken before it parked, when the key had just used its token.
        assert!(!reader.join().unwrap());
        assert!(held_back <= 2 * MAX_KEYS, "{held_back} removed keys held");
        // Live objects: the keys held (at most MAX_KEYS), the removed ones kept for the
        // reader (under 2 * MAX_KEYS: up to MAX_KEYS are removed by the sweep that reaches the
        // bound), and the parked key.
        assert!(
            most as usize <= 3 * MAX_KEYS + 1,
            "{most} key objects alive at once"
        );
        assert!(
            refused > 0,
            "new keys were never refused while the reader held memory"
        );
    });
    // The reader has left: the next sweep frees everything removed, and new keys get room.
    clock.advance(second());
    limiter.retain_recent();
    assert_eq!(limiter.unreclaimed(), 0);
    let key = Counted::new("after".to_string(), &live);
    assert!(limiter.check_key(&key).is_ok());
    drop(key);
    drop(parked_key);
    drop(limiter);
    assert_eq!(live.load(Ordering::Relaxed), 0);
}

/// (e) Quota changes while a reader is parked: a change keeps one copy of the map (the tables it
/// replaced) until the reader leaves, counted as removed keys are, so a second change meanwhile
/// is refused with `KeyedChangeError::ParkedReader` and changes nothing; once the reader has left,
/// the copy is freed and changes go through again. Checks meanwhile decide as usual, and the
/// parked reader itself answers on the state it found.
#[test]
fn a_parked_reader_holds_one_copy_of_the_map_across_quota_changes() {
    let live = Live::default();
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<Counted, _, _> =
        KeyedLimiter::with_clock(Quota::per_second(10).unwrap(), clock.clone());
    let (park, parked_key) = parking_key(&limiter, &live);
    let others: Vec<Counted> = (0..100)
        .map(|k| Counted::new(format!("other-{k}"), &live))
        .collect();
    for key in &others {
        assert!(limiter.check_key(key).is_ok());
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            PARK_HERE.with(|p| p.set(true));
            let _ = limiter.peek_key_n(&parked_key, 1);
        });
        park.0.wait();
        let first = limiter.set_quota(Quota::per_second(5).unwrap());
        let held = limiter.unreclaimed();
        let second = limiter.set_quota(Quota::per_second(3).unwrap());
        let quota = limiter.quota();
        let remaining = limiter.remaining_key(&others[0]);
        // Released before asserting, so that a failure fails rather than hangs.
        park.1.wait();
        assert_eq!(first, Ok(()));
        assert_eq!(held, 101, "the first change's copy of the 101 keys");
        assert_eq!(
            second,
            Err(tollgate::keyed::KeyedChangeError::ParkedReader { held: 101 })
        );
        assert_eq!(quota, Quota::per_second(5).unwrap());
        assert_eq!(remaining, 5);
    });
    assert!(limiter.set_quota(Quota::per_second(3).unwrap()).is_ok());
    assert_eq!(limiter.unreclaimed(), 0);
    assert_eq!(limiter.remaining_key(&others[0]), 3);
    drop(others);
    drop(parked_key);
    // Every copy of every key is freed: the map's, and the replaced tables'.
    assert_eq!(live.load(Ordering::Relaxed), limiter.len() as isize);
    drop(limiter);
    assert_eq!(live.load(Ordering::Relaxed), 0);
}

/// (d) One limiter's parked reader holds none of another limiter's memory.
#[test]
fn a_reader_parked_in_one_limiter_holds_nothing_of_another() {
    let live = Live::default();
    let clock = ManualClock::new();
    let quota = Quota::per_second(1).unwrap();
    let parked: KeyedLimiter<Counted, _, _> = KeyedLimiter::with_clock(quota, clock.clone());
    let churned: KeyedLimiter<Counted, _, _> =
        KeyedLimiter::with_clock(quota, clock.clone()).with_max_keys(MAX_KEYS);
    let (park, parked_key) = parking_key(&parked, &live);
    std::thread::scope(|s| {
        s.spawn(|| {
            PARK_HERE.with(|p| p.set(true));
            let _ = parked.peek_key_n(&parked_key, 1);
        });
        park.0.wait();
        let (refused, _) = churn(&churned, &clock, &live, "churn", 20 * MAX_KEYS);
        let held_back = churned.unreclaimed();
        // Released before asserting, so that a failure fails rather than hangs.
        park.1.wait();
        assert_eq!((refused, held_back), (0, 0));
    });
}

/// (f) `fork` while another thread is parked inside a lookup: in the child (which has only the
/// forking thread), that thread's reader slot is dead, so the child's churn frees what it removes.
#[cfg(target_os = "linux")]
#[test]
fn a_fork_child_ignores_the_parents_other_readers() {
    let live = Live::default();
    let clock = ManualClock::new();
    let limiter: KeyedLimiter<Counted, _, _> =
        KeyedLimiter::with_clock(Quota::per_second(1).unwrap(), clock.clone())
            .with_max_keys(MAX_KEYS);
    let (park, parked_key) = parking_key(&limiter, &live);
    let forked_ok = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            PARK_HERE.with(|p| p.set(true));
            let _ = limiter.peek_key_n(&parked_key, 1);
        });
        park.0.wait();
        // SAFETY: the child only runs the limiter (whose locks no other thread holds: the parked
        // reader holds none) and allocates (glibc's malloc is fork-safe), then `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let (refused, _) = churn(&limiter, &clock, &live, "child", 20 * MAX_KEYS);
            let mut ok = refused == 0;
            clock.advance(second());
            limiter.retain_recent();
            ok &= limiter.unreclaimed() == 0;
            // SAFETY: ends the child without running the parent's atexit handlers or the test
            // harness's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for our own child.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        park.1.wait();
        assert_eq!(waited, pid);
        forked_ok.store(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            Ordering::Relaxed,
        );
    });
    assert!(
        forked_ok.load(Ordering::Relaxed),
        "the child was refused keys, or kept removed ones"
    );
}
