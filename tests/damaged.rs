//! Damaged data in a namespace: entries that are no run, and records without the fields a run
//! has. None may block a job past its deadline, and every command lists what is there, the
//! damaged entries named as damaged.

use std::path::Path;
use std::time::Duration;

use redis::Commands;

use redcron::schedule::Priority;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::schemas::Schemas;
use crate::util::store::{connect, jobs};
use crate::util::{cli, keys, one_document, wait_until};

/// A replica declaring `lim`, a scheduled job with the default settings (so `overlap =
/// "forbid"`: one slot) that fires once a year and appends its run id to `ledger`; returned once
/// the job can be triggered.
fn limited_job(server: &RedisServer, work: &Path) -> ReplicaProcess {
    std::fs::create_dir(work.join("schedules")).expect("schedules dir");
    std::fs::write(
        work.join("schedules/jobs.toml"),
        format!(
            "[jobs.lim]\nschedule = \"0 0 1 1 *\"\ncommand = \"echo $REDCRON_RUN_ID >> {}\"\n",
            work.join("ledger").display()
        ),
    )
    .expect("write jobs");
    let replica = ReplicaProcess::start("r1", &server.url(), &work.join("schedules"), work, &[]);
    let mut redis = server.connection();
    assert!(
        wait_until(Duration::from_secs(10), || redis
            .hexists(keys().defs(), "lim")
            .expect("HEXISTS")),
        "the job was not published:\n{}",
        replica.log()
    );
    replica
}

/// Triggers `lim` and returns the run id `trigger` printed (`<id> due now`).
fn trigger(server: &RedisServer, work: &Path) -> String {
    let out = cli(server, work, &["trigger", "lim"]).success();
    out.split_whitespace()
        .next()
        .unwrap_or_else(|| panic!("no run id in {out:?}"))
        .to_owned()
}

fn ledger(work: &Path) -> String {
    std::fs::read_to_string(work.join("ledger")).unwrap_or_default()
}

#[test]
fn an_entry_that_is_no_run_does_not_hold_a_slot_of_its_job() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let replica = limited_job(&server, work);
    let mut redis = server.connection();

    // Written by something else, with a deadline far off: a slot that no run holds.
    let now = server.now_ms();
    let () = redis
        .zadd(keys().running("lim"), "junk", now + 600_000)
        .expect("ZADD");
    let run_id = trigger(&server, work);
    assert!(
        wait_until(Duration::from_secs(10), || ledger(work).contains(&run_id)),
        "the run waited for a slot held by an entry that is no run:\n{}",
        replica.log()
    );
}

#[test]
fn a_slot_past_its_deadline_frees_the_waiting_runs_though_no_run_comes() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let replica = limited_job(&server, work);
    let mut redis = server.connection();

    // A slot handed to a run of the job that waits in a queue no replica serves, so is never
    // claimed: only its deadline frees it.
    let () = redis
        .hset_multiple(
            keys().run("ghost"),
            &[
                ("job", "lim"),
                ("kind", "adhoc"),
                ("state", "ready"),
                ("queue", "elsewhere"),
                ("priority", "normal"),
                ("overlap", "forbid"),
            ],
        )
        .expect("HSET");
    let () = redis
        .rpush(keys().ready("elsewhere", Priority::Normal), "ghost")
        .expect("RPUSH");
    let deadline = server.now_ms() + 3_000;
    let () = redis
        .zadd(keys().running("lim"), "ghost", deadline)
        .expect("ZADD");
    let run_id = trigger(&server, work);
    assert!(
        wait_until(Duration::from_secs(10), || {
            let state: Option<String> = redis.hget(keys().run(&run_id), "state").expect("HGET");
            state.as_deref() == Some("waiting")
        }),
        "the run did not wait for the slot:\n{}",
        replica.log()
    );
    assert!(
        wait_until(Duration::from_secs(15), || ledger(work).contains(&run_id)),
        "the run still waits past the slot's deadline:\n{}",
        replica.log()
    );
    assert!(
        server.now_ms() >= deadline,
        "the run took a slot before its deadline"
    );
}

