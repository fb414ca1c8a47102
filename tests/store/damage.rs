//! Damaged runs and definitions: never executed, buried in the dead letters or left waiting.

use std::time::Duration;

use redcron::schedule::Priority;
use redcron::store::Claim;
use redis::Commands;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::store::{THRESHOLD, claim, connect, declare, jobs, run_hash};

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
