//! [`RedisAllOf`]: several token-bucket limits per key in Redis ("10 a second and 1 000 an
//! hour"), decided all or none by one script call over keys that share the key's hash tag.

use std::fmt;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::Value;

use super::error::{BuildError, RedisError, Unavailable, UnavailableKind};
use super::failure::{Choice, FailurePolicy, Fallback, Stats};
use super::keys;
use super::limiter::{local_answer, open_admission};
use super::limiter::{RedisLimiter, RedisLimiterBuilder};
use super::reply::{decode_many, Reply};
use super::script::sealed::Plan;
use super::script::{token_bucket_all, token_bucket_plan};
use crate::all_of::{binds, AllOf};
use crate::clock::Clock;
use crate::keyed::{KeyedLimiter, TokenBucketKeys};
use crate::limiter::KeyedLimit;
use crate::outcome::{Admitted, Denied, InsufficientCapacity};
use crate::quota::Quota;

/// The most limits a [`RedisAllOf`] holds: 64.
pub const MAX_LIMITS: usize = 64;

/// What a [`RedisAllOf`] answers when Redis cannot decide: as [`FailurePolicy`] for one limit,
/// with an in-process [`AllOf`] of keyed token buckets for `Local`. There is no default.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::KeyedLimiter;
/// use tollgate::redis::AllOfFailurePolicy;
/// use tollgate::{AllOf, Quota};
/// // 10 a second and 1 000 an hour across 4 replicas: while Redis is away, each its share.
/// let local = AllOfFailurePolicy::Local(AllOf::new([
///     KeyedLimiter::new(Quota::per_second(10)?.with_capacity(3)?),
///     KeyedLimiter::new(Quota::per_hour(250)?),
/// ])?);
/// assert!(matches!(local, AllOfFailurePolicy::Local(_)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
// One per limiter, moved in once (as `FailurePolicy`).
#[allow(clippy::large_enum_variant)]
#[non_exhaustive]
pub enum AllOfFailurePolicy {
    /// Refuse: the call answers [`RedisError::Unavailable`].
    Closed,
    /// Admit, with no tokens known, counted in [`Stats::open_admissions`].
    Open,
    /// Decide in process: these limits (usually each quota divided by the number of replicas)
    /// answer, all or none, counted in [`Stats::local_decisions`]. Their state is separate from
    /// Redis's and is not merged back when Redis returns.
    Local(AllOf<KeyedLimiter<Vec<u8>, TokenBucketKeys>>),
}

impl fmt::Debug for AllOfFailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllOfFailurePolicy::Closed => f.write_str("Closed"),
            AllOfFailurePolicy::Open => f.write_str("Open"),
            AllOfFailurePolicy::Local(l) => {
                let quotas: Vec<Quota> = l.limits().iter().map(|k| k.quota()).collect();
                f.debug_tuple("Local").field(&quotas).finish()
            }
        }
    }
}

impl Fallback for AllOfFailurePolicy {
    type Limits = AllOf<KeyedLimiter<Vec<u8>, TokenBucketKeys>>;

    fn choice(&self) -> Choice<'_, Self::Limits> {
        match self {
            AllOfFailurePolicy::Closed => Choice::Closed,
            AllOfFailurePolicy::Open => Choice::Open,
            AllOfFailurePolicy::Local(local) => Choice::Local(local),
        }
    }
}

