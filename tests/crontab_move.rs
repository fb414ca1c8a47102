//! Moving a server's crontab over: what the importer writes loads where it was written, a
//! system crontab read the wrong way is said, a missing `sendmail` is said once, the hours a
//! job runs at are said when the machine's clock is not on UTC, a `MAILFROM` sends the mail
//! (with cron's subject when asked), and the drop-in for a system crontab lifts the hardening.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::{fake_sendmail, redcron_in_with_env, wait_until};

/// Runs `redcron args...` in `dir` with `env` added to its environment.
fn redcron_with_env(dir: &Path, args: &[&str], env: &[(&str, &OsStr)]) -> crate::util::Run {
    redcron_in_with_env(dir, args, "", env)
}

/// `/etc/cron.d` as a Debian server has it: two crontabs in the system format.
fn cron_d(root: &Path) -> std::path::PathBuf {
    let dir = root.join("cron.d");
    std::fs::create_dir(&dir).expect("cron.d");
    std::fs::write(
        dir.join("certbot"),
        "0 */12 * * * root test -x /usr/bin/certbot && certbot -q renew\n",
    )
    .expect("certbot");
    std::fs::write(
        dir.join("logs"),
        "30 4 * * * root find /var/log/app -name '*.gz' -mtime +14 -delete\n",
    )
    .expect("logs");
    dir
}

/// The guide's own example: `import-crontab --dir /etc/cron.d -o schedules/cron.d` writes into
/// a subdirectory of the schedule directory, and `check` loads those jobs with the others.
#[test]
fn a_crontab_directory_imported_into_a_subdirectory_loads_with_the_schedules() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cron_d = cron_d(dir.path());
    let schedules = dir.path().join("schedules");
    std::fs::create_dir(&schedules).expect("schedules");
    std::fs::write(
        schedules.join("reports.toml"),
        "[jobs.report]\nschedule = \"0 6 * * *\"\ncommand = \"true\"\n",
    )
    .expect("reports");
    let cron_d = cron_d.to_str().expect("UTF-8");
    let run = redcron_with_env(
        dir.path(),
        &[
            "import-crontab",
            "--dir",
            cron_d,
            "-o",
            "schedules/cron.d",
            "--tz",
            "UTC",
        ],
        &[],
    );
    let stderr = run.stderr.clone();
    run.success();
    assert!(
        stderr.contains("imported 2 jobs from 2 files into schedules/cron.d"),
        "{stderr}"
    );
    let out = redcron_with_env(dir.path(), &["check", "--schedules", "schedules"], &[]).success();
    assert!(out.contains("3 jobs in schedules: all valid"), "{out}");
    for name in ["report", "certbot-q-renew", "find-var-log-app-name"] {
        assert!(
            out.lines()
                .any(|line| line.starts_with(&format!("{name} "))),
            "{name} is not among the jobs checked:\n{out}"
        );
    }
}

/// A file dropped into a subdirectory of a watched schedule directory is loaded and fires.
#[test]
fn watch_loads_a_file_written_into_a_subdirectory() {
    let scenario = Scenario::new();
    scenario.write_jobs("[jobs.idle]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n");
    let replica = scenario.replica("r1", &["--watch"]);
    assert!(
        wait_until(Duration::from_secs(15), || replica
            .log()
            .contains("watching the schedule directory")),
        "the watch did not start:\n{}",
        replica.log()
    );
    let imported = scenario.schedules().join("cron.d");
    std::fs::create_dir(&imported).expect("cron.d");
    std::fs::write(
        imported.join("tick.toml"),
        format!(
            "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"{}\"\n",
            scenario.record("tick")
        ),
    )
    .expect("tick.toml");
    assert!(
        wait_until(Duration::from_secs(20), || scenario
            .ledger()
            .iter()
            .any(|(_, _, tag)| tag == "tick")),
        "the job of the subdirectory never ran:\n{}",
        replica.log()
    );
}

