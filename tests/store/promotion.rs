//! Due runs made ready (`promote_due.lua`), and missed fires judged by their job's misfire policy.

use std::collections::HashMap;
use std::time::Duration;

use redcron::schedule::Priority;
use redis::Commands;

use crate::util::keys;
use crate::util::store::{THRESHOLD, events, plan, run_hash, setup};

/// A promotion of one fire of each of many jobs reads their definitions, planned fires and
/// latest fires with one command per hash, writes each fire's run with one `HSET` (its fields,
/// misfire bound and `ready` state together), and writes the jobs' entries back with one command
/// per hash: no command per job on top of one read and one write per fire.
#[tokio::test]
async fn a_promotion_costs_a_read_and_a_write_per_fire_and_a_few_per_call() {
    const JOBS: usize = 20;
    let toml: String = (0..JOBS)
        .map(|job| format!("[jobs.tick{job}]\nschedule = \"* * * * *\"\ncommand = \"true\"\n"))
        .collect();
    let (server, store, token) = setup(&toml).await;
    for job in 0..JOBS {
        plan(&store, &token, &format!("tick{job}"), &[60_000]).await;
    }
    server.reset_command_calls();
    let promoted = store
        .clone()
        .with_frozen_clock(60_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    let fires = JOBS as u64;
    assert_eq!(promoted.ready, fires);
    let calls = server.command_calls();
    let count = |command: &str| calls.get(command).copied().unwrap_or(0);
    assert_eq!(
        [
            ("hget", count("hget")),
            ("hmget", count("hmget")),
            ("hset", count("hset")),
            ("hdel", count("hdel")),
        ],
        [
            ("hget", 0),
            ("hmget", fires + 3),
            ("hset", fires + 1),
            ("hdel", 1),
        ],
        "{calls:?}"
    );
    let run = run_hash(&server, "tick0@60000");
    assert_eq!(
        (
            run.get("state").map(String::as_str),
            run.get("misfire").map(String::as_str)
        ),
        (Some("ready"), Some("run-once"))
    );
    let planned: Option<String> = server
        .connection()
        .hget(keys().planned(), "tick0")
        .expect("HGET");
    assert_eq!(planned, None, "the promoted fire left the index");
}

#[tokio::test]
async fn promote_moves_only_due_runs_and_creates_their_run_hashes() {
    let (server, store, token) = setup(
        "[jobs.report]\nschedule = \"* * * * *\"\ncommand = \"true\"\npriority = \"high\"\n\
             queue = \"reports\"\nretries = 2\n",
    )
    .await;
    plan(&store, &token, "report", &[60_000, 120_000, 180_000]).await;

    let promoted = store
        .clone()
        .with_frozen_clock(120_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!((promoted.ready, promoted.skipped()), (2, 0));
    assert_eq!(promoted.next_due_ms, Some(180_000));

    let mut redis = server.connection();
    let ready: Vec<String> = redis
        .lrange(keys().ready_fires("reports", Priority::High), 0, -1)
        .expect("LRANGE");
    assert_eq!(ready, ["report@60000", "report@120000"]);
    let planned: Option<String> = redis.hget(keys().planned(), "report").expect("HGET");
    assert_eq!(
        planned.as_deref(),
        Some("180000"),
        "promoted fires leave the index"
    );
    let woken: usize = redis.zcard(keys().wake("reports")).expect("ZCARD");
    assert_eq!(woken, 1);
    let run = run_hash(&server, "report@60000");
    for (field, value) in [
        ("job", "report"),
        ("fire_ms", "60000"),
        ("attempt", "0"),
        ("max_attempts", "3"),
        ("queue", "reports"),
        ("priority", "high"),
        ("state", "ready"),
        ("delivery", "at-least-once"),
        ("fingerprint", "report@60000"),
    ] {
        assert_eq!(
            run.get(field).map(String::as_str),
            Some(value),
            "{field}: {run:?}"
        );
    }
}

#[tokio::test]
async fn missed_fires_follow_the_jobs_misfire_policy() {
    let (server, store, token) = setup("[jobs.skip]\ncommand = \"true\"\nmisfire = \"skip\"\n\
             [jobs.once]\ncommand = \"true\"\nmisfire = \"run-once\"\n\
             [jobs.all]\ncommand = \"true\"\nmisfire = \"run-all\"\n\
             [jobs.deadline]\ncommand = \"true\"\nmisfire = \"run-all\"\nstarting_deadline = \"30s\"\n\
             [jobs.late]\ncommand = \"true\"\nmisfire = \"skip\"\n").await;
    let fires = [0, 30_000, 60_000, 90_000];
    for job in ["skip", "once", "all", "deadline"] {
        plan(&store, &token, job, &fires).await;
    }
    // Less late than the threshold: it simply runs late.
    plan(&store, &token, "late", &[150_000]).await;

    let promoted = store
        .clone()
        .with_frozen_clock(200_000)
        .promote_due(100, THRESHOLD, Duration::ZERO)
        .await
        .expect("promote");
    assert_eq!((promoted.ready, promoted.skipped()), (6, 11));
    let ready: Vec<String> = server
        .connection()
        .lrange(keys().ready_fires("default", Priority::Normal), 0, -1)
        .expect("LRANGE");
    let mut ready_sorted = ready.clone();
    ready_sorted.sort();
    assert_eq!(
        ready_sorted,
        [
            "all@0",
            "all@30000",
            "all@60000",
            "all@90000",
            "late@150000",
            "once@90000"
        ]
    );
    // run-all runs them oldest first.
    let all: Vec<&String> = ready.iter().filter(|id| id.starts_with("all@")).collect();
    assert_eq!(all, ["all@0", "all@30000", "all@60000", "all@90000"]);

    let reasons: HashMap<String, String> = events(&server)
        .into_iter()
        .filter(|(_, state, _)| state == "skipped")
        .map(|(run, _, reason)| (run, reason))
        .collect();
    for fire in fires {
        assert_eq!(
            reasons.get(&format!("skip@{fire}")).map(String::as_str),
            Some("missed")
        );
        assert_eq!(
            reasons.get(&format!("deadline@{fire}")).map(String::as_str),
            Some("deadline")
        );
    }
    for fire in [0, 30_000, 60_000] {
        assert_eq!(
            reasons.get(&format!("once@{fire}")).map(String::as_str),
            Some("missed")
        );
    }
    assert_eq!(
        run_hash(&server, "skip@0").get("state").map(String::as_str),
        Some("skipped")
    );
}

#[tokio::test]
async fn run_once_keeps_the_latest_missed_fire_across_promotion_calls() {
    let (server, store, token) =
        setup("[jobs.once]\ncommand = \"true\"\nmisfire = \"run-once\"\n").await;
    // The last fire is not missed yet: the latest missed one is 60,000.
    plan(&store, &token, "once", &[0, 30_000, 60_000, 180_000]).await;
    let at = store.clone().with_frozen_clock(200_000);
    for _ in 0..3 {
        at.promote_due(1, THRESHOLD, Duration::ZERO)
            .await
            .expect("promote");
    }
    let ready: Vec<String> = server
        .connection()
        .lrange(keys().ready_fires("default", Priority::Normal), 0, -1)
        .expect("LRANGE");
    assert_eq!(ready, ["once@60000"]);
    let planned: Option<String> = server
        .connection()
        .hget(keys().planned(), "once")
        .expect("HGET");
    assert_eq!(planned.as_deref(), Some("180000"));
}
