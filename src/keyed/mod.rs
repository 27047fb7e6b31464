//! One limit per key (a user, an IP address, an API token), with bounded memory and lossless,
//! automatic clean-up of idle keys.
//!
//! ```
//! use tollgate::keyed::KeyedLimiter;
//! use tollgate::{ManualClock, Quota};
//!
//! // Each client gets 2 requests a second, bursts of 2.
//! let limiter: KeyedLimiter<String, _, _> = KeyedLimiter::with_clock(Quota::per_second(2)?, ManualClock::new());
//! assert!(limiter.check_key("alice").is_ok());
//! assert!(limiter.check_key("alice").is_ok());
//! assert!(limiter.check_key("alice").is_err()); // alice is out of tokens
//! assert!(limiter.check_key("bob").is_ok()); // bob is not
//! assert_eq!(limiter.len(), 2);
//! # Ok::<(), tollgate::QuotaError>(())
//! ```
//!
//! # What a key costs
//!
//! Every key shares one policy (the constants derived from the [`Quota`](crate::Quota)); a key costs only its
//! state (one `AtomicU64` for most algorithms, see the table below), plus its own size and the
//! map's bookkeeping: a hash-table slot of `size_of::<(K, State)>()` bytes (the key beside its
//! state, padded to their alignment: 16 bytes for a `u64` key and one word, 32 for an `IpAddr`) and
//! one control byte, in tables kept at most 7/8 full and grown by doubling, plus whatever the key
//! owns on the heap (a `String`'s bytes). Measured with `u64` keys
//! (`tests/keyed_spray.rs`), 100 000 keys held add about 24 bytes each to the resident set. The map is a
//! `DashMap<K, AtomicU64, ahash::RandomState>`: a fixed, power-of-two number of shards, each a
//! read-write lock around a hash table, hashed with a per-map random key so that clients cannot
//! choose keys that collide.
//!
//! The algorithm run per key is a type parameter, one of the marker types of this module (the
//! [`Algorithm`] trait is sealed):
//!
//! | marker | per key | state per key | a key is forgotten when |
//! | --- | --- | --- | --- |
//! | [`TokenBucketKeys`] (the default) | the [token bucket](crate::token_bucket): bursts up to C, then R per second | 8 bytes | its bucket is full again (`tat <= now`) |
//! | [`LeakyMeterKeys`] | the [leaky meter](crate::leaky::meter), strict: admitted only when the key's virtual queue is empty | 8 bytes | its queue is empty again |
//! | [`FixedWindowKeys`] | the [fixed window](crate::window::fixed): N per window, windows on the clock's epoch | 8 bytes | its window is over |
//! | [`SlidingWindowCounterKeys`] | the one-word [sliding window counter](crate::window::sliding_counter) | 8 bytes | both windows it counts are over |
//! | [`SlidingWindowLogKeys`] | the exact [sliding window log](crate::window::sliding_log) | 32 bytes + 8 N on the heap | its newest admission has left the window |
//! | [`Tiered<A>`](Tiered) | any of the above, its quota picked per key from up to 256 tiers ([`KeyedLimiter::with_tiers`]) | A's state + 1 byte, padded (16 bytes for the one-word ones) | as for A |
//!
//! [`KeyedLimiter::new`] and [`KeyedLimiter::with_clock`] build the default;
//! [`KeyedLimiter::with_algorithm`] builds any of them, refusing a quota the algorithm cannot
//! enforce with the direct limiter's [`QuotaError`](crate::QuotaError). The `k`-sub-window counter is not offered per
//! key (its state is `k + 1` words and a history protocol meant for one hot limiter).
//!
//! # Every key starts fresh
//!
//! A key the limiter has never seen, and a key it has forgotten, get the same state: a full bucket,
//! an empty queue, a window with nothing in it. That is what makes forgetting lossless (below). The
//! quota's initial fill ([`Quota::with_initial`](crate::Quota::with_initial)) is therefore not used by a keyed limiter: it
//! applies to direct limiters only.
//!
//! # Eviction
//!
//! A key whose state is indistinguishable from a fresh one (a full bucket: `tat <= now`; an empty
//! virtual queue: drain time `<= now`) can be removed without changing any decision. The limiter
//! removes such keys
//!
//! - automatically, amortized over new keys: after every `max(256, len / 2)` new keys (or refused
//!   ones, see below), the thread that inserted the last one sweeps the map, one shard at a time
//!   under that shard's write lock, removing every key that is fresh at its reading: at most two key
//!   checks per new key, amortized, and no background thread;
//! - on demand, with [`KeyedLimiter::retain_recent`] (and [`KeyedLimiter::shrink_to_fit`] to give the
//!   freed memory back);
//! - on a schedule, if you want one, by a background thread: [`KeyedLimiter::spawn_sweeper`].
//!
//! An admission on a known key runs its compare-and-swap while holding the read lock of the key's
//! shard; an eviction decides, and removes, under the same shard's write lock, re-reading the word
//! there. The lock makes the two exclusive: either the admission's write happened before the
//! eviction looked (and the eviction sees a bucket that is not full, and keeps the key), or the
//! eviction happened first and the admission finds no key, and creates it afresh, full, which is the
//! state that was removed. No admission is ever lost, and none is ever granted twice.
//!
//! **Clocks that step backwards across an eviction.** A full bucket is "full as of its last
//! reading"; a reading earlier than that would see it less than full. To keep forgetting from ever
//! creating tokens, the limiter remembers the latest reading any eviction used (the *floor*), and a
//! key created afresh is fresh as of `max(reading, floor)`: identical to a never-used state at
//! readings from then on, and at earlier readings admitting no more than any state that could have
//! been forgotten. Per algorithm: a bucket full as of it (short of full before it), a queue empty as
//! of it; a fixed window whose previous window is full (nothing admitted before the floor's
//! window); a sliding counter whose two previous windows are full; a log of N entries that leave
//! the window exactly at the floor. So: decisions at readings at or after the latest eviction's
//! reading are exactly those of a limiter that never evicts; a reading earlier than that may be
//! refused where a never-evicting limiter would admit, never the reverse.
//!
//! **A reading from the future.** An eviction never judges at a reading ahead of the limiter's
//! own clock: [`KeyedLimiter::retain_recent_at`] and every automatic sweep forget as of
//! `min(reading, clock.now())`. So the floor never passes the clock's reading at the latest
//! eviction, and a wrong, far-future timestamp passed to an `_at` method can use up its own key
//! (as it would a direct limiter) but cannot lock the other keys out: without this bound, one
//! eviction at `u64::MAX` would leave every key created afterwards empty until 2^62 ns (146
//! years). The bound: a request is refused because of an eviction only when its reading lags the
//! clock's reading `f` at some eviction, as if its key had been used to the limit at `f`, so it is
//! admitted again by `f` at the latest (a bucket's n tokens are back by `f - (C - n) / R`); for
//! readings taken from the limiter's clock, the lag is the time between taking the reading and
//! using it. Readings passed to `_at` methods must therefore come from the limiter's clock (a
//! [`ManualClock`](crate::ManualClock) driven through `_at` readings must be moved along with
//! them, or evictions judge at its older reading and forget less).
//!
//! # Bounded memory
//!
//! The map never holds more than [`KeyedLimiter::with_max_keys`] keys (default 1 048 576). A new
//! key reserves its place in an atomic count under its shard's write lock, before it is inserted, and
//! gives it back only after it is removed, so the bound holds exactly under any concurrency, and two
//! threads inserting the same new key create one state and count both admissions. When every place
//! is held by a key that is still active (not full), the limiter first sweeps (if a sweep is due),
//! then gives the new key its [`Overflow`] policy: [`Overflow::Refuse`] (the default) answers
//! [`KeyedError::TooManyKeys`]; [`Overflow::Shared`] limits every such request by one shared bucket
//! with its own quota. Room is checked before the key's own state is looked at, so on a full map
//! the answer always says why (no room, never a denial of a key that holds no place), and nothing
//! is built for a newcomer that finds none (a sliding window log's ring is 8 N bytes). No active key's state is ever reset to make room. Sweeps run on their
//! schedule, not on every refusal (a map full of active keys would otherwise be scanned on every
//! request from a newcomer): a key that has become fresh since the last sweep holds its place until
//! the next one, so for up to `max(256, len / 2)` new keys a full map may refuse a newcomer that a
//! sweep would have made room for.
//!
//! # Memory ordering
//!
//! A key's state is only ever touched under its shard's lock (a read lock for decisions, the write
//! lock for inserting, judging freshness and removing); the lock's release and acquire order an
//! admission against an eviction, as described above. Within the read lock, decisions race each
//! other exactly as on the direct limiter: a one-word state publishes nothing but itself, so every
//! access to it is `Relaxed`; a sliding window log per key runs the direct log's claim protocol,
//! with its `Acquire`/`AcqRel` orderings and their reasons (see [`crate::window::sliding_log`]). An
//! admission is not a synchronization point between threads: do not use it to publish other data.

mod algorithm;
mod error;
mod evict;
mod limiter;
mod store;
#[cfg(not(tollgate_loom))]
mod sweeper;
mod tiers;

pub use crate::algorithm::Algorithm;
pub use algorithm::{
    FixedWindowKeys, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys, Tiered,
    TokenBucketKeys,
};
pub use error::{KeyedError, TooManyKeys};
pub use evict::Overflow;
pub use limiter::KeyedLimiter;
#[cfg(not(tollgate_loom))]
pub use sweeper::Sweeper;
