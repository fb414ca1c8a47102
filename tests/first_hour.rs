//! What a sysadmin meets in the first hour, with real replicas: a run asked for by hand is
//! logged, told when it was asked for and warned about when nothing will run it; a replica
//! started in the wrong directory says which flag it needs; `jobs` shows what each job runs;
//! the fire lag counts fires, not their retries.

use std::time::Duration;

use redis::Commands;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{
    cli, free_port, http_get, keys, one_document, redcron_in, redcron_in_with_env, sample,
    wait_until,
};

/// A schedule directory holding `toml` in `jobs.toml`, under `dir`.
fn schedules(dir: &std::path::Path, toml: &str) -> std::path::PathBuf {
    let schedules = dir.join("schedules");
    std::fs::create_dir_all(&schedules).expect("mkdir");
    std::fs::write(schedules.join("jobs.toml"), toml).expect("write");
    schedules
}

/// Whether the leader has published `job` and the replica `id` declares it: a trigger is
/// accepted and the replica claims its run.
fn declared(server: &RedisServer, id: &str, job: &str) -> bool {
    let mut connection = server.connection();
    connection.hexists(keys().defs(), job).unwrap_or(false)
        && connection
            .hexists(keys().replica_jobs(id), job)
            .unwrap_or(false)
}

#[test]
fn a_triggered_run_of_a_cron_job_is_told_when_it_was_asked_for_and_logged_at_info() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let told = dir.path().join("fire-time");
    // Fires once a year, far from now: the only run is the triggered one.
    let schedules = schedules(
        dir.path(),
        &format!(
            "[jobs.report]\nschedule = \"0 3 1 1 *\"\n\
             command = \"printf %s \\\"$REDCRON_FIRE_TIME\\\" > {}\"\n",
            told.display()
        ),
    );
    let replica = ReplicaProcess::start("r1", &server.url(), &schedules, dir.path(), &[]);
    assert!(
        wait_until(Duration::from_secs(10), || declared(
            &server, "r1", "report"
        )),
        "{}",
        replica.log()
    );
    let triggered =
        one_document(&cli(&server, dir.path(), &["trigger", "report", "--json"]).success());
    let run_id = triggered["id"].as_str().expect("an id").to_owned();
    assert!(
        wait_until(Duration::from_secs(15), || {
            std::fs::read_to_string(&told).is_ok_and(|text| !text.is_empty())
        }),
        "the run did not write its fire time\n{}",
        replica.log()
    );
    let fire_time = std::fs::read_to_string(&told).expect("written");
    let fire_ms = chrono::DateTime::parse_from_rfc3339(&fire_time)
        .unwrap_or_else(|error| panic!("{fire_time:?} is not RFC 3339: {error}"))
        .timestamp_millis();
    let run =
        one_document(&cli(&server, dir.path(), &["runs", "show", &run_id, "--json"]).success());
    let created_ms = run["created_ms"].as_i64().expect("created_ms");
    // RFC 3339 to the second, as a fire time is given.
    assert_eq!(fire_ms, created_ms / 1000 * 1000, "{fire_time} {run}");

    assert!(
        wait_until(Duration::from_secs(10), || {
            replica.log().lines().any(|line| {
                line.contains("INFO") && line.contains("run succeeded") && line.contains(&run_id)
            })
        }),
        "{}",
        replica.log()
    );
    assert!(
        replica.log().lines().any(|line| line.contains("INFO")
            && line.contains("run started")
            && line.contains(&run_id)),
        "{}",
        replica.log()
    );
}

