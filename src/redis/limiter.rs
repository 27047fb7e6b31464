//! [`RedisLimiter`] and its builder: a call is checked on the client, sent as one `EVALSHA`
//! (reloading the script once on `NOSCRIPT`), bounded by a timeout, and answered by the script or,
//! when Redis cannot decide, by the [`FailurePolicy`].

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{Cmd, ErrorKind, Pipeline, RedisFuture, ServerErrorKind, Value};

use super::error::{BuildError, RedisError, Unavailable, UnavailableKind};
#[cfg(feature = "metrics")]
use super::failure::Outcomes;
use super::failure::{bump, Breaker, Choice, Counters, FailurePolicy, Fallback, Route, Stats};
use super::keys::{self, MAX_PREFIX_LEN};
use super::reply::{decode, Reply};
use super::script::sealed::Plan;
use super::script::RedisAlgorithm;
use crate::change::Current;
use crate::clock::Clock;
use crate::keyed::{KeyedError, LeakyMeterKeys, TokenBucketKeys};
use crate::limiter::KeyedLimit;
use crate::outcome::{Admitted, Headroom, InsufficientCapacity, Next, Scheduled};
use crate::partial::Partial;
use crate::quota::Quota;
#[cfg(feature = "tracing")]
use crate::sync::{AtomicBool, Ordering};
use std::sync::Arc;

/// The default per-call timeout: 50 ms.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
/// The default number of failures in a row that opens the circuit breaker: 5.
pub const DEFAULT_BREAKER_THRESHOLD: u32 = 5;
/// The default time an open circuit breaker waits before it lets one probe through: 1 s.
pub const DEFAULT_COOL_DOWN: Duration = Duration::from_secs(1);
/// The longest timeout or cool-down accepted: one hour.
pub const MAX_WAIT: Duration = Duration::from_secs(3600);

/// A connection the limiter can clone per call: any cloneable async Redis connection
/// (`ConnectionManager`, `cluster_async::ClusterConnection`, `MultiplexedConnection`).
trait Connection: ConnectionLike + Send + Sync + 'static {
    fn clone_box(&self) -> Box<dyn Connection>;
}

impl<T: ConnectionLike + Clone + Send + Sync + 'static> Connection for T {
    fn clone_box(&self) -> Box<dyn Connection> {
        Box::new(self.clone())
    }
}

/// One call's connection.
struct Conn(Box<dyn Connection>);

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.0.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.0.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// The reading a call sends: the server's `TIME` (production), or a client clock (tests only).
type ClientTime = Box<dyn Fn() -> u64 + Send + Sync>;

/// A rate limiter whose state lives in Redis, so that every replica of a service shares one limit
/// per key. Each decision is one `EVALSHA` of the algorithm's script, atomic on the server and
/// timed by the server's clock; `A` is the algorithm, named by its keyed marker
/// ([`TokenBucketKeys`], the default; [`LeakyMeterKeys`](crate::keyed::LeakyMeterKeys);
/// [`FixedWindowKeys`](crate::keyed::FixedWindowKeys)). See the [module docs](super).
///
/// Cheap to share: wrap it in an `Arc`; calls need only `&self`, and each clones the connection
/// (for a `ConnectionManager` or a cluster connection, a reference count), so concurrent calls
/// pipeline on one multiplexed connection.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use tollgate::redis::{FailurePolicy, RedisLimiter};
/// use tollgate::keyed::TokenBucketKeys;
/// use tollgate::Quota;
/// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
/// let client = redis::Client::open(url)?;
/// let conn = client.get_connection_manager().await?;
/// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(10)?)
///     .prefix("docs-example")
///     .build(FailurePolicy::Closed)?;
/// let key = format!("client-{}", std::process::id());
/// let first = limiter.check_key(&key).await?;
/// assert!(first.remaining() <= 9);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
pub struct RedisLimiter<A: RedisAlgorithm = TokenBucketKeys> {
    conn: Box<dyn Connection>,
    /// The quota and the script arguments it makes, replaced whole by `set_quota` (behind the
    /// crate's quota pointer, `crate::change`): a call reads them once, so the arguments it
    /// sends and the ticks it reads the reply in are one quota's.
    config: Current<Arc<Config>>,
    prefix: Vec<u8>,
    timeout: Duration,
    failure: FailurePolicy<A>,
    breaker: Breaker,
    counters: Counters,
    /// The `tollgate_decisions_total` handles.
    #[cfg(feature = "metrics")]
    outcomes: Outcomes,
    /// The name in metrics and events: the builder's `name`, else the prefix.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    label: String,
    /// A failure policy has answered since Redis last did: its taking over is logged once, and
    /// Redis's return once.
    #[cfg(feature = "tracing")]
    degraded: AtomicBool,
    client_time: Option<ClientTime>,
    algorithm: PhantomData<fn() -> A>,
}

