//! Recurring schedules' unit tests.

use super::*;

#[test]
fn bad_definitions_are_refused_and_say_why() {
    let cases = [
        (
            Recurring::cron("a", "61 * * * *"),
            "invalid minute field '61'",
        ),
        (
            Recurring::cron("a", "0 0 25 * * *"),
            "invalid hour field '25'",
        ),
        (
            Recurring::cron("a", "* * 32 * *"),
            "invalid day of month field",
        ),
        (Recurring::cron("a", "* * * 13 *"), "invalid month field"),
        (
            Recurring::cron("a", "* * * * FUNDAY"),
            "invalid day of week field",
        ),
        (Recurring::cron("a", "* * *"), "has 3 fields"),
        (
            Recurring::cron("a", "* * * * *").time_zone("Mars/Olympus"),
            "unknown time zone 'Mars/Olympus'",
        ),
        (
            Recurring::every("a", Duration::ZERO),
            "the interval is zero",
        ),
        (
            Recurring::every("a", Duration::from_millis(10)),
            "shorter than MIN_INTERVAL",
        ),
        (
            Recurring::every("a", Duration::from_secs(5)).time_zone("UTC"),
            "has no time zone",
        ),
        (
            Recurring::every("", Duration::from_secs(5)),
            "name is empty",
        ),
        (
            Recurring::every("x".repeat(MAX_RECURRING_NAME + 1), Duration::from_secs(5)),
            "longer than MAX_RECURRING_NAME",
        ),
        (Recurring::every("a b", Duration::from_secs(5)), "holds ' '"),
    ];
    for (schedule, want) in cases {
        let err = schedule
            .check()
            .err()
            .unwrap_or_else(|| panic!("{schedule:?} was accepted"));
        assert!(err.is_invalid_schedule(), "{err}");
        assert!(err.to_string().contains(want), "{err} (wanted {want:?})");
    }
}
