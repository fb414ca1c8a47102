//! What is wrong in a schedule file and where: [`Diagnostic`], printed
//! `file:line:col: job "x", field "y": …`, the [`LoadError`] that lists them, and the
//! [`FileContext`] that turns a byte offset of the file being read into a line and column.

use std::fmt;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::schedule::job::Source;

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

/// The file being read, for turning byte offsets into diagnostics.
pub(in crate::schedule) struct FileContext<'a> {
    path: &'a Path,
    text: &'a str,
    /// The byte offset where each line starts: a file of 100,000 jobs has as many positions to
    /// find, which must not each scan the file from its start.
    line_starts: Vec<usize>,
}

impl<'a> FileContext<'a> {
    pub(super) fn new(path: &'a Path, text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(newline, _)| newline + 1))
            .collect();
        Self {
            path,
            text,
            line_starts,
        }
    }

    /// The text at `span`, empty when it is not within the file.
    pub(in crate::schedule) fn text_at(&self, span: std::ops::Range<usize>) -> &'a str {
        self.text.get(span).unwrap_or_default()
    }

    /// The 1-based line and column (in characters) of a byte offset.
    pub(super) fn position(&self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.line_starts.partition_point(|&start| start <= offset);
        let line_start = self.line_starts[line - 1];
        (line, self.text[line_start..offset].chars().count() + 1)
    }

    /// Where the text at `offset` is declared, for a job or a queue that reads well.
    pub(in crate::schedule) fn source(&self, offset: usize) -> Source {
        let (line, column) = self.position(offset);
        Source {
            path: self.path.to_owned(),
            line,
            column,
            notify: None,
        }
    }

    /// A problem at `offset` (the file as a whole when `None`), of `job` and `field` if given.
    pub(in crate::schedule) fn diagnostic(
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
