//! `redcron status` and `redcron jobs`: what the replicas are doing, read from Redis alone.

mod archive;
mod definitions;
mod drift;
mod jobs;
mod recent;
mod refused;
mod undeclared;

pub(crate) use definitions::Definitions;
pub(crate) use drift::{Drift, drifting_jobs};
pub(super) use jobs::{JobsArgs, jobs};
pub(crate) use jobs::{
    ShownJob, first_after, named_job_document, names_holding, published_names, shown_job,
};
pub(crate) use recent::RecentEvents;

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::sync::Arc;

use chrono::DateTime;
use clap::Args;
use serde::Deserialize;
use serde_json::{Value, json};

use super::times::{ago, duration, elapsed, format_fire, local_time, rfc3339};
use super::{CliError, RedisArgs, block_on, typed_fields, write_table};
use crate::client::{Client, ClientError};
use crate::schedule::workflow::Workflow;
use crate::schedule::{Label, Labels, Reach, Schedule, Selector, placement};
use crate::store::keys::route_replica;
use crate::store::{DamagedKeys, Overview, ReplicaInfo, StoreError, UndeclaredRuns, WritesRefused};
use definitions::Parsed;

/// A replica silent for this many heartbeat periods is stale.
const STALE_PERIODS: i64 = 3;

#[derive(Debug, Args)]
pub(super) struct StatusArgs {
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    redis: RedisArgs,
}

/// A published job definition, as `status` and `jobs` need it.
struct Published {
    name: String,
    /// Its content hash in `def-hashes`; `None` while that entry is missing (being repaired).
    hash: Option<String>,
    /// Its definition parsed: once per hash for a reader that keeps [`Definitions`].
    parsed: Arc<Parsed>,
}

/// The fields of a published definition (its canonical JSON, every default filled in) that
/// `status` and `jobs` show.
#[derive(Deserialize)]
struct Summary {
    schedule: Option<String>,
    timezone: String,
    enabled: bool,
    /// For the job of a `[workflows.<name>]` table: the workflow its runs start.
    #[serde(default)]
    workflow: Option<Workflow>,
    /// What its runs execute under `/bin/sh -c`.
    #[serde(default)]
    command: Option<String>,
    /// The labels a replica must carry to declare it; absent for every replica.
    #[serde(default, rename = "where")]
    selector: Vec<String>,
    /// `every` for a job each of whose fires runs on every replica that declares it.
    #[serde(default)]
    on: Option<String>,
}

impl Published {
    fn parse(name: &str, json: &str, hash: Option<&String>) -> Self {
        Self::of(name, json, hash, None)
    }

    /// As [`Published::parse`], taken from `definitions` when it holds that hash.
    fn of(
        name: &str,
        json: &str,
        hash: Option<&String>,
        definitions: Option<&Definitions>,
    ) -> Self {
        let parsed = match definitions {
            Some(definitions) => definitions.parsed(hash.map(String::as_str), json),
            None => Arc::new(Parsed::new(json)),
        };
        Self {
            name: name.to_owned(),
            hash: hash.cloned(),
            parsed,
        }
    }

    /// What `status` and `jobs` show of it; `None` when the entry is not a definition (damaged:
    /// the leader writes it again), which is said rather than shown with made-up values.
    fn summary(&self) -> Option<&Summary> {
        self.parsed.summary.as_ref()
    }

    fn schedule(&self) -> Option<&str> {
        self.summary()?.schedule.as_deref()
    }

    /// What its runs execute; `None` for a workflow's job, which runs steps.
    fn command(&self) -> Option<&str> {
        self.summary()?
            .command
            .as_deref()
            .filter(|command| !command.is_empty())
    }

    fn timezone(&self) -> Option<&str> {
        self.summary().map(|summary| summary.timezone.as_str())
    }

    fn enabled(&self) -> Option<bool> {
        self.summary().map(|summary| summary.enabled)
    }

    /// The steps of the workflow its runs start, as `check` shows them; `None` for a job.
    fn workflow(&self) -> Option<String> {
        let workflow = self.summary()?.workflow.as_ref()?;
        Some(workflow.describe())
    }

    /// Its `where` terms (empty for every replica).
    fn selector(&self) -> &[String] {
        self.summary()
            .map_or(&[], |summary| summary.selector.as_slice())
    }

