//! `user` and `group`: a replica run as root runs each job's command as its declared user, with
//! that user's groups, as cron runs each user's crontab; any other replica refuses at load time
//! a user other than its own.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use nix::unistd::{Group, User, getgrouplist, getuid};

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{cli, redcron_in, wait_until};

fn write_jobs(dir: &Path, toml: &str) {
    std::fs::create_dir_all(dir.join("schedules")).expect("schedules dir");
    std::fs::write(dir.join("schedules/jobs.toml"), toml).expect("write jobs");
}

/// Runs `redcron check` on `dir`'s schedules as user `nobody` (through `setpriv` when the tests
/// run as root).
fn check_as_nobody(dir: &Path) -> (Option<i32>, String) {
    let schedules = dir.join("schedules");
    let output = if getuid().is_root() {
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_redcron"))
            .args(["check", "--schedules"])
            .arg(&schedules)
            .output()
            .expect("setpriv (util-linux) runs redcron")
    } else {
        Command::new(env!("CARGO_BIN_EXE_redcron"))
            .args(["check", "--schedules"])
            .arg(&schedules)
            .output()
            .expect("redcron runs")
    };
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_replica_that_is_not_root_refuses_another_user_at_load_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Readable by nobody.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    write_jobs(
        dir.path(),
        "[jobs.as-root]\ncommand = \"true\"\nuser = \"root\"\n",
    );
    let (code, stderr) = check_as_nobody(dir.path());
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "jobs.toml:3:8: job \"as-root\", field \"user\": running as user \"root\" needs a \
             replica run as root"
        ),
        "{stderr}"
    );
}

#[test]
fn unknown_users_and_groups_are_refused_at_load_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    write_jobs(
        dir.path(),
        "[jobs.ghost]\ncommand = \"true\"\nuser = \"no-such-user-here\"\n\n\
         [jobs.lonely-group]\ncommand = \"true\"\ngroup = \"no-such-group-here\"\n",
    );
    let stderr = redcron_in(dir.path(), &["check", "--schedules", "schedules"], "").failure(1);
    assert!(
        stderr.contains("field \"user\": no user \"no-such-user-here\" on this machine"),
        "{stderr}"
    );
    assert!(
        stderr.contains("field \"group\": no group \"no-such-group-here\" on this machine"),
        "{stderr}"
    );
}

#[test]
fn as_root_a_command_runs_as_its_user_with_that_users_groups() {
    if !getuid().is_root() {
        // The other branch of the rule, which this machine can show.
        a_replica_that_is_not_root_refuses_another_user_at_load_time();
        return;
    }
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let record = |file: &str| {
        format!(
            "echo \\\"$(id -u) $(id -g) $(id -G) $HOME $USER\\\" > {}",
            dir.path().join(file).display()
        )
    };
    write_jobs(
        dir.path(),
        &format!(
            "[jobs.as-nobody]\ncommand = \"{}\"\nuser = \"nobody\"\n\n\
             [jobs.as-nobody-in-daemon]\ncommand = \"{}\"\nuser = \"nobody\"\ngroup = \"daemon\"\n\
             env = {{ HOME = \"/elsewhere\" }}\n",
            record("nobody"),
            record("daemon")
        ),
    );
    let _replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &dir.path().join("schedules"),
        dir.path(),
        &[],
    );
    let mut redis = server.connection();
    assert!(wait_until(Duration::from_secs(10), || {
        redis::cmd("HEXISTS")
            .arg(keys().defs())
            .arg("as-nobody")
            .query::<bool>(&mut redis)
            .unwrap_or(false)
    }));
    for job in ["as-nobody", "as-nobody-in-daemon"] {
        cli(&server, dir.path(), &["trigger", job]).success();
    }
    let read = |file: &str| std::fs::read_to_string(dir.path().join(file)).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(15), || !read("nobody").is_empty()
            && !read("daemon").is_empty()),
        "the commands did not run"
    );

    let nobody = User::from_name("nobody")
        .expect("passwd")
        .expect("user nobody");
    let daemon = Group::from_name("daemon")
        .expect("group")
        .expect("group daemon");
    let groups = |gid| {
        let mut groups: Vec<String> = getgrouplist(&CString::new("nobody").expect("name"), gid)
            .expect("groups")
            .iter()
            .map(ToString::to_string)
            .collect();
        groups.sort();
        groups.dedup();
        groups.join(" ")
    };
    let ran = |file: &str| {
        let text = read(file);
        let words: Vec<&str> = text.split_whitespace().collect();
        let (uid, gid) = (words[0].to_owned(), words[1].to_owned());
        let mut groups: Vec<&str> = words[2..words.len() - 2].to_vec();
        groups.sort_unstable();
        groups.dedup();
        let tail = words[words.len() - 2..].join(" ");
        (uid, gid, groups.join(" "), tail)
    };
    let home = nobody.dir.display().to_string();
    assert_eq!(
        ran("nobody"),
        (
            nobody.uid.to_string(),
            nobody.gid.to_string(),
            groups(nobody.gid),
            format!("{home} nobody")
        )
    );
    assert_eq!(
        ran("daemon"),
        (
            nobody.uid.to_string(),
            daemon.gid.to_string(),
            groups(daemon.gid),
            "/elsewhere nobody".to_owned()
        )
    );
}
