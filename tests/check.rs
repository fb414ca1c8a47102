//! `redcron check` and the provisional `redcron run` on schedule directories.

use std::fs;

use crate::util::{redcron, redcron_in};

#[test]
fn example_schedules_are_valid_and_listed_with_three_fires() {
    let out = redcron(&["check"]).success();
    for job in [
        "log-cleanup",
        "heartbeat",
        "hourly-report",
        "morning-digest",
        "welcome-email",
    ] {
        assert!(out.contains(job), "{job} missing from:\n{out}");
    }
    let digest = out
        .lines()
        .find(|line| line.starts_with("morning-digest"))
        .expect("a morning-digest row");
    assert!(digest.contains("30 8 * * mon-fri"), "{digest}");
    assert!(digest.contains("Europe/Paris"), "{digest}");
    assert_eq!(digest.matches("T08:30:00+0").count(), 3, "{digest}");
    assert!(out.contains("(on demand)"), "{out}");
    assert!(
        out.trim_end().ends_with("5 jobs in schedules: all valid"),
        "{out}"
    );
}

#[test]
fn run_refuses_to_start_on_an_invalid_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("bad.toml"), "[jobs.x]\ncommand = 1\n").expect("write");
    let schedules = dir.path().to_str().expect("UTF-8 path");
    let errors = redcron(&["run", "--schedules", schedules]).failure(1);
    assert!(
        errors.contains("bad.toml:2:11: job \"x\", field \"command\""),
        "{errors}"
    );
}

#[test]
fn every_problem_in_every_file_is_reported_with_its_place() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    fs::create_dir(&schedules).expect("mkdir");
    fs::write(
        schedules.join("a.toml"),
        "[jobs.report]\nschedule = \"0 25 * * *\"\ncommand = \"make report\"\npriority = \"urgent\"\n",
    )
    .expect("write");
    fs::write(
        schedules.join("b.toml"),
        "[jobs.sync]\nschedule = \"@reboot\"\ncommand = \"sync\"\ntimezone = \"Europe/Pariss\"\n\n\
         [jobs.report]\ncommand = \"other\"\n",
    )
    .expect("write");
    fs::write(schedules.join("c.toml"), "[jobs.x\ncommand = \"true\"\n").expect("write");

    let errors = redcron_in(dir.path(), &["check"], "").failure(1);
    let lines: Vec<&str> = errors.lines().collect();
    let expected_starts = [
        "redcron: schedules/a.toml:2:12: job \"report\", field \"schedule\": hour field \"25\": 25 is out of range",
        "schedules/a.toml:4:12: job \"report\", field \"priority\": unknown variant `urgent`",
        "schedules/b.toml:2:12: job \"sync\", field \"schedule\": @reboot is not supported",
        "schedules/b.toml:4:12: job \"sync\", field \"timezone\": unknown time zone \"Europe/Pariss\"",
        "schedules/c.toml:1:8: ",
        "schedules/b.toml:6:7: job \"report\": declared twice: first at schedules/a.toml:1",
    ];
    assert_eq!(lines.len(), expected_starts.len(), "{errors}");
    for (line, start) in lines.iter().zip(expected_starts) {
        assert!(
            line.starts_with(start),
            "{line:?} should start with {start:?}"
        );
    }
}

#[test]
fn a_missing_directory_is_an_error_not_an_empty_schedule() {
    let errors = redcron(&["check", "--schedules", "no-such-dir"]).failure(1);
    assert!(
        errors.contains("no-such-dir: cannot read the schedule directory"),
        "{errors}"
    );
}

#[test]
fn run_without_redis_server_says_how_to_install_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::create_dir(dir.path().join("schedules")).expect("mkdir");
    fs::write(
        dir.path().join("schedules/jobs.toml"),
        "[jobs.x]\ncommand = \"true\"\n",
    )
    .expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_redcron"))
        .arg("run")
        .current_dir(dir.path())
        .env("PATH", dir.path())
        .env_remove("REDIS_URL")
        .output()
        .expect("redcron runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("sudo apt-get install -y redis-server") && stderr.contains("--redis URL"),
        "{stderr}"
    );
}

