//! Replicas gone for good, with real replica processes: what `history`, `runs list`, notices
//! and metrics say of the runs of every-replica fires meant for a replica that never ran them.

use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{cli, free_port, http_get, one_document, wait_until};

/// A Redis, and a schedule directory holding `jobs` (TOML) that every replica declares.
fn start(jobs: &str) -> (RedisServer, TempDir) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("schedules")).expect("schedules dir");
    std::fs::write(dir.path().join("schedules/jobs.toml"), jobs).expect("write jobs");
    (server, dir)
}

fn replica(server: &RedisServer, dir: &TempDir, id: &str, extra: &[&str]) -> ReplicaProcess {
    ReplicaProcess::start(
        id,
        &server.url(),
        &dir.path().join("schedules"),
        dir.path(),
        extra,
    )
}

/// The elements of a `--json` list command's `key` list. A `--replica` the namespace does not
/// know yet (polled before its first heartbeat) has nothing to list, which the command says as
/// an error: here it is the empty list it stands for.
fn listed(server: &RedisServer, dir: &TempDir, args: &[&str], key: &str) -> Vec<Value> {
    let done = cli(server, dir.path(), args);
    if done.code == Some(2) && done.stderr.contains("unknown replica") {
        return Vec::new();
    }
    let out = done.success();
    one_document(&out)[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} list: {out}"))
        .clone()
}

