//! The workers: on every replica, claim ready runs of the queues it serves (strict priority),
//! execute each with its job's handler while keeping its lease alive, and record the outcome.
//!
//! Idle workers block on the queues' wake markers instead of polling. A run is only ever
//! claimed and executed for a job declared in this replica's own schedule files (a run of
//! another job is left for a replica that declares it): what is stored in Redis can trigger a
//! declared job but never inject a command.
//!
//! This file is the claim loop; `execution` runs one claimed run, `acker` records successes in
//! batches, `starter` starts runs claimed ahead in batches, `owned` compares the runs this replica owns with what Redis says it owns, and
//! `workflow_starter` is the handler of a workflow's own job.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{Instrument, info, warn};

mod acker;
mod execution;
mod live;
mod owned;
mod sizing;
mod starter;
mod workflow_starter;

pub use acker::RECORD_WINDOW;
use acker::{PendingAck, record_successes};
use execution::{Ended, Execution};
pub use owned::Reconciled;
use owned::{OwnedRuns, reconcile};
use sizing::Sizing;
pub use sizing::{Concurrency, GROW_AFTER, SHRINK_AFTER, WorkerLoad};
use starter::Starter;
use workflow_starter::WorkflowStarter;

use super::{Backoff, Shutdown, log_store_failure, record_skips, skip_reason_at_start};
use crate::handler::{Handler, Handlers};
use crate::schedule::{Job, Jobs, Reach};
use crate::store::{
    ClaimLeases, ClaimedRun, CorruptRun, FailReason, Failure, MIN_AHEAD_LEASE, ReadyWaiter,
    RedisClock, Store, StoreError,
};

/// How the workers behave.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This replica's id; each run's worker id is `<replica id>/<slot>`.
    pub replica_id: String,
    /// The queues this replica serves.
    pub queues: Vec<String>,
    /// How many runs execute at once: a fixed number, or a range the backlog moves the bound
    /// in.
    pub concurrency: Concurrency,
    /// A running run's lease, extended every third of it; a run whose replica died is reaped
    /// about this long after its last extension.
    pub lease: Duration,
    /// A run claimed ahead holds this lease past its due time until its worker starts it
    /// (see [`crate::store::ahead_lease`]).
    pub ahead_lease: Duration,
    /// How often the runs Redis says this replica owns are compared with those it runs.
    pub reconcile_period: Duration,
    /// How long this replica's declarations stay in Redis without a heartbeat, when the workers
    /// publish them (they claim only runs of the jobs declared there).
    pub declarations_ttl: Duration,
    /// How long an idle worker blocks for a wake-up before claiming again anyway, at most:
    /// each wait lasts a random time between three quarters of it and all of it (see
    /// [`wait_timeout`]).
    pub idle_wait: Duration,
    /// Most runs one claim may pop (skipped ones included); below the number of free slots,
    /// it also caps how many runs one claim starts.
    pub pop_limit: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            replica_id: "replica".to_owned(),
            queues: vec!["default".to_owned()],
            concurrency: Concurrency::fixed(4),
            lease: Duration::from_secs(30),
            ahead_lease: MIN_AHEAD_LEASE,
            reconcile_period: Duration::from_secs(2),
            declarations_ttl: Duration::from_secs(6),
            idle_wait: Duration::from_secs(1),
            pop_limit: 2 * MAX_CLAIM_BATCH,
        }
    }
}

/// What one worker tick did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerTick {
    /// Runs were claimed and started: how many.
    Started(usize),
    /// Nothing is ready.
    Empty,
    /// Only skipped runs so far: claim again.
    More,
    /// Every slot is busy.
    Full,
}

/// How often a replica reads Redis's clock to start runs claimed ahead at their due time.
const CLOCK_READING_INTERVAL: Duration = Duration::from_secs(1);

/// How long a reading of Redis's clock is kept when later ones took longer to answer: the two
/// clocks drift apart by a few microseconds a second at most.
const CLOCK_READING_MAX_AGE: Duration = Duration::from_secs(5);

