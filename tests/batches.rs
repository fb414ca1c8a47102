//! The store's batch paths and dead-letter operations, case by case: claims for several workers
//! at once, acks of several runs in one call, re-driving and purging dead runs. Each case runs
//! in a namespace of its own on one Redis, so the cases share a server but no state.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use redcron::schedule::{Job, Priority, parse_file};
use redcron::store::{
    Ack, ClaimedRun, Enqueue, Enqueued, FailOutcome, FailReason, Failure, Redrive, Store,
    StoreSettings,
};
use redis::Commands;

use crate::util::redis_server::RedisServer;

const LEASE: Duration = Duration::from_secs(30);

/// An on-demand job whose runs may overlap: every ready run can be claimed at once.
const TASK: &str = "[jobs.task]\ncommand = \"true\"\noverlap = \"allow\"\nretries = 0\n";

/// A store on `server` in namespace `namespace`, with the task job published and declared by
/// replica "w" (whose workers are `w/<slot>`), reading `now_ms` as the time.
async fn namespace(server: &RedisServer, namespace: &str, now_ms: i64) -> Store {
    namespace_with(server, namespace, now_ms, TASK).await
}

/// Like [`namespace`], with `toml`'s jobs.
async fn namespace_with(server: &RedisServer, namespace: &str, now_ms: i64, toml: &str) -> Store {
    let store = Store::connect(&server.url(), namespace, StoreSettings::default())
        .await
        .expect("connect to the test redis")
        .with_frozen_clock(now_ms);
    let jobs: Vec<Job> = parse_file(Path::new("test.toml"), toml).expect("valid test jobs");
    store.publish_definitions(&jobs).await.expect("publish");
    let declared: Vec<Arc<Job>> = jobs.into_iter().map(Arc::new).collect();
    store
        .publish_replica_jobs("w", &declared, Duration::from_secs(3600))
        .await
        .expect("declare");
    store
}

/// Enqueues `count` runs of the task job, due now; returns their ids.
async fn ready_runs(store: &Store, count: usize) -> Vec<String> {
    ready_runs_of(store, "task", count).await
}

/// Enqueues `count` runs of `job`, due now; returns their ids in order.
async fn ready_runs_of(store: &Store, job: &str, count: usize) -> Vec<String> {
    let request = Enqueue {
        job: job.to_owned(),
        due_ms: None,
        payload: None,
        priority: None,
        unique: None,
    };
    let requests = vec![request; count];
    store
        .enqueue_many(&requests)
        .await
        .expect("enqueue")
        .into_iter()
        .map(|enqueued| match enqueued {
            Enqueued::Scheduled { run_id, .. } => run_id,
            other => panic!("not enqueued: {other:?}"),
        })
        .collect()
}

fn workers(count: usize) -> Vec<String> {
    (0..count).map(|slot| format!("w/{slot}")).collect()
}

/// Claims for `count` workers at once; every claimed run decodes.
async fn claim_for(store: &Store, count: usize, pop_limit: usize) -> (Vec<ClaimedRun>, bool) {
    let workers = workers(count);
    let workers: Vec<&str> = workers.iter().map(String::as_str).collect();
    let claimed = store
        .claim_runs(&workers, &["default".to_owned()], LEASE, pop_limit)
        .await
        .expect("claim");
    let drained = claimed.drained;
    let runs = claimed
        .runs
        .into_iter()
        .map(|run| run.expect("a decodable run"))
        .collect();
    (runs, drained)
}

fn state(server: &RedisServer, store: &Store, run_id: &str) -> Option<String> {
    server
        .connection()
        .hget(store.keys().run(run_id), "state")
        .expect("HGET")
}

