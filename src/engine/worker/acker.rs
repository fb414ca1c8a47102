//! The acker: successes recorded in batches, after starting runs when runs wait for a slot, and
//! remembered whether or not Redis took them.

use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tracing::warn;

use super::owned::OwnedRuns;
use crate::engine::retry::retry_store;
use crate::store::{Ack, RunState, Store};

/// The most successes one ack call records.
const MAX_ACK_BATCH: usize = 256;

/// How long successes may wait while ready runs are still waiting for a slot: starting runs
/// comes first, and the successes go in bigger batches after. Bounds how many finished runs a
/// crash of this replica would run again (at-least-once).
pub(super) const ACK_DEFER: Duration = Duration::from_millis(100);

/// The most successes kept waiting that way.
const MAX_DEFERRED_ACKS: usize = 4_096;

/// How long the outcome of a run is retried while Redis fails: a Redis blip while recording
/// an outcome must not make a run run again, and a replica that stops while Redis is gone must
/// still exit. Well within the default run lease (30 s).
pub const RECORD_WINDOW: Duration = Duration::from_secs(10);

/// A success waiting to be recorded.
pub(super) struct PendingAck {
    pub(super) ack: Ack,
    /// Its job, for the metrics.
    pub(super) job: String,
    /// Its job has a limit (overlap forbidden, max_concurrency): recording the success frees a
    /// slot that a run may be waiting for, so it is never deferred.
    pub(super) frees_slot: bool,
}

/// Records successes in batches: whatever arrived while the previous call was in flight goes
/// in the next one, so a busy replica makes one call for many runs and an idle one adds no
/// delay. While the workers have a backlog of ready runs, successes wait (see [`ACK_DEFER`]) so
/// that Redis starts runs first. Ends when every sender is gone and everything sent is recorded.
pub(super) async fn record_successes(
    store: Store,
    mut pending: mpsc::Receiver<PendingAck>,
    mut backlog: watch::Receiver<bool>,
    owned: OwnedRuns,
) {
    let mut batch = Vec::new();
    while pending.recv_many(&mut batch, MAX_DEFERRED_ACKS).await > 0 {
        let deferred_until = tokio::time::Instant::now() + ACK_DEFER;
        while *backlog.borrow_and_update()
            && batch.len() < MAX_DEFERRED_ACKS
            && !batch.iter().any(|pending| pending.frees_slot)
        {
            let room = MAX_DEFERRED_ACKS - batch.len();
            tokio::select! {
                () = tokio::time::sleep_until(deferred_until) => break,
                changed = backlog.changed() => if changed.is_err() { break },
                received = pending.recv_many(&mut batch, room) => if received == 0 { break },
            }
        }
        // In parallel, so a large deferred batch costs one round trip.
        futures_util::future::join_all(
            batch
                .chunks(MAX_ACK_BATCH)
                .map(|chunk| record_batch(&store, chunk, &owned)),
        )
        .await;
        batch.clear();
    }
}

/// Records one batch of successes. Each is remembered whether or not it could be recorded: a
/// run whose success Redis does not have (lost with an older copy, or never recorded) then gets
/// it again from this replica's reconciliation instead of running again, while the replica
/// lives and its lease holds.
async fn record_batch(store: &Store, batch: &[PendingAck], owned: &OwnedRuns) {
    let acks: Vec<&Ack> = batch.iter().map(|pending| &pending.ack).collect();
    let recorded = retry_store(&store.metrics().health, || store.ack_runs(&acks)).await;
    for ack in &acks {
        owned.succeeded(ack);
    }
    let Some(recorded) = recorded else {
        warn!(
            runs = acks.len(),
            "cannot record successes: their leases will expire and they may run again"
        );
        return;
    };
    for (pending, recorded) in batch.iter().zip(recorded) {
        if recorded {
            store
                .metrics()
                .record_run(&pending.job, RunState::Succeeded.as_str());
        } else {
            warn!(
                run = pending.ack.run_id,
                "lease lost before the success was recorded: the run may run again"
            );
        }
    }
}
