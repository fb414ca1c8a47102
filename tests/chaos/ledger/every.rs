//! The placed jobs: each fire of the every-replica job judged once per target replica, and
//! every start of a placed job checked against the replica it was meant for.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use redcron::store::keys::{replica_of_run, replica_run_id};

use super::{Entry, Expect, FireJudge, JobSpec, LossKind, RunRecord, Timeline, Verdict};

/// How the (fire, target replica) pairs of the every-replica job fared.
#[derive(Debug, Default)]
pub struct PerReplica {
    /// Pairs the window's fires had: each fire the schedules define, times the web replicas.
    pub expected: usize,
    /// Pairs started at least once.
    pub executed: usize,
    /// Pairs never started that Redis recorded as skipped, by reason: the replica's run's own
    /// (`replica-down`, `overlap`, `missed`), or the fire's, skipped whole (`no-target`,
    /// `missed`); `fsync-window` for a pair a Redis `kill -9` may lose unrecorded.
    pub missed: BTreeMap<String, usize>,
    /// Starts of a pair beyond its first outside the documented cases: each a broken
    /// invariant.
    pub doubled: usize,
    /// Starts of a pair beyond its first in the documented cases, by case: its replica died
    /// under it (`lost`) or handed it back unfinished (`interrupted`), or Redis lost the record
    /// of its start (`fsync-window`, `restore-window`).
    pub rerun: BTreeMap<&'static str, usize>,
    /// Starts of a replica's run on another replica, or of the fire itself as one run, and
    /// runs made for a replica the job's `where` leaves out, started or not: each a broken
    /// invariant.
    pub wrong_replica: usize,
    /// Pairs neither started nor recorded as skipped: each a broken invariant.
    pub lost: usize,
}

impl fmt::Display for PerReplica {
    /// `expected=… executed=… missed=…(reason:count,…) doubled=… rerun=…(case:count,…)
    /// wrong_replica=… lost=…`, one token per figure, as the summary line shows them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "expected={} executed={} missed={} doubled={} rerun={} wrong_replica={} lost={}",
            self.expected,
            self.executed,
            Counts(&self.missed),
            self.doubled,
            Counts(&self.rerun),
            self.wrong_replica,
            self.lost
        )
    }
}

/// Counts by cause, shown as their sum and, when there are any, each cause in brackets:
/// `3(overlap:2,replica-down:1)`.
struct Counts<'a, K>(&'a BTreeMap<K, usize>);

impl<K: fmt::Display> fmt::Display for Counts<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.values().sum::<usize>())?;
        if self.0.is_empty() {
            return Ok(());
        }
        let causes: Vec<String> = self
            .0
            .iter()
            .map(|(cause, count)| format!("{cause}:{count}"))
            .collect();
        write!(f, "({})", causes.join(","))
    }
}

/// Judges every fire of the every-replica `job` in `timeline`'s window once per web replica,
/// and every start of one of its runs against the replica it was meant for.
pub(super) fn judge(
    verdict: &mut Verdict,
    job: &JobSpec,
    by_run: &HashMap<&str, Vec<&Entry>>,
    records: &HashMap<&str, RunRecord>,
    timeline: &Timeline,
) {
    for fire in super::seconds(timeline) {
        // The job is in every version: a fire it defines is required, deploy or not.
        if super::expect(&job.name, fire, &timeline.deploys) != Expect::Required {
            continue;
        }
        let fire_run = format!("{}@{fire}", job.name);
        let skipped_whole = skip_reason(records.get(fire_run.as_str()));
        for replica in &timeline.web_replicas {
            let run = replica_run_id(&fire_run, replica);
            let pair = FireJudge {
                job,
                run: &run,
                fire,
                entries: by_run.get(run.as_str()).map(Vec::as_slice).unwrap_or(&[]),
                record: records.get(run.as_str()).cloned().unwrap_or_default(),
                losses: &timeline.losses,
                deploys: &timeline.deploys,
            };
            judge_pair(verdict, &pair, skipped_whole);
        }
    }
    for (run, entries) in by_run {
        let Some(rest) = run
            .strip_prefix(job.name.as_str())
            .and_then(|rest| rest.strip_prefix('@'))
        else {
            continue;
        };
        let target = replica_of_run(&job.name, run);
        for entry in entries.iter().filter(|entry| entry.tag == "start") {
            let problem = match target {
                None => format!("{run}, a fire of an every-replica job, ran as one run"),
                Some(target) if !timeline.web_replicas.iter().any(|web| web == target) => {
                    format!("{run} was made for {target}, which its job's `where` leaves out")
                }
                Some(target) if target != entry.replica => {
                    format!(
                        "{run}, meant for {target}, was started by {}",
                        entry.replica
                    )
                }
                Some(_) => continue,
            };
            verdict.every.wrong_replica += 1;
            verdict
                .violations
                .push(format!("{problem} at {} (run {rest})", entry.at_ms));
        }
    }
    // A run made for a replica the job's `where` leaves out, which never started (skipped as
    // its replica was down, say): only Redis recorded it.
    let mut made_for_others: Vec<(&str, &str)> = records
        .iter()
        .filter_map(|(run, record)| {
            let target = replica_of_run(&job.name, run)?;
            let started = by_run.contains_key(run);
            (!started && !timeline.web_replicas.iter().any(|web| web == target))
                .then(|| (*run, record.state.as_deref().unwrap_or("unknown")))
        })
        .collect();
    made_for_others.sort_unstable();
    for (run, state) in made_for_others {
        verdict.every.wrong_replica += 1;
        verdict.violations.push(format!(
            "{run} was made for a replica its job's `where` leaves out (last state {state})"
        ));
    }
}

