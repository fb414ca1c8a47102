//! `redcron run`: one replica on the schedule directory, against a shared Redis or a private
//! embedded one. With several namespaces (`--namespace a,b`), one replica per namespace in one
//! process, each on the subdirectory of the schedule directory named after its namespace.

use std::collections::BTreeSet;
use std::env::VarError;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use clap::Args;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{Instrument, error, info, warn};

use super::reload::{Reloader, Trigger};
use super::{CliError, RedisArgs, default_schedules, service};
use crate::archive::{Archive, ArchiveUrl};
use crate::engine::Shutdown;
use crate::engine::exporter::ExporterConfig;
use crate::engine::heartbeat::host_name;
use crate::engine::worker::Concurrency;
use crate::metrics::Endpoint;
use crate::replica::{Replica, ReplicaConfig};
use crate::schedule::{Job, Label, ScheduleDir, given_labels, load_schedule_dir};
use crate::store::StoreSettings;
use crate::store::embedded::EmbeddedRedis;

/// Labels of the replica, when no `--label` is given.
pub(super) const LABELS_ENV: &str = "REDCRON_LABELS";

#[derive(Debug, Args)]
pub(super) struct RunArgs {
    /// The directory of schedule files (*.toml, its subdirectories included).
    #[arg(long, value_name = "DIR", default_value_os_t = default_schedules())]
    schedules: PathBuf,
    /// Without --redis, a private redis-server is started under --data-dir.
    #[command(flatten)]
    redis: RedisArgs,
    /// The queues this replica serves, comma-separated [default: every queue its jobs use].
    #[arg(long, value_name = "Q,...", value_delimiter = ',', value_parser = queue_name)]
    queues: Vec<String>,
    /// How many runs execute at once (1 to 4096), or MIN..MAX: from MIN, doubling while ready
    /// runs keep waiting for a worker, back down after 10 s without a wait.
    #[arg(long, value_name = "N|MIN..MAX", default_value = "4")]
    workers: Concurrency,
    /// This replica's id, unique among the replicas, kept across restarts: runs of
    /// every-replica jobs wait for it [default: the host name].
    #[arg(long, value_name = "ID", value_parser = replica_id)]
    replica_id: Option<String>,
    /// A label this replica carries, for jobs' `where`: repeatable, and KEY=VALUE,KEY=VALUE
    /// gives two (no label value holds a comma), one value per key. Every replica also
    /// carries host=<host name>, replica=<id> and queue=<name> for each queue it serves.
    /// [env: REDCRON_LABELS, read when no --label is given]
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// How long running runs may finish after SIGTERM before they are stopped and handed back.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    shutdown_grace: Duration,
    /// The leader lease: a dead leader is replaced within about this long.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = lease)]
    leader_ttl: Duration,
    /// How far ahead the leader plans fires into Redis. Fires already planned run without a
    /// leader, so a successor must be elected within it (longer than --leader-ttl); a longer
    /// horizon keeps more runs waiting in Redis.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = lease)]
    plan_ahead: Duration,
    /// A running run's lease: a run whose replica died is retried about this long after.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = lease)]
    run_lease: Duration,
    /// Reload the schedule directory whenever a file in it changes (as SIGHUP does).
    #[arg(long)]
    watch: bool,
    /// Where /metrics, /healthz and /readyz are served (port 0: a free port, logged), or
    /// `none`. An address that cannot be bound stops the replica at start.
    #[arg(long, value_name = "ADDR|none", default_value = "127.0.0.1:9464", value_parser = metrics_address)]
    metrics_addr: MetricsAddress,
    /// A fire that cannot start within this long is missed: its job's misfire policy decides.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    misfire_threshold: Duration,
    /// Runs are claimed this long before their due time and started at it, on Redis's clock;
    /// a pause or a busy job is checked at claim. 0s claims runs only once due.
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = humantime::parse_duration)]
    claim_ahead: Duration,
    /// How long a webhook notice may take (a `sendmail` or `exec:` notice: three times as long)
    /// before it is tried again.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = lease)]
    notice_timeout: Duration,
    /// The wait before a notice that a target did not take is tried again, tripled with each
    /// try (five tries, at most 10 minutes apart).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    notice_backoff: Duration,
    /// How long a finished run's record (its hash: state, attempts, outcome) is kept. With
    /// --archive, counted once its last outcome is archived.
    #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = humantime::parse_duration)]
    retention: Duration,
    /// Where every finished attempt and skipped fire is archived, exactly once, to outlive
    /// Redis: file:///DIR (with several namespaces, DIR/<namespace>), or s3://BUCKET/PREFIX
    /// configured by the usual AWS_* environment variables. Every replica of a namespace that
    /// archives must be given it.
    #[arg(long, value_name = "URL", value_parser = ArchiveUrlParser)]
    archive: Option<ArchiveUrl>,
    /// With --archive: a part of the archive is written once its first outcome is this old
    /// (or it holds 1,000, or its hour is over), so a quiet namespace's outcomes reach the
    /// archive within about this long.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = part_age, requires = "archive")]
    archive_part_age: Duration,
}

