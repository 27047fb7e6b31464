//! The Redis backend's real Lua scripts, run under Lua 5.1 (the version Redis embeds) against an
//! in-memory fake of the Redis commands they call, through the real client (`RedisLimiter` on a
//! fake connection), every answer compared with the crate's in-process limiter at the same
//! reading, and quota changes held to the documented bound.
//!
//! # The fake server
//!
//! One Lua state holds the six scripts (`tollgate::redis::script_source`, and
//! `all_of_script_source` for several limits), each loaded as a
//! chunk and called once per `EVALSHA` with the globals `KEYS` and `ARGV` set, as Redis runs them.
//! `redis.call` answers `GET`, `SET` (plain, or with `PX`), `PEXPIRE`, `PERSIST`, `HMGET`, `HSET`,
//! `ZRANGE` and `ZREVRANGE` (by rank, `WITHSCORES`), `ZCOUNT`, `ZREMRANGEBYSCORE`, `ZADD`, `ZREM`
//! and `TIME` from a map of strings, hashes and sorted sets with expiry times (on the server's
//! clock, the reading of the operation), as Redis 7.0 (the version the crate's server tests run)
//! answers them:
//!
//! - replies converted as Redis converts them for Lua (a nil bulk string is `false`, a status is
//!   `{ok = ...}`, an integer a number), Lua numbers passed as arguments formatted with `%.17g`
//!   (integers below 10^17 in full);
//! - sorted sets ordered by score, then by member bytes; scores are doubles (`-0` stored as `0`,
//!   as a small set's listpack does); ranks from either end, clamped as Redis clamps them; score
//!   ranges with `(` for an exclusive bound and `-inf`/`+inf`, parsed as Redis parses them
//!   (`strtod`, white space first allowed, `(` alone meaning 0); `ZADD` scores as Redis parses
//!   them (no white space, no overflow, no NaN); `WITHSCORES` scores formatted `%.17g`, infinities
//!   as `inf` and `-inf`; a set left empty is deleted;
//! - `WRONGTYPE` for a command on another structure, raised as a Lua error as `redis.call` does;
//!   Redis's own errors for bad numbers, bad expiry times and wrong arity; any command or form the
//!   scripts should not use answered with an error that fails the run (`DEL` included: no script
//!   needs it any more).
//!
//! `redis.error_reply(msg)` returns `{err = msg}`. A script's reply is converted as Redis converts
//! it for a RESP2 client (a number cast to `long long` as x86-64 casts, NaN and out-of-range
//! values to -2^63; `true` to 1, `false` to nil, a table with `err` to an error reply, any other
//! table to an array up to its first nil), and reaches the client as a `redis::Value`, so it goes
//! through the real reply decoder and the real error classification. A key written with a TTL of
//! `ms` milliseconds expires at the first reading at or after `ms x 1000` us later (Redis keeps it
//! until the next millisecond: the fake expires keys earlier, never later).
//!
//! # What runs
//!
//! Up to 3 sequences, each for one algorithm (the token bucket, the leaky meter, the fixed window,
//! the sliding window counter, the sliding window log) with an adversarial quota, and often a
//! second quota for the same key (the first with its count, period or capacity scaled, as a tier
//! changes, or any other): GCRA intervals from 1 ns to 2^62 ns, from ratios that leave a
//! nanosecond remainder, capacities up to the largest each plan accepts (a 2^52 ns burst window,
//! a 2^52 us one) and one past it; windows from 1 us to 2^52 us, a window with a nanosecond
//! remainder or past 2^52 us; counts up to each window plan's largest (2^52 for the fixed window,
//! count x window below 2^52 for the counter, `MAX_LOG` for the log) and one past it. The builder
//! must accept exactly the quotas the plan rules accept (mirrored here from
//! `src/redis/script.rs`), and every `EVALSHA` must carry the `ARGV` those rules give: mode, n, the
//! plan's arguments, the reading (or "" for the server's `TIME`), and a lease's tokens given back.
//!
//! Then up to 96 operations: clock steps forwards and backwards (microseconds, quarters of an
//! interval or window, whole burst windows, powers of two, anywhere; readings kept in
//! `[base, base + 2^62 ns]` and below 2^53 us, from near 0, around today, up to 2^53 - 1), and
//! steps to the next boundary the state implies (the last compared answer's retry, delay, next
//! or reset after its reading, rounded up to the microsecond), exactly or one microsecond either
//! side of it, where an off-by-one in a script's comparisons shows;
//! admissions, peeks, (the meter) schedulings and (the bucket) leases of n = 0..=capacity + 1,
//! giving back 0..=capacity + 1, each through the limiter that sends its reading or the one that
//! lets the script read `TIME`, under the sequence's quota or the second one; the key forgotten
//! (a key Redis has never seen); and probes: a foreign value at the key (a string that is no
//! state, a valid state under another quota, a hash with any of the fields, a sorted set with or
//! without a quota member, entries at any score), an out-of-range reading, and arguments the
//! client never sends. A log of more than 64 entries admits large amounts only now and then, at
//! most two whole logs' worth per sequence (each entry is a sorted-set insertion, on the fake and
//! in process).
//!
//! A third of the inputs drive instead the calls this harness does not: several token-bucket
//! limits on one key (`RedisAllOf`) and one bucket's reservations and cancels, against the
//! in-process `AllOf` and keyed reservations (see `Extra` below for what they check).
//!
//! # Checks
//!
//! - While every write to the key was made under the sequence's quota, every answer (admitted or
//!   denied, `remaining`, `reset_after`, `retry_after`, `retry_at`, `next_after`; for
//!   schedulings `delay`, `queued`, `remaining`, `reset_after`, `depart_at`, `next_after`; for
//!   leases the tokens granted and
//!   `retry_after`; or `InsufficientCapacity`, without a round trip) equals the in-process
//!   limiter's at `(reading - base) x 1000` ns, `base` a multiple of the window at or below the
//!   earliest reading: a direct `TokenBucket` (a lease is `refund_at`, then `try_acquire_n_at` of
//!   `min(n, remaining_at)`, or `peek_n_at(1)`'s wait when that is 0), a direct `LeakyMeter`,
//!   `KeyedLimiter<u64, FixedWindowKeys | SlidingWindowCounterKeys | SlidingWindowLogKeys>`. The
//!   reference's quota is the quota itself, or, where the plan counts microseconds and the
//!   interval is not a whole one, the quota with the plan's rounded-up interval, which the script
//!   enforces exactly. The documented clamps are applied to the reference's answer: a GCRA state
//!   more than 2^53 ticks ahead of the reading is read as 2^53 ticks ahead; the windows' spans
//!   are at most 2^53 us (the prelude's `LIMIT`, "the largest span a reply carries"). The
//!   counter's `retry_after` and `next_after` are compared rounded up to a whole microsecond on
//!   both sides (in process they are exact to the nanosecond).
//! - Under a quota other than the one the state was written with, while that state still counts
//!   (the old quota's own query reads a `reset_after` above zero): `remaining` is never more than
//!   the old quota's alone nor more than the new capacity; a request admitted under the new quota
//!   fits the old one too (its peek admits it; a lease takes no more than its remaining); a
//!   denial's `remaining` is the query's. After any admission that no in-process twin follows,
//!   the answers are self-consistent: `remaining` is the query's before it less what was taken,
//!   and a query right after (no time passed) answers the admission's `remaining`, `reset_after`
//!   and `next_after`.
//! - Denials, peeks and queries never write (the store is the same before and after, expiry
//!   times included); an admission writes the state the script's header describes, at the
//!   reading, under the plan's quota, one the script itself reads as its own, with a TTL of the
//!   span until the state reads as fresh rounded up to the millisecond (at least 1 ms) on the
//!   server's clock, and none with a client's reading; that TTL is never shorter than the
//!   in-process limiter's `reset_after`.
//! - When the fake expires the state, the quota that wrote it reads it as fresh at that reading
//!   (all of the capacity, `reset_after` zero), and so does the in-process limiter; both are then
//!   replaced by none, as Redis has no state left either.
//! - A foreign value answers the script's `TOLLGATE foreign value` error (a `ForeignValue` on the
//!   client) or the fake's `WRONGTYPE` (a `Server` error), never a panic or a Lua error, and
//!   writes nothing; a value the script's own checks accept answers a well-formed reply. An
//!   out-of-range reading answers `TOLLGATE bad reading`, arguments out of range `TOLLGATE bad
//!   arguments`, neither writing.

#![no_main]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::rc::Rc;
use std::sync::LazyLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use mlua::{Function, Lua, MultiValue, Value as LuaValue};
use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};
use tollgate::keyed::{
    FixedWindowKeys, KeyedError, KeyedLimiter, LeakyMeterKeys, SlidingWindowCounterKeys,
    SlidingWindowLogKeys, TokenBucketKeys,
};
use tollgate::leaky::LeakyMeter;
use tollgate::redis::{
    all_of_script_source, script_source, AllOfFailurePolicy, FailurePolicy, RedisAlgorithm,
    RedisAllOf, RedisError, RedisLimiter, Unavailable, UnavailableKind, MAX_WAIT,
};
use tollgate::window::MAX_LOG;
use tollgate::{
    AcquireError, Admitted, AllOf, Denied, KeyedLimit, ManualClock, Nanos, Quota, ReserveError,
    Scheduled, TokenBucket,
};

/// 2^52: the longest span a script counts (burst windows, windows), in its ticks.
const MAXD: u64 = 1 << 52;
/// 2^53: where Lua's doubles stop being exact; readings stay below it, spans are clamped to it.
const LIMIT: u64 = 1 << 53;
/// The latest reading a script accepts, in Unix microseconds.
const MAX_READING: u64 = LIMIT - 1;
/// The most microseconds between the earliest reading of a sequence and any other: in-process
/// readings stay within 2^62 ns, below the in-process limiters' clamp.
const MAX_SPAN_US: u64 = (1 << 62) / 1000;
/// About today, in Unix microseconds.
const TODAY_US: u64 = 1_800_000_000_000_000;
/// The most operations one sequence runs.
const MAX_OPS: usize = 96;
/// The most sequences one input runs.
const MAX_SEQUENCES: usize = 3;
/// The key every sequence uses.
const KEY: &str = "k";
/// What Redis answers to a command on a key of another type.
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

// --- the fake server ------------------------------------------------------------------------------

/// A sorted set's score: a double, never NaN (Redis refuses one), `-0` stored as `0`; kept as
/// the `u64` whose order is the doubles' order, so that comparing two is one integer compare.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Score(u64);

impl Score {
    fn new(x: f64) -> Score {
        assert!(!x.is_nan(), "a NaN score");
        let bits = if x == 0.0 { 0.0f64 } else { x }.to_bits();
        Score(if bits >> 63 == 1 {
            !bits
        } else {
            bits | 1 << 63
        })
    }

    fn value(self) -> f64 {
        f64::from_bits(if self.0 >> 63 == 1 {
            self.0 & !(1 << 63)
        } else {
            !self.0
        })
    }
}

impl fmt::Debug for Score {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value())
    }
}

/// A sorted set's entry in Redis's order: by score, then by member (`memcmp` over the shorter
/// length, then the shorter first). The member's first 24 bytes are kept as three big-endian
/// words, zero-padded (an order consistent with the bytes'), so that most comparisons are a few
/// integer compares and the bytes are compared only when those are equal: libFuzzer traces every
/// compare and hooks `memcmp`, which would otherwise dominate a log of 65 536 entries.
#[derive(Clone, PartialEq, Eq)]
struct Ranked {
    score: Score,
    prefix: [u64; 3],
    member: Vec<u8>,
}

impl Ranked {
    fn new(score: Score, member: &[u8]) -> Ranked {
        let mut padded = [0u8; 24];
        let head = member.len().min(24);
        padded[..head].copy_from_slice(&member[..head]);
        let word = |i: usize| u64::from_be_bytes(padded[i * 8..i * 8 + 8].try_into().expect("8"));
        Ranked {
            score,
            prefix: [word(0), word(1), word(2)],
            member: member.to_vec(),
        }
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Ranked) -> std::cmp::Ordering {
        if self.score != other.score {
            return self.score.cmp(&other.score);
        }
        for i in 0..3 {
            if self.prefix[i] != other.prefix[i] {
                return self.prefix[i].cmp(&other.prefix[i]);
            }
        }
        self.member.cmp(&other.member)
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Ranked) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Debug for Ranked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?}@{:?}",
            String::from_utf8_lossy(&self.member),
            self.score
        )
    }
}

/// A hasher of a member's bytes a word at a time (the standard one compares at every byte,
/// each compare traced by libFuzzer).
#[derive(Default)]
struct WordHasher(u64);

impl std::hash::Hasher for WordHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.0 = (self.0.rotate_left(5) ^ u64::from_le_bytes(word))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn finish(&self) -> u64 {
        // Every bit of the words reaches the low bits the table indexes by.
        let h = (self.0 ^ (self.0 >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93);
        h ^ (h >> 32)
    }
}

type Members = HashMap<Vec<u8>, Score, std::hash::BuildHasherDefault<WordHasher>>;

/// A sorted set: each member's score, and the entries in Redis's order.
#[derive(Clone, Default)]
struct ZSet {
    scores: Members,
    order: BTreeSet<Ranked>,
}

impl PartialEq for ZSet {
    fn eq(&self, other: &ZSet) -> bool {
        // The order holds every member and its score.
        self.order == other.order
    }
}

impl Eq for ZSet {}

impl fmt::Debug for ZSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(&self.order).finish()
    }
}

impl ZSet {
    /// Adds `member` at `score`, or moves it there; whether it was new.
    fn insert(&mut self, member: &[u8], score: f64) -> bool {
        let score = Score::new(score);
        let old = self.scores.insert(member.to_vec(), score);
        if let Some(old) = old {
            self.order.remove(&Ranked::new(old, member));
        }
        self.order.insert(Ranked::new(score, member));
        old.is_none()
    }

    fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(score) => self.order.remove(&Ranked::new(score, member)),
            None => false,
        }
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).map(|s| s.value())
    }

    fn len(&self) -> usize {
        self.order.len()
    }

    /// The lowest and the highest entry.
    fn first(&self) -> Option<(f64, &[u8])> {
        self.order
            .first()
            .map(|r| (r.score.value(), r.member.as_slice()))
    }

    fn last(&self) -> Option<(f64, &[u8])> {
        self.order
            .last()
            .map(|r| (r.score.value(), r.member.as_slice()))
    }

    /// Every entry, in order.
    fn entries(&self) -> impl DoubleEndedIterator<Item = (f64, &[u8])> {
        self.order
            .iter()
            .map(|r| (r.score.value(), r.member.as_slice()))
    }

    /// The entries whose score is in `range`, in order.
    fn in_range(&self, range: ScoreRange) -> impl Iterator<Item = (f64, &[u8])> {
        // From the lowest score at or above the minimum.
        let from = Ranked::new(Score::new(range.min), &[]);
        self.order
            .range(from..)
            .map(|r| (r.score.value(), r.member.as_slice()))
            .take_while(move |(s, _)| *s <= range.max)
            .filter(move |(s, _)| range.contains(*s))
    }

    /// The entries at ranks `start..=stop` (negative ranks count from the end), from the lowest
    /// score or (`rev`) the highest, clamped as `ZRANGE` and `ZREVRANGE` clamp them.
    fn by_rank(&self, start: i64, stop: i64, rev: bool) -> Vec<(f64, Vec<u8>)> {
        let len = self.len() as i64;
        let start = if start < 0 { start + len } else { start }.max(0);
        let stop = if stop < 0 { stop + len } else { stop };
        if start > stop || start >= len {
            return Vec::new();
        }
        let stop = stop.min(len - 1);
        let take = (stop - start + 1) as usize;
        // Walked from the nearer end.
        let from_end = start > len - 1 - stop;
        let mut items: Vec<(f64, Vec<u8>)> = if rev == from_end {
            let skip = if from_end { len - 1 - stop } else { start };
            self.entries()
                .skip(skip as usize)
                .take(take)
                .map(|(s, m)| (s, m.to_vec()))
                .collect()
        } else {
            let skip = if from_end { len - 1 - stop } else { start };
            self.entries()
                .rev()
                .skip(skip as usize)
                .take(take)
                .map(|(s, m)| (s, m.to_vec()))
                .collect()
        };
        if from_end {
            items.reverse();
        }
        items
    }
}

/// A score range of `ZCOUNT` and `ZREMRANGEBYSCORE`.
#[derive(Debug, Clone, Copy)]
struct ScoreRange {
    min: f64,
    min_ex: bool,
    max: f64,
    max_ex: bool,
}

impl ScoreRange {
    fn contains(&self, s: f64) -> bool {
        let above = if self.min_ex {
            s > self.min
        } else {
            s >= self.min
        };
        let below = if self.max_ex {
            s < self.max
        } else {
            s <= self.max
        };
        above && below
    }
}

/// A value in the fake's keyspace. A sorted set is shared until written (the snapshots taken
/// around every `EVALSHA` clone only the reference).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Data {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    ZSet(Rc<ZSet>),
}

/// A key's value and its expiry time (Unix microseconds on the server's clock; `None`: never).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    data: Data,
    expires_at: Option<u64>,
}

/// The fake's keyspace and clock.
#[derive(Debug, Default)]
struct Store {
    keys: BTreeMap<Vec<u8>, Entry>,
    /// The server's clock, in Unix microseconds: what `TIME` answers and expiry is judged by.
    now_us: u64,
}

/// An error reply of a command (`CODE detail`), raised in the script as `redis.call` raises it.
#[derive(Debug)]
struct CommandError(String);

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CommandError {}

