//! A rolling deploy with real replicas: three `redcron run` processes move, one at a time, from
//! version 1 of the schedule files to version 2, which adds a job and changes another's
//! schedule. While they disagree, the leader plans every job some live replica declares (the
//! definition most of them declare), a replica runs only the jobs it declares, and no fire is
//! lost, doubled or buried.
//!
//! Jobs append `<run id> <start ms>` to a ledger file outside Redis.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use redis::Commands;

use crate::util::keys;
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{Scenario, fire_ms, skipped_as_documented};
use crate::util::{cli, wait_until};

/// From the moment a replica declaring a new job has started, by when the job must have fired:
/// the leader's next tick (every second) sees the declaration and plans the next whole second.
const ADDED_WITHIN_MS: i64 = 3_000;

/// The longest `change` may go without a fire. Where the new schedule takes over, the old one's
/// last fire and the new one's first can be 4 s apart: every 2 s with a fire at :14, replaced
/// just after :15 by every 3 s, whose next fire is :18. Half a second more for slack.
const CHANGE_MAX_GAP_MS: i64 = 4_000 + 500;

/// Version 1 of the schedule files, then version 2: `keep` unchanged, `change` on another
/// schedule, `added` new. Default settings throughout (overlap forbidden, misfire run-once),
/// as most users have them; every command is the same, so only the schedules tell them apart.
fn jobs(scenario: &Scenario, version: u8) -> String {
    let record = scenario.record("");
    let job = |name: &str, schedule: &str| {
        format!("[jobs.{name}]\nschedule = \"{schedule}\"\ncommand = \"{record}\"\n")
    };
    match version {
        1 => job("keep", "* * * * * *") + &job("change", "*/2 * * * * *"),
        _ => {
            job("keep", "* * * * * *")
                + &job("change", "*/3 * * * * *")
                + &job("added", "* * * * * *")
        }
    }
}

/// The replicas of one deploy, those stopped kept for their logs, and what happened when.
/// Version 1 of the files is the scenario's schedule directory; version 2 has its own.
struct Deploy<'a> {
    scenario: &'a Scenario,
    version_2: PathBuf,
    live: Vec<ReplicaProcess>,
    stopped: Vec<ReplicaProcess>,
    /// `<Redis ms> <event> (leader: <token>)`, for failure messages.
    timeline: Vec<String>,
}

impl<'a> Deploy<'a> {
    /// Replicas r1, r2 and r3 on version 1, one of them leading.
    fn start(scenario: &'a Scenario) -> Self {
        scenario.write_jobs(&jobs(scenario, 1));
        let version_2 = scenario.dir.path().join("v2");
        std::fs::create_dir(&version_2).expect("schedules dir");
        std::fs::write(version_2.join("jobs.toml"), jobs(scenario, 2)).expect("write jobs");
        let mut deploy = Self {
            scenario,
            version_2,
            live: scenario.replicas_with_a_leader(&["r1", "r2", "r3"], &[]),
            stopped: Vec::new(),
            timeline: Vec::new(),
        };
        deploy.note("r1, r2 and r3 up on version 1");
        deploy
    }

    /// Starts replica `id` on version 2 of the files; Redis's time once it has connected.
    fn start_version_2(&mut self, id: &str) -> i64 {
        let replica = ReplicaProcess::start(
            id,
            &self.scenario.server.url(),
            &self.version_2,
            self.scenario.dir.path(),
            &[],
        );
        let started = wait_until(Duration::from_secs(10), || {
            replica.log().contains("replica starting")
        });
        self.live.push(replica);
        assert!(started, "replica {id} did not start\n{}", self.report());
        self.note(&format!("{id} up on version 2"))
    }

    /// SIGTERMs the live replica `id` and waits for its clean exit; Redis's time when it was
    /// signalled.
    fn stop(&mut self, id: &str) -> i64 {
        let index = self
            .live
            .iter()
            .position(|replica| replica.id == id)
            .expect("a live replica");
        let signalled = self.note(&format!("SIGTERM to {id}"));
        let code = self.live[index].terminate(Duration::from_secs(15));
        self.stopped.push(self.live.remove(index));
        assert_eq!(
            code,
            Some(0),
            "{id} did not exit cleanly\n{}",
            self.report()
        );
        self.note(&format!("{id} exited"));
        signalled
    }

