//! A fire made ready within the misfire threshold may wait for its job's slot past it: it is
//! judged again when it starts, on each path that starts a run (a claim, a slot handed on by
//! an ack, a slot taken at the due time), so that of a job's fires that start later than the
//! threshold, `run-once` runs one per outage at most, `skip` none and `run-all` every one.

use std::collections::HashMap;
use std::time::Duration;

use nix::sys::signal::Signal;
use redcron::store::{
    Claimed, ClaimedRun, FailReason, Failure, JobPlan, JobSlot, PendingSlot, PlannedRun,
    cron_run_id,
};

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{Scenario, fire_ms};
use crate::util::store::{LEASE, THRESHOLD, claim_for, claim_run, plan, run_hash, setup, skipped};
use crate::util::wait_until;

fn claimed_ids(claimed: &Claimed) -> Vec<String> {
    let mut ids: Vec<String> = claimed
        .runs
        .iter()
        .map(|run| run.as_ref().expect("a decodable run").id.clone())
        .collect();
    ids.sort();
    ids
}

fn claimed_runs(claimed: Claimed) -> Vec<ClaimedRun> {
    claimed
        .runs
        .into_iter()
        .map(|run| run.expect("a decodable run"))
        .collect()
}

/// Why `run` was skipped, the last time it was.
fn skip_of(skips: &[(String, String)], run: &str) -> Option<String> {
    skips
        .iter()
        .rev()
        .find(|(skipped, _)| skipped == run)
        .map(|(_, reason)| reason.clone())
}

#[tokio::test]
async fn a_fire_claimed_past_the_threshold_is_judged_again_by_its_policy() {
    let (server, store, token) = setup(
        "[jobs.skip]\ncommand = \"true\"\nmisfire = \"skip\"\n\
         [jobs.once]\ncommand = \"true\"\n\
         [jobs.alone]\ncommand = \"true\"\n\
         [jobs.all]\ncommand = \"true\"\nmisfire = \"run-all\"\n\
         [jobs.chosen]\ncommand = \"true\"\n",
    )
    .await;
    plan(&store, &token, "skip", &[0]).await;
    plan(&store, &token, "once", &[0, 65_000]).await;
    plan(&store, &token, "alone", &[0]).await;
    plan(&store, &token, "all", &[0, 65_000]).await;
    // Ready 10 s late, within the threshold; claimed only 70 s late (every worker was busy).
    for at in [10_000, 65_000] {
        store
            .clone()
            .with_frozen_clock(at)
            .promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
    }
    let claimed = claim_for(&store.clone().with_frozen_clock(70_001), 10).await;
    assert_eq!(
        claimed_ids(&claimed),
        ["all@0", "all@65000", "alone@0", "once@65000"],
        "skip skips it; run-once runs it only when no later fire came due; run-all runs it"
    );
    let skips = skipped(&server);
    assert_eq!(skip_of(&skips, "skip@0").as_deref(), Some("missed"));
    assert_eq!(skip_of(&skips, "once@0").as_deref(), Some("missed"));
    let mut reasons = claimed.skips.clone();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("once".to_owned(), "missed".to_owned()),
            ("skip".to_owned(), "missed".to_owned())
        ],
        "the claim reports its skips, for the metrics"
    );

    // The missed fire run-once chose when it became ready, 100 s late, is not judged again,
    // though a later fire came due with it.
    plan(&store, &token, "chosen", &[0, 100_000]).await;
    let at_100000 = store.clone().with_frozen_clock(100_000);
    at_100000
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let claimed = claim_for(&store.clone().with_frozen_clock(100_500), 10).await;
    assert_eq!(claimed_ids(&claimed), ["chosen@0", "chosen@100000"]);
    assert_eq!(
        run_hash(&server, "chosen@0")
            .get("state")
            .map(String::as_str),
        Some("active")
    );
}