/// Builds a [`RedisLimiter`]: the connection and the quota, then the optional settings, then
/// [`build`](RedisLimiterBuilder::build) with the one required choice, the [`FailurePolicy`].
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use std::time::Duration;
/// use tollgate::redis::{FailurePolicy, RedisLimiter};
/// use tollgate::keyed::TokenBucketKeys;
/// use tollgate::Quota;
/// // A lazy connection manager connects on the first call, so building needs no server.
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
/// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(600)?)
///     .prefix("api")
///     .timeout(Duration::from_millis(20))
///     .breaker(3, Duration::from_millis(500))
///     .build(FailurePolicy::Closed)?;
/// assert_eq!(limiter.key_name("client-7")?, b"api:{client-7}:tb");
/// // A bad setting names itself.
/// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
/// let err = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(600)?)
///     .prefix("a{b")
///     .build(FailurePolicy::Closed)
///     .unwrap_err();
/// assert_eq!(err.field(), "prefix");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
pub struct RedisLimiterBuilder<A: RedisAlgorithm = TokenBucketKeys> {
    conn: Box<dyn Connection>,
    quota: Quota,
    prefix: Vec<u8>,
    timeout: Duration,
    threshold: u32,
    cool_down: Duration,
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    name: Option<String>,
    client_time: Option<ClientTime>,
    algorithm: PhantomData<fn() -> A>,
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// A builder for a limiter enforcing `quota` per key through `conn`: any cloneable async
    /// connection, such as a `redis::aio::ConnectionManager` or a
    /// `redis::cluster_async::ClusterConnection`.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiterBuilder`].
    pub fn builder<C>(conn: C, quota: Quota) -> RedisLimiterBuilder<A>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        RedisLimiterBuilder {
            conn: Box::new(conn),
            quota,
            prefix: b"tollgate".to_vec(),
            timeout: DEFAULT_TIMEOUT,
            threshold: DEFAULT_BREAKER_THRESHOLD,
            cool_down: DEFAULT_COOL_DOWN,
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            name: None,
            client_time: None,
            algorithm: PhantomData,
        }
    }
}

impl<A: RedisAlgorithm> RedisLimiterBuilder<A> {
    /// The first part of every Redis key this limiter writes (`prefix:{key}:algorithm`; default
    /// `tollgate`): at most 256 bytes, without `{` or `}`. Limiters with different quotas for
    /// the same keys need different prefixes, unless one is meant to replace the other (see the
    /// [module docs](super#changing-a-quota)).
    ///
    /// # Examples
    ///
    /// See [`RedisLimiterBuilder`].
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// The most a call may take, the reload of a script included (default
    /// [`DEFAULT_TIMEOUT`], 50 ms); from 1 µs to [`MAX_WAIT`]. A call that takes longer answers
    /// [`UnavailableKind::Timeout`] to the [`FailurePolicy`].
    ///
    /// # Examples
    ///
    /// See [`RedisLimiterBuilder`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The circuit breaker: after `failures` calls in a row that Redis could not decide (at least
    /// 1; default 5), calls skip Redis and go straight to the [`FailurePolicy`] until
    /// `cool_down` has passed (from 1 µs to [`MAX_WAIT`]; default 1 s); then one call probes
    /// Redis, and its answer closes the breaker or starts another cool-down.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiterBuilder`].
    pub fn breaker(mut self, failures: u32, cool_down: Duration) -> Self {
        self.threshold = failures;
        self.cool_down = cool_down;
        self
    }

