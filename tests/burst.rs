//! A burst: many ad-hoc runs due at one instant, enqueued in bulk (`enqueue --from`), beside an
//! every-second job with the default settings. Promoting the burst takes a second or more on a
//! small machine; the fires due meanwhile must not wait for it.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use redcron::schedule::Priority;
use redis::Commands;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::schemas::Schemas;
use crate::util::{cli, keys, one_document, redcron_in, wait_until};

/// Runs in the burst: enough that promoting them all takes a second or more on a small machine.
const BURST: usize = 20_000;

#[test]
fn runs_due_at_one_instant_do_not_delay_the_fires_due_then() {
    let scenario = Scenario::new();
    let tasks = scenario.dir.path().join("tasks");
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [jobs.task]\ncommand = \"echo $REDCRON_RUN_ID >> {}\"\n",
        tasks.display()
    ));
    let mut replicas = scenario.replicas_with_a_leader(&["r1", "r2"], &["--workers", "4"]);
    let logs = |replicas: &[ReplicaProcess]| {
        replicas
            .iter()
            .map(|replica| format!("log of {}:\n{}", replica.id, replica.log()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        wait_until(Duration::from_secs(10), || {
            cli(&scenario.server, scenario.dir.path(), &["jobs", "--json"])
                .stdout
                .contains("\"task\"")
        }),
        "task was never published\n{}",
        logs(&replicas)
    );

    // Due on a whole second, so that a fire is due at the very instant of the burst; far
    // enough ahead for a bulk enqueue on a loaded machine.
    let burst_ms = (scenario.redis_now_ms() / 1000 + 15) * 1000;
    let at = chrono::DateTime::from_timestamp_millis(burst_ms)
        .expect("a time")
        .to_rfc3339();
    let file = scenario.dir.path().join("burst.jsonl");
    let lines = format!("{{\"job\": \"task\", \"at\": \"{at}\"}}\n").repeat(BURST);
    std::fs::write(&file, lines).expect("write the burst");
    let file = file.to_str().expect("a UTF-8 path");
    let enqueue_started = Instant::now();
    let enqueue = cli(
        &scenario.server,
        scenario.dir.path(),
        &["enqueue", "--from", file, "--json"],
    );
    let enqueue_took = enqueue_started.elapsed();
    // Not the whole document on failure: it holds a line per run.
    assert_eq!(enqueue.code, Some(0), "{}", enqueue.stderr);
    assert!(
        scenario.redis_now_ms() < burst_ms - 500,
        "the bulk enqueue of {BURST} runs took {enqueue_took:?}: the burst came due before it \
         ended"
    );
    let enqueued = one_document(&enqueue.stdout);
    Schemas::of_the_docs().assert_matches("enqueued-lines.json", &enqueued);
    assert_eq!(enqueued["refused"], serde_json::json!([]));
    let runs = enqueued["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), BURST);
    assert!(
        runs.iter()
            .enumerate()
            .all(|(index, run)| run["line"] == index + 1 && run["due_ms"] == burst_ms),
        "every line, in order, due at the burst: {:?}",
        &runs[..3]
    );

    // The fires of the burst's second and the next three: each waits at most for a worker
    // slot, which a task (a shell's echo) frees within milliseconds. Behind the burst, a fire
    // would wait for the promotion of every run of it due no later.
    let fires: Vec<i64> = (0..4).map(|second| burst_ms + second * 1000).collect();
    let started = |fire: i64| {
        scenario
            .run_field(&format!("tick@{fire}"), "started_ms")
            .and_then(|ms| ms.parse::<i64>().ok())
    };
    assert!(
        wait_until(Duration::from_secs(30), || fires
            .iter()
            .all(|fire| started(*fire).is_some())),
        "not every fire started: {:?}\n{}",
        fires.iter().map(|fire| started(*fire)).collect::<Vec<_>>(),
        logs(&replicas)
    );
    let lateness: Vec<i64> = fires
        .iter()
        .map(|fire| started(*fire).expect("started") - fire)
        .collect();
    assert!(
        lateness.iter().all(|late| *late <= 1_000),
        "the fires from the burst's instant on started {lateness:?} ms late: at most a second, \
         the time for a worker slot to free on a loaded machine"
    );
    // No run of the burst is lost or ran twice: once the replicas have stopped (and handed
    // back what they had not run), each ran once or waits, ready or due again. Running all of
    // them, a shell each, would take minutes on a small machine.
    for replica in &mut replicas {
        assert_eq!(replica.terminate(Duration::from_secs(30)), Some(0));
    }
    let ran: Vec<String> = std::fs::read_to_string(&tasks)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect();
    assert!(!ran.is_empty(), "no run of the burst ran beside the fires");
    let mut redis = scenario.server.connection();
    let ready: Vec<String> = redis
        .lrange(keys().ready("default", Priority::Normal), 0, -1)
        .expect("LRANGE");
    let due: Vec<String> = redis.zrange(keys().due_runs(), 0, -1).expect("ZRANGE");
    let active: Vec<String> = redis.zrange(keys().active(), 0, -1).expect("ZRANGE");
    let accounted: Vec<&String> = ran
        .iter()
        .chain(&ready)
        .chain(&due)
        .chain(&active)
        .collect();
    let distinct: HashSet<&String> = accounted.iter().copied().collect();
    let ids: HashSet<String> = runs
        .iter()
        .map(|run| run["id"].as_str().expect("an id").to_owned())
        .collect();
    assert_eq!(
        distinct.len(),
        accounted.len(),
        "a run of the burst ran twice, or ran and still waits ({} ran, {} ready, {} due, {} \
         active)",
        ran.len(),
        ready.len(),
        due.len(),
        active.len()
    );
    let lost = ids.iter().filter(|id| !distinct.contains(id)).count();
    let foreign = distinct
        .iter()
        .filter(|id| !ids.contains(id.as_str()))
        .count();
    assert_eq!(
        (lost, foreign),
        (0, 0),
        "runs of the burst lost, or runs not enqueued ({} ran, {} ready, {} due, {} active)",
        ran.len(),
        ready.len(),
        due.len(),
        active.len()
    );
}

#[tokio::test]
async fn enqueue_from_lines_sends_nothing_for_a_bad_line_and_names_each_line_refused() {
    let (server, dir, _store) = crate::util::store::published().await;
    let enqueue = |input: &str| {
        redcron_in(
            dir.path(),
            &[
                "enqueue",
                "--from",
                "-",
                "--json",
                "--redis",
                &server.url(),
                "--namespace",
                "test",
            ],
            input,
        )
    };
    let ready_or_due = || {
        let mut redis = server.connection();
        let ready: usize = redis
            .llen(keys().ready("default", Priority::Normal))
            .expect("LLEN");
        let due: usize = redis.zcard(keys().due_runs()).expect("ZCARD");
        ready + due
    };

    // A line that is not a run: named with its number, and no line's run is sent.
    let errors = enqueue(
        "{\"job\": \"greet\"}\n{\"job\": \"greet\", \"in\": \"soon\"}\n\n{bad\n\
         {\"job\": \"greet\", \"when\": \"now\"}\n{\"job\": \"greet\", \"in\": \"1h\", \"at\": \"2030-01-01T00:00:00Z\"}\n\
         {\"job\": \"greet\", \"at\": \"9999-12-31T23:59:59Z\"}\n",
    )
    .failure(2);
    for expected in [
        "standard input: 5 lines are not a run, so no run was enqueued",
        "line 2: \"in\": ",
        "line 4: key must be a string (column 2)",
        "line 5: unknown field `when`, expected one of",
        "line 6: \"in\" and \"at\" both say when",
        "line 7: \"at\": \"9999-12-31T23:59:59Z\" is more than 366 d ahead",
    ] {
        assert!(errors.contains(expected), "{expected}: {errors}");
    }
    // Positions are the line's own: not serde's "line 1" of a text one line long.
    assert!(
        !errors.contains("line 1") && !errors.contains("at line"),
        "{errors}"
    );
    assert_eq!(ready_or_due(), 0, "a run was enqueued: {errors}");

    // Runs Redis refuses are listed with their lines; every other line's run is enqueued.
    let run = enqueue(
        "{\"job\": \"greet\", \"payload\": {\"n\": 1}}\n{\"job\": \"nope\"}\n\
         {\"job\": \"greet\", \"in\": \"1h\", \"unique_key\": \"k\", \"priority\": \"normal\"}\n\
         {\"job\": \"greet\", \"in\": \"2h\", \"unique_key\": \"k\"}\n\
         {\"job\": \"greet\", \"at\": \"2020-01-01T00:00:00Z\"}\n",
    );
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    for expected in [
        "3 lines of 5 refused; every other line's run was enqueued",
        "line 2: unknown job \"nope\"",
        "line 4: ",
        // As people read instants, not epoch milliseconds.
        "line 5: due at 2020-01-01T00:00:00+00:00, before Redis's clock (20",
    ] {
        assert!(run.stderr.contains(expected), "{expected}: {}", run.stderr);
    }
    let document = one_document(&run.stdout);
    Schemas::of_the_docs().assert_matches("enqueued-lines.json", &document);
    let lines = |list: &str| -> Vec<u64> {
        document[list]
            .as_array()
            .expect("a list")
            .iter()
            .map(|entry| entry["line"].as_u64().expect("a line"))
            .collect()
    };
    assert_eq!(
        (lines("runs"), lines("refused")),
        (vec![1, 3], vec![2, 4, 5])
    );
    assert_eq!(ready_or_due(), 2);
    let first = document["runs"][0]["id"].as_str().expect("an id");
    let shown =
        one_document(&cli(&server, dir.path(), &["runs", "show", first, "--json"]).success());
    assert_eq!(shown["payload"], "{\"n\":1}", "{shown}");
}
