//! The built-in handler: a job's command under `/bin/sh -c`, in its own process group under a
//! supervisor that takes it down with the replica, with the payload on standard input (never on
//! the command line), the tail of its output kept, and its lines sent where its job's `output` says.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::SecondsFormat;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tracing::error;

use super::live::OUTPUT_TAIL_BYTES;
use super::output::{Lines, Sink};
use super::{BoxFuture, Completed, Handler, LiveOutput, Outcome, RunContext, RunError};
use crate::notify::spool::{self, Head};
use crate::process::{self, Exit, KILL_WAIT, RUN_ID_VARIABLE, Supervised, spawn_supervised};
use crate::schedule::run_as::Identity;

/// How long output is still read after the command exits: background processes it left behind
/// may hold its pipes open for ever.
const OUTPUT_DRAIN: Duration = Duration::from_millis(500);

/// Runs a job's command.
///
/// Jobs without a registered handler run with the default one; registering one gives a job's
/// commands another grace:
///
/// ```no_run
/// use std::time::Duration;
///
/// use redcron::handler::CommandHandler;
/// use redcron::replica::Replica;
///
/// # fn example(store: redcron::store::Store) {
/// // A database dump that needs time to exit cleanly after SIGTERM.
/// let dump = CommandHandler { kill_grace: Duration::from_secs(120) };
/// let replica = Replica::builder(store).handler("db-dump", dump).build();
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct CommandHandler {
    /// After SIGTERM, how long the run's processes have before SIGKILL.
    pub kill_grace: Duration,
}

impl Default for CommandHandler {
    fn default() -> Self {
        Self {
            kill_grace: Duration::from_secs(10),
        }
    }
}

impl Handler for CommandHandler {
    fn call(&self, run: RunContext) -> BoxFuture<Outcome> {
        let grace = self.kill_grace;
        Box::pin(execute(run, grace))
    }

    /// The kill grace, then time for the run's killed processes to be reaped and its output
    /// read: a command is SIGKILLed, not dropped.
    fn stop_grace(&self) -> Duration {
        self.kill_grace + REAP_AFTER_KILL
    }
}

/// How long a command SIGKILLed at the end of its kill grace may take to be reaped, its output
/// read after it: more than [`KILL_WAIT`], so that the handler still reports what happened.
const REAP_AFTER_KILL: Duration = Duration::from_secs(5);