#[tokio::test]
async fn a_fire_handed_a_freed_slot_past_the_threshold_is_judged_again_by_its_policy() {
    let (server, store, token) = setup(
        "[jobs.once]\ncommand = \"true\"\noverlap = \"forbid\"\n\
         [jobs.skip]\ncommand = \"true\"\noverlap = \"forbid\"\nmisfire = \"skip\"\n\
         [jobs.all]\ncommand = \"true\"\noverlap = \"forbid\"\nmisfire = \"run-all\"\n",
    )
    .await;
    for job in ["once", "skip", "all"] {
        plan(&store, &token, job, &[1_000, 2_000, 3_000]).await;
    }
    // Redis stalled: the fires come due together, 12-14 s late, within the threshold; the
    // first of each job runs, the others wait for its slot.
    let after_stall = store.clone().with_frozen_clock(15_000);
    after_stall
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let first = claim_for(&after_stall, 9).await;
    assert_eq!(claimed_ids(&first), ["all@1000", "once@1000", "skip@1000"]);

    // The first runs end 63.5 s after the first fire: the next fire would start 61.5 s late,
    // the last one 60.5 s late.
    let at_end = store.clone().with_frozen_clock(63_500);
    for run in claimed_runs(first) {
        assert!(at_end.ack_run(&run, Some(0), "").await.expect("ack"));
    }
    let claimed = claim_for(&at_end, 9).await;
    assert_eq!(
        claimed_ids(&claimed),
        ["all@2000", "once@3000"],
        "run-once runs the latest, skip none, run-all the next in turn"
    );
    let skips = skipped(&server);
    for run in ["once@2000", "skip@2000", "skip@3000"] {
        assert_eq!(skip_of(&skips, run).as_deref(), Some("missed"), "{run}");
    }
    assert_eq!(
        run_hash(&server, "all@3000")
            .get("state")
            .map(String::as_str),
        Some("waiting")
    );
    // The slot of a fire skipped went on to the next: no fire of the job is left waiting.
    for job in ["once", "skip"] {
        let waiting: Vec<String> = redis::Commands::lrange(
            &mut server.connection(),
            crate::util::keys().waiting(job),
            0,
            -1,
        )
        .expect("LRANGE");
        assert!(waiting.is_empty(), "{job}: {waiting:?}");
    }
}

#[tokio::test]
async fn a_fire_that_takes_its_slot_past_the_threshold_is_judged_again_by_its_policy() {
    let (server, store, token) = setup(
        "[jobs.once]\ncommand = \"true\"\noverlap = \"forbid\"\n\
         [jobs.all]\ncommand = \"true\"\noverlap = \"forbid\"\nmisfire = \"run-all\"\n",
    )
    .await;
    // A threshold shorter than the short lease of a run claimed ahead (1 s past its due time),
    // so that a worker late to take its slot still holds the run.
    let threshold = Duration::from_millis(500);
    let lead = Duration::from_millis(200);
    for job in ["once", "all"] {
        plan(&store, &token, job, &[10_000, 10_300, 10_900]).await;
    }
    let at_9900 = store.clone().with_frozen_clock(9_900);
    at_9900
        .promote_due(100, threshold, lead)
        .await
        .expect("promote");
    let mut first = Vec::new();
    for _ in 0..2 {
        first.push(claim_run(&at_9900, &["default"]).await);
    }
    let at_10000 = store.clone().with_frozen_clock(10_000);
    let runs: Vec<_> = first.iter().collect();
    let started = at_10000
        .start_claimed_runs(&runs, LEASE)
        .await
        .expect("start");
    assert_eq!(started, vec![true; first.len()]);
    // Claimed ahead while the first runs hold the slots: the slot is taken at the due time.
    let at_10150 = store.clone().with_frozen_clock(10_150);
    at_10150
        .promote_due(100, threshold, lead)
        .await
        .expect("promote");
    let mut ahead = Vec::new();
    for _ in 0..2 {
        let run = claim_run(&at_10150, &["default"]).await;
        assert_eq!(run.pending_slot, Some(PendingSlot::SkipIfRunning));
        ahead.push(run);
    }
    let at_10850 = store.clone().with_frozen_clock(10_850);
    for run in &first {
        assert!(at_10850.ack_run(run, Some(0), "").await.expect("ack"));
    }
    // The workers take the slots 600 ms late, when the next fire has come due.
    let at_10900 = store.clone().with_frozen_clock(10_900);
    at_10900
        .promote_due(100, threshold, Duration::ZERO)
        .await
        .expect("promote");
    let mut outcomes = Vec::new();
    for run in &ahead {
        let outcome = at_10900
            .take_job_slot(run, PendingSlot::SkipIfRunning, LEASE)
            .await
            .expect("take");
        outcomes.push((run.id.clone(), outcome));
    }
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        outcomes,
        [
            ("all@10300".to_owned(), JobSlot::Taken),
            ("once@10300".to_owned(), JobSlot::Missed)
        ]
    );
    let hash = run_hash(&server, "once@10300");
    assert_eq!(
        (
            hash.get("state").map(String::as_str),
            hash.get("reason").map(String::as_str),
            hash.get("attempt").map(String::as_str),
        ),
        (Some("skipped"), Some("missed"), Some("0")),
        "a missed fire used no attempt"
    );
    assert_eq!(
        skip_of(&skipped(&server), "once@10300").as_deref(),
        Some("missed")
    );
}

