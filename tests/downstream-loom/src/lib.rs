//! A downstream crate's loom build: with `RUSTFLAGS="--cfg loom"` this crate models its own code
//! with loom, while tollgate, which switches on `cfg(tollgate_loom)` only, builds and behaves as in
//! production.

/// Admits one request through a tollgate bucket: proof that tollgate's ordinary API is there.
pub fn admit_one() -> bool {
    let quota = tollgate::Quota::per_second(1).expect("1/s is a valid quota");
    let bucket = tollgate::TokenBucket::with_clock(quota, tollgate::ManualClock::new());
    bucket.try_acquire().is_ok() && bucket.try_acquire().is_err()
}

#[cfg(test)]
mod tests {
    #[test]
    fn tollgate_builds_normally_under_a_downstream_cfg_loom() {
        assert!(super::admit_one());
    }

    /// This crate's own loom model runs beside tollgate's ordinary build.
    #[cfg(loom)]
    #[test]
    fn own_loom_model_runs() {
        loom::model(|| {
            let flag = loom::sync::Arc::new(loom::sync::atomic::AtomicBool::new(false));
            let f = flag.clone();
            let t = loom::thread::spawn(move || f.store(true, loom::sync::atomic::Ordering::Release));
            t.join().unwrap();
            assert!(flag.load(loom::sync::atomic::Ordering::Acquire));
            assert!(super::admit_one());
        });
    }
}
