//! `Quota` through serde (feature `serde`): the text form as a JSON string, in both directions, and
//! a bad string refused with the part that is wrong and the accepted form.

use std::collections::BTreeMap;
use std::time::Duration;

use tollgate::Quota;

#[test]
fn json_round_trip() {
    let quotas = [
        Quota::per_second(100).unwrap(),
        Quota::per_minute(20).unwrap().with_capacity(5).unwrap(),
        Quota::per_period(5, Duration::from_secs(90))
            .unwrap()
            .with_initial(0)
            .unwrap(),
        Quota::per_period(1, Duration::from_nanos(7)).unwrap(),
        Quota::per_period(1 << 40, Duration::MAX).unwrap(),
    ];
    let json = serde_json::to_string(&quotas).unwrap();
    assert_eq!(
        json,
        r#"["100/s","20/min, burst 5","5/90s, initial 0","1/7ns","1099511627776/18446744073709551615999999999ns"]"#
    );
    let back: Vec<Quota> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, quotas);
}

#[test]
fn a_configuration_map() {
    let limits: BTreeMap<String, Quota> = serde_json::from_str(
        r#"{ "login": "5 / min, burst 1", "api": "1_000/s, burst 200, initial 0" }"#,
    )
    .unwrap();
    assert_eq!(
        limits["login"],
        Quota::per_minute(5).unwrap().with_capacity(1).unwrap()
    );
    assert_eq!(
        limits["api"],
        Quota::per_second(1_000)
            .unwrap()
            .with_capacity(200)
            .unwrap()
            .with_initial(0)
            .unwrap()
    );
}

#[test]
fn a_bad_string_names_the_part_and_the_form() {
    let err = serde_json::from_str::<Quota>(r#""10/fortnight""#).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with(
            r#"invalid quota "10/fortnight": unknown period unit "fortnight"; expected <count>/[<n>]<unit>[, burst <n>][, initial <n>] with units ns, us, ms, s, min, h, d"#
        ),
        "{message}"
    );
    // serde_json adds where in the document.
    assert!(message.ends_with("at line 1 column 14"), "{message}");

    let err = serde_json::from_str::<Quota>(r#""10/s, burst 0""#).unwrap_err();
    assert!(
        err.to_string()
            .starts_with(r#"invalid quota "10/s, burst 0": burst out of range: capacity must be at least 1, got 0"#),
        "{err}"
    );
}

#[test]
fn only_a_string_is_a_quota() {
    for json in [
        "100",
        r#"{"count": 100, "period": "1s"}"#,
        r#"["100/s"]"#,
        "null",
    ] {
        let err = serde_json::from_str::<Quota>(json).unwrap_err();
        assert!(
            err.to_string()
                .contains(r#"expected a quota as a string such as "100/s" or "20/min, burst 5""#),
            "{json}: {err}"
        );
    }
}
