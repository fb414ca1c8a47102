//! A run's outcome recorded (`ack_runs.lua`, `fail_run.lua`), and the runs whose outcome is
//! overdue: those a replica's workers own, those whose lease expired, and those left in no list.

use super::During;
use super::connection::Connection;
use super::reply::reply_error;
use super::{ClaimedRun, Entry, FailReason, RecordPage, Store, StoreError, millis, scripts};

/// An active run that Redis says a worker of a replica owns, see [`Store::owned_runs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedRun {
    /// The run id.
    pub run_id: String,
    /// The worker that holds its lease, `<replica id>/<slot>`.
    pub worker: String,
    /// The attempt it runs; `None` when the hash does not say (damaged).
    pub attempt: Option<u32>,
}

/// A run found in none of the lists its state says it is in, and put back
/// ([`Store::requeue_stray_runs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrayRun {
    /// The run id.
    pub run_id: String,
    /// Its state, which says where it was put back: `ready` (its ready list), `waiting` (its
    /// job's waiting runs), `scheduled` or `retrying` (the due set), `active` (the active set);
    /// or `dead`: a ready run whose record routes it to no list a claim reads, buried as
    /// corrupt.
    pub state: String,
    /// Its job.
    pub job: String,
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

impl Store {
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
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(millis(self.settings.retention))
            .arg(self.history_arg())
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
            .await
            .during(&self.metrics, "ack_runs")?;
        if recorded.len() != acks.len() {
            return Err(reply_error(
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
        self.fail_run_on(
            &mut self.connection.clone(),
            run_id,
            worker,
            failure,
            jitter,
        )
        .await
    }

    /// [`Store::fail_run`] on `connection`.
    pub(super) async fn fail_run_on(
        &self,
        connection: &mut Connection,
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
            .key(self.keys.hold())
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
            .arg(self.history_arg())
            .arg(self.now_arg())
            .invoke_async(connection)
            .await
            .during(&self.metrics, "fail_run")?;
        match status.as_str() {
            "RETRYING" => Ok(FailOutcome::Retrying { due_ms: at }),
            "DEAD" => Ok(FailOutcome::Dead),
            "GONE" => Ok(FailOutcome::Gone),
            other => Err(reply_error("fail_run", format!("status {other:?}"))),
        }
    }

    /// The active runs Redis says the workers of `replica_id` own (`<replica id>/<slot>`), with
    /// the worker and attempt of each: what the replica compares with the runs it really runs.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for an answer the script does not give.
    pub async fn owned_runs(&self, replica_id: &str) -> Result<Vec<OwnedRun>, StoreError> {
        let values: Vec<Option<String>> = scripts::LIST_OWNED_RUNS
            .key(self.keys.active())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(format!("{replica_id}/"))
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "owned_runs")?;
        values
            .chunks(3)
            .map(|owned| match owned {
                [Some(run_id), Some(worker), attempt] => Ok(OwnedRun {
                    run_id: run_id.clone(),
                    worker: worker.clone(),
                    attempt: attempt.as_deref().and_then(|text| text.parse().ok()),
                }),
                _ => Err(reply_error(
                    "list_owned_runs",
                    format!("unexpected {owned:?}"),
                )),
            })
            .collect()
    }

    /// Puts back the runs of `page` that are in none of the lists their state says they are
    /// in: what a script that failed halfway, a restore or a hand edit leaves. Returns the runs
    /// put back.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for an answer the script does not give.
    pub async fn requeue_stray_runs(&self, page: &RecordPage) -> Result<Vec<StrayRun>, StoreError> {
        // An id that is not UTF-8 names no run redcron made: the damaged records' expiry is
        // what becomes of it.
        let run_ids: Vec<&[u8]> = page
            .run_ids()
            .filter(|id| std::str::from_utf8(id).is_ok())
            .collect();
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<String> = scripts::REQUEUE_STRAY_RUNS
            .key(self.keys.active())
            .key(self.keys.due())
            .key(self.keys.events())
            .key(self.keys.hold())
            .key(self.keys.due_runs())
            .arg(self.keys.prefix())
            .arg(self.history_arg())
            .arg(self.now_arg())
            .arg(run_ids)
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "requeue_stray_runs")?;
        values
            .chunks(3)
            .map(|stray| match stray {
                [run_id, state, job] => Ok(StrayRun {
                    run_id: run_id.clone(),
                    state: state.clone(),
                    job: job.clone(),
                }),
                _ => Err(reply_error(
                    "requeue_stray_runs",
                    format!("unexpected {stray:?}"),
                )),
            })
            .collect()
    }

    /// Up to `limit` runs whose lease deadline has passed on Redis's clock: their workers died.
    /// None while the namespace is held or lately was (see [`REAPING_GRACE`]): the hold, not
    /// the workers, kept those leases from being extended and those outcomes from being
    /// recorded.
    ///
    /// [`REAPING_GRACE`]: super::REAPING_GRACE
    ///
    /// # Errors
    /// Redis errors.
    pub async fn expired_leases(&self, limit: usize) -> Result<Vec<String>, StoreError> {
        let now = self.now_ms().await?;
        let (reaping_paused, expired): (bool, Vec<Entry>) = redis::pipe()
            .exists(self.keys.reaping_paused())
            .zrangebyscore_limit(self.keys.active(), "-inf", now, 0, limit as isize)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "expired_leases")?;
        if reaping_paused {
            return Ok(Vec::new());
        }
        // An entry that is no run id has no lease to end: it must not stop the reaping of the
        // others (`runs list` names it as damaged).
        Ok(expired
            .into_iter()
            .filter_map(|entry| match entry {
                Entry::Run(run_id) => Some(run_id),
                Entry::Unreadable(_) => None,
            })
            .collect())
    }
}
