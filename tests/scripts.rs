//! Scripts that meet a key of the wrong type refuse before their first write, naming the script
//! and the key; the reaper puts back a run left in none of its lists; a replica whose scripts
//! keep failing says so in `/readyz` and `status`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use redcron::engine::reaper::{Reaper, ReaperConfig};
use redcron::schedule::Priority;
use redcron::store::{Claim, Enqueue, Enqueued, FailReason, Failure};
use redis::Commands;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::store::{FORBID_TICK, LEASE, THRESHOLD, claim, claim_run, plan, run_hash, setup};
use crate::util::{cli, free_port, http_get, keys, read_ledger, wait_until};

/// The Redis types a script header names for its KEYS; `channel` is a pub/sub channel, no key.
const TYPES: [&str; 8] = [
    "string", "int", "hash", "list", "set", "zset", "stream", "channel",
];

/// Each `KEYS[i]` (or `KEYS[i..j]`) line of a script's header: the key's index and its type.
fn header_key_types(script: &str) -> Vec<(usize, &'static str)> {
    let mut types = Vec::new();
    for line in script.lines() {
        let Some(rest) = line.strip_prefix("-- KEYS[") else {
            continue;
        };
        let (range, rest) = rest.split_once(']').expect("KEYS[...]");
        let (first, last) = range.split_once("..").unwrap_or((range, range));
        let kind = rest
            .split_whitespace()
            .take(3)
            .map(|word| word.trim_end_matches(','))
            .find_map(|word| TYPES.iter().find(|kind| **kind == word))
            .unwrap_or_else(|| panic!("no type in the header line {line:?}"));
        let (first, last): (usize, usize) = (
            first.parse().expect("a key index"),
            last.parse().expect("a key index"),
        );
        types.extend((first..=last).map(|index| (index, *kind)));
    }
    types
}

/// Every key of the database with its DUMP: what a script that wrote nothing leaves the same.
fn snapshot(redis: &mut redis::Connection) -> BTreeMap<String, Vec<u8>> {
    let names: Vec<String> = redis.keys("*").expect("KEYS");
    names
        .into_iter()
        .map(|name| {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&name).query(redis).expect("DUMP");
            (name, dump)
        })
        .collect()
}

/// Writes a value of `kind` at `key`.
fn write_of_type(redis: &mut redis::Connection, key: &str, kind: &str) {
    let command = match kind {
        "string" | "int" => redis::cmd("SET").arg(key).arg("1").clone(),
        "hash" => redis::cmd("HSET").arg(key).arg("field").arg("1").clone(),
        "list" => redis::cmd("RPUSH").arg(key).arg("member").clone(),
        "set" => redis::cmd("SADD").arg(key).arg("member").clone(),
        "zset" => redis::cmd("ZADD").arg(key).arg(1).arg("member").clone(),
        "stream" => redis::cmd("XADD")
            .arg(key)
            .arg("*")
            .arg("f")
            .arg("1")
            .clone(),
        other => panic!("no value of type {other}"),
    };
    let () = command.query(redis).expect("write a value");
}

