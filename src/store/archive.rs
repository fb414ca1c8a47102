//! The archive's side of Redis: the outbox of records the finishing scripts write when the
//! namespace archives, handed to exporters a part at a time (`take_archive_part.lua`) and
//! acknowledged once written (`ack_archived.lua`), and the marker that says where the namespace
//! archives.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::Value;

use super::During;
use super::reply::{Reply, reply_error, wrong_type};
use super::{Store, StoreError, millis, scripts};

/// The consumer group of the archive's outbox: every exporter of the namespace reads in it, each
/// under its replica's id.
pub const ARCHIVE_GROUP: &str = "exporters";

/// One record of the outbox: an outcome, with the fields its script wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveRecord {
    /// Its id in the outbox (`<ms>-<seq>`): what names the part it is in.
    pub id: String,
    /// Its fields in the order written, values as bytes (an output need not be UTF-8).
    pub fields: Vec<(String, Vec<u8>)>,
}

impl ArchiveRecord {
    /// A field's value, `None` when the record lacks it.
    pub fn field(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|(field, _)| field == name)
            .map(|(_, value)| value.as_slice())
    }
}

/// A part of the archive given to an exporter: records of one hour, consecutive in the outbox,
/// the same ones whenever it is given again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivePart {
    /// The id of its first record.
    pub first: String,
    /// The id of its last record.
    pub last: String,
    /// Its records, oldest first.
    pub records: Vec<ArchiveRecord>,
}

/// What [`Store::take_archive_part`] gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveTake {
    /// A part to write, then acknowledge.
    Part(ArchivePart),
    /// Records wait, and the next part closes after this long.
    Wait(Duration),
    /// No record waits.
    Nothing,
}

/// What a replica does for the archive, as its heartbeat reports it (`archive` in its record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArchiveRole {
    /// Started with `--archive`: its scripts write the records and it exports them.
    Exports,
    /// Started without it, and found the namespace archiving since: its scripts write the
    /// records, which the replicas with `--archive` export; those it recorded before it found
    /// out have none.
    Records,
    /// Neither: the namespace did not archive when it last looked.
    None,
}

impl ArchiveRole {
    /// As the heartbeat writes it: `exports`, `records`, or empty.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exports => "exports",
            Self::Records => "records",
            Self::None => "",
        }
    }
}

/// How far the archive is behind the outcomes Redis recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArchiveBacklog {
    /// Records not archived yet (given to an exporter or not).
    pub records: u64,
    /// When the oldest of them was recorded, ms on Redis's clock; `None` when there is none.
    pub oldest_ms: Option<i64>,
}

/// The last part the archive refused an exporter, as it recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveFailure {
    /// The replica whose exporter it refused.
    pub replica: String,
    /// The part's name inside the archive.
    pub part: String,
    /// Why, in a few words that name no path (`ArchiveError::reason`).
    pub reason: String,
    /// When, ms on Redis's clock.
    pub at_ms: i64,
}

/// How long a recorded refusal is kept after the last one: past it, the exporters that met
/// them have long stopped, or written a part since.
const FAILURES_KEPT: Duration = Duration::from_secs(24 * 3600);

impl Store {
    /// This store, for a replica of a namespace that archives: its scripts that record outcomes
    /// write the archive's records (see [`StoreSettings::archive`](super::StoreSettings)).
    #[must_use]
    pub fn archiving(mut self) -> Self {
        self.settings.archive = true;
        self
    }

    /// Has this store's scripts write the archive's records from now on, for good: a replica
    /// started without `--archive` whose heartbeat found the namespace archiving. Returns
    /// whether they did not already.
    pub fn archive_from_now(&self) -> bool {
        !self.settings.archive && !self.archive_seen.swap(true, Ordering::Relaxed)
    }

    /// How this store's scripts treat the archive: see [`ArchiveRole`].
    pub fn archive_role(&self) -> ArchiveRole {
        if self.settings.archive {
            ArchiveRole::Exports
        } else if self.archive_seen.load(Ordering::Relaxed) {
            ArchiveRole::Records
        } else {
            ArchiveRole::None
        }
    }

    /// The events stream's cap as the scripts that record outcomes take it, with ` archive`
    /// after it when the namespace archives (`history_of` in common.lua).
    pub(super) fn history_arg(&self) -> String {
        if self.archive_role() != ArchiveRole::None {
            format!("{} archive", self.settings.events_maxlen)
        } else {
            self.settings.events_maxlen.to_string()
        }
    }

