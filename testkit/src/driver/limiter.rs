//! The part of every direct driver that only differed in types: the calls any
//! [`tollgate::Limiter`] answers (`try_acquire_n`, `try_acquire`, `peek_n`, `remaining`, each
//! either reading the limiter's clock or given the reading), made on the limiter and on its
//! [`Model`], and compared.
//!
//! The operations are written once too: a [`Call`] names the call, over an [`Amount`] relative to
//! the limit while a run is generated (`Call<Amount>`) and over a number of tokens once resolved
//! against it (`Call<u64>`, the default); a [`Request`] is the operation every driver's own `Op`
//! embeds, the call and the form that makes it. The keyed drivers embed a `Call<Amount>` per key.
//!
//! Algorithm-specific operations (the bucket's refunds, the meter's scheduling, the sharded
//! bucket's homes, keyed eviction) stay in their own drivers.

use tollgate::{AcquireError, Limiter, Nanos};

use crate::consts::MAX_USABLE_NS;

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

/// A number of tokens (or places, or admissions), chosen relative to the limit `L`: the capacity
/// of a bucket, a meter or a sharded bucket, the count `N` of a window or a log.
///
/// One type for every driver. The log's and the counter's amounts differed from the bucket's in
/// names (`Count`, `Limit` for `Capacity`) and in lacking [`Amount::Fraction`], which they now get;
/// the counter's `Few(x)` was `x % 8`, whose requests above a small limit are now
/// [`Amount::AboveLimit`]'s and [`Amount::Raw`]'s to make. The keyed drivers' raw counts became
/// these too, against the capacity.
///
/// ```
/// use testkit::driver::limiter::Amount;
/// assert_eq!(Amount::Few(200).resolve(8), 8);
/// assert_eq!(Amount::AboveLimit.resolve(u64::MAX), u64::MAX);
/// assert_eq!(Amount::Fraction(u16::MAX / 2).resolve(10), 4);
/// assert_eq!(Amount::Fraction(0).resolve(10), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// 0: a query.
    Zero,
    /// 1.
    One,
    /// A few: `min(L, x)`.
    Few(u8),
    /// `L`.
    Limit,
    /// `L + 1` (saturating): never possible.
    AboveLimit,
    /// `max(1, L × x / 65535)`.
    Fraction(u16),
    /// Exactly this many.
    Raw(u64),
}

impl Amount {
    /// The number for a limit of `limit`.
    pub fn resolve(self, limit: u64) -> u64 {
        match self {
            Amount::Zero => 0,
            Amount::One => 1,
            Amount::Few(x) => limit.min(u64::from(x)),
            Amount::Limit => limit,
            Amount::AboveLimit => limit.saturating_add(1),
            Amount::Fraction(x) => {
                let part = u128::from(limit) * u128::from(x) / u128::from(u16::MAX);
                u64::try_from(part).unwrap_or(u64::MAX).max(1)
            }
            Amount::Raw(n) => n,
        }
    }
}

/// One call every [`Limiter`] answers, over `N`: an [`Amount`] while a run is generated, a number
/// of tokens (the default) once resolved against the limit.
///
/// ```
/// use testkit::driver::limiter::{Amount, Call};
/// let call: Call<Amount> = Call::Peek(Amount::Limit);
/// assert_eq!(call.resolve(5), Call::Peek(5));
/// assert_eq!(Call::<u64>::AcquireOne.n(), 1);
/// assert!(Call::<u64>::Acquire(0).takes() && !Call::<u64>::Peek(1).takes());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call<N = u64> {
    /// `try_acquire_n(_at)`.
    Acquire(N),
    /// `try_acquire(_at)`: one.
    AcquireOne,
    /// `peek_n(_at)`.
    Peek(N),
    /// `remaining(_at)`.
    Remaining,
}

impl Call<Amount> {
    /// The call with its amount resolved against `limit`.
    pub fn resolve(self, limit: u64) -> Call {
        match self {
            Call::Acquire(n) => Call::Acquire(n.resolve(limit)),
            Call::AcquireOne => Call::AcquireOne,
            Call::Peek(n) => Call::Peek(n.resolve(limit)),
            Call::Remaining => Call::Remaining,
        }
    }
}

impl Call {
    /// The tokens the call asks for or about: 1 for [`Call::AcquireOne`], 0 for
    /// [`Call::Remaining`].
    pub fn n(self) -> u64 {
        match self {
            Call::Acquire(n) | Call::Peek(n) => n,
            Call::AcquireOne => 1,
            Call::Remaining => 0,
        }
    }

