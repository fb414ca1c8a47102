//! Workflow instances: started, read, retried.

use super::{Client, ClientError, Published, check_payload};
use crate::payload::object_problem;
use crate::store::{WorkflowInstance, WorkflowListing, WorkflowRetry, WorkflowStart, new_run_id};

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
    /// [`ClientError::UnknownWorkflow`], [`ClientError::NotAWorkflow`],
    /// [`ClientError::UndeclaredStep`],
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
        match self.store.start_workflow(name, &id, payload, None).await? {
            WorkflowStart::Started { started_ms } | WorkflowStart::Exists { started_ms } => {
                Ok(StartedWorkflow { id, started_ms })
            }
            // Told apart by the start's own reading of the definition: one read after it could
            // meet the workflow published since, and call it a job.
            WorkflowStart::UnknownWorkflow => Err(ClientError::UnknownWorkflow(name.to_owned())),
            WorkflowStart::NotAWorkflow => Err(ClientError::NotAWorkflow(name.to_owned())),
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
    /// [`ClientError::NoWorkflowInstance`]; [`ClientError::RetryUndeclared`] when no live
    /// replica declares the job of a step to run again (nothing is changed: the step would
    /// fail again at once); or Redis errors.
    pub async fn retry_workflow(&self, id: &str) -> Result<Vec<String>, ClientError> {
        match self
            .store
            .retry_workflow_by(id, self.actor.as_deref())
            .await?
        {
            WorkflowRetry::Retried(steps) => Ok(steps),
            WorkflowRetry::Missing => Err(ClientError::NoWorkflowInstance(id.to_owned())),
            WorkflowRetry::UndeclaredJob { step, job } => Err(ClientError::RetryUndeclared {
                id: id.to_owned(),
                step,
                job,
            }),
        }
    }

    /// The newest `limit` instances, of workflow `name` only when given, newest first.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// for instance in client.workflows(Some("images"), 20).await?.instances {
    ///     println!("{} {}", instance.id, instance.state);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownWorkflow`] when `name` has no instance and no live replica declares
    /// a workflow of that name (a typo must not read as "no instances"),
    /// [`ClientError::NotAWorkflow`] when it is a job's, or Redis errors.
    pub async fn workflows(
        &self,
        name: Option<&str>,
        limit: usize,
    ) -> Result<WorkflowListing, ClientError> {
        let listing = self.store.workflows(name, limit).await?;
        if let Some(name) = name
            && listing.instances.is_empty()
            && listing.damaged.is_empty()
        {
            let kind = Published::of(&self.store, name).await?;
            if kind != Some(Published::Workflow) {
                return Err(Published::no_workflow(kind, name));
            }
        }
        Ok(listing)
    }
}
