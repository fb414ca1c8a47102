//! The chaos runner: a real `redis-server` (AOF on, `appendfsync everysec`), or with `--topology`
//! a Sentinel setup or a Redis Cluster, and real `redcron run` replicas on loopback, faults
//! injected from a seeded plan, and a ledger of every run start kept outside Redis (a file the
//! jobs append to), compared at the end, with what Redis recorded (read as the run goes, since a
//! crash or a restore takes Redis back in time), with the fires the schedules define. Without
//! `--scenario` it runs every scenario of the topology.
//!
//! ```sh
//! cargo test --test chaos                                   # the short version CI runs
//! cargo test --release --test chaos -- --minutes 10 [--seed N] [--scenario NAME]... [--replicas N] [--keep]
//! cargo test --release --test chaos -- --topology sentinel|cluster [--replicated-writes N] ...
//! ```
//!
//! It prints one summary line on stdout, the faults and the details on stderr, and exits
//! non-zero when an invariant breaks, keeping the replicas' logs and the ledger for a look
//! (`--keep` keeps them anyway).

#[allow(dead_code)] // Shared with the integration tests, which use the rest of it.
#[path = "../util/node.rs"]
mod node;
#[allow(dead_code)] // Shared with the integration tests, which use the rest of it.
#[path = "../util/cluster.rs"]
mod redis_cluster;
#[allow(dead_code)] // Shared with the integration tests, which use the rest of it.
#[path = "../util/redis_server.rs"]
mod redis_server;
#[allow(dead_code)] // Shared with the integration tests, which use the rest of it.
#[path = "../util/replica.rs"]
mod replica;
#[allow(dead_code)] // Shared with the integration tests, which use the rest of it.
#[path = "../util/sentinel.rs"]
mod sentinel;
#[allow(dead_code)] // Shared with the integration tests, which use the rest of it.
#[path = "../util/wait.rs"]
mod wait;

mod cluster;
mod ledger;
mod observe;
mod plan;
mod topology;

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::Signal;
use redis::Commands;

use cluster::{Cluster, NAMESPACE, keys, now_ms, sleep_until_ms};
use ledger::{Loss, LossKind, Placement, Timeline};
use observe::Observer;
use plan::{
    DOWN, FAILOVER_LIMIT, Fault, LEADER_PAUSE, REDIS_FREEZE, REDIS_STALL, SNAPSHOT_AGE, Scenario,
    Topology,
};
use topology::Redis;
use wait::wait_for;

/// The short version: every fault of the default scenarios once, whatever the seed. At worst
/// (every gap 18 s, or the fault's recovery and 1 s when longer: 33 s for the rolling deploy)
/// the last fault, its recovery and the 5 s the plan leaves after it end 194 s in.
const DEFAULT_MINUTES: f64 = 3.25;

/// After the last fire of the window: long enough for a lost run's lease (3 s), its re-run
/// (6 s) and the crashing job's retries.
const SETTLE_MS: i64 = 15_000;

/// What the command line asks for.
struct Options {
    minutes: f64,
    seed: Option<u64>,
    scenarios: Vec<Scenario>,
    replicas: usize,
    /// The Redis the replicas use.
    topology: Topology,
    /// `redcron run --replicated-writes N`: every state change waits until N replicas of Redis
    /// have it (0: not asked for).
    replicated_writes: u32,
    /// Keep the replicas' logs and the ledger also when every invariant holds.
    keep: bool,
}

/// How the command line was understood: it also takes what `cargo test` passes to every test
/// binary (a name filter, libtest's flags) and what `cargo nextest` asks.
enum Invocation {
    Run(Options),
    List,
    FilteredOut,
}

