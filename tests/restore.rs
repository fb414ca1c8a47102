//! Each replica knows what it runs: runs that Redis says a replica holds while it does not
//! (Redis restored from an older copy, a failover, a lost reply), and runs claimed ahead by a
//! replica that died before starting them, go back to the queue in seconds, not after the run
//! lease.

use std::collections::HashMap;
use std::time::Duration;

use redcron::store::{FailOutcome, FailReason, Failure, HeldRun};
use redis::Commands;

use crate::defaults::{assert_overlaps_were_real, intervals, recorded, skipped_events};
use crate::replicas::{DATA_LOST, Scenario, fire_ms, sleep_until};
use crate::store::{FORBID_TICK, THRESHOLD, claim_run, plan, run_hash, setup};
use crate::util::keys;
use crate::util::wait_until;

#[tokio::test]
async fn runs_a_replica_is_said_to_hold_are_listed_and_ended_as_lost_by_their_worker() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000]).await;
    let now = store.clone().with_frozen_clock(1_000);
    now.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&now, &["default"]).await;

    assert_eq!(
        store.held_runs("replica").await.expect("held"),
        [HeldRun {
            run_id: run.id.clone(),
            worker: "replica/0".to_owned(),
            attempt: Some(1),
        }]
    );
    assert_eq!(store.held_runs("replic").await.expect("held"), []);
    let failure = Failure::without_output(FailReason::Lost, "not running here");
    assert!(matches!(
        now.fail_run(&run.id, Some(&run.worker), &failure, 0.0)
            .await
            .expect("hand back"),
        FailOutcome::Retrying { due_ms: 1_000 }
    ));
    let hash = run_hash(&server, &run.id);
    assert_eq!(
        (
            hash.get("state").map(String::as_str),
            hash.get("attempt").map(String::as_str),
            hash.get("reason").map(String::as_str)
        ),
        (Some("retrying"), Some("0"), Some("lost"))
    );
    let slot: bool = server
        .connection()
        .exists(keys().running("tick"))
        .expect("EXISTS");
    assert!(!slot, "the job's slot is freed with it");
}

/// When each fire of `job` started, from the ledger.
fn starts(scenario: &Scenario, job: &str) -> HashMap<i64, Vec<i64>> {
    let mut starts: HashMap<i64, Vec<i64>> = HashMap::new();
    for (run, start, _) in intervals(scenario) {
        if run.starts_with(&format!("{job}@")) {
            starts.entry(fire_ms(&run)).or_default().push(start);
        }
    }
    starts
}

fn recording_job(scenario: &Scenario, job: &str, schedule: &str, work: &str) -> String {
    format!(
        "[jobs.{job}]\nschedule = \"{schedule}\"\ncommand = \"{}\"\n",
        recorded(scenario, work)
    )
}

#[test]
fn after_redis_is_restored_from_an_older_copy_fires_resume_at_once() {
    let mut scenario = Scenario::new();
    // Runs take most of a second, so the copy holds active runs and their jobs' slots.
    scenario.write_jobs(&format!(
        "{}{}",
        recording_job(&scenario, "one", "* * * * * *", "sleep 0.7"),
        recording_job(&scenario, "two", "* * * * * *", "sleep 0.7")
    ));
    // The default run lease: a stale run would hold its job for 30 s.
    let flags = ["--run-lease", "30s"];
    let replicas = scenario.replicas_with_a_leader(&["r1", "r2"], &flags);
    sleep_until(&scenario, scenario.redis_now_ms() + 3_500);
    // Both jobs can be between two runs at the instant of the copy (their fires come
    // together): a copy is taken again, a moment later, until it holds active runs.
    let mut active_in_copy: Vec<String> = Vec::new();
    for _ in 0..5 {
        active_in_copy = scenario
            .server
            .snapshot(|redis| redis.zrange(keys().active(), 0, -1).expect("ZRANGE"));
        if !active_in_copy.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(!active_in_copy.is_empty(), "the copy holds active runs");
    // Runs go on for a few seconds, then Redis comes back with the copy.
    std::thread::sleep(Duration::from_secs(3));
    scenario.server.restore_snapshot(Duration::from_millis(300));
    let restored = scenario.redis_now_ms();
    sleep_until(&scenario, restored + 8_000);

    // The fires of the lost seconds run again, one at a time; fires due meanwhile are skipped
    // as overlaps of those real runs, never for a slot held by a run that does not run.
    let skips = skipped_events(&scenario);
    assert_overlaps_were_real(&scenario, &intervals(&scenario), &skips);
    for job in ["one", "two"] {
        let starts = starts(&scenario, job);
        let first_after = restored - restored % 1000 + 3_000;
        for fire in (first_after..=restored + 6_000).step_by(1000) {
            let ran = starts.get(&fire).map_or(0, Vec::len);
            let overlapped = skips.contains(&(format!("{job}@{fire}"), "overlap".to_owned()));
            assert!(
                ran == 1 || (ran == 0 && overlapped),
                "{job}@{fire}, {} ms after the restore, ran {ran} times (skips: {skips:?})",
                fire - restored
            );
        }
    }
    // Runs that were active in the copy and had finished before the restore are not run again:
    // their replicas remember finishing them and record their success again.
    for run in &active_in_copy {
        let job = run.split('@').next().unwrap_or_default();
        let ran = starts(&scenario, job)
            .get(&fire_ms(run))
            .map_or(0, Vec::len);
        assert_eq!(ran, 1, "{run}, active in the copy, ran {ran} times");
        assert_eq!(
            scenario.run_field(run, "state").as_deref(),
            Some("succeeded"),
            "{run}"
        );
    }
    // An older copy of the same data is not a loss of it.
    for replica in &replicas {
        assert!(!replica.log().contains(DATA_LOST), "{}", replica.log());
    }
}

#[test]
fn a_run_claimed_ahead_by_a_replica_that_died_runs_elsewhere_within_seconds() {
    let scenario = Scenario::new();
    scenario.write_jobs(&recording_job(&scenario, "tick", "*/5 * * * * *", "true"));
    let flags = ["--run-lease", "30s"];
    let mut first = scenario.replica("r1", &flags);
    assert!(
        wait_until(Duration::from_secs(10), || scenario.leader().is_some()),
        "no leader was elected"
    );
    // Kill the replica in the moment between claiming a fire ahead and starting it.
    let mut redis = scenario.server.connection();
    let claimed_ahead = wait_until(Duration::from_secs(12), || {
        let active: Vec<String> = redis.zrange(keys().active(), 0, -1).unwrap_or_default();
        active.iter().any(|run| {
            fire_ms(run) > scenario.redis_now_ms()
                && scenario.run_field(run, "state").as_deref() == Some("active")
        })
    });
    first.kill9();
    assert!(claimed_ahead, "no fire was claimed ahead:\n{}", first.log());
    let active: Vec<String> = redis.zrange(keys().active(), 0, -1).expect("ZRANGE");
    let [run] = &active[..] else {
        panic!("one run claimed ahead: {active:?}");
    };
    let fire = fire_ms(run);
    assert!(
        !starts(&scenario, "tick").contains_key(&fire),
        "{run} did not start on the killed replica"
    );

    let _second = scenario.replica("r2", &flags);
    assert!(
        wait_until(Duration::from_secs(15), || {
            starts(&scenario, "tick").contains_key(&fire)
        }),
        "{run} never ran"
    );
    let started = starts(&scenario, "tick")[&fire][0];
    assert!(
        started - fire < 6_000,
        "{run} started {} ms late: it waited for the run lease",
        started - fire
    );
}
