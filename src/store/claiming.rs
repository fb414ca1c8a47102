//! Ready runs claimed by idle workers (`claim_runs.lua`), their leases and job slots
//! (`extend_lease.lua`, `take_job_slot.lua`), and the wait for runs to become ready.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{AsyncCommands, FromRedisValue, Value};

use super::During;
use super::connection::BlockingConnection;
use super::reply::{Reply, reply_error};
use super::{FailReason, Failure, Store, StoreError, millis, scripts};
use crate::metrics::Metrics;

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
    /// This is a cron fire's first claim: its start, less its fire time, is how late the fire
    /// ran. A retry, a run handed back or re-driven starts late by design, and says nothing of
    /// the fire's lag.
    pub first_claim: bool,
    /// When the run was created, ms: when an ad-hoc run was triggered or enqueued, the moment
    /// it stands for as a cron run stands for its fire time.
    pub created_ms: Option<i64>,
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
/// cannot be executed and should be failed with [`FailReason::Corrupt`](super::FailReason::Corrupt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptRun {
    /// The run id.
    pub run_id: String,
    /// The worker that holds its lease.
    pub worker: String,
    /// What is wrong.
    pub detail: String,
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
    /// The job and reason of each run skipped (paused, duplicate, overlap, missed) or buried (corrupt)
    /// on the way, for the caller to count.
    pub skips: Vec<(String, String)>,
    /// Every ready list of the served queues ran dry: nothing to claim until a wake-up.
    pub drained: bool,
    /// Redis's clock at the end of the call (ms), which the runs' waits count from; `None`
    /// when no run was claimed.
    pub redis_now_ms: Option<i64>,
    /// Redis was older than this store's previous claim saw it (restored from an older copy,
    /// failed over to a replica that lagged, or it lost writes in a crash): the runs that
    /// started before this claim skip no fire as overlaps until they end (see `keys::rewind`).
    pub rewound: bool,
}

impl Claimed {
    /// How many runs were skipped or buried on the way.
    pub fn skipped(&self) -> u64 {
        u64::try_from(self.skips.len()).unwrap_or(u64::MAX)
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
    /// cannot be executed and should be failed with [`FailReason::Corrupt`](super::FailReason::Corrupt).
    Corrupt {
        /// The run id.
        run_id: String,
        /// What is missing or wrong.
        detail: String,
    },
}

/// Whether a run claimed ahead may start, see [`Store::take_job_slot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobSlot {
    /// The slot is the run's: start it.
    Taken,
    /// Its job is still busy: the run was skipped as an overlap.
    Busy,
    /// The run starts later than the misfire threshold and its job's `misfire` policy skips
    /// it: it was skipped as a missed fire.
    Missed,
    /// Every slot is taken: the run waits in its job's queue until one is freed; it used no
    /// attempt.
    Waiting,
    /// The run is no longer this worker's (reaped).
    Gone,
}

/// Blocks until runs become ready in some queues, on a connection of its own (a blocking pop
/// would hold up every command sharing a multiplexed connection).
pub struct ReadyWaiter {
    connection: BlockingConnection,
    metrics: Arc<Metrics>,
    markers: Vec<String>,
    timeout: Duration,
}

impl ReadyWaiter {
    /// Waits until a queue's wake marker is set or `timeout` passes, at most the timeout the
    /// waiter was opened with (its connection answers no later); `true` when woken.
    ///
    /// # Errors
    /// Redis errors: the caller should open a new waiter after a pause.
    pub async fn wait(&mut self, timeout: Duration) -> Result<bool, StoreError> {
        let woken: Option<(String, String, f64)> = self
            .connection
            .bzpopmin(&self.markers, timeout.min(self.timeout).as_secs_f64())
            .await
            .during(&self.metrics, "wait")?;
        Ok(woken.is_some())
    }
}

impl ClaimedRun {
    /// The values `claim_runs.lua` answers for each claimed run, in order.
    pub const REPLY_FIELDS: [&'static str; 11] = [
        "run_id",
        "worker",
        "job",
        "attempt",
        "max_attempts",
        "fire_ms",
        "payload",
        "start_in_ms",
        "pending_slot",
        "first_claim",
        "created_ms",
    ];

