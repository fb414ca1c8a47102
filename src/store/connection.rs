//! The store's connections, whatever the [`Topology`]: one shared, multiplexed connection for
//! commands and scripts, and the dedicated ones a blocking wait or a subscription needs.
//!
//! - One server: the `redis` crate's connection manager, which reconnects by itself.
//! - Sentinel: a connection to the primary the sentinels name. An error that says the primary
//!   may have changed (the connection broke or timed out, or a `READONLY` reply from a primary
//!   demoted to replica) forgets it, and so does a `+switch-master` the sentinels announce; the
//!   next call asks the sentinels again, no more often than a backoff that doubles up to
//!   [`MAX_LOOKUP_DELAY`]. A call made while no primary is known fails at once: the engine
//!   retries its calls on its own clock.
//! - Cluster: the `redis` crate's cluster connection, which follows `MOVED` and `ASK`, waits out
//!   `TRYAGAIN` and `CLUSTERDOWN`, and reconnects to a promoted replica. Every key of a namespace
//!   has the `{ns}` hash tag, so every call of a namespace goes to the master of one slot.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, Value};
use tokio::sync::Mutex;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::topology::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT, SentinelTarget, Topology};

/// The longest pause between reconnection attempts after Redis went away.
pub(super) const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(5);

/// The first pause before asking the sentinels again after they named no reachable primary.
const FIRST_LOOKUP_DELAY: Duration = Duration::from_millis(100);

/// The longest: asking the sentinels costs little, and a primary found late after a failover
/// delays every fire due meanwhile.
const MAX_LOOKUP_DELAY: Duration = Duration::from_secs(1);

/// How many replicas a write must reach before it counts as done, and how long it may take.
///
/// After every script and transaction the store sends `WAIT replicas timeout` on the same
/// connection; a write that reached fewer replicas in time is an error
/// ([`NOT_REPLICATED`]), which the caller treats as any failed call: it retries (every script
/// is idempotent by run id, attempt and lease), or the run's lease settles it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicatedWrites {
    /// The replicas each write must reach.
    pub replicas: u32,
    /// How long a write may take to reach them.
    pub timeout: Duration,
}

/// The code of the error a write that did not reach enough replicas in time gives.
pub const NOT_REPLICATED: &str = "NOTREPLICATED";

/// The store's shared connection: cloned by every call, one connection underneath.
#[derive(Clone)]
pub(super) struct Connection {
    link: Link,
    replicated: Option<ReplicatedWrites>,
    /// A key of the namespace: where a keyless command goes on a cluster.
    namespace_key: Arc<str>,
}

#[derive(Clone)]
enum Link {
    /// To one server.
    Single(ConnectionManager),
    /// To the primary the sentinels name.
    Sentinel(SentinelConnection),
    /// To a Redis Cluster.
    Cluster(ClusterConnection),
}

impl Connection {
    /// Opens the shared connection of `topology` for the namespace whose keys start with
    /// `namespace_key`, and checks that it answers.
    pub(super) async fn open(
        topology: &Topology,
        namespace_key: &str,
        replicated: Option<ReplicatedWrites>,
    ) -> Result<Self, RedisError> {
        let link = match topology {
            Topology::Single(client) => {
                // The connection manager retries its first connection for about 10 s; a Redis
                // that is not there at all is said within the connection timeout instead.
                let mut probe = client
                    .get_multiplexed_async_connection_with_config(&timeouts(CONNECTION_TIMEOUT))
                    .await?;
                let _: String = redis::cmd("PING").query_async(&mut probe).await?;
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_response_timeout(Some(RESPONSE_TIMEOUT))
                    .set_connection_timeout(Some(CONNECTION_TIMEOUT))
                    .set_max_delay(MAX_RECONNECT_DELAY);
                Link::Single(client.get_connection_manager_with_config(config).await?)
            }
            Topology::Sentinel(target) => Link::Sentinel(SentinelConnection::open(target).await?),
            Topology::Cluster(target) => Link::Cluster(target.client.get_async_connection().await?),
        };
        let mut connection = Self {
            link,
            replicated,
            namespace_key: namespace_key.into(),
        };
        let _: String = connection.query_keyless(&redis::cmd("PING")).await?;
        Ok(connection)
    }

    /// Sends a command that names no key (`TIME`, `CONFIG GET`, `SCAN`) to the server that holds
    /// the namespace: on a cluster, the master of its slot, whose clock and settings the scripts
    /// see.
    pub(super) async fn query_keyless<T: FromRedisValue>(
        &mut self,
        command: &Cmd,
    ) -> Result<T, RedisError> {
        let value = self.send_keyless(command).await?;
        T::from_redis_value(value).map_err(RedisError::from)
    }

