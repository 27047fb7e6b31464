//! The text form of a [`Quota`] (`"100/s"`, `"20/min, burst 5"`): [`FromStr`], [`fmt::Display`],
//! [`QuotaParseError`], and with the `serde` feature `Serialize` and `Deserialize` as that string.
//!
//! The grammar and its choices are documented on [`Quota`] ("Text form"). A small hand-written
//! parser: the input is split at commas into the rate and its clauses, each part trimmed, and every
//! number accumulated with checked arithmetic, so no input panics or allocates more than its error.

use std::error::Error;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::{Quota, QuotaError};

/// The accepted form, appended to every syntax error.
const FORM: &str =
    "expected <count>/[<n>]<unit>[, burst <n>][, initial <n>] with units ns, us, ms, s, min, h, d";

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The units `Display` prints, largest first: the largest that divides the period is chosen.
const PRINTED_UNITS: [(&str, u128); 7] = [
    ("d", 86_400 * NANOS_PER_SEC),
    ("h", 3_600 * NANOS_PER_SEC),
    ("min", 60 * NANOS_PER_SEC),
    ("s", NANOS_PER_SEC),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// The length of a period unit in nanoseconds, for every spelling the parser accepts. Lower case
/// only: `M` and `MS` would be ambiguous (month? minute? megasecond?), so they are refused.
fn unit_nanos(unit: &str) -> Option<u128> {
    Some(match unit {
        "ns" | "nsec" | "nsecs" | "nanosecond" | "nanoseconds" => 1,
        // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU both appear in the wild.
        "us" | "\u{b5}s" | "\u{3bc}s" | "usec" | "usecs" | "microsecond" | "microseconds" => 1_000,
        "ms" | "msec" | "msecs" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => NANOS_PER_SEC,
        "m" | "min" | "mins" | "minute" | "minutes" => 60 * NANOS_PER_SEC,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600 * NANOS_PER_SEC,
        "d" | "day" | "days" => 86_400 * NANOS_PER_SEC,
        _ => return None,
    })
}

impl fmt::Display for Quota {
    /// The text form: `<count>/[<n>]<unit>`, then `, burst <capacity>` when the capacity is not the
    /// count and `, initial <n>` when an initial fill was set. The unit is the largest of `d`, `h`,
    /// `min`, `s`, `ms`, `us`, `ns` that divides the period, and `<n>` is left out when it is 1.
    /// Parsing the output gives back an equal `Quota`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// assert_eq!(Quota::per_second(100)?.to_string(), "100/s");
    /// assert_eq!(Quota::per_minute(20)?.with_capacity(5)?.to_string(), "20/min, burst 5");
    /// let q = Quota::per_period(5, Duration::from_secs(90))?.with_initial(0)?;
    /// assert_eq!(q.to_string(), "5/90s, initial 0");
    /// assert_eq!(q.to_string().parse::<Quota>(), Ok(q));
    /// # Ok::<(), tollgate::QuotaError>(())
    /// ```
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.period.as_nanos();
        // "ns" divides every period, so the fallback is never taken.
        let (unit, unit_nanos) = PRINTED_UNITS
            .iter()
            .copied()
            .find(|&(_, unit_nanos)| nanos.is_multiple_of(unit_nanos))
            .unwrap_or(("ns", 1));
        let units = nanos / unit_nanos;
        write!(f, "{}/", self.count)?;
        if units != 1 {
            write!(f, "{units}")?;
        }
        f.write_str(unit)?;
        if self.capacity != self.count {
            write!(f, ", burst {}", self.capacity)?;
        }
        if let Some(initial) = self.initial {
            write!(f, ", initial {initial}")?;
        }
        Ok(())
    }
}

impl FromStr for Quota {
    type Err = QuotaParseError;

