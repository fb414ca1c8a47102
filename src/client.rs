//! A client for other Rust programs: what the command line does to runs, jobs and workflows
//! (`trigger`, `enqueue`, `pause`, `resume`, `dead retry`, `dead purge`, `hold`, `release`,
//! `workflow start`, `status` and `list`), as typed calls.
//! The command line goes through it.
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

use crate::handler::{object_problem, payload_problem};
use crate::schedule::Priority;
use crate::store::{
    Enqueue, Enqueued, Store, StoreError, StoreSettings, WorkflowInstance, WorkflowStart,
    key_fingerprint, new_run_id, payload_fingerprint,
};

/// How long a uniqueness key holds unless [`RunRequest::unique_for`] says otherwise.
pub const DEFAULT_UNIQUE_FOR: Duration = Duration::from_secs(3600);

/// Why a run was not created.
#[derive(Debug, Error)]
pub enum ClientError {
    /// No live replica has declared the job (or it was never published).
    #[error("unknown job \"{0}\": no replica has declared it")]
    UnknownJob(String),
    /// Another run of the job holds the uniqueness key.
    #[error("refused: run {holder} of job \"{job}\" already holds this uniqueness key")]
    Duplicate {
        /// The job asked for.
        job: String,
        /// The run that holds the key.
        holder: String,
    },
    /// The due time asked for is before Redis's clock, and the past was not allowed.
    #[error("due at {due_ms} ms, before Redis's clock ({now_ms} ms)")]
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
    /// No workflow instance has that id (never started, or finished longer ago than the
    /// retention).
    #[error(
        "no workflow instance \"{0}\": never started, or finished longer ago than the retention"
    )]
    NoWorkflowInstance(String),
    /// No live replica has declared a workflow of that name.
    #[error("unknown workflow \"{0}\": no live replica declares it")]
    UnknownWorkflow(String),
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
        Self { store }
    }

    /// The store underneath, for what the client does not offer yet.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A run of the declared job `job`, due now unless told otherwise; see [`RunRequest`].
    pub fn enqueue(&self, job: impl Into<String>) -> RunRequest<'_> {
        RunRequest {
            client: self,
            job: job.into(),
            payload: None,
            priority: None,
            due: Due::Now,
            unique: None,
            unique_for: DEFAULT_UNIQUE_FOR,
        }
    }
}

/// A workflow instance started, see [`Client::start_workflow`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedWorkflow {
    /// Its id, for [`Client::workflow`] and `redcron workflow status`.
    pub id: String,
    /// When it started, ms on Redis's clock.
    pub started_ms: i64,
}

impl Client {
    /// Starts an instance of the declared workflow `name`, its first steps at once. `payload`,
    /// a JSON object, is what its first steps receive, and the base of what later ones do (see
    /// DESIGN.md, workflows).
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let started = client
    ///     .start_workflow("images", Some(&serde_json::json!({ "image": "cat.png" })))
    ///     .await?;
    /// let instance = client.workflow(&started.id).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownWorkflow`], [`ClientError::UndeclaredStep`],
    /// [`ClientError::Payload`] for a payload that is not a JSON object, or Redis errors.
    pub async fn start_workflow(
        &self,
        name: &str,
        payload: Option<&serde_json::Value>,
    ) -> Result<StartedWorkflow, ClientError> {
        let payload = payload.map(serde_json::Value::to_string);
        self.start_workflow_text(name, payload.as_deref()).await
    }

    /// [`Client::start_workflow`] with the payload as JSON text, checked here.
    ///
    /// # Errors
    /// As [`Client::start_workflow`].
    pub async fn start_workflow_text(
        &self,
        name: &str,
        payload: Option<&str>,
    ) -> Result<StartedWorkflow, ClientError> {
        if let Some(text) = payload {
            check_payload(text)?;
            if let Some(problem) = object_problem(text) {
                return Err(ClientError::Payload(problem));
            }
        }
        let id = new_run_id();
        match self.store.start_workflow(name, &id, payload).await? {
            WorkflowStart::Started { started_ms } | WorkflowStart::Exists { started_ms } => {
                Ok(StartedWorkflow { id, started_ms })
            }
            WorkflowStart::UnknownWorkflow => Err(ClientError::UnknownWorkflow(name.to_owned())),
            WorkflowStart::UndeclaredJob(job) => Err(ClientError::UndeclaredStep {
                workflow: name.to_owned(),
                job,
            }),
        }
    }

