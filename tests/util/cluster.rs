//! Redis Cluster, for the tests that run redcron across shards: three masters with a replica
//! each, real processes on loopback ports in their own directories, killed on drop, and the
//! ways to move a namespace's slot under running clients (a slot migration, a master's
//! `kill -9` and its replica's promotion).

use std::ops::RangeInclusive;
use std::process::Command;
use std::time::Duration;

use super::node::{Node, info_field};
use super::redis_server::free_port;
use super::wait::wait_until;

/// How many nodes: three masters, three replicas.
const NODES: usize = 6;

/// How long `start` waits for the cluster to form and the replicas to sync.
const SETTLE: Duration = Duration::from_secs(30);

/// How many keys one `MIGRATE` moves.
const MIGRATE_BATCH: usize = 100;

/// Six `redis-server --cluster-enabled yes` nodes made into a cluster of three masters with one
/// replica each by `redis-cli --cluster create`.
///
/// A node is declared failed after 2 s without an answer (`cluster-node-timeout 2000`), and its
/// replica takes its slots over about 3-4 s after a `kill -9`.
pub struct RedisCluster {
    nodes: Vec<Node>,
    /// What `redis-cli --cluster create` printed.
    created: String,
    /// The port of the master that [`RedisCluster::kill9_master_of_slot`] killed last.
    killed: Option<u16>,
}

/// One line of `CLUSTER NODES`: a node as another node (or itself) sees it.
#[derive(Debug)]
struct Entry {
    id: String,
    port: u16,
    flags: Vec<String>,
    /// The id of its master, when it is a replica.
    master: Option<String>,
    slots: Vec<RangeInclusive<u16>>,
    /// Slots it is importing or migrating (`[slot-<-id]`, `[slot->-id]`, on its own line only).
    open_slots: Vec<u16>,
}

impl Entry {
    fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|each| each == flag)
    }

    fn is_master(&self) -> bool {
        self.has_flag("master")
    }

    fn serves(&self, slot: u16) -> bool {
        self.is_master() && self.slots.iter().any(|range| range.contains(&slot))
    }
}

