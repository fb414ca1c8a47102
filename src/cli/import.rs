//! `redcron import-crontab`: turn a crontab into a schedule file.

use std::io::{Read, Write};
use std::path::PathBuf;

use chrono_tz::Tz;
use clap::Args;

use super::{CliError, parse_zone};
use crate::schedule::crontab::{ImportOptions, import};

#[derive(Debug, Args)]
pub(super) struct ImportArgs {
    /// The crontab to read; - (the default) reads standard input.
    #[arg(value_name = "FILE|-", default_value = "-")]
    input: String,
    /// Read the system format (/etc/crontab, /etc/cron.d/*), with a user field after the
    /// schedule.
    #[arg(long)]
    system: bool,
    /// The time zone the crontab's machine runs in, for lines before any CRON_TZ [default: this
    /// machine's zone].
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// Write the schedule file here instead of to standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
}

pub(super) fn execute(args: &ImportArgs, out: &mut impl Write) -> Result<(), CliError> {
    let (bytes, source) = if args.input == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(CliError::io("reading the crontab from standard input"))?;
        (bytes, "standard input".to_owned())
    } else {
        let bytes =
            std::fs::read(&args.input).map_err(CliError::io(format!("reading {}", args.input)))?;
        (bytes, args.input.clone())
    };
    // cron reads bytes; a stray non-UTF-8 byte in a comment must not stop the import.
    let text = String::from_utf8_lossy(&bytes);
    let zone = match &args.tz {
        Some(name) => parse_zone(name)?,
        None => {
            let zone = machine_zone();
            eprintln!(
                "redcron: reading the crontab's times in {zone} (this machine's zone); pass --tz \
                 to choose another"
            );
            zone
        }
    };
    let options = ImportOptions {
        system: args.system,
        zone,
        source,
    };
    let imported = import(&text, &options);
    for warning in &imported.warnings {
        eprintln!("redcron: {warning}");
    }
    match &args.output {
        Some(path) => std::fs::write(path, &imported.toml)
            .map_err(CliError::io(format!("writing {}", path.display())))?,
        None => out
            .write_all(imported.toml.as_bytes())
            .map_err(CliError::io("writing the schedule file"))?,
    }
    eprintln!(
        "redcron: imported {} job{}{}",
        imported.jobs,
        if imported.jobs == 1 { "" } else { "s" },
        match imported.warnings.len() {
            0 => String::new(),
            1 => ", 1 line needs attention (see above)".to_owned(),
            n => format!(", {n} lines need attention (see above)"),
        }
    );
    Ok(())
}

/// The zone this machine's clock runs in, as cron would read it; UTC when it cannot be told.
fn machine_zone() -> Tz {
    std::env::var("TZ")
        .ok()
        .and_then(|name| name.trim_start_matches(':').parse().ok())
        .or_else(|| iana_time_zone::get_timezone().ok()?.parse().ok())
        .unwrap_or(chrono_tz::UTC)
}
