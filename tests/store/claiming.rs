//! Ready runs claimed by workers (`claim_runs.lua`): by priority, with leases and job slots, and
//! runs claimed ahead of their due time.

use std::time::Duration;

use redcron::store::{
    Claim, ClaimedRun, FailOutcome, FailReason, JobSlot, PendingSlot, Store, StoreSettings,
};
use redis::Commands;

use crate::util::store::{
    FORBID_TICK, LEASE, THRESHOLD, claim, claim_for, claim_run, events, failure, plan, run_hash,
    setup,
};
use crate::util::{NAMESPACE, keys};

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).expect("a lease in ms")
}

/// A run claimed ahead whose worker could not start it at its due time (Redis stalled or failed
/// over then) is not running: a fire due meanwhile waits for it instead of being skipped as its
/// overlap, and the real start is what the record keeps.
#[tokio::test]
async fn a_run_claimed_ahead_but_not_started_yet_makes_no_overlap() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[10_000, 10_500]).await;
    let lead = Duration::from_millis(200);
    let at_9900 = store.clone().with_frozen_clock(9_900);
    at_9900
        .promote_due(100, THRESHOLD, lead)
        .await
        .expect("promote");
    let first = claim_run(&at_9900, &["default"]).await;
    assert_eq!(first.id, "tick@10000");

    // Its worker never got its start through; the next fire comes due and is claimed at once.
    let at_10500 = store.clone().with_frozen_clock(10_500);
    at_10500
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(
        claim(&at_10500, &["default"]).await,
        Claim::Empty { skipped: 0 },
        "the second fire waits for the first run's slot, not skipped"
    );
    assert_eq!(run_hash(&server, "tick@10500")["state"], "waiting");

    // The first run starts late: its record says when.
    let at_10700 = store.clone().with_frozen_clock(10_700);
    assert_eq!(
        at_10700
            .start_claimed_runs(&[&first], LEASE)
            .await
            .expect("start"),
        [true]
    );
    assert_eq!(run_hash(&server, "tick@10000")["started_ms"], "10700");
}

/// A fire claimed ahead and handed back before it started keeps the mark of that claim
/// (`starting`) until it is claimed again: a claim at its due time starts it, and drops the mark
/// with the write that records the start.
#[tokio::test]
async fn a_claim_at_the_due_time_drops_the_mark_of_a_claim_ahead_handed_back() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[10_000]).await;
    let at_9900 = store.clone().with_frozen_clock(9_900);
    at_9900
        .promote_due(100, THRESHOLD, Duration::from_millis(200))
        .await
        .expect("promote");
    let ahead = claim_run(&at_9900, &["default"]).await;
    assert_eq!(
        run_hash(&server, &ahead.id)
            .get("starting")
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(
        at_9900
            .fail_run(
                &ahead.id,
                Some(&ahead.worker),
                &failure(FailReason::NotStarted),
                0.0
            )
            .await
            .expect("hand back"),
        FailOutcome::Retrying { due_ms: 10_000 }
    );
    assert_eq!(
        run_hash(&server, &ahead.id)
            .get("starting")
            .map(String::as_str),
        Some("1")
    );

    let at_10000 = store.clone().with_frozen_clock(10_000);
    at_10000
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&at_10000, &["default"]).await;
    assert_eq!(
        (run.id.as_str(), run.start_in),
        ("tick@10000", Duration::ZERO)
    );
    let hash = run_hash(&server, &run.id);
    assert_eq!(
        (
            hash.get("state").map(String::as_str),
            hash.get("started_ms").map(String::as_str),
            hash.get("starting")
        ),
        (Some("active"), Some("10000"), None),
        "started at its due time, no longer marked as claimed ahead"
    );
}