#[tokio::test]
async fn every_listing_names_a_damaged_entry_and_goes_on_with_the_rest() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let store = connect(&server).await;
    store
        .publish_definitions(&jobs("[jobs.lim]\ncommand = \"true\"\n"))
        .await
        .expect("publish");
    let mut redis = server.connection();
    let unreadable: &[u8] = b"bin\xffary";
    let () = redis
        .hset_multiple(
            keys().run("good"),
            &[("job", "lim"), ("state", "dead"), ("reason", "failed")],
        )
        .expect("HSET");
    let () = redis.zadd(keys().dead(), "good", 1_000).expect("ZADD");
    // Not UTF-8, so no run id; and a member with no record.
    let () = redis.zadd(keys().dead(), unreadable, 2_000).expect("ZADD");
    let () = redis.zadd(keys().dead(), "junk", 3_000).expect("ZADD");
    let () = redis
        .rpush(keys().ready("default", Priority::High), unreadable)
        .expect("RPUSH");
    let deadline = server.now_ms() + 600_000;
    let () = redis
        .zadd(keys().active(), unreadable, deadline)
        .expect("ZADD");

    let listed = cli(&server, work, &["dead", "list"]).success();
    let lines: Vec<&str> = listed.lines().collect();
    // Newest death first.
    assert_eq!(lines.len(), 4, "{listed}");
    assert!(
        lines[3].starts_with("good ") && lines[3].contains("failed"),
        "{listed}"
    );
    assert!(
        lines[2].starts_with("bin\\xffary ") && lines[2].contains("damaged"),
        "{listed}"
    );
    assert!(
        lines[1].starts_with("junk ") && lines[1].contains("damaged  no record"),
        "{listed}"
    );
    let document = one_document(&cli(&server, work, &["dead", "list", "--json"]).success());
    Schemas::of_the_docs().assert_matches("dead-list.json", &document);
    let damaged: Vec<(&str, bool)> = document["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|run| (run["id"].as_str().expect("id"), run["damaged"].is_string()))
        .collect();
    assert_eq!(
        damaged,
        [("junk", true), ("bin\\xffary", true), ("good", false)]
    );

    let shown = cli(&server, work, &["dead", "show", "junk"]).failure(2);
    assert!(
        shown.contains("\"junk\" is in the dead letters but damaged (no record"),
        "{shown}"
    );

    let runs = cli(&server, work, &["runs", "list"]).success();
    assert_eq!(
        runs.matches("bin\\xffary").count(),
        2,
        "leased and ready, each named: {runs}"
    );
    assert!(runs.contains("damaged: not a run id"), "{runs}");
    let status = cli(&server, work, &["status"]).success();
    assert!(status.contains("1 active, 3 dead"), "{status}");

    let retry = cli(&server, work, &["dead", "retry", "--all"]);
    assert_eq!(retry.code, Some(0), "{}", retry.stderr);
    assert_eq!(retry.stdout, "good due again\n");
    assert!(
        retry
            .stderr
            .contains("bin\\xffary stays dead: it is damaged")
            && retry.stderr.contains("junk stays dead: it is damaged"),
        "{}",
        retry.stderr
    );
    let purged = cli(&server, work, &["dead", "purge"]).success();
    assert_eq!(purged, "2 dead runs deleted\n");
}

#[test]
fn a_workflow_instance_without_a_name_or_a_hash_is_named_on_standard_error() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let mut redis = server.connection();
    let () = redis
        .zadd(keys().workflows(), "nameless", 1_000)
        .expect("ZADD");
    let () = redis
        .hset(keys().workflow("nameless"), "state", "running")
        .expect("HSET");
    let () = redis
        .zadd(keys().workflows(), "not-a-hash", 2_000)
        .expect("ZADD");
    let () = redis
        .set(keys().workflow("not-a-hash"), "text")
        .expect("SET");

    let listed = cli(&server, dir.path(), &["workflow", "list"]);
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    for note in [
        "instance nameless cannot be read, left out: its hash has no name",
        "instance not-a-hash cannot be read, left out: its key holds a string, not a hash",
    ] {
        assert!(listed.stderr.contains(note), "{}", listed.stderr);
    }
}

