//! The planner: while this replica leads, expands every enabled job's schedule into the due set
//! up to a horizon ahead, and decides what becomes of fires missed while nothing was planning.
//!
//! Fires already planned do not depend on the leader at all, so a leader crash costs no fire as
//! long as a successor is elected within the horizon. Planning is idempotent (deterministic run
//! ids, a cursor that only moves forward) and fenced (a write from an old epoch is refused).

mod candidates;
mod declared;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::DateTime;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use super::{Backoff, Leadership, Shutdown, log_store_failure, record_skips};
use crate::schedule::{Job, Jobs, Misfire};
use crate::store::{
    JobPlan, LeaderToken, PlanOutcome, PlannedRun, SkipReason, SkippedFire, Store, StoreError,
    UnplanOutcome, cron_run_id,
};
pub use declared::DeclarationsConfig;
use declared::{Declarations, Refreshed};

/// Most missed fires one job's catch-up looks at in one tick, so that a long outage of a
/// frequent job is worked off over several ticks instead of stalling one.
const MAX_MISSED_SCAN: usize = 10_000;

/// How the planner behaves.
#[derive(Debug, Clone)]
pub struct PlannerConfig {
    /// How far ahead fires are planned.
    pub horizon: Duration,
    /// Most runs planned per job per tick.
    pub max_runs_per_job: usize,
    /// Most runs planned (or fires skipped) per tick, soonest first; the rest wait for the next
    /// tick. Keeps a tick short when many jobs fire at the same instant (100,000 minutely jobs
    /// all enter the horizon in the same second): the horizon leaves time to catch up. A tick
    /// that also compares every definition with the published ones plans half as many.
    pub max_runs_per_tick: usize,
    /// A fire later than this is missed; its job's misfire policy decides whether it runs.
    pub misfire_threshold: Duration,
    /// Time between ticks.
    pub period: Duration,
    /// How the jobs declared by every live replica are read.
    pub declarations: DeclarationsConfig,
}

impl Default for PlannerConfig {
    fn default() -> Self {
        Self {
            horizon: Duration::from_secs(60),
            max_runs_per_job: 120,
            max_runs_per_tick: 20_000,
            misfire_threshold: Duration::from_secs(60),
            period: Duration::from_secs(1),
            declarations: DeclarationsConfig::default(),
        }
    }
}

/// What one planner tick did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlannerTick {
    /// This replica does not lead: nothing to do.
    Follower,
    /// Runs added to the due set and fires skipped.
    Planned {
        /// New runs.
        runs: u64,
        /// Fires recorded as skipped.
        skipped: u64,
    },
    /// A write was refused: another replica leads now, and this one stepped down.
    Fenced,
}

/// Plans fires while this replica leads.
pub struct Planner {
    store: Store,
    leadership: Leadership,
    jobs: watch::Receiver<Jobs>,
    config: PlannerConfig,
    /// The lease the definitions were last published under: they are published again under a
    /// new lease and whenever the jobs change.
    published_under: Option<LeaderToken>,
    /// The job list last published. Compared by pointer: a reload replaces the list whole, and
    /// the watch channel's own "changed" flag is consumed by the run loop's wake-ups.
    published_jobs: Option<Jobs>,
    /// Each job's cursor as this leader last wrote it, read from Redis once per lease (while
    /// the lease holds, no one else may move a cursor), or when it first saw a new job.
    cursors: HashMap<String, i64>,
    /// The lease `cursors` was read under; `None` after anything that may have moved them.
    cursors_under: Option<LeaderToken>,
    /// The store's connection generation `cursors` was read in: a new primary may have lost
    /// the last ones written.
    cursors_generation: u64,
    /// For each job of `published_jobs`, by position: the cursor it was computed from and the
    /// job's first fire after it. A job whose next fire lies beyond the horizon has nothing to
    /// plan, so an idle tick over 100,000 jobs compares numbers instead of searching schedules.
    next_fires: Vec<Option<NextFire>>,
    /// The jobs every live replica declares, one definition of each: what is planned.
    declarations: Declarations,
    /// Where the next check of the published definitions starts, in `published_jobs`.
    audit_from: usize,
}

/// Most published definitions compared with the planned ones per tick: every definition is
/// checked within a tick up to this many jobs, within 50 s for 10,000 (damaged ones that
/// promoters meet are written again at the next tick whatever their turn).
const AUDIT_BATCH: usize = 200;

/// A job's first fire after `cursor_ms`, or `None` when its schedule has no further fire.
#[derive(Debug, Clone, Copy)]
struct NextFire {
    cursor_ms: i64,
    fire_ms: Option<i64>,
}

