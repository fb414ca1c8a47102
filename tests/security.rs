//! The whole engine as a Redis ACL user limited to its namespace (the ACL line of SECURITY.md),
//! and over TLS with a private CA and a client certificate.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use redis::Commands;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::{free_port, http_get, redcron_in, sample, wait_until};

/// A job firing every second that appends its run id to `ledger`, in `schedules/jobs.toml`.
fn every_second_job(schedules: &Path, ledger: &Path) {
    std::fs::create_dir_all(schedules).expect("schedules dir");
    std::fs::write(
        schedules.join("jobs.toml"),
        format!(
            "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"echo $REDCRON_RUN_ID >> {}\"\n",
            ledger.display()
        ),
    )
    .expect("write jobs");
}

fn ledger_lines(ledger: &Path) -> usize {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .count()
}

/// Creates, on `server`, the user of SECURITY.md's ACL line for namespace `namespace`, and
/// returns the URL that logs in as it.
fn acl_user(server: &RedisServer, namespace: &str) -> String {
    let () = redis::cmd("ACL")
        .arg(acl_line_from_security_md(namespace))
        .query(&mut server.connection())
        .expect("ACL SETUSER");
    server.url_as("redcron", "s3cret")
}

/// The `ACL SETUSER` line of SECURITY.md, for namespace `namespace`.
fn acl_line_from_security_md(namespace: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("SECURITY.md"))
        .expect("SECURITY.md");
    let line = text
        .lines()
        .find(|line| line.starts_with("ACL SETUSER "))
        .expect("SECURITY.md gives an ACL SETUSER line");
    line.replace("{redcron}", &format!("{{{namespace}}}"))
        .replace(">CHANGE-ME", ">s3cret")
        .split_whitespace()
        .skip(1)
        .map(str::to_owned)
        .collect()
}

/// One process serving two namespaces keeps their health and metrics apart: a namespace whose
/// writes Redis refuses while the replica runs (its ACL changed) is named by `/readyz`, while
/// the other one's fires go on and its metrics count under its own label.
#[test]
fn a_namespace_that_cannot_write_is_named_by_readyz_while_the_other_runs() {
    let server = RedisServer::start();
    // The user may use both namespaces at start.
    let url = acl_user(&server, "a");
    let () = redis::cmd("ACL")
        .arg(&["SETUSER", "redcron", "~{b}:*", "&{b}:*"])
        .query(&mut server.connection())
        .expect("ACL SETUSER");

    let dir = tempfile::tempdir().expect("temp dir");
    let (ledger_a, ledger_b) = (dir.path().join("ledger-a"), dir.path().join("ledger-b"));
    // Each namespace is served from the subdirectory named after it.
    let schedules = dir.path().join("schedules");
    every_second_job(&schedules.join("a"), &ledger_a);
    every_second_job(&schedules.join("b"), &ledger_b);
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let replica = ReplicaProcess::start(
        "r1",
        &url,
        &schedules,
        dir.path(),
        &["--namespace", "a,b", "--metrics-addr", &address],
    );
    assert!(
        wait_until(Duration::from_secs(10), || ledger_lines(&ledger_a) >= 3
            && ledger_lines(&ledger_b) >= 3),
        "no fires in the two namespaces:\n{}",
        replica.log()
    );
    // Namespace b is taken away from the user.
    let () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "redcron",
            "resetkeys",
            "~{a}:*",
            "resetchannels",
            "&{a}:*",
        ])
        .query(&mut server.connection())
        .expect("ACL SETUSER");
    let readiness = || {
        std::net::TcpStream::connect(("127.0.0.1", port))
            .is_ok()
            .then(|| http_get(port, "/readyz"))
    };
    // /readyz names the refusal and the ACL the user needs.
    assert!(
        wait_until(Duration::from_secs(10), || readiness().is_some_and(
            |(code, body)| code == 503
                && body.starts_with("namespace b: redis refuses writes: ")
                && body.contains("Redis refuses this user namespace \"b\" (NOPERM")
                && body.contains("the ACL line of SECURITY.md, which allows the keys ~{b}:*")
                && body.ends_with('\n')
                && body.lines().count() == 1
        )),
        "{:?}\n{}",
        readiness(),
        replica.log()
    );
    // b fires no more; a goes on.
    let (fired_a, fired_b) = (ledger_lines(&ledger_a), ledger_lines(&ledger_b));
    assert!(
        wait_until(Duration::from_secs(10), || ledger_lines(&ledger_a)
            >= fired_a + 3),
        "namespace a stopped firing:\n{}",
        replica.log()
    );
    assert!(
        ledger_lines(&ledger_b) <= fired_b + 1,
        "namespace b went on firing"
    );
    // Each namespace counts under its own label.
    let metrics = http_get(port, "/metrics").1;
    assert_eq!(
        sample(&metrics, "redcron_leader{namespace=\"a\"}"),
        1.0,
        "{metrics}"
    );
    assert!(
        sample(&metrics, "redcron_redis_errors_total{namespace=\"b\"}") > 0.0,
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "redcron_redis_errors_total{namespace=\"a\"}"),
        0.0,
        "{metrics}"
    );
    assert_eq!(
        metrics.matches("# TYPE redcron_leader gauge").count(),
        1,
        "each family once: {metrics}"
    );
    // The refusal is warned in one clear line, once per component, not at every tick: the
    // replica has been refused for seconds by now, at several ticks a second.
    let log = replica.log();
    let refusals: Vec<&str> = log.lines().filter(|line| line.contains("NOPERM")).collect();
    assert!(!refusals.is_empty(), "the refusal was not logged:\n{log}");
    for line in &refusals {
        assert!(
            line.contains(" WARN ")
                && line.contains("Redis refuses this user namespace \"b\" (NOPERM")
                && line.contains("the ACL line of SECURITY.md"),
            "{line}"
        );
    }
    assert!(
        !log.contains("Transaction aborted") && !log.contains("Pipeline failure"),
        "a refusal logged as redis-rs's dump:\n{log}"
    );
    // What failed: the line without its time and the error.
    let failed = |line: &&str| {
        let (_, line) = line.split_once(' ').unwrap_or_default();
        line.split("error=").next().unwrap_or_default().to_owned()
    };
    let mut components: Vec<String> = refusals.iter().map(failed).collect();
    components.sort();
    components.dedup();
    assert_eq!(
        refusals.len(),
        components.len(),
        "a component warned of the refusal more than once:\n{}",
        refusals.join("\n")
    );
    // Each line a replica logs names its namespace.
    assert!(log.contains("replica{namespace=\"a\"}"), "{log}");
    assert!(log.contains("replica{namespace=\"b\"}"), "{log}");
}

