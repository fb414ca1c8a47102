//! The workers: on every replica, claim ready runs of the queues it serves (strict priority),
//! execute each with its job's handler while keeping its lease alive, and record the outcome.
//!
//! Idle workers block on the queues' wake markers instead of polling. A run is only ever
//! claimed and executed for a job declared in this replica's own schedule files (a run of
//! another job is left for a replica that declares it): what is stored in Redis can trigger a
//! declared job but never inject a command.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::DateTime;
use futures_util::FutureExt;
use tokio::sync::{mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::task::AbortOnDropHandle;
use tracing::{debug, info, warn};

mod held;

pub use held::Reconciled;
use held::{HeldRuns, reconcile};

use super::planner::Jobs;
use super::{Backoff, Shutdown};
use crate::handler::{Handlers, Outcome, RunContext, payload_problem};
use crate::metrics::METRICS;
use crate::schedule::{Job, Overlap};
use crate::store::{
    Ack, ClaimLeases, ClaimedRun, CorruptRun, FailOutcome, FailReason, Failure, JobSlot,
    MIN_AHEAD_LEASE, ReadyWaiter, RedisClock, Store, StoreError,
};

/// How the workers behave.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// This replica's id; each run's worker id is `<replica id>/<slot>`.
    pub replica_id: String,
    /// The queues this replica serves.
    pub queues: Vec<String>,
    /// How many runs execute at once.
    pub concurrency: usize,
    /// A running run's lease, extended every third of it; a run whose replica died is reaped
    /// about this long after its last extension.
    pub lease: Duration,
    /// A run claimed ahead holds this lease past its due time until its worker starts it
    /// (see [`crate::store::ahead_lease`]).
    pub ahead_lease: Duration,
    /// How often the runs Redis says this replica holds are compared with those it runs.
    pub reconcile_period: Duration,
    /// How long this replica's declarations stay in Redis without a heartbeat, when the workers
    /// publish them (they claim only runs of the jobs declared there).
    pub declarations_ttl: Duration,
    /// How long an idle worker blocks for a wake-up before claiming again anyway.
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
            concurrency: 4,
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

/// The most successes one ack call records.
const MAX_ACK_BATCH: usize = 256;

/// How long successes may wait while ready runs are still waiting for a slot: starting runs
/// comes first, and the successes go in bigger batches after. Bounds how many finished runs a
/// crash of this replica would run again (at-least-once).
const ACK_DEFER: Duration = Duration::from_millis(100);

/// The most successes kept waiting that way.
const MAX_DEFERRED_ACKS: usize = 4_096;

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
    /// Whether the last claim filled every free slot, so more runs may be waiting.
    backlog: watch::Sender<bool>,
    /// Executions in progress; each returns its slot.
    running: JoinSet<usize>,
    /// Cancelled when running runs must stop and be handed back (after the shutdown grace).
    interrupt: Shutdown,
    /// How many runs execute now, for the heartbeat.
    busy: Arc<AtomicUsize>,
    /// The best recent reading of Redis's clock, for the start of runs claimed ahead.
    redis_clock: Option<RedisClock>,
    /// When Redis's clock was last read.
    last_clock_reading: Option<tokio::time::Instant>,
    /// The runs this replica's workers hold, and the successes they recorded lately.
    held: HeldRuns,
    /// When the runs Redis says this replica holds are next compared with those it holds.
    next_reconcile: tokio::time::Instant,
}

