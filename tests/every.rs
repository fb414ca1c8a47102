//! Jobs that run on every replica, or on the replicas they choose: with real replica processes,
//! each fire of an `on = "every"` job runs once on each matching replica and never on another,
//! through kills, restarts and replicas gone for good; a job pinned with `where` never runs
//! elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{Scenario, fire_ms};
use crate::util::{cli, free_port, http_get, keys, one_document, read_ledger, wait_until};
use redis::Commands;

/// One line of the ledger: run id, start ms on the replica's clock, and the replica that ran
/// it (its `NODE`), with `-end` when the line marks the end of the run.
type Line = (String, i64, String);

/// The fires (run ids without the replica) each replica ran (started), by replica.
fn started_by(scenario: &Scenario) -> BTreeMap<String, BTreeSet<String>> {
    let mut started: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (run, _, node) in scenario.ledger() {
        if !node.ends_with("-end") {
            let fire = run.rsplit_once(':').map_or(run.as_str(), |(fire, _)| fire);
            started.entry(node).or_default().insert(fire.to_owned());
        }
    }
    started
}

/// Asserts that every run in `lines` ran on the replica its id names, and started once.
#[track_caller]
fn each_run_once_on_its_own_replica(lines: &[Line], logs: &str) {
    let mut seen = BTreeSet::new();
    for (run, _, node) in lines.iter().filter(|(_, _, node)| !node.ends_with("-end")) {
        assert!(
            run.ends_with(&format!(":{node}")),
            "{run} ran on {node}, not on its own replica\n{lines:?}\n{logs}"
        );
        assert!(
            seen.insert(run.clone()),
            "{run} ran twice\n{lines:?}\n{logs}"
        );
    }
}

