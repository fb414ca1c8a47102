//! Sending notices: the document a notice carries, and its delivery to each kind of target
//! (`mail`, `webhook`, `exec`). Which notices are owed, and who sends them, is the store's and
//! the notifier's (`crate::engine::notifier`).

mod exec;
mod mail;
pub mod spool;
mod webhook;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use thiserror::Error;

use crate::schedule::Target;
use crate::store::OwedNotice;

pub use webhook::{SIGNATURE_HEADER, WEBHOOK_SECRET_ENV, signature};

/// How long one delivery may take: a webhook's request, or a `sendmail` or `exec:` command.
#[derive(Debug, Clone)]
pub struct DeliveryLimits {
    /// A webhook's whole request, connection included.
    pub webhook_timeout: Duration,
    /// A `sendmail` or `exec:` command, until it exits.
    pub command_timeout: Duration,
}

impl Default for DeliveryLimits {
    fn default() -> Self {
        Self {
            webhook_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(30),
        }
    }
}

/// Why a target did not take a notice.
#[derive(Debug, Error)]
pub enum DeliveryError {
    /// It may take it later: a timeout, a connection refused, a server error, a command that
    /// failed.
    #[error("{0}")]
    Transient(String),
    /// It never will: the receiver refused the notice itself (an HTTP 4xx other than 408 and
    /// 429), or there is no `sendmail`.
    #[error("{0}")]
    Refused(String),
}

/// What a notice says, as webhooks receive it (JSON) and `exec:` commands read it on their
/// standard input; mails say the same in words. Absent values are `null`.
#[derive(Debug, Clone, Serialize)]
pub struct Document {
    /// `<run id>:<attempt>:<event>`, the same however often it is sent: a receiver drops a
    /// repeat by it.
    pub notice: String,
    /// What happened: dead, failed, recovered, skipped, late or output.
    pub event: &'static str,
    /// The job.
    pub job: String,
    /// The run.
    pub run: String,
    /// `cron` or `adhoc`.
    pub kind: Option<String>,
    /// The queue it ran in.
    pub queue: Option<String>,
    /// The attempt the notice is about (0 for a fire skipped before any).
    pub attempt: u32,
    /// The run's state when the outcome was recorded: succeeded, retrying, dead, skipped, or
    /// started (for `late`).
    pub outcome: Option<String>,
    /// Why it failed, died or was skipped.
    pub reason: Option<String>,
    /// The command's exit code.
    pub exit_code: Option<i32>,
    /// What went wrong.
    pub error: Option<String>,
    /// The fire's time, for a cron fire (RFC 3339, UTC).
    pub fire_time: Option<String>,
    /// The same, ms since the epoch.
    pub fire_ms: Option<i64>,
    /// When the attempt was due.
    pub due_time: Option<String>,
    /// When the attempt started.
    pub started_time: Option<String>,
    /// When it ended.
    pub finished_time: Option<String>,
    /// How long it ran, ms.
    pub duration_ms: Option<i64>,
    /// How late it started, ms past its due time.
    pub late_ms: Option<i64>,
    /// The tail of its output (stdout and stderr together); `None` when no attempt started (a
    /// skipped fire).
    pub output: Option<String>,
    /// The host of the replica that ran it (or that it was meant for, as `replica`).
    pub host: Option<String>,
    /// The replica that ran it, else, for a run of an every-replica fire skipped before it
    /// ran, the replica it was meant for.
    pub replica: Option<String>,
    /// When the outcome was recorded.
    pub recorded_time: String,
    /// The job's command and the user it runs as (`None`: the replica's), as this replica
    /// declares the job, for a mail's cron-style subject; `None` when it does not declare it.
    /// Not sent to webhooks and commands: a declaration is not part of what happened.
    #[serde(skip)]
    pub declared: Option<(String, Option<String>)>,
    /// The output up to the mail limit, when this replica ran the attempt and its output was
    /// longer than the tail Redis keeps: what a mail carries instead of the tail. Not sent to
    /// webhooks and commands, which get the tail.
    #[serde(skip)]
    pub kept_output: Option<spool::MailOutput>,
}

