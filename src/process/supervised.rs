//! The replica's side of a program run under a supervisor (see [`supervisor`]): starting it,
//! waiting for it, and killing what is left of its tree when the supervisor was killed on its
//! own.

use std::fmt;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use libc::pid_t;
use nix::unistd::getpid;
use tokio::process::{Child, Command};

use super::supervisor::{self, SUPERVISOR_NAME, Title};
use super::tree::{Stat, parse_stat, signal_members};
use crate::schedule::run_as::Identity;

/// The variable that marks every process of a supervised program with a value of its own
/// (random, so no other program's processes carry it): what the replica finds them by once
/// their supervisor is gone, those that left the process group included.
const TREE_MARK: &str = "REDCRON_TREE";

/// How long processes sent SIGKILL may take to end before what is left of them is reported
/// (stuck in the kernel, or set-user-ID ones a replica that is not root may not signal).
pub(crate) const KILL_WAIT: Duration = Duration::from_secs(4);

/// The longest pause between two sweeps of a tree whose supervisor is gone.
const SWEEP_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Starts `command` under a supervisor (see [`supervisor`]), whose own child takes `identity`
/// (groups, then group, then user, as cron does) and execs the program, in a process group of
/// its own, marked with [`TREE_MARK`], and without what the replica keeps to itself
/// ([`REPLICA_ONLY_ENV`]). A replica killed outright (`kill -9`, the OOM killer) would
/// otherwise leave its commands running while their leases expire and other replicas run them
/// again, twice at once; with the supervisor, the whole tree dies with the replica: every
/// command of a list or a pipeline, background processes, and those that left the process
/// group. Runs and `exec:` notices start this way.
///
/// # Errors
/// When the program cannot be started.
pub(crate) fn spawn_supervised(
    command: &mut Command,
    identity: Option<Identity>,
) -> io::Result<Supervised> {
    for name in REPLICA_ONLY_ENV {
        command.env_remove(name);
    }
    let mark = format!("{:016x}", rand::random::<u64>());
    command.env(TREE_MARK, &mark);
    // Its own group, where the supervisor finds the processes the command started even once
    // their parent has ended. Set before the pre-exec closure runs, so the supervisor leads it.
    command.process_group(0);
    let (ended, ended_pipe) = ended_pipe()?;
    let writer = ended_pipe.as_raw_fd();
    let replica = getpid();
    let title = command
        .as_std()
        .get_envs()
        .find(|(name, _)| *name == RUN_ID_VARIABLE)
        .and_then(|(_, run)| Title::for_run(&run?.to_string_lossy()));
    // SAFETY: between fork and exec the closure only makes system calls, writes bytes made
    // before the fork and allocates nothing (the identity was resolved before the fork);
    // `split` is called where it must be.
    unsafe {
        command.pre_exec(move || {
            supervisor::split(replica, identity.as_ref(), writer, title.as_ref())
        });
    }
    let child = command.spawn()?;
    // The supervisor holds its own copy: the replica's would only keep the pipe open.
    drop(ended_pipe);
    let group = child
        .id()
        .and_then(|pid| pid_t::try_from(pid).ok())
        .ok_or_else(|| io::Error::other("the supervisor has no pid"))?;
    Ok(Supervised {
        child,
        group,
        mark,
        ended,
        ended_on_purpose: false,
    })
}

