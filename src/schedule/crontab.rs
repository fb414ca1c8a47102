//! Converting a crontab into a schedule file whose jobs fire when cron would have run the lines.
//!
//! What cron does with a line is kept: the expression and zone (`CRON_TZ`), the environment set
//! by the variable lines above it, `%` as the start of standard input, a `SHELL` other than
//! `/bin/sh`, and cron's delivery (no retries, at most one run per fire, overlapping runs allowed,
//! missed fires skipped), `MAILTO` becomes an `output` notice (sent from `MAILFROM`), and
//! cronie's `RANDOM_DELAY` the job's `jitter`. Comments stay where they were. Lines that cannot
//! be converted, or need a look, are marked with a comment that says why, and returned as
//! problems: among them a bare `%` (cron cut the command there too), a variable only cron reads,
//! and a user's crontab whose commands start with a user name (a system crontab read without
//! `--system`). Where the jobs run (`where`, `on`) is the importer's to say, since a crontab
//! ran on one machine; a line whose command looks like work on that machine is marked with why.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};

use chrono_tz::Tz;
use toml::Value;

use super::{Reach, Schedule, Selector, Target, placement};

mod host_local;
mod names;

pub use names::JobNames;

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
    /// The replicas that may run the jobs, written as each job's `where`: a crontab ran on one
    /// machine, and its jobs may belong to that machine (`host=web1`) or to machines like it.
    /// Empty: any replica.
    pub selector: Selector,
    /// How many of those replicas run each fire, written as each job's `on` when
    /// [`Reach::Every`].
    pub on: Reach,
}

impl ImportOptions {
    /// Whether a host-local line's job still does the work of a machine it ran on: each fire
    /// runs on every replica (`on = "every"`), or its `where` names one machine (`host=`,
    /// `replica=`). Otherwise each fire runs on one replica of several, which a host-local
    /// line should not; a `where` such as `role=web` only narrows which one.
    pub fn keeps_host_work(&self) -> bool {
        self.on == Reach::Every || self.selector.pins_one_machine()
    }

    /// Where each fire of a job that does not [keep host work](Self::keeps_host_work) runs, in
    /// words: `runs on any one replica`, or `runs once per fire, on a replica with role=web`.
    pub fn one_replica(&self) -> String {
        placement(self.on, &self.selector).unwrap_or_else(|| "runs on any one replica".to_owned())
    }
}

/// The converted schedule file and what could not be converted.
#[derive(Debug, Clone)]
pub struct Import {
    /// The schedule file's text.
    pub toml: String,
    /// How many jobs it declares.
    pub jobs: usize,
    /// One per crontab line left out or changed in a way the user should know about; each is
    /// also marked in `toml`, above the line.
    pub problems: Vec<Problem>,
    /// The lines whose command looks like work on the machine the crontab ran on, each also
    /// marked in `toml`, in its job's table.
    pub host_local: Vec<HostLocal>,
}

/// A crontab line whose command acts on the machine it ran on: its logs, files, services,
/// `run-parts` directories or certificates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostLocal {
    /// The line's number in the crontab, from 1.
    pub line: usize,
    /// The job it became.
    pub job: String,
    /// What in the command is this machine's (`run-parts runs the scripts of this machine's
    /// /etc/cron.daily`).
    pub reason: String,
}

/// A crontab line that needs attention.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The line's number in the crontab, from 1.
    pub line: usize,
    /// What is wrong, and what the importer did about it.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

/// Tells whether a user exists, or why it cannot be told.
pub type UserCheck = fn(&str) -> Result<(), String>;

/// Tells whether the first word of a command names a user of this machine rather than a
/// program: the sign of a system crontab's user field read as the start of the command.
pub type UserWord = fn(word: &str, path: Option<&str>) -> bool;

