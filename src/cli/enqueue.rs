//! `redcron trigger` and `redcron enqueue`: ad-hoc runs of declared jobs.

use std::io::{Read, Write};
use std::time::Duration;

use chrono::DateTime;
use clap::{Args, ValueEnum};
use serde_json::json;

use super::times::{elapsed, relative, rfc3339};
use super::{CliError, RedisArgs, block_on};
use crate::client::{Client, ClientError, Fired, RunRequest, Submitted, check_payload};
use crate::schedule::Priority;
use crate::store::TriggerTargets;

/// The longest `--in`, in milliseconds: a run due further out is more likely a typo (`--in 30d`
/// for `30m`) than a plan, and a plan that far ahead belongs in a schedule file. Due times are
/// compared in milliseconds, so this is the bound and [`LONGEST_DELAY`] is derived from it.
const LONGEST_DELAY_MS: i64 = 366 * 86_400 * 1000;

/// [`LONGEST_DELAY_MS`] as a duration, to hold `--in` and `--unique-for` to.
const LONGEST_DELAY: Duration = Duration::from_millis(LONGEST_DELAY_MS.unsigned_abs());

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
    /// The declared job.
    #[arg(add = super::complete::job_names())]
    job: String,
    /// For a job that runs on every replica (on = "every"): the fire's run on this replica
    /// alone, instead of one on each live replica that runs the job.
    #[arg(long, value_name = "REPLICA_ID")]
    replica: Option<String>,
    #[command(flatten)]
    run: RunArgs,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("when").required(true))]
#[command(group = clap::ArgGroup::new("uniqueness"))]
pub(super) struct EnqueueArgs {
    /// The declared job.
    #[arg(required_unless_present = "from", add = super::complete::job_names())]
    job: Option<String>,
    #[command(flatten)]
    run: RunArgs,
    /// Many runs, one JSON object a line, from FILE or standard input (-): {"job": ...} with
    /// any of "payload", "in", "at", "allow_past", "priority", "unique", "unique_key",
    /// "unique_for", as the flags say; the other flags but --json are refused with it.
    #[arg(long, value_name = "FILE|-", group = "when", conflicts_with_all = ["job", "payload", "priority", "unique", "unique_key", "allow_past"])]
    from: Option<String>,
    /// Due after this long (30s, 15m, 2h; at most a year); 0s for now.
    #[arg(long = "in", value_name = "DURATION", group = "when", value_parser = delay)]
    delay: Option<Duration>,
    /// Due at this RFC 3339 time (at most a year ahead).
    #[arg(long, value_name = "RFC3339", group = "when")]
    at: Option<String>,
    /// Accept an --at time in the past (on Redis's clock): the run is due at once.
    #[arg(long, requires = "at")]
    allow_past: bool,
    /// Refuse a second run of the job with the same payload within --unique-for.
    #[arg(long, group = "uniqueness")]
    unique: bool,
    /// Refuse a second run of the job with the same key within --unique-for.
    #[arg(long, value_name = "KEY", group = "uniqueness", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    unique_key: Option<String>,
    /// How long uniqueness holds (with --unique or --unique-key).
    #[arg(long, value_name = "DURATION", default_value = "1h", requires = "uniqueness", value_parser = uniqueness_window)]
    unique_for: Duration,
    #[command(flatten)]
    redis: RedisArgs,
}

