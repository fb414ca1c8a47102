//! The archive (`run --archive file:///DIR`): every outcome Redis records is written once into
//! the archive, by real replicas, through a `kill -9` between a part's write and its
//! acknowledgement, a leader change, a Redis restart and a Redis restored from an older copy
//! mid-export (the scenarios the S3
//! archive runs too, in tests/util/archive.rs), and no run's record leaves Redis before the
//! archive has it. Compared with what Redis recorded (the events stream) and with a ledger the
//! jobs write outside Redis.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::Commands;
use serde_json::Value;

use crate::util::archive::{
    FileArchive, Leaves, archived, assert_archived_once,
    killed_exporter_between_write_and_acknowledgement, leader_change_mid_export, outbox,
    recorded_outcomes, redis_restart_mid_export, redis_restored_mid_export, stop,
};
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::{cli, command_calls, keys, one_document, wait_until};

#[test]
fn every_outcome_is_archived_once_succeeded_retried_dead_and_skipped() {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"{record}; echo tick\"\n\n\
         [jobs.flaky]\nschedule = \"*/2 * * * * *\"\nretries = 1\nbackoff = \"1s\"\n\
         command = \"echo attempt $REDCRON_ATTEMPT; exit 3\"\n\n\
         [jobs.slow]\nschedule = \"* * * * * *\"\ncommand = \"sleep 1.5\"\n\n\
         [jobs.task]\ncommand = \"{record}; cat\"\n",
        record = scenario.record("")
    ));
    let archiving = ["--archive", &url, "--archive-part-age", "1s"];
    let replicas = scenario.replicas_with_a_leader(&["r1", "r2"], &archiving);
    let logs = || ReplicaProcess::logs(&replicas);
    assert!(
        wait_until(Duration::from_secs(20), || {
            cli(&scenario.server, scenario.dir.path(), &["jobs", "--json"])
                .stdout
                .contains("\"task\"")
        }),
        "task was never published\n{}",
        logs()
    );
    const TASKS: usize = 300;
    let file = scenario.dir.path().join("tasks.jsonl");
    let lines: String = (0..TASKS)
        .map(|n| format!("{{\"job\": \"task\", \"payload\": {{\"n\": {n}}}}}\n"))
        .collect();
    std::fs::write(&file, lines).expect("write the tasks");
    let enqueue = cli(
        &scenario.server,
        scenario.dir.path(),
        &["enqueue", "--from", file.to_str().expect("UTF-8"), "--json"],
    );
    assert_eq!(enqueue.code, Some(0), "{}", enqueue.stderr);
    let tasks: BTreeSet<String> = one_document(&enqueue.stdout)["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| run["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(tasks.len(), TASKS);

    // Every task ran, a flaky fire died after its retry, and a slow fire was skipped.
    let outcomes_seen = || {
        let recorded = recorded_outcomes(&scenario);
        let ran = scenario
            .ledger()
            .iter()
            .filter(|(run, _, _)| tasks.contains(run))
            .count();
        let has = |outcome: &str, job: &str| {
            recorded
                .values()
                .any(|(run, state)| state == outcome && run.starts_with(job))
        };
        ran == TASKS
            && has("dead", "flaky@")
            && has("retrying", "flaky@")
            && has("skipped", "slow@")
    };
    assert!(
        wait_until(Duration::from_secs(90), outcomes_seen),
        "not every kind of outcome was recorded\n{}",
        logs()
    );
    // Parts are written while the replicas run, not only when they stop.
    assert!(
        wait_until(Duration::from_secs(30), || archived(&archive).len() > TASKS),
        "the archive holds {} records while {} outcomes were recorded\n{}",
        archived(&archive).len(),
        recorded_outcomes(&scenario).len(),
        logs()
    );
    let logs = stop(replicas);
    // The last replica to stop wrote what was left.
    assert_eq!(outbox(&scenario), (0, 0), "left in the outbox\n{logs}");
    let records = assert_archived_once(&scenario, archived(&archive), &logs);

    // Each task's record is its run's, with its payload and its output; each attempt of a
    // flaky fire has its own record, with that attempt's output.
    let by_run = |run: &str| -> Vec<&Value> {
        records
            .iter()
            .filter(|record| record["id"].as_str() == Some(run))
            .collect()
    };
    for task in &tasks {
        let found = by_run(task);
        assert_eq!(found.len(), 1, "{task}: {found:?}");
        let record = found[0];
        assert_eq!(record["outcome"], "succeeded", "{record}");
        assert_eq!(record["kind"], "adhoc", "{record}");
        // The command prints the payload it was given.
        assert!(record["payload"].is_string(), "{record}");
        assert_eq!(record["output"], record["payload"], "{record}");
    }
    let dead = records
        .iter()
        .find(|record| record["outcome"] == "dead" && record["job"] == "flaky")
        .expect("a dead flaky fire");
    // Its failed attempts in the order they ended (a shutdown may also have handed one back).
    let mut attempts: Vec<&Value> = by_run(dead["id"].as_str().expect("id"))
        .into_iter()
        .filter(|record| record["reason"] == "failed")
        .collect();
    attempts.sort_by_key(|record| record["at_ms"].as_i64());
    let outputs: Vec<(&Value, &Value, &Value)> = attempts
        .iter()
        .map(|record| (&record["outcome"], &record["attempt"], &record["output"]))
        .collect();
    assert_eq!(
        outputs,
        [
            (
                &Value::from("retrying"),
                &Value::from(1),
                &Value::from("attempt 1\n")
            ),
            (
                &Value::from("dead"),
                &Value::from(2),
                &Value::from("attempt 2\n")
            ),
        ],
        "{attempts:?}"
    );
    let skipped = records
        .iter()
        .find(|record| record["outcome"] == "skipped" && record["reason"] == "overlap")
        .expect("a fire skipped as an overlap");
    assert_eq!(skipped["job"], "slow", "{skipped}");
    assert_eq!(skipped["output"], Value::Null, "{skipped}");
    assert_eq!(skipped["attempt"], Value::Null, "{skipped}");
}

