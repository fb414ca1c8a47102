//! The engine's components, one tick at a time (and the promoter's loop), against real Redis.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redcron::engine::elector::{Elector, ElectorConfig, ElectorTick};
use redcron::engine::planner::{Planner, PlannerConfig, PlannerTick};
use redcron::engine::promoter::{Promoter, PromoterConfig};
use redcron::engine::reaper::{Reaped, Reaper, ReaperConfig};
use redcron::engine::{Leadership, Shutdown};
use redcron::metrics::Metrics;
use redcron::schedule::Priority;
use redcron::schedule::{Jobs, parse_file, shared_jobs};
use redcron::store::{Acquisition, Claim, ManualClock, Store, cron_run_id};
use redis::Commands;
use tokio::sync::watch;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::store::connect;
use crate::util::wait_until_async;

const TTL: Duration = Duration::from_secs(5);

fn jobs(toml: &str) -> Jobs {
    shared_jobs(parse_file(Path::new("test.toml"), toml).expect("valid test jobs"))
}

fn elector(store: &Store, leadership: &Leadership, replica: &str) -> Elector {
    Elector::new(
        store.clone(),
        leadership.clone(),
        ElectorConfig {
            replica_id: replica.to_owned(),
            lease_ttl: TTL,
        },
    )
}

/// A Redis, and a store whose replica "a" holds the leader lease.
async fn leading() -> (RedisServer, Store, Leadership) {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let leadership = Leadership::new();
    elector(&store, &leadership, "a")
        .tick()
        .await
        .expect("elect");
    (server, store, leadership)
}

/// The fires of `job` planned and not promoted yet, ms, in order.
fn planned_fires(redis: &mut redis::Connection, job: &str) -> Vec<i64> {
    let list: Option<String> = redis.hget(keys().planned(), job).expect("HGET");
    let mut fires: Vec<i64> = list
        .unwrap_or_default()
        .split(',')
        .filter_map(|fire| fire.parse().ok())
        .collect();
    fires.sort_unstable();
    fires
}

#[tokio::test]
async fn one_elector_leads_and_steps_down_when_its_lease_is_taken() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let (a, b) = (Leadership::new(), Leadership::new());
    let (mut elector_a, mut elector_b) = (elector(&store, &a, "a"), elector(&store, &b, "b"));

    let ElectorTick::Acquired(token) = elector_a.tick().await.expect("tick") else {
        panic!("the lease was free");
    };
    assert_eq!(a.token(), Some(token.clone()));
    assert_eq!(
        elector_b.tick().await.expect("tick"),
        ElectorTick::Follower("a:1".to_owned())
    );
    assert_eq!(b.token(), None);
    assert_eq!(elector_a.tick().await.expect("tick"), ElectorTick::Renewed);

    // The lease ran out while "a" was frozen and "b" took it.
    let () = server.connection().del(keys().leader()).expect("DEL");
    assert!(matches!(
        elector_b.tick().await.expect("tick"),
        ElectorTick::Acquired(_)
    ));
    assert_eq!(
        elector_a.tick().await.expect("tick"),
        ElectorTick::SteppedDown
    );
    assert_eq!(a.token(), None);
    assert_eq!(b.token().and_then(|token| token.epoch()), Some(2));
}

/// Each replica counts in the metrics it was given with its store: two replicas in one process
/// count apart, and a failed Redis call is counted by the store that made it.
#[tokio::test]
async fn components_and_the_store_count_in_the_metrics_they_were_given() {
    let mut server = RedisServer::start();
    let store = connect(&server).await;
    let (metrics_a, metrics_b) = (Arc::new(Metrics::new("a")), Arc::new(Metrics::new("b")));
    let (store_a, store_b) = (
        store.clone().with_metrics(metrics_a.clone()),
        store.with_metrics(metrics_b.clone()),
    );
    let (a, b) = (Leadership::new(), Leadership::new());
    elector(&store_a, &a, "a").tick().await.expect("tick");
    elector(&store_b, &b, "b").tick().await.expect("tick");
    assert_eq!((metrics_a.leader.get(), metrics_b.leader.get()), (1, 0));
    assert_eq!(metrics_a.leader_changes_total.get(), 1);
    assert_eq!(metrics_b.leader_changes_total.get(), 0);

    server.kill9();
    assert!(store_b.now_ms().await.is_err(), "redis is gone");
    assert!(metrics_b.redis_errors_total.get() >= 1);
    assert_eq!(metrics_a.redis_errors_total.get(), 0);
}