/// Several token-bucket limits per key, each of which must admit a request, all or none, with
/// their state in Redis: the Redis form of a keyed [`AllOf`] ("10 a second and 1 000 an hour per
/// client, across every replica").
///
/// # How it decides
///
/// One call is one `EVALSHA` over one Redis key per limit: `prefix:{key}:tb:0`,
/// `prefix:{key}:tb:1`, ... in the order the quotas were given. The names share the key's hash
/// tag, so they live in one slot and one script may touch them all on Redis Cluster. The script
/// judges every limit at one reading of the server's clock, writing nothing; only when every one
/// admits does it write them all. So, unlike the in-process [`AllOf`], there is no window in
/// which a refused request holds tokens: each limit keeps its own bound (at most `C_i + R_i × t`
/// over any interval `t` from full), and a request is admitted exactly when every limit has room
/// for it.
///
/// # Answers
///
/// As [`AllOf`]'s: an admission answers the **binding** limit's [`Admitted`] (the fewest
/// remaining; ties, the one full again last; ties again, the first); a refusal answers the
/// **longest** [`Denied::retry_after`] of the limits that refuse (the first of equals); a request
/// for more than a limit's capacity is [`RedisError::InsufficientCapacity`] for the first such
/// limit, without a round trip; `n = 0` is a query of every limit. Each limit converts state
/// written under another quota as one [`RedisLimiter`] does (see the [module
/// docs](super#changing-a-quota)): reordering the quotas is a quota change for each position.
///
/// Only the token bucket: as for [`AllOf`], a limit must be one whose tokens a refusal never
/// keeps, and the windows and the meter have no such script here.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use tollgate::redis::{AllOfFailurePolicy, RedisAllOf, RedisError};
/// use tollgate::Quota;
/// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
/// let conn = redis::Client::open(url)?.get_connection_manager().await?;
/// let limits = RedisAllOf::builder(conn, [
///     Quota::per_second(10)?,
///     Quota::per_hour(1_000)?.with_capacity(4)?,
/// ])
/// .prefix("docs-all-of")
/// .build(AllOfFailurePolicy::Closed)?;
/// let key = format!("client-{}", std::process::id());
/// // The hourly limit binds: 4 in a burst, then one every 3.6 s.
/// assert_eq!(limits.check_key_n(&key, 3).await?.remaining(), 1);
/// // 2 more fit the first limit but not the second: refused, and nothing is taken.
/// match limits.check_key_n(&key, 2).await {
///     Err(RedisError::Denied(d)) => assert!(d.retry_after().as_millis() <= 3_600),
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(limits.check_key(&key).await?.remaining(), 0);
/// // One round trip per decision (two more on a server that had not loaded the script yet).
/// let stats = limits.stats();
/// assert_eq!(stats.round_trips - 2 * stats.reloads, stats.decisions);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
pub struct RedisAllOf {
    /// The connection, prefix, timeout, breaker, counters and name (its own policy is `Closed`:
    /// this type answers failures with its own).
    inner: RedisLimiter<TokenBucketKeys>,
    quotas: Box<[Quota]>,
    plans: Box<[Plan]>,
    /// The key-name suffix of each limit: `tb:0`, `tb:1`, ...
    suffixes: Box<[String]>,
    failure: AllOfFailurePolicy,
}

/// Builds a [`RedisAllOf`]: the connection and the quotas, then the optional settings (as
/// [`RedisLimiterBuilder`]'s), then [`build`](RedisAllOfBuilder::build) with the failure policy.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use std::time::Duration;
/// use tollgate::redis::{AllOfFailurePolicy, RedisAllOf};
/// use tollgate::Quota;
/// // A lazy connection manager connects on the first call, so building needs no server.
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
/// let limits = RedisAllOf::builder(conn.clone(), [Quota::per_second(10)?, Quota::per_hour(1_000)?])
///     .prefix("api")
///     .timeout(Duration::from_millis(20))
///     .breaker(3, Duration::from_millis(500))
///     .build(AllOfFailurePolicy::Open)?;
/// assert_eq!(limits.key_names("client-7")?, [b"api:{client-7}:tb:0".to_vec(), b"api:{client-7}:tb:1".to_vec()]);
/// // No quota at all names the field.
/// let err = RedisAllOf::builder(conn, []).build(AllOfFailurePolicy::Closed).unwrap_err();
/// assert_eq!(err.field(), "quotas");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
pub struct RedisAllOfBuilder {
    /// The settings, on a limiter builder for the first quota (none without a quota: `build`
    /// then refuses).
    inner: Option<RedisLimiterBuilder<TokenBucketKeys>>,
    quotas: Vec<Quota>,
}

impl RedisAllOf {
    /// A builder for limits enforcing every one of `quotas` per key through `conn` (any
    /// cloneable async connection, as for [`RedisLimiter::builder`]).
    ///
    /// # Examples
    ///
    /// See [`RedisAllOfBuilder`].
    pub fn builder<C>(conn: C, quotas: impl IntoIterator<Item = Quota>) -> RedisAllOfBuilder
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let quotas: Vec<Quota> = quotas.into_iter().collect();
        // The inner limiter carries the connection and the settings, under the first quota.
        RedisAllOfBuilder {
            inner: quotas.first().map(|q| RedisLimiter::builder(conn, *q)),
            quotas,
        }
    }
}

