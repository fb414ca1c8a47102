//! The supervisor of one run's processes: a process between the replica and the command's shell
//! that takes the run's whole process tree down with it when the replica dies.
//!
//! The parent-death signal reaches only a process's own children, and the shell's children (a
//! list's `sleep`, a pipeline, a background job) are not the replica's. So the child forked for
//! a run becomes its supervisor, before it would exec: it leads the run's process group, is the
//! subreaper of everything the run starts (orphans are reparented to it, not to PID 1), holds a
//! catchable parent-death signal, and forks the process that goes on to exec the shell. When
//! the shell ends, the supervisor exits with the shell's status, so the worker sees what it
//! always saw. When the replica dies, the supervisor kills the group and every descendant,
//! including those that left the group with `setsid`, and only then exits. When the replica
//! stops a run (its timeout, the end of the shutdown grace, a lost lease), the supervisor sends
//! SIGTERM to every process of the run and stays until all of them have ended, or until the
//! replica asks it to kill what is left: the worker's wait for it is a wait for the whole tree.
//! Every exit it chooses, it first tells the replica on a pipe of its own: a supervisor that
//! ends without a word was killed (`kill -9`, the OOM killer), and the replica then kills what
//! is left of the tree itself.
//!
//! Everything here runs between fork and exec in a child of a multi-threaded process, where
//! another thread may have held a lock at the fork: only system calls, no allocation, no
//! formatting, no locks.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;

use libc::{c_int, pid_t};
use nix::errno::Errno;
use nix::sys::prctl::{set_child_subreaper, set_dumpable, set_name, set_pdeathsig};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::unistd::{ForkResult, Pid, fork, getpid, getppid, setgid, setgroups, setuid};

use super::tree::{Dir, Stat, parse_pid, signal_members};
use crate::schedule::run_as::Identity;

/// What the supervisor gets when its replica dies (`PR_SET_PDEATHSIG`), and what the replica
/// sends with `sigqueue` to ask for a [`Request`]. It is blocked and waited for, so its default
/// action (exit) never applies.
const DEATH_SIGNAL: Signal = Signal::SIGUSR1;

/// What the replica asks of a supervisor, in the value `sigqueue` sends with [`DEATH_SIGNAL`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Request {
    /// Kill every process of the run now, then exit: the value 0, which is also what a signal
    /// sent without a value carries.
    Kill = 0,
    /// Send SIGTERM to every process of the run, then stay (reaping) until every one of them
    /// has ended, and exit as the shell did: a run is over only once nothing of it runs.
    Stop = 1,
}

/// The name a supervisor gives itself (its `comm`): told apart from the replica it is a copy of
/// by `ps -e`, `top` and `pkill -x redcron`, and found by it among a run's ancestors.
pub(super) const SUPERVISOR_NAME: &CStr = c"redcron-run";

/// The longest pause between two sweeps while a run's tree is being killed.
const SWEEP_PAUSE_MAX_MS: i64 = 1000;

/// Makes the child just forked for a run its supervisor, and returns only in a new child of it:
/// the one that execs the command's shell, as `identity` when there is one. `replica` is the
/// process that forked the supervisor; `ended_pipe` the write end of the pipe on which the
/// supervisor says that it ends by its own choice, which it keeps and the shell does not.
///
/// The supervisor keeps the replica's identity, so it can kill whatever the run starts, and the
/// process group that `process_group(0)` gave it; the shell inherits that group.
///
/// # Errors
/// When a system call fails before the shell's process exists, or the replica or the
/// supervisor died before the death signal that ties the next process to it was armed: the
/// spawn fails with that error.
///
/// # Safety
/// Only in a `pre_exec` closure: between fork and exec, in the forked child.
pub(super) unsafe fn split(
    replica: Pid,
    identity: Option<&Identity>,
    ended_pipe: c_int,
    title: Option<&Title>,
) -> io::Result<()> {
    set_child_subreaper(true)?;
    set_name(SUPERVISOR_NAME)?;
    if let Some(title) = title {
        // SAFETY: between fork and exec, as this function is.
        unsafe { title.write() };
    }
    // Blocked before the death signal is armed, or a replica dying in between would kill the
    // supervisor by that signal's default action, before it could kill anything. Every signal
    // stays blocked: a timeout's SIGTERM to the group must not end the supervisor before the
    // shell, and the replica's handlers, inherited through the fork, must never run here.
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), None)?;
    // A replica that ignores SIGCHLD would have the kernel reap the shell and lose its status.
    set_default_action(libc::SIGCHLD)?;
    set_pdeathsig(DEATH_SIGNAL)?;
    // The replica may have died before the signal was armed: nothing would ever send it.
    if getppid() != replica {
        return Err(Errno::ESRCH.into());
    }
    let supervisor = getpid();
    // SAFETY: the supervisor is single-threaded (only the forking thread survives a fork), and
    // the new child only makes system calls before it returns to exec.
    match unsafe { fork() }? {
        ForkResult::Child => become_shell(supervisor, identity),
        ForkResult::Parent { child } => supervise(child.as_raw(), replica.as_raw(), ended_pipe),
    }
}

