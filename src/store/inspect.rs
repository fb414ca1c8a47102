//! What operators read (`status`, `jobs`, `runs`, `history`) and their few writes (pause,
//! clear a namespace): plain commands, no script the engine depends on.

use std::collections::HashMap;
use std::time::Duration;

use redis::{AsyncCommands, FromRedisValue, Value};

use super::During;
use super::damage::readable_record;
use super::damaged_names::{DamagedName, NameIndex, readable, readable_names};
use super::reply::Reply;
use super::{Entry, Store, StoreError, millis, published_declarations, scripts};
use crate::schedule::Priority;
use definitions::{DefinitionsRead, KnownDefinitions};
pub(super) use definitions::{queues_of, runs_on_every_replica};
pub(super) use events::stream_event;

mod definitions;
mod events;

/// How long after a hold ends expired leases are still not reaped: long enough for workers to
/// record the outcomes the hold refused (they retry for a while, and reconcile after) and to
/// extend leases again, so that no run finished or running during a hold runs again.
pub const REAPING_GRACE: Duration = Duration::from_secs(60);

/// One replica as its heartbeat describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// Its id.
    pub id: String,
    /// Its last heartbeat, ms on Redis's clock.
    pub heartbeat_ms: i64,
    /// What it reports: host, pid, version, started_ms, busy_workers, max_workers,
    /// heartbeat_period_ms (empty once its record expired).
    pub info: HashMap<String, String>,
    /// Job -> content hash of what it declares; `None` when its declarations are not in Redis
    /// (not published yet, or expired while Redis stalled), which says nothing about any job.
    pub jobs: Option<HashMap<String, String>>,
    /// When it stopped cleanly (its last heartbeat is then this time too); `None` for a replica
    /// that beats, or did until it was lost.
    pub stopped_ms: Option<i64>,
}

/// How many runs are where: what the gauges of shared state report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunCounts {
    /// Runs in the due set.
    pub due: u64,
    /// Runs holding a lease.
    pub active: u64,
    /// Runs in the dead letters.
    pub dead: u64,
    /// Per queue: ready lengths at high, normal and low priority.
    pub ready: Vec<(String, [u64; 3])>,
}

/// A snapshot of the shared state, for `redcron status` and `redcron jobs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overview {
    /// Redis's time when it was taken, ms.
    pub now_ms: i64,
    /// The leader's token and the ms left on its lease.
    pub leader: Option<(String, i64)>,
    /// Runs due, active, dead and ready (per queue of the published jobs and `default`).
    pub counts: RunCounts,
    /// Paused jobs.
    pub paused: Vec<String>,
    /// How much longer the namespace is held (`redcron hold`), when it is.
    pub held_for: Option<Duration>,
    /// Every replica that has sent a heartbeat, and those that stopped cleanly within a day,
    /// sorted by id.
    pub replicas: Vec<ReplicaInfo>,
    /// Job -> published definition JSON (of the one job asked alone, in a
    /// [`Store::job_overview`]).
    pub definitions: HashMap<String, String>,
    /// Job -> content hash of its published definition (as `definitions`, one job's alone).
    pub definition_hashes: HashMap<String, String>,
    /// Whether `def-hashes` was of another type than a hash (damaged, or written by hand), so
    /// that `definition_hashes` were taken from the definitions themselves (the SHA-256 of
    /// each one's JSON) until the leader's next check of the published definitions replaces it.
    pub definition_hashes_damaged: bool,
    /// The names that are not UTF-8 in the indexes the overview reads (written by something
    /// else, or damaged), left out of the fields above: the reapers remove them at the end of
    /// their next round over the keys.
    pub damaged_names: Vec<DamagedName>,
    /// Active runs: id (escaped when it is no run id, see [`Entry`]), job (empty when its
    /// record has none), lease deadline ms.
    pub running: Vec<(String, String, i64)>,
    /// Jobs whose ready runs were put aside by replicas that do not declare them, by job name.
    /// These runs are in no count above: neither due, nor ready, nor active.
    pub undeclared: Vec<UndeclaredRuns>,
}

