//! Schedule files: TOML with one `[jobs.<name>]` table per job, loaded all-or-nothing.
//!
//! Loading happens in two stages. The file is first read as written: every job is a map from
//! field name to a TOML value, each with its place in the file. Each field is then checked and
//! typed on its own, so one pass reports every bad field of every job, each with its file, line,
//! column and field name, rather than stopping at the first.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use toml::{Spanned, Value};

use super::job::{Delivery, Job, Misfire, Overlap, Priority, Source};
use super::{Schedule, run_as};

/// One problem found in a schedule file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file (or directory) at fault.
    pub path: PathBuf,
    /// The 1-based line and column of the offending text, when it has a place in the file.
    pub position: Option<(usize, usize)>,
    /// The job the problem belongs to, if any.
    pub job: Option<String>,
    /// The field the problem belongs to, if any.
    pub field: Option<String>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some((line, column)) = self.position {
            write!(f, ":{line}:{column}")?;
        }
        f.write_str(": ")?;
        match (&self.job, &self.field) {
            (Some(job), Some(field)) => write!(f, "job \"{job}\", field \"{field}\": ")?,
            (Some(job), None) => write!(f, "job \"{job}\": ")?,
            (None, Some(field)) => write!(f, "field \"{field}\": ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

/// Why a schedule directory was refused: every problem found in it, in file order.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub struct LoadError {
    /// At least one.
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, diagnostic) in self.diagnostics.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

/// The fields a job table may have, for the unknown-field message.
const FIELDS: [&str; 20] = [
    "schedule",
    "timezone",
    "command",
    "workdir",
    "env",
    "priority",
    "queue",
    "timeout",
    "retries",
    "backoff",
    "max_backoff",
    "overlap",
    "max_concurrency",
    "misfire",
    "starting_deadline",
    "jitter",
    "delivery",
    "enabled",
    "user",
    "group",
];

/// A job table as written: field name -> value, each with its byte span.
type RawJob = BTreeMap<Spanned<String>, Spanned<Value>>;

/// A schedule file as written: job name -> job table, each with its byte span.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    jobs: BTreeMap<Spanned<String>, Spanned<RawJob>>,
}

/// Loads every `*.toml` file in `dir` (not recursively, in name order).
///
/// # Errors
/// A [`LoadError`] listing every problem in every file, including names declared twice, when
/// anything at all is wrong: a directory is loaded whole or not at all.
pub fn load_dir(dir: &Path) -> Result<Vec<Job>, LoadError> {
    let fail = |message: String| LoadError {
        diagnostics: vec![Diagnostic {
            path: dir.to_owned(),
            position: None,
            job: None,
            field: None,
            message,
        }],
    };
    let entries = std::fs::read_dir(dir)
        .map_err(|error| fail(format!("cannot read the schedule directory: {error}")))?;
    let mut paths = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|error| fail(format!("cannot read the schedule directory: {error}")))?
            .path();
        if path
            .extension()
            .is_some_and(|extension| extension == "toml")
            && path.is_file()
        {
            paths.push(path);
        }
    }
    paths.sort();

    let mut jobs = Vec::new();
    let mut declared = Vec::new();
    let mut diagnostics = Vec::new();
    for path in paths {
        let contents = match std::fs::read(&path) {
            Ok(bytes) => read_bytes(&path, bytes),
            Err(error) => FileContents::unreadable(Diagnostic {
                path,
                position: None,
                job: None,
                field: None,
                message: format!("cannot read the file: {error}"),
            }),
        };
        declared.extend(contents.declared);
        match contents.parsed {
            Ok(parsed) => jobs.extend(parsed),
            Err(found) => diagnostics.extend(found),
        }
    }
    // Names are compared whether or not their jobs are valid, so fixing one problem never
    // reveals another that could have been reported with it.
    diagnostics.extend(duplicate_names(&declared));
    if diagnostics.is_empty() {
        Ok(jobs)
    } else {
        Err(LoadError { diagnostics })
    }
}

