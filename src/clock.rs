//! Time sources: the [`Clock`] trait, the [`Nanos`] it returns, and three clocks (four with the
//! `tokio` feature).
//!
//! | clock | cost of a reading | staleness | use it for |
//! | --- | --- | --- | --- |
//! | [`MonotonicClock`] | one TSC read and a multiply (measured: `benches/README.md`) | none | the default |
//! | [`CoarseClock`] | one atomic load | up to its upkeep interval (default 1 ms) behind | the hottest paths, where a millisecond of lag is fine |
//! | [`ManualClock`] | one atomic load | whatever you set | tests, simulations, replaying traces |
//! | `TokioClock` (feature `tokio`) | a `std::time::Instant` read (and, in a runtime with paused time enabled, a look at the runtime's clock) | none | tests on tokio's paused time: the limiter moves with tokio's timers |
//!
//! Limiters never read a clock inside their decision: they read it once per call and hand the
//! reading to a pure function. Every limiter also has `*_at(now)` methods that take a reading you
//! already hold, so a server that stamps each request pays for no second read.
//!
//! # Clocks that step backwards
//!
//! A reading earlier than one a limiter has already applied never creates capacity: the limiter
//! judges the request as of the earlier reading, when it had at most the tokens it has now. The
//! request may be refused that would have been admitted a moment later; nothing is ever admitted
//! that the limit forbids. The same holds when two threads' readings reach the limiter out of order.
//!
//! A token bucket, sharded bucket or leaky meter never starts a refill (a departure) before its
//! construction reading, so a clock that steps back to before it cannot stretch the first window.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use tollgate::{Clock, ManualClock, Nanos, Quota, TokenBucket};
//!
//! let clock = ManualClock::new();
//! let bucket = TokenBucket::with_clock(Quota::per_second(1)?, clock.clone());
//! assert!(bucket.try_acquire().is_ok());
//! clock.set(Nanos::new(0)); // a step back changes nothing
//! assert!(bucket.try_acquire().is_err());
//! clock.advance(Duration::from_secs(1));
//! assert!(bucket.try_acquire_at(clock.now()).is_ok());
//! # Ok::<(), tollgate::QuotaError>(())
//! ```

use std::fmt;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::sync::{Arc, AtomicU64, Ordering};

/// A point in time, in whole nanoseconds since a clock's epoch.
///
/// Every [`Clock`] counts from its own epoch; the epoch of [`MonotonicClock`] and [`CoarseClock`] is
/// the moment the process first used either of them, so their readings can be compared with each
/// other. Limiters treat any reading beyond [`Nanos::MAX_USABLE`] (about 146 years after the epoch) as
/// that value: time stands still there, so a limiter stops refilling but never over-admits.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::Nanos;
///
/// let t = Nanos::new(1_500_000_000);
/// assert_eq!(t.as_duration(), Duration::from_millis(1500));
/// assert_eq!(Nanos::from(Duration::from_secs(2)).as_u64(), 2_000_000_000);
/// assert_eq!(t.saturating_add(Duration::from_millis(500)), Nanos::new(2_000_000_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(u64);

impl Nanos {
    /// The epoch itself.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Nanos::ZERO.as_u64(), 0);
    /// ```
    pub const ZERO: Nanos = Nanos(0);

    /// The latest reading a limiter distinguishes: 2^62 ns, about 146 years after the epoch.
    ///
    /// Later readings are clamped to it. The bound keeps every sum a limiter forms (a reading plus a
    /// burst window plus a request's cost) inside a `u64`, so no arithmetic can wrap.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Nanos::MAX_USABLE.as_u64(), 1 << 62);
    /// ```
    pub const MAX_USABLE: Nanos = Nanos(1 << 62);

    /// A reading of `nanos` nanoseconds since the epoch.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Nanos::new(7).as_u64(), 7);
    /// ```
    #[inline]
    pub const fn new(nanos: u64) -> Nanos {
        Nanos(nanos)
    }

