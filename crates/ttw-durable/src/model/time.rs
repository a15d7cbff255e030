//! Times as the store holds them: milliseconds since the Unix epoch, and
//! durations in whole milliseconds.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::Error;
use crate::model::limits::MAX_RUN_AT;

/// A time as milliseconds since the Unix epoch, or an error outside
/// `UNIX_EPOCH..=UNIX_EPOCH + MAX_RUN_AT`.
pub(crate) fn to_ms(at: SystemTime) -> Result<i64, Error> {
    let since = at
        .duration_since(UNIX_EPOCH)
        .map_err(|_| Error::out_of_range("a time before the Unix epoch"))?;
    if since > MAX_RUN_AT {
        return Err(Error::out_of_range("a time after MAX_RUN_AT"));
    }
    // MAX_RUN_AT fits in an i64 of milliseconds.
    Ok(since.as_millis() as i64)
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