/// A command's reply, before its conversion to Lua.
#[derive(Debug)]
enum Reply {
    /// A nil bulk string: `false` in Lua.
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    /// A status: `{ok = ...}` in Lua.
    Status(&'static str),
    Array(Vec<Reply>),
}

fn error(msg: impl Into<String>) -> CommandError {
    CommandError(msg.into())
}

/// An integer argument as Redis parses one (`string2ll`: an optional `-`, then digits without a
/// leading zero, within `i64`).
fn integer(arg: &[u8]) -> std::result::Result<i64, CommandError> {
    let text = std::str::from_utf8(arg).ok();
    let canonical = text.and_then(|t| t.parse::<i64>().ok().filter(|v| v.to_string() == t));
    canonical.ok_or_else(|| error("ERR value is not an integer or out of range"))
}

/// C's `isspace` in the C locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The bytes a C function sees of `s`: up to its first NUL.
fn c_str(s: &[u8]) -> &[u8] {
    s.iter().position(|&b| b == 0).map_or(s, |i| &s[..i])
}

/// glibc's `strtod` on `s`: the value, the bytes it read (0 when it read no number, white space
/// included), and whether it set `ERANGE` to an infinity or a zero (an overflow, or an underflow
/// of a non-zero number to zero). White space, a sign, then `inf`, `infinity` or `nan` (with an
/// optional `(chars)`), a hexadecimal number (`0x`, digits, a point, a `p` exponent; its value
/// summed in doubles, exact up to 2^53) or a decimal one (rounded correctly, as glibc does).
fn strtod(s: &[u8]) -> (f64, usize, bool) {
    // The common case, quickly: up to 19 digits, an integer a `u64` holds, whose conversion to a
    // double rounds as glibc's does (to nearest).
    if (1..=19).contains(&s.len()) && s.iter().all(u8::is_ascii_digit) {
        let value: u64 = std::str::from_utf8(s)
            .expect("digits")
            .parse()
            .expect("19 digits");
        return (value as f64, s.len(), false);
    }
    let none = (0.0, 0, false);
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let start = i;
    let negative = matches!(s.get(i), Some(b'-'));
    if matches!(s.get(i), Some(b'+' | b'-')) {
        i += 1;
    }
    let sign = if negative { -1.0 } else { 1.0 };
    let rest = &s[i..];
    let starts =
        |word: &[u8]| rest.len() >= word.len() && rest[..word.len()].eq_ignore_ascii_case(word);
    if starts(b"infinity") {
        return (sign * f64::INFINITY, i + 8, false);
    }
    if starts(b"inf") {
        return (sign * f64::INFINITY, i + 3, false);
    }
    if starts(b"nan") {
        let mut end = i + 3;
        if s.get(end) == Some(&b'(') {
            let close = s[end + 1..]
                .iter()
                .position(|&b| !(b.is_ascii_alphanumeric() || b == b'_'));
            if let Some(k) = close {
                if s[end + 1 + k] == b')' {
                    end += k + 2;
                }
            }
        }
        return (f64::NAN.copysign(sign), end, false);
    }
    let hex = |b: u8| (b as char).to_digit(16);
    if starts(b"0x")
        && (rest.get(2).is_some_and(|&b| hex(b).is_some())
            || (rest.get(2) == Some(&b'.') && rest.get(3).is_some_and(|&b| hex(b).is_some())))
    {
        let mut j = i + 2;
        let mut mantissa = 0.0f64;
        let mut scale = 0i32;
        while let Some(d) = s.get(j).and_then(|&b| hex(b)) {
            mantissa = mantissa * 16.0 + f64::from(d);
            j += 1;
        }
        if s.get(j) == Some(&b'.') {
            j += 1;
            while let Some(d) = s.get(j).and_then(|&b| hex(b)) {
                mantissa = mantissa * 16.0 + f64::from(d);
                scale -= 4;
                j += 1;
            }
        }
        let mut exp = 0i32;
        if matches!(s.get(j), Some(b'p' | b'P')) {
            let mut k = j + 1;
            let neg = s.get(k) == Some(&b'-');
            if matches!(s.get(k), Some(b'+' | b'-')) {
                k += 1;
            }
            if s.get(k).is_some_and(u8::is_ascii_digit) {
                while let Some(b) = s.get(k).filter(|b| b.is_ascii_digit()) {
                    exp = exp.saturating_mul(10).saturating_add(i32::from(b - b'0'));
                    k += 1;
                }
                if neg {
                    exp = -exp;
                }
                j = k;
            }
        }
        let value = sign * mantissa * 2f64.powi(exp.saturating_add(scale));
        let erange = value.is_infinite() || (value == 0.0 && mantissa != 0.0);
        return (value, j, erange);
    }
    // Decimal: digits, a point, digits (at least one digit in all), then an exponent if it has
    // digits.
    let mut j = i;
    let mut digits = 0;
    let mut nonzero = false;
    while let Some(&b) = s.get(j).filter(|b| b.is_ascii_digit()) {
        digits += 1;
        nonzero |= b != b'0';
        j += 1;
    }
    if s.get(j) == Some(&b'.') {
        j += 1;
        while let Some(&b) = s.get(j).filter(|b| b.is_ascii_digit()) {
            digits += 1;
            nonzero |= b != b'0';
            j += 1;
        }
    }
    if digits == 0 {
        return none;
    }
    if matches!(s.get(j), Some(b'e' | b'E')) {
        let mut k = j + 1;
        if matches!(s.get(k), Some(b'+' | b'-')) {
            k += 1;
        }
        if s.get(k).is_some_and(u8::is_ascii_digit) {
            while s.get(k).is_some_and(u8::is_ascii_digit) {
                k += 1;
            }
            j = k;
        }
    }
    let text = std::str::from_utf8(&s[start..j]).expect("ASCII");
    let value: f64 = text
        .parse()
        .expect("a decimal number Rust parses as glibc does");
    let erange = value.is_infinite() || (value == 0.0 && nonzero);
    (value, j, erange)
}

/// Lua 5.1's `tonumber` of a string (`luaO_str2d` on its C string): `strtod`, nothing if it read
/// no number or stopped at an `x` (its `strtoul` retry stops there too), then only white space.
fn lua_tonumber(s: &[u8]) -> Option<f64> {
    let s = c_str(s);
    let (value, end, _) = strtod(s);
    if end == 0 || matches!(s.get(end), Some(b'x' | b'X')) {
        return None;
    }
    s[end..].iter().all(|&b| is_c_space(b)).then_some(value)
}

/// A score argument as Redis 7.0 parses one (`getDoubleFromObject`): the whole argument read by
/// `strtod`, no white space first, no overflow or underflow to zero, no NaN.
fn score_arg(arg: &[u8]) -> std::result::Result<f64, CommandError> {
    let (value, end, erange) = strtod(arg);
    if arg.is_empty() || is_c_space(arg[0]) || end != arg.len() || erange || value.is_nan() {
        return Err(error("ERR value is not a valid float"));
    }
    Ok(value)
}

/// One bound of a score range as Redis 7.0 parses it (`zslParseRange`): `(` for an exclusive
/// bound, then `strtod` up to the end of the C string, no NaN.
fn range_bound(arg: &[u8]) -> std::result::Result<(f64, bool), CommandError> {
    let (exclusive, body) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let body = c_str(body);
    let (value, end, _) = strtod(body);
    if end != body.len() || value.is_nan() {
        return Err(error("ERR min or max is not a float"));
    }
    Ok((value, exclusive))
}

fn score_range(min: &[u8], max: &[u8]) -> std::result::Result<ScoreRange, CommandError> {
    let (min, min_ex) = range_bound(min)?;
    let (max, max_ex) = range_bound(max)?;
    Ok(ScoreRange {
        min,
        min_ex,
        max,
        max_ex,
    })
}

/// A double as C's `printf("%.17g")` formats it: what Redis 7.0 makes of a Lua number argument
/// and of a double reply (with `inf` and `-inf` for the infinities).
fn g17(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    let sci = format!("{x:.16e}");
    let (mantissa, exp) = sci.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("an integer exponent");
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if x.is_sign_negative() {
        out.push('-');
    }
    let point = |out: &mut String, frac: &str| {
        let frac = frac.trim_end_matches('0');
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
    };
    if (-4..17).contains(&exp) {
        if exp >= 0 {
            let (int, frac) = digits.split_at(exp as usize + 1);
            out.push_str(int);
            point(&mut out, frac);
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(digits.trim_end_matches('0'));
        }
    } else {
        let (first, frac) = digits.split_at(1);
        out.push_str(first);
        point(&mut out, frac);
        out.push_str(&format!(
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        ));
    }
    out
}

/// C's `(long long)` of a double on x86-64: truncated toward zero, NaN and anything out of range
/// -2^63.
fn c_long_long(x: f64) -> i64 {
    // NaN is in no range.
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&x) {
        x as i64
    } else {
        i64::MIN
    }
}

impl Store {
    /// The sorted set at `key` (`None` when there is none), or `WRONGTYPE`.
    fn zset(&self, key: &[u8]) -> std::result::Result<Option<&ZSet>, CommandError> {
        match self.keys.get(key).map(|e| &e.data) {
            None => Ok(None),
            Some(Data::ZSet(z)) => Ok(Some(z)),
            Some(_) => Err(error(WRONGTYPE)),
        }
    }

    /// The sorted set at `key` to write (created empty when `create`), or `WRONGTYPE`.
    fn zset_mut(
        &mut self,
        key: &[u8],
        create: bool,
    ) -> std::result::Result<Option<&mut ZSet>, CommandError> {
        if create && !self.keys.contains_key(key) {
            let entry = Entry {
                data: Data::ZSet(Rc::new(ZSet::default())),
                expires_at: None,
            };
            self.keys.insert(key.to_vec(), entry);
        }
        match self.keys.get_mut(key).map(|e| &mut e.data) {
            None => Ok(None),
            Some(Data::ZSet(z)) => Ok(Some(Rc::make_mut(z))),
            Some(_) => Err(error(WRONGTYPE)),
        }
    }

    /// Deletes the key if it holds an empty sorted set, as Redis does after a removal.
    fn drop_if_empty(&mut self, key: &[u8]) {
        if matches!(self.keys.get(key).map(|e| &e.data), Some(Data::ZSet(z)) if z.len() == 0) {
            self.keys.remove(key);
        }
    }

    /// The expiry time `ms` milliseconds from now, as `SET ... PX` and `PEXPIRE` check it.
    fn expiry(&self, ms: i64, command: &str) -> std::result::Result<u64, CommandError> {
        let now_ms = i64::try_from(self.now_us / 1000).unwrap_or(i64::MAX);
        if ms <= 0 || ms > i64::MAX - now_ms {
            return Err(error(format!(
                "ERR invalid expire time in '{command}' command"
            )));
        }
        let at = u128::from(self.now_us) + ms as u128 * 1000;
        Ok(u64::try_from(at).unwrap_or(u64::MAX))
    }

    /// Runs one command: `args[0]` is its name.
    fn command(&mut self, args: &[Vec<u8>]) -> std::result::Result<Reply, CommandError> {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let arity = |ok: bool| {
            if ok {
                Ok(())
            } else {
                Err(error(format!(
                    "ERR wrong number of arguments for '{}' command",
                    name.to_ascii_lowercase()
                )))
            }
        };
        match name.as_str() {
            "GET" => {
                arity(args.len() == 2)?;
                match self.keys.get(&args[1]).map(|e| &e.data) {
                    None => Ok(Reply::Nil),
                    Some(Data::Str(s)) => Ok(Reply::Bulk(s.clone())),
                    Some(_) => Err(error(WRONGTYPE)),
                }
            }
            "SET" => {
                arity(args.len() >= 3)?;
                // The forms the scripts use: plain (which drops a TTL) and with PX.
                let expires_at = match &args[3..] {
                    [] => None,
                    [option, ms] if option.eq_ignore_ascii_case(b"PX") => {
                        Some(self.expiry(integer(ms)?, "set")?)
                    }
                    _ => return Err(error("ERR the fake models SET key value [PX ms] only")),
                };
                let entry = Entry {
                    data: Data::Str(args[2].clone()),
                    expires_at,
                };
                self.keys.insert(args[1].clone(), entry);
                Ok(Reply::Status("OK"))
            }
            "PEXPIRE" => {
                if args.len() != 3 {
                    return Err(error("ERR the fake models PEXPIRE key milliseconds only"));
                }
                let ms = integer(&args[2])?;
                if !self.keys.contains_key(&args[1]) {
                    return Ok(Reply::Int(0));
                }
                if ms <= 0 {
                    // An expiry time in the past deletes the key.
                    self.keys.remove(&args[1]);
                    return Ok(Reply::Int(1));
                }
                let at = self.expiry(ms, "pexpire")?;
                self.keys.get_mut(&args[1]).expect("present").expires_at = Some(at);
                Ok(Reply::Int(1))
            }
            "PERSIST" => {
                arity(args.len() == 2)?;
                let Some(entry) = self.keys.get_mut(&args[1]) else {
                    return Ok(Reply::Int(0));
                };
                Ok(Reply::Int(i64::from(entry.expires_at.take().is_some())))
            }
            "HMGET" => {
                arity(args.len() >= 3)?;
                let fields = &args[2..];
                match self.keys.get(&args[1]).map(|e| &e.data) {
                    None => Ok(Reply::Array(fields.iter().map(|_| Reply::Nil).collect())),
                    Some(Data::Hash(h)) => Ok(Reply::Array(
                        fields
                            .iter()
                            .map(|f| h.get(f).map_or(Reply::Nil, |v| Reply::Bulk(v.clone())))
                            .collect(),
                    )),
                    Some(_) => Err(error(WRONGTYPE)),
                }
            }
            "HSET" => {
                arity(args.len() >= 4 && args.len().is_multiple_of(2))?;
                if !matches!(
                    self.keys.get(&args[1]).map(|e| &e.data),
                    None | Some(Data::Hash(_))
                ) {
                    return Err(error(WRONGTYPE));
                }
                let entry = self.keys.entry(args[1].clone()).or_insert(Entry {
                    data: Data::Hash(BTreeMap::new()),
                    expires_at: None,
                });
                let Data::Hash(hash) = &mut entry.data else {
                    unreachable!("checked above");
                };
                let mut added = 0;
                for pair in args[2..].chunks(2) {
                    added += i64::from(hash.insert(pair[0].clone(), pair[1].clone()).is_none());
                }
                Ok(Reply::Int(added))
            }
            "ZRANGE" | "ZREVRANGE" => {
                arity(args.len() >= 4)?;
                let withscores = match &args[4..] {
                    [] => false,
                    [w] if w.eq_ignore_ascii_case(b"WITHSCORES") => true,
                    _ if name == "ZREVRANGE" => return Err(error("ERR syntax error")),
                    _ => {
                        return Err(error(
                            "ERR the fake models ZRANGE key start stop [WITHSCORES] only",
                        ))
                    }
                };
                let (start, stop) = (integer(&args[2])?, integer(&args[3])?);
                let items = match self.zset(&args[1])? {
                    None => Vec::new(),
                    Some(z) => z.by_rank(start, stop, name == "ZREVRANGE"),
                };
                let mut reply = Vec::new();
                for (score, member) in items {
                    reply.push(Reply::Bulk(member));
                    if withscores {
                        reply.push(Reply::Bulk(g17(score).into_bytes()));
                    }
                }
                Ok(Reply::Array(reply))
            }
            "ZCOUNT" => {
                arity(args.len() == 4)?;
                let range = score_range(&args[2], &args[3])?;
                let count = self
                    .zset(&args[1])?
                    .map_or(0, |z| z.in_range(range).count());
                Ok(Reply::Int(count as i64))
            }
            "ZREMRANGEBYSCORE" => {
                arity(args.len() == 4)?;
                let range = score_range(&args[2], &args[3])?;
                let Some(z) = self.zset_mut(&args[1], false)? else {
                    return Ok(Reply::Int(0));
                };
                let gone: Vec<Vec<u8>> = z.in_range(range).map(|(_, m)| m.to_vec()).collect();
                for m in &gone {
                    z.remove(m);
                }
                self.drop_if_empty(&args[1]);
                Ok(Reply::Int(gone.len() as i64))
            }
            "ZADD" => {
                arity(args.len() >= 4)?;
                let flags = ["NX", "XX", "GT", "LT", "CH", "INCR"];
                if flags
                    .iter()
                    .any(|f| args[2].eq_ignore_ascii_case(f.as_bytes()))
                {
                    return Err(error("ERR the fake models ZADD key score member ... only"));
                }
                let pairs = &args[2..];
                if !pairs.len().is_multiple_of(2) {
                    return Err(error("ERR syntax error"));
                }
                // Every score is parsed before the key is looked at, as Redis does.
                let scores = pairs
                    .chunks(2)
                    .map(|p| score_arg(&p[0]))
                    .collect::<std::result::Result<Vec<f64>, CommandError>>()?;
                self.zset(&args[1])?;
                let z = self.zset_mut(&args[1], true)?.expect("created");
                let mut added = 0;
                for (pair, score) in pairs.chunks(2).zip(scores) {
                    added += i64::from(z.insert(&pair[1], score));
                }
                Ok(Reply::Int(added))
            }
            "ZREM" => {
                arity(args.len() >= 3)?;
                let Some(z) = self.zset_mut(&args[1], false)? else {
                    return Ok(Reply::Int(0));
                };
                let removed = args[2..].iter().filter(|m| z.remove(m)).count();
                self.drop_if_empty(&args[1]);
                Ok(Reply::Int(removed as i64))
            }
            "TIME" => {
                arity(args.len() == 1)?;
                Ok(Reply::Array(vec![
                    Reply::Bulk((self.now_us / 1_000_000).to_string().into_bytes()),
                    Reply::Bulk((self.now_us % 1_000_000).to_string().into_bytes()),
                ]))
            }
            _ => Err(error(format!("ERR the fake has no command '{name}'"))),
        }
    }

