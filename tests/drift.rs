//! The leader plans every job a live replica declares, one definition of each (the one most live
//! replicas declare, ties by content hash), keeps a job whose declarers vanished, drops one a
//! declarer withdrew, and repairs published definitions that are damaged or foreign.

use std::sync::Arc;

use std::time::Duration;

use redcron::engine::Leadership;
use redcron::engine::elector::{Elector, ElectorConfig};
use redcron::engine::heartbeat::{Heartbeat, HeartbeatConfig, HeartbeatError};
use redcron::engine::planner::{DeclarationsConfig, Planner, PlannerConfig};
use redcron::engine::worker::WorkerLoad;
use redcron::schedule::{Job, shared_jobs};
use redcron::store::{ManualClock, Store, cron_run_id};
use redis::Commands;
use tokio::sync::watch;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{Scenario, fire_ms};
use crate::util::store::{connect, jobs};
use crate::util::wait_until;

const EVERY_2S: &str = "[jobs.x]\nschedule = \"*/2 * * * * *\"\ncommand = \"true\"\n";
const EVERY_3S: &str = "[jobs.x]\nschedule = \"*/3 * * * * *\"\ncommand = \"true\"\n";
const Z: &str = "[jobs.z]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n";

/// A Redis, a store on a clock that moves only when the test moves it, and a planner for
/// replica "a" that leads and declares `own`, keeping jobs whose declarers vanished for `grace`.
async fn leader(own: &str, grace: Duration) -> (RedisServer, Store, Planner, ManualClock) {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let clock = ManualClock::at(store.now_ms().await.expect("time"));
    let store = store.with_clock(&clock);
    let planner = planner_of(&store, "a", own, grace).await;
    (server, store, planner, clock)
}

/// A planner for `replica`, which takes the leader lease and declares `own`.
async fn planner_of(store: &Store, replica: &str, own: &str, grace: Duration) -> Planner {
    let leadership = Leadership::new();
    Elector::new(
        store.clone(),
        leadership.clone(),
        ElectorConfig {
            replica_id: replica.to_owned(),
            lease_ttl: Duration::from_secs(30),
        },
    )
    .tick()
    .await
    .expect("elect");
    let (_jobs, own) = watch::channel(shared_jobs(jobs(own)));
    Planner::new(
        store.clone(),
        leadership,
        own,
        PlannerConfig {
            declarations: DeclarationsConfig {
                replica_id: replica.to_owned(),
                live_for: Duration::from_secs(6),
                undeclared_grace: grace,
            },
            ..PlannerConfig::default()
        },
    )
}

/// Replica `replica` beats and declares `toml`'s jobs, as its heartbeat does.
async fn declare(store: &Store, replica: &str, toml: &str) {
    let declared: Vec<Arc<Job>> = jobs(toml).into_iter().map(Arc::new).collect();
    let ttl = Duration::from_secs(60);
    store
        .publish_replica_jobs(replica, &declared, ttl)
        .await
        .expect("declare");
    store
        .heartbeat(replica, &[("host", "test".to_owned())], ttl)
        .await
        .expect("beat");
}

fn published_hash(server: &RedisServer, job: &str) -> Option<String> {
    server
        .connection()
        .hget(keys().def_hashes(), job)
        .expect("HGET")
}

fn hash_of(toml: &str) -> String {
    jobs(toml).remove(0).content_hash()
}

/// The fires of `job` planned and not promoted yet, seconds.
fn planned_seconds(server: &RedisServer, job: &str) -> Vec<i64> {
    let list: Option<String> = server
        .connection()
        .hget(keys().planned(), job)
        .expect("HGET");
    list.unwrap_or_default()
        .split(',')
        .filter_map(|fire| fire.parse::<i64>().ok())
        .map(|ms| ms / 1000)
        .collect()
}

#[tokio::test]
async fn the_leader_plans_the_jobs_only_a_follower_declares() {
    let (server, store, mut planner, _clock) = leader(EVERY_2S, Duration::from_secs(300)).await;
    declare(&store, "b", &format!("{EVERY_2S}{Z}")).await;
    planner.tick().await.expect("tick");
    assert!(
        planned_seconds(&server, "z").len() >= 59,
        "every second of the horizon: {:?}",
        planned_seconds(&server, "z")
    );
    assert_eq!(published_hash(&server, "z"), Some(hash_of(Z)));
    assert_eq!(published_hash(&server, "x"), Some(hash_of(EVERY_2S)));
}

