//! What the commands print for scripts, held against docs/cli.md: every `--json` document and
//! `--jsonl` line a command prints on a real Redis must match the schema documented for it.

use std::time::Duration;

use redcron::store::{FailReason, Failure, Store};
use serde_json::Value;

use crate::util::redis_server::RedisServer;
use crate::util::schemas::{Schemas, json_lines};
use crate::util::store::enqueue;
use crate::util::store::replica;
use crate::util::store::{claim_run, setup};
use crate::util::{cli, keys, one_document, redcron_in};

/// A job that fails once and then succeeds, one that dies at its first failure, and a cron job.
const JOBS: &str = "[jobs.flaky]\ncommand = \"false\"\nretries = 1\nbackoff = \"1s\"\n\
                    notify = [\"exec:true\"]\nnotify_on = [\"failed\", \"dead\"]\n\
                    [jobs.doomed]\ncommand = \"false\"\n\
                    [jobs.nightly]\nschedule = \"0 3 * * *\"\ncommand = \"true\"\n";

/// Runs a listing command with `--json` and with `--jsonl`, checks both against the schema
/// `id` and that the lines are the list's elements; returns the elements.
#[track_caller]
fn list_both_ways(run: impl Fn(&str) -> String, id: &str, list: &str) -> Vec<Value> {
    let schemas = Schemas::of_the_docs();
    let document = one_document(&run("--json"));
    schemas.assert_matches(id, &document);
    let lines = json_lines(&run("--jsonl"));
    schemas.assert_lines_match(id, list, &lines);
    assert_eq!(
        document[list].as_array(),
        Some(&lines),
        "--jsonl prints the elements of --json's list"
    );
    lines
}

/// A Redis with the jobs of [`JOBS`] published and declared by a live replica, a leader, and
/// the past of two runs: `flaky` failed once then succeeded, `doomed` died.
struct Seeded {
    server: RedisServer,
    dir: tempfile::TempDir,
    store: Store,
    flaky: String,
    doomed: String,
}

impl Seeded {
    async fn new() -> Self {
        let (server, store, _leader) = setup(JOBS).await;
        replica(&store, "replica", JOBS, 0).await;
        let at = |now_ms: i64| store.clone().with_frozen_clock(now_ms);

        let flaky = enqueue(&at(1_000), "flaky", None).await;
        let first = claim_run(&at(1_000), &["default"]).await;
        at(1_400)
            .fail_run(
                &first.id,
                Some(&first.worker),
                &failure("flaky's first"),
                0.0,
            )
            .await
            .expect("fail");
        at(5_000)
            .promote_due(100, Duration::from_secs(60), Duration::ZERO)
            .await
            .expect("promote");
        let second = claim_run(&at(5_000), &["default"]).await;
        assert!(
            at(5_250)
                .ack_run(&second, Some(0), "flaky's second")
                .await
                .expect("ack")
        );

        let doomed = enqueue(&at(6_000), "doomed", None).await;
        let only = claim_run(&at(6_000), &["default"]).await;
        at(6_400)
            .fail_run(
                &only.id,
                Some(&only.worker),
                &failure("doomed's first drive"),
                0.0,
            )
            .await
            .expect("fail");
        let dir = tempfile::tempdir().expect("temp dir");
        Self {
            server,
            dir,
            store,
            flaky,
            doomed,
        }
    }

    fn cli(&self, args: &[&str]) -> crate::util::Run {
        cli(&self.server, self.dir.path(), args)
    }

    fn output(&self, args: &[&str]) -> String {
        self.cli(args).success()
    }
}

/// A failure with exit code 1 that printed `output`.
fn failure(output: &str) -> Failure {
    Failure {
        reason: FailReason::Failed,
        message: "exit status 1".to_owned(),
        exit_code: Some(1),
        output: output.to_owned(),
    }
}

