//! Names that are not UTF-8 in the namespace's indexes (a field of `defs`, a member of
//! `replicas`): every job, replica and queue name redcron writes is UTF-8, so such a name
//! (written by something else, or damaged) names nothing. Its readers set it aside and report
//! it instead of failing on it, and the reapers remove it.

use std::collections::HashMap;
use std::fmt;

use super::damage::Entry;
use super::{During, Store, StoreError};

/// An index of the namespace whose names (hash fields, set or sorted set members) are job,
/// replica or queue names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameIndex {
    /// `defs`: job -> published definition.
    Definitions,
    /// `def-hashes`: job -> content hash of its published definition.
    DefinitionHashes,
    /// `replicas`: replica -> last heartbeat.
    Replicas,
    /// `stopped-replicas`: replica -> when it stopped cleanly.
    StoppedReplicas,
    /// `paused`: the paused jobs.
    Paused,
    /// `undeclared-jobs`: jobs whose runs were put aside by replicas that do not declare them.
    UndeclaredJobs,
    /// `cursor`: job -> the fire ms of its last fire planned.
    Cursors,
    /// `damaged-defs`: jobs whose published definition a promoter could not read.
    DamagedDefinitions,
    /// `ready-queues`: the queues with ready runs.
    ReadyQueues,
}

impl NameIndex {
    /// Every index, in the order [`Store::damaged_names`] reads them.
    const ALL: [Self; 9] = [
        Self::Definitions,
        Self::DefinitionHashes,
        Self::Replicas,
        Self::StoppedReplicas,
        Self::Paused,
        Self::UndeclaredJobs,
        Self::Cursors,
        Self::DamagedDefinitions,
        Self::ReadyQueues,
    ];

    /// The Redis type of the index: what reads and removes its names.
    fn kind(self) -> IndexKind {
        match self {
            Self::Definitions | Self::DefinitionHashes | Self::Cursors => IndexKind::Hash,
            Self::Paused | Self::DamagedDefinitions | Self::ReadyQueues => IndexKind::Set,
            Self::Replicas | Self::StoppedReplicas | Self::UndeclaredJobs => IndexKind::SortedSet,
        }
    }

    /// The index's key name after the namespace's prefix, as DESIGN's layout names it.
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Definitions => "defs",
            Self::DefinitionHashes => "def-hashes",
            Self::Replicas => "replicas",
            Self::StoppedReplicas => "stopped-replicas",
            Self::Paused => "paused",
            Self::UndeclaredJobs => "undeclared-jobs",
            Self::Cursors => "cursor",
            Self::DamagedDefinitions => "damaged-defs",
            Self::ReadyQueues => "ready-queues",
        }
    }
}

/// The Redis types of the indexes of names.
#[derive(Clone, Copy)]
enum IndexKind {
    Hash,
    Set,
    SortedSet,
}

/// A name that is not UTF-8, and the index that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedName {
    /// Where it is.
    pub index: NameIndex,
    /// The name as Redis holds it (always [`Entry::Unreadable`]).
    pub name: Entry,
}

/// `defs: bin\xffary`: the index, and the name escaped as listings print it (see [`Entry`]).
impl fmt::Display for DamagedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.index.suffix(), self.name)
    }
}

/// The names of `entries` read from `index` with what each came with, those that are UTF-8
/// kept, the others added to `damaged`: what every reader of an index of names does, so that
/// one name written by something else fails none of them.
pub(super) fn readable<T>(
    index: NameIndex,
    entries: Vec<(Entry, T)>,
    damaged: &mut Vec<DamagedName>,
) -> Vec<(String, T)> {
    entries
        .into_iter()
        .filter_map(|(name, with)| match name {
            Entry::Run(name) => Some((name, with)),
            Entry::Unreadable(_) => {
                damaged.push(DamagedName { index, name });
                None
            }
        })
        .collect()
}

/// [`readable`] for names alone (the fields of `HKEYS`, the members of `SMEMBERS`).
pub(super) fn readable_names(
    index: NameIndex,
    names: Vec<Entry>,
    damaged: &mut Vec<DamagedName>,
) -> Vec<String> {
    let names = names.into_iter().map(|name| (name, ())).collect();
    readable(index, names, damaged)
        .into_iter()
        .map(|(name, ())| name)
        .collect()
}

