//! What the system can start: a job whose command, environment or working directory the kernel
//! would refuse at every run is refused when its file is loaded, not found out at its first fire.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The longest string Linux passes as one argument or one environment entry (`MAX_ARG_STRLEN`,
/// 32 pages), its terminating NUL included: a longer command fails every run with `Argument
/// list too long`, whatever the total.
pub const MAX_ARG_BYTES: usize = 32 * 4096;

/// Room kept in the system's limit for what each run adds to the environment
/// (`REDCRON_JOB`, `REDCRON_RUN_ID`, `REDCRON_FIRE_TIME`, `REDCRON_ATTEMPT`, `REDCRON_TREE`, and
/// `HOME`, `USER` and `LOGNAME` for a job with a `user`), and for a replica's environment that
/// differs a little from the one `check` ran in.
const RUN_ENV_RESERVE: usize = 8 * 1024;

/// A job's `command`: `/bin/sh -c` receives it as one argument.
///
/// # Errors
/// What the kernel would refuse, for the file's diagnostic.
pub fn check_command(command: &str) -> Result<(), String> {
    if command.contains('\0') {
        return Err(
            "the command contains a NUL character (\\u0000): no program can be given one"
                .to_owned(),
        );
    }
    if command.len() >= MAX_ARG_BYTES {
        return Err(format!(
            "the command is {} bytes: the system passes at most {} bytes in one argument \
             (`/bin/sh -c COMMAND`), so every run would fail with \"Argument list too long\"; \
             put the script in a file and run that",
            command.len(),
            MAX_ARG_BYTES - 1
        ));
    }
    Ok(())
}

/// A job's `env`: each variable is one `NAME=value` string of the command's environment.
///
/// # Errors
/// The first variable the kernel would refuse, for the file's diagnostic.
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), String> {
    for (name, value) in env {
        if value.contains('\0') {
            return Err(format!(
                "the value of {name} contains a NUL character (\\u0000): no environment \
                 variable can hold one"
            ));
        }
        let entry = name.len() + 1 + value.len();
        if entry >= MAX_ARG_BYTES {
            return Err(format!(
                "{name} is {entry} bytes with its name: the system passes at most {} bytes in \
                 one environment variable, so every run would fail with \"Argument list too \
                 long\"",
                MAX_ARG_BYTES - 1
            ));
        }
    }
    Ok(())
}

/// A job's `workdir`: a path that cannot name a directory, whatever is deployed later.
///
/// # Errors
/// What is wrong with it, for the file's diagnostic.
pub fn check_workdir(workdir: &Path) -> Result<(), String> {
    if workdir.as_os_str().as_bytes().contains(&0) {
        return Err(
            "the directory contains a NUL character (\\u0000): no path can hold one".to_owned(),
        );
    }
    // A directory missing now may be created by a deploy before the first run; a file in its
    // place (or on its way) is no directory for any run.
    if let Ok(metadata) = std::fs::metadata(workdir)
        && !metadata.is_dir()
    {
        return Err(format!(
            "{} is not a directory: no run could start in it",
            workdir.display()
        ));
    }
    if let Err(error) = std::fs::metadata(workdir)
        && error.raw_os_error() == Some(libc::ENOTDIR)
    {
        return Err(format!(
            "{}: a part of the path is a file, not a directory: no run could start in it",
            workdir.display()
        ));
    }
    Ok(())
}

/// The whole of what a run's `execve` receives: the command, the job's `env` and the
/// environment the replica passes on (its own, here) must fit within the system's limit for a
/// program's arguments and environment (`ARG_MAX`).
///
/// # Errors
/// How far over the limit it is, for the file's diagnostic.
pub fn check_exec_size(command: &str, env: &BTreeMap<String, String>) -> Result<(), String> {
    let limit = arg_max();
    // Each string is copied with its NUL, and each has a pointer in argv or envp.
    let pointer = std::mem::size_of::<usize>();
    let string = |bytes: usize| bytes + 1 + pointer;
    let own: usize = ["/bin/sh", "-c", command]
        .iter()
        .map(|argument| string(argument.len()))
        .chain(
            env.iter()
                .map(|(name, value)| string(name.len() + 1 + value.len())),
        )
        .sum();
    let inherited: usize = std::env::vars_os()
        .filter(|(name, _)| !env.keys().any(|own| OsStr::new(own) == name))
        .map(|(name, value)| string(name.len() + 1 + value.len()))
        .sum();
    let needed = own + inherited + RUN_ENV_RESERVE;
    if needed > limit {
        return Err(format!(
            "the command and its environment take {needed} bytes (the job's {own}, the \
             replica's environment {inherited}, {RUN_ENV_RESERVE} kept for redcron's variables): \
             more than the {limit} bytes the system allows a program's arguments and \
             environment (ARG_MAX), so every run would fail with \"Argument list too long\""
        ));
    }
    Ok(())
}

/// The system's limit on a program's arguments and environment together.
fn arg_max() -> usize {
    // SAFETY: sysconf reads a setting of the system; it has no preconditions.
    let limit = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    // POSIX's least limit, when the system does not say.
    usize::try_from(limit)
        .ok()
        .filter(|limit| *limit > 0)
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_just_under_one_argument_passes_and_one_at_it_is_refused() {
        assert_eq!(check_command(&"x".repeat(MAX_ARG_BYTES - 1)), Ok(()));
        let refused = check_command(&"x".repeat(MAX_ARG_BYTES)).expect_err("too long");
        assert!(
            refused.starts_with("the command is 131072 bytes"),
            "{refused}"
        );
    }

    #[test]
    fn nul_characters_are_refused_wherever_the_kernel_takes_strings() {
        assert!(check_command("echo a\0b").is_err());
        let env = BTreeMap::from([("A".to_owned(), "x\0y".to_owned())]);
        assert!(check_env(&env).expect_err("NUL").contains("value of A"));
        assert!(check_workdir(Path::new("/tmp/a\0b")).is_err());
    }

    #[test]
    fn a_workdir_that_is_a_file_is_refused_and_a_missing_one_is_not() {
        let file = tempfile::NamedTempFile::new().expect("temp file");
        assert!(check_workdir(file.path()).is_err());
        assert!(check_workdir(&file.path().join("below")).is_err());
        assert_eq!(check_workdir(Path::new("/nonexistent/yet")), Ok(()));
    }

    #[test]
    fn arguments_and_environment_over_arg_max_are_refused() {
        let small = BTreeMap::new();
        assert_eq!(check_exec_size("true", &small), Ok(()));
        // Many variables, each under the one-string limit, over the whole.
        let value = "x".repeat(MAX_ARG_BYTES / 2);
        let big: BTreeMap<String, String> = (0..arg_max() / value.len() + 1)
            .map(|index| (format!("V{index}"), value.clone()))
            .collect();
        assert!(check_env(&big).is_ok());
        let refused = check_exec_size("true", &big).expect_err("over ARG_MAX");
        assert!(refused.contains("ARG_MAX"), "{refused}");
    }
}