#[test]
fn an_every_replica_job_runs_each_fire_once_on_each_matching_replica_and_nowhere_else() {
    let scenario = Scenario::new();
    let job = format!(
        "[jobs.rotate]\nschedule = \"@every 1s\"\non = \"every\"\nwhere = [\"role=web\"]\n\
         command = \"{}\"\n",
        scenario.record("$NODE")
    );
    scenario.write_jobs(&job);
    let replicas = [
        scenario.node("web1", &["--label", "role=web"]),
        // Labels from the environment, as the service unit's /etc/default/redcron gives them.
        scenario.node_with_env("web2", &[], &[("REDCRON_LABELS", "role=web,dc=eu")]),
        scenario.node("db1", &["--label", "role=db"]),
    ];
    let logs = || ReplicaProcess::logs(&replicas);
    // Fires both web replicas ran: four of them show the fan-out is no accident of timing.
    let both = || {
        let started = started_by(&scenario);
        let empty = BTreeSet::new();
        let web1 = started.get("web1").unwrap_or(&empty);
        let web2 = started.get("web2").unwrap_or(&empty);
        web1.intersection(web2).count()
    };
    assert!(
        wait_until(Duration::from_secs(30), || both() >= 4),
        "{:?}\n{}",
        scenario.ledger(),
        logs()
    );
    let lines = scenario.ledger();
    each_run_once_on_its_own_replica(&lines, &logs());
    assert!(
        lines.iter().all(|(_, _, node)| node != "db1"),
        "db1 does not carry role=web: {lines:?}"
    );
    // status shows what each replica carries.
    let status =
        one_document(&cli(&scenario.server, scenario.dir.path(), &["status", "--json"]).success());
    let web2 = status["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .find(|replica| replica["id"] == "web2")
        .expect("web2 in status")
        .clone();
    let labels: Vec<&str> = web2["labels"]
        .as_array()
        .expect("labels")
        .iter()
        .filter_map(|label| label.as_str())
        .collect();
    assert!(
        labels.contains(&"role=web")
            && labels.contains(&"dc=eu")
            && labels.contains(&"replica=web2"),
        "{web2}"
    );
    // jobs says where the job runs, and how each replica's last run went.
    let jobs =
        one_document(&cli(&scenario.server, scenario.dir.path(), &["jobs", "--json"]).success());
    let rotate = &jobs["jobs"][0];
    assert_eq!(
        (rotate["on"].as_str(), rotate["where"].clone()),
        (Some("every"), serde_json::json!(["role=web"])),
        "{jobs}"
    );
    let last: Vec<(&str, &str)> = rotate["last_by_replica"]
        .as_array()
        .expect("last_by_replica")
        .iter()
        .filter_map(|last| Some((last["replica"].as_str()?, last["outcome"].as_str()?)))
        .collect();
    assert_eq!(
        last,
        [("web1", "succeeded"), ("web2", "succeeded")],
        "{jobs}"
    );
    let checked = crate::util::redcron_in(
        scenario.dir.path(),
        &["check", "--schedules", "schedules"],
        "",
    )
    .success();
    assert!(
        checked.contains("job rotate: runs each fire on every replica with role=web"),
        "{checked}"
    );
    let text = cli(&scenario.server, scenario.dir.path(), &["jobs"]).success();
    assert!(
        text.contains(
            "rotate: runs each fire on every replica with role=web; last: web1 succeeded"
        ),
        "{text}"
    );
}

#[test]
fn overlap_of_an_every_replica_job_counts_per_replica() {
    let scenario = Scenario::new();
    // Default overlap for a scheduled job: forbid. Each run lasts longer than the period.
    let job = format!(
        "[jobs.sync]\nschedule = \"@every 1s\"\non = \"every\"\n\
         command = \"{}; sleep 2.5; {}\"\n",
        scenario.record("$NODE"),
        scenario.record("$NODE-end")
    );
    scenario.write_jobs(&job);
    let replicas = [scenario.node("a", &[]), scenario.node("b", &[])];
    let logs = || ReplicaProcess::logs(&replicas);
    let ended = |node: &str| {
        scenario
            .ledger()
            .iter()
            .filter(|(_, _, tag)| *tag == format!("{node}-end"))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(40), || ended("a") >= 2
            && ended("b") >= 2),
        "{:?}\n{}",
        scenario.ledger(),
        logs()
    );
    let lines = scenario.ledger();
    each_run_once_on_its_own_replica(&lines, &logs());
    // Each replica's runs, as (start, end) intervals.
    let mut intervals: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for (run, start, node) in lines.iter().filter(|(_, _, node)| !node.ends_with("-end")) {
        if let Some((_, end, _)) = lines
            .iter()
            .find(|(other, _, tag)| other == run && *tag == format!("{node}-end"))
        {
            intervals
                .entry(node.clone())
                .or_default()
                .push((*start, *end));
        }
    }
    for (node, runs) in &intervals {
        for pair in runs.windows(2) {
            assert!(
                pair[1].0 >= pair[0].1,
                "{node} ran two runs of a forbid job at once: {runs:?}\n{}",
                logs()
            );
        }
    }
    // Across replicas, one replica's run never holds back the other's: their runs overlap in
    // time, which one slot for the whole job would forbid. (Which fires each replica runs
    // depends on the fire each took first, so the runs need not start together.)
    let side_by_side = intervals.get("a").map_or(0, |on_a| {
        on_a.iter()
            .map(|(start, end)| {
                intervals.get("b").map_or(0, |on_b| {
                    on_b.iter()
                        .filter(|(other_start, other_end)| other_start < end && start < other_end)
                        .count()
                })
            })
            .sum::<usize>()
    });
    assert!(
        side_by_side >= 2,
        "runs of a and b that ran side by side: {side_by_side}\n{lines:?}\n{}",
        logs()
    );
}