pub(super) fn trigger(args: &TriggerArgs, out: &mut impl Write) -> Result<(), CliError> {
    let payload = read_payload(args.run.payload.as_deref())?;
    // A trigger of a job that runs on every replica is a fire now, one run per target, as its
    // fires are: in each replica's own route and slots.
    let (fired, live, picked) = block_on(async {
        let client = Client::from_store(args.redis.connect().await?).acting_as(super::ACTOR);
        // Read before the fire is made, to choose its targets; a job whose fires run once does
        // not need it, so its trigger does not fail for it.
        let overview = client.overview().await;
        let live = overview
            .as_ref()
            .ok()
            .map(|overview| live_declarers(overview, &args.job));
        let picked = overview
            .as_ref()
            .ok()
            .and_then(|overview| overview.definitions.get(&args.job))
            .map(|definition| where_of(definition));
        let targets = match &args.replica {
            Some(replica) => TriggerTargets::Only(replica),
            None => TriggerTargets::Each(live.as_deref().unwrap_or_default()),
        };
        let fired = client
            .trigger_fire(
                &args.job,
                payload.as_deref(),
                args.run.priority.map(Into::into),
                targets,
            )
            .await;
        match (fired, overview) {
            // No target among none read: the reason is the read that failed.
            (Err(ClientError::NoTarget(_)), Err(error)) => Err(CliError::from(error)),
            (fired, _) => Ok((fired?, live, picked)),
        }
    })?;
    if let Some(fired) = fired {
        return print_fired(args, &fired, live.as_deref(), out);
    }
    if let Some(replica) = &args.replica {
        let runs_on = match picked.as_deref() {
            Some([]) | None => "any replica that declares it".to_owned(),
            Some(labels) => format!(
                "one of the replicas its where picks ({})",
                labels.join(", ")
            ),
        };
        return Err(CliError::Argument(format!(
            "--replica {replica}: job \"{}\" runs once per fire, on {runs_on}, not on every \
             replica (on = \"every\"): trigger it without --replica",
            args.job
        )));
    }
    submit(
        &args.redis,
        &args.job,
        &args.run,
        payload,
        |request| request.trigger(),
        out,
    )
}

pub(super) fn enqueue(args: &EnqueueArgs, out: &mut impl Write) -> Result<(), CliError> {
    let (Some(job), None) = (&args.job, &args.from) else {
        let from = args.from.as_deref().unwrap_or("-");
        return super::enqueue_lines::enqueue_lines(&args.redis, from, args.run.json, out);
    };
    let payload = read_payload(args.run.payload.as_deref())?;
    let at_ms = match &args.at {
        Some(at) => Some(
            DateTime::parse_from_rfc3339(at)
                .map_err(|error| {
                    CliError::Argument(format!(
                        "--at \"{at}\" is not an RFC 3339 time like 2026-03-08T00:00:00Z: {error}"
                    ))
                })?
                .timestamp_millis(),
        ),
        None => None,
    };
    if let Some(at_ms) = at_ms {
        within_horizon(at_ms, args.at.as_deref().unwrap_or_default())
            .map_err(|error| CliError::Argument(format!("--at {error}")))?;
    }
    submit(
        &args.redis,
        job,
        &args.run,
        payload,
        |mut request| {
            // Due now, or after --in: counted on Redis's clock, not this machine's.
            if let Some(delay) = args.delay {
                request = request.after(delay);
            }
            if let Some(at_ms) = at_ms {
                request = request.at(at_ms, args.allow_past);
            }
            if args.unique {
                request = request.unique();
            }
            if let Some(key) = &args.unique_key {
                request = request.unique_key(key.clone());
            }
            if args.unique || args.unique_key.is_some() {
                request = request.unique_for(args.unique_for);
            }
            request
        },
        out,
    )
}

/// Reads `--unique-for`, held to [`within_uniqueness`].
pub(super) fn uniqueness_window(text: &str) -> Result<Duration, String> {
    let window = humantime::parse_duration(text).map_err(|error| format!("{text:?}: {error}"))?;
    within_uniqueness(window, &format!("{text:?}"))?;
    Ok(window)
}

/// Holds a uniqueness window (`--unique-for`, the API's `unique_for_ms`, written `shown` in
/// the refusal) to some time, and to at most [`LONGEST_DELAY`]: a window of no time would make
/// the run unique in name only, and one past what Redis's expiry holds would fail in Redis.
pub(crate) fn within_uniqueness(window: Duration, shown: &str) -> Result<(), String> {
    if window.is_zero() {
        return Err(format!("{shown}: uniqueness must hold for some time"));
    }
    if window > LONGEST_DELAY {
        return Err(format!(
            "{shown}: uniqueness may hold for {} at most",
            elapsed(LONGEST_DELAY_MS)
        ));
    }
    Ok(())
}

/// Reads `--in`: a duration of at most [`LONGEST_DELAY`].
pub(super) fn delay(text: &str) -> Result<Duration, String> {
    let delay = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    within_delay(delay, &format!("{text:?}"))?;
    Ok(delay)
}

