//! Pacing quality of `LeakyReceiver`'s real-time drain: how close `recv()` keeps to R per second.
//!
//! For each rate R (1 000 and 100 000 per second) a producer thread keeps the queue from running
//! empty (`send_timeout`, so it waits for room rather than spinning), and the consumer calls
//! `recv()` for a tenth of [`RUN`] unrecorded (the releases that fell due while the queue filled
//! come out at once), then for [`RUN`], stamping every release with `Instant::now()`. Reported, as a markdown
//! table:
//!
//! - the long-run rate error: `(releases − 1) / (last stamp − first stamp)` against R, in percent
//!   (target: within 0.1 % over 10 s);
//! - the distribution of `|interval − 1/R|` over consecutive releases: p50, p99, p99.9 and the
//!   largest, in microseconds;
//! - the share of intervals shorter than 1/R by more than 1 µs (releases never come early by
//!   design; a short interval follows a late one, as the deadline schedule catches up without
//!   drifting).
//!
//! ```sh
//! cargo bench --bench pacing                 # about 22 s: two rates, 10 s each after 1 s of warm-up
//! cargo bench --bench pacing -- --test       # smoke test: 0.2 s per rate
//! ```
//!
//! Sleep-based pacing depends on the scheduler: the figures are the machine's as much as the
//! queue's. `benches/README.md` records them with the machine.

use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tollgate::leaky;
use tollgate::Quota;

/// How long each rate runs.
const RUN: Duration = Duration::from_secs(10);

/// The rates measured, per second.
const RATES: [u64; 2] = [1_000, 100_000];

/// Room in the queue: enough that the producer is never the bottleneck.
const CAPACITY: u64 = 4_096;

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let run = if smoke {
        Duration::from_millis(200)
    } else {
        RUN
    };
    println!("| R (per s) | run (s) | releases | long-run rate error | |interval − 1/R| p50 (µs) | p99 (µs) | p99.9 (µs) | max (µs) |");
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let mut within = true;
    for rate in RATES {
        let row = measure(rate, run);
        within &= row.rate_error_pct.abs() <= 0.1;
        println!(
            "| {rate} | {:.1} | {} | {:+.4} % | {:.1} | {:.1} | {:.1} | {:.1} |",
            run.as_secs_f64(),
            row.releases,
            row.rate_error_pct,
            row.p50_us,
            row.p99_us,
            row.p999_us,
            row.max_us,
        );
    }
    println!();
    println!(
        "Target (long-run rate within 0.1 % over 10 s): {}",
        if smoke {
            "not judged in a smoke test"
        } else if within {
            "met"
        } else {
            "missed"
        }
    );
}

/// What one rate measured.
struct Row {
    releases: u64,
    rate_error_pct: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
}

fn measure(rate: u64, run: Duration) -> Row {
    let quota = Quota::per_second(rate)
        .and_then(|q| q.with_capacity(CAPACITY))
        .expect("a valid quota");
    let (tx, mut rx) = leaky::queue::<u64>(quota).expect("a valid queue");
    let producer = thread::spawn(move || {
        let mut next = 0u64;
        // Until the consumer closes the queue.
        while tx.send_timeout(next, Duration::from_millis(100)).is_ok() || !tx.is_closed() {
            next += 1;
        }
    });
    // Let the producer fill the queue, so no release waits on it; then receive, unrecorded, for a
    // tenth of the run: the releases that fell due while the queue filled come out at once, and
    // only after them does the consumer run on the schedule being measured.
    while rx.len() < CAPACITY / 2 {
        thread::yield_now();
    }
    let warm_up = Instant::now();
    while warm_up.elapsed() < run / 10 {
        if rx.recv().is_none() {
            break;
        }
    }
    let mut stamps =
        Vec::with_capacity(usize::try_from(rate * run.as_secs().max(1) * 2).unwrap_or(0));
    let start = Instant::now();
    while start.elapsed() < run {
        if rx.recv().is_none() {
            break;
        }
        stamps.push(Instant::now());
    }
    rx.close();
    let _ = rx.drain_now();
    producer.join().expect("the producer panicked");

    let period_ns = 1e9 / rate as f64;
    // 1 ns to 1000 s, 3 significant digits.
    let mut deviations =
        Histogram::<u64>::new_with_bounds(1, 1_000_000_000_000, 3).expect("a valid histogram");
    for pair in stamps.windows(2) {
        let interval = pair[1].duration_since(pair[0]).as_nanos() as f64;
        let deviation = (interval - period_ns).abs();
        deviations.saturating_record((deviation.round() as u64).max(1));
    }
    let releases = stamps.len() as u64;
    let span = match (stamps.first(), stamps.last()) {
        (Some(first), Some(last)) => last.duration_since(*first).as_secs_f64(),
        _ => 0.0,
    };
    let measured = if span > 0.0 {
        (releases.saturating_sub(1)) as f64 / span
    } else {
        0.0
    };
    let us = |ns: u64| ns as f64 / 1e3;
    Row {
        releases,
        rate_error_pct: (measured / rate as f64 - 1.0) * 100.0,
        p50_us: us(deviations.value_at_quantile(0.5)),
        p99_us: us(deviations.value_at_quantile(0.99)),
        p999_us: us(deviations.value_at_quantile(0.999)),
        max_us: us(deviations.max()),
    }
}
