//! What `status` says of the archive: where the namespace archives, the records not archived
//! yet and how old the oldest is (loudly once that is as late as the alert in contrib/), the
//! parts the archive refuses the live exporters (loudly, from the first refusal), and the live
//! replicas whose outcomes do not all reach it.

use serde_json::{Value, json};

use super::replicas::replica_state;
use crate::cli::times::{ago, duration};
use crate::client::{Client, ClientError};
use crate::store::{ArchiveBacklog, ArchiveFailure, ArchiveRole, Overview, ReplicaInfo};

/// How old the oldest record not archived may be before `status` says the archive is behind:
/// the `for` of `RedcronArchiveBehind` in contrib/prometheus-alerts.yml.
const BEHIND_MS: i64 = 15 * 60 * 1000;

/// The archive of a namespace that archives, as `status` read it.
pub(crate) struct ArchiveStatus {
    /// Where it archives (`{ns}:archive-to`).
    url: String,
    /// The records not archived yet.
    backlog: ArchiveBacklog,
    /// The last part the archive refused each exporter that has written none since.
    failures: Vec<ArchiveFailure>,
}

/// Reads the archive's state: `None` for a namespace that does not archive.
///
/// # Errors
/// Redis errors.
pub(super) async fn read(client: &Client) -> Result<Option<ArchiveStatus>, ClientError> {
    let store = client.store();
    let Some(url) = store.archive_marked().await? else {
        return Ok(None);
    };
    Ok(Some(ArchiveStatus {
        url,
        backlog: store.archive_backlog().await?,
        failures: store.archive_failures().await?,
    }))
}

impl ArchiveStatus {
    /// How old the oldest record not archived is, 0 when none waits.
    fn lag_ms(&self, now_ms: i64) -> i64 {
        self.backlog
            .oldest_ms
            .map_or(0, |oldest| (now_ms - oldest).max(0))
    }
}

impl ArchiveStatus {
    /// The refusals of the live replicas that export: one recorded by an exporter that has
    /// stopped since says nothing of the archive now.
    fn failing<'a>(&'a self, overview: &Overview, refused: bool) -> Vec<&'a ArchiveFailure> {
        let exporting = live_with(overview, refused, ArchiveRole::Exports);
        self.failures
            .iter()
            .filter(|failure| exporting.contains(&failure.replica))
            .collect()
    }
}

/// The live replicas whose heartbeat reports `role` (`archive` in their record).
fn live_with(overview: &Overview, refused: bool, role: ArchiveRole) -> Vec<String> {
    let says = |replica: &ReplicaInfo| {
        replica.info.get("archive").map_or("", String::as_str) == role.as_str()
    };
    overview
        .replicas
        .iter()
        .filter(|replica| replica_state(overview, replica, refused) == "alive" && says(replica))
        .map(|replica| replica.id.clone())
        .collect()
}

/// The `archive` member of `status --json`: null for a namespace that does not archive.
pub(super) fn json(archive: Option<&ArchiveStatus>, overview: &Overview, refused: bool) -> Value {
    let Some(archive) = archive else {
        return Value::Null;
    };
    let lag_ms = archive.lag_ms(overview.now_ms);
    json!({
        "url": archive.url,
        "records": archive.backlog.records,
        "oldest_ms": archive.backlog.oldest_ms,
        "lag_ms": lag_ms,
        "behind": lag_ms >= BEHIND_MS,
        "failing": archive
            .failing(overview, refused)
            .iter()
            .map(|failure| json!({
                "replica": failure.replica,
                "part": failure.part,
                "reason": failure.reason,
                "at_ms": failure.at_ms,
            }))
            .collect::<Vec<_>>(),
        "exporting": live_with(overview, refused, ArchiveRole::Exports),
        "recording": live_with(overview, refused, ArchiveRole::Records),
        "not_recording": live_with(overview, refused, ArchiveRole::None),
    })
}

