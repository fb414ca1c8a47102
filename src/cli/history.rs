//! `redcron history`: the runs that ended, newest first, from the events stream and, with
//! `--archive`, from the archive too, as one history.

use std::collections::{HashMap, HashSet};
use std::io::Write;

use clap::Args;
use serde_json::{Value, json};

use super::output::{ListFormat, printable};
use super::times::{duration, parse_instant, rfc3339};
use super::{CliError, RedisArgs, block_on, list_count, write_table};
use crate::archive::ArchiveUrl;
use crate::archive::part::Document;
use crate::archive::read::{ReadError, Reader};
use crate::client::{Client, ClientError, EVENTS_SCANNED};
use crate::store::{Event, RunState};

#[derive(Debug, Args)]
pub(super) struct HistoryArgs {
    /// Only this job's runs.
    #[arg(add = super::complete::job_names())]
    job: Option<String>,
    /// How many outcomes, newest first (at least 1).
    #[arg(short = 'n', long = "count", default_value_t = 20, value_parser = list_count)]
    count: usize,
    /// Only failed attempts and dead runs.
    #[arg(long)]
    failed: bool,
    /// Only the runs this replica ran or, for every-replica jobs, that were meant for it (its
    /// id, as `status` lists it).
    #[arg(long, value_name = "ID")]
    replica: Option<String>,
    /// Only outcomes recorded at this instant or later: RFC 3339, or a span before now (2h,
    /// 7d).
    #[arg(long, value_name = "T")]
    since: Option<String>,
    /// Only outcomes recorded at this instant or earlier, in the same forms.
    #[arg(long, value_name = "T")]
    until: Option<String>,
    /// Read the archive too (the namespace's `run --archive` URL): outcomes Redis no longer
    /// holds are listed with the others, each once.
    #[arg(long, value_name = "URL", value_parser = super::run::ArchiveUrlParser)]
    archive: Option<ArchiveUrl>,
    #[command(flatten)]
    format: ListFormat,
    #[command(flatten)]
    redis: RedisArgs,
}

/// One outcome as `history --json` and the web API show it. Numbers are numbers and what a run
/// lacks is null; each instant is RFC 3339 for people and `_ms` for arithmetic.
pub(crate) fn history_document(event: &Event, run: &HashMap<String, String>) -> Value {
    let entry = HistoryEntry::new(event, run);
    json!({
        "id": entry.run_id,
        "job": entry.field("job"),
        "replica": entry.replica(),
        "outcome": entry.field("state"),
        "at": rfc3339(event.at_ms),
        "at_ms": event.at_ms,
        "fire": entry.fire_ms().map(rfc3339),
        "fire_ms": entry.fire_ms(),
        "started": entry.started_ms().map(rfc3339),
        "started_ms": entry.started_ms(),
        "duration_ms": entry.duration_ms(),
        "attempt": entry.number("attempt"),
        "exit_code": entry.number("exit_code"),
        "reason": entry.field("reason"),
        "error": entry.field("error"),
        "output": entry.field("output"),
    })
}

