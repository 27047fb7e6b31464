//! The `RateLimit-Policy` and `RateLimit` fields of draft-ietf-httpapi-ratelimit-headers-10, and
//! `Retry-After`: how their values are written.
//!
//! Each field is an RFC 9651 List of one member per policy: the policy's name as an sf-string,
//! then its parameters. A policy's member is the same on every response, so it is written once
//! when the layer is built; the `RateLimit` member changes per response and is written into a
//! buffer on the stack, then copied once into a header value cut from a per-thread buffer, which
//! allocates nothing per response ([`cut_value`]).

use std::cell::RefCell;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use http::HeaderValue;

use crate::quota::Quota;

/// The longest policy name accepted, in bytes: a name is sent on every response.
pub const MAX_POLICY_NAME: usize = 64;

/// A policy name that is not a printable-ASCII string of 1 to [`MAX_POLICY_NAME`] bytes.
///
/// # Examples
///
/// ```
/// use tollgate::middleware::{LayerError, LimitLayer};
/// use tollgate::{ManualClock, Quota, TokenBucket};
/// let bucket = TokenBucket::with_clock(Quota::per_second(1)?, ManualClock::new());
/// let LayerError::PolicyName(err) = LimitLayer::global(bucket).policy_name("café").build().unwrap_err() else {
///     unreachable!()
/// };
/// assert_eq!(err.name(), "café");
/// assert!(err.to_string().contains("printable ASCII"));
/// # Ok::<(), tollgate::QuotaError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyNameError {
    name: String,
}

impl PolicyNameError {
    pub(crate) fn new(name: &str) -> PolicyNameError {
        PolicyNameError { name: name.into() }
    }

    /// The name refused.
    ///
    /// # Examples
    ///
    /// See [`PolicyNameError`].
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for PolicyNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy_name {:?}: a policy name is 1 to {MAX_POLICY_NAME} bytes of printable ASCII \
             (0x20 to 0x7e), sent as an RFC 9651 string",
            self.name
        )
    }
}

impl std::error::Error for PolicyNameError {}

/// A policy name written as an sf-string: quoted, with `"` and `\` escaped.
pub(crate) fn sf_string(name: &str) -> Result<String, PolicyNameError> {
    let printable = name.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if name.is_empty() || name.len() > MAX_POLICY_NAME || !printable {
        return Err(PolicyNameError::new(name));
    }
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    Ok(out)
}

/// The quota as the draft's `q` and `w`: `w` is the period in whole seconds, rounded up, and
/// `q = floor(count * w / period)`, so a period that is not whole seconds is scaled to the next
/// whole `w` without advertising more than the limiter allows. `w` is at least 1.
pub(crate) fn quota_and_window(quota: &Quota) -> (u64, u64) {
    let period = quota.period().as_nanos().max(1);
    let w = period.div_ceil(1_000_000_000).max(1);
    // count * w * 10^9 / period, without the product (which can pass u128 for quotas both
    // huge and slow): w * 10^9 = period + r with r < 10^9, so q = count + count * r / period.
    let count = u128::from(quota.count());
    let r = w * 1_000_000_000 - period;
    let q = count + count * r / period;
    (
        u64::try_from(q).unwrap_or(u64::MAX),
        u64::try_from(w).unwrap_or(u64::MAX),
    )
}

/// The `RateLimit-Policy` member of one policy: `"name";q=100;w=60`, with `qu="content-bytes"`
/// when the cost is the body's length, and `tollgate-burst=C` when the capacity is not the count.
pub(crate) fn policy_member(name: &str, quota: &Quota, content_bytes: bool) -> String {
    let (q, w) = quota_and_window(quota);
    let mut out = format!("{name};q={q}");
    if content_bytes {
        out.push_str(";qu=\"content-bytes\"");
    }
    out.push_str(&format!(";w={w}"));
    if quota.capacity() != quota.count() {
        out.push_str(&format!(";tollgate-burst={}", quota.capacity()));
    }
    out
}

/// The most distinct `RateLimit-Policy` values interned per process (see [`policy_value`]).
const MAX_INTERNED: usize = 1024;