    /// The instance `id` with each step's status, or `None` when there is none (never
    /// started, or finished longer ago than the retention).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn workflow(&self, id: &str) -> Result<Option<WorkflowInstance>, ClientError> {
        Ok(self.store.workflow(id).await?)
    }

    /// Runs the instance `id` again from its steps that failed or were skipped, and so the
    /// steps after them: a dead step's run leaves the dead letters, a step skipped while its
    /// job was paused, or failed because no live replica declared its job, is enqueued anew.
    /// Returns those steps, none when nothing failed.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let steps = client.retry_workflow("01a2461b-cc6b-77e4-b15d-4300815ce3c3").await?;
    /// println!("running again from {}", steps.join(", "));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::NoWorkflowInstance`], or Redis errors.
    pub async fn retry_workflow(&self, id: &str) -> Result<Vec<String>, ClientError> {
        self.store
            .retry_workflow(id)
            .await?
            .ok_or_else(|| ClientError::NoWorkflowInstance(id.to_owned()))
    }

    /// The newest `limit` instances, of workflow `name` only when given, newest first.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// for instance in client.workflows(Some("images"), 20).await? {
    ///     println!("{} {}", instance.id, instance.state);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors.
    pub async fn workflows(
        &self,
        name: Option<&str>,
        limit: usize,
    ) -> Result<Vec<WorkflowInstance>, ClientError> {
        Ok(self.store.workflows(name, limit).await?)
    }
}

/// The most dead runs one [`Client::retry_dead_runs`] looks at.
const RETRY_ALL_LIMIT: usize = 100_000;

impl Client {
    /// Pauses the declared job `job`: its fires are skipped until it is resumed. Whether it
    /// was not paused before.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let was_running = client.pause("nightly-backup").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`], or Redis errors.
    pub async fn pause(&self, job: &str) -> Result<bool, ClientError> {
        self.set_paused(job, true).await
    }

    /// Resumes the declared job `job`. Whether it was paused before.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let was_paused = client.resume("nightly-backup").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`], or Redis errors.
    pub async fn resume(&self, job: &str) -> Result<bool, ClientError> {
        self.set_paused(job, false).await
    }

    async fn set_paused(&self, job: &str, paused: bool) -> Result<bool, ClientError> {
        if !self.store.is_declared(job).await? {
            return Err(ClientError::UnknownJob(job.to_owned()));
        }
        Ok(self.store.set_paused(job, paused).await?)
    }

    /// Makes the dead run `run_id` due again, with its attempts counted afresh.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// client.retry_dead("nightly-backup@1767225600000").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::NoDeadRun`], or Redis errors.
    pub async fn retry_dead(&self, run_id: &str) -> Result<(), ClientError> {
        if self.store.redrive_run(run_id).await? {
            Ok(())
        } else {
            Err(ClientError::NoDeadRun(run_id.to_owned()))
        }
    }

    /// Makes every dead run due again (of `job` only, when given); the ids of those retried.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let retried = client.retry_dead_runs(Some("thumbnail")).await?;
    /// println!("{} runs due again", retried.len());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`] for a job that has no dead run and is not declared, or Redis
    /// errors.
    pub async fn retry_dead_runs(&self, job: Option<&str>) -> Result<Vec<String>, ClientError> {
        let mut chosen = Vec::new();
        for (run_id, _) in self.store.dead_runs(RETRY_ALL_LIMIT).await? {
            let run_job = self.store.run_fields(&run_id).await?.remove("job");
            if job.is_none() || run_job.as_deref() == job {
                chosen.push(run_id);
            }
        }
        if let Some(job) = job
            && chosen.is_empty()
            && !self.store.is_declared(job).await?
        {
            return Err(ClientError::UnknownJob(job.to_owned()));
        }
        let mut retried = Vec::new();
        for run_id in chosen {
            // One retried by someone else meanwhile is no longer dead: skipped.
            if self.store.redrive_run(&run_id).await? {
                retried.push(run_id);
            }
        }
        Ok(retried)
    }

    /// Holds the namespace still for `duration` (while its Redis Cluster slot moves): nothing
    /// is planned, claimed or recorded until [`Client::release`] or the time runs out. Whether
    /// it was held already (the new duration replaces the old).
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// client.hold(std::time::Duration::from_secs(300)).await?;
    /// // ... move the namespace's slot ...
    /// client.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors.
    pub async fn hold(&self, duration: Duration) -> Result<bool, ClientError> {
        Ok(self.store.set_hold(Some(duration)).await?)
    }

