//! A running run's output, live and bounded: written to Redis at most once a second and never
//! more than its 4 KiB tail, gone a few leases after a replica killed mid-run, never written for
//! a short run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::Commands;
use serde_json::Value;

use crate::util::redis_server::RedisServer;
use crate::util::scenario::Scenario;
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
    for pair in writes.windows(2) {
        let apart = pair[1] - pair[0];
        // Seen from here: a notification may arrive a little late, the next one on time.
        assert!(
            apart >= Duration::from_millis(800),
            "two writes {apart:?} apart"
        );
    }
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