    /// The limiter's name in metrics (the `limiter` label, see [`crate::metrics`]) and in
    /// events; the prefix (as UTF-8, invalid bytes replaced) unless set.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::redis::{FailurePolicy, RedisLimiter};
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::Quota;
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
    /// let limiter: RedisLimiter<TokenBucketKeys> = RedisLimiter::builder(conn, Quota::per_second(10)?)
    ///     .prefix("api")
    ///     .name("api-global")
    ///     .build(FailurePolicy::Open)?;
    /// # drop(limiter);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Tests only: every call sends `clock`'s reading (taken as Unix time in nanoseconds,
    /// truncated to microseconds) instead of letting the script read the server's `TIME`, so
    /// that a test can run the same sequence against Redis and an in-process limiter. Never in
    /// production: clients' clocks disagree, and a fast one hands out tokens early.
    #[doc(hidden)]
    pub fn client_clock<C: Clock + 'static>(mut self, clock: C) -> Self {
        self.client_time = Some(Box::new(move || clock.now().as_u64() / 1000));
        self
    }

    /// The limiter, answering `failure` when Redis cannot decide.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] naming the field: a `prefix` over 256 bytes or with `{` or `}`; a
    /// `timeout`, `cool_down` or `failures` out of range; a quota the algorithm refuses in
    /// process too (a window's capacity other than its count, ...); a window (`period`) that is
    /// not a whole number of microseconds; a burst window (`capacity` x interval) over 2^52 µs.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiterBuilder`].
    pub fn build(self, failure: FailurePolicy<A>) -> Result<RedisLimiter<A>, BuildError> {
        if !keys::valid_prefix(&self.prefix) {
            return Err(BuildError::new(
                "prefix",
                format!("0..={MAX_PREFIX_LEN} bytes without '{{' or '}}'"),
            ));
        }
        let wait_range = |field: &'static str, d: Duration| {
            if d.is_zero() || d > MAX_WAIT {
                Err(BuildError::new(
                    field,
                    format!("1 us..={MAX_WAIT:?}, got {d:?}"),
                ))
            } else {
                Ok(())
            }
        };
        wait_range("timeout", self.timeout)?;
        wait_range("cool_down", self.cool_down)?;
        if self.threshold == 0 {
            return Err(BuildError::new("failures", "1..=4294967295, got 0".into()));
        }
        let config = Config::new::<A>(self.quota)?;
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let label = self
            .name
            .unwrap_or_else(|| String::from_utf8_lossy(&self.prefix).into_owned());
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let counters = Counters::new(&label);
        #[cfg(not(any(feature = "metrics", feature = "tracing")))]
        let counters = Counters::new("");
        Ok(RedisLimiter {
            conn: self.conn,
            config: Current::new(Arc::new(config)),
            prefix: self.prefix,
            timeout: self.timeout,
            failure,
            breaker: Breaker::new(self.threshold, self.cool_down),
            counters,
            #[cfg(feature = "metrics")]
            outcomes: Outcomes::new(&label),
            #[cfg(any(feature = "metrics", feature = "tracing"))]
            label,
            #[cfg(feature = "tracing")]
            degraded: AtomicBool::new(false),
            client_time: self.client_time,
            algorithm: PhantomData,
        })
    }
}

/// What a call asks the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ask {
    Take,
    Peek,
    Schedule,
}

impl<A: RedisAlgorithm> RedisLimiter<A> {
    /// Admits one request for `key`.
    ///
    /// # Errors
    ///
    /// As [`RedisLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter`].
    pub async fn check_key(&self, key: impl AsRef<[u8]>) -> Result<Admitted, RedisError> {
        self.check_key_n(key, 1).await
    }

