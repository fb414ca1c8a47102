//! A day's manifest: the parts of one day of the archive, each with its records, its size, the
//! sha256 of its bytes and its range, written once no part of that day can be added (every
//! record of the day acknowledged, `ack_archived.lua`). It is made from a listing of the day's
//! parts taken after that, so it lists every one; it is written create-only, and a writer that
//! finds a manifest holding another listing (a part added after the day closed: Redis brought
//! back to an older copy, an object put by hand) writes the next version from a fresh listing,
//! so that the newest version lists every part the older ones list.

use chrono::NaiveDate;
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::part::{SCHEMA_VERSION, day_folder, range_of};
use super::read::{ReadError, parse};
use super::{Archive, ArchiveError, Written};

/// How many versions of a day's manifest a writer tries before it gives up: each one after the
/// first means parts were added to a closed day, which only a Redis brought back in time does.
const MOST_VERSIONS: u32 = 100;

/// Why a manifest could not be written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The store refused a listing, a read or the write.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// Every version up to [`MOST_VERSIONS`] holds another listing.
    #[error("archive {archive}: {date} has {MOST_VERSIONS} manifests, each listing other parts")]
    TooManyVersions {
        /// The archive, as [`super::ArchiveUrl`] shows it.
        archive: String,
        /// The day.
        date: NaiveDate,
    },
}

/// A day's manifest, as the archive holds it (`manifest.json`, pretty-printed JSON).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The records' schema version, as in the parts' names.
    pub v: u32,
    /// The day, `YYYY-MM-DD` (UTC, by when Redis recorded the outcomes).
    pub date: String,
    /// The records of all its parts.
    pub records: u64,
    /// Its parts, oldest first.
    pub parts: Vec<ManifestPart>,
}

/// One part in a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestPart {
    /// Its name in the archive.
    pub name: String,
    /// The outbox id of its first record.
    pub first: String,
    /// The outbox id of its last record.
    pub last: String,
    /// How many records it holds (lines, once gunzipped); absent for a damaged part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
    /// Why the part could not be read back (not a gzip: damaged, or put there by something
    /// else), in place of its records: listed with its size and sha256 all the same, so that a
    /// foreign object does not keep its day from a manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damaged: Option<String>,
    /// Its size, bytes as stored.
    pub bytes: u64,
    /// The sha256 of its bytes as stored, hex.
    pub sha256: String,
}

/// What a manifest says of a part's `damage`, in words that name no path (the same in every
/// writer's bytes): the first damage, and how many more; `None` for a part read whole.
fn damage_of(damage: &[ReadError]) -> Option<String> {
    let first = damage.first()?;
    let said = match first {
        ReadError::Damaged {
            line: Some(line),
            reason,
            ..
        } => format!("line {line}: {reason}"),
        ReadError::Damaged { reason, .. } => reason.clone(),
        other => other.failure().to_string(),
    };
    Some(match damage.len() {
        1 => said,
        more => format!("{said} (and {} more)", more - 1),
    })
}

/// The name of `date`'s manifest, version `version` (1 for the first):
/// `runs/v1/date=YYYY-MM-DD/manifest.json`, then `manifest-2.json` and on. A reader takes the
/// highest version there is.
pub fn name(date: NaiveDate, version: u32) -> String {
    let day = day_folder(date);
    if version <= 1 {
        format!("{day}/manifest.json")
    } else {
        format!("{day}/manifest-{version}.json")
    }
}

/// The day a day number (days since 1970-01-01) is, `None` out of range.
pub fn day(days: i64) -> Option<NaiveDate> {
    NaiveDate::from_ymd_opt(1970, 1, 1)?
        .checked_add_days(chrono::Days::new(u64::try_from(days).ok()?))
}

/// What [`Archive::write_manifest`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestWritten {
    /// The day has no part: no manifest.
    Empty,
    /// The manifest of this name lists the day's parts (written now, or found written with
    /// the same bytes by another exporter).
    Listed {
        /// Its name.
        name: String,
        /// How many parts it lists.
        parts: usize,
        /// The names of the parts it lists as damaged.
        damaged: Vec<String>,
        /// Whether this call wrote it.
        written: Written,
    },
}

