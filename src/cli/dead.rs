//! `redcron dead`: the dead letters.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use clap::Subcommand;
use serde_json::json;

use super::output::ListFormat;
use super::runs::{ShowArgs, run_document, write_run};
use super::times::rfc3339;
use super::{CliError, RedisArgs, block_on, list_count, write_table};
use crate::client::{Client, DeadRetried};

#[derive(Debug, Subcommand)]
pub(super) enum DeadCommand {
    /// Dead runs, newest first.
    List {
        /// How many at most (at least 1).
        #[arg(short = 'n', long = "count", default_value_t = 100, value_parser = list_count)]
        count: usize,
        #[command(flatten)]
        format: ListFormat,
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Every field of one dead run.
    Show(ShowArgs),
    /// Make dead runs due again now, their attempts reset.
    #[command(group = clap::ArgGroup::new("which").required(true))]
    Retry {
        /// The run id.
        #[arg(group = "which")]
        id: Option<String>,
        /// Every dead run (of --job, if given).
        #[arg(long, group = "which")]
        all: bool,
        /// With --all: only this job's runs.
        #[arg(long, value_name = "JOB", requires = "all", add = super::complete::job_names())]
        job: Option<String>,
        /// Print what was retried and what stays dead as one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        redis: RedisArgs,
    },
    /// Delete dead runs for good.
    Purge {
        /// Only runs dead for longer than this (30m, 7d).
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        older_than: Option<Duration>,
        /// Print how many were deleted as one JSON object instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        redis: RedisArgs,
    },
}

pub(super) fn execute(command: &DeadCommand, out: &mut impl Write) -> Result<(), CliError> {
    match command {
        DeadCommand::List {
            count,
            format,
            redis,
        } => list(redis, *count, *format, out),
        DeadCommand::Show(ShowArgs { id, json, redis }) => {
            let fields = block_on(async {
                let client = Client::from_store(redis.connect().await?);
                client.dead_run(id).await.map_err(CliError::from)
            })?;
            write_run(out, id, fields, None, *json)
        }
        DeadCommand::Retry {
            id,
            job,
            json,
            redis,
            ..
        } => {
            let outcome = block_on(async {
                let client = Client::from_store(redis.connect().await?).acting_as(super::ACTOR);
                let outcome = match id {
                    Some(id) => client.retry_dead(id).await.map(|()| DeadRetried {
                        retried: vec![id.clone()],
                        ..DeadRetried::default()
                    }),
                    None => client.retry_dead_runs(job.as_deref()).await,
                };
                outcome.map_err(CliError::from)
            })?;
            if *json {
                writeln!(out, "{}", retried_document(&outcome))
                    .map_err(CliError::io("done, but writing the result"))?;
            } else if outcome.retried.is_empty()
                && outcome.left_paused.is_empty()
                && outcome.left_unknown.is_empty()
                && outcome.damaged.is_empty()
            {
                writeln!(out, "no dead run to retry")
                    .map_err(CliError::io("done, but writing the result"))?;
            }
            for run_id in outcome.retried.iter().filter(|_| !*json) {
                writeln!(out, "{run_id} due again")
                    .map_err(CliError::io("done, but writing the result"))?;
            }
            for (run_id, job) in &outcome.left_paused {
                eprintln!(
                    "redcron: {run_id} stays dead: job \"{job}\" is paused (redcron resume {job}, \
                     then retry it)"
                );
            }
            for (run_id, job) in &outcome.left_unknown {
                eprintln!(
                    "redcron: {run_id} stays dead: job \"{job}\" is unknown to the namespace \
                     (start a replica that declares it, then retry it)"
                );
            }
            for (entry, damage) in &outcome.damaged {
                eprintln!(
                    "redcron: {entry} stays dead: it is damaged ({damage}) and cannot be retried \
                     (redcron dead purge deletes it)"
                );
            }
            Ok(())
        }
        DeadCommand::Purge {
            older_than,
            json,
            redis,
        } => {
            let purged = block_on(async {
                let client = Client::from_store(redis.connect().await?).acting_as(super::ACTOR);
                client.purge_dead(*older_than).await.map_err(CliError::from)
            })?;
            if *json {
                return writeln!(out, "{}", json!({ "purged": purged }))
                    .map_err(CliError::io("done, but writing the result"));
            }
            writeln!(
                out,
                "{purged} dead run{} deleted",
                if purged == 1 { "" } else { "s" }
            )
            .map_err(CliError::io("done, but writing the result"))
        }
    }
}

/// A dead run as `dead list --json` and the web API show it: its record as [`run_document`]
/// shapes it, with when it died.
pub(crate) fn dead_document(
    run_id: &str,
    died_ms: i64,
    fields: HashMap<String, String>,
) -> serde_json::Value {
    let mut object = run_document(run_id, fields);
    object.insert("died".to_owned(), rfc3339(died_ms).into());
    object.insert("died_ms".to_owned(), died_ms.into());
    serde_json::Value::Object(object)
}

/// What a retry did, as `dead retry --json` and the web API show it.
pub(crate) fn retried_document(outcome: &DeadRetried) -> serde_json::Value {
    let pairs = |runs: &[(String, String)], name: &str| -> Vec<serde_json::Value> {
        runs.iter()
            .map(|(run_id, value)| json!({"id": run_id, name: value}))
            .collect()
    };
    json!({
        "retried": outcome.retried,
        "left_paused": pairs(&outcome.left_paused, "job"),
        "left_unknown": pairs(&outcome.left_unknown, "job"),
        "damaged": pairs(&outcome.damaged, "damage"),
    })
}

fn list(
    redis: &RedisArgs,
    count: usize,
    format: ListFormat,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let runs: Vec<(String, i64, HashMap<String, String>)> = block_on(async {
        let client = Client::from_store(redis.connect().await?);
        client.dead_runs(count).await.map_err(CliError::from)
    })?
    .into_iter()
    .map(|run| (run.run_id, run.died_ms, run.fields))
    .collect();
    if format.is_json() {
        let runs: Vec<serde_json::Value> = runs
            .into_iter()
            .map(|(run_id, died_ms, fields)| dead_document(&run_id, died_ms, fields))
            .collect();
        return format
            .write(out, "runs", runs)
            .map_err(CliError::io("writing the dead runs"));
    }
    let field = |fields: &std::collections::HashMap<String, String>, name: &str| {
        fields.get(name).cloned().unwrap_or_default()
    };
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|(run_id, died_ms, fields)| {
            // An entry that is no dead run says so where a run says why it died.
            let (reason, error) = match fields.get("damaged") {
                Some(damage) => ("damaged".to_owned(), damage.clone()),
                None => (field(fields, "reason"), field(fields, "error")),
            };
            vec![
                run_id.clone(),
                field(fields, "job"),
                rfc3339(*died_ms),
                field(fields, "attempt"),
                reason,
                error,
            ]
        })
        .collect();
    write_table(
        out,
        &["RUN", "JOB", "DIED", "ATTEMPTS", "REASON", "ERROR"],
        &rows,
    )
    .map_err(CliError::io("writing the dead runs"))
}