    /// Waits until each job has fired at or after `from` (Redis ms), `keep` twice: the fleet
    /// as it now stands has planned and run every job, which is what each step of the deploy
    /// must show before the next one changes it.
    fn run_every_job_from(&mut self, from: i64) {
        let ledger = || self.scenario.ledger();
        let fired_since = |job: &str, times: usize| {
            fires(&ledger(), job)
                .iter()
                .filter(|fire| **fire >= from)
                .count()
                >= times
        };
        let ran = wait_until(Duration::from_secs(15), || {
            fired_since("keep", 2) && fired_since("change", 1) && fired_since("added", 1)
        });
        assert!(ran, "not every job fired from {from} on\n{}", self.report());
        self.note("every job fired");
    }

    /// Records `event` in the timeline; Redis's time of it.
    fn note(&mut self, event: &str) -> i64 {
        let now = self.scenario.redis_now_ms();
        let leader = self.scenario.leader().unwrap_or_else(|| "none".to_owned());
        self.timeline
            .push(format!("{now} {event} (leader: {leader})"));
        now
    }

    fn replicas(&self) -> impl Iterator<Item = &ReplicaProcess> {
        self.stopped.iter().chain(&self.live)
    }

    /// The timeline, the ledger and every replica's log.
    fn report(&self) -> String {
        let mut report = format!("timeline:\n{}\n", self.timeline.join("\n"));
        let ledger = std::fs::read_to_string(self.scenario.ledger_path()).unwrap_or_default();
        report.push_str(&format!("ledger:\n{ledger}"));
        for replica in self.replicas() {
            report.push_str(&format!("log of {}:\n{}\n", replica.id, replica.log()));
        }
        report
    }
}

/// The fires of `job` in the ledger, in order.
fn fires(ledger: &[(String, i64, String)], job: &str) -> Vec<i64> {
    let prefix = format!("{job}@");
    let mut fires: Vec<i64> = ledger
        .iter()
        .filter(|(run, _, _)| run.starts_with(&prefix))
        .map(|(run, _, _)| fire_ms(run))
        .collect();
    fires.sort_unstable();
    fires
}

/// The whole seconds in `[from, to]` that are not among `fires`.
fn missing_seconds(fires: &[i64], from: i64, to: i64) -> Vec<i64> {
    (from..=to)
        .step_by(1000)
        .filter(|second| !fires.contains(second))
        .collect()
}