/// The command line a supervisor shows in place of the replica's it was forked with
/// (`/proc/<pid>/cmdline`, what `ps -f`, `pgrep -f` and `pkill -f` read): `redcron-run <run
/// id>`. With the replica's, `pkill -9 -f 'redcron run'` would kill every supervisor along with
/// the replica, and leave the runs' processes going on under PID 1. Written over the replica's
/// own argument area, as `setproctitle` does, cut to its length and padded with NULs; the
/// kernel then reads the area as it always did (its last byte stays NUL).
pub(super) struct Title {
    /// The title's bytes, made before the fork, since the supervisor may not allocate.
    text: Vec<u8>,
    /// The address of the replica's argument area, from `/proc/self/stat`.
    start: usize,
    /// Its length in bytes, the NUL that ends its last argument included.
    length: usize,
}

impl Title {
    /// The title for `run`, or `None` when the argument area cannot be found (no /proc, a
    /// kernel that does not show it).
    pub(super) fn for_run(run: &str) -> Option<Self> {
        let (start, end) = (*ARGUMENT_AREA.get_or_init(|| {
            let stat = std::fs::read("/proc/self/stat").ok()?;
            argument_area(&stat)
        }))?;
        Some(Self {
            text: format!("{} {run}", SUPERVISOR_NAME.to_string_lossy()).into_bytes(),
            start,
            length: end.checked_sub(start).filter(|length| *length > 0)?,
        })
    }

    /// # Safety
    /// Only in the forked child, whose argument area is its own copy.
    unsafe fn write(&self) {
        let kept = self.text.len().min(self.length - 1);
        let area = std::ptr::with_exposed_provenance_mut::<u8>(self.start);
        // SAFETY: the area is the process's own argument strings, on its initial stack,
        // mapped and writable for its whole life; nothing in the supervisor reads them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.text.as_ptr(), area, kept);
            std::ptr::write_bytes(area.add(kept), 0, self.length - kept);
        }
    }
}

/// Where this process's argument strings lie, read once.
static ARGUMENT_AREA: std::sync::OnceLock<Option<(usize, usize)>> = std::sync::OnceLock::new();

/// `arg_start` and `arg_end`, fields 48 and 49 of a `/proc/<pid>/stat` line (0 when the reader
/// may not see them).
fn argument_area(stat: &[u8]) -> Option<(usize, usize)> {
    let close = stat.iter().rposition(|&byte| byte == b')')?;
    let mut fields = stat
        .get(close + 1..)?
        .split(|byte| byte.is_ascii_whitespace())
        .filter(|field| !field.is_empty())
        // Field 3, the state, is the first after the command name.
        .skip(48 - 3);
    let mut number = || -> Option<usize> { std::str::from_utf8(fields.next()?).ok()?.parse().ok() };
    let (start, end) = (number()?, number()?);
    (start > 0 && end > start).then_some((start, end))
}

/// Asks the supervisor `pid` to kill its run's whole tree and exit: for a run given up before
/// its command ended (its task dropped), which would otherwise go on unseen, and for a stopped
/// run whose processes outlived their kill grace.
pub(crate) fn end_tree(pid: u32) {
    ask(pid, Request::Kill);
}

