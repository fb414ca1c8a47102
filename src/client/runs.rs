//! The runs going on, waiting, due and ended, listed a page at a time: each page starts where
//! the page before ended (a keyset), so a page costs about the same with a hundred runs or a
//! million, and a run listed once is not listed again in the same state however the runs move
//! between pages.

use std::collections::HashMap;

use super::cursor::{Mark, RunsCursor, Section, Window};
use super::reads::{UNREADABLE, damaged};
use super::{Client, ClientError};
use crate::store::{Entry, RunState};

/// How many entries one page reads at most while it filters by job or replica, which no index
/// serves: a page that reads this many without filling up ends early, with a cursor to go on.
pub const RUNS_SCANNED: usize = 10_000;

/// How many entries a filtered page reads at once: enough that a sparse filter takes few round
/// trips, few enough that a page that fills up early reads little more than it shows.
const FILTERED_CHUNK: usize = 256;

/// Which runs [`Client::runs_page`] lists: those holding a lease, those ready, those due, or any of
/// them, and from where.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunsQuery {
    /// Runs holding a lease (running, or claimed to start within moments).
    pub active: bool,
    /// Runs ready or waiting: for a worker, a slot of their job, or a replica that serves
    /// their queue or declares their job.
    pub ready: bool,
    /// Runs waiting for their due time (planned fires, delayed runs, retries).
    pub due: bool,
    /// Runs that ended in one of these outcomes (`succeeded`, `retrying`, `dead`, `skipped`),
    /// newest first, from the events stream (as far back as it reaches): one entry per
    /// outcome, so that a run retried and then successful is listed for each. None when empty.
    pub outcomes: Vec<RunState>,
    /// Only the runs of this instant or later, ms: by when a run started (leased), became
    /// ready (ready), is due (due) or ended (ended). Kept by the cursors of the pages it gives.
    pub since_ms: Option<i64>,
    /// Only the runs of this instant or earlier, ms, by the same instants as `since_ms`.
    pub until_ms: Option<i64>,
    /// Only this job's.
    pub job: Option<String>,
    /// Only those whose attempt this replica owns or owned (its worker's), or, for every-replica
    /// jobs, that wait for it, when given.
    pub replica: Option<String>,
    /// How many at most.
    pub count: usize,
    /// Where the page starts: after the run this cursor was given with (a [`ListedRun`]'s, or
    /// [`RunsPage::next`]), whether or not that run is still where it was; from the start when
    /// `None`. The cursor keeps the time window of the page that gave it, which then stands
    /// for `since_ms` and `until_ms`, so that a window given as "the last hour" does not slide
    /// between pages.
    pub after: Option<RunsCursor>,
    /// Only the run with this exact id, in any state while its record is kept (or a planned
    /// fire not yet due): one direct read, whatever the other fields say but `job`.
    pub run_id: Option<String>,
}

/// A run listed by [`Client::runs_page`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRun {
    /// Its id.
    pub run_id: String,
    /// Its record; for a planned fire not yet promoted (which has none), what its id and due
    /// time tell: `kind`, `state`, `due_ms`, `job`, `fire_ms`.
    pub fields: HashMap<String, String>,
    /// Where the listing stands after it: pass it as [`RunsQuery::after`] for the runs that
    /// follow. `None` for a run read by its id, which has no place in a listing.
    pub cursor: Option<RunsCursor>,
}

/// One page of runs, with where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsPage {
    /// At most [`RunsQuery::count`] runs.
    pub runs: Vec<ListedRun>,
    /// Where the next page starts; `None` when no run follows.
    pub next: Option<RunsCursor>,
    /// Whether the page ended early because it read [`RUNS_SCANNED`] entries while filtering:
    /// more may match after `next`.
    pub scan_limited: bool,
    /// Redis's clock when it was read, ms.
    pub now_ms: i64,
}

