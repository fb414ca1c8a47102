//! The only code that talks to Redis: one typed async function per script or command.
//!
//! Every state change of a run is one Lua script (`lua/`), so no crash between two commands can
//! lose or duplicate a run; see `DESIGN.md` for the data model and the run state machine.
//!
//! This module holds the connection and the errors; the rest is in rooms, one per family of
//! scripts, each an `impl Store` block beside the types it returns:
//!
//! - `clock`: Redis's clock, or a manual one for tests;
//! - `leadership`: the fenced leader lease;
//! - `planning`: the leader's planned fires and cursors;
//! - `declarations`: what replicas declare and the definitions the leader publishes;
//! - `promotion`: due runs made ready;
//! - `claiming`: ready runs claimed, their leases and job slots;
//! - `finishing`: outcomes recorded, runs owned and leases expired;
//! - `live`: a running run's output so far, published and read;
//! - `enqueueing`: ad-hoc and delayed runs;
//! - `triggering`: triggers of every-replica jobs, a fire now on each target;
//! - `dead`: the dead letters;
//! - `damage`: entries that are no run id, job slots no run holds, damaged records;
//! - `damaged_names`: names that are not UTF-8 in the indexes of job and replica names;
//! - `wording`: what each store operation does, in the words its errors say;
//! - `notices`: the notices owed, taken and settled by the notifiers;
//! - `workflows`: workflow instances started and read;
//! - `replicas`: heartbeats;
//! - `refusal`: whether Redis takes writes now, asked without writing;
//! - `inspect`: what operators read, and their few writes;
//! - `listing`: runs listed a page at a time from where the page before ended;
//! - `contract`: the run states and reasons the scripts and the Rust side share;
//! - `scripts`: the scripts, each loaded with the helpers of `lua/include/common.lua`;
//! - `reply`: what goes into a script call and the decoding of what comes back;
//! - [`keys`] builds every key, [`embedded`] starts a local Redis.

mod archive;
mod claiming;
mod clock;
mod connection;
mod contract;
mod damage;
mod damaged_names;
mod dead;
mod declarations;
mod definition_hashes;
pub mod embedded;
mod enqueueing;
mod finishing;
mod inspect;
pub mod keys;
mod leadership;
mod listing;
mod live;
mod notices;
mod planning;
mod promotion;
mod queues;
mod refusal;
mod replicas;
mod reply;
mod routing;
mod scan;
mod scripts;
mod targets;
mod topology;
mod triggering;
mod wording;
mod workflows;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::time::Duration;

use redis::{FromRedisValue, Script};
use thiserror::Error;

use crate::metrics::Metrics;
pub use archive::{
    ARCHIVE_GROUP, ArchiveBacklog, ArchiveFailure, ArchivePart, ArchiveRecord, ArchiveRole,
    ArchiveTake, record_ms,
};
pub use claiming::{
    Claim, ClaimLeases, Claimed, ClaimedRun, CorruptRun, JobSlot, MIN_AHEAD_LEASE, PendingSlot,
    ReadyWaiter, ahead_lease,
};
pub use clock::{ManualClock, RedisClock};
use connection::Connection;
pub use connection::{NOT_REPLICATED, ReplicatedWrites};
pub use contract::{FailReason, RunState, SkipReason, StepStatus, WorkflowState};
pub use damage::{DamagedKeys, Entry, RecordPage};
pub use damaged_names::{DamagedName, NameIndex};
pub use dead::Redrive;
use declarations::published_declarations;
pub use declarations::{DeclarationsSignal, PublishedDefinition, canonical_json};
pub use definition_hashes::published_hash;
pub use enqueueing::{Acting, Enqueue, Enqueued, key_fingerprint, new_run_id, payload_fingerprint};
pub use finishing::{Ack, FailOutcome, Failure, OwnedRun, StrayRun};
pub use inspect::{Event, Overview, REAPING_GRACE, ReplicaInfo, RunCounts, UndeclaredRuns};
pub use keys::{InvalidNamespace, Keys, validate_namespace};
pub use leadership::{Acquisition, LeaderToken};
pub use listing::ReadyMark;
pub use live::OutputSoFar;
pub use notices::{DamagedNotice, OwedNotice, Settle};
pub use planning::{
    JobPlan, PlanOutcome, PlannedRun, SkippedFire, UnplanOutcome, cron_run_id, parse_cron_run_id,
};
pub use promotion::Promoted;
pub use refusal::WritesRefused;
pub use replicas::{Beat, ReplicaInstance, replica_of, replica_of_worker};
use reply::ScriptCall;
pub use targets::StrandedRun;
pub use topology::{CONNECTION_TIMEOUT, RESPONSE_TIMEOUT, Topology};
pub use triggering::{TriggerTargets, Triggered};
pub use workflows::{
    StepInstance, WorkflowInstance, WorkflowListing, WorkflowRetry, WorkflowStart, step_run_id,
};

