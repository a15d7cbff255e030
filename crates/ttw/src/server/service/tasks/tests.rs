use super::*;

/// A time past the year 9999 (a recurring interval of 9,000 years, a
/// redrive spread over 100,000) made the RFC 3339 formatter panic, and
/// every listing that showed it dropped its connection: it is shown as
/// the last time the store holds.
#[test]
fn a_time_past_the_year_9999_is_shown_not_panicked_on() {
    let far = SystemTime::UNIX_EPOCH + Duration::from_secs(100_000 * 365 * 86_400);
    assert_eq!(wire::rfc3339(far), "9999-12-31T23:59:59.999Z");
    let now = wire::rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(1_500));
    assert_eq!(now, "1970-01-01T00:00:01.500Z");
}

/// Regression: a JSON payload was parsed into a map that sorts its keys
/// and written out again: `{"b":1,"a":2}` was delivered as
/// `{"a":2,"b":1}`. It is stored as the request wrote it, byte for byte.
#[test]
fn a_json_payload_is_stored_byte_for_byte_as_sent() {
    for payload in [
        r#"{"b":1,"a":2}"#,
        r#"{ "z" : [3, 2, 1], "a" : {"y": 1e3, "x": "é\u00e9"} }"#,
        r#""text""#,
        "1.50",
    ] {
        let body: wire::NewTask =
            crate::server::extract::parse(format!(r#"{{"payload": {payload}}}"#).as_bytes())
                .unwrap();
        let stored = decode_payload(body.payload, body.payload_base64).unwrap();
        assert_eq!(String::from_utf8(stored).unwrap(), payload);
    }
}

/// Regression: `run_at` with a numeric offset was refused
/// (`+02:00`), or with a fraction had its offset dropped
/// (`14:00:00.000+02:00` stored as 14:00Z, two hours late).
#[test]
fn run_at_with_an_offset_is_the_instant_it_names() {
    let noon = SystemTime::UNIX_EPOCH + Duration::from_secs(1_798_804_800);
    for text in [
        "2027-01-01T12:00:00Z",
        "2027-01-01T14:00:00+02:00",
        "2027-01-01T14:00:00.000+02:00",
        "2027-01-01t06:30:00-05:30",
        "2027-01-01T17:45:00+05:45",
    ] {
        let at = due_time(&Some(text.to_string()), &None).unwrap();
        assert_eq!(at, Some(noon), "{text}");
    }
    let err = due_time(&Some("2027-01-01T12:00:00".into()), &None).unwrap_err();
    assert_eq!(err.code(), Code::InvalidTime);
}
