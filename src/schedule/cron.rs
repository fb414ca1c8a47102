//! Cron expressions with the system crontab's grammar: fields, names, steps, macros and the day rule.
//!
//! The grammar is checked here, field by field, because `croner` accepts more than crontab does
//! (Quartz's `L`, `W`, `#`, `?`, a year field) and names no field in its errors. What passes is
//! handed to `croner` in a canonical numeric form, with its day-of-month/day-of-week mode chosen by
//! crontab's rule, and `croner` finds the next matching wall-clock time. Turning wall-clock times
//! into instants across DST changes is [`super::dst`]'s job.

use chrono::NaiveDateTime;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use thiserror::Error;

/// Why a schedule expression was refused. Each message names the field and says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CronError {
    /// Nothing but white space.
    #[error("empty expression: expected 5 fields (minute hour day-of-month month day-of-week)")]
    Empty,
    /// Neither 5 fields nor 6.
    #[error(
        "expected 5 fields (minute hour day-of-month month day-of-week) or 6 with a leading \
         seconds field, found {0}"
    )]
    FieldCount(usize),
    /// One field broke the grammar or its range.
    #[error("{field} field \"{text}\": {reason}")]
    Field {
        /// The field's name as crontab(5) spells it (`minute`, `day-of-week`, ...).
        field: &'static str,
        /// The field as written.
        text: String,
        /// What is wrong and what was expected.
        reason: String,
    },
    /// `@reboot`, which has no meaning for a replicated scheduler.
    #[error(
        "@reboot is not supported: replicas start and stop independently, so \"at boot\" has no \
         single meaning; start the command from the service manager instead, or declare a job \
         without a schedule and trigger it"
    )]
    Reboot,
    /// An `@word` that is not one of crontab's macros.
    #[error(
        "unknown macro \"{0}\": expected @yearly, @annually, @monthly, @weekly, @daily, \
         @midnight, @hourly or @every <duration>"
    )]
    UnknownMacro(String),
    /// `@every` with a missing, unreadable or too small duration.
    #[error(
        "@every {0}: expected a duration of at least 1s in whole milliseconds, like 30s, 15m or 2h"
    )]
    Every(String),
    /// A well-formed expression whose days can never occur, such as the 31st of February.
    #[error("never fires: {0}")]
    NeverFires(String),
}

/// One crontab field: its name, its range and the names it accepts.
struct FieldSpec {
    name: &'static str,
    min: u32,
    max: u32,
    /// Three-letter names and their values; empty for numeric-only fields.
    names: &'static [&'static str],
    /// The value of `names[0]`.
    first_name_value: u32,
}

const SECOND: FieldSpec = FieldSpec::numeric("second", 0, 59);
const MINUTE: FieldSpec = FieldSpec::numeric("minute", 0, 59);
const HOUR: FieldSpec = FieldSpec::numeric("hour", 0, 23);
const DAY_OF_MONTH: FieldSpec = FieldSpec::numeric("day-of-month", 1, 31);
const MONTH: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
    first_name_value: 1,
};
const DAY_OF_WEEK: FieldSpec = FieldSpec {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    first_name_value: 0,
};

/// Days in each month in the longest year, for the never-fires check.
const MAX_DAYS_IN_MONTH: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

impl FieldSpec {
    const fn numeric(name: &'static str, min: u32, max: u32) -> Self {
        Self {
            name,
            min,
            max,
            names: &[],
            first_name_value: 0,
        }
    }

    /// What a value of this field may look like, for error messages.
    fn expected(&self) -> String {
        match (self.names.first(), self.names.last()) {
            (Some(first), Some(last)) => format!(
                "expected a number {}-{} or a name {first}-{last}",
                self.min, self.max
            ),
            _ => format!("expected a number {}-{}", self.min, self.max),
        }
    }

    /// Reads one value: a number in range, or a name (any case). `sun` closing a range means 7,
    /// so `fri-sun` reads as Friday to Sunday rather than a backwards range.
    fn value(&self, token: &str, ends_range: bool) -> Result<u32, String> {
        if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
            let value: u32 = token
                .parse()
                .map_err(|_| format!("{token} is too large: {}", self.expected()))?;
            if !(self.min..=self.max).contains(&value) {
                return Err(format!("{value} is out of range: {}", self.expected()));
            }
            return Ok(value);
        }
        let position = self
            .names
            .iter()
            .position(|name| name.eq_ignore_ascii_case(token))
            .ok_or_else(|| match token {
                "" => format!("a value is missing: {}", self.expected()),
                _ => format!(
                    "\"{token}\" is not a {} value: {}",
                    self.name,
                    self.expected()
                ),
            })?;
        let value = self.first_name_value + position as u32;
        Ok(if ends_range && value == 0 { 7 } else { value })
    }
}

