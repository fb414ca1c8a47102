//! `redcron jobs`: every published job, its schedule, next fires, drift and placement, as a
//! table or as the documents `jobs --json` and the web API show.

use std::collections::BTreeMap;
use std::io::Write;

use clap::Args;
use serde_json::{Value, json};

use super::published::{Declarers, Published, published};
use super::{RecentEvents, no_jobs, undeclared};
use crate::cli::output::ListFormat;
use crate::cli::table::{terminal_width, write_table_within};
use crate::cli::times::ago;
use crate::cli::{CliError, RedisArgs, block_on};
use crate::client::Client;
use crate::schedule::Schedule;
use crate::store::keys::replica_of_run;
use crate::store::{Overview, RunState};

#[derive(Debug, Args)]
pub(in crate::cli) struct JobsArgs {
    #[command(flatten)]
    format: ListFormat,
    #[command(flatten)]
    redis: RedisArgs,
}

impl Declarers {
    /// The warning `jobs` shows: `DRIFT: differs on b, d; not declared by c`, or nothing.
    pub(super) fn warning(&self) -> String {
        let mut parts = Vec::new();
        if !self.differs.is_empty() {
            parts.push(format!("DRIFT: differs on {}", self.differs.join(", ")));
        }
        let unexpected: Vec<&str> = self
            .undeclared
            .iter()
            .filter(|replica| !self.excluded.contains(replica))
            .map(String::as_str)
            .collect();
        if !unexpected.is_empty() {
            parts.push(format!("not declared by {}", unexpected.join(", ")));
        }
        parts.join("; ")
    }
}

/// The latest outcome of each replica's runs of the every-replica job `job` among the recent
/// events: replica -> state and when, by replica id.
fn last_by_replica(events: &RecentEvents, job: &str) -> BTreeMap<String, (String, i64)> {
    let mut last = BTreeMap::new();
    for event in events.of(job) {
        let state = event
            .fields
            .get("state")
            .and_then(|state| RunState::parse(state))
            .filter(|state| state.is_finished() || *state == RunState::Retrying);
        let replica = event
            .fields
            .get("run")
            .and_then(|run| replica_of_run(job, run));
        if let (Some(state), Some(replica)) = (state, replica) {
            last.entry(replica.to_owned())
                .or_insert_with(|| (state.as_str().to_owned(), event.at_ms));
        }
    }
    last
}

/// What the WARNING column of `jobs` says of a job no live replica declares.
const NO_LIVE_DECLARER: &str = "NOT DECLARED by any live replica";

/// One published job as `jobs --json` and the web API show it, its fires from `schedule`,
/// which the caller parsed.
fn job_document(
    overview: &Overview,
    events: &RecentEvents,
    job: &Published,
    schedule: Option<&Schedule>,
) -> Value {
    let declarers = Declarers::of(overview, job);
    json!({
        "job": job.name,
        "schedule": job.schedule(),
        "timezone": job.timezone(),
        "enabled": job.enabled(),
        "workflow": job.workflow(),
        "command": job.command(),
        "damaged": job.summary().is_none(),
        "hash": job.hash,
        "next_fires": job.fires_of(schedule, overview.now_ms, 3),
        "declared_by": declarers.same,
        "drift": declarers.differs,
        "not_declared_by": declarers.undeclared,
        "declared_live": undeclared::declared_live(overview, &job.name, false),
        "where": job.selector(),
        "on": if job.on_every() { "every" } else { "one" },
        "last_by_replica": last_by_replica(events, &job.name)
            .into_iter()
            .map(|(replica, (outcome, at_ms))| {
                json!({ "replica": replica, "outcome": outcome, "at_ms": at_ms })
            })
            .collect::<Vec<_>>(),
    })
}

/// The published jobs as `jobs --json` and the web API show them, in the order `jobs` lists
/// them.
pub(crate) fn jobs_documents(overview: &Overview, events: &RecentEvents) -> Vec<Value> {
    published(overview, None)
        .iter()
        .map(|job| job_document(overview, events, job, job.parsed_schedule()))
        .collect()
}

/// The names of the published jobs, in the order `jobs` lists them: what a page of some of
/// them pages through without making any job's document.
pub(crate) fn published_names(overview: &Overview) -> Vec<&str> {
    let mut names: Vec<&str> = overview.definitions.keys().map(String::as_str).collect();
    names.sort_unstable();
    names
}

/// Those of `names` that hold `q` in any case, every one when `q` is blank: how the jobs page
/// and the API's jobs read find a job by part of its name.
pub(crate) fn names_holding<'a>(names: &[&'a str], q: &str) -> Vec<&'a str> {
    let needle = q.trim().to_lowercase();
    names
        .iter()
        .copied()
        .filter(|name| needle.is_empty() || name.to_lowercase().contains(&needle))
        .collect()
}