#[test]
fn a_pinned_job_never_runs_elsewhere_when_its_replica_is_killed() {
    let scenario = Scenario::new();
    let ticks = scenario.dir.path().join("ticks");
    let jobs = format!(
        "[jobs.renew-cert]\nschedule = \"@every 1s\"\nwhere = [\"box=b\"]\ncommand = \"{}\"\n\n\
         [jobs.tick]\nschedule = \"@every 1s\"\ncommand = 'echo \"$REDCRON_RUN_ID $(date +%s%3N) $NODE\" >> {}'\n",
        scenario.record("$NODE"),
        ticks.display()
    );
    scenario.write_jobs(&jobs);
    let mut replicas = [
        scenario.node("a", &["--label", "box=a"]),
        scenario.node("b", &["--label", "box=b"]),
        scenario.node("c", &["--label", "box=c"]),
    ];
    let logs = |replicas: &[ReplicaProcess]| ReplicaProcess::logs(replicas);
    assert!(
        wait_until(Duration::from_secs(20), || scenario.ledger().len() >= 2),
        "{}",
        logs(&replicas)
    );
    replicas[1].kill9();
    // Ten fires of the cluster-wide job later: past b's leases and heartbeats, where a run
    // handed to another replica would have run.
    let ticked = read_ledger(&ticks).len();
    assert!(
        wait_until(Duration::from_secs(30), || read_ledger(&ticks).len()
            >= ticked + 10),
        "{}",
        logs(&replicas)
    );
    let lines = scenario.ledger();
    assert!(
        lines.iter().all(|(_, _, node)| node == "b"),
        "the job pinned to box=b ran elsewhere: {lines:?}\n{}",
        logs(&replicas)
    );
}

#[test]
fn a_replica_killed_mid_run_runs_its_own_run_again_when_it_comes_back_and_no_other() {
    let scenario = Scenario::new();
    let job = format!(
        "[jobs.backup-local]\nschedule = \"@every 8s\"\non = \"every\"\n\
         command = \"{}; sleep 3; {}\"\n",
        scenario.record("$NODE"),
        scenario.record("$NODE-end")
    );
    scenario.write_jobs(&job);
    let mut replicas = vec![
        scenario.node("a", &[]),
        scenario.node("b", &[]),
        scenario.node("c", &[]),
    ];
    // A run of b's that has started and not ended.
    let running_on_b = || {
        let lines = scenario.ledger();
        lines
            .iter()
            .find(|(run, _, node)| {
                node == "b"
                    && !lines
                        .iter()
                        .any(|(other, _, tag)| other == run && tag == "b-end")
            })
            .map(|(run, _, _)| run.clone())
    };
    let mut interrupted = None;
    assert!(
        wait_until(Duration::from_secs(30), || {
            interrupted = running_on_b();
            interrupted.is_some()
        }),
        "{}",
        ReplicaProcess::logs(&replicas)
    );
    let interrupted = interrupted.expect("a run of b");
    replicas[1].kill9();
    replicas[1] = scenario.node("b", &[]);
    let ended = |run: &str| {
        scenario
            .ledger()
            .iter()
            .filter(|(other, _, tag)| other == run && tag.ends_with("-end"))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(40), || ended(&interrupted) == 1),
        "{interrupted} did not run again on b\n{:?}\n{}",
        scenario.ledger(),
        ReplicaProcess::logs(&replicas)
    );
    let lines = scenario.ledger();
    let runs_of_it: Vec<&Line> = lines
        .iter()
        .filter(|(run, _, _)| *run == interrupted)
        .collect();
    assert!(
        runs_of_it.iter().all(|(_, _, node)| node.starts_with('b')),
        "{runs_of_it:?}"
    );
    assert_eq!(
        runs_of_it.iter().filter(|(_, _, node)| node == "b").count(),
        2,
        "started on b, killed, and started once more: {runs_of_it:?}"
    );
    // Every run that ended did so once, on its own replica.
    let mut ends = BTreeSet::new();
    for (run, _, tag) in lines.iter().filter(|(_, _, tag)| tag.ends_with("-end")) {
        assert!(
            run.ends_with(&format!(":{}", tag.trim_end_matches("-end"))),
            "{lines:?}"
        );
        assert!(ends.insert(run.clone()), "{run} ended twice: {lines:?}");
    }
}