    async fn send_keyless(&mut self, command: &Cmd) -> Result<Value, RedisError> {
        match &mut self.link {
            Link::Cluster(cluster) => {
                let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                    Route::with_key(self.namespace_key.as_bytes(), SlotAddr::Master),
                ));
                cluster.route_command(command.clone(), route).await
            }
            Link::Single(connection) => connection.req_packed_command(command).await,
            Link::Sentinel(connection) => connection.send(command).await,
        }
    }

    /// How many times the connection was opened anew to a server that may be another one
    /// (Sentinel: each connection to the primary the sentinels name); 0 where that is not
    /// known. What was read from one server before it changed may not hold on the next.
    pub(super) fn generation(&self) -> u64 {
        match &self.link {
            Link::Sentinel(connection) => connection.shared.opened.load(Ordering::Acquire),
            Link::Single(_) | Link::Cluster(_) => 0,
        }
    }

    /// The same connection, whose scripts do not wait for the replicas: for a caller that must
    /// read a write's reply before it learns whether the write was replicated
    /// ([`Connection::replicate`]).
    pub(super) fn without_waiting(&self) -> Self {
        Self {
            replicated: None,
            ..self.clone()
        }
    }

    /// Waits until what this connection wrote reached the replicas asked for; an error when it
    /// did not in time.
    pub(super) async fn replicate(&mut self) -> Result<(), RedisError> {
        let Some(ReplicatedWrites { replicas, timeout }) = self.replicated else {
            return Ok(());
        };
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas)
            .arg(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
        let reached: u32 = self.query_keyless(&wait).await?;
        if reached >= replicas {
            return Ok(());
        }
        Err(RedisError::from((
            redis::ErrorKind::Io,
            NOT_REPLICATED,
            format!(
                "the write reached {reached} of {replicas} replicas within {} ms",
                timeout.as_millis()
            ),
        )))
    }
}

/// Whether `command` may change data that a failover must not lose: a script.
fn is_script(command: &Cmd) -> bool {
    command.args_iter().next().is_some_and(|name| {
        matches!(name, redis::Arg::Simple(name)
            if name.eq_ignore_ascii_case(b"EVALSHA") || name.eq_ignore_ascii_case(b"EVAL"))
    })
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, command: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let value = match &mut self.link {
                Link::Single(connection) => connection.req_packed_command(command).await,
                Link::Sentinel(connection) => connection.send(command).await,
                Link::Cluster(connection) => connection.req_packed_command(command).await,
            }?;
            if is_script(command) {
                self.replicate().await?;
            }
            Ok(value)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let values = match &mut self.link {
                Link::Single(connection) => {
                    connection
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
                Link::Sentinel(connection) => {
                    connection.send_pipeline(pipeline, offset, count).await
                }
                Link::Cluster(connection) => {
                    connection
                        .req_packed_commands(pipeline, offset, count)
                        .await
                }
            }?;
            if pipeline.is_transaction() || pipeline.cmd_iter().any(is_script) {
                self.replicate().await?;
            }
            Ok(values)
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(connection) => connection.get_db(),
            Link::Sentinel(connection) => connection.db,
            Link::Cluster(connection) => connection.get_db(),
        }
    }
}

/// A connection of its own, for a call that blocks it (`BZPOPMIN`): it answers within `timeout`
/// plus the ordinary response timeout.
pub(super) enum BlockingConnection {
    /// To one server or to the primary the sentinels named when it was opened.
    Single(MultiplexedConnection),
    /// To a Redis Cluster.
    Cluster(ClusterConnection),
}

impl BlockingConnection {
    /// Opens one for `topology`.
    pub(super) async fn open(topology: &Topology, timeout: Duration) -> Result<Self, RedisError> {
        let response = timeout + RESPONSE_TIMEOUT;
        match topology {
            Topology::Single(client) => Ok(Self::Single(
                client
                    .get_multiplexed_async_connection_with_config(&timeouts(response))
                    .await?,
            )),
            Topology::Sentinel(target) => Ok(Self::Single(
                primary(target)
                    .await?
                    .get_multiplexed_async_connection_with_config(&timeouts(response))
                    .await?,
            )),
            Topology::Cluster(target) => {
                let config = redis::cluster::ClusterConfig::new()
                    .set_connection_timeout(CONNECTION_TIMEOUT)
                    .set_response_timeout(response);
                Ok(Self::Cluster(
                    target
                        .client
                        .get_async_connection_with_config(config)
                        .await?,
                ))
            }
        }
    }
}

