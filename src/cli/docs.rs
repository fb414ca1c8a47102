//! `redcron completions SHELL` and `redcron man`: shell completions and man pages, made from the
//! same definition of the command line as its parsing, so that they never drift from it.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::CommandFactory;
use clap_mangen::roff::{Roff, bold, roman};

use super::{Cli, CliError, config, schedule_page};

#[derive(Debug, clap::Args)]
pub(super) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub(super) struct ManArgs {
    /// Write redcron.1 and a page per command (redcron-run.1, ...) into this directory instead
    /// of printing redcron.1, and the page of the schedule files, redcron-schedule.5, beside
    /// them (into ../man5 when the directory is a man1).
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
    if shell == "zsh" {
        // Installed as `_redcron` in $fpath, the script is the body of the function compinit
        // calls at the first Tab: it must complete then too, not only define what completes
        // from the second Tab on.
        script.extend_from_slice(
            b"if [ \"$funcstack[1]\" = \"_redcron\" ]; then\n    \
              _clap_dynamic_completer_redcron \"$@\"\nfi\n",
        );
    }
    out.write_all(&script)
        .map_err(CliError::io("writing the completions"))
}

/// Prints the man page, or writes every page into `args.dir`, listing what it wrote.
pub(super) fn man(args: &ManArgs, out: &mut impl Write) -> Result<(), CliError> {
    let command = Cli::command();
    let Some(dir) = &args.dir else {
        let page = render(command, None)?;
        return out
            .write_all(&page)
            .map_err(CliError::io("writing the man page"));
    };
    // Section 5 goes where `man` looks for it: beside man1 in a manual tree.
    let section5 = match dir.file_name() {
        Some(name) if name == "man1" => dir.with_file_name("man5"),
        _ => dir.clone(),
    };
    let mut written = vec![(dir.join("redcron.1"), render(command.clone(), None)?)];
    for sub in command.get_subcommands() {
        let name = format!("redcron-{}", sub.get_name());
        let page = render(sub.clone().name(&name), Some(&command))?;
        written.push((dir.join(format!("{name}.1")), page));
    }
    let mut schedule_page = Vec::new();
    schedule_page::render(command.get_version().unwrap_or_default())
        .to_writer(&mut schedule_page)
        .map_err(CliError::io("rendering a man page"))?;
    written.push((
        section5.join(format!("{}.5", schedule_page::NAME)),
        schedule_page,
    ));
    for (path, page) in written {
        if let Some(parent) = path.parent() {
            // The directory itself is made, not its parents: a mistyped path fails instead of
            // leaving a tree of directories behind.
            if !parent.is_dir() {
                std::fs::create_dir(parent)
                    .map_err(CliError::io(format!("creating {}", parent.display())))?;
            }
        }
        std::fs::write(&path, page).map_err(CliError::io(format!("writing {}", path.display())))?;
        writeln!(out, "{}", path.display()).map_err(CliError::io("listing the man pages"))?;
    }
    Ok(())
}

/// The page of `command`: what clap_mangen makes of it, then FILES, ENVIRONMENT, EXAMPLES and
/// SEE ALSO. `parent` is the whole command line when `command` is one of its subcommands.
fn render(command: clap::Command, parent: Option<&clap::Command>) -> Result<Vec<u8>, CliError> {
    let mut page = Vec::new();
    write_page(&mut page, command, parent.is_some())
        .map_err(CliError::io("rendering a man page"))?;
    Ok(page)
}

