//! The tour: what tollgate does to a bursty trace, then what it costs on this machine.
//!
//! Run it with `cargo run --release --example tour`. It takes a few seconds.
//!
//! **Part 1** replays a synthetic 20-second trace (quiet stretches, sharp bursts, two bursts
//! across a window boundary, a sustained overload) through every limiter in [`trace_columns`] and
//! [`window_columns`], on explicit timestamps, so its output is the same on every machine. It
//! charts requests offered against requests admitted per time slice, checks each limiter's promise
//! (for the token bucket and the sharded bucket alike: admissions <= C + R*t over every window; N
//! per window for the window limiters), and reports the most admissions in any 2 s window, which
//! shows the fixed window's boundary burst and measures the sliding counters' approximation. A third
//! chart shows when admitted requests actually go: the token bucket's at once, the leaky meter's at
//! the departures it schedules and the leaky queue's as its consumer receives them, 1/R apart.
//! Last, the trace runs once more through a token bucket, a sharded bucket and one key of a
//! keyed limiter whose quota is changed twice mid-trace (`set_quota_at`, [`CHANGES`]), checking
//! the crate's rule after each
//! change: at most what the old quota had left, capped at the new burst, plus the new refill.
//!
//! **Part 2** sends a gateway's traffic through [`KeyedLimiter`]s keyed by client address, on
//! explicit timestamps (deterministic too): 1 000 well-behaved clients and one abusive client for
//! 10 s, then the same for 10 s more while an attacker sprays a million requests from as many new
//! addresses. Two gateways take it, one with room for the spray ([`BOUNDS`]) and one without. It
//! prints admissions and refusals per class and phase, the most keys held, evictions and
//! overflows, and checks that the map never holds more keys than its bound, that the abusive
//! client gets exactly C + R*t and the answers its own `TokenBucket` would give, that every
//! well-behaved request is admitted where there is room (and refused only for room where there is
//! not), and that evictions happen without any clean-up call.
//!
//! **Part 3** measures, live, one limiter shared by 1, 2 and 4 threads: nanoseconds per check and
//! total throughput, for tollgate's `TokenBucket` and `ShardedBucket` admitting and denying, and a
//! `Mutex<(f64, Instant)>` token bucket as the baseline. These are quick numbers for orientation;
//! the criterion benches (`cargo bench --bench tollgate`, results in `benches/README.md`) are the
//! rigorous ones.
//!
//! Later algorithms join the tour by adding a [`Column`] to [`trace_columns`] and a [`Contender`] to
//! [`contenders`].

use std::hint::black_box;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tollgate::keyed::{KeyedError, KeyedLimiter};
use tollgate::leaky::{self, LeakyMeter, LeakyReceiver};
use tollgate::window::{FixedWindow, SlidingWindowCounter, SlidingWindowLog, SubWindowCounter};
use tollgate::{
    AcquireError, Admitted, Clock, Denied, Limiter, ManualClock, Nanos, Quota, ShardedBucket,
    TokenBucket,
};