#[tokio::test]
async fn elector_releases_the_lease_on_shutdown() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let leadership = Leadership::new();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(elector(&store, &leadership, "a").run(shutdown.clone()));
    assert!(
        wait_until_async(Duration::from_secs(5), async || leadership
            .token()
            .is_some())
        .await
    );
    shutdown.cancel();
    task.await.expect("elector task");
    assert_eq!(leadership.token(), None);
    let holder: Option<String> = server.connection().get(keys().leader()).expect("GET");
    assert_eq!(holder, None, "the lease is free for a successor at once");
}

#[tokio::test]
async fn planner_plans_only_while_leading_and_stops_when_fenced() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let leadership = Leadership::new();
    let (jobs_tx, jobs_rx) = watch::channel(jobs(
        "[jobs.tick]\nschedule = \"*/10 * * * * *\"\ncommand = \"true\"\n\
         [jobs.daily]\nschedule = \"@daily\"\ncommand = \"true\"\n\
         [jobs.manual]\ncommand = \"true\"\n",
    ));
    let mut planner = Planner::new(
        store.clone(),
        leadership.clone(),
        jobs_rx,
        PlannerConfig::default(),
    );
    assert_eq!(planner.tick().await.expect("tick"), PlannerTick::Follower);

    elector(&store, &leadership, "a")
        .tick()
        .await
        .expect("elect");
    let PlannerTick::Planned { runs, skipped } = planner.tick().await.expect("tick") else {
        panic!("the leader plans");
    };
    assert_eq!(
        (runs, skipped),
        (6, 0),
        "six 10-second fires within the 60 s horizon"
    );
    assert_eq!(
        planner.tick().await.expect("tick"),
        PlannerTick::Planned {
            runs: 0,
            skipped: 0
        }
    );
    let mut redis = server.connection();
    let defs: Vec<String> = redis.hkeys(keys().defs()).expect("HKEYS");
    assert_eq!(defs.len(), 3, "every declared job is published: {defs:?}");

    // Another replica takes over while this one still believes it leads.
    let () = redis.del(keys().leader()).expect("DEL");
    let successor = store.acquire_leader("b", TTL).await.expect("acquire");
    assert!(matches!(successor, Acquisition::Acquired(_)));
    // A reload on the old leader gives it fires to plan: the write is refused.
    jobs_tx.send_replace(jobs(
        "[jobs.tick]\nschedule = \"*/10 * * * * *\"\ncommand = \"true\"\n\
         [jobs.other]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
    ));
    assert_eq!(planner.tick().await.expect("tick"), PlannerTick::Fenced);
    assert_eq!(leadership.token(), None);
}

#[tokio::test]
async fn a_job_left_for_a_later_tick_is_planned_from_when_it_was_first_seen() {
    let (server, store, leadership) = leading().await;
    let clock = ManualClock::at(store.now_ms().await.expect("time"));
    let store = store.with_clock(&clock);
    let (_jobs_tx, jobs_rx) = watch::channel(jobs(
        "[jobs.first]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [jobs.second]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
    ));
    // Room for one job's minute of fires per tick.
    let config = PlannerConfig {
        max_runs_per_tick: 60,
        ..PlannerConfig::default()
    };
    let mut planner = Planner::new(store.clone(), leadership, jobs_rx, config);
    planner.tick().await.expect("first tick");
    let mut redis = server.connection();
    let earliest = |redis: &mut redis::Connection, job: &str| -> Option<i64> {
        planned_fires(redis, job).first().copied()
    };
    let first = earliest(&mut redis, "first").expect("the first job is planned");
    assert_eq!(
        earliest(&mut redis, "second"),
        None,
        "over the tick's budget"
    );

    clock.advance(Duration::from_millis(1_100));
    planner.tick().await.expect("second tick");
    assert_eq!(
        earliest(&mut redis, "second"),
        Some(first),
        "planned from the tick that first saw it, not from the tick that had room"
    );
}

