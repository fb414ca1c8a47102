//! Which jobs the leader plans: every job some live replica declares, one definition of each.
//!
//! During a rolling deploy replicas declare different jobs, or different definitions of one
//! job. The leader plans the union of what the live replicas declare (its own jobs as it holds
//! them, the others' as they published them). When they declare a job in more than one way, the
//! definition declared by the most live replicas is planned, ties going to the smallest content
//! hash: every replica that leads picks the same one from the same declarations. Drift is
//! logged once per change and counted in `redcron_drifted_jobs`.
//!
//! A job that no live replica declares any more is not dropped at once unless a replica that
//! declared it now declares itself without it (a reload, or a restart under the same id): when
//! its declarers merely disappeared (a crash, a stop, a Redis stall that outlived their
//! declarations), it stays planned for the hold time, so that a replica coming back or a
//! replacement that declares it finds its fires waiting instead of lost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::Jobs;
use crate::metrics::METRICS;
use crate::schedule::Job;
use crate::store::{Store, StoreError};

/// Most definitions read from Redis in one call.
const READ_BATCH: usize = 1_000;

/// How the leader reads what replicas declare.
#[derive(Debug, Clone)]
pub struct DeclarationsConfig {
    /// This replica's id: its own declarations are the jobs it holds, not Redis's copy of them.
    pub replica_id: String,
    /// A replica is live while its last heartbeat is at most this old.
    pub live_for: Duration,
    /// How long a job stays planned once no live replica declares it, unless one that declared
    /// it said it no longer does.
    pub hold: Duration,
}

impl Default for DeclarationsConfig {
    fn default() -> Self {
        Self {
            replica_id: "replica".to_owned(),
            live_for: Duration::from_secs(6),
            hold: Duration::from_secs(300),
        }
    }
}

/// A definition's content hash as bytes ([`Job::content_digest`]): what is kept per job.
type Digest = [u8; 32];

/// One job as the leader plans it.
#[derive(Clone)]
struct Chosen {
    job: Arc<Job>,
    digest: Digest,
}

/// How one job is declared when live replicas disagree: each definition with the number of
/// live replicas declaring it, the planned one first.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Drift(Vec<(Digest, usize)>);