impl Planner {
    /// A planner over the jobs in `jobs`.
    pub fn new(
        store: Store,
        leadership: Leadership,
        jobs: watch::Receiver<Jobs>,
        config: PlannerConfig,
    ) -> Self {
        Self {
            declarations: Declarations::new(config.declarations.clone()),
            store,
            leadership,
            jobs,
            config,
            published_under: None,
            published_jobs: None,
            cursors: HashMap::new(),
            cursors_under: None,
            cursors_generation: 0,
            next_fires: Vec::new(),
            audit_from: 0,
        }
    }

    /// Plans every enabled job up to the horizon, if this replica leads.
    ///
    /// # Errors
    /// Redis errors; the next tick starts over from the cursors, so nothing is planned twice.
    /// The cursors are read again after any error: Redis may have failed over meanwhile to a
    /// replica that lost the last planner writes.
    pub async fn tick(&mut self) -> Result<PlannerTick, StoreError> {
        let ticked = self.plan_tick().await;
        if ticked.is_err() {
            self.cursors_under = None;
        }
        ticked
    }

    async fn plan_tick(&mut self) -> Result<PlannerTick, StoreError> {
        let Some(token) = self.leadership.token() else {
            self.published_under = None;
            return Ok(PlannerTick::Follower);
        };
        let own = self.jobs.borrow_and_update().clone();
        let now_ms = self.store.now_ms().await?;
        let fresh_lease = self.published_under.as_ref() != Some(&token);
        // A new lease starts from what the previous leader published.
        let inherited = if fresh_lease {
            Some(self.store.published_hashes().await?)
        } else {
            None
        };
        let Refreshed { jobs, damaged } = self
            .declarations
            .refresh(&self.store, &own, inherited.as_ref(), now_ms)
            .await?;
        let jobs_changed = !self
            .published_jobs
            .as_ref()
            .is_some_and(|published| Arc::ptr_eq(published, &jobs));
        let reconciling = jobs_changed || fresh_lease;
        if reconciling {
            // Unplanning resets cursors.
            self.cursors_under = None;
            let published = match inherited {
                Some(published) => published,
                None => self.store.published_hashes().await?,
            };
            let declared: Vec<(&Job, String)> = jobs
                .iter()
                .map(Arc::as_ref)
                .zip(self.declarations.hashes())
                .collect();
            if !self
                .replan_changed_jobs(&token, &declared, &published, now_ms)
                .await?
            {
                return Ok(PlannerTick::Fenced);
            }
            self.store
                .publish_changed_definitions(&declared, &published)
                .await?;
            self.published_under = Some(token.clone());
            self.published_jobs = Some(jobs.clone());
            self.next_fires = vec![None; jobs.len()];
        }
        self.repair_definitions(&jobs, &damaged).await?;

        let generation = self.store.connection_generation();
        if self.cursors_under.as_ref() != Some(&token) || self.cursors_generation != generation {
            self.cursors = self.store.cursors().await?;
            self.cursors_under = Some(token.clone());
            self.cursors_generation = generation;
        }
        // A job seen for the first time starts from now: it has missed nothing. Remembered
        // before any plan is written, so a job a budgeted tick leaves for later still gets the
        // fires from the moment it was first seen.
        for job in jobs.iter().filter(|job| job.schedule.is_some()) {
            if !self.cursors.contains_key(&job.name) {
                self.cursors.insert(job.name.clone(), now_ms);
            }
        }
        // Soonest first, and no further than the budget needs: after an outage or a large
        // reload, most jobs wait for a later tick, and their plans are not built in this one.
        // A tick that also compared every definition with the published ones (a new leader's
        // first, a reload's) plans half as much, so that it too stays well under a second.
        let budget = if reconciling {
            self.config.max_runs_per_tick / 2
        } else {
            self.config.max_runs_per_tick
        };
        let horizon_end = now_ms + millis(self.config.horizon);
        let mut plans = Vec::new();
        let mut left = Vec::new();
        let mut size = 0;
        for index in self.due_soon(&jobs, horizon_end) {
            let job = &jobs[index];
            if size > budget {
                left.push(index);
                continue;
            }
            let cursor_ms = self.cursors.get(&job.name).copied();
            if let Some(plan) = plan_job(job, cursor_ms, now_ms, &self.config) {
                size += plan.runs.len() + plan.skipped.len();
                plans.push((index, plan));
            }
        }
        within_budget(&mut plans, budget, &mut left);
        let planned_through = self.planned_through(&jobs, &plans, &left, horizon_end);
        let plans: Vec<JobPlan> = plans.into_iter().map(|(_, plan)| plan).collect();
        let runs = match self
            .store
            .plan_jobs(&token, &plans, Some(planned_through))
            .await
        {
            Ok(PlanOutcome::Planned(added)) => added,
            Ok(PlanOutcome::Fenced(holder)) => {
                self.fenced(&token, &holder);
                return Ok(PlannerTick::Fenced);
            }
            Ok(PlanOutcome::Stale(job)) => {
                warn!(
                    job,
                    "Redis lost planned fires while this replica led (a failover or a restore): \
                     reading the cursors again to plan them"
                );
                self.cursors_under = None;
                return Ok(PlannerTick::Planned {
                    runs: 0,
                    skipped: 0,
                });
            }
            // Some calls may have been written: the cursors are read again next time.
            Err(error) => return Err(error),
        };
        let mut skipped = 0;
        for plan in &plans {
            skipped += plan.skipped.len() as u64;
            let skips: Vec<(String, String)> = plan
                .skipped
                .iter()
                .map(|fire| (plan.job.clone(), fire.reason.as_str().to_owned()))
                .collect();
            // The leader plans only jobs a live replica declares: a bounded set of series.
            record_skips(self.store.metrics(), &skips, |_| true);
            self.cursors.insert(plan.job.clone(), plan.cursor_ms);
        }
        if runs > 0 || skipped > 0 {
            debug!(runs, skipped, "planned");
        }
        Ok(PlannerTick::Planned { runs, skipped })
    }

