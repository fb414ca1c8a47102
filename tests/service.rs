//! Running as a systemd service: the unit file, and the readiness and watchdog protocol a
//! replica speaks to the service manager.

use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::util::redcron;
use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;

const UNIT: &str = include_str!("../contrib/redcron.service");

#[test]
fn the_unit_file_passes_systemd_analyze_verify_and_its_documentation_exists() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Verified as installed, but with this build's binary in place of /usr/bin/redcron.
    let unit = UNIT.replace("/usr/bin/redcron", env!("CARGO_BIN_EXE_redcron"));
    let path = dir.path().join("redcron.service");
    std::fs::write(&path, unit).expect("write the unit");
    let verified = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap_or_else(|error| {
            panic!(
                "cannot run systemd-analyze ({error}): install it with `sudo apt-get install -y \
                 systemd`"
            )
        });
    assert!(
        verified.status.success() && verified.stderr.is_empty(),
        "systemd-analyze verify: {}",
        String::from_utf8_lossy(&verified.stderr)
    );
    for setting in [
        "Type=notify",
        "NotifyAccess=main",
        "WatchdogSec=",
        "KillMode=mixed",
        "ExecStart=/usr/bin/redcron run --schedules /etc/redcron/schedules --data-dir /var/lib/redcron/redis \
         --replica-id %H",
    ] {
        assert!(
            UNIT.lines().any(|line| line.starts_with(setting)),
            "{setting}"
        );
    }
    // The pages it names are the ones `redcron man --dir` writes.
    let pages = dir.path().join("man1");
    redcron(&["man", "--dir", pages.to_str().expect("a UTF-8 path")]).success();
    let documentation = UNIT
        .lines()
        .find_map(|line| line.strip_prefix("Documentation="))
        .expect("a Documentation= line");
    for page in documentation.split_whitespace() {
        let name = page
            .strip_prefix("man:")
            .and_then(|page| page.strip_suffix("(1)"))
            .unwrap_or_else(|| panic!("{page} is a section 1 man page"));
        assert!(
            pages.join(format!("{name}.1")).exists(),
            "{name}.1 is written by redcron man"
        );
    }
}

/// Messages the "service manager" received on its notify socket, each split into its lines.
fn received(socket: &UnixDatagram, until: Instant, messages: &mut Vec<String>) {
    let mut buffer = [0; 4096];
    while Instant::now() < until {
        match socket.recv(&mut buffer) {
            Ok(length) => messages.push(String::from_utf8_lossy(&buffer[..length]).into_owned()),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {}
            Err(error) => panic!("notify socket: {error}"),
        }
    }
}

#[test]
fn a_replica_tells_the_service_manager_it_is_ready_pings_its_watchdog_and_says_it_stops() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    std::fs::create_dir(&schedules).expect("schedules");
    let job_env = dir.path().join("job.env");
    std::fs::write(
        schedules.join("jobs.toml"),
        format!(
            "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"env > {}\"\n",
            job_env.display()
        ),
    )
    .expect("write jobs");
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).expect("the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("a read timeout");
    let notify_socket = socket_path.to_str().expect("a UTF-8 path");
    let mut replica = ReplicaProcess::start_with_env(
        "r1",
        &server.url(),
        &schedules,
        dir.path(),
        &[],
        // A watchdog of 1 s: pinged every 0.5 s.
        &[
            ("NOTIFY_SOCKET", notify_socket),
            ("WATCHDOG_USEC", "1000000"),
            ("REDIS_URL", "redis://ops:s3cret@127.0.0.1:1/"),
        ],
    );
    let mut messages = Vec::new();
    received(
        &socket,
        Instant::now() + Duration::from_secs(3),
        &mut messages,
    );
    let ready = messages
        .iter()
        .position(|message| message.lines().any(|line| line == "READY=1"))
        .unwrap_or_else(|| panic!("no READY=1 in {messages:?}\n{}", replica.log()));
    let pings = messages[ready..]
        .iter()
        .filter(|message| message.lines().any(|line| line == "WATCHDOG=1"))
        .count();
    assert!(pings >= 3, "{pings} watchdog pings in 3 s: {messages:?}");
    assert!(
        messages[..ready]
            .iter()
            .all(|message| !message.contains("WATCHDOG=1")),
        "no ping before ready: {messages:?}"
    );

    // What the replica was given for itself does not reach its jobs: the Redis password, the
    // service manager's socket.
    let env = std::fs::read_to_string(&job_env).expect("a run wrote its environment");
    for name in ["REDIS_URL=", "NOTIFY_SOCKET=", "WATCHDOG_USEC="] {
        assert!(
            !env.lines().any(|line| line.starts_with(name)),
            "{name} in {env}"
        );
    }
    assert!(env.contains("REDCRON_JOB=tick"), "{env}");

    replica.signal(Signal::SIGTERM);
    let mut stopping = Vec::new();
    received(
        &socket,
        Instant::now() + Duration::from_secs(1),
        &mut stopping,
    );
    assert!(
        stopping
            .iter()
            .any(|message| message.lines().any(|line| line == "STOPPING=1")),
        "no STOPPING=1 after SIGTERM: {stopping:?}"
    );
    assert_eq!(replica.terminate(Duration::from_secs(10)), Some(0));
}