    /// The keys whose expiry time has come at the server's clock.
    fn due(&self) -> Vec<Vec<u8>> {
        let now = self.now_us;
        self.keys
            .iter()
            .filter(|(_, e)| e.expires_at.is_some_and(|at| at <= now))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// A command's reply as Redis hands it to Lua.
fn to_lua(lua: &Lua, reply: Reply) -> mlua::Result<LuaValue> {
    Ok(match reply {
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Int(i) => LuaValue::Number(i as f64),
        Reply::Bulk(b) => LuaValue::String(lua.create_string(b)?),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s)?;
            LuaValue::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
    })
}

/// The arguments of a `redis.call` as Redis 7.0 reads them: strings as they are, numbers
/// formatted `%.17g` (integers below 10^17 in full).
fn command_args(args: MultiValue) -> mlua::Result<Vec<Vec<u8>>> {
    if args.is_empty() {
        return Err(mlua::Error::external(error(
            "ERR Please specify at least one argument for this redis lib call",
        )));
    }
    args.into_iter()
        .map(|v| match v {
            LuaValue::String(s) => Ok(s.as_bytes().to_vec()),
            LuaValue::Integer(i) => Ok(g17(i as f64).into_bytes()),
            LuaValue::Number(f) => Ok(g17(f).into_bytes()),
            _ => Err(mlua::Error::external(error(
                "ERR Lua redis lib command arguments must be strings or integers",
            ))),
        })
        .collect()
}

/// `redis.error_reply(msg)`'s error text: `CODE detail`, with `ERR` as the code of a message
/// without one, as Redis makes it.
fn error_reply_text(msg: &str) -> String {
    let msg = msg.strip_prefix('-').unwrap_or(msg);
    if msg.contains(' ') {
        msg.to_string()
    } else {
        format!("ERR {msg}")
    }
}

/// What the fake answers to `EVALSHA`: the script's reply, or an error reply's text.
#[derive(Debug, Clone, PartialEq)]
enum Answer {
    Reply(Value),
    Error(String),
}

impl Answer {
    fn error_text(&self) -> Option<&str> {
        match self {
            Answer::Error(e) => Some(e),
            Answer::Reply(_) => None,
        }
    }
}

/// A script's reply as Redis sends it to a RESP2 client; `Err` for an error reply.
fn to_value(v: &LuaValue) -> std::result::Result<Value, String> {
    Ok(match v {
        LuaValue::String(s) => Value::BulkString(s.as_bytes().to_vec()),
        LuaValue::Boolean(true) => Value::Int(1),
        LuaValue::Integer(i) => Value::Int(*i),
        LuaValue::Number(f) => Value::Int(c_long_long(*f)),
        LuaValue::Table(t) => {
            if let Ok(LuaValue::String(e)) = t.raw_get::<LuaValue>("err") {
                return Err(e.to_string_lossy());
            }
            if let Ok(LuaValue::String(ok)) = t.raw_get::<LuaValue>("ok") {
                let ok = ok.to_string_lossy();
                return Ok(if ok == "OK" {
                    Value::Okay
                } else {
                    Value::SimpleString(ok)
                });
            }
            let mut items = Vec::new();
            for j in 1.. {
                let item: LuaValue = t.raw_get(j).expect("a table's element");
                if item.is_nil() {
                    break;
                }
                items.push(to_value(&item)?);
            }
            Value::Array(items)
        }
        _ => Value::Nil,
    })
}

/// One `EVALSHA` the fake ran.
#[derive(Debug, Clone)]
struct Eval {
    keys: Vec<Vec<u8>>,
    argv: Vec<Vec<u8>>,
    before: BTreeMap<Vec<u8>, Entry>,
    after: BTreeMap<Vec<u8>, Entry>,
    answer: Answer,
}

impl Eval {
    /// The eight integers of the script's reply.
    fn fields(&self) -> [u64; 8] {
        let Answer::Reply(Value::Array(items)) = &self.answer else {
            panic!("expected a reply, the script answered {:?}", self.answer);
        };
        let mut out = [0; 8];
        assert_eq!(items.len(), 8, "a reply of 8 integers: {items:?}");
        for (slot, item) in out.iter_mut().zip(items) {
            let Value::Int(i) = item else {
                panic!("a reply of integers: {items:?}");
            };
            *slot = u64::try_from(*i).expect("a reply of non-negative integers");
        }
        out
    }
}

/// The fake Redis server: a Lua state with the scripts loaded, and the keyspace its commands use.
struct Server {
    lua: Lua,
    /// The scripts by SHA-1, as the client names them.
    scripts: BTreeMap<String, Function>,
    store: Rc<RefCell<Store>>,
    /// The `EVALSHA`s run since the harness last took them.
    evals: Vec<Eval>,
}

fn script_entry<A: RedisAlgorithm>(lua: &Lua) -> (String, Function) {
    let source = script_source::<A>();
    let sha = redis::Script::new(source).get_hash().to_string();
    let function = lua
        .load(source)
        .set_name(A::SUFFIX)
        .into_function()
        .expect("the script compiles under Lua 5.1");
    (sha, function)
}

impl Server {
    fn new() -> Server {
        let lua = Lua::new();
        let store = Rc::new(RefCell::new(Store::default()));
        let redis = lua.create_table().unwrap();
        let commands = Rc::clone(&store);
        let call = lua
            .create_function(move |lua, args: MultiValue| {
                let args = command_args(args)?;
                let reply = commands
                    .borrow_mut()
                    .command(&args)
                    .map_err(mlua::Error::external)?;
                to_lua(lua, reply)
            })
            .unwrap();
        redis.raw_set("call", call).unwrap();
        let error_reply = lua
            .create_function(|lua, msg: mlua::LuaString| {
                let t = lua.create_table()?;
                t.raw_set("err", error_reply_text(&msg.to_string_lossy()))?;
                Ok(t)
            })
            .unwrap();
        redis.raw_set("error_reply", error_reply).unwrap();
        lua.globals().raw_set("redis", redis).unwrap();
        let all_of = {
            let source = all_of_script_source();
            let sha = redis::Script::new(source).get_hash().to_string();
            let function = lua
                .load(source)
                .set_name("tb-all")
                .into_function()
                .expect("the script compiles under Lua 5.1");
            (sha, function)
        };
        let scripts = [
            script_entry::<TokenBucketKeys>(&lua),
            script_entry::<LeakyMeterKeys>(&lua),
            script_entry::<FixedWindowKeys>(&lua),
            script_entry::<SlidingWindowCounterKeys>(&lua),
            script_entry::<SlidingWindowLogKeys>(&lua),
            all_of,
        ]
        .into_iter()
        .collect();
        Server {
            lua,
            scripts,
            store,
            evals: Vec::new(),
        }
    }

    /// Runs the script `sha` with `keys` and `argv`, as `EVALSHA` does.
    fn eval(&mut self, sha: &str, keys: &[Vec<u8>], argv: &[Vec<u8>]) -> Answer {
        let before = self.store.borrow().keys.clone();
        let answer = self.run_script(sha, keys, argv);
        let after = self.store.borrow().keys.clone();
        self.evals.push(Eval {
            keys: keys.to_vec(),
            argv: argv.to_vec(),
            before,
            after,
            answer: answer.clone(),
        });
        answer
    }

    fn run_script(&self, sha: &str, keys: &[Vec<u8>], argv: &[Vec<u8>]) -> Answer {
        // Called in place, not cloned: a clone of a Lua reference allocates a zero-sized
        // reference count that LeakSanitizer reports as a leak.
        let function = self.scripts.get(sha).expect("a script the fake has loaded");
        let strings = |items: &[Vec<u8>]| {
            let t = self.lua.create_table().unwrap();
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(item).unwrap())
                    .unwrap();
            }
            t
        };
        let globals = self.lua.globals();
        globals.raw_set("KEYS", strings(keys)).unwrap();
        globals.raw_set("ARGV", strings(argv)).unwrap();
        match function.call::<LuaValue>(()) {
            Ok(v) => match to_value(&v) {
                Ok(value) => Answer::Reply(value),
                Err(e) => Answer::Error(e),
            },
            // A command's error is the script's, as Redis passes it on; any other is a script
            // error (a Lua runtime error), which Redis answers with `ERR`.
            Err(e) => match e.downcast_ref::<CommandError>() {
                Some(CommandError(text)) => Answer::Error(text.clone()),
                None => Answer::Error(format!("ERR user_script: {e}")),
            },
        }
    }

    /// Answers a command the client sent, as the server would.
    fn request(&mut self, args: &[Vec<u8>]) -> Value {
        assert_eq!(
            args.first().map(Vec::as_slice),
            Some(&b"EVALSHA"[..]),
            "the client sent a command other than EVALSHA: {args:?}"
        );
        let sha = String::from_utf8(args[1].clone()).expect("a SHA-1 in hex");
        let numkeys: usize = std::str::from_utf8(&args[2]).unwrap().parse().unwrap();
        let keys = &args[3..3 + numkeys];
        let argv = &args[3 + numkeys..];
        match self.eval(&sha, keys, argv) {
            Answer::Reply(v) => v,
            Answer::Error(text) => {
                let line = text.replace(['\r', '\n'], " ");
                let value = redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
                    .expect("an error reply parses");
                assert!(matches!(value, Value::ServerError(_)), "{value:?}");
                value
            }
        }
    }
}

thread_local! {
    static SERVER: RefCell<Option<Server>> = const { RefCell::new(None) };
}

/// Runs `f` on the fake server, created on first use.
fn with_server<T>(f: impl FnOnce(&mut Server) -> T) -> T {
    SERVER.with(|s| f(s.borrow_mut().get_or_insert_with(Server::new)))
}

/// A connection to the fake server.
#[derive(Clone)]
struct FakeConn;

impl ConnectionLike for FakeConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .map(|a| match a {
                Arg::Simple(b) => b.to_vec(),
                _ => panic!("the client sent a cursor argument"),
            })
            .collect();
        let value = with_server(|s| s.request(&args));
        Box::pin(async move { Ok(value) })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _: &'a Pipeline,
        _: usize,
        _: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        panic!("the limiter sent a pipeline; it sends single commands")
    }

    fn get_db(&self) -> i64 {
        0
    }
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
});

// --- the plans, mirrored from src/redis/script.rs ------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    Bucket,
    Meter,
    Window,
    Counter,
    Log,
}

impl Alg {
    fn is_gcra(self) -> bool {
        matches!(self, Alg::Bucket | Alg::Meter)
    }
}

/// What the client sends after the mode and n (`interval, capacity, tick` for the GCRA,
/// `limit, window` for the windows), and the nanoseconds per tick of the reply's spans.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    args: Vec<u64>,
    tick: u64,
}

/// The GCRA's plan: in nanoseconds when the burst window fits 2^52 ns, in microseconds (the
/// interval rounded up) when it fits 2^52 us, otherwise refused.
fn gcra_plan(quota: &Quota) -> Option<Plan> {
    let interval = u64::try_from(quota.interval().as_nanos()).ok()?;
    let capacity = quota.capacity();
    let fits = |i: u64| capacity.checked_mul(i).is_some_and(|b| b <= MAXD);
    if fits(interval) {
        return Some(Plan {
            args: vec![interval, capacity, 1],
            tick: 1,
        });
    }
    let micros = interval.div_ceil(1000);
    fits(micros).then(|| Plan {
        args: vec![micros, capacity, 1000],
        tick: 1000,
    })
}

/// A window plan: the rules in process, then a whole number of microseconds up to 2^52, then the
/// algorithm's own bound on the count.
fn window_plan(alg: Alg, quota: &Quota) -> Option<Plan> {
    let clock = ManualClock::new;
    let in_process = match alg {
        Alg::Window => {
            KeyedLimiter::<u64, FixedWindowKeys, _>::with_algorithm(*quota, clock()).is_ok()
        }
        Alg::Counter => {
            KeyedLimiter::<u64, SlidingWindowCounterKeys, _>::with_algorithm(*quota, clock())
                .is_ok()
        }
        Alg::Log => {
            KeyedLimiter::<u64, SlidingWindowLogKeys, _>::with_algorithm(*quota, clock()).is_ok()
        }
        Alg::Bucket | Alg::Meter => unreachable!("a GCRA plan"),
    };
    let period = u64::try_from(quota.period().as_nanos()).ok()?;
    let window = period / 1000;
    let count = quota.count();
    let fits = match alg {
        Alg::Window => count <= MAXD,
        Alg::Counter => window < MAXD && count.checked_mul(window).is_some_and(|p| p < MAXD),
        _ => true,
    };
    (in_process && period.is_multiple_of(1000) && (1..=MAXD).contains(&window) && fits).then(|| {
        Plan {
            args: vec![count, window],
            tick: 1000,
        }
    })
}

fn plan(alg: Alg, quota: &Quota) -> Option<Plan> {
    if alg.is_gcra() {
        gcra_plan(quota)
    } else {
        window_plan(alg, quota)
    }
}

// --- the input ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `check_key_n`: the bucket's and the windows' take, the meter's strict admission (n = 0: a
    /// query).
    Take,
    /// `peek_key_n`.
    Peek,
    /// The meter's `schedule_key_n`.
    Schedule,
    /// The bucket's `lease_key(n, back)`.
    Lease { back: u64 },
}

/// Which of the sequence's quotas a call is made under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    /// The sequence's quota, which the in-process twin follows.
    Main,
    /// The second quota on the same key.
    Alt,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Forward(u64),
    Back(u64),
    /// To the earliest reading allowed.
    Earliest,
    /// To the latest reading allowed.
    Latest,
    /// To `delta` us (-1, 0 or +1) from the boundary the last compared answer names: `pick` 0
    /// its retry (a denial's, a lease's), delay (a scheduling's) or next (an admission's), 1 its
    /// next, 2 its reset.
    Edge {
        pick: u8,
        delta: i8,
    },
}

/// A reading a script must refuse.
#[derive(Debug, Clone)]
enum BadReading {
    /// Sent as ARGV's reading.
    Sent(Vec<u8>),
    /// The server's clock, at or past 2^53 us.
    Server(u64),
}

#[derive(Debug, Clone)]
enum Op {
    Step(Step),
    Call {
        which: Which,
        kind: Kind,
        n: u64,
        /// The limiter that lets the script read `TIME` (else the one that sends its reading).
        server_time: bool,
    },
    /// The key deleted: from now on a key Redis has never seen.
    Forget,
    /// A foreign value at the key for one call of `kind` for `n`, then the state put back.
    Foreign {
        data: Data,
        kind: Kind,
        n: u64,
        server_time: bool,
    },
    /// A script call (mode `kind`, n) with a reading out of range.
    BadReading {
        reading: BadReading,
        kind: Kind,
        n: u64,
    },
    /// A script call (an admission of 1, or a lease of 1 giving back 0) with ARGV[`at`] replaced
    /// by `with`.
    BadArgs {
        lease: bool,
        at: usize,
        with: Vec<u8>,
    },
}

#[derive(Debug)]
struct Sequence {
    alg: Alg,
    quota: Quota,
    /// A second quota for the same key.
    alt: Option<Quota>,
    /// The first reading, Unix us.
    start: u64,
    /// How far before `start` the earliest reading may be.
    back: u64,
    ops: Vec<Op>,
}

/// A number of tokens: at the boundaries of `0..=capacity + 1`, or anywhere.
fn amount(u: &mut Unstructured<'_>, capacity: u64) -> Result<u64> {
    Ok(match u.int_in_range(0..=9u8)? {
        0 => 0,
        1 | 2 => 1,
        3 => capacity,
        4 => capacity.saturating_add(1),
        5 => capacity - 1,
        6 | 7 => u.int_in_range(1..=capacity.min(8))?,
        8 => u.int_in_range(0..=capacity.saturating_add(1))?,
        _ => u.arbitrary()?,
    })
}

/// A number of tokens for `alg`: as [`amount`], except that a log of more than 64 entries
/// admits its whole capacity (or any large amount) only now and then, and no more than `budget`
/// entries in all, as each entry costs a sorted-set insertion on the fake and in process (a
/// second or so for `MAX_LOG` under the sanitizers).
fn amount_for(u: &mut Unstructured<'_>, alg: Alg, capacity: u64, budget: &mut u64) -> Result<u64> {
    if alg != Alg::Log || capacity <= 64 {
        return amount(u, capacity);
    }
    let n = match u.int_in_range(0..=39u8)? {
        0 => capacity,
        1 => u.int_in_range(0..=capacity)?,
        2 => capacity + 1,
        _ => amount(u, 64)?,
    };
    if n > 64 && n <= capacity {
        if n > *budget {
            return amount(u, 64);
        }
        *budget -= n;
    }
    Ok(n)
}

/// Digits, often at a bound a script checks, or at `near`.
fn number(u: &mut Unstructured<'_>, near: &[u64]) -> Result<u64> {
    Ok(match u.int_in_range(0..=12u8)? {
        0 => 0,
        1 => 1,
        2 => 1000,
        3 => MAXD,
        4 => MAXD + 1,
        5 => LIMIT - 1,
        6 => LIMIT,
        7 | 8 => match near {
            [] => 0,
            _ => *u.choose(near)?,
        },
        9 => u.int_in_range(0..=1_000_000)?,
        // Past what a double holds exactly, and past what Lua's `%d` formats.
        10 => 1 << 63,
        11 => u64::MAX,
        _ => u.arbitrary()?,
    })
}

/// Bytes that are often not digits (or digits as only Lua's `tonumber` reads them).
fn garbage(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=9u8)? {
        0 => Vec::new(),
        1 => b"-1".to_vec(),
        2 => b"1.5".to_vec(),
        3 => b"1e3".to_vec(),
        4 => b" 1".to_vec(),
        5 => b"0x10".to_vec(),
        6 => "9".repeat(u.int_in_range(17..=400)?).into_bytes(),
        7 => b"1\x002".to_vec(),
        8 => b"inf".to_vec(),
        _ => u.arbitrary()?,
    })
}

fn field_value(u: &mut Unstructured<'_>, near: &[u64]) -> Result<Vec<u8>> {
    Ok(if u.ratio(3u8, 4u8)? {
        number(u, near)?.to_string().into_bytes()
    } else {
        garbage(u)?
    })
}

/// A sorted set's score: near a reading, at a bound, infinite, fractional, negative, anything.
fn score(u: &mut Unstructured<'_>, near: &[u64]) -> Result<f64> {
    Ok(match u.int_in_range(0..=9u8)? {
        0..=3 => number(u, near)? as f64,
        4 => {
            let t = number(u, near)?;
            t.saturating_sub(u.int_in_range(0..=3)?) as f64
        }
        5 => f64::NEG_INFINITY,
        6 => f64::INFINITY,
        7 => number(u, near)? as f64 + 0.5,
        8 => -(u.int_in_range(1..=1000u32)? as f64),
        _ => {
            let x = f64::from_bits(u.arbitrary()?);
            if x.is_nan() {
                0.0
            } else {
                x
            }
        }
    })
}

