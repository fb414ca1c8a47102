//! `runs list`: the runs holding a lease, then those ready or waiting, then those due, as a
//! table or as the documents `--json` prints.

use std::collections::HashMap;
use std::io::Write;

use serde_json::Value;

use super::record::run_document;
use super::{ListArgs, ListedState};
use crate::cli::times::{relative, rfc3339};
use crate::cli::{CliError, block_on, write_table};
use crate::client::{Client, RUNS_SCANNED, RunsQuery};

/// Lists the runs `args` asks for, as `runs list` does.
pub(super) fn list(args: &ListArgs, out: &mut impl Write) -> Result<(), CliError> {
    let shown = |state| args.state.is_none_or(|asked| asked == state);
    let query = RunsQuery {
        active: shown(ListedState::Active),
        ready: shown(ListedState::Ready),
        due: shown(ListedState::Due),
        job: args.job.clone(),
        replica: args.replica.clone(),
        count: args.count,
        ..RunsQuery::default()
    };
    let page = block_on(async {
        let client = Client::from_store(args.redis.connect().await?);
        client.runs_page(&query).await.map_err(CliError::from)
    })?;
    // A filter reads a bounded number of entries, so that a sparse one never reads every run:
    // a page it cut short says so, or "no run" would be taken for the answer.
    if page.scan_limited {
        eprintln!(
            "redcron: the list stopped after reading {RUNS_SCANNED} runs without filling the \
             page: more that match may follow (--state looks through one state at a time)"
        );
    }
    let (listed, now_ms) = (page.runs, page.now_ms);
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
