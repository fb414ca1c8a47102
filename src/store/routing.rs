//! Routing: which live replicas serve which queue, and the ready runs of a queue none serves
//! moved to its fallback (`[queues.<name>]`).

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;

use super::During;
use super::damage::Entry;
use super::damaged_names::{NameIndex, readable_names};
use super::{Store, StoreError, millis, scripts};
use crate::schedule::Priority;

impl Store {
    /// How many live replicas serve each queue, by the queues their heartbeats report: those
    /// whose last heartbeat is at most `within` old.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn queue_servers(
        &self,
        within: Duration,
    ) -> Result<HashMap<String, u64>, StoreError> {
        let since = self.now_ms().await? - i64::try_from(millis(within)).unwrap_or(i64::MAX);
        let mut connection = self.connection.clone();
        let live: Vec<Entry> = connection
            .zrangebyscore(self.keys.replicas(), since, "+inf")
            .await
            .during(&self.metrics, "queue_servers")?;
        // A name that is not UTF-8 is no replica: the reapers remove it.
        let live = readable_names(NameIndex::Replicas, live, &mut Vec::new());
        let mut served = HashMap::new();
        // An empty pipeline is an empty command, which Redis refuses.
        if live.is_empty() {
            return Ok(served);
        }
        let mut pipe = redis::pipe();
        for replica in &live {
            pipe.hget(self.keys.replica(replica), "queues");
        }
        let queues: Vec<Option<String>> = pipe
            .query_async(&mut connection)
            .await
            .during(&self.metrics, "queue_servers")?;
        for queue in queues.iter().flatten().flat_map(|list| list.split(',')) {
            if !queue.is_empty() {
                *served.entry(queue.to_owned()).or_default() += 1;
            }
        }
        Ok(served)
    }

    /// Moves every ready run of `queue` to `fallback`, oldest first within each priority, and
    /// wakes the fallback's idle workers; returns how many moved.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn move_ready_runs(&self, queue: &str, fallback: &str) -> Result<u64, StoreError> {
        const BATCH: u64 = 1_000;
        let lists = |queue: &str| {
            Priority::ALL
                .iter()
                .flat_map(|&priority| {
                    [
                        self.keys.ready_fires(queue, priority),
                        self.keys.ready(queue, priority),
                    ]
                })
                .collect::<Vec<_>>()
        };
        let mut moved = 0;
        loop {
            let mut invocation = scripts::MOVE_READY_RUNS.prepare_invoke();
            invocation
                .key(lists(queue))
                .key(lists(fallback))
                .key(self.keys.wake(fallback))
                .key(self.keys.hold())
                .arg(self.keys.prefix())
                .arg(fallback)
                .arg(BATCH);
            let batch: u64 = invocation
                .invoke_async(&mut self.connection.clone())
                .await
                .during(&self.metrics, "move_ready_runs")?;
            moved += batch;
            if batch < BATCH {
                return Ok(moved);
            }
        }
    }
}