#[test]
fn check_lists_queue_fallbacks_and_refuses_a_fallback_nothing_serves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().to_str().expect("UTF-8 path");
    fs::write(
        dir.path().join("jobs.toml"),
        "[jobs.invoice]\ncommand = \"true\"\nqueue = \"eu-west\"\n\n\
         [queues.eu-west]\nfallback = \"default\"\nfallback_after = \"90s\"\n",
    )
    .expect("write");
    let out = redcron(&["check", "--schedules", schedules]).success();
    assert!(
        out.contains(
            "queue eu-west falls back to default after 1m 30s without a live replica serving it"
        ),
        "{out}"
    );
    fs::write(
        dir.path().join("jobs.toml"),
        "[jobs.invoice]\ncommand = \"true\"\nqueue = \"eu-west\"\n\n\
         [queues.eu-west]\nfallback = \"defualt\"\n",
    )
    .expect("write");
    let errors = redcron(&["check", "--schedules", schedules]).failure(1);
    assert!(
        errors.contains(
            "jobs.toml:5:9: field \"queues.eu-west\": fallback \"defualt\" is neither default \
             nor the queue of a job here"
        ),
        "{errors}"
    );
}

#[test]
fn check_lists_each_workflow_with_its_steps_and_refuses_a_cycle_where_it_is_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().to_str().expect("UTF-8 path");
    let jobs = "[jobs.compress]\ncommand = \"true\"\n[jobs.watermark]\ncommand = \"true\"\n\
                [jobs.upload]\ncommand = \"true\"\n";
    fs::write(
        dir.path().join("jobs.toml"),
        format!("{jobs}[workflows.images]\nsteps = [\"compress\", \"watermark\", \"upload\"]\n"),
    )
    .expect("write");
    let out = redcron(&["check", "--schedules", schedules]).success();
    assert!(
        out.contains("workflow images: compress -> watermark -> upload (on_failure = stop)"),
        "{out}"
    );
    fs::write(
        dir.path().join("jobs.toml"),
        format!(
            "{jobs}[workflows.images]\nsteps = [{{ job = \"compress\", needs = [\"upload\"] }}, \
             {{ job = \"upload\", needs = [\"compress\"] }}]\n"
        ),
    )
    .expect("write");
    let errors = redcron(&["check", "--schedules", schedules]).failure(1);
    assert!(
        errors.contains(
            "jobs.toml:8:9: field \"workflows.images.steps\": its steps wait for each other \
             (compress -> upload -> compress)"
        ),
        "{errors}"
    );
}

#[test]
fn the_summary_counts_workflows_apart_from_jobs() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("images.toml"),
        "[jobs.compress]\ncommand = \"true\"\n[jobs.upload]\ncommand = \"true\"\n\
         [workflows.images]\nsteps = [\"compress\", \"upload\"]\n",
    )
    .expect("write");
    let schedules = dir.path().to_str().expect("UTF-8 path");
    let out = redcron(&["check", "--schedules", schedules]).success();
    assert!(
        out.trim_end()
            .ends_with(&format!("2 jobs and 1 workflow in {schedules}: all valid")),
        "{out}"
    );
}