/// Why a store operation failed.
#[derive(Debug, Error)]
pub enum StoreError {
    /// Redis could not be reached or refused the command; retry with backoff.
    #[error("{}: {}", wording::described(operation), redis_said(source))]
    Redis {
        /// The store operation (script or command) that failed.
        operation: &'static str,
        /// What Redis or the connection said.
        source: redis::RedisError,
    },
    /// A script or command answered in a shape redcron does not write: foreign or corrupt data.
    #[error(
        "{}: Redis answered what redcron does not write: {detail}",
        wording::described(operation)
    )]
    Reply {
        /// The script or command.
        operation: &'static str,
        /// What was wrong with the reply.
        detail: String,
    },
    /// The namespace cannot make the keys' hash tag.
    #[error(transparent)]
    Namespace(#[from] keys::InvalidNamespace),
    /// The namespace is held (`redcron hold`): scripts refuse until it is released. Retry
    /// later; nothing was written.
    #[error(
        "{}: the namespace is held (redcron hold) until it is released",
        wording::described(operation)
    )]
    Held {
        /// The store operation refused.
        operation: &'static str,
    },
    /// Redis refused this user a key, a channel or a command of the namespace (`NOPERM`): its
    /// ACL does not allow what redcron needs, and no retry helps until an operator changes it.
    #[error(
        "{}: Redis refuses this user namespace \"{namespace}\" (NOPERM{}): give it \
         the ACL line of SECURITY.md, which allows the keys ~{{{namespace}}}:*, the channels \
         &{{{namespace}}}:* and the commands redcron sends",
        wording::described(operation),
        refusal_to_user(.source).flatten().map(|detail| format!(": {detail}")).unwrap_or_default()
    )]
    Forbidden {
        /// The store operation refused.
        operation: &'static str,
        /// The namespace the user may not use.
        namespace: String,
        /// What Redis said (boxed: every store call's error is as large as its largest kind):
        /// shown by its refusal's own words, also when the refusal came inside a pipeline or
        /// a transaction, whose error would otherwise read as a dump of every failed command.
        source: Box<redis::RedisError>,
    },
    /// A claim found no declarations of this replica in Redis (they expired, Redis was
    /// restored): publish them ([`Store::publish_replica_jobs`]) and claim again.
    #[error("the declarations of replica {replica} are not in Redis")]
    Undeclared {
        /// The replica's id.
        replica: String,
    },
}

