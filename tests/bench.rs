//! `redcron bench`: the figures it prints, what Redis did per run by its own count, and the
//! archive it exports to with `--archive`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;

use redcron::schedule::Priority;
use redcron::store::Keys;
use redis::Commands;

use crate::util::archive::{ArchiveStore, archived, part_records};
use crate::util::redis_server::RedisServer;
use crate::util::s3::{BUCKET, S3Server};
use crate::util::{command_calls, redcron_in, redcron_in_with_env};

/// The figures a bench run prints before the ones of `--archive` and of Redis, in this order.
const RATES: [&str; 6] = [
    "peer",
    "enqueue_jobs_per_s",
    "process_jobs_per_s",
    "delayed_lateness_ms_p50",
    "delayed_lateness_ms_p99",
    "delayed_lateness_ms_max",
];

/// What Redis did per run, for `enqueue` and for `job`, in this order.
const REDIS_FIGURES: [&str; 5] = [
    "redis_calls_per",
    "redis_us_per",
    "redis_scripts_per",
    "redis_script_us_per",
    "redis_cpu_us_per",
];

/// The `name=value` lines of a bench run's output, in order, each value a finite number but
/// `peer`'s, and the `--commands` lines apart.
fn figures(out: &str) -> (Vec<(String, f64)>, Vec<&str>) {
    let mut figures = Vec::new();
    let mut commands = Vec::new();
    for line in out.lines() {
        if line.contains("_command=") {
            commands.push(line);
            continue;
        }
        let (name, value) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{line} is not name=value\n{out}"));
        if name == "peer" {
            assert_eq!(value, "redcron", "{out}");
            figures.push((name.to_owned(), 0.0));
            continue;
        }
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("{line} is not a number\n{out}"));
        assert!(value.is_finite() && value >= 0.0, "{line}\n{out}");
        figures.push((name.to_owned(), value));
    }
    (figures, commands)
}

/// The names the output must give, in order: the rates, the archive's with `--archive`, then
/// what Redis did for enqueueing and for processing.
fn expected_names(archive: bool) -> Vec<String> {
    let mut names: Vec<String> = RATES.iter().map(|name| (*name).to_owned()).collect();
    if archive {
        names.push("archive_records_per_s".to_owned());
    }
    for unit in ["enqueue", "job"] {
        names.extend(REDIS_FIGURES.iter().map(|name| format!("{name}_{unit}")));
    }
    names
}

#[test]
fn bench_prints_what_redis_did_per_run_and_leaves_nothing_behind() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let url = server.url();
    let other = Keys::new("other").prefix().to_owned() + "keep";
    let mut redis = server.connection();
    let () = redis.set(&other, "1").expect("SET");
    let calls_before = command_calls(&mut redis);
    let out = redcron_in(
        dir.path(),
        &["bench", "--redis", &url, "--jobs", "500", "--commands"],
        "",
    )
    .success();
    let calls_after = command_calls(&mut redis);

    let (figures, commands) = figures(&out);
    let names: Vec<&str> = figures.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, expected_names(false), "{out}");
    let figure: BTreeMap<&str, f64> = figures
        .iter()
        .map(|(name, value)| (name.as_str(), *value))
        .collect();
    for rate in ["enqueue_jobs_per_s", "process_jobs_per_s"] {
        assert!(figure[rate] > 0.0, "{out}");
    }
    // A processed run is claimed, started and recorded: a few commands in the scripts at the
    // least, and no command per run has ever cost a hundred.
    let per_job = figure["redis_calls_per_job"];
    assert!((3.0..100.0).contains(&per_job), "{out}");
    // Enqueueing a run writes it and puts it on its list; its scripts take a thousand at once.
    assert!(
        (1.0..100.0).contains(&figure["redis_calls_per_enqueue"]),
        "{out}"
    );
    assert!(figure["redis_scripts_per_enqueue"] < 0.1, "{out}");
    for unit in ["enqueue", "job"] {
        let calls = figure[format!("redis_calls_per_{unit}").as_str()];
        let scripts = figure[format!("redis_scripts_per_{unit}").as_str()];
        assert!(scripts > 0.0 && scripts < calls, "{out}");
        // Redis measures in whole microseconds: a run costs it some (tens on a quiet machine),
        // and never 10 ms, even with Redis descheduled in the middle of commands on a machine
        // busy with a whole test suite.
        let us = figure[format!("redis_us_per_{unit}").as_str()];
        assert!(us > 0.0 && us < 10_000.0, "{out}");
        // A script's time includes the commands it ran.
        let script_us = figure[format!("redis_script_us_per_{unit}").as_str()];
        assert!(script_us > 0.0, "{out}");
    }
    assert!(figure["redis_cpu_us_per_job"] > 0.0, "{out}");

    // Redis's own count over the whole bench (the delayed burst and the cleanup included)
    // holds at least what the bench says the two phases cost, the script calls apart.
    let outside_scripts = |calls: &BTreeMap<String, u64>| -> u64 {
        calls
            .iter()
            .filter(|(name, _)| !name.starts_with("eval") && name.as_str() != "info")
            .map(|(_, calls)| calls)
            .sum()
    };
    let counted = outside_scripts(&calls_after) - outside_scripts(&calls_before);
    let claimed = (figure["redis_calls_per_enqueue"] + per_job) * 500.0;
    assert!(
        claimed <= counted as f64 + 1.0,
        "the bench says {claimed} commands, Redis counted {counted} in all\n{out}"
    );

    // --commands: the commands of each phase, most called first, the script calls among them.
    for (phase, unit) in [("enqueue", "enqueue"), ("process", "job")] {
        let listed: Vec<(&str, f64)> = commands
            .iter()
            .filter_map(|line| line.strip_prefix(&format!("{phase}_command=")))
            .map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                assert_eq!(fields.len(), 3, "{line}");
                let calls = fields[1]
                    .strip_prefix(&format!("calls_per_{unit}="))
                    .and_then(|calls| calls.parse::<f64>().ok())
                    .unwrap_or_else(|| panic!("{line}"));
                assert!(fields[2].starts_with(&format!("us_per_{unit}=")), "{line}");
                (fields[0], calls)
            })
            .collect();
        assert!((1..=10).contains(&listed.len()), "{phase}: {out}");
        let names: BTreeSet<&str> = listed.iter().map(|(name, _)| *name).collect();
        assert_eq!(names.len(), listed.len(), "each command once: {out}");
        assert!(
            listed.windows(2).all(|pair| pair[0].1 >= pair[1].1),
            "most called first: {out}"
        );
        // Every run costs a command of some kind at least once.
        assert!(listed[0].1 >= 1.0, "{phase}: {out}");
        let listed_outside: f64 = listed
            .iter()
            .filter(|(name, _)| !name.starts_with("eval"))
            .map(|(_, calls)| calls)
            .sum();
        let total = figure[format!("redis_calls_per_{unit}").as_str()];
        assert!(listed_outside <= total + 0.01, "{phase}: {out}");
    }

    let bench_keys: Vec<String> = redis
        .keys(format!("{}*", Keys::new("bench").prefix()))
        .expect("KEYS");
    assert!(
        bench_keys.is_empty(),
        "the bench namespace is deleted: {bench_keys:?}"
    );
    let kept: Option<String> = redis.get(&other).expect("GET");
    assert_eq!(kept.as_deref(), Some("1"), "nothing else is touched");
}

