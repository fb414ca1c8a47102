//! A running run's output, live and bounded: readable with `runs show` while the run runs,
//! written to Redis at most once a second and never more than its 4 KiB tail, gone a few leases
//! after a replica killed mid-run, never written for a short run, and followed with `--follow`,
//! through a retry too.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::Commands;
use serde_json::Value;

use crate::util::redis_server::RedisServer;
use crate::util::scenario::Scenario;
use crate::util::schemas::Schemas;
use crate::util::wait::wait_for;
use crate::util::{cli, keys, one_document, wait_until};

/// The bound on what a run's output so far holds in Redis.
const BOUND: usize = redcron::handler::OUTPUT_TAIL_BYTES;

/// `runs show ID --json`.
fn shown(scenario: &Scenario, run_id: &str) -> Value {
    one_document(
        &cli(
            &scenario.server,
            scenario.dir.path(),
            &["runs", "show", run_id, "--json"],
        )
        .success(),
    )
}

/// The writes of live output Redis makes, as it announces them (keyspace notifications of
/// the hash commands on `live-output:*` keys): counted from a connection of their own until
/// stopped.
struct LiveWrites {
    stop: Arc<AtomicBool>,
    listener: JoinHandle<Vec<Instant>>,
}

impl LiveWrites {
    fn count(server: &RedisServer) -> Self {
        let mut connection = server.connection();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg("Kh")
            .query(&mut connection)
            .expect("keyspace notifications on");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let subscribed = Arc::new(AtomicBool::new(false));
        let ready = subscribed.clone();
        let pattern = format!("__keyspace@*__:{}", keys().live_output("*"));
        let listener = std::thread::spawn(move || {
            let mut pubsub = connection.as_pubsub();
            pubsub.psubscribe(&pattern).expect("PSUBSCRIBE");
            pubsub
                .set_read_timeout(Some(Duration::from_millis(100)))
                .expect("a read timeout");
            ready.store(true, Ordering::SeqCst);
            let mut writes = Vec::new();
            while !stopped.load(Ordering::SeqCst) {
                match pubsub.get_message() {
                    Ok(message) => {
                        if message.get_payload::<String>().as_deref() == Ok("hset") {
                            writes.push(Instant::now());
                        }
                    }
                    Err(error) if error.is_timeout() => {}
                    Err(error) => panic!("reading keyspace notifications: {error}"),
                }
            }
            writes
        });
        assert!(
            wait_until(Duration::from_secs(5), || subscribed.load(Ordering::SeqCst)),
            "the keyspace notifications were not subscribed to"
        );
        Self { stop, listener }
    }

    /// The instants of the writes seen so far, once the listener stopped.
    fn stop(self) -> Vec<Instant> {
        self.stop.store(true, Ordering::SeqCst);
        self.listener.join().expect("the listener ends")
    }
}

/// Waits until run `run_id` has ended; its record, as `runs show --json` prints it.
fn ended(scenario: &Scenario, run_id: &str, limit: Duration) -> Value {
    wait_for(limit, || {
        let run = shown(scenario, run_id);
        (run["state"] != "active" && run["finished_ms"].is_i64()).then_some(run)
    })
    .unwrap_or_else(|| panic!("run {run_id} did not end: {}", shown(scenario, run_id)))
}

/// A job `name` that prints a numbered line every 200 ms until the test creates the file it
/// returns, then exits with `code`: the test, not the clock, decides when the run ends.
fn talking_job(scenario: &Scenario, name: &str, code: i32) -> std::path::PathBuf {
    let stop = scenario.dir.path().join(format!("stop-{name}"));
    scenario.write_jobs(&format!(
        "[jobs.{name}]\ncommand = \"i=0; while [ ! -e {} ]; do i=$((i + 1)); echo line $i; \
         sleep 0.2; done; exit {code}\"\n",
        stop.display()
    ));
    stop
}

/// Whether `text` is `line 1` to `line N` for some N of at least `least`, one a line.
fn numbered_lines(text: &str, least: usize) -> bool {
    let lines: Vec<&str> = text.lines().collect();
    lines.len() >= least
        && text.ends_with('\n')
        && lines
            .iter()
            .enumerate()
            .all(|(index, line)| *line == format!("line {}", index + 1))
}

