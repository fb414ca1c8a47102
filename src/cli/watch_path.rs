//! Watching the directory a path names now, through the renames and symlink swaps an atomic
//! deploy makes (`mv new current`, `ln -sfn release tmp && mv -T tmp current`).

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::warn;

/// What one watched directory is watched for: the change of one entry of it (a step of the
/// path), or any change in it or below it (the directory the path names, whose subdirectories
/// hold schedule files too).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interest {
    /// The directory, as it was given to the watcher: events name paths under it.
    directory: PathBuf,
    /// The entry that matters, or `None` for everything under the directory.
    entry: Option<OsString>,
}

impl Interest {
    fn covers(&self, path: &Path) -> bool {
        match &self.entry {
            Some(entry) => {
                path.parent() == Some(self.directory.as_path())
                    && path.file_name() == Some(entry.as_os_str())
            }
            None => path.starts_with(&self.directory) && path != self.directory,
        }
    }

    /// How the system's watcher watches the directory: the one the path names with its
    /// subdirectories, so that a file written into one of them reloads too.
    fn mode(&self) -> RecursiveMode {
        match self.entry {
            Some(_) => RecursiveMode::NonRecursive,
            None => RecursiveMode::Recursive,
        }
    }
}

/// Watches the directory a path names, not the one it named first: every directory that holds
/// a step of the path is watched for that step's entry, and any change to one of them (a
/// rename over it, a symlink replaced) re-resolves the path and moves the watches to what it
/// names now.
pub(super) struct PathWatch {
    watcher: RecommendedWatcher,
    /// The path as the operator wrote it, made absolute once: what is resolved again.
    path: PathBuf,
    /// Each watched directory with the device and inode it was when watched: a directory
    /// renamed away and another put in its place has the same path and another inode.
    watched: Vec<(PathBuf, (u64, u64))>,
    /// What the watcher's callback lets through, shared with it.
    interests: Arc<Mutex<Vec<Interest>>>,
}

impl PathWatch {
    /// Starts watching what `path` names; `changed` receives a message on each change that
    /// matters (those of other entries of the directories above it do not).
    ///
    /// # Errors
    ///
    /// When the path cannot be made absolute or the system's watcher cannot start.
    pub(super) fn start(path: &Path, changed: mpsc::Sender<()>) -> notify::Result<Self> {
        let path = std::path::absolute(path).map_err(notify::Error::io)?;
        let interests = Arc::new(Mutex::new(Vec::<Interest>::new()));
        let filter = interests.clone();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            let Ok(event) = event else { return };
            if event.kind.is_access() {
                return;
            }
            let interests = filter.lock().unwrap_or_else(PoisonError::into_inner);
            if event
                .paths
                .iter()
                .any(|path| interests.iter().any(|interest| interest.covers(path)))
            {
                // A full channel already holds a wake-up: the reload reads everything anyway.
                let _ = changed.try_send(());
            }
        })?;
        let mut watch = Self {
            watcher,
            path,
            watched: Vec::new(),
            interests,
        };
        watch.follow();
        Ok(watch)
    }

    /// The path, made absolute.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Resolves the path again and watches what it names now: a directory that is no longer
    /// a step of it, or was replaced, is unwatched, and its replacement watched. A step that
    /// does not exist for now (between the two renames of a swap) is watched from above.
    pub(super) fn follow(&mut self) {
        let interests = interests(&self.path);
        let wanted: Vec<(PathBuf, (u64, u64))> = interests
            .iter()
            .filter_map(|interest| {
                let metadata = std::fs::metadata(&interest.directory).ok()?;
                Some((interest.directory.clone(), (metadata.dev(), metadata.ino())))
            })
            .collect();
        let mode_of = |directory: &Path| {
            interests
                .iter()
                .filter(|interest| interest.directory == directory)
                .map(Interest::mode)
                .find(|mode| *mode == RecursiveMode::Recursive)
                .unwrap_or(RecursiveMode::NonRecursive)
        };
        // Unwatched before watched again: the watcher keeps one watch per path, and a path
        // that names another directory now would otherwise keep the old one's.
        for stale in self.watched.iter().filter(|was| !wanted.contains(was)) {
            // The watcher drops a deleted directory's watch by itself: nothing left to remove.
            let _ = self.watcher.unwatch(&stale.0);
        }
        let mut watched = Vec::with_capacity(wanted.len());
        for directory in wanted {
            if !self.watched.contains(&directory)
                && let Err(problem) = self.watcher.watch(&directory.0, mode_of(&directory.0))
            {
                warn!(
                    directory = %directory.0.display(),
                    %problem,
                    "cannot watch a directory of the schedule path; SIGHUP still reloads"
                );
                continue;
            }
            watched.push(directory);
        }
        self.watched = watched;
        *self
            .interests
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = interests;
    }
}

/// What to watch for `path` (absolute): each directory above a step of it, for that step's
/// entry, and the directory the path resolves to, for every entry.
fn interests(path: &Path) -> Vec<Interest> {
    let mut interests: Vec<Interest> = path
        .ancestors()
        .filter_map(|step| {
            Some(Interest {
                directory: step.parent()?.to_path_buf(),
                entry: Some(step.file_name()?.to_owned()),
            })
        })
        .collect();
    if let Ok(resolved) = std::fs::canonicalize(path) {
        interests.push(Interest {
            directory: resolved,
            entry: None,
        });
    }
    interests
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_watched_at_each_step_and_where_it_resolves() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = std::fs::canonicalize(dir.path()).expect("canonical");
        std::fs::create_dir(root.join("release")).expect("release");
        std::os::unix::fs::symlink("release", root.join("current")).expect("symlink");
        let interests = interests(&root.join("current"));
        let covered = |path: PathBuf| interests.iter().any(|interest| interest.covers(&path));
        assert!(covered(root.join("current")), "the swapped symlink");
        assert!(covered(root.join("release/jobs.toml")), "a file it names");
        assert!(
            covered(root.join("release/cron.d/backup.toml")),
            "a file in a subdirectory of it"
        );
        assert!(!covered(root.join("other")), "another entry beside it");
        assert!(covered(root.clone()), "a step above");
    }
}
