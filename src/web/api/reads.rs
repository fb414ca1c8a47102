//! The API's reads: what `status`, `jobs`, `runs`, `history` and `dead` print with `--json`.

use std::collections::HashSet;

use axum::Json;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use serde::Deserialize;
use serde_json::{Value, json};

use tracing::warn;

use super::Segment;
use crate::archive::read::{ArchivedRun, ReadError, Reader};
use crate::cli::dead::dead_document;
use crate::cli::history::history_document;
use crate::cli::runs::{output_so_far, run_document, shown_run_document};
use crate::cli::status::{
    RecentEvents, StatusRead, drifting_jobs, first_after, named_job_document, names_holding,
    paused_jobs, published_names,
};
use crate::cli::times::parse_instant;
use crate::client::{RunsCursor, RunsQuery};
use crate::store::{Overview, RunState};
use crate::web::query::{
    CURSOR, INSTANT, JOB, MAX_LIMIT, NoQuery, Params, QUEUE, Query, REPLICA, RUN_ID, SHOWN_PATH,
    Takes, shown,
};
use crate::web::{ApiError, Caller, WebState};

/// How many entries one page of a list holds unless told.
const DEFAULT_LIMIT: usize = 100;

/// `status --json`.
pub(super) async fn status(
    _: Caller,
    State(state): State<WebState>,
    Params(NoQuery {}): Params<NoQuery>,
) -> Result<Json<Value>, ApiError> {
    let read = StatusRead::read_knowing(state.client(), state.definitions())
        .await
        .map_err(|unread| unread.error)?;
    Ok(Json(read.document()))
}

/// What `status` reads, for a page that shows more of it than its document and none of its
/// jobs.
pub(crate) struct Status {
    /// What `status --json` prints but its `jobs` (see [`StatusRead::summary`]).
    pub(crate) document: Value,
    /// The newest events it was made of, grouped by job.
    pub(crate) events: RecentEvents,
    /// The namespace's state it was made of.
    pub(crate) overview: Overview,
}

/// What `status` reads, and what it prints with `--json` but each job's state: the overview
/// page's read, which shows no job's next fire.
///
/// # Errors
/// Redis out of reach, or data redcron did not write.
pub(crate) async fn read_status(state: &WebState) -> Result<Status, ApiError> {
    let read = StatusRead::read_knowing(state.client(), state.definitions())
        .await
        .map_err(|unread| unread.error)?;
    Ok(Status {
        document: read.summary(),
        events: read.events,
        overview: read.overview,
    })
}

/// Which jobs `/jobs` lists: every one unless told, as `jobs --json` does.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobsParams {
    /// Only the jobs whose name holds this, in any case.
    q: Option<String>,
    /// Only the jobs in this state: `paused`, or `drifting` (declared differently by some
    /// replicas), as the jobs page filters them.
    state: Option<String>,
    /// Only the jobs after this one in the listing's order (the last name of the page before):
    /// a keyset, which need not name a job still.
    after: Option<String>,
    /// At most this many jobs.
    limit: Option<usize>,
}

impl Query for JobsParams {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[
        ("q", JOB),
        ("state", JOB_STATES),
        ("after", JOB),
        ("limit", Takes::Limit),
    ];
}

/// The states a job is filtered by, on the jobs page and `/jobs`.
pub(crate) const JOB_STATES: Takes = Takes::OneOf(&["paused", "drifting"]);

/// Those of `names` (published, in the listing's order) whose name holds `q` in any case and
/// that are in `state` (one of [`JOB_STATES`], or any when empty): what the jobs page and
/// `/jobs` list. Drift is found only when asked for, as it reads every job's definition.
pub(crate) fn jobs_matching<'a>(
    overview: &Overview,
    names: &[&'a str],
    q: &str,
    state: &str,
) -> Vec<&'a str> {
    let paused = paused_jobs(overview);
    let drifting: HashSet<String> = if state == "drifting" {
        drifting_jobs(overview)
            .into_iter()
            .map(|drift| drift.job)
            .collect()
    } else {
        HashSet::new()
    };
    names_holding(names, q)
        .into_iter()
        .filter(|name| match state {
            "paused" => paused.contains(name),
            "drifting" => drifting.contains(*name),
            _ => true,
        })
        .collect()
}

