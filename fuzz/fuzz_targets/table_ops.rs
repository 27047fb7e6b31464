//! The keyed limiter's table (`tollgate::keyed::table`) against a `HashMap`, with keys whose
//! `Hash`, `Eq` or `Drop` panic on chosen calls. Arbitrary sequences of inserts, replacements,
//! admissions (adding one to a key's word), peeks, evictions (marking gone and removing every key
//! whose word is a value, freeing the removed keys at once or leaving them to later writes),
//! replacements of gone states, relocations of every entry and shrinks, on up to 256 keys in 1 to
//! 4 shards, so that tables grow, fill with removed entries, are rebuilt and shrink.
//! Single-threaded: the threaded and loom tests check the races; this checks that no sequence of
//! steps, and no panic from a key, loses, resurrects, duplicates or double-drops a key.
//!
//! # Keys that panic
//!
//! Every key ([`Key`]) is a value `k` (what `Hash` and `Eq` see; it also borrows as `u64`, so the
//! checks look keys up without running any key code) and a serial number unique to the instance,
//! with a shared [`Control`] that counts the `Hash`, `Eq` and `Drop` calls of the operation under
//! way, makes the chosen ones panic (with an [`Injected`] payload), and records every drop by
//! serial, failing at once on a second drop of an instance. An operation may arm [`Faults`]: the
//! op's first `Hash` call panics; its `n`th `Eq` call panics; its `n`th key drop panics, or every
//! drop of a key whose `k % 64` is in a mask does. A `Drop` never panics while the thread is
//! already unwinding (that would abort the process, in any program). Each operation runs inside
//! `catch_unwind`.
//!
//! # What the model expects
//!
//! From `src/keyed/table.rs` ("What user code runs where"):
//!
//! - `Hash` runs exactly once per keyed operation, before anything is held; `Eq` only in the
//!   probe (under the shard lock for writes, in the epoch for lookups); rebuilds, shrinks and
//!   sweeps run neither.
//! - A panic in `Hash` or `Eq` means the operation did nothing: no key inserted or replaced, no
//!   word added to; the operation's own key is dropped once, while unwinding. An `Eq` panic on the
//!   first comparison is certain whenever the key is held (its probe compares at least once).
//! - A panic in the drop of a key the operation did not insert (an insert of a held key, a
//!   replacement of a state that is not gone): nothing changed.
//! - A panic in the drop of a replaced key (`Put` of a held key): the replacement happened (the
//!   old entry was unlinked under the lock, and freed after it).
//! - A sweep (`Forget` and `Evict`: the table's `retain`, as the keyed limiter evicts) marks and
//!   removes every key whose word is the value, in every shard, and runs no key code at all: it
//!   answers the count, with the removed keys still alive, counted as unreclaimed. (Before the
//!   table's commit d0ef1e1 the sweep freed each shard's removed keys before sweeping the next,
//!   so a panicking `Drop` cut it short; this target's first form modelled that.)
//! - Freeing drops each key freed exactly once; a panic in one drop is passed on after the rest
//!   are dropped (with a mask every masked key panics, and the first one's panic is passed on).
//!   `Forget` frees at once (`reclaim_now`, as the limiter does after a sweep). What `Evict`
//!   removed stays *pending* until a later operation frees it, all of it at once (no reader holds
//!   any): certainly a rebuild, a shrink, a `Forget`, or a `Put` that replaces (a write that
//!   retires something collects); perhaps any other write (the reclaimer looks every 8 to 4 096
//!   writes); never a lookup, nor a write whose `Hash` or `Eq` panicked (it stops before freeing).
//!   A write frees the pending keys first, then the key it replaced, then the key it did not
//!   insert, each even if an earlier one panicked; so the `n`th drop of an operation is one of the
//!   pending keys if `n` is below their count, and the operation's own drop if `n` is that count.
//!   A write whose freeing panicked has done its work (insert or replacement) all the same.
//! - Dropping the table drops every key it holds or has pending exactly once and passes the first
//!   panic on.
//!
//! The caught payload is always the first injected panic of the operation, and an operation
//! answers normally exactly when no injected panic fired. After every operation, panicking or
//! not: the table's length is the model's, every key the model holds reads the model's word (so,
//! with the length, the table holds exactly the model's keys), the live key instances are exactly
//! the ones the model holds or has pending (every other one dropped, once), and nothing is left
//! retired but the pending keys (no pin or lock outlived an unwinding). At the end, dropping the
//! table drops every instance left.
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
//! hook can see; `resume_unwind` (how the table passes a drop's panic on) calls no hook.