/// What foreign values are often made of: the sequence's plans (the main quota's, the second
/// one's), its first and earliest readings, and all their numbers (with the readings' window
/// indexes).
struct Hints {
    plans: Vec<Plan>,
    readings: Vec<u64>,
    near: Vec<u64>,
}

/// One of the plan's or the state's own fields, or (now and then) anything.
fn perturbed(u: &mut Unstructured<'_>, value: u64, hints: &Hints) -> Result<Vec<u8>> {
    Ok(if u.ratio(1u8, 6u8)? {
        field_value(u, &hints.near)?
    } else {
        value.to_string().into_bytes()
    })
}

/// A value at the key that this sequence's script did not write (or, often, a valid one): any
/// string, hash or sorted set, or, often, one shaped as the algorithm's state under one of the
/// sequence's plans, a field now and then replaced by anything.
fn foreign(u: &mut Unstructured<'_>, alg: Alg, hints: &Hints) -> Result<Data> {
    let near = hints.near.as_slice();
    let reading = |u: &mut Unstructured<'_>| -> Result<u64> {
        let r = *u.choose(&hints.readings)?;
        Ok(r.saturating_add(u.int_in_range(0..=2_000)?)
            .saturating_sub(1_000))
    };
    let hash = |u: &mut Unstructured<'_>, fields: &[&str]| -> Result<Data> {
        let mut h = BTreeMap::new();
        for field in fields {
            if u.ratio(3u8, 4u8)? {
                h.insert(field.as_bytes().to_vec(), field_value(u, near)?);
            }
        }
        for _ in 0..u.int_in_range(0..=2u8)? {
            h.insert(u.arbitrary()?, u.arbitrary()?);
        }
        Ok(Data::Hash(h))
    };
    // A window's hash under one of the plans: the reading's window or one near it (or any), up
    // to the limit and one past it.
    let window_state = |u: &mut Unstructured<'_>, fields: &[&str]| -> Result<Data> {
        let plan = u.choose(&hints.plans)?;
        let (n, w) = (plan.args[0], plan.args[1]);
        let index = (reading(u)? / w)
            .saturating_add(u.int_in_range(0..=2)?)
            .saturating_sub(1);
        let mut h = BTreeMap::new();
        for field in fields {
            let value = match *field {
                "i" => index,
                "w" => w,
                "n" => n,
                _ => u.int_in_range(0..=n.saturating_add(1))?,
            };
            h.insert(field.as_bytes().to_vec(), perturbed(u, value, hints)?);
        }
        Ok(Data::Hash(h))
    };
    let zset = |u: &mut Unstructured<'_>, shaped: bool| -> Result<Data> {
        let mut z = ZSet::default();
        match u.int_in_range(0..=5u8)? {
            _ if shaped => {
                let plan = u.choose(&hints.plans)?;
                let (n, w) = (plan.args[0], plan.args[1]);
                let member = [
                    b"quota:".to_vec(),
                    perturbed(u, w, hints)?,
                    b":".to_vec(),
                    perturbed(u, n, hints)?,
                ]
                .concat();
                z.insert(&member, f64::NEG_INFINITY);
            }
            0..=2 => {
                let (w, n) = (number(u, near)?, number(u, near)?);
                z.insert(format!("quota:{w}:{n}").as_bytes(), f64::NEG_INFINITY);
            }
            3 => {
                let member: Vec<u8> = u.arbitrary()?;
                z.insert(&member, score(u, near)?);
            }
            4 => {
                let member: Vec<u8> = u.arbitrary()?;
                z.insert(&member, f64::NEG_INFINITY);
            }
            _ => {}
        }
        for k in 0..u.int_in_range(0..=6u8)? {
            let s = if shaped && u.ratio(3u8, 4u8)? {
                reading(u)? as f64
            } else {
                score(u, near)?
            };
            let member = if u.ratio(3u8, 4u8)? {
                format!("{}:{}", s as u64, k + 1).into_bytes()
            } else {
                u.arbitrary()?
            };
            z.insert(&member, s);
        }
        if z.len() == 0 {
            // Redis keeps no empty sorted set.
            z.insert(b"quota:1:1", f64::NEG_INFINITY);
        }
        Ok(Data::ZSet(Rc::new(z)))
    };
    let gcra = |u: &mut Unstructured<'_>| -> Result<Data> {
        // Five fields, as a state has, each a number or not.
        let mut parts = Vec::new();
        for _ in 0..5 {
            parts.push(field_value(u, near)?);
        }
        let sep: &[u8] = if u.ratio(7u8, 8u8)? { b" " } else { b"  " };
        Ok(Data::Str(parts.join(sep)))
    };
    // A GCRA state under one of the plans: a base near a reading, a gap up to past 2^52.
    let gcra_state = |u: &mut Unstructured<'_>| -> Result<Data> {
        let plan = u.choose(&hints.plans)?;
        let gap = match u.int_in_range(0..=4u8)? {
            0 => 0,
            1 => plan.args[0].saturating_mul(u.int_in_range(1..=3)?),
            2 => u.int_in_range(0..=MAXD)?,
            3 => MAXD,
            _ => MAXD + 1,
        };
        let fields = [reading(u)?, gap, plan.args[0], plan.args[1], plan.args[2]];
        let mut parts = Vec::new();
        for f in fields {
            parts.push(perturbed(u, f, hints)?);
        }
        Ok(Data::Str(parts.join(&b" "[..])))
    };
    let shaped = !hints.plans.is_empty() && u.arbitrary()?;
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Data::Str(u.arbitrary()?),
        1 => Data::Str(garbage(u)?),
        2 => hash(u, &["i", "c", "w", "n"])?,
        3 => hash(u, &["i", "p", "c", "w", "n"])?,
        4 => zset(u, false)?,
        _ => match alg {
            Alg::Bucket | Alg::Meter if shaped => gcra_state(u)?,
            Alg::Bucket | Alg::Meter => gcra(u)?,
            Alg::Window if shaped => window_state(u, &["i", "c", "w", "n"])?,
            Alg::Window => hash(u, &["i", "c", "w", "n"])?,
            Alg::Counter if shaped => window_state(u, &["i", "p", "c", "w", "n"])?,
            Alg::Counter => hash(u, &["i", "p", "c", "w", "n"])?,
            Alg::Log => zset(u, shaped)?,
        },
    })
}

fn step(u: &mut Unstructured<'_>, unit_us: u64, burst_us: u64) -> Result<Step> {
    let amount = match u.int_in_range(0..=9u8)? {
        0..=2 => u.int_in_range(0..=2_000)?,
        3..=5 => unit_us.saturating_mul(u.int_in_range(0..=12)?) / 4 + u.int_in_range(0..=3)?,
        6 => burst_us
            .saturating_add(u.int_in_range(0..=2)?)
            .saturating_sub(1),
        7 => 1 << u.int_in_range(0..=62)?,
        _ => u.arbitrary()?,
    };
    // A third of the steps go to the edge of the state's next boundary.
    Ok(match u.int_in_range(0..=23u8)? {
        0..=10 => Step::Forward(amount),
        11..=13 => Step::Back(amount),
        14 => Step::Earliest,
        15 => Step::Latest,
        _ => Step::Edge {
            pick: u.int_in_range(0..=2)?,
            delta: u.int_in_range(-1..=1)?,
        },
    })
}

/// A kind of call for `alg` (a lease gives back 0..=capacity + 1).
fn kind(u: &mut Unstructured<'_>, alg: Alg, capacity: u64) -> Result<Kind> {
    Ok(match u.int_in_range(0..=6u8)? {
        0..=2 => Kind::Take,
        3 => Kind::Peek,
        _ if alg == Alg::Meter => Kind::Schedule,
        _ if alg == Alg::Bucket => Kind::Lease {
            back: if u.arbitrary()? {
                0
            } else {
                amount(u, capacity)?
            },
        },
        _ => Kind::Take,
    })
}

/// The quota's unit of time steps (its interval, or its window) and its burst window, in us.
fn units(alg: Alg, quota: &Quota) -> (u64, u64) {
    if alg.is_gcra() {
        let interval_us = (quota.interval().as_nanos() / 1000).max(1) as u64;
        (interval_us, interval_us.saturating_mul(quota.capacity()))
    } else {
        let w = (quota.period().as_nanos() / 1000).max(1) as u64;
        (w, w)
    }
}

fn op(u: &mut Unstructured<'_>, seq: &Sequence, hints: &Hints, budget: &mut u64) -> Result<Op> {
    let alg = seq.alg;
    let (unit_us, burst_us) = units(alg, &seq.quota);
    let capacity = seq.quota.capacity();
    let mut call = |u: &mut Unstructured<'_>, which: Which, quota: &Quota| -> Result<Op> {
        let capacity = quota.capacity();
        Ok(Op::Call {
            which,
            kind: kind(u, alg, capacity)?,
            n: amount_for(u, alg, capacity, budget)?,
            server_time: u.arbitrary()?,
        })
    };
    Ok(match u.int_in_range(0..=22u8)? {
        0..=5 => Op::Step(step(u, unit_us, burst_us)?),
        6..=13 => call(u, Which::Main, &seq.quota)?,
        14..=16 => match &seq.alt {
            Some(alt) => call(u, Which::Alt, alt)?,
            None => call(u, Which::Main, &seq.quota)?,
        },
        17 => Op::Forget,
        18 | 19 => Op::Foreign {
            data: foreign(u, alg, hints)?,
            kind: match kind(u, alg, capacity)? {
                Kind::Lease { .. } => Kind::Take,
                k => k,
            },
            n: amount_for(u, alg, capacity, budget)?.min(capacity),
            server_time: u.arbitrary()?,
        },
        20 => Op::BadReading {
            reading: if u.arbitrary()? {
                BadReading::Server(u.int_in_range(LIMIT..=u64::MAX)?)
            } else if u.arbitrary()? {
                BadReading::Sent(u.int_in_range(LIMIT..=u64::MAX)?.to_string().into_bytes())
            } else {
                BadReading::Sent(garbage(u)?)
            },
            kind: match kind(u, alg, capacity)? {
                Kind::Lease { .. } => Kind::Take,
                k => k,
            },
            n: amount_for(u, alg, capacity, budget)?.min(capacity),
        },
        _ => {
            let lease = alg == Alg::Bucket && u.arbitrary()?;
            // ARGV: mode, n, the plan's arguments, the reading, and a lease's tokens given back.
            let args = if alg.is_gcra() { 5 } else { 4 } + usize::from(lease);
            let at = u.int_in_range(0..=args - 1)?;
            let with = if u.arbitrary()? {
                garbage(u)?
            } else if at == 0 {
                // Another algorithm's mode.
                u.choose(&[
                    "take", "peek", "strict", "speek", "schedule", "lease", "TAKE",
                ])?
                .as_bytes()
                .to_vec()
            } else {
                number(u, &[capacity.saturating_add(1), capacity])?
                    .to_string()
                    .into_bytes()
            };
            Op::BadArgs { lease, at, with }
        }
    })
}

/// A quota for the GCRA: intervals from 1 ns to 2^62 ns, capacities at each plan's largest.
fn gcra_quota(u: &mut Unstructured<'_>) -> Result<Option<Quota>> {
    let count = match u.int_in_range(0..=3u8)? {
        0 | 1 => 1,
        2 => u.int_in_range(1..=1000)?,
        _ => u.arbitrary::<u64>()?.max(1),
    };
    let period = match u.int_in_range(0..=7u8)? {
        0 => u.int_in_range(1..=3_000)?,
        1 => u.int_in_range(1..=1_000_000u64)? * 1000 + *u.choose(&[0u64, 1, 999])?,
        2 => 1_000_000_000 * u.int_in_range(1..=86_400u64)?,
        3 => u.int_in_range(1..=1u64 << 40)?,
        4 => u.int_in_range(1u64 << 40..=1u64 << 62)?,
        5 => 86_400_000_000_000,
        _ => u.arbitrary()?,
    };
    let Ok(q) = Quota::per_period(count, Duration::from_nanos(period)) else {
        return Ok(None);
    };
    let interval = q.interval().as_nanos() as u64;
    let in_ns = MAXD / interval;
    let in_us = MAXD / interval.div_ceil(1000);
    let capacity = match u.int_in_range(0..=8u8)? {
        0..=2 => u.int_in_range(1..=40)?,
        3 => in_ns,
        4 => in_ns + 1,
        5 => in_us,
        6 => in_us + 1,
        7 => u.int_in_range(1..=in_us.max(1))?,
        _ => u.arbitrary()?,
    };
    Ok(q.with_capacity(capacity.max(1)).ok())
}

/// A quota for a window: windows from 1 us to 2^52 us, and a few the plans refuse; counts up to
/// the algorithm's largest and one past it.
fn window_quota(u: &mut Unstructured<'_>, alg: Alg) -> Result<Option<Quota>> {
    let window_us = match u.int_in_range(0..=8u8)? {
        0 => u.int_in_range(1..=1_000)?,
        1 => u.int_in_range(1_000..=60_000_000)?,
        2 => *u.choose(&[1_000_000u64, 60_000_000, 3_600_000_000, 86_400_000_000])?,
        3 => u.int_in_range(1..=MAXD)?,
        4 => MAXD - u.int_in_range(0..=2)?,
        5 => MAXD + 1,
        6 => u.int_in_range(MAXD / 2..=MAXD)?,
        _ => u.int_in_range(1..=MAXD + 10)?,
    };
    let remainder = if u.ratio(1u8, 16u8)? {
        u.int_in_range(1..=999)?
    } else {
        0
    };
    // The largest count each plan takes for this window.
    let largest = match alg {
        Alg::Window => MAXD,
        Alg::Counter => (MAXD - 1) / window_us,
        _ => MAX_LOG,
    };
    let count = match u.int_in_range(0..=5u8)? {
        0 | 1 => u.int_in_range(1..=20)?,
        2 if alg == Alg::Log => u.int_in_range(1..=1_000)?,
        2 => u.int_in_range(1..=1_000_000)?,
        3 => largest.max(1),
        4 => largest + 1,
        _ => u.arbitrary::<u64>()?.max(1),
    };
    let period = Duration::from_nanos(window_us * 1000 + remainder);
    let Ok(q) = Quota::per_period(count, period) else {
        return Ok(None);
    };
    // A capacity other than the count is refused (the rules in process).
    Ok(if u.ratio(1u8, 16u8)? {
        q.with_capacity(count.saturating_add(1)).ok()
    } else {
        Some(q)
    })
}

fn quota(u: &mut Unstructured<'_>, alg: Alg) -> Result<Option<Quota>> {
    if alg.is_gcra() {
        gcra_quota(u)
    } else {
        window_quota(u, alg)
    }
}

/// A second quota for the same key: often the main one with its count, its period (windows in
/// whole microseconds) or its capacity scaled, as a tier changes; or any.
fn alt_quota(u: &mut Unstructured<'_>, alg: Alg, main: &Quota) -> Result<Option<Quota>> {
    let scale = *u.choose(&[2u64, 3, 10, 1000])?;
    let up: bool = u.arbitrary()?;
    let f = |x: u64| {
        if up {
            x.saturating_mul(scale)
        } else {
            (x / scale).max(1)
        }
    };
    let period_ns = main.period().as_nanos() as u64;
    Ok(match u.int_in_range(0..=3u8)? {
        0 => Quota::per_period(f(main.count()), main.period()).ok(),
        1 if alg.is_gcra() => Quota::per_period(main.count(), Duration::from_nanos(f(period_ns)))
            .and_then(|q| q.with_capacity(main.capacity()))
            .ok(),
        1 => Quota::per_period(main.count(), Duration::from_micros(f(period_ns / 1000))).ok(),
        2 if alg.is_gcra() => main.with_capacity(f(main.capacity())).ok(),
        _ => quota(u, alg)?,
    })
}

fn start(u: &mut Unstructured<'_>) -> Result<(u64, u64)> {
    let start = match u.int_in_range(0..=4u8)? {
        0 => u.int_in_range(0..=1_000_000)?,
        1 | 2 => TODAY_US - (1 << 39) + u.int_in_range(0..=1u64 << 40)?,
        3 => {
            MAX_READING
                - match u.int_in_range(0..=2u8)? {
                    0 => 0,
                    1 => u.int_in_range(0..=1_000_000)?,
                    _ => u.int_in_range(0..=1u64 << 50)?,
                }
        }
        _ => u.int_in_range(0..=MAX_READING)?,
    };
    let back = match u.int_in_range(0..=3u8)? {
        0 => 0,
        1 => u.int_in_range(0..=1_000_000_000)?,
        2 => MAX_SPAN_US,
        _ => u.int_in_range(0..=MAX_SPAN_US)?,
    };
    Ok((start, back.min(start)))
}

fn sequence(u: &mut Unstructured<'_>) -> Result<Option<Sequence>> {
    let alg = *u.choose(&[Alg::Bucket, Alg::Meter, Alg::Window, Alg::Counter, Alg::Log])?;
    let Some(main) = quota(u, alg)? else {
        return Ok(None);
    };
    let alt = if u.arbitrary()? {
        alt_quota(u, alg, &main)?
    } else {
        None
    };
    let (start, back) = start(u)?;
    let mut seq = Sequence {
        alg,
        quota: main,
        alt,
        start,
        back,
        ops: Vec::new(),
    };
    let readings = vec![start, start - back];
    let plans: Vec<Plan> = [Some(main), alt]
        .into_iter()
        .flatten()
        .filter_map(|q| plan(alg, &q))
        .collect();
    let mut near = readings.clone();
    for p in &plans {
        near.extend(&p.args);
        if !alg.is_gcra() {
            near.extend(readings.iter().map(|r| r / p.args[1]));
        }
    }
    let hints = Hints {
        plans,
        readings,
        near,
    };
    let len = u.int_in_range(0..=MAX_OPS)?;
    // Entries the log's large admissions may add in all: two whole logs.
    let mut budget = 2 * MAX_LOG;
    for _ in 0..len {
        if u.is_empty() {
            break;
        }
        let op = op(u, &seq, &hints, &mut budget)?;
        seq.ops.push(op);
    }
    Ok(Some(seq))
}