/// `jobs --json`, or the part of it `params` asks for, each job's document made for the jobs
/// listed alone.
pub(super) async fn jobs(
    _: Caller,
    State(state): State<WebState>,
    Params(params): Params<JobsParams>,
) -> Result<Json<Value>, ApiError> {
    let overview = state.client().overview().await?;
    let events = RecentEvents::new(state.client().recent_events().await?);
    let names = jobs_matching(
        &overview,
        &published_names(&overview),
        params.q.as_deref().unwrap_or_default(),
        params.state.as_deref().unwrap_or_default(),
    );
    let start = first_after(&names, params.after.as_deref().unwrap_or_default());
    let jobs: Vec<Value> = names
        .iter()
        .skip(start)
        .take(params.limit.unwrap_or(usize::MAX))
        .filter_map(|name| named_job_document(&overview, &events, name))
        .collect();
    Ok(Json(json!({ "jobs": jobs })))
}

/// One element of `jobs --json`.
pub(super) async fn job(
    _: Caller,
    State(state): State<WebState>,
    Segment(name): Segment,
    Params(NoQuery {}): Params<NoQuery>,
) -> Result<Json<Value>, ApiError> {
    let overview = state.client().job_overview(&name).await?;
    let events = RecentEvents::new(state.client().job_events(&name).await?);
    named_job_document(&overview, &events, &name)
        .map(Json)
        .ok_or_else(|| crate::client::ClientError::UnknownJob(name).into())
}

/// Which runs `/runs` lists, a page at a time (the API's query and the Runs page's filters).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunsParams {
    /// `active`, `ready` or `due`; `succeeded`, `failed` (retrying or dead) or `finished`
    /// (any outcome), from the events stream; the first three when absent.
    pub(crate) state: Option<String>,
    pub(crate) job: Option<String>,
    pub(crate) replica: Option<String>,
    /// Only the runs of this queue: a filter of each page's runs, so a page may hold fewer.
    pub(crate) queue: Option<String>,
    pub(crate) limit: Option<usize>,
    /// Where the page before ended (its `next_cursor`): the page starts after it.
    pub(crate) cursor: Option<String>,
    /// Only the run with this exact id, in any state: a direct read.
    pub(crate) id: Option<String>,
    /// Only the runs of this instant or later (RFC 3339, or a span before now: `2h`): by when
    /// they started, became ready, are due or ended. A cursor keeps the window of its page.
    pub(crate) since: Option<String>,
    /// Only the runs of this instant or earlier, in the same forms.
    pub(crate) until: Option<String>,
}

impl Query for RunsParams {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[
        ("state", RUN_STATES),
        ("job", JOB),
        ("replica", REPLICA),
        ("queue", QUEUE),
        ("limit", Takes::Limit),
        ("cursor", CURSOR),
        ("id", RUN_ID),
        ("since", INSTANT),
        ("until", INSTANT),
    ];
}

/// The states a run is listed by, on the Runs page and `/runs`.
pub(crate) const RUN_STATES: Takes =
    Takes::OneOf(&["active", "ready", "due", "succeeded", "failed", "finished"]);

/// `runs list --json`, a page at a time: `next_cursor` is what to pass as `cursor` for the
/// next page, `null` on the last; `scan_limited` says the page stopped early, having read as
/// many runs as a filtered page reads, and more may follow its cursor.
pub(super) async fn runs(
    _: Caller,
    State(state): State<WebState>,
    Params(params): Params<RunsParams>,
) -> Result<Json<Value>, ApiError> {
    read_runs(&state, &params).await.map(Json)
}

