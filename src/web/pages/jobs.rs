//! The jobs page: the declared jobs a page at a time, in the order `redcron jobs` lists them and
//! found by part of their name or by state, each with its schedule, next fire, last outcomes and
//! duration trend from the same documents as `redcron jobs --json`; and the actions on a job
//! (pause, resume, trigger), which the job's own page offers too.

use std::collections::HashSet;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Offset, TimeDelta, TimeZone, Utc};
use chrono_tz::Tz;
use maud::{Markup, html};
use serde::Deserialize;
use serde_json::Value;

use super::overview::text;
use super::{PageContext, layout, segment};
use crate::cli::status::{
    RecentEvents, ShownJob, first_after, paused_jobs, published_names, shown_job,
};
use crate::cli::times::relative;
use crate::schedule::Schedule;
use crate::web::api::{JOB_STATES, Segment, jobs_matching, trigger_job};
use crate::web::body::LONGEST_BODY;
use crate::web::chart::{RunDuration, durations_chart};
use crate::web::csrf::{self, CheckedForm};
use crate::web::query::{self, JOB, Params, Query, Takes};
use crate::web::strip::{Outcome, StripCell, outcome_strip};
use crate::web::{ApiError, WebState};

/// How many outcomes a job's strip and trend show.
const RECENT: usize = 20;

/// How many jobs a page shows: a screen or two an operator scans for a name, each row a strip
/// and a chart of its own, where every job of 10,000 made one page of 8 MB that refreshed every
/// 2 s.
const PAGE: usize = 100;

/// The page's query: its filter form's fields and where it starts, each empty when not given,
/// so that a pasted link shows the same slice.
#[derive(Debug, Default, Deserialize)]
pub(super) struct JobsFilter {
    /// Part of a job's name, any case.
    #[serde(default)]
    q: String,
    /// `paused` or `drifting` for those jobs alone; every job when empty.
    #[serde(default)]
    state: String,
    /// The job the page starts after, in the listing's order: a keyset, which a job added or
    /// removed before it does not shift.
    #[serde(default)]
    after: String,
}

impl Query for JobsFilter {
    const PARAMETERS: &'static [(&'static str, Takes)] =
        &[("q", JOB), ("state", JOB_STATES), ("after", JOB)];
}

impl JobsFilter {
    /// The page's link starting after `after` (the first page when `None`), keeping the filter.
    fn link(&self, context: &PageContext, after: Option<&str>) -> String {
        format!("{}{}", context.link("/jobs"), self.query(after))
    }

    /// The query of [`JobsFilter::link`], `?` and all; empty for the first page of every job.
    fn query(&self, after: Option<&str>) -> String {
        let mut query: Vec<(&str, &str)> = [("q", self.q.as_str()), ("state", self.state.as_str())]
            .into_iter()
            .filter(|(_, value)| !value.is_empty())
            .collect();
        if let Some(after) = after {
            query.push(("after", after));
        }
        if query.is_empty() {
            return String::new();
        }
        format!(
            "?{}",
            serde_urlencoded::to_string(query).unwrap_or_default()
        )
    }

    /// Whether the filter asks for anything.
    fn filters(&self) -> bool {
        !self.q.is_empty() || !self.state.is_empty()
    }
}

/// The jobs a filter matches, in the listing's order, and the slice of them a page shows.
struct Slice<'a> {
    /// How many jobs match the filter.
    matching: usize,
    /// The jobs shown, at most [`PAGE`].
    shown: Vec<&'a str>,
    /// Where the page before starts: `Some(None)` for the first page, `None` on the first.
    previous: Option<Option<&'a str>>,
    /// The job the next page starts after, `None` on the last.
    next: Option<&'a str>,
}

