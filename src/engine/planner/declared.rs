//! Which jobs the leader plans: every job some live replica declares, one definition of each.
//!
//! During a rolling deploy replicas declare different jobs, or different definitions of one
//! job. The leader plans the union of what the live replicas declare (its own jobs as it has
//! them, the others' as they published them). When they declare a job in more than one way, the
//! definition declared by the most live replicas is planned, ties going to the smallest content
//! hash: every replica that leads picks the same one from the same declarations. Drift is
//! logged once per change and counted in `redcron_drifted_jobs`.
//!
//! A job that no live replica declares any more is not dropped at once unless a replica that
//! declared it now declares itself without it (a reload, or a restart under the same id): when
//! its declarers merely disappeared (a crash, a stop, a Redis stall that outlived their
//! declarations), it stays planned for the undeclared grace, so that a replica coming back or a
//! replacement that declares it finds its fires waiting instead of lost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

use super::candidates::{Candidates, Digest};
use crate::metrics::Metrics;
use crate::schedule::{Job, Jobs};
use crate::store::{Store, StoreError};

/// Most definitions read from Redis in one call.
const READ_BATCH: usize = 1_000;

/// How the leader reads what replicas declare.
#[derive(Debug, Clone)]
pub struct DeclarationsConfig {
    /// This replica's id: its own declarations are the jobs it has, not Redis's copy of them.
    pub replica_id: String,
    /// A replica is live while its last heartbeat is at most this old.
    pub live_for: Duration,
    /// How long a job stays planned once no live replica declares it, unless one that declared
    /// it said it no longer does: the reaper's
    /// [`undeclared_grace`](crate::engine::reaper::ReaperConfig::undeclared_grace).
    pub undeclared_grace: Duration,
}

