//! What a job tells people about its runs: the targets of its notices (`notify`) and the
//! outcomes that send one (`notify_on`), as declared; sending them is `crate::notify`'s.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

/// Where a notice goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Target {
    /// `mailto:ops@example.com[,dev@example.com][?from=cron@example.com][&subject=cron]`:
    /// mailed through the local `sendmail`, as cron mails a job's output.
    Mail {
        /// The recipients; never empty.
        to: Vec<String>,
        /// The sender (`From:` and the envelope's, as cronie's `MAILFROM` sets them); `None`
        /// leaves both to `sendmail`, which uses the user the replica runs as.
        from: Option<String>,
        /// `subject=cron`: the subject cron gives its mails, `Cron <user@host> command`, for
        /// mail filters written for cron's.
        cron_subject: bool,
    },
    /// `https://...` or `http://...`: a JSON document POSTed to the address.
    Webhook(String),
    /// `exec:COMMAND`: run with `/bin/sh -c`, the same JSON document on its standard input.
    Exec(String),
}

impl Target {
    /// Reads a target as a schedule file writes it.
    ///
    /// # Errors
    /// What is wrong with it, for the file's diagnostics.
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some(mail) = text.strip_prefix("mailto:") {
            let (addresses, parameters) = mail.split_once('?').unwrap_or((mail, ""));
            let mut from = None;
            let mut cron_subject = false;
            for parameter in parameters
                .split('&')
                .filter(|parameter| !parameter.is_empty())
            {
                match parameter.split_once('=') {
                    Some(("subject", "cron")) => cron_subject = true,
                    Some(("from", sender)) if is_mail_address(sender) => {
                        from = Some(sender.to_owned());
                    }
                    Some(("from", sender)) => {
                        return Err(format!(
                            "\"{sender}\" is not a mail address for from=: expected user@host"
                        ));
                    }
                    _ => {
                        return Err(format!(
                            "\"{parameter}\" in \"{text}\": expected from=ADDRESS (the mail's \
                             sender) or subject=cron (cron's subject) after the addresses"
                        ));
                    }
                }
            }
            let addresses: Vec<String> = addresses
                .split(',')
                .map(str::trim)
                .filter(|address| !address.is_empty())
                .map(str::to_owned)
                .collect();
            if addresses.is_empty() {
                return Err(format!("\"{text}\" names no address"));
            }
            if let Some(bad) = addresses.iter().find(|address| !is_mail_address(address)) {
                return Err(format!(
                    "\"{bad}\" is not a mail address: expected user@host (or a local user name)"
                ));
            }
            return Ok(Target::Mail {
                to: addresses,
                from,
                cron_subject,
            });
        }
        if let Some(command) = text.strip_prefix("exec:") {
            if command.trim().is_empty() {
                return Err("\"exec:\" names no command".to_owned());
            }
            // Started with `/bin/sh -c` as a job's command is: the same limits hold.
            super::limits::check_command(command)?;
            return Ok(Target::Exec(command.to_owned()));
        }
        if let Some(rest) = text
            .strip_prefix("https://")
            .or_else(|| text.strip_prefix("http://"))
        {
            let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
            if host.is_empty() || text.chars().any(char::is_whitespace) {
                return Err(format!("\"{text}\" is not a web address"));
            }
            return Ok(Target::Webhook(text.to_owned()));
        }
        Err(format!(
            "\"{text}\": expected \"mailto:ADDRESS\", \"https://...\", \"http://...\" or \
             \"exec:COMMAND\""
        ))
    }

    /// The kind of target, as metrics and logs label it: `mail`, `webhook` or `exec`.
    pub fn kind(&self) -> &'static str {
        match self {
            Target::Mail { .. } => "mail",
            Target::Webhook(_) => "webhook",
            Target::Exec(_) => "exec",
        }
    }
}

/// A local user name or `user@host`: what `sendmail` takes as a recipient. Anything that could
/// be read as an option or split into two recipients is refused.
fn is_mail_address(address: &str) -> bool {
    !address.starts_with('-')
        && address.matches('@').count() <= 1
        && !address.ends_with('@')
        && !address.starts_with('@')
        && address
            .chars()
            .all(|c| c.is_ascii_graphic() && !matches!(c, '<' | '>' | '(' | ')' | ',' | ';'))
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Mail {
                to,
                from,
                cron_subject,
            } => {
                write!(f, "mailto:{}", to.join(","))?;
                let mut separator = '?';
                if let Some(from) = from {
                    write!(f, "{separator}from={from}")?;
                    separator = '&';
                }
                if *cron_subject {
                    write!(f, "{separator}subject=cron")?;
                }
                Ok(())
            }
            Target::Webhook(url) => f.write_str(url),
            Target::Exec(command) => write!(f, "exec:{command}"),
        }
    }
}

impl From<Target> for String {
    fn from(target: Target) -> Self {
        target.to_string()
    }
}

impl TryFrom<String> for Target {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Target::parse(&text)
    }
}