    /// Reads one claimed run of `claim_runs.lua`'s reply, its [`ClaimedRun::REPLY_FIELDS`]:
    /// `fire_ms` and `payload` may be nil, `pending_slot` is 0 (none), 1 (skip if running) or 2
    /// (wait), `first_claim` 0 or 1, `created_ms` nil for a damaged record. The script checked the numbers; what can still be wrong is text that is not
    /// UTF-8.
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
        // An empty text is no payload: runs enqueued unique without one were written so.
        let payload = match values.next() {
            None | Some(Value::Nil) => Ok(None),
            Some(value) => String::from_redis_value(value)
                .map(|text| Some(text).filter(|text| !text.is_empty())),
        };
        let mut number = || -> Option<u64> { u64::from_redis_value(values.next()?).ok() };
        let start_in = number().map(Duration::from_millis);
        let pending_slot = number().and_then(|flag| match flag {
            0 => Some(None),
            1 => Some(Some(PendingSlot::SkipIfRunning)),
            2 => Some(Some(PendingSlot::Wait)),
            _ => None,
        });
        let first_claim = number().and_then(|flag| match flag {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        });
        let created_ms = values
            .next()
            .and_then(|value| i64::from_redis_value(value).ok());
        let Some(id) = id else {
            return Err(CorruptRun {
                run_id: String::new(),
                worker,
                detail: "its id is not text".to_owned(),
            });
        };
        match (
            job,
            attempt,
            max_attempts,
            payload,
            start_in,
            pending_slot,
            first_claim,
        ) {
            (
                Some(job),
                Some(attempt),
                Some(max_attempts),
                Ok(payload),
                Some(start_in),
                Some(pending_slot),
                Some(first_claim),
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
                first_claim,
                created_ms,
            }),
            _ => Err(CorruptRun {
                run_id: id,
                worker,
                detail: "its job, attempt, max_attempts or payload is not valid".to_owned(),
            }),
        }
    }
}