impl Document {
    /// The document of `notice`, whose attempt ran on `host` (when known).
    pub fn new(notice: &OwedNotice, host: Option<String>) -> Self {
        let outcome = notice.state.as_deref().map(|state| match state {
            "active" => "started".to_owned(),
            other => other.to_owned(),
        });
        let ended = notice
            .finished_ms
            .filter(|_| notice.event.as_str() != "late");
        Self {
            notice: notice.id.clone(),
            event: notice.event.as_str(),
            job: notice.job.clone(),
            run: notice.run_id.clone(),
            kind: notice.kind.clone(),
            queue: notice.queue.clone(),
            attempt: notice.attempt,
            outcome,
            reason: notice.reason.clone(),
            exit_code: notice.exit_code,
            error: notice.error.clone(),
            fire_time: notice.fire_ms.and_then(rfc3339),
            fire_ms: notice.fire_ms,
            due_time: notice.due_ms.and_then(rfc3339),
            started_time: notice.started_ms.and_then(rfc3339),
            finished_time: ended.and_then(rfc3339),
            duration_ms: ended
                .zip(notice.started_ms)
                .map(|(finished, started)| (finished - started).max(0)),
            late_ms: notice
                .started_ms
                .zip(notice.due_ms)
                .map(|(started, due)| (started - due).max(0)),
            output: notice.started_ms.map(|_| notice.output.clone()),
            host,
            replica: notice.replica().map(str::to_owned),
            recorded_time: rfc3339(notice.created_ms).unwrap_or_default(),
            declared: None,
            kept_output: None,
        }
    }

    /// The document as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a notice always serializes to JSON")
    }
}

/// `ms` since the epoch as RFC 3339 in UTC, as notices and the command line write instants:
/// `2026-03-08T07:00:00+00:00`, with the milliseconds when there are any
/// (`2026-03-08T07:00:00.250+00:00`); `None` out of chrono's range (damaged data).
pub fn rfc3339(ms: i64) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms).map(|at| at.to_rfc3339())
}

/// Sends one notice's document to one target.
#[derive(Debug, Clone)]
pub struct Deliverer {
    limits: DeliveryLimits,
    /// The client, or why there is none (no TLS roots could be read): only webhooks need it.
    http: Result<reqwest::Client, String>,
    secret: Option<Vec<u8>>,
}

impl Deliverer {
    /// A deliverer with these limits, signing webhooks with the secret in
    /// [`WEBHOOK_SECRET_ENV`] when it is set.
    pub fn new(limits: DeliveryLimits) -> Self {
        let http = webhook::client(limits.webhook_timeout);
        let secret = std::env::var_os(WEBHOOK_SECRET_ENV)
            .filter(|secret| !secret.is_empty())
            .map(|secret| secret.into_encoded_bytes());
        Self {
            limits,
            http,
            secret,
        }
    }

    /// Delivers `document` to `target`.
    ///
    /// # Errors
    /// Why the target did not take it.
    pub async fn deliver(&self, target: &Target, document: &Document) -> Result<(), DeliveryError> {
        match target {
            Target::Mail {
                to,
                from,
                cron_subject,
            } => {
                let envelope = mail::Envelope {
                    to,
                    from: from.as_deref(),
                    cron_subject: *cron_subject,
                };
                mail::send(&envelope, document, self.limits.command_timeout).await
            }
            Target::Webhook(url) => match &self.http {
                Ok(http) => webhook::post(http, url, document, self.secret.as_deref()).await,
                Err(problem) => Err(DeliveryError::Refused(problem.clone())),
            },
            Target::Exec(command) => {
                exec::run(command, document, self.limits.command_timeout).await
            }
        }
    }
}
