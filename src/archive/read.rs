//! Reading the archive back: the parts of a range of days listed by their `date=` prefixes, each
//! read whole and alone (so that memory holds one part however long the range), and the
//! outcomes that `history --archive` finds there, newest first; and one run found by its id.

use std::collections::HashSet;
use std::io::{BufRead, BufReader};

use chrono::{DateTime, Days, NaiveDate, Utc};
use futures_util::TryStreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path;

use super::part::{Document, SCHEMA_VERSION, day_folder, range_of};
use super::{Archive, ArchiveError, ArchiveUrl, store_answered};
use crate::store::{Store, StoreError};

mod run;

pub use run::{ArchivedRun, RUN_DAYS, born_ms};

/// Why the archive, or a part of it, could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The archive could not be opened.
    #[error(transparent)]
    Open(#[from] ArchiveError),
    /// Where the namespace archives could not be read from Redis.
    #[error("cannot read where the namespace archives: {0}")]
    Marker(#[from] StoreError),
    /// A `file://` archive whose directory does not exist: a wrong URL, rather than an archive
    /// that holds nothing yet (reading makes no directory).
    #[error("archive {archive}: no such directory")]
    Missing {
        /// The archive, as [`ArchiveUrl`] shows it.
        archive: String,
    },
    /// The store refused a listing or a read.
    #[error("archive {archive}: {operation} {name}: {source}")]
    Store {
        /// The archive, as [`ArchiveUrl`] shows it.
        archive: String,
        /// What was being done (`list`, `read`).
        operation: &'static str,
        /// The object or prefix concerned.
        name: String,
        /// What the store said (boxed: every read error is as large as its largest kind).
        source: Box<object_store::Error>,
    },
    /// A part, or one of its lines, that is not what the exporter writes: the part's other
    /// lines, and the other parts, are still read.
    #[error("archive {archive}: {name}{}: {reason}", at_line(*.line))]
    Damaged {
        /// The archive, as [`ArchiveUrl`] shows it.
        archive: String,
        /// The part's name.
        name: String,
        /// The line (from 1), when one line is at fault rather than the part's compression.
        line: Option<usize>,
        /// What is wrong with it.
        reason: String,
    },
}

/// Why a part of the archive, or the archive, could not be read, as anyone may be shown it:
/// a class of reason, never the store's own words, which name the server's paths and its
/// system's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFailure {
    /// The store answered and refused: a missing directory, a permission, a name it rejects.
    Unreadable,
    /// What was read is not what an exporter writes.
    Damaged,
    /// The store did not answer as a store does: out of reach, timed out, or failing itself.
    Unreachable,
    /// The archive belongs to another namespace (its `runs/v1/namespace.json`), whose runs
    /// are not this one's.
    OtherNamespace,
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Unreadable => "unreadable",
            Self::Damaged => "damaged",
            Self::Unreachable => "store unreachable",
            Self::OtherNamespace => "the archive of another namespace",
        })
    }
}

impl ReadError {
    /// The class of reason this error is, as [`ReadFailure`] says it.
    pub fn failure(&self) -> ReadFailure {
        match self {
            Self::Open(ArchiveError::Differs { .. }) | Self::Damaged { .. } => ReadFailure::Damaged,
            Self::Open(ArchiveError::OtherNamespace { .. }) => ReadFailure::OtherNamespace,
            Self::Open(ArchiveError::BadUrl { .. } | ArchiveError::Credentials { .. })
            | Self::Missing { .. } => ReadFailure::Unreadable,
            Self::Open(ArchiveError::Store { .. }) | Self::Marker(_) => ReadFailure::Unreachable,
            Self::Store {
                archive, source, ..
            } if store_answered(archive, source) => ReadFailure::Unreadable,
            Self::Store { .. } => ReadFailure::Unreachable,
        }
    }

    /// What anyone may be shown of this error: the part's name inside the archive (or the
    /// archive itself) and the class of reason, without the archive's location or what the
    /// store said, which go to the server's log.
    pub fn shown(&self) -> String {
        let name = match self {
            Self::Open(ArchiveError::Differs { name, .. })
            | Self::Store { name, .. }
            | Self::Damaged { name, .. } => name.as_str(),
            Self::Open(_) | Self::Marker(_) | Self::Missing { .. } => "",
        };
        if name.is_empty() {
            format!("the archive: {}", self.failure())
        } else {
            format!("{name}: {}", self.failure())
        }
    }
}

