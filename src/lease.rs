//! [`LeaseStock`]: a lock-free local stock of tokens leased from a shared limiter, which
//! [`LeasedBucket`](crate::redis::LeasedBucket) fills from Redis.
//!
//! A lease is a batch of tokens taken from the shared limiter at once and spent locally, one
//! compare-and-swap per admission and no I/O. Leased tokens have a lifetime: a token is spent
//! before its lease expires or not at all, so admissions over any interval `t` stay within what the
//! shared limiter allowed over `t` plus the lifetime.
//!
//! # The words
//!
//! The stock holds two leases, each one `AtomicU64`: the newest (`current`) and the one before it
//! (`previous`), whose tokens were still unspent when the newest landed. Each word packs the
//! lease's expiry in milliseconds since the stock's epoch (the high 44 bits, about 557 years) and
//! the tokens left (the low 20 bits, at most [`LeaseStock::MAX_TOKENS`]). Each lease keeps its own
//! expiry: a landing lease adds its tokens to what is left instead of replacing it, without
//! stretching the older tokens' lifetime (which would break the bound `C + R × (t + L)`).
//!
//! | word `(e, k)` | at a reading `now` (ms) | reached by |
//! | --- | --- | --- |
//! | `k > 0`, `now < e` | `k` tokens to spend | a lease landing; an admission |
//! | `k == 0` | empty | construction; the last admission; a drain |
//! | `now >= e` | expired: nothing to spend, `k` tokens dropped | time passing |
//!
//! Transitions: an admission writes `(e, k - 1)` to `previous` when it holds an unexpired token
//! (the older tokens go first, as they expire first), otherwise to `current`, only when `k > 0`
//! and `now < e`. A landing lease swaps `(e', granted)` into `current`, then swaps the word it
//! took out into `previous`, and hands back the unexpired tokens of the `previous` it replaced (a
//! lease from two landings ago, to be returned to the shared limiter). A drain writes `(e, 0)` to
//! both and hands back their unexpired tokens. Each step moves tokens with one atomic
//! read-modify-write, so every token is spent once, handed back once, or dropped at expiry: never
//! two of these. Between a landing's two swaps the older lease's tokens are in neither word: an
//! admission then finds the newest lease (or nothing), never the same token twice.
//!
//! # Memory ordering
//!
//! The words publish nothing but themselves: every access is `Relaxed`, and each
//! read-modify-write's atomicity alone keeps two callers from spending one token. The single-flight
//! flag is also `Relaxed`: it only decides which caller starts the next lease, and the lease's
//! tokens reach the stock through the words' own read-modify-writes.

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
        /// Tokens left in the stock after this one (both leases, unexpired).
        left: u64,
    },
    /// No token left.
    Empty,
    /// The newest lease has expired with tokens unspent: they may no longer be spent.
    Expired,
}

/// A lock-free stock of leased tokens with an expiry per lease, in two words (see the
/// [module docs](self)).
///
/// # Examples
///
/// ```
/// use tollgate::lease::{LeaseStock, Take};
/// let stock = LeaseStock::new();
/// // A lease of 3 tokens, good until 100 ms after the stock's epoch.
/// assert_eq!(stock.land(3, 100, 0), 0);
/// assert_eq!(stock.try_take(10), Take::Taken { left: 2 });
/// // A second lease adds its 5 tokens, good until 150 ms; the older 2 go first.
/// assert_eq!(stock.land(5, 150, 20), 0);
/// assert_eq!(stock.available(20), 7);
/// // At 100 ms the older lease has expired: its last 2 tokens are dropped.
/// assert_eq!(stock.try_take(100), Take::Taken { left: 4 });
/// assert_eq!(stock.try_take(150), Take::Expired);
/// // A drain hands back the unexpired tokens (none, at 150 ms).
/// assert_eq!(stock.drain(150), 0);
/// ```
#[derive(Debug)]
pub struct LeaseStock {
    /// The newest lease.
    current: AtomicU64,
    /// The lease before it, spent first.
    previous: AtomicU64,
    leasing: AtomicBool,
}

impl Default for LeaseStock {
    fn default() -> Self {
        LeaseStock::new()
    }
}

