//! The store's connections: errors that name the operation, and replicated writes.

use std::time::Duration;

use redcron::store::{Store, StoreError, StoreSettings};

use crate::util::NAMESPACE;
use crate::util::redis_server::RedisServer;
use crate::util::store::connect;

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
    assert!(error.to_string().starts_with("claiming runs: "), "{error}");
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
