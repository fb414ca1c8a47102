//! What the archive's tests share: the stores replicas archive to (a directory, an S3 bucket)
//! behind one trait, the records of a part (and of every part of a `file://` archive, straight
//! from the files), the outcomes Redis recorded, the check that an archive holds each of them
//! once and every run of the ledger, the replicas that wrote them stopped as a service manager
//! stops them, and the scenarios run the same against either store.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::Commands;
use serde_json::Value;
use tempfile::TempDir;

use super::keys;
use super::redis_server::RedisServer;
use super::replica::ReplicaProcess;
use super::scenario::Scenario;
use super::schemas::Schemas;
use super::wait::wait_for;
use super::wait_until;

/// Where a test's replicas archive: a scenario of the archive is written once against this
/// and run against a directory ([`FileArchive`]) and an S3 bucket
/// ([`S3Server`](super::s3::S3Server)).
pub trait ArchiveStore {
    /// The `--archive` URL replicas and commands are given.
    fn url(&self) -> String;
    /// What a replica or a command needs in its environment to reach the store.
    fn env(&self) -> Vec<(&'static str, String)>;
    /// Every record of every part the store holds, with the name of the part it is in.
    fn archived(&self) -> Vec<(String, Value)>;
    /// The store's own log, for failure messages ("" for a store that keeps none).
    fn log(&self) -> String;
}

/// A `file://` archive in a directory of its own, removed on drop.
pub struct FileArchive {
    dir: TempDir,
}

impl FileArchive {
    /// A directory no replica has archived to yet (made by the first replica that does).
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temp dir for the archive"),
        }
    }

    /// The archive's directory.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("archive")
    }
}

impl ArchiveStore for FileArchive {
    fn url(&self) -> String {
        format!("file://{}", self.path().display())
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }

    fn archived(&self) -> Vec<(String, Value)> {
        archived(&self.path())
    }

    fn log(&self) -> String {
        String::new()
    }
}

/// Starts replica `id` archiving to `store`, its parts closed once their first record is 1 s
/// old, with `extra` flags and `env` besides the store's.
pub fn archiving_replica(
    scenario: &Scenario,
    store: &impl ArchiveStore,
    id: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> ReplicaProcess {
    let url = store.url();
    let mut flags = vec!["--archive", url.as_str(), "--archive-part-age", "1s"];
    flags.extend_from_slice(extra);
    let store_env = store.env();
    let mut all: Vec<(&str, &str)> = store_env
        .iter()
        .map(|(key, value)| (*key, value.as_str()))
        .collect();
    all.extend_from_slice(env);
    scenario.replica_with_env(id, &flags, &all)
}

/// The outcomes the archive keeps.
pub const OUTCOMES: [&str; 4] = ["succeeded", "retrying", "dead", "skipped"];

/// The records of the part `name`, from its gzipped bytes.
#[track_caller]
pub fn part_records(name: &str, gzipped: &[u8]) -> Vec<Value> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(gzipped)
        .read_to_string(&mut text)
        .unwrap_or_else(|error| panic!("{name} is no gzipped text: {error}"));
    text.lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|error| panic!("{name}: {error}: {line}"))
        })
        .collect()
}

/// Every record of every part under the `file://` archive `archive`, with the path of the part
/// it is in.
pub fn archived(archive: &Path) -> Vec<(String, Value)> {
    let mut records = Vec::new();
    let mut directories = vec![archive.to_path_buf()];
    while let Some(directory) = directories.pop() {
        let Ok(entries) = std::fs::read_dir(&directory) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                directories.push(path);
                continue;
            }
            let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
                continue;
            };
            // The store's temporary files, while it writes a part.
            if !name.ends_with(".ndjson.gz") {
                continue;
            }
            let name = path.display().to_string();
            let bytes = std::fs::read(&path).expect("read a part");
            for record in part_records(&name, &bytes) {
                records.push((name.clone(), record));
            }
        }
    }
    records
}

/// The outcomes Redis recorded, by their id in the events stream: (run id, outcome).
pub fn recorded_outcomes(scenario: &Scenario) -> BTreeMap<String, (String, String)> {
    let entries: redis::streams::StreamRangeReply = scenario
        .server
        .connection()
        .xrange_all(keys().events())
        .expect("XRANGE events");
    entries
        .ids
        .into_iter()
        .filter_map(|entry| {
            let state: String = entry.get("state")?;
            let run: String = entry.get("run")?;
            OUTCOMES
                .contains(&state.as_str())
                .then(|| (entry.id.clone(), (run, state)))
        })
        .collect()
}