/// Asks the supervisor `pid` to send SIGTERM to every process of its run, those that left the
/// process group included, and to exit only once every one of them has ended (or once
/// [`end_tree`] asks). It then exits as the shell did.
pub(crate) fn stop_tree(pid: u32) {
    ask(pid, Request::Stop);
}

fn ask(pid: u32, request: Request) {
    let Ok(pid) = pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: sigqueue only sends a signal, with a number for its value: the pointer is never
    // dereferenced.
    unsafe {
        libc::sigqueue(
            pid,
            DEATH_SIGNAL as c_int,
            libc::sigval {
                sival_ptr: request as usize as *mut libc::c_void,
            },
        );
    }
}

/// The shell's side of the split: back to the signal mask the shell must start with, switched
/// to `identity`, and tied to the supervisor.
fn become_shell(supervisor: Pid, identity: Option<&Identity>) -> io::Result<()> {
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    // Here and not in the supervisor: a supervisor switched to the user could not kill what
    // the command starts through a set-user-ID program.
    if let Some(identity) = identity {
        setgroups(&identity.groups)?;
        setgid(identity.gid)?;
        setuid(identity.uid)?;
    }
    // Armed after the switch of user, which clears it. A supervisor killed outright (it is in
    // the group a timeout's SIGKILL reaches) takes the shell along.
    set_pdeathsig(Signal::SIGKILL)?;
    if getppid() != supervisor {
        return Err(Errno::ESRCH.into());
    }
    Ok(())
}

/// The supervisor's life once the shell exists: reap, until the shell ends (exit as it did) or
/// the replica dies (kill the run's tree). Once asked to stop the run, the shell's end no longer
/// ends the supervisor: the last of the run's processes does.
fn supervise(shell: pid_t, replica: pid_t, ended_pipe: c_int) -> ! {
    // Its copies of the replica's descriptors would keep them open: the write end of another
    // run's stdin, or of this run's stdout, would hold off the end-of-file its reader waits
    // for. Among them is the pipe on which the spawn waits for the exec; the shell's copy
    // still reports it.
    close_all_descriptors(ended_pipe);
    exempt_from_oom_killer();
    let me = getpid().as_raw();
    let mut waited = SigSet::empty();
    waited.add(Signal::SIGCHLD);
    waited.add(DEATH_SIGNAL);
    let mut stopping = false;
    // The shell's status, once it ended while the run was being stopped.
    let mut ended: Option<c_int> = None;
    loop {
        let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
        // SAFETY: both pointers are valid for the call; the signals waited for are blocked.
        let signal = unsafe { libc::sigwaitinfo(waited.as_ref(), info.as_mut_ptr()) };
        if signal == DEATH_SIGNAL as c_int {
            // SAFETY: sigwaitinfo filled it in for the signal it returned.
            let info = unsafe { info.assume_init() };
            match request(&info, replica) {
                Some(Request::Kill) => kill_tree(ended, ended_pipe),
                Some(Request::Stop) if !stopping => {
                    stopping = true;
                    stop_members(me);
                }
                _ => {}
            }
            // What has ended meanwhile is reaped below: the shell may have ended before the
            // request, its SIGCHLD taken after it (lower signals are taken first).
        }
        // A child ended (or the wait was interrupted): reap everything that ended, orphans of
        // the run included.
        loop {
            let mut status: c_int = 0;
            // SAFETY: a plain wait for any child, into a local.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid == shell {
                // A request sent before the shell ended is still pending: the replica, or its
                // death, must not lose the processes the shell left to a plain exit.
                if !stopping {
                    match pending_request(replica) {
                        Some(Request::Kill) => kill_tree(Some(status), ended_pipe),
                        Some(Request::Stop) => {
                            stopping = true;
                            stop_members(me);
                        }
                        None => exit_as(status, ended_pipe),
                    }
                }
                ended = Some(status);
                continue;
            }
            if pid > 0 || (pid < 0 && Errno::last() == Errno::EINTR) {
                continue;
            }
            // The subreaper of every process of the run has no child left: none of them runs.
            if pid < 0
                && Errno::last() == Errno::ECHILD
                && let Some(status) = ended
            {
                exit_as(status, ended_pipe);
            }
            break;
        }
    }
}

