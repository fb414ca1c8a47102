//! Each Lua script on its own, against a real Redis: given this state and this call, expect that
//! state. Time-based decisions use a frozen clock (`Store::with_frozen_clock`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redcron::schedule::Priority;
use redcron::store::{
    Acquisition, Claim, ClaimedRun, Enqueue, Enqueued, FailOutcome, FailReason, JobPlan, JobSlot,
    LeaderToken, PendingSlot, PlanOutcome, PlannedRun, SkipReason, SkippedFire, Store, StoreError,
    StoreSettings, UnplanOutcome, canonical_json, cron_run_id,
};
use redis::Commands;

use crate::util::redis_server::RedisServer;
use crate::util::store::{
    FORBID_TICK, LEASE, THRESHOLD, claim, claim_run, connect, declare, events, failure, jobs,
    leader, plan, run_hash, setup,
};
use crate::util::{NAMESPACE, keys};

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).expect("a lease in ms")
}

#[tokio::test]
async fn leader_lease_is_exclusive_and_every_acquisition_raises_the_epoch() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let first = leader(&store).await;
    assert_eq!(first.epoch(), Some(1));
    assert_eq!(
        store.acquire_leader("other", LEASE).await.expect("acquire"),
        Acquisition::Held(first.as_str().to_owned())
    );
    assert!(store.renew_leader(&first, LEASE).await.expect("renew"));
    assert!(store.release_leader(&first).await.expect("release"));
    assert!(!store.release_leader(&first).await.expect("release again"));
    assert!(
        !store
            .renew_leader(&first, LEASE)
            .await
            .expect("renew after release")
    );

    let Acquisition::Acquired(second) =
        store.acquire_leader("other", LEASE).await.expect("acquire")
    else {
        panic!("the lease was free");
    };
    assert_eq!(second.as_str(), "other:2");
    assert!(
        !store
            .renew_leader(&first, LEASE)
            .await
            .expect("stale renew")
    );
}

#[tokio::test]
async fn stale_leader_is_fenced_and_writes_nothing() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    store
        .publish_definitions(&jobs(
            "[jobs.tick]\nschedule = \"* * * * *\"\ncommand = \"true\"\n",
        ))
        .await
        .expect("publish");
    let Acquisition::Acquired(stale) = store
        .acquire_leader("paused", Duration::from_millis(100))
        .await
        .expect("acquire")
    else {
        panic!("the lease was free");
    };
    // The stale leader's lease runs out (as during a long pause) and a successor takes over.
    let deadline = Instant::now() + Duration::from_secs(5);
    let successor = loop {
        if let Acquisition::Acquired(token) = store
            .acquire_leader("successor", LEASE)
            .await
            .expect("acquire")
        {
            break token;
        }
        assert!(Instant::now() < deadline, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };

    assert_eq!(
        plan(&store, &stale, "tick", &[60_000]).await,
        PlanOutcome::Fenced(successor.as_str().to_owned())
    );
    let mut redis = server.connection();
    let due: usize = redis.zcard(keys().due()).expect("ZCARD");
    let cursor: Option<String> = redis.hget(keys().cursor(), "tick").expect("HGET");
    assert_eq!((due, cursor), (0, None), "a fenced plan wrote something");

    assert_eq!(
        plan(&store, &successor, "tick", &[60_000, 120_000]).await,
        PlanOutcome::Planned(2)
    );
}

#[tokio::test]
async fn planning_a_fire_twice_is_a_no_op_and_the_cursor_only_moves_forward() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let token = leader(&store).await;
    assert_eq!(
        plan(&store, &token, "tick", &[60_000, 120_000]).await,
        PlanOutcome::Planned(2)
    );
    assert_eq!(
        plan(&store, &token, "tick", &[120_000, 180_000]).await,
        PlanOutcome::Planned(1)
    );
    assert_eq!(
        plan(&store, &token, "tick", &[60_000]).await,
        PlanOutcome::Planned(0)
    );
    assert_eq!(
        store.cursors().await.expect("cursors").get("tick"),
        Some(&180_000)
    );

    let skipped = JobPlan {
        job: "tick".to_owned(),
        from_cursor_ms: 0,
        cursor_ms: 240_000,
        runs: Vec::new(),
        skipped: vec![SkippedFire {
            run_id: cron_run_id("tick", 240_000),
            reason: SkipReason::Missed,
        }],
    };
    assert_eq!(
        store.plan_fires(&token, &skipped).await.expect("plan"),
        PlanOutcome::Planned(0)
    );
    assert_eq!(
        store.cursors().await.expect("cursors").get("tick"),
        Some(&240_000)
    );
    assert_eq!(
        events(&server),
        [(
            "tick@240000".to_owned(),
            "skipped".to_owned(),
            "missed".to_owned()
        )]
    );
}

