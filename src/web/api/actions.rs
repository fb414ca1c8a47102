//! The API's actions: pause, resume, trigger, enqueue, retry and purge, each an [`Operator`]'s
//! POST answered with what the command line prints with `--json`.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};

use super::Segment;
use crate::cli::dead::retried_document;
use crate::cli::enqueue::{
    fired_document, live_declarers, submitted_document, within_delay, within_horizon,
    within_uniqueness,
};
use crate::cli::pause::pause_document;
use crate::client::{Client, DeadRetried, RunRequest};
use crate::schedule::Priority;
use crate::store::TriggerTargets;
use crate::web::body::{Body, Field, Fields, NoFields};
use crate::web::query::{LONGEST_ID, LONGEST_NAME};
use crate::web::{ApiError, Operator, WebState};

/// `pause --json`.
pub(super) async fn pause(
    Operator(caller): Operator,
    State(state): State<WebState>,
    Segment(job): Segment,
    Body(NoFields {}): Body<NoFields>,
) -> Result<Json<Value>, ApiError> {
    let changed = state.client().acting_as(caller.name).pause(&job).await?;
    Ok(Json(pause_document(&job, true, changed)))
}

/// `resume --json`.
pub(super) async fn resume(
    Operator(caller): Operator,
    State(state): State<WebState>,
    Segment(job): Segment,
    Body(NoFields {}): Body<NoFields>,
) -> Result<Json<Value>, ApiError> {
    let changed = state.client().acting_as(caller.name).resume(&job).await?;
    Ok(Json(pause_document(&job, false, changed)))
}

/// What a trigger carries: both optional, as `redcron trigger`'s options are.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TriggerBody {
    /// The run's payload, any JSON value.
    payload: Option<Value>,
    priority: Option<Priority>,
}

impl Fields for TriggerBody {
    const FIELDS: &'static [Field] = &[PAYLOAD, PRIORITY];
}

/// A run's payload: any JSON value.
const PAYLOAD: Field = Field::new("payload", "any JSON value");

/// A run's priority.
const PRIORITY: Field = Field::new("priority", "one of high, normal, low");

/// A span or instant in milliseconds.
const MILLISECONDS: &str = "a whole number of milliseconds";

/// `trigger --json`: a fire now, one run per target for a job on every replica, else one run.
pub(super) async fn trigger(
    Operator(caller): Operator,
    State(state): State<WebState>,
    Segment(job): Segment,
    Body(body): Body<TriggerBody>,
) -> Result<Json<Value>, ApiError> {
    let payload = payload_text(body.payload.as_ref())?;
    let client = state.client().acting_as(caller.name);
    trigger_job(&client, &job, payload, body.priority).await
}

/// A fire of `job` now, as `redcron trigger` makes it: one run per live target for a job on
/// every replica, else one ad-hoc run; answered as `trigger --json` prints it. The API's
/// route and the console's form both trigger through it.
///
/// # Errors
/// An unknown job, a payload that is no JSON, or Redis errors.
pub(crate) async fn trigger_job(
    client: &Client,
    job: &str,
    payload: Option<String>,
    priority: Option<Priority>,
) -> Result<Json<Value>, ApiError> {
    // The replicas and their declarations are all a trigger needs: no other job's definition.
    let overview = client.job_overview(job).await?;
    let live = live_declarers(&overview, job);
    let fired = client
        .trigger_fire(
            job,
            payload.as_deref(),
            priority,
            TriggerTargets::Each(&live),
        )
        .await?;
    if let Some(fired) = fired {
        return Ok(Json(fired_document(job, &fired, Some(&live))));
    }
    submit(client, job, payload, priority, |request| request.trigger()).await
}

/// What an enqueue carries: `redcron enqueue`'s options, times in ms.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EnqueueBody {
    /// The run's payload, any JSON value.
    payload: Option<Value>,
    priority: Option<Priority>,
    /// Due this long from now.
    delay_ms: Option<u64>,
    /// Due at this instant, ms since the epoch (refused in the past unless `past_ok`).
    at_ms: Option<i64>,
    #[serde(default)]
    past_ok: bool,
    /// Refused while another run of the job with the same payload is due or running.
    #[serde(default)]
    unique: bool,
    /// Refused while another run with this key is due or running.
    unique_key: Option<String>,
    /// How long the uniqueness holds.
    unique_for_ms: Option<u64>,
}

impl Fields for EnqueueBody {
    const FIELDS: &'static [Field] = &[
        PAYLOAD,
        PRIORITY,
        Field::new("delay_ms", MILLISECONDS),
        Field::new("at_ms", "milliseconds since the epoch, a whole number"),
        Field::new("past_ok", "true or false"),
        Field::new("unique", "true or false"),
        Field::text("unique_key", "a string of at most 256 bytes", LONGEST_ID),
        Field::new("unique_for_ms", MILLISECONDS),
    ];
}

