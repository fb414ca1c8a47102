//! What this replica really runs, against what Redis says it runs: each replica knows the runs
//! its workers own (from claim until their outcome is recorded) and the successes it recorded
//! lately, and ends as lost at once any run that Redis says it owns but it does not. Redis
//! restored from an older copy, a failover to a replica that lagged, or a lost reply would
//! otherwise leave such runs active, holding their leases and their jobs' slots, until the
//! lease expires.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::{error, warn};

use crate::process::{KILL_WAIT, end_unsupervised};
use crate::store::{Ack, FailOutcome, FailReason, Failure, Store, StoreError};

/// How long a recorded success is remembered: a Redis restored from a copy older than this
/// runs the run again.
const REMEMBERED_FOR: Duration = Duration::from_secs(120);

/// The most successes remembered at once (without their output, a few dozen bytes each).
const MAX_REMEMBERED: usize = 10_000;

/// The runs this replica's workers own, shared by the workers, their executions and the task
/// that records successes.
#[derive(Debug, Clone, Default)]
pub(crate) struct OwnedRuns(Arc<Mutex<Inner>>);

#[derive(Debug, Default)]
struct Inner {
    /// Run ids claimed and not yet recorded as ended.
    owned: HashSet<String>,
    /// Successes recorded lately (or that could not be recorded), oldest first, without output.
    recent: VecDeque<(Instant, Ack)>,
    /// How many entries of `recent` each run id has.
    recent_count: HashMap<String, usize>,
}

impl OwnedRuns {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        // The lock is only held for set operations that cannot panic half-way.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A run was claimed by one of this replica's workers.
    pub(crate) fn claimed(&self, run_id: &str) {
        self.inner().owned.insert(run_id.to_owned());
    }

    /// A run's outcome other than a success was recorded, or it will not start (skipped,
    /// waiting for a slot, reaped): it is no longer this replica's.
    pub(crate) fn disowned(&self, run_id: &str) {
        self.inner().owned.remove(run_id);
    }

    /// A run succeeded and its success was recorded, or could not be: remembered, so that a
    /// Redis that comes back without the record gets the success again rather than a re-run.
    pub(crate) fn succeeded(&self, ack: &Ack) {
        let now = Instant::now();
        let mut inner = self.inner();
        inner.owned.remove(&ack.run_id);
        while inner.recent.len() >= MAX_REMEMBERED
            || inner
                .recent
                .front()
                .is_some_and(|(at, _)| now.duration_since(*at) > REMEMBERED_FOR)
        {
            let Some((_, old)) = inner.recent.pop_front() else {
                break;
            };
            if let Some(count) = inner.recent_count.get_mut(&old.run_id) {
                *count -= 1;
                if *count == 0 {
                    inner.recent_count.remove(&old.run_id);
                }
            }
        }
        *inner.recent_count.entry(ack.run_id.clone()).or_default() += 1;
        let remembered = Ack {
            output: String::new(),
            ..ack.clone()
        };
        inner.recent.push_back((now, remembered));
    }

    /// Whether a worker of this replica owns `run_id`.
    fn owns(&self, run_id: &str) -> bool {
        self.inner().owned.contains(run_id)
    }

    /// The success this replica remembers of `run_id`'s `attempt` by `worker`, if any.
    fn remembered(&self, run_id: &str, worker: &str, attempt: Option<u32>) -> Option<Ack> {
        let inner = self.inner();
        if !inner.recent_count.contains_key(run_id) {
            return None;
        }
        inner
            .recent
            .iter()
            .rev()
            .map(|(_, ack)| ack)
            .find(|ack| {
                ack.run_id == run_id && ack.worker == worker && Some(ack.attempt) == attempt
            })
            .cloned()
    }
}

/// What one reconciliation did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reconciled {
    /// Runs this replica did not own, ended as lost.
    pub lost: usize,
    /// Runs this replica had finished, whose success Redis had lost: recorded again.
    pub recorded_again: usize,
}

