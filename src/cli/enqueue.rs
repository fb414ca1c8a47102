//! `redcron trigger` and `redcron enqueue`: ad-hoc runs of declared jobs.

use std::io::{Read, Write};
use std::time::Duration;

use chrono::DateTime;
use clap::{Args, ValueEnum};
use serde_json::json;

use super::times::{elapsed, relative, rfc3339};
use super::{CliError, RedisArgs, block_on};
use crate::handler::payload_problem;
use crate::schedule::Priority;
use crate::store::{Enqueue, Enqueued, key_fingerprint, payload_fingerprint};

/// The longest `--in`: a run due further out is more likely a typo (`--in 30d` for `30m`) than
/// a plan, and a plan that far ahead belongs in a schedule file.
const LONGEST_DELAY: Duration = Duration::from_secs(366 * 86_400);

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PriorityArg {
    High,
    Normal,
    Low,
}

impl From<PriorityArg> for Priority {
    fn from(priority: PriorityArg) -> Self {
        match priority {
            PriorityArg::High => Priority::High,
            PriorityArg::Normal => Priority::Normal,
            PriorityArg::Low => Priority::Low,
        }
    }
}

/// What a run carries, shared by both commands.
#[derive(Debug, Args)]
struct RunArgs {
    /// The declared job.
    job: String,
    /// JSON for the command's standard input, @FILE to read it from a file, or - to read it
    /// from standard input (at most 1 MiB).
    #[arg(long, value_name = "JSON|@FILE|-")]
    payload: Option<String>,
    /// Instead of the job's own priority.
    #[arg(long, value_enum)]
    priority: Option<PriorityArg>,
    /// Print the new run as one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub(super) struct TriggerArgs {
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("when").required(true))]
#[command(group = clap::ArgGroup::new("uniqueness"))]
pub(super) struct EnqueueArgs {
    #[command(flatten)]
    run: RunArgs,
    /// Due after this long (30s, 15m, 2h; at most a year); 0s for now.
    #[arg(long = "in", value_name = "DURATION", group = "when", value_parser = delay)]
    delay: Option<Duration>,
    /// Due at this RFC 3339 time.
    #[arg(long, value_name = "RFC3339", group = "when")]
    at: Option<String>,
    /// Accept an --at time in the past (on Redis's clock): the run is due at once.
    #[arg(long, requires = "at")]
    allow_past: bool,
    /// Refuse a second run of the job with the same payload within --unique-for.
    #[arg(long, group = "uniqueness")]
    unique: bool,
    /// Refuse a second run of the job with the same key within --unique-for.
    #[arg(long, value_name = "KEY", group = "uniqueness")]
    unique_key: Option<String>,
    /// How long uniqueness holds.
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = humantime::parse_duration)]
    unique_for: Duration,
    #[command(flatten)]
    redis: RedisArgs,
}

pub(super) fn trigger(args: &TriggerArgs, out: &mut impl Write) -> Result<(), CliError> {
    let payload = read_payload(args.run.payload.as_deref())?;
    let request = Enqueue {
        job: args.run.job.clone(),
        due_ms: None,
        payload: payload.map(|(text, _)| text),
        priority: args.run.priority.map(Priority::from),
        unique: None,
    };
    submit(&args.redis, request, None, true, args.run.json, out)
}

pub(super) fn enqueue(args: &EnqueueArgs, out: &mut impl Write) -> Result<(), CliError> {
    let payload = read_payload(args.run.payload.as_deref())?;
    let unique = if args.unique {
        let value = payload
            .as_ref()
            .map_or(serde_json::Value::Null, |(_, value)| value.clone());
        Some((payload_fingerprint(&args.run.job, &value), args.unique_for))
    } else {
        args.unique_key
            .as_ref()
            .map(|key| (key_fingerprint(&args.run.job, key), args.unique_for))
    };
    let due_ms = match &args.at {
        Some(at) => Some(
            DateTime::parse_from_rfc3339(at)
                .map_err(|error| {
                    CliError::Argument(format!(
                        "--at \"{at}\" is not an RFC 3339 time like 2026-03-08T00:00:00Z: {error}"
                    ))
                })?
                .timestamp_millis(),
        ),
        // Due now, or after --in: counted on Redis's clock, not this machine's.
        None => None,
    };
    let request = Enqueue {
        job: args.run.job.clone(),
        due_ms,
        payload: payload.map(|(text, _)| text),
        priority: args.run.priority.map(Priority::from),
        unique,
    };
    submit(
        &args.redis,
        request,
        args.delay,
        args.at.is_none() || args.allow_past,
        args.run.json,
        out,
    )
}

