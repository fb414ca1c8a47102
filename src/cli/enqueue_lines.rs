//! `redcron enqueue --from`: many runs, one JSON object a line, checked whole before any is
//! sent and then sent in pipelined batches.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use chrono::DateTime;
use serde::Deserialize;
use serde_json::json;

use super::enqueue::{delay, uniqueness_window, within_horizon};
use super::times::{relative, rfc3339};
use super::{CliError, RedisArgs, block_on};
use crate::client::{Client, ClientError, RunRequest, Submitted, check_payload};
use crate::schedule::Priority;

/// Lines sent in one round trip: ten script calls of a thousand runs, few enough that a Redis
/// error leaves a known, small range of lines whose runs may or may not exist.
const LINES_PER_BATCH: usize = 10_000;

/// Refusals listed in an error about the input; the rest are counted.
const LISTED: usize = 20;

/// One line as written: the flags of `enqueue`, by the same names.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    job: String,
    payload: Option<serde_json::Value>,
    #[serde(rename = "in")]
    delay: Option<String>,
    at: Option<String>,
    #[serde(default)]
    allow_past: bool,
    priority: Option<Priority>,
    #[serde(default)]
    unique: bool,
    unique_key: Option<String>,
    unique_for: Option<String>,
}

/// A line read and checked: everything its request needs, so that sending it can only be
/// refused by what Redis knows (the job, the fingerprint, the clock).
#[derive(Debug)]
struct Planned {
    /// Its line number, from 1, for every message about it.
    line: usize,
    job: String,
    payload: Option<String>,
    delay: Option<Duration>,
    /// Due time, ms, and whether a past one is taken.
    at: Option<(i64, bool)>,
    priority: Option<Priority>,
    /// The unique key (`None` for uniqueness by payload), and for how long, when unique.
    unique: Option<(Option<String>, Duration)>,
}

impl Planned {
    /// Reads line `line`.
    fn read(line: usize, text: &str) -> Result<Self, String> {
        let written: Line = serde_json::from_str(text).map_err(|error| {
            // serde_json ends its message with a position in the text it read, which is this
            // one line: its column says all of it.
            let message = error.to_string();
            let message = message.split(" at line ").next().unwrap_or(&message);
            format!("{message} (column {})", error.column())
        })?;
        let payload = written.payload.map(|payload| payload.to_string());
        if let Some(payload) = &payload {
            check_payload(payload).map_err(|error| format!("payload: {error}"))?;
        }
        if written.delay.is_some() && written.at.is_some() {
            return Err("\"in\" and \"at\" both say when: give one".to_owned());
        }
        if written.allow_past && written.at.is_none() {
            return Err("\"allow_past\" goes with \"at\"".to_owned());
        }
        let delay = written
            .delay
            .as_deref()
            .map(delay)
            .transpose()
            .map_err(|error| format!("\"in\": {error}"))?;
        let at = written
            .at
            .as_deref()
            .map(|at| {
                DateTime::parse_from_rfc3339(at)
                    .map(|at| (at.timestamp_millis(), written.allow_past))
                    .map_err(|error| {
                        format!("\"at\": {at:?} is not an RFC 3339 time like 2026-03-08T00:00:00Z: {error}")
                    })
                    .and_then(|(at_ms, past_ok)| {
                        within_horizon(at_ms, at).map_err(|error| format!("\"at\": {error}"))?;
                        Ok((at_ms, past_ok))
                    })
            })
            .transpose()?;
        if written.unique && written.unique_key.is_some() {
            return Err(
                "\"unique\" and \"unique_key\" both say what is unique: give one".to_owned(),
            );
        }
        if written.unique_key.as_deref() == Some("") {
            return Err("\"unique_key\" is empty".to_owned());
        }
        let window = written
            .unique_for
            .as_deref()
            .map(uniqueness_window)
            .transpose()
            .map_err(|error| format!("\"unique_for\": {error}"))?;
        let unique = if written.unique || written.unique_key.is_some() {
            Some((
                written.unique_key,
                window.unwrap_or(crate::client::DEFAULT_UNIQUE_FOR),
            ))
        } else if window.is_some() {
            return Err("\"unique_for\" goes with \"unique\" or \"unique_key\"".to_owned());
        } else {
            None
        };
        Ok(Self {
            line,
            job: written.job,
            payload,
            delay,
            at,
            priority: written.priority,
            unique,
        })
    }

    /// The request for this line's run.
    fn request<'c>(&self, client: &'c Client) -> Result<RunRequest<'c>, ClientError> {
        let mut request = client.enqueue(self.job.clone());
        if let Some(payload) = &self.payload {
            request = request.payload_text(payload.clone())?;
        }
        if let Some(priority) = self.priority {
            request = request.priority(priority);
        }
        if let Some(delay) = self.delay {
            request = request.after(delay);
        }
        if let Some((at_ms, past_ok)) = self.at {
            request = request.at(at_ms, past_ok);
        }
        if let Some((key, window)) = &self.unique {
            request = match key {
                Some(key) => request.unique_key(key.clone()),
                None => request.unique(),
            };
            request = request.unique_for(*window);
        }
        Ok(request)
    }
}

