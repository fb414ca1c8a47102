//! A Redis out of memory (`maxmemory` reached under `noeviction`) refuses writes for as long as
//! it lasts. Runs under way keep their leases and record their outcomes, so none runs twice;
//! fires due meanwhile stay due and are judged by the misfire policy once writes resume, so
//! none runs later than the threshold but the latest; `status` says why nothing moves, and does
//! not call the replicas lost.

use std::collections::HashMap;
use std::time::Duration;

use redis::Commands;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::schemas::Schemas;
use crate::util::{cli, keys, one_document, read_ledger, wait_until};

/// The misfire threshold the replicas run with: short, so that an outage of seconds misses
/// fires.
const THRESHOLD_MS: i64 = 4_000;

/// Jobs with the default settings: `tick` every second, `long` running through the outage,
/// `short` ending during it.
fn write_jobs(scenario: &Scenario) {
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"{}\"\n\n\
         [jobs.long]\ncommand = \"{}; sleep 13; {}\"\n\n\
         [jobs.short]\ncommand = \"{}; sleep 1; {}\"\n",
        scenario.record(""),
        scenario.record("start"),
        scenario.record("end"),
        scenario.record("start"),
        scenario.record("end"),
    ));
}

/// Replica `id`, with the short misfire threshold.
fn replica(scenario: &Scenario, id: &str) -> ReplicaProcess {
    let threshold = format!("{THRESHOLD_MS}ms");
    scenario.replica(id, &["--misfire-threshold", &threshold])
}

/// `redcron status args...`.
fn run_status(scenario: &Scenario, args: &[&str]) -> crate::util::Run {
    let mut all = vec!["status"];
    all.extend(args);
    cli(&scenario.server, scenario.dir.path(), &all)
}

/// The fire time of a cron run id `<job>@<ms>`.
fn fire_of(run: &str) -> Option<i64> {
    run.split_once('@')?.1.parse().ok()
}

#[test]
fn an_out_of_memory_redis_runs_no_run_twice_and_no_fire_past_the_misfire_threshold_but_one() {
    let scenario = Scenario::new();
    write_jobs(&scenario);
    let replicas = [replica(&scenario, "r1"), replica(&scenario, "r2")];
    let logs = || ReplicaProcess::logs(&replicas);
    let ledger = || read_ledger(&scenario.ledger_path());
    assert!(
        wait_until(Duration::from_secs(15), || ledger().len() >= 2),
        "tick does not run:\n{}",
        logs()
    );
    // One run lasts past the outage, one ends within it.
    for job in ["long", "short"] {
        cli(&scenario.server, scenario.dir.path(), &["trigger", job]).success();
    }
    assert!(
        wait_until(Duration::from_secs(10), || {
            ledger().iter().filter(|(_, _, tag)| tag == "start").count() == 2
        }),
        "the triggered runs did not start:\n{}",
        logs()
    );

    scenario.server.fill_memory();
    // The outage: past the heartbeats' life (6 s: the declarations expire, claims stop), the
    // run lease (3 s) and the threshold (4 s); `long` runs through it.
    std::thread::sleep(Duration::from_secs(10));
    scenario.server.lift_memory_limit();
    let raised = scenario.redis_now_ms();
    // Fires resume, and the long run ends, with its lease kept through the outage.
    assert!(
        wait_until(Duration::from_secs(20), || {
            let entries = ledger();
            entries
                .iter()
                .any(|(run, _, _)| fire_of(run).is_some_and(|fire| fire >= raised + 3_000))
                && entries.iter().filter(|(_, _, tag)| tag == "end").count() == 2
        }),
        "fires did not resume, or a run did not end: {:?}\n{}",
        ledger(),
        logs()
    );
    // Both runs' successes recorded: a run whose lease had been reaped would have been made
    // due again instead, and its success refused.
    let triggered: Vec<String> = ledger()
        .into_iter()
        .filter(|(_, _, tag)| tag == "start")
        .map(|(run, _, _)| run)
        .collect();
    let state = |run: &str| -> Option<String> {
        scenario
            .server
            .connection()
            .hget(keys().run(run), "state")
            .ok()
    };
    assert!(
        wait_until(Duration::from_secs(10), || triggered
            .iter()
            .all(|run| state(run).as_deref() == Some("succeeded"))),
        "the triggered runs {triggered:?} did not succeed once: {:?}\n{}",
        triggered.iter().map(|run| state(run)).collect::<Vec<_>>(),
        logs()
    );

    let entries = ledger();
    let mut counts: HashMap<(&str, &str), usize> = HashMap::new();
    for (run, _, tag) in &entries {
        *counts.entry((run.as_str(), tag.as_str())).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "ran twice: {twice:?}\n{}", logs());

    // Missed means made ready later than the threshold: of those, the latest alone runs.
    let mut redis = scenario.server.connection();
    let missed: Vec<(&str, i64)> = entries
        .iter()
        .filter_map(|(run, _, _)| {
            let fire = fire_of(run)?;
            let ready: i64 = redis.hget(keys().run(run), "ready_ms").ok()?;
            (ready - fire > THRESHOLD_MS).then_some((run.as_str(), ready - fire))
        })
        .collect();
    assert!(
        missed.len() <= 1,
        "missed fires ran: {missed:?}\n{}",
        logs()
    );
    // And a fire made ready in time starts soon after: once the components' retries after the
    // outage (at most 5 s apart) and the fires before it (one at a time) let it.
    let late: Vec<(&str, i64)> = entries
        .iter()
        .filter_map(|(run, start, _)| {
            let fire = fire_of(run)?;
            (start - fire > THRESHOLD_MS + 7_000).then_some((run.as_str(), start - fire))
        })
        .collect();
    assert!(
        late.len() <= 1,
        "fires ran long past the misfire threshold under run-once: {late:?}\n{}",
        logs()
    );
    // Every fire of the outage ran or was judged: the latest one missed ran.
    assert!(
        entries.iter().any(|(run, start, _)| fire_of(run)
            .is_some_and(|fire| fire < raised && start - fire > THRESHOLD_MS)),
        "no fire missed in the outage ran: {entries:?}"
    );
}

