//! The keyed limiter's table (`tollgate::keyed::table`) against a `HashMap`, with keys whose
//! `Hash`, `Eq`, `Clone` or `Drop` panic on chosen calls. Arbitrary sequences of inserts,
//! replacements, admissions (adding one to a key's word), peeks, evictions (marking gone and
//! removing every key whose word is a value, freeing what is retired at once or leaving it to
//! later writes), replacements of gone states, rebuilds of every shard and shrinks, on up to 256
//! keys in 1 to 4 shards, so that tables grow, fill with removed entries, are rebuilt and shrink.
//! Single-threaded: the threaded and loom tests check the races; this checks that no sequence of
//! steps, and no panic from a key, loses, resurrects, duplicates, leaks or double-drops a key.
//!
//! # Keys that panic
//!
//! Every key ([`Key`]) is a value `k` (what `Hash` and `Eq` see; it also borrows as `u64`, so the
//! checks look keys up without running any key code) and a serial number unique to the instance.
//! A clone is a new instance: the same `k`, a new serial. A shared [`Control`] keeps a record of
//! every instance (its `k`, whether it is alive), logs every `Hash`, `Eq`, `Clone` and `Drop` call
//! of the operation under way (with the serials involved), makes the chosen ones panic (with an
//! [`Injected`] payload), and fails at once on a second drop of an instance. An operation may arm
//! [`Faults`]: its `n`th `Hash` call panics; its `n`th `Eq` call; its `n`th `Clone` call (before
//! making the clone); its `n`th key drop, or every drop of a key whose `k % 64` is in a mask. A
//! `Drop` never panics while the thread is already unwinding (that would abort the process, in
//! any program). Each operation runs inside `catch_unwind`.
//!
//! The model follows every instance: for each key it holds the instance the table holds and its
//! word; the *removed* instances (entries evicted or replaced, retired and not yet freed, which
//! the table counts as unreclaimed), and the *old copies* (the live entries of a replaced table,
//! retired and not yet freed), each in the order they were retired, one group per operation.
//!
//! # What the model expects
//!
//! From `src/keyed/table.rs` ("Layout", "What user code runs where"). A *rebuild* of a shard
//! (a write's growth or clearing, `Rebuild`, `Shrink`) clones each live key of the shard, hashes
//! the clone, and places it in a new table; when it finishes, the clones are the instances the
//! table holds, and the instances it held are old copies, dropped when the replaced table is
//! freed. Which writes rebuild, and which keys share a shard, depends on the shards' slot counts
//! and on the hasher's random seed: the model does not predict it, it reads it off the log (a
//! write rebuilt if it cloned), and checks that what it read is consistent.
//!
//! - A write (`Insert`, `Put`, `ReplaceGone`) hashes its own key once, first, before any lock.
//!   Then, if it rebuilds, it clones and hashes each live key of the shard, each clone hashed
//!   right after it is made, each key the table holds cloned at most once; then its probe runs
//!   `Eq`, always as `held == own key`, with `held` an instance the table holds (after the
//!   rebuild: a clone); no user code runs after the probe but drops. An `Eq` panic on the first
//!   comparison is certain whenever the key is held (its probe compares at least once).
//! - A panic in the write's own `Hash`: nothing happened, nothing is freed; the op's key is
//!   dropped while unwinding, and nothing else.
//! - A panic in a rebuild's `Clone` or `Hash`: nothing changed (the table holds the same
//!   instances, nothing is freed); every clone the operation made and the op's own key are
//!   dropped, and nothing else (a panic in those drops is swallowed: the `Clone` or `Hash` panic
//!   is the one passed on).
//! - A rebuild that finished stays done whatever comes after it: after an `Eq` panic the clones
//!   are held and the old copies wait (nothing is freed; only the op's key is dropped, while
//!   unwinding).
//! - Otherwise the write happens, then freeing, then the drop of the op's key if it was not
//!   inserted. A write that retired something (a `Put` of a held key, whose replaced instance is
//!   removed; or a rebuild, whose old copies are retired) frees everything retired, its own
//!   retirements included (no reader is pinned); any other write frees all of it or none of it
//!   (the reclaimer looks every 8 to 4 096 writes). Freeing drops the removed instances first,
//!   then the old copies, each group in the order it was retired (any order within one), then
//!   the op's key; each drop runs even if one before it panicked, and the first panic is passed
//!   on. A write whose freeing or own drop panicked has done its work all the same.
//! - A lookup (`Bump`, `Read`) hashes the probe once and compares (`held == probe`) in the
//!   probe, and does nothing else: no clone, no drop. Single-threaded it never meets a sealed
//!   state, so a held key always answers its word.
//! - A sweep (`Forget` and `Evict`: the table's `retain`, as the keyed limiter evicts) marks and
//!   removes every key whose word is the value, in every shard, and runs no key code at all: it
//!   answers the count, and the instances it removed are counted as unreclaimed. `Forget` then
//!   frees at once (`reclaim_now`, as the limiter does after a sweep): everything retired.
//! - `Rebuild` (every shard) and `Shrink` (the shards larger than they need or holding removed
//!   slots) rebuild shard by shard, cloning and hashing each live key, and run no `Eq`. `Rebuild`
//!   clones every key the table holds exactly once. A panic in `Clone` or `Hash` stops it at that
//!   shard: its clones (the last ones made) are dropped, the shards rebuilt before it keep their
//!   clones, and their old copies wait, with everything else retired, for a later freeing;
//!   nothing else is dropped. Without such a panic everything retired is freed at the end, as
//!   by a write.
//! - No `Drop` runs while a shard lock is held (a key's `Drop` "may call anything", including
//!   the same limiter). A drop made while unwinding (the only drops that can run inside the
//!   table's own code, before it catches the panic) is probed: another thread takes every shard
//!   lock (`FuzzTable::len`) and must get them within [`PROBE_WAIT`]. Set
//!   `TABLE_OPS_NO_LOCK_PROBE` in the environment to skip the probe.
//! - Dropping the table drops every instance left exactly once: the removed ones, then the old
//!   copies, then the held ones; and passes the first panic on.
//!
//! The caught payload is always the first injected panic of the operation, and an operation answers
//! normally exactly when no injected panic fired. (A later panic of the same operation is not
//! passed on: another drop's, the rest of the drops running after the first; or a drop's while a
//! failed rebuild cleans up, after the `Clone` or `Hash` panic that is passed on. The operation
//! panics all the same.) After every operation, panicking or not: the table's length is the
//! model's; every key the model holds reads the model's word (so, with the length, the table holds
//! exactly the model's keys); the table counts exactly the model's removed instances as
//! unreclaimed; the live instances are exactly the ones the model holds, has removed or keeps as
//! old copies (every other one dropped, once), so at least one per key held; and when nothing is
//! waiting to be freed, nothing is left retired (no pin or lock outlived an unwinding). At the end,
//! if the input says so, a reclaim with no faults armed drops every removed instance and old copy,
//! leaving exactly one live instance per key held; then dropping the table drops every instance
//! left.
//!
//! # Catching panics under libFuzzer
//!
//! `cargo fuzz` builds with `panic=unwind` (it passes no `-Cpanic`, and this crate's profiles
//! set none), so `catch_unwind` works; but `libfuzzer-sys` installs a panic hook at start-up that
//! prints the panic and aborts, before any unwinding, so that every panic is a crash. The first
//! run here wraps that hook ([`install_hook`]): a panic whose payload is an [`Injected`] unwinds
//! silently to the operation's `catch_unwind` (or through the table's own catch-and-resume), and
//! every other panic (a failed check, a panic of the table's own) goes to libFuzzer's hook and
//! aborts as before. Injected panics are raised with `std::panic::panic_any`, whose payload the
//! hook can see; `resume_unwind` (how the table passes a panic on) calls no hook.