fn main() -> ExitCode {
    let started = Instant::now();
    let verdict = held(part_one(), "a limiter broke its promise on the trace")
        .and_then(|()| held(part_two(), "the keyed gateway broke a promise"))
        .and_then(|()| part_three());
    match verdict {
        Ok(()) => {
            println!();
            println!("For rigorous numbers (criterion, beside governor):");
            println!(
                "    cargo bench --bench tollgate    (results and machine: benches/README.md)"
            );
            println!(
                "The same limits across machines, through Redis (needs a server; see the README):"
            );
            println!(
                "    cargo run --release --features redis --example redis    (two processes, one limit)"
            );
            println!("Tour finished in {:.1} s.", started.elapsed().as_secs_f64());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tour failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A deterministic part's checks as a verdict: `Err` naming `what` if one failed.
fn held(part: Result<bool, String>, what: &str) -> Result<(), String> {
    match part {
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("{what} (see FAILED above)")),
        Err(e) => Err(e),
    }
}

// ---------------------------------------------------------------------------------------------
// Part 1: a bursty trace, deterministic
// ---------------------------------------------------------------------------------------------

/// Length of the trace.
const TRACE_SECS: u64 = 20;
/// The stretch of time one chart row covers.
const SLICE: Duration = Duration::from_millis(500);
/// The longest bar drawn, in characters.
const MAX_BAR: u64 = 14;

/// A [`ShardedBucket`] serving simulated clients that take turns, one request each, each client
/// with its own home shard: a limiter of the tour's own, behind the crate's [`Limiter`] trait like
/// every other column.
///
/// `try_acquire_at` would take from the calling thread's home shard, and the replay runs on one
/// thread, so every request would start at the same shard. `try_acquire_n_from` names the home
/// instead: here the homes rotate, as they would with one client per core, and the chart stays
/// the same on every machine.
struct RotatingHomes<C: Clock> {
    limiter: ShardedBucket<C>,
    /// The home shard of the next request (taken modulo the shard count by the limiter).
    next_home: AtomicUsize,
}

impl<C: Clock> RotatingHomes<C> {
    /// The home of the next request.
    fn home(&self) -> usize {
        // Relaxed: a ticket; the replay runs on one thread.
        self.next_home.fetch_add(1, Ordering::Relaxed)
    }
}

impl<C: Clock> Limiter for RotatingHomes<C> {
    fn try_acquire_at(&self, now: Nanos) -> Result<Admitted, Denied> {
        match self.limiter.try_acquire_n_from(self.home(), 1, now) {
            Ok(admitted) => Ok(admitted),
            Err(AcquireError::Denied(denied)) => Err(denied),
            // Never: every capacity is at least one token. Were it ever, the plain form answers.
            Err(_) => self.limiter.try_acquire_at(now),
        }
    }

    fn try_acquire_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.limiter.try_acquire_n_from(self.home(), n, now)
    }

    fn peek_n_at(&self, n: u64, now: Nanos) -> Result<Admitted, AcquireError> {
        self.limiter.peek_n_at(n, now)
    }

    fn remaining_at(&self, now: Nanos) -> u64 {
        self.limiter.remaining_at(now)
    }

    fn now(&self) -> Nanos {
        self.limiter.clock().now()
    }

    fn quota(&self) -> Quota {
        self.limiter.quota()
    }
}

/// The most admissions a limiter promises over any span of time, with the formula it comes from.
struct Bound {
    /// The promise in words, with its constants filled in.
    formula: String,
    /// The largest number of admissions allowed between two instants `span` nanoseconds apart
    /// (both ends included).
    max_in_span: Box<dyn Fn(u64) -> u64>,
}

/// One column of the chart: a named limiter and the promise it is checked against.
struct Column {
    /// The column's heading in the chart: a few words.
    heading: String,
    /// The limiter and its configuration, for the checks below the chart.
    name: String,
    limiter: Box<dyn Limiter>,
    bound: Bound,
    /// For a limiter that may admit less than the first column's on the same trace: why (a few
    /// lines), printed below its checks with the difference.
    shortfall: Option<Vec<String>>,
}

/// Shards of the sharded column: enough for a fraction of a token to be stranded in each.
const TRACE_SHARDS: usize = 4;

/// The limiters the trace is replayed through, one chart column each.
fn trace_columns() -> Result<Vec<Column>, String> {
    let (rate, capacity) = (10, 20);
    let quota = Quota::per_second(rate)
        .and_then(|q| q.with_capacity(capacity))
        .map_err(|e| format!("bad quota in the tour: {e}"))?;
    let interval = u64::try_from(quota.interval().as_nanos()).unwrap_or(u64::MAX);
    // A manual clock reads zero: each limiter starts full at the start of the trace, and the
    // `_at` calls below supply every instant explicitly.
    let sharded = ShardedBucket::builder(quota)
        .shards(TRACE_SHARDS)
        .clock(ManualClock::new())
        .build()
        .map_err(|e| format!("bad shard count in the tour: {e}"))?;
    let shards = sharded.shards();
    Ok(vec![
        Column {
            heading: "token bucket".into(),
            name: format!("token bucket ({rate}/s, burst {capacity})"),
            limiter: Box::new(TokenBucket::with_clock(quota, ManualClock::new())),
            bound: Bound {
                formula: format!("C + R*t (C = {capacity}, R = {rate}/s)"),
                // C at once, then one more per whole (rounded-up) interval.
                max_in_span: Box::new(move |span| capacity + span / interval),
            },
            shortfall: None,
        },
        Column {
            heading: format!("sharded, {shards} shards"),
            name: format!("sharded bucket ({rate}/s, burst {capacity}, {shards} shards)"),
            limiter: Box::new(RotatingHomes {
                limiter: sharded,
                next_home: AtomicUsize::new(0),
            }),
            bound: Bound {
                formula: format!("C + R*t (C = {capacity}, R = {rate}/s)"),
                // Each shard promises its own C_i + R_i*t, rounded down; the parts sum to C and R,
                // so the whole promises C + R*t, rounded down.
                max_in_span: Box::new(move |span| {
                    let refilled = u128::from(span) * u128::from(rate) / 1_000_000_000;
                    capacity.saturating_add(u64::try_from(refilled).unwrap_or(u64::MAX))
                }),
            },
            shortfall: Some(vec![
                format!(
                    "each shard refills its own fraction of a token, so up to S - 1 = {} whole",
                    shards - 1
                ),
                "tokens can sit stranded in fractions at once; and a full shard stops refilling"
                    .into(),
                "while the others are below theirs, where one bucket would still refill (until a"
                    .into(),
                "request steals from it). The bounds are in the docs of `tollgate::sharded`."
                    .into(),
            ]),
        },
    ])
}

/// The window limiters' window: 2 s, so that their long-run rate (N per W) matches the token
/// bucket's 10 per second.
const WINDOW_NS: u64 = 2_000_000_000;
/// The window limiters' N: admissions per window.
const WINDOW_N: u64 = 20;
/// Sub-windows of the finer sliding counter: one per chart slice.
const SUB_WINDOWS: u64 = 4;

/// The promise of a limiter that counts each aligned window of [`WINDOW_NS`] at most
/// [`WINDOW_N`]: a span of `s` ns meets at most `s / W + 2` aligned windows.
fn per_aligned_window(what: &str) -> Bound {
    Bound {
        formula: format!("N per aligned window, {what} (N = {WINDOW_N}, W = 2 s)"),
        max_in_span: Box::new(|span| WINDOW_N * (span / WINDOW_NS + 2)),
    }
}

/// The window limiters, each with N = 20 per W = 2 s.
fn window_columns() -> Result<Vec<Column>, String> {
    let quota = Quota::per_period(WINDOW_N, Duration::from_nanos(WINDOW_NS))
        .map_err(|e| format!("bad window quota in the tour: {e}"))?;
    let bad = |e: tollgate::QuotaError| format!("bad window quota in the tour: {e}");
    Ok(vec![
        Column {
            heading: "fixed window".into(),
            name: format!("fixed window ({WINDOW_N} per 2 s)"),
            limiter: Box::new(FixedWindow::with_clock(quota, ManualClock::new()).map_err(bad)?),
            bound: per_aligned_window("so up to 2N across a boundary"),
            shortfall: None,
        },
        Column {
            heading: "sliding counter".into(),
            name: format!("sliding window counter ({WINDOW_N} per 2 s, two windows)"),
            limiter: Box::new(
                SlidingWindowCounter::with_clock(quota, ManualClock::new()).map_err(bad)?,
            ),
            bound: per_aligned_window("never above its estimate"),
            shortfall: None,
        },
        Column {
            heading: format!("{SUB_WINDOWS} sub-windows"),
            name: format!(
                "sliding window counter ({WINDOW_N} per 2 s, {SUB_WINDOWS} sub-windows of 500 ms)"
            ),
            limiter: Box::new(
                SubWindowCounter::with_clock(quota, SUB_WINDOWS, ManualClock::new())
                    .map_err(bad)?,
            ),
            bound: per_aligned_window("never above its estimate"),
            shortfall: None,
        },
        Column {
            heading: "sliding log".into(),
            name: format!("sliding window log ({WINDOW_N} per 2 s, exact)"),
            limiter: Box::new(
                SlidingWindowLog::with_clock(quota, ManualClock::new()).map_err(bad)?,
            ),
            bound: Bound {
                formula: format!("N in any window (t - W, t] (N = {WINDOW_N}, W = 2 s)"),
                // A span of s ns is covered by s / W + 1 windows of length W.
                max_in_span: Box::new(|span| WINDOW_N * (span / WINDOW_NS + 1)),
            },
            shortfall: None,
        },
    ])
}

/// A small deterministic generator (SplitMix64): the trace is the same on every run and machine.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`); the modulo bias is irrelevant here.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One slice of the trace: its request times and, on the first slice of a phase, a label.
struct Slice {
    start: u64,
    arrivals: Vec<u64>,
    label: &'static str,
}

/// The trace: 20 s of quiet traffic (about 4/s) broken by sharp bursts and a sustained overload.
fn trace() -> Vec<Slice> {
    let slice_ns = SLICE.as_nanos() as u64;
    let slices = TRACE_SECS * 1_000_000_000 / slice_ns;
    let mut rng = SplitMix64(0x7011_6A7E);
    let mut out = Vec::new();
    let mut previous = "";
    for i in 0..slices {
        let t_ms = i * slice_ns / 1_000_000;
        // (requests in this slice, arriving from how many ns after the slice start, spread over
        // how many ns, phase name)
        let (count, offset, spread, phase) = match t_ms {
            3_000 => (35, 0, 20_000_000, "sharp burst"),
            // The last 50 ms before the 8 s mark, then the first 50 ms after it: a boundary of
            // the window limiters' 2 s windows.
            7_500 => (
                18,
                450_000_000,
                50_000_000,
                "two bursts across the 8 s boundary",
            ),
            8_000 => (18, 0, 50_000_000, "two bursts across the 8 s boundary"),
            10_000..=15_999 => (
                12 + rng.below(4),
                0,
                slice_ns,
                "sustained overload (~2.7x R)",
            ),
            18_500 => (40, 0, 10_000_000, "sharp burst"),
            _ => (1 + rng.below(3), 0, slice_ns, "quiet"),
        };
        let start = i * slice_ns;
        let mut arrivals: Vec<u64> = (0..count)
            .map(|_| start + offset + rng.below(spread))
            .collect();
        arrivals.sort_unstable();
        let label = if phase == previous { "" } else { phase };
        previous = phase;
        out.push(Slice {
            start,
            arrivals,
            label,
        });
    }
    out
}

/// `n` marks of `mark`, one per `scale` requests, rounded up so that no request goes unseen.
fn bar(n: u64, scale: u64, mark: char) -> String {
    mark.to_string().repeat(n.div_ceil(scale) as usize)
}

/// Replays the trace through the token buckets, then the window limiters, printing a chart and the
/// checks for each; `Ok(false)` if a limiter broke its bound.
fn part_one() -> Result<bool, String> {
    let trace = trace();
    println!("tollgate tour, part 1: a bursty trace through the limiters (deterministic)");
    println!();
    println!(
        "{} s of synthetic traffic in {} ms slices, replayed with explicit timestamps (`_at`).",
        TRACE_SECS,
        SLICE.as_millis()
    );
    let buckets = chart("Token buckets", trace_columns()?, &trace);
    println!();
    let windows = chart("Window limiters", window_columns()?, &trace);
    println!();
    for line in WINDOW_NOTES {
        println!("{line}");
    }
    println!();
    let leaky = leaky_chart(&trace)?;
    println!();
    let changed = quota_changes(&trace)?;
    Ok(buckets && windows && leaky && changed)
}

/// The quotas of the runtime-change replay: from the start, then from 10 s and from 15 s (rate
/// per second, burst).
const CHANGES: [(u64, u64, u64); 3] = [(0, 10, 20), (10, 5, 10), (15, 20, 20)];

/// The trace through a token bucket, a sharded bucket and one key of a keyed limiter whose quota
/// an operator changes twice while traffic flows (`set_quota_at`): halved at the start of the
/// overload, then raised. Checks
/// the crate's rule after each change: from the change on, at most what the old quota had left
/// (capped at the new burst) plus the new rate's refill. `false` if either broke it.
fn quota_changes(trace: &[Slice]) -> Result<bool, String> {
    let quota = |(_, rate, burst): (u64, u64, u64)| {
        Quota::per_second(rate)
            .and_then(|q| q.with_capacity(burst))
            .map_err(|e| format!("bad quota in the tour: {e}"))
    };
    let bucket = TokenBucket::with_clock(quota(CHANGES[0])?, ManualClock::new());
    let sharded = RotatingHomes {
        limiter: ShardedBucket::builder(quota(CHANGES[0])?)
            .shards(TRACE_SHARDS)
            .clock(ManualClock::new())
            .build()
            .map_err(|e| format!("bad shard count in the tour: {e}"))?,
        next_home: AtomicUsize::new(0),
    };
    let keyed: tollgate::keyed::KeyedLimiter<&str, tollgate::keyed::TokenBucketKeys, _> =
        tollgate::keyed::KeyedLimiter::with_clock(quota(CHANGES[0])?, ManualClock::new());
    println!("Quotas changed at runtime: the same trace, an operator calling `set_quota_at` at 10 s and 15 s:");
    println!();
    let header = format!(
        "{:>10}  {:<18} {:>8}  {:<28}  {:<28}  {:<28}",
        "from", "quota", "offered", "token bucket", "sharded bucket", "keyed bucket, one key"
    );
    println!("{}", header.trim_end());
    let mut ok = true;
    let mut arrivals = trace
        .iter()
        .flat_map(|s| s.arrivals.iter().copied())
        .peekable();
    for (i, &change) in CHANGES.iter().enumerate() {
        let (from_s, rate, burst) = change;
        let from = from_s * 1_000_000_000;
        let until = CHANGES.get(i + 1).map_or(u64::MAX, |c| c.0 * 1_000_000_000);
        let at = Nanos::new(from);
        let (carried_b, carried_s, carried_k) = if i == 0 {
            (burst, burst, burst)
        } else {
            let left = (
                bucket.remaining_at(at),
                sharded.remaining_at(at),
                keyed.remaining_key_at(&"tour", at),
            );
            bucket
                .set_quota_at(quota(change)?, at)
                .map_err(|e| e.to_string())?;
            sharded.limiter.set_quota_at(quota(change)?, at);
            keyed
                .set_quota_at(quota(change)?, at)
                .map_err(|e| e.to_string())?;
            (left.0.min(burst), left.1.min(burst), left.2.min(burst))
        };
        let (mut offered, mut taken_b, mut taken_s, mut taken_k) = (0u64, 0u64, 0u64, 0u64);
        while let Some(&t) = arrivals.peek() {
            if t >= until {
                break;
            }
            arrivals.next();
            offered += 1;
            let refill = u128::from(t - from) * u128::from(rate) / 1_000_000_000;
            let allowed = |carried: u64| u128::from(carried) + refill;
            if bucket.try_acquire_at(Nanos::new(t)).is_ok() {
                taken_b += 1;
                ok &= u128::from(taken_b) <= allowed(carried_b);
            }
            if sharded.try_acquire_at(Nanos::new(t)).is_ok() {
                taken_s += 1;
                ok &= u128::from(taken_s) <= allowed(carried_s);
            }
            if keyed.check_key_at(&"tour", Nanos::new(t)).is_ok() {
                taken_k += 1;
                ok &= u128::from(taken_k) <= allowed(carried_k);
            }
        }
        // One key of a keyed bucket decides exactly as the token bucket does, changes included.
        ok &= (carried_k, taken_k) == (carried_b, taken_b);
        println!(
            "{:>8} s  {:<18} {:>8}  carried {:>3}, admitted {:>3}    carried {:>3}, admitted {:>3}    carried {:>3}, admitted {:>3}",
            from_s,
            format!("{rate}/s, burst {burst}"),
            offered,
            carried_b,
            taken_b,
            carried_s,
            taken_s,
            carried_k,
            taken_k
        );
    }
    println!();
    println!(
        "After each change a limiter starts with what the old quota had left, at most the new burst,"
    );
    println!("and refills at the new rate alone (crate docs, \"Changing a quota\").");
    println!("One key of the keyed bucket answers exactly as the token bucket does.");
    println!(
        "  from each change on, admissions <= carried + R*t ........ {}",
        verdict(ok)
    );
    Ok(ok)
}

/// The leaky meter's output beside the token bucket's: when the requests each admits actually
/// go (the bucket's at once; the meter's at the departure it scheduled). `false` if the meter
/// let two requests leave closer than its interval or queued more than its capacity.
fn leaky_chart(trace: &[Slice]) -> Result<bool, String> {
    let (rate, capacity) = (10u64, 20u64);
    let quota = Quota::per_second(rate)
        .and_then(|q| q.with_capacity(capacity))
        .map_err(|e| format!("bad quota in the tour: {e}"))?;
    let interval = u64::try_from(quota.interval().as_nanos()).unwrap_or(u64::MAX);
    let bucket = TokenBucket::with_clock(quota, ManualClock::new());
    let meter = LeakyMeter::with_clock(quota, ManualClock::new());
    // The queue's clock follows the replayed time: a send is never scheduled ahead of the queue's
    // clock (see "Readings ahead of the clock" in the crate docs), so it must read the present.
    let queue_clock = ManualClock::new();
    let (tx, mut queue) = leaky::queue_with_clock::<u64, _>(quota, queue_clock.clone())
        .map_err(|e| format!("bad queue quota in the tour: {e}"))?;
    let slice_ns = u64::try_from(SLICE.as_nanos()).unwrap_or(u64::MAX);

    let mut bucket_out = vec![0u64; trace.len()];
    let mut meter_out = vec![0u64; trace.len()];
    let mut queue_out = vec![0u64; trace.len()];
    let (mut departures, mut most_queued, mut refused) = (Vec::new(), 0u64, 0u64);
    // The queue's items leave when its consumer receives them; this consumer receives every item
    // the moment it is due (`try_recv_at` before each arrival), as a real-time one would.
    let (mut accepted, mut delivered, mut releases) = (0u64, Vec::new(), Vec::new());
    let mut receive_until = |now: u64, queue: &mut LeakyReceiver<u64, ManualClock>| {
        while let Ok(item) = queue.try_recv_at(Nanos::new(now)) {
            delivered.push(item);
        }
    };
    for slice in trace {
        for &t in &slice.arrivals {
            receive_until(t, &mut queue);
            queue_clock.set(Nanos::new(t));
            if let Ok(ticket) = tx.try_send_at(t, Nanos::new(t)) {
                accepted += 1;
                let leaves = ticket.release_at().as_u64();
                releases.push(leaves);
                if let Some(out) = queue_out.get_mut((leaves / slice_ns) as usize) {
                    *out += 1;
                }
            }
            let now = Nanos::new(t);
            if bucket.try_acquire_at(now).is_ok() {
                bucket_out[(t / slice_ns) as usize] += 1;
            }
            match meter.try_schedule_at(now) {
                Ok(scheduled) => {
                    let leaves = scheduled.depart_at().as_u64();
                    departures.push(leaves);
                    most_queued = most_queued.max(scheduled.queued());
                    if let Some(out) = meter_out.get_mut((leaves / slice_ns) as usize) {
                        *out += 1;
                    }
                }
                Err(_) => refused += 1,
            }
        }
    }
    receive_until(u64::MAX, &mut queue);
    let in_order = delivered.windows(2).all(|w| w[0] <= w[1]);
    let all_delivered = delivered.len() as u64 == accepted;
    let offered: Vec<u64> = trace.iter().map(|s| s.arrivals.len() as u64).collect();
    let scale = offered
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1)
        .div_ceil(MAX_BAR);
    let width = MAX_BAR as usize + 1;
    println!(
        "Leaky bucket ({rate}/s, room for {capacity}): when admitted requests go (deterministic):"
    );
    println!(
        "'#' = requests offered, '=' = requests going out in the slice; one mark per {scale}."
    );
    println!();
    println!(
        "{:>6}  {:<w$}{:<w$}{:<w$}leaky queue (releases)",
        "t (s)",
        "offered",
        "token bucket",
        "meter (departures)",
        w = width + 4
    );
    for (i, slice) in trace.iter().enumerate() {
        let row = format!(
            "{:>6.1}  {:>3} {:<width$}{:>3} {:<width$}{:>3} {:<width$}{:>3} {:<width$}{}",
            slice.start as f64 / 1e9,
            offered[i],
            bar(offered[i], scale, '#'),
            bucket_out[i],
            bar(bucket_out[i], scale, '='),
            meter_out[i],
            bar(meter_out[i], scale, '='),
            queue_out[i],
            bar(queue_out[i], scale, '='),
            if slice.label.is_empty() {
                String::new()
            } else {
                format!("<- {}", slice.label)
            }
        );
        println!("{}", row.trim_end());
    }
    departures.sort_unstable();
    let closest = departures.windows(2).map(|w| w[1] - w[0]).min();
    let spaced = closest.is_none_or(|gap| gap >= interval);
    let bounded = most_queued <= capacity;
    println!();
    let shown: u64 = meter_out.iter().sum();
    println!(
        "leaky meter: {} scheduled ({} of them leave after the trace ends), {refused} refused; the",
        departures.len(),
        departures.len() as u64 - shown
    );
    println!(
        "token bucket admits the same requests but lets a burst of up to {capacity} go at once;"
    );
    println!(
        "the meter spreads them out: closest departures {:.3} s apart (1/R = {:.3} s)  {}",
        closest.unwrap_or(0) as f64 / 1e9,
        interval as f64 / 1e9,
        verdict(spaced)
    );
    println!(
        "  longest virtual queue: {most_queued} (room for {capacity})  {}",
        verdict(bounded)
    );
    releases.sort_unstable();
    let queue_closest = releases.windows(2).map(|w| w[1] - w[0]).min();
    let queue_spaced = queue_closest.is_none_or(|gap| gap >= interval);
    println!(
        "leaky queue: {accepted} accepted, {} handed back Full (the meter keeps a place until its",
        offered.iter().sum::<u64>() - accepted
    );
    println!("  request's interval has passed, the queue frees it when the item is received);");
    println!(
        "  closest releases {:.3} s apart  {}; every accepted item delivered once, in order  {}",
        queue_closest.unwrap_or(0) as f64 / 1e9,
        verdict(queue_spaced),
        verdict(in_order && all_delivered)
    );
    Ok(spaced && bounded && queue_spaced && in_order && all_delivered)
}