#[tokio::test]
async fn with_drift_the_definition_most_live_replicas_declare_is_planned_ties_by_hash() {
    let (server, store, mut planner, _clock) = leader(EVERY_2S, Duration::from_secs(300)).await;
    declare(&store, "b", EVERY_3S).await;
    declare(&store, "c", EVERY_3S).await;
    planner.tick().await.expect("tick");
    assert_eq!(
        published_hash(&server, "x"),
        Some(hash_of(EVERY_3S)),
        "2 of 3"
    );
    let fires = planned_seconds(&server, "x");
    assert!(
        !fires.is_empty() && fires.iter().all(|second| second % 3 == 0),
        "the planned schedule is every 3 s: {fires:?}"
    );

    // One of them stops: one replica for each definition, the smaller hash wins, and the
    // fires of the other schedule are unplanned.
    store
        .withdraw_replica("c", Duration::from_secs(300))
        .await
        .expect("withdraw");
    planner.tick().await.expect("tick");
    let smaller = hash_of(EVERY_2S).min(hash_of(EVERY_3S));
    assert_eq!(published_hash(&server, "x"), Some(smaller.clone()));
    let period = if smaller == hash_of(EVERY_2S) { 2 } else { 3 };
    let fires = planned_seconds(&server, "x");
    assert!(
        !fires.is_empty() && fires.iter().all(|second| second % period == 0),
        "only the winner's fires are planned (every {period} s): {fires:?}"
    );
}

#[tokio::test]
async fn a_gap_in_the_leaders_reads_is_not_taken_for_the_replicas_it_could_not_see_beating() {
    // b's definition wins the tie; the leader's own would be planned without b.
    let (winner, loser) = if hash_of(EVERY_2S) < hash_of(EVERY_3S) {
        (EVERY_2S, EVERY_3S)
    } else {
        (EVERY_3S, EVERY_2S)
    };
    let (server, store, mut planner, clock) = leader(loser, Duration::from_secs(300)).await;
    declare(&store, "b", winner).await;
    planner.tick().await.expect("tick");
    assert_eq!(published_hash(&server, "x"), Some(hash_of(winner)));

    // A stall longer than the live time: b's heartbeat is as old as the leader's last read.
    clock.advance(Duration::from_secs(8));
    planner.tick().await.expect("tick");
    assert_eq!(
        published_hash(&server, "x"),
        Some(hash_of(winner)),
        "b, live before the stall, is not taken for gone by the first read after it"
    );
    // b beats again, then really stops: gone once it missed its beats for a live time.
    declare(&store, "b", winner).await;
    for _ in 0..5 {
        clock.advance(Duration::from_secs(1));
        planner.tick().await.expect("tick");
        assert_eq!(published_hash(&server, "x"), Some(hash_of(winner)));
    }
    for _ in 0..3 {
        clock.advance(Duration::from_secs(1));
        planner.tick().await.expect("tick");
    }
    assert_eq!(
        published_hash(&server, "x"),
        Some(hash_of(loser)),
        "b stopped beating 8 s ago without a gap in the leader's reads"
    );
}

#[tokio::test]
async fn replicas_whose_heartbeats_redis_refused_for_want_of_memory_are_not_taken_for_gone() {
    let (winner, loser) = if hash_of(EVERY_2S) < hash_of(EVERY_3S) {
        (EVERY_2S, EVERY_3S)
    } else {
        (EVERY_3S, EVERY_2S)
    };
    let (server, store, mut planner, clock) = leader(loser, Duration::from_secs(300)).await;
    declare(&store, "b", winner).await;
    planner.tick().await.expect("tick");
    assert_eq!(published_hash(&server, "x"), Some(hash_of(winner)));

    // Redis refuses every write for longer than the live time, b's heartbeats too, while the
    // leader reads every second: no gap in its reads, but one in what Redis took.
    server.fill_memory();
    for _ in 0..8 {
        clock.advance(Duration::from_secs(1));
        // Its plans are refused as well: the tick fails, as the ticks of a replica would.
        let _ = planner.tick().await;
    }
    server.lift_memory_limit();
    clock.advance(Duration::from_secs(1));
    planner.tick().await.expect("tick");
    assert_eq!(
        published_hash(&server, "x"),
        Some(hash_of(winner)),
        "b, live before Redis refused writes, is not taken for gone by the first read after"
    );
}

