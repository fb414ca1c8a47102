//! An outage longer than the planner's horizon: `run-once` still runs one missed fire, the latest.

use std::time::Duration;

use redcron::schedule::Priority;
use redcron::store::{JobPlan, PlanOutcome, PlannedRun, SkipReason, SkippedFire, cron_run_id};
use redis::Commands;

use crate::util::scenario::{Scenario, fire_ms, skipped_as_documented, sleep_until};
use crate::util::store::{THRESHOLD, events, plan, setup};
use crate::util::{keys, wait_until};

/// The planning horizon the test's replicas use (`--plan-ahead`): the outage outlasts it.
const HORIZON_MS: i64 = 10_000;

#[test]
fn run_once_runs_one_missed_fire_after_an_outage_longer_than_the_horizon() {
    let scenario = Scenario::new();
    // Default settings: overlap = "forbid", misfire = "run-once".
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"{}\"\n",
        scenario.record("")
    ));
    let threshold_ms = 2_000;
    let threshold = ["--misfire-threshold", "2s", "--plan-ahead", "10s"];
    let mut first = scenario.replica("r1", &threshold);
    assert!(wait_until(Duration::from_secs(10), || !scenario
        .ledger()
        .is_empty()));
    // Stop half-way between two fires, so that no fire sits on a boundary. Every fire up to
    // about `stop` + the horizon is planned by then.
    let now = scenario.redis_now_ms();
    let stop = now - now % 1_000 + 1_500;
    sleep_until(&scenario, stop);
    assert_eq!(first.terminate(Duration::from_secs(10)), Some(0));
    // Back when every fire planned before the stop is missed, and the fires after them too.
    let restart = stop + HORIZON_MS + threshold_ms + 8_000;
    sleep_until(&scenario, restart);
    let _second = scenario.replica("r2", &threshold);
    let until = restart + 3_000;
    assert!(
        wait_until(Duration::from_secs(30), || scenario
            .ledger()
            .iter()
            .any(|(run, _, _)| fire_ms(run) >= until)),
        "no fire after the outage ran: {:?}",
        scenario.ledger()
    );

    let mut ran: Vec<(i64, i64)> = scenario
        .ledger()
        .iter()
        .map(|(run, started, _)| (fire_ms(run), *started))
        .filter(|(fire, _)| (stop..=until).contains(fire))
        .collect();
    ran.sort_unstable();
    let fires: Vec<i64> = ran.iter().map(|(fire, _)| *fire).collect();
    let (earliest, started) = *ran.first().expect("a fire after the stop ran");
    // The latest missed fire runs, once: it was missed, so it starts more than the threshold
    // late. No earlier fire runs, and every fire after it runs late or on time.
    assert!(
        started - earliest > threshold_ms,
        "the first fire to run after the outage was not a missed one: {ran:?}"
    );
    // Each later fire runs once, or is skipped as the docs say a fire on a loaded machine can
    // be (docs/semantics.md): due while the late run still ran (its overlap), or made ready in
    // time and found missed when it would start past the threshold.
    assert!(
        fires.windows(2).all(|pair| pair[0] < pair[1]),
        "a fire ran twice: {ran:?}"
    );
    for fire in (earliest..=until).step_by(1_000) {
        if fires.contains(&fire) {
            continue;
        }
        let run = cron_run_id("tick", fire);
        assert!(
            skipped_as_documented(&scenario, "tick", fire),
            "after the latest missed fire, {run} neither ran nor was skipped as the docs say one \
             can be: {:?}; ran {ran:?} (stopped at {stop}, back at {restart})",
            scenario.run_state(&run)
        );
    }
}

