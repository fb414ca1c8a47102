//! `redcron runs`: the runs that are running or due, and everything about one run.
//!
//! Its rooms: list.rs `runs list`, show.rs `runs show` (from Redis, or from the archive once
//! Redis no longer holds the run), follow.rs `runs show --follow`, record.rs a run's record as
//! JSON and as text, which `dead` and the web console show too.

mod follow;
mod list;
mod record;
mod show;

pub(super) use record::write_run;
pub(crate) use record::{readable, run_document, shown_run_document};
pub(crate) use show::output_so_far;

use std::io::Write;

use clap::{Subcommand, ValueEnum};

use super::output::ListFormat;
use super::{CliError, RedisArgs, block_on, list_count};
use crate::archive::ArchiveUrl;
use crate::client::Client;

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
    #[arg(long, value_name = "URL", value_parser = super::run::ArchiveUrlParser, conflicts_with = "follow")]
    archive: Option<ArchiveUrl>,
}

pub(super) fn execute(command: &RunsCommand, out: &mut impl Write) -> Result<(), CliError> {
    match command {
        RunsCommand::List(args) => list::list(args, out),
        RunsCommand::Show(RunShowArgs {
            show: ShowArgs { id, redis, .. },
            follow: true,
            ..
        }) => block_on(async {
            let client = Client::from_store(redis.connect().await?);
            follow::follow(&client, id, out).await
        }),
        RunsCommand::Show(RunShowArgs {
            show: ShowArgs { id, json, redis },
            follow: false,
            archive,
        }) => show::show(id, *json, redis, archive.as_ref(), out),
    }
}