fn parse(arguments: impl Iterator<Item = String>) -> Result<Invocation, String> {
    let mut options = Options {
        minutes: DEFAULT_MINUTES,
        seed: None,
        scenarios: Vec::new(),
        replicas: 3,
        topology: Topology::Single,
        replicated_writes: 0,
        keep: false,
    };
    let mut filters = Vec::new();
    let mut arguments = arguments.peekable();
    while let Some(argument) = arguments.next() {
        let mut value = |name: &str| {
            arguments
                .next()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match argument.as_str() {
            "--minutes" => {
                options.minutes = value("--minutes")?
                    .parse()
                    .map_err(|_| "--minutes takes a number".to_owned())?;
            }
            "--seed" => {
                options.seed = Some(
                    value("--seed")?
                        .parse()
                        .map_err(|_| "--seed takes an unsigned integer".to_owned())?,
                );
            }
            "--scenario" => {
                let name = value("--scenario")?;
                let scenario = Scenario::parse(&name).ok_or_else(|| {
                    let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                    format!("unknown scenario {name:?}: one of {}", names.join(", "))
                })?;
                options.scenarios.push(scenario);
            }
            "--replicas" => {
                options.replicas = value("--replicas")?
                    .parse()
                    .ok()
                    .filter(|count| *count >= 2)
                    .ok_or_else(|| "--replicas takes a number, 2 or more".to_owned())?;
            }
            "--topology" => {
                let name = value("--topology")?;
                options.topology = Topology::parse(&name).ok_or_else(|| {
                    let names: Vec<&str> = Topology::ALL.iter().map(|t| t.name()).collect();
                    format!("unknown topology {name:?}: one of {}", names.join(", "))
                })?;
            }
            "--replicated-writes" => {
                options.replicated_writes = value("--replicated-writes")?
                    .parse()
                    .map_err(|_| "--replicated-writes takes an unsigned integer".to_owned())?;
            }
            "--keep" => options.keep = true,
            "--list" => return Ok(Invocation::List),
            // libtest's own flags, which `cargo test` may pass to every test binary.
            flag if flag.starts_with('-') => {}
            filter => filters.push(filter.to_owned()),
        }
    }
    if !filters.is_empty()
        && !filters
            .iter()
            .any(|filter| "chaos".contains(filter.as_str()))
    {
        return Ok(Invocation::FilteredOut);
    }
    if options.scenarios.is_empty() {
        options.scenarios = options.topology.default_scenarios();
    }
    let topology = options.topology;
    if let Some(scenario) = options
        .scenarios
        .iter()
        .find(|scenario| !scenario.runs_on(topology))
    {
        let fits: Vec<&str> = Topology::ALL
            .into_iter()
            .filter(|other| scenario.runs_on(*other))
            .map(Topology::name)
            .collect();
        let here: Vec<&str> = Scenario::ALL
            .into_iter()
            .filter(|other| other.runs_on(topology))
            .map(Scenario::name)
            .collect();
        return Err(format!(
            "scenario {} needs --topology {}; on {} the scenarios are {}",
            scenario.name(),
            fits.join(" or "),
            topology.name(),
            here.join(", ")
        ));
    }
    Ok(Invocation::Run(options))
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1)) {
        Ok(Invocation::Run(options)) => options,
        Ok(Invocation::List) => {
            println!("chaos: test");
            return ExitCode::SUCCESS;
        }
        Ok(Invocation::FilteredOut) => return ExitCode::SUCCESS,
        Err(problem) => {
            eprintln!("chaos: {problem}");
            return ExitCode::from(2);
        }
    };
    let report = run(&options);
    eprintln!("{}", report.details);
    println!("{}", report.summary);
    if report.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        for violation in &report.violations {
            eprintln!("invariant broken: {violation}");
        }
        ExitCode::FAILURE
    }
}

/// What a run found.
struct Report {
    summary: String,
    details: String,
    violations: Vec<String>,
}

