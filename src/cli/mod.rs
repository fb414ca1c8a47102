//! The command line: one file per subcommand group, each a clap `Args` struct and an `execute`.

mod bench;
mod check;
mod complete;
pub mod config;
mod dead;
mod docs;
mod enqueue;
mod enqueue_lines;
mod history;
mod hold;
mod import;
mod next;
mod output;
mod pause;
mod reload;
mod run;
mod runs;
mod schedule_page;
mod service;
mod status;
mod table;
mod times;
mod watch_path;
mod workflow;

use crate::logs::LogFormat;
use std::io;
use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use thiserror::Error;

use crate::schedule::{CronError, Job, LoadError};
use table::write_table;

/// redcron: a distributed replacement for the system crontab, and a task queue, on Redis.
#[derive(Debug, Parser)]
#[command(name = "redcron", version, about, max_term_width = 100, arg = config::arg())]
pub struct Cli {
    /// Log lines as text or as JSON objects (RUST_LOG sets the level).
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// Parses the process's command line, the options it does not give taking their defaults
    /// from the configuration files.
    ///
    /// # Errors
    /// A configuration file that cannot be read or says something wrong. A bad command line
    /// prints its usage and exits, as clap does.
    pub fn from_env() -> Result<Self, CliError> {
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let settings = config::Settings::load(&args)?;
        let matches = settings.apply(Self::command()).get_matches_from(args);
        Self::from_arg_matches(&matches).map_err(|error| error.exit())
    }

    /// The log format asked for.
    pub fn log_format(&self) -> LogFormat {
        self.log_format
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a replica on the jobs in the schedule directory.
    Run(run::RunArgs),
    /// Validate the schedule directory and show every job's next fires.
    Check(check::CheckArgs),
    /// Print the next fires of a cron expression or a declared job, one RFC 3339 time per line.
    Next(next::NextArgs),
    /// Convert a crontab into a schedule file.
    ImportCrontab(import::ImportArgs),
    /// Measure enqueue and processing throughput and delayed-run lateness on a Redis.
    Bench(bench::BenchArgs),
    /// Leader, replicas, queues, counts and every job's state.
    Status(status::StatusArgs),
    /// The declared jobs as the leader published them, with drift between replicas.
    Jobs(status::JobsArgs),
    /// Recent runs from the events stream.
    History(history::HistoryArgs),
    /// Run a declared job now.
    Trigger(enqueue::TriggerArgs),
    /// Run a declared job once, later or now, optionally unique.
    Enqueue(enqueue::EnqueueArgs),
    /// Skip a job's fires (recorded as skipped) until it is resumed.
    Pause(pause::PauseArgs),
    /// Let a paused job's fires run again.
    Resume(pause::PauseArgs),
    /// Hold the namespace still (no script writes) while its Redis Cluster slot moves.
    Hold(hold::HoldArgs),
    /// End a hold.
    Release(hold::ReleaseArgs),
    /// Inspect runs.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// List, inspect, re-drive or delete dead runs.
    #[command(subcommand)]
    Dead(dead::DeadCommand),
    /// Start a declared workflow, and see how its instances stand.
    #[command(subcommand)]
    Workflow(workflow::WorkflowCommand),
    /// Print the shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(docs::CompletionsArgs),
    /// Print the man page, or write every page into a directory.
    Man(docs::ManArgs),
}

/// Where the shared state is: every command that reads or steers runs takes these. `--help`
/// shows them apart from the command's own options, since they are the same for every command.
#[derive(Debug, Clone, clap::Args)]
struct RedisArgs {
    /// The Redis the replicas share (redis://, rediss://, redis+unix://,
    /// redis+sentinel://host:port,.../master, redis+cluster://host:port,...) [default: the
    /// embedded Redis that `redcron run` started in --data-dir].
    #[arg(
        long,
        env = "REDIS_URL",
        value_name = "URL",
        hide_env_values = true,
        help_heading = "Connection"
    )]
    redis: Option<String>,
    /// Keys live under {NS}: replicas cooperate within one namespace (1 to 64 letters, digits,
    /// '.', '_' or '-'). `run` takes several, comma-separated: a replica for each in one
    /// process, each on the subdirectory NS of --schedules.
    #[arg(
        long,
        value_name = "NS",
        default_value = "redcron",
        value_parser = namespaces,
        help_heading = "Connection"
    )]
    namespace: String,
    /// Where the embedded Redis keeps its data and socket.
    #[arg(
        long,
        value_name = "DIR",
        default_value = ".redcron",
        help_heading = "Connection"
    )]
    data_dir: PathBuf,
    /// The CA certificate (PEM) a rediss:// server's certificate is checked against, instead
    /// of the system's roots.
    #[arg(long, env = "REDIS_CA_CERT", value_name = "FILE", help_heading = "TLS")]
    tls_ca_cert: Option<PathBuf>,
    /// A client certificate (PEM) for a Redis with tls-auth-clients.
    #[arg(
        long,
        env = "REDIS_CLIENT_CERT",
        value_name = "FILE",
        requires = "tls_key",
        help_heading = "TLS"
    )]
    tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "REDIS_CLIENT_KEY",
        value_name = "FILE",
        requires = "tls_cert",
        help_heading = "TLS"
    )]
    tls_key: Option<PathBuf>,
    /// Every state change must reach N replicas of the primary (WAIT) before it counts as
    /// done, so that a failover loses no claim, outcome or planned fire; 0 does not wait.
    #[arg(
        long,
        env = "REDIS_REPLICATED_WRITES",
        value_name = "N",
        default_value_t = 0,
        help_heading = "Connection"
    )]
    replicated_writes: u32,
    /// How long a state change may take to reach those replicas before it counts as failed
    /// (and is retried).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        value_parser = humantime::parse_duration,
        help_heading = "Connection"
    )]
    replicated_writes_timeout: std::time::Duration,
}

