//! The API's workflow instances: what `workflow list`, `workflow status` and `workflow retry`
//! print with `--json`.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Segment;
use crate::cli::workflow::{paused_jobs_of, retry_document, workflow_document};
use crate::client::ClientError;
use crate::store::{WorkflowListing, WorkflowState};
use crate::web::body::{Body, NoFields};
use crate::web::query::{MAX_LIMIT, NoQuery, Params, Query, Takes, WORKFLOW};
use crate::web::{ApiError, Caller, Operator, WebState};

/// How many instances a listing holds unless told.
const DEFAULT_LIMIT: usize = 100;

/// The states an instance is filtered by: [`WorkflowState`]'s words.
const WORKFLOW_STATES: Takes = Takes::OneOf(&["running", "succeeded", "failed"]);

/// Which instances `/workflows` lists.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkflowsParams {
    /// Only instances of this workflow.
    pub(crate) workflow: Option<String>,
    /// Only instances in this state: `running`, `succeeded` or `failed`.
    pub(crate) state: Option<String>,
    /// How many at most.
    pub(crate) limit: Option<usize>,
}

impl Query for WorkflowsParams {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[
        ("workflow", WORKFLOW),
        ("state", WORKFLOW_STATES),
        ("limit", Takes::Limit),
    ];
}

/// The instances `params` asks for, newest first, and those that cannot be read.
///
/// # Errors
/// A state no instance is in, a name that is no workflow's, or Redis errors.
pub(crate) async fn list_workflows(
    state: &WebState,
    params: &WorkflowsParams,
) -> Result<WorkflowListing, ApiError> {
    let wanted = match params.state.as_deref().filter(|asked| !asked.is_empty()) {
        None => None,
        Some(asked) => Some(WorkflowState::parse(asked).ok_or_else(|| {
            ApiError::bad_request(
                "bad-query",
                format!("state \"{asked}\": an instance is running, succeeded or failed"),
            )
        })?),
    };
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
    let name = params.workflow.as_deref().filter(|name| !name.is_empty());
    // The state is not indexed: the newest instances are read, then those of the state kept,
    // so a rare state among many instances may list fewer than `limit`.
    let read = if wanted.is_some() { MAX_LIMIT } else { limit };
    let mut listing = state.client().workflows(name, read).await?;
    listing
        .instances
        .retain(|instance| wanted.is_none_or(|wanted| instance.state == wanted));
    listing.instances.truncate(limit);
    Ok(listing)
}

/// `workflow list --json`, with the instances that cannot be read named beside them.
pub(super) async fn workflows(
    _: Caller,
    State(state): State<WebState>,
    Params(params): Params<WorkflowsParams>,
) -> Result<Json<Value>, ApiError> {
    let listing = list_workflows(&state, &params).await?;
    let damaged: Vec<Value> = listing
        .damaged
        .iter()
        .map(|(id, problem)| json!({ "id": id, "problem": problem }))
        .collect();
    Ok(Json(json!({
        "workflows": listing.instances.iter().map(workflow_document).collect::<Vec<_>>(),
        "damaged": damaged,
    })))
}

/// One element of `workflow status --json`.
pub(super) async fn workflow(
    _: Caller,
    State(state): State<WebState>,
    Segment(id): Segment,
    Params(NoQuery {}): Params<NoQuery>,
) -> Result<Json<Value>, ApiError> {
    match state.client().workflow(&id).await? {
        Some(instance) => Ok(Json(workflow_document(&instance))),
        None => Err(ClientError::NoWorkflowInstance(id).into()),
    }
}

/// `workflow retry --json`.
pub(super) async fn retry(
    Operator(caller): Operator,
    State(state): State<WebState>,
    Segment(id): Segment,
    Body(NoFields {}): Body<NoFields>,
) -> Result<Json<Value>, ApiError> {
    let (steps, paused) = retry_workflow(&state, &caller, &id).await?;
    Ok(Json(retry_document(&id, &steps, &paused)))
}

/// Runs instance `id` again from its failed and skipped steps for `caller`, and logs who did:
/// those steps, and the paused jobs that would skip theirs again.
///
/// # Errors
/// No such instance, a step whose job no live replica declares, or Redis errors.
pub(crate) async fn retry_workflow(
    state: &WebState,
    caller: &Caller,
    id: &str,
) -> Result<(Vec<String>, Vec<String>), ApiError> {
    let client = state.client().acting_as(caller.name.clone());
    let steps = client.retry_workflow(id).await?;
    tracing::info!(
        "{} retried workflow instance {id} from steps {}",
        caller.name,
        steps.join(", ")
    );
    let paused = paused_jobs_of(&client, id, &steps).await?;
    Ok((steps, paused))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_states_a_query_takes_are_the_states_of_an_instance() {
        let words: Vec<&str> = WorkflowState::ALL
            .iter()
            .map(|state| state.as_str())
            .collect();
        let Takes::OneOf(taken) = WORKFLOW_STATES else {
            panic!("a state is one of some words");
        };
        assert_eq!(taken, words.as_slice());
    }
}