/// Asserts that `records` (each with the name of the part it is in) hold each outcome Redis
/// recorded once, and nothing else: the same event ids, none twice; each record matches the
/// documented schema and the part it is in is named as parts are. Returns the records.
#[track_caller]
pub fn assert_archived_once(
    scenario: &Scenario,
    records: Vec<(String, Value)>,
    logs: &str,
) -> Vec<Value> {
    let schemas = Schemas::of_the_docs();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for (part, record) in &records {
        schemas.assert_matches("archive-record.json", record);
        assert!(
            part.contains("runs/v1/date=") && part.contains("/hour="),
            "part named {part}"
        );
        let event = record["event"]
            .as_str()
            .expect("every record names its event");
        *seen.entry(event.to_owned()).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, count)| **count > 1).collect();
    assert!(
        twice.is_empty(),
        "archived more than once: {twice:?}\n{logs}"
    );
    let recorded = recorded_outcomes(scenario);
    let missing: Vec<_> = recorded
        .iter()
        .filter(|(id, _)| !seen.contains_key(*id))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} outcomes Redis recorded are not archived: {missing:?}\n{logs}",
        missing.len(),
        recorded.len()
    );
    let foreign: Vec<_> = seen
        .keys()
        .filter(|id| !recorded.contains_key(*id))
        .collect();
    assert!(foreign.is_empty(), "archived, never recorded: {foreign:?}");
    for (_, record) in &records {
        let (run, outcome) = &recorded[record["event"].as_str().expect("event")];
        assert_eq!(record["id"].as_str(), Some(run.as_str()), "{record}");
        assert_eq!(
            record["outcome"].as_str(),
            Some(outcome.as_str()),
            "{record}"
        );
    }
    records.into_iter().map(|(_, record)| record).collect()
}

/// The records of the outbox not yet acknowledged, and of the parts given and not acknowledged.
pub fn outbox(scenario: &Scenario) -> (u64, u64) {
    let mut connection = scenario.server.connection();
    let records: u64 = connection.xlen(keys().archive()).expect("XLEN");
    let parts: u64 = connection.hlen(keys().archive_parts()).expect("HLEN");
    (records, parts)
}

/// `replicas` stopped with SIGTERM one after the other, as a service manager stops them, each
/// asserted to exit 0: their logs.
#[track_caller]
pub fn stop(replicas: Vec<ReplicaProcess>) -> String {
    let mut logs = String::new();
    for mut replica in replicas {
        let code = replica.terminate(Duration::from_secs(30));
        assert_eq!(
            code,
            Some(0),
            "{} did not stop cleanly:\n{}",
            replica.id,
            replica.log()
        );
        logs.push_str(&format!("log of {}:\n{}\n", replica.id, replica.log()));
    }
    logs
}

