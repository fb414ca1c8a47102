//! The library examples, run as a user would run them against a real Redis: the `worker`
//! example handles what the `producer` example enqueues, and the `pipeline` example starts a
//! workflow and follows it to its end.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::wait_until;

/// Where cargo built example `name`, beside the test binaries (`cargo test` builds examples).
fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe().expect("the test binary's path");
    let path = deps
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples",
        path.display()
    );
    path
}

#[test]
fn the_worker_example_handles_what_the_producer_example_enqueues_once_each() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let output = dir.path().join("worker.out");
    let mut worker = Command::new(example("worker"))
        .arg(server.url())
        .stdout(std::fs::File::create(&output).expect("worker output"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start the worker example");
    let printed = || std::fs::read_to_string(&output).unwrap_or_default();
    let produce = || {
        Command::new(example("producer"))
            .args([server.url().as_str(), "12"])
            .output()
            .expect("run the producer example")
    };
    // The producer is refused, enqueueing nothing, until the worker has published its job; a
    // producer that succeeded is not run again here, or it would meet its own duplicates.
    let mut first = produce();
    assert!(
        wait_until(Duration::from_secs(10), || {
            if !first.status.success() {
                first = produce();
            }
            first.status.success()
        }),
        "{}\n{}",
        String::from_utf8_lossy(&first.stderr),
        printed()
    );
    let enqueued = String::from_utf8_lossy(&first.stdout).into_owned();
    assert_eq!(
        enqueued
            .lines()
            .filter(|line| line.starts_with("enqueued "))
            .count(),
        12,
        "{enqueued}"
    );
    let made = |index: usize| {
        printed()
            .lines()
            .filter(|line| line.starts_with(&format!("thumbnail of upload-{index}.png made")))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(20), || (0..12)
            .all(|index| made(index) >= 1)),
        "{}",
        printed()
    );
    // Each image once, and a second upload within the hour is refused as a duplicate.
    assert!((0..12).all(|index| made(index) == 1), "{}", printed());
    let again = produce();
    let again = String::from_utf8_lossy(&again.stdout).into_owned();
    assert_eq!(
        again
            .lines()
            .filter(|line| line.starts_with("already enqueued as "))
            .count(),
        12,
        "{again}"
    );

    let pid = Pid::from_raw(i32::try_from(worker.id()).expect("a pid"));
    kill(pid, Signal::SIGINT).expect("Ctrl-C the worker");
    let stopped = wait_until(Duration::from_secs(15), || {
        worker.try_wait().ok().flatten().is_some()
    });
    assert!(stopped, "the worker did not stop on Ctrl-C\n{}", printed());
    assert_eq!(worker.wait().expect("worker status").code(), Some(0));
}

#[test]
fn the_pipeline_example_starts_the_image_workflow_and_follows_it_to_its_end() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    std::fs::create_dir_all(&schedules).expect("schedules dir");
    std::fs::write(
        schedules.join("images.toml"),
        "[jobs.compress]\ncommand = \"echo '{\\\"image\\\": \\\"cat.min.png\\\"}'\"\n\
         [jobs.watermark]\ncommand = \"cat\"\n[jobs.upload]\ncommand = \"cat\"\n\
         [workflows.images]\nsteps = [\"compress\", \"watermark\", \"upload\"]\n",
    )
    .expect("write schedules");
    let replica = ReplicaProcess::start("r1", &server.url(), &schedules, dir.path(), &[]);
    let mut printed = String::new();
    // Refused until the replica has published the workflow.
    let finished = wait_until(Duration::from_secs(15), || {
        let output = Command::new(example("pipeline"))
            .args([server.url().as_str(), "images", "{\"image\": \"cat.png\"}"])
            .env("REDCRON_NAMESPACE", "test")
            .output()
            .expect("run the pipeline example");
        printed = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output.status.success()
    });
    assert!(finished, "{printed}\n{}", replica.log());
    let lines: Vec<&str> = printed.lines().collect();
    assert!(lines[0].starts_with("started images "), "{printed}");
    for step in ["compress", "watermark", "upload"] {
        assert!(
            lines.contains(&format!("{step} succeeded").as_str()),
            "{printed}"
        );
    }
    assert_eq!(lines.last(), Some(&"images succeeded"), "{printed}");
    let id = lines[0].trim_start_matches("started images ");
    let uploaded = crate::util::cli(
        &server,
        dir.path(),
        &["runs", "show", &format!("{id}/upload"), "--json"],
    )
    .success();
    let payload: serde_json::Value = serde_json::from_str(
        crate::util::one_document(&uploaded)["payload"]
            .as_str()
            .expect("a payload"),
    )
    .expect("JSON");
    assert_eq!(payload, serde_json::json!({ "image": "cat.min.png" }));
}
