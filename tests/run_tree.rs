//! A run's processes die with their run, however it ends (a timeout, the end of the shutdown
//! grace, a second signal, a dead component, its replica killed): every process its command
//! started, not only its shell, so that a run started again never overlaps what is left of the
//! first attempt.
//!
//! Each job's processes carry a mark of their own in their environment, which /proc shows.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getuid};
use redis::Commands;

use crate::util::keys;
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::{cli, wait_until};

/// The variable that marks a job's processes.
const MARK: &str = "RUN_TREE_MARK";

/// One job: its command, and how many `sleep` processes it runs once it is fully started.
struct Case {
    job: &'static str,
    command: &'static str,
    sleeps: usize,
    /// The user it runs as, when the replica is root.
    user: Option<&'static str>,
}

const CASES: [Case; 5] = [
    Case {
        job: "list",
        command: "sleep 60; echo done",
        sleeps: 1,
        user: None,
    },
    Case {
        job: "pipeline",
        command: "sleep 60 | cat",
        sleeps: 1,
        user: None,
    },
    Case {
        job: "background",
        command: "sleep 60 & sleep 60; echo done",
        sleeps: 2,
        user: None,
    },
    // Out of the run's process group (and session): a signal to the group does not reach it,
    // the supervisor must.
    Case {
        job: "escaped",
        command: "setsid sleep 60 & sleep 60; echo done",
        sleeps: 2,
        user: None,
    },
    Case {
        job: "as-nobody",
        command: "sleep 60; echo done",
        sleeps: 1,
        user: Some("nobody"),
    },
];

/// A live process (zombies are gone: they run nothing), as /proc shows it.
#[derive(Debug)]
struct Process {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    command: String,
}

impl Process {
    fn read(pid: i32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        let mut fields = rest.split_whitespace();
        if matches!(fields.next()?, "Z" | "X") {
            return None;
        }
        let ppid = fields.next()?.parse().ok()?;
        let pgrp = fields.next()?.parse().ok()?;
        let command = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|bytes| String::from_utf8_lossy(&bytes).replace('\0', " "))
            .unwrap_or_default();
        Some(Self {
            pid,
            ppid,
            pgrp,
            command: command.trim_end().to_owned(),
        })
    }

    fn is_sleep(&self) -> bool {
        self.command.starts_with("sleep ")
    }
}

/// Every live process whose environment holds `MARK=mark`.
fn marked(mark: &str) -> Vec<Process> {
    let wanted = format!("{MARK}={mark}");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc is readable") {
        let Some(pid) = entry
            .ok()
            .and_then(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environment) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let holds = environment
            .split(|&byte| byte == 0)
            .any(|variable| variable == wanted.as_bytes());
        if holds && let Some(process) = Process::read(pid) {
            found.push(process);
        }
    }
    found
}

/// The OOM score adjustment of process `pid`, as written in /proc.
fn oom_score_adj(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/oom_score_adj"))
        .map(|value| value.trim().to_owned())
        .unwrap_or_else(|error| panic!("cannot read the OOM score of {pid}: {error}"))
}

