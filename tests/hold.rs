//! A namespace held still (`redcron hold`) while its Redis Cluster slot moves: every script
//! that builds keys of its own refuses and writes nothing, leases are kept and not reaped, and
//! everything goes on where it was once the hold is released.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use redcron::engine::worker::RECORD_WINDOW;
use redcron::store::{Ack, Enqueue, FailReason, Failure, REAPING_GRACE, Store, StoreError};
use redis::Commands;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::store::{FORBID_TICK, LEASE, THRESHOLD, claim_run, plan, setup};
use crate::util::{cli, keys, wait_until, wait_until_async};

/// Every key of the test namespace but the hold's own, with its serialized value.
fn snapshot(server: &RedisServer) -> BTreeMap<String, Vec<u8>> {
    let mut redis = server.connection();
    let names: Vec<String> = redis.keys("*").expect("KEYS");
    names
        .into_iter()
        .filter(|name| *name != keys().hold() && *name != keys().reaping_paused())
        .map(|name| {
            let value: Vec<u8> = redis::cmd("DUMP")
                .arg(&name)
                .query(&mut redis)
                .expect("DUMP");
            (name, value)
        })
        .collect()
}

fn assert_held<T: Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(error) if error.is_held() => {
            assert!(error.to_string().contains("redcron hold"), "{error}");
        }
        other => panic!("{what} while the namespace is held: {other:?}"),
    }
}

#[tokio::test]
async fn a_held_namespace_writes_nothing_keeps_its_leases_and_goes_on_once_released() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[0]).await;
    let at_start = store.clone().with_frozen_clock(0);
    at_start
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let running = claim_run(&at_start, &["default"]).await;
    plan(&store, &token, "tick", &[1_000]).await;

    assert!(
        !store
            .set_hold(Some(Duration::from_secs(60)))
            .await
            .expect("hold")
    );
    assert!(
        store
            .set_hold(Some(Duration::from_secs(60)))
            .await
            .expect("held again")
    );
    let before = snapshot(&server);

    let later = store.clone().with_frozen_clock(2_000);
    assert_held(
        later.promote_due(100, THRESHOLD, Duration::ZERO).await,
        "promote",
    );
    assert_held(
        later
            .claim_run("replica/1", &["default".to_owned()], LEASE, 100)
            .await,
        "claim",
    );
    let ack = Ack {
        run_id: running.id.clone(),
        worker: running.worker.clone(),
        attempt: running.attempt,
        exit_code: Some(0),
        output: String::new(),
    };
    assert_held(later.ack_runs(&[&ack]).await, "ack");
    let failure = Failure::without_output(FailReason::Lost, "reaped");
    assert_held(
        later.fail_run(&running.id, None, &failure, 0.0).await,
        "fail",
    );
    assert_held(later.owned_runs("replica").await, "list owned runs");
    assert_held(
        later
            .enqueue_run(&Enqueue {
                job: "tick".to_owned(),
                due_ms: None,
                payload: None,
                priority: None,
                unique: None,
            })
            .await,
        "enqueue",
    );
    let replan = redcron::store::JobPlan {
        job: "tick".to_owned(),
        from_cursor_ms: 1_000,
        cursor_ms: 2_000,
        runs: Vec::new(),
        skipped: Vec::new(),
    };
    assert_held(later.plan_fires(&token, &replan).await, "plan");
    assert_eq!(snapshot(&server), before, "a held namespace was written");

    // Leases are kept, and none is taken for expired while the namespace is held.
    assert!(
        later
            .extend_lease(&running.id, &running.job, &running.worker, LEASE)
            .await
            .expect("extend while held")
    );
    let long_after = store.clone().with_frozen_clock(3_600_000);
    assert_eq!(
        long_after.expired_leases(10).await.expect("expired"),
        [] as [String; 0]
    );

    // Released: still nothing reaped for a grace, and everything goes on where it was.
    assert!(store.set_hold(None).await.expect("release"));
    assert!(!store.set_hold(None).await.expect("release again"));
    let grace: i64 = server
        .connection()
        .pttl(keys().reaping_paused())
        .expect("PTTL");
    let grace_ms = i64::try_from(REAPING_GRACE.as_millis()).expect("ms");
    assert!((grace_ms - 5_000..=grace_ms).contains(&grace), "{grace}");
    assert_eq!(
        long_after.expired_leases(10).await.expect("expired"),
        [] as [String; 0]
    );
    assert_eq!(later.ack_runs(&[&ack]).await.expect("ack"), [true]);
    later
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let next = claim_run(&later, &["default"]).await;
    assert_eq!(next.fire_ms, Some(1_000));

    // Once the grace is over, expired leases are reaped again.
    let _: () = server
        .connection()
        .del(keys().reaping_paused())
        .expect("DEL");
    assert_eq!(
        long_after.expired_leases(10).await.expect("expired"),
        [next.id]
    );
}

