//! The heartbeat: every replica records itself (host, pid, version, start time, busy and max
//! workers) every few seconds, so operators can see who is alive and how loaded.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tracing::warn;

use super::planner::Jobs;
use super::{Leadership, Shutdown};
use crate::metrics::{HEALTH, METRICS};
use crate::store::{Store, StoreError};

/// The longest a stopping replica waits to withdraw its declarations: without an answer they
/// expire with its heartbeats instead.
const WITHDRAW_TIMEOUT: Duration = Duration::from_millis(500);

/// How the heartbeat behaves.
#[derive(Debug, Clone)]
pub struct HeartbeatConfig {
    /// This replica's id.
    pub replica_id: String,
    /// Time between heartbeats; a replica silent for three is stale.
    pub period: Duration,
    /// How many runs this replica executes at once.
    pub max_workers: usize,
}

/// Records this replica as alive.
pub struct Heartbeat {
    store: Store,
    config: HeartbeatConfig,
    /// Runs executing now, kept by the workers.
    busy: Arc<AtomicUsize>,
    /// The declared jobs, whose hashes are published for drift detection.
    jobs: watch::Receiver<Jobs>,
    /// The job list last published (compared by pointer: a reload replaces it whole).
    published_jobs: Option<Jobs>,
    /// While this replica leads, its heartbeat also refreshes the gauges of shared state.
    leadership: Leadership,
    started_ms: i64,
}

impl Heartbeat {
    /// A heartbeat reporting `busy` as the number of busy workers and the hashes of `jobs`.
    pub fn new(
        store: Store,
        config: HeartbeatConfig,
        busy: Arc<AtomicUsize>,
        jobs: watch::Receiver<Jobs>,
        leadership: Leadership,
    ) -> Self {
        Self {
            store,
            config,
            busy,
            jobs,
            leadership,
            published_jobs: None,
            started_ms: chrono::Utc::now().timestamp_millis(),
        }
    }

    /// Records one heartbeat, and this replica's job hashes when they changed.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn tick(&mut self) -> Result<(), StoreError> {
        let jobs = self.jobs.borrow_and_update().clone();
        if !self
            .published_jobs
            .as_ref()
            .is_some_and(|published| Arc::ptr_eq(published, &jobs))
        {
            self.store
                .publish_replica_jobs(&self.config.replica_id, &jobs, self.config.period * 3)
                .await?;
            self.published_jobs = Some(jobs.clone());
        }
        let host = nix::unistd::gethostname()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let info = [
            ("host", host),
            ("pid", std::process::id().to_string()),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("started_ms", self.started_ms.to_string()),
            (
                "busy_workers",
                self.busy.load(Ordering::Relaxed).to_string(),
            ),
            ("max_workers", self.config.max_workers.to_string()),
            (
                "heartbeat_period_ms",
                self.config.period.as_millis().to_string(),
            ),
        ];
        let declarations_kept = self
            .store
            .heartbeat(&self.config.replica_id, &info, self.config.period * 3)
            .await?;
        if !declarations_kept {
            self.store
                .publish_replica_jobs(&self.config.replica_id, &jobs, self.config.period * 3)
                .await?;
        }
        HEALTH.progressed();
        if self.leadership.token().is_some() {
            self.refresh_gauges().await?;
        }
        Ok(())
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
        let gauge = |count: u64| i64::try_from(count).unwrap_or(i64::MAX);
        METRICS.due_runs.set(gauge(counts.due));
        METRICS.active_runs.set(gauge(counts.active));
        METRICS.dead_runs.set(gauge(counts.dead));
        for (queue, lengths) in &counts.ready {
            for (priority, length) in ["high", "normal", "low"].iter().zip(lengths) {
                METRICS
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
            if let Err(error) = self.tick().await {
                warn!(%error, "heartbeat failed");
            }
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(self.config.period) => {}
            }
        }
        let withdrawn = tokio::time::timeout(
            WITHDRAW_TIMEOUT,
            self.store.withdraw_replica(&self.config.replica_id),
        )
        .await;
        match withdrawn {
            Ok(Ok(())) => {}
            Ok(Err(error)) => warn!(%error, "could not withdraw this replica's declarations"),
            Err(_) => warn!("Redis did not answer: this replica's declarations expire instead"),
        }
    }
}