#[tokio::test]
async fn one_claim_serves_several_workers_one_run_each() {
    struct Case {
        name: &'static str,
        ready: usize,
        workers: usize,
        pop_limit: usize,
        claimed: usize,
        drained: bool,
    }
    let cases = [
        Case {
            name: "more-runs-than-workers",
            ready: 5,
            workers: 3,
            pop_limit: 100,
            claimed: 3,
            drained: false,
        },
        Case {
            name: "fewer-runs-than-workers",
            ready: 2,
            workers: 3,
            pop_limit: 100,
            claimed: 2,
            drained: true,
        },
        Case {
            name: "as-many-runs-as-workers",
            ready: 3,
            workers: 3,
            pop_limit: 100,
            claimed: 3,
            drained: true,
        },
        Case {
            name: "nothing-ready",
            ready: 0,
            workers: 3,
            pop_limit: 100,
            claimed: 0,
            drained: true,
        },
        Case {
            name: "pop-limit-below-workers",
            ready: 10,
            workers: 4,
            pop_limit: 2,
            claimed: 2,
            drained: false,
        },
        Case {
            name: "one-worker",
            ready: 3,
            workers: 1,
            pop_limit: 100,
            claimed: 1,
            drained: false,
        },
    ];
    let server = RedisServer::start();
    for case in cases {
        let store = namespace(&server, case.name, 1_000).await;
        let enqueued = ready_runs(&store, case.ready).await;
        // The enqueue's wake-up, taken, as a woken worker takes it, before it claims.
        let () = server
            .connection()
            .del(store.keys().wake("default"))
            .expect("DEL");
        let (runs, drained) = claim_for(&store, case.workers, case.pop_limit).await;
        let name = case.name;
        let woken: bool = server
            .connection()
            .exists(store.keys().wake("default"))
            .expect("EXISTS");
        assert_eq!(
            woken,
            case.claimed > 0 && case.ready > case.claimed,
            "{name}: a claim that leaves runs ready wakes the queue's other workers"
        );
        assert_eq!(runs.len(), case.claimed, "{name}: runs claimed");
        assert_eq!(drained, case.drained, "{name}: drained");
        let holders: HashSet<&str> = runs.iter().map(|run| run.worker.as_str()).collect();
        assert_eq!(holders.len(), runs.len(), "{name}: one run per worker");
        let all_workers = workers(case.workers);
        let mut redis = server.connection();
        for run in &runs {
            assert!(all_workers.contains(&run.worker), "{name}: {}", run.worker);
            assert!(
                enqueued.contains(&run.id),
                "{name}: {} was enqueued",
                run.id
            );
            assert_eq!((run.job.as_str(), run.attempt), ("task", 1), "{name}");
            assert_eq!(state(&server, &store, &run.id).as_deref(), Some("active"));
            let deadline: Option<i64> = redis
                .zscore(store.keys().active(), &run.id)
                .expect("ZSCORE");
            assert_eq!(deadline, Some(1_000 + 30_000), "{name}: lease from now");
        }
        let left: usize = redis
            .llen(store.keys().ready("default", Priority::Normal))
            .expect("LLEN");
        assert_eq!(left, case.ready - case.claimed, "{name}: runs left ready");
    }
}

#[tokio::test]
async fn one_ack_call_records_each_run_it_may_and_refuses_the_others() {
    let server = RedisServer::start();
    let store = namespace(&server, "acks", 1_000).await;
    ready_runs(&store, 3).await;
    let (runs, _) = claim_for(&store, 3, 100).await;
    let [a, b, c] = runs.as_slice() else {
        panic!("three runs claimed: {runs:?}");
    };
    let ack = |run: &ClaimedRun| Ack {
        run_id: run.id.clone(),
        worker: run.worker.clone(),
        attempt: run.attempt,
        exit_code: Some(0),
        output: format!("{} done\n", run.id),
    };
    let cases: Vec<(&str, Ack, bool)> = vec![
        ("its holder", ack(a), true),
        (
            "another worker",
            Ack {
                worker: "w/elsewhere".to_owned(),
                ..ack(b)
            },
            false,
        ),
        (
            "an earlier attempt",
            Ack {
                attempt: 0,
                ..ack(c)
            },
            false,
        ),
        (
            "a run that does not exist",
            Ack {
                run_id: "nope".to_owned(),
                ..ack(a)
            },
            false,
        ),
        ("its holder after a refused ack", ack(c), true),
        ("a run acked earlier in the batch", ack(a), false),
    ];
    let batch: Vec<&Ack> = cases.iter().map(|(_, ack, _)| ack).collect();
    let recorded = store.ack_runs(&batch).await.expect("ack");
    assert_eq!(recorded.len(), cases.len(), "one answer per ack");
    for ((what, _, expected), recorded) in cases.iter().zip(&recorded) {
        assert_eq!(recorded, expected, "{what}");
    }
    let states: Vec<Option<String>> = [a, b, c]
        .iter()
        .map(|run| state(&server, &store, &run.id))
        .collect();
    assert_eq!(
        states,
        [Some("succeeded"), Some("active"), Some("succeeded")]
            .map(|state| state.map(str::to_owned))
    );
    let output: Option<String> = server
        .connection()
        .hget(store.keys().run(&a.id), "output")
        .expect("HGET");
    assert_eq!(
        output,
        Some(format!("{} done\n", a.id)),
        "the first ack's output"
    );
    let active: Vec<String> = server
        .connection()
        .zrange(store.keys().active(), 0, -1)
        .expect("ZRANGE");
    assert_eq!(
        active,
        vec![b.id.clone()],
        "only the unacked run holds a lease"
    );
}