    /// Whether each fire runs on every replica that declares it (`on = "every"`).
    fn on_every(&self) -> bool {
        self.summary()
            .is_some_and(|summary| summary.on.as_deref() == Some("every"))
    }

    /// Whether `replica`'s published labels (and queues) match the job's `where`.
    fn matches(&self, replica: &ReplicaInfo) -> bool {
        let given: Vec<Label> = labels(replica)
            .into_iter()
            .filter_map(|label| Label::parse(label).ok())
            .collect();
        let queues: Vec<String> = served_queues(replica)
            .into_iter()
            .map(str::to_owned)
            .collect();
        // Its host and id are among the labels it published: none to add.
        let carried = Labels::of_replica(&given, "", "", &queues);
        Selector::parse(self.selector()).is_ok_and(|selector| selector.matches(&carried))
    }

    /// Where it runs, as `jobs` says it under the table: `None` for a job that runs once per
    /// fire on any replica.
    fn placement(&self) -> Option<String> {
        let on = if self.on_every() {
            Reach::Every
        } else {
            Reach::One
        };
        // The terms were checked when their file was loaded: a definition damaged there shows
        // as for every replica rather than failing the whole listing.
        let selector = Selector::parse(self.selector()).unwrap_or_default();
        placement(on, &selector)
    }

    /// Its name, marked when it starts a workflow.
    fn label(&self) -> String {
        if self.workflow().is_some() {
            format!("{} (workflow)", self.name)
        } else {
            self.name.clone()
        }
    }

    /// Its schedule parsed; `None` on demand, damaged, or not a schedule this version reads.
    fn parsed_schedule(&self) -> Option<&Schedule> {
        self.parsed.schedule.as_ref()
    }

    /// The next `count` fires after `now_ms`, RFC 3339 in the job's zone.
    fn next_fires(&self, now_ms: i64, count: usize) -> Vec<String> {
        self.fires_of(self.parsed_schedule(), now_ms, count)
    }

    /// As [`Published::next_fires`], of `schedule` parsed once by a caller that shows it too.
    fn fires_of(&self, schedule: Option<&Schedule>, now_ms: i64, count: usize) -> Vec<String> {
        let Some(summary) = self.summary().filter(|summary| summary.enabled) else {
            return Vec::new();
        };
        let (Some(schedule), Ok(zone), Some(now)) = (
            schedule,
            summary.timezone.parse::<chrono_tz::Tz>(),
            DateTime::from_timestamp_millis(now_ms),
        ) else {
            return Vec::new();
        };
        schedule
            .fires_after(now, zone)
            .take(count)
            .map(|fire| format_fire(fire, zone))
            .collect()
    }
}

/// The published jobs of `overview`, in the order `jobs` lists them, each definition taken from
/// `definitions` when it holds it.
fn published(overview: &Overview, definitions: Option<&Definitions>) -> Vec<Published> {
    let mut jobs: Vec<Published> = overview
        .definitions
        .iter()
        .map(|(name, json)| {
            Published::of(
                name,
                json,
                overview.definition_hashes.get(name),
                definitions,
            )
        })
        .collect();
    jobs.sort_by(|a, b| a.name.cmp(&b.name));
    jobs
}

/// How the replicas declare one published job, each list sorted by replica id.
#[derive(Debug, Default, PartialEq, Eq)]
struct Declarers {
    /// Replicas that declare the definition the leader published.
    same: Vec<String>,
    /// Replicas that declare the job with another definition (content hash): drift.
    differs: Vec<String>,
    /// Replicas that do not declare the job at all: not drift, but the usual state of a rolling
    /// deploy that adds or removes it. They never run it.
    undeclared: Vec<String>,
    /// Those of `undeclared` whose labels the job's `where` does not match: as meant, so not
    /// worth a warning.
    excluded: Vec<String>,
}

impl Declarers {
    /// Sorts the replicas of `overview` by how they declare `job`. A replica whose record
    /// expired is gone, and one whose declarations are not in Redis says nothing either way:
    /// both are left out.
    fn of(overview: &Overview, job: &Published) -> Self {
        let mut declarers = Self::default();
        for replica in overview
            .replicas
            .iter()
            .filter(|replica| !replica.info.is_empty())
        {
            let Some(jobs) = &replica.jobs else {
                continue;
            };
            let list = match jobs.get(&job.name) {
                None if !job.selector().is_empty() && !job.matches(replica) => {
                    declarers.undeclared.push(replica.id.clone());
                    &mut declarers.excluded
                }
                None => &mut declarers.undeclared,
                Some(hash) if Some(hash) == job.hash.as_ref() => &mut declarers.same,
                Some(_) => &mut declarers.differs,
            };
            list.push(replica.id.clone());
        }
        for list in [
            &mut declarers.same,
            &mut declarers.differs,
            &mut declarers.undeclared,
            &mut declarers.excluded,
        ] {
            list.sort();
        }
        declarers
    }
}

