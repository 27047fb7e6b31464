//! The Redis backend's real Lua scripts, run under Lua 5.1 (the version Redis embeds) against an
//! in-memory fake of the Redis commands they call, through the real client (`RedisLimiter` on a
//! fake connection), every answer compared with the crate's in-process limiter at the same
//! reading.
//!
//! # The fake server
//!
//! One Lua state holds the three scripts (`tollgate::redis::script_source`), each loaded as a
//! chunk and called once per `EVALSHA` with the globals `KEYS` and `ARGV` set, as Redis runs them.
//! `redis.call` answers `GET`, `SET`, `PEXPIRE`, `PERSIST`, `HMGET`, `HSET` and `TIME` from a map of
//! strings and hashes with expiry times (on the server's clock, the reading of the operation):
//! replies converted as Redis converts them (a nil bulk string is `false`, a status is
//! `{ok = ...}`), numeric arguments as Redis formats them (integers in full), `WRONGTYPE` (`GET`
//! on a hash, `HMGET` or `HSET` on a string) raised as a Lua error as `redis.call` does, and any
//! command or form the scripts should not use answered with an error that fails the run.
//! `redis.error_reply(msg)` returns `{err = msg}`. A script's reply is converted as Redis converts
//! it for a RESP2 client (a number truncated toward zero to an integer, `true` to 1, `false` to
//! nil, a table with `err` to an error reply, any other table to an array up to its first nil),
//! and reaches the client as a `redis::Value`, so it goes through the real reply decoder and the
//! real error classification. Keys expire at the first reading at or after their expiry time.
//!
//! # What runs
//!
//! Up to 3 sequences, each for one algorithm (the token bucket, the leaky meter, the fixed
//! window) with an adversarial quota: intervals from 1 ns to 2^62 ns, from ratios that leave a
//! nanosecond remainder, capacities up to the largest each plan accepts (a 2^52 ns burst window,
//! a 2^52 us one) and one past it; windows from 1 us to 2^52 us, and a window with a nanosecond
//! remainder or past 2^52 us. The builder must accept exactly the quotas the plan rules accept
//! (mirrored here from `src/redis/script.rs`), and every `EVALSHA` must carry the `ARGV` those
//! rules give: mode, n, the plan's arguments, and the reading (or "" for the server's `TIME`).
//!
//! Then up to 96 operations: clock steps forwards and backwards (microseconds, quarters of an
//! interval or window, whole burst windows, powers of two, anywhere; readings kept in
//! `[base, base + 2^62 ns]` and below 2^53 us, from near 0, around today, up to 2^53 - 1);
//! admissions, peeks and (the meter) schedulings of n = 0..=capacity + 1, each through the limiter
//! that sends its reading or the one that lets the script read `TIME`; and probes: a foreign value
//! at the key (a string that is no state, a valid state under another quota, a hash with any of
//! the window's fields), an out-of-range reading, and arguments the client never sends.
//!
//! # Checks
//!
//! - Every answer (admitted or denied, `remaining`, `reset_after`, `retry_after`, `retry_at`; for
//!   schedulings `delay`, `queued`, `remaining`, `reset_after`, `depart_at`; or
//!   `InsufficientCapacity`, without a round trip) equals the in-process limiter's at
//!   `(reading - base) x 1000` ns: `KeyedLimiter<u64, TokenBucketKeys>` (`check_key_n_at`,
//!   `peek_key_n_at`), a direct `LeakyMeter` (`try_acquire_n_at`, `peek_n_at`,
//!   `try_schedule_n_at`), `KeyedLimiter<u64, FixedWindowKeys>`. The reference's quota is the
//!   quota itself, or, where the plan counts microseconds and the interval is not a whole one, the
//!   quota with the plan's rounded-up interval, which the script enforces exactly. The documented
//!   clamps are applied to the reference's answer: a GCRA state more than 2^53 ticks ahead of
//!   the reading is read as 2^53 ticks ahead, a window end more than 2^52 us ahead as 2^52 us.
//! - Denials, peeks and queries never write (the store is the same before and after, expiry
//!   times included); an admission writes the state the script's header describes, at the
//!   reading, under the plan's quota, with a TTL of the span until the state reads as fresh
//!   rounded up to the millisecond (at least 1 ms) on the server's clock, and none with a
//!   client's reading; that TTL is never shorter than the in-process limiter's `reset_after`
//!   (the GCRA) or the time until the window ends (the fixed window).
//! - When the fake expires the state, the in-process limiter must read as fresh at that reading
//!   (all of the capacity, `reset_after` zero); it is then replaced by a new one, as Redis has no
//!   state left either.
//! - A foreign value answers the script's `TOLLGATE foreign value` error (a `ForeignValue` on the
//!   client) or the fake's `WRONGTYPE` (a `Server` error), never a panic or a Lua error, and
//!   writes nothing; a value that is a valid state answers a well-formed reply. An out-of-range
//!   reading answers `TOLLGATE bad reading`, arguments out of range `TOLLGATE bad arguments`,
//!   neither writing.

