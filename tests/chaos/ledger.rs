//! The ledger the jobs (`jobs`) write outside Redis, and the comparison of the ledger, and of
//! what Redis recorded, with the fires the schedules define.

use std::collections::HashMap;
use std::path::Path;

use redcron::store::keys::slot_group;

use crate::observe::Observed;
use crate::plan::DEPLOY_SETTLE;

mod every;
mod jobs;

pub use every::PerReplica;
use jobs::{CRASH_ATTEMPTS, Work};
pub use jobs::{JobSpec, Kind, Placement, Settings, jobs, schedule_file};

/// One line of the ledger.
#[derive(Debug, Clone)]
pub struct Entry {
    pub run: String,
    pub at_ms: i64,
    pub attempt: u32,
    pub tag: String,
    /// The id of the replica whose command wrote it.
    pub replica: String,
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
                replica: words.next()?.to_owned(),
            })
        })
        .collect()
}

/// A stretch in which Redis lost writes.
#[derive(Debug, Clone, Copy)]
pub struct Loss {
    pub kind: LossKind,
    pub start_ms: i64,
    pub end_ms: i64,
}

/// How Redis lost writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossKind {
    /// `kill -9` with `appendfsync everysec`: up to about a second of writes. A fire in the
    /// window may run again or not at all.
    Fsync,
    /// A restore from an older snapshot: every write since. A fire in the window may run once
    /// more, but never not at all.
    Restore,
}

impl Loss {
    fn covers(&self, ms: i64) -> bool {
        (self.start_ms..=self.end_ms).contains(&ms)
    }
}

/// One rolling deploy.
#[derive(Debug, Clone, Copy)]
pub struct Deploy {
    /// The version of the schedule files it brings.
    pub version: u32,
    /// When the first replica was stopped.
    pub began_ms: i64,
    /// When the first replica on the new version started.
    pub first_up_ms: i64,
    /// When the last one did.
    pub last_up_ms: i64,
}

/// What happened to the cluster, for what the ledger may show.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    /// The fires judged are those in `[from_ms, to_ms]`.
    pub from_ms: i64,
    pub to_ms: i64,
    pub losses: Vec<Loss>,
    /// In order.
    pub deploys: Vec<Deploy>,
    /// The replicas labelled [`WEB_ROLE`]: each fire of the every-replica job targets them all,
    /// since none stays down near the misfire threshold (60 s).
    pub web_replicas: Vec<String>,
}

/// What a fire's schedules say about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Must run once (or be skipped as an overlap, with the default settings).
    Required,
    /// During a deploy, defined by one version only: may run, once at most.
    Optional,
    /// No version in force defines it: must not run.
    Undefined,
}

/// What `job`'s schedules say about `fire`, given the deploys. Outside a deploy, the version in
/// force decides. During one (from stopping the first replica until [`DEPLOY_SETTLE`] after
/// the last is up) replicas declare both versions: a fire both define must run, one only one
/// defines may; and a job the new version adds must run from [`DEPLOY_SETTLE`] after the first
/// replica declaring it is up, since from then on a live replica can run it.
fn expect(job: &str, fire: i64, deploys: &[Deploy]) -> Expect {
    let defines = |version: u32| {
        jobs(version)
            .iter()
            .any(|spec| spec.name == job && spec.fires_at(fire))
    };
    let declares = |version: u32| jobs(version).iter().any(|spec| spec.name == job);
    let settle = DEPLOY_SETTLE.as_millis() as i64;
    let mut version = 0;
    for deploy in deploys {
        if fire < deploy.began_ms {
            break;
        }
        if fire <= deploy.last_up_ms + settle {
            let (old, new) = (defines(version), defines(deploy.version));
            let added = !declares(version) && new && fire >= deploy.first_up_ms + settle;
            return if (old && new) || added {
                Expect::Required
            } else if old || new {
                Expect::Optional
            } else {
                Expect::Undefined
            };
        }
        version = deploy.version;
    }
    if defines(version) {
        Expect::Required
    } else {
        Expect::Undefined
    }
}

