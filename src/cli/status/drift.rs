//! The published jobs whose declarations drift between replicas, found without making their
//! documents: what the console's overview warns of over every job.

use super::published::{Declarers, Published};
use crate::store::Overview;

/// A published job that some replicas declare with another definition than the leader
/// published: what the console's overview warns of.
pub(crate) struct Drift {
    /// The job.
    pub(crate) job: String,
    /// The replicas that declare the definition the leader published.
    pub(crate) same: Vec<String>,
    /// The replicas that declare another definition of it.
    pub(crate) differs: Vec<String>,
}

/// The published jobs whose declarations drift between replicas, in the order `jobs` lists
/// them: from each job's declarers alone, the same sort `jobs` and its documents make, without
/// the fires and last runs a document holds, and parsing only the definitions of the jobs some
/// replica declares by another hash, so that a warning over every job costs no schedule, no
/// event and no definition of a job that does not drift.
pub(crate) fn drifting_jobs(overview: &Overview) -> Vec<Drift> {
    let mut suspects: Vec<(&String, &String)> = overview
        .definitions
        .iter()
        .filter(|(name, _)| declared_otherwise(overview, name))
        .collect();
    suspects.sort_unstable();
    suspects
        .into_iter()
        .filter_map(|(name, json)| {
            let job = Published::parse(name, json, overview.definition_hashes.get(name));
            let declarers = Declarers::of(overview, &job);
            (!declarers.differs.is_empty()).then(|| Drift {
                job: job.name.clone(),
                same: declarers.same,
                differs: declarers.differs,
            })
        })
        .collect()
}

/// Whether a replica with a record declares `job` by another hash than the one published: the
/// only way [`Declarers::of`] finds it differs, read from the hashes without parsing its
/// definition.
fn declared_otherwise(overview: &Overview, job: &str) -> bool {
    let published = overview.definition_hashes.get(job);
    overview
        .replicas
        .iter()
        .filter(|replica| !replica.info.is_empty())
        .filter_map(|replica| replica.jobs.as_ref()?.get(job))
        .any(|hash| Some(hash) != published)
}
