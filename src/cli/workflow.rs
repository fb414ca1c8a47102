//! `redcron workflow`: start a declared workflow, and see how its instances stand.

use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::enqueue::read_payload;
use super::output::ListFormat;
use super::times::{local_time, relative, rfc3339};
use super::{CliError, RedisArgs, block_on, list_count, write_table};
use crate::client::{Client, ClientError};
use crate::store::{StepStatus, WorkflowInstance};

#[derive(Debug, Subcommand)]
pub(super) enum WorkflowCommand {
    /// Start an instance of a declared workflow now; prints its id.
    Start(StartArgs),
    /// One row per instance, one column per step: pending, queued, running, succeeded,
    /// failed or skipped.
    Status(StatusArgs),
    /// The newest instances, of one workflow or of all, as `status` shows them.
    List(ListArgs),
    /// Run an instance again from its steps that failed or were skipped (a dead step's run
    /// leaves the dead letters; a step skipped while its job was paused runs anew).
    Retry(RetryArgs),
}

#[derive(Debug, Args)]
pub(super) struct RetryArgs {
    /// The instance id.
    id: String,
    /// Print the steps run again as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(Debug, Args)]
pub(super) struct StartArgs {
    /// The declared workflow.
    name: String,
    /// A JSON object for its first steps (and the base of what later ones receive), @FILE to
    /// read it from a file, or - to read it from standard input.
    #[arg(long, value_name = "JSON|@FILE|-")]
    payload: Option<String>,
    /// Print the new instance as one JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(Debug, Args)]
pub(super) struct StatusArgs {
    /// Instance ids, as `workflow start` printed them.
    #[arg(required = true, value_name = "ID")]
    ids: Vec<String>,
    #[command(flatten)]
    format: ListFormat,
    #[command(flatten)]
    redis: RedisArgs,
}

#[derive(Debug, Args)]
pub(super) struct ListArgs {
    /// Only instances of this workflow.
    name: Option<String>,
    /// How many at most (at least 1).
    #[arg(short = 'n', long = "count", default_value_t = 20, value_parser = list_count)]
    count: usize,
    #[command(flatten)]
    format: ListFormat,
    #[command(flatten)]
    redis: RedisArgs,
}

pub(super) fn execute(command: &WorkflowCommand, out: &mut impl Write) -> Result<(), CliError> {
    match command {
        WorkflowCommand::Start(args) => start(args, out),
        WorkflowCommand::Status(args) => {
            let instances = block_on(async {
                let client = Client::from_store(args.redis.connect().await?);
                let mut found = Vec::with_capacity(args.ids.len());
                for id in &args.ids {
                    match client.workflow(id).await.map_err(CliError::from)? {
                        Some(instance) => found.push(instance),
                        None => return Err(no_instance(&client, id).await),
                    }
                }
                Ok(found)
            })?;
            show(&instances, args.format, out)
        }
        WorkflowCommand::Retry(args) => retry(args, out),
        WorkflowCommand::List(args) => {
            let listing = block_on(async {
                let client = Client::from_store(args.redis.connect().await?);
                client
                    .workflows(args.name.as_deref(), args.count)
                    .await
                    .map_err(CliError::from)
            })?;
            for (id, problem) in &listing.damaged {
                eprintln!("redcron: instance {id} cannot be read, left out: {problem}");
            }
            show(&listing.instances, args.format, out)
        }
    }
}

/// Why `id` names no instance: it may name a run, or a planned fire, rather than nothing.
async fn no_instance(client: &Client, id: &str) -> CliError {
    let run = match client.run(id).await {
        Ok(run) => run,
        Err(error) => return error.into(),
    };
    if let (Some(instance), Some(step)) = (run.get("workflow"), run.get("step")) {
        return CliError::Argument(format!(
            "{id:?} is the run of step \"{step}\" of instance {instance}: see `redcron \
             workflow status {instance}`"
        ));
    }
    if let Some(job) = run.get("job") {
        return CliError::Argument(format!(
            "{id:?} is a run of job \"{job}\", not a workflow instance: see `redcron runs show`"
        ));
    }
    if let Ok((Some(due_ms), now_ms)) = client.due_at(id).await {
        return CliError::Argument(format!(
            "{id:?} is a planned fire, due {} ({}): a workflow's fire starts its instance then",
            rfc3339(due_ms),
            relative(now_ms, due_ms)
        ));
    }
    ClientError::NoWorkflowInstance(id.to_owned()).into()
}

fn retry(args: &RetryArgs, out: &mut impl Write) -> Result<(), CliError> {
    let (steps, paused) = block_on(async {
        let client = Client::from_store(args.redis.connect().await?).acting_as(super::ACTOR);
        let steps = client
            .retry_workflow(&args.id)
            .await
            .map_err(CliError::from)?;
        let paused = paused_jobs_of(&client, &args.id, &steps).await?;
        Ok::<_, CliError>((steps, paused))
    })?;
    let said = if args.json {
        retry_document(&args.id, &steps, &paused).to_string()
    } else if steps.is_empty() {
        format!("{}: no step failed or was skipped", args.id)
    } else {
        format!("{}: running again from {}", args.id, steps.join(", "))
    };
    writeln!(out, "{said}").map_err(CliError::io("done, but writing the result"))?;
    for job in paused {
        eprintln!(
            "redcron: job \"{job}\" is paused: its step is skipped again unless it is resumed \
             (redcron resume {job}) before its run is due"
        );
    }
    Ok(())
}

/// What `workflow retry --json` prints: the instance, the steps it runs again from, and the
/// paused jobs that would skip their step again.
pub(crate) fn retry_document(id: &str, steps: &[String], paused: &[String]) -> Value {
    json!({ "id": id, "steps": steps, "paused_jobs": paused })
}

/// The paused jobs among those instance `id` has yet to run now that it runs again from
/// `steps`, each once.
///
/// # Errors
/// Redis errors.
pub(crate) async fn paused_jobs_of(
    client: &Client,
    id: &str,
    steps: &[String],
) -> Result<Vec<String>, ClientError> {
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let Some(instance) = client.workflow(id).await? else {
        return Ok(Vec::new());
    };
    let paused = client.overview().await?.paused;
    let mut jobs: Vec<String> = instance
        .steps
        .into_iter()
        .filter(|step| step.status != StepStatus::Succeeded && paused.contains(&step.job))
        .map(|step| step.job)
        .collect();
    jobs.sort();
    jobs.dedup();
    Ok(jobs)
}

fn start(args: &StartArgs, out: &mut impl Write) -> Result<(), CliError> {
    let payload = read_payload(args.payload.as_deref())?;
    let started = block_on(async {
        let client = Client::from_store(args.redis.connect().await?);
        client
            .start_workflow_text(&args.name, payload.as_deref())
            .await
            .map_err(CliError::from)
    })?;
    let written = if args.json {
        let document = json!({
            "id": started.id,
            "workflow": args.name,
            "started": rfc3339(started.started_ms),
            "started_ms": started.started_ms,
        });
        writeln!(out, "{document}")
    } else {
        writeln!(out, "{}", started.id)
    };
    // The instance exists whatever happens to standard output: the error must not hide its id.
    written.map_err(CliError::unreported(format!(
        "instance {} was started, but writing its id",
        started.id
    )))
}

/// One table per workflow (its steps are its columns), or the instances as JSON.
fn show(
    instances: &[WorkflowInstance],
    format: ListFormat,
    out: &mut impl Write,
) -> Result<(), CliError> {
    let written = if format.is_json() {
        format.write(
            out,
            "workflows",
            instances.iter().map(workflow_document).collect(),
        )
    } else {
        write_tables(instances, out)
    };
    written.map_err(CliError::io("writing the workflows"))
}

fn write_tables(instances: &[WorkflowInstance], out: &mut impl Write) -> std::io::Result<()> {
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut names: Vec<&str> = Vec::new();
    for instance in instances {
        if !names.contains(&instance.name.as_str()) {
            names.push(&instance.name);
        }
    }
    for (index, name) in names.into_iter().enumerate() {
        if index > 0 {
            writeln!(out)?;
        }
        let of_name: Vec<&WorkflowInstance> = instances
            .iter()
            .filter(|instance| instance.name == name)
            .collect();
        // The steps of the newest instance, then those only older ones have (started before a
        // deploy changed the workflow): each row shows every step it has, `-` where it has none.
        let mut steps: Vec<&str> = Vec::new();
        for step in of_name.iter().flat_map(|instance| &instance.steps) {
            if !steps.contains(&step.name.as_str()) {
                steps.push(&step.name);
            }
        }
        let mut header = vec!["WORKFLOW", "ID", "STATE", "STARTED"];
        header.extend(&steps);
        let rows: Vec<Vec<String>> = of_name
            .iter()
            .map(|instance| {
                let mut row = vec![
                    instance.name.clone(),
                    instance.id.clone(),
                    instance.state.to_string(),
                    local_time(now_ms, instance.started_ms),
                ];
                row.extend(steps.iter().map(|step| {
                    instance
                        .steps
                        .iter()
                        .find(|own| own.name == *step)
                        .map_or_else(|| "-".to_owned(), |own| own.status.to_string())
                }));
                row
            })
            .collect();
        write_table(out, &header, &rows)?;
    }
    // A step that failed without a run has only this to say why.
    for instance in instances {
        for step in &instance.steps {
            if let Some(error) = &step.error {
                writeln!(
                    out,
                    "{} step {}: {}",
                    instance.id,
                    step.name,
                    super::output::printable(error)
                )?;
            }
        }
    }
    Ok(())
}

/// One instance as `workflow status --json` and `workflow list --json` print it.
pub(crate) fn workflow_document(instance: &WorkflowInstance) -> Value {
    json!({
        "id": instance.id,
        "workflow": instance.name,
        "state": instance.state.as_str(),
        "on_failure": instance.on_failure,
        "started": rfc3339(instance.started_ms),
        "started_ms": instance.started_ms,
        "finished": instance.finished_ms.map(rfc3339),
        "finished_ms": instance.finished_ms,
        "steps": instance.steps.iter().map(|step| json!({
            "name": step.name,
            "job": step.job,
            "needs": step.needs,
            "status": step.status.as_str(),
            "run": step.run_id,
            "changed": step.changed_ms.map(rfc3339),
            "changed_ms": step.changed_ms,
            "error": step.error,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StepInstance, WorkflowState};

    fn instance(id: &str, steps: &[(&str, StepStatus)]) -> WorkflowInstance {
        WorkflowInstance {
            id: id.to_owned(),
            name: "images".to_owned(),
            state: WorkflowState::Failed,
            on_failure: "stop".to_owned(),
            started_ms: 0,
            finished_ms: None,
            steps: steps
                .iter()
                .map(|(name, status)| StepInstance {
                    name: (*name).to_owned(),
                    job: (*name).to_owned(),
                    needs: Vec::new(),
                    status: *status,
                    run_id: None,
                    changed_ms: None,
                    error: None,
                })
                .collect(),
        }
    }

    #[test]
    fn an_instance_started_before_a_deploy_shows_every_step_it_has() {
        let newest = instance(
            "new",
            &[("a", StepStatus::Succeeded), ("c", StepStatus::Succeeded)],
        );
        let older = instance(
            "old",
            &[
                ("a", StepStatus::Succeeded),
                ("b", StepStatus::Failed),
                ("c", StepStatus::Skipped),
            ],
        );
        let mut out = Vec::new();
        write_tables(&[newest, older], &mut out).expect("written");
        let text = String::from_utf8(out).expect("text");
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|line| line.split_whitespace().collect())
            .collect();
        let header = &lines[0];
        assert_eq!(header[4..], ["a", "c", "b"], "{text}");
        assert_eq!(lines[1][5..], ["succeeded", "succeeded", "-"], "{text}");
        assert_eq!(lines[2][5..], ["succeeded", "skipped", "failed"], "{text}");
    }

    #[test]
    fn a_step_that_failed_without_a_run_says_why_under_the_table() {
        let mut failed = instance(
            "id",
            &[("a", StepStatus::Succeeded), ("b", StepStatus::Failed)],
        );
        failed.steps[1].error = Some("job b is declared by no live replica".to_owned());
        let mut out = Vec::new();
        write_tables(&[failed], &mut out).expect("written");
        let text = String::from_utf8(out).expect("text");
        assert_eq!(
            text.lines().last(),
            Some("id step b: job b is declared by no live replica"),
            "{text}"
        );
    }
}
