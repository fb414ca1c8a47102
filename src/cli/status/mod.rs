//! `redcron status` and `redcron jobs`: what the replicas are doing, read from Redis alone.
//!
//! Its rooms: read.rs what `status` reads, document.rs the JSON it makes of it, text.rs the
//! tables people read, warnings.rs the lines above them that need someone's eye; published.rs a
//! published job and how the replicas declare it, replicas.rs what their heartbeats say of them;
//! jobs.rs `redcron jobs`, and the rooms both commands and the console share.

mod archive;
mod definitions;
mod document;
mod drift;
mod jobs;
mod published;
mod read;
mod recent;
mod refused;
mod replicas;
mod text;
mod undeclared;
mod warnings;

pub(crate) use definitions::Definitions;
pub(crate) use drift::{Drift, drifting_jobs};
pub(super) use jobs::{JobsArgs, jobs};
pub(crate) use jobs::{
    ShownJob, first_after, named_job_document, names_holding, published_names, shown_job,
};
pub(crate) use read::{StatusRead, StatusUnread};
pub(crate) use recent::RecentEvents;
pub(super) use replicas::replica_state;
pub(crate) use replicas::silent_too_long;

use std::collections::{HashMap, HashSet};
use std::io::Write;

use clap::Args;

use super::{CliError, RedisArgs, block_on};
use crate::client::Client;
use crate::store::{Overview, WritesRefused};
use warnings::failing_scripts_text;

#[derive(Debug, Args)]
pub(super) struct StatusArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    redis: RedisArgs,
}

/// The active runs' ids by job, in the order the overview lists them: found in one pass, so
/// that a status of every job looks each one's up rather than walking every active run per job.
fn running_by_job(overview: &Overview) -> HashMap<&str, Vec<&str>> {
    let mut running: HashMap<&str, Vec<&str>> = HashMap::new();
    for (run_id, job, _) in &overview.running {
        running.entry(job).or_default().push(run_id);
    }
    running
}

/// The paused jobs as a set, looked up once per job of a page or status of every job.
pub(crate) fn paused_jobs(overview: &Overview) -> HashSet<&str> {
    overview.paused.iter().map(String::as_str).collect()
}

/// What `status` and `jobs` say instead of an empty table: most often the namespace is not the
/// one the replicas use.
fn no_jobs(out: &mut impl Write, namespace: &str) -> std::io::Result<()> {
    writeln!(
        out,
        "no replica has published jobs in namespace \"{namespace}\" (is --namespace the one \
         the replicas run with?)"
    )
}

pub(super) fn status(args: &StatusArgs, out: &mut impl Write) -> Result<(), CliError> {
    let read = block_on(async {
        let client = Client::from_store(args.redis.connect().await?);
        Ok(StatusRead::read(&client).await)
    })?;
    let read = match read {
        Ok(read) => read,
        Err(StatusUnread { error, failing }) => {
            let error = CliError::from(error);
            return Err(match failing_scripts_text(&failing) {
                Some(text) => CliError::ScriptsFailing(format!("{error}\n{text}")),
                None => error,
            });
        }
    };
    if args.json {
        let status = read.document();
        writeln!(out, "{status}").map_err(CliError::io("writing the status"))?;
        let failing_text = failing_scripts_text(&read.failing);
        return exit_status(read.writes_refused.as_ref(), failing_text);
    }
    let failing_text = failing_scripts_text(&read.failing);
    text::write(&read, failing_text.as_deref(), &args.redis.namespace, out)
        .map_err(CliError::io("writing the status"))?;
    exit_status(read.writes_refused.as_ref(), failing_text)
}

/// The status's exit, once it is shown: a Redis that refuses writes, or replicas that report
/// scripts failing on a damaged key, fail the command all the same, so that a check running
/// `status` does not pass.
fn exit_status(
    writes_refused: Option<&WritesRefused>,
    failing_text: Option<String>,
) -> Result<(), CliError> {
    if let Some(refused) = writes_refused {
        return Err(CliError::WritesRefused(refused::error(refused)));
    }
    failing_text.map_or(Ok(()), |text| Err(CliError::ScriptsFailing(text)))
}

#[cfg(test)]
mod tests;