/// Holds a delay (`--in`, the API's `delay_ms`, written `shown` in the refusal) to
/// [`LONGEST_DELAY`].
pub(crate) fn within_delay(delay: Duration, shown: &str) -> Result<(), String> {
    if delay > LONGEST_DELAY {
        return Err(format!("{shown} is {}", too_far()));
    }
    Ok(())
}

/// Holds `--at` (and a line's `"at"`, the API's `at_ms`) to the bound of `--in`, on this
/// machine's clock: a few seconds of skew with Redis's do not matter against a year; and to
/// no time before 1970, which no run was ever due at, even with --allow-past.
pub(crate) fn within_horizon(at_ms: i64, text: &str) -> Result<(), String> {
    if at_ms.saturating_sub(chrono::Utc::now().timestamp_millis()) > LONGEST_DELAY_MS {
        return Err(format!("\"{text}\" is {}", too_far()));
    }
    if at_ms < 0 {
        return Err(format!(
            "\"{text}\" is before 1970: a run is due at 1970-01-01T00:00:00Z or later"
        ));
    }
    Ok(())
}

/// Why a run due past [`LONGEST_DELAY`] is refused, whether given by `--in` or `--at`.
fn too_far() -> String {
    format!(
        "more than {} ahead: enqueue a run at most that far ahead, or give the job a schedule",
        elapsed(LONGEST_DELAY_MS)
    )
}

/// Creates the run through [`Client`], with what `settings` adds to the request, and prints it.
/// A due time in the past is refused unless --allow-past: a mistyped date must not run a job at
/// once.
/// An ad-hoc run made, as `trigger --json` and `enqueue --json` and the web API show it.
pub(crate) fn submitted_document(
    job: &str,
    run_id: &str,
    due_ms: i64,
    paused: bool,
    declared_by: Option<&[String]>,
) -> serde_json::Value {
    json!({
        "id": run_id,
        "runs": [{"id": run_id, "replica": null}],
        "job": job,
        "due": rfc3339(due_ms),
        "due_ms": due_ms,
        "paused": paused,
        "declared_by": declared_by,
    })
}

/// The runs of a triggered fire of an every-replica job, as `trigger --json` and the web API
/// show them: the shape of [`submitted_document`], with no single id.
pub(crate) fn fired_document(
    job: &str,
    fired: &Fired,
    live: Option<&[String]>,
) -> serde_json::Value {
    let runs: Vec<_> = fired
        .runs
        .iter()
        .map(|(id, replica)| json!({"id": id, "replica": replica}))
        .collect();
    json!({
        "id": null,
        "runs": runs,
        "job": job,
        "due": rfc3339(fired.fire_ms),
        "due_ms": fired.fire_ms,
        "paused": fired.paused,
        "declared_by": live,
    })
}