#[derive(Debug)]
struct Input {
    sequences: Vec<Sequence>,
    /// Several limits and reservations (see `run_extra`).
    extras: Vec<Extra>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        // A third of the inputs drive several limits and reservations, the rest the per-key
        // sequences (each takes what bytes it finds: the two kinds do not share an input).
        let mut sequences = Vec::new();
        let mut extras = Vec::new();
        if u.ratio(1, 3)? {
            for _ in 0..u.int_in_range(1..=2)? {
                extras.push(extra(u)?);
            }
        } else {
            for _ in 0..u.int_in_range(1..=MAX_SEQUENCES)? {
                if let Some(s) = sequence(u)? {
                    sequences.push(s);
                }
            }
        }
        Ok(Input { sequences, extras })
    }
}

// --- answers ------------------------------------------------------------------------------------------

/// An answer, reduced to what a caller can read; instants relative to the sequence's base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Admitted {
        remaining: u64,
        reset: Duration,
        next: Option<Duration>,
    },
    Denied {
        remaining: u64,
        retry: Duration,
        reset: Duration,
        retry_at: u64,
        next: Option<Duration>,
    },
    Scheduled {
        delay: Duration,
        queued: u64,
        remaining: u64,
        reset: Duration,
        depart_at: u64,
        next: Option<Duration>,
    },
    Lease {
        granted: u64,
        retry: Duration,
    },
    InsufficientCapacity,
}

/// 2^53 us: the longest span a window script answers.
const LIMIT_SPAN: Duration = Duration::from_micros(LIMIT);

impl Seen {
    fn admitted(a: &Admitted) -> Seen {
        Seen::Admitted {
            remaining: a.remaining(),
            reset: a.reset_after(),
            next: a.next_after(),
        }
    }

    /// `base_ns` is subtracted from the instant (the server's clock is Unix time).
    fn denied(d: &Denied, base_ns: u64) -> Seen {
        Seen::Denied {
            remaining: d.remaining(),
            retry: d.retry_after(),
            reset: d.reset_after(),
            retry_at: d.retry_at().as_u64() - base_ns,
            next: d.next_after(),
        }
    }

    fn scheduled(s: &Scheduled, base_ns: u64) -> Seen {
        Seen::Scheduled {
            delay: s.delay(),
            queued: s.queued(),
            remaining: s.remaining(),
            reset: s.reset_after(),
            depart_at: s.depart_at().as_u64() - base_ns,
            next: s.next_after(),
        }
    }

    fn remaining(&self) -> u64 {
        match *self {
            Seen::Admitted { remaining, .. }
            | Seen::Denied { remaining, .. }
            | Seen::Scheduled { remaining, .. } => remaining,
            Seen::Lease { .. } | Seen::InsufficientCapacity => {
                panic!("{self:?} has no remaining")
            }
        }
    }

    fn reset(&self) -> Duration {
        match *self {
            Seen::Admitted { reset, .. }
            | Seen::Denied { reset, .. }
            | Seen::Scheduled { reset, .. } => reset,
            Seen::Lease { .. } | Seen::InsufficientCapacity => Duration::ZERO,
        }
    }

    /// The GCRA's documented clamp: a state more than 2^53 ticks ahead of the reading is read as
    /// 2^53 ticks ahead (so its spans, and the waits measured from it, are 2^53 ticks at most).
    fn clamp_gcra(self, plan: &Plan) -> Seen {
        let limit = Duration::from_nanos(LIMIT * plan.tick);
        let reset = self.reset();
        if reset <= limit {
            return self;
        }
        let excess = reset - limit;
        let excess_ns = excess.as_nanos() as u64;
        // The wait for one more token is measured from the state, as the retry is.
        let less = |next: Option<Duration>| next.map(|d| d.saturating_sub(excess));
        match self {
            Seen::Admitted {
                remaining, next, ..
            } => Seen::Admitted {
                remaining,
                reset: limit,
                next: less(next),
            },
            Seen::Denied {
                remaining,
                retry,
                retry_at,
                next,
                ..
            } => Seen::Denied {
                remaining,
                retry: retry.saturating_sub(excess),
                reset: limit,
                retry_at: retry_at.saturating_sub(excess_ns),
                next: less(next),
            },
            Seen::Scheduled {
                delay,
                remaining,
                depart_at,
                next,
                ..
            } => Seen::Scheduled {
                delay: delay.saturating_sub(excess),
                queued: LIMIT.div_ceil(plan.args[0]),
                remaining,
                reset: limit,
                depart_at: depart_at.saturating_sub(excess_ns),
                next: less(next),
            },
            Seen::Lease { .. } | Seen::InsufficientCapacity => self,
        }
    }

    /// `f` applied to `reset_after`, `retry_after` (a denial's `retry_at` moving with it) and
    /// `next_after`.
    fn map_spans(self, f: impl Fn(Duration) -> Duration) -> Seen {
        match self {
            Seen::Admitted {
                remaining,
                reset,
                next,
            } => Seen::Admitted {
                remaining,
                reset: f(reset),
                next: next.map(&f),
            },
            Seen::Denied {
                remaining,
                retry,
                reset,
                retry_at,
                next,
            } => {
                let mapped = f(retry);
                Seen::Denied {
                    remaining,
                    retry: mapped,
                    reset: f(reset),
                    retry_at: (i128::from(retry_at) - retry.as_nanos() as i128
                        + mapped.as_nanos() as i128) as u64,
                    next: next.map(&f),
                }
            }
            other => other,
        }
    }
}

/// `ticks` of `tick` ns as the client reads a span: saturating at `u64::MAX` ns.
fn span(ticks: u64, tick: u64) -> Duration {
    Duration::from_nanos(u64::try_from(u128::from(ticks) * u128::from(tick)).unwrap_or(u64::MAX))
}

/// `ticks` of `tick` ns as `next_after` reads them: `None` for 0.
fn next_span(ticks: u64, tick: u64) -> Option<Duration> {
    (ticks > 0).then(|| span(ticks, tick))
}

/// `d` rounded up to a whole microsecond.
fn ceil_micros(d: Duration) -> Duration {
    Duration::from_micros(d.as_nanos().div_ceil(1000) as u64)
}

/// The in-process limiter a sequence is compared with.
enum Reference {
    Bucket(TokenBucket<ManualClock>),
    Meter(LeakyMeter<ManualClock>),
    Window(KeyedLimiter<u64, FixedWindowKeys, ManualClock>),
    Counter(KeyedLimiter<u64, SlidingWindowCounterKeys, ManualClock>),
    Log(KeyedLimiter<u64, SlidingWindowLogKeys, ManualClock>),
}

fn from_keyed(r: std::result::Result<Admitted, KeyedError>) -> Seen {
    match r {
        Ok(a) => Seen::admitted(&a),
        Err(KeyedError::Denied(d)) => Seen::denied(&d, 0),
        Err(KeyedError::InsufficientCapacity(_)) => Seen::InsufficientCapacity,
        Err(e) => panic!("the in-process limiter could not decide: {e}"),
    }
}

fn from_direct<T>(r: std::result::Result<T, AcquireError>, ok: impl Fn(&T) -> Seen) -> Seen {
    match r {
        Ok(v) => ok(&v),
        Err(AcquireError::Denied(d)) => Seen::denied(&d, 0),
        Err(AcquireError::InsufficientCapacity(_)) => Seen::InsufficientCapacity,
        Err(e) => panic!("the in-process limiter could not decide: {e}"),
    }
}

/// What the in-process bucket says of a lease: the answer, whether giving back moved its state,
/// and its time until full afterwards.
struct LeaseAnswer {
    seen: Seen,
    moved: bool,
    fresh_in: Duration,
}

impl Reference {
    /// A limiter with no state, as a key Redis has never seen: full at every reading (built at
    /// reading 0, a key created at its first admission).
    fn new(alg: Alg, quota: Quota) -> Reference {
        let clock = ManualClock::new;
        let rules = "the plan accepted the quota, so the rules in process do";
        match alg {
            Alg::Bucket => Reference::Bucket(TokenBucket::with_clock(quota, clock())),
            Alg::Meter => Reference::Meter(LeakyMeter::with_clock(quota, clock())),
            Alg::Window => {
                Reference::Window(KeyedLimiter::with_algorithm(quota, clock()).expect(rules))
            }
            Alg::Counter => {
                Reference::Counter(KeyedLimiter::with_algorithm(quota, clock()).expect(rules))
            }
            Alg::Log => Reference::Log(KeyedLimiter::with_algorithm(quota, clock()).expect(rules)),
        }
    }

    fn answer(&self, kind: Kind, n: u64, now: Nanos) -> Seen {
        match (self, kind) {
            (Reference::Bucket(b), Kind::Take) => {
                from_direct(b.try_acquire_n_at(n, now), Seen::admitted)
            }
            (Reference::Bucket(b), Kind::Peek) => from_direct(b.peek_n_at(n, now), Seen::admitted),
            (Reference::Window(k), Kind::Take) => from_keyed(k.check_key_n_at(&1, n, now)),
            (Reference::Window(k), Kind::Peek) => from_keyed(k.peek_key_n_at(&1, n, now)),
            (Reference::Counter(k), Kind::Take) => from_keyed(k.check_key_n_at(&1, n, now)),
            (Reference::Counter(k), Kind::Peek) => from_keyed(k.peek_key_n_at(&1, n, now)),
            (Reference::Log(k), Kind::Take) => from_keyed(k.check_key_n_at(&1, n, now)),
            (Reference::Log(k), Kind::Peek) => from_keyed(k.peek_key_n_at(&1, n, now)),
            (Reference::Meter(m), Kind::Take) => {
                from_direct(m.try_acquire_n_at(n, now), Seen::admitted)
            }
            (Reference::Meter(m), Kind::Peek) => from_direct(m.peek_n_at(n, now), Seen::admitted),
            (Reference::Meter(m), Kind::Schedule) => {
                from_direct(m.try_schedule_n_at(n, now), |s| Seen::scheduled(s, 0))
            }
            (_, kind) => unreachable!("{kind:?} on another algorithm"),
        }
    }

    /// A lease of up to `n` giving back `back` (both within the capacity), as the server tests
    /// define it: `refund_at(back)`, then `min(n, remaining_at)` taken, or when that is 0 (and
    /// `n` is not), `peek_n_at(1)`'s wait, clamped as the script clamps it.
    fn lease(&self, n: u64, back: u64, now: Nanos, plan: &Plan) -> LeaseAnswer {
        let Reference::Bucket(bucket) = self else {
            unreachable!("only the bucket leases");
        };
        let query = |b: &TokenBucket<ManualClock>| {
            b.try_acquire_n_at(0, now)
                .expect("a query is always answered")
                .reset_after()
        };
        let moved = back > 0 && !query(bucket).is_zero();
        bucket.refund_at(back, now);
        let k = bucket.remaining_at(now).min(n);
        let retry = if k > 0 {
            bucket.try_acquire_n_at(k, now).expect("k tokens are there");
            Duration::ZERO
        } else if n > 0 {
            match from_direct(bucket.peek_n_at(1, now), Seen::admitted).clamp_gcra(plan) {
                Seen::Denied { retry, .. } => retry,
                other => panic!("no token, yet a peek of 1 answers {other:?}"),
            }
        } else {
            Duration::ZERO
        };
        LeaseAnswer {
            seen: Seen::Lease { granted: k, retry },
            moved,
            fresh_in: query(bucket),
        }
    }
}

/// The Redis limiters for one quota: one sends its reading, one lets the script read `TIME`.
enum Limiters {
    Bucket([RedisLimiter<TokenBucketKeys>; 2]),
    Meter([RedisLimiter<LeakyMeterKeys>; 2]),
    Window([RedisLimiter<FixedWindowKeys>; 2]),
    Counter([RedisLimiter<SlidingWindowCounterKeys>; 2]),
    Log([RedisLimiter<SlidingWindowLogKeys>; 2]),
}

/// The two limiters for `quota`, or the builder's refusal.
fn build_pair<A: RedisAlgorithm>(
    quota: Quota,
    clock: &ManualClock,
) -> std::result::Result<[RedisLimiter<A>; 2], String> {
    let builder = || {
        RedisLimiter::<A>::builder(FakeConn, quota)
            .timeout(MAX_WAIT)
            .breaker(u32::MAX, MAX_WAIT)
    };
    let client = builder()
        .client_clock(clock.clone())
        .build(FailurePolicy::Closed)
        .map_err(|e| e.to_string())?;
    let server = builder()
        .build(FailurePolicy::Closed)
        .map_err(|e| e.to_string())?;
    Ok([client, server])
}

fn build(alg: Alg, quota: Quota, clock: &ManualClock) -> std::result::Result<Limiters, String> {
    Ok(match alg {
        Alg::Bucket => Limiters::Bucket(build_pair(quota, clock)?),
        Alg::Meter => Limiters::Meter(build_pair(quota, clock)?),
        Alg::Window => Limiters::Window(build_pair(quota, clock)?),
        Alg::Counter => Limiters::Counter(build_pair(quota, clock)?),
        Alg::Log => Limiters::Log(build_pair(quota, clock)?),
    })
}

fn admission<A: RedisAlgorithm>(
    l: &RedisLimiter<A>,
    kind: Kind,
    n: u64,
) -> std::result::Result<Seen, RedisError> {
    RUNTIME
        .block_on(async {
            match kind {
                Kind::Take => l.check_key_n(KEY, n).await,
                Kind::Peek => l.peek_key_n(KEY, n).await,
                _ => unreachable!("{kind:?} is no admission"),
            }
        })
        .map(|a| Seen::admitted(&a))
}

impl Limiters {
    /// The client's answer; `Err` for a call Redis could not decide.
    fn call(
        &self,
        kind: Kind,
        n: u64,
        server_time: bool,
        base_ns: u64,
    ) -> std::result::Result<Seen, Unavailable> {
        let i = usize::from(server_time);
        let result = match (self, kind) {
            (Limiters::Bucket(l), Kind::Lease { back }) => RUNTIME
                .block_on(l[i].lease_key(KEY, n, back))
                .map(|lease| Seen::Lease {
                    granted: lease.granted(),
                    retry: lease.retry_after(),
                }),
            (Limiters::Meter(l), Kind::Schedule) => RUNTIME
                .block_on(l[i].schedule_key_n(KEY, n))
                .map(|s| Seen::scheduled(&s, base_ns)),
            (_, Kind::Lease { .. } | Kind::Schedule) => {
                unreachable!("{kind:?} on another algorithm")
            }
            (Limiters::Bucket(l), _) => admission(&l[i], kind, n),
            (Limiters::Meter(l), _) => admission(&l[i], kind, n),
            (Limiters::Window(l), _) => admission(&l[i], kind, n),
            (Limiters::Counter(l), _) => admission(&l[i], kind, n),
            (Limiters::Log(l), _) => admission(&l[i], kind, n),
        };
        match result {
            Ok(seen) => Ok(seen),
            Err(RedisError::Denied(d)) => Ok(Seen::denied(&d, base_ns)),
            Err(RedisError::InsufficientCapacity(_)) => Ok(Seen::InsufficientCapacity),
            Err(RedisError::Unavailable(u)) => Err(u),
            Err(e) => panic!("an error the client should not give here: {e}"),
        }
    }

    fn key(&self) -> Vec<u8> {
        match self {
            Limiters::Bucket(l) => l[0].key_name(KEY),
            Limiters::Meter(l) => l[0].key_name(KEY),
            Limiters::Window(l) => l[0].key_name(KEY),
            Limiters::Counter(l) => l[0].key_name(KEY),
            Limiters::Log(l) => l[0].key_name(KEY),
        }
        .unwrap()
    }
}

/// The mode the client sends for `kind` and `n`.
fn mode(alg: Alg, kind: Kind, n: u64) -> &'static str {
    match (alg, kind) {
        (Alg::Meter, Kind::Schedule) => "schedule",
        (Alg::Meter, Kind::Take) if n > 0 => "strict",
        (Alg::Meter, _) => "speek",
        (_, Kind::Lease { .. }) => "lease",
        (_, Kind::Take) if n > 0 => "take",
        _ => "peek",
    }
}

fn sha(alg: Alg) -> String {
    let source = match alg {
        Alg::Bucket => script_source::<TokenBucketKeys>(),
        Alg::Meter => script_source::<LeakyMeterKeys>(),
        Alg::Window => script_source::<FixedWindowKeys>(),
        Alg::Counter => script_source::<SlidingWindowCounterKeys>(),
        Alg::Log => script_source::<SlidingWindowLogKeys>(),
    };
    redis::Script::new(source).get_hash().to_string()
}

// --- the scripts' rules, mirrored ---------------------------------------------------------------------

/// The prelude's `whole` of an argument: Lua's `tonumber`, then a whole number in `0..2^53`.
fn lua_whole(s: &[u8]) -> Option<f64> {
    lua_tonumber(s).filter(|x| *x >= 0.0 && *x < LIMIT as f64 && x.floor() == *x)
}

/// Whether a reading sent as ARGV is one the script accepts.
fn reading_valid(s: &[u8]) -> bool {
    lua_whole(s).is_some()
}

/// A stored field as `gcra.lua`'s pattern reads it: ASCII digits only (Lua's `%d`), read by
/// `tonumber` (the prelude's `whole` then refuses 2^53 and above).
fn digits(s: &[u8]) -> Option<f64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse::<f64>().ok()
}

/// Whether a script accepts these arguments (ARGV, its reading valid), as its checks read them.
fn args_valid(alg: Alg, argv: &[Vec<u8>]) -> bool {
    let mode = argv[0].as_slice();
    let modes: &[&[u8]] = match alg {
        Alg::Bucket => &[b"take", b"peek", b"lease"],
        Alg::Meter => &[b"strict", b"speek", b"schedule"],
        _ => &[b"take", b"peek"],
    };
    if !modes.contains(&mode) {
        return false;
    }
    let m = MAXD as f64;
    if alg.is_gcra() {
        let [n, interval, capacity, tick] = [1, 2, 3, 4].map(|i| lua_whole(&argv[i]));
        let (Some(n), Some(i), Some(c), Some(t)) = (n, interval, capacity, tick) else {
            return false;
        };
        let back_ok = mode != b"lease"
            || argv
                .get(6)
                .and_then(|b| lua_whole(b))
                .is_some_and(|b| b <= c);
        return i >= 1.0
            && c >= 1.0
            && n <= c
            && (t == 1.0 || t == 1000.0)
            && c * i <= m
            && back_ok;
    }
    let [n, limit, window] = [1, 2, 3].map(|i| lua_whole(&argv[i]));
    let (Some(n), Some(l), Some(w)) = (n, limit, window) else {
        return false;
    };
    let common = l >= 1.0 && n <= l && w >= 1.0;
    common
        && match alg {
            Alg::Window => l <= m && w <= m,
            Alg::Counter => l * w < m,
            _ => w <= m,
        }
}