#[tokio::test]
async fn idle_ticks_plan_each_fire_as_the_horizon_reaches_it() {
    let (server, store, leadership) = leading().await;
    let clock = ManualClock::at(store.now_ms().await.expect("time"));
    let store = store.with_clock(&clock);
    let (_jobs_tx, jobs_rx) = watch::channel(jobs(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [jobs.rare]\nschedule = \"0 0 1 1 *\"\ncommand = \"true\"\n",
    ));
    let config = PlannerConfig {
        horizon: Duration::from_secs(2),
        ..PlannerConfig::default()
    };
    let mut planner = Planner::new(store.clone(), leadership, jobs_rx, config);
    let mut redis = server.connection();
    let planned = |redis: &mut redis::Connection| planned_fires(redis, "tick");
    planner.tick().await.expect("first tick");
    let first = planned(&mut redis);
    assert!(!first.is_empty(), "the horizon holds a fire");
    let idle = planner.tick().await.expect("idle tick");
    assert!(
        matches!(
            idle,
            PlannerTick::Planned {
                runs: 0..=1,
                skipped: 0
            }
        ),
        "at most the fire of a second that began meanwhile: {idle:?}"
    );

    clock.advance(Duration::from_millis(2_100));
    planner.tick().await.expect("later tick");
    let later = planned(&mut redis);
    let (last_before, last_now) = (first.last().copied(), later.last().copied());
    assert!(
        last_now >= last_before.map(|fire_ms| fire_ms + 2_000),
        "every fire entering the horizon is planned: {first:?} then {later:?}"
    );
    for pair in later.windows(2) {
        assert_eq!(pair[1] - pair[0], 1_000, "no fire left out: {later:?}");
    }
    assert!(
        planned_fires(&mut redis, "rare").is_empty(),
        "a fire beyond the horizon is not planned"
    );
}

/// What a failover to a replica that had not received the last planner writes looks like to the
/// leader, whose lease survived it: the due set and the cursor as they were before those writes.
/// The leader notices at its next plan and plans the lost fires again.
#[tokio::test]
async fn fires_redis_lost_while_the_lease_held_are_planned_again() {
    let (server, store, leadership) = leading().await;
    let clock = ManualClock::at(store.now_ms().await.expect("time"));
    let store = store.with_clock(&clock);
    let (_jobs_tx, jobs_rx) = watch::channel(jobs(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
    ));
    let config = PlannerConfig {
        horizon: Duration::from_secs(2),
        ..PlannerConfig::default()
    };
    let mut planner = Planner::new(store.clone(), leadership, jobs_rx, config);
    let mut redis = server.connection();
    planner.tick().await.expect("first tick");
    let kept_cursor: i64 = redis.hget(keys().cursor(), "tick").expect("HGET cursor");
    let kept = planned_fires(&mut redis, "tick");

    clock.advance(Duration::from_millis(3_000));
    planner.tick().await.expect("a tick whose writes are lost");
    let written = planned_fires(&mut redis, "tick");
    assert!(written.len() > kept.len(), "{kept:?} then {written:?}");
    // Redis loses the second tick's writes.
    let lost: Vec<i64> = written
        .iter()
        .copied()
        .filter(|fire| !kept.contains(fire))
        .collect();
    for fire in &lost {
        let () = redis
            .zrem(keys().due(), cron_run_id("tick", *fire))
            .expect("ZREM");
    }
    let kept_list = kept
        .iter()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let () = redis
        .hset(keys().planned(), "tick", kept_list)
        .expect("HSET planned");
    let () = redis
        .hset(keys().cursor(), "tick", kept_cursor)
        .expect("HSET cursor");

    // Far enough that the next fire after the cursor the leader wrote enters the horizon: the
    // loss shows at a plan call.
    clock.advance(Duration::from_millis(1_500));
    planner.tick().await.expect("the tick that finds the loss");
    planner.tick().await.expect("the tick that plans again");
    let replanned = planned_fires(&mut redis, "tick");
    for fire in &lost {
        assert!(
            replanned.contains(fire),
            "the lost fire {fire} is planned again: {replanned:?}"
        );
    }
}

