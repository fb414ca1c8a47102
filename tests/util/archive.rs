//! What the archive's tests share: the records of a part (and of every part of a `file://`
//! archive, straight from the files), the outcomes Redis recorded, the check that an archive
//! holds each of them once, and the replicas that wrote them stopped as a service manager stops
//! them.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use redis::Commands;
use serde_json::Value;

use super::keys;
use super::replica::ReplicaProcess;
use super::scenario::Scenario;
use super::schemas::Schemas;
use super::wait_until;

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

/// Waits until `r1` leads, arms the fault point `stall` it was started with, and waits until it
/// has written a part and stalls before acknowledging it. `also` is printed with its log on
/// failure (the store's own log, say).
#[track_caller]
pub fn stall_the_leader_before_its_acknowledgement(
    scenario: &Scenario,
    r1: &ReplicaProcess,
    stall: &Path,
    also: &str,
) {
    assert!(
        wait_until(Duration::from_secs(20), || scenario
            .leader()
            .is_some_and(|token| token.starts_with("r1:"))),
        "r1 never led\n{}",
        r1.log()
    );
    std::fs::write(stall, "").expect("arm the fault point");
    assert!(
        wait_until(Duration::from_secs(30), || r1
            .log()
            .contains("stalling before its acknowledgement")),
        "r1 never wrote a part\n{}\n{also}",
        r1.log()
    );
}
