//! A published job as `status` and `jobs` read it (its definition parsed once per hash, what it
//! shows of it, where it runs) and how the replicas declare it: the same definition, another
//! (drift), or none.

use std::sync::Arc;

use chrono::DateTime;
use serde::Deserialize;

use super::definitions::{Definitions, Parsed};
use super::replicas::{labels, served_queues};
use crate::cli::times::format_fire;
use crate::schedule::workflow::Workflow;
use crate::schedule::{Label, Labels, Reach, Schedule, Selector, placement};
use crate::store::{Overview, ReplicaInfo};

/// A published job definition, as `status` and `jobs` need it.
pub(super) struct Published {
    pub(super) name: String,
    /// Its content hash in `def-hashes`; `None` while that entry is missing (being repaired).
    pub(super) hash: Option<String>,
    /// Its definition parsed: once per hash for a reader that keeps [`Definitions`].
    pub(super) parsed: Arc<Parsed>,
}

/// The fields of a published definition (its canonical JSON, every default filled in) that
/// `status` and `jobs` show.
#[derive(Deserialize)]
pub(super) struct Summary {
    pub(super) schedule: Option<String>,
    pub(super) timezone: String,
    pub(super) enabled: bool,
    /// For the job of a `[workflows.<name>]` table: the workflow its runs start.
    #[serde(default)]
    pub(super) workflow: Option<Workflow>,
    /// What its runs execute under `/bin/sh -c`.
    #[serde(default)]
    pub(super) command: Option<String>,
    /// The labels a replica must carry to declare it; absent for every replica.
    #[serde(default, rename = "where")]
    pub(super) selector: Vec<String>,
    /// `every` for a job each of whose fires runs on every replica that declares it.
    #[serde(default)]
    pub(super) on: Option<String>,
}

impl Published {
    pub(super) fn parse(name: &str, json: &str, hash: Option<&String>) -> Self {
        Self::of(name, json, hash, None)
    }

    /// As [`Published::parse`], taken from `definitions` when it holds that hash.
    pub(super) fn of(
        name: &str,
        json: &str,
        hash: Option<&String>,
        definitions: Option<&Definitions>,
    ) -> Self {
        let parsed = match definitions {
            Some(definitions) => definitions.parsed(hash.map(String::as_str), json),
            None => Arc::new(Parsed::new(json)),
        };
        Self {
            name: name.to_owned(),
            hash: hash.cloned(),
            parsed,
        }
    }

    /// What `status` and `jobs` show of it; `None` when the entry is not a definition (damaged:
    /// the leader writes it again), which is said rather than shown with made-up values.
    pub(super) fn summary(&self) -> Option<&Summary> {
        self.parsed.summary.as_ref()
    }

    pub(super) fn schedule(&self) -> Option<&str> {
        self.summary()?.schedule.as_deref()
    }

    /// What its runs execute; `None` for a workflow's job, which runs steps.
    pub(super) fn command(&self) -> Option<&str> {
        self.summary()?
            .command
            .as_deref()
            .filter(|command| !command.is_empty())
    }

    pub(super) fn timezone(&self) -> Option<&str> {
        self.summary().map(|summary| summary.timezone.as_str())
    }

    pub(super) fn enabled(&self) -> Option<bool> {
        self.summary().map(|summary| summary.enabled)
    }

    /// The steps of the workflow its runs start, as `check` shows them; `None` for a job.
    pub(super) fn workflow(&self) -> Option<String> {
        let workflow = self.summary()?.workflow.as_ref()?;
        Some(workflow.describe())
    }

    /// Its `where` terms (empty for every replica).
    pub(super) fn selector(&self) -> &[String] {
        self.summary()
            .map_or(&[], |summary| summary.selector.as_slice())
    }

    /// Whether each fire runs on every replica that declares it (`on = "every"`).
    pub(super) fn on_every(&self) -> bool {
        self.summary()
            .is_some_and(|summary| summary.on.as_deref() == Some("every"))
    }

    /// Whether `replica`'s published labels (and queues) match the job's `where`.
    pub(super) fn matches(&self, replica: &ReplicaInfo) -> bool {
        let given: Vec<Label> = labels(replica)
            .into_iter()
            .filter_map(|label| Label::parse(label).ok())
            .collect();
        let queues: Vec<String> = served_queues(replica)
            .into_iter()
            .map(str::to_owned)
            .collect();
        // Its host and id are among the labels it published: none to add.
        let carried = Labels::of_replica(&given, "", "", &queues);
        Selector::parse(self.selector()).is_ok_and(|selector| selector.matches(&carried))
    }

