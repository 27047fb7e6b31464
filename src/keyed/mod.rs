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
//! Every key shares one policy (the constants derived from the [`Quota`](crate::Quota), kept
//! with each table of the map: see [Changing the quota](#changing-the-quota)); a key costs only its
//! state (one `AtomicU64` for most algorithms, see the table below), plus its own size and the
//! map's bookkeeping: an entry of its own, `(hash, key, state)` in one allocation (24 bytes for a
//! `u64` key and one word, which glibc's allocator rounds to a 32-byte chunk), and a slot of one
//! control byte and one pointer in tables kept at most 7/8 full and grown by doubling, plus
//! whatever the key owns on the heap (a `String`'s bytes). The entry is separate so that it never
//! moves while a lookup may hold it (see [The map](#the-map)). `tests/keyed_spray.rs` measures and
//! prints the resident bytes a `u64` key adds (`benches/README.md` has the figures). The map hashes
//! with ahash under a per-map random key, so that clients cannot choose keys that collide.
//!
//! The algorithm run per key is a type parameter, one of the marker types of this module (the
//! [`Algorithm`] trait is sealed):
//!
//! | marker | per key | state per key | a key is forgotten when |
//! | --- | --- | --- | --- |
//! | [`TokenBucketKeys`] (the default) | the [token bucket](crate::token_bucket): bursts up to C, then R per second; reservations into debt ([`KeyedLimiter::reserve_key_n`]) and partial takes ([`KeyedLimiter::take_up_to_key`]) | 8 bytes | its bucket is full again (`tat <= now`) |
//! | [`LeakyMeterKeys`] | the [leaky meter](crate::leaky::meter), strict: admitted only when the key's virtual queue is empty; or scheduled, with a delay ([`KeyedLimiter::schedule_key_n`]) | 8 bytes | its queue is empty again |
//! | [`FixedWindowKeys`] | the [fixed window](crate::window::fixed): N per window, windows on the clock's epoch | 8 bytes | its window is over |
//! | [`SlidingWindowCounterKeys`] | the one-word [sliding window counter](crate::window::sliding_counter) | 8 bytes | both windows it counts are over |
//! | [`SlidingWindowLogKeys`] | the exact [sliding window log](crate::window::sliding_log) | 24 bytes + 8 (N + 2) on the heap | its newest admission has left the window |
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
//!   under that shard's lock, removing every key that is fresh at its reading: at most two key
//!   checks per new key, amortized, and no background thread;
//! - on demand, with [`KeyedLimiter::retain_recent`] (and [`KeyedLimiter::shrink_to_fit`] to give the
//!   freed memory back);
//! - on a schedule, if you want one, by a background thread: [`KeyedLimiter::spawn_sweeper`].
//!
//! An eviction judges a key's state and, if it is forgettable, marks it *gone* with one
//! compare-and-swap from the exact state it judged, then removes the entry if it still holds that
//! state. A decision on a known key is the algorithm's own compare-and-swap on the state, and it
//! never writes over the mark: the one-word algorithms' loop refuses to decide on the gone word
//! (`u64::MAX`, a word no algorithm writes), and the sliding log finds the mark in the slot its
//! next claim would have to replace. The state itself orders the two: either the admission wrote
//! before the mark (the mark's compare-and-swap then fails, and the key is kept, no longer
//! fresh), or the mark came first, and the admission, having taken effect nowhere, decides again
//! on the key as new: it finds the entry removed and creates it afresh, or finds the gone state
//! still there and replaces it with a fresh one, which takes over its place in the count (the
//! eviction then finds another state at the key and removes nothing). Either way the fresh state
//! is the state that was forgotten. No admission is ever lost, and none is ever granted twice.
//! Denials, peeks and `remaining` on a gone state answer as for a key not held.
//!
//! The map's locks play no part in this: the protocol holds for a map whose lookups take no lock
//! and whose removal is a separate step from the mark (the loom models in `loom-tests/` check it
//! against such a map).
//!
//! # The map
//!
//! The map is the crate's own: a fixed number of shards (four per core, at least 8), each an
//! open-addressing table with one control byte and one entry pointer per slot, filled to at most
//! 7/8. **A lookup of a known key takes no lock and writes nothing shared**: it enters the table's
//! epoch (a plain store to the calling thread's own slot: on Linux no hardware barrier, the
//! reclaimer issuing `membarrier(2)` instead; elsewhere a fence) and reads the control bytes, the
//! key and the state; the admission is then the algorithm's own compare-and-swap, and a denial
//! writes nothing more. New keys, eviction and growth take the key's shard lock. **An entry never
//! moves**: a growing shard builds a new table of pointers to the same entries, so a lookup on
//! the old table and one on the new act on the one state there is, and a key whose `Eq` or `Hash`
//! writes through `&self` (a counter, a memo) writes the one copy. Each entry keeps the hash it was
//! inserted with, so growth runs no user code and a panicking `Hash` cannot leave a shard half
//! rebuilt. Removed entries and replaced tables are freed once every lookup that may have seen
//! them has ended, and each table has its epoch of its own: a lookup parked in one limiter holds
//! nothing of another's.
//!
//! **Sound for every key type.** As `std`'s `HashMap` is, for any key that is also `Clone` (a
//! table that grows clones its keys into the new table rather than moving them, so that a key a
//! lookup may be reading, perhaps writing through `&self` to a memo or a `Mutex` in it, is never
//! moved; the old copy is dropped once no lookup can hold it). A key's `Hash`, `Eq`, `Clone` or
//! `Drop` may panic, and the limiter stays whole (a panic in `Hash`, `Eq` or `Clone` changes
//! nothing: a growth clones and hashes every key before it changes anything; a panicking `Drop`
//! runs after every lock is released, the other removed keys are still dropped, each exactly
//! once, and the panic reaches the call that freed it, whose own effect, an admission say, has
//! then taken place without its answer reaching the caller); `Drop` may call back into the
//! limiter. A key's `Eq`, `Hash` or `Clone` that calls the same limiter may deadlock on a new key
//! (the shard lock is not reentrant). The clock is read before a lookup begins.
//!
//! **Bounded memory with a parked reader.** A removed key is freed when no lookup that began
//! before its removal is still running: normally at once (by the eviction that removed it). A
//! thread parked inside a lookup (a key's `Eq` that blocks) keeps what was removed after it
//! parked; [`KeyedLimiter::unreclaimed`] counts it. While that count is at `max_keys`, new keys get
//! the overflow policy, as on a full map, so one parked thread holds at most about `2 × max_keys`
//! removed keys (a sweep can remove up to `max_keys` at once) and the tables replaced meanwhile,
//! never memory without bound. Removed keys are freed, and new keys admitted, as soon as it leaves.
//! The reclaimer looks at the readers after each write that removed something, and otherwise at
//! most every 8 to 4 096 writes (backing off while a look frees nothing).
//!
//! **Threads, signals and `fork`.** Lookups of threads beyond the first 2 048 alive at once, and
//! lookups made from a thread-local destructor after the thread's slot was given back, run under
//! the shard lock instead. A lookup made from a signal handler that interrupted another lookup is
//! protected by the interrupted one (entering is one store); the paths that take a lock (a new
//! key) are not async-signal-safe. In the child of a `fork`, the readers of the parent's other
//! threads are ignored (they do not exist there); but as with any `std` mutex, a shard lock another
//! thread held at the fork stays held in the child. If `membarrier(2)` fails after start-up, each
//! reclamation falls back to a slower process-wide barrier on x86 (elsewhere, nothing more is
//! freed, and new keys meet the overflow policy once `max_keys` removed keys wait), and
//! [`barrier_failures`] counts it. A filter (seccomp) that makes `membarrier(2)` answer 0 without
//! running it is safe only if installed before the first keyed lookup (the crate then asks the
//! kernel what it offers, is told nothing, and fences); installed later, it cannot be detected,
//! and a program that must filter the call after start-up should make it fail with an error
//! instead. A reader that is only descheduled in the middle of a lookup holds removed keys back
//! like a parked one, for as long as it is off the CPU: with a small `max_keys`, new keys can meet
//! the overflow policy meanwhile.
//!
//! **Why this map.** DashMap, the crate's map until then (and governor's), holds a shard's read
//! lock for every lookup: two read-modify-writes on a word every core hitting that shard shares.
//! The maps with lock-free reads measured beside it (`benches/README.md`, the `maps` bench) cost
//! more memory and lost to DashMap on one thread. This table keeps DashMap's layout (keys and
//! states inline in the slots, so a lookup meets one cache miss for the control bytes and one for
//! the entry), and grows without moving a key a reader may hold: the keys are cloned into the new
//! table, each one-word state is copied and its original sealed with the gone mark, and a lookup
//! that meets a seal goes on in the new table, without a lock (so a lookup never waits for a
//! growth, from a signal handler that interrupted one included). Measured figures of speed and
//! memory are in `benches/README.md`, not here.
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
//! **A reading from the future** (the crate's one rule for these is in
//! [Readings ahead of the clock](crate#readings-ahead-of-the-clock)). An eviction never judges at a
//! reading ahead of the limiter's own clock: [`KeyedLimiter::retain_recent_at`] and every automatic sweep forget as of
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
//! key reserves its place in an atomic count under its shard's lock, before it is inserted, and
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
//! # Changing the quota
//!
//! [`KeyedLimiter::set_quota`] (and [`KeyedLimiter::set_tier_quota`] for one tier) changes every
//! key's quota at runtime, by the crate's rule ([Changing a quota](crate#changing-a-quota)).
//!
//! - **How a check sees it.** Every table of the map carries the *generation* its states are kept
//!   under (the policy and the quotas). A check decides on a state with the generation of the
//!   table it found it in: the two always belong together, and the check loads nothing more.
//! - **How a change runs.** Changes are serialized. A change converts the map one shard at a time
//!   under the shard's lock: each state is sealed (the gone mark, which no decision writes over)
//!   and its successor, converted by the rule, placed in a new table of the new generation, which
//!   is published once the whole shard is in it. A decision that took effect before the seal is
//!   carried over; one that meets the seal took effect nowhere and decides again on the
//!   successor (waiting, if the shard's new table is not published yet, for the shard's lock:
//!   the only wait a check can meet, one shard's conversion at most). A new key is created in
//!   whichever generation its shard holds.
//! - **Keys not held.** A key the map does not hold stands for a fresh state, so the rule carries
//!   it too: when the capacity grows, a key first seen after the change starts from the old
//!   capacity's admissions at the change and refills by the new quota (a window key: the old
//!   count in the change's window). Until such a key would be full again (the *settling*: at
//!   most the time the new quota takes to refill from the old capacity, or two windows), no key
//!   is forgotten, since a forgotten key would come back fresher than that.
//! - **Tiers.** [`KeyedLimiter::set_tier_quota`] converts the keys of its tier; the other
//!   tiers' keys move to the new tables exactly as they were, fractions included.
//! - **What does not change.** The overflow limiter ([`Overflow::Shared`]) keeps its own quota. A
//!   [`Reservation`](crate::Reservation) made before a change gives nothing back after it.
//! - **Memory.** A change replaces every table; the old ones are freed once no lookup holds them,
//!   and count in [`KeyedLimiter::unreclaimed`] until then. A lookup parked since the previous
//!   change (a key's `Eq` that blocks) holds that change's copy of the map; a second change
//!   meanwhile waits a second for the readers of that copy to leave (lookups in flight leave in
//!   a few instructions), then is refused
//!   ([`KeyedChangeError::ParkedReader`]) with nothing changed, so
//!   one parked reader holds one copy at most.
//! - **Panics.** A key's `Clone` or `Hash` that panics while a change copies its shard stops the
//!   change there: the shards before it have the new quota, that one and the rest the old one
//!   (each key is still decided with the policy of its own table), [`KeyedLimiter::quota`] still
//!   answers the old quota, and the panic is passed on. Change the quota again to finish.
//!
//! # Memory ordering
//!
//! Decisions on a key race each other exactly as on the direct limiter: a one-word state publishes
//! nothing but itself, so every access to it is `Relaxed`; a sliding window log per key runs the
//! direct log's claim protocol, with its `Acquire`/`AcqRel` orderings and their reasons (see
//! [`crate::window::sliding_log`]). Against eviction, a decision needs only the modification order
//! of the state's own word (the mark replaces the exact value judged, and no decision replaces the
//! mark), with one exception: the floor. An eviction raises the floor before it marks, and marks
//! with `Release`; a decision that meets the mark issues an `Acquire` fence before it creates the
//! key afresh, so that it reads the raised floor (or a later one). Creating, replacing and removing
//! entries are ordered by the map. An admission is not a synchronization point between threads: do
//! not use it to publish other data.