/// What a foreign value must answer.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    WrongType,
    Foreign,
    /// A value the script reads as a state (or as none): a well-formed reply.
    Reply,
}

/// The five numbers of a GCRA state, as `gcra.lua` reads them.
fn gcra_state(s: &[u8]) -> Option<[f64; 5]> {
    let parts: Vec<&[u8]> = s.split(|&b| b == b' ').collect();
    if parts.len() != 5 {
        return None;
    }
    let mut out = [0.0; 5];
    for (slot, p) in out.iter_mut().zip(parts) {
        *slot = digits(p)?;
    }
    Some(out)
}

/// Whether `m` matches the log's `^quota:(%d+):(%d+)$` with a quota the script accepts: a window
/// of 1 us to 2^52 us and a limit of at least 1, both below 2^53 as `whole` reads them.
fn quota_member(m: &[u8]) -> bool {
    let Some(rest) = m.strip_prefix(b"quota:") else {
        return false;
    };
    let parts: Vec<&[u8]> = rest.splitn(2, |&b| b == b':').collect();
    let [w, n] = parts[..] else {
        return false;
    };
    let whole = |p: &[u8]| digits(p).filter(|x| *x < LIMIT as f64);
    match (whole(w), whole(n)) {
        (Some(w), Some(n)) => w >= 1.0 && w <= MAXD as f64 && n >= 1.0,
        _ => false,
    }
}

/// The fields of `h` the script reads (`HMGET`), in its order: `None` for a missing one.
fn fields<'a>(h: &'a BTreeMap<Vec<u8>, Vec<u8>>, names: &[&str]) -> Vec<Option<&'a Vec<u8>>> {
    names.iter().map(|f| h.get(f.as_bytes())).collect()
}

/// The fields each window script owns in its hash.
fn own_fields(alg: Alg) -> &'static [&'static str] {
    match alg {
        Alg::Window => &["i", "c", "w", "n"],
        Alg::Counter => &["i", "p", "c", "w", "n"],
        _ => &[],
    }
}

/// Whether window `i` of `w` us (whole, below 2^53, `w >= 1`) starts below 2^53 us: the windows'
/// `i0 > div(LIMIT - 1, w0)`.
fn starts_in_range(i: f64, w: f64) -> bool {
    w < 1.0 || (i as u64) <= (LIMIT - 1) / (w as u64)
}

/// What `data` at the key must answer, by the script's own checks.
fn expect_foreign(alg: Alg, data: &Data) -> Expect {
    let m = MAXD as f64;
    match (alg, data) {
        (Alg::Bucket | Alg::Meter, Data::Str(s)) => match gcra_state(s) {
            Some([base, off, i0, c0, tk0])
                if base < LIMIT as f64
                    && off <= m
                    && i0 >= 1.0
                    && c0 >= 1.0
                    && (tk0 == 1.0 || tk0 == 1000.0)
                    && c0 * i0 <= m =>
            {
                Expect::Reply
            }
            _ => Expect::Foreign,
        },
        (Alg::Window | Alg::Counter, Data::Hash(h)) => {
            let stored = fields(h, own_fields(alg));
            if stored.iter().all(Option::is_none) {
                return Expect::Reply;
            }
            // The prelude's `whole`: digits, read below 2^53.
            let values: Option<Vec<f64>> = stored
                .iter()
                .map(|f| f.and_then(|v| digits(v)).filter(|x| *x < LIMIT as f64))
                .collect();
            let ok = match (alg, values.as_deref()) {
                // A window starting below 2^53 us.
                (Alg::Window, Some(&[i, c, w, n])) => {
                    w >= 1.0 && w <= m && n <= m && c <= n && starts_in_range(i, w)
                }
                (Alg::Counter, Some(&[i, p, c, w, n])) => {
                    w >= 1.0 && p <= n && c <= n && starts_in_range(i, w)
                }
                _ => false,
            };
            if ok {
                Expect::Reply
            } else {
                Expect::Foreign
            }
        }
        (Alg::Log, Data::ZSet(z)) => {
            let Some((low, member)) = z.first() else {
                return Expect::Reply;
            };
            if low != f64::NEG_INFINITY || !quota_member(member) {
                return Expect::Foreign;
            }
            // The newest entry's time, as `tonumber` reads its `%.17g`: the same double.
            let (top, _) = z.last().expect("not empty");
            if top != f64::NEG_INFINITY && (top.floor() != top || top < 0.0 || top >= LIMIT as f64)
            {
                return Expect::Foreign;
            }
            Expect::Reply
        }
        _ => Expect::WrongType,
    }
}

// --- running a sequence ---------------------------------------------------------------------------------

/// One quota's limiters and plan.
struct Side {
    quota: Quota,
    plan: Plan,
    limiters: Limiters,
}

struct Run<'a> {
    seq: &'a Sequence,
    main: Side,
    /// The second quota, when its plan accepts it.
    alt: Option<Side>,
    /// The quota the in-process reference enforces: the main plan's exactly.
    reference_quota: Quota,
    /// The in-process twin of the key under the main quota; `None` once the state has been
    /// written under the other quota (until the key is gone again).
    twin: Option<Reference>,
    /// The quota the key's state was last written under (`None`: the key holds nothing).
    owner: Option<Which>,
    clock: ManualClock,
    key: Vec<u8>,
    /// Readings stay in `lo..=hi`; in-process time is `(reading - lo) x 1000` ns.
    lo: u64,
    hi: u64,
    reading: u64,
    /// The last answer compared with the twin, and the reading it was given at (for
    /// [`Step::Edge`]).
    last: Option<(u64, Seen)>,
}

/// The parsed numbers of a state string (any that is not a number as 0: checked by the caller).
fn numbers(s: &[u8]) -> Vec<u64> {
    s.split(|&b| b == b' ')
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

/// The whole number a field holds, or a failure naming what the script wrote.
fn field_u64(h: &BTreeMap<Vec<u8>, Vec<u8>>, f: &str) -> u64 {
    let v = h
        .get(f.as_bytes())
        .unwrap_or_else(|| panic!("no field {f} in {h:?}"));
    std::str::from_utf8(v)
        .ok()
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("field {f} is {:?}, not digits", String::from_utf8_lossy(v)))
}

