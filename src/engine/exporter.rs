//! The exporter: on every replica of a namespace that archives, writes the outcomes Redis
//! recorded into the archive, a part at a time, exactly once. A part is recorded in Redis before
//! it is written, written create-only under a name made from its records' range, and only then
//! acknowledged; a part an exporter died holding is given to another whole, and written again
//! under the same name with the same bytes, which the archive already holding counts as written.

use std::time::Duration;

use thiserror::Error;

use super::{Backoff, Shutdown, log_store_failure};
use crate::archive::manifest::{self, ManifestError, ManifestWritten};
use crate::archive::{Archive, ArchiveError, Written, part};
use crate::store::{ArchivePart, ArchiveTake, Store, StoreError};

/// How the exporter behaves.
#[derive(Debug, Clone)]
pub struct ExporterConfig {
    /// Where the parts go.
    pub archive: Archive,
    /// The namespace it exports: the archive is claimed for it at the replica's start, and a
    /// replica of another namespace refused there.
    pub namespace: String,
    /// The consumer it reads as: its replica's id.
    pub replica_id: String,
    /// Most records in a part.
    pub part_records: usize,
    /// Most bytes of records (their fields' names and values) in a part, past its first
    /// record: a few large payloads make no part, nor the exporter's memory, larger than this.
    pub part_bytes: usize,
    /// A part closes once its first record is this old, so that a quiet namespace's outcomes
    /// reach the archive within about this long (a part also closes at the end of its hour).
    pub part_age: Duration,
    /// A part given to an exporter that has not acknowledged it this long after is given to
    /// another: its exporter died, or cannot write.
    pub claim_after: Duration,
    /// The longest sleep between two looks at the outbox.
    pub max_sleep: Duration,
    /// How long a stopping replica goes on writing the parts there are.
    pub stop_drain: Duration,
}

impl ExporterConfig {
    /// The defaults for an exporter of `replica_id` writing `namespace`'s outcomes to
    /// `archive`.
    pub fn new(archive: Archive, namespace: &str, replica_id: &str) -> Self {
        Self {
            archive,
            namespace: namespace.to_owned(),
            replica_id: replica_id.to_owned(),
            part_records: 1_000,
            part_bytes: PART_BYTES,
            part_age: Duration::from_secs(60),
            claim_after: Duration::from_secs(60),
            max_sleep: Duration::from_secs(1),
            stop_drain: Duration::from_millis(800),
        }
    }
}

/// Most bytes of records in a part, by default: 16 MiB.
pub const PART_BYTES: usize = 16 << 20;

/// How often an exporter that archives no part looks for a day to write the manifest of: a
/// day closes when its last part is archived, which is looked for at once, or when it ends
/// with none of its records waiting, which a minute late changes nothing for.
const MANIFEST_LOOK: Duration = Duration::from_secs(60);

/// How often an exporter writes the namespace's archive marker (`{ns}:archive-to`) back when
/// it is missing (deleted by hand, or lost with a Redis restored from before it was written):
/// without it `status` would not say the namespace archives, and a replica started without
/// `--archive` would be let in. One `SET NX` a look, per exporter.
const MARKER_LOOK: Duration = Duration::from_secs(5);

/// Why an export tick failed; the records stay in Redis and a later tick (or another replica)
/// writes them.
#[derive(Debug, Error)]
pub enum ExportError {
    /// Redis could not give or acknowledge a part.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The archive refused the part.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// A day's manifest could not be written: the day stays to be written later.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

/// What one tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exported {
    /// A part is in the archive and acknowledged.
    Part {
        /// Its name in the archive.
        name: String,
        /// How many records it holds.
        records: usize,
        /// Whether this tick wrote it, or found it written by an exporter that died before
        /// acknowledging it.
        written: Written,
    },
    /// Records wait for their part to close, after this long.
    Waiting(Duration),
    /// Nothing waits.
    Idle,
}

/// A test fault point, `REDCRON_TEST_FAULT_ARCHIVE_STALL`: the path of a file; once the file
/// exists, the exporter stalls for good after writing its next part and before acknowledging
/// it, and says so in the log, so that tests can kill the replica in between. Read once, when a
/// replica starts; unset, as everywhere but in tests, it costs nothing.
static STALL_FILE: std::sync::LazyLock<Option<std::path::PathBuf>> =
    std::sync::LazyLock::new(|| {
        std::env::var_os("REDCRON_TEST_FAULT_ARCHIVE_STALL").map(std::path::PathBuf::from)
    });

/// Reads the fault point's setting, at the replica's start.
pub(crate) fn arm_fault_point() {
    std::sync::LazyLock::force(&STALL_FILE);
}