#[tokio::test]
async fn a_replica_restarted_under_its_id_without_a_job_ends_the_jobs_grace_at_once() {
    let grace = Duration::from_secs(300);
    let (server, store, mut planner, _clock) = leader(EVERY_2S, grace).await;
    let with_z = format!("{EVERY_2S}{Z}");

    // A clean stop (SIGTERM: b withdraws) and a crash (kill -9: b's declarations expire): z
    // is kept, until b comes back without it.
    for crash in [false, true] {
        declare(&store, "b", &with_z).await;
        planner.tick().await.expect("tick");
        if crash {
            let mut redis = server.connection();
            let _: () = redis.del(keys().replica_jobs("b")).expect("DEL");
            let _: () = redis.zrem(keys().replicas(), "b").expect("ZREM");
        } else {
            store.withdraw_replica("b", grace).await.expect("withdraw");
        }
        planner.tick().await.expect("tick");
        assert_eq!(published_hash(&server, "z"), Some(hash_of(Z)), "kept");
        declare(&store, "b", EVERY_2S).await;
        planner.tick().await.expect("tick");
        assert_eq!(
            published_hash(&server, "z"),
            None,
            "dropped once b is back without it (crash: {crash})"
        );
    }

    // A replica that comes back still declaring the job keeps it planned.
    declare(&store, "b", &with_z).await;
    planner.tick().await.expect("tick");
    store.withdraw_replica("b", grace).await.expect("withdraw");
    planner.tick().await.expect("tick");
    declare(&store, "b", &with_z).await;
    planner.tick().await.expect("tick");
    assert_eq!(published_hash(&server, "z"), Some(hash_of(Z)));
}

#[tokio::test]
async fn a_job_a_declarer_withdraws_is_dropped_at_once_one_whose_declarers_vanish_is_kept() {
    let grace = Duration::from_secs(2);
    let (server, store, mut planner, clock) = leader(EVERY_2S, grace).await;
    declare(&store, "b", &format!("{EVERY_2S}{Z}")).await;
    planner.tick().await.expect("tick");
    assert!(!planned_seconds(&server, "z").is_empty());
    // Fires of z come due and a, which does not declare z, puts them aside for b.
    declare(&store, "a", EVERY_2S).await;
    let now = store.now_ms().await.expect("time");
    let later = store.clone().with_frozen_clock(now + 2_500);
    later
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    later
        .claim_runs(
            &["a/0", "a/1", "a/2", "a/3"],
            &["default".to_owned()],
            Duration::from_secs(30),
            100,
        )
        .await
        .expect("claim");
    let mut redis = server.connection();
    let aside: Vec<String> = redis.lrange(keys().undeclared("z"), 0, -1).expect("LRANGE");
    assert!(!aside.is_empty(), "fires of z put aside");

    // b reloads without z: no one declares it, and b said so. The fires put aside are skipped
    // at once rather than after the undeclared grace.
    declare(&store, "b", EVERY_2S).await;
    planner.tick().await.expect("tick");
    assert_eq!(planned_seconds(&server, "z"), Vec::<i64>::new());
    assert_eq!(published_hash(&server, "z"), None);
    for run_id in &aside {
        let (state, reason): (Option<String>, Option<String>) = redis
            .hmget(keys().run(run_id), &["state", "reason"])
            .expect("HMGET");
        assert_eq!(
            (state.as_deref(), reason.as_deref()),
            (Some("skipped"), Some("undeclared")),
            "{run_id}"
        );
    }
    let left: usize = redis.llen(keys().undeclared("z")).expect("LLEN");
    assert_eq!(left, 0);

    // b declares it again, then vanishes (its declarations expire): z is kept, then dropped.
    declare(&store, "b", &format!("{EVERY_2S}{Z}")).await;
    planner.tick().await.expect("tick");
    let _: () = redis.del(keys().replica_jobs("b")).expect("DEL");
    let _: () = redis.zrem(keys().replicas(), "b").expect("ZREM");
    planner.tick().await.expect("tick");
    assert!(
        !planned_seconds(&server, "z").is_empty(),
        "kept while a replica that declares it may come back"
    );
    assert_eq!(published_hash(&server, "z"), Some(hash_of(Z)));
    clock.advance(grace + Duration::from_millis(200));
    planner.tick().await.expect("tick");
    assert_eq!(
        planned_seconds(&server, "z"),
        Vec::<i64>::new(),
        "dropped after the undeclared grace"
    );
    assert_eq!(published_hash(&server, "x"), Some(hash_of(EVERY_2S)));
}

