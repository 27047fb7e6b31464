//! [`LeasedBucket`]: admissions from a local lock-free stock of tokens leased in batches from a
//! key's shared token bucket in Redis, so that most admissions cost one compare-and-swap and no
//! round trip.

use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::{BuildError, RedisError, Unavailable, UnavailableKind};
use super::keys::MAX_KEY_LEN;
use super::limiter::{Ask, RedisLimiter, MAX_WAIT};
use crate::keyed::TokenBucketKeys;
use crate::lease::{LeaseStock, Take};
use crate::outcome::{Admitted, Denied, Headroom, Next, Span};
use crate::sync::{fence, AtomicBool, AtomicU64, Ordering};

/// A token bucket shared through Redis, spent locally: a lease takes up to `batch` tokens from
/// the key's shared bucket in one call (the same state [`RedisLimiter<TokenBucketKeys>`] decides
/// on), and [`try_acquire`](LeasedBucket::try_acquire) spends them with one compare-and-swap and
/// no I/O. When the stock falls to the low-water mark one task fetches the next lease (one at a
/// time); [`acquire`](LeasedBucket::acquire) may wait for it.
///
/// # Leases
///
/// - **A landing lease adds to the stock.** The tokens still unspent when a lease lands stay
///   spendable beside the new ones, each lease until its own expiry, the older first (see
///   [`LeaseStock`]): each lease call brings a whole batch of use, not a batch less the low-water
///   mark. Only tokens of a lease from two landings ago, still unspent, are replaced: they are
///   given back with the next lease call, which costs no extra round trip.
/// - **After a lease that finds less than a batch, the next one waits for a batch.** Such a lease
///   took every whole token the shared bucket held, so the bucket is empty; the next lease starts
///   once a whole batch has refilled there (if nothing else takes it), but never later than one
///   lease lifetime, less a random 0-25 % so that processes which leased together fall out of
///   step. The same holds after a full grant that left less than a batch behind. While it waits,
///   an empty stock refuses at once, its `retry_after` saying when the lease starts. (With a slow
///   quota, where a batch takes longer than the lifetime to refill, leases come once per lifetime
///   under saturation, and each brings what refilled meanwhile.)
/// - **What that costs in round trips.** Below the limit, a process makes about one lease call
///   per `batch` admissions. Under saturation (demand above `R`, `N` processes on one key), the
///   shared bucket refills a batch every `batch / R` seconds and each process leases about once in
///   that time: about `N / batch` round trips per admission in all (0.03 for three processes at
///   the default batch of 100), against one or more per admission when every process leased as
///   soon as a token refilled. Raise `batch` (up to the capacity) for more processes.
///   `benches/README.md` (the section on leases under saturation) has the measured figures.
///
/// # The bound
///
/// It never admits a token it has not leased: admissions never exceed tokens leased. A leased
/// token is spent within the lease's `lifetime` L of the call that leased it, or dropped, so over
/// any interval of length `t` all processes together admit at most `C + R × (t + L)` for a quota of
/// `R` per second with capacity `C`. Unspent tokens a new lease replaces are given back with the
/// next lease, and those left when the bucket is closed or dropped are given back then (as
/// [`TokenBucket::refund`](crate::TokenBucket::refund) does: never moving the state before now).
/// The cost: up to `batch + low_water` tokens held idle per process (a new lease and what was left
/// of the one before when it landed), which other processes cannot use.
///
/// # Failures
///
/// A lease that Redis cannot decide leaves the stock as it is; once it is empty, each admission is
/// answered by the limiter's [`FailurePolicy`](super::FailurePolicy) until a lease succeeds again.
///
/// # Examples
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
/// # rt.block_on(async {
/// use std::sync::Arc;
/// use tollgate::keyed::TokenBucketKeys;
/// use tollgate::redis::{FailurePolicy, LeasedBucket, RedisLimiter};
/// use tollgate::Quota;
/// let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else { return Ok(()) };
/// let conn = redis::Client::open(url)?.get_connection_manager().await?;
/// let limiter = RedisLimiter::<TokenBucketKeys>::builder(conn, Quota::per_second(10_000)?)
///     .prefix("docs-leased")
///     .build(FailurePolicy::Closed)?;
/// let key = format!("backend-{}", std::process::id());
/// let bucket = LeasedBucket::builder(Arc::new(limiter), key).batch(100).build()?;
/// // The first call finds the stock empty and starts a lease; `acquire` waits for it.
/// bucket.acquire().await?;
/// assert!(bucket.try_acquire().is_ok()); // from the local stock: no round trip
/// assert_eq!(bucket.stats().leases, 1);
/// bucket.close().await?; // gives back what was not spent
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })
/// # }
/// ```
pub struct LeasedBucket {
    inner: Arc<Inner>,
}