/// What one file declares: every job name with its place, valid or not, and either the jobs or
/// every problem found.
struct FileContents {
    declared: Vec<(String, Source)>,
    parsed: Result<Vec<Job>, Vec<Diagnostic>>,
}

impl FileContents {
    fn unreadable(diagnostic: Diagnostic) -> Self {
        Self {
            declared: Vec::new(),
            parsed: Err(vec![diagnostic]),
        }
    }
}

fn read_bytes(path: &Path, bytes: Vec<u8>) -> FileContents {
    match String::from_utf8(bytes) {
        Ok(text) => read_file(path, &text),
        Err(error) => {
            let valid = error.utf8_error().valid_up_to();
            let text = String::from_utf8_lossy(error.as_bytes());
            FileContents::unreadable(Diagnostic {
                path: path.to_owned(),
                position: Some(FileContext::new(path, &text).position(valid)),
                job: None,
                field: None,
                message: "the file is not valid UTF-8".to_owned(),
            })
        }
    }
}

fn duplicate_names(declared: &[(String, Source)]) -> Vec<Diagnostic> {
    let mut first_seen: HashMap<&str, &Source> = HashMap::new();
    let mut diagnostics = Vec::new();
    for (name, source) in declared {
        match first_seen.get(name.as_str()) {
            Some(first) => diagnostics.push(Diagnostic {
                path: source.path.clone(),
                position: Some((source.line, source.column)),
                job: Some(name.clone()),
                field: None,
                message: format!(
                    "declared twice: first at {}:{}; job names must be unique across all files",
                    first.path.display(),
                    first.line
                ),
            }),
            None => {
                first_seen.insert(name, source);
            }
        }
    }
    diagnostics
}

/// Parses one schedule file's text; `path` is used for messages and [`Source`].
///
/// # Errors
/// Every problem in the file: TOML syntax, unknown or missing fields, wrong types, bad values.
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<Job>, Vec<Diagnostic>> {
    read_file(path, text).parsed
}

fn read_file(path: &Path, text: &str) -> FileContents {
    let file = FileContext::new(path, text);
    let raw: RawFile = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(error) => {
            return FileContents::unreadable(file.diagnostic(
                error.span().map(|span| span.start),
                None,
                None,
                error.message().trim_end().to_owned(),
            ));
        }
    };
    let mut tables: Vec<_> = raw.jobs.into_iter().collect();
    tables.sort_by_key(|(name, _)| name.span().start);
    let declared = tables
        .iter()
        .map(|(name, _)| (name.get_ref().clone(), file.source(name.span().start)))
        .collect();

    let mut jobs = Vec::new();
    let mut diagnostics = Vec::new();
    for (name, table) in tables {
        let reader = JobReader {
            file: &file,
            name: &name,
            fields: table.into_inner(),
            diagnostics: Vec::new(),
        };
        match reader.read() {
            Ok(job) => jobs.push(job),
            Err(found) => diagnostics.extend(found),
        }
    }
    let parsed = if diagnostics.is_empty() {
        Ok(jobs)
    } else {
        diagnostics.sort_by_key(|diagnostic| diagnostic.position);
        Err(diagnostics)
    };
    FileContents { declared, parsed }
}

/// The file being read, for turning byte offsets into diagnostics.
struct FileContext<'a> {
    path: &'a Path,
    text: &'a str,
    /// The byte offset where each line starts: a file of 100,000 jobs has as many positions to
    /// find, which must not each scan the file from its start.
    line_starts: Vec<usize>,
}

impl<'a> FileContext<'a> {
    fn new(path: &'a Path, text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(newline, _)| newline + 1))
            .collect();
        Self {
            path,
            text,
            line_starts,
        }
    }

    /// The 1-based line and column (in characters) of a byte offset.
    fn position(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = self.line_starts[line - 1];
        (line, self.text[line_start..offset].chars().count() + 1)
    }

    fn source(&self, offset: usize) -> Source {
        let (line, column) = self.position(offset);
        Source {
            path: self.path.to_owned(),
            line,
            column,
        }
    }

