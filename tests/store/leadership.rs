//! The leader lease (`acquire_leader.lua`, `renew_leader.lua`, `release_leader.lua`): one holder, a
//! new epoch per acquisition, and a stale holder fenced.

use std::time::Duration;

use redcron::store::{Acquisition, PlanOutcome};
use redis::Commands;

use crate::util::redis_server::RedisServer;
use crate::util::store::{LEASE, connect, jobs, leader, plan};
use crate::util::{keys, wait_until_async};

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
    let mut successor = None;
    wait_until_async(Duration::from_secs(5), async || {
        if let Acquisition::Acquired(token) = store
            .acquire_leader("successor", LEASE)
            .await
            .expect("acquire")
        {
            successor = Some(token);
        }
        successor.is_some()
    })
    .await;
    let successor = successor.expect("the lease never expired");

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