/// An outage longer than the short lease of runs claimed ahead: their workers may not start
/// them late (a later fire may hold the job's slot by then); the reaper hands them back, and
/// each is judged as a fire coming due only then, by its job's misfire policy.
#[tokio::test]
async fn a_fire_claimed_ahead_that_could_not_start_is_judged_late_by_its_misfire_policy() {
    let (server, store, token) = setup(
        "[jobs.tick]\ncommand = \"true\"\noverlap = \"forbid\"\n\
         [jobs.every]\ncommand = \"true\"\noverlap = \"forbid\"\nmisfire = \"run-all\"\n\
         [jobs.alone]\ncommand = \"true\"\noverlap = \"forbid\"\n",
    )
    .await;
    plan(&store, &token, "tick", &[10_000, 75_000]).await;
    plan(&store, &token, "every", &[10_000, 75_000]).await;
    plan(&store, &token, "alone", &[10_000]).await;
    let at_9900 = store.clone().with_frozen_clock(9_900);
    at_9900
        .promote_due(100, THRESHOLD, Duration::from_millis(200))
        .await
        .expect("promote");
    let mut claimed = Vec::new();
    for _ in 0..3 {
        claimed.push(claim_run(&at_9900, &["default"]).await);
    }

    // Redis answers again 70 s later: past the short lease, no run may start.
    let at_80000 = store.clone().with_frozen_clock(80_000);
    // Started in one call, as a replica's workers start them: none on an expired lease.
    let runs: Vec<_> = claimed.iter().collect();
    assert_eq!(
        at_80000
            .start_claimed_runs(&runs, LEASE)
            .await
            .expect("start"),
        vec![false; claimed.len()],
        "started on an expired lease"
    );
    let mut expired = at_80000.expired_leases(10).await.expect("expired");
    expired.sort();
    assert_eq!(expired, ["alone@10000", "every@10000", "tick@10000"]);
    for run_id in &expired {
        at_80000
            .fail_run(run_id, None, &failure(FailReason::Lost), 0.0)
            .await
            .expect("reap");
    }
    at_80000
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let state = |run_id: &str| {
        let run = run_hash(&server, run_id);
        (
            run.get("state").cloned().unwrap_or_default(),
            run.get("reason").cloned().unwrap_or_default(),
        )
    };
    // run-once: a later fire came due (75 s, 5 s late), so the 10 s fire is missed.
    assert_eq!(
        state("tick@10000"),
        ("skipped".to_owned(), "missed".to_owned())
    );
    assert_eq!(state("tick@75000").0, "ready");
    // run-all runs it all the same, and run-once runs it when no later fire came due.
    assert_eq!(state("every@10000").0, "ready");
    assert_eq!(state("alone@10000").0, "ready");
}

/// The same holds for a run claimed ahead while its job's slot was taken: past its short
/// lease it takes no slot, however free the job is by then.
#[tokio::test]
async fn a_run_claimed_ahead_for_a_busy_job_takes_no_slot_past_its_short_lease() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000, 2_000]).await;
    let at_1000 = store.clone().with_frozen_clock(1_000);
    at_1000
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    claim_run(&at_1000, &["default"]).await;
    let at_1900 = store.clone().with_frozen_clock(1_900);
    at_1900
        .promote_due(100, THRESHOLD, Duration::from_millis(200))
        .await
        .expect("promote");
    let ahead = claim_run(&at_1900, &["default"]).await;
    assert_eq!(ahead.id, "tick@2000");
    assert_eq!(ahead.pending_slot, Some(PendingSlot::SkipIfRunning));

    // Redis answers again long after: the first run's slot has expired, and so has this lease.
    let at_80000 = store.clone().with_frozen_clock(80_000);
    assert_eq!(
        at_80000
            .take_job_slot(&ahead, PendingSlot::SkipIfRunning, LEASE)
            .await
            .expect("take"),
        JobSlot::Gone
    );
    assert_eq!(
        run_hash(&server, "tick@2000")
            .get("starting")
            .map(String::as_str),
        Some("1"),
        "it never started"
    );
    assert_eq!(
        at_80000.expired_leases(10).await.expect("expired"),
        ["tick@2000", "tick@1000"],
        "both left to the reaper, earliest deadline first"
    );
}