impl ConnectionLike for BlockingConnection {
    fn req_packed_command<'a>(&'a mut self, command: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(connection) => connection.req_packed_command(command),
            Self::Cluster(connection) => connection.req_packed_command(command),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(connection) => connection.req_packed_commands(pipeline, offset, count),
            Self::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(connection) => connection.get_db(),
            Self::Cluster(connection) => connection.get_db(),
        }
    }
}

/// A subscription connection for `topology`. On a cluster it goes to the first seed node that
/// answers: a `PUBLISH` on any node of a cluster reaches the subscribers of every node.
pub(super) async fn pubsub(topology: &Topology) -> Result<redis::aio::PubSub, RedisError> {
    match topology {
        Topology::Single(client) => client.get_async_pubsub().await,
        Topology::Sentinel(target) => primary(target).await?.get_async_pubsub().await,
        Topology::Cluster(target) => {
            let mut last_error = None;
            for seed in &target.seeds {
                match seed.get_async_pubsub().await {
                    Ok(pubsub) => return Ok(pubsub),
                    Err(error) => last_error = Some(error),
                }
            }
            Err(last_error.unwrap_or_else(|| {
                RedisError::from((redis::ErrorKind::InvalidClientConfig, "no seed nodes"))
            }))
        }
    }
}

fn timeouts(response: Duration) -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECTION_TIMEOUT))
        .set_response_timeout(Some(response))
}

/// A client for the primary the sentinels of `target` name now, checked to be a primary.
async fn primary(target: &SentinelTarget) -> Result<redis::Client, RedisError> {
    let mut sentinels = target.client()?;
    let lookup = sentinels.async_get_client();
    match tokio::time::timeout(CONNECTION_TIMEOUT * 2, lookup).await {
        // The crate's own message ("Master with given name not found") names neither.
        Ok(Err(error)) if error.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel => {
            Err(RedisError::from((
                redis::ErrorKind::MasterNameNotFoundBySentinel,
                "no sentinel that answered watches a primary of that name",
                format!(
                    "{:?} (the name after the last / of the URL) on {}",
                    target.master,
                    target.sentinels.join(",")
                ),
            )))
        }
        Ok(found) => found,
        Err(_) => Err(RedisError::from((
            redis::ErrorKind::Io,
            "the sentinels did not answer in time",
            target.sentinels.join(","),
        ))),
    }
}

/// The connection to the primary of a Sentinel group: cloned by every call, one connection to
/// the primary underneath.
#[derive(Clone)]
pub(super) struct SentinelConnection {
    shared: Arc<SentinelShared>,
    db: i64,
}

struct SentinelShared {
    target: SentinelTarget,
    primary: Mutex<Primary>,
    /// How many connections to a primary were opened: read without the lock.
    opened: AtomicU64,
}

/// The primary as the connection knows it.
struct Primary {
    /// The connection to it and the number it was opened under; none once it is forgotten.
    current: Option<(u64, MultiplexedConnection)>,
    /// How many connections were opened.
    opened: u64,
    /// The address last connected to, to say when the primary moved.
    address: Option<String>,
    /// No lookup before this, after one failed.
    next_lookup: Option<Instant>,
    /// The pause after the next failed lookup.
    backoff: Duration,
}

impl SentinelConnection {
    async fn open(target: &SentinelTarget) -> Result<Self, RedisError> {
        let shared = Arc::new(SentinelShared {
            target: target.clone(),
            opened: AtomicU64::new(0),
            primary: Mutex::new(Primary {
                current: None,
                opened: 0,
                address: None,
                next_lookup: None,
                backoff: FIRST_LOOKUP_DELAY,
            }),
        });
        let connection = Self {
            db: target.db(),
            shared: shared.clone(),
        };
        connection.connected().await?;
        tokio::spawn(watch_switches(Arc::downgrade(&shared)));
        Ok(connection)
    }

