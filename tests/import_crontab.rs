//! `redcron import-crontab`: every imported job fires exactly when its crontab line would.

use std::path::Path;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use redcron::schedule::{Delivery, Job, Misfire, Overlap, Schedule, parse_file};

use crate::util::{redcron, redcron_in};

/// An entry of a crontab as cron reads it: the expression and the zone in force on its line.
struct Entry {
    line: String,
    expression: String,
    zone: Tz,
}

/// Reads the entries of a crontab independently of the importer: variable lines, comments and
/// `@reboot` are not entries; `CRON_TZ` changes the zone of the lines below it.
fn entries(text: &str, zone: Tz) -> Vec<Entry> {
    let mut zone = zone;
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("CRON_TZ=") {
            zone = name.parse().expect("the fixture's zones are valid");
        } else if line.starts_with("@reboot") {
            continue;
        } else if line.starts_with('@') {
            let expression = line.split_whitespace().next().expect("a macro");
            found.push(Entry {
                line: line.to_owned(),
                expression: expression.to_owned(),
                zone,
            });
        } else if line.starts_with(|c: char| c.is_ascii_digit() || c == '*') {
            let fields: Vec<&str> = line.split_whitespace().take(5).collect();
            found.push(Entry {
                line: line.to_owned(),
                expression: fields.join(" "),
                zone,
            });
        }
    }
    found
}

fn import(fixture: &str, extra: &[&str]) -> (String, Vec<Job>, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    let input = input.to_str().expect("UTF-8 path");
    let mut args = vec!["import-crontab", input, "-o", "imported.toml"];
    args.extend_from_slice(extra);
    let run = redcron_in(dir.path(), &args, "");
    let stderr = run.stderr.clone();
    run.success();
    let toml = std::fs::read_to_string(dir.path().join("imported.toml")).expect("output written");
    let jobs = parse_file(Path::new("imported.toml"), &without_users(&toml))
        .unwrap_or_else(|errors| panic!("imported file does not load: {errors:#?}\n{toml}"));
    (toml, jobs, stderr)
}

/// An imported file without its `user` lines: those users must exist and need a replica run
/// as root, which the tests of `user` check apart.
pub fn without_users(toml: &str) -> String {
    toml.lines()
        .filter(|line| !line.starts_with("user = "))
        .map(|line| format!("{line}\n"))
        .collect()
}

fn fires(schedule: &Schedule, zone: Tz, after: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    schedule.fires_after(after, zone).take(50).collect()
}

#[test]
fn every_imported_job_fires_like_its_crontab_line() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/crontab"),
    )
    .expect("fixture");
    let (_, jobs, stderr) = import("crontab", &["--tz", "America/New_York"]);
    let entries = entries(&text, chrono_tz::America::New_York);
    assert_eq!(jobs.len(), entries.len(), "one job per entry");
    assert_eq!(jobs.len(), 19);
    assert!(stderr.contains("@reboot is not supported"), "{stderr}");

    // Starts just before both DST changes and at an ordinary time.
    let starts = [
        "2026-03-07T12:00:00Z",
        "2026-10-31T12:00:00Z",
        "2026-06-15T09:41:07Z",
    ]
    .map(|start| start.parse::<DateTime<Utc>>().expect("valid start"));
    for (job, entry) in jobs.iter().zip(&entries) {
        let original = Schedule::parse(&entry.expression).expect("the fixture's lines are valid");
        let imported = job
            .schedule
            .as_ref()
            .expect("imported jobs have a schedule");
        assert_eq!(job.timezone, entry.zone, "{}", entry.line);
        for start in starts {
            assert_eq!(
                fires(imported, job.timezone, start),
                fires(&original, entry.zone, start),
                "job {} differs from line {:?}",
                job.name,
                entry.line
            );
        }
        assert_eq!(job.retries, 0);
        assert_eq!(job.delivery, Delivery::AtMostOnce);
        assert_eq!(job.overlap, Overlap::Allow);
        assert_eq!(job.misfire, Misfire::Skip);
    }
}