impl Archive {
    /// The manifest of `date` as the parts in the archive now make it; `None` when there is
    /// no part of that day.
    ///
    /// # Errors
    /// The store refusing the listing or a read.
    pub async fn manifest_of(&self, date: NaiveDate) -> Result<Option<Manifest>, ManifestError> {
        let archive = self.url.to_string();
        let day = day_folder(date);
        let failed = |operation, name: &str, source| ArchiveError::Store {
            archive: archive.clone(),
            operation,
            name: name.to_owned(),
            source: Box::new(source),
        };
        let listed: Vec<_> = self
            .store
            .list(Some(&Path::from(day.as_str())))
            .try_collect()
            .await
            .map_err(|source| failed("list", &day, source))?;
        let mut parts = Vec::new();
        for object in listed {
            let name = object.location.to_string();
            let Some((first, last)) = range_of(&name) else {
                continue;
            };
            let bytes = self
                .store
                .get(&object.location)
                .await
                .map_err(|source| failed("read", &name, source))?
                .bytes()
                .await
                .map_err(|source| failed("read", &name, source))?;
            // Read as readers read it, so that the manifest counts what they find: a part whose
            // lines are not all records is damaged, whatever its compression.
            let read = parse(&archive, &name, &bytes);
            let damaged = damage_of(&read.damage);
            let id = |(ms, seq): (u64, u64)| format!("{ms}-{seq}");
            parts.push((
                first,
                ManifestPart {
                    records: damaged.is_none().then_some(read.records.len() as u64),
                    damaged,
                    bytes: bytes.len() as u64,
                    sha256: hex::encode(Sha256::digest(&bytes)),
                    name,
                    first: id(first),
                    last: id(last),
                },
            ));
        }
        if parts.is_empty() {
            return Ok(None);
        }
        parts.sort_by_key(|(first, _)| *first);
        let parts: Vec<ManifestPart> = parts.into_iter().map(|(_, part)| part).collect();
        Ok(Some(Manifest {
            v: SCHEMA_VERSION,
            date: date.format("%Y-%m-%d").to_string(),
            records: parts.iter().filter_map(|part| part.records).sum(),
            parts,
        }))
    }