    /// The number of nanoseconds since the epoch.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::Nanos::new(42).as_u64(), 42);
    /// ```
    #[inline]
    pub const fn as_u64(self) -> u64 {
        self.0
    }

    /// This reading as a `Duration` since the epoch.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// assert_eq!(tollgate::Nanos::new(1_000).as_duration(), Duration::from_micros(1));
    /// ```
    #[inline]
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// This reading moved forward by `d`, saturating at `u64::MAX` nanoseconds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Nanos;
    /// assert_eq!(Nanos::new(1).saturating_add(Duration::from_nanos(2)), Nanos::new(3));
    /// assert_eq!(Nanos::new(u64::MAX).saturating_add(Duration::from_secs(1)).as_u64(), u64::MAX);
    /// ```
    pub fn saturating_add(self, d: Duration) -> Nanos {
        Nanos(self.0.saturating_add(duration_to_nanos(d)))
    }

    /// This reading clamped to [`Nanos::MAX_USABLE`]: what every limiter actually uses.
    #[inline]
    pub(crate) fn clamped(self) -> u64 {
        self.0.min(Nanos::MAX_USABLE.0)
    }
}

impl From<u64> for Nanos {
    fn from(nanos: u64) -> Nanos {
        Nanos(nanos)
    }
}

/// Saturates at `u64::MAX` nanoseconds (about 584 years).
impl From<Duration> for Nanos {
    fn from(d: Duration) -> Nanos {
        Nanos(duration_to_nanos(d))
    }
}

impl From<Nanos> for Duration {
    fn from(n: Nanos) -> Duration {
        n.as_duration()
    }
}

impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_duration())
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX`.
#[inline]
pub(crate) fn duration_to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A source of time for limiters.
///
/// Implement it to drive a limiter from your own time source (a simulation, a frame counter, a
/// timestamp your server already took). A reading may go backwards; limiters stay correct (see the
/// [module docs](self)).
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, Nanos, Quota, TokenBucket};
///
/// /// A clock that always reads the same instant.
/// struct Frozen(Nanos);
///
/// impl Clock for Frozen {
///     fn now(&self) -> Nanos {
///         self.0
///     }
/// }
///
/// let bucket = TokenBucket::with_clock(Quota::per_second(2)?, Frozen(Nanos::new(5)));
/// assert!(bucket.try_acquire().is_ok());
/// assert!(bucket.try_acquire().is_ok());
/// assert!(bucket.try_acquire().is_err()); // time never moves, so nothing refills
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
pub trait Clock: Send + Sync {
    /// The current reading, in nanoseconds since this clock's epoch.
    fn now(&self) -> Nanos;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for std::sync::Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}

/// The process-wide quanta clock and the raw reading that is everyone's epoch.
///
/// A new `quanta::Clock` calibrates its TSC scaling (close to a second on some machines), so the crate
/// makes exactly one, on first use.
struct QuantaEpoch {
    clock: quanta::Clock,
    epoch_raw: u64,
    epoch: quanta::Instant,
    /// Nanoseconds per 2^64 raw ticks, as quanta scales them, when quanta's raw reading is the
    /// x86-64 TSC (see [`tsc`]) and the TSC runs faster than 1 GHz; 0 otherwise, and then every
    /// reading goes through quanta. A reading is then the high half of the 128-bit product of
    /// the ticks since the epoch and this scale: one `mul`, no shift.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    tsc_scale: u64,
}

/// The span [`QuantaEpoch::tsc_scale`] is measured over: quanta's nanoseconds for 2^48 ticks
/// (about a day at 3 GHz), moved up 16 bits. The scale so carries 11-12 significant digits
/// (quanta's own conversion of the same ticks, rounded), and it fits a u64 when a tick is under
/// 1 ns.
const TSC_SPAN: u32 = 48;

fn shared() -> &'static QuantaEpoch {
    static SHARED: OnceLock<QuantaEpoch> = OnceLock::new();
    SHARED.get_or_init(|| {
        let clock = quanta::Clock::new();
        let epoch_raw = clock.raw();
        let epoch = clock.scaled(epoch_raw);
        // quanta's `delta_as_nanos` is (delta × its factor) >> its shift: linear in the delta, so
        // its value for 2^TSC_SPAN ticks, moved up to 2^64, is the scale. A TSC at 1 GHz or slower
        // (a scale of 2^64 or more) and a zero scale keep quanta's path. A span under 2^TSC_SPAN
        // also says that quanta reads its counter (its OS-clock and mock readings are already
        // nanoseconds, whose span is exactly 2^TSC_SPAN), so `is_quantas_raw` executes `rdtsc`
        // only in a process where quanta executes it for every reading.
        let span = clock.delta_as_nanos(0, 1 << TSC_SPAN);
        let tsc_scale = if span > 0 && span < 1 << TSC_SPAN && tsc::is_quantas_raw(&clock) {
            span << (64 - TSC_SPAN)
        } else {
            0
        };
        QuantaEpoch {
            clock,
            epoch_raw,
            epoch,
            tsc_scale,
        }
    })
}

/// The x86-64 time-stamp counter, read directly where quanta reads it too.
///
/// quanta's `Clock::raw` matches its clock type and calls out of line to `rdtsc`, and
/// `delta_as_nanos` matches the type again: 33 of the 70 instructions of a direct bucket's check
/// (callgrind, `benches/README.md`, thirteenth session). [`MonotonicClock::now`] instead executes
/// `rdtsc` inline and scales the delta with [`QuantaEpoch::tsc_scale`], one multiply, when
/// [`is_quantas_raw`](tsc::is_quantas_raw) found at start-up that quanta's raw reading *is* the
/// TSC (quanta chose the counter because the processor's TSC is invariant). Elsewhere (another
/// architecture, no invariant TSC, quanta falling back to the OS clock, a TSC at 1 GHz or slower)
/// every reading goes through quanta as before. The readings of both paths are the same ticks
/// scaled by the same factor, to within quanta's own rounding.
///
/// # Safety
///
/// The module's one `unsafe` block calls `core::arch::x86_64::_rdtsc`, which is `unsafe` only
/// because it is a processor intrinsic: it reads a register and touches no memory. The
/// instruction exists on every x86-64 processor; it faults only where the OS disabled it for the
/// process (Linux's `prctl(PR_SET_TSC, PR_TSC_SIGSEGV)`), and it runs only once quanta's
/// calibration has shown that quanta reads the counter, executing the same instruction for every
/// reading: where this block would fault, quanta already has.
mod tsc {
    /// The TSC now.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    #[allow(unsafe_code)]
    pub(super) fn read() -> u64 {
        // SAFETY: `rdtsc` reads the time-stamp counter into registers; no memory is read or
        // written, every x86-64 processor has the instruction, and it runs only where quanta's
        // readings execute it too (the module's Safety section).
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    /// Whether `clock.raw()` reads the TSC: four readings of quanta's, each between two of the
    /// TSC's own. A clock in nanoseconds (quanta's fallback, `clock_gettime`) cannot fall inside
    /// the few ticks between two TSC reads four times over.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn is_quantas_raw(clock: &quanta::Clock) -> bool {
        (0..4).all(|_| {
            let before = read();
            let raw = clock.raw();
            let after = read();
            before <= raw && raw <= after
        })
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn is_quantas_raw(_clock: &quanta::Clock) -> bool {
        false
    }
}

/// The default clock: a calibrated TSC read through one process-wide `quanta::Clock`.
///
/// Monotonic, nanosecond resolution, one TSC read and a multiply a reading (its measured cost is
/// in `benches/README.md`). All instances share one epoch (the first use of the clock in this
/// process) and are cheap to create and copy.
///
/// quanta calibrates the TSC against the OS clock once per process and falls back to the OS clock
/// where the TSC is not invariant. On x86-64, when quanta reads the TSC, a reading executes `rdtsc`
/// inline and scales it with quanta's calibration (about 12 instructions, against quanta's 33 for
/// the same reading through `Clock::raw` and `delta_as_nanos`, callgrind); elsewhere it goes
/// through quanta.
///
/// # Examples
///
/// ```
/// use tollgate::{Clock, MonotonicClock};
///
/// let clock = MonotonicClock::new();
/// let a = clock.now();
/// let b = clock.now();
/// assert!(b >= a);
/// ```
#[derive(Clone, Copy)]
pub struct MonotonicClock {
    shared: &'static QuantaEpoch,
}

