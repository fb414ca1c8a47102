//! The HTTP API, `/api/v1/...`: the command line's reads and actions as JSON, in the shapes of
//! its `--json` (docs/cli.md), described by docs/openapi.json.

mod actions;
mod reads;
mod workflows;

pub(super) use actions::trigger_job;
pub(super) use reads::{
    JOB_STATES, RUN_STATES, RunsParams, Status, archived_run, jobs_matching, no_method, no_route,
    read_runs, read_status,
};
pub(super) use workflows::{WorkflowsParams, list_workflows, retry_workflow};

use axum::Router;
use axum::extract::{FromRequestParts, Path};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::{get, post};

use super::query::{LONGEST_ID, SHOWN_PATH, shown};
use super::{ApiError, WebState};

/// The API's routes, relative to `/api/v1`: reads are GETs, actions POSTs.
pub(super) fn routes() -> Router<WebState> {
    Router::new()
        .route("/status", get(reads::status))
        .route("/jobs", get(reads::jobs))
        .route("/jobs/{job}", get(reads::job))
        .route("/jobs/{job}/pause", post(actions::pause))
        .route("/jobs/{job}/resume", post(actions::resume))
        .route("/jobs/{job}/trigger", post(actions::trigger))
        .route("/jobs/{job}/enqueue", post(actions::enqueue))
        .route("/runs", get(reads::runs))
        .route("/runs/{*id}", get(reads::run))
        .route("/history", get(reads::history))
        .route("/dead", get(reads::dead))
        .route("/dead/retry", post(actions::retry_dead_runs))
        .route("/dead/purge", post(actions::purge_dead))
        .route("/dead/{id}", get(reads::dead_run))
        .route("/dead/{id}/retry", post(actions::retry_dead))
        .route("/workflows", get(workflows::workflows))
        .route("/workflows/{id}", get(workflows::workflow))
        .route("/workflows/{id}/retry", post(workflows::retry))
}

/// A route's one path parameter: a job's name, a run's or a workflow instance's id. One that
/// is not UTF-8, holds a control character or is longer than any id names nothing redcron
/// makes, and is the API's 404 `no-route` (a page draws it in the layout) in the house's
/// words, where axum's own refusal is a plain-text 400 in the HTTP library's.
pub(super) struct Segment(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Segment {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let path = shown(parts.uri.path(), SHOWN_PATH);
        let no_route = |why: String| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no-route",
                format!("no route {path}: it names no job, run or instance ({why})"),
            )
        };
        let Path(segment) = Path::<String>::from_request_parts(parts, state)
            .await
            .map_err(|_| no_route("its percent-escapes are not UTF-8 text".to_owned()))?;
        if let Some(control) = segment.chars().find(|character| character.is_control()) {
            return Err(no_route(format!(
                "it holds the control character U+{:04X}",
                u32::from(control)
            )));
        }
        if segment.len() > LONGEST_ID {
            return Err(no_route(format!(
                "{} bytes, where the longest id is {LONGEST_ID}",
                segment.len()
            )));
        }
        Ok(Segment(segment))
    }
}
