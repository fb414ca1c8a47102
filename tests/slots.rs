//! A job's limit on runs at once (`overlap = "forbid"`, `max_concurrency`), run by run against a
//! real Redis: which runs start, which wait for a slot, which are skipped, and in what order.

use std::time::Duration;

use redcron::schedule::Priority;
use redcron::store::{Claimed, ClaimedRun, FailReason, Failure, JobSlot, PendingSlot};
use redis::Commands;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::store::{
    FORBID_TICK, LEASE, THRESHOLD, claim, claim_for, claim_run, enqueue, plan, run_hash, setup,
    skipped,
};

fn claimed_ids(claimed: &Claimed) -> Vec<String> {
    claimed
        .runs
        .iter()
        .map(|run| run.as_ref().expect("a decodable run").id.clone())
        .collect()
}

fn waiting(server: &RedisServer, job: &str) -> Vec<String> {
    server
        .connection()
        .lrange(keys().waiting(job), 0, -1)
        .expect("LRANGE")
}

fn state(server: &RedisServer, run_id: &str) -> Option<String> {
    run_hash(server, run_id).get("state").cloned()
}

fn the_run(claimed: Claimed) -> ClaimedRun {
    let mut runs = claimed.runs.into_iter();
    let run = runs.next().expect("a run").expect("a decodable run");
    assert!(runs.next().is_none(), "one run only");
    run
}

#[tokio::test]
async fn late_fires_of_a_forbid_job_run_one_at_a_time_oldest_first_none_skipped() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000, 2_000, 3_000]).await;
    // Redis stalled: the three fires come due together, 12 s late, under the threshold.
    let after_stall = store.clone().with_frozen_clock(15_000);
    let promoted = after_stall
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!((promoted.ready, promoted.skipped()), (3, 0));

    let claimed = claim_for(&after_stall, 3).await;
    assert_eq!(claimed_ids(&claimed), ["tick@1000"]);
    assert_eq!(waiting(&server, "tick"), ["tick@2000", "tick@3000"]);
    assert_eq!(state(&server, "tick@2000").as_deref(), Some("waiting"));
    let mut run = the_run(claimed);

    for next in ["tick@2000", "tick@3000"] {
        assert!(after_stall.ack_run(&run, Some(0), "").await.expect("ack"));
        assert_eq!(
            state(&server, next).as_deref(),
            Some("ready"),
            "the oldest waiting fire gets the freed slot"
        );
        let claimed = claim_for(&after_stall, 3).await;
        assert_eq!(claimed_ids(&claimed), [next], "one at a time");
        run = the_run(claimed);
    }
    assert!(after_stall.ack_run(&run, Some(0), "").await.expect("ack"));
    assert!(waiting(&server, "tick").is_empty());
    assert_eq!(
        skipped(&server),
        [],
        "no late fire is skipped as an overlap"
    );
    for fire in ["tick@1000", "tick@2000", "tick@3000"] {
        assert_eq!(state(&server, fire).as_deref(), Some("succeeded"), "{fire}");
        assert_eq!(
            run_hash(&server, fire).get("attempt").map(String::as_str),
            Some("1"),
            "waiting uses no attempt"
        );
    }
    let slots: bool = server
        .connection()
        .exists(keys().running("tick"))
        .expect("EXISTS");
    assert!(!slots, "every slot is freed");
}

#[tokio::test]
async fn ad_hoc_runs_of_a_forbid_job_wait_for_the_running_one_and_are_never_skipped() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000]).await;
    let now = store.clone().with_frozen_clock(1_000);
    now.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let fire = claim_run(&now, &["default"]).await;

    let triggered = [
        enqueue(&now, "tick", None).await,
        enqueue(&now, "tick", None).await,
    ];
    let claimed = claim_for(&now, 2).await;
    assert!(claimed.runs.is_empty(), "the fire still runs");
    assert_eq!(claimed.skipped(), 0);
    assert_eq!(waiting(&server, "tick"), triggered);

    // A delayed run claimed ahead finds the job busy at its due time: it waits as well.
    let delayed = enqueue(&now, "tick", Some(1_100)).await;
    now.promote_due(100, THRESHOLD, Duration::from_millis(200))
        .await
        .expect("promote");
    let ahead = the_run(claim_for(&now, 1).await);
    assert_eq!(
        (ahead.id.as_str(), ahead.pending_slot),
        (delayed.as_str(), Some(PendingSlot::Wait))
    );
    let at_due = store.clone().with_frozen_clock(1_100);
    assert_eq!(
        at_due
            .take_job_slot(&ahead, PendingSlot::Wait, LEASE)
            .await
            .expect("take"),
        JobSlot::Waiting
    );
    let hash = run_hash(&server, &delayed);
    assert_eq!(
        (
            hash.get("state").map(String::as_str),
            hash.get("attempt").map(String::as_str)
        ),
        (Some("waiting"), Some("0"))
    );
    let active: Option<i64> = server
        .connection()
        .zscore(keys().active(), &delayed)
        .expect("ZSCORE");
    assert_eq!(active, None, "a waiting run holds no lease");

    // Each end hands the slot to the next, in the order they came.
    let mut run = fire;
    for next in triggered.iter().chain([&delayed]) {
        assert!(at_due.ack_run(&run, Some(0), "").await.expect("ack"));
        run = the_run(claim_for(&at_due, 2).await);
        assert_eq!(&run.id, next);
    }
    assert_eq!(skipped(&server), []);
}

