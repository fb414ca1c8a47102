//! The Runs page: the runs due, ready and running, and those that ended from the events stream,
//! a page at a time (the API's `/runs`, its cursor in the "next page" link), filtered by state,
//! job, queue, replica and time; and a box that goes straight to a run by its id.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::overview::text;
use super::{PageContext, layout};
use crate::cli::times::relative;
use crate::web::api::{RUN_STATES, RunsParams, read_runs};
use crate::web::query::{CURSOR, INSTANT, JOB, Params, QUEUE, Query, REPLICA, RUN_ID, Takes};
use crate::web::{ApiError, WebState};

/// How many runs a page shows.
const PAGE: usize = 50;

/// The page's query: its filter form's fields, each empty when not filled in.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RunsFilter {
    /// `active`, `ready`, `due`, `succeeded`, `failed` or `finished`; the first three when
    /// empty.
    #[serde(default)]
    state: String,
    #[serde(default)]
    job: String,
    #[serde(default)]
    queue: String,
    #[serde(default)]
    replica: String,
    /// The runs of this instant or later, as the API reads it (RFC 3339, or `2h` before now).
    #[serde(default)]
    since: String,
    /// The runs of this instant or earlier.
    #[serde(default)]
    until: String,
    /// Where the page starts: the API's cursor, which keeps the time window of the first page.
    #[serde(default)]
    cursor: String,
    /// A run id searched for: its page when it has a record.
    #[serde(default)]
    id: String,
}

impl Query for RunsFilter {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[
        ("state", RUN_STATES),
        ("job", JOB),
        ("queue", QUEUE),
        ("replica", REPLICA),
        ("since", INSTANT),
        ("until", INSTANT),
        ("cursor", CURSOR),
        ("id", RUN_ID),
    ];
}

impl RunsFilter {
    /// The filter's link, for the next page: what it filters by, and `cursor`.
    fn link(&self, context: &PageContext, cursor: &str) -> String {
        let pairs = [
            ("state", &self.state),
            ("job", &self.job),
            ("queue", &self.queue),
            ("replica", &self.replica),
            ("since", &self.since),
            ("until", &self.until),
        ];
        let mut query: Vec<(&str, &str)> = pairs
            .iter()
            .filter(|(_, value)| !value.is_empty())
            .map(|(name, value)| (*name, value.as_str()))
            .collect();
        query.push(("cursor", cursor));
        let query = serde_urlencoded::to_string(query).unwrap_or_default();
        format!("{}?{query}", context.link("/runs"))
    }
}

/// A filter field as the API takes it: none when empty.
fn given(value: &str) -> Option<String> {
    Some(value.trim().to_owned()).filter(|value| !value.is_empty())
}

/// `GET /runs`: the runs the filter asks for, or the run searched for.
pub(super) async fn page(
    context: PageContext,
    State(state): State<WebState>,
    Params(filter): Params<RunsFilter>,
) -> Response {
    let searched = filter.id.trim();
    if !searched.is_empty() {
        match state.client().run(searched).await {
            Ok(fields) if !fields.is_empty() => {
                let path = format!("/runs/{}", super::run::segment(searched));
                return Redirect::to(&context.link(&path)).into_response();
            }
            Ok(_) => {
                let error = ApiError::unknown_run(searched);
                return failed(&context, "Runs", &error, filters(&context, &filter));
            }
            Err(error) => {
                return failed(&context, "Runs", &error.into(), filters(&context, &filter));
            }
        }
    }
    let (rows, next) = match listing(&state, &filter).await {
        Ok(listed) => listed,
        Err(error) => return failed(&context, "Runs", &error, filters(&context, &filter)),
    };
    let now_ms = state.client().store().now_ms().await.unwrap_or_default();
    let main = html! {
        h1 { "Runs" }
        (filters(&context, &filter))
        (table(&context, &filter, &rows, next.is_some(), now_ms))
        @if let Some(cursor) = next {
            p { a rel="next" href=(filter.link(&context, &cursor)) { "Next page" } }
        }
    };
    layout::page(&context, StatusCode::OK, "Runs", main)
}

/// The runs due, ready or running, as the API lists them, and the cursor of the next page.
async fn listing(
    state: &WebState,
    filter: &RunsFilter,
) -> Result<(Vec<Value>, Option<String>), ApiError> {
    let params = RunsParams {
        state: given(&filter.state),
        job: given(&filter.job),
        replica: given(&filter.replica),
        queue: given(&filter.queue),
        limit: Some(PAGE),
        cursor: given(&filter.cursor),
        id: None,
        since: given(&filter.since),
        until: given(&filter.until),
    };
    let mut params = params;
    // A filter the indexes do not serve (a queue, a replica) reads a bounded slice of runs a
    // page and may keep none of it: pages are read on, a few, so that a page shown empty
    // while others would match is rare, and says so when it happens.
    for _ in 0..EMPTY_PAGES_READ_ON {
        let mut document = read_runs(state, &params).await?;
        let runs = match document["runs"].take() {
            Value::Array(runs) => runs,
            _ => Vec::new(),
        };
        let next = document["next_cursor"].as_str().map(str::to_owned);
        match next {
            Some(cursor) if runs.is_empty() => params.cursor = Some(cursor),
            next => return Ok((runs, next)),
        }
    }
    Ok((Vec::new(), params.cursor))
}

