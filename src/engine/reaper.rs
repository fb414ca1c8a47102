//! The reaper: on every replica, ends runs whose lease expired because their worker died or
//! froze: reason `lost`, which runs an at-least-once run again and buries an at-most-once one.
//! It also buries (reason `undeclared`) runs that no live replica has declared the job of for
//! a grace period, moves the ready runs of a queue that no live replica has served for its
//! `fallback_after` to its fallback queue (`[queues.<name>]`), and settles the workflow steps
//! whose runs ended without advancing their instance, and puts back the runs it finds in none of
//! the lists their state says they are in (a page of run hashes a tick), keeping the index of
//! the queues with ready runs whole on the same page.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{info, warn};

use super::{Backoff, Shutdown, log_store_failure};
use crate::schedule::{Jobs, QueueFallbacks};
use crate::store::{FailOutcome, FailReason, Failure, Store, StoreError};

mod damage;
mod stranded;

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
    /// How long a replica's runs of every-replica fires wait for it, past their due time, once
    /// it is gone: the misfire threshold.
    pub misfire_threshold: Duration,
}

impl Default for ReaperConfig {
    fn default() -> Self {
        Self {
            period: Duration::from_secs(2),
            batch: 100,
            undeclared_grace: Duration::from_secs(300),
            replica_live_for: Duration::from_secs(6),
            misfire_threshold: Duration::from_secs(60),
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
    /// Ready runs moved from a queue no live replica serves to its fallback.
    pub rerouted: u64,
    /// Runs found in none of the lists their state says they are in, put back.
    pub requeued: u64,
}

/// Fails runs whose lease expired.
pub struct Reaper {
    store: Store,
    config: ReaperConfig,
    /// The `[queues]` tables this replica declares.
    fallbacks: Option<watch::Receiver<QueueFallbacks>>,
    /// The jobs this replica declares: the `job` label of the runs it skips for a gone replica.
    jobs: Option<watch::Receiver<Jobs>>,
    /// Since when, as this replica saw it, no live replica has served each queue that has a
    /// fallback, and whether this replica moved runs away since (said once, then quietly).
    unserved_since: HashMap<String, (Instant, bool)>,
    /// Where the next page of running workflow instances to settle starts.
    settle_from: usize,
    /// Where the next page of the walk over the namespace's records starts (`SCAN` cursor; 0
    /// starts a round): for damaged records, runs left in no list and the index of queues with
    /// ready runs.
    records_from: u64,
    /// Whether every page of the walk's round so far added its ready lists' queues to the
    /// index: only such a round may tell readers that the index is whole.
    queues_indexed: bool,
}

/// How many running workflow instances one tick settles: the index is read a page a tick, so a
/// large one costs each tick the same.
const SETTLED_PER_TICK: usize = 200;

impl Reaper {
    /// A reaper.
    pub fn new(store: Store, config: ReaperConfig) -> Self {
        Self {
            store,
            config,
            fallbacks: None,
            jobs: None,
            unserved_since: HashMap::new(),
            settle_from: 0,
            records_from: 0,
            queues_indexed: true,
        }
    }

    /// Also moves the ready runs of unserved queues to their fallbacks, as `fallbacks` says.
    #[must_use]
    pub fn with_queue_fallbacks(mut self, fallbacks: watch::Receiver<QueueFallbacks>) -> Self {
        self.fallbacks = Some(fallbacks);
        self
    }

    /// Labels the runs it skips for a gone replica with their job when this replica declares
    /// it, as the promoter labels its skips.
    #[must_use]
    pub fn with_jobs(mut self, jobs: watch::Receiver<Jobs>) -> Self {
        self.jobs = Some(jobs);
        self
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
        // First, and with reads only until runs move: while the namespace is held, the calls
        // below are refused, and who serves a queue must still be followed meanwhile.
        let mut reaped = Reaped {
            rerouted: self.reroute().await?,
            ..Reaped::default()
        };
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
        let (settled, next) = self
            .store
            .settle_workflows(self.settle_from, SETTLED_PER_TICK)
            .await?;
        self.settle_from = next;
        if settled > 0 {
            warn!(
                steps = settled,
                "workflow steps whose runs ended without advancing their instance (recorded by \
                 a replica of a version without workflows) are settled now"
            );
        }
        self.sweep_damage().await?;
        self.skip_stranded().await?;
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
        reaped.requeued = self.walk_records().await?;
        Ok(reaped)
    }

    /// Moves the ready runs of every queue that no live replica has served for its
    /// `fallback_after`, as this replica counts it, to its fallback. Several replicas may move
    /// at once: each run moves once, atomically.
    async fn reroute(&mut self) -> Result<u64, StoreError> {
        let fallbacks = match &self.fallbacks {
            Some(fallbacks) => fallbacks.borrow().clone(),
            None => return Ok(0),
        };
        if fallbacks.is_empty() {
            self.unserved_since.clear();
            return Ok(0);
        }
        let served = self
            .store
            .queue_servers(self.config.replica_live_for)
            .await?;
        let now = Instant::now();
        let mut moved = 0;
        for fallback in fallbacks.iter() {
            if served.get(&fallback.queue).copied().unwrap_or(0) > 0 {
                self.unserved_since.remove(&fallback.queue);
                continue;
            }
            let (since, announced) = self
                .unserved_since
                .entry(fallback.queue.clone())
                .or_insert((now, false));
            let since = *since;
            if now.duration_since(since) < fallback.after {
                continue;
            }
            let runs = self
                .store
                .move_ready_runs(&fallback.queue, &fallback.fallback)
                .await?;
            if runs > 0 {
                let unserved_for = humantime::format_duration(Duration::from_secs(
                    now.duration_since(since).as_secs(),
                ));
                if std::mem::replace(announced, true) {
                    info!(
                        queue = fallback.queue,
                        fallback = fallback.fallback,
                        runs,
                        "ready runs moved to the queue's fallback"
                    );
                } else {
                    warn!(
                        queue = fallback.queue,
                        fallback = fallback.fallback,
                        runs,
                        unserved_for = %unserved_for,
                        "no live replica serves this queue: its ready runs moved to its \
                         fallback, and the next ones will until a replica serves it"
                    );
                }
                self.store
                    .metrics()
                    .rerouted_runs_total
                    .with_label_values(&[fallback.queue.as_str()])
                    .inc_by(runs);
                moved += runs;
            }
        }
        Ok(moved)
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
