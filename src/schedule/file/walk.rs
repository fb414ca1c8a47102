//! Which files a schedule directory holds: every `*.toml` in it and in its subdirectories, so
//! that `import-crontab --dir /etc/cron.d -o schedules/cron.d` writes jobs that load.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::Diagnostic;

/// The schedule files under `dir` and its subdirectories, in path order. Entries whose names start with `.` are skipped,
/// files and directories alike, as `run-parts` skips them: that is how a file or a directory is
/// kept aside (`.attic/`) without being loaded.
///
/// # Errors
/// Every directory that cannot be read, and every directory reached twice (a symlink loop, or
/// two links to one directory, whose files would be loaded twice).
pub fn schedule_files(dir: &Path) -> Result<Vec<PathBuf>, Vec<Diagnostic>> {
    let mut walk = Walk::default();
    walk.directory(dir, true);
    if walk.problems.is_empty() {
        walk.files.sort();
        Ok(walk.files)
    } else {
        Err(walk.problems)
    }
}

#[derive(Default)]
struct Walk {
    files: Vec<PathBuf>,
    /// Each directory read, by device and inode, with the path it was first read at.
    seen: HashMap<(u64, u64), PathBuf>,
    problems: Vec<Diagnostic>,
}

impl Walk {
    fn directory(&mut self, dir: &Path, top: bool) {
        let what = if top {
            "the schedule directory"
        } else {
            "a subdirectory of the schedule directory"
        };
        let mut fail = |message: String| {
            self.problems.push(Diagnostic {
                path: dir.to_owned(),
                position: None,
                job: None,
                field: None,
                message,
            });
        };
        let metadata = match std::fs::metadata(dir) {
            Ok(metadata) => metadata,
            Err(error) => return fail(format!("cannot read {what}: {error}")),
        };
        if let Some(first) = self.seen.get(&(metadata.dev(), metadata.ino())) {
            let message = format!(
                "the same directory as {} (a symlink to it): its files would be loaded twice",
                first.display()
            );
            return fail(message);
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(error) => return fail(format!("cannot read {what}: {error}")),
        };
        self.seen
            .insert((metadata.dev(), metadata.ino()), dir.to_owned());
        let mut subdirectories = Vec::new();
        for entry in entries {
            let path = match entry {
                Ok(entry) => entry.path(),
                Err(error) => {
                    self.problems.push(Diagnostic {
                        path: dir.to_owned(),
                        position: None,
                        job: None,
                        field: None,
                        message: format!("cannot read {what}: {error}"),
                    });
                    return;
                }
            };
            let hidden = path
                .file_name()
                .is_some_and(|name| name.as_encoded_bytes().starts_with(b"."));
            if hidden {
                continue;
            }
            if path.is_dir() {
                subdirectories.push(path);
            } else if path
                .extension()
                .is_some_and(|extension| extension == "toml")
                && path.is_file()
            {
                self.files.push(path);
            }
        }
        subdirectories.sort();
        for subdirectory in subdirectories {
            self.directory(&subdirectory, false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subdirectories_are_read_and_dotted_names_kept_aside() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        for path in [
            "a.toml",
            "cron.d/backup.toml",
            "cron.d/notes.txt",
            "cron.d/deeper/x.toml",
            ".attic/old.toml",
            ".hidden.toml",
        ] {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("directory");
            std::fs::write(path, "").expect("file");
        }
        let files = schedule_files(root).expect("readable");
        let relative: Vec<_> = files
            .iter()
            .map(|path| path.strip_prefix(root).expect("under root").to_owned())
            .collect();
        assert_eq!(
            relative,
            ["a.toml", "cron.d/backup.toml", "cron.d/deeper/x.toml"].map(PathBuf::from)
        );
    }

    #[test]
    fn a_symlink_loop_is_refused_not_followed_forever() {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path();
        std::fs::create_dir(root.join("sub")).expect("sub");
        std::os::unix::fs::symlink("..", root.join("sub/up")).expect("symlink");
        let problems = schedule_files(root).expect_err("a loop");
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].path, root.join("sub/up"));
        assert!(
            problems[0].message.contains("the same directory as"),
            "{}",
            problems[0]
        );
    }
}