/// Reads `--archive`, refusing in its own words only: clap's would repeat the value, and a
/// value refused for holding a secret must not be printed.
#[derive(Debug, Clone, Copy)]
pub(super) struct ArchiveUrlParser;

impl clap::builder::TypedValueParser for ArchiveUrlParser {
    type Value = ArchiveUrl;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<ArchiveUrl, clap::Error> {
        let refused = |kind, message: String| clap::Error::raw(kind, message + "\n").with_cmd(cmd);
        let text = value.to_str().ok_or_else(|| {
            refused(
                clap::error::ErrorKind::InvalidUtf8,
                "--archive: the URL is not UTF-8".to_owned(),
            )
        })?;
        ArchiveUrl::parse(text)
            .map_err(|error| refused(clap::error::ErrorKind::ValueValidation, error.to_string()))
    }
}

/// One namespace a process serves: its schedule directory and what it declares.
struct Served {
    namespace: String,
    directory: PathBuf,
    declared: ScheduleDir,
}

pub(super) fn execute(args: &RunArgs) -> Result<(), CliError> {
    // Refused at the start, not found out at the first mail.
    crate::notify::spool::limit().map_err(CliError::Argument)?;
    if args.plan_ahead <= args.leader_ttl {
        return Err(CliError::Argument(format!(
            "--plan-ahead {} is not longer than --leader-ttl {}: fires would go unplanned \
             while a dead leader's successor is elected",
            humantime::format_duration(args.plan_ahead),
            humantime::format_duration(args.leader_ttl)
        )));
    }
    let labels = labels(&args.labels)?;
    let namespaces = args.redis.namespaces();
    let several = namespaces.len() > 1;
    // A replica refuses to start on an invalid schedule directory, any of them.
    let served = namespaces
        .into_iter()
        .map(|namespace| {
            let schedules = if several {
                args.schedules.join(namespace)
            } else {
                args.schedules.clone()
            };
            // The one mistake of a first start: the default directory, relative to where the
            // command runs, is not where the schedule files are.
            if !schedules.exists() {
                return Err(CliError::Argument(format!(
                    "no schedule directory at {}{}: pass --schedules DIR, the directory of the \
                     schedule files (*.toml), such as /etc/redcron/schedules",
                    schedules.display(),
                    if args.schedules == default_schedules() {
                        " (the default, in the working directory)"
                    } else {
                        ""
                    }
                )));
            }
            Ok(Served {
                namespace: namespace.to_owned(),
                declared: load_schedule_dir(&schedules)?,
                directory: schedules,
            })
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    let runtime = tokio::runtime::Runtime::new().map_err(CliError::io("starting the runtime"))?;
    let stopped = runtime.block_on(run(args, &labels, served));
    // The replica has stopped: a blocking task still under way (a name lookup for a Redis that
    // went away, say) must not hold up the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    stopped
}

/// Reads `--leader-ttl` and `--run-lease`: a lease under a second would lapse between two of
/// its renewals, and every run or leader would be taken over while it works.
fn lease(text: &str) -> Result<Duration, String> {
    let lease = humantime::parse_duration(text).map_err(|error| format!("{text:?}: {error}"))?;
    if lease < Duration::from_secs(1) {
        return Err(format!("{text:?} is shorter than the shortest lease, 1s"));
    }
    Ok(lease)
}

/// Reads `--archive-part-age`: a part written as soon as its first outcome is recorded would
/// hold one outcome, so no age shorter than a second is taken.
fn part_age(text: &str) -> Result<Duration, String> {
    let age = humantime::parse_duration(text).map_err(|error| format!("{text:?}: {error}"))?;
    if age < Duration::from_secs(1) {
        return Err(format!(
            "{text:?} is shorter than a second: a part would hold one outcome"
        ));
    }
    Ok(age)
}

/// Reads a queue of `--queues`, named as queues are in schedule files.
fn queue_name(text: &str) -> Result<String, String> {
    crate::schedule::check_name(text).map(|()| text.to_owned())
}

/// The labels the replica is given: `--label`, else `REDCRON_LABELS` (read here, not by clap,
/// so that a mistake names where it was written).
fn labels(given: &[String]) -> Result<Vec<Label>, CliError> {
    if !given.is_empty() {
        return given_labels(given.iter().map(String::as_str))
            .map_err(|error| CliError::Argument(format!("--label: {error}")));
    }
    match std::env::var(LABELS_ENV) {
        Ok(text) if !text.is_empty() => given_labels([text.as_str()])
            .map_err(|error| CliError::Argument(format!("{LABELS_ENV} (\"{text}\"): {error}"))),
        Ok(_) | Err(VarError::NotPresent) => Ok(Vec::new()),
        Err(VarError::NotUnicode(_)) => Err(CliError::Argument(format!(
            "{LABELS_ENV} is not UTF-8: labels are key=value in letters, digits and . _ - @"
        ))),
    }
}

/// Reads `--replica-id`: it names keys and metrics, and appears in status and logs.
fn replica_id(text: &str) -> Result<String, String> {
    let valid =
        |byte: u8| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-' | b'@');
    if (1..=64).contains(&text.len()) && text.bytes().all(valid) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a replica id: 1 to 64 letters, digits and . _ - @"
        ))
    }
}