impl StoreError {
    /// A failed Redis call of `operation`. Every failed call of the store becomes one here (each
    /// call names its operation with [`During::during`]), so this is where failures are
    /// counted, whichever component made the call and whether or not it goes on to swallow the
    /// error, and where a refusal to write is noticed for `/readyz`.
    fn redis(metrics: &Metrics, operation: &'static str, source: redis::RedisError) -> Self {
        if source.code() == Some(HELD) {
            return StoreError::Held { operation };
        }
        // Redis answered, with data that is not what the call reads (a name that is not
        // UTF-8): damaged data, which no retry cures, not Redis out of reach.
        if std::error::Error::source(&source).is_some_and(|cause| cause.is::<redis::ParsingError>())
        {
            return StoreError::Reply {
                operation,
                detail: source.to_string(),
            };
        }
        metrics.redis_errors_total.inc();
        if let Some(error) = failure_of_the_data(&source) {
            metrics.health.script_failed(operation, error);
        }
        let refused_to_user = refusal_to_user(&source).is_some();
        if refused_to_user || refuses_writes(&source) {
            // A refusal is an answer: Redis is reachable, it takes no writes from us.
            metrics.health.redis_ok();
            metrics.health.write_refused();
        }
        if refused_to_user {
            let error = StoreError::Forbidden {
                operation,
                namespace: metrics.namespace().to_owned(),
                source: Box::new(source),
            };
            metrics.health.forbidden(error.to_string());
            return error;
        }
        StoreError::Redis { operation, source }
    }
}

/// What Redis or the connection said, in words where redis-rs has only the system's: a call
/// that timed out says how long it waited, and a connection refused says so rather than
/// "Connection refused (os error 111)". A connection dropped keeps redis-rs's words, which
/// say why when the connection layer knows (writes the replicas did not take).
fn redis_said(source: &redis::RedisError) -> String {
    if source.is_timeout() {
        format!(
            "Redis did not answer within {}",
            humantime::format_duration(RESPONSE_TIMEOUT)
        )
    } else if source.is_connection_refusal() {
        "Redis refused the connection".to_owned()
    } else {
        source.to_string()
    }
}

/// Names the store operation a Redis call was part of, in its error, and counts the failure in
/// the replica's metrics.
trait During<T> {
    fn during(self, metrics: &Metrics, operation: &'static str) -> Result<T, StoreError>;
}

impl<T> During<T> for Result<T, redis::RedisError> {
    fn during(self, metrics: &Metrics, operation: &'static str) -> Result<T, StoreError> {
        match self {
            Ok(value) => {
                metrics.health.call_succeeded(operation);
                Ok(value)
            }
            Err(source) => Err(StoreError::redis(metrics, operation, source)),
        }
    }
}

/// What Redis said, when a call failed on the data it met rather than on Redis being away or
/// busy: a key of another type than the script expects (`WRONGTYPE`, from the script's own check
/// or from Redis), or a script that broke at run time (`ERR ... script: ...`). Such a call fails
/// again on every try until the data is repaired. Redis's note of where in the script is cut.
fn failure_of_the_data(error: &redis::RedisError) -> Option<String> {
    let code = error.code()?;
    let detail = error.detail().unwrap_or_default();
    if code != "WRONGTYPE" && !(code == "ERR" && detail.contains(" script: ")) {
        return None;
    }
    let detail = detail
        .split(" script: ")
        .next()
        .unwrap_or(detail)
        .trim_end();
    Some(format!("{code} {detail}"))
}

/// The error code of a script refused while the namespace is held (`common.lua`'s `HELD`).
const HELD: &str = "HELD";

/// The error code of a command an ACL does not allow.
const NOPERM: &str = "NOPERM";

impl StoreError {
    /// Whether the call was refused because the namespace is held: expected while an operator
    /// moves its slot, so it is not a failure to warn about.
    pub fn is_held(&self) -> bool {
        matches!(self, StoreError::Held { .. })
    }

