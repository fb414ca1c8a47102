//! What the inspection commands (`status`, `jobs`, `history`, `dead list`) print for a given
//! state of Redis, seeded through the store as replicas and leaders write it.

use std::time::Duration;

use redcron::store::{Enqueue, FailReason, Failure, Store};

use crate::util::redis_server::RedisServer;
use crate::util::store::enqueue;
use crate::util::store::{claim_run, connect, declare, jobs, replica};
use crate::util::{cli, one_document, redcron_in};

const NIGHTLY: &str = "[jobs.nightly]\nschedule = \"0 3 * * *\"\ncommand = \"true\"\n";
const OTHER: &str = "[jobs.other]\ncommand = \"true\"\n";

/// A Redis whose leader published the definitions of `nightly` and `other`, a directory to run
/// the commands in, and a store.
async fn published() -> (RedisServer, tempfile::TempDir, Store) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = connect(&server).await;
    store
        .publish_definitions(&jobs(&format!("{NIGHTLY}{OTHER}")))
        .await
        .expect("publish");
    (server, dir, store)
}

#[tokio::test]
async fn an_empty_namespace_reads_as_empty_not_as_an_error() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let store: Store = connect(&server).await;
    let overview = store.overview().await.expect("an overview of nothing");
    assert!(overview.replicas.is_empty() && overview.definitions.is_empty());
    assert_eq!(
        store
            .enqueue_many(&[])
            .await
            .expect("enqueue nothing")
            .len(),
        0
    );

    let hint = "no replica has published jobs in namespace \"test\" (is --namespace the one the \
                replicas run with?)\n";
    assert_eq!(cli(&server, dir.path(), &["jobs"]).success(), hint);
    let status = cli(&server, dir.path(), &["status"]).success();
    assert!(
        status.contains("no replica has sent a heartbeat in namespace \"test\"\n"),
        "{status}"
    );
    assert!(status.ends_with(hint), "{status}");
    let status = one_document(&cli(&server, dir.path(), &["status", "--json"]).success());
    assert_eq!(status["replicas"], serde_json::json!([]), "{status}");
    assert_eq!(status["jobs"], serde_json::json!([]), "{status}");
    for (args, empty) in [
        (&["jobs", "--json"][..], r#"{"jobs":[]}"#),
        (&["history", "--json"], r#"{"runs":[]}"#),
        (&["dead", "list", "--json"], r#"{"runs":[]}"#),
    ] {
        assert_eq!(
            cli(&server, dir.path(), args).success(),
            format!("{empty}\n"),
            "{args:?}"
        );
    }
    assert_eq!(
        cli(&server, dir.path(), &["history"]).success(),
        "no runs recorded\n"
    );
    cli(&server, dir.path(), &["dead", "list"]).success();
}

#[tokio::test]
async fn drift_names_replicas_with_another_definition_apart_from_those_without_the_job() {
    let (server, dir, store) = published().await;
    // Heartbeats in another order than the ids, which the output must not follow.
    let at_four = NIGHTLY.replace("0 3", "0 4");
    let at_five = NIGHTLY.replace("0 3", "0 5");
    replica(&store, "r-d", &format!("{at_four}{OTHER}"), 400).await;
    replica(&store, "r-c", OTHER, 300).await;
    replica(&store, "r-a", &format!("{NIGHTLY}{OTHER}"), 200).await;
    replica(&store, "r-b", &at_five, 100).await;

    let listed = cli(&server, dir.path(), &["jobs"]).success();
    let row = |job: &str| {
        listed
            .lines()
            .find(|row| row.starts_with(job))
            .unwrap_or_else(|| panic!("no {job} row in:\n{listed}"))
            .to_owned()
    };
    assert!(
        row("nightly").contains("  DRIFT: differs on r-b, r-d; not declared by r-c  "),
        "{listed}"
    );
    assert!(row("other").contains("  not declared by r-b  "), "{listed}");
    assert!(!row("other").contains("DRIFT"), "{listed}");

    let json = one_document(&cli(&server, dir.path(), &["jobs", "--json"]).success());
    let listed: Vec<&str> = json["jobs"]
        .as_array()
        .expect("a jobs array")
        .iter()
        .filter_map(|job| job["job"].as_str())
        .collect();
    assert_eq!(listed, ["nightly", "other"], "{json}");
    let nightly = &json["jobs"][0];
    assert_eq!(nightly["enabled"], true, "{json}");
    assert_eq!(
        nightly["next_fires"].as_array().map(Vec::len),
        Some(3),
        "{json}"
    );
    assert_eq!(nightly["declared_by"], serde_json::json!(["r-a"]), "{json}");
    assert_eq!(
        nightly["drift"],
        serde_json::json!(["r-b", "r-d"]),
        "{json}"
    );
    assert_eq!(
        nightly["not_declared_by"],
        serde_json::json!(["r-c"]),
        "{json}"
    );
}

#[tokio::test]
async fn status_shows_runs_set_aside_for_a_replica_that_declares_their_job() {
    let (server, dir, store) = published().await;
    replica(&store, "old", OTHER, 0).await;
    for _ in 0..3 {
        enqueue(&store, "nightly", None).await;
    }
    // The replica that does not declare nightly puts its runs aside, two minutes ago.
    let since_ms = store.now_ms().await.expect("TIME") - 120_000;
    let claimed = store
        .clone()
        .with_frozen_clock(since_ms)
        .claim_runs(
            &["old/0"],
            &["default".to_owned()],
            Duration::from_secs(30),
            10,
        )
        .await
        .expect("claim");
    assert!(claimed.runs.is_empty(), "nothing it declares was ready");

    let local = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .expect("in range")
            .with_timezone(&chrono::Local)
    };
    let now = local(store.now_ms().await.expect("TIME"));
    let since = if local(since_ms).date_naive() == now.date_naive() {
        local(since_ms).format("%H:%M:%S").to_string()
    } else {
        local(since_ms).format("%Y-%m-%d %H:%M:%S").to_string()
    };
    let line =
        format!("3 runs of nightly waiting since {since} (2 min) for a replica that declares it");
    let status = cli(&server, dir.path(), &["status"]).success();
    assert!(status.contains(&format!("\n{line}\n")), "{status}");

    let json = one_document(&cli(&server, dir.path(), &["status", "--json"]).success());
    let aside = &json["undeclared"];
    assert_eq!(aside.as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(aside[0]["job"], "nightly", "{json}");
    assert_eq!(aside[0]["runs"], 3, "{json}");
    assert_eq!(aside[0]["since_ms"], since_ms, "{json}");
    assert!(
        aside[0]["waiting_ms"]
            .as_i64()
            .is_some_and(|waiting| waiting >= 120_000),
        "{json}"
    );
    assert_eq!(aside[0]["declared_by"], serde_json::json!([]), "{json}");

    // A replica that declares it, but has not claimed yet, is named.
    replica(&store, "new", NIGHTLY, 0).await;
    let status = cli(&server, dir.path(), &["status"]).success();
    assert!(
        status.contains(&format!("\n{line} (declared by new)\n")),
        "{status}"
    );
}

#[tokio::test]
async fn a_namespace_that_makes_no_hash_tag_is_refused_with_what_a_namespace_may_hold() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let url = server.url();
    for namespace in ["", "a}b", "two words"] {
        let args = ["status", "--redis", &url, "--namespace", namespace];
        let error = redcron_in(dir.path(), &args, "").failure(2);
        assert!(
            error.contains(&format!("invalid namespace {namespace:?}"))
                && error.contains("1 to 64 letters, digits"),
            "{error}"
        );
    }
    let error = Store::connect(&server.url(), "", redcron::store::StoreSettings::default())
        .await
        .err()
        .expect("the library refuses it too");
    assert!(error.to_string().contains("invalid namespace"), "{error}");
}

/// Each attempt of a run is a row of its own, with its own start, duration, exit code and
/// error: not the last attempt's, which is all the run's hash keeps.
#[tokio::test]
async fn history_shows_each_attempt_with_its_own_start_and_outcome() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = connect(&server).await;
    let flaky = jobs("[jobs.flaky]\ncommand = \"false\"\nretries = 1\nbackoff = \"1s\"\n");
    store.publish_definitions(&flaky).await.expect("publish");
    declare(&store, "replica", flaky).await;
    let run_id = enqueue(&store.clone().with_frozen_clock(1_000), "flaky", None).await;
    let at = |now_ms: i64| store.clone().with_frozen_clock(now_ms);

    let first = claim_run(&at(1_000), &["default"]).await;
    let failure = Failure {
        reason: FailReason::Failed,
        message: "exit status 3".to_owned(),
        exit_code: Some(3),
        output: "first attempt's output".to_owned(),
    };
    at(1_400)
        .fail_run(&first.id, Some(&first.worker), &failure, 0.0)
        .await
        .expect("fail");
    at(5_000)
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    let second = claim_run(&at(5_000), &["default"]).await;
    assert_eq!(second.attempt, 2);
    assert!(
        at(5_250)
            .ack_run(&second, Some(0), "second attempt's output")
            .await
            .expect("ack")
    );

    let history =
        one_document(&cli(&server, dir.path(), &["history", "flaky", "--json"]).success());
    let rows = history["runs"].as_array().expect("runs");
    let row = |attempt: i64| {
        rows.iter()
            .find(|row| row["attempt"] == attempt)
            .unwrap_or_else(|| panic!("no row of attempt {attempt}: {history}"))
    };
    let (retried, succeeded) = (row(1), row(2));
    assert_eq!(retried["id"], run_id.as_str());
    assert_eq!(retried["outcome"], "retrying");
    assert_eq!(retried["started"], "1970-01-01T00:00:01+00:00");
    assert_eq!(retried["duration_ms"], 400);
    assert_eq!(retried["exit_code"], 3);
    assert_eq!(retried["error"], "exit status 3");
    assert_eq!(
        retried["output"],
        serde_json::Value::Null,
        "the output kept is the last attempt's"
    );
    assert_eq!(succeeded["outcome"], "succeeded");
    assert_eq!(succeeded["started"], "1970-01-01T00:00:05+00:00");
    assert_eq!(succeeded["duration_ms"], 250);
    assert_eq!(succeeded["exit_code"], 0);
    assert_eq!(succeeded["output"], "second attempt's output");

    // A lost attempt uses no attempt number: the run after it is attempt 1 again, and its
    // output is not shown against the attempt that was lost.
    let run_id = enqueue(&at(10_000), "flaky", None).await;
    let lost = claim_run(&at(10_000), &["default"]).await;
    at(12_000)
        .fail_run(
            &lost.id,
            Some(&lost.worker),
            &Failure::without_output(FailReason::Lost, "lease expired"),
            0.0,
        )
        .await
        .expect("fail");
    at(13_000)
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    let rerun = claim_run(&at(13_000), &["default"]).await;
    assert_eq!((rerun.id.as_str(), rerun.attempt), (run_id.as_str(), 1));
    assert!(
        at(13_500)
            .ack_run(&rerun, Some(0), "the rerun's output")
            .await
            .expect("ack")
    );
    let history =
        one_document(&cli(&server, dir.path(), &["history", "flaky", "--json"]).success());
    let of_run: Vec<&serde_json::Value> = history["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|row| row["id"] == run_id.as_str())
        .collect();
    let outputs: Vec<(&serde_json::Value, &serde_json::Value)> = of_run
        .iter()
        .map(|row| (&row["outcome"], &row["output"]))
        .collect();
    assert_eq!(
        outputs,
        [
            (
                &serde_json::json!("succeeded"),
                &serde_json::json!("the rerun's output")
            ),
            (&serde_json::json!("retrying"), &serde_json::Value::Null),
        ],
        "{history}"
    );
}

/// A replica's own route (`@<id>`, where its runs of every-replica fires wait) found with ready
/// runs is counted once by `status`, served by that replica alone, and said to wait for it
/// rather than for a replica started with `--queues`; `runs list` lists its runs once.
#[tokio::test]
async fn a_replicas_own_route_is_shown_once_and_said_to_wait_for_its_replica() {
    let (server, dir, store) = published().await;
    replica(&store, "r1", NIGHTLY, 0).await;
    let mut redis = server.connection();
    let keys = crate::util::keys();
    let run = "nightly@1767225600000:gone";
    let () = redis::cmd("HSET")
        .arg(keys.run(run))
        .arg(&[
            ("job", "nightly"),
            ("kind", "cron"),
            ("state", "ready"),
            ("queue", "@gone"),
            ("priority", "normal"),
            ("attempt", "0"),
            ("max_attempts", "1"),
        ])
        .query(&mut redis)
        .expect("HSET");
    let () = redis::cmd("RPUSH")
        .arg(keys.ready_fires("@gone", redcron::schedule::Priority::Normal))
        .arg(run)
        .query(&mut redis)
        .expect("RPUSH");

    let status = one_document(&cli(&server, dir.path(), &["status", "--json"]).stdout);
    let routes: Vec<&serde_json::Value> = status["ready"]
        .as_array()
        .map(|queues| {
            queues
                .iter()
                .filter(|queue| queue["queue"] == "@gone")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(routes.len(), 1, "{status}");
    assert_eq!(routes[0]["normal"], 1, "{status}");
    assert_eq!(routes[0]["served_by"], 0, "{status}");
    let text = cli(&server, dir.path(), &["status"]).stdout;
    assert!(
        text.contains("route @gone: 1 ready run(s) of every-replica jobs for replica gone"),
        "{text}"
    );
    assert!(!text.contains("--queues @gone"), "{text}");
    let listed = cli(&server, dir.path(), &["runs", "list"]).stdout;
    assert_eq!(listed.matches(run).count(), 1, "{listed}");
}

/// Runs ready in a queue that no published job names (enqueued to it, or left there by a reload
/// that moved their job to another queue) are counted by `status`, which warns that no replica
/// serves the queue, and listed by `runs list`.
#[tokio::test]
async fn ready_runs_in_a_queue_no_job_names_are_shown_and_said_unserved() {
    let (server, dir, store) = published().await;
    replica(&store, "r1", NIGHTLY, 0).await;
    let mut redis = server.connection();
    let keys = crate::util::keys();
    let run = "0190b2e0-0000-7000-8000-000000000001";
    let () = redis::cmd("HSET")
        .arg(keys.run(run))
        .arg(&[
            ("job", "nightly"),
            ("kind", "adhoc"),
            ("state", "ready"),
            ("queue", "orphan"),
            ("priority", "normal"),
            ("attempt", "0"),
            ("max_attempts", "1"),
        ])
        .query(&mut redis)
        .expect("HSET");
    let () = redis::cmd("RPUSH")
        .arg(keys.ready("orphan", redcron::schedule::Priority::Normal))
        .arg(run)
        .query(&mut redis)
        .expect("RPUSH");

    let status = one_document(&cli(&server, dir.path(), &["status", "--json"]).stdout);
    let orphan = status["ready"]
        .as_array()
        .and_then(|queues| queues.iter().find(|queue| queue["queue"] == "orphan"))
        .unwrap_or_else(|| panic!("no queue orphan in {status}"));
    assert_eq!(orphan["normal"], 1, "{status}");
    assert_eq!(orphan["served_by"], 0, "{status}");
    let text = cli(&server, dir.path(), &["status"]).stdout;
    assert!(
        text.contains("queue orphan: 1 ready run(s) and no live replica serves it"),
        "{text}"
    );
    for args in [&["runs", "list"][..], &["runs", "list", "--json"]] {
        let listed = cli(&server, dir.path(), args).stdout;
        assert!(listed.contains(run), "{args:?}: {listed}");
    }
}

/// A skipped run ran no attempt: its history row shows no start, replica or attempt, though
/// the run's hash still holds those of an earlier attempt (a retry of a job paused meanwhile).
#[tokio::test]
async fn history_shows_a_skip_without_the_start_of_an_earlier_attempt() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let store = connect(&server).await;
    let flaky = jobs("[jobs.flaky]\ncommand = \"false\"\nretries = 1\nbackoff = \"1s\"\n");
    store.publish_definitions(&flaky).await.expect("publish");
    declare(&store, "replica", flaky).await;
    let at = |now_ms: i64| store.clone().with_frozen_clock(now_ms);
    let run_id = enqueue(&at(1_000), "flaky", None).await;
    let first = claim_run(&at(1_000), &["default"]).await;
    at(1_400)
        .fail_run(
            &first.id,
            Some(&first.worker),
            &Failure::without_output(FailReason::Failed, "exit status 1"),
            0.0,
        )
        .await
        .expect("fail");
    let () = redis::Commands::sadd(
        &mut server.connection(),
        crate::util::keys().paused(),
        "flaky",
    )
    .expect("SADD");
    at(5_000)
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    let claimed = store
        .clone()
        .with_frozen_clock(5_000)
        .claim_runs(
            &["replica/0"],
            &["default".to_owned()],
            Duration::from_secs(30),
            100,
        )
        .await
        .expect("claim");
    assert_eq!(claimed.skips, [("flaky".to_owned(), "paused".to_owned())]);

    let history =
        one_document(&cli(&server, dir.path(), &["history", "flaky", "--json"]).success());
    let skip = history["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .find(|row| row["id"] == run_id.as_str() && row["outcome"] == "skipped")
        .unwrap_or_else(|| panic!("no skipped row: {history}"));
    assert_eq!(
        (&skip["started"], &skip["replica"], &skip["attempt"]),
        (
            &serde_json::Value::Null,
            &serde_json::Value::Null,
            &serde_json::Value::Null
        ),
        "{skip}"
    );
}

#[tokio::test]
async fn runs_list_with_a_filter_says_when_it_stopped_before_the_runs_it_asks_for() {
    // More ready runs of another job ahead of the due one asked for than a filtered list
    // reads: the list stops there rather than read every run, and says so.
    let (server, dir, store) = published().await;
    let requests: Vec<Enqueue> = (0..12_000)
        .map(|_| Enqueue {
            job: "other".to_owned(),
            due_ms: None,
            payload: None,
            priority: None,
            unique: None,
        })
        .collect();
    store.enqueue_many(&requests).await.expect("enqueue");
    let later = store.now_ms().await.expect("TIME") + 3_600_000;
    let wanted = enqueue(&store, "nightly", Some(later)).await;

    let cut_short = cli(&server, dir.path(), &["runs", "list", "--job", "nightly"]);
    assert_eq!(cut_short.code, Some(0), "{}", cut_short.stderr);
    assert!(!cut_short.stdout.contains(&wanted), "{}", cut_short.stdout);
    assert!(
        cut_short
            .stderr
            .contains("stopped after reading 10000 runs")
            && cut_short.stderr.contains("--state"),
        "{}",
        cut_short.stderr
    );
    // One state at a time, the due run is found, and nothing is said to be left out.
    let due = cli(
        &server,
        dir.path(),
        &["runs", "list", "--job", "nightly", "--state", "due"],
    );
    assert!(due.stdout.contains(&wanted), "{}", due.stdout);
    assert_eq!(due.stderr, "", "{}", due.stderr);
}
