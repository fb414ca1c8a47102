//! What the reaper does about the runs of every-replica fires whose replica is gone.

use std::collections::HashSet;

use tracing::warn;

use super::Reaper;
use crate::engine::record_skips;
use crate::store::StoreError;

impl Reaper {
    /// Skips the runs that wait in the own route of a replica silent for the misfire threshold
    /// and are due longer ago than that: no other replica may run them, and one stopped for
    /// good must not keep them waiting for ever.
    pub(super) async fn skip_stranded(&mut self) -> Result<(), StoreError> {
        let skipped = self
            .store
            .skip_stranded_runs(self.config.misfire_threshold)
            .await?;
        for run in &skipped {
            warn!(
                run = run.run_id,
                job = run.job,
                replica = run.replica,
                threshold = %humantime::format_duration(self.config.misfire_threshold),
                "skipped (replica-down): its replica did not come back for it within the misfire \
                 threshold"
            );
        }
        if !skipped.is_empty() {
            let skips: Vec<(String, String)> = skipped
                .iter()
                .map(|run| (run.job.clone(), "replica-down".to_owned()))
                .collect();
            let jobs = self.jobs.as_ref().map(|jobs| jobs.borrow().clone());
            let declared: HashSet<&str> = jobs
                .iter()
                .flat_map(|jobs| jobs.iter().map(|job| job.name.as_str()))
                .collect();
            record_skips(self.store.metrics(), &skips, |name| declared.contains(name));
        }
        Ok(())
    }
}
