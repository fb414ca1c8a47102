//! One `redis-server` process of a multi-process topology ([`super::sentinel`],
//! [`super::cluster`]): on a loopback TCP port, with its own directory, configuration file and
//! log, killed on drop, and started again on the same port and directory after a crash.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

use super::redis_server::{connect, free_port};
use super::wait::wait_until;

/// The log file every node writes in its directory.
const LOG_FILE: &str = "redis.log";

/// How many times a node is started on fresh ports when another process took one of them
/// between [`free_port`] and the node's `bind`.
const PORT_ATTEMPTS: usize = 3;

/// How long the harness's own connections wait for a node before giving up.
pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A `redis-server` (or Sentinel) started from a configuration file in its own directory.
pub struct Node {
    label: String,
    port: u16,
    config: PathBuf,
    /// Given after the configuration file (`--sentinel`).
    arguments: Vec<String>,
    /// `None` while it is killed.
    child: Option<Child>,
    dir: TempDir,
}

impl Node {
    /// Starts a node, named `label` in messages, on a free loopback port in a new temporary
    /// directory, and waits until it answers PING. `config` gives the text of its configuration
    /// file, `file_name` in that directory, from the port and the directory (the text must
    /// make it log to `redis.log` there); `arguments` follow the file on the command line. When
    /// a port `config` uses turned out to be taken meanwhile, starts it again on other ones.
    ///
    /// # Panics
    /// When `redis-server` is not installed (the message says how to install it) or the node
    /// does not come up within 10 s (the message includes its log).
    pub fn start(
        label: &str,
        file_name: &str,
        arguments: &[&str],
        mut config: impl FnMut(u16, &Path) -> String,
    ) -> Self {
        let mut attempt = 1;
        loop {
            let dir = tempfile::tempdir().expect("a temporary directory for redis-server");
            let port = free_port();
            let path = dir.path().join(file_name);
            std::fs::write(&path, config(port, dir.path())).expect("write the node's config");
            let mut node = Self {
                label: label.to_owned(),
                port,
                config: path,
                arguments: arguments
                    .iter()
                    .map(|&argument| argument.to_owned())
                    .collect(),
                child: None,
                dir,
            };
            node.spawn();
            match node.wait_until_ready() {
                Ok(()) => return node,
                Err(_) if attempt < PORT_ATTEMPTS && node.lost_a_port() => attempt += 1,
                Err(error) => panic!("{error}"),
            }
        }
    }

    /// What it is, for messages: its role in the topology and its port.
    pub fn label(&self) -> String {
        format!("{} on 127.0.0.1:{}", self.label, self.port)
    }

    /// Its TCP port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Whether its process runs (it was not killed, or was started again since).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// `kill -9`s its process, by the process id it was started with, and reaps it.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again, after [`Node::kill9`], from its configuration file as it is now (Redis
    /// rewrites it on `CONFIG REWRITE`, Sentinel on every change), on the same port and
    /// directory, and waits until it answers PING.
    ///
    /// # Panics
    /// When it runs already, or does not come up within 10 s.
    pub fn restart(&mut self) {
        assert!(!self.is_running(), "{} runs already", self.label());
        self.spawn();
        if let Err(error) = self.wait_until_ready() {
            panic!("{error}");
        }
    }

    /// A connection to it whose reads and writes give up after [`TIMEOUT`].
    pub fn connect(&self) -> redis::RedisResult<redis::Connection> {
        connect(&self.url(), TIMEOUT)
    }

    /// Like [`Node::connect`], panicking with its log when it cannot connect.
    pub fn connection(&self) -> redis::Connection {
        self.connect().unwrap_or_else(|error| {
            panic!("connecting to {}: {error}\n{}", self.label(), self.log())
        })
    }

    /// `INFO section`, or `None` when it does not answer.
    pub fn info(&self, section: &str) -> Option<String> {
        let mut connection = self.connect().ok()?;
        redis::cmd("INFO").arg(section).query(&mut connection).ok()
    }

    /// The last `lines` lines of its log, under a heading that names it.
    pub fn log_tail(&self, lines: usize) -> String {
        let path = self.dir.path().join(LOG_FILE);
        let log =
            std::fs::read_to_string(&path).unwrap_or_else(|error| format!("(no log: {error})"));
        let all: Vec<&str> = log.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        let state = if self.is_running() { "" } else { ", killed" };
        format!("--- {}{state} ---\n{tail}\n", self.label())
    }

    fn log(&self) -> String {
        self.log_tail(50)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .arg(&self.config)
            .args(&self.arguments)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!(
                    "cannot start redis-server ({error}): these tests need a real Redis. Install \
                     it with `sudo apt-get install -y redis-server redis-tools` (Debian/Ubuntu) \
                     or your system's package manager"
                )
            });
        self.child = Some(child);
    }

    /// Whether it exited because a port it was given was taken meanwhile.
    fn lost_a_port(&mut self) -> bool {
        let exited = self
            .child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(Some(_))));
        exited && self.log().contains("Address already in use")
    }

    fn wait_until_ready(&mut self) -> Result<(), String> {
        let url = self.url();
        let mut pong = Ok(String::new());
        let mut exited = None;
        // A node that exited will not answer: no use waiting out the limit for it.
        wait_until(Duration::from_secs(10), || {
            pong = connect(&url, Duration::from_secs(1))
                .and_then(|mut connection| redis::cmd("PING").query::<String>(&mut connection));
            exited = self
                .child
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            pong.is_ok() || exited.is_some()
        });
        if pong.is_ok() {
            return Ok(());
        }
        Err(format!(
            "{} did not answer PING within 10 s ({pong:?}, exited: {exited:?}):\n{}",
            self.label(),
            self.log()
        ))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The value of `field` in an `INFO` answer.
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}
