//! What the commands print for scripts, held against docs/cli.md: every `--json` document and
//! `--jsonl` line a command prints on a real Redis must match the schema documented for it.

use std::collections::HashMap;
use std::time::Duration;

use redcron::store::{FailReason, Failure, Store};
use serde_json::Value;

use crate::inspect::replica;
use crate::slots::enqueue;
use crate::store::{claim_run, setup};
use crate::util::redis_server::RedisServer;
use crate::util::{cli, one_document, redcron_in};

/// A job that fails once and then succeeds, one that dies at its first failure, and a cron job.
const JOBS: &str = "[jobs.flaky]\ncommand = \"false\"\nretries = 1\nbackoff = \"1s\"\n\
                    [jobs.doomed]\ncommand = \"false\"\n\
                    [jobs.nightly]\nschedule = \"0 3 * * *\"\ncommand = \"true\"\n";

/// The schemas of docs/cli.md, by `$id`: the page is read when the tests are built, so a change
/// to it is tested at once.
struct Schemas(HashMap<String, Value>);

impl Schemas {
    fn of_the_docs() -> Self {
        let page = include_str!("../docs/cli.md");
        let schemas = page
            .split("```json\n")
            .skip(1)
            .map(|block| {
                let text = block.split("```").next().unwrap_or_default();
                let schema: Value = serde_json::from_str(text)
                    .unwrap_or_else(|error| panic!("a schema of docs/cli.md is not JSON: {error}"));
                let id = schema["$id"]
                    .as_str()
                    .expect("every schema has an $id")
                    .to_owned();
                (id, schema)
            })
            .collect();
        Self(schemas)
    }

    fn schema(&self, id: &str) -> &Value {
        self.0
            .get(id)
            .unwrap_or_else(|| panic!("docs/cli.md has no schema {id}"))
    }

    /// Asserts that `value` matches the schema `id`, listing every mismatch.
    #[track_caller]
    fn assert_matches(&self, id: &str, value: &Value) {
        let mut problems = Vec::new();
        self.check(self.schema(id), value, "$", &mut problems);
        assert!(
            problems.is_empty(),
            "the output does not match {id} in docs/cli.md:\n{}\n{value:#}",
            problems.join("\n")
        );
    }

    /// Asserts that each of `lines` (what `--jsonl` printed) matches the items of the list
    /// `list` in the schema `id`.
    #[track_caller]
    fn assert_lines_match(&self, id: &str, list: &str, lines: &[Value]) {
        let items = &self.schema(id)["properties"][list]["items"];
        for line in lines {
            let mut problems = Vec::new();
            self.check(items, line, "$", &mut problems);
            assert!(
                problems.is_empty(),
                "a line does not match the {list} of {id} in docs/cli.md:\n{}\n{line:#}",
                problems.join("\n")
            );
        }
    }