impl Drift {
    fn describe(&self) -> String {
        self.0
            .iter()
            .map(|(digest, count)| format!("{} by {count}", short(digest)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The jobs the leader plans, kept up to date from the declarations in Redis.
pub(super) struct Declarations {
    config: DeclarationsConfig,
    /// The declarations version and live replicas at the last read.
    read_at: Option<(String, Vec<String>)>,
    /// This replica's jobs when the union was last computed, and their digests, by position.
    own: Option<Jobs>,
    own_digests: Vec<Digest>,
    /// What the other live replicas declared at the last read: replica -> job -> hash.
    others: HashMap<String, HashMap<String, String>>,
    /// The planned jobs, sorted by name.
    planned: Vec<Chosen>,
    /// The same jobs as the planner holds them; replaced only when one of them changes.
    planned_jobs: Jobs,
    /// The published definitions (job -> hash) a new lease started from: planned while no live
    /// replica declares them, for the hold time, since who declared them is not known.
    inherited: HashMap<String, String>,
    /// Jobs planned although no live replica declares them now, and since when (ms).
    held_since: HashMap<String, i64>,
    /// Definitions read from Redis, by digest.
    bodies: HashMap<Digest, Arc<Job>>,
    /// Digests whose definition could not be read (reported once each).
    unreadable: HashSet<Digest>,
    /// Jobs declared in more than one way, as last logged.
    drift: BTreeMap<String, Drift>,
}

/// What [`Declarations::refresh`] found.
pub(super) struct Refreshed {
    /// The jobs to plan.
    pub jobs: Jobs,
    /// Jobs whose published definition a promoter could not read.
    pub damaged: Vec<String>,
}

impl Declarations {
    pub(super) fn new(config: DeclarationsConfig) -> Self {
        Self {
            config,
            read_at: None,
            own: None,
            own_digests: Vec::new(),
            others: HashMap::new(),
            planned: Vec::new(),
            planned_jobs: Arc::new(Vec::new()),
            inherited: HashMap::new(),
            held_since: HashMap::new(),
            bodies: HashMap::new(),
            unreadable: HashSet::new(),
            drift: BTreeMap::new(),
        }
    }

    /// The content hash of the planned definition of `job`.
    pub(super) fn hash_of(&self, job: &str) -> Option<String> {
        self.position(job)
            .map(|index| hex::encode(self.planned[index].digest))
    }

    /// The digest of the planned definition of `job`.
    pub(super) fn digest_of(&self, job: &str) -> Option<[u8; 32]> {
        self.position(job).map(|index| self.planned[index].digest)
    }

    /// Whether `job` is planned.
    pub(super) fn plans(&self, job: &str) -> bool {
        self.position(job).is_some()
    }

    fn position(&self, job: &str) -> Option<usize> {
        self.planned
            .binary_search_by(|chosen| chosen.job.name.as_str().cmp(job))
            .ok()
    }

    /// The jobs to plan now, given this replica's own: declarations are read again when a
    /// replica published or withdrew some, when the live replicas changed, while a job is held,
    /// and on a new lease (`fresh_lease`), which starts from what the previous leader published.
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn refresh(
        &mut self,
        store: &Store,
        own: &Jobs,
        fresh_lease: bool,
        now_ms: i64,
    ) -> Result<Refreshed, StoreError> {
        let signal = store
            .declarations_signal(now_ms, self.config.live_for)
            .await?;
        if fresh_lease {
            self.others.clear();
            self.held_since.clear();
            self.planned.clear();
            self.own = None;
            self.inherited = store.published_hashes().await?;
        }
        let own_changed = !self
            .own
            .as_ref()
            .is_some_and(|previous| Arc::ptr_eq(previous, own));
        let version_moved = self
            .read_at
            .as_ref()
            .is_none_or(|(version, _)| *version != signal.version);
        let read_at = (signal.version.clone(), signal.live.clone());
        let reread =
            fresh_lease || self.read_at.as_ref() != Some(&read_at) || !self.held_since.is_empty();
        if reread || own_changed {
            let others = if reread {
                self.read_others(store, &signal.live).await?
            } else {
                self.others.clone()
            };
            let own_digests = if own_changed {
                own.iter().map(|job| job.content_digest()).collect()
            } else {
                self.own_digests.clone()
            };
            self.recompute(store, own, own_digests, others, now_ms)
                .await?;
            if version_moved {
                self.forget_unreferenced(store, &signal.version, now_ms)
                    .await?;
            }
        }
        self.read_at = Some(read_at);
        Ok(Refreshed {
            jobs: self.planned_jobs.clone(),
            damaged: signal.damaged,
        })
    }

    /// What the other live replicas declare; those whose declarations are not in Redis are left
    /// out (their jobs are held, not dropped).
    async fn read_others(
        &self,
        store: &Store,
        live: &[String],
    ) -> Result<HashMap<String, HashMap<String, String>>, StoreError> {
        let ids: Vec<String> = live
            .iter()
            .filter(|id| **id != self.config.replica_id)
            .cloned()
            .collect();
        let declared = store.replica_declarations(&ids).await?;
        Ok(ids
            .into_iter()
            .zip(declared)
            .filter_map(|(id, jobs)| Some((id, jobs?)))
            .collect())
    }

    /// Chooses each job's definition from the declarations, holds the jobs whose declarers
    /// disappeared, and logs drift.
    async fn recompute(
        &mut self,
        store: &Store,
        own: &Jobs,
        own_digests: Vec<Digest>,
        others: HashMap<String, HashMap<String, String>>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let candidates = candidates(own, &own_digests, &others);
        let own_by_digest: HashMap<&Digest, &Arc<Job>> =
            own_digests.iter().zip(own.iter()).collect();
        let wanted: Vec<Digest> = candidates
            .values()
            .flatten()
            .map(|(digest, _)| *digest)
            .filter(|digest| {
                !own_by_digest.contains_key(digest)
                    && !self.bodies.contains_key(digest)
                    && !self.unreadable.contains(digest)
            })
            .collect();
        self.read_bodies(store, &candidates, &wanted).await?;

        let mut planned = Vec::with_capacity(candidates.len());
        let mut drift = BTreeMap::new();
        for (name, declared) in &candidates {
            let chosen = declared.iter().find_map(|(digest, _)| {
                let job = own_by_digest
                    .get(digest)
                    .map(|job| Arc::clone(job))
                    .or_else(|| self.bodies.get(digest).cloned())?;
                Some(Chosen {
                    job,
                    digest: *digest,
                })
            });
            if let Some(chosen) = chosen {
                if declared.len() > 1 {
                    let mut counts = declared.clone();
                    counts.sort_by_key(|(digest, _)| *digest != chosen.digest);
                    drift.insert((*name).to_owned(), Drift(counts));
                }
                planned.push(chosen);
            }
        }
        self.hold_undeclared(store, own, &others, &mut planned, now_ms)
            .await?;
        planned.sort_unstable_by(|a, b| a.job.name.cmp(&b.job.name));
        self.log_drift(drift);

        let unchanged = planned.len() == self.planned.len()
            && planned
                .iter()
                .zip(&self.planned)
                .all(|(now, was)| now.job.name == was.job.name && now.digest == was.digest);
        if !unchanged {
            self.planned_jobs = Arc::new(planned.iter().map(|chosen| chosen.job.clone()).collect());
        }
        let referenced: HashSet<&Digest> = candidates
            .values()
            .flatten()
            .map(|(digest, _)| digest)
            .collect();
        self.bodies.retain(|digest, _| referenced.contains(digest));
        self.planned = planned;
        self.own = Some(own.clone());
        self.own_digests = own_digests;
        self.others = others;
        self.inherited.clear();
        Ok(())
    }

    /// Reads the definitions of the `wanted` digests; one that cannot be read is reported once,
    /// with a job that declares it, and another definition of that job is planned instead.
    async fn read_bodies(
        &mut self,
        store: &Store,
        candidates: &BTreeMap<&str, Vec<(Digest, usize)>>,
        wanted: &[Digest],
    ) -> Result<(), StoreError> {
        for batch in wanted.chunks(READ_BATCH) {
            let hashes: Vec<String> = batch.iter().map(hex::encode).collect();
            let names: Vec<&str> = hashes.iter().map(String::as_str).collect();
            let texts = store.declared_definitions(&names).await?;
            for ((digest, hash), text) in batch.iter().zip(&hashes).zip(texts) {
                // Missing: being published or withdrawn right now; tried again next time.
                let Some(text) = text else { continue };
                match Job::from_canonical_json(&text, hash) {
                    Ok(job) => {
                        self.bodies.insert(*digest, Arc::new(job));
                    }
                    Err(error) => {
                        let job = candidates
                            .iter()
                            .find(|(_, declared)| declared.iter().any(|(d, _)| d == digest))
                            .map_or("", |(name, _)| *name);
                        warn!(
                            job,
                            definition = short(digest),
                            %error,
                            "a replica declares a definition this leader cannot read: planning \
                             another definition of the job, if any"
                        );
                        METRICS.unreadable_declarations_total.inc();
                        self.unreadable.insert(*digest);
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds to `planned` the jobs planned before (or published by the previous leader) that no
    /// live replica declares now, for the hold time, unless a replica that declared them says
    /// it no longer does.
    async fn hold_undeclared(
        &mut self,
        store: &Store,
        own: &Jobs,
        others: &HashMap<String, HashMap<String, String>>,
        planned: &mut Vec<Chosen>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let declared: HashSet<&str> = planned
            .iter()
            .map(|chosen| chosen.job.name.as_str())
            .collect();
        self.held_since
            .retain(|name, _| !declared.contains(name.as_str()));
        let mut undeclared: Vec<Chosen> = self
            .planned
            .iter()
            .filter(|chosen| !declared.contains(chosen.job.name.as_str()))
            .cloned()
            .collect();
        let inherited: Vec<(&str, &str)> = self
            .inherited
            .iter()
            .filter(|(name, _)| !declared.contains(name.as_str()))
            .map(|(name, hash)| (name.as_str(), hash.as_str()))
            .collect();
        for batch in inherited.chunks(READ_BATCH) {
            let names: Vec<&str> = batch.iter().map(|(name, _)| *name).collect();
            for ((_, hash), published) in
                batch.iter().zip(store.published_definitions(&names).await?)
            {
                let job = published
                    .definition
                    .and_then(|text| Job::from_canonical_json(&text, hash).ok());
                let mut digest = [0; 32];
                if let Some(job) = job
                    && hex::decode_to_slice(hash, &mut digest).is_ok()
                {
                    undeclared.push(Chosen {
                        job: Arc::new(job),
                        digest,
                    });
                }
            }
        }
        drop(declared);
        if undeclared.is_empty() {
            return Ok(());
        }
        let own_now: HashSet<&str> = own.iter().map(|job| job.name.as_str()).collect();
        let own_before: HashSet<&str> = self
            .own
            .iter()
            .flat_map(|jobs| jobs.iter())
            .map(|job| job.name.as_str())
            .collect();
        let hold_ms = i64::try_from(self.config.hold.as_millis()).unwrap_or(i64::MAX);
        let hold = humantime::format_duration(self.config.hold).to_string();
        for chosen in undeclared {
            let name = chosen.job.name.clone();
            let withdrawn = (own_before.contains(name.as_str())
                && !own_now.contains(name.as_str()))
                || self.others.iter().any(|(replica, before)| {
                    before.contains_key(&name)
                        && others
                            .get(replica)
                            .is_some_and(|now| !now.contains_key(&name))
                });
            if withdrawn {
                info!(
                    job = name,
                    "no replica declares this job any more: no longer planned"
                );
                self.held_since.remove(&name);
                continue;
            }
            let since = *self.held_since.entry(name.clone()).or_insert_with(|| {
                warn!(
                    job = name,
                    hold,
                    "no live replica declares this job: still planned for the hold time, its \
                     runs waiting for a replica that declares it"
                );
                now_ms
            });
            if now_ms - since >= hold_ms {
                warn!(
                    job = name,
                    "no live replica has declared this job for the hold time: no longer planned"
                );
                self.held_since.remove(&name);
                continue;
            }
            planned.push(chosen);
        }
        Ok(())
    }

    /// Logs each job whose drift began, changed or ended, and sets the gauge.
    fn log_drift(&mut self, drift: BTreeMap<String, Drift>) {
        for (job, now) in &drift {
            if self.drift.get(job) != Some(now) {
                warn!(
                    job,
                    declared = now.describe(),
                    planned = short(&now.0[0].0),
                    "live replicas declare different definitions of this job: planning the one \
                     most of them declare (ties: the smallest content hash)"
                );
            }
        }
        for job in self.drift.keys().filter(|job| !drift.contains_key(*job)) {
            info!(
                job,
                "live replicas declare one definition of this job again"
            );
        }
        METRICS
            .drifted_jobs
            .set(i64::try_from(drift.len()).unwrap_or(i64::MAX));
        self.drift = drift;
    }

    /// Removes from Redis the declared definitions that neither this replica nor any replica
    /// that beat recently references. Twice the live time: a replica whose declarations are
    /// still there is never left out, even one whose heartbeat is a little late.
    async fn forget_unreferenced(
        &self,
        store: &Store,
        version: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let own: HashSet<String> = self.own_digests.iter().map(hex::encode).collect();
        store
            .forget_declared_definitions(version, &own, now_ms, self.config.live_for * 2)
            .await?;
        Ok(())
    }
}

/// Each declared job's definitions (digest, number of live replicas declaring it), the one to
/// plan first: most replicas, then the smallest content hash. A hash that is not one (foreign
/// data) counts for nothing.
fn candidates<'a>(
    own: &'a [Arc<Job>],
    own_digests: &[Digest],
    others: &'a HashMap<String, HashMap<String, String>>,
) -> BTreeMap<&'a str, Vec<(Digest, usize)>> {
    let mut candidates: BTreeMap<&str, Vec<(Digest, usize)>> = BTreeMap::new();
    let mut count = |name: &'a str, digest: Digest| {
        let entry = candidates.entry(name).or_default();
        match entry.iter_mut().find(|(known, _)| *known == digest) {
            Some((_, count)) => *count += 1,
            None => entry.push((digest, 1)),
        }
    };
    for (job, digest) in own.iter().zip(own_digests) {
        count(job.name.as_str(), *digest);
    }
    for declared in others.values() {
        for (name, hash) in declared {
            let mut digest = [0; 32];
            if hex::decode_to_slice(hash, &mut digest).is_ok() {
                count(name.as_str(), digest);
            }
        }
    }
    for declared in candidates.values_mut() {
        declared.sort_by(|(a, a_count), (b, b_count)| b_count.cmp(a_count).then(a.cmp(b)));
    }
    candidates
}

/// The start of a content hash, as logs show it.
fn short(digest: &Digest) -> String {
    hex::encode(&digest[..6])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::parse_file;
    use std::path::Path;

    fn declared(jobs: &[(&str, u8)]) -> HashMap<String, String> {
        jobs.iter()
            .map(|(name, byte)| ((*name).to_owned(), hex::encode([*byte; 32])))
            .collect()
    }

    #[test]
    fn the_definition_most_live_replicas_declare_is_planned_ties_by_hash() {
        let own: Vec<Arc<Job>> = parse_file(
            Path::new("test.toml"),
            "[jobs.x]\ncommand = \"true\"\n[jobs.y]\ncommand = \"true\"\n",
        )
        .expect("valid test jobs")
        .into_iter()
        .map(Arc::new)
        .collect();
        let own_digests = [[0xb; 32], [0xa; 32]];
        let mut others = HashMap::from([
            ("r2".to_owned(), declared(&[("x", 0xc), ("z", 0xd)])),
            ("r3".to_owned(), declared(&[("x", 0xc), ("y", 0xe)])),
        ]);
        others
            .get_mut("r3")
            .expect("r3")
            .insert("w".to_owned(), "not a hash".to_owned());
        let chosen = candidates(&own, &own_digests, &others);
        assert_eq!(
            chosen["x"],
            [([0xc; 32], 2), ([0xb; 32], 1)],
            "most replicas"
        );
        assert_eq!(
            chosen["y"],
            [([0xa; 32], 1), ([0xe; 32], 1)],
            "a tie: the smallest hash"
        );
        assert_eq!(chosen["z"], [([0xd; 32], 1)], "declared by a follower only");
        assert_eq!(chosen.len(), 3, "a foreign hash counts for nothing");
    }
}
