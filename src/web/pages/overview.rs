//! The overview: leader, replicas, queues, the last day's outcomes and every warning `status`
//! knows, from the same document as `redcron status --json`; and its one action, ending a hold.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde_json::Value;

use super::{PageContext, layout};
use crate::cli::status::{Drift, drifting_jobs};
use crate::cli::times::{ago, duration};
use crate::store::Event;
use crate::web::api::{Status, read_status};
use crate::web::csrf::{self, CheckedForm};
use crate::web::query::{NoQuery, Params};
use crate::web::{ApiError, WebState};

/// How far back the outcome counts reach.
const DAY_MS: i64 = 24 * 3600 * 1000;

/// `GET /`: the overview.
pub(super) async fn page(
    context: PageContext,
    State(state): State<WebState>,
    Params(NoQuery {}): Params<NoQuery>,
) -> Response {
    let read = async {
        let status = read_status(&state).await?;
        let now_ms = state.client().store().now_ms().await?;
        Ok::<_, ApiError>((status, now_ms))
    };
    let (
        Status {
            document: status,
            events,
            overview,
        },
        now_ms,
    ) = match read.await {
        Ok(read) => read,
        Err(error) => return unavailable(&context, &error),
    };
    let main = html! {
        h1 { "Overview" }
        (warnings(&context, &status, &drifting_jobs(&overview)))
        section #replicas data-refresh aria-labelledby="replicas-h" {
            h2 #replicas-h { "Leader and replicas" }
            (replicas(&status))
        }
        section #queues data-refresh aria-labelledby="queues-h" {
            h2 #queues-h { "Queues" }
            (queues(&status))
        }
        @if !status["archive"].is_null() {
            section #archive data-refresh aria-labelledby="archive-h" {
                h2 #archive-h { "Archive" }
                (archive(&status["archive"]))
            }
        }
        section #activity data-refresh aria-labelledby="activity-h" {
            h2 #activity-h { "The last 24 hours" }
            (activity(events.all(), now_ms))
        }
    };
    layout::page(&context, StatusCode::OK, "Overview", main)
}

/// The page drawn when Redis could not be read: the layout, what went wrong, a 503.
fn unavailable(context: &PageContext, error: &ApiError) -> Response {
    let main = html! {
        h1 { "Overview" }
        ul.warnings { li { "Redis cannot be read now: " (error.message) } }
        p { "The page shows the namespace again once Redis answers." }
    };
    layout::page(context, error.status, "Overview", main)
}