/// How many pages the runs page reads at most before it shows one with no run kept.
const EMPTY_PAGES_READ_ON: usize = 10;

/// The filter form (a GET, so that a filtered page is a link) and the search box.
fn filters(context: &PageContext, filter: &RunsFilter) -> Markup {
    let states = [
        ("", "Due, ready and running"),
        ("active", "Running"),
        ("ready", "Ready"),
        ("due", "Due later"),
        ("succeeded", "Succeeded"),
        ("failed", "Failed (retrying or dead)"),
        ("finished", "Finished (any outcome)"),
    ];
    html! {
        form.filters method="get" action=(context.link("/runs")) role="search" aria-label="Find a run" {
            label for="run-id" { "Run id" }
            input #run-id type="search" name="id" value=(filter.id) placeholder="job@1767225600000";
            button type="submit" { "Go to the run" }
        }
        form.filters method="get" action=(context.link("/runs")) aria-label="Filter the runs" {
            label for="state" { "State" }
            select #state name="state" {
                @for (value, label) in states {
                    option value=(value) selected[filter.state == value] { (label) }
                }
            }
            label for="job" { "Job" }
            input #job type="text" name="job" value=(filter.job);
            label for="queue" { "Queue" }
            input #queue type="text" name="queue" value=(filter.queue);
            label for="replica" { "Replica" }
            input #replica type="text" name="replica" value=(filter.replica);
            label for="since" { "Since" }
            input #since type="text" name="since" value=(filter.since) placeholder="2h, or 2026-03-08T09:00:00Z";
            label for="until" { "Until" }
            input #until type="text" name="until" value=(filter.until) placeholder="now";
            button type="submit" { "Filter" }
        }
    }
}

/// The runs' table, each row linking its run; none, said so.
fn table(
    context: &PageContext,
    filter: &RunsFilter,
    rows: &[Value],
    more: bool,
    now_ms: i64,
) -> Markup {
    if rows.is_empty() {
        return html! {
            p.empty {
                @if more {
                    "No run matches among the runs read so far; the next page reads on."
                } @else if filter.cursor.is_empty() {
                    "No run matches."
                } @else {
                    "No more runs."
                }
            }
        };
    }
    html! {
        table.runs {
            thead { tr {
                th scope="col" { "Run" } th scope="col" { "Job" } th scope="col" { "State" }
                th scope="col" { "Queue" } th.number scope="col" { "Attempt" }
                th scope="col" { "When" } th scope="col" { "Replica or worker" }
            } }
            tbody {
                @for run in rows {
                    @let id = text(&run["id"]);
                    @let state = text(&run["state"]);
                    tr {
                        th scope="row" {
                            a href=(context.link(&format!("/runs/{}", super::run::segment(&id)))) { (id) }
                        }
                        td { (text(&run["job"])) }
                        td class=(format!("state-{state}")) { (state) }
                        td { (text(&run["queue"])) }
                        td.number { (text(&run["attempt"])) }
                        td { (when(run, now_ms)) }
                        td { (text(&run["worker"])) }
                    }
                }
            }
        }
    }
}

/// The instant that matters for a run in its state: when it ended, started, became ready or
/// comes due.
fn when(run: &Value, now_ms: i64) -> Markup {
    let instants = [
        ("finished_ms", "ended"),
        ("started_ms", "started"),
        ("ready_ms", "ready"),
        ("due_ms", "due"),
    ];
    let found = instants
        .iter()
        .find_map(|(field, word)| run[*field].as_i64().map(|at_ms| (*word, at_ms)));
    match found {
        Some((word, at_ms)) => html! {
            time datetime=(crate::cli::times::rfc3339(at_ms)) { (word) " " (relative(now_ms, at_ms)) }
        },
        None => html! {},
    }
}

/// A page that could not be read: the layout, what went wrong, the error's status.
pub(super) fn failed(
    context: &PageContext,
    title: &str,
    error: &ApiError,
    before: Markup,
) -> Response {
    let main = html! {
        h1 { (title) }
        (before)
        ul.warnings { li { (error.message) } }
    };
    layout::page(context, error.status, title, main)
}
