//! A run's page: what `runs show` shows (its record, shaped by the same document), its
//! timeline from the events stream, its payload and output as text, and, while it runs, its
//! output so far, which the console's script refreshes every second from the API.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use maud::{Markup, html};
use serde_json::{Map, Value};

use super::overview::text;
use super::runs::failed;
use super::{PageContext, layout};
use crate::cli::runs::{output_so_far, readable, shown_run_document};
use crate::cli::status::silent_too_long;
use crate::cli::times::{duration, relative, rfc3339};
use crate::client::Client;
use crate::store::Event;
use crate::store::replica_of_worker;
use crate::web::api::{Segment, archived_run};
use crate::web::query::{NoQuery, Params};
use crate::web::{ApiError, WebState, csrf};

/// The record's fields the page names at its top, in order, with their labels.
const FACTS: [(&str, &str); 10] = [
    ("job", "Job"),
    ("kind", "Kind"),
    ("state", "State"),
    ("attempt", "Attempt"),
    ("max_attempts", "Attempts allowed"),
    ("queue", "Queue"),
    ("priority", "Priority"),
    ("worker", "Worker"),
    ("exit_code", "Exit code"),
    ("reason", "Reason"),
];

/// The record's instants the timeline shows beside what the events say. The events stream records how each attempt ended (and a re-drive); the record keeps when
/// the run was made, came due, became ready and when its latest attempt started.
const INSTANTS: [(&str, &str); 6] = [
    ("created_ms", "created"),
    ("fire_ms", "fire time"),
    ("due_ms", "due"),
    ("ready_ms", "ready (promoted)"),
    ("started_ms", "latest attempt started"),
    ("redriven_ms", "re-driven from the dead letters"),
];

/// `GET /runs/{id}`: the run, from the archive once Redis no longer holds it (the namespace's
/// `{ns}:archive-to`), or a 404 in the layout for a run neither holds.
pub(super) async fn page(
    context: PageContext,
    State(state): State<WebState>,
    Segment(id): Segment,
    Params(NoQuery {}): Params<NoQuery>,
) -> Response {
    let client = state.client();
    let read = async {
        let fields = client.run(&id).await?;
        if fields.is_empty() {
            return Ok(None);
        }
        let so_far = output_so_far(client, &id, &fields).await?;
        let events = client.recent_events().await?;
        let now_ms = client.store().now_ms().await?;
        let run = shown_run_document(&id, fields, so_far.as_ref());
        let lost = lost_replica(client, &run).await?;
        Ok::<_, ApiError>(Some((run, events, now_ms, lost)))
    };
    let (run, events, now_ms, lost) = match read.await {
        Ok(Some(read)) => read,
        // A planned cron fire has no record until it comes due, yet the Runs page lists it.
        Ok(None) => {
            return match client.due_at(&id).await {
                Ok((Some(due_ms), now_ms)) => planned(&context, &id, due_ms, now_ms),
                Ok((None, now_ms)) => match archived_run(&state, &id).await {
                    Ok(Some((run, part))) => {
                        let events = run.events();
                        let document = shown_run_document(&id, run.fields(), None);
                        let archived = Some(part.as_str());
                        drawn(&context, &id, &document, &events, now_ms, archived, None)
                    }
                    Ok(None) => gone(&context, &id),
                    Err(error) => failed(&context, "Run", &error, html! {}),
                },
                Err(error) => failed(&context, "Run", &error.into(), html! {}),
            };
        }
        Err(error) => return failed(&context, "Run", &error, html! {}),
    };
    drawn(&context, &id, &run, &events, now_ms, None, lost.as_ref())
}

/// The replica running an active run, when it has stopped beating: killed, frozen or cut off
/// from Redis, it holds the run's lease until it expires, and the page says so rather than
/// show a run that looks as if it were going on.
struct LostReplica {
    /// Its id.
    id: String,
    /// How long since it last beat, ms; `None` when its record expired.
    silent_ms: Option<i64>,
}