/// Writes the outbox into the archive.
pub struct Exporter {
    store: Store,
    config: ExporterConfig,
    /// A part this exporter was given and the archive refused: written again before any other,
    /// so that a stopping replica writes it too (another exporter takes it only once it has
    /// been left [`ExporterConfig::claim_after`]).
    refused: Option<ArchivePart>,
    /// Whether a refusal of this exporter may be recorded in Redis: so at the start, since one
    /// recorded before a restart says nothing of the archive now, and from each refusal to the
    /// next part written, which forgets it.
    failure_recorded: bool,
}

impl Exporter {
    /// An exporter of `store`'s namespace.
    pub fn new(store: Store, config: ExporterConfig) -> Self {
        Self {
            store,
            config,
            refused: None,
            failure_recorded: true,
        }
    }

    /// Writes and acknowledges one part, if one is due (or any part there is, with `close`).
    ///
    /// # Errors
    /// Redis errors, or the archive refusing the part: it is given again later, to this
    /// exporter or another, and written under the same name.
    pub async fn tick(&mut self, close: bool) -> Result<Exported, ExportError> {
        let part = match self.refused.take() {
            Some(part) => part,
            None => match self
                .store
                .take_archive_part(
                    &self.config.replica_id,
                    self.config.part_records,
                    self.config.part_age,
                    self.config.claim_after,
                    close,
                    self.config.part_bytes,
                )
                .await?
            {
                ArchiveTake::Part(part) => part,
                ArchiveTake::Wait(wait) => return Ok(Exported::Waiting(wait)),
                ArchiveTake::Nothing => return Ok(Exported::Idle),
            },
        };
        let name = part::name(&part);
        let written = match self
            .config
            .archive
            .put_new(&name, part::encode(&part))
            .await
        {
            Ok(written) => written,
            Err(error) => {
                self.store.metrics().archive_failures_total.inc();
                self.refused = Some(part);
                // Said in Redis from the first refusal, for `status` and the console; the
                // refusal itself is what the tick reports, whatever becomes of this.
                match self
                    .store
                    .record_archive_failure(&self.config.replica_id, &name, error.reason())
                    .await
                {
                    Ok(()) => self.failure_recorded = true,
                    Err(store) => log_store_failure(&store, "cannot record the archive's refusal"),
                }
                return Err(error.into());
            }
        };
        stall_if_asked(&name).await;
        let records = part.records.len();
        // A failed acknowledgement leaves the part given: written again (found written) by
        // whichever exporter takes it next.
        self.store.ack_archived(&part).await?;
        self.store
            .metrics()
            .archive_records_total
            .inc_by(records as u64);
        if self.failure_recorded {
            self.store
                .clear_archive_failure(&self.config.replica_id)
                .await?;
            self.failure_recorded = false;
        }
        match written {
            Written::Now => tracing::debug!(part = %name, records, "archived"),
            // Rare: worth a line for whoever follows a replica's death through the logs.
            Written::Already => tracing::info!(
                part = %name,
                records,
                "archived: the part was written already by an exporter that did not acknowledge it"
            ),
        }
        Ok(Exported::Part {
            name,
            records,
            written,
        })
    }

    /// Writes the manifest of the oldest day whose records are all archived, if there is one,
    /// then forgets the day in Redis. Two exporters doing so at once write the same bytes; one
    /// that dies before forgetting the day leaves it to be written again, found written.
    ///
    /// # Errors
    /// Redis errors, or the archive refusing a listing, a read or the write.
    pub async fn write_manifest(&mut self) -> Result<Option<ManifestWritten>, ExportError> {
        let Some(&days) = self.store.closed_archive_days(1).await?.first() else {
            return Ok(None);
        };
        let written = match manifest::day(days) {
            Some(date) => self.config.archive.write_manifest(date).await?,
            // A day no date is: no part was ever named by it.
            None => ManifestWritten::Empty,
        };
        if let ManifestWritten::Listed {
            name,
            parts,
            damaged,
            written,
        } = &written
        {
            tracing::debug!(manifest = %name, parts, "day's manifest written");
            // Once: by the exporter that wrote the manifest, not those that find it written.
            if *written == Written::Now && !damaged.is_empty() {
                tracing::warn!(
                    manifest = %name,
                    damaged = damaged.join(","),
                    "a day's manifest lists parts that cannot be read back (damaged, or put \
                     there by something else): see their `damaged` reason in the manifest"
                );
            }
        }
        self.store.forget_archive_day(days).await?;
        Ok(Some(written))
    }

    /// Reads how far the archive is behind into the metrics.
    async fn measure(&self) -> Result<(), StoreError> {
        let backlog = self.store.archive_backlog().await?;
        let metrics = self.store.metrics();
        metrics
            .archive_records
            .set(i64::try_from(backlog.records).unwrap_or(i64::MAX));
        let lag_ms = match backlog.oldest_ms {
            Some(oldest_ms) => (self.store.now_ms().await? - oldest_ms).max(0),
            None => 0,
        };
        metrics.archive_lag_seconds.set(lag_ms / 1_000);
        Ok(())
    }

