//! A job's page: its definition as the replicas published it, its next fires, its history and
//! durations, its last run's output, who acted on it lately, and the actions of the jobs page.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::Value;

use super::jobs::{
    actions, durations, fire_time, job_state, outcomes, schedule, unavailable, upcoming,
};
use super::overview::text;
use super::{PageContext, layout, segment};
use crate::cli::history::history_document;
use crate::cli::status::{RecentEvents, ShownJob, shown_job};
use crate::cli::times::{ago, duration};
use crate::client::HistoryEntry;
use crate::schedule::Schedule;
use crate::store::{Event, Overview};
use crate::web::api::Segment;
use crate::web::chart::durations_chart;
use crate::web::query::{NoQuery, Params};
use crate::web::strip::outcome_strip;
use crate::web::{ApiError, WebState};

/// How many fires ahead the page lists.
const FIRES_AHEAD: usize = 10;

/// How many outcomes the history lists.
const HISTORY: usize = 20;

/// How many of the job's recorded actions the page lists.
const ACTIONS: usize = 10;

/// Everything the page is drawn from, read before it is drawn.
struct Read {
    overview: Overview,
    events: RecentEvents,
    history: Vec<HistoryEntry>,
}

/// `GET /jobs/{job}`: one job; a job no replica declares is a 404 in the layout.
pub(super) async fn page(
    context: PageContext,
    State(state): State<WebState>,
    Segment(name): Segment,
    Params(NoQuery {}): Params<NoQuery>,
) -> Response {
    let read = async {
        let client = state.client();
        let overview = client.job_overview(&name).await?;
        // The job's events alone, read once for its history, strip, durations and actions.
        let events = client.job_events(&name).await?;
        let history = if overview.definitions.contains_key(&name) {
            client
                .history_among(&events, Some(&name), None, HISTORY, false)
                .await?
        } else {
            Vec::new()
        };
        Ok::<_, ApiError>(Read {
            overview,
            events: RecentEvents::new(events),
            history,
        })
    };
    let read = match read.await {
        Ok(read) => read,
        Err(error) => return unavailable(&context, "Job", &error),
    };
    let Some(ShownJob {
        document: job,
        schedule: parsed,
    }) = shown_job(&read.overview, &read.events, &name)
    else {
        let main = html! {
            h1 { "No job " code { (name) } }
            p { "No replica declares a job of that name: it may have been removed from the schedule files." }
            p { a href=(context.link("/jobs")) { "Back to the jobs" } }
        };
        return layout::page(
            &context,
            StatusCode::NOT_FOUND,
            &format!("No job {name}"),
            main,
        );
    };
    let now_ms = read.overview.now_ms;
    let paused = read.overview.paused.contains(&name);
    let main = html! {
        h1 { "Job " code { (name) } }
        section #job-state data-refresh aria-labelledby="job-state-h" {
            h2 #job-state-h { "State" }
            p { (job_state(&job, paused)) " · " (schedule(&job, parsed.as_ref())) }
            p { (outcome_strip(&name, &outcomes(&read.events, &name))) }
            @if context.may_act { (actions(&context, &name, paused, "job")) }
        }
        section #fires aria-labelledby="fires-h" {
            h2 #fires-h { "Next " (FIRES_AHEAD) " fires" }
            (next_fires(&job, parsed.as_ref(), now_ms))
        }
        section #history data-refresh aria-labelledby="history-h" {
            h2 #history-h { "History" }
            (history(&context, &read.history, now_ms))
        }
        section #durations data-refresh aria-labelledby="durations-h" {
            h2 #durations-h { "Durations" }
            (durations_chart(&name, &durations(&read.events, &name)))
        }
        section #output data-refresh aria-labelledby="output-h" {
            h2 #output-h { "Output of the last run" }
            (last_output(&read.history))
        }
        section #actions data-refresh aria-labelledby="actions-h" {
            h2 #actions-h { "Recent actions" }
            (recent_actions(&context, &read.events, &name, now_ms))
        }
        section #definition aria-labelledby="definition-h" {
            h2 #definition-h { "Definition" }
            p { "As the replicas published it (hash " code { (text(&job["hash"])) } "):" }
            pre { (definition(&read.overview, &name)) }
        }
    };
    layout::page(&context, StatusCode::OK, &format!("Job {name}"), main)
}

/// The next fires, each as people read it; or why there are none.
fn next_fires(job: &Value, parsed: Option<&Schedule>, now_ms: i64) -> Markup {
    let fires = upcoming(job, parsed, now_ms, FIRES_AHEAD);
    html! {
        @if fires.is_empty() {
            p.empty {
                @if job["enabled"] == false { "None: the job is disabled (enabled = false)." }
                @else { "None: the job runs only when triggered." }
            }
        } @else {
            ol { @for (fire, zone) in &fires { li { (fire_time(*fire, *zone, now_ms)) } } }
        }
    }
}