#[tokio::test]
async fn a_missed_fire_waits_for_the_plan_of_the_fires_missed_after_it() {
    let (server, store, token) = setup(
        "[jobs.once]\ncommand = \"true\"\n\
         [jobs.all]\ncommand = \"true\"\nmisfire = \"run-all\"\n\
         [jobs.late]\ncommand = \"true\"\n",
    )
    .await;
    // Planned before an outage: every fire up to 60,000. Back at 200,000, the latest missed
    // fire is 140,000, which no one has planned yet.
    let ran = |server: &crate::util::redis_server::RedisServer| -> Vec<String> {
        let mut ready: Vec<String> = server
            .connection()
            .lrange(keys().ready_fires("default", Priority::Normal), 0, -1)
            .expect("LRANGE");
        ready.sort();
        ready
    };
    plan(&store, &token, "once", &[30_000, 60_000]).await;
    plan(&store, &token, "all", &[60_000]).await;
    plan(&store, &token, "late", &[150_000]).await;
    let planned_through = |through: i64| {
        let () = server
            .connection()
            .set(keys().planned_through(), through)
            .expect("SET");
    };
    planned_through(60_000);
    let at = store.clone().with_frozen_clock(200_000);
    at.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    // run-once's latest planned fire waits; nothing else does.
    assert_eq!(ran(&server), ["all@60000", "late@150000"]);
    let due: Vec<String> = server
        .connection()
        .zrange(keys().due(), 0, -1)
        .expect("ZRANGE");
    assert_eq!(due, ["once@60000"]);
    let planned: Option<String> = server
        .connection()
        .hget(keys().planned(), "once")
        .expect("HGET");
    assert_eq!(planned.as_deref(), Some("60000"), "still planned");

    // The leader plans the fires missed after it, running the latest, and records how far.
    let caught_up = JobPlan {
        job: "once".to_owned(),
        from_cursor_ms: 60_000,
        cursor_ms: 140_000,
        runs: vec![PlannedRun {
            run_id: cron_run_id("once", 140_000),
            fire_ms: 140_000,
            due_ms: 140_000,
        }],
        skipped: vec![SkippedFire {
            run_id: cron_run_id("once", 90_000),
            reason: SkipReason::Missed,
        }],
    };
    assert_eq!(
        store
            .plan_jobs(&token, &[caught_up], Some(260_000))
            .await
            .expect("plan"),
        PlanOutcome::Planned(1)
    );
    let through: i64 = server
        .connection()
        .get(keys().planned_through())
        .expect("GET");
    assert_eq!(through, 260_000);
    let at = store.clone().with_frozen_clock(201_000);
    at.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(ran(&server), ["all@60000", "late@150000", "once@140000"]);
    let skipped: Vec<String> = events(&server)
        .into_iter()
        .filter(|(run, state, reason)| {
            run.starts_with("once@") && state == "skipped" && reason == "missed"
        })
        .map(|(run, _, _)| run)
        .collect();
    assert_eq!(skipped, ["once@30000", "once@90000", "once@60000"]);
}

#[tokio::test]
async fn a_fire_claimed_before_a_long_outage_waits_for_the_plan_too() {
    let (server, store, _token) = setup("[jobs.hourly]\ncommand = \"true\"\n").await;
    // Claimed ahead just before the outage, never started, handed back when Redis came back:
    // due again at 199,000, its fire 60,000 long missed.
    let mut redis = server.connection();
    let run = cron_run_id("hourly", 60_000);
    let () = redis
        .hset_multiple(
            keys().run(&run),
            &[
                ("job", "hourly"),
                ("kind", "cron"),
                ("fire_ms", "60000"),
                ("attempt", "0"),
                ("state", "retrying"),
                ("reason", "not-started"),
                ("queue", "default"),
                ("priority", "normal"),
            ],
        )
        .expect("HSET");
    let () = redis.zadd(keys().due(), &run, 199_000).expect("ZADD");
    let () = redis
        .hset(keys().latest_fires(), "hourly", 60_000)
        .expect("HSET");
    let () = redis.set(keys().planned_through(), 60_000).expect("SET");
    let ready = |redis: &mut redis::Connection| -> Vec<String> {
        redis
            .lrange(keys().ready_fires("default", Priority::Normal), 0, -1)
            .expect("LRANGE")
    };

    store
        .clone()
        .with_frozen_clock(200_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert!(ready(&mut redis).is_empty(), "a later missed fire may come");
    let due: Option<i64> = redis.zscore(keys().due(), &run).expect("ZSCORE");
    assert_eq!(due, Some(199_000), "left due as it was");

    // The leader planned up to the threshold and found no later fire: this one is the latest.
    let () = redis.set(keys().planned_through(), 260_000).expect("SET");
    store
        .clone()
        .with_frozen_clock(201_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(ready(&mut redis), [run]);
}
