//! The heartbeat: every replica records itself (host, pid, version, start time, busy and max
//! workers) every few seconds, so operators can see who is alive and how loaded. It keeps the
//! replica's declarations published and checks them a part at a time, and it stops the replica
//! when another process beats under the same replica id: two processes sharing an id would end
//! each other's runs as lost. It also finds the namespace starting to archive, for a replica
//! started without `--archive` before it did.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info, warn};

use super::worker::WorkerLoad;
use super::{Leadership, Shutdown, log_store_failure};
use crate::schedule::{Jobs, Reach};
use crate::store::{Store, StoreError};

/// The longest a stopping replica waits to withdraw its declarations: without an answer they
/// expire with its heartbeats instead.
const WITHDRAW_TIMEOUT: Duration = Duration::from_millis(500);

/// How many of its jobs' declarations a heartbeat checks: all of them at every beat for most
/// replicas, a full round every 100 beats at 100,000 jobs.
const CHECK_BATCH: usize = 1_000;

/// Why the heartbeat stopped the replica.
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatError {
    /// Another process beats under this replica id.
    #[error(
        "another process uses replica id {replica_id:?} (host {host}, pid {pid}): give each \
         replica its own --replica-id (the default is the host name, so a second replica on \
         one host needs one)"
    )]
    ReplicaIdInUse {
        /// The shared id.
        replica_id: String,
        /// The other process's host.
        host: String,
        /// The other process's pid.
        pid: String,
    },
    /// Redis failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How the heartbeat behaves.
#[derive(Debug, Clone)]
pub struct HeartbeatConfig {
    /// This replica's id.
    pub replica_id: String,
    /// Time between heartbeats; a replica silent for three is stale.
    pub period: Duration,
    /// The queues this replica's workers claim from: reported, so that `status` and the
    /// leader's `redcron_queue_replicas` show a queue no live replica serves.
    pub queues: Vec<String>,
    /// Its labels but the queues, `key=value` comma-separated: what `status` and `jobs` show.
    pub labels: String,
    /// How long this replica stays a target of its every-replica jobs' fires once it stops
    /// beating: the misfire threshold, within which it runs them when it comes back.
    pub targets_kept: Duration,
    /// How long what this replica declared is kept once it stops cleanly: the undeclared
    /// grace, within which the leader takes a restart without a job for its withdrawal.
    pub keep_declared: Duration,
}

/// Records this replica as alive.
pub struct Heartbeat {
    store: Store,
    config: HeartbeatConfig,
    /// Runs executing now and the bound on them, kept by the workers.
    load: Arc<WorkerLoad>,
    /// The declared jobs, whose hashes are published for drift detection.
    jobs: watch::Receiver<Jobs>,
    /// The job list last published (compared by pointer: a reload replaces it whole).
    published_jobs: Option<Jobs>,
    /// The digest of the declarations last published, which the published marker names.
    published_digest: String,
    /// Where the next check of the published declarations starts in the job list.
    check_from: usize,
    /// While this replica leads, its heartbeat also refreshes the gauges of shared state.
    leadership: Leadership,
    started_ms: i64,
    /// Names this process among those that could beat under its replica id.
    instance: String,
    /// Whether a heartbeat went through: a record of another process found by the first one
    /// is a predecessor's (see [`wait_for_replica_id`]).
    beaten: bool,
    /// The namespace was held at the last heartbeat.
    held: bool,
    /// Which of the last three heartbeats found another process's record, one bit each. Once
    /// may be a Redis restored from an older copy; twice is a second process beating, and the
    /// older of the two stops.
    foreign_beats: u8,
    /// The `{ns}:origin` the last heartbeat found: another one later means Redis lost the data.
    origin: Option<String>,
    /// The every-replica jobs the last heartbeat declared this replica a target of: one gone
    /// from the job list since (a reload) stops being targeted at once.
    targeted: Vec<String>,
}

