//! The heartbeat: every replica records itself (host, pid, version, start time, busy and max
//! workers) every few seconds, so operators can see who is alive and how loaded.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tracing::warn;

use super::Shutdown;
use crate::store::{Store, StoreError};

/// How the heartbeat behaves.
#[derive(Debug, Clone)]
pub struct HeartbeatConfig {
    /// This replica's id.
    pub replica_id: String,
    /// Time between heartbeats; a replica silent for three is stale.
    pub period: Duration,
    /// How many runs this replica executes at once.
    pub max_workers: usize,
}

/// Records this replica as alive.
pub struct Heartbeat {
    store: Store,
    config: HeartbeatConfig,
    /// Runs executing now, kept by the workers.
    busy: Arc<AtomicUsize>,
    started_ms: i64,
}

impl Heartbeat {
    /// A heartbeat reporting `busy` as the number of busy workers.
    pub fn new(store: Store, config: HeartbeatConfig, busy: Arc<AtomicUsize>) -> Self {
        Self {
            store,
            config,
            busy,
            started_ms: chrono::Utc::now().timestamp_millis(),
        }
    }

    /// Records one heartbeat.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn tick(&mut self) -> Result<(), StoreError> {
        let host = nix::unistd::gethostname()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        let info = [
            ("host", host),
            ("pid", std::process::id().to_string()),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
            ("started_ms", self.started_ms.to_string()),
            (
                "busy_workers",
                self.busy.load(Ordering::Relaxed).to_string(),
            ),
            ("max_workers", self.config.max_workers.to_string()),
        ];
        self.store
            .heartbeat(&self.config.replica_id, &info, self.config.period * 3)
            .await
    }

    /// Beats every period until `shutdown`.
    pub async fn run(mut self, shutdown: Shutdown) {
        loop {
            if let Err(error) = self.tick().await {
                warn!(%error, "heartbeat failed");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(self.config.period) => {}
            }
        }
    }
}