/// A replica or a command given a namespace the ACL user may not use says so in one line,
/// with the ACL it needs: the replica at start, exiting 2, not refused at every tick for ever.
#[test]
fn a_namespace_the_acl_user_may_not_use_is_refused_in_one_clear_line() {
    let server = RedisServer::start();
    let url = acl_user(&server, "a");
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    every_second_job(&schedules, &dir.path().join("ledger"));

    let mut replica = ReplicaProcess::start(
        "r1",
        &url,
        &schedules,
        dir.path(),
        &["--namespace", "other"],
    );
    let exited = replica.wait_exit(Duration::from_secs(20));
    let log = replica.log();
    assert_eq!(exited.and_then(|status| status.code()), Some(2), "{log}");
    let error = log.lines().last().unwrap_or_default();
    assert!(
        error.starts_with(
            "redcron: checking what Redis lets this user do: Redis refuses this user \
             namespace \"other\" (NOPERM"
        ) && error.contains("~{other}:*")
            && error.contains("&{other}:*"),
        "{log}"
    );

    for args in [&["status"][..], &["trigger", "tick"], &["runs", "list"]] {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--redis", &url, "--namespace", "other"]);
        let error = redcron_in(dir.path(), &all, "").failure(2);
        assert_eq!(error.lines().count(), 1, "{args:?}: {error}");
        assert!(
            error.contains("Redis refuses this user namespace \"other\" (NOPERM")
                && error.contains("the ACL line of SECURITY.md")
                && !error.contains("Pipeline"),
            "{args:?}: {error}"
        );
    }
}

