//! What the replicas' heartbeats say of them: alive, stopped, lost or unknown while Redis
//! refuses writes, the queues they serve and the labels they carry, and which declare a job.

use std::collections::HashMap;

use crate::store::keys::route_replica;
use crate::store::{Overview, ReplicaInfo};

use super::refused;

/// A replica silent for this many heartbeat periods is stale.
const STALE_PERIODS: i64 = 3;

/// The queues a replica's heartbeat says its workers claim from.
pub(super) fn served_queues(replica: &ReplicaInfo) -> Vec<&str> {
    heartbeat_list(replica, "queues")
}

/// The labels a replica's heartbeat says it carries (`host`, `replica` and those given with
/// `--label`), which jobs' `where` match; its queues are its `queue=` labels, shown apart.
pub(super) fn labels(replica: &ReplicaInfo) -> Vec<&str> {
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

/// How many live replicas serve `queue`.
pub(super) fn served_by(overview: &Overview, queue: &str, refused: bool) -> usize {
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
pub(in crate::cli) fn replica_state(
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
        .and_then(|period| period.parse::<i64>().ok());
    silent_too_long(overview.now_ms, heartbeat_ms, period)
}

/// Whether a replica that beats every `period_ms` (2 s when it does not say) and last beat
/// at `heartbeat_ms` is stale at `now_ms`: lost, unless it stopped cleanly.
pub(crate) fn silent_too_long(now_ms: i64, heartbeat_ms: i64, period_ms: Option<i64>) -> bool {
    now_ms - heartbeat_ms > STALE_PERIODS * period_ms.unwrap_or(2_000)
}

/// The replicas, by id, that declare `job` (in whatever definition) and have not gone away.
pub(super) fn declared_by(overview: &Overview, job: &str) -> Vec<String> {
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
