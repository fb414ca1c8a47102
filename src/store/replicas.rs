//! Heartbeats: which replicas are alive, and which process beats under each replica id.

use std::time::Duration;

use redis::AsyncCommands;

use super::During;
use super::damage::Entry;
use super::damaged_names::{NameIndex, readable_names};
use super::{Store, StoreError, millis};

/// The replica of a worker id, `<replica id>/<slot>`: who ran an attempt, as its events and
/// run record name the worker. `None` for what is no worker id.
pub fn replica_of_worker(worker: &str) -> Option<&str> {
    worker.rsplit_once('/').map(|(replica, _)| replica)
}

/// The replica a run of `job` belongs to: the one that ran its attempt (`worker`, as its event
/// or record names it), else, for a replica's run of an every-replica fire, the replica it was
/// meant for, so that a run skipped before that replica claimed it (`replica-down`,
/// `undeclared`, `missed`) is still that replica's. `None` for a run of one replica's choosing
/// that none claimed.
pub fn replica_of<'a>(job: &str, run_id: &'a str, worker: Option<&'a str>) -> Option<&'a str> {
    worker
        .and_then(replica_of_worker)
        .or_else(|| super::keys::replica_of_run(job, run_id))
}

/// What one heartbeat found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beat {
    /// The replica's declarations were still in Redis (otherwise: publish them again).
    pub declarations_kept: bool,
    /// The `instance` the replica's record named before this heartbeat: another process's
    /// means two processes beat under one replica id.
    pub previous_instance: Option<String>,
    /// How much longer the namespace is held (`redcron hold`), when it is.
    pub held_for: Option<Duration>,
    /// What names this copy of the namespace's data (`{ns}:origin`): written by this
    /// heartbeat when it was missing.
    pub origin: String,
    /// Where the namespace archives (`{ns}:archive-to`), when it does: read by every beat, so
    /// that a replica started before the namespace archived finds out within a period.
    pub archive_to: Option<String>,
}

/// The process a replica id's heartbeats come from, as [`Store::replica_instance`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInstance {
    /// What names the process: host, pid and start time.
    pub instance: String,
    /// Its host.
    pub host: String,
    /// Its pid.
    pub pid: String,
    /// Its last heartbeat, ms on Redis's clock.
    pub beat_ms: i64,
    /// How often it beats, ms, as it reports (`heartbeat_period_ms`); `None` from a replica
    /// that does not say.
    pub period_ms: Option<i64>,
    /// Redis's clock when this was read, ms.
    pub now_ms: i64,
}

