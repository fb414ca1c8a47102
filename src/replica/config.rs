//! What a replica is told: its settings ([`ReplicaConfig`]), its jobs, queue tables and
//! handlers ([`ReplicaBuilder`]), and the jobs it declares replaced while it runs
//! ([`JobsHandle`]), each only where the replica's labels match the job's `where`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tracing::info;

use super::Replica;
use crate::engine::exporter::ExporterConfig;
use crate::engine::heartbeat::host_name;
use crate::engine::notifier::NotifierConfig;
use crate::engine::planner::PlannerConfig;
use crate::engine::promoter::PromoterConfig;
use crate::engine::reaper::ReaperConfig;
use crate::engine::worker::WorkerConfig;
use crate::handler::{Handler, Handlers};
use crate::schedule::{
    Job, Jobs, Label, Labels, QueueFallback, QueueFallbacks, ScheduleDir, shared_jobs,
};
use crate::store::Store;

/// Everything a replica can be told.
///
/// ```
/// use std::time::Duration;
///
/// use redcron::replica::ReplicaConfig;
///
/// let mut config = ReplicaConfig {
///     // Unique per process: a second process beating under the same id stops the replica.
///     replica_id: "web-1".to_owned(),
///     shutdown_grace: Duration::from_secs(120),
///     ..ReplicaConfig::default()
/// };
/// config.workers.queues = vec!["images".to_owned()];
/// assert_eq!(config.leader_ttl, Duration::from_secs(5));
/// ```
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// Unique among the replicas sharing a Redis. Runs of every-replica jobs belong to it: a
    /// replica restarted under the same id runs those that wait for it.
    pub replica_id: String,
    /// The labels it was given (`--label`), beside `host`, `replica` and `queue` which it
    /// carries on its own: it declares only the jobs whose `where` they match.
    pub labels: Vec<Label>,
    /// The leader lease: a dead leader is replaced within about this long.
    pub leader_ttl: Duration,
    /// Claiming and executing runs.
    pub workers: WorkerConfig,
    /// How long running runs may finish after shutdown is asked for.
    pub shutdown_grace: Duration,
    /// Planning fires.
    pub planner: PlannerConfig,
    /// Promoting due runs.
    pub promoter: PromoterConfig,
    /// Reaping runs of dead workers.
    pub reaper: ReaperConfig,
    /// Time between heartbeats.
    pub heartbeat_period: Duration,
    /// Sending notices.
    pub notifier: NotifierConfig,
    /// Archiving every outcome (`--archive`): `None` for a namespace that keeps its history in
    /// Redis alone.
    pub exporter: Option<ExporterConfig>,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            replica_id: "replica".to_owned(),
            labels: Vec::new(),
            leader_ttl: Duration::from_secs(5),
            workers: WorkerConfig::default(),
            shutdown_grace: Duration::from_secs(30),
            planner: PlannerConfig::default(),
            promoter: PromoterConfig::default(),
            reaper: ReaperConfig::default(),
            heartbeat_period: Duration::from_secs(2),
            notifier: NotifierConfig::default(),
            exporter: None,
        }
    }
}

/// Replaces a running replica's job definitions and queue tables (a reload).
#[derive(Clone)]
pub struct JobsHandle {
    pub(super) jobs: Arc<watch::Sender<Jobs>>,
    pub(super) fallbacks: Arc<watch::Sender<QueueFallbacks>>,
    /// The replica's labels: the jobs whose `where` they do not match are not declared.
    pub(super) labels: Arc<Labels>,
}

impl JobsHandle {
    /// Declares `jobs` instead of the current ones: the planner unplans changed and removed
    /// jobs and plans the new definitions; workers execute by the new definitions.
    ///
    /// ```no_run
    /// # fn example(jobs: redcron::replica::JobsHandle) -> Result<(), redcron::schedule::LoadError> {
    /// jobs.replace(redcron::schedule::load_dir("schedules".as_ref())?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn replace(&self, jobs: Vec<Job>) {
        self.jobs
            .send_replace(shared_jobs(matching(jobs, &self.labels)));
    }

    /// The job definitions the replica runs by now: what a reload compares with what it read.
    pub fn current(&self) -> Jobs {
        self.jobs.borrow().clone()
    }

    /// Declares what a schedule directory declares instead: its jobs (as
    /// [`JobsHandle::replace`]) and its `[queues]` tables.
    ///
    /// ```no_run
    /// # fn example(jobs: redcron::replica::JobsHandle) -> Result<(), redcron::schedule::LoadError> {
    /// jobs.replace_schedule_dir(redcron::schedule::load_schedule_dir("schedules".as_ref())?);
    /// # Ok(())
    /// # }
    /// ```
    pub fn replace_schedule_dir(&self, declared: ScheduleDir) {
        self.replace(declared.jobs);
        self.fallbacks.send_replace(Arc::new(declared.queues));
    }
}

