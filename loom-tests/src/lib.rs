//! Loom model checks of tollgate's atomic protocols live in `tests/`, one file per type.
//!
//! Run them with `RUSTFLAGS="--cfg tollgate_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p loom-tests --release`.
//! Without `--cfg tollgate_loom` the test files compile to nothing.