#[tokio::test]
async fn promoter_wakes_for_a_run_added_earlier_than_it_planned_to_look() {
    let (server, store, leadership) = leading().await;
    let config = PromoterConfig {
        // Long enough that only a wake-up or the due time can explain a quick promotion.
        max_sleep: Duration::from_secs(30),
        ..PromoterConfig::default()
    };
    let lead_ms = i64::try_from(config.lead.as_millis()).expect("lead");
    let shutdown = Shutdown::new();
    let (_jobs, declared) = watch::channel(jobs(""));
    let task = tokio::spawn(Promoter::new(store.clone(), config, declared).run(shutdown.clone()));

    // Wait until the promoter has subscribed, then plan a fire half a second ahead.
    let mut redis = server.connection();
    assert!(
        wait_until_async(Duration::from_secs(5), async || {
            let subscribers: Vec<(String, u64)> = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(keys().wake_promoter())
                .query(&mut server.connection())
                .expect("PUBSUB NUMSUB");
            subscribers.first().is_some_and(|(_, count)| *count == 1)
        })
        .await
    );
    let (_jobs_tx, jobs_rx) = watch::channel(jobs("[jobs.once]\ncommand = \"true\"\n"));
    let mut planner = Planner::new(
        store.clone(),
        leadership.clone(),
        jobs_rx,
        PlannerConfig::default(),
    );
    planner.tick().await.expect("publish definitions");
    let due_ms = store.now_ms().await.expect("time") + 500;
    let token = leadership.token().expect("leader");
    let plan = redcron::store::JobPlan {
        job: "once".to_owned(),
        from_cursor_ms: 0,
        cursor_ms: due_ms,
        runs: vec![redcron::store::PlannedRun {
            run_id: cron_run_id("once", due_ms),
            fire_ms: due_ms,
            due_ms,
        }],
        skipped: Vec::new(),
    };
    store.plan_fires(&token, &plan).await.expect("plan");

    assert!(
        wait_until_async(Duration::from_secs(5), async || {
            redis
                .llen::<_, usize>(keys().ready_fires("default", Priority::Normal))
                .unwrap_or(0)
                == 1
        })
        .await,
        "the run was not promoted"
    );
    let ready_ms: i64 = redis
        .hget(keys().run(&cron_run_id("once", due_ms)), "ready_ms")
        .expect("HGET");
    assert!(
        ready_ms >= due_ms - lead_ms,
        "promoted {} ms early, more than the lead",
        due_ms - ready_ms
    );
    shutdown.cancel();
    task.await.expect("promoter task");
}

#[tokio::test]
async fn reaper_returns_runs_whose_lease_expired() {
    let (_server, store, leadership) = leading().await;
    let (_jobs_tx, jobs_rx) = watch::channel(jobs(
        "[jobs.again]\nschedule = \"* * * * * *\"\ncommand = \"sleep 9\"\n\
         [jobs.once]\nschedule = \"* * * * * *\"\ncommand = \"sleep 9\"\ndelivery = \"at-most-once\"\n",
    ));
    let declared = jobs_rx.borrow().to_vec();
    store
        .publish_replica_jobs("dead-replica", &declared, Duration::from_secs(60))
        .await
        .expect("declare");
    let mut planner = Planner::new(store.clone(), leadership, jobs_rx, PlannerConfig::default());
    planner.tick().await.expect("plan");
    let now = store.now_ms().await.expect("time");
    let store = store.with_frozen_clock(now + 1_500);
    store
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    let queues = ["default".to_owned()];
    for _ in 0..2 {
        let claim = store
            .claim_run("dead-replica/0", &queues, Duration::from_secs(1), 10)
            .await
            .expect("claim");
        assert!(matches!(claim, Claim::Run { .. }), "{claim:?}");
    }
    let mut reaper = Reaper::new(store.clone(), ReaperConfig::default());
    assert_eq!(
        reaper.tick().await.expect("tick"),
        Reaped::default(),
        "leases still live"
    );
    let mut later = Reaper::new(
        store.with_frozen_clock(now + 3_000),
        ReaperConfig::default(),
    );
    assert_eq!(
        later.tick().await.expect("tick"),
        Reaped {
            retried: 1,
            dead: 1,
            rerouted: 0,
            requeued: 0,
        }
    );
    assert_eq!(
        later.tick().await.expect("tick"),
        Reaped::default(),
        "each run is reaped once"
    );
}