#[test]
fn a_target_down_at_the_due_time_runs_when_back_within_the_threshold_and_is_skipped_after() {
    // A short misfire threshold, so that being away longer than it takes seconds, not minutes.
    let threshold = ["--misfire-threshold", "6s"];
    let scenario = Scenario::new();
    let job = format!(
        "[jobs.logs-clean]\nschedule = \"@every 2s\"\non = \"every\"\ncommand = \"{}\"\n",
        scenario.record("$NODE")
    );
    scenario.write_jobs(&job);
    // a and c skip b's runs once it is gone: their metrics count it.
    let ports = [free_port(), free_port()];
    let metrics_at = |port: u16| format!("127.0.0.1:{port}");
    let (at_a, at_c) = (metrics_at(ports[0]), metrics_at(ports[1]));
    let mut replicas = vec![
        scenario.node("a", &[threshold[0], threshold[1], "--metrics-addr", &at_a]),
        scenario.node("b", &threshold),
        scenario.node("c", &[threshold[0], threshold[1], "--metrics-addr", &at_c]),
    ];
    let ran = |node: &str| started_by(&scenario).get(node).cloned().unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || !ran("b").is_empty()),
        "{}",
        ReplicaProcess::logs(&replicas)
    );
    // Away for a short while: the fires due meanwhile wait for b, which runs them once back.
    replicas[1].terminate(Duration::from_secs(10));
    let away_from = ran("a").iter().map(|fire| fire_ms(fire)).max().unwrap_or(0);
    let missed_while_away = || {
        ran("a")
            .into_iter()
            .filter(|fire| fire_ms(fire) > away_from)
            .collect::<BTreeSet<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(10), || !missed_while_away().is_empty()),
        "{}",
        ReplicaProcess::logs(&replicas)
    );
    let while_away = missed_while_away();
    // What waits for b is listed among the ready runs.
    let first_away = format!(
        "{}:b",
        while_away.iter().next().expect("a fire while b was away")
    );
    let listed = cli(
        &scenario.server,
        scenario.dir.path(),
        &["runs", "list", "--state", "ready", "--json"],
    )
    .success();
    assert!(
        one_document(&listed)["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .any(|run| run["id"] == first_away.as_str()),
        "{first_away} not listed as ready: {listed}"
    );
    replicas[1] = scenario.node("b", &threshold);
    // Back within the threshold, b runs the latest fire it missed, once; the older ones it
    // missed are skipped as such (`run-once`).
    let last_away = while_away
        .iter()
        .map(|fire| fire_ms(fire))
        .max()
        .unwrap_or(0);
    assert!(
        wait_until(Duration::from_secs(15), || ran("b")
            .iter()
            .any(|fire| fire_ms(fire) >= last_away)),
        "b did not run the latest fire due while it was away for less than the threshold: {while_away:?}\n{:?}\n{}",
        scenario.ledger(),
        ReplicaProcess::logs(&replicas)
    );
    for fire in &while_away {
        assert!(
            ran("b").contains(fire)
                || scenario.run_state(&format!("{fire}:b"))
                    == (Some("skipped".to_owned()), Some("missed".to_owned())),
            "{fire}:b neither ran nor was missed: {:?}",
            scenario.run_state(&format!("{fire}:b"))
        );
    }
    // Away for longer than the threshold: its runs are skipped, not kept waiting, and no
    // replica runs them instead.
    replicas[1].terminate(Duration::from_secs(10));
    let gone_from = ran("a").iter().map(|fire| fire_ms(fire)).max().unwrap_or(0);
    let fires_since = || {
        ran("a")
            .into_iter()
            .filter(|fire| fire_ms(fire) > gone_from)
            .collect::<Vec<_>>()
    };
    // Fires up to twice the threshold after it left: the first of them waited for b and are
    // skipped; the last ones are not b's any more.
    assert!(
        wait_until(Duration::from_secs(30), || {
            fires_since()
                .iter()
                .any(|fire| fire_ms(fire) > gone_from + 14_000)
        }),
        "{}",
        ReplicaProcess::logs(&replicas)
    );
    let first = fires_since()
        .into_iter()
        .min_by_key(|fire| fire_ms(fire))
        .expect("a fire after b left");
    let first_for_b = format!("{first}:b");
    assert!(
        wait_until(Duration::from_secs(10), || scenario.run_state(&first_for_b)
            == (Some("skipped".to_owned()), Some("replica-down".to_owned()))),
        "{first_for_b}: {:?}\n{}",
        scenario.run_state(&first_for_b),
        ReplicaProcess::logs(&replicas)
    );
    let counted = || -> f64 {
        ports
            .iter()
            .flat_map(|port| {
                http_get(*port, "/metrics")
                    .1
                    .lines()
                    .filter(|line| {
                        line.starts_with("redcron_skipped_fires_total{")
                            && line.contains("reason=\"replica-down\"")
                    })
                    .filter_map(|line| line.rsplit_once(' ')?.1.parse::<f64>().ok())
                    .collect::<Vec<_>>()
            })
            .sum()
    };
    assert!(
        wait_until(Duration::from_secs(10), || counted() >= 1.0),
        "{}",
        http_get(ports[0], "/metrics").1
    );
    let last = fires_since()
        .into_iter()
        .max_by_key(|fire| fire_ms(fire))
        .expect("a fire after b left");
    assert_eq!(
        scenario.run_state(&format!("{last}:b")),
        (None, None),
        "b is no target once gone for the threshold"
    );
    // Nothing of b's waits in its route.
    let mut connection = scenario.server.connection();
    let waiting: usize = connection
        .llen(keys().ready_fires("@b", redcron::schedule::Priority::Normal))
        .expect("llen");
    assert_eq!(waiting, 0);
    each_run_once_on_its_own_replica(&scenario.ledger(), &ReplicaProcess::logs(&replicas));
}

