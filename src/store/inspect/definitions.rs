//! Which published definitions an overview reads, and what it makes of them: every one, one
//! job's, or the names and hashes of every one and only the definitions the reader does not
//! hold already.

use std::collections::HashMap;

use redis::Value;

use super::Overview;
use crate::store::During;
use crate::store::damaged_names::{DamagedName, NameIndex, readable_hash, readable_names};
use crate::store::definition_hashes::{hashes_of, published_hash};
use crate::store::reply::{Reply, decode};
use crate::store::{Store, StoreError};

/// What a reader of [`Store::overview_knowing`] holds of the definition published by a content
/// hash: its JSON and the queue it names, or `None` when it holds nothing of that hash.
pub(super) type KnownDefinitions<'a> = dyn Fn(&str) -> Option<(String, Option<String>)> + Sync + 'a;

/// The published definitions as an overview reads them: job -> JSON, job -> content hash, and
/// the queues they name, one per job that names one.
pub(super) type Definitions = (
    HashMap<String, String>,
    HashMap<String, String>,
    Vec<String>,
);

/// Which published definitions an overview reads.
#[derive(Clone, Copy)]
pub(super) enum DefinitionsRead<'a> {
    /// Every one (`HGETALL`).
    All,
    /// One job's alone (`HGET`).
    One(&'a str),
    /// Every one's name and hash, the definitions themselves only when the reader does not
    /// hold them (see [`Store::overview_knowing`]).
    Known(&'a KnownDefinitions<'a>),
}

impl DefinitionsRead<'_> {
    /// The first read of `defs`: whole, one job's field, or only its names.
    pub(super) fn definitions(self, key: String) -> redis::Cmd {
        let mut read = match self {
            Self::All => redis::cmd("HGETALL"),
            Self::One(job) => {
                let mut read = redis::cmd("HGET");
                read.arg(&key).arg(job);
                return read;
            }
            Self::Known(_) => redis::cmd("HKEYS"),
        };
        read.arg(key);
        read
    }

    /// The read of `def-hashes`: whole, or one job's field.
    pub(super) fn hashes(self, key: String) -> redis::Cmd {
        let mut read = redis::cmd(if matches!(self, Self::One(_)) {
            "HGET"
        } else {
            "HGETALL"
        });
        read.arg(key);
        if let Self::One(job) = self {
            read.arg(job);
        }
        read
    }
}

impl Store {
    /// What the overview's first read of `defs` and `def-hashes` answered (`definitions`,
    /// `hashes`), made into the definitions `read` asks for: job -> JSON, job -> hash and the
    /// queues they name, reading those a reader does not hold. `hashes` is `None` while
    /// `def-hashes` is of another type: each hash is then taken from its definition. A name
    /// that is not UTF-8 is left out and added to `damaged`.
    pub(super) async fn definitions_read(
        &self,
        read: DefinitionsRead<'_>,
        definitions: Value,
        hashes: Option<Value>,
        damaged: &mut Vec<DamagedName>,
    ) -> Result<Definitions, StoreError> {
        Ok(match read {
            DefinitionsRead::All => {
                let defs = readable_hash(
                    NameIndex::Definitions,
                    decode("overview", definitions)?,
                    damaged,
                );
                let named = queues_of(&defs);
                let hashes = match hashes {
                    Some(hashes) => readable_hash(
                        NameIndex::DefinitionHashes,
                        decode("overview", hashes)?,
                        damaged,
                    ),
                    None => hashes_of(&defs),
                };
                (defs, hashes, named)
            }
            DefinitionsRead::One(job) => {
                let one = |value| {
                    Ok::<_, StoreError>(
                        decode::<Option<String>>("overview", value)?
                            .map(|found| HashMap::from([(job.to_owned(), found)]))
                            .unwrap_or_default(),
                    )
                };
                let defs = one(definitions)?;
                let named = queues_of(&defs);
                let hashes = match hashes {
                    Some(hashes) => one(hashes)?,
                    None => hashes_of(&defs),
                };
                (defs, hashes, named)
            }
            DefinitionsRead::Known(known) => {
                let hashes_damaged = hashes.is_none();
                let hashes = match hashes {
                    Some(value) => readable_hash(
                        NameIndex::DefinitionHashes,
                        decode("overview", value)?,
                        damaged,
                    ),
                    None => HashMap::new(),
                };
                let names = readable_names(
                    NameIndex::Definitions,
                    decode("overview", definitions)?,
                    damaged,
                );
                self.definitions_knowing(names, hashes, known, hashes_damaged)
                    .await?
            }
        })
    }

