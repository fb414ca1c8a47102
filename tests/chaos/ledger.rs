//! The jobs, the ledger they write outside Redis, and the comparison of the ledger with the fires
//! the schedules define.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

/// How a job behaves, and so what the ledger must show for each of its fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Runs once; a run whose replica died runs again (at-least-once), and completes.
    AtLeastOnce,
    /// Runs at most once; a run whose replica died goes to the dead letters as `lost`.
    AtMostOnce,
    /// Crashes (`kill -9` of its own shell) on every attempt: dead after its 3 attempts.
    AlwaysCrashes,
}

/// A job the runner declares: it fires when the epoch second is `offset` modulo `period`.
#[derive(Debug, Clone, Copy)]
pub struct JobSpec {
    pub name: &'static str,
    schedule: &'static str,
    period_s: i64,
    offset_s: i64,
    /// Seconds it sleeps between its `start` and `end` records.
    sleep_s: u32,
    pub kind: Kind,
}

/// The jobs: one every second, long ones (6 s) of each delivery every 15 s, and one that
/// always crashes every 30 s.
pub const JOBS: [JobSpec; 4] = [
    JobSpec {
        name: "tick",
        schedule: "* * * * * *",
        period_s: 1,
        offset_s: 0,
        sleep_s: 0,
        kind: Kind::AtLeastOnce,
    },
    JobSpec {
        name: "long-again",
        schedule: "0,15,30,45 * * * * *",
        period_s: 15,
        offset_s: 0,
        sleep_s: 6,
        kind: Kind::AtLeastOnce,
    },
    JobSpec {
        name: "long-once",
        schedule: "7,22,37,52 * * * * *",
        period_s: 15,
        offset_s: 7,
        sleep_s: 6,
        kind: Kind::AtMostOnce,
    },
    JobSpec {
        name: "crash",
        schedule: "20,50 * * * * *",
        period_s: 30,
        offset_s: 20,
        sleep_s: 0,
        kind: Kind::AlwaysCrashes,
    },
];

/// How many attempts [`Kind::AlwaysCrashes`] gets.
const CRASH_ATTEMPTS: u32 = 3;

/// The schedule file declaring [`JOBS`], whose runs append to `ledger`. Start times come from
/// `date` with libfaketime taken out of its environment: the ledger uses the real clock even
/// on a replica whose clock is skewed.
pub fn schedule_file(ledger: &Path) -> String {
    let record = |tag: &str| {
        format!(
            "echo \"$REDCRON_RUN_ID $(env -u LD_PRELOAD -u FAKETIME date +%s%3N) \
             $REDCRON_ATTEMPT {tag}\" >> {}",
            ledger.display()
        )
    };
    let mut file = String::new();
    for job in JOBS {
        let command = match job.kind {
            Kind::AlwaysCrashes => format!("{}; kill -9 $$", record("start")),
            _ if job.sleep_s > 0 => {
                format!(
                    "{}; sleep {}; {}",
                    record("start"),
                    job.sleep_s,
                    record("end")
                )
            }
            _ => record("start"),
        };
        let delivery = match job.kind {
            Kind::AtMostOnce => "at-most-once",
            _ => "at-least-once",
        };
        // Overlap allowed: a frozen or killed replica holds a job's overlap lock until its
        // lease expires, which would skip fires for reasons this runner is not about.
        writeln!(
            file,
            "[jobs.{}]\nschedule = \"{}\"\ndelivery = \"{delivery}\"\noverlap = \"allow\"\n\
             retries = {}\nbackoff = \"1s\"\ncommand = '''{command}'''\n",
            job.name,
            job.schedule,
            CRASH_ATTEMPTS - 1,
        )
        .expect("writing to a String");
    }
    file
}

/// One line of the ledger.
#[derive(Debug, Clone)]
pub struct Entry {
    pub run: String,
    pub at_ms: i64,
    pub attempt: u32,
    pub tag: String,
}

/// Every well-formed line of the ledger at `path` (a line cut by a kill is left out).
pub fn read(path: &Path) -> Vec<Entry> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            Some(Entry {
                run: words.next()?.to_owned(),
                at_ms: words.next()?.parse().ok()?,
                attempt: words.next()?.parse().ok()?,
                tag: words.next()?.to_owned(),
            })
        })
        .collect()
}

/// What Redis holds about one run at the end.
#[derive(Debug, Clone, Default)]
pub struct RunRecord {
    pub state: Option<String>,
    pub reason: Option<String>,
    /// How many times its replica died under it.
    pub lost: u32,
}

/// The ledger against the schedules.
#[derive(Debug, Default)]
pub struct Verdict {
    pub fires_expected: usize,
    pub executed: usize,
    pub missed: usize,
    pub duplicated: usize,
    pub reruns_after_lost: usize,
    /// Fires within a Redis crash's fsync window that ran zero times or twice: the documented
    /// loss of `appendfsync everysec`.
    pub fsync_window_missed: usize,
    pub fsync_window_duplicated: usize,
    /// At-most-once runs recorded dead as `lost` (their replica died, or Redis was away longer
    /// than their lease), as documented: never run twice.
    pub dead_lost: usize,
    /// Start minus fire time of each fire's first start, ms, sorted.
    pub lags: Vec<i64>,
    /// Broken invariants, one line each.
    pub violations: Vec<String>,
}