#[test]
fn commands_environment_and_names_carry_over() {
    let (toml, jobs, _) = import("crontab", &["--tz", "UTC"]);
    let job = |name: &str| {
        jobs.iter()
            .find(|job| job.name == name)
            .unwrap_or_else(|| panic!("no job {name} in:\n{toml}"))
    };
    let backup = job("backup-sh-incremental");
    assert_eq!(
        backup.command,
        "/usr/local/bin/backup.sh --incremental >> /var/log/backup.log 2>&1"
    );
    assert_eq!(
        backup.env.get("MAILTO").map(String::as_str),
        Some("ops@example.com")
    );
    assert_eq!(backup.env.get("SHELL").map(String::as_str), Some("/bin/sh"));
    assert!(backup.env.contains_key("PATH"));
    assert!(job("backup-sh-full").command.contains("--full"));
    assert_eq!(
        job("month-end").command,
        "[ \"$(date -d tomorrow +%d)\" = \"01\" ] && /srv/app/bin/month-end"
    );
    assert_eq!(
        job("mail-s-good").command,
        "printf '%s' 'Stand-up at 9:30.\nBring coffee.' | (\nmail -s \"Good morning\" team@example.com\n)"
    );
    assert_eq!(job("tokyo-open").timezone, chrono_tz::Asia::Tokyo);
    assert_eq!(job("london-nightly").timezone, chrono_tz::Europe::London);
    assert!(
        toml.contains("# Backups, nightly and weekly."),
        "comments are kept"
    );
    assert!(
        toml.contains("# @reboot /srv/app/bin/start-workers"),
        "{toml}"
    );
}

#[test]
fn system_crontab_reads_the_user_field() {
    let (toml, jobs, _) = import("system-crontab", &["--system", "--tz", "UTC"]);
    assert_eq!(jobs.len(), 5);
    assert_eq!(
        jobs[0].command,
        "cd / && run-parts --report /etc/cron.hourly"
    );
    assert_eq!(
        jobs[0].schedule.as_ref().map(Schedule::as_str),
        Some("17 * * * *")
    );
    assert_eq!(jobs[4].command, "php /var/www/cron.php");
    assert_eq!(toml.matches("\nuser = \"root\"\n").count(), 4, "{toml}");
    assert!(toml.contains("\nuser = \"www-data\"\n"), "{toml}");
}

#[test]
fn reads_standard_input_and_writes_standard_output() {
    let run = redcron_in(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        &["import-crontab", "--tz", "Europe/Berlin"],
        "CRON_TZ=Bad/Zone\n0 4 * * * /usr/bin/true\n",
    );
    assert!(
        run.stderr
            .contains("line 1: unknown time zone \"Bad/Zone\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("imported 1 job, 1 line needs attention"),
        "{}",
        run.stderr
    );
    let toml = run.success();
    let jobs = parse_file(Path::new("-"), &toml).expect("output loads");
    assert_eq!(jobs[0].timezone, chrono_tz::Europe::Berlin);
}

#[test]
fn an_unreadable_file_is_an_error() {
    let errors = redcron(&["import-crontab", "no/such/crontab"]).failure(2);
    assert!(errors.contains("reading no/such/crontab"), "{errors}");
}

#[test]
fn crlf_line_ends_and_bytes_that_are_not_utf8_are_read_as_cron_reads_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let crontab = dir.path().join("crontab");
    std::fs::write(
        &crontab,
        b"# caf\xe9 \xff\r\n*/5 * * * * /usr/bin/true\r\n0 3 * * sun echo \xe9t\xe9 >> /tmp/log\r\n",
    )
    .expect("write the crontab");
    let run = redcron(&[
        "import-crontab",
        crontab.to_str().expect("UTF-8 path"),
        "--tz",
        "UTC",
    ]);
    assert!(run.stderr.contains("imported 2 jobs"), "{}", run.stderr);
    let toml = run.success();
    let jobs = parse_file(Path::new("-"), &toml).expect("output loads");
    assert_eq!(jobs[0].command, "/usr/bin/true", "no carriage return left");
    assert_eq!(jobs[1].command, "echo \u{fffd}t\u{fffd} >> /tmp/log");
}

#[test]
fn a_crontab_of_100000_lines_is_imported_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let crontab = dir.path().join("crontab");
    let lines: String = (0..100_000)
        .map(|i| {
            format!(
                "{} {} * * {} /usr/local/bin/task-{i} >> /var/log/task-{i}.log 2>&1\n",
                i % 60,
                i % 24,
                ["*", "mon-fri", "0", "1,3,5"][i % 4]
            )
        })
        .collect();
    std::fs::write(&crontab, lines).expect("write the crontab");
    let output = dir.path().join("imported.toml");
    let run = redcron(&[
        "import-crontab",
        crontab.to_str().expect("UTF-8 path"),
        "--tz",
        "UTC",
        "-o",
        output.to_str().expect("UTF-8 path"),
    ]);
    assert!(
        run.stderr.contains("imported 100000 jobs"),
        "{}",
        run.stderr
    );
    run.success();
    let toml = std::fs::read_to_string(&output).expect("the schedule file");
    assert_eq!(toml.matches("\n[jobs.").count(), 100_000);
    assert!(
        toml.contains("command = \"/usr/local/bin/task-99999 >> /var/log/task-99999.log 2>&1\"")
    );
}