/// [`readable`] for a hash read whole (`HGETALL`), field -> value, a value that is not UTF-8
/// escaped as listings print it (which no reader takes for a definition or a content hash).
pub(super) fn readable_hash(
    index: NameIndex,
    pairs: Vec<(Entry, Entry)>,
    damaged: &mut Vec<DamagedName>,
) -> HashMap<String, String> {
    readable(index, pairs, damaged)
        .into_iter()
        .map(|(name, value)| (name, value.to_string()))
        .collect()
}

impl Store {
    /// Every name that is not UTF-8 in the indexes of names, by index: one round trip, a
    /// `def-hashes` of another type (damaged otherwise, see `definition_hashes`) read as empty.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn damaged_names(&self) -> Result<Vec<DamagedName>, StoreError> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for index in NameIndex::ALL {
            let key = self.name_index(index);
            match index.kind() {
                IndexKind::Hash => pipe.hkeys(key),
                IndexKind::Set => pipe.smembers(key),
                IndexKind::SortedSet => pipe.zrange(key, 0, -1),
            };
        }
        let read: Vec<redis::Value> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "damaged_names")?;
        let mut damaged = Vec::new();
        for (index, value) in NameIndex::ALL.into_iter().zip(read) {
            // A key of another type answers an error in its place, which names nothing.
            let names: Vec<Entry> =
                redis::FromRedisValue::from_redis_value(value).unwrap_or_default();
            readable_names(index, names, &mut damaged);
        }
        Ok(damaged)
    }

    /// Removes each of `names` from its index, in one round trip; a name written again would
    /// be found and removed again.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn remove_damaged_names(&self, names: &[DamagedName]) -> Result<(), StoreError> {
        if names.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        // Each removal stands alone: an index of another type refuses its own, no other.
        pipe.ignore_errors();
        for damaged in names {
            let (key, name) = (self.name_index(damaged.index), damaged.name.as_bytes());
            match damaged.index.kind() {
                IndexKind::Hash => pipe.hdel(key, name),
                IndexKind::Set => pipe.srem(key, name),
                IndexKind::SortedSet => pipe.zrem(key, name),
            };
        }
        let _: Vec<redis::Value> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "remove_damaged_names")?;
        Ok(())
    }

    /// The key of `index` in this namespace.
    fn name_index(&self, index: NameIndex) -> String {
        match index {
            NameIndex::Definitions => self.keys.defs(),
            NameIndex::DefinitionHashes => self.keys.def_hashes(),
            NameIndex::Replicas => self.keys.replicas(),
            NameIndex::StoppedReplicas => self.keys.stopped_replicas(),
            NameIndex::Paused => self.keys.paused(),
            NameIndex::UndeclaredJobs => self.keys.undeclared_jobs(),
            NameIndex::Cursors => self.keys.cursor(),
            NameIndex::DamagedDefinitions => self.keys.damaged_definitions(),
            NameIndex::ReadyQueues => self.keys.ready_queues(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_utf8_are_set_aside_and_named_escaped_after_their_index() {
        let mut damaged = Vec::new();
        let names = readable_names(
            NameIndex::Replicas,
            vec![
                Entry::from(b"r1".to_vec()),
                Entry::from(b"bad\xffkey".to_vec()),
            ],
            &mut damaged,
        );
        assert_eq!(names, ["r1"]);
        let hash = readable_hash(
            NameIndex::Definitions,
            vec![
                (
                    Entry::from(b"job".to_vec()),
                    Entry::from(b"{\xff}".to_vec()),
                ),
                (
                    Entry::from(b"bin\xffary".to_vec()),
                    Entry::from(b"{}".to_vec()),
                ),
            ],
            &mut damaged,
        );
        assert_eq!(
            hash,
            HashMap::from([("job".to_owned(), "{\\xff}".to_owned())])
        );
        let named: Vec<String> = damaged.iter().map(ToString::to_string).collect();
        assert_eq!(named, ["replicas: bad\\xffkey", "defs: bin\\xffary"]);
    }
}
