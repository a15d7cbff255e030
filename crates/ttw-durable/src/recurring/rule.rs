//! A recurring schedule's rule, pure: a cron expression parsed (naming the
//! field at fault when it does not parse) in a time zone, or a fixed
//! interval, and the arithmetic of its occurrences: the next after a time,
//! the first after registration, and those missed before a cutoff.

use chrono::{DateTime, TimeZone};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;

use super::MAX_CATCH_UP;
use crate::error::Error;

/// The names of a cron expression's fields, for five fields and for six.
const FIVE: [&str; 5] = ["minute", "hour", "day of month", "month", "day of week"];
const SIX: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day of month",
    "month",
    "day of week",
];

fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// Parses a cron expression; an invalid one fails naming the field at
/// fault: the one whose replacement by `*` makes the expression valid.
pub(super) fn parse_cron(expression: &str) -> Result<Cron, Error> {
    refuse_empty_items(expression)?;
    let parser = parser();
    match parser.parse(expression) {
        Ok(cron) => Ok(cron),
        Err(err) => {
            let fields: Vec<&str> = expression.split_whitespace().collect();
            let names: &[&str] = match fields.len() {
                5 => &FIVE,
                6 => &SIX,
                n if !expression.trim_start().starts_with('@') => {
                    return Err(Error::invalid_schedule(format!(
                        "the cron expression '{expression}' has {n} fields; it needs 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)"
                    )))
                }
                _ => &[],
            };
            for (i, name) in names.iter().enumerate() {
                let mut trial = fields.clone();
                trial[i] = "*";
                if parser.parse(&trial.join(" ")).is_ok() {
                    return Err(Error::invalid_schedule(format!(
                        "the cron expression '{expression}' has an invalid {name} field '{}' ({err})",
                        fields[i]
                    )));
                }
            }
            Err(Error::invalid_schedule(format!(
                "the cron expression '{expression}' is invalid ({err})"
            )))
        }
    }
}

/// `t` (ms since the epoch) down to its whole second.
///
/// The cron library counts in whole seconds and drops the milliseconds of a
/// time it is given: every time that crosses into it is rounded here, in
/// the direction its use needs, so a cutoff of 10:00:02.500 is never read
/// as 10:00:02. Occurrences come out on whole seconds, so the milliseconds
/// they carry are exact.
fn floor_second(t: i64) -> i64 {
    t.div_euclid(1000) * 1000
}

/// `t` (ms since the epoch) up to its whole second (see [`floor_second`]).
fn ceil_second(t: i64) -> Result<i64, Error> {
    floor_second(t)
        .checked_add(if t.rem_euclid(1000) == 0 { 0 } else { 1000 })
        .ok_or_else(|| Error::out_of_range("an occurrence's time"))
}

/// Refuses a list with an empty item (`1,,2`, `,5`, `5,`), naming the
/// field: the cron library reads it as if the item were not there, where a
/// user most likely lost a number.
fn refuse_empty_items(expression: &str) -> Result<(), Error> {
    let fields: Vec<&str> = expression.split_whitespace().collect();
    let names: &[&str] = match fields.len() {
        5 => &FIVE,
        6 => &SIX,
        _ => return Ok(()),
    };
    for (field, name) in fields.iter().zip(names) {
        if field.contains(',') && field.split(',').any(str::is_empty) {
            return Err(Error::invalid_schedule(format!(
                "the cron expression '{expression}' has an invalid {name} field '{field}' (a list with an empty item)"
            )));
        }
    }
    Ok(())
}

/// When a schedule recurs, parsed: occurrences as milliseconds since the
/// Unix epoch.
pub(super) enum Rule {
    Cron(Box<Cron>, Tz),
    /// Every this many ms, from the schedule's `next_at`.
    Every(i64),
}

impl Rule {
    fn at(zone: Tz, t: i64) -> Result<DateTime<Tz>, Error> {
        zone.timestamp_millis_opt(t)
            .single()
            .ok_or_else(|| Error::out_of_range("an occurrence's time"))
    }

    fn cron_err(err: croner::errors::CronError) -> Error {
        Error::invalid_schedule(format!("no next occurrence: {err}"))
    }

    /// The first occurrence strictly after `t` (for an interval, `t` is an
    /// occurrence).
    pub(super) fn after(&self, t: i64) -> Result<i64, Error> {
        match self {
            // Strictly after `t` is strictly after its whole second.
            Rule::Cron(cron, zone) => Ok(cron
                .find_next_occurrence(&Rule::at(*zone, floor_second(t))?, false)
                .map_err(Rule::cron_err)?
                .timestamp_millis()),
            Rule::Every(every) => t
                .checked_add(*every)
                .ok_or_else(|| Error::out_of_range("an occurrence's time")),
        }
    }

