//! `redcron runs`: the runs that are running or due, and everything about one run.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use clap::{Subcommand, ValueEnum};
use serde_json::{Map, Value};

use super::output::{ListFormat, printable, printable_cell};
use super::times::{duration, relative, rfc3339};
use super::{CliError, RedisArgs, block_on, list_count, typed_fields, write_table};
use crate::client::{Client, RunsQuery};

#[derive(Debug, Subcommand)]
pub(super) enum RunsCommand {
    /// Runs holding a lease, then runs ready or waiting, then runs due (scheduled or
    /// retrying), soonest first.
    List(ListArgs),
    /// Every field of one run.
    Show(ShowArgs),
}

/// Which runs to list.
#[derive(Debug, clap::Args)]
pub(super) struct ListArgs {
    /// Only runs in this state.
    #[arg(long, value_enum)]
    state: Option<ListedState>,
    /// Only this job's runs.
    #[arg(long, value_name = "JOB", add = super::complete::job_names())]
    job: Option<String>,
    /// Only the runs whose latest attempt this replica owns or owned, or, for every-replica
    /// jobs, that wait for it (its id, as `status` lists it).
    #[arg(long, value_name = "ID")]
    replica: Option<String>,
    /// How many at most (at least 1).
    #[arg(short = 'n', long = "count", default_value_t = 100, value_parser = list_count)]
    count: usize,
    #[command(flatten)]
    format: ListFormat,
    #[command(flatten)]
    redis: RedisArgs,
}

/// The runs `runs list` can show, by where they are on their way to a worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ListedState {
    /// Holding a lease: running, or claimed to start within moments.
    Active,
    /// Ready or waiting: for a worker, a slot of their job, or a replica that serves their
    /// queue or declares their job.
    Ready,
    /// Waiting for their due time: planned fires, delayed runs, retries.
    Due,
}

/// One run to show.
#[derive(Debug, clap::Args)]
pub(super) struct ShowArgs {
    /// The run id.
    pub(super) id: String,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) redis: RedisArgs,
}

/// The instants of a run's record, ms since the epoch: `--json` adds each as RFC 3339 under its
/// name without `_ms`, and text shows only that. Its other `_ms` fields are spans.
const RUN_INSTANTS: [&str; 8] = [
    "created_ms",
    "due_ms",
    "fire_ms",
    "ready_ms",
    "started_ms",
    "finished_ms",
    "redriven_ms",
    "missed_after_ms",
];

/// The fields of a run that `--json` always carries, `null` when the run has none (yet): what
/// docs/cli.md promises. The record's other fields are shown too, typed the same way.
const RUN_FIELDS: [&str; 13] = [
    "job",
    "kind",
    "state",
    "attempt",
    "max_attempts",
    "queue",
    "priority",
    "worker",
    "exit_code",
    "reason",
    "error",
    "output",
    "payload",
];

pub(super) fn execute(command: &RunsCommand, out: &mut impl Write) -> Result<(), CliError> {
    match command {
        RunsCommand::List(args) => list(args, out),
        RunsCommand::Show(ShowArgs { id, json, redis }) => {
            let (fields, due) = block_on(async {
                let client = Client::from_store(redis.connect().await?);
                let fields = client.run(id).await.map_err(CliError::from)?;
                let due = if fields.is_empty() {
                    Some(client.due_at(id).await.map_err(CliError::from)?)
                } else {
                    None
                };
                Ok::<_, CliError>((fields, due))
            })?;
            if let Some((Some(due_ms), now_ms)) = due {
                let job = crate::store::parse_cron_run_id(id).map_or(id.as_str(), |(job, _)| job);
                return Err(CliError::Argument(format!(
                    "run \"{id}\" has no record yet: it is a planned fire of job \"{job}\", due \
                     {} ({}), and gets one when it comes due",
                    rfc3339(due_ms),
                    relative(now_ms, due_ms)
                )));
            }
            write_run(out, id, fields, *json)
        }
    }
}

fn list(args: &ListArgs, out: &mut impl Write) -> Result<(), CliError> {
    let shown = |state| args.state.is_none_or(|asked| asked == state);
    let query = RunsQuery {
        active: shown(ListedState::Active),
        ready: shown(ListedState::Ready),
        due: shown(ListedState::Due),
        job: args.job.clone(),
        replica: args.replica.clone(),
        count: args.count,
    };
    let (listed, now_ms) = block_on(async {
        let client = Client::from_store(args.redis.connect().await?);
        client.runs(&query).await.map_err(CliError::from)
    })?;
    // A run that is not active has no worker: the one its record names ran an earlier attempt,
    // or claimed it and handed it back.
    let runs: Vec<(String, HashMap<String, String>)> = listed
        .into_iter()
        .map(|mut run| {
            if run.fields.get("state").map(String::as_str) != Some("active") {
                run.fields.remove("worker");
            }
            (run.run_id, run.fields)
        })
        .collect();
    if args.format.is_json() {
        let runs = runs
            .into_iter()
            .map(|(run_id, fields)| Value::Object(run_document(&run_id, fields)))
            .collect();
        return args
            .format
            .write(out, "runs", runs)
            .map_err(CliError::io("writing the runs"));
    }
    if runs.is_empty() {
        return writeln!(out, "no run is active, ready or due")
            .map_err(CliError::io("writing the runs"));
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(run_id, fields)| {
            let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
            let instant = |name: &str| {
                fields
                    .get(name)
                    .and_then(|ms| ms.parse::<i64>().ok())
                    .map_or_else(String::new, |ms| {
                        format!("{} ({})", rfc3339(ms), relative(now_ms, ms))
                    })
            };
            // An entry that is no run says so where a run shows its state.
            let state = fields
                .get("damaged")
                .map_or_else(|| field("state"), |damage| format!("damaged: {damage}"));
            vec![
                run_id.clone(),
                field("job"),
                state,
                field("queue"),
                instant("due_ms"),
                instant("started_ms"),
                field("attempt"),
                field("worker"),
            ]
        })
        .collect();
    write_table(
        out,
        &[
            "RUN", "JOB", "STATE", "QUEUE", "DUE", "STARTED", "ATTEMPT", "WORKER",
        ],
        &rows,
    )
    .map_err(CliError::io("writing the runs"))
}