#![no_main]

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;
use std::sync::LazyLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use mlua::{Function, Lua, MultiValue, Value as LuaValue};
use redis::aio::ConnectionLike;
use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};
use tollgate::keyed::{FixedWindowKeys, KeyedError, KeyedLimiter, LeakyMeterKeys, TokenBucketKeys};
use tollgate::leaky::LeakyMeter;
use tollgate::redis::{
    script_source, FailurePolicy, RedisAlgorithm, RedisError, RedisLimiter, UnavailableKind,
    MAX_WAIT,
};
use tollgate::{AcquireError, Admitted, Denied, ManualClock, Nanos, Quota, Scheduled};

/// 2^52: the longest span a script counts (burst windows, windows), in its ticks.
const MAXD: u64 = 1 << 52;
/// 2^53: where Lua's doubles stop being exact; readings stay below it, GCRA spans are clamped to it.
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

/// A value in the fake's keyspace.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Data {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
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

impl Store {
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
                    Some(Data::Hash(_)) => Err(error(WRONGTYPE)),
                }
            }
            "SET" => {
                // Only the plain form: the scripts set no options (a SET without KEEPTTL drops the
                // TTL).
                if args.len() != 3 {
                    return Err(error("ERR the fake models SET key value only"));
                }
                let entry = Entry {
                    data: Data::Str(args[2].clone()),
                    expires_at: None,
                };
                self.keys.insert(args[1].clone(), entry);
                Ok(Reply::Status("OK"))
            }
            "PEXPIRE" => {
                if args.len() != 3 {
                    return Err(error("ERR the fake models PEXPIRE key milliseconds only"));
                }
                let ms = integer(&args[2])?;
                let now_ms = i64::try_from(self.now_us / 1000).unwrap_or(i64::MAX);
                if ms > 0 && ms > i64::MAX - now_ms {
                    return Err(error("ERR invalid expire time in 'pexpire' command"));
                }
                let Some(entry) = self.keys.get_mut(&args[1]) else {
                    return Ok(Reply::Int(0));
                };
                if ms <= 0 {
                    self.keys.remove(&args[1]);
                } else {
                    let at = u128::from(self.now_us) + ms as u128 * 1000;
                    entry.expires_at = Some(u64::try_from(at).unwrap_or(u64::MAX));
                }
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
                    Some(Data::Str(_)) => Err(error(WRONGTYPE)),
                    Some(Data::Hash(h)) => Ok(Reply::Array(
                        fields
                            .iter()
                            .map(|f| h.get(f).map_or(Reply::Nil, |v| Reply::Bulk(v.clone())))
                            .collect(),
                    )),
                }
            }
            "HSET" => {
                arity(args.len() >= 4 && args.len().is_multiple_of(2))?;
                let entry = self.keys.entry(args[1].clone()).or_insert(Entry {
                    data: Data::Hash(BTreeMap::new()),
                    expires_at: None,
                });
                let Data::Hash(hash) = &mut entry.data else {
                    return Err(error(WRONGTYPE));
                };
                let mut added = 0;
                for pair in args[2..].chunks(2) {
                    added += i64::from(hash.insert(pair[0].clone(), pair[1].clone()).is_none());
                }
                Ok(Reply::Int(added))
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

    /// Removes the keys whose expiry time has come at the server's clock; answers them.
    fn expire(&mut self) -> Vec<Vec<u8>> {
        let now = self.now_us;
        let due: Vec<Vec<u8>> = self
            .keys
            .iter()
            .filter(|(_, e)| e.expires_at.is_some_and(|at| at <= now))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &due {
            self.keys.remove(k);
        }
        due
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

/// The arguments of a `redis.call` as Redis reads them: strings as they are, numbers formatted
/// (integers in full, as Redis 7.2 and later do and `%.17g` did below 10^17).
fn command_args(args: MultiValue) -> mlua::Result<Vec<Vec<u8>>> {
    if args.is_empty() {
        return Err(mlua::Error::external(error(
            "ERR Please specify at least one argument for this redis lib call",
        )));
    }
    args.into_iter()
        .map(|v| match v {
            LuaValue::String(s) => Ok(s.as_bytes().to_vec()),
            LuaValue::Integer(i) => Ok(i.to_string().into_bytes()),
            LuaValue::Number(f) => Ok(format!("{f:?}").into_bytes()),
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
        // `(long long)` of a double: truncated toward zero.
        LuaValue::Number(f) => Value::Int(*f as i64),
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
        let scripts = [
            script_entry::<TokenBucketKeys>(&lua),
            script_entry::<LeakyMeterKeys>(&lua),
            script_entry::<FixedWindowKeys>(&lua),
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

/// What the client sends after the mode and n (`interval, capacity, tick` for the GCRA,
/// `limit, window` for the fixed window), and the nanoseconds per tick of the reply's spans.
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

/// The fixed window's plan: the rules in process, then a whole number of microseconds up to
/// 2^52.
fn window_plan(quota: &Quota) -> Option<Plan> {
    KeyedLimiter::<u64, FixedWindowKeys, _>::with_algorithm(*quota, ManualClock::new()).ok()?;
    let period = u64::try_from(quota.period().as_nanos()).ok()?;
    let window = period / 1000;
    (period % 1000 == 0 && (1..=MAXD).contains(&window)).then(|| Plan {
        args: vec![quota.count(), window],
        tick: 1000,
    })
}

// --- the input ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alg {
    Bucket,
    Meter,
    Window,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `check_key_n`: the bucket's and window's take, the meter's strict admission (n = 0: a
    /// query).
    Take,
    /// `peek_key_n`.
    Peek,
    /// The meter's `schedule_key_n`.
    Schedule,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Forward(u64),
    Back(u64),
    /// To the earliest reading allowed.
    Earliest,
    /// To the latest reading allowed.
    Latest,
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
        kind: Kind,
        n: u64,
        /// The limiter that lets the script read `TIME` (else the one that sends its reading).
        server_time: bool,
    },
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
    /// A script call with ARGV[`at`] replaced by `with`.
    BadArgs {
        at: usize,
        with: Vec<u8>,
    },
}

#[derive(Debug)]
struct Sequence {
    alg: Alg,
    quota: Quota,
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

/// Digits, often at a bound a script checks.
fn number(u: &mut Unstructured<'_>, near: u64) -> Result<u64> {
    Ok(match u.int_in_range(0..=9u8)? {
        0 => 0,
        1 => 1,
        2 => 1000,
        3 => MAXD,
        4 => MAXD + 1,
        5 => LIMIT - 1,
        6 => LIMIT,
        7 => near,
        8 => u.int_in_range(0..=1_000_000)?,
        _ => u.arbitrary()?,
    })
}

/// Bytes that are often not digits.
fn garbage(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0..=7u8)? {
        0 => Vec::new(),
        1 => b"-1".to_vec(),
        2 => b"1.5".to_vec(),
        3 => b"1e3".to_vec(),
        4 => b" 1".to_vec(),
        5 => b"0x10".to_vec(),
        6 => "9".repeat(u.int_in_range(17..=400)?).into_bytes(),
        _ => u.arbitrary()?,
    })
}

fn field_value(u: &mut Unstructured<'_>, near: u64) -> Result<Vec<u8>> {
    Ok(if u.ratio(3u8, 4u8)? {
        number(u, near)?.to_string().into_bytes()
    } else {
        garbage(u)?
    })
}

/// A value at the key that this sequence's script did not write (or, rarely, a valid one).
fn foreign(u: &mut Unstructured<'_>, alg: Alg, near: u64) -> Result<Data> {
    let hash = |u: &mut Unstructured<'_>| -> Result<Data> {
        let mut h = BTreeMap::new();
        for field in ["i", "c", "w", "n"] {
            if u.ratio(3u8, 4u8)? {
                h.insert(field.as_bytes().to_vec(), field_value(u, near)?);
            }
        }
        for _ in 0..u.int_in_range(0..=2u8)? {
            h.insert(u.arbitrary()?, u.arbitrary()?);
        }
        Ok(Data::Hash(h))
    };
    Ok(match (alg, u.int_in_range(0..=5u8)?) {
        (Alg::Window, 0) => Data::Str(u.arbitrary()?),
        (Alg::Window, _) => hash(u)?,
        (_, 0) => hash(u)?,
        (_, 1) => Data::Str(u.arbitrary()?),
        (_, 2) => Data::Str(garbage(u)?),
        _ => {
            // Five fields, as a state has, each a number or not.
            let mut parts = Vec::new();
            for _ in 0..5 {
                parts.push(field_value(u, near)?);
            }
            let sep: &[u8] = if u.ratio(7u8, 8u8)? { b" " } else { b"  " };
            Data::Str(parts.join(sep))
        }
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
    Ok(match u.int_in_range(0..=15u8)? {
        0..=10 => Step::Forward(amount),
        11..=13 => Step::Back(amount),
        14 => Step::Earliest,
        _ => Step::Latest,
    })
}

fn kind(u: &mut Unstructured<'_>, alg: Alg) -> Result<Kind> {
    Ok(match u.int_in_range(0..=5u8)? {
        0..=2 => Kind::Take,
        3 => Kind::Peek,
        _ if alg == Alg::Meter => Kind::Schedule,
        _ => Kind::Take,
    })
}

fn op(
    u: &mut Unstructured<'_>,
    alg: Alg,
    quota: &Quota,
    unit_us: u64,
    burst_us: u64,
) -> Result<Op> {
    let capacity = quota.capacity();
    Ok(match u.int_in_range(0..=19u8)? {
        0..=5 => Op::Step(step(u, unit_us, burst_us)?),
        6..=15 => Op::Call {
            kind: kind(u, alg)?,
            n: amount(u, capacity)?,
            server_time: u.arbitrary()?,
        },
        16 | 17 => Op::Foreign {
            data: {
                let near = u.int_in_range(0..=MAX_READING)?;
                foreign(u, alg, near)?
            },
            kind: kind(u, alg)?,
            n: amount(u, capacity)?.min(capacity),
            server_time: u.arbitrary()?,
        },
        18 => Op::BadReading {
            reading: if u.arbitrary()? {
                BadReading::Server(u.int_in_range(LIMIT..=u64::MAX)?)
            } else if u.arbitrary()? {
                BadReading::Sent(u.int_in_range(LIMIT..=u64::MAX)?.to_string().into_bytes())
            } else {
                BadReading::Sent(garbage(u)?)
            },
            kind: kind(u, alg)?,
            n: amount(u, capacity)?.min(capacity),
        },
        _ => {
            let args = if alg == Alg::Window { 4 } else { 5 };
            let at = u.int_in_range(0..=args - 1)?;
            let with = if u.arbitrary()? {
                garbage(u)?
            } else if at == 0 {
                // Another algorithm's mode.
                u.choose(&["take", "peek", "strict", "speek", "schedule", "TAKE"])?
                    .as_bytes()
                    .to_vec()
            } else {
                number(u, capacity.saturating_add(1))?
                    .to_string()
                    .into_bytes()
            };
            Op::BadArgs { at, with }
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

/// A quota for the fixed window: windows from 1 us to 2^52 us, and a few the plan refuses.
fn window_quota(u: &mut Unstructured<'_>) -> Result<Option<Quota>> {
    let window_us = match u.int_in_range(0..=7u8)? {
        0 => u.int_in_range(1..=1_000)?,
        1 => u.int_in_range(1_000..=60_000_000)?,
        2 => *u.choose(&[1_000_000u64, 60_000_000, 3_600_000_000, 86_400_000_000])?,
        3 => u.int_in_range(1..=MAXD)?,
        4 => MAXD - u.int_in_range(0..=2)?,
        5 => MAXD + 1,
        _ => u.int_in_range(1..=MAXD + 10)?,
    };
    let remainder = if u.ratio(1u8, 16u8)? {
        u.int_in_range(1..=999)?
    } else {
        0
    };
    let count = match u.int_in_range(0..=3u8)? {
        0 | 1 => u.int_in_range(1..=20)?,
        2 => u.int_in_range(1..=1_000_000)?,
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
    let alg = *u.choose(&[Alg::Bucket, Alg::Meter, Alg::Window])?;
    let quota = match alg {
        Alg::Window => window_quota(u)?,
        _ => gcra_quota(u)?,
    };
    let Some(quota) = quota else {
        return Ok(None);
    };
    let (start, back) = start(u)?;
    let interval_us = (quota.interval().as_nanos() / 1000).max(1) as u64;
    let (unit_us, burst_us) = match alg {
        Alg::Window => {
            let w = (quota.period().as_nanos() / 1000).max(1) as u64;
            (w, w)
        }
        _ => (interval_us, interval_us.saturating_mul(quota.capacity())),
    };
    let len = u.int_in_range(0..=MAX_OPS)?;
    let mut ops = Vec::with_capacity(len);
    for _ in 0..len {
        if u.is_empty() {
            break;
        }
        ops.push(op(u, alg, &quota, unit_us, burst_us)?);
    }
    Ok(Some(Sequence {
        alg,
        quota,
        start,
        back,
        ops,
    }))
}

#[derive(Debug)]
struct Input {
    sequences: Vec<Sequence>,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut sequences = Vec::new();
        for _ in 0..u.int_in_range(1..=MAX_SEQUENCES)? {
            if let Some(s) = sequence(u)? {
                sequences.push(s);
            }
        }
        Ok(Input { sequences })
    }
}

// --- answers ------------------------------------------------------------------------------------------

/// An answer, reduced to what a caller can read; instants relative to the sequence's base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Admitted {
        remaining: u64,
        reset: Duration,
    },
    Denied {
        remaining: u64,
        retry: Duration,
        reset: Duration,
        retry_at: u64,
    },
    Scheduled {
        delay: Duration,
        queued: u64,
        remaining: u64,
        reset: Duration,
        depart_at: u64,
    },
    InsufficientCapacity,
}

impl Seen {
    fn admitted(a: &Admitted) -> Seen {
        Seen::Admitted {
            remaining: a.remaining(),
            reset: a.reset_after(),
        }
    }

    /// `base_ns` is subtracted from the instant (the server's clock is Unix time).
    fn denied(d: &Denied, base_ns: u64) -> Seen {
        Seen::Denied {
            remaining: d.remaining(),
            retry: d.retry_after(),
            reset: d.reset_after(),
            retry_at: d.retry_at().as_u64() - base_ns,
        }
    }

    fn scheduled(s: &Scheduled, base_ns: u64) -> Seen {
        Seen::Scheduled {
            delay: s.delay(),
            queued: s.queued(),
            remaining: s.remaining(),
            reset: s.reset_after(),
            depart_at: s.depart_at().as_u64() - base_ns,
        }
    }

    fn is_admitted(&self) -> bool {
        matches!(self, Seen::Admitted { .. } | Seen::Scheduled { .. })
    }

    fn reset(&self) -> Duration {
        match *self {
            Seen::Admitted { reset, .. }
            | Seen::Denied { reset, .. }
            | Seen::Scheduled { reset, .. } => reset,
            Seen::InsufficientCapacity => Duration::ZERO,
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
        match self {
            Seen::Admitted { remaining, .. } => Seen::Admitted {
                remaining,
                reset: limit,
            },
            Seen::Denied {
                remaining,
                retry,
                retry_at,
                ..
            } => Seen::Denied {
                remaining,
                retry: retry.saturating_sub(excess),
                reset: limit,
                retry_at: retry_at.saturating_sub(excess_ns),
            },
            Seen::Scheduled {
                delay,
                remaining,
                depart_at,
                ..
            } => Seen::Scheduled {
                delay: delay.saturating_sub(excess),
                queued: LIMIT.div_ceil(plan.args[0]),
                remaining,
                reset: limit,
                depart_at: depart_at.saturating_sub(excess_ns),
            },
            Seen::InsufficientCapacity => self,
        }
    }

    /// The fixed window's documented clamp: the end of a window more than 2^52 us ahead
    /// (`until_end` in the script) is answered as 2^52 us; `phase` is the reading's offset in
    /// its window, in us.
    fn clamp_window(self, window: u64, phase: u64) -> Seen {
        let clamp = |span: Duration| {
            let us = (span.as_nanos() / 1000) as u64;
            if span.is_zero() || (us + phase) / window <= MAXD / window {
                span
            } else {
                Duration::from_micros(MAXD)
            }
        };
        match self {
            Seen::Admitted { remaining, reset } => Seen::Admitted {
                remaining,
                reset: clamp(reset),
            },
            Seen::Denied {
                remaining,
                retry,
                reset,
                retry_at,
            } => {
                let clamped = clamp(retry);
                Seen::Denied {
                    remaining,
                    retry: clamped,
                    reset: clamp(reset),
                    retry_at: (i128::from(retry_at) - retry.as_nanos() as i128
                        + clamped.as_nanos() as i128) as u64,
                }
            }
            other => other,
        }
    }
}

/// The in-process limiter a sequence is compared with.
enum Reference {
    Bucket(KeyedLimiter<u64, TokenBucketKeys, ManualClock>),
    Meter(LeakyMeter<ManualClock>),
    Window(KeyedLimiter<u64, FixedWindowKeys, ManualClock>),
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

impl Reference {
    /// A limiter with no state, as a key Redis has never seen: full at every reading.
    fn new(alg: Alg, quota: Quota) -> Reference {
        match alg {
            Alg::Bucket => Reference::Bucket(KeyedLimiter::with_clock(quota, ManualClock::new())),
            Alg::Meter => Reference::Meter(LeakyMeter::with_clock(quota, ManualClock::new())),
            Alg::Window => Reference::Window(
                KeyedLimiter::with_algorithm(quota, ManualClock::new())
                    .expect("the plan accepted the quota, so the rules in process do"),
            ),
        }
    }

    fn answer(&self, kind: Kind, n: u64, now: Nanos) -> Seen {
        match (self, kind) {
            (Reference::Bucket(k), Kind::Take) => from_keyed(k.check_key_n_at(&1, n, now)),
            (Reference::Bucket(k), Kind::Peek) => from_keyed(k.peek_key_n_at(&1, n, now)),
            (Reference::Window(k), Kind::Take) => from_keyed(k.check_key_n_at(&1, n, now)),
            (Reference::Window(k), Kind::Peek) => from_keyed(k.peek_key_n_at(&1, n, now)),
            (Reference::Meter(m), Kind::Take) => {
                from_direct(m.try_acquire_n_at(n, now), Seen::admitted)
            }
            (Reference::Meter(m), Kind::Peek) => from_direct(m.peek_n_at(n, now), Seen::admitted),
            (Reference::Meter(m), Kind::Schedule) => {
                from_direct(m.try_schedule_n_at(n, now), |s| Seen::scheduled(s, 0))
            }
            (_, Kind::Schedule) => unreachable!("only the meter schedules"),
        }
    }
}

/// The Redis limiters of one sequence: one sends its reading, one lets the script read `TIME`.
enum Limiters {
    Bucket([RedisLimiter<TokenBucketKeys>; 2]),
    Meter([RedisLimiter<LeakyMeterKeys>; 2]),
    Window([RedisLimiter<FixedWindowKeys>; 2]),
}

/// The two limiters for `quota`, or the builder's refusal.
fn build<A: RedisAlgorithm>(
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

fn admission<A: RedisAlgorithm>(
    l: &RedisLimiter<A>,
    kind: Kind,
    n: u64,
) -> std::result::Result<Admitted, RedisError> {
    RUNTIME.block_on(async {
        match kind {
            Kind::Take => l.check_key_n(KEY, n).await,
            Kind::Peek => l.peek_key_n(KEY, n).await,
            Kind::Schedule => unreachable!("only the meter schedules"),
        }
    })
}

impl Limiters {
    /// The client's answer; `Err` for a call Redis could not decide.
    fn call(
        &self,
        kind: Kind,
        n: u64,
        server_time: bool,
        base_ns: u64,
    ) -> std::result::Result<Seen, tollgate::redis::Unavailable> {
        let i = usize::from(server_time);
        let result = match (self, kind) {
            (Limiters::Bucket(l), _) => admission(&l[i], kind, n).map(|a| Seen::admitted(&a)),
            (Limiters::Window(l), _) => admission(&l[i], kind, n).map(|a| Seen::admitted(&a)),
            (Limiters::Meter(l), Kind::Schedule) => RUNTIME
                .block_on(l[i].schedule_key_n(KEY, n))
                .map(|s| Seen::scheduled(&s, base_ns)),
            (Limiters::Meter(l), _) => admission(&l[i], kind, n).map(|a| Seen::admitted(&a)),
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
        (_, Kind::Take) if n > 0 => "take",
        _ => "peek",
    }
}

/// Whether a reading sent as ARGV is one the script accepts: digits, below 2^53.
fn reading_valid(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(u8::is_ascii_digit) && whole(s).is_some_and(|v| v < LIMIT as f64)
}

/// `tonumber` of digits, as the prelude's `whole` reads them (`None` for anything else).
fn whole(s: &[u8]) -> Option<f64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse::<f64>().ok()
}

/// Whether the GCRA accepts these arguments (ARGV[1..=5]), as `gcra.lua` checks them.
fn gcra_args_valid(alg: Alg, argv: &[Vec<u8>]) -> bool {
    let modes: &[&[u8]] = match alg {
        Alg::Bucket => &[b"take", b"peek"],
        _ => &[b"strict", b"speek", b"schedule"],
    };
    let [n, interval, capacity, tick] = [1, 2, 3, 4].map(|i| whole(&argv[i]));
    let (Some(n), Some(i), Some(c), Some(t)) = (n, interval, capacity, tick) else {
        return false;
    };
    modes.contains(&argv[0].as_slice())
        && i >= 1.0
        && c >= 1.0
        && n <= c
        && (t == 1.0 || t == 1000.0)
        && c * i <= MAXD as f64
}

/// Whether the fixed window accepts these arguments (ARGV[1..=4]).
fn window_args_valid(argv: &[Vec<u8>]) -> bool {
    let [n, limit, window] = [1, 2, 3].map(|i| whole(&argv[i]));
    let (Some(n), Some(l), Some(w)) = (n, limit, window) else {
        return false;
    };
    (argv[0] == b"take" || argv[0] == b"peek") && l >= 1.0 && n <= l && w >= 1.0 && w <= MAXD as f64
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
        *slot = whole(p)?;
    }
    Some(out)
}

fn expect_foreign(alg: Alg, data: &Data) -> Expect {
    match (alg, data) {
        (Alg::Window, Data::Str(_)) => Expect::WrongType,
        (_, Data::Hash(_)) if alg != Alg::Window => Expect::WrongType,
        (_, Data::Str(s)) => match gcra_state(s) {
            Some([base, off, i0, c0, tk0])
                if base < LIMIT as f64
                    && off <= MAXD as f64
                    && i0 >= 1.0
                    && c0 >= 1.0
                    && (tk0 == 1.0 || tk0 == 1000.0)
                    && c0 * i0 <= MAXD as f64 =>
            {
                Expect::Reply
            }
            _ => Expect::Foreign,
        },
        (_, Data::Hash(h)) => {
            let fields = ["i", "c", "w", "n"].map(|f| h.get(f.as_bytes()));
            if fields.iter().all(Option::is_none) {
                return Expect::Reply;
            }
            let [_, c, w, n] = fields.map(|f| f.and_then(|v| whole(v)));
            match (fields[0].and_then(|v| whole(v)), c, w, n) {
                (Some(_), Some(c), Some(w), Some(n))
                    if (1.0..=MAXD as f64).contains(&w) && c <= n =>
                {
                    Expect::Reply
                }
                _ => Expect::Foreign,
            }
        }
    }
}

// --- running a sequence ---------------------------------------------------------------------------------

struct Run<'a> {
    seq: &'a Sequence,
    plan: Plan,
    /// The quota the in-process reference enforces: the plan's exactly.
    reference_quota: Quota,
    reference: Reference,
    limiters: Limiters,
    clock: ManualClock,
    key: Vec<u8>,
    /// Readings stay in `lo..=hi`; in-process time is `(reading - lo) x 1000` ns.
    lo: u64,
    hi: u64,
    reading: u64,
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

impl Run<'_> {
    fn base_ns(&self) -> u64 {
        self.lo * 1000
    }

    fn now(&self) -> Nanos {
        Nanos::new((self.reading - self.lo) * 1000)
    }

    fn capacity(&self) -> u64 {
        self.seq.quota.capacity()
    }

    /// The script's mode and n, the plan's arguments and a reading, as ARGV.
    fn argv(&self, mode: &str, n: u64, reading: &[u8]) -> Vec<Vec<u8>> {
        let mut argv = vec![mode.as_bytes().to_vec(), n.to_string().into_bytes()];
        argv.extend(self.plan.args.iter().map(|a| a.to_string().into_bytes()));
        argv.push(reading.to_vec());
        argv
    }

    fn sha(&self) -> String {
        let source = match self.seq.alg {
            Alg::Bucket => script_source::<TokenBucketKeys>(),
            Alg::Meter => script_source::<LeakyMeterKeys>(),
            Alg::Window => script_source::<FixedWindowKeys>(),
        };
        redis::Script::new(source).get_hash().to_string()
    }

    fn entry(&self) -> Option<Entry> {
        with_server(|s| s.store.borrow().keys.get(&self.key).cloned())
    }

    /// Sets the server's clock to the reading and expires what is due; when the state expires,
    /// the in-process limiter must read as fresh, and is replaced by one with no state.
    fn tick(&mut self) {
        let expired = with_server(|s| {
            let mut store = s.store.borrow_mut();
            store.now_us = self.reading;
            store.expire()
        });
        if expired.contains(&self.key) {
            let fresh = self.reference.answer(Kind::Peek, 0, self.now());
            assert_eq!(
                fresh,
                Seen::Admitted {
                    remaining: self.capacity(),
                    reset: Duration::ZERO
                },
                "the state expired at {} us, when the in-process limiter is not fresh",
                self.reading
            );
            self.reference = Reference::new(self.seq.alg, self.reference_quota);
        }
    }

    fn take_evals(&self) -> Vec<Eval> {
        with_server(|s| std::mem::take(&mut s.evals))
    }

    /// The client's call, checked against the in-process limiter.
    fn call(&mut self, kind: Kind, n: u64, server_time: bool) {
        self.clock.set(Nanos::new(self.reading * 1000));
        let expected = self.reference.answer(kind, n, self.now());
        let got = self
            .limiters
            .call(kind, n, server_time, self.base_ns())
            .unwrap_or_else(|u| panic!("the script could not decide: {u}"));
        let evals = self.take_evals();
        if n > self.capacity() {
            assert_eq!(got, Seen::InsufficientCapacity);
            assert_eq!(expected, Seen::InsufficientCapacity);
            assert!(
                evals.is_empty(),
                "a request over the capacity reached the server"
            );
            return;
        }
        let [eval] = evals.as_slice() else {
            panic!("one call, {} EVALSHAs", evals.len());
        };
        let reading = if server_time {
            Vec::new()
        } else {
            self.reading.to_string().into_bytes()
        };
        assert_eq!(
            eval.argv,
            self.argv(mode(self.seq.alg, kind, n), n, &reading),
            "the client's ARGV"
        );
        assert_eq!(eval.keys, vec![self.key.clone()]);
        let clamped = match self.seq.alg {
            Alg::Window => {
                expected.clamp_window(self.plan.args[1], self.reading % self.plan.args[1])
            }
            _ => expected.clamp_gcra(&self.plan),
        };
        assert_eq!(
            got, clamped,
            "the script's answer (in process: {expected:?})"
        );
        let writes = got.is_admitted() && n > 0 && kind != Kind::Peek;
        if !writes {
            assert_eq!(eval.before, eval.after, "a denial, a peek or a query wrote");
            return;
        }
        // The in-process limiter's time until fresh, unclamped: the TTL must cover it.
        self.check_write(eval, server_time, got.reset(), Some(expected.reset()));
    }

    /// What an admission wrote: the state at the reading under the plan, and its TTL. `reset` is
    /// the script's answer; `fresh_in` the in-process limiter's time until fresh, if known.
    fn check_write(
        &self,
        eval: &Eval,
        server_time: bool,
        reset: Duration,
        fresh_in: Option<Duration>,
    ) {
        let entry = eval
            .after
            .get(&self.key)
            .expect("an admission wrote the state");
        // The span until the state reads as fresh, from the state itself.
        let fresh_us = match (&entry.data, self.seq.alg) {
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
                assert_eq!(v[0], self.reading, "the state's base is the reading");
                assert_eq!(
                    v[2..],
                    self.plan.args[..],
                    "the state's quota is the plan's"
                );
                let gap_ns = u128::from(v[1]) * u128::from(self.plan.tick);
                assert_eq!(
                    gap_ns,
                    reset.as_nanos(),
                    "the state's gap is the answer's reset"
                );
                gap_ns.div_ceil(1000)
            }
            (Data::Hash(h), Alg::Window) => {
                let field = |f: &str| -> u64 {
                    let v = h.get(f.as_bytes()).expect("a window state's field");
                    std::str::from_utf8(v).unwrap().parse().unwrap()
                };
                let (i, c, w, n) = (field("i"), field("c"), field("w"), field("n"));
                assert_eq!(
                    [w, n],
                    [self.plan.args[1], self.plan.args[0]],
                    "the state's quota"
                );
                assert!(c >= 1 && c <= n, "a count of {c} of {n}");
                assert!(
                    i >= self.reading / w,
                    "the state's window is before the reading's"
                );
                u128::from(i + 1) * u128::from(w) - u128::from(self.reading)
            }
            (data, alg) => panic!("{alg:?} wrote {data:?}"),
        };
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
        let ttl_ms = (reset.as_nanos().div_ceil(1_000_000) as u64).max(1);
        let expires_at = entry
            .expires_at
            .expect("a state written at the server's reading has a TTL");
        assert_eq!(
            expires_at,
            self.reading + ttl_ms * 1000,
            "the TTL is the reset rounded up to the millisecond"
        );
        assert!(
            u128::from(expires_at - self.reading) >= fresh_us,
            "the state expires in {} us, before it reads as fresh ({fresh_us} us)",
            expires_at - self.reading
        );
    }

    /// A foreign value at the key for one call, then the state put back.
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
        let got = self.limiters.call(kind, n, server_time, self.base_ns());
        let evals = self.take_evals();
        let [eval] = evals.as_slice() else {
            panic!("one call, {} EVALSHAs", evals.len());
        };
        match (expect_foreign(self.seq.alg, data), &got) {
            (Expect::Foreign, Err(u)) if u.kind() == UnavailableKind::ForeignValue => {}
            (Expect::WrongType, Err(u))
                if u.kind() == UnavailableKind::Server && u.detail().contains("WRONGTYPE") => {}
            (Expect::Reply, Ok(seen)) => {
                let writes = seen.is_admitted() && n > 0 && kind != Kind::Peek;
                if writes {
                    self.check_foreign_write(eval, data, server_time, seen.reset());
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

    /// A write over a valid state of another quota (or a hash without the window's fields).
    fn check_foreign_write(&self, eval: &Eval, data: &Data, server_time: bool, reset: Duration) {
        match (data, &eval.after.get(&self.key).expect("the state").data) {
            (Data::Hash(old), Data::Hash(new)) => {
                // Fields the script does not own are kept; its own are rewritten.
                for (k, v) in old {
                    if !["i", "c", "w", "n"].contains(&String::from_utf8_lossy(k).as_ref()) {
                        assert_eq!(
                            new.get(k),
                            Some(v),
                            "a field the script does not own changed"
                        );
                    }
                }
                let mut own = eval.clone();
                let entry = own.after.get_mut(&self.key).unwrap();
                entry.data = Data::Hash(
                    new.iter()
                        .filter(|(k, _)| {
                            ["i", "c", "w", "n"].contains(&String::from_utf8_lossy(k).as_ref())
                        })
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                );
                self.check_write(&own, server_time, reset, None);
            }
            _ => self.check_write(eval, server_time, reset, None),
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
        let argv = self.argv(mode(self.seq.alg, kind, n), n, &sent);
        let answer = with_server(|s| {
            s.store.borrow_mut().now_us = server_now;
            let answer = s.eval(&self.sha(), std::slice::from_ref(&self.key), &argv);
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
    fn bad_args(&mut self, at: usize, with: &[u8]) {
        let n = 1;
        let mode = mode(self.seq.alg, Kind::Take, n);
        let mut argv = self.argv(mode, n, self.reading.to_string().as_bytes());
        argv[at] = with.to_vec();
        let valid = match self.seq.alg {
            Alg::Window => window_args_valid(&argv),
            alg => gcra_args_valid(alg, &argv),
        };
        if valid {
            return;
        }
        let answer = with_server(|s| s.eval(&self.sha(), std::slice::from_ref(&self.key), &argv));
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
        };
    }
}

fn run(seq: &Sequence) {
    let plan = match seq.alg {
        Alg::Window => window_plan(&seq.quota),
        _ => gcra_plan(&seq.quota),
    };
    let clock = ManualClock::new();
    let limiters = match seq.alg {
        Alg::Bucket => build(seq.quota, &clock).map(Limiters::Bucket),
        Alg::Meter => build(seq.quota, &clock).map(Limiters::Meter),
        Alg::Window => build(seq.quota, &clock).map(Limiters::Window),
    };
    let (plan, limiters) = match (plan, limiters) {
        (Some(plan), Ok(limiters)) => (plan, limiters),
        (None, Err(_)) => return,
        (plan, limiters) => panic!(
            "the plan rules say {plan:?}, the builder {:?}, for {:?}",
            limiters.err(),
            seq.quota
        ),
    };
    // The quota the script enforces: the plan's interval, in nanoseconds.
    let reference_quota = match seq.alg {
        Alg::Window => seq.quota,
        _ if plan.tick == 1 || seq.quota.interval().as_nanos().is_multiple_of(1000) => seq.quota,
        _ => Quota::per_period(1, Duration::from_micros(plan.args[0]))
            .and_then(|q| q.with_capacity(seq.quota.capacity()))
            .expect("the plan's rounded quota is valid"),
    };
    let lo = match seq.alg {
        Alg::Window => (seq.start - seq.back) / plan.args[1] * plan.args[1],
        _ => seq.start - seq.back,
    };
    let hi = MAX_READING.min(lo + MAX_SPAN_US);
    let key = limiters.key();
    with_server(|s| {
        s.store.borrow_mut().keys.clear();
        s.evals.clear();
    });
    let mut run = Run {
        seq,
        plan,
        reference_quota,
        reference: Reference::new(seq.alg, reference_quota),
        limiters,
        clock,
        key,
        lo,
        hi,
        reading: seq.start.min(hi),
    };
    for op in &seq.ops {
        match op {
            Op::Step(s) => {
                run.step(*s);
                continue;
            }
            _ => run.tick(),
        }
        match op {
            Op::Step(_) => unreachable!(),
            Op::Call {
                kind,
                n,
                server_time,
            } => run.call(*kind, *n, *server_time),
            Op::Foreign {
                data,
                kind,
                n,
                server_time,
            } => run.foreign(data, *kind, *n, *server_time),
            Op::BadReading { reading, kind, n } => run.bad_reading(reading, *kind, *n),
            Op::BadArgs { at, with } => run.bad_args(*at, with),
        }
    }
}

fuzz_target!(|input: Input| {
    for seq in &input.sequences {
        run(seq);
    }
});