    /// Admits `n` requests for `key`, all or none; `n = 0` is a query that writes nothing.
    ///
    /// # Errors
    ///
    /// [`RedisError::Denied`] when there is not enough capacity now (its `retry_at` is on the
    /// server's clock); [`RedisError::InsufficientCapacity`] for `n` over the capacity and
    /// [`RedisError::KeyTooLong`] for a key over 1 KiB, both without a round trip;
    /// [`RedisError::Unavailable`] when Redis could not decide and the [`FailurePolicy`] is
    /// `Closed` (or its local limiter could not decide either).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::redis::{FailurePolicy, RedisError, RedisLimiter};
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::Quota;
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
    /// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(5)?).build(FailurePolicy::Closed)?;
    /// // More than the capacity can never succeed: refused before any I/O.
    /// assert!(matches!(limiter.check_key_n("k", 6).await, Err(RedisError::InsufficientCapacity(_))));
    /// assert_eq!(limiter.stats().round_trips, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub async fn check_key_n(&self, key: impl AsRef<[u8]>, n: u64) -> Result<Admitted, RedisError> {
        let ask = if n == 0 { Ask::Peek } else { Ask::Take };
        self.admission(key.as_ref(), n, ask).await
    }

    /// The answer [`RedisLimiter::check_key_n`] would give now, admitting and writing nothing.
    ///
    /// # Errors
    ///
    /// As [`RedisLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::redis::{FailurePolicy, RedisLimiter};
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::Quota;
    /// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
    /// let conn = redis::Client::open(url)?.get_connection_manager().await?;
    /// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(5)?)
    ///     .prefix("docs-peek")
    ///     .build(FailurePolicy::Closed)?;
    /// let key = format!("never-used-{}", std::process::id());
    /// assert_eq!(limiter.peek_key_n(&key, 5).await?.remaining(), 0);
    /// assert_eq!(limiter.peek_key_n(&key, 0).await?.remaining(), 5); // nothing was taken
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub async fn peek_key_n(&self, key: impl AsRef<[u8]>, n: u64) -> Result<Admitted, RedisError> {
        self.admission(key.as_ref(), n, Ask::Peek).await
    }

    /// What the limiter has done since it was built.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter::check_key_n`].
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// The quota enforced per key.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::redis::{FailurePolicy, RedisLimiter};
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::Quota;
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
    /// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(5)?).build(FailurePolicy::Open)?;
    /// assert_eq!(limiter.quota().count(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub fn quota(&self) -> Quota {
        self.config().quota
    }

    /// Changes the quota every later call sends, at once, with no lock on the call path. The
    /// scripts already read a key's state written under another quota conservatively, by the
    /// crate's one rule (the crate docs, "Changing a quota", and the [module docs](super),
    /// "Changing a quota"): each key converts on its next call, and every process that calls
    /// with the new quota enforces it. Processes still sending the old quota keep converting the
    /// key back, each time keeping no more than what was left: change every process. A call
    /// already under way finishes with the quota it started with. A
    /// [`FailurePolicy::Local`] limiter keeps its own quota.
    ///
    /// # Errors
    ///
    /// [`BuildError`] when this algorithm's script cannot carry `quota` (as
    /// [`RedisLimiterBuilder::build`] would answer); nothing changes then.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::redis::{FailurePolicy, RedisLimiter};
    /// use tollgate::Quota;
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
    /// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(5)?)
    ///     .build(FailurePolicy::Open)?;
    /// limiter.set_quota(Quota::per_minute(100)?)?;
    /// assert_eq!(limiter.quota(), Quota::per_minute(100)?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub fn set_quota(&self, quota: Quota) -> Result<(), BuildError> {
        let config = Arc::new(Config::new::<A>(quota)?);
        self.config.change(|_| Box::new(config));
        Ok(())
    }

    /// The quota and its script arguments, as of now.
    pub(crate) fn config(&self) -> Arc<Config> {
        Arc::clone(&self.config.read())
    }

    /// The name of the Redis key that holds `key`'s state: `prefix:{key}:algorithm`, the key
    /// escaped (see the [module docs](super#keys)).
    ///
    /// # Errors
    ///
    /// [`RedisError::KeyTooLong`] for a key over [`MAX_KEY_LEN`](super::MAX_KEY_LEN) bytes.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiterBuilder`].
    pub fn key_name(&self, key: impl AsRef<[u8]>) -> Result<Vec<u8>, RedisError> {
        keys::name(&self.prefix, key.as_ref(), A::SUFFIX).map_err(RedisError::KeyTooLong)
    }

    /// The per-call timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The name in metrics and events.
    #[cfg(feature = "metrics")]
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// Checks what needs no round trip: the key's length and `n` against the capacity.
    pub(crate) fn precheck(
        &self,
        config: &Config,
        key: &[u8],
        n: u64,
    ) -> Result<Vec<u8>, RedisError> {
        let name = self.key_name(key)?;
        InsufficientCapacity::check(n, config.capacity)
            .map_err(RedisError::InsufficientCapacity)?;
        Ok(name)
    }

    async fn admission(&self, key: &[u8], n: u64, ask: Ask) -> Result<Admitted, RedisError> {
        let config = self.config();
        let name = match self.precheck(&config, key, n) {
            Ok(name) => name,
            Err(e) => {
                #[cfg(feature = "metrics")]
                if ask != Ask::Peek {
                    self.outcomes.record::<()>(&Err(e.clone()));
                }
                return Err(e);
            }
        };
        let mode = match ask {
            Ask::Take => A::TAKE,
            Ask::Peek | Ask::Schedule => A::PEEK,
        };
        let answer = match self.decide(&config, &name, mode, n, &[]).await {
            Ok(reply) => reply.outcome(config.plan.tick).map_err(RedisError::Denied),
            Err(unavailable) => self.fallback(key, n, ask, unavailable),
        };
        #[cfg(feature = "metrics")]
        if ask != Ask::Peek {
            self.outcomes.record(&answer);
        }
        answer
    }

    /// Sends one decision to Redis, through the breaker and within the timeout; `extra` are the
    /// mode's arguments after the reading (a lease's tokens given back, a reservation's longest
    /// wait, ...).
    pub(crate) async fn decide(
        &self,
        config: &Config,
        name: &[u8],
        mode: &str,
        n: u64,
        extra: &[u64],
    ) -> Result<Reply, Unavailable> {
        let mut cmd = ::redis::cmd("EVALSHA");
        cmd.arg(A::script().get_hash())
            .arg(1)
            .arg(name)
            .arg(mode)
            .arg(n);
        for a in &config.plan.args {
            cmd.arg(*a);
        }
        self.reading_arg(&mut cmd);
        for a in extra {
            cmd.arg(*a);
        }
        self.decide_cmd(A::script(), &cmd, decode).await
    }

    /// Appends the reading a call sends: the client clock's (tests only), or "" for the
    /// server's `TIME`.
    pub(crate) fn reading_arg(&self, cmd: &mut Cmd) {
        match &self.client_time {
            Some(now) => cmd.arg(now()),
            None => cmd.arg(""),
        };
    }

    /// Sends the `EVALSHA` of `script` in `cmd` as one decision, through the breaker and within
    /// the timeout, and answers the script's reply as `check` reads it (a reply `check` refuses
    /// is a failure, as one the server did not send).
    pub(crate) async fn decide_cmd<T>(
        &self,
        script: &::redis::Script,
        cmd: &Cmd,
        check: impl FnOnce(&Value) -> Result<T, Unavailable>,
    ) -> Result<T, Unavailable> {
        bump(&self.counters.decisions);
        let route = self.breaker.route();
        if route == Route::Skip {
            bump(&self.counters.breaker_skips);
            return Err(Unavailable::new(
                UnavailableKind::BreakerOpen,
                "recent calls failed; waiting for the cool-down",
            ));
        }
        let result = match tokio::time::timeout(self.timeout, self.eval(script, cmd, check)).await {
            Ok(result) => result,
            Err(_) => {
                bump(&self.counters.timeouts);
                Err(Unavailable::new(
                    UnavailableKind::Timeout,
                    format!("no answer within {:?}", self.timeout),
                ))
            }
        };
        match &result {
            // The server answered: a foreign value is the key's problem, not an outage.
            Err(u) if u.kind() != UnavailableKind::ForeignValue => {
                bump(&self.counters.failures);
                if self.breaker.failure(route) {
                    bump(&self.counters.breaker_opened);
                    #[cfg(feature = "tracing")]
                    tracing::warn!(
                        limiter = %self.label,
                        cool_down_ms = u64::try_from(self.breaker.cool_down().as_millis()).unwrap_or(u64::MAX),
                        error = %u,
                        "tollgate: Redis circuit breaker opened; calls skip Redis until the cool-down ends"
                    );
                }
            }
            _ => {
                self.breaker.success(route);
                #[cfg(feature = "tracing")]
                if route == Route::Probe {
                    tracing::info!(
                        limiter = %self.label,
                        "tollgate: Redis circuit breaker closed; Redis answered the probe"
                    );
                }
                // Relaxed: a flag for the log only; the load keeps the common case from writing.
                #[cfg(feature = "tracing")]
                if self.degraded.load(Ordering::Relaxed)
                    && self.degraded.swap(false, Ordering::Relaxed)
                {
                    tracing::info!(
                        limiter = %self.label,
                        "tollgate: Redis is deciding again; the failure policy no longer answers"
                    );
                }
            }
        }
        result
    }

    /// One `EVALSHA`; on `NOSCRIPT`, one `SCRIPT LOAD` (to every node of a cluster) and one more
    /// `EVALSHA`.
    async fn eval<T>(
        &self,
        script: &::redis::Script,
        cmd: &Cmd,
        check: impl FnOnce(&Value) -> Result<T, Unavailable>,
    ) -> Result<T, Unavailable> {
        let mut conn = Conn(self.conn.clone_box());
        bump(&self.counters.round_trips);
        let value = match cmd.query_async::<Value>(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                bump(&self.counters.reloads);
                #[cfg(feature = "tracing")]
                tracing::info!(
                    limiter = %self.label,
                    "tollgate: Redis answered NOSCRIPT (a restart, a failover or SCRIPT FLUSH); loading the script again"
                );
                bump(&self.counters.round_trips);
                script.load_async(&mut conn).await.map_err(classify)?;
                bump(&self.counters.round_trips);
                cmd.query_async::<Value>(&mut conn)
                    .await
                    .map_err(classify)?
            }
            other => other.map_err(classify)?,
        };
        check(&value)
    }

    /// Logs, once per outage, that `policy` answers because Redis could not decide.
    fn note_degraded(&self, policy: &dyn fmt::Debug, unavailable: &Unavailable) {
        // Relaxed: a flag for the log only; the load keeps a long outage from writing per call.
        #[cfg(feature = "tracing")]
        if !self.degraded.load(Ordering::Relaxed) && !self.degraded.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                limiter = %self.label,
                policy = ?policy,
                error = %unavailable,
                "tollgate: Redis could not decide; the failure policy answers until it does"
            );
        }
        #[cfg(not(feature = "tracing"))]
        let _ = (policy, unavailable);
    }

    /// What answers when Redis cannot decide.
    pub(crate) fn failure(&self) -> &FailurePolicy<A> {
        &self.failure
    }

    /// Counts a call's answer in `tollgate_decisions_total`.
    #[cfg(feature = "metrics")]
    pub(crate) fn record<T>(&self, answer: &Result<T, RedisError>) {
        self.outcomes.record(answer);
    }

    /// The key prefix.
    pub(crate) fn prefix(&self) -> &[u8] {
        &self.prefix
    }

    /// The [`FailurePolicy`]'s answer to a call Redis could not decide.
    pub(crate) fn fallback(
        &self,
        key: &[u8],
        n: u64,
        ask: Ask,
        unavailable: Unavailable,
    ) -> Result<Admitted, RedisError> {
        self.fall_back(
            &self.failure,
            unavailable,
            open_admission,
            |local, unavailable| {
                let answer = match ask {
                    Ask::Take | Ask::Schedule => local.check_key_n(key, n),
                    Ask::Peek => local.peek_key_n(key, n),
                };
                local_answer(answer, unavailable)
            },
        )
    }

    /// `policy`'s answer to a call Redis could not decide, the protocol every failure policy
    /// follows whatever the call: the outage is logged once, then `Closed` answers `unavailable`,
    /// `Open` answers `open()` (counted in `open_admissions`) and `Local` answers `local` on the
    /// policy's own limits (counted in `local_decisions`).
    pub(crate) fn fall_back<'p, P: Fallback, T>(
        &self,
        policy: &'p P,
        unavailable: Unavailable,
        open: impl FnOnce() -> T,
        local: impl FnOnce(&'p P::Limits, &Unavailable) -> Result<T, RedisError>,
    ) -> Result<T, RedisError> {
        self.note_degraded(policy, &unavailable);
        match policy.choice() {
            Choice::Closed => Err(RedisError::Unavailable(unavailable)),
            Choice::Open => {
                bump(&self.counters.open_admissions);
                Ok(open())
            }
            Choice::Local(limits) => {
                bump(&self.counters.local_decisions);
                local(limits, &unavailable)
            }
        }
    }
}