#![no_main]

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, Once, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use tollgate::keyed::model_table::{FuzzTable, Gone};

/// How long a drop made while unwinding waits for another thread to take every shard lock
/// before it concludes that its own thread holds one.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// The payload of an injected panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injected {
    /// A `Hash` call on the key with this value and serial.
    Hash { k: u64, serial: u64 },
    /// An `Eq` call comparing these values.
    Eq { k: u64, other: u64 },
    /// A `Clone` call on the key with this value and serial (no clone was made).
    Clone { k: u64, serial: u64 },
    /// The drop of the key with this value and serial.
    Drop { k: u64, serial: u64 },
}

/// Which of an operation's calls panic.
#[derive(Debug, Clone, Copy, Default, Arbitrary)]
struct Faults {
    /// The `n`th `Hash` call (from 0) panics: 0 is a keyed operation's own key, the later ones
    /// the clones of a rebuild.
    hash: Option<u8>,
    /// The `n`th `Eq` call (from 0) panics.
    eq: Option<u8>,
    drop: Option<DropFault>,
    /// The `n`th `Clone` call (from 0) panics.
    clone: Option<u8>,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum DropFault {
    /// The `n`th key drop (from 0) panics.
    Nth(u8),
    /// Every drop of a key whose `k % 64` is a bit of the mask panics.
    Keys(u64),
}

impl DropFault {
    /// Whether the `nth` drop of an operation, of a key with value `k`, panics.
    fn fires(fault: Option<DropFault>, nth: u32, k: u64) -> bool {
        match fault {
            None => false,
            Some(DropFault::Nth(n)) => nth == u32::from(n),
            Some(DropFault::Keys(mask)) => mask >> (k % 64) & 1 == 1,
        }
    }
}

/// A call of user code, by instance serials.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Hash(u64),
    /// `held == other`: `held` is `self`.
    Eq {
        held: u64,
        other: u64,
    },
    /// `child` is `None` if the call panicked.
    Clone {
        parent: u64,
        child: Option<u64>,
    },
    /// `unwinding`: made while the thread was unwinding; `locked`: the probe found a shard lock
    /// held by this thread.
    Drop {
        serial: u64,
        unwinding: bool,
        locked: bool,
    },
}

