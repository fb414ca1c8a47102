//! Walks over the namespace's keys with `SCAN`, a page at a time: for commands an operator runs
//! and for the reapers' slow rounds, never for a path every run takes.

use super::{During, Store, StoreError};

/// How many keys one `SCAN` call asks Redis to look at: enough that a round over a large
/// namespace takes few round trips, few enough that one call never holds Redis long.
const SCANNED_PER_PAGE: u64 = 1_000;

impl Store {
    /// One page of the keys of this namespace whose name, after the namespace's prefix, starts
    /// with `after_prefix`, from `cursor` (0 starts a round): the next cursor (0 when the round
    /// is over) and the keys, as bytes (a damaged key need not be UTF-8). `operation` names the
    /// caller in errors and metrics.
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn scan_page(
        &self,
        after_prefix: &str,
        cursor: u64,
        operation: &'static str,
    ) -> Result<(u64, Vec<Vec<u8>>), StoreError> {
        // Braces are not special in Redis glob patterns; a namespace has no `*`, `?` or `[`.
        let pattern = format!("{}{after_prefix}*", self.keys.prefix());
        self.query_keyless(
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCANNED_PER_PAGE),
        )
        .await
        .during(&self.metrics, operation)
    }
}
