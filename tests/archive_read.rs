//! Reading the archive back: `history --archive` lists Redis's outcomes and the archive's as one
//! history, each once, against a ledger the jobs write outside Redis; `runs show` and the
//! console's run page find a run whose record expired in the archive; a damaged part is named
//! and the others are read.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::Commands;
use serde_json::{Value, json};

use crate::util::archive::{archived, stop};
use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{Scenario, event_entries};
use crate::util::schemas::Schemas;
use crate::util::web::WebProcess;
use crate::util::{cli, keys, one_document, wait_until};

/// An outcome as `history --json` and the events stream both name it: run id, when it was
/// recorded (ms), outcome.
type Outcome = (String, i64, String);

/// Every outcome the events stream holds, oldest first.
fn outcomes_in_redis(scenario: &Scenario) -> Vec<Outcome> {
    event_entries(scenario)
        .into_iter()
        .filter_map(|entry| {
            let state: String = entry.get("state")?;
            let run: String = entry.get("run")?;
            let at_ms = entry.id.split_once('-')?.0.parse().ok()?;
            ["succeeded", "retrying", "dead", "skipped"]
                .contains(&state.as_str())
                .then_some((run, at_ms, state))
        })
        .collect()
}

/// `history ... --json`'s elements, asserted newest first.
#[track_caller]
fn history(scenario: &Scenario, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["history", "-n", "100000", "--json"];
    all.extend(args);
    let run = cli(&scenario.server, scenario.dir.path(), &all);
    assert_eq!(run.code, Some(0), "{all:?}: {}", run.stderr);
    let runs = one_document(&run.stdout)["runs"]
        .as_array()
        .expect("runs")
        .clone();
    let times: Vec<i64> = runs
        .iter()
        .map(|run| run["at_ms"].as_i64().expect("at_ms"))
        .collect();
    assert!(
        times.windows(2).all(|pair| pair[0] >= pair[1]),
        "not newest first: {times:?}"
    );
    runs
}

/// Each element's outcome, counted: a count of 2 is a duplicate.
fn counted(runs: &[Value]) -> BTreeMap<Outcome, usize> {
    let mut counts = BTreeMap::new();
    for run in runs {
        let outcome = (
            run["id"].as_str().expect("id").to_owned(),
            run["at_ms"].as_i64().expect("at_ms"),
            run["outcome"].as_str().expect("outcome").to_owned(),
        );
        *counts.entry(outcome).or_default() += 1;
    }
    counts
}

/// What a namespace archived with a short retention: a replica ran `tick` (every second,
/// printing its run id) and `broken` (every 2 s, always failing) until some runs' records
/// expired, and stopped; its archive and every outcome it recorded.
struct Archived {
    scenario: Scenario,
    archive: PathBuf,
    url: String,
    outcomes: Vec<Outcome>,
}

fn archived_namespace() -> Archived {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\noverlap = \"allow\"\n\
         command = \"{}; echo tick $REDCRON_RUN_ID\"\n\n\
         [jobs.broken]\nschedule = \"*/2 * * * * *\"\n\
         command = \"echo broken $REDCRON_RUN_ID; exit 3\"\n",
        scenario.record("")
    ));
    let archiving = [
        "--archive",
        &url,
        "--archive-part-age",
        "1s",
        "--retention",
        "1s",
    ];
    let replicas = scenario.replicas_with_a_leader(&["r1"], &archiving);
    // Ticks whose record expired once archived (a dead run's stays in the dead letters), a few
    // deaths, and outcomes enough for the three zones of the history's test.
    let expired_ticks = || {
        let mut connection = scenario.server.connection();
        outcomes_in_redis(&scenario)
            .into_iter()
            .filter(|(run, _, _)| run.starts_with("tick@"))
            .filter(|(run, _, _)| {
                let exists: bool = connection.exists(keys().run(run)).expect("EXISTS");
                !exists
            })
            .count()
    };
    let deaths = || {
        outcomes_in_redis(&scenario)
            .iter()
            .filter(|(_, _, state)| state == "dead")
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(60), || expired_ticks() >= 6
            && deaths() >= 3
            && outcomes_in_redis(&scenario).len() >= 24),
        "{} ticks' records expired once archived, {} runs died\n{}",
        expired_ticks(),
        deaths(),
        ReplicaProcess::logs(&replicas)
    );
    let logs = stop(replicas);
    let outcomes = outcomes_in_redis(&scenario);
    let archived_count = archived(&archive).len();
    assert_eq!(
        archived_count,
        outcomes.len(),
        "the last replica to stop left outcomes unarchived\n{logs}"
    );
    Archived {
        scenario,
        archive,
        url,
        outcomes,
    }
}

