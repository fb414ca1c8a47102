//! The private `redis-server` that `redcron run` starts when no Redis URL is given: AOF on
//! (`appendfsync everysec`), data under the data directory, a unix socket only, stopped when
//! redcron exits. Every other command without `--redis` talks to the same socket.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use thiserror::Error;
use tokio::process::{Child, Command};
use tracing::info;

/// Why the embedded Redis could not be started.
#[derive(Debug, Error)]
pub enum EmbeddedError {
    /// `redis-server` is not on the PATH.
    #[error(
        "cannot start redis-server: it is not installed (Debian/Ubuntu: `sudo apt-get install -y \
         redis-server`); or pass --redis URL (or set REDIS_URL) to use a Redis you run"
    )]
    NotInstalled,
    /// `redis-server` is there but could not be started (permissions, resources).
    #[error(
        "cannot start redis-server: {0}; or pass --redis URL (or set REDIS_URL) to use a Redis \
         you run"
    )]
    Spawn(std::io::Error),
    /// The data directory cannot be created.
    #[error("cannot create the data directory {path}: {source}")]
    DataDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// It exited before it answered (a bad data directory, an AOF it cannot load).
    #[error("redis-server exited at start ({status}); see {log}")]
    Exited {
        /// How it exited.
        status: std::process::ExitStatus,
        /// Its log file.
        log: PathBuf,
    },
    /// It started but never answered.
    #[error("redis-server did not answer on {socket} within {seconds} s; see {log}")]
    NotReady {
        /// Its socket.
        socket: PathBuf,
        /// How long we waited.
        seconds: u64,
        /// Its log file.
        log: PathBuf,
    },
}

/// How long the embedded server has to come up.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long it has to write its AOF and exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Only a program the system cannot find is "not installed": any other failure says itself.
fn spawn_error(error: std::io::Error) -> EmbeddedError {
    if error.kind() == std::io::ErrorKind::NotFound {
        EmbeddedError::NotInstalled
    } else {
        EmbeddedError::Spawn(error)
    }
}

/// The unix socket of the embedded Redis under `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join("redis.sock")
}

/// The URL of the embedded Redis under `data_dir`.
pub fn socket_url(data_dir: &Path) -> String {
    let socket = socket_path(data_dir);
    let absolute = std::path::absolute(&socket).unwrap_or(socket);
    format!("redis+unix://{}", absolute.display())
}

/// A `redis-server` child process owned by this replica, or one already running on the same
/// data directory (started by another `redcron run` there), which is then left alone.
pub struct EmbeddedRedis {
    child: Option<Child>,
    url: String,
}

impl EmbeddedRedis {
    /// Starts `redis-server` on a unix socket in `data_dir`, unless one already answers there.
    ///
    /// ```no_run
    /// use std::path::Path;
    ///
    /// use redcron::store::embedded::EmbeddedRedis;
    /// use redcron::store::{Store, StoreSettings};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let redis = EmbeddedRedis::start(Path::new("/var/lib/redcron")).await?;
    /// let store = Store::connect(redis.url(), "redcron", StoreSettings::default()).await?;
    /// // ... run a replica on `store` ...
    /// redis.stop().await;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`EmbeddedError`], saying how to install `redis-server` when it is missing.
    pub async fn start(data_dir: &Path) -> Result<Self, EmbeddedError> {
        let url = socket_url(data_dir);
        if answers(&url).await {
            info!(
                url,
                "using the redis-server already running in the data directory"
            );
            return Ok(Self { child: None, url });
        }
        std::fs::create_dir_all(data_dir).map_err(|source| EmbeddedError::DataDir {
            path: data_dir.to_owned(),
            source,
        })?;
        let dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_owned());
        let socket = socket_path(&dir);
        let mut command = Command::new("redis-server");
        // A replica killed with SIGKILL must not leave its Redis running: the kernel sends
        // the server SIGTERM (it writes its AOF and exits) when the thread that started it
        // ends. That thread is the one awaiting this call: `redcron run`'s main thread, or a
        // runtime worker, which lives as long as its runtime.
        // SAFETY: between fork and exec the closure only makes one system call, prctl, which is
        // async-signal-safe, and allocates nothing.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = command
            .args(["--port", "0", "--unixsocket"])
            .arg(&socket)
            .args(["--unixsocketperm", "700", "--dir"])
            .arg(&dir)
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
                "--save",
                "",
            ])
            .args(["--logfile", "redis.log", "--maxmemory-policy", "noeviction"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(spawn_error)?;
        let started = Instant::now();
        while !answers(&url).await {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(EmbeddedError::Exited {
                    status,
                    log: dir.join("redis.log"),
                });
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(EmbeddedError::NotReady {
                    socket,
                    seconds: START_TIMEOUT.as_secs(),
                    log: dir.join("redis.log"),
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        info!(url, "started the embedded redis-server");
        Ok(Self {
            child: Some(child),
            url,
        })
    }

    /// The URL to connect to it.
    ///
    /// ```no_run
    /// # fn example(redis: redcron::store::embedded::EmbeddedRedis) {
    /// // An absolute unix socket: the same from any working directory.
    /// assert!(redis.url().starts_with("redis+unix:///"));
    /// # }
    /// ```
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server if this replica started it: SIGTERM, so it flushes its AOF.
    ///
    /// ```no_run
    /// # async fn example(redis: redcron::store::embedded::EmbeddedRedis) {
    /// // After the replica has stopped: its last outcomes are written first.
    /// redis.stop().await;
    /// # }
    /// ```
    pub async fn stop(mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = child.id().and_then(|pid| i32::try_from(pid).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(STOP_TIMEOUT, child.wait())
            .await
            .is_err()
        {
            let _ = child.kill().await;
        }
        info!("stopped the embedded redis-server");
    }
}

async fn answers(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    redis::cmd("PING")
        .query_async::<String>(&mut connection)
        .await
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_missing_program_is_reported_as_not_installed() {
        let missing = spawn_error(std::io::Error::from(std::io::ErrorKind::NotFound));
        assert!(matches!(missing, EmbeddedError::NotInstalled));
        assert!(missing.to_string().contains("apt-get install"), "{missing}");
        let denied = spawn_error(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        assert!(matches!(denied, EmbeddedError::Spawn(_)));
        let message = denied.to_string();
        assert!(!message.contains("not installed"), "{message}");
        assert!(message.contains("permission denied"), "{message}");
    }
}
