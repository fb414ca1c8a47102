//! The handler of a workflow's own job: each of its runs (a cron fire, a trigger) starts one
//! instance of the workflow, whose id is the run's id.

use crate::handler::{BoxFuture, Completed, Handler, Outcome, RunContext, RunError};
use crate::payload::object_problem;
use crate::store::{Store, WorkflowStart};

/// Starts the workflow of the run's job with the run's payload.
pub(crate) struct WorkflowStarter {
    /// Where the instance is written.
    pub(crate) store: Store,
}

impl Handler for WorkflowStarter {
    fn call(&self, run: RunContext) -> BoxFuture<Outcome> {
        let store = self.store.clone();
        Box::pin(async move {
            if let Some(problem) = run.payload.as_deref().and_then(object_problem) {
                return Err(RunError::permanent(problem));
            }
            let started = store
                .start_workflow(
                    &run.job.name,
                    &run.run_id,
                    run.payload.as_deref(),
                    Some(run.job.as_ref()),
                )
                .await
                .map_err(|error| RunError::retryable(format!("starting the workflow: {error}")))?;
            let output = match started {
                WorkflowStart::Started { .. } => format!("started workflow {}", run.run_id),
                // A start tried again after its outcome was lost: the instance is there.
                WorkflowStart::Exists { .. } => format!("workflow {} was started", run.run_id),
                // Not a workflow only if the replica's own definition were none: the published
                // one is a job's until the leader publishes the workflow.
                WorkflowStart::UnknownWorkflow | WorkflowStart::NotAWorkflow => {
                    return Err(RunError::retryable(format!(
                        "workflow {} is not published yet: no live replica declares it",
                        run.job.name
                    )));
                }
                WorkflowStart::UndeclaredJob(job) => {
                    return Err(RunError::retryable(format!(
                        "no live replica declares job {job}, a step of workflow {}",
                        run.job.name
                    )));
                }
            };
            Ok(Completed {
                exit_code: None,
                output,
            })
        })
    }
}