#[tokio::test]
async fn claim_takes_high_before_normal_before_low_across_queues() {
    let (_server, store, token) = setup(
        "[jobs.low]\ncommand = \"true\"\npriority = \"low\"\nqueue = \"a\"\n\
             [jobs.normal]\ncommand = \"true\"\nqueue = \"b\"\n\
             [jobs.high]\ncommand = \"true\"\npriority = \"high\"\nqueue = \"b\"\n\
             [jobs.elsewhere]\ncommand = \"true\"\npriority = \"high\"\nqueue = \"c\"\n",
    )
    .await;
    for job in ["low", "normal", "high", "elsewhere"] {
        plan(&store, &token, job, &[1_000]).await;
    }
    let store = store.with_frozen_clock(1_000);
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");

    let mut order = Vec::new();
    for _ in 0..3 {
        order.push(claim_run(&store, &["a", "b"]).await.job);
    }
    assert_eq!(order, ["high", "normal", "low"]);
    assert_eq!(
        claim(&store, &["a", "b"]).await,
        Claim::Empty { skipped: 0 }
    );
    assert_eq!(claim_run(&store, &["c"]).await.job, "elsewhere");
}

#[tokio::test]
async fn claim_records_the_lease_and_counts_the_attempt() {
    let (server, store, token) = setup("[jobs.tick]\ncommand = \"true\"\nretries = 1\n").await;
    plan(&store, &token, "tick", &[5_000]).await;
    let store = store.with_frozen_clock(5_000);
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");

    let run = claim_run(&store, &["default"]).await;
    assert_eq!(
        (run.id.as_str(), run.attempt, run.max_attempts),
        ("tick@5000", 1, 2)
    );
    assert_eq!(run.fire_ms, Some(5_000));
    let deadline: Option<i64> = server
        .connection()
        .zscore(keys().active(), "tick@5000")
        .expect("ZSCORE");
    assert_eq!(deadline, Some(35_000));
    let hash = run_hash(&server, "tick@5000");
    assert_eq!(hash.get("state").map(String::as_str), Some("active"));
    assert_eq!(hash.get("worker").map(String::as_str), Some("replica/0"));
}

#[tokio::test]
async fn claim_skips_paused_duplicate_and_overlapping_runs() {
    let (server, store, token) = setup(
        "[jobs.paused]\ncommand = \"true\"\n[jobs.forbid]\ncommand = \"true\"\noverlap = \"forbid\"\n\
             [jobs.allow]\ncommand = \"true\"\noverlap = \"allow\"\n",
    )
    .await;
    let store = store.with_frozen_clock(10_000);
    let mut redis = server.connection();
    let () = redis.sadd(keys().paused(), "paused").expect("SADD");
    plan(&store, &token, "paused", &[1_000]).await;
    // A fire is skipped as an overlap only when a run of its job that started by its due time
    // still runs: forbid@1000 starts at 10,000 (late), the time forbid@10000 is due.
    plan(&store, &token, "forbid", &[1_000, 10_000]).await;
    plan(&store, &token, "allow", &[1_000, 2_000]).await;
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");

    // Ready in due order, then by id: allow@1000 forbid@1000 paused@1000 allow@2000
    // forbid@10000.
    let queues = ["default"];
    let first = claim_run(&store, &queues).await;
    assert_eq!(first.id, "allow@1000");
    assert_eq!(claim_run(&store, &queues).await.id, "forbid@1000");
    let Claim::Run { run, skipped } = claim(&store, &queues).await else {
        panic!("allow@2000 may overlap allow@1000");
    };
    assert_eq!((run.id.as_str(), skipped), ("allow@2000", 1));
    assert_eq!(claim(&store, &queues).await, Claim::Empty { skipped: 1 });

    // The same fire planned again (a lost cursor, say) does not run twice: promotion catches it
    // while its hash is kept, its fingerprint once the hash has expired.
    assert!(store.ack_run(&first, Some(0), "").await.expect("ack"));
    let () = redis.hdel(keys().cursor(), "allow").expect("HDEL");
    plan(&store, &token, "allow", &[1_000]).await;
    let promoted = store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!((promoted.ready, promoted.skipped()), (0, 1));
    let () = redis.del(keys().run("allow@1000")).expect("DEL");
    let () = redis.hdel(keys().cursor(), "allow").expect("HDEL");
    plan(&store, &token, "allow", &[1_000]).await;
    let later = store.clone().with_frozen_clock(20_000);
    assert_eq!(
        later
            .promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote")
            .ready,
        1
    );
    assert_eq!(claim(&later, &queues).await, Claim::Empty { skipped: 1 });

    let reasons: Vec<(String, String)> = events(&server)
        .into_iter()
        .filter(|(_, state, _)| state == "skipped")
        .map(|(run, _, reason)| (run, reason))
        .collect();
    assert_eq!(
        reasons,
        [
            ("paused@1000".to_owned(), "paused".to_owned()),
            ("forbid@10000".to_owned(), "overlap".to_owned()),
            ("allow@1000".to_owned(), "duplicate".to_owned()),
            ("allow@1000".to_owned(), "duplicate".to_owned()),
        ]
    );
}

