//! The Dead letters page: the newest dead runs, filtered by job, and its actions: retry one,
//! retry every one the filter matches (after a confirm step that shows how many), purge those
//! older than an age. Each action is an operator's form, answered with a redirect here.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;

use super::overview::text;
use super::runs::failed;
use super::{PageContext, layout};
use crate::cli::dead::dead_document;
use crate::cli::times::{relative, rfc3339};
use crate::client::DeadRun;
use crate::web::api::Segment;
use crate::web::csrf::{self, CheckedForm};
use crate::web::query::{JOB, NoQuery, Params, Query, SHOWN as SHOWN_BYTES, Takes, shown};
use crate::web::{ApiError, WebState};

/// How many of the newest dead runs the page lists and a retry of many counts: a retry of many
/// from the console is offered only below it, so that the count it confirms is every run it
/// retries.
const SHOWN: usize = 1000;

/// The page's filter: a job, or every job's when empty.
#[derive(Debug, Default, Deserialize)]
pub(super) struct DeadFilter {
    #[serde(default)]
    job: String,
}

impl Query for DeadFilter {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[("job", JOB)];
}

impl DeadFilter {
    /// The job asked for, if any.
    fn job(&self) -> Option<&str> {
        Some(self.job.trim()).filter(|job| !job.is_empty())
    }

    /// The page under this filter.
    fn link(&self, context: &PageContext, path: &str) -> String {
        match self.job() {
            Some(job) => format!(
                "{}?{}",
                context.link(path),
                serde_urlencoded::to_string([("job", job)]).unwrap_or_default()
            ),
            None => context.link(path),
        }
    }
}

/// The newest dead runs of the filter's job (every job's when none).
async fn matching(state: &WebState, filter: &DeadFilter) -> Result<Vec<DeadRun>, ApiError> {
    let mut runs = state.client().dead_runs(SHOWN).await?;
    if let Some(job) = filter.job() {
        runs.retain(|run| run.fields.get("job").map(String::as_str) == Some(job));
    }
    Ok(runs)
}

/// `GET /dead`: the dead runs and the forms that act on them.
pub(super) async fn page(
    context: PageContext,
    State(state): State<WebState>,
    Params(filter): Params<DeadFilter>,
) -> Response {
    let read = async {
        let runs = matching(&state, &filter).await?;
        Ok::<_, ApiError>((runs, state.client().store().now_ms().await?))
    };
    let (runs, now_ms) = match read.await {
        Ok(read) => read,
        Err(error) => return failed(&context, "Dead letters", &error, html! {}),
    };
    let main = html! {
        h1 { "Dead letters" }
        form.filters method="get" action=(context.link("/dead")) aria-label="Filter the dead runs" {
            label for="job" { "Job" }
            input #job type="text" name="job" value=(filter.job);
            button type="submit" { "Filter" }
        }
        @if runs.is_empty() {
            p.empty { "No dead run" @if let Some(job) = filter.job() { " of job " strong { (job) } } "." }
        } @else {
            (table(&context, &filter, &runs, now_ms))
            @if context.may_act {
                p { a href=(filter.link(&context, "/dead/retry")) { "Retry all " (runs.len()) " listed…" } }
            }
        }
        @if context.may_act {
            (purge_form(&context))
        }
    };
    layout::page(&context, StatusCode::OK, "Dead letters", main)
}

