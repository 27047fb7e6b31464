//! Arbitrary strings to `Quota::from_str`: never a panic; an accepted string's quota prints to
//! text that parses back to an equal quota and prints the same again; a refused string's error
//! names one of the documented parts, quotes the input, and gives either the accepted form (a
//! syntax error) or the constructors' `QuotaError` (a value out of range, also its `source`).

#![no_main]

use std::error::Error;

use libfuzzer_sys::fuzz_target;
use tollgate::Quota;

const PARTS: [&str; 8] = [
    "quota",
    "count",
    "period",
    "period unit",
    "rate",
    "burst",
    "initial",
    "clause",
];

const FORM: &str =
    "; expected <count>/[<n>]<unit>[, burst <n>][, initial <n>] with units ns, us, ms, s, min, h, d";

fuzz_target!(|text: &str| {
    match text.parse::<Quota>() {
        Ok(quota) => {
            let printed = quota.to_string();
            let again = printed.parse::<Quota>();
            assert_eq!(again, Ok(quota), "{text:?} printed as {printed:?}");
            assert_eq!(quota.to_string(), printed);
        }
        Err(err) => {
            assert!(PARTS.contains(&err.part()), "{err:?}");
            assert_eq!(err.input(), text);
            let message = err.to_string();
            assert!(
                message.starts_with(&format!("invalid quota {text:?}: ")),
                "{message:?}"
            );
            match err.quota_error() {
                Some(range) => {
                    assert_eq!(
                        err.source().map(ToString::to_string),
                        Some(range.to_string())
                    );
                    assert!(
                        message.ends_with(&format!("{} out of range: {range}", err.part())),
                        "{message:?}"
                    );
                }
                None => {
                    assert!(err.source().is_none());
                    assert!(message.ends_with(FORM), "{message:?}");
                }
            }
        }
    }
});
