//! tollgate's test kit: exact reference models of every algorithm, drivers that run the crate and a
//! model through the same operations and compare every answer, and the input generators the
//! property tests and the fuzz targets share. Not published; a workspace member used by
//! `tests/` and `benches/` (a dev-dependency of tollgate) and `fuzz/` (an ordinary dependency).
//!
//! # Layout
//!
//! | module | what | used by |
//! | --- | --- | --- |
//! | [`reference`](mod@reference) | one exact model per algorithm: `bucket` (also the leaky meter's and the keyed limiter's time units), `counter`, `fixed` (with its driver), `log`, `meter`, `sharded` | the drivers; a few hand-checked tests |
//! | [`driver`] | one driver per limiter (`bucket`, `counter`, `keyed`, `keyed_pair`, `log`, `meter`, `queue`, `sharded`); [`driver::limiter`], the calls every [`tollgate::Limiter`] answers, as operations ([`driver::limiter::Request`], amounts relative to the limit) and made and compared once; [`driver::step`], the one clock step | `tests/*_model.rs`, every fuzz target |
//! | [`Outcome`] | the one answer type: admitted, denied (with `retry_at`), insufficient capacity | every model and driver |
//! | [`consts`] | [`consts::MAX_USABLE_NS`] (the crate's `Nanos::MAX_USABLE`), [`consts::YEAR_NS`] | everywhere, instead of `1 << 62` |
//! | [`strategies`] | proptest strategies: the common operations (requests, calls, amounts, clock steps), the rate checks' requests, counts, periods, rates, starts | every model proptest |
//! | `fuzz_input` (feature `arbitrary`) | the same kinds of input drawn from a fuzzer's bytes, and operation lists | every `*_ops` fuzz target |
//! | [`child`] | one of a test binary's own tests run in a child process | `tests/keyed_seccomp.rs`, `tests/redis_leases.rs` |
//! | [`mod@env`] | the Redis server's address, or a skip | `tests/redis_leases.rs`, `tests/metrics.rs`, `tests/tracing.rs` |
//! | `bench` (feature `bench`) | the benches' two loads, the `Mutex` baseline, the timed loops | `benches/` |
//!
//! # Design
//!
//! - **Independent models.** A model is written from the documented semantics, never from the
//!   crate's code: plain `i128`/`u128` numbers, maps and lists where the crate packs a word, and
//!   searches where the crate solves a formula. A bug would have to be made twice, differently, to
//!   pass. The models use nothing of the crate but the clamp, `Nanos::MAX_USABLE` (through
//!   [`consts`]); `reference::fixed` also holds its driver, which does.
//! - **Exact comparison.** A driver compares whole [`Outcome`]s with `==`, to the nanosecond; the
//!   only adjustment is [`Outcome::representable`], which caps a model's spans where a `Duration`
//!   stops. `remaining` is compared after every operation, not only when asked.
//! - **Written once.** The calls every limiter answers (`try_acquire(_n)`, `peek_n`, `remaining`,
//!   each in the clock-reading and the `_at` form) go through [`driver::limiter::check`], generic
//!   over [`tollgate::Limiter`] and [`driver::limiter::Model`]. What only one limiter has stays in
//!   its driver: the bucket's refunds, the meter's scheduling, the sharded bucket's homes and
//!   give-backs, the queue's producers, keyed eviction, the log's jump to a `retry_at`.
//! - **One operation vocabulary.** Every driver's `Op` embeds the common calls as one variant, a
//!   [`driver::limiter::Request`] (a [`driver::limiter::Call`] over an [`driver::limiter::Amount`]
//!   relative to the limit, and whether the clock is read), and moves the clock by one
//!   [`driver::step::Step`] type, measured in the driver's own unit (interval, sub-window, window).
//!   So one generator of each serves every proptest and every fuzz target.
//! - **Inputs apart.** A driver takes a specification and a list of operations; the proptests
//!   ([`strategies`]) and the fuzz targets (`fuzz_input`) only generate them, each their own way, so
//!   a failing fuzz input can be replayed as a unit test by writing its operations out.
//! - **Adding a limiter.** Write its model under `reference/`, implement
//!   [`driver::limiter::Model`] for it, and write a driver whose `Op` has a
//!   `Call(Request)` variant made through [`driver::limiter::Request::check`] and a
//!   `Time(Step)` one; then a proptest in `tests/` and a fuzz target in `fuzz/`, drawing those
//!   two from [`strategies`] and `fuzz_input`.
//!
//! # Example
//!
//! ```
//! use testkit::driver::bucket::{self, Op, QuotaSpec, Rate};
//! use testkit::driver::limiter::{Amount, Call, Request};
//! use testkit::driver::step::Step;
//!
//! let spec = QuotaSpec { rate: Rate::Second(3), capacity: None, initial: None, initial_first: false };
//! let ops = [
//!     Op::Call(Request::at(Call::Acquire(Amount::Limit))),
//!     Op::Call(Request::at(Call::AcquireOne)),
//!     Op::Time(Step::Units { num: 1, den: 1 }),
//!     Op::Call(Request::via_clock(Call::AcquireOne)),
//! ];
//! // Panics at the first answer that differs from the model's.
//! bucket::run(&spec, 0, &ops);
//! ```

#[cfg(feature = "bench")]
pub mod bench;
pub mod child;
pub mod consts;
pub mod driver;
pub mod env;
#[cfg(feature = "arbitrary")]
pub mod fuzz_input;
pub mod outcome;
pub mod reference;
pub mod strategies;

pub use outcome::Outcome;