/// `--metrics-addr`: where the endpoint listens, or `None` for no endpoint.
#[derive(Debug, Clone, Copy)]
struct MetricsAddress(Option<std::net::SocketAddr>);

/// Reads `--metrics-addr`: a socket address, or `none`.
fn metrics_address(text: &str) -> Result<MetricsAddress, String> {
    if text == "none" {
        return Ok(MetricsAddress(None));
    }
    text.parse()
        .map(|address| MetricsAddress(Some(address)))
        .map_err(|_| {
            format!("{text:?} is not an address like 127.0.0.1:9464 (port 0 picks one), or none")
        })
}

async fn run(args: &RunArgs, labels: &[Label], served: Vec<Served>) -> Result<(), CliError> {
    let shutdown = Shutdown::new();
    // Handled from the first moment: a SIGTERM while the replica starts (a service stopped as
    // it starts, a start waiting for Redis) stops it as a later one does, exiting 0 once the
    // start is over, instead of killing it by the signal's default action. The schedules a
    // SIGHUP reloads are known only once every namespace has started.
    let reloaders = Arc::new(OnceLock::new());
    tokio::spawn(handle_signals(shutdown.clone(), reloaders.clone()));
    // Bound first: the endpoint is part of what a replica promises its probes, so an address
    // in use stops it before it touches Redis.
    let listener = match args.metrics_addr.0 {
        Some(address) => Some(
            tokio::net::TcpListener::bind(address)
                .await
                .map_err(|source| CliError::MetricsAddress { address, source })?,
        ),
        None => None,
    };
    let embedded = match &args.redis.redis {
        Some(_) => None,
        None if args.redis.replicated_writes > 0 => {
            return Err(CliError::Argument(
                "--replicated-writes needs a Redis with replicas (--redis URL): the embedded one \
                 has none, so no write would ever be acknowledged"
                    .to_owned(),
            ));
        }
        None => Some(EmbeddedRedis::start(&args.redis.data_dir).await?),
    };
    let settings = StoreSettings {
        retention: args.retention,
        ..StoreSettings::default()
    };
    let several = served.len() > 1;
    let mut replicas = Vec::with_capacity(served.len());
    let mut namespaces = Vec::with_capacity(served.len());
    let mut schedules = Vec::with_capacity(served.len());
    for Served {
        namespace,
        directory,
        declared: ScheduleDir { jobs, queues },
    } in served
    {
        // Each namespace counts in metrics and a health of its own, labelled with its name.
        let store = args
            .redis
            .connect_namespace(&namespace, settings.clone())
            .await?;
        namespaces.push(store.metrics().clone());
        if embedded.is_none() && replicas.is_empty() {
            for warning in store.durability_warnings().await? {
                warn!("{warning}");
            }
        }
        if let Some(warning) = store.replication_warning().await {
            warn!(namespace, "{warning}");
        }
        let mut config = config(args, labels, &jobs);
        if let Some(url) = &args.archive {
            let url = match url {
                ArchiveUrl::File(directory) if several => {
                    ArchiveUrl::File(directory.join(&namespace))
                }
                url => url.clone(),
            };
            let archive = Archive::open(&url)?;
            info!(namespace, archive = %url, "archiving every outcome");
            config.exporter = Some(ExporterConfig {
                // A part its exporter died holding is written by another as soon as a run of
                // a dead replica would run again.
                claim_after: args.run_lease,
                part_age: args.archive_part_age,
                ..ExporterConfig::new(archive, &namespace, &config.replica_id)
            });
        }
        info!(
            replica = config.replica_id,
            namespace,
            jobs = jobs.len(),
            queues = config.workers.queues.join(","),
            workers = %config.workers.concurrency,
            "replica starting"
        );
        if jobs.is_empty() {
            warn!(
                namespace,
                schedules = %directory.display(),
                "no job declared: this replica plans and runs nothing of the namespace until \
                 its schedule directory declares jobs (SIGHUP or --watch reloads it)"
            );
        }
        // A queue given by hand that nothing here names is most likely a typo: said, not
        // refused, since replicas of other schedule files may declare jobs that use it.
        for queue in &args.queues {
            let named = queue == "default"
                || jobs.iter().any(|job| job.queue == *queue)
                || queues
                    .iter()
                    .any(|table| table.queue == *queue || table.fallback == *queue);
            if !named {
                warn!(
                    namespace,
                    queue,
                    "--queues names a queue that no job or [queues] table of this replica's \
                     schedule files uses: only jobs other replicas declare can have runs in it"
                );
            }
        }
        // A first round trip, before the service manager hears that the replica is ready; a
        // user the ACL keeps out of the namespace stops the replica here, saying so.
        store.now_ms().await?;
        store.check_access().await?;
        let replica = Replica::builder(store)
            .jobs(jobs)
            .queue_fallbacks(queues)
            .config(config)
            .build();
        schedules.push(Arc::new(Reloader::new(replica.jobs_handle(), directory)));
        // With several namespaces, each line a replica logs says which it is about.
        let span = if several {
            tracing::info_span!("replica", namespace)
        } else {
            tracing::Span::none()
        };
        replicas.push((replica, span));
    }
    // One endpoint and one health for the process: a namespace that cannot make progress
    // makes the process unhealthy, and a component of any of them that dies stops them all.
    let endpoint = Arc::new(Endpoint::new(namespaces));
    let watched = endpoint.clone();
    service::ready();
    // Serves until the replica has stopped, so /readyz says so during the shutdown grace. Not
    // a supervised component: fires do not depend on it, and a probe that cannot reach it
    // reports the replica anyway.
    let serving = Shutdown::new();
    if let Some(listener) = listener {
        // The port an operator or a probe needs, when the address asked for port 0.
        match listener.local_addr() {
            Ok(address) => info!(%address, "serving metrics, /healthz and /readyz"),
            Err(error) => warn!(%error, "cannot read the metrics endpoint's address"),
        }
        let serving = serving.clone();
        tokio::spawn(async move {
            if let Err(error) = crate::metrics::serve(listener, endpoint, serving).await {
                error!(%error, "metrics endpoint failed");
            }
        });
    } else {
        info!("no metrics endpoint (--metrics-addr none)");
    }
    if args.watch {
        for reloader in &schedules {
            let reloader = reloader.clone();
            tokio::spawn(async move { reloader.watch().await });
        }
    }
    reloaders.get_or_init(|| schedules);
    tokio::spawn(service::watchdog(watched, serving.clone()));
    // A replica that stops on its own (a component died) stops the others.
    let stopped = futures_util::future::join_all(replicas.into_iter().map(|(replica, span)| {
        let shutdown = shutdown.clone();
        async move {
            let stopped = replica.run(shutdown.clone()).await;
            shutdown.cancel();
            stopped
        }
        .instrument(span)
    }))
    .await
    .into_iter()
    .find(Result::is_err)
    .unwrap_or(Ok(()));
    serving.cancel();
    if let Some(embedded) = embedded {
        embedded.stop().await;
    }
    match stopped {
        Ok(()) => {
            info!("replica stopped");
            Ok(())
        }
        Err(died) => Err(died.into()),
    }
}