#[test]
fn a_running_runs_output_is_readable_before_it_ends_and_grows() {
    let scenario = Scenario::new();
    let stop = talking_job(&scenario, "talk", 0);
    let replica = scenario.replica("r1", &[]);
    let run_id = scenario.trigger("talk");

    let lines = |run: &Value| {
        run["output_so_far"]["output"]
            .as_str()
            .map_or(0, |text| text.lines().count())
    };
    let first = wait_for(Duration::from_secs(15), || {
        let run = shown(&scenario, &run_id);
        (lines(&run) > 0).then_some(run)
    })
    .unwrap_or_else(|| panic!("no output while the run ran:\n{}", replica.log()));
    assert_eq!(first["state"], "active", "{first}");
    Schemas::of_the_docs().assert_matches("run.json", &first);
    assert_eq!(first["output"], Value::Null, "the record has no output yet");
    let so_far = &first["output_so_far"];
    assert!(
        so_far["output"]
            .as_str()
            .unwrap_or("")
            .starts_with("line 1\n"),
        "{so_far}"
    );
    assert_eq!(so_far["attempt"], 1);
    assert!(
        so_far["written_ms"].is_i64() && so_far["written"].is_string(),
        "{so_far}"
    );

    let grown = wait_for(Duration::from_secs(15), || {
        let run = shown(&scenario, &run_id);
        (run["state"] == "active" && lines(&run) > lines(&first)).then_some(run)
    })
    .unwrap_or_else(|| {
        panic!(
            "the output did not grow while the run ran:\n{}",
            replica.log()
        )
    });
    assert!(
        grown["output_so_far"]["written_ms"].as_i64() > so_far["written_ms"].as_i64(),
        "{grown}"
    );
    let mut text = String::new();
    assert!(
        wait_until(Duration::from_secs(10), || {
            text = cli(
                &scenario.server,
                scenario.dir.path(),
                &["runs", "show", &run_id],
            )
            .success();
            text.contains("output so far (written ") && text.contains("\nline 1\nline 2\n")
        }),
        "runs show does not show the output so far:\n{text}"
    );

    std::fs::write(&stop, "").expect("the stop file");
    let done = ended(&scenario, &run_id, Duration::from_secs(20));
    assert_eq!(done["state"], "succeeded", "{done}");
    assert!(
        numbered_lines(done["output"].as_str().unwrap_or(""), lines(&grown)),
        "{done}"
    );
    assert_eq!(
        done["output_so_far"],
        Value::Null,
        "an ended run shows its record only"
    );
}

#[test]
fn a_chatty_run_keeps_its_live_output_under_the_bound_and_writes_at_most_once_a_second() {
    let scenario = Scenario::new();
    // About 4 s of output as fast as the pipe takes it: tens of megabytes.
    scenario.write_jobs(
        "[jobs.chatty]\ncommand = \"end=$(($(date +%s) + 4)); while [ $(date +%s) -lt $end ]; \
         do yes | head -c 1000000; done\"\n",
    );
    let writes = LiveWrites::count(&scenario.server);
    let replica = scenario.replica("r1", &[]);
    let run_id = scenario.trigger("chatty");
    let live = keys().live_output(&run_id);
    let mut connection = scenario.server.connection();
    let mut largest = 0;
    let mut seen = false;
    let done = wait_for(Duration::from_secs(30), || {
        let length: usize = redis::cmd("HSTRLEN")
            .arg(&live)
            .arg("output")
            .query(&mut connection)
            .expect("HSTRLEN");
        largest = largest.max(length);
        seen |= length > 0;
        let state = scenario.run_field(&run_id, "state");
        (state.as_deref() == Some("succeeded")).then_some(())
    });
    assert!(
        done.is_some(),
        "the run did not succeed:\n{}",
        replica.log()
    );
    let writes = writes.stop();
    assert!(
        seen,
        "no output was published while the run ran:\n{}",
        replica.log()
    );
    assert!(
        largest <= BOUND,
        "{largest} bytes published, more than {BOUND}"
    );
    assert!(
        largest > BOUND / 2,
        "the tail is kept whole: {largest} bytes"
    );

    let field = |name: &str| -> i64 {
        scenario
            .run_field(&run_id, name)
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("run {run_id} has no {name}"))
    };
    let ran_ms = field("finished_ms") - field("started_ms");
    let most = usize::try_from(ran_ms / 1000).expect("a duration") + 1;
    assert!(
        (2..=most).contains(&writes.len()),
        "{} writes of the live output in a run of {ran_ms} ms: at most one a second",
        writes.len()
    );
}

#[test]
fn the_live_output_of_a_run_whose_replica_was_killed_expires() {
    let scenario = Scenario::new();
    scenario
        .write_jobs("[jobs.endless]\ncommand = \"while true; do echo tick; sleep 0.2; done\"\n");
    let mut replica = scenario.replica("r1", &[]);
    let run_id = scenario.trigger("endless");
    let live = keys().live_output(&run_id);
    let mut connection = scenario.server.connection();
    assert!(
        wait_until(Duration::from_secs(15), || {
            connection.exists(&live).expect("EXISTS")
        }),
        "no output was published while the run ran:\n{}",
        replica.log()
    );
    replica.kill9();
    let left_ms: i64 = connection.pttl(&live).expect("PTTL");
    // Three leases of 3 s: the test replicas' run lease.
    assert!((1..=9_000).contains(&left_ms), "expires in {left_ms} ms");
    assert!(
        wait_until(Duration::from_secs(20), || {
            !connection.exists::<_, bool>(&live).expect("EXISTS")
        }),
        "the live output of the killed replica's run is still there"
    );
    assert_eq!(
        scenario.run_field(&run_id, "state").as_deref(),
        Some("active")
    );
}