/// A run's record as the JSON object `runs show`, `dead show` and `dead list` print: its id,
/// every field typed, the promised ones `null` when missing, and each instant also as RFC 3339.
pub(crate) fn run_document(id: &str, mut fields: HashMap<String, String>) -> Map<String, Value> {
    let notices = notices_of(&mut fields);
    let mut document = typed_fields(fields);
    document.extend(notices);
    document.insert("id".to_owned(), id.into());
    for name in RUN_FIELDS.iter().chain(&RUN_INSTANTS) {
        document.entry(*name).or_insert(Value::Null);
    }
    for name in RUN_INSTANTS {
        let at = document[name].as_i64().map(rfc3339);
        document.insert(name.trim_end_matches("_ms").to_owned(), at.into());
    }
    document
}

/// The run's notice settings as lists, out of the forms the scripts keep them in (`notify` as
/// JSON text, `notify_on` as `,dead,late,`): what a person or a script reads. Absent when the
/// job has none.
fn notices_of(fields: &mut HashMap<String, String>) -> Vec<(String, Value)> {
    let mut lists = Vec::new();
    if let Some(targets) = fields.remove("notify") {
        let targets = serde_json::from_str::<Value>(&targets).unwrap_or(Value::String(targets));
        lists.push(("notify".to_owned(), targets));
    }
    if let Some(events) = fields.remove("notify_on") {
        let events: Vec<Value> = events
            .split(',')
            .filter(|event| !event.is_empty())
            .map(Value::from)
            .collect();
        lists.push(("notify_on".to_owned(), Value::Array(events)));
    }
    lists
}

/// Writes a run's fields, sorted by name: `name  value` lines with instants in RFC 3339 and
/// spans in seconds or minutes, or one JSON object (see [`run_document`]).
pub(super) fn write_run(
    out: &mut impl Write,
    id: &str,
    fields: HashMap<String, String>,
    json: bool,
) -> Result<(), CliError> {
    if fields.is_empty() {
        return Err(CliError::Argument(format!(
            "unknown run \"{id}\" (or its record expired after the retention period)"
        )));
    }
    let written = if json {
        writeln!(out, "{}", Value::Object(run_document(id, fields)))
    } else {
        let mut fields = fields;
        let notices = notices_of(&mut fields);
        let mut shown: BTreeMap<String, String> = fields
            .into_iter()
            .map(|(name, value)| readable(name, value))
            .collect();
        for (name, list) in notices {
            let items: Vec<String> = match list {
                Value::Array(items) => items
                    .iter()
                    .map(|item| {
                        item.as_str()
                            .map_or_else(|| item.to_string(), str::to_owned)
                    })
                    .collect(),
                other => vec![other.to_string()],
            };
            shown.insert(name, items.join(" "));
        }
        // What the run printed, its payload and its error come from outside: shown, not obeyed.
        let shown: Vec<(String, String)> = shown
            .into_iter()
            .map(|(name, value)| {
                (
                    printable_cell(&name).into_owned(),
                    printable(&value).into_owned(),
                )
            })
            .collect();
        let width = shown
            .iter()
            .map(|(name, _)| name.chars().count())
            .max()
            .unwrap_or(0)
            .max(2);
        writeln!(out, "{:width$}  {}", "id", printable_cell(id)).and_then(|()| {
            shown
                .iter()
                .try_for_each(|(name, value)| writeln!(out, "{name:width$}  {value}"))
        })
    };
    written.map_err(CliError::io("writing the run"))
}

/// A field as people read it: `due_ms 1767225600000` is `due 2026-01-01T00:00:00+00:00`, and
/// `backoff_ms 30000` is `backoff 30 s`. A value that is not a number stays as it is, under its
/// own name, so that damaged data is shown rather than hidden.
fn readable(name: String, value: String) -> (String, String) {
    let Some(stem) = name.strip_suffix("_ms") else {
        return (name, value);
    };
    let Ok(ms) = value.parse::<i64>() else {
        return (name, value);
    };
    let shown = if RUN_INSTANTS.contains(&name.as_str()) {
        rfc3339(ms)
    } else {
        duration(ms)
    };
    (stem.to_owned(), shown)
}

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn instants_read_as_times_and_spans_as_durations() {
        let field = |name: &str, value: &str| readable(name.to_owned(), value.to_owned());
        for instant in ["due_ms", "missed_after_ms"] {
            assert_eq!(
                field(instant, "1767225600000").1,
                "2026-01-01T00:00:00+00:00",
                "{instant}"
            );
        }
        assert_eq!(
            field("backoff_ms", "30000"),
            ("backoff".to_owned(), "30 s".to_owned())
        );
        assert_eq!(
            field("due_ms", "soon"),
            ("due_ms".to_owned(), "soon".to_owned())
        );
    }
}