fn config(args: &RunArgs, labels: &[Label], jobs: &[Job]) -> ReplicaConfig {
    let defaults = ReplicaConfig::default();
    // The host name, the same after a restart: the runs an every-replica job's fires left
    // for this replica wait for this id. Outside the id's charset, it becomes one.
    let replica_id = args.replica_id.clone().unwrap_or_else(|| {
        let host: String = host_name()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-@".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .take(64)
            .collect();
        if host.is_empty() {
            "replica".to_owned()
        } else {
            host
        }
    });
    let queues = if args.queues.is_empty() {
        let mut queues: BTreeSet<String> = jobs.iter().map(|job| job.queue.clone()).collect();
        queues.insert("default".to_owned());
        queues.into_iter().collect()
    } else {
        args.queues.clone()
    };
    let mut config = ReplicaConfig {
        replica_id,
        labels: labels.to_vec(),
        leader_ttl: args.leader_ttl,
        shutdown_grace: args.shutdown_grace,
        ..defaults
    };
    config.workers.queues = queues;
    config.workers.concurrency = args.workers;
    config.workers.lease = args.run_lease;
    config.workers.ahead_lease = crate::store::ahead_lease(args.claim_ahead);
    config.planner.horizon = args.plan_ahead;
    config.planner.misfire_threshold = args.misfire_threshold;
    config.promoter.misfire_threshold = args.misfire_threshold;
    config.promoter.lead = args.claim_ahead;
    // A notice whose sender died is sent by another replica as soon as a run would be.
    config.notifier.lease = args.run_lease;
    config.notifier.retry_backoff = args.notice_backoff;
    config.notifier.limits.webhook_timeout = args.notice_timeout;
    config.notifier.limits.command_timeout = args.notice_timeout * 3;
    config
}

