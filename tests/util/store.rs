//! Store fixtures for the tests that seed Redis through the store and read it back: given this
//! state and this call, expect that state.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use redcron::schedule::{Job, parse_file};
use redcron::store::{
    Acquisition, Claim, Claimed, ClaimedRun, Enqueue, Enqueued, FailReason, Failure, JobPlan,
    LeaderToken, PlanOutcome, PlannedRun, Store, StoreSettings, cron_run_id,
};
use redis::Commands;

use super::redis_server::RedisServer;
use super::{NAMESPACE, keys};

/// The lease of the runs the fixtures claim and of the leader lease they take.
pub const LEASE: Duration = Duration::from_secs(30);
/// The misfire threshold the fixtures promote with.
pub const THRESHOLD: Duration = Duration::from_secs(60);

/// A job whose runs do not overlap, as a scheduled job's by default (fires are planned by hand
/// here, so it needs no schedule).
pub const FORBID_TICK: &str = "[jobs.tick]\ncommand = \"true\"\noverlap = \"forbid\"\n";

/// A store on `server`, in the tests' namespace.
pub async fn connect(server: &RedisServer) -> Store {
    Store::connect(&server.url(), NAMESPACE, StoreSettings::default())
        .await
        .expect("connect to the test redis")
}

/// The jobs of `toml`, which must be valid.
pub fn jobs(toml: &str) -> Vec<Job> {
    parse_file(Path::new("test.toml"), toml).expect("valid test jobs")
}

/// Takes the leader lease, which must be free.
pub async fn leader(store: &Store) -> LeaderToken {
    match store
        .acquire_leader("planner", LEASE)
        .await
        .expect("acquire")
    {
        Acquisition::Acquired(token) => token,
        Acquisition::Held(holder) => panic!("lease held by {holder}"),
    }
}

/// A Redis with `toml`'s jobs published, and a store holding the leader lease.
pub async fn setup(toml: &str) -> (RedisServer, Store, LeaderToken) {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let jobs = jobs(toml);
    store.publish_definitions(&jobs).await.expect("publish");
    declare(&store, "replica", jobs).await;
    let token = leader(&store).await;
    (server, store, token)
}

/// Publishes `jobs` as the declarations of replica `replica`, as its heartbeat does: its
/// workers claim runs of those jobs only.
pub async fn declare(store: &Store, replica: &str, jobs: Vec<Job>) {
    let jobs: Vec<std::sync::Arc<Job>> = jobs.into_iter().map(std::sync::Arc::new).collect();
    store
        .publish_replica_jobs(replica, &jobs, Duration::from_secs(3600))
        .await
        .expect("declare");
}

/// Plans `fires` (ms) of `job`, due at their fire time.
pub async fn plan(store: &Store, token: &LeaderToken, job: &str, fires: &[i64]) -> PlanOutcome {
    let plan = JobPlan {
        job: job.to_owned(),
        from_cursor_ms: 0,
        cursor_ms: fires.iter().copied().max().unwrap_or(0),
        runs: fires
            .iter()
            .map(|&fire_ms| PlannedRun {
                run_id: cron_run_id(job, fire_ms),
                fire_ms,
                due_ms: fire_ms,
            })
            .collect(),
        skipped: Vec::new(),
    };
    store.plan_fires(token, &plan).await.expect("plan")
}

/// One claim as worker `replica/0` on `queues`.
pub async fn claim(store: &Store, queues: &[&str]) -> Claim {
    let queues: Vec<String> = queues.iter().map(|queue| (*queue).to_owned()).collect();
    store
        .claim_run("replica/0", &queues, LEASE, 100)
        .await
        .expect("claim")
}

/// Like [`claim`], which must hand out a run: that run.
pub async fn claim_run(store: &Store, queues: &[&str]) -> ClaimedRun {
    match claim(store, queues).await {
        Claim::Run { run, .. } => run,
        other => panic!("expected a run, got {other:?}"),
    }
}

/// Claims for `workers` idle workers at once, as a replica does.
pub async fn claim_for(store: &Store, workers: usize) -> Claimed {
    let names: Vec<String> = (0..workers).map(|slot| format!("replica/{slot}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    store
        .claim_runs(&names, &["default".to_owned()], LEASE, 100)
        .await
        .expect("claim")
}

/// A failed attempt of the given `reason`, as a worker records one.
pub fn failure(reason: FailReason) -> Failure {
    Failure {
        reason,
        message: "exit status 1".to_owned(),
        exit_code: Some(1),
        output: "boom".to_owned(),
    }
}

/// Every field of run `run_id`'s hash.
pub fn run_hash(server: &RedisServer, run_id: &str) -> HashMap<String, String> {
    server
        .connection()
        .hgetall(keys().run(run_id))
        .expect("HGETALL")
}

/// Every event in the stream as (run, state, reason).
pub fn events(server: &RedisServer) -> Vec<(String, String, String)> {
    let reply: redis::streams::StreamRangeReply = server
        .connection()
        .xrange_all(keys().events())
        .expect("XRANGE");
    reply
        .ids
        .iter()
        .map(|entry| {
            let field = |name: &str| entry.get::<String>(name).unwrap_or_default();
            (field("run"), field("state"), field("reason"))
        })
        .collect()
}

/// Every `skipped` event as (run, reason), oldest first.
pub fn skipped(server: &RedisServer) -> Vec<(String, String)> {
    events(server)
        .into_iter()
        .filter(|(_, state, _)| state == "skipped")
        .map(|(run, _, reason)| (run, reason))
        .collect()
}

/// Enqueues an ad-hoc run of `job`, due at `due_ms` (now when `None`); its id.
pub async fn enqueue(store: &Store, job: &str, due_ms: Option<i64>) -> String {
    let request = Enqueue {
        job: job.to_owned(),
        due_ms,
        payload: None,
        priority: None,
        unique: None,
    };
    match store.enqueue_run(&request).await.expect("enqueue") {
        Enqueued::Scheduled { run_id, .. } => run_id,
        other => panic!("not enqueued: {other:?}"),
    }
}

/// A live replica `id` that beat `ago_ms` ago, declaring the jobs of `toml` as its heartbeat
/// publishes them.
pub async fn replica(store: &Store, id: &str, toml: &str, ago_ms: i64) {
    let info = [
        ("host", "test".to_owned()),
        ("heartbeat_period_ms", "2000".to_owned()),
    ];
    let now_ms = store.now_ms().await.expect("TIME");
    store
        .clone()
        .with_frozen_clock(now_ms - ago_ms)
        .heartbeat(id, &info, Duration::from_secs(3600))
        .await
        .expect("heartbeat");
    declare(store, id, jobs(toml)).await;
}

/// Jobs a leader published for [`published`]: `greet`, on demand, that appends its payload to
/// `ledger`, and `tick`, every second, that appends its run id to `ticks`.
pub const PUBLISHED_JOBS: &str = "[jobs.greet]\ncommand = \"cat >> ledger\"\nretries = 1\n\
                    [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"echo $REDCRON_RUN_ID >> ticks\"\n";

/// A Redis with [`PUBLISHED_JOBS`] published as a leader would, and a directory to run commands
/// in.
pub async fn published() -> (RedisServer, tempfile::TempDir, Store) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = connect(&server).await;
    let jobs = jobs(PUBLISHED_JOBS);
    store.publish_definitions(&jobs).await.expect("publish");
    declare(&store, "replica", jobs).await;
    (server, dir, store)
}