/// Reads `--in`: a duration of at most [`LONGEST_DELAY`].
fn delay(text: &str) -> Result<Duration, String> {
    let delay = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if delay > LONGEST_DELAY {
        let longest_ms = i64::try_from(LONGEST_DELAY.as_millis()).unwrap_or(i64::MAX);
        return Err(format!(
            "{text:?} is more than {}: enqueue a run at most that far ahead, or give the job a \
             schedule",
            elapsed(longest_ms)
        ));
    }
    Ok(delay)
}

/// Enqueues `request`, due `delay` from now on Redis's clock when given. A due time in the
/// past is refused unless `past_ok`: a mistyped date must not run a job at once.
fn submit(
    redis: &RedisArgs,
    mut request: Enqueue,
    delay: Option<Duration>,
    past_ok: bool,
    json: bool,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let (enqueued, now_ms) = block_on(async {
        let store = redis.connect().await?;
        let now_ms = store.now_ms().await?;
        if let Some(delay) = delay {
            let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2);
            request.due_ms = Some(now_ms.saturating_add(delay_ms));
        }
        if let Some(due_ms) = request.due_ms.filter(|_| !past_ok)
            && due_ms < now_ms
        {
            return Err(CliError::Argument(format!(
                "--at {} is in the past (Redis's clock reads {}): pass --allow-past to run the \
                 job at once",
                rfc3339(due_ms),
                rfc3339(now_ms)
            )));
        }
        Ok((store.enqueue_run(&request).await?, now_ms))
    })?;
    match enqueued {
        Enqueued::Scheduled {
            run_id,
            due_ms,
            paused,
        } => {
            let written = if json {
                let run = json!({
                    "id": run_id,
                    "job": request.job,
                    "due": rfc3339(due_ms),
                    "due_ms": due_ms,
                    "paused": paused,
                });
                writeln!(out, "{run}")
            } else {
                // Relative to Redis's clock, which decides when the run is due.
                let due = rfc3339(due_ms);
                writeln!(out, "{run_id} due {due} ({})", relative(now_ms, due_ms))
            };
            written.map_err(CliError::io("writing the run id"))?;
            if paused {
                eprintln!(
                    "redcron: job \"{}\" is paused: this run is skipped unless it is resumed \
                     (redcron resume {}) before the run is due",
                    request.job, request.job
                );
            }
            Ok(())
        }
        Enqueued::UnknownJob => Err(CliError::UnknownJob(request.job)),
        Enqueued::Duplicate { holder } => Err(CliError::Argument(format!(
            "refused: run {holder} of job \"{}\" already holds this uniqueness key",
            request.job
        ))),
    }
}

/// The payload as given (`JSON` or `@FILE`), checked to be JSON of at most 1 MiB.
fn read_payload(argument: Option<&str>) -> Result<Option<(String, serde_json::Value)>, CliError> {
    let Some(argument) = argument else {
        return Ok(None);
    };
    let text = match argument.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .map_err(CliError::io(format!("reading the payload from {path}")))?,
        None if argument == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .map_err(CliError::io("reading the payload from standard input"))?;
            text
        }
        None => argument.to_owned(),
    };
    if let Some(problem) = payload_problem(&text) {
        return Err(CliError::Argument(problem));
    }
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|error| CliError::Argument(format!("the payload is not valid JSON: {error}")))?;
    Ok(Some((text, value)))
}