async fn execute(run: RunContext, grace: Duration) -> Outcome {
    let job = &run.job;
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&job.command)
        .envs(&job.env)
        .env("REDCRON_JOB", &job.name)
        .env(RUN_ID_VARIABLE, &run.run_id)
        .env("REDCRON_ATTEMPT", run.attempt.to_string())
        .stdin(Stdio::piped());
    // One pipe for stdout and stderr, as cron gives a job: its lines are kept, logged and
    // mailed in the order the command wrote them.
    let output = std::io::pipe()
        .and_then(|(reader, writer)| {
            command.stderr(writer.try_clone()?).stdout(writer);
            tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())
        })
        .map_err(|error| RunError::retryable(format!("cannot make the output pipe: {error}")))?;
    if let Some(fire) = run.fire_time {
        command.env(
            "REDCRON_FIRE_TIME",
            fire.to_rfc3339_opts(SecondsFormat::Secs, true),
        );
    }
    if let Some(workdir) = &job.workdir {
        command.current_dir(workdir);
    }
    let identity = match job.user.as_deref() {
        // Resolved at every run, as cron does: accounts change while a replica runs.
        Some(user) => Identity::resolve(user, job.group.as_deref())
            .map_err(|problem| RunError::permanent(format!("job {}: {problem}", job.name)))?,
        None => None,
    };
    if let Some(identity) = &identity {
        // As cron sets them for a user's crontab, unless the job sets them itself.
        let home = identity.home.to_string_lossy();
        for (name, value) in [
            ("HOME", home.as_ref()),
            ("USER", identity.name.as_str()),
            ("LOGNAME", identity.name.as_str()),
        ] {
            if !job.env.contains_key(name) {
                command.env(name, value);
            }
        }
    }
    let spawned = spawn_supervised(&mut command, identity);
    // The command keeps its copies of the pipe's writing end until it is dropped: the output
    // ends only once no process but the command's own holds one.
    drop(command);
    let mut supervised = spawned.map_err(|error| {
        RunError::retryable(format!(
            "cannot start `/bin/sh -c` for job {}: {error}",
            job.name
        ))
    })?;
    if let Some(mut stdin) = supervised.child().stdin.take() {
        let payload = run.payload.clone().unwrap_or_default();
        // A command that never reads its input must not block the run.
        tokio::spawn(async move {
            let _ = stdin.write_all(payload.as_bytes()).await;
        });
    }
    let captured = Arc::new(Mutex::new(Captured {
        tail: run.output.clone(),
        sink: Sink::new(&job.output, &run.run_id, &job.name),
        head: Head::for_job(job),
    }));
    let reader = tokio::spawn(collect(output, captured.clone()));

    let status = tokio::select! {
        status = supervised.wait() => status,
        () = run.stop.cancelled() => terminate(&mut supervised, &run, grace).await,
    };
    if let Ok(Exit::SupervisorKilled(swept)) = &status
        && swept.left > 0
    {
        error!(
            run = run.run_id,
            job = job.name,
            left = swept.left,
            wait = %humantime::format_duration(KILL_WAIT),
            "processes of the run whose supervisor was killed still live after SIGKILL: they \
             may overlap the run's next attempt"
        );
    }
    if tokio::time::timeout(OUTPUT_DRAIN, reader).await.is_err() {
        // Still held open by a background process: keep what was read.
    }
    let output = captured
        .lock()
        .map(|mut captured| {
            if let Some(sink) = &mut captured.sink {
                sink.finish();
            }
            if let Some(head) = captured.head.take()
                && let Some(whole) = head.finish(OUTPUT_TAIL_BYTES)
            {
                spool::keep(&run.run_id, run.attempt, whole);
            }
            captured.tail.text()
        })
        .unwrap_or_default();
    outcome(status, output)
}

fn outcome(status: std::io::Result<Exit>, output: String) -> Outcome {
    let status =
        status.map_err(|error| RunError::retryable(format!("waiting for the command: {error}")))?;
    let status = match status {
        Exit::Ended(status) => status,
        Exit::SupervisorKilled(swept) => {
            return Err(RunError {
                retryable: true,
                message: swept.to_string(),
                exit_code: None,
                output,
            });
        }
    };
    match (status.code(), status.signal()) {
        (Some(0), _) => Ok(Completed {
            exit_code: Some(0),
            output,
        }),
        (Some(code), _) => Err(RunError {
            retryable: true,
            message: format!("exit status {code}"),
            exit_code: Some(code),
            output,
        }),
        (None, signal) => Err(RunError {
            retryable: true,
            message: format!("killed by signal {}", signal.unwrap_or_default()),
            exit_code: None,
            output,
        }),
    }
}

/// SIGTERM to every process of the run, SIGKILL to whatever is left of them after `grace`;
/// returns once none of them runs (the supervisor, their subreaper, exits only then), so that
/// the run is never handed back, retried or recorded while a process of it lives on. Processes
/// that cannot be killed (stuck in the kernel, or set-user-ID ones a replica that is not root
/// may not signal) are waited for [`KILL_WAIT`] at most, and logged.
async fn terminate(
    supervised: &mut Supervised,
    run: &RunContext,
    grace: Duration,
) -> std::io::Result<Exit> {
    let Some(supervisor) = supervised.child().id() else {
        // Already reaped: nothing to signal.
        return supervised.wait().await;
    };
    process::stop_tree(supervisor);
    if let Ok(status) = tokio::time::timeout(grace, supervised.wait()).await {
        return status;
    }
    // Only while it is not reaped: its pid may name another process since.
    if let Some(supervisor) = supervised.child().id() {
        process::end_tree(supervisor);
    }
    match tokio::time::timeout(KILL_WAIT, supervised.wait()).await {
        Ok(status) => status,
        Err(_) => {
            error!(
                run = run.run_id,
                job = run.job.name,
                supervisor,
                wait = %humantime::format_duration(KILL_WAIT),
                "processes of the run still live after SIGKILL: they may overlap the run's next \
                 attempt; see the processes under its supervisor (redcron-run)"
            );
            Err(std::io::Error::other(format!(
                "processes of the run still lived {} after SIGKILL",
                humantime::format_duration(KILL_WAIT)
            )))
        }
    }
}