    /// The occurrences from `next` (an occurrence) on that are before
    /// `cutoff`: how many there are at most `MAX_CATCH_UP` of the latest
    /// (oldest first), and the first occurrence at or after `cutoff`.
    pub(super) fn missed(&self, next: i64, cutoff: i64) -> Result<(Vec<i64>, i64), Error> {
        if next >= cutoff {
            return Ok((Vec::new(), next));
        }
        match self {
            Rule::Every(every) => {
                let n = (cutoff - next + every - 1) / every;
                let first_kept = next + n * every;
                let keep = n.min(MAX_CATCH_UP as i64);
                let latest = (n - keep..n).map(|k| next + k * every).collect();
                Ok((latest, first_kept))
            }
            Rule::Cron(cron, zone) => {
                // At or after `cutoff` is at or after its second rounded
                // up, and before `cutoff` is before that second.
                let cut = Rule::at(*zone, ceil_second(cutoff)?)?;
                let first_kept = cron
                    .find_next_occurrence(&cut, true)
                    .map_err(Rule::cron_err)?
                    .timestamp_millis();
                let mut latest = Vec::new();
                let mut at = cut;
                while latest.len() < MAX_CATCH_UP {
                    let Ok(prev) = cron.find_previous_occurrence(&at, false) else {
                        break;
                    };
                    if prev.timestamp_millis() < next {
                        break;
                    }
                    latest.push(prev.timestamp_millis());
                    at = prev;
                }
                latest.reverse();
                Ok((latest, first_kept))
            }
        }
    }