#[tokio::test]
async fn status_json_matches_its_schema() {
    let scenario = Seeded::new().await;
    let status = one_document(&scenario.output(&["status", "--json"]));
    Schemas::of_the_docs().assert_matches("status.json", &status);
    assert!(status["leader"].is_object(), "{status}");
    assert_eq!(status["dead"], 1, "{status}");
    let flaky = status["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["job"] == "flaky"))
        .unwrap_or_else(|| panic!("no flaky in {status}"));
    assert_eq!(flaky["last_outcome"], "succeeded", "{status}");
    let at_ms = flaky["last_at_ms"].as_i64().expect("a time in ms");
    let at = chrono::DateTime::parse_from_rfc3339(flaky["last_at"].as_str().expect("a time"))
        .expect("RFC 3339");
    assert_eq!(at.timestamp_millis(), at_ms, "{status}");
}

#[tokio::test]
async fn jobs_json_and_jsonl_match_their_schema() {
    let scenario = Seeded::new().await;
    let jobs = list_both_ways(
        |format| scenario.output(&["jobs", format]),
        "jobs.json",
        "jobs",
    );
    let names: Vec<&str> = jobs.iter().filter_map(|job| job["job"].as_str()).collect();
    assert_eq!(names, ["doomed", "flaky", "nightly"]);
    assert_eq!(
        jobs[0]["schedule"],
        Value::Null,
        "an on-demand job has none"
    );
    assert_eq!(jobs[2]["next_fires"].as_array().map(Vec::len), Some(3));
    assert_eq!(jobs[2]["command"], "true", "the command, whole");
}

#[tokio::test]
async fn history_json_and_jsonl_match_their_schema() {
    let scenario = Seeded::new().await;
    let runs = list_both_ways(
        |format| scenario.output(&["history", format]),
        "history.json",
        "runs",
    );
    let outcomes: Vec<(&str, &str)> = runs
        .iter()
        .filter_map(|run| Some((run["id"].as_str()?, run["outcome"].as_str()?)))
        .collect();
    assert_eq!(
        outcomes,
        [
            (scenario.doomed.as_str(), "dead"),
            (scenario.flaky.as_str(), "succeeded"),
            (scenario.flaky.as_str(), "retrying"),
        ],
        "newest first"
    );
    assert_eq!(runs[1]["started_ms"], 5_000);
    assert_eq!(runs[1]["started"], "1970-01-01T00:00:05+00:00");
    assert_eq!(runs[1]["duration_ms"], 250);
    for run in &runs {
        assert_eq!(run["replica"], "replica", "the worker's replica: {run}");
    }

    // Each row names its job and replica: an ad-hoc run's id alone says neither.
    let table = scenario.output(&["history"]);
    assert_every_header_lines_up(&table);
    let doomed = table
        .lines()
        .find(|line| line.starts_with(&scenario.doomed))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        doomed.contains(" doomed ") && doomed.contains(" replica "),
        "{table}"
    );
    let by_replica = |replica: &str| {
        one_document(&scenario.output(&["history", "--replica", replica, "--json"]))["runs"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert_eq!(by_replica("replica"), 3);
    // A replica the namespace knows that ran nothing lately has an empty history; an id it does
    // not know is a mistake, said with the ids it knows.
    replica(&scenario.store, "idle", JOBS, 0).await;
    assert_eq!(by_replica("idle"), 0);
    let unknown = scenario
        .cli(&["history", "--replica", "elsewhere", "--json"])
        .failure(2);
    assert_eq!(
        unknown,
        "redcron: unknown replica \"elsewhere\": no replica of the namespace, live, lost or \
         stopped within a day, has that id (known: idle, replica)\n"
    );
}

#[tokio::test]
async fn dead_list_and_show_json_match_their_schemas() {
    let scenario = Seeded::new().await;
    let runs = list_both_ways(
        |format| scenario.output(&["dead", "list", format]),
        "dead-list.json",
        "runs",
    );
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["id"], scenario.doomed.as_str());
    assert_eq!(runs[0]["died_ms"], 6_400);
    assert_eq!(runs[0]["died"], "1970-01-01T00:00:06.400+00:00");
    assert_eq!(runs[0]["output"], "doomed's first drive");

    let shown = one_document(&scenario.output(&["dead", "show", &scenario.doomed, "--json"]));
    Schemas::of_the_docs().assert_matches("run.json", &shown);
    assert_eq!(shown["state"], "dead");
    assert_eq!(shown["exit_code"], 1);
}

#[tokio::test]
async fn runs_show_json_matches_its_schema() {
    let scenario = Seeded::new().await;
    let shown = one_document(&scenario.output(&["runs", "show", &scenario.flaky, "--json"]));
    Schemas::of_the_docs().assert_matches("run.json", &shown);
    assert_eq!(shown["id"], scenario.flaky.as_str());
    assert_eq!(shown["attempt"], 2);
    assert_eq!(shown["started_ms"], 5_000);
    assert_eq!(shown["started"], "1970-01-01T00:00:05+00:00");
    assert_eq!(shown["payload"], Value::Null, "absent, not missing");
    assert_eq!(shown["fire"], Value::Null, "an ad-hoc run has no fire");
    assert_eq!(shown["notify"], serde_json::json!(["exec:true"]));
    assert_eq!(shown["notify_on"], serde_json::json!(["dead", "failed"]));
    let text = scenario.output(&["runs", "show", &scenario.flaky]);
    assert!(
        text.lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>()
                == ["notify_on", "dead", "failed"]),
        "{text}"
    );
}