/// Added to a start mapped through a reading of Redis's clock: room for the drift of the two
/// clocks since the reading, far more than they drift in [`CLOCK_READING_MAX_AGE`].
const CLOCK_MARGIN: Duration = Duration::from_millis(1);

/// The most runs one claim call asks for: bounds the script's reply and its time in Redis.
const MAX_CLAIM_BATCH: usize = 256;

/// Claims and executes runs.
pub struct Workers {
    store: Store,
    config: WorkerConfig,
    jobs: watch::Receiver<Jobs>,
    handlers: Handlers,
    /// Each slot's worker id, `<replica id>/<slot>`.
    worker_ids: Vec<String>,
    /// Slots not executing anything.
    free: Vec<usize>,
    /// The declared jobs by name, rebuilt when the schedule files are reloaded.
    declared: HashMap<String, Arc<Job>>,
    /// Where executions send their successes, recorded in batches.
    acks: mpsc::Sender<PendingAck>,
    /// The task that records them; it ends once every sender is gone.
    acker: JoinHandle<()>,
    /// Where executions start the runs claimed ahead, in batches.
    starter: Starter,
    /// Whether the last claim filled every free slot, so more runs may be waiting.
    backlog: watch::Sender<bool>,
    /// Executions in progress; each returns its slot.
    running: JoinSet<usize>,
    /// Cancelled when running runs must stop and be handed back (after the shutdown grace).
    interrupt: Shutdown,
    /// How many runs may execute at once, and how many do.
    sizing: Sizing,
    /// The best recent reading of Redis's clock, for the start of runs claimed ahead.
    redis_clock: Option<RedisClock>,
    /// When Redis's clock was last read.
    last_clock_reading: Option<tokio::time::Instant>,
    /// The runs this replica's workers own, and the successes they recorded lately.
    owned: OwnedRuns,
    /// When the runs Redis says this replica owns are next compared with those it owns.
    next_reconcile: tokio::time::Instant,
}

impl Workers {
    /// Workers for this replica's queues. Must be called within a Tokio runtime: it starts the
    /// tasks that record successes and start runs claimed ahead.
    pub fn new(
        store: Store,
        config: WorkerConfig,
        mut jobs: watch::Receiver<Jobs>,
        handlers: Handlers,
    ) -> Self {
        let sizing = Sizing::new(config.concurrency);
        let slots = sizing.max();
        store
            .metrics()
            .workers_max
            .set(i64::try_from(sizing.limit()).unwrap_or(i64::MAX));
        let worker_ids = (0..slots)
            .map(|slot| format!("{}/{slot}", config.replica_id))
            .collect();
        let declared = by_name(&jobs.borrow_and_update());
        // A slot is free again once its success is handed over; the channel's bound keeps
        // unrecorded successes to one per slot, should Redis fall behind.
        let (acks, pending) = mpsc::channel(slots);
        let (backlog, has_backlog) = watch::channel(false);
        let owned = OwnedRuns::default();
        let acker = tokio::spawn(
            record_successes(store.clone(), pending, has_backlog, owned.clone()).in_current_span(),
        );
        let starter = Starter::spawn(store.clone(), config.lease, slots);
        Self {
            store,
            config,
            jobs,
            handlers,
            worker_ids,
            free: (0..slots).rev().collect(),
            declared,
            acks,
            acker,
            starter,
            backlog,
            running: JoinSet::new(),
            interrupt: Shutdown::new(),
            sizing,
            redis_clock: None,
            last_clock_reading: None,
            owned,
            next_reconcile: tokio::time::Instant::now(),
        }
    }

    /// How many runs are executing (from claim to recorded outcome) and may execute at once,
    /// for the heartbeat.
    pub fn load(&self) -> Arc<WorkerLoad> {
        self.sizing.load()
    }

    /// Cancelling it stops running runs at once and hands them back, as at the end of the
    /// shutdown grace: for a replica that stops because one of its components died.
    pub fn interrupter(&self) -> Shutdown {
        self.interrupt.clone()
    }