/// The replica that holds active `run`, if it has stopped beating (see [`LostReplica`]).
async fn lost_replica(
    client: &Client,
    run: &Map<String, Value>,
) -> Result<Option<LostReplica>, ApiError> {
    let Some(replica) = run["worker"]
        .as_str()
        .filter(|_| run["state"] == "active")
        .and_then(replica_of_worker)
    else {
        return Ok(None);
    };
    let lost = match client.store().replica_instance(replica).await? {
        None => Some(None),
        Some(seen) if silent_too_long(seen.now_ms, seen.beat_ms, seen.period_ms) => {
            Some(Some(seen.now_ms - seen.beat_ms))
        }
        Some(_) => None,
    };
    Ok(lost.map(|silent_ms| LostReplica {
        id: replica.to_owned(),
        silent_ms,
    }))
}

/// The page of run `id` whose document is `run`: what it is, its timeline from `events`, its
/// payload and its output; `archived_in`, the part holding its last outcome, for a run read from
/// the archive once Redis no longer holds it.
fn drawn(
    context: &PageContext,
    id: &str,
    run: &Map<String, Value>,
    events: &[Event],
    now_ms: i64,
    archived_in: Option<&str>,
    lost: Option<&LostReplica>,
) -> Response {
    let title = format!("Run {id}");
    let running = run["state"] == "active";
    let main = html! {
        h1 { "Run " code { (id) } }
        @if let Some(part) = archived_in {
            p #archived {
                "From the archive: Redis no longer holds this run. Its last outcome is in "
                code { (part) } "."
            }
        }
        @if let Some(lost) = lost {
            p #lost-replica.warning {
                "Replica " strong { (lost.id) } " that runs this attempt "
                @match lost.silent_ms {
                    Some(silent_ms) => { "has not beaten for " (duration(silent_ms)) }
                    None => "beats no more",
                }
                ": it is lost (killed, frozen or cut off from Redis). When the run's lease ends, "
                "the run is started again without using a retry (or, delivered at most once, "
                "recorded dead as lost)."
            }
        }
        section #facts aria-labelledby="facts-h" {
            h2 #facts-h { "What it is" }
            dl.facts {
                @for (field, label) in FACTS {
                    @let value = text(&run[field]);
                    @if !value.is_empty() {
                        dt { (label) }
                        dd class=[(field == "state").then(|| format!("state-{value}"))] {
                            @if field == "job" {
                                a href=(context.link(&format!("/jobs/{}", segment(&value)))) { (value) }
                            } @else {
                                (value)
                            }
                        }
                    }
                }
            }
            @if let Some(actor) = run["actor"].as_str() {
                p #made-by {
                    @if run.contains_key("triggered") { "Triggered by " } @else { "Enqueued by " }
                    strong { (actor) }
                }
            }
            @if let Some(error) = run["error"].as_str().filter(|error| !error.is_empty()) {
                p { "Error: " (error) }
            }
            @if run["state"] == "dead" && archived_in.is_none() {
                (dead_letter(context, id, &text(&run["job"])))
            }
        }
        section #timeline aria-labelledby="timeline-h" {
            h2 #timeline-h { "Timeline" }
            (timeline(id, run, events, now_ms))
        }
        section #payload aria-labelledby="payload-h" {
            h2 #payload-h { "Payload" }
            @match run["payload"].as_str().filter(|payload| !payload.is_empty()) {
                Some(payload) => pre tabindex="0" { (payload) },
                None => p.empty { "None." },
            }
        }
        section #output aria-labelledby="output-h" {
            h2 #output-h { "Output" }
            @if running {
                (live(context, id, run))
            } @else {
                @match run["output"].as_str().filter(|output| !output.is_empty()) {
                    Some(output) => pre tabindex="0" { (output) },
                    None => p.empty { "It printed nothing." },
                }
            }
        }
    };
    layout::page(context, StatusCode::OK, &title, main)
}

/// Where a dead run waits: a link to its job's dead letters and, for an operator, the retry
/// the Dead letters page offers, so that the run's page is no dead end.
fn dead_letter(context: &PageContext, id: &str, job: &str) -> Markup {
    let letters = context.link(&format!("/dead?job={}", segment(job)));
    html! {
        p #dead-letter {
            "It is in the " a href=(letters) { "dead letters of " (job) } "."
        }
        @if context.may_act {
            form.inline method="post" action=(context.link(&format!("/dead/{}/retry", segment(id)))) {
                input type="hidden" name=(csrf::FIELD) value=(context.csrf_token);
                button type="submit" aria-label=(format!("Retry {id}")) { "Retry" }
            }
        }
    }
}