/// What is kept of a run's output while it runs: its tail (published while the run runs),
/// where else its lines go, and its beginning for a job that mails it.
struct Captured {
    tail: LiveOutput,
    sink: Option<Sink>,
    head: Option<Head>,
}

async fn collect(mut stream: impl AsyncRead + Unpin, captured: Arc<Mutex<Captured>>) {
    let mut buffer = [0u8; 4096];
    let mut lines = Lines::default();
    while let Ok(read) = stream.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        if let Ok(mut captured) = captured.lock() {
            let Captured { tail, sink, head } = &mut *captured;
            tail.push(&buffer[..read]);
            if let Some(head) = head {
                head.push(&buffer[..read]);
            }
            if let Some(sink) = sink {
                lines.push(&buffer[..read], sink);
            }
        }
    }
    if let Ok(mut captured) = captured.lock()
        && let Some(sink) = &mut captured.sink
    {
        lines.end(sink);
    }
}

#[cfg(test)]
mod tests {
    use nix::sys::signal::Signal;
    use nix::unistd::Pid;

    use super::*;

    use crate::schedule::parse_file;
    use std::path::Path;
    use tokio_util::sync::CancellationToken;

    fn context(command: &str, payload: Option<&str>) -> RunContext {
        let text = format!(
            "[jobs.probe]\ncommand = {}\nenv = {{ GREETING = \"hello\" }}\n",
            toml::Value::String(command.to_owned())
        );
        let job = parse_file(Path::new("test.toml"), &text)
            .expect("valid test job")
            .remove(0);
        RunContext {
            run_id: "probe@1767225600000".to_owned(),
            job: Arc::new(job),
            attempt: 2,
            fire_time: chrono::DateTime::from_timestamp(1_767_225_600, 0),
            payload: payload.map(str::to_owned),
            stop: CancellationToken::new(),
            output: LiveOutput::default(),
        }
    }

    #[tokio::test]
    async fn runs_under_sh_with_the_run_in_its_environment() {
        let outcome = CommandHandler::default()
            .call(context(
                "echo \"$GREETING $REDCRON_JOB $REDCRON_RUN_ID $REDCRON_ATTEMPT $REDCRON_FIRE_TIME\"",
                None,
            ))
            .await;
        assert_eq!(
            outcome,
            Ok(Completed {
                exit_code: Some(0),
                output: "hello probe probe@1767225600000 2 2026-01-01T00:00:00Z\n".to_owned(),
            })
        );
    }

