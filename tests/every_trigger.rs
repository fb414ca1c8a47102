//! `redcron trigger` of a job that runs on every replica is a fire now: one run on each live
//! replica that runs the job (or the one `--replica` names), each in that replica's own route
//! and slots, so that `overlap = "forbid"` holds per replica for triggers as for fires.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{Scenario, fire_ms};
use crate::util::{cli, keys, one_document, wait_until};

/// A scenario whose job `sync` runs on every replica, on `schedule`, notes each run it starts in
/// the ledger as `<run id> <ms> <replica>` and then does `then`; beside it a cluster-wide job
/// and one pinned to replica b, both yearly.
fn syncing(schedule: &str, then: &str) -> Scenario {
    let scenario = Scenario::new();
    scenario.write_jobs(&format!(
        "[jobs.sync]\nschedule = \"{schedule}\"\non = \"every\"\n\
         command = \"{}{then}\"\n\n\
         [jobs.report]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\n\
         [jobs.pinned]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n\
         where = [\"replica=b\"]\n",
        scenario.record("$NODE")
    ));
    scenario
}

/// The replicas `sync` runs on by Redis's record (targets:sync).
fn targets(scenario: &Scenario) -> BTreeSet<String> {
    let mut connection = scenario.server.connection();
    redis::cmd("ZRANGE")
        .arg(keys().targets("sync"))
        .arg(0)
        .arg(-1)
        .query::<Vec<String>>(&mut connection)
        .expect("read the targets")
        .into_iter()
        .collect()
}