#[test]
fn a_short_run_and_a_silent_one_write_no_live_output() {
    let scenario = Scenario::new();
    scenario.write_jobs(
        "[jobs.short]\ncommand = \"echo hello\"\n[jobs.silent]\ncommand = \"sleep 2\"\n",
    );
    let writes = LiveWrites::count(&scenario.server);
    let replica = scenario.replica("r1", &[]);
    let short = scenario.trigger("short");
    let silent = scenario.trigger("silent");
    for run_id in [&short, &silent] {
        let done = ended(&scenario, run_id, Duration::from_secs(20));
        assert_eq!(done["state"], "succeeded", "{done}\n{}", replica.log());
    }
    assert_eq!(
        scenario.run_field(&short, "output").as_deref(),
        Some("hello\n")
    );
    let writes = writes.stop();
    assert!(writes.is_empty(), "{} writes of live output", writes.len());
    let mut connection = scenario.server.connection();
    let left: Vec<String> = connection.keys(keys().live_output("*")).expect("KEYS");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn follow_prints_the_lines_as_they_come_and_ends_with_the_run_and_its_exit_code() {
    let scenario = Scenario::new();
    let stop = talking_job(&scenario, "counted", 3);
    let unknown = cli(
        &scenario.server,
        scenario.dir.path(),
        &["runs", "show", "nope", "--follow"],
    );
    assert!(unknown.failure(2).contains("unknown run \"nope\""));

    let replica = scenario.replica("r1", &[]);
    let run_id = scenario.trigger("counted");
    let follower = || {
        Command::new(env!("CARGO_BIN_EXE_redcron"))
            .args(["runs", "show", &run_id, "--follow"])
            .args(["--redis", &scenario.server.url(), "--namespace", "test"])
            .env("REDCRON_CONFIG", "/dev/null")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the follower starts")
    };
    // A reader that goes away after one line: the follower ends without an error.
    let mut head = follower();
    let mut first = String::new();
    BufReader::new(head.stdout.take().expect("piped"))
        .read_line(&mut first)
        .expect("a line");
    assert_eq!(first, "line 1\n");
    assert_eq!(
        scenario.run_field(&run_id, "state").as_deref(),
        Some("active"),
        "the first line came only once the run ended"
    );

    let whole = follower();
    // Lines come while the follower follows, then the run ends.
    let mut connection = scenario.server.connection();
    let live = keys().live_output(&run_id);
    assert!(
        wait_until(Duration::from_secs(15), || {
            let so_far: Option<String> = connection.hget(&live, "output").expect("HGET");
            so_far.is_some_and(|text| text.lines().count() >= 8)
        }),
        "the output did not grow:\n{}",
        replica.log()
    );
    std::fs::write(&stop, "").expect("the stop file");
    let followed = whole.wait_with_output().expect("the follower ends");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&followed.stdout),
        String::from_utf8_lossy(&followed.stderr),
    );
    assert_eq!(
        followed.status.code(),
        Some(3),
        "{stderr}\n{}",
        replica.log()
    );
    assert!(
        numbered_lines(&stdout, 8),
        "each line once, in order:\n{stdout}"
    );
    assert_eq!(
        Some(stdout.as_ref()),
        scenario.run_field(&run_id, "output").as_deref(),
        "all the run printed"
    );
    assert!(
        stderr.contains(&format!("run {run_id} ended dead")) && stderr.contains("exit code 3"),
        "{stderr}"
    );

    let status = wait_for(Duration::from_secs(10), || head.try_wait().expect("wait"))
        .expect("the follower whose reader went away ends");
    assert_eq!(status.code(), Some(0), "a reader gone away is no failure");
}

#[test]
fn follow_goes_on_through_a_retry_and_ends_with_the_attempt_that_succeeded() {
    let scenario = Scenario::new();
    let marker = scenario.dir.path().join("failed-once");
    scenario.write_jobs(&format!(
        "[jobs.flaky]\nretries = 1\nbackoff = \"3s\"\nmax_backoff = \"3s\"\n\
         command = \"if [ -e {0} ]; then echo second; else touch {0}; echo first; exit 1; fi\"\n",
        marker.display()
    ));
    let replica = scenario.replica("r1", &[]);
    let run_id = scenario.trigger("flaky");
    // The retry's backoff (1.5 to 3 s with its jitter) leaves the follower time to see the first
    // attempt end.
    let followed = cli(
        &scenario.server,
        scenario.dir.path(),
        &["runs", "show", &run_id, "--follow"],
    );
    assert_eq!(
        followed.code,
        Some(0),
        "{}\n{}",
        followed.stderr,
        replica.log()
    );
    assert_eq!(
        followed.stdout, "first\nsecond\n",
        "each attempt's output once"
    );
    assert!(
        followed.stderr.contains("attempt 1 failed")
            && followed
                .stderr
                .contains(&format!("run {run_id} succeeded, exit code 0")),
        "{}",
        followed.stderr
    );
}