/// What the window chart shows, printed below it.
const WINDOW_NOTES: [&str; 7] = [
    "The fixed window counts each aligned 2 s window on its own, so the two bursts on either side",
    "of the 8 s mark both fit: nearly 2N within about 100 ms, the boundary burst of the design notes.",
    "The log is exact: never more than N in any 2 s window. The sliding counters estimate the count",
    "from per-window totals, assuming the oldest window's requests were spread evenly: they avoid",
    "most of the burst, but can pass N in a real 2 s window by up to the oldest (sub-)window's",
    "count. Their 'most in any 2 s window' line above is that approximation, measured on this trace;",
    "more sub-windows shrink it (see the docs of `tollgate::window`).",
];

/// Prints one chart with its checks; `false` if a limiter broke its bound.
fn chart(title: &str, columns: Vec<Column>, trace: &[Slice]) -> bool {
    // admitted[column][slice], and every admission's instant per column for the checks.
    let mut admitted = vec![vec![0u64; trace.len()]; columns.len()];
    let mut instants: Vec<Vec<u64>> = vec![Vec::new(); columns.len()];
    for (s, slice) in trace.iter().enumerate() {
        for &t in &slice.arrivals {
            for (c, column) in columns.iter().enumerate() {
                if column.limiter.try_acquire_at(Nanos::new(t)).is_ok() {
                    admitted[c][s] += 1;
                    instants[c].push(t);
                }
            }
        }
    }

    let offered: Vec<u64> = trace.iter().map(|s| s.arrivals.len() as u64).collect();
    let most = offered.iter().copied().max().unwrap_or(1).max(1);
    let scale = most.div_ceil(MAX_BAR);
    // Bars as long as the longest, or as a heading needs: a cell is a count, a space, a bar and a
    // space, and holds its heading with a space to spare.
    let widest_heading = columns.iter().map(|c| c.heading.len()).max().unwrap_or(0);
    let bar_width = (most.div_ceil(scale) as usize).max(widest_heading.saturating_sub(4));
    let cell = bar_width + 5;

    println!("{title}:");
    println!(
        "'#' = requests offered, '=' = requests admitted; one mark per {scale} request{}, rounded up.",
        if scale == 1 { "" } else { "s" }
    );
    println!();
    let mut header = format!("{:>6}  {:<cell$}", "t (s)", "offered");
    for column in &columns {
        header.push_str(&format!("{:<cell$}", column.heading));
    }
    println!("{}", header.trim_end());
    for (s, slice) in trace.iter().enumerate() {
        let mut row = format!(
            "{:>6.1}  {:>3} {:<bar_width$} ",
            slice.start as f64 / 1e9,
            offered[s],
            bar(offered[s], scale, '#')
        );
        for counts in &admitted {
            row.push_str(&format!(
                "{:>3} {:<bar_width$} ",
                counts[s],
                bar(counts[s], scale, '=')
            ));
        }
        if !slice.label.is_empty() {
            row.push_str("<- ");
            row.push_str(slice.label);
        }
        println!("{}", row.trim_end());
    }

    let total_offered: u64 = offered.iter().sum();
    let run_ns = TRACE_SECS * 1_000_000_000;
    let mut all_held = true;
    println!();
    for (c, column) in columns.iter().enumerate() {
        let total: u64 = admitted[c].iter().sum();
        println!(
            "{}: offered {total_offered}, admitted {total} ({:.1} %), denied {}",
            column.name,
            100.0 * total as f64 / total_offered.max(1) as f64,
            total_offered - total
        );
        let whole_run = (column.bound.max_in_span)(run_ns);
        let run_ok = total <= whole_run;
        println!(
            "  check, whole run: admitted {total} <= {} over t = {TRACE_SECS} s = {whole_run}  {}",
            column.bound.formula,
            verdict(run_ok)
        );
        // Every window that starts and ends on an admission: the k-th to the m-th admission
        // (m - k + 1 of them) must fit the bound for the time between them. Tightest is reported.
        let times = &instants[c];
        let mut windows = 0u64;
        let mut tightest: Option<(i128, u64, u64)> = None;
        for k in 0..times.len() {
            for m in k..times.len() {
                let count = (m - k + 1) as u64;
                let allowed = (column.bound.max_in_span)(times[m] - times[k]);
                let slack = i128::from(allowed) - i128::from(count);
                windows += 1;
                match tightest {
                    Some((least, _, _)) if least <= slack => {}
                    _ => tightest = Some((slack, count, times[m] - times[k])),
                }
            }
        }
        let windows_ok = match tightest {
            Some((slack, _, _)) => slack >= 0,
            None => true,
        };
        // The most admissions in any window (t - W, t] of the window limiters' length.
        let most_in_window = (0..times.len())
            .map(|m| {
                let from = i128::from(times[m]) - i128::from(WINDOW_NS);
                times[..=m]
                    .iter()
                    .filter(|&&t| i128::from(t) > from)
                    .count()
            })
            .max()
            .unwrap_or(0);
        match tightest {
            Some((slack, count, span)) => println!(
                "  check, all {windows} windows between two admissions: tightest admits {count} in \
                 {:.3} s, slack {slack}  {}",
                span as f64 / 1e9,
                verdict(windows_ok)
            ),
            None => println!("  check, windows: no admissions to check"),
        }
        println!(
            "  most in any {} s window (t - {} s, t]: {most_in_window} (the window limiters' N is {WINDOW_N})",
            WINDOW_NS / 1_000_000_000,
            WINDOW_NS / 1_000_000_000,
        );
        if let (Some(why), Some(first)) = (&column.shortfall, admitted.first()) {
            let reference: u64 = first.iter().sum();
            println!(
                "  vs {}: {} admissions ({total} vs {reference}), the cost of sharding:",
                columns[0].heading,
                match total.cmp(&reference) {
                    std::cmp::Ordering::Less => format!("{} fewer", reference - total),
                    std::cmp::Ordering::Equal => "as many".to_string(),
                    std::cmp::Ordering::Greater => format!("{} more", total - reference),
                }
            );
            for line in why {
                println!("    {line}");
            }
        }
        all_held &= run_ok && windows_ok;
    }
    all_held
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "FAILED"
    }
}