    /// Where it runs, as `jobs` says it under the table: `None` for a job that runs once per
    /// fire on any replica.
    pub(super) fn placement(&self) -> Option<String> {
        let on = if self.on_every() {
            Reach::Every
        } else {
            Reach::One
        };
        // The terms were checked when their file was loaded: a definition damaged there shows
        // as for every replica rather than failing the whole listing.
        let selector = Selector::parse(self.selector()).unwrap_or_default();
        placement(on, &selector)
    }

    /// Its name, marked when it starts a workflow.
    pub(super) fn label(&self) -> String {
        if self.workflow().is_some() {
            format!("{} (workflow)", self.name)
        } else {
            self.name.clone()
        }
    }

    /// Its schedule parsed; `None` on demand, damaged, or not a schedule this version reads.
    pub(super) fn parsed_schedule(&self) -> Option<&Schedule> {
        self.parsed.schedule.as_ref()
    }

    /// The next `count` fires after `now_ms`, RFC 3339 in the job's zone.
    pub(super) fn next_fires(&self, now_ms: i64, count: usize) -> Vec<String> {
        self.fires_of(self.parsed_schedule(), now_ms, count)
    }

    /// As [`Published::next_fires`], of `schedule` parsed once by a caller that shows it too.
    pub(super) fn fires_of(
        &self,
        schedule: Option<&Schedule>,
        now_ms: i64,
        count: usize,
    ) -> Vec<String> {
        let Some(summary) = self.summary().filter(|summary| summary.enabled) else {
            return Vec::new();
        };
        let (Some(schedule), Ok(zone), Some(now)) = (
            schedule,
            summary.timezone.parse::<chrono_tz::Tz>(),
            DateTime::from_timestamp_millis(now_ms),
        ) else {
            return Vec::new();
        };
        schedule
            .fires_after(now, zone)
            .take(count)
            .map(|fire| format_fire(fire, zone))
            .collect()
    }
}

/// The published jobs of `overview`, in the order `jobs` lists them, each definition taken from
/// `definitions` when it holds it.
pub(super) fn published(overview: &Overview, definitions: Option<&Definitions>) -> Vec<Published> {
    let mut jobs: Vec<Published> = overview
        .definitions
        .iter()
        .map(|(name, json)| {
            Published::of(
                name,
                json,
                overview.definition_hashes.get(name),
                definitions,
            )
        })
        .collect();
    jobs.sort_by(|a, b| a.name.cmp(&b.name));
    jobs
}

/// How the replicas declare one published job, each list sorted by replica id.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Declarers {
    /// Replicas that declare the definition the leader published.
    pub(super) same: Vec<String>,
    /// Replicas that declare the job with another definition (content hash): drift.
    pub(super) differs: Vec<String>,
    /// Replicas that do not declare the job at all: not drift, but the usual state of a rolling
    /// deploy that adds or removes it. They never run it.
    pub(super) undeclared: Vec<String>,
    /// Those of `undeclared` whose labels the job's `where` does not match: as meant, so not
    /// worth a warning.
    pub(super) excluded: Vec<String>,
}

impl Declarers {
    /// Sorts the replicas of `overview` by how they declare `job`. A replica whose record
    /// expired is gone, and one whose declarations are not in Redis says nothing either way:
    /// both are left out.
    pub(super) fn of(overview: &Overview, job: &Published) -> Self {
        let mut declarers = Self::default();
        for replica in overview
            .replicas
            .iter()
            .filter(|replica| !replica.info.is_empty())
        {
            let Some(jobs) = &replica.jobs else {
                continue;
            };
            let list = match jobs.get(&job.name) {
                None if !job.selector().is_empty() && !job.matches(replica) => {
                    declarers.undeclared.push(replica.id.clone());
                    &mut declarers.excluded
                }
                None => &mut declarers.undeclared,
                Some(hash) if Some(hash) == job.hash.as_ref() => &mut declarers.same,
                Some(_) => &mut declarers.differs,
            };
            list.push(replica.id.clone());
        }
        for list in [
            &mut declarers.same,
            &mut declarers.differs,
            &mut declarers.undeclared,
            &mut declarers.excluded,
        ] {
            list.sort();
        }
        declarers
    }
}