struct Inner {
    limiter: Arc<RedisLimiter<TokenBucketKeys>>,
    key: Vec<u8>,
    name: Vec<u8>,
    batch: u64,
    low_water: u64,
    lifetime: Duration,
    epoch: Instant,
    stock: LeaseStock,
    /// Unspent tokens a landing lease replaced: given back with the next lease.
    owed: AtomicU64,
    /// Milliseconds since `epoch` before which no lease starts: the shared bucket is known to hold
    /// less than a batch until then (0: no such time known).
    lease_after: AtomicU64,
    /// Draws each wait's jitter (a hash of the lease count under this process's random keys).
    jitter: RandomState,
    /// Whether the last lease failed: the failure policy answers until one succeeds.
    unavailable: AtomicBool,
    /// Set once, by `close` or drop: tokens that land afterwards are given back at once.
    closed: AtomicBool,
    landed: tokio::sync::Notify,
    /// Leases that have ended (landed, found nothing, or failed): lets `acquire` see one that
    /// ended between its check of the stock and its check for a lease in flight.
    ended: AtomicU64,
    runtime: tokio::runtime::Handle,
    leases: AtomicU64,
    leased: AtomicU64,
    admitted: AtomicU64,
    returned: AtomicU64,
    /// The lease metrics' handles, registered under the Redis limiter's label.
    #[cfg(feature = "metrics")]
    meters: LeaseMeters,
}

/// The `tollgate_redis_lease_*` handles of one bucket.
#[cfg(feature = "metrics")]
#[derive(Debug)]
struct LeaseMeters {
    calls: ::metrics::Counter,
    granted: ::metrics::Counter,
    returned: ::metrics::Counter,
}

/// What a [`LeasedBucket`] has done. Counters only grow.
///
/// # Examples
///
/// ```
/// let s = tollgate::redis::LeaseStats::default();
/// assert_eq!(s.leases, 0);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Lease calls sent to Redis (each one round trip), closing ones included.
    pub leases: u64,
    /// Tokens the leases took from the shared bucket.
    pub leased: u64,
    /// Admissions from the local stock.
    pub admitted: u64,
    /// Unspent tokens given back to the shared bucket.
    pub returned: u64,
}

/// Builds a [`LeasedBucket`]; see [`LeasedBucket::builder`].
///
/// # Examples
///
/// See [`LeasedBucket`].
pub struct LeasedBucketBuilder {
    limiter: Arc<RedisLimiter<TokenBucketKeys>>,
    key: Vec<u8>,
    batch: u64,
    low_water: Option<u64>,
    lifetime: Duration,
}

/// The default lease lifetime: 1 s.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(1);

impl LeasedBucket {
    /// A builder for a leased bucket on `key` of `limiter`'s token buckets (the same Redis state
    /// its per-call decisions use): batches of 100 tokens (at most the capacity), a low-water mark
    /// of half the batch, a lifetime of [`DEFAULT_LIFETIME`].
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub fn builder(
        limiter: Arc<RedisLimiter<TokenBucketKeys>>,
        key: impl AsRef<[u8]>,
    ) -> LeasedBucketBuilder {
        let batch = limiter.quota().capacity().min(100);
        LeasedBucketBuilder {
            limiter,
            key: key.as_ref().to_vec(),
            batch,
            low_water: None,
            lifetime: DEFAULT_LIFETIME,
        }
    }
}

impl LeasedBucketBuilder {
    /// Tokens asked for per lease: from 1 to the quota's capacity (and at most
    /// [`LeaseStock::MAX_TOKENS`]).
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub fn batch(mut self, batch: u64) -> Self {
        self.batch = batch;
        self
    }

    /// The stock at or below which an admission starts the next lease: from 0 to `batch - 1`
    /// (default `batch / 2`, so that the next lease usually lands before the stock runs out).
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub fn low_water(mut self, tokens: u64) -> Self {
        self.low_water = Some(tokens);
        self
    }

