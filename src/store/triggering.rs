//! Triggers of every-replica jobs (`trigger_fire.lua`): a fire now, one run per target.

use redis::Value;

use super::reply::{Reply, reply_error};
use super::{During, Store, StoreError, scripts};
use crate::schedule::Priority;

/// Which of an every-replica job's targets a trigger makes runs for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerTargets<'a> {
    /// Each of these replicas (the live ones, as the caller reads them) that is a target of the
    /// job; the others are left out.
    Each(&'a [String]),
    /// This replica alone, which must be a target of the job.
    Only(&'a str),
}

/// What became of a trigger of a job, as `trigger_fire.lua` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Triggered {
    /// The fire was made: one run per target.
    Fired {
        /// The fire's time (and its runs' due time), ms on Redis's clock.
        fire_ms: i64,
        /// The job is paused: its runs are skipped unless it is resumed first.
        paused: bool,
        /// Each run made and the replica it waits for, in the order the targets were given.
        runs: Vec<(String, String)>,
    },
    /// No replica has published a job of that name.
    UnknownJob,
    /// The job's fires run once, not on every replica: its trigger is an ad-hoc run.
    Once,
    /// The replica asked for does not declare the job, or does not match its `where`.
    NotTarget(String),
    /// None of the replicas given is a target of the job.
    NoTarget,
}

const OPERATION: &str = "trigger_fire";

impl Store {
    /// Triggers a fire of the every-replica job `job` now (see [`Triggered`]); `actor` (who
    /// asks) is recorded on each run made and, once, in the events stream.
    ///
    /// # Errors
    /// Redis errors, or a reply this version does not know.
    pub async fn trigger_fire(
        &self,
        job: &str,
        payload: Option<&str>,
        priority: Option<Priority>,
        targets: TriggerTargets<'_>,
        actor: Option<&str>,
    ) -> Result<Triggered, StoreError> {
        let (mode, replicas) = match targets {
            TriggerTargets::Each(replicas) => ("all", replicas.to_vec()),
            TriggerTargets::Only(replica) => ("one", vec![replica.to_owned()]),
        };
        let priority = priority.map_or("", |priority| match priority {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        });
        let values: Vec<Value> = scripts::TRIGGER_FIRE
            .key(self.keys.defs())
            .key(self.keys.paused())
            .key(self.keys.due())
            .key(self.keys.planned())
            .key(self.keys.hold())
            .key(self.keys.events())
            .arg(self.keys.prefix())
            .arg(self.now_arg())
            .arg(job)
            .arg(payload.unwrap_or_default())
            .arg(priority)
            .arg(mode)
            .arg(actor.unwrap_or_default())
            .arg(self.settings.events_maxlen)
            .arg(&replicas)
            .invoke_async(&mut self.connection.clone())
            .await
            .during(&self.metrics, OPERATION)?;
        // After the status, the fire time and the pause: a run id and its replica per run.
        let runs_made = values.len().saturating_sub(3) / 2;
        let mut reply = Reply::new(OPERATION, values);
        let status: String = reply.next()?;
        let triggered = match status.as_str() {
            "OK" => {
                let fire_ms = reply.next()?;
                let paused = reply.next::<i64>()? == 1;
                let runs = (0..runs_made)
                    .map(|_| Ok((reply.next()?, reply.next()?)))
                    .collect::<Result<_, StoreError>>()?;
                Triggered::Fired {
                    fire_ms,
                    paused,
                    runs,
                }
            }
            "UNKNOWN" => Triggered::UnknownJob,
            "ONCE" => Triggered::Once,
            "NOT-TARGET" => Triggered::NotTarget(reply.next()?),
            "NO-TARGET" => Triggered::NoTarget,
            other => return Err(reply_error(OPERATION, format!("status {other:?}"))),
        };
        reply.finish()?;
        Ok(triggered)
    }
}