/// The variables only cron reads, which a command never saw: left out, and said so.
/// (`CRON_TZ`, `MAILTO`, `MAILFROM` and `RANDOM_DELAY` are converted.)
const CRON_ONLY: [(&str, &str); 3] = [
    (
        "CONTENT_TYPE",
        "cronie's Content-Type of its mails; redcron's are text/plain in UTF-8",
    ),
    (
        "CONTENT_TRANSFER_ENCODING",
        "cronie's encoding of its mails; redcron's are 8bit",
    ),
    (
        "START_HOURS_RANGE",
        "anacron's window for starting jobs; give the job a schedule inside it instead",
    ),
];

/// Imports crontabs one after another, so that the names of all their jobs are unique.
#[derive(Debug, Clone)]
pub struct Importer {
    /// The names taken so far, across every crontab imported and the files declared beside.
    names: JobNames,
    /// Checks the user field of system-format lines; `None` leaves them unchecked (the file may
    /// be meant for another machine).
    check_user: Option<UserCheck>,
    /// Checks the first word of user-format lines for a user name; `None` leaves them
    /// unchecked.
    user_word: Option<UserWord>,
    /// Why the mail of a `MAILTO` cannot go from this machine, said at the first `MAILTO` and
    /// then forgotten: once per import.
    mail_unavailable: Option<String>,
}

impl Importer {
    /// An importer that hands out names from `names`, users unchecked.
    pub fn new(names: JobNames) -> Self {
        Self {
            names,
            check_user: None,
            user_word: None,
            mail_unavailable: None,
        }
    }

    /// Reports the user-format lines whose command starts with a word `user_word` takes for a
    /// user name, suggesting `--system`: `/etc/crontab` read as a user's crontab would run
    /// `root cd / && run-parts ...`. The jobs are still imported.
    #[must_use]
    pub fn suspecting_user_fields(mut self, user_word: UserWord) -> Self {
        self.user_word = Some(user_word);
        self
    }

    /// Reports `problem` next to the first `MAILTO` that becomes a mail target: the schedule
    /// file will not load where there is no `sendmail`, and the user should know it now.
    #[must_use]
    pub fn mail_unavailable(mut self, problem: Option<String>) -> Self {
        self.mail_unavailable = problem;
        self
    }

    /// Reports the user fields that `check` refuses, next to their lines. The jobs are still
    /// imported.
    #[must_use]
    pub fn checking_users(mut self, check: UserCheck) -> Self {
        self.check_user = Some(check);
        self
    }

    /// Converts a crontab's text.
    pub fn import(&mut self, text: &str, options: &ImportOptions) -> Import {
        let mut converter = Converter {
            options,
            check_user: self.check_user,
            user_word: self.user_word,
            mail_unavailable: &mut self.mail_unavailable,
            names: &mut self.names,
            zone: options.zone,
            env: BTreeMap::new(),
            mail_to: MailTo::Unset,
            mail_from: None,
            jitter_minutes: None,
            out: String::new(),
            jobs: 0,
            jobs_without_mail_to: 0,
            problems: Vec::new(),
            host_local: Vec::new(),
        };
        for (index, line) in text.lines().enumerate() {
            converter.line(index + 1, line);
        }
        let mut toml = format!(
            "# Imported by `redcron import-crontab` from {}.\n\
             # Each job keeps cron's behaviour: no retries, at most one run per fire, overlapping\n\
             # runs allowed, missed fires skipped.\n",
            comment_text(&options.source)
        );
        if converter.jobs_without_mail_to > 0 {
            toml.push_str(
                "# Jobs with no MAILTO above them send no notice (cron mailed their output to the \
                 user they ran as): add notify = [\"mailto:ADDRESS\"] and notify_on = [\"output\"].\n",
            );
        }
        // The file declares the zone cron read its lines in, once: a job's hours are those of
        // the machine the crontab ran on, wherever a replica runs, and one line moves them all.
        let _ = write!(
            toml,
            "\n[defaults]\n# The zone cron read these lines in; a CRON_TZ line gives the jobs \
             below it their own.\ntimezone = {}\n",
            toml_string(options.zone.name())
        );
        toml.push('\n');
        toml.push_str(&converter.out);
        Import {
            toml,
            jobs: converter.jobs,
            problems: converter.problems,
            host_local: converter.host_local,
        }
    }
}

