//! A run found in the archive by its id, once Redis no longer holds it: the days its id dates
//! read for its records, and those records made into what a run's record in Redis would hold.

use std::collections::HashMap;

use chrono::Days;

use super::{ReadError, Reader, day_of, event_place};
use crate::archive::part::Document;
use crate::store::{Event, RunState};

/// How many days after the day a run was made (or fired) `runs show` and the console look for
/// its records: a run ends within this long of its fire however it is retried or held, or is
/// found by `history --archive JOB --since` instead, which reads any range.
pub const RUN_DAYS: u64 = 7;

/// How far a run id's time may be ahead of Redis's clock, which dates the parts: an ad-hoc id is
/// made on the clock of the machine that enqueued it.
const ID_SKEW_MS: i64 = 3_600_000;

impl Reader {
    /// Run `id`'s records, oldest first, and the name of the part holding its last, looked for
    /// from the day it was made (or fired, for a cron run) for [`RUN_DAYS`] days, and no further
    /// than the day holding an outcome that ended it; `None` when none is found, or the id
    /// carries no time (neither a cron run's nor a UUIDv7). `damage` is told of each damaged
    /// part or line met on the way.
    ///
    /// # Errors
    /// [`ReadError::Store`] when a listing or a part cannot be read.
    pub async fn run(
        &self,
        id: &str,
        mut damage: impl FnMut(ReadError),
    ) -> Result<Option<ArchivedRun>, ReadError> {
        let Some(born_ms) = born_ms(id) else {
            return Ok(None);
        };
        let Some(from) = day_of(born_ms - ID_SKEW_MS) else {
            return Ok(None);
        };
        let to = from
            .checked_add_days(Days::new(RUN_DAYS + 1))
            .unwrap_or(from);
        let mut found: Option<ArchivedRun> = None;
        for day in self.days(from, to).await? {
            for part in self.parts(day).await? {
                let read = self.read(&part).await?;
                read.damage.into_iter().for_each(&mut damage);
                let records: Vec<Document> = read
                    .records
                    .into_iter()
                    .filter(|record| record.id == id)
                    .collect();
                if records.is_empty() {
                    continue;
                }
                let run = found.get_or_insert_with(|| ArchivedRun {
                    records: Vec::new(),
                    part: String::new(),
                });
                // Overlapping parts (`Listed::overlaps`) may hold an outcome twice.
                for record in records {
                    let again = record.event.is_some()
                        && run.records.iter().any(|kept| kept.event == record.event);
                    if !again {
                        run.records.push(record);
                    }
                }
                run.part = part.name;
            }
            // A run ended is read to the end of that day: a re-drive after its death is an
            // operator's act, and its outcomes are most often the same day's.
            if found.as_ref().is_some_and(ArchivedRun::ended) {
                break;
            }
        }
        Ok(found)
    }
}

/// A run as the archive holds it: every record found of it, oldest first.
#[derive(Debug)]
pub struct ArchivedRun {
    /// Its records, one per outcome, oldest first.
    pub records: Vec<Document>,
    /// The part holding its last record.
    pub part: String,
}

impl ArchivedRun {
    /// Whether its last outcome ended it (succeeded, dead, skipped) rather than set a retry.
    pub fn ended(&self) -> bool {
        self.last()
            .and_then(|record| record.outcome.as_deref())
            .and_then(RunState::parse)
            .is_some_and(|state| state != RunState::Retrying)
    }

    /// Its last outcome: the latest record, but a fire skipped after the run succeeded, which
    /// only a Redis gone back in time records (restored from an older copy, it finds the fire
    /// it no longer knows ran, and skips it as missed), does not hide that it succeeded.
    fn last(&self) -> Option<&Document> {
        let latest = self
            .records
            .iter()
            .max_by_key(|record| event_place(record))?;
        if latest.outcome.as_deref() != Some(RunState::Skipped.as_str()) {
            return Some(latest);
        }
        let succeeded = self
            .records
            .iter()
            .filter(|record| record.outcome.as_deref() == Some(RunState::Succeeded.as_str()))
            .max_by_key(|record| event_place(record));
        Some(succeeded.unwrap_or(latest))
    }

