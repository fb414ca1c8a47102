//! What the engine costs at scale, against a private `redis-server` (AOF on, as `redcron run`
//! starts it) in a temporary directory:
//!
//! - `cron-lag`: 1,000 jobs firing every second on one replica with in-process no-op
//!   handlers; how late each fire's handler starts (start minus fire time), and whether every
//!   fire ran exactly once.
//! - `planner`: 1,000, 10,000 and 100,000 declared schedules (each firing every minute, all at
//!   the same second): how long the leader's ticks take until every fire in the horizon is
//!   planned (a tick plans at most its budget), how long an idle tick takes, and how much Redis
//!   memory each planned run costs (`INFO memory` before and after, definitions already
//!   published).
//!
//! `cargo bench --bench engine` runs both; `cargo bench --bench engine -- planner` (or
//! `cron-lag`) runs one. Numbers are printed as `name=value` lines.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redcron::engine::Shutdown;
use redcron::engine::elector::{Elector, ElectorConfig, ElectorTick};
use redcron::engine::planner::{Planner, PlannerConfig, PlannerTick};
use redcron::handler::{Completed, RunContext};
use redcron::replica::{Replica, ReplicaConfig};
use redcron::schedule::{Job, parse_file, shared_jobs};
use redcron::store::embedded::EmbeddedRedis;
use redcron::store::{Store, StoreSettings};
use tokio::sync::watch;

/// Jobs of the fire lag scenario, each firing every second.
const LAG_JOBS: usize = 1_000;

/// How long the fire lag scenario runs, and how much of its start is left out (the replica
/// elects itself and plans meanwhile).
const LAG_RUN: Duration = Duration::from_secs(13);
const LAG_WARM_UP: Duration = Duration::from_secs(3);

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with('-'))
        .collect();
    let wants = |scenario: &str| only.is_empty() || only.iter().any(|name| name == scenario);
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let redis = EmbeddedRedis::start(dir.path())
            .await
            .expect("redis-server must be installed (apt-get install redis-server)");
        if wants("cron-lag") {
            cron_lag(redis.url()).await;
        }
        if wants("planner") {
            for schedules in [1_000, 10_000, 100_000] {
                planner(redis.url(), schedules).await;
            }
        }
        redis.stop().await;
    });
}

/// `count` jobs named `job<i>` with `schedule`, handled in process.
fn declared(count: usize, schedule: &str) -> Vec<Job> {
    let toml: String = (0..count)
        .map(|i| {
            format!("[jobs.job{i}]\nschedule = \"{schedule}\"\ncommand = \"true\"\noverlap = \"allow\"\n")
        })
        .collect();
    parse_file(Path::new("bench.toml"), &toml).expect("valid benchmark jobs")
}

async fn store(url: &str, namespace: &str) -> Store {
    let store = Store::connect(url, namespace, StoreSettings::default())
        .await
        .expect("connect to the benchmark redis");
    store.clear_namespace().await.expect("clear the namespace");
    store
}

/// How many times each job started for each fire time (ms), and every start's fire time and
/// lag (ms).
type Starts = (HashMap<(String, i64), u32>, Vec<(i64, i64)>);

