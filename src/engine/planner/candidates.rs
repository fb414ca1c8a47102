//! The definitions live replicas declare, as candidates for the one the leader plans of each
//! job (see `declared.rs`): one flat table sorted by job, the planned candidate first.

use std::collections::HashMap;
use std::sync::Arc;

use crate::schedule::Job;

/// A definition's SHA-256 content digest ([`Job::content_digest`]).
pub(super) type Digest = [u8; 32];

/// One definition of one job, and how many live replicas declare it.
pub(super) struct Candidate<'a> {
    pub(super) name: &'a str,
    pub(super) digest: Digest,
    pub(super) count: usize,
}

/// Every declared definition, one entry per job and digest, sorted by job, then the one to
/// plan first: most live replicas, then the smallest content hash. Flat, so that 100,000 jobs
/// that every replica declares alike cost one sort, not a collection per job.
pub(super) struct Candidates<'a> {
    pub(super) entries: Vec<Candidate<'a>>,
}

impl<'a> Candidates<'a> {
    /// A hash that is not one (foreign data) counts for nothing.
    pub(super) fn new(
        own: &'a [Arc<Job>],
        own_digests: &[Digest],
        others: &'a HashMap<String, HashMap<String, String>>,
    ) -> Self {
        let mut declared: Vec<(&str, Digest)> = own
            .iter()
            .zip(own_digests)
            .map(|(job, digest)| (job.name.as_str(), *digest))
            .collect();
        for jobs in others.values() {
            for (name, hash) in jobs {
                let mut digest = [0; 32];
                if hex::decode_to_slice(hash, &mut digest).is_ok() {
                    declared.push((name.as_str(), digest));
                }
            }
        }
        declared.sort_unstable();
        let mut entries: Vec<Candidate<'a>> = Vec::with_capacity(own.len());
        for (name, digest) in declared {
            match entries.last_mut() {
                Some(last) if last.name == name && last.digest == digest => last.count += 1,
                _ => entries.push(Candidate {
                    name,
                    digest,
                    count: 1,
                }),
            }
        }
        // Within each job (a run of equal names), most replicas first; the sort is stable, so
        // equal counts keep the smallest digest first.
        let mut start = 0;
        while start < entries.len() {
            let name = entries[start].name;
            let end = start + entries[start..].partition_point(|entry| entry.name == name);
            entries[start..end].sort_by_key(|entry| std::cmp::Reverse(entry.count));
            start = end;
        }
        Self { entries }
    }

    /// The candidates of each job in turn, in name order.
    pub(super) fn by_job(&self) -> impl Iterator<Item = &[Candidate<'a>]> {
        self.entries.chunk_by(|a, b| a.name == b.name)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

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
        let candidates = Candidates::new(&own, &own_digests, &others);
        let chosen: BTreeMap<&str, Vec<(Digest, usize)>> = candidates
            .by_job()
            .map(|group| {
                let declared = group.iter().map(|entry| (entry.digest, entry.count));
                (group[0].name, declared.collect())
            })
            .collect();
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
