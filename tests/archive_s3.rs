//! The archive on S3 (`run --archive s3://bucket/prefix`), against a real S3-compatible server
//! on loopback (moto): every outcome Redis records is written once, through a `kill -9` between
//! a part's write and its acknowledgement, with create-only puts (`If-None-Match: *`) and with
//! the store told it has none, through a leader change and a Redis restart mid-export (the
//! scenarios the `file://` archive runs too), and through the store hanging for a minute while
//! runs finish; and `history --archive` and `runs show` read back from the bucket what Redis no
//! longer holds.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::time::Duration;

use redis::Commands;

use crate::util::archive::{
    ArchiveStore, Leaves, archiving_replica, assert_archived_once, assert_ledger_archived,
    killed_exporter_between_write_and_acknowledgement, leader_change_mid_export, outbox,
    recorded_outcomes, redis_restart_mid_export, stop,
};
use crate::util::replica::ReplicaProcess;
use crate::util::s3::S3Server;
use crate::util::scenario::Scenario;
use crate::util::{Run, free_port, http_get, keys, one_document, redcron_in_with_env, wait_until};

#[test]
fn outcomes_are_archived_in_s3_once_matching_the_ledger() {
    let s3 = S3Server::start();
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    let replicas = vec![
        archiving_replica(&scenario, &s3, "r1", &[], &[]),
        archiving_replica(&scenario, &s3, "r2", &[], &[]),
    ];
    let logs = || ReplicaProcess::logs(&replicas);
    // Parts are written while the replicas run, not only when they stop.
    assert!(
        wait_until(Duration::from_secs(60), || s3.archived().len() >= 10),
        "the bucket holds {} records\n{}\n{}",
        s3.archived().len(),
        logs(),
        s3.log()
    );
    let logs = stop(replicas);
    assert_eq!(outbox(&scenario), (0, 0), "left in the outbox\n{logs}");
    let records = assert_archived_once(&scenario, s3.archived(), &logs);
    assert_ledger_archived(&scenario, &records);
}

#[test]
fn a_part_written_to_s3_by_a_killed_exporter_is_archived_once_by_another() {
    killed_exporter_between_write_and_acknowledgement(&S3Server::start(), &[]);
}

#[test]
fn a_store_without_create_only_puts_still_archives_a_taken_over_part_once() {
    // The store is told it cannot put create-only: parts are read before they are written.
    killed_exporter_between_write_and_acknowledgement(
        &S3Server::start(),
        &[("AWS_CONDITIONAL_PUT", "disabled")],
    );
}

/// The replica's `redcron_archive_lag_seconds`, read from its metrics endpoint.
fn lag_seconds(port: u16) -> Option<f64> {
    let (status, body) = http_get(port, "/metrics");
    if status != 200 {
        return None;
    }
    body.lines()
        .filter(|line| line.starts_with("redcron_archive_lag_seconds"))
        .find_map(|line| line.split_whitespace().last()?.parse().ok())
}

#[test]
fn a_store_down_for_a_minute_delays_the_archive_and_loses_and_repeats_nothing() {
    let s3 = S3Server::start();
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    let port = free_port();
    let metrics = format!("127.0.0.1:{port}");
    let r1 = archiving_replica(&scenario, &s3, "r1", &["--metrics-addr", &metrics], &[]);
    assert!(
        wait_until(Duration::from_secs(60), || !s3.archived().is_empty()),
        "nothing archived\n{}",
        r1.log()
    );

    // Frozen, moto takes connections and answers none: each part's put times out.
    s3.freeze();
    let frozen = std::time::Instant::now();
    assert!(
        wait_until(Duration::from_secs(60), || r1
            .log()
            .contains("the archive refused a part")),
        "the frozen store never failed a put\n{}",
        r1.log()
    );
    let refused_after = frozen.elapsed();
    // The lag the replica exports grows while runs finish and nothing is archived.
    assert!(
        wait_until(Duration::from_secs(60), || lag_seconds(port)
            .is_some_and(|lag| lag >= 30.0)),
        "the archive's lag did not grow: {:?}\n{}",
        lag_seconds(port),
        r1.log()
    );
    // A scenario of time: the store stays down a minute in all.
    std::thread::sleep(Duration::from_secs(60).saturating_sub(frozen.elapsed()));
    let down = frozen.elapsed();
    // Each put to the frozen store fails within its timeout (20 s), and the part is tried
    // again: a put that hung would leave one refusal at most.
    let refusals = r1.log().matches("the archive refused a part").count();
    assert!(
        refusals >= 2,
        "{refusals} puts failed in {down:?} down: one hung\n{}",
        r1.log()
    );
    let (waiting, _) = outbox(&scenario);
    let recorded_down: BTreeSet<String> = recorded_outcomes(&scenario).into_keys().collect();
    assert!(
        waiting >= 30,
        "{waiting} records wait after {down:?} down\n{}",
        r1.log()
    );

    s3.thaw();
    // The backlog drains: every outcome recorded while the store was down is archived, and
    // the lag falls back.
    assert!(
        wait_until(Duration::from_secs(90), || {
            let events: BTreeSet<String> = s3
                .archived()
                .into_iter()
                .filter_map(|(_, record)| record["event"].as_str().map(str::to_owned))
                .collect();
            recorded_down.is_subset(&events)
        }),
        "the backlog was not archived\n{}",
        r1.log()
    );
    assert!(
        wait_until(Duration::from_secs(30), || lag_seconds(port)
            .is_some_and(|lag| lag < 10.0)),
        "the archive's lag stayed at {:?}\n{}",
        lag_seconds(port),
        r1.log()
    );
    let logs = stop(vec![r1]);
    assert_eq!(outbox(&scenario), (0, 0), "left in the outbox\n{logs}");
    let records = assert_archived_once(&scenario, s3.archived(), &logs);
    assert_ledger_archived(&scenario, &records);
    eprintln!(
        "store down {down:?}: first put refused after {refused_after:?}, {refusals} refused, \
         {waiting} records waited"
    );
}