fn run(options: &Options) -> Report {
    let seed = options
        .seed
        .unwrap_or_else(|| u64::try_from(now_ms()).unwrap_or_default());
    let names: Vec<&str> = options.scenarios.iter().map(|s| s.name()).collect();
    let window_ms = (options.minutes * 60_000.0) as i64;
    let steps = plan::plan(
        seed,
        &options.scenarios,
        Duration::from_millis(window_ms as u64),
        options.replicas,
    );
    eprintln!(
        "chaos: seed {seed}, topology {}, replicated writes {}, scenarios {}, {} replicas, \
         {:.1} min, {} faults",
        options.topology.name(),
        options.replicated_writes,
        names.join(","),
        options.replicas,
        options.minutes,
        steps.len()
    );

    let skewed = options.scenarios.contains(&Scenario::ClockSkew);
    let flags = if options.replicated_writes > 0 {
        vec![
            "--replicated-writes".to_owned(),
            options.replicated_writes.to_string(),
        ]
    } else {
        Vec::new()
    };
    let redis = Redis::start(options.topology);
    let mut cluster = Cluster::start(
        redis,
        options.replicas,
        flags,
        skewed,
        ledger::schedule_file,
    );
    let observer = Observer::start(cluster.locator());
    let mut faults = Faults::default();
    if wait_for(Duration::from_secs(30), || cluster.leader()).is_none() {
        faults
            .violations
            .push("no leader within 30 s of starting".to_owned());
    }
    // A job the leader does not declare is planned once it has read the declarations of the
    // replicas that do: the window opens on a cluster that plans every job.
    if wait_for(Duration::from_secs(30), || placed_jobs_planned(&cluster)).is_none() {
        faults.violations.push(
            "the placed jobs (where, on) not planned, or not every web replica a target, \
             within 30 s of a leader"
                .to_owned(),
        );
    }
    let from = (now_ms() / 1000 + 2) * 1000;
    let to = from + window_ms;
    faults.timeline.from_ms = from;
    faults.timeline.to_ms = to;
    faults.timeline.web_replicas = cluster.web_replicas();
    sleep_until_ms(from + 9_000);
    let memory_baseline = retained_memory(&cluster);

    for step in &steps {
        sleep_until_ms(from + step.at.as_millis() as i64);
        let what = inject(&mut cluster, step.fault, &mut faults);
        eprintln!(
            "chaos: t+{:>5.1}s {}: {what}",
            step.at.as_secs_f64(),
            step.fault
        );
        if what.starts_with("no ") {
            faults.violations.push(format!("{}: {what}", step.fault));
        }
    }
    sleep_until_ms(to + SETTLE_MS);

    let mut violations = std::mem::take(&mut faults.violations);
    violations.extend(cluster.unexpected_exits());
    let logs = cluster.logs();
    let fenced_writes = logs.matches("planner write fenced").count();
    let handed_back_undeclared = logs
        .matches("claimed a run of a job this replica does not declare")
        .count();
    if logs.contains("panicked") {
        violations.push("a replica panicked (see its log)".to_owned());
    }
    violations.extend(cluster.stop());
    // Stopped replicas hand their runs back; what the observer read until then counts.
    let observed = observer.finish();
    let ledger = ledger::read(&cluster.ledger_path());
    let verdict = ledger::judge(&ledger, &observed, &faults.timeline);
    violations.extend(verdict.violations.iter().cloned());
    violations.extend(epoch_violations(&observed.leaders, &faults.restores));

    // Whatever is still active lost its lease for good.
    let stuck = stuck_active(&cluster);
    if stuck > 0 {
        violations.push(format!("{stuck} runs left in active without a live lease"));
    }
    let leaks = leaked_keys(&cluster);
    if !leaks.is_empty() {
        violations.push(format!("keys that never expire: {leaks:?}"));
    }
    // Finished runs are kept 10 s; after that the namespace holds what it held at the
    // baseline, give or take the planned horizon, and the planned fires and definitions of
    // the jobs deploys added.
    std::thread::sleep(Duration::from_secs(11));
    let memory_end = retained_memory(&cluster);
    let added_jobs = ledger::jobs(faults.timeline.deploys.last().map_or(0, |d| d.version)).len()
        - ledger::jobs(0).len();
    // Only on the same node: a failover or a migration moves the namespace to a node whose
    // own overhead (its replication backlog, say) differs.
    let memory_note = match (&memory_baseline, &memory_end) {
        (Some((before, _)), Some((after, _))) if before != after => {
            format!(" memory_check=skipped(namespace moved from {before} to {after})")
        }
        _ => String::new(),
    };
    if let (Some((before, baseline)), Some((after, end))) = (&memory_baseline, &memory_end)
        && before == after
        && *end > baseline + baseline / 10 + 64 * 1024 + added_jobs as i64 * 32 * 1024
    {
        violations.push(format!(
            "Redis memory did not return to its baseline: {baseline} B then {end} B"
        ));
    }

    let summary = format!(
        "topology={} replicated_writes={} \
         fires_expected={} executed={} missed={} duplicated={} reruns_after_lost={} \
         overlap_skips={} unjustified_overlap_skips={} fenced_writes={fenced_writes} \
         lag_ms_p50={} lag_ms_p99={} lag_ms_max={} longest_gap_ms={} \
         every: {} pinned: expected={} executed={} missed={} overlap_skips={} doubled={} \
         wrong_replica={}",
        options.topology.name(),
        options.replicated_writes,
        verdict.fires_expected,
        verdict.executed,
        verdict.missed,
        verdict.duplicated,
        verdict.reruns_after_lost,
        verdict.overlap_skips,
        verdict.unjustified_overlap_skips,
        verdict.lag(0.5),
        verdict.lag(0.99),
        verdict.lag(1.0),
        verdict.longest_gap_ms,
        verdict.every,
        verdict.pinned.expected,
        verdict.pinned.executed,
        verdict.pinned.missed,
        verdict.pinned.skipped_as_overlap,
        verdict.pinned.duplicated,
        verdict.pinned_wrong_replica,
    );
    let details = format!(
        "chaos: seed={seed} scenarios={} faults={} leaders={} epochs={:?} \
         skipped_as_overlap={} stale_overlap_skips={} reruns_after_interrupt={} \
         fsync_window_missed={} fsync_window_duplicated={} restore_window_missed={} \
         restore_window_duplicated={} dead_lost_at_most_once={} \
         dead_interrupted_at_most_once={} optional_fires_run={}/{} \
         handed_back_undeclared={handed_back_undeclared} \
         default_settings=expected:{},executed:{},missed:{},duplicated:{},skipped_as_overlap:{} \
         stuck_active={stuck} memory_baseline={} \
         memory_end={}{memory_note}",
        names.join(","),
        steps.len(),
        observed.leaders.len(),
        observed
            .leaders
            .iter()
            .map(|(_, _, epoch)| *epoch)
            .collect::<Vec<_>>(),
        verdict.skipped_as_overlap,
        verdict.stale_overlap_skips,
        verdict.reruns_after_interrupt,
        verdict.fsync_window_missed,
        verdict.fsync_window_duplicated,
        verdict.restore_window_missed,
        verdict.restore_window_duplicated,
        verdict.dead_lost,
        verdict.dead_interrupted,
        verdict.optional_executed,
        verdict.optional_fires,
        verdict.default_settings.expected,
        verdict.default_settings.executed,
        verdict.default_settings.missed,
        verdict.default_settings.duplicated,
        verdict.default_settings.skipped_as_overlap,
        memory_baseline.map_or("?".to_owned(), |(_, bytes)| bytes.to_string()),
        memory_end.map_or("?".to_owned(), |(_, bytes)| bytes.to_string()),
    );
    if (!violations.is_empty() || options.keep)
        && let Some(kept) = cluster.keep_directory(true)
    {
        eprintln!("chaos: logs and ledger kept in {}", kept.display());
    }
    Report {
        summary,
        details,
        violations,
    }
}