/// What the current operation's keys did.
#[derive(Debug, Default)]
struct Calls {
    hashes: u32,
    eqs: u32,
    clones: u32,
    drops: u32,
    events: Vec<Event>,
    /// Injected panics, in the order they were raised.
    fired: Vec<Injected>,
}

impl Calls {
    /// Checks that no drop ran with a shard lock held.
    fn check_locks(&self, control: &Control, what: &str) {
        for e in &self.events {
            if let Event::Drop {
                serial,
                locked: true,
                ..
            } = e
            {
                let at = control.state().locked_at.take().unwrap_or_default();
                panic!(
                    "{what}: key #{serial} dropped with a shard lock held: {self:?}\n\
                     the drop ran at:\n{at}"
                );
            }
        }
    }
}

/// One key instance.
struct Instance {
    k: u64,
    alive: bool,
}

#[derive(Default)]
struct State {
    faults: Faults,
    calls: Calls,
    /// Every instance, by serial.
    instances: Vec<Instance>,
    /// Instances not yet dropped.
    alive: usize,
    /// Lock probes still running (see [`Control::locked`]).
    probes: Vec<JoinHandle<()>>,
    /// Where the first drop made with a shard lock held ran (its backtrace).
    locked_at: Option<String>,
}

/// Shared by every key of a run.
struct Control {
    state: Mutex<State>,
    /// The table, for the lock probe.
    table: OnceLock<Weak<FuzzTable<Key>>>,
    /// Whether drops made while unwinding probe the shard locks.
    probe: bool,
}