/// The slice of `matching` (the jobs the filter matches, sorted) that starts after the
/// filter's `after`.
fn slice<'a>(matching: &[&'a str], filter: &JobsFilter) -> Slice<'a> {
    let start = first_after(matching, &filter.after);
    let end = (start + PAGE).min(matching.len());
    let previous = (start > 0).then(|| start.checked_sub(PAGE + 1).map(|before| matching[before]));
    Slice {
        matching: matching.len(),
        shown: matching[start..end].to_vec(),
        previous,
        next: (end < matching.len()).then(|| matching[end - 1]),
    }
}

/// `GET /jobs`: the declared jobs the filter matches, a page of them.
pub(super) async fn page(
    context: PageContext,
    State(state): State<WebState>,
    Params(filter): Params<JobsFilter>,
) -> Response {
    let read = async {
        let overview = state.client().overview().await?;
        let events = RecentEvents::new(state.client().recent_events().await?);
        Ok::<_, ApiError>((overview, events))
    };
    let (overview, events) = match read.await {
        Ok(read) => read,
        Err(error) => return unavailable(&context, "Jobs", &error),
    };
    let names = published_names(&overview);
    let paused_jobs = paused_jobs(&overview);
    let matching = jobs_matching(&overview, &names, &filter.q, &filter.state);
    let slice = slice(&matching, &filter);
    // Documents of the jobs shown alone: a page costs the events once and its jobs.
    let jobs: Vec<(&str, ShownJob)> = slice
        .shown
        .iter()
        .filter_map(|name| Some((*name, shown_job(&overview, &events, name)?)))
        .collect();
    let main = html! {
        h1 { "Jobs" }
        @if names.is_empty() {
            p.empty {
                "No job declared: put a schedule file in the directory a replica reads ("
                code { "redcron run --schedules DIR" } ", " code { "/etc/redcron/schedules" }
                " unless told) and start it; its jobs are listed here once it has beaten."
            }
        } @else {
            (filters(&context, &filter))
            p.count {
                @if filter.filters() { (slice.matching) " of " } (names.len())
                @if names.len() == 1 { " job declared" } @else { " jobs declared" }
                @if filter.filters() { " match" }
                @if !jobs.is_empty() && slice.matching > jobs.len() {
                    "; " (jobs.first().map_or("", |(name, _)| *name)) " to "
                    (jobs.last().map_or("", |(name, _)| *name)) " shown"
                }
                "."
            }
            section #jobs data-refresh aria-labelledby="jobs-h" {
                h2 #jobs-h .visually-hidden { "Declared jobs" }
                @if jobs.is_empty() {
                    p.empty {
                        @if slice.matching == 0 { "No job matches the filter: " }
                        @else { "No more jobs after " code { (filter.after) } ": " }
                        a href=(context.link("/jobs")) { "every job" } "."
                    }
                } @else {
                    (table(&context, &filter, &jobs, &events, &paused_jobs, overview.now_ms))
                }
            }
            (pager(&context, &filter, &slice))
        }
    };
    layout::page(&context, StatusCode::OK, "Jobs", main)
}

/// The filter form: a GET, so that a filtered page is a link and works without JavaScript.
fn filters(context: &PageContext, filter: &JobsFilter) -> Markup {
    let states = [
        ("", "Any state"),
        ("paused", "Paused"),
        ("drifting", "Declared differently"),
    ];
    html! {
        form.filters method="get" action=(context.link("/jobs")) role="search" aria-label="Filter the jobs" {
            label for="job-q" { "Name contains" }
            input #job-q type="search" name="q" value=(filter.q);
            label for="job-state" { "State" }
            select #job-state name="state" {
                @for (value, label) in states {
                    option value=(value) selected[filter.state == value] { (label) }
                }
            }
            button type="submit" { "Filter" }
        }
    }
}

/// The links to the first, previous and next pages, each keeping the filter.
fn pager(context: &PageContext, filter: &JobsFilter, slice: &Slice) -> Markup {
    html! {
        @if slice.previous.is_some() || slice.next.is_some() {
            nav.pager aria-label="Pages of jobs" {
                @if let Some(previous) = slice.previous {
                    a href=(filter.link(context, None)) { "First page" } " · "
                    a rel="prev" href=(filter.link(context, previous)) { "Previous page" }
                }
                @if let Some(next) = slice.next {
                    @if slice.previous.is_some() { " · " }
                    a rel="next" href=(filter.link(context, Some(next))) { "Next page" }
                }
            }
        }
    }
}

