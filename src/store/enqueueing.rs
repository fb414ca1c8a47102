//! Ad-hoc and delayed runs of declared jobs (`enqueue_runs.lua`), their ids and fingerprints,
//! and who asked for them.

use std::time::Duration;

use redis::Value;

use super::reply::{Reply, ScriptCall, decode, reply_error};
use super::{Store, StoreError, millis, scripts};
use crate::schedule::Priority;

/// A request for an ad-hoc run of a declared job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueue {
    /// The declared job.
    pub job: String,
    /// When it is due, ms; `None` for now.
    pub due_ms: Option<i64>,
    /// JSON text for the command's standard input.
    pub payload: Option<String>,
    /// Instead of the job's own priority.
    pub priority: Option<Priority>,
    /// A fingerprint and how long it stays reserved: a second run with it is refused.
    pub unique: Option<(String, Duration)>,
}

impl Enqueue {
    /// The run's 7 arguments to `enqueue_runs.lua`: run id, job, due ms or '', payload,
    /// priority or '', fingerprint or '', uniqueness window ms.
    pub fn script_arguments(&self, run_id: &str) -> [String; 7] {
        let (fingerprint, window) = self
            .unique
            .as_ref()
            .map_or((String::new(), 0), |(fingerprint, window)| {
                (fingerprint.clone(), millis(*window))
            });
        let priority = self.priority.map_or("", |priority| match priority {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        });
        [
            run_id.to_owned(),
            self.job.clone(),
            self.due_ms.map_or_else(String::new, |due| due.to_string()),
            self.payload.clone().unwrap_or_default(),
            priority.to_owned(),
            fingerprint,
            window.to_string(),
        ]
    }
}

/// Who makes runs, and as what: each run made carries the actor, and each script call records
/// one action in the events stream (see `enqueue_runs.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acting<'a> {
    /// Who asks: a console's token or user, `cli`, or a program's own name.
    pub actor: &'a str,
    /// The runs are a trigger of their job (`redcron trigger`), not an enqueue: recorded as
    /// action `trigger`, each run marked `triggered`.
    pub trigger: bool,
}

/// What became of an enqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// The run exists and is due at `due_ms`.
    Scheduled {
        /// The new run's id.
        run_id: String,
        /// When it is due, ms.
        due_ms: i64,
        /// Its job is paused: the run will be skipped unless the job is resumed first.
        paused: bool,
    },
    /// No replica has published a job of that name.
    UnknownJob,
    /// The job runs on every replica (`on = "every"`): its runs are its fires' and its
    /// triggers', one per replica ([`Store::trigger_fire`]), never an ad-hoc run.
    EveryReplica,
    /// Another run holds the fingerprint.
    Duplicate {
        /// That run's id.
        holder: String,
    },
}

/// The fingerprint of an ad-hoc run by its payload: SHA-256 of the job name and the payload's
/// canonical JSON (keys sorted, no insignificant white space).
pub fn payload_fingerprint(job: &str, payload: &serde_json::Value) -> String {
    fingerprint(job, &payload.to_string())
}

/// The fingerprint of an ad-hoc run by an explicit unique key.
pub fn key_fingerprint(job: &str, key: &str) -> String {
    fingerprint(job, key)
}

fn fingerprint(job: &str, content: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(job.as_bytes());
    hasher.update([0]);
    hasher.update(content.as_bytes());
    hex::encode(hasher.finalize())
}

/// A new ad-hoc run (or workflow instance) id: a UUIDv7, so ids sort by creation time to the millisecond. Its random
/// bits come from the thread's generator rather than the OS, which costs a system call per id.
pub fn new_run_id() -> String {
    let millis = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or_default();
    uuid::Builder::from_unix_timestamp_millis(millis, &rand::random())
        .into_uuid()
        .to_string()
}

/// Reads the answer for the run `run_id` in `enqueue_runs.lua`'s reply: a status and two values.
fn read_enqueued(run_id: String, reply: &mut Reply) -> Result<Enqueued, StoreError> {
    let status: String = reply.next()?;
    let (first, second) = (reply.next_value()?, reply.next_value()?);
    match status.as_str() {
        "OK" => Ok(Enqueued::Scheduled {
            run_id,
            due_ms: decode(OPERATION, first)?,
            paused: decode::<i64>(OPERATION, second)? == 1,
        }),
        "UNKNOWN" => Ok(Enqueued::UnknownJob),
        "EVERY" => Ok(Enqueued::EveryReplica),
        "DUPLICATE" => Ok(Enqueued::Duplicate {
            holder: decode(OPERATION, first)?,
        }),
        other => Err(reply_error(OPERATION, format!("status {other:?}"))),
    }
}

