//! `mailto:` targets: a plain-text mail handed to the local `sendmail`, as cron mails a job's
//! output.

use std::fmt::Write as _;
use std::time::Duration;

use tokio::process::Command;

use super::exec::feed;
use super::{DeliveryError, Document};
use crate::schedule::notice::find_sendmail;

/// Who a mail goes to and from, and how its subject reads.
pub(super) struct Envelope<'a> {
    /// The recipients.
    pub(super) to: &'a [String],
    /// The sender, when the target names one.
    pub(super) from: Option<&'a str>,
    /// `Cron <user@host> command` instead of redcron's subject.
    pub(super) cron_subject: bool,
}

/// The longest command a cron-style subject quotes, in characters: a header line stays short.
const SUBJECT_COMMAND_CHARS: usize = 200;

/// Mails `document` as `envelope` says.
pub(super) async fn send(
    envelope: &Envelope<'_>,
    document: &Document,
    timeout: Duration,
) -> Result<(), DeliveryError> {
    let (addresses, from) = (envelope.to, envelope.from);
    let sendmail = find_sendmail().ok_or_else(|| {
        DeliveryError::Refused(
            "no sendmail on PATH, at /usr/sbin/sendmail or at /usr/lib/sendmail".to_owned(),
        )
    })?;
    let mut command = Command::new(sendmail);
    // -i: a line with a lone dot is text, not the end; `--`: no address is read as an option
    // (the schedule file refused those anyway).
    command.arg("-i");
    if let Some(from) = from {
        // The envelope's sender too, where bounces go, as cronie does with MAILFROM.
        command.arg("-f").arg(from);
    }
    command.arg("--").args(addresses);
    feed(command, message(envelope, document).as_bytes(), timeout).await
}

/// The mail: headers, then what happened in words, then the output. Header values come from
/// job names, host names, replica ids and the store's own words, none of which holds a line
/// break; the error text and output go in the body only.
fn message(envelope: &Envelope<'_>, document: &Document) -> String {
    let host = document.host.as_deref().unwrap_or("an unknown host");
    let mut what = document.event.to_owned();
    if let Some(reason) = &document.reason {
        let _ = write!(what, " ({reason}");
        if let Some(code) = document.exit_code {
            let _ = write!(what, ", exit {code}");
        }
        what.push(')');
    }
    let mut mail = String::new();
    if let Some(from) = envelope.from {
        let _ = writeln!(mail, "From: {from}");
    }
    let _ = writeln!(mail, "To: {}", envelope.to.join(", "));
    if envelope.cron_subject {
        let _ = writeln!(mail, "Subject: {}", cron_subject(document));
    } else {
        let _ = writeln!(mail, "Subject: redcron: {} {what} on {host}", document.job);
    }
    let _ = writeln!(mail, "Content-Type: text/plain; charset=UTF-8");
    let _ = writeln!(mail, "X-Redcron-Notice: {}", document.notice);
    let _ = writeln!(mail, "X-Redcron-Job: {}", document.job);
    mail.push('\n');
    let rows = [
        ("Job", Some(document.job.clone())),
        ("Event", Some(document.event.to_owned())),
        ("Run", Some(document.run.clone())),
        ("Attempt", Some(document.attempt.to_string())),
        ("Outcome", document.outcome.clone()),
        ("Reason", document.reason.clone()),
        ("Exit code", document.exit_code.map(|code| code.to_string())),
        ("Error", document.error.clone()),
        ("Fire time", document.fire_time.clone()),
        ("Started", document.started_time.clone()),
        (
            "Duration",
            document.duration_ms.map(|ms| {
                humantime::format_duration(Duration::from_millis(ms.unsigned_abs())).to_string()
            }),
        ),
        ("Host", document.host.clone()),
        ("Replica", document.replica.clone()),
    ];
    for (name, value) in rows {
        if let Some(value) = value {
            let _ = writeln!(mail, "{:<10} {value}", format!("{name}:"));
        }
    }
    if let Some(kept) = &document.kept_output {
        mail.push_str("\nOutput:\n\n");
        mail.push_str(&kept.text);
        if !kept.text.ends_with('\n') {
            mail.push('\n');
        }
        if kept.is_cut() {
            let _ = writeln!(
                mail,
                "\n[redcron: the output is cut here, at {} bytes of {}; its last 4 KiB are kept \
                 with the run: redcron runs show {}]",
                kept.limit, kept.total, document.run
            );
        }
    } else if let Some(output) = document
        .output
        .as_deref()
        .filter(|output| !output.is_empty())
    {
        mail.push_str("\nOutput (its last lines):\n\n");
        mail.push_str(output);
        if !output.ends_with('\n') {
            mail.push('\n');
        }
    }
    mail
}

