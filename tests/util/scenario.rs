//! A scenario of real replicas: a Redis, a schedule directory and a ledger outside Redis that
//! jobs append `<run id> <start ms> [tag]` (or `<run id> start|end <ms>`) to, for tests to
//! compare with the fires the schedules define.

use std::path::PathBuf;
use std::time::Duration;

use redis::Commands;
use tempfile::TempDir;

use super::keys;
use super::redis_server::RedisServer;
use super::replica::ReplicaProcess;
use super::wait_until;

/// A Redis, a schedule directory and a ledger.
pub struct Scenario {
    /// The Redis the replicas share.
    pub server: RedisServer,
    /// Holds `schedules/`, the ledger and the replicas' logs.
    pub dir: TempDir,
}

impl Scenario {
    /// A new Redis and an empty schedule directory.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("schedules")).expect("schedules dir");
        Self {
            server: RedisServer::start(),
            dir,
        }
    }

    /// The directory the replicas read their schedules from.
    pub fn schedules(&self) -> PathBuf {
        self.dir.path().join("schedules")
    }

    /// The ledger file the jobs append to.
    pub fn ledger_path(&self) -> PathBuf {
        self.dir.path().join("ledger")
    }

    /// A shell command that appends `<run id> <start ms> <tag>` to the ledger.
    pub fn record(&self, tag: &str) -> String {
        format!(
            "echo \\\"$REDCRON_RUN_ID $(date +%s%3N) {tag}\\\" >> {}",
            self.ledger_path().display()
        )
    }

    /// A job `tick` firing every second that records its runs. Overlap is allowed: a replica
    /// frozen or killed mid-run holds an overlap lock until its lease expires, which would skip
    /// fires for reasons the tests that use it are not about.
    pub fn every_second_job(&self) -> String {
        format!(
            "[jobs.tick]\nschedule = \"* * * * * *\"\noverlap = \"allow\"\ncommand = \"{}\"\n",
            self.record("")
        )
    }

    /// Starts replicas `ids` with `extra` flags and waits until one of them leads.
    pub fn replicas_with_a_leader(&self, ids: &[&str], extra: &[&str]) -> Vec<ReplicaProcess> {
        let replicas: Vec<ReplicaProcess> = ids.iter().map(|id| self.replica(id, extra)).collect();
        let led = wait_until(Duration::from_secs(10), || self.leader().is_some());
        assert!(
            led,
            "no leader was elected\n{}",
            replicas
                .iter()
                .map(|replica| format!("log of {}:\n{}", replica.id, replica.log()))
                .collect::<Vec<_>>()
                .join("\n")
        );
        replicas
    }

    /// Starts replicas r1, r2 and r3 on [`Scenario::every_second_job`] and waits until one
    /// of them leads.
    pub fn three_replicas_with_a_leader(&self) -> Vec<ReplicaProcess> {
        self.write_jobs(&self.every_second_job());
        self.replicas_with_a_leader(&["r1", "r2", "r3"], &[])
    }

    /// Replicas `ids`, once a fire of theirs has run.
    pub fn firing_replicas(&self, ids: &[&str]) -> Vec<ReplicaProcess> {
        let replicas = ids.iter().map(|id| self.replica(id, &[])).collect();
        assert!(
            wait_until(Duration::from_secs(10), || !self.ledger().is_empty()),
            "no fire ran"
        );
        replicas
    }

    /// Which of `replicas` holds the leader lease, and under which epoch.
    pub fn leading_replica(&self, replicas: &[ReplicaProcess]) -> (usize, u64) {
        let token = self.leader().expect("a leader");
        let (id, epoch) = token.rsplit_once(':').expect("<id>:<epoch>");
        let index = replicas
            .iter()
            .position(|replica| replica.id == id)
            .expect("the leader is one of ours");
        (index, epoch.parse().expect("an epoch"))
    }

    /// Writes `toml` as the only schedule file.
    pub fn write_jobs(&self, toml: &str) {
        std::fs::write(self.schedules().join("jobs.toml"), toml).expect("write jobs");
    }

    /// `redcron trigger job`, once a replica has declared it: the run id.
    pub fn trigger(&self, job: &str) -> String {
        let mut out = String::new();
        let declared = wait_until(Duration::from_secs(10), || {
            let run = crate::util::cli(&self.server, self.dir.path(), &["trigger", job]);
            out = format!("{}{}", run.stdout, run.stderr);
            run.code == Some(0)
        });
        assert!(declared, "cannot trigger {job}: {out}");
        out.split_whitespace()
            .next()
            .expect("the run id")
            .to_owned()
    }

    /// Starts replica `id` on the scenario's schedules, with `extra` flags.
    pub fn replica(&self, id: &str, extra: &[&str]) -> ReplicaProcess {
        ReplicaProcess::start(
            id,
            &self.server.url(),
            &self.schedules(),
            self.dir.path(),
            extra,
        )
    }

    /// Starts replica `id` with `NODE=<id>` in its commands' environment, as each machine of a
    /// fleet names itself, so that a job that runs on every replica can record where it ran
    /// (`record("$NODE")`); `extra` flags as for [`Scenario::replica`].
    pub fn node(&self, id: &str, extra: &[&str]) -> ReplicaProcess {
        self.node_with_env(id, extra, &[])
    }

    /// Like [`Scenario::node`], with `env` added to its environment.
    pub fn node_with_env(&self, id: &str, extra: &[&str], env: &[(&str, &str)]) -> ReplicaProcess {
        let mut env = env.to_vec();
        env.push(("NODE", id));
        self.replica_with_env(id, extra, &env)
    }

    /// Like [`Scenario::replica`], with `env` added to its environment.
    pub fn replica_with_env(
        &self,
        id: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> ReplicaProcess {
        ReplicaProcess::start_with_env(
            id,
            &self.server.url(),
            &self.schedules(),
            self.dir.path(),
            extra,
            env,
        )
    }

    /// Every ledger line: run id, start ms, tag.
    pub fn ledger(&self) -> Vec<(String, i64, String)> {
        crate::util::read_ledger(&self.ledger_path())
    }

    /// Redis's clock, in ms: what fire times are measured against.
    pub fn redis_now_ms(&self) -> i64 {
        self.server.now_ms()
    }

    /// The leader lease's token (`<id>:<epoch>`), when one is held.
    pub fn leader(&self) -> Option<String> {
        self.server
            .connection()
            .get(keys().leader())
            .expect("GET leader")
    }

    /// `state` and `reason` of run `run_id`, read together (`None` for a run that has no
    /// record).
    pub fn run_state(&self, run_id: &str) -> (Option<String>, Option<String>) {
        self.server
            .connection()
            .hmget(keys().run(run_id), &["state", "reason"])
            .expect("HMGET")
    }

    /// Every field of run `run_id`'s hash: what a failed assertion about the run shows.
    pub fn run_record(&self, run_id: &str) -> std::collections::BTreeMap<String, String> {
        self.server
            .connection()
            .hgetall(keys().run(run_id))
            .expect("HGETALL")
    }

    /// Field `field` of run `run_id`'s hash.
    pub fn run_field(&self, run_id: &str, field: &str) -> Option<String> {
        self.server
            .connection()
            .hget(keys().run(run_id), field)
            .expect("HGET")
    }
}