/// For every script and every key its header names, a value of another type at that key: the
/// call fails naming the script and the key, and nothing in Redis changed (the runs seeded
/// beside stay where they were). With each key of its type, the check passes.
#[test]
fn every_script_refuses_a_key_of_the_wrong_type_before_its_first_write() {
    let server = RedisServer::start();
    let mut redis = server.connection();
    // Runs where scripts find them: one ready, one due, one active.
    for (run_id, state) in [
        ("ready-1", "ready"),
        ("due-1", "scheduled"),
        ("active-1", "active"),
    ] {
        let () = redis
            .hset_multiple(keys().run(run_id), &[("job", "tick"), ("state", state)])
            .expect("HSET");
    }
    let () = redis
        .rpush(keys().ready("default", Priority::Normal), "ready-1")
        .expect("RPUSH");
    let () = redis.zadd(keys().due(), "due-1", 1).expect("ZADD");
    let () = redis.zadd(keys().active(), "active-1", 1).expect("ZADD");

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("lua");
    let include =
        |name: &str| std::fs::read_to_string(dir.join("include").join(name)).expect("an include");
    let (common, workflows) = (include("common.lua"), include("workflows.lua"));
    let mut scripts: Vec<_> = std::fs::read_dir(&dir)
        .expect("lua/")
        .map(|entry| entry.expect("lua/ entry").path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "lua"))
        .collect();
    scripts.sort();
    let mut checked = 0;
    for path in &scripts {
        let name = path
            .file_stem()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        let source = std::fs::read_to_string(path).expect("a script");
        // A flags line goes first, where Redis reads it, as the store assembles scripts.
        let script = redis::Script::new(&match source.split_once('\n') {
            Some((flags, body)) if flags.starts_with("#!") => {
                format!("{flags}\n{common}\n{workflows}\n{body}")
            }
            _ => format!("{common}\n{workflows}\n{source}"),
        });
        // It writes nothing: a wrong type cannot leave anything of it half done.
        if name == "probe_writes" {
            continue;
        }
        let types = header_key_types(&source);
        assert!(!types.is_empty(), "{name} declares no KEYS");
        let key_names: Vec<String> = (1..=types.len())
            .map(|index| format!("{}{name}-key-{index}", keys().prefix()))
            .collect();
        let call = |redis: &mut redis::Connection| {
            let mut invocation = script.prepare_invoke();
            for key in &key_names {
                invocation.key(key);
            }
            invocation.arg(keys().prefix());
            for _ in 0..12 {
                invocation.arg("1");
            }
            invocation.invoke::<redis::Value>(redis)
        };
        for &(index, kind) in &types {
            if kind == "channel" {
                continue;
            }
            let key = &key_names[index - 1];
            let wrong = if kind == "string" || kind == "int" {
                "list"
            } else {
                "string"
            };
            write_of_type(&mut redis, key, wrong);
            let before = snapshot(&mut redis);
            let error = call(&mut redis).expect_err(&format!("{name} with {key} a {wrong}"));
            assert_eq!(error.code(), Some("WRONGTYPE"), "{name}, {key}: {error}");
            let message = error.to_string();
            assert!(
                message.contains(&format!("{name}: {key} holds a {wrong}")),
                "{name}, {key}: {message}"
            );
            assert_eq!(
                snapshot(&mut redis),
                before,
                "{name} wrote with {key} a {wrong}"
            );
            let () = redis.del(key).expect("DEL");
            checked += 1;
        }
        // Every key of the type its header says: the check lets the call through (it may
        // still refuse for the namespace's hold, or do what its junk arguments say).
        for &(index, kind) in &types {
            if kind != "channel" {
                write_of_type(&mut redis, &key_names[index - 1], kind);
            }
        }
        if let Err(error) = call(&mut redis) {
            assert!(
                !error.to_string().contains(&format!("{name}: ")),
                "{name} refuses keys of the types its header names: {error}"
            );
        }
        for key in &key_names {
            let () = redis.del(key).expect("DEL");
        }
    }
    assert!(scripts.len() >= 23, "{} scripts", scripts.len());
    assert!(checked > 70, "only {checked} keys checked");
}

/// Two fires ready, the paused-jobs set replaced by a string: the claim refuses with nothing
/// popped, the replica's health names the script and the key, and once the key is gone the
/// fires are claimed in order.
#[tokio::test]
async fn a_claim_that_meets_a_wrong_typed_key_leaves_its_runs_ready_in_their_list() {
    let (server, store, token) = setup(FORBID_TICK).await;
    let store = store.with_frozen_clock(10_000);
    plan(&store, &token, "tick", &[9_000, 10_000]).await;
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let mut redis = server.connection();
    let () = redis.set(keys().paused(), "x").expect("SET");

    let queues = ["default".to_owned()];
    let error = store
        .claim_run("replica/0", &queues, LEASE, 100)
        .await
        .expect_err("a claim with the paused set a string");
    let named = format!("claim_runs: {} holds a string, not a set", keys().paused());
    assert!(error.to_string().contains(&named), "{error}");
    let ready_fires = keys().ready_fires("default", Priority::Normal);
    let ready: Vec<String> = redis.lrange(&ready_fires, 0, -1).expect("LRANGE");
    assert_eq!(ready, ["tick@9000", "tick@10000"]);
    assert_eq!(run_hash(&server, "tick@9000")["state"], "ready");
    let (script, failure) = store
        .metrics()
        .health
        .failing_script()
        .expect("the failing script is kept for /readyz");
    assert_eq!(script, "claim_runs");
    assert!(failure.contains(&named), "{failure}");

    let () = redis.del(keys().paused()).expect("DEL");
    assert_eq!(claim_run(&store, &["default"]).await.id, "tick@9000");
    assert_eq!(store.metrics().health.failing_script(), None);
}

