//! The `user` and `group` a job's command runs as: checked when the schedule is loaded, and
//! resolved again before every run (accounts change while a replica runs, as they do under cron).

use std::ffi::CString;
use std::path::PathBuf;

use nix::unistd::{Gid, Group, Uid, User, getgid, getgrouplist, getgroups, getuid};

/// Who a command runs as, resolved from a job's `user` and `group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The user's name, for `USER` and `LOGNAME`.
    pub name: String,
    /// The user's home directory, for `HOME`.
    pub home: PathBuf,
    pub uid: Uid,
    pub gid: Gid,
    /// Every group the command runs with: the user's supplementary groups and `gid`.
    pub groups: Vec<Gid>,
}

impl Identity {
    /// Resolves `user` (and `group`, instead of the user's primary group). `None` when the
    /// command can run as the replica itself: the user and group are the replica's own.
    ///
    /// # Errors
    /// When the user or group does not exist, or switching to them needs root and the replica
    /// does not run as root.
    pub fn resolve(user: &str, group: Option<&str>) -> Result<Option<Identity>, String> {
        let account = find_user(user)?;
        let gid = match group {
            Some(group) => find_group(group)?.gid,
            None => account.gid,
        };
        if account.uid == getuid() && gid == getgid() {
            return Ok(None);
        }
        if !getuid().is_root() {
            return Err(needs_root(user));
        }
        let name = CString::new(user).map_err(|_| format!("bad user name \"{user}\""))?;
        let groups = getgrouplist(&name, gid)
            .map_err(|error| format!("cannot read the groups of user \"{user}\": {error}"))?;
        Ok(Some(Identity {
            name: account.name,
            home: account.dir,
            uid: account.uid,
            gid,
            groups,
        }))
    }
}

/// A job's `user`: it must exist, and be the replica's own user unless the replica runs as
/// root.
///
/// # Errors
/// What is wrong, for the schedule file's diagnostic.
pub fn check_user(user: &str) -> Result<(), String> {
    let account = find_user(user)?;
    if account.uid != getuid() && !getuid().is_root() {
        return Err(format!(
            "{}: leave the field out to run as the replica's user",
            needs_root(user)
        ));
    }
    Ok(())
}

fn needs_root(user: &str) -> String {
    format!(
        "running as user \"{user}\" needs a replica run as root (this one runs as uid {})",
        getuid()
    )
}

/// A job's `group`: it must exist, and be one of the replica's own groups unless the replica
/// runs as root.
///
/// # Errors
/// What is wrong, for the schedule file's diagnostic.
pub fn check_group(group: &str) -> Result<(), String> {
    let found = find_group(group)?;
    let own = found.gid == getgid() || getgroups().is_ok_and(|groups| groups.contains(&found.gid));
    if !own && !getuid().is_root() {
        return Err(format!(
            "running with group \"{group}\" needs a replica run as root or in that group"
        ));
    }
    Ok(())
}

fn find_user(user: &str) -> Result<User, String> {
    User::from_name(user)
        .map_err(|error| format!("cannot look up user \"{user}\": {error}"))?
        .ok_or_else(|| format!("no user \"{user}\" on this machine"))
}

fn find_group(group: &str) -> Result<Group, String> {
    Group::from_name(group)
        .map_err(|error| format!("cannot look up group \"{group}\": {error}"))?
        .ok_or_else(|| format!("no group \"{group}\" on this machine"))
}