/// [`FailurePolicy::Open`]'s admission: nothing is known of the key, so no time to full, and none
/// to one more.
pub(crate) fn open_admission() -> Admitted {
    Admitted::new(Headroom::whole(0, 0, Next::FULL))
}

/// A local fallback limiter's answer to a call Redis could not decide, as the call's answer: its
/// denials and capacity errors as they are; anything else means it holds no room for the key
/// (nothing decided it), [`local_full`].
pub(crate) fn local_answer<T>(
    answer: Result<T, KeyedError>,
    unavailable: &Unavailable,
) -> Result<T, RedisError> {
    answer.map_err(|e| match e {
        KeyedError::Denied(d) => RedisError::Denied(d),
        KeyedError::InsufficientCapacity(e) => RedisError::InsufficientCapacity(e),
        e => local_full(&e, unavailable),
    })
}

/// [`UnavailableKind::LocalFull`]: the local fallback refused `e` for want of room, after Redis
/// failed with `unavailable`.
pub(crate) fn local_full(e: &dyn fmt::Display, unavailable: &Unavailable) -> RedisError {
    RedisError::Unavailable(Unavailable::new(
        UnavailableKind::LocalFull,
        format!("{e} (after: {unavailable})"),
    ))
}

impl RedisLimiter<LeakyMeterKeys> {
    /// Gives `n` requests for `key` a place in the meter's virtual queue: they may act after
    /// [`Scheduled::delay`] (measured from the server's reading), so that callers leave one
    /// interval apart; `n = 0` asks what a request would get, writing nothing.
    ///
    /// Under [`FailurePolicy::Local`] the local meter can only admit at once (it has no
    /// scheduling): a request it admits is answered with a zero delay, and
    /// [`Scheduled::depart_at`] on the local limiter's clock. An admission by
    /// [`FailurePolicy::Open`] also has a zero delay, and knows no clock (`depart_at` is 0).
    ///
    /// # Errors
    ///
    /// [`RedisError::Denied`] when the queue has no room for `n` now; otherwise as
    /// [`RedisLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use std::time::Duration;
    /// use tollgate::keyed::LeakyMeterKeys;
    /// use tollgate::redis::{FailurePolicy, RedisLimiter};
    /// use tollgate::Quota;
    /// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
    /// let conn = redis::Client::open(url)?.get_connection_manager().await?;
    /// let meter = RedisLimiter::<LeakyMeterKeys>::builder(conn, Quota::per_second(10)?)
    ///     .prefix("docs-schedule")
    ///     .build(FailurePolicy::Closed)?;
    /// let key = format!("crawler-{}", std::process::id());
    /// let first = meter.schedule_key_n(&key, 1).await?;
    /// let second = meter.schedule_key_n(&key, 1).await?;
    /// assert_eq!(first.delay(), Duration::ZERO);
    /// assert!(second.delay() > Duration::from_millis(90)); // about one interval later
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub async fn schedule_key_n(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
    ) -> Result<Scheduled, RedisError> {
        let answer = self.schedule(key.as_ref(), n).await;
        #[cfg(feature = "metrics")]
        self.outcomes.record(&answer);
        answer
    }