impl RedisCluster {
    /// Starts six nodes, makes them a cluster with `redis-cli --cluster create
    /// --cluster-replicas 1`, and waits until every node says `cluster_state:ok`, every node
    /// sees the same three masters owning every slot and a replica for each, and every replica
    /// is in sync.
    ///
    /// # Panics
    /// When `redis-server` or `redis-cli` is not installed (the message says how to install
    /// them) or the cluster does not form within 30 s (the message includes every log).
    pub fn start() -> Self {
        let nodes: Vec<Node> = (1..=NODES)
            .map(|number| {
                Node::start(
                    &format!("cluster node {number}"),
                    "redis.conf",
                    &[],
                    cluster_config,
                )
            })
            .collect();
        let output = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(
                nodes
                    .iter()
                    .map(|node| format!("127.0.0.1:{}", node.port())),
            )
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot run redis-cli ({error}): these tests need a real Redis. Install it \
                     with `sudo apt-get install -y redis-server redis-tools` (Debian/Ubuntu) or \
                     your system's package manager"
                )
            });
        let created = format!(
            "--- redis-cli --cluster create ---\n{}{}\n",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = Self {
            nodes,
            created,
            killed: None,
        };
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed\n{}",
            cluster.log()
        );
        let mut last = String::new();
        let formed = wait_until(SETTLE, || match cluster.formed() {
            Ok(()) => true,
            Err(why) => {
                last = why;
                false
            }
        });
        assert!(
            formed,
            "the cluster did not form within {SETTLE:?}: {last}\n{}",
            cluster.log()
        );
        cluster
    }

    /// The URL redcron connects with: three of the nodes, as seeds.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..3]
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The ports of all six nodes, killed ones included.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(Node::port).collect()
    }

    /// The slot of a key (`CLUSTER KEYSLOT`); a hash tag `{ns}` hashes as `ns`, so the slot of
    /// `{ns}` is the slot of every key `{ns}:...` of namespace `ns`.
    pub fn slot_of(&self, key_or_hashtag: &str) -> u16 {
        let mut connection = self.any_running().connection();
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key_or_hashtag)
            .query(&mut connection)
            .unwrap_or_else(|error| panic!("CLUSTER KEYSLOT: {error}\n{}", self.log()))
    }

    /// The port of the master that owns `slot` in the view of most running nodes.
    ///
    /// # Panics
    /// When no running node answers, or none knows an owner.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        let mut votes: Vec<(u16, usize)> = Vec::new();
        for (_, view) in self.views() {
            if let Some(owner) = owner_in(&view, slot) {
                match votes.iter_mut().find(|(port, _)| *port == owner) {
                    Some((_, count)) => *count += 1,
                    None => votes.push((owner, 1)),
                }
            }
        }
        votes
            .into_iter()
            .max_by_key(|&(_, count)| count)
            .map(|(port, _)| port)
            .unwrap_or_else(|| panic!("no node knows who owns slot {slot}\n{}", self.log()))
    }

    /// The ports of the running masters that own slots, each by its own account, in order.
    pub fn masters(&self) -> Vec<u16> {
        let mut masters: Vec<u16> = self
            .views()
            .into_iter()
            .filter(|(_, view)| {
                view.iter().any(|entry| {
                    entry.has_flag("myself") && entry.is_master() && !entry.slots.is_empty()
                })
            })
            .map(|(port, _)| port)
            .collect();
        masters.sort_unstable();
        masters
    }

    /// The port of a replica of the master on `master`, as the first running node that answers
    /// sees it.
    pub fn replica_of(&self, master: u16) -> Option<u16> {
        let (_, view) = self.views().into_iter().next()?;
        let id = &view.iter().find(|entry| entry.port == master)?.id;
        view.iter()
            .find(|entry| entry.master.as_ref() == Some(id) && !entry.has_flag("fail"))
            .map(|entry| entry.port)
    }

    /// Two namespaces, `nsN` and `nsM`, whose keys (`{nsN}:...`) live on different masters.
    pub fn namespaces_on_different_masters(&self) -> (String, String) {
        let first = "ns0".to_owned();
        let first_master = self.master_of_slot(self.slot_of(&format!("{{{first}}}")));
        let second = (1..1000)
            .map(|number| format!("ns{number}"))
            .find(|name| self.master_of_slot(self.slot_of(&format!("{{{name}}}"))) != first_master)
            .expect("a namespace on another master");
        (first, second)
    }

    /// `kill -9`s the process of the master that owns `slot`, and returns its port at once.
    pub fn kill9_master_of_slot(&mut self, slot: u16) -> u16 {
        let port = self.master_of_slot(slot);
        let node = self.node_mut(port);
        assert!(
            node.is_running(),
            "the master on port {port} is down already"
        );
        node.kill9();
        self.killed = Some(port);
        port
    }

    /// Waits up to `limit` until every running node says `cluster_state:ok` and names the same
    /// owner of `slot`, not the master [`RedisCluster::kill9_master_of_slot`] killed, and that
    /// owner answers `ROLE` as a master; whether it happened.
    ///
    /// # Panics
    /// When no master was killed.
    pub fn wait_for_slot_served_by_new_master(&self, slot: u16, limit: Duration) -> bool {
        let killed = self
            .killed
            .expect("kill9_master_of_slot before wait_for_slot_served_by_new_master");
        wait_until(limit, || {
            let running = self.nodes.iter().filter(|node| node.is_running()).count();
            let views = self.views();
            let owners: Vec<Option<u16>> =
                views.iter().map(|(_, view)| owner_in(view, slot)).collect();
            let Some(Some(owner)) = owners.first().copied() else {
                return false;
            };
            views.len() == running
                && owner != killed
                && owners.iter().all(|&other| other == Some(owner))
                && self
                    .nodes
                    .iter()
                    .filter(|node| node.is_running())
                    .all(|node| cluster_state(node).as_deref() == Some("ok"))
                && self.role(owner).as_deref() == Some("master")
        })
    }

    /// Starts the master that [`RedisCluster::kill9_master_of_slot`] killed again, on its port
    /// and directory, from its configuration (its `nodes.conf` still names the cluster), and
    /// returns its port once it answers PING. With no data kept on disk, it learns from the
    /// other nodes that its replica took its slots over and becomes a replica of it: see
    /// [`RedisCluster::wait_until_whole`].
    ///
    /// # Panics
    /// When no master was killed, or it does not come up within 10 s.
    pub fn restart_killed_master(&mut self) -> u16 {
        let killed = self
            .killed
            .take()
            .expect("kill9_master_of_slot before restart_killed_master");
        self.node_mut(killed).restart();
        killed
    }

    /// Waits up to `limit` until the cluster is as [`RedisCluster::start`] leaves it: every
    /// node up and seen by every other without a failure flag, three masters owning every
    /// slot with a replica each, every replica in sync; whether it happened.
    pub fn wait_until_whole(&self, limit: Duration) -> bool {
        wait_until(limit, || self.formed().is_ok())
    }

    /// Moves `slot` and its keys from the master that owns it to the master on `to`, as
    /// `redis-cli --cluster reshard` moves slots, while clients may keep using them: `CLUSTER
    /// SETSLOT IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of the keys in
    /// batches, then `CLUSTER SETSLOT NODE` on the target, the source and every other master.
    /// Returns once every running node names `to` as the owner and no node has the slot open.
    ///
    /// # Panics
    /// When `to` is not a running master, a command fails, or the nodes do not agree on the
    /// new owner within 10 s.
    pub fn migrate_slot(&self, slot: u16, to: u16) {
        self.migrate(slot, to, MIGRATE_BATCH, Duration::ZERO);
    }

    /// As [`RedisCluster::migrate_slot`], one key at a time with `pause` after each: a slot
    /// half moved for as long as a large namespace's would be.
    pub fn migrate_slot_key_by_key(&self, slot: u16, to: u16, pause: Duration) {
        self.migrate(slot, to, 1, pause);
    }

    fn migrate(&self, slot: u16, to: u16, batch: usize, pause: Duration) {
        let from = self.master_of_slot(slot);
        if from == to {
            return;
        }
        let masters = self.masters();
        assert!(
            masters.contains(&to),
            "port {to} is not one of the masters {masters:?}"
        );
        let mut source = self.connection(from);
        let mut target = self.connection(to);
        let from_id = self.node_id(from);
        let to_id = self.node_id(to);
        let fail = |what: &str, error: redis::RedisError| -> ! {
            panic!(
                "migrating slot {slot} from port {from} to {to}: {what}: {error}\n{}",
                self.log()
            )
        };
        let setslot = |connection: &mut redis::Connection, state: &str, id: &str| {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(state)
                .arg(id)
                .query::<()>(connection)
        };
        setslot(&mut target, "IMPORTING", &from_id)
            .unwrap_or_else(|error| fail("IMPORTING", error));
        setslot(&mut source, "MIGRATING", &to_id).unwrap_or_else(|error| fail("MIGRATING", error));
        loop {
            let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(batch)
                .query(&mut source)
                .unwrap_or_else(|error| fail("GETKEYSINSLOT", error));
            if keys.is_empty() {
                break;
            }
            // "NOKEY" when clients deleted them all meanwhile.
            let _: redis::Value = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut source)
                .unwrap_or_else(|error| fail("MIGRATE", error));
            std::thread::sleep(pause);
        }
        setslot(&mut target, "NODE", &to_id)
            .unwrap_or_else(|error| fail("NODE on the target", error));
        setslot(&mut source, "NODE", &to_id)
            .unwrap_or_else(|error| fail("NODE on the source", error));
        for other in masters
            .into_iter()
            .filter(|&port| port != from && port != to)
        {
            setslot(&mut self.connection(other), "NODE", &to_id)
                .unwrap_or_else(|error| fail("NODE on another master", error));
        }
        let running = self.nodes.iter().filter(|node| node.is_running()).count();
        let moved = wait_until(Duration::from_secs(10), || {
            let views = self.views();
            views.len() == running
                && views.iter().all(|(_, view)| {
                    owner_in(view, slot) == Some(to)
                        && view.iter().all(|entry| !entry.open_slots.contains(&slot))
                })
        });
        assert!(
            moved,
            "the nodes do not all name port {to} as the owner of slot {slot} 10 s after its \
             migration\n{}",
            self.log()
        );
    }

    /// A connection to the node on `port` (it follows no redirection); its reads and writes
    /// time out after 5 s.
    ///
    /// # Panics
    /// When no node of the cluster has that port, or it does not answer.
    pub fn connection(&self, port: u16) -> redis::Connection {
        self.node(port).connection()
    }

    /// What `redis-cli --cluster create` printed and the end of every node's log, for failure
    /// messages.
    pub fn log(&self) -> String {
        let mut log = self.created.clone();
        log.extend(self.nodes.iter().map(|node| node.log_tail(40)));
        log
    }

    fn node(&self, port: u16) -> &Node {
        self.nodes
            .iter()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"))
    }

    fn any_running(&self) -> &Node {
        self.nodes
            .iter()
            .find(|node| node.is_running())
            .expect("a running cluster node")
    }

    fn node_id(&self, port: u16) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.connection(port))
            .unwrap_or_else(|error| panic!("CLUSTER MYID on port {port}: {error}\n{}", self.log()))
    }

    /// The first word of `ROLE` on the node on `port`, when it answers.
    fn role(&self, port: u16) -> Option<String> {
        let node = self.nodes.iter().find(|node| node.port() == port)?;
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut node.connect().ok()?).ok()?;
        redis::from_redis_value(role.into_iter().next()?).ok()
    }

    /// `CLUSTER NODES` of every running node that answers, with its port.
    fn views(&self) -> Vec<(u16, Vec<Entry>)> {
        self.nodes
            .iter()
            .filter(|node| node.is_running())
            .filter_map(|node| {
                let nodes: String = redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query(&mut node.connect().ok()?)
                    .ok()?;
                Some((node.port(), nodes.lines().filter_map(parse_entry).collect()))
            })
            .collect()
    }

    /// Whether the cluster is as `start` waits for it; if not, why.
    fn formed(&self) -> Result<(), String> {
        let views = self.views();
        if views.len() != NODES {
            return Err(format!(
                "{} of {NODES} nodes answer CLUSTER NODES",
                views.len()
            ));
        }
        let owners = |view: &[Entry]| -> Vec<(u16, Vec<RangeInclusive<u16>>)> {
            let mut owners: Vec<_> = view
                .iter()
                .filter(|entry| entry.is_master() && !entry.slots.is_empty())
                .map(|entry| (entry.port, entry.slots.clone()))
                .collect();
            owners.sort_by_key(|(port, _)| *port);
            owners
        };
        let first = owners(&views[0].1);
        for (port, view) in &views {
            let replicas = view
                .iter()
                .filter(|entry| entry.has_flag("slave") && entry.master.is_some())
                .count();
            let troubled = view.iter().find(|entry| {
                ["fail", "fail?", "handshake", "noaddr"]
                    .iter()
                    .any(|flag| entry.has_flag(flag))
            });
            let covered: usize = view
                .iter()
                .filter(|entry| entry.is_master())
                .flat_map(|entry| entry.slots.iter())
                .map(|range| usize::from(range.end() - range.start()) + 1)
                .sum();
            if view.len() != NODES
                || replicas != NODES / 2
                || troubled.is_some()
                || covered != 16384
            {
                return Err(format!("port {port} sees {view:?}"));
            }
            if owners(view) != first {
                return Err(format!(
                    "port {port} sees other owners than port {}",
                    views[0].0
                ));
            }
        }
        for node in &self.nodes {
            let state = cluster_state(node);
            if state.as_deref() != Some("ok") {
                return Err(format!("{} has cluster_state {state:?}", node.label()));
            }
            let info = node.info("replication").unwrap_or_default();
            if info_field(&info, "role") == Some("slave")
                && info_field(&info, "master_link_status") != Some("up")
            {
                return Err(format!("{} is not in sync: {info}", node.label()));
            }
        }
        Ok(())
    }
}

