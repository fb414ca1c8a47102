use super::*;
use chrono::{Datelike, NaiveDate, Timelike, Weekday};

fn wall(text: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S").expect("test time")
}

/// The next `n` matching wall-clock times after `start`.
fn walls(expr: &str, start: &str, n: usize) -> Vec<String> {
    let expr = CronExpr::parse(expr).expect("valid expression");
    let mut at = wall(start);
    (0..n)
        .map(|_| {
            at = expr.next_wall_time(at, false).expect("a next fire");
            at.format("%Y-%m-%d %H:%M:%S").to_string()
        })
        .collect()
}

fn error(expr: &str) -> String {
    CronExpr::parse(expr)
        .expect_err("expression must be refused")
        .to_string()
}

#[test]
fn expressions_that_mean_the_same_build_the_same_small_matcher() {
    let daily = CronExpr::parse("@daily").expect("valid");
    let same = CronExpr::parse("0  0 * * *").expect("valid");
    let other = CronExpr::parse("0 0 1 * *").expect("valid");
    assert_eq!(daily.matcher, same.matcher, "one meaning, one matcher");
    assert_ne!(daily.matcher, other.matcher);
    // A schedule costs its bits, not a structure per expression: 100,000 distinct expressions
    // must fit in a few MB.
    assert!(std::mem::size_of::<CronExpr>() <= 40);
}

#[test]
fn plain_fields_lists_ranges_and_steps() {
    assert_eq!(
        walls("5,10 */6 * * *", "2026-01-01 00:00:00", 4),
        [
            "2026-01-01 00:05:00",
            "2026-01-01 00:10:00",
            "2026-01-01 06:05:00",
            "2026-01-01 06:10:00"
        ]
    );
    assert_eq!(
        walls("10-30/10 9 * * *", "2026-01-01 00:00:00", 4),
        [
            "2026-01-01 09:10:00",
            "2026-01-01 09:20:00",
            "2026-01-01 09:30:00",
            "2026-01-02 09:10:00"
        ]
    );
}

#[test]
fn names_are_case_insensitive_and_work_in_ranges_and_lists() {
    let by_name = walls("0 12 * JAN-mar mon,Wed,FRI", "2026-01-01 00:00:00", 30);
    let by_number = walls("0 12 * 1-3 1,3,5", "2026-01-01 00:00:00", 30);
    assert_eq!(by_name, by_number);
    assert_eq!(
        walls("0 0 * * fri-sun", "2026-01-01 00:00:00", 3),
        [
            "2026-01-02 00:00:00",
            "2026-01-03 00:00:00",
            "2026-01-04 00:00:00"
        ]
    );
}

#[test]
fn zero_and_seven_are_both_sunday() {
    let zero = walls("0 0 * * 0", "2026-01-01 00:00:00", 5);
    assert_eq!(zero, walls("0 0 * * 7", "2026-01-01 00:00:00", 5));
    assert_eq!(zero, walls("0 0 * * sun", "2026-01-01 00:00:00", 5));
    for day in zero {
        assert_eq!(wall(&day).weekday(), Weekday::Sun, "{day} is not a Sunday");
    }
    assert_eq!(
        walls("0 0 * * 5-7", "2026-01-01 00:00:00", 3),
        [
            "2026-01-02 00:00:00",
            "2026-01-03 00:00:00",
            "2026-01-04 00:00:00"
        ]
    );
}

#[test]
fn day_fields_are_ored_when_both_are_restricted() {
    // Every 13th and every Friday.
    for fire in walls("0 12 13 * fri", "2026-01-01 00:00:00", 40) {
        let day = wall(&fire);
        assert!(
            day.day() == 13 || day.weekday() == Weekday::Fri,
            "{fire} is neither a 13th nor a Friday"
        );
    }
    assert_eq!(
        walls("0 12 13 * fri", "2026-02-01 00:00:00", 4),
        [
            "2026-02-06 12:00:00",
            "2026-02-13 12:00:00",
            "2026-02-20 12:00:00",
            "2026-02-27 12:00:00"
        ]
    );
    assert_eq!(
        walls("0 12 13 * fri", "2026-03-01 00:00:00", 3)[1],
        "2026-03-13 12:00:00"
    );
    assert_eq!(
        walls("0 12 13 * fri", "2026-04-01 00:00:00", 3)[2],
        "2026-04-13 12:00:00"
    );
}

#[test]
fn day_fields_are_anded_when_either_begins_with_a_star() {
    // Mondays on odd dates only.
    let fires = walls("0 12 */2 * mon", "2026-01-01 00:00:00", 20);
    for fire in &fires {
        let day = wall(fire);
        assert_eq!(day.weekday(), Weekday::Mon, "{fire} is not a Monday");
        assert_eq!(day.day() % 2, 1, "{fire} is not an odd date");
    }
    assert_eq!(fires[0], "2026-01-05 12:00:00");
    // Mondays, whatever the date.
    let mondays = walls("0 12 * * mon", "2026-01-01 00:00:00", 10);
    assert_eq!(mondays[0], "2026-01-05 12:00:00");
    assert_eq!(mondays[1], "2026-01-12 12:00:00");
    // A day-of-week beginning with * restricts day-of-month the same way.
    for fire in walls("0 12 1-7 * */7", "2026-01-01 00:00:00", 10) {
        let day = wall(&fire);
        assert!(day.day() <= 7 && day.weekday() == Weekday::Sun, "{fire}");
    }
}