/// Only a fire that never started is judged at its start: one whose command started and was
/// stopped by a shutdown's grace or lost with its replica runs again however late it is by
/// then, as it would after any handing back, since nothing could run it meanwhile.
#[tokio::test]
async fn a_fire_stopped_or_lost_after_it_started_runs_again_however_late() {
    let (_server, store, token) = setup(
        "[jobs.once]\nschedule = \"@every 20s\"\ncommand = \"true\"\n\
         [jobs.lost]\nschedule = \"@every 20s\"\ncommand = \"true\"\n\
         [jobs.skip]\nschedule = \"@every 20s\"\ncommand = \"true\"\nmisfire = \"skip\"\n",
    )
    .await;
    for job in ["once", "lost", "skip"] {
        plan(&store, &token, job, &[0, 20_000]).await;
    }
    let at_0 = store.clone().with_frozen_clock(0);
    at_0.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let first = claimed_runs(claim_for(&at_0, 3).await);
    assert_eq!(first.len(), 3);
    // The next fires come due while the first runs run (`forbid`): skipped as their overlaps,
    // and each job's latest fire is past its first.
    let at_20000 = store.clone().with_frozen_clock(20_000);
    at_20000
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let overlaps = claim_for(&at_20000, 3).await;
    assert!(overlaps.runs.is_empty(), "{:?}", claimed_ids(&overlaps));

    // 65 s after their fire: two are stopped by their replica's shutdown, one is reaped.
    let at_65000 = store.clone().with_frozen_clock(65_000);
    for run in &first {
        let (worker, reason) = if run.job == "lost" {
            (None, FailReason::Lost)
        } else {
            (Some(run.worker.as_str()), FailReason::Interrupted)
        };
        let failure = Failure::without_output(reason, "handed back");
        at_65000
            .fail_run(&run.id, worker, &failure, 0.0)
            .await
            .expect("fail");
    }
    at_65000
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let again = claim_for(&at_65000, 3).await;
    assert_eq!(
        claimed_ids(&again),
        ["lost@0", "once@0", "skip@0"],
        "skips: {:?}",
        again.skips
    );
    for run in claimed_runs(again) {
        assert_eq!(run.attempt, 1, "{}: handing back used no attempt", run.id);
    }
}

