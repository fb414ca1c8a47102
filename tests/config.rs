//! The configuration files: a server's `redcron` finds its Redis, namespace and schedules there,
//! and an option or its environment variable still wins.

use std::ffi::OsStr;
use std::path::Path;

use crate::util::redis_server::RedisServer;
use crate::util::{Run, keys, redcron_in_with_env};

const JOB: &str = "[jobs.nightly]\nschedule = \"0 3 * * *\"\ncommand = \"true\"\n";

/// Writes `text` into `dir/name`, making the directories on the way.
fn write(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
    std::fs::write(path, text).expect("written");
}

/// Runs `redcron args...` in `dir` as a user whose configuration directory is `home/.config`,
/// with no `REDCRON_CONFIG` unless `env` sets one.
fn as_user(home: &Path, dir: &Path, args: &[&str], env: &[(&str, &OsStr)]) -> Run {
    let config = home.join(".config");
    let mut all = vec![
        ("XDG_CONFIG_HOME", config.as_os_str()),
        ("REDCRON_CONFIG", OsStr::new("")),
    ];
    all.extend_from_slice(env);
    redcron_in_with_env(dir, args, "", &all)
}

#[test]
fn the_users_file_names_the_schedules_and_an_option_wins_over_it() {
    let home = tempfile::tempdir().expect("temp dir");
    let work = tempfile::tempdir().expect("temp dir");
    write(home.path(), "srv/schedules/jobs.toml", JOB);
    write(
        home.path(),
        ".config/redcron/redcron.toml",
        "# Relative to this file.\nschedules = \"../../srv/schedules\"\n",
    );
    // No schedules/ where the command runs: only the file can have sent it to the jobs.
    let out = as_user(home.path(), work.path(), &["check"], &[]).success();
    assert!(
        out.contains("nightly") && out.trim_end().ends_with("srv/schedules: all valid"),
        "{out}"
    );
    write(
        work.path(),
        "here/other.toml",
        &JOB.replace("nightly", "weekly"),
    );
    let out = as_user(
        home.path(),
        work.path(),
        &["check", "--schedules", "here"],
        &[],
    )
    .success();
    assert!(
        out.contains("weekly") && !out.contains("nightly"),
        "--schedules wins over the file: {out}"
    );
}

#[test]
fn the_redis_of_the_file_is_used_unless_the_environment_or_an_option_names_another() {
    let server = RedisServer::start();
    let home = tempfile::tempdir().expect("temp dir");
    let work = tempfile::tempdir().expect("temp dir");
    write(
        home.path(),
        ".config/redcron/redcron.toml",
        &format!("redis = \"{}\"\nnamespace = \"test\"\n", server.url()),
    );
    let out = as_user(home.path(), work.path(), &["hold", "--for", "1m"], &[]).success();
    assert!(out.starts_with("namespace \"test\" held"), "{out}");
    let held: bool = redis::cmd("EXISTS")
        .arg(keys().hold())
        .query(&mut server.connection())
        .expect("EXISTS");
    assert!(held, "the file's Redis and namespace were used");
    let nowhere = OsStr::new("redis://127.0.0.1:1/");
    let refused = as_user(
        home.path(),
        work.path(),
        &["release"],
        &[("REDIS_URL", nowhere)],
    )
    .failure(2);
    assert!(
        refused.contains("cannot reach Redis at redis://127.0.0.1:1/"),
        "REDIS_URL wins over the file: {refused}"
    );
    let url = server.url();
    let out = as_user(
        home.path(),
        work.path(),
        &["release", "--redis", &url],
        &[("REDIS_URL", nowhere)],
    )
    .success();
    assert_eq!(
        out, "namespace \"test\" released\n",
        "--redis wins over both"
    );
}

