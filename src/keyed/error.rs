//! Why a keyed limiter did not admit a request: [`KeyedError`] and its no-room case,
//! [`TooManyKeys`].

use std::fmt;

use crate::outcome::{AcquireError, Denied, InsufficientCapacity};

/// A new key found every place taken by an active key, under [`Overflow::Refuse`](super::Overflow::Refuse): not a rate
/// decision about the key, so there is no `retry_after`; places free up as active keys go idle.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter, TooManyKeys};
/// use tollgate::{ManualClock, Quota};
/// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new())
///     .with_max_keys(0);
/// assert_eq!(limiter.check_key(&7), Err(KeyedError::TooManyKeys(TooManyKeys { max_keys: 0 })));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooManyKeys {
    /// The limiter's bound on the number of keys.
    pub max_keys: usize,
}

impl fmt::Display for TooManyKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "no room for a new key: all {} places are held by active keys",
            self.max_keys
        )
    }
}

impl std::error::Error for TooManyKeys {}

/// Why a [`KeyedLimiter`](super::KeyedLimiter) did not admit a request.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter};
/// use tollgate::{ManualClock, Quota};
/// let limiter: KeyedLimiter<String, _, _> = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
/// match limiter.check_key_n("k", 3) {
///     Err(KeyedError::InsufficientCapacity(e)) => assert_eq!(e.capacity, 2),
///     other => panic!("{other:?}"),
/// }
/// limiter.check_key_n("k", 2).unwrap();
/// let err = limiter.check_key("k").unwrap_err();
/// assert_eq!(err.denied().map(|d| d.retry_after().as_millis()), Some(500));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
///
/// Non-exhaustive: kinds of refusal will be added (a shared backend's failures), so a `match`
/// outside this crate needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyedError {
    /// Not now; see [`Denied::retry_after`].
    Denied(Denied),
    /// Never: more than the capacity was asked for.
    InsufficientCapacity(InsufficientCapacity),
    /// A new key found no room (see [`Overflow::Refuse`](super::Overflow::Refuse)).
    TooManyKeys(TooManyKeys),
}

impl KeyedError {
    /// The denial, if this is one.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::keyed::KeyedLimiter;
    /// use tollgate::{ManualClock, Quota};
    /// let limiter: KeyedLimiter<u8, _, _> = KeyedLimiter::with_clock(Quota::per_second(1)?, ManualClock::new());
    /// assert!(limiter.check_key_n(&1, 2).unwrap_err().denied().is_none()); // never, not "later"
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    pub fn denied(&self) -> Option<&Denied> {
        match self {
            KeyedError::Denied(d) => Some(d),
            KeyedError::InsufficientCapacity(_) | KeyedError::TooManyKeys(_) => None,
        }
    }
}

/// A direct limiter's refusal as a keyed one, so that code that consults both (a global cap in
/// front of per-client limits) answers with one error type and `?`.
///
/// # Examples
///
/// ```
/// use tollgate::keyed::{KeyedError, KeyedLimiter};
/// use tollgate::{ManualClock, Quota, TokenBucket};
///
/// // 5 a second per client, 3 a second for all clients together.
/// let per_client: KeyedLimiter<u32, _, _> =
///     KeyedLimiter::with_clock(Quota::per_second(5)?, ManualClock::new());
/// let global = TokenBucket::with_clock(Quota::per_second(3)?, ManualClock::new());
/// let admit = |client: u32, n: u64| -> Result<(), KeyedError> {
///     global.peek_n(n)?; // refuse early, taking nothing, when the global cap is out
///     per_client.check_key_n(&client, n)?;
///     global.try_acquire_n(n)?; // an AcquireError, converted
///     Ok(())
/// };
/// assert!(admit(1, 2).is_ok());
/// assert!(matches!(admit(2, 2), Err(KeyedError::Denied(_)))); // only 1 left globally
/// assert!(matches!(admit(3, 4), Err(KeyedError::InsufficientCapacity(_)))); // never, globally
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
impl From<AcquireError> for KeyedError {
    fn from(e: AcquireError) -> KeyedError {
        match e {
            AcquireError::Denied(d) => KeyedError::Denied(d),
            AcquireError::InsufficientCapacity(e) => KeyedError::InsufficientCapacity(e),
        }
    }
}

impl From<Denied> for KeyedError {
    fn from(d: Denied) -> KeyedError {
        KeyedError::Denied(d)
    }
}

impl From<InsufficientCapacity> for KeyedError {
    fn from(e: InsufficientCapacity) -> KeyedError {
        KeyedError::InsufficientCapacity(e)
    }
}

impl From<TooManyKeys> for KeyedError {
    fn from(e: TooManyKeys) -> KeyedError {
        KeyedError::TooManyKeys(e)
    }
}

impl fmt::Display for KeyedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyedError::Denied(d) => d.fmt(f),
            KeyedError::InsufficientCapacity(e) => e.fmt(f),
            KeyedError::TooManyKeys(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for KeyedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KeyedError::Denied(d) => Some(d),
            KeyedError::InsufficientCapacity(e) => Some(e),
            KeyedError::TooManyKeys(e) => Some(e),
        }
    }
}
