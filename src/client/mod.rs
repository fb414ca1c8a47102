//! A client for other Rust programs: what the command line does to and reads of runs, jobs and
//! workflows, as typed calls. The command line goes through it: `trigger` and `enqueue`
//! ([`Client::enqueue`], [`Client::trigger_fire`] for a job that runs on every replica, and
//! [`Client::send_all`] for `enqueue --from`); `pause`, `resume`, `dead retry`, `dead purge`, `hold` and `release`
//! (`operations`); `workflow start`, `status`, `list` and `retry` (`workflows`); `status`,
//! `jobs`, `history`, `runs` and `dead list` and `show` (`reads`).
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use redcron::client::Client;
//! use redcron::schedule::Priority;
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect("redis://127.0.0.1/", "redcron").await?;
//! let run = client
//!     .enqueue("thumbnail")
//!     .payload(&serde_json::json!({ "image": "cat.png" }))?
//!     .priority(Priority::High)
//!     .after(Duration::from_secs(30))
//!     .unique_for(Duration::from_secs(3600))
//!     .send()
//!     .await?;
//! println!("{} due at {} ms", run.run_id, run.due_ms);
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use thiserror::Error;

use crate::payload::payload_problem;
use crate::store::{Acting, Store, StoreError, StoreSettings};

mod bulk;
mod cursor;
mod ended;
mod fire;
mod operations;
mod reads;
mod request;
mod runs;
mod workflows;

pub use cursor::RunsCursor;
pub use fire::Fired;
pub use operations::DeadRetried;
pub use reads::{DeadRun, EVENTS_SCANNED, HistoryEntry};
pub use request::RunRequest;
pub use runs::{ListedRun, RUNS_SCANNED, RunsPage, RunsQuery};
pub use workflows::StartedWorkflow;

/// How long a uniqueness key holds unless [`RunRequest::unique_for`] says otherwise.
pub const DEFAULT_UNIQUE_FOR: Duration = Duration::from_secs(3600);