    fn diagnostic(
        &self,
        offset: Option<usize>,
        job: Option<&str>,
        field: Option<&str>,
        message: String,
    ) -> Diagnostic {
        Diagnostic {
            path: self.path.to_owned(),
            position: offset.map(|offset| self.position(offset)),
            job: job.map(str::to_owned),
            field: field.map(str::to_owned),
            message,
        }
    }
}

/// Checks and types one job table's fields, collecting every problem.
struct JobReader<'a> {
    file: &'a FileContext<'a>,
    name: &'a Spanned<String>,
    fields: RawJob,
    diagnostics: Vec<Diagnostic>,
}

impl JobReader<'_> {
    fn read(mut self) -> Result<Job, Vec<Diagnostic>> {
        let name = self.name.get_ref().clone();
        if let Err(reason) = check_name(&name) {
            self.report(
                self.name.span().start,
                None,
                format!("bad job name: {reason}"),
            );
        }
        let schedule = self.take("schedule", |value| {
            Schedule::parse(&typed::<String>(value)?).map_err(|error| error.to_string())
        });
        let timezone = self.take("timezone", |value| {
            let zone = typed::<String>(value)?;
            zone.parse::<Tz>().map_err(|_| {
                format!(
                    "unknown time zone \"{zone}\": expected an IANA name such as \
                     Europe/Paris, America/New_York or UTC"
                )
            })
        });
        let command = self.take("command", |value| {
            let command = typed::<String>(value)?;
            if command.trim().is_empty() {
                return Err("the command is empty".to_owned());
            }
            Ok(command)
        });
        let workdir = self.take("workdir", |value| {
            let workdir = typed::<String>(value)?;
            if workdir.is_empty() {
                return Err(
                    "the directory is empty: leave the field out to use the replica's".to_owned(),
                );
            }
            Ok(PathBuf::from(workdir))
        });
        let env = self.take("env", |value| {
            let env = typed::<BTreeMap<String, String>>(value)?;
            match env.keys().find(|key| check_env_name(key).is_err()) {
                Some(key) => Err(format!(
                    "\"{key}\" is not a variable name: expected letters, digits and _, not \
                     starting with a digit"
                )),
                None => Ok(env),
            }
        });
        let priority = self.take("priority", typed::<Priority>);
        let queue = self.take("queue", |value| {
            let queue = typed::<String>(value)?;
            check_name(&queue).map(|()| queue)
        });
        let timeout = self.take("timeout", |value| {
            let timeout = duration(value)?;
            if timeout.is_zero() {
                return Err("a timeout of 0 would kill every run at once".to_owned());
            }
            Ok(timeout)
        });
        let retries = self.take("retries", typed::<u32>);
        let backoff_offset = self.offset_of("backoff");
        let backoff = self.take("backoff", duration);
        let max_backoff = self.take("max_backoff", duration);
        let overlap_offset = self.offset_of("overlap");
        let overlap = self.take("overlap", typed::<Overlap>);
        let max_concurrency_offset = self.offset_of("max_concurrency");
        let max_concurrency = self.take("max_concurrency", |value| {
            let limit = typed::<u32>(value)?;
            if limit == 0 {
                return Err(
                    "a max_concurrency of 0 would never run the job: expected 1 or more".to_owned(),
                );
            }
            Ok(limit)
        });
        let misfire = self.take("misfire", typed::<Misfire>);
        let starting_deadline = self.take("starting_deadline", duration);
        let jitter = self.take("jitter", duration);
        let delivery = self.take("delivery", typed::<Delivery>);
        let enabled = self.take("enabled", typed::<bool>);
        let user_offset = self.offset_of("user");
        let user = self.take("user", |value| {
            let user = typed::<String>(value)?;
            run_as::check_user(&user).map(|()| user)
        });
        let group_offset = self.offset_of("group");
        let group = self.take("group", |value| {
            let group = typed::<String>(value)?;
            run_as::check_group(&group).map(|()| group)
        });

        let unknown: Vec<_> = std::mem::take(&mut self.fields).into_keys().collect();
        for field in unknown {
            self.report(
                field.span().start,
                Some(field.get_ref()),
                format!("unknown field: expected one of {}", FIELDS.join(", ")),
            );
        }
        let backoff = backoff.unwrap_or(Duration::from_secs(30));
        let max_backoff = max_backoff.unwrap_or(Duration::from_secs(3600));
        if backoff > max_backoff {
            self.report(
                backoff_offset.unwrap_or(self.name.span().start),
                Some("backoff"),
                format!(
                    "{} is longer than max_backoff ({})",
                    humantime::format_duration(backoff),
                    humantime::format_duration(max_backoff)
                ),
            );
        }
        // A scheduled job does not overlap itself unless told to; an on-demand job is a task
        // queue, where runs of the same job are independent.
        let overlap = overlap.unwrap_or(if schedule.is_some() {
            Overlap::Forbid
        } else {
            Overlap::Allow
        });
        if overlap == Overlap::Forbid && max_concurrency.is_some_and(|limit| limit > 1) {
            self.report(
                max_concurrency_offset
                    .or(overlap_offset)
                    .unwrap_or(self.name.span().start),
                Some("max_concurrency"),
                "more than 1 needs overlap = \"allow\" (forbid runs one at a time)".to_owned(),
            );
        }
        if group.is_some() && user.is_none() && !self.has_reported("user") {
            self.report(
                group_offset
                    .or(user_offset)
                    .unwrap_or(self.name.span().start),
                Some("group"),
                "a group needs a user: add user = \"...\"".to_owned(),
            );
        }
        let Some(command) = command else {
            if !self.has_reported("command") {
                self.report(
                    self.name.span().start,
                    Some("command"),
                    "missing: every job needs a command".to_owned(),
                );
            }
            return Err(self.diagnostics);
        };
        if !self.diagnostics.is_empty() {
            return Err(self.diagnostics);
        }
        Ok(Job {
            source: self.file.source(self.name.span().start),
            name,
            schedule,
            timezone: timezone.unwrap_or(chrono_tz::UTC),
            command,
            workdir,
            env: env.unwrap_or_default(),
            priority: priority.unwrap_or(Priority::Normal),
            queue: queue.unwrap_or_else(|| "default".to_owned()),
            timeout: timeout.unwrap_or(Duration::from_secs(3600)),
            retries: retries.unwrap_or(0),
            backoff,
            max_backoff,
            overlap,
            max_concurrency,
            misfire: misfire.unwrap_or(Misfire::RunOnce),
            starting_deadline,
            jitter: jitter.unwrap_or(Duration::ZERO),
            delivery: delivery.unwrap_or(Delivery::AtLeastOnce),
            enabled: enabled.unwrap_or(true),
            user,
            group,
        })
    }

    /// Removes `field` and converts its value; a failed conversion is reported at the value and
    /// gives `None`, like an absent field, so reading goes on to find further problems.
    fn take<T>(
        &mut self,
        field: &str,
        convert: impl FnOnce(Value) -> Result<T, String>,
    ) -> Option<T> {
        let value = self.fields.remove(field)?;
        let offset = value.span().start;
        match convert(value.into_inner()) {
            Ok(converted) => Some(converted),
            Err(message) => {
                self.report(offset, Some(field), message);
                None
            }
        }
    }

    fn offset_of(&self, field: &str) -> Option<usize> {
        self.fields.get(field).map(|value| value.span().start)
    }

    fn has_reported(&self, field: &str) -> bool {
        self.diagnostics
            .iter()
            .any(|diagnostic| diagnostic.field.as_deref() == Some(field))
    }

    fn report(&mut self, offset: usize, field: Option<&str>, message: String) {
        let diagnostic =
            self.file
                .diagnostic(Some(offset), Some(self.name.get_ref()), field, message);
        self.diagnostics.push(diagnostic);
    }
}

