//! The only code that talks to Redis: one typed async function per script or command.
//!
//! Every state change of a run is one Lua script (`lua/`), so no crash between two commands can
//! lose or duplicate a run; see `DESIGN.md` for the data model and the run state machine.

mod declarations;
pub mod embedded;
pub mod keys;
mod scripts;

use std::collections::HashMap;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{AsyncCommands, FromRedisValue, Script, Value};
use thiserror::Error;

use crate::metrics::{HEALTH, METRICS};
use crate::schedule::Priority;
use declarations::published_declarations;
pub use declarations::{DeclarationsSignal, PublishedDefinition, canonical_json};
pub use keys::Keys;

/// Why a store operation failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Redis could not be reached or refused the command; retry with backoff.
    #[error("redis: {0}")]
    Redis(#[source] redis::RedisError),
    /// A script or command answered in a shape redcron does not write: foreign or corrupt data.
    #[error("unexpected reply from {operation}: {detail}")]
    Reply {
        /// The script or command.
        operation: &'static str,
        /// What was wrong with the reply.
        detail: String,
    },
    /// A claim found no declarations of this replica in Redis (they expired, Redis was
    /// restored): publish them ([`Store::publish_replica_jobs`]) and claim again.
    #[error("the declarations of replica {replica} are not in Redis")]
    Undeclared {
        /// The replica's id.
        replica: String,
    },
}

/// Every failed Redis call of the store becomes a [`StoreError`] here (the `?` after each call),
/// so this is where failures are counted, whichever component made the call and whether or not
/// it goes on to swallow the error, and where a refusal to write is noticed for `/readyz`.
impl From<redis::RedisError> for StoreError {
    fn from(error: redis::RedisError) -> Self {
        METRICS.redis_errors_total.inc();
        if refuses_writes(&error) {
            HEALTH.write_refused();
        }
        StoreError::Redis(error)
    }
}

/// Whether Redis answered but takes no writes now: out of memory under `noeviction`, a
/// read-only replica, a failed snapshot with `stop-writes-on-bgsave-error`, too few replicas
/// for `min-replicas-to-write`. Inside a transaction the refusal shows only in the message of
/// the aborted `EXEC`, so the message is read too.
fn refuses_writes(error: &redis::RedisError) -> bool {
    const CODES: [&str; 4] = ["OOM", "READONLY", "MISCONF", "NOREPLICAS"];
    if error.code().is_some_and(|code| CODES.contains(&code)) {
        return true;
    }
    let message = error.to_string();
    CODES.iter().any(|code| {
        message
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| word == *code)
    })
}

/// How long things are kept and how much history is kept.
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// Approximate length of the events stream.
    pub events_maxlen: u64,
    /// How long a finished (succeeded or skipped) run's hash is kept.
    pub retention: Duration,
    /// How long a fingerprint keeps a second run with the same one from executing.
    pub fingerprint_ttl: Duration,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            events_maxlen: 100_000,
            retention: Duration::from_secs(7 * 24 * 3600),
            fingerprint_ttl: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// The leader lease this replica holds: `<replica id>:<epoch>`. Every planner write presents it,
/// and is refused once another replica has taken the lease (fencing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderToken(String);

impl LeaderToken {
    /// The token as stored in Redis.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The epoch: higher for every later acquisition.
    pub fn epoch(&self) -> Option<u64> {
        self.0.rsplit_once(':')?.1.parse().ok()
    }
}

/// The answer to an attempt to take the leader lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquisition {
    /// This replica is the leader now.
    Acquired(LeaderToken),
    /// Another replica holds the lease: its token.
    Held(String),
}

/// One fire the planner puts in the due set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRun {
    /// `<job>@<fire ms>`: planning the same fire twice is a no-op.
    pub run_id: String,
    /// When the schedule fires, ms since the epoch.
    pub fire_ms: i64,
    /// When the run may start: the fire time plus the job's jitter.
    pub due_ms: i64,
}

/// A fire the planner decided not to run (missed, past its starting deadline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFire {
    /// `<job>@<fire ms>`.
    pub run_id: String,
    /// Why, as recorded in the events stream.
    pub reason: &'static str,
}

/// One planner write for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    /// The job.
    pub job: String,
    /// The last fire considered (planned or skipped), ms: the job's new cursor.
    pub cursor_ms: i64,
    /// Fires to run.
    pub runs: Vec<PlannedRun>,
    /// Fires recorded as skipped.
    pub skipped: Vec<SkippedFire>,
}

/// What a fenced planner write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanOutcome {
    /// Written: how many runs were new.
    Planned(u64),
    /// Refused: another token holds the lease (or none does). The replica must step down.
    Fenced(String),
}

/// What one promotion pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promoted {
    /// Runs moved to their ready lists.
    pub ready: u64,
    /// Runs skipped (missed, past deadline, undeclared job) or dead (corrupt).
    pub skipped: u64,
    /// Fires left due because their job's published definition is damaged: the leader writes
    /// it again at its next tick.
    pub deferred: u64,
    /// When the next run is due, ms; `None` when nothing is.
    pub next_due_ms: Option<i64>,
    /// Redis's time when the pass ran, ms: with `next_due_ms`, how long to sleep.
    pub now_ms: i64,
}

/// A run a worker has claimed, with its lease recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedRun {
    /// The run id.
    pub id: String,
    /// The worker that holds its lease, one of those that claimed.
    pub worker: String,
    /// The declared job it runs.
    pub job: String,
    /// This attempt's number, from 1.
    pub attempt: u32,
    /// Attempts allowed: retries + 1.
    pub max_attempts: u32,
    /// The fire time of a cron run, ms.
    pub fire_ms: Option<i64>,
    /// The payload of an ad-hoc run, for the command's standard input.
    pub payload: Option<String>,
    /// How long to wait before starting it: a run claimed ahead of its due time starts at that
    /// time, measured on Redis's clock.
    pub start_in: Duration,
    /// Its job had no free slot when it was claimed ahead: take one
    /// ([`Store::take_job_slot`]) before starting it.
    pub pending_slot: Option<PendingSlot>,
}

/// What a run claimed ahead without a slot of its job becomes at its due time when no slot is
/// free then either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingSlot {
    /// Skipped as an overlap if a run of its job that started by its due time still runs (the
    /// first claim of a cron fire of an `overlap = "forbid"` job); else it waits.
    SkipIfRunning,
    /// It waits for a slot.
    Wait,
}

/// A claimed run whose stored fields are not what redcron writes (foreign or damaged data): it
/// cannot be executed and should be failed with [`FailReason::Corrupt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptRun {
    /// The run id.
    pub run_id: String,
    /// The worker that holds its lease.
    pub worker: String,
    /// What is wrong.
    pub detail: String,
}

/// An active run that Redis says a worker of a replica holds, see [`Store::held_runs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRun {
    /// The run id.
    pub run_id: String,
    /// The worker that holds its lease, `<replica id>/<slot>`.
    pub worker: String,
    /// The attempt it runs; `None` when the hash does not say (damaged).
    pub attempt: Option<u32>,
}

/// A run's success, as a worker reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ack {
    /// The run id.
    pub run_id: String,
    /// The worker that claimed it.
    pub worker: String,
    /// The attempt it ran.
    pub attempt: u32,
    /// The command's exit code; `None` for a handler without one.
    pub exit_code: Option<i32>,
    /// The tail of its output.
    pub output: String,
}

/// The leases a claim gives its runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimLeases {
    /// A run's lease, extended while it runs.
    pub run: Duration,
    /// The lease of a run claimed ahead, past its due time: short, so that a run whose replica
    /// dies before it starts is reaped soon after its time; its worker extends it to
    /// [`ClaimLeases::run`] when it starts the run.
    pub ahead: Duration,
}

/// The lease past its due time of a run claimed `claim_ahead` before it: a few times the lead,
/// at least [`MIN_AHEAD_LEASE`].
pub fn ahead_lease(claim_ahead: Duration) -> Duration {
    (claim_ahead * 5).max(MIN_AHEAD_LEASE)
}

/// The shortest lease a run claimed ahead holds past its due time: room for its worker's timer
/// and the extension it sends when it starts the run.
pub const MIN_AHEAD_LEASE: Duration = Duration::from_secs(1);

