//! Adaptive concurrency (`run --workers MIN..MAX`): a backlog of slow runs grows the number of
//! runs a replica executes at once, up to the maximum, and a calm spell shrinks it back.

use std::time::{Duration, Instant};

use redcron::engine::worker::{GROW_AFTER, SHRINK_AFTER};

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{cli, free_port, http_get, sample, wait_until};

const WORKERS_MAX: &str = "redcron_workers_max{namespace=\"test\"}";
const WORKERS_BUSY: &str = "redcron_workers_busy{namespace=\"test\"}";

#[test]
fn a_backlog_of_slow_runs_grows_the_workers_to_the_maximum_and_a_calm_spell_shrinks_them() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    let ledger = dir.path().join("ledger");
    std::fs::create_dir_all(&schedules).expect("schedules dir");
    std::fs::write(
        schedules.join("jobs.toml"),
        format!(
            "[jobs.slow]\ncommand = \"sleep 1; echo $REDCRON_RUN_ID >> {}\"\n",
            ledger.display()
        ),
    )
    .expect("write jobs");
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &schedules,
        dir.path(),
        &["--workers", "1..8", "--metrics-addr", &address],
    );
    let metric = |series| {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .is_ok()
            .then(|| sample(&http_get(port, "/metrics").1, series))
    };
    assert!(
        wait_until(Duration::from_secs(10), || metric(WORKERS_MAX) == Some(1.0)),
        "starts at the minimum: {:?}\n{}",
        metric(WORKERS_MAX),
        replica.log()
    );

    const RUNS: usize = 40;
    // An enqueue of a job no replica has declared yet is refused, and the metrics endpoint
    // answers before the replica has published its jobs: wait for that first.
    assert!(
        wait_until(Duration::from_secs(10), || cli(
            &server,
            dir.path(),
            &["jobs", "--json"]
        )
        .stdout
        .contains("\"slow\"")),
        "the replica declares slow\n{}",
        replica.log()
    );
    // The whole backlog in one bulk enqueue: runs triggered one command at a time arrive no
    // faster than the machine starts processes, and a loaded one starts them slower than the
    // workers end runs, so the backlog would never last.
    let backlog_file = dir.path().join("backlog.jsonl");
    std::fs::write(&backlog_file, "{\"job\": \"slow\"}\n".repeat(RUNS)).expect("write backlog");
    cli(
        &server,
        dir.path(),
        &[
            "enqueue",
            "--from",
            backlog_file.to_str().expect("a UTF-8 path"),
        ],
    )
    .success();
    // Doubling every GROW_AFTER while runs wait: 1, 2, 4, 8.
    let backlog = Instant::now();
    assert!(
        wait_until(GROW_AFTER * 3 + Duration::from_secs(10), || metric(
            WORKERS_MAX
        ) == Some(8.0)),
        "{:?}\n{}",
        metric(WORKERS_MAX),
        replica.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || metric(WORKERS_BUSY)
            == Some(8.0)),
        "eight run at once: {:?}",
        metric(WORKERS_BUSY)
    );
    let grown_in = backlog.elapsed();
    // The replica's log is read by a thread of its own: a line may come after the metric moved.
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .log()
            .contains("the replica now runs up to 8 at once")),
        "{}",
        replica.log()
    );
    assert!(
        !replica.log().contains("up to 16 at once"),
        "never above the maximum\n{}",
        replica.log()
    );

    // Every run ran, once.
    let ran = || {
        std::fs::read_to_string(&ledger)
            .unwrap_or_default()
            .lines()
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(30), || ran() == RUNS),
        "{} of {RUNS} ran\n{}",
        ran(),
        replica.log()
    );
    // No run waits any more: after a calm spell with runs still ending, another one idle.
    assert!(
        wait_until(SHRINK_AFTER * 2 + Duration::from_secs(10), || metric(
            WORKERS_MAX
        ) == Some(
            1.0
        )),
        "shrinks back: {:?}\n{}",
        metric(WORKERS_MAX),
        replica.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || replica.log().contains(
            "no run waited for a worker lately: the replica now runs up to 1 at once"
        )),
        "{}",
        replica.log()
    );
    assert!(grown_in < Duration::from_secs(15), "grew in {grown_in:?}");
}