    /// Claims a run for every free slot, in one call, and starts them; a claimed run too
    /// damaged to decode is sent to the dead letters instead.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn tick(&mut self) -> Result<WorkerTick, StoreError> {
        while let Some(done) = self.running.try_join_next() {
            self.free.extend(done.ok());
        }
        let in_use = self.worker_ids.len() - self.free.len();
        let room = self.sizing.limit().saturating_sub(in_use);
        if room == 0 {
            let waiting = *self.backlog.borrow();
            self.resize(waiting);
            self.reconcile_when_due().await?;
            return Ok(WorkerTick::Full);
        }
        if self.jobs.has_changed().unwrap_or(false) {
            self.declared = by_name(&self.jobs.borrow_and_update());
        }
        self.reconcile_when_due().await?;
        self.read_redis_clock().await;
        // The top of the free stack, in the order the script hands runs to workers.
        let slots: Vec<usize> = self
            .free
            .iter()
            .rev()
            .take(room.min(MAX_CLAIM_BATCH))
            .copied()
            .collect();
        let slots_asked = slots.len();
        let workers: Vec<&str> = slots
            .iter()
            .map(|&slot| self.worker_ids[slot].as_str())
            .collect();
        let leases = ClaimLeases {
            run: self.config.lease,
            ahead: self.config.ahead_lease,
        };
        let claimed = match self
            .store
            .claim_runs(&workers, &self.config.queues, leases, self.config.pop_limit)
            .await
        {
            Err(StoreError::Undeclared { .. }) => {
                // Expired while Redis stalled, or not published yet: claims wait for them.
                let jobs = self.jobs.borrow().clone();
                self.store
                    .publish_replica_jobs(
                        &self.config.replica_id,
                        &jobs,
                        self.config.declarations_ttl,
                    )
                    .await?;
                return Ok(WorkerTick::More);
            }
            claimed => claimed?,
        };
        let skips: Vec<(String, String)> = claimed
            .skips
            .iter()
            .map(|(job, reason)| {
                let every = self
                    .declared
                    .get(job)
                    .is_some_and(|job| job.on == Reach::Every);
                (job.clone(), skip_reason_at_start(every, reason).to_owned())
            })
            .collect();
        record_skips(self.store.metrics(), &skips, |job| {
            self.declared.contains_key(job)
        });
        if claimed.rewound {
            warn!(
                replica = self.config.replica_id,
                "Redis came back older than this replica last saw it (restored from an older \
                 copy, failed over to a replica that lagged, or it lost writes in a crash): a \
                 run it says was running then skips no fire as an overlap, and this replica \
                 compares what it runs with what Redis says at once"
            );
            self.reconcile_soon();
        }
        // Waits count from the reply, never from a later poll of the run's task: a run claimed
        // ahead starts at its due time on Redis's clock, however long starting the batch takes.
        let claimed_at = tokio::time::Instant::now();
        let mut started = 0;
        let mut undeclared = Vec::new();
        for (claim, slot) in claimed.runs.into_iter().zip(slots) {
            match claim {
                Ok(run) => match self.declared.get(&run.job).cloned() {
                    Some(job) => {
                        self.free.pop();
                        self.owned.claimed(&run.id);
                        let start_at = self.start_instant(&run, claimed_at, claimed.redis_now_ms);
                        self.start(run, job, slot, start_at);
                        started += 1;
                    }
                    None => undeclared.push(run),
                },
                Err(corrupt) => self.bury(corrupt).await?,
            }
        }
        if !undeclared.is_empty() {
            self.hand_back_undeclared(undeclared).await?;
        }
        let waiting = started == slots_asked && !claimed.drained;
        self.backlog.send_replace(waiting);
        self.resize(waiting);
        Ok(if started > 0 {
            WorkerTick::Started(started)
        } else if claimed.drained {
            WorkerTick::Empty
        } else {
            WorkerTick::More
        })
    }

    /// Lets the backlog move the bound on runs at once (`--workers MIN..MAX`).
    fn resize(&mut self, waiting: bool) {
        if let Some(limit) = self.sizing.observe(tokio::time::Instant::now(), waiting) {
            let why = if waiting {
                "ready runs kept waiting for a worker"
            } else {
                "no run waited for a worker lately"
            };
            info!(limit, "{why}: the replica now runs up to {limit} at once");
            self.store
                .metrics()
                .workers_max
                .set(i64::try_from(limit).unwrap_or(i64::MAX));
        }
    }

    /// Compares the runs Redis says this replica owns with those it owns, once per
    /// [`WorkerConfig::reconcile_period`]. Called between claims only, so every run claimed is
    /// owned by then.
    async fn reconcile_when_due(&mut self) -> Result<(), StoreError> {
        let now = tokio::time::Instant::now();
        if now < self.next_reconcile {
            return Ok(());
        }
        self.next_reconcile = now + self.config.reconcile_period;
        reconcile(&self.store, &self.config.replica_id, &self.owned).await?;
        Ok(())
    }

    /// After a Redis error, compares at the next tick: Redis may have come back from an older
    /// copy, or have lost a reply.
    fn reconcile_soon(&mut self) {
        self.next_reconcile = tokio::time::Instant::now();
    }

    /// When a claimed run starts: its wait counted from the reply, which is never early but
    /// late by however long the reply took (Redis answers a claim only after the other commands
    /// of the same event-loop turn, a whole promotion maybe); or, sooner and as safe, its due
    /// time mapped through a recent reading of Redis's clock.
    fn start_instant(
        &self,
        run: &ClaimedRun,
        claimed_at: tokio::time::Instant,
        redis_now_ms: Option<i64>,
    ) -> tokio::time::Instant {
        let from_reply = claimed_at + run.start_in;
        let wait_ms = i64::try_from(run.start_in.as_millis()).unwrap_or(i64::MAX);
        match (self.redis_clock, redis_now_ms) {
            (Some(clock), Some(now_ms)) if !run.start_in.is_zero() => from_reply
                .min(clock.latest_instant_of(now_ms.saturating_add(wait_ms)) + CLOCK_MARGIN),
            _ => from_reply,
        }
    }

    /// Reads Redis's clock at most once per [`CLOCK_READING_INTERVAL`], keeping the reading
    /// with the shortest round trip, which bounds it best, unless it is older than
    /// [`CLOCK_READING_MAX_AGE`]. A failed reading keeps the last one.
    async fn read_redis_clock(&mut self) {
        let now = tokio::time::Instant::now();
        if self
            .last_clock_reading
            .is_some_and(|last| now - last < CLOCK_READING_INTERVAL)
        {
            return;
        }
        self.last_clock_reading = Some(now);
        let Ok(reading) = self.store.clock().await else {
            return;
        };
        let better = self.redis_clock.is_none_or(|kept| {
            reading.round_trip() <= kept.round_trip()
                || reading.received() - kept.received() > CLOCK_READING_MAX_AGE
        });
        if better {
            self.redis_clock = Some(reading);
        }
    }

    /// Executes a claimed run in `slot` from `start_at`; the execution gives the slot back when
    /// it ends.
    fn start(
        &mut self,
        run: ClaimedRun,
        job: Arc<Job>,
        slot: usize,
        start_at: tokio::time::Instant,
    ) {
        let handler: Arc<dyn Handler> = if job.workflow.is_some() {
            Arc::new(WorkflowStarter {
                store: self.store.clone(),
            })
        } else {
            self.handlers.for_job(&run.job)
        };
        let execution = Execution {
            store: self.store.clone(),
            lease: self.config.lease,
            interrupt: self.interrupt.clone(),
            acks: self.acks.clone(),
            starter: self.starter.clone(),
            start_at,
            stop_grace: handler.stop_grace(),
        };
        let owned = self.owned.clone();
        // Counted from claim to recorded outcome, by the execution itself, so the count never
        // lags behind a tick.
        let load = self.sizing.load();
        load.started();
        let metrics = self.store.metrics().clone();
        metrics.workers_busy.inc();
        self.running.spawn(
            async move {
                let run_id = run.id.clone();
                // A panicking handler must not take the slot with it.
                let finished =
                    AssertUnwindSafe(execution.run(run, job, move |context| handler.call(context)))
                        .catch_unwind()
                        .await;
                // A success handed to the acker is owned until it is recorded; any other end lets
                // the run go now.
                if !matches!(finished, Ok(Ended::SuccessHandedOver)) {
                    owned.disowned(&run_id);
                }
                if finished.is_err() {
                    warn!(
                        run = run_id,
                        "the run's handler panicked: it is handed back at the next reconciliation"
                    );
                }
                load.ended();
                metrics.workers_busy.dec();
                slot
            }
            .in_current_span(),
        );
    }

    /// Hands back, without using an attempt, runs claimed for jobs this replica does not declare:
    /// Redis said it does, because its published declarations were damaged or a reload changed
    /// them since. They are published again first, so that the next claim puts such runs aside
    /// for a replica that declares their job.
    async fn hand_back_undeclared(&self, runs: Vec<ClaimedRun>) -> Result<(), StoreError> {
        let jobs = self.jobs.borrow().clone();
        self.store
            .publish_replica_jobs(&self.config.replica_id, &jobs, self.config.declarations_ttl)
            .await?;
        for run in runs {
            warn!(
                run = run.id,
                job = run.job,
                "claimed a run of a job this replica does not declare (its published \
                 declarations were damaged, or changed by a reload meanwhile): published them \
                 again and handed the run back"
            );
            let failure = Failure::without_output(
                FailReason::NotStarted,
                format!(
                    "claimed by a replica that does not declare job \"{}\": handed back",
                    run.job
                ),
            );
            self.store
                .fail_run(&run.id, Some(&run.worker), &failure, 0.0)
                .await?;
        }
        Ok(())
    }

    /// Sends a claimed run that cannot be decoded to the dead letters; its slot stays free.
    async fn bury(&self, corrupt: CorruptRun) -> Result<(), StoreError> {
        warn!(
            run = corrupt.run_id,
            detail = corrupt.detail,
            "corrupt run: dead"
        );
        let failure = Failure::without_output(
            FailReason::Corrupt,
            format!("corrupt run: {}", corrupt.detail),
        );
        self.store
            .fail_run(&corrupt.run_id, Some(&corrupt.worker), &failure, 0.0)
            .await?;
        Ok(())
    }

    /// Claims and executes runs until `shutdown`; then lets running runs finish for up to
    /// `grace`, stops the rest and hands them back (they run again without using an attempt).
    pub async fn run(mut self, shutdown: Shutdown, grace: Duration) {
        let mut waiter: Option<ReadyWaiter> = None;
        let mut backoff = Backoff::default();
        while !shutdown.is_cancelled() {
            let idle = match self.tick().await {
                Ok(WorkerTick::Started(_) | WorkerTick::More) => {
                    backoff.succeeded(&self.store.metrics().health);
                    continue;
                }
                Ok(WorkerTick::Full) => Idle::Full,
                Ok(WorkerTick::Empty) => {
                    backoff.succeeded(&self.store.metrics().health);
                    Idle::Empty
                }
                Err(error) => {
                    log_store_failure(&error, "claiming a run failed");
                    self.reconcile_soon();
                    Idle::Failed(backoff.failed_with(&error))
                }
            };
            match idle {
                Idle::Full => {
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        Some(done) = self.running.join_next() => self.free.extend(done.ok()),
                        // A backlog of long runs: look again when the bound may grow.
                        () = sleep_until_some(self.sizing.next_growth()) => continue,
                        // Long runs must not hold off the comparison with Redis.
                        () = tokio::time::sleep_until(self.next_reconcile) => continue,
                    }
                    // Successes are recorded in batches, so executions end in groups: let the
                    // rest of the group end before claiming, to claim for them in the same call.
                    tokio::task::yield_now().await;
                }
                Idle::Failed(delay) => {
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
                Idle::Empty => {
                    if waiter.is_none() {
                        waiter = self
                            .store
                            .ready_waiter(
                                &self.config.replica_id,
                                &self.config.queues,
                                self.config.idle_wait,
                            )
                            .await
                            .inspect_err(|error| {
                                log_store_failure(error, "cannot wait for ready runs")
                            })
                            .ok();
                    }
                    // Only shutdown may interrupt a wait: a blocking pop dropped half-way stays
                    // blocked in Redis and would swallow the next wake-up. Finished runs are
                    // collected by the next tick.
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        woken = wait(&mut waiter, wait_timeout(self.config.idle_wait)) => {
                            if let Err(error) = woken {
                                log_store_failure(&error, "waiting for ready runs failed");
                                self.reconcile_soon();
                                waiter = None;
                            }
                        }
                    }
                }
            }
        }
        self.drain(grace).await;
    }

    /// Lets running runs finish (see [`Workers::run`]), then waits until every success handed
    /// over is recorded, or given up: successes handed over before the runs stopped have had
    /// the recording window since, so the wait ends a window after they stopped (at once if
    /// recording their failures took that long), and a replica whose Redis is gone still exits.
    async fn drain(mut self, grace: Duration) {
        let stopped = self.finish_running(grace).await;
        drop(self.acks);
        let deadline = (stopped + RECORD_WINDOW).max(tokio::time::Instant::now());
        if tokio::time::timeout_at(deadline, &mut self.acker)
            .await
            .is_err()
        {
            warn!(
                "successes not recorded in time: their leases will expire and they may run again"
            );
            self.acker.abort();
        }
    }

    /// Lets running runs finish for up to `grace`, then stops the rest and hands them back;
    /// returns when the runs finished or were told to stop.
    async fn finish_running(&mut self, grace: Duration) -> tokio::time::Instant {
        if self.running.is_empty() {
            return tokio::time::Instant::now();
        }
        info!(
            running = self.running.len(),
            ?grace,
            "waiting for running runs to finish"
        );
        let finished = tokio::time::timeout(grace, async {
            while self.running.join_next().await.is_some() {}
        })
        .await;
        let stopped = tokio::time::Instant::now();
        if finished.is_err() {
            warn!(
                running = self.running.len(),
                "shutdown grace over: stopping running runs and handing them back"
            );
            self.interrupt.cancel();
            while self.running.join_next().await.is_some() {}
        }
        stopped
    }
}