/// A step after `/`: a positive number. A step larger than the range is allowed, as crontab does,
/// and selects the range's first value.
fn step(token: &str) -> Result<u32, String> {
    if token.is_empty() || !token.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("step \"{token}\" is not a number"));
    }
    match token.parse::<u32>() {
        Ok(0) => Err("step 0 never advances: use a step of 1 or more".to_owned()),
        Ok(step) => Ok(step),
        Err(_) => Err(format!("step {token} is too large")),
    }
}

/// One field after parsing.
struct ParsedField {
    /// Bit `v` is set when value `v` matches (day-of-week 7 is folded onto bit 0).
    bits: u64,
    /// Whether the field text begins with `*`: crontab's test for the day rule and DST class.
    star: bool,
    /// The field with names replaced by numbers, in a form `croner` reads the same way.
    canonical: String,
}

fn parse_field(spec: &FieldSpec, text: &str) -> Result<ParsedField, CronError> {
    let fail = |reason: String| CronError::Field {
        field: spec.name,
        text: text.to_owned(),
        reason,
    };
    let mut bits = 0u64;
    let mut canonical = Vec::new();
    for element in text.split(',') {
        if element.is_empty() {
            return Err(fail("empty element in the list".to_owned()));
        }
        let (range, step) = match element.split_once('/') {
            Some((range, step_text)) => (range, Some(step(step_text).map_err(fail)?)),
            None => (element, None),
        };
        let (low, high) = if range == "*" {
            (spec.min, spec.max)
        } else if let Some((first, last)) = range.split_once('-') {
            let low = spec.value(first, false).map_err(fail)?;
            let high = spec.value(last, true).map_err(fail)?;
            if low > high {
                return Err(fail(format!(
                    "range {first}-{last} runs backwards: write it low-high, or as a list"
                )));
            }
            (low, high)
        } else if let Some(step) = step {
            return Err(fail(format!(
                "a step needs * or a range before it: write */{step} or {range}-{}/{step}",
                spec.max
            )));
        } else {
            let value = spec.value(range, false).map_err(fail)?;
            (value, value)
        };
        let stride = step.unwrap_or(1);
        let mut value = low;
        while value <= high {
            bits |= 1 << (value % 64);
            match value.checked_add(stride) {
                Some(next) => value = next,
                None => break,
            }
        }
        let range_text = if range == "*" {
            "*".to_owned()
        } else if range.contains('-') {
            format!("{low}-{high}")
        } else {
            low.to_string()
        };
        canonical.push(match step {
            // A step past the range's end selects its first value only; `croner` refuses such
            // steps, so it is given that value.
            Some(step) if step > high - low => low.to_string(),
            Some(step) => format!("{range_text}/{step}"),
            None => range_text,
        });
    }
    if spec.name == DAY_OF_WEEK.name && bits & (1 << 7) != 0 {
        bits = (bits | 1) & !(1 << 7);
    }
    Ok(ParsedField {
        bits,
        star: text.starts_with('*'),
        canonical: canonical.join(","),
    })
}

/// The 5- or 6-field expression a macro stands for, as crontab(5) defines them.
fn expand_macro(word: &str) -> Result<&'static str, CronError> {
    Ok(match word.to_ascii_lowercase().as_str() {
        "yearly" | "annually" => "0 0 1 1 *",
        "monthly" => "0 0 1 * *",
        "weekly" => "0 0 * * 0",
        "daily" | "midnight" => "0 0 * * *",
        "hourly" => "0 * * * *",
        "reboot" => return Err(CronError::Reboot),
        _ => return Err(CronError::UnknownMacro(format!("@{word}"))),
    })
}

/// A parsed cron expression (5 fields, 6 with seconds, or a macro), ready to find fires.
#[derive(Debug, Clone)]
pub struct CronExpr {
    /// The matcher over the canonical fields, in the day mode crontab's rule asks for. Shared:
    /// see [`intern`].
    cron: Arc<Cron>,
    /// Debian cron's DST class: true when the minute or hour field begins with `*`. Wildcard jobs
    /// skip times a spring-forward removes and run twice in an hour a fall-back repeats;
    /// fixed-time jobs run once either way.
    wildcard: bool,
}