/// The page of runs `params` asks for, as `/runs` answers it: what the Runs page shows too.
///
/// # Errors
/// A state or limit the listing does not take, a cursor no longer listed, an unknown job or
/// replica; Redis out of reach.
pub(crate) async fn read_runs(state: &WebState, params: &RunsParams) -> Result<Value, ApiError> {
    let shown = |name: &str| params.state.as_deref().is_none_or(|asked| asked == name);
    let outcomes = match params.state.as_deref() {
        None | Some("active" | "ready" | "due") => Vec::new(),
        Some("succeeded") => vec![RunState::Succeeded],
        Some("failed") => vec![RunState::Retrying, RunState::Dead],
        Some("finished") => vec![
            RunState::Succeeded,
            RunState::Retrying,
            RunState::Dead,
            RunState::Skipped,
        ],
        Some(asked) => {
            return Err(ApiError::bad_request(
                "bad-query",
                format!(
                    "state \"{asked}\": a run listed is active, ready, due, succeeded, failed or \
                     finished"
                ),
            ));
        }
    };
    let (since_ms, until_ms) = window(state, params).await?;
    let query = RunsQuery {
        active: shown("active"),
        ready: shown("ready"),
        due: shown("due"),
        outcomes,
        since_ms,
        until_ms,
        job: params.job.clone(),
        replica: params.replica.clone(),
        count: params.limit.unwrap_or(DEFAULT_LIMIT),
        after: params
            .cursor
            .as_deref()
            .map(str::parse::<RunsCursor>)
            .transpose()?,
        run_id: params.id.clone(),
    };
    let ended = !query.outcomes.is_empty();
    let mut page = state.client().runs_page(&query).await?;
    if let Some(queue) = &params.queue {
        page.runs
            .retain(|run| run.fields.get("queue") == Some(queue));
    }
    let runs: Vec<Value> = page
        .runs
        .into_iter()
        .map(|mut run| {
            // A run that is not active has no worker, as `runs list` shows it; an outcome's
            // is the worker of the attempt that ended.
            if !ended && run.fields.get("state").map(String::as_str) != Some("active") {
                run.fields.remove("worker");
            }
            Value::Object(run_document(&run.run_id, run.fields))
        })
        .collect();
    Ok(json!({
        "runs": runs,
        "next_cursor": page.next.map(|cursor| cursor.to_string()),
        "scan_limited": page.scan_limited,
    }))
}

/// The instants `since` and `until` stand for, ms: none with a cursor, which keeps its own;
/// a span is counted back from Redis's clock.
///
/// # Errors
/// A bound that is no instant, or `since` after `until`; Redis out of reach.
async fn window(
    state: &WebState,
    params: &RunsParams,
) -> Result<(Option<i64>, Option<i64>), ApiError> {
    let given = |text: &Option<String>| {
        text.as_deref()
            .map(str::trim)
            .filter(|text| !text.is_empty() && params.cursor.is_none())
            .map(str::to_owned)
    };
    let (since, until) = (given(&params.since), given(&params.until));
    if since.is_none() && until.is_none() {
        return Ok((None, None));
    }
    let now_ms = state.client().store().now_ms().await?;
    let read = |name: &str, text: Option<String>| {
        text.map(|text| parse_instant(&text, now_ms))
            .transpose()
            .map_err(|error| ApiError::bad_request("bad-time", format!("{name}: {error}")))
    };
    let (since_ms, until_ms) = (read("since", since)?, read("until", until)?);
    if let (Some(since_ms), Some(until_ms)) = (since_ms, until_ms)
        && since_ms > until_ms
    {
        return Err(ApiError::bad_request(
            "bad-time",
            "since is after until: no run is listed between them",
        ));
    }
    Ok((since_ms, until_ms))
}

/// `runs show --json`: from the archive once Redis no longer holds the run, as `runs show`
/// reads it there (with `archived_in`).
pub(super) async fn run(
    _: Caller,
    State(state): State<WebState>,
    Segment(id): Segment,
    Params(NoQuery {}): Params<NoQuery>,
) -> Result<Json<Value>, ApiError> {
    let fields = state.client().run(&id).await?;
    if fields.is_empty() {
        let Some((run, part)) = archived_run(&state, &id).await? else {
            return Err(ApiError::unknown_run(&id));
        };
        let mut document = shown_run_document(&id, run.fields(), None);
        document.insert("archived_in".to_owned(), part.into());
        return Ok(Json(Value::Object(document)));
    }
    let so_far = output_so_far(state.client(), &id, &fields).await?;
    Ok(Json(Value::Object(shown_run_document(
        &id,
        fields,
        so_far.as_ref(),
    ))))
}