    /// The namespace, when the call was refused because this user may not use it (`NOPERM`):
    /// every call of every component fails so until an operator changes the ACL.
    pub fn forbidden_namespace(&self) -> Option<&str> {
        match self {
            StoreError::Forbidden { namespace, .. } => Some(namespace),
            _ => None,
        }
    }
}

/// Redis's words (if any) when it refused this user a key, a channel or a command (`NOPERM`):
/// alone, or as one of the failed commands of a pipeline or an aborted transaction.
fn refusal_to_user(error: &redis::RedisError) -> Option<Option<String>> {
    error
        .clone()
        .into_server_errors()?
        .iter()
        .find(|(_, failed)| failed.code() == NOPERM)
        .map(|(_, failed)| failed.details().map(str::to_owned))
}

/// Whether Redis answered but takes no writes now: out of memory under `noeviction`, a
/// read-only replica, a failed snapshot with `stop-writes-on-bgsave-error`, too few replicas
/// for `min-replicas-to-write`, for `--replicated-writes` ([`NOT_REPLICATED`]), or an ACL user
/// not allowed the namespace's keys (`NOPERM`). Inside a
/// transaction the refusal shows only in the message of the aborted `EXEC`, so the message is
/// read too.
fn refuses_writes(error: &redis::RedisError) -> bool {
    const CODES: [&str; 6] = [
        "OOM",
        "READONLY",
        "MISCONF",
        "NOREPLICAS",
        NOPERM,
        NOT_REPLICATED,
    ];
    if error.code().is_some_and(|code| CODES.contains(&code)) {
        return true;
    }
    let message = error.to_string();
    CODES.iter().any(|code| {
        message
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|word| word == *code)
    })
}

/// How long things are kept and how much history is kept.
///
/// ```
/// use std::time::Duration;
///
/// use redcron::store::StoreSettings;
///
/// let settings = StoreSettings {
///     retention: Duration::from_secs(24 * 3600),
///     ..StoreSettings::default()
/// };
/// assert_eq!(settings.events_maxlen, 100_000);
/// ```
#[derive(Debug, Clone)]
pub struct StoreSettings {
    /// Approximate length of the events stream.
    pub events_maxlen: u64,
    /// Whether the namespace archives its history: every script that records an outcome also
    /// writes its record into the archive's outbox (`{ns}:archive`), and a run that ended
    /// keeps its hash until that record is archived, then its retention. Every replica of a
    /// namespace that archives must say so (a replica refuses to start otherwise, see
    /// [`Store::archive_marked`]).
    pub archive: bool,
    /// How long a finished (succeeded or skipped) run's hash is kept.
    pub retention: Duration,
    /// How long a fingerprint keeps a second run with the same one from executing.
    pub fingerprint_ttl: Duration,
    /// Whether every script's writes must reach replicas before they count as done.
    pub replicated_writes: Option<ReplicatedWrites>,
}

impl Default for StoreSettings {
    fn default() -> Self {
        Self {
            events_maxlen: 100_000,
            archive: false,
            retention: Duration::from_secs(7 * 24 * 3600),
            fingerprint_ttl: Duration::from_secs(7 * 24 * 3600),
            replicated_writes: None,
        }
    }
}

/// A connection to redcron's keys in one namespace.
#[derive(Clone)]
pub struct Store {
    /// Where Redis is: the connections that cannot be shared (subscriptions and blocking pops)
    /// are opened from it.
    topology: Topology,
    /// Multiplexed, reconnecting: clones share one connection.
    connection: Connection,
    keys: Keys,
    settings: StoreSettings,
    /// Where the failures of its Redis calls are counted: the replica's metrics.
    metrics: Arc<Metrics>,
    /// A clock read instead of Redis's, by every script and by [`Store::now_ms`]: for tests of
    /// time-based decisions only.
    manual_clock: Option<ManualClock>,
    /// The `written_ms` of `{ns}:rewind` that this store's last claim answered, shared by its
    /// clones: a claim that finds Redis's below it knows Redis came back older.
    written_ms: Arc<AtomicI64>,
    /// Set, for good, once a heartbeat of a replica started without `--archive` found the
    /// namespace archiving (`{ns}:archive-to`, written by a replica started with it after this
    /// one): shared by its clones, so that every script that records an outcome writes its
    /// record from then on, as [`StoreSettings::archive`] would have had them.
    archive_seen: Arc<AtomicBool>,
}

