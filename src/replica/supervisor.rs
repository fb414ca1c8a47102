//! The replica's component tasks, by name, watched until the last has ended: one that dies
//! stops the replica, and each stops in its turn of the shutdown order or is abandoned.

use std::collections::HashMap;
use std::future::Future;

use tokio::task::{JoinError, JoinSet};
use tracing::{Instrument, error, warn};

use super::{ReplicaError, STOP_TIMEOUT};
use crate::engine::Shutdown;
use crate::logs::panic_message;
use crate::metrics::Metrics;

/// The components of a replica, by the names logs, errors and `/healthz` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Component {
    Elector,
    Planner,
    Workers,
    Promoter,
    Reaper,
    Heartbeat,
    Notifier,
    Exporter,
}

impl Component {
    fn name(self) -> &'static str {
        match self {
            Component::Elector => "elector",
            Component::Planner => "planner",
            Component::Workers => "workers",
            Component::Promoter => "promoter",
            Component::Reaper => "reaper",
            Component::Heartbeat => "heartbeat",
            Component::Notifier => "notifier",
            Component::Exporter => "exporter",
        }
    }

    /// Whether the component stops with the first stage of the shutdown order, rather than
    /// once the workers have stopped.
    fn stops_first(self) -> bool {
        matches!(
            self,
            Component::Elector | Component::Planner | Component::Workers
        )
    }
}

/// The replica's component tasks, by name.
#[derive(Default)]
pub(super) struct Supervisor {
    tasks: JoinSet<()>,
    names: HashMap<tokio::task::Id, Component>,
}

impl Supervisor {
    pub(super) fn spawn(
        &mut self,
        component: Component,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        // In the span the replica runs in: with several namespaces, it names the namespace.
        let id = self.tasks.spawn(task.in_current_span()).id();
        self.names.insert(id, component);
    }

    /// The next component to end, and how it ended; `None` once none is left.
    async fn next(&mut self) -> Option<(Component, Result<(), JoinError>)> {
        let (id, ended) = match self.tasks.join_next_with_id().await? {
            Ok((id, ())) => (id, Ok(())),
            Err(error) => (error.id(), Err(error)),
        };
        let component = self
            .names
            .remove(&id)
            .expect("every task is spawned with its name");
        Some((component, ended))
    }

    fn running(&self) -> Vec<&'static str> {
        self.names
            .values()
            .map(|component| component.name())
            .collect()
    }
}

impl Supervisor {
    /// Watches the components until the last has ended, stopping the replica when one dies
    /// (`interrupt` hands the running runs back without a grace), starting the second stage of
    /// the shutdown order (`background`) once the workers have stopped, and abandoning what has
    /// not stopped [`STOP_TIMEOUT`] after that; `stopping` is the first stage.
    ///
    /// # Errors
    /// [`ReplicaError::ComponentDied`] for the first component that panicked or returned while
    /// it should have run.
    pub(super) async fn watch(
        mut self,
        stopping: &Shutdown,
        background: &Shutdown,
        interrupt: &Shutdown,
        metrics: &Metrics,
    ) -> Result<(), ReplicaError> {
        let mut failure = None;
        let mut stop_by = None;
        let mut stopping_seen = false;
        loop {
            let ended = tokio::select! {
                biased;
                () = stopping.cancelled(), if !stopping_seen => {
                    stopping_seen = true;
                    metrics.health.stopping();
                    continue;
                }
                () = sleep_until(stop_by) => {
                    warn!(
                        components = self.running().join(","),
                        "components did not stop in time: abandoning them"
                    );
                    self.tasks.abort_all();
                    stop_by = None;
                    continue;
                }
                ended = self.next() => ended,
            };
            let Some((component, ended)) = ended else {
                break;
            };
            let stop_asked = if component.stops_first() {
                stopping.is_cancelled()
            } else {
                background.is_cancelled()
            };
            let died = match ended {
                Ok(()) if stop_asked => None,
                Ok(()) => Some("stopped on its own".to_owned()),
                // Only this supervisor aborts a task, after the component's turn to stop.
                Err(error) if error.is_cancelled() => None,
                Err(error) => Some(format!(
                    "panicked: {}",
                    panic_message(error.into_panic().as_ref())
                )),
            };
            if let Some(how) = died
                && failure.is_none()
            {
                error!(
                    component = component.name(),
                    "the {} {how}: stopping the replica, handing its runs back, so that it is \
                     restarted",
                    component.name()
                );
                metrics.health.component_died(component.name());
                interrupt.cancel();
                stopping.cancel();
                failure = Some(ReplicaError::ComponentDied {
                    component: component.name(),
                    how,
                });
            }
            if component == Component::Workers {
                background.cancel();
                stop_by = Some(tokio::time::Instant::now() + STOP_TIMEOUT);
            }
        }
        failure.map_or(Ok(()), Err)
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