impl RedisArgs {
    /// The URL to talk to: `--redis`, else the embedded Redis's socket.
    fn url(&self) -> String {
        self.redis
            .clone()
            .unwrap_or_else(|| crate::store::embedded::socket_url(&self.data_dir))
    }

    async fn connect(&self) -> Result<crate::store::Store, CliError> {
        self.connect_with(crate::store::StoreSettings::default())
            .await
    }

    async fn connect_with(
        &self,
        settings: crate::store::StoreSettings,
    ) -> Result<crate::store::Store, CliError> {
        self.connect_namespace(self.namespace()?, settings).await
    }

    /// The one namespace a command reads or steers: a list is for `run` only.
    fn namespace(&self) -> Result<&str, CliError> {
        match self.namespaces().as_slice() {
            [one] => Ok(one),
            _ => Err(CliError::Argument(format!(
                "--namespace {}: only `run` serves several namespaces; give this command one \
                 (run it once for each)",
                self.namespace
            ))),
        }
    }

    /// The namespaces of `--namespace`, in the order given.
    fn namespaces(&self) -> Vec<&str> {
        self.namespace.split(',').collect()
    }

    /// A store for `namespace` on the Redis these arguments name.
    async fn connect_namespace(
        &self,
        namespace: &str,
        settings: crate::store::StoreSettings,
    ) -> Result<crate::store::Store, CliError> {
        let url = self.url();
        let topology = self.client(&url)?;
        let settings = crate::store::StoreSettings {
            replicated_writes: (self.replicated_writes > 0).then_some(
                crate::store::ReplicatedWrites {
                    replicas: self.replicated_writes,
                    timeout: self.replicated_writes_timeout,
                },
            ),
            ..settings
        };
        crate::store::Store::connect_to(topology, namespace, settings)
            .await
            .map_err(|source| self.unreachable(&url, source))
    }

    fn unreachable(&self, url: &str, source: crate::store::StoreError) -> CliError {
        CliError::unreachable(url, source, self.redis.is_some())
    }

    /// Where `url` says Redis is, with the TLS certificates given.
    fn client(&self, url: &str) -> Result<crate::store::Topology, CliError> {
        let certificates = if self.tls_ca_cert.is_none() && self.tls_cert.is_none() {
            None
        } else {
            let read = |path: &PathBuf| {
                std::fs::read(path).map_err(CliError::io(format!("reading {}", path.display())))
            };
            let client_tls = match (&self.tls_cert, &self.tls_key) {
                (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                    client_cert: read(cert)?,
                    client_key: read(key)?,
                }),
                _ => None,
            };
            let root_cert = self.tls_ca_cert.as_ref().map(read).transpose()?;
            Some(redis::TlsCertificates {
                client_tls,
                root_cert,
            })
        };
        crate::store::Topology::open(url, certificates).map_err(|error| {
            if error.kind() == redis::ErrorKind::InvalidClientConfig {
                return CliError::Argument(format!(
                    "{} is not a Redis URL ({}): expected redis://[user:password@]host[:port][/db], \
                     rediss://... for TLS, redis+unix:///path/to/socket, \
                     redis+sentinel://host:port,host:port/master or \
                     redis+cluster://host:port,host:port",
                    without_password(url),
                    one_line(&error.to_string())
                ));
            }
            self.unreachable(
                url,
                crate::store::StoreError::Redis {
                    operation: "connect",
                    source: error,
                },
            )
        })
    }
}