/// A fire claimed ahead and handed back before it started never ran: it is still judged when
/// it would start.
#[tokio::test]
async fn a_fire_handed_back_before_it_started_is_still_judged_at_its_start() {
    let (server, store, token) =
        setup("[jobs.skip]\nschedule = \"@every 20s\"\ncommand = \"true\"\nmisfire = \"skip\"\n")
            .await;
    plan(&store, &token, "skip", &[10_000]).await;
    let lead = Duration::from_millis(200);
    let at_9900 = store.clone().with_frozen_clock(9_900);
    at_9900
        .promote_due(100, THRESHOLD, lead)
        .await
        .expect("promote");
    let run = claim_run(&at_9900, &["default"]).await;
    let failure = Failure::without_output(FailReason::NotStarted, "handed back by shutdown");
    store
        .clone()
        .with_frozen_clock(9_950)
        .fail_run(&run.id, Some(&run.worker), &failure, 0.0)
        .await
        .expect("hand back");
    // Ready again in time, it waits for a worker until past the threshold.
    store
        .clone()
        .with_frozen_clock(20_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let late = claim_for(&store.clone().with_frozen_clock(70_001), 1).await;
    assert!(late.runs.is_empty(), "{:?}", claimed_ids(&late));
    assert_eq!(
        skip_of(&skipped(&server), "skip@10000").as_deref(),
        Some("missed")
    );
    // It ran nothing: no start or worker of the claim ahead is left to read as if it had.
    let hash = run_hash(&server, "skip@10000");
    assert_eq!(
        (hash.get("started_ms"), hash.get("worker")),
        (None, None),
        "{hash:?}"
    );
}

/// A fire is due at its fire time plus its jitter, and its lateness counts from then, at its
/// start as when it becomes ready: a jitter longer than the misfire threshold delays fires,
/// it does not make them missed.
#[tokio::test]
async fn a_jitter_longer_than_the_threshold_makes_no_fire_missed() {
    let (server, store, token) =
        setup("[jobs.skip]\nschedule = \"@every 20s\"\ncommand = \"true\"\nmisfire = \"skip\"\njitter = \"90s\"\n").await;
    let (fire_ms, due_ms) = (0, 90_000);
    let planned = JobPlan {
        job: "skip".to_owned(),
        from_cursor_ms: 0,
        cursor_ms: fire_ms,
        runs: vec![PlannedRun {
            run_id: cron_run_id("skip", fire_ms),
            fire_ms,
            due_ms,
        }],
        skipped: Vec::new(),
    };
    store.plan_fires(&token, &planned).await.expect("plan");
    let on_time = store.clone().with_frozen_clock(due_ms);
    on_time
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let claimed = claim_for(&store.clone().with_frozen_clock(due_ms + 500), 1).await;
    assert_eq!(
        claimed_ids(&claimed),
        ["skip@0"],
        "skips: {:?}",
        claimed.skips
    );
    assert_eq!(
        run_hash(&server, "skip@0")
            .get("missed_after_ms")
            .map(String::as_str),
        Some("150000"),
        "the bound counts from the due time"
    );
}

/// The misfire threshold the replicas run with: short, so that a pause of seconds makes fires
/// miss it, and the test takes seconds rather than minutes.
const THRESHOLD_MS: i64 = 4_000;
/// How much later than its judgement a fire may start: the claim, the worker's spawn and the
/// command's own `date` on a loaded machine.
const REACTION_MS: i64 = 1_500;

#[test]
fn after_writes_were_paused_a_forbid_job_slower_than_its_period_starts_one_late_fire_at_most() {
    let scenario = Scenario::new();
    // Default settings (overlap = "forbid", misfire = "run-once"); every 2 s, running 5 s:
    // the fires that come due together after the pause wait 5 s each for the one before.
    scenario.write_jobs(&format!(
        "[jobs.slow]\nschedule = \"*/2 * * * * *\"\ncommand = \"{}; sleep 5\"\n",
        scenario.record("")
    ));
    let threshold = format!("{THRESHOLD_MS}ms");
    let replicas = [
        scenario.replica("r1", &["--misfire-threshold", &threshold]),
        scenario.replica("r2", &["--misfire-threshold", &threshold]),
    ];
    let logs = || ReplicaProcess::logs(&replicas);
    assert!(
        wait_until(Duration::from_secs(20), || scenario.ledger().len() >= 2),
        "slow does not run:\n{}",
        logs()
    );

    // Writes paused for 10 s, past the threshold: five fires come due meanwhile.
    let paused = scenario.redis_now_ms();
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query(&mut scenario.server.connection())
        .expect("CLIENT PAUSE");
    let resumed = paused + 10_000;
    assert!(
        wait_until(Duration::from_secs(40), || scenario
            .ledger()
            .iter()
            .any(|(run, _, _)| fire_ms(run) >= resumed + 8_000)),
        "fires did not resume after the pause: {:?}\n{}",
        scenario.ledger(),
        logs()
    );

    let ledger = scenario.ledger();
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for (run, _, _) in &ledger {
        *runs.entry(run.as_str()).or_default() += 1;
    }
    let twice: Vec<_> = runs.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "ran twice: {twice:?}\n{}", logs());
    let late: Vec<(&str, i64)> = ledger
        .iter()
        .map(|(run, started, _)| (run.as_str(), started - fire_ms(run)))
        .filter(|(_, lateness)| *lateness > THRESHOLD_MS + REACTION_MS)
        .collect();
    assert!(
        late.len() <= 1,
        "fires started past the misfire threshold under run-once: {late:?} (paused at \
         {paused})\n{}",
        logs()
    );
    // The fires skipped as missed are said in the log, as an overlap is.
    assert!(
        logs().lines().any(
            |line| line.contains("skipped: later than the misfire threshold")
                && line.contains("job=\"slow\" reason=\"missed\"")
        ),
        "no missed fire logged:\n{}",
        logs()
    );
    // The outage's catch-up ran: a fire due while writes were paused.
    assert!(
        ledger
            .iter()
            .any(|(run, _, _)| (paused..resumed).contains(&fire_ms(run))),
        "no fire due in the pause ran: {ledger:?} (paused at {paused})"
    );
}

