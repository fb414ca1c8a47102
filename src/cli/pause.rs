//! `redcron pause` and `redcron resume`.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::{CliError, RedisArgs, block_on};
use crate::client::Client;

#[derive(Debug, Args)]
pub(super) struct PauseArgs {
    /// The declared job.
    #[arg(add = super::complete::job_names())]
    job: String,
    /// Print the job's state as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    redis: RedisArgs,
}

/// A pause or resume as `pause --json` and the web API show it: what the job is now, and what it
/// was, so that a script that pauses twice can tell.
pub(crate) fn pause_document(job: &str, pause: bool, changed: bool) -> serde_json::Value {
    json!({
        "job": job,
        "paused": pause,
        "was_paused": pause != changed,
    })
}

pub(super) fn execute(args: &PauseArgs, pause: bool, out: &mut impl Write) -> Result<(), CliError> {
    let changed = block_on(async {
        // Recorded as the command line's doing: the stream names who paused a job.
        let client = Client::from_store(args.redis.connect().await?).acting_as(super::ACTOR);
        let changed = if pause {
            client.pause(&args.job).await
        } else {
            client.resume(&args.job).await
        };
        changed.map_err(CliError::from)
    })?;
    let written = if args.json {
        writeln!(out, "{}", pause_document(&args.job, pause, changed))
    } else {
        let message = match (pause, changed) {
            (true, true) => "paused: its fires are skipped until it is resumed",
            (true, false) => "was already paused",
            (false, true) => "resumed",
            (false, false) => "was not paused",
        };
        writeln!(out, "job \"{}\" {message}", args.job)
    };
    written.map_err(CliError::io("done, but writing the result"))
}
