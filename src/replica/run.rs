//! A replica's components made from what it was told, and started under its supervisor: the
//! replica id checked free and the archive's mark checked first, then one task per component.

use tracing::warn;

use super::supervisor::{Component, Supervisor};
use super::{Replica, ReplicaError};
use crate::archive::{ArchiveError, ArchiveUrl};
use crate::engine::elector::{Elector, ElectorConfig};
use crate::engine::exporter::{Exporter, ExporterConfig};
use crate::engine::heartbeat::{Heartbeat, HeartbeatConfig, HeartbeatError, wait_for_replica_id};
use crate::engine::notifier::{Notifier, NotifierConfig};
use crate::engine::planner::{DeclarationsConfig, Planner, PlannerConfig};
use crate::engine::promoter::Promoter;
use crate::engine::reaper::{Reaper, ReaperConfig};
use crate::engine::worker::{WorkerConfig, Workers};
use crate::engine::{Leadership, Shutdown, arm_fault_points};
use crate::store::Store;
use crate::store::keys::private_route;

impl Replica {
    /// Runs every component until `shutdown`, then stops them in order (see the module docs).
    ///
    /// ```no_run
    /// use redcron::shutdown::Shutdown;
    ///
    /// # async fn example(replica: redcron::replica::Replica) -> Result<(), Box<dyn std::error::Error>> {
    /// let shutdown = Shutdown::new();
    /// let on_ctrl_c = shutdown.clone();
    /// tokio::spawn(async move {
    ///     // Running runs then get the shutdown grace to finish.
    ///     let _ = tokio::signal::ctrl_c().await;
    ///     on_ctrl_c.cancel();
    /// });
    /// replica.run(shutdown).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ReplicaError::ReplicaIdInUse`] when another process beats under its id at start;
    /// [`ReplicaError::ComponentDied`] when a component panicked or returned while it should
    /// have run: the replica has stopped.
    pub async fn run(self, shutdown: Shutdown) -> Result<(), ReplicaError> {
        let metrics = self.store.metrics().clone();
        metrics.health.starting();
        metrics.set_replica(&self.config.replica_id);
        arm_fault_points();
        let config = self.config;
        let id_free = tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            free = wait_for_replica_id(&self.store, &config.replica_id, config.heartbeat_period) => free,
        };
        match id_free {
            Ok(()) => {}
            // Redis down at start: the heartbeat finds a second process later, if there is one.
            Err(HeartbeatError::Store(error)) => {
                warn!(%error, "cannot check that no other process uses this replica id");
            }
            Err(error) => return Err(ReplicaError::ReplicaIdInUse(error)),
        }
        check_archive(&self.store, config.exporter.as_ref()).await?;
        let leadership = Leadership::new();
        let misfire_threshold = config.promoter.misfire_threshold;

        let elector = Elector::new(
            self.store.clone(),
            leadership.clone(),
            ElectorConfig {
                replica_id: config.replica_id.clone(),
                lease_ttl: config.leader_ttl,
            },
        );
        let planner = Planner::new(
            self.store.clone(),
            leadership.clone(),
            self.jobs.subscribe(),
            PlannerConfig {
                declarations: DeclarationsConfig {
                    replica_id: config.replica_id.clone(),
                    live_for: config.heartbeat_period * 3,
                    // Kept planned as long as their runs wait for a replica that declares them.
                    undeclared_grace: config.reaper.undeclared_grace,
                },
                ..config.planner.clone()
            },
        );
        let workers = Workers::new(
            self.store.clone(),
            WorkerConfig {
                replica_id: config.replica_id.clone(),
                // As long as the heartbeat keeps them.
                declarations_ttl: config.heartbeat_period * 3,
                // Its own route too, where the runs of every-replica fires meant for it wait.
                queues: config
                    .workers
                    .queues
                    .iter()
                    .cloned()
                    .chain([private_route(&config.replica_id)])
                    .collect(),
                ..config.workers.clone()
            },
            self.jobs.subscribe(),
            self.handlers,
        );
        let heartbeat = Heartbeat::new(
            self.store.clone(),
            HeartbeatConfig {
                replica_id: config.replica_id.clone(),
                period: config.heartbeat_period,
                queues: config.workers.queues.clone(),
                labels: self.labels.published(),
                targets_kept: misfire_threshold,
                keep_declared: config.reaper.undeclared_grace,
            },
            workers.load(),
            self.jobs.subscribe(),
            leadership.clone(),
        );

