//! Shell completions and man pages, as a package installs them, and `--help`.

use std::process::Command;

use crate::util::redcron;

/// Every command, as `redcron --help` lists them.
const COMMANDS: [&str; 19] = [
    "run",
    "check",
    "next",
    "import-crontab",
    "bench",
    "status",
    "jobs",
    "history",
    "trigger",
    "enqueue",
    "pause",
    "resume",
    "hold",
    "release",
    "runs",
    "dead",
    "workflow",
    "completions",
    "man",
];

#[test]
fn completions_are_valid_scripts_that_know_every_command() {
    let bash = redcron(&["completions", "bash"]).success();
    let checked = Command::new("bash")
        .args(["-n", "-c", &bash])
        .output()
        .expect("bash runs");
    assert!(
        checked.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    for command in COMMANDS {
        assert!(
            bash.contains(&format!("redcron,{command})")),
            "bash completes {command}"
        );
    }
    let zsh = redcron(&["completions", "zsh"]).success();
    assert!(zsh.starts_with("#compdef redcron"), "{}", &zsh[..40]);
    let fish = redcron(&["completions", "fish"]).success();
    assert!(fish.contains("complete -c redcron"), "fish completions");
    let error = redcron(&["completions", "tcsh"]).failure(2);
    assert!(error.contains("invalid value 'tcsh'"), "{error}");
}

#[test]
fn the_man_pages_cover_every_command() {
    let page = redcron(&["man"]).success();
    assert!(page.contains(".TH redcron 1"), "a section 1 page");
    for command in COMMANDS {
        let reference = format!("redcron\\-{}(1)", command.replace('-', "\\-"));
        assert!(page.contains(&reference), "redcron.1 refers to {reference}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("man1");
    let listed = redcron(&["man", "--dir", target.to_str().expect("a UTF-8 path")]).success();
    assert_eq!(listed.lines().count(), COMMANDS.len() + 1, "{listed}");
    for name in std::iter::once("redcron".to_owned())
        .chain(COMMANDS.iter().map(|command| format!("redcron-{command}")))
    {
        let text = std::fs::read_to_string(target.join(format!("{name}.1")))
            .unwrap_or_else(|error| panic!("{name}.1: {error}"));
        assert!(
            text.contains(&format!(".TH {name} 1")),
            "{name}.1 is its own page"
        );
    }
    // Into a directory that exists, again; not under one that does not.
    redcron(&["man", "--dir", target.to_str().expect("a UTF-8 path")]).success();
    let mistyped = dir.path().join("nosuch/man1");
    let refused = redcron(&["man", "--dir", mistyped.to_str().expect("a UTF-8 path")]).failure(2);
    assert!(
        refused.contains("creating ") && refused.contains("nosuch/man1"),
        "{refused}"
    );
    assert!(!dir.path().join("nosuch").exists(), "no parent was made");
    let run = std::fs::read_to_string(target.join("redcron-run.1")).expect("redcron-run.1");
    assert!(
        run.contains("metrics\\-addr"),
        "the options of run are on its page"
    );
}

#[test]
fn help_shows_the_connection_and_tls_options_apart_from_the_commands_own() {
    for command in ["status", "trigger", "run", "bench"] {
        let help = redcron(&[command, "--help"]).success();
        let section = |heading: &str| -> String {
            help.split(&format!("\n{heading}:\n"))
                .nth(1)
                .unwrap_or_else(|| panic!("{command} --help has no {heading} section:\n{help}"))
                .split("\n\n")
                .take_while(|paragraph| paragraph.starts_with("  "))
                .collect::<Vec<_>>()
                .join("\n\n")
        };
        let options = section("Options");
        let connection = section("Connection");
        assert!(connection.contains("--redis <URL>"), "{command}: {help}");
        assert!(!options.contains("--redis"), "{command}: {options}");
        if command == "run" {
            assert!(
                options.contains("--queues") && !connection.contains("--queues"),
                "run's own options stay under Options: {help}"
            );
        }
        if command != "bench" {
            assert!(connection.contains("--namespace <NS>"), "{command}: {help}");
            let tls = section("TLS");
            assert!(
                tls.contains("--tls-ca-cert") && tls.contains("--tls-key"),
                "{command}: {help}"
            );
            assert!(!options.contains("--tls-"), "{command}: {options}");
        }
    }
}
