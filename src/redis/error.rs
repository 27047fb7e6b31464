//! What the Redis limiter answers when it does not admit, and why a limiter could not be built.

use std::fmt;

use super::keys::KeyTooLong;
use crate::outcome::{AcquireError, Denied, InsufficientCapacity};
use crate::quota::QuotaError;
use crate::reservation::MaxWaitError;

/// A [`RedisLimiter`](super::RedisLimiter) could not be built: the field at fault and the range it
/// accepts.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use tollgate::keyed::FixedWindowKeys;
/// use tollgate::redis::{FailurePolicy, RedisLimiter};
/// use tollgate::Quota;
/// let client = redis::Client::open("redis://127.0.0.1:6379/")?;
/// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
/// // A window must be a whole number of microseconds (Redis's clock has no finer resolution).
/// let quota = Quota::per_period(3, std::time::Duration::from_nanos(1_500))?;
/// let err = RedisLimiter::<FixedWindowKeys>::builder(conn, quota)
///     .build(FailurePolicy::Closed)
///     .unwrap_err();
/// assert_eq!(err.field(), "period");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildError {
    field: &'static str,
    accepted: String,
}

impl BuildError {
    pub(crate) fn new(field: &'static str, accepted: String) -> BuildError {
        BuildError { field, accepted }
    }

    /// The builder argument or quota field at fault: `"prefix"`, `"capacity"`, `"period"`, or a
    /// [`QuotaError::field`].
    ///
    /// # Examples
    ///
    /// See [`BuildError`].
    pub fn field(&self) -> &'static str {
        self.field
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: the accepted range is {}", self.field, self.accepted)
    }
}

impl std::error::Error for BuildError {}

impl From<QuotaError> for BuildError {
    fn from(e: QuotaError) -> BuildError {
        BuildError::new(e.field(), e.to_string())
    }
}

/// Why a call did not reach a decision on the server.
///
/// # Examples
///
/// ```
/// use tollgate::redis::UnavailableKind;
/// assert_ne!(UnavailableKind::Timeout, UnavailableKind::Connection);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnavailableKind {
    /// No answer within the limiter's timeout (a slow, hung or unreachable server).
    Timeout,
    /// The connection failed or was refused.
    Connection,
    /// The server answered with an error (a cluster that is down, a server still loading, a
    /// script error, a structure of another type at the key: `WRONGTYPE`).
    Server,
    /// The server's reply was not the script's shape.
    BadReply,
    /// The key holds a value the script did not write (a string that is not a tollgate state).
    ForeignValue,
    /// The circuit breaker is open: recent calls failed, so this one did not go to Redis.
    BreakerOpen,
    /// The [`FailurePolicy::Local`](super::FailurePolicy::Local) limiter is full of keys.
    LocalFull,
}

/// A call that did not reach a decision on the server: its kind and the detail (the server's or
/// the client's error text).
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use std::time::Duration;
/// use tollgate::redis::{FailurePolicy, RedisError, RedisLimiter, UnavailableKind};
/// use tollgate::keyed::TokenBucketKeys;
/// use tollgate::Quota;
/// // Nothing listens on port 1: the call fails, within its timeout, and says why.
/// let client = redis::Client::open("redis://127.0.0.1:1/")?;
/// let conn = client.get_connection_manager_lazy(redis::aio::ConnectionManagerConfig::new())?;
/// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(10)?)
///     .timeout(Duration::from_millis(200))
///     .build(FailurePolicy::Closed)?;
/// match limiter.check_key("client-1").await {
///     Err(RedisError::Unavailable(u)) => {
///         assert!(matches!(u.kind(), UnavailableKind::Connection | UnavailableKind::Timeout));
///         assert!(!u.detail().is_empty());
///     }
///     other => panic!("{other:?}"),
/// }
/// assert_eq!(limiter.stats().failures, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    kind: UnavailableKind,
    detail: String,
}

impl Unavailable {
    pub(crate) fn new(kind: UnavailableKind, detail: impl Into<String>) -> Unavailable {
        Unavailable {
            kind,
            detail: detail.into(),
        }
    }

    /// Why.
    ///
    /// # Examples
    ///
    /// See [`Unavailable`].
    pub fn kind(&self) -> UnavailableKind {
        self.kind
    }

    /// The error text, from the server or the client.
    ///
    /// # Examples
    ///
    /// See [`Unavailable`].
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            UnavailableKind::Timeout => "timed out",
            UnavailableKind::Connection => "connection failed",
            UnavailableKind::Server => "server error",
            UnavailableKind::BadReply => "reply of the wrong shape",
            UnavailableKind::ForeignValue => "foreign value at the key",
            UnavailableKind::BreakerOpen => "circuit breaker open",
            UnavailableKind::LocalFull => "local fallback limiter full",
        };
        write!(f, "redis unavailable: {what}: {}", self.detail)
    }
}

impl std::error::Error for Unavailable {}

/// Why a [`RedisLimiter`](super::RedisLimiter) call was not admitted.
///
/// # Examples
///
/// ```
/// use tollgate::redis::{KeyTooLong, RedisError};
/// let err = RedisError::KeyTooLong(KeyTooLong { len: 4096 });
/// assert!(err.to_string().contains("key: 4096 bytes"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RedisError {
    /// Refused for now: not enough capacity. [`Denied::retry_at`] is on the Redis server's clock
    /// (Unix time in nanoseconds) for decisions made there; [`Denied::retry_after`] is a span and
    /// needs no common clock.
    Denied(Denied),
    /// A request for more than the capacity: it can never succeed. Decided on the client, with no
    /// round trip.
    InsufficientCapacity(InsufficientCapacity),
    /// A key longer than [`MAX_KEY_LEN`](super::MAX_KEY_LEN), refused on the client.
    KeyTooLong(KeyTooLong),
    /// No decision could be made on the server, and the [`FailurePolicy`](super::FailurePolicy)
    /// is `Closed` (or the fallback could not decide either).
    Unavailable(Unavailable),
    /// A reservation's `max_wait` above [`reservation::MAX_WAIT`](crate::reservation::MAX_WAIT)
    /// ([`RedisLimiter::reserve_key_n`](super::RedisLimiter::reserve_key_n)), refused on the
    /// client.
    MaxWait(MaxWaitError),
}

impl fmt::Display for RedisError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedisError::Denied(d) => d.fmt(f),
            RedisError::InsufficientCapacity(e) => e.fmt(f),
            RedisError::KeyTooLong(e) => e.fmt(f),
            RedisError::Unavailable(e) => e.fmt(f),
            RedisError::MaxWait(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for RedisError {}

impl From<AcquireError> for RedisError {
    fn from(e: AcquireError) -> RedisError {
        match e {
            AcquireError::Denied(d) => RedisError::Denied(d),
            AcquireError::InsufficientCapacity(e) => RedisError::InsufficientCapacity(e),
        }
    }
}

impl From<Unavailable> for RedisError {
    fn from(e: Unavailable) -> RedisError {
        RedisError::Unavailable(e)
    }
}
