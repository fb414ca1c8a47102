//! What replicas declare and what the leader publishes from it.
//!
//! Each replica publishes the content hash of every job it declares (`replica-jobs:<id>`, which
//! its workers' claims read) and the job's canonical JSON under that hash (`declared-defs`, one
//! copy per distinct definition), and bumps a version. The leader reads them when the version or
//! the live replicas change, chooses one definition per job, and publishes the chosen ones
//! (`defs`, `def-hashes`) for promoters, enqueues and operators.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use sha2::{Digest, Sha256};

use super::During;
use super::damage::Entry;
use super::damaged_names::{NameIndex, readable_hash, readable_names};
use super::reply::reply_error;
use super::{Store, StoreError, millis, scripts};
use crate::schedule::Job;

/// The empty name (no job has it) in `replica-jobs:<id>`: the declarations are published even
/// when there are none, and claims wait for them until they are. Its value is the
/// [`declarations_digest`] of the rest, so that declarations written over since are told from
/// those the replica published.
pub(super) const PUBLISHED_MARKER: &str = "";

/// Most definitions removed by one call of the guarded removal script.
const FORGET_BATCH: usize = 1_000;

/// Most fields written by one command.
pub(super) const FIELD_BATCH: usize = 1_000;

/// What the leader looks at every tick to know whether declarations may have changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclarationsSignal {
    /// Incremented by every publication or withdrawal of declarations.
    pub version: String,
    /// The replicas whose last heartbeat is recent enough, sorted.
    pub live: Vec<String>,
    /// Jobs whose published definition a promoter could not read.
    pub damaged: Vec<String>,
}

/// One job's published definition, as [`Store::published_definitions`] reads it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedDefinition {
    /// The canonical JSON in `defs`.
    pub definition: Option<String>,
    /// The content hash in `def-hashes`.
    pub hash: Option<String>,
}