    /// Parses the text form (see [`Quota`], "Text form").
    ///
    /// # Errors
    ///
    /// [`QuotaParseError`], naming the part that is wrong ([`QuotaParseError::part`]): a syntax
    /// error with the accepted form, or a value out of range with the [`QuotaError`] the
    /// constructors return ([`QuotaParseError::quota_error`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::Quota;
    ///
    /// let q: Quota = "20/min, burst 5".parse()?;
    /// assert_eq!(q, Quota::per_minute(20)?.with_capacity(5)?);
    /// let q: Quota = "3 / 250 ms, initial 0".parse()?;
    /// assert_eq!(q, Quota::per_period(3, Duration::from_millis(250))?.with_initial(0)?);
    ///
    /// let err = "10/fortnight".parse::<Quota>().unwrap_err();
    /// assert_eq!(err.part(), "period unit");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn from_str(s: &str) -> Result<Quota, QuotaParseError> {
        parse(s).map_err(|(part, reason)| QuotaParseError {
            input: s.to_owned(),
            part,
            reason,
        })
    }
}

/// A refusal before the [`QuotaParseError`] around it is built: the part and why.
type Refusal = (&'static str, Reason);

fn syntax(part: &'static str, message: String) -> Refusal {
    (part, Reason::Syntax(message))
}

fn parse(s: &str) -> Result<Quota, Refusal> {
    if s.trim().is_empty() {
        return Err(syntax("quota", "the string is empty".to_owned()));
    }
    let mut parts = s.split(',');
    // `split` yields at least one part, even of an empty string.
    let rate = parts.next().unwrap_or("");
    let Some((count, period)) = rate.split_once('/') else {
        if s.contains('/') {
            return Err(syntax(
                "count",
                format!(
                    "count {:?} is followed by \",\" before the \"/\" (write thousands as 1_000)",
                    rate.trim()
                ),
            ));
        }
        return Err(syntax(
            "period",
            format!("missing \"/<period>\" after {:?}", rate.trim()),
        ));
    };
    let count = parse_u64("count", count)?;
    let period = parse_period(period)?;

    let (mut burst, mut initial) = (None, None);
    for clause in parts {
        let clause = clause.trim();
        if clause.is_empty() {
            return Err(syntax("clause", "empty clause after \",\"".to_owned()));
        }
        let (keyword, value) = clause
            .split_once(char::is_whitespace)
            .unwrap_or((clause, ""));
        let (part, slot) = match keyword {
            "burst" => ("burst", &mut burst),
            "initial" => ("initial", &mut initial),
            _ => {
                return Err(syntax(
                    "clause",
                    format!("unknown clause {clause:?}, neither \"burst <n>\" nor \"initial <n>\""),
                ))
            }
        };
        if slot.is_some() {
            return Err(syntax(part, format!("\"{part}\" given twice")));
        }
        *slot = Some(parse_u64(part, value)?);
    }

    // The capacity before the initial fill, whatever their order in the text: the fill is checked
    // against the capacity given, not against the default.
    let mut quota = Quota::per_period(count, period).map_err(|e| {
        // The default capacity is the count: a count above `max_capacity` is the count's fault.
        let part = match e.field() {
            "capacity" => "count",
            field => field,
        };
        (part, Reason::Range(e))
    })?;
    if let Some(burst) = burst {
        quota = quota
            .with_capacity(burst)
            .map_err(|e| ("burst", Reason::Range(e)))?;
    }
    if let Some(initial) = initial {
        quota = quota
            .with_initial(initial)
            .map_err(|e| ("initial", Reason::Range(e)))?;
    }
    Ok(quota)
}

/// Why a whole number was refused.
enum NumberError {
    NotANumber,
    TooLarge,
}

/// Decimal digits, with `_` allowed after the first (`1_000_000`), into a `u128`.
fn parse_digits(text: &str) -> Result<u128, NumberError> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(NumberError::NotANumber);
    }
    let mut value = Some(0u128);
    for byte in text.bytes() {
        match byte {
            b'0'..=b'9' => {
                value = value
                    .and_then(|v| v.checked_mul(10))
                    .and_then(|v| v.checked_add(u128::from(byte - b'0')));
            }
            b'_' => {}
            _ => return Err(NumberError::NotANumber),
        }
    }
    value.ok_or(NumberError::TooLarge)
}

