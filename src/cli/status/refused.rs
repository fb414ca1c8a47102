//! What `status` says of a Redis that refuses writes: why, and what that means for the
//! replicas, whose heartbeats it refuses too.

use serde_json::{Value, json};

use crate::store::WritesRefused;

/// The state of a replica whose heartbeat is stale while Redis refuses writes: it could not
/// write one, so whether it still runs is not known.
pub(super) const UNKNOWN: &str = "unknown";

/// The paragraph `status` opens with while Redis refuses writes.
pub(super) fn paragraph(refused: &WritesRefused) -> String {
    let memory = refused.memory.map_or_else(String::new, |(used, max)| {
        format!(" It uses {}, maxmemory is {}.", mib(used), mib(max))
    });
    format!(
        "redis refuses writes: {} {}{memory}\n  nothing is planned, enqueued or claimed, and no \
         heartbeat can be written: a replica whose heartbeat is stale is shown {UNKNOWN}, not \
         lost; runs under way keep their leases and record their outcomes. {}",
        refused.code,
        refused.message,
        remedy(&refused.code)
    )
}

/// What an operator does about each refusal.
fn remedy(code: &str) -> &'static str {
    match code {
        "OOM" => "Free memory or raise the limit (CONFIG SET maxmemory).",
        "READONLY" => "--redis names a replica: name the primary.",
        "MISCONF" => "Redis cannot write its snapshot: see its log.",
        "NOREPLICAS" => "Too few replicas are connected for min-replicas-to-write.",
        _ => "See Redis's log.",
    }
}

/// The `writes_refused` member of `status --json`.
pub(super) fn json(refused: Option<&WritesRefused>) -> Value {
    refused.map_or(Value::Null, |refused| {
        json!({
            "code": refused.code,
            "message": refused.message,
            "used_memory": refused.memory.map(|(used, _)| used),
            "maxmemory": refused.memory.map(|(_, max)| max),
        })
    })
}

/// The error `status` exits with once it has shown the rest.
pub(super) fn error(refused: &WritesRefused) -> String {
    format!(
        "redis refuses writes ({}): {}",
        refused.code, refused.message
    )
}

/// Bytes as people read them.
fn mib(bytes: u64) -> String {
    #[allow(clippy::cast_precision_loss)] // Shown to one decimal.
    let mib = bytes as f64 / (1024.0 * 1024.0);
    format!("{mib:.1} MiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_of_memory_redis_is_explained_with_its_figures() {
        let refused = WritesRefused {
            code: "OOM".to_owned(),
            message: "command not allowed when used memory > 'maxmemory'.".to_owned(),
            memory: Some((5 * 1024 * 1024 + 104_858, 4 * 1024 * 1024)),
        };
        let said = paragraph(&refused);
        assert!(said.contains("OOM command not allowed when used memory > 'maxmemory'. It uses 5.1 MiB, maxmemory is 4.0 MiB."), "{said}");
        assert!(said.contains("CONFIG SET maxmemory"), "{said}");
        assert_eq!(json(Some(&refused))["maxmemory"], 4 * 1024 * 1024);
        assert_eq!(json(None), Value::Null);
    }
}