/// The table of the jobs shown, from their documents.
fn table(
    context: &PageContext,
    filter: &JobsFilter,
    jobs: &[(&str, ShownJob)],
    events: &RecentEvents,
    paused_jobs: &HashSet<&str>,
    now_ms: i64,
) -> Markup {
    // An action goes back to this page, its filter and slice kept.
    let after = Some(filter.after.as_str()).filter(|after| !after.is_empty());
    let back = format!("jobs{}", filter.query(after));
    html! {
        table.jobs {
            thead { tr {
                th scope="col" { "Job" } th scope="col" { "Schedule" } th scope="col" { "Next fire" }
                th scope="col" { "Last " (RECENT) " outcomes" } th scope="col" { "Durations" }
                th scope="col" { "State" }
                @if context.may_act { th scope="col" { "Actions" } }
            } }
            tbody {
                @for (name, shown) in jobs {
                    @let job = &shown.document;
                    @let paused = paused_jobs.contains(name);
                    tr {
                        th scope="row" { a href=(context.link(&format!("/jobs/{}", segment(name)))) { (name) } }
                        td { (schedule(job, shown.schedule.as_ref())) }
                        td { (next_fire(job, shown.schedule.as_ref(), now_ms)) }
                        td { (outcome_strip(name, &outcomes(events, name))) }
                        td.trend { (durations_chart(name, &durations(events, name))) }
                        td { (job_state(job, paused)) }
                        @if context.may_act { td { (actions(context, name, paused, &back)) } }
                    }
                }
            }
        }
    }
}

/// A page drawn when Redis could not be read: the layout, what went wrong, its status.
pub(super) fn unavailable(context: &PageContext, title: &str, error: &ApiError) -> Response {
    let main = html! {
        h1 { (title) }
        ul.warnings { li { "Redis cannot be read now: " (error.message) } }
        p { "The page shows the namespace again once Redis answers." }
    };
    layout::page(context, error.status, title, main)
}

/// The schedule in words with its zone, and as written beside them; as written with its zone
/// alone when the words cannot say it exactly. A job with none runs when triggered.
pub(super) fn schedule(job: &Value, parsed: Option<&Schedule>) -> Markup {
    let zone = job["timezone"]
        .as_str()
        .and_then(|zone| zone.parse::<Tz>().ok());
    html! {
        @match job["schedule"].as_str() {
            Some(expression) => {
                @match parsed.zip(zone).and_then(|(schedule, zone)| schedule.in_words(zone)) {
                    Some(words) => { span.words { (words) } " " code { (expression) } },
                    None => { code { (expression) } ", " (text(&job["timezone"])) },
                }
            }
            None if job["damaged"] == true => "damaged: the leader writes it again",
            None => "on demand",
        }
    }
}

/// The job's next `count` fires of its `parsed` schedule, each with the zone its fields are
/// read in: none for a job disabled, on demand, or damaged.
pub(super) fn upcoming(
    job: &Value,
    parsed: Option<&Schedule>,
    now_ms: i64,
    count: usize,
) -> Vec<(DateTime<Utc>, Tz)> {
    let (Some(schedule), Some(zone), Some(now)) = (
        parsed.filter(|_| job["enabled"] == true),
        job["timezone"]
            .as_str()
            .and_then(|zone| zone.parse::<Tz>().ok()),
        DateTime::from_timestamp_millis(now_ms),
    ) else {
        return Vec::new();
    };
    schedule
        .fires_after(now, zone)
        .take(count)
        .map(|fire| (fire, zone))
        .collect()
}

