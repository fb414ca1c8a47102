//! Moving a server's crontab over: what the importer writes loads where it was written, and a
//! missing `sendmail` is said once.

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use crate::replicas::Scenario;
use crate::util::{redcron_in_with_env, wait_until};

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

/// The README's own example: `import-crontab --dir /etc/cron.d -o schedules/cron.d` writes into
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
    let path = empty.path().as_os_str();
    for args in [
        &["check", "--schedules", "schedules"][..],
        &["next", "--job", "b", "--schedules", "schedules"][..],
    ] {
        let stderr = redcron_with_env(dir.path(), args, &[("PATH", path)]).failure(1);
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