#[tokio::test]
async fn runs_claimed_ahead_start_at_their_due_time_and_take_a_slot_of_their_job_then() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[10_000, 10_150, 10_300, 10_500]).await;
    let lead = Duration::from_millis(200);
    let queues = ["default"];

    let at_9900 = store.clone().with_frozen_clock(9_900);
    let promoted = at_9900
        .promote_due(100, THRESHOLD, lead)
        .await
        .expect("promote");
    assert_eq!((promoted.ready, promoted.next_due_ms), (1, Some(10_150)));
    let first = claim_run(&at_9900, &queues).await;
    assert_eq!(first.id, "tick@10000");
    assert_eq!(first.start_in, Duration::from_millis(100));
    assert_eq!(first.pending_slot, None, "the job was not busy");
    let deadline: Option<i64> = server
        .connection()
        .zscore(keys().active(), "tick@10000")
        .expect("ZSCORE");
    assert_eq!(
        deadline,
        Some(10_000 + 1_000),
        "a run claimed ahead holds a short lease past its due time until it starts"
    );
    let hash = run_hash(&server, "tick@10000");
    assert_eq!(hash.get("started_ms").map(String::as_str), Some("10000"));
    assert_eq!(hash.get("starting").map(String::as_str), Some("1"));
    // Its worker starts it at its due time: the full lease, and the start it really had.
    let at_10000 = store.clone().with_frozen_clock(10_000);
    assert_eq!(
        at_10000
            .start_claimed_runs(&[&first], LEASE)
            .await
            .expect("start"),
        [true]
    );
    let hash = run_hash(&server, "tick@10000");
    assert_eq!(hash.get("started_ms").map(String::as_str), Some("10000"));
    assert_eq!(hash.get("starting"), None);

    // At 10,150 the next fire is due while the first run, started before it was due, runs:
    // skipped. The one after is claimed ahead; the first run may end before its time, so the
    // slot is taken then.
    let at_10150 = store.clone().with_frozen_clock(10_150);
    at_10150
        .promote_due(100, THRESHOLD, lead)
        .await
        .expect("promote");
    let Claim::Run {
        run: third,
        skipped: 1,
    } = claim(&at_10150, &queues).await
    else {
        panic!("tick@10150 overlaps the first run");
    };
    assert_eq!(
        (third.id.as_str(), third.start_in, third.pending_slot),
        (
            "tick@10300",
            Duration::from_millis(150),
            Some(PendingSlot::SkipIfRunning)
        )
    );
    assert_eq!(
        store
            .take_job_slot(
                &ClaimedRun {
                    worker: "someone/else".to_owned(),
                    ..third.clone()
                },
                PendingSlot::SkipIfRunning,
                LEASE
            )
            .await
            .expect("take"),
        JobSlot::Gone,
        "only the claiming worker takes the slot"
    );
    let at_10300 = store.clone().with_frozen_clock(10_300);
    assert_eq!(
        at_10300
            .take_job_slot(&third, PendingSlot::SkipIfRunning, LEASE)
            .await
            .expect("take"),
        JobSlot::Busy,
        "the first run still holds the job"
    );
    let hash = run_hash(&server, "tick@10300");
    assert_eq!(
        (
            hash.get("state").map(String::as_str),
            hash.get("reason").map(String::as_str)
        ),
        (Some("skipped"), Some("overlap"))
    );
    let active: Option<i64> = server
        .connection()
        .zscore(keys().active(), "tick@10300")
        .expect("ZSCORE");
    assert_eq!(active, None, "a skipped run holds no lease");

    // Claimed ahead while busy, but the first run ends before this one's time: it starts.
    let at_10400 = store.clone().with_frozen_clock(10_400);
    at_10400
        .promote_due(100, THRESHOLD, lead)
        .await
        .expect("promote");
    let fourth = claim_run(&at_10400, &queues).await;
    assert_eq!(
        (fourth.id.as_str(), fourth.pending_slot),
        ("tick@10500", Some(PendingSlot::SkipIfRunning))
    );
    assert!(at_10400.ack_run(&first, Some(0), "").await.expect("ack"));
    let at_10500 = store.clone().with_frozen_clock(10_500);
    assert_eq!(
        at_10500
            .take_job_slot(&fourth, PendingSlot::SkipIfRunning, LEASE)
            .await
            .expect("take"),
        JobSlot::Taken
    );
    let holders: Vec<String> = server
        .connection()
        .zrange(keys().running("tick"), 0, -1)
        .expect("ZRANGE");
    assert_eq!(holders, ["tick@10500"]);
    // Taking the slot starts the run: its full lease, not the short one it was claimed with,
    // and its real start.
    let deadline: Option<i64> = server
        .connection()
        .zscore(keys().active(), "tick@10500")
        .expect("ZSCORE");
    assert_eq!(deadline, Some(10_500 + millis(LEASE)));
    let hash = run_hash(&server, "tick@10500");
    assert_eq!(hash.get("started_ms").map(String::as_str), Some("10500"));
    assert_eq!(hash.get("starting"), None);
}

