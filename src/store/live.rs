//! A running run's output so far (`lua/publish_live_output.lua`): published by its worker while
//! it runs, read by `redcron runs show` until the run's record keeps its output.

use std::time::Duration;

use super::During;
use super::reply::reply_error;
use super::{Store, StoreError, millis, scripts};

/// What a running run's worker last published of its output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputSoFar {
    /// The tail of the output, at most [`crate::handler::OUTPUT_TAIL_BYTES`], starting with `…`
    /// when earlier output was dropped.
    pub output: String,
    /// When it was written, ms on Redis's clock: output arrives at most a second before the
    /// worker writes it, unless Redis could not be reached.
    pub written_ms: i64,
    /// The attempt it is of: a retry's output so far replaces its earlier attempt's only once
    /// it wrote some, so a reader compares it with the run's attempt.
    pub attempt: u32,
}

impl Store {
    /// Publishes `output`, run `run_id`'s output so far in its attempt `attempt`, to expire
    /// `expiry` from now unless published again. Returns when Redis wrote it, ms.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Held`] while the namespace is held.
    pub async fn publish_live_output(
        &self,
        run_id: &str,
        attempt: u32,
        output: &str,
        expiry: Duration,
    ) -> Result<i64, StoreError> {
        scripts::PUBLISH_LIVE_OUTPUT
            .key(self.keys.live_output(run_id))
            .key(self.keys.hold())
            .arg(output)
            .arg(attempt)
            .arg(millis(expiry))
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "publish_live_output")
    }

    /// What run `run_id`'s worker last published of its output; `None` when nothing is
    /// published (the run wrote no output yet, ended within its first second, or what was
    /// published expired).
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Reply`] for a record this module does not write.
    pub async fn live_output(&self, run_id: &str) -> Result<Option<OutputSoFar>, StoreError> {
        const OPERATION: &str = "live_output";
        let key = self.keys.live_output(run_id);
        let (output, written_ms, attempt): (Option<Vec<u8>>, Option<String>, Option<String>) =
            redis::cmd("HMGET")
                .arg(&key)
                .arg(&["output", "written_ms", "attempt"])
                .query_async(&mut self.connection.clone())
                .await
                .during(&self.metrics, OPERATION)?;
        let (Some(output), Some(written_ms), Some(attempt)) = (output, written_ms, attempt) else {
            return Ok(None);
        };
        let not_a_number = |field: &str, value: &str| {
            reply_error(
                OPERATION,
                format!("{key} holds {field} {value:?}, not a number"),
            )
        };
        Ok(Some(OutputSoFar {
            output: String::from_utf8_lossy(&output).into_owned(),
            written_ms: written_ms
                .parse()
                .map_err(|_| not_a_number("written_ms", &written_ms))?,
            attempt: attempt
                .parse()
                .map_err(|_| not_a_number("attempt", &attempt))?,
        }))
    }
}
