//! A validated job definition and its content hash.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize, Serializer};
use sha2::{Digest, Sha256};
use thiserror::Error;

use super::notice::Notices;
use super::selector::{Reach, Selector};
use super::workflow::Workflow;
use super::{CronError, Schedule};

/// Which ready list a run waits in: workers always take high before normal before low.
///
/// ```
/// use redcron::schedule::Priority;
///
/// // Spelled as in schedule files.
/// let priority: Priority = serde_json::from_str(r#""high""#)?;
/// assert_eq!(priority, Priority::High);
/// assert!(Priority::High < Priority::Low);
/// # Ok::<(), serde_json::Error>(())
/// ```
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

impl Priority {
    /// Every priority, highest first: the order a queue's ready lists are claimed in.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];
}

/// Whether a fire may start while the job's previous run is still running.
///
/// ```
/// use std::path::Path;
///
/// use redcron::schedule::{Overlap, parse_file};
///
/// let text = r#"
/// [jobs.backup]
/// schedule = "@hourly"
/// command = "backup"
///
/// [jobs.resize]
/// command = "resize"
/// "#;
/// let jobs = parse_file(Path::new("jobs.toml"), text).expect("a valid file");
/// // The defaults: a scheduled job runs alone, an on-demand job overlaps.
/// assert_eq!(jobs[0].overlap, Overlap::Forbid);
/// assert_eq!(jobs[1].overlap, Overlap::Allow);
/// ```
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
///
/// ```
/// use redcron::schedule::Misfire;
///
/// // Spelled as in schedule files.
/// let misfire: Misfire = serde_json::from_str(r#""run-all""#)?;
/// assert_eq!(misfire, Misfire::RunAll);
/// # Ok::<(), serde_json::Error>(())
/// ```
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

/// Where a run's output goes besides the tail kept with the run (which `history` and `runs
/// show` print): its lines, stdout and stderr interleaved, each with the run id.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Output {
    /// Nowhere else (`"kept"`).
    #[default]
    Kept,
    /// The replica's log, at INFO (`"log"`), up to a cap per run.
    Log,
    /// Appended to a file (`"file:/var/log/redcron/{job}.log"`, `{job}` the job's name),
    /// opened again when it is rotated.
    File(String),
}

impl Output {
    /// Reads the text form of a schedule file's `output`.
    ///
    /// # Errors
    /// What is wrong with it, for the file's diagnostics.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "kept" => Ok(Output::Kept),
            "log" => Ok(Output::Log),
            _ => match text.strip_prefix("file:") {
                Some(path) if path.starts_with('/') => {
                    if let Some(unknown) = placeholders(path).find(|name| *name != "{job}") {
                        return Err(format!(
                            "\"{unknown}\" is not replaced in output paths: only {{job}}, the \
                             job's name, is"
                        ));
                    }
                    Ok(Output::File(path.to_owned()))
                }
                Some(path) => Err(format!(
                    "\"{path}\" is not an absolute path: replicas run commands from anywhere"
                )),
                None => Err(format!(
                    "\"{text}\": expected \"kept\", \"log\" or \"file:/absolute/path\" ({{job}} \
                     in the path is the job's name)"
                )),
            },
        }
    }

    fn is_kept(&self) -> bool {
        *self == Output::Kept
    }
}

/// The `{...}` words of an output path.
fn placeholders(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('{').filter_map(|(start, _)| {
        path[start..]
            .find('}')
            .map(|end| &path[start..=start + end])
    })
}

impl From<Output> for String {
    fn from(output: Output) -> Self {
        match output {
            Output::Kept => "kept".to_owned(),
            Output::Log => "log".to_owned(),
            Output::File(path) => format!("file:{path}"),
        }
    }
}

impl TryFrom<String> for Output {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Output::parse(&text)
    }
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
    /// Where its `notify` is written, line and column, and whether in `[defaults]`: what a
    /// problem with its targets points at.
    pub notify: Option<(usize, usize, bool)>,
}