/// What a [`DEATH_SIGNAL`] asks: what the replica sent, or [`Request::Kill`] when the replica
/// is gone; `None` for a signal that asks nothing.
fn request(info: &libc::siginfo_t, replica: pid_t) -> Option<Request> {
    // SAFETY: the sender's pid and value are set for a signal sent by a process (kill,
    // sigqueue) and for the parent-death signal, the cases told apart here.
    let (sender, value) = unsafe { (info.si_pid(), info.si_value().sival_ptr as usize) };
    if info.si_code == libc::SI_QUEUE && sender == replica {
        return Some(if value == Request::Stop as usize {
            Request::Stop
        } else {
            Request::Kill
        });
    }
    // The death signal also comes when the thread that forked ends while the replica lives on
    // (the kernel then reparents to another of its threads), and anyone may send that signal:
    // only a new parent means the replica is gone.
    (getppid().as_raw() != replica).then_some(Request::Kill)
}

/// Takes a [`DEATH_SIGNAL`] already pending, without waiting, and what it asks.
fn pending_request(replica: pid_t) -> Option<Request> {
    let mut death = SigSet::empty();
    death.add(DEATH_SIGNAL);
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let mut info = MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: valid pointers; the signal is blocked, so it waits pending until taken here.
    let signal = unsafe { libc::sigtimedwait(death.as_ref(), info.as_mut_ptr(), &now) };
    if signal != DEATH_SIGNAL as c_int {
        // Nothing asked; the replica may still have died meanwhile.
        return (getppid().as_raw() != replica).then_some(Request::Kill);
    }
    // SAFETY: sigtimedwait filled it in for the signal it returned.
    request(&unsafe { info.assume_init() }, replica)
}

/// Whether a process is one of the run's that the supervisor `me` finds by itself: its child
/// (orphans of the run are reparented to it) or in the group it leads.
fn of_run(me: pid_t, stat: &Stat) -> bool {
    stat.ppid == me || stat.pgrp == me
}

/// Sends SIGTERM to every process of the run, this one aside; without /proc, to its group.
fn stop_members(me: pid_t) {
    if signal_members(me, libc::SIGTERM, |_, stat| of_run(me, stat)).is_none() {
        // SAFETY: a signal to this process's own group; the supervisor blocks it.
        unsafe { libc::kill(-me, libc::SIGTERM) };
    }
}

/// Exits as the shell did: with its exit code, or killed by the signal that killed it (without
/// a core file of its own), once it has said so on `ended_pipe`.
fn exit_as(status: c_int, ended_pipe: c_int) -> ! {
    say_ended(ended_pipe);
    if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        let _ = set_dumpable(false);
        // Fails for SIGKILL, whose action is the default one anyway.
        let _ = set_default_action(signal);
        let mut only = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: `only` is initialised by sigemptyset before it is read; the signal is sent
        // to this process, whose action for it is now the default one, and arrives when it is
        // unblocked.
        unsafe {
            libc::sigemptyset(only.as_mut_ptr());
            libc::sigaddset(only.as_mut_ptr(), signal);
            libc::kill(libc::getpid(), signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, only.as_ptr(), std::ptr::null_mut());
        }
        // Still here: the signal does not end a process by default. As a shell reports it.
        exit(128 + signal);
    }
    exit(libc::WEXITSTATUS(status));
}

/// Kills every process of the run, then exits: as the shell did when it had already ended
/// (`shell`), killed otherwise. The group is not killed in one call, which would take the
/// supervisor first: a process that left the group (`setsid`) would then go to PID 1 and live
/// on. Instead each sweep kills every process of the run it finds, and reaps; a killed
/// process's own children are reparented to the supervisor, their subreaper, and die in the
/// next sweep if the last one missed them. It ends when a sweep finds nothing left.
fn kill_tree(shell: Option<c_int>, ended_pipe: c_int) -> ! {
    let me = getpid().as_raw();
    let mut pause_ms = 5;
    loop {
        let Some(signalled) = signal_members(me, libc::SIGKILL, |_, stat| of_run(me, stat)) else {
            // Without /proc the run's processes cannot be listed: the group at least, the
            // supervisor with it (the shell follows by its own death signal).
            say_ended(ended_pipe);
            // SAFETY: a signal to this process's own group.
            unsafe { libc::kill(-me, libc::SIGKILL) };
            exit(128 + libc::SIGKILL);
        };
        let children_left = reap_ended();
        if signalled == 0 && !children_left {
            break;
        }
        // Until a child ends, or a killed process that is not a child (a pipeline's other
        // commands) has had time to: its orphans then become children to kill.
        wait_for_child(pause_ms);
        pause_ms = (pause_ms * 2).min(SWEEP_PAUSE_MAX_MS);
    }
    if let Some(status) = shell {
        exit_as(status, ended_pipe);
    }
    say_ended(ended_pipe);
    // Reported as killed, for whoever reaps the supervisor: what the run was.
    // SAFETY: a signal to this process.
    unsafe { libc::kill(me, libc::SIGKILL) };
    exit(128 + libc::SIGKILL);
}

