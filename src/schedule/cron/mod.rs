//! Cron expressions with the system crontab's grammar: fields, names, steps, macros and the day rule.
//!
//! The grammar is checked here, field by field, with errors that name the field. What passes
//! becomes one bit set per field, as crontab keeps them ([`matcher`]), which finds the next
//! matching wall-clock time under crontab's day rule. Turning wall-clock times into instants
//! across DST changes is the job of `schedule/dst.rs`.

use chrono::NaiveDateTime;
use thiserror::Error;

mod matcher;

use matcher::Matcher;

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
pub(super) struct ParsedField {
    /// Bit `v` is set when value `v` matches (day-of-week 7 is folded onto bit 0).
    pub(super) bits: u64,
    /// Whether the field text begins with `*`: crontab's test for the day rule and DST class.
    pub(super) star: bool,
}

fn parse_field(spec: &FieldSpec, text: &str) -> Result<ParsedField, CronError> {
    let fail = |reason: String| CronError::Field {
        field: spec.name,
        text: text.to_owned(),
        reason,
    };
    let mut bits = 0u64;
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
    }
    if spec.name == DAY_OF_WEEK.name && bits & (1 << 7) != 0 {
        bits = (bits | 1) & !(1 << 7);
    }
    Ok(ParsedField {
        bits,
        star: text.starts_with('*'),
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
    /// What each field matches, and crontab's day rule.
    matcher: Matcher,
    /// Debian cron's DST class: true when the minute or hour field begins with `*`. Wildcard jobs
    /// skip times a spring-forward removes and run twice in an hour a fall-back repeats;
    /// fixed-time jobs run once either way.
    wildcard: bool,
}

impl CronExpr {
    /// Parses a crontab expression or macro (not `@every`, which [`super::Schedule`] handles).
    ///
    /// ```
    /// use redcron::schedule::CronExpr;
    ///
    /// assert!(CronExpr::parse("30 2 * * mon-fri").is_ok());
    /// assert!(CronExpr::parse("@daily").is_ok());
    /// let error = CronExpr::parse("0 25 * * *").unwrap_err();
    /// assert_eq!(
    ///     error.to_string(),
    ///     "hour field \"25\": 25 is out of range: expected a number 0-23"
    /// );
    /// // Crontab refuses days that never come.
    /// assert!(CronExpr::parse("0 0 30 feb *").is_err());
    /// ```
    ///
    /// # Errors
    /// A [`CronError`] naming the field and what was expected, for anything crontab rejects, for
    /// `@reboot`, and for day and month combinations that never occur.
    pub fn parse(text: &str) -> Result<Self, CronError> {
        let fields = fields(text.trim())?;
        Ok(Self {
            matcher: Matcher::new(&fields),
            wildcard: fields.minute.star || fields.hour.star,
        })
    }

    /// Whether Debian cron treats this job as a wildcard job across DST changes.
    pub fn is_wildcard(&self) -> bool {
        self.wildcard
    }

    /// The first matching wall-clock time after `wall` (or at it, when `inclusive`), ignoring
    /// time zones. `None` when nothing matches within the search window of 400 years, a whole
    /// cycle of the calendar.
    ///
    /// ```
    /// use chrono::NaiveDate;
    /// use redcron::schedule::CronExpr;
    ///
    /// let weekdays = CronExpr::parse("30 2 * * mon-fri")?;
    /// let friday = NaiveDate::from_ymd_opt(2026, 3, 6).unwrap().and_hms_opt(2, 30, 0).unwrap();
    /// let monday = NaiveDate::from_ymd_opt(2026, 3, 9).unwrap().and_hms_opt(2, 30, 0).unwrap();
    /// assert_eq!(weekdays.next_wall_time(friday, false), Some(monday));
    /// assert_eq!(weekdays.next_wall_time(friday, true), Some(friday));
    /// # Ok::<(), redcron::schedule::CronError>(())
    /// ```
    pub fn next_wall_time(&self, wall: NaiveDateTime, inclusive: bool) -> Option<NaiveDateTime> {
        self.matcher.next_wall_time(wall, inclusive)
    }
}

/// The six fields of an expression or macro (not `@every`), each parsed and checked, and
/// crontab's day rule: what [`CronExpr::parse`] builds its matcher from, and what a schedule
/// is described in words from, so both read one grammar.
pub(super) struct Fields {
    /// `0` unless a sixth, leading field gives the seconds.
    pub(super) second: ParsedField,
    /// The five fields of crontab(5), in its order.
    pub(super) minute: ParsedField,
    /// See `minute`.
    pub(super) hour: ParsedField,
    /// See `minute`.
    pub(super) day_of_month: ParsedField,
    /// See `minute`.
    pub(super) month: ParsedField,
    /// See `minute`; 7 folded onto 0, Sunday.
    pub(super) day_of_week: ParsedField,
    /// When either day field begins with `*`, a day must match both; otherwise either is
    /// enough.
    pub(super) days_must_match_both: bool,
}

/// The fields of `text` (trimmed), a crontab expression or macro.
///
/// # Errors
/// A [`CronError`] naming the field and what was expected, as [`CronExpr::parse`] says it.
pub(super) fn fields(text: &str) -> Result<Fields, CronError> {
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
    Ok(Fields {
        second,
        minute,
        hour,
        day_of_month,
        month,
        day_of_week,
        days_must_match_both,
    })
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
mod tests;
