//! `exec:` targets, and the child processes notices are fed to (`sendmail` too).

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::{DeliveryError, Document};
use crate::process::{Exit, spawn_supervised};

/// The most of a failed command's output that its error keeps.
const ERROR_OUTPUT: usize = 300;

/// How long the output of a command that failed is waited for once it exited.
const OUTPUT_DRAIN: Duration = Duration::from_millis(500);

/// Runs `command` with `/bin/sh -c`, the document as JSON on its standard input and the
/// notice's identity in its environment; delivered when it exits 0.
pub(super) async fn run(
    command: &str,
    document: &Document,
    timeout: Duration,
) -> Result<(), DeliveryError> {
    let mut shell = Command::new("/bin/sh");
    shell
        .arg("-c")
        .arg(command)
        .env("REDCRON_NOTICE", &document.notice)
        .env("REDCRON_NOTICE_EVENT", document.event)
        .env("REDCRON_JOB", &document.job)
        .env("REDCRON_RUN_ID", &document.run);
    let mut input = document.to_json();
    input.push('\n');
    feed(shell, input.as_bytes(), timeout).await
}

/// Starts `command` under a supervisor, writes `input` to its standard input and waits for it
/// to exit 0 within `timeout`. Its whole process tree dies with the replica (a notice half sent
/// by a replica that died is sent again by another, and must not also arrive late from an
/// orphan), when it times out, and when the notice stops being this replica's (the future is
/// dropped).
pub(super) async fn feed(
    mut command: Command,
    input: &[u8],
    timeout: Duration,
) -> Result<(), DeliveryError> {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let program = command
        .as_std()
        .get_program()
        .to_string_lossy()
        .into_owned();
    let mut supervised = spawn_supervised(&mut command, None)
        .map_err(|error| DeliveryError::Transient(format!("cannot start {program}: {error}")))?;
    let child = supervised.child();
    let stdin = child.stdin.take();
    let readers = [
        child.stdout.take().map(|out| tokio::spawn(read_start(out))),
        child.stderr.take().map(|err| tokio::spawn(read_start(err))),
    ];
    let finished = tokio::time::timeout(timeout, async {
        let writing = async {
            if let Some(mut stdin) = stdin {
                // A command that does not read its input is its own business: its exit status
                // says.
                let _ = stdin.write_all(input).await;
            }
        };
        let ((), status) = tokio::join!(writing, supervised.wait());
        status
    })
    .await;
    let status = match finished {
        Err(_) => {
            return Err(DeliveryError::Transient(format!(
                "{program} did not exit within {}",
                humantime::format_duration(timeout)
            )));
        }
        Ok(Err(error)) => {
            return Err(DeliveryError::Transient(format!(
                "cannot wait for {program}: {error}"
            )));
        }
        Ok(Ok(Exit::Ended(status))) => status,
        Ok(Ok(Exit::SupervisorKilled(swept))) => {
            return Err(DeliveryError::Transient(format!("{program}: {swept}")));
        }
    };
    if status.success() {
        return Ok(());
    }
    let [stdout, stderr] = readers;
    let mut said = String::new();
    for reader in [stderr, stdout].into_iter().flatten() {
        // A background process may hold the pipe open: what was read by then will do.
        if let Ok(Ok(text)) = tokio::time::timeout(OUTPUT_DRAIN, reader).await {
            said = text.trim().to_owned();
        }
        if !said.is_empty() {
            break;
        }
    }
    if said.len() > ERROR_OUTPUT {
        let mut end = ERROR_OUTPUT;
        while !said.is_char_boundary(end) {
            end -= 1;
        }
        said.truncate(end);
        said.push('…');
    }
    let status = status.code().map_or_else(
        || "was killed by a signal".to_owned(),
        |code| format!("exited with {code}"),
    );
    Err(DeliveryError::Transient(if said.is_empty() {
        format!("{program} {status}")
    } else {
        format!("{program} {status}: {said}")
    }))
}

/// Reads `stream` to its end, keeping only what an error message may quote of it (the rest is
/// read and dropped, so the command never blocks on a full pipe).
async fn read_start(mut stream: impl AsyncRead + Unpin) -> String {
    let mut kept = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(read) = stream.read(&mut chunk).await {
        if read == 0 {
            break;
        }
        let room = (ERROR_OUTPUT * 4).saturating_sub(kept.len());
        kept.extend_from_slice(&chunk[..read.min(room)]);
    }
    String::from_utf8_lossy(&kept).into_owned()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    use super::*;

    /// The pid in `path` once it is written, and that process's parent.
    async fn written_pid(path: &Path) -> (i32, i32) {
        for _ in 0..500 {
            if let Ok(text) = std::fs::read_to_string(path)
                && let Ok(pid) = text.trim().parse::<i32>()
                && text.ends_with('\n')
            {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
                let parent = stat
                    .rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
                    .expect("a parent");
                return (pid, parent);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no pid was written to {}", path.display());
    }

    #[tokio::test]
    async fn a_notice_command_whose_supervisor_was_killed_fails_once_its_tree_is_dead() {
        let dir = tempfile::tempdir().expect("temp dir");
        let shell = dir.path().join("shell");
        let escaped = dir.path().join("escaped");
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 60' & echo $$ > {}; wait",
            escaped.display(),
            shell.display()
        ));
        let sending =
            tokio::spawn(async move { feed(command, b"{}\n", Duration::from_secs(30)).await });
        let (escaped, _) = written_pid(&escaped).await;
        let (_, supervisor) = written_pid(&shell).await;
        kill(Pid::from_raw(supervisor), Signal::SIGKILL).expect("kill the supervisor");
        let error = sending.await.expect("the sending task");
        let alive = std::fs::read_to_string(format!("/proc/{escaped}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit_once(") ")
                .is_some_and(|(_, s)| s.starts_with('Z'))
        });
        if alive {
            let _ = kill(Pid::from_raw(escaped), Signal::SIGKILL);
        }
        assert!(!alive, "the escaped process outlived the failed try");
        match error {
            Err(DeliveryError::Transient(message)) => assert!(
                message.starts_with("/bin/sh: its supervisor (redcron-run) was killed by signal 9"),
                "{message}"
            ),
            other => panic!("not a failure for now: {other:?}"),
        }
    }
}
