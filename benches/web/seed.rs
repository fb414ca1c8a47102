//! The namespace the console is measured on, written by the engine itself: 10,000 declared
//! jobs, and 1,000,000 runs created by the client's bulk enqueue, the finished ones taken
//! through a replica's workers (success, a failure retried a day later, a permanent failure).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redcron::engine::Shutdown;
use redcron::engine::worker::Concurrency;
use redcron::handler::{Completed, RunContext, RunError};
use redcron::replica::{Replica, ReplicaConfig, ReplicaError};
use redcron::schedule::parse_file;
use redcron::store::{Enqueue, Enqueued, Store};
use tokio::task::JoinHandle;

/// Declared jobs beside the three the runs belong to: each fires once a year, so none fires
/// while the console is measured.
pub const JOBS: usize = 10_000;

/// Runs on the `backlog` queue, which no replica serves: ready, waiting.
const READY: usize = 250_000;
/// Runs due in a day: scheduled.
const SCHEDULED: usize = 250_000;
/// Runs that succeed.
const SUCCEEDED: usize = 350_000;
/// Runs that fail once and are due again a day later: retrying.
const RETRYING: usize = 75_000;
/// Runs that fail permanently: dead.
const DEAD: usize = 75_000;

/// How many runs one bulk enqueue creates: enough to keep Redis busy, few enough that a call
/// answers within the store's response timeout on a loaded machine (50,000 did not).
const ENQUEUED_PER_CALL: usize = 10_000;

/// The replica that declares the jobs and ran the finished runs; it keeps running (idle but
/// for its heartbeat) while the console is measured, so that its declarations stay live.
pub struct Seeded {
    /// A succeeded run, for the run page.
    pub succeeded_run: String,
    /// A dead run, for the API's dead run.
    pub dead_run: String,
    /// How many runs were created.
    pub runs: usize,
    shutdown: Shutdown,
    replica: JoinHandle<Result<(), ReplicaError>>,
}

impl Seeded {
    /// Stops the replica; a component that died while the console was measured is a failure of
    /// the benchmark.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.replica
            .await
            .expect("the seeding replica stops")
            .expect("no component of the seeding replica died");
    }
}

/// The jobs: `job0`..`job9999` (cron, once a year), `work` (the runs the replica takes, one
/// retry a day later), `backlog` (on a queue nobody serves) and `later` (enqueued a day ahead).
fn jobs_file() -> String {
    let mut toml: String = (0..JOBS)
        .map(|i| format!("[jobs.job{i}]\nschedule = \"0 3 1 1 *\"\ncommand = \"true\"\n"))
        .collect();
    toml.push_str(
        "[jobs.work]\ncommand = \"true\"\nretries = 1\nbackoff = \"1d\"\nmax_backoff = \"1d\"\n\
         [jobs.backlog]\ncommand = \"true\"\nqueue = \"backlog\"\n\
         [jobs.later]\ncommand = \"true\"\n",
    );
    toml
}

/// Seeds `store`'s namespace (cleared first; `url` is its Redis) and leaves its replica running.
pub async fn seed(store: &Store, url: &str) -> Seeded {
    let began = Instant::now();
    store.clear_namespace().await.expect("clear the namespace");
    let jobs = parse_file(Path::new("console.toml"), &jobs_file()).expect("valid jobs");
    store
        .publish_definitions(&jobs)
        .await
        .expect("publish the definitions");

    let handled = Arc::new(AtomicUsize::new(0));
    let counter = handled.clone();
    let mut config = ReplicaConfig {
        replica_id: "console-bench".to_owned(),
        ..ReplicaConfig::default()
    };
    config.workers.queues = vec!["default".to_owned()];
    config.workers.concurrency = Concurrency::fixed(200);
    let replica = Replica::builder(store.clone())
        .jobs(jobs)
        .handler("work", move |run: RunContext| {
            let counter = counter.clone();
            async move {
                counter.fetch_add(1, Ordering::Relaxed);
                match run.payload.as_deref() {
                    Some(r#"{"outcome":"fail"}"#) => Err(RunError::retryable("failed on purpose")),
                    Some(r#"{"outcome":"dead"}"#) => Err(RunError::permanent("dead on purpose")),
                    _ => Ok(Completed {
                        output: "done\n".to_owned(),
                        ..Completed::default()
                    }),
                }
            }
        })
        .config(config)
        .build();
    let shutdown = Shutdown::new();
    let replica = tokio::spawn(replica.run(shutdown.clone()));
    index_walked(store, url).await;

    let day_ahead = store.now_ms().await.expect("Redis's clock") + 24 * 3600 * 1000;
    let mut created = Vec::new();
    let batches: [(&str, Option<i64>, Option<&str>, usize); 5] = [
        ("backlog", None, None, READY),
        ("later", Some(day_ahead), None, SCHEDULED),
        ("work", None, Some(r#"{"outcome":"ok"}"#), SUCCEEDED),
        ("work", None, Some(r#"{"outcome":"fail"}"#), RETRYING),
        ("work", None, Some(r#"{"outcome":"dead"}"#), DEAD),
    ];
    for (job, due_ms, payload, count) in batches {
        let mut ids = Vec::with_capacity(count);
        let mut left = count;
        while left > 0 {
            let now = left.min(ENQUEUED_PER_CALL);
            let requests: Vec<Enqueue> = (0..now)
                .map(|_| Enqueue {
                    job: job.to_owned(),
                    due_ms,
                    payload: payload.map(str::to_owned),
                    priority: None,
                    unique: None,
                })
                .collect();
            for answer in store.enqueue_many(&requests).await.expect("enqueue") {
                let Enqueued::Scheduled { run_id, .. } = answer else {
                    panic!("a run of {job} was refused: {answer:?}");
                };
                ids.push(run_id);
            }
            left -= now;
        }
        created.push(ids);
    }
    let handled_expected = SUCCEEDED + RETRYING + DEAD;
    let limit = Instant::now() + Duration::from_secs(1_200);
    while handled.load(Ordering::Relaxed) < handled_expected
        || store.active_runs().await.expect("active runs") > 0
    {
        assert!(
            Instant::now() < limit,
            "seeding stalled: {} of {handled_expected} runs handled",
            handled.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let runs = created.iter().map(Vec::len).sum();
    println!("seeded_runs={runs}");
    println!("seed_s={:.0}", began.elapsed().as_secs_f64());
    Seeded {
        succeeded_run: created[2][SUCCEEDED / 2].clone(),
        dead_run: created[4][DEAD / 2].clone(),
        runs,
        shutdown,
        replica,
    }
}

/// Waits for the replica's reaper to end its first walk over the (still empty) namespace, as a
/// namespace this version created has from its first minute: readers then trust the index of
/// queues with ready runs, where a namespace seeded before that walk ends is read as one written
/// by an earlier version, by a `SCAN` of every key, until a walk of a million keys (half an hour)
/// ends.
async fn index_walked(store: &Store, url: &str) {
    let mut redis = redis::Client::open(url)
        .expect("the bench's Redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the bench's Redis");
    let marker = store.keys().ready_queues_walked();
    let limit = Instant::now() + Duration::from_secs(120);
    loop {
        let walked: bool = redis::cmd("EXISTS")
            .arg(&marker)
            .query_async(&mut redis)
            .await
            .expect("EXISTS");
        if walked {
            return;
        }
        assert!(
            Instant::now() < limit,
            "the replica's reaper walked no round over the empty namespace in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