impl From<Duration> for ClaimLeases {
    /// `run` for running runs, [`MIN_AHEAD_LEASE`] for runs claimed ahead.
    fn from(run: Duration) -> Self {
        Self {
            run,
            ahead: MIN_AHEAD_LEASE,
        }
    }
}

/// What one claim for several idle workers did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimed {
    /// The runs claimed, at most one per worker, in the order of the workers given; those that
    /// cannot be executed as errors.
    pub runs: Vec<Result<ClaimedRun, CorruptRun>>,
    /// Runs skipped (paused, duplicate, overlap) or buried (corrupt) on the way.
    pub skipped: u64,
    /// Every ready list of the served queues ran dry: nothing to claim until a wake-up.
    pub drained: bool,
    /// Redis's clock at the end of the call (ms), which the runs' waits count from; `None`
    /// when no run was claimed.
    pub redis_now_ms: Option<i64>,
}

/// A reading of Redis's clock, with when it was asked and answered on this machine's monotonic
/// clock: it maps a time on Redis's clock to the latest local instant it can be, so a run
/// started then never starts before its time on Redis's clock.
#[derive(Debug, Clone, Copy)]
pub struct RedisClock {
    sent: tokio::time::Instant,
    received: tokio::time::Instant,
    redis_micros: i64,
}

impl RedisClock {
    /// Time between asking and the answer: the reading's uncertainty.
    pub fn round_trip(&self) -> Duration {
        self.received - self.sent
    }

    /// When the reading was answered.
    pub fn received(&self) -> tokio::time::Instant {
        self.received
    }

    /// The latest local instant at which Redis's clock can read `redis_ms`: Redis read its
    /// clock before the answer arrived, so its time then is at most the time of the answer.
    pub fn latest_instant_of(&self, redis_ms: i64) -> tokio::time::Instant {
        let ahead_micros = redis_ms.saturating_mul(1000) - self.redis_micros;
        match u64::try_from(ahead_micros) {
            Ok(micros) => self.received + Duration::from_micros(micros),
            Err(_) => self.received,
        }
    }
}

/// The answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// A run to execute; `skipped` runs were recorded as skipped on the way.
    Run {
        /// The run.
        run: ClaimedRun,
        /// Runs skipped before it (paused, duplicate, overlap).
        skipped: u64,
    },
    /// Every ready list of the served queues is empty.
    Empty {
        /// Runs skipped before finding that out.
        skipped: u64,
    },
    /// The call's pop limit went to skipped runs: claim again.
    More {
        /// Runs skipped.
        skipped: u64,
    },
    /// A run was claimed whose hash lacks what every run has (foreign or damaged data): it
    /// cannot be executed and should be failed with [`FailReason::Corrupt`].
    Corrupt {
        /// The run id.
        run_id: String,
        /// What is missing or wrong.
        detail: String,
    },
}

/// Why a run ended without success; decides whether it is tried again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailReason {
    /// The command or handler failed: retried while attempts are left.
    Failed,
    /// It ran past its timeout: retried while attempts are left.
    Timeout,
    /// It failed in a way retrying cannot fix: dead at once.
    Permanent,
    /// Its worker died (lease expired), or its replica does not run it although Redis says it
    /// does (the replica restarted, Redis was restored from an older copy): run again at once
    /// for at-least-once jobs (a few times at most), dead for at-most-once jobs. Uses no
    /// attempt.
    Lost,
    /// Its replica shut down while it ran and stopped it: run again at once for at-least-once
    /// jobs, dead for at-most-once jobs (it may have done part of its work). Uses no attempt.
    Interrupted,
    /// Its replica shut down before starting it (it was claimed ahead): run again at once,
    /// whatever its delivery. Uses no attempt.
    NotStarted,
    /// Its hash cannot be decoded: dead at once.
    Corrupt,
}

impl FailReason {
    fn as_str(self) -> &'static str {
        match self {
            FailReason::Failed => "failed",
            FailReason::Timeout => "timeout",
            FailReason::Permanent => "permanent",
            FailReason::Lost => "lost",
            FailReason::Interrupted => "interrupted",
            FailReason::NotStarted => "not-started",
            FailReason::Corrupt => "corrupt",
        }
    }
}

/// How a run ended without success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// Why: decides retry or dead.
    pub reason: FailReason,
    /// What went wrong, for people.
    pub message: String,
    /// The command's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The tail of its output.
    pub output: String,
}

impl Failure {
    /// A failure that happened outside the command (it produced no exit code or output).
    pub fn without_output(reason: FailReason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            exit_code: None,
            output: String::new(),
        }
    }
}

/// Whether a run claimed ahead may start, see [`Store::take_job_slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobSlot {
    /// The slot is the run's: start it.
    Taken,
    /// Its job is still busy: the run was skipped as an overlap.
    Busy,
    /// Every slot is taken: the run waits in its job's queue until one is freed; it used no
    /// attempt.
    Waiting,
    /// The run is no longer this worker's (reaped).
    Gone,
}

/// What became of a failed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// Back in the due set.
    Retrying {
        /// When it is due again, ms.
        due_ms: i64,
    },
    /// In the dead letters.
    Dead,
    /// Not this worker's any more (reaped), or, for the reaper, alive again (lease extended).
    Gone,
}

/// A connection to redcron's keys in one namespace.
#[derive(Clone)]
pub struct Store {
    /// Opens the connections that cannot be shared: subscriptions and blocking pops.
    client: redis::Client,
    /// Multiplexed, reconnecting: clones share one connection.
    connection: ConnectionManager,
    keys: Keys,
    settings: StoreSettings,
    /// A fixed "now" passed to every script instead of Redis's clock: for tests of time-based
    /// decisions only.
    frozen_now_ms: Option<i64>,
}

/// How long a command or script may take to answer: a promotion or a catch-up plan of thousands
/// of runs is one script call.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long connecting to Redis may take.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest pause between reconnection attempts after Redis went away.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// Blocks until runs become ready in some queues, on a connection of its own (a blocking pop
/// would hold up every command sharing a multiplexed connection).
pub struct ReadyWaiter {
    connection: redis::aio::MultiplexedConnection,
    markers: Vec<String>,
    timeout: Duration,
}

impl ReadyWaiter {
    /// Waits until a queue's wake marker is set or the timeout passes; `true` when woken.
    ///
    /// # Errors
    /// Redis errors: the caller should open a new waiter after a pause.
    pub async fn wait(&mut self) -> Result<bool, StoreError> {
        let woken: Option<(String, String, f64)> = self
            .connection
            .bzpopmin(&self.markers, self.timeout.as_secs_f64())
            .await?;
        Ok(woken.is_some())
    }
}

/// What one heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat {
    /// The replica's declarations were still in Redis (otherwise: publish them again).
    pub declarations_kept: bool,
    /// The `instance` the replica's record named before this heartbeat: another process's
    /// means two processes beat under one replica id.
    pub previous_instance: Option<String>,
}

/// The process a replica id's heartbeats come from, as [`Store::replica_instance`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInstance {
    /// What names the process: host, pid and start time.
    pub instance: String,
    /// Its host.
    pub host: String,
    /// Its pid.
    pub pid: String,
    /// Its last heartbeat, ms on Redis's clock.
    pub beat_ms: i64,
    /// Redis's clock when this was read, ms.
    pub now_ms: i64,
}

/// A request for an ad-hoc run of a declared job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueue {
    /// The declared job.
    pub job: String,
    /// When it is due, ms; `None` for now.
    pub due_ms: Option<i64>,
    /// JSON text for the command's standard input.
    pub payload: Option<String>,
    /// Instead of the job's own priority.
    pub priority: Option<Priority>,
    /// A fingerprint and how long it stays reserved: a second run with it is refused.
    pub unique: Option<(String, Duration)>,
}