impl LeaseStock {
    /// The most tokens one lease holds: 2^20 - 1.
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
            current: AtomicU64::new(0),
            previous: AtomicU64::new(0),
            leasing: AtomicBool::new(false),
        }
    }

    fn unpack(word: u64) -> (u64, u64) {
        (word >> TOKEN_BITS, word & TOKEN_MASK)
    }

    fn pack(expiry: u64, tokens: u64) -> u64 {
        (expiry.min(Self::MAX_EXPIRY) << TOKEN_BITS) | tokens.min(TOKEN_MASK)
    }

    /// The unexpired tokens of a word at `now_ms`.
    fn live(word: u64, now_ms: u64) -> u64 {
        let (expiry, tokens) = Self::unpack(word);
        if now_ms < expiry {
            tokens
        } else {
            0
        }
    }

    /// Spends one token of `slot` at `now_ms`: `Ok(left)`, or `Err(tokens)` with the tokens it
    /// held (expired when not 0).
    fn take_from(slot: &AtomicU64, now_ms: u64) -> Result<u64, u64> {
        // Relaxed: see the module docs.
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let (expiry, tokens) = Self::unpack(word);
            if tokens == 0 || now_ms >= expiry {
                return Err(tokens);
            }
            match slot.compare_exchange_weak(
                word,
                Self::pack(expiry, tokens - 1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(tokens - 1),
                Err(seen) => word = seen,
            }
        }
    }

    /// Spends one token at `now_ms` (milliseconds since the stock's epoch): the older lease's
    /// first, while it holds one and has not expired, then the newest lease's.
    ///
    /// # Examples
    ///
    /// See [`LeaseStock`].
    pub fn try_take(&self, now_ms: u64) -> Take {
        if let Ok(left) = Self::take_from(&self.previous, now_ms) {
            // Relaxed: see the module docs.
            return Take::Taken {
                left: left + Self::live(self.current.load(Ordering::Relaxed), now_ms),
            };
        }
        match Self::take_from(&self.current, now_ms) {
            Ok(left) => Take::Taken { left },
            Err(0) => Take::Empty,
            Err(_) => Take::Expired,
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
        // Relaxed: see the module docs.
        Self::live(self.previous.load(Ordering::Relaxed), now_ms)
            + Self::live(self.current.load(Ordering::Relaxed), now_ms)
    }

    /// Lands a lease of `granted` tokens (at most [`MAX_TOKENS`](Self::MAX_TOKENS)) expiring at
    /// `expiry_ms`, beside the newest lease's tokens, which become the older lease (spent first,
    /// until their own expiry). Answers the unexpired tokens at `now_ms` of the older lease it
    /// replaced (one from two landings ago): they were leased and not spent, and should be handed
    /// back. Only the holder of the single-flight claim ([`begin_lease`](Self::begin_lease))
    /// lands a lease.
    ///
    /// # Examples
    ///
    /// ```
    /// let stock = tollgate::lease::LeaseStock::new();
    /// stock.land(4, 1_000, 0);
    /// stock.try_take(1);
    /// // A new lease adds its 10 tokens to the 3 left.
    /// assert_eq!(stock.land(10, 2_000, 500), 0);
    /// assert_eq!(stock.available(500), 13);
    /// // A third replaces the 3 of the first, which are handed back.
    /// assert_eq!(stock.land(10, 3_000, 600), 3);
    /// assert_eq!(stock.available(600), 20);
    /// ```
    pub fn land(&self, granted: u64, expiry_ms: u64, now_ms: u64) -> u64 {
        // Relaxed: see the module docs.
        let newest = self
            .current
            .swap(Self::pack(expiry_ms, granted), Ordering::Relaxed);
        let older = self.previous.swap(newest, Ordering::Relaxed);
        Self::live(older, now_ms)
    }

    /// Empties one word at `now_ms`, answering its unexpired tokens.
    fn drain_slot(slot: &AtomicU64, now_ms: u64) -> u64 {
        // Relaxed: see the module docs.
        let mut word = slot.load(Ordering::Relaxed);
        loop {
            let (expiry, tokens) = Self::unpack(word);
            if tokens == 0 {
                return 0;
            }
            match slot.compare_exchange_weak(
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

    /// Empties the stock at `now_ms`, answering the unexpired tokens it held (to hand back).
    ///
    /// # Examples
    ///
    /// ```
    /// let stock = tollgate::lease::LeaseStock::new();
    /// stock.land(4, 1_000, 0);
    /// stock.land(2, 1_500, 0);
    /// assert_eq!(stock.drain(10), 6);
    /// assert_eq!(stock.available(10), 0);
    /// ```
    pub fn drain(&self, now_ms: u64) -> u64 {
        Self::drain_slot(&self.previous, now_ms) + Self::drain_slot(&self.current, now_ms)
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
        // The second lease lands beside the 2 left: nothing is replaced.
        assert_eq!(stock.land(5, 100, 10), 0);
        assert_eq!(stock.available(10), 7);
        // The older lease's tokens go first.
        assert_eq!(stock.try_take(10), Take::Taken { left: 6 });
        // A third lease replaces the older lease's last token, which is handed back.
        assert_eq!(stock.land(4, 120, 20), 1);
        for left in (0..9).rev() {
            assert_eq!(stock.try_take(20), Take::Taken { left });
        }
        assert_eq!(stock.try_take(20), Take::Empty);
        assert_eq!(stock.drain(20), 0);
    }

    #[test]
    fn each_lease_keeps_its_own_expiry() {
        let stock = LeaseStock::new();
        stock.land(2, 50, 0);
        stock.land(3, 100, 10);
        // Before 50 the older lease's tokens are spent first; from 50 they are dropped.
        assert_eq!(stock.try_take(40), Take::Taken { left: 4 });
        assert_eq!(stock.available(49), 4);
        assert_eq!(stock.available(50), 3);
        assert_eq!(stock.try_take(50), Take::Taken { left: 2 });
        // The newest lease's own expiry still holds.
        assert_eq!(stock.try_take(100), Take::Expired);
        assert_eq!(stock.drain(100), 0);
    }

    #[test]
    fn expired_tokens_are_dropped_not_handed_back() {
        let stock = LeaseStock::new();
        stock.land(3, 50, 0);
        assert_eq!(stock.try_take(50), Take::Expired);
        assert_eq!(stock.land(1, 100, 60), 0);
        // The first lease (3 tokens, expired) is replaced now: dropped, not handed back.
        assert_eq!(stock.land(7, 100, 60), 0);
        // Both unexpired leases are drained at 60; none at 100.
        assert_eq!(stock.drain(60), 8);
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
