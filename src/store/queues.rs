//! The queues that hold ready runs, found in Redis rather than in the published definitions.

use super::{Store, StoreError};

impl Store {
    /// Every queue with a ready list in Redis, sorted: those no published job names too (a
    /// run enqueued to another queue, a job moved to another queue by a reload while its runs
    /// waited), so that what lists the ready runs by the definitions' queues can show them as
    /// well. A walk over the namespace's keys: for commands an operator runs, not for a loop.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn ready_queues(&self) -> Result<Vec<String>, StoreError> {
        let mut queues = Vec::new();
        let mut cursor = 0u64;
        loop {
            // A key that is not UTF-8 names no queue a claim reads.
            let (next, keys) = self.scan_page("ready", cursor, "ready_queues").await?;
            queues.extend(keys.iter().filter_map(|key| {
                let key = std::str::from_utf8(key).ok()?;
                Some(self.keys.queue_of_ready_list(key)?.to_owned())
            }));
            if next == 0 {
                queues.sort();
                queues.dedup();
                return Ok(queues);
            }
            cursor = next;
        }
    }
}
