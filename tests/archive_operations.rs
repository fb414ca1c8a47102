//! The archive's operations, with real replicas: each closed day gets a manifest that matches
//! its parts on disk, a replica running without `--archive` when the namespace starts archiving
//! records for it from its next heartbeat, an archive that refuses parts is said from the first
//! refusal to the next part written, a foreign object named like a part is listed as damaged,
//! and the archive stopped as docs/operations.md says leaves no run record without an expiry.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use redis::Commands;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::util::archive::{archived, stop};
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::{Scenario, event_entries};
use crate::util::schemas::Schemas;
use crate::util::wait::wait_for;
use crate::util::web::WebProcess;
use crate::util::{cli, keys, one_document, wait_until};

/// What a day's parts are on disk, read as a manifest lists them: name -> (records, bytes,
/// sha256).
fn parts_on_disk(archive: &std::path::Path, date: &str) -> BTreeMap<String, (u64, u64, String)> {
    let mut parts = BTreeMap::new();
    let day = archive.join(format!("runs/v1/date={date}"));
    for hour in std::fs::read_dir(&day).expect("the day's directory") {
        let hour = hour.expect("an entry").path();
        if !hour.is_dir() {
            continue;
        }
        for part in std::fs::read_dir(&hour).expect("an hour's directory") {
            let part = part.expect("an entry").path();
            let name = part.strip_prefix(archive).expect("under the archive");
            let name = name.to_str().expect("UTF-8").to_owned();
            if !name.ends_with(".ndjson.gz") {
                continue;
            }
            let bytes = std::fs::read(&part).expect("read a part");
            let mut text = String::new();
            std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
                .expect("gzip");
            let sha256 = hex::encode(Sha256::digest(&bytes));
            parts.insert(
                name,
                (text.lines().count() as u64, bytes.len() as u64, sha256),
            );
        }
    }
    parts
}

/// A day, in milliseconds.
const DAY_MS: i64 = 86_400_000;

/// The start of yesterday (UTC) on Redis's clock, in milliseconds, and its date as the
/// archive's folders name it: a day that is closed, since a day cannot be waited for.
fn yesterday(scenario: &Scenario) -> (i64, String) {
    let yesterday_ms = (scenario.redis_now_ms() / DAY_MS - 1) * DAY_MS;
    let date = chrono::DateTime::from_timestamp_millis(yesterday_ms)
        .expect("a date")
        .format("%Y-%m-%d")
        .to_string();
    (yesterday_ms, date)
}

