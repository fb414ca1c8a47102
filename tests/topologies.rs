//! The Sentinel and Cluster harnesses, checked with plain Redis clients before redcron runs on
//! them: a failover keeps acknowledged writes and brings the old primary back as a replica; a
//! slot moves with its keys under a writing client, and its new owner fails over to its replica.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use redis::Commands;

use crate::util::cluster::RedisCluster;
use crate::util::node::TIMEOUT;
use crate::util::redis_server::connect;
use crate::util::sentinel::SentinelSetup;

/// How long a failover may take: a few seconds is the rule, more on a loaded machine.
const FAILOVER: Duration = Duration::from_secs(10);

/// The first word of `ROLE`.
fn role(connection: &mut redis::Connection) -> String {
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(connection).expect("ROLE");
    redis::from_redis_value(role.into_iter().next().expect("a role")).expect("a role name")
}

#[test]
fn sentinel_fails_over_to_the_replica_with_the_acknowledged_writes_and_demotes_the_old_primary() {
    let mut setup = SentinelSetup::start();
    assert!(
        setup.url().starts_with("redis+sentinel://127.0.0.1:")
            && setup.url().ends_with("/mymaster"),
        "{}",
        setup.url()
    );
    let mut primary = setup.primary_connection();
    let () = primary.set("{test}:before", "the crash").expect("SET");
    let acknowledged: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(1000)
        .query(&mut primary)
        .expect("WAIT");
    assert_eq!(
        acknowledged,
        1,
        "the replica did not acknowledge\n{}",
        setup.log()
    );

    let old = setup.kill9_primary();
    assert!(
        setup.wait_for_failover(FAILOVER),
        "no failover within {FAILOVER:?} of the primary's kill -9\n{}",
        setup.log()
    );
    let new = setup.primary_port();
    assert_ne!(new, old, "{}", setup.log());
    let mut primary = setup.primary_connection();
    let before: Option<String> = primary.get("{test}:before").expect("GET");
    assert_eq!(before.as_deref(), Some("the crash"), "{}", setup.log());
    let () = primary.set("{test}:after", "the failover").expect("SET");

    setup.restart_old_primary();
    assert!(
        setup.wait_until_in_sync(Duration::from_secs(15)),
        "the old primary is not a replica in sync within 15 s of its restart\n{}",
        setup.log()
    );
    assert_eq!(setup.primary_port(), new, "{}", setup.log());
    assert_eq!(setup.replica_port(), old, "{}", setup.log());
    let mut old_primary = setup.connection(old);
    assert_eq!(role(&mut old_primary), "slave");
    let after: Option<String> = old_primary.get("{test}:after").expect("GET");
    assert_eq!(after.as_deref(), Some("the failover"), "{}", setup.log());
}

/// Runs `command` on the cluster starting at `port`, following `MOVED` and `ASK` redirections
/// and retrying on `TRYAGAIN`, as a cluster client does; `connections` keeps one connection per
/// node.
fn cluster_query<T: redis::FromRedisValue>(
    connections: &mut HashMap<String, redis::Connection>,
    port: u16,
    command: &redis::Cmd,
) -> T {
    let mut address = format!("127.0.0.1:{port}");
    let mut asking = false;
    for _ in 0..100 {
        let connection = connections.entry(address.clone()).or_insert_with(|| {
            connect(&format!("redis://{address}/"), TIMEOUT).expect("connect to a cluster node")
        });
        let answer = if asking {
            redis::pipe()
                .cmd("ASKING")
                .ignore()
                .add_command(command.clone())
                .query::<(T,)>(connection)
                .map(|(answer,)| answer)
        } else {
            command.query(connection)
        };
        match answer {
            Ok(answer) => return answer,
            Err(error) if error.code() == Some("TRYAGAIN") => {
                asking = false;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(error) => {
                let (node, _) = error
                    .redirect_node()
                    .unwrap_or_else(|| panic!("{command:?}: {error}"));
                asking = error.code() == Some("ASK");
                address = node.to_owned();
            }
        }
    }
    panic!("{command:?}: too many redirections");
}

#[test]
fn a_slot_moves_with_its_keys_under_a_writer_and_its_new_owner_fails_over_to_its_replica() {
    let mut cluster = RedisCluster::start();
    assert!(
        cluster.url().starts_with("redis+cluster://127.0.0.1:"),
        "{}",
        cluster.url()
    );
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "{masters:?}\n{}", cluster.log());
    let (namespace, other) = cluster.namespaces_on_different_masters();
    let slot = cluster.slot_of(&format!("{{{namespace}}}"));
    assert_eq!(slot, cluster.slot_of(&format!("{{{namespace}}}:jobs")));
    let from = cluster.master_of_slot(slot);
    assert_ne!(
        cluster.master_of_slot(cluster.slot_of(&format!("{{{other}}}"))),
        from
    );

    // More keys than one MIGRATE batch moves.
    let mut source = cluster.connection(from);
    for number in 0..250 {
        let () = source
            .set(format!("{{{namespace}}}:key:{number}"), number)
            .expect("SET");
    }

    // A client keeps writing to the slot while it moves.
    let counter = format!("{{{namespace}}}:counter");
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicI64::new(0));
    let writer = std::thread::spawn({
        let (stop, writes, counter) = (Arc::clone(&stop), Arc::clone(&writes), counter.clone());
        move || {
            let mut connections = HashMap::new();
            while !stop.load(Ordering::Relaxed) {
                let _: i64 =
                    cluster_query(&mut connections, from, redis::cmd("INCR").arg(&counter));
                writes.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    assert!(
        crate::util::wait_until(Duration::from_secs(5), || writes.load(Ordering::Relaxed)
            > 0),
        "the writer does not write"
    );
    let to = masters
        .iter()
        .copied()
        .find(|&port| port != from)
        .expect("another master");
    cluster.migrate_slot(slot, to);
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("the writer");
    let writes = writes.load(Ordering::Relaxed);
    assert_eq!(cluster.master_of_slot(slot), to);

    let mut target = cluster.connection(to);
    let keys: Vec<String> = (0..250)
        .map(|number| format!("{{{namespace}}}:key:{number}"))
        .collect();
    let values: Vec<Option<i64>> = target.mget(&keys).expect("MGET");
    assert_eq!(values, (0..250).map(Some).collect::<Vec<_>>());
    let count: i64 = target.get(&counter).expect("GET");
    assert_eq!(count, writes, "writes were lost in the migration");
    let moved = source
        .get::<_, Option<i64>>(&counter)
        .expect_err("the slot left");
    assert_eq!(moved.code(), Some("MOVED"), "{moved}");

    let replica = cluster.replica_of(to).expect("a replica of the new owner");
    let acknowledged: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(1000)
        .query(&mut target)
        .expect("WAIT");
    assert_eq!(
        acknowledged,
        1,
        "the replica did not acknowledge\n{}",
        cluster.log()
    );
    assert_eq!(cluster.kill9_master_of_slot(slot), to);
    assert!(
        cluster.wait_for_slot_served_by_new_master(slot, FAILOVER),
        "slot {slot} has no new master within {FAILOVER:?} of its owner's kill -9\n{}",
        cluster.log()
    );
    assert_eq!(cluster.master_of_slot(slot), replica);
    let mut promoted = cluster.connection(replica);
    assert_eq!(role(&mut promoted), "master");
    let values: Vec<Option<i64>> = promoted.mget(&keys).expect("MGET");
    assert_eq!(values, (0..250).map(Some).collect::<Vec<_>>());
    let count: i64 = promoted.get(&counter).expect("GET");
    assert_eq!(count, writes);
}
