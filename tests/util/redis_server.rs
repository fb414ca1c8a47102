//! A private `redis-server` per test: on a unix socket in its own directory (no port to race
//! other tests for, the same address after a restart), killed on drop, and the ways
//! to hurt it (restarts, crashes, freezes, stalls, a restore from an older copy) that the
//! integration tests and the chaos runner inject.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tempfile::TempDir;

use super::wait::wait_until;

/// The RDB copy kept by [`RedisServer::snapshot`] for [`RedisServer::restore_snapshot`]: kept
/// apart from `dump.rdb`, which nothing else may overwrite meanwhile.
const SNAPSHOT_FILE: &str = "snapshot.rdb";

/// The server's socket, in its directory.
const SOCKET_FILE: &str = "redis.sock";

/// A running `redis-server` that only this test uses.
pub struct RedisServer {
    child: Child,
    dir: TempDir,
    appendonly: bool,
    /// The TLS port and the server's TLS arguments, when it speaks TLS too.
    tls: Option<(u16, Vec<String>)>,
}

impl RedisServer {
    /// Starts `redis-server` on a unix socket, without persistence, and waits until it answers
    /// PING.
    ///
    /// # Panics
    /// When `redis-server` is not installed (the message says how to install it) or does not
    /// come up within 10 s (the message includes its log).
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// Like [`RedisServer::start`], with AOF on (`appendfsync everysec`), so that a restart
    /// keeps the data.
    pub fn start_with_aof() -> Self {
        Self::start_with(true)
    }

    /// Like [`RedisServer::start`], also listening for TLS on a loopback port with the PEM files
    /// `certificate`, `key` and `ca` (which client certificates must be signed by).
    pub fn start_with_tls(certificate: &Path, key: &Path, ca: &Path) -> Self {
        let arguments = [
            ("--tls-cert-file", certificate),
            ("--tls-key-file", key),
            ("--tls-ca-cert-file", ca),
        ]
        .into_iter()
        .flat_map(|(flag, path)| [flag.to_owned(), path.display().to_string()])
        .chain(["--tls-auth-clients".to_owned(), "yes".to_owned()])
        .collect();
        Self::start_with_tls_arguments(false, Some((free_port(), arguments)))
    }

    fn start_with(appendonly: bool) -> Self {
        Self::start_with_tls_arguments(appendonly, None)
    }

