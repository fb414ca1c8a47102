//! A validated job definition and its content hash.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::Schedule;

/// Which ready list a run waits in: workers always take high before normal before low.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    /// Claimed before anything else.
    High,
    /// The default.
    Normal,
    /// Claimed only when nothing of higher priority is ready.
    Low,
}

/// Whether a fire may start while the job's previous run is still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// One run at a time. A cron fire due while a run of the job is running is skipped (and
    /// recorded as skipped); any other run waits for the running one to end.
    Forbid,
    /// Runs may overlap, as in crontab.
    Allow,
}

/// What to do with fires that were missed (no replica, or Redis, was up at their time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Misfire {
    /// Run only the latest missed fire, once; skip the older ones.
    RunOnce,
    /// Skip every missed fire, as crontab does.
    Skip,
    /// Run every missed fire, oldest first.
    RunAll,
}

/// What a run whose worker died mid-run becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    /// The run is retried once its lease expires: it may run twice, so commands should be
    /// idempotent.
    AtLeastOnce,
    /// The run goes to the dead letters as lost: it never runs twice, as in crontab.
    AtMostOnce,
}

/// Where a job was declared, for messages. Not part of the definition's hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Source {
    /// The schedule file.
    pub path: PathBuf,
    /// The line of the job's name in its table header (1-based).
    pub line: usize,
    /// The column of the job's name (1-based, in characters).
    pub column: usize,
}

/// One declared job, validated: every field typed and defaulted, nothing left to check.
///
/// It serializes to a canonical JSON form (durations in milliseconds, the zone by its IANA name,
/// the schedule as written) which [`Job::content_hash`] hashes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Job {
    /// Unique across the schedule directory: `[a-z0-9][a-z0-9._-]{0,127}`.
    pub name: String,
    /// `None` for an on-demand job, run only when triggered or enqueued.
    pub schedule: Option<Schedule>,
    /// The zone in which the schedule's wall-clock fields are read.
    #[serde(serialize_with = "zone_name")]
    pub timezone: Tz,
    /// Run with `/bin/sh -c`.
    pub command: String,
    /// The command's working directory; the replica's own when `None`.
    pub workdir: Option<PathBuf>,
    /// Extra environment variables for the command.
    pub env: BTreeMap<String, String>,
    /// The ready list priority of the job's runs.
    pub priority: Priority,
    /// The queue the job's runs go to; a replica serves the queues it is told to.
    pub queue: String,
    /// How long a run may take before its process group is terminated.
    #[serde(serialize_with = "millis")]
    pub timeout: Duration,
    /// How many times a failed run is tried again.
    pub retries: u32,
    /// The delay before the first retry; it doubles with each further one.
    #[serde(serialize_with = "millis")]
    pub backoff: Duration,
    /// The cap on the retry delay.
    #[serde(serialize_with = "millis")]
    pub max_backoff: Duration,
    /// Whether runs of this job may run at the same time: `forbid` by default for a scheduled
    /// job, `allow` for an on-demand one.
    pub overlap: Overlap,
    /// The most runs of this job that run at once; runs above it wait in the queue. `None`: no
    /// limit beyond `overlap`. Left out of the canonical form when absent, so definitions
    /// written before it existed keep their hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
    /// What to do with missed fires.
    pub misfire: Misfire,
    /// A fire that cannot start within this long after its time is skipped.
    #[serde(serialize_with = "optional_millis")]
    pub starting_deadline: Option<Duration>,
    /// Each fire is delayed by a deterministic amount in `[0, jitter)`.
    #[serde(serialize_with = "millis")]
    pub jitter: Duration,
    /// What a run whose worker died becomes.
    pub delivery: Delivery,
    /// A disabled job is declared (it can be triggered) but its schedule does not fire.
    pub enabled: bool,
    /// The user the command runs as, with that user's groups, as cron runs each user's
    /// crontab; the replica's own user when `None`. Other users need a replica run as root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The group the command runs with instead of its user's primary group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Where it was declared.
    #[serde(skip)]
    pub source: Source,
}

impl Job {
    /// The SHA-256 (hex) of the definition's canonical JSON: equal on every replica that
    /// declares the same job the same way, whatever file or line it sits in.
    pub fn content_hash(&self) -> String {
        // Streamed into the hasher: hashing 100,000 jobs allocates no JSON.
        let mut hasher = HashWriter(Sha256::new());
        serde_json::to_writer(&mut hasher, self).expect("a job always serializes to JSON");
        hex::encode(hasher.0.finalize())
    }

    /// The job's first fire strictly after `after`, or `None` for an on-demand job or a schedule
    /// with no further fire.
    pub fn next_fire_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.as_ref()?.next_after(after, self.timezone)
    }
}

/// Feeds what is written to it to a SHA-256 hasher.
struct HashWriter(Sha256);

impl std::io::Write for HashWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn zone_name<S: Serializer>(zone: &Tz, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(zone.name())
}

fn millis<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

fn optional_millis<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => millis(duration, serializer),
        None => serializer.serialize_none(),
    }
}
