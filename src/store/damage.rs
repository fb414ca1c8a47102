//! Damaged data: the job slots that no run of the job holds, freed so that they do not block
//! the job.

use super::During;
use super::{Store, StoreError, scripts};

impl Store {
    /// Hands the slots of every published job whose deadline passed, or that no run of the job
    /// holds, to the job's waiting runs: what frees them when no run of the job comes or ends
    /// to do it. Returns how many entries left the waiting lists.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn free_expired_slots(&self) -> Result<u64, StoreError> {
        scripts::FREE_EXPIRED_SLOTS
            .key(self.keys.defs())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "free_expired_slots")
    }
}