#![no_main]

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard, Once};

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use tollgate::keyed::model_table::{FuzzTable, Gone};

/// The payload of an injected panic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Injected {
    /// A `Hash` call on the key with this value and serial.
    Hash { k: u64, serial: u64 },
    /// An `Eq` call comparing these values.
    Eq { k: u64, other: u64 },
    /// The drop of the key with this value and serial.
    Drop { k: u64, serial: u64 },
}

/// Which of an operation's calls panic.
#[derive(Debug, Clone, Copy, Default, Arbitrary)]
struct Faults {
    /// The first `Hash` call panics.
    hash: bool,
    /// The `n`th `Eq` call (from 0) panics.
    eq: Option<u8>,
    drop: Option<DropFault>,
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

/// What the current operation's keys did.
#[derive(Debug, Default)]
struct Calls {
    hashes: u32,
    eqs: u32,
    drops: u32,
    /// Injected panics, in the order they were raised.
    fired: Vec<Injected>,
}

#[derive(Default)]
struct State {
    faults: Faults,
    calls: Calls,
    /// Whether each instance (by serial) has been dropped.
    dropped: Vec<bool>,
    /// Instances not yet dropped.
    alive: usize,
}

/// Shared by every key of a run.
#[derive(Default)]
struct Control(Mutex<State>);

impl Control {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic is never raised with the lock held, but recover anyway: the checks read it.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new instance of key `k`.
    fn key(self: &Arc<Control>, k: u64) -> Key {
        let mut state = self.state();
        let serial = state.dropped.len() as u64;
        state.dropped.push(false);
        state.alive += 1;
        Key {
            k,
            serial,
            control: self.clone(),
        }
    }

    /// Arms `faults` for the next operation, with its call counts at zero.
    fn arm(&self, faults: Faults) {
        let mut state = self.state();
        state.faults = faults;
        state.calls = Calls::default();
    }

    /// Disarms, answering what the operation's keys did.
    fn disarm(&self) -> Calls {
        let mut state = self.state();
        state.faults = Faults::default();
        std::mem::take(&mut state.calls)
    }

    fn alive(&self) -> usize {
        self.state().alive
    }

    fn is_alive(&self, serial: u64) -> bool {
        !self.state().dropped[serial as usize]
    }

    /// Counts a call and answers whether it panics (recording the panic if so).
    fn hash_call(&self, k: u64, serial: u64) -> Option<Injected> {
        let mut state = self.state();
        let nth = state.calls.hashes;
        state.calls.hashes += 1;
        let fire = state.faults.hash && nth == 0;
        fire.then(|| record(&mut state, Injected::Hash { k, serial }))
    }

    fn eq_call(&self, k: u64, other: u64) -> Option<Injected> {
        let mut state = self.state();
        let nth = state.calls.eqs;
        state.calls.eqs += 1;
        let fire = state.faults.eq.is_some_and(|n| nth == u32::from(n));
        fire.then(|| record(&mut state, Injected::Eq { k, other }))
    }

    fn drop_call(&self, k: u64, serial: u64) -> Option<Injected> {
        let mut state = self.state();
        assert!(
            !std::mem::replace(&mut state.dropped[serial as usize], true),
            "key {k} (#{serial}) dropped twice"
        );
        state.alive -= 1;
        let nth = state.calls.drops;
        state.calls.drops += 1;
        let fire = DropFault::fires(state.faults.drop, nth, k) && !std::thread::panicking();
        fire.then(|| record(&mut state, Injected::Drop { k, serial }))
    }
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
        if let Some(injected) = self.control.eq_call(self.k, other.k) {
            panic::panic_any(injected);
        }
        self.k == other.k
    }
}