impl Heartbeat {
    /// A heartbeat reporting the workers' `load` (busy, and the bound on them) and the hashes of
    /// `jobs`.
    pub fn new(
        store: Store,
        config: HeartbeatConfig,
        load: Arc<WorkerLoad>,
        jobs: watch::Receiver<Jobs>,
        leadership: Leadership,
    ) -> Self {
        let started_ms = chrono::Utc::now().timestamp_millis();
        Self {
            store,
            config,
            load,
            jobs,
            leadership,
            published_jobs: None,
            published_digest: String::new(),
            check_from: 0,
            started_ms,
            instance: format!("{}/{}/{started_ms}", host_name(), std::process::id()),
            beaten: false,
            held: false,
            foreign_beats: 0,
            origin: None,
            targeted: Vec::new(),
        }
    }

    /// Records one heartbeat, publishes this replica's declarations when they changed or were
    /// lost, and checks a part of them.
    ///
    /// # Errors
    /// Redis errors; [`HeartbeatError::ReplicaIdInUse`] when another process beats under this
    /// replica's id.
    pub async fn tick(&mut self) -> Result<(), HeartbeatError> {
        let jobs = self.jobs.borrow_and_update().clone();
        if !self
            .published_jobs
            .as_ref()
            .is_some_and(|published| Arc::ptr_eq(published, &jobs))
        {
            self.publish(&jobs).await?;
        }
        let info = [
            ("host", host_name()),
            ("pid", std::process::id().to_string()),
            ("instance", self.instance.clone()),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("started_ms", self.started_ms.to_string()),
            ("busy_workers", self.load.busy().to_string()),
            ("max_workers", self.load.limit().to_string()),
            ("queues", self.config.queues.join(",")),
            ("labels", self.config.labels.clone()),
            (
                "heartbeat_period_ms",
                self.config.period.as_millis().to_string(),
            ),
            // What `redcron status` shows of the archive: exports, records, or ''.
            ("archive", self.store.archive_role().as_str().to_owned()),
            // What `redcron status` names: a script that keeps failing on a damaged key, or ''.
            (
                "failing_script",
                self.store
                    .metrics()
                    .health
                    .failing_script()
                    .map(|(operation, error)| format!("{operation} fails: {error}"))
                    .unwrap_or_default(),
            ),
        ];
        let beat = self
            .store
            .heartbeat(&self.config.replica_id, &info, self.config.period * 3)
            .await?;
        let foreign = beat
            .previous_instance
            .filter(|other| self.beaten && *other != self.instance);
        self.foreign_beats = (self.foreign_beats << 1 | u8::from(foreign.is_some())) & 0b111;
        if let Some(other) = foreign
            && self.foreign_beats.count_ones() >= 2
        {
            let mut parts = other.splitn(3, '/');
            let (host, pid) = (
                parts.next().unwrap_or_default(),
                parts.next().unwrap_or_default(),
            );
            // The newer process stays: it is the one an operator just started (or that replaced
            // one frozen meanwhile); the older one stops, and only one of them does.
            let other_started: i64 = parts.next().and_then(|ms| ms.parse().ok()).unwrap_or(0);
            if (other_started, other.as_str()) > (self.started_ms, self.instance.as_str()) {
                return Err(HeartbeatError::ReplicaIdInUse {
                    replica_id: self.config.replica_id.clone(),
                    host: host.to_owned(),
                    pid: pid.to_owned(),
                });
            }
            warn!(
                replica = self.config.replica_id,
                host,
                pid,
                "another, older process beats under this replica id: it stops, this one goes on"
            );
        }
        self.beaten = true;
        self.notice_origin(beat.origin);
        self.notice_hold(beat.held_for);
        self.notice_archive(beat.archive_to.as_deref());
        if !beat.declarations_kept {
            self.publish(&jobs).await?;
        } else {
            self.check_declarations(&jobs).await?;
        }
        self.declare_targets(&jobs).await?;
        self.store.metrics().health.progressed();
        if self.leadership.token().is_some() {
            self.refresh_gauges().await?;
        } else {
            self.clear_gauges();
        }
        Ok(())
    }