/// Reaps every child that has ended; whether any child is left.
fn reap_ended() -> bool {
    loop {
        // SAFETY: a plain wait for any child; the status is not wanted.
        let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        match pid {
            0 => return true,
            pid if pid > 0 => {}
            _ if Errno::last() == Errno::EINTR => {}
            _ => return false,
        }
    }
}

/// Waits up to `ms` for a SIGCHLD (blocked, so it waits pending).
fn wait_for_child(ms: i64) {
    let mut child = SigSet::empty();
    child.add(Signal::SIGCHLD);
    let timeout = libc::timespec {
        tv_sec: 0,
        tv_nsec: (ms.min(999) * 1_000_000) as libc::c_long,
    };
    // SAFETY: valid pointers; the signal information is not wanted.
    unsafe { libc::sigtimedwait(child.as_ref(), std::ptr::null_mut(), &timeout) };
}

/// Sets the default action for `signal`.
fn set_default_action(signal: c_int) -> io::Result<()> {
    // SAFETY: an all-zero `sigaction` is a valid one (SIG_DFL, an empty mask, no flags); the
    // default action installs no handler.
    let result = unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(signal, &action, std::ptr::null_mut())
    };
    Errno::result(result).map(drop).map_err(io::Error::from)
}

/// Tells the replica, on the pipe it gave for that, that the supervisor ends by its own choice:
/// with the run's tree ended as it must be. One byte into an empty pipe never blocks; a
/// replica that is gone reads nothing, and the error is of no use to anyone here.
fn say_ended(ended_pipe: c_int) {
    // SAFETY: a write of one byte from a local into a descriptor this process keeps open.
    unsafe { libc::write(ended_pipe, [1u8].as_ptr().cast(), 1) };
}

/// Leaves the supervisor out of the OOM killer's choice where the replica may (it is root or
/// has `CAP_SYS_RESOURCE`; otherwise the write is refused and nothing changes). It is a copy of
/// the replica that shares its memory and frees none of it when killed, so it would be chosen
/// as often as the replica, and in vain; its children keep the replica's score, since it is
/// changed only once the shell's process exists.
fn exempt_from_oom_killer() {
    const LOWEST: &[u8] = b"-1000";
    // SAFETY: a NUL-terminated path; a write from a constant into the descriptor just opened,
    // closed after.
    unsafe {
        let fd = libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::write(fd, LOWEST.as_ptr().cast(), LOWEST.len());
            libc::close(fd);
        }
    }
}

/// Closes every descriptor of this process but `keep`.
fn close_all_descriptors(keep: c_int) {
    let keep = u32::try_from(keep).unwrap_or(u32::MAX);
    let close_range = |first: u32, last: u32| {
        // SAFETY: close_range only closes descriptors, and none of them is used here again.
        unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) == 0 }
    };
    let below = keep == 0 || close_range(0, keep - 1);
    if below && (keep == u32::MAX || close_range(keep + 1, u32::MAX)) {
        return;
    }
    // Before Linux 5.9: the ones /proc lists. Closing while listing is safe: the listing of a
    // process's descriptors goes by number.
    let Some(dir) = Dir::open(c"/proc/self/fd") else {
        return;
    };
    let own = dir.fd;
    let _ = dir.for_each(|name| {
        if let Some(fd) = parse_pid(name)
            && fd != own
            && u32::try_from(fd) != Ok(keep)
        {
            // SAFETY: closing a descriptor nothing here uses.
            unsafe { libc::close(fd) };
        }
    });
}

