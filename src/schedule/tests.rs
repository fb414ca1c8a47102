//! Fires in real time zones: Debian cron's DST rules, `@every`, and properties of the search.

use chrono::{DateTime, Duration, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use proptest::prelude::*;

use super::Schedule;

const NEW_YORK: Tz = chrono_tz::America::New_York;

fn local(tz: Tz, text: &str) -> DateTime<Utc> {
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").expect("test time");
    tz.from_local_datetime(&naive)
        .earliest()
        .expect("an existing local time")
        .with_timezone(&Utc)
}

/// Every fire from `start` to `end` (both local, inclusive), as `HH:MM ZONE`.
fn fires(expr: &str, tz: Tz, start: &str, end: &str) -> Vec<String> {
    let schedule = Schedule::parse(expr).expect("valid expression");
    let (start, end) = (local(tz, start), local(tz, end));
    schedule
        .fires_after(start - Duration::seconds(1), tz)
        .take_while(|fire| *fire <= end)
        .map(|fire| fire.with_timezone(&tz).format("%H:%M %Z").to_string())
        .collect()
}

#[test]
fn spring_forward_fixed_time_job_runs_at_the_first_instant_after_the_jump() {
    let day = ("2026-03-08 00:00:00", "2026-03-08 23:59:59");
    assert_eq!(fires("30 2 * * *", NEW_YORK, day.0, day.1), ["03:00 EDT"]);
    assert_eq!(fires("0,30 2 * * *", NEW_YORK, day.0, day.1), ["03:00 EDT"]);
    assert_eq!(
        fires("30 1-3 * * *", NEW_YORK, day.0, day.1),
        ["01:30 EST", "03:00 EDT", "03:30 EDT"]
    );
}

#[test]
fn spring_forward_fixed_time_job_runs_once_per_distinct_instant() {
    let day = ("2026-03-08 00:00:00", "2026-03-08 23:59:59");
    // 02:00 is skipped onto 03:00, which the job also names: one run.
    assert_eq!(fires("0 2,3 * * *", NEW_YORK, day.0, day.1), ["03:00 EDT"]);
    // Sixty second-level matches inside the gap: one run.
    assert_eq!(fires("* 30 2 * * *", NEW_YORK, day.0, day.1), ["03:00 EDT"]);
}

#[test]
fn spring_forward_wildcard_job_skips_the_gap() {
    assert_eq!(
        fires(
            "*/30 * * * *",
            NEW_YORK,
            "2026-03-08 01:00:00",
            "2026-03-08 03:59:59"
        ),
        ["01:00 EST", "01:30 EST", "03:00 EDT", "03:30 EDT"]
    );
    assert!(
        fires(
            "* 2 * * *",
            NEW_YORK,
            "2026-03-08 00:00:00",
            "2026-03-08 23:59:59"
        )
        .is_empty()
    );
}

#[test]
fn fall_back_fixed_time_job_runs_in_the_first_pass_only() {
    let day = ("2026-11-01 00:00:00", "2026-11-01 23:59:59");
    assert_eq!(fires("30 1 * * *", NEW_YORK, day.0, day.1), ["01:30 EDT"]);
    assert_eq!(
        fires("30 1-3 * * *", NEW_YORK, day.0, day.1),
        ["01:30 EDT", "02:30 EST", "03:30 EST"]
    );
    assert_eq!(
        fires("0,30 1 * * *", NEW_YORK, day.0, day.1),
        ["01:00 EDT", "01:30 EDT"]
    );
}

#[test]
fn fall_back_wildcard_job_runs_in_both_passes_in_utc_order() {
    assert_eq!(
        fires(
            "0 * * * *",
            NEW_YORK,
            "2026-11-01 00:00:00",
            "2026-11-01 03:00:00"
        ),
        [
            "00:00 EDT",
            "01:00 EDT",
            "01:00 EST",
            "02:00 EST",
            "03:00 EST"
        ]
    );
    assert_eq!(
        fires(
            "*/30 1 * * *",
            NEW_YORK,
            "2026-11-01 00:00:00",
            "2026-11-01 03:00:00"
        ),
        ["01:00 EDT", "01:30 EDT", "01:00 EST", "01:30 EST"]
    );
    assert_eq!(
        fires(
            "@hourly",
            NEW_YORK,
            "2026-11-01 00:30:00",
            "2026-11-01 02:00:00"
        ),
        ["01:00 EDT", "01:00 EST", "02:00 EST"]
    );
}

#[test]
fn search_started_inside_the_first_pass_finds_the_second_pass() {
    let schedule = Schedule::parse("*/30 * * * *").expect("valid");
    // 01:45 EDT, in the first pass: the next wall-clock match (02:00) lies after the whole
    // repeated hour, but 01:00 EST comes first.
    let after = local(NEW_YORK, "2026-11-01 01:45:00");
    let next = schedule.next_after(after, NEW_YORK).expect("a fire");
    assert_eq!(
        next.with_timezone(&NEW_YORK).to_rfc3339(),
        "2026-11-01T01:00:00-05:00"
    );
    // A fixed-time job started at the same place goes on to the next day.
    let fixed = Schedule::parse("0 1 * * *").expect("valid");
    assert_eq!(
        fixed
            .next_after(after, NEW_YORK)
            .expect("a fire")
            .with_timezone(&NEW_YORK)
            .to_rfc3339(),
        "2026-11-02T01:00:00-05:00"
    );
}

#[test]
fn half_hour_dst_zone_follows_the_same_rules() {
    // Lord Howe Island moves its clocks by 30 minutes: 02:00 -> 02:30 on 2026-10-04.
    let lord_howe = chrono_tz::Australia::Lord_Howe;
    assert_eq!(
        fires(
            "15 2 * * *",
            lord_howe,
            "2026-10-04 00:00:00",
            "2026-10-04 23:59:59"
        ),
        ["02:30 +11"]
    );
    assert_eq!(
        fires(
            "*/15 2 * * *",
            lord_howe,
            "2026-10-04 00:00:00",
            "2026-10-04 23:59:59"
        ),
        ["02:30 +11", "02:45 +11"]
    );
}

#[test]
fn zones_without_dst_and_utc_fire_on_the_wall_clock() {
    assert_eq!(
        fires(
            "0 9 * * mon-fri",
            chrono_tz::Asia::Tokyo,
            "2026-06-05 00:00:00",
            "2026-06-08 23:59:59"
        ),
        ["09:00 JST", "09:00 JST"]
    );
    assert_eq!(
        fires(
            "0 0 1 * *",
            chrono_tz::UTC,
            "2026-01-15 00:00:00",
            "2026-03-15 00:00:00"
        ),
        ["00:00 UTC", "00:00 UTC"]
    );
}

#[test]
fn every_is_anchored_at_the_epoch() {
    let schedule = Schedule::parse("@every 7s").expect("valid");
    let after = DateTime::from_timestamp(1_000_000_003, 500_000_000).expect("valid");
    let fires: Vec<i64> = schedule
        .fires_after(after, NEW_YORK)
        .take(3)
        .map(|fire| fire.timestamp_millis())
        .collect();
    assert_eq!(
        fires,
        [1_000_000_008_000, 1_000_000_015_000, 1_000_000_022_000]
    );
    for fire in fires {
        assert_eq!(fire % 7_000, 0);
    }
    let hourly = Schedule::parse("@EVERY 1h 30m").expect("valid");
    let next = hourly.next_after(after, NEW_YORK).expect("a fire");
    assert_eq!(next.timestamp() % 5_400, 0);
}

#[test]
fn every_rejects_missing_tiny_and_unreadable_durations() {
    for (expr, expected) in [
        ("@every", "the duration is missing"),
        ("@every 500ms", "shorter than 1s"),
        ("@every soon", "@every \"soon\""),
        ("@every 1500us", "shorter than 1s"),
        ("@every 1s 1us", "whole number of milliseconds"),
    ] {
        let message = Schedule::parse(expr).expect_err(expr).to_string();
        assert!(message.contains(expected), "{expr}: {message}");
    }
    assert!(Schedule::parse("@everyday").is_err());
}

fn field(range: std::ops::RangeInclusive<u32>) -> impl Strategy<Value = String> {
    let (low, high) = (*range.start(), *range.end());
    prop_oneof![
        Just("*".to_owned()),
        (1..=high).prop_map(|step| format!("*/{step}")),
        (low..=high).prop_map(|value| value.to_string()),
        (low..=high, low..=high, 1..=high)
            .prop_map(|(a, b, step)| { format!("{}-{}/{step}", a.min(b), a.max(b)) }),
        proptest::collection::vec(low..=high, 1..4).prop_map(|values| {
            values
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        }),
    ]
}

fn expression() -> impl Strategy<Value = String> {
    (
        field(0..=59),
        field(0..=23),
        field(1..=28),
        field(1..=12),
        field(0..=7),
    )
        .prop_map(|(minute, hour, day, month, weekday)| {
            format!("{minute} {hour} {day} {month} {weekday}")
        })
}

fn zone() -> impl Strategy<Value = Tz> {
    prop_oneof![
        Just(NEW_YORK),
        Just(chrono_tz::Europe::London),
        Just(chrono_tz::Australia::Lord_Howe),
        Just(chrono_tz::America::Sao_Paulo),
        Just(chrono_tz::UTC),
    ]
}

proptest! {
    #[test]
    fn parser_never_panics_on_arbitrary_text(text in "\\PC{0,40}") {
        let _ = Schedule::parse(&text);
    }

    #[test]
    fn parser_never_panics_on_cron_like_text(text in "[0-9*/,@ a-z-]{0,40}") {
        let _ = Schedule::parse(&text);
    }

    /// No fire lies between `after` and the next fire: searching again from any instant in
    /// between finds the same fire. This holds across every DST change in the window.
    #[test]
    fn next_fire_is_the_first_after_any_instant_before_it(
        expr in expression(),
        tz in zone(),
        start in 1_760_000_000i64..1_800_000_000,
        fraction in 0.0f64..1.0,
    ) {
        let schedule = Schedule::parse(&expr).expect("generated expressions are valid");
        let after = DateTime::from_timestamp(start, 0).expect("valid");
        if let Some(next) = schedule.next_after(after, tz) {
            prop_assert!(next > after);
            let span = (next - after).num_seconds();
            let between = after + Duration::seconds((span as f64 * fraction) as i64);
            prop_assert_eq!(schedule.next_after(between, tz), Some(next));
        }
    }
}
