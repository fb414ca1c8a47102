//! Redis behind Sentinel, for the tests that run redcron through a failover: a primary, its
//! replica and three sentinels, each a real process on a loopback port in its own directory,
//! killed on drop, and the ways to fail the primary over (`kill -9`, then a restart of the old
//! primary, which the sentinels turn into a replica).

use std::time::Duration;

use super::node::{Node, info_field};
use super::wait::wait_until;

/// The name the sentinels monitor the primary under.
pub const MASTER_NAME: &str = "mymaster";

/// How many sentinels must agree that the primary is down before one of them fails it over.
const QUORUM: usize = 2;

/// How long a sentinel waits for an answer before it declares a node down: longer than the
/// second between its attempts to reconnect to a node it lost. Right after a failover it starts
/// counting for the new primary at once but may connect to it only up to a second later, so
/// with 1 s it sometimes declares the new primary down straight away; the other sentinels'
/// answers about the old primary, still fresh, make that a quorum, and it fails the new
/// primary over too, to whatever replica is left (such as the old primary, restarted empty).
const DOWN_AFTER_MS: u64 = 2000;

/// How long `start` waits for the replica to sync and the sentinels to find each other.
const SETTLE: Duration = Duration::from_secs(20);

/// A primary, a replica of it and three sentinels monitoring it as [`MASTER_NAME`].
///
/// The sentinels declare the primary down after 2 s without an answer and fail it over to the
/// replica about 3-4 s after a `kill -9`. They also look at the replicas every second and send
/// their hellos every half second (Sentinel's defaults are 10 s and 2 s), so that the old
/// primary is turned into a replica within about 3 s of its restart instead of up to 20 s.
pub struct SentinelSetup {
    /// The two data nodes: the first started as the primary, the second as its replica. Either
    /// may be the primary after a failover.
    data: Vec<Node>,
    sentinels: Vec<Node>,
    /// The port of the primary that [`SentinelSetup::kill9_primary`] killed last.
    killed: Option<u16>,
}

impl SentinelSetup {
    /// Starts the primary, its replica and the three sentinels, and waits until the replica is
    /// in sync and every sentinel names the primary and knows the replica and the two other
    /// sentinels.
    ///
    /// # Panics
    /// When `redis-server` is not installed (the message says how to install it) or the setup
    /// does not settle within 20 s (the message includes every log).
    pub fn start() -> Self {
        let primary = Node::start("redis-server 1", "redis.conf", &[], |port, dir| {
            data_config(port, dir, None)
        });
        let primary_port = primary.port();
        let replica = Node::start("redis-server 2", "redis.conf", &[], |port, dir| {
            data_config(port, dir, Some(primary_port))
        });
        let sentinels = (1..=3)
            .map(|number| {
                Node::start(
                    &format!("sentinel {number}"),
                    "sentinel.conf",
                    &["--sentinel"],
                    |port, dir| sentinel_config(port, dir, primary_port),
                )
            })
            .collect();
        let setup = Self {
            data: vec![primary, replica],
            sentinels,
            killed: None,
        };
        for sentinel in &setup.sentinels {
            let () = redis::cmd("SENTINEL")
                .arg("DEBUG")
                .arg("info-period")
                .arg(1000)
                .arg("publish-period")
                .arg(500)
                .query(&mut sentinel.connection())
                .unwrap_or_else(|error| panic!("SENTINEL DEBUG: {error}\n{}", setup.log()));
        }
        let mut last = String::new();
        let settled = wait_until(SETTLE, || match setup.settled() {
            Ok(()) => true,
            Err(why) => {
                last = why;
                false
            }
        });
        assert!(
            settled,
            "the Sentinel setup did not settle within {SETTLE:?}: {last}\n{}",
            setup.log()
        );
        setup
    }

