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
//! `<crate>_<shape>_<load>`: crate `tollgate`, `governor` or `floor` (the [`Floor`], keyed shapes
//! only; the script counts the first two); shape `keyed1` (one key),
//! `keyed100000` (100 000 keys) or `direct` (one bucket); load `allow` (every check admitted) or
//! `deny` (every check refused). With the `metrics` feature, crate `metered` counts the same
//! checks through `tollgate::metrics::Metered` (direct) or a keyed limiter named with
//! `with_name` (keyed), with no recorder installed: the feature's cost beside `tollgate`. The
//! program builds the limiter, populates the keys (one check each, taking the only token under
//! `deny`), shuffles the order they are checked in (a fixed seed), then
//! makes `<checks>` checks on each crate's default clock and verifies every answer was the load's.
//! Instructions per check are (total with N checks - total with 0 checks) / N, which leaves out the
//! set-up; `benches/instructions.sh` does that subtraction.
//!
//! The quotas are `testkit::bench::Load`'s, the ones the criterion benches use.
//!
//! `<binary> interleave <keyedN|direct>_<load> [rounds] [checks] [threads]` times the checks instead, the two
//! crates taking turns round by round (see [`interleave`]): a wall-time ratio that a noisy,
//! shared machine disturbs far less than two separate criterion runs. Keyed shapes also time a
//! [`Floor`] in the same rounds: the least a keyed check can do on the machine, so that a ratio
//! can be read against what the machine allows.

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

/// The least a keyed check can do, as a yardstick for the interleaved times: hash the key (ahash,
/// as tollgate's table), ask the processor for the key's control byte and entry, read the default
/// clock (`tollgate::MonotonicClock`, the TSC), then probe and decide on the key's word with one
/// compare (denying) or one compare-and-swap (admitting, [`testkit::bench::floor_decide`]).
/// tollgate's order (prefetch, clock, probe) and its layout (one allocation of 16-byte entries,
/// control bytes apart, linear probing), but one table, no shards, no epoch pin, no eviction mark,
/// no policy arithmetic and no outcome: built once, then only read (words aside), it cannot insert,
/// grow, evict or reclaim. Not a limiter: it decides on an arrival time moved 1 ns a check.
struct Floor {
    hasher: ahash::RandomState,
    mask: usize,
    /// 0: empty; else `0x80 | top 7 bits of the hash`.
    tags: Vec<u8>,
    entries: Vec<(u64, std::sync::atomic::AtomicU64)>,
    clock: tollgate::MonotonicClock,
}

impl Floor {
    /// The keys `0..n`, their words starting at [`Load::floor_word`], at most 7/8 full
    /// (tollgate's table grows at that fill).
    fn new(load: Load, n: usize) -> Floor {
        let slots = (n * 8 / 7 + 1).next_power_of_two();
        let start = load.floor_word();
        let mut floor = Floor {
            hasher: ahash::RandomState::new(),
            mask: slots - 1,
            tags: vec![0; slots],
            entries: (0..slots)
                .map(|_| (0, std::sync::atomic::AtomicU64::new(start)))
                .collect(),
            clock: tollgate::MonotonicClock::new(),
        };
        for k in 0..n as u64 {
            let h = floor.hasher.hash_one(k);
            let mut i = h as usize & floor.mask;
            while floor.tags[i] != 0 {
                i = (i + 1) & floor.mask;
            }
            floor.tags[i] = Self::tag(h);
            floor.entries[i].0 = k;
        }
        floor
    }

    fn tag(hash: u64) -> u8 {
        0x80 | (hash >> 57) as u8
    }

    /// One check of `key`, which must be one of the keys (an absent key's probe ends at an empty
    /// slot and is refused).
    #[inline]
    fn check(&self, key: u64) -> bool {
        let h = self.hasher.hash_one(key);
        let mut i = h as usize & self.mask;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch reads no memory in the language's sense and cannot fault; both
        // addresses are in bounds anyway (`i <= mask`).
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.tags.as_ptr().add(i).cast());
            _mm_prefetch::<_MM_HINT_T0>(self.entries.as_ptr().add(i).cast());
        }
        let now = tollgate::Clock::now(&self.clock).as_u64();
        let tag = Self::tag(h);
        loop {
            match self.tags[i] {
                0 => return false,
                t if t == tag && self.entries[i].0 == key => {
                    return testkit::bench::floor_decide(
                        &self.entries[i].1,
                        now,
                        testkit::bench::FLOOR_TOLERANCE,
                    )
                }
                _ => i = (i + 1) & self.mask,
            }
        }
    }
}