/// The `RateLimit-Policy` value of `member`, or `None` unless every byte is printable ASCII
/// (0x20 to 0x7e). RFC 9651 strings are ASCII, and that range is what `http` accepts as a field
/// value in every 1.x release (1.6 narrowed `HeaderValue::from_str` to it; earlier releases also
/// took bytes from 0x80 up), so the answer does not depend on which release a build resolves. Every
/// response the layer admits carries it, so it is interned: the first layer built with a given
/// value keeps one copy for the life of the process, and every clone of it is then a copy of a
/// pointer rather than an atomic reference count that every core's requests contend on. At most
/// [`MAX_INTERNED`] distinct values are kept (a few dozen bytes each); past that, a layer's value
/// is its own, shared by reference count.
pub(crate) fn policy_value(member: &str) -> Option<HeaderValue> {
    static INTERNED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    interned_value(&INTERNED, member)
}

/// [`policy_value`] on the table `table`.
fn interned_value(table: &Mutex<Vec<&'static str>>, member: &str) -> Option<HeaderValue> {
    // Every member the layer builds is printable ASCII (names are checked sf-strings, the rest
    // digits and fixed text), and `from_static` accepts nothing else (it panics): anything outside
    // that range is refused here, never handed to a parser whose rule moved between releases.
    if !member.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    // A poisoned lock only means another thread panicked while pushing: the list is still valid.
    let mut interned = table.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&value) = interned.iter().find(|v| **v == member) {
        return Some(HeaderValue::from_static(value));
    }
    if interned.len() >= MAX_INTERNED {
        // Printable ASCII (checked above), which `from_bytes` accepts in every 1.x release.
        return HeaderValue::from_bytes(member.as_bytes()).ok();
    }
    let value: &'static str = Box::leak(member.to_owned().into_boxed_str());
    interned.push(value);
    Some(HeaderValue::from_static(value))
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// `Retry-After`: the wait rounded up to whole seconds, at least 1, and never earlier than the
/// `RateLimit` field's `t` (the draft's rule).
pub(crate) fn retry_after_secs(retry: Duration, t: Option<u64>) -> u64 {
    ceil_secs(retry).max(1).max(t.unwrap_or(0))
}

/// A small buffer on the stack for one field value (spilling to the heap for long ones), so that
/// writing a `RateLimit` member costs no allocation: the value is then cut from the thread's
/// buffer ([`cut_value`]).
pub(crate) struct FieldBuf {
    bytes: [u8; 128],
    len: usize,
    spill: Vec<u8>,
}

impl FieldBuf {
    pub(crate) fn new() -> FieldBuf {
        FieldBuf {
            bytes: [0; 128],
            len: 0,
            spill: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, s: &[u8]) {
        if self.spill.is_empty() && self.len + s.len() <= self.bytes.len() {
            self.bytes[self.len..self.len + s.len()].copy_from_slice(s);
            self.len += s.len();
        } else {
            if self.spill.is_empty() {
                self.spill.extend_from_slice(&self.bytes[..self.len]);
            }
            self.spill.extend_from_slice(s);
        }
    }

    /// Writes `n` in decimal.
    pub(crate) fn push_u64(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            // `n % 10` is below 10.
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[i..]);
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        if self.spill.is_empty() {
            &self.bytes[..self.len]
        } else {
            &self.spill
        }
    }

    /// The header value, cut from this thread's buffer ([`cut_value`]): no allocation once the
    /// buffer is there. Every byte written is printable ASCII (names are checked when the layer is
    /// built, numbers are digits), so this does not fail; should it, the field is left out rather
    /// than a request failed.
    pub(crate) fn header_value(&self) -> Option<HeaderValue> {
        cut_value(self.as_bytes())
    }
}

/// The bytes of one of a thread's two buffers of field values ([`cut_value`]): about 80
/// `RateLimit` values.
const VALUES_BUFFER: usize = 2048;

thread_local! {
    /// This thread's buffers of field values, the one being cut and the one before it: each value
    /// is copied in and cut off as a `Bytes` that shares its buffer by a reference count, so
    /// building one allocates nothing.
    static VALUES: RefCell<(BytesMut, BytesMut)> =
        RefCell::new((BytesMut::new(), BytesMut::new()));
}

