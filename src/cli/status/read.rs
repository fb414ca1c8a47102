//! What `status` reads, all of it, in one pass: the namespace's overview, the newest events,
//! the notices owed, whether Redis refuses writes or is set to lose data, the damaged records
//! and the archive, and the
//! scripts the replicas report failing, named even when the rest could not be read.

use std::sync::Arc;

use super::definitions::Definitions;
use super::{RecentEvents, archive};
use crate::client::{Client, ClientError};
use crate::store::{DamagedKeys, Overview, StoreError, WritesRefused};

/// What `status` reads, all of it: [`StatusRead::document`] shapes it as `status --json` and
/// the web API show it.
pub(crate) struct StatusRead {
    /// The namespace's state.
    pub(crate) overview: Overview,
    /// The newest events, grouped by job.
    pub(crate) events: RecentEvents,
    /// How many notices are owed.
    pub(crate) owed_notices: u64,
    /// Why Redis refuses writes, if it does.
    pub(crate) writes_refused: Option<WritesRefused>,
    /// The damaged records the reapers found.
    pub(crate) damaged: DamagedKeys,
    /// The scripts that fail on a damaged key, by replica.
    pub(crate) failing: Vec<(String, String)>,
    /// The archive, when the namespace archives.
    pub(crate) archive: Option<archive::ArchiveStatus>,
    /// What is wrong with Redis's settings for redcron: AOF off, an eviction policy.
    pub(crate) redis_settings: Vec<String>,
    /// The definitions parsed before, which the read took its own from, when it was given them.
    pub(super) definitions: Option<Arc<Definitions>>,
}

/// A status that could not be read, and the scripts the replicas report failing, which may be
/// why: a damaged key can fail the overview too, and the replicas' reports still name it.
pub(crate) struct StatusUnread {
    /// Why it could not be read.
    pub(crate) error: ClientError,
    /// The scripts that fail on a damaged key, by replica.
    pub(crate) failing: Vec<(String, String)>,
}

/// Whether `error` says Redis could not be reached or did not answer in time, rather than
/// answering something the read could not use.
fn out_of_reach(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Store(StoreError::Redis { source, .. })
            if source.is_timeout()
                || source.is_io_error()
                || source.is_connection_refusal()
                || source.is_connection_dropped()
    )
}

impl StatusRead {
    /// Reads all a status shows.
    ///
    /// # Errors
    /// Redis out of reach, or data redcron did not write, with the failing scripts reported.
    pub(crate) async fn read(client: &Client) -> Result<Self, StatusUnread> {
        Self::read_from(client, None).await
    }

    /// As [`StatusRead::read`], taking the definitions `definitions` holds by hash from it
    /// rather than reading and parsing them again, and keeping there those published since:
    /// what a reader that shows every job again and again (the console) reads.
    ///
    /// # Errors
    /// As [`StatusRead::read`].
    pub(crate) async fn read_knowing(
        client: &Client,
        definitions: &Arc<Definitions>,
    ) -> Result<Self, StatusUnread> {
        Self::read_from(client, Some(definitions)).await
    }

    async fn read_from(
        client: &Client,
        definitions: Option<&Arc<Definitions>>,
    ) -> Result<Self, StatusUnread> {
        let read = async {
            let overview = match definitions {
                Some(definitions) => {
                    let overview = client
                        .overview_knowing(|hash| definitions.known(hash))
                        .await?;
                    definitions.learn(&overview);
                    overview
                }
                None => client.overview().await?,
            };
            Ok::<_, ClientError>((
                overview,
                client.recent_events().await?,
                client.owed_notices().await?,
                client.writes_refused().await?,
                client.damaged_keys().await?,
                archive::read(client).await?,
                client.store().durability_warnings().await?,
            ))
        }
        .await;
        // With no replica's report there is nothing to name, which is no failure of the status;
        // with Redis out of reach, asking it again would only wait as long once more.
        let failing = if read.as_ref().is_err_and(out_of_reach) {
            Vec::new()
        } else {
            client.failing_scripts().await.unwrap_or_default()
        };
        match read {
            Ok((
                overview,
                events,
                owed_notices,
                writes_refused,
                damaged,
                archive,
                redis_settings,
            )) => Ok(Self {
                archive,
                redis_settings,
                overview,
                events: RecentEvents::new(events),
                owed_notices,
                writes_refused,
                damaged,
                failing,
                definitions: definitions.cloned(),
            }),
            Err(error) => Err(StatusUnread { error, failing }),
        }
    }
}
