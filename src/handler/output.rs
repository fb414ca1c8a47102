//! Where a command's output goes besides its kept tail, as its job's `output` says: the
//! replica's log, a line per log line with the run id, or a file, a line per line prefixed by
//! the run id, appended, and opened again when a rotation moved it away. Output never fails a
//! run: a file that cannot be written is left alone for the rest of the run, and said in the
//! log once every [`UNWRITABLE_REMINDER`] while it stays so, not at every run.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::schedule::Output;

/// The most lines of one run that go to the replica's log: a chatty command must not drown it.
pub const MAX_LOGGED_LINES: usize = 1_000;

/// The longest line handed on whole: a command that writes without line ends (binary data)
/// must not make the replica buffer it all. Longer lines are handed on in pieces this long.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// How often an open file is checked for a rotation (renamed or removed).
const ROTATION_CHECK: Duration = Duration::from_secs(1);

/// How often a file that cannot be written is said again in the log while it stays so.
pub const UNWRITABLE_REMINDER: Duration = Duration::from_secs(600);

/// When each output file that could not be written was last said so in the log.
static UNWRITABLE_SAID: OnceLock<Mutex<HashMap<PathBuf, Instant>>> = OnceLock::new();

/// Whether a failure to write `path` is to be logged now: the first time, then once every
/// [`UNWRITABLE_REMINDER`]; an every-minute job must not log the same failure every minute.
fn say_unwritable(path: &Path) -> bool {
    let Ok(mut said) = UNWRITABLE_SAID.get_or_init(Mutex::default).lock() else {
        return true;
    };
    let now = Instant::now();
    match said.get(path) {
        Some(last) if now.duration_since(*last) < UNWRITABLE_REMINDER => false,
        _ => {
            said.insert(path.to_owned(), now);
            true
        }
    }
}

/// One run's output destination.
pub(super) struct Sink {
    run_id: String,
    job: String,
    target: Target,
}

enum Target {
    Log { logged: usize, dropped: usize },
    File(OutputFile),
    Nowhere,
}

struct OutputFile {
    path: PathBuf,
    file: Option<File>,
    checked: Instant,
}

impl Sink {
    /// The destination `output` names for run `run_id` of `job`; `None` when only the tail is
    /// kept.
    pub(super) fn new(output: &Output, run_id: &str, job: &str) -> Option<Self> {
        let target = match output {
            Output::Kept => return None,
            Output::Log => Target::Log {
                logged: 0,
                dropped: 0,
            },
            Output::File(template) => Target::File(OutputFile {
                path: PathBuf::from(template.replace("{job}", job)),
                file: None,
                checked: Instant::now(),
            }),
        };
        Some(Self {
            run_id: run_id.to_owned(),
            job: job.to_owned(),
            target,
        })
    }

    /// One whole line of output (without its line end).
    pub(super) fn line(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        match &mut self.target {
            Target::Log { logged, dropped } => {
                if *logged < MAX_LOGGED_LINES {
                    *logged += 1;
                    info!(target: "redcron::output", run = self.run_id, job = self.job, "{text}");
                } else {
                    *dropped += 1;
                }
            }
            Target::File(file) => {
                if let Err(error) = file.append(&format!("{} {text}\n", self.run_id)) {
                    if say_unwritable(&file.path) {
                        warn!(
                            run = self.run_id,
                            job = self.job,
                            path = %file.path.display(),
                            %error,
                            "cannot write the run's output to its file: the rest of it is kept \
                             only as its tail (said again in 10 minutes if it lasts)"
                        );
                    }
                    self.target = Target::Nowhere;
                }
            }
            Target::Nowhere => {}
        }
    }

    /// The run's output ended.
    pub(super) fn finish(&mut self) {
        if let Target::Log { dropped, .. } = self.target
            && dropped > 0
        {
            info!(
                target: "redcron::output",
                run = self.run_id,
                job = self.job,
                "... {dropped} more lines not logged (at most {MAX_LOGGED_LINES} a run)"
            );
        }
    }
}

