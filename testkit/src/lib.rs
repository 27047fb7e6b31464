//! tollgate's test kit: exact reference models of every algorithm, drivers that run the crate and a
//! model through the same operations and compare every answer, and the input generators the
//! property tests and the fuzz targets share. Not published; a workspace member used by
//! `tests/` and `benches/` (a dev-dependency of tollgate) and `fuzz/` (an ordinary dependency).
//!
//! # Layout
//!
//! - [`reference`](mod@reference): the models, written from the documented semantics alone (no code is shared with
//!   the crate, so a bug cannot hide in both).
//! - [`Outcome`]: the one answer type every model gives and every driver compares.
//! - [`consts`]: the shared constants ([`consts::MAX_USABLE_NS`] is the crate's `Nanos::MAX_USABLE`).
//! - [`driver`]: one driver per limiter; each builds the limiter and its model from the same
//!   specification, applies operations to both, and panics at the first difference.
//! - [`strategies`]: proptest strategies for quotas, amounts and clock steps.
//! - `fuzz_input` (feature `arbitrary`): the same inputs drawn from a fuzzer's bytes.
//! - `bench` (feature `bench`): the benches' loads, baseline and timed loops.
//!
//! # Example
//!
//! ```
//! use testkit::driver::bucket::{self, Amount, Op, QuotaSpec, Rate, Step};
//!
//! let spec = QuotaSpec { rate: Rate::Second(3), capacity: None, initial: None, initial_first: false };
//! let ops = [
//!     Op::Acquire { n: Amount::Capacity, clock: false },
//!     Op::AcquireOne { clock: false },
//!     Op::Time(Step::Intervals { num: 1, den: 1 }),
//!     Op::AcquireOne { clock: true },
//! ];
//! // Panics at the first answer that differs from the model's.
//! bucket::run(&spec, 0, &ops);
//! ```

#[cfg(feature = "bench")]
pub mod bench;
pub mod consts;
pub mod driver;
#[cfg(feature = "arbitrary")]
pub mod fuzz_input;
pub mod outcome;
pub mod reference;
pub mod strategies;

pub use outcome::Outcome;
