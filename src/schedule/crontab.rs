//! Converting a crontab into a schedule file whose jobs fire when cron would have run the lines.
//!
//! What cron does with a line is kept: the expression and zone (`CRON_TZ`), the environment set
//! by the variable lines above it, `%` as the start of standard input, a `SHELL` other than
//! `/bin/sh`, and cron's delivery (no retries, at most one run per fire, overlapping runs allowed,
//! missed fires skipped). Comments stay where they were. Lines that cannot be converted become
//! comments that say why, and are returned as warnings.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use chrono_tz::Tz;
use toml::Value;

use super::Schedule;
use super::file::check_name;

/// How to read the crontab.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// The system crontab format (`/etc/crontab`, `/etc/cron.d/*`): a user field follows the
    /// schedule.
    pub system: bool,
    /// The zone of lines before any `CRON_TZ`: the zone of the machine the crontab ran on.
    pub zone: Tz,
    /// Where the crontab came from, for the header comment.
    pub source: String,
}

/// The converted schedule file and what could not be converted.
#[derive(Debug, Clone)]
pub struct Import {
    /// The schedule file's text.
    pub toml: String,
    /// How many jobs it declares.
    pub jobs: usize,
    /// One message per crontab line left out or changed in a way the user should know about.
    pub warnings: Vec<String>,
}

/// The longest name derived from a command, before a `-2` style suffix.
const MAX_DERIVED_NAME: usize = 48;

/// Converts a crontab's text.
pub fn import(text: &str, options: &ImportOptions) -> Import {
    let mut converter = Converter {
        options,
        zone: options.zone,
        env: BTreeMap::new(),
        names: HashSet::new(),
        out: String::new(),
        jobs: 0,
        warnings: Vec::new(),
    };
    let _ = writeln!(
        converter.out,
        "# Imported by `redcron import-crontab` from {}.\n\
         # Each job keeps cron's behaviour: no retries, at most one run per fire, overlapping\n\
         # runs allowed, missed fires skipped.\n",
        options.source
    );
    for (index, line) in text.lines().enumerate() {
        converter.line(index + 1, line);
    }
    Import {
        toml: converter.out,
        jobs: converter.jobs,
        warnings: converter.warnings,
    }
}

struct Converter<'a> {
    options: &'a ImportOptions,
    /// The zone of the lines read so far (`CRON_TZ`).
    zone: Tz,
    /// The variables set by the lines read so far: cron gives each entry the environment in
    /// force where it stands.
    env: BTreeMap<String, String>,
    names: HashSet<String>,
    out: String,
    jobs: usize,
    warnings: Vec<String>,
}