#[test]
fn records_without_the_fields_redcron_writes_are_given_an_expiry_and_counted_by_status() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let mut redis = server.connection();
    // A run record without job or state, a workflow instance without a name, a run key that is
    // no hash; and a run as redcron writes it, which must keep no expiry while it waits.
    let () = redis
        .hset(keys().run("garbage"), "note", "left here")
        .expect("HSET");
    let () = redis
        .hset(keys().workflow("nameless"), "state", "running")
        .expect("HSET");
    let () = redis.set(keys().run("text"), "not a hash").expect("SET");
    let () = redis
        .hset_multiple(
            keys().run("sound"),
            &[("job", "lim"), ("state", "scheduled")],
        )
        .expect("HSET");
    let replica = limited_job(&server, work);

    let damaged = || {
        let status = one_document(&cli(&server, work, &["status", "--json"]).success());
        status["damaged_keys"]["count"].as_u64()
    };
    assert!(
        wait_until(Duration::from_secs(15), || damaged() == Some(3)),
        "the damaged records were not counted: {:?}\n{}",
        damaged(),
        replica.log()
    );
    let status = one_document(&cli(&server, work, &["status", "--json"]).success());
    Schemas::of_the_docs().assert_matches("status.json", &status);
    let mut named: Vec<&str> = status["damaged_keys"]["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .filter_map(|key| key.as_str())
        .collect();
    named.sort_unstable();
    assert_eq!(named, ["run:garbage", "run:text", "wf:nameless"]);
    for key in [
        keys().run("garbage"),
        keys().workflow("nameless"),
        keys().run("text"),
    ] {
        let ttl: i64 = redis.pttl(&key).expect("PTTL");
        assert!(ttl > 0, "{key} has no expiry ({ttl})");
    }
    let ttl: i64 = redis.pttl(keys().run("sound")).expect("PTTL");
    assert_eq!(ttl, -1, "a sound run record was given an expiry");
    let text = cli(&server, work, &["status"]).success();
    assert!(
        text.contains("damaged records: 3 ("),
        "status does not say so: {text}"
    );
}

#[test]
fn expired_entries_of_the_active_runs_that_are_no_run_do_not_stop_the_reaping() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let mut redis = server.connection();
    // More entries that are not UTF-8 than the reaper takes in a batch, all expired before a
    // run whose worker is gone.
    for n in 0..150u8 {
        let entry = [b'x', 0xff, n];
        let () = redis.zadd(keys().active(), &entry[..], 1).expect("ZADD");
    }
    let () = redis
        .hset_multiple(
            keys().run("lost"),
            &[
                ("job", "lim"),
                ("kind", "adhoc"),
                ("state", "active"),
                ("queue", "default"),
                ("priority", "normal"),
                ("attempt", "1"),
                ("max_attempts", "1"),
                ("worker", "gone/0"),
            ],
        )
        .expect("HSET");
    let () = redis.zadd(keys().active(), "lost", 2).expect("ZADD");
    let replica = limited_job(&server, work);

    assert!(
        wait_until(Duration::from_secs(15), || {
            let lease: Option<i64> = redis.zscore(keys().active(), "lost").expect("ZSCORE");
            lease != Some(2)
        }),
        "the run whose lease expired was not reaped:\n{}",
        replica.log()
    );
    assert!(
        wait_until(Duration::from_secs(10), || {
            let entries: Vec<Vec<u8>> = redis.zrange(keys().active(), 0, -1).expect("ZRANGE");
            entries.iter().all(|entry| entry.first() != Some(&b'x'))
        }),
        "the entries that are no run stay among the active runs"
    );
}

