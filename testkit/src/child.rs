//! Running one of a test binary's own tests in a child process: for a case that must own its
//! process (a seccomp filter, which cannot be removed) or that needs several processes (clients
//! sharing a limit through Redis).
//!
//! The child re-runs the current test binary (`current_exe()`) with only one hidden test selected
//! and an environment variable naming what it should do; without that variable, the hidden test
//! does nothing, so an ordinary run of the binary passes through it.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! let child = testkit::child::Child::start("my_child_case", &[("MY_CASE", "fast")]);
//! let done = child.finish(Duration::from_secs(60));
//! done.assert_passed("fast", "my-case-passed fast");
//! ```

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running child: this test binary, running one test.
#[derive(Debug)]
pub struct Child {
    child: std::process::Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
    started: Instant,
}

/// What a child did.
#[derive(Debug)]
pub struct Finished {
    /// Its exit status; `None` when it overran its time and was killed.
    pub status: Option<ExitStatus>,
    /// Everything it printed to standard output.
    pub stdout: String,
    /// Everything it printed to standard error.
    pub stderr: String,
    /// From its start to its end (or its killing).
    pub elapsed: Duration,
}

impl Child {
    /// Starts this test binary with only the test `test` selected (`--exact`, its output not
    /// captured, one test thread) and the variables `env` set.
    pub fn start(test: &str, env: &[(&str, &str)]) -> Child {
        let exe = std::env::current_exe().expect("the path of this test binary");
        let mut command = Command::new(&exe);
        command
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {}: {e}", exe.display()));
        let stdout = drain(child.stdout.take().expect("the child's stdout"));
        let stderr = drain(child.stderr.take().expect("the child's stderr"));
        Child {
            child,
            stdout,
            stderr,
            started: Instant::now(),
        }
    }

    /// Waits for the child, killing it once `timeout` has passed since it started.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the child") {
                break Some(status);
            }
            if self.started.elapsed() > timeout {
                // Our own child, by its handle.
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let elapsed = self.started.elapsed();
        Finished {
            status,
            stdout: self.stdout.join().expect("the child's stdout reader"),
            stderr: self.stderr.join().expect("the child's stderr reader"),
            elapsed,
        }
    }
}

impl Finished {
    /// Both outputs, for a failure message.
    pub fn shown(&self) -> String {
        format!(
            "--- child stdout ---\n{}--- child stderr ---\n{}",
            self.stdout, self.stderr
        )
    }

    /// Asserts that the child finished in time, succeeded, ran exactly one test, and printed the
    /// line `marker` (so that a child that ran nothing cannot pass). `what` names it in messages.
    pub fn assert_passed(&self, what: &str, marker: &str) {
        let shown = self.shown();
        let Some(status) = self.status else {
            panic!(
                "{what}: the child did not finish within {:?} and was killed\n{shown}",
                self.elapsed
            );
        };
        assert!(
            status.success(),
            "{what}: the child failed ({status})\n{shown}"
        );
        assert!(
            self.stdout.lines().any(|line| line == marker),
            "{what}: the child succeeded without printing `{marker}` (did it run?)\n{shown}"
        );
        assert!(
            self.stdout.contains("test result: ok. 1 passed"),
            "{what}: the child did not run exactly one test\n{shown}"
        );
    }
}

/// Reads `from` to its end on a thread of its own (so that a full pipe cannot stall the child).
fn drain(mut from: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = from.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}
