//! What executes a claimed run: the built-in [`CommandHandler`] for jobs declared with a
//! `command`, or a Rust handler registered by job name (library mode). A workflow's own job is
//! the engine's to run: its handler starts the workflow in the store.

mod command;
mod live;
mod output;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
pub use command::CommandHandler;
pub use live::{CUT_MARK, LiveOutput, OUTPUT_TAIL_BYTES};
use tokio_util::sync::CancellationToken;

use crate::schedule::Job;

/// A boxed, sendable future: what handlers return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One run as its handler sees it.
///
/// A handler that honours `stop`:
///
/// ```
/// use std::time::Duration;
///
/// use redcron::handler::{Completed, Outcome, RunContext, RunError};
///
/// async fn resize(run: RunContext) -> Outcome {
///     let image = run.payload.ok_or_else(|| RunError::permanent("which image?"))?;
///     tokio::select! {
///         () = tokio::time::sleep(Duration::from_secs(2)) => {}
///         // Past its stop grace, the worker drops a handler that did not return.
///         () = run.stop.cancelled() => return Err(RunError::retryable("stopped")),
///     }
///     Ok(Completed { output: format!("resized {image}"), ..Completed::default() })
/// }
/// ```
#[derive(Debug, Clone)]
pub struct RunContext {
    /// The run id.
    pub run_id: String,
    /// The declared job, from this replica's own schedule files.
    pub job: Arc<Job>,
    /// This attempt's number, from 1.
    pub attempt: u32,
    /// The fire time of a cron run; for a run triggered or enqueued, when it was (the moment
    /// it was asked for, as a fire is asked for by the clock). `None` only for a damaged record.
    pub fire_time: Option<DateTime<Utc>>,
    /// The payload of an ad-hoc run.
    pub payload: Option<String>,
    /// Cancelled when the run must stop (timeout, shutdown, lost lease): a handler should
    /// return soon after; one that has not within its [`Handler::stop_grace`] is dropped.
    pub stop: CancellationToken,
    /// The run's output so far, published while it runs (`redcron runs show --follow`): the
    /// command handler pushes its command's output here; a registered handler may push its
    /// own, or nothing, and its run then shows no output until it ends.
    pub output: LiveOutput,
}

/// A run that completed.
///
/// ```
/// use redcron::handler::Completed;
///
/// // Kept with the run, for `redcron history` and `redcron runs show`.
/// let done = Completed { output: "resized 3 images".to_owned(), ..Completed::default() };
/// assert_eq!(done.exit_code, None);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Completed {
    /// The command's exit code, for handlers that have one.
    pub exit_code: Option<i32>,
    /// The tail of its output, kept with the run.
    pub output: String,
}

/// A run that failed, and whether trying again could help.
///
/// ```
/// use redcron::handler::RunError;
///
/// let error = RunError {
///     exit_code: Some(2),
///     output: "usage: resize IMAGE".to_owned(),
///     ..RunError::permanent("bad arguments")
/// };
/// assert!(!error.retryable);
/// ```
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
    ///
    /// ```
    /// use redcron::handler::RunError;
    ///
    /// // The job's `retries` and `backoff` decide when, and whether, it runs again.
    /// let error = RunError::retryable("the image server answered 503");
    /// assert!(error.retryable);
    /// assert_eq!(error.message, "the image server answered 503");
    /// ```
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            retryable: true,
            message: message.into(),
            exit_code: None,
            output: String::new(),
        }
    }

    /// A failure no retry can fix.
    ///
    /// ```
    /// use redcron::handler::RunError;
    ///
    /// // Straight to the dead letters, whatever retries the job has left.
    /// let error = RunError::permanent("the payload names no image");
    /// assert!(!error.retryable);
    /// ```
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            retryable: false,
            ..Self::retryable(message)
        }
    }
}

/// What a handler reports.
///
/// ```
/// use redcron::handler::{Completed, Outcome, RunError};
///
/// fn outcome(copied: std::io::Result<u64>) -> Outcome {
///     match copied {
///         Ok(bytes) => Ok(Completed { output: format!("{bytes} bytes"), ..Completed::default() }),
///         Err(error) => Err(RunError::retryable(error.to_string())),
///     }
/// }
/// assert_eq!(outcome(Ok(3)).unwrap().output, "3 bytes");
/// ```
pub type Outcome = Result<Completed, RunError>;

/// Executes runs of a job.
///
/// Closures `Fn(RunContext) -> impl Future<Output = Outcome>` are handlers; a type of its own
/// suits a handler with state:
///
/// ```
/// use redcron::handler::{BoxFuture, Completed, Handler, Outcome, RunContext};
///
/// struct Resize {
///     quality: u8,
/// }
///
/// impl Handler for Resize {
///     fn call(&self, run: RunContext) -> BoxFuture<Outcome> {
///         // The future outlives `&self`: it takes what it needs.
///         let quality = self.quality;
///         Box::pin(async move {
///             let output = format!("run {} at quality {quality}", run.run_id);
///             Ok(Completed { output, ..Completed::default() })
///         })
///     }
/// }
/// ```
pub trait Handler: Send + Sync + 'static {
    /// Runs `run` to completion, or until `run.stop` is cancelled.
    fn call(&self, run: RunContext) -> BoxFuture<Outcome>;

    /// How long the handler has to return once its run's `stop` is cancelled. Past it, the
    /// worker drops the handler's future, which ends it at its next `.await` (work it handed
    /// to a thread of its own goes on), and records the run as stopped: a job's `timeout` and
    /// a replica's shutdown hold even for a handler that never looks at `stop`.
    fn stop_grace(&self) -> Duration {
        DEFAULT_STOP_GRACE
    }
}

/// How long a handler has to return once told to stop, unless it says otherwise
/// ([`Handler::stop_grace`]).
pub const DEFAULT_STOP_GRACE: Duration = Duration::from_secs(10);

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
///
/// ```
/// use redcron::handler::{Completed, Handlers, RunContext};
///
/// let mut handlers = Handlers::new();
/// handlers.register("resize", |_run: RunContext| async { Ok(Completed::default()) });
/// // Any other job runs its command.
/// let backup = handlers.for_job("backup");
/// ```
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