impl Converter<'_> {
    fn line(&mut self, number: usize, line: &str) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            self.out.push('\n');
        } else if trimmed.starts_with('#') {
            let _ = writeln!(self.out, "{}", comment_text(trimmed));
        } else if let Some((name, value)) = assignment(trimmed) {
            self.assignment(number, trimmed, name, value);
        } else if let Err(reason) = self.entry(number, trimmed) {
            self.skip(number, trimmed, &reason);
        }
    }

    fn assignment(&mut self, number: usize, line: &str, name: &str, value: String) {
        let _ = writeln!(self.out, "# {}", comment_text(line));
        if name == "CRON_TZ" {
            match value.parse::<Tz>() {
                Ok(zone) => self.zone = zone,
                Err(_) => self.warn(
                    number,
                    &format!(
                        "unknown time zone \"{value}\"; the jobs below keep {}",
                        self.zone
                    ),
                ),
            }
        } else if is_variable_name(name) {
            self.env.insert(name.to_owned(), value);
        } else {
            self.warn(
                number,
                &format!("\"{name}\" cannot be passed as an environment variable; left out"),
            );
        }
    }

    fn entry(&mut self, number: usize, line: &str) -> Result<(), String> {
        let field_count = if line.starts_with('@') { 1 } else { 5 };
        let (expression, rest) = split_fields(line, field_count);
        let (user, command) = if self.options.system {
            let (user, command) = split_fields(rest, 1);
            (Some(user), command)
        } else {
            (None, rest)
        };
        if command.is_empty() || user.as_deref() == Some("") {
            return Err("no command after the schedule".to_owned());
        }
        let schedule = Schedule::parse(&expression).map_err(|error| error.to_string())?;
        let (command, input) = split_input(command);
        let name = self.unique_name(&command);
        let command = self.wrap_for_shell(&command);
        let command = match input {
            Some(input) => format!("printf '%s' {} | (\n{command}\n)", shell_quote(&input)),
            None => command,
        };

        self.jobs += 1;
        let out = &mut self.out;
        let _ = writeln!(out, "[jobs.{name}]");
        let _ = writeln!(out, "# crontab line {number}: {}", comment_text(line));
        let _ = writeln!(out, "schedule = {}", toml_string(schedule.as_str()));
        if let Some(user) = user {
            // Run as that user, as cron did: the replica must run as root, and the user exist.
            let _ = writeln!(out, "user = {}", toml_string(&user));
        }
        let _ = writeln!(out, "timezone = {}", toml_string(self.zone.name()));
        let _ = writeln!(out, "command = {}", toml_string(&command));
        if !self.env.is_empty() {
            let pairs: Vec<String> = self
                .env
                .iter()
                .map(|(key, value)| format!("{key} = {}", toml_string(value)))
                .collect();
            let _ = writeln!(out, "env = {{ {} }}", pairs.join(", "));
        }
        let _ = writeln!(
            out,
            "retries = 0\ndelivery = \"at-most-once\"\noverlap = \"allow\"\nmisfire = \"skip\"\n"
        );
        Ok(())
    }

    /// cron runs commands with `$SHELL -c`; redcron with `/bin/sh -c`, so another shell is
    /// started explicitly.
    fn wrap_for_shell(&self, command: &str) -> String {
        match self.env.get("SHELL") {
            Some(shell) if shell != "/bin/sh" && !shell.is_empty() => {
                format!("exec {} -c {}", shell_quote(shell), shell_quote(command))
            }
            _ => command.to_owned(),
        }
    }

    fn unique_name(&mut self, command: &str) -> String {
        let base = derived_name(command);
        let mut name = base.clone();
        let mut suffix = 2;
        while self.names.contains(&name) {
            name = format!("{base}-{suffix}");
            suffix += 1;
        }
        debug_assert!(
            check_name(&name).is_ok(),
            "derived name {name:?} must be valid"
        );
        self.names.insert(name.clone());
        name
    }

    fn skip(&mut self, number: usize, line: &str, reason: &str) {
        let _ = writeln!(
            self.out,
            "# redcron: line {number} was not imported: {}\n# {}",
            comment_text(reason),
            comment_text(line)
        );
        self.warn(number, &format!("not imported: {reason}"));
    }

    fn warn(&mut self, number: usize, message: &str) {
        self.warnings.push(format!("line {number}: {message}"));
    }
}

/// `NAME=value` (spaces allowed around `=`; matching quotes around the value removed), the way
/// cron reads variable lines. A cron entry never has `=` in its schedule fields, so any line
/// whose first word contains `=`, or is followed by one, is an assignment.
fn assignment(line: &str) -> Option<(&str, String)> {
    let (name, value) = line.split_once('=')?;
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    let value = value.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|quote| {
            value
                .strip_prefix(*quote)
                .and_then(|inner| inner.strip_suffix(*quote))
        })
        .unwrap_or(value);
    Some((name, unquoted.to_owned()))
}

fn is_variable_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|byte| byte.is_ascii_alphabetic() || byte == b'_')
        && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
}

/// The first `count` white-space separated fields (joined by one space) and the rest of the
/// line, whose own spacing is kept.
fn split_fields(line: &str, count: usize) -> (String, &str) {
    let mut rest = line.trim_start();
    let mut fields = Vec::with_capacity(count);
    for _ in 0..count {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        fields.push(&rest[..end]);
        rest = rest[end..].trim_start();
    }
    (fields.join(" "), rest)
}

/// cron's `%` rule: the first unescaped `%` ends the command and starts its standard input, in
/// which every further unescaped `%` is a newline; `\%` is a literal `%` in both.
fn split_input(command: &str) -> (String, Option<String>) {
    let mut head = String::new();
    let mut input: Option<String> = None;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        let (escaped, c) = match c {
            '\\' if chars.peek() == Some(&'%') => (true, chars.next().unwrap_or('%')),
            c => (false, c),
        };
        match (&mut input, c) {
            (None, '%') if !escaped => input = Some(String::new()),
            (None, c) => head.push(c),
            (Some(input), '%') if !escaped => input.push('\n'),
            (Some(input), c) => input.push(c),
        }
    }
    (head.trim_end().to_owned(), input)
}

