//! What users get with the default job settings (`overlap = "forbid"` for scheduled jobs,
//! `allow` for on-demand ones, `misfire = "run-once"`), with real replicas against a real Redis:
//! late fires after a Redis stall, ad-hoc runs, `max_concurrency`, a backlog of tasks.
//!
//! Commands append `<run id> start|end <ms>` to a ledger outside Redis.

use std::collections::HashMap;
use std::time::Duration;

use redcron::schedule::Priority;
use redcron::store::Enqueue;
use redis::Commands;

use crate::util::keys;
use crate::util::scenario::{
    Scenario, assert_overlaps_were_real, event_entries, fire_ms, intervals, percentile, recorded,
    sleep_until,
};
use crate::util::store::{connect, skipped};
use crate::util::{cli, wait_until, wait_until_async};

/// Runs of one job never overlap in time, and start in the order of their fires, but for the
/// fires in `handed_back`, which may run after later ones.
#[track_caller]
fn assert_one_at_a_time_oldest_first(
    runs: &[&(String, i64, Option<i64>)],
    handed_back: &HashMap<String, i64>,
) {
    for pair in runs.windows(2) {
        let (first, second) = (pair[0], pair[1]);
        let end = first.2.unwrap_or_else(|| panic!("{} never ended", first.0));
        assert!(
            end <= second.1,
            "{} started at {} before {} ended at {end}",
            second.0,
            second.1,
            first.0
        );
    }
    let in_order: Vec<&&(String, i64, Option<i64>)> = runs
        .iter()
        .filter(|(run, _, _)| !handed_back.contains_key(run))
        .collect();
    for pair in in_order.windows(2) {
        assert!(
            fire_ms(&pair[0].0) < fire_ms(&pair[1].0),
            "{} started before {}",
            pair[1].0,
            pair[0].0
        );
    }
}

/// The runs handed back unstarted or lost (a fire claimed ahead that could not start during an
/// outage, say), each with the time it came due again, ms.
fn handed_back(scenario: &Scenario) -> HashMap<String, i64> {
    event_entries(scenario)
        .iter()
        .filter(|entry| {
            entry.get::<String>("state").as_deref() == Some("retrying")
                && matches!(
                    entry.get::<String>("reason").as_deref(),
                    Some("lost" | "not-started")
                )
        })
        .filter_map(|entry| {
            let due: i64 = entry.get::<String>("due_ms")?.parse().ok()?;
            Some((entry.get::<String>("run")?, due))
        })
        .collect()
}