impl Enqueue {
    /// The run's 7 arguments to `enqueue_runs.lua`: run id, job, due ms or '', payload,
    /// priority or '', fingerprint or '', uniqueness window ms.
    pub fn script_arguments(&self, run_id: &str) -> [String; 7] {
        let (fingerprint, window) = self
            .unique
            .as_ref()
            .map_or((String::new(), 0), |(fingerprint, window)| {
                (fingerprint.clone(), millis(*window))
            });
        let priority = self.priority.map_or("", |priority| match priority {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        });
        [
            run_id.to_owned(),
            self.job.clone(),
            self.due_ms.map_or_else(String::new, |due| due.to_string()),
            self.payload.clone().unwrap_or_default(),
            priority.to_owned(),
            fingerprint,
            window.to_string(),
        ]
    }
}

/// What became of an enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// The run exists and is due at `due_ms`.
    Scheduled {
        /// The new run's id.
        run_id: String,
        /// When it is due, ms.
        due_ms: i64,
        /// Its job is paused: the run will be skipped unless the job is resumed first.
        paused: bool,
    },
    /// No replica has published a job of that name.
    UnknownJob,
    /// Another run holds the fingerprint.
    Duplicate {
        /// That run's id.
        holder: String,
    },
}

/// The fingerprint of an ad-hoc run by its payload: SHA-256 of the job name and the payload's
/// canonical JSON (keys sorted, no insignificant white space).
pub fn payload_fingerprint(job: &str, payload: &serde_json::Value) -> String {
    fingerprint(job, &payload.to_string())
}

/// The fingerprint of an ad-hoc run by an explicit unique key.
pub fn key_fingerprint(job: &str, key: &str) -> String {
    fingerprint(job, key)
}

fn fingerprint(job: &str, content: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(job.as_bytes());
    hasher.update([0]);
    hasher.update(content.as_bytes());
    hex::encode(hasher.finalize())
}

/// One replica as its heartbeat describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// Its id.
    pub id: String,
    /// Its last heartbeat, ms on Redis's clock.
    pub heartbeat_ms: i64,
    /// What it reports: host, pid, version, started_ms, busy_workers, max_workers,
    /// heartbeat_period_ms (empty once its record expired).
    pub info: HashMap<String, String>,
    /// Job -> content hash of what it declares; `None` when its declarations are not in Redis
    /// (not published yet, or expired while Redis stalled), which says nothing about any job.
    pub jobs: Option<HashMap<String, String>>,
}

/// How many runs are where: what the gauges of shared state report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCounts {
    /// Runs in the due set.
    pub due: u64,
    /// Runs holding a lease.
    pub active: u64,
    /// Runs in the dead letters.
    pub dead: u64,
    /// Per queue: ready lengths at high, normal and low priority.
    pub ready: Vec<(String, [u64; 3])>,
}

/// A snapshot of the shared state, for `redcron status` and `redcron jobs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overview {
    /// Redis's time when it was taken, ms.
    pub now_ms: i64,
    /// The leader's token and the ms left on its lease.
    pub leader: Option<(String, i64)>,
    /// Runs due, active, dead and ready (per queue of the published jobs and `default`).
    pub counts: RunCounts,
    /// Paused jobs.
    pub paused: Vec<String>,
    /// Every replica that has sent a heartbeat, sorted by id.
    pub replicas: Vec<ReplicaInfo>,
    /// Job -> published definition JSON.
    pub definitions: HashMap<String, String>,
    /// Job -> content hash of its published definition.
    pub definition_hashes: HashMap<String, String>,
    /// Active runs: id, job, lease deadline ms.
    pub running: Vec<(String, String, i64)>,
    /// Jobs whose ready runs were put aside by replicas that do not declare them, by job name.
    /// These runs are in no count above: neither due, nor ready, nor active.
    pub undeclared: Vec<UndeclaredRuns>,
}

/// The runs of one job put aside (`undeclared:<job>`) by replicas that do not declare it, until
/// one that does claims them or the reaper ends them as `undeclared`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndeclaredRuns {
    /// The job.
    pub job: String,
    /// How many runs wait.
    pub runs: u64,
    /// Its score in `undeclared-jobs`, ms on Redis's clock: since when they wait with no live
    /// replica declaring the job (the reaper moves it to now while one does, so the grace before
    /// they are ended counts from here).
    pub since_ms: i64,
}

/// One entry of the events stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When it was recorded, ms (from the stream id).
    pub at_ms: i64,
    /// Its fields: run, state, job and whatever the change records (reason, attempt, exit_code,
    /// duration_ms, worker, due_ms).
    pub fields: HashMap<String, String>,
}

/// A new ad-hoc run id: a UUIDv7, so ids sort by creation time to the millisecond. Its random
/// bits come from the thread's generator rather than the OS, which costs a system call per id.
fn new_run_id() -> String {
    let millis = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or_default();
    uuid::Builder::from_unix_timestamp_millis(millis, &rand::random())
        .into_uuid()
        .to_string()
}

/// The id of a cron fire: deterministic, so the same fire is only ever planned once.
pub fn cron_run_id(job: &str, fire_ms: i64) -> String {
    format!("{job}@{fire_ms}")
}

impl Store {
    /// Connects to the Redis at `url` for namespace `namespace`.
    ///
    /// # Errors
    /// The URL is invalid or Redis cannot be reached.
    pub async fn connect(
        url: &str,
        namespace: &str,
        settings: StoreSettings,
    ) -> Result<Self, StoreError> {
        Self::connect_client(redis::Client::open(url)?, namespace, settings).await
    }

