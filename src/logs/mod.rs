//! Where log lines go: standard error, through a writer that can neither block nor break the
//! engine.
//!
//! A replica keeps running its fires whatever happens to its log stream: a closed pipe (`| head`,
//! a dead `| logger`, a restarted journald), a full device (`2>/dev/full`) or a reader that
//! stalls. Each line is handed to a bounded queue that a thread of its own writes to standard
//! error; a line that finds the queue full, or that the stream refuses, is dropped and counted
//! (`redcron_log_lines_dropped_total`). Nothing else writes to standard error while a replica
//! runs: `eprintln!` panics when the write fails, and a direct write blocks on a stalled stream.

mod journal;

use std::io::{self, IsTerminal, Write};
use std::panic::AssertUnwindSafe;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, fmt};

/// Most log lines waiting for the stream: a burst of a few thousand fires fits, and a stalled
/// reader costs a few MiB at most before lines are dropped.
const QUEUED_LINES: usize = 16_384;

/// Lines the stream refused (closed pipe, full device).
static REFUSED_LINES: AtomicU64 = AtomicU64::new(0);

/// Lines dropped because the queue was full (the stream is slower than the logging).
static QUEUE_DROPS: OnceLock<ErrorCounter> = OnceLock::new();

/// How many log lines were dropped since the process started, for
/// `redcron_log_lines_dropped_total`.
pub fn dropped_lines() -> u64 {
    let queue = QUEUE_DROPS
        .get()
        .map_or(0, |counter| counter.dropped_lines());
    REFUSED_LINES
        .load(Ordering::Relaxed)
        .saturating_add(u64::try_from(queue).unwrap_or(u64::MAX))
}

/// Keeps the writing thread: dropping it writes the lines still queued (for a second at most,
/// so a stalled stream cannot hold up the exit).
#[must_use = "dropping the guard at once would lose the lines logged later"]
pub struct LogGuard(Option<WorkerGuard>);

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.0.take() {
            // The writer's guard prints to standard output when its queue is full at exit,
            // which panics on a closed stream; the exit must go on whatever the streams do.
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| drop(guard)));
        }
    }
}

/// How log lines are written to standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Sends log lines (at the level `RUST_LOG` sets, `info` by default) to standard error in
/// `format`, and panic messages with them; keep the guard until the process exits. Text lines
/// whose standard error is the journal (a systemd service) go to the journal as entries instead,
/// with each value as a field (`JOB`, `RUN`, `ATTEMPT`, ...); JSON lines stay lines.
///
/// ```no_run
/// use redcron::logs::{LogFormat, init};
///
/// // Held until `main` returns: dropping it writes the lines still queued.
/// let _logs = init(LogFormat::Json);
/// tracing::info!("replica starting");
/// ```
pub fn init(format: LogFormat) -> LogGuard {
    let to_journal = format == LogFormat::Text && journal::connected();
    let builder = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(QUEUED_LINES)
        .thread_name("redcron-logs");
    let (writer, guard) = if to_journal {
        builder.finish(Box::new(journal::Journal) as Box<dyn Write + Send>)
    } else {
        builder.finish(Box::new(Stderr) as Box<dyn Write + Send>)
    };
    let _ = QUEUE_DROPS.set(writer.error_counter());
    let layer = fmt::layer()
        .with_writer(writer)
        // Colour only for a person at a terminal, not in journald or a log file.
        .with_ansi(io::stderr().is_terminal())
        // Its fallback reports a failed write with `eprintln!`, which panics on a closed
        // stream; this writer never fails, and dropped lines are counted instead.
        .log_internal_errors(false);
    let layer = match format {
        // The journal's entries are read back from JSON on the writing thread.
        _ if to_journal => layer.json().flatten_event(true).boxed(),
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().boxed(),
    };
    // The redis crate's cluster client warns of every failed attempt to reach a node, hundreds
    // a second during a failover; the components say once a tick what failed.
    let default_filter = || EnvFilter::new("info,redis=error");
    tracing_subscriber::registry()
        .with(EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter()))
        .with(layer)
        .init();
    // The default hook writes to standard error directly: on a stalled stream the panicking
    // thread would block there, and the supervisor would never learn that its component died.
    std::panic::set_hook(Box::new(|panic| {
        let thread = std::thread::current();
        let location = panic
            .location()
            .map(|location| location.to_string())
            .unwrap_or_default();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            location,
            "panicked: {}",
            panic_message(panic.payload())
        );
    }));
    LogGuard(Some(guard))
}

/// The message a panic was raised with.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Standard error for the writing thread: a line the stream refuses is counted and dropped, so
/// that the thread goes on with the next one.
struct Stderr;

impl Write for Stderr {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        if io::stderr().write_all(line).is_err() {
            REFUSED_LINES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
