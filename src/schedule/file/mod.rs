//! Schedule files: TOML with one `[jobs.<name>]` table per job (and `[queues.<name>]` tables,
//! see [`super::queues`], and `[workflows.<name>]` tables, see [`super::workflow`]), loaded
//! all-or-nothing.
//!
//! Loading happens in two stages. The file is first read as written: every job is a map from
//! field name to a TOML value, each with its place in the file. Each field is then checked and
//! typed on its own, so one pass reports every bad field of every job, each with its file, line,
//! column and field name, rather than stopping at the first.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono_tz::Tz;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use toml::{Spanned, Value};

use super::job::{Delivery, Job, Misfire, Output, Overlap, Priority, Source};
use super::notice::{self, DEFAULT_LATE_AFTER, Event, Notices, Target};
use super::queues::{self, QueueFallback, RawQueue, read_queue};
use super::selector::{Reach, Selector};
use super::workflow::{self, RawWorkflow, StepUse, read_workflow};
use super::{Schedule, limits, run_as};

mod walk;

pub use walk::schedule_files;

/// One problem found in a schedule file.
///
/// ```
/// use std::path::Path;
///
/// use redcron::schedule::parse_file;
///
/// let text = "[jobs.report]\nschedule = \"0 25 * * *\"\ncommand = \"report\"\n";
/// let problems = parse_file(Path::new("reports.toml"), text).unwrap_err();
/// assert_eq!(problems[0].field.as_deref(), Some("schedule"));
/// assert_eq!(
///     problems[0].to_string(),
///     "reports.toml:2:12: job \"report\", field \"schedule\": hour field \"25\": 25 is out of \
///      range: expected a number 0-23"
/// );
/// ```
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
///
/// ```
/// use std::path::Path;
///
/// let error = redcron::schedule::load_dir(Path::new("no-such-directory")).unwrap_err();
/// assert_eq!(error.diagnostics[0].path, Path::new("no-such-directory"));
/// // One line per problem: path[:line:column]: what is wrong.
/// assert!(error.to_string().starts_with("no-such-directory: cannot read the schedule directory"));
/// ```
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
const FIELDS: [&str; 26] = [
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
    "output",
    "notify",
    "notify_on",
    "late_after",
    "where",
    "on",
];

/// The fields `[defaults]` may not give: each job has its own.
const OWN_FIELDS: [&str; 2] = ["schedule", "command"];

/// A job table as written: field name -> value, each with its byte span.
type RawJob = BTreeMap<Spanned<String>, Spanned<Value>>;

/// A schedule file as written: job name -> job table, each with its byte span.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    /// Fields every job of the file has unless it sets them itself.
    #[serde(default)]
    defaults: Option<Spanned<RawJob>>,
    #[serde(default)]
    jobs: BTreeMap<Spanned<String>, Spanned<RawJob>>,
    #[serde(default)]
    queues: BTreeMap<Spanned<String>, RawQueue>,
    #[serde(default)]
    workflows: BTreeMap<Spanned<String>, Spanned<RawWorkflow>>,
}

/// What a schedule directory declares.
#[derive(Debug, Clone, Default)]
pub struct Schedules {
    /// Its jobs.
    pub jobs: Vec<Job>,
    /// Its `[queues]` tables.
    pub queues: Vec<QueueFallback>,
}

/// The jobs of every `*.toml` file under `dir`: [`load_schedules`] without the queue tables.
///
/// ```no_run
/// use std::path::Path;
///
/// match redcron::schedule::load_dir(Path::new("/etc/redcron/schedules")) {
///     Ok(jobs) => println!("{} jobs", jobs.len()),
///     // Every problem of every file, one a line.
///     Err(error) => eprintln!("{error}"),
/// }
/// ```
///
/// # Errors
/// As [`load_schedules`].
pub fn load_dir(dir: &Path) -> Result<Vec<Job>, LoadError> {
    load_schedules(dir).map(|schedules| schedules.jobs)
}