/// Converts a crontab's text on its own: names unique within it, users unchecked.
pub fn import(text: &str, options: &ImportOptions) -> Import {
    Importer::new(JobNames::default()).import(text, options)
}

/// Whether `word` is a user of this machine and no program on `path` (the crontab's `PATH`, or
/// the importer's), for [`Importer::suspecting_user_fields`]: `sync`, `mail` and `man` are
/// users and programs both, and a line that runs them is no system crontab's.
pub fn user_not_program_here(word: &str, path: Option<&str>) -> bool {
    if word.contains('/') || !matches!(nix::unistd::User::from_name(word), Ok(Some(_))) {
        return false;
    }
    let path = path
        .map(std::ffi::OsString::from)
        .or_else(|| std::env::var_os("PATH"))
        .unwrap_or_default();
    std::env::split_paths(&path).all(|dir| !super::notice::is_executable(&dir.join(word)))
}

/// Whether `user` exists on this machine, for [`Importer::checking_users`].
///
/// # Errors
/// When there is no such user, or the user database cannot be read.
pub fn user_exists_here(user: &str) -> Result<(), String> {
    match nix::unistd::User::from_name(user) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(format!(
            "no user \"{user}\" on this machine: the job is imported, but a replica here \
             cannot run it"
        )),
        Err(error) => Err(format!("cannot look up user \"{user}\": {error}")),
    }
}

/// Where the output of the jobs below a line is mailed, as cron's `MAILTO` says.
#[derive(Debug, Clone)]
enum MailTo {
    /// No `MAILTO` yet: cron mails the user the job runs as, which has no equivalent here.
    Unset,
    /// `MAILTO=""`, or one that cannot be used: no mail.
    Off,
    /// The addresses, as a notice target.
    To(Target),
}

struct Converter<'a> {
    options: &'a ImportOptions,
    /// See [`Importer::checking_users`].
    check_user: Option<UserCheck>,
    /// See [`Importer::suspecting_user_fields`].
    user_word: Option<UserWord>,
    /// See [`Importer::mail_unavailable`]; taken when said.
    mail_unavailable: &'a mut Option<String>,
    /// Shared with the other crontabs of the import: names are unique across them.
    names: &'a mut JobNames,
    /// The zone of the lines read so far (`CRON_TZ`).
    zone: Tz,
    /// The variables set by the lines read so far: cron gives each entry the environment in
    /// force where it stands.
    env: BTreeMap<String, String>,
    /// The `MAILTO` in force, which becomes a notice instead of a variable.
    mail_to: MailTo,
    /// The `MAILFROM` in force (cronie): the sender of that notice's mail.
    mail_from: Option<String>,
    /// The `RANDOM_DELAY` in force (cronie), in minutes: the jobs' `jitter`.
    jitter_minutes: Option<u32>,
    out: String,
    jobs: usize,
    /// The jobs imported with no `MAILTO` in force, which the header tells about.
    jobs_without_mail_to: usize,
    problems: Vec<Problem>,
    host_local: Vec<HostLocal>,
}