#[tokio::test]
async fn bulk_enqueue_answers_each_run_in_order_across_pipelined_calls() {
    let (server, store, _token) = setup("[jobs.work]\ncommand = \"true\"\n").await;
    let request = |job: &str, due_ms: Option<i64>, unique: Option<&str>| Enqueue {
        job: job.to_owned(),
        due_ms,
        payload: None,
        priority: None,
        unique: unique.map(|key| (key.to_owned(), Duration::from_secs(60))),
    };
    // More runs than one script call takes; the odd ones out sit at the end.
    let mut requests: Vec<Enqueue> = (0..2_500).map(|_| request("work", None, None)).collect();
    requests.push(request("work", Some(i64::MAX / 2), None));
    requests.push(request("work", None, Some("once")));
    requests.push(request("work", None, Some("once")));
    requests.push(request("nope", None, None));
    let answers = store.enqueue_many(&requests).await.expect("enqueue");
    assert_eq!(answers.len(), requests.len());
    assert!(
        answers[..2_501]
            .iter()
            .all(|answer| matches!(answer, Enqueued::Scheduled { paused: false, .. }))
    );
    let Enqueued::Scheduled { run_id: holder, .. } = &answers[2_501] else {
        panic!("the first unique run is created: {:?}", answers[2_501]);
    };
    assert_eq!(
        answers[2_502],
        Enqueued::Duplicate {
            holder: holder.clone()
        }
    );
    assert_eq!(answers[2_503], Enqueued::UnknownJob);

    let mut redis = server.connection();
    let ready: usize = redis
        .llen(keys().ready("default", Priority::Normal))
        .expect("LLEN");
    assert_eq!(ready, 2_501, "runs due now are ready at once");
    let due: usize = redis.zcard(keys().due_runs()).expect("ZCARD");
    assert_eq!(due, 1, "a later run waits in the ad-hoc runs' due set");
}

/// A leader whose planned fires Redis lost (a failover to a replica that had not received them)
/// while its lease held is told so, and nothing is written: it reads the cursors again.
#[tokio::test]
async fn a_plan_continuing_from_a_cursor_redis_lost_is_refused_as_stale() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[60_000]).await;
    // The leader wrote the cursor up to 120 000, but Redis kept only 60 000.
    let lost = JobPlan {
        job: "tick".to_owned(),
        from_cursor_ms: 120_000,
        cursor_ms: 180_000,
        runs: vec![PlannedRun {
            run_id: cron_run_id("tick", 180_000),
            fire_ms: 180_000,
            due_ms: 180_000,
        }],
        skipped: Vec::new(),
    };
    assert_eq!(
        store.plan_fires(&token, &lost).await.expect("plan"),
        PlanOutcome::Stale("tick".to_owned())
    );
    assert_eq!(
        store.cursors().await.expect("cursors").get("tick"),
        Some(&60_000)
    );
    let due: usize = server.connection().zcard(keys().due()).expect("ZCARD");
    assert_eq!(due, 1, "nothing planned by the refused call");
    // Continuing from what Redis has is planned.
    let resumed = JobPlan {
        from_cursor_ms: 60_000,
        ..lost
    };
    assert_eq!(
        store.plan_fires(&token, &resumed).await.expect("plan"),
        PlanOutcome::Planned(1)
    );
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
    assert!(
        at_10700
            .start_claimed_run(&first, LEASE)
            .await
            .expect("start")
    );
    assert_eq!(run_hash(&server, "tick@10000")["started_ms"], "10700");
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
    for run in &claimed {
        assert!(
            !at_80000.start_claimed_run(run, LEASE).await.expect("start"),
            "{} started on an expired lease",
            run.id
        );
    }
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

/// A client may send a script again when its connection broke before the reply came (the
/// cluster client does): the repeated call must change nothing, even once the run has finished.
#[tokio::test]
async fn an_enqueue_repeated_after_its_reply_was_lost_creates_nothing_more() {
    let (server, store, _token) = setup("[jobs.work]\ncommand = \"true\"\n").await;
    let request = Enqueue {
        job: "work".to_owned(),
        due_ms: None,
        payload: Some("{}".to_owned()),
        priority: None,
        unique: None,
    };
    let answers = store
        .enqueue_many(std::slice::from_ref(&request))
        .await
        .expect("enqueue");
    let [Enqueued::Scheduled { run_id, .. }] = answers.as_slice() else {
        panic!("one run created: {answers:?}");
    };
    let run = claim_run(&store, &["default"]).await;
    assert_eq!(&run.id, run_id);
    assert!(store.ack_run(&run, Some(0), "").await.expect("ack"));

    // The same call again, word for word: the script's KEYS and ARGV as the store sent them.
    let script = redis::Script::new(concat!(
        include_str!("../lua/include/common.lua"),
        "\n",
        include_str!("../lua/enqueue_runs.lua")
    ));
    let mut invocation = script.prepare_invoke();
    invocation
        .key(keys().due())
        .key(keys().defs())
        .key(keys().paused())
        .key(keys().wake_promoter())
        .key(keys().hold())
        .arg(keys().prefix())
        .arg("")
        .arg(request.script_arguments(run_id).as_slice());
    let reply: Vec<redis::Value> = invocation
        .invoke(&mut server.connection())
        .expect("the repeated call");
    assert_eq!(reply.len(), 3);
    assert_eq!(
        reply[0],
        redis::Value::BulkString(b"OK".to_vec()),
        "answered as the first call was"
    );
    assert_eq!(run_hash(&server, run_id)["state"], "succeeded");
    assert_eq!(
        claim(&store, &["default"]).await,
        Claim::Empty { skipped: 0 }
    );
}

