//! The workflow pages: the instances, newest first, filtered by workflow and state; one
//! instance's steps as a graph and a table with each step's input and output; and its one
//! action, running a failed instance again.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};

use super::{PageContext, layout};
use crate::cli::times::{local_time, relative};
use crate::client::ClientError;
use crate::store::{StepInstance, WorkflowInstance, WorkflowState};
use crate::web::api::{Segment, WorkflowsParams, list_workflows, retry_workflow};
use crate::web::csrf::{self, CheckedForm};
use crate::web::query::{NoQuery, Params};
use crate::web::{ApiError, WebState, graph};

/// Where the guide says how to declare a workflow.
const GUIDE: &str = "docs/guide.md#workflows";

/// `GET /workflows`: the instances.
pub(super) async fn list(
    context: PageContext,
    State(state): State<WebState>,
    Params(params): Params<WorkflowsParams>,
) -> Result<Response, ApiError> {
    let overview = state.client().overview().await?;
    let mut declared: Vec<&str> = overview
        .definitions
        .iter()
        .filter(|(_, definition)| is_workflow(definition))
        .map(|(name, _)| name.as_str())
        .collect();
    declared.sort_unstable();
    let listing = list_workflows(&state, &params).await?;
    let now_ms = overview.now_ms;
    let asked_name = params.workflow.as_deref().unwrap_or_default();
    let asked_state = params.state.as_deref().unwrap_or_default();
    let main = html! {
        h1 { "Workflows" }
        @if declared.is_empty() && listing.instances.is_empty() {
            p.empty {
                "No workflow declared: a schedule file declares one as "
                code { "[workflows.NAME]" } " with its " code { "steps" }
                ", each a job and the steps it needs (see " code { (GUIDE) } ")."
            }
        } @else {
            form.filters method="get" action=(context.link("/workflows")) {
                label { "Workflow "
                    select name="workflow" {
                        option value="" { "all" }
                        @for name in &declared {
                            option value=(name) selected[*name == asked_name] { (name) }
                        }
                    }
                }
                " "
                label { "State "
                    select name="state" {
                        option value="" { "any" }
                        @for word in WorkflowState::ALL.iter().map(|state| state.as_str()) {
                            option value=(word) selected[word == asked_state] { (word) }
                        }
                    }
                }
                " "
                button type="submit" { "Show" }
            }
            @if listing.instances.is_empty() {
                p.empty { "No instance matches: a workflow's instance starts at its schedule's fire, or with "
                    code { "redcron workflow start NAME" } "." }
            } @else {
                table {
                    thead { tr {
                        th scope="col" { "Instance" } th scope="col" { "Workflow" } th scope="col" { "State" }
                        th scope="col" { "Started" } th scope="col" { "Ended" }
                    } }
                    tbody {
                        @for instance in &listing.instances {
                            tr {
                                th scope="row" { a href=(context.link(&format!("/workflows/{}", path_part(&instance.id)))) { (instance.id) } }
                                td { (instance.name) }
                                td class=(format!("state-{}", instance.state.as_str())) { (instance.state.as_str()) }
                                td { (when(now_ms, instance.started_ms)) }
                                td { @match instance.finished_ms { Some(ms) => (when(now_ms, ms)), None => "" } }
                            }
                        }
                    }
                }
            }
            @for (id, problem) in &listing.damaged {
                p.empty { "Instance " code { (id) } " cannot be read, left out: " (problem) }
            }
        }
    };
    Ok(layout::page(&context, StatusCode::OK, "Workflows", main))
}

