//! Every-replica jobs: which replicas their fires run on, and the runs a gone replica left in
//! its own route.

use std::time::Duration;

use super::During;
use super::{Store, StoreError, millis, scripts};

/// A replica's run of an every-replica fire, skipped because its replica did not come back for
/// it within the misfire threshold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrandedRun {
    /// Its id, `<job>@<fire ms>:<replica>`.
    pub run_id: String,
    /// Its job.
    pub job: String,
    /// The replica it waited for.
    pub replica: String,
}

impl Store {
    /// Records that `replica_id` declares the every-replica jobs `every` now (a target of their
    /// next fires, until it has not said so for `kept`), and no longer declares `dropped`.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn declare_targets(
        &self,
        replica_id: &str,
        every: &[String],
        dropped: &[String],
        kept: Duration,
    ) -> Result<(), StoreError> {
        if every.is_empty() && dropped.is_empty() {
            return Ok(());
        }
        let now = self.now_ms().await?;
        let kept_ms = i64::try_from(millis(kept)).unwrap_or(i64::MAX);
        let mut pipe = redis::pipe();
        pipe.atomic();
        for job in every {
            let key = self.keys.targets(job);
            // Replicas gone for longer are no target any more: dropped here, by every beat.
            pipe.zrembyscore(&key, "-inf", format!("({}", now.saturating_sub(kept_ms)))
                .ignore()
                .zadd(&key, replica_id, now)
                .ignore()
                .pexpire(&key, kept_ms.saturating_mul(2))
                .ignore();
        }
        for job in dropped {
            pipe.zrem(self.keys.targets(job), replica_id).ignore();
        }
        let () = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "declare_targets")?;
        Ok(())
    }

    /// Skips (reason `replica-down`) the runs waiting in the own route of a replica silent for
    /// `threshold` that are due longer ago than that (`skip_stranded_runs.lua`).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn skip_stranded_runs(
        &self,
        threshold: Duration,
    ) -> Result<Vec<StrandedRun>, StoreError> {
        const LIMIT: u64 = 1_000;
        let reply: Vec<String> = scripts::SKIP_STRANDED_RUNS
            .key(self.keys.replicas())
            .key(self.keys.stopped_replicas())
            .key(self.keys.events())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(millis(threshold))
            .arg(self.history_arg())
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(LIMIT)
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "skip_stranded_runs")?;
        Ok(reply
            .chunks_exact(3)
            .map(|run| StrandedRun {
                run_id: run[0].clone(),
                job: run[1].clone(),
                replica: run[2].clone(),
            })
            .collect())
    }
}
