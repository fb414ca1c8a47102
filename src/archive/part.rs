//! A part of the archive: its name, made from the range of outbox ids it holds, and its bytes,
//! the records as gzipped newline-delimited JSON in the schema `runs/v1` (docs/cli.md, "The
//! archive"). Both depend on the records alone, so a part written again after a crash has the
//! same name and the same bytes.

use std::io::Write;

use chrono::{DateTime, NaiveDate, Utc};
use flate2::GzBuilder;
use flate2::write::GzEncoder;
use serde::{Deserialize, Serialize};

use crate::store::{ArchivePart, ArchiveRecord, record_ms};

/// The version of the records' schema, in every record (`v`) and in every part's name.
pub const SCHEMA_VERSION: u32 = 1;

/// The folder of a day's parts (and its manifests): `runs/v1/date=YYYY-MM-DD`.
pub fn day_folder(date: NaiveDate) -> String {
    format!("runs/v{SCHEMA_VERSION}/date={}", date.format("%Y-%m-%d"))
}

/// The range of outbox ids a part's name holds, first and last, each as (ms, seq); `None` for
/// an object that is no part (a manifest, a store's temporary file). Takes a whole name or its
/// file name alone.
pub fn range_of(name: &str) -> Option<((u64, u64), (u64, u64))> {
    let file = name.rsplit('/').next()?;
    let range = file.strip_prefix("part-")?.strip_suffix(".ndjson.gz")?;
    let numbers: Vec<u64> = range
        .split('-')
        .map(|number| {
            // Digits alone: `parse` would take a sign too.
            (!number.is_empty() && number.bytes().all(|byte| byte.is_ascii_digit()))
                .then(|| number.parse().ok())
                .flatten()
        })
        .collect::<Option<_>>()?;
    let [first_ms, first_seq, last_ms, last_seq] = numbers[..] else {
        return None;
    };
    Some(((first_ms, first_seq), (last_ms, last_seq)))
}

/// The part's name in the archive:
/// `runs/v1/date=YYYY-MM-DD/hour=HH/part-<first id>-<last id>.ndjson.gz`, dated by its first
/// record (a part holds one hour of records, by the time Redis recorded them).
pub fn name(part: &ArchivePart) -> String {
    let at = record_ms(&part.first)
        .and_then(DateTime::<Utc>::from_timestamp_millis)
        .unwrap_or_default();
    format!(
        "runs/v{SCHEMA_VERSION}/date={}/hour={}/part-{}-{}.ndjson.gz",
        at.format("%Y-%m-%d"),
        at.format("%H"),
        part.first,
        part.last
    )
}