    /// How long leased tokens may be spent, from the moment the lease is asked for: from 1 ms to
    /// one hour (default [`DEFAULT_LIFETIME`]). Longer keeps fewer tokens from expiring unspent;
    /// shorter tightens the bound `C + R × (t + L)`.
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// The leased bucket. Must be called within a tokio runtime, which runs its lease tasks.
    ///
    /// # Errors
    ///
    /// A [`BuildError`] naming `batch`, `low_water`, `lifetime` or `key` (over 1 KiB) when out of
    /// range, or `runtime` when called outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub fn build(self) -> Result<LeasedBucket, BuildError> {
        let max_batch = self.limiter.quota().capacity().min(LeaseStock::MAX_TOKENS);
        if self.batch == 0 || self.batch > max_batch {
            return Err(BuildError::new(
                "batch",
                format!("1..={max_batch} (the capacity), got {}", self.batch),
            ));
        }
        let low_water = self.low_water.unwrap_or(self.batch / 2);
        if low_water >= self.batch {
            return Err(BuildError::new(
                "low_water",
                format!("0..={} (below the batch), got {low_water}", self.batch - 1),
            ));
        }
        if self.lifetime < Duration::from_millis(1) || self.lifetime > MAX_WAIT {
            return Err(BuildError::new(
                "lifetime",
                format!("1 ms..={MAX_WAIT:?}, got {:?}", self.lifetime),
            ));
        }
        let name = self.limiter.key_name(&self.key).map_err(|_| {
            BuildError::new(
                "key",
                format!("0..={MAX_KEY_LEN} bytes, got {}", self.key.len()),
            )
        })?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            BuildError::new(
                "runtime",
                "a tokio runtime: build the bucket within one (its lease tasks run there)".into(),
            )
        })?;
        #[cfg(feature = "metrics")]
        let meters = {
            let label = self.limiter.label();
            let counter = |metric| crate::metrics::counter(metric, "limiter", label);
            LeaseMeters {
                calls: counter(crate::metrics::REDIS_LEASE_CALLS),
                granted: counter(crate::metrics::REDIS_LEASE_GRANTED),
                returned: counter(crate::metrics::REDIS_LEASE_RETURNED),
            }
        };
        Ok(LeasedBucket {
            inner: Arc::new(Inner {
                limiter: self.limiter,
                key: self.key,
                name,
                batch: self.batch,
                low_water,
                lifetime: self.lifetime,
                epoch: Instant::now(),
                stock: LeaseStock::new(),
                owed: AtomicU64::new(0),
                lease_after: AtomicU64::new(0),
                jitter: RandomState::new(),
                unavailable: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                landed: tokio::sync::Notify::new(),
                ended: AtomicU64::new(0),
                runtime,
                leases: AtomicU64::new(0),
                leased: AtomicU64::new(0),
                admitted: AtomicU64::new(0),
                returned: AtomicU64::new(0),
                #[cfg(feature = "metrics")]
                meters,
            }),
        })
    }
}