/// `GET /workflows/{id}`: one instance.
pub(super) async fn instance(
    context: PageContext,
    State(state): State<WebState>,
    Segment(id): Segment,
    Params(NoQuery {}): Params<NoQuery>,
) -> Result<Response, ApiError> {
    let client = state.client();
    let Some(instance) = client.workflow(&id).await? else {
        return Err(ClientError::NoWorkflowInstance(id).into());
    };
    // Read for Redis's clock, as the instances' page reads it.
    let overview = client.overview().await?;
    let now_ms = overview.now_ms;
    // Each step's input and output are its run's payload and output: one read per step, as
    // many as the workflow declares.
    let mut runs = Vec::with_capacity(instance.steps.len());
    for step in &instance.steps {
        let fields = match &step.run_id {
            Some(run) => client.run(run).await?,
            None => Default::default(),
        };
        runs.push(fields);
    }
    let title = format!("Workflow {}", instance.name);
    let main = html! {
        h1 { "Workflow " (instance.name) }
        p {
            "Instance " code { (instance.id) } ": "
            strong class=(format!("state-{}", instance.state.as_str())) { (instance.state.as_str()) }
            ", started " (when(now_ms, instance.started_ms))
            @if let Some(ms) = instance.finished_ms { ", ended " (when(now_ms, ms)) }
            "; on a failure it " (if instance.on_failure == "continue" { "goes on with the steps that do not need the failed one" } else { "stops" }) "."
        }
        (retry_form(&context, &instance))
        section aria-labelledby="graph-h" {
            h2 #graph-h { "Steps" }
            figure.graph {
                (graph::step_graph(&format!("instance {} of {}", instance.id, instance.name), &instance.steps))
            }
            (steps_table(&context, &instance.steps, &runs))
        }
    };
    Ok(layout::page(&context, StatusCode::OK, &title, main))
}

/// The retry button of a failed instance, for who may act; a word on why not otherwise.
fn retry_form(context: &PageContext, instance: &WorkflowInstance) -> Markup {
    if instance.state != WorkflowState::Failed {
        return html! {};
    }
    html! {
        @if context.may_act {
            form.inline method="post" action=(context.link(&format!("/workflows/{}/retry", path_part(&instance.id)))) {
                input type="hidden" name=(csrf::FIELD) value=(context.csrf_token);
                button type="submit" { "Run again from the failed steps" }
            }
        } @else {
            p.empty { "An operator, on a console that is not read-only, can run it again from its failed steps." }
        }
    }
}

/// Each step: its job, what it needs, its state, its run, and its input and output as text.
fn steps_table(
    context: &PageContext,
    steps: &[StepInstance],
    runs: &[std::collections::HashMap<String, String>],
) -> Markup {
    html! {
        table.steps {
            thead { tr {
                th scope="col" { "Step" } th scope="col" { "Job" } th scope="col" { "Needs" }
                th scope="col" { "State" } th scope="col" { "Run" } th scope="col" { "Input" }
                th scope="col" { "Output" }
            } }
            tbody {
                @for (step, run) in steps.iter().zip(runs) {
                    tr {
                        th scope="row" { (step.name) }
                        td { (step.job) }
                        td { (step.needs.join(", ")) }
                        td class=(graph::class(step.status)) { (step.status.as_str()) }
                        td { @if let Some(id) = &step.run_id {
                            a href=(context.link(&format!("/runs/{}", path_part(id)))) { (id) }
                        } }
                        td { @if let Some(input) = run.get("payload") { pre { (input) } } }
                        td {
                            @if let Some(output) = run.get("output") { pre { (output) } }
                            @if let Some(error) = &step.error { p { (error) } }
                        }
                    }
                }
            }
        }
    }
}

/// `POST /workflows/{id}/retry`: runs a failed instance again, as `redcron workflow retry`
/// does, and goes back to its page.
pub(super) async fn retry(
    context: PageContext,
    State(state): State<WebState>,
    Segment(id): Segment,
    form: CheckedForm<NoQuery>,
) -> Result<Response, ApiError> {
    let CheckedForm {
        operator,
        form: NoQuery {},
    } = form;
    retry_workflow(&state, &operator.0, &id).await?;
    let back = context.link(&format!("/workflows/{}", path_part(&id)));
    Ok(Redirect::to(&back).into_response())
}

/// Whether a published definition is a workflow's.
fn is_workflow(definition: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(definition)
        .ok()
        .is_some_and(|definition| {
            definition
                .get("workflow")
                .is_some_and(|workflow| !workflow.is_null())
        })
}

/// An instant as people read it, with how long ago.
fn when(now_ms: i64, at_ms: i64) -> String {
    format!(
        "{} ({})",
        local_time(now_ms, at_ms),
        relative(now_ms, at_ms)
    )
}

/// An id as one segment of a path, every byte but the unreserved ones percent-encoded: a
/// step's run id holds `/` (`<instance>/<step>`).
fn path_part(id: &str) -> String {
    id.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                (byte as char).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}