/// The delay before a job's first retry when it sets no `backoff`; a workflow's start retries so.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(30);

/// The cap on the retry delay when a job sets no `max_backoff`.
pub const DEFAULT_MAX_BACKOFF: Duration = Duration::from_secs(3600);

/// One declared job, validated: every field typed and defaulted, nothing left to check.
///
/// It serializes to a canonical JSON form (durations in milliseconds, the zone by its IANA name,
/// the schedule as written) which [`Job::content_hash`] hashes.
///
/// ```
/// use std::path::Path;
/// use std::time::Duration;
///
/// use redcron::schedule::{Priority, parse_file};
///
/// let text = "[jobs.backup]\nschedule = \"@daily\"\ncommand = \"backup /srv\"\n";
/// let job = parse_file(Path::new("backup.toml"), text).expect("a valid file").remove(0);
/// // What a job does not set.
/// assert_eq!(job.queue, "default");
/// assert_eq!(job.priority, Priority::Normal);
/// assert_eq!(job.timeout, Duration::from_secs(3600));
/// assert_eq!(job.timezone, chrono_tz::UTC);
/// ```
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
    /// Where its runs' output goes besides the kept tail. Left out of the canonical form when
    /// kept, so that the hash of a job without it is what it was before the setting existed.
    #[serde(skip_serializing_if = "Output::is_kept")]
    pub output: Output,
    /// Who hears of its runs' outcomes, and of which; `None` without a target. Left out of the
    /// canonical form when `None`, as `output` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notices>,
    /// For the job of a `[workflows.<name>]` table: the workflow its runs start, instead of a
    /// command. Left out of the canonical form when `None`, as `notify` is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<Workflow>,
    /// The labels a replica must carry to run it (`where`): a replica that does not match does
    /// not declare it. Left out of the canonical form when empty, as `notify` is.
    #[serde(rename = "where", skip_serializing_if = "Selector::is_empty")]
    pub selector: Selector,
    /// How many of the matching replicas run each fire (`on`): one, or each of them. Left out
    /// of the canonical form for one.
    #[serde(skip_serializing_if = "Reach::is_one")]
    pub on: Reach,
    /// Where it was declared.
    #[serde(skip)]
    pub source: Source,
}

impl Job {
    /// The SHA-256 (hex) of the definition's canonical JSON: equal on every replica that
    /// declares the same job the same way, whatever file or line it sits in.
    ///
    /// ```
    /// use std::path::Path;
    ///
    /// use redcron::schedule::parse_file;
    ///
    /// let job = "[jobs.backup]\ncommand = \"backup /srv\"\n";
    /// let here = parse_file(Path::new("a.toml"), job).expect("a valid file");
    /// let moved = parse_file(Path::new("b.toml"), &format!("# moved\n\n{job}")).expect("valid");
    /// assert_eq!(here[0].content_hash(), moved[0].content_hash());
    /// ```
    pub fn content_hash(&self) -> String {
        hex::encode(self.content_digest())
    }

    /// The SHA-256 behind [`Job::content_hash`], as bytes: what is kept for 100,000 jobs.
    pub fn content_digest(&self) -> [u8; 32] {
        // Streamed into the hasher: hashing 100,000 jobs allocates no JSON.
        let mut hasher = HashWriter(Sha256::new());
        serde_json::to_writer(&mut hasher, self).expect("a job always serializes to JSON");
        hasher.0.finalize().into()
    }