impl Default for DeclarationsConfig {
    fn default() -> Self {
        Self {
            replica_id: "replica".to_owned(),
            live_for: Duration::from_secs(6),
            undeclared_grace: Duration::from_secs(300),
        }
    }
}

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
    /// The same jobs as the planner has them; replaced only when one of them changes.
    planned_jobs: Jobs,
    /// Jobs planned although no live replica declares them now, and since when (ms).
    kept_since: HashMap<String, i64>,
    /// Definitions read from Redis, by digest.
    bodies: HashMap<Digest, Arc<Job>>,
    /// Digests whose definition could not be read (reported once each), until the
    /// declarations version moves.
    unreadable: HashSet<Digest>,
    /// Jobs planned by their last definition read, none of the declared ones being readable.
    kept_unreadable: HashSet<String>,
    /// Jobs declared in more than one way, as last logged.
    drift: BTreeMap<String, Drift>,
    /// The declarations version at which definitions nobody references are to be removed, at
    /// the next tick that has nothing else to do.
    forget_at: Option<String>,
    /// Redis's clock at the last read, and the replicas taken as live then.
    last_read: Option<(i64, Vec<String>)>,
    /// After a gap between two reads: until when (ms) the replicas live before it still count
    /// as live, and which.
    after_gap: Option<(i64, Vec<String>)>,
    /// Replicas no longer live, with what they declared and since when (ms), for the undeclared
    /// time: one that comes back without a job withdrew it, however it stopped.
    departed: HashMap<String, (HashMap<String, String>, i64)>,
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
            kept_since: HashMap::new(),
            bodies: HashMap::new(),
            unreadable: HashSet::new(),
            kept_unreadable: HashSet::new(),
            drift: BTreeMap::new(),
            forget_at: None,
            last_read: None,
            after_gap: None,
            departed: HashMap::new(),
        }
    }

    /// The replicas to take as live at `now_ms`, given those whose heartbeat is recent.
    ///
    /// When this replica could not read Redis for a heartbeat period or more (a Redis stall, a
    /// paused process, a leader busy), the others' heartbeats may be old only because they
    /// could not write either: those live before the gap count as live for one more live time,
    /// so that a stall neither keeps their jobs nor flips a drifted job's definition. So it is
    /// while Redis refuses this replica's writes (`writes_refused`: out of memory, say), which
    /// refuses every heartbeat: a gap that lasts until a heartbeat is written again.
    fn live_at(&mut self, now_ms: i64, beating: Vec<String>, writes_refused: bool) -> Vec<String> {
        let live_ms = i64::try_from(self.config.live_for.as_millis()).unwrap_or(i64::MAX);
        if let Some((read_ms, before)) = self.last_read.take()
            && (writes_refused || now_ms - read_ms >= live_ms / 3)
        {
            self.after_gap = Some((now_ms.saturating_add(live_ms), before));
        }
        let mut live = beating;
        match &self.after_gap {
            Some((until, before)) if now_ms < *until => {
                live.extend(before.iter().cloned());
                live.sort();
                live.dedup();
            }
            _ => self.after_gap = None,
        }
        self.last_read = Some((now_ms, live.clone()));
        live
    }

    /// The content hash of the planned definition of `job`.
    pub(super) fn hash_of(&self, job: &str) -> Option<String> {
        self.position(job)
            .map(|index| hex::encode(self.planned[index].digest))
    }

    /// The content hash of each planned job, in the order of the jobs [`Declarations::refresh`]
    /// returned last.
    pub(super) fn hashes(&self) -> impl Iterator<Item = String> + '_ {
        self.planned.iter().map(|chosen| hex::encode(chosen.digest))
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
    /// replica published or withdrew some, when the live replicas changed, while a job is kept,
    /// and on a new lease, which starts from `inherited`, what the previous leader published
    /// (job -> content hash).
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn refresh(
        &mut self,
        store: &Store,
        own: &Jobs,
        inherited: Option<&HashMap<String, String>>,
        now_ms: i64,
    ) -> Result<Refreshed, StoreError> {
        let signal = store
            .declarations_signal(now_ms, self.config.live_for)
            .await?;
        if inherited.is_some() {
            self.others.clear();
            self.kept_since.clear();
            self.planned.clear();
            self.own = None;
            self.last_read = None;
            self.after_gap = None;
            self.departed.clear();
        }
        let live = self.live_at(now_ms, signal.live, store.metrics().health.writes_refused());
        let own_changed = !self
            .own
            .as_ref()
            .is_some_and(|previous| Arc::ptr_eq(previous, own));
        if self
            .read_at
            .as_ref()
            .is_none_or(|(version, _)| *version != signal.version)
        {
            self.forget_at = Some(signal.version.clone());
            // A declarer that found its definition damaged published it again: read it again.
            self.unreadable.clear();
        }
        let read_at = (signal.version.clone(), live);
        let reread = inherited.is_some()
            || self.read_at.as_ref() != Some(&read_at)
            || !self.kept_since.is_empty();
        if reread || own_changed {
            let others = if reread {
                self.read_others(store, &read_at.1).await?
            } else {
                self.others.clone()
            };
            let own_digests = if own_changed {
                own.iter().map(|job| job.content_digest()).collect()
            } else {
                self.own_digests.clone()
            };
            self.recompute(store, own, own_digests, others, inherited, now_ms)
                .await?;
        } else if let Some(version) = self.forget_at.take() {
            self.forget_unreferenced(store, &version, now_ms).await?;
        }
        self.read_at = Some(read_at);
        Ok(Refreshed {
            jobs: self.planned_jobs.clone(),
            damaged: signal.damaged,
        })
    }

    /// What the other live replicas declare; those whose declarations are not in Redis are left
    /// out (their jobs are kept, not dropped).
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
            .filter_map(|(id, jobs)| {
                // Expired in a gap, with the heartbeat that kept them: as they were, until
                // their replica publishes them again.
                let jobs = jobs.or_else(|| {
                    self.after_gap
                        .as_ref()
                        .filter(|(_, before)| before.contains(&id))
                        .and_then(|_| self.others.get(&id).cloned())
                })?;
                Some((id, jobs))
            })
            .collect())
    }

    /// Chooses each job's definition from the declarations, keeps the jobs whose declarers
    /// disappeared, and logs drift.
    async fn recompute(
        &mut self,
        store: &Store,
        own: &Jobs,
        own_digests: Vec<Digest>,
        others: HashMap<String, HashMap<String, String>>,
        inherited: Option<&HashMap<String, String>>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let candidates = Candidates::new(own, &own_digests, &others);
        let own_index: HashMap<&str, usize> = own
            .iter()
            .enumerate()
            .map(|(index, job)| (job.name.as_str(), index))
            .collect();
        let own_job = |name: &str, digest: &Digest| {
            own_index
                .get(name)
                .filter(|index| own_digests[**index] == *digest)
                .map(|index| Arc::clone(&own[*index]))
        };
        let wanted: Vec<Digest> = candidates
            .entries
            .iter()
            .filter(|entry| {
                own_job(entry.name, &entry.digest).is_none()
                    && !self.bodies.contains_key(&entry.digest)
                    && !self.unreadable.contains(&entry.digest)
            })
            .map(|entry| entry.digest)
            .collect();
        if !wanted.is_empty() {
            self.read_bodies(store, &candidates, &wanted).await?;
        }

        let mut planned = Vec::with_capacity(own.len());
        let mut drift = BTreeMap::new();
        let mut kept_unreadable = HashSet::new();
        for group in candidates.by_job() {
            let chosen = group.iter().find_map(|entry| {
                let job = own_job(entry.name, &entry.digest)
                    .or_else(|| self.bodies.get(&entry.digest).cloned())?;
                Some(Chosen {
                    job,
                    digest: entry.digest,
                })
            });
            let chosen = match chosen {
                Some(chosen) => chosen,
                // Live replicas declare the job, but none of their definitions can be read:
                // planned as before rather than kept and then dropped as if nobody declared it
                // (the declarers check theirs and publish them again).
                None => {
                    let name = group[0].name;
                    let Some(index) = self.position(name) else {
                        continue;
                    };
                    if !self.kept_unreadable.contains(name) {
                        warn!(
                            job = name,
                            "live replicas declare this job, but this leader cannot read their \
                             definitions: planning the last definition it read"
                        );
                    }
                    kept_unreadable.insert(name.to_owned());
                    self.planned[index].clone()
                }
            };
            if group.len() > 1 {
                let mut counts: Vec<(Digest, usize)> = group
                    .iter()
                    .map(|entry| (entry.digest, entry.count))
                    .collect();
                counts.sort_by_key(|(digest, _)| *digest != chosen.digest);
                drift.insert(group[0].name.to_owned(), Drift(counts));
            }
            planned.push(chosen);
        }
        // `by_job` goes in name order: `planned` is sorted until kept jobs are added.
        self.keep_undeclared(store, own, &others, &mut planned, inherited, now_ms)
            .await?;
        self.log_drift(drift, store.metrics());
        self.kept_unreadable = kept_unreadable;

        let unchanged = planned.len() == self.planned.len()
            && planned
                .iter()
                .zip(&self.planned)
                .all(|(now, was)| now.job.name == was.job.name && now.digest == was.digest);
        if !unchanged {
            self.planned_jobs = Arc::new(planned.iter().map(|chosen| chosen.job.clone()).collect());
        }
        if !self.bodies.is_empty() {
            let referenced: HashSet<&Digest> = candidates
                .entries
                .iter()
                .map(|entry| &entry.digest)
                .collect();
            self.bodies.retain(|digest, _| referenced.contains(digest));
        }
        drop(candidates);
        self.planned = planned;
        self.own = Some(own.clone());
        self.own_digests = own_digests;
        let grace_ms = i64::try_from(self.config.undeclared_grace.as_millis()).unwrap_or(i64::MAX);
        for (replica, declared) in std::mem::replace(&mut self.others, others) {
            if !self.others.contains_key(&replica) {
                self.departed.insert(replica, (declared, now_ms));
            }
        }
        let live = &self.others;
        self.departed.retain(|replica, (_, since)| {
            !live.contains_key(replica) && now_ms - *since < grace_ms
        });
        Ok(())
    }

    /// Reads the definitions of the `wanted` digests; one that cannot be read is reported once,
    /// with a job that declares it, and another definition of that job is planned instead.
    async fn read_bodies(
        &mut self,
        store: &Store,
        candidates: &Candidates<'_>,
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
                            .entries
                            .iter()
                            .find(|entry| entry.digest == *digest)
                            .map_or("", |entry| entry.name);
                        warn!(
                            job,
                            definition = short(digest),
                            %error,
                            "a replica declares a definition this leader cannot read: planning \
                             another definition of the job, if any"
                        );
                        store.metrics().unreadable_declarations_total.inc();
                        self.unreadable.insert(*digest);
                    }
                }
            }
        }
        Ok(())
    }

    /// Adds to `planned` (sorted by name, and kept so) the jobs planned before, or published by
    /// the previous leader (`inherited`), that no live replica declares now, for the undeclared grace,
    /// unless a replica that declared them says it no longer does.
    async fn keep_undeclared(
        &mut self,
        store: &Store,
        own: &Jobs,
        others: &HashMap<String, HashMap<String, String>>,
        planned: &mut Vec<Chosen>,
        inherited: Option<&HashMap<String, String>>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        // A set, not a search of `planned`: each probe of that would chase two pointers.
        let declared: HashSet<&str> = planned
            .iter()
            .map(|chosen| chosen.job.name.as_str())
            .collect();
        self.kept_since.retain(|name, _| {
            let kept = !declared.contains(name.as_str());
            if !kept {
                info!(job = name, "a live replica declares this kept job again");
            }
            kept
        });
        let mut undeclared: Vec<Chosen> = self
            .planned
            .iter()
            .filter(|chosen| !declared.contains(chosen.job.name.as_str()))
            .cloned()
            .collect();
        let inherited: Vec<(&str, &str)> = inherited
            .into_iter()
            .flatten()
            .filter(|(name, _)| !declared.contains(name.as_str()))
            .map(|(name, hash)| (name.as_str(), hash.as_str()))
            .collect();
        drop(declared);
        for batch in inherited.chunks(READ_BATCH) {
            let names: Vec<&str> = batch.iter().map(|(name, _)| *name).collect();
            let published = store.published_definitions(&names).await?;
            for ((_, hash), published) in batch.iter().zip(published) {
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
        let grace_ms = i64::try_from(self.config.undeclared_grace.as_millis()).unwrap_or(i64::MAX);
        let grace = humantime::format_duration(self.config.undeclared_grace).to_string();
        let stopped_with = self.stopped_with(store, others, &undeclared).await?;
        let mut withdrawn_jobs = Vec::new();
        for chosen in undeclared {
            let name = chosen.job.name.clone();
            // A live replica declared it before (at the last read, before it departed, or when
            // it last stopped cleanly) and does not now (a job undeclared is declared by none).
            let departed = self
                .departed
                .iter()
                .map(|(replica, (before, _))| (replica, before));
            let withdrawn = (own_before.contains(name.as_str())
                && !own_now.contains(name.as_str()))
                || stopped_with.contains(&name)
                || self.others.iter().chain(departed).any(|(replica, before)| {
                    before.contains_key(&name)
                        && others
                            .get(replica)
                            .is_some_and(|now| !now.contains_key(&name))
                });
            if withdrawn {
                info!(
                    job = name,
                    "no replica declares this job any more: no longer planned, its fires \
                     waiting for a replica that declares it skipped"
                );
                self.kept_since.remove(&name);
                withdrawn_jobs.push(name);
                continue;
            }
            let since = *self.kept_since.entry(name.clone()).or_insert_with(|| {
                warn!(
                    job = name,
                    grace,
                    "no live replica declares this job: still planned for the undeclared grace, its \
                     runs waiting for a replica that declares it"
                );
                now_ms
            });
            if now_ms - since >= grace_ms {
                warn!(
                    job = name,
                    "no live replica has declared this job for the undeclared grace: no longer planned"
                );
                self.kept_since.remove(&name);
                continue;
            }
            planned.push(chosen);
        }
        planned.sort_unstable_by(|a, b| a.job.name.cmp(&b.job.name));
        if !withdrawn_jobs.is_empty() {
            // Their fires already put aside would otherwise wait out the grace to be skipped;
            // other runs (tasks, retries) still wait for it, a replica may declare the job again.
            let names: Vec<&str> = withdrawn_jobs.iter().map(String::as_str).collect();
            store
                .bury_undeclared_runs(self.config.undeclared_grace, self.config.live_for, &names)
                .await?;
        }
        Ok(())
    }

    /// The `undeclared` jobs that a live replica (this one included) declared when it last
    /// stopped cleanly: it came back without them.
    async fn stopped_with(
        &self,
        store: &Store,
        others: &HashMap<String, HashMap<String, String>>,
        undeclared: &[Chosen],
    ) -> Result<HashSet<String>, StoreError> {
        let names: Vec<&str> = undeclared
            .iter()
            .map(|chosen| chosen.job.name.as_str())
            .collect();
        let replicas: Vec<&str> = others
            .keys()
            .map(String::as_str)
            .chain([self.config.replica_id.as_str()])
            .collect();
        let declared = store.withdrawn_declarations(&replicas, &names).await?;
        Ok(declared
            .iter()
            .flat_map(|had| {
                names
                    .iter()
                    .zip(had)
                    .filter(|(_, had)| **had)
                    .map(|(name, _)| (*name).to_owned())
            })
            .collect())
    }

    /// Logs each job whose drift began, changed or ended, and sets the gauge.
    fn log_drift(&mut self, drift: BTreeMap<String, Drift>, metrics: &Metrics) {
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
        metrics
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
        let own: HashSet<Digest> = self.own_digests.iter().copied().collect();
        store
            .forget_declared_definitions(
                version,
                &self.config.replica_id,
                &own,
                now_ms,
                self.config.live_for * 2,
            )
            .await?;
        Ok(())
    }
}

/// The start of a content hash, as logs show it.
fn short(digest: &Digest) -> String {
    hex::encode(&digest[..6])
}
