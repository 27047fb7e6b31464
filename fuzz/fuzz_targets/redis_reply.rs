//! The Redis backend's reply decoder on arbitrary `redis::Value`s: never a panic, exactly the
//! documented shape accepted, and every field of an accepted reply read back as the crate's
//! outcomes say.
//!
//! A reply is accepted exactly when it is an array of 8 `Int`s, none negative, the first 0 or 1,
//! the second (the reading, in us) below 2^53 and the fourth (the unit) not 0
//! (`src/redis/reply.rs`); anything else is a `BadReply`. Each input decodes one value with both
//! decoders (an admission's and a scheduling's) at a tick of 1 ns, 1000 ns or any `u64`, and
//! requires:
//!
//! - accepted iff well-formed, by both decoders alike, every refusal of kind `BadReply`;
//! - an admission only from a first field of 1 (a denial from 0);
//! - every accessor of an accepted outcome (`remaining`, `reset_after`, `retry_after`,
//!   `retry_at`, `delay`, `depart_at`, `queued`, `next_after`) and its `Display` runs without a
//!   panic, and answers what the fields say, derived here on their own: `remaining = level /
//!   unit`, `queued = ceil(backlog / unit)`, spans `ticks x tick` ns saturating at `u64::MAX` ns,
//!   `retry_at = depart_at = now_us x 1000 + wait` ns, saturating; `next_after` is `None` for
//!   `next x tick = 0`, else that many ns, saturating at `3 x 2^62 - 3` ns.
//!
//! Values come from three generators: any value (nested arrays, maps, sets, attributes, pushes,
//! strings, doubles, booleans, big numbers, up to 4 levels and 64 nodes), a well-formed reply
//! with in-range fields and at most one mutation (a field of another type, one more or one fewer
//! element, a negative, a decision of 2, a reading of 2^53, a unit of 0), and RESP bytes as the
//! client's parser reads them (server errors included).

#![no_main]

use std::time::Duration;

use arbitrary::{Arbitrary, Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use redis::{PushKind, Value, VerbatimFormat};
use tollgate::redis::fuzzing::{decode_outcome, decode_scheduled};
use tollgate::redis::UnavailableKind;
use tollgate::Nanos;

/// The deepest nesting of generated values.
const MAX_DEPTH: u32 = 4;
/// The most nodes one generated value has.
const MAX_NODES: usize = 64;
/// The most elements of one generated array, map, set or push.
const MAX_LEN: usize = 9;
/// 2^53: the first reading (in us) a reply may not carry.
const MAX_NOW_US: u64 = 1 << 53;

/// An integer, often at a boundary the decoder checks.
fn int(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match u.int_in_range(0..=11u8)? {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => -1,
        4 => i64::MIN,
        5 => i64::MAX,
        6 => (MAX_NOW_US - 1) as i64,
        7 => MAX_NOW_US as i64,
        8 => u.int_in_range(0..=1_000_000)?,
        9 => u.int_in_range(-1_000..=-1)?,
        _ => u.arbitrary()?,
    })
}

/// Any value, nested up to `depth` more levels, using up `nodes`.
fn value(u: &mut Unstructured<'_>, depth: u32, nodes: &mut usize) -> Result<Value> {
    *nodes += 1;
    let nested = depth > 0 && *nodes < MAX_NODES;
    let kind = u.int_in_range(0..=if nested { 15u8 } else { 9 })?;
    Ok(match kind {
        0 => Value::Nil,
        1 | 2 => Value::Int(int(u)?),
        3 => Value::BulkString(u.arbitrary()?),
        4 => Value::SimpleString(u.arbitrary()?),
        5 => Value::Okay,
        6 => Value::Double(u.arbitrary()?),
        7 => Value::Boolean(u.arbitrary()?),
        8 => Value::BigNumber(u.arbitrary()?),
        9 => Value::VerbatimString {
            format: match u.int_in_range(0..=2u8)? {
                0 => VerbatimFormat::Text,
                1 => VerbatimFormat::Markdown,
                _ => VerbatimFormat::Unknown(u.arbitrary()?),
            },
            text: u.arbitrary()?,
        },
        10..=12 => Value::Array(values(u, depth - 1, nodes)?),
        13 => Value::Map(pairs(u, depth - 1, nodes)?),
        14 => Value::Set(values(u, depth - 1, nodes)?),
        _ => {
            if u.arbitrary()? {
                Value::Attribute {
                    data: Box::new(value(u, depth - 1, nodes)?),
                    attributes: pairs(u, depth - 1, nodes)?,
                }
            } else {
                Value::Push {
                    kind: match u.int_in_range(0..=2u8)? {
                        0 => PushKind::Message,
                        1 => PushKind::Invalidate,
                        _ => PushKind::Other(u.arbitrary()?),
                    },
                    data: values(u, depth - 1, nodes)?,
                }
            }
        }
    })
}