#[tokio::test]
async fn a_replica_runs_registered_rust_handlers_and_reports_its_heartbeat() {
    use redcron::handler::{Completed, RunContext};
    use redcron::replica::{Replica, ReplicaConfig};
    use std::sync::Mutex;

    let server = RedisServer::start();
    let store = connect(&server).await;
    let seen: Arc<Mutex<Vec<(String, u32)>>> = Arc::default();
    let recorder = seen.clone();
    // The command would fail: only the registered handler may run the job.
    let declared = parse_file(
        Path::new("test.toml"),
        "[jobs.resize]\nschedule = \"* * * * * *\"\ncommand = \"false\"\n",
    )
    .expect("valid test jobs");
    let replica = Replica::builder(store)
        .jobs(declared)
        .handler("resize", move |run: RunContext| {
            let recorder = recorder.clone();
            async move {
                recorder
                    .lock()
                    .expect("not poisoned")
                    .push((run.run_id.clone(), run.attempt));
                Ok(Completed::default())
            }
        })
        .config(ReplicaConfig {
            replica_id: "library".to_owned(),
            ..ReplicaConfig::default()
        })
        .build();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(replica.run(shutdown.clone()));
    assert!(
        wait_until_async(Duration::from_secs(10), async || seen
            .lock()
            .expect("not poisoned")
            .len()
            >= 2)
        .await,
        "the handler did not run"
    );

    let mut redis = server.connection();
    let heartbeat: Option<i64> = redis.zscore(keys().replicas(), "library").expect("ZSCORE");
    assert!(heartbeat.is_some(), "no heartbeat");
    let max_workers: Option<String> = redis
        .hget(keys().replica("library"), "max_workers")
        .expect("HGET");
    assert_eq!(max_workers.as_deref(), Some("4"));
    for (run_id, attempt) in seen.lock().expect("not poisoned").iter() {
        assert!(run_id.starts_with("resize@"), "{run_id}");
        assert_eq!(*attempt, 1);
        let state: Option<String> = redis.hget(keys().run(run_id), "state").expect("HGET");
        assert!(
            matches!(state.as_deref(), Some("succeeded" | "active")),
            "{state:?}"
        );
    }

    shutdown.cancel();
    task.await
        .expect("replica task")
        .expect("the replica stops cleanly");
    let leader: Option<String> = redis.get(keys().leader()).expect("GET");
    assert_eq!(leader, None, "the lease is released on shutdown");
}

