//! The archive: where every finished run goes to outlive Redis. What an `--archive` URL names
//! ([`ArchiveUrl`], read where the configuration is read), the store it opens ([`Archive`], an
//! `object_store` behind it, a directory or an S3 bucket, written create-only), and the parts it
//! holds ([`part`]).

pub mod manifest;
pub mod part;
pub mod read;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{
    BackoffConfig, ClientConfigKey, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload,
    RetryConfig,
};

/// Why an archive could not be named, opened or written.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The `--archive` value is no URL redcron archives to.
    #[error(
        "archive URL {url:?}: {reason} (expected file:///absolute/directory or s3://bucket/prefix)"
    )]
    BadUrl {
        /// The value as given, without what may be a secret: what comes before an `@`, and
        /// a query or fragment (see [`shown_url`]).
        url: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The `--archive` value holds credentials (`user:secret@`): refused, and never repeated,
    /// since the URL is logged, shown by `status` and kept in Redis.
    #[error(
        "archive URL: a {scheme} URL with credentials in it is refused, since the URL is logged, shown \
         by status and kept in Redis: give them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
         (and AWS_SESSION_TOKEN) instead"
    )]
    Credentials {
        /// The URL's scheme as written (`s3://`, `file://`, or another, refused anyway).
        scheme: String,
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
    /// The archive belongs to another namespace (its [`NAMESPACE_OBJECT`] says so): records of
    /// two namespaces in one archive would mix, and its manifests count both.
    #[error(
        "archive {archive} belongs to namespace {owner:?}, not {namespace:?}: give each \
         namespace an archive of its own, a prefix per namespace (s3://BUCKET/{namespace}, \
         file:///DIR/{namespace})"
    )]
    OtherNamespace {
        /// The archive, as [`ArchiveUrl`] shows it.
        archive: String,
        /// The namespace that would have used it.
        namespace: String,
        /// The namespace it belongs to.
        owner: String,
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

impl ArchiveError {
    /// Why, in a few words anyone may be shown: never the store's own, which name the server's
    /// paths and its system's errors (those are in the log of whoever met it).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::BadUrl { .. } | Self::Credentials { .. } => "not an archive URL",
            Self::Differs { .. } => "another object holds its name",
            Self::OtherNamespace { .. } => "the archive of another namespace",
            Self::Store {
                archive, source, ..
            } if store_answered(archive, source) => "refused by the store",
            Self::Store { .. } => "store unreachable",
        }
    }
}

/// Whether the store of `archive` (as [`ArchiveUrl`] shows it) answered when it failed with
/// `error`, rather than being out of reach, timing out or failing itself: a directory's
/// failures are its file system's answers, and an object store's are those it names.
pub(crate) fn store_answered(archive: &str, error: &object_store::Error) -> bool {
    matches!(
        error,
        object_store::Error::NotFound { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. }
    ) || archive.starts_with("file://")
}

/// Where a namespace archives, as the user wrote it and checked: no I/O until [`Archive::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveUrl {
    /// `file:///dir`: a directory of this machine (shared by the replicas, or one per machine
    /// when each replica's parts are gathered later: names never collide).
    File(PathBuf),
    /// `s3://bucket/prefix`: a bucket of S3 or of a store that speaks its API, reached and
    /// signed for as the usual `AWS_*` environment variables say (see [`Archive::open`]).
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
    pub fn parse(written: &str) -> Result<Self, ArchiveError> {
        let bad = |reason| ArchiveError::BadUrl {
            url: shown_url(written),
            reason,
        };
        // `scheme://user:secret@...`: whatever comes before the first slash is the authority,
        // where a bucket's name, or nothing for a file, belongs. Looked for in any URL, so
        // that a scheme mistyped does not repeat the secret.
        if let Some((scheme, rest)) = written.split_once("://")
            && rest
                .split('/')
                .next()
                .is_some_and(|authority| authority.contains('@'))
        {
            let scheme: String = scheme
                .trim()
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(10)
                .collect();
            return Err(ArchiveError::Credentials {
                scheme: format!("{}://", scheme.to_ascii_lowercase()),
            });
        }
        // A scheme is read in any case, as URLs' are: `S3://bucket` is `s3://bucket`.
        let lowered;
        let url = match written.split_once("://") {
            Some((scheme, rest)) if scheme.chars().any(|c| c.is_ascii_uppercase()) => {
                lowered = format!("{}://{rest}", scheme.to_ascii_lowercase());
                lowered.as_str()
            }
            _ => written,
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
            // `file:///dir/` is `file:///dir`: the same archive, shown and compared as one.
            let path = match path.trim_end_matches('/') {
                "" => "/",
                trimmed => trimmed,
            };
            return Ok(Self::File(PathBuf::from(path)));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("an s3 URL names its bucket"));
            }
            // What follows a `?` would become part of every object's key, and be logged,
            // shown and kept like the rest: settings go in the AWS_* environment.
            if rest.contains(['?', '#']) {
                return Err(bad(
                    "an s3 URL here is a bucket and a prefix, without query or fragment: \
                     settings go in the AWS_* environment variables",
                ));
            }
            return Ok(Self::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
            });
        }
        Err(bad("unknown scheme"))
    }
}