#[test]
fn after_a_redis_stall_late_fires_run_one_at_a_time_and_the_misfire_policy_decides() {
    const STALL_MS: i64 = 12_000;
    const THRESHOLD_MS: i64 = 5_000;
    let scenario = Scenario::new();
    let mut toml = String::new();
    // Default overlap (forbid) for every job; the default misfire policy is run-once.
    for (job, misfire) in [
        ("once", None),
        ("all", Some("run-all")),
        ("skip", Some("skip")),
    ] {
        toml.push_str(&format!(
            "[jobs.{job}]\nschedule = \"* * * * * *\"\ncommand = \"{}\"\n",
            recorded(&scenario, "sleep 0.05")
        ));
        if let Some(misfire) = misfire {
            toml.push_str(&format!("misfire = \"{misfire}\"\n"));
        }
    }
    scenario.write_jobs(&toml);
    let flags = [
        "--misfire-threshold",
        "5s",
        "--run-lease",
        "30s",
        "--workers",
        "6",
    ];
    let _replicas = scenario.replicas_with_a_leader(&["r1", "r2"], &flags);
    // Let fires run normally for a while, then stall Redis for every client.
    let first = scenario.redis_now_ms() + 3_000;
    sleep_until(&scenario, first);
    let stall_start = scenario.redis_now_ms();
    scenario
        .server
        .stall(Duration::from_millis(STALL_MS as u64));
    let stall_end = stall_start + STALL_MS;
    sleep_until(&scenario, stall_end + 4_000);
    let last = stall_end + 2_000;

    let runs = intervals(&scenario);
    let skips = skipped(&scenario.server);
    let handed_back = handed_back(&scenario);
    assert_overlaps_were_real(&scenario, &runs, &skips);
    for (run, reason) in &skips {
        assert!(reason == "overlap" || reason == "missed", "{run}: {reason}");
    }
    for job in ["once", "all", "skip"] {
        let prefix = format!("{job}@");
        let of_job: Vec<&(String, i64, Option<i64>)> = runs
            .iter()
            .filter(|(run, _, _)| run.starts_with(&prefix))
            .collect();
        assert_one_at_a_time_oldest_first(&of_job, &handed_back);
        let started: HashMap<i64, usize> =
            of_job
                .iter()
                .fold(HashMap::new(), |mut counts, (run, _, _)| {
                    *counts.entry(fire_ms(run)).or_default() += 1;
                    counts
                });
        // Which fires were missed (promoted later than the threshold after their time), from
        // their run hashes; the latest missed one is what run-once keeps.
        let lateness = |fire: i64| -> i64 {
            let run = format!("{job}@{fire}");
            let created: Option<String> = scenario.run_field(&run, "created_ms");
            let created: i64 = created
                .and_then(|ms| ms.parse().ok())
                .unwrap_or_else(|| panic!("{run} has no run hash"));
            created - fire
        };
        let fires: Vec<i64> = (first - first % 1000 + 1000..=last - last % 1000)
            .step_by(1000)
            .collect();
        let again = |fire: i64| handed_back.get(&format!("{job}@{fire}")).copied();
        let missed: Vec<i64> = fires
            .iter()
            .copied()
            .filter(|&fire| again(fire).is_none() && lateness(fire) > THRESHOLD_MS)
            .collect();
        assert!(
            missed.len() >= 5,
            "{job}: a 12 s stall with a 5 s threshold misses fires: {missed:?}"
        );
        for &fire in &fires {
            let ran = started.get(&fire).copied().unwrap_or(0);
            let overlapped = skips.contains(&(format!("{job}@{fire}"), "overlap".to_owned()));
            let expected = if overlapped {
                0
            } else if let Some(due) = again(fire) {
                // Judged when it came due again: missed if later than the threshold by then,
                // and for run-once also only when a later fire had come due before it.
                let later_came_due = || {
                    fires.iter().any(|&later| {
                        later > fire
                            && scenario
                                .run_field(&format!("{job}@{later}"), "created_ms")
                                .and_then(|ms| ms.parse::<i64>().ok())
                                .is_some_and(|created| created <= due)
                    })
                };
                match job {
                    _ if due - fire <= THRESHOLD_MS || job == "all" => 1,
                    "once" => usize::from(!later_came_due()),
                    _ => 0,
                }
            } else if !missed.contains(&fire) {
                // Made ready in time, judged again when it would start (after the fires before
                // it): skipped only when that came later than the threshold.
                let judged_late = job != "all"
                    && skips.contains(&(format!("{job}@{fire}"), "missed".to_owned()))
                    && scenario
                        .run_field(&format!("{job}@{fire}"), "finished_ms")
                        .and_then(|ms| ms.parse::<i64>().ok())
                        .is_some_and(|skipped| skipped - fire > THRESHOLD_MS);
                usize::from(!judged_late)
            } else {
                match job {
                    "all" => 1,
                    "once" => usize::from(missed.last() == Some(&fire)),
                    _ => 0,
                }
            };
            assert_eq!(
                ran,
                expected,
                "{job}@{fire} (late by {} ms, stall {stall_start}..{stall_end}) ran {ran} times",
                lateness(fire)
            );
            if expected == 0 && !overlapped {
                assert!(
                    skips.contains(&(format!("{job}@{fire}"), "missed".to_owned())),
                    "{job}@{fire} is recorded as missed"
                );
            }
        }
    }
}

