//! How the commands show instants and durations: RFC 3339 or relative for people, never raw
//! epoch milliseconds (those are for `--json`, beside the RFC 3339 form).

use chrono::{DateTime, Local, SecondsFormat, Utc};
use chrono_tz::Tz;

/// `ms` since the epoch as RFC 3339 in UTC, to the millisecond when it has any:
/// `2026-03-08T07:00:00+00:00`, `2026-03-08T07:00:00.250+00:00`. A value out of chrono's range
/// (damaged data) is shown as the number it is rather than hidden.
pub(crate) fn rfc3339(ms: i64) -> String {
    crate::notify::rfc3339(ms).unwrap_or_else(|| ms.to_string())
}

/// The zone this machine's clock runs in, as cron reads it (`TZ`, then the system's setting);
/// UTC when it cannot be told.
pub(super) fn machine_zone() -> Tz {
    std::env::var("TZ")
        .ok()
        .and_then(|name| name.trim_start_matches(':').parse().ok())
        .or_else(|| iana_time_zone::get_timezone().ok()?.parse().ok())
        .unwrap_or(chrono_tz::UTC)
}

/// Whether `zone` keeps UTC's clock all year (`UTC`, `Etc/UTC`, `Etc/GMT`...): a machine set
/// to one reads a job's hours as a job with no timezone does.
pub(super) fn on_utc_clock(zone: Tz) -> bool {
    use chrono::Offset;
    let now = Utc::now();
    [now, now + chrono::Duration::days(182)]
        .iter()
        .all(|at| at.with_timezone(&zone).offset().fix().local_minus_utc() == 0)
}

/// A fire in its job's zone, RFC 3339 with the zone's offset and whole seconds:
/// `2026-03-08T03:00:00-04:00`. What `next` prints, one a line, for scripts too.
pub(super) fn format_fire(fire: DateTime<Utc>, zone: Tz) -> String {
    fire.with_timezone(&zone)
        .to_rfc3339_opts(SecondsFormat::Secs, false)
}

/// How long before `now_ms` the instant `at_ms` was, precise as [`duration`]: `1.2 s ago`. For
/// heartbeats and outcomes, where a second matters.
pub(crate) fn ago(now_ms: i64, at_ms: i64) -> String {
    format!("{} ago", duration(now_ms - at_ms))
}

/// `at_ms` from `now_ms`'s point of view, coarse: `in 2 h 5 min`, `3 min ago`, or `now` within
/// a second either way.
pub(crate) fn relative(now_ms: i64, at_ms: i64) -> String {
    let offset = at_ms - now_ms;
    if offset.abs() < 1000 {
        "now".to_owned()
    } else if offset > 0 {
        format!("in {}", elapsed(offset))
    } else {
        format!("{} ago", elapsed(-offset))
    }
}

/// `at_ms` on this machine's wall clock, as people read it: the time of day, with the date when
/// it is not the day of `now_ms`.
pub(crate) fn local_time(now_ms: i64, at_ms: i64) -> String {
    let local = |ms: i64| DateTime::from_timestamp_millis(ms).map(|at| at.with_timezone(&Local));
    match (local(now_ms), local(at_ms)) {
        (Some(now), Some(at)) if now.date_naive() == at.date_naive() => {
            at.format("%H:%M:%S").to_string()
        }
        (_, Some(at)) => at.format("%Y-%m-%d %H:%M:%S").to_string(),
        (_, None) => at_ms.to_string(),
    }
}

/// A span in the largest units that matter, for how long something has waited or will:
/// `45 s`, `2 min`, `3 h 5 min`, `2 d 4 h`.
pub(crate) fn elapsed(ms: i64) -> String {
    let seconds = ms.max(0) / 1000;
    let (days, hours, minutes) = (
        seconds / 86_400,
        seconds % 86_400 / 3600,
        seconds % 3600 / 60,
    );
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3600 => format!("{minutes} min"),
        3600..86_400 if minutes == 0 => format!("{hours} h"),
        3600..86_400 => format!("{hours} h {minutes} min"),
        _ if hours == 0 => format!("{days} d"),
        _ => format!("{days} d {hours} h"),
    }
}