/// r1 exports to `store` alone, writes a part and stalls before acknowledging it (the fault
/// point `REDCRON_TEST_FAULT_ARCHIVE_STALL`), and is killed with `kill -9` once r2, started
/// with `env` besides the store's, runs beside it: r2 leads, is given the part once r1 has
/// held it a run lease, finds it written with the bytes it would write, and archives what
/// follows; the archive holds each outcome Redis recorded once, each of the stalled part's
/// among them, and every run of the ledger.
pub fn killed_exporter_between_write_and_acknowledgement(
    store: &impl ArchiveStore,
    env: &[(&str, &str)],
) {
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    let stall = scenario.dir.path().join("stall");
    let lease = ["--run-lease", "2s"];
    let stall_env = [(
        "REDCRON_TEST_FAULT_ARCHIVE_STALL",
        stall.to_str().expect("UTF-8"),
    )];
    let mut r1 = archiving_replica(&scenario, store, "r1", &lease, &stall_env);
    assert!(
        wait_until(Duration::from_secs(20), || scenario
            .leader()
            .is_some_and(|token| token.starts_with("r1:"))),
        "r1 never led\n{}",
        r1.log()
    );
    std::fs::write(&stall, "").expect("arm the fault point");
    assert!(
        wait_until(Duration::from_secs(30), || r1
            .log()
            .contains("stalling before its acknowledgement")),
        "r1 never wrote a part\n{}\n{}",
        r1.log(),
        store.log()
    );
    let written = store.archived();
    assert!(
        !written.is_empty(),
        "the stalled part is not in the archive"
    );
    let (_, given) = outbox(&scenario);
    assert_eq!(given, 1, "the stalled part is not recorded as given");

    let r2 = archiving_replica(&scenario, store, "r2", &lease, env);
    r1.kill9();
    assert!(
        wait_until(Duration::from_secs(30), || scenario
            .leader()
            .is_some_and(|token| token.starts_with("r2:"))),
        "r2 never led after r1 was killed\n{}",
        r2.log()
    );
    assert!(
        wait_until(Duration::from_secs(60), || {
            let (_, given) = outbox(&scenario);
            given == 0 && store.archived().len() > written.len()
        }),
        "the stalled part was never acknowledged by r2: {:?}\n{}\n{}",
        outbox(&scenario),
        r2.log(),
        store.log()
    );
    assert!(
        r2.log().contains("the part was written already"),
        "r2 did not find the stalled part written\n{}",
        r2.log()
    );
    let logs = stop(vec![r2]);
    assert_eq!(outbox(&scenario), (0, 0), "left in the outbox\n{logs}");
    let records = assert_archived_once(&scenario, store.archived(), &logs);
    for (_, stalled) in &written {
        let event = &stalled["event"];
        assert_eq!(
            records
                .iter()
                .filter(|record| &record["event"] == event)
                .count(),
            1,
            "a record of the stalled part is not archived once: {stalled}"
        );
    }
    assert_ledger_archived(&scenario, &records);
}

/// Asserts that every run the ledger says ran, and Redis recorded as succeeded, is in
/// `records` as succeeded once.
#[track_caller]
pub fn assert_ledger_archived(scenario: &Scenario, records: &[Value]) {
    let mut succeeded: BTreeMap<&str, usize> = BTreeMap::new();
    for record in records
        .iter()
        .filter(|record| record["outcome"] == "succeeded")
    {
        *succeeded
            .entry(record["id"].as_str().expect("id"))
            .or_default() += 1;
    }
    let ledger = scenario.ledger();
    assert!(!ledger.is_empty(), "no run ran");
    for (run, _, _) in ledger {
        // A fire a killed replica or a restarted Redis cut short may have no outcome yet, or
        // have run again: its outcome decides.
        if scenario.run_state(&run).0.as_deref() == Some("succeeded") {
            assert_eq!(
                succeeded.get(run.as_str()),
                Some(&1),
                "{run} ran and succeeded, and is not archived once"
            );
        }
    }
}

/// How many records of the outbox were given to `consumer` and not acknowledged.
pub fn pending_of(scenario: &Scenario, consumer: &str) -> usize {
    let pending: redis::streams::StreamPendingCountReply = redis::cmd("XPENDING")
        .arg(keys().archive())
        .arg(redcron::store::ARCHIVE_GROUP)
        .arg("-")
        .arg("+")
        .arg(10_000)
        .arg(consumer)
        .query(&mut scenario.server.connection())
        .expect("XPENDING");
    pending.ids.len()
}

/// Waits until `store` holds a record of an outcome recorded more than 2 s after `ms` (on
/// Redis's clock): export goes on after whatever happened at `ms`.
#[track_caller]
fn assert_archived_after(
    store: &impl ArchiveStore,
    ms: i64,
    what: &str,
    replicas: &[ReplicaProcess],
) {
    assert!(
        wait_until(Duration::from_secs(60), || store
            .archived()
            .iter()
            .any(|(_, record)| record["at_ms"].as_i64() > Some(ms + 2_000))),
        "nothing archived after {what}\n{}\n{}",
        ReplicaProcess::logs(replicas),
        store.log()
    );
}

/// How the leader leaves in [`leader_change_mid_export`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leaves {
    /// `kill -9`: a part it was given stays given to it until another exporter takes it over,
    /// once it has been left a run lease.
    Killed,
    /// SIGTERM, as a service manager stops it: it writes what it holds before it exits, and
    /// must exit 0.
    Stopped,
}

