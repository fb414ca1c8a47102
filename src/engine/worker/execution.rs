//! One claimed run's execution: waiting for its due time when claimed ahead, taking its job's
//! slot, running its handler under its lease and timeout, and recording how it ended.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::DateTime;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, debug, info, warn};

use super::acker::PendingAck;
use super::starter::Starter;
use crate::engine::retry::retry_store;
use crate::engine::{Shutdown, record_skips, skip_reason_at_start};
use crate::handler::{LiveOutput, Outcome, RunContext, RunError};
use crate::payload::payload_problem;
use crate::schedule::{Job, Overlap};
use crate::store::{
    Ack, ClaimedRun, FailOutcome, FailReason, Failure, JobSlot, PendingSlot, RunState, SkipReason,
    Store,
};

/// How an execution ended, for the runs the replica owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ended {
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
pub(super) struct Execution {
    pub(super) store: Store,
    pub(super) lease: Duration,
    pub(super) interrupt: Shutdown,
    pub(super) acks: mpsc::Sender<PendingAck>,
    /// Where a run claimed ahead is started, in one call with the others due meanwhile.
    pub(super) starter: Starter,
    /// When the run may start: later than the claim for a run claimed ahead of its due time.
    pub(super) start_at: tokio::time::Instant,
    /// How long the handler has to return once told to stop ([`crate::handler::Handler::stop_grace`]).
    pub(super) stop_grace: Duration,
}

impl Execution {
    pub(super) async fn run<F, Fut>(self, run: ClaimedRun, job: Arc<Job>, handler: F) -> Ended
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
        // A cron job's runs, its fires and the runs someone triggered, are logged as cron logs
        // them; an on-demand job's can come by the thousand a second, so theirs are debug lines
        // (their history is in Redis either way).
        let cron = run.fire_ms.is_some() || job.schedule.is_some();
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
        if let Some(fire_ms) = run.fire_ms.filter(|_| run.first_claim) {
            let lag_ms = chrono::Utc::now().timestamp_millis() - fire_ms;
            self.store
                .metrics()
                .observe_fire_lag(&job.name, lag_ms.max(0) as f64 / 1000.0);
        }
        let started = Instant::now();
        let stop = Shutdown::new();
        let lost = Shutdown::new();
        // Aborted when the execution ends, even by a panic.
        let keeper = AbortOnDropHandle::new(tokio::spawn(
            keep_lease(self.store.clone(), run.clone(), self.lease, lost.clone()).in_current_span(),
        ));
        let output = LiveOutput::default();
        // Its first write comes a second after the start at the earliest: a short run's
        // execution costs Redis no command more.
        let publisher = AbortOnDropHandle::new(tokio::spawn(
            super::live::publish_output(
                self.store.clone(),
                run.id.clone(),
                run.attempt,
                output.clone(),
                self.lease,
            )
            .in_current_span(),
        ));
        let context = RunContext {
            run_id: run.id.clone(),
            job: job.clone(),
            attempt: run.attempt,
            fire_time: run
                .fire_ms
                .or(run.created_ms)
                .and_then(DateTime::from_timestamp_millis),
            payload: run.payload.clone(),
            stop: stop.clone(),
            output,
        };
        let execution = handler(context);
        tokio::pin!(execution);
        let stopped = tokio::select! {
            outcome = &mut execution => Ok(outcome),
            () = tokio::time::sleep(job.timeout) => Err(Stopped::Timeout),
            () = lost.cancelled() => Err(Stopped::Lost),
            () = self.interrupt.cancelled() => Err(Stopped::Interrupted),
        };
        // A handler that outlives its stop grace is dropped: the outcome says so.
        let (outcome, stopped, dropped) = match stopped {
            Ok(outcome) => (outcome, None, false),
            Err(reason) => {
                stop.cancel();
                match tokio::time::timeout(self.stop_grace, &mut execution).await {
                    Ok(outcome) => (outcome, Some(reason), false),
                    Err(_) => {
                        warn!(
                            run = run.id,
                            job = job.name,
                            grace = %humantime::format_duration(self.stop_grace),
                            "the handler did not return once told to stop: dropped"
                        );
                        (Err(RunError::retryable("")), Some(reason), true)
                    }
                }
            }
        };
        drop(keeper);
        drop(publisher);
        let duration_ms = started.elapsed().as_millis();
        self.store
            .metrics()
            .observe_duration(&job.name, started.elapsed().as_secs_f64());

