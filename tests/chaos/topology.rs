//! The Redis the replicas use: one `redis-server`, a Sentinel setup or a Redis Cluster, and how
//! the runner reaches the node that holds the namespace, whichever it is now.

use std::time::Duration;

use redis::Commands;

use crate::cluster::keys;
use crate::plan::Topology;
use crate::redis_cluster::RedisCluster;
use crate::redis_server::{RedisServer, connect};
use crate::sentinel::{MASTER_NAME, SentinelSetup};

/// The Redis processes of one topology.
pub enum Redis {
    Single(RedisServer),
    Sentinel(SentinelSetup),
    Cluster(RedisCluster),
}

impl Redis {
    /// Starts `topology`: one `redis-server` with AOF on (`appendfsync everysec`), a primary
    /// with a replica and three sentinels, or a cluster of three masters with a replica each.
    pub fn start(topology: Topology) -> Self {
        match topology {
            Topology::Single => Redis::Single(RedisServer::start_with_aof()),
            Topology::Sentinel => Redis::Sentinel(SentinelSetup::start()),
            Topology::Cluster => Redis::Cluster(RedisCluster::start()),
        }
    }

    /// The URL the replicas connect with.
    pub fn url(&self) -> String {
        match self {
            Redis::Single(server) => server.url(),
            Redis::Sentinel(setup) => setup.url(),
            Redis::Cluster(cluster) => cluster.url(),
        }
    }

    /// How to reach the node that holds the namespace, from any thread.
    pub fn locator(&self) -> Locator {
        match self {
            Redis::Single(server) => Locator::Url(server.url()),
            Redis::Sentinel(setup) => Locator::Sentinel(setup.sentinel_ports()),
            Redis::Cluster(cluster) => Locator::Cluster(cluster.ports()),
        }
    }
}

/// Where the namespace's node is found.
#[derive(Debug, Clone)]
pub enum Locator {
    /// One `redis-server`.
    Url(String),
    /// The primary the sentinels on these ports name.
    Sentinel(Vec<u16>),
    /// The node of these that serves the namespace's slot.
    Cluster(Vec<u16>),
}

impl Locator {
    /// A connection to the node that holds the namespace now, whose reads and writes give up
    /// after `timeout`: the single server; the primary the first answering sentinel names, when
    /// it answers as a master; the cluster node that answers for the namespace's leader epoch
    /// without a redirection and has it (a master restarted empty that has not yet heard it
    /// lost its slots is not taken for the owner).
    pub fn connect(&self, timeout: Duration) -> redis::RedisResult<redis::Connection> {
        match self {
            Locator::Url(url) => connect(url, timeout),
            Locator::Sentinel(sentinels) => {
                let mut last = not_found("no sentinel answers");
                for port in sentinels {
                    match primary_via(*port, timeout) {
                        Ok(connection) => return Ok(connection),
                        Err(error) => last = error,
                    }
                }
                Err(last)
            }
            Locator::Cluster(nodes) => {
                for port in nodes {
                    let Ok(mut connection) = connect(&local(*port), timeout) else {
                        continue;
                    };
                    if connection.exists::<_, bool>(keys().epoch()) == Ok(true) {
                        return Ok(connection);
                    }
                }
                Err(not_found("no cluster node serves the namespace's slot"))
            }
        }
    }
}

fn local(port: u16) -> String {
    format!("redis://127.0.0.1:{port}/")
}

fn not_found(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, what))
}

/// The primary the sentinel on `port` names, when it answers as a master.
fn primary_via(port: u16, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let mut sentinel = connect(&local(port), timeout)?;
    let address: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(&mut sentinel)?;
    let primary: u16 = address
        .get(1)
        .and_then(|port| port.parse().ok())
        .ok_or_else(|| not_found("the sentinel names no primary"))?;
    let mut connection = connect(&local(primary), timeout)?;
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut connection)?;
    let first: Option<String> = role
        .into_iter()
        .next()
        .and_then(|value| redis::from_redis_value(value).ok());
    if first.as_deref() == Some("master") {
        Ok(connection)
    } else {
        Err(not_found("the primary the sentinel names is no master"))
    }
}