impl Overview {
    /// The leader's replica id, without the epoch its token ends with (`r1` of `r1:7`).
    pub fn leader_id(&self) -> Option<&str> {
        self.leader
            .as_ref()
            .map(|(token, _)| super::leadership::token_replica(token))
    }
}

/// The runs of one job put aside (`undeclared:<job>`) by replicas that do not declare it, until
/// one that does claims them or the reaper ends them as `undeclared`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UndeclaredRuns {
    /// The job.
    pub job: String,
    /// How many runs wait.
    pub runs: u64,
    /// Its score in `undeclared-jobs`, ms on Redis's clock: since when they wait with no live
    /// replica declaring the job (the reaper moves it to now while one does, so the grace before
    /// they are ended counts from here).
    pub since_ms: i64,
}

/// One entry of the events stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When it was recorded, ms (from the stream id).
    pub at_ms: i64,
    /// Its fields: run, state, job and whatever the change records (reason, attempt, exit_code,
    /// duration_ms, worker, due_ms).
    pub fields: HashMap<String, String>,
}

impl Store {
    /// Deletes every key of this namespace (and nothing else); returns how many. For the
    /// benchmark's own namespace: never call it on one that replicas use.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn clear_namespace(&self) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        let mut cursor = 0u64;
        let mut deleted = 0;
        loop {
            let (next, keys) = self.scan_page("", cursor, "clear_namespace").await?;
            if !keys.is_empty() {
                deleted += keys.len() as u64;
                let () = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut connection)
                    .await
                    .during(&self.metrics, "clear_namespace")?;
            }
            if next == 0 {
                return Ok(deleted);
            }
            cursor = next;
        }
    }

    /// How many runs hold a lease.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn active_runs(&self) -> Result<u64, StoreError> {
        self.connection
            .clone()
            .zcard(self.keys.active())
            .await
            .during(&self.metrics, "active_runs")
    }

    /// Whether some replica has published a job named `job`.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn is_declared(&self, job: &str) -> Result<bool, StoreError> {
        self.connection
            .clone()
            .hexists(self.keys.defs(), job)
            .await
            .during(&self.metrics, "is_declared")
    }

    /// Pauses (`true`) or resumes a job: a paused job's fires are skipped with reason `paused`.
    /// Returns whether that changed anything.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn set_paused(&self, job: &str, paused: bool) -> Result<bool, StoreError> {
        self.set_paused_by(job, paused, None).await
    }

    /// As [`Store::set_paused`], recording `actor` (who asked: a console's token or user,
    /// `cli`) with the event a change records, when given.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn set_paused_by(
        &self,
        job: &str,
        paused: bool,
        actor: Option<&str>,
    ) -> Result<bool, StoreError> {
        let changed: i64 = scripts::SET_PAUSED
            .key(self.keys.paused())
            .key(self.keys.events())
            .arg(job)
            .arg(if paused { "1" } else { "0" })
            .arg(self.settings.events_maxlen)
            .arg(actor.unwrap_or_default())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "set_paused")?;
        Ok(changed == 1)
    }

    /// Holds the namespace for `duration` (`Some`), or releases it (`None`): while it is held,
    /// every script that builds keys of its own refuses to run, so that the namespace's slot can
    /// be moved to another master. Leases are not reaped while it is held nor for
    /// [`REAPING_GRACE`] after. Returns whether it was held before.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn set_hold(&self, duration: Option<Duration>) -> Result<bool, StoreError> {
        self.set_hold_by(duration, None).await
    }

    /// As [`Store::set_hold`], recording the hold or the release (action `hold` or `release`)
    /// in the events stream, in the same transaction, with `actor`, who asked, when given.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn set_hold_by(
        &self,
        duration: Option<Duration>,
        actor: Option<&str>,
    ) -> Result<bool, StoreError> {
        let hold = self.keys.hold();
        let reaping_paused = self.keys.reaping_paused();
        let mut pipe = redis::pipe();
        pipe.atomic().exists(&hold);
        let action = if duration.is_some() {
            "hold"
        } else {
            "release"
        };
        let mut entry = vec![("action", action)];
        if let Some(actor) = actor {
            entry.push(("actor", actor));
        }
        pipe.xadd_maxlen(
            self.keys.events(),
            redis::streams::StreamMaxlen::Approx(
                usize::try_from(self.settings.events_maxlen).unwrap_or(usize::MAX),
            ),
            "*",
            &entry,
        )
        .ignore();
        match duration {
            Some(duration) => pipe
                .pset_ex(&hold, "held", millis(duration))
                .ignore()
                .pset_ex(&reaping_paused, "held", millis(duration + REAPING_GRACE))
                .ignore(),
            None => pipe
                .del(&hold)
                .ignore()
                .pexpire(
                    &reaping_paused,
                    i64::try_from(millis(REAPING_GRACE)).unwrap_or(i64::MAX),
                )
                .ignore(),
        };
        let (was_held,): (bool,) = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "set_hold")?;
        Ok(was_held)
    }

    /// Every field of a run's hash; empty when there is no such run (or it expired). A name or
    /// value that is not UTF-8 is escaped and named under `damaged` (see [`readable_record`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn run_fields(&self, run_id: &str) -> Result<HashMap<String, String>, StoreError> {
        let record: Vec<(Entry, Entry)> = self
            .connection
            .clone()
            .hgetall(self.keys.run(run_id))
            .await
            .during(&self.metrics, "run_fields")?;
        Ok(readable_record(record))
    }

    /// When the run `run_id` is due, if it is in the due set (a planned cron fire has no
    /// record until then), with Redis's clock now: ms both.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn due_at(&self, run_id: &str) -> Result<(Option<i64>, i64), StoreError> {
        let (fire, run): (Option<i64>, Option<i64>) = redis::pipe()
            .zscore(self.keys.due(), run_id)
            .zscore(self.keys.due_runs(), run_id)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "due_at")?;
        Ok((fire.or(run), self.now_ms().await?))
    }

    /// What operators look at: leadership, replicas, counts, ready lengths (of every queue
    /// with ready runs too, see [`Store::ready_queues`]), jobs, running runs.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn overview(&self) -> Result<Overview, StoreError> {
        self.overview_of(DefinitionsRead::All).await
    }

    /// As [`Store::overview`], with the published definition of `job` alone (none when it is
    /// not published) and ready lengths of its queue, `default` and those with ready runs: what
    /// a read of one job shows, without reading and parsing every job's definition.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn job_overview(&self, job: &str) -> Result<Overview, StoreError> {
        self.overview_of(DefinitionsRead::One(job)).await
    }

    /// As [`Store::overview`], the same snapshot, taking each definition that `known` holds by
    /// its content hash (its JSON and its queue, see [`Overview::queue_named`]) from it rather
    /// than reading and parsing it again: a reader that keeps the definitions it parsed (a
    /// definition never changes under its hash) reads their names and hashes, and only the
    /// definitions published since.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn overview_knowing(
        &self,
        known: &KnownDefinitions<'_>,
    ) -> Result<Overview, StoreError> {
        self.overview_of(DefinitionsRead::Known(known)).await
    }

    /// The overview of every published job, or of one alone.
    async fn overview_of(&self, read: DefinitionsRead<'_>) -> Result<Overview, StoreError> {
        let mut connection = self.connection.clone();
        let now_ms = self.now_ms().await?;
        type Snapshot = (
            Option<String>,
            i64,
            Vec<Entry>,
            Vec<(Entry, i64)>,
            Value,
            Value,
            Vec<(Entry, i64)>,
            Vec<(Entry, i64)>,
            Vec<(Entry, i64)>,
            i64,
        );
        let snapshot = |hashes: redis::Cmd| {
            let mut pipe = redis::pipe();
            pipe.get(self.keys.leader())
                .pttl(self.keys.leader())
                .smembers(self.keys.paused())
                .zrange_withscores(self.keys.replicas(), 0, -1)
                .add_command(read.definitions(self.keys.defs()))
                .add_command(hashes)
                .zrange_withscores(self.keys.active(), 0, -1)
                .zrange_withscores(self.keys.undeclared_jobs(), 0, -1)
                .zrange_withscores(self.keys.stopped_replicas(), 0, -1)
                .pttl(self.keys.hold());
            pipe
        };
        let taken: Result<Snapshot, redis::RedisError> =
            snapshot(read.hashes(self.keys.def_hashes()))
                .query_async(&mut connection)
                .await;
        let (taken, hashes_damaged) = match taken {
            // Taken again without them (their place in the reply holds the key's type): each
            // definition's hash is then its JSON's, as the leader writes it back.
            Err(error) if self.definition_hashes_refused(&error).await? => {
                let mut type_of = redis::cmd("TYPE");
                type_of.arg(self.keys.def_hashes());
                let taken: Snapshot = snapshot(type_of)
                    .query_async(&mut connection)
                    .await
                    .during(&self.metrics, "overview")?;
                (taken, true)
            }
            taken => (taken.during(&self.metrics, "overview")?, false),
        };
        let (
            leader,
            lease_ms,
            paused,
            replicas,
            defs,
            def_hashes,
            running,
            undeclared,
            stopped,
            held_ms,
        ) = taken;
        // A name that is not UTF-8 names nothing: left out, and shown as damaged.
        let mut damaged = Vec::new();
        let paused = readable_names(NameIndex::Paused, paused, &mut damaged);
        let replicas = readable(NameIndex::Replicas, replicas, &mut damaged);
        let undeclared = readable(NameIndex::UndeclaredJobs, undeclared, &mut damaged);
        let stopped = readable(NameIndex::StoppedReplicas, stopped, &mut damaged);
        let def_hashes = (!hashes_damaged).then_some(def_hashes);
        let (defs, def_hashes, named) = self
            .definitions_read(read, defs, def_hashes, &mut damaged)
            .await?;
        damaged.sort_by(|a, b| (a.index, a.name.as_bytes()).cmp(&(b.index, b.name.as_bytes())));
        let mut queues = named.clone();
        queues.extend(self.ready_queues().await?);
        let mut counts = self.run_counts(&queues).await?;
        // The index may name a queue emptied since the reapers' last round over the keys: one no
        // job names shows only while it holds runs.
        counts.ready.retain(|(queue, lengths)| {
            queue == "default" || named.contains(queue) || lengths.iter().any(|length| *length > 0)
        });
        let mut pipe = redis::pipe();
        for (replica, _) in &replicas {
            pipe.hgetall(self.keys.replica(replica));
            pipe.hgetall(self.keys.replica_jobs(replica));
        }
        // An unreadable entry is no run: it has no record to read a job from.
        for run_id in running.iter().filter_map(|(entry, _)| entry.run_id()) {
            pipe.hget(self.keys.run(run_id), "job");
        }
        for (job, _) in &undeclared {
            pipe.llen(self.keys.undeclared(job));
        }
        // One that beats again since it stopped is listed once, as beating.
        let stopped: Vec<(String, i64)> = stopped
            .into_iter()
            .filter(|(id, _)| !replicas.iter().any(|(live, _)| live == id))
            .collect();
        for (replica, _) in &stopped {
            pipe.hgetall(self.keys.replica(replica));
        }
        // An empty pipeline is an empty command to Redis, which refuses it: a namespace with
        // nothing in it (a mistyped --namespace) must read as empty instead.
        let answers: Vec<Value> = if replicas.is_empty()
            && running.iter().all(|(entry, _)| entry.run_id().is_none())
            && undeclared.is_empty()
            && stopped.is_empty()
        {
            Vec::new()
        } else {
            pipe.query_async(&mut connection)
                .await
                .during(&self.metrics, "overview")?
        };
        // Tolerant of values it cannot read (a foreign or half-written key reads as empty), but
        // not of a reply of the wrong length.
        let mut reply = Reply::new("overview", answers);
        let mut replica_infos = Vec::new();
        for (id, heartbeat_ms) in replicas {
            let info = HashMap::from_redis_value(reply.next_value()?).unwrap_or_default();
            let jobs: HashMap<String, String> =
                HashMap::from_redis_value(reply.next_value()?).unwrap_or_default();
            // The marker is there whenever the declarations are, even when they are none.
            let jobs = published_declarations(jobs);
            replica_infos.push(ReplicaInfo {
                id,
                heartbeat_ms,
                info,
                jobs,
                stopped_ms: None,
            });
        }
        let mut running_runs = Vec::new();
        for (entry, deadline_ms) in running {
            let job: Option<String> = match entry {
                Entry::Run(_) => Option::from_redis_value(reply.next_value()?).unwrap_or_default(),
                Entry::Unreadable(_) => None,
            };
            running_runs.push((entry.to_string(), job.unwrap_or_default(), deadline_ms));
        }
        let mut undeclared_runs = Vec::new();
        for (job, since_ms) in undeclared {
            let runs = u64::from_redis_value(reply.next_value()?).unwrap_or_default();
            // Counted a round trip after the listing: a claim may have taken them all back.
            if runs > 0 {
                undeclared_runs.push(UndeclaredRuns {
                    job,
                    runs,
                    since_ms,
                });
            }
        }
        for (id, stopped_ms) in stopped {
            let info = HashMap::from_redis_value(reply.next_value()?).unwrap_or_default();
            replica_infos.push(ReplicaInfo {
                id,
                heartbeat_ms: stopped_ms,
                info,
                jobs: None,
                stopped_ms: Some(stopped_ms),
            });
        }
        reply.finish()?;
        // By id, not by heartbeat: the order stays put from one look to the next.
        replica_infos.sort_by(|a, b| a.id.cmp(&b.id));
        undeclared_runs.sort_by(|a, b| a.job.cmp(&b.job));
        Ok(Overview {
            now_ms,
            leader: leader.map(|token| (token, lease_ms)),
            counts,
            paused,
            held_for: u64::try_from(held_ms).ok().map(Duration::from_millis),
            replicas: replica_infos,
            definitions: defs,
            definition_hashes: def_hashes,
            definition_hashes_damaged: hashes_damaged,
            damaged_names: damaged,
            running: running_runs,
            undeclared: undeclared_runs,
        })
    }

    /// How many runs are due, active and dead, and how many are ready in each of `queues` (and
    /// `default`) at each priority: one round trip, cheap enough for every heartbeat.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn run_counts(&self, queues: &[String]) -> Result<RunCounts, StoreError> {
        let mut queues: Vec<String> = queues
            .iter()
            .cloned()
            .chain(std::iter::once("default".to_owned()))
            .collect();
        queues.sort();
        queues.dedup();
        let mut pipe = redis::pipe();
        pipe.zcard(self.keys.due())
            .zcard(self.keys.due_runs())
            .zcard(self.keys.active())
            .zcard(self.keys.dead());
        for queue in &queues {
            for priority in Priority::ALL {
                pipe.llen(self.keys.ready_fires(queue, priority));
                pipe.llen(self.keys.ready(queue, priority));
            }
        }
        let answers = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "run_counts")?;
        let mut reply = Reply::new("run_counts", answers);
        let (due_fires, due_runs): (u64, u64) = (reply.next()?, reply.next()?);
        let due = due_fires + due_runs;
        let (active, dead) = (reply.next()?, reply.next()?);
        let mut ready = Vec::with_capacity(queues.len());
        for queue in queues {
            let mut lengths = [0; Priority::ALL.len()];
            for length in &mut lengths {
                // Cron fires and ad-hoc runs of one priority wait in two lists.
                *length = reply.next::<u64>()? + reply.next::<u64>()?;
            }
            ready.push((queue, lengths));
        }
        reply.finish()?;
        Ok(RunCounts {
            due,
            active,
            dead,
            ready,
        })
    }
}
