//! One check, many times, for `valgrind --tool=callgrind`: the machine-independent side of the
//! keyed and direct speed claims (instructions, data reads and data writes per check), measured
//! the same way for tollgate and governor.
//!
//! ```sh
//! cargo bench --bench instructions --no-run
//! bash benches/instructions.sh            # every case, as a markdown table
//! ```
//!
//! Run by hand: `target/release/deps/instructions-* <case> <checks>` with a case of
//! `<crate>_<shape>_<load>`: crate `tollgate` or `governor`; shape `keyed1` (one key),
//! `keyed100000` (100 000 keys) or `direct` (one bucket); load `allow` (every check admitted) or
//! `deny` (every check refused). The program builds the limiter, populates the keys (one check each,
//! taking the only token under `deny`), shuffles the order they are checked in (a fixed seed), then
//! makes `<checks>` checks on each crate's default clock and verifies every answer was the load's.
//! Instructions per check are (total with N checks - total with 0 checks) / N, which leaves out the
//! set-up; `benches/instructions.sh` does that subtraction.
//!
//! The quotas are `testkit::bench::Load`'s, the ones the criterion benches use.

use std::hint::black_box;

use testkit::bench::Load;

/// The order keys are checked in: a Fisher-Yates shuffle of `0..n` from a fixed seed.
fn shuffled(n: usize) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..n as u64).collect();
    let mut x = 0x7011_6a7e_5eed_0001u64;
    for i in (1..keys.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        keys.swap(i, (x % (i as u64 + 1)) as usize);
    }
    keys
}

/// Runs `checks` checks of `check` over `keys` in order, cycling, and answers how many admitted.
/// Never inlined: `benches/instructions.sh` counts inside this function only
/// (`--toggle-collect`), so the set-up, and the clocks' calibration (a loop that runs for a time,
/// not a count), stay out of the figures.
#[inline(never)]
fn run(keys: &[u64], checks: u64, mut check: impl FnMut(u64) -> bool) -> u64 {
    let mut admitted = 0;
    let mut i = 0;
    for _ in 0..checks {
        admitted += u64::from(check(black_box(keys[i])));
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    admitted
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let Some(case) = args.first() else {
        // `cargo bench` without arguments: nothing to count (the script passes a case).
        eprintln!("usage: instructions <tollgate|governor>_<keyed1|keyed100000|direct>_<allow|deny> <checks>");
        return;
    };
    let checks: u64 = args
        .get(1)
        .map(|n| n.parse().expect("<checks> is a whole number"))
        .unwrap_or(1_000_000);
    let parts: Vec<&str> = case.split('_').collect();
    let [krate, shape, load] = parts[..] else {
        panic!("case {case:?}: expected <crate>_<shape>_<load>");
    };
    let load = match load {
        "allow" => Load::Accept,
        "deny" => Load::Deny,
        other => panic!("load {other:?}: allow or deny"),
    };
    let keys = match shape {
        "direct" => vec![0],
        s => {
            let n: usize = s
                .strip_prefix("keyed")
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("shape {s:?}: keyed<N> or direct"));
            shuffled(n)
        }
    };
    // Calibrates the TSC clock both crates read (once per process, for a while, not a count of
    // rounds) before anything is counted.
    let _ = quanta::Clock::new().now();
    let admitted = match (krate, shape) {
        ("tollgate", "direct") => {
            let bucket = load.tollgate();
            run(&keys, checks, |_| bucket.try_acquire().is_ok())
        }
        ("governor", "direct") => {
            let limiter = load.governor();
            run(&keys, checks, |_| limiter.check().is_ok())
        }
        ("tollgate", _) => {
            let limiter: tollgate::keyed::KeyedLimiter<u64> =
                tollgate::keyed::KeyedLimiter::new(load.tollgate_quota()).with_max_keys(1 << 20);
            // One reading for the whole population: no key is fresh at it, so no sweep removes
            // one (see benches/groups/keyed.rs).
            let at = tollgate::Clock::now(limiter.clock());
            for &k in &keys {
                let _ = limiter.check_key_at(&k, at);
            }
            assert_eq!(limiter.len(), keys.len());
            let admitted = run(&keys, checks, |k| limiter.check_key(&k).is_ok());
            assert_eq!(
                limiter.len(),
                keys.len(),
                "no key was evicted while checking"
            );
            admitted
        }
        ("governor", _) => {
            let limiter = governor::RateLimiter::keyed(load.governor_quota());
            for &k in &keys {
                let _ = limiter.check_key(&k);
            }
            run(&keys, checks, |k| limiter.check_key(&k).is_ok())
        }
        (other, _) => panic!("crate {other:?}: tollgate or governor"),
    };
    load.verify(case, admitted, checks);
}
