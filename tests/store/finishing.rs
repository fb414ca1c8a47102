//! Outcomes recorded (`ack_runs.lua`, `fail_run.lua`): retries with backoff, the dead letters, and
//! runs whose lease expired.

use std::time::Duration;

use redcron::store::{ClaimedRun, FailOutcome, FailReason};
use redis::Commands;

use crate::util::keys;
use crate::util::store::{
    FORBID_TICK, LEASE, THRESHOLD, claim_run, failure, plan, run_hash, setup,
};

#[tokio::test]
async fn ack_records_success_and_frees_the_jobs_slot() {
    let (server, store, token) = setup(FORBID_TICK).await;
    let store = store.with_frozen_clock(10_000);
    plan(&store, &token, "tick", &[1_000]).await;
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&store, &["default"]).await;

    let someone_else = ClaimedRun {
        worker: "someone/else".to_owned(),
        ..run.clone()
    };
    let earlier_attempt = ClaimedRun {
        attempt: 0,
        ..run.clone()
    };
    for (not_theirs, what) in [
        (someone_else, "another worker"),
        (earlier_attempt, "an old attempt"),
    ] {
        assert!(
            !store.ack_run(&not_theirs, Some(0), "").await.expect("ack"),
            "{what} cannot ack the run"
        );
    }
    // What an earlier attempt that was lost left in the hash.
    let () = server
        .connection()
        .hset_multiple(
            keys().run(&run.id),
            &[("reason", "lost"), ("error", "lease expired")],
        )
        .expect("HSET");
    assert!(store.ack_run(&run, Some(0), "done\n").await.expect("ack"));
    assert!(
        !store.ack_run(&run, Some(0), "").await.expect("ack twice"),
        "a run is acked once"
    );

    let mut redis = server.connection();
    let active: usize = redis.zcard(keys().active()).expect("ZCARD");
    let busy: bool = redis.exists(keys().running("tick")).expect("EXISTS");
    let ttl: i64 = redis.pttl(keys().run(&run.id)).expect("PTTL");
    assert_eq!((active, busy), (0, false));
    assert!(ttl > 0, "a finished run's hash expires after the retention");
    let hash = run_hash(&server, &run.id);
    assert_eq!(hash.get("state").map(String::as_str), Some("succeeded"));
    assert_eq!(
        (hash.get("reason"), hash.get("error")),
        (None, None),
        "a success is shown without an earlier attempt's failure"
    );
    assert_eq!(hash.get("output").map(String::as_str), Some("done\n"));
    assert_eq!(hash.get("exit_code").map(String::as_str), Some("0"));
}

#[tokio::test]
async fn failures_retry_with_capped_exponential_backoff_then_go_to_the_dead_letters() {
    let (server, store, token) = setup("[jobs.flaky]\ncommand = \"false\"\nretries = 3\nbackoff = \"10s\"\nmax_backoff = \"25s\"\n").await;
    plan(&store, &token, "flaky", &[0]).await;

    let mut now = 0;
    let mut delays = Vec::new();
    for attempt in 1..=4 {
        let at = store.clone().with_frozen_clock(now);
        at.promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
        let run = claim_run(&at, &["default"]).await;
        assert_eq!(run.attempt, attempt);
        // jitter 1.0: the full delay.
        match at
            .fail_run(
                &run.id,
                Some("replica/0"),
                &failure(FailReason::Failed),
                1.0,
            )
            .await
            .expect("fail")
        {
            FailOutcome::Retrying { due_ms } => {
                delays.push(due_ms - now);
                now = due_ms;
            }
            FailOutcome::Dead => assert_eq!(attempt, 4, "dead before the last attempt"),
            FailOutcome::Gone => panic!("the run was this worker's"),
        }
    }
    assert_eq!(delays, [10_000, 20_000, 25_000]);
    let mut redis = server.connection();
    let dead: Vec<String> = redis.zrange(keys().dead(), 0, -1).expect("ZRANGE");
    assert_eq!(dead, ["flaky@0"]);
    let hash = run_hash(&server, "flaky@0");
    assert_eq!(hash.get("state").map(String::as_str), Some("dead"));
    assert_eq!(hash.get("error").map(String::as_str), Some("exit status 1"));
    let ttl: i64 = redis.pttl(keys().run("flaky@0")).expect("PTTL");
    assert_eq!(ttl, -1, "dead runs are kept until purged");
}

#[tokio::test]
async fn jitter_spreads_retries_over_half_to_all_of_the_backoff() {
    // fail_run draws nothing: the caller's jitter in [0, 1) places the retry, from half the
    // backoff at 0 to (nearly) all of it as it nears 1, in proportion between.
    for (jitter, due_ms) in [(0.0, 5_000), (0.25, 6_250), (0.5, 7_500), (0.999, 9_995)] {
        let (_server, store, token) =
            setup("[jobs.flaky]\ncommand = \"false\"\nretries = 1\nbackoff = \"10s\"\n").await;
        plan(&store, &token, "flaky", &[0]).await;
        let store = store.with_frozen_clock(0);
        store
            .promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
        let run = claim_run(&store, &["default"]).await;
        assert_eq!(
            store
                .fail_run(
                    &run.id,
                    Some("replica/0"),
                    &failure(FailReason::Timeout),
                    jitter
                )
                .await
                .expect("fail"),
            FailOutcome::Retrying { due_ms },
            "a 10 s backoff with jitter {jitter}"
        );
    }
}

