//! `mailto:` targets: a plain-text mail handed to the local `sendmail`, as cron mails a job's
//! output.

use std::fmt::Write as _;
use std::time::Duration;

use tokio::process::Command;

use super::exec::feed;
use super::{DeliveryError, Document};
use crate::schedule::notice::find_sendmail;

/// Mails `document` to `addresses`, from `from` when given.
pub(super) async fn send(
    addresses: &[String],
    from: Option<&str>,
    document: &Document,
    timeout: Duration,
) -> Result<(), DeliveryError> {
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
    feed(
        command,
        message(addresses, from, document).as_bytes(),
        timeout,
    )
    .await
}

/// The mail: headers, then what happened in words, then the output. Header values come from
/// job names, host names, replica ids and the store's own words, none of which holds a line
/// break; the error text and output go in the body only.
fn message(addresses: &[String], from: Option<&str>, document: &Document) -> String {
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
    if let Some(from) = from {
        let _ = writeln!(mail, "From: {from}");
    }
    let _ = writeln!(mail, "To: {}", addresses.join(", "));
    let _ = writeln!(mail, "Subject: redcron: {} {what} on {host}", document.job);
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
    if let Some(output) = document
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
        };
        let mail = message(
            &["ops@example.com".into(), "root".into()],
            Some("cron@db1.example.com"),
            &document,
        );
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
}
