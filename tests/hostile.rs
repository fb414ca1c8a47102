//! Hostile input reaching a running replica through Redis: forged runs, bad payloads, payloads
//! built to reach a shell, and keys of the wrong type. Nothing forged executes, bad runs go to
//! the dead letters with their reason, and the replica keeps serving.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use redis::Commands;

use crate::util::keys;
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::{cli, wait_until};

use redcron::schedule::Priority;

/// Writes a run of `job` straight into Redis, ready in the default queue, as a program with
/// access to Redis could, and wakes the queue's workers.
fn forge_run(redis: &mut redis::Connection, run_id: &str, job: &str, payload: Option<&str>) {
    let mut fields = vec![
        ("job", job.to_owned()),
        ("kind", "adhoc".to_owned()),
        ("state", "ready".to_owned()),
        ("attempt", "0".to_owned()),
        ("max_attempts", "1".to_owned()),
        ("created_ms", "1".to_owned()),
        // Workers run what their own schedule files declare, never what a run says.
        ("command", "touch forged-command-ran".to_owned()),
    ];
    if let Some(payload) = payload {
        fields.push(("payload", payload.to_owned()));
    }
    let () = redis
        .hset_multiple(keys().run(run_id), &fields)
        .expect("HSET");
    let () = redis
        .rpush(keys().ready("default", Priority::Normal), run_id)
        .expect("RPUSH");
    let () = redis.zadd(keys().wake("default"), "1", 1).expect("ZADD");
}

fn run_hash(redis: &mut redis::Connection, run_id: &str) -> HashMap<String, String> {
    redis.hgetall(keys().run(run_id)).expect("HGETALL")
}

fn state(redis: &mut redis::Connection, run_id: &str) -> Option<String> {
    run_hash(redis, run_id).remove("state")
}

#[test]
fn forged_runs_and_bad_payloads_never_execute() {
    let scenario = Scenario::new();
    let (server, work) = (&scenario.server, scenario.dir.path());
    scenario.write_jobs(&format!(
        "[jobs.echo]\ncommand = \"cat > {}/stdin-$REDCRON_RUN_ID\"\nworkdir = \"{}\"\n",
        work.display(),
        work.display()
    ));
    let replica = scenario.replica("r1", &[]);
    let mut redis = server.connection();
    assert!(
        wait_until(Duration::from_secs(10), || {
            redis.hexists(keys().defs(), "echo").unwrap_or(false)
        }),
        "the replica did not publish its jobs:\n{}",
        replica.log()
    );

    // A run of a job no replica declares: left for a replica that declares it.
    forge_run(&mut redis, "forged-unknown", "evil", None);
    // Payloads the worker cannot hand on: not JSON, and over 1 MiB.
    forge_run(
        &mut redis,
        "forged-not-json",
        "echo",
        Some("{\"unclosed\": "),
    );
    let huge = format!("\"{}\"", "a".repeat(1024 * 1024));
    forge_run(&mut redis, "forged-huge", "echo", Some(&huge));
    // A payload built to reach a shell, through the CLI: it arrives on standard input only.
    let hostile = format!(
        "{{\"name\": \"$(touch {0}/pwned) `touch {0}/pwned` ; touch {0}/pwned | x & ' \\\" \\n\"}}",
        work.display()
    );
    let enqueued = cli(server, work, &["trigger", "echo", "--payload", &hostile]).success();
    let hostile_run = enqueued
        .split_whitespace()
        .next()
        .expect("the run id")
        .to_owned();

    let dead_ids = ["forged-not-json", "forged-huge"];
    assert!(
        wait_until(Duration::from_secs(15), || {
            let aside: Vec<String> = redis
                .lrange(keys().undeclared("evil"), 0, -1)
                .unwrap_or_default();
            dead_ids
                .iter()
                .all(|run| state(&mut redis, run).as_deref() == Some("dead"))
                && state(&mut redis, &hostile_run).as_deref() == Some("succeeded")
                && aside == ["forged-unknown"]
        }),
        "the runs did not end as expected: {:?}\n{}",
        dead_ids
            .iter()
            .chain([&"forged-unknown", &hostile_run.as_str()])
            .map(|run| run_hash(&mut redis, run))
            .collect::<Vec<_>>(),
        replica.log()
    );
    let errors: Vec<String> = dead_ids
        .iter()
        .map(|run| {
            let hash = run_hash(&mut redis, run);
            assert_eq!(hash.get("reason").map(String::as_str), Some("permanent"));
            hash.get("error").cloned().unwrap_or_default()
        })
        .collect();
    assert!(
        errors[0].contains("bad payload: the payload is not valid JSON"),
        "{}",
        errors[0]
    );
    assert!(errors[1].contains("at most 1048576"), "{}", errors[1]);

    assert_eq!(
        std::fs::read_to_string(work.join(format!("stdin-{hostile_run}"))).expect("stdin copy"),
        hostile,
        "the payload reached the command's standard input unchanged"
    );
    for file in ["pwned", "forged-command-ran"] {
        assert!(
            !Path::new(&work.join(file)).exists(),
            "{file} exists: forged or hostile input executed"
        );
    }
    for run in ["forged-not-json", "forged-huge"] {
        assert!(
            !work.join(format!("stdin-{run}")).exists(),
            "{run} executed"
        );
    }
}

