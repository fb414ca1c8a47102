//! `redcron check`: validate the schedule directory and show what it declares.

use std::io::Write;
use std::path::PathBuf;

use chrono::Utc;
use chrono_tz::Tz;
use clap::Args;

use super::times::{machine_zone, on_utc_clock};
use super::{CliError, default_schedules, write_jobs};
use crate::schedule::{Job, load_schedule_dir, placement};

/// How many upcoming fires are shown per job.
const SHOWN_FIRES: usize = 3;

#[derive(Debug, Args)]
pub(super) struct CheckArgs {
    /// The directory of schedule files (*.toml, its subdirectories included).
    #[arg(long, value_name = "DIR", default_value_os_t = default_schedules())]
    schedules: PathBuf,
}

/// Loads the directory and writes its jobs with their next fires, then its workflows' steps
/// and its queue fallbacks.
pub(super) fn execute(args: &CheckArgs, out: &mut impl Write) -> Result<(), CliError> {
    let declared = load_schedule_dir(&args.schedules)?;
    let written = (|| -> std::io::Result<()> {
        write_jobs(out, &declared.jobs, Utc::now(), SHOWN_FIRES)?;
        for job in &declared.jobs {
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
        for job in &declared.jobs {
            if let Some(placement) = placement(job.on, &job.selector) {
                writeln!(out, "job {}: {placement}", job.name)?;
            }
        }
        for queue in &declared.queues {
            writeln!(
                out,
                "queue {} falls back to {} after {} without a live replica serving it",
                queue.queue,
                queue.fallback,
                humantime::format_duration(queue.after)
            )?;
        }
        let workflows = declared
            .jobs
            .iter()
            .filter(|job| job.workflow.is_some())
            .count();
        let jobs = declared.jobs.len() - workflows;
        let plural = |count: usize| if count == 1 { "" } else { "s" };
        let counted = if workflows == 0 {
            format!("{jobs} job{}", plural(jobs))
        } else {
            format!(
                "{jobs} job{} and {workflows} workflow{}",
                plural(jobs),
                plural(workflows)
            )
        };
        writeln!(out, "{counted} in {}: all valid", args.schedules.display())?;
        utc_note(out, &declared.jobs, machine_zone())
    })();
    written.map_err(CliError::io("writing the jobs"))
}

/// Says which jobs read their hours in UTC when this machine's clock is in another zone: a job
/// that names no timezone runs in UTC, where a crontab's line ran on the machine's clock, and
/// `0 3 * * *` is then not 03:00 here.
fn utc_note(out: &mut impl Write, jobs: &[Job], machine: Tz) -> std::io::Result<()> {
    if on_utc_clock(machine) {
        return Ok(());
    }
    let in_utc: Vec<&str> = jobs
        .iter()
        .filter(|job| job.schedule.is_some() && on_utc_clock(job.timezone))
        .map(|job| job.name.as_str())
        .collect();
    if in_utc.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "note: this machine's zone is {machine}, and {} job{} read{} {} hours in UTC (the zone \
         of a job that names none): {}. Set timezone = \"{machine}\" in a job, or in the \
         [defaults] of its file, to run it on this machine's clock",
        in_utc.len(),
        if in_utc.len() == 1 { "" } else { "s" },
        if in_utc.len() == 1 { "s" } else { "" },
        if in_utc.len() == 1 { "its" } else { "their" },
        in_utc.join(", ")
    )
}