/// What Redis recorded about one run, from every events stream entry seen.
#[derive(Debug, Clone, Default)]
pub struct RunRecord {
    pub state: Option<String>,
    pub reason: Option<String>,
    /// How many times its replica died under it.
    pub lost: u32,
    /// How many times a replica that shut down handed it back.
    pub interrupted: u32,
    /// Whether it was skipped as an overlap.
    pub overlap_skipped: bool,
}

/// Every run's record, from the events seen.
fn records(observed: &Observed) -> HashMap<&str, RunRecord> {
    let mut records: HashMap<&str, RunRecord> = HashMap::new();
    for event in &observed.events {
        let record = records.entry(event.run.as_str()).or_default();
        match (event.state.as_str(), event.reason.as_deref()) {
            ("retrying", Some("lost")) => record.lost += 1,
            ("retrying", Some("interrupted")) => record.interrupted += 1,
            ("skipped", Some("overlap")) => record.overlap_skipped = true,
            _ => {}
        }
        record.state = Some(event.state.clone());
        record.reason = event.reason.clone();
    }
    records
}

/// The ledger and Redis's record against the schedules.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Fires that must run (or, with the default settings, may be skipped as overlaps).
    pub fires_expected: usize,
    pub executed: usize,
    pub missed: usize,
    pub duplicated: usize,
    pub reruns_after_lost: usize,
    /// Runs started again after a replica that shut down handed them back unfinished.
    pub reruns_after_interrupt: usize,
    /// Fires of jobs with the default settings skipped as overlaps, never started.
    pub skipped_as_overlap: usize,
    /// Overlap skips recorded (any job, any fire), and those with no run of the job holding it
    /// at the fire's due time.
    pub overlap_skips: usize,
    pub unjustified_overlap_skips: usize,
    /// Overlap skips with no run holding the job, but inside a window where Redis lost writes
    /// (the record of the holder's end among them) and costing no fire: counted apart.
    pub stale_overlap_skips: usize,
    /// Fires within a Redis crash's fsync window that ran zero times or twice: the documented
    /// loss of `appendfsync everysec`.
    pub fsync_window_missed: usize,
    pub fsync_window_duplicated: usize,
    /// Starts of fires within a restore's window (since the snapshot) beyond what they should
    /// have, each attempt at most once more: the documented loss of a restore. Fires that never
    /// started there are violations.
    pub restore_window_missed: usize,
    pub restore_window_duplicated: usize,
    /// At-most-once runs recorded dead as `lost` (their replica died, or Redis was away longer
    /// than their lease), as documented: never run twice.
    pub dead_lost: usize,
    /// At-most-once runs recorded dead as `interrupted`: a replica shutting down in a deploy
    /// stopped them mid-run, as documented: never run twice.
    pub dead_interrupted: usize,
    /// Fires defined by one version only during a deploy, and how many of them ran.
    pub optional_fires: usize,
    pub optional_executed: usize,
    /// The fires of the jobs with the default settings alone.
    pub default_settings: Tally,
    /// The fires of the job pinned to [`jobs::PINNED_REPLICA`] alone.
    pub pinned: Tally,
    /// Starts of the pinned job on another replica than [`jobs::PINNED_REPLICA`].
    pub pinned_wrong_replica: usize,
    /// Each fire of the every-replica job, judged per target replica.
    pub every: PerReplica,
    /// The longest time between two consecutive starts of [`GAP_JOB`] (fires of the window),
    /// ms: how long fires of an every-second job with the default settings stalled at worst.
    pub longest_gap_ms: i64,
    /// Start minus fire time of each required fire's first start, ms, sorted.
    pub lags: Vec<i64>,
    /// Broken invariants, one line each.
    pub violations: Vec<String>,
}

/// How the required fires of some jobs fared.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub expected: usize,
    pub executed: usize,
    pub missed: usize,
    pub duplicated: usize,
    pub skipped_as_overlap: usize,
}

impl Tally {
    /// Adds what one fire's judgement changed, from `before` to `after`.
    fn add_change(&mut self, before: Tally, after: Tally) {
        self.expected += after.expected - before.expected;
        self.executed += after.executed - before.executed;
        self.missed += after.missed - before.missed;
        self.duplicated += after.duplicated - before.duplicated;
        self.skipped_as_overlap += after.skipped_as_overlap - before.skipped_as_overlap;
    }
}