pub(super) fn history(args: &HistoryArgs, out: &mut impl Write) -> Result<(), CliError> {
    let reader = args.archive.as_ref().map(Reader::open).transpose()?;
    let mut unread = Vec::new();
    let table: Option<Vec<Value>> = block_on(async {
        let client = Client::from_store(args.redis.connect().await?);
        if let Some(reader) = &reader {
            reader.check_owner(&args.redis.namespace).await?;
        }
        let (since_ms, until_ms) = window(&client, args).await?;
        // A window may leave out the newest outcomes: Redis's are read as far as `history`
        // reads, then kept within it.
        let asked = if since_ms.is_some() || until_ms.is_some() {
            EVENTS_SCANNED
        } else {
            args.count
        };
        let read = client
            .history(
                args.job.as_deref(),
                args.replica.as_deref(),
                asked,
                args.failed,
            )
            .await;
        let entries = match (read, &reader) {
            (Ok(entries), _) => entries,
            // A job, or a replica, that left Redis long ago may be in the archive.
            (Err(ClientError::UnknownJob(_) | ClientError::UnknownReplica { .. }), Some(_)) => {
                Vec::new()
            }
            (Err(error), _) => return Err(error.into()),
        };
        let within = |at_ms: i64| {
            since_ms.is_none_or(|since| at_ms >= since)
                && until_ms.is_none_or(|until| at_ms <= until)
        };
        let hot: Vec<Value> = entries
            .iter()
            .filter(|entry| within(entry.event.at_ms))
            .take(args.count)
            .map(|entry| history_document(&entry.event, &entry.run))
            .collect();
        let Some(reader) = &reader else {
            return Ok(Some(hot));
        };
        // JSON is written as it is found, so that a quarter of outcomes is never held whole; a
        // table is held, for its columns' widths.
        let mut table = Vec::new();
        let mut written = 0;
        let mut emit = |document: Value| {
            let done = if !args.format.is_json() {
                table.push(document);
                Ok(())
            } else if args.format.is_lines() {
                writeln!(out, "{document}")
            } else if written == 0 {
                write!(out, "{{\"runs\":[{document}")
            } else {
                write!(out, ",{document}")
            };
            written += 1;
            done.map_err(CliError::io("writing the history"))
        };
        let window = (since_ms, until_ms);
        let found = merged(args, reader, hot, window, &mut unread, &mut emit).await?;
        if found == 0
            && let Some(job) = &args.job
            && !client
                .store()
                .is_declared(job)
                .await
                .map_err(ClientError::from)?
        {
            return Err(CliError::UnknownJob(job.clone()));
        }
        if !args.format.is_json() {
            return Ok(Some(table));
        }
        if !args.format.is_lines() {
            let end = if found == 0 { "{\"runs\":[]}" } else { "]}" };
            writeln!(out, "{end}").map_err(CliError::io("writing the history"))?;
        }
        Ok(None)
    })?;
    if let Some(runs) = table {
        write_history(args, out, runs)?;
    }
    // What could not be read was said, and what could was shown: a damaged part hides no
    // other; an archive that could not be listed or fetched fails the command.
    match unread
        .into_iter()
        .find(|error| !matches!(error, ReadError::Damaged { .. }))
    {
        Some(error) => Err(error.into()),
        None => Ok(()),
    }
}

/// The instants `--since` and `--until` stand for, ms; a span is counted back from Redis's
/// clock.
async fn window(
    client: &Client,
    args: &HistoryArgs,
) -> Result<(Option<i64>, Option<i64>), CliError> {
    if args.since.is_none() && args.until.is_none() {
        return Ok((None, None));
    }
    let now_ms = client.store().now_ms().await.map_err(ClientError::from)?;
    let read = |name: &str, text: &Option<String>| {
        text.as_deref()
            .map(|text| parse_instant(text, now_ms))
            .transpose()
            .map_err(|error| CliError::Argument(format!("--{name}: {error}")))
    };
    let (since_ms, until_ms) = (read("since", &args.since)?, read("until", &args.until)?);
    if let (Some(since_ms), Some(until_ms)) = (since_ms, until_ms)
        && since_ms > until_ms
    {
        return Err(CliError::Argument(
            "--since is after --until: no outcome is recorded between them".to_owned(),
        ));
    }
    Ok((since_ms, until_ms))
}

/// The outcome an element of `history --json` is: the same run, outcome and attempt recorded
/// in the same millisecond. An event and the record of the same outcome share all four (the
/// record's `at_ms` is its event's), while two outcomes of one run differ in one of them.
type Outcome = (String, i64, String, String);

fn outcome_of(document: &Value) -> Outcome {
    (
        text(document, "id"),
        document["at_ms"].as_i64().unwrap_or_default(),
        text(document, "outcome"),
        text(document, "attempt"),
    )
}

