//! The system under test: a Redis (one `redis-server` with AOF on, a Sentinel setup or a Redis
//! Cluster) and N `redcron run` replicas, each on a schedule directory of its own, and the ways
//! to hurt them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::Signal;
use tempfile::TempDir;

use crate::ledger::Deploy;
use crate::plan::{DEPLOY_STEP, DOWN};
use crate::replica::ReplicaProcess;
use crate::topology::{Locator, Redis};

/// The namespace the test replicas use.
pub const NAMESPACE: &str = "test";

/// The keys of that namespace, built as redcron builds them.
pub fn keys() -> redcron::store::Keys {
    redcron::store::Keys::new(NAMESPACE)
}

/// How long finished runs are kept: short, so that the memory check sees them expire.
const RETENTION: &str = "10s";

/// The variable that tells a job's command which replica runs it.
pub const REPLICA_VARIABLE: &str = "CHAOS_REPLICA";

/// The label of every replica but the last, which the every-replica job's `where` names.
pub const WEB_ROLE: &str = "role=web";

/// The label of the last replica, which the every-replica job leaves out.
const DB_ROLE: &str = "role=db";

/// The schedule file of a version of the jobs, whose runs append to the ledger at the path
/// given.
pub type Jobs = fn(&Path, u32) -> String;

/// A replica's clock offset, through libfaketime.
#[derive(Debug, Clone, Copy)]
pub enum Skew {
    Ahead,
    Behind,
}

impl Skew {
    fn faketime(self) -> &'static str {
        match self {
            Skew::Ahead => "+5m",
            Skew::Behind => "-5m",
        }
    }
}

/// One replica slot: its process while it runs, and how it was started.
struct Slot {
    id: String,
    process: Option<ReplicaProcess>,
    skew: Option<Skew>,
    incarnation: u32,
    /// The version of the schedule files in its directory.
    version: u32,
}

/// Redis, the replicas, and the directory that holds their schedules, logs and the ledger.
pub struct Cluster {
    pub redis: Redis,
    /// How to reach the node that holds the namespace.
    locator: Locator,
    /// Flags every replica runs with beside the runner's own (`--replicated-writes N`).
    flags: Vec<String>,
    dir: TempDir,
    slots: Vec<Slot>,
    faketime_library: Option<PathBuf>,
    jobs: Jobs,
}

