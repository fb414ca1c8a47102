//! `redcron hold` and `redcron release`: hold a namespace still while its slot moves to another
//! Redis Cluster master.

use std::io::Write;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::{CliError, RedisArgs, block_on};
use crate::client::Client;

#[derive(Debug, Args)]
pub(super) struct HoldArgs {
    /// How long the hold lasts unless released first: a hold that outlives its reason would
    /// stop every fire of the namespace.
    #[arg(long = "for", value_name = "DURATION", default_value = "5m", value_parser = hold_duration)]
    duration: Duration,
    /// Print the namespace's state as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(Debug, Args)]
pub(super) struct ReleaseArgs {
    /// Print the namespace's state as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    redis: RedisArgs,
}

/// Reads `--for`: at least a second, at most a day.
fn hold_duration(text: &str) -> Result<Duration, String> {
    let duration = humantime::parse_duration(text).map_err(|error| format!("{text:?}: {error}"))?;
    if !(Duration::from_secs(1)..=Duration::from_secs(24 * 3600)).contains(&duration) {
        return Err(format!("{text:?} is not between 1s and 24h"));
    }
    Ok(duration)
}

pub(super) fn hold(args: &HoldArgs, out: &mut impl Write) -> Result<(), CliError> {
    let was_held = block_on(async {
        let client = Client::from_store(args.redis.connect().await?).acting_as(super::ACTOR);
        client.hold(args.duration).await.map_err(CliError::from)
    })?;
    if args.json {
        let document = json!({
            "namespace": args.redis.namespace,
            "held": true,
            "was_held": was_held,
            "for_ms": u64::try_from(args.duration.as_millis()).unwrap_or(u64::MAX),
        });
        return writeln!(out, "{document}").map_err(CliError::io("done, but writing the result"));
    }
    let again = if was_held { " (held again)" } else { "" };
    writeln!(
        out,
        "namespace \"{}\" held for {}{again}: nothing is planned, claimed or recorded until \
         `redcron release` or the hold ends; runs already going on keep their leases; fires due \
         meanwhile run late, and those later than the misfire threshold (60s by default) as \
         their job's misfire policy decides",
        args.redis.namespace,
        humantime::format_duration(args.duration)
    )
    .map_err(CliError::io("done, but writing the result"))
}

pub(super) fn release(args: &ReleaseArgs, out: &mut impl Write) -> Result<(), CliError> {
    let was_held = block_on(async {
        let client = Client::from_store(args.redis.connect().await?).acting_as(super::ACTOR);
        client.release().await.map_err(CliError::from)
    })?;
    if args.json {
        let document = json!({
            "namespace": args.redis.namespace,
            "held": false,
            "was_held": was_held,
        });
        return writeln!(out, "{document}").map_err(CliError::io("done, but writing the result"));
    }
    let message = if was_held { "released" } else { "was not held" };
    writeln!(out, "namespace \"{}\" {message}", args.redis.namespace)
        .map_err(CliError::io("done, but writing the result"))
}