// ---------------------------------------------------------------------------------------------
// Part 2: a gateway keyed by client, and a key spray, deterministic
// ---------------------------------------------------------------------------------------------

/// Well-behaved clients.
const CLIENTS: u64 = 1_000;
/// How often each well-behaved client sends: twice a second, a fifth of its quota.
const CLIENT_EVERY_NS: u64 = 500_000_000;
/// How often the abusive client sends: 1 000 times a second, a hundred times its quota.
const ABUSER_EVERY_NS: u64 = 1_000_000;
/// The length of each phase: normal traffic, then the same traffic during a key spray.
const PHASE_NS: u64 = 10_000_000_000;
/// Distinct keys the attacker invents during the second phase, one request each.
const SPRAYED: u64 = 1_000_000;
/// The simulation's step: one sprayed key per step in the second phase (10 µs, so 100 000 new
/// keys a second).
const STEP_NS: u64 = PHASE_NS / SPRAYED;
/// The two gateways' bounds on the keys held: one with room for this spray, one without.
const BOUNDS: [usize; 2] = [32_768, 4_096];
/// The phases, as the table names them.
const PHASES: [&str; 2] = ["0-10 s", "10-20 s, spray"];

/// Who sent a request.
#[derive(Clone, Copy)]
enum Class {
    WellBehaved,
    Abusive,
    Sprayed,
}

