//! `redcron runs show`: everything about one run.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use clap::Subcommand;
use serde_json::{Map, Value};

use super::times::{duration, rfc3339};
use super::{CliError, RedisArgs, block_on, typed_fields};

#[derive(Debug, Subcommand)]
pub(super) enum RunsCommand {
    /// Every field of one run.
    Show(ShowArgs),
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
const RUN_INSTANTS: [&str; 7] = [
    "created_ms",
    "due_ms",
    "fire_ms",
    "ready_ms",
    "started_ms",
    "finished_ms",
    "redriven_ms",
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
    let RunsCommand::Show(ShowArgs { id, json, redis }) = command;
    let fields = block_on(async { Ok(redis.connect().await?.run_fields(id).await?) })?;
    write_run(out, id, fields, *json)
}

/// A run's record as the JSON object `runs show`, `dead show` and `dead list` print: its id,
/// every field typed, the promised ones `null` when missing, and each instant also as RFC 3339.
pub(super) fn run_document(id: &str, fields: HashMap<String, String>) -> Map<String, Value> {
    let mut document = typed_fields(fields);
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
        let shown: BTreeMap<String, String> = fields
            .into_iter()
            .map(|(name, value)| readable(name, value))
            .collect();
        let width = shown.keys().map(String::len).max().unwrap_or(0).max(2);
        writeln!(out, "{:width$}  {id}", "id").and_then(|()| {
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