impl RedisAllOfBuilder {
    /// The first part of every Redis key these limits write (`prefix:{key}:tb:i`; default
    /// `tollgate`): at most 256 bytes, without `{` or `}`.
    ///
    /// # Examples
    ///
    /// See [`RedisAllOfBuilder`].
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.inner = self.inner.map(|b| b.prefix(prefix));
        self
    }

    /// The most a call may take (default [`DEFAULT_TIMEOUT`](super::DEFAULT_TIMEOUT)); from
    /// 1 µs to [`MAX_WAIT`](super::MAX_WAIT).
    ///
    /// # Examples
    ///
    /// See [`RedisAllOfBuilder`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.inner = self.inner.map(|b| b.timeout(timeout));
        self
    }

    /// The circuit breaker, as [`RedisLimiterBuilder::breaker`].
    ///
    /// # Examples
    ///
    /// See [`RedisAllOfBuilder`].
    pub fn breaker(mut self, failures: u32, cool_down: Duration) -> Self {
        self.inner = self.inner.map(|b| b.breaker(failures, cool_down));
        self
    }

    /// The name in metrics and events, as [`RedisLimiterBuilder::name`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::redis::{AllOfFailurePolicy, RedisAllOf};
    /// use tollgate::Quota;
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
    /// let limits = RedisAllOf::builder(conn, [Quota::per_second(10)?, Quota::per_hour(1_000)?])
    ///     .name("api-per-client")
    ///     .build(AllOfFailurePolicy::Closed)?;
    /// # drop(limits);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.inner = self.inner.map(|b| b.name(name));
        self
    }

    /// Tests only: every call sends `clock`'s reading instead of letting the script read the
    /// server's `TIME` (see [`RedisLimiterBuilder`]'s).
    #[doc(hidden)]
    pub fn client_clock<C: Clock + 'static>(mut self, clock: C) -> Self {
        self.inner = self.inner.map(|b| b.client_clock(clock));
        self
    }

    /// The limits, answering `failure` when Redis cannot decide.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] naming the field: `quotas` when there are none or more than
    /// [`MAX_LIMITS`]; otherwise as [`RedisLimiterBuilder::build`] for each quota (a burst
    /// window over 2^52 µs names `capacity`) and for the settings.
    ///
    /// # Examples
    ///
    /// See [`RedisAllOfBuilder`].
    pub fn build(self, failure: AllOfFailurePolicy) -> Result<RedisAllOf, BuildError> {
        let inner = match self.inner {
            Some(inner) if self.quotas.len() <= MAX_LIMITS => inner,
            _ => {
                return Err(BuildError::new(
                    "quotas",
                    format!("1..={MAX_LIMITS} quotas, got {}", self.quotas.len()),
                ))
            }
        };
        let plans = self
            .quotas
            .iter()
            .map(token_bucket_plan)
            .collect::<Result<Box<[Plan]>, BuildError>>()?;
        let inner = inner.build(FailurePolicy::Closed)?;
        Ok(RedisAllOf {
            inner,
            suffixes: (0..self.quotas.len()).map(|i| format!("tb:{i}")).collect(),
            quotas: self.quotas.into_boxed_slice(),
            plans,
            failure,
        })
    }
}

/// What a call asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AllOfAsk {
    Take,
    Peek,
}

impl RedisAllOf {
    /// Admits one request for `key` if every limit admits it.
    ///
    /// # Errors
    ///
    /// As [`RedisAllOf::check_key_n`].
    ///
    /// # Examples
    ///
    /// See [`RedisAllOf`].
    pub async fn check_key(&self, key: impl AsRef<[u8]>) -> Result<Admitted, RedisError> {
        self.check_key_n(key, 1).await
    }

    /// Admits `n` requests for `key`, all or none, in every limit or in none; `n = 0` is a query
    /// that writes nothing.
    ///
    /// # Errors
    ///
    /// [`RedisError::Denied`] when a limit has not enough now (the longest wait of those that
    /// refuse); [`RedisError::InsufficientCapacity`] for `n` over a limit's capacity and
    /// [`RedisError::KeyTooLong`], both without a round trip; [`RedisError::Unavailable`] when
    /// Redis could not decide and the policy is `Closed` (or its local limits could not decide
    /// either).
    ///
    /// # Examples
    ///
    /// See [`RedisAllOf`].
    pub async fn check_key_n(&self, key: impl AsRef<[u8]>, n: u64) -> Result<Admitted, RedisError> {
        let ask = if n == 0 {
            AllOfAsk::Peek
        } else {
            AllOfAsk::Take
        };
        let answer = self.decide(key.as_ref(), n, ask).await.1;
        // One decision per call, however many limits (see `crate::metrics`); a query is not one.
        #[cfg(feature = "metrics")]
        if ask == AllOfAsk::Take {
            self.inner.record(&answer);
        }
        answer
    }