/// A running run's output so far, in the element the console's script refreshes from the
/// API (`data-live-output` names the URL): without the script, a reload shows more.
fn live(context: &PageContext, id: &str, run: &Map<String, Value>) -> Markup {
    let so_far = &run["output_so_far"];
    let source = context.link(&format!("/api/v1/runs/{}", segment(id)));
    html! {
        p #live-output-note {
            "It runs: its output so far, as its worker last wrote it"
            @if let Some(written_ms) = so_far["written_ms"].as_i64() {
                " (" time datetime=(rfc3339(written_ms)) { (rfc3339(written_ms)) } ")"
            }
            ". The worker writes the last 4 KiB of it at most once a second."
        }
        pre #live-output tabindex="0" data-live-output=(source) aria-live="polite" {
            (so_far["output"].as_str().unwrap_or_default())
        }
    }
}

/// The run's life, oldest first: the instants its record keeps, then every event the stream
/// still holds of it (each attempt's start and end, with replica and worker, reason, exit
/// code, and who acted where the event names them).
fn timeline(id: &str, run: &Map<String, Value>, events: &[Event], now_ms: i64) -> Markup {
    let mut rows: Vec<(i64, String, BTreeMap<String, String>)> = INSTANTS
        .iter()
        .filter_map(|(field, label)| {
            run[*field]
                .as_i64()
                .map(|at_ms| (at_ms, (*label).to_owned(), BTreeMap::new()))
        })
        .collect();
    for event in events
        .iter()
        .filter(|event| event.fields.get("run").map(String::as_str) == Some(id))
    {
        let details: BTreeMap<String, String> = event
            .fields
            .iter()
            .filter(|(name, value)| {
                !matches!(name.as_str(), "run" | "job" | "state" | "action") && !value.is_empty()
            })
            .map(|(name, value)| readable(name.clone(), value.clone()))
            .collect();
        // An action that made the run (a trigger, an enqueue) has no state: its name stands.
        let state = event
            .fields
            .get("state")
            .or_else(|| event.fields.get("action"))
            .cloned()
            .unwrap_or_default();
        rows.push((event.at_ms, state, details));
    }
    // Stable: an instant of the record comes before an event of the same millisecond.
    rows.sort_by_key(|(at_ms, _, _)| *at_ms);
    html! {
        ol.timeline {
            @for (at_ms, what, details) in &rows {
                li {
                    time datetime=(rfc3339(*at_ms)) title=(rfc3339(*at_ms)) { (relative(now_ms, *at_ms)) }
                    " " strong { (what) }
                    @for (name, value) in details {
                        " · " (name.replace('_', " ")) " " span.value { (value) }
                    }
                }
            }
        }
        @if rows.is_empty() {
            p.empty { "Nothing recorded yet." }
        }
    }
}

/// A planned fire, due at `due_ms`, which has no record yet: what `runs show` says of it.
fn planned(context: &PageContext, id: &str, due_ms: i64, now_ms: i64) -> Response {
    let job = crate::store::parse_cron_run_id(id).map_or(id, |(job, _)| job);
    let main = html! {
        h1 { "Run " code { (id) } }
        p {
            "A planned fire of job "
            a href=(context.link(&format!("/jobs/{}", super::segment(job)))) { (job) }
            ", due " time datetime=(rfc3339(due_ms)) { (rfc3339(due_ms)) }
            " (" (relative(now_ms, due_ms)) "). It has no record yet: it gets one when it comes due."
        }
        p { a href=(context.link("/runs")) { "Back to the runs" } }
    };
    layout::page(context, StatusCode::OK, &format!("Run {id}"), main)
}

/// A run neither Redis nor the archive holds: a 404 in the layout that says why.
fn gone(context: &PageContext, id: &str) -> Response {
    let main = html! {
        h1 { "Run " code { (id) } }
        p {
            "Redis holds no run " code { (id) } ", nor does the namespace's archive if it has one: "
            "it never existed, or it ended longer ago than the run retention and its record "
            "expired."
        }
        p { a href=(context.link("/runs")) { "Back to the runs" } }
    };
    layout::page(context, StatusCode::NOT_FOUND, "Run not found", main)
}

/// `id` as one segment of a path: every byte but the unreserved ones and `@` percent-encoded,
/// so that an id with `/`, `?` or `#` links its own page.
pub(super) fn segment(id: &str) -> String {
    id.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'@' | b':' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}
