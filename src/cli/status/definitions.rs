//! The published definitions parsed once per content hash: what a console that shows every job
//! on each refresh keeps, since a definition never changes under its hash, so that a refresh
//! parses only the definitions deployed since the last one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::published::Summary;
use crate::cli::times::format_fire;
use crate::schedule::Schedule;
use crate::store::{Overview, published_hash};

/// The most definitions a cache holds, whatever the namespace declares: past it, the cache
/// starts again empty rather than grow with a namespace that changes every definition between
/// two reads.
const MAX_ENTRIES: usize = 100_000;

/// What `status` says while `def-hashes` is of another type than a hash.
pub(super) const HASHES_DAMAGED: &str = "DEFINITION HASHES DAMAGED: the published definitions' \
     hashes (def-hashes) are of another type than a hash (damaged, or written by hand): each \
     definition's hash is taken from the definition itself until the leader replaces them, at \
     its next check of the published definitions";

/// A published definition as read from its JSON, once: what `status` and `jobs` show of it.
pub(super) struct Parsed {
    /// The JSON as published, which an overview takes from here rather than read it again.
    pub(super) json: String,
    /// What `status` and `jobs` show of it; `None` when the JSON is not a definition (damaged:
    /// the leader writes it again), which is said rather than shown with made-up values.
    pub(super) summary: Option<Summary>,
    /// The queue it names, as an overview counts it ([`Overview::queue_named`]).
    queue: Option<String>,
    /// Its schedule; `None` on demand, damaged, or not a schedule this version reads.
    pub(super) schedule: Option<Schedule>,
    /// Its next fire found last, kept while no fire falls between then and now: a fire found
    /// from an instant is the next one from every instant before it.
    next_fire: Mutex<Option<NextFire>>,
}

/// A next fire found, and from when it holds. Kept without its text, written again at each
/// read: a string kept per job from within a request that makes a document of every job
/// scatters itself over the memory that request frees, which made later requests slower.
#[derive(Clone, Copy)]
struct NextFire {
    /// The instant it was found from, ms.
    from_ms: i64,
    /// The fire.
    at: DateTime<Utc>,
    /// The job's zone.
    zone: Tz,
}

impl Parsed {
    /// Parses `json`, a published definition.
    pub(super) fn new(json: &str) -> Self {
        let summary: Option<Summary> = serde_json::from_str(json).ok();
        let schedule = summary
            .as_ref()
            .and_then(|summary| Schedule::parse(summary.schedule.as_deref()?).ok());
        Self {
            json: json.to_owned(),
            summary,
            queue: Overview::queue_named(json),
            schedule,
            next_fire: Mutex::new(None),
        }
    }

    /// The next fire after `now_ms`, RFC 3339 in the job's zone; `None` for a job disabled, on
    /// demand or damaged. Found once per fire, not once per read.
    pub(super) fn next_fire(&self, now_ms: i64) -> Option<String> {
        let mut kept = self
            .next_fire
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(next) = kept
            .as_ref()
            .filter(|next| next.from_ms <= now_ms && now_ms < next.at.timestamp_millis())
        {
            return Some(format_fire(next.at, next.zone));
        }
        let summary = self.summary.as_ref().filter(|summary| summary.enabled)?;
        let zone = summary.timezone.parse::<Tz>().ok()?;
        let now = DateTime::from_timestamp_millis(now_ms)?;
        let at = self.schedule.as_ref()?.fires_after(now, zone).next()?;
        *kept = Some(NextFire {
            from_ms: now_ms,
            at,
            zone,
        });
        Some(format_fire(at, zone))
    }
}

/// The definitions parsed so far, by content hash, bounded: the console's, shared by every
/// request. A definition is kept only under the hash it has (the SHA-256 of its JSON), so what
/// it holds for a hash is what the leader publishes by that hash; a definition edited in Redis
/// without its hash (by hand, or damaged) is shown as published by its hash until the leader
/// writes it back (see docs/web.md). A hash no job is published by any more is dropped once
/// the cache holds more than twice the published jobs.
#[derive(Default)]
pub(crate) struct Definitions {
    /// Content hash -> the definition parsed.
    parsed: Mutex<HashMap<String, Arc<Parsed>>>,
}

impl Definitions {
    /// What an overview takes instead of reading the definition published by `hash`: its JSON
    /// and its queue, when it was parsed before.
    pub(crate) fn known(&self, hash: &str) -> Option<(String, Option<String>)> {
        let parsed = self.lock().get(hash).cloned()?;
        Some((parsed.json.clone(), parsed.queue.clone()))
    }

    /// The definition `json` published by `hash`, parsed once for that hash; parsed and not
    /// kept without a hash (its entry being repaired), which names nothing to keep it by.
    pub(super) fn parsed(&self, hash: Option<&str>, json: &str) -> Arc<Parsed> {
        hash.and_then(|hash| self.lock().get(hash).cloned())
            .unwrap_or_else(|| Arc::new(Parsed::new(json)))
    }

    /// Parses and keeps the definitions of `overview` it does not hold yet, then drops the
    /// hashes `overview` publishes no job by once it holds more than twice as many definitions
    /// as `overview` publishes: a deploy's old definitions go within a read or two, and the
    /// cache never holds much more than the namespace, nor more than [`MAX_ENTRIES`].
    pub(super) fn learn(&self, overview: &Overview) {
        let published = || {
            overview.definitions.iter().filter_map(|(job, json)| {
                Some((overview.definition_hashes.get(job)?.as_str(), json))
            })
        };
        let new: Vec<(&str, &String)> = {
            let kept = self.lock();
            published()
                .filter(|(hash, _)| !kept.contains_key(*hash))
                .collect()
        };
        // A definition read under a hash that is not its own (either edited by hand) is shown
        // as read and kept by none: kept, it would stand for whatever is published by that
        // hash later, long after the leader wrote both back.
        let new: Vec<(&str, &String)> = new
            .into_iter()
            .filter(|(hash, json)| published_hash(json) == *hash)
            .collect();
        // Parsed without the lock, so that other requests' lookups do not wait on a deploy's
        // worth of parsing; two requests that parse the same new hash keep the same thing.
        let new: Vec<(&str, Arc<Parsed>)> = new
            .into_iter()
            .map(|(hash, json)| (hash, Arc::new(Parsed::new(json))))
            .collect();
        let mut kept = self.lock();
        if kept.len() + new.len() > MAX_ENTRIES {
            kept.clear();
        }
        for (hash, parsed) in new {
            kept.entry(hash.to_owned()).or_insert(parsed);
        }
        if kept.len() > 2 * overview.definitions.len() {
            let hashes: HashSet<&str> = published().map(|(hash, _)| hash).collect();
            kept.retain(|hash, _| hashes.contains(hash.as_str()));
        }
    }

    /// How many definitions it holds.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Parsed>>> {
        // A panic while it was held left a map, perhaps without an entry: still one to read.
        self.parsed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
