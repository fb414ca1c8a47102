//! The `redcron` binary: set up logging, parse the command line, hand it to the library.

use std::io::Write;
use std::process::ExitCode;

use clap::CommandFactory;
use redcron::cli::{Cli, CliError, execute};

fn main() -> ExitCode {
    // A shell asking for completions (COMPLETE=bash redcron -- ...) is answered, and the process
    // exits, before anything else is read.
    clap_complete::CompleteEnv::with_factory(Cli::command).complete();
    let cli = match Cli::from_env() {
        Ok(cli) => cli,
        Err(error) => return fail(&error),
    };
    let logs = redcron::logs::init(cli.log_format());
    let result = execute(cli);
    // The lines still queued go out first, so that the error is the last line.
    drop(logs);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) if error.is_broken_pipe() => ExitCode::SUCCESS,
        Err(error) => fail(&error),
    }
}

fn fail(error: &CliError) -> ExitCode {
    // Not `eprintln!`, which panics when standard error is closed or full: the exit code must
    // say what happened whatever became of the stream.
    let _ = writeln!(std::io::stderr(), "redcron: {}", error.printable());
    error.exit_code()
}