/// What the faults did that the judgement needs.
#[derive(Default)]
struct Faults {
    timeline: Timeline,
    /// Each restore: when Redis was killed to be restored, and the leader epoch in its copy.
    restores: Vec<(i64, u64)>,
    violations: Vec<String>,
}

/// Injects `fault` and waits until it is over; what it did, or why it could not (`no ...`).
fn inject(cluster: &mut Cluster, fault: Fault, faults: &mut Faults) -> String {
    match fault {
        Fault::KillLeader => {
            let Some((id, epoch)) = wait_for(Duration::from_secs(5), || cluster.leader()) else {
                return "no leader to kill".to_owned();
            };
            let index = cluster.index_of(&id).expect("the leader is one of ours");
            cluster.kill_replica(index);
            std::thread::sleep(DOWN);
            cluster.start_replica(index);
            format!("{id} (epoch {epoch})")
        }
        Fault::PauseLeader => {
            let Some((id, epoch)) = wait_for(Duration::from_secs(5), || cluster.leader()) else {
                return "no leader to pause".to_owned();
            };
            let index = cluster.index_of(&id).expect("the leader is one of ours");
            cluster.signal_replica(index, Signal::SIGSTOP);
            std::thread::sleep(LEADER_PAUSE);
            let successor = cluster.leader();
            cluster.signal_replica(index, Signal::SIGCONT);
            format!("{id} (epoch {epoch}); leader meanwhile {successor:?}")
        }
        Fault::KillBusyReplica => {
            let Some((id, run)) = wait_for(Duration::from_secs(10), || busy_replica(cluster))
            else {
                return "no replica running a long job".to_owned();
            };
            let index = cluster.index_of(&id).expect("the worker is one of ours");
            cluster.kill_replica(index);
            std::thread::sleep(DOWN);
            cluster.start_replica(index);
            format!("{id}, running {run}")
        }
        Fault::ShutdownRedis
        | Fault::CrashRedis
        | Fault::FreezeRedis
        | Fault::StallRedis
        | Fault::RestoreRedis => inject_single(cluster, fault, faults),
        Fault::KillPrimary => kill_primary(cluster),
        Fault::KillSlotMaster => kill_slot_master(cluster),
        Fault::MigrateSlot => migrate_slot(cluster),
        Fault::RollingDeploy => {
            let version = faults
                .timeline
                .deploys
                .last()
                .map_or(1, |deploy| deploy.version + 1);
            let (deploy, problems) = cluster.deploy(version);
            faults.timeline.deploys.push(deploy);
            faults.violations.extend(problems);
            format!(
                "version {version} on every replica in {:.1} s",
                (deploy.last_up_ms - deploy.began_ms) as f64 / 1000.0
            )
        }
    }
}