/// Where a page of `names` (in the order `jobs` lists them) starts after `after`: a keyset,
/// the first name past it whether or not it is a job still, so that a job added or removed
/// before it does not shift the page; the first name when `after` is empty.
pub(crate) fn first_after(names: &[&str], after: &str) -> usize {
    if after.is_empty() {
        return 0;
    }
    names.partition_point(|name| *name <= after)
}

/// A published job as a page shows it: its document, and its schedule parsed once for both
/// the document's fires and the page's words and fires.
pub(crate) struct ShownJob {
    /// What `jobs --json` shows of it.
    pub(crate) document: Value,
    /// Its schedule; `None` on demand, damaged, or not a schedule this version reads.
    pub(crate) schedule: Option<Schedule>,
}

/// The published job `name` as a page shows it, or `None` when none is published by that
/// name: read from its own definition, so that one job costs one job.
pub(crate) fn shown_job(
    overview: &Overview,
    events: &RecentEvents,
    name: &str,
) -> Option<ShownJob> {
    let json = overview.definitions.get(name)?;
    let job = Published::parse(name, json, overview.definition_hashes.get(name));
    let schedule = job.parsed_schedule();
    Some(ShownJob {
        document: job_document(overview, events, &job, schedule),
        schedule: schedule.cloned(),
    })
}

/// The published job `name` as `jobs --json` shows it, or `None` when none is published by
/// that name.
pub(crate) fn named_job_document(
    overview: &Overview,
    events: &RecentEvents,
    name: &str,
) -> Option<Value> {
    shown_job(overview, events, name).map(|shown| shown.document)
}

pub(in crate::cli) fn jobs(args: &JobsArgs, out: &mut impl Write) -> Result<(), CliError> {
    let (overview, events) = block_on(async {
        let client = Client::from_store(args.redis.connect().await?);
        let overview = client.overview().await?;
        Ok::<_, CliError>((overview, client.recent_events().await?))
    })?;
    let events = RecentEvents::new(events);
    let jobs = published(&overview, None);
    if args.format.is_json() {
        let jobs = jobs_documents(&overview, &events);
        return args
            .format
            .write(out, "jobs", jobs)
            .map_err(CliError::io("writing the jobs"));
    }
    if jobs.is_empty() {
        return no_jobs(out, &args.redis.namespace).map_err(CliError::io("writing the jobs"));
    }
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let mut warning = Declarers::of(&overview, job).warning();
            if !undeclared::declared_live(&overview, &job.name, false) {
                warning = [NO_LIVE_DECLARER, warning.as_str()]
                    .into_iter()
                    .filter(|part| !part.is_empty())
                    .collect::<Vec<_>>()
                    .join("; ");
            }
            vec![
                job.label(),
                match (job.summary(), job.schedule()) {
                    (None, _) => "(damaged: the leader writes it again)".to_owned(),
                    (Some(_), None) => "(on demand)".to_owned(),
                    (Some(_), Some(schedule)) => schedule.to_owned(),
                },
                job.timezone().unwrap_or_default().to_owned(),
                match job.enabled() {
                    Some(true) => job.next_fires(overview.now_ms, 3).join(", "),
                    Some(false) => "(disabled)".to_owned(),
                    None => String::new(),
                },
                warning,
                job.command().unwrap_or_default().to_owned(),
            ]
        })
        .collect();
    // The command last, cut to the terminal: whole with --json.
    write_table_within(
        out,
        &[
            "JOB",
            "SCHEDULE",
            "ZONE",
            "NEXT FIRES",
            "WARNING",
            "COMMAND",
        ],
        &rows,
        terminal_width(),
    )
    .map_err(CliError::io("writing the jobs"))?;
    // Where the jobs that do not run just anywhere run, and for every-replica jobs how each
    // replica's last run went: one line each, below the table.
    for job in &jobs {
        let Some(placement) = job.placement() else {
            continue;
        };
        let last: Vec<String> = last_by_replica(&events, &job.name)
            .into_iter()
            .map(|(replica, (outcome, at_ms))| {
                format!("{replica} {outcome} {}", ago(overview.now_ms, at_ms))
            })
            .collect();
        let last = if last.is_empty() {
            String::new()
        } else {
            format!("; last: {}", last.join(", "))
        };
        writeln!(out, "{}: {placement}{last}", job.name)
            .map_err(CliError::io("writing the jobs"))?;
    }
    Ok(())
}