impl MonotonicClock {
    /// A handle on the process-wide clock (the first call in a process calibrates it).
    ///
    /// # Examples
    ///
    /// ```
    /// let _clock = tollgate::MonotonicClock::new();
    /// ```
    pub fn new() -> MonotonicClock {
        MonotonicClock { shared: shared() }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock::new()
    }
}

impl fmt::Debug for MonotonicClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MonotonicClock").finish_non_exhaustive()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Nanos {
        let s = self.shared;
        #[cfg(target_arch = "x86_64")]
        if s.tsc_scale != 0 {
            // As `delta_as_nanos` below: a raw reading at or before the epoch (a TSC that differs
            // slightly between cores) is 0, never a wrapped, huge reading. Truncated to u64 as
            // quanta truncates, which takes 584 years of uptime.
            return Nanos(s.tsc_nanos(tsc::read().saturating_sub(s.epoch_raw)));
        }
        s.through_quanta()
    }
}

impl QuantaEpoch {
    /// `ticks` of the TSC in nanoseconds: the high half of their product with the scale.
    #[inline(always)]
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn tsc_nanos(&self, ticks: u64) -> u64 {
        ((u128::from(ticks) * u128::from(self.tsc_scale)) >> 64) as u64
    }

    /// A reading through quanta, where the TSC is not quanta's raw reading (out of line: on
    /// x86-64 with an invariant TSC it is never called).
    #[cfg_attr(target_arch = "x86_64", cold, inline(never))]
    fn through_quanta(&self) -> Nanos {
        // `delta_as_nanos` returns 0 for a raw reading at or before the epoch, so a TSC that differs
        // slightly between cores can never produce a wrapped, huge reading.
        Nanos(self.clock.delta_as_nanos(self.epoch_raw, self.clock.raw()))
    }
}

/// The error returned when a [`CoarseClock`]'s upkeep thread cannot be started.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::CoarseClock;
///
/// let err = CoarseClock::with_interval(Duration::ZERO).unwrap_err();
/// assert!(err.to_string().contains("interval"));
/// ```
///
/// Non-exhaustive, as the crate's other errors: a `match` outside this crate needs a wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum CoarseClockError {
    /// The requested upkeep interval is outside 1 µs ..= 1 s.
    Interval {
        /// The interval that was asked for.
        requested: Duration,
    },
    /// The operating system refused to start the upkeep thread.
    Spawn(std::io::Error),
}

impl fmt::Display for CoarseClockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoarseClockError::Interval { requested } => write!(
                f,
                "coarse clock interval must be between {:?} and {:?}, got {requested:?}",
                CoarseClock::MIN_INTERVAL,
                CoarseClock::MAX_INTERVAL
            ),
            CoarseClockError::Spawn(e) => {
                write!(f, "could not start the coarse clock's upkeep thread: {e}")
            }
        }
    }
}

impl std::error::Error for CoarseClockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CoarseClockError::Spawn(e) => Some(e),
            CoarseClockError::Interval { .. } => None,
        }
    }
}

/// tollgate's upkeep thread, shared by every live [`CoarseClock`] in the process; dropping it (with
/// the last clock) stops the thread and waits for it to end.
struct Upkeep {
    interval: Duration,
    /// Never sent on: dropping it ends the thread's wait for its next tick at once.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Upkeep {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            // Woken by the disconnect, the thread only records that it ended (under the registry
            // lock, which no one holds for long: a `with_interval` waiting for this thread waits
            // on `STOPPED`, which releases it). It cannot panic, so the result says nothing.
            let _ = thread.join();
        }
    }
}

