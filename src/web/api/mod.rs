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
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::routing::{get, post};
use serde::de::DeserializeOwned;

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
        .route("/runs/{id}", get(reads::run))
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

/// A route's JSON body, optional: none (or only white space) is `T::default()`, and one that
/// is not what the route takes is a 400 in the API's error shape, naming what is wrong.
pub(super) struct Body<T>(pub T);

impl<T: DeserializeOwned + Default, S: Send + Sync> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| ApiError::bad_request("bad-body", rejection.body_text()))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body(T::default()));
        }
        serde_json::from_slice(&bytes).map(Body).map_err(|error| {
            ApiError::bad_request(
                "bad-body",
                format!("the body is not the JSON this route takes: {error}"),
            )
        })
    }
}

/// A route's one path parameter: a job's name, a run's or a workflow instance's id. One that
/// is not UTF-8, or longer than any id, names nothing redcron makes, and is the API's 404
/// `no-route` (a page draws it in the layout) where axum's own refusal is a plain-text 400.
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
            .map_err(|rejection| no_route(rejection.body_text()))?;
        if segment.len() > LONGEST_ID {
            return Err(no_route(format!(
                "{} bytes, where the longest id is {LONGEST_ID}",
                segment.len()
            )));
        }
        Ok(Segment(segment))
    }
}