    fn start_with_tls_arguments(appendonly: bool, tls: Option<(u16, Vec<String>)>) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for redis-server");
        let child = spawn(dir.path(), appendonly, tls.as_ref());
        let server = Self {
            child,
            dir,
            appendonly,
            tls,
        };
        server.wait_until_ready();
        server
    }

    /// The `rediss://` URL of its TLS port, when it has one.
    pub fn tls_url(&self) -> Option<String> {
        let (port, _) = self.tls.as_ref()?;
        Some(format!("rediss://127.0.0.1:{port}/"))
    }

    /// Shuts the server down cleanly (it writes its AOF), leaves it down for `down`, and
    /// starts it again on the same socket and directory.
    pub fn restart(&mut self, down: Duration) {
        let _ = redis::cmd("SHUTDOWN").query::<()>(&mut self.timed_connection());
        let _ = self.child.wait();
        self.start_again(down);
    }

    /// `kill -9`s the server: it loses the writes its AOF had not synced yet (up to a second
    /// with `appendfsync everysec`). It starts again after `down`, on the same socket and
    /// directory.
    pub fn crash_and_restart(&mut self, down: Duration) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.start_again(down);
    }

    /// Holds every client's commands for `stall` (`CLIENT PAUSE ... ALL`), returning at once:
    /// connections stay open and commands wait instead of failing, as behind a long fork or a
    /// saturated host.
    pub fn stall(&self, stall: Duration) {
        let () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(stall.as_millis() as u64)
            .arg("ALL")
            .query(&mut self.timed_connection())
            .expect("CLIENT PAUSE");
    }

    /// Fills the server past a small `maxmemory` under `noeviction`: from then on it refuses
    /// every write that needs memory (`OOM`), until the filler (the key `filler`) is deleted or
    /// [`RedisServer::lift_memory_limit`].
    pub fn fill_memory(&self) {
        let mut redis = self.timed_connection();
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query(&mut redis)
            .expect("INFO");
        let used: u64 = info
            .lines()
            .find_map(|line| line.strip_prefix("used_memory:"))
            .and_then(|bytes| bytes.trim().parse().ok())
            .expect("used_memory");
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("noeviction")
            .arg("maxmemory")
            .arg(used + (1 << 20))
            .query(&mut redis)
            .expect("CONFIG SET");
        // Redis checks the limit when a script starts, so one script passes it by 2 MiB.
        let () = redis::Script::new(
            "for i = 1, 2048 do redis.call('HSET', KEYS[1], i, string.rep('x', 1024)) end",
        )
        .key("filler")
        .invoke(&mut redis)
        .expect("fill redis");
    }

    /// Lifts the memory limit, as an operator would (`CONFIG SET maxmemory 0`): writes are
    /// taken again.
    pub fn lift_memory_limit(&self) {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(0)
            .query(&mut self.timed_connection())
            .expect("CONFIG SET");
    }

    /// Copies the data as it is now to an RDB file kept for [`RedisServer::restore_snapshot`],
    /// with every write held off meanwhile, and returns `read`'s answer, read in the same
    /// instant.
    pub fn snapshot<T>(&self, read: impl FnOnce(&mut redis::Connection) -> T) -> T {
        let mut connection = self.timed_connection();
        let () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(10_000)
            .arg("WRITE")
            .query(&mut connection)
            .expect("CLIENT PAUSE");
        let answer = read(&mut connection);
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
        answer
    }

    /// `kill -9`s the server and, after `down`, starts it from the last
    /// [`RedisServer::snapshot`]: Redis restored from an older copy, as after a failover to a
    /// replica that lagged or a restore from backup. Returns once it answers (with AOF on, once
    /// its new AOF is written).
    ///
    /// A server started with AOF on loads its AOF, which holds every write up to the kill, and
    /// with no AOF at all it starts empty rather than read an RDB file. So the copy is always
    /// loaded with AOF off; a server that had AOF on gets it back live (`CONFIG SET appendonly
    /// yes`, Redis's own way from RDB to AOF): Redis writes a new AOF from the data in memory,
    /// the restored copy plus whatever clients wrote meanwhile, and a later crash or restart
    /// loads that AOF.
    pub fn restore_snapshot(&mut self, down: Duration) {
        self.kill9();
        std::thread::sleep(down);
        std::fs::copy(
            self.dir.path().join(SNAPSHOT_FILE),
            self.dir.path().join("dump.rdb"),
        )
        .expect("put back the copy that a snapshot kept");
        self.spawn_and_wait(false);
        if self.appendonly {
            self.switch_aof_on();
        }
    }

    /// Turns AOF on in the running server and waits until Redis has written the AOF.
    fn switch_aof_on(&self) {
        let mut connection = self.timed_connection();
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendonly")
            .arg("yes")
            .query(&mut connection)
            .expect("CONFIG SET appendonly yes");
        let mut info = String::new();
        let field = |info: &str, name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .unwrap_or_default()
                .to_owned()
        };
        let written = wait_until(Duration::from_secs(10), || {
            info = redis::cmd("INFO")
                .arg("persistence")
                .query(&mut connection)
                .expect("INFO persistence");
            field(&info, "aof_enabled") == "1"
                && field(&info, "aof_rewrite_in_progress") == "0"
                && field(&info, "aof_rewrite_scheduled") == "0"
        });
        assert!(
            written,
            "AOF was not on again within 10 s of a restore:\n{info}\n{}",
            self.log()
        );
        assert_eq!(
            field(&info, "aof_last_bgrewrite_status"),
            "ok",
            "the AOF rewrite after a restore failed:\n{}",
            self.log()
        );
    }

    /// `kill -9`s the server and leaves it down.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn start_again(&mut self, down: Duration) {
        std::thread::sleep(down);
        self.spawn_and_wait(self.appendonly);
    }

    fn spawn_and_wait(&mut self, appendonly: bool) {
        self.child = spawn(self.dir.path(), appendonly, self.tls.as_ref());
        self.wait_until_ready();
    }

    /// Sends `signal` to the server: SIGSTOP freezes it (clients time out), SIGCONT thaws it.
    pub fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        kill(pid, signal).expect("signal redis-server");
    }

    /// The URL to connect to it.
    pub fn url(&self) -> String {
        format!(
            "redis+unix://{}",
            self.dir.path().join(SOCKET_FILE).display()
        )
    }

    /// The URL to connect to it as the ACL user `user` with `password`.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!("{}?user={user}&pass={password}", self.url())
    }

    /// Redis's clock, ms: the one the scripts decide by.
    pub fn now_ms(&self) -> i64 {
        let (seconds, micros): (i64, i64) = redis::cmd("TIME")
            .query(&mut self.connection())
            .expect("TIME");
        seconds * 1_000 + micros / 1_000
    }

    /// Starts counting the commands Redis runs afresh (`CONFIG RESETSTAT`), for
    /// [`RedisServer::command_calls`].
    pub fn reset_command_calls(&self) {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut self.connection())
            .expect("CONFIG RESETSTAT");
    }

    /// How many times Redis ran each command since its statistics were last reset, the
    /// commands scripts run included, by lower-case name (`INFO commandstats`): what a script
    /// costs Redis, which a test can hold it to.
    pub fn command_calls(&self) -> std::collections::BTreeMap<String, u64> {
        command_calls(&mut self.connection())
    }

    /// A plain synchronous connection, for seeding and inspecting state.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|client| client.get_connection())
            .unwrap_or_else(|error| panic!("connecting to {}: {error}\n{}", self.url(), self.log()))
    }

    /// A connection for the harness's own commands, which gives up instead of hanging on a
    /// server that is frozen or stalled.
    fn timed_connection(&self) -> redis::Connection {
        connect(&self.url(), Duration::from_secs(10))
            .unwrap_or_else(|error| panic!("connecting to {}: {error}\n{}", self.url(), self.log()))
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        let path = self.dir.path().join("redis.log");
        std::fs::read_to_string(&path).unwrap_or_else(|error| format!("(no log: {error})"))
    }

    fn wait_until_ready(&self) {
        let mut pong = Ok(String::new());
        let ready = wait_until(Duration::from_secs(10), || {
            pong = connect(&self.url(), Duration::from_secs(1))
                .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
            pong.is_ok()
        });
        assert!(
            ready,
            "redis-server at {} did not answer PING within 10 s: {pong:?}\n{}",
            self.url(),
            self.log()
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection to `url` whose connecting, reading and writing give up after `timeout`, instead
/// of hanging on a frozen or stalled server.
pub fn connect(url: &str, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let connection = redis::Client::open(url)?.get_connection_with_timeout(timeout)?;
    connection.set_read_timeout(Some(timeout))?;
    connection.set_write_timeout(Some(timeout))?;
    Ok(connection)
}

fn spawn(dir: &Path, appendonly: bool, tls: Option<&(u16, Vec<String>)>) -> Child {
    let tls_arguments: Vec<String> = tls
        .map(|(port, arguments)| {
            let mut all = vec!["--tls-port".to_owned(), port.to_string()];
            all.extend(arguments.iter().cloned());
            all
        })
        .unwrap_or_default();
    Command::new("redis-server")
        // No TCP port but the TLS one, when asked for.
        .args(["--port", "0", "--bind", "127.0.0.1"])
        .arg("--unixsocket")
        .arg(dir.join(SOCKET_FILE))
        .args(["--unixsocketperm", "700"])
        // No RDB saves of its own: `dump.rdb` is only ever what a snapshot wrote.
        .args(["--save", ""])
        .args(["--appendonly", if appendonly { "yes" } else { "no" }])
        .args(["--appendfsync", "everysec", "--logfile", "redis.log"])
        .args(&tls_arguments)
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|error| {
            panic!(
                "cannot start redis-server ({error}): these tests need a real Redis. Install it \
                 with `sudo apt-get install -y redis-server redis-tools` (Debian/Ubuntu) or your \
                 system's package manager"
            )
        })
}

/// A loopback port nobody listens on right now: for what a unix socket cannot carry (a TLS
/// port, a replica's metrics endpoint).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// How many times Redis has run each command (`scan`, `hgetall`...) since its statistics were
/// last reset (`CONFIG RESETSTAT`), those scripts run included: `INFO commandstats`.
pub fn command_calls(redis: &mut redis::Connection) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(redis)
        .expect("INFO commandstats");
    info.lines()
        .filter_map(|line| {
            let (command, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((command.to_owned(), calls))
        })
        .collect()
}