/// `/etc/crontab` read without `--system` would run `root cd / && run-parts ...`: said, with
/// the fix, and the import exits 1.
#[test]
fn a_system_crontab_read_as_a_users_suggests_system() {
    let dir = tempfile::tempdir().expect("temp dir");
    let crontab = "SHELL=/bin/sh\n\
                   17 *\t* * *\troot    cd / && run-parts --report /etc/cron.hourly\n";
    let run = redcron_in_with_env(dir.path(), &["import-crontab", "--tz", "UTC"], crontab, &[]);
    let stderr = run.stderr.clone();
    assert_eq!(run.code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "<stdin>:2: the command starts with \"root\", a user on this machine and no program"
        ) && stderr.contains("import it with --system"),
        "{stderr}"
    );
    // Read as what it is, the same crontab imports clean.
    let run = redcron_in_with_env(
        dir.path(),
        &["import-crontab", "--system", "--tz", "UTC"],
        crontab,
        &[],
    );
    let stderr = run.stderr.clone();
    let toml = run.success();
    assert!(!stderr.contains("--system"), "{stderr}");
    assert!(toml.contains("user = \"root\""), "{toml}");
}

/// Three files whose jobs mail, on a machine whose `PATH` has no `sendmail`: `check` and
/// `next --job` say it once for the directory, not once per job.
#[test]
fn a_missing_sendmail_is_said_once_for_the_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    std::fs::create_dir(&schedules).expect("schedules");
    std::fs::write(
        schedules.join("a.toml"),
        "[defaults]\nnotify = [\"mailto:ops@example.com\"]\n\n\
         [jobs.backup]\nschedule = \"0 3 * * *\"\ncommand = \"true\"\n",
    )
    .expect("a");
    for name in ["b", "c"] {
        std::fs::write(
            schedules.join(format!("{name}.toml")),
            format!(
                "[jobs.{name}]\nschedule = \"0 4 * * *\"\ncommand = \"true\"\n\
                 notify = [\"mailto:ops@example.com\"]\n"
            ),
        )
        .expect("file");
    }
    let empty = tempfile::tempdir().expect("a PATH without sendmail");
    let mut env = vec![("PATH", empty.path().as_os_str())];
    // A machine with a mail transfer agent installed has a sendmail where no PATH reaches:
    // the one REDCRON_SENDMAIL names is looked for instead, and is not there either.
    let missing = empty.path().join("sendmail");
    if ["/usr/sbin/sendmail", "/usr/lib/sendmail"]
        .iter()
        .any(|path| Path::new(path).exists())
    {
        env.push(("REDCRON_SENDMAIL", missing.as_os_str()));
    }
    for args in [
        &["check", "--schedules", "schedules"][..],
        &["next", "--job", "b", "--schedules", "schedules"][..],
    ] {
        let stderr = redcron_with_env(dir.path(), args, &env).failure(1);
        assert_eq!(
            stderr.matches("needs sendmail").count(),
            1,
            "{args:?}:\n{stderr}"
        );
        assert!(
            stderr.contains(
                "a.toml:2:10: field \"defaults.notify\": a mailto: target needs sendmail"
            ) && stderr.contains("(said once: 2 other jobs mail too: b, c)"),
            "{args:?}:\n{stderr}"
        );
    }
}