impl Verdict {
    /// The `p`-quantile of the lags, 0 when there are none.
    pub fn lag(&self, p: f64) -> i64 {
        if self.lags.is_empty() {
            return 0;
        }
        let index = ((self.lags.len() - 1) as f64 * p).round() as usize;
        self.lags[index]
    }
}

/// Compares `ledger` with every fire of [`JOBS`] in `[from, to]` (ms); fires inside one of
/// `fsync_windows` may be lost or doubled by a Redis crash and are counted apart. `record`
/// looks a run up in Redis.
pub fn judge(
    ledger: &[Entry],
    from: i64,
    to: i64,
    fsync_windows: &[(i64, i64)],
    mut record: impl FnMut(&str) -> RunRecord,
) -> Verdict {
    let mut by_run: HashMap<&str, Vec<&Entry>> = HashMap::new();
    for entry in ledger {
        by_run.entry(entry.run.as_str()).or_default().push(entry);
    }
    let mut verdict = Verdict::default();
    for job in JOBS {
        for fire in fires(job, from, to) {
            verdict.fires_expected += 1;
            let run = format!("{}@{fire}", job.name);
            let entries = by_run.get(run.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let in_fsync_window = fsync_windows
                .iter()
                .any(|(start, end)| (*start..=*end).contains(&fire));
            judge_fire(
                &mut verdict,
                job,
                &run,
                fire,
                entries,
                in_fsync_window,
                &mut record,
            );
        }
    }
    verdict.lags.sort_unstable();
    verdict
}

fn judge_fire(
    verdict: &mut Verdict,
    job: JobSpec,
    run: &str,
    fire: i64,
    entries: &[&Entry],
    in_fsync_window: bool,
    record: &mut impl FnMut(&str) -> RunRecord,
) {
    let starts: Vec<&Entry> = entries
        .iter()
        .copied()
        .filter(|entry| entry.tag == "start")
        .collect();
    if let Some(first) = starts.iter().map(|entry| entry.at_ms).min() {
        verdict.executed += 1;
        verdict.lags.push(first - fire);
        if first < fire {
            verdict.violations.push(format!(
                "{run} started {} ms before its fire time",
                fire - first
            ));
        }
    }
    let stored = record(run);
    // A run executes once per attempt, plus once per replica that died under it.
    let allowed_starts = match job.kind {
        Kind::AtLeastOnce => 1 + stored.lost as usize,
        Kind::AtMostOnce => 1,
        Kind::AlwaysCrashes => CRASH_ATTEMPTS as usize + stored.lost as usize,
    };
    let expected_starts = match job.kind {
        Kind::AlwaysCrashes => CRASH_ATTEMPTS as usize,
        _ => 1,
    };
    if starts.is_empty() {
        if job.kind == Kind::AtMostOnce && stored.reason.as_deref() == Some("lost") {
            // Claimed ahead by a replica that died before starting it: dead as lost.
            verdict.dead_lost += 1;
        } else if in_fsync_window {
            verdict.fsync_window_missed += 1;
        } else {
            verdict.missed += 1;
            verdict
                .violations
                .push(format!("{run} never started (state {:?})", stored.state));
        }
        return;
    }
    if starts.len() > expected_starts {
        let reruns = (starts.len() - expected_starts).min(allowed_starts - expected_starts);
        verdict.reruns_after_lost += reruns;
        let extra = starts.len() - expected_starts - reruns;
        if extra > 0 {
            if in_fsync_window {
                verdict.fsync_window_duplicated += extra;
            } else {
                verdict.duplicated += extra;
                verdict.violations.push(format!(
                    "{run} started {} times (lost {} times): {:?}",
                    starts.len(),
                    stored.lost,
                    starts.iter().map(|entry| entry.at_ms).collect::<Vec<_>>()
                ));
            }
        }
    }
    let ended = entries.iter().any(|entry| entry.tag == "end");
    let outcome_ok = match job.kind {
        Kind::AtLeastOnce => {
            stored.state.as_deref() == Some("succeeded") && (job.sleep_s == 0 || ended)
        }
        // Recorded dead as lost also when it did end: its lease expired while Redis was away
        // longer than the lease, and its success came too late (a documented case).
        Kind::AtMostOnce => {
            (ended && stored.state.as_deref() == Some("succeeded"))
                || (stored.state.as_deref() == Some("dead")
                    && stored.reason.as_deref() == Some("lost"))
        }
        Kind::AlwaysCrashes => {
            stored.state.as_deref() == Some("dead")
                && (1..=CRASH_ATTEMPTS)
                    .all(|attempt| starts.iter().any(|entry| entry.attempt == attempt))
        }
    };
    if job.kind == Kind::AtMostOnce && stored.state.as_deref() == Some("dead") && outcome_ok {
        verdict.dead_lost += 1;
    }
    if !outcome_ok && !in_fsync_window {
        verdict.violations.push(format!(
            "{run}: state {:?}, reason {:?}, {} starts, ended {ended}",
            stored.state,
            stored.reason,
            starts.len()
        ));
    }
}

/// The fires of `job` in `[from, to]`, ms.
fn fires(job: JobSpec, from: i64, to: i64) -> impl Iterator<Item = i64> {
    let first_second = from.div_euclid(1000) + i64::from(from.rem_euclid(1000) != 0);
    (first_second..=to.div_euclid(1000))
        .filter(move |second| second.rem_euclid(job.period_s) == job.offset_s)
        .map(|second| second * 1000)
}