impl Control {
    fn new() -> Control {
        Control {
            state: Mutex::default(),
            table: OnceLock::new(),
            probe: std::env::var_os("TABLE_OPS_NO_LOCK_PROBE").is_none(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic is never raised with the lock held, but recover anyway: the checks read it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new instance of key `k`.
    fn key(self: &Arc<Control>, k: u64) -> Key {
        let mut state = self.state();
        Key {
            k,
            serial: new_instance(&mut state, k),
            control: self.clone(),
        }
    }

    /// Arms `faults` for the next operation, with its call log empty.
    fn arm(&self, faults: Faults) {
        let mut state = self.state();
        state.faults = faults;
        state.calls = Calls::default();
    }

    /// Disarms, answering what the operation's keys did; waits for its lock probes (the
    /// operation has returned, so it holds no lock).
    fn disarm(&self) -> Calls {
        let (calls, probes) = {
            let mut state = self.state();
            state.faults = Faults::default();
            (
                std::mem::take(&mut state.calls),
                std::mem::take(&mut state.probes),
            )
        };
        for probe in probes {
            probe.join().expect("a lock probe panicked");
        }
        calls
    }

    fn alive(&self) -> usize {
        self.state().alive
    }

    fn is_alive(&self, serial: u64) -> bool {
        self.state().instances[serial as usize].alive
    }

    fn k_of(&self, serial: u64) -> u64 {
        self.state().instances[serial as usize].k
    }

    /// Logs a call and answers whether it panics (recording the panic if so).
    fn hash_call(&self, k: u64, serial: u64) -> Option<Injected> {
        let mut state = self.state();
        state.calls.events.push(Event::Hash(serial));
        let nth = state.calls.hashes;
        state.calls.hashes += 1;
        let fire = state.faults.hash.is_some_and(|n| nth == u32::from(n));
        fire.then(|| record(&mut state, Injected::Hash { k, serial }))
    }

    fn eq_call(&self, held: &Key, other: &Key) -> Option<Injected> {
        let mut state = self.state();
        state.calls.events.push(Event::Eq {
            held: held.serial,
            other: other.serial,
        });
        let nth = state.calls.eqs;
        state.calls.eqs += 1;
        let fire = state.faults.eq.is_some_and(|n| nth == u32::from(n));
        let injected = Injected::Eq {
            k: held.k,
            other: other.k,
        };
        fire.then(|| record(&mut state, injected))
    }

    /// A clone of instance `serial` of `k`, or the panic to raise instead.
    fn clone_call(self: &Arc<Control>, k: u64, serial: u64) -> Result<Key, Injected> {
        let mut state = self.state();
        let nth = state.calls.clones;
        state.calls.clones += 1;
        if state.faults.clone.is_some_and(|n| nth == u32::from(n)) {
            state.calls.events.push(Event::Clone {
                parent: serial,
                child: None,
            });
            return Err(record(&mut state, Injected::Clone { k, serial }));
        }
        let child = new_instance(&mut state, k);
        state.calls.events.push(Event::Clone {
            parent: serial,
            child: Some(child),
        });
        Ok(Key {
            k,
            serial: child,
            control: self.clone(),
        })
    }

    fn drop_call(&self, k: u64, serial: u64, unwinding: bool, locked: bool) -> Option<Injected> {
        let mut state = self.state();
        assert!(
            std::mem::replace(&mut state.instances[serial as usize].alive, false),
            "key {k} (#{serial}) dropped twice"
        );
        state.alive -= 1;
        state.calls.events.push(Event::Drop {
            serial,
            unwinding,
            locked,
        });
        let nth = state.calls.drops;
        state.calls.drops += 1;
        let fire = DropFault::fires(state.faults.drop, nth, k) && !unwinding;
        fire.then(|| record(&mut state, Injected::Drop { k, serial }))
    }

    /// Whether this thread holds a shard lock of the table: another thread takes every shard
    /// lock in turn, and this one waits [`PROBE_WAIT`] for it. (A probe still blocked is joined
    /// at [`Control::disarm`], once the operation has released its locks.)
    fn locked(&self) -> bool {
        if !self.probe {
            return false;
        }
        let Some(table) = self.table.get().and_then(Weak::upgrade) else {
            return false;
        };
        let (done, wait) = mpsc::channel();
        let probe = std::thread::spawn(move || {
            table.len();
            let _ = done.send(());
        });
        let locked = wait.recv_timeout(PROBE_WAIT).is_err();
        let mut state = self.state();
        state.probes.push(probe);
        if locked && state.locked_at.is_none() {
            state.locked_at = Some(std::backtrace::Backtrace::force_capture().to_string());
        }
        locked
    }
}

fn new_instance(state: &mut State, k: u64) -> u64 {
    let serial = state.instances.len() as u64;
    state.instances.push(Instance { k, alive: true });
    state.alive += 1;
    serial
}

fn record(state: &mut State, injected: Injected) -> Injected {
    state.calls.fired.push(injected);
    injected
}

/// A key: its value `k`, what `Hash`, `Eq` and `Borrow<u64>` see, and its instance's serial.
struct Key {
    k: u64,
    serial: u64,
    control: Arc<Control>,
}

impl Hash for Key {
    fn hash<H: Hasher>(&self, h: &mut H) {
        if let Some(injected) = self.control.hash_call(self.k, self.serial) {
            panic::panic_any(injected);
        }
        // As `u64` hashes: a key and its borrowed form hash alike.
        self.k.hash(h);
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        if let Some(injected) = self.control.eq_call(self, other) {
            panic::panic_any(injected);
        }
        self.k == other.k
    }
}

impl Eq for Key {}

impl Clone for Key {
    fn clone(&self) -> Key {
        self.control
            .clone_call(self.k, self.serial)
            .unwrap_or_else(|injected| panic::panic_any(injected))
    }
}

impl Borrow<u64> for Key {
    fn borrow(&self) -> &u64 {
        &self.k
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        let unwinding = std::thread::panicking();
        let locked = unwinding && self.control.locked();
        if let Some(injected) = self
            .control
            .drop_call(self.k, self.serial, unwinding, locked)
        {
            panic::panic_any(injected);
        }
    }
}

/// Wraps libFuzzer's aborting panic hook so that injected panics unwind silently; see the module
/// docs.
fn install_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let fuzzer_hook = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Injected>() {
                fuzzer_hook(info);
            }
        }));
    });
}

#[derive(Debug, Clone, Copy, Arbitrary)]
enum Kind {
    /// Insert the key with the word, unless held.
    Insert(u8, u8),
    /// Insert the key with the word, or replace the held entry by the new key and the word.
    Put(u8, u8),
    /// Add one to the key's word (looked up by a key instance).
    Bump(u8),
    /// Read the key's word (looked up by a key instance).
    Read(u8),
    /// Mark gone and remove every key whose word is this value, then free what is retired.
    Forget(u8),
    /// Mark gone and remove every key whose word is this value, leaving them to later writes.
    Evict(u8),
    /// Replace the key's state with a fresh word if it is marked gone.
    ReplaceGone(u8, u8),
    /// Rebuild every shard (the keys cloned into a new table).
    Rebuild,
    /// Shrink every shard to what it holds.
    Shrink,
}

