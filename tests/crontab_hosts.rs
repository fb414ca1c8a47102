//! Moving the crontabs of several machines over: `import-crontab --where` and `--every-replica`
//! (for all crontabs, or for one crontab of `--dir`) place the jobs, the files they write load,
//! real replicas with labels declare exactly the jobs meant for them, and the lines that look
//! host-local are marked and, while one replica of several runs each fire, warned of. The
//! README's example is run as written, read from README.md so that it cannot drift.

use std::path::Path;
use std::time::Duration;

use redcron::engine::heartbeat::host_name;
use serde_json::Value;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{cli, one_document, redcron_in, wait_until};

/// The README's section on moving a whole server crontab over.
fn readme_section() -> String {
    let readme = include_str!("../README.md");
    let start = readme
        .find("## Moving a server's whole crontab over")
        .expect("README.md has the section");
    let rest = &readme[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |end| end + 3);
    rest[..end].to_owned()
}

/// The fenced code blocks of `text` whose opening fence names `language`, in order.
fn code_blocks(text: &str, language: &str) -> Vec<String> {
    let fence = format!("```{language}\n");
    text.split(fence.as_str())
        .skip(1)
        .map(|block| {
            block
                .split("\n```")
                .next()
                .expect("split yields one part")
                .to_owned()
        })
        .collect()
}

/// The README's system crontabs run their lines as root, and a replica that is not root refuses
/// a job of another user (see `run_as`): run by another user, the test gives those lines to
/// that user, in the crontabs and in the file the README shows alike.
fn as_this_user(text: &str) -> String {
    if nix::unistd::getuid().is_root() {
        return text.to_owned();
    }
    let me = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .expect("the user running the tests has a name");
    text.replace(" root ", &format!(" {} ", me.name))
        .replace("user = \"root\"", &format!("user = \"{}\"", me.name))
}

/// Writes the crontabs of the README's block under `root`: each starts at its `# /etc/...`
/// comment, which names it.
fn write_crontabs(root: &Path, block: &str) -> usize {
    let mut written = 0;
    let block = as_this_user(block);
    for file in block.split("# /").skip(1) {
        let (header, text) = file.split_once('\n').expect("a header line");
        let path = header
            .split(',')
            .next()
            .expect("split yields one part")
            .trim();
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("crontab dir");
        std::fs::write(&path, text).expect("crontab");
        written += 1;
    }
    written
}

/// The words of a README command, its `/etc/...` paths moved under `root`.
fn command_words(line: &str, root: &Path) -> Vec<String> {
    line.split_whitespace()
        .map(|word| match word.strip_prefix('/') {
            Some(path) if path.starts_with("etc/") => root.join(path).display().to_string(),
            _ => word.to_owned(),
        })
        .collect()
}

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

