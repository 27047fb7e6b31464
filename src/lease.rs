//! [`LeaseStock`]: a lock-free local stock of tokens leased from a shared limiter, which
//! [`LeasedBucket`](crate::redis::LeasedBucket) fills from Redis.
//!
//! A lease is a batch of tokens taken from the shared limiter at once and spent locally, one
//! compare-and-swap per admission and no I/O. Leased tokens have a lifetime: a token is spent
//! before its lease expires or not at all, so admissions over any interval `t` stay within what the
//! shared limiter allowed over `t` plus the lifetime.
//!
//! # The word
//!
//! The whole stock is one `AtomicU64`: the lease's expiry in milliseconds since the stock's epoch
//! (the high 44 bits, about 557 years) and the tokens left (the low 20 bits, at most
//! [`LeaseStock::MAX_TOKENS`]).
//!
//! | word `(e, k)` | at a reading `now` (ms) | reached by |
//! | --- | --- | --- |
//! | `k > 0`, `now < e` | `k` tokens to spend | a lease landing; an admission |
//! | `k == 0` | empty | construction; the last admission; a drain |
//! | `now >= e` | expired: nothing to spend, `k` tokens dropped | time passing |
//!
//! Transitions: an admission writes `(e, k - 1)`, only when `k > 0` and `now < e`; a landing lease
//! writes `(e', granted)` and hands back the `k` unexpired tokens it replaced (to be returned to
//! the shared limiter); a drain writes `(e, 0)` and hands back the `k` unexpired tokens. Every
//! token is therefore spent once, handed back once, or dropped at expiry: never two of these.
//!
//! # Memory ordering
//!
//! The word publishes nothing but itself: every access is `Relaxed`, and the compare-and-swap's
//! atomicity alone keeps two callers from spending one token. The single-flight flag is also
//! `Relaxed`: it only decides which caller starts the next lease, and the lease's tokens reach the
//! stock through the word's own compare-and-swap.

use crate::sync::{AtomicBool, AtomicU64, Ordering};

const TOKEN_BITS: u32 = 20;
const TOKEN_MASK: u64 = (1 << TOKEN_BITS) - 1;

/// The answer of [`LeaseStock::try_take`].
///
/// # Examples
///
/// ```
/// use tollgate::lease::{LeaseStock, Take};
/// let stock = LeaseStock::new();
/// assert_eq!(stock.try_take(0), Take::Empty);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// One token taken; this many are left.
    Taken {
        /// Tokens left in the stock after this one.
        left: u64,
    },
    /// No token left.
    Empty,
    /// The lease has expired: its tokens may no longer be spent.
    Expired,
}

/// A lock-free stock of leased tokens with an expiry, in one word (see the [module docs](self)).
///
/// # Examples
///
/// ```
/// use tollgate::lease::{LeaseStock, Take};
/// let stock = LeaseStock::new();
/// // A lease of 3 tokens, good until 100 ms after the stock's epoch.
/// assert_eq!(stock.land(3, 100, 0), 0);
/// assert_eq!(stock.try_take(10), Take::Taken { left: 2 });
/// assert_eq!(stock.try_take(100), Take::Expired);
/// // A drain hands back the unexpired tokens (none, at 100 ms).
/// assert_eq!(stock.drain(100), 0);
/// ```
#[derive(Debug)]
pub struct LeaseStock {
    word: AtomicU64,
    leasing: AtomicBool,
}

impl Default for LeaseStock {
    fn default() -> Self {
        LeaseStock::new()
    }
}

impl LeaseStock {
    /// The most tokens one stock holds: 2^20 - 1.
    pub const MAX_TOKENS: u64 = TOKEN_MASK;

    /// The latest expiry a lease can have, in milliseconds since the stock's epoch (2^44 - 1).
    pub const MAX_EXPIRY: u64 = u64::MAX >> TOKEN_BITS;

    /// An empty stock.
    ///
    /// # Examples
    ///
    /// See [`LeaseStock`].
    pub fn new() -> LeaseStock {
        LeaseStock {
            word: AtomicU64::new(0),
            leasing: AtomicBool::new(false),
        }
    }

    fn unpack(word: u64) -> (u64, u64) {
        (word >> TOKEN_BITS, word & TOKEN_MASK)
    }

    fn pack(expiry: u64, tokens: u64) -> u64 {
        (expiry.min(Self::MAX_EXPIRY) << TOKEN_BITS) | tokens.min(TOKEN_MASK)
    }

    /// Spends one token at `now_ms` (milliseconds since the stock's epoch), if the lease holds one
    /// and has not expired.
    ///
    /// # Examples
    ///
    /// See [`LeaseStock`].
    pub fn try_take(&self, now_ms: u64) -> Take {
        // Relaxed: see the module docs.
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let (expiry, tokens) = Self::unpack(word);
            if tokens == 0 {
                return Take::Empty;
            }
            if now_ms >= expiry {
                return Take::Expired;
            }
            match self.word.compare_exchange_weak(
                word,
                Self::pack(expiry, tokens - 1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Take::Taken { left: tokens - 1 },
                Err(seen) => word = seen,
            }
        }
    }

