//! Notices owed (`take_notices.lua`, `settle_notice.lua`): written by the scripts that record
//! an outcome, in the same call (`add_notice` in `common.lua`), so a notice is owed exactly when
//! its outcome is recorded; taken and sent by the replicas' notifiers.

use std::collections::HashMap;
use std::time::Duration;

use redis::AsyncCommands;

use super::During;
use super::reply::reply_error;
use super::{Store, StoreError, millis, scripts};
use crate::schedule::{Event, Target};

/// A notice taken to be sent, with the run's fields as they were when its outcome was
/// recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwedNotice {
    /// `<run id>:<attempt>:<event>`: one per outcome, which a receiver may use to drop a repeat.
    pub id: String,
    /// What happened.
    pub event: Event,
    /// The run.
    pub run_id: String,
    /// Its job.
    pub job: String,
    /// `cron` for a fire, `adhoc` for an enqueued or triggered run.
    pub kind: Option<String>,
    /// The queue it ran in.
    pub queue: Option<String>,
    /// The attempt the notice is about (0 for a fire skipped before any).
    pub attempt: u32,
    /// The run's state when it was recorded.
    pub state: Option<String>,
    /// Why it failed, died or was skipped.
    pub reason: Option<String>,
    /// The command's exit code.
    pub exit_code: Option<i32>,
    /// What went wrong, for people.
    pub error: Option<String>,
    /// The tail of its output.
    pub output: String,
    /// The fire's time, for a cron fire.
    pub fire_ms: Option<i64>,
    /// When the attempt was due.
    pub due_ms: Option<i64>,
    /// When the attempt started.
    pub started_ms: Option<i64>,
    /// When it ended.
    pub finished_ms: Option<i64>,
    /// The worker that ran it, `<replica id>/<slot>`.
    pub worker: Option<String>,
    /// When the outcome was recorded.
    pub created_ms: i64,
    /// Where it goes.
    pub targets: Vec<Target>,
    /// The targets (indexes into `targets`) done with: they have it already, or refused it.
    pub settled: Vec<usize>,
    /// How many times it was taken to be sent, this time included.
    pub tries: u32,
}

impl OwedNotice {
    /// The replica that ran the attempt, from its worker id, else the one a run of an
    /// every-replica fire was meant for (skipped as `replica-down` before it ran).
    pub fn replica(&self) -> Option<&str> {
        super::replica_of(&self.job, &self.run_id, self.worker.as_deref())
    }

    /// Reads a notice's hash as `take_notices.lua` answers it.
    ///
    /// # Errors
    /// What is missing or unreadable: the notice cannot be sent.
    fn from_fields(id: String, mut fields: HashMap<String, String>) -> Result<Self, String> {
        let targets: Vec<Target> = fields
            .remove("targets")
            .and_then(|targets| serde_json::from_str(&targets).ok())
            .ok_or("no targets it can read")?;
        let settled: Vec<usize> = (0..targets.len())
            .filter(|index| {
                fields.contains_key(&format!("done:{index}"))
                    || fields.contains_key(&format!("given_up:{index}"))
            })
            .collect();
        let mut take = |name: &str| fields.remove(name).filter(|value| !value.is_empty());
        let event = take("event")
            .and_then(|event| Event::parse(&event))
            .ok_or("no event it knows")?;
        let run_id = take("run").ok_or("no run")?;
        let number = |value: Option<String>| value.and_then(|value| value.parse::<i64>().ok());
        let notice = Self {
            event,
            run_id,
            job: take("job").unwrap_or_default(),
            kind: take("kind"),
            queue: take("queue"),
            attempt: number(take("attempt"))
                .and_then(|attempt| u32::try_from(attempt).ok())
                .unwrap_or(0),
            state: take("state"),
            reason: take("reason"),
            exit_code: number(take("exit_code")).and_then(|code| i32::try_from(code).ok()),
            error: take("error"),
            output: take("output").unwrap_or_default(),
            fire_ms: number(take("fire_ms")),
            due_ms: number(take("due_ms")),
            started_ms: number(take("started_ms")),
            finished_ms: number(take("finished_ms")),
            worker: take("worker"),
            created_ms: number(take("created_ms")).unwrap_or(0),
            settled,
            targets,
            tries: number(take("tries"))
                .and_then(|tries| u32::try_from(tries).ok())
                .unwrap_or(1),
            id,
        };
        Ok(notice)
    }
}

/// A notice whose hash cannot be read: it is dropped, and said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedNotice {
    /// Its id.
    pub id: String,
    /// What is wrong with it.
    pub problem: String,
}

/// What became of a notice its sender holds, see [`Store::settle_notice`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Still being sent: hold it this much longer.
    Extend(Duration),
    /// The target at this index has it.
    Delivered(usize),
    /// The target at this index refused it, or failed too many times: it is not tried again.
    GivenUp(usize),
    /// A target failed for now: due again after this long, the targets done with kept.
    Retry(Duration),
    /// Every target has it, or it was given up: forgotten.
    Finish,
}

impl Store {
    /// Takes up to `limit` notices for `replica_id` to send, leased to it for `lease`: its own
    /// first, then any other whose time has come.
    ///
    /// # Errors
    /// Redis errors, or a reply `take_notices.lua` does not give.
    pub async fn take_notices(
        &self,
        replica_id: &str,
        lease: Duration,
        limit: usize,
    ) -> Result<Vec<Result<OwedNotice, DamagedNotice>>, StoreError> {
        let taken: Vec<(String, HashMap<String, String>)> = scripts::TAKE_NOTICES
            .key(self.keys.notices())
            .key(self.keys.notices_of(replica_id))
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(replica_id)
            .arg(millis(lease))
            .arg(limit)
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "take_notices")?;
        Ok(taken
            .into_iter()
            .map(|(id, fields)| {
                OwedNotice::from_fields(id.clone(), fields).map_err(|problem| DamagedNotice {
                    id,
                    problem: problem.to_owned(),
                })
            })
            .collect())
    }

    /// Records what became of notice `id`, which `replica_id` holds; `false` when it no longer
    /// does (another replica took it over, or it is done).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn settle_notice(
        &self,
        id: &str,
        replica_id: &str,
        settle: &Settle,
    ) -> Result<bool, StoreError> {
        let (what, value) = match settle {
            Settle::Extend(lease) => ("extend", millis(*lease).to_string()),
            Settle::Delivered(index) => ("delivered", index.to_string()),
            Settle::GivenUp(index) => ("given_up", index.to_string()),
            Settle::Retry(after) => ("retry", millis(*after).to_string()),
            Settle::Finish => ("finish", String::new()),
        };
        let settled: i64 = scripts::SETTLE_NOTICE
            .key(self.keys.notices())
            .key(self.keys.hold())
            .arg(self.keys.prefix())
            .arg(id)
            .arg(replica_id)
            .arg(what)
            .arg(value)
            .arg(self.now_arg())
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, "settle_notice")?;
        match settled {
            0 | 1 => Ok(settled == 1),
            other => Err(reply_error("settle_notice", format!("answer {other}"))),
        }
    }

    /// How many notices are owed and not yet sent (those being sent included).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn owed_notices(&self) -> Result<u64, StoreError> {
        self.connection
            .clone()
            .zcard(self.keys.notices())
            .await
            .during(&self.metrics, "owed_notices")
    }
}