/// A part as listed: its name and the range of outbox ids its name gives, by which parts sort
/// in the order Redis recorded their outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The object's name, `runs/v1/date=.../hour=.../part-<first>-<last>.ndjson.gz`.
    pub name: String,
    /// Its first record's outbox id, as (ms, sequence).
    pub first: (u64, u64),
    /// Whether its range overlaps another part's of the day: both may hold the same outcomes,
    /// which happens only once Redis went back in time (restored from an older copy, failed
    /// over to a replica that lagged) and gave again records an exporter had archived, cut
    /// into other parts.
    pub overlaps: bool,
}

/// What one part holds: the records read, oldest first, and what could not be read.
#[derive(Debug, Default)]
pub struct PartRead {
    /// Its records, in the order the part holds them (the order Redis recorded them).
    pub records: Vec<Document>,
    /// Its damaged lines, or the damage that ended the read early.
    pub damage: Vec<ReadError>,
}

/// An archive opened for reading.
#[derive(Debug, Clone)]
pub struct Reader {
    archive: Archive,
}

impl Reader {
    /// Opens the archive `url` names for reading.
    ///
    /// # Errors
    /// [`ReadError::Missing`] for a `file://` directory that does not exist; [`ReadError::Open`]
    /// when the archive cannot be opened.
    pub fn open(url: &ArchiveUrl) -> Result<Self, ReadError> {
        if let ArchiveUrl::File(directory) = url
            && !directory.is_dir()
        {
            return Err(ReadError::Missing {
                archive: url.to_string(),
            });
        }
        Ok(Self {
            archive: Archive::open(url)?,
        })
    }

    /// The archive of the namespace `store` is in: `url` when given, else the one its replicas
    /// archive to (`{ns}:archive-to`); `None` for a namespace that does not archive.
    ///
    /// # Errors
    /// [`ReadError::Marker`] when Redis cannot be read; those of [`Reader::open`].
    pub async fn of_namespace(
        store: &Store,
        url: Option<&ArchiveUrl>,
    ) -> Result<Option<Self>, ReadError> {
        let url = match url {
            Some(url) => url.clone(),
            None => match store.archive_marked().await? {
                Some(marked) => ArchiveUrl::parse(&marked)?,
                None => return Ok(None),
            },
        };
        Self::open(&url).map(Some)
    }

    /// Where it is.
    pub fn url(&self) -> &ArchiveUrl {
        self.archive.url()
    }

    /// Refuses an archive that belongs to another namespace than `namespace`, whose records
    /// would be read as this one's.
    ///
    /// # Errors
    /// [`ReadError::Open`] of [`ArchiveError::OtherNamespace`] when it belongs to another,
    /// or of [`ArchiveError::Store`] when the store refuses the read.
    pub async fn check_owner(&self, namespace: &str) -> Result<(), ReadError> {
        Ok(self.archive.check_owner(namespace).await?)
    }

    /// Object `name`'s URL, `<archive URL>/<name>`: what a person is shown of where a record is.
    pub fn object_url(&self, name: &str) -> String {
        format!("{}/{name}", self.url().to_string().trim_end_matches('/'))
    }

    fn failed(
        &self,
        operation: &'static str,
        name: &str,
        source: object_store::Error,
    ) -> ReadError {
        ReadError::Store {
            archive: self.url().to_string(),
            operation,
            name: name.to_owned(),
            source: Box::new(source),
        }
    }