impl Eq for Key {}

impl Borrow<u64> for Key {
    fn borrow(&self) -> &u64 {
        &self.k
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        if let Some(injected) = self.control.drop_call(self.k, self.serial) {
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
    /// Mark gone and remove every key whose word is this value, then free them.
    Forget(u8),
    /// Mark gone and remove every key whose word is this value, leaving them to later writes.
    Evict(u8),
    /// Replace the key's state with a fresh word if it is marked gone.
    ReplaceGone(u8, u8),
    /// Relocate every entry into a new table.
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
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Input> {
        Ok(Input {
            shards: u.int_in_range(1..=4)?,
            last: u.arbitrary()?,
            ops: u
                .arbitrary_iter()?
                .take(2_000)
                .collect::<arbitrary::Result<_>>()?,
        })
    }
}

/// What the model holds for a key: the instance held and its word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Held {
    serial: u64,
    word: u64,
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

/// A key instance: its value and serial.
type Id = (u64, u64);

fn id(k: u64, held: &Held) -> Id {
    (k, held.serial)
}

/// Checks the drops an operation made against the ones expected, `groups` of them in an order
/// known between groups and not within one (a batch freed, in the order of its shards and
/// slots): as many drops; with `Nth(n)`, one panic, from the group holding the `n`th drop, if
/// there are `n` drops; with a mask, a panic from every masked key, in the order of the groups.
/// Answers whether a drop panicked.
fn check_drops(calls: &Calls, fault: Option<DropFault>, groups: &[Vec<Id>], what: &str) -> bool {
    let total: usize = groups.iter().map(Vec::len).sum();
    assert_eq!(calls.drops as usize, total, "{what}: drops");
    let fired: Vec<Injected> = calls
        .fired
        .iter()
        .copied()
        .filter(|f| matches!(f, Injected::Drop { .. }))
        .collect();
    let group_of = |f: &Injected| {
        groups
            .iter()
            .position(|g| {
                g.iter()
                    .any(|&(k, serial)| *f == Injected::Drop { k, serial })
            })
            .unwrap_or_else(|| panic!("{what}: {f:?} was not to be dropped"))
    };
    match fault {
        Some(DropFault::Nth(n)) => {
            let mut first = 0;
            let holding = groups.iter().position(|g| {
                first += g.len();
                usize::from(n) < first
            });
            match holding {
                Some(g) => assert!(
                    fired.len() == 1 && group_of(&fired[0]) == g,
                    "{what}: {fired:?}, expected one of {:?}",
                    groups[g]
                ),
                None => assert_eq!(fired, [], "{what}: fewer drops than {n}"),
            }
        }
        fault => {
            let mut want: Vec<Injected> = groups
                .iter()
                .flatten()
                .filter(|&&(k, _)| DropFault::fires(fault, u32::MAX, k))
                .map(|&(k, serial)| Injected::Drop { k, serial })
                .collect();
            let order: Vec<usize> = fired.iter().map(group_of).collect();
            assert!(order.is_sorted(), "{what}: {fired:?} out of order");
            let mut fired = fired.clone();
            fired.sort_unstable();
            want.sort_unstable();
            assert_eq!(fired, want, "{what}: the drops that panicked");
        }
    }
    !fired.is_empty()
}

fuzz_target!(|input: Input| {
    install_hook();
    let control = Arc::new(Control::default());
    let table: FuzzTable<Key> = FuzzTable::with_shards(input.shards);
    let mut model: HashMap<u64, Held> = HashMap::new();
    // Removed by `Evict`, not yet freed (alive, and counted as unreclaimed).
    let mut pending: Vec<Id> = Vec::new();
    for (i, op) in input.ops.iter().enumerate() {
        let faults = op.faults.unwrap_or_default();
        let what = format!("op {i}: {op:?}");
        let what = what.as_str();
        match op.kind {
            Kind::Insert(k, v) | Kind::Put(k, v) | Kind::ReplaceGone(k, v) => {
                let (k, v) = (u64::from(k), u64::from(v));
                let key = control.key(k);
                let serial = key.serial;
                let held = model.get(&k).copied();
                control.arm(faults);
                let result = panic::catch_unwind(AssertUnwindSafe(|| match op.kind {
                    Kind::Insert(..) => Answer::Inserted(table.insert(key, v)),
                    Kind::Put(..) => Answer::Word(table.put(key, v)),
                    _ => Answer::Word(table.replace_gone(key, v)),
                }));
                let calls = control.disarm();
                let got = outcome(result, &calls);
                assert_eq!(calls.hashes, 1, "{what}: hashed the key once");
                // All or nothing of what is pending is freed.
                let unreclaimed = table.unreclaimed();
                assert!(unreclaimed == 0 || unreclaimed == pending.len(), "{what}");
                let freed_pending = unreclaimed == 0 && !pending.is_empty();
                // Hash first, then the probe: a panic in either stops the operation there.
                match got {
                    Err(Injected::Hash { k: hk, serial: hs }) => {
                        assert!(faults.hash && (hk, hs) == (k, serial), "{what}");
                    }
                    Err(Injected::Eq { .. }) => assert!(!faults.hash, "{what}"),
                    _ => {
                        assert!(!faults.hash, "{what}: the hash did not panic");
                        let compared = held.is_some() && faults.eq == Some(0);
                        assert!(!compared, "{what}: the probe of a held key compared");
                    }
                }
                if matches!(got, Err(Injected::Hash { .. } | Injected::Eq { .. })) {
                    // Nothing happened, nothing was freed; the key was dropped while unwinding.
                    assert!(!freed_pending, "{what}: freed after a panic in Hash or Eq");
                    assert_eq!(calls.drops, 1, "{what}");
                } else {
                    let inserts = match op.kind {
                        Kind::Insert(..) => held.is_none(),
                        Kind::Put(..) => true,
                        // A held state is never gone under the shard lock (eviction marks and
                        // removes under it), so this never replaces.
                        _ => false,
                    };
                    // The operation's own drop: the old key (replaced) or the new one (not
                    // inserted).
                    let own = match (inserts, held) {
                        (true, None) => None,
                        (true, Some(old)) => Some(id(k, &old)),
                        (false, _) => Some((k, serial)),
                    };
                    if inserts && held.is_some() && !pending.is_empty() {
                        assert!(freed_pending, "{what}: a write that retires collects");
                    }
                    let mut groups = Vec::new();
                    if freed_pending {
                        groups.push(std::mem::take(&mut pending));
                    }
                    groups.extend(own.map(|own| vec![own]));
                    let panicked = check_drops(&calls, faults.drop, &groups, what);
                    match got {
                        Err(_) => assert!(panicked, "{what}"),
                        Ok(answer) => {
                            assert!(!panicked, "{what}");
                            let want = match op.kind {
                                Kind::Insert(..) => Answer::Inserted(held.is_none()),
                                _ => Answer::Word(held.map(|h| h.word)),
                            };
                            assert_eq!(answer, want, "{what}");
                        }
                    }
                    // Done whether or not a drop after it panicked.
                    if inserts {
                        model.insert(k, Held { serial, word: v });
                    }
                }
            }
            Kind::Bump(k) | Kind::Read(k) => {
                let k = u64::from(k);
                let probe = control.key(k);
                let held = model.get(&k).copied();
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
                assert_eq!(calls.hashes, 1, "{what}: hashed the key once");
                assert_eq!(calls.drops, 0, "{what}: a lookup frees nothing");
                match got {
                    Ok(answer) => {
                        assert!(!faults.hash, "{what}: the hash did not panic");
                        if held.is_some() {
                            assert_ne!(faults.eq, Some(0), "{what}: no comparison");
                        }
                        let want = match (op.kind, model.get_mut(&k)) {
                            (Kind::Bump(_), Some(held)) => {
                                held.word += 1;
                                Some(Ok(held.word))
                            }
                            (_, held) => held.map(|h| Ok(h.word)),
                        };
                        assert_eq!(answer, Answer::Looked(want), "{what}");
                    }
                    // Nothing added to.
                    Err(Injected::Hash { .. }) => assert!(faults.hash, "{what}"),
                    Err(Injected::Eq { .. }) => assert!(!faults.hash, "{what}"),
                    Err(other) => panic!("{what}: {other:?}"),
                }
            }
            Kind::Forget(v) | Kind::Evict(v) => {
                let v = u64::from(v);
                let gone: Vec<Id> = model
                    .iter()
                    .filter(|(_, h)| h.word == v)
                    .map(|(&k, h)| id(k, h))
                    .collect();
                // The sweep: marks and removes them all, frees nothing, runs no key code.
                control.arm(faults);
                let result =
                    panic::catch_unwind(AssertUnwindSafe(|| Answer::Removed(table.sweep(v))));
                let calls = control.disarm();
                let got = outcome(result, &calls);
                assert_eq!(got, Ok(Answer::Removed(gone.len())), "{what}: the sweep");
                assert_eq!(
                    (calls.hashes, calls.eqs, calls.drops),
                    (0, 0, 0),
                    "{what}: a sweep runs no key code"
                );
                for (k, _) in &gone {
                    model.remove(k);
                }
                assert_eq!(table.len(), model.len(), "{what}: swept");
                let removed = pending.len() + gone.len();
                assert_eq!(table.unreclaimed(), removed, "{what}: swept");
                assert_eq!(control.alive(), model.len() + removed, "{what}");
                if matches!(op.kind, Kind::Evict(_)) {
                    pending.extend(gone);
                } else {
                    // The freeing after it: the older batches first.
                    let groups = [std::mem::take(&mut pending), gone];
                    control.arm(faults);
                    let result = panic::catch_unwind(AssertUnwindSafe(|| {
                        table.reclaim();
                        Answer::Done
                    }));
                    let calls = control.disarm();
                    let got = outcome(result, &calls);
                    let panicked = check_drops(&calls, faults.drop, &groups, what);
                    assert_eq!(got.is_err(), panicked, "{what}: {got:?}");
                }
            }
            Kind::Rebuild | Kind::Shrink => {
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
                assert_eq!(
                    (calls.hashes, calls.eqs),
                    (0, 0),
                    "{what}: a rebuild runs no key code"
                );
                // Each frees what is pending (all of it, at its first retirement).
                let groups = [std::mem::take(&mut pending)];
                let panicked = check_drops(&calls, faults.drop, &groups, what);
                assert_eq!(got.is_err(), panicked, "{what}: {got:?}");
            }
        }
        // After every operation, panicking or not.
        assert_eq!(table.len(), model.len(), "{what}: len");
        for (&k, held) in &model {
            assert_eq!(table.read(&k), Some(Ok(held.word)), "{what}: key {k}");
            assert!(control.is_alive(held.serial), "{what}: key {k} dropped");
        }
        for &(k, serial) in &pending {
            if !model.contains_key(&k) {
                assert_eq!(table.read(&k), None, "{what}: removed key {k} held");
            }
            assert!(control.is_alive(serial), "{what}: pending key {k} dropped");
        }
        let alive = model.len() + pending.len();
        assert_eq!(control.alive(), alive, "{what}: instances alive");
        if pending.is_empty() {
            // Frees what is retired if anything is, which nothing should be.
            assert_eq!((table.retired(), table.unreclaimed()), (0, 0), "{what}");
        } else {
            assert_eq!(table.unreclaimed(), pending.len(), "{what}: pending");
        }
    }
    // The table's drop drops every key it holds, then every key pending, each once, and passes
    // the first panic on.
    let held: Vec<Id> = model.iter().map(|(&k, h)| id(k, h)).collect();
    let groups = [held, pending];
    control.arm(Faults {
        drop: input.last,
        ..Faults::default()
    });
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        drop(table);
        Answer::Done
    }));
    let calls = control.disarm();
    let got = outcome(result, &calls);
    let panicked = check_drops(&calls, input.last, &groups, "the table's drop");
    assert_eq!(got.is_err(), panicked, "the table's drop: {got:?}");
    assert_eq!(control.alive(), 0, "the table's drop");
});
