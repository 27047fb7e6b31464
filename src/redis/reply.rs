//! The reply decoder: a script's answer, checked field by field, into the crate's outcomes.
//!
//! Every script answers `{admitted, now_us, level, unit, reset, wait, backlog, next}` as eight
//! integers (spans in the algorithm's ticks; `next`, the wait until one more is free, 0 when
//! nothing is taken). Anything else (another length, a string, a negative number, a zero unit, a
//! reading past 2^53 us) is a [`BadReply`](UnavailableKind::BadReply): no reply can cause a
//! panic.

use ::redis::Value;

use super::error::{Unavailable, UnavailableKind};
use crate::outcome::{Admitted, Denied, Headroom, Next, Scheduled, Span};

/// The largest reading a script answers with: 2^53 us.
const MAX_NOW_US: u64 = 1 << 53;

/// A script's answer, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) admitted: bool,
    /// The reading the decision used, in Unix microseconds.
    pub(crate) now_us: u64,
    pub(crate) level: u64,
    pub(crate) unit: u64,
    pub(crate) reset: u64,
    pub(crate) wait: u64,
    pub(crate) backlog: u64,
    /// Ticks until `remaining` would be one higher; 0 when nothing is taken.
    pub(crate) next: u64,
}

fn bad(detail: impl Into<String>) -> Unavailable {
    Unavailable::new(UnavailableKind::BadReply, detail)
}

/// Checks a script's reply.
pub(crate) fn decode(value: &Value) -> Result<Reply, Unavailable> {
    let Value::Array(items) = value else {
        return Err(bad(format!(
            "expected an array of 8 integers, got {value:?}"
        )));
    };
    if items.len() != 8 {
        return Err(bad(format!(
            "expected an array of 8 integers, got {} elements",
            items.len()
        )));
    }
    let mut fields = [0u64; 8];
    for (slot, item) in fields.iter_mut().zip(items) {
        *slot = match item {
            Value::Int(i) => u64::try_from(*i)
                .map_err(|_| bad(format!("expected a non-negative integer, got {i}")))?,
            other => return Err(bad(format!("expected an integer, got {other:?}"))),
        };
    }
    let [admitted, now_us, level, unit, reset, wait, backlog, next] = fields;
    if admitted > 1 {
        return Err(bad(format!(
            "expected 0 or 1 for the decision, got {admitted}"
        )));
    }
    if now_us >= MAX_NOW_US {
        return Err(bad(format!("a reading of {now_us} us, past 2^53")));
    }
    if unit == 0 {
        return Err(bad("a unit of 0"));
    }
    Ok(Reply {
        admitted: admitted == 1,
        now_us,
        level,
        unit,
        reset,
        wait,
        backlog,
        next,
    })
}

/// Checks the reply of the script over several limits: `count` replies of 8 integers each, one
/// after the other.
pub(crate) fn decode_many(value: &Value, count: usize) -> Result<Vec<Reply>, Unavailable> {
    let Value::Array(items) = value else {
        return Err(bad(format!(
            "expected an array of {count} x 8 integers, got {value:?}"
        )));
    };
    if count == 0 || Some(items.len()) != count.checked_mul(8) {
        return Err(bad(format!(
            "expected an array of {count} x 8 integers, got {} elements",
            items.len()
        )));
    }
    items
        .chunks(8)
        .map(|chunk| decode(&Value::Array(chunk.to_vec())))
        .collect()
}

impl Reply {
    /// `ticks` of `tick` ns as a span.
    fn span(ticks: u64, tick: u64) -> Span {
        Span::from_nanos(u128::from(ticks) * u128::from(tick))
    }

    /// The figures every outcome carries: `level` in `unit`s, full again after `reset` ticks of
    /// `tick` ns, one more after `next` ticks (0: nothing is taken).
    fn headroom(&self, tick: u64) -> Headroom {
        Headroom::new(
            self.level,
            self.unit,
            Reply::span(self.reset, tick),
            Next::nanos(u128::from(self.next) * u128::from(tick)),
        )
    }

    /// The reading in nanoseconds (below 2^53 x 1000 < 2^63).
    fn now_ns(&self) -> u64 {
        self.now_us * 1000
    }

    /// The answer of an admission, a peek or a query.
    pub(crate) fn outcome(&self, tick: u64) -> Result<Admitted, Denied> {
        if self.admitted {
            Ok(Admitted::new(self.headroom(tick)))
        } else {
            Err(self.denied(tick))
        }
    }