/// `bytes` as a header value, cut from this thread's buffer: the `RateLimit` value differs from
/// one response to the next (`r` counts down), so no cache of built values would hit, and a
/// value of its own costs an allocation and a free per response. A cut value shares its buffer
/// (one reference count, moved on this thread unless the response is dropped on another). When
/// the buffer is used up, the one before it is reused in place if every value cut from it is
/// gone (the responses of a buffer ago, long sent), else a new one is taken: two allocations
/// (the buffer and its count) per ~80 values at worst, none in the steady state. A value kept
/// after its response (a clone of the header map, say) keeps its buffer, [`VALUES_BUFFER`]
/// bytes, alive.
/// Values longer than an eighth of a buffer (a long `pk`), and any built while the thread's
/// locals are being destroyed, are allocated on their own.
pub(crate) fn cut_value(bytes: &[u8]) -> Option<HeaderValue> {
    if bytes.len() <= VALUES_BUFFER / 8 {
        let cut = VALUES.try_with(|buffers| {
            let mut buffers = buffers.try_borrow_mut().ok()?;
            let (buffer, before) = &mut *buffers;
            if buffer.capacity() < bytes.len() {
                // The used-up buffer waits a turn for its last responses to be sent.
                std::mem::swap(buffer, before);
                if !buffer.try_reclaim(VALUES_BUFFER) {
                    *buffer = BytesMut::with_capacity(VALUES_BUFFER);
                }
            }
            buffer.extend_from_slice(bytes);
            Some(buffer.split().freeze())
        });
        if let Ok(Some(cut)) = cut {
            return HeaderValue::from_maybe_shared(cut).ok();
        }
    }
    HeaderValue::from_bytes(bytes).ok()
}

/// The `RateLimit` member of one policy: `"name";r=5;t=30` (`t` left out when nothing is taken),
/// with `;pk=:<base64>:` (an sf-binary) when a partition key is given.
pub(crate) fn write_ratelimit(
    buf: &mut FieldBuf,
    name: &str,
    remaining: u64,
    t: Option<u64>,
    pk: Option<&[u8]>,
) {
    buf.push(name.as_bytes());
    buf.push(b";r=");
    buf.push_u64(remaining);
    if let Some(t) = t {
        buf.push(b";t=");
        buf.push_u64(t);
    }
    if let Some(pk) = pk {
        buf.push(b";pk=:");
        write_base64(buf, pk);
        buf.push(b":");
    }
}

