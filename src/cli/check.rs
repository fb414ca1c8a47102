//! `redcron check`: validate the schedule directory and show what it declares.

use std::io::Write;
use std::path::PathBuf;

use chrono::Utc;
use clap::Args;

use super::{CliError, default_schedules, write_jobs};
use crate::schedule::load_schedules;

/// How many upcoming fires are shown per job.
const SHOWN_FIRES: usize = 3;

#[derive(Debug, Args)]
pub(super) struct CheckArgs {
    /// The directory of schedule files (*.toml).
    #[arg(long, value_name = "DIR", default_value_os_t = default_schedules())]
    schedules: PathBuf,
}

/// Loads the directory and writes its jobs with their next fires, then its workflows' steps
/// and its queue fallbacks.
pub(super) fn execute(args: &CheckArgs, out: &mut impl Write) -> Result<(), CliError> {
    let schedules = load_schedules(&args.schedules)?;
    let written = (|| -> std::io::Result<()> {
        write_jobs(out, &schedules.jobs, Utc::now(), SHOWN_FIRES)?;
        for job in &schedules.jobs {
            if let Some(workflow) = &job.workflow {
                writeln!(
                    out,
                    "workflow {}: {} (on_failure = {})",
                    job.name,
                    workflow.describe(),
                    workflow.on_failure.as_str()
                )?;
            }
        }
        for queue in &schedules.queues {
            writeln!(
                out,
                "queue {} falls back to {} after {} without a live replica serving it",
                queue.queue,
                queue.fallback,
                humantime::format_duration(queue.after)
            )?;
        }
        let workflows = schedules
            .jobs
            .iter()
            .filter(|job| job.workflow.is_some())
            .count();
        let jobs = schedules.jobs.len() - workflows;
        let plural = |count: usize| if count == 1 { "" } else { "s" };
        let declared = if workflows == 0 {
            format!("{jobs} job{}", plural(jobs))
        } else {
            format!(
                "{jobs} job{} and {workflows} workflow{}",
                plural(jobs),
                plural(workflows)
            )
        };
        writeln!(out, "{declared} in {}: all valid", args.schedules.display())
    })();
    written.map_err(CliError::io("writing the jobs"))
}