/// `cluster_state` in the node's `CLUSTER INFO`, when it answers.
fn cluster_state(node: &Node) -> Option<String> {
    let info: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(&mut node.connect().ok()?)
        .ok()?;
    info_field(&info, "cluster_state").map(str::to_owned)
}

/// The port of the master serving `slot` in a node's view (a failed master still serves it
/// there until its replica takes over).
fn owner_in(view: &[Entry], slot: u16) -> Option<u16> {
    view.iter()
        .find(|entry| entry.serves(slot))
        .map(|entry| entry.port)
}

/// One line of `CLUSTER NODES`: `id ip:port@bus[,hostname] flags master ping pong epoch link
/// slot...`.
fn parse_entry(line: &str) -> Option<Entry> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let address = fields.get(1)?;
    let port = address
        .split('@')
        .next()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()?;
    let mut slots = Vec::new();
    let mut open_slots = Vec::new();
    for field in fields.get(8..).unwrap_or_default() {
        if let Some(open) = field.strip_prefix('[') {
            open_slots.push(open.split('-').next()?.parse().ok()?);
        } else if let Some((start, end)) = field.split_once('-') {
            slots.push(start.parse().ok()?..=end.parse().ok()?);
        } else {
            let slot = field.parse().ok()?;
            slots.push(slot..=slot);
        }
    }
    Some(Entry {
        id: (*fields.first()?).to_owned(),
        port,
        flags: fields.get(2)?.split(',').map(str::to_owned).collect(),
        master: Some(*fields.get(3)?)
            .filter(|&master| master != "-")
            .map(str::to_owned),
        slots,
        open_slots,
    })
}

/// A node's configuration: no persistence, a full sync that starts at once, and its cluster
/// bus on a port of its own (not port + 10000, which may be taken or beyond 65535).
fn cluster_config(port: u16, dir: &std::path::Path) -> String {
    format!(
        "port {port}\n\
         bind 127.0.0.1\n\
         dir {}\n\
         logfile redis.log\n\
         save \"\"\n\
         appendonly no\n\
         repl-diskless-sync-delay 0\n\
         cluster-enabled yes\n\
         cluster-config-file nodes.conf\n\
         cluster-node-timeout 2000\n\
         cluster-port {}\n",
        dir.display(),
        free_port()
    )
}
