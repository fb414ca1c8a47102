//! Idle replicas share the fires: none claims them all because of when it last woke.

use std::collections::HashMap;
use std::time::Duration;

use crate::util::scenario::{Scenario, fire_ms, sleep_until};
use crate::util::wait_until;

/// Over a minute's fires of two every-second jobs with default settings, each of three idle
/// replicas runs a share. Idle workers block on the queue's wake marker and Redis wakes the
/// one that has blocked longest: when every wait lasted exactly the idle wait, the replica that
/// claimed a fire blocked again before the others' waits ran out and re-entered behind it, so
/// it was woken first at every later fire and ran nearly all of them.
#[test]
fn idle_replicas_share_the_fires_of_every_second_jobs() {
    let scenario = Scenario::new();
    scenario.write_jobs(&format!(
        "[jobs.a]\nschedule = \"* * * * * *\"\ncommand = \"{record}\"\n\n\
         [jobs.b]\nschedule = \"* * * * * *\"\ncommand = \"{record}\"\n",
        record = scenario.record("")
    ));
    let replicas = scenario.replicas_with_a_leader(&["r1", "r2", "r3"], &[]);
    let from = (scenario.redis_now_ms() / 1000 + 3) * 1000;
    let to = from + 39_000;
    sleep_until(&scenario, to);
    let fires = |ledger: &[(String, i64, String)]| {
        ledger
            .iter()
            .filter(|(run, _, _)| (from..=to).contains(&fire_ms(run)))
            .count()
    };
    assert!(
        wait_until(Duration::from_secs(10), || fires(&scenario.ledger()) >= 80),
        "the fires of [{from}, {to}] did not all run: {} of 80\n{}",
        fires(&scenario.ledger()),
        crate::util::replica::ReplicaProcess::logs(&replicas)
    );

    let mut per_replica: HashMap<String, usize> = HashMap::new();
    for (run, _, _) in scenario.ledger() {
        if !(from..=to).contains(&fire_ms(&run)) {
            continue;
        }
        let worker = scenario.run_field(&run, "worker").unwrap_or_default();
        let replica = worker.split_once('/').map_or(worker.as_str(), |(id, _)| id);
        *per_replica.entry(replica.to_owned()).or_default() += 1;
    }
    eprintln!("runs of 80 fires per replica: {per_replica:?}");
    // Even sharing gives each about 27; a model of waits of random length gave each at least
    // 18 in a thousand tries, and one of waits of equal length gave one replica fewer than
    // 10 in 981. Ten leaves room for a loaded machine.
    for id in ["r1", "r2", "r3"] {
        let ran = per_replica.get(id).copied().unwrap_or(0);
        assert!(ran >= 10, "{id} ran {ran} of 80 fires: {per_replica:?}");
    }
}