/// Every warning the status document carries, each saying what to do; none, said so.
fn warnings(context: &PageContext, status: &Value, drifting: &[Drift]) -> Markup {
    let mut said: Vec<Markup> = Vec::new();
    if let Some(message) = status["writes_refused"]["message"].as_str() {
        said.push(html! { "Redis refuses writes: " (message) " Nothing is planned or recorded until it takes them again." });
    }
    for setting in status["redis_settings"].as_array().into_iter().flatten() {
        said.push(html! { "Redis is set to lose data: " (text(setting)) });
    }
    if status["replicas"].as_array().is_some_and(Vec::is_empty) {
        said.push(html! {
            "No replica has run in namespace " strong { (context.namespace.as_deref().unwrap_or_default()) }
            ": is it the namespace the replicas run with (" code { "--namespace" } ")?"
        });
    }
    if let Some(held_ms) = status["held_ms"].as_i64() {
        said.push(html! {
            "The namespace is held for " (duration(held_ms)) " more: nothing is planned, claimed or recorded. "
            @if context.may_act {
                form.inline method="post" action=(context.link("/hold/release")) {
                    input type="hidden" name=(csrf::FIELD) value=(context.csrf_token);
                    button type="submit" { "Release the hold" }
                }
            }
        });
    }
    for replica in status["replicas"].as_array().into_iter().flatten() {
        if replica["state"] == "lost" {
            said.push(html! {
                "Replica " strong { (text(&replica["id"])) } " is lost: it stopped beating "
                (ago(0, -replica["heartbeat_age_ms"].as_i64().unwrap_or_default()))
                "; its runs are handed back to the others."
            });
        }
    }
    for queue in status["ready"].as_array().into_iter().flatten() {
        if queue["served_by"] == 0 && waiting(queue) > 0 {
            said.push(html! {
                "Queue " strong { (text(&queue["queue"])) } " has runs ready and no live replica serves it: start one with "
                code { "--queues " (text(&queue["queue"])) } "."
            });
        }
    }
    for aside in status["undeclared"].as_array().into_iter().flatten() {
        said.push(html! {
            (text(&aside["runs"])) " runs of job " strong { (text(&aside["job"])) }
            " wait for a replica that declares it."
        });
    }
    for drift in drifting {
        said.push(html! {
            "Job " strong { (drift.job) } " is declared differently by "
            (drift.differs.join(", ")) " than by " (drift.same.join(", "))
            ": deploy the same schedule files to every replica."
        });
    }
    if let Some(count) = status["damaged_keys"]["count"]
        .as_i64()
        .filter(|count| *count > 0)
    {
        said.push(html! { (count) " damaged records were found and expire with the run retention: see " code { "redcron status" } "." });
    }
    let archive = &status["archive"];
    for failing in archive["failing"].as_array().into_iter().flatten() {
        said.push(html! {
            "The archive refuses parts to replica " strong { (text(&failing["replica"])) } ": "
            code { (text(&failing["part"])) } ": " (text(&failing["reason"]))
            ". They stay in Redis, whose memory grows: see the replica's log."
        });
    }
    if archive["behind"] == true {
        said.push(html! {
            "The archive is behind: the oldest outcome not archived was recorded "
            (duration(archive["lag_ms"].as_i64().unwrap_or_default())) " ago."
        });
    }
    if archive["exporting"].as_array().is_some_and(Vec::is_empty)
        && status["writes_refused"].is_null()
    {
        said.push(html! { "No live replica exports to the archive: start one with " code { "--archive" } "." });
    }
    if status["definition_hashes_damaged"] == true {
        said.push(html! { "The published definitions' hashes are damaged: each is taken from its definition until the leader replaces them; see " code { "redcron status" } "." });
    }
    for name in status["damaged_names"].as_array().into_iter().flatten() {
        said.push(html! { "A name that is not UTF-8 (damaged) is left out, and the reapers remove it: " code { (text(name)) } });
    }
    for failing in status["failing_scripts"].as_array().into_iter().flatten() {
        said.push(html! { "Replica " strong { (text(&failing["replica"])) } ": " (text(&failing["error"])) });
    }
    html! {
        section #warnings data-refresh aria-labelledby="warnings-h" {
            h2 #warnings-h { "Warnings" }
            @if said.is_empty() {
                p.empty { "None: every replica beats, every queue is served, Redis takes writes." }
            } @else {
                ul.warnings { @for warning in said { li { (warning) } } }
            }
        }
    }
}

/// The leader and the replicas' table; without a replica, how to start one.
fn replicas(status: &Value) -> Markup {
    let replicas = status["replicas"].as_array().cloned().unwrap_or_default();
    html! {
        p {
            @match status["leader"]["id"].as_str() {
                Some(leader) => {
                    "Leader: " strong { (leader) } " (epoch " (text(&status["leader"]["epoch"])) "), lease "
                    (duration(status["leader"]["lease_ms"].as_i64().unwrap_or_default())) " left."
                }
                None => "No leader: an election is due within the lease.",
            }
        }
        @if replicas.is_empty() {
            p.empty { "No replica has beaten: start one on each machine with " code { "redcron run --schedules DIR" } "." }
        } @else {
            table {
                thead { tr {
                    th scope="col" { "Replica" } th scope="col" { "State" } th scope="col" { "Version" }
                    th.number scope="col" { "Workers busy" } th scope="col" { "Queues" } th scope="col" { "Last heartbeat" }
                } }
                tbody {
                    @for replica in &replicas {
                        @let state = text(&replica["state"]);
                        tr {
                            th scope="row" { (text(&replica["id"])) }
                            td class=(format!("state-{state}")) { (state) }
                            td { (text(&replica["info"]["version"])) }
                            td.number { (text(&replica["info"]["busy_workers"])) " / " (text(&replica["info"]["max_workers"])) }
                            td { (list(&replica["queues"])) }
                            td { (ago(0, -replica["heartbeat_age_ms"].as_i64().unwrap_or_default())) }
                        }
                    }
                }
            }
        }
    }
}

