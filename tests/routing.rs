//! Routing by queue: a job pinned to a queue runs only on the replicas serving it, and a queue
//! with ready runs that no live replica serves is visible in `status` and the leader's metrics.

use std::time::Duration;

use serde_json::Value;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{cli, free_port, http_get, one_document, sample, wait_until};

const JOBS: &str = "[jobs.invoice-eu]\ncommand = \"true\"\nqueue = \"eu-west\"\n\n\
                    [jobs.cleanup]\ncommand = \"true\"\n";

#[test]
fn a_pinned_job_runs_only_where_its_queue_is_served_and_an_unserved_queue_shows() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    std::fs::create_dir_all(&schedules).expect("schedules dir");
    std::fs::write(schedules.join("jobs.toml"), JOBS).expect("write jobs");
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    // The leader serves only the default queue; the other serves eu-west too.
    let us = ReplicaProcess::start(
        "us-1",
        &server.url(),
        &schedules,
        dir.path(),
        &["--queues", "default", "--metrics-addr", &address],
    );
    assert!(
        wait_until(Duration::from_secs(10), || us
            .log()
            .contains("acquired the leader lease")),
        "{}",
        us.log()
    );
    let mut eu = ReplicaProcess::start(
        "eu-1",
        &server.url(),
        &schedules,
        dir.path(),
        &["--queues", "eu-west,default"],
    );
    let status = || one_document(&cli(&server, dir.path(), &["status", "--json"]).success());
    let served_by = |status: &Value, queue: &str| {
        status["ready"]
            .as_array()
            .expect("ready")
            .iter()
            .find(|entry| entry["queue"] == queue)
            .map(|entry| entry["served_by"].clone())
    };
    assert!(
        wait_until(Duration::from_secs(10), || served_by(&status(), "eu-west")
            == Some(Value::from(1))),
        "{}",
        status()
    );
    let replicas = status()["replicas"].clone();
    let queues_of = |id: &str| {
        replicas
            .as_array()
            .expect("replicas")
            .iter()
            .find(|replica| replica["id"] == id)
            .map(|replica| replica["queues"].clone())
    };
    assert_eq!(queues_of("us-1"), Some(serde_json::json!(["default"])));
    assert_eq!(
        queues_of("eu-1"),
        Some(serde_json::json!(["eu-west", "default"]))
    );

    // Each run of the pinned job is claimed by the replica serving its queue.
    let trigger = |job: &str| {
        let out = cli(&server, dir.path(), &["trigger", job, "--json"]).success();
        one_document(&out)["id"]
            .as_str()
            .expect("a run id")
            .to_owned()
    };
    let worker_of = |run: &str| {
        let shown = cli(&server, dir.path(), &["runs", "show", run, "--json"]).success();
        let shown = one_document(&shown);
        (shown["state"] == "succeeded").then(|| shown["worker"].as_str().map(str::to_owned))
    };
    for _ in 0..4 {
        let run = trigger("invoice-eu");
        assert!(
            wait_until(Duration::from_secs(10), || worker_of(&run).is_some()),
            "{run} did not run\n{}",
            eu.log()
        );
        let worker = worker_of(&run).flatten().unwrap_or_default();
        assert!(worker.starts_with("eu-1/"), "{run} ran on {worker}");
    }

    // With eu-west's only replica gone, its runs wait, and everything says why.
    assert_eq!(eu.terminate(Duration::from_secs(15)), Some(0));
    let waiting = trigger("invoice-eu");
    let human = cli(&server, dir.path(), &["status"]).success();
    assert!(
        human.contains(
            "queue eu-west: 1 ready run(s) and no live replica serves it: they wait for one \
             started with --queues eu-west"
        ),
        "{human}"
    );
    assert_eq!(served_by(&status(), "eu-west"), Some(Value::from(0)));
    assert!(
        wait_until(Duration::from_secs(10), || {
            let metrics = http_get(port, "/metrics").1;
            // Exported at 0, not missing: an alert tells the two apart.
            metrics.contains("\nredcron_queue_replicas{queue=\"eu-west\",namespace=\"test\"} 0\n")
                && sample(
                    &metrics,
                    "redcron_queue_replicas{queue=\"default\",namespace=\"test\"}",
                ) == 1.0
        }),
        "{}",
        http_get(port, "/metrics").1
    );
    // The default queue's runs go on meanwhile.
    let cleanup = trigger("cleanup");
    assert!(
        wait_until(Duration::from_secs(10), || worker_of(&cleanup).is_some()),
        "{}",
        us.log()
    );
    assert_eq!(
        worker_of(&waiting),
        None,
        "nothing serves eu-west: it waits"
    );

    // A replica serving eu-west again takes the waiting run.
    let _eu = ReplicaProcess::start(
        "eu-2",
        &server.url(),
        &schedules,
        dir.path(),
        &["--queues", "eu-west"],
    );
    assert!(
        wait_until(Duration::from_secs(15), || worker_of(&waiting).is_some()),
        "{}",
        us.log()
    );
    let worker = worker_of(&waiting).flatten().unwrap_or_default();
    assert!(worker.starts_with("eu-2/"), "{waiting} ran on {worker}");
}