/// What every `CoarseClock` constructor consults, under one lock.
struct Registry {
    /// The upkeep thread the live clocks share; dead when there are none.
    live: Weak<Upkeep>,
    /// Whether a thread started by tollgate is still running: true from its start until it has
    /// ended, which is a moment after `live` died when its last clock was just dropped.
    running: bool,
}

/// quanta's recent time is one value per process, so tollgate runs at most one upkeep thread.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Weak::new(),
    running: false,
});

/// Signalled when an upkeep thread has ended (`running` went false).
static STOPPED: Condvar = Condvar::new();

fn registry() -> MutexGuard<'static, Registry> {
    // Every change under this lock is a single field assignment, so a panic while it was held
    // cannot have left the registry half-written: a poisoned lock is still usable.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The body of the upkeep thread: refresh quanta's recent time, then wait `interval` for a stop
/// request (the `Sender`'s drop) that ends the wait at once.
fn run_upkeep(clock: &quanta::Clock, interval: Duration, stop: mpsc::Receiver<()>) {
    /// Records the thread's end however the loop ends, so a `with_interval` waiting for it
    /// cannot wait forever.
    struct Ended;
    impl Drop for Ended {
        fn drop(&mut self) {
            registry().running = false;
            STOPPED.notify_all();
        }
    }
    let _ended = Ended;
    loop {
        quanta::set_recent(clock.now());
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// A clock that reads a timestamp a background thread refreshes: one atomic load a reading.
///
/// It reads quanta's process-wide `recent()` time, which tollgate's upkeep thread sets from the
/// [`MonotonicClock`] every `interval` (1 ms by default). The thread starts with the first
/// `CoarseClock` in the process and stops when the last clone of the last one is dropped. tollgate
/// runs at most one upkeep thread at a time, so every `CoarseClock` alive at the same time shares
/// the interval of the one that started it; [`CoarseClock::interval`] reports the one in force.
///
/// # Starting and stopping
///
/// Creating a clock fails only when the operating system refuses to start a thread
/// ([`CoarseClockError::Spawn`]). A clock created while another thread drops the last one waits
/// for the ending upkeep thread to finish, then starts a new one: there is never more than one
/// tollgate upkeep thread, and never a spurious error.
///
/// Dropping the last clock wakes the upkeep thread and waits for it to end, so that no tollgate
/// thread outlives the last clock. The wait is bounded by the time the operating system takes to
/// schedule the woken thread once (a time slice or so on a loaded machine), not by the interval:
/// the thread waits for its next tick in a way that a stop request ends at once. (That is why
/// tollgate runs its own loop around `quanta::set_recent` rather than quanta's `Upkeep`, whose
/// thread sleeps its whole interval before it looks for a stop request, and whose drop waits that
/// out: up to a second with the longest interval.) A clock created meanwhile waits as long.
///
/// # Other code driving quanta's recent time
///
/// A *foreign upkeep thread* is one tollgate did not start that also writes quanta's recent time:
/// quanta's own `Upkeep` (governor's `QuantaUpkeepClock` starts one), or code calling
/// `quanta::set_recent`. tollgate does not use quanta's `Upkeep`, so neither stops the other from
/// starting, and `CoarseClock::new` succeeds while one runs. While both run, a reading is the
/// latest refresh by either, and tollgate's thread still refreshes every interval. A foreign
/// refresh stored late (its thread preempted between its reading and its store) can step the
/// reading back until tollgate's next refresh, at most an interval later: limiters handle a step
/// back (see the [module docs](self)), and such a step is the only way the staleness below can
/// exceed its bound. A foreign writer of values that are not this clock's time (a thread driven
/// by quanta's mock clock) makes readings meaningless: do not combine the two.
///
/// # Staleness
///
/// A reading lags the true time by up to the interval, plus however long the upkeep thread waits to
/// be scheduled (on a loaded machine, a time slice or more). A stale reading is an earlier reading,
/// and an earlier reading never creates tokens: staleness can delay an admission by up to the lag,
/// and makes `retry_after` up to the lag longer than needed, but can never admit more than the limit
/// as measured on the clock's own readings: over readings spanning `t`, at most `C + R × t`.
///
/// Measured against true time, a lag that varies between 0 and `L` can shift when a refill is seen
/// by up to `L`, so a window of true length `t` sees at most `C + R × (t + L)`: the same slack any
/// clock shows when a thread is preempted between reading it and deciding, bounded here by the
/// interval you choose. Readings share the epoch of [`MonotonicClock`] (to within rounding).
///
/// # Examples
///
/// ```
/// use tollgate::{CoarseClock, Quota, TokenBucket};
///
/// let clock = CoarseClock::new()?;
/// let bucket = TokenBucket::with_clock(Quota::per_second(1000)?, clock);
/// assert!(bucket.try_acquire().is_ok());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct CoarseClock {
    shared: &'static QuantaEpoch,
    upkeep: std::sync::Arc<Upkeep>,
}

impl CoarseClock {
    /// The shortest upkeep interval accepted: 1 µs.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::CoarseClock;
    /// assert!(CoarseClock::with_interval(CoarseClock::MIN_INTERVAL / 2).is_err());
    /// ```
    pub const MIN_INTERVAL: Duration = Duration::from_micros(1);
    /// The longest upkeep interval accepted: 1 s.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::CoarseClock;
    /// assert!(CoarseClock::with_interval(CoarseClock::MAX_INTERVAL * 2).is_err());
    /// ```
    pub const MAX_INTERVAL: Duration = Duration::from_secs(1);
    /// The interval used by [`CoarseClock::new`]: 1 ms.
    ///
    /// # Examples
    ///
    /// ```
    /// assert_eq!(tollgate::CoarseClock::DEFAULT_INTERVAL.as_millis(), 1);
    /// ```
    pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(1);

    /// A coarse clock refreshed every millisecond (or sharing the upkeep thread already running).
    ///
    /// # Errors
    ///
    /// [`CoarseClockError::Spawn`] when the operating system refuses to start the upkeep thread.
    ///
    /// # Examples
    ///
    /// ```
    /// let clock = tollgate::CoarseClock::new()?;
    /// assert!(clock.interval() <= std::time::Duration::from_secs(1));
    /// # Ok::<(), tollgate::CoarseClockError>(())
    /// ```
    pub fn new() -> Result<CoarseClock, CoarseClockError> {
        CoarseClock::with_interval(CoarseClock::DEFAULT_INTERVAL)
    }

    /// A coarse clock refreshed every `interval`, or sharing the upkeep thread already running (whose
    /// interval then stays in force; see [`CoarseClock::interval`]). Called while another thread
    /// drops the last clock, it waits for that clock's upkeep thread to end, then starts its own
    /// (see [Starting and stopping](CoarseClock#starting-and-stopping)).
    ///
    /// # Errors
    ///
    /// [`CoarseClockError::Interval`] for an interval outside 1 µs ..= 1 s;
    /// [`CoarseClockError::Spawn`] when the operating system refuses to start the upkeep thread.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let clock = tollgate::CoarseClock::with_interval(Duration::from_micros(500))?;
    /// # drop(clock);
    /// # Ok::<(), tollgate::CoarseClockError>(())
    /// ```
    pub fn with_interval(interval: Duration) -> Result<CoarseClock, CoarseClockError> {
        if !(CoarseClock::MIN_INTERVAL..=CoarseClock::MAX_INTERVAL).contains(&interval) {
            return Err(CoarseClockError::Interval {
                requested: interval,
            });
        }
        let shared = shared();
        let mut registry = registry();
        loop {
            if let Some(upkeep) = registry.live.upgrade() {
                return Ok(CoarseClock { shared, upkeep });
            }
            if !registry.running {
                break;
            }
            // The last clock was dropped a moment ago and its thread, woken by the drop, is
            // ending; wait for that (releasing the lock), so that a second thread never starts
            // beside it.
            registry = STOPPED
                .wait(registry)
                .unwrap_or_else(PoisonError::into_inner);
        }
        // A first refresh before the thread is scheduled, so a new clock's reading is never older
        // than this call (and never quanta's initial 0).
        quanta::set_recent(shared.clock.now());
        let (stop, stopped) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("tollgate-coarse-clock".to_owned())
            .spawn(move || run_upkeep(&shared.clock, interval, stopped))
            .map_err(CoarseClockError::Spawn)?;
        // Set under the lock the thread needs before it can record its end, so it cannot be undone
        // first.
        registry.running = true;
        let upkeep = std::sync::Arc::new(Upkeep {
            interval,
            stop: Some(stop),
            thread: Some(thread),
        });
        registry.live = std::sync::Arc::downgrade(&upkeep);
        Ok(CoarseClock { shared, upkeep })
    }

    /// The upkeep interval in force: the bound on staleness, before scheduling delays.
    ///
    /// # Examples
    ///
    /// ```
    /// let clock = tollgate::CoarseClock::new()?;
    /// assert!(clock.interval() > std::time::Duration::ZERO);
    /// # Ok::<(), tollgate::CoarseClockError>(())
    /// ```
    pub fn interval(&self) -> Duration {
        self.upkeep.interval
    }
}

impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock")
            .field("interval", &self.upkeep.interval)
            .finish_non_exhaustive()
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Nanos {
        let since = self
            .shared
            .clock
            .recent()
            .saturating_duration_since(self.shared.epoch);
        // Whole seconds and the rest, without `as_nanos`' u128; saturating (at 584 years).
        Nanos(
            since
                .as_secs()
                .saturating_mul(1_000_000_000)
                .saturating_add(u64::from(since.subsec_nanos())),
        )
    }
}