    /// The days from `from` to `to` (both included) the archive holds parts of, oldest first:
    /// one listing of the `date=` prefixes.
    ///
    /// # Errors
    /// [`ReadError::Store`] when the listing fails.
    pub async fn days(&self, from: NaiveDate, to: NaiveDate) -> Result<Vec<NaiveDate>, ReadError> {
        let root = Path::from(format!("runs/v{SCHEMA_VERSION}"));
        let listed = self
            .archive
            .store
            .list_with_delimiter(Some(&root))
            .await
            .map_err(|source| self.failed("list", root.as_ref(), source))?;
        let mut days: Vec<NaiveDate> = listed
            .common_prefixes
            .iter()
            .filter_map(|prefix| {
                let day = prefix.filename()?.strip_prefix("date=")?;
                NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()
            })
            .filter(|day| (from..=to).contains(day))
            .collect();
        days.sort_unstable();
        Ok(days)
    }

    /// The parts of day `day`, in the order Redis recorded their records. Objects under the
    /// prefix that are no part (a file being written, something else's) are left out.
    ///
    /// # Errors
    /// [`ReadError::Store`] when the listing fails.
    pub async fn parts(&self, day: NaiveDate) -> Result<Vec<Listed>, ReadError> {
        let prefix = Path::from(day_folder(day));
        let objects: Vec<object_store::ObjectMeta> = self
            .archive
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|source| self.failed("list", prefix.as_ref(), source))?;
        let mut ranges: Vec<(Listed, (u64, u64))> = objects
            .into_iter()
            .filter_map(|object| {
                let name = object.location.to_string();
                let (first, last) = range_of(object.location.filename()?)?;
                let listed = Listed {
                    name,
                    first,
                    overlaps: false,
                };
                Some((listed, last))
            })
            .collect();
        ranges.sort_by_key(|(part, last)| (part.first, *last));
        // In order of their first ids, a part overlaps one before it when it starts at or below
        // the furthest end so far, and then that one overlaps it.
        let mut furthest: Option<(usize, (u64, u64))> = None;
        for index in 0..ranges.len() {
            let (first, last) = (ranges[index].0.first, ranges[index].1);
            if let Some((before, end)) = furthest
                && first <= end
            {
                ranges[index].0.overlaps = true;
                ranges[before].0.overlaps = true;
            }
            if furthest.is_none_or(|(_, end)| last > end) {
                furthest = Some((index, last));
            }
        }
        Ok(ranges.into_iter().map(|(part, _)| part).collect())
    }

    /// Every record of `part`. A line that is no record is reported and skipped; a part that
    /// is not gzip, or is cut short, is reported and read up to there.
    ///
    /// # Errors
    /// [`ReadError::Store`] when the part cannot be fetched.
    pub async fn read(&self, part: &Listed) -> Result<PartRead, ReadError> {
        let path = Path::from(part.name.as_str());
        let bytes = match self.archive.store.get(&path).await {
            Ok(found) => found.bytes().await,
            Err(source) => Err(source),
        }
        .map_err(|source| self.failed("read", &part.name, source))?;
        // Gunzipping and parsing a part is a few ms of CPU per thousand records: off the
        // runtime's threads, so that the console's other requests are not held behind it.
        let (archive, name) = (self.url().to_string(), part.name.clone());
        let parse = tokio::task::spawn_blocking(move || parse(&archive, &name, &bytes));
        Ok(parse.await.unwrap_or_else(|error| PartRead {
            records: Vec::new(),
            damage: vec![ReadError::Damaged {
                archive: self.url().to_string(),
                name: part.name.clone(),
                line: None,
                reason: format!("its reading failed: {error}"),
            }],
        }))
    }

    /// The outcomes of the days `since_ms` to `until_ms` span, newest first, a part at a time.
    pub fn newest_first(&self, since_ms: Option<i64>, until_ms: Option<i64>) -> NewestFirst<'_> {
        NewestFirst {
            reader: self,
            since_ms,
            until_ms,
            days: None,
            parts: Vec::new(),
            records: Vec::new(),
            overlapping: false,
            given: HashSet::new(),
            damage: Vec::new(),
        }
    }
}