/// What a failed store call says: a call that timed out says so in words, and that what it
/// asked may have been done all the same; one refused while the namespace is held, that nothing
/// was written.
fn store_failure(error: &crate::store::StoreError) -> String {
    match error {
        crate::store::StoreError::Redis { source, .. } if source.is_timeout() => format!(
            "Redis did not answer within {}: it may be paused, busy or failing over; what was \
             asked of it may or may not have been done, so look before asking again",
            humantime::format_duration(crate::store::RESPONSE_TIMEOUT)
        ),
        crate::store::StoreError::Held { .. } => "the namespace is held (redcron hold): \
            nothing was written; ask again once it is released (redcron release, or when the \
            hold ends)"
            .to_owned(),
        other => other.to_string(),
    }
}

/// `text` on one line: whatever answered in Redis's place may put line breaks in an error.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `url` as it can be shown: a password in it (`redis://user:secret@host`, `?pass=secret`) is
/// replaced by `***`.
fn without_password(url: &str) -> String {
    let mut shown = url.to_owned();
    if let Some((scheme, rest)) = shown.split_once("://")
        && let Some((userinfo, host)) = rest.split_once('@')
        && let Some((user, _)) = userinfo.split_once(':')
    {
        shown = format!("{scheme}://{user}:***@{host}");
    }
    for key in [
        "?pass=",
        "&pass=",
        "?password=",
        "&password=",
        "?sentinel_password=",
        "&sentinel_password=",
    ] {
        // Every occurrence, in any case: Redis URLs are read case-insensitively by some
        // clients, and a parameter given twice must not show its second value.
        let mut from = 0;
        while let Some(start) = shown[from..].to_ascii_lowercase().find(key) {
            let value = from + start + key.len();
            let end = shown[value..]
                .find('&')
                .map_or(shown.len(), |end| value + end);
            shown.replace_range(value..end, "***");
            from = value + "***".len();
        }
    }
    shown
}

/// Reads how many entries a list shows: at least 1, since a list of none would say nothing and
/// a limit of 0 reads in Redis as "no limit".
fn list_count(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(count @ 1..) => Ok(count),
        _ => Err(format!("{text:?} is not a count of at least 1")),
    }
}

/// Runs `future` on a runtime of its own: the commands are synchronous, the store is not.
fn block_on<T>(
    future: impl std::future::Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::io("starting the runtime"))?
        .block_on(future)
}

