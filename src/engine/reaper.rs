//! The reaper: on every replica, ends runs whose lease expired because their worker died or
//! froze: reason `lost`, which runs an at-least-once run again and buries an at-most-once one.
//! It also buries (reason `undeclared`) runs that no live replica has declared the job of for
//! a grace period.

use std::time::Duration;

use tracing::{info, warn};

use super::{Backoff, Shutdown, log_store_failure};
use crate::store::{FailOutcome, FailReason, Failure, Store, StoreError};

/// How the reaper behaves.
#[derive(Debug, Clone)]
pub struct ReaperConfig {
    /// Time between ticks.
    pub period: Duration,
    /// Most runs reaped per tick.
    pub batch: usize,
    /// How long runs of a job that no live replica declares wait before they go to the dead
    /// letters (reason `undeclared`): a rolling deploy that drops a job for a while, or adds
    /// one before every replica has it, loses none of its runs.
    pub undeclared_grace: Duration,
    /// A replica is live while its last heartbeat is at most this old.
    pub replica_live_for: Duration,
}

impl Default for ReaperConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(2),
            batch: 100,
            undeclared_grace: Duration::from_secs(300),
            replica_live_for: Duration::from_secs(6),
        }
    }
}

/// What one reaper tick did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reaped {
    /// Lost runs due again.
    pub retried: u64,
    /// Lost runs sent to the dead letters.
    pub dead: u64,
}

/// Fails runs whose lease expired.
pub struct Reaper {
    store: Store,
    config: ReaperConfig,
}

impl Reaper {
    /// A reaper.
    pub fn new(store: Store, config: ReaperConfig) -> Self {
        Self { store, config }
    }

    /// Reaps one batch of expired leases. Several replicas may reap at once: the script checks
    /// the lease again, so each run is reaped once.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn tick(&mut self) -> Result<Reaped, StoreError> {
        let failure = Failure::without_output(
            FailReason::Lost,
            "lease expired: its worker stopped renewing it (the replica died, froze or lost \
             Redis)",
        );
        let mut reaped = Reaped::default();
        for (job, runs) in self
            .store
            .bury_undeclared_runs(
                self.config.undeclared_grace,
                self.config.replica_live_for,
                &[],
            )
            .await?
        {
            warn!(
                job,
                runs,
                grace = %humantime::format_duration(self.config.undeclared_grace),
                "no live replica declares this job: its waiting fires are skipped, its other \
                 waiting runs are dead"
            );
            reaped.dead += runs;
        }
        for run_id in self.store.expired_leases(self.config.batch).await? {
            match self.store.fail_run(&run_id, None, &failure, 0.5).await? {
                FailOutcome::Retrying { .. } => {
                    info!(run = run_id, "lost run: due again");
                    self.store.metrics().reaped_runs_total.inc();
                    reaped.retried += 1;
                }
                FailOutcome::Dead => {
                    info!(run = run_id, "lost run: dead");
                    self.store.metrics().reaped_runs_total.inc();
                    reaped.dead += 1;
                }
                FailOutcome::Gone => {}
            }
        }
        Ok(reaped)
    }

    /// Reaps every period until `shutdown`.
    pub async fn run(mut self, shutdown: Shutdown) {
        let mut backoff = Backoff::default();
        loop {
            let pause = match self.tick().await {
                Ok(_) => {
                    backoff.succeeded(&self.store.metrics().health);
                    self.config.period
                }
                Err(error) => {
                    log_store_failure(&error, "reaper tick failed");
                    backoff.failed_with(&error)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}
