//! Steering runs from the command line: trigger, enqueue, pause, resume, runs show, dead
//! letters, against a real Redis (and real replicas where something must run).

use std::path::Path;
use std::time::Duration;

use redcron::schedule::Priority;
use redcron::store::{Claim, FailReason, Failure, Store};
use redis::Commands;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::store::{PUBLISHED_JOBS, published};
use crate::util::wait_until;
use crate::util::{cli, free_port, http_get, one_document, redcron_in, sample};

/// Claims the next ready run as a worker would and records `failure` for it; returns its id.
async fn claim_and_fail(store: &Store, failure: &Failure) -> String {
    let claim = store
        .claim_run(
            "replica/0",
            &["default".to_owned()],
            Duration::from_secs(30),
            10,
        )
        .await
        .expect("claim");
    let Claim::Run { run, .. } = claim else {
        panic!("a run is ready: {claim:?}");
    };
    store
        .fail_run(&run.id, Some("replica/0"), failure, 0.5)
        .await
        .expect("fail");
    run.id
}

/// The run id a trigger or enqueue printed: `<id> due <time>`.
fn run_id(out: &str) -> String {
    out.split_whitespace().next().expect("a run id").to_owned()
}

#[test]
fn trigger_runs_a_declared_job_now_with_its_payload_on_stdin() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("schedules")).expect("mkdir");
    std::fs::write(
        dir.path().join("schedules/jobs.toml"),
        PUBLISHED_JOBS
            .replace("ledger", &dir.path().join("ledger").display().to_string())
            .replace("ticks", &dir.path().join("ticks").display().to_string()),
    )
    .expect("write");
    let replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &dir.path().join("schedules"),
        dir.path(),
        &[],
    );
    assert!(wait_until(Duration::from_secs(10), || {
        server
            .connection()
            .hexists(keys().defs(), "greet")
            .unwrap_or(false)
    }));

    let payload = r#"{"name": "Ada; rm -rf $HOME"}"#;
    let out = cli(
        &server,
        dir.path(),
        &["trigger", "greet", "--payload", payload],
    )
    .success();
    let id = run_id(&out);
    assert!(out.contains(" due "), "{out}");
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(dir.path().join("ledger")).is_ok_and(|text| text == payload)
        }),
        "the payload never reached the command:\n{}",
        replica.log()
    );
    let shown = cli(&server, dir.path(), &["runs", "show", &id, "--json"]).success();
    let fields: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(fields["state"], "succeeded");
    assert_eq!(fields["kind"], "adhoc");
    assert_eq!(fields["job"], "greet");
    assert_eq!(fields["attempt"], 1, "{fields}");
    assert!(fields["finished_ms"].is_i64(), "{fields}");

    // A standard output that cannot be written fails the command, but not silently about the
    // run it did create: the error gives its id.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let failed = std::process::Command::new(env!("CARGO_BIN_EXE_redcron"))
        .args([
            "trigger",
            "greet",
            "--redis",
            &server.url(),
            "--namespace",
            "test",
        ])
        .current_dir(dir.path())
        .env_remove("REDIS_URL")
        .stdin(std::process::Stdio::null())
        .stdout(full)
        .output()
        .expect("the redcron binary starts");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(2), "{stderr}");
    let created = stderr
        .strip_prefix("redcron: run ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id in {stderr:?}"));
    assert!(
        stderr.contains("was created, but writing its id: No space left on device"),
        "{stderr}"
    );
    let shown = cli(&server, dir.path(), &["runs", "show", created, "--json"]).success();
    assert_eq!(one_document(&shown)["job"], "greet");
}

