//! A replica's life: a log stream that cannot stop it, and health that tells the truth.

use std::io::BufRead;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use redis::Commands;
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

    fn replica(&self, id: &str, extra: &[&str]) -> ReplicaProcess {
        ReplicaProcess::start(
            id,
            &self.server.url(),
            &self.schedules(),
            self.dir.path(),
            extra,
        )
    }

    fn leader(&self) -> Option<String> {
        self.server
            .connection()
            .get("{test}:leader")
            .expect("GET leader")
    }

    fn leads(&self, id: &str) -> bool {
        self.leader()
            .is_some_and(|token| token.starts_with(&format!("{id}:")))
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

#[test]
fn readyz_fails_while_redis_refuses_writes_and_a_follower_counts_the_errors() {
    let setup = Setup::new();
    setup.write_jobs("[jobs.on-demand]\ncommand = \"true\"\n");
    let leader = setup.replica("r1", &[]);
    assert!(
        wait_until(Duration::from_secs(10), || setup.leads("r1")),
        "{}",
        leader.log()
    );
    let (port, address) = metrics_endpoint();
    let follower = setup.replica("r2", &["--metrics-addr", &address]);
    assert!(
        wait_until(Duration::from_secs(10), || serving(port)
            && http_get(port, "/readyz") == (200, "ready\n".to_owned())),
        "{}",
        follower.log()
    );
    let errors = || sample(&http_get(port, "/metrics").1, "redcron_redis_errors_total");
    let errors_before = errors();

    // Fill Redis past a small maxmemory under noeviction: every write is refused with OOM.
    let mut redis = setup.server.connection();
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(&mut redis)
        .expect("INFO");
    let used: u64 = info
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|bytes| bytes.trim().parse().ok())
        .expect("used_memory");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .arg("maxmemory")
        .arg(used + (1 << 20))
        .query(&mut redis)
        .expect("CONFIG SET");
    // Redis checks the limit when a script starts, so one script passes it by 2 MiB.
    let _: () = redis::Script::new(
        "for i = 1, 2048 do redis.call('HSET', KEYS[1], i, string.rep('x', 1024)) end",
    )
    .key("filler")
    .invoke(&mut redis)
    .expect("fill redis");
    assert!(
        wait_until(Duration::from_secs(10), || http_get(port, "/readyz")
            == (503, "redis refuses writes\n".to_owned())),
        "{:?}\n{}",
        http_get(port, "/readyz"),
        follower.log()
    );
    let errors_during = errors();
    assert!(errors_during > errors_before, "{errors_during}");
    assert!(
        wait_until(Duration::from_secs(10), || errors() > errors_during),
        "the follower's failed writes are counted as they keep failing"
    );
    // Liveness allows an outage this short: a restart would not free Redis's memory.
    assert_eq!(http_get(port, "/healthz"), (200, "ok\n".to_owned()));

    let _: () = redis.del("filler").expect("DEL filler");
    assert!(
        wait_until(Duration::from_secs(10), || http_get(port, "/readyz")
            == (200, "ready\n".to_owned())),
        "{:?}\n{}",
        http_get(port, "/readyz"),
        follower.log()
    );
}