/// A batch of two successes whose second job's slots are damaged: neither is recorded, so the
/// same acks, sent again once the key is repaired, record both. (Recording the first before
/// failing on the second would leave it succeeded but holding its lease, and make its worker's
/// retry of the ack find it no longer its own.)
#[tokio::test]
async fn an_ack_batch_that_meets_a_wrong_typed_key_records_none_of_its_runs() {
    let (server, store, token) = setup(
        "[jobs.tick]\ncommand = \"true\"\noverlap = \"forbid\"\n\
         [jobs.tock]\ncommand = \"true\"\noverlap = \"forbid\"\n",
    )
    .await;
    let store = store.with_frozen_clock(10_000);
    plan(&store, &token, "tick", &[9_000]).await;
    plan(&store, &token, "tock", &[9_500]).await;
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let first = claim_run(&store, &["default"]).await;
    let second = claim_run(&store, &["default"]).await;
    assert_eq!(
        (first.id.as_str(), second.id.as_str()),
        ("tick@9000", "tock@9500")
    );
    let mut redis = server.connection();
    let () = redis.set(keys().running("tock"), "x").expect("SET");

    let acks: Vec<redcron::store::Ack> = [&first, &second]
        .iter()
        .map(|run| redcron::store::Ack {
            run_id: run.id.clone(),
            worker: run.worker.clone(),
            attempt: run.attempt,
            exit_code: Some(0),
            output: String::new(),
        })
        .collect();
    let batch: Vec<&redcron::store::Ack> = acks.iter().collect();
    let error = store
        .ack_runs(&batch)
        .await
        .expect_err("an ack past a string");
    assert!(
        error.to_string().contains(&format!(
            "ack_runs: {} holds a string",
            keys().running("tock")
        )),
        "{error}"
    );
    for run in ["tick@9000", "tock@9500"] {
        assert_eq!(run_hash(&server, run)["state"], "active", "{run}");
    }

    let () = redis.del(keys().running("tock")).expect("DEL");
    assert_eq!(store.ack_runs(&batch).await.expect("ack"), [true, true]);
}

