//! `redcron run`: one replica on the schedule directory.
//!
//! The engine (leader, planner, promoter, workers) is not built yet: for now the command loads
//! and validates the schedules, as a replica does at start-up, and shows the upcoming fires.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::{CliError, check, default_schedules};

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// The directory of schedule files (*.toml).
    #[arg(long, value_name = "DIR", default_value_os_t = default_schedules())]
    schedules: PathBuf,
}

pub(super) fn execute(args: &RunArgs, out: &mut impl Write) -> Result<(), CliError> {
    check::show_jobs(&args.schedules, out).map(drop)
}
