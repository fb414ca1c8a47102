//! How a task is told to stop: every component's `run` loop takes one, and the metrics endpoint
//! too. A module of its own, below the engine, so that nothing below the engine imports it.

/// Clones share one token: cancelling any of them cancels all, and every child token made from
/// them.
///
/// ```
/// use redcron::shutdown::Shutdown;
///
/// let shutdown = Shutdown::new();
/// // Given to a replica; the metrics endpoint gets a clone, to stop with it.
/// let endpoint = shutdown.clone();
/// shutdown.cancel();
/// assert!(endpoint.is_cancelled());
/// ```
pub use tokio_util::sync::CancellationToken as Shutdown;