/// Judges one (fire, replica) pair of the every-replica job: started once, or skipped as Redis
/// recorded it (its own run, or its fire whole: `skipped_whole`), or more than once only in the
/// documented cases.
fn judge_pair(verdict: &mut Verdict, pair: &FireJudge, skipped_whole: Option<&str>) {
    let tally = &mut verdict.every;
    tally.expected += 1;
    let starts = pair.starts();
    let in_fsync = pair.in_loss(LossKind::Fsync);
    let in_restore = pair.in_loss(LossKind::Restore);
    let stored = &pair.record;
    if starts.is_empty() {
        let reason = skip_reason(Some(stored))
            .or(skipped_whole)
            .or(in_fsync.then_some("fsync-window"));
        if let Some(reason) = reason {
            *tally.missed.entry(reason.to_owned()).or_default() += 1;
        } else {
            tally.lost += 1;
            verdict.violations.push(format!(
                "{} neither started nor was recorded as skipped (state {:?}, reason {:?}{})",
                pair.run,
                stored.state,
                stored.reason,
                if in_restore {
                    ", in a restore's window"
                } else {
                    ""
                }
            ));
        }
        return;
    }
    tally.executed += 1;
    if let Some(first) = starts.iter().map(|entry| entry.at_ms).min()
        && first < pair.fire
    {
        verdict.violations.push(format!(
            "{} started {} ms before its fire time",
            pair.run,
            pair.fire - first
        ));
    }
    // The documented cases are those of any run: counted as for one, then told apart.
    let mut counted = Verdict::default();
    pair.count_extra_starts(&mut counted, &starts, 1, in_fsync, in_restore);
    let tally = &mut verdict.every;
    tally.doubled += counted.duplicated;
    for (case, count) in [
        ("lost", counted.reruns_after_lost),
        ("interrupted", counted.reruns_after_interrupt),
        ("fsync-window", counted.fsync_window_duplicated),
        ("restore-window", counted.restore_window_duplicated),
    ] {
        if count > 0 {
            *tally.rerun.entry(case).or_default() += count;
        }
    }
    verdict.violations.extend(counted.violations);
    if stored.state.as_deref() != Some("succeeded") && !in_fsync && !in_restore {
        verdict.violations.push(format!(
            "{}: state {:?}, reason {:?}, {} starts",
            pair.run,
            stored.state,
            stored.reason,
            starts.len()
        ));
    }
}

/// Every start of the job pinned to `replica` must be on it.
pub(super) fn judge_pinned(
    verdict: &mut Verdict,
    job: &JobSpec,
    replica: &str,
    by_run: &HashMap<&str, Vec<&Entry>>,
) {
    for (run, entries) in by_run {
        if super::split_run(run).is_none_or(|(name, _)| name != job.name) {
            continue;
        }
        for entry in entries
            .iter()
            .filter(|entry| entry.tag == "start" && entry.replica != replica)
        {
            verdict.pinned_wrong_replica += 1;
            verdict.violations.push(format!(
                "{run}, pinned to {replica}, was started by {} at {}",
                entry.replica, entry.at_ms
            ));
        }
    }
}

/// Why Redis recorded `record`'s run as skipped, when that is its last state.
fn skip_reason(record: Option<&RunRecord>) -> Option<&str> {
    let record = record?;
    if record.state.as_deref() == Some("skipped") {
        Some(record.reason.as_deref().unwrap_or("unknown"))
    } else {
        None
    }
}