#[derive(Debug, Arbitrary)]
struct Op {
    kind: Kind,
    faults: Option<Faults>,
}

#[derive(Debug)]
struct Input {
    shards: usize,
    ops: Vec<Op>,
    /// Which drops panic when the table is dropped at the end.
    last: Option<DropFault>,
    /// Whether everything retired is freed, with no fault armed, before the table is dropped.
    settle: bool,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Input> {
        Ok(Input {
            shards: u.int_in_range(1..=4)?,
            last: u.arbitrary()?,
            settle: u.arbitrary()?,
            ops: u
                .arbitrary_iter()?
                .take(2_000)
                .collect::<arbitrary::Result<_>>()?,
        })
    }
}

/// What the model holds for a key: the instance the table holds and its word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    serial: u64,
    word: u64,
}

/// The model: the keys held, and the instances retired and not yet freed.
#[derive(Debug, Default)]
struct Model {
    keys: HashMap<u64, Held>,
    /// Removed instances (evicted or replaced), one group per operation, oldest first.
    removed: Vec<Vec<u64>>,
    /// Old copies (the held instances of replaced tables), one group per operation, oldest
    /// first.
    copies: Vec<Vec<u64>>,
}

impl Model {
    /// Whether `serial` is an instance the table holds.
    fn holds(&self, serial: u64, control: &Control) -> bool {
        self.keys
            .get(&control.k_of(serial))
            .is_some_and(|h| h.serial == serial)
    }

    /// A finished rebuild: each clone is held in place of its parent, which is an old copy now.
    fn install(&mut self, clones: &[(u64, u64)], control: &Control, what: &str) {
        let mut parents = Vec::new();
        for &(parent, child) in clones {
            let k = control.k_of(parent);
            let held = self.keys.get_mut(&k);
            assert!(
                held.as_ref().is_some_and(|h| h.serial == parent),
                "{what}: cloned #{parent} of key {k}, which the table does not hold ({held:?})"
            );
            if let Some(held) = held {
                held.serial = child;
            }
            parents.push(parent);
        }
        if !parents.is_empty() {
            self.copies.push(parents);
        }
    }

    fn removed(&mut self, serials: Vec<u64>) {
        if !serials.is_empty() {
            self.removed.push(serials);
        }
    }

    fn pending(&self) -> usize {
        self.removed.iter().chain(&self.copies).map(Vec::len).sum()
    }

    /// Everything retired, in the order freeing drops it (removed, then old copies), then
    /// `last`; forgets it.
    fn take_all(&mut self, last: Vec<u64>) -> Vec<Vec<u64>> {
        let mut groups = std::mem::take(&mut self.removed);
        groups.append(&mut self.copies);
        groups.push(last);
        groups
    }
}

/// An operation's answer.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    Inserted(bool),
    Word(Option<u64>),
    Looked(Option<Result<u64, Gone>>),
    Removed(usize),
    Done,
}

/// The first injected panic of the operation, or its answer; checks that the two agree (an
/// answer exactly when nothing was injected, and the payload caught is the first injected).
fn outcome(result: std::thread::Result<Answer>, calls: &Calls) -> Result<Answer, Injected> {
    match result {
        Ok(answer) => {
            assert_eq!(calls.fired, [], "an injected panic was swallowed");
            Ok(answer)
        }
        Err(payload) => match payload.downcast::<Injected>() {
            Ok(injected) => {
                assert_eq!(calls.fired.first(), Some(&*injected), "not the first panic");
                Err(*injected)
            }
            // Not ours: the hook has aborted already, but never swallow it.
            Err(other) => panic::resume_unwind(other),
        },
    }
}

/// Checks that `dropped` (an operation's drops, in order) are exactly the instances of `groups`,
/// group by group (in any order within a group).
fn check_freed(dropped: &[u64], groups: &[Vec<u64>], what: &str) {
    let mut group_of = HashMap::new();
    for (g, group) in groups.iter().enumerate() {
        for &serial in group {
            assert!(
                group_of.insert(serial, g).is_none(),
                "{what}: #{serial} twice"
            );
        }
    }
    let mut last = 0;
    for &serial in dropped {
        let g = *group_of.get(&serial).unwrap_or_else(|| {
            panic!("{what}: #{serial} dropped, not expected: {dropped:?}, expected {groups:?}")
        });
        assert!(
            g >= last,
            "{what}: out of order: {dropped:?}, expected {groups:?}"
        );
        last = g;
    }
    // Each at most once (the control fails on a second drop), so this is every one.
    assert_eq!(
        dropped.len(),
        group_of.len(),
        "{what}: dropped {dropped:?}, expected {groups:?}"
    );
}

