//! What Redis did for each run the benchmark moved: `INFO commandstats` and `INFO cpu`, read
//! before and after a phase, on a connection of the benchmark's own.
//!
//! Redis counts a command a script runs twice over: once under its own name (`hset`), and once
//! inside the script's call (`evalsha`), whose time includes that of every command it ran. So
//! the figures keep the two apart, each counting every command once: the commands Redis ran,
//! whether a client sent them or a script did ([`Work::commands`]), and the script calls that
//! ran some of them ([`Work::scripts`]), whose time overlaps the commands' and is never added to
//! it. Redis's CPU ([`Work::cpu_us`]) counts everything once, the scripts' own Lua included.

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::CliError;
use crate::store::{StoreError, Topology};

/// The commands that run a script: their `usec` includes the commands the script ran.
const SCRIPT_CALLS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];

/// The command the counters are read with, which no figure counts.
const READING: &str = "info";

/// How long reading the counters may take: Redis answers after the phase's last command.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads the counters of the one Redis the benchmark runs against.
pub(super) struct Counters {
    connection: MultiplexedConnection,
}

/// One command's counters, or their difference over a phase.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Tally {
    /// Times Redis ran it.
    pub(super) calls: u64,
    /// Microseconds it took, as Redis measures them (wall time inside Redis).
    pub(super) usec: u64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Default)]
pub(super) struct Snapshot {
    /// Every command's tally, by the name `INFO commandstats` gives it (`hset`, `script|load`).
    commands: BTreeMap<String, Tally>,
    /// Redis's CPU time, user and system, in microseconds.
    cpu_us: u64,
}

impl Counters {
    /// A connection to the Redis of `topology` when it is one server; `None` on Sentinel or
    /// Cluster, whose figures the benchmark does not report (a namespace's keys live on one
    /// master, but the work a replica gives the others would be missed).
    ///
    /// # Errors
    /// Redis unreachable.
    pub(super) async fn connect(topology: &Topology) -> Result<Option<Self>, CliError> {
        let Topology::Single(client) = topology else {
            return Ok(None);
        };
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(Some(READ_TIMEOUT));
        let connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(failed)?;
        Ok(Some(Self { connection }))
    }

    /// The counters now.
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn read(&mut self) -> Result<Snapshot, CliError> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .arg("cpu")
            .query_async(&mut self.connection)
            .await
            .map_err(failed)?;
        Ok(Snapshot::parse(&info))
    }
}

/// A failed read of the counters, as the store's errors say a failed command.
fn failed(source: redis::RedisError) -> CliError {
    CliError::Store(StoreError::Redis {
        operation: "INFO commandstats cpu",
        source,
    })
}

impl Snapshot {
    /// Reads `INFO commandstats cpu`'s text; a line it cannot read is left out.
    fn parse(info: &str) -> Self {
        let mut snapshot = Self::default();
        let mut cpu_s = 0.0;
        for line in info.lines() {
            if let Some((name, stats)) = line
                .strip_prefix("cmdstat_")
                .and_then(|line| line.split_once(':'))
            {
                let field = |wanted: &str| {
                    stats
                        .split(',')
                        .find_map(|field| field.strip_prefix(wanted)?.strip_prefix('='))
                        .and_then(|value| value.trim().parse::<u64>().ok())
                };
                if let (Some(calls), Some(usec)) = (field("calls"), field("usec")) {
                    snapshot
                        .commands
                        .insert(name.to_owned(), Tally { calls, usec });
                }
            } else if let Some(seconds) = line
                .strip_prefix("used_cpu_sys:")
                .or_else(|| line.strip_prefix("used_cpu_user:"))
            {
                cpu_s += seconds.trim().parse::<f64>().unwrap_or_default();
            }
        }
        snapshot.cpu_us = (cpu_s * 1e6).round() as u64;
        snapshot
    }
}

/// What Redis did between two snapshots, for `units` runs.
#[derive(Debug, Clone)]
pub(super) struct Work {
    /// Runs the phase moved: every figure is per run.
    units: usize,
    /// Each command's tally over the phase, the script calls among them, `INFO` left out.
    delta: Vec<(String, Tally)>,
    /// Redis's CPU over the phase, microseconds.
    cpu_us: u64,
}