/// The runs waiting in each queue by priority, and the namespace's counts.
fn queues(status: &Value) -> Markup {
    let ready = status["ready"].as_array().cloned().unwrap_or_default();
    let empty = ready.iter().all(|queue| waiting(queue) == 0);
    html! {
        p {
            (text(&status["active"])) " running, " (text(&status["due"])) " due later, "
            (text(&status["dead"])) " dead."
        }
        @if empty {
            p.empty { "No run waits in a queue." }
        } @else {
            table {
                thead { tr {
                    th scope="col" { "Queue" } th.number scope="col" { "High" } th.number scope="col" { "Normal" }
                    th.number scope="col" { "Low" } th.number scope="col" { "Served by" }
                } }
                tbody {
                    @for queue in &ready {
                        tr {
                            th scope="row" { (text(&queue["queue"])) }
                            td.number { (text(&queue["high"])) }
                            td.number { (text(&queue["normal"])) }
                            td.number { (text(&queue["low"])) }
                            td.number { (text(&queue["served_by"])) " replicas" }
                        }
                    }
                }
            }
        }
    }
}

/// The archive of a namespace that archives, as `status` shows it: where (its URL, which holds
/// no credentials), what waits for it and how late, and whether it refuses parts.
fn archive(archive: &Value) -> Markup {
    let failing: Vec<String> = archive["failing"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|failing| text(&failing["replica"]))
        .collect();
    html! {
        p {
            "To " code { (text(&archive["url"])) } ": "
            @match archive["records"].as_i64().unwrap_or_default() {
                0 => "nothing waits",
                records => {
                    (records) " records wait, the oldest "
                    (duration(archive["lag_ms"].as_i64().unwrap_or_default())) " old"
                }
            }
            "; exported by "
            @match list(&archive["exporting"]) {
                none if none.is_empty() => "no live replica",
                exporting => (exporting),
            }
            "."
        }
        p.archive-state {
            @if !failing.is_empty() {
                strong { "Failing" } ": the archive refused the last part of "
                (failing.join(", ")) " (see Warnings)."
            } @else {
                "Not failing: no live exporter's last part was refused."
            }
        }
    }
}

/// The outcomes of the last day, counted from the events stream, and the charts of them.
fn activity(events: &[Event], now_ms: i64) -> Markup {
    let mut outcomes: BTreeMap<&str, u64> = BTreeMap::new();
    for event in events
        .iter()
        .take_while(|event| now_ms - event.at_ms <= DAY_MS)
    {
        if let Some(state) = event.fields.get("state").map(String::as_str)
            && matches!(state, "succeeded" | "dead" | "retrying" | "skipped")
        {
            *outcomes.entry(state).or_default() += 1;
        }
    }
    let reached_back = events
        .last()
        .is_some_and(|oldest| now_ms - oldest.at_ms < DAY_MS)
        && events.len() >= crate::client::EVENTS_SCANNED;
    html! {
        @if outcomes.is_empty() {
            p.empty { "No run ended in the last 24 hours: once a job's fire runs, its outcome is counted here." }
        } @else {
            dl {
                @for (state, count) in &outcomes {
                    dt class=(format!("outcome-{state}")) { (state) }
                    dd { (count) }
                }
            }
            @if reached_back {
                p.empty { "Counted from the newest " (crate::client::EVENTS_SCANNED) " outcomes, which reach back less than a day." }
            }
        }
        (super::activity::charts(events, now_ms))
    }
}

/// How many runs wait in a queue of the document, whatever their priority.
fn waiting(queue: &Value) -> i64 {
    ["high", "normal", "low"]
        .iter()
        .filter_map(|priority| queue[*priority].as_i64())
        .sum()
}

/// A value of the document as text: a string as it is, a number written out, nothing for null.
pub(super) fn text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A list of the document's strings, comma-separated.
fn list(value: &Value) -> String {
    value
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `POST /hold/release`: ends a hold, as `redcron release` does, and goes back to the overview.
pub(super) async fn release(
    context: PageContext,
    State(state): State<WebState>,
    form: CheckedForm<NoQuery>,
) -> Response {
    let CheckedForm {
        operator,
        form: NoQuery {},
    } = form;
    match state
        .client()
        .acting_as(operator.0.name.clone())
        .release()
        .await
    {
        Ok(_) => {
            tracing::info!(
                "{} released the hold of namespace {}",
                operator.0.name,
                state.namespace()
            );
            Redirect::to(&context.link("/")).into_response()
        }
        Err(error) => ApiError::from(error).into_response(),
    }
}
