//! Whether Redis takes writes now, asked without writing: what `status` says of a Redis that
//! refuses them (its replicas' heartbeats cannot be written either).

use redis::RedisError;

use super::{Store, StoreError, refuses_writes, scripts};

/// Why Redis refuses every write now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritesRefused {
    /// Redis's error code: `OOM`, `READONLY`, `MISCONF` or `NOREPLICAS`.
    pub code: String,
    /// Redis's message, as it gave it.
    pub message: String,
    /// For `OOM`: the memory Redis uses and its `maxmemory`, in bytes, when `INFO` is allowed.
    pub memory: Option<(u64, u64)>,
}

impl Store {
    /// Why Redis refuses writes now, if it does: a script that writes nothing is refused before
    /// it runs exactly when a write would be (`probe_writes.lua`). `None` also for a user whom
    /// ACLs refuse the script: whether Redis takes writes is then unknown, and the user's own
    /// rights are not Redis's state.
    ///
    /// # Errors
    /// Redis errors other than a refusal of writes.
    pub async fn writes_refused(&self) -> Result<Option<WritesRefused>, StoreError> {
        const OPERATION: &str = "probe_writes";
        let probed: Result<i64, RedisError> = scripts::PROBE_WRITES
            .key(self.keys.hold())
            .invoke_async(&mut self.connection.without_waiting())
            .await;
        let error = match probed {
            Ok(_) => return Ok(None),
            Err(error) if error.code() == Some("NOPERM") => return Ok(None),
            Err(error) if refuses_writes(&error) => error,
            Err(error) => return Err(StoreError::redis(&self.metrics, OPERATION, error)),
        };
        let code = error.code().unwrap_or("ERR").to_owned();
        let memory = if code == "OOM" {
            self.memory().await
        } else {
            None
        };
        Ok(Some(WritesRefused {
            message: error.detail().unwrap_or_default().trim().to_owned(),
            code,
            memory,
        }))
    }

    /// The memory Redis counts against `maxmemory`, and `maxmemory`; `None` when `INFO` is
    /// refused or says neither.
    async fn memory(&self) -> Option<(u64, u64)> {
        let info: String = self
            .query_keyless(redis::cmd("INFO").arg("memory"))
            .await
            .ok()?;
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|value| value.trim().parse::<u64>().ok())
        };
        // Replication and AOF buffers are not counted against the limit.
        let used =
            field("used_memory")?.saturating_sub(field("mem_not_counted_for_evict").unwrap_or(0));
        Some((used, field("maxmemory")?))
    }
}
