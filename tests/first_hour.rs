//! What a sysadmin meets in the first hour, with real replicas: the fire lag counts fires, not
//! their retries.

use std::time::Duration;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{cli, free_port, http_get, one_document, sample, wait_until};

/// A schedule directory holding `toml` in `jobs.toml`, under `dir`.
fn schedules(dir: &std::path::Path, toml: &str) -> std::path::PathBuf {
    let schedules = dir.join("schedules");
    std::fs::create_dir_all(&schedules).expect("mkdir");
    std::fs::write(schedules.join("jobs.toml"), toml).expect("write");
    schedules
}

#[test]
fn the_fire_lag_counts_each_fire_once_however_often_it_is_retried() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // Each fire fails twice: its first attempt at its fire time, a retry a second later.
    let schedules = schedules(
        dir.path(),
        "[jobs.flaky]\nschedule = \"*/2 * * * * *\"\ncommand = \"exit 1\"\nretries = 1\n\
         backoff = \"1s\"\n",
    );
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &schedules,
        dir.path(),
        &["--metrics-addr", &address],
    );
    let metrics = || http_get(port, "/metrics").1;
    let dead = "redcron_runs_total{outcome=\"dead\",redcron_job=\"flaky\",namespace=\"test\"}";
    assert!(
        wait_until(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && sample(&metrics(), dead) >= 3.0
        }),
        "{}\n{}",
        metrics(),
        replica.log()
    );
    // Paused, the job starts nothing more: once its last attempt has ended, the counts hold.
    cli(&server, dir.path(), &["pause", "flaky"]).success();
    assert!(
        wait_until(Duration::from_secs(15), || {
            let status = one_document(&cli(&server, dir.path(), &["status", "--json"]).success());
            status["active"] == 0
        }),
        "{}",
        replica.log()
    );
    let history = one_document(
        &cli(
            &server,
            dir.path(),
            &["history", "flaky", "-n", "1000", "--json"],
        )
        .success(),
    );
    let mut started: Vec<&str> = history["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|run| run["outcome"] == "retrying" || run["outcome"] == "dead")
        .filter_map(|run| run["id"].as_str())
        .collect();
    let attempts = started.len();
    started.sort_unstable();
    started.dedup();
    let exported = metrics();
    let lags = sample(
        &exported,
        "redcron_fire_lag_seconds_count{redcron_job=\"flaky\",namespace=\"test\"}",
    );
    assert!(attempts > started.len(), "each fire was retried: {history}");
    assert_eq!(
        lags,
        started.len() as f64,
        "one lag per fire started, not per attempt ({attempts} attempts)\n{exported}"
    );
}
