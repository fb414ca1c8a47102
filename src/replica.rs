//! One replica: the engine's components wired together, supervised, and stopped in order.
//!
//! Supervision: every component (elector, planner, promoter, reaper, heartbeat, notifier,
//! workers, and the exporter with `--archive`) runs as a task of one [`JoinSet`]. One that panics or returns while it should still
//! run stops the replica at once: the error is logged with the component's name, `/healthz` and `/readyz`
//! answer 503, running runs are stopped and handed back without a grace, leadership is released,
//! and [`Replica::run`] returns the error, so that the process exits non-zero and its service
//! manager restarts it while another replica leads.
//!
//! Shutdown order, written down once: (1) at once, the elector stops (it never takes the lease
//! again), steps down and releases the lease, the planner stops, and the workers stop claiming;
//! (2) running runs get the grace period, after which the rest are stopped and handed back
//! without using an attempt, and outcomes are recorded within the recording window
//! ([`RECORD_WINDOW`](crate::engine::worker::RECORD_WINDOW)); (3) once the workers have stopped,
//! the promoter, reaper, heartbeat, notifier and exporter stop, so the replica is seen alive
//! while its runs finish, the notices of their outcomes go out, and with `--archive` their
//! records are written (for [`ExporterConfig::stop_drain`] at most).
//! A component that has not stopped [`STOP_TIMEOUT`] after that (waiting on a Redis that does
//! not answer) is abandoned.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinSet};
use tracing::{Instrument, error, info, warn};

use crate::engine::elector::{Elector, ElectorConfig};
use crate::engine::exporter::{Exporter, ExporterConfig};
use crate::engine::heartbeat::{
    Heartbeat, HeartbeatConfig, HeartbeatError, host_name, wait_for_replica_id,
};
use crate::engine::notifier::{Notifier, NotifierConfig};
use crate::engine::planner::{DeclarationsConfig, Planner, PlannerConfig};
use crate::engine::promoter::{Promoter, PromoterConfig};
use crate::engine::reaper::{Reaper, ReaperConfig};
use crate::engine::worker::{WorkerConfig, Workers};
use crate::engine::{Leadership, Shutdown, arm_fault_points};
use crate::handler::{Handler, Handlers};
use crate::logs::panic_message;
use crate::schedule::{
    Job, Jobs, Label, Labels, QueueFallback, QueueFallbacks, ScheduleDir, shared_jobs,
};
use crate::store::Store;
use crate::store::keys::private_route;

/// How long a component may take to stop once its turn has come before it is abandoned: its
/// tick waits on a Redis that does not answer, and every tick is one atomic call that may be
/// dropped.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(1);

/// Why a replica stopped without being asked to.
///
/// ```no_run
/// use redcron::replica::{Replica, ReplicaError};
/// use redcron::shutdown::Shutdown;
///
/// # async fn example(replica: Replica) {
/// match replica.run(Shutdown::new()).await {
///     Ok(()) => {}
///     // A restart would meet the same refusal: give each replica its own id, or start it
///     // with the namespace's --archive.
///     Err(error @ (ReplicaError::ReplicaIdInUse(_) | ReplicaError::ArchiveRequired { .. })) => {
///         eprintln!("{error}");
///         std::process::exit(2);
///     }
///     // Exit non-zero, so that the service manager restarts the process.
///     Err(error @ ReplicaError::ComponentDied { .. }) => {
///         eprintln!("{error}");
///         std::process::exit(1);
///     }
/// }
/// # }
/// ```
#[derive(Debug, Error)]
pub enum ReplicaError {
    /// A component panicked or returned while the replica was running. The replica stopped its
    /// other components and handed its runs back; the process should exit so that it is
    /// restarted.
    #[error("the {component} {how}: the replica stopped")]
    ComponentDied {
        /// The component: elector, planner, promoter, reaper, heartbeat, notifier or workers.
        component: &'static str,
        /// What happened to it: the panic's message, or that it returned.
        how: String,
    },
    /// Another process was beating under this replica's id when it started: the replica did
    /// not start. A process that takes the id over later ends the heartbeat, which stops the
    /// replica as [`ReplicaError::ComponentDied`].
    #[error(transparent)]
    ReplicaIdInUse(HeartbeatError),
    /// The namespace archives (a replica started with `--archive` said so in Redis) and this
    /// replica was not told to: the outcomes it recorded would reach no archive. It did not
    /// start.
    #[error(
        "namespace archives to {url}: start every replica of it with --archive (to stop \
         archiving, stop every replica and delete the key {key})"
    )]
    ArchiveRequired {
        /// Where the namespace archives.
        url: String,
        /// The key that says so.
        key: String,
    },
}