/// The plain path of a run due when claimed, claimed and acked with others in one call each,
/// costs Redis six commands per run: the claim reads the run's hash once and writes it once, the
/// ack reads it once, writes it once, gives it its retention and records its event. Nothing is
/// deleted that the hash does not hold; what the calls cost besides is paid per call.
#[tokio::test]
async fn a_run_claimed_and_acked_in_batches_costs_six_commands() {
    const RUNS: usize = 20;
    let server = RedisServer::start();
    let store = namespace(&server, "per-run", 1_000).await;
    ready_runs(&store, RUNS).await;
    server.reset_command_calls();
    let (runs, drained) = claim_for(&store, RUNS, 100).await;
    assert_eq!((runs.len(), drained), (RUNS, true));
    let acks: Vec<Ack> = runs
        .iter()
        .map(|run| Ack {
            run_id: run.id.clone(),
            worker: run.worker.clone(),
            attempt: run.attempt,
            exit_code: Some(0),
            output: String::new(),
        })
        .collect();
    let recorded = store
        .ack_runs(&acks.iter().collect::<Vec<_>>())
        .await
        .expect("ack");
    assert!(recorded.iter().all(|&recorded| recorded), "{recorded:?}");
    let calls = server.command_calls();
    let count = |command: &str| calls.get(command).copied().unwrap_or(0);
    let claimed = RUNS as u64;
    // Each call also writes `rewind` once; the claim, which emptied its lists, looks at the
    // three after the one it emptied once (to answer whether runs are left) and wakes no one,
    // and asks whether the job of the runs it popped is declared with one HMGET.
    assert_eq!(
        [
            ("hmget", count("hmget")),
            ("hset", count("hset")),
            ("hdel", count("hdel")),
            ("pexpire", count("pexpire")),
            ("xadd", count("xadd")),
            ("llen", count("llen")),
        ],
        [
            ("hmget", 2 * claimed + 1),
            ("hset", 2 * claimed + 2),
            ("hdel", 0),
            ("pexpire", claimed),
            ("xadd", claimed),
            ("llen", 3),
        ],
        "{calls:?}"
    );
}

/// A run of the task job that failed for good at `died_ms`.
async fn dead_run(store: &Store, died_ms: i64) -> String {
    let store = store.clone().with_frozen_clock(died_ms);
    ready_runs(&store, 1).await;
    let (runs, _) = claim_for(&store, 1, 100).await;
    let run = runs.into_iter().next().expect("a run");
    let failure = Failure {
        reason: FailReason::Permanent,
        message: "exit status 1".to_owned(),
        exit_code: Some(1),
        output: "boom".to_owned(),
    };
    let outcome = store
        .fail_run(&run.id, Some(&run.worker), &failure, 0.5)
        .await
        .expect("fail");
    assert_eq!(outcome, FailOutcome::Dead);
    run.id
}

#[tokio::test]
async fn redrive_takes_only_dead_runs_out_of_the_dead_letters() {
    let server = RedisServer::start();
    let store = namespace(&server, "redrive", 1_000).await;
    let dead = dead_run(&store, 1_000).await;
    ready_runs(&store, 1).await;
    let (runs, _) = claim_for(&store, 1, 100).await;
    let succeeded = runs[0].clone();
    assert!(store.ack_run(&succeeded, Some(0), "").await.expect("ack"));
    let store = store.with_frozen_clock(5_000);
    // A run of a paused job would only be skipped: it stays dead until the job is resumed.
    assert!(store.set_paused("task", true).await.expect("pause"));
    assert_eq!(
        store.redrive_run(&dead).await.expect("redrive"),
        Redrive::JobPaused("task".to_owned())
    );
    assert!(store.set_paused("task", false).await.expect("resume"));
    for (what, run_id, redriven) in [
        ("a dead run", dead.as_str(), Redrive::Redriven),
        ("the same run again", dead.as_str(), Redrive::NotDead),
        ("a succeeded run", succeeded.id.as_str(), Redrive::NotDead),
        ("a run that does not exist", "nope", Redrive::NotDead),
    ] {
        assert_eq!(
            store.redrive_run(run_id).await.expect("redrive"),
            redriven,
            "{what}"
        );
    }
    let mut redis = server.connection();
    let due: Option<i64> = redis
        .zscore(store.keys().due_runs(), &dead)
        .expect("ZSCORE");
    let still_dead: Option<i64> = redis.zscore(store.keys().dead(), &dead).expect("ZSCORE");
    assert_eq!(
        (due, still_dead),
        (Some(5_000), None),
        "due now, dead no more"
    );
    let (redriven_state, attempt): (Option<String>, Option<u32>) = redis
        .hmget(store.keys().run(&dead), &["state", "attempt"])
        .expect("HMGET");
    assert_eq!(
        (redriven_state.as_deref(), attempt),
        (Some("scheduled"), Some(0))
    );
    assert_eq!(
        state(&server, &store, &succeeded.id).as_deref(),
        Some("succeeded"),
        "a run that is not dead is left alone"
    );
}