/// Run `id` as the namespace's archive holds it (`{ns}:archive-to`), with the URL of the part
/// holding its last outcome; `None` for a namespace that does not archive, or an archive with
/// no record of it. A damaged part met on the way is logged, and the others read.
///
/// # Errors
/// `archive-unavailable` (503) when the archive cannot be opened or read, belongs to another
/// namespace, or when the run is in none of its readable parts and some part where it may be
/// is damaged; Redis's errors.
pub(crate) async fn archived_run(
    state: &WebState,
    id: &str,
) -> Result<Option<(ArchivedRun, String)>, ApiError> {
    // A viewer is shown the part and a class of reason; the store's own words name the
    // server's paths and its system's errors, and go to the log.
    let unavailable = |error: ReadError| match error {
        ReadError::Marker(error) => ApiError::from(error),
        other => {
            warn!(error = %other, "the archive cannot be read");
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "archive-unavailable",
                format!("run {id}: the archive cannot be read: {}", other.shown()),
            )
        }
    };
    let Some(reader) = Reader::of_namespace(state.client().store(), None)
        .await
        .map_err(unavailable)?
    else {
        return Ok(None);
    };
    // `{ns}:archive-to` edited by hand, or brought back by a restore, may name the archive of
    // another namespace, whose runs would be shown as this one's.
    reader
        .check_owner(state.namespace())
        .await
        .map_err(unavailable)?;
    let mut damage = Vec::new();
    let found = reader
        .run(id, |error: ReadError| {
            warn!(%error, "a damaged part of the archive");
            damage.push(error.shown());
        })
        .await
        .map_err(unavailable)?;
    match found {
        Some(run) => {
            let part = reader.object_url(&run.part);
            Ok(Some((run, part)))
        }
        // The run may be in what could not be read: not known to be unknown.
        None if !damage.is_empty() => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "archive-unavailable",
            format!(
                "run {id} is in no readable part of the archive, and {} part(s) where it may be \
                 are damaged: {}",
                damage.len(),
                damage.join("; ")
            ),
        )),
        None => Ok(None),
    }
}

/// Which outcomes `/history` lists.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryParams {
    job: Option<String>,
    replica: Option<String>,
    limit: Option<usize>,
    /// Only retries and deaths.
    #[serde(default)]
    failed: bool,
}

impl Query for HistoryParams {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[
        ("job", JOB),
        ("replica", REPLICA),
        ("limit", Takes::Limit),
        ("failed", Takes::Flag),
    ];
}

/// `history --json`.
pub(super) async fn history(
    _: Caller,
    State(state): State<WebState>,
    Params(params): Params<HistoryParams>,
) -> Result<Json<Value>, ApiError> {
    let entries = state
        .client()
        .history(
            params.job.as_deref(),
            params.replica.as_deref(),
            params.limit.unwrap_or(DEFAULT_LIMIT),
            params.failed,
        )
        .await?;
    let runs: Vec<Value> = entries
        .iter()
        .map(|entry| history_document(&entry.event, &entry.run))
        .collect();
    Ok(Json(json!({ "runs": runs })))
}

/// Which dead runs `/dead` lists, and how many: the newest, of one job's when asked (among
/// the newest [`MAX_LIMIT`], as the Dead letters page's filter is).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DeadParams {
    job: Option<String>,
    limit: Option<usize>,
}

impl Query for DeadParams {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[("job", JOB), ("limit", Takes::Limit)];
}

/// `dead list --json`.
pub(super) async fn dead(
    _: Caller,
    State(state): State<WebState>,
    Params(params): Params<DeadParams>,
) -> Result<Json<Value>, ApiError> {
    let limit = params.limit.unwrap_or(DEFAULT_LIMIT);
    let read = if params.job.is_some() {
        MAX_LIMIT
    } else {
        limit
    };
    let runs: Vec<Value> = state
        .client()
        .dead_runs(read)
        .await?
        .into_iter()
        .filter(|run| {
            params
                .job
                .as_ref()
                .is_none_or(|job| run.fields.get("job") == Some(job))
        })
        .take(limit)
        .map(|run| dead_document(&run.run_id, run.died_ms, run.fields))
        .collect();
    Ok(Json(json!({ "runs": runs })))
}

/// `dead show --json`.
pub(super) async fn dead_run(
    _: Caller,
    State(state): State<WebState>,
    Segment(id): Segment,
    Params(NoQuery {}): Params<NoQuery>,
) -> Result<Json<Value>, ApiError> {
    let fields = state.client().dead_run(&id).await?;
    Ok(Json(Value::Object(run_document(&id, fields))))
}

/// A route the server does not have, answered in the API's error shape.
pub(crate) async fn no_route(uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no-route",
        format!(
            "no route {} (docs/openapi.json lists the API's)",
            shown(uri.path(), SHOWN_PATH)
        ),
    )
}

/// A route asked with a method it does not take (a GET of an action, a form's action opened
/// as a link), answered in the API's error shape (a page draws it in the layout) with the
/// `Allow` header the router adds, where it was an empty 405.
pub(crate) async fn no_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        format!(
            "{method} {}: this route takes another method (its Allow header says which)",
            shown(uri.path(), SHOWN_PATH)
        ),
    )
}