#[tokio::test]
async fn bad_requests_are_refused_with_a_clear_message_and_exit_code_2() {
    let (server, dir, _store) = published().await;
    let big = dir.path().join("big.json");
    std::fs::write(&big, format!("\"{}\"", "x".repeat(1024 * 1024))).expect("write");
    let big_arg = format!("@{}", big.display());
    let cases: [(&[&str], &str); 24] = [
        (&["trigger", "nope"], "unknown job \"nope\""),
        (
            &["trigger", "greet", "--payload", "{bad"],
            "the payload is not valid JSON",
        ),
        (
            &["trigger", "greet", "--payload", &big_arg],
            "is more than 1 MiB (1048576 bytes), the most a run may carry",
        ),
        (
            &["enqueue", "greet", "--in", "soon"],
            "invalid value 'soon'",
        ),
        (
            &["enqueue", "greet"],
            "required arguments were not provided",
        ),
        (&["pause", "nope"], "unknown job \"nope\""),
        (&["resume", "nope"], "unknown job \"nope\""),
        (&["history", "nope"], "unknown job \"nope\""),
        (
            &["dead", "retry", "--all", "--job", "nope"],
            "unknown job \"nope\": no replica has declared it",
        ),
        (&["runs", "show", "nope"], "unknown run \"nope\""),
        (
            &["enqueue", "greet", "--at", "2020-01-01T00:00:00Z"],
            "--at 2020-01-01T00:00:00+00:00 is in the past (Redis's clock reads ",
        ),
        (
            &["enqueue", "greet", "--allow-past"],
            "the following required arguments were not provided",
        ),
        (
            &["run", "--workers", "0"],
            "\"0\" is not a number of workers from 1 to 4096",
        ),
        (
            &["run", "--run-lease", "0s"],
            "\"0s\" is shorter than the shortest lease, 1s",
        ),
        (
            &["run", "--leader-ttl", "1ms"],
            "\"1ms\" is shorter than the shortest lease, 1s",
        ),
        (
            &["run", "--plan-ahead", "5s"],
            "--plan-ahead 5s is not longer than --leader-ttl 5s",
        ),
        (&["run", "--queues", "ops,Bad"], "\"Bad\" does not match"),
        (
            &["run", "--replica-id", "a b"],
            "\"a b\" is not a replica id: 1 to 64 letters, digits and . _ - @",
        ),
        (
            &["run", "--label", "host=db1"],
            "\"host\" is a label every replica carries on its own",
        ),
        (&["run", "--label", "role"], "\"role\" is not key=value"),
        (
            &["bench", "--concurrency", "5000"],
            "\"5000\" is not a number of workers from 1 to 4096",
        ),
        // Uniqueness that would hold nothing is refused, not silently dropped.
        (
            &["enqueue", "greet", "--in", "1h", "--unique-for", "1h"],
            "<--unique|--unique-key <KEY>>",
        ),
        (
            &[
                "enqueue",
                "greet",
                "--in",
                "1h",
                "--unique",
                "--unique-for",
                "0s",
            ],
            "uniqueness must hold for some time",
        ),
        (
            &["enqueue", "greet", "--in", "1h", "--unique-key", ""],
            "a value is required for '--unique-key <KEY>'",
        ),
    ];
    for (args, expected) in cases {
        let errors = cli(&server, dir.path(), args).failure(2);
        assert!(errors.contains(expected), "{args:?}: {errors}");
    }
    // A declared job with nothing to show is not a mistake.
    cli(&server, dir.path(), &["history", "greet"]).success();
    let nothing = cli(
        &server,
        dir.path(),
        &["dead", "retry", "--all", "--job", "greet"],
    )
    .success();
    assert_eq!(nothing, "no dead run to retry\n");
    let unreachable = redcron_in(
        dir.path(),
        &["trigger", "greet", "--redis", "redis://127.0.0.1:1/"],
        "",
    )
    .failure(2);
    // A port that takes connections but never answers, as a hung server or a black hole does:
    // the command gives up within the connection timeout (2 s), not after retrying.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a silent port");
    let silent_url = format!("redis://{}/", silent.local_addr().expect("its address"));
    let started = std::time::Instant::now();
    let hung = redcron_in(dir.path(), &["status", "--redis", &silent_url], "").failure(2);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "gave up after {:?}: {hung}",
        started.elapsed()
    );
    assert_eq!(hung.lines().count(), 1, "{hung}");
    // The whole line, so that a stray space or a broken sentence shows.
    assert_eq!(
        unreachable,
        "redcron: cannot reach Redis at redis://127.0.0.1:1/: connecting to Redis: Redis refused the \
         connection; check the URL and that Redis is up\n"
    );
    let with_password = redcron_in(
        dir.path(),
        &["status", "--redis", "redis://ops:s3cret@127.0.0.1:1/"],
        "",
    )
    .failure(2);
    assert!(
        with_password.contains("redis://ops:***@127.0.0.1:1/") && !with_password.contains("s3cret"),
        "{with_password}"
    );
    // Not a URL at all: said so, with the forms that are.
    let not_a_url = redcron_in(dir.path(), &["status", "--redis", "127.0.0.1:6379"], "").failure(2);
    assert!(
        not_a_url.starts_with("redcron: 127.0.0.1:6379 is not a Redis URL (")
            && not_a_url.contains("expected redis://[user:password@]host[:port][/db]"),
        "{not_a_url}"
    );
    // No URL: the embedded Redis of a `redcron run` here was the one looked for.
    let embedded = redcron_in(dir.path(), &["status"], "").failure(2);
    assert!(
        embedded.ends_with(
            "no Redis URL was given (--redis, REDIS_URL or `redis` in a configuration file), \
             and no `redcron run` in this --data-dir has started its embedded Redis\n"
        ),
        "{embedded}"
    );
}

