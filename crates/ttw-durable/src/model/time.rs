//! Times as the store holds them: milliseconds since the Unix epoch, and
//! durations in whole milliseconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::model::limits::MAX_RUN_AT;

/// A time as milliseconds since the Unix epoch, rounded up (a task asked
/// for at 10.4 ms is due at 11 ms, never at 10: never early), or an error
/// outside `UNIX_EPOCH..=UNIX_EPOCH + MAX_RUN_AT`.
pub(crate) fn to_ms(at: SystemTime) -> Result<i64, Error> {
    let since = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::out_of_range("a time before the Unix epoch"))?;
    if since > MAX_RUN_AT {
        return Err(Error::out_of_range("a time after MAX_RUN_AT"));
    }
    let part = u128::from(since.subsec_nanos() % 1_000_000 != 0);
    // MAX_RUN_AT is a whole millisecond, and fits in an i64 of them.
    Ok((since.as_millis() + part) as i64)
}

/// Reads a time written as RFC 3339 (§5.6): a date, `T` (or `t`, or a
/// space), a time with seconds and any fraction, and an offset: `Z` (or
/// `z`) or `+hh:mm` / `-hh:mm`. Every form of one instant reads as that
/// instant: `2027-01-01T14:00:00+02:00` is `2027-01-01T12:00:00Z`. A leap
/// second (`23:59:60`) reads as the second after `23:59:59`. The one parser
/// of times as text for the library, the `ttw` tool and its service.
///
/// # Errors
///
/// [`Error::is_invalid_time`] for text that is not such a time (a time
/// without an offset among them: it would name no instant), naming it;
/// [`Error::is_out_of_range`] for one before the Unix epoch.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let utc = ttw_durable::parse_time("2027-01-01T12:00:00Z")?;
/// assert_eq!(ttw_durable::parse_time("2027-01-01T14:00:00.000+02:00")?, utc);
/// assert_eq!(ttw_durable::parse_time("2027-01-01t06:30:00-05:30")?, utc);
/// assert_eq!(utc, UNIX_EPOCH + Duration::from_secs(1_798_804_800));
/// assert!(ttw_durable::parse_time("2027-01-01T12:00:00").unwrap_err().is_invalid_time());
/// # Ok::<(), ttw_durable::Error>(())
/// ```
pub fn parse_time(text: &str) -> Result<SystemTime, Error> {
    let at = chrono::DateTime::parse_from_rfc3339(text.trim()).map_err(|err| {
        Error::invalid_time(format!(
            "{text:?} is not an RFC 3339 time ({err}; try 2027-01-01T10:00:00Z or 2027-01-01T12:00:00+02:00)"
        ))
    })?;
    let secs = u64::try_from(at.timestamp())
        .map_err(|_| Error::out_of_range("a time before the Unix epoch"))?;
    // A leap second's nanoseconds are 1e9 or more: the next second.
    Ok(UNIX_EPOCH
        + Duration::from_secs(secs)
        + Duration::from_nanos(u64::from(at.timestamp_subsec_nanos())))
}