/// Injects one of the faults of a single `redis-server` and waits until it is over.
fn inject_single(cluster: &mut Cluster, fault: Fault, faults: &mut Faults) -> String {
    let Redis::Single(server) = &mut cluster.redis else {
        return format!("no single redis-server to hurt: {fault} needs --topology single");
    };
    match fault {
        Fault::ShutdownRedis => {
            server.restart(DOWN);
            "down 2 s".to_owned()
        }
        Fault::CrashRedis => {
            let killed = now_ms();
            server.crash_and_restart(DOWN);
            // `appendfsync everysec` loses up to about a second of writes, 2 s at worst; runs
            // claimed ahead 200 ms before their fire count as well.
            faults.timeline.losses.push(Loss {
                kind: LossKind::Fsync,
                start_ms: killed - 3_000,
                end_ms: now_ms() + 1_000,
            });
            "down 2 s".to_owned()
        }
        Fault::FreezeRedis => {
            server.signal(Signal::SIGSTOP);
            std::thread::sleep(REDIS_FREEZE);
            server.signal(Signal::SIGCONT);
            "frozen 10 s".to_owned()
        }
        Fault::StallRedis => {
            server.stall(REDIS_STALL);
            std::thread::sleep(REDIS_STALL);
            "every client's commands held 12 s".to_owned()
        }
        Fault::RestoreRedis => {
            // When writes were held off for the copy (what was written after is lost), and the
            // leader epoch in it (a restore takes the epoch counter back to it).
            let (copied_ms, epoch) = server.snapshot(|connection| {
                let copied_ms = now_ms();
                let epoch: Option<u64> = connection.get(keys().epoch()).expect("GET the epoch");
                (copied_ms, epoch.unwrap_or(0))
            });
            std::thread::sleep(SNAPSHOT_AGE);
            let killed = now_ms();
            server.restore_snapshot(DOWN);
            let back = now_ms();
            // Every write since the snapshot is lost; a fire claimed ahead just before it, or
            // whose success was still being batched, counts as well.
            faults.timeline.losses.push(Loss {
                kind: LossKind::Restore,
                start_ms: copied_ms - 1_000,
                end_ms: back + 1_000,
            });
            faults.restores.push((killed, epoch));
            format!(
                "back {:.1} s after a snapshot, with its data (epoch {epoch})",
                (back - copied_ms) as f64 / 1000.0,
            )
        }
        other => format!("no such fault of a single redis-server: {other}"),
    }
}