#[test]
fn history_reads_redis_and_the_archive_as_one_with_no_duplicate_and_no_gap() {
    let Archived {
        scenario,
        archive,
        url,
        outcomes,
    } = archived_namespace();
    // Three zones: the newest part moved out of the archive holds outcomes only Redis has;
    // the events stream trimmed leaves the oldest in the archive alone; those between are in
    // both.
    let parts: BTreeMap<String, (PathBuf, usize)> =
        archived(&archive)
            .into_iter()
            .fold(BTreeMap::new(), |mut parts, (path, _)| {
                let path = PathBuf::from(path);
                let name = path
                    .file_name()
                    .and_then(|name| name.to_str())
                    .expect("a part's name")
                    .to_owned();
                parts.entry(name).or_insert((path, 0)).1 += 1;
                parts
            });
    let newest = parts
        .values()
        .max_by_key(|(path, _)| {
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            let first = name.trim_start_matches("part-");
            let mut numbers = first.split('-').map(|n| n.parse::<u64>().unwrap_or(0));
            (numbers.next(), numbers.next())
        })
        .expect("parts")
        .clone();
    let kept = newest.1 + 4;
    assert!(
        outcomes.len() > kept + 4,
        "too few outcomes ({}) for three zones",
        outcomes.len()
    );
    std::fs::rename(&newest.0, scenario.dir.path().join("moved.ndjson.gz")).expect("move");
    let _: () = scenario
        .server
        .connection()
        .xtrim(keys().events(), redis::streams::StreamMaxlen::Equals(kept))
        .expect("XTRIM");
    let in_redis: BTreeSet<Outcome> = outcomes_in_redis(&scenario).into_iter().collect();
    assert!(
        in_redis.len() < outcomes.len(),
        "the trim left every outcome"
    );

    // Without the archive, what Redis keeps.
    let hot = counted(&history(&scenario, &[]));
    assert_eq!(hot.keys().cloned().collect::<BTreeSet<_>>(), in_redis);

    // With it, every outcome once, and every run of the ledger.
    let runs = history(&scenario, &["--archive", &url]);
    let all = counted(&runs);
    let twice: Vec<_> = all.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "listed twice: {twice:?}");
    let expected: BTreeSet<Outcome> = outcomes.iter().cloned().collect();
    let listed: BTreeSet<Outcome> = all.keys().cloned().collect();
    assert_eq!(
        listed.difference(&expected).collect::<Vec<_>>(),
        Vec::<&Outcome>::new(),
        "listed, never recorded"
    );
    assert_eq!(
        expected.difference(&listed).collect::<Vec<_>>(),
        Vec::<&Outcome>::new(),
        "recorded, not listed"
    );
    let ledger: BTreeSet<String> = scenario
        .ledger()
        .into_iter()
        .map(|(run, _, _)| run)
        .collect();
    let ticks: BTreeSet<String> = runs
        .iter()
        .filter(|run| run["job"] == "tick" && run["outcome"] == "succeeded")
        .map(|run| run["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(ticks, ledger, "the ledger's runs and the history's differ");
    let schemas = Schemas::of_the_docs();
    schemas.assert_matches("history.json", &json!({ "runs": runs }));
    // An archived attempt keeps its own output.
    let archived_only = runs
        .iter()
        .find(|run| {
            let outcome = (
                run["id"].as_str().unwrap_or_default().to_owned(),
                run["at_ms"].as_i64().unwrap_or_default(),
                run["outcome"].as_str().unwrap_or_default().to_owned(),
            );
            run["job"] == "tick" && !in_redis.contains(&outcome)
        })
        .expect("a tick only the archive holds");
    assert_eq!(
        archived_only["output"].as_str(),
        Some(format!("tick {}\n", archived_only["id"].as_str().expect("id")).as_str()),
        "{archived_only}"
    );

    // The filters keep what they say, across both.
    let failed = counted(&history(&scenario, &["--archive", &url, "--failed"]));
    let expected_failed: BTreeSet<Outcome> = expected
        .iter()
        .filter(|(_, _, state)| state == "dead" || state == "retrying")
        .cloned()
        .collect();
    assert!(!expected_failed.is_empty());
    assert_eq!(
        failed.keys().cloned().collect::<BTreeSet<_>>(),
        expected_failed
    );
    let broken = counted(&history(&scenario, &["broken", "--archive", &url]));
    let expected_broken: BTreeSet<Outcome> = expected
        .iter()
        .filter(|(run, _, _)| run.starts_with("broken@"))
        .cloned()
        .collect();
    assert_eq!(
        broken.keys().cloned().collect::<BTreeSet<_>>(),
        expected_broken
    );
    let times: Vec<i64> = outcomes.iter().map(|(_, at_ms, _)| *at_ms).collect();
    let (since, until) = (times[times.len() / 4], times[times.len() * 3 / 4]);
    let rfc3339 = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .expect("a time")
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    };
    let window = counted(&history(
        &scenario,
        &[
            "--archive",
            &url,
            "--since",
            &rfc3339(since),
            "--until",
            &rfc3339(until),
        ],
    ));
    let expected_window: BTreeSet<Outcome> = expected
        .iter()
        .filter(|(_, at_ms, _)| (since..=until).contains(at_ms))
        .cloned()
        .collect();
    assert_eq!(
        window.keys().cloned().collect::<BTreeSet<_>>(),
        expected_window
    );
    // --jsonl: the same elements, one a line; -n: the newest.
    let lines = cli(
        &scenario.server,
        scenario.dir.path(),
        &["history", "--archive", &url, "-n", "5", "--jsonl"],
    );
    assert_eq!(lines.code, Some(0), "{}", lines.stderr);
    let lines: Vec<Value> = lines
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(lines, runs[..5].to_vec());
}

