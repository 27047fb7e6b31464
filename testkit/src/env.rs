//! What a test reads from its environment.

/// The Redis server's address for tests that need one (`TOLLGATE_REDIS_URL`, which
/// `scripts/redis.sh` exports), or `None`, printing `SKIPPED`, when it is not set. With
/// `TOLLGATE_REQUIRE_REDIS=1`, a missing address is a failure instead.
///
/// # Panics
///
/// When `TOLLGATE_REQUIRE_REDIS=1` and `TOLLGATE_REDIS_URL` is not set.
///
/// ```
/// if let Some(url) = testkit::env::redis_url() {
///     assert!(url.starts_with("redis://"));
/// }
/// ```
pub fn redis_url() -> Option<String> {
    match std::env::var("TOLLGATE_REDIS_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var("TOLLGATE_REQUIRE_REDIS").as_deref() != Ok("1"),
                "TOLLGATE_REQUIRE_REDIS=1 but TOLLGATE_REDIS_URL is not set"
            );
            eprintln!("SKIPPED: no Redis (TOLLGATE_REDIS_URL is not set; see scripts/redis.sh)");
            None
        }
    }
}
