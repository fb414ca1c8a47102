//! `redcron runs show`: everything about one run.

use std::collections::BTreeMap;
use std::io::Write;

use clap::Subcommand;

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
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) redis: RedisArgs,
}

pub(super) fn execute(command: &RunsCommand, out: &mut impl Write) -> Result<(), CliError> {
    let RunsCommand::Show(ShowArgs { id, json, redis }) = command;
    let fields = block_on(async { Ok(redis.connect().await?.run_fields(id).await?) })?;
    write_run(out, id, fields.into_iter().collect(), *json)
}

/// Writes a run's fields, sorted by name: `name  value` lines, or one JSON object with numbers
/// as numbers.
pub(super) fn write_run(
    out: &mut impl Write,
    id: &str,
    fields: BTreeMap<String, String>,
    json: bool,
) -> Result<(), CliError> {
    if fields.is_empty() {
        return Err(CliError::Argument(format!(
            "unknown run \"{id}\" (or its record expired after the retention period)"
        )));
    }
    let written = if json {
        let mut object = typed_fields(fields);
        object.insert("id".to_owned(), id.into());
        writeln!(out, "{}", serde_json::Value::Object(object))
    } else {
        let width = fields.keys().map(String::len).max().unwrap_or(0);
        writeln!(out, "{:width$}  {id}", "id").and_then(|()| {
            fields
                .iter()
                .try_for_each(|(name, value)| writeln!(out, "{name:width$}  {value}"))
        })
    };
    written.map_err(CliError::io("writing the run"))
}