/// The outcomes of an archive newest first: the days of a range newest first, each day's parts
/// newest first, each part's records newest first; one part in memory at a time.
#[derive(Debug)]
pub struct NewestFirst<'a> {
    reader: &'a Reader,
    since_ms: Option<i64>,
    until_ms: Option<i64>,
    /// The days left to read, oldest first (read from the end); `None` until listed.
    days: Option<Vec<NaiveDate>>,
    /// The listed parts of the day being read, oldest first.
    parts: Vec<Listed>,
    /// The records of the part being read, oldest first.
    records: Vec<Document>,
    /// Whether the part being read overlaps another ([`Listed::overlaps`]).
    overlapping: bool,
    /// The events of the day's overlapping parts given so far: an outcome two of them hold is
    /// given once. Empty while no part overlaps, as it is unless Redis went back in time.
    given: HashSet<String>,
    /// The damage met in the part being read, last met first.
    damage: Vec<ReadError>,
}

impl NewestFirst<'_> {
    /// The next outcome within the range, newest first; `Some(Err(_))` for a damaged part or
    /// line, after which reading goes on; `None` once the range is read.
    pub async fn next(&mut self) -> Option<Result<Document, ReadError>> {
        loop {
            if let Some(error) = self.damage.pop() {
                return Some(Err(error));
            }
            if let Some(record) = self.records.pop() {
                let at_ms = record.at_ms.unwrap_or_default();
                if self.since_ms.is_some_and(|since| at_ms < since)
                    || self.until_ms.is_some_and(|until| at_ms > until)
                {
                    continue;
                }
                if self.overlapping
                    && let Some(event) = &record.event
                    && !self.given.insert(event.clone())
                {
                    continue;
                }
                return Some(Ok(record));
            }
            if let Some(part) = self.parts.pop() {
                self.overlapping = part.overlaps;
                let mut read = match self.reader.read(&part).await {
                    Ok(read) => read,
                    Err(error) => return Some(Err(error)),
                };
                // The records of a part are in the order Redis recorded them: each outcome's
                // event and record are written in the same script call, so their ids agree.
                read.records.sort_by_key(event_place);
                self.records = read.records;
                // Damage is told first, one item a call, in the order it was met.
                read.damage.reverse();
                self.damage = read.damage;
                continue;
            }
            let days = match &mut self.days {
                Some(days) => days,
                None => {
                    // A day of slack each side: a part is dated by its first record's outbox
                    // id, a record by its event's, which may be a moment apart.
                    let from = self
                        .since_ms
                        .and_then(day_of)
                        .and_then(|day| day.checked_sub_days(Days::new(1)))
                        .unwrap_or(NaiveDate::MIN);
                    let to = self
                        .until_ms
                        .and_then(day_of)
                        .and_then(|day| day.checked_add_days(Days::new(1)))
                        .unwrap_or(NaiveDate::MAX);
                    match self.reader.days(from, to).await {
                        Ok(days) => self.days.insert(days),
                        Err(error) => {
                            self.days = Some(Vec::new());
                            return Some(Err(error));
                        }
                    }
                }
            };
            let day = days.pop()?;
            // Parts overlap within an hour (a part holds one), so within a day.
            self.given.clear();
            match self.reader.parts(day).await {
                Ok(parts) => self.parts = parts,
                Err(error) => return Some(Err(error)),
            }
        }
    }
}

/// Where an outcome's event stands in the events stream, (ms, sequence): the order Redis
/// recorded outcomes in, from its `event`, else its time alone.
pub fn event_place(record: &Document) -> (i64, u64) {
    record
        .event
        .as_deref()
        .and_then(|event| event.split_once('-'))
        .and_then(|(ms, seq)| Some((ms.parse().ok()?, seq.parse().ok()?)))
        .unwrap_or((record.at_ms.unwrap_or_default(), 0))
}

/// The records of part `name` of `archive` from its gzipped `bytes`; a line that is no record,
/// and the damage that ends the read of a part that is not gzip, are told in its `damage`.
pub(crate) fn parse(archive: &str, name: &str, bytes: &[u8]) -> PartRead {
    let damaged = |line: Option<usize>, reason: String| ReadError::Damaged {
        archive: archive.to_owned(),
        name: name.to_owned(),
        line,
        reason,
    };
    let mut read = PartRead::default();
    let lines = BufReader::new(flate2::read::GzDecoder::new(bytes)).split(b'\n');
    for (number, line) in (1..).zip(lines) {
        let line = match line {
            Ok(line) => line,
            Err(error) => {
                read.damage
                    .push(damaged(None, format!("not gzipped JSON lines: {error}")));
                break;
            }
        };
        match serde_json::from_slice::<Document>(&line) {
            Ok(record) if record.v == SCHEMA_VERSION => read.records.push(record),
            Ok(record) => read.damage.push(damaged(
                Some(number),
                format!(
                    "a record of schema v{} under runs/v{SCHEMA_VERSION}",
                    record.v
                ),
            )),
            Err(error) => read.damage.push(damaged(Some(number), error.to_string())),
        }
    }
    read
}

