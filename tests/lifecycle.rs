//! A replica's life: a log stream that cannot stop it.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{free_port, http_get, sample, wait_until};

/// A Redis, a schedule directory and a ledger of the runs' starts.
struct Setup {
    server: RedisServer,
    dir: TempDir,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("schedules")).expect("schedules dir");
        Self {
            server: RedisServer::start(),
            dir,
        }
    }

    fn schedules(&self) -> PathBuf {
        self.dir.path().join("schedules")
    }

    fn write_jobs(&self, toml: &str) {
        std::fs::write(self.schedules().join("jobs.toml"), toml).expect("write jobs");
    }

    /// A shell command that appends the run's id to the ledger.
    fn record(&self) -> String {
        format!(
            "echo $REDCRON_RUN_ID >> {}",
            self.dir.path().join("ledger").display()
        )
    }

    /// The job `tick`, firing every second and recording each run.
    fn every_second_job(&self) -> String {
        format!(
            "[jobs.tick]\nschedule = \"* * * * * *\"\noverlap = \"allow\"\ncommand = \"{}\"\n",
            self.record()
        )
    }

    /// The run ids in the ledger.
    fn ledger(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("ledger"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// How many times the fire of `tick` at `fire_ms` started.
    fn starts_of(&self, fire_ms: i64) -> usize {
        let run = format!("tick@{fire_ms}");
        self.ledger().iter().filter(|line| **line == run).count()
    }

    fn redis_now_ms(&self) -> i64 {
        let (seconds, micros): (i64, i64) = redis::cmd("TIME")
            .query(&mut self.server.connection())
            .expect("TIME");
        seconds * 1000 + micros / 1000
    }

    /// Waits until the `count` fires of `tick` from the next whole second on have each
    /// started once.
    fn assert_next_fires_run_once(&self, count: i64, log: impl Fn() -> String) {
        let from = (self.redis_now_ms() / 1000 + 1) * 1000;
        let fires: Vec<i64> = (0..count).map(|index| from + index * 1000).collect();
        assert!(
            wait_until(
                Duration::from_secs(u64::try_from(count).expect("a count") + 10),
                || fires.iter().all(|fire| self.starts_of(*fire) >= 1)
            ),
            "fires from {from} did not all run: {:?}\n{}",
            self.ledger(),
            log()
        );
        for fire in fires {
            assert_eq!(self.starts_of(fire), 1, "fire {fire}: {:?}", self.ledger());
        }
    }
}

/// A replica's metrics endpoint: its port and the flag that serves it there.
fn metrics_endpoint() -> (u16, String) {
    let port = free_port();
    (port, format!("127.0.0.1:{port}"))
}

fn serving(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

#[test]
fn a_log_pipe_closed_after_the_first_line_stops_neither_fires_nor_signals() {
    let setup = Setup::new();
    setup.write_jobs(&setup.every_second_job());
    let (port, address) = metrics_endpoint();
    let mut replica = ReplicaProcess::start_with_stderr(
        "r1",
        &setup.server.url(),
        &setup.schedules(),
        &["--metrics-addr", &address],
        Stdio::piped(),
    );
    let mut first = String::new();
    {
        let mut stderr = std::io::BufReader::new(replica.take_stderr().expect("a pipe"));
        stderr.read_line(&mut first).expect("the first log line");
        // Dropped here: the replica's next writes fail with EPIPE.
    }
    assert!(!first.is_empty());

    // Each run logs its start and end, all into the closed pipe.
    setup.assert_next_fires_run_once(3, String::new);
    assert!(serving(port));
    let metrics = http_get(port, "/metrics").1;
    assert!(
        sample(&metrics, "redcron_log_lines_dropped_total") >= 6.0,
        "{metrics}"
    );
    assert_eq!(http_get(port, "/healthz"), (200, "ok\n".to_owned()));

    let stopping = Instant::now();
    assert_eq!(replica.terminate(Duration::from_secs(5)), Some(0));
    assert!(stopping.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_full_log_device_neither_stops_fires_nor_panics() {
    let setup = Setup::new();
    setup.write_jobs(&setup.every_second_job());
    let (port, address) = metrics_endpoint();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let mut replica = ReplicaProcess::start_with_stderr(
        "r1",
        &setup.server.url(),
        &setup.schedules(),
        &["--metrics-addr", &address],
        Stdio::from(full),
    );
    setup.assert_next_fires_run_once(3, String::new);
    assert!(wait_until(Duration::from_secs(5), || serving(port)));
    let metrics = http_get(port, "/metrics").1;
    assert!(
        sample(&metrics, "redcron_log_lines_dropped_total") >= 6.0,
        "{metrics}"
    );
    // A panic would have exited with 101.
    assert_eq!(replica.terminate(Duration::from_secs(5)), Some(0));
}