/// Reads every line of `from` (a file, or `-` for standard input): all of them are runs, or
/// none is sent.
fn read_lines(from: &str) -> Result<Vec<Planned>, CliError> {
    let input: Box<dyn BufRead> = if from == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(from).map_err(CliError::io(format!("reading {from}")))?;
        Box::new(BufReader::new(file))
    };
    let name = if from == "-" { "standard input" } else { from };
    let mut planned = Vec::new();
    let mut problems = Vec::new();
    for (index, text) in input.lines().enumerate() {
        let line = index + 1;
        let text = match text {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::InvalidData => {
                problems.push(format!("line {line}: not UTF-8 text"));
                continue;
            }
            Err(error) => {
                return Err(CliError::Io {
                    context: format!("reading line {line} of {name}"),
                    source: error,
                });
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        match Planned::read(line, &text) {
            Ok(run) => planned.push(run),
            Err(problem) => problems.push(format!("line {line}: {problem}")),
        }
    }
    if !problems.is_empty() {
        return Err(CliError::Argument(format!(
            "{name}: {} not a run, so no run was enqueued:\n  {}",
            count(problems.len(), "line is", "lines are"),
            listed(&problems)
        )));
    }
    Ok(planned)
}

/// The first [`LISTED`] of `items`, one a line, and how many more there are.
fn listed(items: &[String]) -> String {
    let mut text = items
        .iter()
        .take(LISTED)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n  ");
    if items.len() > LISTED {
        text.push_str(&format!("\n  and {} more", items.len() - LISTED));
    }
    text
}

/// `n` and the singular or plural that goes with it.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// What became of the lines sent so far.
#[derive(Default)]
struct Outcome {
    /// Each run created, with its line and job.
    created: Vec<(usize, String, Submitted)>,
    /// Each line refused, with its job and why.
    refused: Vec<(usize, String, String)>,
}

/// `redcron enqueue --from`: enqueues the run of every line of `from`, printing each as it is
/// created (or, with `json`, one document at the end, also when a batch failed).
pub(super) fn enqueue_lines(
    redis: &RedisArgs,
    from: &str,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let planned = read_lines(from)?;
    let mut outcome = Outcome::default();
    let sent = block_on(async {
        let client = Client::from_store(redis.connect().await?).acting_as(super::ACTOR);
        for batch in planned.chunks(LINES_PER_BATCH) {
            send_batch(&client, batch, &mut outcome, json, out).await?;
        }
        Ok::<_, CliError>(())
    });
    if json {
        let document = json!({
            "runs": outcome.created.iter().map(|(line, job, run)| json!({
                "line": line,
                "id": run.run_id,
                "job": job,
                "due": rfc3339(run.due_ms),
                "due_ms": run.due_ms,
                "paused": run.paused,
            })).collect::<Vec<_>>(),
            "refused": outcome.refused.iter().map(|(line, job, error)| json!({
                "line": line,
                "job": job,
                "error": error,
            })).collect::<Vec<_>>(),
        });
        writeln!(out, "{document}").map_err(CliError::unreported(format!(
            "{} were created, but writing their ids",
            count(outcome.created.len(), "run", "runs")
        )))?;
    }
    let paused: BTreeSet<&str> = outcome
        .created
        .iter()
        .filter(|(_, _, run)| run.paused)
        .map(|(_, job, _)| job.as_str())
        .collect();
    for job in paused {
        eprintln!(
            "redcron: job \"{job}\" is paused: its runs are skipped unless it is resumed \
             (redcron resume {job}) before they are due"
        );
    }
    sent?;
    if outcome.refused.is_empty() {
        return Ok(());
    }
    let refusals: Vec<String> = outcome
        .refused
        .iter()
        .map(|(line, _, error)| format!("line {line}: {error}"))
        .collect();
    Err(CliError::Argument(format!(
        "{} of {} refused; every other line's run was enqueued:\n  {}",
        count(refusals.len(), "line", "lines"),
        planned.len(),
        listed(&refusals)
    )))
}

/// Sends one batch of lines and records (and, in text, prints) what became of each.
async fn send_batch(
    client: &Client,
    batch: &[Planned],
    outcome: &mut Outcome,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let (Some(first), Some(last)) = (batch.first(), batch.last()) else {
        return Ok(());
    };
    let mut requests = Vec::with_capacity(batch.len());
    let mut sent = Vec::with_capacity(batch.len());
    for run in batch {
        match run.request(client) {
            Ok(request) => {
                requests.push(request);
                sent.push(run);
            }
            Err(error) => outcome
                .refused
                .push((run.line, run.job.clone(), error.to_string())),
        }
    }
    let answers = client.send_all(requests).await.map_err(|error| {
        let before = outcome.created.len();
        CliError::Argument(format!(
            "lines {} to {}: {error}; the {} of the lines before were enqueued, those of lines {} \
             to {} may each have been or not (redcron runs list shows them), and no later line \
             was sent",
            first.line,
            last.line,
            count(before, "run", "runs"),
            first.line,
            last.line
        ))
    })?;
    for (run, answer) in sent.into_iter().zip(answers) {
        match answer {
            Ok(created) => {
                if !json {
                    let due = rfc3339(created.due_ms);
                    writeln!(
                        out,
                        "line {}: {} due {due} ({})",
                        run.line,
                        created.run_id,
                        relative(created.now_ms, created.due_ms)
                    )
                    .map_err(CliError::unreported(format!(
                        "run {} of line {} was created, but writing its id",
                        created.run_id, run.line
                    )))?;
                }
                outcome.created.push((run.line, run.job.clone(), created));
            }
            Err(error) => outcome
                .refused
                .push((run.line, run.job.clone(), error.to_string())),
        }
    }
    Ok(())
}
