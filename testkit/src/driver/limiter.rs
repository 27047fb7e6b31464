//! The part of every direct driver that only differed in types: the calls any
//! [`tollgate::Limiter`] answers (`try_acquire_n`, `try_acquire`, `peek_n`, `remaining`, each
//! either reading the limiter's clock or given the reading), made on the limiter and on its
//! [`Model`], and compared.
//!
//! Algorithm-specific operations (the bucket's refunds, the meter's scheduling, the sharded
//! bucket's homes, keyed eviction) stay in their own drivers.

use tollgate::{AcquireError, Limiter, Nanos};

use crate::outcome::{observe, observe_one};
use crate::reference::bucket::RefBucket;
use crate::reference::counter::RefCounter;
use crate::reference::log::RefLog;
use crate::reference::meter::RefMeter;
use crate::Outcome;

/// A reference model of one direct limiter: what [`check`] asks of it.
///
/// # Examples
///
/// ```
/// use testkit::driver::limiter::Model;
/// use testkit::reference::log::RefLog;
/// let mut model = RefLog::new(2, 1_000);
/// assert!(Model::acquire(&mut model, 2, 0).is_admitted());
/// assert!(!Model::peek(&model, 1, 999).is_admitted());
/// assert_eq!(Model::remaining(&model, 1_000), 2);
/// ```
pub trait Model {
    /// Takes `n` at the reading `now_ns` if the limit allows (`n = 0` is a query).
    fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome;
    /// What [`Model::acquire`] would answer, taking nothing.
    fn peek(&self, n: u64, now_ns: u64) -> Outcome;
    /// Whole requests that would be admitted at `now_ns`.
    fn remaining(&self, now_ns: u64) -> u64;
}

impl Model for RefBucket {
    fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome {
        RefBucket::acquire(self, n, now_ns)
    }
    fn peek(&self, n: u64, now_ns: u64) -> Outcome {
        RefBucket::peek(self, n, now_ns)
    }
    fn remaining(&self, now_ns: u64) -> u64 {
        RefBucket::remaining(self, now_ns)
    }
}

impl Model for RefMeter {
    fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome {
        RefMeter::acquire(self, n, now_ns)
    }
    fn peek(&self, n: u64, now_ns: u64) -> Outcome {
        RefMeter::peek(self, n, now_ns)
    }
    fn remaining(&self, now_ns: u64) -> u64 {
        RefMeter::remaining(self, now_ns)
    }
}

impl Model for RefLog {
    fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome {
        RefLog::acquire(self, n, now_ns)
    }
    fn peek(&self, n: u64, now_ns: u64) -> Outcome {
        RefLog::peek(self, n, now_ns)
    }
    fn remaining(&self, now_ns: u64) -> u64 {
        RefLog::remaining(self, now_ns)
    }
}

impl Model for RefCounter {
    fn acquire(&mut self, n: u64, now_ns: u64) -> Outcome {
        RefCounter::acquire(self, now_ns, n, true)
    }
    fn peek(&self, n: u64, now_ns: u64) -> Outcome {
        // The model answers without recording when told not to write, but takes `&mut self`.
        RefCounter::acquire(&mut self.clone(), now_ns, n, false)
    }
    fn remaining(&self, now_ns: u64) -> u64 {
        RefCounter::remaining_at(self, now_ns)
    }
}

/// One call every [`Limiter`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `try_acquire_n(_at)`.
    Acquire(u64),
    /// `try_acquire(_at)`: one.
    AcquireOne,
    /// `peek_n(_at)`.
    Peek(u64),
    /// `remaining(_at)`.
    Remaining,
}

/// The limiter's answer to `call` at the reading `now` (with the `_at` form, or with the form that
/// reads the limiter's clock when `read_clock`; the caller keeps that clock at `now`): an
/// [`Outcome`], or for [`Call::Remaining`] an admission of that many with no reset
/// (`reset_after_ns: 0`).
///
/// ```
/// use testkit::driver::limiter::{call, Call};
/// use testkit::Outcome;
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// assert!(call(&bucket, Call::Acquire(2), 0, true).is_admitted());
/// assert_eq!(call(&bucket, Call::Remaining, 0, false), Outcome::Admitted { remaining: 0, reset_after_ns: 0 });
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub fn call<L: Limiter + ?Sized>(limiter: &L, call: Call, now: u64, read_clock: bool) -> Outcome {
    let at = Nanos::new(now);
    let result: Result<_, AcquireError> = match (call, read_clock) {
        (Call::Acquire(n), true) => limiter.try_acquire_n(n),
        (Call::Acquire(n), false) => limiter.try_acquire_n_at(n, at),
        (Call::AcquireOne, true) => return observe_one(limiter.try_acquire()),
        (Call::AcquireOne, false) => return observe_one(limiter.try_acquire_at(at)),
        (Call::Peek(n), true) => limiter.peek_n(n),
        (Call::Peek(n), false) => limiter.peek_n_at(n, at),
        (Call::Remaining, read) => {
            let remaining = if read {
                limiter.remaining()
            } else {
                limiter.remaining_at(at)
            };
            return Outcome::Admitted {
                remaining,
                reset_after_ns: 0,
            };
        }
    };
    observe(result)
}

/// What `model` answers to `call` at `now_ns`, as the crate can report it
/// ([`Outcome::representable`]); [`Call::Acquire`] and [`Call::AcquireOne`] update the model.
///
/// ```
/// use testkit::driver::limiter::{expect, Call};
/// use testkit::reference::log::RefLog;
/// let mut model = RefLog::new(1, 10);
/// assert!(expect(&mut model, Call::AcquireOne, 0).is_admitted());
/// assert!(!expect(&mut model, Call::Peek(1), 9).is_admitted());
/// ```
pub fn expect<M: Model + ?Sized>(model: &mut M, call: Call, now_ns: u64) -> Outcome {
    match call {
        Call::Acquire(n) => model.acquire(n, now_ns).representable(),
        Call::AcquireOne => model.acquire(1, now_ns).representable(),
        Call::Peek(n) => model.peek(n, now_ns).representable(),
        Call::Remaining => Outcome::Admitted {
            remaining: model.remaining(now_ns),
            reset_after_ns: 0,
        },
    }
}

/// Makes `call` on the limiter and on the model at the reading `now` and asserts identical
/// answers, naming `context()` on a difference. Returns the answer.
///
/// # Panics
///
/// When the answers differ.
///
/// ```
/// use testkit::driver::limiter::{check, Call};
/// use testkit::reference::log::RefLog;
/// use tollgate::{window::SlidingWindowLog, ManualClock, Quota};
/// let log = SlidingWindowLog::with_clock(Quota::per_second(2)?, ManualClock::new())?;
/// let mut model = RefLog::new(2, 1_000_000_000);
/// for c in [Call::Acquire(2), Call::AcquireOne, Call::Peek(0), Call::Remaining] {
///     check(&log, &mut model, c, 5, false, &|| "a doc example".to_string());
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check<L: Limiter + ?Sized, M: Model + ?Sized>(
    limiter: &L,
    model: &mut M,
    call: Call,
    now: u64,
    read_clock: bool,
    context: &dyn Fn() -> String,
) -> Outcome {
    let got = self::call(limiter, call, now, read_clock);
    let want = expect(model, call, now);
    assert_eq!(got, want, "{call:?} at {now}: {}", context());
    got
}
