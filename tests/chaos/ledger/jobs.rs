//! The jobs the runner declares, version by version, and the schedule file that declares them,
//! whose commands append to the ledger.

use std::fmt::Write as _;
use std::path::Path;

use crate::cluster::{REPLICA_VARIABLE, WEB_ROLE};

/// How a job behaves, and so what the ledger must show for each of its fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Runs once; a run whose replica died runs again (at-least-once), and completes.
    AtLeastOnce,
    /// Runs at most once; a run whose replica died goes to the dead letters as `lost`, one a
    /// replica shutting down stopped mid-run as `interrupted`.
    AtMostOnce,
    /// Crashes (`kill -9` of its own shell) on every attempt: dead after its 3 attempts.
    AlwaysCrashes,
}

/// What a job's table sets beside its schedule and command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settings {
    /// `overlap = "allow"`, its delivery, 2 retries 1 s apart: runs never wait for each other.
    Allow,
    /// Nothing: a scheduled job's defaults, `overlap = "forbid"`, `misfire = "run-once"`,
    /// at-least-once, no retry. A fire due while a run of the job that started by then still
    /// runs is skipped as an overlap; any other waits for its turn.
    Defaults,
}

/// What a job's command does between its `start` and `end` records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Work {
    /// Nothing, and no `end` record.
    Nothing,
    /// Sleeps this many seconds.
    Sleep(u32),
    /// Sleeps 0.3 to 0.8 s, a length that follows from its fire time.
    Varying,
}

impl Work {
    /// How long it takes at most, ms.
    pub(super) fn longest_ms(self) -> i64 {
        match self {
            Work::Nothing => 0,
            Work::Sleep(seconds) => i64::from(seconds) * 1000,
            Work::Varying => 800,
        }
    }
}

/// Which replicas run a job's fires (its `where` and `on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Any replica, once per fire.
    Anywhere,
    /// Once per fire, on the replica with this id alone (`where = ["replica=<id>"]`).
    Pinned(&'static str),
    /// Once per fire on every replica labelled [`WEB_ROLE`] (`on = "every"`).
    EveryWeb,
}

/// The replica the pinned job runs on: the second, there whatever `--replicas` says, and the
/// one whose clock runs ahead in the clock-skew scenario.
pub(super) const PINNED_REPLICA: &str = "r2";

/// A job the runner declares: it fires when the epoch second is `offset_s` modulo `period_s`.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub name: String,
    period_s: i64,
    offset_s: i64,
    pub(super) work: Work,
    pub kind: Kind,
    pub settings: Settings,
    pub placement: Placement,
}

impl JobSpec {
    fn new(name: &str, period_s: i64, offset_s: i64, work: Work) -> Self {
        Self {
            name: name.to_owned(),
            period_s,
            offset_s,
            work,
            kind: Kind::AtLeastOnce,
            settings: Settings::Defaults,
            placement: Placement::Anywhere,
        }
    }

