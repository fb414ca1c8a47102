//! Replicas on a Redis that is highly available itself: a Sentinel-managed primary with a
//! replica, and a Redis Cluster. Real `redis-server` processes, real `redcron run` processes,
//! every-second jobs with the default settings (`overlap = "forbid"`, `misfire = "run-once"`)
//! and a ledger outside Redis; each test kills what a failover is about and counts the fires
//! missed and run twice.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tempfile::TempDir;

use crate::util::cluster::RedisCluster;
use crate::util::replica::ReplicaProcess;
use crate::util::sentinel::{MASTER_NAME, SentinelSetup};
use crate::util::{Run, cli_at, one_document, read_ledger, redcron_in, wait_until};

/// Replicas, their schedule directory and their ledger, on the Redis at `url`.
struct Fleet {
    dir: TempDir,
    url: String,
    replicas: Vec<ReplicaProcess>,
}

impl Fleet {
    /// A job `tick` firing every second with the default settings, and one that always fails
    /// (`flaky`, two attempts, a second apart), declared in namespace `namespace` by replicas
    /// r1, r2 and r3 with `extra` flags.
    fn start(url: &str, namespace: &str, extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("schedules")).expect("schedules dir");
        let mut fleet = Self {
            dir,
            url: url.to_owned(),
            replicas: Vec::new(),
        };
        let ledger = fleet.ledger_path();
        std::fs::write(
            fleet.dir.path().join("schedules/jobs.toml"),
            format!(
                "[jobs.tick]\nschedule = \"* * * * * *\"\n\
                 command = \"echo $REDCRON_RUN_ID $(date +%s%3N) >> {ledger}\"\n\n\
                 [jobs.flaky]\ncommand = \"exit 3\"\nretries = 1\nbackoff = \"1s\"\n",
                ledger = ledger.display()
            ),
        )
        .expect("write jobs");
        let mut flags = vec!["--namespace", namespace];
        flags.extend(extra);
        fleet.start_replicas(&flags);
        fleet
    }

    /// Replicas r1, r2 and r3, each serving every namespace of `namespaces` in one process:
    /// namespace `ns` declares `tick-ns`, every second with the default settings, from the
    /// subdirectory `ns` of the schedule directory.
    fn serving(url: &str, namespaces: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut fleet = Self {
            dir,
            url: url.to_owned(),
            replicas: Vec::new(),
        };
        let ledger = fleet.ledger_path();
        for namespace in namespaces {
            let schedules = fleet.dir.path().join("schedules").join(namespace);
            std::fs::create_dir_all(&schedules).expect("schedules dir");
            std::fs::write(
                schedules.join("jobs.toml"),
                format!(
                    "[jobs.tick-{namespace}]\nschedule = \"* * * * * *\"\n\
                     command = \"echo $REDCRON_RUN_ID $(date +%s%3N) >> {ledger}\"\n",
                    ledger = ledger.display()
                ),
            )
            .expect("write jobs");
        }
        let namespaces = namespaces.join(",");
        fleet.start_replicas(&["--namespace", &namespaces]);
        fleet
    }

    fn start_replicas(&mut self, flags: &[&str]) {
        for id in ["r1", "r2", "r3"] {
            let replica = ReplicaProcess::start(
                id,
                &self.url,
                &self.dir.path().join("schedules"),
                self.dir.path(),
                flags,
            );
            self.replicas.push(replica);
        }
    }

    fn ledger_path(&self) -> PathBuf {
        self.dir.path().join("ledger")
    }

    /// How many times each cron fire of `tick` ran, by fire time in seconds.
    fn fires(&self) -> BTreeMap<i64, usize> {
        self.fires_of("tick")
    }

    /// How many times each cron fire of `job` ran, by fire time in seconds.
    fn fires_of(&self, job: &str) -> BTreeMap<i64, usize> {
        let mut fires = BTreeMap::new();
        for (run, _, _) in read_ledger(&self.ledger_path()) {
            if let Some(ms) = run
                .strip_prefix(&format!("{job}@"))
                .and_then(|ms| ms.parse::<i64>().ok())
            {
                *fires.entry(ms / 1000).or_insert(0) += 1;
            }
        }
        fires
    }

    /// Waits until `count` more fires than `after` ran.
    fn wait_for_fires(&self, after: usize, count: usize, limit: Duration) {
        let ran = wait_until(limit, || self.fires().len() >= after + count);
        assert!(
            ran,
            "{count} more fires did not run within {limit:?} (ran {:?})\n{}",
            self.fires(),
            self.logs()
        );
    }

    /// A CLI command in `namespace`.
    fn cli(&self, namespace: &str, args: &[&str]) -> Run {
        let mut all = args.to_vec();
        all.extend(["--redis", &self.url, "--namespace", namespace]);
        redcron_in(self.dir.path(), &all, "")
    }

    fn logs(&self) -> String {
        self.replicas
            .iter()
            .map(|replica| format!("log of {}:\n{}", replica.id, replica.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Stops every replica and checks that every fire of `tick` from the first to the last ran,
    /// once, but for those skipped as the overlap of a run that started late, after a hold or
    /// an outage: the fires due meanwhile run one after another when it ends, and a fire due
    /// on time while one of them still runs is skipped, as `overlap = "forbid"` says
    /// (docs/semantics.md, "Fires that come due together after an outage").
    fn stop_and_assert_every_fire_ran_once_but_behind_late_runs(&mut self) {
        self.stop();
        let (doubled, mut missed) = self.doubled_and_missed("tick");
        missed.retain(|second| !self.skipped_behind_a_late_run("tick", *second));
        assert_eq!(
            (doubled.as_slice(), missed.as_slice()),
            (&[][..], &[][..]),
            "fires of tick run twice, fires missed (not skipped behind a late run)\n{}",
            self.logs()
        );
    }

    /// Stops every replica and checks that every fire of `tick` from the first to the last ran,
    /// and ran once but for those due in the seconds before `killed_ms`, when the primary was
    /// killed: Redis replicates asynchronously, so the lease the run of such a fire took may
    /// be lost with it, and that run run again (docs/operations.md, "What a failover costs"). A fire due
    /// on time while a late one (due during the failover) still ran is skipped as its overlap,
    /// as `overlap = "forbid"` says: that is not a miss.
    fn stop_and_assert_every_fire_ran_once_but_before(&mut self, killed_ms: i64) {
        self.stop();
        let (doubled, mut missed) = self.doubled_and_missed("tick");
        missed.retain(|second| !self.skipped_behind_a_late_run("tick", *second));
        let killed = killed_ms / 1000;
        let window = killed - 3..=killed;
        assert!(
            missed.is_empty() && doubled.iter().all(|second| window.contains(second)),
            "fires missed: {missed:?}; fires run twice: {doubled:?} (only those of {window:?} \
             may be)\n{}",
            self.logs()
        );
    }

    /// Whether the fire of `job` at `second` was recorded as skipped for an overlap with a run
    /// of one of the five fires before it that started, as Redis recorded its start, in the
    /// second before it: a late run (after a hold or a failover), or one run again because the
    /// failover lost its start. The start the run's command writes to the ledger comes later,
    /// after its process started.
    fn skipped_behind_a_late_run(&self, job: &str, second: i64) -> bool {
        let fire_ms = second * 1000;
        let shown = |fire_ms: i64| {
            let shown = self.cli(
                "test",
                &["runs", "show", &format!("{job}@{fire_ms}"), "--json"],
            );
            (shown.code == Some(0)).then(|| one_document(&shown.stdout))
        };
        let Some(run) = shown(fire_ms) else {
            return false;
        };
        let late_run_started =
            (1..=5)
                .filter_map(|back| shown(fire_ms - back * 1000))
                .any(|earlier| {
                    earlier["started_ms"]
                        .as_i64()
                        .is_some_and(|started| (fire_ms - 1000..=fire_ms).contains(&started))
                });
        run["state"] == "skipped" && run["reason"] == "overlap" && late_run_started
    }

    /// Stops every replica, and lets them hand back what they hold.
    fn stop(&mut self) {
        for replica in &mut self.replicas {
            replica.terminate(Duration::from_secs(15));
        }
    }

    /// Checks that every fire of `job` from the first to the last ran, once.
    fn assert_every_fire_ran_once(&self, job: &str) {
        let (doubled, missed) = self.doubled_and_missed(job);
        assert_eq!(
            (doubled.as_slice(), missed.as_slice()),
            (&[][..], &[][..]),
            "fires of {job} run twice, fires missed\n{}",
            self.logs()
        );
    }

    /// Which fires of `job` from the first to the last ran twice, and which did not run.
    fn doubled_and_missed(&self, job: &str) -> (Vec<i64>, Vec<i64>) {
        let fires = self.fires_of(job);
        let doubled = fires
            .iter()
            .filter(|(_, runs)| **runs > 1)
            .map(|(second, _)| *second)
            .collect();
        let (Some(first), Some(last)) = (fires.keys().next(), fires.keys().next_back()) else {
            return (doubled, Vec::new());
        };
        let missed = (*first..=*last)
            .filter(|second| !fires.contains_key(second))
            .collect();
        (doubled, missed)
    }
}

/// `status --json` through `url` names a leader and three live replicas.
fn assert_status_sees_the_fleet(fleet: &Fleet) {
    let mut last = String::new();
    let seen = wait_until(Duration::from_secs(15), || {
        let run = fleet.cli("test", &["status", "--json"]);
        last = format!("{}{}", run.stdout, run.stderr);
        if run.code != Some(0) {
            return false;
        }
        let status = one_document(&run.stdout);
        status["leader"].is_object()
            && status["replicas"]
                .as_array()
                .is_some_and(|replicas| replicas.len() == 3)
    });
    assert!(
        seen,
        "status does not see the fleet: {last}\n{}",
        fleet.logs()
    );
}

/// `trigger tick` through `url` gives a run that runs.
fn assert_trigger_runs(fleet: &Fleet) {
    // Until a replica has declared the job, a trigger is refused as unknown.
    let mut run = cli_at(&fleet.url, fleet.dir.path(), &["trigger", "tick"]);
    wait_until(Duration::from_secs(10), || {
        run = cli_at(&fleet.url, fleet.dir.path(), &["trigger", "tick"]);
        run.code == Some(0)
    });
    assert_eq!(run.code, Some(0), "trigger: {}{}", run.stdout, run.stderr);
    let run_id = run
        .stdout
        .split_whitespace()
        .next()
        .expect("trigger prints the run id first")
        .to_owned();
    let ran = wait_until(Duration::from_secs(10), || {
        read_ledger(&fleet.ledger_path())
            .iter()
            .any(|(run, _, _)| *run == run_id)
    });
    assert!(ran, "triggered run {run_id} did not run\n{}", fleet.logs());
}

#[test]
fn fires_run_once_through_a_sentinel_failover_of_the_primary() {
    let mut setup = SentinelSetup::start();
    let mut fleet = Fleet::start(&setup.url(), "test", &[]);
    assert_status_sees_the_fleet(&fleet);
    assert_trigger_runs(&fleet);
    fleet.wait_for_fires(0, 3, Duration::from_secs(15));

    let before = fleet.fires().len();
    let killed_ms = chrono::Utc::now().timestamp_millis();
    let old = setup.kill9_primary();
    assert!(
        setup.wait_for_failover(Duration::from_secs(30)),
        "the sentinels promoted no replica\n{}",
        setup.log()
    );
    assert_ne!(setup.primary_port(), old);
    fleet.wait_for_fires(before, 5, Duration::from_secs(30));
    assert_status_sees_the_fleet(&fleet);
    assert_trigger_runs(&fleet);

    // A master name the sentinels do not watch is said to be one, with the name.
    let wrong_name = setup.url().replace(MASTER_NAME, "nosuchmaster");
    let error = redcron_in(
        fleet.dir.path(),
        &["status", "--redis", &wrong_name, "--namespace", "test"],
        "",
    )
    .failure(2);
    assert!(
        error.contains("no sentinel that answered watches a primary of that name")
            && error.contains("\"nosuchmaster\""),
        "{error}"
    );

    fleet.stop_and_assert_every_fire_ran_once_but_before(killed_ms);
}

/// A failover asked of Sentinel promotes the replica while the old primary still takes writes
/// for about a second; those are lost. The leader, whose lease survives it, plans again the fires
/// it had planned in that second (a horizon ahead: `--plan-ahead`, here 10 s so that they come
/// due soon), so none is missed when its time comes; a run started in that second may run twice
/// (docs/operations.md, "What a failover costs").
#[test]
fn a_graceful_sentinel_failover_misses_no_fire_planned_before_it() {
    let setup = SentinelSetup::start();
    let mut fleet = Fleet::start(&setup.url(), "test", &["--plan-ahead", "10s"]);
    fleet.wait_for_fires(0, 3, Duration::from_secs(15));
    let asked = chrono::Utc::now().timestamp();
    assert!(
        setup.fail_over_gracefully(Duration::from_secs(30)),
        "the sentinels did not fail over\n{}",
        setup.log()
    );
    // Past the planning horizon: the fires planned in the lost second come due.
    let until = asked + 16;
    let reached = wait_until(Duration::from_secs(60), || {
        fleet
            .fires()
            .keys()
            .next_back()
            .is_some_and(|last| *last >= until)
    });
    assert!(reached, "fires stopped\n{}", fleet.logs());
    fleet.stop();
    let (doubled, mut missed) = fleet.doubled_and_missed("tick");
    // A fire due while a run started late (or again) in the failover still ran is skipped as
    // its overlap, as `overlap = "forbid"` says: that is not a miss.
    missed.retain(|second| !fleet.skipped_behind_a_late_run("tick", *second));
    assert_eq!(
        missed,
        Vec::<i64>::new(),
        "fires missed (doubled: {doubled:?}, asked at {asked})\n{}",
        fleet.logs()
    );
    assert!(
        doubled
            .iter()
            .all(|second| (asked - 1..=asked + 5).contains(second)),
        "fires run twice outside the failover: {doubled:?} (asked at {asked})\n{}",
        fleet.logs()
    );
}

#[test]
fn replicated_writes_wait_for_the_replica_and_fail_while_it_is_gone() {
    let mut setup = SentinelSetup::start();
    let mut fleet = Fleet::start(&setup.url(), "test", &["--replicated-writes", "1"]);
    assert_status_sees_the_fleet(&fleet);
    fleet.wait_for_fires(0, 3, Duration::from_secs(15));

    let before = fleet.fires().len();
    setup.kill9_primary();
    assert!(
        setup.wait_for_failover(Duration::from_secs(30)),
        "the sentinels promoted no replica\n{}",
        setup.log()
    );
    // The promoted replica has no replica of its own until the old primary comes back as one:
    // until then no state change counts as done, so no fire runs: an absence, which only a
    // time can show.
    std::thread::sleep(Duration::from_secs(3));
    let stalled = fleet.fires().len();
    assert!(
        stalled <= before + 2,
        "fires ran without a replica to take their writes: {} before, {stalled} after",
        before
    );
    let trigger = cli_at(
        &fleet.url,
        fleet.dir.path(),
        &["trigger", "tick", "--replicated-writes", "1"],
    );
    assert_ne!(trigger.code, Some(0), "a trigger no replica took succeeded");
    assert!(
        trigger.stderr.contains("replicas"),
        "the error says why: {}",
        trigger.stderr
    );

    setup.restart_old_primary();
    assert!(
        setup.wait_until_in_sync(Duration::from_secs(30)),
        "{}",
        setup.log()
    );
    fleet.wait_for_fires(stalled, 5, Duration::from_secs(30));
    fleet.stop();
    let (doubled, _) = fleet.doubled_and_missed("tick");
    assert_eq!(
        doubled,
        Vec::<i64>::new(),
        "fires run twice\n{}",
        fleet.logs()
    );
}

#[test]
fn fires_retries_dead_letters_and_the_cli_work_on_a_cluster_through_a_master_failover() {
    let mut cluster = RedisCluster::start();
    let mut fleet = Fleet::start(&cluster.url(), "test", &[]);
    assert_status_sees_the_fleet(&fleet);
    assert_trigger_runs(&fleet);

    // A run that fails twice ends dead, through its retry.
    let run = fleet.cli("test", &["trigger", "flaky"]);
    assert_eq!(
        run.code,
        Some(0),
        "trigger flaky: {}{}",
        run.stdout,
        run.stderr
    );
    let runs = fleet.cli("test", &["runs", "list", "--json"]);
    assert_eq!(runs.code, Some(0), "runs list: {}", runs.stderr);
    let dead = wait_until(Duration::from_secs(15), || {
        let run = fleet.cli("test", &["dead", "list", "--json"]);
        run.code == Some(0) && run.stdout.contains("flaky")
    });
    assert!(dead, "the flaky run did not end dead\n{}", fleet.logs());
    let enqueue = fleet.cli("test", &["enqueue", "tick", "--in", "1s"]);
    assert_eq!(
        enqueue.code,
        Some(0),
        "enqueue: {}{}",
        enqueue.stdout,
        enqueue.stderr
    );
    fleet.wait_for_fires(0, 3, Duration::from_secs(15));

    let slot = cluster.slot_of("{test}");
    let before = fleet.fires().len();
    let killed_ms = chrono::Utc::now().timestamp_millis();
    let old = cluster.kill9_master_of_slot(slot);
    assert!(
        cluster.wait_for_slot_served_by_new_master(slot, Duration::from_secs(30)),
        "no replica took over the slot\n{}",
        cluster.log()
    );
    assert_ne!(cluster.master_of_slot(slot), old);
    fleet.wait_for_fires(before, 5, Duration::from_secs(30));
    assert_status_sees_the_fleet(&fleet);

    fleet.stop_and_assert_every_fire_ran_once_but_before(killed_ms);
}

/// One fleet of replicas spreads two namespaces over two masters: each process serves both.
#[test]
fn one_fleet_serves_two_namespaces_on_two_masters_of_a_cluster() {
    let cluster = RedisCluster::start();
    let (first, second) = cluster.namespaces_on_different_masters();
    assert_ne!(
        cluster.master_of_slot(cluster.slot_of(&format!("{{{first}}}"))),
        cluster.master_of_slot(cluster.slot_of(&format!("{{{second}}}")))
    );
    let mut fleet = Fleet::serving(&cluster.url(), &[&first, &second]);
    for namespace in [&first, &second] {
        let job = format!("tick-{namespace}");
        let ran = wait_until(Duration::from_secs(20), || fleet.fires_of(&job).len() >= 3);
        assert!(ran, "{job} did not run\n{}", fleet.logs());
        let run = fleet.cli(namespace, &["status", "--json"]);
        assert_eq!(run.code, Some(0), "status: {}", run.stderr);
        let status = one_document(&run.stdout);
        assert!(status["leader"].is_object(), "{status}");
        assert_eq!(
            status["replicas"].as_array().map(Vec::len),
            Some(3),
            "{status}"
        );
        let jobs = fleet.cli(namespace, &["jobs", "--json"]);
        assert!(
            jobs.stdout.contains(&job),
            "{namespace} declares {job}: {}",
            jobs.stdout
        );
    }
    let both = fleet.cli(&format!("{first},{second}"), &["status"]);
    assert_eq!(
        both.code,
        Some(2),
        "status reads one namespace: {}",
        both.stderr
    );
    assert!(both.stderr.contains("once for each"), "{}", both.stderr);
    fleet.stop();
    for namespace in [&first, &second] {
        fleet.assert_every_fire_ran_once(&format!("tick-{namespace}"));
    }
}

/// The procedure docs/operations.md gives: `redcron hold`, move the slot, `redcron release`. The keys move
/// one at a time, so the slot stays half moved for seconds, as a large namespace's would.
#[test]
fn fires_run_once_while_the_namespace_is_held_and_its_slot_moves_key_by_key() {
    let cluster = RedisCluster::start();
    let mut fleet = Fleet::start(&cluster.url(), "test", &[]);
    fleet.wait_for_fires(0, 3, Duration::from_secs(20));
    let slot = cluster.slot_of("{test}");
    let from = cluster.master_of_slot(slot);
    let to = cluster
        .masters()
        .into_iter()
        .find(|master| *master != from)
        .expect("another master");

    let held = fleet.cli("test", &["hold", "--for", "2m"]).success();
    assert!(held.contains("held for 2m"), "{held}");
    let status = one_document(&fleet.cli("test", &["status", "--json"]).success());
    let held_ms = status["held_ms"].as_u64().expect("held_ms while held");
    assert!((100_000..=120_000).contains(&held_ms), "{held_ms}");
    let noticed = wait_until(Duration::from_secs(10), || {
        fleet.logs().matches("the namespace is held").count() == 3
    });
    assert!(
        noticed,
        "the replicas do not say they are held\n{}",
        fleet.logs()
    );
    let before = fleet.fires().len();
    cluster.migrate_slot_key_by_key(slot, to, Duration::from_millis(20));
    assert_eq!(cluster.master_of_slot(slot), to);
    // At most a run claimed ahead before the hold started meanwhile.
    let while_held = fleet.fires().len() - before;
    assert!(
        while_held <= 1,
        "{while_held} fires ran while held\n{}",
        fleet.logs()
    );
    let released = fleet.cli("test", &["release"]).success();
    assert!(released.contains("released"), "{released}");

    fleet.wait_for_fires(before, 5, Duration::from_secs(30));
    assert_status_sees_the_fleet(&fleet);
    let status = one_document(&fleet.cli("test", &["status", "--json"]).success());
    assert!(status["held_ms"].is_null(), "{status}");
    let logs = fleet.logs();
    assert!(logs.contains("hold ended"), "{logs}");
    fleet.stop_and_assert_every_fire_ran_once_but_behind_late_runs();
}
