//! redcron is a distributed, Redis-backed replacement for the system crontab and a reliable
//! async task queue. Jobs are declared in TOML schedule files; identical replicas share one
//! Redis, one of them leads and plans the fires, and every fire runs once.
//!
//! # Layout
//! - [`schedule`]: what users declare: the crontab-exact cron engine with Debian's DST rules,
//!   `@every`, schedule files and their diagnostics, jobs, and the crontab importer.
//! - [`store`]: the only code that talks to Redis: key names, one Lua script per run state
//!   change, the embedded `redis-server`.
//! - [`engine`]: the replica's components: elector, planner, promoter, workers, reaper,
//!   heartbeat, one file each.
//! - [`archive`]: where finished runs go to outlive Redis (`--archive`): its URL, its store, its
//!   parts and each day's manifest.
//! - [`handler`]: what executes a run: the command handler, or Rust handlers by job name.
//! - [`payload`]: the rules a run's payload obeys (JSON, its size, a workflow's an object),
//!   which the client, the CLI and the worker all check.
//! - `process`: running and ending OS processes: a command under a supervisor that takes its
//!   whole tree down with the replica, for runs and `exec:` notices alike.
//! - [`replica`]: the components wired together, supervised, and shut down in order.
//! - [`client`]: what other programs do to runs and jobs (enqueue, pause, dead letters), typed.
//! - [`cli`]: the `redcron` command line, one file per subcommand.
//! - [`web`]: the web console and its HTTP API (`redcron web`), on the client and the command
//!   line's `--json` shapes.
//! - [`logs`]: log lines to standard error through a queue that never blocks the engine.
//! - [`metrics`]: Prometheus metrics, `/healthz` and `/readyz`.
//!
//! The data model and the run state machine are in `DESIGN.md`. All keys live under one hash
//! tag, `{ns}:`, and are built by [`store::keys::Keys`] (the scripts use the same suffixes
//! through `lua/include/common.lua`); DESIGN.md's data model lists them.
//!
//! # Library mode
//!
//! ```no_run
//! use redcron::engine::Shutdown;
//! use redcron::handler::{Completed, RunContext};
//! use redcron::replica::Replica;
//! use redcron::store::{Store, StoreSettings};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::connect("redis://127.0.0.1/", "redcron", StoreSettings::default()).await?;
//! let jobs = redcron::schedule::load_dir("schedules".as_ref())?;
//! let replica = Replica::builder(store)
//!     .jobs(jobs)
//!     .handler("resize", |run: RunContext| async move {
//!         println!("resizing for {} (attempt {})", run.run_id, run.attempt);
//!         Ok(Completed::default())
//!     })
//!     .build();
//! let shutdown = Shutdown::new();
//! replica.run(shutdown).await?;
//! # Ok(())
//! # }
//! ```

// The console's handlers await the store's calls, whose futures nest the connection's, deeper
// than rustc's default recursion limit lets it prove them `Send` for the router; so do the
// examples in the docs, compiled as crates of their own.
#![recursion_limit = "256"]
#![doc(test(attr(recursion_limit = "256")))]
pub mod archive;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod engine;
pub mod handler;
pub mod logs;
pub mod metrics;
pub mod notify;
pub mod payload;
mod process;
pub mod replica;
pub mod schedule;
pub mod shutdown;
pub mod store;
mod tls;
#[cfg(feature = "web")]
pub mod web;
