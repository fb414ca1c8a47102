//! A replica's life: supervised components, a log stream that cannot stop it, health that tells
//! the truth, and a shutdown that ends in time whatever Redis does.

use std::io::BufRead;
use std::process::Stdio;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use nix::sys::signal::Signal;
use redis::Commands;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::{free_port, http_get, sample, wait_until};

/// How long the outcome of a run is retried while Redis fails (the worker's recording window).
const RECORD_WINDOW: Duration = Duration::from_secs(10);

/// Whether replica `id` holds the leader lease.
fn leads(scenario: &Scenario, id: &str) -> bool {
    scenario
        .leader()
        .is_some_and(|token| token.starts_with(&format!("{id}:")))
}

/// How many times the fire of `tick` at `fire_ms` started.
fn starts_of(scenario: &Scenario, fire_ms: i64) -> usize {
    let run = format!("tick@{fire_ms}");
    scenario
        .ledger()
        .iter()
        .filter(|(line, _, _)| *line == run)
        .count()
}

/// Waits until a replica leads, then until the `count` fires of `tick` from the next whole
/// second on have each started once. A fresh namespace owes no fire due before its first
/// leader: on a loaded machine a replica may take more than a second to get there.
fn assert_next_fires_run_once(scenario: &Scenario, count: i64, log: impl Fn() -> String) {
    assert!(
        wait_until(Duration::from_secs(10), || scenario.leader().is_some()),
        "no leader\n{}",
        log()
    );
    let from = (scenario.redis_now_ms() / 1000 + 1) * 1000;
    let fires: Vec<i64> = (0..count).map(|index| from + index * 1000).collect();
    assert!(
        wait_until(
            Duration::from_secs(u64::try_from(count).expect("a count") + 10),
            || fires.iter().all(|fire| starts_of(scenario, *fire) >= 1)
        ),
        "fires from {from} did not all run: {:?}\n{}",
        scenario.ledger(),
        log()
    );
    for fire in fires {
        assert_eq!(
            starts_of(scenario, fire),
            1,
            "fire {fire}: {:?}",
            scenario.ledger()
        );
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
fn a_leader_whose_planner_panics_exits_non_zero_and_another_replica_takes_over() {
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    let trigger = scenario.dir.path().join("planner-panics");
    let trigger_path = trigger.display().to_string();
    let mut faulty = ReplicaProcess::start_with_env(
        "r1",
        &scenario.server.url(),
        &scenario.schedules(),
        scenario.dir.path(),
        &[],
        &[("REDCRON_TEST_FAULT_PLANNER_PANIC", &trigger_path)],
    );
    assert!(
        wait_until(Duration::from_secs(10), || leads(&scenario, "r1")),
        "r1 did not lead:\n{}",
        faulty.log()
    );
    let healthy = scenario.replica("r2", &[]);
    assert_next_fires_run_once(&scenario, 2, || faulty.log());

    std::fs::write(&trigger, "").expect("trigger the fault point");
    assert!(
        wait_until(Duration::from_secs(5), || faulty
            .log()
            .contains("the planner panicked")),
        "the planner did not panic:\n{}",
        faulty.log()
    );
    let panicked = Instant::now();
    let status = faulty.wait_exit(Duration::from_secs(2));
    let log = faulty.log();
    let status = status.unwrap_or_else(|| {
        panic!(
            "still running {:?} after the panic:\n{log}",
            panicked.elapsed()
        )
    });
    assert_eq!(status.code(), Some(2), "{log}");
    assert!(
        log.lines().any(|line| line.contains("ERROR")
            && line.contains("component=\"planner\"")
            && line.contains("the planner panicked: test fault point")),
        "the supervisor names the dead component at error level:\n{log}"
    );
    assert!(
        log.contains("released the leader lease"),
        "a dead replica gives its lease up:\n{log}"
    );
    assert!(
        log.trim_end()
            .ends_with("redcron: the planner panicked: test fault point: the planner panics: the replica stopped"),
        "{log}"
    );

    assert!(
        wait_until(Duration::from_secs(5), || leads(&scenario, "r2")),
        "r2 did not take over:\n{}",
        healthy.log()
    );
    assert_next_fires_run_once(&scenario, 3, || healthy.log());
}

#[test]
fn a_log_pipe_closed_after_the_first_line_stops_neither_fires_nor_signals() {
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    let (port, address) = metrics_endpoint();
    let mut replica = ReplicaProcess::start_with_stderr(
        "r1",
        &scenario.server.url(),
        &scenario.schedules(),
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
    assert_next_fires_run_once(&scenario, 3, String::new);
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
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    let (port, address) = metrics_endpoint();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let mut replica = ReplicaProcess::start_with_stderr(
        "r1",
        &scenario.server.url(),
        &scenario.schedules(),
        &["--metrics-addr", &address],
        Stdio::from(full),
    );
    assert_next_fires_run_once(&scenario, 3, String::new);
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
    let scenario = Scenario::new();
    scenario.write_jobs("[jobs.on-demand]\ncommand = \"true\"\n");
    let leader = scenario.replica("r1", &[]);
    assert!(
        wait_until(Duration::from_secs(10), || leads(&scenario, "r1")),
        "{}",
        leader.log()
    );
    let (port, address) = metrics_endpoint();
    let follower = scenario.replica("r2", &["--metrics-addr", &address]);
    assert!(
        wait_until(Duration::from_secs(10), || serving(port)
            && http_get(port, "/readyz") == (200, "ready\n".to_owned())),
        "{}",
        follower.log()
    );
    let errors = || {
        sample(
            &http_get(port, "/metrics").1,
            "redcron_redis_errors_total{namespace=\"test\"}",
        )
    };
    let errors_before = errors();

    // Every write is refused with OOM.
    scenario.server.fill_memory();
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

    let _: () = scenario
        .server
        .connection()
        .del("filler")
        .expect("DEL filler");
    assert!(
        wait_until(Duration::from_secs(10), || http_get(port, "/readyz")
            == (200, "ready\n".to_owned())),
        "{:?}\n{}",
        http_get(port, "/readyz"),
        follower.log()
    );
}

#[test]
fn sigterm_with_redis_gone_exits_within_grace_and_recording_window_and_never_leads() {
    let mut scenario = Scenario::new();
    let grace = Duration::from_secs(6);
    let at = (scenario.redis_now_ms() / 1000 + 3) * 1000;
    let fire: DateTime<Utc> = DateTime::from_timestamp_millis(at).expect("a time");
    scenario.write_jobs(&format!(
        "[jobs.long]\nschedule = \"{}\"\nqueue = \"slow\"\ncommand = \"{}; sleep 60\"\n",
        fire.format("%-S %-M %-H %-d %-m *"),
        scenario.record("")
    ));
    // r1 leads and runs nothing; r2 serves the queue of the long job only.
    let mut leader = scenario.replica("r1", &["--queues", "default"]);
    assert!(
        wait_until(Duration::from_secs(10), || leads(&scenario, "r1")),
        "{}",
        leader.log()
    );
    let grace_flag = format!("{}s", grace.as_secs());
    let mut stopping =
        scenario.replica("r2", &["--queues", "slow", "--shutdown-grace", &grace_flag]);
    assert!(
        wait_until(Duration::from_secs(15), || scenario.ledger().len() == 1),
        "{}",
        stopping.log()
    );

    // The lease falls free while r2 is stopping: it must not take it.
    stopping.signal(nix::sys::signal::Signal::SIGTERM);
    let signalled = Instant::now();
    leader.kill9();
    assert!(
        wait_until(Duration::from_secs(5), || scenario.leader().is_none()),
        "the dead leader's lease did not expire"
    );
    // An absence, watched for a second: the lease stays free.
    let free_since = Instant::now();
    while free_since.elapsed() < Duration::from_secs(1) {
        assert_eq!(scenario.leader(), None, "a stopping replica took the lease");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        signalled.elapsed() < grace,
        "the lease expired too late for this test"
    );

    // Redis goes before the grace ends: the handed-back run cannot be recorded.
    scenario.server.kill9();
    let limit = grace + RECORD_WINDOW + Duration::from_secs(3);
    let status = stopping.wait_exit(limit.saturating_sub(signalled.elapsed()));
    let log = stopping.log();
    let status = status.unwrap_or_else(|| panic!("still running {limit:?} after SIGTERM:\n{log}"));
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        !log.contains("acquired the leader lease"),
        "r2 led after SIGTERM:\n{log}"
    );
    assert!(
        log.contains("cannot record the failure"),
        "the run was given up after the recording window:\n{log}"
    );
}

/// The metrics endpoint is part of what a replica promises its probes: an address it cannot
/// bind stops it at start with what to do; `none` runs it without one.
#[test]
fn a_metrics_address_in_use_stops_the_replica_at_start_and_none_runs_without_one() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a port to hold");
    let address = taken.local_addr().expect("its address").to_string();
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("schedules")).expect("an empty schedule directory");
    let started = Instant::now();
    let error = crate::util::redcron_in(
        dir.path(),
        &[
            "run",
            "--redis",
            "redis://127.0.0.1:1/",
            "--metrics-addr",
            &address,
        ],
        "",
    )
    .failure(2);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        error.contains(&format!(
            "redcron: cannot serve metrics on {address}: Address already in use"
        )) && error.contains(
            "pass another --metrics-addr (port 0 picks a free one) or --metrics-addr none"
        ),
        "{error}"
    );
    let bad = crate::util::redcron_in(dir.path(), &["run", "--metrics-addr", "everywhere"], "")
        .failure(2);
    assert!(
        bad.contains("\"everywhere\" is not an address like 127.0.0.1:9464"),
        "{bad}"
    );

    let scenario = Scenario::new();
    let mut replica = scenario.replica("r1", &["--metrics-addr", "none"]);
    // The replica's log is written by a thread of its own, which a loaded machine can leave
    // behind the replica's work: the line is waited for, as the lease is.
    assert!(
        wait_until(Duration::from_secs(10), || leads(&scenario, "r1")
            && replica
                .log()
                .contains("no metrics endpoint (--metrics-addr none)")),
        "{}",
        replica.log()
    );
    assert_eq!(replica.terminate(Duration::from_secs(5)), Some(0));
}

/// A replica told to stop while it starts, here while its Redis is frozen, stops as one told
/// later does: it exits 0 once the start is over, instead of dying by the signal.
#[test]
fn a_replica_told_to_stop_while_it_starts_exits_0() {
    let scenario = Scenario::new();
    let port = free_port();
    scenario.server.signal(Signal::SIGSTOP);
    let mut replica = scenario.replica("r1", &["--metrics-addr", &format!("127.0.0.1:{port}")]);
    // The endpoint is bound before Redis is asked anything: the start waits for Redis from
    // then on.
    assert!(
        wait_until(Duration::from_secs(10), || std::net::TcpStream::connect((
            "127.0.0.1",
            port
        ))
        .is_ok()),
        "{}",
        replica.log()
    );
    replica.signal(Signal::SIGTERM);
    scenario.server.signal(Signal::SIGCONT);
    let status = replica.wait_exit(Duration::from_secs(30));
    assert_eq!(
        status.map(|status| status.code()),
        Some(Some(0)),
        "{}",
        replica.log()
    );
    assert!(replica.log().contains("shutting down"), "{}", replica.log());
}