    /// The URL redcron connects with: the three sentinels and the master name.
    pub fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinel_ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", sentinels.join(","))
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(Node::port).collect()
    }

    /// The ports of the two data nodes, whatever their roles now.
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(Node::port).collect()
    }

    /// The port of the primary as the first sentinel that answers names it
    /// (`SENTINEL get-master-addr-by-name`).
    ///
    /// # Panics
    /// When no sentinel answers.
    pub fn primary_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(named_primary)
            .unwrap_or_else(|| panic!("no sentinel names a primary\n{}", self.log()))
    }

    /// The port of the data node that is not the primary the sentinels name (it may be down).
    pub fn replica_port(&self) -> u16 {
        let primary = self.primary_port();
        self.data_ports()
            .into_iter()
            .find(|&port| port != primary)
            .expect("two data nodes")
    }

    /// `kill -9`s the process of the primary the sentinels name, and returns its port at once.
    ///
    /// # Panics
    /// When that primary is already down.
    pub fn kill9_primary(&mut self) -> u16 {
        let port = self.primary_port();
        let node = self.data_node_mut(port);
        assert!(
            node.is_running(),
            "the primary on port {port} is down already"
        );
        node.kill9();
        self.killed = Some(port);
        port
    }

    /// Waits up to `limit` until every sentinel names the other data node than the one
    /// [`SentinelSetup::kill9_primary`] killed, and that node answers `ROLE` as a master;
    /// whether it happened.
    ///
    /// # Panics
    /// When no primary was killed.
    pub fn wait_for_failover(&self, limit: Duration) -> bool {
        let killed = self.killed.expect("kill9_primary before wait_for_failover");
        wait_until(limit, || {
            let named: Vec<Option<u16>> = self.sentinels.iter().map(named_primary).collect();
            let Some(Some(port)) = named.first().copied() else {
                return false;
            };
            port != killed
                && named.iter().all(|&other| other == Some(port))
                && self.role(port).as_deref() == Some("master")
        })
    }

    /// Asks a sentinel for a failover while the primary is up (`SENTINEL FAILOVER`), as an
    /// operator does before maintenance, and waits until every sentinel names the replica and
    /// it answers `ROLE` as a master; whether that happened within `limit`.
    pub fn fail_over_gracefully(&self, limit: Duration) -> bool {
        let old = self.primary_port();
        let () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query(&mut self.sentinels[0].connection())
            .expect("SENTINEL FAILOVER");
        wait_until(limit, || {
            let named: Vec<Option<u16>> = self.sentinels.iter().map(named_primary).collect();
            let Some(Some(port)) = named.first().copied() else {
                return false;
            };
            port != old
                && named.iter().all(|&other| other == Some(port))
                && self.role(port).as_deref() == Some("master")
        })
    }

    /// Starts the primary that [`SentinelSetup::kill9_primary`] killed again, on its port and
    /// directory, from its configuration file (which still makes it a primary, with no data:
    /// it kept none on disk), and returns once it answers PING. The sentinels turn it into a
    /// replica of the new primary a few seconds later: see [`SentinelSetup::wait_until_in_sync`].
    ///
    /// # Panics
    /// When no primary was killed.
    pub fn restart_old_primary(&mut self) {
        let killed = self
            .killed
            .take()
            .expect("kill9_primary before restart_old_primary");
        self.data_node_mut(killed).restart();
    }

    /// Waits up to `limit` until every sentinel names the same primary, which answers as a
    /// master, knows one replica and the two other sentinels, and the other data node, if it
    /// runs, is a replica of that primary in sync with it; whether it happened.
    pub fn wait_until_in_sync(&self, limit: Duration) -> bool {
        wait_until(limit, || self.settled().is_ok())
    }

    /// A connection to the primary the sentinels name, for the tests' own reads and writes;
    /// its reads and writes time out after 5 s.
    pub fn primary_connection(&self) -> redis::Connection {
        self.connection(self.primary_port())
    }

    /// A connection to the data node or sentinel on `port`; its reads and writes time out
    /// after 5 s.
    ///
    /// # Panics
    /// When no node of the setup has that port, or it does not answer.
    pub fn connection(&self, port: u16) -> redis::Connection {
        self.data
            .iter()
            .chain(&self.sentinels)
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
            .connection()
    }

    /// The end of every process's log, for failure messages.
    pub fn log(&self) -> String {
        self.data
            .iter()
            .chain(&self.sentinels)
            .map(|node| node.log_tail(40))
            .collect()
    }

    fn data_node_mut(&mut self, port: u16) -> &mut Node {
        self.data
            .iter_mut()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("the sentinels name port {port}, not one of the data nodes"))
    }

    /// The first word of `ROLE` on the data node on `port`, when it answers.
    fn role(&self, port: u16) -> Option<String> {
        let node = self.data.iter().find(|node| node.port() == port)?;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut node.connect().ok()?).ok()?;
        redis::from_redis_value(role.into_iter().next()?).ok()
    }

    /// Whether the setup is as [`SentinelSetup::wait_until_in_sync`] waits for it; if not, why.
    fn settled(&self) -> Result<(), String> {
        let primary = self.primary_port();
        if self.role(primary).as_deref() != Some("master") {
            return Err(format!("port {primary} is not a master"));
        }
        for sentinel in &self.sentinels {
            let named = named_primary(sentinel);
            if named != Some(primary) {
                return Err(format!("{} names {named:?}", sentinel.label()));
            }
            let fields = master_fields(sentinel)
                .ok_or_else(|| format!("{} does not answer SENTINEL MASTER", sentinel.label()))?;
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(key, _)| key == name)
                    .map(|(_, value)| value.as_str())
            };
            if field("flags") != Some("master")
                || field("num-slaves") != Some("1")
                || field("num-other-sentinels") != Some("2")
            {
                return Err(format!("{} sees {fields:?}", sentinel.label()));
            }
        }
        for node in self.data.iter().filter(|node| node.is_running()) {
            if node.port() == primary {
                continue;
            }
            let info = node.info("replication").unwrap_or_default();
            let port = primary.to_string();
            if info_field(&info, "role") != Some("slave")
                || info_field(&info, "master_port") != Some(port.as_str())
                || info_field(&info, "master_link_status") != Some("up")
            {
                return Err(format!(
                    "{} is not in sync with port {primary}: {info}",
                    node.label()
                ));
            }
        }
        Ok(())
    }
}

