//! A schedule in English words ("At 03:15 every day, Europe/Berlin"), read from the same parsed
//! fields the matcher is built from, or nothing when the words could not say it exactly.

use std::time::Duration;

use chrono_tz::Tz;

use super::cron::{self, Fields};
use super::{Kind, Schedule};

/// The longest list of values the words spell out; past it, the expression says it better.
const LONGEST_LIST: usize = 8;

/// The days of the week by crontab's number (0 is Sunday).
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// The months by crontab's number less one.
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

impl Schedule {
    /// The schedule in words, with the zone its fields are read in: "At 09:00 on Monday to
    /// Friday, Europe/Berlin". An `@every` schedule names no zone, since its fires are multiples
    /// of its period since the epoch whatever the zone.
    ///
    /// `None` when the words would be long or not exactly what the schedule does (a seconds
    /// field, a long list, both day fields restricting with one starting with `*`): the
    /// expression as written says it then.
    ///
    /// ```
    /// use redcron::schedule::Schedule;
    ///
    /// let schedule = Schedule::parse("0 4 1,15 * sun")?;
    /// assert_eq!(
    ///     schedule.in_words(chrono_tz::UTC).as_deref(),
    ///     // crontab's rule: two day fields without `*` match a day either one matches.
    ///     Some("At 04:00 on day 1 and 15 of the month and on Sunday, UTC")
    /// );
    /// # Ok::<(), redcron::schedule::CronError>(())
    /// ```
    pub fn in_words(&self, zone: Tz) -> Option<String> {
        match &self.kind {
            Kind::Every(period_ms) => Some(every(*period_ms)),
            Kind::Cron(_) => {
                let fields = cron::fields(&self.text).ok()?;
                Some(format!("{}, {}", cron_words(&fields)?, zone.name()))
            }
        }
    }
}

/// `@every` in words: "Every 5 minutes", "Every 1m 30s".
fn every(period_ms: u64) -> String {
    let units = [
        (86_400_000, "day"),
        (3_600_000, "hour"),
        (60_000, "minute"),
        (1_000, "second"),
    ];
    match units
        .iter()
        .find(|(unit_ms, _)| period_ms.is_multiple_of(*unit_ms))
    {
        Some((unit_ms, unit)) if period_ms == *unit_ms => format!("Every {unit}"),
        Some((unit_ms, unit)) => format!("Every {} {unit}s", period_ms / unit_ms),
        None => format!(
            "Every {}",
            humantime::format_duration(Duration::from_millis(period_ms))
        ),
    }
}

/// A crontab expression's fields in words, without the zone.
fn cron_words(fields: &Fields) -> Option<String> {
    if values(fields.second.bits, 0, 59) != [0] {
        return None;
    }
    let minutes = values(fields.minute.bits, 0, 59);
    let hours = values(fields.hour.bits, 0, 23);
    let time = time_words(&minutes, &hours)?;
    let days = day_words(fields)?;
    let months = values(fields.month.bits, 1, 12);
    let days_of_month = values(fields.day_of_month.bits, 1, 31);
    let weekdays = values(fields.day_of_week.bits, 0, 6);
    // One day of one month, every year: a date.
    let date = match (days_of_month.as_slice(), months.as_slice()) {
        ([day], [month]) if fields.days_must_match_both && weekdays.len() == 7 => {
            Some(format!("on {day} {}", MONTHS[*month as usize - 1]))
        }
        _ => None,
    };
    let mut words = time;
    match date {
        Some(date) => words = format!("{words} {date}"),
        None => {
            // "Every 5 minutes every day", "past every hour every day": once is enough.
            if !(days == "every day" && words.to_lowercase().contains("every")) {
                words = format!("{words} {days}");
            }
            if months.len() < 12 {
                words = format!("{words} {}", month_words(&months)?);
            }
        }
    }
    Some(words)
}