impl Class {
    const ALL: [Class; 3] = [Class::WellBehaved, Class::Abusive, Class::Sprayed];

    fn name(self) -> String {
        match self {
            Class::WellBehaved => format!("well-behaved ({CLIENTS})"),
            Class::Abusive => "abusive (1)".into(),
            Class::Sprayed => format!("sprayed keys ({SPRAYED})"),
        }
    }
}

/// A well-behaved client's address: 10.0.x.y.
fn client_ip(client: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, (client >> 8) as u8, client as u8))
}

/// The abusive client's address.
const ABUSER: IpAddr = IpAddr::V4(Ipv4Addr::new(203, 0, 113, 7));

/// The attacker's `i`-th invented address: 2001:db8::i, all in one /64.
fn sprayed_ip(i: u64) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from((0x2001_0db8_u128 << 96) | u128::from(i)))
}

/// What one class of requests got in one phase.
#[derive(Default, Clone, Copy)]
struct Tally {
    offered: u64,
    admitted: u64,
    /// Refused for the key's rate (`KeyedError::Denied`).
    denied: u64,
    /// Refused for room (`KeyedError::TooManyKeys`): a new key that found the map full.
    no_room: u64,
    /// Answers that differ from the ones the sender's own `TokenBucket` gives (none for the
    /// sprayed keys, which have no bucket of their own to compare with).
    unlike_own: u64,
}