/// The queues a replica's heartbeat says its workers claim from.
fn served_queues(replica: &ReplicaInfo) -> Vec<&str> {
    heartbeat_list(replica, "queues")
}

/// The labels a replica's heartbeat says it carries (`host`, `replica` and those given with
/// `--label`), which jobs' `where` match; its queues are its `queue=` labels, shown apart.
fn labels(replica: &ReplicaInfo) -> Vec<&str> {
    heartbeat_list(replica, "labels")
}

/// The items of a comma-separated list a replica's heartbeat carries in `field`.
fn heartbeat_list<'a>(replica: &'a ReplicaInfo, field: &str) -> Vec<&'a str> {
    replica
        .info
        .get(field)
        .map(|list| list.split(',').filter(|item| !item.is_empty()).collect())
        .unwrap_or_default()
}

/// The active runs' ids by job, in the order the overview lists them: found in one pass, so
/// that a status of every job looks each one's up rather than walking every active run per job.
fn running_by_job(overview: &Overview) -> HashMap<&str, Vec<&str>> {
    let mut running: HashMap<&str, Vec<&str>> = HashMap::new();
    for (run_id, job, _) in &overview.running {
        running.entry(job).or_default().push(run_id);
    }
    running
}

/// The paused jobs as a set, looked up once per job of a page or status of every job.
pub(crate) fn paused_jobs(overview: &Overview) -> HashSet<&str> {
    overview.paused.iter().map(String::as_str).collect()
}

/// How many live replicas serve `queue`.
fn served_by(overview: &Overview, queue: &str, refused: bool) -> usize {
    overview
        .replicas
        .iter()
        .filter(|replica| {
            replica_state(overview, replica, refused) == "alive"
                && match route_replica(queue) {
                    // A replica's own route is served by that replica alone, whatever its queues.
                    Some(id) => replica.id == id,
                    None => served_queues(replica).contains(&queue),
                }
        })
        .count()
}

/// A replica's state; while Redis `refused` writes, a stale heartbeat may be one Redis did not
/// take, so it does not make the replica lost.
pub(super) fn replica_state(
    overview: &Overview,
    replica: &ReplicaInfo,
    refused: bool,
) -> &'static str {
    if replica.stopped_ms.is_some() {
        "stopped"
    } else if !is_stale(overview, replica.heartbeat_ms, &replica.info) {
        "alive"
    } else if refused {
        refused::UNKNOWN
    } else {
        "lost"
    }
}

fn is_stale(overview: &Overview, heartbeat_ms: i64, info: &HashMap<String, String>) -> bool {
    let period = info
        .get("heartbeat_period_ms")
        .and_then(|period| period.parse::<i64>().ok())
        .unwrap_or(2_000);
    overview.now_ms - heartbeat_ms > STALE_PERIODS * period
}

/// The replicas, by id, that declare `job` (in whatever definition) and have not gone away.
fn declared_by(overview: &Overview, job: &str) -> Vec<String> {
    overview
        .replicas
        .iter()
        .filter(|replica| !replica.info.is_empty())
        .filter(|replica| {
            replica
                .jobs
                .as_ref()
                .is_some_and(|jobs| jobs.contains_key(job))
        })
        .map(|replica| replica.id.clone())
        .collect()
}

/// One line of `status` for runs put aside: `3 runs of nightly waiting since 14:02:11 (2 min)
/// for a replica that declares it`. These runs are in no other count, so without this line
/// they would be invisible until the reaper ends them.
fn set_aside(overview: &Overview, aside: &UndeclaredRuns) -> String {
    let mut line = format!(
        "{} run{} of {} waiting since {} ({}) for a replica that declares it",
        aside.runs,
        if aside.runs == 1 { "" } else { "s" },
        aside.job,
        local_time(overview.now_ms, aside.since_ms),
        elapsed(overview.now_ms - aside.since_ms),
    );
    // A live replica that declares the job takes them back at its next claim if it serves
    // their queue: naming it says where to look when they stay.
    let declarers = declared_by(overview, &aside.job);
    if !declarers.is_empty() {
        line.push_str(&format!(" (declared by {})", declarers.join(", ")));
    }
    line
}