/// Why a command failed. Each says what to do about it.
#[derive(Debug, Error)]
pub enum CliError {
    /// The schedule directory has problems; each is listed.
    #[error("{0}")]
    Schedules(#[from] LoadError),
    /// A cron expression given on the command line.
    #[error("bad expression: {0}")]
    Expression(#[from] CronError),
    /// Redis answered badly, or not in time.
    #[error("{}", store_failure(.0))]
    Store(#[from] crate::store::StoreError),
    /// Redis could not be reached at all, or refused the credentials.
    #[error("{problem} at {url}: {}; {hint}", one_line(&.source.to_string()))]
    Unreachable {
        /// What went wrong, in words.
        problem: &'static str,
        /// Where it was looked for, its password hidden.
        url: String,
        /// Why it failed.
        source: crate::store::StoreError,
        /// What to do about it: it depends on whether a URL was given.
        hint: &'static str,
    },
    /// The embedded Redis could not be started.
    #[error("{0}")]
    Embedded(#[from] crate::store::embedded::EmbeddedError),
    /// A replica's component died: the replica stopped so that its service manager restarts it.
    #[error("{0}")]
    Replica(#[from] crate::replica::ReplicaError),
    /// A command-line value that is not what it should be.
    #[error("{0}")]
    Argument(String),
    /// A configuration file that cannot be read, or says something wrong.
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    /// A job name no replica declares (and, for the commands that read the past, that left no
    /// trace either).
    #[error(
        "unknown job \"{0}\": no replica has declared it (see `redcron jobs`, or `redcron check` \
         on the replicas' schedule directory)"
    )]
    UnknownJob(String),
    /// `--metrics-addr` cannot be bound.
    #[error(
        "cannot serve metrics on {address}: {source}; pass another --metrics-addr (port 0 picks \
         a free one) or --metrics-addr none"
    )]
    MetricsAddress {
        /// The address asked for.
        address: std::net::SocketAddr,
        /// Why it cannot be bound.
        source: io::Error,
    },
    /// Replicas report scripts that fail on a damaged key (`status`, after what it could show):
    /// nothing those scripts do happens until the key is repaired.
    #[error("{0}")]
    ScriptsFailing(String),
    /// An import wrote its schedule files, with crontab lines that need attention (marked in
    /// the files and listed before).
    #[error("{0}")]
    ImportNeedsAttention(String),
    /// `status` found that Redis refuses writes: it showed the status, and fails so that a
    /// check running it does not pass.
    #[error("{0}")]
    WritesRefused(String),
    /// Reading or writing a file or a stream.
    #[error("{context}: {source}")]
    Io {
        /// What was being read or written.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The id of something just created could not be written: unlike [`CliError::Io`], an
    /// error even when the reader went away.
    #[error("{context}: {source}")]
    Unreported {
        /// What was created, with its id.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
}

impl CliError {
    /// Redis at `url` could not be used: not reached, or it refused the credentials. The hint
    /// depends on whether the URL was given or the embedded Redis was looked for.
    fn unreachable(url: &str, source: crate::store::StoreError, url_given: bool) -> Self {
        let refused_credentials = matches!(
            &source,
            crate::store::StoreError::Redis { source, .. }
                if source.kind() == redis::ErrorKind::AuthenticationFailed
                    || matches!(source.code(), Some("WRONGPASS" | "NOAUTH"))
        );
        let no_answer = matches!(
            &source,
            crate::store::StoreError::Redis { source, .. } if source.is_timeout()
        );
        CliError::Unreachable {
            problem: if refused_credentials {
                "Redis refused the user or password"
            } else if no_answer {
                "no answer from Redis"
            } else {
                "cannot reach Redis"
            },
            url: without_password(url),
            source,
            hint: if refused_credentials {
                "check them in the URL (--redis, REDIS_URL or `redis` in the configuration file)"
            } else if no_answer {
                // Reached, or not: a dropped connection and a Redis that takes no command look
                // alike from here.
                "check that Redis is up at that address and not paused (CLIENT PAUSE), loading \
                 its data or busy with a long command"
            } else if url_given {
                "check the URL and that Redis is up"
            } else {
                "no Redis URL was given (--redis, REDIS_URL or `redis` in a configuration \
                 file), and no `redcron run` in this --data-dir has started its embedded Redis"
            },
        }
    }

    /// Whether the reader of standard output went away (`redcron status | head -1`): not a
    /// failure, as for any Unix filter.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe)
    }

    /// The process exit code: 1 for invalid schedules (what `check` exists to find) and
    /// imports with lines that need attention, 2 for everything else.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::Schedules(_) | CliError::ImportNeedsAttention(_) => ExitCode::from(1),
            _ => ExitCode::from(2),
        }
    }

    /// The error as standard error shows it: what it quotes from outside (a run's error, a
    /// value from Redis or a schedule file) cannot steer the terminal.
    pub fn printable(&self) -> String {
        output::printable(&self.to_string()).into_owned()
    }

    fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| CliError::Io { context, source }
    }

    /// Like [`CliError::io`], for the id of something just created: a reader gone away is an
    /// error too, since the id is lost and a retry would create a second.
    fn unreported(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| CliError::Unreported { context, source }
    }
}

