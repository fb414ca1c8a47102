//! Workflow instances: started (`start_workflow.lua`), advanced by the scripts that end their
//! steps' runs (`lua/include/workflows.lua`), and read back for `redcron workflow`.

use std::collections::HashMap;

use redis::AsyncCommands;

use super::reply::reply_error;
use super::{
    During, Entry, RunState, StepStatus, Store, StoreError, WorkflowState, millis, scripts,
};
use crate::schedule::Job;

/// The run id of `step` of the instance `workflow_id`, as the scripts build it (`step_run_id`
/// in `lua/include/workflows.lua`).
pub fn step_run_id(workflow_id: &str, step: &str) -> String {
    format!("{workflow_id}/{step}")
}

/// What became of a start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkflowStart {
    /// The instance was started now.
    Started {
        /// On Redis's clock, ms.
        started_ms: i64,
    },
    /// An instance of that id exists already (a retried start): nothing was changed.
    Exists {
        /// When it was started, ms.
        started_ms: i64,
    },
    /// No live replica declares a workflow of that name, and no job of that name is published.
    UnknownWorkflow,
    /// The name's published definition is a job's, not a workflow's. Told by the start itself,
    /// from the reading that found no workflow: read again afterwards, the definition could be a
    /// workflow published in between, and the name would be called a job's though it is not.
    NotAWorkflow,
    /// No live replica declares the job of one of its steps: nothing was started.
    UndeclaredJob(String),
}

/// Instances listed by [`Store::workflows`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkflowListing {
    /// The instances, newest first.
    pub instances: Vec<WorkflowInstance>,
    /// The instances whose hash cannot be read (written by something else, or damaged): id
    /// and what is wrong with it.
    pub damaged: Vec<(String, String)>,
}

/// What became of a retry of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkflowRetry {
    /// These steps run again (none when nothing failed or was skipped).
    Retried(Vec<String>),
    /// No such instance.
    Missing,
    /// No live replica declares the job of a step to run again: nothing was changed.
    UndeclaredJob {
        /// The step.
        step: String,
        /// Its job.
        job: String,
    },
}

/// One step of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepInstance {
    /// Its name in the workflow.
    pub name: String,
    /// The job it runs.
    pub job: String,
    /// The steps it waits for.
    pub needs: Vec<String>,
    /// How it stands.
    pub status: StepStatus,
    /// Its run, once it has one.
    pub run_id: Option<String>,
    /// When its status last changed, ms.
    pub changed_ms: Option<i64>,
    /// Why it failed without a run (its job could not be enqueued).
    pub error: Option<String>,
}

/// One workflow instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowInstance {
    /// Its id: a cron fire's run id, or a new id for a start by hand.
    pub id: String,
    /// The workflow.
    pub name: String,
    /// Where it is.
    pub state: WorkflowState,
    /// `stop` or `continue`.
    pub on_failure: String,
    /// When it started, ms.
    pub started_ms: i64,
    /// When it ended, ms.
    pub finished_ms: Option<i64>,
    /// Its steps, in the order declared.
    pub steps: Vec<StepInstance>,
}

const OPERATION: &str = "start_workflow";

impl Store {
    /// Starts an instance `workflow_id` of the workflow `name` with `payload` (a JSON object's
    /// text) for its first steps; once per id (see [`WorkflowStart::Exists`]). The published
    /// definition's steps are used, or those of `own` (the starting replica's definition of the
    /// workflow) when the published definition of `name` is not a workflow's.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Held`] while the namespace is held.
    pub async fn start_workflow(
        &self,
        name: &str,
        workflow_id: &str,
        payload: Option<&str>,
        own: Option<&Job>,
    ) -> Result<WorkflowStart, StoreError> {
        let own = own.map(super::canonical_json).transpose()?;
        let (status, value): (String, redis::Value) = scripts::START_WORKFLOW
            .key(self.keys.workflows())
            .key(self.keys.defs())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(name)
            .arg(workflow_id)
            .arg(payload.unwrap_or_default())
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(own.unwrap_or_default())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        let number = || super::reply::decode::<i64>(OPERATION, value.clone());
        match status.as_str() {
            "OK" => Ok(WorkflowStart::Started {
                started_ms: number()?,
            }),
            "EXISTS" => Ok(WorkflowStart::Exists {
                started_ms: number()?,
            }),
            "UNKNOWN" => {
                let published: String = super::reply::decode(OPERATION, value.clone())?;
                Ok(if published == "job" {
                    WorkflowStart::NotAWorkflow
                } else {
                    WorkflowStart::UnknownWorkflow
                })
            }
            "UNDECLARED" => Ok(WorkflowStart::UndeclaredJob(super::reply::decode(
                OPERATION,
                value.clone(),
            )?)),
            other => Err(reply_error(OPERATION, format!("status {other:?}"))),
        }
    }

