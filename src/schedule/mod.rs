//! What users declare: schedule expressions, time zones, schedule files and the jobs they define.

pub mod cron;
pub mod crontab;
mod dst;
pub mod file;
pub mod job;
pub mod limits;
pub mod notice;
pub mod queues;
pub mod run_as;
pub mod selector;
mod words;
pub mod workflow;

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Serialize, Serializer};

pub use cron::{CronError, CronExpr};
pub use file::{
    Diagnostic, LoadError, ScheduleDir, check_name, load_dir, load_schedule_dir, parse_file,
};
pub use job::{DefinitionError, Delivery, Job, Misfire, Output, Overlap, Priority};
pub use notice::{Event, Notices, Target};
pub use queues::{QueueFallback, QueueFallbacks};
pub use selector::{Label, Labels, Reach, Selector, given_labels, placement};
pub use workflow::{OnFailure, Step, Workflow};

/// An IANA time zone by its name, as a schedule file's `timezone` and the CLI's `--tz` give it.
///
/// # Errors
/// What a user reads when the name is no zone, with names that are.
pub fn parse_zone(name: &str) -> Result<Tz, String> {
    name.parse().map_err(|_| {
        format!(
            "unknown time zone \"{name}\": expected an IANA name such as Europe/Paris, \
             America/New_York or UTC"
        )
    })
}

/// The declared jobs as a replica currently knows them, one shared copy of each definition;
/// replaced whole on reload, and watched by every component.
pub type Jobs = std::sync::Arc<Vec<std::sync::Arc<Job>>>;

/// `jobs` as every component holds them: one copy of each definition, shared.
pub fn shared_jobs(jobs: Vec<Job>) -> Jobs {
    std::sync::Arc::new(jobs.into_iter().map(std::sync::Arc::new).collect())
}

/// A job's schedule: a crontab expression or macro, or `@every <duration>`.
///
/// ```
/// use chrono::{DateTime, Utc};
/// use redcron::schedule::Schedule;
///
/// // 02:30 does not exist in New York on 2026-03-08: a fixed-time job runs at 03:00 EDT.
/// let schedule = Schedule::parse("30 2 * * *")?;
/// let zone = chrono_tz::America::New_York;
/// let after: DateTime<Utc> = "2026-03-08T00:00:00Z".parse()?;
/// let next = schedule.next_after(after, zone).expect("a next fire");
/// assert_eq!(next.with_timezone(&zone).to_rfc3339(), "2026-03-08T03:00:00-04:00");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Schedule {
    /// The expression as written, shown back to users and hashed into the job's definition.
    text: String,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// A crontab expression or macro: its bit sets, kept inline (about 40 bytes).
    Cron(CronExpr),
    /// `@every`: fires at every multiple of this many milliseconds since the Unix epoch, so
    /// every replica computes the same instants whatever its start time.
    Every(u64),
}

impl Schedule {
    /// Parses a schedule expression.
    ///
    /// # Errors
    /// A [`CronError`] that names the offending field and says what was expected.
    pub fn parse(text: &str) -> Result<Self, CronError> {
        let trimmed = text.trim();
        let kind = match every_argument(trimmed) {
            Some(duration) => Kind::Every(parse_every(duration)?),
            None => Kind::Cron(CronExpr::parse(trimmed)?),
        };
        Ok(Self {
            text: trimmed.to_owned(),
            kind,
        })
    }

    /// The expression as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The first fire strictly after `after`, with wall-clock fields read in `tz`. `None` when
    /// the schedule has no fire within the search window (several years).
    pub fn next_after(&self, after: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        match &self.kind {
            Kind::Cron(expr) => dst::next_fire(expr, after, tz),
            Kind::Every(period_ms) => {
                let period = i64::try_from(*period_ms).ok()?;
                let next = after
                    .timestamp_millis()
                    .div_euclid(period)
                    .checked_add(1)?
                    .checked_mul(period)?;
                DateTime::from_timestamp_millis(next)
            }
        }
    }

    /// The fires strictly after `after`, in order.
    pub fn fires_after(&self, after: DateTime<Utc>, tz: Tz) -> impl Iterator<Item = DateTime<Utc>> {
        std::iter::successors(self.next_after(after, tz), move |fire| {
            self.next_after(*fire, tz)
        })
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Serialize for Schedule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

/// The text after `@every`, if the expression is one.
fn every_argument(text: &str) -> Option<&str> {
    let (word, rest) = text.split_at_checked("@every".len())?;
    (word.eq_ignore_ascii_case("@every")
        && (rest.is_empty() || rest.starts_with(char::is_whitespace)))
    .then(|| rest.trim())
}

fn parse_every(text: &str) -> Result<u64, CronError> {
    let fail = |reason: &str| CronError::Every(format!("\"{text}\": {reason}"));
    if text.is_empty() {
        return Err(fail("the duration is missing"));
    }
    let duration = humantime::parse_duration(text).map_err(|error| fail(&error.to_string()))?;
    if duration < Duration::from_secs(1) {
        return Err(fail("shorter than 1s"));
    }
    if duration.subsec_nanos() % 1_000_000 != 0 {
        return Err(fail("not a whole number of milliseconds"));
    }
    u64::try_from(duration.as_millis()).map_err(|_| fail("too long"))
}

#[cfg(test)]
mod tests;
