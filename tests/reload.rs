//! Reloading a running replica's schedule directory as deploys do it: emptied, then filled one
//! file at a time.

use std::time::Duration;

use nix::sys::signal::Signal;
use redis::Commands;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::{keys, wait_until};

/// One every-second job per file, each recording its runs under its own name.
fn job_files(scenario: &Scenario) -> Vec<(String, String)> {
    ["a", "b", "c"]
        .iter()
        .map(|name| {
            (
                format!("{name}.toml"),
                format!(
                    "[jobs.{name}]\nschedule = \"* * * * * *\"\ncommand = \"{}\"\n",
                    scenario.record(name)
                ),
            )
        })
        .collect()
}

fn empty_the_directory(scenario: &Scenario) {
    for entry in std::fs::read_dir(scenario.schedules()).expect("read schedules") {
        std::fs::remove_file(entry.expect("entry").path()).expect("remove");
    }
}

fn runs_of(scenario: &Scenario, job: &str) -> usize {
    scenario
        .ledger()
        .iter()
        .filter(|(_, _, tag)| tag == job)
        .count()
}

/// A deploy that empties the directory and then copies the new files one by one leaves no gap
/// in the fires: the empty directory is refused as a removal of every job, loudly, and the new
/// files are read once, when the copy is done. A removal that is meant is applied by a SIGHUP.
#[test]
fn a_deploy_that_empties_the_directory_then_copies_files_leaves_no_gap() {
    let scenario = Scenario::new();
    let files = job_files(&scenario);
    for (name, text) in &files {
        std::fs::write(scenario.schedules().join(name), text).expect("write");
    }
    let replica = scenario.replica("r1", &["--watch"]);
    assert!(
        wait_until(Duration::from_secs(15), || runs_of(&scenario, "a") >= 2),
        "no fires:\n{}",
        replica.log()
    );

    empty_the_directory(&scenario);
    assert!(
        wait_until(Duration::from_secs(10), || replica.log().contains(
            "reload refused: it would remove 3 of the 3 jobs at once"
        )),
        "the empty directory was not refused:\n{}",
        replica.log()
    );
    let refusal = replica
        .log()
        .lines()
        .find(|line| line.contains("reload refused"))
        .map(str::to_owned)
        .unwrap_or_default();
    assert!(refusal.contains("ERROR"), "{refusal}");
    assert!(
        refusal.contains(&scenario.schedules().display().to_string()),
        "{refusal}"
    );
    // Fires go on by the previous definitions.
    let before = runs_of(&scenario, "c");
    assert!(
        wait_until(Duration::from_secs(10), || runs_of(&scenario, "c")
            >= before + 3),
        "fires stopped with the directory empty:\n{}",
        replica.log()
    );

    // The copy, one file at a time, within the quiet the watch waits for: read once. The
    // writes are spread over a time, as a copy's are: that is what the watch must bear.
    let reloads_before = replica.log().matches("schedules reloaded").count();
    for (name, text) in &files {
        std::fs::write(scenario.schedules().join(name), text).expect("write");
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .log()
            .matches("schedules reloaded")
            .count()
            > reloads_before),
        "the copied files were not read:\n{}",
        replica.log()
    );
    let before = runs_of(&scenario, "a");
    assert!(
        wait_until(Duration::from_secs(10), || runs_of(&scenario, "a")
            >= before + 2),
        "fires stopped after the copy:\n{}",
        replica.log()
    );
    let log = replica.log();
    assert_eq!(
        log.matches("schedules reloaded").count(),
        reloads_before + 1,
        "the copy was read more than once:\n{log}"
    );
    assert_eq!(
        log.matches("reload refused").count(),
        1,
        "a half-copied directory was read:\n{log}"
    );

    // Meant: emptied, refused, then confirmed by SIGHUP.
    empty_the_directory(&scenario);
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .log()
            .matches("reload refused")
            .count()
            == 2),
        "{}",
        replica.log()
    );
    replica.signal(Signal::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .log()
            .contains("removing jobs as a second SIGHUP confirms")),
        "{}",
        replica.log()
    );
    // The removed jobs' planned fires go; nothing fires after them (one already running when
    // the removal came may still end, so the ledger is read once none is active).
    assert!(
        wait_until(Duration::from_secs(10), || {
            let mut redis = scenario.server.connection();
            let (due, active): (usize, usize) = (
                redis.zcard(keys().due()).expect("ZCARD"),
                redis.zcard(keys().active()).expect("ZCARD"),
            );
            due == 0 && active == 0
        }),
        "the removed jobs' fires are still planned:\n{}",
        replica.log()
    );
    let settled = scenario.ledger().len();
    assert!(
        !wait_until(Duration::from_secs(3), || scenario.ledger().len() > settled),
        "jobs still fire after the confirmed removal:\n{}",
        replica.log()
    );
}

/// A job file recording its runs under the job's name.
fn job_file(scenario: &Scenario, name: &str) -> (String, String) {
    (
        format!("{name}.toml"),
        format!(
            "[jobs.{name}]\nschedule = \"* * * * * *\"\ncommand = \"{}\"\n",
            scenario.record(name)
        ),
    )
}

/// A directory beside the schedules holding `jobs`.
fn release(scenario: &Scenario, directory: &str, jobs: &[&str]) -> std::path::PathBuf {
    let release = scenario.dir.path().join(directory);
    std::fs::create_dir(&release).expect("release dir");
    for job in jobs {
        let (name, text) = job_file(scenario, job);
        std::fs::write(release.join(name), text).expect("write");
    }
    release
}