#[tokio::test]
async fn enqueue_schedules_later_and_uniqueness_refuses_a_second_run() {
    let (server, dir, _store) = published().await;
    let enqueue_unique = |delay: &str, payload: &str| {
        cli(
            &server,
            dir.path(),
            &[
                "enqueue",
                "greet",
                "--in",
                delay,
                "--unique",
                "--payload",
                payload,
            ],
        )
    };
    let before = chrono::Utc::now().timestamp_millis();
    let out = enqueue_unique("1h", r#"{"b": 2, "a": 1}"#).success();
    let first = run_id(&out);
    let fields: serde_json::Value = serde_json::from_str(
        &cli(&server, dir.path(), &["runs", "show", &first, "--json"]).success(),
    )
    .expect("JSON");
    assert_eq!(fields["state"], "scheduled");
    let due = fields["due_ms"].as_i64().expect("due_ms, a number");
    assert!(
        (before + 3_600_000..before + 3_660_000).contains(&due),
        "{due}"
    );

    // The same payload, keys in another order: the same fingerprint.
    let refused = enqueue_unique("0s", r#"{"a":1,"b":2}"#).failure(2);
    assert!(
        refused.contains(&format!("refused: run {first}")),
        "{refused}"
    );
    enqueue_unique("0s", r#"{"a":2}"#).success();

    // A month ahead: within the year a run may be enqueued ahead.
    let at = (chrono::Utc::now() + chrono::Duration::days(30))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let at = at.as_str();
    cli(
        &server,
        dir.path(),
        &["enqueue", "greet", "--at", at, "--unique-key", "k1"],
    )
    .success();
    let refused = cli(
        &server,
        dir.path(),
        &["enqueue", "greet", "--at", at, "--unique-key", "k1"],
    )
    .failure(2);
    assert!(refused.contains("refused"), "{refused}");
    // A unique run without a payload has none, as any run without one: not an empty text that
    // would make it dead as a bad payload when claimed.
    let keyed = run_id(
        &cli(
            &server,
            dir.path(),
            &["enqueue", "greet", "--at", at, "--unique-key", "k2"],
        )
        .success(),
    );
    let shown =
        one_document(&cli(&server, dir.path(), &["runs", "show", &keyed, "--json"]).success());
    assert_eq!(shown["payload"], serde_json::Value::Null, "{shown}");
    // Runs due now go straight to their ready list; later ones wait in the ad-hoc runs' due set.
    let mut redis = server.connection();
    let due: usize = redis.zcard(keys().due_runs()).expect("ZCARD");
    assert_eq!(due, 3);
    let ready: usize = redis
        .llen(keys().ready("default", Priority::Normal))
        .expect("LLEN");
    assert_eq!(ready, 1);
}

#[test]
fn a_paused_job_records_skipped_fires_and_runs_none_until_resumed() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("schedules")).expect("mkdir");
    let ticks = dir.path().join("ticks");
    std::fs::write(
        dir.path().join("schedules/jobs.toml"),
        PUBLISHED_JOBS.replace("ticks", &ticks.display().to_string()),
    )
    .expect("write");
    let _replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &dir.path().join("schedules"),
        dir.path(),
        &[],
    );
    let count = || std::fs::read_to_string(&ticks).map_or(0, |text| text.lines().count());
    assert!(wait_until(Duration::from_secs(10), || count() >= 1));

    let out = cli(&server, dir.path(), &["pause", "tick"]).success();
    assert!(out.contains("job \"tick\" paused"), "{out}");
    let skipped_as_paused = || {
        let events: redis::streams::StreamRangeReply = server
            .connection()
            .xrange_all(keys().events())
            .expect("XRANGE");
        events
            .ids
            .iter()
            .filter(|entry| entry.get::<String>("reason").as_deref() == Some("paused"))
            .count()
    };
    // Counted once a fire was skipped as paused: one claimed before the pause may still run.
    assert!(wait_until(Duration::from_secs(10), || skipped_as_paused() >= 1));
    let paused_at = count();
    assert!(
        wait_until(Duration::from_secs(10), || skipped_as_paused() >= 3),
        "skipped fires are recorded: {}",
        skipped_as_paused()
    );
    assert_eq!(count(), paused_at, "a paused job ran");
    let trigger = cli(&server, dir.path(), &["trigger", "tick"]);
    assert!(
        trigger.stderr.contains("job \"tick\" is paused"),
        "{}",
        trigger.stderr
    );
    trigger.success();

    assert!(
        cli(&server, dir.path(), &["resume", "tick"])
            .success()
            .contains("resumed")
    );
    assert!(wait_until(Duration::from_secs(5), || count() > paused_at));
}

