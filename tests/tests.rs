//! Integration tests: the `redcron` binary as users and scripts run it.

#[allow(dead_code)] // Shared with the chaos runner, which uses the rest of it.
mod util;

mod batches;
mod burst;
mod check;
mod cli_contract;
mod completions;
mod damaged;
mod declarations;
mod defaults;
mod drift;
mod engine;
mod examples;
mod first_hour;
mod fuzz;
mod high_availability;
mod hold;
mod hostile;
mod import_crontab;
mod inspect;
mod journal;
mod late_start;
mod lifecycle;
mod long_outage;
mod next;
mod notices;
mod operate;
mod out_of_memory;
mod output;
mod reload;
mod replicas;
mod restore;
mod rolling_deploy;
mod routing;
mod run_as;
mod run_tree;
mod scripts;
mod security;
mod service;
mod sharing;
mod slots;
mod store;
mod topologies;
mod workers;
mod workflows;