    /// The definitions of the jobs `names` (every published one) and their hashes, as
    /// [`Store::overview`] reads them, and the queues they name: those `known` holds by the hash
    /// in `hashes` taken from it, the others read, with their hashes, in one transaction (with
    /// `damaged`, while `def-hashes` is of another type, every one read and its hash taken
    /// from it).
    async fn definitions_knowing(
        &self,
        names: Vec<String>,
        mut hashes: HashMap<String, String>,
        known: &KnownDefinitions<'_>,
        damaged: bool,
    ) -> Result<Definitions, StoreError> {
        let mut defs = HashMap::with_capacity(names.len());
        let mut named = Vec::new();
        let mut unknown = Vec::new();
        for name in names {
            match hashes.get(&name).and_then(|hash| known(hash)) {
                Some((json, queue)) => {
                    named.extend(queue);
                    defs.insert(name, json);
                }
                None => unknown.push(name),
            }
        }
        if unknown.is_empty() {
            return Ok((defs, hashes, named));
        }
        // Each definition with its hash as of one instant: one taken with a hash read before
        // the leader published it again would be kept by the reader under the wrong hash.
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HMGET")
            .arg(self.keys.defs())
            .arg(&unknown);
        if !damaged {
            pipe.cmd("HMGET").arg(self.keys.def_hashes()).arg(&unknown);
        }
        let reply: Vec<Value> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "overview")?;
        let mut reply = Reply::new("overview", reply);
        let read: Vec<Option<String>> = reply.next()?;
        let read_hashes: Option<Vec<Option<String>>> =
            if damaged { None } else { Some(reply.next()?) };
        reply.finish()?;
        for (index, (name, json)) in unknown.into_iter().zip(read).enumerate() {
            let hash = match &read_hashes {
                Some(read_hashes) => read_hashes.get(index).cloned().flatten(),
                None => json.as_deref().map(published_hash),
            };
            match hash {
                Some(hash) => hashes.insert(name.clone(), hash),
                None => hashes.remove(&name),
            };
            // Removed since its name was read: no longer published.
            let Some(json) = json else {
                continue;
            };
            named.extend(Overview::queue_named(&json));
            defs.insert(name, json);
        }
        Ok((defs, hashes, named))
    }
}

/// The one field of a published definition that [`Overview::queue_named`] reads: the rest is
/// skipped rather than built into a tree, since an overview reads every job's definition for it.
#[derive(serde::Deserialize)]
struct QueueField {
    queue: Option<String>,
}

impl Overview {
    /// The queue the published definition `definition` (its JSON) names, as an overview counts
    /// the queues' ready runs: `None` for the default queue, or JSON that names none.
    pub fn queue_named(definition: &str) -> Option<String> {
        serde_json::from_str::<QueueField>(definition).ok()?.queue
    }
}

/// The queues the published definitions `defs` (job -> JSON) name, one per job.
pub(in crate::store) fn queues_of(defs: &HashMap<String, String>) -> Vec<String> {
    defs.values()
        .filter_map(|definition| Overview::queue_named(definition))
        .collect()
}

/// Whether a published definition is an every-replica job's (`"on": "every"`).
pub(in crate::store) fn runs_on_every_replica(definition: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(definition)
        .is_ok_and(|value| value.get("on").and_then(|on| on.as_str()) == Some("every"))
}