impl Workers {
    /// Workers for this replica's queues. Must be called within a Tokio runtime: it starts the
    /// task that records successes.
    pub fn new(
        store: Store,
        config: WorkerConfig,
        mut jobs: watch::Receiver<Jobs>,
        handlers: Handlers,
    ) -> Self {
        let slots = config.concurrency.max(1);
        METRICS
            .workers_max
            .set(i64::try_from(slots).unwrap_or(i64::MAX));
        let worker_ids = (0..slots)
            .map(|slot| format!("{}/{slot}", config.replica_id))
            .collect();
        let declared = by_name(&jobs.borrow_and_update());
        // A slot is free again once its success is handed over; the channel's bound keeps
        // unrecorded successes to one per slot, should Redis fall behind.
        let (acks, pending) = mpsc::channel(slots);
        let (backlog, has_backlog) = watch::channel(false);
        let held = HeldRuns::default();
        let acker = tokio::spawn(record_successes(
            store.clone(),
            pending,
            has_backlog,
            held.clone(),
        ));
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
            backlog,
            running: JoinSet::new(),
            interrupt: Shutdown::new(),
            busy: Arc::default(),
            redis_clock: None,
            last_clock_reading: None,
            held,
            next_reconcile: tokio::time::Instant::now(),
        }
    }

    /// How many runs are executing (from claim to recorded outcome), for the heartbeat.
    pub fn busy(&self) -> Arc<AtomicUsize> {
        self.busy.clone()
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
        if self.free.is_empty() {
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
            .take(MAX_CLAIM_BATCH)
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
                        self.held.hold(&run.id);
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
        self.backlog
            .send_replace(started == slots_asked && !claimed.drained);
        Ok(if started > 0 {
            WorkerTick::Started(started)
        } else if claimed.drained {
            WorkerTick::Empty
        } else {
            WorkerTick::More
        })
    }

    /// Compares the runs Redis says this replica holds with those it holds, once per
    /// [`WorkerConfig::reconcile_period`]. Called between claims only, so every run claimed is
    /// held by then.
    async fn reconcile_when_due(&mut self) -> Result<(), StoreError> {
        let now = tokio::time::Instant::now();
        if now < self.next_reconcile {
            return Ok(());
        }
        self.next_reconcile = now + self.config.reconcile_period;
        reconcile(&self.store, &self.config.replica_id, &self.held).await?;
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
        let handler = self.handlers.for_job(&run.job);
        let execution = Execution {
            store: self.store.clone(),
            lease: self.config.lease,
            interrupt: self.interrupt.clone(),
            acks: self.acks.clone(),
            start_at,
        };
        let held = self.held.clone();
        // Counted from claim to recorded outcome, by the execution itself, so the count never
        // lags behind a tick.
        let busy = self.busy.clone();
        busy.fetch_add(1, Ordering::Relaxed);
        METRICS.workers_busy.inc();
        self.running.spawn(async move {
            let run_id = run.id.clone();
            // A panicking handler must not take the slot with it.
            let finished =
                AssertUnwindSafe(execution.run(run, job, move |context| handler.call(context)))
                    .catch_unwind()
                    .await;
            // A success handed to the acker is held until it is recorded; any other end lets
            // the run go now.
            if !matches!(finished, Ok(Ended::SuccessHandedOver)) {
                held.release(&run_id);
            }
            if finished.is_err() {
                warn!(
                    run = run_id,
                    "the run's handler panicked: it is handed back at the next reconciliation"
                );
            }
            busy.fetch_sub(1, Ordering::Relaxed);
            METRICS.workers_busy.dec();
            slot
        });
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
                    backoff.succeeded();
                    continue;
                }
                Ok(WorkerTick::Full) => Idle::Full,
                Ok(WorkerTick::Empty) => {
                    backoff.succeeded();
                    Idle::Empty
                }
                Err(error) => {
                    warn!(%error, "claiming a run failed");
                    self.reconcile_soon();
                    Idle::Failed(backoff.failed())
                }
            };
            match idle {
                Idle::Full => {
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        Some(done) = self.running.join_next() => self.free.extend(done.ok()),
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
                            .inspect_err(|error| warn!(%error, "cannot wait for ready runs"))
                            .ok();
                    }
                    // Only shutdown may interrupt a wait: a blocking pop dropped half-way stays
                    // blocked in Redis and would swallow the next wake-up. Finished runs are
                    // collected by the next tick.
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        woken = wait(&mut waiter, self.config.idle_wait) => {
                            if let Err(error) = woken {
                                warn!(%error, "waiting for ready runs failed");
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

/// Waits for a wake-up, or sleeps through the idle wait without a waiter.
async fn wait(waiter: &mut Option<ReadyWaiter>, idle_wait: Duration) -> Result<bool, StoreError> {
    match waiter {
        Some(waiter) => waiter.wait().await,
        None => {
            tokio::time::sleep(idle_wait).await;
            Ok(false)
        }
    }
}

/// How an execution ended, for the runs the replica holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Its success was handed to the task that records successes, which lets the run go.
    SuccessHandedOver,
    /// Anything else: its outcome is recorded (or left to the reaper), or it did not start.
    Otherwise,
}

/// Why an execution stopped before its handler finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopped {
    Timeout,
    Lost,
    Interrupted,
}

/// One claimed run's execution: the handler, its lease, its timeout, and the record of how it
/// ended.
struct Execution {
    store: Store,
    lease: Duration,
    interrupt: Shutdown,
    acks: mpsc::Sender<PendingAck>,
    /// When the run may start: later than the claim for a run claimed ahead of its due time.
    start_at: tokio::time::Instant,
}

impl Execution {
    async fn run<F, Fut>(self, run: ClaimedRun, job: Arc<Job>, handler: F) -> Ended
    where
        F: FnOnce(RunContext) -> Fut,
        Fut: Future<Output = Outcome>,
    {
        if let Some(problem) = run.payload.as_deref().and_then(payload_problem) {
            warn!(run = run.id, job = run.job, problem, "bad payload: dead");
            let failure =
                Failure::without_output(FailReason::Permanent, format!("bad payload: {problem}"));
            self.record_failure(&run, &failure).await;
            return Ended::Otherwise;
        }
        if !self.wait_for_start(&run).await {
            return Ended::Otherwise;
        }
        // Cron fires are logged as cron logs them; ad-hoc runs can come by the thousand a
        // second, so theirs are debug lines (their history is in Redis either way).
        let cron = run.fire_ms.is_some();
        if cron {
            info!(
                run = run.id,
                job = job.name,
                attempt = run.attempt,
                worker = run.worker,
                "run started"
            );
        } else {
            debug!(
                run = run.id,
                job = job.name,
                attempt = run.attempt,
                worker = run.worker,
                "run started"
            );
        }
        if let Some(fire_ms) = run.fire_ms {
            let lag_ms = chrono::Utc::now().timestamp_millis() - fire_ms;
            METRICS
                .fire_lag_seconds
                .with_label_values(&[job.name.as_str()])
                .observe(lag_ms.max(0) as f64 / 1000.0);
        }
        let started = Instant::now();
        let stop = Shutdown::new();
        let lost = Shutdown::new();
        // A run claimed ahead holds a short lease until it starts: extended at once now.
        // Aborted when the execution ends, even by a panic.
        let keeper = AbortOnDropHandle::new(tokio::spawn(keep_lease(
            self.store.clone(),
            run.id.clone(),
            run.worker.clone(),
            self.lease,
            !run.start_in.is_zero(),
            lost.clone(),
        )));
        let context = RunContext {
            run_id: run.id.clone(),
            job: job.clone(),
            attempt: run.attempt,
            fire_time: run.fire_ms.and_then(DateTime::from_timestamp_millis),
            payload: run.payload.clone(),
            stop: stop.clone(),
        };
        let execution = handler(context);
        tokio::pin!(execution);
        let stopped = tokio::select! {
            outcome = &mut execution => Ok(outcome),
            () = tokio::time::sleep(job.timeout) => Err(Stopped::Timeout),
            () = lost.cancelled() => Err(Stopped::Lost),
            () = self.interrupt.cancelled() => Err(Stopped::Interrupted),
        };
        let (outcome, stopped) = match stopped {
            Ok(outcome) => (outcome, None),
            Err(reason) => {
                stop.cancel();
                (execution.await, Some(reason))
            }
        };
        drop(keeper);
        let duration_ms = started.elapsed().as_millis();
        METRICS
            .run_duration_seconds
            .with_label_values(&[job.name.as_str()])
            .observe(started.elapsed().as_secs_f64());

        let failure = match (stopped, outcome) {
            (Some(Stopped::Lost), _) => {
                warn!(
                    run = run.id,
                    "lease lost mid-run (reaped): stopped, the reaper decides"
                );
                return Ended::Otherwise;
            }
            (None, Ok(completed)) => {
                if cron {
                    info!(run = run.id, job = job.name, duration_ms, exit_code = ?completed.exit_code, "run succeeded");
                } else {
                    debug!(run = run.id, job = job.name, duration_ms, exit_code = ?completed.exit_code, "run succeeded");
                }
                let frees_slot = job.overlap == Overlap::Forbid || job.max_concurrency.is_some();
                return self
                    .record_success(run, completed.exit_code, completed.output, frees_slot)
                    .await;
            }
            (None, Err(error)) => Failure {
                reason: if error.retryable {
                    FailReason::Failed
                } else {
                    FailReason::Permanent
                },
                message: error.message,
                exit_code: error.exit_code,
                output: error.output,
            },
            (Some(reason), outcome) => {
                let (exit_code, output) = match outcome {
                    Ok(completed) => (completed.exit_code, completed.output),
                    Err(error) => (error.exit_code, error.output),
                };
                let (reason, message) = if reason == Stopped::Timeout {
                    (
                        FailReason::Timeout,
                        format!(
                            "timed out after {}",
                            humantime::format_duration(job.timeout)
                        ),
                    )
                } else {
                    (
                        FailReason::Interrupted,
                        "interrupted by shutdown".to_owned(),
                    )
                };
                Failure {
                    reason,
                    message,
                    exit_code,
                    output,
                }
            }
        };
        info!(run = run.id, job = job.name, duration_ms, reason = ?failure.reason, error = failure.message, "run failed");
        self.record_failure(&run, &failure).await;
        Ended::Otherwise
    }

    /// Waits until a run claimed ahead is due, and takes a slot of its job when it has to;
    /// `false` when the run must not start (skipped as an overlap, waiting for a slot, reaped,
    /// or handed back at shutdown).
    async fn wait_for_start(&self, run: &ClaimedRun) -> bool {
        // Only a run claimed ahead waits: tokio rounds a timer up to its next millisecond, so
        // even a zero sleep would cost each run up to a millisecond.
        if !run.start_in.is_zero() {
            tokio::select! {
                () = tokio::time::sleep_until(self.start_at) => {}
                () = self.interrupt.cancelled() => {
                    let failure = Failure::without_output(
                        FailReason::NotStarted,
                        "handed back by shutdown before it started".to_owned(),
                    );
                    self.record_failure(run, &failure).await;
                    return false;
                }
            }
        }
        let Some(pending) = run.pending_slot else {
            return true;
        };
        match retry_store(|| self.store.take_job_slot(run, pending, self.lease)).await {
            Some(JobSlot::Taken) => true,
            Some(JobSlot::Busy) => {
                info!(
                    run = run.id,
                    job = run.job,
                    "skipped: the job's previous run is still running (overlap forbidden)"
                );
                false
            }
            Some(JobSlot::Waiting) => {
                debug!(
                    run = run.id,
                    job = run.job,
                    "waiting: every slot of the job is taken; it starts when one is free"
                );
                false
            }
            Some(JobSlot::Gone) => {
                warn!(run = run.id, "lease lost before the run started");
                false
            }
            None => {
                warn!(
                    run = run.id,
                    "cannot take a slot of the job: the lease will expire and the reaper decides"
                );
                false
            }
        }
    }

    /// Hands the success to the task that records successes in batches.
    async fn record_success(
        &self,
        run: ClaimedRun,
        exit_code: Option<i32>,
        output: String,
        frees_slot: bool,
    ) -> Ended {
        let pending = PendingAck {
            ack: Ack {
                run_id: run.id,
                worker: run.worker,
                attempt: run.attempt,
                exit_code,
                output,
            },
            job: run.job,
            frees_slot,
        };
        match self.acks.send(pending).await {
            Ok(()) => Ended::SuccessHandedOver,
            Err(unsent) => {
                warn!(
                    run = unsent.0.ack.run_id,
                    "cannot record the success: the lease will expire and the run may run again"
                );
                Ended::Otherwise
            }
        }
    }

    async fn record_failure(&self, run: &ClaimedRun, failure: &Failure) {
        let (run_id, job) = (run.id.as_str(), run.job.as_str());
        let jitter = rand::random::<f64>();
        let recorded = retry_store(|| {
            self.store
                .fail_run(run_id, Some(&run.worker), failure, jitter)
        })
        .await;
        match recorded {
            Some(outcome) => {
                info!(run = run_id, ?outcome, "failure recorded");
                let outcome = match outcome {
                    FailOutcome::Retrying { .. } => {
                        METRICS.retries_total.with_label_values(&[job]).inc();
                        "retrying"
                    }
                    FailOutcome::Dead => "dead",
                    FailOutcome::Gone => "lost",
                };
                METRICS.runs_total.with_label_values(&[job, outcome]).inc();
            }
            None => warn!(
                run = run_id,
                "cannot record the failure: the lease will expire and the reaper will"
            ),
        }
    }
}

/// How long the outcome of a run is retried while Redis fails: a Redis blip while recording
/// an outcome must not make a run run again, and a replica that stops while Redis is gone must
/// still exit. Well within the default run lease (30 s).
pub const RECORD_WINDOW: Duration = Duration::from_secs(10);

/// Retries a store call with backoff for [`RECORD_WINDOW`] at most, the call under way
/// included; `None` when the window passed without an answer.
async fn retry_store<T, F, Fut>(mut call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let deadline = tokio::time::Instant::now() + RECORD_WINDOW;
    let mut backoff = Backoff::default();
    loop {
        // A call abandoned at the deadline may still be carried out by Redis, as one that
        // timed out may: each is one atomic script, and the run's lease settles the rest.
        match tokio::time::timeout_at(deadline, call()).await {
            Ok(Ok(value)) => return Some(value),
            Ok(Err(error)) => warn!(%error, "store call failed; retrying"),
            Err(_) => return None,
        }
        let pause = backoff.failed();
        if tokio::time::Instant::now() + pause >= deadline {
            return None;
        }
        tokio::time::sleep(pause).await;
    }
}

/// Extends the run's lease every third of it, and at once when `now` (a run claimed ahead,
/// whose lease was short until it started); cancels `lost` when the run is no longer this
/// worker's. A failed extension is retried at the next period: if Redis stays away past the
/// lease, the reaper hands the run to someone else (at-least-once).
async fn keep_lease(
    store: Store,
    run_id: String,
    worker: String,
    lease: Duration,
    now: bool,
    lost: Shutdown,
) {
    let mut first = now;
    loop {
        if !std::mem::take(&mut first) {
            tokio::time::sleep(lease / 3).await;
        }
        match store.extend_lease(&run_id, &worker, lease).await {
            Ok(true) => {}
            Ok(false) => {
                lost.cancel();
                return;
            }
            Err(error) => warn!(%error, run = run_id, "cannot extend the lease"),
        }
    }
}

/// The declared jobs by name, sharing the definitions the replica holds.
fn by_name(jobs: &Jobs) -> HashMap<String, Arc<Job>> {
    jobs.iter()
        .map(|job| (job.name.clone(), job.clone()))
        .collect()
}

/// A success waiting to be recorded.
struct PendingAck {
    ack: Ack,
    /// Its job, for the metrics.
    job: String,
    /// Its job has a limit (overlap forbidden, max_concurrency): recording the success frees a
    /// slot that a run may be waiting for, so it is never deferred.
    frees_slot: bool,
}

/// Records successes in batches: whatever arrived while the previous call was in flight goes
/// in the next one, so a busy replica makes one call for many runs and an idle one adds no
/// delay. While the workers have a backlog of ready runs, successes wait (see [`ACK_DEFER`]) so
/// that Redis starts runs first. Ends when every sender is gone and everything sent is recorded.
async fn record_successes(
    store: Store,
    mut pending: mpsc::Receiver<PendingAck>,
    mut backlog: watch::Receiver<bool>,
    held: HeldRuns,
) {
    let mut batch = Vec::new();
    while pending.recv_many(&mut batch, MAX_DEFERRED_ACKS).await > 0 {
        let deferred_until = tokio::time::Instant::now() + ACK_DEFER;
        while *backlog.borrow_and_update()
            && batch.len() < MAX_DEFERRED_ACKS
            && !batch.iter().any(|pending| pending.frees_slot)
        {
            let room = MAX_DEFERRED_ACKS - batch.len();
            tokio::select! {
                () = tokio::time::sleep_until(deferred_until) => break,
                changed = backlog.changed() => if changed.is_err() { break },
                received = pending.recv_many(&mut batch, room) => if received == 0 { break },
            }
        }
        // In parallel, so a large deferred batch costs one round trip.
        futures_util::future::join_all(
            batch
                .chunks(MAX_ACK_BATCH)
                .map(|chunk| record_batch(&store, chunk, &held)),
        )
        .await;
        batch.clear();
    }
}

/// Records one batch of successes. Each is remembered whether or not it could be recorded: a
/// run whose success Redis does not have (lost with an older copy, or never recorded) then gets
/// it again from this replica's reconciliation instead of running again, while the replica
/// lives and its lease holds.
async fn record_batch(store: &Store, batch: &[PendingAck], held: &HeldRuns) {
    let acks: Vec<&Ack> = batch.iter().map(|pending| &pending.ack).collect();
    let recorded = retry_store(|| store.ack_runs(&acks)).await;
    for ack in &acks {
        held.succeeded(ack);
    }
    let Some(recorded) = recorded else {
        warn!(
            runs = acks.len(),
            "cannot record successes: their leases will expire and they may run again"
        );
        return;
    };
    for (pending, recorded) in batch.iter().zip(recorded) {
        if recorded {
            METRICS
                .runs_total
                .with_label_values(&[pending.job.as_str(), "succeeded"])
                .inc();
        } else {
            warn!(
                run = pending.ack.run_id,
                "lease lost before the success was recorded: the run may run again"
            );
        }
    }
}