    /// Like [`Store::connect`], with a client built by the caller: TLS with a private CA or a
    /// client certificate ([`redis::Client::build_with_tls`]).
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn connect_client(
        client: redis::Client,
        namespace: &str,
        settings: StoreSettings,
    ) -> Result<Self, StoreError> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECTION_TIMEOUT))
            .set_max_delay(MAX_RECONNECT_DELAY);
        let connection = client.get_connection_manager_with_config(config).await?;
        Ok(Self {
            client,
            connection,
            keys: Keys::new(namespace),
            settings,
            frozen_now_ms: None,
        })
    }

    /// Makes every script read `now_ms` as the current time instead of Redis's clock, so tests
    /// can put runs in the past or the future without waiting.
    pub fn with_frozen_clock(mut self, now_ms: i64) -> Self {
        self.frozen_now_ms = Some(now_ms);
        self
    }

    /// The key names of this namespace.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    fn now_arg(&self) -> String {
        self.frozen_now_ms
            .map_or_else(String::new, |now| now.to_string())
    }

    /// What is wrong with this Redis's settings for redcron: AOF off (a restart loses recent
    /// runs) or an eviction policy other than `noeviction` (evicted keys are lost runs).
    ///
    /// # Errors
    /// Redis errors; a Redis that refuses CONFIG (a managed service) gives no warnings.
    pub async fn durability_warnings(&self) -> Result<Vec<String>, StoreError> {
        let mut connection = self.connection.clone();
        let mut warnings = Vec::new();
        let appendonly: Result<(String, String), _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("appendonly")
            .query_async(&mut connection)
            .await;
        if let Ok((_, value)) = appendonly
            && value != "yes"
        {
            warnings.push(
                "appendonly is off: a Redis restart loses runs planned or finished since its \
                 last snapshot (CONFIG SET appendonly yes)"
                    .to_owned(),
            );
        }
        let policy: Result<(String, String), _> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut connection)
            .await;
        if let Ok((_, value)) = policy
            && value != "noeviction"
        {
            warnings.push(format!(
                "maxmemory-policy is {value}: evicted keys are lost runs (CONFIG SET \
                 maxmemory-policy noeviction)"
            ));
        }
        Ok(warnings)
    }

    /// Takes the leader lease for `ttl` if nobody holds it.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn acquire_leader(
        &self,
        replica: &str,
        ttl: Duration,
    ) -> Result<Acquisition, StoreError> {
        let (acquired, token): (i64, String) = scripts::ACQUIRE_LEADER
            .key(self.keys.leader())
            .key(self.keys.epoch())
            .arg(replica)
            .arg(millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(if acquired == 1 {
            Acquisition::Acquired(LeaderToken(token))
        } else {
            Acquisition::Held(token)
        })
    }

    /// Extends the lease held with `token`; `false` means it is lost: step down at once.
    ///
    /// # Errors
    /// Redis errors (the lease may then run out: the caller must stop planning before it does).
    pub async fn renew_leader(
        &self,
        token: &LeaderToken,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let renewed: i64 = scripts::RENEW_LEADER
            .key(self.keys.leader())
            .arg(token.as_str())
            .arg(millis(ttl))
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(renewed == 1)
    }

    /// Gives up the lease held with `token`; `false` when it was no longer held.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn release_leader(&self, token: &LeaderToken) -> Result<bool, StoreError> {
        let released: i64 = scripts::RELEASE_LEADER
            .key(self.keys.leader())
            .arg(token.as_str())
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(released == 1)
    }

    /// Removes a job's planned runs that are not due yet, fenced by `token`, and moves its cursor
    /// to `cursor_ms` (or forgets it, for a removed job): a changed schedule is planned afresh.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn unplan_job(
        &self,
        token: &LeaderToken,
        job: &str,
        cursor_ms: Option<i64>,
    ) -> Result<PlanOutcome, StoreError> {
        let (status, detail): (String, Value) = scripts::UNPLAN_JOB
            .key(self.keys.leader())
            .key(self.keys.due())
            .key(self.keys.cursor())
            .key(self.keys.planned())
            .arg(token.as_str())
            .arg(job)
            .arg(cursor_ms.map_or_else(String::new, |cursor| cursor.to_string()))
            .invoke_async(&mut self.connection.clone())
            .await?;
        match status.as_str() {
            "OK" => Ok(PlanOutcome::Planned(
                u64::from_redis_value(detail)
                    .map_err(|error| reply("unplan_job", error.to_string()))?,
            )),
            "FENCED" => Ok(PlanOutcome::Fenced(
                String::from_redis_value(detail).unwrap_or_default(),
            )),
            other => Err(reply("unplan_job", format!("status {other:?}"))),
        }
    }

    /// Every job's cursor: the fire ms of the last fire planned or skipped.
    ///
    /// # Errors
    /// Redis errors; a cursor that is not a number is an error (foreign data).
    pub async fn cursors(&self) -> Result<HashMap<String, i64>, StoreError> {
        let raw: HashMap<String, String> =
            self.connection.clone().hgetall(self.keys.cursor()).await?;
        raw.into_iter()
            .map(|(job, cursor)| match cursor.parse() {
                Ok(cursor) => Ok((job, cursor)),
                Err(_) => Err(StoreError::Reply {
                    operation: "cursors",
                    detail: format!("cursor of job {job} is not a number: {cursor:?}"),
                }),
            })
            .collect()
    }

    /// Writes one job's plan, fenced by `token`.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn plan_fires(
        &self,
        token: &LeaderToken,
        plan: &JobPlan,
    ) -> Result<PlanOutcome, StoreError> {
        self.plan_jobs(token, std::slice::from_ref(plan)).await
    }

    /// Writes many jobs' plans, fenced by `token`: a script call per batch of jobs, all calls
    /// pipelined in one round trip. Runs planned before a fenced call stay planned (planning is
    /// idempotent, and the new leader plans the same ids).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn plan_jobs(
        &self,
        token: &LeaderToken,
        plans: &[JobPlan],
    ) -> Result<PlanOutcome, StoreError> {
        // Bounded by Lua's stack (the script unpacks the job names) and by how long one call
        // may hold Redis.
        const JOBS_PER_CALL: usize = 1_000;
        const RUNS_PER_CALL: usize = 5_000;
        const OPERATION: &str = "plan_fires";
        let mut calls: Vec<&[JobPlan]> = Vec::new();
        let (mut first, mut runs) = (0, 0);
        for (index, plan) in plans.iter().enumerate() {
            let size = plan.runs.len() + plan.skipped.len();
            if index > first && (index - first == JOBS_PER_CALL || runs + size > RUNS_PER_CALL) {
                calls.push(&plans[first..index]);
                (first, runs) = (index, 0);
            }
            runs += size;
        }
        if first < plans.len() {
            calls.push(&plans[first..]);
        }
        let calls = calls
            .into_iter()
            .map(|plans| self.plan_arguments(token, plans))
            .collect();
        let answers: Vec<(String, Value)> = self
            .invoke_batched(&scripts::PLAN_FIRES, PLAN_FIRES_KEYS, calls)
            .await?;
        let mut added = 0;
        for (status, detail) in answers {
            match status.as_str() {
                "OK" => {
                    added += u64::from_redis_value(detail)
                        .map_err(|error| reply(OPERATION, error.to_string()))?;
                }
                "FENCED" => {
                    return Ok(PlanOutcome::Fenced(
                        String::from_redis_value(detail).unwrap_or_default(),
                    ));
                }
                other => return Err(reply(OPERATION, format!("status {other:?}"))),
            }
        }
        Ok(PlanOutcome::Planned(added))
    }

    /// The KEYS then ARGV of one `plan_fires.lua` call.
    fn plan_arguments(&self, token: &LeaderToken, plans: &[JobPlan]) -> Vec<String> {
        let mut arguments = vec![
            self.keys.leader(),
            self.keys.due(),
            self.keys.cursor(),
            self.keys.events(),
            self.keys.wake_promoter(),
            self.keys.planned(),
            token.as_str().to_owned(),
            self.settings.events_maxlen.to_string(),
        ];
        for plan in plans {
            arguments.extend([
                plan.job.clone(),
                plan.cursor_ms.to_string(),
                plan.runs.len().to_string(),
                plan.skipped.len().to_string(),
            ]);
            for run in &plan.runs {
                arguments.extend([
                    run.run_id.clone(),
                    run.fire_ms.to_string(),
                    run.due_ms.to_string(),
                ]);
            }
            for skipped in &plan.skipped {
                arguments.extend([skipped.run_id.clone(), skipped.reason.to_owned()]);
            }
        }
        arguments
    }

    /// Runs `script` once per argument list (its `key_count` KEYS, then its ARGV). One call is
    /// an ordinary invocation, which loads the script should Redis lack it; several are
    /// pipelined in one round trip after loading it (a pipelined EVALSHA cannot load it).
    async fn invoke_batched<T: FromRedisValue>(
        &self,
        script: &Script,
        key_count: usize,
        calls: Vec<Vec<String>>,
    ) -> Result<Vec<T>, StoreError> {
        let mut connection = self.connection.clone();
        // Nothing to send: an empty pipeline is an empty command, which Redis refuses.
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        if let [only] = calls.as_slice() {
            let (keys, args) = only.split_at(key_count.min(only.len()));
            let mut invocation = script.prepare_invoke();
            invocation.key(keys).arg(args);
            return Ok(vec![invocation.invoke_async(&mut connection).await?]);
        }
        let hash = script.prepare_invoke().load_async(&mut connection).await?;
        let mut pipe = redis::pipe();
        for arguments in &calls {
            pipe.cmd("EVALSHA").arg(&hash).arg(key_count).arg(arguments);
        }
        Ok(pipe.query_async(&mut connection).await?)
    }

    /// Moves up to `limit` runs due within `lead` to their ready lists; a run later than
    /// `misfire_threshold` is a missed fire, handled by its job's misfire policy. Runs moved
    /// ahead of their due time are claimed ahead and started on time ([`ClaimedRun::start_in`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn promote_due(
        &self,
        limit: usize,
        misfire_threshold: Duration,
        lead: Duration,
    ) -> Result<Promoted, StoreError> {
        let answer: Vec<Value> = scripts::PROMOTE_DUE
            .key(self.keys.due())
            .key(self.keys.defs())
            .key(self.keys.events())
            .key(self.keys.dead())
            .key(self.keys.planned())
            .key(self.keys.damaged_definitions())
            .arg(self.keys.prefix())
            .arg(limit)
            .arg(millis(misfire_threshold))
            .arg(self.settings.events_maxlen)
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(millis(lead))
            .invoke_async(&mut self.connection.clone())
            .await?;
        let mut values = answer.into_iter();
        let mut number = || {
            i64::from_redis_value(values.next().unwrap_or(Value::Nil))
                .map_err(|error| reply("promote_due", error.to_string()))
        };
        let (ready, skipped, next_due_ms, now_ms, deferred) =
            (number()?, number()?, number()?, number()?, number()?);
        METRICS.record_skips(&skip_pairs(&mut values, "promote_due")?);
        Ok(Promoted {
            ready: u64::try_from(ready).unwrap_or(0),
            skipped: u64::try_from(skipped).unwrap_or(0),
            deferred: u64::try_from(deferred).unwrap_or(0),
            next_due_ms: (next_due_ms >= 0).then_some(next_due_ms),
            now_ms,
        })
    }

    /// Claims the next ready run for `worker` (see [`Store::claim_runs`], which serves every
    /// idle worker of a replica in one call).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn claim_run(
        &self,
        worker: &str,
        queues: &[String],
        lease: impl Into<ClaimLeases>,
        pop_limit: usize,
    ) -> Result<Claim, StoreError> {
        let claimed = self.claim_runs(&[worker], queues, lease, pop_limit).await?;
        let skipped = claimed.skipped;
        Ok(match claimed.runs.into_iter().next() {
            Some(Ok(run)) => Claim::Run { run, skipped },
            Some(Err(corrupt)) => Claim::Corrupt {
                run_id: corrupt.run_id,
                detail: corrupt.detail,
            },
            None if claimed.drained => Claim::Empty { skipped },
            None => Claim::More { skipped },
        })
    }

    /// Claims ready runs for several idle workers in one script call, one run each at most: strict
    /// priority across `queues`, for the jobs the workers' replica declares (worker ids are
    /// `<replica id>/<slot>`), skipping (and recording) paused, duplicate and overlapping runs,
    /// popping at most `pop_limit` runs in all. Each claimed run's lease lasts `lease.run`, or
    /// `lease.ahead` past its due time for a run claimed ahead.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn claim_runs(
        &self,
        workers: &[&str],
        queues: &[String],
        lease: impl Into<ClaimLeases>,
        pop_limit: usize,
    ) -> Result<Claimed, StoreError> {
        const OPERATION: &str = "claim_runs";
        let lease = lease.into();
        // Worker ids are `<replica id>/<slot>`: the replica claims for the jobs it declares.
        let Some((replica, _)) = workers.first().and_then(|worker| worker.rsplit_once('/')) else {
            return Ok(Claimed::default());
        };
        let mut invocation = scripts::CLAIM_RUNS.prepare_invoke();
        invocation
            .key(self.keys.active())
            .key(self.keys.events())
            .key(self.keys.paused())
            .key(self.keys.dead())
            .key(self.keys.replica_jobs(replica))
            .key(self.keys.undeclared_jobs())
            .arg(self.keys.prefix())
            .arg(millis(lease.run))
            .arg(millis(self.settings.fingerprint_ttl))
            .arg(pop_limit)
            .arg(self.settings.events_maxlen)
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(millis(lease.ahead))
            .arg(workers.len())
            .arg(workers)
            .arg(queues);
        let reply_values: Vec<Value> = invocation
            .invoke_async(&mut self.connection.clone())
            .await?;
        let mut values = reply_values.into_iter();
        let status = next_string(&mut values, OPERATION)?;
        if status == "UNDECLARED" {
            return Err(StoreError::Undeclared {
                replica: replica.to_owned(),
            });
        }
        let drained = status == "EMPTY";
        let skipped = next_number(&mut values, OPERATION)?;
        let skips = skip_pairs(&mut values.by_ref().take(2 * skipped as usize), OPERATION)?;
        METRICS.record_skips(&skips);
        let count = next_number(&mut values, OPERATION)?;
        let redis_now_ms = if count > 0 {
            let end = next_number(&mut values, OPERATION)?;
            Some(i64::try_from(end).map_err(|error| reply(OPERATION, error.to_string()))?)
        } else {
            None
        };
        let mut claimed = Claimed {
            runs: Vec::with_capacity(count as usize),
            skipped,
            drained,
            redis_now_ms,
        };
        for _ in 0..count {
            let run: Vec<Value> = values.by_ref().take(CLAIMED_RUN_VALUES).collect();
            if run.len() < CLAIMED_RUN_VALUES {
                return Err(reply(OPERATION, "reply too short".to_owned()));
            }
            claimed.runs.push(ClaimedRun::from_reply(run));
        }
        Ok(claimed)
    }

    /// Extends `worker`'s lease on a run; `false` means the run is no longer its own.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn extend_lease(
        &self,
        run_id: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let extended: i64 = scripts::EXTEND_LEASE
            .key(self.keys.active())
            .arg(self.keys.prefix())
            .arg(run_id)
            .arg(worker)
            .arg(millis(lease))
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(extended == 1)
    }

    /// Takes a slot of the job of a run claimed ahead while every slot was taken, once its due
    /// time has come; when none is free, skips the run (reason `overlap`) or puts it aside to
    /// wait for one, as `pending` says.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for an answer the script does not give.
    pub async fn take_job_slot(
        &self,
        run: &ClaimedRun,
        pending: PendingSlot,
        lease: Duration,
    ) -> Result<JobSlot, StoreError> {
        let answer: String = scripts::TAKE_JOB_SLOT
            .key(self.keys.active())
            .key(self.keys.events())
            .arg(self.keys.prefix())
            .arg(&run.id)
            .arg(&run.worker)
            .arg(millis(lease))
            .arg(self.settings.events_maxlen)
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(u8::from(pending == PendingSlot::SkipIfRunning))
            .invoke_async(&mut self.connection.clone())
            .await?;
        match answer.as_str() {
            "TAKEN" => Ok(JobSlot::Taken),
            "BUSY" => {
                METRICS.record_skips(&[(run.job.clone(), "overlap".to_owned())]);
                Ok(JobSlot::Busy)
            }
            "WAITING" => Ok(JobSlot::Waiting),
            "GONE" => Ok(JobSlot::Gone),
            other => Err(reply("take_job_slot", format!("unexpected {other:?}"))),
        }
    }

    /// Records a claimed run's success; `false` means that attempt was no longer its worker's
    /// (reaped).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn ack_run(
        &self,
        run: &ClaimedRun,
        exit_code: Option<i32>,
        output: &str,
    ) -> Result<bool, StoreError> {
        let ack = Ack {
            run_id: run.id.clone(),
            worker: run.worker.clone(),
            attempt: run.attempt,
            exit_code,
            output: output.to_owned(),
        };
        let recorded = self.ack_runs(&[&ack]).await?;
        Ok(recorded.first().copied().unwrap_or(false))
    }

    /// Records the success of several runs in one script call; for each, in order, `false`
    /// means the run was no longer its worker's (reaped).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn ack_runs(&self, acks: &[&Ack]) -> Result<Vec<bool>, StoreError> {
        let mut invocation = scripts::ACK_RUNS.prepare_invoke();
        invocation
            .key(self.keys.active())
            .key(self.keys.events())
            .arg(self.keys.prefix())
            .arg(millis(self.settings.retention))
            .arg(self.settings.events_maxlen)
            .arg(self.now_arg());
        for ack in acks {
            invocation
                .arg(&ack.run_id)
                .arg(&ack.worker)
                .arg(ack.attempt)
                .arg(
                    ack.exit_code
                        .map_or_else(String::new, |code| code.to_string()),
                )
                .arg(&ack.output);
        }
        let recorded: Vec<i64> = invocation
            .invoke_async(&mut self.connection.clone())
            .await?;
        if recorded.len() != acks.len() {
            return Err(reply(
                "ack_runs",
                format!("{} answers for {} runs", recorded.len(), acks.len()),
            ));
        }
        Ok(recorded.into_iter().map(|answer| answer == 1).collect())
    }

    /// Records a run's failure. `worker` is `None` for the reaper, which may only fail runs whose
    /// lease has expired. `jitter` in `[0, 1)` spreads retries: the delay is
    /// `backoff * (1 + jitter) / 2`.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn fail_run(
        &self,
        run_id: &str,
        worker: Option<&str>,
        failure: &Failure,
        jitter: f64,
    ) -> Result<FailOutcome, StoreError> {
        let (status, at): (String, i64) = scripts::FAIL_RUN
            .key(self.keys.active())
            .key(self.keys.due())
            .key(self.keys.dead())
            .key(self.keys.events())
            .key(self.keys.wake_promoter())
            .arg(self.keys.prefix())
            .arg(run_id)
            .arg(worker.unwrap_or(""))
            .arg(failure.reason.as_str())
            .arg(&failure.message)
            .arg(
                failure
                    .exit_code
                    .map_or_else(String::new, |code| code.to_string()),
            )
            .arg(&failure.output)
            .arg(jitter.clamp(0.0, 1.0))
            .arg(self.settings.events_maxlen)
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await?;
        match status.as_str() {
            "RETRYING" => Ok(FailOutcome::Retrying { due_ms: at }),
            "DEAD" => Ok(FailOutcome::Dead),
            "GONE" => Ok(FailOutcome::Gone),
            other => Err(reply("fail_run", format!("status {other:?}"))),
        }
    }

    /// The time on Redis's clock, ms since the epoch: what every script decides with, so the
    /// planner's misfire decisions agree with theirs whatever the local clock says.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn now_ms(&self) -> Result<i64, StoreError> {
        if let Some(now) = self.frozen_now_ms {
            return Ok(now);
        }
        let (seconds, micros): (i64, i64) = redis::cmd("TIME")
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(seconds * 1000 + micros / 1000)
    }

    /// Reads Redis's clock, noting when it was asked and answered (see [`RedisClock`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn clock(&self) -> Result<RedisClock, StoreError> {
        let sent = tokio::time::Instant::now();
        let redis_micros = match self.frozen_now_ms {
            Some(now) => now.saturating_mul(1000),
            None => {
                let (seconds, micros): (i64, i64) = redis::cmd("TIME")
                    .query_async(&mut self.connection.clone())
                    .await?;
                seconds * 1_000_000 + micros
            }
        };
        Ok(RedisClock {
            sent,
            received: tokio::time::Instant::now(),
            redis_micros,
        })
    }

    /// Creates an ad-hoc run of a declared job (see [`Enqueue`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn enqueue_run(&self, request: &Enqueue) -> Result<Enqueued, StoreError> {
        let mut enqueued = self.enqueue_many(std::slice::from_ref(request)).await?;
        enqueued
            .pop()
            .ok_or_else(|| reply("enqueue_runs", "no answer".to_owned()))
    }

    /// Creates many ad-hoc runs (bulk enqueue): a script call per thousand runs, all pipelined
    /// in one round trip. Each run is created whole or not at all; the answers are in the order
    /// of `requests`.
    ///
    /// # Errors
    /// Redis errors; runs of the calls before the error exist.
    pub async fn enqueue_many(&self, requests: &[Enqueue]) -> Result<Vec<Enqueued>, StoreError> {
        const RUNS_PER_CALL: usize = 1_000;
        let mut run_ids = Vec::with_capacity(requests.len());
        let calls = requests
            .chunks(RUNS_PER_CALL)
            .map(|batch| self.enqueue_arguments(batch, &mut run_ids))
            .collect();
        let answers: Vec<Vec<Value>> = self
            .invoke_batched(&scripts::ENQUEUE_RUNS, ENQUEUE_RUNS_KEYS, calls)
            .await?;
        let mut answers = answers.into_iter().flatten();
        run_ids
            .into_iter()
            .map(|run_id| parse_enqueued(run_id, &mut answers, "enqueue_runs"))
            .collect()
    }

    /// The KEYS then ARGV of one `enqueue_runs.lua` call creating `requests`; collects the new
    /// runs' ids.
    fn enqueue_arguments(&self, requests: &[Enqueue], run_ids: &mut Vec<String>) -> Vec<String> {
        let mut arguments = Vec::with_capacity(ENQUEUE_RUNS_KEYS + 2 + 7 * requests.len());
        arguments.extend([
            self.keys.due(),
            self.keys.defs(),
            self.keys.paused(),
            self.keys.wake_promoter(),
            self.keys.prefix().to_owned(),
            self.now_arg(),
        ]);
        for request in requests {
            let run_id = new_run_id();
            arguments.extend(request.script_arguments(&run_id));
            run_ids.push(run_id);
        }
        arguments
    }

    /// Deletes every key of this namespace (and nothing else); returns how many. For the
    /// benchmark's own namespace: never call it on one that replicas use.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn clear_namespace(&self) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        // Braces are not special in Redis glob patterns; a namespace has no `*`, `?` or `[`.
        let pattern = format!("{}*", self.keys.prefix());
        let mut cursor = 0u64;
        let mut deleted = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1_000)
                .query_async(&mut connection)
                .await?;
            if !keys.is_empty() {
                deleted += keys.len() as u64;
                let () = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut connection)
                    .await?;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// How many runs hold a lease.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn active_runs(&self) -> Result<u64, StoreError> {
        Ok(self.connection.clone().zcard(self.keys.active()).await?)
    }

    /// Whether some replica has published a job named `job`.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn is_declared(&self, job: &str) -> Result<bool, StoreError> {
        Ok(self
            .connection
            .clone()
            .hexists(self.keys.defs(), job)
            .await?)
    }

    /// Pauses (`true`) or resumes a job: a paused job's fires are skipped with reason `paused`.
    /// Returns whether that changed anything.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn set_paused(&self, job: &str, paused: bool) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let changed: i64 = if paused {
            connection.sadd(self.keys.paused(), job).await?
        } else {
            connection.srem(self.keys.paused(), job).await?
        };
        Ok(changed == 1)
    }

    /// Every field of a run's hash; empty when there is no such run (or it expired).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn run_fields(&self, run_id: &str) -> Result<HashMap<String, String>, StoreError> {
        Ok(self
            .connection
            .clone()
            .hgetall(self.keys.run(run_id))
            .await?)
    }

    /// Up to `limit` dead runs, oldest death first: id and when it died, ms.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn dead_runs(&self, limit: usize) -> Result<Vec<(String, i64)>, StoreError> {
        let end = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        Ok(self
            .connection
            .clone()
            .zrange_withscores(self.keys.dead(), 0, end)
            .await?)
    }

    /// Takes a run out of the dead letters and makes it due now, attempts reset; `false` when it
    /// is not dead.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn redrive_run(&self, run_id: &str) -> Result<bool, StoreError> {
        let redriven: i64 = scripts::REDRIVE_RUN
            .key(self.keys.dead())
            .key(self.keys.due())
            .key(self.keys.events())
            .key(self.keys.wake_promoter())
            .arg(self.keys.prefix())
            .arg(run_id)
            .arg(self.settings.events_maxlen)
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(redriven == 1)
    }

    /// Deletes dead runs that died at or before `cutoff_ms` (all of them for `None`); returns how
    /// many.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn purge_dead(&self, cutoff_ms: Option<i64>) -> Result<u64, StoreError> {
        const BATCH: u64 = 1_000;
        let cutoff = cutoff_ms.map_or_else(|| "+inf".to_owned(), |cutoff| cutoff.to_string());
        let mut purged = 0;
        loop {
            let deleted: u64 = scripts::PURGE_DEAD
                .key(self.keys.dead())
                .arg(self.keys.prefix())
                .arg(&cutoff)
                .arg(BATCH)
                .invoke_async(&mut self.connection.clone())
                .await?;
            purged += deleted;
            if deleted < BATCH {
                return Ok(purged);
            }
        }
    }

    /// A waiter for runs becoming ready in `queues`, or put aside by other replicas for
    /// `replica_id` (runs of jobs only it declares), blocking up to `timeout` per wait.
    ///
    /// # Errors
    /// Redis errors while connecting.
    pub async fn ready_waiter(
        &self,
        replica_id: &str,
        queues: &[String],
        timeout: Duration,
    ) -> Result<ReadyWaiter, StoreError> {
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(Some(timeout + RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(CONNECTION_TIMEOUT));
        let connection = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        let markers = queues
            .iter()
            .map(|queue| self.keys.wake(queue))
            .chain([self.keys.wake_replica(replica_id)])
            .collect();
        Ok(ReadyWaiter {
            connection,
            markers,
            timeout,
        })
    }

    /// Records this replica as alive: its heartbeat time (Redis's clock) and what it reports of
    /// itself (`info`, which names this process in its `instance` field), which expires after
    /// `ttl` without a new heartbeat; its declarations are kept as long. Says whether its
    /// declarations were still there to keep (they expire while Redis stalls, and are lost with
    /// an older copy: publish them again) and which process had beaten under this id before.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn heartbeat(
        &self,
        replica_id: &str,
        info: &[(&str, String)],
        ttl: Duration,
    ) -> Result<Beat, StoreError> {
        let now = self.now_ms().await?;
        let replica = self.keys.replica(replica_id);
        let ttl_ms = i64::try_from(millis(ttl)).unwrap_or(i64::MAX);
        let (previous_instance, declarations_kept): (Option<String>, bool) = redis::pipe()
            .atomic()
            .hget(&replica, "instance")
            .zadd(self.keys.replicas(), replica_id, now)
            .ignore()
            .hset_multiple(&replica, info)
            .ignore()
            .pexpire(&replica, ttl_ms)
            .ignore()
            .pexpire(self.keys.replica_jobs(replica_id), ttl_ms)
            .query_async(&mut self.connection.clone())
            .await?;
        Ok(Beat {
            declarations_kept,
            previous_instance,
        })
    }

    /// The process that last beat as `replica_id` (its `instance`, host and pid) and when, on
    /// Redis's clock, with Redis's time now; `None` when no replica beats under that id.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn replica_instance(
        &self,
        replica_id: &str,
    ) -> Result<Option<ReplicaInstance>, StoreError> {
        let now_ms = self.now_ms().await?;
        let (fields, beat_ms): (Vec<Option<String>>, Option<i64>) = redis::pipe()
            .hmget(self.keys.replica(replica_id), &["instance", "host", "pid"])
            .zscore(self.keys.replicas(), replica_id)
            .query_async(&mut self.connection.clone())
            .await?;
        let mut fields = fields.into_iter();
        let (Some(Some(instance)), Some(beat_ms)) = (fields.next(), beat_ms) else {
            return Ok(None);
        };
        Ok(Some(ReplicaInstance {
            instance,
            host: fields.next().flatten().unwrap_or_default(),
            pid: fields.next().flatten().unwrap_or_default(),
            beat_ms,
            now_ms,
        }))
    }

    /// What operators look at: leadership, replicas, counts, ready lengths, jobs, running runs.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn overview(&self) -> Result<Overview, StoreError> {
        let mut connection = self.connection.clone();
        let now_ms = self.now_ms().await?;
        type Snapshot = (
            Option<String>,
            i64,
            Vec<String>,
            Vec<(String, i64)>,
            HashMap<String, String>,
            HashMap<String, String>,
            Vec<(String, i64)>,
            Vec<(String, i64)>,
        );
        let (leader, lease_ms, paused, replicas, defs, def_hashes, running, undeclared): Snapshot =
            redis::pipe()
                .get(self.keys.leader())
                .pttl(self.keys.leader())
                .smembers(self.keys.paused())
                .zrange_withscores(self.keys.replicas(), 0, -1)
                .hgetall(self.keys.defs())
                .hgetall(self.keys.def_hashes())
                .zrange_withscores(self.keys.active(), 0, -1)
                .zrange_withscores(self.keys.undeclared_jobs(), 0, -1)
                .query_async(&mut connection)
                .await?;
        let queues: Vec<String> = defs
            .values()
            .filter_map(|definition| {
                let value: serde_json::Value = serde_json::from_str(definition).ok()?;
                Some(value.get("queue")?.as_str()?.to_owned())
            })
            .collect();
        let counts = self.run_counts(&queues).await?;
        let mut pipe = redis::pipe();
        for (replica, _) in &replicas {
            pipe.hgetall(self.keys.replica(replica));
            pipe.hgetall(self.keys.replica_jobs(replica));
        }
        for (run_id, _) in &running {
            pipe.hget(self.keys.run(run_id), "job");
        }
        for (job, _) in &undeclared {
            pipe.llen(self.keys.undeclared(job));
        }
        // An empty pipeline is an empty command to Redis, which refuses it: a namespace with
        // nothing in it (a mistyped --namespace) must read as empty instead.
        let mut answers: Vec<Value> =
            if replicas.is_empty() && running.is_empty() && undeclared.is_empty() {
                Vec::new()
            } else {
                pipe.query_async(&mut connection).await?
            };
        let mut answers = answers.drain(..);
        let mut take = |operation| {
            answers
                .next()
                .ok_or_else(|| reply(operation, "reply too short".to_owned()))
        };
        let mut replica_infos = Vec::new();
        for (id, heartbeat_ms) in replicas {
            let info = HashMap::from_redis_value(take("overview")?).unwrap_or_default();
            let jobs: HashMap<String, String> =
                HashMap::from_redis_value(take("overview")?).unwrap_or_default();
            // The marker is there whenever the declarations are, even when they are none.
            let jobs = published_declarations(jobs);
            replica_infos.push(ReplicaInfo {
                id,
                heartbeat_ms,
                info,
                jobs,
            });
        }
        // By id, not by heartbeat: the order stays put from one look to the next.
        replica_infos.sort_by(|a, b| a.id.cmp(&b.id));
        let mut running_runs = Vec::new();
        for (run_id, deadline_ms) in running {
            let job: Option<String> =
                Option::from_redis_value(take("overview")?).unwrap_or_default();
            running_runs.push((run_id, job.unwrap_or_default(), deadline_ms));
        }
        let mut undeclared_runs = Vec::new();
        for (job, since_ms) in undeclared {
            let runs = u64::from_redis_value(take("overview")?).unwrap_or_default();
            // Counted a round trip after the listing: a claim may have taken them all back.
            if runs > 0 {
                undeclared_runs.push(UndeclaredRuns {
                    job,
                    runs,
                    since_ms,
                });
            }
        }
        undeclared_runs.sort_by(|a, b| a.job.cmp(&b.job));
        Ok(Overview {
            now_ms,
            leader: leader.map(|token| (token, lease_ms)),
            counts,
            paused,
            replicas: replica_infos,
            definitions: defs,
            definition_hashes: def_hashes,
            running: running_runs,
            undeclared: undeclared_runs,
        })
    }

    /// How many runs are due, active and dead, and how many are ready in each of `queues` (and
    /// `default`) at each priority: one round trip, cheap enough for every heartbeat.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn run_counts(&self, queues: &[String]) -> Result<RunCounts, StoreError> {
        let mut queues: Vec<String> = queues
            .iter()
            .cloned()
            .chain(std::iter::once("default".to_owned()))
            .collect();
        queues.sort();
        queues.dedup();
        let mut pipe = redis::pipe();
        pipe.zcard(self.keys.due())
            .zcard(self.keys.active())
            .zcard(self.keys.dead());
        for queue in &queues {
            for priority in [Priority::High, Priority::Normal, Priority::Low] {
                pipe.llen(self.keys.ready_fires(queue, priority));
                pipe.llen(self.keys.ready(queue, priority));
            }
        }
        let answers: Vec<u64> = pipe.query_async(&mut self.connection.clone()).await?;
        let (counts, lengths) = answers.split_at(3.min(answers.len()));
        let count = |index: usize| counts.get(index).copied().unwrap_or(0);
        let ready = queues
            .into_iter()
            .zip(lengths.chunks(6))
            .map(|(queue, lengths)| {
                // Cron fires and ad-hoc runs of one priority wait in two lists.
                let length = |index: usize| {
                    lengths.get(2 * index).copied().unwrap_or(0)
                        + lengths.get(2 * index + 1).copied().unwrap_or(0)
                };
                (queue, [length(0), length(1), length(2)])
            })
            .collect();
        Ok(RunCounts {
            due: count(0),
            active: count(1),
            dead: count(2),
            ready,
        })
    }

    /// The newest `count` events, newest first.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn recent_events(&self, count: usize) -> Result<Vec<Event>, StoreError> {
        let reply: redis::streams::StreamRangeReply = self
            .connection
            .clone()
            .xrevrange_count(self.keys.events(), "+", "-", count)
            .await?;
        Ok(reply
            .ids
            .into_iter()
            .map(|entry| {
                let at_ms = entry
                    .id
                    .split_once('-')
                    .and_then(|(ms, _)| ms.parse().ok())
                    .unwrap_or_default();
                let fields = entry
                    .map
                    .into_iter()
                    .filter_map(|(name, value)| Some((name, String::from_redis_value(value).ok()?)))
                    .collect();
                Event { at_ms, fields }
            })
            .collect())
    }

    /// Messages on the channel that tells promoters a run became due earlier than they planned
    /// to look: each carries that due time in ms. The stream ends when the connection drops.
    ///
    /// # Errors
    /// Redis errors while subscribing.
    pub async fn wake_promoter(
        &self,
    ) -> Result<impl futures_util::Stream<Item = redis::Msg> + use<>, StoreError> {
        let mut pubsub = self.client.get_async_pubsub().await?;
        pubsub.subscribe(self.keys.wake_promoter()).await?;
        Ok(pubsub.into_on_message())
    }

    /// The active runs Redis says the workers of `replica_id` hold (`<replica id>/<slot>`), with
    /// the worker and attempt of each: what the replica compares with the runs it really runs.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for an answer the script does not give.
    pub async fn held_runs(&self, replica_id: &str) -> Result<Vec<HeldRun>, StoreError> {
        let values: Vec<Option<String>> = scripts::LIST_HELD_RUNS
            .key(self.keys.active())
            .arg(self.keys.prefix())
            .arg(format!("{replica_id}/"))
            .invoke_async(&mut self.connection.clone())
            .await?;
        values
            .chunks(3)
            .map(|held| match held {
                [Some(run_id), Some(worker), attempt] => Ok(HeldRun {
                    run_id: run_id.clone(),
                    worker: worker.clone(),
                    attempt: attempt.as_deref().and_then(|text| text.parse().ok()),
                }),
                _ => Err(reply("list_held_runs", format!("unexpected {held:?}"))),
            })
            .collect()
    }

    /// Ends (reason `undeclared`) the runs left for a replica that declares their job, once no
    /// replica whose last heartbeat is at most `live_for` old has declared the job for `grace`:
    /// a cron fire never started is skipped, any other run goes to the dead letters. The fires
    /// of the `withdrawn` jobs (those a replica removed from its files, and no live replica
    /// declares) are skipped at once; their other runs wait out the grace. Returns each job
    /// with how many of its runs were ended.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for an answer the script does not give.
    pub async fn bury_undeclared_runs(
        &self,
        grace: Duration,
        live_for: Duration,
        withdrawn: &[&str],
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let buried: Vec<(String, u64)> = scripts::BURY_UNDECLARED_RUNS
            .key(self.keys.undeclared_jobs())
            .key(self.keys.replicas())
            .key(self.keys.dead())
            .key(self.keys.events())
            .arg(self.keys.prefix())
            .arg(millis(grace))
            .arg(millis(live_for))
            .arg(self.settings.events_maxlen)
            .arg(self.now_arg())
            .arg(millis(self.settings.retention))
            .arg(withdrawn)
            .invoke_async(&mut self.connection.clone())
            .await?;
        Ok(buried)
    }

    /// Up to `limit` runs whose lease deadline has passed on Redis's clock: their workers died.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn expired_leases(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let now = self.now_ms().await?;
        let expired: Vec<String> = self
            .connection
            .clone()
            .zrangebyscore_limit(self.keys.active(), "-inf", now, 0, limit as isize)
            .await?;
        Ok(expired)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn reply(operation: &'static str, detail: String) -> StoreError {
    StoreError::Reply { operation, detail }
}

