//! Integration tests: the `redcron` binary as users and scripts run it.

mod util;

mod check;
mod engine;
mod import_crontab;
mod next;
mod operate;
mod replicas;
mod store;