const OPERATION: &str = "enqueue_runs";

impl Store {
    /// Creates an ad-hoc run of a declared job (see [`Enqueue`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn enqueue_run(&self, request: &Enqueue) -> Result<Enqueued, StoreError> {
        self.enqueue_run_by(request, None).await
    }

    /// As [`Store::enqueue_run`], recording who asks (see [`Acting`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn enqueue_run_by(
        &self,
        request: &Enqueue,
        acting: Option<Acting<'_>>,
    ) -> Result<Enqueued, StoreError> {
        let mut enqueued = self
            .enqueue_many_by(std::slice::from_ref(request), acting)
            .await?;
        enqueued
            .pop()
            .ok_or_else(|| reply_error(OPERATION, "no answer"))
    }

    /// Creates many ad-hoc runs (bulk enqueue): a script call per thousand runs, pipelined in
    /// round trips of ten thousand runs. Each run is created whole or not at all; the answers
    /// are in the order of `requests`.
    ///
    /// # Errors
    /// Redis errors; runs of the calls before the error exist.
    pub async fn enqueue_many(&self, requests: &[Enqueue]) -> Result<Vec<Enqueued>, StoreError> {
        self.enqueue_many_by(requests, None).await
    }

    /// As [`Store::enqueue_many`], recording who asks: on each run, and once per script call
    /// of a thousand runs in the events stream (see [`Acting`]).
    ///
    /// # Errors
    /// Redis errors; runs of the calls before the error exist.
    pub async fn enqueue_many_by(
        &self,
        requests: &[Enqueue],
        acting: Option<Acting<'_>>,
    ) -> Result<Vec<Enqueued>, StoreError> {
        const RUNS_PER_CALL: usize = 1_000;
        // The response timeout bounds a round trip, not a run: a hundred thousand runs in one,
        // which a loaded Redis takes longer than that to create, would time out while Redis
        // works through them.
        const RUNS_PER_ROUND_TRIP: usize = 10 * RUNS_PER_CALL;
        let mut run_ids = Vec::with_capacity(requests.len());
        let mut answers = Vec::with_capacity(requests.len());
        for round_trip in requests.chunks(RUNS_PER_ROUND_TRIP) {
            let calls = round_trip
                .chunks(RUNS_PER_CALL)
                .map(|batch| self.enqueue_call(batch, acting, &mut run_ids))
                .collect();
            let answered: Vec<Vec<Value>> = self
                .invoke_batched(&scripts::ENQUEUE_RUNS, OPERATION, calls)
                .await?;
            answers.extend(answered.into_iter().flatten());
        }
        let mut reply = Reply::new(OPERATION, answers);
        let enqueued = run_ids
            .into_iter()
            .map(|run_id| read_enqueued(run_id, &mut reply))
            .collect();
        reply.finish()?;
        enqueued
    }

    /// One `enqueue_runs.lua` call creating `requests`; collects the new runs' ids.
    fn enqueue_call(
        &self,
        requests: &[Enqueue],
        acting: Option<Acting<'_>>,
        run_ids: &mut Vec<String>,
    ) -> ScriptCall {
        let keys = vec![
            self.keys.due_runs(),
            self.keys.defs(),
            self.keys.paused(),
            self.keys.wake_promoter(),
            self.keys.hold(),
            self.keys.events(),
        ];
        let action = if acting.is_some_and(|acting| acting.trigger) {
            "trigger"
        } else {
            "enqueue"
        };
        let mut args = vec![
            self.keys.prefix().to_owned(),
            self.now_arg(),
            acting.map_or_else(String::new, |acting| acting.actor.to_owned()),
            action.to_owned(),
            self.settings.events_maxlen.to_string(),
        ];
        for request in requests {
            let run_id = new_run_id();
            args.extend(request.script_arguments(&run_id));
            run_ids.push(run_id);
        }
        ScriptCall { keys, args }
    }
}