/// When in the day: "At 03:15", "Every 5 minutes", "At minute 0 past every hour".
fn time_words(minutes: &[u32], hours: &[u32]) -> Option<String> {
    let every_hour = hours.len() == 24;
    let minute_step = step(minutes, 60);
    if let ([minute], true) = (minutes, every_hour) {
        return Some(format!("At minute {minute} past every hour"));
    }
    if every_hour {
        return Some(match minute_step {
            Some(1) => "Every minute".to_owned(),
            Some(step) => format!("Every {step} minutes"),
            None => format!("At minutes {} past every hour", list(minutes)?),
        });
    }
    // A few times of day: each one.
    if minutes.len() * hours.len() <= 4 {
        let times: Vec<String> = hours
            .iter()
            .flat_map(|hour| minutes.iter().map(move |minute| clock(*hour, *minute)))
            .collect();
        return Some(format!("At {}", join(&times)));
    }
    // Minutes at a steady pace through a stretch of hours: from its first fire to its last.
    let stretch = match hours {
        [hour] => Some((*hour, *hour)),
        _ => contiguous(hours),
    };
    if let (Some(step), Some((first, last))) = (minute_step, stretch) {
        let pace = match step {
            1 => "Every minute".to_owned(),
            step => format!("Every {step} minutes"),
        };
        let end = minutes.last().copied().unwrap_or_default();
        return Some(format!(
            "{pace} from {} to {}",
            clock(first, 0),
            clock(last, end)
        ));
    }
    let minute = match minutes {
        [minute] => format!("At minute {minute}"),
        _ => match minute_step {
            Some(1) => "Every minute".to_owned(),
            Some(step) => format!("Every {step} minutes"),
            None => format!("At minutes {}", list(minutes)?),
        },
    };
    let hour = match (step(hours, 24), contiguous(hours)) {
        _ if hours.len() == 1 => format!("past hour {}", hours[0]),
        (Some(step), _) => format!("past every {} hour", ordinal(step)),
        (None, Some((first, last))) => format!("past hours {first} to {last}"),
        (None, None) => format!("past hours {}", list(hours)?),
    };
    Some(format!("{minute} {hour}"))
}

/// Which days, by crontab's rule: "every day", "on Monday to Friday", "on day 1 of the month",
/// "on day 1 and 15 of the month and on Sunday".
fn day_words(fields: &Fields) -> Option<String> {
    let days_of_month = values(fields.day_of_month.bits, 1, 31);
    let weekdays = values(fields.day_of_week.bits, 0, 6);
    let every_day_of_month = days_of_month.len() == 31;
    let every_weekday = weekdays.len() == 7;
    if fields.days_must_match_both {
        return match (every_day_of_month, every_weekday) {
            (true, true) => Some("every day".to_owned()),
            (true, false) => Some(format!("on {}", weekday_words(&weekdays)?)),
            (false, true) => Some(format!("on {}", month_day_words(&days_of_month)?)),
            // A day both fields match ("*/2" and "mon"): rare, and long to say right.
            (false, false) => None,
        };
    }
    // Neither field starts with `*`: a day either one matches, so one matching every day
    // makes every day.
    if every_day_of_month || every_weekday {
        return Some("every day".to_owned());
    }
    Some(format!(
        "on {} and on {}",
        month_day_words(&days_of_month)?,
        weekday_words(&weekdays)?
    ))
}

/// Days of the month: "day 1 of the month", "day 1 and 15 of the month", "day 1 to 7 of the
/// month".
fn month_day_words(days: &[u32]) -> Option<String> {
    let days = match contiguous(days) {
        Some((first, last)) if days.len() > 2 => format!("{first} to {last}"),
        _ => list(days)?,
    };
    Some(format!("day {days} of the month"))
}

/// Days of the week: "Sunday", "Monday to Friday", "Friday to Sunday", "Monday and Thursday".
fn weekday_words(days: &[u32]) -> Option<String> {
    // A run of days may wrap past Saturday (`fri-sun`): read the week from Monday as well.
    for first_day in [0, 1] {
        let positions: Vec<u32> = days
            .iter()
            .map(|day| (day + 7 - first_day) % 7)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if let Some((first, last)) = contiguous(&positions).filter(|_| days.len() > 2) {
            let name = |position: u32| WEEKDAYS[((position + first_day) % 7) as usize];
            return Some(format!("{} to {}", name(first), name(last)));
        }
    }
    let names: Vec<String> = days
        .iter()
        .map(|day| WEEKDAYS[*day as usize].to_owned())
        .collect();
    (names.len() <= LONGEST_LIST).then(|| join(&names))
}

