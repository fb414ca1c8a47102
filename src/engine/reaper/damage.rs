//! What the reaper does about damaged data: job slots that only a deadline frees.

use tracing::info;

use super::Reaper;
use crate::store::StoreError;

impl Reaper {
    /// Frees the job slots whose deadline passed, or that no run of their job holds, for the
    /// runs waiting for them: a claim or an end of a run of the job would, but none may come.
    pub(super) async fn sweep_damage(&mut self) -> Result<(), StoreError> {
        let handed = self.store.free_expired_slots().await?;
        if handed > 0 {
            info!(
                runs = handed,
                "job slots freed at their deadline: their waiting runs go on"
            );
        }
        Ok(())
    }
}
