//! A run's processes die with their replica: every process its command started, not only its
//! shell, so that a run started again on another replica never overlaps what is left of the
//! first attempt.
//!
//! Each job's processes carry a mark of their own in their environment, which /proc shows.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getuid};
use redis::Commands;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
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
    // Out of the run's process group (and session): a timeout does not reach it, the death
    // of the replica must.
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
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    std::fs::create_dir(&schedules).expect("schedules dir");
    // Unique to this test's run: other tests may run the same commands at the same time.
    let mark = format!(
        "{}-{}",
        std::process::id(),
        dir.path()
            .file_name()
            .and_then(|name| name.to_str())
            .expect("a temp dir name")
    );
    std::fs::write(schedules.join("jobs.toml"), jobs_toml(&cases, &mark)).expect("write jobs");
    let mut replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &schedules,
        dir.path(),
        &["--workers", "8"],
    );
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
        cli(&server, dir.path(), &["trigger", case.job]).success();
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
        // would never see its end.
        let descriptors: Vec<_> = std::fs::read_dir(format!("/proc/{}/fd", supervisor.pid))
            .expect("the supervisor's descriptors are listed")
            .flatten()
            .map(|entry| entry.file_name())
            .collect();
        assert!(
            descriptors.is_empty(),
            "job {}: the supervisor holds descriptors {descriptors:?}",
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