/// What one phase did to the map.
#[derive(Default, Clone, Copy)]
struct MapStats {
    most_keys: usize,
    evictions: u64,
    overflowed: u64,
}

/// One gateway's run over both phases.
struct GatewayRun {
    bound: usize,
    /// `tallies[phase][class]`.
    tallies: [[Tally; 3]; 2],
    map: [MapStats; 2],
    /// The abusive client's last request.
    abuser_last_ns: u64,
    /// Keys forgotten by one `retain_recent_at` after the run, once every bucket is full again,
    /// and the keys left after it.
    forgotten_at_end: usize,
    left_at_end: usize,
}

impl GatewayRun {
    /// A class's figures over both phases.
    fn total(&self, class: Class) -> Tally {
        let c = class as usize;
        let [a, b] = [self.tallies[0][c], self.tallies[1][c]];
        Tally {
            offered: a.offered + b.offered,
            admitted: a.admitted + b.admitted,
            denied: a.denied + b.denied,
            no_room: a.no_room + b.no_room,
            unlike_own: a.unlike_own + b.unlike_own,
        }
    }
}

/// Runs both phases through one gateway keyed by client address, with at most `bound` keys, on
/// explicit timestamps; beside it, every client's own `TokenBucket` answers the same requests.
fn run_gateway(quota: Quota, bound: usize) -> GatewayRun {
    // The gateway's clock follows the trace: its evictions judge at the clock's reading at most.
    let clock = ManualClock::new();
    let gateway: KeyedLimiter<IpAddr, _, _> =
        KeyedLimiter::with_clock(quota, clock.clone()).with_max_keys(bound);
    let own_bucket = |_| TokenBucket::with_clock(quota, ManualClock::new());
    let clients: Vec<TokenBucket<ManualClock>> = (0..CLIENTS).map(own_bucket).collect();
    let abuser = own_bucket(0);
    let mut run = GatewayRun {
        bound,
        tallies: [[Tally::default(); 3]; 2],
        map: [MapStats::default(); 2],
        abuser_last_ns: 0,
        forgotten_at_end: 0,
        left_at_end: 0,
    };
    // One well-behaved client every CLIENT_EVERY_NS / CLIENTS, taking turns.
    let client_gap = CLIENT_EVERY_NS / CLIENTS;
    // The step at which the second phase, and the spray, start.
    let spray_from = PHASE_NS / STEP_NS;
    for step in 0..2 * spray_from {
        let t = step * STEP_NS;
        let now = Nanos::new(t);
        clock.set(now);
        let phase = usize::from(step >= spray_from);
        if step == spray_from {
            // The first phase's statistics end here; the second's are counted from here.
            run.map[0].evictions = gateway.evictions();
            run.map[0].overflowed = gateway.overflowed();
        }
        let mut record = |class: Class,
                          got: Result<Admitted, KeyedError>,
                          own: Option<&TokenBucket<ManualClock>>| {
            let tally = &mut run.tallies[phase][class as usize];
            tally.offered += 1;
            match got {
                Ok(_) => tally.admitted += 1,
                // (A request for one token never exceeds the capacity: were it refused as if it
                // did, the comparison with the sender's own bucket below would count it.)
                Err(KeyedError::Denied(_) | KeyedError::InsufficientCapacity(_)) => {
                    tally.denied += 1;
                }
                Err(KeyedError::TooManyKeys(_)) => tally.no_room += 1,
                // (KeyedError is non-exhaustive; a local limiter has no other refusal.)
                Err(e) => unreachable!("a refusal the tour does not know: {e}"),
            }
            if let Some(own) = own {
                let same = match (got, own.try_acquire_at(now)) {
                    (Ok(a), Ok(b)) => a == b,
                    (Err(KeyedError::Denied(a)), Err(b)) => a == b,
                    _ => false,
                };
                tally.unlike_own += u64::from(!same);
            }
        };
        if phase == 1 {
            let key = sprayed_ip(step - spray_from);
            record(Class::Sprayed, gateway.check_key_at(&key, now), None);
        }
        if t.is_multiple_of(ABUSER_EVERY_NS) {
            record(
                Class::Abusive,
                gateway.check_key_at(&ABUSER, now),
                Some(&abuser),
            );
            run.abuser_last_ns = t;
        }
        if t.is_multiple_of(client_gap) {
            let c = (t % CLIENT_EVERY_NS) / client_gap;
            record(
                Class::WellBehaved,
                gateway.check_key_at(&client_ip(c), now),
                Some(&clients[c as usize]),
            );
        }
        run.map[phase].most_keys = run.map[phase].most_keys.max(gateway.len());
    }
    run.map[1].evictions = gateway.evictions() - run.map[0].evictions;
    run.map[1].overflowed = gateway.overflowed() - run.map[0].overflowed;
    // A while after the last request every bucket is full again: one sweep forgets every key.
    clock.set(Nanos::new(3 * PHASE_NS));
    run.forgotten_at_end = gateway.retain_recent_at(Nanos::new(3 * PHASE_NS));
    run.left_at_end = gateway.len();
    run
}

/// Runs the gateway with both bounds, printing a table and the checks for each, then what they
/// show; `false` if a check failed.
fn part_two() -> Result<bool, String> {
    let (rate, capacity) = (10u64, 10u64);
    let quota = Quota::per_second(rate)
        .and_then(|q| q.with_capacity(capacity))
        .map_err(|e| format!("bad quota in the tour: {e}"))?;
    let interval = u64::try_from(quota.interval().as_nanos()).unwrap_or(u64::MAX);

    println!();
    println!("tollgate tour, part 2: a gateway keyed by client, and a key spray (deterministic)");
    println!();
    println!(
        "A KeyedLimiter<IpAddr> gives each client address its own token bucket ({rate}/s, burst {capacity}),"
    );
    println!(
        "replayed with explicit timestamps. 0-10 s: {CLIENTS} well-behaved clients (10.0.x.y) send 2"
    );
    println!(
        "requests a second each, one abusive client (203.0.113.7) {} a second. 10-20 s: the same,",
        1_000_000_000 / ABUSER_EVERY_NS
    );
    println!(
        "while an attacker sends {SPRAYED} requests, each from a new IPv6 address in 2001:db8::/64"
    );
    println!(
        "({} new keys a second). Two gateways take the same traffic, with different with_max_keys.",
        1_000_000_000 / STEP_NS
    );
    println!(
        "denied: KeyedError::Denied, over the key's rate; no room: KeyedError::TooManyKeys, a new"
    );
    println!("key that found every place held; keys (most): the most keys held at once (len()).");

    let mut all_held = true;
    let mut runs = Vec::new();
    for bound in BOUNDS {
        let run = run_gateway(quota, bound);
        println!();
        println!(
            "with_max_keys({bound}), {}:",
            if run.map[1].overflowed == 0 {
                "room for this spray"
            } else {
                "too few places for this spray"
            }
        );
        print_gateway_table(&run);
        all_held &= gateway_checks(&run, capacity, interval);
        runs.push(run);
    }
    if let [roomy, small] = &runs[..] {
        // Keys active (not yet full again) at once, on average: each sprayed key for one interval
        // after its request, each well-behaved client's for one interval of every CLIENT_EVERY_NS,
        // and the abusive client's always.
        let active = 1_000_000_000 / STEP_NS * interval / 1_000_000_000
            + CLIENTS * interval / CLIENT_EVERY_NS
            + 1;
        println!();
        for line in [
            "Forgetting is lossless: a key is forgotten only once its bucket is full again, the state a"
                .to_string(),
            format!(
                "new key starts in. In 0-10 s the well-behaved clients' keys were forgotten {} times",
                roomy.map[0].evictions
            ),
            "between their requests, and every answer was still the one their own bucket gives.".into(),
            "A keyed limit alone does not stop a spray: each new key gets a fresh bucket. The bound caps"
                .into(),
            format!(
                "what the spray costs in memory. Each sprayed key is full again {} ms after its request,",
                interval / 1_000_000
            ),
            format!(
                "and sweeps run after every max(256, len/2) new keys, so the map peaked at {}, about",
                roomy.map[1].most_keys
            ),
            format!(
                "twice the {active} keys active at once. With {} places, new keys found every place held",
                small.bound
            ),
            "by an active key and were refused (Overflow::Refuse, the default; Overflow::Shared gives them"
                .into(),
            "one shared bucket instead), well-behaved clients among them whose keys had been forgotten"
                .into(),
            "while idle. The abusive client's active key kept its exact state throughout.".into(),
        ] {
            println!("{line}");
        }
    }
    Ok(all_held)
}

