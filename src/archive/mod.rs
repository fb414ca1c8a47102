//! The archive: where every finished run goes to outlive Redis. What an `--archive` URL names
//! ([`ArchiveUrl`], read where the configuration is read), the store it opens ([`Archive`], an
//! `object_store` behind it, written create-only), and the parts it holds ([`part`]).

pub mod part;

use std::path::PathBuf;
use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

/// Why an archive could not be named, opened or written.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The `--archive` value is no URL redcron archives to.
    #[error(
        "archive URL {url:?}: {reason} (expected file:///absolute/directory or s3://bucket/prefix)"
    )]
    BadUrl {
        /// The value as given.
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An archive kind this version reads but cannot write yet.
    #[error("archive URL {url:?}: {kind} archives are not supported yet; use file:///directory")]
    Unsupported {
        /// The value as given.
        url: String,
        /// The kind (`s3`).
        kind: &'static str,
    },
    /// An object of a part's name holds other bytes than the part: written by something else,
    /// or by an exporter that was given other records under the same range (damage). Not
    /// acknowledged, so that no record is taken for archived that the archive lacks.
    #[error(
        "archive {archive}: {name} exists and holds other records than the part of that name: \
         the part stays in Redis until the object is moved away"
    )]
    Differs {
        /// The archive, as [`ArchiveUrl`] shows it.
        archive: String,
        /// The part's name.
        name: String,
    },
    /// The store refused to open or to take a part.
    #[error("archive {archive}: {operation} {name}: {source}")]
    Store {
        /// The archive, as [`ArchiveUrl`] shows it.
        archive: String,
        /// What was being done (`open`, `write`).
        operation: &'static str,
        /// The object concerned, or the root.
        name: String,
        /// What the store said (boxed: every archive error is as large as its largest kind).
        source: Box<object_store::Error>,
    },
}

/// Where a namespace archives, as the user wrote it and checked: no I/O until [`Archive::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveUrl {
    /// `file:///dir`: a directory of this machine (shared by the replicas, or one per machine
    /// when each replica's parts are gathered later: names never collide).
    File(PathBuf),
    /// `s3://bucket/prefix`: read, and refused at open until the S3 store is wired.
    S3 {
        /// The bucket.
        bucket: String,
        /// The key prefix inside it, without slashes at either end ('' for none).
        prefix: String,
    },
}

impl ArchiveUrl {
    /// Reads an `--archive` value.
    ///
    /// # Errors
    /// [`ArchiveError::BadUrl`] for anything but `file:///absolute/dir` and
    /// `s3://bucket[/prefix]`.
    pub fn parse(url: &str) -> Result<Self, ArchiveError> {
        let bad = |reason| ArchiveError::BadUrl {
            url: url.to_owned(),
            reason,
        };
        if let Some(path) = url.strip_prefix("file://") {
            if !path.starts_with('/') {
                return Err(bad("a file URL names an absolute directory, file:///path"));
            }
            if path.contains(['?', '#']) || path.contains('%') {
                return Err(bad(
                    "a file URL here is a plain path, without query or escapes",
                ));
            }
            return Ok(Self::File(PathBuf::from(path)));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("an s3 URL names its bucket"));
            }
            return Ok(Self::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
            });
        }
        Err(bad("unknown scheme"))
    }
}

impl std::fmt::Display for ArchiveUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(path) => write!(f, "file://{}", path.display()),
            Self::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Self::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
        }
    }
}

/// What became of a part written create-only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// This call wrote it.
    Now,
    /// An object of its name was there already, with the same bytes: an exporter wrote it
    /// before it could acknowledge it.
    Already,
}

/// An open archive: parts go in create-only, so no part is ever written over.
#[derive(Debug, Clone)]
pub struct Archive {
    url: ArchiveUrl,
    store: Arc<dyn ObjectStore>,
}