/// `enqueue --json`: one run, later or now, optionally unique.
pub(super) async fn enqueue(
    Operator(caller): Operator,
    State(state): State<WebState>,
    Segment(job): Segment,
    Body(body): Body<EnqueueBody>,
) -> Result<Json<Value>, ApiError> {
    if body.delay_ms.is_some() && body.at_ms.is_some() {
        return Err(ApiError::bad_request(
            "bad-time",
            "give delay_ms or at_ms, not both",
        ));
    }
    // As `enqueue --in` and `--at` are: a run due much further out would be a typo, and one
    // past what a Redis score holds exactly (about 2^53 ms) would stop every listing of the
    // due runs from reading their due times.
    let horizon = match (body.delay_ms, body.at_ms) {
        (Some(delay), _) => {
            within_delay(Duration::from_millis(delay), &format!("delay_ms {delay}"))
        }
        (_, Some(at_ms)) => {
            within_horizon(at_ms, &at_ms.to_string()).map_err(|problem| format!("at_ms {problem}"))
        }
        (None, None) => Ok(()),
    };
    horizon.map_err(|problem| ApiError::bad_request("bad-time", problem))?;
    if let Some(window) = body.unique_for_ms {
        within_uniqueness(
            Duration::from_millis(window),
            &format!("unique_for_ms {window}"),
        )
        .map_err(|problem| ApiError::bad_request("bad-time", problem))?;
    }
    let payload = payload_text(body.payload.as_ref())?;
    submit(
        &state.client().acting_as(caller.name),
        &job,
        payload,
        body.priority,
        |mut request| {
            if let Some(delay) = body.delay_ms {
                request = request.after(Duration::from_millis(delay));
            }
            if let Some(at_ms) = body.at_ms {
                request = request.at(at_ms, body.past_ok);
            }
            if body.unique {
                request = request.unique();
            }
            if let Some(key) = body.unique_key {
                request = request.unique_key(key);
            }
            if let Some(window) = body.unique_for_ms {
                request = request.unique_for(Duration::from_millis(window));
            }
            request
        },
    )
    .await
}

/// Makes one ad-hoc run of `job` as `settings` say, answered as `enqueue --json` prints it.
async fn submit(
    client: &Client,
    job: &str,
    payload: Option<String>,
    priority: Option<Priority>,
    settings: impl FnOnce(RunRequest<'_>) -> RunRequest<'_>,
) -> Result<Json<Value>, ApiError> {
    let mut request = client.enqueue(job);
    if let Some(text) = payload {
        request = request.payload_text(text)?;
    }
    if let Some(priority) = priority {
        request = request.priority(priority);
    }
    let submitted = settings(request).send().await?;
    // Read after the run exists: a failure here must not hide its id.
    let declared_by = client
        .job_overview(job)
        .await
        .ok()
        .map(|overview| live_declarers(&overview, job));
    Ok(Json(submitted_document(
        job,
        &submitted.run_id,
        submitted.due_ms,
        submitted.paused,
        declared_by.as_deref(),
    )))
}

/// The payload as the run carries it: the JSON value's text.
fn payload_text(payload: Option<&Value>) -> Result<Option<String>, ApiError> {
    payload
        .map(|value| {
            serde_json::to_string(value)
                .map_err(|error| ApiError::bad_request("bad-payload", error.to_string()))
        })
        .transpose()
}

/// `dead retry ID --json`.
pub(super) async fn retry_dead(
    Operator(caller): Operator,
    State(state): State<WebState>,
    Segment(id): Segment,
    Body(NoFields {}): Body<NoFields>,
) -> Result<Json<Value>, ApiError> {
    state
        .client()
        .acting_as(caller.name)
        .retry_dead(&id)
        .await?;
    Ok(Json(retried_document(&DeadRetried {
        retried: vec![id],
        ..DeadRetried::default()
    })))
}

/// Which dead runs a retry of many re-drives: one job's, or every one when told so, as the
/// console's confirm step and `dead retry --all` ask for it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RetryFilter {
    /// Only this job's.
    job: Option<String>,
    /// Every dead run, of every job.
    #[serde(default)]
    all: bool,
}

impl Fields for RetryFilter {
    const FIELDS: &'static [Field] = &[
        Field::text("job", "a job's name of at most 128 bytes", LONGEST_NAME),
        Field::new("all", "true or false"),
    ];
}

/// `dead retry --all [--job JOB] --json`: a body that names no job and does not say `all` is
/// refused, so that no empty body retries every dead run, and so is one that says both, which
/// would retry one job's where it asked for every one.
pub(super) async fn retry_dead_runs(
    Operator(caller): Operator,
    State(state): State<WebState>,
    Body(body): Body<RetryFilter>,
) -> Result<Json<Value>, ApiError> {
    if body.job.is_none() && !body.all {
        return Err(ApiError::bad_request(
            "bad-body",
            "name the dead runs to retry: {\"job\": JOB} for one job's, {\"all\": true} for \
             every one",
        ));
    }
    if body.job.is_some() && body.all {
        return Err(ApiError::bad_request(
            "bad-body",
            "give one of job and all: {\"job\": JOB} for one job's dead runs, {\"all\": true} \
             for every one",
        ));
    }
    let outcome = state
        .client()
        .acting_as(caller.name)
        .retry_dead_runs(body.job.as_deref())
        .await?;
    Ok(Json(retried_document(&outcome)))
}

/// Which dead runs a purge deletes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PurgeFilter {
    /// Only those that died longer ago than this; every one when absent.
    older_than_ms: Option<u64>,
}

impl Fields for PurgeFilter {
    const FIELDS: &'static [Field] = &[Field::new("older_than_ms", MILLISECONDS)];
}

/// `dead purge --json`.
pub(super) async fn purge_dead(
    Operator(caller): Operator,
    State(state): State<WebState>,
    Body(body): Body<PurgeFilter>,
) -> Result<Json<Value>, ApiError> {
    let purged = state
        .client()
        .acting_as(caller.name)
        .purge_dead(body.older_than_ms.map(Duration::from_millis))
        .await?;
    Ok(Json(json!({ "purged": purged })))
}
