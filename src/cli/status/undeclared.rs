//! Published jobs that no live replica declares: their declarers crashed, stopped or lost the
//! labels of the job's `where`, and the leader plans them only for the undeclared grace.

use super::published::Published;
use super::replicas::replica_state;
use crate::store::Overview;

/// Whether a replica alive now declares `job` (any definition of it). While Redis `refused`
/// writes, a replica whose heartbeat Redis did not take still counts as live, as `status` says;
/// a live replica whose declarations are not in Redis (expired in a stall) may declare it.
pub(super) fn declared_live(overview: &Overview, job: &str, refused: bool) -> bool {
    overview.replicas.iter().any(|replica| {
        !matches!(
            replica_state(overview, replica, refused),
            "stopped" | "lost"
        ) && replica
            .jobs
            .as_ref()
            .is_none_or(|jobs| jobs.contains_key(job))
    })
}

/// What `status` says of a published job no live replica declares, with the `where` that
/// picks its replicas when it has one.
pub(super) fn warning(job: &Published) -> String {
    let selector = job.selector();
    let placed = if selector.is_empty() {
        String::new()
    } else {
        format!("; where = [{}]", selector.join(", "))
    };
    format!(
        "job {}: no live replica declares it{placed}: its fires wait for one that does, and are \
         skipped (undeclared) once none has for 5 minutes",
        job.name
    )
}