/// The part's bytes: one JSON record a line, gzipped with no name and no time in the header, so
/// that the same records always make the same bytes.
pub fn encode(part: &ArchivePart) -> Vec<u8> {
    let mut lines = Vec::new();
    for record in &part.records {
        let document = Document::of(record);
        // Serializing a struct of strings and numbers into memory cannot fail.
        serde_json::to_writer(&mut lines, &document).expect("a record serializes to JSON");
        lines.push(b'\n');
    }
    let mut encoder: GzEncoder<Vec<u8>> =
        GzBuilder::new().write(Vec::new(), flate2::Compression::default());
    // Writing into a Vec cannot fail.
    encoder.write_all(&lines).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

/// One record as the archive holds it: `history --json`'s fields for the attempt, and those of
/// `runs show --json` that every attempt of the run shares. What a record lacks is null.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Document {
    /// The schema's version.
    pub v: u32,
    /// The run id.
    pub id: String,
    /// The job.
    pub job: Option<String>,
    /// The replica that ran the attempt, else the one a run of an every-replica fire was meant
    /// for.
    pub replica: Option<String>,
    /// succeeded, retrying, dead or skipped.
    pub outcome: Option<String>,
    /// When the outcome was recorded, RFC 3339.
    pub at: Option<String>,
    /// The same, ms.
    pub at_ms: Option<i64>,
    /// The fire of a cron run, RFC 3339; null for an ad-hoc run.
    pub fire: Option<String>,
    /// The same, ms.
    pub fire_ms: Option<i64>,
    /// When this attempt started, RFC 3339; null when none ran.
    pub started: Option<String>,
    /// The same, ms.
    pub started_ms: Option<i64>,
    /// How long this attempt ran.
    pub duration_ms: Option<i64>,
    /// This attempt's number.
    pub attempt: Option<i64>,
    /// Its exit code.
    pub exit_code: Option<i64>,
    /// Why it failed or was skipped.
    pub reason: Option<String>,
    /// The failure, as a sentence.
    pub error: Option<String>,
    /// The last 4 KiB of this attempt's output (unlike `history`, of every attempt).
    pub output: Option<String>,
    /// Who triggered or enqueued the run.
    pub actor: Option<String>,
    /// cron or adhoc.
    pub kind: Option<String>,
    /// Its queue.
    pub queue: Option<String>,
    /// Its priority.
    pub priority: Option<String>,
    /// The worker that ran the attempt, `<replica id>/<slot>`.
    pub worker: Option<String>,
    /// The JSON the run was given, as text.
    pub payload: Option<String>,
    /// When the run was made, RFC 3339.
    pub created: Option<String>,
    /// The same, ms.
    pub created_ms: Option<i64>,
    /// The attempts it may use.
    pub max_attempts: Option<i64>,
    /// When a retry is due (a `retrying` outcome).
    pub due_ms: Option<i64>,
    /// The workflow instance a step's run is of.
    pub workflow: Option<String>,
    /// The step.
    pub step: Option<String>,
    /// The event's id in the events stream, which `history` reads while Redis keeps it: what
    /// tells a record and its event for the same outcome.
    pub event: Option<String>,
    /// Fields that were not UTF-8, written with U+FFFD in their place; absent when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
}

impl Document {
    /// The document of an outbox record.
    pub fn of(record: &ArchiveRecord) -> Self {
        let mut damaged = Vec::new();
        let mut text = |name: &'static str| -> Option<String> {
            let bytes = record.field(name).filter(|value| !value.is_empty())?;
            match std::str::from_utf8(bytes) {
                Ok(text) => Some(text.to_owned()),
                Err(_) => {
                    damaged.push(name);
                    Some(String::from_utf8_lossy(bytes).into_owned())
                }
            }
        };
        let id = text("run").unwrap_or_default();
        let job = text("job");
        let worker = text("worker");
        let event = text("event");
        let number = |value: &Option<String>| value.as_deref().and_then(|v| v.parse::<i64>().ok());
        let (started, duration, attempt, exit_code) = (
            text("started_ms"),
            text("duration_ms"),
            text("attempt"),
            text("exit_code"),
        );
        let (created, max_attempts, due) =
            (text("created_ms"), text("max_attempts"), text("due_ms"));
        let at_ms = event
            .as_deref()
            .and_then(record_ms)
            .or_else(|| record_ms(&record.id));
        let fire_ms = job
            .as_deref()
            .and_then(|job| crate::store::keys::fire_of_run(job, &id));
        let replica = job.as_deref().and_then(|job| {
            crate::store::replica_of(job, &id, worker.as_deref()).map(str::to_owned)
        });
        let started_ms = number(&started);
        let created_ms = number(&created);
        let document = Self {
            v: SCHEMA_VERSION,
            replica,
            outcome: text("state"),
            at: at_ms.and_then(crate::notify::rfc3339),
            at_ms,
            fire: fire_ms.and_then(crate::notify::rfc3339),
            fire_ms,
            started: started_ms.and_then(crate::notify::rfc3339),
            started_ms,
            duration_ms: number(&duration),
            attempt: number(&attempt),
            exit_code: number(&exit_code),
            reason: text("reason"),
            error: text("error"),
            output: text("output"),
            actor: text("actor"),
            kind: text("kind"),
            queue: text("queue"),
            priority: text("priority"),
            payload: text("payload"),
            created: created_ms.and_then(crate::notify::rfc3339),
            created_ms,
            max_attempts: number(&max_attempts),
            due_ms: number(&due),
            workflow: text("workflow"),
            step: text("step"),
            id,
            job,
            worker,
            event,
            damaged: None,
        };
        Self {
            damaged: (!damaged.is_empty()).then(|| damaged.join(", ")),
            ..document
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, fields: &[(&str, &[u8])]) -> ArchiveRecord {
        ArchiveRecord {
            id: id.to_owned(),
            fields: fields
                .iter()
                .map(|(name, value)| ((*name).to_owned(), value.to_vec()))
                .collect(),
        }
    }