    /// The answer of a scheduling.
    pub(crate) fn scheduled(&self, tick: u64) -> Result<Scheduled, Denied> {
        if self.admitted {
            Ok(Scheduled::new(
                self.now_ns(),
                Reply::span(self.wait, tick),
                self.backlog,
                self.headroom(tick),
            ))
        } else {
            Err(self.denied(tick))
        }
    }

    fn denied(&self, tick: u64) -> Denied {
        Denied::new(
            self.now_ns(),
            Reply::span(self.wait, tick),
            self.headroom(tick),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ints(v: &[i64]) -> Value {
        Value::Array(v.iter().map(|&i| Value::Int(i)).collect())
    }

    #[test]
    fn an_admission_decodes_into_its_outcome() {
        let r = decode(&ints(&[1, 5, 900, 100, 100, 0, 100, 100])).unwrap();
        let ok = r.outcome(1000).unwrap();
        assert_eq!(ok.remaining(), 9);
        assert_eq!(ok.reset_after(), Duration::from_micros(100));
        assert_eq!(ok.next_after(), Some(Duration::from_micros(100)));
        // A `next` of 0: nothing is taken.
        let full = decode(&ints(&[1, 5, 1000, 100, 0, 0, 0, 0])).unwrap();
        assert_eq!(full.outcome(1000).unwrap().next_after(), None);
    }

    #[test]
    fn a_denial_is_on_the_servers_clock() {
        let r = decode(&ints(&[0, 2_000_000, 0, 7, 30, 10, 30, 10])).unwrap();
        let d = r.outcome(1).unwrap_err();
        assert_eq!(d.retry_after(), Duration::from_nanos(10));
        assert_eq!(d.retry_at().as_u64(), 2_000_000_000 + 10);
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.next_after(), Some(Duration::from_nanos(10)));
    }

    #[test]
    fn wrong_shapes_are_bad_replies() {
        for v in [
            Value::Nil,
            Value::Okay,
            ints(&[1, 2, 3]),
            ints(&[1, 2, 3, 4, 5, 6, 7]),
            ints(&[1, 2, 3, 4, 5, 6, 7, 8, 9]),
            ints(&[2, 0, 0, 1, 0, 0, 0, 0]),
            ints(&[1, -1, 0, 1, 0, 0, 0, 0]),
            ints(&[1, 0, 0, 1, 0, 0, 0, -1]),
            ints(&[1, 0, 0, 0, 0, 0, 0, 0]),
            ints(&[1, 1 << 53, 0, 1, 0, 0, 0, 0]),
            Value::Array(vec![Value::BulkString(b"1".to_vec()); 8]),
        ] {
            let err = decode(&v).unwrap_err();
            assert_eq!(err.kind(), UnavailableKind::BadReply, "{v:?}");
        }
    }

    #[test]
    fn several_replies_decode_one_per_limit() {
        let two = ints(&[1, 5, 900, 100, 100, 0, 100, 100, 0, 5, 0, 7, 30, 10, 30, 10]);
        let r = decode_many(&two, 2).unwrap();
        assert_eq!(r.len(), 2);
        assert!(r[0].admitted && !r[1].admitted);
        assert_eq!(r[1].wait, 10);
        for (v, count) in [
            (two.clone(), 1),
            (two.clone(), 3),
            (two.clone(), 0),
            (ints(&[]), 0),
            (Value::Nil, 1),
            (
                ints(&[1, 5, 900, 100, 100, 0, 100, 100, 2, 5, 0, 7, 30, 10, 30, 10]),
                2,
            ),
        ] {
            let err = decode_many(&v, count).unwrap_err();
            assert_eq!(err.kind(), UnavailableKind::BadReply, "{v:?} as {count}");
        }
    }

    #[test]
    fn the_largest_fields_do_not_overflow() {
        let r = decode(&ints(&[
            0,
            (1 << 53) - 1,
            i64::MAX,
            1,
            i64::MAX,
            i64::MAX,
            0,
            i64::MAX,
        ]))
        .unwrap();
        let d = r.outcome(1000).unwrap_err();
        assert!(d.retry_after() > Duration::from_secs(1 << 30));
        assert!(d.next_after() > Some(Duration::from_secs(1 << 30)));
        let s = decode(&ints(&[
            1,
            0,
            i64::MAX,
            1,
            i64::MAX,
            i64::MAX,
            i64::MAX,
            i64::MAX,
        ]))
        .unwrap()
        .scheduled(1000)
        .unwrap();
        assert!(s.delay() > Duration::from_secs(1 << 30));
    }
}