/// Waits until `added` fires, then checks that `removed` fires no more.
fn fires_follow(scenario: &Scenario, replica: &ReplicaProcess, added: &str, removed: &str) {
    assert!(
        wait_until(Duration::from_secs(15), || runs_of(scenario, added) >= 2),
        "{added} never fired:\n{}",
        replica.log()
    );
    // A run of the removed job already started when the reload came may still end.
    let settled = runs_of(scenario, removed);
    assert!(
        !wait_until(Duration::from_secs(3), || runs_of(scenario, removed)
            > settled + 1),
        "{removed} still fires:\n{}",
        replica.log()
    );
}

/// A deploy that renames the new directory into place (`mv schedules schedules.old && mv
/// schedules.new schedules`) is read, and so are later edits inside the new directory, and
/// still after a SIGHUP: the watch follows the path, not the directory it first named.
#[test]
fn watch_follows_a_directory_renamed_into_place() {
    let scenario = Scenario::new();
    for job in ["a", "b", "c"] {
        let (name, text) = job_file(&scenario, job);
        std::fs::write(scenario.schedules().join(name), text).expect("write");
    }
    let replica = scenario.replica("r1", &["--watch"]);
    assert!(
        wait_until(Duration::from_secs(15), || runs_of(&scenario, "c") >= 2),
        "no fires:\n{}",
        replica.log()
    );

    let new = release(&scenario, "schedules.new", &["a", "b", "d"]);
    std::fs::rename(
        scenario.schedules(),
        scenario.dir.path().join("schedules.old"),
    )
    .expect("rename the old directory away");
    std::fs::rename(&new, scenario.schedules()).expect("rename the new directory in");
    fires_follow(&scenario, &replica, "d", "c");

    // An edit inside the directory renamed into place.
    std::fs::remove_file(scenario.schedules().join("b.toml")).expect("remove b");
    let (name, text) = job_file(&scenario, "e");
    std::fs::write(scenario.schedules().join(name), text).expect("write e");
    fires_follow(&scenario, &replica, "e", "b");

    // A SIGHUP between edits leaves the watch where the path is.
    let reloads = replica.log().matches("schedules reloaded").count();
    replica.signal(Signal::SIGHUP);
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .log()
            .matches("schedules reloaded")
            .count()
            > reloads),
        "{}",
        replica.log()
    );
    let (name, text) = job_file(&scenario, "f");
    std::fs::write(scenario.schedules().join(name), text).expect("write f");
    std::fs::remove_file(scenario.schedules().join("a.toml")).expect("remove a");
    fires_follow(&scenario, &replica, "f", "a");
}

/// `--schedules current`, where `current` is a symlink switched to another release as deploy
/// tools do it (`ln -sfn release-2 current.tmp && mv -T current.tmp current`): the switch is
/// read, and so are later edits in the release it names.
#[test]
fn watch_follows_a_symlink_switched_to_another_release() {
    let scenario = Scenario::new();
    release(&scenario, "release-1", &["a", "b", "c"]);
    release(&scenario, "release-2", &["a", "b", "d"]);
    let current = scenario.dir.path().join("current");
    std::os::unix::fs::symlink("release-1", &current).expect("symlink");
    let replica = ReplicaProcess::start(
        "r1",
        &scenario.server.url(),
        &current,
        scenario.dir.path(),
        &["--watch"],
    );
    assert!(
        wait_until(Duration::from_secs(15), || runs_of(&scenario, "c") >= 2),
        "no fires:\n{}",
        replica.log()
    );

    let switching = scenario.dir.path().join("current.tmp");
    std::os::unix::fs::symlink("release-2", &switching).expect("symlink");
    std::fs::rename(&switching, &current).expect("switch the symlink");
    fires_follow(&scenario, &replica, "d", "c");

    let (name, text) = job_file(&scenario, "e");
    std::fs::write(current.join(name), text).expect("write e");
    std::fs::remove_file(current.join("b.toml")).expect("remove b");
    fires_follow(&scenario, &replica, "e", "b");
}

/// `--schedules current/schedules`, where `current` is the symlink switched to another release
/// (the layout of capistrano and its kind): the switch of a step above the directory is read.
#[test]
fn watch_follows_a_symlink_switched_above_the_directory() {
    let scenario = Scenario::new();
    for (release_dir, jobs) in [
        ("release-1", ["a", "b", "c"]),
        ("release-2", ["a", "b", "d"]),
    ] {
        let schedules = scenario.dir.path().join(release_dir).join("schedules");
        std::fs::create_dir_all(&schedules).expect("release dir");
        for job in jobs {
            let (name, text) = job_file(&scenario, job);
            std::fs::write(schedules.join(name), text).expect("write");
        }
    }
    let current = scenario.dir.path().join("current");
    std::os::unix::fs::symlink("release-1", &current).expect("symlink");
    let replica = ReplicaProcess::start(
        "r1",
        &scenario.server.url(),
        &current.join("schedules"),
        scenario.dir.path(),
        &["--watch"],
    );
    assert!(
        wait_until(Duration::from_secs(15), || runs_of(&scenario, "c") >= 2),
        "no fires:\n{}",
        replica.log()
    );

    let switching = scenario.dir.path().join("current.tmp");
    std::os::unix::fs::symlink("release-2", &switching).expect("symlink");
    std::fs::rename(&switching, &current).expect("switch the symlink");
    fires_follow(&scenario, &replica, "d", "c");

    let (name, text) = job_file(&scenario, "e");
    std::fs::write(current.join("schedules").join(name), text).expect("write e");
    fires_follow(&scenario, &replica, "e", "c");
}