#[test]
fn a_rolling_deploy_runs_every_fire_of_every_job_once_and_none_dead() {
    let scenario = Scenario::new();
    let mut deploy = Deploy::start(&scenario);
    let fired = wait_until(Duration::from_secs(10), || {
        fires(&scenario.ledger(), "keep").len() >= 3
    });
    assert!(fired, "version 1 does not fire\n{}", deploy.report());

    // One replica at a time, as a deploy does: stop it, start its successor on version 2. The
    // leader goes last, so that it is a version 1 replica that must plan the job only a
    // minority declares at first, then the definition the majority declares instead of its own.
    let leader = scenario.leader().expect("a leader");
    let (leader, _epoch) = leader.rsplit_once(':').expect("<id>:<epoch>");
    let mut order: Vec<String> = ["r1", "r2", "r3"]
        .into_iter()
        .filter(|id| *id != leader)
        .map(str::to_owned)
        .collect();
    order.push(leader.to_owned());
    let mut first_v2_up = None;
    let mut stops = Vec::new();
    for old in &order {
        stops.push(deploy.stop(old));
        let up = deploy.start_version_2(&format!("{old}-v2"));
        first_v2_up.get_or_insert(up);
        deploy.run_every_job_from(up);
    }
    let first_v2_up = first_v2_up.expect("a version 2 replica started");
    // Version 1 is declared by most live replicas until the second one is stopped, and by
    // none once the third is.
    let (v1_majority_until, v1_gone) = (stops[1], stops[2]);
    // Then version 2 alone, long enough for a fire of each job.
    let alone = deploy.note("version 2 alone");
    deploy.run_every_job_from(alone);
    let end = deploy.note("stopping");
    for old in &order {
        deploy.stop(&format!("{old}-v2"));
    }
    // Fires up to a second before the stop have certainly started by then.
    let last = end - end % 1000 - 1000;

    let ledger = scenario.ledger();
    let report = deploy.report();
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for (run, _, _) in &ledger {
        *runs.entry(run.as_str()).or_default() += 1;
    }
    let doubled: Vec<(&&str, &usize)> = runs.iter().filter(|(_, count)| **count > 1).collect();
    assert!(doubled.is_empty(), "runs ran twice: {doubled:?}\n{report}");

    let dead: Vec<String> = scenario
        .server
        .connection()
        .zrange(keys().dead(), 0, -1)
        .expect("ZRANGE");
    assert!(dead.is_empty(), "runs are dead: {dead:?}\n{report}");
    let listed = cli(
        &scenario.server,
        scenario.dir.path(),
        &["dead", "list", "--json"],
    )
    .success();
    assert_eq!(
        listed, "{\"runs\":[]}\n",
        "`dead list` lists dead runs\n{report}"
    );

    // A fire of keep runs once, or is skipped as the docs say one can be on a loaded machine:
    // the overlap of the run before it, started late and still running.
    let keep = fires(&ledger, "keep");
    let missing: Vec<i64> = missing_seconds(&keep, keep[0], last)
        .into_iter()
        .filter(|&fire| !skipped_as_documented(&scenario, "keep", fire))
        .collect();
    assert!(
        missing.is_empty(),
        "keep, declared alike by every version, missed fires {missing:?} between {} and \
         {last}\n{report}",
        keep[0]
    );

    let added = fires(&ledger, "added");
    let Some(&first_added) = added.first() else {
        panic!("added never fired, though a live replica declared it from {first_v2_up}\n{report}");
    };
    assert!(
        first_added <= first_v2_up + ADDED_WITHIN_MS,
        "added first fired at {first_added}, {} ms after the first replica declaring it was up \
         at {first_v2_up}\n{report}",
        first_added - first_v2_up
    );
    let missing = missing_seconds(&added, first_added, last);
    assert!(
        missing.is_empty(),
        "added missed fires {missing:?} after its first at {first_added}\n{report}"
    );

    let change = fires(&ledger, "change");
    let off_schedule: Vec<i64> = change
        .iter()
        .copied()
        .filter(|fire| fire % 2000 != 0 && fire % 3000 != 0)
        .collect();
    assert!(
        off_schedule.is_empty(),
        "change fired on neither version's schedule: {off_schedule:?}\n{report}"
    );
    let early_v2: Vec<i64> = change
        .iter()
        .copied()
        .filter(|&fire| fire < v1_majority_until && fire % 2000 != 0)
        .collect();
    assert!(
        early_v2.is_empty(),
        "change fired on version 2's schedule at {early_v2:?}, while most live replicas \
         declared version 1 (until {v1_majority_until})\n{report}"
    );
    let late_v1: Vec<i64> = change
        .iter()
        .copied()
        .filter(|&fire| fire >= v1_gone && fire % 3000 != 0)
        .collect();
    assert!(
        late_v1.is_empty(),
        "change fired on version 1's schedule at {late_v1:?}, after no replica declared it \
         (from {v1_gone})\n{report}"
    );
    // Over the whole window, edges included: from the first fire of any job to the last.
    let bounded: Vec<i64> = std::iter::once(keep[0])
        .chain(change.iter().copied())
        .chain(std::iter::once(last))
        .collect();
    let gaps: Vec<(i64, i64)> = bounded
        .windows(2)
        .map(|pair| (pair[0], pair[1]))
        .filter(|(from, to)| to - from > CHANGE_MAX_GAP_MS)
        .collect();
    assert!(
        gaps.is_empty(),
        "change went without a fire for longer than {CHANGE_MAX_GAP_MS} ms: {gaps:?}\n{report}"
    );
}
