//! Each replica knows what it runs: runs that Redis says a replica holds while it does not
//! (Redis restored from an older copy, a failover, a lost reply), and runs claimed ahead by a
//! replica that died before starting them, go back to the queue in seconds, not after the run
//! lease.

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;
use redcron::store::{
    FailOutcome, FailReason, Failure, JobSlot, OwnedRun, PendingSlot, RunState, Store,
};
use redis::Commands;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{DATA_LOST, Scenario, fire_ms, sleep_until};
use crate::util::scenario::{assert_overlaps_were_real, intervals, recorded};
use crate::util::store::{
    FORBID_TICK, LEASE, THRESHOLD, claim_run, connect, plan, run_hash, setup, skipped,
};
use crate::util::wait::wait_for;
use crate::util::{cli, keys, one_document, wait_until};

#[tokio::test]
async fn runs_a_replica_is_said_to_own_are_listed_and_ended_as_lost_by_their_worker() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000]).await;
    let now = store.clone().with_frozen_clock(1_000);
    now.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&now, &["default"]).await;

    assert_eq!(
        store.owned_runs("replica").await.expect("owned"),
        [OwnedRun {
            run_id: run.id.clone(),
            worker: "replica/0".to_owned(),
            attempt: Some(1),
        }]
    );
    assert_eq!(store.owned_runs("replic").await.expect("owned"), []);
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
        (Some("ready"), Some("0"), Some("lost"))
    );
    let slot: bool = server
        .connection()
        .exists(keys().running("tick"))
        .expect("EXISTS");
    assert!(!slot, "the job's slot is freed with it");
}

#[tokio::test]
async fn a_fire_waits_for_a_run_that_redis_older_than_its_replica_saw_says_is_running() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000, 2_000, 3_000]).await;
    let at = |ms| store.clone().with_frozen_clock(ms);
    let queues = ["default".to_owned()];
    let promote = |ms| async move {
        at(ms)
            .promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote")
    };
    promote(1_000).await;
    let first = claim_run(&at(1_000), &["default"]).await;
    // Redis comes back from a copy older than this replica's last claim saw it.
    let () = server
        .connection()
        .hset(keys().rewind(), "written_ms", 500)
        .expect("HSET");

    // The copy says tick@1000 runs, but its end may be among the writes Redis lost: tick@2000
    // waits for the slot rather than being skipped as its overlap.
    promote(2_000).await;
    let claimed = at(2_000)
        .claim_runs(&["replica/1"], &queues, Duration::from_secs(30), 100)
        .await
        .expect("claim");
    assert!(claimed.rewound, "{claimed:?}");
    assert_eq!((claimed.runs.len(), claimed.skips.len()), (0, 0));
    assert_eq!(
        run_hash(&server, "tick@2000")
            .get("state")
            .map(String::as_str),
        Some("waiting")
    );

    // Its replica records its success again: tick@2000 gets the slot and runs.
    assert!(at(2_100).ack_run(&first, Some(0), "").await.expect("ack"));
    let claimed = at(2_100)
        .claim_runs(&["replica/1"], &queues, Duration::from_secs(30), 100)
        .await
        .expect("claim");
    assert!(!claimed.rewound, "one rewind is found once");
    let [Ok(second)] = &claimed.runs[..] else {
        panic!("tick@2000 runs: {claimed:?}");
    };
    assert_eq!(second.id, "tick@2000");

    // A run started since is an overlap as before.
    promote(3_000).await;
    let claimed = at(3_000)
        .claim_runs(&["replica/2"], &queues, Duration::from_secs(30), 100)
        .await
        .expect("claim");
    assert_eq!(claimed.skips, [("tick".to_owned(), "overlap".to_owned())]);
}