#[tokio::test]
async fn a_new_leader_keeps_the_jobs_its_predecessor_planned_for_replicas_it_cannot_see() {
    let (server, store, mut first, _clock) = leader(EVERY_2S, Duration::from_secs(300)).await;
    declare(&store, "b", &format!("{EVERY_2S}{Z}")).await;
    first.tick().await.expect("tick");
    // b's declarations expire (a long Redis stall, say) and the leadership changes.
    let mut redis = server.connection();
    let _: () = redis.del(keys().replica_jobs("b")).expect("DEL");
    let _: () = redis.del(keys().leader()).expect("DEL");
    let mut second = planner_of(&store, "c", EVERY_2S, Duration::from_secs(300)).await;
    let before = planned_seconds(&server, "z");
    second.tick().await.expect("tick");
    assert_eq!(
        published_hash(&server, "z"),
        Some(hash_of(Z)),
        "still planned"
    );
    let after = planned_seconds(&server, "z");
    assert!(
        after.len() >= before.len(),
        "its fires are kept: {before:?} then {after:?}"
    );
}

#[tokio::test]
async fn a_damaged_published_definition_defers_its_fires_and_is_repaired_at_the_next_tick() {
    let (server, store, mut planner, _clock) = leader(Z, Duration::from_secs(300)).await;
    planner.tick().await.expect("tick");
    let mut redis = server.connection();
    let intact: String = redis.hget(keys().defs(), "z").expect("HGET");
    let _: () = redis.hset(keys().defs(), "z", "{not json").expect("HSET");

    // Two seconds on, the first fires are due: they stay due, neither skipped nor dead.
    let now = store.now_ms().await.expect("time");
    let later = store.clone().with_frozen_clock(now + 2_000);
    let promoted = later
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!((promoted.ready, promoted.skipped()), (0, 0), "{promoted:?}");
    assert!(promoted.deferred >= 1, "{promoted:?}");
    let damaged: Vec<String> = redis
        .smembers(keys().damaged_definitions())
        .expect("SMEMBERS");
    assert_eq!(damaged, ["z"]);

    planner.tick().await.expect("tick");
    let repaired: String = redis.hget(keys().defs(), "z").expect("HGET");
    assert_eq!(repaired, intact);
    let damaged: Vec<String> = redis
        .smembers(keys().damaged_definitions())
        .expect("SMEMBERS");
    assert!(damaged.is_empty());
    let promoted = later
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(promoted.deferred, 0);
    assert!(promoted.ready >= 1, "the deferred fires run: {promoted:?}");
    assert_eq!(promoted.skipped(), 0, "{promoted:?}");
}

#[tokio::test]
async fn foreign_published_definitions_are_replaced_and_strays_removed_within_a_tick() {
    let (server, _store, mut planner, _clock) = leader(Z, Duration::from_secs(300)).await;
    planner.tick().await.expect("tick");
    let mut redis = server.connection();
    let intact: String = redis.hget(keys().defs(), "z").expect("HGET");
    let foreign = intact.replace("\"queue\":\"default\"", "\"queue\":\"elsewhere\"");
    assert_ne!(foreign, intact);
    let _: () = redis.hset(keys().defs(), "z", &foreign).expect("HSET");
    let _: () = redis.hset(keys().defs(), "ghost", &intact).expect("HSET");
    let _: () = redis
        .hset(keys().def_hashes(), "phantom", "0000")
        .expect("HSET");

    planner.tick().await.expect("tick");
    let now: String = redis.hget(keys().defs(), "z").expect("HGET");
    assert_eq!(now, intact, "written again");
    let names: Vec<String> = redis.hkeys(keys().defs()).expect("HKEYS");
    assert_eq!(names, ["z"]);
    let names: Vec<String> = redis.hkeys(keys().def_hashes()).expect("HKEYS");
    assert_eq!(names, ["z"]);
}

#[tokio::test]
async fn definitions_no_replica_declares_are_forgotten_and_a_stopping_replica_withdraws() {
    let (server, store, mut planner, _clock) = leader(EVERY_2S, Duration::from_secs(300)).await;
    declare(&store, "b", &format!("{EVERY_3S}{Z}")).await;
    planner.tick().await.expect("tick");
    let mut redis = server.connection();
    let stored: Vec<String> = redis.hkeys(keys().declared_definitions()).expect("HKEYS");
    assert_eq!(stored.len(), 2, "b's two definitions: {stored:?}");

    // b restarts on other files: what it declared before is no longer kept, once the leader
    // has a tick with nothing else to do.
    declare(&store, "b", EVERY_2S).await;
    planner.tick().await.expect("tick");
    planner.tick().await.expect("a quiet tick");
    let mut stored: Vec<String> = redis.hkeys(keys().declared_definitions()).expect("HKEYS");
    stored.sort();
    assert_eq!(stored, [hash_of(EVERY_2S)]);

    store
        .withdraw_replica("b", Duration::from_secs(300))
        .await
        .expect("withdraw");
    let exists: bool = redis.exists(keys().replica_jobs("b")).expect("EXISTS");
    let live: Option<f64> = redis.zscore(keys().replicas(), "b").expect("ZSCORE");
    assert!(!exists && live.is_none());
}