#[tokio::test]
async fn many_jobs_are_planned_in_pipelined_calls_and_fenced_together() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let token = leader(&store).await;
    // More jobs and runs than one script call takes.
    let plans: Vec<JobPlan> = (0..2_500)
        .map(|job| {
            let job = format!("job{job}");
            JobPlan {
                from_cursor_ms: 0,
                runs: [60_000, 120_000, 180_000]
                    .iter()
                    .map(|&fire_ms| PlannedRun {
                        run_id: cron_run_id(&job, fire_ms),
                        fire_ms,
                        due_ms: fire_ms,
                    })
                    .collect(),
                job,
                cursor_ms: 180_000,
                skipped: Vec::new(),
            }
        })
        .collect();
    assert_eq!(
        store.plan_jobs(&token, &plans, None).await.expect("plan"),
        PlanOutcome::Planned(7_500)
    );
    assert_eq!(
        store
            .plan_jobs(&token, &plans, None)
            .await
            .expect("plan again"),
        PlanOutcome::Planned(0),
        "planning is idempotent"
    );
    let cursors = store.cursors().await.expect("cursors");
    assert_eq!(cursors.len(), 2_500);
    assert!(cursors.values().all(|&cursor| cursor == 180_000));

    let mut redis = server.connection();
    let () = redis.del(keys().leader()).expect("DEL");
    let successor = store.acquire_leader("other", LEASE).await.expect("acquire");
    assert!(matches!(successor, Acquisition::Acquired(_)));
    let later: Vec<JobPlan> = plans
        .iter()
        .map(|plan| JobPlan {
            from_cursor_ms: 0,
            runs: vec![PlannedRun {
                run_id: cron_run_id(&plan.job, 240_000),
                fire_ms: 240_000,
                due_ms: 240_000,
            }],
            cursor_ms: 240_000,
            ..plan.clone()
        })
        .collect();
    assert!(matches!(
        store.plan_jobs(&token, &later, None).await.expect("plan"),
        PlanOutcome::Fenced(holder) if holder.starts_with("other:")
    ));
    let due: usize = redis.zcard(keys().due()).expect("ZCARD");
    assert_eq!(due, 7_500, "a fenced leader writes nothing");
}

