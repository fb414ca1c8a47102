//! A replica claims only runs of the jobs it declares: runs of other jobs wait for a replica
//! that declares them (as during a rolling deploy), and go to the dead letters only when no
//! live replica has declared their job for a grace period.

use std::time::Duration;

use redcron::store::{Claimed, Store, StoreError};

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::store::enqueue;
use crate::util::store::{declare, jobs, setup};

const JOBS: &str = "[jobs.x]\ncommand = \"true\"\n[jobs.y]\ncommand = \"true\"\n";

async fn claim_as(store: &Store, replica: &str, workers: usize) -> Result<Claimed, StoreError> {
    let names: Vec<String> = (0..workers)
        .map(|slot| format!("{replica}/{slot}"))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    store
        .claim_runs(
            &names,
            &["default".to_owned()],
            Duration::from_secs(30),
            100,
        )
        .await
}

fn ids(claimed: &Claimed) -> Vec<String> {
    claimed
        .runs
        .iter()
        .map(|run| run.as_ref().expect("a decodable run").id.clone())
        .collect()
}

fn dead(server: &RedisServer) -> Vec<String> {
    redis::Commands::zrange(&mut server.connection(), keys().dead(), 0, -1).expect("ZRANGE")
}

#[tokio::test]
async fn runs_of_a_job_a_replica_does_not_declare_wait_for_one_that_does() {
    let (server, store, _token) = setup(JOBS).await;
    declare(&store, "old", jobs("[jobs.x]\ncommand = \"true\"\n")).await;
    let y1 = enqueue(&store, "y", None).await;
    let x1 = enqueue(&store, "x", None).await;
    let y2 = enqueue(&store, "y", None).await;

    let claimed = claim_as(&store, "old", 3).await.expect("claim");
    assert_eq!(ids(&claimed), [x1], "only the job it declares");
    assert_eq!(
        claimed.skipped(),
        0,
        "the others are neither skipped nor dead"
    );
    assert!(dead(&server).is_empty());

    // A replica that declares y takes them, oldest first, before anything else.
    let x2 = enqueue(&store, "x", None).await;
    let claimed = claim_as(&store, "replica", 3).await.expect("claim");
    assert_eq!(ids(&claimed), [y1, y2, x2]);
}

#[tokio::test]
async fn a_replica_that_puts_runs_aside_wakes_the_replicas_that_declare_their_job() {
    let (server, store, _token) = setup(JOBS).await;
    declare(&store, "old", jobs("[jobs.x]\ncommand = \"true\"\n")).await;
    let info = [("host", "test".to_owned())];
    for replica in ["old", "replica"] {
        store
            .heartbeat(replica, &info, Duration::from_secs(3600))
            .await
            .expect("beat");
    }
    // Both replicas' workers wait on the queue; "old" takes its wake-up and finds only y.
    let idle = Duration::from_secs(30);
    let queues = ["default".to_owned()];
    let mut declarer = store
        .ready_waiter("replica", &queues, idle)
        .await
        .expect("waiter");
    enqueue(&store, "y", None).await;
    let mut other = store
        .ready_waiter("old", &queues, idle)
        .await
        .expect("waiter");
    assert!(other.wait(idle).await.expect("wait"), "the queue's wake-up");
    assert!(ids(&claim_as(&store, "old", 1).await.expect("claim")).is_empty());

    // The declarer is woken at once, not at the end of its idle wait.
    let woken = tokio::time::timeout(Duration::from_secs(5), declarer.wait(idle))
        .await
        .expect("woken long before its idle wait ends")
        .expect("wait");
    assert!(woken);
    let marker: bool =
        redis::Commands::exists(&mut server.connection(), keys().wake_replica("old"))
            .expect("EXISTS");
    assert!(
        !marker,
        "a replica that does not declare y is not woken for it"
    );
    assert_eq!(
        ids(&claim_as(&store, "replica", 1).await.expect("claim")).len(),
        1
    );
}