/// Loads every `*.toml` file in `dir` and its subdirectories, in path order; names starting
/// with `.` are skipped (see `walk`).
///
/// ```no_run
/// use std::path::Path;
///
/// # fn example() -> Result<(), redcron::schedule::LoadError> {
/// let schedules = redcron::schedule::load_schedules(Path::new("/etc/redcron/schedules"))?;
/// for fallback in &schedules.queues {
///     println!("{} -> {} after {:?}", fallback.queue, fallback.fallback, fallback.after);
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// A [`LoadError`] listing every problem in every file, including names declared twice, when
/// anything at all is wrong: a directory is loaded whole or not at all.
pub fn load_schedules(dir: &Path) -> Result<Schedules, LoadError> {
    let paths = walk::schedule_files(dir).map_err(|diagnostics| LoadError { diagnostics })?;

    let mut jobs = Vec::new();
    let mut queues = Vec::new();
    let mut declared = Vec::new();
    let mut step_uses = Vec::new();
    let mut diagnostics = Vec::new();
    let mut complete = true;
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
        step_uses.extend(contents.step_uses);
        queues.extend(contents.queues);
        jobs.extend(contents.jobs);
        diagnostics.extend(contents.diagnostics);
        complete &= contents.complete;
    }
    // Names are compared whether or not their jobs are valid, and the checks across files run
    // on every job that read well, so fixing one problem never reveals another that could have
    // been reported with it; nor do they report what an invalid job would have settled.
    diagnostics.extend(duplicate_names(&declared));
    diagnostics.extend(mail_without_sendmail(&jobs));
    diagnostics.extend(workflow::check_step_jobs(&step_uses, &jobs, &declared));
    let job_queues: Vec<&str> = jobs.iter().map(|job| job.queue.as_str()).collect();
    diagnostics.extend(queues::check_fallbacks(&queues, &job_queues, complete));
    if diagnostics.is_empty() {
        Ok(Schedules { jobs, queues })
    } else {
        Err(LoadError { diagnostics })
    }
}

/// The jobs that mail their notices on a machine with no `sendmail`: refused when the schedules
/// load, not found out when the first notice cannot go. Said once for the directory, however
/// many jobs mail: pointed at where the first one's `notify` is written (a `[defaults]` when it
/// takes it from there), with the names of the others.
fn mail_without_sendmail(jobs: &[Job]) -> Vec<Diagnostic> {
    let mailing: Vec<&Job> = jobs
        .iter()
        .filter(|job| job.notify.as_ref().is_some_and(Notices::mails))
        .collect();
    let Some(first) = mailing.first() else {
        return Vec::new();
    };
    if notice::find_sendmail().is_some() {
        return Vec::new();
    }
    let mut message = match std::env::var_os(notice::SENDMAIL_ENV).filter(|named| !named.is_empty())
    {
        Some(named) => format!(
            "a mailto: target needs sendmail, and {} ({}) is not a program that can be run",
            notice::SENDMAIL_ENV,
            named.to_string_lossy()
        ),
        None => "a mailto: target needs sendmail, and there is none on PATH, at \
                 /usr/sbin/sendmail or at /usr/lib/sendmail: install a mail transfer agent \
                 (msmtp-mta works under the service unit's hardening; see the README)"
            .to_owned(),
    };
    const NAMED: usize = 5;
    let others: Vec<&str> = mailing[1..].iter().map(|job| job.name.as_str()).collect();
    if !others.is_empty() {
        let mut names = others[..others.len().min(NAMED)].join(", ");
        if others.len() > NAMED {
            names.push_str(&format!(" and {} more", others.len() - NAMED));
        }
        message.push_str(&format!(
            " (said once: {} other job{} mail{} too: {names})",
            others.len(),
            if others.len() == 1 { "" } else { "s" },
            if others.len() == 1 { "s" } else { "" },
        ));
    }
    let (line, column, inherited) =
        first
            .source
            .notify
            .unwrap_or((first.source.line, first.source.column, false));
    vec![Diagnostic {
        path: first.source.path.clone(),
        position: Some((line, column)),
        job: (!inherited).then(|| first.name.clone()),
        field: Some(
            if inherited {
                "defaults.notify"
            } else {
                "notify"
            }
            .to_owned(),
        ),
        message,
    }]
}

