//! The elector: takes the leader lease when it is free, renews it every third of its ttl, steps
//! down when it is lost, and releases it on shutdown.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::{Backoff, Leadership, Shutdown, log_store_failure};
use crate::store::{Acquisition, LeaderToken, Store, StoreError};

/// How the elector behaves.
#[derive(Debug, Clone)]
pub struct ElectorConfig {
    /// This replica's id, the first half of its leader token.
    pub replica_id: String,
    /// How long a lease lasts without renewal: a dead leader is replaced within about this long.
    pub lease_ttl: Duration,
}

/// What one elector tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectorTick {
    /// This replica took the lease.
    Acquired(LeaderToken),
    /// This replica leads and renewed its lease.
    Renewed,
    /// Another replica leads (its token).
    Follower(String),
    /// This replica led but its lease was gone or taken: it no longer leads.
    SteppedDown,
}

/// Takes, keeps and gives up the leader lease.
pub struct Elector {
    store: Store,
    leadership: Leadership,
    config: ElectorConfig,
    /// When the lease was last taken or renewed, on the monotonic clock: if renewals fail for
    /// longer than the ttl allows, the lease may have lapsed and the replica steps down before a
    /// successor can take over.
    renewed_at: Option<Instant>,
}

impl Elector {
    /// An elector for this replica.
    pub fn new(store: Store, leadership: Leadership, config: ElectorConfig) -> Self {
        Self {
            store,
            leadership,
            config,
            renewed_at: None,
        }
    }

    /// Acquires the lease if nobody holds it, or renews this replica's.
    ///
    /// # Errors
    /// Redis errors. A leader whose renewals have failed for two thirds of the ttl has stepped
    /// down by the time the error is returned.
    pub async fn tick(&mut self) -> Result<ElectorTick, StoreError> {
        let Some(token) = self.leadership.token() else {
            return match self
                .store
                .acquire_leader(&self.config.replica_id, self.config.lease_ttl)
                .await?
            {
                Acquisition::Acquired(token) => {
                    info!(token = token.as_str(), "acquired the leader lease");
                    self.renewed_at = Some(Instant::now());
                    self.leadership.lead(token.clone(), self.store.metrics());
                    Ok(ElectorTick::Acquired(token))
                }
                Acquisition::Held(holder) => Ok(ElectorTick::Follower(holder)),
            };
        };
        match self.store.renew_leader(&token, self.config.lease_ttl).await {
            Ok(true) => {
                self.renewed_at = Some(Instant::now());
                Ok(ElectorTick::Renewed)
            }
            Ok(false) => {
                warn!(
                    token = token.as_str(),
                    "the leader lease was lost: stepping down"
                );
                self.leadership.step_down(&token, self.store.metrics());
                Ok(ElectorTick::SteppedDown)
            }
            Err(error) => {
                let lapsing = self
                    .renewed_at
                    .is_none_or(|at| at.elapsed() >= self.config.lease_ttl * 2 / 3);
                if lapsing && self.leadership.step_down(&token, self.store.metrics()) {
                    warn!(
                        token = token.as_str(),
                        "cannot renew the leader lease before it may lapse: stepping down"
                    );
                }
                Err(error)
            }
        }
    }

    /// Ticks every third of the lease ttl until `shutdown`, then steps down and releases the
    /// lease if held.
    ///
    /// Once `shutdown` is cancelled no tick starts, so a replica that is stopping never takes
    /// the lease; a tick already under way when it is cancelled ends first, and a lease it took
    /// is given up at once. The release waits for Redis for one lease ttl at most: by then the
    /// lease has expired anyway.
    pub async fn run(mut self, shutdown: Shutdown) {
        let period = self.config.lease_ttl / 3;
        let mut backoff = Backoff::default();
        while !shutdown.is_cancelled() {
            let pause = match self.tick().await {
                Ok(_) => {
                    backoff.succeeded(&self.store.metrics().health);
                    period
                }
                Err(error) => {
                    log_store_failure(&error, "elector tick failed");
                    backoff.failed().min(period)
                }
            };
            tokio::select! {
                biased;
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
        }
        if let Some(token) = self.leadership.token() {
            // Locally first: the planner stops planning before the lease is given up, and a
            // plan already on its way is refused by the fencing check once the lease is gone.
            self.leadership.step_down(&token, self.store.metrics());
            let released =
                tokio::time::timeout(self.config.lease_ttl, self.store.release_leader(&token))
                    .await;
            match released {
                Ok(Ok(_)) => info!(token = token.as_str(), "released the leader lease"),
                Ok(Err(error)) => {
                    warn!(%error, "could not release the leader lease; it will expire");
                }
                Err(_) => {
                    warn!("redis did not answer the release of the leader lease; it will expire")
                }
            }
        }
    }
}
