//! The dead letters: listed, re-driven and purged, and the runs buried there (or skipped) when no
//! live replica declares their job (`bury_undeclared_runs.lua`).

use std::time::Duration;

use redis::{AsyncCommands, Value};

use super::During;
use super::reply::reply_error;
use super::{Entry, Store, StoreError, millis, scripts};

/// What [`Store::redrive_run`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redrive {
    /// The run is due again now.
    Redriven,
    /// It is not in the dead letters: it never died, was re-driven already, or was purged.
    NotDead,
    /// It stays dead: its job, named, is paused, and would only skip it.
    JobPaused(String),
    /// It stays dead: its job, named, has no published definition (no live replica has
    /// declared it for the undeclared grace), so the run would die as undeclared again.
    JobUnknown(String),
}

impl Store {
    /// Up to `limit` dead runs, oldest death first: entry (an unreadable one too) and when it
    /// died, ms.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn dead_runs(&self, limit: usize) -> Result<Vec<(Entry, i64)>, StoreError> {
        let end = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        self.connection
            .clone()
            .zrange_withscores(self.keys.dead(), 0, end)
            .await
            .during(&self.metrics, "dead_runs")
    }

    /// Up to `limit` dead runs, newest death first: entry (an unreadable one too) and when it
    /// died, ms.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn newest_dead_runs(&self, limit: usize) -> Result<Vec<(Entry, i64)>, StoreError> {
        let end = isize::try_from(limit).unwrap_or(isize::MAX) - 1;
        self.connection
            .clone()
            .zrevrange_withscores(self.keys.dead(), 0, end)
            .await
            .during(&self.metrics, "newest_dead_runs")
    }

    /// When the entry `entry` of the dead letters died, if it is there (whatever its record
    /// says, an unreadable one too).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn died_at(&self, entry: &Entry) -> Result<Option<i64>, StoreError> {
        self.connection
            .clone()
            .zscore(self.keys.dead(), entry.as_bytes())
            .await
            .during(&self.metrics, "died_at")
    }

    /// Takes a run out of the dead letters and makes it due now, attempts reset, unless its job
    /// is paused.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn redrive_run(&self, run_id: &str) -> Result<Redrive, StoreError> {
        self.redrive_run_by(run_id, None).await
    }

    /// As [`Store::redrive_run`], recording `actor` (who asked: a console's token or user) with
    /// the event, when given.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn redrive_run_by(
        &self,
        run_id: &str,
        actor: Option<&str>,
    ) -> Result<Redrive, StoreError> {
        let answer: Value = scripts::REDRIVE_RUN
            .key(self.keys.dead())
            .key(self.keys.due())
            .key(self.keys.events())
            .key(self.keys.wake_promoter())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(run_id)
            .arg(self.settings.events_maxlen)
            .arg(self.now_arg())
            .arg(actor.unwrap_or_default())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "redrive_run")?;
        match answer {
            Value::Int(1) => Ok(Redrive::Redriven),
            Value::Int(0) => Ok(Redrive::NotDead),
            Value::Array(reply) => match reply.as_slice() {
                [Value::BulkString(reason), Value::BulkString(job)] => {
                    let job = String::from_utf8_lossy(job).into_owned();
                    match reason.as_slice() {
                        b"paused" => Ok(Redrive::JobPaused(job)),
                        b"unknown" => Ok(Redrive::JobUnknown(job)),
                        _ => Err(reply_error(
                            "redrive_run",
                            format!("unexpected reason {reason:?}"),
                        )),
                    }
                }
                _ => Err(reply_error(
                    "redrive_run",
                    format!("unexpected reply {reply:?}"),
                )),
            },
            other => Err(reply_error(
                "redrive_run",
                format!("unexpected reply {other:?}"),
            )),
        }
    }

    /// Deletes dead runs that died at or before `cutoff_ms` (all of them for `None`); returns how
    /// many.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn purge_dead(&self, cutoff_ms: Option<i64>) -> Result<u64, StoreError> {
        self.purge_dead_by(cutoff_ms, None).await
    }

    /// As [`Store::purge_dead`], recording the purge (action `purge`, a call per thousand runs)
    /// in the events stream with `actor`, who asked, when given.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn purge_dead_by(
        &self,
        cutoff_ms: Option<i64>,
        actor: Option<&str>,
    ) -> Result<u64, StoreError> {
        const BATCH: u64 = 1_000;
        let cutoff = cutoff_ms.map_or_else(|| "+inf".to_owned(), |cutoff| cutoff.to_string());
        let mut purged = 0;
        loop {
            let deleted: u64 = scripts::PURGE_DEAD
                .key(self.keys.dead())
                .key(self.keys.hold())
                .key(self.keys.events())
                .arg(self.keys.prefix())
                .arg(&cutoff)
                .arg(BATCH)
                .arg(self.settings.events_maxlen)
                .arg(actor.unwrap_or_default())
                .invoke_async(&mut self.connection.clone())
                .await
                .during(&self.metrics, "purge_dead")?;
            purged += deleted;
            if deleted < BATCH {
                return Ok(purged);
            }
        }
    }

    /// Ends (reason `undeclared`) the runs left for a replica that declares their job, once no
    /// replica whose last heartbeat is at most `live_for` old has declared the job for `grace`:
    /// a cron fire never started is skipped, any other run goes to the dead letters. The fires
    /// of the `withdrawn` jobs (those a replica removed from its files, and no live replica
    /// declares) are skipped at once; their other runs wait out the grace. Returns each job
    /// with how many of its runs were ended.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for an answer the script does not give.
    pub async fn bury_undeclared_runs(
        &self,
        grace: Duration,
        live_for: Duration,
        withdrawn: &[&str],
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let buried: Vec<(String, u64)> = scripts::BURY_UNDECLARED_RUNS
            .key(self.keys.undeclared_jobs())
            .key(self.keys.replicas())
            .key(self.keys.dead())
            .key(self.keys.events())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(millis(grace))
            .arg(millis(live_for))
            .arg(self.history_arg())
            .arg(self.now_arg())
            .arg(millis(self.settings.retention))
            .arg(withdrawn)
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "bury_undeclared_runs")?;
        Ok(buried)
    }
}
