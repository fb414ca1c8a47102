//! A trigger of an every-replica job: a fire now, one run on each of its targets.

use super::{Client, ClientError, check_payload};
use crate::schedule::Priority;
use crate::store::{TriggerTargets, Triggered};

/// The runs a trigger of an every-replica job made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The fire's time, and its runs' due time, ms on Redis's clock.
    pub fire_ms: i64,
    /// The job is paused: its runs are skipped unless it is resumed first.
    pub paused: bool,
    /// Each run made and the replica whose own route it waits in.
    pub runs: Vec<(String, String)>,
}

impl Client {
    /// Triggers a fire of `job` now if it runs on every replica (`on = "every"`): one run on
    /// each of `targets` that declares the job and matches it, each in that replica's own
    /// route and slots, as a fire of the job would make. `Ok(None)` for a job whose fires run
    /// once: its trigger is an ad-hoc run ([`Client::enqueue`] and
    /// [`RunRequest::trigger`](super::RunRequest::trigger)), and nothing was made. Who the
    /// client acts for ([`Client::acting_as`]) is recorded on each run and as the job's action.
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`], [`ClientError::NotATarget`] (the one replica asked for),
    /// [`ClientError::NoTarget`] (none of those given), [`ClientError::Payload`], or Redis
    /// errors.
    pub async fn trigger_fire(
        &self,
        job: &str,
        payload: Option<&str>,
        priority: Option<Priority>,
        targets: TriggerTargets<'_>,
    ) -> Result<Option<Fired>, ClientError> {
        if let Some(payload) = payload {
            check_payload(payload)?;
        }
        match self
            .store
            .trigger_fire(job, payload, priority, targets, self.actor.as_deref())
            .await?
        {
            Triggered::Fired {
                fire_ms,
                paused,
                runs,
            } => Ok(Some(Fired {
                fire_ms,
                paused,
                runs,
            })),
            Triggered::Once => Ok(None),
            Triggered::UnknownJob => Err(ClientError::UnknownJob(job.to_owned())),
            Triggered::NotTarget(replica) => Err(ClientError::NotATarget {
                job: job.to_owned(),
                replica,
            }),
            Triggered::NoTarget => Err(ClientError::NoTarget(job.to_owned())),
        }
    }
}