#[test]
fn status_says_redis_refuses_writes_and_calls_no_replica_lost_for_it() {
    let scenario = Scenario::new();
    write_jobs(&scenario);
    let replica = replica(&scenario, "r1");
    assert!(
        wait_until(Duration::from_secs(15), || run_status(&scenario, &[]).code
            == Some(0)
            && run_status(&scenario, &[]).stdout.contains("alive")),
        "{}",
        replica.log()
    );

    scenario.server.fill_memory();
    let during = run_status(&scenario, &["--json"]);
    assert_eq!(during.code, Some(2), "{}", during.stderr);
    assert!(
        during.stderr.contains("redis refuses writes (OOM)"),
        "{}",
        during.stderr
    );
    // Past three heartbeat periods: the heartbeat in Redis is stale.
    assert!(
        wait_until(Duration::from_secs(20), || {
            let status = one_document(&run_status(&scenario, &["--json"]).stdout);
            status["replicas"][0]["heartbeat_age_ms"]
                .as_i64()
                .is_some_and(|age| age > 6_000)
        }),
        "the heartbeat in Redis never went stale"
    );
    let status = one_document(&run_status(&scenario, &["--json"]).stdout);
    assert_eq!(status["writes_refused"]["code"], "OOM", "{status}");
    assert!(
        status["writes_refused"]["used_memory"].as_u64()
            > status["writes_refused"]["maxmemory"].as_u64(),
        "{status}"
    );
    assert_eq!(status["replicas"][0]["state"], "unknown", "{status}");
    Schemas::of_the_docs().assert_matches("status.json", &status);
    let text = run_status(&scenario, &[]);
    assert_eq!(text.code, Some(2), "{}", text.stderr);
    assert!(
        text.stdout.contains("redis refuses writes: OOM"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("CONFIG SET maxmemory"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .lines()
            .any(|line| line.starts_with("r1 ") && line.ends_with(" unknown"))
            && !text.stdout.contains("no live replica"),
        "{}",
        text.stdout
    );

    scenario.server.lift_memory_limit();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let after = run_status(&scenario, &[]);
            after.code == Some(0) && after.stdout.contains("alive")
        }),
        "{}",
        replica.log()
    );
}