#[test]
fn a_run_whose_record_expired_is_shown_from_the_archive_by_runs_show_and_the_console() {
    let Archived {
        scenario, outcomes, ..
    } = archived_namespace();
    let mut connection = scenario.server.connection();
    let (run, _, _) = outcomes
        .iter()
        .find(|(run, _, state)| {
            let exists: bool = connection.exists(keys().run(run)).expect("EXISTS");
            run.starts_with("tick@") && state == "succeeded" && !exists
        })
        .expect("a tick whose record expired");
    let printed = format!("tick {run}\n");
    // No --archive: the namespace says where it archives.
    let shown = cli(
        &scenario.server,
        scenario.dir.path(),
        &["runs", "show", run],
    );
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    assert!(
        shown
            .stdout
            .contains("from the archive: Redis no longer holds this run"),
        "{}",
        shown.stdout
    );
    assert!(
        shown
            .stdout
            .lines()
            .any(|line| line.starts_with("state") && line.ends_with("succeeded")),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains(&format!("tick {run}")),
        "{}",
        shown.stdout
    );
    let json = cli(
        &scenario.server,
        scenario.dir.path(),
        &["runs", "show", run, "--json"],
    );
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let document = one_document(&json.stdout);
    Schemas::of_the_docs().assert_matches("run.json", &document);
    assert_eq!(document["state"], "succeeded", "{document}");
    assert_eq!(document["job"], "tick", "{document}");
    assert_eq!(document["output"].as_str(), Some(printed.as_str()));
    assert!(
        document["archived_in"]
            .as_str()
            .is_some_and(|part| part.starts_with("file://") && part.ends_with(".ndjson.gz")),
        "{document}"
    );
    // A run neither holds is still unknown.
    let unknown = cli(
        &scenario.server,
        scenario.dir.path(),
        &["runs", "show", "tick@1000"],
    );
    assert_eq!(unknown.code, Some(2), "{}", unknown.stdout);

    let console = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = console.get(&format!("/runs/{run}"));
    assert_eq!(page.status, 200, "{}\n{}", page.body, console.log());
    assert!(page.body.contains("From the archive"), "{}", page.body);
    assert!(page.body.contains(&format!("tick {run}")), "{}", page.body);
    let api = console.get(&format!("/api/v1/runs/{run}"));
    assert_eq!(api.status, 200, "{}", api.body);
    assert_eq!(api.json()["output"].as_str(), Some(printed.as_str()));
    assert_eq!(console.get("/runs/tick@1000").status, 404);
}

/// Writes a part of `records` (JSON lines, gzipped) as `name` under `archive`.
fn write_part(archive: &Path, name: &str, bytes: &[u8]) {
    let path = archive.join(name);
    std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
    std::fs::write(path, bytes).expect("write a part");
}

fn gzipped(text: &str) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(text.as_bytes()).expect("gzip");
    encoder.finish().expect("gzip")
}

