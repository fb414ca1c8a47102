//! What the command line shows, as typed reads: the namespace's state, the runs' history, the
//! runs going on and due, the dead letters, one run's record.

use std::collections::HashMap;

use super::{Client, ClientError};
use crate::store::{DamagedKeys, Entry, Event, OutputSoFar, Overview, RunState, WritesRefused};

/// How many of the newest events a history or a status reads at most.
pub const EVENTS_SCANNED: usize = 10_000;

/// How many of the damaged records [`Client::damaged_keys`] names.
const DAMAGED_KEYS_SHOWN: usize = 5;

/// One outcome from the events stream, with its run's record as it is now (empty once the
/// record expired).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// The outcome as recorded.
    pub event: Event,
    /// The run's record.
    pub run: HashMap<String, String>,
}

/// A run in the dead letters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadRun {
    /// Its id.
    pub run_id: String,
    /// When it died, ms.
    pub died_ms: i64,
    /// Its record.
    pub fields: HashMap<String, String>,
}

impl Client {
    /// The namespace's state: leader, replicas, counts, published jobs, running runs.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let overview = client.overview().await?;
    /// println!("{} replicas, {} runs dead", overview.replicas.len(), overview.counts.dead);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors.
    pub async fn overview(&self) -> Result<Overview, ClientError> {
        Ok(self.store.overview().await?)
    }