/// The count, the burst or the initial fill: a whole number up to `u64::MAX`.
fn parse_u64(part: &'static str, text: &str) -> Result<u64, Refusal> {
    let text = text.trim();
    if text.is_empty() {
        return Err(syntax(part, format!("missing {part}")));
    }
    match parse_digits(text).map(u64::try_from) {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(_)) | Err(NumberError::TooLarge) => Err(syntax(
            part,
            format!("{part} {text} is larger than {}", u64::MAX),
        )),
        Err(NumberError::NotANumber) => Err(syntax(
            part,
            format!("{part} {text:?} is not a whole number"),
        )),
    }
}

/// `[<n>]<unit>`, with optional whitespace between: any period a `Duration` holds.
fn parse_period(text: &str) -> Result<Duration, Refusal> {
    let text = text.trim();
    if text.is_empty() {
        return Err(syntax("period", "missing period after \"/\"".to_owned()));
    }
    // The number is the leading run of digits and underscores, when there is a leading digit.
    let split = if text.starts_with(|c: char| c.is_ascii_digit()) {
        text.find(|c: char| !(c.is_ascii_digit() || c == '_'))
            .unwrap_or(text.len())
    } else {
        0
    };
    let (number, unit) = (&text[..split], text[split..].trim());
    if !number.is_empty() && unit.starts_with('.') {
        return Err(syntax(
            "period",
            format!("period {text:?} is not a whole number of units; use a smaller unit (1500ms, not 1.5s)"),
        ));
    }
    let too_long = || {
        syntax(
            "period",
            format!("period {text:?} is longer than {} seconds", u64::MAX),
        )
    };
    let units = if number.is_empty() {
        1
    } else {
        match parse_digits(number) {
            Ok(n) => n,
            // Digits and underscores after a leading digit: only too many of them can fail.
            Err(NumberError::TooLarge | NumberError::NotANumber) => return Err(too_long()),
        }
    };
    if unit.is_empty() {
        return Err(syntax(
            "period unit",
            format!("missing period unit after {text:?}"),
        ));
    }
    let Some(unit_nanos) = unit_nanos(unit) else {
        return Err(syntax(
            "period unit",
            format!("unknown period unit {unit:?}"),
        ));
    };
    let nanos = units.checked_mul(unit_nanos).ok_or_else(too_long)?;
    let secs = u64::try_from(nanos / NANOS_PER_SEC).map_err(|_| too_long())?;
    // Below 10^9, so it fits.
    let subsec = (nanos % NANOS_PER_SEC) as u32;
    Ok(Duration::new(secs, subsec))
}

/// Why a string is not a [`Quota`]: the part that is wrong and either the accepted form (a syntax
/// error) or the accepted range (a value out of range, a [`QuotaError`]).
///
/// The message quotes the input: `invalid quota "10/fortnight": unknown period unit "fortnight";
/// expected <count>/[<n>]<unit>[, burst <n>][, initial <n>] with units ns, us, ms, s, min, h, d`.
/// A value out of range gives the range instead of the form: `invalid quota "0/s": count out of
/// range: count must be at least 1, got 0`. That [`QuotaError`] is also the error's
/// [`source`](Error::source) and its [`quota_error`](QuotaParseError::quota_error), so a report
/// that prints every source in the chain shows its message twice.
///
/// # Examples
///
/// ```
/// use tollgate::{Quota, QuotaError};
///
/// let err = "10/fortnight".parse::<Quota>().unwrap_err();
/// assert_eq!(err.part(), "period unit");
/// assert!(err.to_string().starts_with(
///     r#"invalid quota "10/fortnight": unknown period unit "fortnight"; expected <count>/"#
/// ));
///
/// let err = "0/s".parse::<Quota>().unwrap_err();
/// assert_eq!(err.part(), "count");
/// assert_eq!(err.quota_error(), Some(QuotaError::ZeroCount));
/// assert_eq!(err.to_string(), r#"invalid quota "0/s": count out of range: count must be at least 1, got 0"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuotaParseError {
    input: String,
    part: &'static str,
    reason: Reason,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Reason {
    /// Not in the accepted form; the message says what is wrong.
    Syntax(String),
    /// In the form, but a value the constructors refuse.
    Range(QuotaError),
}

