//! redcron is a distributed, Redis-backed replacement for the system crontab and a reliable
//! async task queue. Jobs are declared in TOML schedule files; identical replicas share one
//! Redis, one of them leads and plans the fires, and every fire runs once.
//!
//! # Layout
//! - [`schedule`]: what users declare: the crontab-exact cron engine with Debian's DST rules,
//!   `@every`, schedule files and their diagnostics, jobs, and the crontab importer.
//! - [`cli`]: the `redcron` command line, one file per subcommand.
//!
//! The engine (elector, planner, promoter, workers, reaper) and the Redis store follow the
//! architecture in `DESIGN.md`.

pub mod cli;
pub mod engine;
pub mod handler;
pub mod replica;
pub mod schedule;
pub mod store;