    /// Tokens that could be spent at `now_ms`.
    ///
    /// # Examples
    ///
    /// ```
    /// let stock = tollgate::lease::LeaseStock::new();
    /// stock.land(5, 1_000, 0);
    /// assert_eq!(stock.available(999), 5);
    /// assert_eq!(stock.available(1_000), 0);
    /// ```
    pub fn available(&self, now_ms: u64) -> u64 {
        let (expiry, tokens) = Self::unpack(self.word.load(Ordering::Relaxed));
        if now_ms < expiry {
            tokens
        } else {
            0
        }
    }

    /// Lands a lease of `granted` tokens (at most [`MAX_TOKENS`](Self::MAX_TOKENS)) expiring at
    /// `expiry_ms`, replacing what the stock held. Answers the tokens it replaced that had not
    /// expired at `now_ms`: they were leased and not spent, and should be handed back.
    ///
    /// # Examples
    ///
    /// ```
    /// let stock = tollgate::lease::LeaseStock::new();
    /// stock.land(4, 1_000, 0);
    /// stock.try_take(1);
    /// // A new lease replaces the 3 left, which are handed back.
    /// assert_eq!(stock.land(10, 2_000, 500), 3);
    /// assert_eq!(stock.available(500), 10);
    /// ```
    pub fn land(&self, granted: u64, expiry_ms: u64, now_ms: u64) -> u64 {
        let new = Self::pack(expiry_ms, granted);
        let old = self.word.swap(new, Ordering::Relaxed);
        let (expiry, tokens) = Self::unpack(old);
        if now_ms < expiry {
            tokens
        } else {
            0
        }
    }

    /// Empties the stock at `now_ms`, answering the unexpired tokens it held (to hand back).
    ///
    /// # Examples
    ///
    /// ```
    /// let stock = tollgate::lease::LeaseStock::new();
    /// stock.land(4, 1_000, 0);
    /// assert_eq!(stock.drain(10), 4);
    /// assert_eq!(stock.available(10), 0);
    /// ```
    pub fn drain(&self, now_ms: u64) -> u64 {
        let mut word = self.word.load(Ordering::Relaxed);
        loop {
            let (expiry, tokens) = Self::unpack(word);
            if tokens == 0 {
                return 0;
            }
            match self.word.compare_exchange_weak(
                word,
                Self::pack(expiry, 0),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return if now_ms < expiry { tokens } else { 0 },
                Err(seen) => word = seen,
            }
        }
    }

    /// Claims the right to fetch the next lease: `true` for exactly one caller until
    /// [`end_lease`](Self::end_lease), so at most one lease is in flight.
    ///
    /// # Examples
    ///
    /// ```
    /// let stock = tollgate::lease::LeaseStock::new();
    /// assert!(stock.begin_lease());
    /// assert!(!stock.begin_lease());
    /// stock.end_lease();
    /// assert!(stock.begin_lease());
    /// ```
    pub fn begin_lease(&self) -> bool {
        self.leasing
            .compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Releases the claim [`begin_lease`](Self::begin_lease) gave.
    ///
    /// # Examples
    ///
    /// See [`begin_lease`](Self::begin_lease).
    pub fn end_lease(&self) {
        self.leasing.store(false, Ordering::Relaxed);
    }

    /// Whether a lease is in flight.
    ///
    /// # Examples
    ///
    /// ```
    /// let stock = tollgate::lease::LeaseStock::new();
    /// assert!(!stock.is_leasing());
    /// ```
    pub fn is_leasing(&self) -> bool {
        self.leasing.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(tollgate_loom)))]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_spent_once_and_handed_back_once() {
        let stock = LeaseStock::new();
        assert_eq!(stock.land(3, 50, 0), 0);
        assert_eq!(stock.try_take(0), Take::Taken { left: 2 });
        assert_eq!(stock.land(5, 100, 10), 2);
        for left in (0..5).rev() {
            assert_eq!(stock.try_take(20), Take::Taken { left });
        }
        assert_eq!(stock.try_take(20), Take::Empty);
        assert_eq!(stock.drain(20), 0);
    }

    #[test]
    fn expired_tokens_are_dropped_not_handed_back() {
        let stock = LeaseStock::new();
        stock.land(3, 50, 0);
        assert_eq!(stock.try_take(50), Take::Expired);
        assert_eq!(stock.land(1, 100, 60), 0);
        stock.land(7, 100, 60);
        assert_eq!(stock.drain(100), 0);
    }

    #[test]
    fn extremes_saturate() {
        let stock = LeaseStock::new();
        stock.land(u64::MAX, u64::MAX, 0);
        assert_eq!(
            stock.available(LeaseStock::MAX_EXPIRY - 1),
            LeaseStock::MAX_TOKENS
        );
        assert_eq!(stock.available(u64::MAX), 0);
    }
}