/// The time `ms` milliseconds after the Unix epoch.
pub(crate) fn from_ms(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// A duration in whole milliseconds, as statements take it. Settings are
/// capped far below `i64::MAX` milliseconds, so sums of them never overflow.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, Timelike};
    use proptest::prelude::*;

    /// 2027-01-01T12:00:00Z.
    const NOON: u64 = 1_798_804_800;

    /// Regression: the service read times with a parser that refused a
    /// numeric offset (`+02:00`: 400 `invalid_time`) and, with a fraction,
    /// dropped it (`14:00:00.000+02:00` stored as 14:00Z, two hours late).
    #[test]
    fn every_rfc_3339_form_of_an_instant_reads_as_that_instant() {
        let noon = UNIX_EPOCH + Duration::from_secs(NOON);
        let ms = |n| noon + Duration::from_millis(n);
        let table: &[(&str, SystemTime)] = &[
            ("2027-01-01T12:00:00Z", noon),
            ("2027-01-01t12:00:00z", noon),
            ("2027-01-01 12:00:00Z", noon),
            ("2027-01-01T14:00:00+02:00", noon),
            ("2027-01-01T14:00:00.000+02:00", noon),
            ("2027-01-01T14:00:00.250+02:00", ms(250)),
            ("2027-01-01T06:30:00-05:30", noon),
            ("2027-01-01T06:30:00.5-05:30", ms(500)),
            ("2027-01-01T17:45:00+05:45", noon),
            ("2027-01-01T12:00:00+00:00", noon),
            ("2027-01-01T12:00:00-00:00", noon),
            (
                "2027-01-01T12:00:00.123456789Z",
                noon + Duration::from_nanos(123_456_789),
            ),
            ("2026-12-31T23:00:00-13:00", noon),
            (
                "2028-02-29T00:00:00Z",
                UNIX_EPOCH + Duration::from_secs(1_835_395_200),
            ),
            (
                "9999-12-31T23:59:59.999Z",
                UNIX_EPOCH + Duration::from_millis(253_402_300_799_999),
            ),
            ("1970-01-01T00:00:00Z", UNIX_EPOCH),
            (
                "2016-12-31T23:59:60Z",
                UNIX_EPOCH + Duration::from_secs(1_483_228_800),
            ),
        ];
        for &(text, want) in table {
            assert_eq!(parse_time(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn text_that_names_no_instant_is_refused_by_name() {
        for text in [
            "2027-01-01T12:00:00",
            "2027-01-01",
            "2027-01-01T12:00Z",
            "2027-02-29T12:00:00Z",
            "2027-01-01T12:00:00+2:00",
            "tomorrow",
            "",
        ] {
            let err = parse_time(text).unwrap_err();
            assert!(err.is_invalid_time(), "{text}: {err}");
            assert!(err.to_string().contains(&format!("{text:?}")), "{err}");
        }
        assert!(parse_time("1969-12-31T23:59:59Z")
            .unwrap_err()
            .is_out_of_range());
    }

    /// Regression: a time between two milliseconds was stored as the
    /// earlier one, so a task could be delivered up to a millisecond before
    /// the time it was asked for (seen as `durable.rs`'s
    /// `cancel_and_reschedule` failing now and then).
    #[test]
    fn a_time_between_two_milliseconds_is_stored_as_the_later() {
        let at = |nanos| UNIX_EPOCH + Duration::from_nanos(nanos);
        assert_eq!(to_ms(at(10_000_000)).unwrap(), 10);
        assert_eq!(to_ms(at(10_000_001)).unwrap(), 11);
        assert_eq!(to_ms(at(10_999_999)).unwrap(), 11);
        assert_eq!(
            to_ms(UNIX_EPOCH + MAX_RUN_AT).unwrap(),
            MAX_RUN_AT.as_millis() as i64
        );
        assert!(to_ms(UNIX_EPOCH + MAX_RUN_AT + Duration::from_nanos(1)).is_err());
    }

    proptest! {
        /// Any instant, written in any offset with any fraction, reads back
        /// as itself.
        #[test]
        fn an_instant_in_any_offset_reads_back_as_itself(
            secs in 0i64..253_402_300_799,
            nanos in 0u32..1_000_000_000,
            offset_minutes in -(23i32 * 60 + 59)..=(23 * 60 + 59),
            digits in 0usize..=9,
            lower in any::<bool>(),
        ) {
            let nanos = nanos - nanos % 10u32.pow(9 - digits as u32);
            let offset = chrono::FixedOffset::east_opt(offset_minutes * 60).unwrap();
            let at = chrono::DateTime::from_timestamp(secs, nanos).unwrap().with_timezone(&offset);
            let mut text = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
                at.year(), at.month(), at.day(), at.hour(), at.minute(), at.second()
            );
            if digits > 0 {
                text.push_str(&format!(".{:09}", nanos)[..digits + 1]);
            }
            let (sign, abs) = if offset_minutes < 0 { ('-', -offset_minutes) } else { ('+', offset_minutes) };
            text.push_str(&format!("{sign}{:02}:{:02}", abs / 60, abs % 60));
            if lower {
                text = text.replace('T', "t");
            }
            let want = UNIX_EPOCH + Duration::new(secs as u64, nanos);
            prop_assert_eq!(parse_time(&text).unwrap(), want, "{}", text);
        }
    }
}