mod algorithm;
mod change;
mod evict;
#[cfg(any(tollgate_loom, fuzzing))]
mod fuzz_table;
mod limiter;
#[cfg(any(feature = "metrics", feature = "tracing"))]
mod observe;
mod reserve;
mod schedule;
mod store;
#[cfg(not(tollgate_loom))]
mod sweeper;
#[allow(unsafe_code)]
mod table;

/// `benches/maps.rs`'s window into the keyed limiter's table. Not an API.
#[cfg(not(tollgate_loom))]
#[doc(hidden)]
pub mod __bench {
    pub use super::table::BenchTable;
}

/// The loom models' and the fuzz target's window into the keyed limiter's table
/// (`loom-tests/tests/table.rs`, `fuzz/fuzz_targets/table_ops.rs`). Not an API.
#[cfg(any(tollgate_loom, fuzzing))]
#[doc(hidden)]
pub mod model_table {
    pub use super::fuzz_table::FuzzTable;
    /// The window with `u64` keys, for the loom models of the table's protocol.
    pub type ModelTable = FuzzTable<u64>;
    pub use crate::cas::Gone;
    #[cfg(tollgate_loom)]
    pub use crate::epoch::{ModelDomain, ModelReader};
}
mod tiers;

/// How many times, in this process, the keyed tables' reclaimer found `membarrier(2)` failing
/// after the process had registered for it (a seccomp filter installed after start-up, say).
/// Each such time it fell back to a slower process-wide barrier (a page-protection change, on
/// x86; elsewhere nothing more was freed); a non-zero count says the process pays that, and why. Always 0 where `membarrier(2)` is not used
/// (not Linux, or refused at start-up: lookups then fence instead).
///
/// # Examples
///
/// ```
/// let failures = tollgate::keyed::barrier_failures();
/// assert_eq!(failures, 0); // an ordinary process: membarrier(2) works, or is not used
/// ```
#[cfg(not(tollgate_loom))]
pub fn barrier_failures() -> u64 {
    crate::epoch::membarrier_failures()
}

pub use crate::algorithm::Algorithm;
pub use crate::outcome::{KeyedError, TooManyKeys};
pub use algorithm::{
    FixedWindowKeys, LeakyMeterKeys, SlidingWindowCounterKeys, SlidingWindowLogKeys, Tiered,
    TokenBucketKeys,
};
pub use change::KeyedChangeError;
pub use evict::Overflow;
pub use limiter::KeyedLimiter;
#[cfg(not(tollgate_loom))]
pub use sweeper::Sweeper;