    #[tokio::test]
    async fn the_payload_arrives_on_stdin_and_never_on_the_command_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let marker = dir.path().join("injected");
        let payload = format!(
            "{{\"to\": \"$(touch {0}); `touch {0}`\"}}",
            marker.display()
        );
        let outcome = CommandHandler::default()
            .call(context("cat", Some(&payload)))
            .await
            .expect("cat succeeds");
        assert_eq!(outcome.output, payload);
        assert!(!marker.exists(), "the payload was executed");
    }

    #[tokio::test]
    async fn a_failing_command_reports_its_exit_code_and_output() {
        let error = CommandHandler::default()
            .call(context("echo oops >&2; exit 3", None))
            .await
            .expect_err("exit 3 fails");
        assert_eq!(error.exit_code, Some(3));
        assert_eq!(error.message, "exit status 3");
        assert_eq!(error.output, "oops\n");
        assert!(error.retryable);
    }

    #[tokio::test]
    async fn stdout_and_stderr_are_kept_in_the_order_they_were_written() {
        let command = "for i in 1 2 3 4 5 6 7 8; do echo out $i; echo err $i >&2; done";
        let completed = CommandHandler::default()
            .call(context(command, None))
            .await
            .expect("it succeeds");
        let expected: String = (1..=8).map(|i| format!("out {i}\nerr {i}\n")).collect();
        assert_eq!(completed.output, expected);
    }

    #[tokio::test]
    async fn only_the_tail_of_long_output_is_kept() {
        let completed = CommandHandler::default()
            .call(context("seq 1 100000", None))
            .await
            .expect("seq succeeds");
        assert_eq!(completed.output.len(), OUTPUT_TAIL_BYTES);
        assert!(completed.output.starts_with(super::super::live::CUT_MARK));
        assert!(completed.output.ends_with("99999\n100000\n"));
    }

    #[tokio::test]
    async fn stopping_kills_the_whole_group_even_children_that_ignore_sigterm() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("child.pid");
        let command = format!(
            "sh -c 'trap \"\" TERM; echo $$ > {}; sleep 60' & wait",
            pid_file.display()
        );
        let run = context(&command, None);
        let stop = run.stop.clone();
        let handler = CommandHandler {
            kill_grace: Duration::from_millis(300),
        };
        let task = tokio::spawn(handler.call(run));
        let child = pid_in(&pid_file).await;
        stop.cancel();
        let outcome = task.await.expect("handler task");
        assert!(outcome.is_err(), "a stopped command did not complete");
        // The child ignored SIGTERM; SIGKILL after the grace took it.
        assert!(
            eventually(Duration::from_secs(1), || !running(child)).await,
            "the child that ignored SIGTERM is still running"
        );
    }

    #[tokio::test]
    async fn a_stopped_command_returns_only_once_its_escaped_processes_are_dead() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pids = |name: &str| dir.path().join(name).display().to_string();
        // One that left the group and its session and ignores SIGTERM, one that left them and
        // does not, and one in the group: the shell's end must not end the wait for them.
        let command = format!(
            "setsid sh -c 'trap \"\" TERM; echo $$ > {stubborn}; exec sleep 60' & \
             setsid sh -c 'echo $$ > {escaped}; exec sleep 60' & \
             sh -c 'echo $$ > {grouped}; exec sleep 60' & \
             sleep 60",
            stubborn = pids("stubborn"),
            escaped = pids("escaped"),
            grouped = pids("grouped"),
        );
        let run = context(&command, None);
        let stop = run.stop.clone();
        let handler = CommandHandler {
            kill_grace: Duration::from_millis(300),
        };
        let task = tokio::spawn(handler.call(run));
        let mut tree = Vec::new();
        for name in ["stubborn", "escaped", "grouped"] {
            tree.push(pid_in(&dir.path().join(name)).await);
        }
        stop.cancel();
        let error = task
            .await
            .expect("handler task")
            .expect_err("a stopped command fails");
        assert_none_running(&tree);
        // What ended the shell, not what ended the processes it left.
        assert_eq!(error.message, "killed by signal 15");
    }

    /// Whether `pid` runs: a zombie waiting to be reaped counts as gone.
    /// Fails naming the processes of `tree` still running once the handler returned, after
    /// killing them so that a failed test leaves none behind.
    fn assert_none_running(tree: &[i32]) {
        let left: Vec<i32> = tree.iter().copied().filter(|pid| running(*pid)).collect();
        for pid in &left {
            let _ = nix::sys::signal::kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
        assert!(
            left.is_empty(),
            "still running once the handler returned: {left:?}"
        );
    }

    fn running(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
        })
    }

    /// Polls `condition` every 10 ms until it holds or `limit` passes; whether it held.
    async fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            if condition() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        condition()
    }

    /// The pid a command wrote to `path`, once it has.
    async fn pid_in(path: &Path) -> i32 {
        let written = eventually(Duration::from_secs(5), || {
            std::fs::read_to_string(path).is_ok_and(|text| text.ends_with('\n'))
        })
        .await;
        assert!(written, "no pid was written to {}", path.display());
        std::fs::read_to_string(path)
            .expect("pid file")
            .trim()
            .parse()
            .expect("a pid")
    }

    #[tokio::test]
    async fn a_command_killed_by_a_signal_reports_that_signal() {
        // USR1 is also the signal the supervisor between replica and shell waits for.
        for (signal, number) in [("TERM", 15), ("KILL", 9), ("USR1", 10)] {
            let error = CommandHandler::default()
                .call(context(&format!("echo before; kill -{signal} $$"), None))
                .await
                .expect_err("a killed command fails");
            assert_eq!(
                (
                    error.message.as_str(),
                    error.exit_code,
                    error.output.as_str()
                ),
                (
                    format!("killed by signal {number}").as_str(),
                    None,
                    "before\n"
                ),
                "SIG{signal}"
            );
            assert!(error.retryable);
        }
    }

    #[tokio::test]
    async fn a_stopped_command_reports_the_sigterm_that_ended_it() {
        let run = context("echo started; sleep 60", None);
        let stop = run.stop.clone();
        let task = tokio::spawn(CommandHandler::default().call(run));
        stop.cancel();
        let error = task
            .await
            .expect("handler task")
            .expect_err("a stopped command fails");
        assert_eq!(error.message, "killed by signal 15");
        assert_eq!(error.exit_code, None);
    }

    /// Starts a run whose command leaves one process in the run's group and one that left it
    /// (and its session) with setsid, and waits for them: the handler's task, and the pids of
    /// those two and of the shell, in that order.
    async fn start_tree(
        dir: &std::path::Path,
    ) -> (
        tokio::task::JoinHandle<Result<Completed, RunError>>,
        Vec<i32>,
    ) {
        let pids = |name: &str| dir.join(name).display().to_string();
        let command = format!(
            "sh -c 'echo $$ > {grouped}; exec sleep 60' & \
             setsid sh -c 'echo $$ > {escaped}; exec sleep 60' & \
             echo $$ > {shell}; wait",
            grouped = pids("grouped"),
            escaped = pids("escaped"),
            shell = pids("shell"),
        );
        let task = tokio::spawn(CommandHandler::default().call(context(&command, None)));
        let mut tree = Vec::new();
        for name in ["grouped", "escaped", "shell"] {
            tree.push(pid_in(&dir.join(name)).await);
        }
        (task, tree)
    }

    #[tokio::test]
    async fn a_run_dropped_half_way_takes_its_whole_tree_along() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (task, tree) = start_tree(dir.path()).await;
        task.abort();
        assert!(task.await.is_err_and(|error| error.is_cancelled()));
        assert!(
            eventually(Duration::from_secs(5), || !tree
                .iter()
                .any(|pid| running(*pid)))
            .await,
            "still running after their run was dropped: {:?}",
            tree.iter().filter(|pid| running(**pid)).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn a_command_whose_supervisor_was_killed_ends_once_its_whole_tree_is_dead() {
        let dir = tempfile::tempdir().expect("temp dir");
        let (task, tree) = start_tree(dir.path()).await;
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", tree[2])).expect("stat");
        let supervisor: i32 = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
            .expect("the shell's parent");
        nix::sys::signal::kill(Pid::from_raw(supervisor), Signal::SIGKILL)
            .expect("kill the supervisor");
        let error = task
            .await
            .expect("handler task")
            .expect_err("a run whose supervisor was killed fails");
        assert_none_running(&tree);
        // Two sleeps, and the shell when its own death signal had not yet ended it.
        assert!(
            error
                .message
                .starts_with("its supervisor (redcron-run) was killed by signal 9; ")
                && error
                    .message
                    .ends_with(" processes of it still ran and were killed"),
            "{}",
            error.message
        );
        assert_eq!(error.exit_code, None);
        assert!(error.retryable);
    }

    #[tokio::test]
    async fn a_command_that_ends_leaves_its_background_processes_running_as_cron_does() {
        let dir = tempfile::tempdir().expect("temp dir");
        let pid_file = dir.path().join("background");
        let command = format!(
            "sh -c 'echo $$ > {}; exec sleep 60' > /dev/null 2>&1 &",
            pid_file.display()
        );
        let completed = CommandHandler::default()
            .call(context(&command, None))
            .await
            .expect("the command succeeds");
        assert_eq!(completed.exit_code, Some(0));
        let background = pid_in(&pid_file).await;
        let alive = running(background);
        let _ = nix::sys::signal::kill(Pid::from_raw(background), Signal::SIGKILL);
        assert!(alive, "the background process did not outlive its command");
    }
}
