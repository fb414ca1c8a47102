//! `redcron completions SHELL` and `redcron man`: shell completions and man pages, made from the
//! same definition of the command line as its parsing, so that they never drift from it.

use std::io::Write;
use std::path::PathBuf;

use clap::CommandFactory;

use super::{Cli, CliError};

#[derive(Debug, clap::Args)]
pub(super) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub(super) struct ManArgs {
    /// Write redcron.1 and a page per command (redcron-run.1, ...) into this directory instead
    /// of printing redcron.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script of `args.shell`: a few lines that ask `redcron` itself for the
/// candidates at each Tab, so that job names come from the schedule files and Redis.
pub(super) fn completions(args: &CompletionsArgs, out: &mut impl Write) -> Result<(), CliError> {
    let shell = args.shell.to_string();
    let shells = clap_complete::env::Shells::builtins();
    let completer = shells
        .completer(&shell)
        .ok_or_else(|| CliError::Argument(format!("no completion for the shell {shell}")))?;
    // Generated into memory first, so that a failed write is one error, not half a script.
    // `redcron` is found on PATH when the shell completes: the script stays right when the
    // binary moves, as a package's does.
    let mut script = Vec::new();
    completer
        .write_registration("COMPLETE", "redcron", "redcron", "redcron", &mut script)
        .map_err(CliError::io("writing the completions"))?;
    out.write_all(&script)
        .map_err(CliError::io("writing the completions"))
}

/// Prints the man page, or writes every page into `args.dir`, listing what it wrote.
pub(super) fn man(args: &ManArgs, out: &mut impl Write) -> Result<(), CliError> {
    let command = Cli::command();
    let Some(dir) = &args.dir else {
        let page = render(command)?;
        return out
            .write_all(&page)
            .map_err(CliError::io("writing the man page"));
    };
    // The directory itself is made, not its parents: a mistyped path fails instead of leaving
    // a tree of directories behind.
    if !dir.is_dir() {
        std::fs::create_dir(dir).map_err(CliError::io(format!("creating {}", dir.display())))?;
    }
    let pages = command
        .get_subcommands()
        .map(|sub| {
            let name = format!("redcron-{}", sub.get_name());
            (name.clone(), sub.clone().name(name))
        })
        .collect::<Vec<_>>();
    for (name, page) in std::iter::once(("redcron".to_owned(), command)).chain(pages) {
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, render(page)?)
            .map_err(CliError::io(format!("writing {}", path.display())))?;
        writeln!(out, "{}", path.display()).map_err(CliError::io("listing the man pages"))?;
    }
    Ok(())
}

fn render(command: clap::Command) -> Result<Vec<u8>, CliError> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .render(&mut page)
        .map_err(CliError::io("rendering a man page"))?;
    Ok(page)
}