impl CronExpr {
    /// Parses a crontab expression or macro (not `@every`, which [`super::Schedule`] handles).
    ///
    /// # Errors
    /// A [`CronError`] naming the field and what was expected, for anything crontab rejects, for
    /// `@reboot`, and for day and month combinations that never occur.
    pub fn parse(text: &str) -> Result<Self, CronError> {
        let text = text.trim();
        let expanded = match text.strip_prefix('@') {
            Some(word) => expand_macro(word)?,
            None => text,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let (second, rest) = match fields.as_slice() {
            [] => return Err(CronError::Empty),
            rest @ [_, _, _, _, _] => ("0", rest),
            [second, rest @ ..] if rest.len() == 5 => (*second, rest),
            other => return Err(CronError::FieldCount(other.len())),
        };
        let second = parse_field(&SECOND, second)?;
        let minute = parse_field(&MINUTE, rest[0])?;
        let hour = parse_field(&HOUR, rest[1])?;
        let day_of_month = parse_field(&DAY_OF_MONTH, rest[2])?;
        let month = parse_field(&MONTH, rest[3])?;
        let day_of_week = parse_field(&DAY_OF_WEEK, rest[4])?;

        // crontab's day rule: when either day field begins with `*`, a day must match both;
        // otherwise matching either one is enough.
        let days_must_match_both = day_of_month.star || day_of_week.star;
        if days_must_match_both && !day_of_month.star {
            check_days_occur(day_of_month.bits, month.bits, rest[2], rest[3])?;
        }

        let canonical = [&second, &minute, &hour, &day_of_month, &month, &day_of_week]
            .map(|field| field.canonical.as_str())
            .join(" ");
        let cron = intern(canonical, days_must_match_both, |canonical| {
            CronParser::builder()
                .seconds(Seconds::Required)
                .year(Year::Disallowed)
                .dom_and_dow(days_must_match_both)
                .build()
                .parse(canonical)
                .map_err(|error| CronError::Field {
                    field: "expression",
                    text: text.to_owned(),
                    reason: error.to_string(),
                })
        })?;
        Ok(Self {
            cron,
            wildcard: minute.star || hour.star,
        })
    }

    /// Whether Debian cron treats this job as a wildcard job across DST changes.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The first matching wall-clock time after `wall` (or at it, when `inclusive`), ignoring
    /// time zones. `None` when nothing matches within the search window of several years.
    pub fn next_wall_time(&self, wall: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        self.cron.find_next_occurrence(&wall, inclusive).ok()
    }
}

/// Matchers by canonical expression and day mode, while any job holds them.
type Interned = HashMap<(String, bool), Weak<Cron>>;

/// One matcher per distinct expression, shared by every job (and every copy of a job) that uses
/// it: `croner` keeps a bitfield for every year it can reach, about 5 KB per matcher, which
/// made 10,000 jobs cost well over 100 MB.
fn intern(
    canonical: String,
    days_must_match_both: bool,
    parse: impl FnOnce(&str) -> Result<Cron, CronError>,
) -> Result<Arc<Cron>, CronError> {
    static INTERNED: LazyLock<Mutex<Interned>> = LazyLock::new(Mutex::default);
    let key = (canonical, days_must_match_both);
    if let Some(cron) = INTERNED
        .lock()
        .ok()
        .and_then(|interned| interned.get(&key)?.upgrade())
    {
        return Ok(cron);
    }
    let cron = Arc::new(parse(&key.0)?);
    if let Ok(mut interned) = INTERNED.lock() {
        // Forget the matchers no job holds any more, now and then.
        if interned.len() >= 1_024 && interned.len().is_power_of_two() {
            interned.retain(|_, cron| cron.strong_count() > 0);
        }
        interned.insert(key, Arc::downgrade(&cron));
    }
    Ok(cron)
}

/// Refuses a day-of-month list that no listed month contains, such as `30 2` (February 30th).
fn check_days_occur(
    days: u64,
    months: u64,
    day_text: &str,
    month_text: &str,
) -> Result<(), CronError> {
    let possible = (1..=12).any(|month: usize| {
        months & (1 << month) != 0 && days & ((1u64 << (MAX_DAYS_IN_MONTH[month - 1] + 1)) - 2) != 0
    });
    if possible {
        Ok(())
    } else {
        Err(CronError::NeverFires(format!(
            "day-of-month \"{day_text}\" never occurs in month \"{month_text}\""
        )))
    }
}

#[cfg(test)]
mod tests {
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
    fn expressions_that_mean_the_same_share_one_matcher() {
        let daily = CronExpr::parse("@daily").expect("valid");
        let same = CronExpr::parse("0  0 * * *").expect("valid");
        let other = CronExpr::parse("0 0 1 * *").expect("valid");
        assert!(Arc::ptr_eq(&daily.cron, &same.cron), "one canonical form");
        assert!(!Arc::ptr_eq(&daily.cron, &other.cron));
        let copy = daily.clone();
        assert!(Arc::ptr_eq(&daily.cron, &copy.cron), "copies share it");
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
}