/// The line that says how many records the reapers found damaged, naming the first few.
fn damaged_records(damaged: &DamagedKeys) -> String {
    let more = if damaged.count > damaged.keys.len() as u64 {
        ", ..."
    } else {
        ""
    };
    format!(
        "damaged records: {} ({}{more}): run or workflow records without the fields redcron \
         writes (written by something else, or damaged); they expire after the run retention",
        damaged.count,
        damaged.keys.join(", ")
    )
}

/// What `status` and `jobs` say instead of an empty table: most often the namespace is not the
/// one the replicas use.
fn no_jobs(out: &mut impl Write, namespace: &str) -> std::io::Result<()> {
    writeln!(
        out,
        "no replica has published jobs in namespace \"{namespace}\" (is --namespace the one \
         the replicas run with?)"
    )
}

/// What the replicas report of their scripts that fail on a damaged key, one line each, or
/// `None` when none does.
fn failing_scripts_text(failing: &[(String, String)]) -> Option<String> {
    let lines: Vec<String> = failing
        .iter()
        .map(|(replica, report)| {
            format!(
                "replica {replica}: script {report}; nothing that script does happens until \
                 the key is repaired or deleted"
            )
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// What `status` reads, all of it: [`StatusRead::document`] shapes it as `status --json` and
/// the web API show it.
pub(crate) struct StatusRead {
    /// The namespace's state.
    pub(crate) overview: Overview,
    /// The newest events, grouped by job.
    pub(crate) events: RecentEvents,
    /// How many notices are owed.
    pub(crate) owed_notices: u64,
    /// Why Redis refuses writes, if it does.
    pub(crate) writes_refused: Option<WritesRefused>,
    /// The damaged records the reapers found.
    pub(crate) damaged: DamagedKeys,
    /// The scripts that fail on a damaged key, by replica.
    pub(crate) failing: Vec<(String, String)>,
    /// The archive, when the namespace archives.
    pub(crate) archive: Option<archive::ArchiveStatus>,
    /// The definitions parsed before, which the read took its own from, when it was given them.
    definitions: Option<Arc<Definitions>>,
}

/// A status that could not be read, and the scripts the replicas report failing, which may be
/// why: a damaged key can fail the overview too, and the replicas' reports still name it.
pub(crate) struct StatusUnread {
    /// Why it could not be read.
    pub(crate) error: ClientError,
    /// The scripts that fail on a damaged key, by replica.
    pub(crate) failing: Vec<(String, String)>,
}

/// Whether `error` says Redis could not be reached or did not answer in time, rather than
/// answering something the read could not use.
fn out_of_reach(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Store(StoreError::Redis { source, .. })
            if source.is_timeout()
                || source.is_io_error()
                || source.is_connection_refusal()
                || source.is_connection_dropped()
    )
}

impl StatusRead {
    /// Reads all a status shows.
    ///
    /// # Errors
    /// Redis out of reach, or data redcron did not write, with the failing scripts reported.
    pub(crate) async fn read(client: &Client) -> Result<Self, StatusUnread> {
        Self::read_from(client, None).await
    }

    /// As [`StatusRead::read`], taking the definitions `definitions` holds by hash from it
    /// rather than reading and parsing them again, and keeping there those published since:
    /// what a reader that shows every job again and again (the console) reads.
    ///
    /// # Errors
    /// As [`StatusRead::read`].
    pub(crate) async fn read_knowing(
        client: &Client,
        definitions: &Arc<Definitions>,
    ) -> Result<Self, StatusUnread> {
        Self::read_from(client, Some(definitions)).await
    }

    async fn read_from(
        client: &Client,
        definitions: Option<&Arc<Definitions>>,
    ) -> Result<Self, StatusUnread> {
        let read = async {
            let overview = match definitions {
                Some(definitions) => {
                    let overview = client
                        .overview_knowing(|hash| definitions.known(hash))
                        .await?;
                    definitions.learn(&overview);
                    overview
                }
                None => client.overview().await?,
            };
            Ok::<_, ClientError>((
                overview,
                client.recent_events().await?,
                client.owed_notices().await?,
                client.writes_refused().await?,
                client.damaged_keys().await?,
                archive::read(client).await?,
            ))
        }
        .await;
        // With no replica's report there is nothing to name, which is no failure of the status;
        // with Redis out of reach, asking it again would only wait as long once more.
        let failing = if read.as_ref().is_err_and(out_of_reach) {
            Vec::new()
        } else {
            client.failing_scripts().await.unwrap_or_default()
        };
        match read {
            Ok((overview, events, owed_notices, writes_refused, damaged, archive)) => Ok(Self {
                archive,
                overview,
                events: RecentEvents::new(events),
                owed_notices,
                writes_refused,
                damaged,
                failing,
                definitions: definitions.cloned(),
            }),
            Err(error) => Err(StatusUnread { error, failing }),
        }
    }

    /// The status as one JSON document (its shape is in docs/cli.md).
    pub(crate) fn document(&self) -> Value {
        let mut document = self.summary();
        document["jobs"] = Value::Array(self.job_states());
        document
    }

    /// Each published job's state in the status document: parses every job's definition and
    /// finds its next fire, but for a read given [`Definitions`], which parses a definition once
    /// per hash and finds its next fire once per fire.
    fn job_states(&self) -> Vec<Value> {
        let running = running_by_job(&self.overview);
        let paused = paused_jobs(&self.overview);
        published(&self.overview, self.definitions.as_deref())
            .iter()
            .map(|job| {
                let last = self.events.last_outcome(&job.name);
                json!({
                    "job": job.name,
                    "workflow": job.workflow(),
                    "paused": paused.contains(job.name.as_str()),
                    "last_outcome": last.map(|(state, _)| state),
                    "last_at": last.map(|(_, at)| rfc3339(at)),
                    "last_at_ms": last.map(|(_, at)| at),
                    "next_fire": job.parsed.next_fire(self.overview.now_ms),
                    "running": running.get(job.name.as_str()).cloned().unwrap_or_default(),
                })
            })
            .collect()
    }

    /// The status document without its `jobs`: what the console's overview shows, which costs
    /// no job's definition parsed nor next fire found, however many jobs are published.
    pub(crate) fn summary(&self) -> Value {
        let refused = self.writes_refused.is_some();
        let leader = self.overview.leader.as_ref().map(|(token, lease_ms)| {
            let (id, epoch) = token.rsplit_once(':').unwrap_or((token, ""));
            json!({ "id": id, "epoch": epoch.parse::<u64>().ok(), "lease_ms": lease_ms })
        });
        let replicas: Vec<Value> = self
            .overview
            .replicas
            .iter()
            .map(|replica| {
                json!({
                    "id": replica.id,
                    "heartbeat_age_ms": self.overview.now_ms - replica.heartbeat_ms,
                    "state": replica_state(&self.overview, replica, refused),
                    "stale": replica_state(&self.overview, replica, refused) != "alive",
                    "queues": served_queues(replica),
                    "labels": labels(replica),
                    "info": typed_fields(replica.info.clone()),
                })
            })
            .collect();
        let ready: Vec<Value> = self
            .overview
            .counts
            .ready
            .iter()
            .map(|(queue, [high, normal, low])| {
                json!({
                    "queue": queue,
                    "high": high,
                    "normal": normal,
                    "low": low,
                    "served_by": served_by(&self.overview, queue, refused),
                })
            })
            .collect();
        let undeclared: Vec<Value> = self
            .overview
            .undeclared
            .iter()
            .map(|aside| {
                json!({
                    "job": aside.job,
                    "runs": aside.runs,
                    "since": rfc3339(aside.since_ms),
                    "since_ms": aside.since_ms,
                    "waiting_ms": (self.overview.now_ms - aside.since_ms).max(0),
                    "declared_by": declared_by(&self.overview, &aside.job),
                })
            })
            .collect();
        json!({
            "leader": leader,
            "held_ms": self.overview.held_for.map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
            "writes_refused": refused::json(self.writes_refused.as_ref()),
            "replicas": replicas,
            "due": self.overview.counts.due,
            "active": self.overview.counts.active,
            "dead": self.overview.counts.dead,
            "notices_owed": self.owed_notices,
            "damaged_keys": { "count": self.damaged.count, "keys": self.damaged.keys },
            "definition_hashes_damaged": self.overview.definition_hashes_damaged,
            "ready": ready,
            "undeclared": undeclared,
            "archive": archive::json(self.archive.as_ref(), &self.overview, refused),
            "failing_scripts": self.failing
                .iter()
                .map(|(replica, report)| json!({ "replica": replica, "error": report }))
                .collect::<Vec<_>>(),
        })
    }
}

pub(super) fn status(args: &StatusArgs, out: &mut impl Write) -> Result<(), CliError> {
    let read = block_on(async {
        let client = Client::from_store(args.redis.connect().await?);
        Ok(StatusRead::read(&client).await)
    })?;
    let read = match read {
        Ok(read) => read,
        Err(StatusUnread { error, failing }) => {
            let error = CliError::from(error);
            return Err(match failing_scripts_text(&failing) {
                Some(text) => CliError::ScriptsFailing(format!("{error}\n{text}")),
                None => error,
            });
        }
    };
    if args.json {
        let status = read.document();
        writeln!(out, "{status}").map_err(CliError::io("writing the status"))?;
        let failing_text = failing_scripts_text(&read.failing);
        return exit_status(read.writes_refused.as_ref(), failing_text);
    }
    let StatusRead {
        overview,
        events,
        owed_notices,
        writes_refused,
        damaged,
        failing,
        archive,
        ..
    } = read;
    let failing_text = failing_scripts_text(&failing);
    let refused = writes_refused.is_some();
    let jobs = published(&overview, None);
    let running = running_by_job(&overview);
    let paused = paused_jobs(&overview);

    let written = (|| -> std::io::Result<()> {
        match &overview.leader {
            Some((token, lease_ms)) => {
                let (id, epoch) = token.rsplit_once(':').unwrap_or((token, "?"));
                writeln!(
                    out,
                    "leader: {id} (epoch {epoch}), lease {} left",
                    duration(*lease_ms)
                )?;
            }
            None => writeln!(
                out,
                "leader: none (an election is due within the lease ttl)"
            )?,
        }
        if let Some(refused) = &writes_refused {
            writeln!(out, "{}", refused::paragraph(refused))?;
        }
        if let Some(left) = overview.held_for {
            writeln!(
                out,
                "held: nothing is planned, claimed or recorded for {} more (`redcron release` \
                 ends it)",
                duration(i64::try_from(left.as_millis()).unwrap_or(i64::MAX))
            )?;
        }
        writeln!(
            out,
            "runs: {} due, {} active, {} dead",
            overview.counts.due, overview.counts.active, overview.counts.dead
        )?;
        if owed_notices > 0 {
            writeln!(
                out,
                "notices: {owed_notices} owed, not yet sent (being sent, or waiting to be tried \
                 again: see the replicas' logs)"
            )?;
        }
        if damaged.count > 0 {
            writeln!(out, "{}", damaged_records(&damaged))?;
        }
        if overview.definition_hashes_damaged {
            writeln!(out, "{}", definitions::HASHES_DAMAGED)?;
        }
        for aside in &overview.undeclared {
            writeln!(out, "{}", set_aside(&overview, aside))?;
        }
        for line in archive::lines(archive.as_ref(), &overview, refused) {
            writeln!(out, "{line}")?;
        }
        // With no replica alive, one line below the replicas says so for every job at once.
        let any_alive = overview.replicas.iter().any(|replica| {
            !matches!(
                replica_state(&overview, replica, refused),
                "lost" | "stopped"
            )
        });
        for job in jobs
            .iter()
            .filter(|job| any_alive && !undeclared::declared_live(&overview, &job.name, refused))
        {
            writeln!(out, "{}", undeclared::warning(job))?;
        }
        writeln!(out)?;
        let replicas: Vec<Vec<String>> = overview
            .replicas
            .iter()
            .map(|replica| {
                // A lost replica's record expires with its heartbeats: what it said is gone.
                let field = |name: &str| replica.info.get(name).filter(|value| !value.is_empty());
                let shown = |name: &str| field(name).cloned().unwrap_or_else(|| "-".to_owned());
                let state = replica_state(&overview, replica, refused);
                vec![
                    replica.id.clone(),
                    shown("host"),
                    shown("version"),
                    ago(overview.now_ms, replica.heartbeat_ms),
                    // What a replica that no longer beats said last is not what it runs now.
                    match (field("busy_workers"), field("max_workers")) {
                        (Some(busy), Some(max)) if state == "alive" => format!("{busy}/{max}"),
                        _ => "-".to_owned(),
                    },
                    shown("queues"),
                    match labels(replica).join(" ") {
                        none if none.is_empty() => "-".to_owned(),
                        labels => labels,
                    },
                    state.to_owned(),
                ]
            })
            .collect();
        if replicas.is_empty() {
            writeln!(
                out,
                "no replica has sent a heartbeat in namespace \"{}\"",
                args.redis.namespace
            )?;
        } else {
            write_table(
                out,
                &[
                    "REPLICA",
                    "HOST",
                    "VERSION",
                    "HEARTBEAT",
                    "BUSY",
                    "QUEUES",
                    "LABELS",
                    "STATE",
                ],
                &replicas,
            )?;
            if !refused
                && overview
                    .replicas
                    .iter()
                    .all(|replica| replica_state(&overview, replica, refused) != "alive")
            {
                writeln!(
                    out,
                    "no live replica: no fire is planned or run until one starts"
                )?;
            }
            if let Some(text) = &failing_text {
                writeln!(out, "{text}")?;
            }
        }
        writeln!(out)?;
        let ready: Vec<Vec<String>> = overview
            .counts
            .ready
            .iter()
            .map(|(queue, lengths)| {
                std::iter::once(queue.clone())
                    .chain(lengths.iter().map(ToString::to_string))
                    .chain(std::iter::once(
                        served_by(&overview, queue, refused).to_string(),
                    ))
                    .collect()
            })
            .collect();
        writeln!(out, "ready runs, by queue and priority:")?;
        write_table(
            out,
            &["QUEUE", "HIGH", "NORMAL", "LOW", "SERVED BY"],
            &ready,
        )?;
        for (queue, lengths) in &overview.counts.ready {
            let waiting: u64 = lengths.iter().sum();
            if waiting > 0 && !refused && served_by(&overview, queue, refused) == 0 {
                if let Some(id) = route_replica(queue) {
                    writeln!(
                        out,
                        "route {queue}: {waiting} ready run(s) of every-replica jobs for replica \
                         {id}, which is not alive: they wait for it, and are skipped as \
                         replica-down once it has been gone longer than the misfire threshold"
                    )?;
                    continue;
                }
                writeln!(
                    out,
                    "queue {queue}: {waiting} ready run(s) and no live replica serves it: they \
                     wait for one started with --queues {queue} (or for the queue's [queues] \
                     fallback, if it has one)"
                )?;
            }
        }
        writeln!(out)?;
        let rows: Vec<Vec<String>> = jobs
            .iter()
            .map(|job| {
                let (last, when) = events.last_outcome(&job.name).map_or_else(
                    || ("-".to_owned(), "-".to_owned()),
                    |(state, at)| (state.to_owned(), ago(overview.now_ms, at)),
                );
                vec![
                    job.label(),
                    if paused.contains(job.name.as_str()) {
                        "paused"
                    } else {
                        "-"
                    }
                    .to_owned(),
                    last,
                    when,
                    job.next_fires(overview.now_ms, 1)
                        .pop()
                        .unwrap_or_else(|| "-".to_owned()),
                    running
                        .get(job.name.as_str())
                        .map(|runs| runs.join(" "))
                        .unwrap_or_default(),
                ]
            })
            .collect();
        if rows.is_empty() {
            return no_jobs(out, &args.redis.namespace);
        }
        write_table(
            out,
            &["JOB", "PAUSED", "LAST", "WHEN", "NEXT FIRE", "RUNNING"],
            &rows,
        )
    })();
    written.map_err(CliError::io("writing the status"))?;
    exit_status(writes_refused.as_ref(), failing_text)
}

/// The status's exit, once it is shown: a Redis that refuses writes, or replicas that report
/// scripts failing on a damaged key, fail the command all the same, so that a check running
/// `status` does not pass.
fn exit_status(
    writes_refused: Option<&WritesRefused>,
    failing_text: Option<String>,
) -> Result<(), CliError> {
    if let Some(refused) = writes_refused {
        return Err(CliError::WritesRefused(refused::error(refused)));
    }
    failing_text.map_or(Ok(()), |text| Err(CliError::ScriptsFailing(text)))
}

#[cfg(test)]
mod tests;
