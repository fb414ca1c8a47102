//! Job names for imported crontab lines: read from the command, unique across every file an
//! import writes and every schedule already beside them.

use std::collections::HashSet;

use toml::Table;

use crate::schedule::file::check_name;

/// The longest name derived from a command, before a `-2` style suffix.
const MAX_DERIVED_NAME: usize = 48;

/// The longest `--prefix`: with a derived name and a suffix it stays within the 128 bytes a job
/// name may have.
const MAX_PREFIX: usize = 64;

/// Commands that do no work of their own in a list (`cd dir && prog`, `prog || exit 1`): the
/// name comes from another command of the line when there is one.
const HELPERS: [&str; 10] = [
    "cd", "test", "[", "[[", "exit", "true", "false", ":", "return", "wait",
];

/// Words that run the command after them: `exec prog` is named for `prog`.
const WRAPPERS: [&str; 4] = ["exec", "nohup", "time", "command"];

/// The names taken so far, and the prefix every new one gets.
#[derive(Debug, Clone, Default)]
pub struct JobNames {
    /// `--prefix` and its `-`, or empty.
    prefix: String,
    /// Every name declared or handed out: job names are unique across all schedule files.
    taken: HashSet<String>,
}

impl JobNames {
    /// Names that start with `prefix-` when a prefix is given.
    ///
    /// # Errors
    /// When names starting with the prefix would not be valid job names.
    pub fn new(prefix: Option<&str>) -> Result<Self, String> {
        let prefix = match prefix {
            Some(prefix) => {
                check_name(prefix).map_err(|error| format!("bad prefix: {error}"))?;
                if prefix.len() > MAX_PREFIX {
                    return Err(format!(
                        "bad prefix: \"{prefix}\" is longer than {MAX_PREFIX} bytes"
                    ));
                }
                format!("{prefix}-")
            }
            None => String::new(),
        };
        Ok(Self {
            prefix,
            taken: HashSet::new(),
        })
    }

    /// Takes the names of the jobs a schedule file's text declares, so that no imported job
    /// gets one of them.
    ///
    /// # Errors
    /// When the text is not TOML, or its `jobs` is not a table: its names cannot be read.
    pub fn reserve_declared(&mut self, schedule_file: &str) -> Result<(), String> {
        let table: Table = schedule_file
            .parse()
            .map_err(|error: toml::de::Error| error.message().trim_end().to_owned())?;
        match table.get("jobs") {
            None => Ok(()),
            Some(toml::Value::Table(jobs)) => {
                self.taken.extend(jobs.keys().cloned());
                Ok(())
            }
            Some(_) => Err("its \"jobs\" is not a table".to_owned()),
        }
    }

    /// A name for `command` that no other job has: the derived name with the prefix, then
    /// `-2`, `-3`, ... when it is taken.
    pub(super) fn unique(&mut self, command: &str) -> String {
        let base = format!("{}{}", self.prefix, derived_name(command));
        let mut name = base.clone();
        let mut suffix = 2;
        while self.taken.contains(&name) {
            name = format!("{base}-{suffix}");
            suffix += 1;
        }
        debug_assert!(
            check_name(&name).is_ok(),
            "derived name {name:?} must be valid"
        );
        self.taken.insert(name.clone());
        name
    }
}

