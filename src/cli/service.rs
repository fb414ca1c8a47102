//! What a service manager is told, when a replica runs under one: systemd's readiness and
//! watchdog protocol (`sd_notify`), spoken only when systemd set `NOTIFY_SOCKET`.
//!
//! `READY=1` once Redis has answered; `WATCHDOG=1` at half the unit's `WatchdogSec`, sent by a
//! task on the replica's runtime while none of its components died, so a replica whose runtime
//! hung (the task does not run) or whose component died misses its pings and is restarted;
//! `STOPPING=1` when shutdown begins. A Redis outage does not stop the pings: every replica
//! would be killed at once, with its running jobs, and would wait for Redis again anyway.

use std::sync::Arc;

use sd_notify::NotifyState;
use tracing::warn;

use crate::metrics::Endpoint;
use crate::shutdown::Shutdown;

/// Tells the service manager the replica is ready.
pub(super) fn ready() {
    send(&[NotifyState::Ready, NotifyState::Status("running")]);
}

/// Tells the service manager the replica is stopping.
pub(super) fn stopping() {
    send(&[
        NotifyState::Stopping,
        NotifyState::Status("stopping: running runs get the shutdown grace"),
    ]);
}

/// Pings the service manager's watchdog, when the unit has one, while no component of the
/// replica died, until `shutdown`.
pub(super) async fn watchdog(endpoint: Arc<Endpoint>, shutdown: Shutdown) {
    let Some(timeout) = sd_notify::watchdog_enabled() else {
        return;
    };
    let mut ticks = tokio::time::interval(timeout / 2);
    let mut unhealthy = false;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        match endpoint.dead_component() {
            None => send(&[NotifyState::Watchdog]),
            Some(component) if !unhealthy => {
                unhealthy = true;
                warn!(
                    %component,
                    "not pinging the service manager's watchdog: a component died"
                );
            }
            Some(_) => {}
        }
    }
}

fn send(states: &[NotifyState]) {
    if let Err(error) = sd_notify::notify(states) {
        warn!(%error, "cannot notify the service manager");
    }
}
