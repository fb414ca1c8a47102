//! `redcron next`: the upcoming fires of an expression or a declared job, for people and scripts.

use std::io::Write;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::Args;
use serde_json::json;

use super::output::ListFormat;
use super::times::{format_fire, machine_zone, on_utc_clock};
use super::{CliError, default_schedules, list_count, parse_zone};
use crate::schedule::{Schedule, load_dir};

#[derive(Debug, Args)]
pub(super) struct NextArgs {
    /// A cron expression (5 fields, or 6 with leading seconds), a macro such as @daily, or
    /// @every <duration>.
    #[arg(required_unless_present = "job", conflicts_with = "job")]
    expression: Option<String>,
    /// A job declared in the schedule directory, instead of an expression.
    #[arg(long, value_name = "NAME", add = super::complete::job_names())]
    job: Option<String>,
    /// The directory of schedule files, with --job.
    #[arg(long, value_name = "DIR", default_value_os_t = default_schedules(), requires = "job")]
    schedules: PathBuf,
    /// The IANA time zone the expression's fields are read in (a job has its own) [default:
    /// UTC, as for a job that names no timezone, whatever this machine's zone; said on
    /// standard error when this machine's is another].
    #[arg(long, value_name = "ZONE", conflicts_with = "job")]
    tz: Option<String>,
    /// List fires after this RFC 3339 time instead of after now.
    #[arg(long, value_name = "RFC3339")]
    after: Option<String>,
    /// How many fires to print (at least 1).
    #[arg(short = 'n', long = "count", value_name = "N", default_value_t = 5, value_parser = list_count)]
    count: usize,
    #[command(flatten)]
    format: ListFormat,
}

pub(super) fn execute(args: &NextArgs, out: &mut impl Write) -> Result<(), CliError> {
    let after = match &args.after {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .map_err(|error| {
                CliError::Argument(format!(
                    "--after \"{text}\" is not an RFC 3339 time like 2026-03-08T00:00:00Z: {error}"
                ))
            })?
            .with_timezone(&Utc),
        None => Utc::now(),
    };
    let (schedule, zone) = match (&args.expression, &args.job) {
        (Some(expression), _) => (Schedule::parse(expression)?, expression_zone(args)?),
        (None, job) => {
            let name = job.as_deref().ok_or_else(|| {
                CliError::Argument("give a cron expression or --job NAME".to_owned())
            })?;
            let mut jobs = load_dir(&args.schedules)?;
            let index = jobs
                .iter()
                .position(|job| job.name == name)
                .ok_or_else(|| {
                    CliError::Argument(format!("no job \"{name}\" in {}", args.schedules.display()))
                })?;
            let job = jobs.swap_remove(index);
            if !job.enabled {
                return Err(CliError::Argument(format!(
                    "job \"{name}\" is disabled (enabled = false): it does not fire"
                )));
            }
            let schedule = job.schedule.ok_or_else(|| {
                CliError::Argument(format!(
                    "job \"{name}\" has no schedule: it runs only when triggered"
                ))
            })?;
            (schedule, job.timezone)
        }
    };
    let fires = schedule.fires_after(after, zone).take(args.count);
    if args.format.is_json() {
        let fires = fires
            .map(|fire| json!({ "fire": format_fire(fire, zone), "fire_ms": fire.timestamp_millis() }))
            .collect();
        return args
            .format
            .write(out, "fires", fires)
            .map_err(CliError::io("writing the fires"));
    }
    for fire in fires {
        writeln!(out, "{}", format_fire(fire, zone)).map_err(CliError::io("writing the fires"))?;
    }
    Ok(())
}

/// The zone an expression's fields are read in: `--tz`, else UTC, as a job that names no
/// timezone reads them. Not this machine's zone: `next` shows when a job with this schedule
/// would fire, and that does not change with the machine it is asked on. Said when the machine
/// runs in another zone, where `30 3 * * *` would otherwise be taken for 03:30 on its clock.
fn expression_zone(args: &NextArgs) -> Result<Tz, CliError> {
    if let Some(zone) = &args.tz {
        return parse_zone(zone);
    }
    let machine = machine_zone();
    if !on_utc_clock(machine) {
        eprintln!(
            "redcron: reading the fields in UTC, as a job with no timezone does; this machine's \
             zone is {machine}: pass --tz {machine} for its clock"
        );
    }
    Ok(chrono_tz::UTC)
}