impl Verdict {
    fn tally(&self) -> Tally {
        Tally {
            expected: self.fires_expected,
            executed: self.executed,
            missed: self.missed,
            duplicated: self.duplicated,
            skipped_as_overlap: self.skipped_as_overlap,
        }
    }

    /// The `p`-quantile of the lags, 0 when there are none.
    pub fn lag(&self, p: f64) -> i64 {
        if self.lags.is_empty() {
            return 0;
        }
        let index = ((self.lags.len() - 1) as f64 * p).round() as usize;
        self.lags[index]
    }
}

/// The every-second job with the default settings whose longest gap between runs is measured.
pub const GAP_JOB: &str = "beat";

/// The longest time between consecutive starts of `job`'s fires in `timeline`'s window, ms.
fn longest_gap(ledger: &[Entry], job: &str, timeline: &Timeline) -> i64 {
    let mut starts: Vec<i64> = ledger
        .iter()
        .filter(|entry| entry.tag == "start")
        .filter(|entry| {
            split_run(&entry.run).is_some_and(|(name, fire)| {
                name == job && (timeline.from_ms..=timeline.to_ms).contains(&fire)
            })
        })
        .map(|entry| entry.at_ms)
        .collect();
    starts.sort_unstable();
    starts
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or(0)
}

/// The job of a cron run id, `<job>@<fire ms>`, and its fire.
fn split_run(run: &str) -> Option<(&str, i64)> {
    let (job, fire) = run.rsplit_once('@')?;
    Some((job, fire.parse().ok()?))
}

/// Every whole second of `timeline`'s window, ms: the instants a job of the runner may fire.
fn seconds(timeline: &Timeline) -> impl Iterator<Item = i64> {
    let first_second =
        timeline.from_ms.div_euclid(1000) + i64::from(timeline.from_ms.rem_euclid(1000) != 0);
    (first_second..=timeline.to_ms.div_euclid(1000)).map(|second| second * 1000)
}

/// Compares the ledger and what `observed` saw of Redis with every fire of every job in
/// `timeline`'s window.
pub fn judge(ledger: &[Entry], observed: &Observed, timeline: &Timeline) -> Verdict {
    let mut by_run: HashMap<&str, Vec<&Entry>> = HashMap::new();
    for entry in ledger {
        by_run.entry(entry.run.as_str()).or_default().push(entry);
    }
    let records = records(observed);
    let last_version = timeline.deploys.last().map_or(0, |deploy| deploy.version);
    let mut verdict = Verdict::default();
    for job in jobs(last_version) {
        if job.placement == Placement::EveryWeb {
            every::judge(&mut verdict, &job, &by_run, &records, timeline);
            continue;
        }
        if let Placement::Pinned(replica) = job.placement {
            every::judge_pinned(&mut verdict, &job, replica, &by_run);
        }
        for fire in seconds(timeline) {
            let run = format!("{}@{fire}", job.name);
            let entries = by_run.get(run.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let fire_judge = FireJudge {
                job: &job,
                run: &run,
                fire,
                entries,
                record: records.get(run.as_str()).cloned().unwrap_or_default(),
                losses: &timeline.losses,
                deploys: &timeline.deploys,
            };
            let before = verdict.tally();
            match expect(&job.name, fire, &timeline.deploys) {
                Expect::Required => fire_judge.required(&mut verdict),
                Expect::Optional => fire_judge.optional(&mut verdict),
                Expect::Undefined => fire_judge.undefined(&mut verdict),
            }
            let after = verdict.tally();
            if job.settings == Settings::Defaults {
                verdict.default_settings.add_change(before, after);
            }
            if job.placement != Placement::Anywhere {
                verdict.pinned.add_change(before, after);
            }
        }
    }
    judge_overlap_skips(&mut verdict, &by_run, observed, &records, timeline);
    verdict.longest_gap_ms = longest_gap(ledger, GAP_JOB, timeline);
    verdict.lags.sort_unstable();
    verdict
}

/// One fire and what is known of it.
struct FireJudge<'a> {
    job: &'a JobSpec,
    run: &'a str,
    fire: i64,
    entries: &'a [&'a Entry],
    record: RunRecord,
    losses: &'a [Loss],
    deploys: &'a [Deploy],
}

