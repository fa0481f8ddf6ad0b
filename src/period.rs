//! `--once-per`: where the current period began, on the server's clock, in the user's time
//! zone. Calendar periods (hour, day, ISO week, month) follow the zone's rules, daylight
//! saving time included (a day may last 23 or 25 hours; a local hour is the span between two
//! whole local hours, so an hour repeated at the end of DST is two periods); a rolling
//! duration is the last DUR up to now.
//!
//! The time zone database is jiff's: the system's `/usr/share/zoneinfo` where it exists, and
//! else the copy built into the binary (a container `FROM scratch` has none).

use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::cli::Period;

/// The time zone named `name` (an IANA name), or why not.
pub fn zone(name: Option<&str>) -> Result<TimeZone, String> {
    match name {
        None => Ok(TimeZone::UTC),
        Some(name) => TimeZone::get(name).map_err(|_| {
            format!(
                "--timezone {name:?} is not a time zone known here (use an IANA name such as \
                 UTC, Europe/Berlin or America/New_York)"
            )
        }),
    }
}

/// The start (ms since 1970) of the period that contains `now_ms`.
pub fn start_ms(period: Period, tz: &TimeZone, now_ms: u64) -> Result<u64, String> {
    let now_ms = i64::try_from(now_ms).map_err(|_| "the server's clock is out of range")?;
    let bad = |e: jiff::Error| format!("cannot compute the period on the server's clock: {e}");
    let now = Timestamp::from_millisecond(now_ms).map_err(bad)?;
    let local = now.to_zoned(tz.clone());
    let start = match period {
        Period::Rolling(d) => {
            let d = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
            return Ok(u64::try_from(now_ms.saturating_sub(d)).unwrap_or(0));
        }
        Period::Hour => {
            // Back to the last whole local hour: the zone's offset may be a half hour.
            let into_hour = i64::from(local.minute()) * 60_000
                + i64::from(local.second()) * 1000
                + i64::from(local.subsec_nanosecond()) / 1_000_000;
            return Ok(u64::try_from(now_ms - into_hour).unwrap_or(0));
        }
        Period::Day => local.start_of_day().map_err(bad)?,
        Period::Week => {
            let back = i64::from(local.date().weekday().to_monday_zero_offset());
            let monday = local.date().checked_sub(back.days()).map_err(bad)?;
            monday
                .to_zoned(tz.clone())
                .and_then(|z| z.start_of_day())
                .map_err(bad)?
        }
        Period::Month => local
            .first_of_month()
            .and_then(|z| z.start_of_day())
            .map_err(bad)?,
    };
    Ok(u64::try_from(start.timestamp().as_millisecond()).unwrap_or(0))
}

/// Whether a success that started at `started_ms` counts for the period that contains
/// `now_ms`: it started in it (a success counts for the period in which it started, so a
/// run that crosses midnight does not use up the next day's), or later than `now_ms`. A
/// start after the server time read means clocks that disagree (a Redlock node ahead of the
/// median, a clock stepped back): it counts as done, since running at most once beats
/// running twice.
pub fn done_in(
    period: Period,
    tz: &TimeZone,
    now_ms: u64,
    started_ms: u64,
) -> Result<bool, String> {
    Ok(started_ms >= start_ms(period, tz, now_ms)?)
}