/// Three replicas export to `store`, and the leader leaves as `leaves` says while records
/// wait: another leads, outcomes recorded after the change are archived by the replicas left,
/// no part stays given to the one that left, and the archive holds each outcome Redis
/// recorded once, every run of the ledger among them.
pub fn leader_change_mid_export(store: &impl ArchiveStore, leaves: Leaves) {
    let scenario = Scenario::new();
    scenario.write_jobs(&scenario.every_second_job());
    let mut replicas: Vec<ReplicaProcess> = ["r1", "r2", "r3"]
        .into_iter()
        .map(|id| archiving_replica(&scenario, store, id, &[], &[]))
        .collect();
    // Archived runs were planned by a leader, and parts are written while the replicas run.
    assert!(
        wait_until(Duration::from_secs(60), || store.archived().len() >= 5),
        "nothing archived\n{}\n{}",
        ReplicaProcess::logs(&replicas),
        store.log()
    );
    let (leader, epoch) = scenario.leading_replica(&replicas);
    let waiting = wait_for(Duration::from_secs(30), || {
        Some(outbox(&scenario).0).filter(|records| *records > 0)
    });
    assert!(waiting.is_some(), "no record waits for the archive");
    let mut left = replicas.remove(leader);
    // Whether it held a part (it holds one only while writing it) is the machine's timing,
    // said for whoever reads the test's output; the kill between a part's write and its
    // acknowledgement is a scenario of its own.
    let held = match leaves {
        Leaves::Killed => {
            left.kill9();
            pending_of(&scenario, &left.id)
        }
        Leaves::Stopped => {
            let held = pending_of(&scenario, &left.id);
            let code = left.terminate(Duration::from_secs(30));
            assert_eq!(
                code,
                Some(0),
                "{} did not stop cleanly\n{}",
                left.id,
                left.log()
            );
            held
        }
    };
    assert!(
        wait_until(Duration::from_secs(30), || {
            scenario.leader().is_some_and(|token| {
                let (id, taken) = token.rsplit_once(':').expect("<id>:<epoch>");
                id != left.id && taken.parse::<u64>().is_ok_and(|taken| taken > epoch)
            })
        }),
        "no other replica led after {} left ({leaves:?})\n{}\n{}",
        left.id,
        left.log(),
        ReplicaProcess::logs(&replicas)
    );
    assert_archived_after(
        store,
        scenario.redis_now_ms(),
        "the leader changed",
        &replicas,
    );
    assert!(
        wait_until(Duration::from_secs(30), || pending_of(&scenario, &left.id)
            == 0),
        "{} still holds a part\n{}",
        left.id,
        ReplicaProcess::logs(&replicas)
    );
    let logs = stop(replicas);
    assert_eq!(outbox(&scenario), (0, 0), "left in the outbox\n{logs}");
    let records = assert_archived_once(&scenario, store.archived(), &logs);
    assert_ledger_archived(&scenario, &records);
    eprintln!(
        "{} {leaves:?} with records of the outbox waiting: {}, given to it: {held}; archived \
         once: {}",
        left.id,
        waiting.unwrap_or_default(),
        records.len()
    );
}

/// Two replicas export to `store` from a Redis with AOF on, which is shut down (its AOF
/// written) and started again on the same socket and directory 2 s later, while parts are
/// taken, written and acknowledged every second: export goes on, and the archive holds each
/// outcome Redis recorded once, every run of the ledger among them.
pub fn redis_restart_mid_export(store: &impl ArchiveStore) {
    let mut scenario = Scenario {
        server: RedisServer::start_with_aof(),
        dir: tempfile::tempdir().expect("temp dir"),
    };
    std::fs::create_dir(scenario.schedules()).expect("schedules dir");
    scenario.write_jobs(&scenario.every_second_job());
    let replicas: Vec<ReplicaProcess> = ["r1", "r2"]
        .into_iter()
        .map(|id| archiving_replica(&scenario, store, id, &[], &[]))
        .collect();
    assert!(
        wait_until(Duration::from_secs(60), || store.archived().len() >= 5),
        "nothing archived\n{}\n{}",
        ReplicaProcess::logs(&replicas),
        store.log()
    );
    scenario.server.restart(Duration::from_secs(2));
    assert_archived_after(store, scenario.redis_now_ms(), "the restart", &replicas);
    let logs = stop(replicas);
    assert_eq!(outbox(&scenario), (0, 0), "left in the outbox\n{logs}");
    let records = assert_archived_once(&scenario, store.archived(), &logs);
    let ran = scenario.ledger().len();
    assert!(ran >= 10, "{ran} runs in the ledger\n{logs}");
    assert_ledger_archived(&scenario, &records);
}