    /// [`RedisLimiter::schedule_key_n`], uncounted.
    async fn schedule(&self, key: &[u8], n: u64) -> Result<Scheduled, RedisError> {
        let config = self.config();
        let name = self.precheck(&config, key, n)?;
        match self.decide(&config, &name, "schedule", n, &[]).await {
            Ok(reply) => reply
                .scheduled(config.plan.tick)
                .map_err(RedisError::Denied),
            Err(unavailable) => {
                let now = match &self.failure {
                    FailurePolicy::Local(local) => KeyedLimit::<[u8]>::now(local).as_u64(),
                    _ => 0,
                };
                self.fallback(key, n, Ask::Schedule, unavailable)
                    .map(|a| Scheduled::at_once(now, a))
            }
        }
    }
}

/// The answer of [`RedisLimiter::lease_key`]: the tokens taken, and when none were, how long until
/// one is there.
///
/// # Examples
///
/// See [`RedisLimiter::lease_key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub(crate) granted: u64,
    pub(crate) retry_after: Duration,
    pub(crate) full_after: Duration,
}

impl Lease {
    /// The tokens taken.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter::lease_key`].
    pub fn granted(&self) -> u64 {
        self.granted
    }

    /// When no token was taken, the time until one is there; zero otherwise.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter::lease_key`].
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// The time until the key's bucket is full again after this lease, if nothing else is taken
    /// (zero when it is full now). A [`LeasedBucket`](super::LeasedBucket) waits from it until a
    /// whole batch is there before its next lease.
    ///
    /// # Examples
    ///
    /// See [`RedisLimiter::lease_key`].
    pub fn full_after(&self) -> Duration {
        self.full_after
    }
}

