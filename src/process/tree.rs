//! The processes of a run as /proc lists them: found by what ties them to the run (a parent, a
//! process group, a mark), and signalled. The supervisor calls this between fork and exec, so
//! nothing here allocates, formats or takes a lock.

use std::ffi::CStr;

use libc::{c_int, pid_t};

/// The most processes of one run that one pass over /proc finds: past it, the rest are found
/// by the next sweep, once those found are gone.
const MEMBERS_MAX: usize = 1024;

/// Sends `signal` to every live process (not a zombie) of a run, the caller `me` aside: each
/// one that `of_run` picks by its stat and every descendant of one, found by passes over /proc
/// until one finds no more (a descendant's parent may come later in the listing). How many
/// were signalled, or `None` when /proc cannot be read or is not the caller's view of the pids.
pub(super) fn signal_members(
    me: pid_t,
    signal: c_int,
    mut of_run: impl FnMut(pid_t, &Stat) -> bool,
) -> Option<usize> {
    let proc = Dir::open(c"/proc")?;
    // /proc of another pid namespace would name other processes by these numbers.
    if read_stat(proc.fd, b"self")?.pid != me {
        return None;
    }
    let mut members = [0 as pid_t; MEMBERS_MAX];
    let mut found = 0;
    loop {
        let before = found;
        proc.rewind();
        proc.for_each(|name| {
            let Some(pid) = parse_pid(name) else {
                return;
            };
            if pid == me || found == MEMBERS_MAX || members[..found].contains(&pid) {
                return;
            }
            let Some(stat) = read_stat(proc.fd, name) else {
                // Already gone.
                return;
            };
            let ended = matches!(stat.state, b'Z' | b'X');
            if !ended && (members[..found].contains(&stat.ppid) || of_run(pid, &stat)) {
                members[found] = pid;
                found += 1;
            }
        })?;
        if found == before || found == MEMBERS_MAX {
            break;
        }
    }
    let mut signalled = 0;
    for &pid in &members[..found] {
        // SAFETY: a signal to a process of the run, read from /proc just now: its pid could
        // name another process only if it had ended and been reaped in between.
        if unsafe { libc::kill(pid, signal) } == 0 {
            signalled += 1;
        }
    }
    Some(signalled)
}

/// An open directory, listed with `getdents64` into a buffer on the stack.
pub(super) struct Dir {
    pub(super) fd: c_int,
}

impl Dir {
    /// Back to the first entry, for another listing.
    pub(super) fn rewind(&self) {
        // SAFETY: a seek on the directory's own descriptor.
        unsafe { libc::lseek(self.fd, 0, libc::SEEK_SET) };
    }

    pub(super) fn open(path: &CStr) -> Option<Self> {
        // SAFETY: a NUL-terminated path.
        let fd = unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        (fd >= 0).then_some(Self { fd })
    }

    /// Calls `each` with the name of every entry; `None` when the listing fails.
    pub(super) fn for_each(&self, mut each: impl FnMut(&[u8])) -> Option<()> {
        // struct linux_dirent64: d_ino (8 bytes), d_off (8), d_reclen (2), d_type (1), d_name.
        const NAME: usize = 19;
        let mut buffer = [0u8; 4096];
        loop {
            // SAFETY: the kernel writes at most `buffer.len()` bytes into it.
            let read = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    self.fd,
                    buffer.as_mut_ptr(),
                    buffer.len(),
                )
            };
            let read = usize::try_from(read).ok()?;
            if read == 0 {
                return Some(());
            }
            let entries = buffer.get(..read)?;
            let mut at = 0;
            while let Some(entry) = entries.get(at..) {
                if entry.len() < NAME {
                    break;
                }
                let length = usize::from(u16::from_ne_bytes([entry[16], entry[17]]));
                let name = entry.get(NAME..length)?;
                let end = name
                    .iter()
                    .position(|&byte| byte == 0)
                    .unwrap_or(name.len());
                each(&name[..end]);
                at += length;
            }
        }
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: the descriptor is this directory's own.
        unsafe { libc::close(self.fd) };
    }
}