    /// Makes this replica a target of the next fires of the every-replica jobs it declares, and
    /// of no other.
    async fn declare_targets(&mut self, jobs: &Jobs) -> Result<(), StoreError> {
        let every: Vec<String> = jobs
            .iter()
            .filter(|job| job.on == Reach::Every)
            .map(|job| job.name.clone())
            .collect();
        let dropped: Vec<String> = self
            .targeted
            .iter()
            .filter(|job| !every.contains(job))
            .cloned()
            .collect();
        self.store
            .declare_targets(
                &self.config.replica_id,
                &every,
                &dropped,
                self.config.targets_kept,
            )
            .await?;
        self.targeted = every;
        Ok(())
    }

    /// Warns when the namespace's data in Redis is not the copy the last heartbeat found.
    fn notice_origin(&mut self, origin: String) {
        if self.origin.as_ref().is_some_and(|before| *before != origin) {
            self.store.metrics().redis_data_lost_total.inc();
            error!(
                replica = self.config.replica_id,
                "Redis lost this namespace's data since the last heartbeat (restarted without \
                 persistence, flushed, or replaced by another copy): the runs, workflow \
                 instances, dead letters and history it held are gone, and a run in progress is \
                 stopped when it next renews its lease"
            );
        }
        self.origin = Some(origin);
    }

    /// Has this replica's scripts write the archive's records once the namespace archives,
    /// when it was started without `--archive` before another replica was started with it:
    /// the outcomes it records from then on reach the archive through the replicas that
    /// export, and those it recorded between that replica's start and this beat have no record.
    fn notice_archive(&self, archive_to: Option<&str>) {
        if let Some(url) = archive_to
            && self.store.archive_from_now()
        {
            error!(
                replica = self.config.replica_id,
                archive = url,
                "the namespace archives now, and this replica was started without --archive: \
                 from this heartbeat on its outcomes are archived by the replicas started with \
                 it, and those it recorded since the first of them started (one heartbeat period \
                 at most) are not; restart it with --archive {url}"
            );
        }
    }

    /// A replica that does not lead exports no shared state: what it set while it led would
    /// be stale, and would count twice in a sum over replicas (or hide a queue no replica
    /// serves from a `max`).
    fn clear_gauges(&self) {
        let metrics = self.store.metrics();
        metrics.due_runs.set(0);
        metrics.active_runs.set(0);
        metrics.dead_runs.set(0);
        metrics.ready_runs.reset();
        metrics.queue_replicas.reset();
    }

    /// Says once when the namespace becomes held and when its hold ends (the components meet
    /// the hold at every call, and say so only at debug level).
    fn notice_hold(&mut self, held_for: Option<Duration>) {
        match (held_for, self.held) {
            (Some(left), false) => warn!(
                held_for = %humantime::format_duration(Duration::from_secs(left.as_secs())),
                "the namespace is held (redcron hold): nothing is planned, claimed or recorded \
                 until it is released; fires due meanwhile run late, and the misfire policy \
                 decides for those later than the misfire threshold"
            ),
            (None, true) => info!("the namespace's hold ended: runs go on"),
            _ => {}
        }
        self.held = held_for.is_some();
        let metrics = self.store.metrics();
        metrics.health.set_held(self.held);
        metrics.held.set(i64::from(self.held));
    }

    async fn publish(&mut self, jobs: &Jobs) -> Result<(), StoreError> {
        self.published_digest = self
            .store
            .publish_replica_jobs(&self.config.replica_id, jobs, self.config.period * 3)
            .await?;
        self.published_jobs = Some(jobs.clone());
        self.check_from = 0;
        Ok(())
    }

    /// Checks the next part of the published declarations, and publishes them all again when
    /// they are not what this replica declares.
    async fn check_declarations(&mut self, jobs: &Jobs) -> Result<(), StoreError> {
        if self.check_from >= jobs.len() {
            self.check_from = 0;
        }
        let end = (self.check_from + CHECK_BATCH).min(jobs.len());
        let intact = self
            .store
            .declarations_intact(
                &self.config.replica_id,
                &jobs[self.check_from..end],
                jobs.len(),
                &self.published_digest,
            )
            .await?;
        if intact {
            self.check_from = end;
            return Ok(());
        }
        warn!(
            replica = self.config.replica_id,
            "this replica's published declarations are not what it declares (written over or \
             restored from another copy): published again"
        );
        self.store.metrics().declarations_republished_total.inc();
        self.publish(jobs).await
    }