impl Store {
    /// Connects to the Redis at `url` (any form [`Topology::open`] reads) for namespace
    /// `namespace`.
    ///
    /// ```no_run
    /// use redcron::store::{Store, StoreSettings};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let url = "redis+sentinel://10.0.0.1,10.0.0.2,10.0.0.3/mymaster";
    /// let store = Store::connect(url, "redcron", StoreSettings::default()).await?;
    /// for warning in store.durability_warnings().await? {
    ///     eprintln!("{warning}");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// The URL or the namespace is invalid, or Redis cannot be reached.
    pub async fn connect(
        url: &str,
        namespace: &str,
        settings: StoreSettings,
    ) -> Result<Self, StoreError> {
        let topology = Topology::open(url, None).map_err(|source| StoreError::Redis {
            operation: "connect",
            source,
        })?;
        Self::connect_to(topology, namespace, settings).await
    }

    /// Like [`Store::connect`], with a topology built by the caller: TLS with a private CA or a
    /// client certificate ([`Topology::open`] with certificates).
    ///
    /// ```no_run
    /// use redcron::store::{Store, StoreSettings, Topology};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let certificates = redis::TlsCertificates {
    ///     client_tls: None,
    ///     root_cert: Some(std::fs::read("/etc/redcron/redis-ca.pem")?),
    /// };
    /// let topology = Topology::open("rediss://redis.internal:6380/", Some(certificates))?;
    /// let store = Store::connect_to(topology, "redcron", StoreSettings::default()).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// When Redis cannot be reached.
    pub async fn connect_to(
        topology: Topology,
        namespace: &str,
        settings: StoreSettings,
    ) -> Result<Self, StoreError> {
        keys::validate_namespace(namespace)?;
        let keys = Keys::new(namespace);
        let metrics = Arc::new(Metrics::new(namespace));
        let connection = Connection::open(&topology, keys.prefix(), settings.replicated_writes)
            .await
            .during(&metrics, "connect")?;
        Ok(Self {
            topology,
            metrics,
            connection,
            keys,
            settings,
            manual_clock: None,
            written_ms: Arc::new(AtomicI64::new(0)),
            archive_seen: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Where this store's Redis is.
    ///
    /// ```no_run
    /// # fn example(store: &redcron::store::Store) {
    /// println!("connected to a {} Redis", store.topology().kind());
    /// # }
    /// ```
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Changes when the store's connection moves to a server that may be another one (a new
    /// primary after a Sentinel failover), which may have lost the last writes: what a caller
    /// keeps of Redis's state must be read again then.
    pub fn connection_generation(&self) -> u64 {
        self.connection.generation()
    }

    /// Counts in `metrics` what this store sees (failed calls, writes Redis refuses) and what
    /// the components given this store do: a replica's metrics travel with its store, which
    /// every component is given. Without this, a store counts in metrics of its own, which
    /// [`Store::metrics`] reads and [`crate::metrics::Endpoint`] can serve.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    ///
    /// use redcron::metrics::{Endpoint, Metrics};
    /// use redcron::store::{Store, StoreSettings};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let metrics = Arc::new(Metrics::new("redcron"));
    /// let endpoint = Endpoint::new(vec![metrics.clone()]);
    /// let store = Store::connect("redis://127.0.0.1/", "redcron", StoreSettings::default())
    ///     .await?
    ///     .with_metrics(metrics);
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The metrics this store and the components given it count in.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The key names of this namespace.
    ///
    /// ```no_run
    /// # fn example(store: &redcron::store::Store) {
    /// // Namespace `redcron`: one hash tag for every key, so it lives in one slot of a cluster.
    /// assert_eq!(store.keys().prefix(), "{redcron}:");
    /// # }
    /// ```
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// What is wrong with this Redis's settings for redcron: AOF off (a restart loses recent
    /// runs) or an eviction policy other than `noeviction` (evicted keys are lost runs).
    ///
    /// # Errors
    /// Redis errors; a Redis that refuses CONFIG (a managed service) gives no warnings.
    pub async fn durability_warnings(&self) -> Result<Vec<String>, StoreError> {
        let mut warnings = Vec::new();
        let appendonly: Result<(String, String), _> = self
            .query_keyless(redis::cmd("CONFIG").arg("GET").arg("appendonly"))
            .await;
        if let Ok((_, value)) = appendonly
            && value != "yes"
        {
            warnings.push(
                "appendonly is off: a Redis restart loses runs planned or finished since its \
                 last snapshot (CONFIG SET appendonly yes)"
                    .to_owned(),
            );
        }
        let policy: Result<(String, String), _> = self
            .query_keyless(redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy"))
            .await;
        if let Ok((_, value)) = policy
            && value != "noeviction"
        {
            warnings.push(format!(
                "maxmemory-policy is {value}: evicted keys are lost runs (CONFIG SET \
                 maxmemory-policy noeviction)"
            ));
        }
        Ok(warnings)
    }

    /// Why `--replicated-writes N` will refuse writes, if the server that holds this namespace
    /// has fewer than N replicas connected (on a cluster, each namespace's master has its own),
    /// or cannot be asked (`INFO` refused to an ACL user).
    pub async fn replication_warning(&self) -> Option<String> {
        let wanted = self.settings.replicated_writes.as_ref()?.replicas;
        let info: Result<String, _> = self
            .query_keyless(redis::cmd("INFO").arg("replication"))
            .await;
        let connected = match info {
            Ok(info) => info
                .lines()
                .find_map(|line| line.strip_prefix("connected_slaves:"))
                .and_then(|count| count.trim().parse::<u32>().ok()),
            Err(error) => {
                return Some(format!(
                    "--replicated-writes {wanted}: cannot count the replicas connected to Redis \
                     ({error}): writes fail while fewer than {wanted} are"
                ));
            }
        };
        match connected {
            Some(connected) if connected < wanted => Some(format!(
                "--replicated-writes {wanted} but Redis has {connected} connected replica(s): \
                 every write fails until enough replicas are connected, and nothing runs"
            )),
            _ => None,
        }
    }

    /// Checks that Redis lets this user read the namespace's keys and publish on its channels,
    /// as every replica must: a user whose ACL does not allow them would otherwise have each
    /// component refused at every tick, for ever. A key read and a wake-up that costs the
    /// promoters one look, nothing written.
    ///
    /// # Errors
    /// [`StoreError::Forbidden`] when the ACL refuses either; other Redis errors.
    pub async fn check_access(&self) -> Result<(), StoreError> {
        let mut pipe = redis::pipe();
        pipe.exists(self.keys.leader())
            .ignore()
            .publish(self.keys.wake_promoter(), "0")
            .ignore();
        pipe.query_async::<()>(&mut self.connection.clone())
            .await
            .during(&self.metrics, "check_access")
    }

    /// Sends `command`, which names no key, to the server that holds this namespace: on a
    /// cluster, the master of the namespace's slot.
    async fn query_keyless<T: FromRedisValue>(
        &self,
        command: &redis::Cmd,
    ) -> Result<T, redis::RedisError> {
        self.connection.clone().query_keyless(command).await
    }

    /// Runs `script` once per call. One call is an ordinary invocation, which loads the script
    /// should Redis lack it; several are pipelined in one round trip after loading it (a
    /// pipelined EVALSHA cannot load it).
    async fn invoke_batched<T: FromRedisValue>(
        &self,
        script: &Script,
        operation: &'static str,
        calls: Vec<ScriptCall>,
    ) -> Result<Vec<T>, StoreError> {
        let mut connection = self.connection.clone();
        // Nothing to send: an empty pipeline is an empty command, which Redis refuses.
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        if let [only] = calls.as_slice() {
            let mut invocation = script.prepare_invoke();
            invocation.key(&only.keys).arg(&only.args);
            return Ok(vec![
                invocation
                    .invoke_async(&mut connection)
                    .await
                    .during(&self.metrics, operation)?,
            ]);
        }
        let hash = script
            .prepare_invoke()
            .load_async(&mut connection)
            .await
            .during(&self.metrics, operation)?;
        let mut pipe = redis::pipe();
        for call in &calls {
            pipe.cmd("EVALSHA")
                .arg(&hash)
                .arg(call.keys.len())
                .arg(&call.keys)
                .arg(&call.args);
        }
        pipe.query_async(&mut connection)
            .await
            .during(&self.metrics, operation)
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
