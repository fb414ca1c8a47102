//! Runs listed a page at a time, each page starting where the one before ended (a keyset), so
//! that a page costs about the same whether a set holds a hundred runs or a million.

use std::collections::{BTreeSet, HashMap};

use redis::Value;

use super::During;
use super::damage::readable_record;
use super::damaged_names::{NameIndex, readable_hash, readable_names};
use super::inspect::stream_event;
use super::keys::{private_route, replica_slot_group};
use super::reply::Reply;
use super::{Entry, Event, Store, StoreError, scripts};
use crate::schedule::Priority;

/// How many ready lists one round trip reads when a page walks past empty ones.
const LISTS_PER_ROUND: usize = 256;

/// How far past where a ready run was a page looks for it again: runs handed back to the head
/// of its list (a claim that could not start them) move it that much further in.
const HANDED_BACK_SLACK: u64 = 1_000;

/// Where a page of ready runs ended: a run of one ready list, and how far in it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyMark {
    /// The list's key.
    pub list: String,
    /// The list's place among the lists walked, for when it is no longer among them.
    pub list_at: usize,
    /// How far into the list the run was, from its head.
    pub index: u64,
    /// The run, as Redis holds it.
    pub entry: Vec<u8>,
}

impl Store {
    /// Up to `limit` runs holding a lease, by run id, after the run `after` if given (whether
    /// it still holds one or not): entry and lease deadline, ms. By id, not by deadline, since
    /// a running run's deadline moves on each extension and would list it again. Reads the whole
    /// set, which holds one run per busy worker.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn leased_runs_after(
        &self,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Entry, i64)>, StoreError> {
        let mut leased: Vec<(Entry, i64)> = redis::cmd("ZRANGE")
            .arg(self.keys.active())
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "leased_runs_after")?;
        leased.sort_by(|(a, _), (b, _)| a.as_bytes().cmp(b.as_bytes()));
        Ok(leased
            .into_iter()
            .filter(|(entry, _)| after.is_none_or(|after| entry.as_bytes() > after))
            .take(limit)
            .collect())
    }

    /// Up to `limit` runs of the due sets (the fires' and the ad-hoc runs'), by due time then
    /// by id, after the position `after` (due ms, entry) if given, whether or not that run is
    /// still due: entry and due time, ms. A planned cron fire is there before its run has a
    /// record. Costs O(log N + limit) for N due runs (`lua/range_after.lua`).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn due_runs_after(
        &self,
        after: Option<(i64, &[u8])>,
        limit: usize,
    ) -> Result<Vec<(Entry, i64)>, StoreError> {
        let mut due = self.range_after(&self.keys.due(), after, limit).await?;
        due.extend(
            self.range_after(&self.keys.due_runs(), after, limit)
                .await?,
        );
        due.sort_by(|(a, a_ms), (b, b_ms)| (a_ms, a.as_bytes()).cmp(&(b_ms, b.as_bytes())));
        due.truncate(limit);
        Ok(due)
    }

    /// Up to `limit` entries of the events stream, newest first, before the entry `before`
    /// (its id's milliseconds and sequence) if given, whether or not the stream still holds
    /// it, and none recorded before `since_ms` nor after `until_ms`: each with where it is.
    /// One XREVRANGE, O(log N + limit) for N entries: a page deep in a million costs the same.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn events_before(
        &self,
        before: Option<(u64, u64)>,
        since_ms: Option<i64>,
        until_ms: Option<i64>,
        limit: usize,
    ) -> Result<Vec<((u64, u64), Event)>, StoreError> {
        // An id of milliseconds alone reads as the first entry of that millisecond as a start,
        // and as its last as an end: the bounds are inclusive.
        let end = match (before, until_ms) {
            (Some((ms, seq)), _) => format!("({ms}-{seq}"),
            (None, Some(until_ms)) => until_ms.max(0).to_string(),
            (None, None) => "+".to_owned(),
        };
        let start = since_ms.map_or_else(|| "-".to_owned(), |since| since.max(0).to_string());
        let reply: Vec<(String, Vec<(Entry, Entry)>)> = redis::cmd("XREVRANGE")
            .arg(self.keys.events())
            .arg(end)
            .arg(start)
            .arg("COUNT")
            .arg(limit.max(1))
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "events_before")?;
        Ok(reply
            .into_iter()
            .map(|(id, fields)| stream_event(&id, fields))
            .collect())
    }

    /// `lua/range_after.lua` on the sorted set `key`.
    async fn range_after(
        &self,
        key: &str,
        after: Option<(i64, &[u8])>,
        limit: usize,
    ) -> Result<Vec<(Entry, i64)>, StoreError> {
        let (score, member) = after.map_or((String::new(), &[][..]), |(score, member)| {
            (score.to_string(), member)
        });
        scripts::RANGE_AFTER
            .key(key)
            .arg(score)
            .arg(member)
            .arg(limit.max(1))
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "range_after")
    }

    /// Up to `limit` runs waiting for a worker, in the order claims take them, after the run
    /// `after` if given: those ready in every queue a published job names, `default`, each
    /// replica's own route (runs of every-replica fires) and any other queue with ready runs
    /// ([`Store::ready_queues`]), highest priority first and a priority's cron fires first;
    /// then those waiting for a slot of their job (per replica for an every-replica job); then
    /// those put aside for a replica that declares their job. Each with where it is.
    ///
    /// Claims take runs from the head of a list, so a run no longer where `after` was has been
    /// claimed with every run before it, and the page starts at the list's head; a page deep
    /// into one list costs its depth (a Redis list has no index).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn waiting_runs_after(
        &self,
        after: Option<&ReadyMark>,
        limit: usize,
    ) -> Result<Vec<(Entry, ReadyMark)>, StoreError> {
        let lists = self.ready_lists().await?;
        let mut connection = self.connection.clone();
        let (mut list_at, mut start) = (0, 0u64);
        if let Some(mark) = after {
            list_at = lists
                .iter()
                .position(|list| *list == mark.list)
                .unwrap_or(mark.list_at.min(lists.len()));
            if lists.get(list_at) == Some(&mark.list) {
                let found: Option<u64> = redis::cmd("LPOS")
                    .arg(&mark.list)
                    .arg(&mark.entry)
                    .arg("MAXLEN")
                    .arg(mark.index + 1 + HANDED_BACK_SLACK)
                    .query_async(&mut connection)
                    .await
                    .during(&self.metrics, "waiting_runs_after")?;
                start = found.map_or(0, |at| at + 1);
            }
        }
        let mut found = Vec::new();
        while list_at < lists.len() && found.len() < limit {
            let round = &lists[list_at..lists.len().min(list_at + LISTS_PER_ROUND)];
            let mut pipe = redis::pipe();
            for (n, list) in round.iter().enumerate() {
                let from = if n == 0 { start } else { 0 };
                let to = from + (limit - found.len()) as u64 - 1;
                pipe.lrange(
                    list,
                    isize::try_from(from).unwrap_or(isize::MAX),
                    to as isize,
                );
            }
            let answers: Vec<Vec<Entry>> = pipe
                .query_async(&mut connection)
                .await
                .during(&self.metrics, "waiting_runs_after")?;
            for (n, entries) in answers.into_iter().enumerate() {
                let from = if n == 0 { start } else { 0 };
                for (index, entry) in (from..).zip(entries) {
                    let mark = ReadyMark {
                        list: round[n].clone(),
                        list_at: list_at + n,
                        index,
                        entry: entry.as_bytes().to_vec(),
                    };
                    found.push((entry, mark));
                }
            }
            list_at += round.len();
            start = 0;
        }
        found.truncate(limit);
        Ok(found)
    }

    /// The lists runs wait in, in the order claims take them (see
    /// [`Store::waiting_runs_after`]).
    async fn ready_lists(&self) -> Result<Vec<String>, StoreError> {
        // Names as bytes: one that is not UTF-8 is left out below.
        type Read = (Vec<(Entry, Entry)>, Vec<Entry>, Vec<Entry>, Vec<Entry>);
        let (defs, undeclared, live, stopped): Read = redis::pipe()
            .hgetall(self.keys.defs())
            .zrange(self.keys.undeclared_jobs(), 0, -1)
            .zrange(self.keys.replicas(), 0, -1)
            .zrange(self.keys.stopped_replicas(), 0, -1)
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "ready_lists")?;
        // A name that is not UTF-8 names no job or replica: the reapers remove it.
        let damaged = &mut Vec::new();
        let defs = readable_hash(NameIndex::Definitions, defs, damaged);
        let undeclared = readable_names(NameIndex::UndeclaredJobs, undeclared, damaged);
        let replicas: BTreeSet<String> = readable_names(NameIndex::Replicas, live, damaged)
            .into_iter()
            .chain(readable_names(NameIndex::StoppedReplicas, stopped, damaged))
            .collect();
        let mut queues = super::inspect::queues_of(&defs);
        queues.extend(replicas.iter().map(|replica| private_route(replica)));
        queues.push("default".to_owned());
        queues.extend(self.ready_queues().await?);
        queues.sort();
        queues.dedup();
        let mut jobs: Vec<&String> = defs.keys().collect();
        jobs.sort();
        let mut lists = Vec::new();
        for priority in Priority::ALL {
            lists.extend(
                queues
                    .iter()
                    .map(|queue| self.keys.ready_fires(queue, priority)),
            );
            lists.extend(queues.iter().map(|queue| self.keys.ready(queue, priority)));
        }
        lists.extend(jobs.iter().map(|job| self.keys.waiting(job)));
        for job in jobs
            .iter()
            .filter(|job| super::inspect::runs_on_every_replica(&defs[**job]))
        {
            lists.extend(
                replicas
                    .iter()
                    .map(|replica| self.keys.waiting(&replica_slot_group(job, replica))),
            );
        }
        lists.extend(undeclared.iter().map(|job| self.keys.undeclared(job)));
        Ok(lists)
    }

    /// The records of the runs `run_ids`, in their order, in one round trip: each as
    /// [`Store::run_fields`] reads it, empty for a run without one.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn runs_fields(
        &self,
        run_ids: &[&str],
    ) -> Result<Vec<HashMap<String, String>>, StoreError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for run_id in run_ids {
            pipe.hgetall(self.keys.run(run_id));
        }
        let answers: Vec<Value> = pipe
            .query_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "runs_fields")?;
        let mut reply = Reply::new("runs_fields", answers);
        let mut records = Vec::with_capacity(run_ids.len());
        for _ in run_ids {
            let record: Vec<(Entry, Entry)> = reply.next()?;
            records.push(readable_record(record));
        }
        reply.finish()?;
        Ok(records)
    }
}