/// Why a run was not created.
#[derive(Debug, Error)]
pub enum ClientError {
    /// No live replica has declared the job (or it was never published).
    #[error("unknown job \"{0}\": no replica has declared it")]
    UnknownJob(String),
    /// The job runs on every replica (`on = "every"`): it takes no ad-hoc run, which would hold
    /// none of its replicas' slots; a trigger makes its runs now, one per replica
    /// ([`Client::trigger_fire`]).
    #[error(
        "job \"{0}\" runs on every replica (on = \"every\"): its runs are made by its fires, one \
         per replica, or now by `redcron trigger {0}`; it cannot be enqueued"
    )]
    EveryReplica(String),
    /// A `--replica` filter that found nothing names no replica the namespace knows: most
    /// likely a mistyped id, said rather than shown as an empty list.
    #[error(
        "unknown replica \"{replica}\": no replica of the namespace, live, lost or stopped within \
         a day, has that id ({})",
        if known.is_empty() { "none has beaten yet".to_owned() } else { format!("known: {}", known.join(", ")) }
    )]
    UnknownReplica {
        /// The id asked for.
        replica: String,
        /// The ids the namespace knows, sorted.
        known: Vec<String>,
    },
    /// Another run of the job holds the uniqueness key.
    #[error("refused: run {holder} of job \"{job}\" already holds this uniqueness key")]
    Duplicate {
        /// The job asked for.
        job: String,
        /// The run that holds the key.
        holder: String,
    },
    /// The due time asked for is before Redis's clock, and the past was not allowed.
    #[error(
        "due at {}, before Redis's clock ({})",
        instant(*.due_ms),
        instant(*.now_ms)
    )]
    InThePast {
        /// The due time asked for, ms.
        due_ms: i64,
        /// Redis's clock, ms.
        now_ms: i64,
    },
    /// The payload is too large or not JSON.
    #[error("{0}")]
    Payload(String),
    /// No dead run has that id (it never died, was retried, or was purged).
    #[error("no dead run \"{0}\"")]
    NoDeadRun(String),
    /// A cursor that no page of runs ended at: not one a listing gave, or damaged on the way.
    #[error(
        "cursor \"{0}\" is not one a page of runs ended at: pass the cursor a page gave, or \
         start again without one"
    )]
    BadCursor(String),
    /// The run is in the dead letters, but its record is no dead run's: nothing can retry it.
    #[error(
        "run \"{run}\" is in the dead letters but damaged ({damage}): it cannot be retried; \
         `redcron dead purge` deletes it"
    )]
    DamagedDeadRun {
        /// The entry of the dead letters.
        run: String,
        /// Why it is no dead run.
        damage: String,
    },
    /// The dead run's job is paused: re-driven, the run would only be skipped. It stays dead.
    #[error(
        "run {run} stays dead: job \"{job}\" is paused and would skip it; resume the job \
         (redcron resume {job}) and retry the run"
    )]
    JobPaused {
        /// The dead run.
        run: String,
        /// Its paused job.
        job: String,
    },
    /// The dead run's job has no published definition: re-driven, the run would wait for a
    /// declarer and die again. It stays dead.
    #[error(
        "run {run} stays dead: job \"{job}\" is unknown to the namespace (no live replica has \
         declared it for the undeclared grace); start a replica that declares it, then retry \
         the run"
    )]
    JobUnknown {
        /// The dead run.
        run: String,
        /// Its unknown job.
        job: String,
    },
    /// No workflow instance has that id (never started, finished longer ago than the
    /// retention, or lost with Redis's data).
    #[error(
        "no workflow instance \"{0}\": never started, finished longer ago than the retention, \
         or lost with Redis's data (a restart without persistence, a restore from an older copy)"
    )]
    NoWorkflowInstance(String),
    /// No live replica has declared a workflow of that name.
    #[error("unknown workflow \"{0}\": no live replica declares it")]
    UnknownWorkflow(String),
    /// The name is a job's, not a workflow's.
    #[error("\"{0}\" is a job, not a workflow: run it with `redcron trigger {0}`")]
    NotAWorkflow(String),
    /// No live replica declares the job of one of the workflow's steps: nothing was started.
    #[error(
        "workflow \"{workflow}\" was not started: no live replica declares job \"{job}\", one \
         of its steps"
    )]
    UndeclaredStep {
        /// The workflow asked for.
        workflow: String,
        /// The step's job.
        job: String,
    },
    /// No live replica declares the job of a step a retry would run again: nothing changed.
    #[error(
        "instance {id} was not retried: no live replica declares job \"{job}\" of its step \
         \"{step}\"; start a replica that declares it, then retry"
    )]
    RetryUndeclared {
        /// The instance.
        id: String,
        /// The step.
        step: String,
        /// Its job.
        job: String,
    },
    /// The replica a trigger asked for is no target of the every-replica job: it does not
    /// declare the job, or does not match its `where`.
    #[error(
        "replica \"{replica}\" does not run job \"{job}\": it does not declare the job or does \
         not match its `where` (`redcron jobs --json` lists the replicas that run it, as \
         `declared_by`)"
    )]
    NotATarget {
        /// The job asked for.
        job: String,
        /// The replica asked for.
        replica: String,
    },
    /// No live replica runs the every-replica job: a trigger would make no run.
    #[error(
        "job \"{0}\" runs on every replica that declares it, and no live replica does: \
         nothing was triggered"
    )]
    NoTarget(String),
    /// Redis refused or could not be reached.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A run created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    /// Its id.
    pub run_id: String,
    /// When it is due, ms on Redis's clock.
    pub due_ms: i64,
    /// Redis's clock when it was created, ms.
    pub now_ms: i64,
    /// Its job is paused: the run is skipped unless the job is resumed before it is due.
    pub paused: bool,
}

/// Creates runs in one namespace.
#[derive(Clone)]
pub struct Client {
    store: Store,
    /// Who the actions are made for, recorded with the events they write, when told
    /// ([`Client::acting_as`]).
    actor: Option<String>,
}

