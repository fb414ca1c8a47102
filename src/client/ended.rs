//! The runs that ended, as a listing's last section: read from the events stream newest first,
//! a page at a time from the entry the page before ended at (`XREVRANGE` from an exclusive id),
//! so that a page costs the same however many outcomes the stream holds and pages on through
//! every one it keeps.

use std::collections::HashMap;

use super::cursor::{Mark, Window};
use super::{Client, ClientError, ListedRun, RunsCursor, RunsQuery};
use crate::store::{Event, RunState};

/// How many entries of the stream one read takes: outcomes of other jobs or states, and the
/// stream's other entries (actions, re-drives), are passed over a read at a time.
const CHUNK: usize = 256;

/// What a page's read of the ended runs found.
pub(super) struct Ended {
    /// The runs, newest outcome first, each with its cursor.
    pub(super) runs: Vec<ListedRun>,
    /// The last entry read, listed or not: where a page cut short goes on from.
    pub(super) scanned_to: Option<Mark>,
    /// Whether the read stopped at the listing's budget of entries with fewer runs than needed.
    pub(super) scan_limited: bool,
}

impl Client {
    /// Up to `need` outcomes of `query.outcomes` in `window`, newest first, after the entry
    /// `after` (a [`Mark::Ended`]), reading at most `budget` entries of the stream (and taking
    /// what it read from it). Each is its run's record as the outcome left it: the outcome's
    /// own fields (state, reason, attempt, exit code, worker) over the record's, which may be
    /// of a later attempt or expired, and `finished_ms`, when the outcome was recorded.
    ///
    /// # Errors
    /// Redis errors.
    pub(super) async fn ended_runs(
        &self,
        query: &RunsQuery,
        window: Window,
        after: Option<Mark>,
        need: usize,
        budget: &mut usize,
    ) -> Result<Ended, ClientError> {
        let mut before = match after {
            Some(Mark::Ended(ms, seq)) => Some((ms, seq)),
            _ => None,
        };
        let mut kept: Vec<((u64, u64), Event)> = Vec::new();
        let mut scan_limited = false;
        while kept.len() < need {
            if *budget == 0 {
                scan_limited = true;
                break;
            }
            let chunk = CHUNK.max(need).min(*budget);
            let events = self
                .store
                .events_before(before, window.since_ms, window.until_ms, chunk)
                .await?;
            *budget -= events.len();
            let read_all = events.len() < chunk;
            for (place, event) in events {
                before = Some(place);
                if is_listed(&event, query) {
                    kept.push((place, event));
                    if kept.len() == need {
                        break;
                    }
                }
            }
            if read_all {
                break;
            }
        }
        let ids: Vec<&str> = kept
            .iter()
            .map(|(_, event)| event.fields.get("run").map_or("", String::as_str))
            .collect();
        let records = self.store.runs_fields(&ids).await?;
        let runs = kept
            .into_iter()
            .zip(records)
            .map(|(((ms, seq), event), record)| {
                let cursor = RunsCursor {
                    mark: Mark::Ended(ms, seq),
                    window,
                };
                ended_run(event, record, cursor)
            })
            .collect();
        Ok(Ended {
            runs,
            scanned_to: before.map(|(ms, seq)| Mark::Ended(ms, seq)),
            scan_limited,
        })
    }
}

/// Whether the stream's entry `event` is an outcome `query` lists: of a run, in one of its
/// outcomes, of its job and replica when given.
fn is_listed(event: &Event, query: &RunsQuery) -> bool {
    let field = |name: &str| event.fields.get(name).map(String::as_str);
    let (Some(run_id), Some(state)) = (field("run"), field("state").and_then(RunState::parse))
    else {
        return false;
    };
    let job = field("job").unwrap_or_default();
    query.outcomes.contains(&state)
        && query.job.as_deref().is_none_or(|asked| asked == job)
        && query.replica.as_deref().is_none_or(|replica| {
            crate::store::replica_of(job, run_id, field("worker")) == Some(replica)
        })
}

/// The run an outcome was of, as the listing shows it: the record with the outcome over it.
fn ended_run(event: Event, mut fields: HashMap<String, String>, cursor: RunsCursor) -> ListedRun {
    let mut event = event;
    let run_id = event.fields.remove("run").unwrap_or_default();
    fields.extend(event.fields);
    fields.insert("finished_ms".to_owned(), event.at_ms.to_string());
    ListedRun {
        run_id,
        fields,
        cursor: Some(cursor),
    }
}