    /// Writes the namespace's archive marker back if it is missing. One naming another archive
    /// is left as it is: the replicas started with that one own the namespace, and this one
    /// would have been refused at its start.
    async fn keep_marker(&self) -> Result<(), StoreError> {
        let url = self.config.archive.url().to_string();
        if self.store.mark_archive(&url).await?.is_none() {
            tracing::warn!(
                archive = %url,
                "the namespace's archive marker was missing: written again"
            );
        }
        Ok(())
    }

    /// Writes the archive's claim for the namespace back if the store lost it (an S3 bucket
    /// emptied, the object deleted), as the replica's start wrote it; says so if another
    /// namespace claimed the archive meanwhile, whose readers would refuse this one's parts.
    async fn keep_claim(&self) {
        let archive = self.config.archive.url();
        match self.config.archive.keep_claim(&self.config.namespace).await {
            Ok(false) => {}
            Ok(true) => tracing::warn!(
                %archive,
                "the archive's claim for this namespace (runs/v1/namespace.json) was missing: \
                 written again"
            ),
            Err(error @ ArchiveError::OtherNamespace { .. }) => tracing::error!(%error),
            Err(error) => tracing::warn!(%error, "cannot check the archive's claim"),
        }
    }

    /// Exports until `shutdown`, then writes the parts there are for at most
    /// [`ExporterConfig::stop_drain`], so that the last replica to stop leaves none behind.
    pub async fn run(mut self, shutdown: Shutdown) {
        let mut backoff = Backoff::default();
        // A manifest that failed waits its own backoff: writing one reads every part of its day.
        let mut manifest_backoff = Backoff::default();
        let mut manifest_due = tokio::time::Instant::now();
        // The replica's start wrote the marker.
        let mut marker_due = tokio::time::Instant::now() + MARKER_LOOK;
        loop {
            let ticked = self.tick(false).await;
            if ticked.is_ok() {
                backoff.succeeded(&self.store.metrics().health);
            }
            let pause = match ticked {
                Ok(Exported::Part { .. }) => {
                    // The part may have been the last of its day.
                    manifest_due = tokio::time::Instant::now();
                    Duration::ZERO
                }
                Ok(Exported::Waiting(wait)) => wait.min(self.config.max_sleep),
                Ok(Exported::Idle) => self.config.max_sleep,
                Err(error) => self.failed(&error, &mut backoff),
            };
            if !pause.is_zero() {
                // Between parts only: a day's manifest waits for no record, and a part does.
                if tokio::time::Instant::now() >= manifest_due {
                    match self.write_manifest().await {
                        Ok(written) => {
                            manifest_backoff.succeeded(&self.store.metrics().health);
                            if written.is_none() {
                                manifest_due = tokio::time::Instant::now() + MANIFEST_LOOK;
                            }
                        }
                        Err(error) => {
                            manifest_due = tokio::time::Instant::now()
                                + self.failed(&error, &mut manifest_backoff);
                        }
                    }
                }
                if let Err(error) = self.measure().await {
                    log_store_failure(&error, "cannot read the archive's backlog");
                }
                if tokio::time::Instant::now() >= marker_due {
                    marker_due = tokio::time::Instant::now() + MARKER_LOOK;
                    if let Err(error) = self.keep_marker().await {
                        log_store_failure(&error, "cannot check the namespace's archive marker");
                    }
                    self.keep_claim().await;
                }
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(pause) => {}
                }
            }
            if shutdown.is_cancelled() {
                break;
            }
        }
        // A part the archive refused is tried once more, then what else there is.
        let drained = tokio::time::timeout(self.config.stop_drain, async {
            while let Ok(Exported::Part { .. }) = self.tick(true).await {}
        });
        if drained.await.is_err() {
            tracing::warn!(
                "stopped before the archive had every outcome: the other replicas, or this one \
                 when it starts again, write the rest"
            );
        }
    }

    /// Logs a failed tick and says how long to wait before the next.
    fn failed(&self, error: &ExportError, backoff: &mut Backoff) -> Duration {
        match error {
            ExportError::Store(error) => {
                log_store_failure(error, "archive export failed");
                backoff.failed_with(error)
            }
            ExportError::Archive(error) => {
                tracing::warn!(%error, "the archive refused a part: it stays in Redis");
                backoff.failed()
            }
            ExportError::Manifest(error) => {
                tracing::warn!(%error, "cannot write a day's manifest: it is tried again");
                backoff.failed()
            }
        }
    }
}

/// Stalls for good once the test fault point's file exists, between a part's write and its
/// acknowledgement.
async fn stall_if_asked(name: &str) {
    if STALL_FILE.as_deref().is_some_and(std::path::Path::exists) {
        tracing::warn!(part = %name, "archive part written, stalling before its acknowledgement (test fault point)");
        std::future::pending::<()>().await;
    }
}
