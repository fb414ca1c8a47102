//! What one schedule file declares: its text read as TOML, then each of its tables by its own
//! reader (jobs with the file's `[defaults]`, workflows, queues), every problem kept.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::diagnostics::{Diagnostic, FileContext};
use super::job_reader::{read_defaults, read_job};
use super::table::RawTable;
use crate::schedule::job::{Job, Source};
use crate::schedule::queues::{QueueFallback, RawQueue, read_queue};
use crate::schedule::workflow::{StepUse, read_workflow};

/// A schedule file as written: job name -> job table, each with its byte span.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    /// Fields every job of the file has unless it sets them itself.
    #[serde(default)]
    defaults: Option<Spanned<RawTable>>,
    #[serde(default)]
    jobs: BTreeMap<Spanned<String>, Spanned<RawTable>>,
    #[serde(default)]
    queues: BTreeMap<Spanned<String>, RawQueue>,
    #[serde(default)]
    workflows: BTreeMap<Spanned<String>, Spanned<RawTable>>,
}

/// What one file declares: every job name with its place, valid or not, and either the jobs or
/// every problem found.
pub(super) struct FileContents {
    /// Every job and workflow name with its place, whether it read well or not: names must be
    /// unique across files.
    pub(super) declared: Vec<(String, Source)>,
    /// The valid `[queues]` tables (an invalid one is among the diagnostics).
    pub(super) queues: Vec<QueueFallback>,
    /// The jobs and workflows that read well, even when others did not: checks across files
    /// run on them, so that one problem does not hide another.
    pub(super) jobs: Vec<Job>,
    /// Whether every job and workflow the file declares is among `jobs`: when one is not, what
    /// it would have declared (its queue, say) is unknown.
    pub(super) complete: bool,
    /// Every workflow step that read, in valid workflows or not: their jobs are checked across
    /// files.
    pub(super) step_uses: Vec<StepUse>,
    /// Every problem of the file, in file order.
    pub(super) diagnostics: Vec<Diagnostic>,
}

impl FileContents {
    /// A file of which nothing could be read, for `diagnostic`.
    pub(super) fn unreadable(diagnostic: Diagnostic) -> Self {
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

/// Reads a file's bytes, which must be UTF-8.
pub(super) fn read_bytes(path: &Path, bytes: Vec<u8>) -> FileContents {
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

/// Reads a file's text.
pub(super) fn read_file(path: &Path, text: &str) -> FileContents {
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
    // Defaults that cannot be are given to no job: reported once, at `[defaults]`.
    let defaults = match raw
        .defaults
        .map(|defaults| read_defaults(&file, defaults.into_inner()))
        .transpose()
    {
        Ok(defaults) => defaults,
        Err(found) => {
            diagnostics.extend(found);
            None
        }
    };
    let mut tables: Vec<_> = raw.jobs.into_iter().collect();
    tables.sort_by_key(|(name, _)| name.span().start);
    let mut declared: Vec<(String, Source)> = tables
        .iter()
        .map(|(name, _)| (name.get_ref().clone(), file.source(name.span().start)))
        .collect();

    let mut jobs = Vec::new();
    for (name, table) in tables {
        match read_job(&file, &name, table.into_inner(), defaults.as_ref()) {
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
