//! `redcron history`: the runs that ended lately, newest first, from the events stream.

use std::collections::HashMap;
use std::io::Write;

use clap::Args;
use serde_json::{Value, json};

use super::output::ListFormat;
use super::times::{duration, rfc3339};
use super::{CliError, RedisArgs, block_on, list_count, write_table};
use crate::client::Client;
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
    let rows: Vec<(Event, HashMap<String, String>)> = block_on(async {
        let client = Client::from_store(args.redis.connect().await?);
        client
            .history(
                args.job.as_deref(),
                args.replica.as_deref(),
                args.count,
                args.failed,
            )
            .await
            .map_err(CliError::from)
    })?
    .into_iter()
    .map(|entry| (entry.event, entry.run))
    .collect();
    if args.format.is_json() {
        // Numbers are numbers and what a run lacks is null; each instant is RFC 3339 for people
        // and `_ms` for arithmetic.
        let runs: Vec<Value> = rows
            .iter()
            .map(|(event, run)| history_document(event, run))
            .collect();
        return args
            .format
            .write(out, "runs", runs)
            .map_err(CliError::io("writing the history"));
    }
    if rows.is_empty() {
        return writeln!(out, "no runs recorded").map_err(CliError::io("writing the history"));
    }
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|(event, run)| {
            let entry = HistoryEntry::new(event, run);
            let text = |name: &str| entry.field(name).unwrap_or_default().to_owned();
            let failed = matches!(
                RunState::parse(&text("state")),
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
                entry.run_id.clone(),
                text("job"),
                entry.replica().unwrap_or_default().to_owned(),
                text("state"),
                entry.fire_ms().map_or_else(String::new, rfc3339),
                entry.started_ms().map_or_else(String::new, rfc3339),
                entry.duration_ms().map_or_else(String::new, duration),
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
