//! Store calls whose answer must outlive a Redis blip (a run's outcome, a notice's delivery):
//! retried within a window, by the workers and the notifier alike.

use std::future::Future;

use super::worker::RECORD_WINDOW;
use super::{Backoff, log_store_failure};
use crate::metrics::Health;
use crate::store::StoreError;

/// Retries a store call with backoff for [`RECORD_WINDOW`] at most, the call under way
/// included, and for as long as the namespace is held unless the replica is stopping (its
/// `health` says so); `None` when the window passed without an answer.
pub(crate) async fn retry_store<T, F, Fut>(health: &Health, mut call: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut deadline = tokio::time::Instant::now() + RECORD_WINDOW;
    let mut backoff = Backoff::default();
    loop {
        // A call abandoned at the deadline may still be carried out by Redis, as one that
        // timed out may: each is one atomic script, and the run's lease settles the rest.
        let pause = match tokio::time::timeout_at(deadline, call()).await {
            Ok(Ok(value)) => return Some(value),
            Ok(Err(error)) => {
                log_store_failure(&error, "store call failed; retrying");
                if error.is_held() && !health.is_stopping() {
                    // Redis answers, and takes the call once the hold ends: the outcome waits
                    // for that however long the hold lasts (leases are kept, nothing is reaped
                    // meanwhile). A replica that stops waits one window more at most: its
                    // service manager will not wait for the hold.
                    deadline = tokio::time::Instant::now() + RECORD_WINDOW;
                }
                backoff.failed_with(&error)
            }
            Err(_) => return None,
        };
        if tokio::time::Instant::now() + pause >= deadline {
            return None;
        }
        tokio::time::sleep(pause).await;
    }
}