/// `url` as an error may repeat it: without what comes before its last `@` (a user and a
/// secret, however the URL was mistyped) nor its query or fragment.
fn shown_url(url: &str) -> String {
    let (before_query, query) = match url.find(['?', '#']) {
        Some(at) => (&url[..at], "?…"),
        None => (url, ""),
    };
    match before_query.rsplit_once('@') {
        Some((_, after)) => format!("…@{after}{query}"),
        None => format!("{before_query}{query}"),
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

/// The object naming the namespace an archive belongs to, `{"namespace":"<ns>"}`, written
/// create-only by the first exporter to start on it and read by every other, and by whoever
/// reads the archive for a namespace.
pub const NAMESPACE_OBJECT: &str = "runs/v1/namespace.json";

/// What a namespace's [`NAMESPACE_OBJECT`] holds, byte for byte, so that exporters of one
/// namespace find what they would write.
fn namespace_bytes(namespace: &str) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&serde_json::json!({ "namespace": namespace }))
        .expect("a string serializes to JSON");
    bytes.push(b'\n');
    bytes
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
    /// Opens the archive `url` names. A directory is made if missing. An S3 bucket is reached as
    /// the usual AWS environment variables say (`AWS_ENDPOINT_URL` for a store other than AWS's,
    /// `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP` for an
    /// endpoint without TLS; every `AWS_*` setting of `object_store`'s `AmazonS3Builder`), with
    /// timeouts of its requests bounded (see [`S3_TIMEOUT`]) unless they set them.
    ///
    /// # Errors
    /// [`ArchiveError::Store`] when the directory cannot be made, or when the environment
    /// configures S3 wrongly (an unknown region, a malformed endpoint or setting).
    pub fn open(url: &ArchiveUrl) -> Result<Self, ArchiveError> {
        let failed = |source| ArchiveError::Store {
            archive: url.to_string(),
            operation: "open",
            name: String::new(),
            source: Box::new(source),
        };
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
                    .map_err(failed)?;
                // A part is acknowledged in Redis once written: it must be on disk by then.
                Arc::new(store.with_fsync(true))
            }
            ArchiveUrl::S3 { bucket, prefix } => {
                let store = s3_from_env(bucket).map_err(failed)?;
                if prefix.is_empty() {
                    Arc::new(store)
                } else {
                    Arc::new(PrefixStore::new(store, prefix.as_str()))
                }
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
    /// Create-only where the store can (`PutMode::Create`: a hard link on files, a put with
    /// `If-None-Match: *` on S3). On an S3 store told it cannot
    /// (`AWS_CONDITIONAL_PUT=disabled`), the object is read first and written only when absent:
    /// two exporters racing there write the same name with the same bytes (a part's name and
    /// bytes come from its records' range alone), so the object is the part either way.
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
        let failed = |operation, source| self.failed(operation, name, source);
        match self
            .store
            .put_opts(&path, PutPayload::from(bytes.clone()), options)
            .await
        {
            Ok(_) => Ok(Written::Now),
            Err(object_store::Error::AlreadyExists { .. }) => {
                match self.found(&path, name).await? {
                    Some(found) => self.same(name, &found, &bytes),
                    // Moved away between the two calls: the next tick writes it.
                    None => Err(failed(
                        "read",
                        object_store::Error::NotFound {
                            path: name.to_owned(),
                            source: "gone after the store said it exists".into(),
                        },
                    )),
                }
            }
            Err(object_store::Error::NotImplemented { .. }) => {
                match self.found(&path, name).await? {
                    Some(found) => self.same(name, &found, &bytes),
                    None => {
                        self.store
                            .put(&path, PutPayload::from(bytes))
                            .await
                            .map_err(|source| failed("write", source))?;
                        Ok(Written::Now)
                    }
                }
            }
            Err(source) => Err(failed("write", source)),
        }
    }

    /// Says in the archive that it belongs to `namespace`, unless it says so already.
    ///
    /// # Errors
    /// [`ArchiveError::OtherNamespace`] when it belongs to another; [`ArchiveError::Store`]
    /// when the store refuses.
    pub async fn claim(&self, namespace: &str) -> Result<(), ArchiveError> {
        match self
            .put_new(NAMESPACE_OBJECT, namespace_bytes(namespace))
            .await
        {
            Ok(_) => Ok(()),
            Err(ArchiveError::Differs { .. }) => self.check_owner(namespace).await,
            Err(error) => Err(error),
        }
    }

    /// Writes the archive's claim for `namespace` back when it is gone (a store that lost it,
    /// an object deleted), so that another namespace cannot claim the archive meanwhile:
    /// whether it was written again. One look (`HEAD`) while it is there.
    ///
    /// # Errors
    /// As [`Archive::claim`]: another namespace claimed it first; the store refused.
    pub async fn keep_claim(&self, namespace: &str) -> Result<bool, ArchiveError> {
        match self.store.head(&Path::from(NAMESPACE_OBJECT)).await {
            Ok(_) => Ok(false),
            Err(object_store::Error::NotFound { .. }) => self.claim(namespace).await.map(|()| true),
            Err(source) => Err(self.failed("read", NAMESPACE_OBJECT, source)),
        }
    }

    /// Refuses an archive that belongs to another namespace than `namespace`; one that names
    /// none (from before archives were claimed, or not written to yet) is anyone's.
    ///
    /// # Errors
    /// [`ArchiveError::OtherNamespace`] when it belongs to another; [`ArchiveError::Store`]
    /// when the store refuses the read.
    pub async fn check_owner(&self, namespace: &str) -> Result<(), ArchiveError> {
        let Some(found) = self
            .found(&Path::from(NAMESPACE_OBJECT), NAMESPACE_OBJECT)
            .await?
        else {
            return Ok(());
        };
        let owner = serde_json::from_slice::<serde_json::Value>(&found)
            .ok()
            .and_then(|document| document["namespace"].as_str().map(str::to_owned))
            // Not what an exporter writes: no namespace may take it for its own.
            .unwrap_or_else(|| String::from("(unreadable)"));
        if owner == namespace {
            Ok(())
        } else {
            Err(ArchiveError::OtherNamespace {
                archive: self.url.to_string(),
                namespace: namespace.to_owned(),
                owner,
            })
        }
    }

    /// The bytes of the object `name`, `None` when there is none.
    async fn found(&self, path: &Path, name: &str) -> Result<Option<Vec<u8>>, ArchiveError> {
        let read = match self.store.get(path).await {
            Ok(found) => found.bytes().await,
            Err(source) => Err(source),
        };
        match read {
            Ok(found) => Ok(Some(found.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(self.failed("read", name, source)),
        }
    }

    /// Whether an object found under a part's name is the part.
    fn same(&self, name: &str, found: &[u8], bytes: &[u8]) -> Result<Written, ArchiveError> {
        if found == bytes {
            Ok(Written::Already)
        } else {
            Err(ArchiveError::Differs {
                archive: self.url.to_string(),
                name: name.to_owned(),
            })
        }
    }

    /// The store's refusal of `operation` on the object `name`, naming the archive.
    fn failed(
        &self,
        operation: &'static str,
        name: &str,
        source: object_store::Error,
    ) -> ArchiveError {
        ArchiveError::Store {
            archive: self.url.to_string(),
            operation,
            name: name.to_owned(),
            source: Box::new(source),
        }
    }
}

/// How long one request to an S3 store may take, unless `AWS_TIMEOUT` says otherwise (where
/// `object_store` would allow 30 s): a store that stopped answering fails the exporter's tick
/// within it (the part is written again next tick), where no limit would hold the exporter, and
/// a stopping replica, for good. A part is at most 1,000 records and 16 MiB of them before
/// gzip. Connecting is bounded by `object_store`'s own 5 s.
pub const S3_TIMEOUT: Duration = Duration::from_secs(20);

/// The S3 store of `bucket`, configured from the environment, its requests bounded and its
/// retries within a tick few: the exporter retries a refused part on its next tick anyway.
fn s3_from_env(bucket: &str) -> Result<object_store::aws::AmazonS3, object_store::Error> {
    crate::tls::install_provider();
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    // Read by from_env when set; its absence is not the builder's to tell, which holds
    // object_store's default then.
    if std::env::var_os("AWS_TIMEOUT").is_none() {
        builder = builder.with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
            format!("{}s", S3_TIMEOUT.as_secs()),
        );
    }
    builder
        .with_retry(RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
            },
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
        })
        .build()
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
        for secret in [
            "s3://KEY:Hunter2x@bucket/prefix",
            "file://user:Hunter2x@/dir",
            "S3://KEY:Hunter2x@bucket/prefix",
            "https://KEY:Hunter2x@host/bucket",
            " s3://KEY:Hunter2x@bucket/prefix",
        ] {
            let refused = ArchiveUrl::parse(secret).expect_err(secret).to_string();
            assert!(refused.contains("AWS_SECRET_ACCESS_KEY"), "{refused}");
            assert!(!refused.contains("Hunter2x"), "{refused}");
        }
        // Mistyped, or a secret where a setting would go: refused without repeating it.
        for secret in [
            "s3:/KEY:Hunter2x@bucket",
            "s3://bucket/prefix?secret=Hunter2x",
            "s3://bucket#Hunter2x",
        ] {
            let refused = ArchiveUrl::parse(secret).expect_err(secret).to_string();
            assert!(!refused.contains("Hunter2x"), "{secret}: {refused}");
        }
        assert_eq!(
            ArchiveUrl::parse("S3://bucket/p").expect("s3"),
            ArchiveUrl::parse("s3://bucket/p").expect("s3")
        );
        assert_eq!(
            ArchiveUrl::parse("file:///var/lib/archive/").expect("file"),
            ArchiveUrl::parse("file:///var/lib/archive").expect("file")
        );
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