/// Compares the runs Redis says `replica_id`'s workers own with those they do own; ends the
/// others as lost, as the reaper would once their leases expire (an at-least-once run is due
/// again at once without using an attempt, an at-most-once one dead; their jobs' slots freed),
/// or records their success again when this replica remembers finishing them.
///
/// Must not run while a claim of this replica is under way: its runs are owned only once its
/// reply has arrived.
///
/// # Errors
/// Redis errors.
pub(crate) async fn reconcile(
    store: &Store,
    replica_id: &str,
    owned: &OwnedRuns,
) -> Result<Reconciled, StoreError> {
    let mut reconciled = Reconciled::default();
    for run in store.owned_runs(replica_id).await? {
        if owned.owns(&run.run_id) {
            continue;
        }
        if let Some(ack) = owned.remembered(&run.run_id, &run.worker, run.attempt) {
            if store.ack_runs(&[&ack]).await?.first() == Some(&true) {
                warn!(
                    run = run.run_id,
                    worker = run.worker,
                    "Redis had lost this run's success: recorded again"
                );
                reconciled.recorded_again += 1;
            }
            continue;
        }
        end_left_processes(&run.run_id).await;
        let failure = Failure::without_output(
            FailReason::Lost,
            "Redis said this replica runs it, but it does not (the replica restarted, Redis was \
             restored or failed over, a reply was lost)",
        );
        let outcome = store
            .fail_run(&run.run_id, Some(&run.worker), &failure, 0.0)
            .await?;
        let became = match outcome {
            FailOutcome::Retrying { .. } => "due again",
            FailOutcome::Dead => "dead",
            // Ended meanwhile (a success recorded, a lease reaped): nothing to hand back.
            FailOutcome::Gone => continue,
        };
        warn!(
            run = run.run_id,
            worker = run.worker,
            became,
            "a run Redis said this replica runs is not running here: lost"
        );
        store.metrics().orphaned_runs_total.inc();
        reconciled.lost += 1;
    }
    Ok(reconciled)
}

/// Kills what is left on this machine of a run Redis says this replica runs while it does not,
/// before the run is handed back: a previous process of this replica killed together with the
/// run's supervisor (`kill -9` of both, `pkill -9 -f 'redcron run'`) leaves the run's processes
/// going on under PID 1, and the run's next attempt would overlap them. A restarted replica
/// reconciles before its first claim, within seconds, while the run's lease still keeps every
/// other replica from starting it again.
async fn end_left_processes(run_id: &str) {
    let id = run_id.to_owned();
    let swept = tokio::task::spawn_blocking(move || end_unsupervised(&id)).await;
    match swept {
        Ok((Some(killed), left)) if killed > 0 => {
            warn!(
                run = run_id,
                killed, "processes of the run outlived its replica and its supervisor: killed"
            );
            if left > 0 {
                error!(
                    run = run_id,
                    left,
                    after = %humantime::format_duration(KILL_WAIT),
                    "processes of the run still live after SIGKILL"
                );
            }
        }
        Ok(_) => {}
        Err(error) => error!(
            run = run_id,
            %error,
            "looking for processes the run left behind failed"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(run_id: &str, attempt: u32) -> Ack {
        Ack {
            run_id: run_id.to_owned(),
            worker: "r1/0".to_owned(),
            attempt,
            exit_code: Some(0),
            output: "a long output".to_owned(),
        }
    }

    #[test]
    fn a_success_is_remembered_for_its_worker_and_attempt_only() {
        let owned = OwnedRuns::default();
        owned.claimed("a");
        assert!(owned.owns("a"));
        owned.succeeded(&ack("a", 2));
        assert!(!owned.owns("a"), "a recorded success is no longer owned");
        let remembered = owned.remembered("a", "r1/0", Some(2)).expect("remembered");
        assert_eq!(remembered.output, "", "output is not kept");
        assert_eq!(owned.remembered("a", "r1/0", Some(1)), None);
        assert_eq!(owned.remembered("a", "r1/1", Some(2)), None);
        assert_eq!(owned.remembered("b", "r1/0", Some(2)), None);
    }

    #[test]
    fn remembered_successes_are_bounded() {
        let owned = OwnedRuns::default();
        for index in 0..MAX_REMEMBERED + 10 {
            owned.succeeded(&ack(&format!("run-{index}"), 1));
        }
        let inner = owned.inner();
        assert_eq!(inner.recent.len(), MAX_REMEMBERED);
        assert_eq!(inner.recent_count.len(), MAX_REMEMBERED);
        assert!(!inner.recent_count.contains_key("run-0"));
    }
}