/// The lines `status` shows of the archive: none for a namespace that does not archive.
pub(super) fn lines(
    archive: Option<&ArchiveStatus>,
    overview: &Overview,
    refused: bool,
) -> Vec<String> {
    let Some(archive) = archive else {
        return Vec::new();
    };
    let lag_ms = archive.lag_ms(overview.now_ms);
    let exporting = live_with(overview, refused, ArchiveRole::Exports);
    let waiting = match archive.backlog.records {
        0 => "nothing waits".to_owned(),
        records => format!(
            "{records} record(s) wait, the oldest {} old",
            duration(lag_ms)
        ),
    };
    let by = if exporting.is_empty() {
        "no live replica exports".to_owned()
    } else {
        format!("exported by {}", exporting.join(", "))
    };
    let mut lines = vec![format!("archive: {}: {waiting}; {by}", archive.url)];
    for failure in archive.failing(overview, refused) {
        lines.push(format!(
            "ARCHIVE FAILING: {}: {} (replica {}, {}): the part stays in Redis and is written \
             again; the replica's log says why (\"the archive refused a part\"), and \
             docs/operations.md, \"When the archive is down\", what to do",
            failure.part,
            failure.reason,
            failure.replica,
            ago(overview.now_ms, failure.at_ms),
        ));
    }
    if lag_ms >= BEHIND_MS {
        lines.push(format!(
            "ARCHIVE BEHIND: the oldest outcome not archived was recorded {} ago. Redis keeps \
             every outcome and finished run until the archive takes it, so its memory grows: \
             see the exporters' logs (\"the archive refused a part\") and docs/operations.md, \
             \"When the archive is down\"",
            duration(lag_ms)
        ));
    }
    if exporting.is_empty() && !refused {
        lines.push(
            "ARCHIVE NOT EXPORTED: no live replica was started with --archive, so no record \
             reaches the archive until one is"
                .to_owned(),
        );
    }
    for id in live_with(overview, refused, ArchiveRole::Records) {
        lines.push(format!(
            "replica {id} was started without --archive: the replicas that export archive \
             its outcomes since its heartbeat found the namespace archiving, not those it \
             recorded before; restart it with --archive {}",
            archive.url
        ));
    }
    for id in live_with(overview, refused, ArchiveRole::None) {
        lines.push(format!(
            "REPLICA NOT ARCHIVING: {id} writes no archive record for its outcomes (a version \
             that does not say, or it has not beaten since the namespace began archiving): \
             restart it with --archive {}",
            archive.url
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A namespace at `now_ms` whose live replicas report these roles.
    fn overview_of(now_ms: i64, roles: &[(&str, &str)]) -> Overview {
        let replicas = roles
            .iter()
            .map(|(id, role)| ReplicaInfo {
                id: (*id).to_owned(),
                heartbeat_ms: now_ms,
                info: HashMap::from([("archive".to_owned(), (*role).to_owned())]),
                jobs: None,
                stopped_ms: None,
            })
            .collect();
        Overview {
            now_ms,
            ..super::super::tests::overview_of(replicas)
        }
    }

    #[test]
    fn an_archive_behind_or_not_exported_and_a_replica_not_archiving_are_said_loudly() {
        let now_ms = 1_800_000_000_000;
        let archive = ArchiveStatus {
            url: "file:///var/lib/redcron/archive".to_owned(),
            backlog: ArchiveBacklog {
                records: 42,
                oldest_ms: Some(now_ms - 20 * 60 * 1000),
            },
            failures: vec![
                ArchiveFailure {
                    replica: "r1".to_owned(),
                    part: "runs/v1/date=2027-01-15/hour=08/part-1-0-2-0.ndjson".to_owned(),
                    reason: "refused by the store".to_owned(),
                    at_ms: now_ms - 3_000,
                },
                // An exporter that has stopped since: nothing of the archive now.
                ArchiveFailure {
                    replica: "gone".to_owned(),
                    part: "runs/v1/date=2027-01-15/hour=07/part-0-0-1-0.ndjson".to_owned(),
                    reason: "store unreachable".to_owned(),
                    at_ms: now_ms - 60_000,
                },
            ],
        };
        let overview = overview_of(now_ms, &[("r1", "exports"), ("r2", "records"), ("r3", "")]);
        let said = lines(Some(&archive), &overview, false).join("\n");
        assert!(
            said.starts_with("archive: file:///var/lib/redcron/archive: 42 record(s) wait"),
            "{said}"
        );
        assert!(said.contains("exported by r1"), "{said}");
        assert!(said.contains("ARCHIVE BEHIND"), "{said}");
        assert!(
            said.contains("replica r2 was started without --archive"),
            "{said}"
        );
        assert!(said.contains("REPLICA NOT ARCHIVING: r3"), "{said}");
        assert!(!said.contains("ARCHIVE NOT EXPORTED"), "{said}");
        assert!(
            said.contains(
                "ARCHIVE FAILING: runs/v1/date=2027-01-15/hour=08/part-1-0-2-0.ndjson: refused \
                 by the store (replica r1, "
            ),
            "{said}"
        );
        assert!(!said.contains("gone"), "{said}");
        let document = json(Some(&archive), &overview, false);
        assert_eq!(document["lag_ms"], 20 * 60 * 1000);
        assert_eq!(document["behind"], true);
        assert_eq!(document["recording"], serde_json::json!(["r2"]));
        assert_eq!(document["not_recording"], serde_json::json!(["r3"]));
        assert_eq!(document["failing"][0]["reason"], "refused by the store");
        assert_eq!(document["failing"].as_array().map(Vec::len), Some(1));

        // Caught up, and no replica exports: that alone is said.
        let idle = ArchiveStatus {
            backlog: ArchiveBacklog::default(),
            failures: Vec::new(),
            ..archive
        };
        let said = lines(
            Some(&idle),
            &overview_of(now_ms, &[("r2", "records")]),
            false,
        );
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(
            said[0].ends_with("nothing waits; no live replica exports"),
            "{said:?}"
        );
        assert!(said[1].starts_with("ARCHIVE NOT EXPORTED"), "{said:?}");
        assert_eq!(
            json(Some(&idle), &overview_of(now_ms, &[]), false)["behind"],
            false
        );
        assert!(lines(None, &overview, false).is_empty());
        assert_eq!(json(None, &overview, false), Value::Null);
    }
}