#[tokio::test]
async fn on_demand_jobs_overlap_and_max_concurrency_holds_runs_back_without_dropping_any() {
    let (server, store, _token) = setup(
        "[jobs.mail]\ncommand = \"true\"\n\
         [jobs.resize]\ncommand = \"true\"\nmax_concurrency = 2\n",
    )
    .await;
    for _ in 0..3 {
        enqueue(&store, "mail", None).await;
    }
    assert_eq!(
        claim_for(&store, 5).await.runs.len(),
        3,
        "an on-demand job allows overlap by default"
    );

    let resizes = [
        enqueue(&store, "resize", None).await,
        enqueue(&store, "resize", None).await,
        enqueue(&store, "resize", None).await,
        enqueue(&store, "resize", None).await,
    ];
    let claimed = claim_for(&store, 4).await;
    assert_eq!(claimed_ids(&claimed), resizes[..2]);
    assert_eq!(waiting(&server, "resize"), resizes[2..]);

    // A failure frees its slot as a success does.
    let first = claimed.runs[0].clone().expect("a run");
    let failure = Failure::without_output(FailReason::Permanent, "bad input");
    store
        .fail_run(&first.id, Some(&first.worker), &failure, 0.0)
        .await
        .expect("fail");
    let claimed = claim_for(&store, 4).await;
    assert_eq!(claimed_ids(&claimed), [resizes[2].clone()]);
    assert_eq!(waiting(&server, "resize"), [resizes[3].clone()]);
    assert_eq!(skipped(&server), []);
}

#[tokio::test]
async fn cron_fires_are_claimed_before_a_backlog_of_ad_hoc_runs() {
    let (server, store, token) = setup(
        "[jobs.tick]\ncommand = \"true\"\nschedule = \"@every 1s\"\n\
         [jobs.task]\ncommand = \"true\"\n\
         [jobs.eu-tick]\ncommand = \"true\"\nschedule = \"@every 1s\"\nqueue = \"eu\"\n",
    )
    .await;
    let now = store.clone().with_frozen_clock(5_000);
    for _ in 0..100 {
        enqueue(&now, "task", None).await;
    }
    plan(&now, &token, "tick", &[5_000]).await;
    plan(&now, &token, "eu-tick", &[5_000]).await;
    now.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    // The fires of every queue served, the backlog's own and another's, go first.
    let mut claimed = Vec::new();
    for _ in 0..2 {
        let redcron::store::Claim::Run { run, .. } = claim(&now, &["default", "eu"]).await else {
            panic!("a run is ready");
        };
        claimed.push(run.id);
    }
    claimed.sort();
    assert_eq!(
        claimed,
        ["eu-tick@5000", "tick@5000"],
        "the fires go before the 100 tasks"
    );
    let tasks: usize = server
        .connection()
        .llen(keys().ready("default", Priority::Normal))
        .expect("LLEN");
    assert_eq!(tasks, 100);
}

/// A run waiting for a slot of its job, whose record's priority was damaged meanwhile, goes to
/// the dead letters as corrupt when it is handed the slot, as it would have had it been damaged
/// before it came due, instead of being pushed to a list no claim reads.
#[tokio::test]
async fn a_waiting_run_whose_routing_was_damaged_meanwhile_is_dead_as_corrupt() {
    let (server, store, token) = setup(FORBID_TICK).await;
    plan(&store, &token, "tick", &[1_000]).await;
    let now = store.clone().with_frozen_clock(1_000);
    now.promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let fire = claim_run(&now, &["default"]).await;
    let triggered = enqueue(&now, "tick", None).await;
    assert!(
        claim_for(&now, 1).await.runs.is_empty(),
        "the fire still runs"
    );
    assert_eq!(waiting(&server, "tick"), std::slice::from_ref(&triggered));
    let () = server
        .connection()
        .hset(keys().run(&triggered), "priority", "urgent")
        .expect("HSET");

    assert!(now.ack_run(&fire, Some(0), "").await.expect("ack"));
    let hash = run_hash(&server, &triggered);
    assert_eq!(
        (
            hash.get("state").map(String::as_str),
            hash.get("reason").map(String::as_str)
        ),
        (Some("dead"), Some("corrupt"))
    );
    let dead: Option<i64> = server
        .connection()
        .zscore(keys().dead(), &triggered)
        .expect("ZSCORE");
    assert!(dead.is_some(), "in the dead letters");
    let unread: usize = server
        .connection()
        .llen(format!("{}ready:default:urgent", keys().prefix()))
        .expect("LLEN");
    assert_eq!(unread, 0, "pushed to a list no claim reads");
    assert!(waiting(&server, "tick").is_empty());
}

/// The reapers' look at every published job's slots, at each tick, costs one command per job
/// with no run waiting for a slot (the count of its waiting runs, which checks that list's type
/// too), where a type check of each of its two keys and the count were three: it is paid per
/// tick over every job, whatever the jobs run.
#[tokio::test]
async fn freeing_expired_slots_costs_one_command_per_job_with_no_run_waiting() {
    const JOBS: u64 = 30;
    let toml: String = (0..JOBS)
        .map(|job| format!("[jobs.lim{job}]\ncommand = \"true\"\noverlap = \"forbid\"\n"))
        .collect();
    let (server, store, _token) = setup(&toml).await;
    server.reset_command_calls();
    assert_eq!(store.free_expired_slots().await.expect("free"), 0);
    let calls = server.command_calls();
    let count = |command: &str| calls.get(command).copied().unwrap_or(0);
    assert_eq!(
        [
            ("llen", count("llen")),
            ("type", count("type")),
            ("hkeys", count("hkeys")),
        ],
        [("llen", JOBS), ("type", 2), ("hkeys", 1)],
        "{calls:?}"
    );
}
