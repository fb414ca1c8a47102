//! `redcron runs`: the runs that are running or due, and everything about one run.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use serde_json::{Map, Value};

use super::output::{ListFormat, printable, printable_cell};
use super::times::{duration, relative, rfc3339};
use super::{CliError, RedisArgs, block_on, list_count, typed_fields, write_table};
use crate::archive::ArchiveUrl;
use crate::archive::read::{ArchivedRun, ReadError, Reader};
use crate::client::{Client, ClientError, RunsQuery};
use crate::store::{OutputSoFar, RunState};

#[derive(Debug, Subcommand)]
pub(super) enum RunsCommand {
    /// Runs holding a lease, then runs ready or waiting, then runs due (scheduled or
    /// retrying), soonest first.
    List(ListArgs),
    /// Every field of one run and, while it runs, its output so far.
    Show(RunShowArgs),
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

/// One run to show, or to follow as it runs.
#[derive(Debug, clap::Args)]
pub(super) struct RunShowArgs {
    #[command(flatten)]
    show: ShowArgs,
    /// Print the run's output as it grows (as `tail -f` does), waiting for the run to start if
    /// it has not, until the run ends; then say how it ended on standard error, and exit with
    /// the run's exit code (1 when it has none: killed, timed out, skipped).
    #[arg(long, conflicts_with = "json")]
    follow: bool,
    /// Where to look for a run Redis no longer holds (the namespace's `run --archive` URL);
    /// without it, the archive the namespace's replicas write to, if any.
    #[arg(long, value_name = "URL", value_parser = super::run::archive_url, conflicts_with = "follow")]
    archive: Option<ArchiveUrl>,
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
const RUN_FIELDS: [&str; 14] = [
    "job",
    "actor",
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
        RunsCommand::Show(RunShowArgs {
            show: ShowArgs { id, redis, .. },
            follow: true,
            ..
        }) => block_on(async {
            let client = Client::from_store(redis.connect().await?);
            follow(&client, id, out).await
        }),
        RunsCommand::Show(RunShowArgs {
            show: ShowArgs { id, json, redis },
            follow: false,
            archive,
        }) => {
            let shown = block_on(async {
                let client = Client::from_store(redis.connect().await?);
                let fields = client.run(id).await.map_err(CliError::from)?;
                if fields.is_empty() {
                    if let Some(reader) =
                        Reader::of_namespace(client.store(), archive.as_ref()).await?
                        && let Some(run) = reader.run(id, say_damage).await?
                    {
                        let part = reader.object_url(&run.part);
                        return Ok(Shown::Archived(run, part));
                    }
                    return Err(no_record(&client, id).await);
                }
                let so_far = output_so_far(&client, id, &fields).await?;
                Ok::<_, CliError>(Shown::Redis(fields, so_far))
            })?;
            match shown {
                Shown::Redis(fields, so_far) => write_run(out, id, fields, so_far.as_ref(), *json),
                Shown::Archived(run, part) => write_archived(out, id, &run, &part, *json),
            }
        }
    }
}

/// Where `runs show` found its run.
enum Shown {
    /// Redis holds it: its record, and its output so far while it runs.
    Redis(HashMap<String, String>, Option<OutputSoFar>),
    /// Only the archive does: its records, and the URL of the part holding its last.
    Archived(ArchivedRun, String),
}

/// Says a damaged part or line of the archive on standard error: what could be read is shown.
fn say_damage(error: ReadError) {
    say(&format!("redcron runs show: {error}"));
}

/// Writes a run found in the archive as [`write_run`] writes one of Redis, with a line (text)
/// or a field (`archived_in`, JSON) saying where it was found.
fn write_archived(
    out: &mut impl Write,
    id: &str,
    run: &ArchivedRun,
    part: &str,
    json: bool,
) -> Result<(), CliError> {
    let fields = run.fields();
    if json {
        let mut document = shown_run_document(id, fields, None);
        document.insert("archived_in".to_owned(), part.into());
        return writeln!(out, "{}", Value::Object(document))
            .map_err(CliError::io("writing the run"));
    }
    write_run(out, id, fields, None, false)?;
    writeln!(
        out,
        "from the archive: Redis no longer holds this run; its last outcome is in {}",
        printable(part)
    )
    .map_err(CliError::io("writing the run"))
}

/// The error for run `id`, which has no record: a planned fire that is not due yet, or no run.
async fn no_record(client: &Client, id: &str) -> CliError {
    match client.due_at(id).await {
        Ok((Some(due_ms), now_ms)) => {
            let job = crate::store::parse_cron_run_id(id).map_or(id, |(job, _)| job);
            CliError::Argument(format!(
                "run \"{id}\" has no record yet: it is a planned fire of job \"{job}\", due {} \
                 ({}), and gets one when it comes due",
                rfc3339(due_ms),
                relative(now_ms, due_ms)
            ))
        }
        Ok((None, _)) => unknown_run(id),
        Err(error) => error.into(),
    }
}

fn unknown_run(id: &str) -> CliError {
    CliError::Argument(format!(
        "unknown run \"{id}\" (or its record expired after the retention period)"
    ))
}

/// The output so far of run `id` whose record is `fields`: only while it runs, and only its
/// current attempt's (a retry that wrote nothing yet would show its earlier attempt's).
///
/// # Errors
/// Redis errors.
pub(crate) async fn output_so_far(
    client: &Client,
    id: &str,
    fields: &HashMap<String, String>,
) -> Result<Option<OutputSoFar>, ClientError> {
    if fields.get("state").map(String::as_str) != Some(RunState::Active.as_str()) {
        return Ok(None);
    }
    let so_far = client.live_output(id).await?;
    Ok(so_far.filter(|so_far| fields.get("attempt") == Some(&so_far.attempt.to_string())))
}

/// How often `runs show --follow` reads the run: its worker writes its output at most once a
/// second.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Prints run `id`'s output as it grows until the run ends, then how it ended on standard
/// error; fails with the run's exit code when it did not succeed. Waits for a run that has not
/// started; a retry's output follows its failed attempt's.
async fn follow(client: &Client, id: &str, out: &mut impl Write) -> Result<(), CliError> {
    // What was printed of the attempt being followed: its number and its tail as it was then.
    let mut printed: Option<(String, String)> = None;
    // The last attempt whose end was said, so that a retry's wait says it once.
    let mut ended: Option<String> = None;
    loop {
        let fields = client.run(id).await.map_err(CliError::from)?;
        if fields.is_empty() {
            return Err(no_record(client, id).await);
        }
        let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
        let attempt = field("attempt");
        let state = RunState::parse(&field("state"));
        let text = match state {
            Some(RunState::Active) => output_so_far(client, id, &fields)
                .await?
                .map(|so_far| so_far.output),
            // The record's output is the ended attempt's whole tail, which the last write may
            // not have had.
            Some(_) if ended.as_ref() != Some(&attempt) => fields.get("output").cloned(),
            _ => None,
        };
        if let Some(text) = text {
            let before = match &printed {
                Some((shown_attempt, before)) if *shown_attempt == attempt => before.as_str(),
                _ => "",
            };
            write!(out, "{}", printable(new_output(before, &text)))
                .and_then(|()| out.flush())
                .map_err(CliError::io("writing the run's output"))?;
            printed = Some((attempt.clone(), text));
        }
        match state {
            Some(state) if state.is_finished() => return outcome(id, state, &fields),
            Some(RunState::Retrying) if ended.as_ref() != Some(&attempt) => {
                let due = fields
                    .get("due_ms")
                    .and_then(|ms| ms.parse().ok())
                    .map_or_else(|| "later".to_owned(), rfc3339);
                say(&format!(
                    "run {id}: attempt {attempt} failed ({}), tried again at {due}",
                    field("error")
                ));
                ended = Some(attempt);
            }
            _ => {}
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

/// What `now`, a run's output tail, adds to `before`, its tail when it was last printed: the
/// part after their overlap. Both may have lost their beginning (marked with `…`); when they
/// do not overlap, more than a tail was written in between, and `now` is new whole, its mark
/// saying that output was skipped.
fn new_output<'a>(before: &str, now: &'a str) -> &'a str {
    let mark = crate::handler::CUT_MARK;
    let old = before.strip_prefix(mark).unwrap_or(before);
    let new = now.strip_prefix(mark).unwrap_or(now);
    (0..old.len())
        .filter(|from| old.is_char_boundary(*from))
        .find(|from| new.starts_with(&old[*from..]))
        .map_or(now, |from| &new[old.len() - from..])
}

/// How a followed run ended, said on standard error; an error with its exit code when it did
/// not succeed.
fn outcome(id: &str, state: RunState, fields: &HashMap<String, String>) -> Result<(), CliError> {
    let exit_code = fields
        .get("exit_code")
        .and_then(|code| code.parse::<i32>().ok());
    let with_code = exit_code.map_or_else(String::new, |code| format!(", exit code {code}"));
    let why = [fields.get("reason"), fields.get("error")]
        .into_iter()
        .flatten()
        .filter(|text| !text.is_empty())
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(": ");
    if state == RunState::Succeeded {
        say(&format!("run {id} succeeded{with_code}"));
        return Ok(());
    }
    Err(CliError::RunNotSucceeded {
        message: format!("run {id} ended {} ({why}{with_code})", state.as_str()),
        code: exit_code
            .and_then(|code| u8::try_from(code).ok())
            .filter(|code| *code != 0)
            .unwrap_or(1),
    })
}

/// A line on standard error, whatever became of it: what a follower says beside the output.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{}", printable(line));
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
        ..RunsQuery::default()
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
    document.insert(OUTPUT_SO_FAR.to_owned(), Value::Null);
    document
}

/// What `runs show --json` prints: [`run_document`] with the output so far of a running run.
pub(crate) fn shown_run_document(
    id: &str,
    fields: HashMap<String, String>,
    so_far: Option<&OutputSoFar>,
) -> Map<String, Value> {
    let mut document = run_document(id, fields);
    if let Some(so_far) = so_far {
        document.insert(
            OUTPUT_SO_FAR.to_owned(),
            serde_json::json!({
                "output": so_far.output,
                "written": rfc3339(so_far.written_ms),
                "written_ms": so_far.written_ms,
                "attempt": so_far.attempt,
            }),
        );
    }
    document
}

/// The field of `runs show --json` that holds a running run's output so far (null in lists and
/// for a run that does not run).
const OUTPUT_SO_FAR: &str = "output_so_far";

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
    so_far: Option<&OutputSoFar>,
    json: bool,
) -> Result<(), CliError> {
    if fields.is_empty() {
        return Err(unknown_run(id));
    }
    let written = if json {
        writeln!(
            out,
            "{}",
            Value::Object(shown_run_document(id, fields, so_far))
        )
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
        writeln!(out, "{:width$}  {}", "id", printable_cell(id))
            .and_then(|()| {
                shown
                    .iter()
                    .try_for_each(|(name, value)| writeln!(out, "{name:width$}  {value}"))
            })
            .and_then(|()| match so_far {
                Some(so_far) => {
                    let text = printable(&so_far.output);
                    let end = if text.ends_with('\n') { "" } else { "\n" };
                    write!(
                        out,
                        "output so far (written {}):\n{text}{end}",
                        rfc3339(so_far.written_ms)
                    )
                }
                None => Ok(()),
            })
    };
    written.map_err(CliError::io("writing the run"))
}

/// A field as people read it: `due_ms 1767225600000` is `due 2026-01-01T00:00:00+00:00`, and
/// `backoff_ms 30000` is `backoff 30 s`. A value that is not a number stays as it is, under its
/// own name, so that damaged data is shown rather than hidden.
pub(crate) fn readable(name: String, value: String) -> (String, String) {
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
    use super::{new_output, readable};

    #[test]
    fn a_follower_prints_what_the_tail_added_since_it_last_printed_it() {
        assert_eq!(new_output("", "a\n"), "a\n");
        assert_eq!(new_output("a\n", "a\nb\n"), "b\n");
        assert_eq!(new_output("a\nb\n", "a\nb\n"), "");
        // The tail lost its beginning in between: they overlap in what both still hold.
        assert_eq!(new_output("one\ntwo\n", "…wo\nthree\n"), "three\n");
        assert_eq!(new_output("…x\ny\n", "…y\nz\n"), "z\n");
        // More than a tail was written in between: all of it, marked as cut.
        assert_eq!(new_output("a\n", "…q\nr\n"), "…q\nr\n");
    }

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