impl Store {
    /// Records this replica as alive: its heartbeat time (Redis's clock) and what it reports of
    /// itself (`info`, which names this process in its `instance` field), which expires after
    /// `ttl` without a new heartbeat; its declarations are kept as long. Says whether its
    /// declarations were still there to keep (they expire while Redis stalls, and are lost with
    /// an older copy: publish them again) and which process had beaten under this id before.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn heartbeat(
        &self,
        replica_id: &str,
        info: &[(&str, String)],
        ttl: Duration,
    ) -> Result<Beat, StoreError> {
        let now = self.now_ms().await?;
        let replica = self.keys.replica(replica_id);
        let ttl_ms = i64::try_from(millis(ttl)).unwrap_or(i64::MAX);
        let origin = super::new_run_id();
        let (previous_instance, declarations_kept, held_ms, found_origin, archive_to): (
            Option<String>,
            bool,
            i64,
            Option<String>,
            Option<String>,
        ) = redis::pipe()
            .atomic()
            .hget(&replica, "instance")
            .zadd(self.keys.replicas(), replica_id, now)
            .ignore()
            .zrem(self.keys.stopped_replicas(), replica_id)
            .ignore()
            .hdel(&replica, "stopped_ms")
            .ignore()
            .hset_multiple(&replica, info)
            .ignore()
            .pexpire(&replica, ttl_ms)
            .ignore()
            .pexpire(self.keys.replica_jobs(replica_id), ttl_ms)
            .pttl(self.keys.hold())
            .get(self.keys.origin())
            .set_options(
                self.keys.origin(),
                &origin,
                redis::SetOptions::default().conditional_set(redis::ExistenceCheck::NX),
            )
            .ignore()
            .get(self.keys.archive_marker())
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "heartbeat")?;
        Ok(Beat {
            declarations_kept,
            previous_instance,
            held_for: u64::try_from(held_ms).ok().map(Duration::from_millis),
            origin: found_origin.unwrap_or(origin),
            archive_to,
        })
    }

    /// The process that last beat as `replica_id` (its `instance`, host and pid) and when, on
    /// Redis's clock, with Redis's time now; `None` when no replica beats under that id.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn replica_instance(
        &self,
        replica_id: &str,
    ) -> Result<Option<ReplicaInstance>, StoreError> {
        let now_ms = self.now_ms().await?;
        let (fields, beat_ms): (Vec<Option<String>>, Option<i64>) = redis::pipe()
            .hmget(
                self.keys.replica(replica_id),
                &["instance", "host", "pid", "heartbeat_period_ms"],
            )
            .zscore(self.keys.replicas(), replica_id)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "replica_instance")?;
        let mut fields = fields.into_iter();
        let (Some(Some(instance)), Some(beat_ms)) = (fields.next(), beat_ms) else {
            return Ok(None);
        };
        Ok(Some(ReplicaInstance {
            instance,
            host: fields.next().flatten().unwrap_or_default(),
            pid: fields.next().flatten().unwrap_or_default(),
            period_ms: fields
                .next()
                .flatten()
                .and_then(|period| period.parse().ok()),
            beat_ms,
            now_ms,
        }))
    }

    /// Every replica id the namespace knows, sorted: those beating or lost (their last
    /// heartbeat stays) and those stopped cleanly within a day. What a `--replica` filter that
    /// found nothing is checked against.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn known_replicas(&self) -> Result<Vec<String>, StoreError> {
        let (beating, stopped): (Vec<Entry>, Vec<Entry>) = redis::pipe()
            .zrange(self.keys.replicas(), 0, -1)
            .zrange(self.keys.stopped_replicas(), 0, -1)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "known_replicas")?;
        // A name that is not UTF-8 is no replica: the reapers remove it.
        let damaged = &mut Vec::new();
        let known: std::collections::BTreeSet<String> =
            readable_names(NameIndex::Replicas, beating, damaged)
                .into_iter()
                .chain(readable_names(NameIndex::StoppedReplicas, stopped, damaged))
                .collect();
        Ok(known.into_iter().collect())
    }

    /// The scripts that fail on a damaged key, as the replicas reported them in their last
    /// heartbeat: (replica id, `<script> fails: <what Redis said>`), by replica id. Read apart from
    /// [`Store::overview`], which a damaged key can fail too.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn failing_scripts(&self) -> Result<Vec<(String, String)>, StoreError> {
        let replicas: Vec<Entry> = self
            .connection
            .clone()
            .zrange(self.keys.replicas(), 0, -1)
            .await
            .during(&self.metrics, "failing_scripts")?;
        let replicas = readable_names(NameIndex::Replicas, replicas, &mut Vec::new());
        let mut pipe = redis::pipe();
        for replica in &replicas {
            pipe.hget(self.keys.replica(replica), "failing_script");
        }
        let reports: Vec<Option<String>> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "failing_scripts")?;
        Ok(replicas
            .into_iter()
            .zip(reports)
            .filter_map(|(replica, report)| Some((replica, report.filter(|r| !r.is_empty())?)))
            .collect())
    }

    /// The host `replica_id` last said it runs on; `None` when its hash is gone (a day after it
    /// stopped, or its heartbeats long expired).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn replica_host(&self, replica_id: &str) -> Result<Option<String>, StoreError> {
        self.connection
            .clone()
            .hget(self.keys.replica(replica_id), "host")
            .await
            .during(&self.metrics, "replica_host")
    }
}
