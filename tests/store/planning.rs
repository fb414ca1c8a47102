//! The leader's planned fires (`plan_fires.lua`, `unplan_job.lua`): written once, fenced by its
//! token, with cursors that only move forward.

use std::time::Duration;

use redcron::schedule::Priority;
use redcron::store::{
    Acquisition, JobPlan, LeaderToken, PlanOutcome, PlannedRun, SkipReason, SkippedFire,
    UnplanOutcome, cron_run_id,
};
use redis::Commands;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::store::{FORBID_TICK, LEASE, THRESHOLD, connect, events, leader, plan, setup};

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
