//! One replica: the engine's components wired together, supervised, and stopped in order.
//!
//! Supervision: every component (elector, planner, promoter, reaper, heartbeat, notifier,
//! workers, and the exporter with `--archive`) runs as a task of one [`JoinSet`](tokio::task::JoinSet). One that panics or returns while it should still
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
//! records are written (for [`ExporterConfig::stop_drain`](crate::engine::exporter::ExporterConfig::stop_drain) at most).
//! A component that has not stopped [`STOP_TIMEOUT`] after that (waiting on a Redis that does
//! not answer) is abandoned.
//!
//! Its rooms: config.rs what a replica is told (its settings, its jobs and handlers, and the
//! handle that replaces its jobs while it runs), run.rs its components made from that and
//! started, supervisor.rs their tasks watched and stopped in the order above.

mod config;
mod run;
mod supervisor;

pub use config::{JobsHandle, ReplicaBuilder, ReplicaConfig};

use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::sync::watch;

use crate::engine::heartbeat::HeartbeatError;
use crate::handler::Handlers;
use crate::schedule::{Jobs, Labels, QueueFallbacks};
use crate::store::Store;

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
///     Err(
///         error @ (ReplicaError::ReplicaIdInUse(_)
///         | ReplicaError::ArchiveRequired { .. }
///         | ReplicaError::ArchiveElsewhere { .. }
///         | ReplicaError::ArchiveOfAnotherNamespace(_)),
///     ) => {
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
    /// The namespace archives to another archive than the one this replica was told (URLs
    /// compared as [`crate::archive::ArchiveUrl`] reads them, so a trailing slash is no
    /// difference): it would write parts where the other replicas, `status` and `runs show` do
    /// not look. It did not start.
    #[error(
        "namespace archives to {marked}, not {url}: start this replica with --archive {marked}; \
         to move the archive, stop every replica, stop archiving as docs/operations.md says \
         (\"When the archive is down\", which deletes the key {key}), then start them all with \
         --archive {url}"
    )]
    ArchiveElsewhere {
        /// Where this replica was told to archive.
        url: String,
        /// Where the namespace archives, as the key says.
        marked: String,
        /// The key that says so.
        key: String,
    },
    /// The archive belongs to another namespace: the records of both would mix. It did not
    /// start.
    #[error(transparent)]
    ArchiveOfAnotherNamespace(crate::archive::ArchiveError),
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
}