/// A clock that moves only when told: for tests, simulations and trace replays.
///
/// Clones share one reading. It may be set backwards, to test what a limiter does with a clock that
/// steps back.
///
/// # Memory ordering
///
/// A reading is a single `u64`; `set` and `advance` are visible to `now` on other threads as soon as
/// the hardware propagates them, and publish nothing else.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tollgate::{Clock, ManualClock, Nanos};
///
/// let clock = ManualClock::new();
/// let view = clock.clone();
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(view.now(), Nanos::new(5_000_000));
/// clock.set(Nanos::new(1)); // backwards is allowed
/// assert_eq!(view.now(), Nanos::new(1));
/// ```
#[derive(Clone, Debug)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading [`Nanos::ZERO`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Nanos};
    /// assert_eq!(ManualClock::new().now(), Nanos::ZERO);
    /// ```
    pub fn new() -> ManualClock {
        ManualClock::starting_at(Nanos::ZERO)
    }

    /// A clock reading `start`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Nanos};
    /// assert_eq!(ManualClock::starting_at(Nanos::new(9)).now(), Nanos::new(9));
    /// ```
    pub fn starting_at(start: Nanos) -> ManualClock {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(start.0)),
        }
    }

    /// Moves the clock forward by `d`, saturating at `u64::MAX` nanoseconds.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{Clock, ManualClock, Nanos};
    /// let clock = ManualClock::new();
    /// clock.advance(Duration::from_nanos(3));
    /// assert_eq!(clock.now(), Nanos::new(3));
    /// ```
    pub fn advance(&self, d: Duration) {
        let step = duration_to_nanos(d);
        // Relaxed: the reading is the only data; the RMW keeps concurrent advances from losing steps.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(step))
            });
    }

    /// Sets the clock to `t`, forwards or backwards.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, ManualClock, Nanos};
    /// let clock = ManualClock::starting_at(Nanos::new(100));
    /// clock.set(Nanos::new(50));
    /// assert_eq!(clock.now(), Nanos::new(50));
    /// ```
    pub fn set(&self, t: Nanos) {
        // Relaxed: the reading is the only data published.
        self.nanos.store(t.0, Ordering::Relaxed);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        ManualClock::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        // Relaxed: pairs with nothing; the reading carries no other data.
        Nanos(self.nanos.load(Ordering::Relaxed))
    }
}