/// After a rewind the fires the copy's run held back run one after another; a fire claimed
/// ahead whose due time comes while the slot passes from one of them to the next (handed, not
/// claimed yet: none of them runs) is no overlap. It waits behind them, neither run nor skipped
/// until they have run, and then runs.
#[tokio::test]
async fn a_fire_due_while_the_slot_passes_between_held_back_fires_waits_behind_them() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000, 2_000, 3_000, 4_000]).await;
    let at = |ms| store.clone().with_frozen_clock(ms);
    let queues = &["default".to_owned()];
    let claim = |ms| async move {
        at(ms)
            .claim_runs(&["replica/1"], queues, LEASE, 100)
            .await
            .expect("claim")
    };
    at(1_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let copied = claim_run(&at(1_000), &["default"]).await;
    // Redis comes back from a copy older than this replica's last claim saw it: tick@1000,
    // ended, still holds the slot there, and the fires due since wait for it.
    let () = server
        .connection()
        .hset(keys().rewind(), "written_ms", 500)
        .expect("HSET");
    at(3_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    for _ in 0..2 {
        assert_eq!(claim(3_000).await.runs.len(), 0);
    }
    let waiting = || -> Vec<String> {
        server
            .connection()
            .lrange(keys().waiting("tick"), 0, -1)
            .expect("LRANGE")
    };
    assert_eq!(waiting(), ["tick@2000", "tick@3000"]);

    // tick@4000 is claimed ahead while the slot is held; its replica records tick@1000's
    // success again, and the slot goes to tick@2000, not claimed yet when tick@4000 is due.
    at(3_850)
        .promote_due(100, THRESHOLD, Duration::from_millis(200))
        .await
        .expect("promote");
    let [Ok(ahead)] = &claim(3_850).await.runs[..] else {
        panic!("tick@4000 is claimed ahead");
    };
    assert_eq!(ahead.pending_slot, Some(PendingSlot::SkipIfRunning));
    assert!(at(3_900).ack_run(&copied, Some(0), "").await.expect("ack"));
    assert_eq!(
        at(4_000)
            .take_job_slot(ahead, PendingSlot::SkipIfRunning, LEASE)
            .await
            .expect("take"),
        JobSlot::Waiting
    );
    assert_eq!(waiting(), ["tick@3000", "tick@4000"]);

    // The held-back fires run one at a time, and tick@4000 last, none skipped.
    let mut ran = Vec::new();
    for ms in [4_100, 4_700, 5_300] {
        let [Ok(run)] = &claim(ms).await.runs[..] else {
            panic!("a fire runs at {ms}");
        };
        assert!(at(ms + 500).ack_run(run, Some(0), "").await.expect("ack"));
        ran.push(run.id.clone());
    }
    assert_eq!(ran, ["tick@2000", "tick@3000", "tick@4000"]);
    assert_eq!(skipped(&server), []);
}

#[tokio::test]
async fn a_success_recorded_after_the_copy_shows_every_replica_that_redis_came_back_older() {
    let (server, store, token) = setup(FORBID_TICK).await;
    // Another replica's store: what it saw of Redis is its own.
    let other = connect(&server).await;
    plan(&store, &token, "tick", &[1_000]).await;
    let at = |store: &Store, ms| store.clone().with_frozen_clock(ms);
    let queues = ["default".to_owned()];
    let idle_claim = |store: Store| {
        let queues = queues.clone();
        async move {
            store
                .claim_runs(&["replica/1"], &queues, Duration::from_secs(30), 100)
                .await
                .expect("claim")
        }
    };
    at(&store, 1_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&at(&store, 1_000), &["default"]).await;
    let copy: HashMap<String, String> = server
        .connection()
        .hgetall(keys().rewind())
        .expect("HGETALL");
    assert!(!idle_claim(at(&other, 1_500)).await.rewound);
    // The run's success is the only write after the copy; the other replica's next claim,
    // with nothing to claim, reads it.
    assert!(
        at(&store, 1_800)
            .ack_run(&run, Some(0), "")
            .await
            .expect("ack")
    );
    assert!(!idle_claim(at(&other, 1_900)).await.rewound);

    // Redis comes back from the copy made before the success.
    let () = server
        .connection()
        .hset_multiple(keys().rewind(), &copy.into_iter().collect::<Vec<_>>())
        .expect("HSET");
    assert!(idle_claim(at(&other, 2_000)).await.rewound);
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
    // The copy is taken once both jobs run: each has started two fires.
    assert!(
        wait_until(Duration::from_secs(10), || ["one", "two"]
            .iter()
            .all(|job| starts(&scenario, job).len() >= 2)),
        "the jobs do not run: {:?}\n{}",
        intervals(&scenario),
        ReplicaProcess::logs(&replicas)
    );
    // Both jobs can be between two runs at the instant of the copy (their fires come
    // together): a copy is taken again, a moment later, until it holds active runs.
    let active_in_copy: Vec<String> = wait_for(Duration::from_secs(5), || {
        let active: Vec<String> = scenario
            .server
            .snapshot(|redis| redis.zrange(keys().active(), 0, -1).expect("ZRANGE"));
        (!active.is_empty()).then_some(active)
    })
    .expect("a copy holds active runs");
    let copied = scenario.redis_now_ms();
    // Runs go on until those active in the copy have finished and each job has run two fires
    // after the copy, then Redis comes back with the copy, having lost them.
    let lost = || {
        let runs = intervals(&scenario);
        let ended = |run: &String| runs.iter().any(|(id, _, end)| id == run && end.is_some());
        active_in_copy.iter().all(ended)
            && ["one", "two"].iter().all(|job| {
                starts(&scenario, job)
                    .keys()
                    .filter(|fire| **fire > copied)
                    .count()
                    >= 2
            })
    };
    assert!(
        wait_until(Duration::from_secs(10), lost),
        "the runs active in the copy did not end, or fires stopped: {:?}\n{}",
        intervals(&scenario),
        ReplicaProcess::logs(&replicas)
    );
    scenario.server.restore_snapshot(Duration::from_millis(300));
    let restored = scenario.redis_now_ms();
    sleep_until(&scenario, restored + 8_000);

    // The fires of the lost seconds run again, one at a time; fires due meanwhile are skipped
    // as overlaps of those real runs, never for a slot held by a run that does not run.
    let skips = skipped(&scenario.server);
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

/// Whether the ledger shows a run of `job` holding it at `due` (ms): started by then and not
/// ended yet. Its outcome is recorded a moment after its command ends, and its start a moment
/// before the command writes it: `slack` covers both.
fn ran_across(runs: &[(String, i64, Option<i64>)], job: &str, due: i64, slack: i64) -> bool {
    runs.iter().any(|(run, start, end)| {
        run.starts_with(&format!("{job}@"))
            && *start <= due + slack
            && end.is_none_or(|end| end + slack > due)
    })
}

#[test]
fn a_restore_skips_no_fire_for_a_run_of_the_copy_that_had_finished() {
    let mut scenario = Scenario::new();
    // Default settings: `b` forbids overlaps, and its runs take half of each second, so the
    // copy holds one of them active.
    scenario.write_jobs(&format!(
        "{}{}",
        recording_job(&scenario, "a", "* * * * * *", "true"),
        recording_job(&scenario, "b", "* * * * * *", "sleep 0.5")
    ));
    // The default run lease: a run of the copy holds its job for 30 s unless its replica says
    // it has ended.
    let replicas = scenario.replicas_with_a_leader(&["r1", "r2", "r3"], &["--run-lease", "30s"]);
    sleep_until(&scenario, scenario.redis_now_ms() + 3_000);
    let copied = wait_for(Duration::from_secs(5), || {
        let (copy_ms, active): (i64, Vec<(String, Option<String>)>) =
            scenario.server.snapshot(|redis| {
                let (seconds, micros): (i64, i64) = redis::cmd("TIME").query(redis).expect("TIME");
                let active: Vec<String> = redis.zrange(keys().active(), 0, -1).expect("ZRANGE");
                let active = active
                    .into_iter()
                    .map(|run| {
                        // A run claimed ahead whose start the copy does not hold holds nothing.
                        let (worker, starting): (Option<String>, Option<String>) = redis
                            .hmget(keys().run(&run), &["worker", "starting"])
                            .expect("HMGET");
                        (run, worker.filter(|_| starting.is_none()))
                    })
                    .collect();
                (seconds * 1000 + micros / 1000, active)
            });
        active
            .into_iter()
            .find(|(run, _)| run.starts_with("b@") && fire_ms(run) <= copy_ms)
            .and_then(|(run, worker)| Some((copy_ms, run, worker?)))
    });
    let (copy_ms, active_in_copy, worker) = copied.expect("a copy holding a running run of b");
    let holder = replicas
        .iter()
        .find(|replica| worker.starts_with(&format!("{}/", replica.id)))
        .expect("the run's replica");
    // Every replica claims again after the copy; then Redis is down for a second and comes
    // back from the copy, in which `active_in_copy`, long finished, still holds `b`. Its
    // replica is slow to come back (frozen until 2.5 s after the restore): until it says the
    // run has ended, no replica knows.
    sleep_until(&scenario, copy_ms + 5_000);
    let down_ms = scenario.redis_now_ms();
    holder.signal(Signal::SIGSTOP);
    scenario.server.restore_snapshot(Duration::from_secs(1));
    let restored = scenario.redis_now_ms();
    sleep_until(&scenario, restored + 2_500);
    holder.signal(Signal::SIGCONT);
    let checked_to = restored + 6_000;
    let first = copy_ms - copy_ms % 1000 - 2_000;
    let fires = || {
        ["a", "b"].into_iter().flat_map(|job| {
            (first..=checked_to)
                .step_by(1000)
                .map(move |fire| format!("{job}@{fire}"))
        })
    };
    let ended = |run: &str| {
        scenario
            .run_field(run, "state")
            .as_deref()
            .and_then(RunState::parse)
            .is_some_and(RunState::is_finished)
    };
    // The fires of `b` due while the copy's run held its slot wait for it, and run one after
    // another once its replica frees it; a fire due while the slot is handed from one to the
    // next (none of them running) waits behind them. Half a second each or more, which a loaded
    // machine stretches past any fixed time: the checks wait until every fire has ended.
    assert!(
        wait_until(Duration::from_secs(60), || fires().all(|run| ended(&run))),
        "fires neither ran nor were skipped (the copy held {active_in_copy} active): {:?}\n{}",
        fires()
            .filter(|run| !ended(run))
            .map(|run| {
                let record = scenario.run_record(&run);
                (run, record)
            })
            .collect::<Vec<_>>(),
        ReplicaProcess::logs(&replicas)
    );

    let runs = intervals(&scenario);
    let skips = skipped(&scenario.server);
    // No fire is recorded as skipped for a run that was not running at its due time.
    for (run, reason) in &skips {
        let job = run.split('@').next().unwrap_or_default();
        let due = fire_ms(run);
        assert!(
            reason != "overlap" || ran_across(&runs, job, due, 250),
            "{run}, {} ms after the restore, was skipped as an overlap while no run of {job} \
             ran (the copy held {active_in_copy} active); its record: {:?}; the runs of {job} \
             around it in the ledger, and their records: {:?}",
            due - restored,
            scenario.run_record(run),
            runs.iter()
                .filter(|(other, start, _)| {
                    other.starts_with(&format!("{job}@")) && (start - due).abs() < 3_000
                })
                .map(|entry| (entry, scenario.run_record(&entry.0)))
                .collect::<Vec<_>>()
        );
    }
    for job in ["a", "b"] {
        let starts = starts(&scenario, job);
        for fire in (first..=checked_to).step_by(1000) {
            let ran = starts.get(&fire).map_or(0, Vec::len);
            let overlapped = skips.contains(&(format!("{job}@{fire}"), "overlap".to_owned()));
            // A fire that ran between the copy and the outage may run once more: Redis lost
            // its record. Any other runs once, or is skipped for a run that really ran.
            let most = if (copy_ms - 1_000..down_ms).contains(&fire) {
                2
            } else {
                1
            };
            assert!(
                (1..=most).contains(&ran) || (ran == 0 && overlapped),
                "{job}@{fire} ({} ms from the restore) ran {ran} times (the copy held \
                 {active_in_copy} active; skips: {skips:?}); its record: {:?}\n{}",
                fire - restored,
                scenario.run_record(&format!("{job}@{fire}")),
                ReplicaProcess::logs(&replicas)
            );
        }
    }
    assert_eq!(
        starts(&scenario, "b")
            .get(&fire_ms(&active_in_copy))
            .map_or(0, Vec::len),
        1,
        "{active_in_copy}, active in the copy, ran once"
    );
    for replica in &replicas {
        assert!(!replica.log().contains(DATA_LOST), "{}", replica.log());
    }
}

/// A run handed back before it started and ready again has no worker, though its record still
/// names the one that claimed it: `runs list` shows none, in JSON and in its table.
#[tokio::test]
async fn a_run_handed_back_and_ready_again_is_listed_without_a_worker() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000]).await;
    let now = store.clone().with_frozen_clock(1_000);
    now.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&now, &["default"]).await;
    let failure = Failure::without_output(FailReason::NotStarted, "handed back");
    now.fail_run(&run.id, Some(&run.worker), &failure, 0.0)
        .await
        .expect("hand back");
    now.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let dir = tempfile::tempdir().expect("temp dir");
    let args = ["runs", "list", "--replica", "replica"];
    let listed =
        one_document(&cli(&server, dir.path(), &[&args[..], &["--json"]].concat()).success());
    let shown: Vec<(&serde_json::Value, &serde_json::Value, &serde_json::Value)> = listed["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| (&run["id"], &run["state"], &run["worker"]))
        .collect();
    assert_eq!(
        shown,
        [(
            &serde_json::json!(run.id),
            &serde_json::json!("ready"),
            &serde_json::Value::Null
        )],
        "{listed}"
    );
    let table = cli(&server, dir.path(), &args).success();
    assert!(
        table.contains(&run.id) && !table.contains(&run.worker),
        "{table}"
    );
}