    /// Reads back the canonical JSON form a job serializes to (as another replica published
    /// it), and checks that it is the definition whose content hash is `hash`.
    ///
    /// # Errors
    /// A [`DefinitionError`]: not this form (a damaged entry, or one written by a version that
    /// knows fields this one does not), or not the definition `hash` names.
    pub fn from_canonical_json(text: &str, hash: &str) -> Result<Self, DefinitionError> {
        let wire: CanonicalJob = serde_json::from_str(text)?;
        let schedule = wire
            .schedule
            .as_deref()
            .map(Schedule::parse)
            .transpose()
            .map_err(DefinitionError::Schedule)?;
        let timezone = wire
            .timezone
            .parse()
            .map_err(|_| DefinitionError::Zone(wire.timezone.clone()))?;
        let job = Self {
            name: wire.name,
            schedule,
            timezone,
            command: wire.command,
            workdir: wire.workdir,
            env: wire.env,
            priority: wire.priority,
            queue: wire.queue,
            timeout: Duration::from_millis(wire.timeout),
            retries: wire.retries,
            backoff: Duration::from_millis(wire.backoff),
            max_backoff: Duration::from_millis(wire.max_backoff),
            overlap: wire.overlap,
            max_concurrency: wire.max_concurrency,
            misfire: wire.misfire,
            starting_deadline: wire.starting_deadline.map(Duration::from_millis),
            jitter: Duration::from_millis(wire.jitter),
            delivery: wire.delivery,
            enabled: wire.enabled,
            user: wire.user,
            group: wire.group,
            output: wire.output,
            notify: wire.notify,
            workflow: wire.workflow,
            selector: wire.selector,
            on: wire.on,
            source: Source::default(),
        };
        let found = job.content_hash();
        if found != hash {
            return Err(DefinitionError::Hash {
                expected: hash.to_owned(),
                found,
            });
        }
        Ok(job)
    }

    /// The job's first fire strictly after `after`, or `None` for an on-demand job or a schedule
    /// with no further fire.
    ///
    /// ```
    /// use std::path::Path;
    ///
    /// use redcron::schedule::parse_file;
    ///
    /// let text = r#"
    /// [jobs.report]
    /// schedule = "0 6 * * *"
    /// timezone = "Europe/Paris"
    /// command = "report"
    /// "#;
    /// let job = parse_file(Path::new("report.toml"), text).expect("a valid file").remove(0);
    /// // 06:00 in Paris is 05:00 UTC in winter.
    /// let after = "2026-01-01T00:00:00Z".parse()?;
    /// assert_eq!(job.next_fire_after(after), Some("2026-01-01T05:00:00Z".parse()?));
    /// # Ok::<(), chrono::ParseError>(())
    /// ```
    pub fn next_fire_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.schedule.as_ref()?.next_after(after, self.timezone)
    }
}

/// Why a published definition could not be read back into a [`Job`].
#[derive(Debug, Error)]
pub enum DefinitionError {
    /// Not JSON of the canonical form.
    #[error("not a job definition: {0}")]
    Json(#[from] serde_json::Error),
    /// The schedule does not parse.
    #[error("schedule: {0}")]
    Schedule(CronError),
    /// The zone is not one this build knows.
    #[error("unknown time zone \"{0}\"")]
    Zone(String),
    /// A readable definition, but not the one named.
    #[error("its content hash is {found}, not {expected}")]
    Hash {
        /// The hash the definition was published under.
        expected: String,
        /// The hash of what was read.
        found: String,
    },
}

/// The canonical JSON form of a [`Job`], field by field, as [`Job::from_canonical_json`] reads
/// it. Unknown fields are refused: a definition from a version with more settings cannot be
/// planned faithfully by this one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CanonicalJob {
    name: String,
    schedule: Option<String>,
    timezone: String,
    command: String,
    workdir: Option<PathBuf>,
    env: BTreeMap<String, String>,
    priority: Priority,
    queue: String,
    timeout: u64,
    retries: u32,
    backoff: u64,
    max_backoff: u64,
    overlap: Overlap,
    #[serde(default)]
    max_concurrency: Option<u32>,
    misfire: Misfire,
    starting_deadline: Option<u64>,
    jitter: u64,
    delivery: Delivery,
    enabled: bool,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    output: Output,
    #[serde(default)]
    notify: Option<Notices>,
    #[serde(default)]
    workflow: Option<Workflow>,
    #[serde(default, rename = "where")]
    selector: Selector,
    #[serde(default)]
    on: Reach,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::parse_file;
    use std::path::Path;