/// Runs left in none of the lists their state says they are in, one of each state: a tick of
/// the reaper puts each back where it belongs, and the ready one is claimed.
#[tokio::test]
async fn the_reaper_puts_back_runs_left_in_no_list() {
    let (server, store, token) = setup(
        "[jobs.tick]\ncommand = \"true\"\noverlap = \"forbid\"\n\
         [jobs.tock]\ncommand = \"true\"\noverlap = \"forbid\"\n\
         [jobs.lost]\ncommand = \"true\"\nretries = 2\n[jobs.late]\ncommand = \"true\"\n",
    )
    .await;
    let store = store.with_frozen_clock(10_000);
    plan(&store, &token, "tock", &[9_100, 9_200]).await;
    plan(&store, &token, "lost", &[9_300]).await;
    plan(&store, &token, "late", &[20_000]).await;
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    // tock@9100 runs, so tock@9200 waits for its slot; lost@9300 runs and fails once.
    assert_eq!(claim_run(&store, &["default"]).await.id, "tock@9100");
    assert_eq!(claim_run(&store, &["default"]).await.id, "lost@9300");
    let lost = store
        .fail_run(
            "lost@9300",
            Some("replica/0"),
            &Failure::without_output(FailReason::Failed, "exit status 1"),
            0.5,
        )
        .await
        .expect("fail");
    assert!(
        matches!(lost, redcron::store::FailOutcome::Retrying { .. }),
        "{lost:?}"
    );
    assert_eq!(
        claim(&store, &["default"]).await,
        Claim::Empty { skipped: 0 }
    );
    assert_eq!(run_hash(&server, "tock@9200")["state"], "waiting");
    plan(&store, &token, "tick", &[9_900]).await;
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    // Two ad-hoc runs due later, in the ad-hoc runs' due set: one stays there, one leaves it.
    let later = |due_ms| Enqueue {
        job: "late".to_owned(),
        due_ms: Some(due_ms),
        payload: None,
        priority: None,
        unique: None,
    };
    let mut later_ids = Vec::new();
    for due_ms in [30_000, 31_000] {
        match store.enqueue_run(&later(due_ms)).await.expect("enqueue") {
            Enqueued::Scheduled { run_id, .. } => later_ids.push(run_id),
            other => panic!("not enqueued: {other:?}"),
        }
    }

    // What a script failing halfway leaves: each run out of its list, its state unchanged.
    let mut redis = server.connection();
    let ready_fires = keys().ready_fires("default", Priority::Normal);
    let _: i64 = redis.lrem(&ready_fires, 0, "tick@9900").expect("LREM");
    let _: i64 = redis
        .lrem(keys().waiting("tock"), 0, "tock@9200")
        .expect("LREM");
    let _: i64 = redis.zrem(keys().due(), "lost@9300").expect("ZREM");
    let _: i64 = redis.zrem(keys().active(), "tock@9100").expect("ZREM");
    let _: i64 = redis.zrem(keys().due_runs(), &later_ids[1]).expect("ZREM");
    let untouched: Vec<String> = redis.zrange(keys().due(), 0, -1).expect("ZRANGE");
    assert_eq!(untouched, ["late@20000"]);
    assert_eq!(run_hash(&server, "tick@9900")["state"], "ready");

    let mut reaper = Reaper::new(store.clone(), ReaperConfig::default());
    let reaped = reaper.tick().await.expect("tick");
    assert_eq!(reaped.requeued, 5, "{reaped:?}");
    // An ad-hoc run goes back to its own due set, and one still there is no stray.
    let later_due: Vec<(String, i64)> = redis
        .zrange_withscores(keys().due_runs(), 0, -1)
        .expect("ZRANGE");
    assert_eq!(
        later_due,
        [
            (later_ids[0].clone(), 30_000),
            (later_ids[1].clone(), 31_000)
        ]
    );
    let ready: Vec<String> = redis.lrange(&ready_fires, 0, -1).expect("LRANGE");
    assert_eq!(ready, ["tick@9900"]);
    let waiting: Vec<String> = redis.lrange(keys().waiting("tock"), 0, -1).expect("LRANGE");
    assert_eq!(waiting, ["tock@9200"]);
    let retry_at: Option<i64> = redis.zscore(keys().due(), "lost@9300").expect("ZSCORE");
    let due_ms = run_hash(&server, "lost@9300")["due_ms"].parse().ok();
    assert_eq!(retry_at, due_ms, "due again at its retry time");
    let fires_due: Vec<String> = redis.zrange(keys().due(), 0, -1).expect("ZRANGE");
    assert_eq!(
        fires_due,
        ["late@20000", "lost@9300"],
        "no ad-hoc run among the fires"
    );
    let lease: Option<i64> = redis.zscore(keys().active(), "tock@9100").expect("ZSCORE");
    assert_eq!(lease, Some(70_000), "a minute for its worker to extend it");
    assert_eq!(
        store
            .metrics()
            .stray_runs_total
            .with_label_values(&["ready"])
            .get(),
        1
    );
    assert_eq!(claim_run(&store, &["default"]).await.id, "tick@9900");
    // Put back once: the next cycle finds each where it belongs.
    assert_eq!(reaper.tick().await.expect("tick").requeued, 0);
}

