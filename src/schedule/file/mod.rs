//! Schedule files: TOML with one `[jobs.<name>]` table per job (and `[queues.<name>]` tables,
//! see [`super::queues`], and `[workflows.<name>]` tables, see [`super::workflow`]), loaded
//! all-or-nothing.
//!
//! Loading happens in two stages. The file is first read as written: every job is a map from
//! field name to a TOML value, each with its place in the file. Each field is then checked and
//! typed on its own, so one pass reports every bad field of every job, each with its file, line,
//! column and field name, rather than stopping at the first.
//!
//! The rooms: `diagnostics` says what is wrong and where; `walk` finds a directory's files and
//! `directory` loads them whole, with the checks across files; `contents` reads one file's
//! tables; `table` is the reader of one table that jobs and workflows share, and `job_reader`
//! reads a job with it.

use std::path::Path;

use super::job::Job;
use super::queues::QueueFallback;

mod contents;
mod diagnostics;
mod directory;
mod job_reader;
mod table;
mod walk;

pub(super) use diagnostics::FileContext;
pub use diagnostics::{Diagnostic, LoadError};
pub(super) use table::{RawTable, Table, schedule, typed, zone};
pub use walk::schedule_files;

/// What a schedule directory declares.
#[derive(Debug, Clone, Default)]
pub struct ScheduleDir {
    /// Its jobs.
    pub jobs: Vec<Job>,
    /// Its `[queues]` tables.
    pub queues: Vec<QueueFallback>,
}

/// The jobs of every `*.toml` file under `dir`: [`load_schedule_dir`] without the queue tables.
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
/// As [`load_schedule_dir`].
pub fn load_dir(dir: &Path) -> Result<Vec<Job>, LoadError> {
    load_schedule_dir(dir).map(|declared| declared.jobs)
}

/// Loads every `*.toml` file in `dir` and its subdirectories, in path order; names starting
/// with `.` are skipped (see `walk`).
///
/// ```no_run
/// use std::path::Path;
///
/// # fn example() -> Result<(), redcron::schedule::LoadError> {
/// let declared = redcron::schedule::load_schedule_dir(Path::new("/etc/redcron/schedules"))?;
/// for fallback in &declared.queues {
///     println!("{} -> {} after {:?}", fallback.queue, fallback.fallback, fallback.after);
/// }
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// A [`LoadError`] listing every problem in every file, including names declared twice, when
/// anything at all is wrong: a directory is loaded whole or not at all.
pub fn load_schedule_dir(dir: &Path) -> Result<ScheduleDir, LoadError> {
    directory::load(dir)
}

/// Parses one schedule file's text; `path` is used for messages and [`Source`](super::job::Source).
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
    let contents = contents::read_file(path, text);
    if contents.diagnostics.is_empty() {
        Ok(contents.jobs)
    } else {
        Err(contents.diagnostics)
    }
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

#[cfg(test)]
mod tests;
