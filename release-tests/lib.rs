//! Nothing: this package exists for its two tests, `keyed_spray` and `sharded_threads`, which are
//! tollgate's own `tests/` files built in release without tollgate's dev-dependencies (see its
//! `Cargo.toml`). Run them with `cargo test --release -p tollgate-release-tests`.