/// Two replicas export to `store`; Redis is restored from a copy taken while records waited
/// that no exporter had been given, so the parts that archived them after the copy are cut
/// again from the restored outbox, most often with other records around them: every outcome
/// the restored Redis recorded is archived, and `history --archive` reading the archive alone
/// shows each outcome once, though two parts may hold it. The outcomes recorded between the
/// copy and the restore are lost with Redis's data, archived before it.
pub fn redis_restored_mid_export(store: &FileArchive) {
    let mut scenario = Scenario::new();
    // Outcomes every few milliseconds, so that a part cut again from the restored outbox holds
    // other records than the part that archived its first.
    let jobs: String = (0..6)
        .map(|job| {
            format!(
                "[jobs.tick{job}]\nschedule = \"* * * * * *\"\noverlap = \"allow\"\n\
                 command = \"sleep 0.0{job}; {}\"\n\n",
                scenario.record("")
            )
        })
        .collect();
    scenario.write_jobs(&jobs);
    let replicas: Vec<ReplicaProcess> = ["r1", "r2"]
        .into_iter()
        .map(|id| archiving_replica(&scenario, store, id, &[], &[]))
        .collect();
    assert!(
        wait_until(Duration::from_secs(60), || store.archived().len() >= 3),
        "nothing archived\n{}\n{}",
        ReplicaProcess::logs(&replicas),
        store.log()
    );
    // Records the group has not given to an exporter: `lag` of `XINFO GROUPS`.
    let waiting_ungiven = |connection: &mut redis::Connection| -> i64 {
        let groups: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(keys().archive())
            .query(connection)
            .expect("XINFO GROUPS");
        groups
            .first()
            .and_then(|group| match group.get("lag") {
                Some(redis::Value::Int(lag)) => Some(*lag),
                _ => None,
            })
            .unwrap_or_default()
    };
    assert!(
        wait_until(Duration::from_secs(60), || scenario
            .server
            .snapshot(waiting_ungiven)
            > 0),
        "no copy of Redis with records waiting\n{}",
        ReplicaProcess::logs(&replicas)
    );
    // The records the copy holds unarchived are archived from the Redis that goes on.
    let copied_ms = scenario.redis_now_ms();
    assert_archived_after(store, copied_ms, "the copy", &replicas);
    scenario.server.restore_snapshot(Duration::from_secs(1));
    assert_archived_after(store, scenario.redis_now_ms(), "the restore", &replicas);
    let logs = stop(replicas);
    assert_eq!(outbox(&scenario), (0, 0), "left in the outbox\n{logs}");
    let records = store.archived();
    let outcome = |document: &Value| {
        (
            document["id"].as_str().unwrap_or_default().to_owned(),
            document["at_ms"].as_i64().unwrap_or_default(),
            document["outcome"].as_str().unwrap_or_default().to_owned(),
            document["attempt"].as_i64().unwrap_or_default(),
        )
    };
    let archived: BTreeMap<String, _> = records
        .iter()
        .map(|(_, record)| {
            let event = record["event"]
                .as_str()
                .expect("every record names its event");
            (event.to_owned(), outcome(record))
        })
        .collect();
    let missing: Vec<_> = recorded_outcomes(&scenario)
        .into_iter()
        .filter(|(id, _)| !archived.contains_key(id))
        .collect();
    assert!(missing.is_empty(), "not archived: {missing:?}\n{logs}");
    // Read from the archive alone: Redis's outcomes would hide a repeated one.
    let _: () = scenario
        .server
        .connection()
        .del(keys().events())
        .expect("DEL");
    let url = store.url();
    let read = super::cli(
        &scenario.server,
        scenario.dir.path(),
        &["history", "--archive", &url, "-n", "100000", "--json"],
    );
    assert_eq!(read.code, Some(0), "{}", read.stderr);
    let mut shown: BTreeMap<_, usize> = BTreeMap::new();
    for run in super::one_document(&read.stdout)["runs"]
        .as_array()
        .expect("runs")
    {
        *shown.entry(outcome(run)).or_default() += 1;
    }
    let twice: Vec<_> = shown.iter().filter(|(_, count)| **count > 1).collect();
    assert!(twice.is_empty(), "shown more than once: {twice:?}");
    let distinct: BTreeSet<_> = archived.into_values().collect();
    assert_eq!(
        shown.len(),
        distinct.len(),
        "{} outcomes in {} records of the archive, {} shown",
        distinct.len(),
        records.len(),
        shown.len()
    );
}