#[tokio::test]
async fn permanent_failures_skip_the_remaining_attempts() {
    let (_server, store, token) = setup("[jobs.bad]\ncommand = \"false\"\nretries = 5\n").await;
    plan(&store, &token, "bad", &[0]).await;
    let store = store.with_frozen_clock(0);
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let run = claim_run(&store, &["default"]).await;
    assert_eq!(
        store
            .fail_run(
                &run.id,
                Some("replica/0"),
                &failure(FailReason::Permanent),
                0.5
            )
            .await
            .expect("fail"),
        FailOutcome::Dead
    );
}

#[tokio::test]
async fn reaped_runs_rerun_when_at_least_once_and_die_when_at_most_once() {
    let (_server, store, token) = setup(
        "[jobs.again]\ncommand = \"sleep 10\"\n\
             [jobs.once]\ncommand = \"sleep 10\"\ndelivery = \"at-most-once\"\n",
    )
    .await;
    plan(&store, &token, "again", &[0]).await;
    plan(&store, &token, "once", &[0]).await;
    let start = store.clone().with_frozen_clock(0);
    start
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    claim_run(&start, &["default"]).await;
    claim_run(&start, &["default"]).await;

    // Before the lease ends nothing is expired, and the reaper cannot take a live run.
    assert!(start.expired_leases(10).await.expect("expired").is_empty());
    let lost = failure(FailReason::Lost);
    assert_eq!(
        start
            .fail_run("again@0", None, &lost, 0.5)
            .await
            .expect("reap"),
        FailOutcome::Gone
    );

    let later = store
        .clone()
        .with_frozen_clock(LEASE.as_millis() as i64 + 1);
    let mut expired = later.expired_leases(10).await.expect("expired");
    expired.sort();
    assert_eq!(expired, ["again@0", "once@0"]);
    assert_eq!(
        later
            .fail_run("again@0", None, &lost, 0.5)
            .await
            .expect("reap"),
        FailOutcome::Retrying { due_ms: 30_001 }
    );
    assert_eq!(
        later
            .fail_run("once@0", None, &lost, 0.5)
            .await
            .expect("reap"),
        FailOutcome::Dead
    );

    // The re-run is attempt 1 again: losing a worker uses up no attempt.
    later
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(claim_run(&later, &["default"]).await.attempt, 1);
}

#[tokio::test]
async fn a_run_lost_again_and_again_ends_in_the_dead_letters() {
    let (_server, store, token) = setup("[jobs.poison]\ncommand = \"kill -9 $PPID\"\n").await;
    plan(&store, &token, "poison", &[0]).await;
    let mut outcomes = Vec::new();
    for round in 0..4_i64 {
        let claimed_at = round * 100_000;
        let at = store.clone().with_frozen_clock(claimed_at);
        at.promote_due(100, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
        claim_run(&at, &["default"]).await;
        let reaped_at = store.clone().with_frozen_clock(claimed_at + 50_000);
        outcomes.push(
            reaped_at
                .fail_run("poison@0", None, &failure(FailReason::Lost), 0.5)
                .await
                .expect("reap"),
        );
    }
    assert!(
        matches!(outcomes[2], FailOutcome::Retrying { .. }),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[3], FailOutcome::Dead);
}

#[tokio::test]
async fn interrupted_runs_come_back_at_once_without_using_an_attempt() {
    let (_server, store, token) = setup("[jobs.long]\ncommand = \"sleep 60\"\n").await;
    plan(&store, &token, "long", &[0]).await;
    let store = store.with_frozen_clock(1_000);
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    claim_run(&store, &["default"]).await;
    assert_eq!(
        store
            .fail_run(
                "long@0",
                Some("replica/0"),
                &failure(FailReason::Interrupted),
                0.5
            )
            .await
            .expect("hand back"),
        FailOutcome::Retrying { due_ms: 1_000 }
    );
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!(claim_run(&store, &["default"]).await.attempt, 1);
}

#[tokio::test]
async fn an_at_most_once_run_stopped_by_shutdown_is_dead_unless_it_had_not_started() {
    let (server, store, token) = setup(
        "[jobs.once]\ncommand = \"sleep 60\"\ndelivery = \"at-most-once\"\noverlap = \"allow\"\n",
    )
    .await;
    plan(&store, &token, "once", &[0, 500]).await;
    let store = store.with_frozen_clock(1_000);
    store
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let stopped = claim_run(&store, &["default"]).await;
    let never_started = claim_run(&store, &["default"]).await;
    assert_eq!(
        store
            .fail_run(
                &stopped.id,
                Some(&stopped.worker),
                &failure(FailReason::Interrupted),
                0.5
            )
            .await
            .expect("hand back"),
        FailOutcome::Dead,
        "it may have done part of its work: never run twice"
    );
    assert_eq!(
        store
            .fail_run(
                &never_started.id,
                Some(&never_started.worker),
                &failure(FailReason::NotStarted),
                0.5
            )
            .await
            .expect("hand back"),
        FailOutcome::Retrying { due_ms: 1_000 }
    );
    assert_eq!(
        run_hash(&server, &stopped.id)
            .get("reason")
            .map(String::as_str),
        Some("interrupted")
    );
}