impl Archive {
    /// Opens the archive `url` names; a directory is made if missing.
    ///
    /// # Errors
    /// [`ArchiveError::Unsupported`] for S3 (not wired yet), [`ArchiveError::Store`] when the
    /// directory cannot be made.
    pub fn open(url: &ArchiveUrl) -> Result<Self, ArchiveError> {
        let store: Arc<dyn ObjectStore> = match url {
            ArchiveUrl::File(directory) => {
                let made = std::fs::create_dir_all(directory).map_err(|source| {
                    object_store::Error::Generic {
                        store: "LocalFileSystem",
                        source: Box::new(source),
                    }
                });
                let store = made
                    .and_then(|()| LocalFileSystem::new_with_prefix(directory))
                    .map_err(|source| ArchiveError::Store {
                        archive: url.to_string(),
                        operation: "open",
                        name: String::new(),
                        source: Box::new(source),
                    })?;
                // A part is acknowledged in Redis once written: it must be on disk by then.
                Arc::new(store.with_fsync(true))
            }
            ArchiveUrl::S3 { .. } => {
                return Err(ArchiveError::Unsupported {
                    url: url.to_string(),
                    kind: "s3",
                });
            }
        };
        Ok(Self {
            url: url.clone(),
            store,
        })
    }

    /// Where it is.
    pub fn url(&self) -> &ArchiveUrl {
        &self.url
    }

    /// Writes `bytes` as the object `name`, unless an object of that name exists: then it is
    /// read, and counts as written when it holds the same bytes.
    ///
    /// # Errors
    /// [`ArchiveError::Store`]: the store refused (unreachable, full, no permission);
    /// [`ArchiveError::Differs`]: an object of that name holds other bytes.
    pub async fn put_new(&self, name: &str, bytes: Vec<u8>) -> Result<Written, ArchiveError> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let path = Path::from(name);
        let failed = |operation, source| ArchiveError::Store {
            archive: self.url.to_string(),
            operation,
            name: name.to_owned(),
            source: Box::new(source),
        };
        match self
            .store
            .put_opts(&path, PutPayload::from(bytes.clone()), options)
            .await
        {
            Ok(_) => Ok(Written::Now),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let found = match self.store.get(&path).await {
                    Ok(found) => found.bytes().await,
                    Err(source) => Err(source),
                }
                .map_err(|source| failed("read", source))?;
                if found == bytes {
                    Ok(Written::Already)
                } else {
                    Err(ArchiveError::Differs {
                        archive: self.url.to_string(),
                        name: name.to_owned(),
                    })
                }
            }
            Err(source) => Err(failed("write", source)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_urls_are_read_as_written_and_others_refused() {
        assert_eq!(
            ArchiveUrl::parse("file:///var/lib/redcron/archive").expect("file"),
            ArchiveUrl::File(PathBuf::from("/var/lib/redcron/archive"))
        );
        assert_eq!(
            ArchiveUrl::parse("s3://bucket/runs/prod/").expect("s3"),
            ArchiveUrl::S3 {
                bucket: "bucket".into(),
                prefix: "runs/prod".into()
            }
        );
        assert_eq!(
            ArchiveUrl::parse("s3://bucket").expect("s3").to_string(),
            "s3://bucket"
        );
        for refused in [
            "file://relative/dir",
            "/var/lib",
            "s3:///prefix",
            "http://x/",
            "",
        ] {
            assert!(ArchiveUrl::parse(refused).is_err(), "{refused}");
        }
        assert!(matches!(
            Archive::open(&ArchiveUrl::parse("s3://bucket").expect("s3")),
            Err(ArchiveError::Unsupported { .. })
        ));
    }

    #[tokio::test]
    async fn a_part_written_again_counts_as_written_only_with_the_same_bytes() {
        let directory = tempfile::tempdir().expect("temp dir");
        let url = ArchiveUrl::File(directory.path().join("archive"));
        let archive = Archive::open(&url).expect("open");
        let name = "runs/v1/date=2026-03-08/hour=07/part-1-0-2-0.ndjson.gz";
        assert_eq!(
            archive.put_new(name, b"one".to_vec()).await.expect("write"),
            Written::Now
        );
        assert_eq!(
            archive.put_new(name, b"one".to_vec()).await.expect("again"),
            Written::Already
        );
        assert!(matches!(
            archive.put_new(name, b"two".to_vec()).await,
            Err(ArchiveError::Differs { .. })
        ));
        let kept = std::fs::read(directory.path().join("archive").join(name)).expect("read");
        assert_eq!(kept, b"one");
    }
}
