//! A replica back from a short outage catches up on an every-replica job as `misfire = "run-once"`
//! promises: the latest fire it missed runs once, the older ones are skipped as missed, and its
//! fires on time run again, none of them skipped as the overlap of a backlog. A run it had
//! started when it went away runs again first, before its later fires.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{Scenario, fire_ms};
use crate::util::{keys, read_ledger, wait_until};

/// The fires (ms) each replica started, with the start (ms), from a ledger of
/// `<run id> <start ms> <replica>` lines.
fn starts_by_replica(ledger: &Path) -> BTreeMap<String, BTreeMap<i64, i64>> {
    let mut starts: BTreeMap<String, BTreeMap<i64, i64>> = BTreeMap::new();
    for (run, started, node) in read_ledger(ledger) {
        starts
            .entry(node)
            .or_default()
            .insert(fire_ms(&run), started);
    }
    starts
}

/// A scenario whose job `tidy` runs every 2 s on every replica, noting each start in the ledger
/// as `<run id> <ms> <replica>`, then doing `then`.
fn tidying(then: &str) -> Scenario {
    let scenario = Scenario::new();
    scenario.write_jobs(&format!(
        "[jobs.tidy]\nschedule = \"@every 2s\"\non = \"every\"\ncommand = \"{}{then}\"\n",
        scenario.record("$NODE")
    ));
    scenario
}

#[test]
fn a_replica_back_from_an_outage_runs_the_latest_fire_it_missed_once_and_then_its_fires_on_time() {
    // Default overlap and misfire; the default threshold (60 s) is far longer than the outage.
    let tidy = tidying("");
    let (server, ledger) = (&tidy.server, tidy.ledger_path());
    let replica = |id: &str| tidy.node(id, &[]);
    let mut replicas = [replica("a"), replica("b")];
    let logs = |replicas: &[ReplicaProcess]| ReplicaProcess::logs(replicas);
    let ran = |node: &str| starts_by_replica(&ledger).remove(node).unwrap_or_default();
    assert!(
        wait_until(Duration::from_secs(20), || !ran("b").is_empty()),
        "{}",
        logs(&replicas)
    );
    replicas[1].terminate(Duration::from_secs(10));
    let left = ran("b").keys().max().copied().expect("b ran a fire");
    // Four fires come due while b is away: each made a run that waits in b's own route. A
    // period of 2 s leaves a loaded machine room to start each fire on time.
    let away = || ran("a").into_keys().filter(|fire| *fire > left).count();
    assert!(
        wait_until(Duration::from_secs(30), || away() >= 4),
        "{}",
        logs(&replicas)
    );
    replicas[1] = replica("b");
    // b runs three fires after its first one back: by then it ran what it will of its backlog.
    let back = || ran("b").into_keys().filter(|fire| *fire > left).count();
    assert!(
        wait_until(Duration::from_secs(40), || back() >= 4),
        "{:?}\n{}",
        read_ledger(&ledger),
        logs(&replicas)
    );
    let on_b = ran("b");
    let (&late_fire, &late_start) = on_b
        .iter()
        .filter(|(fire, _)| **fire > left)
        .min_by_key(|(_, started)| **started)
        .expect("a run of b since it came back");
    let state = |fire: i64| -> (Option<String>, Option<String>) {
        let mut connection = server.connection();
        let fields: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(keys().run(&format!("tidy@{fire}:b")))
            .arg(&["state", "reason"])
            .query(&mut connection)
            .expect("read the run");
        (fields[0].clone(), fields[1].clone())
    };
    let on_a = ran("a");
    // The fires of the backlog before the one b ran first: every one skipped as missed, none run.
    let superseded: Vec<i64> = on_a
        .keys()
        .copied()
        .filter(|fire| *fire > left && *fire < late_fire)
        .collect();
    assert!(
        superseded.len() >= 2,
        "b ran {late_fire} first, at {late_start}: the oldest of its backlog, not the latest \
         (fires while away: {:?})\n{:?}\n{}",
        on_a.keys().filter(|fire| **fire > left).collect::<Vec<_>>(),
        read_ledger(&ledger),
        logs(&replicas)
    );
    for fire in &superseded {
        assert_eq!(
            (on_b.contains_key(fire), state(*fire)),
            (
                false,
                (Some("skipped".to_owned()), Some("missed".to_owned()))
            ),
            "tidy@{fire}:b, older than the fire b ran late ({late_fire})\n{}",
            logs(&replicas)
        );
    }
    // Skipped at their start, they are logged for what superseded them, not as later than
    // the threshold (60 s), which none of them was.
    let log = replicas[1].log();
    assert!(
        log.lines().any(|line| line
            .contains("skipped: superseded: its replica's run of the job's next fire is due")
            && line.contains("job=\"tidy\" reason=\"missed\"")),
        "{log}"
    );
    assert!(
        !log.contains("skipped: later than the misfire threshold"),
        "{log}"
    );
    // Exactly one run started late: every fire b ran after it started after that fire's due
    // time came, one by one, and none of them was skipped as the overlap of a backlog.
    let last = on_b.keys().max().copied().expect("b ran fires");
    for fire in on_a
        .keys()
        .copied()
        .filter(|fire| *fire > late_fire && *fire <= last)
    {
        assert!(
            on_b.contains_key(&fire),
            "tidy@{fire}:b, due after b was back, did not run: {:?}\n{}",
            state(fire),
            logs(&replicas)
        );
    }
    let started_late = on_b
        .iter()
        .filter(|(fire, started)| **fire > left && **started - **fire >= 2_000)
        .count();
    assert!(
        started_late <= 1,
        "b started {started_late} runs a period or more late: {on_b:?}\n{}",
        logs(&replicas)
    );
}

