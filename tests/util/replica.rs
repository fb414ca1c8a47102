//! `redcron run` replica processes for tests: started against a test Redis, killed on drop, with
//! their log attached to failure messages.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::wait::wait_for;

/// One `redcron run` process.
pub struct ReplicaProcess {
    /// Its replica id.
    pub id: String,
    child: Child,
    log: PathBuf,
}

impl ReplicaProcess {
    /// Starts `redcron run` with id `id` on `schedules`, against `redis_url`, in namespace
    /// `test` (unless `extra` names another), with short leases so that failover tests finish quickly; `extra` adds flags or
    /// replaces those.
    pub fn start(
        id: &str,
        redis_url: &str,
        schedules: &Path,
        log_dir: &Path,
        extra: &[&str],
    ) -> Self {
        Self::start_with_env(id, redis_url, schedules, log_dir, extra, &[])
    }

    /// Like [`ReplicaProcess::start`], with `env` added to its environment.
    pub fn start_with_env(
        id: &str,
        redis_url: &str,
        schedules: &Path,
        log_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let log = log_dir.join(format!("{id}.log"));
        let log_file = File::create(&log).expect("replica log file");
        Self::spawn(id, redis_url, schedules, log, extra, env, log_file.into())
    }

    /// Like [`ReplicaProcess::start`], with `stderr` as its standard error instead of a log
    /// file (so [`ReplicaProcess::log`] is empty).
    pub fn start_with_stderr(
        id: &str,
        redis_url: &str,
        schedules: &Path,
        extra: &[&str],
        stderr: Stdio,
    ) -> Self {
        let no_log = PathBuf::new();
        Self::spawn(id, redis_url, schedules, no_log, extra, &[], stderr)
    }

    fn spawn(
        id: &str,
        redis_url: &str,
        schedules: &Path,
        log: PathBuf,
        extra: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_redcron"))
            .arg("run")
            .args(["--redis", redis_url, "--replica-id", id])
            .arg("--schedules")
            .arg(schedules)
            // Short leases, and an ephemeral port since replicas run side by side, unless the
            // test sets them itself.
            .args(
                [
                    ["--namespace", "test"],
                    ["--leader-ttl", "2s"],
                    ["--run-lease", "3s"],
                    ["--shutdown-grace", "2s"],
                    ["--metrics-addr", "127.0.0.1:0"],
                ]
                .into_iter()
                .filter(|[flag, _]| !extra.contains(flag))
                .flatten(),
            )
            .args(extra)
            .env("REDCRON_CONFIG", "/dev/null")
            .envs(env.iter().copied())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("the redcron binary starts");
        Self {
            id: id.to_owned(),
            child,
            log,
        }
    }

    /// Everything the replica logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Everything the `replicas` logged so far, one after another: what a failed assertion
    /// about several replicas shows.
    pub fn logs(replicas: &[ReplicaProcess]) -> String {
        replicas
            .iter()
            .map(ReplicaProcess::log)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Its process id.
    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"))
    }

    /// Sends `signal`.
    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).expect("signal the replica");
    }

    /// Whether it has exited (and how), without waiting.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("wait for the replica")
    }

    /// Its standard error, when it was started with a pipe there.
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.stderr.take()
    }

    /// Waits up to `limit` for it to exit on its own; how it exited, or `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        wait_for(limit, || {
            self.child.try_wait().expect("wait for the replica")
        })
    }

    /// `kill -9`, and waits until it is gone.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `limit` for a clean exit; returns its exit code.
    pub fn terminate(&mut self, limit: Duration) -> Option<i32> {
        self.signal(Signal::SIGTERM);
        let Some(status) = self.wait_exit(limit) else {
            panic!(
                "replica {} did not exit within {limit:?}:\n{}",
                self.id,
                self.log()
            );
        };
        status.code()
    }
}

impl Drop for ReplicaProcess {
    fn drop(&mut self) {
        let _ = kill(self.pid(), Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