    /// The time up to which every job's fires are planned once `plans` are written: the
    /// horizon's end, or just before the first fire that this tick leaves for a later one (of
    /// a job `left` out for the budget, or of a plan cut short). Each plan's next fire is kept
    /// for the next tick, which would search for it anyway.
    fn planned_through(
        &mut self,
        jobs: &[Arc<Job>],
        plans: &[(usize, JobPlan)],
        left: &[usize],
        horizon_end: i64,
    ) -> i64 {
        // `due_soon` cached the next fire of every job it returned, after its current cursor.
        let mut first_unplanned = left
            .iter()
            .filter_map(|&index| self.next_fires[index].and_then(|next| next.fire_ms))
            .min()
            .unwrap_or(i64::MAX);
        for (index, plan) in plans {
            let job = &jobs[*index];
            let next = NextFire {
                cursor_ms: plan.cursor_ms,
                fire_ms: job.schedule.as_ref().and_then(|schedule| {
                    DateTime::from_timestamp_millis(plan.cursor_ms)
                        .and_then(|cursor| schedule.next_after(cursor, job.timezone))
                        .map(|fire| fire.timestamp_millis())
                }),
            };
            if let Some(fire_ms) = next.fire_ms {
                first_unplanned = first_unplanned.min(fire_ms);
            }
            self.next_fires[*index] = Some(next);
        }
        horizon_end.min(first_unplanned.saturating_sub(1))
    }

    /// The positions in `jobs` of the jobs with a fire up to `horizon_end` after their cursor,
    /// soonest first (missed fires are the soonest); disabled jobs are left out, as nothing is
    /// planned for them. Each job's next fire is kept with the cursor it follows, so it is
    /// searched for once per cursor, not once per tick.
    fn due_soon(&mut self, jobs: &[Arc<Job>], horizon_end: i64) -> Vec<usize> {
        let mut due_soon = Vec::new();
        for (index, (job, cached)) in jobs.iter().zip(self.next_fires.iter_mut()).enumerate() {
            let (Some(&cursor_ms), Some(schedule), true) =
                (self.cursors.get(&job.name), &job.schedule, job.enabled)
            else {
                continue;
            };
            let next = match *cached {
                Some(next) if next.cursor_ms == cursor_ms => next,
                _ => {
                    let next = NextFire {
                        cursor_ms,
                        fire_ms: DateTime::from_timestamp_millis(cursor_ms)
                            .and_then(|cursor| schedule.next_after(cursor, job.timezone))
                            .map(|fire| fire.timestamp_millis()),
                    };
                    *cached = Some(next);
                    next
                }
            };
            if let Some(fire_ms) = next.fire_ms.filter(|&fire_ms| fire_ms <= horizon_end) {
                due_soon.push((fire_ms, index));
            }
        }
        due_soon.sort_unstable();
        due_soon.into_iter().map(|(_, index)| index).collect()
    }