#[test]
fn a_run_routed_to_a_list_no_claim_reads_is_dead_as_corrupt_and_shown() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let replica = limited_job(&server, work);
    let mut redis = server.connection();
    // Damaged before they come due: a priority of none of the three, a queue that is no name,
    // a queue that is not UTF-8. Each would wait in a list that no replica reads.
    let damage: [(&str, &[u8]); 3] = [
        ("priority", b"bogus"),
        ("queue", b"No Queue"),
        ("queue", b"q\xff"),
    ];
    let mut runs = Vec::new();
    for (field, value) in damage {
        let enqueued = one_document(
            &cli(&server, work, &["enqueue", "lim", "--in", "5s", "--json"]).success(),
        );
        let run_id = enqueued["id"].as_str().expect("id").to_owned();
        let () = redis.hset(keys().run(&run_id), field, value).expect("HSET");
        runs.push(run_id);
    }
    for run_id in &runs {
        assert!(
            wait_until(Duration::from_secs(20), || {
                let died: Option<i64> = redis.zscore(keys().dead(), run_id).expect("ZSCORE");
                died.is_some()
            }),
            "run {run_id} is not in the dead letters: {:?}\n{}",
            redis.hget::<_, _, Option<Vec<u8>>>(keys().run(run_id), "state"),
            replica.log()
        );
        let reason: Option<String> = redis.hget(keys().run(run_id), "reason").expect("HGET");
        assert_eq!(reason.as_deref(), Some("corrupt"), "run {run_id}");
    }

    let listed = cli(&server, work, &["dead", "list"]).success();
    for run_id in &runs[..2] {
        assert!(
            listed
                .lines()
                .any(|line| line.starts_with(run_id.as_str()) && line.contains(" corrupt")),
            "{listed}"
        );
    }
    assert!(
        listed.lines().any(|line| line.starts_with(runs[2].as_str())
            && line.contains("damaged  not UTF-8, shown escaped: queue")),
        "{listed}"
    );
    let shown = cli(&server, work, &["runs", "show", &runs[2]]).success();
    assert!(
        shown.contains("q\\xff") && shown.contains("not UTF-8, shown escaped: queue"),
        "{shown}"
    );
}

#[test]
fn dead_show_and_retry_reach_an_unreadable_entry_by_the_id_dead_list_prints() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let mut redis = server.connection();
    let () = redis
        .zadd(keys().dead(), &b"bin\xffary"[..], 1_000)
        .expect("ZADD");

    let listed = cli(&server, work, &["dead", "list"]).success();
    assert!(listed.contains("bin\\xffary "), "{listed}");
    for command in ["show", "retry"] {
        let said = cli(&server, work, &["dead", command, "bin\\xffary"]).failure(2);
        assert!(
            said.contains("\"bin\\xffary\" is in the dead letters but damaged (not a run id"),
            "dead {command}: {said}"
        );
    }
}

#[test]
fn an_id_with_no_record_that_comes_due_is_dead_as_damaged_and_given_no_record() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let replica = limited_job(&server, work);
    let mut redis = server.connection();
    let now = server.now_ms();
    let () = redis.zadd(keys().due_runs(), "junk", now).expect("ZADD");

    assert!(
        wait_until(Duration::from_secs(15), || {
            let died: Option<i64> = redis.zscore(keys().dead(), "junk").expect("ZSCORE");
            died.is_some()
        }),
        "the id was not buried:\n{}",
        replica.log()
    );
    let recorded: bool = redis.exists(keys().run("junk")).expect("EXISTS");
    assert!(!recorded, "a record was written for an id that had none");
    let listed = cli(&server, work, &["dead", "list"]).success();
    assert!(
        listed
            .lines()
            .any(|line| line.starts_with("junk ") && line.contains("damaged  no record")),
        "{listed}"
    );
}

/// An event whose field is not UTF-8 (written by something else, or damaged) is shown by
/// `history` with that field escaped, as `runs show` shows a record's, not with it left out.
#[test]
fn history_shows_an_event_field_that_is_not_utf8_escaped() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let _: String = redis::cmd("XADD")
        .arg(keys().events())
        .arg("*")
        .arg("run")
        .arg("nightly@1767225600000")
        .arg("job")
        .arg("nightly")
        .arg("state")
        .arg("dead")
        .arg("reason")
        .arg(&b"bad\xffreason"[..])
        .query(&mut server.connection())
        .expect("XADD");

    let document = one_document(&cli(&server, work, &["history", "--json"]).success());
    let run = &document["runs"][0];
    assert_eq!(run["id"], "nightly@1767225600000", "{document}");
    assert_eq!(run["reason"], "bad\\xffreason", "{document}");
    let text = cli(&server, work, &["history"]).success();
    assert!(text.contains("bad\\xffreason"), "{text}");
}