        // One token per stage of the shutdown order. A dead component cancels the first and
        // interrupts the running runs; the second follows once the workers have stopped.
        let stopping = shutdown.child_token();
        let background = Shutdown::new();
        let interrupt = workers.interrupter();
        let mut supervisor = Supervisor::default();
        supervisor.spawn(Component::Elector, elector.run(stopping.clone()));
        supervisor.spawn(Component::Planner, planner.run(stopping.clone()));
        supervisor.spawn(
            Component::Workers,
            workers.run(stopping.clone(), config.shutdown_grace),
        );
        supervisor.spawn(
            Component::Promoter,
            Promoter::new(self.store.clone(), config.promoter, self.jobs.subscribe())
                .run(background.clone()),
        );
        supervisor.spawn(
            Component::Reaper,
            Reaper::new(
                self.store.clone(),
                ReaperConfig {
                    replica_live_for: config.heartbeat_period * 3,
                    misfire_threshold,
                    ..config.reaper
                },
            )
            .with_queue_fallbacks(self.fallbacks.subscribe())
            .with_jobs(self.jobs.subscribe())
            .run(background.clone()),
        );
        supervisor.spawn(Component::Heartbeat, heartbeat.run(background.clone()));
        supervisor.spawn(
            Component::Notifier,
            Notifier::new(
                self.store.clone(),
                NotifierConfig {
                    replica_id: config.replica_id.clone(),
                    ..config.notifier
                },
            )
            .with_jobs(self.jobs.subscribe())
            .run(background.clone()),
        );

        if let Some(exporter) = config.exporter.clone() {
            supervisor.spawn(
                Component::Exporter,
                Exporter::new(self.store.clone(), exporter).run(background.clone()),
            );
        }
        supervisor
            .watch(&stopping, &background, &interrupt, &metrics)
            .await
    }
}

/// Says in Redis that the namespace archives when this replica does, unless it says so already;
/// refuses to start one that does not in a namespace that does, one that archives elsewhere
/// than the namespace does, and one whose archive belongs to another namespace (claiming it for
/// its own when it belongs to none). Redis or the archive out of reach at start lets it start:
/// the outcomes wait in Redis, and are written by what the other replicas were told.
async fn check_archive(
    store: &Store,
    exporter: Option<&ExporterConfig>,
) -> Result<(), ReplicaError> {
    let Some(exporter) = exporter else {
        return match store.archive_marked().await {
            Ok(None) => Ok(()),
            Ok(Some(url)) => Err(ReplicaError::ArchiveRequired {
                url,
                key: store.keys().archive_marker(),
            }),
            Err(error) => {
                warn!(%error, "cannot check whether the namespace archives");
                Ok(())
            }
        };
    };
    // Refused before the archive is claimed, so that a replica told a wrong URL leaves nothing
    // behind, in Redis or in that archive.
    elsewhere(store, exporter, store.archive_marked().await)?;
    match exporter.archive.claim(&exporter.namespace).await {
        Ok(()) => {}
        Err(error @ ArchiveError::OtherNamespace { .. }) => {
            return Err(ReplicaError::ArchiveOfAnotherNamespace(error));
        }
        Err(error) => warn!(%error, "cannot check which namespace the archive belongs to"),
    }
    // Written only where missing: a replica of another archive may have marked the namespace
    // since it was read.
    let own = exporter.archive.url().to_string();
    elsewhere(store, exporter, store.mark_archive(&own).await)
}

/// Refuses a replica whose archive is not the one `marked` (where the namespace archives, as
/// read from Redis) names, compared as [`ArchiveUrl`] reads them.
fn elsewhere(
    store: &Store,
    exporter: &ExporterConfig,
    marked: Result<Option<String>, crate::store::StoreError>,
) -> Result<(), ReplicaError> {
    let own = exporter.archive.url();
    match marked {
        Ok(Some(marked)) if ArchiveUrl::parse(&marked).ok().as_ref() != Some(own) => {
            Err(ReplicaError::ArchiveElsewhere {
                url: own.to_string(),
                marked,
                key: store.keys().archive_marker(),
            })
        }
        Ok(_) => Ok(()),
        Err(error) => {
            warn!(%error, "cannot check whether the namespace archives");
            Ok(())
        }
    }
}