    /// Removes the planned runs of jobs whose published definition differs from the declared
    /// one (changed by a reload, here or on the previous leader) or that are no longer declared,
    /// so that their old fires never run. `false` when a write was fenced.
    async fn replan_changed_jobs(
        &mut self,
        token: &LeaderToken,
        jobs: &[(&Job, String)],
        published: &HashMap<String, String>,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let declared: HashMap<&str, &str> = jobs
            .iter()
            .map(|(job, hash)| (job.name.as_str(), hash.as_str()))
            .collect();
        for (name, hash) in published {
            let cursor = match declared.get(name.as_str()) {
                Some(declared_hash) if declared_hash == hash => continue,
                Some(_) => Some(now_ms),
                None => None,
            };
            match self.store.unplan_job(token, name, cursor).await? {
                UnplanOutcome::Unplanned(removed) => {
                    info!(
                        job = name,
                        removed, "definition changed or removed: old fires unplanned"
                    );
                }
                UnplanOutcome::Fenced(holder) => {
                    self.fenced(token, &holder);
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Writes again the published definitions promoters found damaged, and checks the next
    /// batch of published definitions against the planned ones, writing again any that differ
    /// (damaged, or written by something else); once every job was checked, removes entries
    /// that name no planned job.
    async fn repair_definitions(
        &mut self,
        jobs: &Jobs,
        damaged: &[String],
    ) -> Result<(), StoreError> {
        let mut suspects: Vec<&Job> = Vec::new();
        let mut stale: Vec<String> = Vec::new();
        for name in damaged {
            match jobs.iter().find(|job| job.name == *name) {
                Some(job) => suspects.push(job),
                None => stale.push(name.clone()),
            }
        }
        let start = self.audit_from.min(jobs.len());
        let batch = &jobs[start..(start + AUDIT_BATCH).min(jobs.len())];
        let names: Vec<&str> = batch.iter().map(|job| job.name.as_str()).collect();
        let published = self.store.published_definitions(&names).await?;
        for (job, published) in batch.iter().zip(published) {
            let Some(digest) = self.declarations.digest_of(&job.name) else {
                continue;
            };
            // The published definition is the canonical JSON its content hash is the SHA-256 of.
            let mut hash = [0; 32];
            let intact = published.hash.is_some_and(|text| {
                hex::decode_to_slice(text, &mut hash).is_ok() && hash == digest
            }) && published
                .definition
                .is_some_and(|text| <[u8; 32]>::from(Sha256::digest(text)) == digest);
            if !intact && !suspects.iter().any(|suspect| suspect.name == job.name) {
                suspects.push(job);
            }
        }
        self.audit_from = start + batch.len();
        if self.audit_from >= jobs.len() {
            self.audit_from = 0;
            let (defs, hashes) = self.store.published_names().await?;
            for name in defs.into_iter().chain(hashes) {
                if !self.declarations.plans(&name) && !stale.contains(&name) {
                    stale.push(name);
                }
            }
        }
        if suspects.is_empty() && stale.is_empty() {
            return Ok(());
        }
        for job in &suspects {
            warn!(
                job = job.name,
                "the published definition of this job was unreadable or not the planned one: \
                 written again"
            );
        }
        for job in &stale {
            warn!(job, "a published definition names no planned job: removed");
        }
        let repaired: Vec<(&Job, String)> = suspects
            .iter()
            .filter_map(|job| Some((*job, self.declarations.hash_of(&job.name)?)))
            .collect();
        let stale: Vec<&str> = stale.iter().map(String::as_str).collect();
        self.store
            .write_definitions(
                repaired.iter().map(|(job, hash)| (*job, hash.as_str())),
                &stale,
            )
            .await?;
        self.store
            .metrics()
            .definitions_repaired_total
            .inc_by((suspects.len() + stale.len()) as u64);
        Ok(())
    }

    /// A write was refused: another replica leads (`holder`). Stops leading at once.
    fn fenced(&mut self, token: &LeaderToken, holder: &str) {
        self.store.metrics().fenced_writes_total.inc();
        warn!(
            token = token.as_str(),
            holder, "planner write fenced: another replica leads; stepping down"
        );
        self.leadership.step_down(token, self.store.metrics());
        self.published_under = None;
    }

    /// Ticks every period until `shutdown`; at once when leadership is gained or jobs change.
    pub async fn run(mut self, shutdown: Shutdown) {
        let mut leadership = self.leadership.subscribe();
        let mut backoff = Backoff::default();
        loop {
            if self.leadership.token().is_some() && super::planner_fault_triggered() {
                panic!("test fault point: the planner panics");
            }
            let pause = match self.tick().await {
                Ok(tick) => {
                    backoff.succeeded(&self.store.metrics().health);
                    if tick == PlannerTick::Fenced {
                        info!("planner stopped: not the leader any more");
                    }
                    self.config.period
                }
                Err(error) => {
                    log_store_failure(&error, "planner tick failed");
                    backoff.failed_with(&error)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
                _ = leadership.changed() => {}
                _ = self.jobs.changed() => {}
            }
        }
    }
}

/// Keeps the soonest plans whose runs and skipped fires fit in `budget` (the first plan always
/// fits): missed fires first, then by first fire. The jobs of the plans dropped go to `left`.
fn within_budget(plans: &mut Vec<(usize, JobPlan)>, budget: usize, left: &mut Vec<usize>) {
    let size = |(_, plan): &(usize, JobPlan)| plan.runs.len() + plan.skipped.len();
    if plans.iter().map(size).sum::<usize>() <= budget {
        return;
    }
    plans.sort_by_key(|(_, plan)| {
        if plan.skipped.is_empty() {
            plan.runs.first().map_or(i64::MAX, |run| run.fire_ms)
        } else {
            i64::MIN
        }
    });
    let mut total = 0;
    let keep = plans
        .iter()
        .take_while(|plan| {
            total += size(plan);
            total <= budget
        })
        .count();
    left.extend(plans.drain(keep.max(1)..).map(|(index, _)| index));
}

/// What to write for one job at `now_ms`, given its cursor (the last fire planned or skipped):
/// fires missed beyond the threshold go by the job's misfire policy and starting deadline, later
/// fires up to the horizon are planned. `None` when there is nothing to write.
///
/// A job seen for the first time (no cursor) starts from now: it has missed nothing.
pub fn plan_job(
    job: &Job,
    cursor_ms: Option<i64>,
    now_ms: i64,
    config: &PlannerConfig,
) -> Option<JobPlan> {
    let schedule = job.schedule.as_ref().filter(|_| job.enabled)?;
    let start_ms = cursor_ms.unwrap_or(now_ms);
    let mut fires = schedule
        .fires_after(DateTime::from_timestamp_millis(start_ms)?, job.timezone)
        .map(|fire| fire.timestamp_millis())
        .peekable();
    let mut plan = JobPlan {
        job: job.name.clone(),
        from_cursor_ms: start_ms,
        cursor_ms: start_ms,
        runs: Vec::new(),
        skipped: Vec::new(),
    };

    let missed_until = now_ms - millis(config.misfire_threshold);
    let mut missed = Vec::new();
    while missed.len() < MAX_MISSED_SCAN {
        match fires.next_if(|&fire| fire <= missed_until) {
            Some(fire) => missed.push(fire),
            None => break,
        }
    }
    let caught_up = fires.peek().is_none_or(|&fire| fire > missed_until);
    let latest_missed = missed.last().copied();
    for fire in missed {
        let run_id = cron_run_id(&job.name, fire);
        let past_deadline = job
            .starting_deadline
            .is_some_and(|deadline| now_ms - fire > millis(deadline));
        let reason = if past_deadline {
            Some(SkipReason::Deadline)
        } else {
            match job.misfire {
                Misfire::Skip => Some(SkipReason::Missed),
                Misfire::RunOnce if !(caught_up && Some(fire) == latest_missed) => {
                    Some(SkipReason::Missed)
                }
                Misfire::RunOnce | Misfire::RunAll => None,
            }
        };
        match reason {
            Some(reason) => plan.skipped.push(SkippedFire { run_id, reason }),
            None if plan.runs.len() >= config.max_runs_per_job => return finish(plan),
            None => plan.runs.push(planned(job, run_id, fire)),
        }
        plan.cursor_ms = fire;
    }
    if !caught_up {
        return finish(plan);
    }

    let horizon_end = now_ms + millis(config.horizon);
    while plan.runs.len() < config.max_runs_per_job {
        let Some(fire) = fires.next_if(|&fire| fire <= horizon_end) else {
            break;
        };
        plan.runs
            .push(planned(job, cron_run_id(&job.name, fire), fire));
        plan.cursor_ms = fire;
    }
    finish(plan)
}

fn finish(plan: JobPlan) -> Option<JobPlan> {
    (!plan.runs.is_empty() || !plan.skipped.is_empty()).then_some(plan)
}

fn planned(job: &Job, run_id: String, fire_ms: i64) -> PlannedRun {
    let due_ms = fire_ms + jitter_ms(&run_id, job.jitter);
    PlannedRun {
        run_id,
        fire_ms,
        due_ms,
    }
}

/// The fire's delay in `[0, jitter)`: derived from the run id, so every replica (and every
/// replanning) gives the same fire the same delay.
fn jitter_ms(run_id: &str, jitter: Duration) -> i64 {
    let range = millis(jitter);
    if range <= 0 {
        return 0;
    }
    let digest = Sha256::digest(run_id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % range as u64) as i64
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests;