#[tokio::test]
async fn a_replica_whose_declarations_are_gone_claims_nothing_until_it_publishes_them() {
    let (_server, store, _token) = setup(JOBS).await;
    enqueue(&store, "x", None).await;
    let error = claim_as(&store, "new", 1).await.expect_err("undeclared");
    assert!(
        matches!(&error, StoreError::Undeclared { replica } if replica == "new"),
        "{error}"
    );
    declare(&store, "new", Vec::new()).await;
    let claimed = claim_as(&store, "new", 1).await.expect("claim");
    assert!(
        claimed.runs.is_empty(),
        "a replica that declares nothing runs nothing"
    );
}

#[tokio::test]
async fn runs_go_to_the_dead_letters_only_once_no_live_replica_declares_their_job() {
    let (server, store, _token) = setup(JOBS).await;
    declare(&store, "old", jobs("[jobs.x]\ncommand = \"true\"\n")).await;
    let y = enqueue(&store, "y", None).await;
    claim_as(&store, "old", 1).await.expect("claim");
    let grace = Duration::from_secs(60);
    let live_for = Duration::from_secs(6);

    // Two minutes on, "replica", which declares y, beats: the run waits, however long it was.
    let now = store.now_ms().await.expect("time");
    let later = store.clone().with_frozen_clock(now + 120_000);
    let info = [("host", "test".to_owned())];
    later
        .heartbeat("replica", &info, Duration::from_secs(3600))
        .await
        .expect("beat");
    assert_eq!(
        later
            .bury_undeclared_runs(grace, live_for, &[])
            .await
            .expect("bury"),
        []
    );
    assert!(dead(&server).is_empty());

    // Then no live replica declares it for the whole grace: dead, with its reason.
    let within = store.clone().with_frozen_clock(now + 170_000);
    assert_eq!(
        within
            .bury_undeclared_runs(grace, live_for, &[])
            .await
            .expect("bury"),
        []
    );
    let after = store.clone().with_frozen_clock(now + 181_000);
    assert_eq!(
        after
            .bury_undeclared_runs(grace, live_for, &[])
            .await
            .expect("bury"),
        [("y".to_owned(), 1)]
    );
    assert_eq!(dead(&server), std::slice::from_ref(&y));
    let reason: Option<String> =
        redis::Commands::hget(&mut server.connection(), keys().run(&y), "reason").expect("HGET");
    assert_eq!(reason.as_deref(), Some("undeclared"));
}

/// A run put aside for a replica that declares its job, whose record's priority was damaged
/// meanwhile, goes to the dead letters as corrupt when that replica claims, as it would have
/// had it been damaged before it came due, instead of being pushed to a list no claim reads.
#[tokio::test]
async fn a_run_put_aside_whose_routing_was_damaged_meanwhile_is_dead_as_corrupt() {
    let (server, store, _token) = setup(JOBS).await;
    declare(&store, "old", jobs("[jobs.x]\ncommand = \"true\"\n")).await;
    let y = enqueue(&store, "y", None).await;
    assert!(ids(&claim_as(&store, "old", 1).await.expect("claim")).is_empty());
    let mut redis = server.connection();
    let () = redis::Commands::hset(&mut redis, keys().run(&y), "priority", "urgent").expect("HSET");

    let claimed = claim_as(&store, "replica", 1).await.expect("claim");
    assert!(ids(&claimed).is_empty(), "{claimed:?}");
    assert_eq!(dead(&server), std::slice::from_ref(&y));
    let reason: Option<String> =
        redis::Commands::hget(&mut redis, keys().run(&y), "reason").expect("HGET");
    assert_eq!(reason.as_deref(), Some("corrupt"));
    let unread: usize = redis::Commands::llen(
        &mut redis,
        format!("{}ready:default:urgent", keys().prefix()),
    )
    .expect("LLEN");
    assert_eq!(unread, 0, "pushed to a list no claim reads");
}
