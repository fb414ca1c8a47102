//! The starter: runs claimed ahead of their due time started in batches, one call for every run
//! whose due time came while the previous call was in flight.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tracing::Instrument;

use crate::engine::retry::retry_store;
use crate::store::{ClaimedRun, Store};

/// The most runs one start call starts; `start_claimed_runs.lua` takes up to 1,000.
const MAX_START_BATCH: usize = 256;

/// A run claimed ahead whose due time came, and where its execution waits for the answer.
struct PendingStart {
    run: ClaimedRun,
    answer: oneshot::Sender<Option<bool>>,
}

/// Where executions send the runs they start, recorded in batches by a task of its own, which
/// ends once every clone of this is gone.
#[derive(Clone)]
pub(super) struct Starter {
    pending: mpsc::Sender<PendingStart>,
}

impl Starter {
    /// A starter whose runs take `lease` as they start; at most `slots` wait to be sent, one per
    /// worker slot. Must be called within a Tokio runtime: it spawns the task that starts them.
    pub(super) fn spawn(store: Store, lease: Duration, slots: usize) -> Self {
        let (pending, received) = mpsc::channel(slots.max(1));
        tokio::spawn(start_batches(store, lease, received).in_current_span());
        Self { pending }
    }

    /// Starts `run`: `Some(true)` once its full lease and start are written, `Some(false)` when
    /// it is no longer its worker's or its short lease expired, `None` when Redis did not
    /// answer within the recording window.
    pub(super) async fn start(&self, run: &ClaimedRun) -> Option<bool> {
        let (answer, answered) = oneshot::channel();
        let pending = PendingStart {
            run: run.clone(),
            answer,
        };
        self.pending.send(pending).await.ok()?;
        answered.await.ok().flatten()
    }
}

/// Starts what arrived while the previous call was in flight, in one call: the fires of one
/// second, claimed ahead together, start together, and an idle replica's one run goes alone at
/// once.
async fn start_batches(store: Store, lease: Duration, mut pending: mpsc::Receiver<PendingStart>) {
    let mut batch = Vec::new();
    while pending.recv_many(&mut batch, MAX_START_BATCH).await > 0 {
        let runs: Vec<&ClaimedRun> = batch.iter().map(|pending| &pending.run).collect();
        let started = retry_store(&store.metrics().health, || {
            store.start_claimed_runs(&runs, lease)
        })
        .await;
        for (index, pending) in batch.drain(..).enumerate() {
            let answer = started
                .as_ref()
                .and_then(|started| started.get(index).copied());
            // An execution that stopped waiting (its replica stopping) needs no answer.
            let _ = pending.answer.send(answer);
        }
    }
}