impl Cluster {
    /// Starts `replicas` replicas on `redis`, with `flags` added, on version 0 of the schedule
    /// files `jobs`; with `skewed`, the second replica's clock runs 5 minutes ahead and the
    /// third's 5 minutes behind. Each but the last carries [`WEB_ROLE`], the last
    /// [`DB_ROLE`].
    pub fn start(
        redis: Redis,
        replicas: usize,
        flags: Vec<String>,
        skewed: bool,
        jobs: Jobs,
    ) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        for sub in ["schedules", "logs"] {
            std::fs::create_dir(dir.path().join(sub)).expect("create a directory");
        }
        let slots = (0..replicas)
            .map(|index| Slot {
                id: format!("r{}", index + 1),
                process: None,
                skew: match index {
                    1 if skewed => Some(Skew::Ahead),
                    2 if skewed => Some(Skew::Behind),
                    _ => None,
                },
                incarnation: 0,
                version: 0,
            })
            .collect();
        let mut cluster = Self {
            locator: redis.locator(),
            redis,
            flags,
            dir,
            slots,
            faketime_library: skewed.then(faketime_library),
            jobs,
        };
        for index in 0..replicas {
            cluster.write_schedules(index);
            cluster.start_replica(index);
        }
        cluster
    }

    /// Writes replica `index`'s schedule directory for its version.
    fn write_schedules(&self, index: usize) {
        let slot = &self.slots[index];
        let schedules = self.schedules(index);
        std::fs::create_dir_all(&schedules).expect("create a schedule directory");
        std::fs::write(
            schedules.join("chaos.toml"),
            (self.jobs)(&self.ledger_path(), slot.version),
        )
        .expect("write the schedule file");
    }

    fn schedules(&self, index: usize) -> PathBuf {
        self.dir
            .path()
            .join("schedules")
            .join(&self.slots[index].id)
    }

    /// The ledger file the jobs append to.
    pub fn ledger_path(&self) -> PathBuf {
        self.dir.path().join("ledger")
    }

    /// Starts replica `index` (again), logging to a file of its own for this incarnation.
    pub fn start_replica(&mut self, index: usize) {
        let role = if index + 1 == self.slots.len() {
            DB_ROLE
        } else {
            WEB_ROLE
        };
        let slot = &mut self.slots[index];
        slot.incarnation += 1;
        let log_dir = self
            .dir
            .path()
            .join("logs")
            .join(format!("{}.{}", slot.id, slot.incarnation));
        std::fs::create_dir(&log_dir).expect("create a log directory");
        let library = self
            .faketime_library
            .as_ref()
            .map(|path| path.to_string_lossy().into_owned());
        let mut env: Vec<(&str, &str)> = match (slot.skew, &library) {
            (Some(skew), Some(library)) => {
                vec![("LD_PRELOAD", library), ("FAKETIME", skew.faketime())]
            }
            _ => Vec::new(),
        };
        // The jobs' commands inherit it: each ledger line names the replica that ran it.
        let id = slot.id.clone();
        env.push((REPLICA_VARIABLE, &id));
        let schedules = self.dir.path().join("schedules").join(&slot.id);
        let mut flags = vec!["--retention", RETENTION, "--label", role];
        flags.extend(self.flags.iter().map(String::as_str));
        slot.process = Some(ReplicaProcess::start_with_env(
            &slot.id,
            &self.redis.url(),
            &schedules,
            &log_dir,
            &flags,
            &env,
        ));
    }

    /// `kill -9`s replica `index`.
    pub fn kill_replica(&mut self, index: usize) {
        if let Some(mut process) = self.slots[index].process.take() {
            process.kill9();
        }
    }

    /// Restarts the replicas one at a time on `version` of the schedule files, as a deploy
    /// does: SIGTERM (each hands back what it has not finished within its shutdown grace),
    /// [`DOWN`], start, and [`DEPLOY_STEP`] before the next. When it began and ended, and the
    /// replicas that did not exit with 0.
    pub fn deploy(&mut self, version: u32) -> (Deploy, Vec<String>) {
        let mut deploy = Deploy {
            version,
            began_ms: now_ms(),
            first_up_ms: 0,
            last_up_ms: 0,
        };
        let mut problems = Vec::new();
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            if let Some(mut process) = slot.process.take() {
                let code = process.terminate(Duration::from_secs(15));
                if code != Some(0) {
                    problems.push(format!("{} exited with {code:?} on SIGTERM", slot.id));
                }
            }
            slot.version = version;
            self.write_schedules(index);
            std::thread::sleep(DOWN);
            self.start_replica(index);
            let up = now_ms();
            if index == 0 {
                deploy.first_up_ms = up;
            }
            deploy.last_up_ms = up;
            if index + 1 < self.slots.len() {
                std::thread::sleep(DEPLOY_STEP);
            }
        }
        (deploy, problems)
    }

    /// Sends `signal` to replica `index`.
    pub fn signal_replica(&self, index: usize, signal: Signal) {
        if let Some(process) = &self.slots[index].process {
            process.signal(signal);
        }
    }

    /// The ids of the replicas labelled [`WEB_ROLE`]: the targets of the every-replica job.
    pub fn web_replicas(&self) -> Vec<String> {
        let web = self.slots.len() - 1;
        self.slots[..web]
            .iter()
            .map(|slot| slot.id.clone())
            .collect()
    }

    /// The replica index of replica id `id`.
    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.slots.iter().position(|slot| slot.id == id)
    }

    /// Replicas that exited although nobody stopped them, with their exit status.
    pub fn unexpected_exits(&mut self) -> Vec<String> {
        self.slots
            .iter_mut()
            .filter_map(|slot| {
                let status = slot.process.as_mut()?.exited()?;
                Some(format!("{} exited: {status}", slot.id))
            })
            .collect()
    }

    /// SIGTERMs every replica and waits for each to exit; the ones that did not exit with 0.
    pub fn stop(&mut self) -> Vec<String> {
        self.slots
            .iter_mut()
            .filter_map(|slot| {
                let code = slot.process.take()?.terminate(Duration::from_secs(15));
                (code != Some(0)).then(|| format!("{} exited with {code:?} on SIGTERM", slot.id))
            })
            .collect()
    }

    /// Every log line of every replica incarnation.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        let logs = self.dir.path().join("logs");
        for entry in std::fs::read_dir(&logs)
            .expect("the log directory")
            .flatten()
        {
            for file in std::fs::read_dir(entry.path())
                .expect("a log directory")
                .flatten()
            {
                all.push_str(&std::fs::read_to_string(file.path()).unwrap_or_default());
            }
        }
        all
    }

    /// Where the replicas' logs and the ledger are, kept when `keep` (to look into a failure).
    pub fn keep_directory(self, keep: bool) -> Option<PathBuf> {
        keep.then(|| self.dir.keep())
    }

    /// A connection to the node that holds the namespace now, which gives up after `timeout`
    /// instead of hanging on a frozen server.
    pub fn connection(&self, timeout: Duration) -> redis::RedisResult<redis::Connection> {
        self.locator.connect(timeout)
    }

    /// How to reach the node that holds the namespace, from another thread.
    pub fn locator(&self) -> Locator {
        self.locator.clone()
    }

    /// The leader's replica id and epoch, when there is one and Redis answers.
    pub fn leader(&self) -> Option<(String, u64)> {
        let mut connection = self.connection(Duration::from_millis(500)).ok()?;
        let token: Option<String> = redis::cmd("GET")
            .arg(keys().leader())
            .query(&mut connection)
            .ok()?;
        parse_token(&token?)
    }
}

/// `<replica id>:<epoch>`.
pub fn parse_token(token: &str) -> Option<(String, u64)> {
    let (id, epoch) = token.rsplit_once(':')?;
    Some((id.to_owned(), epoch.parse().ok()?))
}

/// libfaketime's library, which the `faketime` package installs.
fn faketime_library() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.exists());
    found.unwrap_or_else(|| {
        panic!(
            "the clock-skew scenario needs libfaketime. Install it with `sudo apt-get install -y \
             faketime` (Debian/Ubuntu), or leave the scenario out with --scenario"
        )
    })
}

/// Sleeps until the system clock (which Redis on loopback shares) reads `ms`.
pub fn sleep_until_ms(ms: i64) {
    let wait = ms - now_ms();
    if wait > 0 {
        std::thread::sleep(Duration::from_millis(wait as u64));
    }
}

/// The system clock, ms since the epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}
