//! The command reference cannot drift from the command line: every command and every long
//! option `redcron --help` and its commands' `--help` show is named in docs/cli.md, so that a
//! flag added to the parser without a word in the reference fails here.

use std::collections::BTreeSet;

use crate::util::redcron_in;

/// The commands a `--help` text lists under `Commands:`, `help` aside.
fn commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| line.trim() != "Commands:")
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The long options a `--help` text shows (`--name`), help and version aside.
fn long_options(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix('-')
                .and_then(|rest| rest.split_once(", "))
                .map_or(line, |(_, long)| long);
            let name = line.strip_prefix("--")?;
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty() && name != "help" && name != "version").then(|| format!("--{name}"))
        })
        .collect()
}

#[test]
fn every_command_and_option_the_cli_shows_is_in_the_reference() {
    let reference = include_str!("../docs/cli.md");
    let dir = tempfile::tempdir().expect("temp dir");
    let help = |path: &[String]| {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        redcron_in(dir.path(), &args, "").success()
    };
    let mut missing = Vec::new();
    let mut seen = 0;
    let mut pending: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        let text = help(&path);
        let shown = path.join(" ");
        if !path.is_empty() && !reference.contains(&format!("redcron {shown}")) {
            missing.push(format!("the command `redcron {shown}`"));
        }
        for option in long_options(&text) {
            seen += 1;
            if !reference.contains(&option) {
                missing.push(format!("{option} of `redcron {shown}`"));
            }
        }
        for command in commands(&text) {
            let mut next = path.clone();
            next.push(command);
            pending.push(next);
        }
    }
    assert!(seen > 50, "only {seen} options read from the help texts");
    assert!(
        missing.is_empty(),
        "docs/cli.md does not name:\n{}",
        missing.join("\n")
    );
}