/// Runs a fault on the Redis topology; a panic of its harness (a node that does not come back,
/// a command refused) becomes a `no ...` answer, which counts as a broken invariant.
fn catching(fault: impl FnOnce() -> String) -> String {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(fault)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("a panic");
        let first = message.lines().next().unwrap_or_default();
        format!("no end to the fault, its harness panicked: {first}")
    })
}

/// Seconds since `start_ms`.
fn seconds_since(start_ms: i64) -> f64 {
    (now_ms() - start_ms) as f64 / 1000.0
}

/// `kill -9` the Sentinel setup's primary, wait for the promotion of its replica, then start
/// the old primary again and wait until the sentinels made it a replica in sync, so that the
/// next failover has a replica to promote.
fn kill_primary(cluster: &mut Cluster) -> String {
    let Redis::Sentinel(setup) = &mut cluster.redis else {
        return "no Sentinel setup: this fault needs --topology sentinel".to_owned();
    };
    catching(|| {
        let killed_ms = now_ms();
        let old = setup.kill9_primary();
        let promoted = setup.wait_for_failover(FAILOVER_LIMIT);
        let promoted_s = seconds_since(killed_ms);
        let new = setup.primary_port();
        setup.restart_old_primary();
        let synced = setup.wait_until_in_sync(FAILOVER_LIMIT);
        let synced_s = seconds_since(killed_ms);
        if !promoted {
            return format!(
                "no promotion within {FAILOVER_LIMIT:?} of killing the primary on port {old}\n{}",
                setup.log()
            );
        }
        if !synced {
            return format!(
                "no sync of the old primary on port {old} with port {new} within \
                 {FAILOVER_LIMIT:?} of its restart\n{}",
                setup.log()
            );
        }
        format!(
            "primary on port {old} killed, port {new} promoted {promoted_s:.1} s later; \
             port {old} a replica in sync again {synced_s:.1} s after the kill"
        )
    })
}

/// `kill -9` the master that serves the namespace's slot, wait until its replica serves it,
/// then start the killed node again and wait until it rejoined as a replica in sync.
fn kill_slot_master(cluster: &mut Cluster) -> String {
    let Redis::Cluster(nodes) = &mut cluster.redis else {
        return "no Redis Cluster: this fault needs --topology cluster".to_owned();
    };
    catching(|| {
        let slot = nodes.slot_of(&format!("{{{NAMESPACE}}}"));
        let killed_ms = now_ms();
        let old = nodes.kill9_master_of_slot(slot);
        let served = nodes.wait_for_slot_served_by_new_master(slot, FAILOVER_LIMIT);
        let served_s = seconds_since(killed_ms);
        let new = nodes.master_of_slot(slot);
        nodes.restart_killed_master();
        let whole = nodes.wait_until_whole(FAILOVER_LIMIT);
        let whole_s = seconds_since(killed_ms);
        if !served {
            return format!(
                "no new master of slot {slot} within {FAILOVER_LIMIT:?} of killing port {old}\n{}",
                nodes.log()
            );
        }
        if !whole {
            return format!(
                "no rejoining of port {old} as a replica in sync within {FAILOVER_LIMIT:?} of \
                 its restart\n{}",
                nodes.log()
            );
        }
        format!(
            "slot {slot}: master on port {old} killed, port {new} serves it {served_s:.1} s \
             later; port {old} a replica in sync again {whole_s:.1} s after the kill"
        )
    })
}