#[test]
fn a_leader_change_mid_export_to_s3_loses_and_repeats_no_outcome() {
    leader_change_mid_export(&S3Server::start(), Leaves::Killed);
}

#[test]
fn a_leader_stopped_mid_export_to_s3_loses_and_repeats_no_outcome() {
    leader_change_mid_export(&S3Server::start(), Leaves::Stopped);
}

#[test]
fn a_redis_restart_mid_export_to_s3_loses_and_repeats_no_outcome() {
    redis_restart_mid_export(&S3Server::start());
}

/// `redcron args... --redis <scenario's> --namespace test`, reaching `s3` as the replicas do.
fn cli_reaching_s3(scenario: &Scenario, s3: &S3Server, args: &[&str]) -> Run {
    let redis = scenario.server.url();
    let mut all = args.to_vec();
    all.extend(["--redis", &redis, "--namespace", "test"]);
    let env = s3.env();
    let env: Vec<(&str, &OsStr)> = env
        .iter()
        .map(|(key, value)| (*key, OsStr::new(value)))
        .collect();
    redcron_in_with_env(scenario.dir.path(), &all, "", &env)
}

#[test]
fn history_and_runs_show_read_back_from_s3_what_redis_no_longer_holds() {
    let s3 = S3Server::start();
    let scenario = Scenario::new();
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\noverlap = \"allow\"\n\
         command = \"{}; echo tick $REDCRON_RUN_ID\"\n",
        scenario.record("")
    ));
    let r1 = archiving_replica(&scenario, &s3, "r1", &["--retention", "1s"], &[]);
    // Runs that succeeded and whose record expired, which it does once they are archived.
    let expired = || -> Vec<String> {
        let mut connection = scenario.server.connection();
        recorded_outcomes(&scenario)
            .into_values()
            .filter(|(_, state)| state == "succeeded")
            .map(|(run, _)| run)
            .filter(|run| {
                let exists: bool = connection.exists(keys().run(run)).expect("EXISTS");
                !exists
            })
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(60), || expired().len() >= 5),
        "{} runs' records expired once archived\n{}\n{}",
        expired().len(),
        r1.log(),
        s3.log()
    );
    let logs = stop(vec![r1]);
    let records = assert_archived_once(&scenario, s3.archived(), &logs);
    // Redis trims its events stream: the older outcomes are in the bucket alone.
    let _: () = scenario
        .server
        .connection()
        .xtrim(keys().events(), redis::streams::StreamMaxlen::Equals(4))
        .expect("XTRIM");
    let outcome = |run: &serde_json::Value| {
        (
            run["id"].as_str().expect("id").to_owned(),
            run["at_ms"].as_i64().expect("at_ms"),
            run["outcome"].as_str().expect("outcome").to_owned(),
        )
    };
    let expected: BTreeSet<(String, i64, String)> = records.iter().map(outcome).collect();
    let history = |args: &[&str]| -> Vec<serde_json::Value> {
        let mut all = vec!["history", "-n", "100000", "--json"];
        all.extend(args);
        let out = cli_reaching_s3(&scenario, &s3, &all).success();
        one_document(&out)["runs"].as_array().expect("runs").clone()
    };
    let in_redis = history(&[]).len();
    assert!(
        in_redis < expected.len(),
        "the trim left {in_redis} of {} outcomes",
        expected.len()
    );
    let url = s3.url();
    let mut listed: BTreeMap<(String, i64, String), usize> = BTreeMap::new();
    for run in &history(&["--archive", &url]) {
        *listed.entry(outcome(run)).or_default() += 1;
    }
    let twice: Vec<_> = listed.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "listed twice: {twice:?}");
    assert_eq!(
        listed.into_keys().collect::<BTreeSet<_>>(),
        expected,
        "history --archive {url} and what the bucket holds differ"
    );

    // A run Redis no longer holds, from the archive the namespace says it archives to.
    let run = expired()
        .into_iter()
        .next()
        .expect("a run whose record expired");
    let printed = format!("tick {run}\n");
    let shown = cli_reaching_s3(&scenario, &s3, &["runs", "show", &run]).success();
    assert!(
        shown.contains("from the archive: Redis no longer holds this run")
            && shown.contains(printed.trim_end()),
        "{shown}"
    );
    let shown = cli_reaching_s3(&scenario, &s3, &["runs", "show", &run, "--json"]).success();
    let document = one_document(&shown);
    assert_eq!(document["state"], "succeeded", "{document}");
    assert_eq!(
        document["output"].as_str(),
        Some(printed.as_str()),
        "{document}"
    );
    assert!(
        document["archived_in"]
            .as_str()
            .is_some_and(|part| part.starts_with(&format!("{url}/runs/v1/date="))
                && part.ends_with(".ndjson.gz")),
        "{document}"
    );
    // A run neither Redis nor the bucket holds is still unknown.
    let unknown = cli_reaching_s3(&scenario, &s3, &["runs", "show", "tick@1000"]);
    assert_eq!(unknown.code, Some(2), "{}", unknown.stdout);
}