/// The (run id, replica) pairs of a `trigger --json` document's `runs`.
fn runs_of(document: &serde_json::Value) -> Vec<(String, String)> {
    document["runs"]
        .as_array()
        .unwrap_or_else(|| panic!("no runs in {document}"))
        .iter()
        .map(|run| {
            (
                run["id"].as_str().unwrap_or_default().to_owned(),
                run["replica"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn a_trigger_of_an_every_replica_job_makes_one_run_on_each_replica_or_on_the_one_asked_for() {
    // A yearly job: no fire of it comes during the test, only triggers.
    let scenario = syncing("0 0 1 1 *", "");
    let replicas = [scenario.node("a", &[]), scenario.node("b", &[])];
    let logs = || ReplicaProcess::logs(&replicas);
    let both: BTreeSet<String> = ["a", "b"].map(str::to_owned).into();
    assert!(
        wait_until(Duration::from_secs(20), || targets(&scenario) == both),
        "{:?}\n{}",
        targets(&scenario),
        logs()
    );
    let live = || {
        let status = one_document(
            &cli(&scenario.server, scenario.dir.path(), &["status", "--json"]).success(),
        );
        status["replicas"]
            .as_array()
            .is_some_and(|replicas| replicas.len() == 2)
    };
    assert!(wait_until(Duration::from_secs(20), live), "{}", logs());

    let triggered = one_document(
        &cli(
            &scenario.server,
            scenario.dir.path(),
            &["trigger", "sync", "--json"],
        )
        .success(),
    );
    let runs = runs_of(&triggered);
    assert_eq!(
        runs.iter()
            .map(|(_, replica)| replica.as_str())
            .collect::<Vec<_>>(),
        ["a", "b"],
        "{triggered}"
    );
    assert!(triggered["id"].is_null(), "{triggered}");
    for (run, replica) in &runs {
        assert!(
            run.starts_with("sync@") && run.ends_with(&format!(":{replica}")),
            "{run} is no run of a fire of sync for {replica}"
        );
    }
    // Each runs on its own replica, once.
    let ran = || -> BTreeSet<(String, String)> {
        scenario
            .ledger()
            .into_iter()
            .map(|(run, _, node)| (run, node))
            .collect()
    };
    let expected: BTreeSet<(String, String)> = runs.iter().cloned().collect();
    assert!(
        wait_until(Duration::from_secs(20), || ran() == expected),
        "{:?}\n{}",
        scenario.ledger(),
        logs()
    );

    // --replica: the one run, for that replica.
    let text = cli(
        &scenario.server,
        scenario.dir.path(),
        &["trigger", "sync", "--replica", "b"],
    )
    .success();
    let run = text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    assert!(
        run.ends_with(":b")
            && text.trim_end().ends_with("on replica b")
            && text.lines().count() == 1,
        "{text}"
    );
    assert!(
        wait_until(Duration::from_secs(20), || ran()
            .contains(&(run.clone(), "b".to_owned()))),
        "{:?}\n{}",
        scenario.ledger(),
        logs()
    );
    assert_eq!(scenario.ledger().len(), 3, "one run more, on b");

    // A replica that does not run the job, and a job that does not run on every replica.
    let refused = cli(
        &scenario.server,
        scenario.dir.path(),
        &["trigger", "sync", "--replica", "c"],
    )
    .failure(2);
    assert!(
        refused.contains("replica \"c\" does not run job \"sync\"")
            && refused.contains("`redcron jobs --json` lists the replicas that run it"),
        "{refused}"
    );
    let refused = cli(
        &scenario.server,
        scenario.dir.path(),
        &["trigger", "report", "--replica", "a"],
    )
    .failure(2);
    assert!(
        refused.contains(
            "--replica a: job \"report\" runs once per fire, on any replica that declares it"
        ),
        "{refused}"
    );
    // `pinned` is declared by b alone: the leader publishes it from its first tick that reads
    // b's declarations, which may come after `sync` had both its targets.
    let published = || {
        one_document(&cli(&scenario.server, scenario.dir.path(), &["jobs", "--json"]).success())["jobs"]
            .as_array()
            .is_some_and(|jobs| jobs.iter().any(|job| job["job"] == "pinned"))
    };
    assert!(wait_until(Duration::from_secs(20), published), "{}", logs());
    let refused = cli(
        &scenario.server,
        scenario.dir.path(),
        &["trigger", "pinned", "--replica", "b"],
    )
    .failure(2);
    assert!(
        refused.contains(
            "--replica b: job \"pinned\" runs once per fire, on one of the replicas its where \
             picks (replica=b)"
        ),
        "{refused}"
    );
    // A trigger of a job that runs once is one ad-hoc run, as before.
    let once = one_document(
        &cli(
            &scenario.server,
            scenario.dir.path(),
            &["trigger", "report", "--json"],
        )
        .success(),
    );
    let id = once["id"].as_str().expect("an id").to_owned();
    assert_eq!(runs_of(&once), [(id, String::new())], "{once}");

    // An every-replica job takes no ad-hoc run, which would hold none of its replicas' slots:
    // enqueued alone or among other lines, it is refused and named, and nothing is made.
    let refused = cli(
        &scenario.server,
        scenario.dir.path(),
        &["enqueue", "sync", "--in", "1m"],
    )
    .failure(2);
    assert!(
        refused.contains("job \"sync\" runs on every replica")
            && refused.contains("redcron trigger sync"),
        "{refused}"
    );
    let lines = scenario.dir.path().join("runs.jsonl");
    std::fs::write(&lines, "{\"job\": \"report\"}\n{\"job\": \"sync\"}\n").expect("lines");
    // The other line's run is made, and said on standard output, as a refused line leaves
    // the others alone.
    let from = cli(
        &scenario.server,
        scenario.dir.path(),
        &["enqueue", "--from", &lines.display().to_string()],
    );
    assert_eq!(from.code, Some(2), "{}", from.stderr);
    assert!(from.stdout.starts_with("line 1: "), "{}", from.stdout);
    assert!(
        from.stderr.contains("line 2") && from.stderr.contains("runs on every replica"),
        "{}",
        from.stderr
    );
    let ready: Vec<String> = runs_of(&one_document(
        &cli(
            &scenario.server,
            scenario.dir.path(),
            &["runs", "list", "--job", "sync", "--json"],
        )
        .success(),
    ))
    .into_iter()
    .map(|(run, _)| run)
    .collect();
    assert!(
        ready.is_empty(),
        "an enqueued run of sync exists: {ready:?}"
    );
}

#[test]
fn a_trigger_while_the_replicas_fire_runs_is_skipped_as_its_overlap_as_a_second_fire_is() {
    // Default overlap (forbid); each run lasts several periods.
    let scenario = syncing("@every 1s", "; sleep 4");
    let replicas = [scenario.node("a", &[])];
    let logs = || ReplicaProcess::logs(&replicas);
    assert!(
        wait_until(Duration::from_secs(20), || !scenario.ledger().is_empty()),
        "{}",
        logs()
    );
    let (fire, started, _) = scenario.ledger().into_iter().next().expect("a fire ran");
    let triggered = one_document(
        &cli(
            &scenario.server,
            scenario.dir.path(),
            &["trigger", "sync", "--json"],
        )
        .success(),
    );
    let runs = runs_of(&triggered);
    let [(run, replica)] = runs.as_slice() else {
        panic!("one run, for a: {triggered}");
    };
    assert_eq!(replica, "a");
    let overlap = (Some("skipped".to_owned()), Some("overlap".to_owned()));
    assert!(
        wait_until(Duration::from_secs(10), || scenario.run_state(run)
            == overlap),
        "{run}: {:?}\n{:?}\n{}",
        scenario.run_state(run),
        scenario.ledger(),
        logs()
    );
    // As the fire after the one running was.
    let next_fire = format!("sync@{}:a", fire_ms(&fire) + 1_000);
    assert!(
        wait_until(Duration::from_secs(10), || scenario.run_state(&next_fire)
            == overlap),
        "{next_fire}: {:?}\n{}",
        scenario.run_state(&next_fire),
        logs()
    );
    // Nothing started beside the fire while it ran.
    let beside: Vec<_> = scenario
        .ledger()
        .into_iter()
        .filter(|(_, start, _)| *start > started && *start < started + 4_000)
        .collect();
    assert!(beside.is_empty(), "ran beside {fire}: {beside:?}");
}