/// A clock that reads tokio's `Instant` (feature `tokio`): nanoseconds since the clock was made.
///
/// Under tokio's paused time (`#[tokio::test(start_paused = true)]`, or
/// `tokio::time::pause()`) it stands still until the runtime advances it, and moves exactly as far
/// as tokio's timers do, so a limiter on it and code sleeping on tokio's timer (the
/// [`wait`](crate::wait) futures, a `tokio::time::sleep`) agree: tests of waiting run in virtual
/// time, without a real wait. [`MonotonicClock`] reads the TSC, which no runtime can pause.
/// Outside paused time it follows real monotonic time (tokio's `Instant` is `std`'s then), at the
/// cost of a `std::time::Instant` read and, in a runtime with paused time enabled, a lookup of
/// the runtime's clock.
///
/// Clones (it is `Copy`) share the epoch, the moment [`TokioClock::new`] was called, so their
/// readings compare. Readings saturate after 584 years.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), tollgate::QuotaError> {
/// use std::time::Duration;
/// use tollgate::{Clock, Nanos, Quota, TokenBucket, TokioClock};
///
/// let clock = TokioClock::new();
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, clock);
/// assert!(bucket.try_acquire().is_ok());
/// assert!(bucket.try_acquire().is_err());
/// tokio::time::sleep(Duration::from_secs(1)).await; // paused: returns at once, a second later
/// assert!(clock.now() >= Nanos::new(1_000_000_000));
/// assert!(bucket.try_acquire().is_ok());
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    epoch: tokio::time::Instant,
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl TokioClock {
    /// A clock reading zero now, on tokio's time (paused or not, as the current runtime's is).
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Clock, TokioClock};
    /// let clock = TokioClock::new();
    /// assert!(clock.now() <= clock.now());
    /// ```
    pub fn new() -> TokioClock {
        TokioClock {
            epoch: tokio::time::Instant::now(),
        }
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
impl Clock for TokioClock {
    fn now(&self) -> Nanos {
        Nanos::from(tokio::time::Instant::now().saturating_duration_since(self.epoch))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inline TSC path (where it is taken) and quanta's own scaling read the same time: a
    /// reading between two of quanta's lies between them, give or take the 2 ns the two
    /// roundings may differ by within a day of the epoch.
    #[test]
    fn the_inline_reading_agrees_with_quantas() {
        let clock = MonotonicClock::new();
        let s = clock.shared;
        for _ in 0..10_000 {
            let before = s.through_quanta().as_u64();
            let now = clock.now().as_u64();
            let after = s.through_quanta().as_u64();
            assert!(before <= now + 2, "{before} then {now}");
            assert!(now <= after + 2, "{now} then {after}");
        }
    }

    /// The scale is quanta's conversion of 2^48 ticks (moved up to 2^64), so scaling any span by
    /// it gives quanta's nanoseconds for that span, to within the rounding.
    #[test]
    fn the_scale_converts_spans_as_quanta_does() {
        let s = shared();
        if s.tsc_scale == 0 {
            return; // quanta does not read the TSC here: every reading goes through quanta
        }
        for ticks in [1u64, 1_000, 1 << 20, 3_000_000_000, 1 << 40, 1 << 47] {
            let ours = s.tsc_nanos(ticks);
            let quantas = s.clock.delta_as_nanos(0, ticks);
            assert!(
                ours <= quantas && quantas - ours <= 1 + (ticks >> TSC_SPAN),
                "{ticks} ticks: {ours} ns against quanta's {quantas}"
            );
        }
    }
}
