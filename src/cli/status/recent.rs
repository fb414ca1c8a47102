//! The newest events grouped by the job they name, once per read: what a job shows (its last
//! outcome, its strip and durations, its last run on each replica, who acted on it) walks that
//! job's events alone, so that a page of every job costs the events once, not once per job.

use std::collections::HashMap;

use crate::store::{Event, RunState};

/// The newest events of the stream, newest first, with the events of each job found in one pass.
pub(crate) struct RecentEvents {
    /// Every event read, newest first: what a count over every job (the overview's) walks.
    events: Vec<Event>,
    /// Job -> the positions in `events` of the events naming it, newest first.
    by_job: HashMap<String, Vec<usize>>,
}

impl RecentEvents {
    /// Groups `events`, newest first as the stream gives them, by the job each names.
    pub(crate) fn new(events: Vec<Event>) -> Self {
        let mut by_job: HashMap<String, Vec<usize>> = HashMap::new();
        for (index, event) in events.iter().enumerate() {
            if let Some(job) = event.fields.get("job") {
                by_job.entry(job.clone()).or_default().push(index);
            }
        }
        Self { events, by_job }
    }

    /// Every event, newest first.
    pub(crate) fn all(&self) -> &[Event] {
        &self.events
    }

    /// The events naming `job`, newest first: its runs' outcomes and the actions on it.
    pub(crate) fn of<'a>(&'a self, job: &str) -> impl Iterator<Item = &'a Event> + 'a {
        self.by_job
            .get(job)
            .into_iter()
            .flatten()
            .filter_map(|index| self.events.get(*index))
    }

    /// The latest outcome of `job`'s runs (an end, or a retry): its state and when, ms.
    pub(crate) fn last_outcome(&self, job: &str) -> Option<(&'static str, i64)> {
        self.of(job).find_map(|event| {
            let state = event
                .fields
                .get("state")
                .and_then(|state| RunState::parse(state))
                .filter(|state| state.is_finished() || *state == RunState::Retrying)?;
            Some((state.as_str(), event.at_ms))
        })
    }
}
