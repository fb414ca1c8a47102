//! The promoter: on every replica, moves runs whose due time is near from the due set to their
//! ready lists. It sleeps until the next run is that near, or until told (pub/sub) that an
//! earlier one was added; there is no fixed polling interval on the hot path.
//!
//! Runs move a little ahead of their due time (the lead) so that promotion and claim are done
//! when the time comes: the worker that claimed a run ahead starts it at its due time, on
//! Redis's clock. That is what lets a thousand fires of the same second start within
//! milliseconds of it.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::StreamExt;

use super::{Backoff, Shutdown, log_store_failure, record_skips};
use crate::schedule::Jobs;
use crate::store::{Promoted, Store, StoreError};
use tokio::sync::watch;

/// The promoter's default lead: enough to promote and claim a thousand runs due at the same
/// instant on a small machine, short enough that a pause or a busy job is still seen at claim
/// almost as at the due time.
pub const DEFAULT_LEAD: Duration = Duration::from_millis(200);

/// How the promoter behaves.
#[derive(Debug, Clone)]
pub struct PromoterConfig {
    /// Most runs moved by one script call; a full batch is followed by another at once.
    pub batch: usize,
    /// A run later than this is a missed fire, handled by its job's misfire policy.
    pub misfire_threshold: Duration,
    /// The longest sleep, in case a wake message was lost with a dropped connection.
    pub max_sleep: Duration,
    /// How far ahead of its due time a run is moved to its ready list, to be claimed ahead and
    /// started on time. Zero moves runs only once due.
    pub lead: Duration,
}

impl Default for PromoterConfig {
    fn default() -> Self {
        Self {
            batch: 250,
            misfire_threshold: Duration::from_secs(60),
            max_sleep: Duration::from_secs(1),
            lead: DEFAULT_LEAD,
        }
    }
}

/// Moves due runs to their ready lists.
pub struct Promoter {
    store: Store,
    config: PromoterConfig,
    /// The jobs this replica declares: the runs it skips are counted under their job's name only
    /// for these.
    jobs: watch::Receiver<Jobs>,
}

impl Promoter {
    /// A promoter on a replica that declares `jobs`.
    pub fn new(store: Store, config: PromoterConfig, jobs: watch::Receiver<Jobs>) -> Self {
        Self {
            store,
            config,
            jobs,
        }
    }

    /// Moves one batch of due runs.
    ///
    /// # Errors
    /// Redis errors; runs stay due and are moved by a later tick.
    pub async fn tick(&mut self) -> Result<Promoted, StoreError> {
        let promoted = self
            .store
            .promote_due(
                self.config.batch,
                self.config.misfire_threshold,
                self.config.lead,
            )
            .await?;
        if !promoted.skips.is_empty() {
            let jobs = self.jobs.borrow();
            // One set per pass with skips, not a scan of every job per skip.
            let declared: HashSet<&str> = jobs.iter().map(|job| job.name.as_str()).collect();
            record_skips(self.store.metrics(), &promoted.skips, |name| {
                declared.contains(name)
            });
        }
        Ok(promoted)
    }

    /// How long to sleep after a pass: not at all after a full batch, else until the next run
    /// is due within the lead, at most `max_sleep`.
    fn pause_after(&self, promoted: &Promoted) -> Duration {
        if promoted.ready + promoted.skipped() >= self.config.batch as u64 {
            return Duration::ZERO;
        }
        promoted
            .next_due_ms
            .map_or(self.config.max_sleep, |due_ms| {
                let lead_ms = i64::try_from(self.config.lead.as_millis()).unwrap_or(i64::MAX);
                let wait = due_ms
                    .saturating_sub(lead_ms)
                    .saturating_sub(promoted.now_ms);
                let wait = u64::try_from(wait).unwrap_or(0);
                Duration::from_millis(wait).min(self.config.max_sleep)
            })
    }

    /// Promotes until `shutdown`.
    pub async fn run(mut self, shutdown: Shutdown) {
        let mut wakes = None;
        let mut backoff = Backoff::default();
        loop {
            if wakes.is_none() {
                match self.store.wake_promoter().await {
                    Ok(stream) => wakes = Some(Box::pin(stream)),
                    Err(error) => {
                        log_store_failure(&error, "cannot subscribe to promoter wake-ups")
                    }
                }
            }
            let pause = match self.tick().await {
                Ok(promoted) => {
                    backoff.succeeded(&self.store.metrics().health);
                    self.pause_after(&promoted)
                }
                Err(error) => {
                    log_store_failure(&error, "promoter tick failed");
                    backoff.failed_with(&error)
                }
            };
            if pause.is_zero() {
                continue;
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
                message = next_wake(&mut wakes) => {
                    if message.is_none() {
                        wakes = None;
                    }
                }
            }
        }
    }
}

/// The next wake-up, or never when not subscribed.
async fn next_wake<S>(wakes: &mut Option<S>) -> Option<redis::Msg>
where
    S: futures_util::Stream<Item = redis::Msg> + Unpin,
{
    match wakes {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}
