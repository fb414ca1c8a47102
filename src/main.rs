//! The `redcron` binary: parse the command line and hand it to the library.

use std::process::ExitCode;

use clap::Parser;
use redcron::cli::{Cli, execute};

fn main() -> ExitCode {
    match execute(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("redcron: {error}");
            error.exit_code()
        }
    }
}
