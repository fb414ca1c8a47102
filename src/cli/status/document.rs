//! The status as one JSON document: what `status --json` prints and the web API answers, and
//! its summary without the jobs, which the console's overview shows.

use serde_json::{Value, json};

use super::published::published;
use super::read::StatusRead;
use super::replicas::{declared_by, labels, replica_state, served_by, served_queues};
use super::{archive, paused_jobs, refused, running_by_job};
use crate::cli::times::rfc3339;
use crate::cli::typed_fields;

impl StatusRead {
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
            "redis_settings": self.redis_settings,
            "replicas": replicas,
            "due": self.overview.counts.due,
            "active": self.overview.counts.active,
            "dead": self.overview.counts.dead,
            "notices_owed": self.owed_notices,
            "damaged_keys": { "count": self.damaged.count, "keys": self.damaged.keys },
            "definition_hashes_damaged": self.overview.definition_hashes_damaged,
            "damaged_names": self.overview.damaged_names.iter().map(ToString::to_string).collect::<Vec<_>>(),
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