/// A scenario whose job `tick` fires every second (misfire skip) and records its runs, and
/// replica r1 running it, once its first fire has run.
fn ticking() -> (Scenario, ReplicaProcess) {
    let scenario = Scenario::new();
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\nmisfire = \"skip\"\ncommand = \"{}\"\n",
        scenario.record("")
    ));
    let replica = scenario.replica("r1", &[]);
    assert!(
        wait_until(Duration::from_secs(10), || !scenario.ledger().is_empty()),
        "{}",
        replica.log()
    );
    (scenario, replica)
}

#[test]
fn a_key_of_the_wrong_type_is_logged_and_the_replica_serves_again_once_it_is_gone() {
    let (scenario, mut replica) = ticking();
    let runs = || scenario.ledger().len();

    // The paused-jobs set, which every claim reads, replaced by a string.
    let mut redis = scenario.server.connection();
    let () = redis.set(keys().paused(), "not a set").expect("SET");
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .log()
            .contains("WRONGTYPE")),
        "the wrong type was not logged:\n{}",
        replica.log()
    );
    assert!(replica.exited().is_none(), "the replica exited");

    let () = redis.del(keys().paused()).expect("DEL");
    let before = runs();
    assert!(
        wait_until(Duration::from_secs(10), || runs() >= before + 2),
        "the replica did not serve again:\n{}",
        replica.log()
    );
    assert_eq!(replica.terminate(Duration::from_secs(10)), Some(0));
}

#[test]
fn damaged_planner_state_neither_stops_nor_doubles_fires() {
    let (scenario, mut replica) = ticking();
    let runs = || scenario.ledger().len();

    // The job's cursor and planned fires overwritten with text that is not numbers.
    let mut redis = scenario.server.connection();
    let () = redis.hset(keys().cursor(), "tick", "soon").expect("HSET");
    let () = redis
        .hset(keys().planned(), "tick", "12x,,later")
        .expect("HSET");

    let before = runs();
    assert!(
        wait_until(Duration::from_secs(15), || runs() >= before + 5),
        "fires stopped after the damage:\n{}",
        replica.log()
    );
    assert!(replica.exited().is_none(), "the replica exited");
    assert!(!replica.log().contains("panicked"), "{}", replica.log());
    let fired: Vec<String> = scenario
        .ledger()
        .into_iter()
        .map(|(run, _, _)| run)
        .collect();
    let mut distinct = fired.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), fired.len(), "a fire ran twice: {fired:?}");
}