impl RedisLimiter<TokenBucketKeys> {
    /// Gives back `give_back` unspent tokens of `key` (as
    /// [`TokenBucket::refund`](crate::TokenBucket::refund) does: never above the capacity, never
    /// moving the state before now), then takes as many whole tokens as are there, up to `up_to`,
    /// in one call: the lease a [`LeasedBucket`](super::LeasedBucket) spends locally. `up_to = 0`
    /// only gives back.
    ///
    /// The [`FailurePolicy`] does not apply: a lease admits nothing by itself.
    ///
    /// # Errors
    ///
    /// [`RedisError::InsufficientCapacity`] for `up_to` or `give_back` over the capacity,
    /// [`RedisError::KeyTooLong`], or [`RedisError::Unavailable`] when Redis could not decide.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::redis::{FailurePolicy, RedisLimiter};
    /// use tollgate::Quota;
    /// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
    /// let conn = redis::Client::open(url)?.get_connection_manager().await?;
    /// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(10)?)
    ///     .prefix("docs-lease")
    ///     .build(FailurePolicy::Closed)?;
    /// let key = format!("batch-{}", std::process::id());
    /// assert_eq!(limiter.lease_key(&key, 8, 0).await?.granted(), 8);
    /// let rest = limiter.lease_key(&key, 8, 0).await?;
    /// assert_eq!(rest.granted(), 2); // only 2 were left
    /// let none = limiter.lease_key(&key, 8, 0).await?;
    /// assert_eq!(none.granted(), 0);
    /// assert!(none.retry_after().as_secs() <= 6); // one token every 6 s
    /// assert!(none.full_after().as_secs() <= 60); // all 10 back within a minute
    /// // Giving 5 back makes 5 available again.
    /// assert_eq!(limiter.lease_key(&key, 8, 5).await?.granted(), 5);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub async fn lease_key(
        &self,
        key: impl AsRef<[u8]>,
        up_to: u64,
        give_back: u64,
    ) -> Result<Lease, RedisError> {
        let name = self.key_name(key)?;
        // One read of the quota: the capacity checked is the one the script is sent.
        let config = self.config();
        for n in [up_to, give_back] {
            InsufficientCapacity::check(n, config.capacity)
                .map_err(RedisError::InsufficientCapacity)?;
        }
        self.lease_name(&config, &name, up_to, give_back).await
    }

    /// Takes as many whole tokens as `key` has now, at most `n` (any `n`: at most the capacity is
    /// ever there), in one call: the Redis form of
    /// [`TokenBucket::take_up_to`](crate::TokenBucket::take_up_to), decided by the same script as
    /// a lease. `n = 0` is a query (a peek of nothing). When Redis cannot decide, the failure
    /// policy answers: `Closed`, the error; `Open`, as many as a full bucket holds (at most `n`);
    /// `Local`, the local limiter's own
    /// [`take_up_to_key`](crate::keyed::KeyedLimiter::take_up_to_key).
    ///
    /// # Errors
    ///
    /// [`RedisError::Denied`] for one token when the key has no whole token (nothing is taken);
    /// [`RedisError::KeyTooLong`]; [`RedisError::Unavailable`] as for
    /// [`RedisLimiter::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::keyed::TokenBucketKeys;
    /// use tollgate::redis::{FailurePolicy, RedisLimiter};
    /// use tollgate::Quota;
    /// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
    /// let conn = redis::Client::open(url)?.get_connection_manager().await?;
    /// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_minute(5)?)
    ///     .prefix("docs-take-up-to")
    ///     .build(FailurePolicy::Closed)?;
    /// let key = format!("crawler-{}", std::process::id());
    /// assert_eq!(limiter.take_up_to_key(&key, 3).await?.taken(), 3);
    /// assert_eq!(limiter.take_up_to_key(&key, u64::MAX).await?.taken(), 2); // what was left
    /// assert!(limiter.take_up_to_key(&key, 1).await.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub async fn take_up_to_key(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
    ) -> Result<Partial, RedisError> {
        let key = key.as_ref();
        let answer = if n == 0 {
            self.admission(key, 0, Ask::Peek)
                .await
                .map(|admitted| Partial::new(0, admitted))
        } else {
            self.take_up_to(key, n).await
        };
        // One decision per call, whatever `n` (see `crate::metrics`).
        #[cfg(feature = "metrics")]
        self.outcomes.record(&answer);
        answer
    }

    /// [`RedisLimiter::take_up_to_key`] for `n >= 1`, uncounted.
    async fn take_up_to(&self, key: &[u8], n: u64) -> Result<Partial, RedisError> {
        let name = self.key_name(key)?;
        let config = self.config();
        let up_to = n.min(config.capacity);
        match self.decide(&config, &name, "lease", up_to, &[0]).await {
            Ok(reply) => {
                let taken = reply.backlog;
                reply
                    .outcome(config.plan.tick)
                    .map(|admitted| Partial::new(taken, admitted))
                    .map_err(RedisError::Denied)
            }
            // The local limiter takes what it has, up to `n`, as the call would have.
            Err(unavailable) => self.fall_back(
                &self.failure,
                unavailable,
                || Partial::new(up_to, open_admission()),
                |local, unavailable| local_answer(local.take_up_to_key(key, n), unavailable),
            ),
        }
    }

    /// A lease on the Redis key `name` (already checked), sent with `config`, the quota the caller
    /// read once for the call.
    pub(crate) async fn lease_name(
        &self,
        config: &Config,
        name: &[u8],
        up_to: u64,
        give_back: u64,
    ) -> Result<Lease, RedisError> {
        let reply = self
            .decide(config, name, "lease", up_to, &[give_back])
            .await?;
        let span = |ticks: u64| {
            let nanos = u128::from(ticks) * u128::from(config.plan.tick);
            Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
        };
        Ok(Lease {
            granted: reply.backlog,
            retry_after: if reply.backlog > 0 {
                Duration::ZERO
            } else {
                span(reply.wait)
            },
            // `reset`: the ticks until the state's theoretical arrival time, when it is full.
            full_after: span(reply.reset),
        })
    }
}