impl OutputFile {
    fn append(&mut self, line: &str) -> std::io::Result<()> {
        if self.checked.elapsed() >= ROTATION_CHECK {
            self.checked = Instant::now();
            if self.rotated() {
                self.file = None;
            }
        }
        let file = match &mut self.file {
            Some(file) => file,
            None => self.file.insert(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o640)
                    .open(&self.path)?,
            ),
        };
        file.write_all(line.as_bytes())
    }

    /// Whether the open file is no longer the one at its path.
    fn rotated(&self) -> bool {
        let Some(file) = &self.file else {
            return false;
        };
        match (file.metadata(), std::fs::metadata(&self.path)) {
            (Ok(open), Ok(named)) => open.dev() != named.dev() || open.ino() != named.ino(),
            _ => true,
        }
    }
}

/// Splits a stream's chunks into lines for a [`Sink`]: a line may arrive over several chunks.
#[derive(Default)]
pub(super) struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    /// Feeds `chunk`, handing every line it completes to `sink`.
    pub(super) fn push(&mut self, chunk: &[u8], sink: &mut Sink) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|byte| *byte == b'\n') {
            if self.partial.is_empty() {
                sink.line(trim_cr(&rest[..end]));
            } else {
                self.partial.extend_from_slice(&rest[..end]);
                sink.line(trim_cr(&std::mem::take(&mut self.partial)));
            }
            rest = &rest[end + 1..];
        }
        self.partial.extend_from_slice(rest);
        while self.partial.len() >= MAX_LINE_BYTES {
            let piece: Vec<u8> = self.partial.drain(..MAX_LINE_BYTES).collect();
            sink.line(&piece);
        }
    }

    /// The stream ended: a last line without its line end is still a line.
    pub(super) fn end(&mut self, sink: &mut Sink) {
        if !self.partial.is_empty() {
            sink.line(trim_cr(&std::mem::take(&mut self.partial)));
        }
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_cannot_be_written_is_said_once_then_every_ten_minutes() {
        let path = Path::new("/nonexistent/redcron-said-once.log");
        assert!(say_unwritable(path), "the first failure is said");
        assert!(!say_unwritable(path), "the next run's is not");
        assert!(
            say_unwritable(Path::new("/nonexistent/another.log")),
            "per file"
        );
    }

    #[test]
    fn lines_split_over_chunks_reach_the_file_whole_with_the_run_id() {
        let dir = tempfile::tempdir().expect("temp dir");
        let template = format!("{}/{{job}}.log", dir.path().display());
        let mut sink = Sink::new(&Output::File(template), "tick@1000", "tick").expect("a sink");
        let mut lines = Lines::default();
        for chunk in [&b"hel"[..], b"lo\nwor", b"ld\r\nlast"] {
            lines.push(chunk, &mut sink);
        }
        lines.end(&mut sink);
        let written = std::fs::read_to_string(dir.path().join("tick.log")).expect("the file");
        assert_eq!(
            written,
            "tick@1000 hello\ntick@1000 world\ntick@1000 last\n"
        );
    }

    #[test]
    fn output_without_line_ends_is_handed_on_in_pieces_not_buffered() {
        let dir = tempfile::tempdir().expect("temp dir");
        let template = format!("{}/{{job}}.log", dir.path().display());
        let mut sink = Sink::new(&Output::File(template), "r", "j").expect("a sink");
        let mut lines = Lines::default();
        for _ in 0..100 {
            lines.push(&[b'x'; 1000], &mut sink);
            assert!(lines.partial.len() < MAX_LINE_BYTES);
        }
        lines.end(&mut sink);
        let written = std::fs::read_to_string(dir.path().join("j.log")).expect("the file");
        assert_eq!(written.lines().count(), 100_000 / MAX_LINE_BYTES + 1);
        assert_eq!(written.matches('x').count(), 100_000);
    }

    #[test]
    fn a_rotated_file_is_opened_again_at_its_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("job.log");
        let mut file = OutputFile {
            path: path.clone(),
            file: None,
            checked: Instant::now(),
        };
        file.append("before\n").expect("write");
        std::fs::rename(&path, dir.path().join("job.log.1")).expect("rotate");
        file.checked = Instant::now() - ROTATION_CHECK;
        file.append("after\n").expect("write");
        assert_eq!(std::fs::read_to_string(&path).expect("new"), "after\n");
        let rotated = std::fs::read_to_string(dir.path().join("job.log.1")).expect("old");
        assert_eq!(rotated, "before\n");
    }
}