/// How a period is said in messages.
pub fn shown(period: Period, tz: &TimeZone) -> String {
    let zone = tz.iana_name().unwrap_or("UTC");
    match period {
        Period::Rolling(d) => format!("once per {}", humantime::format_duration(d)),
        Period::Hour => format!("once per hour ({zone})"),
        Period::Day => format!("once per day ({zone})"),
        Period::Week => format!("once per ISO week ({zone})"),
        Period::Month => format!("once per month ({zone})"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cli::LONGEST_ROLLING_PERIOD;
    use crate::lock::protocol::record::RETENTION;

    fn ms(rfc3339: &str) -> u64 {
        rfc3339.parse::<Timestamp>().unwrap().as_millisecond() as u64
    }

    fn start(period: Period, zone: &str, at: &str) -> u64 {
        start_ms(period, &TimeZone::get(zone).unwrap(), ms(at)).unwrap()
    }

    #[test]
    fn utc_calendar_periods() {
        let utc = "UTC";
        let at = "2026-03-18T13:45:10.250Z"; // a Wednesday
        assert_eq!(start(Period::Hour, utc, at), ms("2026-03-18T13:00:00Z"));
        assert_eq!(start(Period::Day, utc, at), ms("2026-03-18T00:00:00Z"));
        assert_eq!(start(Period::Week, utc, at), ms("2026-03-16T00:00:00Z"));
        assert_eq!(start(Period::Month, utc, at), ms("2026-03-01T00:00:00Z"));
        // A Monday is its own week's first day; a Sunday the last.
        assert_eq!(
            start(Period::Week, utc, "2026-03-16T00:00:00Z"),
            ms("2026-03-16T00:00:00Z")
        );
        assert_eq!(
            start(Period::Week, utc, "2026-03-22T23:59:59Z"),
            ms("2026-03-16T00:00:00Z")
        );
        assert_eq!(
            start(Period::Rolling(Duration::from_secs(3600)), utc, at),
            ms("2026-03-18T12:45:10.250Z")
        );
    }

    #[test]
    fn local_days_follow_daylight_saving_time() {
        let berlin = "Europe/Berlin";
        // 2026-03-29: clocks go from 02:00 to 03:00 CET->CEST (a 23-hour day).
        assert_eq!(
            start(Period::Day, berlin, "2026-03-29T20:00:00Z"),
            ms("2026-03-28T23:00:00Z")
        );
        assert_eq!(
            start(Period::Day, berlin, "2026-03-30T20:00:00Z"),
            ms("2026-03-29T22:00:00Z")
        );
        // 2026-10-25: back from 03:00 to 02:00 (a 25-hour day); 02:30 happens twice.
        assert_eq!(
            start(Period::Day, berlin, "2026-10-25T22:30:00Z"),
            ms("2026-10-24T22:00:00Z")
        );
        assert_eq!(
            start(Period::Hour, berlin, "2026-10-25T00:30:00Z"),
            ms("2026-10-25T00:00:00Z")
        );
        assert_eq!(
            start(Period::Hour, berlin, "2026-10-25T01:30:00Z"),
            ms("2026-10-25T01:00:00Z")
        );
        // Half-hour offsets: the local hour starts at :30 UTC.
        assert_eq!(
            start(Period::Hour, "Asia/Kolkata", "2026-01-01T10:10:00Z"),
            ms("2026-01-01T09:30:00Z")
        );
        // A month and a week in New York (UTC-5 in winter, UTC-4 from March 8).
        assert_eq!(
            start(Period::Month, "America/New_York", "2026-04-01T03:00:00Z"),
            ms("2026-03-01T05:00:00Z")
        );
        assert_eq!(
            start(Period::Week, "America/New_York", "2026-03-11T12:00:00Z"),
            ms("2026-03-09T04:00:00Z")
        );
    }

    #[test]
    fn a_success_counts_for_the_period_it_started_in() {
        let utc = TimeZone::UTC;
        let now = ms("2026-05-02T00:00:05Z");
        assert!(!done_in(Period::Day, &utc, now, ms("2026-05-01T23:59:59Z")).unwrap());
        assert!(done_in(Period::Day, &utc, now, ms("2026-05-02T00:00:00Z")).unwrap());
        let six_hours = Period::Rolling(Duration::from_secs(6 * 3600));
        assert!(done_in(six_hours, &utc, now, ms("2026-05-01T19:00:00Z")).unwrap());
        assert!(!done_in(six_hours, &utc, now, ms("2026-05-01T17:00:00Z")).unwrap());
    }

    #[test]
    fn a_success_that_starts_after_now_counts_as_done() {
        // Clocks that disagree (a Redlock node ahead, a clock stepped back): at most once.
        let utc = TimeZone::UTC;
        let now = ms("2026-05-02T00:00:05Z");
        assert!(done_in(Period::Day, &utc, now, ms("2026-05-02T00:00:10Z")).unwrap());
        assert!(done_in(Period::Day, &utc, now, ms("2026-05-03T08:00:00Z")).unwrap());
        let hour = Period::Rolling(Duration::from_secs(3600));
        assert!(done_in(hour, &utc, now, ms("2026-05-02T00:00:06Z")).unwrap());
    }

    #[test]
    fn unknown_zones_are_refused_and_records_outlive_every_period() {
        assert!(zone(Some("Mars/Olympus_Mons")).is_err());
        assert!(zone(Some("Europe/Berlin")).is_ok());
        assert_eq!(zone(None).unwrap(), TimeZone::UTC);
        let longest_month = Duration::from_secs(31 * 24 * 3600 + 3600);
        assert!(RETENTION > longest_month);
        assert!(RETENTION > LONGEST_ROLLING_PERIOD);
    }
}