/// A Rust handler that never looks at `stop` cannot outlive its job's timeout, nor hold a
/// replica's shutdown, by more than its stop grace: its future is dropped.
#[tokio::test]
async fn a_rust_handler_that_ignores_stop_is_dropped_after_its_stop_grace() {
    use redcron::client::Client;
    use redcron::handler::{BoxFuture, Handler, Outcome, RunContext};
    use redcron::replica::{Replica, ReplicaConfig};

    struct Stubborn;
    impl Handler for Stubborn {
        fn call(&self, _run: RunContext) -> BoxFuture<Outcome> {
            Box::pin(async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                unreachable!("dropped long before")
            })
        }
        fn stop_grace(&self) -> Duration {
            Duration::from_millis(300)
        }
    }

    let server = RedisServer::start();
    let store = connect(&server).await;
    let client = Client::from_store(store.clone());
    let declared = parse_file(
        Path::new("test.toml"),
        "[jobs.stubborn]\ncommand = \"true\"\ntimeout = \"1s\"\nretries = 0\n",
    )
    .expect("valid test jobs");
    let replica = Replica::builder(store)
        .jobs(declared)
        .handler("stubborn", Stubborn)
        .config(ReplicaConfig {
            replica_id: "library".to_owned(),
            shutdown_grace: Duration::from_millis(500),
            ..ReplicaConfig::default()
        })
        .build();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(replica.run(shutdown.clone()));
    let mut redis = server.connection();
    let state = |redis: &mut redis::Connection, run_id: &str| -> (String, String) {
        let fields: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(keys().run(run_id))
            .arg(&["state", "error"])
            .query(redis)
            .expect("HMGET");
        (
            fields[0].clone().unwrap_or_default(),
            fields[1].clone().unwrap_or_default(),
        )
    };

    // Until the replica has declared the job, it is unknown.
    let mut submitted = None;
    wait_until_async(Duration::from_secs(10), async || {
        submitted = Some(client.enqueue("stubborn").send().await);
        submitted.as_ref().is_some_and(Result::is_ok)
    })
    .await;
    let timed_out = submitted
        .expect("an enqueue was sent")
        .expect("the job is declared")
        .run_id;
    let mut last = (String::new(), String::new());
    assert!(
        wait_until_async(Duration::from_secs(10), async || {
            last = state(&mut redis, &timed_out);
            last.0 == "dead"
        })
        .await,
        "the run never ended: {last:?}"
    );
    assert_eq!(
        last.1,
        "timed out after 1s; the handler did not return within 300ms of being told to stop: \
         dropped"
    );

    // Shutdown does not wait for it either.
    let interrupted = client
        .enqueue("stubborn")
        .send()
        .await
        .expect("enqueue")
        .run_id;
    assert!(
        wait_until_async(Duration::from_secs(10), async || state(
            &mut redis,
            &interrupted
        )
        .0 == "active")
        .await,
        "the second run never started"
    );
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the replica stops although its handler never returns")
        .expect("replica task")
        .expect("the replica stops cleanly");
    let (_, error) = state(&mut redis, &interrupted);
    assert!(
        error.contains("interrupted by shutdown; the handler did not return"),
        "{error}"
    );
}

#[tokio::test]
async fn fires_claimed_ahead_start_at_their_fire_time_never_before() {
    use redcron::handler::{Completed, RunContext};
    use redcron::replica::{Replica, ReplicaConfig};
    use std::sync::Mutex;

    let server = RedisServer::start();
    let store = connect(&server).await;
    let starts: Arc<Mutex<Vec<(String, i64, i64)>>> = Arc::default();
    let recorder = starts.clone();
    let declared = parse_file(
        Path::new("test.toml"),
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
    )
    .expect("valid test jobs");
    let replica = Replica::builder(store)
        .jobs(declared)
        .handler("tick", move |run: RunContext| {
            // Redis runs on this machine: its clock is this clock.
            let started_ms = chrono::Utc::now().timestamp_millis();
            let fire_ms = run.fire_time.map_or(0, |fire| fire.timestamp_millis());
            recorder
                .lock()
                .expect("not poisoned")
                .push((run.run_id.clone(), fire_ms, started_ms));
            async { Ok(Completed::default()) }
        })
        .config(ReplicaConfig {
            replica_id: "ahead".to_owned(),
            ..ReplicaConfig::default()
        })
        .build();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(replica.run(shutdown.clone()));
    assert!(
        wait_until_async(Duration::from_secs(10), async || starts
            .lock()
            .expect("not poisoned")
            .len()
            >= 3)
        .await,
        "the job did not fire"
    );
    shutdown.cancel();
    task.await
        .expect("replica task")
        .expect("the replica stops cleanly");

    let mut redis = server.connection();
    let mut claimed_ahead = 0;
    for (run_id, fire_ms, started_ms) in starts.lock().expect("not poisoned").iter() {
        assert!(
            started_ms >= fire_ms,
            "{run_id} started {} ms early",
            fire_ms - started_ms
        );
        let ready_ms: i64 = redis.hget(keys().run(run_id), "ready_ms").expect("HGET");
        if ready_ms < *fire_ms {
            claimed_ahead += 1;
        }
    }
    assert!(
        claimed_ahead > 0,
        "no fire was made ready ahead of its time"
    );
}
