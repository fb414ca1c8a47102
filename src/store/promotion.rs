//! Due runs made ready (`promote_due.lua`), and the wake-up that tells promoters to look sooner.

use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::During;
use super::{Store, StoreError, millis, reply, scripts, skip_pairs};

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
    /// `misfire_threshold` is a missed fire, handled by its job's misfire policy. Runs moved
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
            .arg(self.keys.prefix())
            .arg(limit)
            .arg(millis(misfire_threshold))
            .arg(self.settings.events_maxlen)
            .arg(millis(self.settings.retention))
            .arg(self.now_arg())
            .arg(millis(lead))
            .invoke_async(&mut self.connection.clone())
            .await
            .during("promote_due")?;
        let mut values = answer.into_iter();
        let mut number = || {
            i64::from_redis_value(values.next().unwrap_or(Value::Nil))
                .map_err(|error| reply("promote_due", error.to_string()))
        };
        // The count of skipped runs is the length of the pairs that end the reply.
        let (ready, _skipped, next_due_ms, now_ms, deferred) =
            (number()?, number()?, number()?, number()?, number()?);
        let skips = skip_pairs(&mut values, "promote_due")?;
        Ok(Promoted {
            ready: u64::try_from(ready).unwrap_or(0),
            skips,
            deferred: u64::try_from(deferred).unwrap_or(0),
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
        let mut pubsub = self
            .client
            .get_async_pubsub()
            .await
            .during("wake_promoter")?;
        pubsub
            .subscribe(self.keys.wake_promoter())
            .await
            .during("wake_promoter")?;
        Ok(pubsub.into_on_message())
    }
}