    /// Writes `date`'s manifest, create-only, from a listing taken now: called once no part of
    /// that day can be added, every writer lists the same parts and makes the same bytes, so
    /// that a second writer finds it written. One that finds other bytes lists again and tries
    /// the next version.
    ///
    /// # Errors
    /// The store refusing the listing, a read or the write;
    /// [`ManifestError::TooManyVersions`].
    pub async fn write_manifest(&self, date: NaiveDate) -> Result<ManifestWritten, ManifestError> {
        for version in 1..=MOST_VERSIONS {
            // Listed again for each version: a listing taken after the version before was seen
            // holds every part that version lists, since parts are never removed.
            let Some(manifest) = self.manifest_of(date).await? else {
                return Ok(ManifestWritten::Empty);
            };
            let mut bytes =
                serde_json::to_vec_pretty(&manifest).expect("a manifest serializes to JSON");
            bytes.push(b'\n');
            let name = name(date, version);
            match self.put_new(&name, bytes).await {
                Ok(written) => {
                    return Ok(ManifestWritten::Listed {
                        name,
                        parts: manifest.parts.len(),
                        damaged: manifest
                            .parts
                            .into_iter()
                            .filter(|part| part.damaged.is_some())
                            .map(|part| part.name)
                            .collect(),
                        written,
                    });
                }
                Err(ArchiveError::Differs { .. }) => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Err(ManifestError::TooManyVersions {
            archive: self.url.to_string(),
            date,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::ArchiveUrl;

    #[test]
    fn a_manifest_is_named_by_its_day() {
        let date = day(20_520).expect("a day");
        assert_eq!(name(date, 1), "runs/v1/date=2026-03-08/manifest.json");
        assert_eq!(name(date, 2), "runs/v1/date=2026-03-08/manifest-2.json");
        assert_eq!(day(-1), None);
    }

    #[tokio::test]
    async fn a_second_writer_finds_the_manifest_written_and_a_late_part_makes_a_new_version() {
        let directory = tempfile::tempdir().expect("temp dir");
        let archive = Archive::open(&ArchiveUrl::File(directory.path().to_owned())).expect("open");
        let date = day(20_520).expect("a day");
        assert_eq!(
            archive.write_manifest(date).await.expect("empty"),
            ManifestWritten::Empty
        );
        let gz = |lines: &[u8]| {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            std::io::Write::write_all(&mut encoder, lines).expect("gzip");
            encoder.finish().expect("gzip")
        };
        let late = "runs/v1/date=2026-03-08/hour=10/part-1772964000000-0-1772964000000-0.ndjson.gz";
        let early =
            "runs/v1/date=2026-03-08/hour=07/part-1772953200000-0-1772953200000-1.ndjson.gz";
        let record = b"{\"v\":1,\"id\":\"backup@1772953200000\"}\n";
        archive
            .put_new(early, gz(&[&record[..], &record[..]].concat()))
            .await
            .expect("part");
        let first = archive.write_manifest(date).await.expect("manifest");
        assert!(matches!(
            first,
            ManifestWritten::Listed {
                parts: 1,
                written: Written::Now,
                ..
            }
        ));
        assert!(matches!(
            archive.write_manifest(date).await.expect("again"),
            ManifestWritten::Listed {
                parts: 1,
                written: Written::Already,
                ..
            }
        ));
        archive.put_new(late, gz(record)).await.expect("part");
        let second = archive.write_manifest(date).await.expect("second version");
        let ManifestWritten::Listed {
            name,
            parts: 2,
            written: Written::Now,
            ..
        } = second
        else {
            panic!("{second:?}");
        };
        assert_eq!(name, "runs/v1/date=2026-03-08/manifest-2.json");
        let read: Manifest =
            serde_json::from_slice(&std::fs::read(directory.path().join(&name)).expect("read"))
                .expect("json");
        assert_eq!(read.records, 3);
        assert_eq!(read.parts[0].name, early);
        assert_eq!(read.parts[0].records, Some(2));
        assert_eq!(read.parts[1].last, "1772964000000-0");
        let bytes = std::fs::read(directory.path().join(late)).expect("part");
        assert_eq!(read.parts[1].sha256, hex::encode(Sha256::digest(&bytes)));
        assert_eq!(read.parts[1].bytes, bytes.len() as u64);
    }

    #[tokio::test]
    async fn a_damaged_part_is_listed_with_its_reason_and_keeps_no_day_from_its_manifest() {
        let directory = tempfile::tempdir().expect("temp dir");
        let archive = Archive::open(&ArchiveUrl::File(directory.path().to_owned())).expect("open");
        let date = day(20_520).expect("a day");
        let foreign =
            "runs/v1/date=2026-03-08/hour=07/part-1772953200000-0-1772953200000-1.ndjson.gz";
        archive
            .put_new(foreign, b"not a part".to_vec())
            .await
            .expect("foreign object");
        let written = archive.write_manifest(date).await.expect("manifest");
        let ManifestWritten::Listed { name, damaged, .. } = written else {
            panic!("{written:?}");
        };
        assert_eq!(damaged, vec![foreign.to_owned()]);
        let read: serde_json::Value =
            serde_json::from_slice(&std::fs::read(directory.path().join(&name)).expect("read"))
                .expect("json");
        let part = &read["parts"][0];
        assert_eq!(read["records"], 0);
        assert!(part.get("records").is_none(), "{read:#}");
        assert!(
            part["damaged"]
                .as_str()
                .is_some_and(|reason| reason.starts_with("not gzipped JSON lines")),
            "{read:#}"
        );
        assert_eq!(part["bytes"], 10);
        // A gzip whose lines are no records is damaged too, as readers find it, rather than
        // counted as records.
        let mut junk = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut junk, b"{\"x\":1}\n{not json\n").expect("gzip");
        let junk = junk.finish().expect("gzip");
        let lines =
            "runs/v1/date=2026-03-08/hour=08/part-1772956800000-0-1772956800000-1.ndjson.gz";
        archive.put_new(lines, junk).await.expect("junk part");
        let manifest = archive
            .manifest_of(date)
            .await
            .expect("read")
            .expect("parts");
        let junk = &manifest.parts[1];
        assert_eq!((junk.name.as_str(), junk.records), (lines, None));
        assert!(
            junk.damaged.as_deref().is_some_and(
                |reason| reason.starts_with("line 1: ") && reason.ends_with("(and 1 more)")
            ),
            "{junk:?}"
        );
        assert_eq!(manifest.records, 0);
        assert_eq!(
            part["sha256"],
            hex::encode(Sha256::digest(b"not a part")).as_str()
        );
    }
}