#[tokio::test]
async fn runs_list_json_and_jsonl_match_their_schema() {
    let scenario = Seeded::new().await;
    let store = &scenario.store;
    let now_ms = store.now_ms().await.expect("TIME");
    let later = enqueue(store, "flaky", Some(now_ms + 3_600_000)).await;
    enqueue(store, "doomed", None).await;
    let running = claim_run(store, &["default"]).await;
    // A fire as the planner plans it: an entry in the due set, no record yet.
    let fire_ms = now_ms + 7_200_000;
    let planned = format!("nightly@{fire_ms}");
    let _: i64 = redis::cmd("ZADD")
        .arg(keys().due())
        .arg(fire_ms)
        .arg(&planned)
        .query(&mut scenario.server.connection())
        .expect("ZADD");

    let list = |args: &[&str]| {
        let runs = list_both_ways(
            |format| {
                let mut all = vec!["runs", "list", format];
                all.extend(args);
                scenario.output(&all)
            },
            "runs-list.json",
            "runs",
        );
        runs.into_iter()
            .map(|run| (run["id"].as_str().unwrap_or_default().to_owned(), run))
            .collect::<Vec<_>>()
    };
    let all = list(&[]);
    let ids: Vec<&str> = all.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, [running.id.as_str(), later.as_str(), planned.as_str()]);
    assert_eq!(all[0].1["state"], "active");
    assert_eq!(all[1].1["due_ms"], now_ms + 3_600_000);
    let fire = &all[2].1;
    assert_eq!(
        (
            &fire["job"],
            &fire["state"],
            &fire["fire_ms"],
            &fire["attempt"]
        ),
        (
            &Value::from("nightly"),
            &Value::from("scheduled"),
            &Value::from(fire_ms),
            &Value::Null
        ),
        "{fire}"
    );
    let due = list(&["--state", "due"]);
    assert_eq!(due.len(), 2, "{due:?}");
    let on_replica = list(&["--replica", "replica", "--state", "active"]);
    assert_eq!(on_replica.len(), 1, "{on_replica:?}");
    assert_eq!(on_replica[0].0, running.id);
    replica(store, "idle", JOBS, 0).await;
    assert!(list(&["--replica", "idle"]).is_empty());
    let unknown = scenario
        .cli(&["runs", "list", "--replica", "elsewhere"])
        .failure(2);
    assert!(
        unknown.starts_with("redcron: unknown replica \"elsewhere\"")
            && unknown.ends_with("(known: idle, replica)\n"),
        "{unknown}"
    );
    let flaky = list(&["--job", "flaky", "-n", "1"]);
    assert_eq!(flaky.len(), 1);
    assert_eq!(flaky[0].0, later);

    let table = scenario.output(&["runs", "list", "--state", "due"]);
    assert_every_header_lines_up(&table);
    assert!(
        table.contains(&format!(" {} (in ", rfc3339_of(fire_ms))),
        "{table}"
    );
    // A listed planned fire is shown for what it is, not as unknown.
    let shown = scenario.cli(&["runs", "show", &planned]).failure(2);
    assert!(
        shown.contains(&format!(
            "run \"{planned}\" has no record yet: it is a planned fire of job \"nightly\", due {} (in ",
            rfc3339_of(fire_ms)
        )),
        "{shown}"
    );
}