/// cron's subject, `Cron <user@host> command`: the user the job runs as (the one it names, else
/// the one this replica runs as, as its jobs do) and the command on one line, cut to
/// [`SUBJECT_COMMAND_CHARS`]; the job's name when this replica does not declare it.
fn cron_subject(document: &Document) -> String {
    let host = document.host.as_deref().unwrap_or("localhost");
    let (command, user) = match &document.declared {
        Some((command, user)) => (command.as_str(), user.clone()),
        None => (document.job.as_str(), None),
    };
    let user = user.unwrap_or_else(|| {
        let uid = nix::unistd::getuid();
        nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map_or_else(|| uid.to_string(), |user| user.name)
    });
    // A header is one line: the line breaks of a multi-line command (an imported crontab line
    // with `%` input is one) become spaces, and so does any other control character.
    let mut line: String = command
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if let Some((cut, _)) = line.char_indices().nth(SUBJECT_COMMAND_CHARS) {
        line.truncate(cut);
        line.push_str("...");
    }
    format!("Cron <{user}@{host}> {line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mail_says_what_happened_with_the_output_in_its_body() {
        let document = Document {
            notice: "backup@1:2:dead".into(),
            event: "dead",
            job: "backup".into(),
            run: "backup@1".into(),
            kind: Some("cron".into()),
            queue: Some("default".into()),
            attempt: 2,
            outcome: Some("dead".into()),
            reason: Some("failed".into()),
            exit_code: Some(3),
            error: Some("exited with 3\nSubject: injected".into()),
            fire_time: Some("2026-12-03T03:00:00+00:00".into()),
            fire_ms: Some(1),
            due_time: None,
            started_time: None,
            finished_time: None,
            duration_ms: Some(1_500),
            late_ms: None,
            output: Some("disk full\n".into()),
            host: Some("db1".into()),
            replica: Some("db1".into()),
            recorded_time: "2026-12-03T03:00:01.500+00:00".into(),
            declared: None,
            kept_output: None,
        };
        let to = ["ops@example.com".to_owned(), "root".to_owned()];
        let envelope = Envelope {
            to: &to,
            from: Some("cron@db1.example.com"),
            cron_subject: false,
        };
        let mail = message(&envelope, &document);
        let (headers, body) = mail.split_once("\n\n").expect("headers, then a body");
        assert!(headers.contains("To: ops@example.com, root"), "{headers}");
        assert!(headers.contains("From: cron@db1.example.com"), "{headers}");
        assert!(
            headers.contains("Subject: redcron: backup dead (failed, exit 3) on db1"),
            "{headers}"
        );
        assert!(!headers.contains("injected"), "{headers}");
        assert!(body.contains("Duration:  1s 500ms"), "{body}");
        assert!(
            body.ends_with("Output (its last lines):\n\ndisk full\n"),
            "{body}"
        );
    }

    #[test]
    fn a_cron_subject_names_the_user_host_and_command_on_one_line() {
        let mut document = Document {
            notice: "backup@1:1:output".into(),
            event: "output",
            job: "backup".into(),
            run: "backup@1".into(),
            kind: Some("cron".into()),
            queue: Some("default".into()),
            attempt: 1,
            outcome: Some("succeeded".into()),
            reason: None,
            exit_code: Some(0),
            error: None,
            fire_time: None,
            fire_ms: None,
            due_time: None,
            started_time: None,
            finished_time: None,
            duration_ms: None,
            late_ms: None,
            output: Some("done\n".into()),
            host: Some("web1".into()),
            replica: Some("web1".into()),
            recorded_time: "2026-12-03T03:00:01.500+00:00".into(),
            declared: Some((
                "printf '%s' 'a\nb' | (\n/usr/local/bin/backup.sh\n)".into(),
                Some("root".into()),
            )),
            kept_output: None,
        };
        let to = ["ops@example.com".to_owned()];
        let envelope = Envelope {
            to: &to,
            from: None,
            cron_subject: true,
        };
        let mail = message(&envelope, &document);
        let (headers, _) = mail.split_once("\n\n").expect("headers, then a body");
        assert!(
            headers.contains(
                "\nSubject: Cron <root@web1> printf '%s' 'a b' | ( /usr/local/bin/backup.sh )\n"
            ),
            "{headers}"
        );
        // Not declared here: the job's name stands for its command.
        document.declared = None;
        assert!(cron_subject(&document).ends_with("@web1> backup"));
        document.declared = Some(("x".repeat(500), None));
        assert_eq!(
            cron_subject(&document)
                .split_once("> ")
                .map(|(_, line)| line.len()),
            Some(SUBJECT_COMMAND_CHARS + 3)
        );
    }
}
