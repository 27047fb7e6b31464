//! `ShardedBucket` on real threads: the limit `C + R × t` on the limiter's own clock with proof
//! that threads stole from shards other than their home; racing gathers that give back, on a
//! frozen clock, neither creating nor losing a token; and the saturation test, which measures the
//! shortfall under deliberately uneven load.
//!
//! The tests in this file run one at a time (a lock): each wants the machine's cores to itself, and
//! the saturation ratio is about the limiter, not about competing with another test.
//!
//! Run `cargo test --test sharded_threads -- --nocapture` to see the figures, the saturation ratio
//! among them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tollgate::{AcquireError, Clock, ManualClock, MonotonicClock, Nanos, Quota, ShardedBucket};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `C + floor(R × t)`, with `R = count / period` exactly and `t` in nanoseconds.
fn limit(quota: &Quota, t_ns: u64) -> u64 {
    let refill = u128::from(quota.count()) * u128::from(t_ns) / quota.period().as_nanos();
    quota.capacity() + u64::try_from(refill).expect("a test-sized refill")
}

/// The most tokens any one shard of `quota` split `shards` ways can supply over `t_ns` from full:
/// the largest part's capacity plus the largest part's count per period over `t` (the parts are
/// the quotient, plus one for the lowest shards).
fn largest_shard_supply(quota: &Quota, shards: u64, t_ns: u64) -> u64 {
    let capacity = quota.capacity().div_ceil(shards);
    let count = quota.count().div_ceil(shards);
    let refill = u128::from(count) * u128::from(t_ns) / quota.period().as_nanos();
    capacity + u64::try_from(refill).expect("a test-sized refill")
}

/// Four threads, one hammering and three taking batches of 2, 5 and 17 a millisecond apart, on 2
/// and on 4 shards with the default clock. Over the span from a reading before construction to
/// one after the last join, they are admitted at most `C + R × t`; and the hammering thread alone
/// is admitted more than any one shard could ever supply over that span, which it can only have
/// done by stealing from the others.
#[test]
fn real_threads_stay_within_the_limit_and_steal() {
    let _serial = one_at_a_time();
    // 200 000 per second, bursts of 1000: threads outrun the refill, so the limit is what binds.
    let quota = Quota::per_second(200_000)
        .unwrap()
        .with_capacity(1000)
        .unwrap();
    for shards in [2usize, 4] {
        let clock = MonotonicClock::new();
        let start = clock.now();
        let limiter = Arc::new(
            ShardedBucket::builder(quota)
                .shards(shards)
                .clock(clock)
                .build()
                .unwrap(),
        );
        assert_eq!(limiter.shards(), shards);
        let barrier = Arc::new(Barrier::new(4));
        let run_for = Duration::from_millis(300);
        let workers: Vec<_> = [0u64, 2, 5, 17]
            .into_iter()
            .map(|batch| {
                let limiter = Arc::clone(&limiter);
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    let deadline = limiter.clock().now().saturating_add(run_for);
                    let mut admitted = 0u64;
                    while limiter.clock().now() < deadline {
                        if batch == 0 {
                            admitted += u64::from(limiter.try_acquire().is_ok());
                        } else {
                            if limiter.try_acquire_n(batch).is_ok() {
                                admitted += batch;
                            }
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                    admitted
                })
            })
            .collect();
        let admitted: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
        let t = limiter.clock().now().as_u64() - start.as_u64();
        let total: u64 = admitted.iter().sum();
        let bound = limit(&quota, t);
        let one_shard = largest_shard_supply(&quota, shards as u64, t);
        println!(
            "{shards} shards, {t} ns: admitted {total} (per thread {admitted:?}) <= C + R*t = \
             {bound}; the hammering thread's {} > one shard's most, {one_shard}",
            admitted[0]
        );
        assert!(total <= bound, "admitted {total} > C + R*t = {bound}");
        assert!(
            admitted[0] > one_shard,
            "the hammering thread got {} of {total}, no more than its home shard could supply \
             ({one_shard}): no proof of stealing",
            admitted[0]
        );
    }
}