async fn cron_lag(url: &str) {
    let store = store(url, "bench-lag").await;
    let jobs = declared(LAG_JOBS, "* * * * * *");
    let starts: Arc<Mutex<Starts>> = Arc::default();
    let mut builder = Replica::builder(store.clone()).jobs(jobs.clone());
    for job in &jobs {
        let starts = starts.clone();
        builder = builder.handler(job.name.clone(), move |run: RunContext| {
            let started = chrono::Utc::now().timestamp_millis();
            let starts = starts.clone();
            async move {
                if let (Some(fire), Ok(mut starts)) = (run.fire_time, starts.lock()) {
                    let fire_ms = fire.timestamp_millis();
                    *starts.0.entry((run.job.name.clone(), fire_ms)).or_default() += 1;
                    starts.1.push((fire_ms, started - fire_ms));
                }
                Ok(Completed::default())
            }
        });
    }
    let mut config = ReplicaConfig {
        replica_id: "bench-lag".to_owned(),
        ..ReplicaConfig::default()
    };
    // A slot per job: fires of the same instant can only all start on time if they all have
    // somewhere to run, as 1,000 commands started together would need.
    config.workers.concurrency = redcron::engine::worker::Concurrency::fixed(LAG_JOBS);
    let replica = builder.config(config).build();
    let shutdown = Shutdown::new();
    let running = tokio::spawn(replica.run(shutdown.clone()));
    let begin = chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(LAG_RUN).await;
    let end = chrono::Utc::now().timestamp_millis();
    shutdown.cancel();
    running
        .await
        .expect("the replica stops")
        .expect("no component of the replica died");

    let measured_from = begin + millis(LAG_WARM_UP);
    // Whole seconds fully inside the window, with a second of margin at its end.
    let first_fire = (measured_from / 1_000 + 1) * 1_000;
    let last_fire = (end / 1_000 - 1) * 1_000;
    let (counts, starts) = starts
        .lock()
        .map(|starts| starts.clone())
        .unwrap_or_default();
    let expected = ((last_fire - first_fire) / 1_000 + 1) as usize * LAG_JOBS;
    let in_window = |fire_ms: i64| (first_fire..=last_fire).contains(&fire_ms);
    let ran = counts.keys().filter(|(_, fire)| in_window(*fire)).count();
    let doubled = counts
        .iter()
        .filter(|((_, fire), count)| in_window(*fire) && **count > 1)
        .count();
    let mut lags: Vec<i64> = starts
        .into_iter()
        .filter(|(fire_ms, _)| in_window(*fire_ms))
        .map(|(_, lag)| lag)
        .collect();
    lags.sort_unstable();
    println!("cron_jobs={LAG_JOBS}");
    println!("cron_fires_expected={expected}");
    println!("cron_fires_missed={}", expected.saturating_sub(ran));
    println!("cron_fires_doubled={doubled}");
    // Below 0 would be a fire started before its time.
    println!(
        "cron_fire_lag_ms_min={}",
        lags.first().copied().unwrap_or_default()
    );
    println!("cron_fire_lag_ms_p50={}", percentile(&lags, 0.50));
    println!("cron_fire_lag_ms_p99={}", percentile(&lags, 0.99));
    println!(
        "cron_fire_lag_ms_max={}",
        lags.last().copied().unwrap_or_default()
    );
    store.clear_namespace().await.expect("clear the namespace");
}

async fn planner(url: &str, schedules: usize) {
    let store = store(url, "bench-planner").await;
    let loading = Instant::now();
    let jobs = declared(schedules, "* * * * *");
    let load_ms = loading.elapsed().as_millis();
    store
        .publish_definitions(&jobs)
        .await
        .expect("publish definitions");
    let before = used_memory(url).await;

    let leadership = redcron::engine::Leadership::new();
    let mut elector = Elector::new(
        store.clone(),
        leadership.clone(),
        ElectorConfig {
            replica_id: "bench-planner".to_owned(),
            lease_ttl: Duration::from_secs(60),
        },
    );
    assert!(matches!(
        elector.tick().await.expect("elect"),
        ElectorTick::Acquired(_)
    ));
    let (_jobs, jobs_rx) = watch::channel(shared_jobs(jobs));
    let mut planner = Planner::new(store.clone(), leadership, jobs_rx, PlannerConfig::default());
    // Tick until a tick has nothing left to plan: each tick plans at most its budget.
    let mut tick_ms = Vec::new();
    let mut runs = 0;
    loop {
        let ticking = Instant::now();
        let tick = planner.tick().await.expect("plan");
        tick_ms.push(ticking.elapsed().as_millis());
        let PlannerTick::Planned { runs: added, .. } = tick else {
            panic!("the leader plans: {tick:?}");
        };
        runs += added;
        if added == 0 {
            break;
        }
    }
    let after = used_memory(url).await;
    let planning = &tick_ms[..tick_ms.len() - 1];
    println!("schedules={schedules}");
    println!("schedules_load_ms={load_ms}");
    println!("planner_ticks_to_plan_all={}", planning.len());
    // The first tick of a new leader also reads and checks every published definition.
    println!(
        "planner_first_tick_ms={}",
        planning.first().copied().unwrap_or_default()
    );
    println!(
        "planner_later_tick_ms_max={}",
        planning.iter().skip(1).max().copied().unwrap_or_default()
    );
    println!(
        "planner_idle_tick_ms={}",
        tick_ms.last().copied().unwrap_or_default()
    );
    println!("planned_runs={runs}");
    println!(
        "redis_bytes_per_planned_run={}",
        after.saturating_sub(before) / runs.max(1)
    );
    store.clear_namespace().await.expect("clear the namespace");
}

/// `used_memory` from `INFO memory`.
async fn used_memory(url: &str) -> u64 {
    let client = redis::Client::open(url).expect("a redis URL");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut connection)
        .await
        .expect("INFO memory");
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|bytes| bytes.trim().parse().ok())
        .expect("INFO memory has used_memory")
}

fn percentile(sorted: &[i64], fraction: f64) -> i64 {
    let index = ((sorted.len().saturating_sub(1)) as f64 * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
