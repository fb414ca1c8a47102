//! Why a command failed: [`CliError`], its wording (each says what to do about it) and the exit
//! code it gives the process.

use std::io;
use std::process::ExitCode;

use thiserror::Error;

use super::redact::without_password;
use super::{config, output, times};
use crate::schedule::{CronError, LoadError};

/// Why a command failed. Each says what to do about it.
#[derive(Debug, Error)]
pub enum CliError {
    /// The schedule directory has problems; each is listed.
    #[error("{0}")]
    ScheduleDir(#[from] LoadError),
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
    /// The archive (`--archive`) cannot be opened.
    #[error("{0}")]
    Archive(#[from] crate::archive::ArchiveError),
    /// The archive (`--archive`, or the namespace's) cannot be read.
    #[error("{0}")]
    ArchiveRead(#[from] crate::archive::read::ReadError),
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
    /// A run followed to its end (`runs show --follow`) did not succeed: the process exits
    /// with its exit code, as the command itself would have.
    #[error("{message}")]
    RunNotSucceeded {
        /// How the run ended, in words.
        message: String,
        /// The run's exit code, or 1 when it has none (killed by a signal, timed out, skipped).
        code: u8,
    },
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
    pub(super) fn unreachable(
        url: &str,
        source: crate::store::StoreError,
        url_given: bool,
    ) -> Self {
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
    /// imports with lines that need attention, a followed run's own when it did not succeed,
    /// 2 for everything else.
    pub fn exit_code(&self) -> ExitCode {
        match self {
            CliError::ScheduleDir(_) | CliError::ImportNeedsAttention(_) => ExitCode::from(1),
            CliError::RunNotSucceeded { code, .. } => ExitCode::from(*code),
            _ => ExitCode::from(2),
        }
    }

    /// The error as standard error shows it: what it quotes from outside (a run's error, a
    /// value from Redis or a schedule file) cannot steer the terminal.
    pub fn printable(&self) -> String {
        output::printable(&self.to_string()).into_owned()
    }

    pub(super) fn io(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| CliError::Io { context, source }
    }

    /// Like [`CliError::io`], for the id of something just created: a reader gone away is an
    /// error too, since the id is lost and a retry would create a second.
    pub(super) fn unreported(context: impl Into<String>) -> impl FnOnce(io::Error) -> Self {
        let context = context.into();
        move |source| CliError::Unreported { context, source }
    }
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
            | ClientError::BadCursor(_)
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
pub(super) fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
