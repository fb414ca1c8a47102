//! Under systemd (`JOURNAL_STREAM` names the replica's standard error), log lines go to the
//! journal as entries whose fields name the job and the run; when the journal does not take
//! them, they go to standard error as readable lines, and none is lost.

use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::Duration;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::wait_until;

/// Where journald listens for entries.
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Whether a journald takes entries on this machine.
fn journald_listens() -> bool {
    UnixDatagram::unbound()
        .and_then(|socket| socket.connect(JOURNAL_SOCKET))
        .is_ok()
}

/// The journal's entries of one run, as `journalctl -o json` prints them.
fn journal_entries(run_id: &str) -> Vec<serde_json::Value> {
    let output = Command::new("journalctl")
        .args(["--no-pager", "-o", "json", &format!("RUN={run_id}")])
        .output()
        .expect("journalctl runs where journald does (apt-get install -y systemd)");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON entry a line"))
        .collect()
}

#[test]
fn a_replica_whose_stderr_is_the_journal_logs_entries_with_job_and_run_fields() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    scenario.write_jobs(
        "[jobs.chatty]\noutput = \"log\"\ncommand = \"echo journal-marker-line; exit 4\"\n",
    );
    // The replica's log file is its standard error; systemd names the journal's stream by its
    // device and inode, and the file keeps its inode when the replica's start truncates it.
    let log = dir.join("r1.log");
    std::fs::write(&log, "").expect("the log file");
    let stat = std::fs::metadata(&log).expect("stat the log file");
    let stream = format!("{}:{}", stat.dev(), stat.ino());
    let replica = ReplicaProcess::start_with_env(
        "r1",
        &scenario.server.url(),
        &scenario.schedules(),
        dir,
        &[],
        &[("JOURNAL_STREAM", &stream)],
    );
    let run_id = scenario.trigger("chatty");

    if journald_listens() {
        let mut entries = Vec::new();
        assert!(
            wait_until(Duration::from_secs(10), || {
                entries = journal_entries(&run_id);
                entries
                    .iter()
                    .any(|entry| entry["MESSAGE"] == "journal-marker-line")
                    && entries.iter().any(|entry| entry["EXIT_CODE"] == "4")
            }),
            "the run's lines are not in the journal: {entries:?}\nstderr:\n{}",
            replica.log()
        );
        let output = entries
            .iter()
            .find(|entry| entry["MESSAGE"] == "journal-marker-line")
            .expect("the output line");
        assert_eq!(output["JOB"], "chatty", "{output}");
        assert_eq!(output["SYSLOG_IDENTIFIER"], "redcron", "{output}");
        assert_eq!(output["TARGET"], "redcron::output", "{output}");
        let failure = entries
            .iter()
            .find(|entry| entry["EXIT_CODE"] == "4")
            .expect("the failure");
        assert_eq!(
            failure["PRIORITY"], "4",
            "a failure is a warning: {failure}"
        );
        assert_eq!(failure["ATTEMPT"], "1", "{failure}");
        assert!(
            !replica.log().contains("journal-marker-line"),
            "an entry the journal took is not written twice:\n{}",
            replica.log()
        );
    } else {
        // No journald here: the lines are on standard error, readable, with their values. The
        // failure is logged after the output line, once the run is recorded: both are waited for.
        assert!(
            wait_until(Duration::from_secs(10), || {
                let log = replica.log();
                log.lines().any(|line| {
                    line.starts_with("journal-marker-line ")
                        && line.contains(&format!("run=\"{run_id}\""))
                        && line.contains("job=\"chatty\"")
                }) && log.contains("exit_code=\"4\"")
            }),
            "the run's lines were lost when the journal did not take them:\n{}",
            replica.log()
        );
        let log = replica.log();
        assert!(
            log.lines().any(|line| line.contains("exit_code=\"4\"")),
            "{log}"
        );
        assert!(!log.contains("{\""), "lines are text, not JSON:\n{log}");
    }
}