/// Months: "in January", "in January and July", "from March to May".
fn month_words(months: &[u32]) -> Option<String> {
    let name = |month: u32| MONTHS[month as usize - 1].to_owned();
    match contiguous(months) {
        Some((first, last)) if months.len() > 2 => {
            Some(format!("from {} to {}", name(first), name(last)))
        }
        _ => {
            let names: Vec<String> = months.iter().map(|month| name(*month)).collect();
            (names.len() <= LONGEST_LIST).then(|| format!("in {}", join(&names)))
        }
    }
}

/// The values `bits` holds between `low` and `high`, in order.
fn values(bits: u64, low: u32, high: u32) -> Vec<u32> {
    (low..=high)
        .filter(|value| bits & (1 << value) != 0)
        .collect()
}

/// The step of `values` when they are every `step`th value from 0 of a cycle of `cycle`, which
/// the step divides: so the pace holds across the cycle's end too (`*/7` minutes does not).
fn step(values: &[u32], cycle: u32) -> Option<u32> {
    let [0, step, ..] = *values else {
        return None;
    };
    (cycle.is_multiple_of(step) && values.iter().copied().eq((0..cycle).step_by(step as usize)))
        .then_some(step)
}

/// The first and last of `values` when they follow one another with no gap.
fn contiguous(values: &[u32]) -> Option<(u32, u32)> {
    let (first, last) = (*values.first()?, *values.last()?);
    (values.len() > 1 && last - first + 1 == values.len() as u32).then_some((first, last))
}

/// `values` as a list in words: "1, 2 and 3"; none past [`LONGEST_LIST`].
fn list(values: &[u32]) -> Option<String> {
    let items: Vec<String> = values.iter().map(u32::to_string).collect();
    (items.len() <= LONGEST_LIST).then(|| join(&items))
}