/// A field of a `history --json` element as the table shows it: '' for null.
fn text(document: &Value, name: &str) -> String {
    match &document[name] {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `hot`, the outcomes Redis holds newest first, and those of the archive, newest first and
/// each once, `--count` of them at most, given to `emit` as they are found: how many. What of
/// the archive could not be read is said on standard error as it is met, and kept in `unread`.
///
/// # Errors
/// What `emit` returns.
async fn merged(
    args: &HistoryArgs,
    reader: &Reader,
    hot: Vec<Value>,
    (since_ms, until_ms): (Option<i64>, Option<i64>),
    unread: &mut Vec<ReadError>,
    emit: &mut impl FnMut(Value) -> Result<(), CliError>,
) -> Result<usize, CliError> {
    let in_redis: HashSet<Outcome> = hot.iter().map(outcome_of).collect();
    let mut hot = hot.into_iter().peekable();
    let mut cold = reader.newest_first(since_ms, until_ms);
    let mut next_cold = None;
    let mut found = 0;
    while found < args.count {
        if next_cold.is_none() {
            next_cold = loop {
                match cold.next().await {
                    None => break None,
                    Some(Err(error)) => {
                        let _ = writeln!(
                            std::io::stderr(),
                            "redcron history: {}",
                            printable(&error.to_string())
                        );
                        unread.push(error);
                    }
                    Some(Ok(record)) if shown(args, &record) => {
                        let document = archived_document(&record);
                        if !in_redis.contains(&outcome_of(&document)) {
                            break Some(document);
                        }
                    }
                    Some(Ok(_)) => {}
                }
            };
        }
        let newer_hot = match (hot.peek(), &next_cold) {
            (Some(hot), Some(cold)) => hot["at_ms"].as_i64() >= cold["at_ms"].as_i64(),
            (hot, _) => hot.is_some(),
        };
        let next = if newer_hot {
            hot.next()
        } else {
            next_cold.take()
        };
        match next {
            Some(document) => emit(document)?,
            None => break,
        }
        found += 1;
    }
    Ok(found)
}

/// Whether the archive's `record` is one the filters keep: `JOB`, `--failed`, `--replica`.
fn shown(args: &HistoryArgs, record: &Document) -> bool {
    let failed = matches!(
        record.outcome.as_deref().and_then(RunState::parse),
        Some(RunState::Dead | RunState::Retrying)
    );
    args.job
        .as_ref()
        .is_none_or(|job| record.job.as_ref() == Some(job))
        && (!args.failed || failed)
        && args
            .replica
            .as_ref()
            .is_none_or(|replica| record.replica.as_ref() == Some(replica))
}

/// An archive's record as an element of `history --json`: the fields they share (the record's
/// output is its own attempt's, whichever attempt it was).
fn archived_document(record: &Document) -> Value {
    json!({
        "id": record.id,
        "job": record.job,
        "replica": record.replica,
        "outcome": record.outcome,
        "at": record.at,
        "at_ms": record.at_ms,
        "fire": record.fire,
        "fire_ms": record.fire_ms,
        "started": record.started,
        "started_ms": record.started_ms,
        "duration_ms": record.duration_ms,
        "attempt": record.attempt,
        "exit_code": record.exit_code,
        "reason": record.reason,
        "error": record.error,
        "output": record.output,
    })
}

/// Writes the outcomes: a table, or `--json` / `--jsonl`.
fn write_history(
    args: &HistoryArgs,
    out: &mut impl Write,
    runs: Vec<Value>,
) -> Result<(), CliError> {
    if args.format.is_json() {
        return args
            .format
            .write(out, "runs", runs)
            .map_err(CliError::io("writing the history"));
    }
    if runs.is_empty() {
        return writeln!(out, "no runs recorded").map_err(CliError::io("writing the history"));
    }
    let table: Vec<Vec<String>> = runs
        .iter()
        .map(|run| {
            let text = |name: &str| text(run, name);
            let failed = matches!(
                RunState::parse(&text("outcome")),
                Some(RunState::Dead | RunState::Retrying)
            );
            let tail = if failed {
                text("output")
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .chars()
                    .take(60)
                    .collect()
            } else {
                String::new()
            };
            vec![
                text("id"),
                text("job"),
                text("replica"),
                text("outcome"),
                text("fire"),
                text("started"),
                run["duration_ms"]
                    .as_i64()
                    .map_or_else(String::new, duration),
                text("attempt"),
                text("exit_code"),
                text("reason"),
                tail,
            ]
        })
        .collect();
    write_table(
        out,
        &[
            "RUN", "JOB", "REPLICA", "OUTCOME", "FIRE", "STARTED", "DURATION", "ATTEMPT", "EXIT",
            "REASON", "OUTPUT",
        ],
        &table,
    )
    .map_err(CliError::io("writing the history"))
}

/// One outcome of `history`: the event, and the run's hash for what the event does not carry.
struct HistoryEntry<'a> {
    event: &'a Event,
    run: &'a HashMap<String, String>,
    run_id: String,
    /// Whether the event is of the attempt the run's hash describes (its last; a skip is of
    /// none): only then does the hash stand in for what the event lacks (an earlier attempt's
    /// output is gone).
    latest: bool,
}

impl<'a> HistoryEntry<'a> {
    fn new(event: &'a Event, run: &'a HashMap<String, String>) -> Self {
        let run_id = event.fields.get("run").cloned().unwrap_or_default();
        let same_attempt = match (event.fields.get("attempt"), run.get("attempt")) {
            (Some(event_attempt), Some(run_attempt)) => event_attempt == run_attempt,
            _ => true,
        };
        // A re-driven run counts its attempts from 1 again: attempt 2 of the drive before
        // `dead retry` is not attempt 2 of this one, and the hash holds only this drive's.
        let redriven_after = run
            .get("redriven_ms")
            .and_then(|ms| ms.parse::<i64>().ok())
            .is_some_and(|redriven_ms| event.at_ms < redriven_ms);
        // A lost or interrupted attempt uses no attempt number: the one run after it has the
        // same, and another start.
        let other_start = match (event.fields.get("started_ms"), run.get("started_ms")) {
            (Some(event_start), Some(run_start)) => event_start != run_start,
            _ => false,
        };
        // A skipped fire ran no attempt: the start, replica and exit of one handed back before
        // it was skipped are not the skip's.
        let skipped =
            event.fields.get("state").map(String::as_str) == Some(RunState::Skipped.as_str());
        let latest = same_attempt && !redriven_after && !other_start && !skipped;
        Self {
            event,
            run,
            run_id,
            latest,
        }
    }

    /// A field of the event, else of the run when the event is of its last attempt (the job,
    /// always); `None` when neither has it or it is empty.
    fn field(&self, name: &str) -> Option<&'a str> {
        let from_run = || {
            (self.latest || name == "job")
                .then(|| self.run.get(name))
                .flatten()
        };
        self.event
            .fields
            .get(name)
            .or_else(from_run)
            .map(String::as_str)
            .filter(|value| !value.is_empty())
    }

    /// The replica that ran the attempt, from its worker (`<replica id>/<slot>`), else the one
    /// a replica's run of an every-replica fire was meant for; `None` for a fire of a job that
    /// runs once, skipped before any replica claimed it.
    fn replica(&self) -> Option<&'a str> {
        let run_id = self.event.fields.get("run")?;
        crate::store::replica_of(self.field("job")?, run_id, self.field("worker"))
    }

    fn number(&self, name: &str) -> Option<i64> {
        self.field(name)?.parse().ok()
    }

    /// A cron fire's time, from its id (`<job>@<fire ms>`, or `<job>@<fire ms>:<replica>` for
    /// a replica's run of an every-replica fire); `None` for an ad-hoc run.
    fn fire_ms(&self) -> Option<i64> {
        crate::store::keys::fire_of_run(self.field("job")?, &self.run_id)
    }

    /// When the event's attempt started: as the event recorded it, else (events written before
    /// they carried it) the run's start, for its last attempt only.
    fn started_ms(&self) -> Option<i64> {
        self.number("started_ms")
    }

    /// How long the attempt ran: as the event recorded it, else from the run's start and
    /// finish (never for a skipped fire, which did not run: it is not `latest`).
    fn duration_ms(&self) -> Option<i64> {
        if let Some(ms) = self.number("duration_ms") {
            return Some(ms);
        }
        if !self.latest {
            return None;
        }
        Some(self.run.get("finished_ms")?.parse::<i64>().ok()? - self.started_ms()?)
    }
}