#[tokio::test]
async fn dead_list_shows_the_newest_deaths_first() {
    let scenario = Seeded::new().await;
    let at = |now_ms: i64| scenario.store.clone().with_frozen_clock(now_ms);
    let later = enqueue(&at(7_000), "doomed", None).await;
    let only = claim_run(&at(7_000), &["default"]).await;
    at(7_400)
        .fail_run(&only.id, Some(&only.worker), &failure("later"), 0.0)
        .await
        .expect("fail");
    let ids = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["dead", "list", "--json"];
        all.extend(args);
        one_document(&scenario.output(&all))["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .filter_map(|run| run["id"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(ids(&[]), [later.clone(), scenario.doomed.clone()]);
    assert_eq!(ids(&["-n", "1"]), std::slice::from_ref(&later));
    let table = scenario.output(&["dead", "list", "-n", "1"]);
    assert!(
        table.contains(&later) && !table.contains(&scenario.doomed),
        "{table}"
    );
}

/// Every command that changes something answers --json with what it did.
#[tokio::test]
async fn commands_that_change_something_answer_json_too() {
    let scenario = Seeded::new().await;
    let schemas = Schemas::of_the_docs();
    let document = |args: &[&str], schema: &str| {
        let mut all = args.to_vec();
        all.push("--json");
        let document = one_document(&scenario.output(&all));
        schemas.assert_matches(schema, &document);
        document
    };
    let paused = document(&["pause", "flaky"], "paused.json");
    assert_eq!(
        (&paused["paused"], &paused["was_paused"]),
        (&Value::Bool(true), &Value::Bool(false))
    );
    let again = document(&["pause", "flaky"], "paused.json");
    assert_eq!(again["was_paused"], true);
    let resumed = document(&["resume", "flaky"], "paused.json");
    assert_eq!(
        (&resumed["paused"], &resumed["was_paused"]),
        (&Value::Bool(false), &Value::Bool(true))
    );

    let held = document(&["hold", "--for", "1m"], "held.json");
    assert_eq!(
        (&held["held"], &held["for_ms"]),
        (&Value::Bool(true), &Value::from(60_000))
    );
    let released = document(&["release"], "held.json");
    assert_eq!(
        (&released["held"], &released["was_held"]),
        (&Value::Bool(false), &Value::Bool(true))
    );

    let retried = document(&["dead", "retry", &scenario.doomed], "dead-retried.json");
    assert_eq!(retried["retried"], serde_json::json!([scenario.doomed]));
    let none = document(&["dead", "retry", "--all"], "dead-retried.json");
    assert_eq!(none["retried"], serde_json::json!([]));
    let purged = document(&["dead", "purge"], "dead-purged.json");
    assert_eq!(purged["purged"], 0);
}

/// `ms` as the CLI prints an instant.
fn rfc3339_of(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .expect("in range")
        .to_rfc3339()
}

#[tokio::test]
async fn trigger_and_enqueue_json_match_their_schema() {
    let scenario = Seeded::new().await;
    let schemas = Schemas::of_the_docs();
    let triggered = one_document(&scenario.output(&["trigger", "flaky", "--json"]));
    schemas.assert_matches("enqueued.json", &triggered);
    assert!(triggered["declared_by"].is_array(), "{triggered}");
    assert_eq!(triggered["job"], "flaky");
    assert_eq!(triggered["paused"], false);

    let before_ms = scenario.store.now_ms().await.expect("TIME");
    let enqueued = one_document(&scenario.output(&["enqueue", "flaky", "--in", "2h", "--json"]));
    schemas.assert_matches("enqueued.json", &enqueued);
    let due_ms = enqueued["due_ms"].as_i64().expect("due_ms");
    assert!(
        (before_ms + 7_200_000..before_ms + 7_260_000).contains(&due_ms),
        "{enqueued}"
    );
    let shown = one_document(&scenario.output(&[
        "runs",
        "show",
        enqueued["id"].as_str().expect("an id"),
        "--json",
    ]));
    assert_eq!(shown["due_ms"], due_ms, "the id names the run enqueued");
}

#[test]
fn next_json_and_jsonl_match_their_schema() {
    let dir = tempfile::tempdir().expect("temp dir");
    let next = |format: &str| {
        let args = [
            "next",
            "30 1-3 * * *",
            "--tz",
            "America/New_York",
            "--after",
            "2026-11-01T00:00:00-04:00",
            "-n",
            "3",
            format,
        ];
        redcron_in(dir.path(), &args, "").success()
    };
    let fires = list_both_ways(next, "next.json", "fires");
    assert_eq!(fires[1]["fire"], "2026-11-01T02:30:00-05:00");
    let fire = chrono::DateTime::parse_from_rfc3339("2026-11-01T02:30:00-05:00").expect("time");
    assert_eq!(fires[1]["fire_ms"], fire.timestamp_millis());
}

#[test]
fn an_empty_list_is_an_empty_array_and_no_lines() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    for args in [&["history"][..], &["dead", "list"], &["jobs"]] {
        let with = |format: &str| {
            let mut all = args.to_vec();
            all.push(format);
            cli(&server, dir.path(), &all).success()
        };
        let document = one_document(&with("--json"));
        assert!(
            document.as_object().is_some_and(|object| object.len() == 1
                && object.values().all(|list| list == &serde_json::json!([]))),
            "{args:?}: {document}"
        );
        assert_eq!(with("--jsonl"), "", "{args:?}");
    }
}