/// Converts a value with serde, keeping serde's message ("invalid type: integer `3`, expected a
/// string", "unknown variant `hgh`, expected one of ...").
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    value
        .try_into()
        .map_err(|error: toml::de::Error| error.message().trim_end().to_owned())
}

fn duration(value: Value) -> Result<Duration, String> {
    let text = typed::<String>(value)?;
    humantime::parse_duration(&text).map_err(|error| {
        format!("\"{text}\" is not a duration ({error}): expected a string like \"30s\", \"15m\" or \"2h\"")
    })
}

/// Job and queue names: `[a-z0-9][a-z0-9._-]{0,127}`, safe in Redis keys, file names and shells.
///
/// # Errors
/// What is wrong with the name.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid_first = name
        .bytes()
        .next()
        .is_some_and(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit());
    let valid_rest = name.bytes().all(|byte| {
        byte.is_ascii_lowercase() || byte.is_ascii_digit() || matches!(byte, b'.' | b'_' | b'-')
    });
    if valid_first && valid_rest && name.len() <= 128 {
        Ok(())
    } else {
        Err(format!(
            "\"{name}\" does not match [a-z0-9][a-z0-9._-]{{0,127}} (lower-case letters, digits, \
             '.', '_' and '-', at most 128, starting with a letter or digit)"
        ))
    }
}