/// A rebuild's log, after a keyed operation's own hash (if any): its clones, each followed at
/// once by the clone's hash; whether the last `Clone` call panicked; then the rest of the
/// events.
fn clones_of(events: &[Event], what: &str) -> (Vec<(u64, u64)>, bool, usize) {
    let mut clones = Vec::new();
    let mut at = 0;
    while let Some(&Event::Clone { parent, child }) = events.get(at) {
        at += 1;
        let Some(child) = child else {
            return (clones, true, at);
        };
        assert_eq!(
            events.get(at),
            Some(&Event::Hash(child)),
            "{what}: a clone is hashed once, as soon as it is made: {events:?}"
        );
        at += 1;
        clones.push((parent, child));
    }
    (clones, false, at)
}

/// The drops of `events[at..]`, which must all be drops: their serials, and whether each was
/// made while unwinding.
fn drops_from(events: &[Event], at: usize, what: &str) -> Vec<(u64, bool)> {
    events[at..]
        .iter()
        .map(|e| match *e {
            Event::Drop {
                serial, unwinding, ..
            } => (serial, unwinding),
            other => panic!("{what}: {other:?} out of place: {events:?}"),
        })
        .collect()
}

/// The serials of `drops`, checking that none was made while unwinding.
fn settled(drops: &[(u64, bool)], what: &str) -> Vec<u64> {
    drops
        .iter()
        .map(|&(serial, unwinding)| {
            assert!(!unwinding, "{what}: #{serial} dropped while unwinding");
            serial
        })
        .collect()
}

fn serials(drops: &[(u64, bool)]) -> HashSet<u64> {
    drops.iter().map(|&(serial, _)| serial).collect()
}