/// Runs `work(i)` once per round on each of `threads` scoped worker threads, with `before(round)`
/// on the calling thread ahead of each round (it answers whether to run one) and `after(round)`
/// once every worker has finished the round.
///
/// No barrier that a panicked thread could leave the others waiting on: the calling thread opens a
/// round by bumping `round` and waits for `done` to count every worker, and while it waits it
/// checks whether a worker has ended, which mid-round only a panic does; then it stops the crew and
/// raises that worker's panic. Workers wait for the next round the same way, watching `stop`, which
/// is also set if the calling thread itself panics (a failed assertion in `after`), so a failing
/// test always ends.
fn in_rounds(
    threads: usize,
    work: impl Fn(usize) + Sync,
    mut before: impl FnMut(u64) -> bool,
    mut after: impl FnMut(u64),
) {
    /// Sets the flag when dropped, on the way out of the calling thread's loop or out of its panic.
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            // Release: pairs with the workers' Acquire loads; nothing else is published with it.
            self.0.store(true, Ordering::Release);
        }
    }
    let round = AtomicU64::new(0);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let mut workers: Vec<_> = (0..threads)
            .map(|i| {
                let (round, done, stop, work) = (&round, &done, &stop, &work);
                scope.spawn(move || {
                    let mut seen = 0;
                    loop {
                        // Acquire: pairs with the Release that opened the round (or stopped the
                        // crew), so the work sees whatever `before` set up.
                        while round.load(Ordering::Acquire) == seen {
                            if stop.load(Ordering::Acquire) {
                                return;
                            }
                            std::thread::yield_now();
                        }
                        seen += 1;
                        work(i);
                        // Release: `after` reads what the work did once it sees the count.
                        done.fetch_add(1, Ordering::Release);
                    }
                })
            })
            .collect();
        let _stop = StopOnDrop(&stop);
        let mut opened = 0u64;
        while before(opened) {
            // Release: pairs with the workers' Acquire loads of `round`.
            round.fetch_add(1, Ordering::Release);
            opened += 1;
            let everyone = opened * threads as u64;
            // Acquire: pairs with each worker's Release count.
            while done.load(Ordering::Acquire) < everyone {
                if workers.iter().any(|w| w.is_finished()) {
                    // A worker ended mid-round: it panicked. Stop the rest and raise its panic.
                    stop.store(true, Ordering::Release);
                    for worker in workers.drain(..) {
                        if let Err(panic) = worker.join() {
                            std::panic::resume_unwind(panic);
                        }
                    }
                    panic!("a worker ended in round {opened} without panicking");
                }
                std::thread::yield_now();
            }
            after(opened - 1);
        }
    });
}

/// `count` tokens per second over four shards, on a manual clock that stands still unless moved.
fn four_shards_on_a_frozen_clock(count: u64) -> (ShardedBucket<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = ShardedBucket::builder(Quota::per_second(count).unwrap())
        .shards(4)
        .clock(clock.clone())
        .build()
        .unwrap();
    (limiter, clock)
}