/// A deploy stops a replica mid-run: the run its shutdown grace stopped runs again on another
/// replica, though by then it is later than the misfire threshold and later fires came due (and
/// were skipped as its overlaps). Default settings; a threshold shorter than the grace, so that
/// the handing back comes past it in seconds rather than minutes.
#[test]
fn a_run_stopped_by_a_shutdown_runs_again_on_another_replica_past_the_threshold() {
    let scenario = Scenario::new();
    scenario.write_jobs(&format!(
        "[jobs.report]\nschedule = \"*/2 * * * * *\"\ncommand = \"{}; sleep 20\"\n",
        scenario.record("")
    ));
    let flags = ["--misfire-threshold", "2s", "--shutdown-grace", "3s"];
    let replicas = vec![
        scenario.replica("r1", &flags),
        scenario.replica("r2", &flags),
    ];
    let logs = |replicas: &[ReplicaProcess]| ReplicaProcess::logs(replicas);
    assert!(
        wait_until(Duration::from_secs(20), || !scenario.ledger().is_empty()),
        "report does not run:\n{}",
        logs(&replicas)
    );
    let run = scenario.ledger()[0].0.clone();
    let worker = scenario
        .run_field(&run, "worker")
        .expect("the run's worker");
    let stopped = replicas
        .iter()
        .position(|replica| worker.starts_with(&format!("{}/", replica.id)))
        .expect("one of ours runs it");
    replicas[stopped].signal(Signal::SIGTERM);

    let ran_again = wait_until(Duration::from_secs(30), || {
        scenario
            .ledger()
            .iter()
            .filter(|(id, _, _)| *id == run)
            .count()
            >= 2
    });
    assert!(
        ran_again,
        "{run} did not run again after its replica stopped it (state {:?}, reason {:?}); \
         ledger {:?}\n{}",
        scenario.run_field(&run, "state"),
        scenario.run_field(&run, "reason"),
        scenario.ledger(),
        logs(&replicas)
    );
}

/// The claim reads the job's latest fire only for a fire it finds late, after its pops: a
/// wrong-typed `latest-fire` must refuse the claim before any, or the fire would be in no list.
#[tokio::test]
async fn a_claim_refuses_a_wrong_typed_latest_fire_with_the_late_fire_left_ready() {
    let (server, store, token) = setup("[jobs.once]\ncommand = \"true\"\n").await;
    plan(&store, &token, "once", &[0]).await;
    store
        .clone()
        .with_frozen_clock(10_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let mut redis = server.connection();
    let () =
        redis::Commands::set(&mut redis, crate::util::keys().latest_fires(), "x").expect("SET");

    let late = store.clone().with_frozen_clock(70_001);
    let error = late
        .claim_runs(&["replica/0"], &["default".to_owned()], LEASE, 100)
        .await
        .expect_err("a claim with latest-fire a string");
    let named = format!(
        "claim_runs: {} holds a string, not a hash",
        crate::util::keys().latest_fires()
    );
    assert!(error.to_string().contains(&named), "{error}");
    assert_eq!(
        run_hash(&server, "once@0").get("state").map(String::as_str),
        Some("ready")
    );

    let () = redis::Commands::del(&mut redis, crate::util::keys().latest_fires()).expect("DEL");
    assert_eq!(claim_run(&late, &["default"]).await.id, "once@0");
}