/// A record of the schema: run `id` of job `backup` ended `outcome` at `at_ms`.
fn record(id: &str, outcome: &str, at_ms: i64) -> String {
    format!(
        "{}\n",
        json!({
            "v": 1, "id": id, "job": "backup", "outcome": outcome, "at_ms": at_ms,
            "event": format!("{at_ms}-0"), "attempt": 1, "output": format!("{id} said so\n"),
        })
    )
}

#[test]
fn a_damaged_part_is_named_and_the_others_are_read() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    // 2026-03-08T07:00:00Z and the hours after.
    let hour = 1_772_953_200_000_i64;
    let run = |n: i64| format!("backup@{}", hour + n * 3_600_000);
    let hour_dir = |n: i64| format!("runs/v1/date=2026-03-08/hour={:02}", 7 + n);
    let part = |n: i64| {
        let at = hour + n * 3_600_000 + 1000;
        format!("{}/part-{at}-0-{at}-1.ndjson.gz", hour_dir(n))
    };
    write_part(
        &archive,
        &part(0),
        &gzipped(
            &(record(&run(0), "succeeded", hour + 1000) + &record(&run(0), "dead", hour + 2000)),
        ),
    );
    write_part(&archive, &part(1), b"not gzip at all");
    write_part(
        &archive,
        &part(2),
        &gzipped(
            &("{\"v\": 1, \"id\":\n".to_owned()
                + &record(&run(2), "succeeded", hour + 2 * 3_600_000 + 1000)),
        ),
    );
    let listed = cli(
        &server,
        dir.path(),
        &["history", "--archive", &url, "--json"],
    );
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert!(
        listed.stderr.contains(&part(1)),
        "the damaged part is not named: {}",
        listed.stderr
    );
    assert!(
        listed.stderr.contains(&format!("{}, line 1", part(2))),
        "the damaged line is not named: {}",
        listed.stderr
    );
    let ids: Vec<(String, String)> = one_document(&listed.stdout)["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| {
            (
                run["id"].as_str().expect("id").to_owned(),
                run["outcome"].as_str().expect("outcome").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        ids,
        [
            (run(2), "succeeded".to_owned()),
            (run(0), "dead".to_owned()),
            (run(0), "succeeded".to_owned()),
        ]
    );
    let shown = cli(
        &server,
        dir.path(),
        &["runs", "show", &run(0), "--archive", &url, "--json"],
    );
    assert_eq!(shown.code, Some(0), "{}", shown.stderr);
    assert!(shown.stderr.contains(&part(1)), "{}", shown.stderr);
    let document = one_document(&shown.stdout);
    assert_eq!(document["state"], "dead", "{document}");
    assert_eq!(document["attempt"], 1, "{document}");
    assert!(
        document["archived_in"]
            .as_str()
            .is_some_and(|at| at.ends_with(&part(0))),
        "{document}"
    );
    // The console, reading the namespace's archive: a run in a damaged part is not called
    // unknown, since it may be there; one the readable parts hold is shown.
    let _: () = server
        .connection()
        .set(keys().archive_marker(), &url)
        .expect("SET");
    let console = WebProcess::start(&server.url(), dir.path(), &[]);
    for path in [
        format!("/api/v1/runs/{}", run(1)),
        format!("/runs/{}", run(1)),
    ] {
        let answer = console.get(&path);
        assert_eq!(answer.status, 503, "{path}: {}", answer.body);
        assert!(answer.body.contains(&part(1)), "{path}: {}", answer.body);
        // The viewer sees the part inside the archive and why; the server's path is for its log.
        assert!(
            answer.body.contains(&format!("{}: damaged", part(1))),
            "{path}: {}",
            answer.body
        );
        assert!(
            !answer.body.contains(&dir.path().display().to_string()),
            "{path}: {}",
            answer.body
        );
    }
    let logged = console.log();
    assert!(
        logged.contains("WARN") && logged.contains(&url) && logged.contains(&part(1)),
        "{logged}"
    );
    let api = console.get(&format!("/api/v1/runs/{}", run(1)));
    assert_eq!(
        api.json()["error"]["code"],
        "archive-unavailable",
        "{}",
        api.body
    );
    assert_eq!(console.get(&format!("/api/v1/runs/{}", run(0))).status, 200);
}

