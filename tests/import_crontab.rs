//! `redcron import-crontab`: every imported job fires exactly when its crontab line would.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use redcron::schedule::{Delivery, Event, Job, Misfire, Overlap, Schedule, Target, parse_file};

use crate::util::{Run, fake_sendmail, redcron, redcron_in_with_env, without_users};

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
    // The fixtures hold an `@reboot` line, a problem that would make the import exit 1.
    let mut args = vec![
        "import-crontab",
        input,
        "-o",
        "imported.toml",
        "--keep-going",
    ];
    args.extend_from_slice(extra);
    let run = import_in(dir.path(), &args, "");
    let stderr = run.stderr.clone();
    run.success();
    let toml = std::fs::read_to_string(dir.path().join("imported.toml")).expect("output written");
    let jobs = parse_file(Path::new("imported.toml"), &without_users(&toml))
        .unwrap_or_else(|errors| panic!("imported file does not load: {errors:#?}\n{toml}"));
    (toml, jobs, stderr)
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
    assert!(!backup.env.contains_key("MAILTO"), "MAILTO is a notice");
    let notices = backup.notify.as_ref().expect("MAILTO gives a notice");
    assert_eq!(
        notices.targets,
        [Target::Mail {
            to: vec!["ops@example.com".to_owned()],
            from: None,
            cron_subject: false,
        }]
    );
    assert_eq!(notices.on, [Event::Output]);
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
    let run = import_in(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        &["import-crontab", "--tz", "Europe/Berlin"],
        "CRON_TZ=Bad/Zone\n0 4 * * * /usr/bin/true\n",
    );
    assert!(
        run.stderr
            .contains("<stdin>:1: unknown time zone \"Bad/Zone\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("imported 1 job, 1 line needs attention"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("the schedule file went to standard output anyway"),
        "{}",
        run.stderr
    );
    assert_eq!(run.code, Some(1), "a bad CRON_TZ is a problem");
    assert!(
        run.stdout
            .contains("# redcron: line 1: unknown time zone \"Bad/Zone\""),
        "{}",
        run.stdout
    );
    let jobs = parse_file(Path::new("-"), &run.stdout).expect("output loads");
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

/// Runs `redcron args...` in `dir` with `stdin` on a machine with a `sendmail` (a fake one in a
/// directory of its own, never `dir`, which may be the source tree): what an import finds does
/// not depend on this machine's mail setup.
fn import_in(dir: &Path, args: &[&str], stdin: &str) -> Run {
    let mail = tempfile::tempdir().expect("temp dir");
    let sendmail = fake_sendmail(mail.path());
    redcron_in_with_env(
        dir,
        args,
        stdin,
        &[("REDCRON_SENDMAIL", sendmail.as_os_str())],
    )
}

/// Runs `redcron args...` in `dir` with `env` added to its environment.
fn redcron_with_env(dir: &Path, args: &[&str], env: &[(&str, &OsStr)]) -> Run {
    redcron_in_with_env(dir, args, "", env)
}

/// Imports `crontab` given on standard input in `dir`; the run and the jobs of the schedule
/// file it printed.
fn import_text(dir: &Path, crontab: &str, extra: &[&str]) -> (Run, Vec<Job>) {
    let mut args = vec!["import-crontab", "--tz", "UTC"];
    args.extend_from_slice(extra);
    let run = import_in(dir, &args, crontab);
    let jobs = parse_file(Path::new("-"), &without_users(&run.stdout))
        .unwrap_or_else(|errors| panic!("imported file does not load: {errors:#?}"));
    (run, jobs)
}

fn mail_targets(job: &Job) -> Option<(Vec<Target>, Vec<Event>)> {
    job.notify
        .as_ref()
        .map(|notices| (notices.targets.clone(), notices.on.clone()))
}

#[test]
fn mailto_becomes_an_output_notice_of_the_jobs_below_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let crontab = "\
0 1 * * * /srv/bin/unset
MAILTO=\"ops@example.com\"
0 2 * * * /srv/bin/one
MAILTO=ops@example.com,dev@example.com
0 3 * * * /srv/bin/list
MAILTO=\"\"
0 4 * * * /srv/bin/quiet
";
    let (run, jobs) = import_text(dir.path(), crontab, &[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    assert_eq!(names, ["unset", "one", "list", "quiet"]);
    let job = |name: &str| {
        jobs.iter()
            .find(|job| job.name == name)
            .expect("an imported job")
    };
    assert_eq!(mail_targets(job("unset")), None);
    assert_eq!(
        mail_targets(job("one")),
        Some((
            vec![Target::Mail {
                to: vec!["ops@example.com".to_owned()],
                from: None,
                cron_subject: false,
            }],
            vec![Event::Output]
        ))
    );
    assert_eq!(
        mail_targets(job("list")),
        Some((
            vec![Target::Mail {
                to: vec!["ops@example.com".to_owned(), "dev@example.com".to_owned()],
                from: None,
                cron_subject: false,
            }],
            vec![Event::Output]
        ))
    );
    assert_eq!(mail_targets(job("quiet")), None);
    assert!(jobs.iter().all(|job| !job.env.contains_key("MAILTO")));
    let header: Vec<&str> = run
        .stdout
        .lines()
        .take_while(|line| line.starts_with('#'))
        .collect();
    assert!(
        header
            .iter()
            .any(|line| line.contains("no MAILTO above them send no notice")),
        "the job before any MAILTO is told about in the header: {header:#?}"
    );
}

#[test]
fn a_mailto_a_schedule_file_refuses_is_marked_and_sends_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, jobs) = import_text(
        dir.path(),
        "MAILTO=-oQ/tmp/x\n0 1 * * * /srv/bin/job\n",
        &["--keep-going"],
    );
    assert_eq!(run.code, Some(0), "--keep-going: {}", run.stderr);
    assert!(
        run.stderr.contains("<stdin>:1: bad MAILTO: \"-oQ/tmp/x\""),
        "{}",
        run.stderr
    );
    assert!(
        run.stdout
            .contains("# redcron: line 1: bad MAILTO: \"-oQ/tmp/x\""),
        "{}",
        run.stdout
    );
    assert_eq!(mail_targets(&jobs[0]), None);
}