    /// The first occurrence of a schedule registered at `now`.
    pub(super) fn first(&self, now: i64) -> Result<i64, Error> {
        self.after(now)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::Recurring;
    use super::*;

    fn utc(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    fn occurrences(rule: &Rule, from: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::new();
        let mut t = from;
        for _ in 0..n {
            t = rule.after(t).unwrap();
            out.push(t);
        }
        out
    }

    /// Berlin springs forward at 02:00 on 29 March 2026 (to 03:00 CEST):
    /// a job at 02:30 runs right after the gap, at 03:00 CEST (01:00 UTC),
    /// once; the days around it at 02:30 local.
    #[test]
    fn a_nightly_job_in_the_spring_forward_gap_runs_once_after_it() {
        let rule = Recurring::cron("n", "0 30 2 * * *")
            .time_zone("Europe/Berlin")
            .check()
            .unwrap();
        let got = occurrences(&rule, utc("2026-03-27T12:00:00Z"), 4);
        assert_eq!(
            got,
            vec![
                utc("2026-03-28T01:30:00Z"), // 02:30 CET
                utc("2026-03-29T01:00:00Z"), // 03:00 CEST, right after the gap
                utc("2026-03-30T00:30:00Z"), // 02:30 CEST
                utc("2026-03-31T00:30:00Z"),
            ]
        );
    }

    /// Berlin falls back at 03:00 CEST on 25 October 2026 (to 02:00 CET):
    /// a job at 02:30 runs once, at the first 02:30 (CEST); a job every 30
    /// minutes runs through both 02:xx hours, an hour of real time apart.
    #[test]
    fn in_the_fall_back_hour_a_fixed_job_runs_once_and_a_frequent_one_twice() {
        let nightly = Recurring::cron("n", "0 30 2 * * *")
            .time_zone("Europe/Berlin")
            .check()
            .unwrap();
        assert_eq!(
            occurrences(&nightly, utc("2026-10-24T12:00:00Z"), 3),
            vec![
                utc("2026-10-25T00:30:00Z"), // 02:30 CEST
                utc("2026-10-26T01:30:00Z"), // 02:30 CET, the next night
                utc("2026-10-27T01:30:00Z"),
            ]
        );
        let half_hourly = Recurring::cron("h", "0 */30 * * * *")
            .time_zone("Europe/Berlin")
            .check()
            .unwrap();
        assert_eq!(
            occurrences(&half_hourly, utc("2026-10-24T23:45:00Z"), 5),
            vec![
                utc("2026-10-25T00:00:00Z"), // 02:00 CEST
                utc("2026-10-25T00:30:00Z"), // 02:30 CEST
                utc("2026-10-25T01:00:00Z"), // 02:00 CET
                utc("2026-10-25T01:30:00Z"), // 02:30 CET
                utc("2026-10-25T02:00:00Z"), // 03:00 CET
            ]
        );
    }

    #[test]
    fn missed_occurrences_are_the_latest_before_the_cutoff() {
        let every = Recurring::every("e", Duration::from_secs(10))
            .check()
            .unwrap();
        let (missed, next) = every.missed(1_000, 35_000).unwrap();
        assert_eq!(missed, vec![1_000, 11_000, 21_000, 31_000]);
        assert_eq!(next, 41_000);
        assert_eq!(every.missed(41_000, 35_000).unwrap(), (vec![], 41_000));
        // A year of seconds missed: only the latest MAX_CATCH_UP, at once.
        let second = Recurring::every("s", Duration::from_secs(1))
            .check()
            .unwrap();
        let year = 365 * 86_400_000;
        let (missed, next) = second.missed(0, year).unwrap();
        assert_eq!(missed.len(), MAX_CATCH_UP);
        assert_eq!(*missed.last().unwrap(), year - 1000);
        assert_eq!(next, year);

        let cron = Recurring::cron("c", "0 * * * *").check().unwrap();
        let start = utc("2026-01-01T00:00:00Z");
        let (missed, next) = cron.missed(start, utc("2026-01-01T03:30:00Z")).unwrap();
        assert_eq!(
            missed,
            vec![
                start,
                utc("2026-01-01T01:00:00Z"),
                utc("2026-01-01T02:00:00Z"),
                utc("2026-01-01T03:00:00Z")
            ]
        );
        assert_eq!(next, utc("2026-01-01T04:00:00Z"));
    }

    /// Regression: the cutoff lost its milliseconds on its way into the
    /// cron library, so an occurrence up to 999 ms older than the cutoff
    /// counted as on time: with a cutoff 500 ms after an every-second
    /// occurrence, that occurrence was taken as the first on time (and run
    /// under `CatchUp::Skip`), and the missed list ended a second early.
    #[test]
    fn a_cron_cutoff_keeps_its_milliseconds() {
        let cron = Recurring::cron("c", "* * * * * *").check().unwrap();
        let start = utc("2026-01-01T00:00:00Z");
        let (missed, next) = cron.missed(start, start + 2_500).unwrap();
        assert_eq!(missed, vec![start, start + 1_000, start + 2_000]);
        assert_eq!(next, start + 3_000);
        // A cutoff on a whole second: that occurrence is on time.
        let (missed, next) = cron.missed(start, start + 2_000).unwrap();
        assert_eq!(missed, vec![start, start + 1_000]);
        assert_eq!(next, start + 2_000);
        // A minute cron whose cutoff falls in the first second after an
        // occurrence.
        let minute = Recurring::cron("m", "* * * * *").check().unwrap();
        let (missed, next) = minute.missed(start, start + 60_001).unwrap();
        assert_eq!(missed, vec![start, start + 60_000]);
        assert_eq!(next, start + 120_000);
        // Strictly after a time with milliseconds, and before the epoch.
        assert_eq!(cron.after(start + 999).unwrap(), start + 1_000);
        assert_eq!(cron.after(start + 1_000).unwrap(), start + 2_000);
        assert_eq!(cron.after(-1_500).unwrap(), -1_000);
        assert_eq!(floor_second(-1_500), -2_000);
        assert_eq!(ceil_second(-1_500).unwrap(), -1_000);
        assert_eq!(ceil_second(-2_000).unwrap(), -2_000);
    }

    /// Regression: a list with an empty item (`1,,2`) was accepted, read as
    /// if the item were not there. It is refused naming the field; `?` in
    /// the day fields is accepted, documented as "any day" (as `*`).
    #[test]
    fn an_empty_list_item_is_refused_naming_its_field() {
        for (expression, field) in [
            ("1,,2 * * * *", "minute field '1,,2'"),
            ("0 ,5 * * *", "hour field ',5'"),
            ("0 0 1, * *", "day of month field '1,'"),
            ("0 1,,2 * * * *", "minute field '1,,2'"),
        ] {
            let err = parse_cron(expression).err().unwrap();
            assert!(err.is_invalid_schedule(), "{err}");
            assert!(err.to_string().contains(field), "{expression}: {err}");
        }
        let any_day = parse_cron("0 0 ? * *").unwrap();
        let every_day = parse_cron("0 0 * * *").unwrap();
        let t = Rule::at(chrono_tz::UTC, utc("2026-01-01T12:00:00Z")).unwrap();
        assert_eq!(
            any_day.find_next_occurrence(&t, false).unwrap(),
            every_day.find_next_occurrence(&t, false).unwrap()
        );
        assert!(
            parse_cron("? 0 * * *").is_err(),
            "`?` only in the day fields"
        );
    }
}