/// The components of a replica, by the names logs, errors and `/healthz` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Component {
    Elector,
    Planner,
    Workers,
    Promoter,
    Reaper,
    Heartbeat,
    Notifier,
    Exporter,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Component::Elector => "elector",
            Component::Planner => "planner",
            Component::Workers => "workers",
            Component::Promoter => "promoter",
            Component::Reaper => "reaper",
            Component::Heartbeat => "heartbeat",
            Component::Notifier => "notifier",
            Component::Exporter => "exporter",
        }
    }

    /// Whether the component stops with the first stage of the shutdown order, rather than
    /// once the workers have stopped.
    fn stops_first(self) -> bool {
        matches!(
            self,
            Component::Elector | Component::Planner | Component::Workers
        )
    }
}

/// The replica's component tasks, by name.
#[derive(Default)]
struct Supervisor {
    tasks: JoinSet<()>,
    names: HashMap<tokio::task::Id, Component>,
}

impl Supervisor {
    fn spawn(&mut self, component: Component, task: impl Future<Output = ()> + Send + 'static) {
        // In the span the replica runs in: with several namespaces, it names the namespace.
        let id = self.tasks.spawn(task.in_current_span()).id();
        self.names.insert(id, component);
    }

    /// The next component to end, and how it ended; `None` once none is left.
    async fn next(&mut self) -> Option<(Component, Result<(), JoinError>)> {
        let (id, ended) = match self.tasks.join_next_with_id().await? {
            Ok((id, ())) => (id, Ok(())),
            Err(error) => (error.id(), Err(error)),
        };
        let component = self
            .names
            .remove(&id)
            .expect("every task is spawned with its name");
        Some((component, ended))
    }

    fn running(&self) -> Vec<&'static str> {
        self.names
            .values()
            .map(|component| component.name())
            .collect()
    }
}

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
    jobs: Arc<watch::Sender<Jobs>>,
    fallbacks: Arc<watch::Sender<QueueFallbacks>>,
    /// The replica's labels: the jobs whose `where` they do not match are not declared.
    labels: Arc<Labels>,
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
    store: Store,
    jobs: Vec<Job>,
    fallbacks: Vec<QueueFallback>,
    handlers: Handlers,
    config: ReplicaConfig,
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

/// One replica of the scheduler.
pub struct Replica {
    store: Store,
    jobs: Arc<watch::Sender<Jobs>>,
    /// What it carries, published with its heartbeat.
    labels: Arc<Labels>,
    fallbacks: Arc<watch::Sender<QueueFallbacks>>,
    handlers: Handlers,
    config: ReplicaConfig,
}