/// A cron directory with `backup` and `php` (which Debian's cron reads) and files it skips.
fn cron_dir(root: &Path) -> PathBuf {
    let cron_d = root.join("cron.d");
    std::fs::create_dir(&cron_d).expect("mkdir cron.d");
    let backup = "MAILTO=ops@example.com\n15 2 * * * root /usr/local/bin/backup.sh\n";
    std::fs::write(cron_d.join("backup"), backup).expect("write backup");
    std::fs::write(
        cron_d.join("php"),
        "09,39 * * * * root /usr/local/bin/backup.sh --sessions\n",
    )
    .expect("write php");
    for skipped in ["backup.dpkg-old", ".placeholder", "php~"] {
        std::fs::write(cron_d.join(skipped), "* * * * * root /bin/skipped\n")
            .expect("write a skipped file");
    }
    cron_d
}

fn names_in(path: &Path) -> Vec<String> {
    let toml = std::fs::read_to_string(path).expect("a schedule file");
    parse_file(path, &without_users(&toml))
        .unwrap_or_else(|errors| panic!("{} does not load: {errors:#?}", path.display()))
        .into_iter()
        .map(|job| job.name)
        .collect()
}

#[test]
fn a_cron_directory_becomes_one_schedule_file_per_crontab_cron_reads() {
    let root = tempfile::tempdir().expect("temp dir");
    let cron_d = cron_dir(root.path());
    let out = root.path().join("schedules/imported");
    let run = import_in(
        root.path(),
        &[
            "import-crontab",
            "--dir",
            cron_d.to_str().expect("UTF-8 path"),
            "-o",
            out.to_str().expect("UTF-8 path"),
            "--tz",
            "UTC",
        ],
        "",
    );
    assert!(
        run.stderr.contains("imported 2 jobs from 2 files into"),
        "{}",
        run.stderr
    );
    for skipped in ["backup.dpkg-old", ".placeholder", "php~"] {
        assert!(
            run.stderr
                .contains(&format!("skipping {}", cron_d.join(skipped).display())),
            "{skipped}: {}",
            run.stderr
        );
    }
    run.success();
    let mut written: Vec<String> = std::fs::read_dir(&out)
        .expect("the output directory was created")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    written.sort();
    assert_eq!(written, ["backup.toml", "php.toml"]);
    let backup = std::fs::read_to_string(out.join("backup.toml")).expect("backup.toml");
    assert!(
        backup.contains("\nuser = \"root\"\n"),
        "system format: {backup}"
    );
    assert!(
        backup.contains("\nnotify = [\"mailto:ops@example.com\"]\n"),
        "{backup}"
    );
    assert_eq!(names_in(&out.join("backup.toml")), ["backup-sh"]);
    assert_eq!(names_in(&out.join("php.toml")), ["backup-sh-sessions"]);
}

