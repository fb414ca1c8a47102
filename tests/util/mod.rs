//! Shared test harness: run the `redcron` binary and read what it printed; real Redis servers.

pub mod archive;
pub mod browser;
pub mod cluster;
pub mod node;
pub mod redis_server;
pub mod replica;
pub mod s3;
pub mod scenario;
pub mod schemas;
pub mod sentinel;
pub mod store;
pub mod wait;
pub mod web;
pub mod webhook;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The namespace the tests' stores and replicas use.
pub const NAMESPACE: &str = "test";

/// The keys of the tests' namespace, built as redcron builds them.
pub fn keys() -> redcron::store::Keys {
    redcron::store::Keys::new(NAMESPACE)
}

/// What one `redcron` invocation did.
pub struct Run {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Asserts the command succeeded and returns its standard output.
    #[track_caller]
    pub fn success(self) -> String {
        assert_eq!(
            self.code,
            Some(0),
            "redcron failed.\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        self.stdout
    }

    /// Asserts the command failed with `code` and printed nothing on standard output; returns
    /// its standard error.
    #[track_caller]
    pub fn failure(self, code: i32) -> String {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit code {code}.\nstdout:\n{}\nstderr:\n{}",
            self.stdout,
            self.stderr
        );
        assert_eq!(self.stdout, "", "a failed command printed on stdout");
        self.stderr
    }
}

/// Runs `redcron args...` in `dir` with `stdin` as its standard input.
pub fn redcron_in(dir: &Path, args: &[&str], stdin: &str) -> Run {
    redcron_in_with_env(dir, args, stdin, &[])
}

/// Like [`redcron_in`], with `env` added to its environment.
pub fn redcron_in_with_env(
    dir: &Path,
    args: &[&str],
    stdin: &str,
    env: &[(&str, &std::ffi::OsStr)],
) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_redcron"))
        .args(args)
        .current_dir(dir)
        .env_remove("REDIS_URL")
        // No configuration file of the machine or of whoever runs the tests, unless a test
        // names one.
        .env("REDCRON_CONFIG", "/dev/null")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the redcron binary starts");
    child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("redcron finishes");
    Run {
        code: status.code(),
        stdout: String::from_utf8(stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(stderr).expect("stderr is UTF-8"),
    }
}

/// Runs `redcron args... --redis <server> --namespace test` in `dir`.
pub fn cli(server: &redis_server::RedisServer, dir: &Path, args: &[&str]) -> Run {
    cli_at(&server.url(), dir, args)
}

/// Like [`cli`], against the Redis at `url` (a Sentinel or Cluster URL too).
pub fn cli_at(url: &str, dir: &Path, args: &[&str]) -> Run {
    let mut all = args.to_vec();
    all.extend(["--redis", url, "--namespace", "test"]);
    redcron_in(dir, &all, "")
}

/// The lines of a ledger file that jobs append `<run id> <start ms> [tag]` to: run id, start
/// ms, tag ("" when none). A missing file is an empty ledger.
pub fn read_ledger(path: &Path) -> Vec<(String, i64, String)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let run = words.next()?.to_owned();
            let started = words.next()?.parse().ok()?;
            Some((run, started, words.next().unwrap_or("").to_owned()))
        })
        .collect()
}

/// The JSON document a `--json` command printed, which must be exactly one.
#[track_caller]
pub fn one_document(out: &str) -> serde_json::Value {
    let mut documents = serde_json::Deserializer::from_str(out).into_iter::<serde_json::Value>();
    let document = documents
        .next()
        .unwrap_or_else(|| panic!("no JSON document in {out:?}"))
        .unwrap_or_else(|error| panic!("not JSON ({error}): {out:?}"));
    assert!(
        documents.next().is_none(),
        "more than one JSON document: {out:?}"
    );
    document
}

/// Runs `redcron args...` in the repository root.
pub fn redcron(args: &[&str]) -> Run {
    redcron_in(Path::new(env!("CARGO_MANIFEST_DIR")), args, "")
}

/// Tests wait for what they expect, never a fixed time: one poll loop, in [`wait`].
pub use wait::{wait_until, wait_until_async};

/// `GET path` on a local HTTP endpoint: the status code and the body.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the metrics endpoint");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_owned();
    (status, body)
}

/// The value of the sample `name{labels}` (labels as Prometheus prints them), or 0.
pub fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

pub use redis_server::{command_calls, free_port};

/// A `sendmail` at `dir/bin/sendmail` that appends its arguments, its input and an `--END--`
/// line to `dir/mail.log`, as a mail transfer agent would queue the mail.
pub fn fake_sendmail(dir: &Path) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let sendmail = bin.join("sendmail");
    std::fs::write(
        &sendmail,
        format!(
            "#!/bin/sh\n{{ echo \"ARGS: $*\"; cat; echo '--END--'; }} >> {}\n",
            dir.join("mail.log").display()
        ),
    )
    .expect("write sendmail");
    let mut permissions = std::fs::metadata(&sendmail)
        .expect("sendmail")
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&sendmail, permissions).expect("chmod sendmail");
    sendmail
}

/// An imported file without its `user` lines: those users must exist and need a replica run
/// as root, which the tests of `user` check apart.
pub fn without_users(toml: &str) -> String {
    toml.lines()
        .filter(|line| !line.starts_with("user = "))
        .map(|line| format!("{line}\n"))
        .collect()
}