#[test]
fn the_config_option_is_read_before_and_after_the_command() {
    let server = RedisServer::start();
    let home = tempfile::tempdir().expect("temp dir");
    let work = tempfile::tempdir().expect("temp dir");
    write(
        home.path(),
        "other.toml",
        &format!("redis = \"{}\"\nnamespace = \"test\"\n", server.url()),
    );
    let other = home.path().join("other.toml");
    let named = other.to_str().expect("a UTF-8 path");
    // No Redis but the file's: a command that did not read it would find none.
    let held = || -> bool {
        redis::cmd("EXISTS")
            .arg(keys().hold())
            .query(&mut server.connection())
            .expect("EXISTS")
    };
    let run = |args: &[&str]| as_user(home.path(), work.path(), args, &[]).success();
    run(&["--config", named, "hold", "--for", "1m"]);
    assert!(held(), "held through the file's Redis");
    run(&["release", "--config", named]);
    assert!(!held(), "released through the file's Redis");
    assert_eq!(
        run(&["runs", "list", "--config", named]),
        "no run is active, ready or due\n"
    );
}

#[test]
fn a_named_file_is_read_instead_of_the_users() {
    let home = tempfile::tempdir().expect("temp dir");
    let work = tempfile::tempdir().expect("temp dir");
    write(home.path(), "mine/jobs.toml", JOB);
    write(
        home.path(),
        "theirs/jobs.toml",
        &JOB.replace("nightly", "weekly"),
    );
    write(
        home.path(),
        ".config/redcron/redcron.toml",
        "schedules = \"../../mine\"\n",
    );
    write(home.path(), "other.toml", "schedules = \"theirs\"\n");
    let other = home.path().join("other.toml");
    let named = other.to_str().expect("a UTF-8 path");
    for run in [
        as_user(home.path(), work.path(), &["check", "--config", named], &[]),
        as_user(
            home.path(),
            work.path(),
            &["check"],
            &[("REDCRON_CONFIG", other.as_os_str())],
        ),
    ] {
        let out = run.success();
        assert!(out.contains("weekly") && !out.contains("nightly"), "{out}");
    }
    let missing = home.path().join("missing.toml");
    let refused = as_user(
        home.path(),
        work.path(),
        &["check", "--config", missing.to_str().expect("a UTF-8 path")],
        &[],
    )
    .failure(2);
    assert!(
        refused.contains(&format!(
            "cannot read the configuration file {}",
            missing.display()
        )),
        "{refused}"
    );
}

#[test]
fn a_bad_file_stops_every_command_naming_its_file_line_and_key() {
    let home = tempfile::tempdir().expect("temp dir");
    let work = tempfile::tempdir().expect("temp dir");
    write(
        home.path(),
        ".config/redcron/redcron.toml",
        "redis = \"redis://127.0.0.1:1/\"\n\nnamespace = \"two words\"\n",
    );
    let file = home.path().join(".config/redcron/redcron.toml");
    // Even a command that needs no Redis: a mistyped file must not pass unseen.
    let refused = as_user(home.path(), work.path(), &["next", "0 3 * * *"], &[]).failure(2);
    assert!(
        refused.starts_with(&format!(
            "redcron: {}:3: key \"namespace\": ",
            file.display()
        )),
        "{refused}"
    );
    write(
        home.path(),
        ".config/redcron/redcron.toml",
        "redis_url = \"redis://127.0.0.1:1/\"\n",
    );
    let refused = as_user(home.path(), work.path(), &["status"], &[]).failure(2);
    assert!(
        refused.contains(&format!("{}:1: ", file.display()))
            && refused.contains("unknown field `redis_url`"),
        "{refused}"
    );
}

#[test]
fn help_shows_the_values_of_the_file_but_never_a_redis_password() {
    let home = tempfile::tempdir().expect("temp dir");
    let work = tempfile::tempdir().expect("temp dir");
    write(
        home.path(),
        ".config/redcron/redcron.toml",
        "redis = \"redis://app:s3cret@127.0.0.1:1/\"\nnamespace = \"prod\"\n",
    );
    let help = as_user(home.path(), work.path(), &["status", "--help"], &[]).success();
    assert!(help.contains("[default: prod]"), "{help}");
    assert!(!help.contains("s3cret"), "{help}");
}