/// The README's jq query, as written there.
fn readme_jq_query() -> String {
    include_str!("../README.md")
        .lines()
        .skip_while(|line| !line.starts_with("# jq, over the files"))
        .skip(1)
        .take_while(|line| !line.starts_with("```"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_readmes_jq_query_finds_every_run_of_backup_db_that_failed_for_good_last_quarter() {
    let query = readme_jq_query();
    assert!(
        query.contains("jq "),
        "the README has no jq query: {query:?}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = dir.path().join("archive");
    // 2026-02-10T03:00:00Z, in the quarter, and 2026-04-01T03:00:00Z, after it.
    let (february, april) = (1_770_692_400_000_i64, 1_775_012_400_000_i64);
    let line = |id: &str, job: &str, outcome: &str, at_ms: i64| {
        format!(
            "{}\n",
            json!({ "v": 1, "id": id, "job": job, "outcome": outcome, "at_ms": at_ms,
                    "at": "", "attempt": 1, "exit_code": 1, "reason": "failed", "output": "x\n" })
        )
    };
    write_part(
        &archive,
        &format!("runs/v1/date=2026-02-10/hour=03/part-{february}-0-{february}-3.ndjson.gz"),
        &gzipped(
            &(line("backup-db@1", "backup-db", "dead", february)
                + &line("backup-db@2", "backup-db", "retrying", february)
                + &line("backup-db@3", "backup-db", "succeeded", february)
                + &line("other@1", "other", "dead", february)),
        ),
    );
    // A damaged part, cut short in the middle of a line, read before another part of the
    // quarter: what it holds whole is read, and the next part's first line is not lost.
    let many: String = (0..200)
        .map(|run| line(&format!("filler@{run}"), "filler", "succeeded", february))
        .collect();
    let whole = gzipped(&many);
    write_part(
        &archive,
        &format!("runs/v1/date=2026-02-10/hour=03/part-{february}-4-{february}-9.ndjson.gz"),
        &whole[..whole.len() / 2],
    );
    write_part(
        &archive,
        &format!(
            "runs/v1/date=2026-02-10/hour=04/part-{}-0-{}-0.ndjson.gz",
            february + 3_600_000,
            february + 3_600_000
        ),
        &gzipped(&line(
            "backup-db@5",
            "backup-db",
            "dead",
            february + 3_600_000,
        )),
    );
    write_part(
        &archive,
        &format!("runs/v1/date=2026-04-01/hour=03/part-{april}-0-{april}-0.ndjson.gz"),
        &gzipped(&line("backup-db@4", "backup-db", "dead", april)),
    );
    let command = query.replace("/var/lib/redcron/archive", &archive.display().to_string());
    let output = std::process::Command::new("sh")
        .args(["-c", &command])
        .output()
        .expect("sh runs");
    assert!(
        output.status.success(),
        "the README's jq query failed (jq is installed by scripts/install-test-tools): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let found: Vec<String> = String::from_utf8(output.stdout)
        .expect("UTF-8")
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).expect("a JSON line");
            record["id"].as_str().expect("id").to_owned()
        })
        .collect();
    assert_eq!(found, ["backup-db@1", "backup-db@5"]);
}

/// A replica gone long ago, which the namespace no longer knows, is found in the archive by
/// `history --replica`, where it was refused as unknown before the archive was read.
#[test]
fn history_finds_a_replica_gone_long_ago_in_the_archive() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    // 2026-03-08T07:00:01Z.
    let at = 1_772_953_201_000_i64;
    let line = |id: &str, replica: &str| {
        format!(
            "{}\n",
            json!({ "v": 1, "id": id, "job": "backup", "outcome": "succeeded", "at_ms": at,
                    "event": format!("{at}-0"), "attempt": 1, "replica": replica })
        )
    };
    write_part(
        &archive,
        &format!("runs/v1/date=2026-03-08/hour=07/part-{at}-0-{at}-1.ndjson.gz"),
        &gzipped(&(line("backup@1", "old-host") + &line("backup@2", "other-host"))),
    );
    let listed = cli(
        &server,
        dir.path(),
        &[
            "history",
            "--archive",
            &url,
            "--replica",
            "old-host",
            "--json",
        ],
    );
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    let ids: Vec<String> = one_document(&listed.stdout)["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter_map(|run| run["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids, ["backup@1"]);
    // Without the archive, a replica the namespace does not know is a mistake to say.
    let refused = cli(&server, dir.path(), &["history", "--replica", "old-host"]);
    assert_eq!(refused.code, Some(2), "{}", refused.stdout);
    assert!(
        refused.stderr.contains("unknown replica"),
        "{}",
        refused.stderr
    );
}