    /// The next part to write (see `take_archive_part.lua`): first a part an exporter was given
    /// `idle` ago or longer and did not acknowledge, whole; else, when one closes (`max`
    /// records, its first one `age` old, its hour over, or `close` for a stopping replica), the
    /// next records no exporter was given, past the first no more than `max_bytes` of fields
    /// and values.
    ///
    /// # Errors
    /// Redis errors, or a reply the script does not give.
    pub async fn take_archive_part(
        &self,
        consumer: &str,
        max: usize,
        age: Duration,
        idle: Duration,
        close: bool,
        max_bytes: usize,
    ) -> Result<ArchiveTake, StoreError> {
        const OPERATION: &str = "take_archive_part";
        let values: Vec<Value> = scripts::TAKE_ARCHIVE_PART
            .key(self.keys.archive())
            .key(self.keys.archive_parts())
            .arg(ARCHIVE_GROUP)
            .arg(consumer)
            .arg(max)
            .arg(millis(age))
            .arg(millis(idle))
            .arg(if close { "1" } else { "0" })
            .arg(self.now_arg())
            .arg(max_bytes)
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        let mut reply = Reply::new(OPERATION, values);
        let kind: String = reply.next()?;
        let take = match kind.as_str() {
            "NONE" => ArchiveTake::Nothing,
            "WAIT" => {
                let ms: i64 = reply.next()?;
                ArchiveTake::Wait(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
            }
            "PART" => {
                let first: String = reply.next()?;
                let last: String = reply.next()?;
                let records: Vec<(String, Vec<Vec<u8>>)> = reply.next()?;
                let records = records
                    .into_iter()
                    .map(|(id, flat)| record(id, flat))
                    .collect::<Result<Vec<_>, _>>()?;
                if records.first().map(|record| &record.id) != Some(&first) {
                    return Err(reply_error(
                        OPERATION,
                        "a part that does not start at its first",
                    ));
                }
                ArchiveTake::Part(ArchivePart {
                    first,
                    last,
                    records,
                })
            }
            other => return Err(reply_error(OPERATION, format!("unknown answer {other}"))),
        };
        reply.finish()?;
        Ok(take)
    }

    /// Acknowledges `part`, written (or found written) in the archive: its records leave the
    /// outbox, and the runs it ended get their retention (see `ack_archived.lua`). Returns how
    /// many records this call acknowledged: 0 when another exporter had.
    ///
    /// # Errors
    /// Redis errors; [`StoreError::Held`] while the namespace is held.
    pub async fn ack_archived(&self, part: &ArchivePart) -> Result<u64, StoreError> {
        const OPERATION: &str = "ack_archived";
        let mut invocation = scripts::ACK_ARCHIVED.prepare_invoke();
        invocation
            .key(self.keys.archive())
            .key(self.keys.archive_parts())
            .key(self.keys.hold())
            .key(self.keys.archive_days())
            .arg(self.keys.prefix())
            .arg(ARCHIVE_GROUP)
            .arg(&part.first)
            .arg(millis(self.settings.retention))
            .arg(self.now_arg());
        for record in &part.records {
            invocation
                .arg(&record.id)
                .arg(record.field("run").unwrap_or_default());
        }
        let acked: i64 = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        Ok(u64::try_from(acked).unwrap_or(0))
    }

    /// The days with a part archived and no manifest written yet that are closed, oldest
    /// first, at most `limit` (days since 1970-01-01, UTC). A day is closed once it is over on
    /// Redis's clock and the outbox holds no record of it: a record gets an id above every one
    /// before it and above Redis's time, so none of that day can come, and its records were
    /// each acknowledged once their part was written (trimmed below the oldest one not), so the
    /// day's parts are all in the archive and none is added.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn closed_archive_days(&self, limit: usize) -> Result<Vec<i64>, StoreError> {
        const DAY_MS: i64 = 86_400_000;
        let end = isize::try_from(limit)
            .unwrap_or(isize::MAX)
            .saturating_sub(1);
        let now_ms = self.now_ms().await?;
        let (days, oldest): (Vec<i64>, Vec<(String, Value)>) = redis::pipe()
            .cmd("ZRANGE")
            .arg(self.keys.archive_days())
            .arg(0)
            .arg(end)
            .cmd("XRANGE")
            .arg(self.keys.archive())
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "closed_archive_days")?;
        let open_from = oldest
            .first()
            .and_then(|(id, _)| record_ms(id))
            .map_or(now_ms, |oldest_ms| oldest_ms.min(now_ms));
        Ok(days
            .into_iter()
            .filter(|day| (day + 1).saturating_mul(DAY_MS) <= open_from)
            .collect())
    }

    /// Forgets `day` once its manifest is in the archive.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn forget_archive_day(&self, day: i64) -> Result<(), StoreError> {
        let _: i64 = redis::cmd("ZREM")
            .arg(self.keys.archive_days())
            .arg(day)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "forget_archive_day")?;
        Ok(())
    }

    /// The records not archived yet: how many, and when the oldest was recorded.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn archive_backlog(&self) -> Result<ArchiveBacklog, StoreError> {
        const OPERATION: &str = "archive_backlog";
        let archive = self.keys.archive();
        let (records, oldest): (u64, Vec<(String, Value)>) = redis::pipe()
            .cmd("XLEN")
            .arg(&archive)
            .cmd("XRANGE")
            .arg(&archive)
            .arg("-")
            .arg("+")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        Ok(ArchiveBacklog {
            records,
            oldest_ms: oldest.first().and_then(|(id, _)| record_ms(id)),
        })
    }

    /// Records that the archive refused `part` to the exporter of `replica_id`, and why
    /// (`reason`, a few words that name no path): what `status` shows as failing until that
    /// exporter writes a part ([`Store::clear_archive_failure`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn record_archive_failure(
        &self,
        replica_id: &str,
        part: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        const OPERATION: &str = "record_archive_failure";
        let at_ms = self.now_ms().await?;
        let key = self.keys.archive_failures();
        let () = redis::pipe()
            .hset(&key, replica_id, format!("{at_ms} {part} {reason}"))
            .ignore()
            .pexpire(
                &key,
                i64::try_from(millis(FAILURES_KEPT)).unwrap_or(i64::MAX),
            )
            .ignore()
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        Ok(())
    }

    /// Forgets the refusal recorded for the exporter of `replica_id`, which has written a part.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn clear_archive_failure(&self, replica_id: &str) -> Result<(), StoreError> {
        let () = redis::cmd("HDEL")
            .arg(self.keys.archive_failures())
            .arg(replica_id)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "clear_archive_failure")?;
        Ok(())
    }

    /// The last refusal of each exporter whose archive refused its last part, by replica id. A
    /// key of another type (damaged, or written by hand) or an entry not as written reads as
    /// no refusal: the next refusal is recorded in the entry's place.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn archive_failures(&self) -> Result<Vec<ArchiveFailure>, StoreError> {
        let read: Result<HashMap<String, String>, redis::RedisError> = redis::cmd("HGETALL")
            .arg(self.keys.archive_failures())
            .query_async(&mut self.connection.clone())
            .await;
        let entries = match read {
            Err(error) if wrong_type(&error) => HashMap::new(),
            read => read.during(&self.metrics, "archive_failures")?,
        };
        let mut failures: Vec<ArchiveFailure> = entries
            .into_iter()
            .filter_map(|(replica, entry)| {
                let (at_ms, rest) = entry.split_once(' ')?;
                let (part, reason) = rest.split_once(' ')?;
                Some(ArchiveFailure {
                    replica,
                    part: part.to_owned(),
                    reason: reason.to_owned(),
                    at_ms: at_ms.parse().ok()?,
                })
            })
            .collect();
        failures.sort_by(|a, b| a.replica.cmp(&b.replica));
        Ok(failures)
    }

    /// Says in Redis that the namespace archives, to `url`, unless it says so already: a
    /// replica started without `--archive` then refuses to start ([`Store::archive_marked`]),
    /// since the outcomes it recorded would have no record. Returns where the namespace
    /// archived before, left as it was; `None` when this call marked it.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn mark_archive(&self, url: &str) -> Result<Option<String>, StoreError> {
        // One command, so that two replicas starting at once with different archives cannot
        // both find the key missing and write over each other.
        let before: Option<Vec<u8>> = redis::cmd("SET")
            .arg(self.keys.archive_marker())
            .arg(url)
            .arg("NX")
            .arg("GET")
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "mark_archive")?;
        Ok(before.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Where the namespace archives, as a replica started with `--archive` wrote it; `None`
    /// when it does not.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn archive_marked(&self) -> Result<Option<String>, StoreError> {
        let value: Option<Vec<u8>> = redis::cmd("GET")
            .arg(self.keys.archive_marker())
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "archive_marked")?;
        Ok(value.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
    }
}

