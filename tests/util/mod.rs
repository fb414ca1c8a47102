//! Shared test harness: run the `redcron` binary and read what it printed; real Redis servers.

pub mod redis_server;
pub mod replica;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

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
    let mut child = Command::new(env!("CARGO_BIN_EXE_redcron"))
        .args(args)
        .current_dir(dir)
        .env_remove("REDIS_URL")
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
    let url = server.url();
    let mut all = args.to_vec();
    all.extend(["--redis", &url, "--namespace", "test"]);
    redcron_in(dir, &all, "")
}

/// Runs `redcron args...` in the repository root.
pub fn redcron(args: &[&str]) -> Run {
    redcron_in(Path::new(env!("CARGO_MANIFEST_DIR")), args, "")
}

/// Polls `condition` every 50 ms until it holds or `limit` passes; whether it held. Tests wait
/// for what they expect instead of sleeping and hoping.
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    condition()
}