impl Run<'_> {
    fn alg(&self) -> Alg {
        self.seq.alg
    }

    fn side(&self, which: Which) -> &Side {
        match which {
            Which::Main => &self.main,
            Which::Alt => self.alt.as_ref().expect("a second quota"),
        }
    }

    fn base_ns(&self) -> u64 {
        self.lo * 1000
    }

    fn now(&self) -> Nanos {
        Nanos::new((self.reading - self.lo) * 1000)
    }

    /// The script's mode and n, the plan's arguments, a reading and a lease's tokens given back,
    /// as ARGV.
    fn argv(plan: &Plan, mode: &str, n: u64, reading: &[u8], back: Option<u64>) -> Vec<Vec<u8>> {
        let mut argv = vec![mode.as_bytes().to_vec(), n.to_string().into_bytes()];
        argv.extend(plan.args.iter().map(|a| a.to_string().into_bytes()));
        argv.push(reading.to_vec());
        argv.extend(back.map(|b| b.to_string().into_bytes()));
        argv
    }

    fn entry(&self) -> Option<Entry> {
        with_server(|s| s.store.borrow().keys.get(&self.key).cloned())
    }

    fn take_evals(&self) -> Vec<Eval> {
        with_server(|s| std::mem::take(&mut s.evals))
    }

    /// The key is gone: no state, an in-process twin with none either.
    fn forget(&mut self) {
        with_server(|s| s.store.borrow_mut().keys.remove(&self.key));
        self.twin = Some(Reference::new(self.alg(), self.reference_quota));
        self.owner = None;
    }

    /// Sets the server's clock to the reading and expires what is due. When the state expires,
    /// the quota that wrote it reads it as fresh just before, and so does the in-process twin;
    /// then both are gone.
    fn tick(&mut self) {
        let due = with_server(|s| {
            let mut store = s.store.borrow_mut();
            store.now_us = self.reading;
            store.due()
        });
        assert!(
            due.iter().all(|k| *k == self.key),
            "a key other than the sequence's: {due:?}"
        );
        if due.is_empty() {
            return;
        }
        if let Some(owner) = self.owner {
            let capacity = self.side(owner).quota.capacity();
            assert_eq!(
                self.aux(owner, Kind::Peek, 0),
                Seen::Admitted {
                    remaining: capacity,
                    reset: Duration::ZERO,
                    next: None,
                },
                "the state expires at {} us, when the {owner:?} quota that wrote it does not read \
                 it as fresh",
                self.reading
            );
        }
        if let Some(twin) = &self.twin {
            assert_eq!(
                twin.answer(Kind::Peek, 0, self.now()),
                Seen::Admitted {
                    remaining: self.main.quota.capacity(),
                    reset: Duration::ZERO,
                    next: None,
                },
                "the state expired at {} us, when the in-process limiter is not fresh",
                self.reading
            );
        }
        self.forget();
    }

    /// The checks every call's `EVALSHA` must pass: one, of the side's script on the key, with
    /// the ARGV the plan gives.
    fn one_eval(&self, which: Which, kind: Kind, n: u64, server_time: bool) -> Eval {
        let evals = self.take_evals();
        let [eval] = evals.as_slice() else {
            panic!("one call, {} EVALSHAs", evals.len());
        };
        let reading = if server_time {
            Vec::new()
        } else {
            self.reading.to_string().into_bytes()
        };
        let back = match kind {
            Kind::Lease { back } => Some(back),
            _ => None,
        };
        let side = self.side(which);
        assert_eq!(
            eval.argv,
            Self::argv(&side.plan, mode(self.alg(), kind, n), n, &reading, back),
            "the client's ARGV"
        );
        assert_eq!(eval.keys, vec![self.key.clone()]);
        eval.clone()
    }

    /// A call through the client-clock limiter of `which` that must write nothing: its answer.
    fn aux(&self, which: Which, kind: Kind, n: u64) -> Seen {
        self.clock.set(Nanos::new(self.reading * 1000));
        let got = self
            .side(which)
            .limiters
            .call(kind, n, false, self.base_ns())
            .unwrap_or_else(|u| panic!("the script could not decide a query: {u}"));
        if got == Seen::InsufficientCapacity {
            assert!(
                self.take_evals().is_empty(),
                "an over-capacity query reached the server"
            );
            return got;
        }
        let eval = self.one_eval(which, kind, n, false);
        assert_eq!(eval.before, eval.after, "a peek or a query wrote");
        got
    }

    /// Whether `kind` for `n` is refused on the client (over the capacity).
    fn over_capacity(&self, which: Which, kind: Kind, n: u64) -> bool {
        let capacity = self.side(which).quota.capacity();
        n > capacity || matches!(kind, Kind::Lease { back } if back > capacity)
    }

    /// The client's call under `which`: compared with the twin while it follows the key, else
    /// held to the properties of a quota change.
    fn call(&mut self, which: Which, kind: Kind, n: u64, server_time: bool) {
        self.clock.set(Nanos::new(self.reading * 1000));
        if self.over_capacity(which, kind, n) {
            let got = self
                .side(which)
                .limiters
                .call(kind, n, server_time, self.base_ns())
                .unwrap_or_else(|u| panic!("the client went to the server: {u}"));
            assert_eq!(got, Seen::InsufficientCapacity);
            assert!(
                self.take_evals().is_empty(),
                "a request over the capacity reached the server"
            );
            if which == Which::Main {
                if let (Some(twin), Kind::Take | Kind::Peek | Kind::Schedule) = (&self.twin, kind) {
                    assert_eq!(twin.answer(kind, n, self.now()), Seen::InsufficientCapacity);
                }
            }
            return;
        }
        if which == Which::Main && self.twin.is_some() {
            self.exact(kind, n, server_time);
        } else {
            self.changed(which, kind, n, server_time);
        }
    }

    /// The main quota's answer, with the script's clamps and units, as the twin gives it.
    fn as_script(&self, seen: Seen) -> Seen {
        match self.alg() {
            Alg::Bucket | Alg::Meter => seen.clamp_gcra(&self.main.plan),
            Alg::Window | Alg::Log => seen.map_spans(|d| d.min(LIMIT_SPAN)),
            Alg::Counter => seen.map_spans(|d| ceil_micros(d).min(LIMIT_SPAN)),
        }
    }

    /// A call under the main quota, compared with the in-process twin.
    fn exact(&mut self, kind: Kind, n: u64, server_time: bool) {
        let now = self.now();
        let twin = self.twin.as_ref().expect("a twin");
        let (expected, moved, fresh_in) = match kind {
            Kind::Lease { back } => {
                let lease = twin.lease(n, back, now, &self.main.plan);
                (lease.seen, lease.moved, lease.fresh_in)
            }
            _ => {
                let seen = twin.answer(kind, n, now);
                (seen, false, seen.reset())
            }
        };
        let got = self
            .main
            .limiters
            .call(kind, n, server_time, self.base_ns())
            .unwrap_or_else(|u| panic!("the script could not decide: {u}"));
        let eval = self.one_eval(Which::Main, kind, n, server_time);
        let normal = |seen: Seen| match self.alg() {
            // The estimate's earliest admission: exact to the ns in process, to the us in Redis.
            Alg::Counter => seen.map_spans(ceil_micros),
            _ => seen,
        };
        assert_eq!(
            normal(got),
            normal(self.as_script(expected)),
            "the script's answer (in process: {expected:?})"
        );
        self.last = Some((self.reading, got));
        let writes = match (kind, got) {
            (Kind::Take | Kind::Schedule, Seen::Admitted { .. } | Seen::Scheduled { .. }) => n > 0,
            (Kind::Lease { .. }, Seen::Lease { granted, .. }) => granted > 0 || moved,
            _ => false,
        };
        if !writes {
            assert_eq!(eval.before, eval.after, "a denial, a peek or a query wrote");
            return;
        }
        // The in-process limiter's time until fresh, unclamped: the TTL must cover it.
        let added = (self.alg() == Alg::Log).then_some(n);
        self.check_write(
            &eval,
            Which::Main,
            server_time,
            Some(fresh_in),
            added,
            matches!(kind, Kind::Lease { back } if back > 0),
        );
        self.owner = Some(Which::Main);
    }

    /// A call under a quota other than the one the twin follows, or after the state was written
    /// under one: the documented bound while the old state counts, and self-consistency.
    fn changed(&mut self, which: Which, kind: Kind, n: u64, server_time: bool) {
        let capacity = self.side(which).quota.capacity();
        let before = self.aux(which, Kind::Peek, 0);
        // The quota the state was written under, while its state still counts.
        let old = self
            .owner
            .filter(|&o| self.side(o).plan != self.side(which).plan)
            .map(|o| (o, self.aux(o, Kind::Peek, 0)))
            .filter(|(_, query)| !query.reset().is_zero());
        if let Some((o, query)) = old {
            assert!(
                before.remaining() <= query.remaining() && before.remaining() <= capacity,
                "{which:?} reads {} remaining over a state the {o:?} quota still counts, which \
                 leaves {} (capacity {capacity})",
                before.remaining(),
                query.remaining()
            );
        }
        // What the old quota alone answers to the same request (the meter's scheduling has no
        // peek to ask; its strict admission needs an empty queue, when no old state counts).
        let fit = match (old, kind) {
            (Some((o, _)), Kind::Take | Kind::Peek) if n > 0 && self.alg() != Alg::Meter => {
                Some(self.aux(o, Kind::Peek, n))
            }
            _ => None,
        };
        let got = self
            .side(which)
            .limiters
            .call(kind, n, server_time, self.base_ns())
            .unwrap_or_else(|u| panic!("the script could not decide: {u}"));
        let eval = self.one_eval(which, kind, n, server_time);
        let back = match kind {
            Kind::Lease { back } => back,
            _ => 0,
        };
        // What the call admitted, and whether it writes.
        let (admitted, writes) = match (kind, got) {
            (Kind::Take | Kind::Schedule, Seen::Admitted { .. } | Seen::Scheduled { .. }) => {
                (n, n > 0)
            }
            (Kind::Peek, Seen::Admitted { .. }) => (n, false),
            (Kind::Lease { .. }, Seen::Lease { granted, .. }) => (
                granted,
                granted > 0 || (back > 0 && !before.reset().is_zero() && old.is_none()),
            ),
            (
                _,
                Seen::Denied {
                    remaining, retry, ..
                },
            ) => {
                assert_eq!(
                    remaining,
                    before.remaining(),
                    "a denial's remaining is the query's"
                );
                assert!(!retry.is_zero(), "a denial with no wait");
                (0, false)
            }
            (_, got) => panic!("{kind:?} answered {got:?}"),
        };
        // A request admitted under the new quota fits the old one too: its peek admits it, and
        // a lease takes no more than its whole tokens.
        if let (Some(fit), true) = (fit, admitted > 0) {
            assert!(
                matches!(fit, Seen::Admitted { .. }),
                "{which:?} admitted {admitted}, which the old quota refuses: {fit:?}"
            );
        }
        if let (Some((o, query)), Kind::Lease { .. }) = (old, kind) {
            assert!(
                admitted <= query.remaining(),
                "{which:?} leased {admitted}, the {o:?} quota's state leaves {}",
                query.remaining()
            );
        }
        if !writes {
            assert_eq!(eval.before, eval.after, "a denial, a peek or a query wrote");
            if let Seen::Admitted { remaining, .. } | Seen::Scheduled { remaining, .. } = got {
                assert_eq!(
                    remaining,
                    before
                        .remaining()
                        .checked_sub(admitted)
                        .expect("no more admitted than the query's remaining"),
                    "a peek's or a query's remaining"
                );
            }
            return;
        }
        let [_, _, level, unit, reset, _, _, next] = eval.fields();
        let remaining = level / unit;
        let reset = span(reset, self.side(which).plan.tick);
        let next = next_span(next, self.side(which).plan.tick);
        if back == 0 {
            assert_eq!(
                remaining,
                before
                    .remaining()
                    .checked_sub(admitted)
                    .expect("no more admitted than the query's remaining"),
                "an admission's remaining is the query's less what it took"
            );
        }
        self.check_write(&eval, which, server_time, None, None, back > 0);
        self.owner = Some(which);
        if which == Which::Alt {
            self.twin = None;
        }
        assert_eq!(
            self.aux(which, Kind::Peek, 0),
            Seen::Admitted {
                remaining,
                reset,
                next
            },
            "a query right after an admission"
        );
    }

    /// What an admission wrote: a state the script reads as its own, at the reading under the
    /// side's plan, and its TTL. `fresh_in` is the in-process limiter's time until fresh, if
    /// known; `added`, the log's entries the admission must have added, if known; `gave_back`,
    /// whether it was a lease giving tokens back.
    fn check_write(
        &self,
        eval: &Eval,
        which: Which,
        server_time: bool,
        fresh_in: Option<Duration>,
        added: Option<u64>,
        gave_back: bool,
    ) {
        let plan = &self.side(which).plan;
        let entry = eval
            .after
            .get(&self.key)
            .expect("an admission wrote the state");
        assert_eq!(
            expect_foreign(self.alg(), &entry.data),
            Expect::Reply,
            "the script wrote a state it refuses: {:?}",
            entry.data
        );
        // The answer's reset, in ns.
        let reset = u128::from(eval.fields()[4]) * u128::from(plan.tick);
        // The span until the state reads as fresh, in ns, from the state itself: what the TTL
        // rounds up to the millisecond, and what the reset is, clamped at 2^53 ticks.
        let fresh_ns = match (&entry.data, self.alg()) {
            (Data::Str(s), Alg::Bucket | Alg::Meter) => {
                let v = numbers(s);
                assert_eq!(
                    v.len(),
                    5,
                    "a GCRA state of 5 numbers: {:?}",
                    String::from_utf8_lossy(s)
                );
                assert_eq!(
                    format!("{} {} {} {} {}", v[0], v[1], v[2], v[3], v[4]).as_bytes(),
                    s.as_slice(),
                    "a GCRA state in integers"
                );
                assert_eq!(v[2..], plan.args[..], "the state's quota is the plan's");
                let gap_ns = u128::from(v[1]) * u128::from(plan.tick);
                // The span from the reading to tat, in ns.
                let span_ns = if v[0] == self.reading {
                    assert_eq!(gap_ns, reset, "the state's gap is the answer's reset");
                    gap_ns
                } else {
                    // Only tokens given back at a reading more than 2^52 ticks before tat keep
                    // a base of their own (after the reading); the answer's reset is that span,
                    // clamped at 2^53 ticks.
                    assert!(
                        gave_back && v[0] > self.reading,
                        "the state's base {} is not the reading {}",
                        v[0],
                        self.reading
                    );
                    let span_ns = u128::from(v[0] - self.reading) * 1000 + gap_ns;
                    let tick = u128::from(plan.tick);
                    assert!(
                        span_ns > u128::from(MAXD) * tick,
                        "a rebased state {span_ns} ns ahead"
                    );
                    assert_eq!(
                        reset,
                        span_ns.min(u128::from(LIMIT) * tick) / tick * tick,
                        "the answer's reset is the span to the rebased state's tat"
                    );
                    span_ns
                };
                span_ns
            }
            (Data::Hash(h), Alg::Window) => {
                let [i, c, w, n] = ["i", "c", "w", "n"].map(|f| field_u64(h, f));
                assert_eq!([n, w], plan.args[..], "the state's quota");
                assert!(c >= 1 && c <= n, "a count of {c} of {n}");
                assert!(
                    i >= self.reading / w,
                    "the state's window is before the reading's"
                );
                ((u128::from(i) + 1) * u128::from(w) - u128::from(self.reading)) * 1000
            }
            (Data::Hash(h), Alg::Counter) => {
                let [i, p, c, w, n] = ["i", "p", "c", "w", "n"].map(|f| field_u64(h, f));
                assert_eq!([n, w], plan.args[..], "the state's quota");
                assert!(c >= 1 && c <= n && p <= n, "counts of {p} and {c} of {n}");
                assert!(
                    i >= self.reading / w,
                    "the state's window is before the reading's"
                );
                // Fresh once window i + 1 has ended.
                ((u128::from(i) + 2) * u128::from(w) - u128::from(self.reading)) * 1000
            }
            (Data::ZSet(z), Alg::Log) => {
                let [n, w] = [plan.args[0], plan.args[1]];
                let quota = format!("quota:{w}:{n}");
                assert_eq!(
                    z.score(quota.as_bytes()),
                    Some(f64::NEG_INFINITY),
                    "the quota member"
                );
                let (at, _) = z.last().expect("entries");
                assert!(
                    at.is_finite() && at.floor() == at && at >= self.reading as f64,
                    "the newest entry at {at}, the reading {}",
                    self.reading
                );
                let at = at as u64;
                let count_at = |data: Option<&Entry>| match data.map(|e| &e.data) {
                    Some(Data::ZSet(z)) => z.entries().filter(|(s, _)| *s == at as f64).count(),
                    _ => 0,
                };
                if let Some(added) = added {
                    let new = count_at(Some(entry)) - count_at(eval.before.get(&self.key));
                    assert_eq!(new as u64, added, "entries the admission added at {at}");
                    // The script's own state: the quota member, and entries "time:sequence"
                    // scored by their time, none that has left the window.
                    for (score, member) in z.entries() {
                        if member == quota.as_bytes() {
                            continue;
                        }
                        let text = String::from_utf8_lossy(member);
                        let (t, k) = text.split_once(':').expect("an entry time:sequence");
                        assert_eq!(t.parse::<f64>().ok(), Some(score), "an entry's time");
                        assert!(
                            k.parse::<u64>().is_ok_and(|k| k >= 1),
                            "an entry's sequence"
                        );
                        assert!(
                            score > at as f64 - w as f64,
                            "an entry at {score} left the window at {at}"
                        );
                    }
                }
                (u128::from(at) + u128::from(w) - u128::from(self.reading)) * 1000
            }
            (data, alg) => panic!("{alg:?} wrote {data:?}"),
        };
        let fresh_us = fresh_ns.div_ceil(1000);
        // The answer's reset is the span until fresh, clamped at 2^53 ticks (the windows' tick
        // is 1 us).
        let tick = if self.alg().is_gcra() {
            u128::from(plan.tick)
        } else {
            1000
        };
        assert_eq!(
            reset,
            fresh_ns.min(u128::from(LIMIT) * tick) / tick * tick,
            "the answer's reset is the span until the state reads as fresh, clamped"
        );
        if let Some(fresh_in) = fresh_in {
            assert!(
                fresh_us * 1000 >= fresh_in.as_nanos(),
                "the state reads as fresh in {fresh_us} us, the in-process limiter in {fresh_in:?}"
            );
        }
        if !server_time {
            assert_eq!(
                entry.expires_at, None,
                "a state written at a client's reading has a TTL"
            );
            return;
        }
        let ttl_ms = fresh_ns.div_ceil(1_000_000).max(1);
        let expires_at = entry
            .expires_at
            .expect("a state written at the server's reading has a TTL");
        assert_eq!(
            u128::from(expires_at),
            u128::from(self.reading) + ttl_ms * 1000,
            "the TTL is the reset rounded up to the millisecond"
        );
        assert!(
            u128::from(expires_at - self.reading) >= fresh_us,
            "the state expires in {} us, before it reads as fresh ({fresh_us} us)",
            expires_at - self.reading
        );
    }

    /// A foreign value at the key for one call under the main quota, then the state put back.
    fn foreign(&mut self, data: &Data, kind: Kind, n: u64, server_time: bool) {
        let saved = self.entry();
        with_server(|s| {
            let entry = Entry {
                data: data.clone(),
                expires_at: None,
            };
            s.store.borrow_mut().keys.insert(self.key.clone(), entry);
        });
        self.clock.set(Nanos::new(self.reading * 1000));
        let got = self
            .main
            .limiters
            .call(kind, n, server_time, self.base_ns());
        let evals = self.take_evals();
        let [eval] = evals.as_slice() else {
            panic!("one call, {} EVALSHAs", evals.len());
        };
        match (expect_foreign(self.alg(), data), &got) {
            (Expect::Foreign, Err(u)) if u.kind() == UnavailableKind::ForeignValue => {}
            (Expect::WrongType, Err(u))
                if u.kind() == UnavailableKind::Server && u.detail().contains("WRONGTYPE") => {}
            (Expect::Reply, Ok(seen)) => {
                let writes = matches!(seen, Seen::Admitted { .. } | Seen::Scheduled { .. })
                    && n > 0
                    && kind != Kind::Peek;
                if writes {
                    self.check_foreign_write(eval, data, server_time);
                } else {
                    assert_eq!(eval.before, eval.after, "a denial, a peek or a query wrote");
                }
            }
            (expect, _) => panic!(
                "{data:?} at the key: expected {expect:?}, got {got:?} (the script answered {:?})",
                eval.answer
            ),
        }
        if got.is_err() {
            assert_eq!(eval.before, eval.after, "an error wrote");
        }
        with_server(|s| {
            let mut store = s.store.borrow_mut();
            match saved {
                Some(e) => store.keys.insert(self.key.clone(), e),
                None => store.keys.remove(&self.key),
            };
        });
    }

    /// A write over a value the script read as a state (or a hash without its fields): its own
    /// fields rewritten, the others kept.
    fn check_foreign_write(&self, eval: &Eval, data: &Data, server_time: bool) {
        match (data, &eval.after.get(&self.key).expect("the state").data) {
            (Data::Hash(old), Data::Hash(new)) => {
                let own = own_fields(self.alg());
                let is_own = |k: &[u8]| own.contains(&String::from_utf8_lossy(k).as_ref());
                for (k, v) in old {
                    if !is_own(k) {
                        assert_eq!(
                            new.get(k),
                            Some(v),
                            "a field the script does not own changed"
                        );
                    }
                }
                let mut mine = eval.clone();
                let entry = mine.after.get_mut(&self.key).unwrap();
                entry.data = Data::Hash(
                    new.iter()
                        .filter(|(k, _)| is_own(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                );
                self.check_write(&mine, Which::Main, server_time, None, None, false);
            }
            _ => self.check_write(eval, Which::Main, server_time, None, None, false),
        }
    }

    /// A script call with a reading out of range: `TOLLGATE bad reading`, nothing written.
    fn bad_reading(&mut self, reading: &BadReading, kind: Kind, n: u64) {
        let (sent, server_now) = match reading {
            // "" asks for the server's TIME: not a bad reading.
            BadReading::Sent(s) if s.is_empty() || reading_valid(s) => return,
            BadReading::Sent(s) => (s.clone(), self.reading),
            BadReading::Server(now) => (Vec::new(), *now),
        };
        let argv = Self::argv(&self.main.plan, mode(self.alg(), kind, n), n, &sent, None);
        let answer = with_server(|s| {
            s.store.borrow_mut().now_us = server_now;
            let answer = s.eval(&sha(self.alg()), std::slice::from_ref(&self.key), &argv);
            s.store.borrow_mut().now_us = self.reading;
            answer
        });
        let evals = self.take_evals();
        assert!(
            answer
                .error_text()
                .is_some_and(|e| e.starts_with("TOLLGATE bad reading")),
            "reading {reading:?}: {answer:?}"
        );
        assert_eq!(evals[0].before, evals[0].after, "a refused reading wrote");
    }

    /// A script call with one argument replaced: `TOLLGATE bad arguments` when the script's
    /// checks refuse it, nothing written.
    fn bad_args(&mut self, lease: bool, at: usize, with: &[u8]) {
        let n = 1;
        let mode = if lease {
            "lease"
        } else {
            mode(self.alg(), Kind::Take, n)
        };
        let reading = self.reading.to_string().into_bytes();
        let mut argv = Self::argv(&self.main.plan, mode, n, &reading, lease.then_some(0));
        // `at` counts the arguments other than the reading (a bad reading is another probe).
        let reading_at = 2 + self.main.plan.args.len();
        let at = if at >= reading_at { at + 1 } else { at };
        argv[at] = with.to_vec();
        if args_valid(self.alg(), &argv) {
            return;
        }
        let answer =
            with_server(|s| s.eval(&sha(self.alg()), std::slice::from_ref(&self.key), &argv));
        let evals = self.take_evals();
        assert!(
            answer
                .error_text()
                .is_some_and(|e| e.starts_with("TOLLGATE bad arguments")),
            "ARGV {:?}: {answer:?}",
            argv.iter()
                .map(|a| String::from_utf8_lossy(a))
                .collect::<Vec<_>>()
        );
        assert_eq!(evals[0].before, evals[0].after, "refused arguments wrote");
    }

    fn step(&mut self, step: Step) {
        self.reading = match step {
            Step::Forward(d) => self.reading.saturating_add(d).min(self.hi),
            Step::Back(d) => self.reading.saturating_sub(d).max(self.lo),
            Step::Earliest => self.lo,
            Step::Latest => self.hi,
            Step::Edge { pick, delta } => match self.last {
                Some((at, seen)) => {
                    let span = match (seen, pick) {
                        (Seen::Denied { retry, .. } | Seen::Lease { retry, .. }, 0) => retry,
                        (Seen::Scheduled { delay, .. }, 0) => delay,
                        (
                            Seen::Admitted { next, reset, .. }
                            | Seen::Denied { next, reset, .. }
                            | Seen::Scheduled { next, reset, .. },
                            0 | 1,
                        ) => next.unwrap_or(reset),
                        _ => seen.reset(),
                    };
                    let us = u64::try_from(span.as_nanos().div_ceil(1000)).unwrap_or(u64::MAX);
                    at.saturating_add(us)
                        .saturating_add_signed(i64::from(delta))
                        .clamp(self.lo, self.hi)
                }
                None => self.reading,
            },
        };
    }
}

/// The limiters and plan of `quota`: the builder must accept exactly the quotas the plan rules
/// accept.
fn side(alg: Alg, quota: Quota, clock: &ManualClock) -> Option<Side> {
    match (plan(alg, &quota), build(alg, quota, clock)) {
        (Some(plan), Ok(limiters)) => Some(Side {
            quota,
            plan,
            limiters,
        }),
        (None, Err(_)) => None,
        (plan, limiters) => panic!(
            "the plan rules say {plan:?}, the builder {:?}, for {quota:?}",
            limiters.err()
        ),
    }
}

fn run(seq: &Sequence) {
    let clock = ManualClock::new();
    let Some(main) = side(seq.alg, seq.quota, &clock) else {
        return;
    };
    let alt = seq.alt.and_then(|q| side(seq.alg, q, &clock));
    let plan = &main.plan;
    // The quota the script enforces: the plan's interval, in nanoseconds.
    let reference_quota = if !seq.alg.is_gcra()
        || plan.tick == 1
        || seq.quota.interval().as_nanos().is_multiple_of(1000)
    {
        seq.quota
    } else {
        Quota::per_period(1, Duration::from_micros(plan.args[0]))
            .and_then(|q| q.with_capacity(seq.quota.capacity()))
            .expect("the plan's rounded quota is valid")
    };
    // In-process time starts at a multiple of the window, as Redis's windows start at multiples
    // of it from the epoch.
    let lo = if seq.alg.is_gcra() {
        seq.start - seq.back
    } else {
        (seq.start - seq.back) / plan.args[1] * plan.args[1]
    };
    let hi = MAX_READING.min(lo + MAX_SPAN_US);
    let key = main.limiters.key();
    if let Some(alt) = &alt {
        assert_eq!(alt.limiters.key(), key, "both quotas name the same key");
    }
    with_server(|s| {
        s.store.borrow_mut().keys.clear();
        s.evals.clear();
    });
    let mut run = Run {
        seq,
        reference_quota,
        twin: Some(Reference::new(seq.alg, reference_quota)),
        main,
        alt,
        owner: None,
        clock,
        key,
        lo,
        hi,
        reading: seq.start.min(hi),
        last: None,
    };
    for op in &seq.ops {
        if let Op::Step(s) = op {
            run.step(*s);
            continue;
        }
        run.tick();
        match op {
            Op::Step(_) => unreachable!(),
            Op::Call {
                which,
                kind,
                n,
                server_time,
            } => {
                // The second quota's plan may have refused it: then the call is the main one's.
                let which = if run.alt.is_some() {
                    *which
                } else {
                    Which::Main
                };
                run.call(which, *kind, *n, *server_time);
            }
            Op::Forget => run.forget(),
            Op::Foreign {
                data,
                kind,
                n,
                server_time,
            } => run.foreign(data, *kind, *n, *server_time),
            Op::BadReading { reading, kind, n } => run.bad_reading(reading, *kind, *n),
            Op::BadArgs { lease, at, with } => run.bad_args(*lease, *at, with),
        }
    }
}

fuzz_target!(|input: Input| {
    for seq in &input.sequences {
        run(seq);
    }
    for extra in &input.extras {
        run_extra(extra);
    }
    // Everything a run allocated is freed before it ends (the keyspace, and the Lua state's
    // garbage, which its collector would otherwise free during a later run): a run that ends with
    // more allocations than frees makes libFuzzer scan the heap for leaks, which costs more than
    // the run.
    with_server(|s| {
        s.store.borrow_mut().keys.clear();
        s.evals.clear();
        s.lua.gc_collect().expect("a full collection");
    });
});

// --- several limits and reservations ------------------------------------------------------------

/// A sequence for the calls the per-key harness above does not drive: several token-bucket limits
/// on one key ([`RedisAllOf`], `gcra_all.lua`), or one bucket's reservations and their cancels
/// (the `reserve` and `cancel` modes). Readings come from the client's clock (so no state has a
/// TTL) and only move forwards: the in-process `AllOf` gives a refused request's tokens back at
/// its reading, which a clock stepping back would read differently, and the documented bounds on
/// backward steps are the per-key harness's to check.
///
/// Checks: the builder accepts exactly the quotas whose plans fit; one `EVALSHA` per call that
/// reaches the server, over the limits' names in order, none for a request over a capacity or a
/// `max_wait` past `reservation::MAX_WAIT`; a refusal, a peek or a query writes nothing, and an
/// admission of several limits writes every one of them and nothing else; every state written
/// parses, its gap within the burst window (an admission) or within 2^52 ticks (a reservation in
/// debt), with no TTL; a reservation's delay is at most its `max_wait`; a cancel never gives
/// back more than its reservation took. Where every plan counts nanoseconds, the answers equal the
/// in-process ones at the same readings: `AllOf` of keyed token buckets (the answer and the index
/// of its limit), `KeyedLimiter::reserve_key_n_at` (tokens, delay, `ready_at`, the denial) and
/// `cancel_at`; except that Redis denies a reservation whose gap would pass 2^52 ticks, with a
/// `retry_after` of the wait until it fits, `max(wait - max_wait, gap - 2^52)`, which the
/// in-process limiter (whose bound is 2^61 ns) may grant: its reservation is then cancelled at
/// once, which restores the same state at every later reading.
#[derive(Debug)]
struct Extra {
    /// The limits (one, for reservations).
    quotas: Vec<Quota>,
    reserve: bool,
    /// The first reading, Unix us.
    start: u64,
    ops: Vec<ExtraOp>,
}

#[derive(Debug, Clone, Copy)]
enum ExtraOp {
    /// The clock moves forwards by this many microseconds.
    Forward(u64),
    Take(u64),
    Peek(u64),
    /// Reserve `n`, waiting at most this many nanoseconds.
    Reserve(u64, u64),
    /// Cancel the reservation held this many places before the newest (if there is one).
    Cancel(usize),
}

/// A quota of 1 to 6 tokens every 1 ns to 10 s, that refuses often.
fn small_quota(u: &mut Unstructured<'_>) -> Result<Option<Quota>> {
    let interval = match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(1..=1_000)?,
        1 => u.int_in_range(1..=1_000)? * 1000,
        _ => u.int_in_range(1..=10_000_000_000)?,
    };
    let capacity = u.int_in_range(1..=6)?;
    Ok(Quota::per_period(1, Duration::from_nanos(interval))
        .and_then(|q| q.with_capacity(capacity))
        .ok())
}

