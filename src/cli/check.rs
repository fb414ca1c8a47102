//! `redcron check`: validate the schedule directory and show what it declares.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::Utc;
use clap::Args;

use super::{CliError, default_schedules, write_jobs};
use crate::schedule::load_dir;

/// How many upcoming fires are shown per job.
const SHOWN_FIRES: usize = 3;

#[derive(Debug, Args)]
pub(super) struct CheckArgs {
    /// The directory of schedule files (*.toml).
    #[arg(long, value_name = "DIR", default_value_os_t = default_schedules())]
    schedules: PathBuf,
}

pub(super) fn execute(args: &CheckArgs, out: &mut impl Write) -> Result<(), CliError> {
    let count = show_jobs(&args.schedules, out)?;
    writeln!(
        out,
        "{count} job{} in {}: all valid",
        if count == 1 { "" } else { "s" },
        args.schedules.display()
    )
    .map_err(CliError::io("writing the jobs"))
}

/// Loads `dir` and writes its jobs with their next fires; returns how many there are.
pub(super) fn show_jobs(dir: &Path, out: &mut impl Write) -> Result<usize, CliError> {
    let jobs = load_dir(dir)?;
    write_jobs(out, &jobs, Utc::now(), SHOWN_FIRES).map_err(CliError::io("writing the jobs"))?;
    Ok(jobs.len())
}