/// Declarations of more jobs than one round trip writes go out in batches, put in place whole:
/// every job and definition is there, read back intact, and nothing is left aside; the leader
/// publishes them all in batches too.
#[tokio::test]
async fn declarations_larger_than_a_batch_are_published_whole_and_nothing_is_left_aside() {
    const JOBS: usize = 2_500;
    let (server, store, mut planner, _clock) = leader(EVERY_2S, Duration::from_secs(300)).await;
    let toml: String = (0..JOBS)
        .map(|index| {
            format!(
                "[jobs.j{index}]\nschedule = \"{} * * * *\"\ncommand = \"true\"\n",
                index % 60
            )
        })
        .collect();
    declare(&store, "b", &toml).await;
    let declared: Vec<Arc<Job>> = jobs(&toml).into_iter().map(Arc::new).collect();
    let mut redis = server.connection();
    let published = store
        .replica_declarations(&["b".to_owned()])
        .await
        .expect("read b's declarations")
        .remove(0)
        .expect("b's declarations, whole: their digest matches");
    assert_eq!(published.len(), JOBS);
    assert_eq!(published["j1234"], declared[1234].content_hash());
    let definitions: usize = redis.hlen(keys().declared_definitions()).expect("HLEN");
    assert_eq!(definitions, JOBS, "one definition per job");
    let aside: Vec<String> = redis.keys("*replica-jobs-aside*").expect("KEYS");
    assert!(aside.is_empty(), "left aside: {aside:?}");

    planner.tick().await.expect("tick");
    let planned: usize = redis.hlen(keys().defs()).expect("HLEN");
    let hashes: usize = redis.hlen(keys().def_hashes()).expect("HLEN");
    assert_eq!(
        (planned, hashes),
        (JOBS + 1, JOBS + 1),
        "b's jobs and a's x"
    );
    assert_eq!(
        published_hash(&server, "j2499"),
        Some(declared[2499].content_hash())
    );
}

#[test]
fn a_replica_heals_a_corrupt_published_definition_within_a_tick_and_loses_no_fire() {
    let scenario = Scenario::new();
    // Default settings: overlap forbid, misfire run-once.
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"{}\"\n",
        scenario.record("")
    ));
    let replica = scenario.replicas_with_a_leader(&["r1"], &[]).remove(0);
    let mut redis = scenario.server.connection();
    assert!(
        wait_until(Duration::from_secs(5), || {
            redis
                .hexists::<_, _, bool>(keys().defs(), "tick")
                .unwrap_or(false)
        }),
        "the definition is published"
    );
    let intact: String = redis.hget(keys().defs(), "tick").expect("HGET");
    // Fires run before the damage.
    assert!(
        wait_until(Duration::from_secs(10), || scenario.ledger().len() >= 2),
        "tick does not run:\n{}",
        replica.log()
    );

    let corrupted_at = scenario.redis_now_ms();
    let _: () = redis
        .hset(keys().defs(), "tick", "{not json")
        .expect("HSET");
    let healed = wait_until(Duration::from_millis(2_500), || {
        redis
            .hget::<_, _, String>(keys().defs(), "tick")
            .ok()
            .as_ref()
            == Some(&intact)
    });
    let healed_after = scenario.redis_now_ms() - corrupted_at;
    assert!(healed, "not written again within 2.5 s:\n{}", replica.log());
    // Judged up to a fire two seconds past the healing, once it has started.
    let until = (scenario.redis_now_ms() / 1000 + 2) * 1000;
    assert!(
        wait_until(Duration::from_secs(10), || scenario
            .ledger()
            .iter()
            .any(|(run, _, _)| fire_ms(run) >= until)),
        "no fire from {until} on ran:\n{}",
        replica.log()
    );

    // Every fire from before the damage to after it ran, once; none was skipped.
    let fires: Vec<i64> = scenario
        .ledger()
        .iter()
        .map(|(run, _, _)| fire_ms(run))
        .collect();
    let from = corrupted_at / 1000 * 1000 - 1_000;
    for fire in (from..until).step_by(1000) {
        let runs = fires.iter().filter(|ran| **ran == fire).count();
        assert_eq!(
            runs,
            1,
            "fire {fire} ran {runs} times (healed after {healed_after} ms): {fires:?}\n{}",
            replica.log()
        );
    }
    let events: Vec<redis::Value> = redis::cmd("XRANGE")
        .arg(keys().events())
        .arg("-")
        .arg("+")
        .query(&mut redis)
        .expect("XRANGE");
    assert!(
        !format!("{events:?}").contains("skipped"),
        "no fire skipped: {events:?}"
    );
    assert!(
        replica.log().contains("written again"),
        "the repair is logged with the job's name:\n{}",
        replica.log()
    );
}