#[test]
fn seconds_field_is_optional_and_leading() {
    assert_eq!(
        walls("*/10 * * * * *", "2026-01-01 00:00:00", 3),
        [
            "2026-01-01 00:00:10",
            "2026-01-01 00:00:20",
            "2026-01-01 00:00:30"
        ]
    );
    assert_eq!(
        walls("30 0 12 * * *", "2026-01-01 00:00:00", 1),
        ["2026-01-01 12:00:30"]
    );
}

#[test]
fn macros_expand_as_crontab_documents() {
    let cases = [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ];
    for (name, fields) in cases {
        assert_eq!(
            walls(name, "2026-05-17 10:20:00", 5),
            walls(fields, "2026-05-17 10:20:00", 5),
            "{name}"
        );
    }
    assert!(CronExpr::parse("@hourly").expect("valid").is_wildcard());
    assert!(!CronExpr::parse("@daily").expect("valid").is_wildcard());
}

#[test]
fn dst_class_follows_the_minute_and_hour_text() {
    let class = |expr: &str| CronExpr::parse(expr).expect("valid").is_wildcard();
    assert!(class("* 2 * * *"));
    assert!(class("*/15 2 * * *"));
    assert!(class("30 * * * *"));
    assert!(class("30 */2 * * *"));
    assert!(!class("30 2 * * *"));
    assert!(!class("0,30 1-3 * * *"));
    assert!(!class("0-59 0-23 * * *"));
    assert!(!class("*/10 30 2 * * *"));
}

#[test]
fn rejects_what_crontab_rejects() {
    let cases = [
        ("", "empty expression"),
        ("* * * *", "found 4"),
        ("* * * * * * *", "found 7"),
        (
            "60 * * * *",
            "minute field \"60\": 60 is out of range: expected a number 0-59",
        ),
        ("* 24 * * *", "hour field \"24\": 24 is out of range"),
        ("* * 0 * *", "day-of-month field \"0\": 0 is out of range"),
        ("* * 32 * *", "day-of-month field \"32\""),
        (
            "* * * 13 *",
            "month field \"13\": 13 is out of range: expected a number 1-12 or a name jan-dec",
        ),
        ("* * * * 8", "day-of-week field \"8\""),
        ("*/0 * * * *", "step 0 never advances"),
        ("1,,2 * * * *", "empty element"),
        ("1, * * * *", "empty element"),
        (
            "5/10 * * * *",
            "a step needs * or a range before it: write */10 or 5-59/10",
        ),
        ("30-10 * * * *", "range 30-10 runs backwards"),
        (
            "* * * mon *",
            "month field \"mon\": \"mon\" is not a month value",
        ),
        ("* * * * jan", "day-of-week field \"jan\""),
        ("* * * * monday", "\"monday\" is not a day-of-week value"),
        ("* * L * *", "day-of-month field \"L\""),
        ("* * ? * *", "day-of-month field \"?\""),
        ("* * * * 5#3", "day-of-week field \"5#3\""),
        ("-5 * * * *", "a value is missing"),
        ("1- * * * *", "a value is missing"),
        ("*/ * * * *", "step \"\" is not a number"),
        ("*/x * * * *", "step \"x\" is not a number"),
        ("99999999999 * * * *", "is too large"),
        ("*/99999999999 * * * *", "step 99999999999 is too large"),
        ("61 * * * * *", "second field \"61\""),
        ("@reboot", "@reboot is not supported"),
        ("@fortnightly", "unknown macro \"@fortnightly\""),
        (
            "0 0 30 2 *",
            "never fires: day-of-month \"30\" never occurs in month \"2\"",
        ),
        ("0 0 31 apr,jun *", "never fires"),
    ];
    for (expr, expected) in cases {
        let message = error(expr);
        assert!(
            message.contains(expected),
            "{expr:?}: {message:?} does not contain {expected:?}"
        );
    }
}

#[test]
fn odd_but_valid_forms_are_accepted() {
    // A step larger than its range selects the range's first value, as crontab does.
    assert_eq!(
        walls("*/4294967295 0 * * *", "2026-01-01 00:00:00", 2),
        ["2026-01-02 00:00:00", "2026-01-03 00:00:00"]
    );
    // February 29th fires in leap years only.
    assert_eq!(
        walls("0 0 29 2 *", "2026-01-01 00:00:00", 2),
        ["2028-02-29 00:00:00", "2032-02-29 00:00:00"]
    );
    // The 31st with a weekday fires on that weekday in any month (OR rule).
    assert!(CronExpr::parse("0 0 31 2 mon").is_ok());
    // Leading zeros and white space around fields.
    assert_eq!(
        walls("  05 07 * * *  ", "2026-01-01 00:00:00", 1),
        ["2026-01-01 07:05:00"]
    );
}

#[test]
fn every_minute_covers_every_minute_of_a_day() {
    let expr = CronExpr::parse("* * * * *").expect("valid");
    let start = NaiveDate::from_ymd_opt(2026, 6, 1)
        .and_then(|day| day.and_hms_opt(0, 0, 0))
        .expect("valid date");
    let mut at = start;
    for minute in 1..=1440 {
        at = expr.next_wall_time(at, false).expect("next");
        assert_eq!(at, start + chrono::Duration::minutes(minute));
        assert_eq!(at.second(), 0);
    }
}