/// The pipe on which a supervisor says that it ends by its own choice: the replica's end
/// (which never blocks) and the supervisor's. Its end is moved above the standard streams,
/// which the spawn replaces in the child before the supervisor starts.
fn ended_pipe() -> io::Result<(io::PipeReader, OwnedFd)> {
    let (reader, writer) = io::pipe()?;
    // SAFETY: fcntl on the pipe's own descriptors; F_DUPFD_CLOEXEC returns a new one, owned
    // here from then on.
    let writer = unsafe {
        if libc::fcntl(reader.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
        if writer.as_raw_fd() > libc::STDERR_FILENO {
            OwnedFd::from(writer)
        } else {
            let moved = libc::fcntl(writer.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3);
            if moved < 0 {
                return Err(io::Error::last_os_error());
            }
            OwnedFd::from_raw_fd(moved)
        }
    };
    Ok((reader, writer))
}

/// A spawned supervisor: when it is dropped before it was waited for to its end (a run's task
/// dropped half-way, its runtime shut down, a notice's sending given up), it is asked to kill
/// the whole tree. A SIGKILL (`kill_on_drop`) would take the supervisor alone, and leave the
/// tree to live on.
pub(crate) struct Supervised {
    child: Child,
    /// The supervisor's pid, which is also the tree's process group: kept past the reaping of
    /// the supervisor, since the group outlives it while one of its members runs.
    group: pid_t,
    /// The value of [`TREE_MARK`] in the tree's environment.
    mark: String,
    /// Where the supervisor says that it ends by its own choice.
    ended: io::PipeReader,
    /// Whether it has said so, once read.
    ended_on_purpose: bool,
}

/// How a supervised program ended.
#[derive(Debug)]
pub(crate) enum Exit {
    /// As its supervisor reported it: the program's status (once its tree was stopped, when
    /// it was asked to stop).
    Ended(ExitStatus),
    /// Its supervisor was killed on its own (`kill -9`, the OOM killer): the program's status
    /// is lost, and the replica has killed what was left of its tree.
    SupervisorKilled(Swept),
}

/// What the replica killed of a tree whose supervisor was killed.
#[derive(Debug)]
pub(crate) struct Swept {
    /// What ended the supervisor.
    supervisor: ExitStatus,
    /// How many processes of the tree still ran; `None` when /proc could not be read and only
    /// the process group was killed.
    pub(crate) killed: Option<usize>,
    /// How many still ran [`KILL_WAIT`] after they were sent SIGKILL.
    pub(crate) left: usize,
}

impl fmt::Display for Swept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.supervisor.signal() {
            Some(signal) => write!(
                f,
                "its supervisor (redcron-run) was killed by signal {signal}"
            )?,
            None => write!(
                f,
                "its supervisor (redcron-run) ended with {}",
                self.supervisor
            )?,
        }
        match self.killed {
            Some(killed) => write!(f, "; {killed} processes of it still ran and were killed")?,
            None => write!(
                f,
                "; /proc cannot be read: only its process group was killed"
            )?,
        }
        if self.left > 0 {
            write!(
                f,
                "; {} still lived {} after SIGKILL",
                self.left,
                humantime::format_duration(KILL_WAIT)
            )?;
        }
        Ok(())
    }
}

impl Supervised {
    /// The supervisor's process: its pipes, its pid.
    pub(crate) fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits for the supervisor to end. When it was killed on its own, the processes it left
    /// (reparented to PID 1, out of its reach) are killed before this returns, so nothing of
    /// the program runs once its end is known. Called again, it sweeps again.
    ///
    /// # Errors
    /// When the supervisor cannot be waited for.
    pub(crate) async fn wait(&mut self) -> io::Result<Exit> {
        let status = self.child.wait().await?;
        // Written before the supervisor exits, so read here after it was reaped: nothing in
        // the pipe means it died without choosing to.
        let mut byte = [0u8];
        if !self.ended_on_purpose && matches!((&self.ended).read(&mut byte), Ok(1)) {
            self.ended_on_purpose = true;
        }
        if self.ended_on_purpose {
            return Ok(Exit::Ended(status));
        }
        let (group, mark) = (self.group, self.mark.clone());
        let (killed, left) = tokio::task::spawn_blocking(move || sweep(group, &mark))
            .await
            .map_err(io::Error::other)?;
        Ok(Exit::SupervisorKilled(Swept {
            supervisor: status,
            killed,
            left,
        }))
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        // `id()` is `None` once the child was reaped: its pid may have been reused since.
        if let Some(pid) = self.child.id() {
            supervisor::end_tree(pid);
        }
    }
}

/// Kills with SIGKILL, sweep after sweep, every process of a tree whose supervisor is gone: the
/// members of its process `group`, each process whose environment holds its `mark`, and their
/// descendants, until a sweep finds none or [`KILL_WAIT`] has passed. How many the first sweep
/// found (`None` without /proc: then the group alone is killed), and how many the last one did.
fn sweep(group: pid_t, mark: &str) -> (Option<usize>, usize) {
    let marked = format!("{TREE_MARK}={mark}");
    // The group's id cannot name another group while one of its members runs (a pid is not
    // reused while it names a group), and once none runs it matches nothing of the tree.
    let of_tree =
        |pid: pid_t, stat: &Stat| stat.pgrp == group || environment_holds(pid, marked.as_bytes());
    let swept = kill_until_gone(of_tree);
    if swept.0.is_none() {
        // SAFETY: a signal to the tree's own group.
        unsafe { libc::kill(-group, libc::SIGKILL) };
    }
    swept
}