/// A readable name from the command: the file name of the program that does the work and its
/// first arguments, up to a redirection. In `cd dir && prog`, `[ test ] && prog` or `a | b`,
/// that program is `prog` or `a`: the last command of a list, the first of a pipeline.
fn derived_name(command: &str) -> String {
    let segment = command
        .split([';', '{', '}', '(', ')', '\n'])
        .flat_map(|part| part.split("&&"))
        .flat_map(|part| part.split("||"))
        .map(|part| part.split('|').next().unwrap_or("").trim())
        .filter(|segment| {
            let first = segment.split_whitespace().next().unwrap_or("");
            !first.is_empty() && !matches!(first, "cd" | "test" | "[" | "[[")
        })
        .last()
        .unwrap_or("");
    let words: Vec<&str> = segment
        .split_whitespace()
        .skip_while(|word| word.contains('='))
        .take_while(|word| !is_redirection(word))
        .take(3)
        .collect();
    let mut name = String::new();
    for (index, word) in words.iter().enumerate() {
        let word = if index == 0 {
            word.rsplit('/').next().unwrap_or(word)
        } else {
            word
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

/// `>file`, `2>&1`, `<in` and the like.
fn is_redirection(word: &str) -> bool {
    word.trim_start_matches(|c: char| c.is_ascii_digit())
        .starts_with(['>', '<'])
}

/// Text for a TOML comment, which may not hold control characters.
fn comment_text(text: &str) -> String {
    text.replace(|c: char| c.is_control() && c != '\t', "\u{fffd}")
}

/// A single-quoted shell word: nothing inside is expanded.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn toml_string(text: &str) -> String {
    Value::String(text.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::parse_file;
    use std::path::Path;

    fn options(system: bool) -> ImportOptions {
        ImportOptions {
            system,
            zone: chrono_tz::UTC,
            source: "crontab".to_owned(),
        }
    }

    /// The jobs of the imported file, loaded without their `user` lines: the users must
    /// exist and need root, which is checked apart (see `check_user`).
    fn jobs(text: &str, system: bool) -> Vec<crate::schedule::Job> {
        let import = import(text, &options(system));
        parse_file(Path::new("imported.toml"), &without_users(&import.toml)).unwrap_or_else(
            |errors| panic!("imported file does not load: {errors:?}\n{}", import.toml),
        )
    }

    fn without_users(toml: &str) -> String {
        toml.lines()
            .filter(|line| !line.starts_with("user = "))
            .map(|line| format!("{line}\n"))
            .collect()
    }

    #[test]
    fn percent_starts_standard_input_and_later_ones_are_newlines() {
        assert_eq!(
            split_input("mail -s hi root%line one%line two"),
            (
                "mail -s hi root".to_owned(),
                Some("line one\nline two".to_owned())
            )
        );
        assert_eq!(
            split_input(r"date +\%Y-\%m-\%d >> /tmp/d"),
            ("date +%Y-%m-%d >> /tmp/d".to_owned(), None)
        );
        assert_eq!(
            split_input(r"cat%100\% sure%"),
            ("cat".to_owned(), Some("100% sure\n".to_owned()))
        );
    }

    #[test]
    fn input_is_piped_to_the_command_unexpanded() {
        let job = jobs("0 9 * * * mail -s 'it''s $HOME' root%Hi $USER%bye\n", false).remove(0);
        assert_eq!(
            job.command,
            "printf '%s' 'Hi $USER\nbye' | (\nmail -s 'it''s $HOME' root\n)"
        );
    }

    #[test]
    fn names_are_readable_stable_and_unique() {
        assert_eq!(
            derived_name("/usr/local/bin/backup.sh --full >/dev/null 2>&1"),
            "backup-sh-full"
        );
        assert_eq!(
            derived_name("cd /srv/app && ./manage.py clearsessions"),
            "manage-py-clearsessions"
        );
        assert_eq!(
            derived_name("LANG=C run-parts /etc/cron.hourly"),
            "run-parts-etc-cron-hourly"
        );
        assert_eq!(derived_name("%%%"), "job");
        assert_eq!(derived_name("echo 2>/dev/null"), "echo");
        assert_eq!(derived_name("[ -x /bin/x ] && /bin/x --now"), "x-now");
        assert_eq!(derived_name("pg_dump db | gzip > /b/db.gz"), "pg-dump-db");
        assert_eq!(
            derived_name("test -x /usr/sbin/anacron || { cd / && run-parts /etc/cron.daily; }"),
            "run-parts-etc-cron-daily"
        );
        let names: Vec<String> = jobs("* * * * * true\n* * * * * true\n@daily true\n", false)
            .into_iter()
            .map(|job| job.name)
            .collect();
        assert_eq!(names, ["true", "true-2", "true-3"]);
    }

    #[test]
    fn environment_zone_and_shell_apply_to_the_lines_below() {
        let text = "\
* * * * * first
SHELL=/bin/bash
MAILTO = \"ops@example.com\"
CRON_TZ=Europe/Paris
30 2 * * * second
";
        let jobs = jobs(text, false);
        assert!(jobs[0].env.is_empty());
        assert_eq!(jobs[0].timezone, chrono_tz::UTC);
        assert_eq!(jobs[1].timezone, chrono_tz::Europe::Paris);
        assert_eq!(
            jobs[1].env.get("MAILTO").map(String::as_str),
            Some("ops@example.com")
        );
        assert_eq!(
            jobs[1].env.get("SHELL").map(String::as_str),
            Some("/bin/bash")
        );
        assert_eq!(jobs[1].command, "exec '/bin/bash' -c 'second'");
        assert!(!jobs[1].env.contains_key("CRON_TZ"));
    }

    #[test]
    fn imported_jobs_keep_crons_delivery() {
        use crate::schedule::{Delivery, Misfire, Overlap};
        let job = jobs("*/5 * * * * true\n", false).remove(0);
        assert_eq!(job.retries, 0);
        assert_eq!(job.delivery, Delivery::AtMostOnce);
        assert_eq!(job.overlap, Overlap::Allow);
        assert_eq!(job.misfire, Misfire::Skip);
    }

    #[test]
    fn system_crontab_reads_the_user_field() {
        let text = "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n@daily www-data php /srv/cron.php\n";
        let import = import(text, &options(true));
        assert!(
            import.toml.contains("\nuser = \"root\"\n"),
            "{}",
            import.toml
        );
        assert!(
            import.toml.contains("\nuser = \"www-data\"\n"),
            "{}",
            import.toml
        );
        let jobs = jobs(text, true);
        assert_eq!(
            jobs[0].command,
            "cd / && run-parts --report /etc/cron.hourly"
        );
        assert_eq!(jobs[1].command, "php /srv/cron.php");
        assert_eq!(
            jobs[1].schedule.as_ref().map(|s| s.as_str()),
            Some("@daily")
        );
    }

    #[test]
    fn unconvertible_lines_become_comments_and_warnings() {
        let text = "@reboot /usr/bin/startup\n61 * * * * bad\n* * * * *\nCRON_TZ=Nowhere/City\n0 0 * * * ok\n";
        let import = import(text, &options(false));
        assert_eq!(import.jobs, 1);
        assert_eq!(import.warnings.len(), 4, "{:?}", import.warnings);
        assert!(import.warnings[0].starts_with("line 1: not imported: @reboot is not supported"));
        assert!(import.warnings[1].contains("minute field \"61\""));
        assert!(import.warnings[2].contains("no command"));
        assert!(import.warnings[3].contains("unknown time zone \"Nowhere/City\""));
        assert!(import.toml.contains("# @reboot /usr/bin/startup"));
        assert_eq!(jobs(text, false).len(), 1);
    }

    proptest::proptest! {
        /// Whatever the crontab holds, the importer does not panic and its output loads.
        #[test]
        fn output_always_loads(
            lines in proptest::collection::vec(
                "([0-9*/,-]{1,4} ){5}[ -~]{0,20}|@[a-z]{4,8} [ -~]{0,12}|[A-Z_]{1,6} ?= ?[ -~]{0,10}|#[ -~]{0,10}|[ -~]{0,30}",
                0..12,
            ),
            system in proptest::bool::ANY,
        ) {
            let text = lines.join("\n");
            let import = import(&text, &options(system));
            let loaded = parse_file(Path::new("fuzz.toml"), &without_users(&import.toml));
            proptest::prop_assert!(loaded.is_ok(), "{:?}\n{}", loaded.err(), import.toml);
            proptest::prop_assert_eq!(loaded.map(|jobs| jobs.len()).unwrap_or(0), import.jobs);
        }
    }
}
