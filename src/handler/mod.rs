//! What executes a claimed run: the built-in [`CommandHandler`] for jobs declared with a
//! `command`, the starter of a workflow for a workflow's own job, or a Rust handler registered
//! by job name (library mode).

mod command;
mod output;
mod supervisor;
mod workflow;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use chrono::{DateTime, Utc};
pub use command::CommandHandler;
pub(crate) use command::spawn_supervised;
use tokio_util::sync::CancellationToken;
pub(crate) use workflow::WorkflowStarter;
pub use workflow::object_problem;

use crate::schedule::Job;

/// The largest payload a run may carry, in bytes.
pub const MAX_PAYLOAD_BYTES: usize = 1024 * 1024;

/// Why `payload` cannot be handed to a handler, if it cannot: it must be JSON of at most
/// [`MAX_PAYLOAD_BYTES`]. Runs are written by other programs too (the library's bulk API, or
/// anything with access to Redis), so workers check what they read, not only what the CLI
/// accepts.
pub fn payload_problem(payload: &str) -> Option<String> {
    if payload.len() > MAX_PAYLOAD_BYTES {
        return Some(format!(
            "the payload is {} bytes: at most {MAX_PAYLOAD_BYTES} are accepted",
            payload.len()
        ));
    }
    serde_json::from_str::<serde::de::IgnoredAny>(payload)
        .err()
        .map(|error| format!("the payload is not valid JSON: {error}"))
}

/// A boxed, sendable future: what handlers return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One run as its handler sees it.
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The run id.
    pub run_id: String,
    /// The declared job, from this replica's own schedule files.
    pub job: Arc<Job>,
    /// This attempt's number, from 1.
    pub attempt: u32,
    /// The fire time of a cron run.
    pub fire_time: Option<DateTime<Utc>>,
    /// The payload of an ad-hoc run.
    pub payload: Option<String>,
    /// Cancelled when the run must stop (timeout, shutdown, lost lease): a handler should
    /// return soon after.
    pub stop: CancellationToken,
}

/// A run that completed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completed {
    /// The command's exit code, for handlers that have one.
    pub exit_code: Option<i32>,
    /// The tail of its output, kept with the run.
    pub output: String,
}

/// A run that failed, and whether trying again could help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunError {
    /// `false` for failures no retry can fix: the run goes straight to the dead letters.
    pub retryable: bool,
    /// What went wrong.
    pub message: String,
    /// The command's exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The tail of its output.
    pub output: String,
}

impl RunError {
    /// A failure worth retrying.
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            message: message.into(),
            exit_code: None,
            output: String::new(),
        }
    }

    /// A failure no retry can fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            retryable: false,
            ..Self::retryable(message)
        }
    }
}

/// What a handler reports.
pub type Outcome = Result<Completed, RunError>;

/// Executes runs of a job.
pub trait Handler: Send + Sync + 'static {
    /// Runs `run` to completion, or until `run.stop` is cancelled.
    fn call(&self, run: RunContext) -> BoxFuture<Outcome>;
}

impl<F, Fut> Handler for F
where
    F: Fn(RunContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    fn call(&self, run: RunContext) -> BoxFuture<Outcome> {
        Box::pin(self(run))
    }
}

/// The handlers of a replica: registered ones by job name, the command handler for the rest.
#[derive(Clone, Default)]
pub struct Handlers {
    by_job: HashMap<String, Arc<dyn Handler>>,
}

impl Handlers {
    /// Only the command handler.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs `job` with `handler` instead of its command.
    pub fn register(&mut self, job: impl Into<String>, handler: impl Handler) {
        self.by_job.insert(job.into(), Arc::new(handler));
    }

    /// The handler for `job`.
    pub fn for_job(&self, job: &str) -> Arc<dyn Handler> {
        self.by_job
            .get(job)
            .cloned()
            .unwrap_or_else(|| Arc::new(CommandHandler::default()))
    }
}