#[test]
fn a_rolling_restart_that_adds_a_label_brings_the_replica_into_the_job() {
    let scenario = Scenario::new();
    let job = format!(
        "[jobs.nginx-logs]\nschedule = \"@every 1s\"\non = \"every\"\nwhere = [\"role=web\"]\n\
         command = \"{}\"\n",
        scenario.record("$NODE")
    );
    scenario.write_jobs(&job);
    let mut replicas = vec![
        scenario.node("a", &["--label", "role=web"]),
        scenario.node("b", &[]),
    ];
    let ran = |node: &str| started_by(&scenario).get(node).cloned().unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || ran("a").len() >= 3),
        "{}",
        ReplicaProcess::logs(&replicas)
    );
    assert!(ran("b").is_empty(), "{:?}", scenario.ledger());
    replicas[1].terminate(Duration::from_secs(10));
    replicas[1] = scenario.node("b", &["--label", "role=web"]);
    assert!(
        wait_until(Duration::from_secs(20), || ran("b").len() >= 3),
        "{:?}\n{}",
        scenario.ledger(),
        ReplicaProcess::logs(&replicas)
    );
    each_run_once_on_its_own_replica(&scenario.ledger(), &ReplicaProcess::logs(&replicas));
}

/// A replica's claim at `now_ms`, from the default queue and its own route.
async fn claim_as(store: &redcron::store::Store, replica: &str, now_ms: i64) -> Vec<String> {
    let claimed = store
        .clone()
        .with_frozen_clock(now_ms)
        .claim_runs(
            &[&format!("{replica}/0"), &format!("{replica}/1")],
            &["default".to_owned(), format!("@{replica}")],
            crate::util::store::LEASE,
            100,
        )
        .await
        .expect("claim");
    claimed
        .runs
        .iter()
        .map(|run| run.as_ref().expect("a whole run").id.clone())
        .collect()
}

#[tokio::test]
async fn an_every_replica_fire_promoted_twice_makes_one_run_per_target_claimed_by_it_alone() {
    use crate::util::store::{THRESHOLD, declare, jobs, plan, setup};

    let toml = "[jobs.rotate]\nschedule = \"@hourly\"\non = \"every\"\ncommand = \"true\"\n";
    let (server, store, token) = setup(toml).await;
    let every = ["rotate".to_owned()];
    // r1 and r2 declared the job within the threshold before the fire; r3 before that.
    for (replica, at) in [("r3", 30_000), ("r1", 95_000), ("r2", 99_000)] {
        declare(&store, replica, jobs(toml)).await;
        store
            .clone()
            .with_frozen_clock(at)
            .declare_targets(replica, &every, &[], THRESHOLD)
            .await
            .expect("targets");
    }
    plan(&store, &token, "rotate", &[100_000]).await;
    let at_fire = store.clone().with_frozen_clock(100_000);
    let promoted = at_fire
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(promoted.ready, 2, "{promoted:?}");
    // Planned again (two leaders, a lost cursor): promoting it again makes no second run.
    let mut connection = server.connection();
    let () = connection
        .zadd(keys().due(), "rotate@100000", 100_000)
        .expect("plan again");
    at_fire
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote again");
    // Each target claims its own run, once; r3 and the others' routes give it nothing.
    assert_eq!(claim_as(&store, "r2", 100_001).await, ["rotate@100000:r2"]);
    assert_eq!(claim_as(&store, "r3", 100_001).await, Vec::<String>::new());
    assert_eq!(claim_as(&store, "r1", 100_001).await, ["rotate@100000:r1"]);
    assert_eq!(claim_as(&store, "r1", 100_002).await, Vec::<String>::new());
    // The fire's own id made no run.
    let fire: i64 = connection
        .exists(keys().run("rotate@100000"))
        .expect("exists");
    assert_eq!(fire, 0);
}