    /// Whether the call takes what it is granted ([`Call::Acquire`], [`Call::AcquireOne`]).
    pub fn takes(self) -> bool {
        matches!(self, Call::Acquire(_) | Call::AcquireOne)
    }
}

/// The operation every direct driver's `Op` embeds for the calls any [`Limiter`] answers: the
/// call, its amount relative to the limit, and whether it reads the limiter's clock (`clock:
/// true`) or is given the reading (the `_at` form; the driver keeps the clock at the same
/// reading either way).
///
/// ```
/// use testkit::driver::limiter::{Amount, Call, Request};
/// let request = Request::at(Call::Acquire(Amount::Limit));
/// assert_eq!(request, Request { call: Call::Acquire(Amount::Limit), clock: false });
/// assert!(Request::via_clock(Call::Remaining).clock);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// What is asked.
    pub call: Call<Amount>,
    /// Read the clock instead of passing the reading.
    pub clock: bool,
}

impl Request {
    /// `call` in its `_at` form.
    pub fn at(call: Call<Amount>) -> Request {
        Request { call, clock: false }
    }

    /// `call` in the form that reads the limiter's clock.
    pub fn via_clock(call: Call<Amount>) -> Request {
        Request { call, clock: true }
    }

    /// Resolves the amount against `limit` and makes the call on the limiter and on the model at
    /// the reading `now` ([`check`]). Returns the resolved call and the answer.
    ///
    /// # Panics
    ///
    /// When the answers differ.
    ///
    /// ```
    /// use testkit::driver::limiter::{Amount, Call, Request};
    /// use testkit::reference::log::RefLog;
    /// use tollgate::{window::SlidingWindowLog, ManualClock, Quota};
    /// let log = SlidingWindowLog::with_clock(Quota::per_second(2)?, ManualClock::new())?;
    /// let mut model = RefLog::new(2, 1_000_000_000);
    /// let request = Request::at(Call::Acquire(Amount::AboveLimit));
    /// let (call, answer) = request.check(&log, &mut model, 2, 0, &|| "a doc example".to_string());
    /// assert_eq!(call, Call::Acquire(3));
    /// assert!(!answer.is_admitted());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check<L: Limiter + ?Sized, M: Model + ?Sized>(
        self,
        limiter: &L,
        model: &mut M,
        limit: u64,
        now: u64,
        context: &dyn Fn() -> String,
    ) -> (Call, Outcome) {
        let call = self.call.resolve(limit);
        (call, check(limiter, model, call, now, self.clock, context))
    }
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
/// assert_eq!(call(&bucket, Call::Remaining, 0, false), Outcome::Admitted { remaining: 0, reset_after_ns: 0, next_after_ns: None });
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
                next_after_ns: None,
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
            next_after_ns: None,
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

/// Checks that `retry_at`, a denial's for `n`, is the exact earliest reading at which `limiter`
/// admits `n`: a peek for `n` there succeeds, and a peek one nanosecond earlier does not. Peeks
/// only, so the limiter is left as it was. A `retry_at` past the readings the crate uses
/// ([`MAX_USABLE_NS`]; later readings are clamped to it) is not checked.
///
/// # Panics
///
/// When either peek answers otherwise, naming `context()`.
///
/// ```
/// use testkit::driver::limiter::check_retry_exact;
/// use tollgate::{ManualClock, Nanos, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, ManualClock::new());
/// bucket.try_acquire_n_at(2, Nanos::new(0))?;
/// let denied = bucket.try_acquire_at(Nanos::new(0)).unwrap_err();
/// check_retry_exact(&bucket, 1, denied.retry_at(), &|| "a doc example".to_string());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_retry_exact<L: Limiter + ?Sized>(
    limiter: &L,
    n: u64,
    retry_at: Nanos,
    context: &dyn Fn() -> String,
) {
    let at = retry_at.as_u64();
    if at > MAX_USABLE_NS {
        return;
    }
    let on = limiter.peek_n_at(n, retry_at);
    assert!(
        on.is_ok(),
        "{n} refused at retry_at {at}: {on:?}: {}",
        context()
    );
    if let Some(before) = at.checked_sub(1) {
        let early = limiter.peek_n_at(n, Nanos::new(before));
        assert!(
            early.is_err(),
            "{n} admitted before retry_at {at}: {early:?}: {}",
            context()
        );
    }
}