/// The table of one gateway's run: per phase and class, and the map's figures per phase.
fn print_gateway_table(run: &GatewayRun) {
    println!(
        "{:<15} {:<23} {:>8} {:>9} {:>7} {:>8} {:>11} {:>10} {:>10}",
        "phase",
        "class",
        "offered",
        "admitted",
        "denied",
        "no room",
        "keys (most)",
        "evictions",
        "overflowed"
    );
    for (p, phase) in PHASES.iter().enumerate() {
        let mut first = true;
        for class in Class::ALL {
            let tally = run.tallies[p][class as usize];
            if tally.offered == 0 {
                continue;
            }
            let mut row = format!(
                "{:<15} {:<23} {:>8} {:>9} {:>7} {:>8}",
                if first { *phase } else { "" },
                class.name(),
                tally.offered,
                tally.admitted,
                tally.denied,
                tally.no_room,
            );
            if first {
                let map = run.map[p];
                row.push_str(&format!(
                    " {:>11} {:>10} {:>10}",
                    map.most_keys, map.evictions, map.overflowed
                ));
            }
            first = false;
            println!("{row}");
        }
    }
}

/// Checks one gateway's run, printing each check; `false` if one failed.
fn gateway_checks(run: &GatewayRun, capacity: u64, interval: u64) -> bool {
    let mut held = true;
    let mut check = |ok: bool, what: String| {
        println!("  check, {what}  {}", verdict(ok));
        held &= ok;
    };
    let most = run.map[0].most_keys.max(run.map[1].most_keys);
    check(
        most <= run.bound,
        format!(
            "keys held never above the bound: at most {most} <= {}",
            run.bound
        ),
    );
    let abusive = run.total(Class::Abusive);
    // C at once, then one more per whole interval up to its last request.
    let limit = capacity + run.abuser_last_ns / interval;
    check(
        abusive.admitted == limit && abusive.unlike_own == 0,
        format!(
            "abusive client held to exactly its limit: admitted {} = C + R*t = {limit} over t = {:.3} s,",
            abusive.admitted,
            run.abuser_last_ns as f64 / 1e9
        ) + "\n    every answer the one its own TokenBucket gives",
    );
    let clients = run.total(Class::WellBehaved);
    let sprayed = run.total(Class::Sprayed);
    let overflowed = run.map[0].overflowed + run.map[1].overflowed;
    if overflowed == 0 {
        check(
            clients.admitted == clients.offered && clients.unlike_own == 0,
            format!(
                "every well-behaved request admitted: {} of {}, every answer its own TokenBucket's",
                clients.admitted, clients.offered
            ),
        );
    } else {
        check(
            clients.denied == 0 && clients.admitted + clients.no_room == clients.offered,
            format!(
                "no well-behaved request denied for its rate; {} of {} found no room",
                clients.no_room, clients.offered
            ),
        );
    }
    check(
        overflowed == clients.no_room + abusive.no_room + sprayed.no_room,
        format!("overflowed() = requests with no room = {overflowed}"),
    );
    // Every sprayed key admitted was inserted, and the map never held more than the bound: all but
    // that many were removed, by the automatic sweeps (nothing else removes a key during the run).
    let evictions = run.map[0].evictions + run.map[1].evictions;
    let needed = sprayed.admitted.saturating_sub(run.bound as u64);
    check(
        evictions >= needed,
        format!(
            "evicted automatically, no clean-up call: {evictions} keys (the {} sprayed keys admitted",
            sprayed.admitted
        ) + &format!("\n    need at least {needed} to fit in {})", run.bound),
    );
    check(
        run.left_at_end == 0,
        format!(
            "retain_recent_at after the run, every bucket full again: {} forgotten, {} left",
            run.forgotten_at_end, run.left_at_end
        ),
    );
    held
}

// ---------------------------------------------------------------------------------------------
// Part 3: contention, measured live
// ---------------------------------------------------------------------------------------------

/// How long each cell of the table runs.
const CELL: Duration = Duration::from_millis(300);
/// Thread counts measured.
const THREADS: [usize; 3] = [1, 2, 4];
/// Checks between two looks at the stop flag.
const BATCH: u64 = 256;

/// A limiter checked from many threads at once on its own clock: any of tollgate's, through its
/// `Limiter` trait, or the mutex baseline below.
trait Check: Sync {
    /// One request, now: `true` if admitted.
    fn check(&self) -> bool;
}

impl<L: Limiter + Sync> Check for L {
    #[inline]
    fn check(&self) -> bool {
        // A sharded bucket starts each thread at its own home shard, assigned on its first call.
        self.try_acquire().is_ok()
    }
}

/// The baseline everyone writes first: a float token bucket behind a mutex.
struct MutexBucket {
    /// (tokens, last refill)
    state: Mutex<(f64, Instant)>,
    per_sec: f64,
    capacity: f64,
}

impl MutexBucket {
    fn new(per_sec: f64, capacity: f64) -> MutexBucket {
        MutexBucket {
            state: Mutex::new((capacity, Instant::now())),
            per_sec,
            capacity,
        }
    }
}

impl Check for MutexBucket {
    #[inline]
    fn check(&self) -> bool {
        // Read the clock before locking, to keep the critical section short (a reading older than
        // `last` counts as no time passed).
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (tokens, last) = *state;
        let elapsed = now.saturating_duration_since(last).as_secs_f64();
        let tokens = (tokens + elapsed * self.per_sec).min(self.capacity);
        let admit = tokens >= 1.0;
        *state = (if admit { tokens - 1.0 } else { tokens }, last.max(now));
        admit
    }
}

/// What one cell measured.
#[derive(Default)]
struct Measured {
    checks: u64,
    admitted: u64,
    elapsed: Duration,
}