        let failure = match (stopped, outcome) {
            (Some(Stopped::Lost), _) => {
                warn!(
                    run = run.id,
                    "lease lost mid-run (reaped, or Redis lost the run): stopped, the reaper \
                     decides"
                );
                return Ended::Otherwise;
            }
            (None, Ok(completed)) => {
                if cron {
                    info!(
                        run = run.id,
                        job = job.name,
                        duration_ms,
                        exit_code = completed.exit_code,
                        "run succeeded"
                    );
                } else {
                    debug!(
                        run = run.id,
                        job = job.name,
                        duration_ms,
                        exit_code = completed.exit_code,
                        "run succeeded"
                    );
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
                let (reason, mut message) = if reason == Stopped::Timeout {
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
                if dropped {
                    message.push_str(&format!(
                        "; the handler did not return within {} of being told to stop: dropped",
                        humantime::format_duration(self.stop_grace)
                    ));
                }
                Failure {
                    reason,
                    message,
                    exit_code,
                    output,
                }
            }
        };
        warn!(
            run = run.id,
            job = job.name,
            attempt = run.attempt,
            duration_ms,
            reason = failure.reason.as_str(),
            exit_code = failure.exit_code,
            error = failure.message,
            output = output_tail(&failure.output),
            "run failed"
        );
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
        let ready = match run.pending_slot {
            None => run.start_in.is_zero() || self.take_full_lease(run).await,
            Some(pending) => self.take_job_slot(run, pending).await,
        };
        // Taking the lease or the slot may have waited out a hold past the shutdown grace.
        if ready && self.interrupt.is_cancelled() {
            let failure = Failure::without_output(
                FailReason::NotStarted,
                "handed back by shutdown before it started".to_owned(),
            );
            self.record_failure(run, &failure).await;
            return false;
        }
        ready
    }

    /// Counts and logs a run skipped as it would start, as claims and promotions log theirs: one
    /// line per job and reason. A run of a job this replica declares: its name is a bounded
    /// label.
    fn record_skip(&self, run: &ClaimedRun, reason: SkipReason) {
        let every = crate::store::keys::replica_of_run(&run.job, &run.id).is_some();
        record_skips(
            self.store.metrics(),
            &[(
                run.job.clone(),
                skip_reason_at_start(every, reason.as_str()).to_owned(),
            )],
            |_| true,
        );
    }

    /// Takes the slot of its job that a run claimed ahead without one needs; `false` when the
    /// run must not start (skipped as an overlap, waiting for a slot, reaped).
    async fn take_job_slot(&self, run: &ClaimedRun, pending: PendingSlot) -> bool {
        match retry_store(&self.store.metrics().health, || {
            self.store.take_job_slot(run, pending, self.lease)
        })
        .await
        {
            Some(JobSlot::Taken) => true,
            Some(JobSlot::Busy) => {
                self.record_skip(run, SkipReason::Overlap);
                false
            }
            Some(JobSlot::Missed) => {
                self.record_skip(run, SkipReason::Missed);
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

    /// Extends the short lease of a run claimed ahead to the full one before it starts, through
    /// the starter (one call with the other runs whose due time came meanwhile); `false`
    /// when the run must not start: the lease is no longer this worker's, or Redis did not
    /// answer within the recording window. Starting on the short lease alone would let a Redis
    /// outage of a second at the due time (a failover, a stall) expire it while the command
    /// runs, and the reaper hand the run to another replica: the run would run twice. Not
    /// starting makes it late instead: the reaper hands it on once the lease expires.
    async fn take_full_lease(&self, run: &ClaimedRun) -> bool {
        match self.starter.start(run).await {
            Some(true) => true,
            Some(false) => {
                warn!(run = run.id, "lease lost before the run started");
                false
            }
            None => {
                warn!(
                    run = run.id,
                    "cannot extend the lease to start the run: the lease will expire and the \
                     reaper hands the run on"
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
        let recorded = retry_store(&self.store.metrics().health, || {
            self.store
                .fail_run(run_id, Some(&run.worker), failure, jitter)
        })
        .await;
        match recorded {
            Some(outcome) => {
                match outcome {
                    FailOutcome::Retrying { due_ms } => {
                        info!(run = run_id, due_ms, "failure recorded: due again");
                    }
                    FailOutcome::Dead => info!(run = run_id, "failure recorded: dead"),
                    FailOutcome::Gone => info!(run = run_id, "failure not recorded: run gone"),
                }
                let outcome = match outcome {
                    FailOutcome::Retrying { .. } => {
                        self.store.metrics().record_retry(job);
                        RunState::Retrying.as_str()
                    }
                    FailOutcome::Dead => RunState::Dead.as_str(),
                    FailOutcome::Gone => FailReason::Lost.as_str(),
                };
                self.store.metrics().record_run(job, outcome);
            }
            None => warn!(
                run = run_id,
                "cannot record the failure: the lease will expire and the reaper will"
            ),
        }
    }
}

/// Extends the run's lease every third of it (a run claimed ahead took its full lease before it
/// started); cancels `lost` when the run is no longer this worker's. A failed extension is
/// retried at the next period: if Redis stays away past the lease, the reaper hands the run to
/// someone else (at-least-once).
async fn keep_lease(store: Store, run: ClaimedRun, lease: Duration, lost: Shutdown) {
    loop {
        tokio::time::sleep(lease / 3).await;
        match store
            .extend_lease(&run.id, &run.job, &run.worker, lease)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                lost.cancel();
                return;
            }
            Err(error) => warn!(%error, run = run.id, "cannot extend the lease"),
        }
    }
}

/// The last lines of a run's output, for the log line of its failure: up to 5 lines and 500
/// bytes, cut at a character boundary.
fn output_tail(output: &str) -> &str {
    const LINES: usize = 5;
    const BYTES: usize = 500;
    let trimmed = output.trim_end();
    let from_lines = trimmed
        .rmatch_indices('\n')
        .nth(LINES - 1)
        .map_or(0, |(index, _)| index + 1);
    let mut from = from_lines.max(trimmed.len().saturating_sub(BYTES));
    while !trimmed.is_char_boundary(from) {
        from += 1;
    }
    &trimmed[from..]
}

#[cfg(test)]
mod tests {
    use super::output_tail;

    #[test]
    fn a_failure_logs_the_last_lines_of_its_output() {
        assert_eq!(output_tail(""), "");
        assert_eq!(output_tail("one\ntwo\n"), "one\ntwo");
        let many: String = (1..=8).map(|line| format!("line {line}\n")).collect();
        assert_eq!(output_tail(&many), "line 4\nline 5\nline 6\nline 7\nline 8");
        let long = "é".repeat(400);
        let tail = output_tail(&long);
        assert!(
            tail.len() <= 500 && tail.chars().all(|c| c == 'é'),
            "{}",
            tail.len()
        );
    }
}