    /// Runs the instance `workflow_id` again from its steps that failed or were skipped (see
    /// `lua/retry_workflow.lua`).
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Held`] while the namespace is held.
    pub async fn retry_workflow(&self, workflow_id: &str) -> Result<WorkflowRetry, StoreError> {
        self.retry_workflow_by(workflow_id, None).await
    }

    /// As [`Store::retry_workflow`], recording the retry (action `retry-workflow`, naming the
    /// first step's new run) in the events stream with `actor`, who asked, when given.
    ///
    /// # Errors
    /// As [`Store::retry_workflow`].
    pub async fn retry_workflow_by(
        &self,
        workflow_id: &str,
        actor: Option<&str>,
    ) -> Result<WorkflowRetry, StoreError> {
        let mut reply: Vec<String> = scripts::RETRY_WORKFLOW
            .key(self.keys.dead())
            .key(self.keys.hold())
            .key(self.keys.events())
            .arg(self.keys.prefix())
            .arg(workflow_id)
            .arg(self.now_arg())
            .arg(self.settings.events_maxlen)
            .arg(actor.unwrap_or_default())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "retry_workflow")?;
        match (reply.first().map(String::as_str), reply.len()) {
            (Some("OK"), _) => Ok(WorkflowRetry::Retried(reply.split_off(1))),
            (Some("MISSING"), _) => Ok(WorkflowRetry::Missing),
            (Some("UNDECLARED"), 3) => Ok(WorkflowRetry::UndeclaredJob {
                job: reply.swap_remove(2),
                step: reply.swap_remove(1),
            }),
            _ => Err(reply_error("retry_workflow", format!("{reply:?}"))),
        }
    }

    /// Settles up to `page` running instances from position `offset` of the running index
    /// (see `lua/settle_workflows.lua`): the steps settled, and where the next page starts (0
    /// once the index is read to its end).
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Held`] while the namespace is held.
    pub async fn settle_workflows(
        &self,
        offset: usize,
        page: usize,
    ) -> Result<(u64, usize), StoreError> {
        // As bytes: an id that is not UTF-8 (damaged) has no instance, and the script drops it
        // from the index as it drops every id whose instance is not running.
        let ids: Vec<Vec<u8>> = self
            .connection
            .clone()
            .zrange(
                self.keys.workflows_running(),
                isize::try_from(offset).unwrap_or(isize::MAX),
                isize::try_from(offset + page).unwrap_or(isize::MAX) - 1,
            )
            .await
            .during(&self.metrics, "settle_workflows")?;
        let next = if ids.len() < page { 0 } else { offset + page };
        if ids.is_empty() {
            return Ok((0, next));
        }
        let settled: u64 = scripts::SETTLE_WORKFLOWS
            .key(self.keys.workflows_running())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(self.now_arg())
            .arg(&ids)
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "settle_workflows")?;
        Ok((settled, next))
    }

    /// The instance `workflow_id`, or `None` when there is none (never started, or finished
    /// longer ago than the retention).
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for a hash redcron did not write.
    pub async fn workflow(
        &self,
        workflow_id: &str,
    ) -> Result<Option<WorkflowInstance>, StoreError> {
        let fields: HashMap<String, String> = self
            .connection
            .clone()
            .hgetall(self.keys.workflow(workflow_id))
            .await
            .during(&self.metrics, "workflow")?;
        if fields.is_empty() {
            return Ok(None);
        }
        let mut instance = read_instance(workflow_id, &fields)?;
        // A step whose run exists is queued until its run first starts, then running (also
        // while its run waits to be tried again).
        let queued: Vec<&mut StepInstance> = instance
            .steps
            .iter_mut()
            .filter(|step| step.status == StepStatus::Queued)
            .collect();
        if !queued.is_empty() {
            let mut pipe = redis::pipe();
            for step in &queued {
                pipe.hmget(
                    self.keys.run(step.run_id.as_deref().unwrap_or_default()),
                    &["state", "attempt"],
                );
            }
            let runs: Vec<(Option<String>, Option<u32>)> = pipe
                .query_async(&mut self.connection.clone())
                .await
                .during(&self.metrics, "workflow")?;
            for (step, (state, attempt)) in queued.into_iter().zip(runs) {
                let waits_to_start = match state.as_deref().and_then(RunState::parse) {
                    Some(RunState::Ready | RunState::Waiting) => true,
                    // Due again after a failed attempt: it has run.
                    Some(RunState::Scheduled) => attempt.unwrap_or(0) == 0,
                    // A run that ended since the instance was read ran when it was read.
                    _ => false,
                };
                if !waits_to_start {
                    step.status = StepStatus::Running;
                }
            }
        }
        Ok(Some(instance))
    }

    /// The newest `limit` instances, of the workflow `name` only when given, newest first;
    /// those whose hash cannot be read are named apart, so that one damaged hash hides no
    /// other instance.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn workflows(
        &self,
        name: Option<&str>,
        limit: usize,
    ) -> Result<WorkflowListing, StoreError> {
        const PAGE: isize = 500;
        let mut found = Vec::new();
        let mut damaged = Vec::new();
        let mut start = 0;
        while found.len() < limit {
            let entries: Vec<Entry> = self
                .connection
                .clone()
                .zrevrange(self.keys.workflows(), start, start + PAGE - 1)
                .await
                .during(&self.metrics, "workflows")?;
            if entries.is_empty() {
                break;
            }
            start += PAGE;
            let mut ids = Vec::new();
            for entry in entries {
                match entry {
                    Entry::Run(id) => ids.push(id),
                    Entry::Unreadable(_) => {
                        damaged.push((entry.to_string(), "its id is not UTF-8".to_owned()));
                    }
                }
            }
            // A key of another type would fail a whole pipeline of HGET: its type first.
            let mut pipe = redis::pipe();
            for id in &ids {
                pipe.cmd("TYPE").arg(self.keys.workflow(id));
            }
            let types: Vec<String> = pipe
                .query_async(&mut self.connection.clone())
                .await
                .during(&self.metrics, "workflows")?;
            let mut hashes = Vec::new();
            for (id, kind) in ids.into_iter().zip(types) {
                match kind.as_str() {
                    "hash" => hashes.push(id),
                    // Expired since it was listed: there is nothing to show.
                    "none" => {}
                    other => damaged.push((id, format!("its key holds a {other}, not a hash"))),
                }
            }
            let mut pipe = redis::pipe();
            for id in &hashes {
                pipe.hget(self.keys.workflow(id), "name");
            }
            let names: Vec<Option<String>> = if hashes.is_empty() {
                Vec::new()
            } else {
                pipe.query_async(&mut self.connection.clone())
                    .await
                    .during(&self.metrics, "workflows")?
            };
            for (id, found_name) in hashes.into_iter().zip(names) {
                if found.len() >= limit {
                    break;
                }
                let Some(found_name) = found_name else {
                    // Of no workflow that can be told: named whatever the workflow asked for.
                    damaged.push((id, "its hash has no name".to_owned()));
                    continue;
                };
                if name.is_some_and(|name| name != found_name) {
                    continue;
                }
                match self.workflow(&id).await {
                    Ok(Some(instance)) => found.push(instance),
                    Ok(None) => {}
                    Err(StoreError::Reply { detail, .. }) => damaged.push((id, detail)),
                    Err(error) => return Err(error),
                }
            }
        }
        Ok(WorkflowListing {
            instances: found,
            damaged,
        })
    }
}