    /// Sets the gauges of shared state from Redis: done by the leader only, so that the sum
    /// over replicas counts each run once.
    async fn refresh_gauges(&self) -> Result<(), StoreError> {
        let queues: Vec<String> = self
            .jobs
            .borrow()
            .iter()
            .map(|job| job.queue.clone())
            .collect();
        let counts = self.store.run_counts(&queues).await?;
        let mut served = self.store.queue_servers(self.config.period * 3).await?;
        let gauge = |count: u64| i64::try_from(count).unwrap_or(i64::MAX);
        let metrics = self.store.metrics();
        // Every queue with ready runs gets a series, 0 when no live replica serves it.
        for (queue, _) in &counts.ready {
            served.entry(queue.clone()).or_default();
        }
        for (queue, replicas) in &served {
            metrics
                .queue_replicas
                .with_label_values(&[queue.as_str()])
                .set(gauge(*replicas));
        }
        metrics.due_runs.set(gauge(counts.due));
        metrics.active_runs.set(gauge(counts.active));
        metrics.dead_runs.set(gauge(counts.dead));
        for (queue, lengths) in &counts.ready {
            for (priority, length) in ["high", "normal", "low"].iter().zip(lengths) {
                metrics
                    .ready_runs
                    .with_label_values(&[queue.as_str(), priority])
                    .set(gauge(*length));
            }
        }
        Ok(())
    }

    /// Beats every period until `shutdown`. A failed heartbeat is retried at the next period:
    /// the store has counted its error, and `/healthz` reports a replica whose heartbeats keep
    /// failing. At shutdown the replica withdraws its declarations, so that the leader knows at
    /// once that it no longer runs their jobs (it stops last: the workers have stopped by then).
    pub async fn run(mut self, shutdown: Shutdown) {
        loop {
            match self.tick().await {
                Ok(()) => {}
                Err(HeartbeatError::Store(error)) => log_store_failure(&error, "heartbeat failed"),
                Err(error @ HeartbeatError::ReplicaIdInUse { .. }) => {
                    // The other process keeps the id: withdrawing would remove its record.
                    error!(%error, "stopping this replica");
                    return;
                }
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.config.period) => {}
            }
        }
        let withdrawn = tokio::time::timeout(
            WITHDRAW_TIMEOUT,
            self.store
                .withdraw_replica(&self.config.replica_id, self.config.keep_declared),
        )
        .await;
        match withdrawn {
            Ok(Ok(())) => {}
            Ok(Err(error)) => warn!(%error, "could not withdraw this replica's declarations"),
            Err(_) => warn!("Redis did not answer: this replica's declarations expire instead"),
        }
    }
}

/// This machine's host name: what the `host` label and a replica's record carry.
pub fn host_name() -> String {
    nix::unistd::gethostname()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Before a replica starts: when another process beat under `replica_id` lately, waits long
/// enough for its next heartbeat (a bit more than one `period`); a replica restarted after a
/// crash finds its predecessor silent and goes on, a second process with the same id is
/// refused.
///
/// # Errors
/// [`HeartbeatError::ReplicaIdInUse`]; Redis errors.
pub async fn wait_for_replica_id(
    store: &Store,
    replica_id: &str,
    period: Duration,
) -> Result<(), HeartbeatError> {
    let Some(seen) = store.replica_instance(replica_id).await? else {
        return Ok(());
    };
    let period_ms = i64::try_from(period.as_millis()).unwrap_or(i64::MAX);
    let next_beat_by = seen.beat_ms.saturating_add(period_ms + period_ms / 2);
    if next_beat_by <= seen.now_ms {
        return Ok(());
    }
    info!(
        replica = replica_id,
        host = seen.host,
        pid = seen.pid,
        "another process beat under this replica id lately: waiting for its next heartbeat"
    );
    let wait = u64::try_from(next_beat_by - seen.now_ms).unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(wait)).await;
    match store.replica_instance(replica_id).await? {
        Some(now) if now.beat_ms > seen.beat_ms => Err(HeartbeatError::ReplicaIdInUse {
            replica_id: replica_id.to_owned(),
            host: now.host,
            pid: now.pid,
        }),
        _ => Ok(()),
    }
}