/// Kills with SIGKILL what is left of run `run_id` on this machine that no supervisor watches:
/// each process whose environment names the run (`REDCRON_RUN_ID`, which every process of a
/// run's command inherits, those that left its group included) and that is neither under a
/// live supervisor (`redcron-run`) nor an ancestor of this replica, and their descendants,
/// sweep after sweep as a killed supervisor's tree (at most [`KILL_WAIT`]). For a run that Redis
/// says this replica runs while it does not: its previous process was killed with the run's
/// supervisor (`kill -9` of both, `pkill -9 -f`), whose processes then went on under PID 1,
/// and must be gone before the run is handed back and starts again. A live supervisor's
/// processes are left to it: it kills them itself when its replica dies. How many the first
/// sweep found (`None` without /proc: nothing could be looked for), and how many the last one
/// did.
pub(crate) fn end_unsupervised(run_id: &str) -> (Option<usize>, usize) {
    let named = format!("{RUN_ID_VARIABLE}={run_id}");
    let mine = ancestors(getpid().as_raw());
    kill_until_gone(|pid: pid_t, stat: &Stat| {
        !mine.contains(&pid)
            && environment_holds(pid, named.as_bytes())
            && !ancestors(stat.ppid)
                .iter()
                .any(|&ancestor| is_supervisor(ancestor))
    })
}

/// The variable that names the run in every run's environment (set by the command handler).
pub(crate) const RUN_ID_VARIABLE: &str = "REDCRON_RUN_ID";

/// `pid` and its ancestors up to PID 1, as /proc says now; a chain cut short where a process
/// has ended meanwhile (its children are then reparented, and found so by the next sweep).
fn ancestors(pid: pid_t) -> Vec<pid_t> {
    let mut chain = Vec::new();
    let mut at = pid;
    // A chain longer than this loops through a reused pid read half-way through its change.
    while at > 0 && chain.len() < 4096 && !chain.contains(&at) {
        chain.push(at);
        let Ok(stat) = std::fs::read(format!("/proc/{at}/stat")) else {
            break;
        };
        let Some(stat) = parse_stat(&stat) else {
            break;
        };
        at = stat.ppid;
    }
    chain
}

/// Whether `pid` is a run's supervisor, by the name it gives itself.
fn is_supervisor(pid: pid_t) -> bool {
    std::fs::read(format!("/proc/{pid}/comm"))
        .is_ok_and(|comm| comm.strip_suffix(b"\n").unwrap_or(&comm) == SUPERVISOR_NAME.to_bytes())
}

/// Kills with SIGKILL, sweep after sweep, every process `of_tree` picks and their descendants,
/// until a sweep finds none or [`KILL_WAIT`] has passed: how many the first sweep found (`None`
/// without /proc), and how many the last one did.
fn kill_until_gone(mut of_tree: impl FnMut(pid_t, &Stat) -> bool) -> (Option<usize>, usize) {
    let me = getpid().as_raw();
    let Some(first) = signal_members(me, libc::SIGKILL, &mut of_tree) else {
        return (None, 0);
    };
    let deadline = Instant::now() + KILL_WAIT;
    let mut pause = Duration::from_millis(5);
    let mut left = first;
    // Killed processes are no children of the replica: nothing to wait for but their end in
    // /proc (a zombie counts as ended), and the children a sweep missed are caught by the next.
    while left > 0 && Instant::now() < deadline {
        std::thread::sleep(pause);
        pause = (pause * 2).min(SWEEP_PAUSE_MAX);
        left = signal_members(me, libc::SIGKILL, &mut of_tree).unwrap_or(0);
    }
    (Some(first), left)
}

/// Whether the environment process `pid` started with holds `variable` (`NAME=value`); `false`
/// when it cannot be read (the process has ended, or is not the replica's user's).
fn environment_holds(pid: pid_t, variable: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environment| {
        environment
            .split(|&byte| byte == 0)
            .any(|entry| entry == variable)
    })
}

/// What the replica was given for itself and no command it starts may see: the Redis URL
/// carries its password, the webhook secret signs its notices, and the service manager's
/// socket answers to the replica alone.
const REPLICA_ONLY_ENV: [&str; 5] = [
    "REDIS_URL",
    "REDCRON_WEBHOOK_SECRET",
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
];
