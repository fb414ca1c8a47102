//! The published jobs whose declarations drift between replicas, found without making their
//! documents: what the console's overview warns of over every job.

use super::{Declarers, published};
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
/// the fires and last runs a document holds, so that a warning over every job costs no
/// schedule and no event.
pub(crate) fn drifting_jobs(overview: &Overview) -> Vec<Drift> {
    published(overview)
        .iter()
        .filter_map(|job| {
            let declarers = Declarers::of(overview, job);
            (!declarers.differs.is_empty()).then(|| Drift {
                job: job.name.clone(),
                same: declarers.same,
                differs: declarers.differs,
            })
        })
        .collect()
}