/// `TZ=Europe/Berlin redcron next '30 3 * * *'` prints UTC times, as a job with no timezone
/// runs, and says so; `check` names the jobs that read their hours in UTC, and not a job whose
/// file declares the zone in its `[defaults]`.
#[test]
fn the_zone_is_said_when_the_machine_is_not_on_utc() {
    let dir = tempfile::tempdir().expect("temp dir");
    let berlin = [("TZ", OsStr::new("Europe/Berlin"))];
    let run = redcron_with_env(
        dir.path(),
        &[
            "next",
            "30 3 * * *",
            "--after",
            "2026-07-01T00:00:00Z",
            "-n",
            "1",
        ],
        &berlin,
    );
    let stderr = run.stderr.clone();
    assert_eq!(run.success(), "2026-07-01T03:30:00+00:00\n");
    assert!(
        stderr.contains(
            "reading the fields in UTC, as a job with no timezone does; this machine's zone is \
             Europe/Berlin: pass --tz Europe/Berlin for its clock"
        ),
        "{stderr}"
    );
    let run = redcron_with_env(
        dir.path(),
        &["next", "30 3 * * *", "--tz", "Europe/Berlin", "-n", "1"],
        &berlin,
    );
    assert_eq!(run.stderr, "", "--tz says the zone: nothing to warn of");

    let schedules = dir.path().join("schedules");
    std::fs::create_dir(&schedules).expect("schedules");
    std::fs::write(
        schedules.join("utc.toml"),
        "[jobs.report]\nschedule = \"0 6 * * *\"\ncommand = \"true\"\n",
    )
    .expect("utc");
    std::fs::write(
        schedules.join("local.toml"),
        "[defaults]\ntimezone = \"Europe/Berlin\"\n\n\
         [jobs.backup]\nschedule = \"0 3 * * *\"\ncommand = \"true\"\n",
    )
    .expect("local");
    let out =
        redcron_with_env(dir.path(), &["check", "--schedules", "schedules"], &berlin).success();
    assert!(
        out.contains(
            "note: this machine's zone is Europe/Berlin, and 1 job reads its hours in UTC (the \
             zone of a job that names none): report."
        ),
        "{out}"
    );
    let utc = [("TZ", OsStr::new("UTC"))];
    let out = redcron_with_env(dir.path(), &["check", "--schedules", "schedules"], &utc).success();
    assert!(!out.contains("note:"), "{out}");
}

/// A mail target with a sender (what `MAILFROM` becomes) mails from it, `From:` and the
/// envelope's; with `subject=cron`, the subject is cron's, with the job's command.
#[test]
fn a_mail_goes_from_its_sender() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let sendmail = fake_sendmail(dir);
    let bin = sendmail.parent().expect("its directory");
    scenario.write_jobs(
        "[jobs.report]\ncommand = \"echo done\"\n\
         notify = [\"mailto:ops@example.com?from=cron@web1.example.com&subject=cron\"]\n\
         notify_on = [\"output\"]\n",
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let replica = ReplicaProcess::start_with_env(
        "r1",
        &scenario.server.url(),
        &scenario.schedules(),
        dir,
        &[],
        &[("PATH", &path)],
    );
    scenario.trigger("report");
    let mail_log = dir.join("mail.log");
    assert!(
        wait_until(Duration::from_secs(15), || std::fs::read_to_string(
            &mail_log
        )
        .is_ok_and(|mail| mail.contains("--END--"))),
        "no mail:\n{}",
        replica.log()
    );
    let mail = std::fs::read_to_string(&mail_log).expect("mail.log");
    assert!(
        mail.starts_with("ARGS: -i -f cron@web1.example.com -- ops@example.com\n"),
        "{mail}"
    );
    assert!(mail.contains("\nFrom: cron@web1.example.com\n"), "{mail}");
    let subject = mail
        .lines()
        .find_map(|line| line.strip_prefix("Subject: "))
        .unwrap_or_default();
    assert!(
        subject.starts_with("Cron <") && subject.ends_with("> echo done"),
        "{mail}"
    );
}

