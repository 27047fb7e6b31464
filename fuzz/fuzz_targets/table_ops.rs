//! The keyed limiter's table (`tollgate::keyed::table`) against a `HashMap`: arbitrary sequences of
//! inserts, admissions (adding one to a key's word), peeks, evictions (marking gone and removing
//! every key whose word is a value), replacements of gone states, relocations of every entry and
//! shrinks, on up to 256 keys in 1 to 4 shards, so that tables grow, fill with removed entries,
//! are rebuilt and shrink. After every operation the answers and the key count match the map's;
//! at the end every key reads as the map holds it. Single-threaded: the threaded and loom tests
//! check the races; this checks that no sequence of steps loses, resurrects or duplicates a key.

#![no_main]

use std::collections::HashMap;

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use tollgate::keyed::model_table::{Gone, ModelTable};

#[derive(Debug, Arbitrary)]
enum Op {
    /// Insert the key with the word, unless held.
    Insert(u8, u8),
    /// Add one to the key's word.
    Bump(u8),
    /// Read the key's word.
    Read(u8),
    /// Mark gone and remove every key whose word is this value.
    Forget(u8),
    /// Replace the key's state with a fresh word if it is marked gone.
    ReplaceGone(u8, u8),
    /// Relocate every entry into a new table.
    Rebuild,
    /// Shrink every shard to what it holds.
    Shrink,
}

#[derive(Debug)]
struct Input {
    shards: usize,
    ops: Vec<Op>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Input> {
        Ok(Input {
            shards: u.int_in_range(1..=4)?,
            ops: u
                .arbitrary_iter()?
                .take(2_000)
                .collect::<arbitrary::Result<_>>()?,
        })
    }
}

fuzz_target!(|input: Input| {
    let table = ModelTable::with_shards(input.shards);
    let mut model: HashMap<u64, u64> = HashMap::new();
    for op in input.ops {
        match op {
            Op::Insert(k, v) => {
                let (k, v) = (u64::from(k), u64::from(v));
                let inserted = table.insert(k, v);
                assert_eq!(inserted, !model.contains_key(&k), "insert {k}");
                model.entry(k).or_insert(v);
            }
            Op::Bump(k) => {
                let k = u64::from(k);
                let got = table.bump(k);
                let want = model.get_mut(&k).map(|v| {
                    *v += 1;
                    Ok(*v)
                });
                assert_eq!(got, want, "bump {k}");
            }
            Op::Read(k) => {
                let k = u64::from(k);
                assert_eq!(table.read(k), model.get(&k).map(|&v| Ok(v)), "read {k}");
            }
            Op::Forget(v) => {
                let v = u64::from(v);
                let before = model.len();
                model.retain(|_, w| *w != v);
                assert_eq!(table.forget(v), before - model.len(), "forget {v}");
            }
            Op::ReplaceGone(k, v) => {
                // Eviction marks and removes under the shard lock, so a held state is never gone
                // there: the answer is the word held, or none.
                let k = u64::from(k);
                assert_eq!(
                    table.replace_gone(k, u64::from(v)),
                    model.get(&k).copied(),
                    "replace {k}"
                );
            }
            Op::Rebuild => table.rebuild(),
            Op::Shrink => table.shrink(),
        }
        assert_eq!(table.len(), model.len());
    }
    for k in 0..=255u64 {
        let want: Option<Result<u64, Gone>> = model.get(&k).map(|&v| Ok(v));
        assert_eq!(table.read(k), want, "final read {k}");
    }
});
