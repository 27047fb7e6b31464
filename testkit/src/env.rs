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

/// A connection manager to the server at `url` (from [`redis_url`]), for tests that talk to
/// Redis themselves or hand it to a limiter.
///
/// # Panics
///
/// When `url` is not a Redis address or its server cannot be reached: a test that was given an
/// address needs its server.
///
/// ```no_run
/// # async fn demo() {
/// if let Some(url) = testkit::env::redis_url() {
///     let _conn = testkit::env::redis_manager(&url).await;
/// }
/// # }
/// ```
#[cfg(feature = "redis")]
pub async fn redis_manager(url: &str) -> redis::aio::ConnectionManager {
    redis::Client::open(url)
        .expect("a Redis address")
        .get_connection_manager()
        .await
        .expect("a connection to the test Redis server")
}