/// Migrates the namespace's slot, keys and all, to another master (the next one by port), the
/// way docs/operations.md asks: with the namespace held (`redcron hold`) while it moves.
fn migrate_slot(cluster: &mut Cluster) -> String {
    let url = cluster.redis.url();
    let Redis::Cluster(nodes) = &mut cluster.redis else {
        return "no Redis Cluster: this fault needs --topology cluster".to_owned();
    };
    catching(|| {
        let slot = nodes.slot_of(&format!("{{{NAMESPACE}}}"));
        let from = nodes.master_of_slot(slot);
        let masters = nodes.masters();
        let Some(to) = masters
            .iter()
            .copied()
            .find(|port| *port > from)
            .or_else(|| masters.iter().copied().find(|port| *port != from))
        else {
            return format!("no other master than port {from} to migrate slot {slot} to");
        };
        let started_ms = now_ms();
        redcron_command(&url, &["hold", "--for", "2m"]);
        nodes.migrate_slot(slot, to);
        redcron_command(&url, &["release"]);
        format!(
            "slot {slot} moved from port {from} to port {to}, the namespace held for {} ms",
            now_ms() - started_ms
        )
    })
}

/// Runs `redcron <args>` on the chaos namespace, and panics (the fault then reports it) unless
/// it succeeds.
fn redcron_command(url: &str, args: &[&str]) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_redcron"))
        .args(args)
        .args(["--redis", url, "--namespace", NAMESPACE])
        .output()
        .expect("start redcron");
    assert!(
        output.status.success(),
        "redcron {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A replica running one of the long jobs right now (started, per the ledger, and not ended),
/// and that run.
fn busy_replica(cluster: &Cluster) -> Option<(String, String)> {
    let ledger = ledger::read(&cluster.ledger_path());
    let running = ledger.iter().filter(|entry| {
        entry.run.starts_with("long-")
            && entry.tag == "start"
            && !ledger
                .iter()
                .any(|other| other.run == entry.run && other.tag == "end")
    });
    let mut connection = cluster.connection(Duration::from_millis(500)).ok()?;
    let active: Vec<String> = connection.zrange(keys().active(), 0, -1).ok()?;
    running
        .filter(|entry| active.contains(&entry.run))
        .find_map(|entry| {
            let worker: Option<String> = connection.hget(keys().run(&entry.run), "worker").ok()?;
            let worker = worker?;
            let (replica, _) = worker.split_once('/')?;
            Some((replica.to_owned(), entry.run.clone()))
        })
}

/// Leaders must come with ever higher epochs: a token seen after another never has a lower
/// or equal epoch (that would be an old leader's write accepted). A restore in between takes
/// the epoch counter back with the rest of the data: the next leader must then be above the
/// copy's epoch (its token still differs from the earlier ones by its replica id, so a leader
/// from before the restore stays fenced).
fn epoch_violations(seen: &[(i64, String, u64)], restores: &[(i64, u64)]) -> Vec<String> {
    seen.windows(2)
        .filter(|pair| {
            let ((before, _, epoch), (after, _, next)) = (&pair[0], &pair[1]);
            let floor = restores
                .iter()
                .filter(|(at, _)| before < at && at <= after)
                .map(|(_, copy)| *copy)
                .min()
                .unwrap_or(*epoch);
            *next <= floor
        })
        .map(|pair| format!("leader {:?} came after {:?}", pair[1], pair[0]))
        .collect()
}

/// Whether the leader plans every placed job (`where`, `on`) of the first version, and every
/// web replica is a target of the every-replica ones.
fn placed_jobs_planned(cluster: &Cluster) -> Option<()> {
    let mut connection = cluster.connection(Duration::from_millis(500)).ok()?;
    let web = cluster.web_replicas().len();
    for job in ledger::jobs(0) {
        if job.placement == Placement::Anywhere {
            continue;
        }
        let planned: bool = connection.hexists(keys().planned(), &job.name).ok()?;
        let targets: usize = connection.zcard(keys().targets(&job.name)).ok()?;
        if !planned || (job.placement == Placement::EveryWeb && targets < web) {
            return None;
        }
    }
    Some(())
}

/// Runs still in the active set once every replica has stopped.
fn stuck_active(cluster: &Cluster) -> usize {
    cluster
        .connection(Duration::from_secs(5))
        .and_then(|mut connection| connection.zcard(keys().active()))
        .unwrap_or(usize::MAX)
}

/// Keys of the namespace with no expiry that nothing refers to: per-run, per-lease and
/// per-fingerprint keys must expire or belong to a run something still holds.
fn leaked_keys(cluster: &Cluster) -> Vec<String> {
    let Ok(mut connection) = cluster.connection(Duration::from_secs(5)) else {
        return vec!["(Redis did not answer)".to_owned()];
    };
    let names: Vec<String> = match connection
        .scan_match::<_, String>(format!("{}*", keys().prefix()))
        .and_then(|names| names.collect())
    {
        Ok(names) => names,
        Err(error) => return vec![format!("(SCAN failed: {error})")],
    };
    let mut held: HashSet<String> = HashSet::new();
    for set in [
        keys().due(),
        keys().due_runs(),
        keys().active(),
        keys().dead(),
    ] {
        let runs: Vec<String> = connection.zrange(set, 0, -1).unwrap_or_default();
        held.extend(runs);
    }
    // Ready runs, cron fires and ad-hoc alike, and runs waiting for a slot of their job.
    for list in names.iter().filter(|name| {
        name.contains(":ready:")
            || name.contains(":ready-fires:")
            || name.contains(":waiting:")
            || name.contains(":undeclared:")
    }) {
        let runs: Vec<String> = connection.lrange(list, 0, -1).unwrap_or_default();
        held.extend(runs);
    }
    let structural = [
        "epoch",
        "cursor",
        "defs",
        "def-hashes",
        "damaged-defs",
        "declared-defs",
        "declarations",
        "due",
        "due-runs",
        "planned",
        "latest-fire",
        "planned-through",
        "active",
        "dead",
        "events",
        "replicas",
        "paused",
        "undeclared-jobs",
        "origin",
        "rewind",
        "ready-queues",
        "ready-queues-walked",
    ];
    names
        .into_iter()
        .filter(|name| {
            let suffix = &name[keys().prefix().len()..];
            let ttl: i64 = connection.ttl(name).unwrap_or(-1);
            ttl == -1
                && !structural.contains(&suffix)
                && !suffix.starts_with("ready:")
                && !suffix.starts_with("ready-fires:")
                && !suffix.starts_with("running:")
                && !suffix.starts_with("waiting:")
                && !suffix.starts_with("undeclared:")
                && !suffix.starts_with("wake:")
                && !suffix
                    .strip_prefix("run:")
                    .is_some_and(|run| held.contains(run))
        })
        .collect()
}

/// `used_memory` less what the namespace keeps on purpose beyond the run: the events stream
/// (capped by length), the dead letters (kept until purged) and the fingerprints (one per fire,
/// kept 7 days whatever the retention), with the node it was read on (`port N`).
fn retained_memory(cluster: &Cluster) -> Option<(String, i64)> {
    let mut connection = cluster.connection(Duration::from_secs(5)).ok()?;
    let server: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection)
        .ok()?;
    let node = server
        .lines()
        .find_map(|line| line.strip_prefix("tcp_port:"))
        .map_or_else(|| "?".to_owned(), |port| format!("port {}", port.trim()));
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut connection)
        .ok()?;
    let used: i64 = info
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))?
        .trim()
        .parse()
        .ok()?;
    let usage = |connection: &mut redis::Connection, name: String| -> i64 {
        redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(name)
            .query::<Option<i64>>(connection)
            .ok()
            .flatten()
            .unwrap_or(0)
    };
    let mut kept = usage(&mut connection, keys().events()) + usage(&mut connection, keys().dead());
    let dead: Vec<String> = connection.zrange(keys().dead(), 0, -1).ok()?;
    for run in dead {
        kept += usage(&mut connection, keys().run(&run));
    }
    let fingerprints: Vec<String> = connection
        .scan_match::<_, String>(keys().fingerprint("*"))
        .and_then(|keys| keys.collect())
        .ok()?;
    for fingerprint in fingerprints {
        kept += usage(&mut connection, fingerprint);
    }
    Some((node, used - kept))
}