#[test]
fn a_trigger_that_no_live_replica_can_run_says_the_run_will_wait() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = schedules(dir.path(), "[jobs.sync]\ncommand = \"true\"\n");
    let mut replica = ReplicaProcess::start("r1", &server.url(), &schedules, dir.path(), &[]);
    assert!(
        wait_until(Duration::from_secs(10), || declared(&server, "r1", "sync")),
        "{}",
        replica.log()
    );
    let served = cli(&server, dir.path(), &["trigger", "sync", "--json"]);
    assert_eq!(served.code, Some(0), "{}", served.stderr);
    assert_eq!(
        one_document(&served.stdout)["declared_by"],
        serde_json::json!(["r1"])
    );
    assert!(
        !served.stderr.contains("no live replica"),
        "{}",
        served.stderr
    );

    // Stopped cleanly: its declarations are withdrawn at once; the leader's published
    // definition stays for the grace, so the trigger is accepted.
    assert_eq!(
        replica.terminate(Duration::from_secs(20)),
        Some(0),
        "{}",
        replica.log()
    );
    let waiting = cli(&server, dir.path(), &["trigger", "sync", "--json"]);
    assert_eq!(waiting.code, Some(0), "{}", waiting.stderr);
    assert_eq!(
        one_document(&waiting.stdout)["declared_by"],
        serde_json::json!([])
    );
    assert!(
        waiting
            .stderr
            .contains("no live replica declares job \"sync\": the run waits"),
        "{}",
        waiting.stderr
    );
    let text = cli(&server, dir.path(), &["trigger", "sync"]);
    assert_eq!(text.code, Some(0), "{}", text.stderr);
    assert!(
        text.stderr.contains("no live replica declares"),
        "{}",
        text.stderr
    );
}

#[test]
fn run_in_a_directory_without_schedules_names_the_flag_to_pass() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let error = redcron_in(dir.path(), &["run", "--redis", &server.url()], "").failure(2);
    assert!(
        error.contains("no schedule directory at schedules (the default")
            && error.contains("pass --schedules DIR"),
        "{error}"
    );
    let elsewhere = dir.path().join("nowhere");
    let error = redcron_in(
        dir.path(),
        &[
            "run",
            "--redis",
            &server.url(),
            "--schedules",
            elsewhere.to_str().expect("UTF-8"),
        ],
        "",
    )
    .failure(2);
    assert!(
        error.contains(&format!(
            "no schedule directory at {}:",
            elsewhere.display()
        )),
        "{error}"
    );
}

#[test]
fn a_mistaken_label_is_refused_naming_where_it_was_written() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = schedules(dir.path(), "");
    // No Redis there: a label let through would fail on the connection instead.
    let run = |labels: &[&str], env: &str| {
        let mut args = vec![
            "run",
            "--redis",
            "redis://127.0.0.1:1/",
            "--metrics-addr",
            "none",
            "--schedules",
            schedules.to_str().expect("UTF-8"),
        ];
        args.extend(labels);
        redcron_in_with_env(
            dir.path(),
            &args,
            "",
            &[("REDCRON_LABELS", std::ffi::OsStr::new(env))],
        )
        .failure(2)
    };
    let error = run(&[], "role=web,host=web1");
    assert!(
        error.starts_with(
            "redcron: REDCRON_LABELS (\"role=web,host=web1\"): \"host\" is a label every replica \
             carries on its own"
        ) && !error.contains("--label"),
        "{error}"
    );
    // Commas separate labels; a value with one is said to be two, not read as a wrong label.
    let error = run(&["--label", "note=a,b"], "");
    assert!(
        error.starts_with(
            "redcron: --label: \"b\" is not key=value (role=web, say), in \"note=a,b\": a comma \
             separates two labels"
        ),
        "{error}"
    );
    // A replica carries one value of a key, as a where names one.
    let error = run(&["--label", "role=web", "--label", "role=db"], "");
    assert!(
        error.starts_with(
            "redcron: --label: \"role=db\" gives \"role\" a second value after \"role=web\""
        ),
        "{error}"
    );
    let help = redcron_in(dir.path(), &["run", "--help"], "").success();
    assert!(
        help.contains("KEY=VALUE,KEY=VALUE gives two") && help.contains("REDCRON_LABELS"),
        "{help}"
    );
}

