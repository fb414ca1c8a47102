//! Routing by queue: a job pinned to a queue runs only on the replicas serving it, a queue with
//! ready runs that no live replica serves is visible in `status` and the leader's metrics, and
//! a `[queues.<name>]` fallback moves its ready runs once it has been unserved long enough.

use std::time::Duration;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::{cli, free_port, http_get, one_document, sample, wait_until};
use serde_json::Value;

const JOBS: &str = "[jobs.invoice-eu]\ncommand = \"true\"\nqueue = \"eu-west\"\n\n\
                    [jobs.cleanup]\ncommand = \"true\"\n";

/// A scenario declaring [`JOBS`], and `us-1`: the leader, serving only the default queue, with
/// its metrics on `port`.
struct Regions {
    scenario: Scenario,
    port: u16,
    us: ReplicaProcess,
}

impl Regions {
    /// Declares [`JOBS`] and `more` (TOML), and starts `us-1`.
    fn start(more: &str) -> Self {
        let scenario = Scenario::new();
        scenario.write_jobs(&format!("{JOBS}\n{more}"));
        let port = free_port();
        let us = scenario.replica(
            "us-1",
            &[
                "--queues",
                "default",
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
            ],
        );
        let regions = Self { scenario, port, us };
        // Runs can be triggered once the leader has published the jobs.
        assert!(
            wait_until(Duration::from_secs(10), || regions.status()["jobs"]
                .as_array()
                .is_some_and(|jobs| jobs
                    .iter()
                    .any(|job| job["job"] == "invoice-eu"))),
            "{}",
            regions.us.log()
        );
        regions
    }

    /// Another replica, serving `queues`.
    fn replica(&self, id: &str, queues: &str) -> ReplicaProcess {
        self.scenario.replica(id, &["--queues", queues])
    }

    /// A field of `redcron runs show run --json`.
    fn run_field(&self, run: &str, field: &str) -> Value {
        let shown = cli(
            &self.scenario.server,
            self.scenario.dir.path(),
            &["runs", "show", run, "--json"],
        )
        .success();
        one_document(&shown)[field].clone()
    }

    /// The worker that ran `run`, once it succeeded.
    fn worker_of(&self, run: &str) -> Option<String> {
        (self.run_field(run, "state") == "succeeded")
            .then(|| self.run_field(run, "worker").as_str().map(str::to_owned))
            .flatten()
    }

    /// Waits until `status` shows no live replica serving `queue`: when that began, in Redis
    /// time, as the replicas' reapers count it (a poll later at most).
    fn unserved_from(&self, queue: &str) -> i64 {
        assert!(
            wait_until(Duration::from_secs(15), || served_by(&self.status(), queue)
                == Some(Value::from(0))),
            "{queue} is still served: {}",
            self.status()
        );
        self.scenario.server.now_ms()
    }

    /// Checks that `run` of eu-west started in the default queue, on us-1, once eu-west had been
    /// unserved for its fallback_after (10 s) since `unserved_ms`: at least 8 s after it, which
    /// leaves 2 s for the status polls that saw it, and catches a move made as soon as a queue
    /// is seen unserved, or as a hold ends a few seconds after that.
    fn assert_moved_after_fallback_after(&self, run: &str, unserved_ms: i64) {
        assert_eq!(self.run_field(run, "queue"), "default");
        let worker = self.worker_of(run).unwrap_or_default();
        assert!(worker.starts_with("us-1/"), "{run} ran on {worker}");
        let started_ms = self.run_field(run, "started_ms").as_i64().unwrap_or(0);
        let waited = started_ms - unserved_ms;
        assert!(
            waited >= 8_000,
            "{run} started {waited} ms after eu-west was seen unserved, before its \
             fallback_after (10 s)\n{}",
            self.us.log()
        );
    }

    fn status(&self) -> Value {
        one_document(
            &cli(
                &self.scenario.server,
                self.scenario.dir.path(),
                &["status", "--json"],
            )
            .success(),
        )
    }

    fn metrics(&self) -> String {
        http_get(self.port, "/metrics").1
    }
}

