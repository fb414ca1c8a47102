//! A private `redis-server` per test: free port, own directory, killed on drop.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A running `redis-server` that only this test uses.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: TempDir,
}

impl RedisServer {
    /// Starts `redis-server` on a free loopback port and waits until it answers PING.
    ///
    /// # Panics
    /// When `redis-server` is not installed (the message says how to install it) or does not
    /// come up within 10 s (the message includes its log).
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for redis-server");
        let port = free_port();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--logfile", "redis.log"])
            .arg("--dir")
            .arg(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start redis-server ({error}): these tests need a real Redis. \
                     Install it with `sudo apt-get install -y redis-server redis-tools` \
                     (Debian/Ubuntu) or your system's package manager"
                )
            });
        let server = Self { child, port, dir };
        server.wait_until_ready();
        server
    }

    /// The URL to connect to it.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A plain synchronous connection, for seeding and inspecting state.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|client| client.get_connection())
            .unwrap_or_else(|error| panic!("connecting to {}: {error}\n{}", self.url(), self.log()))
    }

    /// The server's log, for failure messages.
    pub fn log(&self) -> String {
        let path: PathBuf = self.dir.path().join("redis.log");
        std::fs::read_to_string(&path).unwrap_or_else(|error| format!("(no log: {error})"))
    }

    fn wait_until_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pong = redis::Client::open(self.url())
                .and_then(|client| client.get_connection())
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

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}