#[test]
fn jobs_shows_each_command_cut_to_the_terminal_and_whole_in_json() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let command = "find /var/log/nginx -name '*.gz' -mtime +14 -delete && systemctl reload nginx";
    let schedules = schedules(
        dir.path(),
        &format!("[jobs.logs]\nschedule = \"0 4 * * *\"\ncommand = \"{command}\"\n"),
    );
    let replica = ReplicaProcess::start("r1", &server.url(), &schedules, dir.path(), &[]);
    assert!(
        wait_until(Duration::from_secs(10), || declared(&server, "r1", "logs")),
        "{}",
        replica.log()
    );
    let url = server.url();
    let jobs = |columns: &str, json: bool| {
        let mut args = vec!["jobs", "--redis", &url, "--namespace", "test"];
        if json {
            args.push("--json");
        }
        redcron_in_with_env(dir.path(), &args, "", &[("COLUMNS", columns.as_ref())]).success()
    };
    let wide = jobs("400", false);
    assert!(
        wide.lines()
            .next()
            .is_some_and(|header| header.ends_with("COMMAND")),
        "{wide}"
    );
    assert!(wide.contains(command), "{wide}");
    let narrow = jobs("140", false);
    let row = narrow
        .lines()
        .find(|line| line.starts_with("logs"))
        .unwrap_or_else(|| panic!("{narrow}"));
    assert!(row.chars().count() == 140 && row.ends_with('…'), "{narrow}");
    assert!(row.contains("find /var/log"), "{narrow}");
    let listed = one_document(&jobs("100", true));
    assert_eq!(listed["jobs"][0]["command"], command, "{listed}");
}

#[test]
fn the_fire_lag_counts_each_fire_once_however_often_it_is_retried() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    // Each fire fails twice: its first attempt at its fire time, a retry a second later.
    let schedules = schedules(
        dir.path(),
        "[jobs.flaky]\nschedule = \"*/2 * * * * *\"\ncommand = \"exit 1\"\nretries = 1\n\
         backoff = \"1s\"\n",
    );
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let replica = ReplicaProcess::start(
        "r1",
        &server.url(),
        &schedules,
        dir.path(),
        &["--metrics-addr", &address],
    );
    let metrics = || http_get(port, "/metrics").1;
    let dead = "redcron_runs_total{outcome=\"dead\",redcron_job=\"flaky\",redcron_replica=\"r1\",namespace=\"test\"}";
    assert!(
        wait_until(Duration::from_secs(30), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
                && sample(&metrics(), dead) >= 3.0
        }),
        "{}\n{}",
        metrics(),
        replica.log()
    );
    // Paused, the job starts nothing more: once its last attempt has ended, the counts hold.
    cli(&server, dir.path(), &["pause", "flaky"]).success();
    assert!(
        wait_until(Duration::from_secs(15), || {
            let status = one_document(&cli(&server, dir.path(), &["status", "--json"]).success());
            status["active"] == 0
        }),
        "{}",
        replica.log()
    );
    let history = one_document(
        &cli(
            &server,
            dir.path(),
            &["history", "flaky", "-n", "1000", "--json"],
        )
        .success(),
    );
    let mut started: Vec<&str> = history["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .filter(|run| run["outcome"] == "retrying" || run["outcome"] == "dead")
        .filter_map(|run| run["id"].as_str())
        .collect();
    let attempts = started.len();
    started.sort_unstable();
    started.dedup();
    let exported = metrics();
    let lags = sample(
        &exported,
        "redcron_fire_lag_seconds_count{redcron_job=\"flaky\",redcron_replica=\"r1\",namespace=\"test\"}",
    );
    assert!(attempts > started.len(), "each fire was retried: {history}");
    assert_eq!(
        lags,
        started.len() as f64,
        "one lag per fire started, not per attempt ({attempts} attempts)\n{exported}"
    );
}