/// A [`RedisLimiter`]'s quota and what its script is sent for it.
#[derive(Debug)]
pub(crate) struct Config {
    pub(crate) quota: Quota,
    pub(crate) capacity: u64,
    pub(crate) plan: Plan,
}

impl Config {
    fn new<A: RedisAlgorithm>(quota: Quota) -> Result<Config, BuildError> {
        Ok(Config {
            plan: A::plan(&quota)?,
            capacity: quota.capacity(),
            quota,
        })
    }
}

/// The kind of a client error.
fn classify(e: ::redis::RedisError) -> Unavailable {
    let text = e.to_string();
    let kind = if e.is_timeout() {
        UnavailableKind::Timeout
    } else if e.code() == Some("TOLLGATE") && e.detail().is_some_and(|d| d.starts_with("foreign")) {
        UnavailableKind::ForeignValue
    } else if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || matches!(
            e.kind(),
            ErrorKind::ClusterConnectionNotFound | ErrorKind::Io | ErrorKind::Client
        )
    {
        UnavailableKind::Connection
    } else if matches!(e.kind(), ErrorKind::Parse | ErrorKind::UnexpectedReturnType) {
        UnavailableKind::BadReply
    } else {
        UnavailableKind::Server
    };
    Unavailable::new(kind, text)
}

impl<A: RedisAlgorithm> fmt::Debug for RedisLimiter<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("algorithm", &A::SUFFIX)
            .field("quota", &self.quota())
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("timeout", &self.timeout)
            .field("failure", &self.failure)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl<A: RedisAlgorithm> fmt::Debug for RedisLimiterBuilder<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiterBuilder")
            .field("algorithm", &A::SUFFIX)
            .field("quota", &self.quota)
            .field("prefix", &String::from_utf8_lossy(&self.prefix))
            .field("timeout", &self.timeout)
            .field("threshold", &self.threshold)
            .field("cool_down", &self.cool_down)
            .finish_non_exhaustive()
    }
}