/// The dead runs' table, each with its retry button for an operator.
fn table(context: &PageContext, filter: &DeadFilter, runs: &[DeadRun], now_ms: i64) -> Markup {
    html! {
        table.dead {
            thead { tr {
                th scope="col" { "Run" } th scope="col" { "Job" } th scope="col" { "Died" }
                th.number scope="col" { "Attempts" } th scope="col" { "Why" }
                @if context.may_act { th scope="col" { "Action" } }
            } }
            tbody {
                @for run in runs {
                    @let document = dead_document(&run.run_id, run.died_ms, run.fields.clone());
                    @let why = [&document["reason"], &document["error"], &document["damaged"]]
                        .into_iter().map(text).filter(|why| !why.is_empty()).collect::<Vec<_>>().join(": ");
                    tr {
                        th scope="row" {
                            a href=(context.link(&format!("/runs/{}", super::run::segment(&run.run_id)))) { (run.run_id) }
                        }
                        td { (text(&document["job"])) }
                        td { time datetime=(rfc3339(run.died_ms)) title=(rfc3339(run.died_ms)) { (relative(now_ms, run.died_ms)) } }
                        td.number { (text(&document["attempt"])) }
                        td { (why) }
                        @if context.may_act {
                            td {
                                form.inline method="post" action=(filter.link(context, &format!("/dead/{}/retry", super::run::segment(&run.run_id)))) {
                                    input type="hidden" name=(csrf::FIELD) value=(context.csrf_token);
                                    button type="submit" aria-label=(format!("Retry {}", run.run_id)) { "Retry" }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The purge form: dead runs older than an age, deleted for good.
fn purge_form(context: &PageContext) -> Markup {
    html! {
        form.filters method="post" action=(context.link("/dead/purge")) aria-label="Purge dead runs" {
            input type="hidden" name=(csrf::FIELD) value=(context.csrf_token);
            label for="older_than" { "Delete for good the dead runs older than" }
            input #older_than type="text" name="older_than" value="7d" required;
            button type="submit" { "Purge" }
        }
    }
}

/// `POST /dead/{id}/retry`: re-drives one dead run, as `redcron dead retry ID` does, in the
/// name of the operator who asked.
pub(super) async fn retry(
    context: PageContext,
    State(state): State<WebState>,
    Segment(id): Segment,
    Params(filter): Params<DeadFilter>,
    form: CheckedForm<NoQuery>,
) -> Response {
    let who = form.operator.0.name;
    match state.client().acting_as(who.clone()).retry_dead(&id).await {
        Ok(()) => {
            tracing::info!("{who} retried dead run {id}");
            Redirect::to(&filter.link(&context, "/dead")).into_response()
        }
        Err(error) => failed(&context, "Dead letters", &error.into(), html! {}),
    }
}

/// `GET /dead/retry`: the confirm step of a retry of many, saying how many runs it retries.
pub(super) async fn confirm(
    context: PageContext,
    State(state): State<WebState>,
    Params(filter): Params<DeadFilter>,
) -> Response {
    match matching(&state, &filter).await {
        Ok(runs) => confirm_page(&context, &filter, runs.len(), StatusCode::OK, None),
        Err(error) => failed(&context, "Dead letters", &error, html! {}),
    }
}

/// The confirm step: how many runs the retry re-drives, and the form that posts that count.
fn confirm_page(
    context: &PageContext,
    filter: &DeadFilter,
    count: usize,
    status: StatusCode,
    changed_from: Option<usize>,
) -> Response {
    let main = html! {
        h1 { "Dead letters" }
        @if let Some(shown) = changed_from {
            ul.warnings { li { "The dead runs changed since the count you confirmed (" (shown) "): nothing was retried." } }
        }
        @if count == 0 {
            p.empty { "No dead run to retry." }
        } @else if count >= SHOWN {
            p {
                "At least " (SHOWN) " dead runs match: more than the console counts before a retry. "
                "Retry them with " code { "redcron dead retry --all" } ", which names each one it retries."
            }
        } @else {
            p {
                "Retry " strong { (count) } " dead runs"
                @if let Some(job) = filter.job() { " of job " strong { (job) } } @else { " of every job" }
                "? Each is due again now, its attempts counted afresh."
            }
            @if context.may_act {
                form method="post" action=(context.link("/dead/retry")) {
                    input type="hidden" name=(csrf::FIELD) value=(context.csrf_token);
                    input type="hidden" name="job" value=(filter.job);
                    input type="hidden" name="count" value=(count);
                    button type="submit" { "Retry " (count) " runs" }
                }
            }
        }
        p { a href=(filter.link(context, "/dead")) { "Back to the dead letters" } }
    };
    layout::page(context, status, "Dead letters", main)
}

/// What the confirm step posts: the filter and the count it showed.
#[derive(Deserialize)]
pub(super) struct RetryMany {
    #[serde(default)]
    job: String,
    /// How many runs the confirm step said it would retry.
    count: usize,
}

impl Query for RetryMany {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[("job", JOB), ("count", Takes::Whole)];
}

/// `POST /dead/retry`: re-drives every dead run of the filter, as `redcron dead retry --all`
/// does, only when as many match as the confirm step showed; otherwise nothing is retried and
/// the confirm step is shown again with the new count (409), so that no one retries more (or
/// other) runs than they saw.
pub(super) async fn retry_many(
    context: PageContext,
    State(state): State<WebState>,
    form: CheckedForm<RetryMany>,
) -> Response {
    let CheckedForm {
        operator,
        form: RetryMany { job, count },
    } = form;
    let filter = DeadFilter { job };
    let now = match matching(&state, &filter).await {
        Ok(runs) => runs.len(),
        Err(error) => return failed(&context, "Dead letters", &error, html! {}),
    };
    // A count at the listing's bound may hide more runs than the person saw: refused too.
    if now != count || now >= SHOWN {
        return confirm_page(&context, &filter, now, StatusCode::CONFLICT, Some(count));
    }
    let who = operator.0.name;
    match state
        .client()
        .acting_as(who.clone())
        .retry_dead_runs(filter.job())
        .await
    {
        Ok(outcome) => {
            tracing::info!(
                "{who} retried {} dead runs (job {})",
                outcome.retried.len(),
                filter.job().unwrap_or("any")
            );
            Redirect::to(&filter.link(&context, "/dead")).into_response()
        }
        Err(error) => failed(&context, "Dead letters", &error.into(), html! {}),
    }
}

/// What the purge form posts: an age as `7d`, `30m`.
#[derive(Deserialize)]
pub(super) struct Purge {
    older_than: String,
}

/// What the purge form's age is, in words.
const AGE: &str = "an age such as 30m or 7d";

impl Query for Purge {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[(
        "older_than",
        Takes::Text {
            what: AGE,
            longest: 64,
        },
    )];
}

/// `POST /dead/purge`: deletes for good the dead runs older than the age, as `redcron dead
/// purge --older-than` does.
pub(super) async fn purge(
    context: PageContext,
    State(state): State<WebState>,
    form: CheckedForm<Purge>,
) -> Response {
    let CheckedForm {
        operator,
        form: Purge { older_than },
    } = form;
    let age: Duration = match humantime::parse_duration(older_than.trim()) {
        Ok(age) => age,
        Err(_) => {
            let error = ApiError::bad_request(
                "bad-age",
                format!(
                    "older_than must be {AGE}, not \"{}\"",
                    shown(&older_than, SHOWN_BYTES)
                ),
            );
            return failed(&context, "Dead letters", &error, html! {});
        }
    };
    match state
        .client()
        .acting_as(operator.0.name.clone())
        .purge_dead(Some(age))
        .await
    {
        Ok(purged) => {
            tracing::info!(
                "{} purged {purged} dead runs older than {older_than}",
                operator.0.name
            );
            Redirect::to(&context.link("/dead")).into_response()
        }
        Err(error) => failed(&context, "Dead letters", &error.into(), html! {}),
    }
}