    /// The connection to the primary, looked up when none is known.
    async fn connected(&self) -> Result<(u64, MultiplexedConnection), RedisError> {
        let mut primary = self.shared.primary.lock().await;
        if let Some((opened, connection)) = &primary.current {
            return Ok((*opened, connection.clone()));
        }
        if let Some(at) = primary.next_lookup
            && Instant::now() < at
        {
            return Err(RedisError::from((
                redis::ErrorKind::Io,
                "no primary known: the sentinels are asked again shortly",
                self.shared.target.master.clone(),
            )));
        }
        match self.look_up().await {
            Ok((address, connection)) => {
                if primary.address.is_none() {
                    debug!(
                        master = %self.shared.target.master,
                        primary = %address,
                        "connected to the primary the sentinels name"
                    );
                } else if primary.address.as_ref() != Some(&address) {
                    info!(
                        master = %self.shared.target.master,
                        primary = %address,
                        "the sentinels name another primary: connected to it"
                    );
                }
                primary.opened += 1;
                self.shared.opened.store(primary.opened, Ordering::Release);
                primary.address = Some(address);
                primary.current = Some((primary.opened, connection.clone()));
                primary.next_lookup = None;
                primary.backoff = FIRST_LOOKUP_DELAY;
                Ok((primary.opened, connection))
            }
            Err(error) => {
                primary.next_lookup = Some(Instant::now() + primary.backoff);
                primary.backoff = (primary.backoff * 2).min(MAX_LOOKUP_DELAY);
                Err(error)
            }
        }
    }

    async fn look_up(&self) -> Result<(String, MultiplexedConnection), RedisError> {
        let client = primary(&self.shared.target).await?;
        let address = client.get_connection_info().addr().to_string();
        let connection = client
            .get_multiplexed_async_connection_with_config(&timeouts(RESPONSE_TIMEOUT))
            .await?;
        Ok((address, connection))
    }

    /// Forgets the connection opened as number `opened`, unless it was replaced already.
    async fn forget(&self, opened: u64) {
        let mut primary = self.shared.primary.lock().await;
        if primary
            .current
            .as_ref()
            .is_some_and(|(current, _)| *current == opened)
        {
            primary.current = None;
        }
    }

    async fn send(&self, command: &Cmd) -> Result<Value, RedisError> {
        let (opened, mut connection) = self.connected().await?;
        let answer = connection.req_packed_command(command).await;
        self.check(opened, answer).await
    }

    async fn send_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> Result<Vec<Value>, RedisError> {
        let (opened, mut connection) = self.connected().await?;
        let answer = connection
            .req_packed_commands(pipeline, offset, count)
            .await;
        self.check(opened, answer).await
    }

    async fn check<T>(&self, opened: u64, answer: Result<T, RedisError>) -> Result<T, RedisError> {
        if let Err(error) = &answer
            && primary_may_have_changed(error)
        {
            self.forget(opened).await;
        }
        answer
    }
}

/// Whether `error` says the primary may be another server now.
fn primary_may_have_changed(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_unrecoverable_error()
        || error.code() == Some("READONLY")
}

/// Forgets the primary whenever the sentinels announce a new one for the master (so that a
/// primary demoted without closing its connections is left at once), for as long as a
/// connection uses `shared`.
async fn watch_switches(shared: Weak<SentinelShared>) {
    /// How often the watch checks that a connection still uses it.
    const CHECK_EVERY: Duration = Duration::from_secs(5);
    let mut failures = 0u32;
    loop {
        let Some(target) = shared.upgrade().map(|shared| shared.target.clone()) else {
            return;
        };
        let subscription = async {
            let mut sentinels = target.client()?;
            let client = sentinels.async_get_sentinel_client().await?;
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, RedisError>(pubsub)
        };
        let pubsub = match tokio::time::timeout(CONNECTION_TIMEOUT * 2, subscription).await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(error)) => {
                failures += 1;
                if failures == 1 {
                    warn!(%error, master = %target.master, "cannot watch the sentinels for a new primary; still asked on errors");
                }
                tokio::time::sleep(MAX_RECONNECT_DELAY).await;
                continue;
            }
            Err(_) => {
                tokio::time::sleep(MAX_RECONNECT_DELAY).await;
                continue;
            }
        };
        failures = 0;
        let mut messages = pubsub.into_on_message();
        loop {
            match tokio::time::timeout(CHECK_EVERY, messages.next()).await {
                Err(_) => {
                    if shared.strong_count() == 0 {
                        return;
                    }
                }
                Ok(None) => break,
                Ok(Some(message)) => {
                    let payload: String = message.get_payload().unwrap_or_default();
                    // "<master> <old ip> <old port> <new ip> <new port>"
                    if payload.split(' ').next() != Some(target.master.as_str()) {
                        continue;
                    }
                    let Some(shared) = shared.upgrade() else {
                        return;
                    };
                    info!(master = %target.master, switch = %payload, "the sentinels switched the primary");
                    let mut primary = shared.primary.lock().await;
                    primary.current = None;
                    primary.next_lookup = None;
                    primary.backoff = FIRST_LOOKUP_DELAY;
                }
            }
        }
    }
}