/// Sleeps until Redis's clock reads `ms`.
pub fn sleep_until(scenario: &Scenario, ms: i64) {
    let wait = ms - scenario.redis_now_ms();
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait as u64));
    }
}

/// The fire time of a cron run id `<job>@<ms>`, or `<job>@<ms>:<replica>` for a job that runs
/// on every replica.
pub fn fire_ms(run_id: &str) -> i64 {
    run_id
        .rsplit_once('@')
        .map(|(_, fire)| fire.split_once(':').map_or(fire, |(ms, _)| ms))
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("{run_id} is not a cron run id"))
}

/// The value below which `fraction` of `sorted` lies.
pub fn percentile(sorted: &[i64], fraction: f64) -> i64 {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index.min(sorted.len() - 1)]
}

/// What a replica logs when Redis lost the namespace's data.
pub const DATA_LOST: &str = "Redis lost this namespace's data since the last heartbeat";

/// A command that records its start and end around `work`.
pub fn recorded(scenario: &Scenario, work: &str) -> String {
    let ledger = scenario.ledger_path();
    let ledger = ledger.display();
    format!(
        "echo \\\"$REDCRON_RUN_ID start $(date +%s%3N)\\\" >> {ledger}; {work}; \
         echo \\\"$REDCRON_RUN_ID end $(date +%s%3N)\\\" >> {ledger}"
    )
}