impl QuotaParseError {
    /// The part of the text that is wrong:
    ///
    /// | part | what |
    /// | --- | --- |
    /// | `"quota"` | the string is empty (or only whitespace) |
    /// | `"count"` | the count before `/`: missing, not a whole number, above `u64::MAX`, 0, or above what the period allows |
    /// | `"period"` | after `/`: missing, fractional, longer than a `Duration` holds, or zero |
    /// | `"period unit"` | the unit is missing or unknown |
    /// | `"rate"` | count and period together: more than one per nanosecond, or one per more than 2^62 ns |
    /// | `"burst"`, `"initial"` | that clause: not a whole number, given twice, or out of range |
    /// | `"clause"` | an empty or unknown clause after a comma |
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// assert_eq!("ten/s".parse::<Quota>().unwrap_err().part(), "count");
    /// assert_eq!("10/s, burst 0".parse::<Quota>().unwrap_err().part(), "burst");
    /// assert_eq!("10/s, bursts 5".parse::<Quota>().unwrap_err().part(), "clause");
    /// ```
    pub fn part(&self) -> &'static str {
        self.part
    }

    /// The string that was refused, as given.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::Quota;
    /// assert_eq!(" 5/ s,".parse::<Quota>().unwrap_err().input(), " 5/ s,");
    /// ```
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The [`QuotaError`] when the text was in the accepted form but a value is out of range (the
    /// same error the constructors return for it); `None` for a syntax error.
    ///
    /// # Examples
    ///
    /// ```
    /// use tollgate::{Quota, QuotaError};
    /// let err = "10/s, burst 5, initial 6".parse::<Quota>().unwrap_err();
    /// assert_eq!(err.part(), "initial");
    /// assert_eq!(err.quota_error(), Some(QuotaError::InitialAboveCapacity { initial: 6, capacity: 5 }));
    /// assert_eq!("10/s, initial x".parse::<Quota>().unwrap_err().quota_error(), None);
    /// ```
    pub fn quota_error(&self) -> Option<QuotaError> {
        match self.reason {
            Reason::Range(e) => Some(e),
            Reason::Syntax(_) => None,
        }
    }
}

impl fmt::Display for QuotaParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid quota {:?}: ", self.input)?;
        match &self.reason {
            Reason::Syntax(message) => write!(f, "{message}; {FORM}"),
            Reason::Range(e) => write!(f, "{} out of range: {e}", self.part),
        }
    }
}

impl Error for QuotaParseError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match &self.reason {
            Reason::Range(e) => Some(e),
            Reason::Syntax(_) => None,
        }
    }
}

/// The text form, as a string ([`Quota`]'s `Display`).
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl serde::Serialize for Quota {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// From a string in the text form only (see [`Quota`], "Text form"); a refusal is the
/// [`QuotaParseError`]'s message.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for Quota {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Quota, D::Error> {
        deserializer.deserialize_str(QuotaVisitor)
    }
}

#[cfg(feature = "serde")]
struct QuotaVisitor;

#[cfg(feature = "serde")]
impl serde::de::Visitor<'_> for QuotaVisitor {
    type Value = Quota;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quota as a string such as \"100/s\" or \"20/min, burst 5\"")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Quota, E> {
        text.parse().map_err(E::custom)
    }
}

#[cfg(test)]
mod tests;