/// `served_by` of `queue` in a `status --json` document.
fn served_by(status: &Value, queue: &str) -> Option<Value> {
    status["ready"]
        .as_array()
        .expect("ready")
        .iter()
        .find(|entry| entry["queue"] == queue)
        .map(|entry| entry["served_by"].clone())
}

#[test]
fn a_pinned_job_runs_only_where_its_queue_is_served_and_an_unserved_queue_shows() {
    let regions = Regions::start("");
    let mut eu = regions.replica("eu-1", "eu-west,default");
    assert!(
        wait_until(Duration::from_secs(10), || served_by(
            &regions.status(),
            "eu-west"
        ) == Some(Value::from(1))),
        "{}",
        regions.status()
    );
    let replicas = regions.status()["replicas"].clone();
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
    for _ in 0..4 {
        let run = regions.scenario.trigger("invoice-eu");
        assert!(
            wait_until(Duration::from_secs(10), || regions
                .worker_of(&run)
                .is_some()),
            "{run} did not run\n{}",
            eu.log()
        );
        let worker = regions.worker_of(&run).unwrap_or_default();
        assert!(worker.starts_with("eu-1/"), "{run} ran on {worker}");
    }

    // With eu-west's only replica gone, its runs wait, and everything says why.
    assert_eq!(eu.terminate(Duration::from_secs(15)), Some(0));
    let waiting = regions.scenario.trigger("invoice-eu");
    // runs list shows it, ready in its queue, as it does every run on its way to a worker.
    let table = cli(
        &regions.scenario.server,
        regions.scenario.dir.path(),
        &["runs", "list", "--job", "invoice-eu"],
    )
    .success();
    let row = table
        .lines()
        .find(|line| line.starts_with(waiting.as_str()))
        .unwrap_or_else(|| panic!("{waiting} not in\n{table}"));
    assert!(
        row.contains(" ready ") && row.contains(" eu-west "),
        "{table}"
    );
    for args in [
        &["runs", "list", "--job", "invoice-eu", "--json"][..],
        &["runs", "list", "--state", "ready", "--json"][..],
    ] {
        let listed = one_document(
            &cli(&regions.scenario.server, regions.scenario.dir.path(), args).success(),
        );
        let runs = listed["runs"].as_array().expect("runs");
        let run = runs
            .iter()
            .find(|run| run["id"] == waiting.as_str())
            .unwrap_or_else(|| panic!("{args:?} does not list {waiting}: {listed}"));
        assert_eq!(
            (run["state"].as_str(), run["queue"].as_str()),
            (Some("ready"), Some("eu-west")),
            "{listed}"
        );
    }
    let human = cli(
        &regions.scenario.server,
        regions.scenario.dir.path(),
        &["status"],
    )
    .success();
    assert!(
        human.contains(
            "queue eu-west: 1 ready run(s) and no live replica serves it: they wait for one \
             started with --queues eu-west (or for the queue's [queues] fallback, if it has \
             one)"
        ),
        "{human}"
    );
    assert_eq!(
        served_by(&regions.status(), "eu-west"),
        Some(Value::from(0))
    );
    assert!(
        wait_until(Duration::from_secs(10), || {
            let metrics = regions.metrics();
            // Exported at 0, not missing: an alert tells the two apart.
            metrics.contains("\nredcron_queue_replicas{queue=\"eu-west\",namespace=\"test\"} 0\n")
                && sample(
                    &metrics,
                    "redcron_queue_replicas{queue=\"default\",namespace=\"test\"}",
                ) == 1.0
        }),
        "{}",
        regions.metrics()
    );
    // The default queue's runs go on meanwhile.
    let cleanup = regions.scenario.trigger("cleanup");
    assert!(
        wait_until(Duration::from_secs(10), || regions
            .worker_of(&cleanup)
            .is_some()),
        "{}",
        regions.us.log()
    );
    assert_eq!(
        regions.worker_of(&waiting),
        None,
        "nothing serves eu-west: it waits"
    );

    // A replica serving eu-west again takes the waiting run.
    let _eu = regions.replica("eu-2", "eu-west");
    assert!(
        wait_until(Duration::from_secs(15), || regions
            .worker_of(&waiting)
            .is_some()),
        "{}",
        regions.us.log()
    );
    let worker = regions.worker_of(&waiting).unwrap_or_default();
    assert!(worker.starts_with("eu-2/"), "{waiting} ran on {worker}");

    // A queue that nothing in the schedule files names is said at start: most likely a typo.
    let mut typo = regions.replica("typo-1", "eu-wset,default");
    assert!(
        wait_until(Duration::from_secs(10), || typo.log().contains(
            "--queues names a queue that no job or [queues] table of this replica's schedule \
             files uses"
        ) && typo
            .log()
            .contains("eu-wset")),
        "{}",
        typo.log()
    );
    assert!(!typo.log().contains("queue=\"default\""), "{}", typo.log());
    assert_eq!(typo.terminate(Duration::from_secs(15)), Some(0));
}