impl Store {
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
        let skipped = claimed.skipped();
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
    /// and fires that would start past the misfire threshold their promotion recorded when
    /// their job's `misfire` policy says so, popping at most `pop_limit` runs in all. Each claimed run's lease lasts `lease.run`, or
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
            .key(self.keys.replicas())
            .key(self.keys.hold())
            .key(self.keys.rewind())
            .arg(self.keys.prefix())
            .arg(millis(lease.run))
            .arg(millis(self.settings.fingerprint_ttl))
            .arg(pop_limit)
            .arg(self.history_arg())
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(millis(lease.ahead))
            .arg(self.written_ms.load(Ordering::Relaxed))
            .arg(workers.len())
            .arg(workers)
            .arg(queues);
        // The claim's reply is read before its replication is awaited: a claim that did not
        // reach the replicas hands its runs back, so that a failover cannot leave them
        // claimed by a worker that never ran them.
        let values: Vec<Value> = invocation
            .invoke_async(&mut self.connection.without_waiting())
            .await
            .during(&self.metrics, OPERATION)?;
        let claimed = self.read_claim(replica, values)?;
        if let Err(refused) = self
            .connection
            .clone()
            .replicate()
            .await
            .during(&self.metrics, OPERATION)
        {
            self.hand_back_unreplicated(&claimed).await?;
            return Err(refused);
        }
        Ok(claimed)
    }

    /// Hands the runs of a claim that did not reach the replicas back, as never started: they
    /// are due again at once (or at their due time). The hand-back is not awaited on the
    /// replicas either: a failover that loses both leaves the runs ready, as before the claim.
    async fn hand_back_unreplicated(&self, claimed: &Claimed) -> Result<(), StoreError> {
        let failure = Failure::without_output(
            FailReason::NotStarted,
            "the claim did not reach the replicas --replicated-writes asks for: handed back"
                .to_owned(),
        );
        let mut connection = self.connection.without_waiting();
        for run in &claimed.runs {
            let (run_id, worker) = match run {
                Ok(run) => (&run.id, &run.worker),
                Err(corrupt) => (&corrupt.run_id, &corrupt.worker),
            };
            self.fail_run_on(&mut connection, run_id, Some(worker), &failure, 0.0)
                .await?;
        }
        Ok(())
    }

    /// Reads the reply of `claim_runs.lua`.
    fn read_claim(&self, replica: &str, values: Vec<Value>) -> Result<Claimed, StoreError> {
        const OPERATION: &str = "claim_runs";
        let mut reply = Reply::new(OPERATION, values);
        let status: String = reply.next()?;
        if status == "UNDECLARED" {
            return Err(StoreError::Undeclared {
                replica: replica.to_owned(),
            });
        }
        let written_ms: i64 = reply.next()?;
        let rewound: i64 = reply.next()?;
        let skipped = reply.next()?;
        let skips = reply.skips(skipped)?;
        let count: u64 = reply.next()?;
        let redis_now_ms = if count > 0 { Some(reply.next()?) } else { None };
        let runs = reply.records(
            count,
            ClaimedRun::REPLY_FIELDS.len(),
            ClaimedRun::from_reply,
        )?;
        reply.finish()?;
        // Claims of this store's clones may answer out of order: keeping the highest value
        // seen never takes an earlier answer for a rewind.
        self.written_ms.fetch_max(written_ms, Ordering::Relaxed);
        Ok(Claimed {
            runs,
            skips,
            drained: status == "EMPTY",
            redis_now_ms,
            rewound: rewound == 1,
        })
    }

    /// Extends `worker`'s lease on a run of `job`; `false` means the run is no longer its own.
    /// Works while the namespace is held.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn extend_lease(
        &self,
        run_id: &str,
        job: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<bool, StoreError> {
        let extended: i64 = scripts::EXTEND_LEASE
            .key(self.keys.active())
            .key(self.keys.run(run_id))
            .key(self.keys.running(&super::keys::slot_group(job, run_id)))
            .arg(run_id)
            .arg(worker)
            .arg(millis(lease))
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "extend_lease")?;
        Ok(extended == 1)
    }

    /// Starts runs claimed ahead of their due time whose job slot needed no decision, in one
    /// call: extends each one's short lease to `lease` and records its start as now, so that
    /// until then it does not count as running for a fire of its job (an outage at its due time
    /// delays the start). One answer per run, in order: `false` means the run is no longer its
    /// worker's, or its short lease expired, and must not start. Works while the namespace is
    /// held.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for an answer of another length than `runs`.
    pub async fn start_claimed_runs(
        &self,
        runs: &[&ClaimedRun],
        lease: Duration,
    ) -> Result<Vec<bool>, StoreError> {
        const OPERATION: &str = "start_claimed_runs";
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = scripts::START_CLAIMED_RUNS.key(self.keys.active());
        invocation.arg(millis(lease)).arg(self.now_arg());
        for run in runs {
            invocation
                .key(self.keys.run(&run.id))
                .key(
                    self.keys
                        .running(&super::keys::slot_group(&run.job, &run.id)),
                )
                .arg(&run.id)
                .arg(&run.worker);
        }
        let started: Vec<i64> = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        if started.len() != runs.len() {
            return Err(reply_error(
                OPERATION,
                format!("{} answers for {} runs", started.len(), runs.len()),
            ));
        }
        Ok(started.into_iter().map(|started| started == 1).collect())
    }

    /// Takes a slot of the job of a run claimed ahead while every slot was taken, once its due
    /// time has come; when none is free, skips the run (reason `overlap`) or puts it aside to
    /// wait for one, as `pending` says. A fire that starts later than the misfire threshold is
    /// skipped (reason `missed`) first when its job's `misfire` policy says so.
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
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(&run.id)
            .arg(&run.worker)
            .arg(millis(lease))
            .arg(self.history_arg())
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(u8::from(pending == PendingSlot::SkipIfRunning))
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "take_job_slot")?;
        match answer.as_str() {
            "TAKEN" => Ok(JobSlot::Taken),
            "BUSY" => Ok(JobSlot::Busy),
            "MISSED" => Ok(JobSlot::Missed),
            "WAITING" => Ok(JobSlot::Waiting),
            "GONE" => Ok(JobSlot::Gone),
            other => Err(reply_error(
                "take_job_slot",
                format!("unexpected {other:?}"),
            )),
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
        let connection = BlockingConnection::open(&self.topology, timeout)
            .await
            .during(&self.metrics, "ready_waiter")?;
        let markers = queues
            .iter()
            .map(|queue| self.keys.wake(queue))
            .chain([self.keys.wake_replica(replica_id)])
            .collect();
        Ok(ReadyWaiter {
            connection,
            metrics: self.metrics.clone(),
            markers,
            timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ClaimedRun;

    #[test]
    fn claim_runs_lua_answers_as_many_values_per_run_as_the_decoder_reads() {
        let script = include_str!("../../lua/claim_runs.lua");
        let answered = script
            .lines()
            .find_map(|line| line.strip_prefix("local REPLY_FIELDS = "))
            .expect("claim_runs.lua names how many values it answers per run");
        assert_eq!(
            answered.trim().parse::<usize>(),
            Ok(ClaimedRun::REPLY_FIELDS.len())
        );
    }
}
