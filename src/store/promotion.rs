//! Due runs made ready (`promote_due.lua`), and the wake-up that tells promoters to look sooner.

use std::time::Duration;

use redis::Value;

use super::During;
use super::reply::Reply;
use super::{Store, StoreError, millis, scripts};

/// What one promotion pass did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promoted {
    /// Runs moved to their ready lists.
    pub ready: u64,
    /// The job and reason of each run skipped (missed, past deadline, undeclared job) or dead
    /// (corrupt), for the caller to count.
    pub skips: Vec<(String, String)>,
    /// Fires left due because their job's published definition is damaged: the leader writes
    /// it again at its next tick.
    pub deferred: u64,
    /// When the next run is due, ms; `None` when nothing is.
    pub next_due_ms: Option<i64>,
    /// Redis's time when the pass ran, ms: with `next_due_ms`, how long to sleep.
    pub now_ms: i64,
}

impl Promoted {
    /// How many runs were skipped or sent to the dead letters.
    pub fn skipped(&self) -> u64 {
        u64::try_from(self.skips.len()).unwrap_or(u64::MAX)
    }
}

impl Store {
    /// Moves up to `limit` runs due within `lead` to their ready lists; a run later than
    /// `misfire_threshold` is a missed fire, handled by its job's misfire policy; a fire moved
    /// within it is judged again when it starts (see [`Store::claim_runs`]). Runs moved
    /// ahead of their due time are claimed ahead and started on time ([`ClaimedRun::start_in`](super::ClaimedRun::start_in)).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn promote_due(
        &self,
        limit: usize,
        misfire_threshold: Duration,
        lead: Duration,
    ) -> Result<Promoted, StoreError> {
        let answer: Vec<Value> = scripts::PROMOTE_DUE
            .key(self.keys.due())
            .key(self.keys.defs())
            .key(self.keys.events())
            .key(self.keys.dead())
            .key(self.keys.planned())
            .key(self.keys.damaged_definitions())
            .key(self.keys.hold())
            .key(self.keys.latest_fires())
            .key(self.keys.due_runs())
            .key(self.keys.planned_through())
            .arg(self.keys.prefix())
            .arg(limit)
            .arg(millis(misfire_threshold))
            .arg(self.history_arg())
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(millis(lead))
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "promote_due")?;
        let mut reply = Reply::new("promote_due", answer);
        let ready = reply.next()?;
        let skipped = reply.next()?;
        let next_due_ms: i64 = reply.next()?;
        let now_ms = reply.next()?;
        let deferred = reply.next()?;
        let skips = reply.skips(skipped)?;
        reply.finish()?;
        Ok(Promoted {
            ready,
            skips,
            deferred,
            next_due_ms: (next_due_ms >= 0).then_some(next_due_ms),
            now_ms,
        })
    }

    /// Messages on the channel that tells promoters a run became due earlier than they planned
    /// to look: each carries that due time in ms. The stream ends when the connection drops.
    ///
    /// # Errors
    /// Redis errors while subscribing.
    pub async fn wake_promoter(
        &self,
    ) -> Result<impl futures_util::Stream<Item = redis::Msg> + use<>, StoreError> {
        let mut pubsub = super::connection::pubsub(&self.topology)
            .await
            .during(&self.metrics, "wake_promoter")?;
        pubsub
            .subscribe(self.keys.wake_promoter())
            .await
            .during(&self.metrics, "wake_promoter")?;
        Ok(pubsub.into_on_message())
    }
}
