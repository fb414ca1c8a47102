//! Loading a schedule directory whole: each of its files read in path order, then the checks
//! across files (names unique, steps naming declared jobs, queue fallbacks, `sendmail` once).

use std::collections::HashMap;
use std::path::Path;

use super::contents::{FileContents, read_bytes};
use super::diagnostics::{Diagnostic, LoadError};
use super::{ScheduleDir, walk};
use crate::schedule::job::{Job, Source};
use crate::schedule::notice::{self, Notices};
use crate::schedule::{queues, workflow};

/// Every file under `dir` read, and checked against each other.
///
/// # Errors
/// Every problem of every file and across them.
pub(super) fn load(dir: &Path) -> Result<ScheduleDir, LoadError> {
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
        Ok(ScheduleDir { jobs, queues })
    } else {
        Err(LoadError { diagnostics })
    }
}

/// Each name declared again after its first place, at the second one.
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
                 (msmtp-mta works under the service unit's hardening; see Notices in docs/guide.md)"
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