#[tokio::test]
async fn a_replica_that_no_longer_declares_an_every_replica_job_skips_its_runs_of_it() {
    use crate::util::store::{THRESHOLD, declare, jobs, plan, setup};

    let toml = "[jobs.rotate]\nschedule = \"@hourly\"\non = \"every\"\ncommand = \"true\"\n";
    let (server, store, token) = setup(toml).await;
    declare(&store, "r1", jobs(toml)).await;
    store
        .clone()
        .with_frozen_clock(99_000)
        .declare_targets("r1", &["rotate".to_owned()], &[], THRESHOLD)
        .await
        .expect("targets");
    plan(&store, &token, "rotate", &[100_000]).await;
    store
        .clone()
        .with_frozen_clock(100_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    // A reload drops the job before r1 claims its run: no other replica may run it instead.
    declare(&store, "r1", jobs("[jobs.other]\ncommand = \"true\"\n")).await;
    assert_eq!(claim_as(&store, "r1", 100_001).await, Vec::<String>::new());
    let state: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(keys().run("rotate@100000:r1"))
        .arg(&["state", "reason"])
        .query(&mut server.connection())
        .expect("read the run");
    assert_eq!(
        state,
        [Some("skipped".to_owned()), Some("undeclared".to_owned())]
    );
}

#[tokio::test]
async fn a_replica_back_past_the_threshold_finds_its_run_of_a_skip_job_missed_at_its_start() {
    use crate::util::store::{THRESHOLD, declare, jobs, plan, setup};

    let toml = "[jobs.rotate]\nschedule = \"@hourly\"\non = \"every\"\nmisfire = \"skip\"\n\
                command = \"true\"\n";
    let (server, store, token) = setup(toml).await;
    for replica in ["r1", "r2"] {
        declare(&store, replica, jobs(toml)).await;
        store
            .clone()
            .with_frozen_clock(99_000)
            .declare_targets(replica, &["rotate".to_owned()], &[], THRESHOLD)
            .await
            .expect("targets");
    }
    plan(&store, &token, "rotate", &[100_000]).await;
    store
        .clone()
        .with_frozen_clock(100_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    // Each replica's run carries what its start is judged by, as a fire's own run does.
    let threshold = i64::try_from(THRESHOLD.as_millis()).expect("a small threshold");
    let judged: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(keys().run("rotate@100000:r2"))
        .arg(&["misfire", "missed_after_ms"])
        .query(&mut server.connection())
        .expect("read the run");
    assert_eq!(
        judged,
        [
            Some("skip".to_owned()),
            Some((100_000 + threshold).to_string())
        ]
    );
    // r1 starts its run in time; r2, back past the threshold, skips its own as missed.
    assert_eq!(claim_as(&store, "r1", 100_001).await, ["rotate@100000:r1"]);
    assert_eq!(
        claim_as(&store, "r2", 100_001 + threshold).await,
        Vec::<String>::new()
    );
    let state: Vec<Option<String>> = redis::cmd("HMGET")
        .arg(keys().run("rotate@100000:r2"))
        .arg(&["state", "reason"])
        .query(&mut server.connection())
        .expect("read the run");
    assert_eq!(
        state,
        [Some("skipped".to_owned()), Some("missed".to_owned())]
    );
}