impl FireJudge<'_> {
    fn starts(&self) -> Vec<&Entry> {
        self.entries
            .iter()
            .copied()
            .filter(|entry| entry.tag == "start")
            .collect()
    }

    /// Whether a loss of `kind` may have taken back Redis's record of this fire: its fire time
    /// is in the window, or, after a restore, anything it did (a crashing job's retries, a long
    /// job's end).
    fn in_loss(&self, kind: LossKind) -> bool {
        self.losses.iter().any(|loss| {
            loss.kind == kind
                && (loss.covers(self.fire)
                    || (kind == LossKind::Restore
                        && self.entries.iter().any(|entry| loss.covers(entry.at_ms))))
        })
    }

    /// Whether a deploy may have stopped this fire's run mid-run: it started while the deploy
    /// was stopping replicas, or early enough before to be running still when it began.
    fn started_in_deploy(&self, starts: &[&Entry]) -> bool {
        let longest = self.job.work.longest_ms();
        starts.iter().any(|entry| {
            self.deploys.iter().any(|deploy| {
                (deploy.began_ms - longest..=deploy.last_up_ms).contains(&entry.at_ms)
            })
        })
    }

    /// A fire the schedules define: it runs once, or, with the default settings, is skipped
    /// as an overlap; beyond that only in the documented cases.
    fn required(&self, verdict: &mut Verdict) {
        verdict.fires_expected += 1;
        let (run, stored) = (self.run, &self.record);
        let starts = self.starts();
        let in_fsync = self.in_loss(LossKind::Fsync);
        let in_restore = self.in_loss(LossKind::Restore);
        if let Some(first) = starts.iter().map(|entry| entry.at_ms).min() {
            verdict.executed += 1;
            verdict.lags.push(first - self.fire);
            if first < self.fire {
                verdict.violations.push(format!(
                    "{run} started {} ms before its fire time",
                    self.fire - first
                ));
            }
        }
        if starts.is_empty() {
            if self.job.settings == Settings::Defaults && stored.overlap_skipped {
                // Whether a run of the job held it then is checked with every overlap skip.
                verdict.skipped_as_overlap += 1;
            } else if self.job.kind == Kind::AtMostOnce && stored.reason.as_deref() == Some("lost")
            {
                // Claimed ahead by a replica that died before starting it: dead as lost.
                verdict.dead_lost += 1;
            } else if in_fsync {
                verdict.fsync_window_missed += 1;
            } else if in_restore {
                verdict.restore_window_missed += 1;
                verdict.violations.push(format!(
                    "{run}, in a restore's window, never started (state {:?}, reason {:?})",
                    stored.state, stored.reason
                ));
            } else {
                verdict.missed += 1;
                verdict.violations.push(format!(
                    "{run} never started (state {:?}, reason {:?})",
                    stored.state, stored.reason
                ));
            }
            return;
        }
        let expected_starts = match self.job.kind {
            Kind::AlwaysCrashes => CRASH_ATTEMPTS as usize,
            _ => 1,
        };
        self.count_extra_starts(verdict, &starts, expected_starts, in_fsync, in_restore);
        let ended = self.entries.iter().any(|entry| entry.tag == "end");
        let has_end = self.job.work != Work::Nothing && self.job.kind != Kind::AlwaysCrashes;
        let state = stored.state.as_deref();
        let outcome_ok = match self.job.kind {
            Kind::AtLeastOnce => state == Some("succeeded") && (!has_end || ended),
            // Recorded dead as lost also when it did end: its lease expired while Redis was
            // away longer than the lease, and its success came too late (a documented case).
            // Dead as interrupted when a replica that shut down in a deploy stopped it before
            // its end: it may have done part of its work, so it does not run again.
            Kind::AtMostOnce => match (state, stored.reason.as_deref()) {
                (Some("succeeded"), _) => ended,
                (Some("dead"), Some("lost")) => true,
                (Some("dead"), Some("interrupted")) => !ended && self.started_in_deploy(&starts),
                _ => false,
            },
            Kind::AlwaysCrashes => {
                state == Some("dead")
                    && (1..=CRASH_ATTEMPTS)
                        .all(|attempt| starts.iter().any(|entry| entry.attempt == attempt))
            }
        };
        if self.job.kind == Kind::AtMostOnce && state == Some("dead") && outcome_ok {
            if stored.reason.as_deref() == Some("interrupted") {
                verdict.dead_interrupted += 1;
            } else {
                verdict.dead_lost += 1;
            }
        }
        if !outcome_ok && !in_fsync && !in_restore {
            verdict.violations.push(format!(
                "{run}: state {:?}, reason {:?}, {} starts, ended {ended}",
                stored.state,
                stored.reason,
                starts.len()
            ));
        }
    }

    /// Counts the starts beyond `expected`: a run executes once per attempt, plus once per
    /// replica that died under it or, at-least-once, handed it back unfinished at shutdown; a
    /// crash may lose or double a start, a restore run each attempt once more.
    fn count_extra_starts(
        &self,
        verdict: &mut Verdict,
        starts: &[&Entry],
        expected: usize,
        in_fsync: bool,
        in_restore: bool,
    ) {
        let Some(mut extra) = starts
            .len()
            .checked_sub(expected)
            .filter(|extra| *extra > 0)
        else {
            return;
        };
        let stored = &self.record;
        let at_most_once = self.job.kind == Kind::AtMostOnce;
        let after_lost = if at_most_once {
            0
        } else {
            extra.min(stored.lost as usize)
        };
        verdict.reruns_after_lost += after_lost;
        extra -= after_lost;
        let after_interrupt = extra.min(stored.interrupted as usize);
        verdict.reruns_after_interrupt += after_interrupt;
        extra -= after_interrupt;
        if at_most_once && after_interrupt > 0 {
            verdict.violations.push(format!(
                "{}, at-most-once, started again after a replica that shut down handed it back \
                 unfinished: {:?}",
                self.run,
                starts.iter().map(|entry| entry.at_ms).collect::<Vec<_>>()
            ));
        }
        if extra == 0 {
            return;
        }
        // A restore takes a run back to its state in the copy: each attempt made since may
        // run once more (a crashing job's retries, say).
        if in_restore && extra <= expected {
            verdict.restore_window_duplicated += extra;
        } else if in_fsync {
            verdict.fsync_window_duplicated += extra;
        } else {
            verdict.duplicated += extra;
            verdict.violations.push(format!(
                "{} started {} times (lost {} times, interrupted {} times): {:?}",
                self.run,
                starts.len(),
                stored.lost,
                stored.interrupted,
                starts.iter().map(|entry| entry.at_ms).collect::<Vec<_>>()
            ));
        }
    }

    /// A fire only one of the versions in force during a deploy defines: once at most.
    fn optional(&self, verdict: &mut Verdict) {
        verdict.optional_fires += 1;
        let starts = self.starts();
        if starts.is_empty() {
            return;
        }
        verdict.optional_executed += 1;
        let allowed = 1 + self.record.lost as usize + self.record.interrupted as usize;
        if starts.len() > allowed {
            verdict.duplicated += starts.len() - allowed;
            verdict.violations.push(format!(
                "{}, defined by one version during a deploy, started {} times",
                self.run,
                starts.len()
            ));
        }
    }

    /// A fire no version in force defines: it must not run.
    fn undefined(&self, verdict: &mut Verdict) {
        let starts = self.starts();
        if !starts.is_empty() {
            verdict.violations.push(format!(
                "{} ran, but no version of the schedules in force defines that fire: {:?}",
                self.run,
                starts.iter().map(|entry| entry.at_ms).collect::<Vec<_>>()
            ));
        }
    }
}

