//! The one reader of durations for every part of `ttw`: the tool's flags,
//! the server's API (`delay`, `max_wait`, rates, backoffs) and its
//! configuration file. Times have theirs in the library
//! ([`ttw_durable::parse_time`]).

use std::time::Duration;

use crate::error::{Failure, Result};

/// A duration as `ttw` writes them: `"30s"`, `"15m"`, `"1h 30m"`,
/// `"250ms"`. A negative one is refused with a hint, and anything else
/// that does not parse with examples; the message names the text.
pub(crate) fn duration(text: &str) -> std::result::Result<Duration, String> {
    if text.trim_start().starts_with('-') {
        return Err(format!(
            "a delay cannot be negative: {text:?} (for a time in the past, give a time)"
        ));
    }
    humantime::parse_duration(text)
        .map_err(|err| format!("not a duration: {text:?} ({err}; try 30s, 15m, 1h)"))
}

/// A duration as the command line writes it: `30s`, `5m`, `1h 30m`.
/// A duration written with a minus sign (`-5m`) is refused as negative,
/// not as a flag the tool does not know.
pub(crate) fn flag_duration(what: &str, text: &str) -> Result<Duration> {
    duration(text).map_err(|err| Failure(format!("{what}: {err}")))
}

/// A time as the command line writes it: RFC 3339, with any offset (the
/// library's one parser, [`ttw_durable::parse_time`]).
pub(crate) fn flag_time(what: &str, text: &str) -> Result<std::time::SystemTime> {
    ttw_durable::parse_time(text).map_err(|err| Failure(format!("{what}: {err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written_and_bad_ones_say_why() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("1h 30m"), Ok(Duration::from_secs(5_400)));
        assert!(duration("-5s").unwrap_err().contains("cannot be negative"));
        let err = duration("soon").unwrap_err();
        assert!(err.starts_with("not a duration: \"soon\""), "{err}");
        assert!(err.contains("try 30s"), "{err}");
    }
}