    fn jobs(text: &str) -> Vec<Job> {
        parse_file(Path::new("test.toml"), text).expect("valid test jobs")
    }

    #[test]
    fn a_published_definition_reads_back_as_the_same_job() {
        let declared = jobs(
            "[jobs.full]\nschedule = \"30 2 * * 1-5\"\ntimezone = \"Europe/Paris\"\n\
             command = \"backup --all\"\nworkdir = \"/srv\"\nenv = { A = \"1\" }\n\
             priority = \"high\"\nqueue = \"ops\"\ntimeout = \"5m\"\nretries = 2\n\
             backoff = \"10s\"\nmax_backoff = \"1h\"\nmisfire = \"run-all\"\n\
             starting_deadline = \"2m\"\njitter = \"3s\"\ndelivery = \"at-most-once\"\n\
             output = \"file:/var/log/redcron/{job}.log\"\n\
             [jobs.mail]\ncommand = \"send\"\nmax_concurrency = 4\nenabled = false\n\
             output = \"log\"\n\
             [jobs.told]\ncommand = \"true\"\nnotify = [\"mailto:ops@example.com\", \"exec:page\"]\n\
             notify_on = [\"late\", \"dead\"]\nlate_after = \"90s\"\n",
        );
        for job in declared {
            let text = serde_json::to_string(&job).expect("serializes");
            let read = Job::from_canonical_json(&text, &job.content_hash()).expect("reads back");
            assert_eq!(
                Job {
                    source: Source::default(),
                    ..job.clone()
                },
                read
            );
            assert_eq!(serde_json::to_string(&read).expect("serializes"), text);
        }
    }

    /// A job that keeps its output only as the tail has the canonical form (and so the hash) it
    /// had before `output` existed: a rolling deploy of this version shows no drift for it.
    #[test]
    fn output_is_in_the_definition_only_when_it_goes_somewhere() {
        let declared = jobs(
            "[jobs.plain]\ncommand = \"true\"\n[jobs.kept]\ncommand = \"true\"\noutput = \"kept\"\n\
             [jobs.logged]\ncommand = \"true\"\noutput = \"log\"\n",
        );
        let text = |index: usize| serde_json::to_string(&declared[index]).expect("serializes");
        assert!(!text(0).contains("output") && !text(1).contains("output"));
        assert!(text(2).contains(r#""output":"log""#), "{}", text(2));
        for (bad, problem) in [
            (
                "logs",
                "expected \"kept\", \"log\" or \"file:/absolute/path\"",
            ),
            ("file:logs/{job}.log", "is not an absolute path"),
        ] {
            let error = Output::parse(bad).expect_err(bad);
            assert!(error.contains(problem), "{bad}: {error}");
        }
    }

    #[test]
    fn a_damaged_or_foreign_definition_is_refused_with_its_reason() {
        let job = jobs("[jobs.tick]\nschedule = \"* * * * *\"\ncommand = \"true\"\n").remove(0);
        let hash = job.content_hash();
        let text = serde_json::to_string(&job).expect("serializes");
        let error = |text: &str, hash: &str| {
            Job::from_canonical_json(text, hash)
                .expect_err("refused")
                .to_string()
        };
        assert!(error("{not json", &hash).starts_with("not a job definition"));
        let newer = text.replacen('{', "{\"from_the_future\":1,", 1);
        assert!(error(&newer, &hash).contains("unknown field"));
        let bad_schedule = text.replace("* * * * *", "61 * * * *");
        assert!(error(&bad_schedule, &hash).starts_with("schedule: minute field"));
        let other = text.replace("\"true\"", "\"false\"");
        assert!(error(&other, &hash).contains(&format!("not {hash}")));
    }
}