/// `, line N` for a damaged line, nothing for a damaged part.
fn at_line(line: Option<usize>) -> String {
    line.map(|line| format!(", line {line}"))
        .unwrap_or_default()
}

/// The UTC day of `ms`, as parts are dated.
fn day_of(ms: i64) -> Option<NaiveDate> {
    DateTime::<Utc>::from_timestamp_millis(ms).map(|at| at.date_naive())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::part::{encode, name};
    use crate::store::{ArchivePart, ArchiveRecord};

    #[test]
    fn what_a_viewer_is_shown_of_a_failed_read_names_no_path_nor_the_stores_words() {
        let refused = |archive: &str, source: object_store::Error| ReadError::Store {
            archive: archive.to_owned(),
            operation: "read",
            name: "runs/v1/date=2026-03-08/hour=07/part-1-0-2-0.ndjson.gz".to_owned(),
            source: Box::new(source),
        };
        let os = || -> Box<dyn std::error::Error + Send + Sync> {
            Box::new(std::io::Error::other(
                "Unable to open file /var/lib/redcron/archive/runs: os error 5",
            ))
        };
        let file = refused(
            "file:///var/lib/redcron/archive",
            object_store::Error::Generic {
                store: "LocalFileSystem",
                source: os(),
            },
        );
        assert_eq!(
            file.shown(),
            "runs/v1/date=2026-03-08/hour=07/part-1-0-2-0.ndjson.gz: unreadable"
        );
        assert!(
            file.to_string().contains("/var/lib/redcron"),
            "the log's words"
        );
        let s3 = refused(
            "s3://bucket/prefix",
            object_store::Error::Generic {
                store: "S3",
                source: os(),
            },
        );
        assert_eq!(s3.failure(), ReadFailure::Unreachable);
        assert!(
            s3.shown().ends_with(": store unreachable"),
            "{}",
            s3.shown()
        );
        let denied = refused(
            "s3://bucket/prefix",
            object_store::Error::PermissionDenied {
                path: "runs".to_owned(),
                source: os(),
            },
        );
        assert_eq!(denied.failure(), ReadFailure::Unreadable);
        let missing = ReadError::Missing {
            archive: "file:///var/lib/redcron/archive".to_owned(),
        };
        assert_eq!(missing.shown(), "the archive: unreadable");
        let damaged = ReadError::Damaged {
            archive: "file:///var/lib/redcron/archive".to_owned(),
            name: "runs/v1/part.ndjson.gz".to_owned(),
            line: Some(3),
            reason: "not JSON".to_owned(),
        };
        assert_eq!(damaged.shown(), "runs/v1/part.ndjson.gz: damaged");
    }

    #[test]
    fn a_run_id_carries_when_it_was_made() {
        assert_eq!(born_ms("backup@1772953200000"), Some(1_772_953_200_000));
        assert_eq!(born_ms("web@1772953200000:r2"), Some(1_772_953_200_000));
        let uuid = uuid::Builder::from_unix_timestamp_millis(1_772_953_200_123, &[7; 10])
            .into_uuid()
            .to_string();
        assert_eq!(born_ms(&uuid), Some(1_772_953_200_123));
        assert_eq!(
            born_ms("a4a8f1f2-0f3e-4e51-9b1d-2a4c8e0f6a11"),
            None,
            "a UUIDv4"
        );
        assert_eq!(born_ms("job@soon"), None);
    }

    #[tokio::test]
    async fn parts_written_by_the_exporter_read_back_newest_first_and_a_run_is_found() {
        let directory = tempfile::tempdir().expect("temp dir");
        let url = ArchiveUrl::File(directory.path().join("archive"));
        assert!(matches!(Reader::open(&url), Err(ReadError::Missing { .. })));
        let archive = Archive::open(&url).expect("open");
        let record = |id: &str, run: &str, state: &str| ArchiveRecord {
            id: id.to_owned(),
            fields: [
                ("event", id),
                ("run", run),
                ("state", state),
                ("job", "backup"),
            ]
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.as_bytes().to_vec()))
            .collect(),
        };
        // Two parts of 2026-03-08 07:00 and one of the next day.
        let parts = [
            ("1772953200000-0", "backup@1772953200000", "retrying"),
            ("1772953260000-0", "backup@1772953200000", "succeeded"),
            ("1773039600000-0", "backup@1773039600000", "dead"),
        ];
        for (id, run, state) in parts {
            let part = ArchivePart {
                first: id.to_owned(),
                last: id.to_owned(),
                records: vec![record(id, run, state)],
            };
            archive
                .put_new(&name(&part), encode(&part))
                .await
                .expect("write");
        }
        let reader = Reader::open(&url).expect("read");
        let mut newest = reader.newest_first(None, None);
        let mut read = Vec::new();
        while let Some(record) = newest.next().await {
            let record = record.expect("a record");
            read.push((record.id, record.outcome.unwrap_or_default()));
        }
        let expected: Vec<(String, String)> = parts
            .iter()
            .rev()
            .map(|(_, run, state)| ((*run).to_owned(), (*state).to_owned()))
            .collect();
        assert_eq!(read, expected);
        let run = reader
            .run("backup@1772953200000", |error| panic!("{error}"))
            .await
            .expect("read")
            .expect("found");
        assert_eq!(run.records.len(), 2);
        assert!(run.ended());
        assert_eq!(run.fields()["state"], "succeeded");
        assert_eq!(run.fields()["finished_ms"], "1772953260000");
        assert!(run.part.contains("part-1772953260000-0-"), "{}", run.part);
        assert!(
            reader
                .run("backup@1000", |error| panic!("{error}"))
                .await
                .expect("read")
                .is_none()
        );
    }

    #[tokio::test]
    async fn an_outcome_two_overlapping_parts_hold_is_read_once() {
        let directory = tempfile::tempdir().expect("temp dir");
        let url = ArchiveUrl::File(directory.path().join("archive"));
        let archive = Archive::open(&url).expect("open");
        let record = |id: &str| ArchiveRecord {
            id: id.to_owned(),
            fields: [
                ("event", id.to_owned()),
                ("run", format!("backup@{id}")),
                ("state", "succeeded".to_owned()),
            ]
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value.into_bytes()))
            .collect(),
        };
        let part = |ids: &[&str]| ArchivePart {
            first: ids[0].to_owned(),
            last: ids[ids.len() - 1].to_owned(),
            records: ids.iter().map(|id| record(id)).collect(),
        };
        // The second cut again from a Redis gone back in time, with a record more; the third
        // after both.
        for ids in [
            &["1772953200000-0", "1772953200001-0"][..],
            &["1772953200000-0", "1772953200001-0", "1772953200002-0"][..],
            &["1772953200003-0"][..],
        ] {
            let part = part(ids);
            archive
                .put_new(&name(&part), encode(&part))
                .await
                .expect("write");
        }
        let reader = Reader::open(&url).expect("read");
        let day = NaiveDate::from_ymd_opt(2026, 3, 8).expect("a day");
        let overlaps: Vec<bool> = reader
            .parts(day)
            .await
            .expect("list")
            .iter()
            .map(|part| part.overlaps)
            .collect();
        assert_eq!(overlaps, [true, true, false]);
        let mut newest = reader.newest_first(None, None);
        let mut read = Vec::new();
        while let Some(record) = newest.next().await {
            read.push(record.expect("a record").event.unwrap_or_default());
        }
        read.sort();
        assert_eq!(
            read,
            [
                "1772953200000-0",
                "1772953200001-0",
                "1772953200002-0",
                "1772953200003-0"
            ]
        );
    }
}
