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
//!
//! `<binary> interleave <keyedN|direct>_<load> [rounds] [checks] [threads]` times the checks instead, the two
//! crates taking turns round by round (see [`interleave`]): a wall-time ratio that a noisy,
//! shared machine disturbs far less than two separate criterion runs.

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

/// The same checks as the counted cases, timed: tollgate's and governor's limiters built side by
/// side, then `rounds` rounds of `checks` checks on each of `threads` threads, the two crates
/// taking turns within every round (which goes first alternates), so that each round's ratio
/// compares the two under the same machine state. Prints the medians of the time per check and of the per-round ratios: on a
/// shared, noisy machine the ratio is the figure to trust, not the times.
fn interleave(shape_load: &str, rounds: usize, checks: u64, threads: usize) {
    let (shape, load_name) = shape_load
        .split_once('_')
        .unwrap_or_else(|| panic!("{shape_load:?}: expected <shape>_<load>"));
    let load = match load_name {
        "allow" => Load::Accept,
        "deny" => Load::Deny,
        other => panic!("load {other:?}: allow or deny"),
    };
    let n: usize = match shape {
        "direct" => 1,
        s => s
            .strip_prefix("keyed")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("shape {s:?}: keyed<N> or direct")),
    };
    let keys = shuffled(n);
    let _ = quanta::Clock::new().now();
    let ours: tollgate::keyed::KeyedLimiter<u64> =
        tollgate::keyed::KeyedLimiter::new(load.tollgate_quota()).with_max_keys(1 << 20);
    // Populated in key order and checked in the shuffled order, as the criterion benches do (a
    // store that lays entries out in insertion order would otherwise be checked in its memory's
    // order).
    let at = tollgate::Clock::now(ours.clock());
    for k in 0..n as u64 {
        let _ = ours.check_key_at(&k, at);
    }
    let theirs = governor::RateLimiter::keyed(load.governor_quota());
    for k in 0..n as u64 {
        let _ = theirs.check_key(&k);
    }
    // Each thread checks the same shuffled keys from its own starting point, so that two threads
    // are not on the same key at the same moment.
    let orders: Vec<Vec<u64>> = (0..threads)
        .map(|t| {
            let mut order = keys.clone();
            order.rotate_left(t * keys.len() / threads);
            order
        })
        .collect();
    // Nanoseconds per check of all the threads together (the inverse of the total throughput),
    // and the checks admitted.
    let time = |check: &(dyn Fn(u64) -> bool + Sync)| {
        let start = std::time::Instant::now();
        let admitted: u64 = std::thread::scope(|s| {
            let runs: Vec<_> = orders
                .iter()
                .map(|order| s.spawn(move || run(order, checks, check)))
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).sum()
        });
        let elapsed = start.elapsed().as_nanos() as f64;
        (elapsed / (checks * threads as u64) as f64, admitted)
    };
    let (mut t_ours, mut t_theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut admitted_ours, mut admitted_theirs) = (0, 0);
    // The direct shape: one bucket each, the key ignored.
    let bucket = load.tollgate();
    let direct = load.governor();
    type Check<'a> = Box<dyn Fn(u64) -> bool + Sync + 'a>;
    let (a, b): (Check<'_>, Check<'_>) = if shape == "direct" {
        (
            Box::new(|_| bucket.try_acquire().is_ok()),
            Box::new(|_| direct.check().is_ok()),
        )
    } else {
        (
            Box::new(|k| ours.check_key(&k).is_ok()),
            Box::new(|k| theirs.check_key(&k).is_ok()),
        )
    };
    for round in 0..rounds {
        let ((x, ax), (y, ay)) = if round % 2 == 0 {
            let x = time(&*a);
            (x, time(&*b))
        } else {
            let y = time(&*b);
            (time(&*a), y)
        };
        admitted_ours += ax;
        admitted_theirs += ay;
        t_ours.push(x);
        t_theirs.push(y);
        ratios.push(x / y);
    }
    let total = checks * (rounds * threads) as u64;
    load.verify("tollgate (interleaved)", admitted_ours, total);
    load.verify("governor (interleaved)", admitted_theirs, total);
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (lo, hi) = {
        let mut r = ratios.clone();
        r.sort_by(f64::total_cmp);
        (r[r.len() / 10], r[r.len() - 1 - r.len() / 10])
    };
    println!(
        "| {shape_load} | {threads} | {:.1} | {:.1} | {:.2} ({lo:.2}-{hi:.2}) |",
        median(&mut t_ours),
        median(&mut t_theirs),
        median(&mut ratios)
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if args.first().map(String::as_str) == Some("interleave") {
        let arg =
            |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
        interleave(
            args.get(1).map_or("keyed100000_allow", String::as_str),
            arg(2, 41) as usize,
            arg(3, 200_000),
            arg(4, 1).max(1) as usize,
        );
        return;
    }
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