const Z_EVERY_2S: &str = "[jobs.z]\nschedule = \"*/2 * * * * *\"\ncommand = \"true\"\n";

#[tokio::test]
async fn a_job_whose_declared_definition_cannot_be_read_stays_planned_and_is_read_again() {
    let grace = Duration::from_secs(1);
    let (server, store, mut planner, clock) = leader(EVERY_2S, grace).await;
    declare(&store, "b", &format!("{EVERY_2S}{Z}")).await;
    planner.tick().await.expect("tick");
    assert_eq!(published_hash(&server, "z"), Some(hash_of(Z)));

    // b changes z, and the new definition is damaged in Redis before the leader reads it.
    declare(&store, "b", &format!("{EVERY_2S}{Z_EVERY_2S}")).await;
    let mut redis = server.connection();
    let _: () = redis
        .hset(
            keys().declared_definitions(),
            hash_of(Z_EVERY_2S),
            "{not json",
        )
        .expect("HSET");
    planner.tick().await.expect("tick");
    clock.advance(grace + Duration::from_millis(200));
    planner.tick().await.expect("tick");
    assert_eq!(
        published_hash(&server, "z"),
        Some(hash_of(Z)),
        "planned by its last definition read, not kept and dropped"
    );
    assert!(!planned_seconds(&server, "z").is_empty());

    // b's heartbeat finds its definition damaged and publishes it again: read this time.
    declare(&store, "b", &format!("{EVERY_2S}{Z_EVERY_2S}")).await;
    planner.tick().await.expect("tick");
    assert_eq!(published_hash(&server, "z"), Some(hash_of(Z_EVERY_2S)));
}

/// A heartbeat of replica `replica` declaring `toml`'s jobs.
fn heartbeat_of(store: &Store, replica: &str, toml: &str) -> Heartbeat {
    let (_jobs, own) = watch::channel(shared_jobs(jobs(toml)));
    Heartbeat::new(
        store.clone(),
        HeartbeatConfig {
            replica_id: replica.to_owned(),
            period: Duration::from_secs(2),
            queues: vec!["default".to_owned()],
            labels: String::new(),
            targets_kept: Duration::from_secs(60),
            keep_declared: Duration::from_secs(300),
        },
        Arc::new(WorkerLoad::default()),
        own,
        Leadership::new(),
    )
}

#[tokio::test]
async fn a_heartbeat_publishes_its_declarations_again_when_they_are_damaged() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let both = format!("{EVERY_2S}{Z}");
    let mut heartbeat = heartbeat_of(&store, "b", &both);
    heartbeat.tick().await.expect("beat");
    let mut redis = server.connection();
    let published = |redis: &mut redis::Connection| {
        let jobs: std::collections::HashMap<String, String> =
            redis.hgetall(keys().replica_jobs("b")).expect("HGETALL");
        let body: Option<String> = redis
            .hget(keys().declared_definitions(), hash_of(Z))
            .expect("HGET");
        (jobs, body)
    };
    let intact = published(&mut redis);
    assert_eq!(intact.0.get("z"), Some(&hash_of(Z)));

    // Written over: a job's hash, a definition, a stray job.
    let _: () = redis
        .hset(keys().replica_jobs("b"), "z", "bogus")
        .expect("HSET");
    heartbeat.tick().await.expect("beat");
    assert_eq!(published(&mut redis), intact, "a job's hash");
    let _: () = redis
        .hset(keys().declared_definitions(), hash_of(Z), "{not json")
        .expect("HSET");
    heartbeat.tick().await.expect("beat");
    assert_eq!(published(&mut redis), intact, "a definition");
    let _: () = redis
        .hset(keys().replica_jobs("b"), "stray", "abc")
        .expect("HSET");
    heartbeat.tick().await.expect("beat");
    assert_eq!(published(&mut redis), intact, "a stray job");
    let _: () = redis::pipe()
        .atomic()
        .hdel(keys().replica_jobs("b"), "")
        .hset(keys().replica_jobs("b"), "stray", "abc")
        .query(&mut redis)
        .expect("swap");
    heartbeat.tick().await.expect("beat");
    assert_eq!(
        published(&mut redis),
        intact,
        "a stray job in place of the marker: as many entries as before"
    );
}