#[test]
fn a_killed_replicas_runs_are_its_own_in_history_and_runs_list_and_counted_by_the_replica_that_skips_them()
 {
    // A short misfire threshold: a replica gone longer than it has its runs skipped within
    // seconds, not minutes.
    let threshold = ["--misfire-threshold", "4s"];
    let (server, dir) =
        start("[jobs.rotate]\nschedule = \"@every 1s\"\non = \"every\"\ncommand = \"true\"\n");
    let port = free_port();
    let metrics_at = format!("127.0.0.1:{port}");
    let mut replicas = vec![
        replica(
            &server,
            &dir,
            "a",
            &[threshold[0], threshold[1], "--metrics-addr", &metrics_at],
        ),
        replica(&server, &dir, "b", &threshold),
    ];
    let history_of_b = || {
        listed(
            &server,
            &dir,
            &["history", "--replica", "b", "-n", "200", "--json"],
            "runs",
        )
    };
    assert!(
        wait_until(Duration::from_secs(30), || history_of_b()
            .iter()
            .any(|run| run["outcome"] == "succeeded")),
        "b ran nothing\n{}",
        ReplicaProcess::logs(&replicas)
    );
    replicas[1].kill9();

    // While b is away, what waits for it is b's.
    let waiting_for_b = || {
        listed(
            &server,
            &dir,
            &[
                "runs",
                "list",
                "--state",
                "ready",
                "--replica",
                "b",
                "--json",
            ],
            "runs",
        )
    };
    assert!(
        wait_until(Duration::from_secs(15), || waiting_for_b()
            .iter()
            .any(|run| run["id"].as_str().is_some_and(|id| id.ends_with(":b")))),
        "no run waiting for b is listed under --replica b: {:?}\n{}",
        waiting_for_b(),
        ReplicaProcess::logs(&replicas)
    );

    // Past the threshold, a skips b's runs: history under --replica b shows them, as b's,
    // with the fire their id names.
    let skipped_for_b = || {
        history_of_b()
            .into_iter()
            .filter(|run| run["reason"] == "replica-down")
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(30), || !skipped_for_b().is_empty()),
        "no replica-down skip under history --replica b: {:?}\n{}",
        history_of_b(),
        ReplicaProcess::logs(&replicas)
    );
    for run in skipped_for_b() {
        let id = run["id"].as_str().expect("a run id");
        assert_eq!(run["replica"], "b", "{run}");
        assert_eq!(run["outcome"], "skipped", "{run}");
        let fire: i64 = id
            .trim_start_matches("rotate@")
            .trim_end_matches(":b")
            .parse()
            .expect("a fire in the run id");
        assert_eq!(run["fire_ms"], fire, "{run}");
        assert!(run["fire"].is_string(), "{run}");
        assert!(
            run["started_ms"].is_null(),
            "a skipped run never started: {run}"
        );
    }
    // The human table too: b's skipped run under REPLICA b, with its fire time.
    let table = cli(
        &server,
        dir.path(),
        &["history", "--replica", "b", "-n", "200"],
    )
    .success();
    let line = table
        .lines()
        .find(|line| line.contains("replica-down"))
        .unwrap_or_else(|| panic!("no replica-down row: {table}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(cells.get(2), Some(&"b"), "{table}");
    assert!(
        cells.get(4).is_some_and(|fire| fire.starts_with("20")),
        "no fire time: {table}"
    );
    // a's metrics name a as the replica that ran its runs and skipped b's.
    let series = |family: &str, with: &str| -> Vec<String> {
        http_get(port, "/metrics")
            .1
            .lines()
            .filter(|line| line.starts_with(family) && line.contains(with))
            .map(str::to_owned)
            .collect()
    };
    for (family, with) in [
        ("redcron_runs_total{", "outcome=\"succeeded\""),
        ("redcron_run_duration_seconds_count{", ""),
        ("redcron_fire_lag_seconds_count{", ""),
        ("redcron_skipped_fires_total{", "reason=\"replica-down\""),
    ] {
        let found = series(family, with);
        assert!(
            !found.is_empty()
                && found
                    .iter()
                    .all(|line| line.contains("redcron_replica=\"a\"")),
            "{family} {with}: {found:?}"
        );
    }
    // The surviving replica's own history holds none of b's runs.
    let history_of_a = listed(
        &server,
        &dir,
        &["history", "--replica", "a", "-n", "200", "--json"],
        "runs",
    );
    assert!(
        history_of_a
            .iter()
            .all(|run| run["id"].as_str().is_some_and(|id| id.ends_with(":a"))),
        "{history_of_a:?}"
    );
}

#[test]
fn a_replica_down_skip_sends_the_jobs_skipped_notice_once_naming_the_replica() {
    let (server, dir) = start("");
    let told = dir.path().join("told.jsonl");
    std::fs::write(
        dir.path().join("schedules/jobs.toml"),
        format!(
            "[jobs.rotate]\nschedule = \"@every 1s\"\non = \"every\"\ncommand = \"true\"\n\
             notify = [\"exec:cat >> {}\"]\nnotify_on = [\"skipped\"]\n",
            told.display()
        ),
    )
    .expect("write jobs");
    let threshold = ["--misfire-threshold", "4s"];
    let mut replicas = vec![
        replica(&server, &dir, "a", &threshold),
        replica(&server, &dir, "b", &threshold),
    ];
    let history = |args: &[&str]| {
        let mut all = vec!["history", "-n", "500", "--json"];
        all.extend(args);
        listed(&server, &dir, &all, "runs")
    };
    assert!(
        wait_until(Duration::from_secs(30), || history(&["--replica", "b"])
            .iter()
            .any(|run| run["outcome"] == "succeeded")),
        "b ran nothing\n{}",
        ReplicaProcess::logs(&replicas)
    );
    replicas[1].kill9();
    let notices = || -> Vec<Value> {
        std::fs::read_to_string(&told)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("one JSON document a line"))
            .filter(|notice: &Value| notice["reason"] == "replica-down")
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(30), || !notices().is_empty()),
        "no notice of b's skipped runs\n{}",
        ReplicaProcess::logs(&replicas)
    );
    let notice = &notices()[0];
    assert_eq!(notice["event"], "skipped", "{notice}");
    assert_eq!(notice["replica"], "b", "{notice}");
    assert!(
        notice["run"]
            .as_str()
            .is_some_and(|run| run.ends_with(":b")),
        "{notice}"
    );
    // Once a runs a fire due well past b's last skipped one, b is no target any more and every
    // skip of its runs is recorded: each skipped run is told of at most once.
    let fires = |replica: &str| -> Vec<(i64, Value)> {
        history(&["--replica", replica])
            .into_iter()
            .filter_map(|run| Some((run["fire_ms"].as_i64()?, run["reason"].clone())))
            .collect()
    };
    let last_skipped = fires("b")
        .into_iter()
        .filter(|(_, reason)| reason == "replica-down")
        .map(|(fire, _)| fire)
        .max()
        .unwrap_or(0);
    assert!(
        wait_until(Duration::from_secs(30), || fires("a")
            .iter()
            .any(|(fire, _)| *fire > last_skipped + 10_000)),
        "a stopped running\n{}",
        ReplicaProcess::logs(&replicas)
    );
    let notices = notices();
    let runs: std::collections::BTreeSet<&str> = notices
        .iter()
        .filter_map(|notice| notice["run"].as_str())
        .collect();
    assert_eq!(runs.len(), notices.len(), "a run told twice: {notices:?}");
}