/// Reads the next 3 values of `enqueue_runs.lua`'s reply: the answer for the run `run_id`.
fn parse_enqueued(
    run_id: String,
    values: &mut impl Iterator<Item = Value>,
    operation: &'static str,
) -> Result<Enqueued, StoreError> {
    let status = next_string(values, operation)?;
    let (first, second) = (
        values.next().unwrap_or(Value::Nil),
        values.next().unwrap_or(Value::Nil),
    );
    let number =
        |value| i64::from_redis_value(value).map_err(|error| reply(operation, error.to_string()));
    match status.as_str() {
        "OK" => Ok(Enqueued::Scheduled {
            run_id,
            due_ms: number(first)?,
            paused: number(second)? == 1,
        }),
        "UNKNOWN" => Ok(Enqueued::UnknownJob),
        "DUPLICATE" => Ok(Enqueued::Duplicate {
            holder: String::from_redis_value(first)
                .map_err(|error| reply(operation, error.to_string()))?,
        }),
        other => Err(reply(operation, format!("status {other:?}"))),
    }
}

/// The `job, reason` pairs of skipped runs at the end of a script's reply.
fn skip_pairs(
    values: &mut impl Iterator<Item = Value>,
    operation: &'static str,
) -> Result<Vec<(String, String)>, StoreError> {
    let mut pairs = Vec::new();
    while let Some(job) = values.next() {
        let job =
            String::from_redis_value(job).map_err(|error| reply(operation, error.to_string()))?;
        pairs.push((job, next_string(values, operation)?));
    }
    Ok(pairs)
}