#[tokio::test]
async fn dead_runs_can_be_listed_shown_retried_and_purged() {
    let (server, dir, store) = published().await;
    let mut dead = Vec::new();
    for _ in 0..3 {
        let out = cli(
            &server,
            dir.path(),
            &["trigger", "greet", "--payload", "{}"],
        )
        .success();
        dead.push(run_id(&out));
    }
    let later = store
        .clone()
        .with_frozen_clock(chrono::Utc::now().timestamp_millis() + 60_000);
    later
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    let failure = Failure {
        reason: FailReason::Permanent,
        message: "exit status 2".to_owned(),
        exit_code: Some(2),
        output: "no such user".to_owned(),
    };
    for _ in 0..3 {
        claim_and_fail(&later, &failure).await;
    }

    let listed = cli(&server, dir.path(), &["dead", "list"]).success();
    assert!(listed.starts_with("RUN"), "{listed}");
    for id in &dead {
        assert!(listed.contains(id.as_str()), "{listed}");
    }
    assert!(listed.contains("exit status 2"), "{listed}");
    let json = one_document(&cli(&server, dir.path(), &["dead", "list", "--json"]).success());
    let ids: Vec<&str> = json["runs"]
        .as_array()
        .expect("a runs array")
        .iter()
        .filter_map(|run| run["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 3, "{json}");
    assert_eq!(json["runs"][0]["exit_code"], 2, "{json}");
    for id in &dead {
        assert!(ids.contains(&id.as_str()), "{json}");
    }
    let shown = cli(&server, dir.path(), &["dead", "show", &dead[0]]).success();
    assert!(
        shown.contains("output") && shown.contains("no such user"),
        "{shown}"
    );

    // While the job is paused, a re-driven run would only be skipped: every run stays dead.
    cli(&server, dir.path(), &["pause", "greet"]).success();
    let refused = cli(&server, dir.path(), &["dead", "retry", &dead[0]]).failure(2);
    assert!(
        refused.contains(&format!(
            "run {} stays dead: job \"greet\" is paused",
            dead[0]
        )),
        "{refused}"
    );
    let all = cli(
        &server,
        dir.path(),
        &["dead", "retry", "--all", "--job", "greet"],
    );
    assert_eq!(
        (all.code, all.stdout.as_str()),
        (Some(0), ""),
        "{}",
        all.stderr
    );
    assert_eq!(
        all.stderr
            .matches("stays dead: job \"greet\" is paused")
            .count(),
        3,
        "{}",
        all.stderr
    );
    let json = one_document(&cli(&server, dir.path(), &["dead", "list", "--json"]).success());
    assert_eq!(json["runs"].as_array().map(Vec::len), Some(3), "{json}");
    cli(&server, dir.path(), &["resume", "greet"]).success();

    // Nor while its job is unknown to the namespace: re-driven, it would wait for a declarer
    // that is not coming, and die again.
    let definition: String = server
        .connection()
        .hget(keys().defs(), "greet")
        .expect("HGET");
    let () = server
        .connection()
        .hdel(keys().defs(), "greet")
        .expect("HDEL");
    let refused = cli(&server, dir.path(), &["dead", "retry", &dead[0]]).failure(2);
    assert!(
        refused.contains(&format!(
            "run {} stays dead: job \"greet\" is unknown to the namespace",
            dead[0]
        )),
        "{refused}"
    );
    let all = cli(&server, dir.path(), &["dead", "retry", "--all"]);
    assert_eq!(
        (
            all.code,
            all.stderr.matches("is unknown to the namespace").count()
        ),
        (Some(0), 3),
        "{}",
        all.stderr
    );
    let () = server
        .connection()
        .hset(keys().defs(), "greet", definition)
        .expect("HSET");

    let retried = cli(&server, dir.path(), &["dead", "retry", &dead[0]]).success();
    assert_eq!(retried.trim(), format!("{} due again", dead[0]));
    let fields = store.run_fields(&dead[0]).await.expect("run");
    assert_eq!(fields.get("state").map(String::as_str), Some("scheduled"));
    assert_eq!(fields.get("attempt").map(String::as_str), Some("0"));
    let errors = cli(&server, dir.path(), &["dead", "retry", &dead[0]]).failure(2);
    assert!(errors.contains("no dead run"), "{errors}");

    let all = cli(
        &server,
        dir.path(),
        &["dead", "retry", "--all", "--job", "greet"],
    )
    .success();
    assert_eq!(all.lines().count(), 2, "{all}");
    let json = cli(&server, dir.path(), &["dead", "list", "--json"]).success();
    assert_eq!(json, "{\"runs\":[]}\n");

    // Fail one again, then purge it.
    later
        .promote_due(100, Duration::from_secs(60), Duration::ZERO)
        .await
        .expect("promote");
    let run_id = claim_and_fail(&later, &failure).await;
    let kept = cli(
        &server,
        dir.path(),
        &["dead", "purge", "--older-than", "1h"],
    )
    .success();
    assert_eq!(kept.trim(), "0 dead runs deleted");
    let purged = cli(&server, dir.path(), &["dead", "purge"]).success();
    assert_eq!(purged.trim(), "1 dead run deleted");
    assert!(store.run_fields(&run_id).await.expect("run").is_empty());
}

#[test]
fn status_jobs_and_history_show_what_the_replicas_do() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let jobs = |tick: &str| {
        format!(
            "[jobs.tick]\nschedule = \"{tick}\"\ncommand = \"true\"\n\
             [jobs.flaky]\nschedule = \"* * * * * *\"\ncommand = \"echo oops; exit 3\"\n"
        )
    };
    for (name, tick) in [("a", "* * * * * *"), ("b", "*/2 * * * * *")] {
        std::fs::create_dir(dir.path().join(name)).expect("mkdir");
        std::fs::write(dir.path().join(name).join("jobs.toml"), jobs(tick)).expect("write");
    }
    let mut first =
        ReplicaProcess::start("r1", &server.url(), &dir.path().join("a"), dir.path(), &[]);
    assert!(wait_until(Duration::from_secs(10), || {
        server.connection().exists(keys().leader()).unwrap_or(false)
    }));
    let mut second =
        ReplicaProcess::start("r2", &server.url(), &dir.path().join("b"), dir.path(), &[]);
    assert!(
        wait_until(Duration::from_secs(10), || {
            let out = cli(
                &server,
                dir.path(),
                &["history", "flaky", "--failed", "--json"],
            );
            out.code == Some(0)
                && one_document(&out.stdout)["runs"]
                    .as_array()
                    .is_some_and(|runs| runs.len() >= 2)
        }),
        "{}",
        first.log()
    );

    let status = cli(&server, dir.path(), &["status"]).success();
    assert!(status.contains("leader: r1 (epoch 1)"), "{status}");
    for line in ["r1 ", "r2 "] {
        let row = status
            .lines()
            .find(|row| row.starts_with(line))
            .unwrap_or_else(|| panic!("{status}"));
        assert!(row.ends_with("alive"), "{row}");
        assert!(row.contains("/4"), "busy/max workers: {row}");
    }
    let flaky = status
        .lines()
        .find(|row| row.starts_with("flaky"))
        .expect("a flaky row");
    assert!(flaky.contains("dead"), "{flaky}");
    let parsed: serde_json::Value =
        serde_json::from_str(&cli(&server, dir.path(), &["status", "--json"]).success())
            .expect("JSON");
    assert_eq!(parsed["leader"]["id"], "r1");
    assert_eq!(parsed["replicas"][0]["id"], "r1", "{parsed}");
    assert_eq!(parsed["replicas"][0]["info"]["max_workers"], 4, "{parsed}");
    assert!(
        parsed["dead"].as_u64().is_some_and(|dead| dead >= 1),
        "{parsed}"
    );

    let listed = cli(&server, dir.path(), &["jobs"]).success();
    let tick = listed
        .lines()
        .find(|row| row.starts_with("tick"))
        .expect("a tick row");
    assert!(tick.contains("DRIFT: differs on r2"), "{listed}");
    let flaky = listed
        .lines()
        .find(|row| row.starts_with("flaky"))
        .expect("a flaky row");
    assert!(!flaky.contains("DRIFT"), "{listed}");

    let failures = cli(
        &server,
        dir.path(),
        &["history", "flaky", "--failed", "-n", "2", "--json"],
    )
    .success();
    let failures = one_document(&failures);
    let runs = failures["runs"].as_array().expect("a runs array");
    assert_eq!(runs.len(), 2, "{failures}");
    for run in runs {
        assert_eq!(run["exit_code"], 3);
        assert_eq!(run["attempt"], 1);
        assert!(run["duration_ms"].is_u64(), "{run}");
        assert_eq!(run["output"], "oops\n");
        assert_eq!(run["outcome"], "dead");
    }

    // A replica killed is lost; one stopped cleanly says so; with neither beating, status says
    // that nothing runs.
    second.kill9();
    assert!(
        wait_until(Duration::from_secs(15), || {
            cli(&server, dir.path(), &["status"])
                .stdout
                .lines()
                .any(|row| row.starts_with("r2 ") && row.ends_with("lost"))
        }),
        "a silent replica is shown lost"
    );
    assert_eq!(first.terminate(Duration::from_secs(10)), Some(0));
    let status = cli(&server, dir.path(), &["status"]).success();
    let row = |id: &str| {
        status
            .lines()
            .find(|row| row.starts_with(id))
            .unwrap_or_else(|| panic!("no row of {id}: {status}"))
    };
    assert!(row("r1 ").ends_with("stopped"), "{status}");
    assert!(row("r2 ").ends_with("lost"), "{status}");
    assert!(
        status.contains("no live replica: no fire is planned or run until one starts"),
        "{status}"
    );
    let json = one_document(&cli(&server, dir.path(), &["status", "--json"]).success());
    let states: Vec<(&str, &str)> = json["replicas"]
        .as_array()
        .expect("replicas")
        .iter()
        .map(|replica| {
            (
                replica["id"].as_str().unwrap_or_default(),
                replica["state"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(states, [("r1", "stopped"), ("r2", "lost")]);

    // Back again, it beats and is alive.
    let again = ReplicaProcess::start("r1", &server.url(), &dir.path().join("a"), dir.path(), &[]);
    assert!(
        wait_until(Duration::from_secs(10), || {
            cli(&server, dir.path(), &["status"])
                .stdout
                .lines()
                .any(|row| row.starts_with("r1 ") && row.ends_with("alive"))
        }),
        "{}",
        again.log()
    );
}

#[test]
fn metrics_count_runs_by_the_right_amounts_and_health_endpoints_answer() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("schedules")).expect("mkdir");
    // On-demand jobs only: the counts depend on the triggers below, not on the clock.
    std::fs::write(
        dir.path().join("schedules/jobs.toml"),
        "[jobs.ok]\ncommand = \"true\"\noverlap = \"allow\"\n\
         [jobs.bad]\ncommand = \"exit 3\"\nretries = 1\nbackoff = \"1s\"\n",
    )
    .expect("write");
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &dir.path().join("schedules"),
        dir.path(),
        &["--metrics-addr", &address],
    );
    assert!(wait_until(Duration::from_secs(10), || {
        server
            .connection()
            .hexists(keys().defs(), "bad")
            .unwrap_or(false)
            && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    }));
    for _ in 0..3 {
        cli(&server, dir.path(), &["trigger", "ok"]).success();
    }
    cli(&server, dir.path(), &["trigger", "bad"]).success();
    assert!(
        wait_until(Duration::from_secs(15), || {
            let metrics = http_get(port, "/metrics").1;
            sample(
                &metrics,
                "redcron_runs_total{outcome=\"succeeded\",redcron_job=\"ok\",redcron_replica=\"r1\",namespace=\"test\"}",
            ) == 3.0
                && sample(
                    &metrics,
                    "redcron_runs_total{outcome=\"dead\",redcron_job=\"bad\",redcron_replica=\"r1\",namespace=\"test\"}",
                ) == 1.0
                && sample(&metrics, "redcron_dead_runs{namespace=\"test\"}") == 1.0
                && sample(&metrics, "redcron_workers_busy{namespace=\"test\"}") == 0.0
        }),
        "{}\n{}",
        http_get(port, "/metrics").1,
        replica.log()
    );

    let (status, metrics) = http_get(port, "/metrics");
    assert_eq!(status, 200);
    for (series, expected) in [
        (
            "redcron_runs_total{outcome=\"succeeded\",redcron_job=\"ok\",redcron_replica=\"r1\",namespace=\"test\"}",
            3.0,
        ),
        (
            "redcron_runs_total{outcome=\"retrying\",redcron_job=\"bad\",redcron_replica=\"r1\",namespace=\"test\"}",
            1.0,
        ),
        (
            "redcron_runs_total{outcome=\"dead\",redcron_job=\"bad\",redcron_replica=\"r1\",namespace=\"test\"}",
            1.0,
        ),
        (
            "redcron_retries_total{redcron_job=\"bad\",redcron_replica=\"r1\",namespace=\"test\"}",
            1.0,
        ),
        (
            "redcron_run_duration_seconds_count{redcron_job=\"ok\",redcron_replica=\"r1\",namespace=\"test\"}",
            3.0,
        ),
        (
            "redcron_run_duration_seconds_count{redcron_job=\"bad\",redcron_replica=\"r1\",namespace=\"test\"}",
            2.0,
        ),
        ("redcron_dead_runs{namespace=\"test\"}", 1.0),
        ("redcron_active_runs{namespace=\"test\"}", 0.0),
        ("redcron_leader{namespace=\"test\"}", 1.0),
        ("redcron_leader_changes_total{namespace=\"test\"}", 1.0),
        ("redcron_fenced_writes_total{namespace=\"test\"}", 0.0),
        ("redcron_reaped_runs_total{namespace=\"test\"}", 0.0),
        ("redcron_workers_max{namespace=\"test\"}", 4.0),
        ("redcron_workers_busy{namespace=\"test\"}", 0.0),
    ] {
        assert_eq!(sample(&metrics, series), expected, "{series}\n{metrics}");
    }
    // Ad-hoc runs have no fire time: no fire lag is observed.
    assert!(
        !metrics.contains("redcron_fire_lag_seconds_count{redcron_job=\"ok\",redcron_replica=\"r1\",namespace=\"test\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "redcron_ready_runs{priority=\"high\",queue=\"default\",namespace=\"test\"} 0"
        ),
        "{metrics}"
    );

    // A paused job's fire is counted as skipped.
    cli(&server, dir.path(), &["pause", "ok"]).success();
    cli(&server, dir.path(), &["trigger", "ok"]).success();
    assert!(wait_until(Duration::from_secs(10), || {
        sample(
            &http_get(port, "/metrics").1,
            "redcron_skipped_fires_total{reason=\"paused\",redcron_job=\"ok\",redcron_replica=\"r1\",namespace=\"test\"}",
        ) == 1.0
    }));

    assert_eq!(http_get(port, "/healthz"), (200, "ok\n".to_owned()));
    assert_eq!(http_get(port, "/readyz"), (200, "ready\n".to_owned()));
    assert_eq!(http_get(port, "/nope").0, 404);
}

/// `redcron args...` against `server`, in `dir`, whose reader is gone before anything is
/// written, as in `redcron ... | head -0`.
fn without_reader(server: &RedisServer, dir: &Path, args: &[&str]) -> std::process::Output {
    let url = server.url();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_redcron"))
        .args(args)
        .args(["--redis", &url, "--namespace", "test"])
        .current_dir(dir)
        .env_remove("REDIS_URL")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("redcron starts");
    drop(child.stdout.take());
    child.wait_with_output().expect("redcron exits")
}

#[test]
fn a_reader_that_stops_reading_is_no_error() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let output = without_reader(&server, dir.path(), &["status"]);
    assert!(
        output.status.success(),
        "{:?}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stderr), "");
}

#[tokio::test]
async fn a_reader_gone_before_a_new_runs_id_is_written_is_an_error_that_gives_the_id() {
    let (server, dir, _store) = published().await;
    // The run is created, its id cannot be written.
    let output = without_reader(&server, dir.path(), &["trigger", "greet"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("was created, but writing its id: Broken pipe"),
        "{stderr}"
    );
    // An endless payload is refused once it passes the limit, not read to its end.
    let endless = cli(
        &server,
        dir.path(),
        &["trigger", "greet", "--payload", "@/dev/zero"],
    )
    .failure(2);
    assert!(
        endless.contains("the payload in /dev/zero is more than 1 MiB (1048576 bytes)"),
        "{endless}"
    );
}

/// A local Redis that cannot start (here: a socket path longer than a unix socket allows) is
/// reported at once, with how it exited and where its log is, not after the start timeout.
#[tokio::test]
async fn an_embedded_redis_that_exits_at_start_is_reported_at_once_with_its_log() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data_dir = dir.path().join("d".repeat(120));
    let started = std::time::Instant::now();
    let error = redcron::store::embedded::EmbeddedRedis::start(&data_dir)
        .await
        .err()
        .expect("no redis-server binds a socket path that long");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "reported after {:?}",
        started.elapsed()
    );
    let message = error.to_string();
    assert!(
        message.starts_with("redis-server exited at start (exit status: 1); see ")
            && message.ends_with("redis.log"),
        "{message}"
    );
}

/// `--payload -` reads the payload from standard input, and `--allow-past` takes an `--at` in
/// the past as "now".
#[tokio::test]
async fn a_payload_comes_from_standard_input_and_a_past_time_is_taken_when_allowed() {
    let (server, dir, _store) = published().await;
    let url = server.url();
    let with_redis = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--redis", &url, "--namespace", "test"]);
        all.iter()
            .map(|arg| (*arg).to_owned())
            .collect::<Vec<String>>()
    };
    let args = with_redis(&["trigger", "greet", "--payload", "-"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = redcron_in(dir.path(), &args, "{\"to\": \"ops\"}\n").success();
    let run_id = out.split_whitespace().next().expect("a run id");
    let payload: Option<String> = server
        .connection()
        .hget(keys().run(run_id), "payload")
        .expect("HGET");
    assert_eq!(payload.as_deref(), Some("{\"to\": \"ops\"}\n"));

    let past = cli(
        &server,
        dir.path(),
        &[
            "enqueue",
            "greet",
            "--at",
            "2020-01-01T00:00:00Z",
            "--allow-past",
        ],
    )
    .success();
    assert!(past.contains(" due 2020-01-01T00:00:00+00:00"), "{past}");
}

/// The embedded Redis has no replica, so `--replicated-writes` there would refuse every write:
/// the replica refuses to start instead, before it starts Redis.
#[test]
fn replicated_writes_on_the_embedded_redis_are_refused_at_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("schedules")).expect("schedules dir");
    let data = dir.path().join("data");
    let error = redcron_in(
        dir.path(),
        &[
            "run",
            "--schedules",
            "schedules",
            "--data-dir",
            data.to_str().expect("a UTF-8 path"),
            "--replicated-writes",
            "1",
            "--metrics-addr",
            "none",
        ],
        "",
    )
    .failure(2);
    assert!(
        error.contains("--replicated-writes needs a Redis with replicas"),
        "{error}"
    );
    assert!(!data.exists(), "no embedded Redis was started");
}

#[tokio::test]
async fn a_redis_that_takes_no_command_is_said_to_give_no_answer_not_to_be_unreachable() {
    let (server, dir, store) = published().await;
    // Every command held: the connection's handshake gets no answer.
    server.stall(Duration::from_secs(4));
    let out = cli(&server, dir.path(), &["status"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("no answer from Redis at")
            && out.stderr.contains("not paused (CLIENT PAUSE)"),
        "{}",
        out.stderr
    );
    let mut admin = server.connection();
    let () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut admin)
        .expect("UNPAUSE");

    // Writes held: the trigger's script times out, and the message says what that leaves.
    let () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(15_000)
        .arg("WRITE")
        .query(&mut admin)
        .expect("PAUSE");
    let out = cli(&server, dir.path(), &["trigger", "greet"]);
    let () = redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut admin)
        .expect("UNPAUSE");
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("Redis did not answer within 10s")
            && out.stderr.contains("may or may not have been done"),
        "{}",
        out.stderr
    );
    drop(store);
}

#[tokio::test]
async fn a_request_refused_by_a_hold_says_nothing_was_written() {
    let (server, dir, _store) = published().await;
    cli(&server, dir.path(), &["hold", "--for", "1m"]).success();
    for args in [
        &["trigger", "greet"][..],
        &["workflow", "retry", "some-id"][..],
    ] {
        let refused = cli(&server, dir.path(), args).failure(2);
        assert!(
            refused.contains("the namespace is held (redcron hold): nothing was written"),
            "{args:?}: {refused}"
        );
    }
    cli(&server, dir.path(), &["release"]).success();
    cli(&server, dir.path(), &["trigger", "greet"]).success();
}