enum Idle {
    Full,
    Empty,
    Failed(Duration),
}

/// Waits for a wake-up for up to `timeout`, or sleeps through it without a waiter.
async fn wait(waiter: &mut Option<ReadyWaiter>, timeout: Duration) -> Result<bool, StoreError> {
    match waiter {
        Some(waiter) => waiter.wait(timeout).await,
        None => {
            tokio::time::sleep(timeout).await;
            Ok(false)
        }
    }
}

/// How long one idle wait lasts: a random time between three quarters of `idle_wait` and all
/// of it. Redis wakes the replica that has blocked longest, and a wait that times out blocks
/// again behind the rest; were every wait as long as the idle wait, with fires as often as it,
/// the replica that claimed a fire would block again just after it, see the others' waits run
/// out and re-enter behind it all second long, and be the one woken at every fire. Waits of
/// differing lengths let every idle replica be the longest waiting in turn, at no cost to a
/// fire: a replica is woken as soon as the marker is set, whatever its wait's length.
fn wait_timeout(idle_wait: Duration) -> Duration {
    idle_wait.mul_f64(rand::random_range(0.75..=1.0))
}

/// The declared jobs by name, sharing the definitions the replica has.
fn by_name(jobs: &Jobs) -> HashMap<String, Arc<Job>> {
    jobs.iter()
        .map(|job| (job.name.clone(), job.clone()))
        .collect()
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until_some(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