fn values(u: &mut Unstructured<'_>, depth: u32, nodes: &mut usize) -> Result<Vec<Value>> {
    // Eight elements as often as any other length: the one the decoder looks for.
    let len = match u.int_in_range(0..=3u8)? {
        0 => 8,
        _ => u.int_in_range(0..=MAX_LEN)?,
    };
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        if *nodes >= MAX_NODES {
            break;
        }
        out.push(value(u, depth, nodes)?);
    }
    Ok(out)
}

fn pairs(u: &mut Unstructured<'_>, depth: u32, nodes: &mut usize) -> Result<Vec<(Value, Value)>> {
    let len = u.int_in_range(0..=MAX_LEN / 2)?;
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        if *nodes >= MAX_NODES {
            break;
        }
        out.push((value(u, depth, nodes)?, value(u, depth, nodes)?));
    }
    Ok(out)
}

/// A field of a well-formed reply: small, at a tick boundary, or anywhere in `0..=max`.
fn field(u: &mut Unstructured<'_>, max: u64) -> Result<i64> {
    let v = match u.int_in_range(0..=5u8)? {
        0 => 0,
        1 => 1,
        2 => max,
        3 => u.int_in_range(0..=10_000)?,
        4 => u.int_in_range(0..=1u64 << 54)?,
        _ => u.arbitrary()?,
    };
    Ok(v.min(max) as i64)
}

/// A well-formed reply with in-range fields, then at most one mutation.
fn reply(u: &mut Unstructured<'_>) -> Result<Value> {
    let top = i64::MAX as u64;
    let mut fields = vec![
        u.int_in_range(0..=1i64)?,
        field(u, MAX_NOW_US - 1)?,
        field(u, top)?,
        field(u, top)?.max(1),
        field(u, top)?,
        field(u, top)?,
        field(u, top)?,
        field(u, top)?,
    ];
    let mut items: Vec<Value> = Vec::new();
    let at = u.int_in_range(0..=7usize)?;
    match u.int_in_range(0..=11u8)? {
        0 => fields[at] = u.int_in_range(i64::MIN..=-1)?,
        1 => fields[0] = u.int_in_range(2..=i64::MAX)?,
        2 => fields[1] = u.int_in_range(MAX_NOW_US as i64..=i64::MAX)?,
        3 => fields[3] = 0,
        4 => {
            fields.pop();
        }
        5 => fields.push(int(u)?),
        _ => {}
    }
    items.extend(fields.into_iter().map(Value::Int));
    if u.ratio(1u8, 6u8)? && !items.is_empty() {
        // A field as another type: a string of its digits, a double, a boolean, nil.
        let i = at.min(items.len() - 1);
        let Value::Int(v) = items[i] else {
            unreachable!("every item is an Int so far")
        };
        items[i] = match u.int_in_range(0..=4u8)? {
            0 => Value::BulkString(v.to_string().into_bytes()),
            1 => Value::SimpleString(v.to_string()),
            2 => Value::Double(v as f64),
            3 => Value::Boolean(v != 0),
            _ => Value::Nil,
        };
    }
    Ok(Value::Array(items))
}

/// One input: a value and the tick its spans are decoded in.
#[derive(Debug)]
struct Input {
    value: Value,
    tick: u64,
}

impl<'a> Arbitrary<'a> for Input {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let tick = match u.int_in_range(0..=3u8)? {
            0 => 1,
            1 => 1000,
            _ => u.arbitrary()?,
        };
        let value = match u.int_in_range(0..=3u8)? {
            0 => {
                let mut nodes = 0;
                value(u, MAX_DEPTH, &mut nodes)?
            }
            1 | 2 => reply(u)?,
            _ => {
                // RESP bytes, as the client's parser reads them; what it cannot parse is no reply.
                let bytes: Vec<u8> = u.arbitrary()?;
                redis::parse_redis_value(&bytes).unwrap_or(Value::Nil)
            }
        };
        Ok(Input { value, tick })
    }
}