/// A count of 0 reads in Redis as "no limit": it must be refused, not list everything.
#[tokio::test]
async fn a_count_of_zero_is_refused() {
    let scenario = Seeded::new().await;
    let refused = [
        scenario.cli(&["history", "-n", "0"]),
        scenario.cli(&["runs", "list", "-n", "0"]),
        scenario.cli(&["dead", "list", "-n", "0", "--json"]),
        redcron_in(scenario.dir.path(), &["next", "@daily", "-n", "0"], ""),
    ];
    for run in refused {
        let error = run.failure(2);
        assert!(error.contains("is not a count of at least 1"), "{error}");
    }
    let newest = one_document(&scenario.output(&["history", "-n", "1", "--json"]));
    assert_eq!(newest["runs"].as_array().map(Vec::len), Some(1), "{newest}");
}

#[tokio::test]
async fn enqueue_refuses_a_run_due_more_than_a_year_ahead_and_shows_when_the_run_is_due() {
    let scenario = Seeded::new().await;
    let error = scenario
        .cli(&["enqueue", "flaky", "--in", "400d"])
        .failure(2);
    assert!(error.contains("is more than 366 d"), "{error}");
    // An instant that far ahead is held to the same bound.
    let error = scenario
        .cli(&["enqueue", "flaky", "--at", "9999-12-31T23:59:59Z"])
        .failure(2);
    assert!(
        error.contains("--at \"9999-12-31T23:59:59Z\" is more than 366 d ahead"),
        "{error}"
    );

    let out = scenario.output(&["enqueue", "flaky", "--in", "2h"]);
    let (_, due) = out.split_once(" due ").unwrap_or_else(|| panic!("{out}"));
    let (at, relative) = due
        .trim_end()
        .split_once(' ')
        .unwrap_or_else(|| panic!("{out}"));
    assert!(chrono::DateTime::parse_from_rfc3339(at).is_ok(), "{out}");
    assert_eq!(relative, "(in 2 h)", "{out}");
}

/// After `dead retry`, a run's attempts count from 1 again: the first drive's attempt 1 must
/// not show the output of the second drive's attempt 1, which is all the run's record keeps.
#[tokio::test]
async fn history_keeps_the_output_of_a_redriven_run_to_its_own_drive() {
    let scenario = Seeded::new().await;
    let doomed = scenario.doomed.as_str();
    scenario.output(&["dead", "retry", doomed]);
    let store = &scenario.store;
    store
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    let again = claim_run(store, &["default"]).await;
    assert_eq!((again.id.as_str(), again.attempt), (doomed, 1));
    store
        .fail_run(
            &again.id,
            Some(&again.worker),
            &failure("doomed's second drive"),
            0.0,
        )
        .await
        .expect("fail");

    let history = one_document(&scenario.output(&["history", "doomed", "--json"]));
    let outputs: Vec<(&Value, &Value)> = history["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| (&run["attempt"], &run["output"]))
        .collect();
    assert_eq!(
        outputs,
        [
            (&Value::from(1), &Value::from("doomed's second drive")),
            (&Value::from(1), &Value::Null),
        ],
        "{history}"
    );
}

/// Text is for people: instants in RFC 3339, spans in seconds, never epoch milliseconds.
#[tokio::test]
async fn text_output_shows_times_and_durations_as_people_read_them() {
    let scenario = Seeded::new().await;
    let history = scenario.output(&["history", "flaky"]);
    let succeeded = history
        .lines()
        .find(|line| line.contains("succeeded"))
        .unwrap_or_else(|| panic!("{history}"));
    assert!(
        succeeded.contains(" 1970-01-01T00:00:05+00:00 "),
        "{history}"
    );
    assert!(succeeded.contains(" 0.25 s "), "{history}");
    assert!(!history.contains("250ms"), "{history}");

    let shown = scenario.output(&["runs", "show", &scenario.flaky]);
    let line = |name: &str| {
        shown
            .lines()
            .find(|line| line.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} in:\n{shown}"))
            .split_whitespace()
            .skip(1)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(line("started"), "1970-01-01T00:00:05+00:00", "{shown}");
    assert_eq!(line("backoff"), "1.0 s", "{shown}");
    assert!(!shown.contains("_ms"), "{shown}");
    assert_every_header_lines_up(&history);
}

/// Each header of a table starts where its column's cells start.
#[track_caller]
fn assert_every_header_lines_up(table: &str) {
    let mut lines = table.lines();
    let header = lines.next().expect("a header");
    let starts: Vec<usize> = header
        .match_indices("  ")
        .map(|(index, _)| {
            let rest = &header[index..];
            index + rest.len() - rest.trim_start().len()
        })
        .collect();
    for row in lines {
        for start in &starts {
            let before = row.get(..*start).unwrap_or(row);
            assert!(
                row.len() <= *start || before.ends_with(' '),
                "a cell overlaps the column at {start}:\n{table}"
            );
        }
    }
}