impl Client {
    /// Runs holding a lease (by id), then runs ready or waiting (in the order they are
    /// claimed), then runs due (soonest first), as `query` says: one page of them, from
    /// [`RunsQuery::after`], and where the next starts. Each state's runs are read from where
    /// the page before ended by what orders them (see [`RunsCursor`]), so a page reads about
    /// `count` entries of each state it shows, however many there are; with a job or replica
    /// to filter by, it reads at most [`RUNS_SCANNED`] entries, and says so.
    ///
    /// A run that moves on between pages (claimed, started, ended, retried) is listed again
    /// only if it comes to a state the listing has not passed yet: a page never lists a run it
    /// listed before in the same state, nor misses one that stayed where it was.
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`] for a job with no such run that no replica declares,
    /// [`ClientError::UnknownReplica`] for a replica id with none that the namespace does not
    /// know; Redis errors.
    pub async fn runs_page(&self, query: &RunsQuery) -> Result<RunsPage, ClientError> {
        let (runs, next, scan_limited) = match &query.run_id {
            Some(run_id) => (self.run_by_id(run_id, query).await?, None, false),
            None if query.count == 0 => (Vec::new(), None, false),
            None => self.listed_runs(query).await?,
        };
        self.known_unless_empty(query.job.as_deref(), runs.is_empty())
            .await?;
        self.known_replica_unless_empty(query.replica.as_deref(), runs.is_empty())
            .await?;
        Ok(RunsPage {
            runs,
            next,
            scan_limited,
            now_ms: self.store.now_ms().await?,
        })
    }

    /// The run `run_id`, if it has a record or is a planned fire, and is `query.job`'s when
    /// that is given.
    async fn run_by_id(
        &self,
        run_id: &str,
        query: &RunsQuery,
    ) -> Result<Vec<ListedRun>, ClientError> {
        let mut fields = self.store.run_fields(run_id).await?;
        if fields.is_empty() {
            match self.store.due_at(run_id).await? {
                (Some(due_ms), _) => fields = planned_fire(run_id, due_ms),
                (None, _) => return Ok(Vec::new()),
            }
        }
        if query
            .job
            .as_ref()
            .is_some_and(|job| fields.get("job") != Some(job))
        {
            return Ok(Vec::new());
        }
        Ok(vec![ListedRun {
            run_id: run_id.to_owned(),
            fields,
            cursor: None,
        }])
    }

    /// The listing's page: its runs, where the next starts, and whether the scan was cut short.
    async fn listed_runs(
        &self,
        query: &RunsQuery,
    ) -> Result<(Vec<ListedRun>, Option<RunsCursor>, bool), ClientError> {
        let window = query.after.as_ref().map_or(
            Window {
                since_ms: query.since_ms,
                until_ms: query.until_ms,
            },
            |cursor| cursor.window,
        );
        let filtered = query.job.is_some() || query.replica.is_some() || window.bounded();
        // One more than the page: whether it is there says whether another page follows.
        let wanted = query.count.saturating_add(1);
        let mut runs: Vec<ListedRun> = Vec::new();
        let mut budget = RUNS_SCANNED;
        let mut position = query.after.clone().map(|cursor| cursor.mark);
        let cursor = |mark: Mark| RunsCursor { mark, window };
        let asked = [
            (Section::Active, query.active),
            (Section::Ready, query.ready),
            (Section::Due, query.due),
            (Section::Ended, !query.outcomes.is_empty()),
        ];
        'sections: for (section, shown) in asked {
            let mut after = match &position {
                Some(mark) if mark.section() > section => continue,
                Some(mark) if mark.section() == section => Some(mark.clone()),
                _ => None,
            };
            if !shown {
                continue;
            }
            if section == Section::Ended {
                let need = wanted - runs.len();
                let ended = self
                    .ended_runs(query, window, after, need, &mut budget)
                    .await?;
                position = ended.scanned_to.or(position);
                runs.extend(ended.runs);
                if ended.scan_limited && runs.len() < wanted {
                    return Ok((runs, position.map(cursor), true));
                }
                break;
            }
            // The due runs are by due time: those of the window start at its start.
            if section == Section::Due
                && after.is_none()
                && let Some(since_ms) = window.since_ms
            {
                after = Some(Mark::Due(since_ms, Vec::new()));
            }
            loop {
                if runs.len() == wanted {
                    break 'sections;
                }
                if budget == 0 {
                    return Ok((runs, position.map(cursor), true));
                }
                let need = wanted - runs.len();
                let chunk = if filtered {
                    need.max(FILTERED_CHUNK)
                } else {
                    need
                }
                .min(budget);
                let entries = self.entries_after(section, after.as_ref(), chunk).await?;
                budget -= entries.len();
                let ended = entries.len() < chunk;
                let ids: Vec<&str> = entries
                    .iter()
                    .filter_map(|(entry, ..)| entry.run_id())
                    .collect();
                let mut records = self.store.runs_fields(&ids).await?.into_iter();
                let mut past_window = false;
                for (entry, mark, due_ms) in entries {
                    after = Some(mark.clone());
                    position = Some(mark.clone());
                    // Due runs come by due time: one past the window ends the section.
                    if due_ms
                        .is_some_and(|due_ms| window.until_ms.is_some_and(|until| due_ms > until))
                    {
                        past_window = true;
                        break;
                    }
                    let fields = match &entry {
                        Entry::Run(_) => records.next().unwrap_or_default(),
                        Entry::Unreadable(_) => HashMap::new(),
                    };
                    if let Some(run) = listed(entry, fields, due_ms, query, cursor(mark)) {
                        runs.push(run);
                        if runs.len() == wanted {
                            break 'sections;
                        }
                    }
                }
                if ended || past_window {
                    break;
                }
            }
        }
        if runs.len() < wanted {
            return Ok((runs, None, false));
        }
        runs.truncate(query.count);
        let next = runs.last().and_then(|run| run.cursor.clone());
        Ok((runs, next, false))
    }

    /// Up to `limit` entries of one state after `after`: each with where it is, and its due
    /// time when it is due.
    async fn entries_after(
        &self,
        section: Section,
        after: Option<&Mark>,
        limit: usize,
    ) -> Result<Vec<(Entry, Mark, Option<i64>)>, ClientError> {
        Ok(match section {
            Section::Active => {
                let after = match after {
                    Some(Mark::Active(entry)) => Some(entry.as_slice()),
                    _ => None,
                };
                self.store
                    .leased_runs_after(after, limit)
                    .await?
                    .into_iter()
                    .map(|(entry, _)| {
                        let mark = Mark::Active(entry.as_bytes().to_vec());
                        (entry, mark, None)
                    })
                    .collect()
            }
            Section::Ready => {
                let after = match after {
                    Some(Mark::Ready(mark)) => Some(mark),
                    _ => None,
                };
                self.store
                    .waiting_runs_after(after, limit)
                    .await?
                    .into_iter()
                    .map(|(entry, mark)| (entry, Mark::Ready(mark), None))
                    .collect()
            }
            Section::Due => {
                let after = match after {
                    Some(Mark::Due(due_ms, entry)) => Some((*due_ms, entry.as_slice())),
                    _ => None,
                };
                self.store
                    .due_runs_after(after, limit)
                    .await?
                    .into_iter()
                    .map(|(entry, due_ms)| {
                        let mark = Mark::Due(due_ms, entry.as_bytes().to_vec());
                        (entry, mark, Some(due_ms))
                    })
                    .collect()
            }
            // Read by `ended_runs`, which pages the events stream.
            Section::Ended => Vec::new(),
        })
    }
}

/// The entry `entry` with its record `fields` as the listing shows it, unless `query` leaves
/// it out or it has nothing to show.
fn listed(
    entry: Entry,
    fields: HashMap<String, String>,
    due_ms: Option<i64>,
    query: &RunsQuery,
    cursor: RunsCursor,
) -> Option<ListedRun> {
    let window = cursor.window;
    let cursor = Some(cursor);
    let Entry::Run(run_id) = entry else {
        // No run has it: listed as damaged, unless only one job's or one replica's runs are
        // asked for.
        return (query.job.is_none() && query.replica.is_none()).then(|| ListedRun {
            run_id: entry.to_string(),
            fields: damaged(UNREADABLE),
            cursor,
        });
    };
    let fields = match due_ms {
        // A planned cron fire has no record until it is promoted: its id and due time say
        // what it is.
        Some(due_ms) if fields.is_empty() => planned_fire(&run_id, due_ms),
        // A leased or ready run without a record has nothing to show: the reaper or the claim
        // buries it.
        None if fields.is_empty() => return None,
        _ => fields,
    };
    let worker = fields.get("worker").map(String::as_str);
    let job = fields.get("job").map(String::as_str).unwrap_or_default();
    // A run is in the window by the instant of its state: a due run's due time, a ready run's
    // readiness, a leased run's start (or readiness, claimed and not started yet).
    let instant = due_ms.or_else(|| {
        ["started_ms", "ready_ms", "created_ms"]
            .iter()
            .find_map(|name| fields.get(*name)?.parse().ok())
    });
    if window.bounded() && !instant.is_some_and(|at_ms| window.holds(at_ms)) {
        return None;
    }
    if query
        .job
        .as_ref()
        .is_some_and(|asked| fields.get("job") != Some(asked))
        || query
            .replica
            .as_deref()
            .is_some_and(|replica| crate::store::replica_of(job, &run_id, worker) != Some(replica))
    {
        return None;
    }
    Some(ListedRun {
        run_id,
        fields,
        cursor,
    })
}

/// What a planned fire's id (`<job>@<fire ms>`) and due time tell of it.
fn planned_fire(run_id: &str, due_ms: i64) -> HashMap<String, String> {
    let mut fields = HashMap::from([
        ("kind".to_owned(), "cron".to_owned()),
        ("state".to_owned(), "scheduled".to_owned()),
        ("due_ms".to_owned(), due_ms.to_string()),
    ]);
    if let Some((job, fire_ms)) = crate::store::parse_cron_run_id(run_id) {
        fields.insert("job".to_owned(), job.to_owned());
        fields.insert("fire_ms".to_owned(), fire_ms.to_string());
    }
    fields
}