    fn placed(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    fn allow(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self.settings = Settings::Allow;
        self
    }

    /// Its schedule: every `period_s` seconds from `offset_s`, which divides a minute.
    fn schedule(&self) -> String {
        if self.period_s == 1 {
            "* * * * * *".to_owned()
        } else {
            format!("{}-59/{} * * * * *", self.offset_s, self.period_s)
        }
    }

    /// Whether it fires at `fire` (ms).
    pub(super) fn fires_at(&self, fire: i64) -> bool {
        fire.rem_euclid(1000) == 0 && (fire / 1000).rem_euclid(self.period_s) == self.offset_s
    }
}

/// The jobs of `version` of the schedule files (a rolling deploy moves to the next).
///
/// With overlap allowed: one every second, long ones (6 s) of each delivery every 15 s, and one
/// that always crashes every 30 s. With the default settings: one every second, one every
/// second that takes 0.3 to 0.8 s, and the jobs a deploy touches: `shifting`, every 2 s in even
/// versions and every 3 s in odd ones, and `added-N`, every second from version N on. Placed,
/// with the default settings: `every-web` every second on each web replica, and `pinned` every
/// 2 s on [`PINNED_REPLICA`] alone.
pub fn jobs(version: u32) -> Vec<JobSpec> {
    let mut jobs = vec![
        JobSpec::new("tick", 1, 0, Work::Nothing).allow(Kind::AtLeastOnce),
        JobSpec::new("long-again", 15, 0, Work::Sleep(6)).allow(Kind::AtLeastOnce),
        JobSpec::new("long-once", 15, 7, Work::Sleep(6)).allow(Kind::AtMostOnce),
        JobSpec::new("crash", 30, 20, Work::Nothing).allow(Kind::AlwaysCrashes),
        JobSpec::new("beat", 1, 0, Work::Nothing),
        JobSpec::new("busy", 1, 0, Work::Varying),
        JobSpec::new("shifting", 2 + i64::from(version % 2), 0, Work::Nothing),
        JobSpec::new("every-web", 1, 0, Work::Nothing).placed(Placement::EveryWeb),
        JobSpec::new("pinned", 2, 1, Work::Nothing).placed(Placement::Pinned(PINNED_REPLICA)),
    ];
    for added in 1..=version {
        jobs.push(JobSpec::new(&format!("added-{added}"), 1, 0, Work::Nothing));
    }
    jobs
}

/// How many attempts [`Kind::AlwaysCrashes`] gets.
pub(super) const CRASH_ATTEMPTS: u32 = 3;

/// The schedule file declaring the [`jobs`] of `version`, whose runs append to `ledger`. Start
/// times come from `date` with libfaketime taken out of its environment: the ledger uses the
/// real clock even on a replica whose clock is skewed. Each line ends with the replica that
/// ran it ([`REPLICA_VARIABLE`]).
pub fn schedule_file(ledger: &Path, version: u32) -> String {
    let record = |tag: &str| {
        format!(
            "echo \"$REDCRON_RUN_ID $(env -u LD_PRELOAD -u FAKETIME date +%s%3N) \
             $REDCRON_ATTEMPT {tag} ${REPLICA_VARIABLE}\" >> {}",
            ledger.display()
        )
    };
    let mut file = String::new();
    for job in jobs(version) {
        let work = match job.work {
            Work::Nothing => None,
            Work::Sleep(seconds) => Some(format!("sleep {seconds}")),
            Work::Varying => {
                Some("fire=${REDCRON_RUN_ID#*@}; sleep 0.$(( 3 + fire / 1000 * 7 % 6 ))".to_owned())
            }
        };
        let command = match (job.kind, work) {
            (Kind::AlwaysCrashes, _) => format!("{}; kill -9 $$", record("start")),
            (_, Some(work)) => format!("{}; {work}; {}", record("start"), record("end")),
            (_, None) => record("start"),
        };
        writeln!(
            file,
            "[jobs.{}]\nschedule = \"{}\"",
            job.name,
            job.schedule()
        )
        .expect("writing to a String");
        if job.settings == Settings::Allow {
            let delivery = match job.kind {
                Kind::AtMostOnce => "at-most-once",
                _ => "at-least-once",
            };
            writeln!(
                file,
                "delivery = \"{delivery}\"\noverlap = \"allow\"\nretries = {}\nbackoff = \"1s\"",
                CRASH_ATTEMPTS - 1,
            )
            .expect("writing to a String");
        }
        match job.placement {
            Placement::Anywhere => {}
            Placement::Pinned(replica) => {
                writeln!(file, "where = [\"replica={replica}\"]").expect("writing to a String");
            }
            Placement::EveryWeb => {
                writeln!(file, "where = [\"{WEB_ROLE}\"]\non = \"every\"")
                    .expect("writing to a String");
            }
        }
        writeln!(file, "command = '''{command}'''\n").expect("writing to a String");
    }
    file
}