#[tokio::test]
async fn a_second_process_beating_under_a_replica_id_is_stopped_a_restored_record_is_not() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let mut first = heartbeat_of(&store, "r", EVERY_2S);
    first.tick().await.expect("beat");
    // Redis comes back with an older record of the id, once: not a second process.
    let mut redis = server.connection();
    let _: () = redis
        .hset(keys().replica("r"), "instance", "old-host/1/1")
        .expect("HSET");
    first
        .tick()
        .await
        .expect("a record restored once is an older copy's");
    first.tick().await.expect("beat");
    first.tick().await.expect("beat");

    // A second process beats under the same id (its start time tells it from the first): the
    // older one stops, the newer one goes on. A time: the second must start a few
    // milliseconds after the first for their start times to differ.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut second = heartbeat_of(&store, "r", EVERY_2S);
    second
        .tick()
        .await
        .expect("its first beat finds a predecessor's record");
    first.tick().await.expect("one foreign record is tolerated");
    second
        .tick()
        .await
        .expect("one foreign record is tolerated");
    let error = first
        .tick()
        .await
        .expect_err("the older of two processes stops");
    assert!(
        matches!(&error, HeartbeatError::ReplicaIdInUse { replica_id, .. } if replica_id == "r"),
        "{error}"
    );
    assert!(error.to_string().contains("--replica-id"), "{error}");
    second
        .tick()
        .await
        .expect("the newer one goes on, though it saw the other's record twice");
    second.tick().await.expect("and on");
}

#[tokio::test]
async fn declarations_written_over_are_not_taken_for_a_withdrawal() {
    let grace = Duration::from_secs(1);
    let (server, store, mut planner, clock) = leader(EVERY_2S, grace).await;
    declare(&store, "b", &format!("{EVERY_2S}{Z}")).await;
    planner.tick().await.expect("tick");
    assert_eq!(published_hash(&server, "z"), Some(hash_of(Z)));

    // Something deletes z from b's declarations, and another replica's publication makes the
    // leader read them again: b did not withdraw z, its declarations were damaged.
    let mut redis = server.connection();
    let _: () = redis.hdel(keys().replica_jobs("b"), "z").expect("HDEL");
    let _: () = redis.incr(keys().declarations_version(), 1).expect("INCR");
    planner.tick().await.expect("tick");
    assert_eq!(
        published_hash(&server, "z"),
        Some(hash_of(Z)),
        "kept, not dropped"
    );
    assert!(!planned_seconds(&server, "z").is_empty());

    // b publishes them again (its heartbeat checks them): z is declared as before.
    declare(&store, "b", &format!("{EVERY_2S}{Z}")).await;
    clock.advance(grace + Duration::from_millis(200));
    planner.tick().await.expect("tick");
    assert_eq!(published_hash(&server, "z"), Some(hash_of(Z)));
}