/// A readable name from the command: the file name of the program that does the work and its
/// first arguments that say something, up to a redirection. In `cd dir && prog`,
/// `[ test ] && prog`, `prog || exit 1` or `a | b`, that program is `prog` or `a`: the last
/// command of a list that is not a helper, the first of a pipeline.
fn derived_name(command: &str) -> String {
    let segments: Vec<Vec<&str>> = command
        .split([';', '{', '}', '(', ')', '\n'])
        .flat_map(|part| part.split("&&"))
        .flat_map(|part| part.split("||"))
        .map(|part| program_words(part.split('|').next().unwrap_or("")))
        .filter(|words| !words.is_empty())
        .collect();
    // A line made of helpers only (`true`, `exit 1`) is named for the last of them.
    let words = segments
        .iter()
        .rev()
        .find(|words| !HELPERS.contains(&words[0]))
        .or(segments.last())
        .map(Vec::as_slice)
        .unwrap_or_default();

    let mut name = String::new();
    for (index, word) in words.iter().enumerate() {
        let word = if index == 0 {
            word.rsplit('/').next().unwrap_or(word)
        } else if word.contains(|c: char| c.is_ascii_alphabetic()) {
            word
        } else {
            // `exit 1`, `sleep 30`, `-mtime +2`: numbers say little about what a job is.
            continue;
        };
        for c in word.chars() {
            if c.is_ascii_alphanumeric() {
                name.push(c.to_ascii_lowercase());
            } else if !name.ends_with('-') && !name.is_empty() {
                name.push('-');
            }
        }
        if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    name.truncate(MAX_DERIVED_NAME);
    let name = name.trim_matches('-');
    if name.is_empty() {
        "job".to_owned()
    } else {
        name.to_owned()
    }
}

/// The program of a simple command and up to two arguments: without the variable assignments
/// and wrappers before it, and stopping at the first redirection.
fn program_words(command: &str) -> Vec<&str> {
    command
        .split_whitespace()
        .skip_while(|word| word.contains('=') || WRAPPERS.contains(word))
        .take_while(|word| !is_redirection(word))
        .take(3)
        .collect()
}

/// `>file`, `2>&1`, `<in` and the like.
fn is_redirection(word: &str) -> bool {
    word.trim_start_matches(|c: char| c.is_ascii_digit())
        .starts_with(['>', '<', '&'])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_program_that_does_the_work() {
        for (command, name) in [
            (
                "/usr/local/bin/backup.sh --full >/dev/null 2>&1",
                "backup-sh-full",
            ),
            ("/usr/local/bin/x.sh >/dev/null 2>&1", "x-sh"),
            (
                "cd /srv/app && ./manage.py clearsessions",
                "manage-py-clearsessions",
            ),
            (
                "LANG=C run-parts /etc/cron.hourly",
                "run-parts-etc-cron-hourly",
            ),
            ("echo 2>/dev/null", "echo"),
            ("[ -x /bin/x ] && /bin/x --now", "x-now"),
            ("pg_dump db | gzip > /b/db.gz", "pg-dump-db"),
            (
                "test -x /usr/sbin/anacron || { cd / && run-parts /etc/cron.daily; }",
                "run-parts-etc-cron-daily",
            ),
            ("/usr/bin/sync-mirror || exit 1", "sync-mirror"),
            ("/srv/bin/poll; true", "poll"),
            ("{ /usr/local/bin/x.sh; } >/dev/null 2>&1", "x-sh"),
            ("exec /usr/bin/nightly --all", "nightly-all"),
            ("sleep 30 && /srv/bin/report", "report"),
        ] {
            assert_eq!(derived_name(command), name, "{command}");
        }
    }

    #[test]
    fn a_line_of_helpers_is_named_for_the_last_one_without_its_numbers() {
        assert_eq!(derived_name("exit 1"), "exit");
        assert_eq!(derived_name("true"), "true");
        assert_eq!(derived_name(": >/tmp/heartbeat"), "job");
        assert_eq!(derived_name("%%%"), "job");
        assert_eq!(derived_name(">/dev/null 2>&1"), "job");
    }

    #[test]
    fn names_taken_by_existing_files_and_earlier_jobs_get_a_suffix() {
        let mut names = JobNames::new(None).expect("no prefix");
        names
            .reserve_declared("[jobs.true]\ncommand = \"true\"\n[jobs.true-2]\ncommand = \"x\"\n")
            .expect("a schedule file");
        assert_eq!(names.unique("true"), "true-3");
        assert_eq!(names.unique("true"), "true-4");
        assert_eq!(names.unique("/bin/other"), "other");
        assert!(names.reserve_declared("[jobs").is_err());
        assert!(names.reserve_declared("jobs = 1").is_err());
    }

    #[test]
    fn a_prefix_starts_every_name_and_must_make_valid_names() {
        let mut names = JobNames::new(Some("web1")).expect("a valid prefix");
        assert_eq!(names.unique("exit 1"), "web1-exit");
        assert_eq!(names.unique("exit 1"), "web1-exit-2");
        for bad in ["Web", "-x", "a b", &"x".repeat(MAX_PREFIX + 1)] {
            assert!(JobNames::new(Some(bad)).is_err(), "{bad}");
        }
    }
}