#[test]
fn a_replica_killed_mid_run_runs_that_run_again_first_and_then_its_fires_on_time() {
    // Default overlap and misfire; each run lasts 1.2 s of a 2 s period.
    let tidy = tidying("; sleep 1.2");
    let ledger = tidy.ledger_path();
    let replica = |id: &str| tidy.node(id, &[]);
    let mut replicas = [replica("a"), replica("b")];
    let logs = |replicas: &[ReplicaProcess]| ReplicaProcess::logs(replicas);
    // b's starts in the order it made them: fire and start, ms.
    let on_b = || -> Vec<(i64, i64)> {
        read_ledger(&ledger)
            .into_iter()
            .filter(|(_, _, node)| node == "b")
            .map(|(run, started, _)| (fire_ms(&run), started))
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(20), || !on_b().is_empty()),
        "{}",
        logs(&replicas)
    );
    // Killed while its command runs: the run is b's in Redis, its lease held.
    replicas[1].kill9();
    let before = on_b();
    let (killed, _) = *before.last().expect("b started a run");
    let since = |fire: i64| {
        move |(run, _, node): &(String, i64, String)| node == "a" && fire_ms(run) >= fire
    };
    // Two more fires come due while b is away, each made b a run that waits in its route.
    assert!(
        wait_until(Duration::from_secs(20), || read_ledger(&ledger)
            .iter()
            .any(since(killed + 4_000))),
        "{}",
        logs(&replicas)
    );
    replicas[1] = replica("b");
    // Back, b runs what it owes and then fires on time: its two latest starts are within a
    // period of their fires.
    let back = || on_b().split_off(before.len());
    let settled = || {
        let runs = back();
        runs.len() >= 3
            && runs[runs.len() - 2..]
                .iter()
                .all(|(fire, started)| started - fire < 2_000)
    };
    assert!(
        wait_until(Duration::from_secs(40), settled),
        "{:?}\n{}",
        read_ledger(&ledger),
        logs(&replicas)
    );
    let runs = back();
    assert_eq!(
        runs[0].0,
        killed,
        "b's first start back is not its run of the fire it was killed in: {runs:?}\n{}",
        logs(&replicas)
    );
    let late = runs[1..]
        .iter()
        .take_while(|(fire, started)| started - fire >= 2_000)
        .count();
    assert!(
        late <= 1,
        "b started {late} more runs a period or more late before its fires were on time: \
         {runs:?}\n{}",
        logs(&replicas)
    );
}

/// On Redis's clock frozen at each step: a replica that claims its run of a fire late, but
/// before its run of the job's next fire is due (made ready ahead, within the lead), starts it;
/// a replica that claims only once that next run is due skips the older one as missed and
/// starts the newer. So a late claim loses nothing, and a backlog is superseded exactly when
/// its successor comes due.
#[tokio::test]
async fn a_replicas_run_is_superseded_only_once_its_run_of_the_next_fire_is_due() {
    use crate::util::store::{LEASE, THRESHOLD, declare, jobs, plan, setup};

    let toml = "[jobs.rotate]\nschedule = \"@every 10s\"\non = \"every\"\ncommand = \"true\"\n";
    let (server, store, token) = setup(toml).await;
    for replica in ["r1", "r2"] {
        declare(&store, replica, jobs(toml)).await;
        store
            .clone()
            .with_frozen_clock(99_000)
            .declare_targets(replica, &["rotate".to_owned()], &[], THRESHOLD)
            .await
            .expect("targets");
    }
    plan(&store, &token, "rotate", &[100_000, 110_000]).await;
    let promote = |now_ms: i64| {
        let store = store.clone().with_frozen_clock(now_ms);
        async move {
            store
                .promote_due(100, THRESHOLD, Duration::from_millis(200))
                .await
                .expect("promote")
        }
    };
    assert_eq!(promote(100_000).await.ready, 2);
    // The next fire's runs are made ready ahead of their due time, within the lead.
    assert_eq!(promote(109_900).await.ready, 2);
    let claim = |replica: &'static str, now_ms: i64| {
        let store = store.clone().with_frozen_clock(now_ms);
        async move {
            let claimed = store
                .claim_runs(
                    &[&format!("{replica}/0")],
                    &[format!("@{replica}")],
                    LEASE,
                    100,
                )
                .await
                .expect("claim");
            claimed
                .runs
                .iter()
                .map(|run| run.as_ref().expect("a whole run").id.clone())
                .collect::<Vec<_>>()
        }
    };
    let state = |run: &str| -> Vec<Option<String>> {
        redis::cmd("HMGET")
            .arg(keys().run(run))
            .arg(&["state", "reason"])
            .query(&mut server.connection())
            .expect("read the run")
    };
    // r1, almost a period late, still before its next run is due: it starts its run.
    assert_eq!(claim("r1", 109_950).await, ["rotate@100000:r1"]);
    assert_eq!(state("rotate@100000:r1")[0].as_deref(), Some("active"));
    // r2, once its next run is due: the older is missed, the newer starts.
    assert_eq!(claim("r2", 110_001).await, ["rotate@110000:r2"]);
    assert_eq!(
        state("rotate@100000:r2"),
        [Some("skipped".to_owned()), Some("missed".to_owned())]
    );
}