/// The jobs of `jobs` whose `where` the replica's `labels` match: the others are another
/// replica's to declare, and this one neither plans nor runs them.
fn matching(jobs: Vec<Job>, labels: &Labels) -> Vec<Job> {
    jobs.into_iter()
        .filter(|job| {
            let matches = job.selector.matches(labels);
            if !matches {
                info!(
                    job = job.name,
                    r#where = %job.selector,
                    "not declared here: this replica does not carry every label of its where"
                );
            }
            matches
        })
        .collect()
}

/// Builds a [`Replica`]: its store, jobs, handlers and settings.
pub struct ReplicaBuilder {
    pub(super) store: Store,
    pub(super) jobs: Vec<Job>,
    pub(super) fallbacks: Vec<QueueFallback>,
    pub(super) handlers: Handlers,
    pub(super) config: ReplicaConfig,
}

impl ReplicaBuilder {
    /// The declared jobs.
    ///
    /// ```no_run
    /// # fn example(store: redcron::store::Store) -> Result<(), redcron::schedule::LoadError> {
    /// let jobs = redcron::schedule::load_dir("/etc/redcron/schedules".as_ref())?;
    /// let replica = redcron::replica::Replica::builder(store).jobs(jobs).build();
    /// # Ok(())
    /// # }
    /// ```
    pub fn jobs(mut self, jobs: Vec<Job>) -> Self {
        self.jobs = jobs;
        self
    }

    /// The `[queues]` tables: where the ready runs of a queue no live replica serves go.
    ///
    /// ```no_run
    /// # fn example(store: redcron::store::Store) -> Result<(), redcron::schedule::LoadError> {
    /// let declared = redcron::schedule::load_schedule_dir("/etc/redcron/schedules".as_ref())?;
    /// let replica = redcron::replica::Replica::builder(store)
    ///     .jobs(declared.jobs)
    ///     .queue_fallbacks(declared.queues)
    ///     .build();
    /// # Ok(())
    /// # }
    /// ```
    pub fn queue_fallbacks(mut self, fallbacks: Vec<QueueFallback>) -> Self {
        self.fallbacks = fallbacks;
        self
    }

    /// Runs `job` with `handler` (library mode) instead of its command.
    ///
    /// ```no_run
    /// use redcron::handler::{Completed, RunContext, RunError};
    /// use redcron::replica::Replica;
    ///
    /// # fn example(store: redcron::store::Store) {
    /// let replica = Replica::builder(store)
    ///     .handler("resize", |run: RunContext| async move {
    ///         // No retry can fix a missing payload: straight to the dead letters.
    ///         let image = run.payload.ok_or_else(|| RunError::permanent("which image?"))?;
    ///         Ok(Completed { output: format!("resized {image}"), ..Completed::default() })
    ///     })
    ///     .build();
    /// # }
    /// ```
    pub fn handler(mut self, job: impl Into<String>, handler: impl Handler) -> Self {
        self.handlers.register(job, handler);
        self
    }

    /// The replica's settings.
    ///
    /// ```no_run
    /// use redcron::replica::{Replica, ReplicaConfig};
    ///
    /// # fn example(store: redcron::store::Store) {
    /// let config = ReplicaConfig {
    ///     replica_id: "web-1".to_owned(),
    ///     ..ReplicaConfig::default()
    /// };
    /// let replica = Replica::builder(store).config(config).build();
    /// # }
    /// ```
    pub fn config(mut self, config: ReplicaConfig) -> Self {
        self.config = config;
        self
    }

    /// The replica, ready to run.
    ///
    /// ```no_run
    /// # async fn example(store: redcron::store::Store) -> Result<(), Box<dyn std::error::Error>> {
    /// let replica = redcron::replica::Replica::builder(store).build();
    /// // Nothing runs, and no replica id is taken, until `run` is awaited.
    /// replica.run(redcron::shutdown::Shutdown::new()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn build(self) -> Replica {
        let labels = Labels::of_replica(
            &self.config.labels,
            &host_name(),
            &self.config.replica_id,
            &self.config.workers.queues,
        );
        let (jobs, _) = watch::channel(shared_jobs(matching(self.jobs, &labels)));
        let (fallbacks, _) = watch::channel(Arc::new(self.fallbacks));
        // The scripts that record outcomes write the archive's records only when told to.
        let store = if self.config.exporter.is_some() {
            self.store.archiving()
        } else {
            self.store
        };
        Replica {
            store,
            jobs: Arc::new(jobs),
            fallbacks: Arc::new(fallbacks),
            labels: Arc::new(labels),
            handlers: self.handlers,
            config: self.config,
        }
    }
}
