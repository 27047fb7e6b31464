//! The text form: each unit and spelling, printing, every error's part and message, and the round
//! trip for arbitrary quotas and strings (proptest).

use std::error::Error;
use std::time::Duration;

use proptest::prelude::*;

use super::{Quota, QuotaError, QuotaParseError};

fn parse(s: &str) -> Result<Quota, QuotaParseError> {
    s.parse()
}

fn period(count: u64, period: Duration) -> Quota {
    Quota::per_period(count, period).unwrap()
}

#[test]
fn each_unit_and_spelling() {
    let cases: [(&[&str], Duration); 7] = [
        (
            &["ns", "nsec", "nsecs", "nanosecond", "nanoseconds"],
            Duration::from_nanos(1),
        ),
        (
            &[
                "us",
                "\u{b5}s",
                "\u{3bc}s",
                "usec",
                "usecs",
                "microsecond",
                "microseconds",
            ],
            Duration::from_micros(1),
        ),
        (
            &["ms", "msec", "msecs", "millisecond", "milliseconds"],
            Duration::from_millis(1),
        ),
        (
            &["s", "sec", "secs", "second", "seconds"],
            Duration::from_secs(1),
        ),
        (
            &["m", "min", "mins", "minute", "minutes"],
            Duration::from_secs(60),
        ),
        (
            &["h", "hr", "hrs", "hour", "hours"],
            Duration::from_secs(3_600),
        ),
        (&["d", "day", "days"], Duration::from_secs(86_400)),
    ];
    for (spellings, unit) in cases {
        for spelling in spellings {
            assert_eq!(
                parse(&format!("1/{spelling}")),
                Ok(period(1, unit)),
                "{spelling}"
            );
            assert_eq!(
                parse(&format!("1/7{spelling}")),
                Ok(period(1, unit * 7)),
                "{spelling}"
            );
            assert_eq!(
                parse(&format!(" 1 / 7 {spelling} ")),
                Ok(period(1, unit * 7)),
                "{spelling}"
            );
        }
    }
}

#[test]
fn the_constructors_and_their_text() {
    for (quota, text) in [
        (Quota::per_second(100).unwrap(), "100/s"),
        (Quota::per_minute(20).unwrap(), "20/min"),
        (Quota::per_hour(3_600).unwrap(), "3600/h"),
        (Quota::per_day(1).unwrap(), "1/d"),
        (period(5, Duration::from_secs(90)), "5/90s"),
        (period(3, Duration::from_millis(250)), "3/250ms"),
        (period(1, Duration::from_micros(1_500)), "1/1500us"),
        (period(1, Duration::from_nanos(7)), "1/7ns"),
        (period(2, Duration::from_secs(120)), "2/2min"),
        (period(1, Duration::from_secs(7 * 86_400)), "1/7d"),
        (period(1, Duration::from_secs(36 * 3_600)), "1/36h"),
        (
            Quota::per_minute(20).unwrap().with_capacity(5).unwrap(),
            "20/min, burst 5",
        ),
        (
            Quota::per_second(10).unwrap().with_initial(0).unwrap(),
            "10/s, initial 0",
        ),
        // An initial fill set to the capacity is not the default: `Quota`'s equality tells them
        // apart, so the text does too.
        (
            Quota::per_second(10).unwrap().with_initial(10).unwrap(),
            "10/s, initial 10",
        ),
        (
            Quota::per_second(10)
                .unwrap()
                .with_capacity(50)
                .unwrap()
                .with_initial(3)
                .unwrap(),
            "10/s, burst 50, initial 3",
        ),
        (
            period(1 << 40, Duration::MAX),
            "1099511627776/18446744073709551615999999999ns",
        ),
    ] {
        assert_eq!(quota.to_string(), text);
        assert_eq!(parse(text), Ok(quota), "{text}");
    }
}