impl Client {
    /// Connects to the Redis at `url` (any form the store reads: `redis://`, `rediss://`,
    /// `redis+sentinel://`, `redis+cluster://`) for namespace `namespace`.
    ///
    /// ```no_run
    /// # async fn example() -> Result<(), redcron::client::ClientError> {
    /// let client = redcron::client::Client::connect("redis+sentinel://s1:26379,s2,s3/mymaster", "prod").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// The URL is invalid or Redis cannot be reached.
    pub async fn connect(url: &str, namespace: &str) -> Result<Self, ClientError> {
        Ok(Self::from_store(
            Store::connect(url, namespace, StoreSettings::default()).await?,
        ))
    }

    /// A client on a store already connected.
    pub fn from_store(store: Store) -> Self {
        Self { store, actor: None }
    }

    /// The same client, acting for `actor` (a console's token or user name, `cli` for the
    /// command line, or a program's own name): the events its actions record name it (a job's
    /// pause, resume, trigger and enqueue as its `action`, a dead run's re-drive as `reason`
    /// `redrive`), and each run it triggers or enqueues carries it (`actor`, which
    /// `runs show` prints). A client not told records no actor, and no action for what it
    /// enqueues.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let billing = client.acting_as("billing-service");
    /// billing.enqueue("invoice").send().await?;
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub fn acting_as(&self, actor: impl Into<String>) -> Self {
        Self {
            store: self.store.clone(),
            actor: Some(actor.into()),
        }
    }

    /// Who the client acts for, as the store records it with runs made as a trigger or not.
    fn acting(&self, trigger: bool) -> Option<Acting<'_>> {
        self.actor.as_deref().map(|actor| Acting { actor, trigger })
    }

    /// The store underneath, for what the client does not offer yet.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A run of the declared job `job`, due now unless told otherwise; see [`RunRequest`].
    pub fn enqueue(&self, job: impl Into<String>) -> RunRequest<'_> {
        RunRequest::new(self, job.into())
    }
}

/// Checks that `text` can be a run's payload: JSON, and no larger than a run may carry.
///
/// # Errors
/// [`ClientError::Payload`], saying what is wrong.
pub fn check_payload(text: &str) -> Result<(), ClientError> {
    if let Some(problem) = payload_problem(text) {
        return Err(ClientError::Payload(problem));
    }
    serde_json::from_str::<serde_json::Value>(text)
        .map(|_| ())
        .map_err(|error| ClientError::Payload(format!("the payload is not valid JSON: {error}")))
}

/// What runs of a published name do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Published {
    /// Run a job's command or handler.
    Job,
    /// Start an instance of a workflow.
    Workflow,
}

impl Published {
    /// What the published definition of `name` is; `None` when none is published.
    pub(super) async fn of(store: &Store, name: &str) -> Result<Option<Self>, StoreError> {
        let published = store.published_definitions(&[name]).await?;
        let Some(text) = published
            .into_iter()
            .next()
            .and_then(|published| published.definition)
        else {
            return Ok(None);
        };
        let workflow = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .is_some_and(|definition| {
                definition
                    .get("workflow")
                    .is_some_and(|workflow| !workflow.is_null())
            });
        Ok(Some(if workflow {
            Published::Workflow
        } else {
            Published::Job
        }))
    }

    /// Why `name`, published as `kind` (or not at all), starts no workflow.
    pub(super) fn no_workflow(kind: Option<Self>, name: &str) -> ClientError {
        match kind {
            Some(_) => ClientError::NotAWorkflow(name.to_owned()),
            None => ClientError::UnknownWorkflow(name.to_owned()),
        }
    }
}

/// An instant of an error's text as people read it (RFC 3339, UTC), or the number of ms it is
/// when out of range.
fn instant(ms: i64) -> String {
    crate::notify::rfc3339(ms).unwrap_or_else(|| format!("{ms} ms"))
}
