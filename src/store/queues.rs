//! The queues that hold ready runs, found in Redis rather than in the published definitions: an
//! index every script that makes a run ready adds to, kept whole and small by the reapers' walk.

use redis::AsyncCommands;

use super::damage::Entry;
use super::damaged_names::{NameIndex, readable_names};
use super::reply::wrong_type;
use super::{During, RecordPage, Store, StoreError, scripts};

impl Store {
    /// Every queue (or replica's own route) whose ready lists may hold runs, sorted: those no
    /// published job names too (a job moved to another queue by a reload while its runs waited,
    /// a queue whose replicas are gone), so that what lists the ready runs by the definitions'
    /// queues can show them as well. Read from the index (`ready-queues`), two commands however
    /// many keys the namespace holds; while no reaper's walk has found the index whole yet (a
    /// namespace written by a version before it), a walk over the namespace's keys as well, which
    /// costs a `SCAN` per thousand keys.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn ready_queues(&self) -> Result<Vec<String>, StoreError> {
        let read: Result<(Vec<Entry>, bool), redis::RedisError> = redis::pipe()
            .smembers(self.keys.ready_queues())
            .exists(self.keys.ready_queues_walked())
            .query_async(&mut self.connection.clone())
            .await;
        let (queues, walked) = match read {
            // An index of another type (damaged, or written by hand) is read as one no walk has
            // found whole: the keys are walked until a reaper replaces it.
            Err(error) if wrong_type(&error) => (Vec::new(), false),
            read => read.during(&self.metrics, "ready_queues")?,
        };
        // A name that is not UTF-8 is no queue: the reapers remove it.
        let mut queues = readable_names(NameIndex::ReadyQueues, queues, &mut Vec::new());
        if !walked {
            queues.extend(self.scan_ready_queues().await?);
        }
        queues.sort();
        queues.dedup();
        Ok(queues)
    }

    /// The queues of every ready list in the namespace, by a walk over its keys.
    async fn scan_ready_queues(&self) -> Result<Vec<String>, StoreError> {
        let mut queues = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, keys) = self.scan_page("ready", cursor, "ready_queues").await?;
            queues.extend(keys.iter().filter_map(|key| self.queue_of_ready_list(key)));
            if next == 0 {
                return Ok(queues);
            }
            cursor = next;
        }
    }

    /// The queue of a ready list's key as a `SCAN` answers it; `None` for any other key. A key
    /// that is not UTF-8 names no queue a claim reads.
    pub(super) fn queue_of_ready_list(&self, key: &[u8]) -> Option<String> {
        let key = std::str::from_utf8(key).ok()?;
        Some(self.keys.queue_of_ready_list(key)?.to_owned())
    }

    /// Adds the queues of the ready lists that the page `page` of the walk met to the index, so
    /// that a list no script of this version wrote (a replica of an earlier version's, during a
    /// rolling deploy, or one written by hand) is found within a round. One `SADD`, and none for
    /// a page without a ready list: a handful of a million keys are.
    ///
    /// An index of another type (damaged, or written by hand) is replaced by one of this page's
    /// queues, and readers walk the keys again until a round finds it whole: it holds nothing
    /// the walk does not find again. Returns whether the index was whole before.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn index_ready_queues(&self, page: &RecordPage) -> Result<bool, StoreError> {
        const OPERATION: &str = "index_ready_queues";
        if page.queues.is_empty() {
            return Ok(true);
        }
        let added: Result<(), redis::RedisError> = self
            .connection
            .clone()
            .sadd(self.keys.ready_queues(), &page.queues)
            .await;
        match added {
            Err(error) if wrong_type(&error) => {
                self.replace_index(&page.queues, OPERATION).await?;
                Ok(false)
            }
            added => added.during(&self.metrics, OPERATION).map(|()| true),
        }
    }

    /// Where a round of the walk over every key ends: forgets, in the index, the queues whose
    /// ready lists are all empty, and when `whole` (every page of the round added its queues)
    /// records that readers may trust the index alone, if no walk did before. Returns the
    /// queues forgotten; `None` when the index or its mark was of another type (damaged, or
    /// written by hand, and no page of the round had a ready list to replace it with): both are
    /// deleted, and readers walk the keys until the next round finds the index whole, since the
    /// runs made ready meanwhile could not add their queues to it.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn forget_empty_queues(
        &self,
        whole: bool,
    ) -> Result<Option<Vec<String>>, StoreError> {
        const OPERATION: &str = "forget_empty_queues";
        let forgotten: Result<Vec<Entry>, redis::RedisError> = scripts::FORGET_EMPTY_QUEUES
            .key(self.keys.ready_queues())
            .key(self.keys.ready_queues_walked())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(if whole { "1" } else { "" })
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await;
        match forgotten {
            Err(error) if wrong_type(&error) => {
                self.replace_index(&[], OPERATION).await?;
                Ok(None)
            }
            // A queue forgotten is named as listings name it, escaped when it is not UTF-8.
            forgotten => Ok(Some(
                forgotten
                    .during(&self.metrics, OPERATION)?
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
            )),
        }
    }

    /// Replaces an index of queues of another type (damaged, or written by hand), and its mark
    /// that a walk found it whole, with one holding `queues` alone, which readers do not trust
    /// until the next round of the walk finds it whole.
    async fn replace_index(
        &self,
        queues: &[String],
        operation: &'static str,
    ) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.del(self.keys.ready_queues())
            .ignore()
            .del(self.keys.ready_queues_walked())
            .ignore();
        if !queues.is_empty() {
            pipe.sadd(self.keys.ready_queues(), queues).ignore();
        }
        pipe.query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, operation)
    }
}