fn extra(u: &mut Unstructured<'_>) -> Result<Extra> {
    let reserve: bool = u.arbitrary()?;
    let count = if reserve { 1 } else { u.int_in_range(1..=4)? };
    let mut quotas = Vec::new();
    for _ in 0..count {
        let q = if u.ratio(1, 3)? {
            gcra_quota(u)?
        } else {
            small_quota(u)?
        };
        quotas.extend(q);
    }
    let (start, _) = start(u)?;
    let capacity = quotas.iter().map(Quota::capacity).max().unwrap_or(1);
    let interval_ns = quotas
        .iter()
        .map(|q| u64::try_from(q.interval().as_nanos()).unwrap_or(u64::MAX))
        .min()
        .unwrap_or(1);
    let burst_ns = interval_ns.saturating_mul(capacity);
    let mut ops = Vec::new();
    for _ in 0..u.int_in_range(0..=MAX_OPS)? {
        if u.is_empty() {
            break;
        }
        let op = match u.int_in_range(0..=9u8)? {
            0..=2 => ExtraOp::Forward(match u.int_in_range(0..=5u8)? {
                0 => u.int_in_range(0..=2_000)?,
                1 | 2 => (interval_ns / 1000).saturating_mul(u.int_in_range(0..=12)?) / 4,
                3 => burst_ns / 1000,
                4 => 1 << u.int_in_range(0..=62)?,
                _ => u.arbitrary()?,
            }),
            3 | 4 => ExtraOp::Take(amount(u, capacity)?),
            5 => ExtraOp::Peek(amount(u, capacity)?),
            6..=8 if reserve => ExtraOp::Reserve(
                amount(u, capacity)?,
                match u.int_in_range(0..=7u8)? {
                    0 => 0,
                    1 => interval_ns.saturating_mul(u.int_in_range(0..=8)?),
                    2 => burst_ns.saturating_mul(u.int_in_range(1..=3)?),
                    3 => MAXD
                        .saturating_sub(burst_ns)
                        .saturating_add(u.int_in_range(0..=2)?),
                    4 => MAXD.saturating_mul(1000),
                    5 => 1 << 61,
                    6 => (1 << 61) + 1,
                    _ => u.int_in_range(0..=1u64 << 61)?,
                },
            ),
            _ if reserve => ExtraOp::Cancel(u.int_in_range(0..=2)?),
            _ => ExtraOp::Take(amount(u, capacity)?),
        };
        ops.push(op);
    }
    Ok(Extra {
        quotas,
        reserve,
        start,
        ops,
    })
}

/// The one `EVALSHA` a call made, its mode checked.
fn one_eval(mode: &str) -> Eval {
    let evals = with_server(|s| std::mem::take(&mut s.evals));
    let [eval] = <[Eval; 1]>::try_from(evals).unwrap_or_else(|e| {
        panic!("one call, {} EVALSHAs: {e:?}", e.len());
    });
    assert_eq!(eval.argv[0], mode.as_bytes(), "the mode of {eval:?}");
    eval
}

/// No `EVALSHA`: the client refused the call.
fn no_eval(what: &str) {
    let evals = with_server(|s| std::mem::take(&mut s.evals));
    assert!(evals.is_empty(), "{what} made a round trip: {evals:?}");
}

/// The state at `name` after `eval`, if any: a GCRA string (base, gap, interval, capacity,
/// tick) with no TTL.
fn state_after(eval: &Eval, name: &[u8]) -> Option<[f64; 5]> {
    let entry = eval.after.get(name)?;
    let Data::Str(v) = &entry.data else {
        panic!("a GCRA state is a string: {entry:?}");
    };
    assert_eq!(
        entry.expires_at, None,
        "a state written at a client's reading has no TTL"
    );
    Some(gcra_state(v).unwrap_or_else(|| panic!("a state the script reads: {v:?}")))
}

/// The answer to an admission, a peek or a query, as `Seen`, relative to `base_ns`.
fn seen(r: std::result::Result<Admitted, RedisError>, base_ns: u64) -> Seen {
    match r {
        Ok(a) => Seen::admitted(&a),
        Err(RedisError::Denied(d)) => Seen::denied(&d, base_ns),
        Err(RedisError::InsufficientCapacity(_)) => Seen::InsufficientCapacity,
        Err(e) => panic!("the script could not decide: {e}"),
    }
}

fn run_extra(x: &Extra) {
    with_server(|s| {
        s.store.borrow_mut().keys.clear();
        s.evals.clear();
    });
    let clock = ManualClock::new();
    if x.reserve {
        run_reservations(x, &clock);
    } else {
        run_all_of(x, &clock);
    }
    with_server(|s| s.evals.clear());
}

/// Sets the client's clock and the fake's to `reading` (Unix us).
fn at(clock: &ManualClock, reading: u64) {
    clock.set(Nanos::new(reading * 1000));
    with_server(|s| s.store.borrow_mut().now_us = reading);
}

fn run_all_of(x: &Extra, clock: &ManualClock) {
    let plans: Vec<Option<Plan>> = x.quotas.iter().map(gcra_plan).collect();
    let built = RedisAllOf::builder(FakeConn, x.quotas.iter().copied())
        .timeout(MAX_WAIT)
        .breaker(u32::MAX, MAX_WAIT)
        .client_clock(clock.clone())
        .build(AllOfFailurePolicy::Closed);
    let accepted = !x.quotas.is_empty() && plans.iter().all(Option::is_some);
    assert_eq!(built.is_ok(), accepted, "{:?}: {:?}", x.quotas, built.err());
    let Ok(limits) = built else {
        return;
    };
    let plans: Vec<Plan> = plans.into_iter().flatten().collect();
    let exact = plans.iter().all(|p| p.tick == 1);
    let reference: AllOf<KeyedLimiter<u64, TokenBucketKeys, ManualClock>> = AllOf::new(
        x.quotas
            .iter()
            .map(|q| KeyedLimiter::with_clock(*q, ManualClock::new())),
    )
    .expect("at least one limit");
    let names = limits.key_names(KEY).unwrap();
    let (lo, hi) = (x.start, MAX_READING.min(x.start + MAX_SPAN_US));
    let mut reading = lo;
    for op in &x.ops {
        let (n, peek) = match *op {
            ExtraOp::Forward(us) => {
                reading = reading.saturating_add(us).min(hi);
                continue;
            }
            ExtraOp::Take(n) => (n, false),
            ExtraOp::Peek(n) => (n, true),
            ExtraOp::Reserve(..) | ExtraOp::Cancel(_) => continue,
        };
        at(clock, reading);
        let now = Nanos::new((reading - lo) * 1000);
        let (index, answer) = RUNTIME.block_on(async {
            if peek {
                (None, limits.peek_key_n(KEY, n).await)
            } else {
                limits.check_key_n_indexed(KEY, n).await
            }
        });
        let got = seen(answer, lo * 1000);
        if got == Seen::InsufficientCapacity {
            no_eval("a request over a capacity");
            let first = x.quotas.iter().position(|q| n > q.capacity());
            assert!(first.is_some(), "{n} fits every limit of {:?}", x.quotas);
            if !peek {
                assert_eq!(index, first, "the first limit too small is named");
            }
        } else {
            let eval = one_eval(if peek || n == 0 { "peek" } else { "take" });
            assert_eq!(eval.keys, names, "one key per limit, in order");
            let admitted = matches!(got, Seen::Admitted { .. });
            if peek || n == 0 || !admitted {
                assert_eq!(
                    eval.before, eval.after,
                    "{got:?} for {n} (peek: {peek}) wrote"
                );
            } else {
                let others = |m: &BTreeMap<Vec<u8>, Entry>| {
                    m.iter()
                        .filter(|(k, _)| !names.contains(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect::<Vec<_>>()
                };
                assert_eq!(
                    others(&eval.before),
                    others(&eval.after),
                    "wrote another key"
                );
                for (name, plan) in names.iter().zip(&plans) {
                    assert_ne!(
                        eval.before.get(name),
                        eval.after.get(name),
                        "limit not written"
                    );
                    let state = state_after(&eval, name).expect("an admission writes every limit");
                    let burst = plan.args[0] * plan.args[1];
                    assert!(
                        state[1] <= burst as f64,
                        "a gap past the burst window: {state:?}"
                    );
                    assert_eq!(state[4], plan.tick as f64);
                }
            }
        }
        if exact {
            let (at_ref, expected) = if peek {
                (
                    None,
                    from_keyed(KeyedLimit::peek_key_n_at(&reference, &0u64, n, now)),
                )
            } else {
                let (i, r) = reference.check_key_n_at_indexed(&0u64, n, now);
                (Some(i), from_keyed(r))
            };
            assert_eq!(got, expected, "{op:?} at {reading} us, {:?}", x.quotas);
            assert_eq!(index, at_ref, "{op:?} at {reading} us: the limit answering");
        }
    }
}

fn run_reservations(x: &Extra, clock: &ManualClock) {
    let Some(&quota) = x.quotas.first() else {
        return;
    };
    let plan = gcra_plan(&quota);
    let built = RedisLimiter::<TokenBucketKeys>::builder(FakeConn, quota)
        .timeout(MAX_WAIT)
        .breaker(u32::MAX, MAX_WAIT)
        .client_clock(clock.clone())
        .build(FailurePolicy::Closed);
    assert_eq!(
        built.is_ok(),
        plan.is_some(),
        "{quota:?}: {:?}",
        built.err()
    );
    let (Ok(limiter), Some(plan)) = (built, plan) else {
        return;
    };
    let exact = plan.tick == 1;
    let tick = plan.tick;
    let burst = plan.args[0] * plan.args[1];
    let reference: KeyedLimiter<u64, TokenBucketKeys, ManualClock> =
        KeyedLimiter::with_clock(quota, ManualClock::new());
    let (lo, hi) = (x.start, MAX_READING.min(x.start + MAX_SPAN_US));
    let base_ns = lo * 1000;
    let mut reading = lo;
    let mut held = Vec::new();
    for op in &x.ops {
        if let ExtraOp::Forward(us) = *op {
            reading = reading.saturating_add(us).min(hi);
            continue;
        }
        at(clock, reading);
        let now = Nanos::new((reading - lo) * 1000);
        match *op {
            ExtraOp::Forward(_) => unreachable!(),
            ExtraOp::Take(n) | ExtraOp::Peek(n) => {
                let peek = matches!(op, ExtraOp::Peek(_));
                let got = seen(
                    RUNTIME.block_on(async {
                        if peek {
                            limiter.peek_key_n(KEY, n).await
                        } else {
                            limiter.check_key_n(KEY, n).await
                        }
                    }),
                    base_ns,
                );
                if got == Seen::InsufficientCapacity {
                    no_eval("a request over the capacity");
                } else {
                    let eval = one_eval(if peek || n == 0 { "peek" } else { "take" });
                    if let Some(state) = state_after(&eval, &eval.keys[0]) {
                        assert!(state[1] <= MAXD as f64, "a gap past 2^52: {state:?}");
                    }
                }
                if exact {
                    let expected = if peek {
                        from_keyed(reference.peek_key_n_at(&0u64, n, now))
                    } else {
                        from_keyed(reference.check_key_n_at(&0u64, n, now))
                    };
                    assert_eq!(got, expected, "{op:?} at {reading} us, {quota:?}");
                }
            }
            ExtraOp::Reserve(n, wait_ns) => {
                let max_wait = Duration::from_nanos(wait_ns);
                let got = RUNTIME.block_on(limiter.reserve_key_n(KEY, n, max_wait));
                if wait_ns > 1 << 61 {
                    assert!(matches!(got, Err(RedisError::MaxWait(_))), "{got:?}");
                    no_eval("a max_wait past 2^61 ns");
                    continue;
                }
                if n > quota.capacity() {
                    assert!(
                        matches!(got, Err(RedisError::InsufficientCapacity(_))),
                        "{got:?}"
                    );
                    no_eval("a reservation over the capacity");
                    continue;
                }
                let eval = one_eval("reserve");
                assert_eq!(
                    eval.argv[6],
                    (wait_ns / tick).min(MAXD).to_string().into_bytes(),
                    "the longest wait, in ticks"
                );
                match &got {
                    Ok(r) => {
                        assert_eq!(r.tokens(), n);
                        assert!(r.delay() <= max_wait, "{r:?} waits past {max_wait:?}");
                        assert_eq!(
                            r.ready_at().as_u64(),
                            reading * 1000 + u64::try_from(r.delay().as_nanos()).unwrap()
                        );
                        if let Some(state) = state_after(&eval, &eval.keys[0]) {
                            assert!(state[1] <= MAXD as f64, "a gap past 2^52: {state:?}");
                        }
                        if n == 0 {
                            assert_eq!(eval.before, eval.after, "a query wrote");
                        }
                    }
                    Err(RedisError::Denied(_)) => {
                        assert_eq!(eval.before, eval.after, "a denied reservation wrote")
                    }
                    Err(e) => panic!("the script could not decide: {e}"),
                }
                if !exact {
                    if let Ok(r) = got {
                        held.push((r, None));
                    }
                    continue;
                }
                let expected = reference.reserve_key_n_at(&0u64, n, max_wait, now);
                match (got, expected) {
                    (Ok(g), Ok(e)) => {
                        assert_eq!(
                            (g.tokens(), g.delay(), g.ready_at().as_u64() - base_ns),
                            (e.tokens(), e.delay(), e.ready_at().as_u64()),
                            "{op:?} at {reading} us, {quota:?}"
                        );
                        held.push((g, Some(e)));
                    }
                    (Err(RedisError::Denied(g)), Err(ReserveError::Denied(e))) => {
                        // The wait for the tokens, and the gap the reservation would leave.
                        let wait = u64::try_from(e.retry_after().as_nanos()).unwrap() + wait_ns;
                        let gap = wait + burst;
                        let retry = e
                            .retry_after()
                            .max(Duration::from_nanos(gap.saturating_sub(MAXD)));
                        assert_eq!(g.retry_after(), retry, "{op:?} at {reading} us, {quota:?}");
                        assert_eq!(
                            (g.remaining(), g.reset_after(), g.next_after()),
                            (e.remaining(), e.reset_after(), e.next_after()),
                            "{op:?} at {reading} us"
                        );
                    }
                    (Err(RedisError::Denied(g)), Ok(e)) => {
                        // Granted in process, past the scripts' 2^52-tick bound in Redis.
                        let gap = u64::try_from(e.delay().as_nanos()).unwrap() + burst;
                        assert!(
                            gap > MAXD,
                            "{op:?} at {reading} us: Redis denied {g:?}, in process {e:?}"
                        );
                        assert_eq!(g.retry_after(), Duration::from_nanos(gap - MAXD));
                        assert_eq!(e.cancel_at(now), n, "the reference's reservation undone");
                    }
                    (g, e) => panic!("{op:?} at {reading} us, {quota:?}: {g:?} against {e:?}"),
                }
            }
            ExtraOp::Cancel(back) => {
                if back >= held.len() {
                    continue;
                }
                let (g, e) = held.remove(held.len() - 1 - back);
                let tokens = g.tokens();
                let got = RUNTIME
                    .block_on(g.cancel())
                    .expect("the script decides a cancel");
                assert!(got <= tokens, "gave back {got} of {tokens}");
                let eval = one_eval("cancel");
                if got == 0 {
                    assert_eq!(eval.before, eval.after, "a cancel of nothing wrote");
                } else if let Some(state) = state_after(&eval, &eval.keys[0]) {
                    assert!(state[1] <= MAXD as f64, "a gap past 2^52: {state:?}");
                }
                if let Some(e) = e {
                    assert_eq!(got, e.cancel_at(now), "{op:?} at {reading} us, {quota:?}");
                }
            }
        }
    }
}