/// The slots a run of a fire counts against (its job's, or for a replica's run of an
/// every-replica fire its job's on that replica), its job, and its fire, ms.
fn slot_of(run: &str) -> Option<(String, &str, i64)> {
    let (job, rest) = run.rsplit_once('@')?;
    let fire = rest.split_once(':').map_or(rest, |(fire, _)| fire);
    Some((slot_group(job, run).into_owned(), job, fire.parse().ok()?))
}

/// One attempt of a run: from its start until its outcome was recorded (`None`: never seen).
struct Attempt<'a> {
    run: &'a str,
    start: i64,
    end: Option<i64>,
}

/// A fire may be skipped as an overlap only when its job has a limit and a run of it that had
/// started by the fire's due time was still holding it then: its outcome not yet recorded (for a
/// replica's run of an every-replica fire, a run of the job on that replica).
/// Redis's own record of that can be taken back by a crash or a restore, so the attempts are
/// those the observer saw (start and end in the run hash, holding a slot) and those the ledger
/// saw start, each ended by the first outcome recorded after its start.
fn judge_overlap_skips(
    verdict: &mut Verdict,
    by_run: &HashMap<&str, Vec<&Entry>>,
    observed: &Observed,
    records: &HashMap<&str, RunRecord>,
    timeline: &Timeline,
) {
    let mut outcomes: HashMap<&str, Vec<i64>> = HashMap::new();
    for event in &observed.events {
        outcomes
            .entry(event.run.as_str())
            .or_default()
            .push(event.at_ms);
    }
    for times in outcomes.values_mut() {
        times.sort_unstable();
    }
    let first_outcome_after = |run: &str, start: i64| {
        outcomes
            .get(run)
            .and_then(|times| times.iter().find(|at| **at > start).copied())
    };
    let mut attempts: HashMap<String, Vec<Attempt>> = HashMap::new();
    for ((run, start), end) in &observed.attempts {
        let Some((group, _, _)) = slot_of(run) else {
            continue;
        };
        let end = match (*end, first_outcome_after(run, *start)) {
            (Some(end), Some(outcome)) => Some(end.min(outcome)),
            (end, outcome) => end.or(outcome),
        };
        attempts.entry(group).or_default().push(Attempt {
            run,
            start: *start,
            end,
        });
    }
    for (run, entries) in by_run {
        let Some((group, _, _)) = slot_of(run) else {
            continue;
        };
        for entry in entries.iter().filter(|entry| entry.tag == "start") {
            let end = first_outcome_after(run, entry.at_ms);
            attempts.entry(group.clone()).or_default().push(Attempt {
                run,
                start: entry.at_ms,
                end,
            });
        }
    }
    let settings: HashMap<String, Settings> =
        jobs(timeline.deploys.last().map_or(0, |d| d.version))
            .into_iter()
            .map(|job| (job.name, job.settings))
            .collect();
    let mut skipped: Vec<&str> = records
        .iter()
        .filter(|(_, record)| record.overlap_skipped)
        .map(|(run, _)| *run)
        .collect();
    skipped.sort_unstable();
    for run in skipped {
        let Some((group, job, due)) = slot_of(run) else {
            continue;
        };
        verdict.overlap_skips += 1;
        if settings.get(job) == Some(&Settings::Allow) {
            verdict.unjustified_overlap_skips += 1;
            verdict.violations.push(format!(
                "{run} was skipped as an overlap, but its job allows overlap"
            ));
            continue;
        }
        let of_job = attempts.get(&group).map(Vec::as_slice).unwrap_or(&[]);
        let holder = of_job.iter().find(|attempt| {
            attempt.run != run && attempt.start <= due && attempt.end.is_none_or(|end| end > due)
        });
        if holder.is_some() {
            continue;
        }
        let ran = by_run
            .get(run)
            .is_some_and(|entries| entries.iter().any(|entry| entry.tag == "start"));
        let excused = timeline
            .losses
            .iter()
            .any(|loss| loss.covers(due) && (loss.kind == LossKind::Fsync || ran));
        if excused {
            verdict.stale_overlap_skips += 1;
            continue;
        }
        verdict.unjustified_overlap_skips += 1;
        let mut near: Vec<String> = of_job
            .iter()
            .filter(|attempt| {
                let near = due - 5_000..=due + 5_000;
                near.contains(&attempt.start) || attempt.end.is_some_and(|end| near.contains(&end))
            })
            .map(|attempt| format!("{} {}..{:?}", attempt.run, attempt.start, attempt.end))
            .collect();
        near.sort();
        near.dedup();
        verdict.violations.push(format!(
            "{run} was skipped as an overlap while no run of {job} held it (ran before: {ran}); \
             attempts of {job} within 5 s: {near:?}"
        ));
    }
}