/// Relaxed, as every counter and hint here: they publish nothing but themselves.
fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Inner {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Starts a lease unless one is in flight or the shared bucket is known to hold less than a
    /// batch.
    fn prefetch(self: &Arc<Self>) {
        if self.lease_after.load(Ordering::Relaxed) > self.now_ms() {
            return;
        }
        if self.stock.begin_lease() {
            let inner = self.clone();
            self.runtime.spawn(async move { inner.lease().await });
        }
    }

    /// One lease call (the caller holds the stock's single-flight claim), landing its tokens.
    async fn lease(self: Arc<Self>) {
        let asked = self.now_ms();
        let owed = self.owed.swap(0, Ordering::Relaxed);
        let back = owed.min(self.limiter.quota().capacity());
        add(&self.owed, owed - back);
        add(&self.leases, 1);
        #[cfg(feature = "metrics")]
        self.meters.calls.increment(1);
        match self
            .limiter
            .lease_name(&self.limiter.config(), &self.name, self.batch, back)
            .await
        {
            Ok(lease) => {
                self.unavailable.store(false, Ordering::Relaxed);
                add(&self.returned, back);
                #[cfg(feature = "metrics")]
                self.meters.returned.increment(back);
                let granted = lease.granted.min(self.batch);
                if granted > 0 {
                    add(&self.leased, granted);
                    #[cfg(feature = "metrics")]
                    self.meters.granted.increment(granted);
                    let expiry = asked.saturating_add(
                        u64::try_from(self.lifetime.as_millis()).unwrap_or(u64::MAX),
                    );
                    let replaced = self.stock.land(granted, expiry, self.now_ms());
                    add(&self.owed, replaced);
                }
                let wait = self.until_batch(&lease);
                let after = if wait.is_zero() {
                    0
                } else {
                    let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
                    self.now_ms().saturating_add(wait_ms)
                };
                self.lease_after.store(after, Ordering::Relaxed);
            }
            Err(_) => {
                // Not given back: owed again.
                add(&self.owed, back);
                self.unavailable.store(true, Ordering::Relaxed);
            }
        }
        add(&self.ended, 1);
        // Release: `acquire`, reading the claim released, reads this end counted (its fence).
        fence(Ordering::Release);
        self.stock.end_lease();
        self.landed.notify_waiters();
        if self.closed.load(Ordering::Relaxed) {
            // Closed while this lease was in flight: what landed goes back at once. A failure
            // leaves those tokens spent, which never admits more than the limit.
            let _ = self.give_back().await;
        }
    }

    /// How long after `lease` the next one waits: until the shared bucket holds a whole batch
    /// again (if nothing else is taken), at most the lease lifetime, shortened by a random 0-25 %.
    ///
    /// A lease that finds less than a batch has emptied the bucket (it takes every whole token
    /// there, up to the batch). Leasing again at once would bring back the few tokens that refilled
    /// in one round trip: under saturation every process would then lease per admission or so.
    /// Waiting for a batch makes each lease bring most of one, and the shortening lets processes
    /// that leased together drift apart instead of leasing in step. It stays below the time for a
    /// batch to refill, so that a lone process under saturation finds at least three quarters of
    /// a batch and the shared bucket never sits full, losing tokens to its capacity, while it
    /// waits.
    fn until_batch(&self, lease: &super::limiter::Lease) -> Duration {
        let quota = self.limiter.quota();
        // The bucket is full `full_after` from now; it lacks a batch until `capacity - batch`
        // intervals before that.
        let slack = quota
            .interval()
            .saturating_mul(u32::try_from(quota.capacity() - self.batch).unwrap_or(u32::MAX));
        // At most the lease lifetime: for a slow quota a batch can take hours to refill, and a
        // process should not stop asking for that long while tokens trickle in.
        let wait = lease.full_after.saturating_sub(slack).min(self.lifetime);
        if wait.is_zero() {
            return wait;
        }
        // 0..=1023 parts in 4096 taken off: a random 0-25 %.
        let draw = self.jitter.hash_one(self.leases.load(Ordering::Relaxed)) % 1024;
        let nanos = wait.as_nanos();
        let cut = nanos / 4096 * u128::from(draw);
        Duration::from_nanos(u64::try_from(nanos - cut).unwrap_or(u64::MAX))
    }

    /// Drains the stock and gives back every unspent token (one call, when there are any).
    async fn give_back(&self) -> Result<u64, RedisError> {
        let drained = self.stock.drain(self.now_ms());
        let owed = self.owed.swap(0, Ordering::Relaxed);
        let back = (drained + owed).min(self.limiter.quota().capacity());
        if back == 0 {
            return Ok(0);
        }
        add(&self.leases, 1);
        #[cfg(feature = "metrics")]
        self.meters.calls.increment(1);
        match self
            .limiter
            .lease_name(&self.limiter.config(), &self.name, 0, back)
            .await
        {
            Ok(_) => {
                add(&self.returned, back);
                #[cfg(feature = "metrics")]
                self.meters.returned.increment(back);
                Ok(back)
            }
            Err(e) => Err(e),
        }
    }

    /// The refusal of an empty stock: the time until the next lease starts, or zero when that is
    /// not known (a lease is on its way).
    fn empty(&self, now_ms: u64) -> Denied {
        let until = self
            .lease_after
            .load(Ordering::Relaxed)
            .saturating_sub(now_ms);
        let wait_ns = u128::from(until) * 1_000_000;
        let wait = Span::from_nanos(wait_ns);
        let now_ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // One more is in stock once a lease finds a token (not known while one is on its way).
        Denied::new(
            now_ns,
            wait,
            Headroom::whole(0, wait_ns, Next::nanos(wait_ns)),
        )
    }
}