#[tokio::test]
async fn purge_deletes_the_dead_runs_that_died_by_the_cutoff() {
    let server = RedisServer::start();
    let store = namespace(&server, "purge", 1_000).await;
    let mut died = Vec::new();
    for died_ms in [1_000, 2_000, 3_000] {
        died.push(dead_run(&store, died_ms).await);
    }
    // One state, purged step by step: each cutoff sees what the ones before it left.
    for (cutoff, purged, left) in [
        (Some(500), 0, 3),
        (Some(2_000), 2, 1),
        (Some(2_500), 0, 1),
        (None, 1, 0),
        (None, 0, 0),
    ] {
        assert_eq!(
            store.purge_dead(cutoff).await.expect("purge"),
            purged,
            "purged at cutoff {cutoff:?}"
        );
        let mut redis = server.connection();
        let dead: usize = redis.zcard(store.keys().dead()).expect("ZCARD");
        assert_eq!(dead, left, "left after cutoff {cutoff:?}");
        let hashes = died
            .iter()
            .filter(|run_id| {
                redis
                    .exists::<_, bool>(store.keys().run(run_id))
                    .expect("EXISTS")
            })
            .count();
        assert_eq!(hashes, left, "a purged run's hash goes with it");
    }
}

/// Runs set aside for a replica that declares their job can outnumber what one Lua call can
/// unpack (about 8,000 values): every script that keeps or returns them writes them in slices,
/// in their order.
#[tokio::test]
async fn a_backlog_set_aside_larger_than_luas_stack_is_kept_and_returned_in_order() {
    const BACKLOG: usize = 20_000;
    let server = RedisServer::start();
    let store = namespace_with(
        &server,
        "aside",
        1_000,
        &format!("{TASK}[jobs.report]\ncommand = \"true\"\nqueue = \"reports\"\n"),
    )
    .await;
    let runs = ready_runs_of(&store, "report", BACKLOG).await;
    // Set aside, as a replica that does not declare the job leaves them.
    let keys = store.keys();
    let ready = keys.ready("reports", Priority::Normal);
    let aside = keys.undeclared("report");
    let mut redis = server.connection();
    let () = redis::pipe()
        .del(&ready)
        .rpush(&aside, &runs)
        .zadd(keys.undeclared_jobs(), "report", 1_000)
        .query(&mut redis)
        .expect("set aside");
    let aside_now = |redis: &mut redis::Connection| -> Vec<String> {
        redis.lrange(&aside, 0, -1).expect("LRANGE")
    };

    // A claim for a queue the job does not use keeps them aside.
    let (claimed, _) = claim_for(&store, 2, 100).await;
    assert!(claimed.is_empty(), "nothing ready in default");
    assert_eq!(aside_now(&mut redis), runs, "kept aside, in order");

    // Withdrawn before its grace ran out: its ad-hoc runs wait out the grace, still aside.
    let buried = store
        .bury_undeclared_runs(
            Duration::from_secs(3600),
            Duration::from_secs(6),
            &["report"],
        )
        .await
        .expect("bury");
    assert_eq!(buried, vec![], "no run ended");
    assert_eq!(aside_now(&mut redis), runs, "kept aside, in order");

    // A claim for its queue takes them all back, the oldest first.
    let claimed = store
        .claim_runs(&["w/0"], &["reports".to_owned()], LEASE, 100)
        .await
        .expect("claim");
    let first = claimed
        .runs
        .into_iter()
        .next()
        .expect("a run")
        .expect("decodes");
    assert_eq!(first.id, runs[0], "the oldest run first");
    let back: Vec<String> = redis.lrange(&ready, 0, -1).expect("LRANGE");
    assert_eq!(
        back,
        runs[1..],
        "the rest back in their ready list, in order"
    );
    assert!(aside_now(&mut redis).is_empty());
}
