//! Reloading a running replica's schedule directory (SIGHUP, `--watch`): all or nothing, read
//! once a deploy has finished writing, and never the sudden loss of most jobs by accident.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{error, info, warn};

use super::watch_path::PathWatch;
use crate::replica::JobsHandle;
use crate::schedule::{Job, load_schedule_dir};

/// How long the directory must be quiet before `--watch` reads it: a deploy that writes its
/// files one by one (or empties the directory, then copies) is read once, when it is done.
const WATCH_QUIET: Duration = Duration::from_secs(1);

/// The longest `--watch` waits for quiet: a directory written to without a pause is still read.
const WATCH_LONGEST: Duration = Duration::from_secs(10);

/// What asked for a reload: only an operator's SIGHUP can confirm a mass removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trigger {
    /// SIGHUP (`systemctl reload`).
    Signal,
    /// A change `--watch` saw.
    Watch,
}

/// Reloads one namespace's schedule directory into its replica.
pub(super) struct Reloader {
    jobs: JobsHandle,
    directory: PathBuf,
    /// What the directory declared when a reload was refused as a mass removal (each job's
    /// name and content hash): a SIGHUP while it declares the same applies it.
    refused: Mutex<Option<Vec<(String, String)>>>,
}

impl Reloader {
    pub(super) fn new(jobs: JobsHandle, directory: PathBuf) -> Self {
        Self {
            jobs,
            directory,
            refused: Mutex::new(None),
        }
    }

    /// Loads the directory again, all or nothing: an invalid one keeps the previous
    /// definitions, and every problem is logged. A reload that would remove most jobs at once
    /// (see [`mass_removal`]) keeps them too, unless a SIGHUP confirms it.
    pub(super) fn reload(&self, trigger: Trigger) {
        let directory = self.directory.display();
        let loaded = match load_schedule_dir(&self.directory) {
            Ok(loaded) => loaded,
            Err(problems) => {
                for problem in &problems.diagnostics {
                    error!("{problem}");
                }
                error!(%directory, "reload refused: keeping the previous definitions");
                return;
            }
        };
        let declared = declared(&loaded.jobs);
        // A poisoned lock only means a reload panicked half-way: what it held is still right.
        let mut refused = self
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let current = self.jobs.current();
        if let Some(removed) = mass_removal(&current, &loaded.jobs) {
            if trigger == Trigger::Signal && refused.as_ref() == Some(&declared) {
                warn!(
                    %directory,
                    removed,
                    jobs = current.len(),
                    "removing jobs as a second SIGHUP confirms"
                );
            } else {
                error!(
                    %directory,
                    removed,
                    jobs = current.len(),
                    "reload refused: it would remove {removed} of the {} jobs at once; keeping \
                     the previous definitions. If that is meant, send SIGHUP again (systemctl \
                     reload redcron) while the directory holds these files",
                    current.len()
                );
                *refused = Some(declared);
                return;
            }
        }
        *refused = None;
        info!(
            jobs = loaded.jobs.len(),
            queues = loaded.queues.len(),
            %directory,
            "schedules reloaded"
        );
        self.jobs.replace_schedule_dir(loaded);
    }

    /// Reloads the directory after files in it change, once it has been quiet for
    /// [`WATCH_QUIET`] (`--watch`). What is watched is what the path names at each change, so
    /// a directory renamed into its place or a symlink swapped to another release is followed.
    pub(super) async fn watch(&self) {
        let (changed, mut changes) = tokio::sync::mpsc::channel(16);
        let mut watch = match PathWatch::start(&self.directory, changed) {
            Ok(watch) => watch,
            Err(problem) => {
                error!(%problem, "cannot watch the schedule directory; SIGHUP still reloads");
                return;
            }
        };
        info!(directory = %watch.path().display(), "watching the schedule directory");
        while changes.recv().await.is_some() {
            let first = Instant::now();
            watch.follow();
            while first.elapsed() < WATCH_LONGEST
                && tokio::time::timeout(WATCH_QUIET, changes.recv())
                    .await
                    .is_ok_and(|change| change.is_some())
            {
                // Followed at each change, not once at the end: a new directory's own files,
                // written during the quiet wait, must wake this wait too.
                watch.follow();
            }
            self.reload(Trigger::Watch);
        }
    }
}

/// How many of `current`'s jobs a reload to `loaded` would remove, when that is a mass
/// removal: every job, or more than half of them and more than one. A deploy that empties the
/// directory before it copies the new files looks like that for a moment, and would leave a gap
/// in every job's fires.
fn mass_removal(current: &[std::sync::Arc<Job>], loaded: &[Job]) -> Option<usize> {
    let removed = current
        .iter()
        .filter(|job| !loaded.iter().any(|kept| kept.name == job.name))
        .count();
    (removed > 0 && (removed == current.len() || (removed > 1 && removed * 2 > current.len())))
        .then_some(removed)
}

/// Each job's name and content hash, in name order: what a confirming SIGHUP must find again.
fn declared(jobs: &[Job]) -> Vec<(String, String)> {
    let mut declared: Vec<(String, String)> = jobs
        .iter()
        .map(|job| (job.name.clone(), job.content_hash()))
        .collect();
    declared.sort();
    declared
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::*;
    use crate::schedule::parse_file;

    fn jobs(names: &[&str]) -> Vec<Job> {
        let text: String = names
            .iter()
            .map(|name| format!("[jobs.{name}]\ncommand = \"true\"\n"))
            .collect();
        parse_file(Path::new("jobs.toml"), &text).expect("valid")
    }

    #[test]
    fn removing_every_job_or_more_than_half_and_more_than_one_is_a_mass_removal() {
        let current: Vec<Arc<Job>> = jobs(&["a", "b", "c", "d"])
            .into_iter()
            .map(Arc::new)
            .collect();
        for (loaded, removal) in [
            (&[][..], Some(4)),
            (&["a"][..], Some(3)),
            (&["a", "b"][..], None),
            (&["a", "e", "f"][..], Some(3)),
            (&["a", "b", "c"][..], None),
            (&["a", "b", "c", "d", "e"][..], None),
        ] {
            assert_eq!(mass_removal(&current, &jobs(loaded)), removal, "{loaded:?}");
        }
        let one = vec![Arc::new(jobs(&["a"]).remove(0))];
        assert_eq!(mass_removal(&one, &[]), Some(1), "the only job");
        assert_eq!(mass_removal(&[], &[]), None, "nothing to remove");
    }
}