fuzz_target!(|input: Input| {
    install_hook();
    let control = Arc::new(Control::new());
    let table: Arc<FuzzTable<Key>> = Arc::new(FuzzTable::with_shards(input.shards));
    let _ = control.table.set(Arc::downgrade(&table));
    let mut model = Model::default();
    for (i, op) in input.ops.iter().enumerate() {
        let faults = op.faults.unwrap_or_default();
        let what = format!("op {i}: {op:?}");
        let what = what.as_str();
        let calls = match op.kind {
            Kind::Insert(k, v) | Kind::Put(k, v) | Kind::ReplaceGone(k, v) => {
                let (k, v) = (u64::from(k), u64::from(v));
                let key = control.key(k);
                let serial = key.serial;
                let held = model.keys.get(&k).copied();
                control.arm(faults);
                let result = panic::catch_unwind(AssertUnwindSafe(|| match op.kind {
                    Kind::Insert(..) => Answer::Inserted(table.insert(key, v)),
                    Kind::Put(..) => Answer::Word(table.put(key, v)),
                    _ => Answer::Word(table.replace_gone(key, v)),
                }));
                let calls = control.disarm();
                let got = outcome(result, &calls);
                let events = &calls.events;
                // The op's own hash, first; then a rebuild's clones; then the probe's
                // comparisons; then drops only.
                assert_eq!(
                    events.first(),
                    Some(&Event::Hash(serial)),
                    "{what}: its own key hashed first: {events:?}"
                );
                let (clones, clone_failed, mut at) = clones_of(&events[1..], what);
                at += 1;
                let mut compared = Vec::new();
                while let Some(&Event::Eq { held, other }) = events.get(at) {
                    assert_eq!(
                        other, serial,
                        "{what}: compared with its own key: {events:?}"
                    );
                    compared.push(held);
                    at += 1;
                }
                let drops = drops_from(events, at, what);
                match got {
                    Err(Injected::Hash { serial: hashed, .. }) if hashed == serial => {
                        // Nothing held, nothing happened; the key dropped while unwinding.
                        assert_eq!(faults.hash, Some(0), "{what}");
                        assert_eq!(events.len(), 1 + drops.len(), "{what}: {events:?}");
                        assert_eq!(drops, [(serial, true)], "{what}: {events:?}");
                    }
                    Err(Injected::Clone { .. } | Injected::Hash { .. }) => {
                        // A rebuild cut short: nothing changed, every clone made and the key
                        // dropped, nothing freed.
                        assert!(compared.is_empty(), "{what}: compared after: {events:?}");
                        let mut made: HashSet<u64> = clones.iter().map(|&(_, c)| c).collect();
                        made.insert(serial);
                        assert_eq!(serials(&drops), made, "{what}: {events:?}");
                    }
                    _ => {
                        assert!(!clone_failed, "{what}: a clone panicked: {events:?}");
                        model.install(&clones, &control, what);
                        for &h in &compared {
                            assert!(
                                model.holds(h, &control),
                                "{what}: compared with #{h}, not held: {events:?}"
                            );
                        }
                        match got {
                            Err(Injected::Eq { .. }) => {
                                // Nothing changed but the rebuild; the key dropped while
                                // unwinding, nothing freed.
                                assert_eq!(drops, [(serial, true)], "{what}: {events:?}");
                            }
                            Ok(_) | Err(Injected::Drop { .. }) => {
                                if held.is_some() {
                                    assert!(
                                        !compared.is_empty(),
                                        "{what}: the probe of a held key compared"
                                    );
                                }
                                let inserts = match op.kind {
                                    Kind::Insert(..) => held.is_none(),
                                    Kind::Put(..) => true,
                                    // A held state is never gone under the shard lock (eviction
                                    // marks and removes under it, a rebuild seals only the
                                    // replaced table's), so this never replaces.
                                    _ => false,
                                };
                                if let Ok(answer) = &got {
                                    let want = match op.kind {
                                        Kind::Insert(..) => Answer::Inserted(held.is_none()),
                                        _ => Answer::Word(held.map(|h| h.word)),
                                    };
                                    assert_eq!(*answer, want, "{what}");
                                }
                                // Done whether or not a drop after it panicked.
                                let mut retired = !clones.is_empty();
                                if inserts {
                                    let old = model.keys.insert(k, Held { serial, word: v });
                                    if let Some(old) = old {
                                        model.removed(vec![old.serial]);
                                        retired = true;
                                    }
                                }
                                let own = if inserts { vec![] } else { vec![serial] };
                                let dropped = settled(&drops, what);
                                // All retired freed (certainly after retiring), or none.
                                if retired || dropped.len() > own.len() {
                                    check_freed(&dropped, &model.take_all(own), what);
                                } else {
                                    check_freed(&dropped, &[own], what);
                                }
                            }
                            Err(other) => panic!("{what}: {other:?}"),
                        }
                    }
                }
                calls
            }
            Kind::Bump(k) | Kind::Read(k) => {
                let k = u64::from(k);
                let probe = control.key(k);
                let serial = probe.serial;
                let held = model.keys.get(&k).copied();
                control.arm(faults);
                let result = panic::catch_unwind(AssertUnwindSafe(|| {
                    Answer::Looked(match op.kind {
                        Kind::Bump(_) => table.bump(&probe),
                        _ => table.read(&probe),
                    })
                }));
                let calls = control.disarm();
                drop(probe);
                let got = outcome(result, &calls);
                let events = &calls.events;
                assert_eq!(
                    events.first(),
                    Some(&Event::Hash(serial)),
                    "{what}: hashed the key first: {events:?}"
                );
                let mut compared = 0;
                for e in &events[1..] {
                    match *e {
                        Event::Eq { held, other } if other == serial => {
                            assert!(model.holds(held, &control), "{what}: {events:?}");
                            compared += 1;
                        }
                        _ => panic!("{what}: a lookup hashes once and compares: {events:?}"),
                    }
                }
                match got {
                    Ok(answer) => {
                        if held.is_some() {
                            assert!(compared > 0, "{what}: no comparison");
                        }
                        let want = match (op.kind, model.keys.get_mut(&k)) {
                            (Kind::Bump(_), Some(held)) => {
                                held.word += 1;
                                Some(Ok(held.word))
                            }
                            (_, held) => held.map(|h| Ok(h.word)),
                        };
                        assert_eq!(answer, Answer::Looked(want), "{what}");
                    }
                    // Nothing added to.
                    Err(Injected::Hash { .. }) => assert_eq!(events.len(), 1, "{what}"),
                    Err(Injected::Eq { .. }) => {}
                    Err(other) => panic!("{what}: {other:?}"),
                }
                calls
            }
            Kind::Forget(v) | Kind::Evict(v) => {
                let v = u64::from(v);
                let gone: Vec<u64> = model
                    .keys
                    .values()
                    .filter(|h| h.word == v)
                    .map(|h| h.serial)
                    .collect();
                // The sweep: marks and removes them all, frees nothing, runs no key code.
                control.arm(faults);
                let result =
                    panic::catch_unwind(AssertUnwindSafe(|| Answer::Removed(table.sweep(v))));
                let calls = control.disarm();
                let got = outcome(result, &calls);
                assert_eq!(got, Ok(Answer::Removed(gone.len())), "{what}: the sweep");
                assert_eq!(calls.events, [], "{what}: a sweep runs no key code");
                model.keys.retain(|_, h| h.word != v);
                model.removed(gone);
                assert_eq!(table.len(), model.keys.len(), "{what}: swept");
                if matches!(op.kind, Kind::Evict(_)) {
                    calls
                } else {
                    // The freeing after it: everything retired.
                    control.arm(faults);
                    let result = panic::catch_unwind(AssertUnwindSafe(|| {
                        table.reclaim();
                        Answer::Done
                    }));
                    let calls = control.disarm();
                    outcome(result, &calls).ok();
                    let dropped = settled(&drops_from(&calls.events, 0, what), what);
                    check_freed(&dropped, &model.take_all(vec![]), what);
                    calls
                }
            }
            Kind::Rebuild | Kind::Shrink => {
                let holding = model.keys.len();
                control.arm(faults);
                let result = panic::catch_unwind(AssertUnwindSafe(|| {
                    match op.kind {
                        Kind::Rebuild => table.rebuild(),
                        _ => table.shrink(),
                    }
                    Answer::Done
                }));
                let calls = control.disarm();
                let got = outcome(result, &calls);
                let events = &calls.events;
                let (clones, clone_failed, at) = clones_of(events, what);
                let drops = drops_from(events, at, what);
                match got {
                    Err(Injected::Clone { .. } | Injected::Hash { .. }) => {
                        // Stopped at a shard: its clones (the last made) dropped, the shards
                        // before it rebuilt, nothing freed.
                        let dropped = serials(&drops);
                        let cut = clones
                            .iter()
                            .position(|&(_, c)| dropped.contains(&c))
                            .unwrap_or(clones.len());
                        let (kept, lost) = clones.split_at(cut);
                        let lost: HashSet<u64> = lost.iter().map(|&(_, c)| c).collect();
                        assert_eq!(
                            dropped, lost,
                            "{what}: the failing shard's clones, and only them: {events:?}"
                        );
                        model.install(kept, &control, what);
                    }
                    Ok(_) | Err(Injected::Drop { .. }) => {
                        assert!(!clone_failed, "{what}: a clone panicked: {events:?}");
                        if matches!(op.kind, Kind::Rebuild) {
                            assert_eq!(clones.len(), holding, "{what}: every key cloned");
                        }
                        model.install(&clones, &control, what);
                        let dropped = settled(&drops, what);
                        check_freed(&dropped, &model.take_all(vec![]), what);
                    }
                    Err(other) => panic!("{what}: {other:?}"),
                }
                calls
            }
        };
        // After every operation, panicking or not.
        calls.check_locks(&control, what);
        assert_eq!(table.len(), model.keys.len(), "{what}: len");
        for (&k, held) in &model.keys {
            assert_eq!(table.read(&k), Some(Ok(held.word)), "{what}: key {k}");
            assert!(control.is_alive(held.serial), "{what}: key {k} dropped");
        }
        for &serial in model.removed.iter().chain(&model.copies).flatten() {
            let k = control.k_of(serial);
            if !model.keys.contains_key(&k) {
                assert_eq!(table.read(&k), None, "{what}: removed key {k} held");
            }
            assert!(control.is_alive(serial), "{what}: retired key {k} dropped");
        }
        let removed: usize = model.removed.iter().map(Vec::len).sum();
        assert_eq!(table.unreclaimed(), removed, "{what}: unreclaimed");
        let alive = model.keys.len() + model.pending();
        assert_eq!(control.alive(), alive, "{what}: instances alive");
        if model.pending() == 0 {
            // Frees what is retired if anything is, which holds no key.
            control.arm(Faults::default());
            let retired = table.retired();
            let calls = control.disarm();
            assert_eq!((retired, calls.events), (0, vec![]), "{what}");
        }
    }
    if input.settle {
        // A reclaim with no fault armed: every removed instance and old copy dropped, one
        // instance left per key held.
        control.arm(Faults::default());
        table.reclaim();
        let calls = control.disarm();
        let dropped = settled(&drops_from(&calls.events, 0, "settle"), "settle");
        check_freed(&dropped, &model.take_all(vec![]), "the last reclaim");
        assert_eq!(control.alive(), model.keys.len(), "the last reclaim");
        assert_eq!(table.unreclaimed(), 0, "the last reclaim");
    }
    // The table's drop drops every removed instance, every old copy, then every key it holds,
    // each once, and passes the first panic on.
    let held: Vec<u64> = model.keys.values().map(|h| h.serial).collect();
    let groups = model.take_all(held);
    let table = Arc::into_inner(table).expect("no lock probe holds the table");
    control.arm(Faults {
        drop: input.last,
        ..Faults::default()
    });
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        drop(table);
        Answer::Done
    }));
    let calls = control.disarm();
    outcome(result, &calls).ok();
    let dropped = settled(
        &drops_from(&calls.events, 0, "the table's drop"),
        "the table's drop",
    );
    check_freed(&dropped, &groups, "the table's drop");
    assert_eq!(control.alive(), 0, "the table's drop");
});
