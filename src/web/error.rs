//! The web room's errors: what a request gets back (a status and a stable code), and why the
//! server could not start.

use std::path::PathBuf;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use thiserror::Error;

use crate::client::ClientError;
use crate::store::StoreError;

/// Why a request was refused or failed: answered as `{"error": {"code", "message"}}` with its
/// status. The codes are stable (docs/web.md lists them); the messages name the job or run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, kebab-case code a program can match on.
    pub code: &'static str,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// An error of `status` and `code` saying `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// A request that is malformed: a bad query, body or time.
    pub(crate) fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// No run `id` to show.
    pub(crate) fn unknown_run(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown-run",
            format!("no run \"{id}\" (or its record expired after the retention period)"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        let status = self.status;
        // Kept beside the body, so that a page's refusal is drawn in the layout instead
        // (`pages::html_errors`), and the API's stays this JSON.
        let mut response = (status, Json(body)).into_response();
        response.extensions_mut().insert(self);
        response
    }
}

/// The client's refusals as the API answers them: the caller's mistake is a 4xx with the
/// client's own wording, and Redis out of reach is a 503 to retry.
impl From<ClientError> for ApiError {
    fn from(error: ClientError) -> Self {
        let (status, code) = match &error {
            ClientError::UnknownJob(_) => (StatusCode::NOT_FOUND, "unknown-job"),
            ClientError::NoDeadRun(_) => (StatusCode::NOT_FOUND, "unknown-run"),
            ClientError::UnknownReplica { .. } => (StatusCode::NOT_FOUND, "unknown-replica"),
            ClientError::NoWorkflowInstance(_) => (StatusCode::NOT_FOUND, "unknown-workflow"),
            ClientError::UnknownWorkflow(_) => (StatusCode::NOT_FOUND, "unknown-workflow"),
            ClientError::Payload(_) => (StatusCode::BAD_REQUEST, "bad-payload"),
            ClientError::InThePast { .. } => (StatusCode::BAD_REQUEST, "bad-time"),
            ClientError::BadCursor(_) => (StatusCode::BAD_REQUEST, "bad-cursor"),
            ClientError::EveryReplica(_) | ClientError::NotAWorkflow(_) => {
                (StatusCode::BAD_REQUEST, "not-enqueueable")
            }
            ClientError::NotATarget { .. } => (StatusCode::BAD_REQUEST, "not-a-target"),
            ClientError::Duplicate { .. } => (StatusCode::CONFLICT, "unique-conflict"),
            ClientError::JobPaused { .. } => (StatusCode::CONFLICT, "job-paused"),
            ClientError::JobUnknown { .. }
            | ClientError::UndeclaredStep { .. }
            | ClientError::RetryUndeclared { .. }
            | ClientError::NoTarget(_) => (StatusCode::CONFLICT, "not-declared"),
            ClientError::DamagedDeadRun { .. } => (StatusCode::CONFLICT, "damaged-run"),
            ClientError::Store(store) => return store_error(store),
        };
        Self::new(status, code, error.to_string())
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        store_error(&error)
    }
}

/// A store failure as the API answers it: Redis out of reach, held or refusing is a 503 that a
/// retry may cure; data redcron did not write is a 500 that names it.
fn store_error(error: &StoreError) -> ApiError {
    let code = match error {
        StoreError::Redis { .. } => "redis-unavailable",
        StoreError::Held { .. } => "namespace-held",
        StoreError::Forbidden { .. } => "redis-forbidden",
        StoreError::Reply { .. } | StoreError::Namespace(_) | StoreError::Undeclared { .. } => {
            return ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "damaged-data",
                error.to_string(),
            );
        }
    };
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, error.to_string())
}

/// Why `redcron web` could not start.
#[derive(Debug, Error)]
pub enum WebError {
    /// The auth file could not be read.
    #[error("reading the auth file {path}: {source}")]
    ReadAuthFile {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The auth file says something wrong.
    #[error("the auth file {path}: {problem}")]
    AuthFile {
        /// The file.
        path: PathBuf,
        /// What is wrong, with its line where TOML tells it.
        problem: String,
    },
    /// The base path is not one a URL can start with.
    #[error(
        "--base-path {0:?}: a base path starts with '/', does not end with one, holds only \
         letters, digits and '-', '_', '.', '/', and no empty, '.' or '..' segment"
    )]
    BasePath(String),
}
