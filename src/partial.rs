//! [`Partial`]: the answer to a request for as many tokens as are there, at most `n`
//! ([`TokenBucket::take_up_to`](crate::TokenBucket::take_up_to),
//! [`ShardedBucket::take_up_to`](crate::ShardedBucket::take_up_to)).

use std::fmt;
use std::time::Duration;

use crate::outcome::Admitted;

/// Some tokens were taken: [`taken`](Partial::taken) of them, between 1 and the `n` asked for (0
/// only for a request of `n = 0`, a query), with the limiter's figures after the take.
///
/// A request for up to `n` takes `min(n, whole tokens there)`: Envoy's `allow_partial`,
/// Bucket4j's `tryConsumeAsMuchAsPossible`. When no whole token is there the answer is a
/// [`Denied`](crate::Denied) for one token (its `retry_after` is when one will be), and nothing is
/// taken. `n` may exceed the capacity: at most the capacity is ever there.
///
/// # Examples
///
/// ```
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(10)?, ManualClock::new());
/// bucket.try_acquire_n(7)?;
/// let part = bucket.take_up_to(5)?;
/// assert_eq!(part.taken(), 3); // all that was there
/// assert_eq!(part.remaining(), 0);
/// assert!(bucket.take_up_to(5).is_err()); // none left: a denial, nothing taken
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partial {
    taken: u64,
    admitted: Admitted,
}

impl Partial {
    pub(crate) fn new(taken: u64, admitted: Admitted) -> Partial {
        Partial { taken, admitted }
    }

    /// The tokens taken.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(4)?);
    /// assert_eq!(bucket.take_up_to(100)?.taken(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn taken(&self) -> u64 {
        self.taken
    }

    /// The admission of the tokens taken, as [`try_acquire_n`](crate::TokenBucket::try_acquire_n)
    /// of that many would report it.
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(4)?);
    /// assert_eq!(bucket.take_up_to(3)?.admitted().remaining(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn admitted(&self) -> Admitted {
        self.admitted
    }

    /// Whole tokens left after the take ([`Admitted::remaining`]).
    ///
    /// # Examples
    ///
    /// ```
    /// let bucket = tollgate::TokenBucket::new(tollgate::Quota::per_second(4)?);
    /// assert_eq!(bucket.take_up_to(1)?.remaining(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn remaining(&self) -> u64 {
        self.admitted.remaining()
    }

    /// The time until the limiter is full again if nothing else is taken
    /// ([`Admitted::reset_after`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{ManualClock, Quota, TokenBucket};
    /// let bucket = TokenBucket::with_clock(Quota::per_second(4)?, ManualClock::new());
    /// assert_eq!(bucket.take_up_to(2)?.reset_after(), Duration::from_millis(500));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reset_after(&self) -> Duration {
        self.admitted.reset_after()
    }
}

impl fmt::Display for Partial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "took {}; {}", self.taken, self.admitted)
    }
}