    /// The part of JSON Schema the page uses. A keyword this does not know fails the test rather
    /// than passing unchecked.
    fn check(&self, schema: &Value, value: &Value, path: &str, problems: &mut Vec<String>) {
        let schema = schema.as_object().expect("a schema is an object");
        for (keyword, rule) in schema {
            match keyword.as_str() {
                "$id" | "title" | "description" => {}
                "$ref" => {
                    let target = rule.as_str().expect("$ref names a schema");
                    self.check(self.schema(target), value, path, problems);
                }
                "allOf" => {
                    for part in rule.as_array().expect("allOf is a list") {
                        self.check(part, value, path, problems);
                    }
                }
                "type" => {
                    let types: Vec<&str> = match rule {
                        Value::String(one) => vec![one.as_str()],
                        list => list
                            .as_array()
                            .expect("type is a name or a list")
                            .iter()
                            .filter_map(Value::as_str)
                            .collect(),
                    };
                    if !types.iter().any(|name| is_of_type(value, name)) {
                        problems.push(format!("{path}: {value} is not of type {types:?}"));
                    }
                }
                "enum" => {
                    if !rule.as_array().expect("enum is a list").contains(value) {
                        problems.push(format!("{path}: {value} is not one of {rule}"));
                    }
                }
                "format" => {
                    assert_eq!(rule, "date-time", "the only format used");
                    if let Some(text) = value.as_str()
                        && chrono::DateTime::parse_from_rfc3339(text).is_err()
                    {
                        problems.push(format!("{path}: {text:?} is not an RFC 3339 time"));
                    }
                }
                "required" => {
                    for name in rule.as_array().expect("required is a list") {
                        let name = name.as_str().expect("a field name");
                        if value
                            .as_object()
                            .is_some_and(|object| !object.contains_key(name))
                        {
                            problems.push(format!("{path}: no field {name:?}"));
                        }
                    }
                }
                "properties" => {
                    for (name, property) in rule.as_object().expect("properties is an object") {
                        if let Some(field) = value.get(name) {
                            self.check(property, field, &format!("{path}.{name}"), problems);
                        }
                    }
                }
                "additionalProperties" => {
                    assert_eq!(rule, false, "only additionalProperties: false is used");
                    let documented = schema["properties"].as_object();
                    for name in value
                        .as_object()
                        .into_iter()
                        .flat_map(|object| object.keys())
                    {
                        if !documented.is_some_and(|documented| documented.contains_key(name)) {
                            problems.push(format!("{path}: field {name:?} is not documented"));
                        }
                    }
                }
                "items" => {
                    for (index, item) in value.as_array().into_iter().flatten().enumerate() {
                        self.check(rule, item, &format!("{path}[{index}]"), problems);
                    }
                }
                other => {
                    panic!("docs/cli.md uses the keyword {other:?}, which this test does not check")
                }
            }
        }
    }
}

fn is_of_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => value.is_i64() || value.is_u64(),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        other => panic!("unknown type {other:?} in docs/cli.md"),
    }
}

/// What `--jsonl` printed: one JSON object a line, and nothing else.
#[track_caller]
fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line:?}"))
        })
        .collect()
}

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
struct Scenario {
    server: RedisServer,
    dir: tempfile::TempDir,
    store: Store,
    flaky: String,
    doomed: String,
}

impl Scenario {
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
    let scenario = Scenario::new().await;
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
    let scenario = Scenario::new().await;
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
}

#[tokio::test]
async fn history_json_and_jsonl_match_their_schema() {
    let scenario = Scenario::new().await;
    let runs = list_both_ways(
        |format| scenario.output(&["history", format]),
        "history.json",
        "runs",
    );
    let outcomes: Vec<(&str, &str)> = runs
        .iter()
        .filter_map(|run| Some((run["run"].as_str()?, run["outcome"].as_str()?)))
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
}

#[tokio::test]
async fn dead_list_and_show_json_match_their_schemas() {
    let scenario = Scenario::new().await;
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
    let scenario = Scenario::new().await;
    let shown = one_document(&scenario.output(&["runs", "show", &scenario.flaky, "--json"]));
    Schemas::of_the_docs().assert_matches("run.json", &shown);
    assert_eq!(shown["id"], scenario.flaky.as_str());
    assert_eq!(shown["attempt"], 2);
    assert_eq!(shown["started_ms"], 5_000);
    assert_eq!(shown["started"], "1970-01-01T00:00:05+00:00");
    assert_eq!(shown["payload"], Value::Null, "absent, not missing");
    assert_eq!(shown["fire"], Value::Null, "an ad-hoc run has no fire");
}

#[tokio::test]
async fn trigger_and_enqueue_json_match_their_schema() {
    let scenario = Scenario::new().await;
    let schemas = Schemas::of_the_docs();
    let triggered = one_document(&scenario.output(&["trigger", "flaky", "--json"]));
    schemas.assert_matches("enqueued.json", &triggered);
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
    let scenario = Scenario::new().await;
    let refused = [
        scenario.cli(&["history", "-n", "0"]),
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
async fn enqueue_refuses_a_delay_of_more_than_a_year_and_shows_when_the_run_is_due() {
    let scenario = Scenario::new().await;
    let error = scenario
        .cli(&["enqueue", "flaky", "--in", "400d"])
        .failure(2);
    assert!(error.contains("is more than 366 d"), "{error}");

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
    let scenario = Scenario::new().await;
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
    let scenario = Scenario::new().await;
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