#[test]
fn dir_needs_an_output_directory() {
    let root = tempfile::tempdir().expect("temp dir");
    let cron_d = cron_dir(root.path());
    let errors = redcron(&[
        "import-crontab",
        "--dir",
        cron_d.to_str().expect("UTF-8 path"),
    ])
    .failure(2);
    assert!(errors.contains("--dir needs -o DIR"), "{errors}");
    let file = root.path().join("file.toml");
    std::fs::write(&file, "").expect("write a file");
    let errors = redcron(&[
        "import-crontab",
        "--dir",
        cron_d.to_str().expect("UTF-8 path"),
        "-o",
        file.to_str().expect("UTF-8 path"),
    ])
    .failure(2);
    assert!(errors.contains("is not a directory"), "{errors}");
}

#[test]
fn names_are_unique_across_the_files_written_and_the_schedules_already_there() {
    let root = tempfile::tempdir().expect("temp dir");
    let cron_d = root.path().join("cron.d");
    std::fs::create_dir(&cron_d).expect("mkdir cron.d");
    for name in ["a", "b"] {
        std::fs::write(
            cron_d.join(name),
            "@daily root /usr/local/bin/backup.sh >/dev/null 2>&1\n",
        )
        .expect("write a crontab");
    }
    let out = root.path().join("schedules");
    std::fs::create_dir(&out).expect("mkdir schedules");
    std::fs::write(
        out.join("mine.toml"),
        "[jobs.backup-sh]\ncommand = \"/usr/local/bin/backup.sh\"\n",
    )
    .expect("write an existing schedule file");
    let import = || {
        redcron(&[
            "import-crontab",
            "--dir",
            cron_d.to_str().expect("UTF-8 path"),
            "-o",
            out.to_str().expect("UTF-8 path"),
            "--tz",
            "UTC",
        ])
        .success()
    };
    import();
    assert_eq!(names_in(&out.join("a.toml")), ["backup-sh-2"]);
    assert_eq!(names_in(&out.join("b.toml")), ["backup-sh-3"]);
    // Importing again rewrites the same files: their own names are not taken by themselves.
    import();
    assert_eq!(names_in(&out.join("a.toml")), ["backup-sh-2"]);
    assert_eq!(names_in(&out.join("b.toml")), ["backup-sh-3"]);
}

#[test]
fn a_single_file_avoids_the_names_of_the_schedules_beside_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("mine.toml"),
        "[jobs.true]\ncommand = \"true\"\n",
    )
    .expect("write an existing schedule file");
    import_in(
        dir.path(),
        &["import-crontab", "--tz", "UTC", "-o", "imported.toml"],
        "@daily true\n",
    )
    .success();
    assert_eq!(names_in(&dir.path().join("imported.toml")), ["true-2"]);
}

#[test]
fn prefix_starts_every_job_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (run, jobs) = import_text(
        dir.path(),
        "@daily /srv/bin/poll || exit 1\n@hourly exit 1\n",
        &["--prefix", "web1"],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let names: Vec<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
    assert_eq!(names, ["web1-poll", "web1-exit"]);
    let errors = import_in(
        dir.path(),
        &["import-crontab", "--prefix", "Web 1"],
        "@daily true\n",
    )
    .failure(2);
    assert!(errors.contains("bad prefix"), "{errors}");
}