impl Replica {
    /// A builder for a replica on `store`.
    ///
    /// ```no_run
    /// use redcron::handler::{Completed, RunContext};
    /// use redcron::replica::Replica;
    /// use redcron::store::{Store, StoreSettings};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = Store::connect("redis://127.0.0.1/", "redcron", StoreSettings::default()).await?;
    /// let replica = Replica::builder(store)
    ///     .jobs(redcron::schedule::load_dir("schedules".as_ref())?)
    ///     .handler("resize", |run: RunContext| async move {
    ///         println!("resizing for {}", run.run_id);
    ///         Ok(Completed::default())
    ///     })
    ///     .build();
    /// let shutdown = redcron::shutdown::Shutdown::new();
    /// replica.run(shutdown).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn builder(store: Store) -> ReplicaBuilder {
        ReplicaBuilder {
            store,
            jobs: Vec::new(),
            fallbacks: Vec::new(),
            handlers: Handlers::new(),
            config: ReplicaConfig::default(),
        }
    }

    /// A handle to replace the job definitions while the replica runs.
    ///
    /// ```no_run
    /// use tokio::signal::unix::{SignalKind, signal};
    ///
    /// # async fn example(replica: redcron::replica::Replica) -> Result<(), Box<dyn std::error::Error>> {
    /// let jobs = replica.jobs_handle();
    /// let mut hangup = signal(SignalKind::hangup())?;
    /// tokio::spawn(async move {
    ///     while hangup.recv().await.is_some() {
    ///         // A directory with a mistake is refused whole: the running definitions stay.
    ///         if let Ok(declared) = redcron::schedule::load_schedule_dir("schedules".as_ref()) {
    ///             jobs.replace_schedule_dir(declared);
    ///         }
    ///     }
    /// });
    /// replica.run(redcron::shutdown::Shutdown::new()).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn jobs_handle(&self) -> JobsHandle {
        JobsHandle {
            jobs: self.jobs.clone(),
            fallbacks: self.fallbacks.clone(),
            labels: self.labels.clone(),
        }
    }

    /// Runs every component until `shutdown`, then stops them in order (see the module docs).
    ///
    /// ```no_run
    /// use redcron::shutdown::Shutdown;
    ///
    /// # async fn example(replica: redcron::replica::Replica) -> Result<(), Box<dyn std::error::Error>> {
    /// let shutdown = Shutdown::new();
    /// let on_ctrl_c = shutdown.clone();
    /// tokio::spawn(async move {
    ///     // Running runs then get the shutdown grace to finish.
    ///     let _ = tokio::signal::ctrl_c().await;
    ///     on_ctrl_c.cancel();
    /// });
    /// replica.run(shutdown).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ReplicaError::ReplicaIdInUse`] when another process beats under its id at start;
    /// [`ReplicaError::ComponentDied`] when a component panicked or returned while it should
    /// have run: the replica has stopped.
    pub async fn run(self, shutdown: Shutdown) -> Result<(), ReplicaError> {
        let metrics = self.store.metrics().clone();
        metrics.health.starting();
        metrics.set_replica(&self.config.replica_id);
        arm_fault_points();
        let config = self.config;
        let id_free = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            free = wait_for_replica_id(&self.store, &config.replica_id, config.heartbeat_period) => free,
        };
        match id_free {
            Ok(()) => {}
            // Redis down at start: the heartbeat finds a second process later, if there is one.
            Err(HeartbeatError::Store(error)) => {
                warn!(%error, "cannot check that no other process uses this replica id");
            }
            Err(error) => return Err(ReplicaError::ReplicaIdInUse(error)),
        }
        check_archive(&self.store, config.exporter.as_ref()).await?;
        let leadership = Leadership::new();
        let misfire_threshold = config.promoter.misfire_threshold;

        let elector = Elector::new(
            self.store.clone(),
            leadership.clone(),
            ElectorConfig {
                replica_id: config.replica_id.clone(),
                lease_ttl: config.leader_ttl,
            },
        );
        let planner = Planner::new(
            self.store.clone(),
            leadership.clone(),
            self.jobs.subscribe(),
            PlannerConfig {
                declarations: DeclarationsConfig {
                    replica_id: config.replica_id.clone(),
                    live_for: config.heartbeat_period * 3,
                    // Kept planned as long as their runs wait for a replica that declares them.
                    undeclared_grace: config.reaper.undeclared_grace,
                },
                ..config.planner.clone()
            },
        );
        let workers = Workers::new(
            self.store.clone(),
            WorkerConfig {
                replica_id: config.replica_id.clone(),
                // As long as the heartbeat keeps them.
                declarations_ttl: config.heartbeat_period * 3,
                // Its own route too, where the runs of every-replica fires meant for it wait.
                queues: config
                    .workers
                    .queues
                    .iter()
                    .cloned()
                    .chain([private_route(&config.replica_id)])
                    .collect(),
                ..config.workers.clone()
            },
            self.jobs.subscribe(),
            self.handlers,
        );
        let heartbeat = Heartbeat::new(
            self.store.clone(),
            HeartbeatConfig {
                replica_id: config.replica_id.clone(),
                period: config.heartbeat_period,
                queues: config.workers.queues.clone(),
                labels: self.labels.published(),
                targets_kept: misfire_threshold,
                keep_declared: config.reaper.undeclared_grace,
            },
            workers.load(),
            self.jobs.subscribe(),
            leadership.clone(),
        );

        // One token per stage of the shutdown order. A dead component cancels the first and
        // interrupts the running runs; the second follows once the workers have stopped.
        let stopping = shutdown.child_token();
        let background = Shutdown::new();
        let interrupt = workers.interrupter();
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Component::Elector, elector.run(stopping.clone()));
        supervisor.spawn(Component::Planner, planner.run(stopping.clone()));
        supervisor.spawn(
            Component::Workers,
            workers.run(stopping.clone(), config.shutdown_grace),
        );
        supervisor.spawn(
            Component::Promoter,
            Promoter::new(self.store.clone(), config.promoter, self.jobs.subscribe())
                .run(background.clone()),
        );
        supervisor.spawn(
            Component::Reaper,
            Reaper::new(
                self.store.clone(),
                ReaperConfig {
                    replica_live_for: config.heartbeat_period * 3,
                    misfire_threshold,
                    ..config.reaper
                },
            )
            .with_queue_fallbacks(self.fallbacks.subscribe())
            .with_jobs(self.jobs.subscribe())
            .run(background.clone()),
        );
        supervisor.spawn(Component::Heartbeat, heartbeat.run(background.clone()));
        supervisor.spawn(
            Component::Notifier,
            Notifier::new(
                self.store.clone(),
                NotifierConfig {
                    replica_id: config.replica_id.clone(),
                    ..config.notifier
                },
            )
            .with_jobs(self.jobs.subscribe())
            .run(background.clone()),
        );

        if let Some(exporter) = config.exporter.clone() {
            supervisor.spawn(
                Component::Exporter,
                Exporter::new(self.store.clone(), exporter).run(background.clone()),
            );
        }

        let mut failure = None;
        let mut stop_by = None;
        let mut stopping_seen = false;
        loop {
            let ended = tokio::select! {
                biased;
                () = stopping.cancelled(), if !stopping_seen => {
                    stopping_seen = true;
                    metrics.health.stopping();
                    continue;
                }
                () = sleep_until(stop_by) => {
                    warn!(
                        components = supervisor.running().join(","),
                        "components did not stop in time: abandoning them"
                    );
                    supervisor.tasks.abort_all();
                    stop_by = None;
                    continue;
                }
                ended = supervisor.next() => ended,
            };
            let Some((component, ended)) = ended else {
                break;
            };
            let stop_asked = if component.stops_first() {
                stopping.is_cancelled()
            } else {
                background.is_cancelled()
            };
            let died = match ended {
                Ok(()) if stop_asked => None,
                Ok(()) => Some("stopped on its own".to_owned()),
                // Only this supervisor aborts a task, after the component's turn to stop.
                Err(error) if error.is_cancelled() => None,
                Err(error) => Some(format!(
                    "panicked: {}",
                    panic_message(error.into_panic().as_ref())
                )),
            };
            if let Some(how) = died
                && failure.is_none()
            {
                error!(
                    component = component.name(),
                    "the {} {how}: stopping the replica, handing its runs back, so that it is \
                     restarted",
                    component.name()
                );
                metrics.health.component_died(component.name());
                interrupt.cancel();
                stopping.cancel();
                failure = Some(ReplicaError::ComponentDied {
                    component: component.name(),
                    how,
                });
            }
            if component == Component::Workers {
                background.cancel();
                stop_by = Some(tokio::time::Instant::now() + STOP_TIMEOUT);
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

/// Says in Redis that the namespace archives when this replica does, and refuses to start one
/// that does not in a namespace that does. Redis out of reach at start lets it start: the
/// archive's records are then written by what the other replicas were told.
async fn check_archive(
    store: &Store,
    exporter: Option<&ExporterConfig>,
) -> Result<(), ReplicaError> {
    let checked = match exporter {
        Some(exporter) => store
            .mark_archive(&exporter.archive.url().to_string())
            .await
            .map(|()| None),
        None => store.archive_marked().await,
    };
    match checked {
        Ok(None) => Ok(()),
        Ok(Some(url)) => Err(ReplicaError::ArchiveRequired {
            url,
            key: store.keys().archive_marker(),
        }),
        Err(error) => {
            warn!(%error, "cannot check whether the namespace archives");
            Ok(())
        }
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