/// The README's three web servers, moved over with its commands as written: the files load,
/// `check` says where each job runs as the README shows, the file shown is the file written,
/// and replicas started as the README starts them (`--label role=web`) declare every job but
/// the one pinned to `host=web1` (no replica here runs on a host of that name), which a replica
/// with another role declares none of.
#[test]
fn the_readmes_web_servers_move_over_as_written() {
    let section = readme_section();
    let root = tempfile::tempdir().expect("temp dir");
    let crontabs = code_blocks(&section, "crontab");
    assert_eq!(crontabs.len(), 1, "{section}");
    assert_eq!(write_crontabs(root.path(), &crontabs[0]), 4, "{section}");
    // From a directory without `schedules/`: the first import makes it.
    let dir = tempfile::tempdir().expect("temp dir");

    let commands = code_blocks(&section, "sh");
    assert_eq!(commands.len(), 1, "{section}");
    let mut run_args = None;
    let mut checked = None;
    for line in commands[0].lines().filter(|line| !line.starts_with('#')) {
        let words = command_words(line, root.path());
        assert_eq!(words[0], "redcron", "{line}");
        let args: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        if args[0] == "run" {
            run_args = Some(words[2..].to_vec());
            continue;
        }
        let done = redcron_in(dir.path(), &args, "");
        assert!(
            !done.stderr.contains("host-local"),
            "{line}: every host-local line was placed, yet:\n{}",
            done.stderr
        );
        let out = done.success();
        if args[0] == "check" {
            checked = Some(out);
        }
    }
    let checked = checked.expect("the README checks the files");
    assert!(
        checked.contains("6 jobs in schedules: all valid"),
        "{checked}"
    );
    let said = code_blocks(&section, "text");
    assert_eq!(said.len(), 1, "{section}");
    for line in said[0].lines() {
        assert!(
            checked.contains(line),
            "check did not say {line:?}:\n{checked}"
        );
    }
    let shown = code_blocks(&section, "toml");
    assert_eq!(shown.len(), 1, "{section}");
    assert!(
        section.contains("(`schedules/cron.d/nginx.toml`)"),
        "{section}"
    );
    let written = std::fs::read_to_string(dir.path().join("schedules/cron.d/nginx.toml"))
        .expect("nginx.toml");
    assert!(
        written.contains(&as_this_user(&shown[0])),
        "the README shows:\n{}\nthe file is:\n{written}",
        shown[0]
    );

    let server = RedisServer::start();
    let schedules = dir.path().join("schedules");
    let run_args = run_args.expect("the README starts the replicas");
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
    let replicas = [
        ReplicaProcess::start("web-a", &server.url(), &schedules, dir.path(), &run_args),
        ReplicaProcess::start("web-b", &server.url(), &schedules, dir.path(), &run_args),
        ReplicaProcess::start(
            "db1",
            &server.url(),
            &schedules,
            dir.path(),
            &["--label", "role=db"],
        ),
    ];
    let all = ["db1", "web-a", "web-b"];
    for (name, on) in [
        ("run-parts-report-etc-cron-hourly", "every"),
        ("run-parts-report-etc-cron-daily", "every"),
        ("find-var-log-nginx-name", "every"),
        ("backup-db-to-s3-example-backups-shop", "one"),
        ("weekly-report", "one"),
    ] {
        let mut job = None;
        assert!(
            wait_until(Duration::from_secs(20), || {
                job = job_once_judged(&server, dir.path(), name, &all);
                job.is_some()
            }),
            "job {name} was not judged by every replica:\n{}",
            ReplicaProcess::logs(&replicas)
        );
        let job = job.expect("judged");
        assert_eq!(
            job["declared_by"],
            serde_json::json!(["web-a", "web-b"]),
            "{job}"
        );
        assert_eq!(job["not_declared_by"], serde_json::json!(["db1"]), "{job}");
        assert_eq!(job["where"], serde_json::json!(["role=web"]), "{job}");
        assert_eq!(job["on"], on, "{job}");
    }
    // No replica here is web1: each says so at its start, and none declares the job.
    for replica in &replicas {
        assert!(
            wait_until(Duration::from_secs(10), || replica.log().lines().any(
                |line| line.contains("not declared here") && line.contains("certbot-q-renew")
            )),
            "replica {} did not say it leaves certbot-q-renew out:\n{}",
            replica.id,
            replica.log()
        );
    }
    let listed = one_document(&cli(&server, dir.path(), &["jobs", "--json"]).success());
    let certbot = listed["jobs"]
        .as_array()
        .expect("a jobs array")
        .iter()
        .find(|job| job["job"] == "certbot-q-renew");
    // Declared by no replica, it is no job of the cluster's.
    assert_eq!(certbot, None, "{listed}");
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

    std::fs::remove_dir_all(dir.path().join("out")).expect("out");
    let typo = import(&["--where-file", "ngnix=host=web1"]).failure(2);
    assert!(
        typo.contains(&format!(
            "--where-file ngnix: {cron_d} holds no crontab named \"ngnix\" that cron reads"
        )),
        "{typo}"
    );
    assert!(
        !dir.path().join("out").exists(),
        "an import refused for a misspelt name wrote its output directory"
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

/// A `where` that `check` and `run` would refuse is refused by the import, with exit 2 and the
/// options that made it named, before anything is written: two values of one key, from
/// `--where` or with `--where-file`, and a `queue=` term for jobs whose runs wait in `default`.
/// The same `queue=` term with `--every-replica` loads, and the import makes the directory of
/// `-o`.
#[test]
fn an_import_whose_where_check_would_refuse_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cron_d = dir.path().join("cron.d");
    std::fs::create_dir(&cron_d).expect("cron.d");
    for name in ["app", "web"] {
        std::fs::write(cron_d.join(name), "0 1 * * * root /opt/x\n").expect("crontab");
    }
    let cron_d = cron_d.to_str().expect("UTF-8");
    let single = |extra: &[&str]| {
        let mut args = vec!["import-crontab", "--tz", "UTC", "-o", "s/x.toml"];
        args.extend(extra);
        redcron_in(dir.path(), &args, "0 1 * * * /opt/x\n")
    };
    let hint = "A job's where terms must all hold; to run a crontab on two hosts, give them a \
                label they share (--label role=web on both, then --where role=web), or import it \
                once per host";
    for (refused, named, why) in [
        (
            single(&["--where", "host=web1", "--where", "host=web2"]),
            "--where host=web1 and --where host=web2: ",
            "\"host=web1\" and \"host=web2\" cannot both hold",
        ),
        (
            single(&["--where", "queue=eu"]),
            "--where queue=eu: ",
            "but the job's runs wait in queue \"default\"",
        ),
        (
            redcron_in(
                dir.path(),
                &[
                    "import-crontab",
                    "--tz",
                    "UTC",
                    "--dir",
                    cron_d,
                    "--where",
                    "role=web",
                    "--where-file",
                    "app=role=db",
                    "-o",
                    "s/cron.d",
                ],
                "",
            ),
            "--where role=web and --where-file app=role=db: ",
            "\"role=db\" and \"role=web\" cannot both hold",
        ),
    ] {
        let stderr = refused.failure(2);
        assert!(
            stderr.starts_with(&format!("redcron: {named}check and run would refuse")),
            "{stderr}"
        );
        assert!(stderr.contains(why), "{stderr}");
        assert_eq!(stderr.contains(hint), !why.contains("queue"), "{stderr}");
        assert!(
            !dir.path().join("s").exists(),
            "a refused import wrote s/:\n{stderr}"
        );
    }

    single(&["--where", "queue=eu", "--every-replica"]).success();
    let written = std::fs::read_to_string(dir.path().join("s/x.toml")).expect("x.toml");
    assert!(
        written.contains("\nwhere = [\"queue=eu\"]\non = \"every\"\n"),
        "{written}"
    );
    let checked = redcron_in(dir.path(), &["check", "--schedules", "s"], "").success();
    assert!(checked.contains("1 job in s: all valid"), "{checked}");
}

/// A host-local line whose job runs once per fire is warned of whatever `where` narrows the
/// replicas to, unless it names one machine: `--where role=web` puts `run-parts` on one web
/// server per fire. The warning and the hint in the file say where it runs.
#[test]
fn a_host_local_line_on_one_replica_of_several_is_warned_of() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("crontab"),
        "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n",
    )
    .expect("crontab");
    let import = |extra: &[&str]| {
        let mut args = vec![
            "import-crontab",
            "--system",
            "crontab",
            "--tz",
            "UTC",
            "-o",
            "web.toml",
        ];
        args.extend(extra);
        let done = redcron_in(dir.path(), &args, "");
        let stderr = done.stderr.clone();
        done.success();
        let written = std::fs::read_to_string(dir.path().join("web.toml")).expect("web.toml");
        (stderr, written)
    };

    let (stderr, written) = import(&["--where", "role=web"]);
    assert!(
        stderr.contains(&format!(
            "redcron: crontab:1: job run-parts-report-etc-cron-hourly looks host-local (run-parts \
             runs the scripts of this machine's /etc/cron.hourly) but runs once per fire, on a \
             replica with role=web; pass --every-replica to run it on every replica, or --where \
             host={} to keep it on this machine",
            host_name()
        )),
        "{stderr}"
    );
    assert!(
        written.contains("/etc/cron.hourly: it runs once per fire, on a replica with role=web;"),
        "{written}"
    );

    for placed in [
        &["--where", "role=web", "--every-replica"][..],
        &["--where", "role=web", "--where", "host=web1"][..],
        &["--where", "replica=web1-a"][..],
    ] {
        let (stderr, written) = import(placed);
        assert!(!stderr.contains("host-local"), "{placed:?}: {stderr}");
        assert!(
            written.contains("/etc/cron.hourly\nschedule = "),
            "{placed:?}: {written}"
        );
    }
}
