//! A running run's output published while it runs: at most once a [`PUBLISH_EVERY`], only when
//! output arrived since the last write, so that a run that prints nothing, or ends within its
//! first second, costs Redis no command for it.

use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use crate::handler::LiveOutput;
use crate::store::Store;

/// How often at most a run's output so far is written to Redis.
pub(super) const PUBLISH_EVERY: Duration = Duration::from_secs(1);

/// How many run leases the published output outlives its last write by: a replica killed
/// mid-run leaves it behind that long at most, and a run that goes quiet keeps it by writing it
/// again once a lease.
pub(super) const EXPIRY_LEASES: u32 = 3;

/// Publishes run `run_id`'s output (attempt `attempt`) while it runs; ends only when dropped,
/// which the execution does as soon as its handler returns.
pub(super) async fn publish_output(
    store: Store,
    run_id: String,
    attempt: u32,
    output: LiveOutput,
    lease: Duration,
) {
    let expiry = lease * EXPIRY_LEASES;
    // What was written last, and when: a run quiet for a lease writes it again, so that it does
    // not expire while the run still runs.
    let mut written: Option<(String, Instant)> = None;
    // A write that failed is tried again at the next turn, unless newer output replaced it.
    let mut unwritten: Option<String> = None;
    let mut failures_said = false;
    loop {
        tokio::time::sleep(PUBLISH_EVERY).await;
        let text = output
            .take_changed()
            .or_else(|| unwritten.take())
            .or_else(|| {
                written
                    .as_ref()
                    .filter(|(_, at)| at.elapsed() >= lease)
                    .map(|(text, _)| text.clone())
            });
        let Some(text) = text else {
            continue;
        };
        match store
            .publish_live_output(&run_id, attempt, &text, expiry)
            .await
        {
            Ok(_) => written = Some((text, Instant::now())),
            Err(error) => {
                // Said once a run: Redis away for minutes must not log every second of it;
                // the failure is counted in the replica's metrics either way.
                if failures_said {
                    debug!(run = run_id, %error, "cannot publish the run's output so far");
                } else {
                    failures_said = true;
                    warn!(
                        run = run_id,
                        %error,
                        "cannot publish the run's output so far: `runs show` shows older \
                         output, or none, until a write succeeds (tried again every second)"
                    );
                }
                unwritten = Some(text);
            }
        }
    }
}
