//! How `ttw` prints: aligned text tables, times and durations for people,
//! and JSON values for scripts.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use ttw_durable::{AttemptInfo, StateCounts};

/// Rows under a header, each column as wide as its widest cell, two spaces
/// apart; trailing spaces trimmed.
pub(crate) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (cell, w) in cells.zip(&widths) {
            let _ = write!(text, "{cell:<w$}  ");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// A time as RFC 3339 in UTC, to the millisecond. The formatter cannot
/// write a year past 9999: no stored time is later than `MAX_RUN_AT`, and
/// none is shown later.
pub(crate) fn time(t: SystemTime) -> String {
    let t = t.min(SystemTime::UNIX_EPOCH + ttw_durable::MAX_RUN_AT);
    humantime::format_rfc3339_millis(t).to_string()
}

/// Milliseconds since the Unix epoch, for JSON.
pub(crate) fn epoch_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A duration for people, to the second (`1h 2m 3s`), or in
/// milliseconds under a second.
pub(crate) fn span(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        return format!("{}ms", d.as_millis());
    }
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// How long ago `t` was (zero if it is ahead).
pub(crate) fn ago(t: SystemTime) -> Duration {
    SystemTime::now().duration_since(t).unwrap_or_default()
}

/// How long until `t` (zero if it has passed).
pub(crate) fn until(t: SystemTime) -> Duration {
    t.duration_since(SystemTime::now()).unwrap_or_default()
}

/// A payload as text: its bytes as UTF-8, the invalid ones replaced.
pub(crate) fn payload_text(payload: &[u8]) -> String {
    String::from_utf8_lossy(payload).into_owned()
}

/// A payload shortened for a table cell: control characters shown as
/// escapes, at most `max` characters.
pub(crate) fn payload_cell(payload: &[u8], max: usize) -> String {
    let text: String = payload_text(payload)
        .chars()
        .flat_map(char::escape_default)
        .collect();
    if text.chars().count() > max {
        let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
        cut.push('…');
        cut
    } else {
        text
    }
}

/// Counts as JSON, by state.
pub(crate) fn counts_json(c: &StateCounts) -> Value {
    json!({
        "scheduled": c.scheduled,
        "running": c.running,
        "done": c.done,
        "dead": c.dead,
        "cancelled": c.cancelled,
    })
}

/// A task's attempts as a table, one line each (the detail's first line,
/// cut to 60 characters).
pub(crate) fn attempts_table(attempts: &[AttemptInfo]) -> String {
    let rows: Vec<Vec<String>> = attempts
        .iter()
        .map(|a| {
            let detail = a.detail.as_deref().unwrap_or("-");
            let first = detail.lines().next().unwrap_or("");
            let mut shown: String = first.chars().take(60).collect();
            if shown.len() < detail.len() {
                shown.push('…');
            }
            vec![
                a.attempt.to_string(),
                a.outcome.as_str().into(),
                a.node.clone().unwrap_or_else(|| "-".into()),
                a.started_at.map_or_else(|| "-".into(), time),
                a.duration()
                    .map_or_else(|| "-".into(), |d| format!("{} ms", d.as_millis())),
                a.status.map_or_else(|| "-".into(), |s| s.to_string()),
                shown,
            ]
        })
        .collect();
    table(
        &[
            "ATTEMPT", "OUTCOME", "NODE", "STARTED", "TOOK", "STATUS", "DETAIL",
        ],
        &rows,
    )
}

/// Prints `value` as pretty JSON.
pub(crate) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// A queue's settings as the tool's JSON and the service's write them.
pub(crate) fn queue_settings_json(s: &ttw_durable::QueueSettings) -> Value {
    let rate = s.limits.rate_limit();
    json!({
        "queue": s.queue,
        "paused": s.paused,
        "concurrency": s.limits.concurrency_limit(),
        "per_key_concurrency": s.limits.per_key_limit(),
        "max_attempts": s.retry.max_attempts_limit(),
        "backoff": s.retry.backoff_policy().map(|b| json!({
            "base_ms": b.base_delay().as_millis() as u64,
            "max_ms": b.max_delay().as_millis() as u64,
        })),
        "rate": rate.map(|r| json!({
            "count": r.count(),
            "period_ms": r.period().as_millis() as u64,
            "burst": r.burst_size(),
        })),
    })
}