/// "a", "a and b", "a, b and c".
fn join(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [only] => only.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// A time of day as a clock shows it: `09:05`.
fn clock(hour: u32, minute: u32) -> String {
    format!("{hour:02}:{minute:02}")
}

/// `2nd`, `3rd`, `4th`, `12th`: the steps that divide a day's hours.
fn ordinal(number: u32) -> String {
    let suffix = match (number % 10, number % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{number}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `expression` in words, read in Europe/Berlin.
    fn words(expression: &str) -> Option<String> {
        Schedule::parse(expression)
            .expect("a valid expression")
            .in_words(chrono_tz::Europe::Berlin)
    }

    /// Asserts each expression reads as its words, with the zone.
    #[track_caller]
    fn assert_words(cases: &[(&str, &str)]) {
        for (expression, expected) in cases {
            assert_eq!(
                words(expression).as_deref(),
                Some(format!("{expected}, Europe/Berlin").as_str()),
                "{expression}"
            );
        }
    }

    #[test]
    fn a_time_of_day_every_day() {
        assert_words(&[
            ("15 3 * * *", "At 03:15 every day"),
            ("0 0 * * *", "At 00:00 every day"),
            ("0 9,17 * * *", "At 09:00 and 17:00 every day"),
            ("0,30 9 * * *", "At 09:00 and 09:30 every day"),
        ]);
    }

    #[test]
    fn minutes_and_hours_at_a_pace() {
        assert_words(&[
            ("* * * * *", "Every minute"),
            ("*/5 * * * *", "Every 5 minutes"),
            ("0-59/15 * * * *", "Every 15 minutes"),
            ("0 * * * *", "At minute 0 past every hour"),
            ("30 */2 * * *", "At minute 30 past every 2nd hour"),
            (
                "0 0-23/6 * * *",
                "At 00:00, 06:00, 12:00 and 18:00 every day",
            ),
            ("0 0-23/3 * * *", "At minute 0 past every 3rd hour"),
            (
                "*/15 9-17 * * 1-5",
                "Every 15 minutes from 09:00 to 17:45 on Monday to Friday",
            ),
            ("* 3 * * *", "Every minute from 03:00 to 03:59"),
            (
                "0,20,40,50,55 3 * * *",
                "At minutes 0, 20, 40, 50 and 55 past hour 3 every day",
            ),
        ]);
    }

    #[test]
    fn a_pace_the_cycle_breaks_is_listed_not_called_steady() {
        // */8 fires at 56 then at 0 of the next hour: 4 minutes, not 8.
        assert_words(&[
            (
                "*/8 * * * *",
                "At minutes 0, 8, 16, 24, 32, 40, 48 and 56 past every hour",
            ),
            (
                "0 */5 * * *",
                "At minute 0 past hours 0, 5, 10, 15 and 20 every day",
            ),
            (
                "10-30/10 * * * *",
                "At minutes 10, 20 and 30 past every hour",
            ),
            ("0 9-17 * * *", "At minute 0 past hours 9 to 17 every day"),
        ]);
        assert_eq!(
            words("*/2 * * * *"),
            Some("Every 2 minutes, Europe/Berlin".to_owned())
        );
    }

    #[test]
    fn days_of_the_week_ranges_lists_and_names() {
        assert_words(&[
            ("0 9 * * 1-5", "At 09:00 on Monday to Friday"),
            ("0 9 * * mon-fri", "At 09:00 on Monday to Friday"),
            ("0 9 * * sun", "At 09:00 on Sunday"),
            ("0 9 * * 7", "At 09:00 on Sunday"),
            ("0 9 * * fri-sun", "At 09:00 on Friday to Sunday"),
            ("0 9 * * sat,sun", "At 09:00 on Sunday and Saturday"),
            ("0 9 * * 1,3,5", "At 09:00 on Monday, Wednesday and Friday"),
            ("0 9 * * 0-2", "At 09:00 on Sunday to Tuesday"),
        ]);
    }

    #[test]
    fn days_of_the_month_and_months() {
        assert_words(&[
            ("0 0 1 * *", "At 00:00 on day 1 of the month"),
            ("0 4 1,15 * *", "At 04:00 on day 1 and 15 of the month"),
            ("0 4 1-7 * *", "At 04:00 on day 1 to 7 of the month"),
            ("0 0 1 1 *", "At 00:00 on 1 January"),
            ("0 6 * 1,7 *", "At 06:00 every day in January and July"),
            ("0 6 * mar-may *", "At 06:00 every day from March to May"),
            (
                "0 6 1 */3 *",
                "At 06:00 on day 1 of the month in January, April, July and October",
            ),
        ]);
    }

    #[test]
    fn two_day_fields_without_a_star_match_either_day() {
        assert_words(&[
            (
                "0 4 1,15 * sun",
                "At 04:00 on day 1 and 15 of the month and on Sunday",
            ),
            // One of them matching every day makes every day.
            ("0 4 1-31 * mon", "At 04:00 every day"),
        ]);
        // A `*` first makes both count: "*/2" and Monday is a Monday of an odd date, which the
        // words do not try to say.
        assert_eq!(words("0 4 */2 * mon"), None);
        assert_words(&[("0 4 * * mon", "At 04:00 on Monday")]);
    }

    #[test]
    fn macros_read_as_what_they_stand_for() {
        assert_words(&[
            ("@daily", "At 00:00 every day"),
            ("@midnight", "At 00:00 every day"),
            ("@hourly", "At minute 0 past every hour"),
            ("@weekly", "At 00:00 on Sunday"),
            ("@monthly", "At 00:00 on day 1 of the month"),
            ("@yearly", "At 00:00 on 1 January"),
            ("@annually", "At 00:00 on 1 January"),
        ]);
    }

    #[test]
    fn every_reads_in_its_largest_whole_unit_and_names_no_zone() {
        for (expression, expected) in [
            ("@every 1s", "Every second"),
            ("@every 30s", "Every 30 seconds"),
            ("@every 5m", "Every 5 minutes"),
            ("@every 90m", "Every 90 minutes"),
            ("@every 2h", "Every 2 hours"),
            ("@every 24h", "Every day"),
            ("@every 1500ms", "Every 1s 500ms"),
        ] {
            assert_eq!(words(expression).as_deref(), Some(expected), "{expression}");
        }
    }

    #[test]
    fn what_the_words_cannot_say_exactly_is_left_to_the_expression() {
        for expression in [
            // A seconds field.
            "30 0 3 * * *",
            "*/10 * * * * *",
            // Lists too long to read.
            "1,2,3,4,5,6,7,8,9 3 * * *",
            "0 3 1,3,5,7,9,11,13,15,17 * *",
            // Both day fields restricting with a star first.
            "0 0 */2 * 1-5",
        ] {
            assert_eq!(words(expression), None, "{expression}");
        }
    }
}