    /// Ends a hold; whether there was one.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn release(&self) -> Result<bool, ClientError> {
        Ok(self.store.set_hold(None).await?)
    }

    /// Deletes the dead runs that died more than `older_than` ago (on this machine's clock),
    /// or every one; how many.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let purged = client.purge_dead(Some(std::time::Duration::from_secs(30 * 86_400))).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors.
    pub async fn purge_dead(&self, older_than: Option<Duration>) -> Result<u64, ClientError> {
        let cutoff = older_than.map(|age| {
            chrono::Utc::now().timestamp_millis()
                - i64::try_from(age.as_millis()).unwrap_or(i64::MAX / 2)
        });
        Ok(self.store.purge_dead(cutoff).await?)
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

/// When a run is due.
#[derive(Debug, Clone, Copy)]
enum Due {
    Now,
    /// This long from now on Redis's clock.
    After(Duration),
    /// At this time, ms; in the past only when allowed.
    At {
        ms: i64,
        past_ok: bool,
    },
}

/// What makes a run unique.
#[derive(Debug, Clone)]
enum Unique {
    Payload,
    Key(String),
}

/// A run being asked for: [`Client::enqueue`], then its settings, then [`RunRequest::send`].
#[must_use = "a request does nothing until it is sent"]
pub struct RunRequest<'a> {
    client: &'a Client,
    job: String,
    payload: Option<String>,
    priority: Option<Priority>,
    due: Due,
    unique: Option<Unique>,
    unique_for: Duration,
}

impl RunRequest<'_> {
    /// JSON for the run (a command's standard input, a handler's `payload`).
    ///
    /// # Errors
    /// [`ClientError::Payload`] when it is larger than a run may carry.
    pub fn payload(self, payload: &serde_json::Value) -> Result<Self, ClientError> {
        self.payload_text(payload.to_string())
    }

    /// JSON text for the run, as given (its white space and key order kept).
    ///
    /// # Errors
    /// [`ClientError::Payload`] when it is not JSON or larger than a run may carry.
    pub fn payload_text(mut self, text: impl Into<String>) -> Result<Self, ClientError> {
        let text = text.into();
        check_payload(&text)?;
        self.payload = Some(text);
        Ok(self)
    }

    /// Instead of the job's own priority.
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Due this long from now, on Redis's clock.
    pub fn after(mut self, delay: Duration) -> Self {
        self.due = Due::After(delay);
        self
    }

    /// Due at `due_ms` (ms since the epoch); a time before Redis's clock is refused unless
    /// `past_ok`, when the run is due at once.
    pub fn at(mut self, due_ms: i64, past_ok: bool) -> Self {
        self.due = Due::At {
            ms: due_ms,
            past_ok,
        };
        self
    }

    /// Refuses a second run of the job with the same payload for [`RunRequest::unique_for`].
    pub fn unique(mut self) -> Self {
        self.unique = Some(Unique::Payload);
        self
    }

    /// Refuses a second run of the job with the same `key` for [`RunRequest::unique_for`].
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique = Some(Unique::Key(key.into()));
        self
    }

    /// How long uniqueness holds (default an hour); makes the run unique by payload unless a
    /// key was given.
    pub fn unique_for(mut self, window: Duration) -> Self {
        self.unique.get_or_insert(Unique::Payload);
        self.unique_for = window;
        self
    }

    /// Creates the run.
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`], [`ClientError::Duplicate`], [`ClientError::InThePast`], or
    /// Redis errors.
    pub async fn send(self) -> Result<Submitted, ClientError> {
        let store = &self.client.store;
        let now_ms = store.now_ms().await?;
        let due_ms = match self.due {
            Due::Now => None,
            Due::After(delay) => {
                let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX / 2);
                Some(now_ms.saturating_add(delay_ms))
            }
            Due::At { ms, past_ok } => {
                if ms < now_ms && !past_ok {
                    return Err(ClientError::InThePast { due_ms: ms, now_ms });
                }
                Some(ms)
            }
        };
        let unique = self.unique.map(|unique| {
            let fingerprint = match unique {
                Unique::Key(key) => key_fingerprint(&self.job, &key),
                Unique::Payload => {
                    let value = self
                        .payload
                        .as_deref()
                        .and_then(|text| serde_json::from_str(text).ok())
                        .unwrap_or(serde_json::Value::Null);
                    payload_fingerprint(&self.job, &value)
                }
            };
            (fingerprint, self.unique_for)
        });
        let request = Enqueue {
            job: self.job,
            due_ms,
            payload: self.payload,
            priority: self.priority,
            unique,
        };
        match store.enqueue_run(&request).await? {
            Enqueued::Scheduled {
                run_id,
                due_ms,
                paused,
            } => Ok(Submitted {
                run_id,
                due_ms,
                now_ms,
                paused,
            }),
            Enqueued::UnknownJob => Err(ClientError::UnknownJob(request.job)),
            Enqueued::Duplicate { holder } => Err(ClientError::Duplicate {
                job: request.job,
                holder,
            }),
        }
    }
}