/// An instance from its hash's fields.
fn read_instance(
    workflow_id: &str,
    fields: &HashMap<String, String>,
) -> Result<WorkflowInstance, StoreError> {
    let damaged = |what: &str| {
        reply_error(
            "workflow",
            format!("the hash of workflow {workflow_id} has {what}"),
        )
    };
    let field = |name: &str| fields.get(name).map(String::as_str);
    let number = |name: &str| field(name).and_then(|text| text.parse::<i64>().ok());
    let state = field("state")
        .and_then(WorkflowState::parse)
        .ok_or_else(|| damaged("no state"))?;
    let names: Vec<&str> = field("steps")
        .ok_or_else(|| damaged("no steps"))?
        .split(',')
        .filter(|name| !name.is_empty())
        .collect();
    let mut steps = Vec::with_capacity(names.len());
    for name in names {
        let stored = field(&format!("status:{name}"))
            .ok_or_else(|| damaged(&format!("no status for step {name}")))?;
        let status = match stored {
            // Never started: it will, unless the instance ended without it.
            "pending" if state == WorkflowState::Running => StepStatus::Pending,
            "pending" => StepStatus::Skipped,
            other => StepStatus::parse(other)
                .ok_or_else(|| damaged(&format!("status {other:?} for step {name}")))?,
        };
        steps.push(StepInstance {
            name: name.to_owned(),
            job: field(&format!("job:{name}")).unwrap_or_default().to_owned(),
            needs: field(&format!("needs:{name}"))
                .unwrap_or_default()
                .split(',')
                .filter(|need| !need.is_empty())
                .map(str::to_owned)
                .collect(),
            status,
            run_id: (stored != "pending").then(|| {
                field(&format!("run:{name}"))
                    .map_or_else(|| step_run_id(workflow_id, name), str::to_owned)
            }),
            changed_ms: number(&format!("at:{name}")),
            error: field(&format!("error:{name}")).map(str::to_owned),
        });
    }
    // A step that failed to be enqueued has no run.
    for step in &mut steps {
        if step.error.is_some() {
            step.run_id = None;
        }
    }
    Ok(WorkflowInstance {
        id: workflow_id.to_owned(),
        name: field("name").unwrap_or_default().to_owned(),
        state,
        on_failure: field("on_failure").unwrap_or("stop").to_owned(),
        started_ms: number("created_ms").ok_or_else(|| damaged("no start time"))?,
        finished_ms: number("finished_ms"),
        steps,
    })
}