/// How long a run took, precise where runs usually are: `0.25 s`, `1.2 s`, `45 s`, `3 min 5 s`,
/// then as [`elapsed`] from an hour on.
pub(crate) fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1000 => format!("{:.2} s", ms as f64 / 1000.0),
        1000..10_000 => format!("{:.1} s", ms as f64 / 1000.0),
        10_000..60_000 => format!("{} s", ms / 1000),
        60_000..3_600_000 if ms / 1000 % 60 == 0 => elapsed(ms),
        60_000..3_600_000 => format!("{} min {} s", ms / 60_000, ms / 1000 % 60),
        _ => elapsed(ms),
    }
}

/// An instant as a person gives one to a filter (the runs listed since or until it): RFC 3339
/// (`2026-03-08T09:00:00Z`), or a span before `now_ms` as `--in` reads spans (`90m`, `2h`,
/// `7d`, `2h ago`). Ms since the epoch.
///
/// # Errors
/// Neither form, said with the text given.
pub(crate) fn parse_instant(text: &str, now_ms: i64) -> Result<i64, String> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.timestamp_millis());
    }
    let span = text.strip_suffix("ago").unwrap_or(text).trim();
    humantime::parse_duration(span)
        .ok()
        .and_then(|span| i64::try_from(span.as_millis()).ok())
        .map(|span_ms| now_ms.saturating_sub(span_ms))
        .ok_or_else(|| {
            format!(
                "\"{text}\" is no instant: give an RFC 3339 time (2026-03-08T09:00:00Z) or a \
                 span before now (90m, 2h, 7d)"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_the_units_that_matter() {
        for (ms, shown) in [
            (250, "0.25 s"),
            (1_234, "1.2 s"),
            (45_900, "45 s"),
            (120_000, "2 min"),
            (185_000, "3 min 5 s"),
            (3_600_000, "1 h"),
            (11_100_000, "3 h 5 min"),
            (-5, "0.00 s"),
        ] {
            assert_eq!(duration(ms), shown, "{ms}");
        }
    }

    #[test]
    fn instants_read_as_rfc3339_or_relative_to_now() {
        assert_eq!(rfc3339(1_000), "1970-01-01T00:00:01+00:00");
        assert_eq!(rfc3339(1_250), "1970-01-01T00:00:01.250+00:00");
        assert_eq!(relative(10_000, 10_400), "now");
        assert_eq!(relative(0, 7_500_000), "in 2 h 5 min");
        assert_eq!(relative(200_000, 20_000), "3 min ago");
        assert_eq!(ago(2_500, 1_300), "1.2 s ago");
    }

    #[test]
    fn a_filters_instant_reads_as_rfc3339_or_a_span_before_now() {
        let now = 1_767_225_600_000;
        assert_eq!(
            parse_instant("2026-01-01T00:00:00Z", 0),
            Ok(1_767_225_600_000)
        );
        assert_eq!(parse_instant("2h", now), Ok(now - 7_200_000));
        assert_eq!(parse_instant(" 90m ago ", now), Ok(now - 5_400_000));
        assert!(parse_instant("yesterday", now).is_err_and(|error| error.contains("yesterday")));
    }

    #[test]
    fn spans_read_in_the_largest_units_that_matter() {
        for (ms, text) in [
            (-5, "0 s"),
            (999, "0 s"),
            (45_000, "45 s"),
            (120_400, "2 min"),
            (3_599_999, "59 min"),
            (3_600_000, "1 h"),
            (11_100_000, "3 h 5 min"),
            (86_400_000, "1 d"),
            (187_200_000, "2 d 4 h"),
        ] {
            assert_eq!(elapsed(ms), text, "{ms} ms");
        }
    }

    #[test]
    fn a_time_of_today_is_shown_without_its_date() {
        let now = DateTime::parse_from_rfc3339("2026-03-08T12:00:00Z")
            .expect("time")
            .timestamp_millis();
        let local = |ms: i64| {
            DateTime::from_timestamp_millis(ms)
                .expect("in range")
                .with_timezone(&Local)
        };
        let earlier = now - 90_000;
        let expected = if local(earlier).date_naive() == local(now).date_naive() {
            local(earlier).format("%H:%M:%S").to_string()
        } else {
            local(earlier).format("%Y-%m-%d %H:%M:%S").to_string()
        };
        assert_eq!(local_time(now, earlier), expected);
        let long_ago = now - 3 * 86_400_000;
        assert_eq!(
            local_time(now, long_ago),
            local(long_ago).format("%Y-%m-%d %H:%M:%S").to_string()
        );
    }
}