#[test]
fn a_closed_day_gets_a_manifest_that_matches_its_parts_on_disk() {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&scenario.every_second_job());
    // Yesterday's outcomes, as a replica of yesterday left them in the outbox (the ids Redis
    // gave them then): three at 05:00, two at 06:00. A day cannot be waited for.
    let (yesterday_ms, date) = yesterday(&scenario);
    let mut connection = scenario.server.connection();
    for (hour, n) in [(5, 0), (5, 1), (5, 2), (6, 0), (6, 1)] {
        let id = format!("{}-{n}", yesterday_ms + hour * 3_600_000);
        let run = format!("seeded@{hour}-{n}");
        let _: String = redis::cmd("XADD")
            .arg(keys().archive())
            .arg(&id)
            .arg(&[
                ("event", id.as_str()),
                ("run", run.as_str()),
                ("state", "succeeded"),
                ("job", "seeded"),
            ])
            .query(&mut connection)
            .expect("XADD");
    }
    let archiving = ["--archive", &url, "--archive-part-age", "1s"];
    let replicas = scenario.replicas_with_a_leader(&["r1", "r2"], &archiving);
    let manifest_file = archive.join(format!("runs/v1/date={date}/manifest.json"));
    // Yesterday is over: once its parts are acknowledged, no record of it is left and it is
    // closed.
    assert!(
        wait_until(Duration::from_secs(60), || manifest_file.exists()),
        "no manifest of {date}\n{}",
        ReplicaProcess::logs(&replicas)
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(&manifest_file).expect("read the manifest"))
            .expect("a manifest is JSON");
    let listed: BTreeMap<String, (u64, u64, String)> = manifest["parts"]
        .as_array()
        .expect("parts")
        .iter()
        .map(|part| {
            let field = |name: &str| part[name].as_u64().expect(name);
            (
                part["name"].as_str().expect("name").to_owned(),
                (
                    field("records"),
                    field("bytes"),
                    part["sha256"].as_str().expect("sha256").to_owned(),
                ),
            )
        })
        .collect();
    assert_eq!(listed, parts_on_disk(&archive, &date), "{manifest:#}");
    assert_eq!(listed.len(), 2, "one part an hour: {manifest:#}");
    assert_eq!(manifest["records"], 5, "{manifest:#}");
    assert_eq!(manifest["date"], date.as_str());
    assert_eq!(
        manifest["parts"][0]["first"],
        format!("{}-0", yesterday_ms + 5 * 3_600_000)
    );
    assert_eq!(
        manifest["parts"][1]["last"],
        format!("{}-1", yesterday_ms + 6 * 3_600_000)
    );
    let logs = stop(replicas);
    // Written once: the day is forgotten (today, open, may wait for its own), no second
    // version, and today has none.
    let waiting: Option<i64> = connection
        .zscore(keys().archive_days(), yesterday_ms / DAY_MS)
        .expect("ZSCORE");
    assert_eq!(waiting, None, "{date} still waits for its manifest\n{logs}");
    assert!(
        !archive
            .join(format!("runs/v1/date={date}/manifest-2.json"))
            .exists()
    );
    let today = chrono::DateTime::from_timestamp_millis(yesterday_ms + DAY_MS)
        .expect("a date")
        .format("%Y-%m-%d");
    assert!(
        !archive
            .join(format!("runs/v1/date={today}/manifest.json"))
            .exists(),
        "a manifest of a day still open\n{logs}"
    );
}

/// The outcomes in the events stream: (id, run, worker).
fn outcomes_with_workers(scenario: &Scenario) -> Vec<(String, String, String)> {
    event_entries(scenario)
        .into_iter()
        .filter_map(|entry| {
            let _: String = entry.get("state")?;
            let run: String = entry.get("run")?;
            let worker: String = entry.get("worker").unwrap_or_default();
            Some((entry.id.clone(), run, worker))
        })
        .collect()
}

