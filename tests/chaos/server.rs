//! The chaos runner's `redis-server`: AOF on (`appendfsync everysec`), one port and directory
//! across restarts, and the ways to hurt it, including a restore from an older snapshot, which
//! the shared test harness refuses with AOF on.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use crate::cluster::{NAMESPACE, now_ms};

/// The RDB copy kept by [`Redis::snapshot`] for [`Redis::restore`]: kept apart from
/// `dump.rdb`, which nothing else may overwrite meanwhile.
const SNAPSHOT_FILE: &str = "snapshot.rdb";

/// A `redis-server` that only the chaos runner uses, killed on drop.
pub struct Redis {
    child: Child,
    port: u16,
    dir: TempDir,
}

/// What [`Redis::snapshot`] saw in the instant it copied the data.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// When writes were held off for the copy, ms: what was written after is lost by a restore.
    pub at_ms: i64,
    /// The leader epoch in the copy: a restore takes the epoch counter back to it.
    pub epoch: u64,
}

impl Redis {
    /// Starts `redis-server` with AOF on, on a free loopback port, and waits until it answers.
    ///
    /// # Panics
    /// When `redis-server` is not installed (the message says how to install it) or does not
    /// come up within 10 s (the message includes its log).
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for redis-server");
        let port = free_port();
        let child = spawn(port, dir.path(), true);
        let server = Self { child, port, dir };
        server.wait_until_ready();
        server
    }

    /// The URL to connect to it.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Shuts the server down cleanly (it writes its AOF), leaves it down for `down`, and starts
    /// it again.
    pub fn restart(&mut self, down: Duration) {
        if let Ok(mut connection) = connect(&self.url(), Duration::from_secs(5)) {
            let _ = redis::cmd("SHUTDOWN").query::<()>(&mut connection);
        }
        let _ = self.child.wait();
        std::thread::sleep(down);
        self.start_again(true);
    }

    /// `kill -9`s the server, which loses the writes its AOF had not synced (up to about a
    /// second), and starts it again after `down`.
    pub fn crash_and_restart(&mut self, down: Duration) {
        self.kill9();
        std::thread::sleep(down);
        self.start_again(true);
    }

    /// Sends `signal`: SIGSTOP freezes it (clients time out), SIGCONT thaws it.
    pub fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        kill(pid, signal).expect("signal redis-server");
    }

    /// Holds every client's commands for `stall` (`CLIENT PAUSE ... ALL`), returning at once:
    /// connections stay open and commands wait instead of failing, as behind a long fork or a
    /// saturated host.
    pub fn stall(&self, stall: Duration) {
        let mut connection = connect(&self.url(), Duration::from_secs(5)).expect("connect");
        let () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(stall.as_millis() as u64)
            .arg("ALL")
            .query(&mut connection)
            .expect("CLIENT PAUSE");
    }

    /// Copies the data as it is now to an RDB file kept for [`Redis::restore`], with writes
    /// held off meanwhile so that the copy is one instant.
    pub fn snapshot(&self) -> Snapshot {
        let mut connection = connect(&self.url(), Duration::from_secs(10)).expect("connect");
        let () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(10_000)
            .arg("WRITE")
            .query(&mut connection)
            .expect("CLIENT PAUSE");
        let at_ms = now_ms();
        let epoch: Option<u64> = redis::cmd("GET")
            .arg(format!("{{{NAMESPACE}}}:epoch"))
            .query(&mut connection)
            .expect("GET the epoch");
        let () = redis::cmd("SAVE").query(&mut connection).expect("SAVE");
        let () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query(&mut connection)
            .expect("CLIENT UNPAUSE");
        std::fs::copy(
            self.dir.path().join("dump.rdb"),
            self.dir.path().join(SNAPSHOT_FILE),
        )
        .expect("keep the snapshot");
        Snapshot {
            at_ms,
            epoch: epoch.unwrap_or(0),
        }
    }

    /// `kill -9`s the server and, after `down`, starts it from the last [`Redis::snapshot`]:
    /// Redis as it was some seconds ago, as after a restore from backup or a failover to a
    /// replica that lagged.
    ///
    /// A server started with AOF on loads its AOF, which holds every write up to the kill, and
    /// with no AOF at all it starts empty rather than read an RDB file. So the copy is loaded
    /// with AOF off, and AOF is then switched on live (`CONFIG SET appendonly yes`, Redis's own
    /// way from RDB to AOF): Redis writes a new AOF from the data in memory, the restored copy
    /// plus whatever replicas wrote meanwhile, and goes on as before; a later crash or restart
    /// loads that AOF. Returns once the new AOF is written.
    pub fn restore(&mut self, down: Duration) {
        self.kill9();
        std::thread::sleep(down);
        std::fs::copy(
            self.dir.path().join(SNAPSHOT_FILE),
            self.dir.path().join("dump.rdb"),
        )
        .expect("put the snapshot back");
        self.start_again(false);
        let mut connection = connect(&self.url(), Duration::from_secs(5)).expect("connect");
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("yes")
            .query(&mut connection)
            .expect("CONFIG SET appendonly yes");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut connection)
                .expect("INFO persistence");
            let field = |name: &str| {
                info.lines()
                    .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
                    .unwrap_or_default()
                    .to_owned()
            };
            if field("aof_enabled") == "1"
                && field("aof_rewrite_in_progress") == "0"
                && field("aof_rewrite_scheduled") == "0"
            {
                assert_eq!(
                    field("aof_last_bgrewrite_status"),
                    "ok",
                    "the AOF rewrite after a restore failed:\n{}",
                    self.log()
                );
                return;
            }
            assert!(
                Instant::now() < deadline,
                "AOF was not on again within 10 s of a restore:\n{info}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("redis.log"))
            .unwrap_or_else(|error| format!("(no log: {error})"))
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn start_again(&mut self, appendonly: bool) {
        self.child = spawn(self.port, self.dir.path(), appendonly);
        self.wait_until_ready();
    }

    fn wait_until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pong = connect(&self.url(), Duration::from_secs(1))
                .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
            if pong.is_ok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer PING within 10 s: {pong:?}\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = kill(
            Pid::from_raw(i32::try_from(self.child.id()).expect("a pid")),
            Signal::SIGCONT,
        );
        self.kill9();
    }
}

/// A connection that gives up after `timeout` instead of hanging on a frozen or stalled server.
pub fn connect(url: &str, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let connection = redis::Client::open(url)?.get_connection_with_timeout(timeout)?;
    connection.set_read_timeout(Some(timeout))?;
    connection.set_write_timeout(Some(timeout))?;
    Ok(connection)
}

fn spawn(port: u16, dir: &Path, appendonly: bool) -> Child {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        // No RDB saves of its own: `dump.rdb` is only ever what a snapshot wrote.
        .args(["--save", ""])
        .args(["--appendonly", if appendonly { "yes" } else { "no" }])
        .args(["--appendfsync", "everysec", "--logfile", "redis.log"])
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "cannot start redis-server ({error}): the chaos runner needs a real Redis. \
                 Install it with `sudo apt-get install -y redis-server redis-tools` \
                 (Debian/Ubuntu) or your system's package manager"
            )
        })
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}