/// The drop-in for replacing a system crontab: systemd reads it with the unit without a word,
/// and it lifts each setting that binds a root crontab's jobs.
#[test]
fn the_system_crontab_drop_in_passes_verify_and_lifts_the_hardening() {
    const UNIT: &str = include_str!("../contrib/redcron.service");
    const DROP_IN: &str = include_str!("../contrib/systemd/system-crontab.conf");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("redcron.service"),
        UNIT.replace("/usr/bin/redcron", env!("CARGO_BIN_EXE_redcron")),
    )
    .expect("the unit");
    let drop_ins = dir.path().join("redcron.service.d");
    std::fs::create_dir(&drop_ins).expect("drop-in directory");
    std::fs::write(drop_ins.join("system-crontab.conf"), DROP_IN).expect("the drop-in");
    let verified = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.path().join("redcron.service"))
        .output()
        .expect("systemd-analyze runs (sudo apt-get install -y systemd)");
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&verified.stderr)
    );
    for (setting, in_unit) in [
        ("User=", "User=redcron"),
        ("ProtectSystem=", "ProtectSystem=strict"),
        ("ProtectHome=", "ProtectHome=read-only"),
        ("PrivateTmp=", "PrivateTmp=yes"),
        ("NoNewPrivileges=", "NoNewPrivileges=yes"),
    ] {
        assert!(
            UNIT.lines().any(|line| line == in_unit),
            "the unit no longer says {in_unit}"
        );
        let lifted = DROP_IN
            .lines()
            .find(|line| line.starts_with(setting))
            .unwrap_or_else(|| panic!("the drop-in leaves {in_unit}"));
        assert_ne!(lifted, in_unit);
    }
}

/// Starts a replica on a job that prints 108,894 bytes and mails them, with `env` added; the
/// mail it sent.
fn mail_of_long_output(env: &[(&str, &str)]) -> String {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let sendmail = fake_sendmail(dir);
    let bin = sendmail.parent().expect("its directory");
    scenario.write_jobs(
        "[jobs.chatty]\ncommand = \"seq 1 20000\"\n\
         notify = [\"mailto:ops@example.com\"]\nnotify_on = [\"output\"]\n",
    );
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut env = env.to_vec();
    env.push(("PATH", &path));
    let replica = ReplicaProcess::start_with_env(
        "r1",
        &scenario.server.url(),
        &scenario.schedules(),
        dir,
        &[],
        &env,
    );
    scenario.trigger("chatty");
    let mail_log = dir.join("mail.log");
    assert!(
        wait_until(Duration::from_secs(15), || std::fs::read_to_string(
            &mail_log
        )
        .is_ok_and(|mail| mail.contains("--END--"))),
        "no mail:\n{}",
        replica.log()
    );
    std::fs::read_to_string(&mail_log).expect("mail.log")
}

/// cron mails all of a job's output: the mail carries it up to the limit (1 MiB unless
/// `REDCRON_MAIL_OUTPUT_LIMIT` says), while the run keeps its last 4 KiB; past the limit it is
/// cut, and the mail says where.
#[test]
fn a_mail_carries_the_output_up_to_its_limit() {
    let mail = mail_of_long_output(&[]);
    let expected: String = (1..=20000).map(|n| format!("{n}\n")).collect();
    assert!(
        mail.contains(&format!("\nOutput:\n\n{expected}")),
        "the whole output is not in the mail:\n{}",
        &mail[..mail.len().min(2000)]
    );
    assert!(
        !mail.contains("[redcron: the output is cut"),
        "nothing to cut"
    );

    let mail = mail_of_long_output(&[("REDCRON_MAIL_OUTPUT_LIMIT", "10KiB")]);
    assert!(mail.contains("\nOutput:\n\n1\n2\n3\n"), "{mail}");
    assert!(
        mail.contains("[redcron: the output is cut here, at 10240 bytes of 108894; its last 4 KiB are kept with the run: redcron runs show "),
        "{mail}"
    );
    assert!(!mail.contains("\n20000\n"), "past the limit: {mail}");

    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("schedules")).expect("schedules");
    let run = redcron_with_env(
        dir.path(),
        &[
            "run",
            "--schedules",
            "schedules",
            "--redis",
            "redis://127.0.0.1:1",
        ],
        &[("REDCRON_MAIL_OUTPUT_LIMIT", OsStr::new("4MB"))],
    );
    assert_ne!(run.code, Some(0));
    assert!(
        run.stderr
            .contains("REDCRON_MAIL_OUTPUT_LIMIT=\"4MB\" is not a size"),
        "{}",
        run.stderr
    );
}
