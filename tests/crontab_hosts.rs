//! Moving the crontabs of several machines over: `import-crontab --where` and `--every-replica`
//! (for all crontabs, or for one crontab of `--dir`) place the jobs, the files they write load,
//! real replicas with labels declare exactly the jobs meant for them, and the lines that look
//! host-local are marked and, when left unplaced, warned of.

use std::path::Path;
use std::time::Duration;

use redcron::engine::heartbeat::host_name;
use serde_json::Value;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{cli, one_document, redcron_in, wait_until};

/// The job `name` of `jobs --json`, once every replica of `all` is in its `declared_by` or its
/// `not_declared_by`.
fn job_once_judged(server: &RedisServer, dir: &Path, name: &str, all: &[&str]) -> Option<Value> {
    let listed = one_document(&cli(server, dir, &["jobs", "--json"]).success());
    let job = listed["jobs"]
        .as_array()?
        .iter()
        .find(|job| job["job"] == name)?
        .clone();
    let mut judged: Vec<&str> = ["declared_by", "not_declared_by"]
        .iter()
        .flat_map(|field| job[field].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    judged.sort_unstable();
    (judged == all).then_some(job)
}

/// `--where host=$(hostname)` keeps a machine's crontab on that machine: the file is loaded
/// by every replica of a shared schedule directory, and only those on the host declare its
/// jobs; the same crontab imported for another host is declared by none of them.
#[test]
fn a_crontab_imported_for_a_host_is_declared_by_the_replicas_on_it_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("schedules")).expect("schedules");
    let crontab = "0 4 * * * /usr/local/bin/sync-here\n";
    let here = format!("host={}", host_name());
    for (host, output, prefix) in [
        (here.as_str(), "schedules/here.toml", "here"),
        ("host=elsewhere", "schedules/elsewhere.toml", "elsewhere"),
    ] {
        redcron_in(
            dir.path(),
            &[
                "import-crontab",
                "--tz",
                "UTC",
                "--where",
                host,
                "--every-replica",
                "--prefix",
                prefix,
                "-o",
                output,
            ],
            crontab,
        )
        .success();
    }
    let server = RedisServer::start();
    let schedules = dir.path().join("schedules");
    let replicas = [
        ReplicaProcess::start("r1", &server.url(), &schedules, dir.path(), &[]),
        ReplicaProcess::start("r2", &server.url(), &schedules, dir.path(), &[]),
    ];
    let mut job = None;
    assert!(
        wait_until(Duration::from_secs(20), || {
            job = job_once_judged(&server, dir.path(), "here-sync-here", &["r1", "r2"]);
            job.is_some()
        }),
        "the job imported for this host was not declared by both replicas:\n{}",
        ReplicaProcess::logs(&replicas)
    );
    let job = job.expect("judged");
    assert_eq!(job["declared_by"], serde_json::json!(["r1", "r2"]), "{job}");
    assert_eq!(job["where"], serde_json::json!([here]), "{job}");
    assert_eq!(job["on"], "every", "{job}");
    for replica in &replicas {
        assert!(
            wait_until(Duration::from_secs(10), || replica
                .log()
                .lines()
                .any(|line| line.contains("not declared here")
                    && line.contains("elsewhere-sync-here"))),
            "replica {} did not say it leaves the other host's job out:\n{}",
            replica.id,
            replica.log()
        );
    }
    let listed = one_document(&cli(&server, dir.path(), &["jobs", "--json"]).success());
    let elsewhere = listed["jobs"]
        .as_array()
        .expect("a jobs array")
        .iter()
        .find(|job| job["job"] == "elsewhere-sync-here");
    assert_eq!(elsewhere, None, "{listed}");
}

/// A host-local line left unplaced is a warning naming the crontab, the line and the options
/// that place it, and the import still exits 0; placed per file, the warning goes and the mark
/// in the file stays. A per-file option that names no crontab of the directory, or is given
/// without `--dir`, is an error.
#[test]
fn host_local_lines_are_warned_of_until_placed_and_per_file_options_name_real_crontabs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cron_d = dir.path().join("cron.d");
    std::fs::create_dir(&cron_d).expect("cron.d");
    std::fs::write(
        cron_d.join("nginx"),
        "# rotate\n30 4 * * * root find /var/log/nginx -name '*.gz' -delete\n",
    )
    .expect("nginx");
    std::fs::write(
        cron_d.join("site"),
        "0 7 * * 1 root /usr/local/bin/report\n",
    )
    .expect("site");
    let cron_d = cron_d.to_str().expect("UTF-8");
    let import = |extra: &[&str]| {
        let mut args = vec![
            "import-crontab",
            "--dir",
            cron_d,
            "-o",
            "out",
            "--tz",
            "UTC",
        ];
        args.extend(extra);
        redcron_in(dir.path(), &args, "")
    };

    let unplaced = import(&[]);
    let stderr = unplaced.stderr.clone();
    unplaced.success();
    let host = host_name();
    assert!(
        stderr.contains(&format!(
            "redcron: {cron_d}/nginx:2: job find-var-log-nginx-name looks host-local (uses \
             /var/log/nginx on this machine) but runs on any one replica; pass \
             --every-replica-file nginx to run it on every replica, or --where-file \
             nginx=host={host} to keep it on this machine"
        )),
        "{stderr}"
    );
    assert_eq!(stderr.matches("host-local").count(), 1, "{stderr}");
    let written = std::fs::read_to_string(dir.path().join("out/nginx.toml")).expect("nginx.toml");
    assert!(
        written.contains("# host-local: uses /var/log/nginx on this machine: it runs on any one"),
        "{written}"
    );

    let placed = import(&["--every-replica-file", "nginx"]);
    let stderr = placed.stderr.clone();
    placed.success();
    assert!(!stderr.contains("host-local"), "{stderr}");
    let written = std::fs::read_to_string(dir.path().join("out/nginx.toml")).expect("nginx.toml");
    assert!(
        written.contains("# host-local: uses /var/log/nginx on this machine\n"),
        "{written}"
    );
    assert!(written.contains("\non = \"every\"\n"), "{written}");
    let site = std::fs::read_to_string(dir.path().join("out/site.toml")).expect("site.toml");
    assert!(!site.contains("\non = "), "{site}");

    let typo = import(&["--where-file", "ngnix=host=web1"]).failure(2);
    assert!(
        typo.contains(&format!(
            "--where-file ngnix: {cron_d} holds no crontab named \"ngnix\" that cron reads"
        )),
        "{typo}"
    );
    let bad_term = import(&["--where", "role"]).failure(2);
    assert!(
        bad_term.contains("--where: \"role\" is not key=value"),
        "{bad_term}"
    );
    let without_dir = redcron_in(
        dir.path(),
        &["import-crontab", "--every-replica-file", "nginx"],
        "",
    )
    .failure(2);
    assert!(
        without_dir.contains("--every-replica-file names a crontab of --dir DIR"),
        "{without_dir}"
    );
}