impl Work {
    /// What Redis did from `before` to `after`, for `units` runs.
    pub(super) fn between(before: &Snapshot, after: &Snapshot, units: usize) -> Self {
        let delta = after
            .commands
            .iter()
            .filter(|(name, _)| name.as_str() != READING)
            .map(|(name, now)| {
                let then = before.commands.get(name).copied().unwrap_or_default();
                let tally = Tally {
                    calls: now.calls.saturating_sub(then.calls),
                    usec: now.usec.saturating_sub(then.usec),
                };
                (name.clone(), tally)
            })
            .filter(|(_, tally)| tally.calls > 0)
            .collect();
        Self {
            units,
            delta,
            cpu_us: after.cpu_us.saturating_sub(before.cpu_us),
        }
    }

    /// Every command Redis ran, once each, whether a client sent it or a script ran it, the
    /// script calls themselves apart: per run.
    pub(super) fn commands(&self) -> PerRun {
        self.summed(|name| !is_script_call(name))
    }

    /// The script calls (`EVALSHA`...), their time including the commands they ran: per run.
    pub(super) fn scripts(&self) -> PerRun {
        self.summed(is_script_call)
    }

    /// Redis's CPU time, user and system, microseconds per run: everything it did once, the
    /// scripts' own Lua and the network included.
    pub(super) fn cpu_us(&self) -> f64 {
        self.cpu_us as f64 / self.units.max(1) as f64
    }

    /// The `count` commands Redis ran most per run (script calls among them), most first.
    pub(super) fn top(&self, count: usize) -> Vec<(&str, PerRun)> {
        let mut top: Vec<(&str, PerRun)> = self
            .delta
            .iter()
            .map(|(name, tally)| (name.as_str(), self.per_run(*tally)))
            .collect();
        top.sort_by(|a, b| b.1.calls.total_cmp(&a.1.calls).then(a.0.cmp(b.0)));
        top.truncate(count);
        top
    }

    fn summed(&self, counted: impl Fn(&str) -> bool) -> PerRun {
        let total = self.delta.iter().filter(|(name, _)| counted(name)).fold(
            Tally::default(),
            |sum, (_, tally)| Tally {
                calls: sum.calls + tally.calls,
                usec: sum.usec + tally.usec,
            },
        );
        self.per_run(total)
    }

    fn per_run(&self, tally: Tally) -> PerRun {
        let units = self.units.max(1) as f64;
        PerRun {
            calls: tally.calls as f64 / units,
            us: tally.usec as f64 / units,
        }
    }
}

/// A tally divided by the runs of its phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct PerRun {
    /// Calls per run.
    pub(super) calls: f64,
    /// Microseconds per run.
    pub(super) us: f64,
}

fn is_script_call(name: &str) -> bool {
    SCRIPT_CALLS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# Commandstats\r\n\
        cmdstat_hset:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_evalsha:calls=1,usec=30,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=4,usec=400,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n\
        \r\n# CPU\r\nused_cpu_sys:1.000000\r\nused_cpu_user:2.000000\r\n\
        used_cpu_sys_children:0.000000\r\nused_cpu_sys_main_thread:0.900000\r\n";

    const AFTER: &str = "# Commandstats\r\n\
        cmdstat_hset:calls=410,usec=820,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_evalsha:calls=5,usec=2030,usec_per_call=406.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_script|load:calls=2,usec=80,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_info:calls=5,usec=500,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n\
        \r\n# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:3.500000\r\n\
        used_cpu_sys_children:9.000000\r\nused_cpu_sys_main_thread:1.200000\r\n";

    fn work() -> Work {
        Work::between(&Snapshot::parse(BEFORE), &Snapshot::parse(AFTER), 100)
    }

    #[test]
    fn commands_count_what_scripts_ran_once_and_script_calls_apart() {
        let work = work();
        // 400 HSET (each run by a script or not, once) and 2 SCRIPT LOAD; the 4 EVALSHA apart.
        assert_eq!(
            work.commands(),
            PerRun {
                calls: 4.02,
                us: 8.8
            }
        );
        assert_eq!(
            work.scripts(),
            PerRun {
                calls: 0.04,
                us: 20.0
            }
        );
    }

    #[test]
    fn the_reads_of_the_counters_are_left_out() {
        assert!(work().top(10).iter().all(|(name, _)| *name != "info"));
    }

    #[test]
    fn cpu_is_user_and_system_of_the_server_alone() {
        // 0.5 s system and 1.5 s user over 100 runs; the children's and the main thread's
        // lines are not added again.
        assert!((work().cpu_us() - 20_000.0).abs() < 1e-6);
    }

    #[test]
    fn top_lists_the_most_called_first() {
        let work = work();
        let names: Vec<&str> = work.top(2).iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["hset", "evalsha"]);
    }
}
