//! The command line: one file per subcommand group, each a clap `Args` struct and an `execute`.

mod bench;
mod check;
mod complete;
pub mod config;
mod connect;
pub(crate) mod dead;
mod docs;
pub(crate) mod enqueue;
mod enqueue_lines;
mod error;
pub(crate) mod history;
mod hold;
mod import;
mod next;
mod output;
pub(crate) mod pause;
mod redact;
mod reload;
mod run;
pub(crate) mod runs;
mod schedule_page;
mod service;
pub(crate) mod status;
mod table;
pub(crate) mod times;
mod watch_path;
#[cfg(feature = "web")]
mod web;
pub(crate) mod workflow;

use crate::logs::LogFormat;
use std::io;
use std::path::PathBuf;

use chrono_tz::Tz;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

use connect::RedisArgs;
pub use error::CliError;
use output::typed_fields;
use table::{write_jobs, write_table};

/// redcron: a distributed replacement for the system crontab, and a task queue, on Redis.
#[derive(Debug, Parser)]
#[command(name = "redcron", version, about, max_term_width = 100, arg = config::arg())]
pub struct Cli {
    /// Log lines as text or as JSON objects (RUST_LOG sets the level).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// Parses the process's command line, the options it does not give taking their defaults
    /// from the configuration files.
    ///
    /// # Errors
    /// A configuration file that cannot be read or says something wrong. A bad command line
    /// prints its usage and exits, as clap does.
    pub fn from_env() -> Result<Self, CliError> {
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let settings = config::Settings::load(&args)?;
        let matches = settings.apply(Self::command()).get_matches_from(args);
        Self::from_arg_matches(&matches).map_err(|error| error.exit())
    }

    /// The log format asked for.
    pub fn log_format(&self) -> LogFormat {
        self.log_format
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a replica on the jobs in the schedule directory.
    Run(run::RunArgs),
    /// Validate the schedule directory and show every job's next fires.
    Check(check::CheckArgs),
    /// Print the next fires of a cron expression or a declared job, one RFC 3339 time per line.
    Next(next::NextArgs),
    /// Convert a crontab into a schedule file.
    ImportCrontab(import::ImportArgs),
    /// Measure enqueue and processing throughput and delayed-run lateness on a Redis.
    Bench(bench::BenchArgs),
    /// Leader, replicas, queues, counts and every job's state.
    Status(status::StatusArgs),
    /// The declared jobs as the leader published them, with drift between replicas.
    Jobs(status::JobsArgs),
    /// Recent runs from the events stream.
    History(history::HistoryArgs),
    /// Run a declared job now.
    Trigger(enqueue::TriggerArgs),
    /// Run a declared job once, later or now, optionally unique.
    Enqueue(enqueue::EnqueueArgs),
    /// Skip a job's fires (recorded as skipped) until it is resumed.
    Pause(pause::PauseArgs),
    /// Let a paused job's fires run again.
    Resume(pause::PauseArgs),
    /// Hold the namespace still (no script writes) while its Redis Cluster slot moves.
    Hold(hold::HoldArgs),
    /// End a hold.
    Release(hold::ReleaseArgs),
    /// Inspect runs.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// List, inspect, re-drive or delete dead runs.
    #[command(subcommand)]
    Dead(dead::DeadCommand),
    /// Start a declared workflow, and see how its instances stand.
    #[command(subcommand)]
    Workflow(workflow::WorkflowCommand),
    /// Serve the web console and its HTTP API.
    #[cfg(feature = "web")]
    Web(web::WebArgs),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(docs::CompletionsArgs),
    /// Print the man page, or write every page into a directory.
    Man(docs::ManArgs),
}

/// Reads how many entries a list shows: at least 1, since a list of none would say nothing and
/// a limit of 0 reads in Redis as "no limit".
fn list_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(count @ 1..) => Ok(count),
        _ => Err(format!("{text:?} is not a count of at least 1")),
    }
}

/// Who the command line's actions (pause, resume, trigger, enqueue, dead retry) are recorded
/// as, in the events stream and on the runs they make.
const ACTOR: &str = "cli";

/// Runs `future` on a runtime of its own: the commands are synchronous, the store is not.
fn block_on<T>(
    future: impl std::future::Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::io("starting the runtime"))?
        .block_on(future)
}

/// Runs the command the user asked for.
///
/// # Errors
/// A [`CliError`] to print to standard error; its [`CliError::exit_code`] is the process's.
pub fn execute(cli: Cli) -> Result<(), CliError> {
    let stdout = &mut io::stdout().lock();
    match cli.command {
        Command::Run(args) => run::execute(&args),
        Command::Check(args) => check::execute(&args, stdout),
        Command::Next(args) => next::execute(&args, stdout),
        Command::ImportCrontab(args) => import::execute(&args, stdout),
        Command::Bench(args) => bench::execute(&args, stdout),
        Command::Status(args) => status::status(&args, stdout),
        Command::Jobs(args) => status::jobs(&args, stdout),
        Command::History(args) => history::history(&args, stdout),
        Command::Trigger(args) => enqueue::trigger(&args, stdout),
        Command::Enqueue(args) => enqueue::enqueue(&args, stdout),
        Command::Pause(args) => pause::execute(&args, true, stdout),
        Command::Resume(args) => pause::execute(&args, false, stdout),
        Command::Hold(args) => hold::hold(&args, stdout),
        Command::Release(args) => hold::release(&args, stdout),
        Command::Runs(command) => runs::execute(&command, stdout),
        Command::Dead(command) => dead::execute(&command, stdout),
        Command::Workflow(command) => workflow::execute(&command, stdout),
        #[cfg(feature = "web")]
        Command::Web(args) => web::execute(&args, stdout),
        Command::Completions(args) => docs::completions(&args, stdout),
        Command::Man(args) => docs::man(&args, stdout),
    }
}

/// Where `--schedules` points by default: `schedules/` in the working directory.
fn default_schedules() -> PathBuf {
    PathBuf::from("schedules")
}

fn parse_zone(name: &str) -> Result<Tz, CliError> {
    crate::schedule::parse_zone(name).map_err(CliError::Argument)
}