#[test]
fn problems_exit_1_unless_keep_going_and_the_files_are_written_with_marks() {
    let dir = tempfile::tempdir().expect("temp dir");
    let crontab = "\
CRON_TZ=Mars/Olympus
0 1 * * * /srv/bin/first
@reboot /srv/bin/start
61 * * * * /srv/bin/bad-minute
0 2 * * * /srv/bin/second
";
    std::fs::write(dir.path().join("crontab"), crontab).expect("write the crontab");
    let args = ["import-crontab", "crontab", "--tz", "UTC", "-o", "out.toml"];
    let errors = import_in(dir.path(), &args, "").failure(1);
    for expected in [
        "crontab:1: unknown time zone \"Mars/Olympus\"; the jobs below keep UTC",
        "crontab:3: not imported: @reboot is not supported",
        "crontab:4: not imported: minute field \"61\"",
        "3 crontab lines need attention: the schedule file was written anyway",
        "--keep-going",
    ] {
        assert!(errors.contains(expected), "{expected}: {errors}");
    }
    let toml = std::fs::read_to_string(dir.path().join("out.toml")).expect("written anyway");
    for (mark, line) in [
        (
            "# redcron: line 1: unknown time zone \"Mars/Olympus\"",
            "# CRON_TZ=Mars/Olympus",
        ),
        (
            "# redcron: line 3: not imported: @reboot",
            "# @reboot /srv/bin/start",
        ),
        (
            "# redcron: line 4: not imported: minute field \"61\"",
            "# 61 * * * * /srv/bin/bad-minute",
        ),
    ] {
        let at = toml
            .lines()
            .position(|text| text.starts_with(mark))
            .unwrap_or_else(|| panic!("no mark {mark:?} in:\n{toml}"));
        assert_eq!(
            toml.lines().nth(at + 1),
            Some(line),
            "the mark is right above its line:\n{toml}"
        );
    }
    let jobs = parse_file(Path::new("out.toml"), &toml).expect("the file loads");
    assert_eq!(jobs.len(), 2);
    assert!(jobs.iter().all(|job| job.timezone == chrono_tz::UTC));

    std::fs::remove_file(dir.path().join("out.toml")).expect("remove the output");
    let mut keep_going = args.to_vec();
    keep_going.push("--keep-going");
    let run = import_in(dir.path(), &keep_going, "");
    assert!(
        run.stderr.contains("3 lines need attention (see above)"),
        "{}",
        run.stderr
    );
    run.success();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.toml")).expect("written"),
        toml
    );
}

#[test]
fn a_user_missing_here_is_reported_and_its_job_kept() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("crontab"),
        "@daily root /bin/a\n@daily no-such-user-4711 /srv/bin/b\n",
    )
    .expect("write the crontab");
    let errors = import_in(
        dir.path(),
        &[
            "import-crontab",
            "crontab",
            "--system",
            "--tz",
            "UTC",
            "-o",
            "out.toml",
        ],
        "",
    )
    .failure(1);
    assert!(
        errors.contains("crontab:2: no user \"no-such-user-4711\" on this machine"),
        "{errors}"
    );
    assert!(!errors.contains("crontab:1:"), "root exists: {errors}");
    let toml = std::fs::read_to_string(dir.path().join("out.toml")).expect("written anyway");
    assert!(
        toml.contains("# redcron: line 2: no user \"no-such-user-4711\"")
            && toml.contains("\nuser = \"no-such-user-4711\"\n"),
        "{toml}"
    );
    assert_eq!(names_in(&dir.path().join("out.toml")), ["a", "b"]);
}

#[test]
fn an_imported_crontab_that_mails_passes_check_where_sendmail_exists() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    std::fs::create_dir(&schedules).expect("mkdir schedules");
    let crontab = "MAILTO=ops@example.com\n*/5 * * * * echo disk full; exit 3\n";
    import_in(
        dir.path(),
        &[
            "import-crontab",
            "--tz",
            "UTC",
            "-o",
            "schedules/crontab.toml",
        ],
        crontab,
    )
    .success();
    let sendmail = fake_sendmail(dir.path());
    let check = |sendmail: &Path| {
        redcron_with_env(
            dir.path(),
            &["check", "--schedules", "schedules"],
            &[("REDCRON_SENDMAIL", sendmail.as_os_str())],
        )
    };
    let out = check(&sendmail).success();
    assert!(out.contains("1 job in schedules: all valid"), "{out}");
    assert!(
        out.contains("echo"),
        "the job is named for its program: {out}"
    );
    // The same directory without a sendmail is refused: the check above saw the mail target.
    let errors = check(&dir.path().join("no-sendmail")).failure(1);
    assert!(
        errors.contains("a mailto: target needs sendmail"),
        "{errors}"
    );
}

#[test]
fn a_mailto_on_a_machine_without_sendmail_is_a_problem_said_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let crontab = "MAILTO=ops@example.com\n0 1 * * * /srv/bin/a\nMAILTO=dev@example.com\n\
                   0 2 * * * /srv/bin/b\n";
    let nowhere = dir.path().join("no-sendmail-here");
    let run = redcron_in_with_env(
        dir.path(),
        &["import-crontab", "--tz", "UTC", "-o", "out.toml"],
        crontab,
        &[("REDCRON_SENDMAIL", nowhere.as_os_str())],
    );
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_eq!(
        run.stderr.matches("this machine has no sendmail").count(),
        1,
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains("<stdin>:1: this machine has no sendmail"),
        "{}",
        run.stderr
    );
    let toml = std::fs::read_to_string(dir.path().join("out.toml")).expect("written anyway");
    assert!(
        toml.contains("# redcron: line 1: this machine has no sendmail"),
        "marked next to its line:\n{toml}"
    );
}