#[test]
fn jobs_and_status_say_when_no_live_replica_declares_a_pinned_job() {
    let (server, dir) = start(
        "[jobs.renew-cert]\nschedule = \"@every 1s\"\nwhere = [\"replica=c\"]\ncommand = \"true\"\n\
         [jobs.tick]\nschedule = \"@every 1s\"\ncommand = \"true\"\n",
    );
    let mut replicas = vec![
        replica(&server, &dir, "a", &[]),
        replica(&server, &dir, "c", &[]),
    ];
    let jobs = || listed(&server, &dir, &["jobs", "--json"], "jobs");
    let declared_live = |name: &str| {
        jobs()
            .into_iter()
            .find(|job| job["job"] == name)
            .map(|job| job["declared_live"].clone())
    };
    assert!(
        wait_until(Duration::from_secs(20), || {
            declared_live("renew-cert") == Some(Value::Bool(true))
                && declared_live("tick") == Some(Value::Bool(true))
        }),
        "{:?}\n{}",
        jobs(),
        ReplicaProcess::logs(&replicas)
    );
    replicas[1].kill9();
    // Once c's heartbeats are stale, the job is listed as declared by no live replica, within
    // the undeclared grace that keeps it planned.
    assert!(
        wait_until(Duration::from_secs(20), || declared_live("renew-cert")
            == Some(Value::Bool(false))),
        "{:?}\n{}",
        jobs(),
        ReplicaProcess::logs(&replicas)
    );
    assert_eq!(declared_live("tick"), Some(Value::Bool(true)));
    let table = cli(&server, dir.path(), &["jobs"]).success();
    let row = |name: &str| {
        table
            .lines()
            .find(|line| line.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row of {name}: {table}"))
            .to_owned()
    };
    assert!(
        row("renew-cert").contains("NOT DECLARED by any live replica"),
        "{table}"
    );
    assert!(!row("tick").contains("NOT DECLARED"), "{table}");
    let status = cli(&server, dir.path(), &["status"]).success();
    let warnings: Vec<&str> = status
        .lines()
        .filter(|line| line.contains("no live replica declares it"))
        .collect();
    assert_eq!(
        warnings,
        [
            "job renew-cert: no live replica declares it; where = [replica=c]: its fires wait for \
          one that does, and are skipped (undeclared) once none has for 5 minutes"
        ],
        "{status}"
    );
    // With every replica down, one line says so, not one per job.
    replicas[0].kill9();
    let status = || cli(&server, dir.path(), &["status"]).stdout;
    assert!(
        wait_until(Duration::from_secs(20), || status()
            .contains("no live replica:")),
        "{}",
        status()
    );
    assert!(
        !status().contains("no live replica declares it"),
        "{}",
        status()
    );
}

#[test]
fn a_run_claimed_ahead_by_a_replica_killed_before_its_start_is_skipped_with_no_start() {
    // b claims its runs a second ahead, and holds them five seconds past their due time: killed,
    // it leaves runs claimed and never started, which go back to its route in time and are
    // skipped once it has been gone for the threshold.
    let threshold = ["--misfire-threshold", "10s"];
    let (server, dir) =
        start("[jobs.rotate]\nschedule = \"@every 1s\"\non = \"every\"\ncommand = \"true\"\n");
    let mut replicas = vec![
        replica(&server, &dir, "a", &threshold),
        replica(
            &server,
            &dir,
            "b",
            &[threshold[0], threshold[1], "--claim-ahead", "1s"],
        ),
    ];
    let history_of_b = || {
        listed(
            &server,
            &dir,
            &["history", "--replica", "b", "-n", "500", "--json"],
            "runs",
        )
    };
    assert!(
        wait_until(Duration::from_secs(30), || history_of_b()
            .iter()
            .any(|run| run["outcome"] == "succeeded")),
        "b ran nothing\n{}",
        ReplicaProcess::logs(&replicas)
    );
    replicas[1].kill9();
    let skipped = || -> Vec<String> {
        history_of_b()
            .into_iter()
            .filter(|run| run["reason"] == "replica-down")
            .filter_map(|run| run["id"].as_str().map(str::to_owned))
            .collect()
    };
    // Every run b had claimed ahead is skipped by then: its next fires were not yet claimed.
    assert!(
        wait_until(Duration::from_secs(40), || skipped().len() >= 5),
        "{:?}\n{}",
        history_of_b(),
        ReplicaProcess::logs(&replicas)
    );
    for id in skipped() {
        let shown =
            one_document(&cli(&server, dir.path(), &["runs", "show", &id, "--json"]).success());
        assert_eq!(shown["state"], "skipped", "{shown}");
        assert!(
            shown["started_ms"].is_null() && shown["worker"].is_null(),
            "a run that never started shows a start: {shown}"
        );
    }
}