impl LeasedBucket {
    /// Admits one request from the local stock: one compare-and-swap, no I/O. At or below the
    /// low-water mark it starts the next lease in the background.
    ///
    /// # Errors
    ///
    /// [`RedisError::Denied`] when the stock is empty (its `retry_after` is the time until the next
    /// lease starts, once the shared bucket holds a batch again, or zero while a lease is on its
    /// way; its `retry_at` is on this bucket's own clock, nanoseconds since it was built). When the last lease failed, the
    /// limiter's [`FailurePolicy`](super::FailurePolicy) answers instead.
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub fn try_acquire(&self) -> Result<Admitted, RedisError> {
        let inner = &self.inner;
        let now = inner.now_ms();
        match inner.stock.try_take(now) {
            Take::Taken { left } => {
                add(&inner.admitted, 1);
                if left <= inner.low_water {
                    inner.prefetch();
                }
                // The stock grows only by a lease, whose timing is not known here.
                Ok(Admitted::new(Headroom::whole(left, 0, Next::FULL)))
            }
            Take::Empty | Take::Expired => {
                inner.prefetch();
                if inner.unavailable.load(Ordering::Relaxed) {
                    let why = Unavailable::new(
                        UnavailableKind::Connection,
                        "the last lease could not be decided",
                    );
                    return inner.limiter.fallback(&inner.key, 1, Ask::Take, why);
                }
                Err(RedisError::Denied(inner.empty(now)))
            }
        }
    }

    /// Admits one request, waiting for a lease in flight (at most the limiter's timeout) when
    /// the stock is empty.
    ///
    /// # Errors
    ///
    /// As [`LeasedBucket::try_acquire`], after the wait.
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub async fn acquire(&self) -> Result<Admitted, RedisError> {
        let inner = &self.inner;
        let landed = inner.landed.notified();
        tokio::pin!(landed);
        // Registered before the check: a lease that lands in between still wakes this call.
        landed.as_mut().enable();
        let ended = inner.ended.load(Ordering::Relaxed);
        match self.try_acquire() {
            // A lease is in flight, or one ended since the stock was found empty (the thread may
            // have been descheduled between the two checks): wait for it (at once when it has
            // already landed) and look again.
            Err(RedisError::Denied(_)) if inner.stock.is_leasing() || self.ended_since(ended) => {
                let _ = tokio::time::timeout(inner.limiter.timeout(), landed).await;
                self.try_acquire()
            }
            answer => answer,
        }
    }

    /// Whether a lease has ended since `ended` was read. Called after the claim was seen free:
    /// the Acquire fence pairs with the lease's Release fence before it freed the claim, so a
    /// lease whose freed claim was seen is counted here.
    fn ended_since(&self, ended: u64) -> bool {
        fence(Ordering::Acquire);
        self.inner.ended.load(Ordering::Relaxed) != ended
    }

    /// Tokens in the local stock now.
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub fn available(&self) -> u64 {
        self.inner.stock.available(self.inner.now_ms())
    }

    /// What this bucket has done.
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub fn stats(&self) -> LeaseStats {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let i = &self.inner;
        LeaseStats {
            leases: read(&i.leases),
            leased: read(&i.leased),
            admitted: read(&i.admitted),
            returned: read(&i.returned),
        }
    }

    /// Gives back every unspent token now, waiting for the call, and closes the bucket (a lease
    /// still in flight gives back what it gets when it lands). Answers how many went back: at
    /// most `batch + low_water` (the newest lease's tokens, what was left of the lease before it,
    /// and the leftover of an older one that the last landing replaced, which the next lease call
    /// would have given back: a lease starts at or below the low-water mark, so the last two
    /// together are at most `low_water`).
    ///
    /// # Errors
    ///
    /// [`RedisError::Unavailable`] when the give-back could not be decided: those tokens stay
    /// spent, which never admits more than the limit.
    ///
    /// # Examples
    ///
    /// See [`LeasedBucket`].
    pub async fn close(self) -> Result<u64, RedisError> {
        self.inner.closed.store(true, Ordering::Relaxed);
        self.inner.give_back().await
    }
}

impl Drop for LeasedBucket {
    /// Closes the bucket if [`close`](LeasedBucket::close) did not: the unspent tokens are given
    /// back by a task on the runtime the bucket was built in.
    fn drop(&mut self) {
        if self.inner.closed.swap(true, Ordering::Relaxed) {
            return;
        }
        let inner = self.inner.clone();
        self.inner.runtime.spawn(async move {
            let _ = inner.give_back().await;
        });
    }
}

impl fmt::Debug for LeasedBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedBucket")
            .field("key", &String::from_utf8_lossy(&self.inner.key))
            .field("batch", &self.inner.batch)
            .field("low_water", &self.inner.low_water)
            .field("lifetime", &self.inner.lifetime)
            .field("available", &self.available())
            .field("stats", &self.stats())
            .finish()
    }
}

impl fmt::Debug for LeasedBucketBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedBucketBuilder")
            .field("key", &String::from_utf8_lossy(&self.key))
            .field("batch", &self.batch)
            .field("low_water", &self.low_water)
            .field("lifetime", &self.lifetime)
            .finish_non_exhaustive()
    }
}