/// A job the system cannot start passes no check: a command longer than one argument may be
/// (it would fail every fire with "Argument list too long"), a NUL in its command or
/// environment, a working directory that is a file. `run` refuses it as `check` does.
#[test]
fn a_job_the_system_cannot_start_is_refused_at_its_place() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("jobs.toml");
    let workdir = dir.path().join("a-file");
    fs::write(&workdir, "").expect("write");
    fs::write(
        &file,
        format!(
            "[jobs.ok]\ncommand = \"true\"\n\n\
             [jobs.huge]\nschedule = \"* * * * *\"\ncommand = \"echo {}\"\n\n\
             [jobs.nul]\ncommand = \"echo a\\u0000b\"\nenv = {{ A = \"x\\u0000y\" }}\n\n\
             [jobs.filed]\ncommand = \"true\"\nworkdir = \"{}\"\n",
            "x".repeat(1024 * 1024),
            workdir.display()
        ),
    )
    .expect("write");
    let schedules = dir.path().to_str().expect("UTF-8 path");
    let errors = redcron(&["check", "--schedules", schedules]).failure(1);
    let lines: Vec<&str> = errors.lines().collect();
    assert_eq!(lines.len(), 4, "{errors}");
    assert!(
        lines[0].contains(
            "jobs.toml:6:11: job \"huge\", field \"command\": the command is \
                           1048581 bytes: the system passes at most 131071 bytes in one argument"
        ),
        "{errors}"
    );
    assert!(
        lines[1].contains(
            "jobs.toml:9:11: job \"nul\", field \"command\": the command \
                           contains a NUL character"
        ),
        "{errors}"
    );
    assert!(
        lines[2].contains("job \"nul\", field \"env\": the value of A contains a NUL"),
        "{errors}"
    );
    assert!(
        lines[3].contains("job \"filed\", field \"workdir\"")
            && lines[3].contains("not a directory"),
        "{errors}"
    );
    let refused = redcron(&["run", "--schedules", schedules]).failure(1);
    assert!(
        refused.contains("job \"huge\", field \"command\""),
        "{refused}"
    );
}

#[test]
fn a_where_no_replica_can_match_is_refused_at_its_place() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(
        dir.path().join("hosts.toml"),
        "[jobs.rotate]\nschedule = \"@daily\"\ncommand = \"logrotate\"\non = \"every\"\n\
         where = [\"role=web\", \"role=db\"]\n\n\
         [jobs.report]\nschedule = \"@daily\"\ncommand = \"report\"\nqueue = \"reports\"\n\
         where = [\"queue=default\"]\n\n\
         [jobs.regional]\nschedule = \"@daily\"\ncommand = \"sync\"\nwhere = [\"queue=eu-west\"]\n\n\
         [jobs.both]\nschedule = \"@daily\"\ncommand = \"sync\"\nqueue = \"eu-west\"\n\
         where = [\"queue=eu-west\", \"queue=default\"]\n",
    )
    .expect("write");
    let schedules = dir.path().to_str().expect("UTF-8 path");
    let errors = redcron(&["check", "--schedules", schedules]).failure(1);
    let lines: Vec<&str> = errors.lines().collect();
    assert_eq!(lines.len(), 3, "{errors}");
    assert!(
        lines[0].ends_with(
            "hosts.toml:5:9: job \"rotate\", field \"where\": \"role=db\" and \"role=web\" \
             cannot both hold: a replica carries one value of each label key (only queue= \
             repeats, once per queue it serves), so no replica would run the job; keep one of \
             them, or give the replicas meant a label they share"
        ),
        "{errors}"
    );
    assert!(
        lines[1].ends_with(
            "hosts.toml:11:9: job \"report\", field \"where\": \"queue=default\" picks replicas \
             serving queue \"default\", but the job's runs wait in queue \"reports\", which only \
             replicas serving \"reports\" claim: set queue = \"default\" (where is then not \
             needed), or add \"queue=reports\" to where for replicas serving both"
        ),
        "{errors}"
    );
    // The guide's own words: where = ["queue=eu-west"] picks what queue = "eu-west" does, so
    // a job that says only the first has its runs wait in the default queue.
    assert!(
        lines[2].contains("hosts.toml:16:9: job \"regional\", field \"where\"")
            && lines[2].contains("set queue = \"eu-west\""),
        "{errors}"
    );
    let refused = redcron(&["run", "--schedules", schedules]).failure(1);
    assert!(
        refused.contains("job \"rotate\", field \"where\""),
        "{refused}"
    );
}