    #[test]
    fn a_part_name_is_read_back_as_its_range_and_no_other_object_is() {
        for name in [
            "runs/v1/date=2026-03-08/hour=07/part-1772953200000-0-1772956799999-14.ndjson.gz",
            "part-1772953200000-0-1772956799999-14.ndjson.gz",
        ] {
            assert_eq!(
                range_of(name),
                Some(((1_772_953_200_000, 0), (1_772_956_799_999, 14))),
                "{name}"
            );
        }
        for other in [
            "runs/v1/date=2026-03-08/manifest.json",
            "part-1-0.ndjson.gz",
            "part-1-x-2-0.ndjson.gz",
            "part-+1-0-2-0.ndjson.gz",
            "part-1-0-2-0.ndjson.gz#3",
            "notes.txt",
        ] {
            assert_eq!(range_of(other), None, "{other}");
        }
        let date = NaiveDate::from_ymd_opt(2026, 3, 8).expect("a date");
        assert_eq!(day_folder(date), "runs/v1/date=2026-03-08");
    }

    #[test]
    fn a_part_is_named_by_its_range_and_dated_by_its_first_record() {
        let part = ArchivePart {
            first: "1772953200000-0".into(),
            last: "1772956799999-4".into(),
            records: Vec::new(),
        };
        assert_eq!(
            name(&part),
            "runs/v1/date=2026-03-08/hour=07/part-1772953200000-0-1772956799999-4.ndjson.gz"
        );
    }

    #[test]
    fn the_same_records_make_the_same_bytes_and_read_back_as_json_lines() {
        let part = ArchivePart {
            first: "1772953200000-0".into(),
            last: "1772953200000-1".into(),
            records: vec![
                record(
                    "1772953200000-0",
                    &[
                        ("event", b"1772953200000-0"),
                        ("run", b"backup@1772953200000"),
                        ("state", b"succeeded"),
                        ("job", b"backup"),
                        ("worker", b"r1/0"),
                        ("attempt", b"1"),
                        ("exit_code", b"0"),
                        ("output", b"done\n"),
                    ],
                ),
                record(
                    "1772953200000-1",
                    &[
                        ("run", b"r2"),
                        ("state", b"dead"),
                        ("output", b"bin\xffary"),
                    ],
                ),
            ],
        };
        let bytes = encode(&part);
        assert_eq!(bytes, encode(&part));
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
            .expect("gzip");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("json"))
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["v"], 1);
        assert_eq!(lines[0]["fire_ms"], 1_772_953_200_000_i64);
        assert_eq!(lines[0]["replica"], "r1");
        assert_eq!(lines[0]["exit_code"], 0);
        assert_eq!(lines[0]["output"], "done\n");
        assert_eq!(lines[0]["at"], "2026-03-08T07:00:00+00:00");
        assert_eq!(lines[1]["fire_ms"], serde_json::Value::Null);
        assert_eq!(lines[1]["damaged"], "output");
        assert!(lines[0].get("damaged").is_none());
    }
}