#[test]
fn a_part_written_and_not_acknowledged_by_a_killed_leader_is_archived_once_by_another() {
    killed_exporter_between_write_and_acknowledgement(&FileArchive::new(), &[]);
}

#[test]
fn no_run_leaves_redis_before_the_archive_has_it_whatever_the_retention() {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&scenario.every_second_job());
    let archiving = [
        "--archive",
        &url,
        "--archive-part-age",
        "1s",
        "--retention",
        "1s",
    ];
    let replicas = scenario.replicas_with_a_leader(&["r1"], &archiving);
    let logs = || ReplicaProcess::logs(&replicas);
    // The archive becomes unwritable: a file where its directory was (the tests run as root,
    // whom permissions do not stop).
    std::fs::remove_dir_all(&archive).expect("remove the archive");
    std::fs::write(&archive, "not a directory").expect("block the archive");
    assert!(
        wait_until(Duration::from_secs(30), || logs()
            .contains("the archive refused a part")),
        "the archive never refused a part\n{}",
        logs()
    );
    let succeeded = |scenario: &Scenario| -> BTreeSet<String> {
        recorded_outcomes(scenario)
            .into_values()
            .filter(|(_, state)| state == "succeeded")
            .map(|(run, _)| run)
            .collect()
    };
    let early = succeeded(&scenario);
    assert!(!early.is_empty(), "no run succeeded\n{}", logs());
    // A scenario of time: three retentions pass while the archive refuses every part.
    std::thread::sleep(Duration::from_secs(3));
    let mut connection = scenario.server.connection();
    for run in &early {
        let ttl: i64 = connection.pttl(keys().run(run)).expect("PTTL");
        assert_eq!(
            ttl,
            -1,
            "{run} was given an expiry before it was archived: {:?}",
            scenario.run_record(run)
        );
    }
    let (waiting, _) = outbox(&scenario);
    assert!(waiting >= early.len() as u64, "{waiting} records wait");

    // Writable again: the backlog drains, and the runs archived expire, their retention past.
    std::fs::remove_file(&archive).expect("unblock the archive");
    assert!(
        wait_until(Duration::from_secs(60), || {
            let archived_runs: BTreeSet<String> = archived(&archive)
                .into_iter()
                .filter_map(|(_, record)| record["id"].as_str().map(str::to_owned))
                .collect();
            early.is_subset(&archived_runs)
        }),
        "the backlog was not archived\n{}",
        logs()
    );
    assert!(
        wait_until(Duration::from_secs(10), || early.iter().all(|run| {
            let exists: bool = connection.exists(keys().run(run)).expect("EXISTS");
            !exists
        })),
        "runs archived past their retention still have their records\n{}",
        logs()
    );
    let logs = stop(replicas);
    assert_eq!(outbox(&scenario), (0, 0), "left in the outbox\n{logs}");
    assert_archived_once(&scenario, archived(&archive), &logs);
}

/// The `XADD` calls Redis counted since its start, scripts' included.
fn xadd_calls(scenario: &Scenario) -> u64 {
    command_calls(&mut scenario.server.connection())
        .get("xadd")
        .copied()
        .unwrap_or_default()
}

#[test]
fn without_archive_an_outcome_costs_one_stream_append_and_with_it_two() {
    for archiving in [false, true] {
        let scenario = Scenario::new();
        let archive = scenario.dir.path().join("archive");
        let url = format!("file://{}", archive.display());
        scenario.write_jobs(&scenario.every_second_job());
        let flags: &[&str] = if archiving {
            &["--archive", &url, "--archive-part-age", "1s"]
        } else {
            &[]
        };
        let replicas = scenario.replicas_with_a_leader(&["r1"], flags);
        assert!(
            wait_until(Duration::from_secs(30), || scenario.ledger().len() >= 5),
            "no runs\n{}",
            ReplicaProcess::logs(&replicas)
        );
        let logs = stop(replicas);
        let events: u64 = scenario
            .server
            .connection()
            .xlen(keys().events())
            .expect("XLEN");
        let outcomes = recorded_outcomes(&scenario).len() as u64;
        let archive_exists: bool = scenario
            .server
            .connection()
            .exists(keys().archive())
            .expect("EXISTS");
        if archiving {
            // Each outcome's event, and its record in the outbox (trimmed once archived).
            assert_eq!(xadd_calls(&scenario), events + outcomes);
            assert_eq!(
                assert_archived_once(&scenario, archived(&archive), &logs).len() as u64,
                outcomes
            );
        } else {
            assert_eq!(
                xadd_calls(&scenario),
                events,
                "one append per event, no more"
            );
            assert!(!archive_exists, "an outbox without --archive");
            assert!(!archive.exists(), "an archive without --archive");
        }
    }
}

#[test]
fn a_leader_change_mid_export_loses_and_repeats_no_outcome() {
    leader_change_mid_export(&FileArchive::new(), Leaves::Killed);
}

#[test]
fn a_leader_stopped_mid_export_loses_and_repeats_no_outcome() {
    leader_change_mid_export(&FileArchive::new(), Leaves::Stopped);
}

#[test]
fn a_redis_restart_mid_export_loses_and_repeats_no_outcome() {
    redis_restart_mid_export(&FileArchive::new());
}

#[test]
fn a_redis_restored_from_an_older_copy_mid_export_repeats_no_outcome() {
    redis_restored_mid_export(&FileArchive::new());
}
