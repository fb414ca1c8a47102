//! From wall-clock matches to instants, across DST changes, the way Debian's cron does it.
//!
//! Debian's cron sorts jobs in two classes (see [`CronExpr::is_wildcard`]):
//! - spring forward: a fixed-time job whose local time falls in the skipped interval runs at the
//!   first instant after the jump, once per distinct instant; a wildcard job's times in the gap
//!   are skipped;
//! - fall back: a fixed-time job runs only in the first pass of the repeated interval; a wildcard
//!   job runs in both passes, in the order the instants occur.
//!
//! The search walks the expression's wall-clock matches in order and maps each to its instants.
//! Walking the wall clock visits instants in order everywhere except in a repeated interval,
//! whose second pass lies behind the walk when the search starts inside the first pass; that one
//! case is searched on its own ([`Fold`]).

use chrono::{DateTime, Duration, LocalResult, NaiveDateTime, Offset, SubsecRound, TimeZone, Utc};
use chrono_tz::Tz;

use super::cron::CronExpr;

/// How many wall-clock matches a search may pass over (matches the DST rules skip) before it
/// gives up. Only a fixed-time job with thousands of second-level matches inside one skipped or
/// repeated hour comes near it.
const MAX_SKIPPED_MATCHES: usize = 100_000;

/// The first fire of `expr` in `tz` strictly after `after`, or `None` if there is none within
/// the search window.
pub(crate) fn next_fire(expr: &CronExpr, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
    // Fires fall on whole seconds, so the next one after `after` is the next one after its second.
    let after = after.trunc_subsecs(0);
    let wall = after.with_timezone(&tz).naive_local();
    let walked = walk(expr, after, wall, tz);
    if !expr.is_wildcard() {
        return walked;
    }
    let Some(fold) = Fold::containing_first_pass(after, wall, tz) else {
        return walked;
    };
    // The walk found either a first-pass match, which precedes the whole second pass, or a fire
    // past the repeated interval, which any second-pass match precedes.
    if walked.is_some_and(|fire| fire < fold.transition) {
        return walked;
    }
    fold.first_second_pass_fire(expr).or(walked)
}

/// Walks wall-clock matches after `wall` and returns the first instant after `after` that the DST
/// rules give them.
fn walk(
    expr: &CronExpr,
    after: DateTime<Utc>,
    mut wall: NaiveDateTime,
    tz: Tz,
) -> Option<DateTime<Utc>> {
    for _ in 0..MAX_SKIPPED_MATCHES {
        wall = expr.next_wall_time(wall, false)?;
        let fire = match tz.from_local_datetime(&wall) {
            LocalResult::Single(at) => Some(at.with_timezone(&Utc)),
            LocalResult::Ambiguous(first, second) => {
                let first = first.with_timezone(&Utc);
                if first > after {
                    Some(first)
                } else if expr.is_wildcard() {
                    Some(second.with_timezone(&Utc))
                } else {
                    None
                }
            }
            LocalResult::None if expr.is_wildcard() => None,
            LocalResult::None => first_instant_after_gap(wall, tz),
        };
        if let Some(fire) = fire.filter(|fire| *fire > after) {
            return Some(fire);
        }
    }
    None
}

/// The instant at which the clock jumps over `wall`, which lies in a skipped interval: the first
/// instant whose local time is later than `wall`.
fn first_instant_after_gap(wall: NaiveDateTime, tz: Tz) -> Option<DateTime<Utc>> {
    // Offsets a day either side of the gap: real zones never change twice within a day.
    let offset_at = |naive: NaiveDateTime| {
        i64::from(tz.offset_from_utc_datetime(&naive).fix().local_minus_utc())
    };
    let before = offset_at(wall - Duration::days(1));
    let after = offset_at(wall + Duration::days(1));
    // `wall` read at the new offset is an instant before the jump, and read at the old offset an
    // instant at or after it.
    let wall_seconds = wall.and_utc().timestamp();
    offset_change(tz, wall_seconds - after, wall_seconds - before)
}

/// The first whole second in `(low, high]` whose UTC offset differs from `low`'s, when the
/// offset changes once in between: the instant the clock jumps.
fn offset_change(tz: Tz, mut low: i64, mut high: i64) -> Option<DateTime<Utc>> {
    let offset_at = |seconds: i64| {
        DateTime::from_timestamp(seconds, 0).map(|at| at.with_timezone(&tz).offset().fix())
    };
    let initial = offset_at(low)?;
    if low >= high || offset_at(high)? == initial {
        return None;
    }
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if offset_at(middle)? == initial {
            low = middle;
        } else {
            high = middle;
        }
    }
    DateTime::from_timestamp(high, 0)
}

/// A repeated wall-clock interval (a fall-back), seen from an instant in its first pass.
struct Fold {
    /// When the clock goes back: the first instant of the second pass.
    transition: DateTime<Utc>,
    /// The first repeated wall-clock time.
    start: NaiveDateTime,
    /// The end (exclusive) of the repeated wall-clock times.
    end: NaiveDateTime,
    /// The UTC offset of the second pass, in seconds.
    second_pass_offset: i64,
}

impl Fold {
    /// The fold `after` lies in, if `after` is in the first pass of a repeated interval.
    fn containing_first_pass(after: DateTime<Utc>, wall: NaiveDateTime, tz: Tz) -> Option<Self> {
        let LocalResult::Ambiguous(first, second) = tz.from_local_datetime(&wall) else {
            return None;
        };
        if first.with_timezone(&Utc) != after {
            return None;
        }
        let first_offset = i64::from(first.offset().fix().local_minus_utc());
        let second_offset = i64::from(second.offset().fix().local_minus_utc());
        // The clock goes back within one offset difference after `after`.
        let low = after.timestamp();
        let transition = offset_change(tz, low, low + (first_offset - second_offset))?;
        let transition_wall = transition.naive_utc();
        Some(Self {
            transition,
            start: transition_wall + Duration::seconds(second_offset),
            end: transition_wall + Duration::seconds(first_offset),
            second_pass_offset: second_offset,
        })
    }

    /// The first match of a wildcard job in the second pass.
    fn first_second_pass_fire(&self, expr: &CronExpr) -> Option<DateTime<Utc>> {
        let wall = expr
            .next_wall_time(self.start, true)
            .filter(|wall| *wall < self.end)?;
        Some((wall - Duration::seconds(self.second_pass_offset)).and_utc())
    }
}