    /// The namespace's state as [`Client::overview`] reads it, with the published definition of
    /// `job` alone: what a read of one job needs, at the cost of one job however many are
    /// published.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn job_overview(&self, job: &str) -> Result<Overview, ClientError> {
        Ok(self.store.job_overview(job).await?)
    }

    /// The namespace's state as [`Client::overview`] reads it, taking each published definition
    /// that `known` holds by its content hash (its JSON and the queue it names, see
    /// [`Overview::queue_named`]) from it rather than reading it again: what a reader that keeps
    /// the definitions it parsed (a definition never changes under its hash) reads, at the cost
    /// of the jobs' names and hashes and the definitions published since.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn overview_knowing(
        &self,
        known: impl Fn(&str) -> Option<(String, Option<String>)> + Sync,
    ) -> Result<Overview, ClientError> {
        Ok(self.store.overview_knowing(&known).await?)
    }

    /// The replica that leads now, if one does: one read of the leader lease.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn leader(&self) -> Result<Option<String>, ClientError> {
        Ok(self.store.leader_id().await?)
    }

    /// The scripts that fail on a damaged key, by replica: (replica id, `<script> fails: <what
    /// Redis said>`, which names the key). Readable when [`Client::overview`] is not.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn failing_scripts(&self) -> Result<Vec<(String, String)>, ClientError> {
        Ok(self.store.failing_scripts().await?)
    }

    /// The newest [`EVENTS_SCANNED`] outcomes of the events stream, newest first.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn recent_events(&self) -> Result<Vec<Event>, ClientError> {
        Ok(self.store.recent_events(EVENTS_SCANNED).await?)
    }

    /// The events naming `job` (its runs' outcomes, the actions on it) among the newest
    /// [`EVENTS_SCANNED`] of the stream, newest first: what [`Client::recent_events`] holds of
    /// that job, read without making every other job's events.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn job_events(&self, job: &str) -> Result<Vec<Event>, ClientError> {
        Ok(self.store.recent_events_of(job, EVENTS_SCANNED).await?)
    }

    /// Why Redis refuses writes now (out of memory, a read-only replica, ...), if it does:
    /// asked without writing.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn writes_refused(&self) -> Result<Option<WritesRefused>, ClientError> {
        Ok(self.store.writes_refused().await?)
    }

    /// The run and workflow records the reapers found damaged (without the fields redcron
    /// writes, or not a hash) and gave an expiry, within the run retention: how many, and the
    /// first few.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn damaged_keys(&self) -> Result<DamagedKeys, ClientError> {
        Ok(self.store.damaged_keys(DAMAGED_KEYS_SHOWN).await?)
    }

    /// How many notices are owed and not yet taken by their targets.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn owed_notices(&self) -> Result<u64, ClientError> {
        Ok(self.store.owed_notices().await?)
    }

    /// The newest `count` outcomes (successes, skips, retries, deaths; only retries and deaths
    /// when `failed_only`), of `job` only when given, of the attempts `replica` ran only when
    /// given (with the runs of every-replica fires meant for it, skipped before it claimed
    /// them; a fire of a job that runs once, skipped before any replica claimed it, has none),
    /// each with its run's record.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// for entry in client.history(Some("nightly-backup"), None, 10, true).await? {
    ///     println!("{:?}", entry.event.fields.get("state"));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`] for a job with no history that no replica declares,
    /// [`ClientError::UnknownReplica`] for a replica id with none that the namespace does not
    /// know; Redis errors.
    pub async fn history(
        &self,
        job: Option<&str>,
        replica: Option<&str>,
        count: usize,
        failed_only: bool,
    ) -> Result<Vec<HistoryEntry>, ClientError> {
        let events = self.store.recent_events(EVENTS_SCANNED).await?;
        self.history_among(&events, job, replica, count, failed_only)
            .await
    }

    /// As [`Client::history`], among `events` (newest first) rather than the newest
    /// [`EVENTS_SCANNED`] of the stream: for a reader that read them already, such as a job's
    /// from [`Client::job_events`].
    ///
    /// # Errors
    /// As [`Client::history`].
    pub async fn history_among(
        &self,
        events: &[Event],
        job: Option<&str>,
        replica: Option<&str>,
        count: usize,
        failed_only: bool,
    ) -> Result<Vec<HistoryEntry>, ClientError> {
        let mut entries = Vec::new();
        for event in events {
            let field = |name: &str| event.fields.get(name).cloned().unwrap_or_default();
            let state = RunState::parse(&field("state"));
            let failed = matches!(state, Some(RunState::Dead | RunState::Retrying));
            let ended_otherwise = matches!(state, Some(RunState::Succeeded | RunState::Skipped));
            if !(failed || (!failed_only && ended_otherwise))
                || job.is_some_and(|job| job != field("job"))
                || replica.is_some_and(|replica| {
                    let (job, run_id) = (field("job"), field("run"));
                    let worker = event.fields.get("worker").map(String::as_str);
                    crate::store::replica_of(&job, &run_id, worker) != Some(replica)
                })
            {
                continue;
            }
            let run = self.store.run_fields(&field("run")).await?;
            entries.push(HistoryEntry {
                event: event.clone(),
                run,
            });
            if entries.len() == count {
                break;
            }
        }
        self.known_unless_empty(job, entries.is_empty()).await?;
        self.known_replica_unless_empty(replica, entries.is_empty())
            .await?;
        Ok(entries)
    }

    /// Every field of the run `id`'s record, empty when it has none (never existed, or ended
    /// longer ago than the retention).
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let run = client.run("nightly-backup@1767225600000").await?;
    /// println!("{:?}", run.get("state"));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors.
    pub async fn run(&self, id: &str) -> Result<HashMap<String, String>, ClientError> {
        Ok(self.store.run_fields(id).await?)
    }

    /// What run `id`'s worker last published of its output while the run runs. Read it for an
    /// active run only: once a run ends, its record's `output` is its output, and what was
    /// published is left to expire. Compare its attempt with the record's: a retry that has
    /// not written yet shows its earlier attempt's.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// if let Some(so_far) = client.live_output("nightly-backup@1767225600000").await? {
    ///     println!("at {} ms: {}", so_far.written_ms, so_far.output);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors.
    pub async fn live_output(&self, id: &str) -> Result<Option<OutputSoFar>, ClientError> {
        Ok(self.store.live_output(id).await?)
    }

    /// When the run `id` is due, when it waits in the due set (a planned cron fire has no
    /// record until it comes due), and Redis's clock now: ms both.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn due_at(&self, id: &str) -> Result<(Option<i64>, i64), ClientError> {
        Ok(self.store.due_at(id).await?)
    }

    /// The record of the dead run `id`. An entry that is not UTF-8 is named as `dead list`
    /// prints it, escaped (`bin\xffary`).
    ///
    /// # Errors
    /// [`ClientError::DamagedDeadRun`] when it is in the dead letters but its record is not
    /// a dead run's, or it is no run id; [`ClientError::NoDeadRun`] when it is not dead; Redis
    /// errors.
    pub async fn dead_run(&self, id: &str) -> Result<HashMap<String, String>, ClientError> {
        let fields = self.store.run_fields(id).await?;
        match dead_damage(&fields) {
            None => Ok(fields),
            Some(damage)
                if self
                    .store
                    .died_at(&Entry::Run(id.to_owned()))
                    .await?
                    .is_some() =>
            {
                Err(ClientError::DamagedDeadRun {
                    run: id.to_owned(),
                    damage,
                })
            }
            Some(_) => Err(self.not_dead(id).await?),
        }
    }

    /// Why `id`, no dead run's id, is not one to show or retry: an entry of the dead letters
    /// that is not UTF-8, which `id` names escaped as `dead list` printed it, is damaged;
    /// anything else is no dead run.
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn not_dead(&self, id: &str) -> Result<ClientError, ClientError> {
        let entry = Entry::from_escaped(id);
        if entry.run_id().is_none() && self.store.died_at(&entry).await?.is_some() {
            return Ok(ClientError::DamagedDeadRun {
                run: id.to_owned(),
                damage: UNREADABLE.to_owned(),
            });
        }
        Ok(ClientError::NoDeadRun(id.to_owned()))
    }

    /// The `count` runs that died last, newest first (what an operator looks at after an
    /// incident), with their records. An entry of the
    /// dead letters that is no dead run (no run id, no record, a record of a run not dead) is
    /// listed too, its id escaped (see [`Entry`]) and its fields only `damaged`, which says
    /// why.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn dead_runs(&self, count: usize) -> Result<Vec<DeadRun>, ClientError> {
        let mut runs = Vec::new();
        for (entry, died_ms) in self.store.newest_dead_runs(count).await? {
            let fields = match &entry {
                Entry::Run(run_id) => {
                    let fields = self.store.run_fields(run_id).await?;
                    dead_damage(&fields).map_or(fields, |damage| damaged(&damage))
                }
                Entry::Unreadable(_) => damaged(UNREADABLE),
            };
            runs.push(DeadRun {
                run_id: entry.to_string(),
                died_ms,
                fields,
            });
        }
        Ok(runs)
    }

    /// A job that a listing found nothing of must at least be declared: a name with neither a
    /// past nor a declaration is a mistake to say, not an empty list.
    pub(super) async fn known_unless_empty(
        &self,
        job: Option<&str>,
        empty: bool,
    ) -> Result<(), ClientError> {
        match job {
            Some(job) if empty && !self.store.is_declared(job).await? => {
                Err(ClientError::UnknownJob(job.to_owned()))
            }
            _ => Ok(()),
        }
    }

    /// As [`Self::known_unless_empty`], for a replica id: one the namespace does not know is
    /// a mistake to say, with the ids it knows.
    pub(super) async fn known_replica_unless_empty(
        &self,
        replica: Option<&str>,
        empty: bool,
    ) -> Result<(), ClientError> {
        let Some(replica) = replica.filter(|_| empty) else {
            return Ok(());
        };
        let known = self.store.known_replicas().await?;
        if known.iter().any(|id| id == replica) {
            return Ok(());
        }
        Err(ClientError::UnknownReplica {
            replica: replica.to_owned(),
            known,
        })
    }
}

/// Why an entry that is not UTF-8 is no run.
pub(super) const UNREADABLE: &str = "not a run id: its bytes are not UTF-8";

/// The fields a listing shows for a damaged entry: only `damaged`, saying why it is no run.
pub(super) fn damaged(why: &str) -> HashMap<String, String> {
    HashMap::from([("damaged".to_owned(), why.to_owned())])
}

/// Why the record `fields` of an entry of the dead letters is no dead run's, if it is not.
pub(super) fn dead_damage(fields: &HashMap<String, String>) -> Option<String> {
    match fields.get("state") {
        _ if fields.is_empty() => Some("no record: no run has this id".to_owned()),
        Some(state) if state == RunState::Dead.as_str() => None,
        Some(state) => Some(format!("its record says {state}, not dead")),
        None => Some("its record has no state".to_owned()),
    }
}