/// The job's last outcomes, each linking to its run.
fn history(context: &PageContext, entries: &[HistoryEntry], now_ms: i64) -> Markup {
    html! {
        @if entries.is_empty() {
            p.empty { "No run of this job has ended yet (or the events stream no longer holds one)." }
        } @else {
            table {
                thead { tr {
                    th scope="col" { "Run" } th scope="col" { "Outcome" } th.number scope="col" { "Attempt" }
                    th.number scope="col" { "Duration" } th scope="col" { "Replica" } th.number scope="col" { "Exit code" }
                    th scope="col" { "Ended" }
                } }
                tbody {
                    @for entry in entries {
                        @let document = history_document(&entry.event, &entry.run);
                        @let id = text(&document["id"]);
                        @let outcome = text(&document["outcome"]);
                        tr {
                            th scope="row" { a href=(context.link(&format!("/runs/{}", segment(&id)))) { (id) } }
                            td class=(format!("outcome-{outcome}")) { (outcome) " " (text(&document["reason"])) }
                            td.number { (text(&document["attempt"])) }
                            td.number { (document["duration_ms"].as_i64().map(duration).unwrap_or_default()) }
                            td { (text(&document["replica"])) }
                            td.number { (text(&document["exit_code"])) }
                            td { (ago(now_ms, entry.event.at_ms)) }
                        }
                    }
                }
            }
        }
    }
}

/// The output the newest run that ended kept, as text.
fn last_output(entries: &[HistoryEntry]) -> Markup {
    let newest = entries.first();
    let output = newest
        .and_then(|entry| entry.run.get("output"))
        .filter(|output| !output.is_empty());
    html! {
        @match (newest, output) {
            (Some(entry), Some(output)) => {
                p { "Run " code { (entry.event.fields.get("run").cloned().unwrap_or_default()) } ":" }
                pre.output { (output) }
            }
            (Some(_), None) => p.empty { "The last run printed nothing (or its record has expired)." },
            (None, _) => p.empty { "No run has ended yet." },
        }
    }
}

/// Who paused, resumed or triggered the job, enqueued its runs or re-drove its dead ones
/// lately, from the events stream.
fn recent_actions(context: &PageContext, events: &RecentEvents, job: &str, now_ms: i64) -> Markup {
    let acted: Vec<&Event> = events
        .of(job)
        .filter(|event| event.fields.contains_key("actor"))
        .take(ACTIONS)
        .collect();
    html! {
        @if acted.is_empty() {
            p.empty { "No one has paused, resumed or triggered this job, or enqueued its runs, lately." }
        } @else {
            ul.actions {
                @for event in acted {
                    @let field = |name: &str| event.fields.get(name).cloned().unwrap_or_default();
                    li {
                        (ago(now_ms, event.at_ms)) ": " strong { (field("actor")) } " "
                        (action_word(&field("action"), &field("reason")))
                        @let run = field("run");
                        @if !run.is_empty() {
                            " " a href=(context.link(&format!("/runs/{}", segment(&run)))) { (run) }
                        }
                        @if let Some(more) = field("runs").parse::<u64>().ok().filter(|runs| *runs > 1) {
                            " and " (more - 1) " more"
                        }
                    }
                }
            }
        }
    }
}

/// What an event with an actor records, in words: a job's `action`, or a run's `reason`.
fn action_word(action: &str, reason: &str) -> String {
    match (action, reason) {
        ("pause", _) => "paused the job".to_owned(),
        ("resume", _) => "resumed the job".to_owned(),
        ("trigger", _) => "triggered".to_owned(),
        ("enqueue", _) => "enqueued".to_owned(),
        (_, "redrive") => "re-drove the dead run".to_owned(),
        (action, reason) => format!("{action}{reason}"),
    }
}

/// The job's published definition as TOML, as a schedule file would declare it; the JSON as
/// published when it does not read as TOML.
fn definition(overview: &Overview, job: &str) -> String {
    let Some(published) = overview.definitions.get(job) else {
        return String::new();
    };
    serde_json::from_str::<Value>(published)
        .ok()
        .and_then(|value| toml::to_string_pretty(&without_nulls(value)).ok())
        .unwrap_or_else(|| published.clone())
}

/// `value` without its null fields, which TOML cannot write: a setting left out, as a schedule
/// file leaves it.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .filter(|(_, value)| !value.is_null())
                .map(|(name, value)| (name, without_nulls(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}