#[test]
fn a_replica_running_when_the_archive_starts_records_from_its_next_heartbeat() {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&scenario.every_second_job());
    // r1 as it was before the namespace archived: no --archive.
    let r1 = scenario.replicas_with_a_leader(&["r1"], &[]).remove(0);
    assert!(
        wait_until(Duration::from_secs(30), || scenario.ledger().len() >= 3),
        "r1 ran nothing\n{}",
        r1.log()
    );
    let before_ms = scenario.redis_now_ms();
    let r2 = scenario.replica("r2", &["--archive", &url, "--archive-part-age", "1s"]);
    let marker = || -> bool {
        scenario
            .server
            .connection()
            .exists(keys().archive_marker())
            .expect("EXISTS")
    };
    assert!(
        wait_until(Duration::from_secs(30), marker),
        "r2 never marked the namespace\n{}",
        r2.log()
    );
    // r1's heartbeat finds the marker, says so loudly, and its next one reports it in status.
    let recording = || {
        let status = cli(&scenario.server, scenario.dir.path(), &["status", "--json"]);
        let status = one_document(&status.stdout);
        status["archive"]["recording"]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|id| id == "r1"))
    };
    assert!(
        wait_until(Duration::from_secs(30), recording),
        "status never showed r1 recording\n{}\n{}",
        r1.log(),
        r2.log()
    );
    let reported_ms: i64 = scenario
        .server
        .connection()
        .zscore(keys().replicas(), "r1")
        .expect("ZSCORE");
    assert!(
        r1.log().contains("the namespace archives now"),
        "r1 did not warn\n{}",
        r1.log()
    );
    let status = cli(&scenario.server, scenario.dir.path(), &["status"]);
    assert!(
        status
            .stdout
            .contains("replica r1 was started without --archive"),
        "{}",
        status.stdout
    );
    let document =
        one_document(&cli(&scenario.server, scenario.dir.path(), &["status", "--json"]).stdout);
    Schemas::of_the_docs().assert_matches("status.json", &document);
    assert_eq!(document["archive"]["url"], url.as_str(), "{document:#}");
    assert_eq!(document["archive"]["exporting"], serde_json::json!(["r2"]));
    // Outcomes r1 records from then on reach the archive through r2.
    assert!(
        wait_until(Duration::from_secs(60), || archived(&archive).iter().any(
            |(_, record)| record["worker"]
                .as_str()
                .is_some_and(|worker| worker.starts_with("r1/"))
                && record["at_ms"].as_i64() > Some(reported_ms)
        )),
        "nothing r1 recorded was archived\n{}\n{}",
        r1.log(),
        r2.log()
    );
    let logs = stop(vec![r1, r2]);
    let in_archive: BTreeSet<String> = archived(&archive)
        .into_iter()
        .filter_map(|(_, record)| record["event"].as_str().map(str::to_owned))
        .collect();
    // The bound: what is not archived was recorded by r1 after the archive started and before
    // the heartbeat that reported it recording, one period after the one that found the marker.
    let mut unarchived = Vec::new();
    for (id, run, worker) in outcomes_with_workers(&scenario) {
        let ms = redcron::store::record_ms(&id).expect("a stream id");
        if ms < before_ms || in_archive.contains(&id) {
            continue;
        }
        assert!(
            worker.starts_with("r1/") && ms <= reported_ms,
            "{run} ({id}, worker {worker:?}) was recorded {} ms after r1 reported recording, \
             and is not archived\n{logs}",
            ms - reported_ms
        );
        unarchived.push(ms - before_ms);
    }
    eprintln!(
        "outcomes of r1 not archived, ms after r2 started: {unarchived:?}; r1 reported \
         recording {} ms after",
        reported_ms - before_ms
    );
}

/// The commands docs/operations.md gives to stop archiving, as written, for namespace `test`
/// on `scenario`'s Redis.
fn stop_archiving_commands(scenario: &Scenario) -> String {
    let operations = include_str!("../docs/operations.md");
    let section = operations
        .split("## When the archive is down")
        .nth(1)
        .expect("docs/operations.md says what to do when the archive is down");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the section has its commands");
    let url = scenario.server.url();
    let socket = url.strip_prefix("redis+unix://").expect("a unix socket");
    block
        .replace("redis-cli", &format!("redis-cli -s {socket}"))
        .replace("{redcron}", &format!("{{{}}}", crate::util::NAMESPACE))
}