/// Whether a process started here may leave itself out of the OOM killer's choice (root with
/// `CAP_SYS_RESOURCE` in the first user namespace; a container's root usually may not).
fn may_lower_oom_score() -> bool {
    std::process::Command::new("/bin/sh")
        .args(["-c", "echo -1000 > /proc/self/oom_score_adj"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// Panics, saying what to install, when `tool` is not on the `PATH`.
fn require(tool: &str, package: &str) {
    let path = std::env::var_os("PATH").unwrap_or_default();
    assert!(
        std::env::split_paths(&path).any(|dir| dir.join(tool).is_file()),
        "this test needs `{tool}` on the PATH: install {package}"
    );
}

fn jobs_toml(cases: &[&Case], mark: &str) -> String {
    cases
        .iter()
        .map(|case| {
            let user = case
                .user
                .map(|user| format!("user = \"{user}\"\n"))
                .unwrap_or_default();
            format!(
                "[jobs.{job}]\ncommand = \"{command}\"\nenv = {{ {MARK} = \"{mark}-{job}\" }}\n{user}",
                job = case.job,
                command = case.command,
            )
        })
        .collect()
}

/// What marks the processes of `scenario`'s runs, unique to this test's run: other tests may
/// run the same commands at the same time.
fn run_mark(scenario: &Scenario) -> String {
    format!(
        "{}-{}",
        std::process::id(),
        scenario
            .dir
            .path()
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a temp dir name")
    )
}

#[test]
fn killing_a_replica_kills_every_process_of_its_runs() {
    for (tool, package) in [
        ("sleep", "coreutils"),
        ("cat", "coreutils"),
        ("setsid", "util-linux"),
    ] {
        require(tool, package);
    }
    // Running as another user needs root; without it that case is left out.
    let cases: Vec<&Case> = CASES
        .iter()
        .filter(|case| case.user.is_none() || getuid().is_root())
        .collect();
    let scenario = Scenario::new();
    let (server, dir) = (&scenario.server, &scenario.dir);
    let mark = run_mark(&scenario);
    scenario.write_jobs(&jobs_toml(&cases, &mark));
    let mut replica = scenario.replica("r1", &["--workers", "8"]);
    let published = wait_until(Duration::from_secs(10), || {
        cases.iter().all(|case| {
            server
                .connection()
                .hexists(keys().defs(), case.job)
                .unwrap_or(false)
        })
    });
    assert!(published, "the jobs were not published:\n{}", replica.log());
    for case in &cases {
        cli(server, dir.path(), &["trigger", case.job]).success();
    }

    let job_mark = |case: &Case| format!("{mark}-{}", case.job);
    let started = wait_until(Duration::from_secs(15), || {
        cases.iter().all(|case| {
            let processes = marked(&job_mark(case));
            let sleeps: Vec<&Process> = processes.iter().filter(|p| p.is_sleep()).collect();
            // The escaped sleep must have left the group before the replica dies.
            let escaped = case.job != "escaped"
                || sleeps
                    .iter()
                    .any(|sleep| sleeps.iter().any(|other| other.pgrp != sleep.pgrp));
            sleeps.len() == case.sleeps && escaped
        })
    });
    assert!(
        started,
        "the runs did not start all their processes: {:?}\n{}",
        cases
            .iter()
            .map(|case| (case.job, marked(&job_mark(case))))
            .collect::<Vec<_>>(),
        replica.log()
    );
    // Each run's shell is the child of its supervisor, the replica's child.
    let replica_pid = replica.pid().as_raw();
    let mut supervisors = Vec::new();
    for case in &cases {
        let processes = marked(&job_mark(case));
        let shell = processes
            .iter()
            .find(|process| process.command.starts_with("/bin/sh -c "))
            .unwrap_or_else(|| panic!("no shell for job {}: {processes:?}", case.job));
        let supervisor = Process::read(shell.ppid).expect("the shell's parent runs");
        assert_eq!(
            supervisor.ppid, replica_pid,
            "job {}: the shell's parent {supervisor:?} is not the replica's child",
            case.job
        );
        let name = std::fs::read_to_string(format!("/proc/{}/comm", supervisor.pid))
            .expect("the supervisor's name");
        assert_eq!(name.trim_end(), "redcron-run", "job {}", case.job);
        assert_eq!(
            shell.pgrp, supervisor.pid,
            "job {}: the supervisor does not lead the run's group",
            case.job
        );
        // Its copies of the replica's descriptors would hold pipes open: another run's stdin
        // would never see its end. It keeps one of its own: the pipe on which it tells the
        // replica that it ends by its own choice.
        let descriptors: Vec<(String, String)> =
            std::fs::read_dir(format!("/proc/{}/fd", supervisor.pid))
                .expect("the supervisor's descriptors are listed")
                .flatten()
                .map(|entry| {
                    let target = std::fs::read_link(entry.path()).unwrap_or_default();
                    (
                        entry.file_name().to_string_lossy().into_owned(),
                        target.display().to_string(),
                    )
                })
                .collect();
        assert!(
            descriptors.len() == 1 && descriptors[0].1.starts_with("pipe:"),
            "job {}: the supervisor holds descriptors {descriptors:?}",
            case.job
        );
        // A supervisor killed by the OOM killer frees nothing of its own: it leaves itself out
        // of the choice where the system lets it, and the run's processes keep their score.
        let lowest = if may_lower_oom_score() {
            "-1000".to_owned()
        } else {
            oom_score_adj(replica_pid)
        };
        assert_eq!(
            oom_score_adj(supervisor.pid),
            lowest,
            "job {}: the supervisor's OOM score adjustment",
            case.job
        );
        assert_eq!(
            oom_score_adj(shell.pid),
            oom_score_adj(replica_pid),
            "job {}: the shell's OOM score adjustment is not the replica's",
            case.job
        );
        supervisors.push(supervisor.pid);
    }

    replica.kill9();
    let left = || {
        let mut left: Vec<Process> = cases
            .iter()
            .flat_map(|case| marked(&job_mark(case)))
            .collect();
        left.extend(supervisors.iter().filter_map(|pid| Process::read(*pid)));
        left
    };
    // Well within the run lease: before any other replica could start these runs again.
    let gone = wait_until(Duration::from_secs(3), || left().is_empty());
    let survivors = left();
    // Not left behind for a minute when this fails.
    for process in &survivors {
        let _ = kill(Pid::from_raw(process.pid), Signal::SIGKILL);
    }
    assert!(
        gone,
        "processes of the runs outlived their killed replica: {survivors:?}"
    );
}

/// What each attempt of the job [`Attempts`] declares runs: it first notes in the ledger every
/// process of an earlier attempt that still runs (an overlap), then starts a `sleep` in its
/// process group and one that leaves the group and its session with `setsid` (ignoring SIGTERM
/// when `STUBBORN` is set), each writing its pid to a file named for the attempt's shell.
const ATTEMPT_SCRIPT: &str = r#"dir=$(dirname "$0")
for file in "$dir"/*.pid; do
  [ -e "$file" ] || continue
  pid=$(cat "$file")
  [ "$pid" = "$$" ] && continue
  state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -c1)
  case "$state" in
    ''|Z|X) ;;
    *) echo "overlap $file $pid" >> "$dir/ledger" ;;
  esac
done
echo "start $$ $REDCRON_ATTEMPT" >> "$dir/ledger"
echo $$ > "$dir/shell.$$.pid"
if [ -n "$STUBBORN" ]; then ignore='trap "" TERM;'; else ignore=''; fi
setsid sh -c "$ignore"' echo $$ > "$0/escaped.$1.pid"; exec sleep 323' "$dir" $$ &
sh -c 'echo $$ > "$0/grouped.$1.pid"; exec sleep 323' "$dir" $$ &
sleep 323
"#;

/// One job whose attempts record whether they overlap an earlier one, in a scenario of its own.
struct Attempts {
    scenario: Scenario,
    mark: String,
}

impl Attempts {
    /// The job `tree`, on demand, with `settings` (TOML lines) besides its command; its escaped
    /// process ignores SIGTERM when `stubborn`.
    fn new(settings: &str, stubborn: bool) -> Self {
        require("setsid", "util-linux");
        let scenario = Scenario::new();
        let mark = run_mark(&scenario);
        let script = scenario.dir.path().join("attempt.sh");
        std::fs::write(&script, ATTEMPT_SCRIPT).expect("write the attempt script");
        let stubborn = if stubborn { ", STUBBORN = \"1\"" } else { "" };
        scenario.write_jobs(&format!(
            "[jobs.tree]\ncommand = \"sh {script}\"\nenv = {{ {MARK} = \"{mark}\"{stubborn} }}\n\
             {settings}\n",
            script = script.display(),
        ));
        Self { scenario, mark }
    }

    /// A replica serving the job, once it has published it.
    fn replica(&self, id: &str, extra: &[&str], env: &[(&str, &str)]) -> ReplicaProcess {
        let replica = self.scenario.replica_with_env(id, extra, env);
        let published = wait_until(Duration::from_secs(10), || {
            self.scenario
                .server
                .connection()
                .hexists(keys().defs(), "tree")
                .unwrap_or(false)
        });
        assert!(published, "the job was not published:\n{}", replica.log());
        replica
    }

    fn trigger(&self) {
        let scenario = &self.scenario;
        cli(&scenario.server, scenario.dir.path(), &["trigger", "tree"]).success();
    }

    fn ledger(&self) -> String {
        std::fs::read_to_string(self.scenario.ledger_path()).unwrap_or_default()
    }

    /// The pid the `kind` process (`shell`, `grouped` or `escaped`) of the attempt whose shell
    /// is `shell` wrote, once written.
    fn pid(&self, kind: &str, shell: i32) -> Option<i32> {
        std::fs::read_to_string(self.scenario.dir.path().join(format!("{kind}.{shell}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Waits until `count` attempts have started their whole tree; the shells' pids, oldest
    /// first.
    fn wait_for_attempts(
        &self,
        count: usize,
        limit: Duration,
        log: impl Fn() -> String,
    ) -> Vec<i32> {
        let shells = || -> Vec<i32> {
            self.ledger()
                .lines()
                .filter_map(|line| line.strip_prefix("start ")?.split(' ').next()?.parse().ok())
                .collect()
        };
        let started = wait_until(limit, || {
            let shells = shells();
            shells.len() >= count
                && shells.iter().all(|shell| {
                    ["escaped", "grouped"]
                        .iter()
                        .all(|kind| self.pid(kind, *shell).is_some())
                })
        });
        assert!(
            started,
            "{count} attempts did not start their processes; ledger:\n{}\n{}",
            self.ledger(),
            log()
        );
        shells()
    }

    /// The processes of the attempt whose shell is `shell` that still run.
    fn alive(&self, shell: i32) -> Vec<Process> {
        ["shell", "grouped", "escaped"]
            .iter()
            .filter_map(|kind| Process::read(self.pid(kind, shell)?))
            .collect()
    }

    /// Asserts that no attempt found a process of an earlier one running when it started.
    fn assert_no_overlap(&self) {
        let ledger = self.ledger();
        assert!(
            !ledger.contains("overlap"),
            "an attempt started while processes of an earlier one ran:\n{ledger}"
        );
    }
}

impl Drop for Attempts {
    /// Not left behind for minutes when a test fails.
    fn drop(&mut self) {
        for process in marked(&self.mark) {
            let _ = kill(Pid::from_raw(process.pid), Signal::SIGKILL);
        }
    }
}

#[test]
fn a_timed_out_run_is_retried_only_once_every_process_of_it_is_dead() {
    let attempts = Attempts::new("timeout = \"2s\"\nretries = 1\nbackoff = \"1s\"", false);
    let replica = attempts.replica("r1", &[], &[]);
    attempts.trigger();
    let shells = attempts.wait_for_attempts(2, Duration::from_secs(30), || replica.log());
    assert!(
        replica.log().contains("timed out after 2s"),
        "the first attempt did not time out:\n{}",
        replica.log()
    );
    attempts.assert_no_overlap();
    let first = attempts.alive(shells[0]);
    assert!(
        first.is_empty(),
        "the timed-out attempt's processes live on: {first:?}"
    );
}

#[test]
fn a_run_stopped_at_the_end_of_the_shutdown_grace_is_handed_back_once_its_tree_is_dead() {
    // Its escaped process ignores SIGTERM: only the SIGKILL at the end of the kill grace ends it.
    let attempts = Attempts::new("", true);
    let mut replica = attempts.replica("r1", &["--shutdown-grace", "1s"], &[]);
    attempts.trigger();
    let shells = attempts.wait_for_attempts(1, Duration::from_secs(15), || replica.log());
    // The shutdown grace, the kill grace (10 s), and the recording of the outcome.
    let code = replica.terminate(Duration::from_secs(25));
    let left = attempts.alive(shells[0]);
    assert!(
        left.is_empty(),
        "the replica exited while processes of its run lived: {left:?}\n{}",
        replica.log()
    );
    assert_eq!(code, Some(0), "{}", replica.log());
    assert!(
        replica.log().contains("handing them back"),
        "the run was not handed back:\n{}",
        replica.log()
    );
    let next = attempts.replica("r2", &[], &[]);
    attempts.wait_for_attempts(2, Duration::from_secs(15), || next.log());
    attempts.assert_no_overlap();
}

#[test]
fn a_second_signal_during_the_shutdown_grace_takes_the_runs_tree_along() {
    let attempts = Attempts::new("", false);
    let mut replica = attempts.replica("r1", &["--shutdown-grace", "60s"], &[]);
    attempts.trigger();
    let shells = attempts.wait_for_attempts(1, Duration::from_secs(15), || replica.log());
    replica.signal(Signal::SIGTERM);
    let waiting = wait_until(Duration::from_secs(5), || {
        replica.log().contains("waiting for running runs to finish")
    });
    assert!(waiting, "no shutdown grace began:\n{}", replica.log());
    replica.signal(Signal::SIGTERM);
    let status = replica.wait_exit(Duration::from_secs(5));
    assert_eq!(
        status.and_then(|status| status.code()),
        Some(130),
        "{}",
        replica.log()
    );
    // Well within the run lease: before any other replica could start the run again.
    let gone = wait_until(Duration::from_secs(3), || {
        attempts.alive(shells[0]).is_empty()
    });
    assert!(
        gone,
        "processes of the run outlived their replica: {:?}",
        attempts.alive(shells[0])
    );
    let next = attempts.replica("r2", &[], &[]);
    attempts.wait_for_attempts(2, Duration::from_secs(20), || next.log());
    attempts.assert_no_overlap();
}

#[test]
fn a_replica_stopped_by_a_dead_component_hands_its_run_back_once_its_tree_is_dead() {
    let attempts = Attempts::new("", false);
    let trigger = attempts.scenario.dir.path().join("planner-panics");
    let trigger_path = trigger.display().to_string();
    let mut replica = attempts.replica(
        "r1",
        &[],
        &[("REDCRON_TEST_FAULT_PLANNER_PANIC", &trigger_path)],
    );
    attempts.trigger();
    let shells = attempts.wait_for_attempts(1, Duration::from_secs(15), || replica.log());
    std::fs::write(&trigger, "").expect("trigger the fault point");
    let status = replica.wait_exit(Duration::from_secs(20));
    let left = attempts.alive(shells[0]);
    assert!(
        left.is_empty(),
        "the replica exited while processes of its run lived: {left:?}\n{}",
        replica.log()
    );
    assert_eq!(
        status.and_then(|status| status.code()),
        Some(2),
        "{}",
        replica.log()
    );
    let next = attempts.replica("r2", &[], &[]);
    attempts.wait_for_attempts(2, Duration::from_secs(15), || next.log());
    attempts.assert_no_overlap();
}

#[test]
fn a_run_whose_replica_was_killed_runs_again_only_once_its_tree_is_dead() {
    let attempts = Attempts::new("", false);
    let mut replica = attempts.replica("r1", &[], &[]);
    attempts.trigger();
    let shells = attempts.wait_for_attempts(1, Duration::from_secs(15), || replica.log());
    replica.kill9();
    let next = attempts.replica("r2", &[], &[]);
    // Once the run's lease has expired, r2's reaper hands it on.
    attempts.wait_for_attempts(2, Duration::from_secs(20), || next.log());
    attempts.assert_no_overlap();
    let first = attempts.alive(shells[0]);
    assert!(
        first.is_empty(),
        "the killed replica's run lives on: {first:?}"
    );
}

/// The supervisor (`redcron-run`) of the process `pid`: its nearest ancestor of that name.
fn supervisor_of(pid: i32) -> Option<i32> {
    let mut at = pid;
    for _ in 0..8 {
        let parent = Process::read(at)?.ppid;
        let name = std::fs::read_to_string(format!("/proc/{parent}/comm")).ok()?;
        if name.trim_end() == "redcron-run" {
            return Some(parent);
        }
        at = parent;
    }
    None
}

#[test]
fn a_run_whose_supervisor_was_killed_is_recorded_and_retried_only_once_its_tree_is_dead() {
    let attempts = Attempts::new("retries = 1\nbackoff = \"1s\"", false);
    let replica = attempts.replica("r1", &[], &[]);
    attempts.trigger();
    let shells = attempts.wait_for_attempts(1, Duration::from_secs(15), || replica.log());
    let supervisor = supervisor_of(shells[0]).unwrap_or_else(|| {
        panic!(
            "no supervisor above the attempt's shell: {:?}",
            marked(&attempts.mark)
        )
    });
    // As the OOM killer does it: the supervisor alone, with SIGKILL.
    kill(Pid::from_raw(supervisor), Signal::SIGKILL).expect("kill the supervisor");
    let recorded = wait_until(Duration::from_secs(15), || {
        replica.log().contains("failure recorded: due again")
    });
    // Read at once: the retry is due half a second later at the earliest.
    let left = attempts.alive(shells[0]);
    assert!(recorded, "the failure was not recorded:\n{}", replica.log());
    assert!(
        left.is_empty(),
        "the run was recorded failed while processes of it lived: {left:?}\n{}",
        replica.log()
    );
    assert!(
        replica
            .log()
            .contains("its supervisor (redcron-run) was killed by signal 9"),
        "the failure does not say what ended the run:\n{}",
        replica.log()
    );
    attempts.wait_for_attempts(2, Duration::from_secs(15), || replica.log());
    attempts.assert_no_overlap();
}

#[test]
fn a_run_whose_supervisor_was_killed_while_stopping_it_is_recorded_once_its_tree_is_dead() {
    // Its escaped process ignores SIGTERM: the supervisor waits for it, until the kill grace.
    let attempts = Attempts::new("timeout = \"2s\"\nretries = 1\nbackoff = \"1s\"", true);
    let replica = attempts.replica("r1", &[], &[]);
    attempts.trigger();
    let shells = attempts.wait_for_attempts(1, Duration::from_secs(15), || replica.log());
    let supervisor = supervisor_of(shells[0]).expect("a supervisor above the attempt's shell");
    let escaped = attempts.pid("escaped", shells[0]).expect("the escaped pid");
    // Stopping: the timeout's SIGTERM ended the shell, not the escaped process.
    let stopping = wait_until(Duration::from_secs(15), || {
        Process::read(shells[0]).is_none() && Process::read(escaped).is_some()
    });
    assert!(
        stopping,
        "the run was not being stopped:\n{}",
        replica.log()
    );
    kill(Pid::from_raw(supervisor), Signal::SIGKILL).expect("kill the supervisor");
    let recorded = wait_until(Duration::from_secs(8), || {
        replica.log().contains("failure recorded: due again")
    });
    let left = attempts.alive(shells[0]);
    assert!(
        recorded,
        "the failure was not recorded before the kill grace ended:\n{}",
        replica.log()
    );
    assert!(
        left.is_empty(),
        "the run was recorded timed out while processes of it lived: {left:?}\n{}",
        replica.log()
    );
    assert!(
        replica.log().contains("timed out after 2s"),
        "{}",
        replica.log()
    );
    attempts.wait_for_attempts(2, Duration::from_secs(15), || replica.log());
    attempts.assert_no_overlap();
}

#[test]
fn a_replica_restarted_after_it_was_killed_with_a_supervisor_ends_the_run_before_it_runs_again() {
    let attempts = Attempts::new("", false);
    // A lease as long as a deployment's: the restart comes well before it expires, and is
    // what hands the run back.
    let lease = ["--run-lease", "60s"];
    let mut replica = attempts.replica("r1", &lease, &[]);
    attempts.trigger();
    let shells = attempts.wait_for_attempts(1, Duration::from_secs(15), || replica.log());
    let supervisor = supervisor_of(shells[0]).expect("a supervisor above the attempt's shell");
    // Not the replica's command line, which `pkill -f 'redcron run'` would match.
    let title = Process::read(supervisor)
        .expect("the supervisor runs")
        .command;
    assert!(
        title.starts_with("redcron-run ") && !title.contains("redcron run"),
        "the supervisor's command line: {title}"
    );
    // Both with SIGKILL, as `kill -9 <replica> <supervisor>` does; the replica stopped first, so
    // that it cannot sweep the tree in between.
    replica.signal(Signal::SIGSTOP);
    kill(Pid::from_raw(supervisor), Signal::SIGKILL).expect("kill the supervisor");
    replica.kill9();
    let orphans = wait_until(Duration::from_secs(5), || {
        Process::read(supervisor).is_none() && !attempts.alive(shells[0]).is_empty()
    });
    assert!(
        orphans,
        "killing the replica with the supervisor left nothing of the run to end: {:?}",
        attempts.alive(shells[0])
    );

    let restarted = attempts.replica("r1", &lease, &[]);
    attempts.wait_for_attempts(2, Duration::from_secs(30), || restarted.log());
    attempts.assert_no_overlap();
    let first = attempts.alive(shells[0]);
    assert!(
        first.is_empty(),
        "the first attempt's processes outlived the restart: {first:?}"
    );
    let log = restarted.log();
    let killed = log.find("outlived its replica and its supervisor: killed");
    let handed_back = log.find("is not running here: lost");
    assert!(
        killed.is_some() && killed < handed_back,
        "the restarted replica did not end the run's processes before handing it back:\n{log}"
    );
}