fn check_env_name(name: &str) -> Result<(), ()> {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|byte| byte.is_ascii_alphabetic() || byte == b'_');
    if first_ok && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_') {
        Ok(())
    } else {
        Err(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Job>, Vec<String>> {
        parse_file(Path::new("jobs.toml"), text)
            .map_err(|found| found.iter().map(ToString::to_string).collect())
    }

    fn errors(text: &str) -> Vec<String> {
        parse(text).expect_err("the file must be refused")
    }

    #[test]
    fn a_minimal_job_gets_every_default() {
        let jobs = parse("[jobs.cleanup]\ncommand = \"true\"\n").expect("valid");
        let job = &jobs[0];
        assert_eq!(job.name, "cleanup");
        assert_eq!(job.schedule, None);
        assert_eq!(job.timezone, chrono_tz::UTC);
        assert_eq!(job.priority, Priority::Normal);
        assert_eq!(job.queue, "default");
        assert_eq!(job.timeout, Duration::from_secs(3600));
        assert_eq!(job.retries, 0);
        assert_eq!(job.backoff, Duration::from_secs(30));
        assert_eq!(job.max_backoff, Duration::from_secs(3600));
        assert_eq!(
            job.overlap,
            Overlap::Allow,
            "an on-demand job is a task queue"
        );
        assert_eq!(job.max_concurrency, None);
        assert_eq!(job.misfire, Misfire::RunOnce);
        assert_eq!(job.starting_deadline, None);
        assert_eq!(job.jitter, Duration::ZERO);
        assert_eq!(job.delivery, Delivery::AtLeastOnce);
        assert!(job.enabled);
        assert_eq!(job.source.line, 1);
    }

    #[test]
    fn a_scheduled_job_forbids_overlap_and_a_limit_above_one_needs_allow() {
        let jobs = parse(
            "[jobs.tick]\nschedule = \"@hourly\"\ncommand = \"true\"\n\
             [jobs.resize]\ncommand = \"true\"\nmax_concurrency = 4\n",
        )
        .expect("valid");
        assert_eq!(jobs[0].overlap, Overlap::Forbid);
        assert_eq!(
            (jobs[1].overlap, jobs[1].max_concurrency),
            (Overlap::Allow, Some(4))
        );
        assert_eq!(
            errors(
                "[jobs.tick]\nschedule = \"@hourly\"\ncommand = \"true\"\nmax_concurrency = 2\n\
                 [jobs.none]\ncommand = \"true\"\nmax_concurrency = 0\n"
            ),
            [
                "jobs.toml:4:19: job \"tick\", field \"max_concurrency\": more than 1 needs \
                 overlap = \"allow\" (forbid runs one at a time)",
                "jobs.toml:7:19: job \"none\", field \"max_concurrency\": a max_concurrency of 0 \
                 would never run the job: expected 1 or more",
            ]
        );
    }

    #[test]
    fn every_field_is_read() {
        let text = r#"
[jobs.report]
schedule = "0 * * * *"
timezone = "Europe/Paris"
command = "make report"
workdir = "/srv/reports"
env = { LANG = "C", REPORT_DIR = "/tmp" }
priority = "high"
queue = "reports"
timeout = "15m"
retries = 3
backoff = "10s"
max_backoff = "5m"
overlap = "allow"
misfire = "run-all"
starting_deadline = "2m"
jitter = "5s"
delivery = "at-most-once"
enabled = false
"#;
        let job = parse(text).expect("valid").remove(0);
        assert_eq!(
            job.schedule.as_ref().map(Schedule::as_str),
            Some("0 * * * *")
        );
        assert_eq!(job.timezone, chrono_tz::Europe::Paris);
        assert_eq!(job.workdir, Some(PathBuf::from("/srv/reports")));
        assert_eq!(job.env.get("REPORT_DIR").map(String::as_str), Some("/tmp"));
        assert_eq!(job.priority, Priority::High);
        assert_eq!(job.queue, "reports");
        assert_eq!(job.timeout, Duration::from_secs(900));
        assert_eq!(job.retries, 3);
        assert_eq!(job.backoff, Duration::from_secs(10));
        assert_eq!(job.max_backoff, Duration::from_secs(300));
        assert_eq!(job.overlap, Overlap::Allow);
        assert_eq!(job.misfire, Misfire::RunAll);
        assert_eq!(job.starting_deadline, Some(Duration::from_secs(120)));
        assert_eq!(job.jitter, Duration::from_secs(5));
        assert_eq!(job.delivery, Delivery::AtMostOnce);
        assert!(!job.enabled);
        assert_eq!(job.source.line, 2);
    }

    #[test]
    fn every_bad_field_is_reported_with_line_column_and_field() {
        let text = "\
[jobs.one]
command = \"true\"
schedule = \"61 * * * *\"
timezone = \"Mars/Olympus\"
retries = -1
priorty = \"high\"

[jobs.two]
schedule = \"@daily\"
timeout = \"soon\"
priority = \"urgent\"
env = { 1BAD = \"x\" }
";
        assert_eq!(
            errors(text),
            [
                "jobs.toml:3:12: job \"one\", field \"schedule\": minute field \"61\": 61 is out \
                 of range: expected a number 0-59",
                "jobs.toml:4:12: job \"one\", field \"timezone\": unknown time zone \
                 \"Mars/Olympus\": expected an IANA name such as Europe/Paris, America/New_York \
                 or UTC",
                "jobs.toml:5:11: job \"one\", field \"retries\": invalid value: integer `-1`, \
                 expected u32",
                "jobs.toml:6:1: job \"one\", field \"priorty\": unknown field: expected one of \
                 schedule, timezone, command, workdir, env, priority, queue, timeout, retries, \
                 backoff, max_backoff, overlap, max_concurrency, misfire, starting_deadline, jitter, delivery, \
                 enabled, user, group",
                "jobs.toml:8:7: job \"two\", field \"command\": missing: every job needs a command",
                "jobs.toml:10:11: job \"two\", field \"timeout\": \"soon\" is not a duration \
                 (expected number at 0): expected a string like \"30s\", \"15m\" or \"2h\"",
                "jobs.toml:11:12: job \"two\", field \"priority\": unknown variant `urgent`, \
                 expected one of `high`, `normal`, `low`",
                "jobs.toml:12:7: job \"two\", field \"env\": \"1BAD\" is not a variable name: \
                 expected letters, digits and _, not starting with a digit",
            ]
        );
    }

    #[test]
    fn wrong_types_name_what_was_expected() {
        let found = errors("[jobs.x]\ncommand = 3\nenabled = \"yes\"\n");
        assert_eq!(
            found,
            [
                "jobs.toml:2:11: job \"x\", field \"command\": invalid type: integer `3`, \
                 expected a string",
                "jobs.toml:3:11: job \"x\", field \"enabled\": invalid type: string \"yes\", \
                 expected a boolean",
            ]
        );
    }

    #[test]
    fn names_and_structure_are_checked() {
        let found = errors("[jobs.Nightly]\ncommand = \"true\"\n");
        assert!(
            found[0].starts_with("jobs.toml:1:7: job \"Nightly\": bad job name"),
            "{found:?}"
        );
        let found = errors("[job.x]\ncommand = \"true\"\n");
        assert!(
            found[0].contains("unknown field `job`, expected `jobs`"),
            "{found:?}"
        );
        assert!(found[0].starts_with("jobs.toml:1:2:"), "{found:?}");
        let found = errors("[jobs.x]\ncommand = \"true\"\nschedule = \n");
        assert!(found[0].starts_with("jobs.toml:3:"), "{found:?}");
        let found = errors("[jobs.x]\ncommand = \"true\"\nbackoff = \"2h\"\n");
        assert_eq!(
            found,
            ["jobs.toml:3:11: job \"x\", field \"backoff\": 2h is longer than max_backoff (1h)"]
        );
        let found = errors("[jobs.x]\ncommand = \"  \"\ntimeout = \"0s\"\n");
        assert_eq!(found.len(), 2, "{found:?}");
    }

    #[test]
    fn crlf_files_and_comments_are_read() {
        let jobs =
            parse("# nightly\r\n[jobs.x]\r\ncommand = \"true\" # inline\r\n").expect("valid");
        assert_eq!(jobs[0].source.line, 2);
    }

    #[test]
    fn content_hash_ignores_place_and_spelling_but_not_meaning() {
        let a = parse("[jobs.x]\ncommand = \"true\"\ntimeout = \"60m\"\n").expect("valid");
        let b = parse("\n\n[jobs.x]\ntimeout = \"1h\"\ncommand = \"true\"\n").expect("valid");
        let c = parse("[jobs.x]\ncommand = \"true\"\ntimeout = \"59m\"\n").expect("valid");
        assert_eq!(a[0].content_hash(), b[0].content_hash());
        assert_ne!(a[0].content_hash(), c[0].content_hash());
        assert_eq!(a[0].content_hash().len(), 64);
    }

    #[test]
    fn a_directory_loads_whole_or_reports_every_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("a.toml"), "[jobs.x]\ncommand = \"true\"\n").expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not a schedule").expect("write");
        assert_eq!(load_dir(dir.path()).expect("valid").len(), 1);

        std::fs::write(dir.path().join("b.toml"), "[jobs.x]\ncommand = \"false\"\n")
            .expect("write");
        std::fs::write(dir.path().join("c.toml"), "[jobs.y]\nschedule = \"* *\"\n").expect("write");
        std::fs::write(dir.path().join("d.toml"), b"[jobs.z]\ncommand = \"\xff\"\n")
            .expect("write");
        let error = load_dir(dir.path()).expect_err("invalid");
        let messages: Vec<String> = error.diagnostics.iter().map(ToString::to_string).collect();
        assert_eq!(messages.len(), 4, "{messages:#?}");
        assert!(messages[0].contains("c.toml:1:7: job \"y\", field \"command\": missing"));
        assert!(messages[1].contains("c.toml:2:12: job \"y\", field \"schedule\": expected 5"));
        assert!(messages[2].contains("d.toml:2:12: the file is not valid UTF-8"));
        assert!(messages[3].contains("b.toml:1:7: job \"x\": declared twice: first at"));
        assert!(messages[3].ends_with("a.toml:1; job names must be unique across all files"));

        let missing = load_dir(&dir.path().join("nope")).expect_err("missing");
        assert!(
            missing
                .to_string()
                .contains("cannot read the schedule directory")
        );
    }

    proptest::proptest! {
        #[test]
        fn parser_never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
            let _ = parse_file(Path::new("fuzz.toml"), &text);
        }

        #[test]
        fn parser_never_panics_on_job_like_text(
            text in "(\\[jobs\\.[a-z]{1,3}\\]\n|[a-z_]{1,8} = (\"[ -~]{0,12}\"|[0-9-]{1,3}|true|\\{\\})\n){0,8}"
        ) {
            let _ = parse_file(Path::new("fuzz.toml"), &text);
        }
    }
}
