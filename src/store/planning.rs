//! The leader's writes of planned fires, fenced by its token (`plan_fires.lua`,
//! `unplan_job.lua`), and the cursors it plans from.

use std::collections::HashMap;

use redis::{AsyncCommands, Value};

use super::During;
use super::damage::Entry;
use super::damaged_names::{NameIndex, readable_hash};
use super::reply::{FencedAnswer, ScriptCall, decode, reply_error};
use super::{LeaderToken, SkipReason, Store, StoreError, scripts};

/// One fire the planner puts in the due set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRun {
    /// `<job>@<fire ms>`: planning the same fire twice is a no-op.
    pub run_id: String,
    /// When the schedule fires, ms since the epoch.
    pub fire_ms: i64,
    /// When the run may start: the fire time plus the job's jitter.
    pub due_ms: i64,
}

/// A fire the planner decided not to run (missed, past its starting deadline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedFire {
    /// `<job>@<fire ms>`.
    pub run_id: String,
    /// Why, as recorded in the events stream.
    pub reason: SkipReason,
}

/// One planner write for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobPlan {
    /// The job.
    pub job: String,
    /// The cursor this plan continues from, ms, as the leader last read or wrote it: a cursor
    /// in Redis behind it means Redis lost planner writes ([`PlanOutcome::Stale`]).
    pub from_cursor_ms: i64,
    /// The last fire considered (planned or skipped), ms: the job's new cursor.
    pub cursor_ms: i64,
    /// Fires to run.
    pub runs: Vec<PlannedRun>,
    /// Fires recorded as skipped.
    pub skipped: Vec<SkippedFire>,
}

/// What a fenced planner write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanOutcome {
    /// Written: how many runs were new.
    Planned(u64),
    /// Refused: another token holds the lease (or none does). The replica must step down.
    Fenced(String),
    /// Refused: the cursor of this job in Redis is behind what the leader planned, so Redis
    /// lost planner writes while the lease held (a failover, a restore). The leader must read
    /// the cursors again and plan from them.
    Stale(String),
}

/// What a fenced removal of a job's planned fires did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnplanOutcome {
    /// Removed: how many planned fires.
    Unplanned(u64),
    /// Refused: another token holds the lease (or none does). The replica must step down.
    Fenced(String),
}

/// The id of a cron fire: deterministic, so the same fire is only ever planned once.
pub fn cron_run_id(job: &str, fire_ms: i64) -> String {
    format!("{job}@{fire_ms}")
}

/// The job and fire time (ms) a cron fire's run id names, as [`cron_run_id`] builds it; `None`
/// for any other id.
pub fn parse_cron_run_id(run_id: &str) -> Option<(&str, i64)> {
    let (job, fire_ms) = run_id.rsplit_once('@')?;
    Some((job, fire_ms.parse().ok()?))
}