/// The fields of a well-formed reply (see the module docs), or `None`.
fn well_formed(value: &Value) -> Option<[u64; 8]> {
    let Value::Array(items) = value else {
        return None;
    };
    if items.len() != 8 {
        return None;
    }
    let mut fields = [0u64; 8];
    for (slot, item) in fields.iter_mut().zip(items) {
        let Value::Int(i) = item else {
            return None;
        };
        *slot = u64::try_from(*i).ok()?;
    }
    let ok = fields[0] <= 1 && fields[1] < MAX_NOW_US && fields[3] != 0;
    ok.then_some(fields)
}

/// `ticks` of `tick` ns, saturating at `u64::MAX` ns.
fn span(ticks: u64, tick: u64) -> Duration {
    let nanos = u128::from(ticks) * u128::from(tick);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// `next` ticks of `tick` ns as `next_after` reports them: `None` for none, saturating at
/// `3 x 2^62 - 3` ns.
fn next_span(next: u64, tick: u64) -> Option<Duration> {
    let nanos = u128::from(next) * u128::from(tick);
    let max = (3u128 << 62) - 3;
    (nanos > 0).then(|| Duration::from_nanos(u64::try_from(nanos.min(max)).unwrap_or(u64::MAX)))
}

/// `now_us` in ns plus `wait` (saturating at `u64::MAX`).
fn instant(now_us: u64, wait: Duration) -> Nanos {
    let at = u128::from(now_us) * 1000 + wait.as_nanos();
    Nanos::new(u64::try_from(at).unwrap_or(u64::MAX))
}

fuzz_target!(|input: Input| {
    let Input { value, tick } = &input;
    let tick = *tick;
    let outcome = decode_outcome(value, tick);
    let scheduled = decode_scheduled(value, tick);
    let expected = well_formed(value);
    match (&outcome, &scheduled) {
        (Err(a), Err(b)) => {
            assert!(expected.is_none(), "a well-formed reply refused: {a}");
            for e in [a, b] {
                assert_eq!(e.kind(), UnavailableKind::BadReply, "{e}");
                let _ = (e.to_string(), format!("{e:?}"));
            }
            return;
        }
        (Ok(_), Ok(_)) => {}
        _ => panic!("the two decoders disagree on {value:?}: {outcome:?} vs {scheduled:?}"),
    }
    let Some([admitted, now_us, level, unit, reset, wait, backlog, next]) = expected else {
        panic!("a reply of another shape accepted: {value:?} as {outcome:?}");
    };
    let remaining = level / unit;
    let reset = span(reset, tick);
    let wait = span(wait, tick);
    let next = next_span(next, tick);
    match (outcome.unwrap(), scheduled.unwrap()) {
        (Ok(a), Ok(s)) => {
            assert_eq!(admitted, 1, "an admission from {value:?}");
            let _ = (a.to_string(), s.to_string());
            assert_eq!(a.remaining(), remaining);
            assert_eq!(a.reset_after(), reset);
            assert_eq!(s.remaining(), remaining);
            assert_eq!(s.reset_after(), reset);
            assert_eq!(s.delay(), wait);
            assert_eq!(s.depart_at(), instant(now_us, wait));
            assert_eq!(s.queued(), backlog.div_ceil(unit));
            assert_eq!(a.next_after(), next);
            assert_eq!(s.next_after(), next);
        }
        (Err(a), Err(b)) => {
            assert_eq!(admitted, 0, "a denial from {value:?}");
            assert_eq!(a, b, "the two decoders' denials differ");
            let _ = (a.to_string(), format!("{a:?}"));
            assert_eq!(a.remaining(), remaining);
            assert_eq!(a.reset_after(), reset);
            assert_eq!(a.retry_after(), wait);
            assert_eq!(a.retry_at(), instant(now_us, wait));
            assert_eq!(a.next_after(), next);
        }
        (a, s) => panic!("the two decoders disagree on {value:?}: {a:?} vs {s:?}"),
    }
});