impl Converter<'_> {
    fn line(&mut self, number: usize, line: &str) {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            self.out.push('\n');
        } else if trimmed.starts_with('#') {
            let _ = writeln!(self.out, "{}", comment_text(trimmed));
        } else if trimmed.contains('\0') {
            // Neither a command nor an environment variable can hold one: the job would be
            // refused when its file is loaded.
            self.problem(
                number,
                "not imported: the line contains a NUL character (\\u0000), which no command \
                 or environment variable can hold",
            );
            let _ = writeln!(self.out, "# {}", comment_text(trimmed));
        } else if let Some((name, value)) = assignment(trimmed) {
            self.assignment(number, trimmed, name, &value);
        } else if let Err(reason) = self.entry(number, trimmed) {
            self.problem(number, &format!("not imported: {reason}"));
            let _ = writeln!(self.out, "# {}", comment_text(trimmed));
        }
    }

    fn assignment(&mut self, number: usize, line: &str, name: &str, value: &str) {
        let problem = if name == "CRON_TZ" {
            match value.parse::<Tz>() {
                Ok(zone) => {
                    self.zone = zone;
                    None
                }
                Err(_) => Some(format!(
                    "unknown time zone \"{value}\"; the jobs below keep {}",
                    self.zone
                )),
            }
        } else if name == "MAILTO" {
            self.set_mail_to(value)
        } else if name == "MAILFROM" {
            self.set_mail_from(value)
        } else if name == "RANDOM_DELAY" {
            self.set_random_delay(value)
        } else if let Some((_, what)) = CRON_ONLY.iter().find(|(only, _)| *only == name) {
            Some(format!(
                "only cron reads {name} ({what}): left out of the jobs' environment"
            ))
        } else if is_variable_name(name) {
            self.env.insert(name.to_owned(), value.to_owned());
            None
        } else {
            Some(format!(
                "\"{name}\" cannot be passed as an environment variable; left out"
            ))
        };
        if let Some(problem) = problem {
            self.problem(number, &problem);
        }
        let _ = writeln!(self.out, "# {}", comment_text(line));
    }

    /// cron mails a job's output to `MAILTO` whenever the job prints anything, failed or not:
    /// an `output` notice. Returns the problem with the value, if any.
    fn set_mail_to(&mut self, value: &str) -> Option<String> {
        if value.trim().is_empty() {
            self.mail_to = MailTo::Off;
            return None;
        }
        match Target::parse(&format!("mailto:{value}")) {
            Ok(target) => {
                self.mail_to = MailTo::To(target);
                self.mail_unavailable.take()
            }
            Err(error) => {
                self.mail_to = MailTo::Off;
                Some(format!(
                    "bad MAILTO: {error}; the jobs below send no notice"
                ))
            }
        }
    }

    /// cronie's `MAILFROM`: the sender of the mails of the jobs below. Returns the problem
    /// with the value, if any.
    fn set_mail_from(&mut self, value: &str) -> Option<String> {
        let value = value.trim();
        if value.is_empty() {
            self.mail_from = None;
            return None;
        }
        match Target::parse(&format!("mailto:root?from={value}")) {
            Ok(_) => {
                self.mail_from = Some(value.to_owned());
                None
            }
            Err(error) => {
                self.mail_from = None;
                Some(format!(
                    "bad MAILFROM: {error}; the mails of the jobs below go from the user the \
                     replica runs as"
                ))
            }
        }
    }

    /// cronie's `RANDOM_DELAY` (minutes): each job below starts up to that late, as `jitter`
    /// delays each fire. Returns the problem with the value, if any.
    fn set_random_delay(&mut self, value: &str) -> Option<String> {
        match value.trim().parse::<u32>() {
            Ok(minutes) => {
                self.jitter_minutes = (minutes > 0).then_some(minutes);
                None
            }
            Err(_) => {
                self.jitter_minutes = None;
                Some(format!(
                    "bad RANDOM_DELAY \"{value}\": expected a number of minutes; the jobs \
                     below have no jitter"
                ))
            }
        }
    }

    /// A bare `%` ends the command, as cron reads it: cron cut the command there too, so a
    /// `date +%s` meant as a format never ran as written.
    fn percent_problem(command: &str) -> Option<String> {
        let (head, input) = split_input(command);
        input.as_ref()?;
        let format_word = head.split_whitespace().next_back().is_some_and(|word| {
            word.trim_start_matches(['(', '$', '"', '\''])
                .starts_with('+')
        });
        Some(if format_word {
            format!(
                "a bare % ends the command, as cron reads it: this runs \"{}\" with the rest \
                 as its standard input, so the date format after it is lost (cron cut it there \
                 too); write \\% for a literal %, as in date +\\%s",
                comment_text(&head)
            )
        } else {
            "a bare % ends the command, as cron reads it: the text after it is the command's \
             standard input, each further % a newline; write \\% where a literal % was meant"
                .to_owned()
        })
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
        if let (Some(user), Some(check_user)) = (&user, self.check_user)
            && let Err(problem) = check_user(user)
        {
            self.problem(number, &problem);
        }
        if let (None, Some(user_word)) = (&user, self.user_word) {
            let (word, _) = split_fields(command, 1);
            if user_word(&word, self.env.get("PATH").map(String::as_str)) {
                self.problem(
                    number,
                    &format!(
                        "the command starts with \"{word}\", a user on this machine and no \
                         program: this looks like a system crontab (/etc/crontab, \
                         /etc/cron.d/*), whose lines name the user to run as; import it with \
                         --system"
                    ),
                );
            }
        }
        if let Some(problem) = Self::percent_problem(command) {
            self.problem(number, &problem);
        }
        let (command, input) = split_input(command);
        let name = self.names.unique(&command);
        let host_local = host_local::reason(&command);
        let command = self.wrap_for_shell(&command);
        let command = match input {
            Some(input) => format!("printf '%s' {} | (\n{command}\n)", shell_quote(&input)),
            None => command,
        };

        self.jobs += 1;
        let out = &mut self.out;
        let _ = writeln!(out, "[jobs.{name}]");
        let _ = writeln!(out, "# crontab line {number}: {}", comment_text(line));
        if let Some(reason) = host_local {
            let hint = if self.options.keeps_host_work() {
                String::new()
            } else {
                format!(
                    ": it {}; on = \"every\" runs it on each, where = [\"host=...\"] on one \
                     machine",
                    self.options.one_replica()
                )
            };
            let _ = writeln!(out, "# host-local: {}{hint}", comment_text(&reason));
            self.host_local.push(HostLocal {
                line: number,
                job: name.clone(),
                reason,
            });
        }
        let _ = writeln!(out, "schedule = {}", toml_string(schedule.as_str()));
        if let Some(user) = user {
            // Run as that user, as cron did: the replica must run as root, and the user exist.
            let _ = writeln!(out, "user = {}", toml_string(&user));
        }
        if self.zone != self.options.zone {
            // A `CRON_TZ` above it: the file's `[defaults]` has the machine's zone.
            let _ = writeln!(out, "timezone = {}", toml_string(self.zone.name()));
        }
        let _ = writeln!(out, "command = {}", toml_string(&command));
        if !self.env.is_empty() {
            let pairs: Vec<String> = self
                .env
                .iter()
                .map(|(key, value)| format!("{key} = {}", toml_string(value)))
                .collect();
            let _ = writeln!(out, "env = {{ {} }}", pairs.join(", "));
        }
        if let Some(minutes) = self.jitter_minutes {
            let _ = writeln!(out, "jitter = \"{minutes}m\"");
        }
        match &self.mail_to {
            MailTo::To(target) => {
                let target = match (target, &self.mail_from) {
                    (Target::Mail { to, .. }, Some(from)) => Target::Mail {
                        to: to.clone(),
                        from: Some(from.clone()),
                        cron_subject: false,
                    },
                    (target, _) => target.clone(),
                };
                let _ = writeln!(
                    out,
                    "notify = [{}]\nnotify_on = [\"output\"]",
                    toml_string(&target.to_string())
                );
            }
            MailTo::Off => {}
            MailTo::Unset => self.jobs_without_mail_to += 1,
        }
        if !self.options.selector.is_empty() {
            let terms = Value::try_from(&self.options.selector)
                .expect("a selector is a list of strings, which TOML holds");
            let _ = writeln!(out, "where = {terms}");
        }
        if self.options.on == Reach::Every {
            let _ = writeln!(out, "on = \"every\"");
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

    /// Marks the problem in the file, above the line it is about, and records it.
    fn problem(&mut self, number: usize, message: &str) {
        let _ = writeln!(
            self.out,
            "# redcron: line {number}: {}",
            comment_text(message)
        );
        self.problems.push(Problem {
            line: number,
            message: message.to_owned(),
        });
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
mod tests;