impl Store {
    /// Removes a job's planned fires that are not due yet, fenced by `token`, and moves its cursor
    /// to `cursor_ms` (or forgets it, for a removed job): a changed schedule is planned afresh.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn unplan_job(
        &self,
        token: &LeaderToken,
        job: &str,
        cursor_ms: Option<i64>,
    ) -> Result<UnplanOutcome, StoreError> {
        let answer: Value = scripts::UNPLAN_JOB
            .key(self.keys.leader())
            .key(self.keys.due())
            .key(self.keys.cursor())
            .key(self.keys.planned())
            .key(self.keys.hold())
            .arg(token.as_str())
            .arg(job)
            .arg(cursor_ms.map_or_else(String::new, |cursor| cursor.to_string()))
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "unplan_job")?;
        Ok(match decode("unplan_job", answer)? {
            FencedAnswer::Done(removed) => UnplanOutcome::Unplanned(removed),
            FencedAnswer::Fenced(leader) => UnplanOutcome::Fenced(leader),
            FencedAnswer::Stale(job) => {
                return Err(reply_error(
                    "unplan_job",
                    format!("unplan_job.lua does not answer STALE ({job})"),
                ));
            }
        })
    }

    /// Every job's cursor: the fire ms of the last fire planned or skipped.
    ///
    /// # Errors
    /// Redis errors; a cursor that is not a number is an error (foreign data).
    pub async fn cursors(&self) -> Result<HashMap<String, i64>, StoreError> {
        let raw: Vec<(Entry, Entry)> = self
            .connection
            .clone()
            .hgetall(self.keys.cursor())
            .await
            .during(&self.metrics, "cursors")?;
        // A job name that is not UTF-8 names no job: the reapers remove it.
        let raw = readable_hash(NameIndex::Cursors, raw, &mut Vec::new());
        raw.into_iter()
            .map(|(job, cursor)| match cursor.parse() {
                Ok(cursor) => Ok((job, cursor)),
                Err(_) => Err(reply_error(
                    "cursors",
                    format!("cursor of job {job} is not a number: {cursor:?}"),
                )),
            })
            .collect()
    }

    /// Writes one job's plan, fenced by `token`.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn plan_fires(
        &self,
        token: &LeaderToken,
        plan: &JobPlan,
    ) -> Result<PlanOutcome, StoreError> {
        self.plan_jobs(token, std::slice::from_ref(plan), None)
            .await
    }

    /// Writes many jobs' plans, fenced by `token`: a script call per batch of jobs, all calls
    /// pipelined in one round trip. Runs planned before a fenced call stay planned (planning is
    /// idempotent, and the new leader plans the same ids). `planned_through`, when given, is
    /// the time up to which every job's fires are planned once `plans` are written: the last
    /// call records it (alone when there is no plan), so no promoter reads it before the plans.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn plan_jobs(
        &self,
        token: &LeaderToken,
        plans: &[JobPlan],
        planned_through: Option<i64>,
    ) -> Result<PlanOutcome, StoreError> {
        // Bounded by Lua's stack (the script unpacks the job names) and by how long one call
        // may hold Redis.
        const JOBS_PER_CALL: usize = 1_000;
        const RUNS_PER_CALL: usize = 5_000;
        const OPERATION: &str = "plan_fires";
        let mut calls: Vec<&[JobPlan]> = Vec::new();
        let (mut first, mut runs) = (0, 0);
        for (index, plan) in plans.iter().enumerate() {
            let size = plan.runs.len() + plan.skipped.len();
            if index > first && (index - first == JOBS_PER_CALL || runs + size > RUNS_PER_CALL) {
                calls.push(&plans[first..index]);
                (first, runs) = (index, 0);
            }
            runs += size;
        }
        if first < plans.len() || planned_through.is_some() {
            calls.push(&plans[first..]);
        }
        let last = calls.len().saturating_sub(1);
        let calls = calls
            .into_iter()
            .enumerate()
            .map(|(index, plans)| {
                self.plan_call(token, plans, planned_through.filter(|_| index == last))
            })
            .collect();
        let answers: Vec<Value> = self
            .invoke_batched(&scripts::PLAN_FIRES, OPERATION, calls)
            .await?;
        let mut added = 0;
        for answer in answers {
            match decode::<FencedAnswer<u64>>(OPERATION, answer)? {
                FencedAnswer::Done(planned) => added += planned,
                FencedAnswer::Fenced(leader) => return Ok(PlanOutcome::Fenced(leader)),
                FencedAnswer::Stale(job) => return Ok(PlanOutcome::Stale(job)),
            }
        }
        Ok(PlanOutcome::Planned(added))
    }

    /// One `plan_fires.lua` call writing `plans`, and `planned_through` after them if given.
    fn plan_call(
        &self,
        token: &LeaderToken,
        plans: &[JobPlan],
        planned_through: Option<i64>,
    ) -> ScriptCall {
        let keys = vec![
            self.keys.leader(),
            self.keys.due(),
            self.keys.cursor(),
            self.keys.events(),
            self.keys.wake_promoter(),
            self.keys.planned(),
            self.keys.hold(),
            self.keys.planned_through(),
        ];
        let mut args = vec![
            token.as_str().to_owned(),
            self.history_arg(),
            planned_through.map_or_else(String::new, |through| through.to_string()),
        ];
        for plan in plans {
            args.extend([
                plan.job.clone(),
                plan.from_cursor_ms.to_string(),
                plan.cursor_ms.to_string(),
                plan.runs.len().to_string(),
                plan.skipped.len().to_string(),
            ]);
            for run in &plan.runs {
                args.extend([
                    run.run_id.clone(),
                    run.fire_ms.to_string(),
                    run.due_ms.to_string(),
                ]);
            }
            for skipped in &plan.skipped {
                args.extend([skipped.run_id.clone(), skipped.reason.as_str().to_owned()]);
            }
        }
        ScriptCall { keys, args }
    }
}