/// Asserts that `records` (from the archive) hold at least `runs` distinct runs, each once.
fn assert_each_run_once(records: &[String], runs: usize) {
    let distinct: BTreeSet<&String> = records.iter().collect();
    assert_eq!(distinct.len(), records.len(), "a run archived twice");
    assert!(
        records.len() >= runs,
        "{} records archived, fewer than the {runs} runs processed",
        records.len()
    );
}

#[test]
fn bench_with_a_file_archive_prints_its_export_rate_once_every_processed_run_is_archived() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    let out = redcron_in(
        dir.path(),
        &[
            "bench",
            "--redis",
            &server.url(),
            "--jobs",
            "500",
            "--archive",
            &url,
        ],
        "",
    )
    .success();
    let (figures, _) = figures(&out);
    let names: Vec<&str> = figures.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, expected_names(true), "{out}");
    let rate = figures
        .iter()
        .find(|(name, _)| name == "archive_records_per_s")
        .map(|(_, rate)| *rate);
    assert!(rate.is_some_and(|rate| rate > 0.0), "{out}");
    // The rate is measured once the outbox is empty: every processed run is in the archive
    // (the delayed burst's runs too, unless the replica stopped before writing them).
    let ids: Vec<String> = archived(&archive)
        .into_iter()
        .map(|(_, record)| record["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_each_run_once(&ids, 500);
}

#[test]
fn bench_with_an_s3_archive_prints_its_export_rate_once_every_processed_run_is_archived() {
    let server = RedisServer::start();
    let s3 = S3Server::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let vars = s3.env();
    let env: Vec<(&str, &OsStr)> = vars
        .iter()
        .map(|(name, value)| (*name, OsStr::new(value)))
        .collect();
    let url = format!("s3://{BUCKET}/bench");
    let out = redcron_in_with_env(
        dir.path(),
        &[
            "bench",
            "--redis",
            &server.url(),
            "--jobs",
            "300",
            "--archive",
            &url,
        ],
        "",
        &env,
    )
    .success();
    let (figures, _) = figures(&out);
    let names: Vec<&str> = figures.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, expected_names(true), "{out}");
    let ids: Vec<String> = s3
        .objects()
        .iter()
        .filter(|(name, _)| name.ends_with(".ndjson.gz"))
        .flat_map(|(name, bytes)| part_records(name, bytes))
        .map(|record| record["id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_each_run_once(&ids, 300);
}

#[test]
fn bench_measures_beside_the_runs_left_waiting_and_keeps_its_namespace_when_told() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = redcron_in(
        dir.path(),
        &[
            "bench",
            "--redis",
            &server.url(),
            "--namespace",
            "costs",
            "--jobs",
            "300",
            "--waiting",
            "1500",
            "--waiting-delayed",
            "1200",
            "--keep",
        ],
        "",
    )
    .success();
    let (figures, _) = figures(&out);
    let names: Vec<&str> = figures.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, expected_names(false), "{out}");

    // The waiting runs were there through the measured part and are still: the ready ones in
    // the queue the replica does not serve, the delayed ones due in an hour, none of them run.
    let keys = Keys::new("costs");
    let mut redis = server.connection();
    let ready: usize = redis
        .llen(keys.ready("waiting", Priority::Normal))
        .expect("LLEN");
    assert_eq!(ready, 1500, "{out}");
    let delayed: usize = redis.zcard(keys.due_runs()).expect("ZCARD");
    assert_eq!(delayed, 1200, "{out}");
    // With --keep the processed runs stay for their retention, in the namespace given.
    let runs: Vec<String> = redis.keys(keys.run("*")).expect("KEYS");
    assert!(runs.len() >= 300 + 1500 + 1200, "{} run keys", runs.len());
    let bench_keys: Vec<String> = redis
        .keys(format!("{}*", Keys::new("bench").prefix()))
        .expect("KEYS");
    assert!(
        bench_keys.is_empty(),
        "only --namespace is used: {bench_keys:?}"
    );
}
