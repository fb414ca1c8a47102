//! `runs show`: one run's record from Redis, with its output so far while it runs, or from the
//! archive once Redis no longer holds it; and what is said of a run with no record.

use std::collections::HashMap;
use std::io::Write;

use serde_json::Value;

use super::follow::say;
use super::record::{shown_run_document, write_run};
use crate::archive::ArchiveUrl;
use crate::archive::read::{ArchivedRun, ReadError, Reader};
use crate::cli::output::printable;
use crate::cli::times::{relative, rfc3339};
use crate::cli::{CliError, RedisArgs, block_on};
use crate::client::{Client, ClientError};
use crate::store::{OutputSoFar, RunState};

/// Shows run `id` as `runs show` does, looking in `archive` (or the namespace's) when Redis no
/// longer holds it: as text, or one JSON object with `json`.
pub(super) fn show(
    id: &str,
    json: bool,
    redis: &RedisArgs,
    archive: Option<&ArchiveUrl>,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let shown = block_on(async {
        let client = Client::from_store(redis.connect().await?);
        let fields = client.run(id).await.map_err(CliError::from)?;
        if fields.is_empty() {
            if let Some(reader) = Reader::of_namespace(client.store(), archive).await? {
                reader.check_owner(&redis.namespace).await?;
                if let Some(run) = reader.run(id, say_damage).await? {
                    let part = reader.object_url(&run.part);
                    return Ok(Shown::Archived(run, part));
                }
            }
            return Err(no_record(&client, id).await);
        }
        let so_far = output_so_far(&client, id, &fields).await?;
        Ok::<_, CliError>(Shown::Redis(fields, so_far))
    })?;
    match shown {
        Shown::Redis(fields, so_far) => write_run(out, id, fields, so_far.as_ref(), json),
        Shown::Archived(run, part) => write_archived(out, id, &run, &part, json),
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
pub(super) async fn no_record(client: &Client, id: &str) -> CliError {
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

pub(super) fn unknown_run(id: &str) -> CliError {
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