#[test]
fn the_accepted_variations() {
    let q = Quota::per_minute(20)
        .unwrap()
        .with_capacity(5)
        .unwrap()
        .with_initial(1)
        .unwrap();
    for text in [
        "20/min, burst 5, initial 1",
        "20/min, initial 1, burst 5",
        "20/1min,burst 5,initial 1",
        " 20 / 60 s ,  burst\t5 , initial 1 ",
        "20/60_000ms, burst 5, initial 1",
        "2_0/minute, burst 0_5, initial 01",
    ] {
        assert_eq!(parse(text), Ok(q), "{text}");
    }
    assert_eq!(
        parse("1_000_000/s"),
        Ok(Quota::per_second(1_000_000).unwrap())
    );
    // A burst equal to the count is the default, printed as nothing.
    assert_eq!(parse("10/s, burst 10").unwrap().to_string(), "10/s");
}

/// The error for `text`, with its part, the accepted form and the input in its message.
fn syntax_error(text: &str, part: &str, says: &str) -> QuotaParseError {
    let err = parse(text).unwrap_err();
    assert_eq!(err.part(), part, "{text}: {err}");
    assert_eq!(err.input(), text);
    assert_eq!(err.quota_error(), None);
    assert!(err.source().is_none());
    let message = err.to_string();
    assert!(
        message.starts_with(&format!("invalid quota {text:?}: ")),
        "{message}"
    );
    assert!(message.contains(says), "{text}: {message:?} lacks {says:?}");
    assert!(
        message.ends_with("; expected <count>/[<n>]<unit>[, burst <n>][, initial <n>] with units ns, us, ms, s, min, h, d"),
        "{message}"
    );
    err
}