/// What the supervisor needs of `/proc/<pid>/stat`.
pub(super) struct Stat {
    pub(super) pid: pid_t,
    /// `Z` for a zombie, `X` for a process being reaped.
    pub(super) state: u8,
    pub(super) ppid: pid_t,
    /// The process group it is in.
    pub(super) pgrp: pid_t,
}

/// Reads `<name>/stat` under the directory `proc`.
pub(super) fn read_stat(proc: c_int, name: &[u8]) -> Option<Stat> {
    const SUFFIX: &[u8] = b"/stat\0";
    let mut path = [0u8; 32];
    path.get_mut(..name.len())?.copy_from_slice(name);
    path.get_mut(name.len()..name.len() + SUFFIX.len())?
        .copy_from_slice(SUFFIX);
    // SAFETY: a NUL-terminated relative path under an open directory.
    let fd = unsafe { libc::openat(proc, path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // The fields wanted come first; the rest of a longer line is not needed.
    let mut buffer = [0u8; 512];
    // SAFETY: the kernel writes at most `buffer.len()` bytes into it; the descriptor is ours.
    let read = unsafe {
        let read = libc::read(fd, buffer.as_mut_ptr().cast(), buffer.len());
        libc::close(fd);
        read
    };
    parse_stat(buffer.get(..usize::try_from(read).ok()?)?)
}

/// `pid (comm) state ppid pgrp ...`; the command name may hold spaces and parentheses, but no
/// later field holds a parenthesis.
pub(super) fn parse_stat(line: &[u8]) -> Option<Stat> {
    let open = line.iter().position(|&byte| byte == b' ')?;
    let close = line.iter().rposition(|&byte| byte == b')')?;
    let mut fields = line
        .get(close + 1..)?
        .split(|&byte| byte == b' ')
        .filter(|field| !field.is_empty());
    let state = *fields.next()?.first()?;
    Some(Stat {
        pid: parse_pid(&line[..open])?,
        state,
        ppid: parse_pid(fields.next()?)?,
        pgrp: parse_pid(fields.next()?)?,
    })
}

/// A decimal number of at least one digit and nothing else.
pub(super) fn parse_pid(text: &[u8]) -> Option<pid_t> {
    if text.is_empty() {
        return None;
    }
    let zero: pid_t = 0;
    text.iter().try_fold(zero, |number, &byte| {
        let digit = pid_t::from(byte.checked_sub(b'0').filter(|digit| *digit < 10)?);
        number.checked_mul(10)?.checked_add(digit)
    })
}

#[cfg(test)]
mod tests {
    use nix::unistd::getpid;

    use super::*;

    #[test]
    fn stat_lines_are_read_past_odd_command_names() {
        let stat =
            parse_stat(b"4242 (a) b (c) R 17 4242 4242 0 -1 4194560 ...").expect("a stat line");
        assert_eq!(
            (stat.pid, stat.state, stat.ppid, stat.pgrp),
            (4242, b'R', 17, 4242)
        );
        assert!(parse_stat(b"12 (sh) S").is_none(), "cut short");
        assert!(parse_pid(b"self").is_none());
        assert!(parse_pid(b"99999999999").is_none(), "overflows");
        assert!(parse_pid(b"").is_none());
    }

    #[test]
    fn this_process_is_found_in_proc() {
        let proc = Dir::open(c"/proc").expect("/proc");
        let me = getpid().as_raw();
        let stat = read_stat(proc.fd, b"self").expect("its own stat");
        assert_eq!(stat.pid, me);
        let mut found = false;
        proc.for_each(|name| found |= parse_pid(name) == Some(me))
            .expect("/proc lists");
        assert!(found, "its pid is not listed in /proc");
    }
}