/// The same checks as the counted cases, timed: tollgate's and governor's limiters (and, keyed, the
/// [`Floor`]) built side by side, then `rounds` rounds of `checks` checks on each of `threads`
/// threads, the limiters taking turns within every round (each goes first in turn), so that each
/// round's ratios compare them under the same machine state. Prints one markdown row: the
/// medians of the time per check and of the per-round ratios (tollgate ÷ governor with its
/// 10th-90th percentiles; then the floor's time, floor ÷ governor and tollgate ÷ floor). On a
/// shared, noisy machine the ratios are the figures to trust, not the times.
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
    let (mut t_floor, mut floor_ratios, mut over_floor) = (Vec::new(), Vec::new(), Vec::new());
    let (mut admitted_ours, mut admitted_theirs, mut admitted_floor) = (0, 0, 0);
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
    let floor = (shape != "direct").then(|| Floor::new(load, n));
    let floor_check: Option<Check<'_>> = floor
        .as_ref()
        .map(|f| -> Check<'_> { Box::new(move |k| f.check(k)) });
    let mut checkers: Vec<&(dyn Fn(u64) -> bool + Sync)> = vec![&*a, &*b];
    checkers.extend(floor_check.as_deref());
    for round in 0..rounds {
        // Each limiter goes first in turn.
        let mut results = vec![(0.0, 0); checkers.len()];
        for j in 0..checkers.len() {
            let which = (round + j) % checkers.len();
            results[which] = time(checkers[which]);
        }
        let ((x, ax), (y, ay)) = (results[0], results[1]);
        admitted_ours += ax;
        admitted_theirs += ay;
        t_ours.push(x);
        t_theirs.push(y);
        ratios.push(x / y);
        if let Some(&(z, az)) = results.get(2) {
            admitted_floor += az;
            t_floor.push(z);
            floor_ratios.push(z / y);
            over_floor.push(x / z);
        }
    }
    let total = checks * (rounds * threads) as u64;
    load.verify("tollgate (interleaved)", admitted_ours, total);
    load.verify("governor (interleaved)", admitted_theirs, total);
    if floor.is_some() {
        load.verify("floor (interleaved)", admitted_floor, total);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (lo, hi) = {
        let mut r = ratios.clone();
        r.sort_by(f64::total_cmp);
        (r[r.len() / 10], r[r.len() - 1 - r.len() / 10])
    };
    // The floor's columns: its time, its ratio to governor's, and tollgate's ratio to it (each the
    // median of the per-round ratios); "-" for the direct shape.
    let floor_columns = if t_floor.is_empty() {
        "- | - | -".to_string()
    } else {
        format!(
            "{:.1} | {:.3} | {:.2}",
            median(&mut t_floor),
            median(&mut floor_ratios),
            median(&mut over_floor)
        )
    };
    println!(
        "| {shape_load} | {threads} | {:.1} | {:.1} | {:.3} ({lo:.2}-{hi:.2}) | {floor_columns} |",
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
        eprintln!("usage: instructions <tollgate|governor|floor>_<keyed1|keyed100000|direct>_<allow|deny> <checks>");
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
        // The quota pointer alone (issue 24, part 2): one token bucket's block decided on in place
        // (no pointer: the design before quotas could change), through the crate's epoch (as
        // `Direct` reads it), and through `arc-swap`'s `load` (the other way the issue names).
        ("plain", "direct") | ("epoch", "direct") | ("arcswap", "direct") => {
            use tollgate::__bench_change::{BenchBlock, EpochBlock};
            use tollgate::Clock;
            let clock = tollgate::MonotonicClock::new();
            let block = || BenchBlock::new(load.tollgate_quota(), clock.now());
            match krate {
                "plain" => {
                    let block = block();
                    run(&keys, checks, |_| block.try_acquire_at(clock.now()))
                }
                "epoch" => {
                    let block = EpochBlock::new(block());
                    run(&keys, checks, |_| block.try_acquire_at(clock.now()))
                }
                _ => {
                    let block = arc_swap::ArcSwap::from_pointee(block());
                    run(&keys, checks, |_| block.load().try_acquire_at(clock.now()))
                }
            }
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
        // The `metrics` feature's cost with no recorder installed: the same bucket wrapped in
        // `Metered` (one no-op counter handle per check), and the keyed limiter named (its
        // handles registered, all no-ops). `tollgate_*` built with the feature is the unwrapped,
        // unnamed side of the comparison.
        #[cfg(feature = "metrics")]
        ("metered", "direct") => {
            use tollgate::Limiter;
            let bucket = tollgate::metrics::Metered::new("bench", load.tollgate());
            run(&keys, checks, |_| bucket.try_acquire().is_ok())
        }
        #[cfg(feature = "metrics")]
        ("metered", _) => {
            let limiter: tollgate::keyed::KeyedLimiter<u64> =
                tollgate::keyed::KeyedLimiter::new(load.tollgate_quota())
                    .with_max_keys(1 << 20)
                    .with_name("bench");
            let at = tollgate::Clock::now(limiter.clock());
            for &k in &keys {
                let _ = limiter.check_key_at(&k, at);
            }
            assert_eq!(limiter.len(), keys.len());
            run(&keys, checks, |k| limiter.check_key(&k).is_ok())
        }
        ("floor", "direct") => panic!("the floor is keyed only"),
        ("floor", _) => {
            let floor = Floor::new(load, keys.len());
            run(&keys, checks, |k| floor.check(k))
        }
        (other, _) => panic!("crate {other:?}: tollgate, governor or floor"),
    };
    load.verify(case, admitted, checks);
}