    /// [`RedisAllOf::check_key_n`] with the index (in [`RedisAllOf::quotas`]) of the limit the
    /// answer is from: for an admission, the binding limit; for a denial, the limit whose wait is
    /// reported; for [`RedisError::InsufficientCapacity`], the limit whose capacity is too small.
    /// `None` when no limit decided (a key too long, Redis unavailable, or the failure policy
    /// answered).
    ///
    /// # Errors
    ///
    /// As [`RedisAllOf::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::redis::{AllOfFailurePolicy, RedisAllOf};
    /// use tollgate::Quota;
    /// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
    /// let conn = redis::Client::open(url)?.get_connection_manager().await?;
    /// let limits = RedisAllOf::builder(conn, [Quota::per_second(10)?, Quota::per_minute(100)?.with_capacity(3)?])
    ///     .prefix("docs-all-of-indexed")
    ///     .build(AllOfFailurePolicy::Closed)?;
    /// let key = format!("client-{}", std::process::id());
    /// let (at, answer) = limits.check_key_n_indexed(&key, 1).await;
    /// assert_eq!((at, answer?.remaining()), (Some(1), 2)); // the burst of 3 binds
    /// let (at, answer) = limits.check_key_n_indexed(&key, 5).await;
    /// assert_eq!(at, Some(1)); // 5 is more than the second limit ever holds
    /// assert!(answer.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub async fn check_key_n_indexed(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
    ) -> (Option<usize>, Result<Admitted, RedisError>) {
        let ask = if n == 0 {
            AllOfAsk::Peek
        } else {
            AllOfAsk::Take
        };
        let answer = self.decide(key.as_ref(), n, ask).await;
        #[cfg(feature = "metrics")]
        if ask == AllOfAsk::Take {
            self.inner.record(&answer.1);
        }
        answer
    }

    /// The answer [`RedisAllOf::check_key_n`] would give now, admitting and writing nothing.
    ///
    /// # Errors
    ///
    /// As [`RedisAllOf::check_key_n`].
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::redis::{AllOfFailurePolicy, RedisAllOf};
    /// use tollgate::Quota;
    /// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
    /// let conn = redis::Client::open(url)?.get_connection_manager().await?;
    /// let limits = RedisAllOf::builder(conn, [Quota::per_second(5)?, Quota::per_hour(60)?.with_capacity(3)?])
    ///     .prefix("docs-all-of-peek")
    ///     .build(AllOfFailurePolicy::Closed)?;
    /// let key = format!("never-used-{}", std::process::id());
    /// assert_eq!(limits.peek_key_n(&key, 3).await?.remaining(), 0);
    /// assert!(limits.peek_key_n(&key, 4).await.is_err()); // more than the second's capacity
    /// assert_eq!(limits.peek_key_n(&key, 0).await?.remaining(), 3); // nothing was taken
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub async fn peek_key_n(&self, key: impl AsRef<[u8]>, n: u64) -> Result<Admitted, RedisError> {
        self.decide(key.as_ref(), n, AllOfAsk::Peek).await.1
    }

    /// Every limit's quota, in order.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    /// # rt.block_on(async {
    /// use tollgate::redis::{AllOfFailurePolicy, RedisAllOf};
    /// use tollgate::Quota;
    /// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
    /// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
    /// let quotas = [Quota::per_second(10)?, Quota::per_hour(1_000)?];
    /// let limits = RedisAllOf::builder(conn, quotas).build(AllOfFailurePolicy::Closed)?;
    /// assert_eq!(limits.quotas(), quotas);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # })
    /// # }
    /// ```
    pub fn quotas(&self) -> &[Quota] {
        &self.quotas
    }

    /// The names of the Redis keys that hold `key`'s state, one per limit in order:
    /// `prefix:{key}:tb:i`, the key escaped (see the [module docs](super#keys)).
    ///
    /// # Errors
    ///
    /// [`RedisError::KeyTooLong`] for a key over [`MAX_KEY_LEN`](super::MAX_KEY_LEN) bytes.
    ///
    /// # Examples
    ///
    /// See [`RedisAllOfBuilder`].
    pub fn key_names(&self, key: impl AsRef<[u8]>) -> Result<Vec<Vec<u8>>, RedisError> {
        self.suffixes
            .iter()
            .map(|s| keys::name(self.inner.prefix(), key.as_ref(), s))
            .collect::<Result<_, _>>()
            .map_err(RedisError::KeyTooLong)
    }

    /// What these limits have done since they were built (a call over every limit counts as one
    /// decision and one round trip).
    ///
    /// # Examples
    ///
    /// See [`RedisAllOf`].
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// The decision and the index of the limit it is from.
    async fn decide(
        &self,
        key: &[u8],
        n: u64,
        ask: AllOfAsk,
    ) -> (Option<usize>, Result<Admitted, RedisError>) {
        let names = match self.key_names(key) {
            Ok(names) => names,
            Err(e) => return (None, Err(e)),
        };
        for (i, q) in self.quotas.iter().enumerate() {
            if let Err(e) = InsufficientCapacity::check(n, q.capacity()) {
                return (Some(i), Err(RedisError::InsufficientCapacity(e)));
            }
        }
        let mut cmd = ::redis::cmd("EVALSHA");
        cmd.arg(token_bucket_all().get_hash()).arg(names.len());
        for name in &names {
            cmd.arg(name);
        }
        cmd.arg(match ask {
            AllOfAsk::Take => "take",
            AllOfAsk::Peek => "peek",
        })
        .arg(n);
        self.inner.reading_arg(&mut cmd);
        for plan in self.plans.iter() {
            for a in &plan.args {
                cmd.arg(*a);
            }
        }
        let count = self.plans.len();
        let check = |v: &Value| self.answer(&decode_many(v, count)?);
        match self.inner.decide_cmd(token_bucket_all(), &cmd, check).await {
            Ok((at, answer)) => (Some(at), answer.map_err(RedisError::Denied)),
            // The failure policy's answer.
            Err(unavailable) => {
                let local = |limits: &AllOf<_>, unavailable: &Unavailable| {
                    let answer = match ask {
                        AllOfAsk::Take => KeyedLimit::<[u8]>::check_key_n(limits, key, n),
                        AllOfAsk::Peek => KeyedLimit::<[u8]>::peek_key_n(limits, key, n),
                    };
                    local_answer(answer, unavailable)
                };
                let failure = &self.failure;
                let answer = self
                    .inner
                    .fall_back(failure, unavailable, open_admission, local);
                (None, answer)
            }
        }
    }

    /// The binding limit's admission when every limit admitted, else the longest refusal.
    fn answer(&self, replies: &[Reply]) -> Result<(usize, Result<Admitted, Denied>), Unavailable> {
        let mut binding: Option<(usize, Admitted)> = None;
        let mut longest: Option<(usize, Denied)> = None;
        for (i, (reply, plan)) in replies.iter().zip(self.plans.iter()).enumerate() {
            match reply.outcome(plan.tick) {
                Ok(a) => {
                    if binding.as_ref().is_none_or(|(_, b)| binds(&a, b)) {
                        binding = Some((i, a));
                    }
                }
                Err(d) => {
                    if longest
                        .as_ref()
                        .is_none_or(|(_, w)| d.retry_after() > w.retry_after())
                    {
                        longest = Some((i, d));
                    }
                }
            }
        }
        match (longest, binding) {
            (Some((i, d)), _) => Ok((i, Err(d))),
            (None, Some((i, a))) => Ok((i, Ok(a))),
            // `decode_many` answers one reply per limit, and there is at least one limit.
            (None, None) => Err(Unavailable::new(
                UnavailableKind::BadReply,
                "no limit answered",
            )),
        }
    }
}

impl fmt::Debug for RedisAllOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAllOf")
            .field("quotas", &self.quotas)
            .field("prefix", &String::from_utf8_lossy(self.inner.prefix()))
            .field("failure", &self.failure)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RedisAllOfBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisAllOfBuilder")
            .field("quotas", &self.quotas)
            .field("settings", &self.inner)
            .finish_non_exhaustive()
    }
}
