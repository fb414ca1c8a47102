//! A run being asked for, from [`Client::enqueue`] to [`RunRequest::send`].

use std::time::Duration;

use super::{Client, ClientError, DEFAULT_UNIQUE_FOR, Published, Submitted, check_payload};
use crate::payload::object_problem;
use crate::schedule::Priority;
use crate::store::{Enqueue, Enqueued, key_fingerprint, payload_fingerprint};

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
    /// A trigger of the job, not an enqueue: recorded so.
    trigger: bool,
}

impl<'a> RunRequest<'a> {
    /// A run of `job`, due now, with the job's own priority, not unique.
    pub(super) fn new(client: &'a Client, job: String) -> Self {
        Self {
            client,
            job,
            payload: None,
            priority: None,
            due: Due::Now,
            unique: None,
            unique_for: DEFAULT_UNIQUE_FOR,
            trigger: false,
        }
    }
}

impl RunRequest<'_> {
    /// JSON for the run (a command's standard input, a handler's `payload`).
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let payload = serde_json::json!({ "image": "cat.png", "width": 320 });
    /// client.enqueue("thumbnail").payload(&payload)?.send().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::Payload`] when it is larger than a run may carry.
    pub fn payload(self, payload: &serde_json::Value) -> Result<Self, ClientError> {
        self.payload_text(payload.to_string())
    }

    /// JSON text for the run, as given (its white space and key order kept).
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// client.enqueue("thumbnail").payload_text(r#"{"image": "cat.png"}"#)?.send().await?;
    /// # Ok(())
    /// # }
    /// ```
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
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// use redcron::schedule::Priority;
    ///
    /// client.enqueue("thumbnail").priority(Priority::High).send().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn priority(mut self, priority: Priority) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Due this long from now, on Redis's clock.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// use std::time::Duration;
    ///
    /// client.enqueue("reminder").after(Duration::from_secs(15 * 60)).send().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn after(mut self, delay: Duration) -> Self {
        self.due = Due::After(delay);
        self
    }

    /// Due at `due_ms` (ms since the epoch); a time before Redis's clock is refused unless
    /// `past_ok`, when the run is due at once.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// let due = chrono::DateTime::parse_from_rfc3339("2026-07-01T09:00:00Z")?;
    /// // Refused with `ClientError::InThePast` once that time has gone.
    /// client.enqueue("report").at(due.timestamp_millis(), false).send().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn at(mut self, due_ms: i64, past_ok: bool) -> Self {
        self.due = Due::At {
            ms: due_ms,
            past_ok,
        };
        self
    }

    /// Refuses a second run of the job with the same payload for [`RunRequest::unique_for`].
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let payload = serde_json::json!({ "image": "cat.png" });
    /// // A second click within the hour gets `ClientError::Duplicate`, and no second run.
    /// client.enqueue("thumbnail").payload(&payload)?.unique().send().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unique(mut self) -> Self {
        self.unique = Some(Unique::Payload);
        self
    }

    /// Refuses a second run of the job with the same `key` for [`RunRequest::unique_for`].
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// // One invoice per order, whatever else the payload says.
    /// client.enqueue("invoice").unique_key("order-1234").send().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.unique = Some(Unique::Key(key.into()));
        self
    }

    /// How long uniqueness holds (default an hour); makes the run unique by payload unless a
    /// key was given.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// use std::time::Duration;
    ///
    /// let day = Duration::from_secs(24 * 3600);
    /// client.enqueue("digest").unique_key("user-42").unique_for(day).send().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn unique_for(mut self, window: Duration) -> Self {
        self.unique.get_or_insert(Unique::Payload);
        self.unique_for = window;
        self
    }

    /// Makes the run a trigger of its job, as `redcron trigger` of a job whose fires run once
    /// makes it: the run is marked `triggered`, and the action is recorded as a trigger (with
    /// who asked, [`Client::acting_as`]) rather than an enqueue.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// client.acting_as("alice").enqueue("report").trigger().send().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn trigger(mut self) -> Self {
        self.trigger = true;
        self
    }

    /// Creates the run.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let run = client.enqueue("thumbnail").send().await?;
    /// if run.paused {
    ///     // Created all the same: skipped unless the job is resumed before it is due.
    ///     eprintln!("{}: its job is paused", run.run_id);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`], [`ClientError::Duplicate`], [`ClientError::InThePast`],
    /// [`ClientError::Payload`] for a payload that is not a JSON object given to a workflow's
    /// job, or Redis errors.
    pub async fn send(self) -> Result<Submitted, ClientError> {
        let client = self.client;
        let store = &client.store;
        let now_ms = store.now_ms().await?;
        let acting = client.acting(self.trigger);
        let request = self.prepare(now_ms).await?;
        let enqueued = store.enqueue_run_by(&request, acting).await?;
        submitted(request.job, enqueued, now_ms)
    }

    /// The request as the store takes it, `now_ms` being Redis's clock: the due time worked
    /// out and checked, the payload checked against the job, the fingerprint made.
    ///
    /// # Errors
    /// [`ClientError::InThePast`], [`ClientError::Payload`] for a payload that is not a JSON
    /// object given to a workflow's job, or Redis errors.
    pub(super) async fn prepare(self, now_ms: i64) -> Result<Enqueue, ClientError> {
        let store = &self.client.store;
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
        // A workflow's payload must be an object: refused now rather than dead at its start.
        // The definition is read only for a payload that is not one.
        if let Some(problem) = self.payload.as_deref().and_then(object_problem)
            && Published::of(store, &self.job).await? == Some(Published::Workflow)
        {
            return Err(ClientError::Payload(problem));
        }
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
        Ok(Enqueue {
            job: self.job,
            due_ms,
            payload: self.payload,
            priority: self.priority,
            unique,
        })
    }
}

/// What the store's answer for a run of `job` means to the caller.
///
/// # Errors
/// [`ClientError::UnknownJob`], [`ClientError::EveryReplica`] or [`ClientError::Duplicate`].
pub(super) fn submitted(
    job: String,
    enqueued: Enqueued,
    now_ms: i64,
) -> Result<Submitted, ClientError> {
    match enqueued {
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
        Enqueued::UnknownJob => Err(ClientError::UnknownJob(job)),
        Enqueued::EveryReplica => Err(ClientError::EveryReplica(job)),
        Enqueued::Duplicate { holder } => Err(ClientError::Duplicate { job, holder }),
    }
}