#[test]
fn stopping_the_archive_as_documented_leaves_no_run_record_without_an_expiry() {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&scenario.every_second_job());
    let archiving = ["--archive", &url, "--archive-part-age", "1s"];
    let replicas = scenario.replicas_with_a_leader(&["r1"], &archiving);
    // The archive becomes unwritable: a file where its directory was.
    std::fs::remove_dir_all(&archive).expect("remove the archive");
    std::fs::write(&archive, "not a directory").expect("block the archive");
    let mut connection = scenario.server.connection();
    let waiting = |connection: &mut redis::Connection| -> Vec<String> {
        let runs: Vec<String> = connection
            .scan_match(format!("{{{}}}:run:*", crate::util::NAMESPACE))
            .expect("SCAN")
            .map(|key| key.expect("a key"))
            .collect();
        runs.into_iter()
            .filter(|run| {
                let ttl: i64 = connection.pttl(run).expect("PTTL");
                let archive_id: bool = connection.hexists(run, "archive_id").expect("HEXISTS");
                ttl == -1 && archive_id
            })
            .collect()
    };
    assert!(
        wait_until(Duration::from_secs(30), || waiting(&mut connection).len()
            >= 3),
        "no run waits for the archive\n{}",
        ReplicaProcess::logs(&replicas)
    );
    let logs = stop(replicas);
    let commands = stop_archiving_commands(&scenario);
    let ran = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &commands])
        .output()
        .expect("bash runs the documented commands");
    assert!(
        ran.status.success(),
        "{commands}\n{}\n{logs}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(waiting(&mut connection), Vec::<String>::new(), "{commands}");
    for key in [
        keys().archive_marker(),
        keys().archive(),
        keys().archive_parts(),
        keys().archive_days(),
        keys().archive_failures(),
    ] {
        let exists: bool = connection.exists(&key).expect("EXISTS");
        assert!(!exists, "{key} is left\n{commands}");
    }
    // A replica without --archive starts and runs, and writes no record.
    let before = scenario.ledger().len();
    let r2 = scenario.replica("r2", &[]);
    assert!(
        wait_until(Duration::from_secs(30), || scenario.ledger().len()
            > before + 2),
        "r2 ran nothing after the archive stopped\n{}",
        r2.log()
    );
    stop(vec![r2]);
    let outbox: bool = connection.exists(keys().archive()).expect("EXISTS");
    assert!(!outbox, "an outbox without --archive");
}

/// An archive that refuses every part is said by `status`, `status --json`, `/api/v1/status`
/// and the console's overview from the first refusal, naming the part and a few words of why
/// but no path of the server's, rather than 15 minutes later as `ARCHIVE BEHIND`; the next part
/// written clears it.
#[test]
fn an_archive_refusing_parts_is_said_from_the_first_refusal_until_a_part_is_written() {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&scenario.every_second_job());
    let archiving = ["--archive", &url, "--archive-part-age", "1s"];
    let replicas = scenario.replicas_with_a_leader(&["r1"], &archiving);
    let logs = || ReplicaProcess::logs(&replicas);
    let console = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let status = || {
        let status = cli(&scenario.server, scenario.dir.path(), &["status", "--json"]);
        one_document(&status.stdout)
    };
    let failing = |status: &Value| status["archive"]["failing"].as_array().cloned();
    assert!(
        wait_until(Duration::from_secs(30), || !archived(&archive).is_empty()),
        "nothing was archived\n{}",
        logs()
    );
    assert_eq!(failing(&status()), Some(Vec::new()), "{}", logs());

    // The archive becomes unwritable: a file where its directory was (the tests run as root,
    // whom permissions do not stop).
    std::fs::remove_dir_all(&archive).expect("remove the archive");
    std::fs::write(&archive, "not a directory").expect("block the archive");
    let refused = wait_for(Duration::from_secs(30), || {
        let status = status();
        failing(&status)
            .filter(|failing| !failing.is_empty())
            .map(|_| status)
    })
    .unwrap_or_else(|| panic!("status never said the archive fails\n{}", logs()));
    Schemas::of_the_docs().assert_matches("status.json", &refused);
    let first = &refused["archive"]["failing"][0];
    assert_eq!(first["replica"], "r1", "{refused:#}");
    assert_eq!(first["reason"], "refused by the store", "{refused:#}");
    let part = first["part"].as_str().expect("the part").to_owned();
    assert!(part.starts_with("runs/v1/date="), "{part}");
    assert_eq!(refused["archive"]["behind"], false, "{refused:#}");
    assert!(
        logs().contains("the archive refused a part"),
        "the store's words are in the log\n{}",
        logs()
    );
    let text = cli(&scenario.server, scenario.dir.path(), &["status"]).stdout;
    assert!(
        text.contains("ARCHIVE FAILING: runs/v1/date=") && text.contains(": refused by the store"),
        "{text}"
    );
    let shown = scenario.dir.path().display().to_string();
    let api = console.get("/api/v1/status");
    assert_eq!(api.status, 200, "{}", api.body);
    assert_eq!(
        api.json()["archive"]["failing"][0]["reason"],
        "refused by the store"
    );
    assert!(
        !api.body.contains(&format!("{shown}/archive/")),
        "{}",
        api.body
    );
    let overview = console.get("/");
    assert_eq!(overview.status, 200, "{}", overview.body);
    for said in ["id=\"archive\"", "Failing", "refused by the store", &url] {
        assert!(
            overview.body.contains(said),
            "no {said:?}: {}",
            overview.body
        );
    }

    // Writable again: the next part written clears it.
    std::fs::remove_file(&archive).expect("unblock the archive");
    assert!(
        wait_until(Duration::from_secs(60), || failing(&status())
            == Some(Vec::new())),
        "status still says the archive fails\n{}",
        logs()
    );
    let overview = console.get("/");
    assert!(overview.body.contains("Not failing"), "{}", overview.body);
    stop(replicas);
}

