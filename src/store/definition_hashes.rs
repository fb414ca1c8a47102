//! A `def-hashes` of another type than a hash (damaged, or written by hand): its readers take
//! each published definition's content hash from the definition itself, the SHA-256 of its
//! canonical JSON in `defs`, and the leader's next write of a definition replaces it.

use std::collections::HashMap;

use redis::AsyncCommands;
use sha2::{Digest, Sha256};
use tracing::warn;

use super::damage::Entry;
use super::damaged_names::{NameIndex, readable_hash};
use super::declarations::FIELD_BATCH;
use super::reply::wrong_type;
use super::{During, Store, StoreError};

/// The content hash of the published definition `definition` (its canonical JSON): what
/// `def-hashes` holds for it while whole.
pub fn published_hash(definition: &str) -> String {
    hex::encode(<[u8; 32]>::from(Sha256::digest(definition)))
}

/// The content hash of each of the published definitions `defs` (job -> JSON), by job.
pub(super) fn hashes_of(defs: &HashMap<String, String>) -> HashMap<String, String> {
    defs.iter()
        .map(|(job, definition)| (job.clone(), published_hash(definition)))
        .collect()
}

impl Store {
    /// Whether `error`, met reading `def-hashes` (alone or with other keys), is Redis refusing
    /// it for being of another type than a hash: asked of Redis, since another key read with it
    /// may be the one of another type, which its reader reports as before.
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn definition_hashes_refused(
        &self,
        error: &redis::RedisError,
    ) -> Result<bool, StoreError> {
        if !wrong_type(error) {
            return Ok(false);
        }
        let found: String = redis::cmd("TYPE")
            .arg(self.keys.def_hashes())
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "definition_hashes_refused")?;
        Ok(!matches!(found.as_str(), "hash" | "none"))
    }

    /// The content hash of every definition `defs` holds, by job: what `def-hashes` would hold,
    /// for readers and the leader when that key is of another type.
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn hashes_of_definitions(
        &self,
        operation: &'static str,
    ) -> Result<HashMap<String, String>, StoreError> {
        let defs: Vec<(Entry, Entry)> = self
            .connection
            .clone()
            .hgetall(self.keys.defs())
            .await
            .during(&self.metrics, operation)?;
        // A name that is not UTF-8 is no job: the reapers remove it.
        Ok(hashes_of(&readable_hash(
            NameIndex::Definitions,
            defs,
            &mut Vec::new(),
        )))
    }

    /// Replaces a `def-hashes` of another type with the content hash of every definition `defs`
    /// holds, in one transaction: what the leader's write of definitions does when Redis
    /// refused their hashes (the definitions themselves were written, a transaction running
    /// each of its commands whatever another's fate).
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn replace_definition_hashes(&self) -> Result<(), StoreError> {
        const OPERATION: &str = "replace_definition_hashes";
        let key = self.keys.def_hashes();
        let hashes: Vec<(String, String)> = self
            .hashes_of_definitions(OPERATION)
            .await?
            .into_iter()
            .collect();
        let mut pipe = redis::pipe();
        pipe.atomic().del(&key).ignore();
        for batch in hashes.chunks(FIELD_BATCH) {
            pipe.hset_multiple(&key, batch).ignore();
        }
        let () = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        warn!(
            key,
            jobs = hashes.len(),
            "the published definitions' hashes were of another type (damaged, or written by \
             hand): replaced with the hash of each published definition"
        );
        Ok(())
    }
}