    /// The fields a run's record in Redis would hold at its last outcome, as `runs show` and the
    /// run page show them: what every attempt shares, and the last attempt's own.
    pub fn fields(&self) -> HashMap<String, String> {
        let mut fields = HashMap::new();
        let Some(last) = self.last() else {
            return fields;
        };
        let mut put = |name: &str, value: Option<String>| {
            if let Some(value) = value {
                fields.insert(name.to_owned(), value);
            }
        };
        let number = |value: Option<i64>| value.map(|value| value.to_string());
        put("job", last.job.clone());
        put("actor", last.actor.clone());
        put("kind", last.kind.clone());
        put("state", last.outcome.clone());
        put("attempt", number(last.attempt));
        put("max_attempts", number(last.max_attempts));
        put("queue", last.queue.clone());
        put("priority", last.priority.clone());
        put("worker", last.worker.clone());
        put("exit_code", number(last.exit_code));
        put("reason", last.reason.clone());
        put("error", last.error.clone());
        put("output", last.output.clone());
        put("payload", last.payload.clone());
        put("workflow", last.workflow.clone());
        put("step", last.step.clone());
        put("created_ms", number(last.created_ms));
        put("fire_ms", number(last.fire_ms));
        put("started_ms", number(last.started_ms));
        put("damaged", last.damaged.clone());
        if self.ended() {
            put("finished_ms", number(last.at_ms));
        } else {
            put("due_ms", number(last.due_ms));
        }
        fields
    }

    /// Its outcomes as the events stream recorded them, oldest first: what a run's timeline
    /// shows of each attempt (its start, duration, worker, exit code and reason).
    pub fn events(&self) -> Vec<Event> {
        let mut records: Vec<&Document> = self.records.iter().collect();
        records.sort_by_key(|record| event_place(record));
        records
            .into_iter()
            .map(|record| {
                let number = |value: Option<i64>| value.map(|value| value.to_string());
                let fields = [
                    ("run", Some(record.id.clone())),
                    ("job", record.job.clone()),
                    ("state", record.outcome.clone()),
                    ("attempt", number(record.attempt)),
                    ("worker", record.worker.clone()),
                    ("started_ms", number(record.started_ms)),
                    ("duration_ms", number(record.duration_ms)),
                    ("exit_code", number(record.exit_code)),
                    ("reason", record.reason.clone()),
                    ("due_ms", number(record.due_ms)),
                ];
                Event {
                    at_ms: record.at_ms.unwrap_or_default(),
                    fields: fields
                        .into_iter()
                        .filter_map(|(name, value)| Some((name.to_owned(), value?)))
                        .collect(),
                }
            })
            .collect()
    }
}

/// When run `id` was made, ms: a cron run's fire (`<job>@<fire ms>`, with `:<replica>` for an
/// every-replica fire), else a UUIDv7's time; `None` for an id that carries neither.
pub fn born_ms(id: &str) -> Option<i64> {
    if let Some((_, rest)) = id.rsplit_once('@') {
        let fire = rest.split_once(':').map_or(rest, |(fire, _)| fire);
        if !fire.is_empty() && fire.bytes().all(|byte| byte.is_ascii_digit()) {
            return fire.parse().ok();
        }
    }
    let uuid = uuid::Uuid::parse_str(id).ok()?;
    if uuid.get_version_num() != 7 {
        return None;
    }
    let (seconds, nanos) = uuid.get_timestamp()?.to_unix();
    i64::try_from(seconds * 1000 + u64::from(nanos / 1_000_000)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(outcome: &str, event: &str, reason: Option<&str>) -> Document {
        serde_json::from_value(serde_json::json!({
            "v": 1, "id": "backup@1796693502000", "job": "backup", "outcome": outcome,
            "event": event, "reason": reason, "at_ms": 1_796_693_502_000_i64,
        }))
        .expect("a record")
    }

    #[test]
    fn a_fire_skipped_after_its_run_succeeded_does_not_hide_the_success() {
        let run = ArchivedRun {
            records: vec![
                record("succeeded", "1796693502100-0", None),
                // Recorded by a Redis restored from a copy older than the success.
                record("skipped", "1796693626895-0", Some("missed")),
            ],
            part: String::new(),
        };
        assert!(run.ended());
        assert_eq!(run.fields()["state"], "succeeded");
        // Both outcomes stay in its timeline.
        assert_eq!(run.events().len(), 2);
        // A fire only skipped is shown skipped.
        let skipped = ArchivedRun {
            records: vec![record("skipped", "1796693626895-0", Some("missed"))],
            part: String::new(),
        };
        assert_eq!(skipped.fields()["state"], "skipped");
        // A retry that ended dead is shown dead.
        let dead = ArchivedRun {
            records: vec![
                record("retrying", "1796693502100-0", None),
                record("dead", "1796693503100-0", None),
            ],
            part: String::new(),
        };
        assert_eq!(dead.fields()["state"], "dead");
    }
}