impl Store {
    /// Publishes what this replica declares: each job's content hash (which its claims read),
    /// and the job's definition under that hash for a leader that does not declare it. Kept
    /// alive by [`Store::heartbeat`]. Returns the declarations' digest, which
    /// [`Store::declarations_intact`] checks.
    ///
    /// Written a batch of [`FIELD_BATCH`] jobs a round trip, so that what the replica holds at
    /// once does not grow with the number of jobs: the definitions first, the job names aside
    /// (`replica-jobs-aside:<id>:<n>`), which one transaction then puts in place of the
    /// published ones. Readers see the declarations published before or these, never a part of
    /// them.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn publish_replica_jobs(
        &self,
        replica_id: &str,
        jobs: &[Arc<Job>],
        ttl: Duration,
    ) -> Result<String, StoreError> {
        const OPERATION: &str = "publish_replica_jobs";
        let key = self.keys.replica_jobs(replica_id);
        let declared = self.keys.declared_definitions();
        let ttl_ms = i64::try_from(millis(ttl)).unwrap_or(i64::MAX);
        // Each digest once (hashing a definition serializes it), as bytes: 100,000 hashes as
        // strings would be as many small allocations left behind in the heap.
        let digests: Vec<[u8; 32]> = jobs.iter().map(|job| job.content_digest()).collect();
        let digest = declarations_digest(
            jobs.iter()
                .zip(&digests)
                .map(|(job, digest)| (job.name.as_str(), hex_array(digest))),
        );
        // A name of its own: the heartbeat's and a worker's publications may cross.
        let aside = self
            .keys
            .replica_jobs_aside(replica_id, rand::random::<u64>());
        for (batch, batch_digests) in jobs.chunks(FIELD_BATCH).zip(digests.chunks(FIELD_BATCH)) {
            let hashes: Vec<String> = batch_digests.iter().map(hex::encode).collect();
            let mut names = Vec::with_capacity(batch.len());
            let mut bodies = Vec::with_capacity(batch.len());
            for (job, hash) in batch.iter().zip(&hashes) {
                bodies.push((hash.as_str(), canonical_json(job)?));
                names.push((job.name.as_str(), hash.as_str()));
            }
            let () = redis::pipe()
                .hset_multiple(&declared, &bodies)
                .ignore()
                .hset_multiple(&aside, &names)
                .ignore()
                .pexpire(&aside, ttl_ms)
                .ignore()
                .query_async(&mut self.connection.clone())
                .await
                .during(&self.metrics, OPERATION)?;
        }
        // The marker makes the key when there are no jobs; RENAME replaces the published
        // declarations whole, their expiry with them.
        let () = redis::pipe()
            .atomic()
            .hset(&aside, PUBLISHED_MARKER, &digest)
            .ignore()
            .rename(&aside, &key)
            .ignore()
            .pexpire(&key, ttl_ms)
            .ignore()
            .incr(self.keys.declarations_version(), 1)
            .ignore()
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        self.restore_forgotten_definitions(jobs, &digests).await?;
        Ok(digest)
    }

    /// Writes again the definitions of `jobs` (with their `digests`) that `declared-defs` lacks:
    /// until its declarations were in place, nothing referenced the definitions a publication
    /// wrote, and the leader may have removed some as unreferenced
    /// ([`Store::forget_declared_definitions`]). Now referenced, they stay; the version is
    /// bumped when any is written, so that a leader that missed them reads them.
    async fn restore_forgotten_definitions(
        &self,
        jobs: &[Arc<Job>],
        digests: &[[u8; 32]],
    ) -> Result<(), StoreError> {
        const OPERATION: &str = "publish_replica_jobs";
        let declared = self.keys.declared_definitions();
        let mut restored = false;
        for (batch, batch_digests) in jobs.chunks(FIELD_BATCH).zip(digests.chunks(FIELD_BATCH)) {
            let hashes: Vec<String> = batch_digests.iter().map(hex::encode).collect();
            let mut pipe = redis::pipe();
            for hash in &hashes {
                pipe.hexists(&declared, hash);
            }
            let present: Vec<bool> = pipe
                .query_async(&mut self.connection.clone())
                .await
                .during(&self.metrics, OPERATION)?;
            let mut bodies = Vec::new();
            for ((job, hash), present) in batch.iter().zip(&hashes).zip(present) {
                if !present {
                    bodies.push((hash.as_str(), canonical_json(job)?));
                }
            }
            if bodies.is_empty() {
                continue;
            }
            restored = true;
            let () = self
                .connection
                .clone()
                .hset_multiple(&declared, &bodies)
                .await
                .during(&self.metrics, OPERATION)?;
        }
        if restored {
            let () = self
                .connection
                .clone()
                .incr(self.keys.declarations_version(), 1)
                .await
                .during(&self.metrics, OPERATION)?;
        }
        Ok(())
    }

    /// Whether the declarations `replica_id` published are still what it declares, checked for
    /// `batch`, a part of its `total` jobs: as many entries as it declares, each batch job's
    /// content hash, and the definition under that hash. Something else writing to the
    /// namespace (or a restore mixing copies) would otherwise leave a live replica's jobs
    /// undeclared, or unreadable to the leader, until its job list changes.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn declarations_intact(
        &self,
        replica_id: &str,
        batch: &[Arc<Job>],
        total: usize,
        digest: &str,
    ) -> Result<bool, StoreError> {
        let key = self.keys.replica_jobs(replica_id);
        let names: Vec<&str> = std::iter::once(PUBLISHED_MARKER)
            .chain(batch.iter().map(|job| job.name.as_str()))
            .collect();
        let hashes: Vec<String> = batch.iter().map(|job| job.content_hash()).collect();
        let mut pipe = redis::pipe();
        pipe.hlen(&key);
        pipe.cmd("HMGET").arg(&key).arg(&names);
        // HMGET with no field is an error: an empty batch has no definitions to read.
        if !batch.is_empty() {
            pipe.cmd("HMGET")
                .arg(self.keys.declared_definitions())
                .arg(&hashes);
        }
        let (entries, mut published, bodies): (usize, Vec<Option<String>>, Vec<Option<String>>) =
            if batch.is_empty() {
                let (entries, published): (usize, Vec<Option<String>>) = pipe
                    .query_async(&mut self.connection.clone())
                    .await
                    .during(&self.metrics, "declarations_intact")?;
                (entries, published, Vec::new())
            } else {
                pipe.query_async(&mut self.connection.clone())
                    .await
                    .during(&self.metrics, "declarations_intact")?
            };
        // The published marker is one entry more than the jobs, and names what was published.
        let marker = (!published.is_empty())
            .then(|| published.remove(0))
            .flatten();
        if entries != total + 1 || marker.as_deref() != Some(digest) {
            return Ok(false);
        }
        for ((job, hash), (published, body)) in batch
            .iter()
            .zip(&hashes)
            .zip(published.into_iter().zip(bodies))
        {
            if published.as_ref() != Some(hash) || body != Some(canonical_json(job)?) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Removes this replica's declarations and heartbeat, as it stops. Its record stays a
    /// day, marked stopped, for `status`; what it declared stays for `keep_declared` (the
    /// undeclared grace), so that the leader drops at once the jobs it no longer declares when
    /// it comes back ([`Store::withdrawn_declarations`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn withdraw_replica(
        &self,
        replica_id: &str,
        keep_declared: Duration,
    ) -> Result<(), StoreError> {
        const KEPT_MS: i64 = 24 * 3600 * 1000;
        let now_ms = self.now_ms().await?;
        let stopped = self.keys.stopped_replicas();
        let withdrawn = self.keys.withdrawn_jobs(replica_id);
        let () = redis::pipe()
            .atomic()
            .cmd("COPY")
            .arg(self.keys.replica_jobs(replica_id))
            .arg(&withdrawn)
            .arg("REPLACE")
            .ignore()
            .pexpire(
                &withdrawn,
                i64::try_from(millis(keep_declared)).unwrap_or(i64::MAX),
            )
            .ignore()
            .del(self.keys.replica_jobs(replica_id))
            .ignore()
            .hset(self.keys.replica(replica_id), "stopped_ms", now_ms)
            .ignore()
            .pexpire(self.keys.replica(replica_id), KEPT_MS)
            .ignore()
            .zrem(self.keys.replicas(), replica_id)
            .ignore()
            .zadd(&stopped, replica_id, now_ms)
            .ignore()
            .zrembyscore(&stopped, "-inf", now_ms - KEPT_MS)
            .ignore()
            .pexpire(&stopped, KEPT_MS)
            .ignore()
            .incr(self.keys.declarations_version(), 1)
            .ignore()
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "withdraw_replica")?;
        Ok(())
    }

    /// The declarations version, the replicas that beat within `live_for` of `now_ms`, and the
    /// jobs promoters found damaged: one round trip.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn declarations_signal(
        &self,
        now_ms: i64,
        live_for: Duration,
    ) -> Result<DeclarationsSignal, StoreError> {
        let since = now_ms.saturating_sub(i64::try_from(millis(live_for)).unwrap_or(i64::MAX));
        let (version, live, damaged): (Option<String>, Vec<Entry>, Vec<Entry>) = redis::pipe()
            .get(self.keys.declarations_version())
            .zrangebyscore(self.keys.replicas(), since, "+inf")
            .smembers(self.keys.damaged_definitions())
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "declarations_signal")?;
        // A name that is not UTF-8 is no replica or job: the reapers remove it.
        let mut live = readable_names(NameIndex::Replicas, live, &mut Vec::new());
        let mut damaged = readable_names(NameIndex::DamagedDefinitions, damaged, &mut Vec::new());
        live.sort();
        damaged.sort();
        Ok(DeclarationsSignal {
            version: version.unwrap_or_else(|| "0".to_owned()),
            live,
            damaged,
        })
    }

    /// What each of `replicas` declares (job -> content hash), by position; `None` for one whose
    /// declarations are not in Redis (expired with a stall, withdrawn, never published).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn replica_declarations(
        &self,
        replicas: &[String],
    ) -> Result<Vec<Option<HashMap<String, String>>>, StoreError> {
        if replicas.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for replica in replicas {
            pipe.hgetall(self.keys.replica_jobs(replica));
        }
        let answers: Vec<HashMap<String, String>> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "replica_declarations")?;
        Ok(answers.into_iter().map(published_declarations).collect())
    }

    /// For each of `replicas`, which of `jobs` it declared when it last stopped cleanly (see
    /// [`Store::withdraw_replica`]), by position.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn withdrawn_declarations(
        &self,
        replicas: &[&str],
        jobs: &[&str],
    ) -> Result<Vec<Vec<bool>>, StoreError> {
        if replicas.is_empty() || jobs.is_empty() {
            return Ok(vec![Vec::new(); replicas.len()]);
        }
        let mut pipe = redis::pipe();
        for replica in replicas {
            pipe.cmd("HMGET")
                .arg(self.keys.withdrawn_jobs(replica))
                .arg(jobs);
        }
        let answers: Vec<Vec<Option<String>>> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "withdrawn_declarations")?;
        Ok(answers
            .into_iter()
            .map(|found| found.iter().map(Option::is_some).collect())
            .collect())
    }

    /// The declared definitions stored under `hashes`, by position.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn declared_definitions(
        &self,
        hashes: &[&str],
    ) -> Result<Vec<Option<String>>, StoreError> {
        if hashes.is_empty() {
            return Ok(Vec::new());
        }
        redis::cmd("HMGET")
            .arg(self.keys.declared_definitions())
            .arg(hashes)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "declared_definitions")
    }

    /// Removes the declared definitions that neither `own` (the content digests of what
    /// `own_replica` declares) nor the declarations of another replica that beat within
    /// `recent` of `now_ms` reference, unless declarations changed since `version` was read:
    /// `false` then, and the rest is left for another time.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn forget_declared_definitions(
        &self,
        version: &str,
        own_replica: &str,
        own: &HashSet<[u8; 32]>,
        now_ms: i64,
        recent: Duration,
    ) -> Result<bool, StoreError> {
        let since = now_ms.saturating_sub(i64::try_from(millis(recent)).unwrap_or(i64::MAX));
        let replicas: Vec<Entry> = self
            .connection
            .clone()
            .zrangebyscore(self.keys.replicas(), since, "+inf")
            .await
            .during(&self.metrics, "forget_declared_definitions")?;
        let mut replicas = readable_names(NameIndex::Replicas, replicas, &mut Vec::new());
        // Its own are `own`: read back, they would be a copy of every job's hash.
        replicas.retain(|replica| replica != own_replica);
        let declared = self.replica_declarations(&replicas).await?;
        let referenced: HashSet<&str> = declared
            .iter()
            .flatten()
            .flat_map(HashMap::values)
            .map(String::as_str)
            .collect();
        let stored: Vec<String> = self
            .connection
            .clone()
            .hkeys(self.keys.declared_definitions())
            .await
            .during(&self.metrics, "forget_declared_definitions")?;
        let unreferenced: Vec<&String> = stored
            .iter()
            .filter(|hash| {
                let mut digest = [0; 32];
                let own_digest =
                    hex::decode_to_slice(hash, &mut digest).is_ok() && own.contains(&digest);
                !own_digest && !referenced.contains(hash.as_str())
            })
            .collect();
        for batch in unreferenced.chunks(FORGET_BATCH) {
            let removed: i64 = scripts::FORGET_DECLARED_DEFINITIONS
                .key(self.keys.declarations_version())
                .key(self.keys.declared_definitions())
                .arg(version)
                .arg(batch)
                .invoke_async(&mut self.connection.clone())
                .await
                .during(&self.metrics, "forget_declared_definitions")?;
            if removed < 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Publishes the declared jobs (definition and content hash) for promoters, status and drift
    /// detection, removing jobs no longer declared.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn publish_definitions(&self, jobs: &[Job]) -> Result<(), StoreError> {
        let published = self.published_hashes().await?;
        let declared: Vec<(&Job, String)> =
            jobs.iter().map(|job| (job, job.content_hash())).collect();
        self.publish_changed_definitions(&declared, &published)
            .await
    }

    /// Like [`Store::publish_definitions`], given each declared job with its content hash and
    /// what is published (as [`Store::published_hashes`] read it): only definitions that differ
    /// are written, so a new leader over unchanged schedules writes nothing.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn publish_changed_definitions(
        &self,
        jobs: &[(&Job, String)],
        published: &HashMap<String, String>,
    ) -> Result<(), StoreError> {
        let changed: Vec<&(&Job, String)> = jobs
            .iter()
            .filter(|(job, hash)| published.get(&job.name) != Some(hash))
            .collect();
        let declared: HashSet<&str> = jobs.iter().map(|(job, _)| job.name.as_str()).collect();
        let stale: Vec<&str> = published
            .keys()
            .map(String::as_str)
            .filter(|name| !declared.contains(name))
            .collect();
        self.write_definitions(
            changed.into_iter().map(|(job, hash)| (*job, hash.as_str())),
            &stale,
        )
        .await
    }

    /// Writes the published definition of each of `jobs` whatever is there now (a damaged or
    /// foreign entry), clears them from the damaged set, and removes the entries of `stale`.
    /// Promoters are woken: fires left due for a damaged definition can move now. A `def-hashes`
    /// of another type, which refuses their hashes, is replaced with the hash of every
    /// published definition, these included.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn write_definitions<'a>(
        &self,
        jobs: impl IntoIterator<Item = (&'a Job, &'a str)>,
        stale: &[&str],
    ) -> Result<(), StoreError> {
        let (defs, hashes) = (self.keys.defs(), self.keys.def_hashes());
        let damaged = self.keys.damaged_definitions();
        let jobs: Vec<(&Job, &str)> = jobs.into_iter().collect();
        let mut batches: Vec<&[(&Job, &str)]> = jobs.chunks(FIELD_BATCH).collect();
        if batches.is_empty() {
            // The stale entries and the promoters' wake-up go with the last batch, even of none.
            batches.push(&[]);
        }
        let count = batches.len();
        let mut refused = false;
        // A transaction per batch, a round trip each: a job's definition and hash are written
        // together, and what is held at once does not grow with the number of jobs.
        for (index, batch) in batches.into_iter().enumerate() {
            let last = index + 1 == count;
            let mut pipe = redis::pipe();
            pipe.atomic();
            if !batch.is_empty() {
                let mut names = Vec::with_capacity(batch.len());
                let mut bodies = Vec::with_capacity(batch.len());
                let mut batch_hashes = Vec::with_capacity(batch.len());
                for (job, hash) in batch {
                    names.push(job.name.as_str());
                    bodies.push((job.name.as_str(), canonical_json(job)?));
                    batch_hashes.push((job.name.as_str(), *hash));
                }
                pipe.hset_multiple(&defs, &bodies)
                    .ignore()
                    .hset_multiple(&hashes, &batch_hashes)
                    .ignore()
                    .srem(&damaged, &names)
                    .ignore();
            }
            if last {
                if !stale.is_empty() {
                    pipe.hdel(&defs, stale).ignore();
                    pipe.hdel(&hashes, stale).ignore();
                    pipe.srem(&damaged, stale).ignore();
                }
                pipe.publish(self.keys.wake_promoter(), "0").ignore();
            }
            let written: Result<(), redis::RedisError> =
                pipe.query_async(&mut self.connection.clone()).await;
            match written {
                // The definitions were written: their hashes are taken from them once all are.
                Err(error) if self.definition_hashes_refused(&error).await? => refused = true,
                written => written.during(&self.metrics, "write_definitions")?,
            }
        }
        if refused {
            self.replace_definition_hashes().await?;
        }
        Ok(())
    }

    /// The content hash of every published definition, by job: taken from the definitions
    /// themselves while `def-hashes` is of another type (damaged, or written by hand).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn published_hashes(&self) -> Result<HashMap<String, String>, StoreError> {
        const OPERATION: &str = "published_hashes";
        // A name that is not UTF-8 is left out: the leader removes it (`damaged_names`).
        let readable = |index, pairs| readable_hash(index, pairs, &mut Vec::new());
        let read: Result<Vec<(Entry, Entry)>, redis::RedisError> = self
            .connection
            .clone()
            .hgetall(self.keys.def_hashes())
            .await;
        match read {
            Err(error) if self.definition_hashes_refused(&error).await? => {
                self.hashes_of_definitions(OPERATION).await
            }
            read => Ok(readable(
                NameIndex::DefinitionHashes,
                read.during(&self.metrics, OPERATION)?,
            )),
        }
    }

    /// The names in `defs` and in `def-hashes`: which published entries name no job. A
    /// `def-hashes` of another type names none.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn published_names(&self) -> Result<(Vec<String>, Vec<String>), StoreError> {
        const OPERATION: &str = "published_names";
        // A name that is not UTF-8 is left out: the leader removes it (`damaged_names`).
        let readable = |index, names| readable_names(index, names, &mut Vec::new());
        let read: Result<(Vec<Entry>, Vec<Entry>), redis::RedisError> = redis::pipe()
            .hkeys(self.keys.defs())
            .hkeys(self.keys.def_hashes())
            .query_async(&mut self.connection.clone())
            .await;
        let (defs, hashes) = match read {
            Err(error) if self.definition_hashes_refused(&error).await? => {
                let defs: Vec<Entry> = self
                    .connection
                    .clone()
                    .hkeys(self.keys.defs())
                    .await
                    .during(&self.metrics, OPERATION)?;
                (defs, Vec::new())
            }
            read => read.during(&self.metrics, OPERATION)?,
        };
        Ok((
            readable(NameIndex::Definitions, defs),
            readable(NameIndex::DefinitionHashes, hashes),
        ))
    }

    /// The published definitions of `jobs`, by position. While `def-hashes` is of another type
    /// (damaged, or written by hand) none has a hash, as none is there: the leader's check of
    /// the published definitions writes them again, which replaces it.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn published_definitions(
        &self,
        jobs: &[&str],
    ) -> Result<Vec<PublishedDefinition>, StoreError> {
        const OPERATION: &str = "published_definitions";
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        type Read = (Vec<Option<String>>, Vec<Option<String>>);
        let read: Result<Read, redis::RedisError> = redis::pipe()
            .cmd("HMGET")
            .arg(self.keys.defs())
            .arg(jobs)
            .cmd("HMGET")
            .arg(self.keys.def_hashes())
            .arg(jobs)
            .query_async(&mut self.connection.clone())
            .await;
        let (definitions, hashes) = match read {
            Err(error) if self.definition_hashes_refused(&error).await? => {
                let definitions: Vec<Option<String>> = redis::cmd("HMGET")
                    .arg(self.keys.defs())
                    .arg(jobs)
                    .query_async(&mut self.connection.clone())
                    .await
                    .during(&self.metrics, OPERATION)?;
                (definitions, vec![None; jobs.len()])
            }
            read => read.during(&self.metrics, OPERATION)?,
        };
        Ok(definitions
            .into_iter()
            .zip(hashes)
            .map(|(definition, hash)| PublishedDefinition { definition, hash })
            .collect())
    }
}

