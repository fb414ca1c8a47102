//! Shell completions and man pages, as a package installs them, and `--help`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{cli, redcron, wait_until};

/// Every command, as `redcron --help` lists them.
const COMMANDS: [&str; 20] = [
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
    "web",
    "completions",
    "man",
];

#[test]
fn completions_parse_in_bash_and_are_printed_for_zsh_and_fish() {
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
    assert!(bash.contains("complete -o nospace"), "{bash}");
    let zsh = redcron(&["completions", "zsh"]).success();
    assert!(zsh.starts_with("#compdef redcron"), "{}", &zsh[..40]);
    let fish = redcron(&["completions", "fish"]).success();
    assert!(
        fish.contains("--command redcron"),
        "fish completions: {fish}"
    );
    let error = redcron(&["completions", "tcsh"]).failure(2);
    assert!(error.contains("invalid value 'tcsh'"), "{error}");
}

/// What bash offers at a Tab after `words` (the last one being the word completed), in `dir`:
/// the script `redcron completions bash` prints, sourced, called as bash calls it, with the
/// `redcron` under test first on PATH.
fn bash_offers(dir: &Path, env: &[(&str, &str)], words: &[&str]) -> Vec<String> {
    let script = redcron(&["completions", "bash"]).success();
    let quoted: Vec<String> = words.iter().map(|word| format!("'{word}'")).collect();
    let current = words.len() - 1;
    let program = format!(
        "{script}\nCOMP_WORDS=({}); COMP_CWORD={current}; COMP_TYPE=9\n\
         _clap_complete_redcron redcron {} {}\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"",
        quoted.join(" "),
        quoted[current],
        quoted[current - 1]
    );
    let bin = Path::new(env!("CARGO_BIN_EXE_redcron"))
        .parent()
        .expect("the binary's directory");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new("bash")
        .args(["-c", &program])
        .current_dir(dir)
        .env("PATH", path)
        .env("REDCRON_CONFIG", "/dev/null")
        .env_remove("REDIS_URL")
        .envs(env.iter().copied())
        .output()
        .expect("bash runs");
    assert!(
        output.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .filter(|line| !line.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_commands_and_the_job_names_of_the_schedules_and_of_redis() {
    let server = RedisServer::start();
    let here = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(here.path().join("schedules")).expect("schedules/");
    std::fs::write(
        here.path().join("schedules/jobs.toml"),
        "[jobs.nightly-backup]\nschedule = \"0 3 * * *\"\ncommand = \"true\"\n\
         [jobs.nightly-report]\nschedule = \"0 4 * * *\"\ncommand = \"true\"\n\
         [jobs.weekly]\nschedule = \"0 5 * * 0\"\ncommand = \"true\"\n",
    )
    .expect("written");
    // A job only another machine's replica declares: only Redis knows it here.
    let elsewhere = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        elsewhere.path().join("sync.toml"),
        "[jobs.nightly-sync]\nschedule = \"0 2 * * *\"\ncommand = \"true\"\n",
    )
    .expect("written");
    let _replica = ReplicaProcess::start("r1", &server.url(), elsewhere.path(), here.path(), &[]);
    assert!(
        wait_until(Duration::from_secs(20), || {
            cli(&server, here.path(), &["jobs"])
                .success()
                .contains("nightly-sync")
        }),
        "the leader published nightly-sync"
    );

    let commands = bash_offers(here.path(), &[], &["redcron", ""]);
    for command in COMMANDS {
        assert!(
            commands.iter().any(|offered| offered == command),
            "{command}: {commands:?}"
        );
    }
    assert_eq!(
        bash_offers(here.path(), &[], &["redcron", "trig"]),
        ["trigger"]
    );
    let url = server.url();
    assert_eq!(
        bash_offers(
            here.path(),
            &[("REDIS_URL", &url)],
            &["redcron", "trigger", "--namespace", "test", "nightly-"]
        ),
        ["nightly-backup", "nightly-report", "nightly-sync"]
    );
    // Redis out of reach: the names of the schedule files, at once.
    for words in [
        &["redcron", "pause", "w"][..],
        &["redcron", "history", "--redis", "redis://127.0.0.1:1/", "w"],
        &["redcron", "runs", "list", "--job", "w"],
        &["redcron", "next", "--job", "w"],
    ] {
        assert_eq!(
            bash_offers(here.path(), &[], words),
            ["weekly"],
            "{words:?}"
        );
    }
}

#[test]
fn zsh_completes_a_job_name_at_the_first_tab_from_the_script_installed_in_fpath() {
    let here = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(here.path().join("schedules")).expect("schedules/");
    std::fs::write(
        here.path().join("schedules/jobs.toml"),
        "[jobs.hourly-report]\nschedule = \"0 * * * *\"\ncommand = \"true\"\n",
    )
    .expect("written");
    let functions = here.path().join("zsh");
    std::fs::create_dir(&functions).expect("zsh/");
    let script = redcron(&["completions", "zsh"]).success();
    std::fs::write(functions.join("_redcron"), script).expect("written");
    let bin = Path::new(env!("CARGO_BIN_EXE_redcron"))
        .parent()
        .expect("the binary's directory");
    // An interactive zsh in a terminal of its own, as a user has it: Tab once after a partial
    // name, and wait (no longer than `timeout` allows) for the name to be completed.
    let session = format!(
        "zmodload zsh/zpty\n\
         zpty z env PATH={bin}:$PATH REDCRON_CONFIG=/dev/null zsh -f -i\n\
         zpty -w z 'fpath=({functions} $fpath); autoload -Uz compinit; compinit -u; cd {here}'\n\
         zpty -w -n z $'redcron trigger hour\\t'\n\
         zpty -r z seen '*hourly-report*' && print completed\n",
        bin = bin.display(),
        functions = functions.display(),
        here = here.path().display(),
    );
    let output = Command::new("timeout")
        .args(["20", "zsh", "-f", "-c", &session])
        .output()
        .unwrap_or_else(|error| {
            panic!("cannot run zsh ({error}): install it with `sudo apt-get install -y zsh`")
        });
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "completed",
        "status {}, stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_man_pages_cover_every_command() {
    // Every command the CLI has, as its help lists them: one added there and not here would
    // otherwise go unchecked.
    let help = redcron(&["--help"]).success();
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|command| *command != "help")
        .collect();
    assert_eq!(commands, COMMANDS, "{help}");
    let page = redcron(&["man"]).success();
    assert!(page.contains(".TH redcron 1"), "a section 1 page");
    for command in COMMANDS {
        let reference = format!("redcron\\-{}(1)", command.replace('-', "\\-"));
        assert!(page.contains(&reference), "redcron.1 refers to {reference}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("man1");
    let listed = redcron(&["man", "--dir", target.to_str().expect("a UTF-8 path")]).success();
    // And the schedule format's page.
    assert_eq!(listed.lines().count(), COMMANDS.len() + 2, "{listed}");
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
fn the_man_pages_say_where_the_files_are_and_hold_the_schedule_format() {
    let page = redcron(&["man"]).success();
    for expected in [
        ".SH FILES",
        "/etc/redcron/redcron.toml",
        ".SH ENVIRONMENT",
        "REDCRON_CONFIG",
        "REDIS_URL",
        "REDCRON_WEBHOOK_SECRET",
        ".SH EXAMPLES",
        "redcron\\-schedule(5)",
    ] {
        assert!(page.contains(expected), "redcron.1 has {expected}:\n{page}");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let man1 = dir.path().join("man1");
    let listed = redcron(&["man", "--dir", man1.to_str().expect("a UTF-8 path")]).success();
    let schedule_page = dir.path().join("man5/redcron-schedule.5");
    assert!(
        listed.lines().any(|line| Path::new(line) == schedule_page),
        "section 5 goes beside man1: {listed}"
    );
    let schedule = std::fs::read_to_string(&schedule_page).expect("redcron-schedule.5");
    for expected in [
        ".TH redcron-schedule 5",
        ".SH \"SCHEDULE FILES\"",
        "\\fBmisfire\\fR",
        ".SH \"THE CRON DIALECT\"",
    ] {
        assert!(schedule.contains(expected), "{expected}:\n{schedule}");
    }
    let read = |name: &str| std::fs::read_to_string(man1.join(name)).expect(name);
    let environment = |page: &str| -> String {
        let start = page
            .find(".SH ENVIRONMENT")
            .expect("an ENVIRONMENT section");
        let end = page[start + 1..]
            .find(".SH ")
            .map_or(page.len(), |end| start + 1 + end);
        page[start..end].to_owned()
    };
    let next = read("redcron-next.1");
    assert!(next.contains(".SH EXAMPLES"), "{next}");
    assert!(
        !environment(&next).contains("REDIS_URL"),
        "next talks to no Redis: {next}"
    );
    let trigger = environment(&read("redcron-trigger.1"));
    assert!(
        trigger.contains("REDIS_URL") && !trigger.contains("REDCRON_WEBHOOK_SECRET"),
        "{trigger}"
    );
    // Into any other directory, the schedule format's page goes with the others.
    let flat = dir.path().join("pages");
    redcron(&["man", "--dir", flat.to_str().expect("a UTF-8 path")]).success();
    assert!(flat.join("redcron-schedule.5").is_file());
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