/// Each run's start and end (ms) from the ledger, by run id, in the order the runs started.
pub fn intervals(scenario: &Scenario) -> Vec<(String, i64, Option<i64>)> {
    let text = std::fs::read_to_string(scenario.ledger_path()).unwrap_or_default();
    let mut runs: Vec<(String, i64, Option<i64>)> = Vec::new();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [run, what, ms] = words[..] else {
            continue;
        };
        let Ok(ms) = ms.parse::<i64>() else { continue };
        match what {
            "start" => runs.push((run.to_owned(), ms, None)),
            "end" => {
                if let Some(entry) = runs
                    .iter_mut()
                    .rev()
                    .find(|(id, _, end)| id == run && end.is_none())
                {
                    entry.2 = Some(ms);
                }
            }
            _ => {}
        }
    }
    runs
}

/// Every entry of the events stream, oldest first.
/// The actions the events stream holds of `job` (all jobs' when `None`), oldest first: action,
/// actor, first run, how many runs.
pub fn actions(scenario: &Scenario, job: Option<&str>) -> Vec<(String, String, String, u64)> {
    event_entries(scenario)
        .iter()
        .filter(|entry| entry.get::<String>("action").is_some())
        .filter(|entry| job.is_none() || entry.get::<String>("job").as_deref() == job)
        .map(|entry| {
            let field = |name: &str| entry.get::<String>(name).unwrap_or_default();
            (
                field("action"),
                field("actor"),
                field("run"),
                field("runs").parse().unwrap_or(0),
            )
        })
        .collect()
}

/// Every entry of the events stream, oldest first.
pub fn event_entries(scenario: &Scenario) -> Vec<redis::streams::StreamId> {
    let reply: redis::streams::StreamRangeReply = scenario
        .server
        .connection()
        .xrange_all(keys().events())
        .expect("XRANGE");
    reply.ids
}

/// Whether `job`'s fire at `fire` (ms) was skipped as the docs say a fire can be on a loaded
/// machine (docs/semantics.md): as the overlap of an earlier run of the job that, by Redis's own
/// times, had started and not ended when the skip was recorded, or made ready in time and found
/// missed when it would start, past its `missed_after_ms`.
pub fn skipped_as_documented(scenario: &Scenario, job: &str, fire: i64) -> bool {
    let field_ms = |run: &str, field: &str| {
        scenario
            .run_field(run, field)
            .and_then(|ms| ms.parse::<i64>().ok())
    };
    let run = format!("{job}@{fire}");
    let skipped_ms = field_ms(&run, "finished_ms");
    match scenario.run_field(&run, "reason").as_deref() {
        Some("missed") => field_ms(&run, "missed_after_ms")
            .zip(skipped_ms)
            .is_some_and(|(after, skipped)| skipped > after),
        Some("overlap") => skipped_ms.is_some_and(|skipped| {
            (1..=5).any(|before| {
                let earlier = format!("{job}@{}", fire - before * 1_000);
                field_ms(&earlier, "started_ms").is_some_and(|ms| ms <= skipped)
                    && field_ms(&earlier, "finished_ms").is_some_and(|ms| ms >= skipped)
            })
        }),
        _ => false,
    }
}

/// A fire due while a run of its job that had started by then still ran (a catch-up after a
/// stall, say) is skipped as an overlap; no other fire is: every `overlap` skip in `skips` had
/// such a run in the ledger.
#[track_caller]
pub fn assert_overlaps_were_real(
    scenario: &Scenario,
    runs: &[(String, i64, Option<i64>)],
    skips: &[(String, String)],
) {
    for (run, reason) in skips {
        if reason != "overlap" {
            continue;
        }
        let due = fire_ms(run);
        let job = run.split('@').next().unwrap_or_default();
        // A run holds its job from its start until its outcome is recorded, milliseconds
        // after its command exits: Redis's own times of both.
        let running = runs.iter().any(|(other, _, _)| {
            let time = |field| -> Option<i64> {
                scenario
                    .run_field(other, field)
                    .and_then(|ms| ms.parse().ok())
            };
            other.starts_with(&format!("{job}@"))
                && time("started_ms").is_some_and(|started| started <= due)
                && time("finished_ms").is_none_or(|finished| finished > due)
        });
        assert!(
            running,
            "{run} was skipped as an overlap with nothing running"
        );
    }
}