#[test]
fn a_replica_whose_declarations_name_a_job_it_lacks_hands_its_runs_back_and_loses_none() {
    let scenario = Scenario::new();
    let record = scenario.record("");
    let job =
        |name: &str| format!("[jobs.{name}]\nschedule = \"* * * * * *\"\ncommand = \"{record}\"\n");
    // r1 declares x, r2 declares x and j; default settings.
    let r2_files = scenario.dir.path().join("r2");
    std::fs::create_dir(&r2_files).expect("r2's schedules");
    std::fs::write(r2_files.join("jobs.toml"), job("x") + &job("j")).expect("write jobs");
    scenario.write_jobs(&job("x"));
    let r1 = scenario.replicas_with_a_leader(&["r1"], &[]).remove(0);
    let r2 = ReplicaProcess::start(
        "r2",
        &scenario.server.url(),
        &r2_files,
        scenario.dir.path(),
        &[],
    );
    let mut redis = scenario.server.connection();
    // r2 is frozen once a run of j is recorded as succeeded and holds no slot of j: a run whose
    // command ended but whose success r2 had not recorded yet would hold j's only slot through
    // the freeze, and the next fire would rightly be skipped as an overlap.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let succeeded = scenario
                .ledger()
                .iter()
                .filter(|(run, _, _)| run.starts_with("j@"))
                .any(|(run, _, _)| {
                    let state: Option<String> = redis.hget(keys().run(run), "state").expect("HGET");
                    state.as_deref() == Some("succeeded")
                });
            let slots: usize = redis.zcard(keys().running("j")).expect("ZCARD");
            succeeded && slots == 0
        }),
        "j runs\n{}",
        r2.log()
    );
    let j_hash: String = redis.hget(keys().replica_jobs("r2"), "j").expect("HGET");

    // r2 freezes (for less than its run lease), and r1's declarations are written over, again
    // and again, so that they name j, with as many entries as before: r1's workers claim j's
    // runs, which r1 cannot run. A time: the damage must outlast several of r1's claims and
    // its own rewrites of its declarations, which no event of r1's marks.
    r2.signal(nix::sys::signal::Signal::SIGSTOP);
    let damaged_at = scenario.redis_now_ms();
    for _ in 0..12 {
        let _: () = redis::pipe()
            .atomic()
            .hdel(keys().replica_jobs("r1"), "")
            .hset(keys().replica_jobs("r1"), "j", &j_hash)
            .query(&mut redis)
            .expect("damage r1's declarations");
        std::thread::sleep(Duration::from_millis(200));
    }
    r2.signal(nix::sys::signal::Signal::SIGCONT);
    // Judged up to a fire of j two seconds past r2's return, once it has started.
    let until = (scenario.redis_now_ms() / 1000 + 2) * 1000;
    assert!(
        wait_until(Duration::from_secs(10), || scenario
            .ledger()
            .iter()
            .any(|(run, _, _)| run.starts_with("j@") && fire_ms(run) >= until)),
        "no fire of j from {until} on ran:\n{}\n{}",
        r1.log(),
        r2.log()
    );
    assert!(
        r1.log().contains("handed the run back"),
        "r1 claimed none of j's runs: the test shows nothing\n{}",
        r1.log()
    );

    let dead: Vec<String> = redis.zrange(keys().dead(), 0, -1).expect("ZRANGE");
    assert!(dead.is_empty(), "{dead:?}\n{}\n{}", r1.log(), r2.log());
    let fires: Vec<i64> = scenario
        .ledger()
        .iter()
        .filter(|(run, _, _)| run.starts_with("j@"))
        .map(|(run, _, _)| fire_ms(run))
        .collect();
    for fire in (damaged_at / 1000 * 1000..until).step_by(1000) {
        let runs = fires.iter().filter(|ran| **ran == fire).count();
        let run_id = cron_run_id("j", fire);
        let hash: std::collections::HashMap<String, String> =
            redis.hgetall(keys().run(&run_id)).expect("HGETALL");
        assert_eq!(
            runs,
            1,
            "j's fire {fire} ran {runs} times; its hash: {hash:?}\n{}\n{}",
            r1.log(),
            r2.log()
        );
    }
}

/// Only the leader exports the gauges of shared state: a replica that led and no longer does
/// clears them at its next heartbeat, so that a `max` or a sum over replicas reads the leader's
/// alone (a stale 1 in `redcron_queue_replicas` would hide a queue no replica serves).
#[tokio::test]
async fn a_replica_that_does_not_lead_clears_the_gauges_of_shared_state() {
    use prometheus::core::Collector;

    let server = RedisServer::start();
    let store = connect(&server).await;
    let metrics = store.metrics().clone();
    metrics.due_runs.set(5);
    metrics.dead_runs.set(2);
    metrics
        .queue_replicas
        .with_label_values(&["eu-west"])
        .set(1);
    metrics
        .ready_runs
        .with_label_values(&["eu-west", "high"])
        .set(3);
    let mut heartbeat = heartbeat_of(&store, "b", EVERY_2S);
    heartbeat.tick().await.expect("beat");
    assert_eq!((metrics.due_runs.get(), metrics.dead_runs.get()), (0, 0));
    let series = |family: Vec<prometheus::proto::MetricFamily>| {
        family
            .iter()
            .map(|family| family.get_metric().len())
            .sum::<usize>()
    };
    assert_eq!(series(metrics.queue_replicas.collect()), 0);
    assert_eq!(series(metrics.ready_runs.collect()), 0);
}