#[test]
fn an_acl_user_limited_to_the_namespace_runs_the_whole_engine() {
    let server = RedisServer::start();
    let url = acl_user(&server, "test");

    let dir = tempfile::tempdir().expect("temp dir");
    let ledger = dir.path().join("ledger");
    every_second_job(&dir.path().join("schedules"), &ledger);
    let replica = ReplicaProcess::start("r1", &url, &dir.path().join("schedules"), dir.path(), &[]);
    assert!(
        wait_until(Duration::from_secs(10), || ledger_lines(&ledger) >= 3),
        "no fires as the ACL user:\n{}",
        replica.log()
    );
    let cli = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend_from_slice(&["--redis", &url, "--namespace", "test"]);
        redcron_in(dir.path(), &all, "")
    };
    cli(&["trigger", "tick"]).success();
    cli(&["pause", "tick"]).success();
    cli(&["resume", "tick"]).success();
    let status = cli(&["status"]).success();
    assert!(status.contains("r1"), "{status}");
    cli(&["history"]).success();
    cli(&["dead", "list"]).success();
    let before = ledger_lines(&ledger);
    assert!(
        wait_until(Duration::from_secs(10), || ledger_lines(&ledger)
            >= before + 2),
        "fires stopped:\n{}",
        replica.log()
    );
    assert!(
        !replica.log().contains("NOPERM"),
        "a command was refused to the ACL user:\n{}",
        replica.log()
    );

    // The user reaches nothing outside its namespace.
    let mut limited = redis::Client::open(url.as_str())
        .and_then(|client| client.get_connection())
        .expect("connect as the ACL user");
    let outside: redis::RedisResult<Option<String>> = limited.get("other-app:key");
    assert!(
        outside.is_err_and(|error| error.code() == Some("NOPERM")),
        "a key outside the namespace was readable"
    );
    let flush: redis::RedisResult<()> = redis::cmd("FLUSHALL").query(&mut limited);
    assert!(flush.is_err(), "FLUSHALL was allowed");

    // A wrong password is said to be one, not taken for a Redis that is down.
    let wrong = redcron_in(
        dir.path(),
        &[
            "status",
            "--redis",
            &server.url_as("redcron", "wrong"),
            "--namespace",
            "test",
        ],
        "",
    )
    .failure(2);
    assert_eq!(wrong.lines().count(), 1, "{wrong}");
    assert!(
        wrong.starts_with("redcron: Redis refused the user or password at ")
            && wrong.ends_with(
                "; check them in the URL (--redis, REDIS_URL or `redis` in the configuration file)\n"
            ),
        "{wrong}"
    );
    assert!(
        !wrong.contains("wrong@") && !wrong.contains("pass=wrong"),
        "{wrong}"
    );
}

/// Runs `openssl args...` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run openssl ({error}): the TLS test makes its certificates with it. \
                 Install it with `sudo apt-get install -y openssl`"
            )
        });
    assert!(
        status.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&status.stderr)
    );
}

/// A private CA, a server certificate for 127.0.0.1 and a client certificate, all signed by it.
fn certificates(dir: &Path) {
    let key = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        dir,
        &[
            &["req", "-x509"][..],
            &key,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=redcron test CA",
            ],
        ]
        .concat(),
    );
    for (name, extension) in [
        ("server", "subjectAltName=IP:127.0.0.1"),
        ("client", "extendedKeyUsage=clientAuth"),
    ] {
        let (key_file, request, certificate) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
        );
        openssl(
            dir,
            &[
                &["req"][..],
                &key,
                &[
                    "-keyout",
                    &key_file,
                    "-out",
                    &request,
                    "-subj",
                    &format!("/CN={name}"),
                ],
            ]
            .concat(),
        );
        std::fs::write(dir.join(format!("{name}.ext")), extension).expect("extension file");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &request,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &certificate,
                "-days",
                "2",
                "-extfile",
                &format!("{name}.ext"),
            ],
        );
    }
}

#[test]
fn rediss_with_a_private_ca_and_a_client_certificate_runs_the_whole_engine() {
    let dir = tempfile::tempdir().expect("temp dir");
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).expect("certs dir");
    certificates(&certs);
    let server = RedisServer::start_with_tls(
        &certs.join("server.crt"),
        &certs.join("server.key"),
        &certs.join("ca.crt"),
    );
    let url = server.tls_url().expect("a TLS port");
    let path = |file: &str| certs.join(file).display().to_string();
    let tls = [
        "--tls-ca-cert",
        &path("ca.crt"),
        "--tls-cert",
        &path("client.crt"),
        "--tls-key",
        &path("client.key"),
    ];

    let ledger = dir.path().join("ledger");
    every_second_job(&dir.path().join("schedules"), &ledger);
    let replica =
        ReplicaProcess::start("r1", &url, &dir.path().join("schedules"), dir.path(), &tls);
    assert!(
        wait_until(Duration::from_secs(10), || ledger_lines(&ledger) >= 3),
        "no fires over TLS:\n{}",
        replica.log()
    );
    let mut args = vec!["status", "--redis", &url, "--namespace", "test"];
    args.extend_from_slice(&tls);
    let status = redcron_in(dir.path(), &args, "").success();
    assert!(status.contains("r1"), "{status}");

    // Without the private CA, the server's certificate is refused.
    let refused = redcron_in(
        dir.path(),
        &["status", "--redis", &url, "--namespace", "test"],
        "",
    );
    assert_eq!(refused.code, Some(2), "{}", refused.stderr);
    assert!(
        refused.stderr.contains("certificate") || refused.stderr.contains("UnknownIssuer"),
        "{}",
        refused.stderr
    );
}
