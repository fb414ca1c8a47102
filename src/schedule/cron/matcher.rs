//! The compiled form of a cron expression: one bit set per field, as crontab keeps, and the
//! search for the next matching wall-clock time.

use chrono::{Datelike, Months, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, Timelike};

/// How far ahead the search looks, in years. Day and weekday patterns repeat every 400 years of
/// the Gregorian calendar, so an expression that matches nothing within them never matches;
/// the longest real waits (February 29th on one weekday) are a few decades.
const SEARCH_YEARS: u32 = 400;

/// What a cron expression matches, one bit per value of each field: 32 bytes, copied with the
/// expression rather than shared, where a per-expression structure that kept a bitfield for
/// every reachable year cost about 5 KB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Matcher {
    /// Bit `s` for second `s`, 0-59.
    seconds: u64,
    /// Bit `m` for minute `m`, 0-59.
    minutes: u64,
    /// Bit `h` for hour `h`, 0-23.
    hours: u32,
    /// Bit `d` for day of month `d`, 1-31.
    days_of_month: u32,
    /// Bit `m` for month `m`, 1-12.
    months: u16,
    /// Bit `d` for day of week `d`, 0 (Sunday) to 6.
    days_of_week: u8,
    /// crontab's day rule: a day must match both day fields when either begins with `*`,
    /// either one otherwise.
    days_must_match_both: bool,
}

impl Matcher {
    /// The matcher of fields already checked against their ranges, so every set holds at least
    /// one value and none outside its field.
    pub(super) fn new(fields: &super::Fields) -> Self {
        // Each field's values are within its range, so the narrowing casts keep every bit.
        Self {
            seconds: fields.second.bits,
            minutes: fields.minute.bits,
            hours: fields.hour.bits as u32,
            days_of_month: fields.day_of_month.bits as u32,
            months: fields.month.bits as u16,
            days_of_week: fields.day_of_week.bits as u8,
            days_must_match_both: fields.days_must_match_both,
        }
    }

    /// The first matching wall-clock time at or after `wall` (after it, unless `inclusive`),
    /// found day by day (whole months skipped), then hour, minute and second within the day.
    /// `None` when nothing matches within [`SEARCH_YEARS`] or the calendar ends first.
    pub(super) fn next_wall_time(
        &self,
        wall: NaiveDateTime,
        inclusive: bool,
    ) -> Option<NaiveDateTime> {
        // Fires fall on whole seconds: the first candidate is the next whole second, or `wall`
        // itself when it is one and may match.
        let whole = wall.with_nanosecond(0)?;
        let start = if inclusive && whole == wall {
            whole
        } else {
            whole.checked_add_signed(TimeDelta::seconds(1))?
        };
        let last_day = start
            .date()
            .checked_add_months(Months::new(12 * SEARCH_YEARS))?;
        let mut day = start.date();
        let mut from = (start.hour(), start.minute(), start.second());
        while day <= last_day {
            if !has(u64::from(self.months), day.month()) {
                day = first_of_next_month(day)?;
                from = (0, 0, 0);
                continue;
            }
            if self.day_matches(day)
                && let Some((hour, minute, second)) = self.time_from(from)
            {
                return Some(day.and_time(NaiveTime::from_hms_opt(hour, minute, second)?));
            }
            day = day.succ_opt()?;
            from = (0, 0, 0);
        }
        None
    }

    /// Whether `day` passes the day fields under crontab's day rule (its month already does).
    fn day_matches(&self, day: NaiveDate) -> bool {
        let by_date = has(u64::from(self.days_of_month), day.day());
        let by_weekday = has(
            u64::from(self.days_of_week),
            day.weekday().num_days_from_sunday(),
        );
        if self.days_must_match_both {
            by_date && by_weekday
        } else {
            by_date || by_weekday
        }
    }

    /// The first matching time of day at or after `(hour, minute, second)`, if the day has one.
    fn time_from(&self, (hour, minute, second): (u32, u32, u32)) -> Option<(u32, u32, u32)> {
        let first_hour = next(u64::from(self.hours), hour)?;
        if first_hour == hour
            && let Some((minute, second)) = self.minute_from(minute, second)
        {
            return Some((hour, minute, second));
        }
        let later_hour = if first_hour == hour {
            next(u64::from(self.hours), hour + 1)?
        } else {
            first_hour
        };
        Some((later_hour, lowest(self.minutes), lowest(self.seconds)))
    }

    /// The first matching minute and second of an hour at or after `(minute, second)`.
    fn minute_from(&self, minute: u32, second: u32) -> Option<(u32, u32)> {
        let first_minute = next(self.minutes, minute)?;
        if first_minute == minute
            && let Some(second) = next(self.seconds, second)
        {
            return Some((minute, second));
        }
        let later_minute = if first_minute == minute {
            next(self.minutes, minute + 1)?
        } else {
            first_minute
        };
        Some((later_minute, lowest(self.seconds)))
    }
}

/// Whether value `value` is in `bits`.
fn has(bits: u64, value: u32) -> bool {
    value < 64 && bits & (1 << value) != 0
}

/// The smallest value in `bits` at or above `from`.
fn next(bits: u64, from: u32) -> Option<u32> {
    let above = bits.checked_shr(from)?.checked_shl(from)?;
    (above != 0).then(|| above.trailing_zeros())
}

/// The smallest value in `bits`, which holds at least one.
fn lowest(bits: u64) -> u32 {
    bits.trailing_zeros()
}

/// The first day of the month after `day`'s.
fn first_of_next_month(day: NaiveDate) -> Option<NaiveDate> {
    day.with_day(1)?.checked_add_months(Months::new(1))
}