/// An outcome that sends a notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// A run went to the dead letters: its last attempt failed, or its worker died and it may
    /// not run again.
    Dead,
    /// An attempt failed (exit status, timeout). The attempt that makes the run dead sends
    /// `dead` instead when both are asked for.
    Failed,
    /// The first success of a job after one of its runs went dead.
    Recovered,
    /// A fire did not run: the previous run still ran (`overlap = "forbid"`), it was missed
    /// (`misfire`), or it could not start by its `starting_deadline`. Not the fires of a paused
    /// job.
    Skipped,
    /// An attempt started more than `late_after` after it was due.
    Late,
    /// An attempt printed something, as cron mails a job's output.
    Output,
}

impl Event {
    /// Every event, in the order the file's messages list them.
    pub const ALL: [Event; 6] = [
        Event::Dead,
        Event::Failed,
        Event::Recovered,
        Event::Skipped,
        Event::Late,
        Event::Output,
    ];

    /// The event's name, as files, scripts and notices spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Event::Dead => "dead",
            Event::Failed => "failed",
            Event::Recovered => "recovered",
            Event::Skipped => "skipped",
            Event::Late => "late",
            Event::Output => "output",
        }
    }

    /// The event named `text`.
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|event| event.as_str() == text)
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How late an attempt may start before a `late` notice, when `notify_on` has `late` and the
/// job does not say.
pub const DEFAULT_LATE_AFTER: Duration = Duration::from_secs(60);

/// The notices of a job with at least one target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notices {
    /// Where each notice goes; never empty.
    pub targets: Vec<Target>,
    /// The outcomes that send one: sorted, each once, never empty.
    pub on: Vec<Event>,
    /// The lateness that sends a `late` notice.
    #[serde(serialize_with = "millis", deserialize_with = "from_millis")]
    pub late_after: Duration,
}

impl Notices {
    /// Whether a notice goes out for `event`.
    pub fn sends(&self, event: Event) -> bool {
        self.on.contains(&event)
    }

    /// Whether any target mails.
    pub fn mails(&self) -> bool {
        self.targets
            .iter()
            .any(|target| matches!(target, Target::Mail { .. }))
    }
}

fn millis<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

fn from_millis<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_millis)
}

/// The environment variable naming the `sendmail` to use (msmtp, say) instead of looking for
/// one.
pub const SENDMAIL_ENV: &str = "REDCRON_SENDMAIL";

/// The `sendmail` that mail targets go through: the program [`SENDMAIL_ENV`] names when it is
/// set, else the first `sendmail` on `PATH`, else the places mail transfer agents install it
/// (`/usr/sbin/sendmail`, `/usr/lib/sendmail`). `None` when there is none (or the one named
/// cannot be run): a job that mails cannot be loaded then.
pub fn find_sendmail() -> Option<PathBuf> {
    if let Some(named) = std::env::var_os(SENDMAIL_ENV).filter(|named| !named.is_empty()) {
        let named = PathBuf::from(named);
        return is_executable(&named).then_some(named);
    }
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .map(|dir| dir.join("sendmail"))
        .chain(["/usr/sbin/sendmail", "/usr/lib/sendmail"].map(PathBuf::from))
        .find(|candidate| is_executable(candidate))
}

/// Whether `path` is a file that can be run.
pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_read_back_as_written() {
        for text in [
            "mailto:ops@example.com",
            "mailto:ops@example.com,root",
            "mailto:ops@example.com?from=cron@web1.example.com",
            "mailto:ops@example.com?subject=cron",
            "mailto:ops@example.com?from=cron@web1.example.com&subject=cron",
            "https://hooks.example.com/redcron?team=ops",
            "http://127.0.0.1:8080/notice",
            "exec:/usr/local/bin/page --team ops",
        ] {
            let target = Target::parse(text).expect(text);
            assert_eq!(target.to_string(), text);
        }
        assert_eq!(
            Target::parse("mailto: ops@example.com , dev@example.com").expect("spaces"),
            Target::Mail {
                to: vec!["ops@example.com".into(), "dev@example.com".into()],
                from: None,
                cron_subject: false,
            }
        );
    }

    #[test]
    fn bad_targets_say_what_was_expected() {
        for (text, problem) in [
            ("mailto:", "names no address"),
            ("mailto:-oQ/tmp", "is not a mail address"),
            ("mailto:a@b@c", "is not a mail address"),
            ("exec:  ", "names no command"),
            ("exec:page\0ops", "contains a NUL character"),
            ("https://", "is not a web address"),
            ("https://a b", "is not a web address"),
            ("ops@example.com", "expected \"mailto:ADDRESS\""),
            ("ftp://example.com", "expected \"mailto:ADDRESS\""),
        ] {
            let error = Target::parse(text).expect_err(text);
            assert!(error.contains(problem), "{text}: {error}");
        }
    }

    #[test]
    fn events_are_named_as_files_write_them() {
        for event in Event::ALL {
            assert_eq!(Event::parse(event.as_str()), Some(event));
        }
        assert_eq!(Event::parse("died"), None);
    }
}