fn next_string(
    values: &mut impl Iterator<Item = Value>,
    operation: &'static str,
) -> Result<String, StoreError> {
    let value = values
        .next()
        .ok_or_else(|| reply(operation, "reply too short".to_owned()))?;
    String::from_redis_value(value).map_err(|error| reply(operation, error.to_string()))
}

/// How many KEYS `plan_fires.lua` takes.
const PLAN_FIRES_KEYS: usize = 6;

/// How many KEYS `enqueue_runs.lua` takes.
const ENQUEUE_RUNS_KEYS: usize = 4;

/// How many values `claim_runs.lua` returns per claimed run.
const CLAIMED_RUN_VALUES: usize = 9;

impl ClaimedRun {
    /// Reads one claimed run of `claim_runs.lua`'s reply: run id, worker, job, attempt, max
    /// attempts, fire ms or nil, payload or nil. The script checked the numbers; what can still
    /// be wrong is text that is not UTF-8.
    ///
    /// # Errors
    /// A [`CorruptRun`] when a value is missing or not what the script writes.
    pub fn from_reply(values: Vec<Value>) -> Result<Self, CorruptRun> {
        let mut values = values.into_iter();
        let mut text = || -> Option<String> { String::from_redis_value(values.next()?).ok() };
        let id = text();
        let worker = text().unwrap_or_default();
        let job = text();
        let mut number = || -> Option<i64> { i64::from_redis_value(values.next()?).ok() };
        let attempt = number().and_then(|value| u32::try_from(value).ok());
        let max_attempts = number().and_then(|value| u32::try_from(value).ok());
        let fire_ms = values
            .next()
            .and_then(|value| i64::from_redis_value(value).ok());
        let payload = match values.next() {
            None | Some(Value::Nil) => Ok(None),
            Some(value) => String::from_redis_value(value).map(Some),
        };
        let mut number = || -> Option<u64> { u64::from_redis_value(values.next()?).ok() };
        let start_in = number().map(Duration::from_millis);
        let pending_slot = number().and_then(|flag| match flag {
            0 => Some(None),
            1 => Some(Some(PendingSlot::SkipIfRunning)),
            2 => Some(Some(PendingSlot::Wait)),
            _ => None,
        });
        let Some(id) = id else {
            return Err(CorruptRun {
                run_id: String::new(),
                worker,
                detail: "its id is not text".to_owned(),
            });
        };
        match (job, attempt, max_attempts, payload, start_in, pending_slot) {
            (
                Some(job),
                Some(attempt),
                Some(max_attempts),
                Ok(payload),
                Some(start_in),
                Some(pending_slot),
            ) => Ok(Self {
                id,
                worker,
                job,
                attempt,
                max_attempts,
                fire_ms,
                payload,
                start_in,
                pending_slot,
            }),
            _ => Err(CorruptRun {
                run_id: id,
                worker,
                detail: "its job, attempt, max_attempts or payload is not valid".to_owned(),
            }),
        }
    }
}

fn next_number(
    values: &mut impl Iterator<Item = Value>,
    operation: &'static str,
) -> Result<u64, StoreError> {
    u64::from_redis_value(values.next().unwrap_or(Value::Nil))
        .map_err(|error| reply(operation, error.to_string()))
}
