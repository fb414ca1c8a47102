//! What the reaper does about damaged data: job slots that only a deadline frees, entries of the
//! active set that are no run, and records that no redcron script wrote as they are, which
//! would otherwise never expire.

use tracing::{info, warn};

use super::Reaper;
use crate::store::StoreError;

impl Reaper {
    /// Frees the job slots whose deadline passed, or that no run of their job holds, for the
    /// runs waiting for them: a claim or an end of a run of the job would, but none may come.
    /// Then drops the expired entries of the active set that are no run id, which would stop
    /// the reaping of the leases behind them, and gives the damaged records of one page of the
    /// namespace's keys an expiry: a round of pages goes over every key, each tick costing the
    /// same.
    pub(super) async fn sweep_damage(&mut self) -> Result<(), StoreError> {
        let handed = self.store.free_expired_slots().await?;
        if handed > 0 {
            info!(
                runs = handed,
                "job slots freed at their deadline: their waiting runs go on"
            );
        }
        let dropped = self.store.drop_damaged_leases(self.config.batch).await?;
        if dropped > 0 {
            warn!(
                entries = dropped,
                "entries of the active runs that are no run id (not UTF-8) dropped: they hold no \
                 lease"
            );
        }
        let (next, found) = self.store.expire_damaged_keys(self.scan_cursor).await?;
        self.scan_cursor = next;
        if found > 0 {
            warn!(
                keys = found,
                "run or workflow records without the fields redcron writes (written by something \
                 else, or damaged) expire after the run retention; status counts them"
            );
        }
        Ok(())
    }
}