fn write_page(page: &mut Vec<u8>, command: clap::Command, subcommand: bool) -> io::Result<()> {
    let name = command.get_name().to_owned();
    let subcommand = subcommand.then(|| name.trim_start_matches("redcron-"));
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(page)?;
    man.render_name_section(page)?;
    man.render_synopsis_section(page)?;
    man.render_description_section(page)?;
    if command.get_arguments().any(|arg| !arg.is_hide_set()) {
        man.render_options_section(page)?;
    }
    if command.has_subcommands() {
        man.render_subcommands_section(page)?;
    }
    let mut ours = Roff::new();
    files(&mut ours);
    environment(
        &mut ours,
        &command,
        matches!(subcommand, None | Some("run")),
    );
    examples(&mut ours, subcommand);
    ours.control("SH", ["SEE ALSO"]).text([
        bold("redcron"),
        roman("(1), "),
        bold(schedule_page::NAME),
        roman("(5)"),
    ]);
    ours.to_writer(page)?;
    if command.get_version().is_some() {
        man.render_version_section(page)?;
    }
    Ok(())
}

/// FILES: where the configuration, the schedules and the state are.
fn files(page: &mut Roff) {
    page.control("SH", ["FILES"]);
    let entries: [(&str, &str); 5] = [
        (
            config::SYSTEM_FILE,
            "The machine's configuration (installed by the package): the defaults of --redis, \
             --namespace, --schedules, --data-dir and the TLS and replicated-writes options, \
             each set by the key of the option's name (redis = \"redis://host:6379/\"); a \
             relative path is relative to the file.",
        ),
        (
            "$XDG_CONFIG_HOME/redcron/redcron.toml",
            "The user's (~/.config/redcron/redcron.toml when XDG_CONFIG_HOME is not set): its \
             keys win over the machine's. --config FILE or REDCRON_CONFIG reads FILE instead of \
             both. An option on the command line wins over its environment variable, which wins \
             over the files.",
        ),
        (
            "/etc/redcron/schedules/*.toml",
            "The schedule files of the packaged service (see redcron-schedule(5)).",
        ),
        (
            "/etc/default/redcron",
            "The environment of the packaged service (redcron.service): RUST_LOG, \
             REDCRON_WEBHOOK_SECRET, REDCRON_SENDMAIL, REDCRON_LABELS, and REDIS_URL where a \
             password is better kept in a file only root reads.",
        ),
        (
            "/var/lib/redcron",
            "The service's working directory; redis/ below it holds the data and socket of the \
             embedded Redis when no Redis URL is set.",
        ),
    ];
    for (path, text) in entries {
        page.control("TP", [])
            .text([bold(path)])
            .text([roman(text)]);
    }
}

/// ENVIRONMENT: the variables `command`'s options read, those of the configuration and logs,
/// and, for a replica (`replica`), those of its notices.
fn environment(page: &mut Roff, command: &clap::Command, replica: bool) {
    page.control("SH", ["ENVIRONMENT"]);
    let mut options: Vec<(String, String, bool)> = Vec::new();
    let mut commands = vec![command];
    while let Some(command) = commands.pop() {
        for arg in command.get_arguments() {
            if let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) {
                let in_files = config::FILE_OPTIONS.contains(&arg.get_id().as_str());
                let entry = (
                    env.to_string_lossy().into_owned(),
                    long.to_owned(),
                    in_files,
                );
                if !options.contains(&entry) {
                    options.push(entry);
                }
            }
        }
        commands.extend(command.get_subcommands());
    }
    options.sort();
    let mut entries: Vec<(String, String)> = options
        .into_iter()
        .map(|(env, long, in_files)| {
            let text = if in_files {
                format!("The default of --{long}, over the configuration files.")
            } else {
                format!("The default of --{long}, which no configuration file sets.")
            };
            (env, text)
        })
        .collect();
    entries.push((
        config::CONFIG_ENV.to_owned(),
        "A configuration file read instead of the machine's and the user's (--config wins over \
         it; /dev/null reads none)."
            .to_owned(),
    ));
    entries.push((
        "XDG_CONFIG_HOME".to_owned(),
        "Where the user's configuration file is (default ~/.config).".to_owned(),
    ));
    entries.push((
        "RUST_LOG".to_owned(),
        "The log level: error, warn, info (the default) or debug; per module too \
         (info,redcron::output=warn)."
            .to_owned(),
    ));
    if replica {
        entries.push((
            super::run::LABELS_ENV.to_owned(),
            "The labels of the replica, as --label gives them (role=web,dc=eu), when no --label \
             is given; no configuration file sets them."
                .to_owned(),
        ));
        entries.push((
            crate::notify::WEBHOOK_SECRET_ENV.to_owned(),
            "Signs the webhooks of notices (X-Redcron-Signature); jobs never see it.".to_owned(),
        ));
        entries.push((
            crate::schedule::notice::SENDMAIL_ENV.to_owned(),
            "The sendmail that mailto: notices go through, when it is not on PATH.".to_owned(),
        ));
    }
    for (name, text) in entries {
        page.control("TP", [])
            .text([bold(name)])
            .text([roman(text)]);
    }
}