/// Runs the command the user asked for.
///
/// # Errors
/// A [`CliError`] to print to standard error; its [`CliError::exit_code`] is the process's.
pub fn execute(cli: Cli) -> Result<(), CliError> {
    let stdout = &mut io::stdout().lock();
    match cli.command {
        Command::Run(args) => run::execute(&args),
        Command::Check(args) => check::execute(&args, stdout),
        Command::Next(args) => next::execute(&args, stdout),
        Command::ImportCrontab(args) => import::execute(&args, stdout),
        Command::Bench(args) => bench::execute(&args, stdout),
        Command::Status(args) => status::status(&args, stdout),
        Command::Jobs(args) => status::jobs(&args, stdout),
        Command::History(args) => history::history(&args, stdout),
        Command::Trigger(args) => enqueue::trigger(&args, stdout),
        Command::Enqueue(args) => enqueue::enqueue(&args, stdout),
        Command::Pause(args) => pause::execute(&args, true, stdout),
        Command::Resume(args) => pause::execute(&args, false, stdout),
        Command::Hold(args) => hold::hold(&args, stdout),
        Command::Release(args) => hold::release(&args, stdout),
        Command::Runs(command) => runs::execute(&command, stdout),
        Command::Dead(command) => dead::execute(&command, stdout),
        Command::Workflow(command) => workflow::execute(&command, stdout),
        Command::Completions(args) => docs::completions(&args, stdout),
        Command::Man(args) => docs::man(&args, stdout),
    }
}

/// Where `--schedules` points by default: `schedules/` in the working directory.
fn default_schedules() -> PathBuf {
    PathBuf::from("schedules")
}

fn parse_zone(name: &str) -> Result<Tz, CliError> {
    crate::schedule::parse_zone(name).map_err(CliError::Argument)
}

/// Writes one row per job: name, schedule, zone and its next `count` fires after `now`.
fn write_jobs(
    out: &mut impl io::Write,
    jobs: &[Job],
    now: DateTime<Utc>,
    count: usize,
) -> io::Result<()> {
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let schedule = job
                .schedule
                .as_ref()
                .map_or_else(|| "(on demand)".to_owned(), ToString::to_string);
            let next = if !job.enabled {
                "(disabled)".to_owned()
            } else if job.schedule.is_none() {
                "-".to_owned()
            } else {
                let fires: Vec<String> = job
                    .schedule
                    .iter()
                    .flat_map(|schedule| schedule.fires_after(now, job.timezone))
                    .take(count)
                    .map(|fire| times::format_fire(fire, job.timezone))
                    .collect();
                fires.join(", ")
            };
            vec![
                job.name.clone(),
                schedule,
                job.timezone.name().to_owned(),
                next,
            ]
        })
        .collect();
    write_table(out, &["JOB", "SCHEDULE", "ZONE", "NEXT FIRES"], &rows)
}

/// The fields of a Redis hash (a run's, a replica's) as a JSON object: Redis stores every value
/// as a string, but `--json` readers should not have to know which ones are numbers. Counts and
/// times (`*_ms`) are numbers, or null when empty; a value that does not parse stays the string
/// it is, so that foreign or damaged data is shown rather than hidden.
fn typed_fields(
    fields: impl IntoIterator<Item = (String, String)>,
) -> serde_json::Map<String, serde_json::Value> {
    const INTEGERS: [&str; 7] = [
        "attempt",
        "max_attempts",
        "exit_code",
        "max_concurrency",
        "pid",
        "busy_workers",
        "max_workers",
    ];
    fields
        .into_iter()
        .map(|(name, value)| {
            let typed = if !(INTEGERS.contains(&name.as_str()) || name.ends_with("_ms")) {
                value.into()
            } else if value.is_empty() {
                serde_json::Value::Null
            } else {
                value
                    .parse::<i64>()
                    .map_or_else(|_| value.into(), serde_json::Value::from)
            };
            (name, typed)
        })
        .collect()
}

/// The command line's wording of a client's refusal.
impl From<crate::client::ClientError> for CliError {
    fn from(error: crate::client::ClientError) -> Self {
        use crate::client::ClientError;
        match error {
            ClientError::UnknownJob(job) => CliError::UnknownJob(job),
            ClientError::InThePast { due_ms, now_ms } => CliError::Argument(format!(
                "--at {} is in the past (Redis's clock reads {}): pass --allow-past to run the \
                 job at once",
                times::rfc3339(due_ms),
                times::rfc3339(now_ms)
            )),
            ClientError::Store(error) => CliError::Store(error),
            error @ (ClientError::Duplicate { .. }
            | ClientError::EveryReplica(_)
            | ClientError::UnknownReplica { .. }
            | ClientError::Payload(_)
            | ClientError::NoDeadRun(_)
            | ClientError::DamagedDeadRun { .. }
            | ClientError::JobPaused { .. }
            | ClientError::JobUnknown { .. }
            | ClientError::UnknownWorkflow(_)
            | ClientError::NotAWorkflow(_)
            | ClientError::RetryUndeclared { .. }
            | ClientError::NoWorkflowInstance(_)
            | ClientError::UndeclaredStep { .. }
            | ClientError::NotATarget { .. }
            | ClientError::NoTarget(_)) => CliError::Argument(error.to_string()),
        }
    }
}