/// Gathers racing on a frozen clock: four threads at once ask for more than any shard holds (5 and
/// 3 of 8 tokens over four shards of 2), so their gathers collide, fail and give back. In every
/// round, tokens admitted plus tokens left never exceed the 8 the limiter held: give-backs never
/// create a token. A give-back that finds its shard written by another caller since its take keeps
/// what it took there, so a round may end with fewer: at most `n - 1` per denied request (the
/// documented bound), which the test checks round by round. Every denial's figures come from one
/// read of the shards, so its `retry_after` is zero exactly when its `remaining` covers the request;
/// a denial that sees `n` tokens proves that a give-back happened (with the clock frozen and no
/// refunds, nothing else adds tokens), and the test runs rounds until it has seen some.
#[test]
fn racing_gathers_give_back_exactly_on_a_frozen_clock() {
    let _serial = one_at_a_time();
    let (limiter, clock) = four_shards_on_a_frozen_clock(8);
    let sizes = [5u64, 5, 3, 3];
    let admitted = AtomicU64::new(0);
    // Per round: the most the round's denials may keep, `n - 1` each.
    let may_keep = AtomicU64::new(0);
    let given_back = AtomicU64::new(0);
    let mut kept = 0u64;
    // Until three give-backs were seen (at least 200 rounds), for up to a minute: the threads of a
    // round overlap rarely (about one give-back in 5 000 rounds on an idle 2-core machine, fewer
    // under load), so a round bound alone gives up too soon.
    let started = std::time::Instant::now();
    let mut rounds = 0u64;
    in_rounds(
        sizes.len(),
        |i| {
            let n = sizes[i];
            for _ in 0..3 {
                match limiter.try_acquire_n(n) {
                    Ok(_) => {
                        admitted.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(AcquireError::Denied(denied)) => {
                        may_keep.fetch_add(n - 1, Ordering::Relaxed);
                        // One read of the shards: a wait exactly when they hold too few.
                        assert_eq!(
                            denied.retry_after() == Duration::ZERO,
                            denied.remaining() >= n,
                            "{n} denied: {denied:?}"
                        );
                        if denied.remaining() >= n {
                            given_back.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        },
        |round| {
            let more = round < 200
                || (given_back.load(Ordering::Relaxed) < 3
                    && started.elapsed() < Duration::from_secs(60));
            if more {
                // Far enough ahead that every shard is full again.
                clock.set(Nanos::new(round * 10_000_000_000));
                assert_eq!(limiter.remaining(), 8);
                admitted.store(0, Ordering::Relaxed);
                may_keep.store(0, Ordering::Relaxed);
            }
            more
        },
        |round| {
            let taken = admitted.load(Ordering::Relaxed);
            let left = limiter.remaining();
            assert!(
                taken + left <= 8,
                "round {round}: {taken} admitted and {left} left of 8: a give-back created tokens"
            );
            let lost = 8 - taken - left;
            let bound = may_keep.load(Ordering::Relaxed);
            assert!(
                lost <= bound,
                "round {round}: {lost} tokens kept, more than n - 1 per denial ({bound})"
            );
            kept += lost;
            rounds = round + 1;
        },
    );
    let seen = given_back.load(Ordering::Relaxed);
    println!(
        "{rounds} rounds, {seen} denials that found the tokens given back, {kept} tokens kept by \
         give-backs that found their shard written since"
    );
    assert!(
        seen > 0,
        "no give-back observed in {rounds} rounds: the test proved nothing"
    );
}

/// Refunds racing gathers on a frozen clock, the case where give-backs keep tokens: four threads
/// take 40, 30, 20 and 10 of 64 tokens over four shards of 16 and give each admission straight
/// back with `refund`, so with the clock frozen nothing but a give-back that found its shard
/// written since, or a refund that found every shard full where it looked (it answers how many
/// tokens it placed), can leave the limiter short. The documented bound is `n - 1` kept per denied
/// request plus what the refunds report unplaced (reached exactly by a loom model in `loom-tests/tests/sharded.rs`); each of 20 rounds of
/// 10 000 requests a thread (the clock moved on between rounds, so every round starts full) checks
/// it. With the clock frozen nothing refills what was kept, so kept tokens add up within a round:
/// up to 26 of 64 in a release build and 42 in a debug build were seen on the 2-core machine,
/// which is why the docs state the bound per denied request and say when it adds up.
#[test]
fn refunds_racing_gathers_on_a_frozen_clock_keep_at_most_n_minus_1_per_denial() {
    let _serial = one_at_a_time();
    let (limiter, clock) = four_shards_on_a_frozen_clock(64);
    const ROUNDS: u64 = 20;
    const ATTEMPTS: u64 = 10_000;
    let sizes = [40u64, 30, 20, 10];
    let may_keep = AtomicU64::new(0);
    let (mut kept, mut short_rounds, mut worst) = (0u64, 0u64, 0u64);
    in_rounds(
        sizes.len(),
        |i| {
            let n = sizes[i];
            for _ in 0..ATTEMPTS {
                match limiter.try_acquire_n(n) {
                    Ok(_) => {
                        // What a refund could not place (it says so) is kept too.
                        let back = limiter.refund(n);
                        may_keep.fetch_add(n - back, Ordering::Relaxed);
                    }
                    Err(AcquireError::Denied(_)) => {
                        may_keep.fetch_add(n - 1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        },
        |round| {
            if round < ROUNDS {
                clock.set(Nanos::new(round * 10_000_000_000));
                assert_eq!(limiter.remaining(), 64);
                may_keep.store(0, Ordering::Relaxed);
            }
            round < ROUNDS
        },
        |round| {
            let lost = 64 - limiter.remaining();
            let bound = may_keep.load(Ordering::Relaxed);
            assert!(
                lost <= bound,
                "round {round}: {lost} of 64 tokens kept, more than n - 1 per denial plus what refunds reported unplaced ({bound})"
            );
            kept += lost;
            short_rounds += u64::from(lost > 0);
            worst = worst.max(lost);
        },
    );
    println!(
        "{ROUNDS} rounds of {ATTEMPTS} attempts a thread: {short_rounds} ended short, {kept} tokens kept in all, at most {worst} of 64 \
         in one round"
    );
}

/// The saturation test: four threads with a 1:1:4:16 skew in request size and very different
/// pacing (one hammers single tokens, one takes single tokens and naps every 64 requests, one
/// takes 4 at a time with a short spin between, one takes 16 at a time and naps between), for
/// about a second on the default clock and four shards. Reports `admitted / (C + R × t)`, with `t`
/// from a reading before construction to one after the last join; it must stay between 0.95 and 1.
///
/// A measurement of speed under contention, so it runs in an optimized build only: in a debug
/// build the threads' slow paths take long enough that a descheduled thread's full shard idles
/// for a measurable share of the second (0.948 seen once on the 2-core CI machine). `cargo test`
/// skips it there; `scripts/test.sh` runs it with `cargo test --release --test sharded_threads`.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "timing-sensitive: run in release (scripts/test.sh does)"
)]
fn saturation_under_uneven_load_admits_at_least_95_percent_of_the_limit() {
    let _serial = one_at_a_time();
    // R = 200 000 per second: far below what one thread can request, so the threads always
    // saturate the limiter and the ratio measures the limiter, not the machine. C = 1000 lets the
    // limiter ride out a 5 ms scheduling gap of every thread at once without losing refill.
    let quota = Quota::per_second(200_000)
        .unwrap()
        .with_capacity(1000)
        .unwrap();
    let clock = MonotonicClock::new();
    let start = clock.now();
    let limiter = Arc::new(
        ShardedBucket::builder(quota)
            .shards(4)
            .clock(clock)
            .build()
            .unwrap(),
    );
    let barrier = Arc::new(Barrier::new(4));
    let run_for = Duration::from_secs(1);
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let limiter = Arc::clone(&limiter);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let batch = [1u64, 1, 4, 16][i];
                barrier.wait();
                let deadline = limiter.clock().now().saturating_add(run_for);
                let (mut admitted, mut requests) = (0u64, 0u64);
                while limiter.clock().now() < deadline {
                    requests += 1;
                    if limiter.try_acquire_n(batch).is_ok() {
                        admitted += batch;
                    }
                    match i {
                        1 if requests % 64 == 0 => std::thread::sleep(Duration::from_micros(500)),
                        2 => {
                            for _ in 0..64 {
                                std::hint::spin_loop();
                            }
                        }
                        3 => std::thread::sleep(Duration::from_micros(200)),
                        _ => {}
                    }
                }
                (admitted, requests)
            })
        })
        .collect();
    let per_thread: Vec<(u64, u64)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let t = limiter.clock().now().as_u64() - start.as_u64();
    let admitted: u64 = per_thread.iter().map(|(a, _)| a).sum();
    let bound = limit(&quota, t);
    let ratio = admitted as f64 / bound as f64;
    println!(
        "saturation: admitted {admitted} of C + R*t = {bound} over {:.3} s: ratio {ratio:.4} \
         (admitted, requests) per thread: {per_thread:?}",
        t as f64 / 1e9
    );
    assert!(admitted <= bound, "admitted {admitted} > C + R*t = {bound}");
    assert!(ratio >= 0.95, "admitted only {ratio:.4} of C + R*t");
}