/// The port of the primary `sentinel` names, when it answers.
fn named_primary(sentinel: &Node) -> Option<u16> {
    let address: Vec<String> = redis::cmd("SENTINEL")
        .arg("get-master-addr-by-name")
        .arg(MASTER_NAME)
        .query(&mut sentinel.connect().ok()?)
        .ok()?;
    address.get(1)?.parse().ok()
}

/// `SENTINEL MASTER` as `sentinel` answers it: field and value pairs.
fn master_fields(sentinel: &Node) -> Option<Vec<(String, String)>> {
    let flat: Vec<String> = redis::cmd("SENTINEL")
        .arg("MASTER")
        .arg(MASTER_NAME)
        .query(&mut sentinel.connect().ok()?)
        .ok()?;
    Some(
        flat.chunks(2)
            .filter_map(|pair| Some((pair.first()?.clone(), pair.get(1)?.clone())))
            .collect(),
    )
}

/// A data node's configuration: no persistence, and a full sync that starts at once instead of
/// 5 s later (the diskless default waits for more replicas). A file rather than arguments, so
/// that what the sentinels make of it (`REPLICAOF` then `CONFIG REWRITE`) survives a restart.
fn data_config(port: u16, dir: &std::path::Path, primary: Option<u16>) -> String {
    let mut config = format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         dir {}\n\
         logfile redis.log\n\
         save \"\"\n\
         appendonly no\n\
         repl-diskless-sync-delay 0\n",
        dir.display()
    );
    if let Some(primary) = primary {
        config.push_str(&format!("replicaof 127.0.0.1 {primary}\n"));
    }
    config
}

/// A sentinel's configuration, which it rewrites as it learns the topology.
fn sentinel_config(port: u16, dir: &std::path::Path, primary: u16) -> String {
    format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         dir {}\n\
         logfile redis.log\n\
         sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} {QUORUM}\n\
         sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
         sentinel failover-timeout {MASTER_NAME} 3000\n\
         sentinel parallel-syncs {MASTER_NAME} 1\n",
        dir.display()
    )
}