/// `[queues.eu-west] fallback = "default"`: once no live replica has served eu-west for its
/// `fallback_after`, its ready runs move to the default queue and run there; not before.
#[test]
fn a_queue_unserved_past_its_fallback_after_sends_its_ready_runs_to_its_fallback() {
    let regions =
        Regions::start("[queues.eu-west]\nfallback = \"default\"\nfallback_after = \"10s\"\n");
    let mut eu = regions.replica("eu-1", "eu-west");
    // Served: it runs in its own queue, and the fallback is never used.
    let served = regions.scenario.trigger("invoice-eu");
    assert!(
        wait_until(Duration::from_secs(10), || regions
            .worker_of(&served)
            .is_some()),
        "{}",
        eu.log()
    );
    assert_eq!(regions.run_field(&served, "queue"), "eu-west");

    // Unserved: the run waits out fallback_after (10 s, counted once eu-1's heartbeat is
    // stale, as status shows it), then moves to default, where us-1 runs it.
    eu.kill9();
    let stranded = regions.scenario.trigger("invoice-eu");
    let unserved_ms = regions.unserved_from("eu-west");
    assert!(
        wait_until(Duration::from_secs(30), || regions
            .worker_of(&stranded)
            .is_some()),
        "{}\n{}",
        regions.status(),
        regions.us.log()
    );
    regions.assert_moved_after_fallback_after(&stranded, unserved_ms);
    assert!(
        regions
            .us
            .log()
            .contains("no live replica serves this queue: its ready runs moved to its fallback"),
        "{}",
        regions.us.log()
    );
    assert_eq!(
        sample(
            &regions.metrics(),
            "redcron_rerouted_runs_total{queue=\"eu-west\",namespace=\"test\"}"
        ),
        1.0,
        "{}",
        regions.metrics()
    );
}

/// A hold stops the moves, not the watch: a region that comes back during a hold and goes
/// again just before its end is unserved only from then, so its runs wait a whole
/// `fallback_after` more instead of moving the moment the hold ends.
#[test]
fn who_serves_a_queue_is_followed_through_a_hold() {
    let regions =
        Regions::start("[queues.eu-west]\nfallback = \"default\"\nfallback_after = \"10s\"\n");
    // Unserved from the start, as us-1 saw it at once: a run would move 10 s later, before the
    // hold ends, if the hold stopped the watch.
    let run = regions.scenario.trigger("invoice-eu");
    cli(
        &regions.scenario.server,
        regions.scenario.dir.path(),
        &["hold", "--for", "12s"],
    )
    .success();
    assert_eq!(
        regions.run_field(&run, "queue"),
        "eu-west",
        "moved before the hold\n{}",
        regions.us.log()
    );
    // The region comes back during the hold (it can claim nothing while held), then goes.
    let mut eu = regions.replica("eu-1", "eu-west");
    assert!(
        wait_until(Duration::from_secs(15), || served_by(
            &regions.status(),
            "eu-west"
        ) == Some(Value::from(1))),
        "{}",
        regions.status()
    );
    eu.kill9();
    // Unserved again once eu-1's heartbeat is stale, a few seconds before the hold ends: the run
    // waits a whole fallback_after from then, rather than moving the moment the hold ends as if
    // eu-west had been unserved all along.
    let unserved_ms = regions.unserved_from("eu-west");
    assert!(
        wait_until(Duration::from_secs(30), || regions
            .worker_of(&run)
            .is_some()),
        "{}",
        regions.us.log()
    );
    regions.assert_moved_after_fallback_after(&run, unserved_ms);
}