fn submit(
    redis: &RedisArgs,
    job: &str,
    run: &RunArgs,
    payload: Option<String>,
    settings: impl FnOnce(RunRequest<'_>) -> RunRequest<'_>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let job = job.to_owned();
    let (submitted, declared_by) = block_on(async {
        let client = Client::from_store(redis.connect().await?).acting_as(super::ACTOR);
        let mut request = client.enqueue(job.clone());
        if let Some(text) = payload {
            request = request.payload_text(text).map_err(CliError::from)?;
        }
        if let Some(priority) = run.priority {
            request = request.priority(priority.into());
        }
        let submitted = settings(request).send().await.map_err(CliError::from)?;
        // Read after the run exists: a failure here must not hide its id, so it reads as
        // "unknown" rather than as an error.
        let declared_by = client
            .overview()
            .await
            .ok()
            .map(|overview| live_declarers(&overview, &job));
        Ok::<_, CliError>((submitted, declared_by))
    })?;
    let Submitted {
        run_id,
        due_ms,
        now_ms,
        paused,
    } = submitted;
    let written = if run.json {
        let document = submitted_document(&job, &run_id, due_ms, paused, declared_by.as_deref());
        writeln!(out, "{document}")
    } else {
        // Relative to Redis's clock, which decides when the run is due.
        let due = rfc3339(due_ms);
        writeln!(out, "{run_id} due {due} ({})", relative(now_ms, due_ms))
    };
    // The run exists whatever happens to standard output: the error must not hide its id.
    written.map_err(CliError::unreported(format!(
        "run {run_id} was created, but writing its id"
    )))?;
    if declared_by.as_ref().is_some_and(Vec::is_empty) {
        eprintln!(
            "redcron: no live replica declares job \"{job}\": the run waits until one that \
             declares it runs (see `redcron status`), and goes to the dead letters as \
             `undeclared` if none does within 5 minutes"
        );
    }
    if paused {
        eprintln!(
            "redcron: job \"{job}\" is paused: this run is skipped unless it is resumed \
             (redcron resume {job}) before the run is due"
        );
    }
    Ok(())
}

/// Prints the runs of a triggered fire of an every-replica job, and what delays them.
fn print_fired(
    args: &TriggerArgs,
    fired: &Fired,
    live: Option<&[String]>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let job = &args.job;
    let due = rfc3339(fired.fire_ms);
    let written = if args.run.json {
        writeln!(out, "{}", fired_document(job, fired, live))
    } else {
        fired.runs.iter().try_for_each(|(id, replica)| {
            writeln!(out, "{id} due {due} (now) on replica {replica}")
        })
    };
    let ids: Vec<&str> = fired.runs.iter().map(|(id, _)| id.as_str()).collect();
    written.map_err(CliError::unreported(format!(
        "runs {} were created, but writing their ids",
        ids.join(", ")
    )))?;
    if let (Some(replica), Some(live)) = (&args.replica, live)
        && !live.contains(replica)
    {
        eprintln!(
            "redcron: replica \"{replica}\" is not live: its run waits in its own route until it \
             is back, and is skipped (replica-down) if it is not back within its \
             --misfire-threshold"
        );
    }
    if fired.paused {
        eprintln!(
            "redcron: job \"{job}\" is paused: these runs are skipped unless it is resumed \
             (redcron resume {job}) before they are claimed"
        );
    }
    Ok(())
}

/// The labels of a published definition's `where` (none for a job every replica may run, or a
/// definition that cannot be read).
fn where_of(definition: &str) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Where {
        #[serde(default, rename = "where")]
        selector: Vec<String>,
    }
    serde_json::from_str::<Where>(definition).map_or_else(|_| Vec::new(), |read| read.selector)
}

/// The live replicas that declare `job`, sorted: those that may claim its runs now.
pub(crate) fn live_declarers(overview: &crate::store::Overview, job: &str) -> Vec<String> {
    let mut replicas: Vec<String> = overview
        .replicas
        .iter()
        .filter(|replica| {
            super::status::replica_state(overview, replica, false) == "alive"
                && replica
                    .jobs
                    .as_ref()
                    .is_some_and(|jobs| jobs.contains_key(job))
        })
        .map(|replica| replica.id.clone())
        .collect();
    replicas.sort();
    replicas
}

/// The payload as given (`JSON`, `@FILE` or `-`), checked as the client checks it, before
/// Redis is reached.
pub(super) fn read_payload(argument: Option<&str>) -> Result<Option<String>, CliError> {
    let Some(argument) = argument else {
        return Ok(None);
    };
    // One byte past the limit is enough to refuse: an endless input (`@/dev/zero`, `yes |`) is
    // never read whole.
    let limit = u64::try_from(crate::payload::MAX_PAYLOAD_BYTES).unwrap_or(u64::MAX) + 1;
    let read_limited = |input: &mut dyn Read, from: &str| {
        let mut text = String::new();
        input
            .take(limit)
            .read_to_string(&mut text)
            .map_err(CliError::io(format!("reading the payload from {from}")))?;
        // Read up to one byte past the limit: its size is unknown, not that byte count.
        if text.len() > crate::payload::MAX_PAYLOAD_BYTES {
            return Err(CliError::Argument(format!(
                "the payload in {from} is more than 1 MiB ({} bytes), the most a run may carry",
                crate::payload::MAX_PAYLOAD_BYTES
            )));
        }
        Ok::<_, CliError>(text)
    };
    let text = match argument.strip_prefix('@') {
        Some(path) => {
            let mut file = std::fs::File::open(path)
                .map_err(CliError::io(format!("reading the payload from {path}")))?;
            read_limited(&mut file, path)?
        }
        None if argument == "-" => read_limited(&mut std::io::stdin(), "standard input")?,
        None => argument.to_owned(),
    };
    check_payload(&text).map_err(CliError::from)?;
    Ok(Some(text))
}