#[tokio::test]
async fn a_hold_ends_by_itself_when_its_time_is_up() {
    let server = RedisServer::start();
    let store: Store = crate::util::store::connect(&server).await;
    let set = Instant::now();
    store
        .set_hold(Some(Duration::from_millis(300)))
        .await
        .expect("hold");
    assert!(store.overview().await.expect("overview").held_for.is_some());
    let ended = wait_until_async(Duration::from_secs(5), async || {
        store.overview().await.expect("overview").held_for.is_none()
    })
    .await;
    assert!(ended, "the hold outlived its time");
    assert!(
        set.elapsed() >= Duration::from_millis(300),
        "the hold ended after {:?}, before its time",
        set.elapsed()
    );
}

/// A script that builds keys of its own must refuse while the namespace is held, or declare
/// every key it touches (then Redis itself keeps it off a slot half moved).
#[test]
fn every_script_that_builds_keys_refuses_while_the_namespace_is_held() {
    let directory = concat!(env!("CARGO_MANIFEST_DIR"), "/lua");
    let mut unguarded = Vec::new();
    for entry in std::fs::read_dir(directory).expect("lua directory") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|extension| extension != "lua") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("script");
        let code: Vec<&str> = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("--"))
            .collect();
        let builds_keys = code
            .iter()
            .any(|line| line.contains("key_") || line.contains("prefix"));
        let first_call = code.iter().position(|line| line.contains("redis.call"));
        // The guard is the first check of the script's keys, whose types name the hold key
        // (`'hold'`, common.lua): its table may go on over a few lines.
        let guard = code
            .iter()
            .position(|line| line.contains("check_types("))
            .filter(|&at| {
                let call = code[at..].join("\n");
                call.split("})")
                    .next()
                    .is_some_and(|types| types.contains("'hold'"))
            });
        let guarded = match (guard, first_call) {
            (Some(guard), Some(call)) => guard < call,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if builds_keys && !guarded {
            unguarded.push(
                path.file_name()
                    .expect("name")
                    .to_string_lossy()
                    .into_owned(),
            );
        }
    }
    unguarded.sort();
    assert_eq!(
        unguarded,
        [] as [String; 0],
        "scripts that build keys without refusing while held"
    );
}

/// A replica told to stop during a hold does not wait for the hold to end: the failure it could
/// not record waits one recording window past the shutdown grace at most, and the process exits
/// as docs/operations.md promises (grace plus the window). The run's lease is then reaped and it runs
/// again, as for any replica that stops during a hold.
#[test]
fn a_replica_stopped_during_a_hold_exits_within_its_grace_and_recording_window() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    let started = dir.path().join("started");
    std::fs::create_dir_all(&schedules).expect("schedules dir");
    std::fs::write(
        schedules.join("jobs.toml"),
        format!(
            "[jobs.flaky]\ncommand = \"touch {}; sleep 1; exit 1\"\n",
            started.display()
        ),
    )
    .expect("write jobs");
    let mut replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &schedules,
        dir.path(),
        &["--shutdown-grace", "2s"],
    );
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .log()
            .contains("acquired the leader lease")),
        "{}",
        replica.log()
    );
    cli(&server, dir.path(), &["trigger", "flaky"]).success();
    assert!(
        wait_until(Duration::from_secs(10), || started.exists()),
        "{}",
        replica.log()
    );
    cli(&server, dir.path(), &["hold", "--for", "2m"]).success();
    let stopping = Instant::now();
    // The run fails a second later, while held and while the replica stops.
    let code = replica.terminate(Duration::from_secs(30));
    let took = stopping.elapsed();
    assert_eq!(code, Some(0), "{}", replica.log());
    // Grace (2 s) plus the recording window, with room for a slow machine; far below the hold.
    assert!(
        took < Duration::from_secs(2) + RECORD_WINDOW + Duration::from_secs(5),
        "took {took:?} to stop during a hold\n{}",
        replica.log()
    );
    assert!(
        replica.log().contains("cannot record the failure"),
        "{}",
        replica.log()
    );
}