/// The fires of one second, claimed ahead together (the claim asking about their jobs once),
/// start together: one call for all of them,
/// which reads each run's hash once and writes it once, drops its `starting` mark and moves its
/// slot's deadline, and pays the clock, the type check and the leases once for the call, where a
/// call of its own per run paid them each time (about ten commands a run).
#[tokio::test]
async fn runs_claimed_ahead_start_in_one_call_at_four_commands_each() {
    const JOBS: usize = 20;
    let toml: String = (0..JOBS)
        .map(|job| format!("[jobs.tick{job}]\ncommand = \"true\"\noverlap = \"forbid\"\n"))
        .collect();
    let (server, store, token) = setup(&toml).await;
    for job in 0..JOBS {
        plan(&store, &token, &format!("tick{job}"), &[10_000]).await;
    }
    let at_9900 = store.clone().with_frozen_clock(9_900);
    at_9900
        .promote_due(100, THRESHOLD, Duration::from_millis(200))
        .await
        .expect("promote");
    server.reset_command_calls();
    let claimed: Vec<ClaimedRun> = claim_for(&at_9900, JOBS)
        .await
        .runs
        .into_iter()
        .map(|run| run.expect("a sound run"))
        .collect();
    assert_eq!(claimed.len(), JOBS);
    assert!(
        claimed
            .iter()
            .all(|run| !run.start_in.is_zero() && run.pending_slot.is_none())
    );
    // The claim asks whether the jobs of the runs it popped are declared and paused once for
    // all of them, not once per job.
    let calls = server.command_calls();
    let count = |command: &str| calls.get(command).copied().unwrap_or(0);
    assert_eq!(
        [
            ("hexists", count("hexists")),
            ("sismember", count("sismember")),
            ("smismember", count("smismember")),
            ("hmget", count("hmget")),
        ],
        [
            ("hexists", 0),
            ("sismember", 0),
            ("smismember", 1),
            ("hmget", JOBS as u64 + 1),
        ],
        "{calls:?}"
    );

    server.reset_command_calls();
    let at_10000 = store.clone().with_frozen_clock(10_000);
    let runs: Vec<&ClaimedRun> = claimed.iter().collect();
    let started = at_10000
        .start_claimed_runs(&runs, LEASE)
        .await
        .expect("start");
    assert_eq!(started, vec![true; JOBS]);
    let mut calls = server.command_calls();
    // The harness's own, and the script's load (the first call of a script is answered
    // NOSCRIPT and sent again).
    for harness in ["config|resetstat", "script|load", "evalsha"] {
        calls.remove(harness);
    }
    let runs = JOBS as u64;
    // The slots are `overlap = "forbid"`'s, one per job: a ZADD each, and one for every lease.
    // The clock is frozen here; a replica's call reads TIME once.
    assert_eq!(
        calls,
        [
            ("type", 1),
            ("zmscore", 1),
            ("hmget", runs),
            ("hset", runs),
            ("hdel", runs),
            ("zadd", runs + 1),
        ]
        .into_iter()
        .map(|(command, calls)| (command.to_owned(), calls))
        .collect(),
        "{calls:?}"
    );
    let mut redis = server.connection();
    for run in &claimed {
        let hash = run_hash(&server, &run.id);
        assert_eq!(
            (
                hash.get("started_ms").map(String::as_str),
                hash.get("starting")
            ),
            (Some("10000"), None),
            "{}",
            run.id
        );
        let lease: Option<i64> = redis.zscore(keys().active(), &run.id).expect("ZSCORE");
        let slot: Option<i64> = redis
            .zscore(keys().running(&run.job), &run.id)
            .expect("ZSCORE");
        assert_eq!((lease, slot), (Some(40_000), Some(40_000)), "{}", run.id);
    }
}

