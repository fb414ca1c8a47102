//! The `redcron` binary: set up logging, parse the command line, hand it to the library.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use redcron::cli::{Cli, LogFormat, execute};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, not in journald or a log file.
        .with_ansi(std::io::stderr().is_terminal());
    match cli.log_format() {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    match execute(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("redcron: {error}");
            error.exit_code()
        }
    }
}
