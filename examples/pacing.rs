//! Pacing outbound calls to a third-party API: 10 a second, evenly spaced, never in a burst.
//!
//! ```sh
//! cargo run --features tokio --example pacing                # 20 calls in real time (about 2 s)
//! cargo run --features tokio --example pacing -- --self-test  # the same on tokio's paused time
//! cargo run --features tokio --example pacing -- --help
//! ```
//!
//! The whole recipe is the three lines marked below: a token bucket at 10 a second with a capacity
//! of 1 (a full bucket holds one call, so calls start 100 ms apart instead of 10 at once after a
//! pause), and `until_ready().await` before each call, which sleeps until the call may start.
//!
//! With `--self-test` the same calls run on tokio's paused time, with [`TokioClock`] as the
//! bucket's clock (it follows tokio's virtual time), so they take no wall time: it prints when
//! each call started and exits non-zero unless the first started at once and each next exactly
//! 100 ms after the one before.

use std::process::ExitCode;
use std::time::Duration;

use tokio::time::Instant;
use tollgate::wait::LimiterExt;
use tollgate::{Limiter, Quota, TokenBucket, TokioClock};

type Error = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "\
usage: pacing [--self-test]
       pacing --help

Makes 20 stand-in calls to a third-party API, paced at 10 a second with no burst (100 ms apart),
and prints when each started.

options:
  --self-test  make the calls on tokio's paused time (no wall time) and check the spacing is
               exactly 100 ms, the first at once
  --help       print this and exit";

const CALLS: u32 = 20;

/// The stand-in for the third-party call.
async fn call_api(_i: u32) {}

/// Makes `CALLS` calls, each when `api` allows it; returns when each started, from the first.
async fn make_calls(api: &impl Limiter) -> Result<Vec<Duration>, Error> {
    let start = Instant::now();
    let mut started = Vec::new();
    for i in 0..CALLS {
        api.until_ready().await?; // (3) wait for the call's turn
        let at = start.elapsed();
        println!("call {:2} at {:4} ms", i + 1, at.as_millis());
        started.push(at);
        call_api(i).await;
    }
    Ok(started)
}

async fn run(self_test: bool) -> Result<(), Error> {
    let quota = Quota::per_second(10)?.with_capacity(1)?; // (1) 10 a second, no burst
    if !self_test {
        let api = TokenBucket::new(quota); // (2) one bucket for every call to that API
        make_calls(&api).await?;
        return Ok(());
    }
    let api = TokenBucket::with_clock(quota, TokioClock::new());
    let started = make_calls(&api).await?;
    let expected: Vec<Duration> = (0..CALLS)
        .map(|i| Duration::from_millis(100 * u64::from(i)))
        .collect();
    if started != expected {
        return Err(format!("calls started at {started:?}, expected {expected:?}").into());
    }
    println!("self-test passed: {CALLS} calls, the first at once, then exactly 100 ms apart");
    Ok(())
}

fn main() -> ExitCode {
    let mut self_test = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "--self-test" => self_test = true,
            _ => {
                eprintln!("error: unknown argument {arg:?}\n\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    // Paused for the self-test: tokio's clock then jumps to the next timer instead of waiting.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(self_test)
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(run(self_test)),
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