#[test]
fn syntax_errors_name_the_part_and_the_form() {
    syntax_error("", "quota", "the string is empty");
    syntax_error(" \t", "quota", "the string is empty");
    syntax_error("100", "period", r#"missing "/<period>" after "100""#);
    syntax_error("100 per second", "period", "missing \"/<period>\"");
    syntax_error("/s", "count", "missing count");
    syntax_error("ten/s", "count", r#"count "ten" is not a whole number"#);
    syntax_error("-1/s", "count", r#"count "-1" is not a whole number"#);
    syntax_error("+1/s", "count", "not a whole number");
    syntax_error("1.5/s", "count", "not a whole number");
    syntax_error("_1/s", "count", "not a whole number");
    syntax_error(
        "18446744073709551616/s",
        "count",
        "count 18446744073709551616 is larger than 18446744073709551615",
    );
    syntax_error(&format!("{}/s", "9".repeat(60)), "count", "is larger than");
    syntax_error("10/", "period", r#"missing period after "/""#);
    syntax_error("10/s/s", "period unit", r#"unknown period unit "s/s""#);
    syntax_error("10/5", "period unit", r#"missing period unit after "5""#);
    syntax_error(
        "10/fortnight",
        "period unit",
        r#"unknown period unit "fortnight""#,
    );
    syntax_error("10/S", "period unit", r#"unknown period unit "S""#);
    syntax_error("10/MS", "period unit", "unknown period unit");
    syntax_error("10/M", "period unit", "unknown period unit");
    syntax_error("10/w", "period unit", "unknown period unit");
    syntax_error("10/5 5s", "period unit", r#"unknown period unit "5s""#);
    syntax_error(
        "10/1.5s",
        "period",
        "not a whole number of units; use a smaller unit",
    );
    syntax_error("10/.5s", "period unit", r#"unknown period unit ".5s""#);
    syntax_error(
        "1/18446744073709551616s",
        "period",
        "is longer than 18446744073709551615 seconds",
    );
    syntax_error(
        &format!("1/{}d", "9".repeat(40)),
        "period",
        "is longer than",
    );
    syntax_error(
        &format!("1/{}ns", "9".repeat(40)),
        "period",
        "is longer than",
    );
    syntax_error("10/s,", "clause", r#"empty clause after ",""#);
    syntax_error("10/s, , burst 5", "clause", "empty clause");
    syntax_error("10/s, bursts 5", "clause", r#"unknown clause "bursts 5""#);
    syntax_error("10/s, burst=5", "clause", r#"unknown clause "burst=5""#);
    syntax_error("10/s, capacity 5", "clause", "unknown clause");
    syntax_error("10/s, burst", "burst", "missing burst");
    syntax_error(
        "10/s, burst five",
        "burst",
        r#"burst "five" is not a whole number"#,
    );
    syntax_error(
        "10/s, burst 5 6",
        "burst",
        r#"burst "5 6" is not a whole number"#,
    );
    syntax_error("10/s, burst 5, burst 6", "burst", r#""burst" given twice"#);
    syntax_error("10/s, initial", "initial", "missing initial");
    syntax_error(
        "10/s, initial 1, initial 1",
        "initial",
        r#""initial" given twice"#,
    );
    syntax_error(
        "10/s, initial 99999999999999999999",
        "initial",
        "initial 99999999999999999999 is larger than",
    );
    syntax_error(
        "1,000/s",
        "count",
        r#"count "1" is followed by "," before the "/""#,
    );
    // Unicode and control characters are quoted, never sliced mid-character.
    let err = syntax_error(
        "10/\u{1F600}",
        "period unit",
        "unknown period unit \"\u{1F600}\"",
    );
    assert!(err
        .to_string()
        .starts_with("invalid quota \"10/\u{1F600}\""));
    syntax_error("1\u{0}/s", "count", r#"count "1\0" is not a whole number"#);
    syntax_error("10/5\u{b5}", "period unit", "unknown period unit");
}

#[test]
fn out_of_range_values_carry_the_constructors_error() {
    for (text, part, error) in [
        ("0/s", "count", QuotaError::ZeroCount),
        ("1/0s", "period", QuotaError::ZeroPeriod),
        ("1/0_000d", "period", QuotaError::ZeroPeriod),
        (
            "2/ns",
            "rate",
            QuotaError::RateTooFast {
                count: 2,
                period: Duration::from_nanos(1),
            },
        ),
        (
            "1/18446744073709551615s",
            "rate",
            QuotaError::RateTooSlow {
                count: 1,
                period: Duration::from_secs(u64::MAX),
            },
        ),
        ("10/s, burst 0", "burst", QuotaError::ZeroCapacity),
        (
            "10/s, burst 5, initial 6",
            "initial",
            QuotaError::InitialAboveCapacity {
                initial: 6,
                capacity: 5,
            },
        ),
        // The burst is applied first whatever the order, so the fill is checked against it.
        (
            "10/s, initial 6, burst 5",
            "initial",
            QuotaError::InitialAboveCapacity {
                initial: 6,
                capacity: 5,
            },
        ),
        (
            "10/s, initial 11",
            "initial",
            QuotaError::InitialAboveCapacity {
                initial: 11,
                capacity: 10,
            },
        ),
    ] {
        let err = parse(text).unwrap_err();
        assert_eq!(err.part(), part, "{text}");
        assert_eq!(err.quota_error(), Some(error), "{text}");
        assert_eq!(
            err.source().map(ToString::to_string),
            Some(error.to_string())
        );
        assert_eq!(
            err.to_string(),
            format!("invalid quota {text:?}: {part} out of range: {error}")
        );
    }
    // A capacity above the maximum: from the burst it is the burst's, by default the count's.
    let q = Quota::per_second(1).unwrap();
    let too_many = q.max_capacity() + 1;
    let err = parse(&format!("1/s, burst {too_many}")).unwrap_err();
    assert_eq!(err.part(), "burst");
    assert!(matches!(
        err.quota_error(),
        Some(QuotaError::CapacityTooLarge { .. })
    ));
    let err = parse(&format!("{too_many}/{}s", too_many)).unwrap_err();
    assert_eq!(err.part(), "count");
    assert!(matches!(
        err.quota_error(),
        Some(QuotaError::CapacityTooLarge { .. })
    ));
}

/// Any quota the constructors accept: counts and periods from across their ranges (often round
/// ones, which print in the larger units), often with a capacity and an initial fill.
fn any_quota() -> impl Strategy<Value = Quota> {
    let count = prop_oneof![1..=10u64, 1..=1_000_000u64, any::<u64>()];
    let unit = prop::sample::select(vec![
        1u64,
        1_000,
        1_000_000,
        1_000_000_000,
        60_000_000_000,
        3_600_000_000_000,
        86_400_000_000_000,
    ]);
    let round = (1..=1_000u64, unit).prop_map(|(n, unit)| Duration::from_nanos(n * unit));
    let period = prop_oneof![
        round,
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        (0..100_000u64, 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        any::<u64>().prop_map(Duration::from_nanos),
    ];
    // Capacity and fill as a fraction of their range, or left alone.
    let fraction = prop_oneof![Just(None), any::<u64>().prop_map(Some)];
    (count, period, fraction.clone(), fraction).prop_filter_map(
        "the constructors refuse it",
        |(count, period, capacity, initial)| {
            let mut q = Quota::per_period(count, period).ok()?;
            if let Some(c) = capacity {
                q = q.with_capacity(1 + c % q.max_capacity()).ok()?;
            }
            if let Some(i) = initial {
                q = q.with_initial(i % (q.capacity() + 1)).ok()?;
            }
            Some(q)
        },
    )
}

/// Strings near the grammar, so that many parse and the rest fail in every part.
fn near_quota_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        Just(String::new()),
        "[0-9_]{1,4}",
        "[0-9]{15,25}",
        "[0-9. +-]{1,4}",
    ];
    let unit = prop::sample::select(vec![
        "", "s", "ms", "us", "\u{b5}s", "ns", "m", "min", "h", "d", "day", "S", "w", "sec", "x",
    ]);
    let clause = (
        prop::sample::select(vec!["burst", "initial", "capacity", ""]),
        number.clone(),
    )
        .prop_map(|(k, n)| format!("{k} {n}"));
    (
        number.clone(),
        prop::sample::select(vec!["/", " / ", "", "//"]),
        number,
        unit,
        prop::collection::vec(clause, 0..3),
    )
        .prop_map(|(count, slash, n, unit, clauses)| {
            let mut s = format!("{count}{slash}{n}{unit}");
            for c in clauses {
                s.push_str(", ");
                s.push_str(&c);
            }
            s
        })
}

/// A string either parses to a quota that prints back to an equal one, or is refused with an
/// error that names a known part and quotes the input. Never a panic.
fn check_any_text(text: &str) {
    match parse(text) {
        Ok(q) => {
            let printed = q.to_string();
            assert_eq!(parse(&printed), Ok(q), "{text:?} printed as {printed:?}");
            // The printed form is canonical: printing it again changes nothing.
            assert_eq!(parse(&printed).unwrap().to_string(), printed);
        }
        Err(err) => {
            assert!(
                [
                    "quota",
                    "count",
                    "period",
                    "period unit",
                    "rate",
                    "burst",
                    "initial",
                    "clause"
                ]
                .contains(&err.part()),
                "{err}"
            );
            assert_eq!(err.input(), text);
            assert!(err
                .to_string()
                .starts_with(&format!("invalid quota {text:?}: ")));
            assert_eq!(err.quota_error().is_some(), err.source().is_some());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_quota_round_trips(q in any_quota()) {
        let text = q.to_string();
        prop_assert_eq!(parse(&text), Ok(q), "{}", text);
    }

    #[test]
    fn any_string_parses_or_names_its_part(text in any::<String>()) {
        check_any_text(&text);
    }

    #[test]
    fn strings_near_the_grammar_parse_or_name_their_part(text in near_quota_text()) {
        check_any_text(&text);
    }
}