/// The canonical JSON form of `job`, as published and hashed.
///
/// # Errors
/// Never for a parsed job; a reply error naming the job otherwise.
pub fn canonical_json(job: &Job) -> Result<String, StoreError> {
    serde_json::to_string(job)
        .map_err(|error| reply_error("publish_definitions", format!("{}: {error}", job.name)))
}

/// `digest` in hex, held inline.
fn hex_array(digest: &[u8; 32]) -> [u8; 64] {
    let mut hex = [0; 64];
    hex::encode_to_slice(digest, &mut hex).expect("64 bytes hold 32 in hex");
    hex
}

/// A digest of declarations (job name and content hash of each), whatever their order.
pub(super) fn declarations_digest<'a, H: AsRef<[u8]> + Ord>(
    declared: impl Iterator<Item = (&'a str, H)>,
) -> String {
    let mut declared: Vec<(&str, H)> = declared.collect();
    declared.sort_unstable();
    let mut hasher = Sha256::new();
    for (name, hash) in &declared {
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(hash.as_ref());
        hasher.update([b'\n']);
    }
    hex::encode(hasher.finalize())
}

/// The declarations in a `replica-jobs:<id>` hash read whole, if they are what the replica
/// published: `None` when they are missing (expired, withdrawn) or written over since (their
/// digest no longer matches), so that nobody takes them for what the replica declares.
pub(super) fn published_declarations(
    mut jobs: HashMap<String, String>,
) -> Option<HashMap<String, String>> {
    let digest = jobs.remove(PUBLISHED_MARKER)?;
    let matches = declarations_digest(
        jobs.iter()
            .map(|(name, hash)| (name.as_str(), hash.as_str())),
    ) == digest;
    matches.then_some(jobs)
}
