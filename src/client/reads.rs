//! What the command line shows, as typed reads: the namespace's state, the runs' history, the
//! runs going on and due, the dead letters, one run's record.

use std::collections::HashMap;

use super::{Client, ClientError};
use crate::store::{Event, Overview, RunState, WritesRefused};

/// How many of the newest events a history or a status reads at most.
pub const EVENTS_SCANNED: usize = 10_000;

/// How many runs of each set [`Client::runs`] reads before it filters by job.
const RUNS_SCANNED: usize = 10_000;

/// One outcome from the events stream, with its run's record as it is now (empty once the
/// record expired).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// The outcome as recorded.
    pub event: Event,
    /// The run's record.
    pub run: HashMap<String, String>,
}

/// A run listed by [`Client::runs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRun {
    /// Its id.
    pub run_id: String,
    /// Its record; for a planned fire not yet promoted (which has none), what its id and due
    /// time tell: `kind`, `state`, `due_ms`, `job`, `fire_ms`.
    pub fields: HashMap<String, String>,
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

/// Which runs [`Client::runs`] lists: those holding a lease, those due, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsQuery {
    /// Runs holding a lease (running, or claimed to start within moments).
    pub active: bool,
    /// Runs ready or waiting: for a worker, a slot of their job, or a replica that serves
    /// their queue or declares their job.
    pub ready: bool,
    /// Runs waiting for their due time (planned fires, delayed runs, retries).
    pub due: bool,
    /// Only this job's.
    pub job: Option<String>,
    /// How many at most.
    pub count: usize,
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

    /// The newest [`EVENTS_SCANNED`] outcomes of the events stream, newest first.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn recent_events(&self) -> Result<Vec<Event>, ClientError> {
        Ok(self.store.recent_events(EVENTS_SCANNED).await?)
    }

    /// Why Redis refuses writes now (out of memory, a read-only replica, ...), if it does:
    /// asked without writing.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn writes_refused(&self) -> Result<Option<WritesRefused>, ClientError> {
        Ok(self.store.writes_refused().await?)
    }

    /// How many notices are owed and not yet taken by their targets.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn owed_notices(&self) -> Result<u64, ClientError> {
        Ok(self.store.owed_notices().await?)
    }

    /// The newest `count` outcomes (successes, skips, retries, deaths; only retries and deaths
    /// when `failed_only`), of `job` only when given, each with its run's record.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// for entry in client.history(Some("nightly-backup"), 10, true).await? {
    ///     println!("{:?}", entry.event.fields.get("state"));
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`] for a job with no history that no replica declares; Redis
    /// errors.
    pub async fn history(
        &self,
        job: Option<&str>,
        count: usize,
        failed_only: bool,
    ) -> Result<Vec<HistoryEntry>, ClientError> {
        let mut entries = Vec::new();
        for event in self.store.recent_events(EVENTS_SCANNED).await? {
            let field = |name: &str| event.fields.get(name).cloned().unwrap_or_default();
            let state = RunState::parse(&field("state"));
            let failed = matches!(state, Some(RunState::Dead | RunState::Retrying));
            let ended_otherwise = matches!(state, Some(RunState::Succeeded | RunState::Skipped));
            if !(failed || (!failed_only && ended_otherwise))
                || job.is_some_and(|job| job != field("job"))
            {
                continue;
            }
            let run = self.store.run_fields(&field("run")).await?;
            entries.push(HistoryEntry { event, run });
            if entries.len() == count {
                break;
            }
        }
        self.known_unless_empty(job, entries.is_empty()).await?;
        Ok(entries)
    }

    /// Runs holding a lease, then runs ready or waiting (in the order they are claimed), then
    /// runs due, soonest first, as `query` says; with Redis's clock, ms, when they were read.
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`] for a job with no such run that no replica declares; Redis
    /// errors.
    pub async fn runs(&self, query: &RunsQuery) -> Result<(Vec<ListedRun>, i64), ClientError> {
        // Each id with its due time when it comes from the due set.
        let mut listed: Vec<(String, Option<i64>)> = Vec::new();
        if query.active {
            let leased = self.store.leased_runs(RUNS_SCANNED).await?;
            listed.extend(leased.into_iter().map(|(run_id, _)| (run_id, None)));
        }
        if query.ready {
            let waiting = self.store.waiting_runs(RUNS_SCANNED).await?;
            listed.extend(waiting.into_iter().map(|run_id| (run_id, None)));
        }
        if query.due {
            let due = self.store.due_runs(RUNS_SCANNED).await?;
            listed.extend(
                due.into_iter()
                    .map(|(run_id, due_ms)| (run_id, Some(due_ms))),
            );
        }
        let mut runs = Vec::new();
        for (run_id, due_ms) in listed {
            let fields = self.store.run_fields(&run_id).await?;
            let fields = match due_ms {
                // A planned cron fire has no record until it is promoted: its id and due time
                // say what it is.
                Some(due_ms) if fields.is_empty() => planned_fire(&run_id, due_ms),
                // A leased or ready run without a record has nothing to show: the reaper or
                // the claim buries it.
                None if fields.is_empty() => continue,
                _ => fields,
            };
            if query
                .job
                .as_ref()
                .is_some_and(|job| fields.get("job") != Some(job))
            {
                continue;
            }
            runs.push(ListedRun { run_id, fields });
            if runs.len() == query.count {
                break;
            }
        }
        self.known_unless_empty(query.job.as_deref(), runs.is_empty())
            .await?;
        Ok((runs, self.store.now_ms().await?))
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

    /// When the run `id` is due, when it waits in the due set (a planned cron fire has no
    /// record until it comes due), and Redis's clock now: ms both.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn due_at(&self, id: &str) -> Result<(Option<i64>, i64), ClientError> {
        Ok(self.store.due_at(id).await?)
    }

    /// The record of the dead run `id`.
    ///
    /// # Errors
    /// [`ClientError::NoDeadRun`] when it is not dead; Redis errors.
    pub async fn dead_run(&self, id: &str) -> Result<HashMap<String, String>, ClientError> {
        let fields = self.store.run_fields(id).await?;
        if fields.get("state").map(String::as_str) == Some(RunState::Dead.as_str()) {
            Ok(fields)
        } else {
            Err(ClientError::NoDeadRun(id.to_owned()))
        }
    }

    /// The `count` runs that died last, newest first, with their records.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn dead_runs(&self, count: usize) -> Result<Vec<DeadRun>, ClientError> {
        let mut runs = Vec::new();
        for (run_id, died_ms) in self.store.dead_runs(count).await? {
            let fields = self.store.run_fields(&run_id).await?;
            runs.push(DeadRun {
                run_id,
                died_ms,
                fields,
            });
        }
        Ok(runs)
    }

    /// A job that a listing found nothing of must at least be declared: a name with neither a
    /// past nor a declaration is a mistake to say, not an empty list.
    async fn known_unless_empty(&self, job: Option<&str>, empty: bool) -> Result<(), ClientError> {
        match job {
            Some(job) if empty && !self.store.is_declared(job).await? => {
                Err(ClientError::UnknownJob(job.to_owned()))
            }
            _ => Ok(()),
        }
    }
}

/// What a planned fire's id (`<job>@<fire ms>`) and due time tell of it.
fn planned_fire(run_id: &str, due_ms: i64) -> HashMap<String, String> {
    let mut fields = HashMap::from([
        ("kind".to_owned(), "cron".to_owned()),
        ("state".to_owned(), "scheduled".to_owned()),
        ("due_ms".to_owned(), due_ms.to_string()),
    ]);
    if let Some((job, fire_ms)) = crate::store::parse_cron_run_id(run_id) {
        fields.insert("job".to_owned(), job.to_owned());
        fields.insert("fire_ms".to_owned(), fire_ms.to_string());
    }
    fields
}