/// `bytes` in base64 with padding (RFC 4648 section 4), as RFC 9651's byte sequences are.
fn write_base64(buf: &mut FieldBuf, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let sextet = |v: u32, shift: u32| ALPHABET[((v >> shift) & 63) as usize];
    for chunk in bytes.chunks(3) {
        let v = chunk
            .iter()
            .enumerate()
            .fold(0u32, |v, (i, &b)| v | u32::from(b) << (16 - 8 * i));
        let out = [sextet(v, 18), sextet(v, 12), sextet(v, 6), sextet(v, 0)];
        let kept = chunk.len() + 1;
        buf.push(&out[..kept]);
        buf.push(&b"=="[..4 - kept]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_values_are_interned_once_and_checked() {
        let member = "\"interned-test\";q=5;w=60";
        let a = policy_value(member).unwrap();
        let b = policy_value(member).unwrap();
        assert_eq!(a, member);
        // The same interned bytes, not two copies.
        assert_eq!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
        // Not printable ASCII: refused, whichever `http` 1.x release the build resolved (control
        // bytes, DEL, and bytes from 0x80 up, which `from_str` took before 1.6 and refuses since).
        for bad in [
            "\"bad\nname\"",
            "\"tab\there\"",
            "\"del\u{7f}\"",
            "\"caf\u{e9}\"",
        ] {
            assert!(policy_value(bad).is_none(), "{bad:?}");
        }
        // The whole printable range is accepted, space and the sf-string escapes included.
        let all: String = (0x20u8..0x7f).map(char::from).collect();
        assert_eq!(policy_value(&all).unwrap(), all.as_str());
    }

    #[test]
    fn interning_stops_at_its_bound_and_values_stay_right() {
        // A table of its own, so that the process's stays below its bound for the other tests.
        let table = Mutex::new(Vec::new());
        for i in 0..MAX_INTERNED {
            let member = format!("\"bound-{i}\";q={i};w=1");
            let (a, b) = (
                interned_value(&table, &member).unwrap(),
                interned_value(&table, &member).unwrap(),
            );
            assert!(a == member.as_str() && b == member.as_str());
            assert_eq!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
        }
        // The table is full now: a new value is the layer's own, a fresh copy each time.
        let member = "\"past-the-bound\";q=1;w=1";
        let (a, b) = (
            interned_value(&table, member).unwrap(),
            interned_value(&table, member).unwrap(),
        );
        assert!(a == member && b == member);
        assert_ne!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
    }

    #[test]
    fn names_are_quoted_and_escaped_and_checked() {
        assert_eq!(sf_string("default").unwrap(), "\"default\"");
        assert_eq!(sf_string(r#"a"b\c"#).unwrap(), r#""a\"b\\c""#);
        for bad in ["", "tab\there", "é", &"x".repeat(MAX_POLICY_NAME + 1)] {
            assert_eq!(sf_string(bad).unwrap_err().name(), bad);
        }
        assert!(sf_string(&"x".repeat(MAX_POLICY_NAME)).is_ok());
    }

    #[test]
    fn whole_second_periods_are_sent_as_they_are() {
        let q = Quota::per_minute(100).unwrap();
        assert_eq!(quota_and_window(&q), (100, 60));
        assert_eq!(
            policy_member("\"default\"", &q, false),
            "\"default\";q=100;w=60"
        );
    }

    #[test]
    fn other_periods_scale_to_the_next_whole_second_without_advertising_more() {
        // 10 per 500 ms: 20 per second.
        let q = Quota::per_period(10, Duration::from_millis(500)).unwrap();
        assert_eq!(quota_and_window(&q), (20, 1));
        // 3 per 1.5 s: w = 2, q = floor(3 * 2 / 1.5) = 4.
        let q = Quota::per_period(3, Duration::from_millis(1500)).unwrap();
        assert_eq!(quota_and_window(&q), (4, 2));
        // 7 per 2.9 s: w = 3, q = floor(7 * 3 / 2.9) = 7 (7.24 rounds down).
        let q = Quota::per_period(7, Duration::from_millis(2900)).unwrap();
        assert_eq!(quota_and_window(&q), (7, 3));
        // The fastest quota accepted: w = 1 and q is the count per second.
        let q = Quota::per_period(1, Duration::from_nanos(1)).unwrap();
        assert_eq!(quota_and_window(&q), (1_000_000_000, 1));
        // Huge and slow (count * w * 10^9 would pass u128): still exact.
        let n = 2_000_000_000_000_000;
        let q = Quota::per_period(n, Duration::from_secs(n)).unwrap();
        assert_eq!(quota_and_window(&q), (n, n));
        let n = 1_000_000_000_000_000;
        let q = Quota::per_period(n, Duration::new(n / 2 - 1, 500_000_000)).unwrap();
        // w = n / 2, and q = floor(n * (n / 2) / (n / 2 - 0.5)) = floor(n + n / (n - 1)) = n + 1.
        assert_eq!(quota_and_window(&q), (n + 1, n / 2));
    }

    #[test]
    fn a_burst_and_a_byte_unit_are_parameters() {
        let q = Quota::per_minute(30).unwrap().with_capacity(5).unwrap();
        assert_eq!(
            policy_member("\"ip\"", &q, true),
            "\"ip\";q=30;qu=\"content-bytes\";w=60;tollgate-burst=5"
        );
    }

    #[test]
    fn retry_after_is_whole_seconds_at_least_one_and_not_before_t() {
        assert_eq!(retry_after_secs(Duration::ZERO, None), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1), None), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(1001), None), 2);
        assert_eq!(retry_after_secs(Duration::from_secs(3), Some(30)), 30);
        assert_eq!(retry_after_secs(Duration::MAX, None), u64::MAX);
    }

    #[test]
    fn the_buffer_spills_long_values_and_writes_numbers() {
        let mut buf = FieldBuf::new();
        write_ratelimit(&mut buf, "\"default\"", 0, Some(30), None);
        assert_eq!(buf.as_bytes(), b"\"default\";r=0;t=30");
        let mut buf = FieldBuf::new();
        let long = format!("\"{}\"", "n".repeat(MAX_POLICY_NAME));
        write_ratelimit(&mut buf, &long, u64::MAX, None, None);
        write_ratelimit(&mut buf, ", ", 1, Some(u64::MAX), None);
        let text = String::from_utf8(buf.as_bytes().to_vec()).unwrap();
        assert_eq!(text, format!("{long};r={}, ;r=1;t={}", u64::MAX, u64::MAX));
        assert!(buf.header_value().is_some());
    }

    #[test]
    fn partition_keys_are_base64_byte_sequences() {
        for (bytes, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"fooba", "Zm9vYmE="),
            (b"foobar", "Zm9vYmFy"),
            (&[0xff, 0xfe, 0x00], "//4A"),
        ] {
            let mut buf = FieldBuf::new();
            write_ratelimit(&mut buf, "\"p\"", 1, None, Some(bytes));
            assert_eq!(
                String::from_utf8(buf.as_bytes().to_vec()).unwrap(),
                format!("\"p\";r=1;pk=:{text}:")
            );
        }
    }
}