/// SIGTERM or SIGINT: shut down in order; a second one: exit at once. SIGHUP: reload each
/// namespace's schedule directory, keeping its previous definitions if it is invalid.
/// Installs the handlers of SIGTERM, SIGINT and SIGHUP at once, when called, not when the
/// future it returns is first polled; the future then stops the replica or reloads `reloaders`
/// (none until they are set) on each signal.
fn handle_signals(
    shutdown: Shutdown,
    reloaders: Arc<OnceLock<Vec<Arc<Reloader>>>>,
) -> impl Future<Output = ()> {
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    );
    async move {
        let (Ok(mut terminate), Ok(mut interrupt), Ok(mut hangup)) = handlers else {
            error!("cannot install signal handlers");
            return;
        };
        loop {
            tokio::select! {
                _ = terminate.recv() => {}
                _ = interrupt.recv() => {}
                _ = hangup.recv() => {
                    for reloader in reloaders.get().into_iter().flatten() {
                        reloader.reload(Trigger::Signal);
                    }
                    continue;
                }
            }
            if shutdown.is_cancelled() {
                warn!("second signal: exiting at once");
                std::process::exit(130);
            }
            info!("shutting down: no new runs; running runs get the shutdown grace");
            service::stopping();
            shutdown.cancel();
        }
    }
}