/// A record from its id and its fields as a flat list of names and values.
fn record(id: String, flat: Vec<Vec<u8>>) -> Result<ArchiveRecord, StoreError> {
    if !flat.len().is_multiple_of(2) {
        return Err(reply_error(
            "take_archive_part",
            format!("record {id} has a field without a value"),
        ));
    }
    let mut fields = Vec::with_capacity(flat.len() / 2);
    let mut values = flat.into_iter();
    while let (Some(name), Some(value)) = (values.next(), values.next()) {
        fields.push((String::from_utf8_lossy(&name).into_owned(), value));
    }
    Ok(ArchiveRecord { id, fields })
}

/// The ms of a stream id (`<ms>-<seq>`): when its entry was recorded, on Redis's clock.
pub fn record_ms(id: &str) -> Option<i64> {
    id.split_once('-')?.0.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_keeps_its_fields_in_order_and_refuses_a_field_without_value() {
        let built = record(
            "5-0".into(),
            vec![
                b"run".to_vec(),
                b"r1".to_vec(),
                b"state".to_vec(),
                b"dead".to_vec(),
            ],
        )
        .expect("pairs");
        assert_eq!(built.field("state"), Some(&b"dead"[..]));
        assert_eq!(built.fields[0].0, "run");
        assert!(record("5-0".into(), vec![b"run".to_vec()]).is_err());
        assert_eq!(record_ms("1767225600000-3"), Some(1_767_225_600_000));
        assert_eq!(record_ms("garbage"), None);
    }
}