/// A fire as people read it: relative, then on the job's own clock, flagged when the zone's
/// offset changed in the day before it (a DST change moved, skipped or doubled a wall time).
pub(super) fn fire_time(fire: DateTime<Utc>, zone: Tz, now_ms: i64) -> Markup {
    let local = fire.with_timezone(&zone);
    let day_before = (fire - TimeDelta::days(1)).with_timezone(&zone);
    let dst = local.offset().fix() != day_before.offset().fix();
    html! {
        (relative(now_ms, fire.timestamp_millis())) " · "
        time datetime=(fire.to_rfc3339()) { (local.format("%a %Y-%m-%d %H:%M:%S %Z")) }
        @if dst {
            " " span.dst title="The zone's clock changes (DST) within the day before this fire" { "DST change" }
        }
    }
}

/// The next fire of a job, or why it has none.
fn next_fire(job: &Value, parsed: Option<&Schedule>, now_ms: i64) -> Markup {
    match upcoming(job, parsed, now_ms, 1).first() {
        Some((fire, zone)) => fire_time(*fire, *zone, now_ms),
        None if job["enabled"] == false => html! { "disabled" },
        None => html! { "none" },
    }
}

/// Paused or active, and the replicas that declare it otherwise.
pub(super) fn job_state(job: &Value, paused: bool) -> Markup {
    let drift: Vec<String> = job["drift"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    html! {
        @if paused { strong.paused { "paused" } } @else { "active" }
        @if !drift.is_empty() {
            br;
            span.drift { "declared differently by " (drift.join(", ")) }
        }
    }
}

/// The job's outcomes among the recent events, at most [`RECENT`], oldest first.
pub(super) fn outcomes(events: &RecentEvents, job: &str) -> Vec<StripCell> {
    let mut cells: Vec<StripCell> = events
        .of(job)
        .filter_map(|event| {
            let outcome = match event.fields.get("state").map(String::as_str) {
                Some("succeeded") => Outcome::Succeeded,
                Some("retrying") => Outcome::Failed,
                Some("dead") => Outcome::Dead,
                Some("skipped") => Outcome::Skipped,
                _ => return None,
            };
            let at_ms = event
                .fields
                .get("started_ms")
                .and_then(|started| started.parse().ok())
                .unwrap_or(event.at_ms);
            Some(StripCell {
                run_id: event.fields.get("run").cloned().unwrap_or_default(),
                at: DateTime::from_timestamp_millis(at_ms)?,
                outcome,
            })
        })
        .take(RECENT)
        .collect();
    cells.reverse();
    cells
}

/// The durations of the job's last runs that ran among the recent events, oldest first.
pub(super) fn durations(events: &RecentEvents, job: &str) -> Vec<RunDuration> {
    let mut runs: Vec<RunDuration> = events
        .of(job)
        .filter_map(|event| {
            let ms: u64 = event.fields.get("duration_ms")?.parse().ok()?;
            Some(RunDuration {
                run_id: event.fields.get("run").cloned().unwrap_or_default(),
                ended: Utc.timestamp_millis_opt(event.at_ms).single()?,
                duration: std::time::Duration::from_millis(ms),
            })
        })
        .take(RECENT)
        .collect();
    runs.reverse();
    runs
}

/// The forms that pause or resume `job` and trigger it with a payload; a pause or resume
/// answers with a redirect to `back` (`jobs` and the jobs page's query, or `job` for the job's
/// page).
pub(super) fn actions(context: &PageContext, job: &str, paused: bool, back: &str) -> Markup {
    let base = format!("/jobs/{}", segment(job));
    let (verb, label) = if paused {
        ("resume", "Resume")
    } else {
        ("pause", "Pause")
    };
    html! {
        form.inline method="post" action=(context.link(&format!("{base}/{verb}"))) {
            input type="hidden" name=(csrf::FIELD) value=(context.csrf_token);
            input type="hidden" name="back" value=(back);
            button type="submit" aria-label=(format!("{label} {job}")) { (label) }
        }
        form.inline.trigger method="post" action=(context.link(&format!("{base}/trigger"))) {
            input type="hidden" name=(csrf::FIELD) value=(context.csrf_token);
            label {
                span.visually-hidden { "Payload (JSON) for " (job) }
                input type="text" name="payload" placeholder="payload (JSON, optional)";
            }
            button type="submit" aria-label=(format!("Trigger {job}")) { "Trigger" }
        }
    }
}

/// What a pause or resume form carries: where to go back to.
#[derive(Deserialize)]
pub(super) struct PauseForm {
    /// `jobs` for the jobs page, followed by its query (`jobs?q=back&after=backup`); the
    /// job's page otherwise.
    #[serde(default)]
    back: String,
}

impl Query for PauseForm {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[(
        "back",
        Takes::Text {
            what: "a link back to a page of the console",
            longest: query::LONGEST_URI,
        },
    )];
}

/// Where an action on `job` goes back to: the jobs page's slice it was taken on, or the job's
/// page. The query is read back into a filter and written again, so that a forged `back` leads
/// nowhere but to a jobs page.
fn back_to(context: &PageContext, job: &str, back: &str) -> Response {
    let link = match back.strip_prefix("jobs") {
        Some(query) => {
            // Checked as the page's own query is: a `back` the page would refuse leads to the
            // first page, and no redirect repeats more than a page's link holds.
            let filter: JobsFilter =
                query::parse(query.trim_start_matches('?')).unwrap_or_default();
            let after = Some(filter.after.as_str()).filter(|after| !after.is_empty());
            filter.link(context, after)
        }
        None => context.link(&format!("/jobs/{}", segment(job))),
    };
    Redirect::to(&link).into_response()
}

/// `POST /jobs/{job}/pause`: pauses the job, as `redcron pause` does.
pub(super) async fn pause(
    context: PageContext,
    State(state): State<WebState>,
    Segment(job): Segment,
    form: CheckedForm<PauseForm>,
) -> Response {
    set_paused(context, state, job, form, true).await
}

/// `POST /jobs/{job}/resume`: resumes the job, as `redcron resume` does.
pub(super) async fn resume(
    context: PageContext,
    State(state): State<WebState>,
    Segment(job): Segment,
    form: CheckedForm<PauseForm>,
) -> Response {
    set_paused(context, state, job, form, false).await
}

async fn set_paused(
    context: PageContext,
    state: WebState,
    job: String,
    form: CheckedForm<PauseForm>,
    paused: bool,
) -> Response {
    let CheckedForm { operator, form } = form;
    let client = state.client().acting_as(operator.0.name);
    let done = if paused {
        client.pause(&job).await
    } else {
        client.resume(&job).await
    };
    match done {
        Ok(_) => back_to(&context, &job, &form.back),
        Err(error) => ApiError::from(error).into_response(),
    }
}

/// What a trigger form carries: the run's payload, JSON text, or nothing.
#[derive(Deserialize)]
pub(super) struct TriggerForm {
    #[serde(default)]
    payload: String,
}

impl Query for TriggerForm {
    const PARAMETERS: &'static [(&'static str, Takes)] = &[(
        "payload",
        Takes::Json {
            longest: LONGEST_BODY,
        },
    )];
}

/// `POST /jobs/{job}/trigger`: a fire of the job now, as `redcron trigger` makes it; back to
/// the job's page, where its run shows.
pub(super) async fn trigger(
    context: PageContext,
    State(state): State<WebState>,
    Segment(job): Segment,
    form: CheckedForm<TriggerForm>,
) -> Response {
    let CheckedForm { operator, form } = form;
    let payload = Some(form.payload.trim().to_owned()).filter(|payload| !payload.is_empty());
    let client = state.client().acting_as(operator.0.name);
    match trigger_job(&client, &job, payload, None).await {
        Ok(_) => back_to(&context, &job, "job"),
        Err(error) => error.into_response(),
    }
}