#[tokio::test]
async fn promote_moves_only_due_runs_and_creates_their_run_hashes() {
    let (server, store, token) = setup(
        "[jobs.report]\nschedule = \"* * * * *\"\ncommand = \"true\"\npriority = \"high\"\n\
             queue = \"reports\"\nretries = 2\n",
    )
    .await;
    plan(&store, &token, "report", &[60_000, 120_000, 180_000]).await;

    let promoted = store
        .clone()
        .with_frozen_clock(120_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!((promoted.ready, promoted.skipped()), (2, 0));
    assert_eq!(promoted.next_due_ms, Some(180_000));

    let mut redis = server.connection();
    let ready: Vec<String> = redis
        .lrange(keys().ready_fires("reports", Priority::High), 0, -1)
        .expect("LRANGE");
    assert_eq!(ready, ["report@60000", "report@120000"]);
    let planned: Option<String> = redis.hget(keys().planned(), "report").expect("HGET");
    assert_eq!(
        planned.as_deref(),
        Some("180000"),
        "promoted fires leave the index"
    );
    let woken: usize = redis.zcard(keys().wake("reports")).expect("ZCARD");
    assert_eq!(woken, 1);
    let run = run_hash(&server, "report@60000");
    for (field, value) in [
        ("job", "report"),
        ("fire_ms", "60000"),
        ("attempt", "0"),
        ("max_attempts", "3"),
        ("queue", "reports"),
        ("priority", "high"),
        ("state", "ready"),
        ("delivery", "at-least-once"),
        ("fingerprint", "report@60000"),
    ] {
        assert_eq!(
            run.get(field).map(String::as_str),
            Some(value),
            "{field}: {run:?}"
        );
    }
}

#[tokio::test]
async fn missed_fires_follow_the_jobs_misfire_policy() {
    let (server, store, token) = setup("[jobs.skip]\ncommand = \"true\"\nmisfire = \"skip\"\n\
             [jobs.once]\ncommand = \"true\"\nmisfire = \"run-once\"\n\
             [jobs.all]\ncommand = \"true\"\nmisfire = \"run-all\"\n\
             [jobs.deadline]\ncommand = \"true\"\nmisfire = \"run-all\"\nstarting_deadline = \"30s\"\n\
             [jobs.late]\ncommand = \"true\"\nmisfire = \"skip\"\n").await;
    let fires = [0, 30_000, 60_000, 90_000];
    for job in ["skip", "once", "all", "deadline"] {
        plan(&store, &token, job, &fires).await;
    }
    // Less late than the threshold: it simply runs late.
    plan(&store, &token, "late", &[150_000]).await;

    let promoted = store
        .clone()
        .with_frozen_clock(200_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!((promoted.ready, promoted.skipped()), (6, 11));
    let ready: Vec<String> = server
        .connection()
        .lrange(keys().ready_fires("default", Priority::Normal), 0, -1)
        .expect("LRANGE");
    let mut ready_sorted = ready.clone();
    ready_sorted.sort();
    assert_eq!(
        ready_sorted,
        [
            "all@0",
            "all@30000",
            "all@60000",
            "all@90000",
            "late@150000",
            "once@90000"
        ]
    );
    // run-all runs them oldest first.
    let all: Vec<&String> = ready.iter().filter(|id| id.starts_with("all@")).collect();
    assert_eq!(all, ["all@0", "all@30000", "all@60000", "all@90000"]);

    let reasons: HashMap<String, String> = events(&server)
        .into_iter()
        .filter(|(_, state, _)| state == "skipped")
        .map(|(run, _, reason)| (run, reason))
        .collect();
    for fire in fires {
        assert_eq!(
            reasons.get(&format!("skip@{fire}")).map(String::as_str),
            Some("missed")
        );
        assert_eq!(
            reasons.get(&format!("deadline@{fire}")).map(String::as_str),
            Some("deadline")
        );
    }
    for fire in [0, 30_000, 60_000] {
        assert_eq!(
            reasons.get(&format!("once@{fire}")).map(String::as_str),
            Some("missed")
        );
    }
    assert_eq!(
        run_hash(&server, "skip@0").get("state").map(String::as_str),
        Some("skipped")
    );
}

#[tokio::test]
async fn run_once_keeps_the_latest_missed_fire_across_promotion_calls() {
    let (server, store, token) =
        setup("[jobs.once]\ncommand = \"true\"\nmisfire = \"run-once\"\n").await;
    // The last fire is not missed yet: the latest missed one is 60,000.
    plan(&store, &token, "once", &[0, 30_000, 60_000, 180_000]).await;
    let at = store.clone().with_frozen_clock(200_000);
    for _ in 0..3 {
        at.promote_due(1, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
    }
    let ready: Vec<String> = server
        .connection()
        .lrange(keys().ready_fires("default", Priority::Normal), 0, -1)
        .expect("LRANGE");
    assert_eq!(ready, ["once@60000"]);
    let planned: Option<String> = server
        .connection()
        .hget(keys().planned(), "once")
        .expect("HGET");
    assert_eq!(planned.as_deref(), Some("180000"));
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
    assert!(
        at_10000
            .start_claimed_run(&first, LEASE)
            .await
            .expect("start")
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

#[tokio::test]
async fn ack_records_success_and_frees_the_jobs_slot() {
    let (server, store, token) = setup(FORBID_TICK).await;
    let store = store.with_frozen_clock(10_000);
    plan(&store, &token, "tick", &[1_000]).await;
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&store, &["default"]).await;

    let someone_else = ClaimedRun {
        worker: "someone/else".to_owned(),
        ..run.clone()
    };
    let earlier_attempt = ClaimedRun {
        attempt: 0,
        ..run.clone()
    };
    for (not_theirs, what) in [
        (someone_else, "another worker"),
        (earlier_attempt, "an old attempt"),
    ] {
        assert!(
            !store.ack_run(&not_theirs, Some(0), "").await.expect("ack"),
            "{what} cannot ack the run"
        );
    }
    // What an earlier attempt that was lost left in the hash.
    let () = server
        .connection()
        .hset_multiple(
            keys().run(&run.id),
            &[("reason", "lost"), ("error", "lease expired")],
        )
        .expect("HSET");
    assert!(store.ack_run(&run, Some(0), "done\n").await.expect("ack"));
    assert!(
        !store.ack_run(&run, Some(0), "").await.expect("ack twice"),
        "a run is acked once"
    );

    let mut redis = server.connection();
    let active: usize = redis.zcard(keys().active()).expect("ZCARD");
    let busy: bool = redis.exists(keys().running("tick")).expect("EXISTS");
    let ttl: i64 = redis.pttl(keys().run(&run.id)).expect("PTTL");
    assert_eq!((active, busy), (0, false));
    assert!(ttl > 0, "a finished run's hash expires after the retention");
    let hash = run_hash(&server, &run.id);
    assert_eq!(hash.get("state").map(String::as_str), Some("succeeded"));
    assert_eq!(
        (hash.get("reason"), hash.get("error")),
        (None, None),
        "a success is shown without an earlier attempt's failure"
    );
    assert_eq!(hash.get("output").map(String::as_str), Some("done\n"));
    assert_eq!(hash.get("exit_code").map(String::as_str), Some("0"));
}

#[tokio::test]
async fn failures_retry_with_capped_exponential_backoff_then_go_to_the_dead_letters() {
    let (server, store, token) = setup("[jobs.flaky]\ncommand = \"false\"\nretries = 3\nbackoff = \"10s\"\nmax_backoff = \"25s\"\n").await;
    plan(&store, &token, "flaky", &[0]).await;

    let mut now = 0;
    let mut delays = Vec::new();
    for attempt in 1..=4 {
        let at = store.clone().with_frozen_clock(now);
        at.promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
        let run = claim_run(&at, &["default"]).await;
        assert_eq!(run.attempt, attempt);
        // jitter 1.0: the full delay.
        match at
            .fail_run(
                &run.id,
                Some("replica/0"),
                &failure(FailReason::Failed),
                1.0,
            )
            .await
            .expect("fail")
        {
            FailOutcome::Retrying { due_ms } => {
                delays.push(due_ms - now);
                now = due_ms;
            }
            FailOutcome::Dead => assert_eq!(attempt, 4, "dead before the last attempt"),
            FailOutcome::Gone => panic!("the run was this worker's"),
        }
    }
    assert_eq!(delays, [10_000, 20_000, 25_000]);
    let mut redis = server.connection();
    let dead: Vec<String> = redis.zrange(keys().dead(), 0, -1).expect("ZRANGE");
    assert_eq!(dead, ["flaky@0"]);
    let hash = run_hash(&server, "flaky@0");
    assert_eq!(hash.get("state").map(String::as_str), Some("dead"));
    assert_eq!(hash.get("error").map(String::as_str), Some("exit status 1"));
    let ttl: i64 = redis.pttl(keys().run("flaky@0")).expect("PTTL");
    assert_eq!(ttl, -1, "dead runs are kept until purged");
}

#[tokio::test]
async fn jitter_spreads_retries_over_half_to_all_of_the_backoff() {
    // fail_run draws nothing: the caller's jitter in [0, 1) places the retry, from half the
    // backoff at 0 to (nearly) all of it as it nears 1, in proportion between.
    for (jitter, due_ms) in [(0.0, 5_000), (0.25, 6_250), (0.5, 7_500), (0.999, 9_995)] {
        let (_server, store, token) =
            setup("[jobs.flaky]\ncommand = \"false\"\nretries = 1\nbackoff = \"10s\"\n").await;
        plan(&store, &token, "flaky", &[0]).await;
        let store = store.with_frozen_clock(0);
        store
            .promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
        let run = claim_run(&store, &["default"]).await;
        assert_eq!(
            store
                .fail_run(
                    &run.id,
                    Some("replica/0"),
                    &failure(FailReason::Timeout),
                    jitter
                )
                .await
                .expect("fail"),
            FailOutcome::Retrying { due_ms },
            "a 10 s backoff with jitter {jitter}"
        );
    }
}

#[tokio::test]
async fn permanent_failures_skip_the_remaining_attempts() {
    let (_server, store, token) = setup("[jobs.bad]\ncommand = \"false\"\nretries = 5\n").await;
    plan(&store, &token, "bad", &[0]).await;
    let store = store.with_frozen_clock(0);
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&store, &["default"]).await;
    assert_eq!(
        store
            .fail_run(
                &run.id,
                Some("replica/0"),
                &failure(FailReason::Permanent),
                0.5
            )
            .await
            .expect("fail"),
        FailOutcome::Dead
    );
}

#[tokio::test]
async fn reaped_runs_rerun_when_at_least_once_and_die_when_at_most_once() {
    let (_server, store, token) = setup(
        "[jobs.again]\ncommand = \"sleep 10\"\n\
             [jobs.once]\ncommand = \"sleep 10\"\ndelivery = \"at-most-once\"\n",
    )
    .await;
    plan(&store, &token, "again", &[0]).await;
    plan(&store, &token, "once", &[0]).await;
    let start = store.clone().with_frozen_clock(0);
    start
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    claim_run(&start, &["default"]).await;
    claim_run(&start, &["default"]).await;

    // Before the lease ends nothing is expired, and the reaper cannot take a live run.
    assert!(start.expired_leases(10).await.expect("expired").is_empty());
    let lost = failure(FailReason::Lost);
    assert_eq!(
        start
            .fail_run("again@0", None, &lost, 0.5)
            .await
            .expect("reap"),
        FailOutcome::Gone
    );

    let later = store
        .clone()
        .with_frozen_clock(LEASE.as_millis() as i64 + 1);
    let mut expired = later.expired_leases(10).await.expect("expired");
    expired.sort();
    assert_eq!(expired, ["again@0", "once@0"]);
    assert_eq!(
        later
            .fail_run("again@0", None, &lost, 0.5)
            .await
            .expect("reap"),
        FailOutcome::Retrying { due_ms: 30_001 }
    );
    assert_eq!(
        later
            .fail_run("once@0", None, &lost, 0.5)
            .await
            .expect("reap"),
        FailOutcome::Dead
    );

    // The re-run is attempt 1 again: losing a worker uses up no attempt.
    later
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(claim_run(&later, &["default"]).await.attempt, 1);
}

#[tokio::test]
async fn a_run_lost_again_and_again_ends_in_the_dead_letters() {
    let (_server, store, token) = setup("[jobs.poison]\ncommand = \"kill -9 $PPID\"\n").await;
    plan(&store, &token, "poison", &[0]).await;
    let mut outcomes = Vec::new();
    for round in 0..4_i64 {
        let claimed_at = round * 100_000;
        let at = store.clone().with_frozen_clock(claimed_at);
        at.promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
        claim_run(&at, &["default"]).await;
        let reaped_at = store.clone().with_frozen_clock(claimed_at + 50_000);
        outcomes.push(
            reaped_at
                .fail_run("poison@0", None, &failure(FailReason::Lost), 0.5)
                .await
                .expect("reap"),
        );
    }
    assert!(
        matches!(outcomes[2], FailOutcome::Retrying { .. }),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[3], FailOutcome::Dead);
}

#[tokio::test]
async fn interrupted_runs_come_back_at_once_without_using_an_attempt() {
    let (_server, store, token) = setup("[jobs.long]\ncommand = \"sleep 60\"\n").await;
    plan(&store, &token, "long", &[0]).await;
    let store = store.with_frozen_clock(1_000);
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    claim_run(&store, &["default"]).await;
    assert_eq!(
        store
            .fail_run(
                "long@0",
                Some("replica/0"),
                &failure(FailReason::Interrupted),
                0.5
            )
            .await
            .expect("hand back"),
        FailOutcome::Retrying { due_ms: 1_000 }
    );
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(claim_run(&store, &["default"]).await.attempt, 1);
}

#[tokio::test]
async fn an_at_most_once_run_stopped_by_shutdown_is_dead_unless_it_had_not_started() {
    let (server, store, token) = setup(
        "[jobs.once]\ncommand = \"sleep 60\"\ndelivery = \"at-most-once\"\noverlap = \"allow\"\n",
    )
    .await;
    plan(&store, &token, "once", &[0, 500]).await;
    let store = store.with_frozen_clock(1_000);
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let stopped = claim_run(&store, &["default"]).await;
    let never_started = claim_run(&store, &["default"]).await;
    assert_eq!(
        store
            .fail_run(
                &stopped.id,
                Some(&stopped.worker),
                &failure(FailReason::Interrupted),
                0.5
            )
            .await
            .expect("hand back"),
        FailOutcome::Dead,
        "it may have done part of its work: never run twice"
    );
    assert_eq!(
        store
            .fail_run(
                &never_started.id,
                Some(&never_started.worker),
                &failure(FailReason::NotStarted),
                0.5
            )
            .await
            .expect("hand back"),
        FailOutcome::Retrying { due_ms: 1_000 }
    );
    assert_eq!(
        run_hash(&server, &stopped.id)
            .get("reason")
            .map(String::as_str),
        Some("interrupted")
    );
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

#[tokio::test]
async fn corrupt_and_undeclared_runs_never_execute() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    store.publish_definitions(&[]).await.expect("publish");
    declare(&store, "replica", Vec::new()).await;
    let mut redis = server.connection();
    let () = redis.zadd(keys().due(), "no-fire-time", 0).expect("ZADD");
    let () = redis.zadd(keys().due(), "ghost@0", 0).expect("ZADD");
    let () = redis
        .rpush(keys().ready("default", Priority::Normal), "nohash")
        .expect("RPUSH");
    let store = store.with_frozen_clock(1_000);

    let promoted = store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(
        (promoted.ready, promoted.skipped(), promoted.next_due_ms),
        (0, 2, None)
    );
    assert_eq!(promoted.now_ms, 1_000);
    assert_eq!(
        claim(&store, &["default"]).await,
        Claim::Empty { skipped: 1 }
    );

    let mut dead: Vec<String> = redis.zrange(keys().dead(), 0, -1).expect("ZRANGE");
    dead.sort();
    assert_eq!(dead, ["no-fire-time", "nohash"]);
    assert_eq!(
        run_hash(&server, "ghost@0")
            .get("reason")
            .map(String::as_str),
        Some("undeclared")
    );
}

#[tokio::test]
async fn damaged_runs_go_to_the_dead_letters_and_fires_of_damaged_definitions_wait() {
    let server = RedisServer::start();
    let store = connect(&server).await.with_frozen_clock(1_000);
    declare(&store, "replica", jobs("[jobs.tick]\ncommand = \"true\"\n")).await;
    let mut redis = server.connection();
    let () = redis
        .hset_multiple(
            keys().run("forged"),
            &[("job", "tick"), ("state", "ready"), ("attempt", "many")],
        )
        .expect("HSET");
    let () = redis
        .rpush(keys().ready("default", Priority::Normal), "forged")
        .expect("RPUSH");

    // Its attempt count is not a number: the claim buries it instead of failing half-way,
    // which would leave the popped run nowhere.
    assert_eq!(
        claim(&store, &["default"]).await,
        Claim::Empty { skipped: 1 }
    );
    let dead: Vec<String> = redis.zrange(keys().dead(), 0, -1).expect("ZRANGE");
    assert_eq!(dead, ["forged"]);
    assert_eq!(
        run_hash(&server, "forged")
            .get("reason")
            .map(String::as_str),
        Some("corrupt")
    );

    // A damaged definition is caught where a cron run is created: the fire is not the one
    // damaged, so it stays due, neither skipped nor dead, for the leader to repair the job.
    let () = redis
        .hset(keys().defs(), "tick", r#"{"queue": 7}"#)
        .expect("HSET");
    let () = redis.zadd(keys().due(), "tick@500", 500).expect("ZADD");
    let promoted = store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(
        (promoted.ready, promoted.skipped(), promoted.deferred),
        (0, 0, 1)
    );
    let due: Option<f64> = redis.zscore(keys().due(), "tick@500").expect("ZSCORE");
    assert_eq!(due, Some(500.0), "still due at its time");
    let damaged: Vec<String> = redis
        .smembers(keys().damaged_definitions())
        .expect("SMEMBERS");
    assert_eq!(damaged, ["tick"]);
    let dead: Vec<String> = redis.zrange(keys().dead(), 0, -1).expect("ZRANGE");
    assert_eq!(dead, ["forged"]);
}

#[tokio::test]
async fn unplanning_a_job_removes_its_due_runs_and_moves_its_cursor() {
    let (server, store, token) = setup("[jobs.tick]\ncommand = \"true\"\n").await;
    plan(&store, &token, "tick", &[1_000, 2_000, 3_000]).await;
    store
        .clone()
        .with_frozen_clock(1_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");

    let stale = LeaderToken::clone(&token);
    assert_eq!(
        store
            .unplan_job(&token, "tick", Some(1_500))
            .await
            .expect("unplan"),
        UnplanOutcome::Unplanned(2)
    );
    let mut redis = server.connection();
    let due: Vec<String> = redis.zrange(keys().due(), 0, -1).expect("ZRANGE");
    let planned: bool = redis.hexists(keys().planned(), "tick").expect("HEXISTS");
    let ready: Vec<String> = redis
        .lrange(keys().ready_fires("default", Priority::Normal), 0, -1)
        .expect("LRANGE");
    assert!(due.is_empty() && !planned, "{due:?}");
    assert_eq!(
        ready,
        ["tick@1000"],
        "a run already promoted is left to run"
    );
    assert_eq!(
        store.cursors().await.expect("cursors").get("tick"),
        Some(&1_500)
    );

    assert!(store.unplan_job(&token, "tick", None).await.is_ok());
    assert_eq!(store.cursors().await.expect("cursors").get("tick"), None);

    let () = redis.del(keys().leader()).expect("DEL");
    assert!(matches!(
        store
            .unplan_job(&stale, "tick", Some(0))
            .await
            .expect("unplan"),
        UnplanOutcome::Fenced(_)
    ));
}

#[tokio::test]
async fn a_reading_of_redis_clock_maps_its_times_to_the_latest_local_instant_they_can_be() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let reading = store.clock().await.expect("TIME");
    assert!(reading.round_trip() < Duration::from_secs(1));
    let now_ms = store.now_ms().await.expect("TIME");
    // A time on Redis's clock maps to the reading's answer plus how far it lies ahead: Redis
    // read its clock before answering, so the mapping can only be late, never early.
    let ahead = reading.latest_instant_of(now_ms + 5_000);
    assert!(ahead >= reading.received() + Duration::from_millis(4_900));
    assert!(ahead <= reading.received() + Duration::from_millis(5_100));
    // A time already past maps to no later than the answer: start at once.
    assert_eq!(
        reading.latest_instant_of(now_ms - 60_000),
        reading.received()
    );

    let frozen = store
        .with_frozen_clock(1_000)
        .clock()
        .await
        .expect("frozen");
    assert_eq!(
        frozen.latest_instant_of(1_250),
        frozen.received() + Duration::from_millis(250)
    );
}

#[tokio::test]
async fn a_failed_redis_call_names_the_store_operation() {
    let mut server = RedisServer::start();
    let store = connect(&server).await;
    server.kill9();
    let error = store
        .claim_runs(
            &["r/0"],
            &["default".to_owned()],
            Duration::from_secs(30),
            10,
        )
        .await
        .expect_err("Redis is gone");
    assert!(
        matches!(&error, StoreError::Redis { operation, .. } if *operation == "claim_runs"),
        "{error:?}"
    );
    assert!(error.to_string().starts_with("claim_runs: "), "{error}");
}

/// The helpers every script is loaded with, to run on their own.
fn common_lua() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/lua/include/common.lua"
    ))
    .expect("common.lua")
}

#[test]
fn the_scripts_build_keys_and_cron_run_ids_as_the_rust_side_does() {
    let server = RedisServer::start();
    let common = common_lua();
    let script = format!(
        "{common}\nlocal prefix = ARGV[1]\nreturn {{key_run(prefix, 'r@1'), \
         key_running(prefix, 'j'), key_waiting(prefix, 'j'), key_undeclared(prefix, 'j'), \
         key_wake(prefix, 'q'), key_fingerprint(prefix, 'f'), key_replica_jobs(prefix, 'r1'), \
         key_wake_replica(prefix, 'r1'), cron_run_id('nightly', 1767225600000), \
         ready_list(prefix, 'cron', 'q', 'high'), ready_list(prefix, 'adhoc', 'q', 'low'), \
         key_notices(prefix), key_notice(prefix, 'r@1:1:dead'), key_notices_of(prefix, 'r1'), \
         key_dead_jobs(prefix), key_paused(prefix), key_due_runs(prefix), key_rewind(prefix), \
         key_latest_fires(prefix), key_targets(prefix, 'j'), key_replicas(prefix), \
         private_route('r1'), \
         replica_run_id('nightly@1767225600000', 'r1'), slot_name('j', 'j@1767225600000:r1'), \
         slot_name('j', 'j@1767225600000'), slot_name('j', 'k@1:r1')}}"
    );
    let keys = redcron::store::Keys::new("test");
    let built: Vec<String> = redis::Script::new(&script)
        .arg(keys.prefix())
        .invoke(&mut server.connection())
        .expect("the helpers run");
    assert_eq!(
        built,
        [
            keys.run("r@1"),
            keys.running("j"),
            keys.waiting("j"),
            keys.undeclared("j"),
            keys.wake("q"),
            keys.fingerprint("f"),
            keys.replica_jobs("r1"),
            keys.wake_replica("r1"),
            cron_run_id("nightly", 1_767_225_600_000),
            keys.ready_fires("q", redcron::schedule::Priority::High),
            keys.ready("q", redcron::schedule::Priority::Low),
            keys.notices(),
            keys.notice("r@1:1:dead"),
            keys.notices_of("r1"),
            keys.dead_jobs(),
            keys.paused(),
            keys.due_runs(),
            keys.rewind(),
            keys.latest_fires(),
            keys.targets("j"),
            keys.replicas(),
            redcron::store::keys::private_route("r1"),
            redcron::store::keys::replica_run_id("nightly@1767225600000", "r1"),
            redcron::store::keys::slot_group("j", "j@1767225600000:r1").into_owned(),
            redcron::store::keys::slot_group("j", "j@1767225600000").into_owned(),
            redcron::store::keys::slot_group("j", "k@1:r1").into_owned(),
        ]
    );
}

#[test]
fn the_scripts_read_every_field_of_a_published_definition_and_refuse_one_that_lacks_any() {
    let server = RedisServer::start();
    let common = common_lua();
    let script = redis::Script::new(&format!(
        "{common}\nlocal d = decode_definition(ARGV[1])\nif not d then return 'refused' end\n\
         return cjson.encode({{d.queue, d.priority, d.delivery, d.overlap, d.misfire, d.retries, \
         d.backoff, d.max_backoff, d.max_concurrency, d.starting_deadline}})"
    ));
    let decode = |definition: &str| -> String {
        script
            .arg(definition)
            .invoke(&mut server.connection())
            .expect("the script runs")
    };
    let declared = jobs(
        "[jobs.full]\nschedule = \"* * * * *\"\ncommand = \"true\"\nqueue = \"mail\"\n\
         priority = \"high\"\nretries = 2\nbackoff = \"5s\"\nmax_backoff = \"1m\"\n\
         overlap = \"allow\"\nmax_concurrency = 3\nstarting_deadline = \"30s\"\nmisfire = \"run-all\"\n\
         delivery = \"at-most-once\"\n\
         [jobs.plain]\ncommand = \"true\"\n",
    );
    let read: Vec<serde_json::Value> = declared
        .iter()
        .map(|job| {
            let text = canonical_json(job).expect("canonical JSON");
            serde_json::from_str(&decode(&text)).expect("the fields, as JSON")
        })
        .collect();
    assert_eq!(
        read[0],
        serde_json::json!([
            "mail",
            "high",
            "at-most-once",
            "allow",
            "run-all",
            2,
            5000,
            60000,
            3,
            30000
        ])
    );
    // No limit and no deadline read as false: none, not a made-up number.
    assert_eq!(
        read[1],
        serde_json::json!([
            "default",
            "normal",
            "at-least-once",
            "allow",
            "run-once",
            0,
            30000,
            3600000,
            false,
            false
        ])
    );

    // A definition without one of those fields is no definition: no default is made up.
    let mut partial: serde_json::Value =
        serde_json::from_str(&canonical_json(&declared[1]).expect("JSON")).expect("JSON");
    partial
        .as_object_mut()
        .expect("an object")
        .remove("backoff");
    assert_eq!(decode(&partial.to_string()), "refused");
    assert_eq!(decode("{not json"), "refused");
}

/// `--replicated-writes N` on a Redis with fewer replicas than N would refuse every write: the
/// replica says so when it starts, instead of only failing call after call.
#[tokio::test]
async fn replicated_writes_beyond_the_connected_replicas_are_warned_about() {
    let server = RedisServer::start();
    let asking = |replicas| StoreSettings {
        replicated_writes: Some(redcron::store::ReplicatedWrites {
            replicas,
            timeout: Duration::from_millis(100),
        }),
        ..StoreSettings::default()
    };
    let store = Store::connect(&server.url(), NAMESPACE, asking(1))
        .await
        .expect("connect");
    let warning = store.replication_warning().await.unwrap_or_default();
    assert!(
        warning.starts_with("--replicated-writes 1 but Redis has 0 connected replica(s)"),
        "{warning}"
    );
    let without = Store::connect(&server.url(), NAMESPACE, StoreSettings::default())
        .await
        .expect("connect");
    assert_eq!(without.replication_warning().await, None);
    // An ACL user refused INFO is told that the replicas could not be counted.
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info"])
        .query(&mut server.connection())
        .expect("ACL SETUSER");
    let limited = Store::connect(&server.url_as("noinfo", "pw"), NAMESPACE, asking(1))
        .await
        .expect("connect");
    let warning = limited.replication_warning().await.unwrap_or_default();
    assert!(
        warning.starts_with("--replicated-writes 1: cannot count the replicas"),
        "{warning}"
    );
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