/// EXAMPLES: what a sysadmin types first, on the main page, and per command.
fn examples(page: &mut Roff, subcommand: Option<&str>) {
    let examples: &[(&str, &str)] = match subcommand {
        None => &[
            (
                "Check the schedule files and see every job's next fires:",
                "redcron check --schedules /etc/redcron/schedules",
            ),
            (
                "Run a replica on each machine, against the same Redis:",
                "redcron run --redis redis://redis.internal:6379/ --schedules /etc/redcron/schedules",
            ),
            (
                "Set the Redis once for every command of this user:",
                "mkdir -p ~/.config/redcron && echo 'redis = \"redis://redis.internal:6379/\"' >> ~/.config/redcron/redcron.toml",
            ),
            (
                "See the leader, the replicas and every job's state:",
                "redcron status",
            ),
            (
                "Run a job now, then read how its last runs went:",
                "redcron trigger nightly-backup && redcron history nightly-backup -n 5",
            ),
            (
                "Complete commands and job names in bash:",
                "redcron completions bash > /etc/bash_completion.d/redcron",
            ),
        ],
        Some("run") => &[
            (
                "A replica against a shared Redis, reloading the files when they change:",
                "redcron run --redis redis://redis.internal:6379/ --schedules /etc/redcron/schedules --watch",
            ),
            (
                "One machine alone, with a private Redis kept in ./.redcron:",
                "redcron run --schedules schedules",
            ),
        ],
        Some("check") => &[(
            "Validate a directory before shipping it (exit 1 and every problem when invalid):",
            "redcron check --schedules ./schedules",
        )],
        Some("next") => &[
            (
                "The next five fires of an expression, read in Berlin's time:",
                "redcron next '30 3 * * mon-fri' --tz Europe/Berlin -n 5",
            ),
            (
                "The next fires of a declared job:",
                "redcron next --job nightly-backup",
            ),
        ],
        Some("trigger") => &[(
            "Run a job now with a payload on its standard input:",
            "redcron trigger reindex --payload '{\"full\": true}'",
        )],
        Some("history") => &[(
            "The last failed runs of a job:",
            "redcron history nightly-backup --failed -n 10",
        )],
        Some("import-crontab") => &[
            (
                "Turn this user's crontab into a schedule file:",
                "crontab -l | redcron import-crontab -o schedules/imported.toml",
            ),
            (
                "Import this machine's system crontab as jobs of this machine alone:",
                "redcron import-crontab --system /etc/crontab --where host=$(hostname) -o schedules/$(hostname).toml",
            ),
        ],
        Some("web") => &[
            (
                "The console and its API on this machine only, at http://127.0.0.1:8080/:",
                "redcron web --redis redis://redis.internal:6379/",
            ),
            (
                "On every address, behind a proxy at /redcron, for users of an auth file:",
                "redcron web --listen 0.0.0.0:8080 --base-path /redcron --auth-file /etc/redcron/web-auth.toml",
            ),
        ],
        Some(_) => &[],
    };
    if examples.is_empty() {
        return;
    }
    page.control("SH", ["EXAMPLES"]);
    for (what, line) in examples {
        page.control("PP", []).text([roman(*what)]);
        page.control("RS", ["4"])
            .control("nf", [])
            .text([bold(*line)])
            .control("fi", [])
            .control("RE", []);
    }
}