/// The scenario of a key damaged by hand, with the default settings: two replicas, a job firing
/// every second, the paused-jobs set (which every claim reads) a string for a few seconds.
/// Meanwhile `/readyz` answers 503 naming the script and the key, and `status` names them and
/// exits 2; once the key is deleted, every fire due meanwhile runs, once.
#[test]
fn a_wrong_typed_key_stops_claims_visibly_and_loses_no_fire() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path();
    let ledger = work.join("ledger");
    std::fs::create_dir(work.join("schedules")).expect("schedules dir");
    std::fs::write(
        work.join("schedules/jobs.toml"),
        format!(
            "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"echo $REDCRON_RUN_ID $(date +%s%3N) >> {}\"\n",
            ledger.display()
        ),
    )
    .expect("write jobs");
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let replicas = [
        ReplicaProcess::start(
            "r1",
            &server.url(),
            &work.join("schedules"),
            work,
            &["--metrics-addr", &address],
        ),
        ReplicaProcess::start("r2", &server.url(), &work.join("schedules"), work, &[]),
    ];
    let logs = || ReplicaProcess::logs(&replicas);
    let starts = |run: &str| {
        read_ledger(&ledger)
            .iter()
            .filter(|(started, _, _)| started == run)
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(15), || read_ledger(&ledger).len() >= 2),
        "no fire ran\n{}",
        logs()
    );

    let mut redis = server.connection();
    let () = redis.set(keys().paused(), "x").expect("SET");
    let damaged_at = server.now_ms();
    let named = format!("claim_runs: {} holds a string, not a set", keys().paused());
    assert!(
        wait_until(Duration::from_secs(10), || {
            let (code, body) = http_get(port, "/readyz");
            code == 503 && body.contains(&format!("script claim_runs fails: WRONGTYPE {named}"))
        }),
        "{:?}\n{}",
        http_get(port, "/readyz"),
        logs()
    );
    // The heartbeat after the failure carries it to `status`.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let status = cli(&server, work, &["status"]);
            status.code == Some(2) && status.stderr.contains(&named)
        }),
        "{:?}",
        cli(&server, work, &["status"]).stderr
    );
    // Damaged across two fires at least, however soon the replicas said so.
    assert!(wait_until(Duration::from_secs(10), || server.now_ms()
        >= damaged_at + 2_500));
    let () = redis.del(keys().paused()).expect("DEL");
    let repaired_at = server.now_ms();

    assert!(
        wait_until(Duration::from_secs(10), || http_get(port, "/readyz").0
            == 200),
        "{:?}\n{}",
        http_get(port, "/readyz"),
        logs()
    );
    let fires: Vec<String> = ((damaged_at / 1000 + 1)..=(repaired_at / 1000))
        .map(|second| format!("tick@{}", second * 1000))
        .collect();
    assert!(fires.len() >= 2, "the key was damaged for {fires:?}");
    assert!(
        wait_until(Duration::from_secs(20), || fires
            .iter()
            .all(|fire| starts(fire) >= 1)),
        "fires due while the key was damaged did not run: {fires:?}, ledger {:?}\n{}",
        read_ledger(&ledger),
        logs()
    );
    for fire in &fires {
        assert_eq!(starts(fire), 1, "{fire}: {:?}", read_ledger(&ledger));
    }
    // The next heartbeat says the script works again.
    assert!(
        wait_until(Duration::from_secs(10), || cli(&server, work, &["status"])
            .code
            == Some(0)),
        "{}",
        cli(&server, work, &["status"]).stderr
    );
}

/// A ready run whose priority was damaged after it came due, in a list no claim reads or in
/// none, goes to the dead letters as corrupt at the reapers' next walk, as one coming due so
/// does, instead of waiting unseen or being put back where its record says.
#[tokio::test]
async fn a_ready_run_routed_to_no_list_a_claim_reads_is_dead_as_corrupt_at_the_next_walk() {
    let (server, store, _token) = setup(FORBID_TICK).await;
    let mut redis = server.connection();
    let unread = format!("{}ready-fires:default:urgent", keys().prefix());
    for (run, listed) in [("tick@1000", false), ("tick@2000", true)] {
        let () = redis
            .hset_multiple(
                keys().run(run),
                &[
                    ("job", "tick"),
                    ("kind", "cron"),
                    ("state", "ready"),
                    ("queue", "default"),
                    ("priority", "urgent"),
                    ("attempt", "0"),
                    ("max_attempts", "1"),
                ],
            )
            .expect("HSET");
        if listed {
            let () = redis.rpush(&unread, run).expect("RPUSH");
        }
    }

    let mut reaper = Reaper::new(store.clone(), ReaperConfig::default());
    reaper.tick().await.expect("tick");
    for run in ["tick@1000", "tick@2000"] {
        let hash = run_hash(&server, run);
        assert_eq!(
            (
                hash.get("state").map(String::as_str),
                hash.get("reason").map(String::as_str)
            ),
            (Some("dead"), Some("corrupt")),
            "{run}"
        );
        let dead: Option<i64> = redis.zscore(keys().dead(), run).expect("ZSCORE");
        assert!(dead.is_some(), "{run} is in the dead letters");
    }
    let pushed: Vec<String> = redis.lrange(&unread, 0, -1).expect("LRANGE");
    assert_eq!(pushed, ["tick@2000"], "nothing put back there");
}