/// What one file declares: every job name with its place, valid or not, and either the jobs or
/// every problem found.
struct FileContents {
    declared: Vec<(String, Source)>,
    /// The valid `[queues]` tables (an invalid one is among the diagnostics).
    queues: Vec<QueueFallback>,
    /// The jobs and workflows that read well, even when others did not: checks across files
    /// run on them, so that one problem does not hide another.
    jobs: Vec<Job>,
    /// Whether every job and workflow the file declares is among `jobs`: when one is not, what
    /// it would have declared (its queue, say) is unknown.
    complete: bool,
    /// Every workflow step that read, in valid workflows or not: their jobs are checked across
    /// files.
    step_uses: Vec<StepUse>,
    diagnostics: Vec<Diagnostic>,
}

impl FileContents {
    fn unreadable(diagnostic: Diagnostic) -> Self {
        Self {
            declared: Vec::new(),
            queues: Vec::new(),
            jobs: Vec::new(),
            complete: false,
            step_uses: Vec::new(),
            diagnostics: vec![diagnostic],
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
                    "declared twice: first at {}:{}; job and workflow names must be unique \
                     across all files",
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
/// ```
/// use std::path::Path;
///
/// use redcron::schedule::{Priority, parse_file};
///
/// let text = r#"
/// [jobs.daily-report]
/// schedule = "0 6 * * *"
/// command = "report --daily"
/// priority = "high"
/// "#;
/// let jobs = parse_file(Path::new("reports.toml"), text).expect("a valid file");
/// assert_eq!(jobs[0].name, "daily-report");
/// assert_eq!(jobs[0].priority, Priority::High);
/// ```
///
/// # Errors
/// Every problem in the file: TOML syntax, unknown or missing fields, wrong types, bad values.
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<Job>, Vec<Diagnostic>> {
    let contents = read_file(path, text);
    if contents.diagnostics.is_empty() {
        Ok(contents.jobs)
    } else {
        Err(contents.diagnostics)
    }
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
    let mut diagnostics = Vec::new();
    let defaults = raw.defaults.map(|defaults| {
        let defaults = defaults.into_inner();
        for field in defaults.keys() {
            let message = if OWN_FIELDS.contains(&field.get_ref().as_str()) {
                "each job has its own: it cannot be a default".to_owned()
            } else if !FIELDS.contains(&field.get_ref().as_str()) {
                format!("unknown field: expected one of {}", FIELDS.join(", "))
            } else {
                continue;
            };
            diagnostics.push(file.diagnostic(
                Some(field.span().start),
                None,
                Some(&format!("defaults.{}", field.get_ref())),
                message,
            ));
        }
        defaults
    });
    let mut tables: Vec<_> = raw.jobs.into_iter().collect();
    tables.sort_by_key(|(name, _)| name.span().start);
    let mut declared: Vec<(String, Source)> = tables
        .iter()
        .map(|(name, _)| (name.get_ref().clone(), file.source(name.span().start)))
        .collect();

    let mut jobs = Vec::new();
    // Defaults with unknown fields are not given to any job: reported once, at `[defaults]`.
    let defaults = defaults.filter(|_| diagnostics.is_empty());
    for (name, table) in tables {
        let mut fields = table.into_inner();
        let mut inherited = BTreeSet::new();
        if let Some(defaults) = &defaults {
            for (field, value) in defaults {
                if !fields.contains_key(field.get_ref().as_str()) {
                    fields.insert(field.clone(), value.clone());
                    inherited.insert(field.get_ref().clone());
                }
            }
        }
        let reader = JobReader {
            file: &file,
            name: &name,
            fields,
            inherited,
            diagnostics: Vec::new(),
        };
        match reader.read() {
            Ok(job) => jobs.push(job),
            Err(found) => diagnostics.extend(found),
        }
    }
    let mut step_uses = Vec::new();
    let mut workflows: Vec<_> = raw.workflows.into_iter().collect();
    workflows.sort_by_key(|(name, _)| name.span().start);
    for (name, table) in workflows {
        declared.push((name.get_ref().clone(), file.source(name.span().start)));
        match read_workflow(&file, &name, table.into_inner(), &mut step_uses) {
            Ok(job) => jobs.push(job),
            Err(found) => diagnostics.extend(found),
        }
    }
    let mut queues = Vec::new();
    for (name, table) in raw.queues {
        match read_queue(&file, &name, table) {
            Ok(queue) => queues.push(queue),
            Err(found) => diagnostics.extend(found),
        }
    }
    diagnostics.sort_by_key(|diagnostic| diagnostic.position);
    // A default that every job inherits is wrong once, where it is written.
    diagnostics.dedup();
    FileContents {
        complete: jobs.len() == declared.len(),
        declared,
        queues,
        jobs,
        step_uses,
        diagnostics,
    }
}

/// The file being read, for turning byte offsets into diagnostics.
pub(super) struct FileContext<'a> {
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
    /// The text at `span`, empty when it is not within the file.
    pub(super) fn text_at(&self, span: std::ops::Range<usize>) -> &'a str {
        self.text.get(span).unwrap_or_default()
    }

    fn position(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = self.line_starts[line - 1];
        (line, self.text[line_start..offset].chars().count() + 1)
    }

    pub(super) fn source(&self, offset: usize) -> Source {
        let (line, column) = self.position(offset);
        Source {
            path: self.path.to_owned(),
            line,
            column,
            notify: None,
        }
    }

    pub(super) fn diagnostic(
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
    /// The fields the job takes from `[defaults]`: their problems are the defaults'.
    inherited: BTreeSet<String>,
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
        let command_offset = self.offset_of("command");
        let command = self.take("command", |value| {
            let command = typed::<String>(value)?;
            if command.trim().is_empty() {
                return Err("the command is empty".to_owned());
            }
            limits::check_command(&command)?;
            Ok(command)
        });
        let workdir = self.take("workdir", |value| {
            let workdir = typed::<String>(value)?;
            if workdir.is_empty() {
                return Err(
                    "the directory is empty: leave the field out to use the replica's".to_owned(),
                );
            }
            let workdir = PathBuf::from(workdir);
            limits::check_workdir(&workdir)?;
            Ok(workdir)
        });
        let env = self.take("env", |value| {
            let env = typed::<BTreeMap<String, String>>(value)?;
            match env.keys().find(|key| check_env_name(key).is_err()) {
                Some(key) => Err(format!(
                    "\"{key}\" is not a variable name: expected letters, digits and _, not \
                     starting with a digit"
                )),
                None => limits::check_env(&env).map(|()| env),
            }
        });
        let priority = self.take("priority", typed::<Priority>);
        let queue_offset = self.offset_of("queue");
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
        let job_name = self.name.get_ref().clone();
        let output = self.take("output", |value| {
            let output = Output::parse(&typed::<String>(value)?)?;
            // A directory cannot be appended to: said here rather than at every run.
            if let Output::File(template) = &output {
                let path = template.replace("{job}", &job_name);
                if Path::new(&path).is_dir() {
                    return Err(format!("{path} is a directory: name a file in it"));
                }
            }
            Ok(output)
        });
        let notify_offset = self.offset_of("notify");
        let targets = self.take("notify", |value| {
            let written = typed::<Vec<String>>(value)?;
            let mut targets: Vec<Target> = Vec::with_capacity(written.len());
            for text in &written {
                let target = Target::parse(text)?;
                if targets.contains(&target) {
                    return Err(format!("\"{text}\" is named twice: it would be told twice"));
                }
                targets.push(target);
            }
            Ok(targets)
        });
        let notify_on_offset = self.offset_of("notify_on");
        let notify_on = self.take("notify_on", |value| {
            let mut events = Vec::new();
            for name in typed::<Vec<String>>(value)? {
                let event = Event::parse(&name).ok_or_else(|| {
                    let names: Vec<_> = Event::ALL.iter().map(|event| event.as_str()).collect();
                    format!(
                        "\"{name}\" is not an outcome: expected {}",
                        names.join(", ")
                    )
                })?;
                events.push(event);
            }
            events.sort_unstable();
            events.dedup();
            Ok(events)
        });
        let where_offset = self.offset_of("where");
        let selector = self.take("where", |value| {
            Selector::parse(&typed::<Vec<String>>(value)?)
        });
        let on_offset = self.offset_of("on");
        let on = self.take("on", typed::<Reach>).unwrap_or_default();
        let late_after_offset = self.offset_of("late_after");
        let late_after = self.take("late_after", |value| {
            let late_after = duration(value)?;
            if late_after.is_zero() {
                return Err("0s would call every start late: expected more than 0s".to_owned());
            }
            Ok(late_after)
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
        // A triggered run is one run: a job that has no fire would never run on every replica.
        if on == Reach::Every && schedule.is_none() && !self.has_reported("schedule") {
            self.report(
                on_offset.unwrap_or(self.name.span().start),
                Some("on"),
                "\"every\" needs a schedule: it makes each fire one run per replica, and a \
                 triggered run is one run"
                    .to_owned(),
            );
        }
        // A `where` no replica matches is a job nobody runs, found out only when its fires are
        // skipped as undeclared: said here. An every-replica run waits in its replica's own
        // route, whatever the job's queue.
        if let Some(selector) = &selector {
            let queue = queue.as_deref().unwrap_or("default");
            if let Some(message) = selector.impossible() {
                self.report(
                    where_offset.unwrap_or(self.name.span().start),
                    Some("where"),
                    message,
                );
            } else if let Some(message) = selector
                .other_queue(queue)
                .filter(|_| on == Reach::One && !self.has_reported("queue"))
            {
                // A `where` from [defaults] that a job's own queue contradicts is the job's
                // mistake, said at its queue.
                let (offset, field) =
                    if self.inherited.contains("where") && !self.inherited.contains("queue") {
                        (queue_offset, "queue")
                    } else {
                        (where_offset, "where")
                    };
                self.report(
                    offset.unwrap_or(self.name.span().start),
                    Some(field),
                    message,
                );
            }
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
        // Each string fits; all of them together must too, with what the replica passes on.
        if let Err(message) =
            limits::check_exec_size(&command, env.as_ref().unwrap_or(&BTreeMap::new()))
        {
            self.report(
                command_offset.unwrap_or(self.name.span().start),
                Some("command"),
                message,
            );
        }
        let notify = match (targets, notify_on) {
            (Some(targets), _) if targets.is_empty() => None,
            (Some(targets), on) => Some(Notices {
                targets,
                on: on.unwrap_or_else(|| vec![Event::Dead]),
                late_after: late_after.unwrap_or(DEFAULT_LATE_AFTER),
            }),
            (None, Some(_)) if !self.has_reported("notify") => {
                self.report(
                    notify_on_offset.unwrap_or(self.name.span().start),
                    Some("notify_on"),
                    "there is no target to notify: add notify = [\"mailto:...\"] (or a web \
                     address, or exec:COMMAND)"
                        .to_owned(),
                );
                None
            }
            (None, _) => None,
        };
        if late_after.is_some()
            && !self.inherited.contains("late_after")
            && notify
                .as_ref()
                .is_some_and(|notices| !notices.sends(Event::Late))
        {
            self.report(
                late_after_offset.unwrap_or(self.name.span().start),
                Some("late_after"),
                "it does nothing without \"late\" in notify_on".to_owned(),
            );
        }
        if notify.as_ref().is_some_and(|notices| notices.on.is_empty()) {
            self.report(
                notify_on_offset
                    .or(notify_offset)
                    .unwrap_or(self.name.span().start),
                Some("notify_on"),
                "no outcome is chosen: leave notify_on out for [\"dead\"], or name some".to_owned(),
            );
        }
        if !self.diagnostics.is_empty() {
            return Err(self.diagnostics);
        }
        Ok(Job {
            source: Source {
                notify: notify_offset.map(|offset| {
                    let (line, column) = self.file.position(offset);
                    (line, column, self.inherited.contains("notify"))
                }),
                ..self.file.source(self.name.span().start)
            },
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
            output: output.unwrap_or_default(),
            notify,
            workflow: None,
            selector: selector.unwrap_or_default(),
            on,
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
        let inherited = format!("defaults.{field}");
        self.diagnostics.iter().any(|diagnostic| {
            diagnostic.field.as_deref() == Some(field)
                || diagnostic.field.as_deref() == Some(inherited.as_str())
        })
    }

    fn report(&mut self, offset: usize, field: Option<&str>, message: String) {
        let diagnostic = match field.filter(|field| self.inherited.contains(*field)) {
            Some(field) => self.file.diagnostic(
                Some(offset),
                None,
                Some(&format!("defaults.{field}")),
                message,
            ),
            None => self
                .file
                .diagnostic(Some(offset), Some(self.name.get_ref()), field, message),
        };
        self.diagnostics.push(diagnostic);
    }
}

/// Converts a value with serde, keeping serde's message ("invalid type: integer `3`, expected a
/// string", "unknown variant `hgh`, expected one of ...").
pub(super) fn typed<T: DeserializeOwned>(value: Value) -> Result<T, String> {
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
mod tests;
