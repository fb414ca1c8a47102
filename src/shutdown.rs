//! How a task is told to stop: every component's `run` loop takes one, and the metrics endpoint
//! too. A module of its own, below the engine, so that nothing below the engine imports it.

pub use tokio_util::sync::CancellationToken as Shutdown;