/// A row group of the table: a named limiter and how to measure it with `threads` threads.
struct Contender {
    name: &'static str,
    run: Box<dyn Fn(usize) -> Measured>,
}

/// A contender whose limiter is built fresh, by `make`, for every cell. The hot loop is generic
/// over the limiter, so no dynamic dispatch is measured.
fn contender<L: Check + 'static>(name: &'static str, make: fn() -> L) -> Contender {
    Contender {
        name,
        run: Box::new(move |threads| measure(&make(), threads, CELL)),
    }
}

/// The limiters of the contention table.
fn contenders() -> Vec<Contender> {
    // Accept-heavy: 10^9 per second with a burst as large, far beyond what any thread count here can
    // take, so (nearly) every check is an admission and writes the word.
    fn accept() -> Quota {
        Quota::per_second(1_000_000_000)
            .and_then(|q| q.with_capacity(1_000_000_000))
            .expect("a valid quota")
    }
    // Reject-heavy: 256 per hour, starting empty, so every check is a denial and only reads. (256
    // tokens, not 1, so that a sharded bucket can give every shard a part: a quota with fewer
    // tokens than shards uses fewer shards.)
    fn reject() -> Quota {
        Quota::per_hour(256)
            .and_then(|q| q.with_initial(0))
            .expect("a valid quota")
    }
    vec![
        contender("tollgate TokenBucket, accept-heavy", || {
            TokenBucket::new(accept())
        }),
        contender("tollgate TokenBucket, reject-heavy", || {
            TokenBucket::new(reject())
        }),
        // The default shard count (the available parallelism, rounded up to a power of two).
        contender("tollgate ShardedBucket, accept-heavy", || {
            ShardedBucket::new(accept())
        }),
        contender("tollgate ShardedBucket, reject-heavy", || {
            ShardedBucket::new(reject())
        }),
        contender("Mutex<(f64, Instant)>, accept-heavy", || {
            MutexBucket::new(1e9, 1e9)
        }),
        contender("Mutex<(f64, Instant)>, reject-heavy", || {
            MutexBucket::new(1.0, 1.0)
        }),
    ]
}

/// Runs `threads` threads checking `limiter` in a tight loop for `run_for`.
fn measure<L: Check>(limiter: &L, threads: usize, run_for: Duration) -> Measured {
    let stop = AtomicBool::new(false);
    let start_line = Barrier::new(threads + 1);
    thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    start_line.wait();
                    let (mut checks, mut admitted) = (0u64, 0u64);
                    // Relaxed: the flag carries no data; a worker that sees it late only runs one
                    // more batch, which is counted, and the join below orders the counts.
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..BATCH {
                            admitted += u64::from(black_box(limiter.check()));
                        }
                        checks += BATCH;
                    }
                    (checks, admitted)
                })
            })
            .collect();
        start_line.wait();
        let started = Instant::now();
        thread::sleep(run_for);
        // Relaxed: see the load above.
        stop.store(true, Ordering::Relaxed);
        let mut m = Measured::default();
        for worker in workers {
            let (checks, admitted) = worker.join().expect("a worker panicked");
            m.checks += checks;
            m.admitted += admitted;
        }
        m.elapsed = started.elapsed();
        m
    })
}

/// The 1-minute load average, where the system reports one (Linux).
fn load_average() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Progress on stderr: one line rewritten in place on a terminal, a line per step otherwise.
struct Progress {
    terminal: bool,
}

impl Progress {
    fn show(&self, msg: &str) {
        let mut err = std::io::stderr().lock();
        let _ = if self.terminal {
            write!(err, "\r\x1b[2K{msg}")
        } else {
            writeln!(err, "{msg}")
        };
        let _ = err.flush();
    }

    fn done(&self) {
        if self.terminal {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

fn part_three() -> Result<(), String> {
    let cores = thread::available_parallelism().map_or(1, |n| n.get());
    let contenders = contenders();
    let cells = contenders.len() * THREADS.len();

    println!();
    println!("tollgate tour, part 3: one limiter shared by several threads (measured now)");
    println!();
    println!(
        "This machine: {cores} core{} available; {} ms per cell{}.",
        if cores == 1 { "" } else { "s" },
        CELL.as_millis(),
        if THREADS.iter().any(|&t| t > cores) {
            "; thread counts above the core count oversubscribe it"
        } else {
            ""
        }
    );
    let shards = tollgate::sharded::default_shards();
    println!(
        "ShardedBucket: {shards} shard{} here, the default (the available parallelism rounded up",
        if shards == 1 { "" } else { "s" }
    );
    println!("to a power of two); each thread has a home shard, assigned round-robin.");
    println!("ns/check is per thread (wall time x threads / checks); Mops/s counts all threads;");
    println!("'vs 1 thread' compares total throughput with the same limiter's 1-thread row.");
    if let Some(load) = load_average() {
        let busy = load >= 0.5 * cores as f64;
        println!(
            "Load average before measuring: {load:.2}{}",
            if busy {
                " (other work is running: expect noisy, lower numbers)"
            } else {
                ""
            }
        );
    }

    // Calibrate the process-wide clock before anything is timed (quanta does it once, on first use).
    let _ = tollgate::MonotonicClock::new().now();

    let progress = Progress {
        terminal: std::io::stderr().is_terminal(),
    };
    let mut rows = Vec::new();
    let mut step = 0;
    for contender in &contenders {
        for &threads in &THREADS {
            step += 1;
            progress.show(&format!(
                "measuring {step}/{cells}: {}, {threads} thread{} ...",
                contender.name,
                if threads == 1 { "" } else { "s" }
            ));
            rows.push((contender.name, threads, (contender.run)(threads)));
        }
    }
    progress.done();

    println!();
    println!(
        "{:<37} {:>7} {:>9} {:>12} {:>12} {:>9}",
        "limiter", "threads", "ns/check", "total Mops/s", "vs 1 thread", "admitted"
    );
    let mut previous = "";
    let mut single = 0.0;
    for (name, threads, m) in &rows {
        let checks = m.checks.max(1) as f64;
        let ns = m.elapsed.as_nanos() as f64 * *threads as f64 / checks;
        let mops = m.checks as f64 / m.elapsed.as_secs_f64() / 1e6;
        if *threads == 1 {
            single = mops;
        }
        let shown = if *name == previous { "" } else { name };
        previous = name;
        println!(
            "{shown:<37} {threads:>7} {ns:>9.1} {mops:>12.1} {:>11.2}x {:>8.1}%",
            mops / single,
            100.0 * m.admitted as f64 / checks
        );
    }
    println!();
    for line in [
        "What to look for: tollgate's denials only read, so on an idle machine its reject-heavy",
        "throughput grows with threads up to the core count. A TokenBucket admission, and every",
        "check of the mutex bucket, writes one shared cache line, so those threads take turns",
        "instead. A ShardedBucket admission writes only the thread's home shard, a cache line of",
        "its own, so its accept-heavy throughput also grows with threads, up to one per shard;",
        "its denials read every shard. Threads beyond the core count only add scheduling.",
    ] {
        println!("{line}");
    }
    Ok(())
}