/// A foreign object named like a part keeps no day from its manifest: the manifest lists it
/// with its size, its sha256 and why it cannot be read back in place of its records, and the
/// exporter that wrote the manifest warns once.
#[test]
fn a_foreign_object_named_like_a_part_is_listed_as_damaged_in_its_days_manifest() {
    let scenario = Scenario::new();
    let archive = scenario.dir.path().join("archive");
    let url = format!("file://{}", archive.display());
    scenario.write_jobs(&scenario.every_second_job());
    let (yesterday_ms, date) = yesterday(&scenario);
    let id = format!("{}-0", yesterday_ms + 5 * 3_600_000);
    let _: String = redis::cmd("XADD")
        .arg(keys().archive())
        .arg(&id)
        .arg(&[
            ("event", id.as_str()),
            ("run", "seeded@5"),
            ("state", "succeeded"),
            ("job", "seeded"),
        ])
        .query(&mut scenario.server.connection())
        .expect("XADD");
    let foreign_ms = yesterday_ms + 4 * 3_600_000;
    let foreign =
        format!("runs/v1/date={date}/hour=04/part-{foreign_ms}-0-{foreign_ms}-0.ndjson.gz");
    std::fs::create_dir_all(archive.join(&foreign).parent().expect("a folder")).expect("mkdir");
    std::fs::write(archive.join(&foreign), b"not a part").expect("write");
    let archiving = ["--archive", &url, "--archive-part-age", "1s"];
    let replicas = scenario.replicas_with_a_leader(&["r1", "r2"], &archiving);
    let manifest_file = archive.join(format!("runs/v1/date={date}/manifest.json"));
    assert!(
        wait_until(Duration::from_secs(60), || manifest_file.exists()),
        "no manifest of {date}\n{}",
        ReplicaProcess::logs(&replicas)
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(&manifest_file).expect("read")).expect("JSON");
    let parts = manifest["parts"].as_array().expect("parts");
    assert_eq!(parts.len(), 2, "{manifest:#}");
    assert_eq!(parts[0]["name"], foreign.as_str(), "{manifest:#}");
    assert!(parts[0]["damaged"].as_str().is_some(), "{manifest:#}");
    assert!(parts[0].get("records").is_none(), "{manifest:#}");
    assert_eq!(parts[0]["bytes"], 10, "{manifest:#}");
    assert_eq!(parts[1]["records"], 1, "{manifest:#}");
    assert_eq!(manifest["records"], 1, "{manifest:#}");
    let logs = stop(replicas);
    assert_eq!(
        logs.matches("lists parts that cannot be read back").count(),
        1,
        "{logs}"
    );
}
