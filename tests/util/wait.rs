//! The one way tests wait: poll a condition until it holds or a limit passes, instead of sleeping
//! and hoping. Shared with the chaos runner, which includes this file on its own.

use std::time::{Duration, Instant};

/// How long a poll waits between two looks: short next to the second-long events tests wait
/// for, long enough not to load the machine the replicas run on.
const PERIOD: Duration = Duration::from_millis(50);

/// Polls `condition` until it yields a value or `limit` passes; the value, or `None` when it
/// yielded none, on a last look at the limit too.
pub fn wait_for<T>(limit: Duration, mut condition: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = condition() {
            return Some(found);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(PERIOD);
    }
}

/// Polls `condition` until it holds or `limit` passes; whether it held.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    wait_for(limit, || condition().then_some(())).is_some()
}

/// Like [`wait_until`], for a condition that awaits (the store's calls) inside a test's runtime,
/// which it leaves free between two looks.
pub async fn wait_until_async(limit: Duration, mut condition: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(PERIOD).await;
    }
}