/// `--namespace`, checked as the store checks it, so that a bad one is refused with the usage.
/// Reads `--namespace`: one namespace, or (for `run`) several, comma-separated, each once.
fn namespaces(value: &str) -> Result<String, String> {
    let several = value.contains(',');
    let mut seen = std::collections::BTreeSet::new();
    for namespace in value.split(',') {
        if several && namespace.is_empty() {
            return Err(format!(
                "{value:?} names an empty namespace: a comma at an end, or two in a row"
            ));
        }
        if several && namespace.trim() != namespace {
            return Err(format!(
                "{value:?}: separate namespaces with commas alone, without spaces"
            ));
        }
        crate::store::validate_namespace(namespace).map_err(|error| error.to_string())?;
        // Each of several namespaces is served from the subdirectory of --schedules named
        // after it: `..` would be the parent, `.x` a hidden directory.
        if several && namespace.starts_with('.') {
            return Err(format!(
                "namespace {namespace:?} cannot be served beside others: each names a \
                 subdirectory of --schedules, which cannot start with '.'"
            ));
        }
        if !seen.insert(namespace) {
            return Err(format!("namespace {namespace:?} is given twice"));
        }
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_namespaces_is_refused_with_what_is_wrong_in_it() {
        assert_eq!(namespaces("a,b-2,c.d"), Ok("a,b-2,c.d".to_owned()));
        // Alone, a namespace names no directory: a leading dot is only part of its hash tag.
        assert_eq!(namespaces(".hidden"), Ok(".hidden".to_owned()));
        for (value, expected) in [
            ("a,", "names an empty namespace"),
            ("a,,b", "names an empty namespace"),
            ("a, b", "without spaces"),
            ("a,..", "cannot start with '.'"),
            ("a,.b", "cannot start with '.'"),
            ("a,b,a", "namespace \"a\" is given twice"),
            ("a,b{c}", "invalid namespace \"b{c}\""),
        ] {
            let error = namespaces(value).expect_err(value);
            assert!(error.contains(expected), "{value}: {error}");
        }
    }

    #[test]
    fn hash_fields_become_typed_json_values() {
        let fields = [
            ("due_ms", "1767225600000"),
            ("attempt", "2"),
            ("exit_code", ""),
            ("finished_ms", "soon"),
            ("output", "42"),
            ("job", "nightly"),
        ]
        .map(|(name, value)| (name.to_owned(), value.to_owned()));
        assert_eq!(
            serde_json::Value::Object(typed_fields(fields)),
            serde_json::json!({
                "due_ms": 1_767_225_600_000_i64,
                "attempt": 2,
                "exit_code": null,
                "finished_ms": "soon",
                "output": "42",
                "job": "nightly",
            })
        );
    }

    #[test]
    fn a_password_in_a_redis_url_is_never_shown() {
        for (url, shown) in [
            ("redis://127.0.0.1:6379/", "redis://127.0.0.1:6379/"),
            (
                "redis://user:s3cret@host:6379/0",
                "redis://user:***@host:6379/0",
            ),
            ("rediss://:s3cret@host/", "rediss://:***@host/"),
            (
                "redis+unix:///run/redis.sock?user=u&pass=s3cret&db=1",
                "redis+unix:///run/redis.sock?user=u&pass=***&db=1",
            ),
            (
                "redis+unix:///run/redis.sock?pass=s3cret",
                "redis+unix:///run/redis.sock?pass=***",
            ),
            (
                "redis://host/?password=s3cret",
                "redis://host/?password=***",
            ),
            (
                "redis+sentinel://app:s3cret@h1,h2/m?SENTINEL_PASSWORD=x&sentinel_password=y",
                "redis+sentinel://app:***@h1,h2/m?SENTINEL_PASSWORD=***&sentinel_password=***",
            ),
        ] {
            assert_eq!(without_password(url), shown);
        }
    }
}