#[tokio::test]
async fn only_the_holder_extends_a_lease() {
    let (server, store, token) =
        setup("[jobs.long]\ncommand = \"sleep 60\"\noverlap = \"forbid\"\n").await;
    plan(&store, &token, "long", &[0]).await;
    let start = store.clone().with_frozen_clock(0);
    start
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    claim_run(&start, &["default"]).await;

    let later = store.clone().with_frozen_clock(20_000);
    assert!(
        later
            .extend_lease("long@0", "long", "replica/0", LEASE)
            .await
            .expect("extend")
    );
    assert!(
        !later
            .extend_lease("long@0", "long", "replica/1", LEASE)
            .await
            .expect("extend")
    );
    let mut redis = server.connection();
    let deadline: Option<i64> = redis.zscore(keys().active(), "long@0").expect("ZSCORE");
    assert_eq!(deadline, Some(50_000));
    let slot: Option<i64> = redis
        .zscore(keys().running("long"), "long@0")
        .expect("ZSCORE");
    assert_eq!(slot, Some(50_000), "the job's slot follows the lease");
    // Extended past the first deadline: the reaper leaves it alone.
    let reaper = store.clone().with_frozen_clock(40_000);
    assert!(reaper.expired_leases(10).await.expect("expired").is_empty());
}

/// A claim that did not reach the replicas `--replicated-writes` asks for fails, and hands its
/// runs back first: a failover could lose it, and until then a run claimed by a worker that
/// never ran it would make the next fire of an `overlap = "forbid"` job an overlap.
#[tokio::test]
async fn a_claim_that_did_not_reach_the_replicas_hands_its_runs_back() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[10_000, 11_000]).await;
    let at_10000 = store.clone().with_frozen_clock(10_000);
    at_10000
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let replicated = StoreSettings {
        replicated_writes: Some(redcron::store::ReplicatedWrites {
            replicas: 1,
            timeout: Duration::from_millis(100),
        }),
        ..StoreSettings::default()
    };
    let unreplicated = Store::connect(&server.url(), NAMESPACE, replicated)
        .await
        .expect("connect")
        .with_frozen_clock(10_000);
    let refused = unreplicated
        .claim_run("replica/0", &["default".to_owned()], LEASE, 100)
        .await
        .expect_err("a claim no replica took");
    assert!(
        refused.to_string().contains("replicas"),
        "the error says why: {refused}"
    );
    let active: usize = server.connection().zcard(keys().active()).expect("ZCARD");
    assert_eq!(active, 0, "no run stays claimed");

    // The next fire comes due: the first run is claimed and starts, nothing is an overlap.
    let at_11000 = store.clone().with_frozen_clock(11_000);
    at_11000
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&at_11000, &["default"]).await;
    assert_eq!(run.id, "tick@10000");
    assert_eq!(run.attempt, 1, "the hand-back used no attempt");
}