#[test]
fn every_ad_hoc_run_runs_and_max_concurrency_holds_them_back_without_dropping_any() {
    let scenario = Scenario::new();
    scenario.write_jobs(&format!(
        "[jobs.welcome-email]\ncommand = \"{}\"\n\
         [jobs.resize]\ncommand = \"{}\"\nmax_concurrency = 2\n",
        recorded(&scenario, "sleep 0.3"),
        recorded(&scenario, "sleep 0.3")
    ));
    let _replicas = [
        scenario.replica("r1", &["--workers", "8"]),
        scenario.replica("r2", &["--workers", "8"]),
    ];
    assert!(
        wait_until(Duration::from_secs(10), || {
            cli(
                &scenario.server,
                scenario.dir.path(),
                &["trigger", "resize"],
            )
            .code
                == Some(0)
        }),
        "the jobs were not published"
    );
    for _ in 0..3 {
        cli(
            &scenario.server,
            scenario.dir.path(),
            &["trigger", "welcome-email"],
        )
        .success();
    }
    // One resize run was triggered while waiting for the jobs to be published: six in all.
    for _ in 0..5 {
        cli(
            &scenario.server,
            scenario.dir.path(),
            &["trigger", "resize"],
        )
        .success();
    }
    assert!(
        wait_until(Duration::from_secs(20), || {
            let runs = intervals(&scenario);
            runs.len() == 9 && runs.iter().all(|(_, _, end)| end.is_some())
        }),
        "not every triggered run ran: {:?}",
        intervals(&scenario)
    );
    let runs = intervals(&scenario);
    let jobs: HashMap<String, String> = runs
        .iter()
        .map(|(run, _, _)| {
            let job = scenario.run_field(run, "job").expect("the run's job");
            (run.clone(), job)
        })
        .collect();
    // Every run of the resize job; at no instant more than two of them.
    let resizes: Vec<&(String, i64, Option<i64>)> = runs
        .iter()
        .filter(|(run, _, _)| jobs[run] == "resize")
        .collect();
    assert_eq!(resizes.len(), 6);
    for (_, start, _) in &resizes {
        let running = resizes
            .iter()
            .filter(|(_, other_start, end)| {
                other_start <= start && end.is_some_and(|end| end > *start)
            })
            .count();
        assert!(running <= 2, "{running} resize runs at once at {start}");
    }
    let emails = runs
        .iter()
        .filter(|(run, _, _)| jobs[run] == "welcome-email")
        .count();
    assert_eq!(emails, 3, "an on-demand job drops no run");
    assert_eq!(skipped(&scenario.server), []);
    let dead: usize = scenario
        .server
        .connection()
        .zcard(keys().dead())
        .expect("ZCARD");
    assert_eq!(dead, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_tasks_does_not_delay_cron_fires() {
    const BACKLOG: usize = 100_000;
    let scenario = Scenario::new();
    scenario.write_jobs(&format!(
        "[jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"{}\"\n\
         [jobs.task]\ncommand = \"true\"\n",
        recorded(&scenario, "true")
    ));
    let _replica = scenario.replica("r1", &[]);
    let store = connect(&scenario.server).await;
    assert!(
        wait_until_async(Duration::from_secs(10), async || store
            .is_declared("task")
            .await
            .expect("declared"))
        .await,
        "the jobs were not published"
    );
    let tasks: Vec<Enqueue> = (0..BACKLOG)
        .map(|_| Enqueue {
            job: "task".to_owned(),
            due_ms: None,
            payload: None,
            priority: None,
            unique: None,
        })
        .collect();
    store.enqueue_many(&tasks).await.expect("enqueue");
    // Ten seconds of fires behind the backlog, until a fire after them has started.
    let from = scenario.redis_now_ms() + 1_000;
    let to = from + 10_000;
    let tick_fires = || {
        intervals(&scenario)
            .into_iter()
            .filter(|(run, _, _)| run.starts_with("tick@"))
            .map(|(run, start, _)| (fire_ms(&run), start))
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(60), || tick_fires()
            .iter()
            .any(|(fire, _)| *fire > to)),
        "no fire after {to} started within 60 s: {:?}",
        tick_fires()
    );

    let waiting: usize = scenario
        .server
        .connection()
        .llen(keys().ready("default", Priority::Normal))
        .expect("LLEN");
    assert!(
        waiting > BACKLOG / 2,
        "the backlog lasted the whole test ({waiting} tasks left)"
    );
    let mut lags: Vec<i64> = tick_fires()
        .into_iter()
        .filter(|(fire, _)| (from..=to).contains(fire))
        .map(|(fire, start)| start - fire)
        .collect();
    lags.sort_unstable();
    let expected = usize::try_from((to - from) / 1000).expect("a count");
    assert!(
        lags.len() >= expected,
        "{} fires ran of {expected} due: {lags:?}",
        lags.len()
    );
    // Behind the backlog a fire would wait for all of it: more than the whole test, as the
    // tasks left show. Ahead of it, for one worker to finish a task: tens of ms on a quiet
    // machine, some hundreds on a loaded one. The bound catches the first, not the speed.
    let p99 = percentile(&lags, 0.99);
    eprintln!(
        "fire lag behind the backlog over {} fires: p99 {p99} ms",
        lags.len()
    );
    assert!(
        p99 <= 5_000,
        "cron fires start within 5 s behind 100,000 tasks: p99 {p99} ms, lags {lags:?}"
    );
}