fn exit(code: c_int) -> ! {
    // SAFETY: _exit runs no atexit handlers and flushes nothing: nothing of the replica's runs.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::process::tree::read_stat;

    /// Polls `condition` every 10 ms until it holds or 5 s pass; whether it held.
    fn eventually(mut condition: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if condition() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        condition()
    }

    /// Whether `signal` is pending at process `pid`, for the process or its thread.
    fn pending(pid: pid_t, signal: Signal) -> bool {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let bit = 1u64 << (signal as u32 - 1);
        status.lines().any(|line| {
            line.split_once(':').is_some_and(|(name, mask)| {
                matches!(name, "SigPnd" | "ShdPnd")
                    && u64::from_str_radix(mask.trim(), 16).is_ok_and(|mask| mask & bit != 0)
            })
        })
    }

    #[test]
    fn the_end_of_the_thread_that_forked_is_not_the_death_of_the_replica() {
        use std::os::unix::process::{CommandExt, ExitStatusExt};

        let replica = getpid();
        let (_reader, writer) = io::pipe().expect("a pipe");
        let ended = writer.as_raw_fd();
        // The death signal follows the thread that forks, which a runtime may end at any time.
        let (mut child, thread) = std::thread::spawn(move || {
            let mut command = std::process::Command::new("/bin/sh");
            command.args(["-c", "exec sleep 60"]).process_group(0);
            // SAFETY: `split` in a pre-exec closure, where it belongs.
            unsafe {
                command.pre_exec(move || split(replica, None, ended, None));
            }
            let child = command.spawn().expect("the supervisor starts");
            (child, nix::unistd::gettid())
        })
        .join()
        .expect("the forking thread");
        let supervisor = pid_t::try_from(child.id()).expect("a pid");
        // The thread's death signal is sent before the kernel lets go of the thread, and the
        // supervisor takes it before it takes the shell's SIGCHLD (lower signals first).
        let gone = format!("/proc/self/task/{thread}");
        assert!(
            eventually(|| !std::path::Path::new(&gone).exists()),
            "the thread lingers"
        );
        assert!(
            eventually(|| !pending(supervisor, DEATH_SIGNAL)),
            "the supervisor never took its death signal"
        );
        let proc = Dir::open(c"/proc").expect("/proc");
        let mut shell = None;
        assert!(eventually(|| {
            let _ = proc.for_each(|name| {
                if let Some(pid) = parse_pid(name)
                    && read_stat(proc.fd, name).is_some_and(|stat| stat.ppid == supervisor)
                {
                    shell = Some(pid);
                }
            });
            shell.is_some()
        }));
        let shell = shell.expect("the shell runs");
        nix::sys::signal::kill(Pid::from_raw(shell), Signal::SIGTERM).expect("signal the shell");
        // Had the supervisor taken the thread's end for the replica's, it would have killed the
        // shell and itself with SIGKILL.
        let status = child.wait().expect("the supervisor is reaped");
        assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    }

    #[test]
    fn a_shell_that_cannot_be_started_fails_the_spawn() {
        use std::os::unix::process::CommandExt;

        let replica = getpid();
        let mut command = std::process::Command::new("/nonexistent/sh");
        command.process_group(0);
        let (_reader, writer) = io::pipe().expect("a pipe");
        let ended = writer.as_raw_fd();
        // SAFETY: `split` in a pre-exec closure, where it belongs.
        unsafe {
            command.pre_exec(move || split(replica, None, ended, None));
        }
        // The supervisor's child fails to exec and says so on the spawn's pipe, which the
        // supervisor itself let go of: the spawn neither hangs nor succeeds.
        let error = command.spawn().expect_err("nothing to exec");
        assert_eq!(error.kind(), io::ErrorKind::NotFound, "{error}");
    }

    #[test]
    fn the_argument_area_is_where_the_kernel_reads_the_command_line() {
        let stat = std::fs::read("/proc/self/stat").expect("its own stat");
        let (start, end) = argument_area(&stat).expect("the argument area is shown");
        let command_line = std::fs::read("/proc/self/cmdline").expect("its own command line");
        assert_eq!(end - start, command_line.len());
        assert_eq!(argument_area(b"12 (sh) S 1 12"), None, "cut short");
    }
}
